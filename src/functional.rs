//! The free functions: the crate's entry points on the default [`Cpu`].
//!
//! Each is a one-line shorthand for the method of the same name of [`On`], the handle that binds
//! a device (`poolgrad::on(&device)`), where the operation is implemented once. Every form takes
//! `&ArrayRef` (owned arrays, views and mutable views all pass as they are) of rank 3
//! (`[C, H, W]`) or 4 (`[N, C, H, W]`) with any strides, and returns arrays of the input's rank.
//! The `_into` forms (PyTorch's `out=`) write into arrays or views the caller owns, of any
//! strides, with the same checks: a training loop that reuses its buffers allocates nothing per
//! step.

use ndarray::{Array, ArrayRef};

use crate::device::cpu::Cpu;
use crate::element::PoolFloat;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout};
#[cfg(doc)]
use crate::on::On;
use crate::on::{Pooled, PooledMask, on};
use crate::params::{MaxPool1dParams, MaxPool2dParams, MaxPool3dParams};
use crate::tensor::{LineDim, PoolDim, VolumeDim};

/// Adaptive 2-D max pooling of `input` to `output_size = [Ho, Wo]`, with PyTorch's semantics
/// (first maximum wins; a NaN wins and a later NaN replaces it). `Ho > H` and `Wo > W` are allowed.
/// The indices are `i64`, as PyTorch returns them; [`adaptive_max_pool2d_i32`] gives `i32`.
///
/// ```
/// use ndarray::array;
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let p = poolgrad::adaptive_max_pool2d(&x, [2, 2])?;
/// assert_eq!(p.output, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(p.indices, array![[[1i64, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`] (an `IxDyn` input of another rank), [`Error::EmptyDimension`],
/// [`Error::InvalidParameter`] for a zero in `output_size`, [`Error::IndexTypeTooNarrow`] when
/// `H * W` exceeds the index type, [`Error::Overflow`] / [`Error::Allocation`] when the output
/// cannot be allocated.
pub fn adaptive_max_pool2d<T: PoolFloat, D: PoolDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).adaptive_max_pool2d(input, output_size)
}

/// [`adaptive_max_pool2d`] with `i32` indices (half the memory; planes up to `2^31` positions).
///
/// ```
/// use ndarray::array;
/// let x = array![[[1.0f32, 3.0], [2.0, 0.0]]];
/// let p = poolgrad::adaptive_max_pool2d_i32(&x, [1, 1])?;
/// assert_eq!(p.indices, array![[[1i32]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool2d`].
pub fn adaptive_max_pool2d_i32<T: PoolFloat, D: PoolDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).adaptive_max_pool2d_i32(input, output_size)
}

/// [`adaptive_max_pool2d`] into `output` and `indices` (PyTorch's `out=`): arrays or views of
/// any strides, of the pooled shape `[N, C, Ho, Wo]` (the input's rank). The index type is the
/// one `indices` holds, `i64` or `i32`. On an error nothing is promised about their contents.
///
/// ```
/// use ndarray::{Array3, array};
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let (mut out, mut idx) = (Array3::<f32>::zeros((1, 2, 2)), Array3::<i32>::zeros((1, 2, 2)));
/// poolgrad::adaptive_max_pool2d_into(&x, [2, 2], &mut out, &mut idx)?;
/// assert_eq!(out, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(idx, array![[[1, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool2d`], and [`Error::ShapeMismatch`] for an `output` or `indices` of
/// another shape.
pub fn adaptive_max_pool2d_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool2d_into(input, output_size, output, indices)
}

/// Gradient of [`adaptive_max_pool2d`] (`aclnnAdaptiveMaxPool2dBackward`): each
/// `grad_output[n, c, oh, ow]` is added to `grad_input[n, c, idx]`, `idx = indices[n, c, oh, ow]`,
/// in row-major output order; positions no index points at are zero. `self_` is the forward
/// input: only its shape is read.
///
/// f32 and f64 results equal PyTorch's CPU kernel bit for bit; f16 and bf16 sum in f32 and round
/// once. Results do not depend on the number of threads.
///
/// ```
/// use ndarray::array;
/// let x = array![[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]];
/// let p = poolgrad::adaptive_max_pool2d_i32(&x, [2, 2])?; // overlapping windows
/// assert_eq!(p.indices, array![[[4, 4], [4, 4]]]);
/// let g = array![[[1.0f32, 2.0], [3.0, 4.0]]];
/// let gi = poolgrad::adaptive_max_pool2d_backward(&g, &x, &p.indices)?;
/// assert_eq!(gi, array![[[0.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::ShapeMismatch`] when `grad_output` or `indices` is not
/// `[N, C, Ho, Wo]` for `self_ = [N, C, H, W]`, [`Error::EmptyDimension`],
/// [`Error::IndexOutOfRange`] for an index outside `[0, H*W)`, [`Error::Overflow`] /
/// [`Error::Allocation`].
pub fn adaptive_max_pool2d_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).adaptive_max_pool2d_backward(grad_output, self_, indices)
}

/// [`adaptive_max_pool2d_backward`] into `grad_input` (PyTorch's `out=`): an array or view of
/// any strides, of `self_`'s shape. Its contents are replaced, not added to.
///
/// ```
/// use ndarray::{Array3, array};
/// let x = array![[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]];
/// let p = poolgrad::adaptive_max_pool2d(&x, [2, 2])?;
/// let mut gi = Array3::<f32>::from_elem((1, 3, 3), 7.0); // reused from an earlier step
/// poolgrad::adaptive_max_pool2d_backward_into(&array![[[1.0f32, 2.0], [3.0, 4.0]]], &x, &p.indices, &mut gi)?;
/// assert_eq!(gi, array![[[0.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool2d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn adaptive_max_pool2d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool2d_backward_into(grad_output, self_, indices, grad_input)
}

