//! The six operators on tensors already in the NPU's memory ([`Npu`] descriptors), queued on an
//! [`AscendStream`]: phase-1 checks and descriptors over the caller's device addresses, then
//! CANN's two phases on the stream. Nothing is copied to or from the host and nothing waits.

use super::ffi::{Call, DeviceAddr};
use super::launch::{
    AscendPrepared, BackwardAttrs, BackwardBuffers, ForwardAttrs, ForwardBuffers, PoolArgmax, Staged,
    acl_dtype, int32_plane,
};
use super::soc::DeviceOp;
use super::tensor::{DeviceMut, DeviceRef, Values};
use super::{AscendMemory, AscendStream, Npu, Replaced};
use crate::device::internal::Launch;
use crate::element::{DType, Element, PoolFloat};
use crate::error::{Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::mask::MaskLayout;
use crate::op::{
    AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices,
    MaxPool2dWithIndicesBackward, MaxPool2dWithMask, MaxPool2dWithMaskBackward, MaxPoolGeometry,
};
use crate::tensor::{TensorMut, TensorRef};

/// The device address and placement of one tensor of a call, for its descriptor.
#[derive(Clone, Copy)]
struct Arg {
    name: &'static str,
    addr: DeviceAddr,
    device_id: i32,
    dtype: DType,
    dims: [usize; 4],
}

impl Arg {
    fn input<E: Element>(name: &'static str, t: &TensorRef<'_, E, Npu>) -> Self {
        let data: DeviceRef<'_, E> = t.data();
        Arg { name, addr: data.addr(), device_id: data.device_id(), dtype: E::DTYPE, dims: t.shape() }
    }

    fn output<E: Element>(name: &'static str, t: &TensorMut<'_, E, Npu>) -> Self {
        let data: &DeviceMut<'_, E> = t.data_ref();
        Arg { name, addr: data.addr(), device_id: data.device_id(), dtype: E::DTYPE, dims: t.shape() }
    }
}

impl AscendStream<'_> {
    /// Checks that every tensor of `args` is on this stream's device (before any device call).
    fn place(&self, args: &[Arg]) -> Result<()> {
        args.iter().try_for_each(|a| self.placed(a.name, a.device_id))
    }

    /// Describes each tensor of `args` over its memory.
    fn describe<const K: usize>(&self, args: [Arg; K]) -> Result<[Staged<()>; K]> {
        let session = &self.device().session;
        let mut staged = Vec::with_capacity(K);
        for a in args {
            staged
                .push(Staged { tensor: session.tensor_at(&a.dims, acl_dtype(a.dtype), a.addr)?, buffer: () });
        }
        Ok(staged.try_into().unwrap_or_else(|_| unreachable!("one descriptor per argument")))
    }

    /// Queues `call` on the stream with the workspace of `memory` (checked to be this device's),
    /// first zeroing the bytes of `zero`.
    fn queue_call(
        &self,
        memory: &mut AscendMemory,
        zero: &[(DeviceAddr, usize)],
        call: Call<'_>,
    ) -> Result<()> {
        self.device().workspace(memory)?;
        self.own_workspace(memory)?;
        let session = &self.device().session;
        session.enqueue(self.queue(), zero, call, |size| memory.grown_to(session, size, Replaced::Retired))
    }

    /// Queues the forward with indices phase 1 staged (nothing for an empty batch), after which
    /// `indices` hold values below `plane`.
    fn queue_indexed_forward<E: Element>(
        &self,
        prepared: &AscendPrepared<ForwardBuffers<()>>,
        memory: &mut AscendMemory,
        indices: TensorMut<'_, E, Npu>,
        plane: usize,
    ) -> Result<()> {
        let Some(b) = self.device().device_work(prepared, memory)? else { return Ok(()) };
        self.queue_call(memory, &[], b.call())?;
        indices.into_data().set_values(Values::Written { below: plane as u64 });
        Ok(())
    }

    /// Queues the backward phase 1 staged (nothing for an empty batch).
    fn queue_backward(
        &self,
        prepared: &AscendPrepared<BackwardBuffers<()>>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device().device_work(prepared, memory)? else { return Ok(()) };
        self.queue_call(memory, &[], b.call())
    }

    fn pool_forward(
        &self,
        argmax: PoolArgmax,
        g: &MaxPoolGeometry,
        args: [Arg; 3],
    ) -> Result<(AscendPrepared<ForwardBuffers<()>>, usize)> {
        int32_plane(g)?;
        self.place(&args)?;
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let [input, output, argmax_t] = self.describe(args)?;
        let params = self.device().pool_params(&g.params)?;
        let attrs = ForwardAttrs::Pool { op: argmax.forward(), params };
        Ok(AscendPrepared::of(ForwardBuffers { attrs, input, output, argmax: argmax_t }))
    }

    fn pool_backward(
        &self,
        argmax: PoolArgmax,
        g: &MaxPoolGeometry,
        args: [Arg; 4],
    ) -> Result<(AscendPrepared<BackwardBuffers<()>>, usize)> {
        int32_plane(g)?;
        self.place(&args)?;
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let [grad_output, self_, argmax_t, grad_input] = self.describe(args)?;
        let params = self.device().pool_params(&g.params)?;
        let attrs = BackwardAttrs::Pool { op: argmax.backward(), params };
        Ok(AscendPrepared::of(BackwardBuffers { attrs, grad_output, self_, argmax: argmax_t, grad_input }))
    }
}

