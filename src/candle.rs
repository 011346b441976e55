//! poolgrad inside [candle](https://docs.rs/candle-core) models (feature `candle`, candle-core
//! 0.11): max pooling with PyTorch's gradients through candle's autograd.
//!
//! candle's own `max_pool2d` has no padding, dilation, ceil mode or indices, refuses a backward
//! with `kernel != stride`, and its gradient is not PyTorch's: it gives a window's gradient,
//! times the share of the window's taps equal to the maximum, to every such tap (a 2x2 window
//! with one maximum passes on a quarter of its gradient; with two tied maxima, half to each).
//! candle has no adaptive max pooling. The functions here fill both gaps: the forward is poolgrad's, and
//! when the input tracks gradients (a [`candle_core::Var`], or a tensor computed from one)
//! [`Tensor::backward`] runs poolgrad's backward, PyTorch's rule: the first maximum of a window
//! takes its whole gradient; f16 and bf16 gradients are summed in f32 and rounded once.
//!
//! **Second order.** The backward of the forwards with indices (every function here but the
//! mask one) is itself a recorded operation whose gradient is the double backward (the gradient
//! of the second-order term read at each arg-max), so gradient penalties and Hessian-vector
//! products flow through the pooling. candle detaches every gradient unless the environment
//! variable `CANDLE_GRAD_DO_NOT_DETACH` is set when a thread first runs a backward (its
//! backprop calls second order "out of scope"); without it, gradients are first order as in any
//! candle model. Third order is candle's `BackwardNotSupported` error.
//!
//! ```
//! use candle_core::{Device, Var};
//! use poolgrad::MaxPool2dParams;
//!
//! // One plane, 4x4; a ResNet stem's pooling: kernel 3, stride 2, padding 1.
//! let x = Var::from_vec((0..16).map(|v| v as f32).collect::<Vec<_>>(), (1, 1, 4, 4), &Device::Cpu)?;
//! let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
//! let y = poolgrad::candle::max_pool2d(&x, &stem)?; // [1, 1, 2, 2]
//! let z = poolgrad::candle::adaptive_max_pool2d(&y, [1, 1])?; // [1, 1, 1, 1]
//! assert_eq!(z.flatten_all()?.to_vec1::<f32>()?, [15.0]);
//!
//! let grads = z.sum_all()?.backward()?;
//! let gx = grads.get(&x).expect("x takes part in z");
//! let mut expected = vec![0.0f32; 16];
//! expected[15] = 1.0; // only the maximum of the maximum receives the gradient
//! assert_eq!(gx.flatten_all()?.to_vec1::<f32>()?, expected);
//! # Ok::<(), candle_core::Error>(())
//! ```
//!
//! # What it takes
//!
//! - Tensors of rank 4 (`[N, C, H, W]`) or 3 (`[C, H, W]`) (the 3-D poolings: 5 or 4; the 1-D
//!   ones: 3 or 2), in F32, F64, F16 or BF16, in CPU
//!   storage. Any layout candle makes (transposed, narrowed, broadcast, with an offset) is read in
//!   place, without a copy. A tensor on another device is an error that says to move it.
//! - Indices as candle tensors of dtype I64 (what the `_with_indices` forms return, PyTorch's
//!   dtype) or I32.
//! - A mask as poolgrad's [`Mask`]: candle has no type for its bytes and the parameters it
//!   carries.
//!
//! Errors are candle errors (`candle_core::Error::Wrapped`) whose message is poolgrad's: the
//! operation, the argument, what was expected and what was given.
//!
//! The mask forward's backward is not itself differentiable (no second derivatives through it).
//!
//! **Max unpooling** ([`max_unpool1d`], [`max_unpool2d`], [`max_unpool3d`]; candle has none)
//! writes pooled values back at their indices, as SegNet-style decoders do. Where indices of a
//! plane repeat, the last wins and alone gets the gradient, so the unpooling and its gradient
//! are each other's transpose, at every order; the gradient is a function too
//! ([`max_unpool2d_backward`]), a gather layer whose own gradient is the unpooling.

use std::sync::{Arc, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, DType, Layout, MetalStorage, Shape, Storage, Tensor, WithDType,
};
use ndarray::{ArrayD, ArrayViewD, IxDyn, ShapeBuilder};

use crate::bridge::{MaxUnpool, Pooling, Unpooling, function_names, in_terms_of, spatial};
use crate::{Mask, MaskLayout, MaxPool1dParams, MaxPool2dParams, MaxPool3dParams};

// The functions' names, which begin their messages (and name the recorded operation in
// candle's): each message names the function the user called.
function_names!("poolgrad::candle::": max_pool2d, max_pool2d_with_indices, max_pool2d_with_indices_backward, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, adaptive_max_pool2d_backward, max_pool2d_with_mask, max_pool2d_with_mask_backward, max_pool3d, max_pool3d_with_indices, adaptive_max_pool3d, adaptive_max_pool3d_with_indices, max_pool1d, max_pool1d_with_indices, adaptive_max_pool1d, adaptive_max_pool1d_with_indices, max_unpool1d, max_unpool2d, max_unpool3d, max_pool3d_with_indices_backward, adaptive_max_pool3d_backward, max_pool1d_with_indices_backward, adaptive_max_pool1d_backward, max_unpool1d_backward, max_unpool2d_backward, max_unpool3d_backward);

