//! Free functions over ndarray arrays: the one-line entry points.
//!
//! Each accepts owned arrays or views of rank 3 (`[C, H, W]`) or 4 (`[N, C, H, W]`) with any
//! strides, runs on the default [`Cpu`] device, and returns owned arrays of the input's rank. Each
//! has an `_on` twin that takes the device as its first argument.

use ndarray::{Array, ArrayBase, Data, Dimension};

use crate::device::Runs;
use crate::device::cpu::Cpu;
use crate::element::PoolFloat;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout, MaskMut};
use crate::op::name;
use crate::op::{
    AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward,
    MaxPool2dWithMask, MaxPool2dWithMaskBackward,
};
use crate::params::MaxPool2dParams;
use crate::plan::Plan;
use crate::tensor::{PoolDim, TensorMut, TensorRef};

/// The result of a max-pooling forward: pooled values and flat arg-max indices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled<T, I, D: Dimension> {
    /// Pooled values.
    pub output: Array<T, D>,
    /// Flat index `ih * W + iw` of each value inside its `(n, c)` plane.
    pub indices: Array<I, D>,
}

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
pub fn adaptive_max_pool2d<T, S, D>(
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i64, D>>
where
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    adaptive_forward(&Cpu::default(), input, output_size)
}

/// [`adaptive_max_pool2d`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// ```
/// use poolgrad::device::cpu::Cpu;
/// let x = ndarray::Array4::<f32>::ones((1, 2, 6, 6));
/// let p = poolgrad::adaptive_max_pool2d_on(&Cpu::sequential(), &x, [3, 3])?;
/// assert!(p.indices.iter().all(|&i| i % 2 == 0 && (i / 6) % 2 == 0)); // ties: the first maximum
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool2d`], and the device's own errors.
pub fn adaptive_max_pool2d_on<Dev, T, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i64, D>>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i64>>,
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    adaptive_forward(device, input, output_size)
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
pub fn adaptive_max_pool2d_i32<T, S, D>(
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i32, D>>
where
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    adaptive_forward(&Cpu::default(), input, output_size)
}

/// [`adaptive_max_pool2d_i32`] on `device`.
///
/// # Errors
/// As [`adaptive_max_pool2d`], and the device's own errors.
pub fn adaptive_max_pool2d_i32_on<Dev, T, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, i32, D>>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i32>>,
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    adaptive_forward(device, input, output_size)
}

/// The one adaptive forward behind the four public forms.
fn adaptive_forward<Dev, T, I, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, I, D>>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    D: PoolDim,
{
    const OP: &str = name::ADAPTIVE_MAX_POOL2D;
    let input = TensorRef::named(input.view(), OP, "input")?;
    let dims = crate::op::adaptive_forward_shapes::<T, I>(&input, output_size)?.pooled_dims();
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &dims)?;
    let mut indices = crate::alloc::zeroed_array::<I, D>(OP, "indices", &dims)?;
    let op = AdaptiveMaxPool2d {
        input,
        output_size,
        output: TensorMut::named(output.view_mut(), OP, "output")?,
        indices: TensorMut::named(indices.view_mut(), OP, "indices")?,
    };
    Plan::new(device, op)?.run()?;
    Ok(Pooled { output, indices })
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
pub fn adaptive_max_pool2d_backward<T, I, S1, S2, S3, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    D: PoolDim,
{
    adaptive_max_pool2d_backward_on(&Cpu::default(), grad_output, self_, indices)
}

/// [`adaptive_max_pool2d_backward`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// # Errors
/// As [`adaptive_max_pool2d_backward`], and the device's own errors.
pub fn adaptive_max_pool2d_backward_on<Dev, T, I, S1, S2, S3, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
) -> Result<Array<T, D>>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    D: PoolDim,
{
    const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
    let self_ = TensorRef::named(self_.view(), OP, "self_")?;
    let grad_output = TensorRef::named(grad_output.view(), OP, "grad_output")?;
    let indices = TensorRef::named(indices.view(), OP, "indices")?;
    // Shape errors take precedence over the allocation of the result.
    crate::op::adaptive_backward_shapes(&grad_output, &self_, &indices)?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", &self_.dims())?;
    let op = AdaptiveMaxPool2dBackward {
        grad_output,
        self_,
        indices,
        grad_input: TensorMut::named(grad_input.view_mut(), OP, "grad_input")?,
    };
    Plan::new(device, op)?.run()?;
    Ok(grad_input)
}

/// The result of a max-pooling forward with an Ascend mask: pooled values and the mask.
#[derive(Debug, Clone, PartialEq)]
pub struct PooledMask<T, L: MaskLayout, D: Dimension> {
    /// Pooled values.
    pub output: Array<T, D>,
    /// The arg-max of each output as an int8 mask in layout `L`.
    pub mask: Mask<L, D>,
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
pub fn max_pool2d_with_indices<T, S, D>(
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i64, D>>
where
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    max_pool_forward(&Cpu::default(), input, params)
}

/// [`max_pool2d_with_indices`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// # Errors
/// As [`max_pool2d_with_indices`], and the device's own errors.
pub fn max_pool2d_with_indices_on<Dev, T, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i64, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i64>>,
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    max_pool_forward(device, input, params)
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
pub fn max_pool2d_with_indices_i32<T, S, D>(
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i32, D>>
where
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    max_pool_forward(&Cpu::default(), input, params)
}

/// [`max_pool2d_with_indices_i32`] on `device`.
///
/// # Errors
/// As [`max_pool2d_with_indices`], and the device's own errors.
pub fn max_pool2d_with_indices_i32_on<Dev, T, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, i32, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i32>>,
    T: PoolFloat,
    S: Data<Elem = T>,
    D: PoolDim,
{
    max_pool_forward(device, input, params)
}

/// The one max-pooling forward behind the four public forms.
fn max_pool_forward<Dev, T, I, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
) -> Result<Pooled<T, I, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_INDICES;
    let input = TensorRef::named(input.view(), OP, "input")?;
    let g = crate::op::max_pool_forward_shapes::<T, I>(&input, params)?;
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
    let mut indices = crate::alloc::zeroed_array::<I, D>(OP, "indices", &g.pooled_dims())?;
    let op = MaxPool2dWithIndices {
        input,
        params: *params,
        output: TensorMut::named(output.view_mut(), OP, "output")?,
        indices: TensorMut::named(indices.view_mut(), OP, "indices")?,
    };
    Plan::new(device, op)?.run()?;
    Ok(Pooled { output, indices })
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
pub fn max_pool2d_with_indices_backward<T, I, S1, S2, S3, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    params: &MaxPool2dParams,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    D: PoolDim,
{
    max_pool2d_with_indices_backward_on(&Cpu::default(), grad_output, self_, indices, params)
}

/// [`max_pool2d_with_indices_backward`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// # Errors
/// As [`max_pool2d_with_indices_backward`], and the device's own errors.
pub fn max_pool2d_with_indices_backward_on<Dev, T, I, S1, S2, S3, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    params: &MaxPool2dParams,
) -> Result<Array<T, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
    let self_ = TensorRef::named(self_.view(), OP, "self_")?;
    let grad_output = TensorRef::named(grad_output.view(), OP, "grad_output")?;
    let indices = TensorRef::named(indices.view(), OP, "indices")?;
    crate::op::max_pool_indices_backward_shapes(&grad_output, &self_, &indices, params)?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", &self_.dims())?;
    let op = MaxPool2dWithIndicesBackward {
        grad_output,
        self_,
        indices,
        params: *params,
        grad_input: TensorMut::named(grad_input.view_mut(), OP, "grad_input")?,
    };
    Plan::new(device, op)?.run()?;
    Ok(grad_input)
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
pub fn max_pool2d_with_mask<T, L, S, D>(
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
    layout: L,
) -> Result<PooledMask<T, L, D>>
where
    T: PoolFloat,
    L: MaskLayout,
    S: Data<Elem = T>,
    D: PoolDim,
{
    max_pool2d_with_mask_on(&Cpu::default(), input, params, layout)
}

/// [`max_pool2d_with_mask`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// # Errors
/// As [`max_pool2d_with_mask`], and the device's own errors.
pub fn max_pool2d_with_mask_on<Dev, T, L, S, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
    layout: L,
) -> Result<PooledMask<T, L, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithMask<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    S: Data<Elem = T>,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_MASK;
    let input = TensorRef::named(input.view(), OP, "input")?;
    let g = crate::op::mask_forward_shapes::<T, L>(&input, params)?;
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
    let mut mask = crate::alloc::zeroed_array::<i8, D>(OP, "mask", &g.dims())?;
    let op = MaxPool2dWithMask {
        input,
        params: *params,
        output: TensorMut::named(output.view_mut(), OP, "output")?,
        mask: MaskMut::new(TensorMut::named(mask.view_mut(), OP, "mask")?, layout),
    };
    Plan::new(device, op)?.run()?;
    Ok(PooledMask { output, mask: Mask::from_parts(mask, g) })
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
pub fn max_pool2d_with_mask_backward<T, L, S1, S2, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    mask: &Mask<L, D>,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    L: MaskLayout,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    D: PoolDim,
{
    max_pool2d_with_mask_backward_on(&Cpu::default(), grad_output, self_, mask)
}

/// [`max_pool2d_with_mask_backward`] on `device` (for example an Ascend NPU, with the `ascend` feature).
///
/// # Errors
/// As [`max_pool2d_with_mask_backward`], and the device's own errors.
pub fn max_pool2d_with_mask_backward_on<Dev, T, L, S1, S2, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    mask: &Mask<L, D>,
) -> Result<Array<T, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithMaskBackward<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
    let self_ = TensorRef::named(self_.view(), OP, "self_")?;
    let grad_output = TensorRef::named(grad_output.view(), OP, "grad_output")?;
    let params = mask.params();
    crate::validate::same_shape(OP, "self_", self_.dims(), mask.input_shape())?;
    let mask = mask.view();
    crate::op::mask_backward_shapes(&grad_output, &self_, &mask, params)?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", &self_.dims())?;
    let op = MaxPool2dWithMaskBackward {
        grad_output,
        self_,
        mask,
        params: *params,
        grad_input: TensorMut::named(grad_input.view_mut(), OP, "grad_input")?,
    };
    Plan::new(device, op)?.run()?;
    Ok(grad_input)
}
