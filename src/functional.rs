//! Free functions over ndarray arrays: the one-line entry points.
//!
//! Each accepts owned arrays or views of rank 3 (`[C, H, W]`) or 4 (`[N, C, H, W]`) with any
//! strides, runs on the default [`Cpu`] device, and returns owned arrays of the input's rank. Each
//! has an `_on` twin that takes the device as its first argument, and an `_into` twin (PyTorch's
//! `out=`) that writes into arrays or views the caller owns, of any strides, with the same checks:
//! a training loop that reuses its buffers allocates nothing per step.
//!
//! Each operation has one private core that writes into views (`*_into_views`); the `_into`
//! forms call it directly, and the allocating forms check what they read, allocate, and call it.

use ndarray::{Array, ArrayBase, ArrayView, ArrayViewMut, Data, DataMut, Dimension};

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

/// Whose `grad_input` a backward core writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buffer {
    /// The allocating form's, just allocated zeroed: a kernel may leave it unzeroed.
    Fresh,
    /// The caller's (the `_into` forms): any contents, all replaced.
    Callers,
}

impl Buffer {
    /// `grad_input` as this buffer is: marked as holding only zeros when fresh.
    fn mark<T: crate::element::Element>(self, grad_input: TensorMut<'_, T>) -> TensorMut<'_, T> {
        match self {
            Buffer::Fresh => grad_input.known_zero(),
            Buffer::Callers => grad_input,
        }
    }
}

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

/// The allocating adaptive forward behind the four public forms.
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
    let checked = TensorRef::named(input.view(), OP, "input")?;
    let dims = crate::op::adaptive_forward_shapes::<T, I, _>(&checked, output_size)?.pooled_dims();
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &dims)?;
    let mut indices = crate::alloc::zeroed_array::<I, D>(OP, "indices", &dims)?;
    adaptive_into_views(device, input.view(), output_size, output.view_mut(), indices.view_mut())?;
    Ok(Pooled { output, indices })
}

/// The one adaptive forward: into the caller's views.
fn adaptive_into_views<Dev, T, I, D>(
    device: &Dev,
    input: ArrayView<'_, T, D>,
    output_size: [usize; 2],
    output: ArrayViewMut<'_, T, D>,
    indices: ArrayViewMut<'_, I, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    D: PoolDim,
{
    const OP: &str = name::ADAPTIVE_MAX_POOL2D;
    let op = AdaptiveMaxPool2d {
        input: TensorRef::named(input, OP, "input")?,
        output_size,
        output: TensorMut::named(output, OP, "output")?,
        indices: TensorMut::named(indices, OP, "indices")?,
    };
    Plan::new(device, op)?.run()
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
pub fn adaptive_max_pool2d_into<T, I, S, So, Si, D>(
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
    output: &mut ArrayBase<So, D>,
    indices: &mut ArrayBase<Si, D>,
) -> Result<()>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    Si: DataMut<Elem = I>,
    D: PoolDim,
{
    adaptive_into_views(&Cpu::default(), input.view(), output_size, output.view_mut(), indices.view_mut())
}

/// [`adaptive_max_pool2d_into`] on `device`.
///
/// # Errors
/// As [`adaptive_max_pool2d_into`], and the device's own errors.
pub fn adaptive_max_pool2d_into_on<Dev, T, I, S, So, Si, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
    output: &mut ArrayBase<So, D>,
    indices: &mut ArrayBase<Si, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    Si: DataMut<Elem = I>,
    D: PoolDim,
{
    adaptive_into_views(device, input.view(), output_size, output.view_mut(), indices.view_mut())
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
    let (go, x, ix) = (grad_output.view(), self_.view(), indices.view());
    // Shape errors take precedence over the allocation of the result.
    crate::op::adaptive_backward_shapes(
        &TensorRef::named(go.view(), OP, "grad_output")?,
        &TensorRef::named(x.view(), OP, "self_")?,
        &TensorRef::named(ix.view(), OP, "indices")?,
    )?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", x.shape())?;
    adaptive_backward_into_views(device, go, x, ix, grad_input.view_mut(), Buffer::Fresh)?;
    Ok(grad_input)
}

/// The one adaptive backward: into the caller's view.
fn adaptive_backward_into_views<Dev, T, I, D>(
    device: &Dev,
    grad_output: ArrayView<'_, T, D>,
    self_: ArrayView<'_, T, D>,
    indices: ArrayView<'_, I, D>,
    grad_input: ArrayViewMut<'_, T, D>,
    buffer: Buffer,
) -> Result<()>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    D: PoolDim,
{
    const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::named(grad_output, OP, "grad_output")?,
        self_: TensorRef::named(self_, OP, "self_")?,
        indices: TensorRef::named(indices, OP, "indices")?,
        grad_input: buffer.mark(TensorMut::named(grad_input, OP, "grad_input")?),
    };
    Plan::new(device, op)?.run()
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
pub fn adaptive_max_pool2d_backward_into<T, I, S1, S2, S3, S4, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    adaptive_backward_into_views(
        &Cpu::default(),
        grad_output.view(),
        self_.view(),
        indices.view(),
        grad_input.view_mut(),
        Buffer::Callers,
    )
}

/// [`adaptive_max_pool2d_backward_into`] on `device`.
///
/// # Errors
/// As [`adaptive_max_pool2d_backward_into`], and the device's own errors.
pub fn adaptive_max_pool2d_backward_into_on<Dev, T, I, S1, S2, S3, S4, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    adaptive_backward_into_views(
        device,
        grad_output.view(),
        self_.view(),
        indices.view(),
        grad_input.view_mut(),
        Buffer::Callers,
    )
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

/// The allocating max-pooling forward behind the four public forms.
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
    let checked = TensorRef::named(input.view(), OP, "input")?;
    let dims = crate::op::max_pool_forward_shapes::<T, I, _>(&checked, params)?.pooled_dims();
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &dims)?;
    let mut indices = crate::alloc::zeroed_array::<I, D>(OP, "indices", &dims)?;
    max_pool_into_views(device, input.view(), params, output.view_mut(), indices.view_mut())?;
    Ok(Pooled { output, indices })
}

