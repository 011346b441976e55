//! Operation descriptors: plain structs whose fields borrow the tensors of one call.
//!
//! A descriptor is handed to [`Plan::new`](crate::Plan::new), which validates it (phase 1). The
//! names follow aclnn: `self_` is the forward input of a backward operation (`self` in CANN and
//! PyTorch); only its shape is read.

use core::fmt;

use crate::element::PoolFloat;
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::mask::{MaskLayout, MaskMut, MaskRef};
use crate::params::{MaxPool2dParams, MaxPool3dParams};
use crate::shape;
use crate::tensor::{Host, Memory, TensorMut, TensorRef};

/// The name of each operation, as errors give it: the free function a user calls, which is
/// also the operation's [`NAME`](internal::OperationImpl::NAME). Every error an operation
/// raises, on every device, names it through this table.
pub(crate) mod name {
    pub(crate) const ADAPTIVE_MAX_POOL2D: &str = "adaptive_max_pool2d";
    pub(crate) const ADAPTIVE_MAX_POOL2D_BACKWARD: &str = "adaptive_max_pool2d_backward";
    pub(crate) const MAX_POOL2D_WITH_INDICES: &str = "max_pool2d_with_indices";
    pub(crate) const MAX_POOL2D_WITH_INDICES_BACKWARD: &str = "max_pool2d_with_indices_backward";
    pub(crate) const MAX_POOL2D_WITH_MASK: &str = "max_pool2d_with_mask";
    pub(crate) const MAX_POOL2D_WITH_MASK_BACKWARD: &str = "max_pool2d_with_mask_backward";
    pub(crate) const ADAPTIVE_MAX_POOL3D: &str = "adaptive_max_pool3d";
    pub(crate) const ADAPTIVE_MAX_POOL3D_BACKWARD: &str = "adaptive_max_pool3d_backward";
    pub(crate) const MAX_POOL3D_WITH_INDICES: &str = "max_pool3d_with_indices";
    pub(crate) const MAX_POOL3D_WITH_INDICES_BACKWARD: &str = "max_pool3d_with_indices_backward";
    pub(crate) const ADAPTIVE_MAX_POOL1D: &str = "adaptive_max_pool1d";
    pub(crate) const ADAPTIVE_MAX_POOL1D_BACKWARD: &str = "adaptive_max_pool1d_backward";
    pub(crate) const MAX_POOL1D_WITH_INDICES: &str = "max_pool1d_with_indices";
    pub(crate) const MAX_POOL1D_WITH_INDICES_BACKWARD: &str = "max_pool1d_with_indices_backward";
    pub(crate) const MAX_UNPOOL2D: &str = "max_unpool2d";
    pub(crate) const MAX_UNPOOL2D_BACKWARD: &str = "max_unpool2d_backward";
    pub(crate) const MAX_UNPOOL3D: &str = "max_unpool3d";
    pub(crate) const MAX_UNPOOL3D_BACKWARD: &str = "max_unpool3d_backward";
    pub(crate) const MAX_POOL2D_DOUBLE_BACKWARD: &str = "max_pool2d_double_backward";
    pub(crate) const MAX_POOL3D_DOUBLE_BACKWARD: &str = "max_pool3d_double_backward";
    pub(crate) const MAX_UNPOOL1D: &str = "max_unpool1d";
    pub(crate) const MAX_UNPOOL1D_BACKWARD: &str = "max_unpool1d_backward";
    pub(crate) const MAX_POOL1D_DOUBLE_BACKWARD: &str = "max_pool1d_double_backward";

    /// The name of an `n`-axis operation of the two given.
    pub(crate) const fn of_axes(n: usize, two: &'static str, three: &'static str) -> &'static str {
        if n == 3 { three } else { two }
    }
}

pub(crate) mod internal {
    use super::*;

    /// What an operation demands of a device, checked against its limits
    /// ([`DeviceLimits`](crate::device::DeviceLimits)) before any device call. Not part of the public API.
    #[derive(Debug, Clone, Copy)]
    pub struct Demands {
        /// The input plane `[H, W]` the flat indices address (`[D * H, W]` for a volume).
        pub plane: [usize; 2],
        /// The pooled plane `[Ho, Wo]` of an adaptive backward, whose non-divisible planes have a
        /// limit of their own; `None` for every other operation.
        pub adaptive_backward: Option<[usize; 2]>,
    }

    /// Phase-1 checks of an operation. Not part of the public API.
    pub trait OperationImpl {
        /// Name used in errors, e.g. `"adaptive_max_pool2d_backward"`.
        const NAME: &'static str;
        /// Sizes derived while validating.
        type Geometry: fmt::Debug + Clone + Send + Sync;
        /// Device-independent checks that read no tensor data: ranks, shapes, parameters.
        fn validate(&self) -> Result<Self::Geometry>;
        /// What the operation demands of a device, for its limits.
        fn demands(geometry: &Self::Geometry) -> Demands;
    }
}

/// An operation a [`Plan`](crate::Plan) can run. Sealed; implemented by the descriptors of this
/// module.
pub trait Operation: internal::OperationImpl {}

pub use crate::shape::{
    AdaptiveGeometry, AdaptiveGeometry3d, IndexedGeometry, MaxPool3dGeometry, MaxPoolGeometry, VolumeSizes,
};
use internal::Demands;

