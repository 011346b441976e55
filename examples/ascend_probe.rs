//! One command that settles, on a real Ascend NPU, what only hardware can. It runs each of the six
//! 2-D operators per case (3x3 and 1x1 kernels; plain inputs, a tie, a NaN; ceil mode, dilation,
//! strided views, 3-D inputs and inputs that are not exact in f16; f32, f16 and bf16), and the
//! four 3-D operators (the video models' k3 s2 p1 on plain, tie and NaN volumes; adaptive sizes
//! that divide the input and that do not; ceil mode, dilation, `[C, D, H, W]` inputs) and the
//! four unpooling ones (with the double backwards; repeated indices among them), compares
//! every result with the CPU backend, and runs every case that poolgrad refused a second time with
//! poolgrad's refusals left out (`Ascend::cann_decides`), to show where CANN accepts what poolgrad
//! refuses. It also reports the SoC, the CANN release and the ACL interface version, the first
//! mask bytes and the layout and bit order they decode as, which determinism level the operators
//! read (run-to-run bitwise comparison of an overlapping f16 backward, one level set at a time), a
//! plan dropped unrun, a failed run followed by a good one, and `finalize`.
//!
//! ```text
//! cargo run --release --features ascend --example ascend_probe                      # CANN from the environment
//! cargo run --release --features ascend --example ascend_probe -- --library-dir DIR # CANN (or the test double) in DIR
//! ... -- --json FILE                                                                # where the JSON report goes
//! ```
//!
//! It prints a short report and always writes it as JSON (default `ascend_probe.json`), also when
//! the device does not open (then with the reason); attach both to a bug report. It exits with
//! failure when the device does not open, or when a result the device produced differs from the
//! CPU's on a plain input (ties, NaNs and inputs not exact in f16 are reported, not judged).

use std::fmt::Write as _;
use std::process::ExitCode;

use half::{bf16, f16};
use ndarray::{Array4, ArrayD, ArrayViewD, Axis, IxDyn, s};
use poolgrad::device::ascend::{Ascend, DeterministicLevel, NpuTensor, finalize};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::AdaptiveMaxPool2dBackward;
use poolgrad::{
    AscendError, Bitmask, Error, I32Argmax, Mask, MaskLayout, MaxPool2dParams, MaxPool3dParams, Plan,
    PoolFloat, TensorMut, TensorRef,
};

