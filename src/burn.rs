//! poolgrad inside [burn](https://burn.dev) models (feature `burn`, burn 0.22 on its ndarray
//! backend, which uses this crate's ndarray 0.17): adaptive max pooling, which burn does not have,
//! and max pooling with indices, both differentiable under burn's autodiff with PyTorch's gradient.
//!
//! burn has `adaptive_avg_pool2d` but no adaptive max pooling; its `max_pool2d_with_indices`
//! agrees with PyTorch on finite inputs (this module's tests check it) but never selects a NaN
//! (`val > max`), where PyTorch's maximum is the NaN. The functions here take and return burn
//! tensors: on `Device::ndarray()` they are plain, on `Device::ndarray().autodiff()` they record
//! an operation whose backward is poolgrad's (the first maximum of a window takes its whole
//! gradient), under either gradient-checkpointing strategy.
//!
//! ```
//! # #![allow(deprecated)] // burn 0.22 deprecates `Device::ndarray` (see below)
//! use burn_tensor::{Device, Tensor, TensorData};
//!
//! let device = Device::ndarray().autodiff();
//! let x = Tensor::<4>::from_data(
//!     TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 9.0, 5.0, 6.0, 7.0, 8.0], [1, 1, 3, 3]),
//!     &device,
//! )
//! .require_grad();
//! // 3x3 -> 2x2: overlapping windows, all holding the 9.
//! let y = poolgrad::burn::adaptive_max_pool2d(x.clone(), [2, 2])?;
//! assert_eq!(y.to_data().try_to_vec::<f32>().unwrap(), [9.0; 4]);
//! let grads = y.sum().backward();
//! let gx = x.grad(&grads).expect("x requires grad");
//! assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap(), [0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
//! # Ok::<(), poolgrad::burn::Error>(())
//! ```
//!
//! # What it takes
//!
//! - `Tensor<4>` (`[N, C, H, W]`, as burn's own pooling; `Tensor<5>` for the 3-D poolings,
//!   `Tensor<3>` for the 1-D ones) in F32 or F64 (the float types of burn's
//!   ndarray backend), on the ndarray backend with or without autodiff. A tensor on another
//!   backend is an [`Error::Backend`] that names the device. The input is read in place (any
//!   strides burn's ndarray backend has), without a copy.
//! - Indices as `Tensor<4, Int>` of dtype I64 (what the `_with_indices` forms return) or I32.
//!
//! Max unpooling ([`max_unpool1d`], [`max_unpool2d`], [`max_unpool3d`]; burn has none) writes
//! pooled values back at their indices, recorded under autodiff with poolgrad's unpooling
//! backward (where indices repeat, the last wins and alone gets the gradient). That backward is
//! a function too ([`max_unpool2d_backward`]), recorded the other way round: a gather layer
//! whose gradient is the unpooling.
//!
//! The backward of these operations is not itself differentiable (no second derivatives), as in
//! burn's own pooling.
//!
//! burn 0.22 marks its ndarray backend deprecated in favour of burn-flex. This bridge stays on
//! the ndarray backend because its tensors are ndarray 0.17 arrays, which poolgrad reads and
//! returns without a copy.

// burn 0.22 deprecates burn-ndarray (see above); this module is written against it on purpose.
#![allow(deprecated)]

use burn_autodiff::Autodiff;
use burn_autodiff::NodeId;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::{BalancedCheckpointing, CheckpointStrategy, NoCheckpointing};
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_backend::BackendTypes;
use burn_dispatch::{DispatchKindConversion, DispatchTensor};
use burn_ndarray::{NdArray, NdArrayTensor};
use burn_tensor::{Int, Tensor};
use ndarray::{ArcArray, ArrayViewD, IxDyn};

use crate::bridge::{MaxUnpool, Pooling, Unpooling, function_names, spatial};
use crate::{ArgmaxIndex, MaxPool1dParams, MaxPool2dParams, MaxPool3dParams, PoolFloat};

// The functions' names, which begin their messages: each names the function the user called.
function_names!("poolgrad::burn::": max_pool2d, max_pool2d_with_indices, max_pool2d_with_indices_backward, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, adaptive_max_pool2d_backward, max_pool3d, max_pool3d_with_indices, adaptive_max_pool3d, adaptive_max_pool3d_with_indices, max_pool1d, max_pool1d_with_indices, adaptive_max_pool1d, adaptive_max_pool1d_with_indices, max_unpool1d, max_unpool2d, max_unpool3d, max_pool3d_with_indices_backward, adaptive_max_pool3d_backward, max_pool1d_with_indices_backward, adaptive_max_pool1d_backward, max_unpool1d_backward, max_unpool2d_backward, max_unpool3d_backward);