/// 2-D max pooling of `x` with PyTorch's semantics (kernel, stride, padding, dilation, ceil mode),
/// differentiable through candle's autograd with PyTorch's gradient.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use poolgrad::MaxPool2dParams;
/// let x = Tensor::new(&[[[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]]], &Device::Cpu)?;
/// let p = MaxPool2dParams::new([2, 2]).with_stride([1, 1]);
/// let y = poolgrad::candle::max_pool2d(&x, &p)?;
/// assert_eq!(y.flatten_all()?.to_vec1::<f32>()?, [9.0, 9.0, 9.0, 9.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool2d_with_indices`], and for a tensor that is not a CPU float tensor.
pub fn max_pool2d(x: &Tensor, params: &MaxPool2dParams) -> candle_core::Result<Tensor> {
    Ok(pool(name::max_pool2d, x, Pooling::MaxPool(*params))?.0)
}

/// [`max_pool2d`] that also returns the flat index `ih * W + iw` of each maximum inside its plane,
/// as an I64 tensor (PyTorch's `return_indices=True`). The output is differentiable; the indices
/// are data.
///
/// # Errors
/// As [`max_pool2d`].
pub fn max_pool2d_with_indices(
    x: &Tensor,
    params: &MaxPool2dParams,
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::max_pool2d_with_indices, x, Pooling::MaxPool(*params))
}

/// Gradient of [`max_pool2d_with_indices`] for candle tensors: `grad_output[.., oh, ow]` added at
/// `indices[.., oh, ow]` of each plane of a zero tensor shaped as `x`. The indices carry all the
/// backward needs; `params` are those of the forward, checked against the shapes.
///
/// # Errors
/// As [`crate::max_pool2d_with_indices_backward`], and for tensors that are not CPU tensors of
/// the right dtypes (`grad_output` of `x`'s dtype, `indices` I64 or I32).
pub fn max_pool2d_with_indices_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
    params: &MaxPool2dParams,
) -> candle_core::Result<Tensor> {
    backward_with_indices(
        name::max_pool2d_with_indices_backward,
        grad_output,
        x,
        indices,
        Unpooling::MaxPool(*params),
    )
}

/// Adaptive 2-D max pooling of `x` to `output_size = [Ho, Wo]` with PyTorch's semantics,
/// differentiable through candle's autograd with PyTorch's gradient. candle has no adaptive max
/// pooling of its own.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let x = Tensor::new(&[[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]], &Device::Cpu)?;
/// let y = poolgrad::candle::adaptive_max_pool2d(&x, [2, 2])?; // overlapping windows
/// assert_eq!(y.to_vec3::<f32>()?, [[[9.0, 9.0], [9.0, 9.0]]]);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::adaptive_max_pool2d`], and for a tensor that is not a CPU float tensor.
pub fn adaptive_max_pool2d(x: &Tensor, output_size: [usize; 2]) -> candle_core::Result<Tensor> {
    Ok(pool(name::adaptive_max_pool2d, x, Pooling::Adaptive(output_size))?.0)
}

/// [`adaptive_max_pool2d`] that also returns the flat indices of the maxima, as an I64 tensor.
///
/// # Errors
/// As [`adaptive_max_pool2d`].
pub fn adaptive_max_pool2d_with_indices(
    x: &Tensor,
    output_size: [usize; 2],
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::adaptive_max_pool2d_with_indices, x, Pooling::Adaptive(output_size))
}

/// Gradient of [`adaptive_max_pool2d_with_indices`] for candle tensors
/// (`aclnnAdaptiveMaxPool2dBackward`).
///
/// # Errors
/// As [`crate::adaptive_max_pool2d_backward`], and for tensors that are not CPU tensors of the
/// right dtypes (`grad_output` of `x`'s dtype, `indices` I64 or I32).
pub fn adaptive_max_pool2d_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
) -> candle_core::Result<Tensor> {
    backward_with_indices(name::adaptive_max_pool2d_backward, grad_output, x, indices, Unpooling::Adaptive)
}

/// Max pooling that records its arg-max as an Ascend int8 mask in `layout`
/// ([`I32Argmax`](crate::I32Argmax) or [`Bitmask`](crate::Bitmask)), as
/// [`crate::max_pool2d_with_mask`] does. The output is differentiable: its backward decodes the
/// mask (`aclnnMaxPool2dWithMaskBackward`).
///
/// ```
/// use candle_core::{Device, Tensor, Var};
/// use poolgrad::{Bitmask, MaxPool2dParams};
/// let x = Var::new(&[[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]], &Device::Cpu)?;
/// let (y, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), Bitmask)?;
/// assert_eq!(y.to_vec3::<f32>()?, [[[5.0, 7.0], [9.0, 6.0]]]);
/// let gx = y.sum_all()?.backward()?.get(&x).unwrap().to_vec3::<f32>()?;
/// assert_eq!(gx, [[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]);
/// // The mask also serves the explicit backward:
/// let g = Tensor::ones((1, 2, 2), candle_core::DType::F32, &Device::Cpu)?;
/// let gx2 = poolgrad::candle::max_pool2d_with_mask_backward(&g, &x, &mask)?;
/// assert_eq!(gx2.to_vec3::<f32>()?, gx);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool2d_with_mask`], and for a tensor that is not a CPU float tensor.
pub fn max_pool2d_with_mask<L: MaskLayout>(
    x: &Tensor,
    params: &MaxPool2dParams,
    layout: L,
) -> candle_core::Result<(Tensor, Mask<L, IxDyn>)> {
    const OP: &str = name::max_pool2d_with_mask;
    let mask = Arc::new(OnceLock::new());
    let output = x.apply_op1(MaskOp { params: *params, layout, mask: Arc::clone(&mask) })?;
    Ok((output, stashed(&mask, OP)?.clone()))
}