/// 2-D max pooling with PyTorch's semantics and flat indices (`max_pool2d_with_indices`):
/// kernel, stride, padding (at most half the kernel, never selected), dilation, ceil mode. The
/// indices are `i64`, as PyTorch returns them; [`max_pool2d_with_indices_i32`] gives `i32`.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let p = poolgrad::max_pool2d_with_indices(&x, &MaxPool2dParams::new([2, 2]))?;
/// assert_eq!(p.output, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(p.indices, array![[[1i64, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// The parameter errors of [`MaxPool2dParams::output_size`], [`Error::Rank`] (an `IxDyn` input
/// of another rank), [`Error::EmptyDimension`], [`Error::IndexTypeTooNarrow`],
/// [`Error::Overflow`], [`Error::Allocation`].
pub fn max_pool2d_with_indices<T: PoolFloat, D: PoolDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).max_pool2d_with_indices(input, params)
}

/// [`max_pool2d_with_indices`] with `i32` indices (half the memory; planes up to `2^31`
/// positions).
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[1.0f32, 3.0], [2.0, 0.0]]];
/// let p = poolgrad::max_pool2d_with_indices_i32(&x, &MaxPool2dParams::new([2, 2]))?;
/// assert_eq!(p.indices, array![[[1i32]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices`].
pub fn max_pool2d_with_indices_i32<T: PoolFloat, D: PoolDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).max_pool2d_with_indices_i32(input, params)
}

/// [`max_pool2d_with_indices`] into `output` and `indices` (PyTorch's `out=`): arrays or views
/// of any strides, of the pooled shape (the input's rank). The index type is the one `indices`
/// holds, `i64` or `i32`. On an error nothing is promised about their contents.
///
/// ```
/// use ndarray::{Array3, array};
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let (mut out, mut idx) = (Array3::<f32>::zeros((1, 2, 2)), Array3::<i64>::zeros((1, 2, 2)));
/// poolgrad::max_pool2d_with_indices_into(&x, &MaxPool2dParams::new([2, 2]), &mut out, &mut idx)?;
/// assert_eq!(out, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(idx, array![[[1, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices`], and [`Error::ShapeMismatch`] for an `output` or `indices` of
/// another shape.
pub fn max_pool2d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool2d_with_indices_into(input, params, output, indices)
}

/// Gradient of [`max_pool2d_with_indices`]: `grad_input[n, c, idx] += grad_output[n, c, oh, ow]`
/// in row-major output order (bit-equal to PyTorch for f32/f64; f16/bf16 summed in f32).
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]];
/// let params = MaxPool2dParams::new([2, 2]).with_stride([1, 1]); // overlapping windows
/// let p = poolgrad::max_pool2d_with_indices_i32(&x, &params)?;
/// let g = array![[[1.0f32, 2.0], [3.0, 4.0]]];
/// let gx = poolgrad::max_pool2d_with_indices_backward(&g, &x, &p.indices, &params)?;
/// assert_eq!(gx[[0, 1, 1]], 10.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices`], plus [`Error::ShapeMismatch`] and
/// [`Error::IndexOutOfRange`].
pub fn max_pool2d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool2dParams,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool2d_with_indices_backward(grad_output, self_, indices, params)
}

/// [`max_pool2d_with_indices_backward`] into `grad_input` (PyTorch's `out=`): an array or view
/// of any strides, of `self_`'s shape. Its contents are replaced, not added to.
///
/// ```
/// use ndarray::{Array3, array};
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]];
/// let params = MaxPool2dParams::new([2, 2]).with_stride([1, 1]);
/// let p = poolgrad::max_pool2d_with_indices(&x, &params)?;
/// let mut gx = Array3::<f32>::from_elem((1, 3, 3), 7.0);
/// poolgrad::max_pool2d_with_indices_backward_into(&array![[[1.0f32, 2.0], [3.0, 4.0]]], &x, &p.indices, &params, &mut gx)?;
/// assert_eq!(gx, array![[[0.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn max_pool2d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool2dParams,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool2d_with_indices_backward_into(grad_output, self_, indices, params, grad_input)
}

/// 2-D max pooling that records its arg-max as an Ascend int8 mask in `layout`
/// (`aclnnMaxPool2dWithMask`): [`I32Argmax`](crate::I32Argmax), as Atlas A2/A3 write it, or
/// [`Bitmask`](crate::Bitmask), the legacy layout. Dilation must be 1 and padding at most half
/// the kernel. The mask carries its parameters: its backward needs no `params`.
///
/// ```
/// use ndarray::array;
/// use poolgrad::{Bitmask, I32Argmax, MaxPool2dParams};
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let params = MaxPool2dParams::new([2, 2]);
/// let a2 = poolgrad::max_pool2d_with_mask(&x, &params, I32Argmax)?;
/// assert_eq!(a2.mask.as_array().shape(), &[1, 4, 64]);
/// let legacy = poolgrad::max_pool2d_with_mask(&x, &params, Bitmask)?;
/// assert_eq!(legacy.mask.to_indices::<i64>()?, a2.mask.to_indices::<i64>()?);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices`], plus [`Error::InvalidParameter`] for a dilation other than 1
/// or an `I32Argmax` mask too small for its values (1x1 kernels).
pub fn max_pool2d_with_mask<T: PoolFloat, L: MaskLayout, D: PoolDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
    layout: L,
) -> Result<PooledMask<T, L, D>> {
    on(&Cpu::default()).max_pool2d_with_mask(input, params, layout)
}

