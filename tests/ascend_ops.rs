//! The four operators on the Ascend backend, end to end, against the CPU backend: through the CANN
//! test double always, and through a real NPU when one is present (`cargo test --features ascend`
//! on an Ascend machine; otherwise a note says the real-device run is skipped).
#![cfg(feature = "ascend")]

mod ascend;
mod common;

use ascend::{Double, on_every_device};
use half::{bf16, f16};
use ndarray::{Array, Array4, ArrayD, Dimension, IxDyn, ShapeBuilder};
use poolgrad::device::ascend::{Ascend, DeterministicLevel, SocFamily};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::AdaptiveMaxPool2dBackward;
use poolgrad::testing::{ParamBounds, Shapes, Values, adaptive_cases, mask_cases};
use poolgrad::{
    ArgmaxIndex, Bitmask, DeviceLimitKind, Error, I32Argmax, MaskLayout, MaxPool2dParams, Plan, PoolFloat,
    TensorMut, TensorRef, Workspace,
};
use proptest::test_runner::{Config, TestRunner};

fn bits<T: bytemuck::Pod, D: Dimension>(a: &Array<T, D>) -> Vec<u8> {
    bytemuck::cast_slice(a.as_standard_layout().as_slice().unwrap()).to_vec()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

/// Adaptive forward and backward on `npu` equal the CPU's bit for bit (values, indices, gradient).
fn adaptive_matches_cpu<T: PoolFloat, I: ArgmaxIndex>(npu: &Ascend, values: Values) {
    let cpu = Cpu::sequential();
    let shapes = Shapes { channels: 1..=5, height: 1..=9, width: 1..=9, ..Shapes::default() };
    runner(24)
        .run(&adaptive_cases::<T, I, ndarray::IxDyn>(shapes, values), |case| {
            let dev = common::adaptive_on::<_, T, I, _>(npu, &case.input, case.output_size).unwrap();
            let host = common::adaptive_on::<_, T, I, _>(&cpu, &case.input, case.output_size).unwrap();
            assert_eq!(bits(&dev.output), bits(&host.output), "forward values");
            assert_eq!(dev.indices, host.indices, "forward indices");
            let gd = poolgrad::on(npu)
                .adaptive_max_pool2d_backward(&case.grad_output, &case.input, &host.indices)
                .unwrap();
            let gc = poolgrad::on(&cpu)
                .adaptive_max_pool2d_backward(&case.grad_output, &case.input, &host.indices)
                .unwrap();
            assert_eq!(bits(&gd), bits(&gc), "backward");
            Ok(())
        })
        .unwrap();
}

#[test]
fn adaptive_ops_match_the_cpu_in_every_supported_dtype() {
    on_every_device("adaptive_ops_match_the_cpu_in_every_supported_dtype", |npu| {
        adaptive_matches_cpu::<f32, i64>(npu, Values::WithNan);
        adaptive_matches_cpu::<f32, i32>(npu, Values::Distinct);
        adaptive_matches_cpu::<f16, i64>(npu, Values::Ties);
        adaptive_matches_cpu::<bf16, i32>(npu, Values::WithNan);
    });
}

/// The mask forward on `npu` gives the CPU's values and the same arg-max (the bytes may differ
/// where the layout leaves them unspecified); both backwards, each through its own mask, agree.
fn mask_matches_cpu<T: PoolFloat, L: MaskLayout>(npu: &Ascend, bounds: ParamBounds) {
    let cpu = Cpu::sequential();
    let shapes = Shapes { channels: 1..=20, height: 1..=9, width: 1..=9, ..Shapes::default() };
    runner(16)
        .run(&mask_cases::<T, L, ndarray::IxDyn>(shapes, bounds, Values::Ties), |case| {
            let p = &case.params;
            let dev = match poolgrad::on(npu).max_pool2d_with_mask(&case.input, p, L::default()) {
                // The legacy kernel's documented ceil-mode limit (310P, Atlas training).
                Err(Error::DeviceLimit { about: DeviceLimitKind::Parameter("ceil_mode"), .. })
                    if matches!(npu.soc_family(), SocFamily::AtlasTraining | SocFamily::Atlas310P) =>
                {
                    return Ok(());
                }
                dev => dev.unwrap(),
            };
            let host = poolgrad::on(&cpu).max_pool2d_with_mask(&case.input, p, L::default()).unwrap();
            assert_eq!(bits(&dev.output), bits(&host.output), "forward values");
            assert_eq!(
                dev.mask.to_indices::<i64>().unwrap(),
                host.mask.to_indices::<i64>().unwrap(),
                "arg-max"
            );
            let gd = poolgrad::on(npu)
                .max_pool2d_with_mask_backward(&case.grad_output, &case.input, &dev.mask)
                .unwrap();
            let gc = poolgrad::on(&cpu)
                .max_pool2d_with_mask_backward(&case.grad_output, &case.input, &host.mask)
                .unwrap();
            assert_eq!(bits(&gd), bits(&gc), "backward");
            Ok(())
        })
        .unwrap();
}

fn kernels(k: std::ops::RangeInclusive<usize>) -> ParamBounds {
    ParamBounds { kernel: k, dilation: 1..=1, ..ParamBounds::default() }
}

#[test]
fn mask_ops_match_the_cpu_in_the_layout_of_the_soc() {
    on_every_device("mask_ops_match_the_cpu_in_the_layout_of_the_soc", |npu| {
        let k3 = MaxPool2dParams::new([3, 3]);
        let k1 = MaxPool2dParams::new([1, 1]);
        match npu.soc_family() {
            SocFamily::AtlasA2A3 => {
                assert!(npu.writes_mask_layout::<I32Argmax>(&k3) && npu.writes_mask_layout::<Bitmask>(&k1));
                mask_matches_cpu::<f32, I32Argmax>(npu, kernels(2..=4));
                mask_matches_cpu::<f16, I32Argmax>(npu, kernels(2..=3));
                mask_matches_cpu::<bf16, I32Argmax>(npu, kernels(2..=3));
                mask_matches_cpu::<f32, Bitmask>(npu, kernels(1..=1));
            }
            SocFamily::AtlasTraining => {
                assert!(npu.writes_mask_layout::<Bitmask>(&k3));
                mask_matches_cpu::<f16, Bitmask>(npu, kernels(1..=3));
            }
            other => println!("note: no mask test for SoC family {other}"),
        }
    });
}

#[test]
fn atlas_training_writes_bitmasks_for_every_kernel() {
    let session = Double::session();
    session.set_soc("Ascend910ProB");
    let npu = session.open();
    assert_eq!(npu.soc_family(), SocFamily::AtlasTraining);
    // Ties are small integers, exact in f16, in which the device computes f32 input.
    mask_matches_cpu::<f32, Bitmask>(&npu, kernels(1..=3));
    mask_matches_cpu::<f16, Bitmask>(&npu, kernels(2..=3));
    drop(npu);
    session.assert_clean();
}

#[test]
fn the_worked_example_runs_on_the_device() {
    // ascend-semantics.md A.5: the I32Argmax prefix 01 00 00 00 06 00 00 00 08 00 00 00 0a 00 00 00.
    on_every_device("the_worked_example_runs_on_the_device", |npu| {
        if npu.soc_family() != SocFamily::AtlasA2A3 {
            return;
        }
        let x = Array4::from_shape_vec(
            (1, 1, 4, 4),
            vec![0.0f32, 5., 1., 1., 2., 3., 7., 0., 9., 1., 6., 4., 0., 8., 6., 2.],
        )
        .unwrap();
        let p = MaxPool2dParams::new([2, 2]);
        let pooled = poolgrad::on(npu).max_pool2d_with_mask(&x, &p, I32Argmax).unwrap();
        assert_eq!(pooled.output.as_slice().unwrap(), &[5.0, 7.0, 9.0, 6.0]);
        let bytes = pooled.mask.as_array();
        assert_eq!(bytes.shape(), &[1, 1, 4, 64]);
        let prefix: Vec<u8> = bytes.iter().take(16).map(|&b| b as u8).collect();
        assert_eq!(prefix, [1, 0, 0, 0, 6, 0, 0, 0, 8, 0, 0, 0, 10, 0, 0, 0]);
        assert!(bytes.iter().skip(16).all(|&b| b == 0), "the rest of the mask is zero");
        let g = Array4::from_shape_vec((1, 1, 2, 2), vec![1.0f32, 2.0, 4.0, 8.0]).unwrap();
        let gi = poolgrad::on(npu).max_pool2d_with_mask_backward(&g, &x, &pooled.mask).unwrap();
        let mut want = [0.0f32; 16];
        (want[1], want[6], want[8], want[10]) = (1.0, 2.0, 4.0, 8.0);
        assert_eq!(gi.as_slice().unwrap(), &want);
    });
}

#[test]
fn strided_views_three_d_and_empty_batches_match_the_cpu() {
    on_every_device("strided_views_three_d_and_empty_batches_match_the_cpu", |npu| {
        let cpu = Cpu::sequential();
        // A transposed (non-contiguous) 4-D input.
        let x = Array4::from_shape_fn((2, 3, 7, 5), |(n, c, h, w)| {
            ((n * 31 + c * 17 + h * 5 + w * 3) % 11) as f32
        });
        let xt = x.view().permuted_axes([0, 1, 3, 2]);
        let dev = poolgrad::on(npu).adaptive_max_pool2d(&xt, [3, 4]).unwrap();
        let host = poolgrad::on(&cpu).adaptive_max_pool2d(&xt, [3, 4]).unwrap();
        assert_eq!((&dev.output, &dev.indices), (&host.output, &host.indices));
        // A 3-D call keeps its rank.
        let x3 = x.index_axis(ndarray::Axis(0), 1).to_owned();
        let dev = poolgrad::on(npu).adaptive_max_pool2d_i32(&x3, [2, 2]).unwrap();
        assert_eq!(dev.output.ndim(), 3);
        let g = dev.output.mapv(|v| v + 1.0);
        let gd = poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x3, &dev.indices).unwrap();
        let gc = poolgrad::on(&cpu).adaptive_max_pool2d_backward(&g, &x3, &dev.indices).unwrap();
        assert_eq!(gd, gc);
        // An empty batch needs no device work.
        let empty = Array4::<f32>::zeros((0, 2, 4, 4));
        let dev = poolgrad::on(npu).adaptive_max_pool2d(&empty, [2, 2]).unwrap();
        assert_eq!(dev.output.shape(), &[0, 2, 2, 2]);
        // A strided output view is written through.
        let (go, idx) = (Array4::from_elem((1, 1, 2, 2), 1.5f32), Array4::from_elem((1, 1, 2, 2), 4i64));
        let mut wide = Array4::<f32>::from_elem((1, 1, 3, 6), 9.0);
        let mut view = wide.slice_mut(ndarray::s![.., .., .., ..;2]);
        let x33 = Array4::<f32>::zeros((1, 1, 3, 3));
        let op = AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_array(&go).unwrap(),
            self_: TensorRef::from_array(&x33).unwrap(),
            indices: TensorRef::from_array(&idx).unwrap(),
            grad_input: TensorMut::from_view(view.view_mut()).unwrap(),
        };
        Plan::new(npu, op).unwrap().run().unwrap();
        let want =
            Array4::from_shape_vec((1, 1, 3, 3), vec![0., 0., 0., 0., 6.0f32, 0., 0., 0., 0.]).unwrap();
        assert_eq!(view, want);
        assert!(wide.iter().skip(1).step_by(2).all(|&v| v == 9.0), "the other columns are untouched");
    });
}