/// Gradient of [`max_pool2d_with_mask`] for candle tensors, with the parameters the mask carries.
///
/// # Errors
/// As [`crate::max_pool2d_with_mask_backward`], and for tensors that are not CPU tensors of one
/// float dtype.
pub fn max_pool2d_with_mask_backward<L: MaskLayout>(
    grad_output: &Tensor,
    x: &Tensor,
    mask: &Mask<L, IxDyn>,
) -> candle_core::Result<Tensor> {
    mask_backward(name::max_pool2d_with_mask_backward, grad_output, x, mask)
}

/// 3-D max pooling of `x` (`[N, C, D, H, W]` or `[C, D, H, W]`) with PyTorch's semantics,
/// differentiable through candle's autograd with PyTorch's gradient. candle has no 3-D pooling
/// of its own.
///
/// ```
/// use candle_core::{Device, Var};
/// use poolgrad::MaxPool3dParams;
/// let x = Var::from_vec((0..8).map(|v| v as f32).collect::<Vec<_>>(), (1, 1, 2, 2, 2), &Device::Cpu)?;
/// let y = poolgrad::candle::max_pool3d(&x, &MaxPool3dParams::new([2, 2, 2]))?;
/// assert_eq!(y.flatten_all()?.to_vec1::<f32>()?, [7.0]);
/// let gx = y.sum_all()?.backward()?.get(&x).unwrap().flatten_all()?.to_vec1::<f32>()?;
/// assert_eq!(gx, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool3d_with_indices`], and for a tensor that is not a CPU float tensor.
pub fn max_pool3d(x: &Tensor, params: &MaxPool3dParams) -> candle_core::Result<Tensor> {
    Ok(pool(name::max_pool3d, x, Pooling::MaxPool3d(*params))?.0)
}

/// [`max_pool3d`] that also returns the flat index `(id * H + ih) * W + iw` of each maximum in
/// its volume, as an I64 tensor.
///
/// # Errors
/// As [`max_pool3d`].
pub fn max_pool3d_with_indices(
    x: &Tensor,
    params: &MaxPool3dParams,
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::max_pool3d_with_indices, x, Pooling::MaxPool3d(*params))
}

/// Gradient of [`max_pool3d_with_indices`] for candle tensors: `grad_output[.., od, oh, ow]`
/// added at `indices[.., od, oh, ow]` of each volume of a zero tensor shaped as `x`. `params` are
/// those of the forward, checked against the shapes. Not recorded by candle's autograd.
///
/// ```
/// use candle_core::{Device, Tensor};
/// use poolgrad::MaxPool3dParams;
/// let x = Tensor::arange(0f32, 8.0, &Device::Cpu)?.reshape((1, 1, 2, 2, 2))?;
/// let p = MaxPool3dParams::new([2, 2, 2]);
/// let (y, idx) = poolgrad::candle::max_pool3d_with_indices(&x, &p)?;
/// let gx = poolgrad::candle::max_pool3d_with_indices_backward(&y.ones_like()?, &x, &idx, &p)?;
/// assert_eq!(gx.flatten_all()?.to_vec1::<f32>()?, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool3d_with_indices_backward`], and as [`max_pool2d_with_indices_backward`]
/// for the tensors.
pub fn max_pool3d_with_indices_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
    params: &MaxPool3dParams,
) -> candle_core::Result<Tensor> {
    backward_with_indices(
        name::max_pool3d_with_indices_backward,
        grad_output,
        x,
        indices,
        Unpooling::MaxPool3d(*params),
    )
}

/// Adaptive 3-D max pooling of `x` to `output_size = [Do, Ho, Wo]`, differentiable.
///
/// # Errors
/// As [`crate::adaptive_max_pool3d`], and for a tensor that is not a CPU float tensor.
pub fn adaptive_max_pool3d(x: &Tensor, output_size: [usize; 3]) -> candle_core::Result<Tensor> {
    Ok(pool(name::adaptive_max_pool3d, x, Pooling::Adaptive3d(output_size))?.0)
}

/// [`adaptive_max_pool3d`] that also returns the flat indices, as an I64 tensor.
///
/// # Errors
/// As [`adaptive_max_pool3d`].
pub fn adaptive_max_pool3d_with_indices(
    x: &Tensor,
    output_size: [usize; 3],
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::adaptive_max_pool3d_with_indices, x, Pooling::Adaptive3d(output_size))
}

