//! Device-resident tensors on the Ascend backend: the six operators on tensors in the NPU's memory,
//! queued on poolgrad's own stream or on a caller's, with the double counting every copy and
//! every synchronisation and running each stream's tasks in the order they were queued.
#![cfg(feature = "ascend")]

mod ascend;

use ascend::Double;
use ndarray::{Array4, Array5, ArrayD, Axis};
use poolgrad::device::ascend::{Ascend, AscendStream, Npu, NpuTensor};
use poolgrad::op::{
    AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward,
    MaxPool2dWithMask, MaxPool2dWithMaskBackward,
};
use poolgrad::{
    Bitmask, Error, I32Argmax, Mask, MaskLayout, MaskMut, MaskRef, MaxPool2dParams, MaxPool3dParams, Plan,
    TensorMut, TensorRef, Workspace,
};

const SHAPE: [usize; 4] = [2, 3, 7, 6];

/// An input with every value distinct, so that every arg-max is unambiguous.
fn input() -> Array4<f32> {
    Array4::from_shape_fn(SHAPE, |(n, c, h, w)| (((n * 3 + c) * 42 + h * 6 + w) * 37 % 251) as f32 - 125.0)
}

fn ramp(shape: [usize; 4]) -> Array4<f32> {
    Array4::from_shape_fn(shape, |(n, c, h, w)| 1.0 + (((n * 7 + c) * 13 + h * 5 + w) % 17) as f32 / 4.0)
}

fn host<T: Clone>(a: &ArrayD<T>) -> Array4<T> {
    a.clone().into_dimensionality().unwrap()
}

/// Copies and synchronisations the double has seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Traffic {
    to_device: u64,
    to_host: u64,
    synchronisations: u64,
    blocking_memsets: u64,
}

impl Traffic {
    fn of(session: &ascend::Session) -> Self {
        Traffic {
            to_device: session.calls("aclrtMemcpy:HostToDevice"),
            to_host: session.calls("aclrtMemcpy:DeviceToHost"),
            synchronisations: session.calls("aclrtSynchronizeStream"),
            blocking_memsets: session.calls("aclrtMemset"),
        }
    }
}

/// The device tensors of the six operators, on one device.
struct Tensors {
    x: NpuTensor<f32>,
    adaptive_out: NpuTensor<f32>,
    adaptive_idx: NpuTensor<i64>,
    adaptive_grad: NpuTensor<f32>,
    adaptive_gx: NpuTensor<f32>,
    pool_out: NpuTensor<f32>,
    pool_idx: NpuTensor<i32>,
    pool_grad: NpuTensor<f32>,
    pool_gx: NpuTensor<f32>,
    mask_out: NpuTensor<f32>,
    mask: NpuTensor<i8>,
    mask_gx: NpuTensor<f32>,
    bits_out: NpuTensor<f32>,
    bits: NpuTensor<i8>,
    bits_grad: NpuTensor<f32>,
    bits_gx: NpuTensor<f32>,
}

const ADAPTIVE: [usize; 2] = [3, 4];

fn pool_params() -> MaxPool2dParams {
    MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]).with_ceil_mode(true)
}

/// A 1x1 kernel: the A2 mask operator writes it as a `Bitmask`.
fn bits_params() -> MaxPool2dParams {
    MaxPool2dParams::new([1, 1]).with_stride([2, 1])
}

fn pooled(params: &MaxPool2dParams) -> [usize; 4] {
    let [ho, wo] = params.output_size([SHAPE[2], SHAPE[3]]).unwrap();
    [SHAPE[0], SHAPE[1], ho, wo]
}

fn mask_shape(params: &MaxPool2dParams) -> Vec<usize> {
    let [_, _, ho, wo] = pooled(params);
    poolgrad::geometry::mask_shape(SHAPE[0], SHAPE[1], params.kernel(), [ho, wo]).unwrap().to_vec()
}

impl Tensors {
    /// Uploads the inputs and allocates the outputs.
    fn new(npu: &Ascend) -> Tensors {
        let zeros = |shape: &[usize]| NpuTensor::<f32>::zeros(npu, shape).unwrap();
        let a = [SHAPE[0], SHAPE[1], ADAPTIVE[0], ADAPTIVE[1]];
        let (p, b) = (pooled(&pool_params()), pooled(&bits_params()));
        Tensors {
            x: NpuTensor::from_array(npu, &input()).unwrap(),
            adaptive_out: zeros(&a),
            adaptive_idx: NpuTensor::zeros(npu, &a).unwrap(),
            adaptive_grad: NpuTensor::from_array(npu, &ramp(a)).unwrap(),
            adaptive_gx: zeros(&SHAPE),
            pool_out: zeros(&p),
            pool_idx: NpuTensor::zeros(npu, &p).unwrap(),
            pool_grad: NpuTensor::from_array(npu, &ramp(p)).unwrap(),
            pool_gx: zeros(&SHAPE),
            mask_out: zeros(&p),
            // Not zeros: the forward clears the mask on the stream before the operator writes it.
            mask: NpuTensor::from_array(npu, &ndarray::ArrayD::from_elem(mask_shape(&pool_params()), 0x55i8))
                .unwrap(),
            mask_gx: zeros(&SHAPE),
            bits_out: zeros(&b),
            bits: NpuTensor::zeros(npu, &mask_shape(&bits_params())).unwrap(),
            bits_grad: NpuTensor::from_array(npu, &ramp(b)).unwrap(),
            bits_gx: zeros(&SHAPE),
        }
    }

    /// Queues the forward and then the backward of each operator on `stream`, each backward
    /// reading what its forward writes (so a wrong order gives a wrong gradient).
    fn queue_all<'s>(&mut self, stream: &AscendStream<'s>, ws: &mut Workspace<AscendStream<'s>>) {
        let t = self;
        Plan::new(
            stream,
            AdaptiveMaxPool2d {
                input: (&t.x).into(),
                output_size: ADAPTIVE,
                output: (&mut t.adaptive_out).into(),
                indices: (&mut t.adaptive_idx).into(),
            },
        )
        .unwrap()
        .run_in(ws)
        .unwrap();
        Plan::new(
            stream,
            AdaptiveMaxPool2dBackward {
                grad_output: (&t.adaptive_grad).into(),
                self_: (&t.x).into(),
                indices: (&t.adaptive_idx).into(),
                grad_input: (&mut t.adaptive_gx).into(),
            },
        )
        .unwrap()
        .run_in(ws)
        .unwrap();
        Plan::new(
            stream,
            MaxPool2dWithIndices {
                input: (&t.x).into(),
                params: pool_params(),
                output: (&mut t.pool_out).into(),
                indices: (&mut t.pool_idx).into(),
            },
        )
        .unwrap()
        .run_in(ws)
        .unwrap();
        Plan::new(
            stream,
            MaxPool2dWithIndicesBackward {
                grad_output: (&t.pool_grad).into(),
                self_: (&t.x).into(),
                indices: (&t.pool_idx).into(),
                params: pool_params(),
                grad_input: (&mut t.pool_gx).into(),
            },
        )
        .unwrap()
        .run_in(ws)
        .unwrap();
        for (params, out, mask, grad, gx, i32_layout) in [
            (pool_params(), &mut t.mask_out, &mut t.mask, &t.pool_grad, &mut t.mask_gx, true),
            (bits_params(), &mut t.bits_out, &mut t.bits, &t.bits_grad, &mut t.bits_gx, false),
        ] {
            if i32_layout {
                mask_pair(stream, ws, params, out, mask, grad, gx, I32Argmax, &t.x);
            } else {
                mask_pair(stream, ws, params, out, mask, grad, gx, Bitmask, &t.x);
            }
        }
    }

    /// Downloads every result and checks it against the CPU backend on the same host data.
    fn check_against_cpu(&self) {
        let x = input();
        let adaptive = poolgrad::adaptive_max_pool2d(&x, ADAPTIVE).unwrap();
        assert_eq!(host(&self.adaptive_out.to_array().unwrap()), adaptive.output, "adaptive forward");
        assert_eq!(host(&self.adaptive_idx.to_array().unwrap()), adaptive.indices, "adaptive indices");
        let a = [SHAPE[0], SHAPE[1], ADAPTIVE[0], ADAPTIVE[1]];
        let gx = poolgrad::adaptive_max_pool2d_backward(&ramp(a), &x, &adaptive.indices).unwrap();
        assert_eq!(host(&self.adaptive_gx.to_array().unwrap()), gx, "adaptive backward");

        let p = pool_params();
        let pool = poolgrad::max_pool2d_with_indices_i32(&x, &p).unwrap();
        assert_eq!(host(&self.pool_out.to_array().unwrap()), pool.output, "with-indices forward");
        assert_eq!(host(&self.pool_idx.to_array().unwrap()), pool.indices, "with-indices indices");
        let grad = ramp(pooled(&p));
        let gx = poolgrad::max_pool2d_with_indices_backward(&grad, &x, &pool.indices, &p).unwrap();
        assert_eq!(host(&self.pool_gx.to_array().unwrap()), gx, "with-indices backward");

        let mask = poolgrad::max_pool2d_with_mask(&x, &p, I32Argmax).unwrap();
        assert_eq!(host(&self.mask_out.to_array().unwrap()), mask.output, "mask forward");
        let bytes = Mask::<I32Argmax, _>::from_raw(host(&self.mask.to_array().unwrap()), &p, &SHAPE).unwrap();
        assert_eq!(
            bytes.to_indices::<i64>().unwrap(),
            mask.mask.to_indices::<i64>().unwrap(),
            "mask arg-max"
        );
        assert_eq!(bytes.as_array(), mask.mask.as_array(), "every byte, those the operator leaves too");
        let gx = poolgrad::max_pool2d_with_mask_backward(&grad, &x, &mask.mask).unwrap();
        assert_eq!(host(&self.mask_gx.to_array().unwrap()), gx, "mask backward");

        let b = bits_params();
        let bits = poolgrad::max_pool2d_with_mask(&x, &b, Bitmask).unwrap();
        assert_eq!(host(&self.bits_out.to_array().unwrap()), bits.output, "bit-mask forward");
        let bytes = Mask::<Bitmask, _>::from_raw(host(&self.bits.to_array().unwrap()), &b, &SHAPE).unwrap();
        assert_eq!(
            bytes.to_indices::<i64>().unwrap(),
            bits.mask.to_indices::<i64>().unwrap(),
            "bit-mask arg-max"
        );
        let gx = poolgrad::max_pool2d_with_mask_backward(&ramp(pooled(&b)), &x, &bits.mask).unwrap();
        assert_eq!(host(&self.bits_gx.to_array().unwrap()), gx, "bit-mask backward");
    }
}

