//! # poolgrad
//!
//! Exact, fast and safe max-pooling gradients with the semantics of PyTorch and of Huawei CANN's
//! aclnn operators (`aclnnAdaptiveMaxPool2dBackward`, `aclnnMaxPool2dWithMaskBackward` and the
//! rest of their family), together with the forwards that produce their indices: 2-D, 3-D and
//! 1-D max pooling and adaptive max pooling, max unpooling, and the double backward.
//!
//! ## Support
//!
//! Every operation takes f32, f64, f16 and bf16, has an `_into` form that writes into arrays or
//! views you own, and runs on a [`Device`] of your choice through [`on()`]: the CPU runs them all,
//! an Ascend NPU what CANN supports on it (refused with a typed error before anything runs).
//! Indices are `i64`, or `i32` through the `_i32` forms of the forwards (the backwards,
//! unpoolings and double backwards take either).
//!
//! | operations | indices |
//! |---|---|
//! | [`adaptive_max_pool2d`], [`adaptive_max_pool2d_backward`] | i64, i32 |
//! | [`max_pool2d_with_indices`], [`max_pool2d_with_indices_backward`] | i64, i32 |
//! | [`max_pool2d_with_mask`], [`max_pool2d_with_mask_backward`] | [`Mask`]`<`[`I32Argmax`]` \| `[`Bitmask`]`>` |
//! | [`adaptive_max_pool3d`], [`adaptive_max_pool3d_backward`] | i64, i32 |
//! | [`max_pool3d_with_indices`], [`max_pool3d_with_indices_backward`] | i64, i32 |
//! | [`adaptive_max_pool1d`], [`adaptive_max_pool1d_backward`] | i64, i32 |
//! | [`max_pool1d_with_indices`], [`max_pool1d_with_indices_backward`] | i64, i32 |
//! | [`max_unpool1d`], [`max_unpool2d`], [`max_unpool3d`] and their backwards | i64, i32 |
//! | [`max_pool1d_double_backward`], [`max_pool2d_double_backward`], [`max_pool3d_double_backward`] | i64, i32 |
//!
//! ## Getting started
//!
//! ```
//! use ndarray::Array;
//! let x = Array::from_shape_fn((2, 3, 5, 5), |(n, c, h, w)| ((n * 7 + c * 5 + h * 3 + w) % 11) as f32);
//! let pooled = poolgrad::adaptive_max_pool2d(&x, [3, 3])?;
//! let grad = Array::ones(pooled.output.raw_dim());
//! let gx = poolgrad::adaptive_max_pool2d_backward(&grad, &x, &pooled.indices)?;
//! assert_eq!(gx.shape(), x.shape());
//! assert_eq!(gx.sum(), grad.sum()); // every gradient lands somewhere exactly once
//! # Ok::<(), poolgrad::Error>(())
//! ```
//!
//! ## Two phases, as in aclnn
//!
//! 1. Describe a call with an operation struct from [`op`] over [`TensorRef`] / [`TensorMut`]
//!    views (any non-negative strides; rank 3 or 4, and 5 for the 3-D operations).
//! 2. [`Plan::new`] validates everything that does not need the tensors' data (ranks, shapes,
//!    strides, parameters, device limits) and reports [`Plan::workspace_size`]: the
//!    `aclnnXxxGetWorkspaceSize` phase.
//! 3. [`Plan::bind`] a [`Workspace`] to get an [`Executor`], and [`Executor::run`] it: the
//!    `aclnnXxx` phase. [`Plan::run`] does both with a fresh workspace. Index values are checked
//!    here, each as it is used (one pass over the indices): an index outside its plane makes
//!    `run` return [`Error::IndexOutOfRange`] with the first such position, and leaves the
//!    gradient zeroed.
//!
//! The device is chosen by the [`Device`] passed to the plan (or to [`on()`]):
//! [`Cpu`](device::cpu::Cpu), with a [`Parallelism`](device::cpu::Parallelism) setting, or an
//! Ascend NPU (feature `ascend`).
//!
//! ## Determinism and precision
//!
//! - Forward: row-major scan of each window, the first maximum wins; a NaN is taken and a later
//!   NaN replaces it; indices are flat inside each `(n, c)` plane: `ih * W + iw`, and
//!   `(id * H + ih) * W + iw` in 3-D.
//! - Max unpooling writes each value at its index; where indices repeat, the last in row-major
//!   order wins, and its backward gives the gradient to that last value alone.
//! - Backward: gradients are added in row-major output order, so f32 and f64 results equal
//!   PyTorch's CPU kernel bit for bit; f16 and bf16 are summed in f32 and rounded once.
//! - Every output element is computed by one task, in a fixed order: results are bit-identical
//!   for every thread count.
//!
//! ## Crate features
//!
//! - `rayon` (default): parallel CPU kernels. Without it every plan runs sequentially.
#![cfg_attr(feature = "proptest", doc = "- `proptest`: [`testing`],")]
#![cfg_attr(not(feature = "proptest"), doc = "- `proptest`: `testing`,")]
//!   a property-based testing kit for downstream models (strategies, reference implementations,
//!   one-line checks, a finite-difference gradient check).
#![cfg_attr(feature = "ascend", doc = "- `ascend`: [`device::ascend::Ascend`],")]
#![cfg_attr(not(feature = "ascend"), doc = "- `ascend`: `device::ascend::Ascend`,")]
//!   an Ascend NPU through CANN's C ABI, loaded at run time (no SDK is needed to build). Tested
//!   against a test double of that ABI: no NPU was available to this crate's developers.
#![cfg_attr(feature = "candle", doc = "- `candle`: [`candle`](mod@candle),")]
#![cfg_attr(not(feature = "candle"), doc = "- `candle`: `candle`,")]
//!   max pooling and adaptive max pooling (1-D, 2-D, 3-D) and max unpooling for candle-core 0.11
//!   tensors, differentiable through candle's autograd with PyTorch's gradient (second order
//!   included), and each backward as a function of its own.
#![cfg_attr(feature = "burn", doc = "- `burn`: [`burn`](mod@burn),")]
#![cfg_attr(not(feature = "burn"), doc = "- `burn`: `burn`,")]
//!   adaptive max pooling and max pooling with indices (1-D, 2-D, 3-D) and max unpooling for burn
//!   0.22 tensors on its ndarray backend, differentiable under burn's autodiff with PyTorch's
//!   gradient, and each backward as a function of its own.

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod alloc;
#[cfg(any(feature = "candle", feature = "burn"))]
mod bridge;
#[cfg(feature = "burn")]
#[cfg_attr(docsrs, doc(cfg(feature = "burn")))]
pub mod burn;
#[cfg(feature = "candle")]
#[cfg_attr(docsrs, doc(cfg(feature = "candle")))]
pub mod candle;
pub mod device;
#[cfg(test)]
mod draws;
mod element;
mod error;
mod functional;
pub mod geometry;
mod index;
mod mask;
mod on;
pub mod op;
mod params;
mod plan;
mod shape;
mod tensor;
#[cfg(feature = "proptest")]
#[cfg_attr(docsrs, doc(cfg(feature = "proptest")))]
pub mod testing;