/// [`max_pool2d_with_mask`] into `output` and `mask` (PyTorch's `out=`), with the parameters the
/// mask carries: `mask` comes from an earlier call (or [`Mask::zeros`]) for an input of this
/// shape, and its bytes are replaced. `output` is an array or view of any strides, of the pooled
/// shape. On an error nothing is promised about their contents.
///
/// ```
/// use ndarray::{Array3, array};
/// use poolgrad::{Bitmask, Mask, MaxPool2dParams};
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let mut mask = Mask::zeros(&MaxPool2dParams::new([2, 2]), &[1, 4, 4], Bitmask)?;
/// let mut out = Array3::<f32>::zeros((1, 2, 2));
/// poolgrad::max_pool2d_with_mask_into(&x, &mut out, &mut mask)?;
/// assert_eq!(out, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(mask.to_indices::<i64>()?, array![[[1, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_mask`], [`Error::ShapeMismatch`] for an `input` of another shape than the
/// mask's or an `output` of another shape than the pooled one.
pub fn max_pool2d_with_mask_into<T: PoolFloat, L: MaskLayout, D: PoolDim>(
    input: &ArrayRef<T, D>,
    output: &mut ArrayRef<T, D>,
    mask: &mut Mask<L, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool2d_with_mask_into(input, output, mask)
}

/// Gradient of [`max_pool2d_with_mask`] (`aclnnMaxPool2dWithMaskBackward`), for either layout,
/// with the parameters the mask carries. Equal to [`max_pool2d_with_indices_backward`] with the
/// indices the mask encodes.
///
/// ```
/// use ndarray::array;
/// use poolgrad::{Bitmask, MaxPool2dParams};
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let p = poolgrad::max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), Bitmask)?;
/// let g = array![[[1.0f32, 2.0], [3.0, 4.0]]];
/// let gx = poolgrad::max_pool2d_with_mask_backward(&g, &x, &p.mask)?;
/// assert_eq!(gx, array![[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0], [3.0, 0.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices_backward`], plus [`Error::ShapeMismatch`] when the mask was made
/// for another input shape.
pub fn max_pool2d_with_mask_backward<T: PoolFloat, L: MaskLayout, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    mask: &Mask<L, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool2d_with_mask_backward(grad_output, self_, mask)
}

/// [`max_pool2d_with_mask_backward`] into `grad_input` (PyTorch's `out=`): an array or view of
/// any strides, of `self_`'s shape. Its contents are replaced, not added to.
///
/// ```
/// use ndarray::{Array3, array};
/// use poolgrad::{I32Argmax, MaxPool2dParams};
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let p = poolgrad::max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), I32Argmax)?;
/// let mut gx = Array3::<f32>::from_elem((1, 4, 4), 7.0);
/// poolgrad::max_pool2d_with_mask_backward_into(&array![[[1.0f32, 2.0], [3.0, 4.0]]], &x, &p.mask, &mut gx)?;
/// assert_eq!(gx, array![[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0], [3.0, 0.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_mask_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn max_pool2d_with_mask_backward_into<T: PoolFloat, L: MaskLayout, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    mask: &Mask<L, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool2d_with_mask_backward_into(grad_output, self_, mask, grad_input)
}

/// Adaptive 3-D max pooling of `input` (`[N, C, D, H, W]` or `[C, D, H, W]`) to
/// `output_size = [Do, Ho, Wo]`, with PyTorch's semantics: each axis takes the adaptive windows
/// of [`adaptive_max_pool2d`], and each window its first maximum in row-major `(d, h, w)` order
/// (a NaN wins and a later NaN replaces it). The indices are flat in each volume,
/// `(id * H + ih) * W + iw`, `i64` as PyTorch returns them.
///
/// ```
/// use ndarray::Array5;
/// let x = Array5::from_shape_fn((1, 1, 4, 4, 4), |(_, _, d, h, w)| (d * 16 + h * 4 + w) as f32);
/// let p = poolgrad::adaptive_max_pool3d(&x, [2, 2, 2])?;
/// // Each window's maximum is its last element: (d, h, w) = (1, 1, 1) of a 2x2x2 block.
/// assert_eq!(p.indices[[0, 0, 0, 0, 0]], 16 + 4 + 1);
/// assert_eq!(p.output[[0, 0, 1, 1, 1]], 63.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`] (an `IxDyn` input of another rank), [`Error::EmptyDimension`],
/// [`Error::InvalidParameter`] for a zero in `output_size`, [`Error::IndexTypeTooNarrow`] when
/// `D * H * W` exceeds the index type, [`Error::Overflow`] / [`Error::Allocation`] when the
/// output cannot be allocated.
pub fn adaptive_max_pool3d<T: PoolFloat, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 3],
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).adaptive_max_pool3d(input, output_size)
}

/// [`adaptive_max_pool3d`] with `i32` indices (volumes up to `2^31` positions; CANN's 3-D
/// operators take `i32` indices only).
///
/// ```
/// let x = ndarray::Array4::<f32>::zeros((1, 2, 2, 2));
/// let p = poolgrad::adaptive_max_pool3d_i32(&x, [1, 1, 1])?;
/// assert_eq!(p.indices[[0, 0, 0, 0]], 0i32); // all equal: the first
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool3d`].
pub fn adaptive_max_pool3d_i32<T: PoolFloat, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 3],
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).adaptive_max_pool3d_i32(input, output_size)
}

/// [`adaptive_max_pool3d`] into arrays the caller owns (any strides; a 5-D output's `D` and `H`
/// axes must merge, as in a standard or channels-last layout).
///
/// ```
/// use ndarray::{Array4, Array5};
/// let x = Array5::<f32>::ones((2, 3, 4, 4, 4));
/// let (mut out, mut idx) = (Array5::<f32>::zeros((2, 3, 2, 2, 2)), Array5::<i32>::zeros((2, 3, 2, 2, 2)));
/// poolgrad::adaptive_max_pool3d_into(&x, [2, 2, 2], &mut out, &mut idx)?;
/// assert_eq!(out.sum(), 48.0);
/// # let _ = Array4::<f32>::zeros((1, 1, 1, 1));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool3d`], and [`Error::ShapeMismatch`] for outputs of another shape,
/// [`Error::Layout`] for an output whose `D` and `H` axes do not merge.
pub fn adaptive_max_pool3d_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 3],
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool3d_into(input, output_size, output, indices)
}