#[allow(clippy::too_many_arguments)]
fn mask_pair<'s, L: MaskLayout>(
    stream: &AscendStream<'s>,
    ws: &mut Workspace<AscendStream<'s>>,
    params: MaxPool2dParams,
    out: &mut NpuTensor<f32>,
    mask: &mut NpuTensor<i8>,
    grad: &NpuTensor<f32>,
    gx: &mut NpuTensor<f32>,
    layout: L,
    x: &NpuTensor<f32>,
) {
    let op = MaxPool2dWithMask {
        input: x.into(),
        params,
        output: out.into(),
        mask: MaskMut::new(mask.into(), layout),
    };
    Plan::new(stream, op).unwrap().run_in(ws).unwrap();
    let op = MaxPool2dWithMaskBackward {
        grad_output: grad.into(),
        self_: x.into(),
        mask: MaskRef::new((&*mask).into(), layout),
        params,
        grad_input: gx.into(),
    };
    Plan::new(stream, op).unwrap().run_in(ws).unwrap();
}

/// A caller's thread (as torch_npu keeps one): bound to device 0, its primary context, with a
/// stream of its own.
struct Caller<'s> {
    foreign: ascend::Foreign<'s>,
    raw: usize,
}

impl<'s> Caller<'s> {
    fn new(session: &'s ascend::Session) -> Self {
        let foreign = session.foreign();
        assert_eq!(foreign.set_device(0), 0);
        let raw = foreign.create_stream();
        Caller { foreign, raw }
    }

    /// The caller's stream as poolgrad borrows it. Every test below synchronises it
    /// ([`Caller::synchronize`]) before it reads a result, frees a buffer or drops the handle or a
    /// workspace made from it, as `AscendStream::from_raw`'s contract asks.
    #[allow(unsafe_code)]
    fn stream<'d>(&self, npu: &'d Ascend) -> AscendStream<'d> {
        // SAFETY: `raw` is a live stream of device 0's primary context, current on this thread,
        // destroyed only by `close`; the synchronisation is the calling test's (above).
        unsafe { AscendStream::from_raw(npu, self.raw as *mut std::ffi::c_void) }
    }

    fn synchronize(&self) {
        assert_eq!(self.foreign.synchronize(self.raw), 0);
    }

    fn close(self) {
        assert_eq!(self.foreign.destroy_stream(self.raw), 0);
        assert_eq!(self.foreign.reset_device(0), 0);
    }
}

#[test]
fn all_six_operators_on_poolgrads_stream_copy_nothing_and_wait_for_nothing() {
    let session = Double::session();
    let npu = session.open();
    let mut tensors = Tensors::new(&npu);
    let stream = npu.stream();
    let mut ws = Workspace::new(&stream, 0).unwrap();
    let before = Traffic::of(&session);
    tensors.queue_all(&stream, &mut ws);
    assert_eq!(Traffic::of(&session), before, "between the uploads and the downloads");
    assert_eq!(session.calls("aclrtMemsetAsync"), 2, "each mask zeroed on the stream");
    assert_eq!(session.calls("aclnnMaxPool2dWithMaskBackward"), 2);
    // The downloads wait for the stream once, then copy.
    tensors.check_against_cpu();
    let after = Traffic::of(&session);
    assert_eq!(after.synchronisations - before.synchronisations, 1, "one wait, before the first download");
    assert_eq!(after.to_host - before.to_host, 12, "one copy per tensor downloaded");
    assert_eq!(after.to_device, before.to_device);
    drop(tensors);
    drop(ws);
    drop(stream);
    drop(npu);
    session.assert_clean();
}

#[test]
fn dropping_tensors_with_work_queued_waits_for_poolgrads_stream_first() {
    let session = Double::session();
    let npu = session.open();
    let mut tensors = Tensors::new(&npu);
    let stream = npu.stream();
    let mut ws = Workspace::new(&stream, 0).unwrap();
    tensors.queue_all(&stream, &mut ws);
    let waits = session.calls("aclrtSynchronizeStream");
    // Freeing memory a queued kernel uses would be a violation: the first free waits.
    drop(tensors);
    assert_eq!(session.calls("aclrtSynchronizeStream"), waits + 1);
    drop(ws);
    drop(stream);
    drop(npu);
    session.assert_clean();
}

#[test]
fn an_explicit_synchronize_makes_the_downloads_wait_for_nothing() {
    let session = Double::session();
    let npu = session.open();
    let mut tensors = Tensors::new(&npu);
    let stream = npu.stream();
    let mut ws = Workspace::new(&stream, 0).unwrap();
    tensors.queue_all(&stream, &mut ws);
    stream.synchronize().unwrap();
    let waits = session.calls("aclrtSynchronizeStream");
    tensors.check_against_cpu();
    assert_eq!(session.calls("aclrtSynchronizeStream"), waits, "nothing left to wait for");
    drop(tensors);
    drop(ws);
    drop(stream);
    drop(npu);
    session.assert_clean();
}

#[test]
fn all_six_operators_on_a_callers_stream_with_no_synchronisation_of_poolgrads() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let mut tensors = Tensors::new(&npu);
    let before = Traffic::of(&session);
    {
        let stream = caller.stream(&npu);
        let mut ws = Workspace::new(&stream, 0).unwrap();
        tensors.queue_all(&stream, &mut ws);
        assert_eq!(Traffic::of(&session), before, "no copy and no wait inside poolgrad");
        // The caller's synchronisation, then the workspace and the handle may go.
        caller.synchronize();
    }
    let waits = session.calls("aclrtSynchronizeStream");
    tensors.check_against_cpu();
    assert_eq!(session.calls("aclrtSynchronizeStream"), waits, "poolgrad's stream had nothing to wait for");
    drop((tensors, npu));
    caller.close();
    session.assert_clean();
}

/// A library with its own context, stream and buffers (as a custom operator library keeps them)
/// runs poolgrad's backward on its own memory, on its own stream, and reads the gradient after its
/// own synchronisation.
#[test]
#[allow(unsafe_code)] // the library's own memory and stream: `from_device_ptr`, `from_raw`
fn a_foreign_library_runs_a_backward_on_its_buffers_and_its_stream() {
    let session = Double::session();
    let foreign = session.foreign();
    let npu = session.open();
    let ctx = foreign.create_context(0); // current on this thread from here on
    let raw = foreign.create_stream();
    // grad_output [1, 2, 1, 2], indices into a [1, 2, 2, 3] input, and the gradient buffer.
    let grad = [1.5f32, -2.0, 4.0, 0.25];
    let indices = [5i64, 0, 2, 2]; // channel 1's two outputs share position 2: they sum
    let (go, idx, gx, x) = (foreign.malloc(16), foreign.malloc(32), foreign.malloc(48), foreign.malloc(48));
    foreign.upload(go, bytemuck::cast_slice(&grad));
    foreign.upload(idx, bytemuck::cast_slice(&indices));
    let traffic = Traffic::of(&session);
    {
        let p = |a: usize| a as *mut std::ffi::c_void;
        // SAFETY: each address is a live allocation of this device of the size its shape needs,
        // aligned, written only by the upload above; `raw` is a live stream of the context current
        // on this thread, synchronised below before anything is read or freed; the indices lie in
        // the 2 x 3 plane.
        let (stream, op) = unsafe {
            let op = AdaptiveMaxPool2dBackward::<f32, i64, Npu> {
                grad_output: TensorRef::from_device_ptr(&npu, p(go), &[1, 2, 1, 2], &[4, 2, 2, 1]).unwrap(),
                self_: TensorRef::from_device_ptr(&npu, p(x), &[1, 2, 2, 3], &[12, 6, 3, 1]).unwrap(),
                indices: TensorRef::from_device_ptr(&npu, p(idx), &[1, 2, 1, 2], &[4, 2, 2, 1]).unwrap(),
                grad_input: TensorMut::from_device_ptr(&npu, p(gx), &[1, 2, 2, 3], &[12, 6, 3, 1]).unwrap(),
            };
            (AscendStream::from_raw(&npu, p(raw)), op)
        };
        let mut ws = Workspace::new(&stream, 0).unwrap();
        Plan::new(&stream, op).unwrap().run_in(&mut ws).unwrap();
        assert_eq!(Traffic::of(&session), traffic, "poolgrad copied nothing and waited for nothing");
        assert_eq!(foreign.current_context(), Ok(ctx), "the library's thread keeps its context");
        assert_eq!(foreign.synchronize(raw), 0);
    }
    let mut bytes = [0u8; 48];
    foreign.download(gx, &mut bytes);
    let got: &[f32] = bytemuck::cast_slice(&bytes);
    // Worked by hand: channel 0 puts 1.5 at 5 and -2.0 at 0; channel 1 puts 4.0 + 0.25 at 2.
    assert_eq!(got, [-2.0, 0.0, 0.0, 0.0, 0.0, 1.5, 0.0, 0.0, 4.25, 0.0, 0.0, 0.0]);
    for a in [go, idx, gx, x] {
        assert_eq!(foreign.free(a), 0);
    }
    assert_eq!(foreign.destroy_stream(raw), 0);
    drop(npu);
    assert_eq!(foreign.destroy_context(ctx), 0);
    session.assert_clean();
}

