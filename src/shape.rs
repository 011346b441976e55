//! Checked shapes: the checks every operation shares, each returning a structured [`Error`], and
//! the sizes they establish ([`AdaptiveGeometry`] and [`MaxPoolGeometry`], with the sizes of the
//! Ascend mask), each made only by the checks that guarantee them.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::geometry::{mask_block_planes, mask_shape, mask_words_per_row, pool_window_origin};
use crate::index::ArgmaxIndex;
use crate::params::{MaxPool2dParams, MaxPool3dParams};
use crate::tensor::{Memory, TensorMut, TensorRef, position, user_dims, with_spatial};

/// The shape `[N, C, ..]` (`K` dimensions) of an array given in the caller's rank: `K`, or
/// `K − 1` without the batch (which becomes 1); `expected` names the ranks and `axes` the
/// dimensions after `N`, each of which must be non-empty (N may be 0). The one check of every
/// operation's ranks: [`pooling_dims`], [`volume_dims`], [`line_dims`].
fn batched_dims<const K: usize>(
    op: &'static str,
    arg: &'static str,
    dims: &[usize],
    expected: &'static str,
    axes: [&'static str; K],
) -> Result<[usize; K]> {
    if dims.len() != K && dims.len() + 1 != K {
        return Err(Error::Rank { op, arg, expected, got: dims.len(), shape: dims.to_vec() });
    }
    let mut shape = [1; K];
    shape[K - dims.len()..].copy_from_slice(dims);
    // (`axes[0]` is the batch's, which may be empty.)
    for (&len, &name) in shape.iter().zip(&axes).skip(1) {
        if len == 0 {
            return Err(Error::EmptyDimension { op, arg, axis: name, shape: dims.to_vec() });
        }
    }
    Ok(shape)
}

/// The 4-D shape `[N, C, H, W]` of a pooling input given in the caller's rank (3 or 4), whose C,
/// H and W must be non-empty (N may be 0).
pub(crate) fn pooling_dims(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<[usize; 4]> {
    batched_dims(op, arg, dims, crate::tensor::RANKS, ["N", "C", "H", "W"])
}

/// [`pooling_dims`] of a view.
pub(crate) fn pooling_input<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E, M>,
) -> Result<[usize; 4]> {
    pooling_dims(op, arg, &t.dims())
}

/// `[ho, wo]` with both entries at least 1.
pub(crate) fn output_size(op: &'static str, arg: &'static str, size: [usize; 2]) -> Result<()> {
    if size.contains(&0) {
        return Err(Error::InvalidParameter {
            op,
            arg,
            expected: "[Ho, Wo] with Ho >= 1 and Wo >= 1".into(),
            got: format!("{size:?}"),
        });
    }
    Ok(())
}

/// `got` must equal `expected` (both in the caller's rank).
pub(crate) fn same_shape(
    op: &'static str,
    arg: &'static str,
    got: &[usize],
    expected: &[usize],
) -> Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(Error::ShapeMismatch { op, arg, expected: expected.to_vec(), got: got.to_vec() })
    }
}

/// Shape check for an input view.
pub(crate) fn input_shape<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E, M>,
    expected: &[usize],
) -> Result<()> {
    same_shape(op, arg, t.user_shape(), expected)
}

/// Shape check for an output view.
pub(crate) fn output_shape<E: Element, M: Memory>(
    op: &'static str,
    arg: &'static str,
    t: &TensorMut<'_, E, M>,
    expected: &[usize],
) -> Result<()> {
    same_shape(op, arg, t.user_shape(), expected)
}

/// The index type `I` must hold every flat position of an `h * w` plane.
pub(crate) fn index_width<I: ArgmaxIndex>(op: &'static str, arg: &'static str, plane: usize) -> Result<()> {
    if (plane as u64) <= I::MAX_PLANE {
        Ok(())
    } else {
        Err(Error::IndexTypeTooNarrow { op, arg, dtype: I::DTYPE, max: I::MAX_PLANE, plane })
    }
}

/// `h * w` without overflow.
pub(crate) fn plane_size(op: &'static str, arg: &'static str, h: usize, w: usize) -> Result<usize> {
    h.checked_mul(w).ok_or_else(|| Error::Overflow { op, arg, what: format!("H * W = {h} * {w}") })
}

/// The error for index `value` found at element `e` of an index tensor of shape `index_dims`
/// (the caller's), whose indices address planes of `plane` positions: every operation's.
pub(crate) fn index_error(
    op: &'static str,
    arg: &'static str,
    (e, value): (usize, i64),
    index_dims: &[usize],
    plane: usize,
) -> Error {
    Error::IndexOutOfRange { op, arg, position: crate::tensor::position_in(e, index_dims), value, plane }
}