/// What can go wrong in [`poolgrad::burn`](self): poolgrad's own errors, and burn tensors this
/// bridge cannot read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// poolgrad's checks: shapes, parameters, indices (the operation and argument are named).
    #[error(transparent)]
    Pool(#[from] crate::Error),
    /// The tensor is not on burn's ndarray backend.
    #[error(
        "{op}: `{arg}` is on {device}; poolgrad::burn runs on the ndarray backend: `Device::ndarray()`, \
         with or without `.autodiff()`"
    )]
    Backend {
        /// The operation called.
        op: &'static str,
        /// The argument.
        arg: &'static str,
        /// The tensor's device, as burn prints it.
        device: String,
    },
    /// The tensor's dtype is not one this operation takes.
    #[error("{op}: `{arg}` must have dtype {expected}; got {got}")]
    DType {
        /// The operation called.
        op: &'static str,
        /// The argument.
        arg: &'static str,
        /// The dtypes it takes.
        expected: &'static str,
        /// The dtype given.
        got: String,
    },
}

/// Results of [`poolgrad::burn`](self).
pub type Result<T> = std::result::Result<T, Error>;

/// Adaptive 2-D max pooling of `x` to `output_size = [Ho, Wo]` with PyTorch's semantics,
/// differentiable under burn's autodiff. burn has no adaptive max pooling of its own.
///
/// # Errors
/// As [`crate::adaptive_max_pool2d`], plus [`Error::Backend`] and [`Error::DType`].
pub fn adaptive_max_pool2d(x: Tensor<4>, output_size: [usize; 2]) -> Result<Tensor<4>> {
    Ok(pool(name::adaptive_max_pool2d, Pooling::Adaptive(output_size), x)?.0)
}

/// [`adaptive_max_pool2d`] that also returns the flat index `ih * W + iw` of each maximum inside
/// its plane, as an I64 tensor. The output is differentiable; the indices are data.
///
/// # Errors
/// As [`adaptive_max_pool2d`].
pub fn adaptive_max_pool2d_with_indices(
    x: Tensor<4>,
    output_size: [usize; 2],
) -> Result<(Tensor<4>, Tensor<4, Int>)> {
    pool(name::adaptive_max_pool2d_with_indices, Pooling::Adaptive(output_size), x)
}

/// Gradient of [`adaptive_max_pool2d_with_indices`] for burn tensors
/// (`aclnnAdaptiveMaxPool2dBackward`): `grad_output` added at `indices` of each plane of a zero
/// tensor shaped as `x`. Not recorded by autodiff.
///
/// # Errors
/// As [`crate::adaptive_max_pool2d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn adaptive_max_pool2d_backward(
    grad_output: Tensor<4>,
    x: Tensor<4>,
    indices: Tensor<4, Int>,
) -> Result<Tensor<4>> {
    unpool(name::adaptive_max_pool2d_backward, Unpooling::Adaptive, grad_output, x, indices)
}

/// 2-D max pooling with PyTorch's semantics (kernel, stride, padding, dilation, ceil mode),
/// differentiable under burn's autodiff.
///
/// # Errors
/// As [`crate::max_pool2d_with_indices`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_pool2d(x: Tensor<4>, params: &MaxPool2dParams) -> Result<Tensor<4>> {
    Ok(pool(name::max_pool2d, Pooling::MaxPool(*params), x)?.0)
}

/// [`max_pool2d`] that also returns the flat indices of the maxima as an I64 tensor, as burn's
/// `max_pool2d_with_indices` does (and with its results on finite inputs).
///
/// ```
/// # #![allow(deprecated)] // burn 0.22 deprecates `Device::ndarray`
/// use burn_tensor::{Device, Tensor, TensorData};
/// use poolgrad::MaxPool2dParams;
///
/// let device = Device::ndarray();
/// let x = Tensor::<4>::from_data(TensorData::new((0..16).map(|v| v as f32).collect(), [1, 1, 4, 4]), &device);
/// let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
/// let (y, indices) = poolgrad::burn::max_pool2d_with_indices(x.clone(), &stem)?;
/// assert_eq!(y.to_data().try_to_vec::<f32>().unwrap(), [5.0, 7.0, 13.0, 15.0]);
/// assert_eq!(indices.to_data().try_to_vec::<i64>().unwrap(), [5, 7, 13, 15]);
/// let g = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [1, 1, 2, 2]), &device);
/// let gx = poolgrad::burn::max_pool2d_with_indices_backward(g, x, indices, &stem)?;
/// assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap()[5..8], [1.0, 0.0, 2.0]);
/// # Ok::<(), poolgrad::burn::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d`].
pub fn max_pool2d_with_indices(
    x: Tensor<4>,
    params: &MaxPool2dParams,
) -> Result<(Tensor<4>, Tensor<4, Int>)> {
    pool(name::max_pool2d_with_indices, Pooling::MaxPool(*params), x)
}