#[test]
fn workspaces_are_device_memory_reused_across_plans() {
    let session = Double::session();
    let npu = session.open();
    let (go, idx, x) = (
        Array4::from_elem((1, 2, 2, 2), f16::ONE),
        Array4::from_elem((1, 2, 2, 2), 3i32),
        Array4::<f16>::zeros((1, 2, 4, 4)),
    );
    let mut gi = Array4::<f16>::zeros((1, 2, 4, 4));
    fn op<'a>(
        go: &'a Array4<f16>,
        x: &'a Array4<f16>,
        idx: &'a Array4<i32>,
        gi: &'a mut Array4<f16>,
    ) -> AdaptiveMaxPool2dBackward<'a, f16, i32> {
        AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_array(go).unwrap(),
            self_: TensorRef::from_array(x).unwrap(),
            indices: TensorRef::from_array(idx).unwrap(),
            grad_input: TensorMut::from_array(gi).unwrap(),
        }
    }
    // CANN sizes the workspace in its phase 1, which runs with the launch: the plan asks for
    // none, and the run grows the workspace it is given to what phase 1 asked.
    let plan = Plan::new(&npu, op(&go, &x, &idx, &mut gi)).unwrap();
    assert_eq!(plan.workspace_size(), 0);
    let mut grown = Workspace::new(&npu, 0).unwrap();
    plan.bind(&mut grown).unwrap().run().unwrap();
    // The double reports tiling bytes plus an f32 accumulator for half-precision gradients.
    assert_eq!(grown.len(), 512 + 4 * 32);
    assert_eq!(gi[[0, 1, 0, 3]], f16::from_f32(4.0));
    // A workspace of exactly the size phase 1 asks is used as it is.
    let allocations = session.calls("aclrtMalloc");
    Plan::new(&npu, op(&go, &x, &idx, &mut gi)).unwrap().bind(&mut grown).unwrap().run().unwrap();
    assert_eq!(session.calls("aclrtMalloc"), allocations + 4, "the four tensors, no workspace");
    // A larger workspace is used as it is, and reused.
    let mut ws = Workspace::new(&npu, 4096).unwrap();
    let allocations = session.calls("aclrtMalloc");
    for _ in 0..3 {
        gi.fill(f16::ZERO);
        Plan::new(&npu, op(&go, &x, &idx, &mut gi)).unwrap().bind(&mut ws).unwrap().run().unwrap();
        assert_eq!(gi[[0, 1, 0, 3]], f16::from_f32(4.0));
    }
    assert_eq!(ws.len(), 4096);
    assert_eq!(
        session.calls("aclrtMalloc"),
        allocations + 3 * 4,
        "the four tensors of each plan, no workspace"
    );
    // A workspace of another device is refused.
    let other = session.open();
    let mut foreign = Workspace::new(&other, 4096).unwrap();
    let e =
        Plan::new(&npu, op(&go, &x, &idx, &mut gi)).unwrap().bind(&mut foreign).unwrap().run().unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "workspace", .. }), "{e}");
    drop((grown, ws, foreign, other, npu));
    session.assert_clean();
}