/// The one max-pooling forward with indices: into the caller's views.
fn max_pool_into_views<Dev, T, I, D>(
    device: &Dev,
    input: ArrayView<'_, T, D>,
    params: &MaxPool2dParams,
    output: ArrayViewMut<'_, T, D>,
    indices: ArrayViewMut<'_, I, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_INDICES;
    let op = MaxPool2dWithIndices {
        input: TensorRef::named(input, OP, "input")?,
        params: *params,
        output: TensorMut::named(output, OP, "output")?,
        indices: TensorMut::named(indices, OP, "indices")?,
    };
    Plan::new(device, op)?.run()
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
pub fn max_pool2d_with_indices_into<T, I, S, So, Si, D>(
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
    output: &mut ArrayBase<So, D>,
    indices: &mut ArrayBase<Si, D>,
) -> Result<()>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    Si: DataMut<Elem = I>,
    D: PoolDim,
{
    max_pool_into_views(&Cpu::default(), input.view(), params, output.view_mut(), indices.view_mut())
}

/// [`max_pool2d_with_indices_into`] on `device`.
///
/// # Errors
/// As [`max_pool2d_with_indices_into`], and the device's own errors.
pub fn max_pool2d_with_indices_into_on<Dev, T, I, S, So, Si, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    params: &MaxPool2dParams,
    output: &mut ArrayBase<So, D>,
    indices: &mut ArrayBase<Si, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    Si: DataMut<Elem = I>,
    D: PoolDim,
{
    max_pool_into_views(device, input.view(), params, output.view_mut(), indices.view_mut())
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
    let (go, x, ix) = (grad_output.view(), self_.view(), indices.view());
    crate::op::max_pool_indices_backward_shapes(
        &TensorRef::named(go.view(), OP, "grad_output")?,
        &TensorRef::named(x.view(), OP, "self_")?,
        &TensorRef::named(ix.view(), OP, "indices")?,
        params,
    )?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", x.shape())?;
    max_pool_backward_into_views(device, go, x, ix, params, grad_input.view_mut(), Buffer::Fresh)?;
    Ok(grad_input)
}

/// The one max-pooling backward with indices: into the caller's view.
fn max_pool_backward_into_views<Dev, T, I, D>(
    device: &Dev,
    grad_output: ArrayView<'_, T, D>,
    self_: ArrayView<'_, T, D>,
    indices: ArrayView<'_, I, D>,
    params: &MaxPool2dParams,
    grad_input: ArrayViewMut<'_, T, D>,
    buffer: Buffer,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
    let op = MaxPool2dWithIndicesBackward {
        grad_output: TensorRef::named(grad_output, OP, "grad_output")?,
        self_: TensorRef::named(self_, OP, "self_")?,
        indices: TensorRef::named(indices, OP, "indices")?,
        params: *params,
        grad_input: buffer.mark(TensorMut::named(grad_input, OP, "grad_input")?),
    };
    Plan::new(device, op)?.run()
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
pub fn max_pool2d_with_indices_backward_into<T, I, S1, S2, S3, S4, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    params: &MaxPool2dParams,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    let device = Cpu::default();
    max_pool_backward_into_views(
        &device,
        grad_output.view(),
        self_.view(),
        indices.view(),
        params,
        grad_input.view_mut(),
        Buffer::Callers,
    )
}

/// [`max_pool2d_with_indices_backward_into`] on `device`.
///
/// # Errors
/// As [`max_pool2d_with_indices_backward_into`], and the device's own errors.
pub fn max_pool2d_with_indices_backward_into_on<Dev, T, I, S1, S2, S3, S4, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
    params: &MaxPool2dParams,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    max_pool_backward_into_views(
        device,
        grad_output.view(),
        self_.view(),
        indices.view(),
        params,
        grad_input.view_mut(),
        Buffer::Callers,
    )
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
    let g = crate::op::mask_forward_shapes::<T, L, _>(&TensorRef::named(input.view(), OP, "input")?, params)?;
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
    let mut mask = crate::alloc::zeroed_array::<i8, D>(OP, "mask", &g.dims())?;
    mask_into_views(device, input.view(), params, output.view_mut(), mask.view_mut(), layout)?;
    Ok(PooledMask { output, mask: Mask::from_parts(mask, g) })
}