/// Gradient of [`max_pool2d_with_indices`] for burn tensors. Not recorded by autodiff.
///
/// # Errors
/// As [`crate::max_pool2d_with_indices_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_pool2d_with_indices_backward(
    grad_output: Tensor<4>,
    x: Tensor<4>,
    indices: Tensor<4, Int>,
    params: &MaxPool2dParams,
) -> Result<Tensor<4>> {
    unpool(name::max_pool2d_with_indices_backward, Unpooling::MaxPool(*params), grad_output, x, indices)
}

/// 3-D max pooling of `x` (`[N, C, D, H, W]`) with PyTorch's semantics, differentiable under
/// burn's autodiff. burn's backend has no 3-D max pooling.
///
/// ```
/// # #![allow(deprecated)]
/// use burn_tensor::{Device, Tensor, TensorData};
/// let device = Device::ndarray().autodiff();
/// let x = Tensor::<5>::from_data(TensorData::new((0..8).map(|v| v as f32).collect::<Vec<_>>(), [1, 1, 2, 2, 2]), &device)
///     .require_grad();
/// let y = poolgrad::burn::max_pool3d(x.clone(), &poolgrad::MaxPool3dParams::new([2, 2, 2]))?;
/// let gx = x.grad(&y.sum().backward()).expect("x requires grad");
/// assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), poolgrad::burn::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool3d_with_indices`], and [`Error::Backend`] / [`Error::DType`].
pub fn max_pool3d(x: Tensor<5>, params: &MaxPool3dParams) -> Result<Tensor<5>> {
    Ok(pool(name::max_pool3d, Pooling::MaxPool3d(*params), x)?.0)
}

/// [`max_pool3d`] that also returns the flat indices in each volume (`Tensor<5, Int>`, I64).
///
/// # Errors
/// As [`max_pool3d`].
pub fn max_pool3d_with_indices(
    x: Tensor<5>,
    params: &MaxPool3dParams,
) -> Result<(Tensor<5>, Tensor<5, Int>)> {
    pool(name::max_pool3d_with_indices, Pooling::MaxPool3d(*params), x)
}

/// Gradient of [`max_pool3d_with_indices`] for burn tensors: `grad_output` added at `indices` of
/// each volume of a zero tensor shaped as `x`. Not recorded by autodiff.
///
/// ```
/// # #![allow(deprecated)]
/// use burn_tensor::{Device, Tensor, TensorData};
/// let device = Device::ndarray();
/// let x = Tensor::<5>::from_data(TensorData::new((0..8).map(|v| v as f32).collect::<Vec<_>>(), [1, 1, 2, 2, 2]), &device);
/// let p = poolgrad::MaxPool3dParams::new([2, 2, 2]);
/// let (y, indices) = poolgrad::burn::max_pool3d_with_indices(x.clone(), &p)?;
/// let gx = poolgrad::burn::max_pool3d_with_indices_backward(y.ones_like(), x, indices, &p)?;
/// assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), poolgrad::burn::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool3d_with_indices_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_pool3d_with_indices_backward(
    grad_output: Tensor<5>,
    x: Tensor<5>,
    indices: Tensor<5, Int>,
    params: &MaxPool3dParams,
) -> Result<Tensor<5>> {
    unpool(name::max_pool3d_with_indices_backward, Unpooling::MaxPool3d(*params), grad_output, x, indices)
}

/// Adaptive 3-D max pooling of `x` to `output_size = [Do, Ho, Wo]`, differentiable.
///
/// # Errors
/// As [`crate::adaptive_max_pool3d`], and [`Error::Backend`] / [`Error::DType`].
pub fn adaptive_max_pool3d(x: Tensor<5>, output_size: [usize; 3]) -> Result<Tensor<5>> {
    Ok(pool(name::adaptive_max_pool3d, Pooling::Adaptive3d(output_size), x)?.0)
}

/// [`adaptive_max_pool3d`] that also returns the flat indices.
///
/// # Errors
/// As [`adaptive_max_pool3d`].
pub fn adaptive_max_pool3d_with_indices(
    x: Tensor<5>,
    output_size: [usize; 3],
) -> Result<(Tensor<5>, Tensor<5, Int>)> {
    pool(name::adaptive_max_pool3d_with_indices, Pooling::Adaptive3d(output_size), x)
}

/// Gradient of [`adaptive_max_pool3d_with_indices`] for burn tensors: `grad_output` added at
/// `indices` of each volume of a zero tensor shaped as `x`. Not recorded by autodiff.
///
/// # Errors
/// As [`crate::adaptive_max_pool3d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn adaptive_max_pool3d_backward(
    grad_output: Tensor<5>,
    x: Tensor<5>,
    indices: Tensor<5, Int>,
) -> Result<Tensor<5>> {
    unpool(name::adaptive_max_pool3d_backward, Unpooling::Adaptive3d, grad_output, x, indices)
}