/// Sizes of an adaptive pooling: `N` planes of `C` channels, `H x W` pooled to `Ho x Wo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveGeometry {
    /// Batch size (1 for 3-D tensors).
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub ho: usize,
    /// Output width.
    pub wo: usize,
    /// Rank of the caller's tensors (3 or 4).
    pub(crate) ndim: usize,
}

impl AdaptiveGeometry {
    /// Number of `(n, c)` planes.
    pub fn planes(&self) -> usize {
        self.n * self.c
    }

    /// The pooled shape `[N, C, Ho, Wo]` in the caller's rank.
    pub(crate) fn pooled_dims(&self) -> Vec<usize> {
        with_spatial([self.n, self.c, self.h, self.w], [self.ho, self.wo], self.ndim)
    }

    /// The error for index `value` found at element `e` of the indices.
    pub(crate) fn index_error(&self, op: &'static str, arg: &'static str, e: usize, value: i64) -> Error {
        index_error(op, arg, (e, value), &self.pooled_dims(), self.h * self.w)
    }
}

/// Sizes of a max pooling: `N` planes of `C` channels, `H x W` pooled to `Ho x Wo` with `params`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPoolGeometry {
    /// Batch size (1 for 3-D tensors).
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub ho: usize,
    /// Output width.
    pub wo: usize,
    /// The pooling parameters.
    pub params: MaxPool2dParams,
    /// Rank of the caller's tensors (3 or 4).
    pub(crate) ndim: usize,
}

impl MaxPoolGeometry {
    /// Checks `params` on an input of shape `input_dims` (3-D or 4-D, C, H, W non-empty).
    pub(crate) fn checked(
        op: &'static str,
        arg: &'static str,
        params: &MaxPool2dParams,
        input_dims: &[usize],
    ) -> Result<Self> {
        let [n, c, h, w] = pooling_dims(op, arg, input_dims)?;
        let [ho, wo] = params.output_size_for(op, arg, [h, w])?;
        plane_size(op, arg, h, w)?;
        Ok(MaxPoolGeometry { n, c, h, w, ho, wo, params: *params, ndim: input_dims.len() })
    }

    /// Number of `(n, c)` planes.
    pub fn planes(&self) -> usize {
        self.n * self.c
    }

    /// Output positions per plane, `Ho * Wo`.
    pub fn positions(&self) -> usize {
        self.ho * self.wo
    }

    /// The input shape in the caller's rank.
    pub(crate) fn input_dims(&self) -> Vec<usize> {
        user_dims(&[self.n, self.c, self.h, self.w], self.ndim)
    }

    /// The pooled shape `[N, C, Ho, Wo]` in the caller's rank.
    pub(crate) fn pooled_dims(&self) -> Vec<usize> {
        with_spatial([self.n, self.c, self.h, self.w], [self.ho, self.wo], self.ndim)
    }

    /// The position `[n, c, oh, ow]` (caller's rank) of element `e` of the pooled output.
    pub(crate) fn pooled_position(&self, e: usize) -> Vec<usize> {
        position(e, [self.n, self.c, self.ho, self.wo], self.ndim)
    }

    /// The pooling in the caller's terms, for messages: its input shape, kernel and output size.
    pub(crate) fn describe(&self) -> String {
        format!(
            "input {:?}, kernel {:?} and output {}x{}",
            self.input_dims(),
            self.params.kernel(),
            self.ho,
            self.wo
        )
    }

    /// The error for index `value` found at element `e` of the indices (or mask values).
    pub(crate) fn index_error(&self, op: &'static str, arg: &'static str, e: usize, value: i64) -> Error {
        index_error(op, arg, (e, value), &self.pooled_dims(), self.h * self.w)
    }
}