/// One operator run: what happened, in a word, and the detail.
struct Outcome {
    op: &'static str,
    dtype: &'static str,
    /// The case: kernel and input ("3x3 plain", "ceil k2 s3", "3-D", ...).
    case: String,
    /// "match", "mismatch", "refused" (by poolgrad, before any device call), "cann-error" or
    /// "error".
    result: &'static str,
    status: Option<i32>,
    detail: String,
    /// For a run poolgrad refused: the same run with poolgrad's refusals left out
    /// (`Ascend::cann_decides`), as (result, status, detail).
    cann_decides: Option<(&'static str, Option<i32>, String)>,
}

/// The two handles every case runs on: as users get it, and with poolgrad's refusals left out.
struct Devices {
    npu: Ascend,
    raw: Ascend,
}

fn open(dir: Option<&str>) -> poolgrad::Result<Ascend> {
    match dir {
        Some(d) => Ascend::with_library_dir(d, 0),
        None => Ascend::new(0),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut dir, mut json) = (None, "ascend_probe.json".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--library-dir", Some(d)) => dir = Some(d.clone()),
            ("--json", Some(f)) => json = f.clone(),
            _ => {
                eprintln!("usage: ascend_probe [--library-dir DIR] [--json FILE]");
                return ExitCode::FAILURE;
            }
        }
    }
    let opened =
        open(dir.as_deref()).and_then(|npu| Ok(Devices { npu, raw: open(dir.as_deref())?.cann_decides() }));
    let devices = match opened {
        Ok(d) => d,
        Err(e) => {
            println!("The Ascend device did not open: {e}\n");
            println!("The probe needs an Ascend NPU with its driver and the CANN toolkit (8.3 or later for");
            println!(
                "aclnnAdaptiveMaxPool2dBackward): source /usr/local/Ascend/ascend-toolkit/set_env.sh, then"
            );
            println!("  cargo run --release --features ascend --example ascend_probe");
            let report = format!(
                "{{\n  \"poolgrad\": {},\n  \"opened\": false,\n  \"open_error\": {},\n  \"libraries\": {}\n}}\n",
                json_str(env!("CARGO_PKG_VERSION")),
                json_str(&e.to_string()),
                json_str(dir.as_deref().unwrap_or("the default search (ASCEND_HOME_PATH, ...)"))
            );
            write_report(&json, &report);
            return ExitCode::FAILURE;
        }
    };
    let mut outcomes = Vec::new();
    let mut masks = Vec::new();
    for kernel in [3, 1] {
        for kind in ["plain", "tie", "nan"] {
            let case = format!("{kernel}x{kernel} {kind}");
            let p = params(kernel);
            probe::<f32>(
                &devices,
                "f32",
                &case,
                input::<f32>(kind).view(),
                &p,
                true,
                &mut outcomes,
                &mut masks,
            );
            probe::<f16>(
                &devices,
                "f16",
                &case,
                input::<f16>(kind).view(),
                &p,
                true,
                &mut outcomes,
                &mut masks,
            );
            probe::<bf16>(
                &devices,
                "bf16",
                &case,
                input::<bf16>(kind).view(),
                &p,
                true,
                &mut outcomes,
                &mut masks,
            );
        }
    }
    shapes_and_parameters(&devices, &mut outcomes, &mut masks);
    volumes(&devices, &mut outcomes);
    unpooling(&devices, &mut outcomes);
    let determinism = determinism(devices.npu);
    let Ok(npu) = determinism.1 else {
        println!("could not reopen the device after the determinism runs");
        return ExitCode::FAILURE;
    };
    let devices = Devices { npu, raw: devices.raw };
    let lifecycle = lifecycle(&devices, &outcomes);
    let (release, interface) = (
        devices.npu.cann_release().map(|r| format!("{} (from {})", r.version, r.source)),
        devices.npu.acl_interface_version(),
    );
    let info = Info {
        soc: devices.npu.soc_name().to_string(),
        family: devices.npu.soc_family().to_string(),
        release: release
            .unwrap_or_else(|| "unknown (no aclsysGetCANNVersion answer, no install record)".into()),
        interface: interface.unwrap_or_else(|| "unknown (aclrtGetVersion not exported)".into()),
        libraries: devices.npu.library_origin().to_string(),
        memory: devices.npu.memory_total(),
    };
    drop(devices);
    let finalized = match finalize() {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("error: {e}"),
    };
    let report = Report {
        info: &info,
        outcomes: &outcomes,
        masks: &masks,
        determinism: &determinism.0,
        lifecycle: &lifecycle,
        finalized: &finalized,
    };
    print!("{}", report.text());
    if !write_report(&json, &report.json()) {
        return ExitCode::FAILURE;
    }
    let bad = outcomes.iter().any(|o| o.result == "mismatch" && o.case.ends_with("plain"));
    if bad { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn write_report(path: &str, json: &str) -> bool {
    match std::fs::write(path, json) {
        Ok(()) => {
            println!(
                "\nJSON report written to {path}: please attach it, with the text above, to a bug report."
            );
            true
        }
        Err(e) => {
            eprintln!("could not write {path}: {e}");
            false
        }
    }
}

/// What does not depend on the runs.
struct Info {
    soc: String,
    family: String,
    release: String,
    interface: String,
    libraries: String,
    memory: Option<usize>,
}

/// `[2, 3, 5, 6]` values: small integers (exact in every dtype), with a tie in every 3x3 window of
/// the "tie" input and a NaN at a known place in the "nan" input.
fn input<T: PoolFloat>(kind: &str) -> ArrayD<T> {
    input4::<T>(kind, 5).into_dyn()
}

fn input4<T: PoolFloat>(kind: &str, rows: usize) -> Array4<T> {
    Array4::from_shape_fn((2, 3, rows, 6), |(n, c, h, w)| {
        let v = match kind {
            "tie" => ((n + c + h / 2 + w / 2) % 3) as f32,
            _ => ((n * 7 + c * 5 + h * 3 + w * 2) % 11) as f32,
        };
        let v = if kind == "nan" && h == 2 && w == 3 { f32::NAN } else { v };
        // Not exact in f16 (11 significant bits): a rounding to f16 on the device shows.
        let v = if kind == "not-f16-exact" { v + 0.123_456_79 } else { v };
        cast(v)
    })
}

/// Ceil mode (the case where kernel < stride and padding is 0, and a padded one), dilation,
/// strided views, 3-D inputs and inputs that are not exact in f16, each through every operator.
fn shapes_and_parameters(
    d: &Devices,
    outcomes: &mut Vec<Outcome>,
    masks: &mut Vec<(String, &'static str, String, String)>,
) {
    let ceil_small = MaxPool2dParams::new([2, 2]).with_stride([3, 3]).with_ceil_mode(true);
    let ceil_padded =
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]).with_ceil_mode(true);
    let dilated = MaxPool2dParams::new([3, 3]).with_padding([1, 1]).with_dilation([2, 2]);
    for (case, p) in
        [("ceil k2 s3 p0", &ceil_small), ("ceil k3 s2 p1", &ceil_padded), ("dilation 2", &dilated)]
    {
        probe::<f32>(d, "f32", case, input::<f32>("plain").view(), p, false, outcomes, masks);
        probe::<f16>(d, "f16", case, input::<f16>("plain").view(), p, false, outcomes, masks);
    }
    let p = params(3);
    let tall = input4::<f32>("plain", 10);
    let strided = tall.slice(s![.., .., ..;2, ..]).into_dyn();
    probe::<f32>(d, "f32", "3x3 strided view", strided, &p, true, outcomes, masks);
    let x = input::<f32>("plain");
    probe::<f32>(d, "f32", "3x3 3-D [C, H, W]", x.index_axis(Axis(0), 0), &p, true, outcomes, masks);
    let x = input::<f32>("not-f16-exact");
    probe::<f32>(d, "f32", "3x3 not-f16-exact", x.view(), &p, true, outcomes, masks);
}

/// `[2, 3, 4, 5, 6]` volumes of small integers, with ties or a NaN as [`input`] has them.
fn volume<T: PoolFloat>(kind: &str) -> ArrayD<T> {
    ArrayD::from_shape_fn(IxDyn(&[2, 3, 4, 5, 6]), |i| {
        let (n, c, z, h, w) = (i[0], i[1], i[2], i[3], i[4]);
        let v = match kind {
            "tie" => ((n + c + z / 2 + h / 2 + w / 2) % 3) as f32,
            _ => ((n * 7 + c * 5 + z * 4 + h * 3 + w * 2) % 13) as f32,
        };
        cast(if kind == "nan" && z == 1 && h == 2 && w == 3 { f32::NAN } else { v })
    })
}

/// The four 3-D operators (`aclnnMaxPool3dWithArgmax`, `aclnnAdaptiveMaxPool3d` and their
/// backwards) on plain, tie and NaN volumes in f32, f16 and bf16 (k3 s2 p1, the video models'
/// pooling; adaptive to a size that does not divide the input, and to one that does), then ceil
/// mode, a dilation (refused by poolgrad on A2/A3 for the forward, as CANN's op_api does; the
/// backward takes it there) and `[C, D, H, W]` inputs.
fn volumes(d: &Devices, outcomes: &mut Vec<Outcome>) {
    let video = MaxPool3dParams::new([3, 3, 3]).with_stride([2, 2, 2]).with_padding([1, 1, 1]);
    for kind in ["plain", "tie", "nan"] {
        let case = format!("3-D k3s2p1 {kind}");
        volume_probe::<f32>(d, "f32", &case, volume::<f32>(kind).view(), &video, true, outcomes);
        volume_probe::<f16>(d, "f16", &case, volume::<f16>(kind).view(), &video, true, outcomes);
        volume_probe::<bf16>(d, "bf16", &case, volume::<bf16>(kind).view(), &video, true, outcomes);
    }
    let ceil = MaxPool3dParams::new([2, 2, 2]).with_stride([3, 3, 3]).with_ceil_mode(true);
    let dilated = MaxPool3dParams::new([2, 3, 3]).with_padding([1, 1, 1]).with_dilation([1, 2, 2]);
    let x = volume::<f32>("plain");
    volume_probe::<f32>(d, "f32", "3-D ceil k2 s3 p0 plain", x.view(), &ceil, false, outcomes);
    volume_probe::<f32>(d, "f32", "3-D dilation 2 plain", x.view(), &dilated, false, outcomes);
    let unbatched = x.index_axis(Axis(0), 1);
    volume_probe::<f32>(d, "f32", "3-D [C, D, H, W] plain", unbatched, &video, true, outcomes);
}

fn volume_probe<T: PoolFloat>(
    d: &Devices,
    dtype: &'static str,
    case: &str,
    x: ArrayViewD<'_, T>,
    p: &MaxPool3dParams,
    adaptive: bool,
    outcomes: &mut Vec<Outcome>,
) {
    let cpu = Cpu::sequential();
    let tag = |op| (op, dtype, case);
    let sizes: &[[usize; 3]] = if adaptive { &[[3, 4, 4], [2, 5, 3]] } else { &[] };
    for &output_size in sizes {
        let want = poolgrad::on(&cpu).adaptive_max_pool3d(&x, output_size).unwrap();
        let want_fwd = (bits(&want.output), want.indices.clone());
        outcomes.push(record(d, tag("adaptive_max_pool3d"), want_fwd, |dev| {
            poolgrad::on(dev).adaptive_max_pool3d(&x, output_size).map(|r| (bits(&r.output), r.indices))
        }));
        let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 * 0.5 + 1.0));
        let want_g = poolgrad::on(&cpu).adaptive_max_pool3d_backward(&g, &x, &want.indices).unwrap();
        outcomes.push(record(d, tag("adaptive_max_pool3d_backward"), bits(&want_g), |dev| {
            poolgrad::on(dev).adaptive_max_pool3d_backward(&g, &x, &want.indices).map(|r| bits(&r))
        }));
    }
    let want = poolgrad::on(&cpu).max_pool3d_with_indices(&x, p).unwrap();
    let want_fwd = (bits(&want.output), want.indices.clone());
    outcomes.push(record(d, tag("max_pool3d_with_indices"), want_fwd, |dev| {
        poolgrad::on(dev).max_pool3d_with_indices(&x, p).map(|r| (bits(&r.output), r.indices))
    }));
    let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 - 2.0));
    let want_g = poolgrad::on(&cpu).max_pool3d_with_indices_backward(&g, &x, &want.indices, p).unwrap();
    outcomes.push(record(d, tag("max_pool3d_with_indices_backward"), bits(&want_g), |dev| {
        poolgrad::on(dev).max_pool3d_with_indices_backward(&g, &x, &want.indices, p).map(|r| bits(&r))
    }));
}

