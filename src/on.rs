//! The device-bound handle, [`On`]: each operation over ndarray arrays, implemented once.
//!
//! The allocating forms check what they read once, allocate outputs of the shapes that check
//! established, and hand the descriptor to the plan as checked (phase 1 then only asks the
//! device); the `_into` forms describe the caller's arrays and let [`Plan::new`] check all of it.

use ndarray::{Array, ArrayRef, ArrayViewD, ArrayViewMutD, Axis, Dimension, IxDyn};

#[cfg(doc)]
use crate::device::cpu::Cpu;
use crate::device::{Device, Runs};
use crate::element::{Element, PoolFloat};
use crate::error::Error;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout, MaskMut};
use crate::op::{
    self, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3d, AdaptiveMaxPool3dBackward,
    MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask, MaxPool2dWithMaskBackward,
    MaxPool3dWithIndices, MaxPool3dWithIndicesBackward, MaxPoolDoubleBackward, MaxUnpool, MaxUnpoolBackward,
    name,
};
use crate::params::{MaxPool1dParams, MaxPool2dParams, MaxPool3dParams};
use crate::plan::Plan;
use crate::tensor::{LineDim, PoolDim, TensorMut, TensorRef, VolumeDim};
use crate::{alloc, shape};

/// The result of a max-pooling forward: pooled values and flat arg-max indices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled<T, I, D: Dimension> {
    /// Pooled values.
    pub output: Array<T, D>,
    /// Flat index `ih * W + iw` of each value inside its `(n, c)` plane.
    pub indices: Array<I, D>,
}

/// The result of a max-pooling forward with an Ascend mask: pooled values and the mask.
#[derive(Debug, Clone, PartialEq)]
pub struct PooledMask<T, L: MaskLayout, D: Dimension> {
    /// Pooled values.
    pub output: Array<T, D>,
    /// The arg-max of each output as an int8 mask in layout `L`.
    pub mask: Mask<L, D>,
}

/// The operations on `device`: [`On`]'s methods are the free functions of the same names, run
/// there (an Ascend NPU with the `ascend` feature, or a [`Cpu`] with its own threads).
///
/// ```
/// use poolgrad::device::cpu::Cpu;
/// let x = ndarray::Array4::<f32>::ones((1, 2, 6, 6));
/// let p = poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d(&x, [3, 3])?;
/// assert!(p.indices.iter().all(|&i| i % 2 == 0 && (i / 6) % 2 == 0)); // ties: the first maximum
/// # Ok::<(), poolgrad::Error>(())
/// ```
pub fn on<Dev: Device>(device: &Dev) -> On<'_, Dev> {
    On { device }
}

/// The operations bound to one device: made by [`on`]. Each method is the free function of the
/// same name on this device, with the same arguments, results and errors, and the device's own
/// errors besides.
#[derive(Debug, Clone, Copy)]
pub struct On<'d, Dev> {
    device: &'d Dev,
}

/// The ranks of the 2-D operations' arrays, and of the 3-D ones'.
const PLANES: (core::ops::RangeInclusive<usize>, &str) = (3..=4, crate::tensor::RANKS);
const VOLUMES: (core::ops::RangeInclusive<usize>, &str) = (4..=5, shape::VOLUME_RANKS);

/// `array`'s rank, if it is one of `ranks` (an `IxDyn` array may have any).
fn rank_of<E, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: &ArrayRef<E, D>,
    (ranks, expected): (core::ops::RangeInclusive<usize>, &'static str),
) -> Result<()> {
    if ranks.contains(&array.ndim()) {
        Ok(())
    } else {
        Err(Error::Rank { op, arg, expected, got: array.ndim(), shape: array.shape().to_vec() })
    }
}

/// An array's view as the operation's argument `arg` (a 2-D operation's).
fn read<'a, E: Element, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: &'a ArrayRef<E, D>,
) -> Result<TensorRef<'a, E>> {
    rank_of(op, arg, array, PLANES)?;
    TensorRef::named(array.view(), arg).map_err(|e| e.named(op))
}

/// An array's mutable view as the operation's argument `arg` (a 2-D operation's).
fn write<'a, E: Element, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: &'a mut ArrayRef<E, D>,
) -> Result<TensorMut<'a, E>> {
    rank_of(op, arg, array, PLANES)?;
    TensorMut::named(array.view_mut(), arg).map_err(|e| e.named(op))
}

/// An array's mutable view as argument `arg` of a 3-D operation.
fn write_volume<'a, E: Element, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: &'a mut ArrayRef<E, D>,
) -> Result<TensorMut<'a, E>> {
    rank_of(op, arg, array, VOLUMES)?;
    TensorMut::named(array.view_mut(), arg).map_err(|e| e.named(op))
}

/// An array's view as argument `arg` of a 3-D operation. A 5-D view whose `D` and `H` axes do
/// not merge into one (sliced with steps along them) is first copied, in standard layout, into
/// `copy`: the views describe every 5-D tensor with those axes merged.
fn read_volume<'a, E: Element, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: &'a ArrayRef<E, D>,
    copy: &'a mut Option<Array<E, D>>,
) -> Result<TensorRef<'a, E>> {
    rank_of(op, arg, array, VOLUMES)?;
    match TensorRef::named(array.view(), arg) {
        Err(Error::Layout { .. }) => {
            let standard = copy.insert(array.as_standard_layout().into_owned());
            TensorRef::named(standard.view(), arg).map_err(|e| e.named(op))
        }
        viewed => viewed.map_err(|e| e.named(op)),
    }
}