/// Adaptive 2-D max pooling (forward): `output` and arg-max `indices` of `input` pooled to
/// `output_size`.
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, device::cpu::Cpu, op::AdaptiveMaxPool2d};
/// let x = [1.0f32, 3.0, 2.0, 0.0];
/// let (mut out, mut idx) = ([0.0f32; 1], [0i64; 1]);
/// let op = AdaptiveMaxPool2d {
///     input: TensorRef::from_slice(&x, &[1, 2, 2])?,
///     output_size: [1, 1],
///     output: TensorMut::from_slice(&mut out, &[1, 1, 1])?,
///     indices: TensorMut::from_slice(&mut idx, &[1, 1, 1])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!((out, idx), ([3.0], [1]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct AdaptiveMaxPool2d<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Input `[N, C, H, W]` or `[C, H, W]`.
    pub input: TensorRef<'a, T, M>,
    /// `[Ho, Wo]`, each at least 1 (may exceed `H`, `W`).
    pub output_size: [usize; 2],
    /// Pooled values, `[N, C, Ho, Wo]` (the rank of `input`).
    pub output: TensorMut<'a, T, M>,
    /// Flat arg-max `ih * W + iw` within each plane, same shape as `output`.
    pub indices: TensorMut<'a, I, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl for AdaptiveMaxPool2d<'_, T, I, M> {
    const NAME: &'static str = name::ADAPTIVE_MAX_POOL2D;
    type Geometry = AdaptiveGeometry;

    fn validate(&self) -> Result<AdaptiveGeometry> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let g = adaptive_forward_shapes::<T, I, _>(&self.input, self.output_size)?;
        shape::output_shape(OP, "output", &self.output, &g.pooled_dims())?;
        shape::output_shape(OP, "indices", &self.indices, &g.pooled_dims())?;
        Ok(g)
    }

    fn demands(g: &AdaptiveGeometry) -> Demands {
        // The 2^24 non-divisible limit is documented for the backward only.
        Demands { plane: [g.h, g.w], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for AdaptiveMaxPool2d<'_, T, I, M> {}

/// The checks of [`AdaptiveMaxPool2d`] on what it reads (its input and the output size, no data):
/// everything but the outputs' shapes, so a free function checks before allocating them.
pub(crate) fn adaptive_forward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    input: &TensorRef<'_, T, M>,
    output_size: [usize; 2],
) -> Result<AdaptiveGeometry> {
    const OP: &str = name::ADAPTIVE_MAX_POOL2D;
    let [n, c, h, w] = shape::pooling_input(OP, "input", input)?;
    shape::output_size(OP, "output_size", output_size)?;
    let [ho, wo] = output_size;
    let plane = shape::plane_size(OP, "input", h, w)?;
    shape::index_width::<I>(OP, "indices", plane)?;
    Ok(AdaptiveGeometry { n, c, h, w, ho, wo, ndim: input.ndim() })
}

/// Backward of adaptive 2-D max pooling (`aclnnAdaptiveMaxPool2dBackward`): scatters
/// `grad_output` to the arg-max positions in `indices`, summing where they coincide.
///
/// `grad_input[n, c, idx] += grad_output[n, c, oh, ow]` in row-major `(oh, ow)` order; every other
/// position is zero. `Ho`, `Wo` are read from `grad_output`.
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, device::cpu::Cpu, op::AdaptiveMaxPool2dBackward};
/// let x = [0.0f32; 4];
/// let (g, idx) = ([1.0f32, 2.0], [3i32, 3]);
/// let mut gi = [9.0f32; 4];
/// let op = AdaptiveMaxPool2dBackward {
///     grad_output: TensorRef::from_slice(&g, &[1, 1, 2])?,
///     self_: TensorRef::from_slice(&x, &[1, 2, 2])?,
///     indices: TensorRef::from_slice(&idx, &[1, 1, 2])?,
///     grad_input: TensorMut::from_slice(&mut gi, &[1, 2, 2])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!(gi, [0.0, 0.0, 0.0, 3.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct AdaptiveMaxPool2dBackward<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Gradient of the pooled output, `[N, C, Ho, Wo]` or `[C, Ho, Wo]`.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward input (only its shape is read).
    pub self_: TensorRef<'a, T, M>,
    /// Flat arg-max indices from the forward, same shape as `grad_output`.
    pub indices: TensorRef<'a, I, M>,
    /// Receives the gradient of the input, shape of `self_`.
    pub grad_input: TensorMut<'a, T, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl
    for AdaptiveMaxPool2dBackward<'_, T, I, M>
{
    const NAME: &'static str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
    type Geometry = AdaptiveGeometry;

    fn validate(&self) -> Result<AdaptiveGeometry> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        let g = adaptive_backward_shapes(&self.grad_output, &self.self_, &self.indices)?;
        shape::output_shape(OP, "grad_input", &self.grad_input, self.self_.user_shape())?;
        Ok(g)
    }

    fn demands(g: &AdaptiveGeometry) -> Demands {
        Demands { plane: [g.h, g.w], adaptive_backward: Some([g.ho, g.wo]) }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for AdaptiveMaxPool2dBackward<'_, T, I, M> {}

/// The checks of [`AdaptiveMaxPool2dBackward`] on its inputs (cheap: no data is read): everything
/// but the shape of `grad_input`.
pub(crate) fn adaptive_backward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    grad_output: &TensorRef<'_, T, M>,
    self_: &TensorRef<'_, T, M>,
    indices: &TensorRef<'_, I, M>,
) -> Result<AdaptiveGeometry> {
    const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
    let [n, c, h, w] = shape::pooling_input(OP, "self_", self_)?;
    let [_, _, ho, wo] = grad_output.shape();
    for (len, axis) in [(ho, "Ho"), (wo, "Wo")] {
        if len == 0 {
            return Err(Error::EmptyDimension {
                op: OP,
                arg: "grad_output",
                axis,
                shape: grad_output.dims(),
            });
        }
    }
    let g = AdaptiveGeometry { n, c, h, w, ho, wo, ndim: self_.ndim() };
    shape::input_shape(OP, "grad_output", grad_output, &g.pooled_dims())?;
    shape::input_shape(OP, "indices", indices, &g.pooled_dims())?;
    shape::plane_size(OP, "self_", h, w)?;
    Ok(g)
}

