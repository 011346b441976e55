//! Every kernel gives the same bits in the copy compiled for the processor's vector and
//! conversion instructions (on x86-64: AVX2 with F16C)
//! as in the baseline copy with the software conversions (`Cpu::with_vector_instructions`):
//! all six operations and the 3-D poolings, in all four element types, on every work split
//! (whole planes, sparse planes, planes of one gradient, bands of rows; `Bitmask` blocks
//! decoded, read bit by bit, gathered, and banded; volumes in blocks and alone), on values chosen to break a conversion: NaNs with payloads, both
//! infinities, `-0`, the smallest and largest subnormals, values that round across a power of
//! two, and gradients whose sums fall into the subnormals.
//!
//! (Under `POOLGRAD_ISA=baseline` both sides run the baseline copy, and the test only checks
//! that the setting is harmless: CI also runs the suite without it.)

use half::{bf16, f16};
use ndarray::{Array4, Array5};
use poolgrad::device::cpu::Cpu;
use poolgrad::{Bitmask, I32Argmax, MaskLayout, MaxPool2dParams, MaxPool3dParams, PoolFloat, on};

/// Values that break a conversion, as the bits of each element type, cycled through a tensor in
/// a scrambled order so that windows hold ties, NaNs and infinities side by side.
trait Awkward: PoolFloat {
    fn awkward() -> Vec<Self>;
}

/// The `f16` values: zeros, the least and greatest subnormals, the least normal, values around
/// 1 and 2 (where rounding crosses a power of two), the largest finite, infinities, and NaNs
/// with payloads of both signs, quiet and signalling; and small gradients whose sums are
/// subnormal or round up into the normals.
const F16_BITS: [u16; 20] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3BFF, 0x3C00, 0x3C01, 0x3FFF, 0x4000, 0x7BFF, 0xFBFF,
    0x7C00, 0xFC00, 0x7E01, 0xFD55, 0x7C01, 0x0200, 0x0003,
];

/// The `bf16` values, likewise (the least normal is `0x0080`).
const BF16_BITS: [u16; 20] = [
    0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F7F, 0x3F80, 0x3F81, 0x3FFF, 0x4000, 0x7F7F, 0xFF7F,
    0x7F80, 0xFF80, 0x7FC1, 0xFFD5, 0x7F81, 0x0040, 0x0003,
];

impl Awkward for f16 {
    fn awkward() -> Vec<f16> {
        F16_BITS.map(f16::from_bits).to_vec()
    }
}

impl Awkward for bf16 {
    fn awkward() -> Vec<bf16> {
        BF16_BITS.map(bf16::from_bits).to_vec()
    }
}

impl Awkward for f32 {
    fn awkward() -> Vec<f32> {
        [0.0, -0.0, f32::from_bits(1), -f32::from_bits(0x007F_FFFF), 1.0, 1.0 + f32::EPSILON, f32::MAX]
            .into_iter()
            .chain([f32::INFINITY, f32::NEG_INFINITY, f32::from_bits(0x7FC0_1234), -2.5, 3.0e-39])
            .collect()
    }
}

impl Awkward for f64 {
    fn awkward() -> Vec<f64> {
        f32::awkward().into_iter().map(f64::from).chain([f64::from_bits(1), f64::MIN]).collect()
    }
}

/// A tensor of `shape` drawn from `T::awkward()` (a fixed scramble of the indices).
fn tensor<T: Awkward>(shape: [usize; 4], salt: usize) -> Array4<T> {
    let values = T::awkward();
    Array4::from_shape_fn(shape, |(n, c, h, w)| {
        let k = ((n * 7 + c) * 131 + h * 31 + w + salt).wrapping_mul(2_654_435_761) >> 7;
        values[k % values.len()]
    })
}

/// The bytes of every element, to compare bit for bit (NaNs included).
fn bits<T: PoolFloat, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Vec<u8> {
    a.iter().flat_map(|v| bytemuck::bytes_of(v).to_vec()).collect()
}

/// The bits of each sum, a NaN standing for any NaN (`None`): a sum of two NaNs with different
/// payloads carries one of them, and Rust leaves the compiler free to choose which (it may swap
/// an addition's operands, and does when it vectorises), so the copies agree that such a sum is
/// NaN, not on its payload. (A sum with one NaN carries that NaN's payload in every copy: the
/// forwards' and single gradients' payloads are still compared by `bits`.)
fn sum_bits<T: PoolFloat, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> Vec<Option<Vec<u8>>> {
    a.iter().map(|v| (!v.to_f64_exact().is_nan()).then(|| bytemuck::bytes_of(v).to_vec())).collect()
}

