//! What every layout of the Ascend int8 mask of `aclnnMaxPool2dWithMask` provides: the public,
//! sealed [`MaskLayout`] and, behind it, the crate's [`internal::LayoutImpl`] (checks, how an
//! encoding splits into parts, encoder and decoder). Each layout implements it in a file of its
//! own ([`super::i32_argmax`], [`super::bitmask`]), the only place that knows where its values or
//! bits are stored.
//!
//! The mask has shape `[N, C, kH·kW, (⌈Ho·Wo/16⌉ + 1)·32]` (3-D input: without `N`) whatever the
//! layout. The byte offsets of the layouts are those of the flat, row-major buffer: the shape is
//! only a container.

use core::fmt;

use ndarray::{Array, ArrayView4, Dimension};

use crate::element::sealed::Sealed;
use crate::tensor::TensorRef;

pub(crate) mod internal {
    use core::ops::Range;

    use super::MaskBytes;
    use crate::error::Result;
    use crate::index::ArgmaxIndex;
    use crate::shape::MaxPoolGeometry;

    /// Where a run of indices is encoded: the pooling, the argument the indices came from
    /// (named in errors), the element (row-major) of the run's first index, and the byte of the
    /// mask where the run's bytes start.
    #[derive(Debug, Clone, Copy)]
    pub struct Run<'g> {
        pub g: &'g MaxPoolGeometry,
        pub arg: &'static str,
        pub first: usize,
        pub base: usize,
    }

    impl<'g> Run<'g> {
        /// A run over every index of the pooling, from element 0 and byte 0.
        pub fn whole(g: &'g MaxPoolGeometry, arg: &'static str) -> Self {
            Run { g, arg, first: 0, base: 0 }
        }
    }

    /// What [`LayoutImpl::visit_selected`] calls with each (output element, input position)
    /// pair a mask selects.
    pub type Visitor<'f> = &'f mut dyn FnMut(usize, usize);

    /// A layout's behaviour: the code of [`MaskLayout`](super::MaskLayout) that the operations
    /// and devices call. Not part of the public API.
    ///
    /// Two properties tell a device which of its kernels can read or write the bytes directly;
    /// a layout states both (they have no default), so a new layout cannot inherit a kernel
    /// that does not fit it.
    pub trait LayoutImpl {
        /// The bytes hold each output position's flat arg-max as a little-endian `i32`, packed
        /// from byte 0 in `N, C, Ho, Wo` order: a forward's `i32` indices are the values, and a
        /// backward can scatter them as they are (once checked against the plane).
        const I32_VALUES: bool;
        /// The encoding's parts are the `(n, 16-channel)` blocks
        /// ([`MaxPoolGeometry::block_planes`]): each part holds the bits of up to 16 planes, so
        /// a forward can encode a block while its indices are in cache, and a backward can read
        /// a block's 16 channels at once.
        const CHANNEL_BLOCKS: bool;

        /// Phase-1 checks of a mask of the sizes of `g` in this layout.
        fn check(g: &MaxPoolGeometry) -> Result<()>;

        /// How many independent parts (for threads) the encoding of `values` indices, row-major
        /// from element 0, splits into.
        fn part_count(g: &MaxPoolGeometry, values: usize) -> usize;

        /// The elements (row-major, in the indices) of part `part`.
        fn part_indices(g: &MaxPoolGeometry, values: usize, part: usize) -> Range<usize>;

        /// The bytes (in the mask) of part `part`; each part's follow the previous part's.
        fn part_bytes(g: &MaxPoolGeometry, values: usize, part: usize) -> Range<usize>;

        /// Encodes `values`, the indices of the pooled output from element `run.first` on in
        /// row-major order, into `out`, the mask's bytes from byte `run.base` on, which must
        /// start zeroed. Reads each index once, in order (so any strided or broadcast source
        /// works without a copy), and stops at the first one the layout cannot hold (outside
        /// its plane, or a place the layout has no room for).
        fn encode_in_order<I: ArgmaxIndex>(
            run: Run<'_>,
            values: impl Iterator<Item = I>,
            out: &mut [i8],
        ) -> Result<()>;

        /// Encodes one part: `indices` (elements from `run.first` on) into `out`, the part's
        /// bytes (from byte `run.base` of the mask), which it fills entirely (zeros where
        /// nothing goes). The first index the layout cannot hold (row-major) is the error.
        fn encode_part<I: ArgmaxIndex>(run: Run<'_>, indices: &[I], out: &mut [i8]) -> Result<()> {
            out.fill(0);
            Self::encode_in_order(run, indices.iter().copied(), out)
        }

        /// Reads the flat arg-max index of every output position (`out.len()` of them) from
        /// the mask `bytes`. The errors name the first position whose bytes do not select
        /// exactly one position of its plane.
        fn decode<I: ArgmaxIndex>(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, out: &mut [I]) -> Result<()>;

        /// Calls `f(element, flat)` for every (output element, input position) pair the mask
        /// selects, in row-major output order (what a backward sums over).
        fn visit_selected(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, f: Visitor<'_>) -> Result<()>;
    }
}

