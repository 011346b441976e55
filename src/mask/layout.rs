//! The byte layouts of the Ascend int8 mask of `aclnnMaxPool2dWithMask`: the layout markers, the
//! mask's sizes, and where each value or bit is stored (this module is the only place that knows).
//!
//! The mask has shape `[N, C, kH·kW, (⌈Ho·Wo/16⌉ + 1)·32]` (3-D input: without `N`) whatever the
//! layout; its bytes mean different things:
//!
//! - [`I32Argmax`] (Atlas A2/A3, kernels other than 1x1): little-endian `i32` flat arg-max values
//!   `ih·W + iw`, packed in `N, C, Ho, Wo` order from byte 0; the rest of the buffer is not read
//!   (the forward writes zeros there).
//! - [`Bitmask`] (Atlas training and 310P, and 1x1 kernels on A2): `u16` words
//!   `[N][⌈C/16⌉][kH·kW][⌈Ho·Wo/16⌉ + 1][16]`; bit `b` (least significant first) of word
//!   `(n, c1, k, p)` says that channel `16·c1 + b` had its first maximum at window offset
//!   `k = i·kW + j` for output position `p = oh·Wo + ow`. Bits of channels `>= C` and words past
//!   `Ho·Wo` are ignored, and the forward leaves them zero.
//!
//! The byte offsets are those of the flat, row-major buffer: the `[N, C, kH·kW, ...]` shape is only
//! a container.

use core::fmt;

use ndarray::{Array, ArrayView4, Dimension};

use crate::element::sealed::Sealed;
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::shape::MaxPoolGeometry;
use crate::tensor::TensorRef;

pub(crate) mod layout_repr {
    /// Which layout a marker stands for. Not part of the public API.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LayoutKind {
        I32Argmax,
        Bitmask,
    }

    /// Maps a layout marker to its kind. Not part of the public API.
    pub trait LayoutRepr {
        const KIND: LayoutKind;
    }
}

use layout_repr::{LayoutKind, LayoutRepr};

/// A layout of the Ascend int8 mask: [`I32Argmax`] or [`Bitmask`]. Sealed.
pub trait MaskLayout: Sealed + LayoutRepr + Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// The layout's name, for messages.
    const NAME: &'static str;
}

/// The layout Atlas A2/A3 write for kernels other than 1x1: `i32` flat arg-max values packed from
/// byte 0. A marker type, and its one value, which chooses the layout where one is passed (as in
/// [`max_pool2d_with_mask`](crate::max_pool2d_with_mask)`(&x, &params, I32Argmax)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct I32Argmax;

/// The legacy layout (Atlas training, 310P, and 1x1 kernels on A2): one bit per channel in
/// 16-channel `u16` words, one word per window offset and output position. A marker type, and its
/// one value (as [`I32Argmax`] is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Bitmask;

impl Sealed for I32Argmax {}
impl Sealed for Bitmask {}
impl LayoutRepr for I32Argmax {
    const KIND: LayoutKind = LayoutKind::I32Argmax;
}
impl LayoutRepr for Bitmask {
    const KIND: LayoutKind = LayoutKind::Bitmask;
}
impl MaskLayout for I32Argmax {
    const NAME: &'static str = "I32Argmax";
}
impl MaskLayout for Bitmask {
    const NAME: &'static str = "Bitmask";
}

/// Phase-1 checks of layout `L` on the sizes of `g`: an `I32Argmax` mask must hold `4·N·C·Ho·Wo` bytes and
/// planes addressable by `i32`.
pub(crate) fn check_layout<L: MaskLayout>(g: &MaxPoolGeometry, op: &'static str) -> Result<()> {
    if L::KIND == LayoutKind::I32Argmax {
        let plane = g.h * g.w;
        if plane as u64 > <i32 as ArgmaxIndex>::MAX_PLANE {
            return Err(Error::IndexTypeTooNarrow {
                op,
                arg: "mask",
                dtype: crate::DType::I32,
                max: <i32 as ArgmaxIndex>::MAX_PLANE,
                plane,
            });
        }
        let need = g.planes().saturating_mul(g.positions()).saturating_mul(4);
        let have = g.bytes().unwrap_or(0);
        if need > have {
            return Err(Error::InvalidParameter {
                op,
                arg: "mask",
                expected: format!(
                    "an I32Argmax mask of {have} bytes to hold 4 * N*C*Ho*Wo = {need} bytes \
                     (on Ascend, 1x1 kernels use the Bitmask layout)"
                ),
                got: format!("kernel {:?}", g.params.kernel()),
            });
        }
    }
    Ok(())
}

/// Byte offset of the `Bitmask` word `(n, c1, k, p)` of a mask of the sizes of `g`.
#[inline]
pub(crate) fn word_offset(g: &MaxPoolGeometry, n: usize, c1: usize, k: usize, p: usize) -> usize {
    2 * (((n * g.channel_blocks() + c1) * g.offsets() + k) * g.row_words() + p)
}

/// The `Bitmask` word at byte `offset`.
#[inline]
pub(crate) fn read_word(bytes: &[i8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset] as u8, bytes[offset + 1] as u8])
}

/// Stores the `Bitmask` word at byte `offset` (little-endian, as [`read_word`] reads it).
#[inline]
pub(crate) fn write_word(bytes: &mut [i8], offset: usize, word: u16) {
    let [lo, hi] = word.to_le_bytes();
    bytes[offset..offset + 2].copy_from_slice(&[lo as i8, hi as i8]);
}