/// The devices compared: sequential, and two threads that split every call (bands of rows
/// where planes are fewer than threads); each with and without the vector instructions.
fn devices() -> Vec<(Cpu, Cpu)> {
    let two = || Cpu::with_threads(2).expect("a pool of 2 threads").with_grain(0);
    vec![
        (Cpu::sequential(), Cpu::sequential().with_vector_instructions(false)),
        (two(), two().with_vector_instructions(false)),
    ]
}

/// Adaptive pooling forward and backward, on both copies, give the same bits.
fn adaptive<T: Awkward>(shape: [usize; 4], out: [usize; 2]) {
    let x = tensor::<T>(shape, 0);
    for (vector, baseline) in devices() {
        let a = on(&vector).adaptive_max_pool2d(&x, out).unwrap();
        let b = on(&baseline).adaptive_max_pool2d(&x, out).unwrap();
        assert_eq!(
            (bits(&a.output), &a.indices),
            (bits(&b.output), &b.indices),
            "forward {shape:?} to {out:?}"
        );
        let go = tensor::<T>([shape[0], shape[1], out[0], out[1]], 3);
        let ga = on(&vector).adaptive_max_pool2d_backward(&go, &x, &a.indices).unwrap();
        let gb = on(&baseline).adaptive_max_pool2d_backward(&go, &x, &a.indices).unwrap();
        assert_eq!(sum_bits(&ga), sum_bits(&gb), "backward {shape:?} to {out:?} on {vector:?}");
    }
}

/// Max pooling with indices and with both mask layouts, forward and backward, on both copies.
fn max_pool<T: Awkward>(shape: [usize; 4], params: MaxPool2dParams) {
    let x = tensor::<T>(shape, 0);
    for (vector, baseline) in devices() {
        let a = on(&vector).max_pool2d_with_indices(&x, &params).unwrap();
        let b = on(&baseline).max_pool2d_with_indices(&x, &params).unwrap();
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices), "forward {shape:?}");
        let go = tensor::<T>([shape[0], shape[1], a.output.dim().2, a.output.dim().3], 5);
        let ga = on(&vector).max_pool2d_with_indices_backward(&go, &x, &a.indices, &params).unwrap();
        let gb = on(&baseline).max_pool2d_with_indices_backward(&go, &x, &a.indices, &params).unwrap();
        assert_eq!(sum_bits(&ga), sum_bits(&gb), "backward {shape:?} {params:?} on {vector:?}");
        if params.dilation() == [1, 1] {
            mask::<T, I32Argmax>(&x, &go, &params, (&vector, &baseline));
            mask::<T, Bitmask>(&x, &go, &params, (&vector, &baseline));
        }
    }
}

/// The mask operators of layout `L` on both copies.
fn mask<T: Awkward, L: MaskLayout + Default>(
    x: &Array4<T>,
    go: &Array4<T>,
    params: &MaxPool2dParams,
    (vector, baseline): (&Cpu, &Cpu),
) {
    let a = on(vector).max_pool2d_with_mask(x, params, L::default()).unwrap();
    let b = on(baseline).max_pool2d_with_mask(x, params, L::default()).unwrap();
    assert_eq!(bits(&a.output), bits(&b.output), "{} forward {:?}", L::NAME, x.dim());
    assert_eq!(a.mask.as_array(), b.mask.as_array(), "{} mask {:?}", L::NAME, x.dim());
    let ga = on(vector).max_pool2d_with_mask_backward(go, x, &a.mask).unwrap();
    let gb = on(baseline).max_pool2d_with_mask_backward(go, x, &a.mask).unwrap();
    assert_eq!(sum_bits(&ga), sum_bits(&gb), "{} backward {:?} on {vector:?}", L::NAME, x.dim());
}

/// A volume of `shape` drawn from `T::awkward()`, as [`tensor`] draws a plane.
fn volume<T: Awkward>(shape: [usize; 5]) -> Array5<T> {
    let values = T::awkward();
    Array5::from_shape_fn(shape, |(n, c, d, h, w)| {
        let k = (((n * 7 + c) * 37 + d) * 131 + h * 31 + w).wrapping_mul(2_654_435_761) >> 7;
        values[k % values.len()]
    })
}

/// The 3-D forwards (max pooling with `params`, and adaptive to `out`), and their backwards, on
/// both copies.
fn volumes<T: Awkward>(shape: [usize; 5], params: MaxPool3dParams, out: [usize; 3]) {
    let x = volume::<T>(shape);
    for (vector, baseline) in devices() {
        let a = on(&vector).max_pool3d_with_indices(&x, &params).unwrap();
        let b = on(&baseline).max_pool3d_with_indices(&x, &params).unwrap();
        assert_eq!((bits(&a.output), &a.indices), (bits(&b.output), &b.indices), "3-D forward {shape:?}");
        let go = volume::<T>(a.output.shape().try_into().unwrap());
        let ga = on(&vector).max_pool3d_with_indices_backward(&go, &x, &a.indices, &params).unwrap();
        let gb = on(&baseline).max_pool3d_with_indices_backward(&go, &x, &a.indices, &params).unwrap();
        assert_eq!(sum_bits(&ga), sum_bits(&gb), "3-D backward {shape:?} on {vector:?}");
        let a = on(&vector).adaptive_max_pool3d(&x, out).unwrap();
        let b = on(&baseline).adaptive_max_pool3d(&x, out).unwrap();
        assert_eq!(
            (bits(&a.output), &a.indices),
            (bits(&b.output), &b.indices),
            "adaptive 3-D {shape:?} to {out:?}"
        );
    }
}

