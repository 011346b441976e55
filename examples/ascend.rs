//! Runs the two pooling gradients on an Ascend NPU and compares them with the CPU backend.
//!
//! ```text
//! cargo run --release --features ascend --example ascend                     # CANN from the environment
//! cargo run --release --features ascend --example ascend -- --library-dir DIR # CANN (or the test double) in DIR
//! ```
//!
//! Without an NPU it explains what it needs and exits successfully.

use std::process::ExitCode;

use half::f16;
use ndarray::Array4;
use poolgrad::device::ascend::Ascend;
use poolgrad::device::cpu::Cpu;
use poolgrad::{Bitmask, I32Argmax, MaskLayout, MaxPool2dParams, PoolFloat};

#[path = "common/open_ascend.rs"]
mod open_ascend;

fn main() -> ExitCode {
    let npu = match open_ascend::open(
        "ascend",
        &[
            "To run this example on an Ascend machine:",
            "  1. install the CANN toolkit (8.3 or later for aclnnAdaptiveMaxPool2dBackward) and the NPU driver;",
            "  2. source /usr/local/Ascend/ascend-toolkit/set_env.sh (it sets ASCEND_HOME_PATH,",
            "     ASCEND_OPP_PATH and LD_LIBRARY_PATH);",
            "  3. cargo run --release --features ascend --example ascend",
        ],
    ) {
        Ok(npu) => npu,
        Err(code) => return code,
    };
    println!("{npu:?}");
    match run(&npu) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(npu: &Ascend) -> poolgrad::Result<()> {
    let cpu = Cpu::default();
    let x = Array4::from_shape_fn((4, 32, 30, 30), |(n, c, h, w)| {
        ((n * 7 + c * 13 + h * 31 + w * 17) % 101) as f32
    });
    let go = Array4::from_shape_fn((4, 32, 7, 7), |(n, c, h, w)| ((n + c + h * 7 + w) % 9) as f32 - 4.0);

    // Adaptive max pooling, [4, 32, 30, 30] -> 7x7 (overlapping windows), f32 and f16.
    let pooled = poolgrad::on(&cpu).adaptive_max_pool2d(&x, [7, 7])?;
    let on_npu = poolgrad::on(npu).adaptive_max_pool2d_backward(&go, &x, &pooled.indices)?;
    let on_cpu = poolgrad::on(&cpu).adaptive_max_pool2d_backward(&go, &x, &pooled.indices)?;
    report("adaptive_max_pool2d_backward f32", &on_npu, &on_cpu);
    let (x16, go16) = (x.mapv(f16::from_f32), go.mapv(f16::from_f32));
    let on_npu = poolgrad::on(npu).adaptive_max_pool2d_backward(&go16, &x16, &pooled.indices)?;
    let on_cpu = poolgrad::on(&cpu).adaptive_max_pool2d_backward(&go16, &x16, &pooled.indices)?;
    report("adaptive_max_pool2d_backward f16", &on_npu, &on_cpu);

    // Max pooling k3 s2 p1 with the mask layout this SoC writes.
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    if npu.writes_mask_layout::<I32Argmax>(&params) {
        mask_round_trip::<f32, I32Argmax>(npu, &cpu, &x, &params)
    } else {
        mask_round_trip::<f32, Bitmask>(npu, &cpu, &x, &params)
    }
}

fn mask_round_trip<T: PoolFloat, L: MaskLayout>(
    npu: &Ascend,
    cpu: &Cpu,
    x: &Array4<f32>,
    params: &MaxPool2dParams,
) -> poolgrad::Result<()> {
    let x = x.mapv(|v| T::round_from_f64(v.into()));
    let dev = poolgrad::on(npu).max_pool2d_with_mask(&x, params, L::default())?;
    let host = poolgrad::on(cpu).max_pool2d_with_mask(&x, params, L::default())?;
    report(&format!("max_pool2d_with_mask ({}) values", L::NAME), &dev.output, &host.output);
    let same = dev.mask.to_indices::<i64>()? == host.mask.to_indices::<i64>()?;
    println!("{:<44} arg-max identical: {same}", format!("max_pool2d_with_mask ({}) mask", L::NAME));
    let g = dev.output.mapv(|v| T::round_from_f64(v.to_f64_exact().rem_euclid(5.0) - 2.0));
    let on_npu = poolgrad::on(npu).max_pool2d_with_mask_backward(&g, &x, &dev.mask)?;
    let on_cpu = poolgrad::on(cpu).max_pool2d_with_mask_backward(&g, &x, &host.mask)?;
    report(&format!("max_pool2d_with_mask_backward ({})", L::NAME), &on_npu, &on_cpu);
    Ok(())
}

fn report<T: PoolFloat>(what: &str, npu: &Array4<T>, cpu: &Array4<T>) {
    let max_diff =
        npu.iter().zip(cpu).map(|(a, b)| (a.to_f64_exact() - b.to_f64_exact()).abs()).fold(0.0f64, f64::max);
    let identical =
        npu.iter().zip(cpu).all(|(a, b)| a.to_f64_exact().to_bits() == b.to_f64_exact().to_bits());
    println!("{what:<44} max |npu - cpu| = {max_diff:e}, bit-identical: {identical}");
}