pub use device::Device;
pub use element::{DType, Element, PoolFloat};
#[cfg(feature = "ascend")]
pub use error::AscendError;
pub use error::{DeviceLimitKind, Error, Result};
// Every free function, in every form, and the structs they return.
pub use functional::*;
pub use index::ArgmaxIndex;
pub use mask::{Bitmask, I32Argmax, Mask, MaskLayout, MaskMut, MaskRef};
pub use on::{On, Pooled, PooledMask, on};
pub use params::{MaxPool1dParams, MaxPool2dParams, MaxPool3dParams, MaxPoolParams};
pub use plan::{Executor, Plan, Workspace};
pub use tensor::{Host, LineDim, Memory, PoolDim, TensorMut, TensorRef, ViewDim, VolumeDim};

pub use half;
pub use ndarray;

/// Everything a first use needs, in one import: the free functions, their result and parameter
/// types, the mask layouts, the CPU device, the error type, and the Plan API's types.
///
/// ```
/// use poolgrad::prelude::*;
/// # fn main() -> Result<(), Error> {
/// # let x = ndarray::Array4::<f32>::from_shape_fn((1, 2, 16, 16), |(_, c, h, w)| ((c * 31 + h * 7 + w * 3) % 17) as f32);
/// # let g_of = |p: &ndarray::Array4<f32>| ndarray::Array4::<f32>::ones(p.raw_dim());
/// // x: Array4<f32>
/// let p = adaptive_max_pool2d(&x, [7, 7])?; // p.indices: Array4<i64>, PyTorch's default
/// let g = g_of(&p.output);
/// let gx = adaptive_max_pool2d_backward(&g, &x, &p.indices)?;
/// let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
/// let q = max_pool2d_with_indices(&x, &params)?; // q.indices: Array4<i64>
/// let m = max_pool2d_with_mask(&x, &params, I32Argmax)?;
/// let g = g_of(&m.output);
/// let gx_mask = max_pool2d_with_mask_backward(&g, &x, &m.mask)?; // the mask carries its params
/// let legacy: Mask<Bitmask, _> = m.mask.convert()?;
/// let cpu = Cpu::with_threads(2)?;
/// # let _: (ndarray::Array4<i64>, ndarray::Array4<f32>) = (p.indices.clone(), gx.clone());
/// # assert_eq!(gx.sum(), (7 * 7 * 2) as f32);
/// # assert_eq!(q.indices, on(&cpu).max_pool2d_with_indices(&x, &params)?.indices);
/// # assert_eq!(gx_mask, max_pool2d_with_indices_backward(&g, &x, &q.indices, &params)?);
/// # assert_eq!(legacy.to_indices::<i64>()?, q.indices);
/// // i32 indices, one named step away:
/// let p32 = adaptive_max_pool2d_i32(&x, [7, 7])?;
/// assert_eq!(p32.indices.mapv(i64::from), p.indices);
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use crate::device::cpu::{Cpu, Parallelism};
    pub use crate::functional::*;
    pub use crate::on::{On, Pooled, PooledMask, on};
    pub use crate::{
        ArgmaxIndex, Bitmask, Error, Executor, I32Argmax, Mask, MaskLayout, MaskMut, MaskRef,
        MaxPool1dParams, MaxPool2dParams, MaxPool3dParams, Plan, PoolFloat, TensorMut, TensorRef, Workspace,
    };
}

/// The README's examples, compiled and run as doctests (one of them uses the testing kit).
#[cfg(all(doctest, feature = "proptest"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The examples of `docs/ascend.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/ascend.md")]
struct AscendDocDoctests;