/// Gradient of [`adaptive_max_pool3d_with_indices`] for candle tensors: `grad_output` added at
/// `indices` of each volume of a zero tensor shaped as `x`. Not recorded by candle's autograd.
///
/// # Errors
/// As [`crate::adaptive_max_pool3d_backward`], and as [`max_pool2d_with_indices_backward`] for
/// the tensors.
pub fn adaptive_max_pool3d_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
) -> candle_core::Result<Tensor> {
    backward_with_indices(name::adaptive_max_pool3d_backward, grad_output, x, indices, Unpooling::Adaptive3d)
}

/// 1-D max pooling of `x` (`[N, C, L]` or `[C, L]`) with PyTorch's semantics, differentiable.
/// candle has no 1-D pooling of its own.
///
/// ```
/// use candle_core::{Device, Var};
/// use poolgrad::MaxPool1dParams;
/// let x = Var::new(&[[1.0f32, 5.0, 2.0, 5.0]], &Device::Cpu)?;
/// let y = poolgrad::candle::max_pool1d(&x, &MaxPool1dParams::new([2]).with_stride([1]))?;
/// assert_eq!(y.to_vec2::<f32>()?, [[5.0, 5.0, 5.0]]);
/// let gx = y.sum_all()?.backward()?.get(&x).unwrap().to_vec2::<f32>()?;
/// assert_eq!(gx, [[0.0, 2.0, 0.0, 1.0]]); // windows 1 and 2 pick the first 5.0
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_pool1d_with_indices`], and for a tensor that is not a CPU float tensor.
pub fn max_pool1d(x: &Tensor, params: &MaxPool1dParams) -> candle_core::Result<Tensor> {
    Ok(pool(name::max_pool1d, x, Pooling::MaxPool1d(*params))?.0)
}

/// [`max_pool1d`] that also returns the positions of the maxima along `L`, as an I64 tensor.
///
/// # Errors
/// As [`max_pool1d`].
pub fn max_pool1d_with_indices(
    x: &Tensor,
    params: &MaxPool1dParams,
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::max_pool1d_with_indices, x, Pooling::MaxPool1d(*params))
}

/// Gradient of [`max_pool1d_with_indices`] for candle tensors: `grad_output[.., o]` added at
/// `indices[.., o]` of each line of a zero tensor shaped as `x`. `params` are those of the
/// forward, checked against the shapes. Not recorded by candle's autograd.
///
/// # Errors
/// As [`crate::max_pool1d_with_indices_backward`], and as [`max_pool2d_with_indices_backward`]
/// for the tensors.
pub fn max_pool1d_with_indices_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
    params: &MaxPool1dParams,
) -> candle_core::Result<Tensor> {
    backward_with_indices(
        name::max_pool1d_with_indices_backward,
        grad_output,
        x,
        indices,
        Unpooling::MaxPool1d(*params),
    )
}

/// Adaptive 1-D max pooling of `x` to `output_size` positions, differentiable.
///
/// # Errors
/// As [`crate::adaptive_max_pool1d`], and for a tensor that is not a CPU float tensor.
pub fn adaptive_max_pool1d(x: &Tensor, output_size: usize) -> candle_core::Result<Tensor> {
    Ok(pool(name::adaptive_max_pool1d, x, Pooling::Adaptive1d(output_size))?.0)
}

/// [`adaptive_max_pool1d`] that also returns the positions of the maxima, as an I64 tensor.
///
/// # Errors
/// As [`adaptive_max_pool1d`].
pub fn adaptive_max_pool1d_with_indices(
    x: &Tensor,
    output_size: usize,
) -> candle_core::Result<(Tensor, Tensor)> {
    pool(name::adaptive_max_pool1d_with_indices, x, Pooling::Adaptive1d(output_size))
}

/// Gradient of [`adaptive_max_pool1d_with_indices`] for candle tensors: `grad_output` added at
/// `indices` of each line of a zero tensor shaped as `x`. Not recorded by candle's autograd.
///
/// # Errors
/// As [`crate::adaptive_max_pool1d_backward`], and as [`max_pool2d_with_indices_backward`] for
/// the tensors.
pub fn adaptive_max_pool1d_backward(
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
) -> candle_core::Result<Tensor> {
    backward_with_indices(name::adaptive_max_pool1d_backward, grad_output, x, indices, Unpooling::Adaptive1d)
}

/// 2-D max unpooling (PyTorch's `max_unpool2d` with its `output_size`): `x` written at
/// `indices` (flat in each output plane, as the `_with_indices` forms return them) in an output
/// of spatial size `output_size`, zero elsewhere; where indices of a plane repeat, the last
/// wins. Differentiable through candle's autograd: the gradient of `x` is the output's gradient
/// read at each index, for the last of equal indices only ([`crate::max_unpool2d_backward`]),
/// and that backward is itself differentiable (its gradient is this unpooling).
///
/// ```
/// use candle_core::{Device, Tensor};
/// use poolgrad::MaxPool2dParams;
/// let x = Tensor::new(&[[[[1.0f32, 2.0], [4.0, 3.0]]]], &Device::Cpu)?;
/// let (y, idx) = poolgrad::candle::max_pool2d_with_indices(&x, &MaxPool2dParams::new([2, 2]))?;
/// let u = poolgrad::candle::max_unpool2d(&y, &idx, [2, 2])?;
/// assert_eq!(u.flatten_all()?.to_vec1::<f32>()?, [0.0, 0.0, 4.0, 0.0]);
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_unpool2d`], and for tensors that are not CPU tensors of a float dtype (`x`)
/// and I64 or I32 (`indices`).
pub fn max_unpool2d(x: &Tensor, indices: &Tensor, output_size: [usize; 2]) -> candle_core::Result<Tensor> {
    unpool(name::max_unpool2d, x, indices, MaxUnpool::Plane(output_size))
}

/// Gradient of [`max_unpool2d`] for candle tensors: `grad_output` read at each index, for the
/// last of equal indices of a plane (zero for the others), shaped as `indices`. Differentiable
/// through candle's autograd, as a gather layer is: its gradient is [`max_unpool2d`] to
/// `grad_output`'s size.
///
/// ```
/// use candle_core::{Device, Tensor};
/// let idx = Tensor::new(&[[[[3i64, 3]]]], &Device::Cpu)?;
/// let g = Tensor::new(&[[[[1.0f32, 2.0], [3.0, 4.0]]]], &Device::Cpu)?;
/// let gx = poolgrad::candle::max_unpool2d_backward(&g, &idx)?;
/// assert_eq!(gx.flatten_all()?.to_vec1::<f32>()?, [0.0, 4.0]); // the last of the repeats
/// # Ok::<(), candle_core::Error>(())
/// ```
///
/// # Errors
/// As [`crate::max_unpool2d_backward`], and as [`max_unpool2d`] for the tensors (`grad_output`
/// of a float dtype).
pub fn max_unpool2d_backward(grad_output: &Tensor, indices: &Tensor) -> candle_core::Result<Tensor> {
    let size = spatial(grad_output.dims());
    unpool_backward(name::max_unpool2d_backward, grad_output, indices, MaxUnpool::Plane(size))
}