/// 2-D max pooling with PyTorch-style flat indices (`max_pool2d_with_indices`), any dilation.
///
/// ```
/// use poolgrad::{MaxPool2dParams, Plan, TensorMut, TensorRef, device::cpu::Cpu, op::MaxPool2dWithIndices};
/// let x = [1.0f32, 3.0, 2.0, 0.0, 5.0, 4.0];
/// let (mut out, mut idx) = ([0.0f32; 2], [0i64; 2]);
/// let op = MaxPool2dWithIndices {
///     input: TensorRef::from_slice(&x, &[1, 2, 3])?,
///     params: MaxPool2dParams::new([2, 2]).with_stride([1, 1]),
///     output: TensorMut::from_slice(&mut out, &[1, 1, 2])?,
///     indices: TensorMut::from_slice(&mut idx, &[1, 1, 2])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!((out, idx), ([5.0, 5.0], [4, 4]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct MaxPool2dWithIndices<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Input `[N, C, H, W]` or `[C, H, W]`.
    pub input: TensorRef<'a, T, M>,
    /// Kernel, stride, padding, dilation, ceil mode.
    pub params: MaxPool2dParams,
    /// Pooled values `[N, C, Ho, Wo]` (rank of `input`).
    pub output: TensorMut<'a, T, M>,
    /// Flat arg-max `ih * W + iw` inside each plane, shape of `output`.
    pub indices: TensorMut<'a, I, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl for MaxPool2dWithIndices<'_, T, I, M> {
    const NAME: &'static str = name::MAX_POOL2D_WITH_INDICES;
    type Geometry = MaxPoolGeometry;

    fn validate(&self) -> Result<MaxPoolGeometry> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let g = max_pool_forward_shapes::<T, I, _>(&self.input, &self.params)?;
        shape::output_shape(OP, "output", &self.output, &g.pooled_dims())?;
        shape::output_shape(OP, "indices", &self.indices, &g.pooled_dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPoolGeometry) -> Demands {
        Demands { plane: [g.h, g.w], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for MaxPool2dWithIndices<'_, T, I, M> {}

/// The checks of [`MaxPool2dWithIndices`] on its input and parameters (no data is read).
pub(crate) fn max_pool_forward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    input: &TensorRef<'_, T, M>,
    params: &MaxPool2dParams,
) -> Result<MaxPoolGeometry> {
    const OP: &str = name::MAX_POOL2D_WITH_INDICES;
    let g = MaxPoolGeometry::checked(OP, "input", params, &input.dims())?;
    shape::index_width::<I>(OP, "indices", g.h * g.w)?;
    Ok(g)
}

/// Backward of [`MaxPool2dWithIndices`]: `grad_input[n, c, idx] += grad_output[n, c, oh, ow]` in
/// row-major output order.
#[derive(Debug)]
pub struct MaxPool2dWithIndicesBackward<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Gradient of the pooled output, `[N, C, Ho, Wo]`.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward input (only its shape is read).
    pub self_: TensorRef<'a, T, M>,
    /// Flat arg-max indices from the forward, shape of `grad_output`.
    pub indices: TensorRef<'a, I, M>,
    /// The forward's parameters (they fix `Ho`, `Wo`).
    pub params: MaxPool2dParams,
    /// Receives the gradient of the input, shape of `self_`.
    pub grad_input: TensorMut<'a, T, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl
    for MaxPool2dWithIndicesBackward<'_, T, I, M>
{
    const NAME: &'static str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
    type Geometry = MaxPoolGeometry;

    fn validate(&self) -> Result<MaxPoolGeometry> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let g =
            max_pool_indices_backward_shapes(&self.grad_output, &self.self_, &self.indices, &self.params)?;
        shape::output_shape(OP, "grad_input", &self.grad_input, &g.input_dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPoolGeometry) -> Demands {
        Demands { plane: [g.h, g.w], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for MaxPool2dWithIndicesBackward<'_, T, I, M> {}

/// The checks of [`MaxPool2dWithIndicesBackward`] on its inputs and parameters (no data is read):
/// everything but the shape of `grad_input`.
pub(crate) fn max_pool_indices_backward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    grad_output: &TensorRef<'_, T, M>,
    self_: &TensorRef<'_, T, M>,
    indices: &TensorRef<'_, I, M>,
    params: &MaxPool2dParams,
) -> Result<MaxPoolGeometry> {
    const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
    let g = MaxPoolGeometry::checked(OP, "self_", params, &self_.dims())?;
    shape::input_shape(OP, "grad_output", grad_output, &g.pooled_dims())?;
    shape::input_shape(OP, "indices", indices, &g.pooled_dims())?;
    Ok(g)
}

/// 2-D max pooling that records its arg-max as an Ascend int8 mask in layout `L`
/// (`aclnnMaxPool2dWithMask`). Dilation must be 1.
///
/// The mask's shape comes from [`geometry::mask_shape`](crate::geometry::mask_shape); with
/// [`MaxPool2dWithMaskBackward`], a forward and backward through the Plan API:
///
/// ```
/// use ndarray::{Array, Array4};
/// use poolgrad::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward};
/// use poolgrad::{Bitmask, MaskMut, MaskRef, MaxPool2dParams, Plan, device::cpu::Cpu};
/// let cpu = Cpu::sequential();
/// let params = MaxPool2dParams::new([2, 2]);
/// let x = Array4::from_shape_fn((1, 1, 4, 4), |(_, _, h, w)| ((h * 4 + w) * 7 % 16) as f32);
/// let mut out = Array4::<f32>::zeros((1, 1, 2, 2));
/// let shape = poolgrad::geometry::mask_shape(1, 1, [2, 2], [2, 2]).unwrap(); // [1, 1, 4, 32]
/// let mut mask = Array::<i8, _>::zeros(shape);
/// Plan::new(&cpu, MaxPool2dWithMask {
///     input: (&x).into(),
///     params,
///     output: (&mut out).into(),
///     mask: MaskMut::new((&mut mask).into(), Bitmask),
/// })?
/// .run()?;
/// // x = 7·(4h + w) mod 16 by rows: [0 7 14 5] [12 3 10 1] [8 15 6 13] [4 11 2 9].
/// assert_eq!(out, ndarray::array![[[[12.0, 14.0], [15.0, 13.0]]]]);
///
/// let g = Array4::from_elem((1, 1, 2, 2), 1.0f32);
/// let mut gx = Array4::<f32>::zeros((1, 1, 4, 4));
/// Plan::new(&cpu, MaxPool2dWithMaskBackward {
///     grad_output: (&g).into(),
///     self_: (&x).into(),
///     mask: MaskRef::new((&mask).into(), Bitmask),
///     params,
///     grad_input: (&mut gx).into(),
/// })?
/// .run()?;
/// assert_eq!(gx.sum(), 4.0);
/// assert_eq!((gx[[0, 0, 1, 0]], gx[[0, 0, 0, 2]], gx[[0, 0, 2, 1]], gx[[0, 0, 2, 3]]), (1.0, 1.0, 1.0, 1.0));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct MaxPool2dWithMask<'a, T: PoolFloat, L: MaskLayout, M: Memory = Host> {
    /// Input `[N, C, H, W]` or `[C, H, W]`.
    pub input: TensorRef<'a, T, M>,
    /// Kernel, stride, padding (at most half the kernel), ceil mode; dilation 1.
    pub params: MaxPool2dParams,
    /// Pooled values `[N, C, Ho, Wo]`.
    pub output: TensorMut<'a, T, M>,
    /// The mask, `[N, C, kH*kW, (ceil(Ho*Wo/16)+1)*32]`.
    pub mask: MaskMut<'a, L, M>,
}

impl<T: PoolFloat, L: MaskLayout, M: Memory> internal::OperationImpl for MaxPool2dWithMask<'_, T, L, M> {
    const NAME: &'static str = name::MAX_POOL2D_WITH_MASK;
    type Geometry = MaxPoolGeometry;

    fn validate(&self) -> Result<MaxPoolGeometry> {
        const OP: &str = name::MAX_POOL2D_WITH_MASK;
        let g = mask_forward_shapes::<T, L, _>(&self.input, &self.params)?;
        shape::output_shape(OP, "output", &self.output, &g.pooled_dims())?;
        shape::output_shape(OP, "mask", &self.mask.bytes, &g.dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPoolGeometry) -> Demands {
        Demands { plane: [g.h, g.w], adaptive_backward: None }
    }
}
impl<T: PoolFloat, L: MaskLayout, M: Memory> Operation for MaxPool2dWithMask<'_, T, L, M> {}

/// The checks of [`MaxPool2dWithMask`] on its input and parameters (no data is read), for masks
/// of layout `L`.
pub(crate) fn mask_forward_shapes<T: PoolFloat, L: MaskLayout, M: Memory>(
    input: &TensorRef<'_, T, M>,
    params: &MaxPool2dParams,
) -> Result<MaxPoolGeometry> {
    const OP: &str = name::MAX_POOL2D_WITH_MASK;
    let g = MaxPoolGeometry::for_mask(OP, "input", params, &input.dims())?;
    L::check(&g).map_err(|e| e.named(OP))?;
    Ok(g)
}

/// Backward of [`MaxPool2dWithMask`] (`aclnnMaxPool2dWithMaskBackward`).
///
/// `I32Argmax`: every value must lie in `[0, H*W)`; gradients scatter as with indices.
/// `Bitmask`: every set bit adds its gradient at its window offset; a bit that points into padding
/// adds nothing; bits of channels past `C` and words past `Ho*Wo` are ignored. Either way the
/// sums run in row-major output order. Example: [`MaxPool2dWithMask`].
#[derive(Debug)]
pub struct MaxPool2dWithMaskBackward<'a, T: PoolFloat, L: MaskLayout, M: Memory = Host> {
    /// Gradient of the pooled output, `[N, C, Ho, Wo]`.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward input (only its shape is read).
    pub self_: TensorRef<'a, T, M>,
    /// The forward's mask.
    pub mask: MaskRef<'a, L, M>,
    /// The forward's parameters.
    pub params: MaxPool2dParams,
    /// Receives the gradient of the input, shape of `self_`.
    pub grad_input: TensorMut<'a, T, M>,
}

impl<T: PoolFloat, L: MaskLayout, M: Memory> internal::OperationImpl
    for MaxPool2dWithMaskBackward<'_, T, L, M>
{
    const NAME: &'static str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
    type Geometry = MaxPoolGeometry;

    fn validate(&self) -> Result<MaxPoolGeometry> {
        const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
        let g = mask_backward_shapes::<T, L, _>(&self.grad_output, &self.self_, &self.mask, &self.params)?;
        shape::output_shape(OP, "grad_input", &self.grad_input, &g.input_dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPoolGeometry) -> Demands {
        Demands { plane: [g.h, g.w], adaptive_backward: None }
    }
}
impl<T: PoolFloat, L: MaskLayout, M: Memory> Operation for MaxPool2dWithMaskBackward<'_, T, L, M> {}

/// The checks of [`MaxPool2dWithMaskBackward`] on its inputs and parameters (no data is read):
/// everything but the shape of `grad_input`.
pub(crate) fn mask_backward_shapes<T: PoolFloat, L: MaskLayout, M: Memory>(
    grad_output: &TensorRef<'_, T, M>,
    self_: &TensorRef<'_, T, M>,
    mask: &MaskRef<'_, L, M>,
    params: &MaxPool2dParams,
) -> Result<MaxPoolGeometry> {
    const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
    let g = MaxPoolGeometry::for_mask(OP, "self_", params, &self_.dims())?;
    shape::input_shape(OP, "grad_output", grad_output, &g.pooled_dims())?;
    L::check(&g).map_err(|e| e.named(OP))?;
    shape::input_shape(OP, "mask", &mask.bytes, &g.dims())?;
    Ok(g)
}

/// What a 3-D operation demands of a device: the positions its flat indices address, `D * H * W`,
/// given as the plane `[D * H, W]` (the volume seen as `D * H` rows; its product was checked when
/// the geometry was made).
fn volume_demands(s: &VolumeSizes) -> Demands {
    let [d, h, w] = s.input;
    Demands { plane: [d * h, w], adaptive_backward: None }
}

/// Adaptive 3-D max pooling (forward): `output` and arg-max `indices` of `input` pooled to
/// `output_size = [Do, Ho, Wo]`, each axis by the adaptive window rule of the 2-D operation.
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, device::cpu::Cpu, op::AdaptiveMaxPool3d};
/// let x = [1.0f32, 3.0, 2.0, 0.0, 5.0, 4.0, 7.0, 6.0];
/// let (mut out, mut idx) = ([0.0f32; 2], [0i64; 2]);
/// let op = AdaptiveMaxPool3d {
///     input: TensorRef::from_slice(&x, &[1, 2, 2, 2])?, // [C, D, H, W]
///     output_size: [2, 1, 1],
///     output: TensorMut::from_slice(&mut out, &[1, 2, 1, 1])?,
///     indices: TensorMut::from_slice(&mut idx, &[1, 2, 1, 1])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!((out, idx), ([3.0, 7.0], [1, 6]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct AdaptiveMaxPool3d<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Input `[N, C, D, H, W]` or `[C, D, H, W]`.
    pub input: TensorRef<'a, T, M>,
    /// `[Do, Ho, Wo]`, each at least 1 (may exceed `D`, `H`, `W`).
    pub output_size: [usize; 3],
    /// Pooled values, `[N, C, Do, Ho, Wo]` (the rank of `input`).
    pub output: TensorMut<'a, T, M>,
    /// Flat arg-max `(id * H + ih) * W + iw` within each volume, same shape as `output`.
    pub indices: TensorMut<'a, I, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl for AdaptiveMaxPool3d<'_, T, I, M> {
    const NAME: &'static str = name::ADAPTIVE_MAX_POOL3D;
    type Geometry = AdaptiveGeometry3d;

    fn validate(&self) -> Result<AdaptiveGeometry3d> {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D;
        let g = adaptive3d_forward_shapes::<T, I, _>(&self.input, self.output_size)?;
        shape::output_shape(OP, "output", &self.output, &g.sizes.pooled_dims())?;
        shape::output_shape(OP, "indices", &self.indices, &g.sizes.pooled_dims())?;
        Ok(g)
    }

    fn demands(g: &AdaptiveGeometry3d) -> Demands {
        volume_demands(&g.sizes)
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for AdaptiveMaxPool3d<'_, T, I, M> {}

/// The checks of [`AdaptiveMaxPool3d`] on what it reads (its input and the output size).
pub(crate) fn adaptive3d_forward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    input: &TensorRef<'_, T, M>,
    output_size: [usize; 3],
) -> Result<AdaptiveGeometry3d> {
    const OP: &str = name::ADAPTIVE_MAX_POOL3D;
    let [n, c, d, h, w] = shape::volume_dims(OP, "input", input.user_shape())?;
    shape::output_size3(OP, "output_size", output_size)?;
    let volume = shape::volume_size(OP, "input", [d, h, w])?;
    shape::index_width::<I>(OP, "indices", volume)?;
    let sizes = VolumeSizes { n, c, input: [d, h, w], output: output_size, ndim: input.ndim() };
    Ok(AdaptiveGeometry3d { sizes })
}

/// Backward of adaptive 3-D max pooling (`aclnnAdaptiveMaxPool3dBackward`): scatters
/// `grad_output` to the arg-max positions in `indices`, summing where they coincide, in
/// row-major `(od, oh, ow)` order; every other position is zero. `Do`, `Ho`, `Wo` are read from
/// `grad_output`.
#[derive(Debug)]
pub struct AdaptiveMaxPool3dBackward<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Gradient of the pooled output, `[N, C, Do, Ho, Wo]` or `[C, Do, Ho, Wo]`.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward input (only its shape is read).
    pub self_: TensorRef<'a, T, M>,
    /// Flat arg-max indices from the forward, same shape as `grad_output`.
    pub indices: TensorRef<'a, I, M>,
    /// Receives the gradient of the input, shape of `self_`.
    pub grad_input: TensorMut<'a, T, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl
    for AdaptiveMaxPool3dBackward<'_, T, I, M>
{
    const NAME: &'static str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
    type Geometry = AdaptiveGeometry3d;

    fn validate(&self) -> Result<AdaptiveGeometry3d> {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
        let g = adaptive3d_backward_shapes(&self.grad_output, &self.self_, &self.indices)?;
        shape::output_shape(OP, "grad_input", &self.grad_input, self.self_.user_shape())?;
        Ok(g)
    }

    fn demands(g: &AdaptiveGeometry3d) -> Demands {
        volume_demands(&g.sizes)
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for AdaptiveMaxPool3dBackward<'_, T, I, M> {}

/// The checks of [`AdaptiveMaxPool3dBackward`] on its inputs: everything but the shape of
/// `grad_input`.
pub(crate) fn adaptive3d_backward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    grad_output: &TensorRef<'_, T, M>,
    self_: &TensorRef<'_, T, M>,
    indices: &TensorRef<'_, I, M>,
) -> Result<AdaptiveGeometry3d> {
    const OP: &str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
    let [n, c, d, h, w] = shape::volume_dims(OP, "self_", self_.user_shape())?;
    let pooled = grad_output.user_shape();
    // The last three axes of `grad_output`, if it has them; its rank is checked below.
    let output: [usize; 3] = match *pooled {
        [.., a, b, e] => [a, b, e],
        _ => [1, 1, 1],
    };
    for (len, axis) in output.iter().zip(["Do", "Ho", "Wo"]) {
        if *len == 0 {
            return Err(Error::EmptyDimension { op: OP, arg: "grad_output", axis, shape: pooled.to_vec() });
        }
    }
    let sizes = VolumeSizes { n, c, input: [d, h, w], output, ndim: self_.ndim() };
    shape::input_shape(OP, "grad_output", grad_output, &sizes.pooled_dims())?;
    shape::input_shape(OP, "indices", indices, &sizes.pooled_dims())?;
    shape::volume_size(OP, "self_", [d, h, w])?;
    Ok(AdaptiveGeometry3d { sizes })
}

/// 3-D max pooling with PyTorch-style flat indices (`max_pool3d_with_indices`,
/// `aclnnMaxPool3dWithArgmax`), any dilation.
///
/// ```
/// use poolgrad::{MaxPool3dParams, Plan, TensorMut, TensorRef, device::cpu::Cpu, op::MaxPool3dWithIndices};
/// let x: Vec<f32> = (0..27).map(|v| ((v * 5) % 27) as f32).collect(); // a 3x3x3 volume
/// let (mut out, mut idx) = ([0.0f32; 1], [0i64; 1]);
/// let op = MaxPool3dWithIndices {
///     input: TensorRef::from_slice(&x, &[1, 1, 3, 3, 3])?,
///     params: MaxPool3dParams::new([2, 2, 2]),
///     output: TensorMut::from_slice(&mut out, &[1, 1, 1, 1, 1])?,
///     indices: TensorMut::from_slice(&mut idx, &[1, 1, 1, 1, 1])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// // The window reads flat positions 0, 1, 3, 4, 9, 10, 12, 13: values 0, 5, 15, 20, 18, 23, 6, 11.
/// assert_eq!((out, idx), ([23.0], [10]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct MaxPool3dWithIndices<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Input `[N, C, D, H, W]` or `[C, D, H, W]`.
    pub input: TensorRef<'a, T, M>,
    /// Kernel, stride, padding, dilation, ceil mode, `[D, H, W]` each.
    pub params: MaxPool3dParams,
    /// Pooled values `[N, C, Do, Ho, Wo]` (rank of `input`).
    pub output: TensorMut<'a, T, M>,
    /// Flat arg-max `(id * H + ih) * W + iw` inside each volume, shape of `output`.
    pub indices: TensorMut<'a, I, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl for MaxPool3dWithIndices<'_, T, I, M> {
    const NAME: &'static str = name::MAX_POOL3D_WITH_INDICES;
    type Geometry = MaxPool3dGeometry;

    fn validate(&self) -> Result<MaxPool3dGeometry> {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES;
        let g = max_pool3d_forward_shapes::<T, I, _>(&self.input, &self.params)?;
        shape::output_shape(OP, "output", &self.output, &g.sizes.pooled_dims())?;
        shape::output_shape(OP, "indices", &self.indices, &g.sizes.pooled_dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPool3dGeometry) -> Demands {
        volume_demands(&g.sizes)
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for MaxPool3dWithIndices<'_, T, I, M> {}

/// The checks of [`MaxPool3dWithIndices`] on its input and parameters (no data is read).
pub(crate) fn max_pool3d_forward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    input: &TensorRef<'_, T, M>,
    params: &MaxPool3dParams,
) -> Result<MaxPool3dGeometry> {
    const OP: &str = name::MAX_POOL3D_WITH_INDICES;
    let g = MaxPool3dGeometry::checked(OP, "input", params, input.user_shape())?;
    let [d, h, w] = g.sizes.input;
    shape::index_width::<I>(OP, "indices", d * h * w)?;
    Ok(g)
}

/// Backward of [`MaxPool3dWithIndices`] (`aclnnMaxPool3dWithArgmaxBackward`):
/// `grad_input[n, c, idx] += grad_output[n, c, od, oh, ow]` in row-major output order.
#[derive(Debug)]
pub struct MaxPool3dWithIndicesBackward<'a, T: PoolFloat, I: ArgmaxIndex, M: Memory = Host> {
    /// Gradient of the pooled output, `[N, C, Do, Ho, Wo]`.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward input (only its shape is read).
    pub self_: TensorRef<'a, T, M>,
    /// Flat arg-max indices from the forward, shape of `grad_output`.
    pub indices: TensorRef<'a, I, M>,
    /// The forward's parameters (they fix `Do`, `Ho`, `Wo`).
    pub params: MaxPool3dParams,
    /// Receives the gradient of the input, shape of `self_`.
    pub grad_input: TensorMut<'a, T, M>,
}

impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> internal::OperationImpl
    for MaxPool3dWithIndicesBackward<'_, T, I, M>
{
    const NAME: &'static str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
    type Geometry = MaxPool3dGeometry;

    fn validate(&self) -> Result<MaxPool3dGeometry> {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
        let g = max_pool3d_backward_shapes(&self.grad_output, &self.self_, &self.indices, &self.params)?;
        shape::output_shape(OP, "grad_input", &self.grad_input, &g.sizes.input_dims())?;
        Ok(g)
    }

    fn demands(g: &MaxPool3dGeometry) -> Demands {
        volume_demands(&g.sizes)
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, M: Memory> Operation for MaxPool3dWithIndicesBackward<'_, T, I, M> {}

/// The checks of [`MaxPool3dWithIndicesBackward`] on its inputs and parameters: everything but
/// the shape of `grad_input`.
pub(crate) fn max_pool3d_backward_shapes<T: PoolFloat, I: ArgmaxIndex, M: Memory>(
    grad_output: &TensorRef<'_, T, M>,
    self_: &TensorRef<'_, T, M>,
    indices: &TensorRef<'_, I, M>,
    params: &MaxPool3dParams,
) -> Result<MaxPool3dGeometry> {
    const OP: &str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
    let g = MaxPool3dGeometry::checked(OP, "self_", params, self_.user_shape())?;
    shape::input_shape(OP, "grad_output", grad_output, &g.sizes.pooled_dims())?;
    shape::input_shape(OP, "indices", indices, &g.sizes.pooled_dims())?;
    Ok(g)
}

/// The spatial axes an unpooling or double backward can have: 2 or 3. Sealed.
pub trait SpatialAxes: sealed_axes::Sealed {}
mod sealed_axes {
    /// `[(); 2]` and `[(); 3]` only.
    pub trait Sealed {}
}
/// Marker for operations over `N` spatial axes; implemented for 2 and 3.
#[derive(Debug, Clone, Copy)]
pub struct Axes<const N: usize>;
impl sealed_axes::Sealed for Axes<2> {}
impl sealed_axes::Sealed for Axes<3> {}
impl SpatialAxes for Axes<2> {}
impl SpatialAxes for Axes<3> {}

/// The checks every indexed operation shares: `indices` and the pooled side `pooled` of one
/// shape, the full side `full` of the same `N` and `C`, its positions within the index type.
/// Over 1, 2 or 3 spatial axes (1: the 1-D operations, checked in their own terms before they
/// run as the 2-D ones).
pub(crate) fn indexed_shapes<I: ArgmaxIndex, const N: usize>(
    op: &'static str,
    (pooled_arg, pooled): (&'static str, &[usize]),
    indices: &[usize],
    (full_arg, full): (&'static str, &[usize]),
) -> Result<IndexedGeometry> {
    let (n, c, pooled_sizes) = shape::spatial_dims::<N>(op, pooled_arg, pooled)?;
    let (_, _, full_sizes) = shape::spatial_dims::<N>(op, full_arg, full)?;
    let mut expected_full = pooled[..pooled.len() - N].to_vec();
    expected_full.extend_from_slice(&full_sizes);
    shape::same_shape(op, full_arg, full, &expected_full)?;
    shape::same_shape(op, "indices", indices, pooled)?;
    let product = |sizes: [usize; N], arg| {
        sizes.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| Error::Overflow {
            op,
            arg,
            what: format!("the positions of {sizes:?}"),
        })
    };
    let full_len = product(full_sizes, full_arg)?;
    shape::index_width::<I>(op, "indices", full_len)?;
    Ok(IndexedGeometry {
        planes: n * c,
        pooled: product(pooled_sizes, pooled_arg)?,
        full: full_len,
        index_dims: pooled.to_vec(),
    })
}

/// The caller's shape of the full side of an unpooling: `input`'s, with its spatial sizes
/// `output_size`.
pub(crate) fn unpooled_dims<const N: usize>(input: &[usize], output_size: [usize; N]) -> Vec<usize> {
    let mut dims = input[..input.len().saturating_sub(N)].to_vec();
    dims.extend_from_slice(&output_size);
    dims
}

/// Max unpooling (`max_unpool2d` / `max_unpool3d`, CANN's `aclnnMaxUnpool2d` / `3d`): `output`,
/// of `input`'s batch and channels and spatial size `output_size`, is zero but where `indices`
/// point: `output[n, c, indices[n, c, i]] = input[n, c, i]`. Where several indices of a plane
/// are equal, the last in row-major order wins (PyTorch's CPU kernel leaves it unspecified); its
/// backward gives the gradient to that one alone. An index outside the output plane is an error
/// naming the first.
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, device::cpu::Cpu, op::MaxUnpool2d};
/// let (x, idx) = ([5.0f32, 7.0, 9.0], [3i64, 0, 3]);
/// let mut out = [1.0f32; 4];
/// let op = MaxUnpool2d {
///     input: TensorRef::from_slice(&x, &[1, 1, 3])?,
///     indices: TensorRef::from_slice(&idx, &[1, 1, 3])?,
///     output_size: [2, 2],
///     output: TensorMut::from_slice(&mut out, &[1, 2, 2])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!(out, [7.0, 0.0, 0.0, 9.0]); // index 3 twice: the last, 9.0, wins
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct MaxUnpool<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory = Host> {
    /// The pooled values, `[N, C, ..]` or `[C, ..]` with `N` spatial axes.
    pub input: TensorRef<'a, T, M>,
    /// Flat positions in each output plane, shape of `input`.
    pub indices: TensorRef<'a, I, M>,
    /// The output's spatial size.
    pub output_size: [usize; N],
    /// Receives the unpooled values.
    pub output: TensorMut<'a, T, M>,
}

/// 2-D max unpooling: [`MaxUnpool`] over `[H, W]`.
pub type MaxUnpool2d<'a, T, I, M = Host> = MaxUnpool<'a, T, I, 2, M>;
/// 3-D max unpooling: [`MaxUnpool`] over `[D, H, W]`.
pub type MaxUnpool3d<'a, T, I, M = Host> = MaxUnpool<'a, T, I, 3, M>;

impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> internal::OperationImpl
    for MaxUnpool<'_, T, I, N, M>
where
    Axes<N>: SpatialAxes,
{
    const NAME: &'static str = name::of_axes(N, name::MAX_UNPOOL2D, name::MAX_UNPOOL3D);
    type Geometry = IndexedGeometry;

    fn validate(&self) -> Result<IndexedGeometry> {
        let g = unpool_shapes::<I, N>(self.input.user_shape(), self.indices.user_shape(), self.output_size)?;
        shape::output_shape(
            Self::NAME,
            "output",
            &self.output,
            &unpooled_dims(self.input.user_shape(), self.output_size),
        )?;
        Ok(g)
    }

    fn demands(_: &IndexedGeometry) -> Demands {
        Demands { plane: [1, 1], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> Operation for MaxUnpool<'_, T, I, N, M> where
    Axes<N>: SpatialAxes
{
}

/// The checks of [`MaxUnpool`] on what it reads.
pub(crate) fn unpool_shapes<I: ArgmaxIndex, const N: usize>(
    input: &[usize],
    indices: &[usize],
    output_size: [usize; N],
) -> Result<IndexedGeometry> {
    unpool_shapes_of::<I, N>(
        name::of_axes(N, name::MAX_UNPOOL2D, name::MAX_UNPOOL3D),
        input,
        indices,
        output_size,
    )
}

/// [`unpool_shapes`] for the operation named `op`, over 1, 2 or 3 spatial axes (1: the 1-D
/// unpooling, checked in its own terms before it runs as the 2-D one).
pub(crate) fn unpool_shapes_of<I: ArgmaxIndex, const N: usize>(
    op: &'static str,
    input: &[usize],
    indices: &[usize],
    output_size: [usize; N],
) -> Result<IndexedGeometry> {
    if output_size.contains(&0) {
        return Err(Error::InvalidParameter {
            op,
            arg: "output_size",
            expected: "every size at least 1".into(),
            got: format!("{output_size:?}"),
        });
    }
    shape::spatial_dims::<N>(op, "input", input)?;
    indexed_shapes::<I, N>(op, ("input", input), indices, ("output", &unpooled_dims(input, output_size)))
}

/// Backward of [`MaxUnpool`]: `grad_input[n, c, i] = grad_output[n, c, indices[n, c, i]]` for the
/// last `i` of each index in row-major order, zero for the earlier ones (the forward took the
/// last).
#[derive(Debug)]
pub struct MaxUnpoolBackward<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory = Host> {
    /// Gradient of the unpooled output.
    pub grad_output: TensorRef<'a, T, M>,
    /// The forward's indices.
    pub indices: TensorRef<'a, I, M>,
    /// Receives the gradient of the forward's input, shape of `indices`.
    pub grad_input: TensorMut<'a, T, M>,
}

/// Backward of 2-D max unpooling.
pub type MaxUnpool2dBackward<'a, T, I, M = Host> = MaxUnpoolBackward<'a, T, I, 2, M>;
/// Backward of 3-D max unpooling.
pub type MaxUnpool3dBackward<'a, T, I, M = Host> = MaxUnpoolBackward<'a, T, I, 3, M>;

impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> internal::OperationImpl
    for MaxUnpoolBackward<'_, T, I, N, M>
where
    Axes<N>: SpatialAxes,
{
    const NAME: &'static str = name::of_axes(N, name::MAX_UNPOOL2D_BACKWARD, name::MAX_UNPOOL3D_BACKWARD);
    type Geometry = IndexedGeometry;

    fn validate(&self) -> Result<IndexedGeometry> {
        let g = indexed_shapes::<I, N>(
            Self::NAME,
            ("indices", self.indices.user_shape()),
            self.indices.user_shape(),
            ("grad_output", self.grad_output.user_shape()),
        )?;
        shape::output_shape(Self::NAME, "grad_input", &self.grad_input, self.indices.user_shape())?;
        Ok(g)
    }

    fn demands(_: &IndexedGeometry) -> Demands {
        Demands { plane: [1, 1], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> Operation for MaxUnpoolBackward<'_, T, I, N, M> where
    Axes<N>: SpatialAxes
{
}

/// The gradient of a max pooling's backward with respect to its `grad_output` (the "double
/// backward"): `grad_grad_output[n, c, o] = grad_grad_input[n, c, indices[n, c, o]]`, a gather of
/// the second-order gradient at each output's arg-max. The backward adds each `grad_output` at
/// its index, so this is its exact derivative, repeated indices included.
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, device::cpu::Cpu, op::MaxPool2dDoubleBackward};
/// let (ggi, idx) = ([1.0f32, 2.0, 3.0, 4.0], [3i32, 3]);
/// let mut ggo = [0.0f32; 2];
/// let op = MaxPool2dDoubleBackward {
///     grad_grad_input: TensorRef::from_slice(&ggi, &[1, 2, 2])?,
///     indices: TensorRef::from_slice(&idx, &[1, 1, 2])?,
///     grad_grad_output: TensorMut::from_slice(&mut ggo, &[1, 1, 2])?,
/// };
/// Plan::new(&Cpu::sequential(), op)?.run()?;
/// assert_eq!(ggo, [4.0, 4.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct MaxPoolDoubleBackward<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory = Host> {
    /// The second-order gradient, shape of the pooling's input.
    pub grad_grad_input: TensorRef<'a, T, M>,
    /// The forward's flat indices.
    pub indices: TensorRef<'a, I, M>,
    /// Receives the gradient of the backward's `grad_output`, shape of `indices`.
    pub grad_grad_output: TensorMut<'a, T, M>,
}

/// Double backward of 2-D max pooling (adaptive or not).
pub type MaxPool2dDoubleBackward<'a, T, I, M = Host> = MaxPoolDoubleBackward<'a, T, I, 2, M>;
/// Double backward of 3-D max pooling (adaptive or not).
pub type MaxPool3dDoubleBackward<'a, T, I, M = Host> = MaxPoolDoubleBackward<'a, T, I, 3, M>;

impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> internal::OperationImpl
    for MaxPoolDoubleBackward<'_, T, I, N, M>
where
    Axes<N>: SpatialAxes,
{
    const NAME: &'static str =
        name::of_axes(N, name::MAX_POOL2D_DOUBLE_BACKWARD, name::MAX_POOL3D_DOUBLE_BACKWARD);
    type Geometry = IndexedGeometry;

    fn validate(&self) -> Result<IndexedGeometry> {
        let g = indexed_shapes::<I, N>(
            Self::NAME,
            ("indices", self.indices.user_shape()),
            self.indices.user_shape(),
            ("grad_grad_input", self.grad_grad_input.user_shape()),
        )?;
        shape::output_shape(
            Self::NAME,
            "grad_grad_output",
            &self.grad_grad_output,
            self.indices.user_shape(),
        )?;
        Ok(g)
    }

    fn demands(_: &IndexedGeometry) -> Demands {
        Demands { plane: [1, 1], adaptive_backward: None }
    }
}
impl<T: PoolFloat, I: ArgmaxIndex, const N: usize, M: Memory> Operation
    for MaxPoolDoubleBackward<'_, T, I, N, M>
where
    Axes<N>: SpatialAxes,
{
}