/// A layout of the Ascend int8 mask: [`I32Argmax`](crate::I32Argmax) or
/// [`Bitmask`](crate::Bitmask). Sealed.
pub trait MaskLayout:
    Sealed + internal::LayoutImpl + Copy + Default + fmt::Debug + Send + Sync + 'static
{
    /// The layout's name, for messages.
    const NAME: &'static str;
}

/// A mask's bytes in whatever memory layout its array has, read by their offset in the flat,
/// row-major buffer (the only order the layouts are defined in): directly when the array is in
/// standard layout, through its strides otherwise. Never a copy.
#[derive(Debug, Clone, Copy)]
pub enum MaskBytes<'a> {
    Contiguous(&'a [i8]),
    Strided(ArrayView4<'a, i8>),
}

impl<'a> MaskBytes<'a> {
    /// The bytes of a 3-D or 4-D mask array (as [`Mask`](super::Mask) holds; any other rank reads as empty).
    pub(crate) fn of<D: Dimension>(data: &'a Array<i8, D>) -> Self {
        match data.as_slice() {
            Some(bytes) => MaskBytes::Contiguous(bytes),
            None => match TensorRef::named(data.view(), "mask") {
                Ok(t) => MaskBytes::Strided(t.view()),
                Err(_) => MaskBytes::Contiguous(&[]),
            },
        }
    }

    /// The byte at flat offset `offset`.
    #[inline]
    fn byte(&self, offset: usize) -> u8 {
        match self {
            MaskBytes::Contiguous(bytes) => bytes[offset] as u8,
            MaskBytes::Strided(view) => {
                let [_, c, k, row] = dims4_of(view);
                let (rest, x) = (offset / row, offset % row);
                let (rest, kk) = (rest / k, rest % k);
                view[[rest / c, rest % c, kk, x]] as u8
            }
        }
    }

    /// The little-endian `u16` at byte `offset` (a `Bitmask` word).
    #[inline]
    pub(crate) fn word(&self, offset: usize) -> u16 {
        match self {
            MaskBytes::Contiguous(bytes) => {
                u16::from_le_bytes([bytes[offset] as u8, bytes[offset + 1] as u8])
            }
            MaskBytes::Strided(_) => u16::from_le_bytes([self.byte(offset), self.byte(offset + 1)]),
        }
    }

    /// The little-endian `i32` at byte `4·e` (`I32Argmax` value `e`).
    #[inline]
    pub(crate) fn value(&self, e: usize) -> i32 {
        i32::from_le_bytes(core::array::from_fn(|b| self.byte(4 * e + b)))
    }
}

fn dims4_of(view: &ArrayView4<'_, i8>) -> [usize; 4] {
    let (n, c, k, row) = view.dim();
    [n, c.max(1), k.max(1), row.max(1)]
}