/// Calls that touch the device or queue work: memory, copies, waits and both phases of every
/// operator.
fn device_calls(session: &ascend::Session) -> u64 {
    let runtime = [
        "aclrtMalloc",
        "aclrtFree",
        "aclrtMemcpy",
        "aclrtMemset",
        "aclrtMemsetAsync",
        "aclrtSynchronizeStream",
    ];
    runtime.iter().map(|f| session.calls(f)).sum::<u64>() + operator_calls(session)
}

/// Calls of any operator's phase 1 or 2.
fn operator_calls(session: &ascend::Session) -> u64 {
    let ops = [
        "aclnnAdaptiveMaxPool2d",
        "aclnnAdaptiveMaxPool2dBackward",
        "aclnnMaxPool2dWithIndices",
        "aclnnMaxPool2dWithIndicesBackward",
        "aclnnMaxPool2dWithMask",
        "aclnnMaxPool2dWithMaskBackward",
        "aclnnMaxPool3dWithArgmax",
        "aclnnMaxPool3dWithArgmaxBackward",
        "aclnnAdaptiveMaxPool3d",
        "aclnnAdaptiveMaxPool3dBackward",
        "aclnnMaxUnpool2d",
        "aclnnMaxUnpool3d",
        "aclnnMaxUnpool2dBackward",
        "aclnnMaxUnpool3dBackward",
    ];
    let phase1 = ops.map(|op| format!("{op}GetWorkspaceSize"));
    ops.iter().map(|f| session.calls(f)).sum::<u64>() + phase1.iter().map(|f| session.calls(f)).sum::<u64>()
}

#[test]
fn tensors_and_workspaces_of_another_device_are_refused_before_any_device_call() {
    let session = Double::session();
    session.set_devices(2, 1 << 30);
    let npu0 = session.open();
    let npu1 = Ascend::with_library_dir(session.root(), 1).unwrap();
    let g = NpuTensor::from_array(&npu0, &Array4::<f32>::ones((1, 1, 1, 1))).unwrap();
    let x = NpuTensor::<f32>::zeros(&npu0, &[1, 1, 2, 2]).unwrap();
    let idx = NpuTensor::from_array(&npu0, &Array4::<i64>::zeros((1, 1, 1, 1))).unwrap();
    let mut elsewhere = NpuTensor::<f32>::zeros(&npu1, &[1, 1, 2, 2]).unwrap();
    let mut here = NpuTensor::<f32>::zeros(&npu0, &[1, 1, 2, 2]).unwrap();
    let stream = npu0.stream();
    let calls = session.calls("*");
    let op = AdaptiveMaxPool2dBackward {
        grad_output: (&g).into(),
        self_: (&x).into(),
        indices: (&idx).into(),
        grad_input: (&mut elsewhere).into(),
    };
    let e = Plan::new(&stream, op).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "grad_input", expected, got, .. }
            if expected.contains("device 0") && got.contains("device 1")),
        "{e}"
    );
    assert_eq!(session.calls("*"), calls, "no CANN call at all");
    // An input of another device, likewise.
    let x1 = NpuTensor::<f32>::zeros(&npu1, &[1, 1, 2, 2]).unwrap();
    let calls = session.calls("*");
    let op = AdaptiveMaxPool2dBackward {
        grad_output: (&g).into(),
        self_: (&x1).into(),
        indices: (&idx).into(),
        grad_input: (&mut here).into(),
    };
    let e = Plan::new(&stream, op).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "self_", got, .. } if got.contains("device 1")),
        "{e}"
    );
    assert_eq!(session.calls("*"), calls, "no CANN call at all");
    // The tensors and their views say where they are.
    assert_eq!((here.device_id(), elsewhere.device_id()), (0, 1));
    assert_eq!(format!("{x1:?}"), "NpuTensor { device_id: 1, dims: [1, 1, 2, 2], dtype: F32 }");
    assert_eq!(
        format!("{:?}", x1.view()),
        "TensorRef { view: DeviceRef { device_id: 1, shape: [1, 1, 2, 2], dtype: F32, .. }, dims: [1, 1, 2, 2] }"
    );
    assert!(
        format!("{:?}", here.view_mut())
            .contains("DeviceMut { device_id: 0, shape: [1, 1, 2, 2], dtype: F32, .. }")
    );
    drop(x1);

    let other = npu1.stream();
    let mut ws = Workspace::new(&other, 64).unwrap();
    let op = AdaptiveMaxPool2dBackward {
        grad_output: (&g).into(),
        self_: (&x).into(),
        indices: (&idx).into(),
        grad_input: (&mut here).into(),
    };
    let calls = device_calls(&session);
    let e = Plan::new(&stream, op).unwrap().run_in(&mut ws);
    assert!(matches!(&e, Err(Error::InvalidParameter { arg: "workspace", .. })), "{e:?}");
    assert_eq!(device_calls(&session), calls, "no device call (only `aclTensor` descriptors were made)");
    drop((g, x, idx, elsewhere, here));
    drop(ws);
    drop(other);
    drop(stream);
    drop(npu1);
    drop(npu0);
    session.assert_clean();
}

/// A workspace that grows while an operator that used it is still queued on a caller's stream
/// keeps the old buffer, and a plan run with a workspace of its own (`Plan::run`) leaves it to
/// the stream handle: nothing is freed before the caller's synchronisation.
#[test]
fn workspaces_on_a_callers_stream_are_not_freed_under_queued_work() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let small = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 1, 2, 2))).unwrap();
    let large = NpuTensor::from_array(&npu, &input()).unwrap();
    let (mut small_out, mut small_idx) = (
        NpuTensor::<f32>::zeros(&npu, &[1, 1, 1, 1]).unwrap(),
        NpuTensor::<i32>::zeros(&npu, &[1, 1, 1, 1]).unwrap(),
    );
    let a = [SHAPE[0], SHAPE[1], ADAPTIVE[0], ADAPTIVE[1]];
    let (mut out, mut idx) =
        (NpuTensor::<f32>::zeros(&npu, &a).unwrap(), NpuTensor::<i64>::zeros(&npu, &a).unwrap());
    let frees = session.calls("aclrtFree");
    {
        let stream = caller.stream(&npu);
        let mut ws = Workspace::new(&stream, 0).unwrap();
        let op = MaxPool2dWithIndices {
            input: (&small).into(),
            params: MaxPool2dParams::new([2, 2]),
            output: (&mut small_out).into(),
            indices: (&mut small_idx).into(),
        };
        Plan::new(&stream, op).unwrap().run_in(&mut ws).unwrap();
        let grown_from = ws.len();
        let op = AdaptiveMaxPool2d {
            input: (&large).into(),
            output_size: ADAPTIVE,
            output: (&mut out).into(),
            indices: (&mut idx).into(),
        };
        Plan::new(&stream, op).unwrap().run_in(&mut ws).unwrap();
        assert!(ws.len() > grown_from, "the workspace grew ({grown_from} -> {} bytes)", ws.len());
        let op = MaxPool2dWithIndices {
            input: (&small).into(),
            params: MaxPool2dParams::new([2, 2]),
            output: (&mut small_out).into(),
            indices: (&mut small_idx).into(),
        };
        Plan::new(&stream, op).unwrap().run().unwrap(); // a workspace of its own, dropped at once
        drop(ws);
        assert_eq!(session.calls("aclrtFree"), frees, "nothing freed before the caller's synchronisation");
        caller.synchronize();
    }
    assert_eq!(session.calls("aclrtFree"), frees + 3, "the three workspace buffers, with the stream handle");
    assert_eq!(host(&small_out.to_array().unwrap())[[0, 0, 0, 0]], 1.0);
    drop((small, large, small_out, small_idx, out, idx));
    drop(npu);
    caller.close();
    session.assert_clean();
}