impl<Dev: Device> On<'_, Dev> {
    /// [`adaptive_max_pool2d`](crate::adaptive_max_pool2d) on this device.
    pub fn adaptive_max_pool2d<T: PoolFloat, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 2],
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i64>>,
    {
        self.adaptive_pooled(input, output_size)
    }

    /// [`adaptive_max_pool2d_i32`](crate::adaptive_max_pool2d_i32) on this device.
    pub fn adaptive_max_pool2d_i32<T: PoolFloat, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 2],
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i32>>,
    {
        self.adaptive_pooled(input, output_size)
    }

    fn adaptive_pooled<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 2],
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let input = read(OP, "input", input)?;
        let g = op::adaptive_forward_shapes::<T, I, _>(&input, output_size)?;
        let mut output = alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
        let mut indices = alloc::zeroed_array::<I, D>(OP, "indices", &g.pooled_dims())?;
        let op = AdaptiveMaxPool2d {
            input,
            output_size,
            output: write(OP, "output", &mut output)?,
            indices: write(OP, "indices", &mut indices)?,
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(Pooled { output, indices })
    }

    /// [`adaptive_max_pool2d_into`](crate::adaptive_max_pool2d_into) on this device.
    pub fn adaptive_max_pool2d_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 2],
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let op = AdaptiveMaxPool2d {
            input: read(OP, "input", input)?,
            output_size,
            output: write(OP, "output", output)?,
            indices: write(OP, "indices", indices)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`adaptive_max_pool2d_backward`](crate::adaptive_max_pool2d_backward) on this device.
    pub fn adaptive_max_pool2d_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        let grad_output = read(OP, "grad_output", grad_output)?;
        let (self_, indices) = (read(OP, "self_", self_)?, read(OP, "indices", indices)?);
        let g = op::adaptive_backward_shapes(&grad_output, &self_, &indices)?;
        let mut grad_input = alloc::zeroed_array::<T, D>(OP, "grad_input", self_.user_shape())?;
        let op = AdaptiveMaxPool2dBackward {
            grad_output,
            self_,
            indices,
            grad_input: write(OP, "grad_input", &mut grad_input)?.known_zero(),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(grad_input)
    }

    /// [`adaptive_max_pool2d_backward_into`](crate::adaptive_max_pool2d_backward_into) on this device.
    pub fn adaptive_max_pool2d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        let op = AdaptiveMaxPool2dBackward {
            grad_output: read(OP, "grad_output", grad_output)?,
            self_: read(OP, "self_", self_)?,
            indices: read(OP, "indices", indices)?,
            grad_input: write(OP, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool2d_with_indices`](crate::max_pool2d_with_indices) on this device.
    pub fn max_pool2d_with_indices<T: PoolFloat, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool2dParams,
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i64>>,
    {
        self.max_pooled(input, params)
    }

    /// [`max_pool2d_with_indices_i32`](crate::max_pool2d_with_indices_i32) on this device.
    pub fn max_pool2d_with_indices_i32<T: PoolFloat, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool2dParams,
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i32>>,
    {
        self.max_pooled(input, params)
    }

    fn max_pooled<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool2dParams,
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let input = read(OP, "input", input)?;
        let g = op::max_pool_forward_shapes::<T, I, _>(&input, params)?;
        let mut output = alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
        let mut indices = alloc::zeroed_array::<I, D>(OP, "indices", &g.pooled_dims())?;
        let op = MaxPool2dWithIndices {
            input,
            params: *params,
            output: write(OP, "output", &mut output)?,
            indices: write(OP, "indices", &mut indices)?,
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(Pooled { output, indices })
    }

    /// [`max_pool2d_with_indices_into`](crate::max_pool2d_with_indices_into) on this device.
    pub fn max_pool2d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool2dParams,
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let op = MaxPool2dWithIndices {
            input: read(OP, "input", input)?,
            params: *params,
            output: write(OP, "output", output)?,
            indices: write(OP, "indices", indices)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool2d_with_indices_backward`](crate::max_pool2d_with_indices_backward) on this device.
    pub fn max_pool2d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool2dParams,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let grad_output = read(OP, "grad_output", grad_output)?;
        let (self_, indices) = (read(OP, "self_", self_)?, read(OP, "indices", indices)?);
        let g = op::max_pool_indices_backward_shapes(&grad_output, &self_, &indices, params)?;
        let mut grad_input = alloc::zeroed_array::<T, D>(OP, "grad_input", self_.user_shape())?;
        let op = MaxPool2dWithIndicesBackward {
            grad_output,
            self_,
            indices,
            params: *params,
            grad_input: write(OP, "grad_input", &mut grad_input)?.known_zero(),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(grad_input)
    }

    /// [`max_pool2d_with_indices_backward_into`](crate::max_pool2d_with_indices_backward_into) on this device.
    pub fn max_pool2d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool2dParams,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let op = MaxPool2dWithIndicesBackward {
            grad_output: read(OP, "grad_output", grad_output)?,
            self_: read(OP, "self_", self_)?,
            indices: read(OP, "indices", indices)?,
            params: *params,
            grad_input: write(OP, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool2d_with_mask`](crate::max_pool2d_with_mask) on this device.
    pub fn max_pool2d_with_mask<T: PoolFloat, L: MaskLayout, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool2dParams,
        layout: L,
    ) -> Result<PooledMask<T, L, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithMask<'a, T, L>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_MASK;
        let input = read(OP, "input", input)?;
        let g = op::mask_forward_shapes::<T, L, _>(&input, params)?;
        let mut output = alloc::zeroed_array::<T, D>(OP, "output", &g.pooled_dims())?;
        let mut mask = alloc::zeroed_array::<i8, D>(OP, "mask", &g.dims())?;
        let op = MaxPool2dWithMask {
            input,
            params: *params,
            output: write(OP, "output", &mut output)?,
            mask: MaskMut::new(write(OP, "mask", &mut mask)?, layout),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(PooledMask { output, mask: Mask::from_parts(mask, g) })
    }

    /// [`max_pool2d_with_mask_into`](crate::max_pool2d_with_mask_into) on this device.
    pub fn max_pool2d_with_mask_into<T: PoolFloat, L: MaskLayout, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        output: &mut ArrayRef<T, D>,
        mask: &mut Mask<L, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithMask<'a, T, L>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_MASK;
        shape::same_shape(OP, "input", input.shape(), &mask.input_shape())?;
        let params = *mask.params();
        let op = MaxPool2dWithMask {
            input: read(OP, "input", input)?,
            params,
            output: write(OP, "output", output)?,
            mask: MaskMut::new(
                TensorMut::named(mask.bytes_mut(), "mask").map_err(|e| e.named(OP))?,
                L::default(),
            ),
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool2d_with_mask_backward`](crate::max_pool2d_with_mask_backward) on this device.
    pub fn max_pool2d_with_mask_backward<T: PoolFloat, L: MaskLayout, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        mask: &Mask<L, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithMaskBackward<'a, T, L>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
        shape::same_shape(OP, "self_", self_.shape(), &mask.input_shape())?;
        let (grad_output, self_) = (read(OP, "grad_output", grad_output)?, read(OP, "self_", self_)?);
        let g = op::mask_backward_shapes(&grad_output, &self_, &mask.view(), mask.params())?;
        let mut grad_input = alloc::zeroed_array::<T, D>(OP, "grad_input", self_.user_shape())?;
        let op = MaxPool2dWithMaskBackward {
            grad_output,
            self_,
            mask: mask.view(),
            params: *mask.params(),
            grad_input: write(OP, "grad_input", &mut grad_input)?.known_zero(),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(grad_input)
    }

    /// [`max_pool2d_with_mask_backward_into`](crate::max_pool2d_with_mask_backward_into) on this device.
    pub fn max_pool2d_with_mask_backward_into<T: PoolFloat, L: MaskLayout, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        mask: &Mask<L, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithMaskBackward<'a, T, L>>,
    {
        const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
        shape::same_shape(OP, "self_", self_.shape(), &mask.input_shape())?;
        let op = MaxPool2dWithMaskBackward {
            grad_output: read(OP, "grad_output", grad_output)?,
            self_: read(OP, "self_", self_)?,
            mask: mask.view(),
            params: *mask.params(),
            grad_input: write(OP, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }
}

/// The 3-D poolings: inputs `[N, C, D, H, W]` or `[C, D, H, W]`, indices flat in each volume.
impl<Dev: Device> On<'_, Dev> {
    /// [`adaptive_max_pool3d`](crate::adaptive_max_pool3d) on this device.
    pub fn adaptive_max_pool3d<T: PoolFloat, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 3],
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3d<'a, T, i64>>,
    {
        self.adaptive_pooled3d(input, output_size)
    }

    /// [`adaptive_max_pool3d_i32`](crate::adaptive_max_pool3d_i32) on this device.
    pub fn adaptive_max_pool3d_i32<T: PoolFloat, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 3],
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3d<'a, T, i32>>,
    {
        self.adaptive_pooled3d(input, output_size)
    }

    fn adaptive_pooled3d<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 3],
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D;
        let mut copy = None;
        let input = read_volume(OP, "input", input, &mut copy)?;
        let g = op::adaptive3d_forward_shapes::<T, I, _>(&input, output_size)?;
        let mut output = alloc::zeroed_array::<T, D>(OP, "output", &g.sizes.pooled_dims())?;
        let mut indices = alloc::zeroed_array::<I, D>(OP, "indices", &g.sizes.pooled_dims())?;
        let op = AdaptiveMaxPool3d {
            input,
            output_size,
            output: write_volume(OP, "output", &mut output)?,
            indices: write_volume(OP, "indices", &mut indices)?,
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(Pooled { output, indices })
    }

    /// [`adaptive_max_pool3d_into`](crate::adaptive_max_pool3d_into) on this device.
    pub fn adaptive_max_pool3d_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: [usize; 3],
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D;
        let mut copy = None;
        let op = AdaptiveMaxPool3d {
            input: read_volume(OP, "input", input, &mut copy)?,
            output_size,
            output: write_volume(OP, "output", output)?,
            indices: write_volume(OP, "indices", indices)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`adaptive_max_pool3d_backward`](crate::adaptive_max_pool3d_backward) on this device.
    pub fn adaptive_max_pool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
        let (mut c1, mut c2, mut c3) = (None, None, None);
        let grad_output = read_volume(OP, "grad_output", grad_output, &mut c1)?;
        let self_ = read_volume(OP, "self_", self_, &mut c2)?;
        let indices = read_volume(OP, "indices", indices, &mut c3)?;
        let g = op::adaptive3d_backward_shapes(&grad_output, &self_, &indices)?;
        let mut grad_input = alloc::zeroed_array::<T, D>(OP, "grad_input", self_.user_shape())?;
        let op = AdaptiveMaxPool3dBackward {
            grad_output,
            self_,
            indices,
            grad_input: write_volume(OP, "grad_input", &mut grad_input)?.known_zero(),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(grad_input)
    }

    /// [`adaptive_max_pool3d_backward_into`](crate::adaptive_max_pool3d_backward_into) on this device.
    pub fn adaptive_max_pool3d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool3dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
        let (mut c1, mut c2, mut c3) = (None, None, None);
        let op = AdaptiveMaxPool3dBackward {
            grad_output: read_volume(OP, "grad_output", grad_output, &mut c1)?,
            self_: read_volume(OP, "self_", self_, &mut c2)?,
            indices: read_volume(OP, "indices", indices, &mut c3)?,
            grad_input: write_volume(OP, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool3d_with_indices`](crate::max_pool3d_with_indices) on this device.
    pub fn max_pool3d_with_indices<T: PoolFloat, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool3dParams,
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndices<'a, T, i64>>,
    {
        self.max_pooled3d(input, params)
    }

    /// [`max_pool3d_with_indices_i32`](crate::max_pool3d_with_indices_i32) on this device.
    pub fn max_pool3d_with_indices_i32<T: PoolFloat, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool3dParams,
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndices<'a, T, i32>>,
    {
        self.max_pooled3d(input, params)
    }

    fn max_pooled3d<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool3dParams,
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES;
        let mut copy = None;
        let input = read_volume(OP, "input", input, &mut copy)?;
        let g = op::max_pool3d_forward_shapes::<T, I, _>(&input, params)?;
        let mut output = alloc::zeroed_array::<T, D>(OP, "output", &g.sizes.pooled_dims())?;
        let mut indices = alloc::zeroed_array::<I, D>(OP, "indices", &g.sizes.pooled_dims())?;
        let op = MaxPool3dWithIndices {
            input,
            params: *params,
            output: write_volume(OP, "output", &mut output)?,
            indices: write_volume(OP, "indices", &mut indices)?,
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(Pooled { output, indices })
    }

    /// [`max_pool3d_with_indices_into`](crate::max_pool3d_with_indices_into) on this device.
    pub fn max_pool3d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool3dParams,
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES;
        let mut copy = None;
        let op = MaxPool3dWithIndices {
            input: read_volume(OP, "input", input, &mut copy)?,
            params: *params,
            output: write_volume(OP, "output", output)?,
            indices: write_volume(OP, "indices", indices)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_pool3d_with_indices_backward`](crate::max_pool3d_with_indices_backward) on this device.
    pub fn max_pool3d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool3dParams,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
        let (mut c1, mut c2, mut c3) = (None, None, None);
        let grad_output = read_volume(OP, "grad_output", grad_output, &mut c1)?;
        let self_ = read_volume(OP, "self_", self_, &mut c2)?;
        let indices = read_volume(OP, "indices", indices, &mut c3)?;
        let g = op::max_pool3d_backward_shapes(&grad_output, &self_, &indices, params)?;
        let mut grad_input = alloc::zeroed_array::<T, D>(OP, "grad_input", self_.user_shape())?;
        let op = MaxPool3dWithIndicesBackward {
            grad_output,
            self_,
            indices,
            params: *params,
            grad_input: write_volume(OP, "grad_input", &mut grad_input)?.known_zero(),
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(grad_input)
    }

    /// [`max_pool3d_with_indices_backward_into`](crate::max_pool3d_with_indices_backward_into) on this device.
    pub fn max_pool3d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool3dParams,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool3dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
        let (mut c1, mut c2, mut c3) = (None, None, None);
        let op = MaxPool3dWithIndicesBackward {
            grad_output: read_volume(OP, "grad_output", grad_output, &mut c1)?,
            self_: read_volume(OP, "self_", self_, &mut c2)?,
            indices: read_volume(OP, "indices", indices, &mut c3)?,
            params: *params,
            grad_input: write_volume(OP, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }
}

/// A 1-D pooling's array (`[N, C, L]` or `[C, L]`, checked) as planes one row high.
fn as_plane<E, D: Dimension>(array: &ArrayRef<E, D>) -> ArrayViewD<'_, E> {
    let axis = Axis(array.ndim() - 1);
    array.view().into_dyn().insert_axis(axis)
}