/// Backward of [`adaptive_max_pool3d`] (`aclnnAdaptiveMaxPool3dBackward`): `grad_input` of
/// `self_`'s shape, zero except at the indices, where the gradients are summed in row-major
/// output order (`f32` sums rounded once for the half types).
///
/// ```
/// use ndarray::Array5;
/// let x = Array5::from_shape_fn((1, 1, 2, 2, 2), |(_, _, d, h, w)| (d * 4 + h * 2 + w) as f32);
/// let p = poolgrad::adaptive_max_pool3d(&x, [1, 1, 1])?;
/// let g = Array5::from_elem((1, 1, 1, 1, 1), 2.5f32);
/// let gx = poolgrad::adaptive_max_pool3d_backward(&g, &x, &p.indices)?;
/// assert_eq!(gx[[0, 0, 1, 1, 1]], 2.5);
/// assert_eq!(gx.sum(), 2.5);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when `grad_output` or
/// `indices` do not match each other and `self_`, [`Error::IndexOutOfRange`] for the first
/// index (row-major) outside `0..D*H*W`.
pub fn adaptive_max_pool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).adaptive_max_pool3d_backward(grad_output, self_, indices)
}

/// [`adaptive_max_pool3d_backward`] into an array the caller owns.
///
/// ```
/// use ndarray::Array4;
/// let x = Array4::<f32>::zeros((1, 2, 2, 2));
/// let (g, idx) = (Array4::from_elem((1, 1, 1, 1), 1.0f32), Array4::from_elem((1, 1, 1, 1), 7i64));
/// let mut gx = Array4::from_elem((1, 2, 2, 2), 9.0f32);
/// poolgrad::adaptive_max_pool3d_backward_into(&g, &x, &idx, &mut gx)?;
/// assert_eq!((gx[[0, 1, 1, 1]], gx.sum()), (1.0, 1.0));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool3d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn adaptive_max_pool3d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool3d_backward_into(grad_output, self_, indices, grad_input)
}

/// 3-D max pooling with flat indices, as PyTorch's `max_pool3d(.., return_indices=True)`
/// (`aclnnMaxPool3dWithArgmax`): kernel, stride, padding, dilation and ceil mode per axis
/// ([`MaxPool3dParams`]); each window's first maximum in row-major `(d, h, w)` order (a NaN
/// wins and a later NaN replaces it); padding is never selected. Indices flat in each volume,
/// `(id * H + ih) * W + iw`.
///
/// ```
/// use ndarray::Array5;
/// use poolgrad::MaxPool3dParams;
/// let x = Array5::from_shape_fn((1, 1, 4, 4, 4), |(_, _, d, h, w)| ((d * 16 + h * 4 + w) * 37 % 64) as f32);
/// let p = poolgrad::max_pool3d_with_indices(&x, &MaxPool3dParams::new([2, 2, 2]))?;
/// assert_eq!(p.output.dim(), (1, 1, 2, 2, 2));
/// assert!(p.output.iter().zip(&p.indices).all(|(&v, &i)| x.as_slice().unwrap()[i as usize] == v));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// The parameter errors of [`MaxPool3dParams::output_size`](crate::MaxPoolParams::output_size),
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::IndexTypeTooNarrow`], and
/// [`Error::Overflow`] / [`Error::Allocation`] when the output cannot be allocated.
pub fn max_pool3d_with_indices<T: PoolFloat, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool3dParams,
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).max_pool3d_with_indices(input, params)
}

/// [`max_pool3d_with_indices`] with `i32` indices.
///
/// ```
/// let x = ndarray::Array4::<f32>::ones((3, 2, 2, 2));
/// let p = poolgrad::max_pool3d_with_indices_i32(&x, &poolgrad::MaxPool3dParams::new([2, 2, 2]))?;
/// assert_eq!(p.indices.iter().copied().collect::<Vec<i32>>(), [0, 0, 0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool3d_with_indices`].
pub fn max_pool3d_with_indices_i32<T: PoolFloat, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool3dParams,
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).max_pool3d_with_indices_i32(input, params)
}

/// [`max_pool3d_with_indices`] into arrays the caller owns.
///
/// ```
/// use ndarray::Array5;
/// let x = Array5::<f32>::ones((1, 1, 4, 4, 4));
/// let (mut out, mut idx) = (Array5::<f32>::zeros((1, 1, 2, 2, 2)), Array5::<i64>::zeros((1, 1, 2, 2, 2)));
/// poolgrad::max_pool3d_with_indices_into(&x, &poolgrad::MaxPool3dParams::new([2, 2, 2]), &mut out, &mut idx)?;
/// assert_eq!(idx[[0, 0, 1, 1, 1]], 2 * 16 + 2 * 4 + 2);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool3d_with_indices`], and [`Error::ShapeMismatch`] for outputs of another shape,
/// [`Error::Layout`] for an output whose `D` and `H` axes do not merge.
pub fn max_pool3d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool3dParams,
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool3d_with_indices_into(input, params, output, indices)
}

/// Backward of [`max_pool3d_with_indices`] (`aclnnMaxPool3dWithArgmaxBackward`): the gradients
/// summed at their indices in row-major output order, zero elsewhere.
///
/// ```
/// use ndarray::Array5;
/// use poolgrad::MaxPool3dParams;
/// let params = MaxPool3dParams::new([2, 2, 2]).with_stride([1, 1, 1]);
/// let x = Array5::<f32>::zeros((1, 1, 3, 3, 3)); // all equal: every window picks its first tap
/// let p = poolgrad::max_pool3d_with_indices(&x, &params)?;
/// let gx = poolgrad::max_pool3d_with_indices_backward(&p.output.mapv(|_| 1.0), &x, &p.indices, &params)?;
/// assert_eq!(gx[[0, 0, 0, 0, 0]], 1.0);
/// assert_eq!(gx.sum(), 8.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool3d_backward`], and the parameter errors of [`max_pool3d_with_indices`].
pub fn max_pool3d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool3dParams,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool3d_with_indices_backward(grad_output, self_, indices, params)
}