/// 3-D max unpooling: [`max_unpool2d`] over volumes (PyTorch's `max_unpool3d`).
///
/// # Errors
/// As [`crate::max_unpool3d`], and as [`max_unpool2d`] for the tensors.
pub fn max_unpool3d(x: &Tensor, indices: &Tensor, output_size: [usize; 3]) -> candle_core::Result<Tensor> {
    unpool(name::max_unpool3d, x, indices, MaxUnpool::Volume(output_size))
}

/// Gradient of [`max_unpool3d`]: [`max_unpool2d_backward`] over volumes.
///
/// # Errors
/// As [`crate::max_unpool3d_backward`], and as [`max_unpool2d_backward`] for the tensors.
pub fn max_unpool3d_backward(grad_output: &Tensor, indices: &Tensor) -> candle_core::Result<Tensor> {
    let size = spatial(grad_output.dims());
    unpool_backward(name::max_unpool3d_backward, grad_output, indices, MaxUnpool::Volume(size))
}

/// 1-D max unpooling: [`max_unpool2d`] along lines (PyTorch's `max_unpool1d`).
///
/// # Errors
/// As [`crate::max_unpool1d`], and as [`max_unpool2d`] for the tensors.
pub fn max_unpool1d(x: &Tensor, indices: &Tensor, output_size: usize) -> candle_core::Result<Tensor> {
    unpool(name::max_unpool1d, x, indices, MaxUnpool::Line(output_size))
}

/// Gradient of [`max_unpool1d`]: [`max_unpool2d_backward`] along lines.
///
/// # Errors
/// As [`crate::max_unpool1d_backward`], and as [`max_unpool2d_backward`] for the tensors.
pub fn max_unpool1d_backward(grad_output: &Tensor, indices: &Tensor) -> candle_core::Result<Tensor> {
    let [size] = spatial(grad_output.dims());
    unpool_backward(name::max_unpool1d_backward, grad_output, indices, MaxUnpool::Line(size))
}

/// The unpoolings: recorded by candle when `x` tracks gradients.
fn unpool(op: &'static str, x: &Tensor, indices: &Tensor, which: MaxUnpool) -> candle_core::Result<Tensor> {
    x.apply_op1(UnpoolOp { op, which, indices: indices.clone(), transposed: false })
}

/// The unpoolings' explicit backwards: the transposed [`UnpoolOp`], recorded as the unpoolings
/// are (`which` is the unpooling to `grad_output`'s size, this backward's gradient).
fn unpool_backward(
    op: &'static str,
    grad_output: &Tensor,
    indices: &Tensor,
    which: MaxUnpool,
) -> candle_core::Result<Tensor> {
    grad_output.apply_op1(UnpoolOp { op, which, indices: indices.clone(), transposed: true })
}

/// The forward with indices behind [`max_pool2d`], [`adaptive_max_pool2d`] and their
/// `_with_indices` forms: recorded by candle when `x` tracks gradients.
fn pool(op: &'static str, x: &Tensor, pooling: Pooling) -> candle_core::Result<(Tensor, Tensor)> {
    let indices = Arc::new(OnceLock::new());
    let output = x.apply_op1(IndexedOp { op, pooling, indices: Arc::clone(&indices) })?;
    Ok((output, stashed(&indices, op)?.clone()))
}

// ---------------------------------------------------------------------------------------------
// The custom operations candle records, one per forward.