/// [`as_plane`], writable.
fn as_plane_mut<E, D: Dimension>(array: &mut ArrayRef<E, D>) -> ArrayViewMutD<'_, E> {
    let axis = Axis(array.ndim() - 1);
    array.view_mut().into_dyn().insert_axis(axis)
}

/// A result of the 2-D pooling on planes one row high, in the 1-D pooling's rank.
fn to_line<E, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    array: Array<E, IxDyn>,
) -> Result<Array<E, D>> {
    let axis = Axis(array.ndim() - 2);
    array.remove_axis(axis).into_dimensionality::<D>().map_err(|e| Error::from_shape(op, arg, e))
}

/// An error of the 2-D pooling on planes one row high, in the 1-D pooling's terms: its name, and
/// an index's position without the added row.
fn from_plane(e: Error, op: &'static str) -> Error {
    match e.in_terms_of(op, &[]) {
        Error::IndexOutOfRange { op, arg, mut position, value, plane } => {
            if position.len() >= 2 {
                position.remove(position.len() - 2);
            }
            Error::IndexOutOfRange { op, arg, position, value, plane }
        }
        e => e,
    }
}

/// The 1-D poolings: arrays `[N, C, L]` or `[C, L]`, checked in their own terms, then run as the
/// 2-D poolings on planes one row high (`[N, C, 1, L]`), which is what they are: a window of one
/// row, and flat indices that are the positions along `L` (PyTorch computes them the same way).
impl<Dev: Device> On<'_, Dev> {
    /// [`max_pool1d_with_indices`](crate::max_pool1d_with_indices) on this device.
    pub fn max_pool1d_with_indices<T: PoolFloat, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool1dParams,
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i64>>,
    {
        self.max_pooled1d(input, params)
    }

    /// [`max_pool1d_with_indices_i32`](crate::max_pool1d_with_indices_i32) on this device.
    pub fn max_pool1d_with_indices_i32<T: PoolFloat, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool1dParams,
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i32>>,
    {
        self.max_pooled1d(input, params)
    }

    /// The pooled shape of a 1-D max pooling of `input`, in the caller's rank, checked.
    fn max_pool1d_shape<E, I: ArgmaxIndex, D: Dimension>(
        op: &'static str,
        arg: &'static str,
        input: &ArrayRef<E, D>,
        params: &MaxPool1dParams,
    ) -> Result<Vec<usize>> {
        let [_, _, l] = shape::line_dims(op, arg, input.shape())?;
        let [lo] = params.output_size_for(op, arg, [l])?;
        shape::index_width::<I>(op, "indices", l)?;
        Ok(shape::with_length(input.shape(), lo))
    }

    fn max_pooled1d<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool1dParams,
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL1D_WITH_INDICES;
        Self::max_pool1d_shape::<T, I, D>(OP, "input", input, params)?;
        let p = self
            .max_pooled::<T, I, IxDyn>(&as_plane(input), &params.as_plane())
            .map_err(|e| from_plane(e, OP))?;
        Ok(Pooled { output: to_line(OP, "output", p.output)?, indices: to_line(OP, "indices", p.indices)? })
    }

    /// [`max_pool1d_with_indices_into`](crate::max_pool1d_with_indices_into) on this device.
    pub fn max_pool1d_with_indices_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        params: &MaxPool1dParams,
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL1D_WITH_INDICES;
        let pooled = Self::max_pool1d_shape::<T, I, D>(OP, "input", input, params)?;
        shape::same_shape(OP, "output", output.shape(), &pooled)?;
        shape::same_shape(OP, "indices", indices.shape(), &pooled)?;
        self.max_pool2d_with_indices_into(
            &as_plane(input),
            &params.as_plane(),
            &mut as_plane_mut(output),
            &mut as_plane_mut(indices),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// [`max_pool1d_with_indices_backward`](crate::max_pool1d_with_indices_backward) on this device.
    pub fn max_pool1d_with_indices_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool1dParams,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL1D_WITH_INDICES_BACKWARD;
        let pooled = Self::max_pool1d_shape::<T, I, D>(OP, "self_", self_, params)?;
        shape::same_shape(OP, "grad_output", grad_output.shape(), &pooled)?;
        shape::same_shape(OP, "indices", indices.shape(), &pooled)?;
        let gi = self
            .max_pool2d_with_indices_backward(
                &as_plane(grad_output),
                &as_plane(self_),
                &as_plane(indices),
                &params.as_plane(),
            )
            .map_err(|e| from_plane(e, OP))?;
        to_line(OP, "grad_input", gi)
    }

    /// [`max_pool1d_with_indices_backward_into`](crate::max_pool1d_with_indices_backward_into) on this device.
    pub fn max_pool1d_with_indices_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        params: &MaxPool1dParams,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPool2dWithIndicesBackward<'a, T, I>>,
    {
        const OP: &str = name::MAX_POOL1D_WITH_INDICES_BACKWARD;
        let pooled = Self::max_pool1d_shape::<T, I, D>(OP, "self_", self_, params)?;
        shape::same_shape(OP, "grad_output", grad_output.shape(), &pooled)?;
        shape::same_shape(OP, "indices", indices.shape(), &pooled)?;
        shape::same_shape(OP, "grad_input", grad_input.shape(), self_.shape())?;
        self.max_pool2d_with_indices_backward_into(
            &as_plane(grad_output),
            &as_plane(self_),
            &as_plane(indices),
            &params.as_plane(),
            &mut as_plane_mut(grad_input),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// [`adaptive_max_pool1d`](crate::adaptive_max_pool1d) on this device.
    pub fn adaptive_max_pool1d<T: PoolFloat, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: usize,
    ) -> Result<Pooled<T, i64, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i64>>,
    {
        self.adaptive_pooled1d(input, output_size)
    }

    /// [`adaptive_max_pool1d_i32`](crate::adaptive_max_pool1d_i32) on this device.
    pub fn adaptive_max_pool1d_i32<T: PoolFloat, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: usize,
    ) -> Result<Pooled<T, i32, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i32>>,
    {
        self.adaptive_pooled1d(input, output_size)
    }

    /// The pooled shape of an adaptive 1-D pooling of `input` to `output_size`, checked.
    fn adaptive1d_shape<E, I: ArgmaxIndex, D: Dimension>(
        op: &'static str,
        arg: &'static str,
        input: &ArrayRef<E, D>,
        output_size: usize,
    ) -> Result<Vec<usize>> {
        let [_, _, l] = shape::line_dims(op, arg, input.shape())?;
        if output_size == 0 {
            return Err(Error::InvalidParameter {
                op,
                arg: "output_size",
                expected: "at least 1".into(),
                got: "0".into(),
            });
        }
        shape::index_width::<I>(op, "indices", l)?;
        Ok(shape::with_length(input.shape(), output_size))
    }

    fn adaptive_pooled1d<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: usize,
    ) -> Result<Pooled<T, I, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL1D;
        Self::adaptive1d_shape::<T, I, D>(OP, "input", input, output_size)?;
        let p = self
            .adaptive_pooled::<T, I, IxDyn>(&as_plane(input), [1, output_size])
            .map_err(|e| from_plane(e, OP))?;
        Ok(Pooled { output: to_line(OP, "output", p.output)?, indices: to_line(OP, "indices", p.indices)? })
    }

    /// [`adaptive_max_pool1d_into`](crate::adaptive_max_pool1d_into) on this device.
    pub fn adaptive_max_pool1d_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        output_size: usize,
        output: &mut ArrayRef<T, D>,
        indices: &mut ArrayRef<I, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL1D;
        let pooled = Self::adaptive1d_shape::<T, I, D>(OP, "input", input, output_size)?;
        shape::same_shape(OP, "output", output.shape(), &pooled)?;
        shape::same_shape(OP, "indices", indices.shape(), &pooled)?;
        self.adaptive_max_pool2d_into(
            &as_plane(input),
            [1, output_size],
            &mut as_plane_mut(output),
            &mut as_plane_mut(indices),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// The checks of an adaptive 1-D backward: `self_`, and `grad_output` and `indices` of the
    /// same pooled shape.
    fn adaptive1d_backward_shape(
        op: &'static str,
        (grad_output, self_, indices): (&[usize], &[usize], &[usize]),
    ) -> Result<()> {
        shape::line_dims(op, "self_", self_)?;
        let lo = grad_output.last().copied().unwrap_or(1);
        let pooled = shape::with_length(self_, lo);
        shape::same_shape(op, "grad_output", grad_output, &pooled)?;
        if lo == 0 {
            return Err(Error::EmptyDimension { op, arg: "grad_output", axis: "Lo", shape: pooled });
        }
        shape::same_shape(op, "indices", indices, &pooled)?;
        Ok(())
    }

    /// [`adaptive_max_pool1d_backward`](crate::adaptive_max_pool1d_backward) on this device.
    pub fn adaptive_max_pool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL1D_BACKWARD;
        Self::adaptive1d_backward_shape(OP, (grad_output.shape(), self_.shape(), indices.shape()))?;
        let gi = self
            .adaptive_max_pool2d_backward(&as_plane(grad_output), &as_plane(self_), &as_plane(indices))
            .map_err(|e| from_plane(e, OP))?;
        to_line(OP, "grad_input", gi)
    }

    /// [`adaptive_max_pool1d_backward_into`](crate::adaptive_max_pool1d_backward_into) on this device.
    pub fn adaptive_max_pool1d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        self_: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<AdaptiveMaxPool2dBackward<'a, T, I>>,
    {
        const OP: &str = name::ADAPTIVE_MAX_POOL1D_BACKWARD;
        Self::adaptive1d_backward_shape(OP, (grad_output.shape(), self_.shape(), indices.shape()))?;
        shape::same_shape(OP, "grad_input", grad_input.shape(), self_.shape())?;
        self.adaptive_max_pool2d_backward_into(
            &as_plane(grad_output),
            &as_plane(self_),
            &as_plane(indices),
            &mut as_plane_mut(grad_input),
        )
        .map_err(|e| from_plane(e, OP))
    }
}