/// [`max_pool3d_with_indices_backward`] into an array the caller owns.
///
/// ```
/// use ndarray::Array5;
/// use poolgrad::MaxPool3dParams;
/// let x = Array5::<f32>::zeros((1, 1, 2, 2, 2));
/// let (g, idx) = (Array5::from_elem((1, 1, 1, 1, 1), 3.0f32), Array5::from_elem((1, 1, 1, 1, 1), 5i64));
/// let mut gx = Array5::<f32>::zeros((1, 1, 2, 2, 2));
/// poolgrad::max_pool3d_with_indices_backward_into(&g, &x, &idx, &MaxPool3dParams::new([2, 2, 2]), &mut gx)?;
/// assert_eq!(gx[[0, 0, 1, 0, 1]], 3.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool3d_with_indices_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn max_pool3d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool3dParams,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool3d_with_indices_backward_into(grad_output, self_, indices, params, grad_input)
}

/// 1-D max pooling with flat indices, as PyTorch's `max_pool1d(.., return_indices=True)`: on
/// `[N, C, L]` or `[C, L]`, kernel, stride, padding, dilation and ceil mode along `L`
/// ([`MaxPool1dParams`]); each window's first maximum (a NaN wins and a later NaN replaces it);
/// indices are positions along `L`. It is the 2-D pooling of planes one row high, as in PyTorch.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool1dParams;
/// let x = array![[1.0f32, 5.0, 2.0, 5.0, 0.0, 3.0]];
/// let p = poolgrad::max_pool1d_with_indices(&x, &MaxPool1dParams::new([2]))?;
/// assert_eq!(p.output, array![[5.0, 5.0, 3.0]]);
/// assert_eq!(p.indices, array![[1i64, 3, 5]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// The parameter errors of [`MaxPool1dParams::output_size`](crate::MaxPoolParams::output_size),
/// [`Error::Rank`] (an `IxDyn` input of another rank), [`Error::EmptyDimension`],
/// [`Error::IndexTypeTooNarrow`], and [`Error::Overflow`] / [`Error::Allocation`].
pub fn max_pool1d_with_indices<T: PoolFloat, D: LineDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool1dParams,
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).max_pool1d_with_indices(input, params)
}

/// [`max_pool1d_with_indices`] with `i32` indices.
///
/// ```
/// let x = ndarray::array![[[0.0f32, 1.0, 1.0]]];
/// let p = poolgrad::max_pool1d_with_indices_i32(&x, &poolgrad::MaxPool1dParams::new([3]))?;
/// assert_eq!(p.indices, ndarray::array![[[1i32]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool1d_with_indices`].
pub fn max_pool1d_with_indices_i32<T: PoolFloat, D: LineDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool1dParams,
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).max_pool1d_with_indices_i32(input, params)
}

/// [`max_pool1d_with_indices`] into arrays the caller owns.
///
/// ```
/// use ndarray::{Array2, array};
/// let x = array![[4.0f32, 1.0, 2.0, 8.0]];
/// let (mut out, mut idx) = (Array2::<f32>::zeros((1, 2)), Array2::<i64>::zeros((1, 2)));
/// poolgrad::max_pool1d_with_indices_into(&x, &poolgrad::MaxPool1dParams::new([2]), &mut out, &mut idx)?;
/// assert_eq!((out, idx), (array![[4.0, 8.0]], array![[0, 3]]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool1d_with_indices`], and [`Error::ShapeMismatch`] for outputs of another shape.
pub fn max_pool1d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool1dParams,
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool1d_with_indices_into(input, params, output, indices)
}

/// Backward of [`max_pool1d_with_indices`]: the gradients summed at their indices in output
/// order, zero elsewhere.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool1dParams;
/// let params = MaxPool1dParams::new([2]).with_stride([1]);
/// let x = array![[1.0f32, 3.0, 2.0]];
/// let p = poolgrad::max_pool1d_with_indices(&x, &params)?; // both windows pick 3.0
/// let gx = poolgrad::max_pool1d_with_indices_backward(&array![[1.0f32, 2.0]], &x, &p.indices, &params)?;
/// assert_eq!(gx, array![[0.0, 3.0, 0.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool1d_with_indices`]; [`Error::ShapeMismatch`] when `grad_output` or `indices` do
/// not have the pooled shape; [`Error::IndexOutOfRange`] for the first index outside `0..L`.
pub fn max_pool1d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool1dParams,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool1d_with_indices_backward(grad_output, self_, indices, params)
}

/// [`max_pool1d_with_indices_backward`] into an array the caller owns.
///
/// ```
/// use ndarray::array;
/// let mut gx = array![[7.0f32, 7.0]];
/// let params = poolgrad::MaxPool1dParams::new([2]);
/// poolgrad::max_pool1d_with_indices_backward_into(&array![[2.0f32]], &array![[0.0f32, 0.0]], &array![[1i64]], &params, &mut gx)?;
/// assert_eq!(gx, array![[0.0, 2.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool1d_with_indices_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn max_pool1d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool1dParams,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool1d_with_indices_backward_into(grad_output, self_, indices, params, grad_input)
}

/// Adaptive 1-D max pooling of `[N, C, L]` or `[C, L]` to `output_size` positions, with
/// PyTorch's windows (`⌊i·L/Lo⌋ .. ⌈(i+1)·L/Lo⌉`) and selection rule; indices along `L`.
///
/// ```
/// use ndarray::array;
/// let x = array![[0.0f32, 5.0, 1.0, 4.0, 9.0]];
/// let p = poolgrad::adaptive_max_pool1d(&x, 3)?; // windows 0..2, 1..4, 3..5
/// assert_eq!(p.output, array![[5.0, 5.0, 9.0]]);
/// assert_eq!(p.indices, array![[1i64, 1, 4]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::InvalidParameter`] for an
/// `output_size` of 0, [`Error::IndexTypeTooNarrow`], [`Error::Overflow`] /
/// [`Error::Allocation`].
pub fn adaptive_max_pool1d<T: PoolFloat, D: LineDim>(
    input: &ArrayRef<T, D>,
    output_size: usize,
) -> Result<Pooled<T, i64, D>> {
    on(&Cpu::default()).adaptive_max_pool1d(input, output_size)
}