/// A forward with flat indices (max pooling or adaptive max pooling); its backward reads the
/// indices it stored.
struct IndexedOp {
    op: &'static str,
    pooling: Pooling,
    indices: Arc<OnceLock<Tensor>>,
}

struct MaskOp<L: MaskLayout> {
    params: MaxPool2dParams,
    layout: L,
    mask: Arc<OnceLock<Mask<L, IxDyn>>>,
}

/// Runs `$body` with `$t` the Rust type of candle's dtype `$dtype`, one of the listed pairs;
/// another dtype is an error naming `$arg` of `$op` and the dtypes `$expected`.
macro_rules! with_type {
    ($dtype:expr, $op:expr, $arg:expr, $expected:literal, [$($d:ident => $ty:ty),+], $t:ident => $body:expr) => {
        match $dtype {
            $(DType::$d => {
                type $t = $ty;
                $body
            })+
            other => Err(unsupported_dtype($op, $arg, $expected, other)),
        }
    };
}

/// [`with_type`] over the float dtypes poolgrad pools (F32, F64, F16, BF16).
macro_rules! with_float_type {
    ($dtype:expr, $op:expr, $arg:expr, $t:ident => $body:expr) => {
        with_type!($dtype, $op, $arg, "F32, F64, F16 or BF16",
            [F32 => f32, F64 => f64, F16 => half::f16, BF16 => half::bf16], $t => $body)
    };
}

/// [`with_type`] over the index dtypes (I64, I32).
macro_rules! with_index_type {
    ($dtype:expr, $op:expr, $arg:expr, $t:ident => $body:expr) => {
        with_type!($dtype, $op, $arg, "I64 or I32", [I64 => i64, I32 => i32], $t => $body)
    };
}

/// A tensor in GPU storage is an error naming the function (candle's default names no tensor
/// and says nothing of what to do).
macro_rules! gpu_storage_is_an_error {
    () => {
        gpu_storage_is_an_error!("x");
    };
    ($arg:literal) => {
        fn cuda_fwd(&self, _: &CudaStorage, _: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
            Err(not_on_cpu(self.name(), $arg, "a CUDA device"))
        }

        fn metal_fwd(&self, _: &MetalStorage, _: &Layout) -> candle_core::Result<(MetalStorage, Shape)> {
            Err(not_on_cpu(self.name(), $arg, "a Metal device"))
        }
    };
}

impl CustomOp1 for IndexedOp {
    fn name(&self) -> &'static str {
        self.op
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        with_float_type!(storage.dtype(), self.op, "x", T => {
            let x = cpu_view::<T>(storage, layout, self.op, "x")?;
            let pooled = self.pooling.forward(self.op, &x).map_err(wrap)?;
            let indices_tensor = into_tensor(pooled.indices)?;
            self.indices.get_or_init(|| indices_tensor);
            Ok(into_storage(pooled.output))
        })
    }

    gpu_storage_is_an_error!();

    /// The backward as a recorded operation of its own ([`GradientOp`]), so that it is itself
    /// differentiable in `grad_res`.
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let indices = stashed(&self.indices, self.op)?.clone();
        let which = self.pooling.backward();
        grad_res.apply_op1(GradientOp { op: self.op, which, x: arg.clone(), indices }).map(Some)
    }
}

/// The backward of a forward with indices, as an operation on the gradient it maps: what
/// [`IndexedOp`]'s backward records (linear in `grad_output`, with the double backward as its
/// own gradient, [`DoubleBackwardOp`]) and what the explicit backwards run unrecorded
/// ([`backward_with_indices`]). candle detaches gradients unless `CANDLE_GRAD_DO_NOT_DETACH` is
/// set; with it set, second-order gradients (a gradient penalty, a Hessian-vector product) flow
/// through the pooling.
struct GradientOp {
    op: &'static str,
    which: Unpooling,
    x: Tensor,
    indices: Tensor,
}

impl CustomOp1 for GradientOp {
    fn name(&self) -> &'static str {
        self.op
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.op;
        let (x_storage, x_layout) = self.x.storage_and_layout();
        let (idx_storage, idx_layout) = self.indices.storage_and_layout();
        let (x_cpu, idx_cpu) = (cpu_storage(&x_storage, op, "x")?, cpu_storage(&idx_storage, op, "indices")?);
        with_float_type!(self.x.dtype(), op, "x", T => {
            with_index_type!(self.indices.dtype(), op, "indices", I => {
                let grad = cpu_view::<T>(storage, layout, op, "grad_output")?;
                let x = cpu_view::<T>(x_cpu, x_layout, op, "x")?;
                let idx = cpu_view::<I>(idx_cpu, idx_layout, op, "indices")?;
                Ok(into_storage(self.which.backward(op, &grad, &x, &idx).map_err(wrap)?))
            })
        })
    }

    gpu_storage_is_an_error!("grad_output");

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let double = DoubleBackwardOp { op: self.op, which: self.which, indices: self.indices.clone() };
        grad_res.apply_op1(double).map(Some)
    }
}

/// The gradient of a [`GradientOp`] with respect to its `grad_output`: the double backward, a
/// gather at the arg-max. Its own gradient (third order) is not provided: candle reports
/// `BackwardNotSupported`.
struct DoubleBackwardOp {
    op: &'static str,
    which: Unpooling,
    indices: Tensor,
}