/// Determinism is process-wide on current CANN: nnopbase reads the process option in phase 1
/// (the double models hicann/opbase `GetDeterministicLevelFromRt`), so the setting must reach it,
/// and it reaches every device of the process.
#[test]
fn deterministic_mode_reaches_the_process_option_cann_reads() {
    let session = Double::session();
    let run = |npu: &Ascend| {
        let x = ArrayD::<f32>::zeros(IxDyn(&[1, 3, 3]));
        let g = ArrayD::<f32>::ones(IxDyn(&[1, 2, 2]));
        let idx = ArrayD::<i64>::zeros(IxDyn(&[1, 2, 2]));
        poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x, &idx).unwrap()
    };
    let npu = session.open();
    // The context option is unset and the process option reads 0: off, as in CANN.
    assert_eq!(npu.is_deterministic(), Some(false), "off by default, as in CANN");
    assert_eq!(run(&npu)[[0, 0, 0]], 4.0);
    assert_eq!(session.last_deterministic(), 0);
    let npu = npu.deterministic(true).unwrap();
    assert_eq!(npu.is_deterministic(), Some(true));
    assert!(session.calls("aclrtSetSysParamOpt") >= 1, "the process option is set too");
    run(&npu);
    assert_eq!(session.last_deterministic(), 1);
    // A second device of the same process sees it, and so does its plan.
    let other = session.open();
    assert_eq!(other.is_deterministic(), Some(true), "process-wide");
    run(&other);
    assert_eq!(session.last_deterministic(), 1);
    drop(other);
    let npu = npu.deterministic(false).unwrap();
    assert_eq!(npu.is_deterministic(), Some(false));
    run(&npu);
    assert_eq!(session.last_deterministic(), 0);
    // One level at a time. The process's alone reaches the operators of current CANN (the levels
    // then disagree, which `is_deterministic` reports as unknown). The context's alone reaches
    // them too, because the runtime's context setter also stores the process value
    // (hicann/runtime `api_c.cc`, `rtCtxSetSysParamOpt`): which is what the probe asks of a
    // shipped runtime.
    let npu = npu.deterministic_at(DeterministicLevel::Process, true).unwrap();
    assert_eq!(npu.is_deterministic(), None);
    run(&npu);
    assert_eq!(session.last_deterministic(), 1);
    let npu = npu.deterministic_at(DeterministicLevel::Process, false).unwrap();
    assert_eq!(npu.is_deterministic(), Some(false));
    let npu = npu.deterministic_at(DeterministicLevel::Context, true).unwrap();
    assert_eq!(npu.is_deterministic(), Some(true));
    run(&npu);
    assert_eq!(session.last_deterministic(), 1);
    drop(npu);
    session.assert_clean();
}