/// Every split of every operation, in one element type.
fn every_path<T: Awkward>() {
    // Volumes eight at a time with a last block of five, three alone (bands of output depths
    // on two threads), dilated and ceil-mode windows.
    let video = MaxPool3dParams::new([3, 3, 3]).with_stride([2, 2, 2]).with_padding([1, 1, 1]);
    volumes::<T>([3, 7, 5, 9, 12], video, [2, 4, 5]);
    volumes::<T>([1, 3, 6, 7, 9], video, [6, 3, 4]);
    volumes::<T>(
        [2, 5, 7, 8, 9],
        MaxPool3dParams::new([2, 3, 2]).with_dilation([2, 1, 3]).with_ceil_mode(true),
        [3, 8, 2],
    );
    // Whole planes with overlapping windows (dense), sparse planes (more than 8 inputs per
    // gradient), planes of one gradient (global pooling), and one plane in bands.
    adaptive::<T>([2, 5, 9, 9], [4, 4]);
    adaptive::<T>([1, 3, 30, 30], [3, 3]);
    adaptive::<T>([2, 3, 7, 7], [1, 1]);
    adaptive::<T>([1, 1, 64, 48], [7, 5]);
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    // 16-channel `Bitmask` blocks (decoded), narrow blocks (gathered), one block in bands, and
    // windows too large to decode (read bit by bit); ceil mode and dilation.
    max_pool::<T>([2, 16, 12, 12], stem);
    max_pool::<T>([3, 3, 20, 20], stem);
    max_pool::<T>([1, 16, 40, 40], stem);
    max_pool::<T>([1, 16, 20, 20], MaxPool2dParams::new([17, 17]).with_stride([1, 1]));
    max_pool::<T>([1, 17, 11, 11], MaxPool2dParams::new([2, 2]).with_stride([1, 1]).with_ceil_mode(true));
    max_pool::<T>([2, 2, 13, 13], MaxPool2dParams::new([3, 3]).with_dilation([2, 2]));
}

#[test]
fn f16_kernels_give_the_same_bits_in_both_copies() {
    every_path::<f16>();
}

#[test]
fn bf16_kernels_give_the_same_bits_in_both_copies() {
    every_path::<bf16>();
}

#[test]
fn f32_kernels_give_the_same_bits_in_both_copies() {
    every_path::<f32>();
}

#[test]
fn f64_kernels_give_the_same_bits_in_both_copies() {
    every_path::<f64>();
}

/// Sums of small gradients land in the subnormals, or add up past them, at known places: a
/// plane with its one 1.0 at `(1, 1)`, max-pooled by 2x2 windows of stride 1 and padding 1, has
/// four windows that pick it. Four gradients of the least `f16` subnormal (2^-24) sum there to
/// 4 · 2^-24, still subnormal (`0x0004`); four of the greatest (1023 · 2^-24) to
/// 4092 · 2^-24 = 1.998046875 · 2^-13, a normal number (`0x0BFE`), worked by hand, on both
/// copies and every device.
#[test]
fn subnormal_sums_are_exact_in_both_copies() {
    let x = Array4::from_shape_fn((1, 1, 2, 2), |(_, _, h, w)| {
        f16::from_f32(if (h, w) == (1, 1) { 1.0 } else { 0.0 })
    });
    let params = MaxPool2dParams::new([2, 2]).with_stride([1, 1]).with_padding([1, 1]);
    for (vector, baseline) in devices() {
        for cpu in [&vector, &baseline] {
            let f = on(cpu).max_pool2d_with_indices(&x, &params).unwrap();
            assert_eq!(f.indices.iter().filter(|&&i| i == 3).count(), 4, "{:?}", f.indices);
            for (gradient, sum) in [(0x0001, 0x0004), (0x03FF, 0x0BFE)] {
                let go = f.output.mapv(|_| f16::from_bits(gradient));
                let g = on(cpu).max_pool2d_with_indices_backward(&go, &x, &f.indices, &params).unwrap();
                assert_eq!(g[[0, 0, 1, 1]].to_bits(), sum, "gradients {gradient:#06x} on {cpu:?}");
            }
        }
    }
}
