//! Adaptive max pooling forward and backward on a small tensor, printed so a person can check
//! every number by eye.
//!
//! Run with `cargo run --release --example quickstart`.

use ndarray::{Array3, array};
use poolgrad::{adaptive_max_pool2d, adaptive_max_pool2d_backward};

fn main() -> Result<(), poolgrad::Error> {
    // One channel, 5x5. Pooled to 3x3, the windows overlap: rows and columns [0,2), [1,4), [3,5).
    let x: Array3<f32> = array![[
        [1.0, 0.0, 2.0, 0.0, 3.0],
        [0.0, 9.0, 0.0, 0.0, 0.0],
        [4.0, 0.0, 5.0, 0.0, 6.0],
        [0.0, 0.0, 0.0, 8.0, 0.0],
        [7.0, 0.0, 8.0, 0.0, 9.0],
    ]];
    println!("input x (C=1, H=5, W=5):\n{x}\n");
    for i in 0..3 {
        println!("window {i} on each axis: {:?}", poolgrad::geometry::adaptive_window(i, 5, 3));
    }

    let pooled = adaptive_max_pool2d(&x, [3, 3])?;
    println!("\noutput = adaptive_max_pool2d(x, [3, 3]):\n{}", pooled.output);
    println!("\nindices (flat ih * 5 + iw; ties keep the first maximum):\n{}", pooled.indices);

    // Distinct powers of two as gradients, so every sum in grad_input can be read back.
    let grad: Array3<f32> = array![[[1.0, 2.0, 4.0], [8.0, 16.0, 32.0], [64.0, 128.0, 256.0]]];
    let grad_input = adaptive_max_pool2d_backward(&grad, &x, &pooled.indices)?;
    println!("\ngrad_output:\n{grad}");
    println!("\ngrad_input = adaptive_max_pool2d_backward(grad_output, x, indices):\n{grad_input}");
    println!("\nsum(grad_input) = {} = sum(grad_output) = {}", grad_input.sum(), grad.sum());
    Ok(())
}