#[test]
fn the_device_is_usable_from_other_threads() {
    let session = Double::session();
    let npu = session.open();
    let x = Array4::from_shape_fn((2, 3, 6, 6), |(n, c, h, w)| (n + 2 * c + 3 * h + 5 * w) as f32 % 7.0);
    let want = poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d(&x, [3, 3]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..4 {
                    let got = poolgrad::on(&npu).adaptive_max_pool2d(&x, [3, 3]).unwrap();
                    assert_eq!(got, want);
                }
            });
        }
    });
    drop(npu);
    session.assert_clean();
}

#[test]
fn broadcast_inputs_are_staged() {
    // A zero-stride (broadcast) gradient is gathered on the host before the copy.
    on_every_device("broadcast_inputs_are_staged", |npu| {
        let one = [2.0f32];
        let g = ndarray::ArrayView4::from_shape((1, 2, 2, 2).strides((0, 0, 0, 0)), &one).unwrap();
        let idx = Array4::from_shape_fn((1, 2, 2, 2), |(_, _, i, j)| (i * 2 + j) as i64 * 5);
        let x = Array4::<f32>::zeros((1, 2, 4, 4));
        let got = poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x, &idx).unwrap();
        let want = poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d_backward(&g, &x, &idx).unwrap();
        assert_eq!(got, want);
        assert_eq!(got.sum(), 16.0);
    });
}

