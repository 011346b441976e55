//! The two seed operators on tensors that stay on an Ascend NPU: upload once, queue the forward
//! and the backward of adaptive max pooling and of max pooling with a mask on one stream, wait
//! once, download once. Nothing is copied between the upload and the download, and nothing waits.
//!
//! ```text
//! cargo run --release --features ascend --example ascend_device                     # CANN from the environment
//! cargo run --release --features ascend --example ascend_device -- --library-dir DIR # CANN (or the test double) in DIR
//! ```
//!
//! Without an NPU it explains what it needs and exits successfully.
//!
//! In a torch_npu program the stream is the framework's and the tensors are its: see
//! `AscendStream::from_raw` and `TensorRef::from_device_ptr` for the contracts (the caller
//! synchronises its stream before it reads a result or frees a buffer).

use std::process::ExitCode;

use ndarray::{Array4, ArrayD};
use poolgrad::device::ascend::{Ascend, NpuTensor};
use poolgrad::{Bitmask, I32Argmax, MaskLayout, MaxPool2dParams};

#[path = "common/open_ascend.rs"]
mod open_ascend;

fn main() -> ExitCode {
    let npu = match open_ascend::open(
        "ascend_device",
        &[
            "Source CANN's set_env.sh on an Ascend machine, then:",
            "  cargo run --release --features ascend --example ascend_device",
        ],
    ) {
        Ok(npu) => npu,
        Err(code) => return code,
    };
    println!("{npu:?}");
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let result = if npu.writes_mask_layout::<I32Argmax>(&params) {
        run::<I32Argmax>(&npu, &params)
    } else {
        run::<Bitmask>(&npu, &params)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("the device's results differ from the CPU's");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs both operators on the device and checks every result against the CPU backend.
fn run<L: MaskLayout>(npu: &Ascend, params: &MaxPool2dParams) -> poolgrad::Result<bool> {
    let x = Array4::from_shape_fn((8, 64, 28, 28), |(n, c, h, w)| {
        ((n * 7 + c * 13 + h * 31 + w * 17) % 101) as f32
    });
    let g_adaptive =
        Array4::from_shape_fn((8, 64, 7, 7), |(n, c, h, w)| ((n + c + h * 7 + w) % 9) as f32 - 4.0);
    let [ho, wo] = params.output_size([28, 28])?;
    let g_pool = Array4::from_shape_fn((8, 64, ho, wo), |(n, c, h, w)| ((n + c + h + w) % 5) as f32 - 2.0);

    // Upload once.
    let x_dev = NpuTensor::from_array(npu, &x)?;
    let g_adaptive_dev = NpuTensor::from_array(npu, &g_adaptive)?;
    let g_pool_dev = NpuTensor::from_array(npu, &g_pool)?;

    // Queue forward and backward of both operators on one stream: no copy, no wait.
    let stream = npu.stream();
    let adaptive = stream.adaptive_max_pool2d(&x_dev, [7, 7])?;
    let adaptive_grad = stream.adaptive_max_pool2d_backward(&g_adaptive_dev, &x_dev, &adaptive.indices)?;
    let pooled = stream.max_pool2d_with_mask(&x_dev, params, L::default())?;
    let pool_grad = stream.max_pool2d_with_mask_backward(&g_pool_dev, &x_dev, &pooled)?;

    // Wait once, then download.
    stream.synchronize()?;
    let cpu_adaptive = poolgrad::adaptive_max_pool2d(&x, [7, 7])?;
    let cpu_adaptive_grad = poolgrad::adaptive_max_pool2d_backward(&g_adaptive, &x, &cpu_adaptive.indices)?;
    let cpu_pooled = poolgrad::max_pool2d_with_mask(&x, params, L::default())?;
    let cpu_pool_grad = poolgrad::max_pool2d_with_mask_backward(&g_pool, &x, &cpu_pooled.mask)?;
    let checks = [
        report("adaptive_max_pool2d output", &adaptive.output.to_array()?, &cpu_adaptive.output),
        report("adaptive_max_pool2d_backward", &adaptive_grad.to_array()?, &cpu_adaptive_grad),
        report(
            &format!("max_pool2d_with_mask ({}) output", L::NAME),
            &pooled.output.to_array()?,
            &cpu_pooled.output,
        ),
        report(
            &format!("max_pool2d_with_mask_backward ({})", L::NAME),
            &pool_grad.to_array()?,
            &cpu_pool_grad,
        ),
    ];
    Ok(checks.iter().all(|&same| same))
}

fn report(what: &str, device: &ArrayD<f32>, cpu: &Array4<f32>) -> bool {
    let same =
        device.shape() == cpu.shape() && device.iter().zip(cpu).all(|(a, b)| a.to_bits() == b.to_bits());
    println!("{what:<44} bit-identical to the CPU: {same}");
    same
}