/// Index values on the device are checked against the backward's plane from what poolgrad saw of
/// them, before any device call: read on upload, known from the forward that wrote them, unknown
/// for a bit-mask's words.
#[test]
fn device_indices_outside_the_plane_are_refused_before_any_device_call() {
    let session = Double::session();
    let npu = session.open();
    refusals(&session, &npu);
    drop(npu);
    session.assert_clean();
}

fn refusals(session: &ascend::Session, npu: &Ascend) {
    let stream = npu.stream();
    let x = NpuTensor::<f32>::zeros(npu, &[1, 2, 3]).unwrap(); // a 2 x 3 plane
    let g = NpuTensor::from_array(npu, &ndarray::Array3::<f32>::ones((1, 1, 2))).unwrap();
    let mut gx = NpuTensor::<f32>::zeros(npu, &[1, 2, 3]).unwrap();
    let backward = |idx: &NpuTensor<i64>, gx: &mut NpuTensor<f32>| {
        let op = AdaptiveMaxPool2dBackward {
            grad_output: (&g).into(),
            self_: (&x).into(),
            indices: idx.into(),
            grad_input: gx.into(),
        };
        Plan::new(&stream, op).map(drop)
    };
    let calls = device_calls(session);
    // Uploaded: the first value outside [0, 6) is named, where it is.
    let idx = NpuTensor::from_array(npu, &ndarray::array![[[5i64, 6]]]).unwrap();
    let e = backward(&idx, &mut gx).unwrap_err();
    assert!(
        matches!(&e, Error::IndexOutOfRange { arg: "indices", position, value: 6, plane: 6, .. } if position == &[0, 0, 1]),
        "{e}"
    );
    let idx = NpuTensor::from_array(npu, &ndarray::array![[[-1i64, 9]]]).unwrap();
    let e = backward(&idx, &mut gx).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { value: -1, .. }), "{e}");
    // No negative value: the first of the largest is named.
    let idx = NpuTensor::from_array(npu, &ndarray::array![[[9i64, 9]]]).unwrap();
    let e = backward(&idx, &mut gx).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { position, value: 9, .. } if position == &[0, 0, 0]), "{e}");
    let calls = calls + 6; // the three uploads: a malloc and a copy each
    assert_eq!(device_calls(session), calls);
    // Written by a forward over a larger plane (3 x 3): not known to fit a 2 x 3 plane.
    let big = NpuTensor::<f32>::zeros(npu, &[1, 3, 3]).unwrap();
    let (mut out, mut idx) = (
        NpuTensor::<f32>::zeros(npu, &[1, 1, 2]).unwrap(),
        NpuTensor::<i64>::zeros(npu, &[1, 1, 2]).unwrap(),
    );
    let op = AdaptiveMaxPool2d {
        input: (&big).into(),
        output_size: [1, 2],
        output: (&mut out).into(),
        indices: (&mut idx).into(),
    };
    Plan::new(&stream, op).unwrap().run().unwrap();
    let e = backward(&idx, &mut gx).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "indices", got, .. } if got.contains("planes of 9 elements")),
        "{e}"
    );
    // Zeros, and indices a forward of the same plane wrote, pass.
    backward(&NpuTensor::zeros(npu, &[1, 1, 2]).unwrap(), &mut gx).unwrap();
    let op = AdaptiveMaxPool2d {
        input: (&x).into(),
        output_size: [1, 2],
        output: (&mut out).into(),
        indices: (&mut idx).into(),
    };
    Plan::new(&stream, op).unwrap().run().unwrap();
    backward(&idx, &mut gx).unwrap();

    // A bit-mask's words say nothing of I32Argmax values: its bytes are refused as one. (Only a
    // device that lets CANN decide the layout takes a Bitmask forward of a 1x2 kernel on A2.)
    let npu = Ascend::with_library_dir(session.root(), 0).unwrap().cann_decides();
    let stream = npu.stream();
    let params = MaxPool2dParams::new([1, 2]).with_stride([1, 2]);
    let input = NpuTensor::from_array(&npu, &input()).unwrap();
    let mut pooled_out = NpuTensor::<f32>::zeros(&npu, &pooled(&params)).unwrap();
    let mut mask = NpuTensor::<i8>::zeros(&npu, &mask_shape(&params)).unwrap();
    let op = MaxPool2dWithMask {
        input: (&input).into(),
        params,
        output: (&mut pooled_out).into(),
        mask: MaskMut::new((&mut mask).into(), Bitmask),
    };
    Plan::new(&stream, op).unwrap().run().unwrap();
    let grad = NpuTensor::from_array(&npu, &ramp(pooled(&params))).unwrap();
    let mut gx = NpuTensor::<f32>::zeros(&npu, &SHAPE).unwrap();
    let op = MaxPool2dWithMaskBackward {
        grad_output: (&grad).into(),
        self_: (&input).into(),
        mask: MaskRef::new((&mask).into(), I32Argmax),
        params,
        grad_input: (&mut gx).into(),
    };
    let e = Plan::new(&stream, op).map(drop).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "mask", got, .. } if got.contains("has not seen")),
        "{e}"
    );
}

/// The device forms (methods of the stream) allocate their outputs on the device and reuse the
/// stream's workspace: forward and backward of all six operators with no copy and no wait.
#[test]
fn the_streams_methods_run_all_six_operators_on_device_tensors() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let x = NpuTensor::from_array(&npu, &input()).unwrap();
    let a = [SHAPE[0], SHAPE[1], ADAPTIVE[0], ADAPTIVE[1]];
    let (p, b) = (pool_params(), bits_params());
    let grads =
        [ramp(a), ramp(pooled(&p)), ramp(pooled(&b))].map(|g| NpuTensor::from_array(&npu, &g).unwrap());
    let before = Traffic::of(&session);
    let mallocs = session.calls("aclrtMalloc");
    let results = {
        let stream = caller.stream(&npu);
        let adaptive = stream.adaptive_max_pool2d(&x, ADAPTIVE).unwrap();
        let adaptive_gx = stream.adaptive_max_pool2d_backward(&grads[0], &x, &adaptive.indices).unwrap();
        let pool = stream.max_pool2d_with_indices(&x, &p).unwrap();
        let pool_gx = stream.max_pool2d_with_indices_backward(&grads[1], &x, &pool.indices, &p).unwrap();
        let mask = stream.max_pool2d_with_mask(&x, &p, I32Argmax).unwrap();
        let mask_gx = stream.max_pool2d_with_mask_backward(&grads[1], &x, &mask).unwrap();
        let bits = stream.max_pool2d_with_mask(&x, &b, Bitmask).unwrap();
        let bits_gx = stream.max_pool2d_with_mask_backward(&grads[2], &x, &bits).unwrap();
        assert_eq!(Traffic::of(&session), before, "no copy and no wait inside poolgrad");
        // 12 outputs, and the workspace once (1024 bytes for the first adaptive forward, enough
        // for every later operator).
        assert_eq!(session.calls("aclrtMalloc") - mallocs, 13);
        caller.synchronize();
        (adaptive, adaptive_gx, pool, pool_gx, mask, mask_gx, bits, bits_gx)
    };
    let (adaptive, adaptive_gx, pool, pool_gx, mask, mask_gx, bits, bits_gx) = results;
    let h = input();
    let cpu = poolgrad::adaptive_max_pool2d(&h, ADAPTIVE).unwrap();
    assert_eq!(host(&adaptive.indices.to_array().unwrap()), cpu.indices);
    let gx = poolgrad::adaptive_max_pool2d_backward(&ramp(a), &h, &cpu.indices).unwrap();
    assert_eq!(host(&adaptive_gx.to_array().unwrap()), gx);
    let cpu = poolgrad::max_pool2d_with_indices_i32(&h, &p).unwrap();
    assert_eq!(host(&pool.output.to_array().unwrap()), cpu.output);
    let gx = poolgrad::max_pool2d_with_indices_backward(&ramp(pooled(&p)), &h, &cpu.indices, &p).unwrap();
    assert_eq!(host(&pool_gx.to_array().unwrap()), gx);
    assert_eq!(host(&mask_gx.to_array().unwrap()), gx, "the mask backward scatters as the indices one");
    assert_eq!(host(&mask.output.to_array().unwrap()), cpu.output);
    let cpu = poolgrad::max_pool2d_with_mask(&h, &b, Bitmask).unwrap();
    assert_eq!(host(&bits.output.to_array().unwrap()), cpu.output);
    let gx = poolgrad::max_pool2d_with_mask_backward(&ramp(pooled(&b)), &h, &cpu.mask).unwrap();
    assert_eq!(host(&bits_gx.to_array().unwrap()), gx);
    drop((adaptive, adaptive_gx, pool, pool_gx, mask, mask_gx, bits, bits_gx, x, grads));
    drop(npu);
    caller.close();
    session.assert_clean();
}