/// The sizes of the Ascend int8 mask of a max pooling (the mask operations' geometry; where each
/// value or bit is stored is the `mask` module's).
impl MaxPoolGeometry {
    /// Checks `params` for a mask operation (dilation 1) on an input of shape `input_dims`.
    pub(crate) fn for_mask(
        op: &'static str,
        arg: &'static str,
        params: &MaxPool2dParams,
        input_dims: &[usize],
    ) -> Result<Self> {
        params.check_mask_op(op)?;
        let g = MaxPoolGeometry::checked(op, arg, params, input_dims)?;
        if g.bytes().is_none() {
            // The kernel is at fault when its offsets alone overflow the smallest mask (one
            // plane, one output: rows of 64 bytes); otherwise the input's size.
            let [kh, kw] = params.kernel();
            let kernel_alone = kh.checked_mul(kw).and_then(|k| k.checked_mul(64)).is_none();
            let what = format!(
                "the mask of N·C·kH·kW·(⌈Ho·Wo/16⌉ + 1)·32 bytes, for {}, exceeds usize::MAX",
                g.describe()
            );
            return Err(Error::Overflow { op, arg: if kernel_alone { "kernel" } else { arg }, what });
        }
        Ok(g)
    }

    pub(crate) fn offsets(&self) -> usize {
        self.params.kernel()[0] * self.params.kernel()[1]
    }

    pub(crate) fn channel_blocks(&self) -> usize {
        self.c.div_ceil(16)
    }

    /// The planes (`n * C + c`) of `Bitmask` block `b = n * channel_blocks + c1`: its channels
    /// `16 * c1 ..` (16, or fewer in the last block of a batch), consecutive planes.
    pub(crate) fn block_planes(&self, b: usize) -> core::ops::Range<usize> {
        mask_block_planes(self.c, b)
    }

    /// `u16` words per `(n, c1, k)` row.
    pub(crate) fn row_words(&self) -> usize {
        // Checked in `new` (through `shape4`).
        mask_words_per_row(self.positions()).unwrap_or(0)
    }

    pub(crate) fn shape4(&self) -> Option<[usize; 4]> {
        mask_shape(self.n, self.c, self.params.kernel(), [self.ho, self.wo])
    }

    /// The mask shape in the caller's rank.
    pub(crate) fn dims(&self) -> Vec<usize> {
        user_dims(&self.shape4().unwrap_or_default(), self.ndim)
    }

    pub(crate) fn bytes(&self) -> Option<usize> {
        self.shape4()?.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// The flat input index read by window offset `k` of output position `p`, or `None` in padding.
    #[inline]
    pub(crate) fn flat_of(&self, p: usize, k: usize) -> Option<usize> {
        let kw = self.params.kernel()[1];
        let (oh, ow) = (p / self.wo, p % self.wo);
        let ih = pool_window_origin(oh, self.params.stride()[0], self.params.padding()[0]) + (k / kw) as i128;
        let iw = pool_window_origin(ow, self.params.stride()[1], self.params.padding()[1]) + (k % kw) as i128;
        let inside = (0..self.h as i128).contains(&ih) && (0..self.w as i128).contains(&iw);
        inside.then(|| ih as usize * self.w + iw as usize)
    }
}

/// The ranks of a 3-D pooling's tensors.
pub(crate) const VOLUME_RANKS: &str = "4 (C, D, H, W) or 5 (N, C, D, H, W)";

/// The 5-D shape `[N, C, D, H, W]` of a 3-D pooling input given in the caller's rank (4 or 5),
/// whose C, D, H and W must be non-empty (N may be 0).
pub(crate) fn volume_dims(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<[usize; 5]> {
    batched_dims(op, arg, dims, VOLUME_RANKS, ["N", "C", "D", "H", "W"])
}

/// `d * h * w` without overflow.
pub(crate) fn volume_size(op: &'static str, arg: &'static str, [d, h, w]: [usize; 3]) -> Result<usize> {
    d.checked_mul(h).and_then(|dh| dh.checked_mul(w)).ok_or_else(|| Error::Overflow {
        op,
        arg,
        what: format!("D * H * W = {d} * {h} * {w}"),
    })
}

/// `[D, H, W]` with every entry at least 1.
pub(crate) fn output_size3(op: &'static str, arg: &'static str, size: [usize; 3]) -> Result<()> {
    if size.contains(&0) {
        return Err(Error::InvalidParameter {
            op,
            arg,
            expected: "[Do, Ho, Wo], each at least 1".into(),
            got: format!("{size:?}"),
        });
    }
    Ok(())
}

/// The sizes every 3-D pooling has: `N` volumes of `C` channels, `D x H x W` pooled to
/// `Do x Ho x Wo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeSizes {
    /// Batch size (1 for 4-D tensors).
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Input `[D, H, W]`.
    pub input: [usize; 3],
    /// Output `[Do, Ho, Wo]`.
    pub output: [usize; 3],
    /// Rank of the caller's tensors (4 or 5).
    pub(crate) ndim: usize,
}

impl VolumeSizes {
    /// Number of `(n, c)` volumes.
    pub fn volumes(&self) -> usize {
        self.n * self.c
    }