/// [`adaptive_max_pool1d`] with `i32` indices.
///
/// ```
/// let x = ndarray::array![[2.0f32, 2.0]];
/// assert_eq!(poolgrad::adaptive_max_pool1d_i32(&x, 1)?.indices, ndarray::array![[0i32]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool1d`].
pub fn adaptive_max_pool1d_i32<T: PoolFloat, D: LineDim>(
    input: &ArrayRef<T, D>,
    output_size: usize,
) -> Result<Pooled<T, i32, D>> {
    on(&Cpu::default()).adaptive_max_pool1d_i32(input, output_size)
}

/// [`adaptive_max_pool1d`] into arrays the caller owns.
///
/// ```
/// use ndarray::{Array2, array};
/// let (mut out, mut idx) = (Array2::<f32>::zeros((1, 1)), Array2::<i32>::zeros((1, 1)));
/// poolgrad::adaptive_max_pool1d_into(&array![[1.0f32, 3.0]], 1, &mut out, &mut idx)?;
/// assert_eq!((out[[0, 0]], idx[[0, 0]]), (3.0, 1));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool1d`], and [`Error::ShapeMismatch`] for outputs of another shape.
pub fn adaptive_max_pool1d_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    input: &ArrayRef<T, D>,
    output_size: usize,
    output: &mut ArrayRef<T, D>,
    indices: &mut ArrayRef<I, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool1d_into(input, output_size, output, indices)
}

/// Backward of [`adaptive_max_pool1d`]; `Lo` is read from `grad_output`.
///
/// ```
/// use ndarray::array;
/// let x = array![[0.0f32, 5.0, 1.0, 4.0, 9.0]];
/// let p = poolgrad::adaptive_max_pool1d(&x, 3)?;
/// let gx = poolgrad::adaptive_max_pool1d_backward(&array![[1.0f32, 2.0, 4.0]], &x, &p.indices)?;
/// assert_eq!(gx, array![[0.0, 3.0, 0.0, 0.0, 4.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when `grad_output` or
/// `indices` do not match each other and `self_`, [`Error::IndexOutOfRange`] for the first
/// index outside `0..L`.
pub fn adaptive_max_pool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).adaptive_max_pool1d_backward(grad_output, self_, indices)
}

/// [`adaptive_max_pool1d_backward`] into an array the caller owns.
///
/// ```
/// use ndarray::array;
/// let mut gx = array![[5.0f32, 5.0, 5.0]];
/// poolgrad::adaptive_max_pool1d_backward_into(&array![[1.5f32]], &array![[0.0f32, 0.0, 0.0]], &array![[2i32]], &mut gx)?;
/// assert_eq!(gx, array![[0.0, 0.0, 1.5]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool1d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of
/// another shape.
pub fn adaptive_max_pool1d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).adaptive_max_pool1d_backward_into(grad_output, self_, indices, grad_input)
}

/// Max unpooling over 2 spatial axes (PyTorch's `max_unpool2d`, CANN's `aclnnMaxUnpool2d`):
/// an output of `input`'s batch and channels and spatial size `output_size`, zero but at
/// `indices`, flat in each output plane, where `input`'s values go. Where indices of a plane
/// repeat, the last in row-major order wins, and [`max_unpool2d_backward`] gives the gradient
/// to that one alone: forward and backward agree (PyTorch's CPU result is unspecified there).
///
/// ```
/// let x = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![5.0f32, 7.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let y = poolgrad::max_unpool2d(&x, &idx, [2, 2])?;
/// assert_eq!(y.iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 0.0, 7.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::InvalidParameter`] for a zero in
/// `output_size`, [`Error::ShapeMismatch`] when `indices` and `input` differ,
/// [`Error::IndexTypeTooNarrow`], [`Error::IndexOutOfRange`] for the first index (row-major)
/// outside the output plane (the output is then zero), [`Error::Overflow`] /
/// [`Error::Allocation`].
pub fn max_unpool2d<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 2],
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool2d(input, indices, output_size)
}

/// [`max_unpool2d`] into an array the caller owns.
///
/// ```
/// let x = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![5.0f32, 7.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![0i32, 2]).unwrap();
/// let mut y = ndarray::Array4::from_elem((1, 1, 2, 2), 1.0f32);
/// poolgrad::max_unpool2d_into(&x, &idx, [2, 2], &mut y)?;
/// assert_eq!(y.iter().copied().collect::<Vec<_>>(), [5.0, 0.0, 7.0, 0.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d`], and [`Error::ShapeMismatch`] for an output of another shape.
pub fn max_unpool2d_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 2],
    output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool2d_into(input, indices, output_size, output)
}

/// Backward of [`max_unpool2d`]: `grad_input[n, c, i] = grad_output[n, c, indices[n, c, i]]`
/// for the last `i` of each index in row-major order, zero for the earlier ones.
///
/// ```
/// let g = ndarray::Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let gx = poolgrad::max_unpool2d_backward(&g, &idx)?;
/// assert_eq!(gx.iter().copied().collect::<Vec<_>>(), [0.0, 4.0]); // the first was overwritten
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when `grad_output`'s
/// batch or channels differ from `indices`', [`Error::IndexOutOfRange`] for the first index
/// outside the output plane.
pub fn max_unpool2d_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool2d_backward(grad_output, indices)
}

/// [`max_unpool2d_backward`] into an array the caller owns.
///
/// ```
/// let g = ndarray::Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![1i64, 2]).unwrap();
/// let mut gx = ndarray::Array4::<f32>::zeros((1, 1, 1, 2));
/// poolgrad::max_unpool2d_backward_into(&g, &idx, &mut gx)?;
/// assert_eq!(gx.iter().copied().collect::<Vec<_>>(), [2.0, 3.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of another
/// shape than `indices`.
pub fn max_unpool2d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool2d_backward_into(grad_output, indices, grad_input)
}