/// Max unpooling (`aclnnMaxUnpool2d`, `3d`), its backward and the double backwards (run on the
/// unpooling's backward operator): indices of a k2 s2 pooling (SegNet's: no repeats), of a k3 s2
/// p1 one (repeated indices with equal values) and crowded ones (repeats of different values,
/// where poolgrad's rule, the last wins, must hold whatever the device's scatter does), in f32
/// and f16, and f64 for the operators that take it.
fn unpooling(d: &Devices, outcomes: &mut Vec<Outcome>) {
    let segnet = MaxPool2dParams::new([2, 2]).with_stride([2, 2]);
    let overlapping = params(3);
    for (case, p) in [("unpool k2 s2 plain", &segnet), ("unpool k3 s2 p1 plain", &overlapping)] {
        unpool_probe::<f32>(d, "f32", case, input::<f32>("plain").view(), p, None, outcomes);
        unpool_probe::<f16>(d, "f16", case, input::<f16>("plain").view(), p, None, outcomes);
    }
    let x = input::<f64>("plain");
    unpool_probe::<f64>(d, "f64", "unpool k2 s2 plain", x.view(), &segnet, None, outcomes);
    let x = input::<f32>("plain");
    unpool_probe::<f32>(d, "f32", "unpool crowded", x.view(), &segnet, Some(5), outcomes);
    // 3-D: the video pooling's indices (repeats of equal values).
    let cpu = Cpu::sequential();
    let v = volume::<f32>("plain");
    let video = MaxPool3dParams::new([3, 3, 3]).with_stride([2, 2, 2]).with_padding([1, 1, 1]);
    let pooled = poolgrad::on(&cpu).max_pool3d_with_indices(&v, &video).unwrap();
    let (y, idx, size) = (&pooled.output, &pooled.indices, [4, 5, 6]);
    let tag = |op| (op, "f32", "unpool 3-D k3 s2 p1 plain");
    let want = poolgrad::on(&cpu).max_unpool3d(y, idx, size).unwrap();
    outcomes.push(record(d, tag("max_unpool3d"), bits(&want), |dev| {
        poolgrad::on(dev).max_unpool3d(y, idx, size).map(|r| bits(&r))
    }));
    let g = v.mapv(|x| x * 0.5 + 1.0);
    let want = poolgrad::on(&cpu).max_unpool3d_backward(&g, idx).unwrap();
    outcomes.push(record(d, tag("max_unpool3d_backward"), bits(&want), |dev| {
        poolgrad::on(dev).max_unpool3d_backward(&g, idx).map(|r| bits(&r))
    }));
    let want = poolgrad::on(&cpu).max_pool3d_double_backward(&g, idx).unwrap();
    outcomes.push(record(d, tag("max_pool3d_double_backward"), bits(&want), |dev| {
        poolgrad::on(dev).max_pool3d_double_backward(&g, idx).map(|r| bits(&r))
    }));
}