/// Max unpooling over one axis, its backward and the 1-D max poolings' double backward: arrays
/// `[N, C, L]` or `[C, L]`, checked in their own terms, then run as the 2-D operations on planes
/// one row high, as the 1-D poolings are (their flat indices are positions along `L`).
impl<Dev: Device> On<'_, Dev> {
    /// [`max_unpool1d`](crate::max_unpool1d) on this device.
    pub fn max_unpool1d<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: usize,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_UNPOOL1D;
        op::unpool_shapes_of::<I, 1>(OP, input.shape(), indices.shape(), [output_size])?;
        let output = self
            .max_unpool2d(&as_plane(input), &as_plane(indices), [1, output_size])
            .map_err(|e| from_plane(e, OP))?;
        to_line(OP, "output", output)
    }

    /// [`max_unpool1d_into`](crate::max_unpool1d_into) on this device.
    pub fn max_unpool1d_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: usize,
        output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_UNPOOL1D;
        op::unpool_shapes_of::<I, 1>(OP, input.shape(), indices.shape(), [output_size])?;
        let unpooled = op::unpooled_dims(input.shape(), [output_size]);
        shape::same_shape(OP, "output", output.shape(), &unpooled)?;
        self.max_unpool2d_into(
            &as_plane(input),
            &as_plane(indices),
            [1, output_size],
            &mut as_plane_mut(output),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// [`max_unpool1d_backward`](crate::max_unpool1d_backward) on this device.
    pub fn max_unpool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_UNPOOL1D_BACKWARD;
        Self::gather1d_shapes::<I>(OP, ("grad_output", grad_output.shape()), indices.shape())?;
        let grad_input = self
            .max_unpool2d_backward(&as_plane(grad_output), &as_plane(indices))
            .map_err(|e| from_plane(e, OP))?;
        to_line(OP, "grad_input", grad_input)
    }

    /// [`max_unpool1d_backward_into`](crate::max_unpool1d_backward_into) on this device.
    pub fn max_unpool1d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_UNPOOL1D_BACKWARD;
        Self::gather1d_shapes::<I>(OP, ("grad_output", grad_output.shape()), indices.shape())?;
        shape::same_shape(OP, "grad_input", grad_input.shape(), indices.shape())?;
        self.max_unpool2d_backward_into(
            &as_plane(grad_output),
            &as_plane(indices),
            &mut as_plane_mut(grad_input),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// [`max_pool1d_double_backward`](crate::max_pool1d_double_backward) on this device.
    pub fn max_pool1d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_POOL1D_DOUBLE_BACKWARD;
        Self::gather1d_shapes::<I>(OP, ("grad_grad_input", grad_grad_input.shape()), indices.shape())?;
        let grad_grad_output = self
            .max_pool2d_double_backward(&as_plane(grad_grad_input), &as_plane(indices))
            .map_err(|e| from_plane(e, OP))?;
        to_line(OP, "grad_grad_output", grad_grad_output)
    }

    /// [`max_pool1d_double_backward_into`](crate::max_pool1d_double_backward_into) on this device.
    pub fn max_pool1d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_grad_output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 2>>,
    {
        const OP: &str = name::MAX_POOL1D_DOUBLE_BACKWARD;
        Self::gather1d_shapes::<I>(OP, ("grad_grad_input", grad_grad_input.shape()), indices.shape())?;
        shape::same_shape(OP, "grad_grad_output", grad_grad_output.shape(), indices.shape())?;
        self.max_pool2d_double_backward_into(
            &as_plane(grad_grad_input),
            &as_plane(indices),
            &mut as_plane_mut(grad_grad_output),
        )
        .map_err(|e| from_plane(e, OP))
    }

    /// The checks of a 1-D gather in its own terms: `indices` (`[N, C, Lp]` or `[C, Lp]`) read
    /// the positions of `full` (the same `N` and `C`, any length), within the index type.
    fn gather1d_shapes<I: ArgmaxIndex>(
        op: &'static str,
        full: (&'static str, &[usize]),
        indices: &[usize],
    ) -> Result<()> {
        op::indexed_shapes::<I, 1>(op, ("indices", indices), indices, full).map(drop)
    }
}

