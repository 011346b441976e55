//! The pooling operators on tensors already in the NPU's memory ([`Npu`] descriptors), queued on
//! an [`AscendStream`]: phase-1 checks and descriptors over the caller's device addresses, then
//! CANN's two phases on the stream. Nothing is copied to or from the host and nothing waits.

use super::ffi::{Call, DeviceAddr};
use super::launch::{
    AscendPrepared, BackwardAttrs, BackwardBuffers, ForwardAttrs, ForwardBuffers, PoolArgmax, Staged,
    acl_dtype, int32_plane, int32_volume, volume_dims,
};
use super::soc::DeviceOp;
use super::tensor::{DeviceMut, DeviceRef, Values};
use super::unpool::{IndexedBuffers, Kind, UnpoolAttrs, full_size, unpooled_size};
use super::{AscendMemory, AscendStream, Npu, Replaced};
use crate::device::internal::Launch;
use crate::element::{DType, Element, PoolFloat};
use crate::error::{Result, UNNAMED};
use crate::geometry::adaptive_divides;
use crate::index::ArgmaxIndex;
use crate::mask::MaskLayout;
use crate::op::{
    AdaptiveGeometry, AdaptiveGeometry3d, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3d,
    AdaptiveMaxPool3dBackward, Axes, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask,
    MaxPool2dWithMaskBackward, MaxPool3dGeometry, MaxPool3dWithIndices, MaxPool3dWithIndicesBackward,
    MaxPoolDoubleBackward, MaxPoolGeometry, MaxUnpool, MaxUnpoolBackward, SpatialAxes,
};
use crate::shape::{IndexedGeometry, VolumeSizes, spatial_dims};
use crate::tensor::{TensorMut, TensorRef};

/// The device address and placement of one tensor of a call, for its descriptor.
#[derive(Clone, Copy)]
struct Arg {
    name: &'static str,
    addr: DeviceAddr,
    device_id: i32,
    dtype: DType,
    /// The descriptor's dims: the first `rank`.
    dims: [usize; 5],
    rank: usize,
}

impl Arg {
    /// An input, described as 4-D `[N, C, H, W]` (see [`Arg::in_dims`] for others).
    fn input<E: Element>(name: &'static str, t: &TensorRef<'_, E, Npu>) -> Self {
        let data: DeviceRef<'_, E> = t.data();
        Self::new(name, (data.addr(), data.device_id()), E::DTYPE, t.shape())
    }

    /// An output, described as [`Arg::input`].
    fn output<E: Element>(name: &'static str, t: &TensorMut<'_, E, Npu>) -> Self {
        let data: &DeviceMut<'_, E> = t.data_ref();
        Self::new(name, (data.addr(), data.device_id()), E::DTYPE, t.shape())
    }

    fn new(
        name: &'static str,
        (addr, device_id): (DeviceAddr, i32),
        dtype: DType,
        [n, c, h, w]: [usize; 4],
    ) -> Self {
        Arg { name, addr, device_id, dtype, dims: [n, c, h, w, 0], rank: 4 }
    }

    /// The same tensor described with `dims` (4-D, or the 5-D `[N, C, D, H, W]` of a 3-D
    /// operator), whose element count is the tensor's: the operation's checks have passed.
    fn in_dims(self, dims: &[usize]) -> Self {
        let mut all = [0; 5];
        all[..dims.len()].copy_from_slice(dims);
        Arg { dims: all, rank: dims.len(), ..self }
    }