/// The 2-D unpooling, its backward and the double backward with the indices of `p` on `x`, or
/// with every index folded into the first `crowd` positions of its plane.
fn unpool_probe<T: PoolFloat>(
    d: &Devices,
    dtype: &'static str,
    case: &str,
    x: ArrayViewD<'_, T>,
    p: &MaxPool2dParams,
    crowd: Option<usize>,
    outcomes: &mut Vec<Outcome>,
) {
    let cpu = Cpu::sequential();
    let tag = |op| (op, dtype, case);
    let pooled = poolgrad::on(&cpu).max_pool2d_with_indices(&x, p).unwrap();
    let idx = match crowd {
        Some(k) => pooled.indices.mapv(|i| i % k as i64),
        None => pooled.indices.clone(),
    };
    let (y, size) = (&pooled.output, [x.shape()[2], x.shape()[3]]);
    let want = poolgrad::on(&cpu).max_unpool2d(y, &idx, size).unwrap();
    outcomes.push(record(d, tag("max_unpool2d"), bits(&want), |dev| {
        poolgrad::on(dev).max_unpool2d(y, &idx, size).map(|r| bits(&r))
    }));
    let g = x.mapv(|v| cast::<T>(wide(v) as f32 * 0.5 + 1.0));
    let want = poolgrad::on(&cpu).max_unpool2d_backward(&g, &idx).unwrap();
    outcomes.push(record(d, tag("max_unpool2d_backward"), bits(&want), |dev| {
        poolgrad::on(dev).max_unpool2d_backward(&g, &idx).map(|r| bits(&r))
    }));
    let want = poolgrad::on(&cpu).max_pool2d_double_backward(&g, &idx).unwrap();
    outcomes.push(record(d, tag("max_pool2d_double_backward"), bits(&want), |dev| {
        poolgrad::on(dev).max_pool2d_double_backward(&g, &idx).map(|r| bits(&r))
    }));
}

fn cast<T: PoolFloat>(v: f32) -> T {
    T::round_from_f64(f64::from(v))
}

fn wide<T: PoolFloat>(v: T) -> f64 {
    v.to_f64_exact()
}

fn params(kernel: usize) -> MaxPool2dParams {
    if kernel == 1 {
        MaxPool2dParams::new([1, 1])
    } else {
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1])
    }
}

fn classify<V: PartialEq + std::fmt::Debug>(
    got: poolgrad::Result<V>,
    want: &V,
) -> (&'static str, Option<i32>, String) {
    match got {
        Ok(v) if v == *want => ("match", None, String::new()),
        Ok(v) => ("mismatch", None, format!("device {v:?} != cpu {want:?}")),
        Err(e @ Error::DeviceLimit { .. }) => ("refused", None, e.to_string()),
        Err(e @ Error::Ascend(AscendError::Cann { status, .. })) => ("cann-error", status, e.to_string()),
        Err(e) => ("error", None, e.to_string()),
    }
}

/// Runs `run` on the device; if poolgrad refused it, runs it again with the refusals left out.
fn record<V: PartialEq + std::fmt::Debug>(
    d: &Devices,
    (op, dtype, case): (&'static str, &'static str, &str),
    want: V,
    run: impl Fn(&Ascend) -> poolgrad::Result<V>,
) -> Outcome {
    let (result, status, detail) = classify(run(&d.npu), &want);
    let cann_decides = (result == "refused").then(|| classify(run(&d.raw), &want));
    Outcome { op, dtype, case: case.to_string(), result, status, detail, cann_decides }
}

/// NaN-aware equality of float arrays: the bits of every element.
fn bits<T: PoolFloat>(a: &ArrayD<T>) -> Vec<u64> {
    a.iter().map(|&v| wide(v).to_bits()).collect()
}