/// An array's view as argument `arg` of an operation over `N` spatial axes (2 or 3).
fn read_axes<'a, E: Element, D: Dimension, const N: usize>(
    op: &'static str,
    arg: &'static str,
    array: &'a ArrayRef<E, D>,
    copy: &'a mut Option<Array<E, D>>,
) -> Result<TensorRef<'a, E>> {
    if N == 3 { read_volume(op, arg, array, copy) } else { read(op, arg, array) }
}

/// An array's mutable view as argument `arg` of an operation over `N` spatial axes.
fn write_axes<'a, E: Element, D: Dimension, const N: usize>(
    op: &'static str,
    arg: &'static str,
    array: &'a mut ArrayRef<E, D>,
) -> Result<TensorMut<'a, E>> {
    if N == 3 { write_volume(op, arg, array) } else { write(op, arg, array) }
}

/// Max unpooling, its backward and the max poolings' double backwards, over 2 or 3 spatial axes.
impl<Dev: Device> On<'_, Dev> {
    fn unpooled<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; N],
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let name = name::of_axes(N, name::MAX_UNPOOL2D, name::MAX_UNPOOL3D);
        let (mut c1, mut c2) = (None, None);
        let input = read_axes::<_, _, N>(name, "input", input, &mut c1)?;
        let indices = read_axes::<_, _, N>(name, "indices", indices, &mut c2)?;
        let g = op::unpool_shapes::<I, N>(input.user_shape(), indices.user_shape(), output_size)?;
        let dims = op::unpooled_dims(input.user_shape(), output_size);
        let mut output = alloc::zeroed_array::<T, D>(name, "output", &dims)?;
        let op = MaxUnpool {
            input,
            indices,
            output_size,
            output: write_axes::<_, _, N>(name, "output", &mut output)?,
        };
        Plan::checked(self.device, op, g)?.run()?;
        Ok(output)
    }

    fn unpooled_into<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; N],
        output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let name = name::of_axes(N, name::MAX_UNPOOL2D, name::MAX_UNPOOL3D);
        let (mut c1, mut c2) = (None, None);
        let op = MaxUnpool {
            input: read_axes::<_, _, N>(name, "input", input, &mut c1)?,
            indices: read_axes::<_, _, N>(name, "indices", indices, &mut c2)?,
            output_size,
            output: write_axes::<_, _, N>(name, "output", output)?,
        };
        Plan::new(self.device, op)?.run()
    }

    fn unpool_gathered<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let op_name = name::of_axes(N, name::MAX_UNPOOL2D_BACKWARD, name::MAX_UNPOOL3D_BACKWARD);
        let (mut c1, mut c2) = (None, None);
        let grad_output = read_axes::<_, _, N>(op_name, "grad_output", grad_output, &mut c1)?;
        let indices = read_axes::<_, _, N>(op_name, "indices", indices, &mut c2)?;
        let mut out = alloc::zeroed_array::<T, D>(op_name, "grad_input", indices.user_shape())?;
        let grad_input = write_axes::<_, _, N>(op_name, "grad_input", &mut out)?;
        Plan::new(self.device, MaxUnpoolBackward { grad_output, indices, grad_input })?.run()?;
        Ok(out)
    }

    fn unpool_gathered_into<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let op_name = name::of_axes(N, name::MAX_UNPOOL2D_BACKWARD, name::MAX_UNPOOL3D_BACKWARD);
        let (mut c1, mut c2) = (None, None);
        let op = MaxUnpoolBackward {
            grad_output: read_axes::<_, _, N>(op_name, "grad_output", grad_output, &mut c1)?,
            indices: read_axes::<_, _, N>(op_name, "indices", indices, &mut c2)?,
            grad_input: write_axes::<_, _, N>(op_name, "grad_input", grad_input)?,
        };
        Plan::new(self.device, op)?.run()
    }

    fn double_gathered<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let op_name = name::of_axes(N, name::MAX_POOL2D_DOUBLE_BACKWARD, name::MAX_POOL3D_DOUBLE_BACKWARD);
        let (mut c1, mut c2) = (None, None);
        let grad_grad_input = read_axes::<_, _, N>(op_name, "grad_grad_input", grad_grad_input, &mut c1)?;
        let indices = read_axes::<_, _, N>(op_name, "indices", indices, &mut c2)?;
        let mut out = alloc::zeroed_array::<T, D>(op_name, "grad_grad_output", indices.user_shape())?;
        let grad_grad_output = write_axes::<_, _, N>(op_name, "grad_grad_output", &mut out)?;
        Plan::new(self.device, MaxPoolDoubleBackward { grad_grad_input, indices, grad_grad_output })?
            .run()?;
        Ok(out)
    }

    fn double_gathered_into<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_grad_output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, N>>,
        op::Axes<N>: op::SpatialAxes,
    {
        let op_name = name::of_axes(N, name::MAX_POOL2D_DOUBLE_BACKWARD, name::MAX_POOL3D_DOUBLE_BACKWARD);
        let (mut c1, mut c2) = (None, None);
        let op = MaxPoolDoubleBackward {
            grad_grad_input: read_axes::<_, _, N>(op_name, "grad_grad_input", grad_grad_input, &mut c1)?,
            indices: read_axes::<_, _, N>(op_name, "indices", indices, &mut c2)?,
            grad_grad_output: write_axes::<_, _, N>(op_name, "grad_grad_output", grad_grad_output)?,
        };
        Plan::new(self.device, op)?.run()
    }

    /// [`max_unpool2d`](crate::max_unpool2d) on this device.
    pub fn max_unpool2d<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; 2],
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 2>>,
    {
        self.unpooled(input, indices, output_size)
    }

    /// [`max_unpool2d_into`](crate::max_unpool2d_into) on this device.
    pub fn max_unpool2d_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; 2],
        output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 2>>,
    {
        self.unpooled_into(input, indices, output_size, output)
    }

    /// [`max_unpool2d_backward`](crate::max_unpool2d_backward) on this device.
    pub fn max_unpool2d_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 2>>,
    {
        self.unpool_gathered::<T, I, D, 2>(grad_output, indices)
    }

    /// [`max_unpool2d_backward_into`](crate::max_unpool2d_backward_into) on this device.
    pub fn max_unpool2d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 2>>,
    {
        self.unpool_gathered_into::<T, I, D, 2>(grad_output, indices, grad_input)
    }

    /// [`max_pool2d_double_backward`](crate::max_pool2d_double_backward) on this device.
    pub fn max_pool2d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 2>>,
    {
        self.double_gathered::<T, I, D, 2>(grad_grad_input, indices)
    }

    /// [`max_pool2d_double_backward_into`](crate::max_pool2d_double_backward_into) on this device.
    pub fn max_pool2d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_grad_output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 2>>,
    {
        self.double_gathered_into::<T, I, D, 2>(grad_grad_input, indices, grad_grad_output)
    }

    /// [`max_unpool3d`](crate::max_unpool3d) on this device.
    pub fn max_unpool3d<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; 3],
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 3>>,
    {
        self.unpooled(input, indices, output_size)
    }

    /// [`max_unpool3d_into`](crate::max_unpool3d_into) on this device.
    pub fn max_unpool3d_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        output_size: [usize; 3],
        output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpool<'a, T, I, 3>>,
    {
        self.unpooled_into(input, indices, output_size, output)
    }

    /// [`max_unpool3d_backward`](crate::max_unpool3d_backward) on this device.
    pub fn max_unpool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 3>>,
    {
        self.unpool_gathered::<T, I, D, 3>(grad_output, indices)
    }

    /// [`max_unpool3d_backward_into`](crate::max_unpool3d_backward_into) on this device.
    pub fn max_unpool3d_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_output: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_input: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxUnpoolBackward<'a, T, I, 3>>,
    {
        self.unpool_gathered_into::<T, I, D, 3>(grad_output, indices, grad_input)
    }

    /// [`max_pool3d_double_backward`](crate::max_pool3d_double_backward) on this device.
    pub fn max_pool3d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
    ) -> Result<Array<T, D>>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 3>>,
    {
        self.double_gathered::<T, I, D, 3>(grad_grad_input, indices)
    }

    /// [`max_pool3d_double_backward_into`](crate::max_pool3d_double_backward_into) on this device.
    pub fn max_pool3d_double_backward_into<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
        &self,
        grad_grad_input: &ArrayRef<T, D>,
        indices: &ArrayRef<I, D>,
        grad_grad_output: &mut ArrayRef<T, D>,
    ) -> Result<()>
    where
        Dev: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, 3>>,
    {
        self.double_gathered_into::<T, I, D, 3>(grad_grad_input, indices, grad_grad_output)
    }
}