    /// The input shape in the caller's rank.
    pub(crate) fn input_dims(&self) -> Vec<usize> {
        let [d, h, w] = self.input;
        [self.n, self.c, d, h, w][5 - self.ndim..].to_vec()
    }

    /// The pooled shape `[N, C, Do, Ho, Wo]` in the caller's rank.
    pub(crate) fn pooled_dims(&self) -> Vec<usize> {
        let [d, h, w] = self.output;
        [self.n, self.c, d, h, w][5 - self.ndim..].to_vec()
    }

    /// The error for index `value` found at element `e` of the indices.
    pub(crate) fn index_error(&self, op: &'static str, arg: &'static str, e: usize, value: i64) -> Error {
        let [d, h, w] = self.input;
        index_error(op, arg, (e, value), &self.pooled_dims(), d * h * w)
    }
}

/// Sizes of an adaptive 3-D pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveGeometry3d {
    /// The volumes and their input and output sizes.
    pub sizes: VolumeSizes,
}

/// Sizes of a 3-D max pooling, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool3dGeometry {
    /// The volumes and their input and output sizes.
    pub sizes: VolumeSizes,
    /// The pooling parameters.
    pub params: MaxPool3dParams,
}

impl MaxPool3dGeometry {
    /// Checks `params` on an input of shape `input_dims` (4-D or 5-D, C, D, H, W non-empty).
    pub(crate) fn checked(
        op: &'static str,
        arg: &'static str,
        params: &MaxPool3dParams,
        input_dims: &[usize],
    ) -> Result<Self> {
        let [n, c, d, h, w] = volume_dims(op, arg, input_dims)?;
        let output = params.output_size_for(op, arg, [d, h, w])?;
        volume_size(op, arg, [d, h, w])?;
        let sizes = VolumeSizes { n, c, input: [d, h, w], output, ndim: input_dims.len() };
        Ok(MaxPool3dGeometry { sizes, params: *params })
    }
}

/// The ranks of a 1-D pooling's arrays.
pub(crate) const LINE_RANKS: &str = "2 (C, L) or 3 (N, C, L)";

/// The 3-D shape `[N, C, L]` of a 1-D pooling's array given in the caller's rank (2 or 3), whose
/// C and L must be non-empty (N may be 0).
pub(crate) fn line_dims(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<[usize; 3]> {
    batched_dims(op, arg, dims, LINE_RANKS, ["N", "C", "L"])
}

/// `dims` (a 1-D pooling's input shape, checked) with its length replaced by `len`.
pub(crate) fn with_length(dims: &[usize], len: usize) -> Vec<usize> {
    let mut pooled = dims.to_vec();
    if let Some(last) = pooled.last_mut() {
        *last = len;
    }
    pooled
}

/// `[N, C]` and the `N` spatial sizes (1, 2 or 3) of a pooling array given in the caller's rank:
/// 2 + `N`, or 1 + `N` without the batch; C and every spatial size non-empty.
pub(crate) fn spatial_dims<const N: usize>(
    op: &'static str,
    arg: &'static str,
    dims: &[usize],
) -> Result<(usize, usize, [usize; N])> {
    if N == 3 {
        let [n, c, d, h, w] = volume_dims(op, arg, dims)?;
        Ok((n, c, core::array::from_fn(|i| [d, h, w][i])))
    } else if N == 1 {
        let [n, c, l] = line_dims(op, arg, dims)?;
        Ok((n, c, core::array::from_fn(|_| l)))
    } else {
        let [n, c, h, w] = pooling_dims(op, arg, dims)?;
        Ok((n, c, core::array::from_fn(|i| [h, w][i])))
    }
}

/// Sizes of an operation that moves values between pooled positions and the positions their
/// flat indices address (max unpooling and its backward, a max pooling's double backward):
/// `planes` `(n, c)` planes of `pooled` indices each, addressing `full` positions each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedGeometry {
    /// Number of `(n, c)` planes.
    pub planes: usize,
    /// Indices per plane.
    pub pooled: usize,
    /// Positions per plane the indices address.
    pub full: usize,
    /// The indices' shape, in the caller's rank (for the positions of errors).
    pub(crate) index_dims: Vec<usize>,
}

impl IndexedGeometry {
    /// The error for index `value` found at element `e` of the indices.
    pub(crate) fn index_error(&self, op: &'static str, e: usize, value: i64) -> Error {
        index_error(op, "indices", (e, value), &self.index_dims, self.full)
    }
}