/// The one max-pooling forward with a mask: into the caller's views.
fn mask_into_views<Dev, T, L, D>(
    device: &Dev,
    input: ArrayView<'_, T, D>,
    params: &MaxPool2dParams,
    output: ArrayViewMut<'_, T, D>,
    mask: ArrayViewMut<'_, i8, D>,
    layout: L,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithMask<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_MASK;
    let op = MaxPool2dWithMask {
        input: TensorRef::named(input, OP, "input")?,
        params: *params,
        output: TensorMut::named(output, OP, "output")?,
        mask: MaskMut::new(TensorMut::named(mask, OP, "mask")?, layout),
    };
    Plan::new(device, op)?.run()
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
pub fn max_pool2d_with_mask_into<T, L, S, So, D>(
    input: &ArrayBase<S, D>,
    output: &mut ArrayBase<So, D>,
    mask: &mut Mask<L, D>,
) -> Result<()>
where
    T: PoolFloat,
    L: MaskLayout,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    D: PoolDim,
{
    max_pool2d_with_mask_into_on(&Cpu::default(), input, output, mask)
}

/// [`max_pool2d_with_mask_into`] on `device`.
///
/// # Errors
/// As [`max_pool2d_with_mask_into`], and the device's own errors.
pub fn max_pool2d_with_mask_into_on<Dev, T, L, S, So, D>(
    device: &Dev,
    input: &ArrayBase<S, D>,
    output: &mut ArrayBase<So, D>,
    mask: &mut Mask<L, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithMask<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    S: Data<Elem = T>,
    So: DataMut<Elem = T>,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_MASK;
    crate::validate::same_shape(OP, "input", input.shape(), &mask.input_shape())?;
    let params = *mask.params();
    mask_into_views(device, input.view(), &params, output.view_mut(), mask.bytes_mut(), L::default())
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
    let (go, x) = (grad_output.view(), self_.view());
    crate::validate::same_shape(OP, "self_", x.shape(), &mask.input_shape())?;
    crate::op::mask_backward_shapes(
        &TensorRef::named(go.view(), OP, "grad_output")?,
        &TensorRef::named(x.view(), OP, "self_")?,
        &mask.view(),
        mask.params(),
    )?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", x.shape())?;
    mask_backward_into_views(device, go, x, mask, grad_input.view_mut(), Buffer::Fresh)?;
    Ok(grad_input)
}

/// The one max-pooling backward with a mask: into the caller's view, with the mask's parameters
/// (the mask must have been made for an input of `self_`'s shape).
fn mask_backward_into_views<Dev, T, L, D>(
    device: &Dev,
    grad_output: ArrayView<'_, T, D>,
    self_: ArrayView<'_, T, D>,
    mask: &Mask<L, D>,
    grad_input: ArrayViewMut<'_, T, D>,
    buffer: Buffer,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithMaskBackward<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    D: PoolDim,
{
    const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
    crate::validate::same_shape(OP, "self_", self_.shape(), &mask.input_shape())?;
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::named(grad_output, OP, "grad_output")?,
        self_: TensorRef::named(self_, OP, "self_")?,
        mask: mask.view(),
        params: *mask.params(),
        grad_input: buffer.mark(TensorMut::named(grad_input, OP, "grad_input")?),
    };
    Plan::new(device, op)?.run()
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
pub fn max_pool2d_with_mask_backward_into<T, L, S1, S2, S4, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    mask: &Mask<L, D>,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    T: PoolFloat,
    L: MaskLayout,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    mask_backward_into_views(
        &Cpu::default(),
        grad_output.view(),
        self_.view(),
        mask,
        grad_input.view_mut(),
        Buffer::Callers,
    )
}

/// [`max_pool2d_with_mask_backward_into`] on `device`.
///
/// # Errors
/// As [`max_pool2d_with_mask_backward_into`], and the device's own errors.
pub fn max_pool2d_with_mask_backward_into_on<Dev, T, L, S1, S2, S4, D>(
    device: &Dev,
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    mask: &Mask<L, D>,
    grad_input: &mut ArrayBase<S4, D>,
) -> Result<()>
where
    Dev: for<'a> Runs<MaxPool2dWithMaskBackward<'a, T, L>>,
    T: PoolFloat,
    L: MaskLayout,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S4: DataMut<Elem = T>,
    D: PoolDim,
{
    mask_backward_into_views(
        device,
        grad_output.view(),
        self_.view(),
        mask,
        grad_input.view_mut(),
        Buffer::Callers,
    )
}
