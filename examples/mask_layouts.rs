//! The two layouts of the Ascend int8 mask, byte by byte, next to PyTorch-style indices; then the
//! backward through each.
//!
//! Run with `cargo run --release --example mask_layouts`.

use ndarray::{Array3, array, s};
use poolgrad::{Bitmask, I32Argmax, MaskLayout, MaxPool2dParams, PooledMask};

fn print_nonzero<L: MaskLayout>(name: &str, pooled: &PooledMask<f32, L, ndarray::Ix3>) {
    let mask = pooled.mask.as_array();
    println!("\n{name}\n  shape {:?} = {} bytes", mask.shape(), mask.len());
    let bytes: Vec<u8> = mask.iter().map(|&b| b as u8).collect();
    for (row, chunk) in bytes.chunks(16).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            println!("  byte {:4}: {}", row * 16, hex.join(" "));
        }
    }
    println!("  (rows of zeros not shown)");
}

fn main() -> Result<(), poolgrad::Error> {
    // Channel 0 is the worked example of the Ascend notes (with a tie in the last window);
    // channel 1 is its negation.
    let c0 =
        array![[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]];
    let mut x = Array3::<f32>::zeros((2, 4, 4));
    x.slice_mut(s![0, .., ..]).assign(&c0);
    x.slice_mut(s![1, .., ..]).assign(&c0.mapv(|v| -v));
    let params = MaxPool2dParams::new([2, 2]);
    println!("input (C=2, H=4, W=4), kernel 2x2, stride 2:\n{x}");

    let torch = poolgrad::max_pool2d_with_indices(&x, &params)?;
    println!("\nPyTorch-style flat indices ih*W + iw:\n{}", torch.indices);

    let a2 = poolgrad::max_pool2d_with_mask(&x, &params, I32Argmax)?;
    print_nonzero("I32Argmax (Atlas A2/A3): little-endian i32 indices from byte 0", &a2);
    let legacy = poolgrad::max_pool2d_with_mask(&x, &params, Bitmask)?;
    print_nonzero(
        "Bitmask (Atlas training, 310P, 1x1 kernels): u16 word (k, p) at byte 2*(k*32 + p), bit = channel",
        &legacy,
    );
    println!(
        "\nboth decode to the same indices: {}",
        a2.mask.to_indices::<i64>()? == legacy.mask.to_indices::<i64>()?
    );

    let g = array![[[1.0f32, 2.0], [3.0, 4.0]], [[10.0, 20.0], [30.0, 40.0]]];
    let via_a2 = poolgrad::max_pool2d_with_mask_backward(&g, &x, &a2.mask)?;
    let via_bits = poolgrad::max_pool2d_with_mask_backward(&g, &x, &legacy.mask)?;
    let via_idx = poolgrad::max_pool2d_with_indices_backward(&g, &x, &torch.indices, &params)?;
    println!("\ngrad_output:\n{g}\n\ngrad_input (same through all three):\n{via_bits}");
    assert!(via_a2 == via_idx && via_bits == via_idx);
    Ok(())
}