#[allow(clippy::too_many_arguments)]
fn probe<T: PoolFloat>(
    d: &Devices,
    dtype: &'static str,
    case: &str,
    x: ArrayViewD<'_, T>,
    p: &MaxPool2dParams,
    adaptive: bool,
    outcomes: &mut Vec<Outcome>,
    masks: &mut Vec<(String, &'static str, String, String)>,
) {
    let cpu = Cpu::sequential();
    let tag = |op| (op, dtype, case);
    if adaptive && p.kernel() != [1, 1] {
        let want = poolgrad::on(&cpu).adaptive_max_pool2d(&x, [2, 3]).unwrap();
        let want_fwd = (bits(&want.output), want.indices.clone());
        outcomes.push(record(d, tag("adaptive_max_pool2d"), want_fwd, |dev| {
            poolgrad::on(dev).adaptive_max_pool2d(&x, [2, 3]).map(|r| (bits(&r.output), r.indices))
        }));
        let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 * 0.5 + 1.0));
        let want_g = poolgrad::on(&cpu).adaptive_max_pool2d_backward(&g, &x, &want.indices).unwrap();
        outcomes.push(record(d, tag("adaptive_max_pool2d_backward"), bits(&want_g), |dev| {
            poolgrad::on(dev).adaptive_max_pool2d_backward(&g, &x, &want.indices).map(|r| bits(&r))
        }));
    }
    let want = poolgrad::on(&cpu).max_pool2d_with_indices(&x, p).unwrap();
    let want_fwd = (bits(&want.output), want.indices.clone());
    outcomes.push(record(d, tag("max_pool2d_with_indices"), want_fwd, |dev| {
        poolgrad::on(dev).max_pool2d_with_indices(&x, p).map(|r| (bits(&r.output), r.indices))
    }));
    let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 - 2.0));
    let want_g = poolgrad::on(&cpu).max_pool2d_with_indices_backward(&g, &x, &want.indices, p).unwrap();
    outcomes.push(record(d, tag("max_pool2d_with_indices_backward"), bits(&want_g), |dev| {
        poolgrad::on(dev).max_pool2d_with_indices_backward(&g, &x, &want.indices, p).map(|r| bits(&r))
    }));
    // The mask operators take no dilation (neither CANN's nor poolgrad's mask layouts encode it).
    if p.dilation() != [1, 1] {
        return;
    }
    if d.npu.writes_mask_layout::<I32Argmax>(p) {
        mask_probe::<T, I32Argmax>(d, tag, &x, p, outcomes, masks);
    } else {
        mask_probe::<T, Bitmask>(d, tag, &x, p, outcomes, masks);
    }
}

fn mask_probe<'c, T: PoolFloat, L: MaskLayout>(
    d: &Devices,
    tag: impl Fn(&'static str) -> (&'static str, &'static str, &'c str),
    x: &ArrayViewD<'_, T>,
    p: &MaxPool2dParams,
    outcomes: &mut Vec<Outcome>,
    masks: &mut Vec<(String, &'static str, String, String)>,
) {
    let cpu = Cpu::sequential();
    let want = poolgrad::on(&cpu).max_pool2d_with_mask(x, p, L::default()).unwrap();
    let want_idx = want.mask.to_indices::<i64>().unwrap();
    let got = poolgrad::on(&d.npu).max_pool2d_with_mask(x, p, L::default());
    let (_, dtype, case) = tag("");
    if let Ok(dev) = &got
        && (case.ends_with("plain") || case.starts_with("ceil"))
        && dtype == "f32"
    {
        let raw = dev.mask.as_array();
        let first: Vec<String> = raw.iter().take(32).map(|b| format!("{:02x}", *b as u8)).collect();
        masks.push((case.to_string(), L::NAME, first.join(" "), layout_found(raw, p, x.shape(), &want_idx)));
    }
    let want_fwd = (bits(&want.output), Some(want_idx));
    outcomes.push(record(d, tag("max_pool2d_with_mask"), want_fwd, |dev| {
        poolgrad::on(dev)
            .max_pool2d_with_mask(x, p, L::default())
            .map(|r| (bits(&r.output), r.mask.to_indices::<i64>().ok()))
    }));
    let g = want.output.mapv(|v| cast::<T>(wide(v) as f32 + 3.0));
    let want_g = poolgrad::on(&cpu).max_pool2d_with_mask_backward(&g, x, &want.mask).unwrap();
    outcomes.push(record(d, tag("max_pool2d_with_mask_backward"), bits(&want_g), |dev| {
        poolgrad::on(dev).max_pool2d_with_mask_backward(&g, x, &want.mask).map(|r| bits(&r))
    }));
}

/// Which reading of the device's mask bytes gives the CPU's arg-max: the int32 prefix, the 5HD bit
/// mask with bit b = channel b (LSB first), or with the bits of each 16-bit word reversed.
fn layout_found(raw: &ArrayD<i8>, p: &MaxPool2dParams, shape: &[usize], want: &ArrayD<i64>) -> String {
    let decodes = |raw: ArrayD<i8>, bitmask: bool| -> bool {
        let got = if bitmask {
            Mask::<Bitmask, IxDyn>::from_raw(raw, p, shape).and_then(|m| m.to_indices::<i64>())
        } else {
            Mask::<I32Argmax, IxDyn>::from_raw(raw, p, shape).and_then(|m| m.to_indices::<i64>())
        };
        got.is_ok_and(|g| g == *want)
    };
    let mut reversed = raw.clone();
    let flat = reversed.as_slice_mut().expect("a mask the crate allocated is contiguous");
    for word in flat.chunks_exact_mut(2) {
        let w = u16::from_le_bytes([word[0] as u8, word[1] as u8]).reverse_bits().to_le_bytes();
        word.copy_from_slice(&[w[0] as i8, w[1] as i8]);
    }
    let found = [
        (decodes(raw.clone(), false), "I32Argmax (int32 prefix)"),
        (decodes(raw.clone(), true), "Bitmask, bit b = channel b (LSB first)"),
        (decodes(reversed, true), "Bitmask with reversed bit order (MSB first)"),
    ];
    let names: Vec<&str> = found.iter().filter(|(ok, _)| *ok).map(|(_, n)| *n).collect();
    if names.is_empty() { "none of the known layouts".to_string() } else { names.join(" or ") }
}