impl CustomOp1 for DoubleBackwardOp {
    fn name(&self) -> &'static str {
        self.op
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.op;
        let (idx_storage, idx_layout) = self.indices.storage_and_layout();
        let idx_cpu = cpu_storage(&idx_storage, op, "indices")?;
        with_float_type!(storage.dtype(), op, "grad", T => {
            with_index_type!(self.indices.dtype(), op, "indices", I => {
                let gg = cpu_view::<T>(storage, layout, op, "grad")?;
                let idx = cpu_view::<I>(idx_cpu, idx_layout, op, "indices")?;
                Ok(into_storage(self.which.double_backward(op, &gg, &idx).map_err(wrap)?))
            })
        })
    }

    gpu_storage_is_an_error!("grad");
}

/// A max unpooling (`transposed: false`) or its backward (`transposed: true`) applied to the
/// tensor candle hands it, with the indices it holds. Each is linear and the other's transpose,
/// so the gradient of one is the other, at every order.
struct UnpoolOp {
    op: &'static str,
    which: MaxUnpool,
    indices: Tensor,
    transposed: bool,
}

impl CustomOp1 for UnpoolOp {
    fn name(&self) -> &'static str {
        self.op
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.op;
        let arg = if self.transposed { "grad_output" } else { "x" };
        let (idx_storage, idx_layout) = self.indices.storage_and_layout();
        let idx_cpu = cpu_storage(&idx_storage, op, "indices")?;
        with_float_type!(storage.dtype(), op, arg, T => {
            with_index_type!(self.indices.dtype(), op, "indices", I => {
                let values = cpu_view::<T>(storage, layout, op, arg)?;
                let idx = cpu_view::<I>(idx_cpu, idx_layout, op, "indices")?;
                let result = if self.transposed {
                    self.which.backward(op, &values, &idx)
                } else {
                    self.which.forward(op, &values, &idx)
                };
                Ok(into_storage(result.map_err(wrap)?))
            })
        })
    }

    gpu_storage_is_an_error!();

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let transpose = UnpoolOp {
            op: self.op,
            which: self.which,
            indices: self.indices.clone(),
            transposed: !self.transposed,
        };
        grad_res.apply_op1(transpose).map(Some)
    }
}

impl<L: MaskLayout> CustomOp1 for MaskOp<L> {
    fn name(&self) -> &'static str {
        name::max_pool2d_with_mask
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        const OP: &str = name::max_pool2d_with_mask;
        with_float_type!(storage.dtype(), OP, "x", T => {
            let x = cpu_view::<T>(storage, layout, OP, "x")?;
            let pooled = crate::max_pool2d_with_mask(&x, &self.params, self.layout)
                .map_err(|e| wrap(in_terms_of(OP)(e)))?;
            self.mask.get_or_init(|| pooled.mask);
            Ok(into_storage(pooled.output))
        })
    }

    gpu_storage_is_an_error!();

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> candle_core::Result<Option<Tensor>> {
        const OP: &str = name::max_pool2d_with_mask;
        mask_backward(OP, grad_res, arg, stashed(&self.mask, OP)?).map(Some)
    }
}

// ---------------------------------------------------------------------------------------------
// One backward core per operation family, shared by the recorded ops and the public functions.

/// The explicit backwards with indices: a [`GradientOp`] that candle does not record.
fn backward_with_indices(
    op: &'static str,
    grad_output: &Tensor,
    x: &Tensor,
    indices: &Tensor,
    which: Unpooling,
) -> candle_core::Result<Tensor> {
    grad_output.apply_op1_no_bwd(&GradientOp { op, which, x: x.clone(), indices: indices.clone() })
}

fn mask_backward<L: MaskLayout>(
    op: &'static str,
    grad_output: &Tensor,
    x: &Tensor,
    mask: &Mask<L, IxDyn>,
) -> candle_core::Result<Tensor> {
    let (grad_storage, grad_layout) = grad_output.storage_and_layout();
    let (x_storage, x_layout) = x.storage_and_layout();
    let grad_cpu = cpu_storage(&grad_storage, op, "grad_output")?;
    let x_cpu = cpu_storage(&x_storage, op, "x")?;
    with_float_type!(x.dtype(), op, "x", T => {
        let grad = cpu_view::<T>(grad_cpu, grad_layout, op, "grad_output")?;
        let x = cpu_view::<T>(x_cpu, x_layout, op, "x")?;
        let gx = crate::max_pool2d_with_mask_backward(&grad, &x, mask).map_err(|e| wrap(in_terms_of(op)(e)))?;
        into_tensor(gx)
    })
}

// ---------------------------------------------------------------------------------------------
// Views of candle storage, and results back into candle.

/// The CPU storage of a tensor, or an error that says where the tensor is.
fn cpu_storage<'s>(storage: &'s Storage, op: &str, arg: &str) -> candle_core::Result<&'s CpuStorage> {
    match storage {
        Storage::Cpu(cpu) => Ok(cpu),
        other => Err(not_on_cpu(op, arg, format!("{:?}", other.device().location()))),
    }
}