    fn dims(&self) -> &[usize] {
        &self.dims[..self.rank]
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
            staged.push(Staged {
                tensor: session.tensor_at(a.dims(), acl_dtype(a.dtype), a.addr)?,
                buffer: (),
            });
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
    /// `indices` hold values below `plane`, with no position twice in a pooled plane of
    /// `pooled` indices when `disjoint` (the forward's windows share no input).
    fn queue_indexed_forward<E: Element>(
        &self,
        prepared: &AscendPrepared<ForwardBuffers<()>>,
        memory: &mut AscendMemory,
        indices: TensorMut<'_, E, Npu>,
        (plane, pooled, disjoint): (usize, usize, bool),
    ) -> Result<()> {
        let Some(b) = self.device().device_work(prepared, memory)? else { return Ok(()) };
        self.queue_call(memory, &[], b.call())?;
        let distinct_in = if disjoint { pooled as u64 } else { 0 };
        indices.into_data().set_values(Values::Written { below: plane as u64, distinct_in });
        Ok(())
    }

    /// Queues the unpooling or gather phase 1 staged (nothing for an empty batch).
    fn queue_indexed(
        &self,
        prepared: &AscendPrepared<IndexedBuffers<()>>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device().device_work(prepared, memory)? else { return Ok(()) };
        self.queue_call(memory, &[], b.call())
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

    /// Phase 1 of a 3-D forward whose checks have passed: `input`, `output` and INT32 `indices`
    /// described as 5-D, with the operator's attributes.
    fn volume_forward(
        &self,
        sizes: &VolumeSizes,
        [input, output, indices]: [Arg; 3],
        attrs: impl FnOnce() -> Result<ForwardAttrs>,
    ) -> Result<(AscendPrepared<ForwardBuffers<()>>, usize)> {
        self.place(&[input, output, indices])?;
        if sizes.volumes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_volume(sizes)?;
        let (full, pooled) = volume_dims(sizes);
        let args = [input.in_dims(&full), output.in_dims(&pooled), indices.in_dims(&pooled)];
        let [input, output, argmax] = self.describe(args)?;
        Ok(AscendPrepared::of(ForwardBuffers { attrs: attrs()?, input, output, argmax }))
    }

    /// Phase 1 of a 3-D backward whose checks have passed, after checking what is known of the
    /// index values (`indices`) against the volume: the four tensors described as 5-D.
    fn volume_backward(
        &self,
        sizes: &VolumeSizes,
        [grad_output, self_, indices, grad_input]: [Arg; 4],
        values: Values,
        attrs: impl FnOnce() -> Result<BackwardAttrs>,
    ) -> Result<(AscendPrepared<BackwardBuffers<()>>, usize)> {
        self.place(&[grad_output, self_, indices, grad_input])?;
        let [d, h, w] = sizes.input;
        values.check("indices", d * h * w, |e, v| sizes.index_error(UNNAMED, "indices", e, v))?;
        if sizes.volumes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_volume(sizes)?;
        let (full, pooled) = volume_dims(sizes);
        let args = [
            grad_output.in_dims(&pooled),
            self_.in_dims(&full),
            indices.in_dims(&pooled),
            grad_input.in_dims(&full),
        ];
        let [grad_output, self_, argmax, grad_input] = self.describe(args)?;
        Ok(AscendPrepared::of(BackwardBuffers { attrs: attrs()?, grad_output, self_, argmax, grad_input }))
    }

    /// Phase 1 of an unpooling, its backward or a double backward (`kind`) on `N` spatial axes,
    /// after checking what is known of the index values: inside the full plane, and for the
    /// unpooling and its backward, no position twice in a plane (poolgrad's rule for repeated
    /// indices is then the device's result). `args` are the source (`input` or the gradient on
    /// the full side), the indices and the output; `full` is the full side's spatial size.
    ///
    /// A gather's `self` is described over the output's memory: it has the pooled shape and the
    /// element type the operator asks of `self`, whose values neither operator reads (ops-nn
    /// `index/gather_elements/op_api/aclnn_max_unpool2d_backward.cpp` l.184-200 and
    /// `aclnn_max_unpool3d_backward.cpp` l.75-135 read its shape; both gather from `gradOutput`
    /// at `indices`, l.203-228 and l.217-242).
    fn plan_indexed<const N: usize>(
        &self,
        (kind, g): (Kind, &IndexedGeometry),
        (dtype, full): (DType, [usize; N]),
        [source, indices, out]: [Arg; 3],
        values: Values,
    ) -> Result<(AscendPrepared<IndexedBuffers<()>>, usize)> {
        let op = kind.op(N);
        self.device().check_support(op, dtype)?;
        self.place(&[source, indices, out])?;
        values.check("indices", g.full, |e, v| g.index_error(UNNAMED, e, v))?;
        if kind != Kind::DoubleBackward {
            values.check_distinct("indices", g.pooled)?;
        }
        unpooled_size(op, g)?;
        if g.planes == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let (n, c, pooled) = spatial_dims::<N>(UNNAMED, "indices", &g.index_dims)?;
        let (full, pooled) = ([&[n, c][..], &full].concat(), [&[n, c][..], &pooled].concat());
        let attrs = UnpoolAttrs::new(&self.device().session, op, &full[2..])?;
        let buffers = if kind == Kind::Unpool {
            let [source, indices, out] =
                self.describe([source.in_dims(&pooled), indices.in_dims(&pooled), out.in_dims(&full)])?;
            IndexedBuffers { attrs, source, self_: None, indices, out }
        } else {
            let args =
                [source.in_dims(&full), out.in_dims(&pooled), indices.in_dims(&pooled), out.in_dims(&pooled)];
            let [source, self_, indices, out] = self.describe(args)?;
            IndexedBuffers { attrs, source, self_: Some(self_), indices, out }
        };
        Ok(AscendPrepared::of(buffers))
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
        let disjoint = adaptive_divides([g.h, g.w], [g.ho, g.wo]);
        self.queue_indexed_forward(&prepared, memory, op.indices, (g.h * g.w, g.ho * g.wo, disjoint))
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
        let disjoint = g.params.windows_disjoint();
        self.queue_indexed_forward(&prepared, memory, op.indices, (g.h * g.w, g.ho * g.wo, disjoint))
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
            Values::Written { below: (g.h * g.w) as u64, distinct_in: 0 }
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

/// On A2/A3 the 3-D operators take and write INT32 indices only (the 950 also INT64), so their
/// device forms take `i32` indices.
impl<'a, T: PoolFloat> Launch<MaxPool3dWithIndices<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<ForwardBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPool3dWithIndices<'a, T, i32, Npu>,
        g: &MaxPool3dGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let device = self.device();
        device.check_support(DeviceOp::Pool3dForward, T::DTYPE)?;
        device.check_dilation(&g.params.dilation())?;
        let args = [
            Arg::input("input", &op.input),
            Arg::output("output", &op.output),
            Arg::output("indices", &op.indices),
        ];
        self.volume_forward(&g.sizes, args, || {
            Ok(ForwardAttrs::Pool { op: DeviceOp::Pool3dForward, params: device.pool_params(&g.params)? })
        })
    }

    fn launch(
        &self,
        op: MaxPool3dWithIndices<'a, T, i32, Npu>,
        g: &MaxPool3dGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let ([d, h, w], [od, oh, ow]) = (g.sizes.input, g.sizes.output);
        let disjoint = g.params.windows_disjoint();
        self.queue_indexed_forward(&prepared, memory, op.indices, (d * h * w, od * oh * ow, disjoint))
    }
}

impl<'a, T: PoolFloat> Launch<MaxPool3dWithIndicesBackward<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<BackwardBuffers<()>>;

    /// No dilation check, as on the host path: the operator takes any dilation.
    fn prepare(
        &self,
        op: &MaxPool3dWithIndicesBackward<'a, T, i32, Npu>,
        g: &MaxPool3dGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let device = self.device();
        device.check_support(DeviceOp::Pool3dBackward, T::DTYPE)?;
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("self_", &op.self_),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        self.volume_backward(&g.sizes, args, op.indices.data().values(), || {
            Ok(BackwardAttrs::Pool { op: DeviceOp::Pool3dBackward, params: device.pool_params(&g.params)? })
        })
    }

    fn launch(
        &self,
        _op: MaxPool3dWithIndicesBackward<'a, T, i32, Npu>,
        _g: &MaxPool3dGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_backward(&prepared, memory)
    }
}

impl<'a, T: PoolFloat> Launch<AdaptiveMaxPool3d<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<ForwardBuffers<()>>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool3d<'a, T, i32, Npu>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(Self::Prepared, usize)> {
        let device = self.device();
        device.check_support(DeviceOp::Adaptive3dForward, T::DTYPE)?;
        let args = [
            Arg::input("input", &op.input),
            Arg::output("output", &op.output),
            Arg::output("indices", &op.indices),
        ];
        self.volume_forward(&g.sizes, args, || {
            let output_size = device.session.int_array(&g.sizes.output.map(|o| o as i64))?;
            Ok(ForwardAttrs::Adaptive { op: DeviceOp::Adaptive3dForward, output_size })
        })
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool3d<'a, T, i32, Npu>,
        g: &AdaptiveGeometry3d,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let ([d, h, w], [od, oh, ow]) = (g.sizes.input, g.sizes.output);
        let disjoint = adaptive_divides(g.sizes.input, g.sizes.output);
        self.queue_indexed_forward(&prepared, memory, op.indices, (d * h * w, od * oh * ow, disjoint))
    }
}