/// A change of the deterministic setting, taking the device and giving it back.
type Setting = fn(Ascend) -> poolgrad::Result<Ascend>;

/// Which level of `ACL_OPT_DETERMINISTIC` the operators read: an f16 adaptive backward whose
/// gradients all land on one input per plane (an overlapping scatter, with addends whose sum
/// depends on their order) is run 8 times with nothing set, with the context's level only, with
/// the process's only, and with both; for each, how many distinct results the 8 runs gave (1:
/// bitwise reproducible) and what `is_deterministic` read. Returns the device as it was.
fn determinism(npu: Ascend) -> (Vec<(&'static str, String)>, poolgrad::Result<Ascend>) {
    let x = Array4::<f16>::zeros((1, 16, 33, 33));
    let idx = Array4::<i64>::zeros((1, 16, 16, 16));
    let g = Array4::from_shape_fn((1, 16, 16, 16), |(_, c, i, j)| {
        let k = c * 256 + i * 16 + j;
        f16::from_f32(if k % 2 == 0 { 1024.0 + (k % 7) as f32 } else { 6.1e-5 * (1 + k % 5) as f32 })
    });
    let runs = |npu: &Ascend| -> String {
        let mut seen: Vec<Vec<u16>> = Vec::new();
        for _ in 0..8 {
            let mut gi = Array4::<f16>::zeros((1, 16, 33, 33));
            let op = AdaptiveMaxPool2dBackward {
                grad_output: TensorRef::from_array(&g).unwrap(),
                self_: TensorRef::from_array(&x).unwrap(),
                indices: TensorRef::from_array(&idx).unwrap(),
                grad_input: TensorMut::from_array(&mut gi).unwrap(),
            };
            if let Err(e) = Plan::new(npu, op).and_then(|plan| plan.run()) {
                return format!("error: {e}");
            }
            let result: Vec<u16> = gi.iter().map(|v| v.to_bits()).collect();
            if !seen.contains(&result) {
                seen.push(result);
            }
        }
        format!("{} distinct result(s) in 8 runs; is_deterministic: {:?}", seen.len(), npu.is_deterministic())
    };
    let mut found = Vec::new();
    let mut npu = npu;
    let settings: [(&'static str, Setting); 4] = [
        ("none", |n| n.deterministic(false)),
        ("context only", |n| n.deterministic(false)?.deterministic_at(DeterministicLevel::Context, true)),
        ("process only", |n| n.deterministic(false)?.deterministic_at(DeterministicLevel::Process, true)),
        ("both", |n| n.deterministic(true)),
    ];
    for (name, set) in settings {
        npu = match set(npu) {
            Ok(n) => n,
            Err(e) => {
                found.push((name, format!("could not be set: {e}")));
                return (found, Err(e));
            }
        };
        found.push((name, runs(&npu)));
    }
    (found, npu.deterministic(false))
}

/// A plan dropped unrun, then a run; a run CANN refuses (the first that poolgrad refused and CANN
/// refused too, in the second pass), then a run that must match.
fn lifecycle(d: &Devices, outcomes: &[Outcome]) -> Vec<(&'static str, String)> {
    let cpu = Cpu::sequential();
    let x = input::<f32>("plain");
    let p = params(3);
    let want = poolgrad::on(&cpu).max_pool2d_with_indices(&x, &p).unwrap();
    let check = |dev: &Ascend| match poolgrad::on(dev).max_pool2d_with_indices(&x, &p) {
        Ok(r) if r == want => "the next run matches the CPU".to_string(),
        Ok(_) => "the next run differs from the CPU".to_string(),
        Err(e) => format!("the next run failed: {e}"),
    };
    let g = want.output.mapv(|v| v + 1.0);
    let mut gi = ArrayD::<f32>::zeros(x.raw_dim());
    let dropped = poolgrad::op::MaxPool2dWithIndicesBackward {
        grad_output: TensorRef::from_view(g.view()).unwrap(),
        self_: TensorRef::from_view(x.view()).unwrap(),
        indices: TensorRef::from_view(want.indices.view()).unwrap(),
        params: p,
        grad_input: TensorMut::from_view(gi.view_mut()).unwrap(),
    };
    let dropped = match Plan::new(&d.npu, dropped) {
        Ok(plan) => {
            drop(plan);
            format!("planned and dropped unrun; {}", check(&d.npu))
        }
        Err(e) => format!("planning failed: {e}"),
    };
    let failed = outcomes
        .iter()
        .find_map(|o| match &o.cann_decides {
            Some(("cann-error", _, detail)) => Some(format!("{} {} {}: {detail}", o.op, o.dtype, o.case)),
            _ => None,
        })
        .map_or_else(
            || "no run failed in CANN (nothing poolgrad refused was refused by CANN too)".to_string(),
            |failure| format!("{failure}; then {}", check(&d.raw)),
        );
    vec![
        ("dropped_plan", dropped),
        ("failed_run", failed),
        ("device_resident", device_resident(&d.npu)),
        ("device_resident_family", device_resident_family(&d.npu)),
    ]
}

/// The 3-D poolings, the double backwards and max unpooling on tensors uploaded once and queued
/// back to back on poolgrad's stream: 5-D descriptors over device memory, indices a forward wrote
/// feeding the next operator without a copy, and the gathers' `self` described over their output.
fn device_resident_family(npu: &Ascend) -> String {
    let run = || -> poolgrad::Result<Vec<&'static str>> {
        let sequential = Cpu::sequential();
        let cpu = poolgrad::on(&sequential);
        let x = volume::<f32>("plain");
        // Kernel 2, stride 2: windows share no input, so the indices repeat no position and the
        // device may unpool them.
        let p = MaxPool3dParams::new([2, 2, 2]).with_stride([2, 2, 2]);
        let want = cpu.max_pool3d_with_indices_i32(&x, &p)?;
        let g = want.output.mapv(|v| v * 0.5 + 1.0);
        let want_g = cpu.max_pool3d_with_indices_backward(&g, &x, &want.indices, &p)?;
        let want_adaptive = cpu.adaptive_max_pool3d_i32(&x, [2, 5, 3])?;
        let want_unpooled = cpu.max_unpool3d(&want.output, &want.indices, [4, 5, 6])?;
        let ggi = x.mapv(|v| v - 3.0);
        let indices64 = want.indices.mapv(i64::from);
        let want_gg = cpu.max_pool3d_double_backward(&ggi, &indices64)?;
        let stream = npu.stream();
        let (x_dev, g_dev) = (NpuTensor::from_array(npu, &x)?, NpuTensor::from_array(npu, &g)?);
        let (ggi_dev, indices64_dev) =
            (NpuTensor::from_array(npu, &ggi)?, NpuTensor::from_array(npu, &indices64)?);
        let pooled = stream.max_pool3d_with_indices(&x_dev, &p)?;
        let grad = stream.max_pool3d_with_indices_backward(&g_dev, &x_dev, &pooled.indices, &p)?;
        let adaptive = stream.adaptive_max_pool3d(&x_dev, [2, 5, 3])?;
        let unpooled = stream.max_unpool3d(&pooled.output, &pooled.indices, [4, 5, 6])?;
        let gg = stream.max_pool3d_double_backward(&ggi_dev, &indices64_dev)?;
        let mut differ = Vec::new();
        let checks: [(&'static str, bool); 6] = [
            ("max_pool3d_with_indices output", pooled.output.to_array()? == want.output),
            ("max_pool3d_with_indices indices", pooled.indices.to_array()? == want.indices),
            ("max_pool3d_with_indices_backward", grad.to_array()? == want_g),
            ("adaptive_max_pool3d indices", adaptive.indices.to_array()? == want_adaptive.indices),
            ("max_unpool3d", unpooled.to_array()? == want_unpooled),
            ("max_pool3d_double_backward", gg.to_array()? == want_gg),
        ];
        differ.extend(checks.iter().filter(|(_, same)| !same).map(|(name, _)| *name));
        Ok(differ)
    };
    match run() {
        Ok(differ) if differ.is_empty() => {
            "the 3-D poolings, their backwards, the 3-D unpooling and double backward \
                                            on device tensors, queued on one stream, match the CPU"
                .to_string()
        }
        Ok(differ) => format!("differs from the CPU: {}", differ.join(", ")),
        Err(e) => format!("error: {e}"),
    }
}

/// Forward and backward of both seed operators on tensors uploaded once and queued back to back
/// on poolgrad's stream (operator descriptors destroyed right after each launch, the mask zeroed
/// on the stream, no wait until the downloads), against the CPU.
fn device_resident(npu: &Ascend) -> String {
    let run = || -> poolgrad::Result<Vec<&'static str>> {
        let x = input4::<f32>("plain", 5);
        let p = params(3);
        let want = poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d(&x, [2, 3])?;
        let g = want.output.mapv(|v| v * 0.5 + 1.0);
        let want_g = poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d_backward(&g, &x, &want.indices)?;
        let stream = npu.stream();
        let (x_dev, g_dev) = (NpuTensor::from_array(npu, &x)?, NpuTensor::from_array(npu, &g)?);
        let adaptive = stream.adaptive_max_pool2d(&x_dev, [2, 3])?;
        let adaptive_grad = stream.adaptive_max_pool2d_backward(&g_dev, &x_dev, &adaptive.indices)?;
        let mut differ = Vec::new();
        if adaptive.indices.to_array()? != want.indices.into_dyn() {
            differ.push("adaptive_max_pool2d indices");
        }
        if adaptive_grad.to_array()? != want_g.into_dyn() {
            differ.push("adaptive_max_pool2d_backward");
        }
        let mask_differs = if npu.writes_mask_layout::<I32Argmax>(&p) {
            device_mask_differs::<I32Argmax>(npu, &stream, &x, &p)?
        } else {
            device_mask_differs::<Bitmask>(npu, &stream, &x, &p)?
        };
        differ.extend(mask_differs);
        Ok(differ)
    };
    match run() {
        Ok(differ) if differ.is_empty() => {
            "forward and backward of both seed operators on device tensors, queued on one stream, match the CPU"
                .to_string()
        }
        Ok(differ) => format!("differs from the CPU: {}", differ.join(", ")),
        Err(e) => format!("error: {e}"),
    }
}

/// The mask forward and backward of [`device_resident`]: which of them differ from the CPU.
fn device_mask_differs<L: MaskLayout>(
    npu: &Ascend,
    stream: &poolgrad::device::ascend::AscendStream<'_>,
    x: &Array4<f32>,
    p: &MaxPool2dParams,
) -> poolgrad::Result<Vec<&'static str>> {
    let want = poolgrad::on(&Cpu::sequential()).max_pool2d_with_mask(x, p, L::default())?;
    let g = want.output.mapv(|v| v - 2.0);
    let want_g = poolgrad::on(&Cpu::sequential()).max_pool2d_with_mask_backward(&g, x, &want.mask)?;
    let (x_dev, g_dev) = (NpuTensor::from_array(npu, x)?, NpuTensor::from_array(npu, &g)?);
    let pooled = stream.max_pool2d_with_mask(&x_dev, p, L::default())?;
    let grad = stream.max_pool2d_with_mask_backward(&g_dev, &x_dev, &pooled)?;
    let mut differ = Vec::new();
    if pooled.output.to_array()? != want.output.into_dyn() {
        differ.push("max_pool2d_with_mask output");
    }
    if grad.to_array()? != want_g.into_dyn() {
        differ.push("max_pool2d_with_mask_backward");
    }
    Ok(differ)
}