/// The gradient of a 2-D max pooling's backward (adaptive or not) with respect to its
/// `grad_output`: `grad_grad_output[n, c, o] = grad_grad_input[n, c, indices[n, c, o]]`, for
/// second-order autodiff. Repeated indices each read the same element: the backward adds every
/// gradient at its index, so this is its exact derivative.
///
/// ```
/// let ggi = ndarray::Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let ggo = poolgrad::max_pool2d_double_backward(&ggi, &idx)?;
/// assert_eq!(ggo.iter().copied().collect::<Vec<_>>(), [4.0, 4.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when the batch or
/// channels of `grad_grad_input` and `indices` differ, [`Error::IndexOutOfRange`] for the first
/// index outside the input plane.
pub fn max_pool2d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool2d_double_backward(grad_grad_input, indices)
}

/// [`max_pool2d_double_backward`] into an array the caller owns.
///
/// ```
/// let ggi = ndarray::Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array4::from_shape_vec((1, 1, 1, 2), vec![0i32, 2]).unwrap();
/// let mut ggo = ndarray::Array4::<f32>::zeros((1, 1, 1, 2));
/// poolgrad::max_pool2d_double_backward_into(&ggi, &idx, &mut ggo)?;
/// assert_eq!(ggo.iter().copied().collect::<Vec<_>>(), [1.0, 3.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_double_backward`], and [`Error::ShapeMismatch`] for an output of another
/// shape than `indices`.
pub fn max_pool2d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_grad_output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool2d_double_backward_into(grad_grad_input, indices, grad_grad_output)
}

/// Max unpooling over 3 spatial axes (PyTorch's `max_unpool3d`, CANN's `aclnnMaxUnpool3d`):
/// an output of `input`'s batch and channels and spatial size `output_size`, zero but at
/// `indices`, flat in each output plane, where `input`'s values go. Where indices of a plane
/// repeat, the last in row-major order wins, and [`max_unpool3d_backward`] gives the gradient
/// to that one alone: forward and backward agree (PyTorch's CPU result is unspecified there).
///
/// ```
/// let x = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![5.0f32, 7.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let y = poolgrad::max_unpool3d(&x, &idx, [1, 2, 2])?;
/// assert_eq!(y.iter().copied().collect::<Vec<_>>(), [0.0, 0.0, 0.0, 7.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::InvalidParameter`] for a zero in
/// `output_size`, [`Error::ShapeMismatch`] when `indices` and `input` differ,
/// [`Error::IndexTypeTooNarrow`], [`Error::IndexOutOfRange`] for the first index (row-major)
/// outside the output plane (the output is then zero), [`Error::Overflow`] /
/// [`Error::Allocation`].
pub fn max_unpool3d<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 3],
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool3d(input, indices, output_size)
}

/// [`max_unpool3d`] into an array the caller owns.
///
/// ```
/// let x = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![5.0f32, 7.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![0i32, 2]).unwrap();
/// let mut y = ndarray::Array5::from_elem((1, 1, 1, 2, 2), 1.0f32);
/// poolgrad::max_unpool3d_into(&x, &idx, [1, 2, 2], &mut y)?;
/// assert_eq!(y.iter().copied().collect::<Vec<_>>(), [5.0, 0.0, 7.0, 0.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool3d`], and [`Error::ShapeMismatch`] for an output of another shape.
pub fn max_unpool3d_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 3],
    output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool3d_into(input, indices, output_size, output)
}

/// Backward of [`max_unpool3d`]: `grad_input[n, c, i] = grad_output[n, c, indices[n, c, i]]`
/// for the last `i` of each index in row-major order, zero for the earlier ones.
///
/// ```
/// let g = ndarray::Array5::from_shape_vec((1, 1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let gx = poolgrad::max_unpool3d_backward(&g, &idx)?;
/// assert_eq!(gx.iter().copied().collect::<Vec<_>>(), [0.0, 4.0]); // the first was overwritten
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when `grad_output`'s
/// batch or channels differ from `indices`', [`Error::IndexOutOfRange`] for the first index
/// outside the output plane.
pub fn max_unpool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool3d_backward(grad_output, indices)
}

/// [`max_unpool3d_backward`] into an array the caller owns.
///
/// ```
/// let g = ndarray::Array5::from_shape_vec((1, 1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![1i64, 2]).unwrap();
/// let mut gx = ndarray::Array5::<f32>::zeros((1, 1, 1, 1, 2));
/// poolgrad::max_unpool3d_backward_into(&g, &idx, &mut gx)?;
/// assert_eq!(gx.iter().copied().collect::<Vec<_>>(), [2.0, 3.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool3d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of another
/// shape than `indices`.
pub fn max_unpool3d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool3d_backward_into(grad_output, indices, grad_input)
}

/// The gradient of a 3-D max pooling's backward (adaptive or not) with respect to its
/// `grad_output`: `grad_grad_output[n, c, o] = grad_grad_input[n, c, indices[n, c, o]]`, for
/// second-order autodiff. Repeated indices each read the same element: the backward adds every
/// gradient at its index, so this is its exact derivative.
///
/// ```
/// let ggi = ndarray::Array5::from_shape_vec((1, 1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![3i64, 3]).unwrap();
/// let ggo = poolgrad::max_pool3d_double_backward(&ggi, &idx)?;
/// assert_eq!(ggo.iter().copied().collect::<Vec<_>>(), [4.0, 4.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when the batch or
/// channels of `grad_grad_input` and `indices` differ, [`Error::IndexOutOfRange`] for the first
/// index outside the input plane.
pub fn max_pool3d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool3d_double_backward(grad_grad_input, indices)
}