/// 1-D max pooling of `x` (`[N, C, L]`) with PyTorch's semantics, differentiable.
///
/// # Errors
/// As [`crate::max_pool1d_with_indices`], and [`Error::Backend`] / [`Error::DType`].
pub fn max_pool1d(x: Tensor<3>, params: &MaxPool1dParams) -> Result<Tensor<3>> {
    Ok(pool(name::max_pool1d, Pooling::MaxPool1d(*params), x)?.0)
}

/// [`max_pool1d`] that also returns the positions of the maxima along `L`.
///
/// # Errors
/// As [`max_pool1d`].
pub fn max_pool1d_with_indices(
    x: Tensor<3>,
    params: &MaxPool1dParams,
) -> Result<(Tensor<3>, Tensor<3, Int>)> {
    pool(name::max_pool1d_with_indices, Pooling::MaxPool1d(*params), x)
}

/// Gradient of [`max_pool1d_with_indices`] for burn tensors: `grad_output` added at `indices` of
/// each line of a zero tensor shaped as `x`. Not recorded by autodiff.
///
/// # Errors
/// As [`crate::max_pool1d_with_indices_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_pool1d_with_indices_backward(
    grad_output: Tensor<3>,
    x: Tensor<3>,
    indices: Tensor<3, Int>,
    params: &MaxPool1dParams,
) -> Result<Tensor<3>> {
    unpool(name::max_pool1d_with_indices_backward, Unpooling::MaxPool1d(*params), grad_output, x, indices)
}

/// Adaptive 1-D max pooling of `x` to `output_size` positions, differentiable.
///
/// # Errors
/// As [`crate::adaptive_max_pool1d`], and [`Error::Backend`] / [`Error::DType`].
pub fn adaptive_max_pool1d(x: Tensor<3>, output_size: usize) -> Result<Tensor<3>> {
    Ok(pool(name::adaptive_max_pool1d, Pooling::Adaptive1d(output_size), x)?.0)
}

/// [`adaptive_max_pool1d`] that also returns the positions of the maxima.
///
/// # Errors
/// As [`adaptive_max_pool1d`].
pub fn adaptive_max_pool1d_with_indices(
    x: Tensor<3>,
    output_size: usize,
) -> Result<(Tensor<3>, Tensor<3, Int>)> {
    pool(name::adaptive_max_pool1d_with_indices, Pooling::Adaptive1d(output_size), x)
}

/// Gradient of [`adaptive_max_pool1d_with_indices`] for burn tensors: `grad_output` added at
/// `indices` of each line of a zero tensor shaped as `x`. Not recorded by autodiff.
///
/// # Errors
/// As [`crate::adaptive_max_pool1d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn adaptive_max_pool1d_backward(
    grad_output: Tensor<3>,
    x: Tensor<3>,
    indices: Tensor<3, Int>,
) -> Result<Tensor<3>> {
    unpool(name::adaptive_max_pool1d_backward, Unpooling::Adaptive1d, grad_output, x, indices)
}

/// 2-D max unpooling (PyTorch's `max_unpool2d` with its `output_size`): `x` written at
/// `indices` (flat in each output plane, as the `_with_indices` forms return them) in an output
/// of spatial size `output_size`, zero elsewhere; where indices of a plane repeat, the last
/// wins. Under autodiff, `x`'s gradient is the output's gradient read at each index, for the
/// last of equal indices only ([`crate::max_unpool2d_backward`]).
///
/// ```
/// # #![allow(deprecated)]
/// use burn_tensor::{Device, Tensor, TensorData};
/// let device = Device::ndarray().autodiff();
/// let x = Tensor::<4>::from_data(TensorData::new(vec![5.0f32, 7.0], [1, 1, 1, 2]), &device).require_grad();
/// let idx = Tensor::<4, burn_tensor::Int>::from_data(TensorData::new(vec![3i64, 3], [1, 1, 1, 2]), &device);
/// let y = poolgrad::burn::max_unpool2d(x.clone(), idx, [2, 2])?;
/// assert_eq!(y.to_data().try_to_vec::<f32>().unwrap(), [0.0, 0.0, 0.0, 7.0]); // the last wins
/// let gx = x.grad(&y.sum().backward()).expect("x requires grad");
/// assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap(), [0.0, 1.0]);
/// # Ok::<(), poolgrad::burn::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_unpool2d`], and [`Error::Backend`] / [`Error::DType`].
pub fn max_unpool2d(x: Tensor<4>, indices: Tensor<4, Int>, output_size: [usize; 2]) -> Result<Tensor<4>> {
    unpool_recorded_or_plain(name::max_unpool2d, (MaxUnpool::Plane(output_size), false), x, indices)
}