/// A workspace belongs to the stream it was made for: operators of two streams may run at once,
/// so one made for poolgrad's stream is refused on a caller's (and the other way round) before
/// any device call.
#[test]
fn a_workspace_of_another_stream_is_refused() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let g = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 1, 1, 1))).unwrap();
    let x = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 2]).unwrap();
    let idx = NpuTensor::from_array(&npu, &Array4::<i64>::zeros((1, 1, 1, 1))).unwrap();
    let mut gx = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 2]).unwrap();
    {
        let own = npu.stream();
        let theirs = caller.stream(&npu); // nothing is queued on it: every run below is refused
        for (stream, other, name) in [(&own, &theirs, "poolgrad's"), (&theirs, &own, "the caller's")] {
            let mut ws = Workspace::new(other, 4096).unwrap();
            let op = AdaptiveMaxPool2dBackward {
                grad_output: (&g).into(),
                self_: (&x).into(),
                indices: (&idx).into(),
                grad_input: (&mut gx).into(),
            };
            let calls = device_calls(&session);
            let e = Plan::new(stream, op).unwrap().run_in(&mut ws).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidParameter { arg: "workspace", expected, got, .. }
                    if got.contains("another stream") && expected.contains(&format!("stream: \"{name}\""))),
                "{e}"
            );
            assert_eq!(device_calls(&session), calls, "no device call");
        }
    }
    drop((g, x, idx, gx));
    drop(npu);
    caller.close();
    session.assert_clean();
}

/// The half types and f64 on device tensors: the descriptors carry each element type (and the
/// index type of the backward) as the host path stages them, and the SoC's dtype table holds.
#[test]
fn device_tensors_of_every_element_type_match_the_cpu() {
    /// The adaptive forward and backward of `T` on `npu`, each against the CPU; the backward's
    /// result, or its refusal.
    fn adaptive<T: poolgrad::PoolFloat, I: poolgrad::ArgmaxIndex>(npu: &Ascend) -> poolgrad::Result<()> {
        let x = input().mapv(|v| T::round_from_f64(v.into()));
        let g = ramp([SHAPE[0], SHAPE[1], 2, 3]).mapv(|v| T::round_from_f64(v.into()));
        let cpu = poolgrad::adaptive_max_pool2d(&x, [2, 3]).unwrap();
        let idx: Array4<I> = cpu.indices.mapv(|i| I::try_from(i).ok().unwrap());
        let want = poolgrad::adaptive_max_pool2d_backward(&g, &x, &idx).unwrap();
        let stream = npu.stream();
        let x_dev = NpuTensor::from_array(npu, &x).unwrap();
        let pooled = stream.adaptive_max_pool2d(&x_dev, [2, 3]).unwrap();
        let bits = |a: &[T]| a.iter().map(|v| v.to_f64_exact().to_bits()).collect::<Vec<_>>();
        let out = pooled.output.to_array().unwrap();
        assert_eq!(bits(out.as_slice().unwrap()), bits(cpu.output.as_slice().unwrap()));
        assert_eq!(host(&pooled.indices.to_array().unwrap()), cpu.indices);
        let (g_dev, idx_dev) =
            (NpuTensor::from_array(npu, &g).unwrap(), NpuTensor::from_array(npu, &idx).unwrap());
        let gx = stream.adaptive_max_pool2d_backward(&g_dev, &x_dev, &idx_dev)?;
        assert_eq!(bits(gx.to_array().unwrap().as_slice().unwrap()), bits(want.as_slice().unwrap()));
        Ok(())
    }
    let session = Double::session();
    let npu = session.open();
    adaptive::<half::f16, i64>(&npu).unwrap();
    adaptive::<half::bf16, i32>(&npu).unwrap();
    // A2 runs the adaptive forward in f64, not its backward.
    let e = adaptive::<f64, i64>(&npu).unwrap_err();
    assert!(matches!(e, Error::DeviceLimit { about: poolgrad::DeviceLimitKind::DType, .. }), "{e}");
    drop(npu);
    session.assert_clean();
}

/// Indices and `I32Argmax` masks that the with-indices and mask forwards write on the device are
/// bounded by the forward's plane; uploaded ones are read on the way, so both backwards refuse
/// values outside their plane before any device call, and run on values inside it.
#[test]
fn device_indices_and_masks_of_the_pooling_operators_are_checked_against_the_plane() {
    let session = Double::session();
    let npu = session.open();
    let stream = npu.stream();
    // A 2x2 kernel with stride 2 pools both a 3 x 3 and a 2 x 3 plane to 1 x 1.
    let p = MaxPool2dParams::new([2, 2]).with_stride([2, 2]);
    let big =
        NpuTensor::from_array(&npu, &Array4::from_shape_fn((1, 1, 3, 3), |(_, _, h, w)| (h * 3 + w) as f32))
            .unwrap();
    let small = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 3]).unwrap();
    let g = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 1, 1, 1))).unwrap();
    let mut gx = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 3]).unwrap();

    let pooled = stream.max_pool2d_with_indices(&big, &p).unwrap(); // written for a plane of 9
    let e = stream.max_pool2d_with_indices_backward(&g, &small, &pooled.indices, &p).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "indices", got, .. } if got.contains("planes of 9 elements")),
        "{e}"
    );
    let upload = |v: i32| NpuTensor::from_array(&npu, &Array4::from_elem((1, 1, 1, 1), v)).unwrap();
    let e = stream.max_pool2d_with_indices_backward(&g, &small, &upload(6), &p).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { value: 6, plane: 6, .. }), "{e}");
    let five = upload(5);
    let op = MaxPool2dWithIndicesBackward {
        grad_output: (&g).into(),
        self_: (&small).into(),
        indices: (&five).into(),
        params: p,
        grad_input: (&mut gx).into(),
    };
    Plan::new(&stream, op).unwrap().run().unwrap();
    assert_eq!(gx.to_array().unwrap().as_slice().unwrap(), [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);

    let masked = stream.max_pool2d_with_mask(&big, &p, I32Argmax).unwrap(); // for a plane of 9
    let op = MaxPool2dWithMaskBackward {
        grad_output: (&g).into(),
        self_: (&small).into(),
        mask: MaskRef::new((&masked.mask).into(), I32Argmax),
        params: p,
        grad_input: (&mut gx).into(),
    };
    let e = Plan::new(&stream, op).map(drop).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "mask", got, .. } if got.contains("planes of 9 elements")),
        "{e}"
    );
    // An I32Argmax mask made on the host and uploaded: its values are read as int32 words.
    let host_x = Array4::from_shape_fn((1, 1, 2, 3), |(_, _, h, w)| (h * 3 + w) as f32);
    let host_mask = poolgrad::max_pool2d_with_mask(&host_x, &p, I32Argmax).unwrap().mask;
    let uploaded = NpuTensor::from_array(&npu, host_mask.as_array()).unwrap();
    let op = MaxPool2dWithMaskBackward {
        grad_output: (&g).into(),
        self_: (&small).into(),
        mask: MaskRef::new((&uploaded).into(), I32Argmax),
        params: p,
        grad_input: (&mut gx).into(),
    };
    Plan::new(&stream, op).unwrap().run().unwrap();
    assert_eq!(
        gx.to_array().unwrap().as_slice().unwrap(),
        [0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        "the maximum at 4"
    );
    let mut bytes = host_mask.as_array().clone();
    bytes.as_slice_mut().unwrap()[..4].copy_from_slice(&bytemuck::cast::<i32, [i8; 4]>(7));
    let outside = NpuTensor::from_array(&npu, &bytes).unwrap();
    let op = MaxPool2dWithMaskBackward {
        grad_output: (&g).into(),
        self_: (&small).into(),
        mask: MaskRef::new((&outside).into(), I32Argmax),
        params: p,
        grad_input: (&mut gx).into(),
    };
    let e = Plan::new(&stream, op).map(drop).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { arg: "mask", value: 7, plane: 6, .. }), "{e}");
    drop((big, small, g, gx, pooled, masked, five, uploaded, outside));
    drop(stream);
    drop(npu);
    session.assert_clean();
}

/// A device tensor whose byte count passes `isize::MAX` is refused before any allocation.
#[test]
fn device_tensors_too_large_to_address_are_refused() {
    let session = Double::session();
    let npu = session.open();
    let calls = session.calls("*");
    let e = NpuTensor::<f32>::zeros(&npu, &[1, 1, 1 << 31, 1 << 30]).unwrap_err(); // 2^63 bytes
    assert!(matches!(&e, Error::Overflow { arg: "shape", .. }), "{e}");
    let e = NpuTensor::<f32>::zeros(&npu, &[1, 1 << 31, 1 << 31, 1 << 31]).unwrap_err();
    assert!(matches!(&e, Error::Overflow { arg: "shape", .. }), "{e}");
    let e = NpuTensor::<f32>::zeros(&npu, &[2, 2]).unwrap_err();
    assert!(matches!(&e, Error::Rank { got: 2, .. }), "{e}");
    assert_eq!(session.calls("*"), calls, "no CANN call");
    drop(npu);
    session.assert_clean();
}