#[test]
fn each_soc_runs_what_it_supports_and_refuses_the_rest_before_any_device_call() {
    let x = Array4::from_shape_fn((1, 3, 6, 6), |(_, c, h, w)| ((c * 5 + h * 3 + w) % 7) as f32);
    let p = MaxPool2dParams::new([2, 2]);
    let cpu = Cpu::sequential();
    let refused = |_: &ascend::Session, e: Error, about: DeviceLimitKind| {
        assert!(matches!(&e, Error::DeviceLimit { device: "ascend", about: a, .. } if *a == about), "{e}");
        assert!(e.to_string().contains("SoC Ascend"), "the message names the SoC: {e}");
    };

    // Atlas 310P: the mask forward in f32 (Bitmask); no backward, no adaptive operators, no f16.
    let session = Double::session();
    session.set_soc("Ascend310P3");
    let npu = session.open();
    let dev = poolgrad::on(&npu).max_pool2d_with_mask(&x, &p, Bitmask).unwrap();
    let host = poolgrad::on(&cpu).max_pool2d_with_mask(&x, &p, Bitmask).unwrap();
    assert_eq!(dev.output, host.output);
    assert_eq!(dev.mask.to_indices::<i64>().unwrap(), host.mask.to_indices::<i64>().unwrap());
    let before = session.calls("*");
    let g = dev.output.mapv(|_| 1.0f32);
    refused(
        &session,
        poolgrad::on(&npu).max_pool2d_with_mask_backward(&g, &x, &dev.mask).unwrap_err(),
        DeviceLimitKind::Operator,
    );
    refused(
        &session,
        poolgrad::on(&npu).max_pool2d_with_mask(&x.mapv(f16::from_f32), &p, Bitmask).unwrap_err(),
        DeviceLimitKind::DType,
    );
    refused(
        &session,
        poolgrad::on(&npu).adaptive_max_pool2d(&x, [2, 2]).unwrap_err(),
        DeviceLimitKind::Operator,
    );
    assert_eq!(session.calls("*"), before, "refused before any device call");
    drop(npu);
    session.assert_clean();
    drop(session); // the double serves one session at a time

    // Atlas training: no bf16, no adaptive operators.
    let session = Double::session();
    session.set_soc("Ascend910A");
    let npu = session.open();
    let before = session.calls("*");
    refused(
        &session,
        poolgrad::on(&npu).max_pool2d_with_mask(&x.mapv(bf16::from_f32), &p, Bitmask).unwrap_err(),
        DeviceLimitKind::DType,
    );
    let idx = Array4::<i64>::zeros((1, 3, 2, 2));
    refused(
        &session,
        poolgrad::on(&npu)
            .adaptive_max_pool2d_backward(&Array4::<f32>::ones((1, 3, 2, 2)), &x, &idx)
            .unwrap_err(),
        DeviceLimitKind::Operator,
    );
    assert_eq!(session.calls("*"), before);
    drop(npu);
    session.assert_clean();
    drop(session);

    // Ascend 950: the adaptive operators; the mask operators are refused (CANN deprecates them).
    let session = Double::session();
    session.set_soc("Ascend950PR_9599");
    let npu = session.open();
    assert_eq!(npu.soc_family(), SocFamily::Ascend950);
    let dev = poolgrad::on(&npu).adaptive_max_pool2d(&x.mapv(bf16::from_f32), [4, 4]).unwrap();
    let host = poolgrad::on(&cpu).adaptive_max_pool2d(&x.mapv(bf16::from_f32), [4, 4]).unwrap();
    assert_eq!(dev, host);
    let before = session.calls("*");
    refused(
        &session,
        poolgrad::on(&npu).max_pool2d_with_mask(&x, &p, Bitmask).unwrap_err(),
        DeviceLimitKind::Operator,
    );
    assert_eq!(session.calls("*"), before);
    drop(npu);

    // An unknown SoC runs nothing.
    session.set_soc("Ascend310B1");
    let npu = session.open();
    assert_eq!(npu.soc_family(), SocFamily::Other);
    refused(
        &session,
        poolgrad::on(&npu).adaptive_max_pool2d(&x, [2, 2]).unwrap_err(),
        DeviceLimitKind::Operator,
    );
    drop(npu);
    session.assert_clean();
}
