//! The pooling operations as methods of [`AscendStream`] on [`NpuTensor`]s: the device forms of the
//! free functions, allocating their outputs on the device and running with the stream's own
//! reusable workspace. Each builds the operation's descriptor and runs it through the same
//! [`Plan`] as any other caller.

use core::marker::PhantomData;

use super::tensor::Values;
use super::{AscendStream, Npu, NpuTensor};
use crate::device::Runs;
use crate::element::{Element, PoolFloat};
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::mask::{MaskLayout, MaskMut, MaskRef};
use crate::op::{
    self, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3d, AdaptiveMaxPool3dBackward,
    MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask, MaxPool2dWithMaskBackward,
    MaxPool3dWithIndices, MaxPool3dWithIndicesBackward, MaxPoolDoubleBackward, MaxUnpool, MaxUnpoolBackward,
    Operation, name,
};
use crate::params::{MaxPool2dParams, MaxPool3dParams};
use crate::plan::Plan;

/// The outputs of a forward with indices on the device ([`AscendStream::adaptive_max_pool2d`],
/// [`AscendStream::max_pool2d_with_indices`] and their 3-D forms).
#[derive(Debug)]
pub struct NpuPooled<T: Element, I: Element> {
    /// Pooled values.
    pub output: NpuTensor<T>,
    /// Flat index of each value inside its `(n, c)` plane: `ih * W + iw`, or
    /// `(id * H + ih) * W + iw` in a volume.
    pub indices: NpuTensor<I>,
}

/// The outputs of [`AscendStream::max_pool2d_with_mask`]: the pooled values and the int8 mask in
/// layout `L`, with the parameters it belongs to.
#[derive(Debug)]
pub struct NpuPooledMask<T: Element, L: MaskLayout> {
    /// Pooled values.
    pub output: NpuTensor<T>,
    /// The mask bytes, `[N, C, kH*kW, (ceil(Ho*Wo/16)+1)*32]`.
    pub mask: NpuTensor<i8>,
    /// The pooling the mask records.
    pub params: MaxPool2dParams,
    layout: PhantomData<fn() -> L>,
}

impl<'d> AscendStream<'d> {
    /// Plans `op` and runs it with the stream's workspace (grown as phase 1 asks, then reused).
    fn run<O: Operation>(&self, op: O) -> Result<()>
    where
        Self: Runs<O>,
    {
        let plan = Plan::new(self, op)?;
        let mut ws = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        plan.run_in(&mut ws)
    }