/// The stream has its device's limits, and the with-indices operators keep the INT32 plane on the
/// 950 too (their device indices are INT32), before any device call. (The views below describe a
/// plane far larger than their memory; no call reads it, as the plans are refused.)
#[test]
#[allow(unsafe_code)] // views of a large plane: `from_device_ptr`
fn device_planes_past_int32_are_refused_on_the_stream() {
    for (soc, op) in [
        ("Ascend910B1", "adaptive_max_pool2d_backward"),
        ("Ascend950PR_9599", "max_pool2d_with_indices_backward"),
    ] {
        let session = Double::session();
        session.set_soc(soc);
        let npu = session.open();
        let stream = npu.stream();
        let memory = NpuTensor::<f32>::zeros(&npu, &[1, 1, 1, 1]).unwrap();
        let index = NpuTensor::<i32>::zeros(&npu, &[1, 1, 1, 1]).unwrap();
        let huge = [1, 1, 1 << 16, 1 << 15];
        let ptr = memory.device_ptr().cast_mut();
        // SAFETY: not met for the shape (one element of memory): the plans below are refused in
        // phase 1, before any call that would read or write it.
        let (x, mut gx) = unsafe {
            (
                TensorRef::<f32, Npu>::from_device_ptr(&npu, ptr, &huge, &[0, 0, 1 << 15, 1]).unwrap(),
                TensorMut::<f32, Npu>::from_device_ptr(&npu, ptr, &huge, &[0, 0, 1 << 15, 1]).unwrap(),
            )
        };
        let idx = NpuTensor::<i64>::zeros(&npu, &[1, 1, 1, 1]).unwrap();
        let calls = session.calls("*");
        let e = if op == "adaptive_max_pool2d_backward" {
            let op = AdaptiveMaxPool2dBackward {
                grad_output: (&memory).into(),
                self_: x,
                indices: (&idx).into(),
                grad_input: gx.reborrow(),
            };
            Plan::new(&stream, op).map(drop).unwrap_err()
        } else {
            let p = MaxPool2dParams::new([1 << 16, 1 << 15]);
            let op = MaxPool2dWithIndicesBackward {
                grad_output: (&memory).into(),
                self_: x,
                indices: (&index).into(),
                params: p,
                grad_input: gx.reborrow(),
            };
            Plan::new(&stream, op).map(drop).unwrap_err()
        };
        assert!(
            matches!(&e, Error::DeviceLimit { device: "ascend", about: poolgrad::DeviceLimitKind::PlaneSize, limit, .. } if limit.contains("2147483647")),
            "{soc}: {e}"
        );
        assert!(e.to_string().starts_with(op), "{e}");
        assert_eq!(session.calls("*"), calls, "no CANN call");
        drop((memory, index, idx, gx));
        drop(stream);
        drop(npu);
        session.assert_clean();
    }
}

/// Views of a caller's device memory check what they can: a null or misaligned address, the
/// stride count, and strides other than row-major contiguous (an axis of length 1 may have any).
#[test]
#[allow(unsafe_code)] // `from_device_ptr`, with arguments it refuses (no memory is touched)
fn views_of_a_callers_memory_refuse_what_they_can_check() {
    let session = Double::session();
    let npu = session.open();
    let t = NpuTensor::<f32>::zeros(&npu, &[2, 3, 4]).unwrap();
    assert_eq!(
        t.to_array().unwrap(),
        ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[2, 3, 4])),
        "fresh device memory is not zero"
    );
    let ptr = t.device_ptr();
    // SAFETY: `ptr` is 24 live f32 of device 0, not written meanwhile; the refused calls make
    // no view at all.
    unsafe {
        let view = TensorRef::<f32, Npu>::from_device_ptr(&npu, ptr, &[2, 3, 4], &[12, 4, 1]).unwrap();
        assert_eq!(view.dims(), [2, 3, 4]);
        // Axes of length 1 may have any stride.
        TensorRef::<f32, Npu>::from_device_ptr(&npu, ptr, &[1, 2, 1, 12], &[999, 12, 7, 1]).unwrap();
        let e = TensorRef::<f32, Npu>::from_device_ptr(&npu, std::ptr::null(), &[2, 3, 4], &[12, 4, 1])
            .unwrap_err();
        assert!(matches!(&e, Error::InvalidParameter { arg: "ptr", got, .. } if got.contains("null")), "{e}");
        // An empty view needs no memory.
        TensorRef::<f32, Npu>::from_device_ptr(&npu, std::ptr::null(), &[0, 3, 4], &[12, 4, 1]).unwrap();
        let odd = ptr.cast::<u8>().wrapping_add(2).cast::<std::ffi::c_void>().cast_mut();
        let e = TensorMut::<f32, Npu>::from_device_ptr(&npu, odd, &[2, 3, 4], &[12, 4, 1]).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParameter { arg: "ptr", expected, .. } if expected.contains("aligned to 4")),
            "{e}"
        );
        let e = TensorRef::<f32, Npu>::from_device_ptr(&npu, ptr, &[2, 3, 4], &[12, 4]).unwrap_err();
        assert!(matches!(&e, Error::Layout { arg: "strides", .. }), "{e}");
        // Transposed, or every other column: not contiguous.
        let e = TensorRef::<f32, Npu>::from_device_ptr(&npu, ptr, &[2, 3, 4], &[12, 1, 3]).unwrap_err();
        assert!(
            matches!(&e, Error::Layout { arg: "strides", reason, .. } if reason.contains("axis 2 needs stride 1")),
            "{e}"
        );
        let e =
            TensorMut::<f32, Npu>::from_device_ptr(&npu, ptr.cast_mut(), &[1, 3, 2], &[6, 2, 2]).unwrap_err();
        assert!(matches!(&e, Error::Layout { arg: "strides", .. }), "{e}");
        let e = TensorMut::<f32, Npu>::from_device_ptr(&npu, ptr.cast_mut(), &[3, 2], &[2, 1]).unwrap_err();
        assert!(matches!(&e, Error::Rank { got: 2, .. }), "{e}");
    }
    drop(t);
    drop(npu);
    session.assert_clean();
}

/// `AscendStream::synchronize` on a caller's stream waits for that stream (a convenience for a
/// caller without its own binding): once, and the results are then ready.
#[test]
fn synchronize_waits_for_a_callers_stream() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let x = NpuTensor::from_array(&npu, &input()).unwrap();
    let pooled = {
        let stream = caller.stream(&npu);
        let pooled = stream.adaptive_max_pool2d(&x, ADAPTIVE).unwrap();
        let waits = session.calls("aclrtSynchronizeStream");
        stream.synchronize().unwrap();
        assert_eq!(session.calls("aclrtSynchronizeStream"), waits + 1);
        pooled
    };
    let waits = session.calls("aclrtSynchronizeStream");
    assert_eq!(
        host(&pooled.output.to_array().unwrap()),
        poolgrad::adaptive_max_pool2d(&input(), ADAPTIVE).unwrap().output
    );
    assert_eq!(session.calls("aclrtSynchronizeStream"), waits, "the caller's stream was waited for");
    drop((x, pooled));
    drop(npu);
    caller.close();
    session.assert_clean();
}

/// Forward and backward of the six operators on device tensors on poolgrad's stream, against the
/// CPU: on the double, and on a real NPU when one is present.
#[test]
fn device_resident_results_match_the_cpu_on_every_device() {
    ascend::on_every_device("device_resident_results_match_the_cpu_on_every_device", |npu| {
        // On SoCs other than A2/A3 some of the six are refused (the SoC table); A2/A3 run all.
        if npu.soc_family() != poolgrad::device::ascend::SocFamily::AtlasA2A3 {
            return;
        }
        let mut tensors = Tensors::new(npu);
        let stream = npu.stream();
        let mut ws = Workspace::new(&stream, 0).unwrap();
        tensors.queue_all(&stream, &mut ws);
        stream.synchronize().unwrap();
        tensors.check_against_cpu();
    });
}

const VOLUME: [usize; 5] = [2, 3, 5, 6, 7];
const ADAPTIVE3D: [usize; 3] = [2, 3, 4];

/// A 5-D input whose values are distinct inside every volume (37 is a unit modulo 631, and a
/// volume has 210 elements), so that every arg-max is unambiguous.
fn volume_input() -> Array5<f32> {
    Array5::from_shape_fn(VOLUME, |(n, c, d, h, w)| {
        ((((n * 3 + c) * 5 + d) * 42 + h * 7 + w) * 37 % 631) as f32 - 300.0
    })
}

fn volume_ramp(shape: &[usize]) -> Array5<f32> {
    let dims: [usize; 5] = shape.try_into().unwrap();
    Array5::from_shape_fn(dims, |(n, c, d, h, w)| {
        1.0 + ((((n * 7 + c) * 7 + d) * 7 + h) * 7 + w) as f32 % 19.0 / 8.0
    })
}

fn volume_params() -> MaxPool3dParams {
    MaxPool3dParams::new([3, 3, 3]).with_stride([2, 2, 2]).with_padding([1, 1, 1]).with_ceil_mode(true)
}