/// The error for a tensor that is not in CPU storage.
fn not_on_cpu(op: &str, arg: &str, device: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "{op}: `{arg}` is on {device}; poolgrad runs on CPU tensors: move it with `.to_device(&Device::Cpu)`"
    ))
    .bt()
}

/// A view of candle's storage with candle's layout (element strides, start offset): no copy.
fn cpu_view<'s, T: WithDType>(
    storage: &'s CpuStorage,
    layout: &Layout,
    op: &str,
    arg: &str,
) -> candle_core::Result<ArrayViewD<'s, T>> {
    if storage.dtype() != T::DTYPE {
        return Err(unsupported_dtype(op, arg, T::DTYPE.as_str(), storage.dtype()));
    }
    let data = storage.as_slice::<T>()?;
    // (Ranks are the operation's to check: the free functions say which they take.)
    if layout.dims().contains(&0) {
        // No element to read: candle keeps the strides of the non-empty shape (and its
        // offset), which ndarray would check against the storage; the empty view needs neither.
        return ArrayViewD::from_shape(IxDyn(layout.dims()), &[]).map_err(|e| wrap(e.to_string()));
    }
    let len = data.len();
    let data = data.get(layout.start_offset()..).unwrap_or_default();
    let shape = IxDyn(layout.dims()).strides(IxDyn(layout.stride()));
    ArrayViewD::from_shape(shape, data).map_err(|e| {
        wrap(format!(
            "{op}: `{arg}`'s layout (shape {:?}, strides {:?}, offset {}) does not fit its storage of {len} elements: {e}",
            layout.dims(),
            layout.stride(),
            layout.start_offset(),
        ))
    })
}

fn unsupported_dtype(op: &str, arg: &str, expected: &str, got: DType) -> candle_core::Error {
    wrap(format!("{op}: `{arg}` must have dtype {expected}; got {}", got.as_str()))
}

/// The value a forward stored for its backward and its `_with_indices` form.
fn stashed<'a, V>(stash: &'a OnceLock<V>, op: &str) -> candle_core::Result<&'a V> {
    // Set by `cpu_fwd`, which candle runs before returning the output; only a forward that
    // failed leaves it empty, and then there is no output to differentiate.
    stash.get().ok_or_else(|| wrap(format!("{op}: the forward did not run on the CPU")))
}

/// poolgrad's row-major result as candle storage: the buffer moves, no copy.
fn into_storage<T: WithDType>(array: ArrayD<T>) -> (CpuStorage, Shape) {
    let shape = Shape::from_dims(array.shape());
    (T::to_cpu_storage_owned(into_row_major_vec(array)), shape)
}

/// poolgrad's result as a candle CPU tensor (not tracked: it is a leaf).
fn into_tensor<T: WithDType>(array: ArrayD<T>) -> candle_core::Result<Tensor> {
    let shape = Shape::from_dims(array.shape());
    Tensor::from_vec(into_row_major_vec(array), shape, &candle_core::Device::Cpu)
}

/// The elements in row-major order. poolgrad's owned results are row-major from their buffer's
/// start: the buffer moves as it is.
fn into_row_major_vec<T: Clone>(array: ArrayD<T>) -> Vec<T> {
    if !array.is_standard_layout() {
        return array.iter().cloned().collect();
    }
    let len = array.len();
    let (mut data, offset) = array.into_raw_vec_and_offset();
    data.drain(..offset.unwrap_or(0));
    data.truncate(len);
    data
}

fn wrap(error: impl std::fmt::Display + Send + Sync + 'static) -> candle_core::Error {
    candle_core::Error::wrap(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor on a GPU is an error that names the function and says how to move the tensor.
    /// (Without a GPU, candle's storage types for CUDA and Metal are stand-ins that can be made
    /// here, so the recorded operations' GPU entry points are called directly.)
    #[test]
    fn gpu_storage_is_an_error_naming_the_function() {
        let layout = Layout::contiguous((1, 1, 2, 2));
        let params = MaxPool2dParams::new([2, 2]);
        let max_pool =
            IndexedOp { op: name::max_pool2d, pooling: Pooling::MaxPool(params), indices: Arc::default() };
        let adaptive = IndexedOp {
            op: name::adaptive_max_pool2d_with_indices,
            pooling: Pooling::Adaptive([1, 1]),
            indices: Arc::default(),
        };
        let mask = MaskOp { params, layout: crate::Bitmask, mask: Arc::default() };
        let ops: [(&dyn CustomOp1, &str); 3] = [
            (&max_pool, "poolgrad::candle::max_pool2d: "),
            (&adaptive, "poolgrad::candle::adaptive_max_pool2d_with_indices: "),
            (&mask, "poolgrad::candle::max_pool2d_with_mask: "),
        ];
        for (op, name) in ops {
            let cuda = op.cuda_fwd(&CudaStorage, &layout).map(|_| ()).unwrap_err().to_string();
            let metal = op.metal_fwd(&MetalStorage, &layout).map(|_| ()).unwrap_err().to_string();
            for (m, device) in [(cuda, "a CUDA device"), (metal, "a Metal device")] {
                assert!(m.starts_with(name), "{m}");
                assert!(
                    m.contains(&format!("`x` is on {device}")) && m.contains(".to_device(&Device::Cpu)"),
                    "{m}"
                );
            }
        }
    }
}