/// Gradient of [`max_unpool2d`] for burn tensors: `grad_output` read at each index, for the last
/// of equal indices of a plane (zero for the others), shaped as `indices`. Recorded under
/// autodiff, as a gather layer is: its gradient is [`max_unpool2d`] to `grad_output`'s size.
///
/// ```
/// # #![allow(deprecated)]
/// use burn_tensor::{Device, Int, Tensor, TensorData};
/// let device = Device::ndarray();
/// let idx = Tensor::<4, Int>::from_data(TensorData::new(vec![3i64, 3], [1, 1, 1, 2]), &device);
/// let g = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [1, 1, 2, 2]), &device);
/// let gx = poolgrad::burn::max_unpool2d_backward(g, idx)?;
/// assert_eq!(gx.to_data().try_to_vec::<f32>().unwrap(), [0.0, 4.0]); // the last of the repeats
/// # Ok::<(), poolgrad::burn::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_unpool2d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_unpool2d_backward(grad_output: Tensor<4>, indices: Tensor<4, Int>) -> Result<Tensor<4>> {
    let size = spatial(&grad_output.dims());
    unpool_recorded_or_plain(
        name::max_unpool2d_backward,
        (MaxUnpool::Plane(size), true),
        grad_output,
        indices,
    )
}

/// 3-D max unpooling: [`max_unpool2d`] over volumes (PyTorch's `max_unpool3d`).
///
/// # Errors
/// As [`crate::max_unpool3d`], and [`Error::Backend`] / [`Error::DType`].
pub fn max_unpool3d(x: Tensor<5>, indices: Tensor<5, Int>, output_size: [usize; 3]) -> Result<Tensor<5>> {
    unpool_recorded_or_plain(name::max_unpool3d, (MaxUnpool::Volume(output_size), false), x, indices)
}

/// Gradient of [`max_unpool3d`]: [`max_unpool2d_backward`] over volumes.
///
/// # Errors
/// As [`crate::max_unpool3d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_unpool3d_backward(grad_output: Tensor<5>, indices: Tensor<5, Int>) -> Result<Tensor<5>> {
    let size = spatial(&grad_output.dims());
    unpool_recorded_or_plain(
        name::max_unpool3d_backward,
        (MaxUnpool::Volume(size), true),
        grad_output,
        indices,
    )
}

/// 1-D max unpooling: [`max_unpool2d`] along lines (PyTorch's `max_unpool1d`).
///
/// # Errors
/// As [`crate::max_unpool1d`], and [`Error::Backend`] / [`Error::DType`].
pub fn max_unpool1d(x: Tensor<3>, indices: Tensor<3, Int>, output_size: usize) -> Result<Tensor<3>> {
    unpool_recorded_or_plain(name::max_unpool1d, (MaxUnpool::Line(output_size), false), x, indices)
}

/// Gradient of [`max_unpool1d`]: [`max_unpool2d_backward`] along lines.
///
/// # Errors
/// As [`crate::max_unpool1d_backward`], plus [`Error::Backend`] and [`Error::DType`].
pub fn max_unpool1d_backward(grad_output: Tensor<3>, indices: Tensor<3, Int>) -> Result<Tensor<3>> {
    let [size] = spatial(&grad_output.dims());
    unpool_recorded_or_plain(name::max_unpool1d_backward, (MaxUnpool::Line(size), true), grad_output, indices)
}

// ---------------------------------------------------------------------------------------------
// One forward and one backward core, on burn-ndarray's primitives.

/// The forward on an ndarray primitive: the output (x's dtype) and i64 indices.
fn forward(op: &'static str, pooling: Pooling, x: &NdArrayTensor) -> Result<(NdArrayTensor, NdArrayTensor)> {
    match x {
        NdArrayTensor::F32(x) => forward_typed::<f32>(op, pooling, x.view()),
        NdArrayTensor::F64(x) => forward_typed::<f64>(op, pooling, x.view()),
        other => Err(dtype_error(op, "x", FLOATS, other)),
    }
}

fn forward_typed<T>(
    op: &'static str,
    pooling: Pooling,
    x: ArrayViewD<'_, T>,
) -> Result<(NdArrayTensor, NdArrayTensor)>
where
    T: PoolFloat,
    NdArrayTensor: From<ArcArray<T, IxDyn>>,
{
    let pooled = pooling.forward(op, &x)?;
    Ok((pooled.output.into_shared().into(), pooled.indices.into_shared().into()))
}

/// The backward on ndarray primitives: `grad` scattered at `indices` into a tensor shaped as `x`.
fn backward(
    op: &'static str,
    which: Unpooling,
    grad: &NdArrayTensor,
    x: &NdArrayTensor,
    indices: &NdArrayTensor,
) -> Result<NdArrayTensor> {
    match (x, grad) {
        (NdArrayTensor::F32(x), NdArrayTensor::F32(g)) => {
            backward_float::<f32>(op, which, g.view(), x.view(), indices)
        }
        (NdArrayTensor::F64(x), NdArrayTensor::F64(g)) => {
            backward_float::<f64>(op, which, g.view(), x.view(), indices)
        }
        (NdArrayTensor::F32(_) | NdArrayTensor::F64(_), other) => {
            Err(dtype_error(op, "grad_output", dtype_name(x), other))
        }
        (other, _) => Err(dtype_error(op, "x", FLOATS, other)),
    }
}

