//! All six operators through `Plan` on a double of each SoC family, and the executor's life as
//! CANN documents it: made by phase 1 when the plan runs and launched at once (no
//! `aclSetAclOpExecutorRepeatable`, no destroy), none for a plan dropped unrun, a launch that fails
//! (not destroyed by us, its buffers freed only after the stream is synchronised). After each: every handle released,
//! no protocol violation (the double records a destroy or use after a launch as one).
#![cfg(feature = "ascend")]

mod ascend;

use ascend::{Double, Session};
use ndarray::Array4;
use poolgrad::device::ascend::{Ascend, SocFamily};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2dBackward, MaxPool2dWithIndices};
use poolgrad::{
    AscendError, Bitmask, DeviceLimitKind, Error, I32Argmax, MaskLayout, MaxPool2dParams, Plan, TensorMut,
    TensorRef,
};

/// The six operators, in the order of [`SUPPORT`]'s columns.
const OPS: [&str; 6] = [
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    "max_pool2d_with_mask",
    "max_pool2d_with_mask_backward",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
];

/// Which operators each SoC runs in f32, from the product tables of the six ops-nn documents
/// (`aclnnAdaptiveMaxPool2d.md` ... `aclnnMaxPool2dWithIndicesBackward.md`), written out here
/// independently of the crate's own table.
const SUPPORT: [(&str, SocFamily, [bool; 6]); 6] = [
    ("Ascend910B1", SocFamily::AtlasA2A3, [true; 6]),
    ("Ascend910_9391", SocFamily::AtlasA2A3, [true; 6]),
    // The bare `Ascend910B` is a first-generation training chip (NpuArch 1001), not an A2.
    ("Ascend910B", SocFamily::AtlasTraining, [true, false, true, true, false, false]),
    ("Ascend310P3", SocFamily::Atlas310P, [false, false, true, false, false, false]),
    ("Ascend950PR_9599", SocFamily::Ascend950, [true, true, false, false, true, true]),
    ("Ascend310B1", SocFamily::Other, [false; 6]),
];

/// Small integers: exact in f16, so the training chips' f16 computation of f32 input agrees.
fn input() -> Array4<f32> {
    Array4::from_shape_fn((2, 3, 6, 7), |(n, c, h, w)| ((n * 7 + c * 5 + h * 3 + w * 2) % 11) as f32)
}

/// Runs operator `op` on `npu`, comparing every output with the CPU's.
fn run_op(npu: &Ascend, op: usize) -> poolgrad::Result<()> {
    let cpu = Cpu::sequential();
    let x = input();
    let p = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    match op {
        0 => {
            let got = poolgrad::on(npu).adaptive_max_pool2d(&x, [4, 3])?;
            assert_eq!(got, poolgrad::on(&cpu).adaptive_max_pool2d(&x, [4, 3]).unwrap());
        }
        1 => {
            let fwd = poolgrad::on(&cpu).adaptive_max_pool2d(&x, [4, 3]).unwrap();
            let g = fwd.output.mapv(|v| v + 0.5);
            let got = poolgrad::on(npu).adaptive_max_pool2d_backward(&g, &x, &fwd.indices)?;
            assert_eq!(got, poolgrad::on(&cpu).adaptive_max_pool2d_backward(&g, &x, &fwd.indices).unwrap());
        }
        2 | 3 if npu.writes_mask_layout::<I32Argmax>(&p) => mask_op::<I32Argmax>(npu, op == 3, &p)?,
        2 | 3 => mask_op::<Bitmask>(npu, op == 3, &p)?,
        4 => {
            let got = poolgrad::on(npu).max_pool2d_with_indices(&x, &p)?;
            assert_eq!(got, poolgrad::on(&cpu).max_pool2d_with_indices(&x, &p).unwrap());
        }
        _ => {
            let fwd = poolgrad::on(&cpu).max_pool2d_with_indices_i32(&x, &p).unwrap();
            let g = fwd.output.mapv(|v| v * 0.25);
            let got = poolgrad::on(npu).max_pool2d_with_indices_backward(&g, &x, &fwd.indices, &p)?;
            assert_eq!(
                got,
                poolgrad::on(&cpu).max_pool2d_with_indices_backward(&g, &x, &fwd.indices, &p).unwrap()
            );
            // i64 indices are converted to the device's int32.
            let wide = fwd.indices.mapv(i64::from);
            assert_eq!(poolgrad::on(npu).max_pool2d_with_indices_backward(&g, &x, &wide, &p)?, got);
        }
    }
    Ok(())
}