/// `N` consecutive `Bitmask` words from byte `offset` (positions `p..p + N` of one `(n, c1, k)`
/// row), or `None` past the end of `bytes`. A row holds 16 words more than there are positions,
/// so 16 words from any position of a row stay inside that row.
#[inline(always)]
pub(crate) fn read_words<const N: usize>(bytes: &[i8], offset: usize) -> Option<[u16; N]> {
    let run = bytes.get(offset..offset.checked_add(2 * N)?)?;
    Some(core::array::from_fn(|l| u16::from_le_bytes([run[2 * l] as u8, run[2 * l + 1] as u8])))
}

/// Stores `N` consecutive `Bitmask` words from byte `offset` (as [`read_words`] reads them), or
/// `None`, storing nothing, past the end of `bytes`.
#[inline(always)]
pub(crate) fn write_words<const N: usize>(bytes: &mut [i8], offset: usize, words: &[u16; N]) -> Option<()> {
    let run = bytes.get_mut(offset..offset.checked_add(2 * N)?)?;
    for (pair, word) in run.chunks_exact_mut(2).zip(words) {
        let [lo, hi] = word.to_le_bytes();
        pair.copy_from_slice(&[lo as i8, hi as i8]);
    }
    Some(())
}

/// [`read_words`] four to a `u64`: word `4 * q + l` of the run in bits `16 * l..16 * l + 16` of
/// element `q`, so that the lanes of one word can be worked on four at a time.
#[inline(always)]
pub(crate) fn read_word_quads<const Q: usize>(bytes: &[i8], offset: usize) -> Option<[u64; Q]> {
    // (An offset near `usize::MAX` wraps to an empty range, which `get` turns down too.)
    let run: &[u8] = bytemuck::cast_slice(bytes.get(offset..offset.wrapping_add(8 * Q))?);
    let mut quads = [0; Q];
    for (quad, eight) in quads.iter_mut().zip(run.chunks_exact(8)) {
        *quad = u64::from_le_bytes(eight.try_into().unwrap_or_default());
    }
    Some(quads)
}

/// A mask's bytes in whatever memory layout its array has, read by their offset in the flat,
/// row-major buffer (the only order the layouts are defined in): directly when the array is in
/// standard layout, through its strides otherwise. Never a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaskBytes<'a> {
    Contiguous(&'a [i8]),
    Strided(ArrayView4<'a, i8>),
}

impl<'a> MaskBytes<'a> {
    /// The bytes of a 3-D or 4-D mask array (as [`Mask`](super::Mask) holds; any other rank reads as empty).
    pub(crate) fn of<D: Dimension>(data: &'a Array<i8, D>) -> Self {
        match data.as_slice() {
            Some(bytes) => MaskBytes::Contiguous(bytes),
            None => match TensorRef::named(data.view(), "Mask", "mask") {
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

    /// The `Bitmask` word at byte `offset`.
    #[inline]
    pub(crate) fn word(&self, offset: usize) -> u16 {
        match self {
            MaskBytes::Contiguous(bytes) => read_word(bytes, offset),
            MaskBytes::Strided(_) => u16::from_le_bytes([self.byte(offset), self.byte(offset + 1)]),
        }
    }

    /// `I32Argmax` value `e` (little-endian, from byte `4·e`).
    #[inline]
    pub(crate) fn value(&self, e: usize) -> i32 {
        i32::from_le_bytes(core::array::from_fn(|b| self.byte(4 * e + b)))
    }
}

fn dims4_of(view: &ArrayView4<'_, i8>) -> [usize; 4] {
    let (n, c, k, row) = view.dim();
    [n, c.max(1), k.max(1), row.max(1)]
}

/// The `I32Argmax` values as `i32` without copying, when the bytes allow it (a little-endian host
/// and a 4-byte aligned buffer).
pub(crate) fn i32_prefix(bytes: &[i8], count: usize) -> Option<&[i32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    bytemuck::try_cast_slice(bytes.get(..count.checked_mul(4)?)?).ok()
}

/// Whether `I32Argmax` values can be seen as `i32` in `bytes` (given enough of them): on a
/// little-endian host, from a 4-byte boundary. What [`i32_prefix`] and [`i32_prefix_mut`] ask of
/// a buffer besides its length, for deciding in phase 1.
pub(crate) fn i32_in_place(bytes: &[i8]) -> bool {
    cfg!(target_endian = "little") && bytes.as_ptr().addr().is_multiple_of(align_of::<i32>())
}

/// The first `count` `I32Argmax` values of `bytes` as `i32` to write, when the bytes allow it (a
/// little-endian host and a 4-byte aligned buffer): a forward can pool its indices straight
/// into them.
pub(crate) fn i32_prefix_mut(bytes: &mut [i8], count: usize) -> Option<&mut [i32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    bytemuck::try_cast_slice_mut(bytes.get_mut(..count.checked_mul(4)?)?).ok()
}

/// Copies the `I32Argmax` values of any mask view (logical row-major byte order) into `out`.
pub(crate) fn read_i32_prefix(view: ArrayView4<'_, i8>, out: &mut [i32]) {
    let mut bytes = view.iter().map(|&b| b as u8);
    for v in out {
        let mut b = [0u8; 4];
        for x in &mut b {
            *x = bytes.next().unwrap_or(0);
        }
        *v = i32::from_le_bytes(b);
    }
}