fn backward_float<T>(
    op: &'static str,
    which: Unpooling,
    grad: ArrayViewD<'_, T>,
    x: ArrayViewD<'_, T>,
    indices: &NdArrayTensor,
) -> Result<NdArrayTensor>
where
    T: PoolFloat,
    NdArrayTensor: From<ArcArray<T, IxDyn>>,
{
    match indices {
        NdArrayTensor::I64(i) => backward_typed(op, which, grad, x, i.view()),
        NdArrayTensor::I32(i) => backward_typed(op, which, grad, x, i.view()),
        other => Err(dtype_error(op, "indices", "I64 or I32", other)),
    }
}

fn backward_typed<T, I>(
    op: &'static str,
    which: Unpooling,
    grad: ArrayViewD<'_, T>,
    x: ArrayViewD<'_, T>,
    indices: ArrayViewD<'_, I>,
) -> Result<NdArrayTensor>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    NdArrayTensor: From<ArcArray<T, IxDyn>>,
{
    Ok(which.backward(op, &grad, &x, &indices)?.into_shared().into())
}

/// The unpooling (`transposed: false`) or its backward (`transposed: true`) on ndarray
/// primitives: `values` moved between pooled positions and the positions `indices` address.
fn unpool_core(
    op: &'static str,
    which: MaxUnpool,
    transposed: bool,
    values: &NdArrayTensor,
    indices: &NdArrayTensor,
) -> Result<NdArrayTensor> {
    let arg = if transposed { "grad_output" } else { "x" };
    match values {
        NdArrayTensor::F32(v) => unpool_float::<f32>(op, which, transposed, v.view(), indices),
        NdArrayTensor::F64(v) => unpool_float::<f64>(op, which, transposed, v.view(), indices),
        other => Err(dtype_error(op, arg, FLOATS, other)),
    }
}

fn unpool_float<T>(
    op: &'static str,
    which: MaxUnpool,
    transposed: bool,
    values: ArrayViewD<'_, T>,
    indices: &NdArrayTensor,
) -> Result<NdArrayTensor>
where
    T: PoolFloat,
    NdArrayTensor: From<ArcArray<T, IxDyn>>,
{
    fn typed<T: PoolFloat, I: ArgmaxIndex>(
        (op, which, transposed): (&'static str, MaxUnpool, bool),
        values: ArrayViewD<'_, T>,
        indices: ArrayViewD<'_, I>,
    ) -> crate::Result<ndarray::ArrayD<T>> {
        if transposed { which.backward(op, &values, &indices) } else { which.forward(op, &values, &indices) }
    }
    let how = (op, which, transposed);
    let result = match indices {
        NdArrayTensor::I64(i) => typed(how, values, i.view()),
        NdArrayTensor::I32(i) => typed(how, values, i.view()),
        other => return Err(dtype_error(op, "indices", "I64 or I32", other)),
    };
    Ok(result?.into_shared().into())
}

// ---------------------------------------------------------------------------------------------
// burn tensors to primitives and back, and the autodiff operation.

/// The float dtypes of burn's ndarray backend.
const FLOATS: &str = "F32 or F64";

fn dtype_name(t: &NdArrayTensor) -> &'static str {
    match t {
        NdArrayTensor::F64(_) => "F64",
        NdArrayTensor::F32(_) => "F32",
        NdArrayTensor::I64(_) => "I64",
        NdArrayTensor::I32(_) => "I32",
        NdArrayTensor::I16(_) => "I16",
        NdArrayTensor::I8(_) => "I8",
        NdArrayTensor::U64(_) => "U64",
        NdArrayTensor::U32(_) => "U32",
        NdArrayTensor::U16(_) => "U16",
        NdArrayTensor::U8(_) => "U8",
        NdArrayTensor::Bool(_) => "Bool",
    }
}

fn dtype_error(op: &'static str, arg: &'static str, expected: &'static str, got: &NdArrayTensor) -> Error {
    Error::DType { op, arg, expected, got: dtype_name(got).to_owned() }
}

/// How a tensor runs: burn's ndarray backend, plain or under autodiff with a checkpointing
/// strategy. Results go back the way their input came.
#[derive(Clone, Copy)]
enum Flavor {
    Plain,
    Autodiff,
    AutodiffBalanced,
}

type AutodiffTensor<C> = <Autodiff<NdArray, C> as BackendTypes>::FloatTensorPrimitive;