fn mask_op<L: MaskLayout>(npu: &Ascend, backward: bool, p: &MaxPool2dParams) -> poolgrad::Result<()> {
    let cpu = Cpu::sequential();
    let x = input();
    let host = poolgrad::on(&cpu).max_pool2d_with_mask(&x, p, L::default()).unwrap();
    if backward {
        let g = host.output.mapv(|v| v - 3.0);
        let got = poolgrad::on(npu).max_pool2d_with_mask_backward(&g, &x, &host.mask)?;
        assert_eq!(got, poolgrad::on(&cpu).max_pool2d_with_mask_backward(&g, &x, &host.mask).unwrap());
    } else {
        let dev = poolgrad::on(npu).max_pool2d_with_mask(&x, p, L::default())?;
        assert_eq!(dev.output, host.output);
        assert_eq!(dev.mask.to_indices::<i64>().unwrap(), host.mask.to_indices::<i64>().unwrap());
    }
    Ok(())
}

fn session_on(soc: &str) -> Session {
    let session = Double::session();
    session.set_soc(soc);
    session
}

#[test]
fn every_operator_runs_on_each_family_that_documents_it_and_is_refused_elsewhere() {
    for (soc, family, supported) in SUPPORT {
        let session = session_on(soc);
        let npu = session.open();
        assert_eq!(npu.soc_family(), family, "{soc}");
        assert_eq!(npu.soc_name(), soc);
        for (op, name) in OPS.iter().enumerate() {
            let before = session.calls("*");
            match run_op(&npu, op) {
                Ok(()) => assert!(supported[op], "{name} ran on {soc}, which CANN does not document for it"),
                Err(e) => {
                    assert!(!supported[op], "{name} on {soc}: {e}");
                    assert!(
                        matches!(
                            &e,
                            Error::DeviceLimit { device: "ascend", about: DeviceLimitKind::Operator, .. }
                        ),
                        "{name} on {soc}: {e:?}"
                    );
                    assert!(e.to_string().contains(soc), "the error names the SoC: {e}");
                    assert_eq!(session.calls("*"), before, "{name} on {soc}: refused before any device call");
                }
            }
        }
        // No executor was ever made repeatable (CANN refuses it for the mask operators).
        assert_eq!(session.calls("aclSetAclOpExecutorRepeatable"), 0, "{soc}");
        // Every launched executor was left to CANN: none was destroyed by the crate.
        assert_eq!(session.calls("aclDestroyAclOpExecutor"), 0, "{soc}");
        drop(npu);
        session.assert_clean();
    }
}

/// An adaptive backward plan of `g`, `x`, `idx` writing `gi`.
fn adaptive_plan<'d, 'a>(
    npu: &'d Ascend,
    g: &'a [f32],
    x: &'a [f32],
    idx: &'a [i64],
    gi: &'a mut [f32],
) -> Plan<'d, Ascend, AdaptiveMaxPool2dBackward<'a, f32, i64>> {
    Plan::new(
        npu,
        AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_slice(g, &[1, 1, 2, 2]).unwrap(),
            self_: TensorRef::from_slice(x, &[1, 1, 4, 4]).unwrap(),
            indices: TensorRef::from_slice(idx, &[1, 1, 2, 2]).unwrap(),
            grad_input: TensorMut::from_slice(gi, &[1, 1, 4, 4]).unwrap(),
        },
    )
    .unwrap()
}