/// The 3-D poolings and both double backwards on device tensors, queued on poolgrad's stream and
/// on a caller's: 5-D tensors (and a 4-D `[C, D, H, W]` one) described as NCDHW, indices a
/// forward wrote feeding its backward on the device, no copy and no wait in between, and every
/// result equal to the CPU's.
#[test]
fn the_3d_poolings_and_the_double_backwards_run_on_device_tensors_on_either_stream() {
    let session = Double::session();
    let caller = Caller::new(&session);
    let npu = session.open();
    let h = volume_input();
    let p = volume_params();
    let cpu = poolgrad::max_pool3d_with_indices_i32(&h, &p).unwrap();
    let cpu_adaptive = poolgrad::adaptive_max_pool3d_i32(&h, ADAPTIVE3D).unwrap();
    let (g, g_adaptive) = (volume_ramp(cpu.output.shape()), volume_ramp(cpu_adaptive.output.shape()));
    let want_gx = poolgrad::max_pool3d_with_indices_backward(&g, &h, &cpu.indices, &p).unwrap();
    let want_adaptive_gx =
        poolgrad::adaptive_max_pool3d_backward(&g_adaptive, &h, &cpu_adaptive.indices).unwrap();
    // The double backwards: a 3-D one on i64 indices (the only type its operator takes), a 2-D
    // one on the i32 indices a device forward writes.
    let ggi = volume_ramp(&VOLUME);
    let idx64 = cpu.indices.mapv(i64::from);
    let want_ggo = poolgrad::max_pool3d_double_backward(&ggi, &idx64).unwrap();
    let (h2, p2) = (input(), pool_params());
    let cpu2 = poolgrad::max_pool2d_with_indices_i32(&h2, &p2).unwrap();
    let ggi2 = ramp(SHAPE);
    let want_ggo2 = poolgrad::max_pool2d_double_backward(&ggi2, &cpu2.indices).unwrap();
    // An unbatched `[C, D, H, W]` volume.
    let unbatched = h.index_axis(Axis(0), 1).to_owned();
    let want_unbatched = poolgrad::max_pool3d_with_indices_i32(&unbatched, &p).unwrap();
    for theirs in [false, true] {
        let upload = |a: &Array5<f32>| NpuTensor::from_array(&npu, a).unwrap();
        let x = NpuTensor::from_array(&npu, &h).unwrap();
        let (g_dev, g_adaptive_dev, ggi_dev) = (upload(&g), upload(&g_adaptive), upload(&ggi));
        let idx64_dev = NpuTensor::from_array(&npu, &idx64).unwrap();
        let (x2, ggi2_dev) =
            (NpuTensor::from_array(&npu, &h2).unwrap(), NpuTensor::from_array(&npu, &ggi2).unwrap());
        let x_unbatched = NpuTensor::from_array(&npu, &unbatched).unwrap();
        let before = Traffic::of(&session);
        let results = {
            let stream = if theirs { caller.stream(&npu) } else { npu.stream() };
            let pooled = stream.max_pool3d_with_indices(&x, &p).unwrap();
            let gx = stream.max_pool3d_with_indices_backward(&g_dev, &x, &pooled.indices, &p).unwrap();
            let adaptive = stream.adaptive_max_pool3d(&x, ADAPTIVE3D).unwrap();
            let adaptive_gx =
                stream.adaptive_max_pool3d_backward(&g_adaptive_dev, &x, &adaptive.indices).unwrap();
            let ggo = stream.max_pool3d_double_backward(&ggi_dev, &idx64_dev).unwrap();
            let pooled2 = stream.max_pool2d_with_indices(&x2, &p2).unwrap();
            let ggo2 = stream.max_pool2d_double_backward(&ggi2_dev, &pooled2.indices).unwrap();
            let pooled_unbatched = stream.max_pool3d_with_indices(&x_unbatched, &p).unwrap();
            assert_eq!(Traffic::of(&session), before, "no copy and no wait inside poolgrad");
            if theirs {
                caller.synchronize();
            }
            (pooled, gx, adaptive, adaptive_gx, ggo, ggo2, pooled_unbatched)
        };
        let (pooled, gx, adaptive, adaptive_gx, ggo, ggo2, pooled_unbatched) = results;
        assert_eq!(pooled.output.dims(), cpu.output.shape());
        assert_eq!(pooled.output.to_array().unwrap(), cpu.output.clone().into_dyn());
        assert_eq!(pooled.indices.to_array().unwrap(), cpu.indices.clone().into_dyn());
        assert_eq!(gx.to_array().unwrap(), want_gx.clone().into_dyn());
        assert_eq!(adaptive.output.to_array().unwrap(), cpu_adaptive.output.clone().into_dyn());
        assert_eq!(adaptive.indices.to_array().unwrap(), cpu_adaptive.indices.clone().into_dyn());
        assert_eq!(adaptive_gx.to_array().unwrap(), want_adaptive_gx.clone().into_dyn());
        assert_eq!(ggo.to_array().unwrap(), want_ggo.clone().into_dyn());
        assert_eq!(ggo2.to_array().unwrap(), want_ggo2.clone().into_dyn());
        assert_eq!(pooled_unbatched.output.dims(), want_unbatched.output.shape());
        assert_eq!(pooled_unbatched.output.to_array().unwrap(), want_unbatched.output.clone().into_dyn());
        assert_eq!(pooled_unbatched.indices.to_array().unwrap(), want_unbatched.indices.clone().into_dyn());
    }
    drop(npu);
    caller.close();
    session.assert_clean();
}

/// The indices of the 3-D backwards and of the double backwards on the device: uploaded ones are
/// read on the way and one outside the volume (or plane) is named; ones a forward wrote over a
/// larger volume are refused; and the 3-D gather's dtypes hold, all before any operator runs.
/// (The stream's methods allocate their output first: the plan that refuses sees it.)
#[test]
fn device_indices_of_the_3d_and_double_backwards_are_checked_before_any_operator_runs() {
    let session = Double::session();
    let npu = session.open();
    let stream = npu.stream();
    let p = MaxPool3dParams::new([2, 2, 2]).with_stride([2, 2, 2]).with_ceil_mode(true);
    // A 2 x 2 x 3 volume (12 positions) pools to 1 x 1 x 2.
    let x = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 2, 3]).unwrap();
    let g = NpuTensor::from_array(&npu, &Array5::<f32>::ones((1, 1, 1, 1, 2))).unwrap();
    let outside =
        NpuTensor::from_array(&npu, &Array5::from_shape_vec((1, 1, 1, 1, 2), vec![11i32, 12]).unwrap())
            .unwrap();
    // A 2 x 2 x 4 volume (16 positions) pools to the same 1 x 1 x 2.
    let big = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 2, 4]).unwrap();
    let written = stream.max_pool3d_with_indices(&big, &p).unwrap();
    let ggi = NpuTensor::<f32>::zeros(&npu, &[1, 1, 2, 2, 3]).unwrap();
    let outside64 =
        NpuTensor::from_array(&npu, &Array5::from_shape_vec((1, 1, 1, 1, 2), vec![0i64, 12]).unwrap())
            .unwrap();
    let calls = operator_calls(&session);
    let e = stream.max_pool3d_with_indices_backward(&g, &x, &outside, &p).unwrap_err();
    assert!(
        matches!(&e, Error::IndexOutOfRange { arg: "indices", position, value: 12, plane: 12, .. } if position == &[0, 0, 0, 0, 1]),
        "{e}"
    );
    let e = stream.adaptive_max_pool3d_backward(&g, &x, &outside).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { value: 12, plane: 12, .. }), "{e}");
    let e = stream.max_pool3d_with_indices_backward(&g, &x, &written.indices, &p).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidParameter { arg: "indices", got, .. } if got.contains("planes of 16 elements")),
        "{e}"
    );
    let e = stream.max_pool3d_double_backward(&ggi, &outside64).unwrap_err();
    assert!(
        matches!(&e, Error::IndexOutOfRange { arg: "indices", op, value: 12, plane: 12, .. } if *op == "max_pool3d_double_backward"),
        "{e}"
    );
    // The 2-D double backward on the 2 x 3 planes of `[1, 2, 2, 3]`, given the 1 x 2 indices.
    let ggi2 = NpuTensor::<f32>::zeros(&npu, &[1, 2, 2, 3]).unwrap();
    let idx2 =
        NpuTensor::from_array(&npu, &Array4::from_shape_vec((1, 2, 1, 2), vec![0i32, 5, 6, 1]).unwrap())
            .unwrap();
    let e = stream.max_pool2d_double_backward(&ggi2, &idx2).unwrap_err();
    assert!(
        matches!(&e, Error::IndexOutOfRange { position, value: 6, plane: 6, .. } if position == &[0, 1, 0, 0]),
        "{e}"
    );
    // `aclnnMaxUnpool3dBackward` takes f32, f16 and f64, not bf16.
    let ggi_bf16 = NpuTensor::<half::bf16>::zeros(&npu, &[1, 1, 2, 2, 3]).unwrap();
    let zeros64 = NpuTensor::<i64>::zeros(&npu, &[1, 1, 1, 1, 2]).unwrap();
    let e = stream.max_pool3d_double_backward(&ggi_bf16, &zeros64).unwrap_err();
    assert!(matches!(&e, Error::DeviceLimit { about: poolgrad::DeviceLimitKind::DType, .. }), "{e}");
    assert_eq!(operator_calls(&session), calls, "no operator runs for a refused operation");
    drop((x, g, outside, big, written, ggi, outside64, ggi2, idx2, ggi_bf16, zeros64));
    drop(stream);
    drop(npu);
    session.assert_clean();
}