fn backend_error(op: &'static str, arg: &'static str, device: &burn_tensor::Device) -> Error {
    Error::Backend { op, arg, device: format!("{device:?}") }
}

/// The ndarray primitive under a float tensor (not recorded), and how it runs.
fn float_primitive<const D: usize>(
    t: Tensor<D>,
    op: &'static str,
    arg: &'static str,
) -> Result<(NdArrayTensor, Flavor)> {
    let device = t.device();
    if let Ok(p) = t.clone().try_into_primitive::<NdArray>() {
        return Ok((p, Flavor::Plain));
    }
    if let Ok(p) = t.clone().try_into_primitive::<Autodiff<NdArray, NoCheckpointing>>() {
        return Ok((p.into_primitive(), Flavor::Autodiff));
    }
    if let Ok(p) = t.try_into_primitive::<Autodiff<NdArray, BalancedCheckpointing>>() {
        return Ok((p.into_primitive(), Flavor::AutodiffBalanced));
    }
    Err(backend_error(op, arg, &device))
}

/// The ndarray primitive under an int tensor (autodiff wraps only floats).
fn int_primitive<const D: usize>(
    t: Tensor<D, Int>,
    op: &'static str,
    arg: &'static str,
) -> Result<NdArrayTensor> {
    let device = t.device();
    if let Ok(p) = t.clone().try_into_primitive::<NdArray>() {
        return Ok(p);
    }
    if let Ok(p) = t.clone().try_into_primitive::<Autodiff<NdArray, NoCheckpointing>>() {
        return Ok(p);
    }
    t.try_into_primitive::<Autodiff<NdArray, BalancedCheckpointing>>()
        .map_err(|_| backend_error(op, arg, &device))
}

/// A float result as a tensor of `flavor` (an autodiff leaf: not recorded).
fn float_tensor<const D: usize>(p: NdArrayTensor, flavor: Flavor) -> Tensor<D> {
    match flavor {
        Flavor::Plain => Tensor::from_primitive::<NdArray>(p),
        Flavor::Autodiff => Tensor::from_primitive::<Autodiff<NdArray, NoCheckpointing>>(AutodiffTensor::<
            NoCheckpointing,
        >::new(p)),
        Flavor::AutodiffBalanced => {
            Tensor::from_primitive::<Autodiff<NdArray, BalancedCheckpointing>>(AutodiffTensor::<
                BalancedCheckpointing,
            >::new(p))
        }
    }
}

fn int_tensor<const D: usize>(p: NdArrayTensor, flavor: Flavor) -> Tensor<D, Int> {
    match flavor {
        Flavor::Plain => Tensor::from_primitive::<NdArray>(p),
        Flavor::Autodiff => Tensor::from_primitive::<Autodiff<NdArray, NoCheckpointing>>(p),
        Flavor::AutodiffBalanced => Tensor::from_primitive::<Autodiff<NdArray, BalancedCheckpointing>>(p),
    }
}

/// The public forwards: plain on ndarray, recorded under autodiff.
fn pool<const D: usize>(
    op: &'static str,
    pooling: Pooling,
    x: Tensor<D>,
) -> Result<(Tensor<D>, Tensor<D, Int>)> {
    let device = x.device();
    if let Ok(p) = x.clone().try_into_primitive::<NdArray>() {
        let (output, indices) = forward(op, pooling, &p)?;
        return Ok((float_tensor(output, Flavor::Plain), int_tensor(indices, Flavor::Plain)));
    }
    if let Some(result) = pool_recorded::<NoCheckpointing, D>(op, pooling, &x) {
        return result;
    }
    if let Some(result) = pool_recorded::<BalancedCheckpointing, D>(op, pooling, &x) {
        return result;
    }
    Err(backend_error(op, "x", &device))
}