#[test]
fn a_plan_makes_no_executor_until_it_runs() {
    // CANN documents one life for an executor that is not repeatable: phase 1 makes it, phase 2
    // releases it. So phase 1 runs with the launch, and a plan dropped unrun leaves nothing.
    let session = session_on("Ascend910B1");
    let npu = session.open();
    let (g, x, idx) = ([1.0f32; 4], [0.0f32; 16], [0i64, 2, 8, 10]);
    let mut gi = [0.0f32; 16];
    let plan = adaptive_plan(&npu, &g, &x, &idx, &mut gi);
    assert_eq!(session.calls("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize"), 0);
    assert_eq!(session.live("executors"), 0);
    drop(plan);

    // A mask plan too (its executor could never have been made repeatable).
    let (xm, mut out) = ([0.0f32; 16], [0.0f32; 4]);
    let mut mask = vec![0i8; 4 * 64];
    let plan = Plan::new(
        &npu,
        poolgrad::op::MaxPool2dWithMask::<f32, I32Argmax> {
            input: TensorRef::from_slice(&xm, &[1, 1, 4, 4]).unwrap(),
            params: MaxPool2dParams::new([2, 2]),
            output: TensorMut::from_slice(&mut out, &[1, 1, 2, 2]).unwrap(),
            mask: poolgrad::MaskMut::new(
                TensorMut::from_slice(&mut mask, &[1, 1, 4, 64]).unwrap(),
                I32Argmax,
            ),
        },
    );
    drop(plan.unwrap());
    assert_eq!(session.calls("aclnnMaxPool2dWithMaskGetWorkspaceSize"), 0);
    assert_eq!(session.calls("aclDestroyAclOpExecutor"), 0);

    // Run, phase 1 and the launch come together, and CANN releases the executor.
    adaptive_plan(&npu, &g, &x, &idx, &mut gi).run().unwrap();
    assert_eq!(session.calls("aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize"), 1);
    assert_eq!(session.calls("aclnnAdaptiveMaxPool2dBackward"), 1);
    assert_eq!(gi, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    drop(npu);
    session.assert_clean();
}

#[test]
fn a_plan_runs_on_another_thread_with_both_phases_there() {
    // The plan is `Send`: made on one thread, run on another, its executor never crosses a thread.
    let session = session_on("Ascend910B1");
    let npu = session.open();
    let (g, x, idx) = ([1.0f32; 4], [0.0f32; 16], [0i64, 2, 8, 10]);
    let mut gi = [0.0f32; 16];
    let plan = adaptive_plan(&npu, &g, &x, &idx, &mut gi);
    std::thread::scope(|s| s.spawn(move || plan.run().unwrap()).join().unwrap());
    assert_eq!(gi[10], 1.0);
    drop(npu);
    session.assert_clean();
}

#[test]
fn a_failed_launch_leaves_the_executor_to_cann_and_waits_before_freeing() {
    // Each launch fails part-way: the double keeps the kernels launched before the failure queued,
    // so a buffer freed before the stream is synchronised is a violation, as is destroying the
    // executor CANN deleted.
    for status in [561_000, 361_001, 507_015] {
        let session = session_on("Ascend910B1");
        let npu = session.open();
        let (g, x, idx) = ([1.0f32; 4], [0.0f32; 16], [0i64, 2, 8, 10]);
        let mut gi = [0.0f32; 16];
        session.inject("aclnnAdaptiveMaxPool2dBackward", status, 0);
        let e = adaptive_plan(&npu, &g, &x, &idx, &mut gi).run().unwrap_err();
        assert!(
            matches!(e, Error::Ascend(AscendError::Cann { function: "aclnnAdaptiveMaxPool2dBackward", status: Some(s), .. }) if s == status),
            "{e}"
        );
        assert_eq!(session.calls("aclDestroyAclOpExecutor"), 0, "CANN deleted it");
        assert!(session.calls("aclrtSynchronizeStream") >= 1, "synchronised before the buffers were freed");
        // The same device runs the next plan.
        adaptive_plan(&npu, &g, &x, &idx, &mut gi).run().unwrap();
        assert_eq!(gi[0], 1.0);
        drop(npu);
        session.assert_clean();
    }
    // The same for a with-indices forward on the 950.
    let session = session_on("Ascend950DT_9571");
    let npu = session.open();
    session.inject("aclnnMaxPool2dWithIndices", 561_000, 0);
    let x = input();
    let e = poolgrad::on(&npu).max_pool2d_with_indices_i32(&x, &MaxPool2dParams::new([2, 2])).unwrap_err();
    assert!(
        matches!(e, Error::Ascend(AscendError::Cann { function: "aclnnMaxPool2dWithIndices", .. })),
        "{e}"
    );
    drop(npu);
    session.assert_clean();
}

#[test]
fn device_parameters_are_checked_in_phase_1() {
    let x = input();
    // Dilation: only the 950's kernels take it.
    let dilated = MaxPool2dParams::new([2, 2]).with_dilation([2, 1]);
    let session = session_on("Ascend910B2C");
    let npu = session.open();
    let e = poolgrad::on(&npu).max_pool2d_with_indices(&x, &dilated).unwrap_err();
    assert!(matches!(&e, Error::DeviceLimit { about: DeviceLimitKind::Parameter("dilation"), .. }), "{e}");
    drop(npu);
    session.assert_clean();
    drop(session);
    let session = session_on("Ascend950PR_9589");
    let npu = session.open();
    let got = poolgrad::on(&npu).max_pool2d_with_indices(&x, &dilated).unwrap();
    assert_eq!(got, poolgrad::on(&Cpu::sequential()).max_pool2d_with_indices(&x, &dilated).unwrap());
    drop(npu);
    session.assert_clean();
    drop(session);

    // The 310P's ceil-mode limit: H = 4, k = 1, s = 2 would start a window at 4 = H.
    let session = session_on("Ascend310P1");
    let npu = session.open();
    let x4 = Array4::<f32>::zeros((1, 1, 4, 5));
    let ceil = MaxPool2dParams::new([1, 1]).with_stride([2, 2]).with_ceil_mode(true);
    let before = session.calls("*");
    let e = poolgrad::on(&npu).max_pool2d_with_mask(&x4, &ceil, Bitmask).unwrap_err();
    assert!(matches!(&e, Error::DeviceLimit { about: DeviceLimitKind::Parameter("ceil_mode"), .. }), "{e}");
    assert!(e.to_string().contains("on H = 4"), "{e}");
    assert_eq!(session.calls("*"), before);
    // Without ceil mode, or where the last window starts inside, it runs.
    let floor = MaxPool2dParams::new([1, 1]).with_stride([2, 2]);
    poolgrad::on(&npu).max_pool2d_with_mask(&x4, &floor, Bitmask).unwrap();
    let inside = MaxPool2dParams::new([2, 2]).with_stride([2, 2]).with_ceil_mode(true);
    poolgrad::on(&npu).max_pool2d_with_mask(&Array4::<f32>::zeros((1, 1, 5, 5)), &inside, Bitmask).unwrap();
    drop(npu);
    session.assert_clean();
}

#[test]
fn f64_adaptive_forward_runs_where_cann_documents_it() {
    // aclnnAdaptiveMaxPool2d lists DOUBLE (an AI CPU kernel on every SoC), Atlas training included.
    let x = input().mapv(f64::from);
    for soc in ["Ascend910B3", "Ascend910ProB"] {
        let session = session_on(soc);
        let npu = session.open();
        let got = poolgrad::on(&npu).adaptive_max_pool2d(&x, [3, 5]).unwrap();
        assert_eq!(got, poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d(&x, [3, 5]).unwrap());
        drop(npu);
        session.assert_clean();
    }
}

#[test]
fn with_indices_plans_use_int32_indices_on_the_device() {
    let session = session_on("Ascend910_9382");
    let npu = session.open();
    let x = input();
    let p = MaxPool2dParams::new([2, 3]);
    let (mut out, mut idx) = (vec![0.0f32; 2 * 3 * 3 * 2], vec![0i64; 2 * 3 * 3 * 2]);
    let plan = Plan::new(
        &npu,
        MaxPool2dWithIndices {
            input: TensorRef::from_slice(x.as_slice().unwrap(), &[2, 3, 6, 7]).unwrap(),
            params: p,
            output: TensorMut::from_slice(&mut out, &[2, 3, 3, 2]).unwrap(),
            indices: TensorMut::from_slice(&mut idx, &[2, 3, 3, 2]).unwrap(),
        },
    )
    .unwrap();
    plan.run().unwrap();
    let want = poolgrad::on(&Cpu::sequential()).max_pool2d_with_indices(&x, &p).unwrap();
    assert_eq!(idx, want.indices.iter().copied().collect::<Vec<_>>());
    // An index outside its plane never reaches the device.
    let g = Array4::<f32>::ones((2, 3, 3, 2));
    let mut bad = want.indices.mapv(|_| 0i64);
    bad[[1, 2, 0, 1]] = 42;
    let before = session.calls("*");
    let e = poolgrad::on(&npu).max_pool2d_with_indices_backward(&g, &x, &bad, &p).unwrap_err();
    assert!(matches!(&e, Error::IndexOutOfRange { value: 42, .. }), "{e}");
    assert_eq!(session.calls("*"), before);
    drop(npu);
    session.assert_clean();
}

#[test]
fn cann_decides_lets_refused_calls_reach_cann() {
    // On Atlas training poolgrad refuses the adaptive backward and the with-indices forward (the
    // product tables), before any device call. `cann_decides` sends them to CANN, whose phase 1
    // answers for itself (the double models ops-nn's dtype lists: an empty list for the SoC).
    let session = session_on("Ascend910B");
    let npu = session.open();
    for op in [1, 4] {
        let before = session.calls("*");
        let e = run_op(&npu, op).unwrap_err();
        assert!(matches!(e, Error::DeviceLimit { about: DeviceLimitKind::Operator, .. }), "{e:?}");
        assert_eq!(session.calls("*"), before);
    }
    let npu = npu.cann_decides();
    for (op, function) in [
        (1, "aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize"),
        (4, "aclnnMaxPool2dWithIndicesGetWorkspaceSize"),
    ] {
        let e = run_op(&npu, op).unwrap_err();
        assert!(
            matches!(e, Error::Ascend(AscendError::Cann { function: f, status: Some(161_002), .. }) if f == function),
            "{e:?}"
        );
    }
    // What protects memory stays: an index outside the plane is refused before any device call.
    let (g, x, idx) = ([1.0f32; 4], [0.0f32; 16], [0i64, 2, 8, 16]);
    let mut gi = [0.0f32; 16];
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::from_slice(&g, &[1, 1, 2, 2]).unwrap(),
        self_: TensorRef::from_slice(&x, &[1, 1, 4, 4]).unwrap(),
        indices: TensorRef::from_slice(&idx, &[1, 1, 2, 2]).unwrap(),
        grad_input: TensorMut::from_slice(&mut gi, &[1, 1, 4, 4]).unwrap(),
    };
    assert!(matches!(Plan::new(&npu, op), Err(Error::IndexOutOfRange { .. })));
    drop(npu);
    session.assert_clean();
}