/// Views of a caller's memory take the 5-D shapes of the 3-D operators, and a 3-D pooling runs
/// on them; a rank past 5 is refused.
#[test]
#[allow(unsafe_code)] // `from_device_ptr` over an `NpuTensor`'s memory, which outlives the views
fn views_of_a_callers_memory_take_volumes() {
    let session = Double::session();
    let npu = session.open();
    let h = volume_input();
    let x = NpuTensor::from_array(&npu, &h).unwrap();
    let p = volume_params();
    let cpu = poolgrad::max_pool3d_with_indices_i32(&h, &p).unwrap();
    let dims = cpu.output.shape().to_vec();
    let (out, idx) =
        (NpuTensor::<f32>::zeros(&npu, &dims).unwrap(), NpuTensor::<i32>::zeros(&npu, &dims).unwrap());
    let strides = |d: &[usize]| (0..d.len()).map(|i| d[i + 1..].iter().product()).collect::<Vec<usize>>();
    {
        let stream = npu.stream();
        // SAFETY: each pointer is an `NpuTensor` of the shape given, alive and not otherwise used
        // until the stream is synchronised by `to_array` below.
        let op = unsafe {
            poolgrad::op::MaxPool3dWithIndices {
                input: TensorRef::<f32, Npu>::from_device_ptr(
                    &npu,
                    x.device_ptr(),
                    &VOLUME,
                    &strides(&VOLUME),
                )
                .unwrap(),
                params: p,
                output: TensorMut::from_device_ptr(&npu, out.device_ptr().cast_mut(), &dims, &strides(&dims))
                    .unwrap(),
                indices: TensorMut::from_device_ptr(
                    &npu,
                    idx.device_ptr().cast_mut(),
                    &dims,
                    &strides(&dims),
                )
                .unwrap(),
            }
        };
        assert_eq!(op.input.dims(), VOLUME);
        assert_eq!(op.input.shape(), [2, 3, 30, 7]);
        Plan::new(&stream, op).unwrap().run_in(&mut Workspace::new(&stream, 0).unwrap()).unwrap();
    }
    assert_eq!(out.to_array().unwrap(), cpu.output.into_dyn());
    assert_eq!(idx.to_array().unwrap(), cpu.indices.into_dyn());
    // SAFETY: refused before any view is made.
    let e =
        unsafe { TensorRef::<f32, Npu>::from_device_ptr(&npu, x.device_ptr(), &[1, 2, 3, 5, 6, 7], &[0; 6]) }
            .unwrap_err();
    assert!(
        matches!(&e, Error::Rank { got: 6, expected, .. } if expected.contains("5 (N, C, D, H, W)")),
        "{e}"
    );
    drop((x, out, idx));
    drop(npu);
    session.assert_clean();
}

/// Max unpooling and its backward on device tensors: indices a forward with windows that share no
/// input wrote (2-D, adaptive 2-D with sizes that divide, 3-D) and indices uploaded without
/// repeats run with no copy and no wait, and equal the CPU's.
#[test]
fn unpooling_runs_on_device_indices_that_repeat_no_position() {
    let session = Double::session();
    let npu = session.open();
    let (h, v) = (input(), volume_input());
    let p2 = MaxPool2dParams::new([2, 2]).with_stride([2, 2]).with_ceil_mode(true);
    let p3 = MaxPool3dParams::new([2, 2, 2]).with_stride([2, 2, 2]);
    let cpu2 = poolgrad::max_pool2d_with_indices_i32(&h, &p2).unwrap();
    let cpu_adaptive = poolgrad::adaptive_max_pool2d(&h, [7, 3]).unwrap();
    let cpu3 = poolgrad::max_pool3d_with_indices(&v, &p3).unwrap();
    let want2 = poolgrad::max_unpool2d(&cpu2.output, &cpu2.indices, [7, 6]).unwrap();
    let want_adaptive = poolgrad::max_unpool2d(&cpu_adaptive.output, &cpu_adaptive.indices, [7, 6]).unwrap();
    let want3 = poolgrad::max_unpool3d(&cpu3.output, &cpu3.indices, [5, 6, 7]).unwrap();
    let (g2, g3) = (ramp(SHAPE), volume_ramp(&VOLUME));
    let want_gx2 = poolgrad::max_unpool2d_backward(&g2, &cpu2.indices).unwrap();
    let want_gx3 = poolgrad::max_unpool3d_backward(&g3, &cpu3.indices).unwrap();
    let (x2, x3) = (NpuTensor::from_array(&npu, &h).unwrap(), NpuTensor::from_array(&npu, &v).unwrap());
    let (g2_dev, g3_dev) =
        (NpuTensor::from_array(&npu, &g2).unwrap(), NpuTensor::from_array(&npu, &g3).unwrap());
    // Uploaded i64 indices: read on the way, no position twice in any volume.
    let idx3_dev = NpuTensor::from_array(&npu, &cpu3.indices).unwrap();
    let before = Traffic::of(&session);
    let stream = npu.stream();
    let pooled2 = stream.max_pool2d_with_indices(&x2, &p2).unwrap();
    let unpooled2 = stream.max_unpool2d(&pooled2.output, &pooled2.indices, [7, 6]).unwrap();
    let gx2 = stream.max_unpool2d_backward(&g2_dev, &pooled2.indices).unwrap();
    let adaptive = stream.adaptive_max_pool2d(&x2, [7, 3]).unwrap();
    let unpooled_adaptive = stream.max_unpool2d(&adaptive.output, &adaptive.indices, [7, 6]).unwrap();
    let pooled3 = stream.max_pool3d_with_indices(&x3, &p3).unwrap();
    let unpooled3 = stream.max_unpool3d(&pooled3.output, &pooled3.indices, [5, 6, 7]).unwrap();
    let gx3 = stream.max_unpool3d_backward(&g3_dev, &idx3_dev).unwrap();
    assert_eq!(Traffic::of(&session), before, "no copy and no wait inside poolgrad");
    assert_eq!(unpooled2.to_array().unwrap(), want2.into_dyn());
    assert_eq!(gx2.to_array().unwrap(), want_gx2.into_dyn());
    assert_eq!(unpooled_adaptive.to_array().unwrap(), want_adaptive.into_dyn());
    assert_eq!(unpooled3.to_array().unwrap(), want3.into_dyn());
    assert_eq!(gx3.to_array().unwrap(), want_gx3.into_dyn());
    drop((x2, x3, g2_dev, g3_dev, idx3_dev, pooled2, unpooled2, gx2, adaptive, unpooled_adaptive));
    drop((pooled3, unpooled3, gx3));
    drop(stream);
    drop(npu);
    session.assert_clean();
}

/// Indices that may repeat a position in a plane are refused by the device's unpooling and its
/// backward before any operator runs (the device's scatter keeps one of equal indices, not
/// defined which, so poolgrad's rule needs the host): written by a forward whose windows
/// overlap, uploaded with a repeat, or zeroed; the double backward, a plain gather, takes them.
#[test]
fn device_unpooling_refuses_indices_that_may_repeat_a_position() {
    let session = Double::session();
    let npu = session.open();
    let stream = npu.stream();
    let x = NpuTensor::from_array(&npu, &input()).unwrap();
    let overlapping = stream.max_pool2d_with_indices(&x, &pool_params()).unwrap(); // kernel 3, stride 2
    let repeated =
        NpuTensor::from_array(&npu, &Array4::from_shape_vec((1, 1, 2, 2), vec![0i64, 3, 0, 1]).unwrap())
            .unwrap();
    let values = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 1, 2, 2))).unwrap();
    let zeros = NpuTensor::<i64>::zeros(&npu, &[1, 1, 2, 2]).unwrap();
    // The same values in two planes of two: no repeat inside a plane.
    let apart =
        NpuTensor::from_array(&npu, &Array4::from_shape_vec((1, 2, 1, 2), vec![0i64, 3, 0, 3]).unwrap())
            .unwrap();
    let apart_values = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 2, 1, 2))).unwrap();
    let full = NpuTensor::from_array(&npu, &Array4::<f32>::ones((1, 1, 2, 2))).unwrap();
    let calls = operator_calls(&session);
    let may_repeat = |e: &Error| matches!(e, Error::InvalidParameter { arg: "indices", got, .. } if got.contains("may repeat"));
    let e = stream.max_unpool2d(&overlapping.output, &overlapping.indices, [7, 6]).unwrap_err();
    assert!(may_repeat(&e), "{e}");
    let g = NpuTensor::from_array(&npu, &ramp(SHAPE)).unwrap();
    let e = stream.max_unpool2d_backward(&g, &overlapping.indices).unwrap_err();
    assert!(may_repeat(&e), "{e}");
    let e = stream.max_unpool2d(&values, &repeated, [2, 2]).unwrap_err();
    assert!(may_repeat(&e), "{e}");
    let e = stream.max_unpool2d(&values, &zeros, [2, 2]).unwrap_err();
    assert!(may_repeat(&e), "{e}");
    assert_eq!(operator_calls(&session), calls, "no operator runs for refused indices");
    let out = stream.max_unpool2d(&apart_values, &apart, [2, 2]).unwrap();
    assert_eq!(
        out.to_array().unwrap(),
        Array4::from_shape_vec((1, 2, 2, 2), vec![1.0f32, 0., 0., 1., 1., 0., 0., 1.]).unwrap().into_dyn()
    );
    let gathered = stream.max_pool2d_double_backward(&full, &repeated).unwrap();
    assert_eq!(gathered.to_array().unwrap(), Array4::<f32>::ones((1, 1, 2, 2)).into_dyn());
    drop((x, overlapping, repeated, values, zeros, apart, apart_values, full, g, out, gathered));
    drop(stream);
    drop(npu);
    session.assert_clean();
}