/// The forward under autodiff with checkpointing strategy `C`, recorded as burn records its own
/// `max_pool2d_with_indices` (burn-autodiff 0.22.1, `ops/module.rs`): the input checkpointed,
/// the indices kept as the backward's state. `None` when `x` is not such a tensor.
fn pool_recorded<C, const D: usize>(
    op: &'static str,
    pooling: Pooling,
    x: &Tensor<D>,
) -> Option<Result<(Tensor<D>, Tensor<D, Int>)>>
where
    C: CheckpointStrategy,
    DispatchTensor: DispatchKindConversion<Autodiff<NdArray, C>>,
{
    let x = x.clone().try_into_primitive::<Autodiff<NdArray, C>>().ok()?;
    let (output, indices) = match forward(op, pooling, x.primitive()) {
        Ok(pair) => pair,
        Err(e) => return Some(Err(e)),
    };
    let recorded =
        PoolBackward { op, which: pooling.backward() }.prepare::<C>([x.node()]).compute_bound().stateful();
    let output = match recorded {
        OpsKind::Tracked(mut prep) => {
            let x_state = prep.checkpoint(&x);
            prep.finish((x_state, indices.clone()), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Some(Ok((
        Tensor::from_primitive::<Autodiff<NdArray, C>>(output),
        Tensor::from_primitive::<Autodiff<NdArray, C>>(indices),
    )))
}

/// The recorded operation's backward: poolgrad's, on the checkpointed input and stored indices.
#[derive(Debug)]
struct PoolBackward {
    op: &'static str,
    which: Unpooling,
}

impl Backward<NdArray, 1> for PoolBackward {
    type State = (NodeId, NdArrayTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<NdArray>(&ops.node);
        let (x_state, indices) = ops.state;
        let x: NdArrayTensor = checkpointer.retrieve_node_output(x_state);
        if let Some(node) = parent {
            // The forward checked x and made the indices; burn hands over a gradient shaped
            // and typed as the output. Nothing is left to fail but an allocation, and burn's
            // backward has no way to return an error.
            let gx = backward(self.op, self.which, &grad, &x, &indices)
                .unwrap_or_else(|e| panic!("{}: backward of a checked forward failed: {e}", self.op));
            grads.register::<NdArray>(node.id, gx);
        }
    }
}

/// The public unpoolings (`transposed: false`, of `x`) and their explicit backwards
/// (`transposed: true`, of `grad_output`): plain on ndarray, recorded under autodiff.
fn unpool_recorded_or_plain<const D: usize>(
    op: &'static str,
    how: (MaxUnpool, bool),
    x: Tensor<D>,
    indices: Tensor<D, Int>,
) -> Result<Tensor<D>> {
    let (which, transposed) = how;
    let device = x.device();
    let idx = int_primitive(indices, op, "indices")?;
    if let Ok(p) = x.clone().try_into_primitive::<NdArray>() {
        return Ok(float_tensor(unpool_core(op, which, transposed, &p, &idx)?, Flavor::Plain));
    }
    if let Some(result) = unpool_recorded::<NoCheckpointing, D>(op, how, &x, &idx) {
        return result;
    }
    if let Some(result) = unpool_recorded::<BalancedCheckpointing, D>(op, how, &x, &idx) {
        return result;
    }
    Err(backend_error(op, if transposed { "grad_output" } else { "x" }, &device))
}

/// The unpooling under autodiff with checkpointing strategy `C`: linear in `x`, so its backward
/// keeps only the indices. `None` when `x` is not such a tensor.
fn unpool_recorded<C, const D: usize>(
    op: &'static str,
    (which, transposed): (MaxUnpool, bool),
    x: &Tensor<D>,
    indices: &NdArrayTensor,
) -> Option<Result<Tensor<D>>>
where
    C: CheckpointStrategy,
    DispatchTensor: DispatchKindConversion<Autodiff<NdArray, C>>,
{
    let x = x.clone().try_into_primitive::<Autodiff<NdArray, C>>().ok()?;
    let output = match unpool_core(op, which, transposed, x.primitive(), indices) {
        Ok(output) => output,
        Err(e) => return Some(Err(e)),
    };
    let recorded = UnpoolBackward { op, which, transposed };
    let output = match recorded.prepare::<C>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => prep.finish(indices.clone(), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Some(Ok(Tensor::from_primitive::<Autodiff<NdArray, C>>(output)))
}

/// The recorded unpooling's backward: poolgrad's, on the stored indices.
#[derive(Debug)]
struct UnpoolBackward {
    op: &'static str,
    which: MaxUnpool,
    /// Whether the recorded operation is the unpooling's backward (whose gradient is then the
    /// unpooling).
    transposed: bool,
}

impl Backward<NdArray, 1> for UnpoolBackward {
    type State = NdArrayTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let grad = grads.consume::<NdArray>(&ops.node);
        if let Some(node) = parent {
            // The operation checked the indices against the plane burn hands a gradient of (the
            // unpooling's output) or returns one of (its backward's input); nothing is left to
            // fail but an allocation, and burn's backward cannot return one.
            let gx = unpool_core(self.op, self.which, !self.transposed, &grad, &ops.state)
                .unwrap_or_else(|e| panic!("{}: backward of a checked unpooling failed: {e}", self.op));
            grads.register::<NdArray>(node.id, gx);
        }
    }
}

/// The public backwards: not recorded; the result runs as `x` does.
fn unpool<const D: usize>(
    op: &'static str,
    which: Unpooling,
    grad_output: Tensor<D>,
    x: Tensor<D>,
    indices: Tensor<D, Int>,
) -> Result<Tensor<D>> {
    let (x, flavor) = float_primitive(x, op, "x")?;
    let (grad, _) = float_primitive(grad_output, op, "grad_output")?;
    let indices = int_primitive(indices, op, "indices")?;
    Ok(float_tensor(backward(op, which, &grad, &x, &indices)?, flavor))
}