impl<'a, T: PoolFloat> Launch<AdaptiveMaxPool3dBackward<'a, T, i32, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<BackwardBuffers<()>>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool3dBackward<'a, T, i32, Npu>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(Self::Prepared, usize)> {
        self.device().check_support(DeviceOp::Adaptive3dBackward, T::DTYPE)?;
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("self_", &op.self_),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        self.volume_backward(&g.sizes, args, op.indices.data().values(), || {
            Ok(BackwardAttrs::Adaptive(DeviceOp::Adaptive3dBackward))
        })
    }

    fn launch(
        &self,
        _op: AdaptiveMaxPool3dBackward<'a, T, i32, Npu>,
        _g: &AdaptiveGeometry3d,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_backward(&prepared, memory)
    }
}

/// The 2-D double backward runs on `aclnnMaxUnpool2dBackward`, which takes INT32 and INT64
/// indices (`aclnn_max_unpool2d_backward.cpp` `CheckDtypeValid`, l.44-45 and l.66).
impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPoolDoubleBackward<'a, T, I, 2, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<IndexedBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPoolDoubleBackward<'a, T, I, 2, Npu>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let args = [
            Arg::input("grad_grad_input", &op.grad_grad_input),
            Arg::input("indices", &op.indices),
            Arg::output("grad_grad_output", &op.grad_grad_output),
        ];
        let full = full_size::<2>(op.grad_grad_input.user_shape());
        self.plan_indexed((Kind::DoubleBackward, g), (T::DTYPE, full), args, op.indices.data().values())
    }

    fn launch(
        &self,
        _op: MaxPoolDoubleBackward<'a, T, I, 2, Npu>,
        _g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed(&prepared, memory)
    }
}