    /// Adaptive max pooling of `input` to `output_size`, queued on this stream (the device form
    /// of [`adaptive_max_pool2d`](crate::adaptive_max_pool2d)); `i64` indices, which is what
    /// `aclnnAdaptiveMaxPool2d` writes.
    ///
    /// # Errors
    /// The errors of [`adaptive_max_pool2d`](crate::adaptive_max_pool2d), of the plan on this
    /// device, and of device memory that cannot be had.
    pub fn adaptive_max_pool2d<T: PoolFloat>(
        &self,
        input: &NpuTensor<T>,
        output_size: [usize; 2],
    ) -> Result<NpuPooled<T, i64>> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let dims = op::adaptive_forward_shapes::<T, i64, Npu>(&input.view(), output_size)?.pooled_dims();
        let mut output = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        let mut indices = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(AdaptiveMaxPool2d {
            input: input.view(),
            output_size,
            output: output.view_mut(),
            indices: indices.view_mut(),
        })?;
        Ok(NpuPooled { output, indices })
    }

    /// The gradient of [`AscendStream::adaptive_max_pool2d`], queued on this stream (the device
    /// form of [`adaptive_max_pool2d_backward`](crate::adaptive_max_pool2d_backward)).
    ///
    /// # Errors
    /// As [`adaptive_max_pool2d_backward`](crate::adaptive_max_pool2d_backward), with index
    /// values checked from what poolgrad knows of them ([`NpuTensor::from_array`] reads them, a
    /// forward bounds them by its plane).
    pub fn adaptive_max_pool2d_backward<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        grad_output: &NpuTensor<T>,
        self_: &NpuTensor<T>,
        indices: &NpuTensor<I>,
    ) -> Result<NpuTensor<T>> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        op::adaptive_backward_shapes(&grad_output.view(), &self_.view(), &indices.view())?;
        let mut grad_input =
            NpuTensor::alloc(self.device(), &self_.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(AdaptiveMaxPool2dBackward {
            grad_output: grad_output.view(),
            self_: self_.view(),
            indices: indices.view(),
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }

    /// Max pooling with flat `i32` indices, queued on this stream (the device form of
    /// [`max_pool2d_with_indices_i32`](crate::max_pool2d_with_indices_i32)): int32 is what the
    /// device's operators take and write.
    ///
    /// # Errors
    /// As [`max_pool2d_with_indices_i32`](crate::max_pool2d_with_indices_i32), and the plan's.
    pub fn max_pool2d_with_indices<T: PoolFloat>(
        &self,
        input: &NpuTensor<T>,
        params: &MaxPool2dParams,
    ) -> Result<NpuPooled<T, i32>> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let dims = op::max_pool_forward_shapes::<T, i32, Npu>(&input.view(), params)?.pooled_dims();
        let mut output = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        let mut indices = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool2dWithIndices {
            input: input.view(),
            params: *params,
            output: output.view_mut(),
            indices: indices.view_mut(),
        })?;
        Ok(NpuPooled { output, indices })
    }

    /// The gradient of [`AscendStream::max_pool2d_with_indices`], queued on this stream.
    ///
    /// # Errors
    /// As [`max_pool2d_with_indices_backward`](crate::max_pool2d_with_indices_backward), with
    /// index values checked as for [`AscendStream::adaptive_max_pool2d_backward`].
    pub fn max_pool2d_with_indices_backward<T: PoolFloat>(
        &self,
        grad_output: &NpuTensor<T>,
        self_: &NpuTensor<T>,
        indices: &NpuTensor<i32>,
        params: &MaxPool2dParams,
    ) -> Result<NpuTensor<T>> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let (go, x, idx) = (grad_output.view(), self_.view(), indices.view());
        op::max_pool_indices_backward_shapes(&go, &x, &idx, params)?;
        let mut grad_input =
            NpuTensor::alloc(self.device(), &self_.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool2dWithIndicesBackward {
            grad_output: go,
            self_: x,
            indices: idx,
            params: *params,
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }

    /// Max pooling that records its arg-max as an int8 mask in layout `L`, queued on this stream
    /// (the device form of [`max_pool2d_with_mask`](crate::max_pool2d_with_mask)); the layout must
    /// be the one the SoC writes ([`Ascend::writes_mask_layout`](super::Ascend::writes_mask_layout)).
    ///
    /// # Errors
    /// As [`max_pool2d_with_mask`](crate::max_pool2d_with_mask), and the plan's.
    pub fn max_pool2d_with_mask<T: PoolFloat, L: MaskLayout>(
        &self,
        input: &NpuTensor<T>,
        params: &MaxPool2dParams,
        layout: L,
    ) -> Result<NpuPooledMask<T, L>> {
        const OP: &str = name::MAX_POOL2D_WITH_MASK;
        let g = op::mask_forward_shapes::<T, L, Npu>(&input.view(), params)?;
        let mut output =
            NpuTensor::alloc(self.device(), &g.pooled_dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        let mut mask =
            NpuTensor::alloc(self.device(), &g.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool2dWithMask {
            input: input.view(),
            params: *params,
            output: output.view_mut(),
            mask: MaskMut::new(mask.view_mut(), layout),
        })?;
        Ok(NpuPooledMask { output, mask, params: *params, layout: PhantomData })
    }

    /// The gradient of [`AscendStream::max_pool2d_with_mask`] through its mask, queued on this
    /// stream (the device form of
    /// [`max_pool2d_with_mask_backward`](crate::max_pool2d_with_mask_backward)).
    ///
    /// # Errors
    /// As [`max_pool2d_with_mask_backward`](crate::max_pool2d_with_mask_backward); an
    /// `I32Argmax` mask's values are checked as indices are.
    pub fn max_pool2d_with_mask_backward<T: PoolFloat, L: MaskLayout>(
        &self,
        grad_output: &NpuTensor<T>,
        self_: &NpuTensor<T>,
        pooled: &NpuPooledMask<T, L>,
    ) -> Result<NpuTensor<T>> {
        const OP: &str = name::MAX_POOL2D_WITH_MASK_BACKWARD;
        let mask = MaskRef::new(pooled.mask.view(), L::default());
        op::mask_backward_shapes(&grad_output.view(), &self_.view(), &mask, &pooled.params)?;
        let mut grad_input =
            NpuTensor::alloc(self.device(), &self_.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool2dWithMaskBackward {
            grad_output: grad_output.view(),
            self_: self_.view(),
            mask,
            params: pooled.params,
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }

    /// 3-D max pooling with flat `i32` indices, queued on this stream (the device form of
    /// [`max_pool3d_with_indices`](crate::max_pool3d_with_indices)): int32 is what the device's
    /// 3-D operators take and write on A2/A3.
    ///
    /// # Errors
    /// As [`max_pool3d_with_indices`](crate::max_pool3d_with_indices), and the plan's.
    pub fn max_pool3d_with_indices<T: PoolFloat>(
        &self,
        input: &NpuTensor<T>,
        params: &MaxPool3dParams,
    ) -> Result<NpuPooled<T, i32>> {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES;
        let dims = op::max_pool3d_forward_shapes::<T, i32, Npu>(&input.view(), params)?.sizes.pooled_dims();
        let mut output = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        let mut indices = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool3dWithIndices {
            input: input.view(),
            params: *params,
            output: output.view_mut(),
            indices: indices.view_mut(),
        })?;
        Ok(NpuPooled { output, indices })
    }

    /// The gradient of [`AscendStream::max_pool3d_with_indices`], queued on this stream.
    ///
    /// # Errors
    /// As [`max_pool3d_with_indices_backward`](crate::max_pool3d_with_indices_backward), with
    /// index values checked against the volume as for
    /// [`AscendStream::adaptive_max_pool2d_backward`].
    pub fn max_pool3d_with_indices_backward<T: PoolFloat>(
        &self,
        grad_output: &NpuTensor<T>,
        self_: &NpuTensor<T>,
        indices: &NpuTensor<i32>,
        params: &MaxPool3dParams,
    ) -> Result<NpuTensor<T>> {
        const OP: &str = name::MAX_POOL3D_WITH_INDICES_BACKWARD;
        let (go, x, idx) = (grad_output.view(), self_.view(), indices.view());
        op::max_pool3d_backward_shapes(&go, &x, &idx, params)?;
        let mut grad_input =
            NpuTensor::alloc(self.device(), &self_.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(MaxPool3dWithIndicesBackward {
            grad_output: go,
            self_: x,
            indices: idx,
            params: *params,
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }

    /// Adaptive 3-D max pooling of `input` to `output_size`, queued on this stream (the device
    /// form of [`adaptive_max_pool3d`](crate::adaptive_max_pool3d)); `i32` indices, as for
    /// [`AscendStream::max_pool3d_with_indices`].
    ///
    /// # Errors
    /// As [`adaptive_max_pool3d`](crate::adaptive_max_pool3d), and the plan's.
    pub fn adaptive_max_pool3d<T: PoolFloat>(
        &self,
        input: &NpuTensor<T>,
        output_size: [usize; 3],
    ) -> Result<NpuPooled<T, i32>> {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D;
        let dims =
            op::adaptive3d_forward_shapes::<T, i32, Npu>(&input.view(), output_size)?.sizes.pooled_dims();
        let mut output = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        let mut indices = NpuTensor::alloc(self.device(), &dims, Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(AdaptiveMaxPool3d {
            input: input.view(),
            output_size,
            output: output.view_mut(),
            indices: indices.view_mut(),
        })?;
        Ok(NpuPooled { output, indices })
    }

    /// The gradient of [`AscendStream::adaptive_max_pool3d`], queued on this stream.
    ///
    /// # Errors
    /// As [`adaptive_max_pool3d_backward`](crate::adaptive_max_pool3d_backward), with index
    /// values checked as for [`AscendStream::max_pool3d_with_indices_backward`].
    pub fn adaptive_max_pool3d_backward<T: PoolFloat>(
        &self,
        grad_output: &NpuTensor<T>,
        self_: &NpuTensor<T>,
        indices: &NpuTensor<i32>,
    ) -> Result<NpuTensor<T>> {
        const OP: &str = name::ADAPTIVE_MAX_POOL3D_BACKWARD;
        let (go, x, idx) = (grad_output.view(), self_.view(), indices.view());
        op::adaptive3d_backward_shapes(&go, &x, &idx)?;
        let mut grad_input =
            NpuTensor::alloc(self.device(), &self_.dims(), Values::Unknown).map_err(|e| e.named(OP))?;
        self.run(AdaptiveMaxPool3dBackward {
            grad_output: go,
            self_: x,
            indices: idx,
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }

    /// The gradient of a 2-D max pooling's backward with respect to its `grad_output`, queued on
    /// this stream (the device form of
    /// [`max_pool2d_double_backward`](crate::max_pool2d_double_backward)): the gather
    /// `grad_grad_input[n, c, indices[n, c, o]]`, run on `aclnnMaxUnpool2dBackward`.
    ///
    /// # Errors
    /// As [`max_pool2d_double_backward`](crate::max_pool2d_double_backward), with index values
    /// checked against the plane of `grad_grad_input` as for
    /// [`AscendStream::adaptive_max_pool2d_backward`].
    pub fn max_pool2d_double_backward<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        grad_grad_input: &NpuTensor<T>,
        indices: &NpuTensor<I>,
    ) -> Result<NpuTensor<T>> {
        self.run_double_backward::<T, I, 2>(name::MAX_POOL2D_DOUBLE_BACKWARD, grad_grad_input, indices)
    }

    /// The 3-D form of [`AscendStream::max_pool2d_double_backward`], on
    /// `aclnnMaxUnpool3dBackward`, which takes INT64 indices only (so `i64` here, while the
    /// device's 3-D forwards write `i32`: upload indices as `i64`, or convert them in the
    /// caller's framework).
    ///
    /// # Errors
    /// As [`max_pool3d_double_backward`](crate::max_pool3d_double_backward), with index values
    /// checked as for [`AscendStream::max_pool2d_double_backward`].
    pub fn max_pool3d_double_backward<T: PoolFloat>(
        &self,
        grad_grad_input: &NpuTensor<T>,
        indices: &NpuTensor<i64>,
    ) -> Result<NpuTensor<T>> {
        self.run_double_backward::<T, i64, 3>(name::MAX_POOL3D_DOUBLE_BACKWARD, grad_grad_input, indices)
    }

    /// Runs the double backward `op` on `N` spatial axes into a new tensor of the indices' shape
    /// (which the plan then checks, with everything else).
    fn run_double_backward<T: PoolFloat, I: ArgmaxIndex, const N: usize>(
        &self,
        op: &'static str,
        grad_grad_input: &NpuTensor<T>,
        indices: &NpuTensor<I>,
    ) -> Result<NpuTensor<T>>
    where
        Self: for<'a> Runs<MaxPoolDoubleBackward<'a, T, I, N, Npu>>,
        crate::op::Axes<N>: crate::op::SpatialAxes,
    {
        let mut grad_grad_output =
            NpuTensor::alloc(self.device(), &indices.dims(), Values::Unknown).map_err(|e| e.named(op))?;
        self.run(MaxPoolDoubleBackward {
            grad_grad_input: grad_grad_input.view(),
            indices: indices.view(),
            grad_grad_output: grad_grad_output.view_mut(),
        })?;
        Ok(grad_grad_output)
    }

    /// Max unpooling of `input` to `output_size`, queued on this stream (the device form of
    /// [`max_unpool2d`](crate::max_unpool2d)), on `aclnnMaxUnpool2d`.
    ///
    /// poolgrad's rule for repeated indices (the last of equal indices in a plane wins) needs
    /// the values on the host, so on the device the indices must be known to repeat no position
    /// in a plane: uploaded without repeats ([`NpuTensor::from_array`] reads them), or written by
    /// a forward whose windows share no input (stride at least the window's span on every axis;
    /// adaptive sizes that divide). Memory of the caller's is covered by
    /// [`TensorRef::from_device_ptr`](crate::TensorRef::from_device_ptr)'s contract.
    ///
    /// # Errors
    /// As [`max_unpool2d`](crate::max_unpool2d); [`Error::InvalidParameter`](crate::Error)
    /// (`indices`) for indices that may repeat a position, with index values checked against
    /// the output plane as for [`AscendStream::adaptive_max_pool2d_backward`].
    pub fn max_unpool2d<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        input: &NpuTensor<T>,
        indices: &NpuTensor<I>,
        output_size: [usize; 2],
    ) -> Result<NpuTensor<T>> {
        self.run_unpool(name::MAX_UNPOOL2D, input, indices, output_size)
    }

    /// The gradient of [`AscendStream::max_unpool2d`], queued on this stream (the device form of
    /// [`max_unpool2d_backward`](crate::max_unpool2d_backward)): a gather on
    /// `aclnnMaxUnpool2dBackward`, with the indices known not to repeat as for the unpooling.
    ///
    /// # Errors
    /// As [`max_unpool2d_backward`](crate::max_unpool2d_backward), and as
    /// [`AscendStream::max_unpool2d`] for the indices.
    pub fn max_unpool2d_backward<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        grad_output: &NpuTensor<T>,
        indices: &NpuTensor<I>,
    ) -> Result<NpuTensor<T>> {
        self.run_unpool_backward::<T, I, 2>(name::MAX_UNPOOL2D_BACKWARD, grad_output, indices)
    }

    /// The 3-D form of [`AscendStream::max_unpool2d`], on `aclnnMaxUnpool3d`.
    ///
    /// # Errors
    /// As [`max_unpool3d`](crate::max_unpool3d), and as [`AscendStream::max_unpool2d`] for the
    /// indices.
    pub fn max_unpool3d<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        input: &NpuTensor<T>,
        indices: &NpuTensor<I>,
        output_size: [usize; 3],
    ) -> Result<NpuTensor<T>> {
        self.run_unpool(name::MAX_UNPOOL3D, input, indices, output_size)
    }

    /// The gradient of [`AscendStream::max_unpool3d`], on `aclnnMaxUnpool3dBackward`, which takes
    /// INT64 indices only (as [`AscendStream::max_pool3d_double_backward`]).
    ///
    /// # Errors
    /// As [`max_unpool3d_backward`](crate::max_unpool3d_backward), and as
    /// [`AscendStream::max_unpool2d`] for the indices.
    pub fn max_unpool3d_backward<T: PoolFloat>(
        &self,
        grad_output: &NpuTensor<T>,
        indices: &NpuTensor<i64>,
    ) -> Result<NpuTensor<T>> {
        self.run_unpool_backward::<T, i64, 3>(name::MAX_UNPOOL3D_BACKWARD, grad_output, indices)
    }

    /// Runs the unpooling `op` on `N` spatial axes into a new tensor of `input`'s batch and
    /// channels and spatial size `output_size`.
    fn run_unpool<T: PoolFloat, I: ArgmaxIndex, const N: usize>(
        &self,
        op: &'static str,
        input: &NpuTensor<T>,
        indices: &NpuTensor<I>,
        output_size: [usize; N],
    ) -> Result<NpuTensor<T>>
    where
        Self: for<'a> Runs<MaxUnpool<'a, T, I, N, Npu>>,
        crate::op::Axes<N>: crate::op::SpatialAxes,
    {
        let dims = input.dims();
        op::unpool_shapes::<I, N>(&dims, &indices.dims(), output_size)?;
        let full = op::unpooled_dims(&dims, output_size);
        let mut output = NpuTensor::alloc(self.device(), &full, Values::Unknown).map_err(|e| e.named(op))?;
        self.run(MaxUnpool {
            input: input.view(),
            indices: indices.view(),
            output_size,
            output: output.view_mut(),
        })?;
        Ok(output)
    }

    /// Runs the unpooling's backward `op` on `N` spatial axes into a new tensor of the indices'
    /// shape (which the plan then checks, with everything else).
    fn run_unpool_backward<T: PoolFloat, I: ArgmaxIndex, const N: usize>(
        &self,
        op: &'static str,
        grad_output: &NpuTensor<T>,
        indices: &NpuTensor<I>,
    ) -> Result<NpuTensor<T>>
    where
        Self: for<'a> Runs<MaxUnpoolBackward<'a, T, I, N, Npu>>,
        crate::op::Axes<N>: crate::op::SpatialAxes,
    {
        let mut grad_input =
            NpuTensor::alloc(self.device(), &indices.dims(), Values::Unknown).map_err(|e| e.named(op))?;
        self.run(MaxUnpoolBackward {
            grad_output: grad_output.view(),
            indices: indices.view(),
            grad_input: grad_input.view_mut(),
        })?;
        Ok(grad_input)
    }
}