#[test]
fn cann_decides_also_lets_parameters_layouts_and_plane_limits_through() {
    use poolgrad::device::Device;
    // A2: poolgrad refuses a dilation (only the 950 takes one) and a `Bitmask` mask for a 3x3
    // kernel (A2 writes `I32Argmax`) before any device call; with `cann_decides` both reach
    // CANN's phase 1, whatever it answers.
    let x = Array4::from_shape_fn((1, 2, 4, 4), |(_, c, h, w)| (c * 16 + h * 4 + w) as f32);
    let session = session_on("Ascend910B1");
    let npu = session.open();
    let dilated = MaxPool2dParams::new([2, 2]).with_dilation([2, 2]);
    let k3 = MaxPool2dParams::new([3, 3]);
    let before = session.calls("*");
    assert!(matches!(
        poolgrad::on(&npu).max_pool2d_with_indices(&x, &dilated),
        Err(Error::DeviceLimit { about: DeviceLimitKind::Parameter("dilation"), .. })
    ));
    assert!(matches!(
        poolgrad::on(&npu).max_pool2d_with_mask(&x, &k3, Bitmask),
        Err(Error::DeviceLimit { about: DeviceLimitKind::MaskLayout, .. })
    ));
    assert_eq!(session.calls("*"), before);
    assert_eq!(npu.limits().max_non_divisible_adaptive_plane, Some(1 << 24));
    let npu = npu.cann_decides();
    let (indices, mask) =
        ("aclnnMaxPool2dWithIndicesGetWorkspaceSize", "aclnnMaxPool2dWithMaskGetWorkspaceSize");
    let _ = poolgrad::on(&npu).max_pool2d_with_indices(&x, &dilated);
    let _ = poolgrad::on(&npu).max_pool2d_with_mask(&x, &k3, Bitmask);
    assert_eq!(session.calls(indices), 1, "the dilated call reached CANN");
    assert_eq!(session.calls(mask), 1, "the Bitmask call reached CANN");
    // The documented 2^24 limit is poolgrad's, and left out; the int32 plane limit protects memory.
    assert_eq!(npu.limits().max_non_divisible_adaptive_plane, None);
    assert_eq!(npu.limits().max_plane, Some(i32::MAX as usize));
    drop(npu);
    session.assert_clean();
}