/// The 3-D double backward runs on `aclnnMaxUnpool3dBackward`, which takes INT64 indices only
/// (`aclnn_max_unpool3d_backward.cpp` `CheckDtypeValid`, l.71), so its device form takes `i64`
/// indices (the device's 3-D forwards write `i32`: converting would take a copy).
impl<'a, T: PoolFloat> Launch<MaxPoolDoubleBackward<'a, T, i64, 3, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<IndexedBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxPoolDoubleBackward<'a, T, i64, 3, Npu>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let args = [
            Arg::input("grad_grad_input", &op.grad_grad_input),
            Arg::input("indices", &op.indices),
            Arg::output("grad_grad_output", &op.grad_grad_output),
        ];
        let full = full_size::<3>(op.grad_grad_input.user_shape());
        self.plan_indexed((Kind::DoubleBackward, g), (T::DTYPE, full), args, op.indices.data().values())
    }

    fn launch(
        &self,
        _op: MaxPoolDoubleBackward<'a, T, i64, 3, Npu>,
        _g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed(&prepared, memory)
    }
}

/// `aclnnMaxUnpool2d` and `aclnnMaxUnpool3d` take INT32 and INT64 indices
/// (`index/scatter_elements/op_api/aclnn_max_unpool2d.cpp` l.48-49, `aclnn_max_unpool3d.cpp`
/// l.45-46). On the device the unpooling runs only on indices known to repeat no position in a
/// plane ([`Values::check_distinct`]): the device's scatter keeps one of equal indices, not
/// defined which.
impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxUnpool<'a, T, I, N, Npu>>
    for AscendStream<'_>
where
    Axes<N>: SpatialAxes,
{
    type Prepared = AscendPrepared<IndexedBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxUnpool<'a, T, I, N, Npu>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let args = [
            Arg::input("input", &op.input),
            Arg::input("indices", &op.indices),
            Arg::output("output", &op.output),
        ];
        self.plan_indexed((Kind::Unpool, g), (T::DTYPE, op.output_size), args, op.indices.data().values())
    }

    fn launch(
        &self,
        _op: MaxUnpool<'a, T, I, N, Npu>,
        _g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed(&prepared, memory)
    }
}

/// The 2-D unpooling's backward, `aclnnMaxUnpool2dBackward`: INT32 or INT64 indices, known not to
/// repeat (as for the unpooling).
impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxUnpoolBackward<'a, T, I, 2, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<IndexedBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxUnpoolBackward<'a, T, I, 2, Npu>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        let full = full_size::<2>(op.grad_output.user_shape());
        self.plan_indexed((Kind::UnpoolBackward, g), (T::DTYPE, full), args, op.indices.data().values())
    }

    fn launch(
        &self,
        _op: MaxUnpoolBackward<'a, T, I, 2, Npu>,
        _g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed(&prepared, memory)
    }
}

/// The 3-D unpooling's backward, `aclnnMaxUnpool3dBackward`: INT64 indices only (as the 3-D
/// double backward), known not to repeat.
impl<'a, T: PoolFloat> Launch<MaxUnpoolBackward<'a, T, i64, 3, Npu>> for AscendStream<'_> {
    type Prepared = AscendPrepared<IndexedBuffers<()>>;

    fn prepare(
        &self,
        op: &MaxUnpoolBackward<'a, T, i64, 3, Npu>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let args = [
            Arg::input("grad_output", &op.grad_output),
            Arg::input("indices", &op.indices),
            Arg::output("grad_input", &op.grad_input),
        ];
        let full = full_size::<3>(op.grad_output.user_shape());
        self.plan_indexed((Kind::UnpoolBackward, g), (T::DTYPE, full), args, op.indices.data().values())
    }

    fn launch(
        &self,
        _op: MaxUnpoolBackward<'a, T, i64, 3, Npu>,
        _g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.queue_indexed(&prepared, memory)
    }
}