/// [`max_pool3d_double_backward`] into an array the caller owns.
///
/// ```
/// let ggi = ndarray::Array5::from_shape_vec((1, 1, 1, 2, 2), vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// let idx = ndarray::Array5::from_shape_vec((1, 1, 1, 1, 2), vec![0i32, 2]).unwrap();
/// let mut ggo = ndarray::Array5::<f32>::zeros((1, 1, 1, 1, 2));
/// poolgrad::max_pool3d_double_backward_into(&ggi, &idx, &mut ggo)?;
/// assert_eq!(ggo.iter().copied().collect::<Vec<_>>(), [1.0, 3.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool3d_double_backward`], and [`Error::ShapeMismatch`] for an output of another
/// shape than `indices`.
pub fn max_pool3d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_grad_output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool3d_double_backward_into(grad_grad_input, indices, grad_grad_output)
}

/// Max unpooling over one axis (PyTorch's `max_unpool1d`, with its `output_size`): an output of
/// `input`'s batch and channels and length `output_size`, zero but at `indices` (positions along
/// the output's length), where `input`'s values go. Where indices of a line repeat, the last
/// wins, and [`max_unpool1d_backward`] gives the gradient to that one alone, as in
/// [`max_unpool2d`], which this is on planes one row high.
///
/// ```
/// let x = ndarray::array![[[5.0f32, 7.0]]];
/// let idx = ndarray::array![[[3i64, 3]]];
/// let y = poolgrad::max_unpool1d(&x, &idx, 4)?;
/// assert_eq!(y, ndarray::array![[[0.0, 0.0, 0.0, 7.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::InvalidParameter`] for an
/// `output_size` of 0, [`Error::ShapeMismatch`] when `indices` and `input` differ,
/// [`Error::IndexTypeTooNarrow`], [`Error::IndexOutOfRange`] for the first index (row-major)
/// outside the output line (the output is then zero), [`Error::Overflow`] /
/// [`Error::Allocation`].
pub fn max_unpool1d<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: usize,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool1d(input, indices, output_size)
}

/// [`max_unpool1d`] into an array the caller owns.
///
/// ```
/// let x = ndarray::array![[[5.0f32, 7.0]]];
/// let idx = ndarray::array![[[0i32, 2]]];
/// let mut y = ndarray::Array3::from_elem((1, 1, 3), 1.0f32);
/// poolgrad::max_unpool1d_into(&x, &idx, 3, &mut y)?;
/// assert_eq!(y, ndarray::array![[[5.0, 0.0, 7.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool1d`], and [`Error::ShapeMismatch`] for an output of another shape.
pub fn max_unpool1d_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: usize,
    output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool1d_into(input, indices, output_size, output)
}

/// Backward of [`max_unpool1d`]: `grad_input[n, c, i] = grad_output[n, c, indices[n, c, i]]`
/// for the last `i` of each index in row-major order, zero for the earlier ones.
///
/// ```
/// let g = ndarray::array![[[1.0f32, 2.0, 3.0, 4.0]]];
/// let idx = ndarray::array![[[3i64, 3]]];
/// let gx = poolgrad::max_unpool1d_backward(&g, &idx)?;
/// assert_eq!(gx, ndarray::array![[[0.0, 4.0]]]); // the first was overwritten
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when `grad_output`'s
/// batch or channels differ from `indices`', [`Error::IndexOutOfRange`] for the first index
/// outside the output line.
pub fn max_unpool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_unpool1d_backward(grad_output, indices)
}

/// [`max_unpool1d_backward`] into an array the caller owns.
///
/// ```
/// let g = ndarray::array![[[1.0f32, 2.0, 3.0, 4.0]]];
/// let idx = ndarray::array![[[1i64, 2]]];
/// let mut gx = ndarray::Array3::<f32>::zeros((1, 1, 2));
/// poolgrad::max_unpool1d_backward_into(&g, &idx, &mut gx)?;
/// assert_eq!(gx, ndarray::array![[[2.0, 3.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool1d_backward`], and [`Error::ShapeMismatch`] for a `grad_input` of another
/// shape than `indices`.
pub fn max_unpool1d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_input: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_unpool1d_backward_into(grad_output, indices, grad_input)
}

/// The gradient of a 1-D max pooling's backward (adaptive or not) with respect to its
/// `grad_output`: `grad_grad_output[n, c, o] = grad_grad_input[n, c, indices[n, c, o]]`, for
/// second-order autodiff. Repeated indices each read the same element: the backward adds every
/// gradient at its index, so this is its exact derivative.
///
/// ```
/// let ggi = ndarray::array![[[1.0f32, 2.0, 3.0, 4.0]]];
/// let idx = ndarray::array![[[3i64, 3]]];
/// let ggo = poolgrad::max_pool1d_double_backward(&ggi, &idx)?;
/// assert_eq!(ggo, ndarray::array![[[4.0, 4.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`], [`Error::EmptyDimension`], [`Error::ShapeMismatch`] when the batch or
/// channels of `grad_grad_input` and `indices` differ, [`Error::IndexOutOfRange`] for the first
/// index outside the input line.
pub fn max_pool1d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    on(&Cpu::default()).max_pool1d_double_backward(grad_grad_input, indices)
}

/// [`max_pool1d_double_backward`] into an array the caller owns.
///
/// ```
/// let ggi = ndarray::array![[[1.0f32, 2.0, 3.0, 4.0]]];
/// let idx = ndarray::array![[[0i32, 2]]];
/// let mut ggo = ndarray::Array3::<f32>::zeros((1, 1, 2));
/// poolgrad::max_pool1d_double_backward_into(&ggi, &idx, &mut ggo)?;
/// assert_eq!(ggo, ndarray::array![[[1.0, 3.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool1d_double_backward`], and [`Error::ShapeMismatch`] for an output of another
/// shape than `indices`.
pub fn max_pool1d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    grad_grad_output: &mut ArrayRef<T, D>,
) -> Result<()> {
    on(&Cpu::default()).max_pool1d_double_backward_into(grad_grad_input, indices, grad_grad_output)
}