struct Report<'a> {
    info: &'a Info,
    outcomes: &'a [Outcome],
    masks: &'a [(String, &'static str, String, String)],
    determinism: &'a [(&'static str, String)],
    lifecycle: &'a [(&'static str, String)],
    finalized: &'a str,
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Report<'_> {
    fn memory(&self) -> String {
        self.info.memory.map_or_else(|| "unknown".into(), |b| format!("{b} bytes"))
    }

    /// Runs poolgrad refused and CANN accepted in the second pass (CANN's answer: success or a
    /// result, matching or not).
    fn cann_accepted(&self) -> impl Iterator<Item = &Outcome> {
        self.outcomes
            .iter()
            .filter(|o| o.cann_decides.as_ref().is_some_and(|c| c.0 != "cann-error" && c.0 != "error"))
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let i = self.info;
        let _ = writeln!(t, "poolgrad {} Ascend probe", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(t, "SoC: {} ({})", i.soc, i.family);
        let _ = writeln!(t, "CANN release: {}; ACL interface version: {}", i.release, i.interface);
        let _ = writeln!(t, "libraries from {}", i.libraries);
        let _ = writeln!(t, "device memory (aclrtGetMemInfo, total): {}", self.memory());
        for (setting, found) in self.determinism {
            let _ = writeln!(t, "determinism, {setting}: {found}");
        }
        for (what, found) in self.lifecycle {
            let _ = writeln!(t, "{what}: {found}");
        }
        for (case, layout, first, found) in self.masks {
            let _ = writeln!(t, "mask {case} (expected {layout}): layout found: {found}");
            let _ = writeln!(t, "  first bytes: {first}");
        }
        let count = |r: &str| self.outcomes.iter().filter(|o| o.result == r).count();
        let _ = writeln!(
            t,
            "runs: {} match, {} mismatch, {} refused by poolgrad ({} of them accepted by CANN), {} CANN errors, {} other errors",
            count("match"),
            count("mismatch"),
            count("refused"),
            self.cann_accepted().count(),
            count("cann-error"),
            count("error")
        );
        for o in self.outcomes.iter().filter(|o| o.result != "match" && o.result != "refused") {
            let _ = writeln!(t, "  {} {} {}: {} {}", o.op, o.dtype, o.case, o.result, o.detail);
        }
        for o in self.cann_accepted() {
            let (r, _, detail) = o.cann_decides.as_ref().unwrap();
            let _ = writeln!(
                t,
                "  refused by poolgrad, accepted by CANN: {} {} {}: {r} {detail}",
                o.op, o.dtype, o.case
            );
        }
        let _ = writeln!(t, "finalize: {}", self.finalized);
        t
    }

    fn json(&self) -> String {
        let opt = |s: Option<i32>| s.map_or("null".into(), |s| s.to_string());
        let runs: Vec<String> = self
            .outcomes
            .iter()
            .map(|o| {
                let second = o.cann_decides.as_ref().map_or("null".into(), |(r, st, detail)| {
                    format!("{{\"result\": {}, \"status\": {}, \"detail\": {}}}", json_str(r), opt(*st), json_str(detail))
                });
                format!(
                    "    {{\"op\": {}, \"dtype\": {}, \"case\": {}, \"result\": {}, \"status\": {}, \"detail\": {}, \"cann_decides\": {}}}",
                    json_str(o.op),
                    json_str(o.dtype),
                    json_str(&o.case),
                    json_str(o.result),
                    opt(o.status),
                    json_str(&o.detail),
                    second
                )
            })
            .collect();
        let masks: Vec<String> = self
            .masks
            .iter()
            .map(|(case, layout, first, found)| {
                format!(
                    "    {{\"case\": {}, \"expected_layout\": {}, \"first_bytes\": {}, \"layout_found\": {}}}",
                    json_str(case),
                    json_str(layout),
                    json_str(first),
                    json_str(found)
                )
            })
            .collect();
        let pairs = |items: &[(&str, String)]| -> String {
            items
                .iter()
                .map(|(k, v)| format!("{}: {}", json_str(k), json_str(v)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let i = self.info;
        format!(
            "{{\n  \"poolgrad\": {},\n  \"opened\": true,\n  \"soc\": {},\n  \"family\": {},\n  \"cann_release\": {},\n  \"acl_interface_version\": {},\n  \"libraries\": {},\n  \"memory_total\": {},\n  \"determinism\": {{{}}},\n  \"lifecycle\": {{{}}},\n  \"cann_accepted_what_poolgrad_refused\": {},\n  \"finalize\": {},\n  \"masks\": [\n{}\n  ],\n  \"runs\": [\n{}\n  ]\n}}\n",
            json_str(env!("CARGO_PKG_VERSION")),
            json_str(&i.soc),
            json_str(&i.family),
            json_str(&i.release),
            json_str(&i.interface),
            json_str(&i.libraries),
            i.memory.map_or("null".into(), |b| b.to_string()),
            pairs(self.determinism),
            pairs(self.lifecycle),
            self.cann_accepted().count(),
            json_str(self.finalized),
            masks.join(",\n"),
            runs.join(",\n")
        )
    }
}