/// On the device `aclnnAdaptiveMaxPool2d` writes INT64 indices only, so the device form takes
/// `i64` indices (converting would take a copy).
impl<'a, T: PoolFloat> Launch<AdaptiveMaxPool2d<'a, T, i64, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<ForwardBuffers<()>>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, i64, Npu>,
        g: &AdaptiveGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::AdaptiveForward, T::DTYPE)?;
        let args = [
            Arg::input("input", &op.input),
            Arg::output("output", &op.output),
            Arg::output("indices", &op.indices),
        ];
        self.place(&args)?;
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let [input, output, indices] = self.describe(args)?;
        let output_size = self.device().session.int_array(&[g.ho as i64, g.wo as i64])?;
        let attrs = ForwardAttrs::Adaptive { op: DeviceOp::AdaptiveForward, output_size };
        Ok(AscendPrepared::of(ForwardBuffers { attrs, input, output, argmax: indices }))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, i64, Npu>,
        g: &AdaptiveGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed_forward(&prepared, memory, op.indices, g.h * g.w)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<BackwardBuffers<()>>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I, Npu>,
        g: &AdaptiveGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::AdaptiveBackward, T::DTYPE)?;
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("self_", &op.self_),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        self.place(&args)?;
        op.indices
            .data()
            .values()
            .check("indices", g.h * g.w, |e, v| g.index_error(UNNAMED, "indices", e, v))?;
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let [grad_output, self_, indices, grad_input] = self.describe(args)?;
        let attrs = BackwardAttrs::Adaptive(DeviceOp::AdaptiveBackward);
        Ok(AscendPrepared::of(BackwardBuffers { attrs, grad_output, self_, argmax: indices, grad_input }))
    }

    fn launch(
        &self,
        _op: AdaptiveMaxPool2dBackward<'a, T, I, Npu>,
        _g: &AdaptiveGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_backward(&prepared, memory)
    }
}

/// On the device the with-indices operators take and write INT32 indices only, so their device
/// forms take `i32` indices.
impl<'a, T: PoolFloat> Launch<MaxPool2dWithIndices<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<ForwardBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, i32, Npu>,
        g: &MaxPoolGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::WithIndicesForward, T::DTYPE)?;
        self.device().check_params(g)?;
        let args = [
            Arg::input("input", &op.input),
            Arg::output("output", &op.output),
            Arg::output("indices", &op.indices),
        ];
        self.pool_forward(PoolArgmax::Indices, g, args)
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, i32, Npu>,
        g: &MaxPoolGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed_forward(&prepared, memory, op.indices, g.h * g.w)
    }
}

impl<'a, T: PoolFloat> Launch<MaxPool2dWithIndicesBackward<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<BackwardBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, i32, Npu>,
        g: &MaxPoolGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::WithIndicesBackward, T::DTYPE)?;
        self.device().check_params(g)?;
        op.indices
            .data()
            .values()
            .check("indices", g.h * g.w, |e, v| g.index_error(UNNAMED, "indices", e, v))?;
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("self_", &op.self_),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        self.pool_backward(PoolArgmax::Indices, g, args)
    }

    fn launch(
        &self,
        _op: MaxPool2dWithIndicesBackward<'a, T, i32, Npu>,
        _g: &MaxPoolGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_backward(&prepared, memory)
    }
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMask<'a, T, L, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<ForwardBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPool2dWithMask<'a, T, L, Npu>,
        g: &MaxPoolGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::MaskForward, T::DTYPE)?;
        self.device().check_params(g)?;
        self.device().check_layout::<L>(g)?;
        let args = [
            Arg::input("input", &op.input),
            Arg::output("output", &op.output),
            Arg::output("mask", &op.mask.bytes),
        ];
        self.pool_forward(PoolArgmax::Mask, g, args)
    }

    fn launch(
        &self,
        op: MaxPool2dWithMask<'a, T, L, Npu>,
        g: &MaxPoolGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device().device_work(&prepared, memory)? else { return Ok(()) };
        let mask = op.mask.bytes.into_data();
        // The operator writes only part of the mask (the i32 prefix, or the bit-mask words): the
        // rest is zeroed first, on the stream, as the host path and the CPU backend leave it.
        self.queue_call(memory, &[(mask.addr(), mask.bytes())], b.call())?;
        mask.set_values(if L::I32_VALUES {
            Values::Written { below: (g.h * g.w) as u64 }
        } else {
            Values::Unknown
        });
        Ok(())
    }
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMaskBackward<'a, T, L, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<BackwardBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPool2dWithMaskBackward<'a, T, L, Npu>,
        g: &MaxPoolGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::MaskBackward, T::DTYPE)?;
        self.device().check_params(g)?;
        self.device().check_layout::<L>(g)?;
        if L::I32_VALUES {
            // As for indices: an I32Argmax value outside the plane would make the device write
            // outside grad_input. (A Bitmask bit only selects a window offset.)
            let values = op.mask.bytes.data().values();
            values.check("mask", g.h * g.w, |e, v| g.index_error(UNNAMED, "mask", e, v))?;
        }
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("self_", &op.self_),
            Arg::input("mask", &op.mask.bytes),
            Arg::output("grad_input", &op.grad_input),
        ];
        self.pool_backward(PoolArgmax::Mask, g, args)
    }

    fn launch(
        &self,
        _op: MaxPool2dWithMaskBackward<'a, T, L, Npu>,
        _g: &MaxPoolGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_backward(&prepared, memory)
    }
}
