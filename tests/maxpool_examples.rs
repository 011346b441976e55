//! Hand-worked examples of max pooling with indices and with both Ascend mask layouts. Expected
//! values and bytes are worked out in the comments (and in ascend-semantics.md A.5).

mod common;

use common::{cast, to_f64};
use ndarray::{Array3, Array4, array};
use poolgrad::device::cpu::Cpu;
use poolgrad::{
    ArgmaxIndex, Bitmask, Error, I32Argmax, Mask, MaxPool2dParams, PoolFloat, max_pool2d_with_indices,
    max_pool2d_with_indices_backward, max_pool2d_with_mask, max_pool2d_with_mask_backward,
};

fn a5<T: PoolFloat>() -> Array3<T> {
    array![[[0., 5., 1., 1.], [2., 3., 7., 0.], [9., 1., 6., 4.], [0., 8., 6., 2.]]].mapv(cast::<T>)
}

fn bytes(mask: &ndarray::ArrayD<i8>) -> Vec<u8> {
    mask.iter().map(|&b| b as u8).collect()
}

/// A.5: 4x4, k=2, s=2. P1 prefix `01 00 00 00 06 00 00 00 08 00 00 00 0a 00 00 00`, the rest
/// zero; P2 (C1 = 1, 32 words = 64 bytes per window offset k): bit 0 of the words (k=0, p=2),
/// (k=0, p=3) (the tie keeps k=0, not k=2), (k=1, p=0) and (k=2, p=1), at byte k*64 + 2p.
#[test]
fn ascend_worked_example_byte_for_byte() {
    let x = a5::<f32>();
    let params = MaxPool2dParams::new([2, 2]);

    let p1 = max_pool2d_with_mask(&x, &params, I32Argmax).unwrap();
    assert_eq!(p1.output, array![[[5., 7.], [9., 6.]]]);
    assert_eq!(p1.mask.as_array().shape(), &[1, 4, 64]);
    let mut want = vec![0u8; 256];
    want[..16].copy_from_slice(&[1, 0, 0, 0, 6, 0, 0, 0, 8, 0, 0, 0, 0x0a, 0, 0, 0]);
    assert_eq!(bytes(&p1.mask.as_array().clone().into_dyn()), want);

    let p2 = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    let mut want = vec![0u8; 256];
    for (k, p) in [(0, 2), (0, 3), (1, 0), (2, 1)] {
        want[k * 64 + 2 * p] = 1;
    }
    assert_eq!(bytes(&p2.mask.as_array().clone().into_dyn()), want);

    // Backward of either: gradInput[0,1]=g0, [1,2]=g1, [2,0]=g2, [2,2]=g3, rest 0.
    let g = array![[[1.0f32, 2.0], [3.0, 4.0]]];
    let expected = array![[[0., 1., 0., 0.], [0., 0., 2., 0.], [3., 0., 4., 0.], [0., 0., 0., 0.]]];
    assert_eq!(max_pool2d_with_mask_backward(&g, &x, &p1.mask).unwrap(), expected);
    assert_eq!(max_pool2d_with_mask_backward(&g, &x, &p2.mask).unwrap(), expected);
    let idx = max_pool2d_with_indices(&x, &params).unwrap().indices;
    assert_eq!(idx, array![[[1, 6], [8, 10]]]);
    assert_eq!(max_pool2d_with_indices_backward(&g, &x, &idx, &params).unwrap(), expected);
}

/// A raw mask copied off a device (here: the A.5 bytes written by hand) decodes to the indices.
#[test]
fn raw_device_masks_decode() {
    let params = MaxPool2dParams::new([2, 2]);
    let mut p1 = vec![0i8; 256];
    p1[..16].copy_from_slice(&[1, 0, 0, 0, 6, 0, 0, 0, 8, 0, 0, 0, 10, 0, 0, 0]);
    let p1 =
        Mask::<I32Argmax, _>::from_raw(Array3::from_shape_vec((1, 4, 64), p1).unwrap(), &params, &[1, 4, 4])
            .unwrap();
    assert_eq!(p1.to_indices::<i32>().unwrap(), array![[[1, 6], [8, 10]]]);

    let mut p2 = vec![0i8; 256];
    for (k, p) in [(0, 2), (0, 3), (1, 0), (2, 1)] {
        p2[k * 64 + 2 * p] = 1;
    }
    // Channels 1..15 are padding: the hardware may set their bits; they are ignored.
    p2[1] = -1;
    p2[64 * 3 + 9] = 0x7f;
    let p2 =
        Mask::<Bitmask, _>::from_raw(Array3::from_shape_vec((1, 4, 64), p2).unwrap(), &params, &[1, 4, 4])
            .unwrap();
    assert_eq!(p2.to_indices::<i64>().unwrap(), array![[[1, 6], [8, 10]]]);

    let wrong = Array3::<i8>::zeros((1, 4, 48));
    let e = Mask::<Bitmask, _>::from_raw(wrong, &params, &[1, 4, 4]).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "Mask::from_raw",
            arg: "data",
            expected: vec![1, 4, 64],
            got: vec![1, 4, 48]
        }
    );
}

/// Ceil-mode example of the notes: H=4, k=2, s=3, p=1 gives 2 outputs in both modes (ceil mode's
/// third window would start at 2*3 - 1 = 5, past the input, so it is dropped). Windows: rows/cols {0} and
/// {2, 3}. On the A.5 input: (0,0) reads 0 → idx 0; (0,1) reads 1, 1 → first at 2; (1,0) reads
/// 9, 0 → 8; (1,1) reads 6, 4, 6, 2 → 10.
#[test]
fn ceil_mode_example_of_the_notes() {
    let x = a5::<f32>();
    for ceil in [false, true] {
        let params =
            MaxPool2dParams::new([2, 2]).with_stride([3, 3]).with_padding([1, 1]).with_ceil_mode(ceil);
        let p = max_pool2d_with_indices(&x, &params).unwrap();
        assert_eq!(p.indices, array![[[0, 2], [8, 10]]], "ceil {ceil}");
        let m = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
        assert_eq!(m.mask.to_indices::<i64>().unwrap(), p.indices);
        // Window (0,0) reads input (0,0) at offset i=1, j=1 (k=3) past the padding.
        let raw = m.mask.as_array();
        assert_eq!(raw.as_slice().unwrap()[3 * 64], 1);
    }
}

/// Ceil mode adding a window: 5x5, k=2, s=2 → floor 2x2, ceil 3x3 whose last row and column read
/// only row/column 4. With x[i][j] = 5i + j the maximum of a window is its last valid element.
#[test]
fn ceil_mode_adds_a_partial_window() {
    let x = Array3::from_shape_fn((1, 5, 5), |(_, i, j)| (5 * i + j) as f64);
    let floor = poolgrad::max_pool2d_with_indices_i32(&x, &MaxPool2dParams::new([2, 2])).unwrap();
    assert_eq!(floor.indices, array![[[6, 8], [16, 18]]]);
    let params = MaxPool2dParams::new([2, 2]).with_ceil_mode(true);
    let ceil = poolgrad::max_pool2d_with_indices_i32(&x, &params).unwrap();
    assert_eq!(ceil.indices, array![[[6, 8, 9], [16, 18, 19], [21, 23, 24]]]);
    assert_eq!(ceil.output, ceil.indices.mapv(f64::from));
    for mask in [
        max_pool2d_with_mask(&x, &params, Bitmask).unwrap().mask.to_indices::<i32>().unwrap(),
        max_pool2d_with_mask(&x, &params, I32Argmax).unwrap().mask.to_indices::<i32>().unwrap(),
    ] {
        assert_eq!(mask, ceil.indices);
    }
}

/// k=3, s=2, p=1 on the A.5 input: rows/cols {0,1} (with one pad) and {1,2,3}. Maxima: 5 at 1,
/// 7 at 6, 9 at 8, and 8 at 13 in {3,7,0,1,6,4,8,6,2}.
fn overlapping<T: PoolFloat, I: ArgmaxIndex>() {
    let x = a5::<T>();
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let p = common::max_pool::<T, I, _>(&x, &params).unwrap();
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[1, 6], [8, 13]]]);
    assert_eq!(p.output.mapv(to_f64), array![[[5., 7.], [9., 8.]]]);

    // A single 9 at (1,1) lies in all four windows, at offsets k = 8, 6, 2, 0 (origin (-1,-1),
    // (-1,1), (1,-1), (1,1)). The gradient there is 1+2+3+4.
    let mut y = Array3::<f64>::zeros((1, 4, 4));
    y[[0, 1, 1]] = 9.0;
    let y = y.mapv(cast::<T>);
    let g = array![[[1., 2.], [3., 4.]]].mapv(cast::<T>);
    let mut expected = Array3::<f64>::zeros((1, 4, 4));
    expected[[0, 1, 1]] = 10.0;
    let p = common::max_pool::<T, I, _>(&y, &params).unwrap();
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[5, 5], [5, 5]]]);
    assert_eq!(max_pool2d_with_indices_backward(&g, &y, &p.indices, &params).unwrap().mapv(to_f64), expected);

    let bits = max_pool2d_with_mask(&y, &params, Bitmask).unwrap();
    // Shape [1, 9, 64]; word (k, p) at byte 64k + 2p.
    let raw = bits.mask.as_array().as_slice().unwrap().to_vec();
    let set: Vec<usize> = raw.iter().enumerate().filter(|(_, b)| **b != 0).map(|(i, _)| i).collect();
    assert_eq!(set, vec![6, 2 * 64 + 4, 6 * 64 + 2, 8 * 64]);
    assert_eq!(max_pool2d_with_mask_backward(&g, &y, &bits.mask).unwrap().mapv(to_f64), expected);
    let a2 = max_pool2d_with_mask(&y, &params, I32Argmax).unwrap();
    assert_eq!(max_pool2d_with_mask_backward(&g, &y, &a2.mask).unwrap().mapv(to_f64), expected);
}

/// Dilation 2 (indices ops only). 5x5 with x = 5i + j, k=2, d=2, s=1: taps o and o+2, so the
/// maximum sits at (oh+2, ow+2). With k=3, d=2, p=1: taps o-1, o+1, o+3, valid rows {1,3},
/// {0,2,4}, {1,3}: the last valid row and column win.
fn dilation<T: PoolFloat, I: ArgmaxIndex>() {
    let x = Array3::from_shape_fn((1, 5, 5), |(_, i, j)| (5 * i + j) as f64).mapv(cast::<T>);
    let params = MaxPool2dParams::new([2, 2]).with_stride([1, 1]).with_dilation([2, 2]);
    let p = common::max_pool::<T, I, _>(&x, &params).unwrap();
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[12, 13, 14], [17, 18, 19], [22, 23, 24]]]);
    let neg = x.mapv(|v| -v);
    let p = common::max_pool::<T, I, _>(&neg, &params).unwrap();
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[0, 1, 2], [5, 6, 7], [10, 11, 12]]]);

    let params = MaxPool2dParams::new([3, 3]).with_stride([1, 1]).with_dilation([2, 2]).with_padding([1, 1]);
    let p = common::max_pool::<T, I, _>(&x, &params).unwrap();
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[18, 19, 18], [23, 24, 23], [18, 19, 18]]]);
    let g = Array3::from_elem((1, 3, 3), cast::<T>(1.0));
    let gx = max_pool2d_with_indices_backward(&g, &x, &p.indices, &params).unwrap().mapv(to_f64);
    assert_eq!(gx[[0, 3, 3]], 4.0);
    assert_eq!(gx[[0, 4, 4]], 1.0);
    assert_eq!(gx.sum(), 9.0);

    let e = max_pool2d_with_mask(&x, &params, Bitmask).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "dilation", .. }), "{e:?}");
}

/// One 2x2 window (P = 1, 4 offsets, 32 words per row); channel c has its maximum at offset c % 4.
/// Block c1, offset k, word p = 0 sits at byte 2 * ((c1 * 4 + k) * 32); its bit b is channel 16c1+b.
fn channel_blocks<T: PoolFloat>(c: usize) {
    let x = Array4::from_shape_fn((1, c, 2, 2), |(_, ch, i, j)| if i * 2 + j == ch % 4 { 1.0 } else { 0.0 })
        .mapv(cast::<T>);
    let params = MaxPool2dParams::new([2, 2]);
    let m = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    assert_eq!(m.mask.as_array().shape(), &[1, c, 4, 64]);
    let raw: Vec<u8> = m.mask.as_array().iter().map(|&b| b as u8).collect();
    let mut want = vec![0u8; raw.len()];
    for ch in 0..c {
        let (c1, b, k) = (ch / 16, ch % 16, ch % 4);
        let at = 2 * ((c1 * 4 + k) * 32);
        let word = u16::from_le_bytes([want[at], want[at + 1]]) | 1 << b;
        [want[at], want[at + 1]] = word.to_le_bytes();
    }
    assert_eq!(raw, want, "C = {c}");
    let idx = m.mask.to_indices::<i64>().unwrap();
    assert_eq!(idx, Array4::from_shape_fn((1, c, 1, 1), |(_, ch, _, _)| (ch % 4) as i64));

    // Backward: each channel's gradient lands at its maximum. Garbage bits of channels >= C and
    // of words past P (and in the spare block) must be ignored.
    let g = Array4::from_shape_fn((1, c, 1, 1), |(_, ch, _, _)| cast::<T>((ch + 1) as f64));
    let expected = Array4::from_shape_fn((1, c, 2, 2), |(_, ch, i, j)| {
        (if i * 2 + j == ch % 4 { ch + 1 } else { 0 }) as f64
    });
    let clean = max_pool2d_with_mask_backward(&g, &x, &m.mask).unwrap().mapv(to_f64);
    assert_eq!(clean, expected);
    let mut dirty = m.mask.as_array().clone();
    let flat = dirty.as_slice_mut().unwrap();
    let blocks = c.div_ceil(16);
    for k in 0..4 {
        let row = 2 * ((blocks - 1) * 4 + k) * 32;
        flat[row + 2..row + 64].fill(-1); // words p = 1..31: past P, and the spare block
        if !c.is_multiple_of(16) {
            let word = u16::from_le_bytes([flat[row] as u8, flat[row + 1] as u8]) | (u16::MAX << (c % 16));
            let [lo, hi] = word.to_le_bytes();
            (flat[row], flat[row + 1]) = (lo as i8, hi as i8);
        }
    }
    flat[2 * blocks * 4 * 32..].fill(-1); // past the bit-mask region: never read
    let dirty = Mask::<Bitmask, _>::from_raw(dirty, &params, &[1, c, 2, 2]).unwrap();
    assert_eq!(max_pool2d_with_mask_backward(&g, &x, &dirty).unwrap().mapv(to_f64), expected);
}

#[test]
fn bitmask_channel_blocks_1_16_17_20() {
    for c in [1, 16, 17, 20] {
        channel_blocks::<f32>(c);
        channel_blocks::<half::bf16>(c);
    }
    channel_blocks::<half::f16>(33);
    channel_blocks::<f64>(20);
}

/// A bit that points into padding adds nothing; a position with two bits set adds both.
#[test]
fn bitmask_bits_in_padding_add_nothing() {
    // 2x2 input, k=3, s=2, p=1: one window with origin (-1,-1); offsets 0..3 and 6 are padding.
    let x = Array3::<f32>::from_shape_vec((1, 2, 2), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let m = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    assert_eq!(m.mask.to_indices::<i32>().unwrap(), array![[[3]]]); // offset 8 = input (1,1)
    let mut raw = m.mask.as_array().clone();
    let flat = raw.as_slice_mut().unwrap();
    flat[0] = 1; // offset 0: input (-1,-1), padding
    flat[4 * 64] = 1; // offset 4: input (0,0), a second maximum
    let both = Mask::<Bitmask, _>::from_raw(raw, &params, &[1, 2, 2]).unwrap();
    let g = array![[[5.0f32]]];
    let gx = max_pool2d_with_mask_backward(&g, &x, &both).unwrap();
    assert_eq!(gx, array![[[5.0, 0.0], [0.0, 5.0]]]);
    let e = both.to_indices::<i32>().unwrap_err();
    assert!(matches!(e, Error::MaskContent { .. }), "{e:?}");
    assert!(e.to_string().contains("window offsets 0 and 4"), "{e}");
}

/// A right-edge window whose only bit points past the plane's right edge adds nothing, whichever
/// kernel reads the mask: the decoder reads interior columns in runs, and the edge column must
/// not join them (its window would then read that bit as the first input of the next row).
#[test]
fn bitmask_bit_past_the_right_edge_adds_nothing() {
    // 3x5 input of values 0..15 (row-major), k=3, s=2, p=1: 2x3 outputs; column 2's windows
    // read input columns 3 and 4 (offset column 2 is padding), like column 0's read -1 (padding)
    // to 1; column 1 is interior. Each window's maximum is its last valid input: 6, 8, 9 in row
    // 0, then 11, 13, 14.
    let x = Array3::from_shape_fn((1, 3, 5), |(_, i, j)| (i * 5 + j) as f32);
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let m = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    assert_eq!(m.mask.to_indices::<i64>().unwrap(), array![[[6, 8, 9], [11, 13, 14]]]);
    // Position 2 (row 0, column 2) gets its only bit at offset 5 (window row 1, column 2): input
    // (0, 5), past the right edge. Words: 32 per offset (6 positions: (⌈6/16⌉ + 1) * 16).
    let mut raw = m.mask.as_array().clone();
    let bytes = raw.as_slice_mut().unwrap();
    for k in 0..9 {
        bytes[(k * 32 + 2) * 2] = 0;
    }
    bytes[(5 * 32 + 2) * 2] = 1;
    let edited = Mask::<Bitmask, _>::from_raw(raw, &params, &[1, 3, 5]).unwrap();
    let g = array![[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]];
    let mut want = Array3::<f32>::zeros((1, 3, 5));
    for (flat, grad) in [(6, 1.0), (8, 2.0), (11, 4.0), (13, 5.0), (14, 6.0)] {
        want[[0, flat / 5, flat % 5]] = grad;
    }
    assert_eq!(max_pool2d_with_mask_backward(&g, &x, &edited).unwrap(), want);
    let one_thread = poolgrad::on(&Cpu::sequential()).max_pool2d_with_mask_backward(&g, &x, &edited).unwrap();
    assert_eq!(one_thread, want);
}

/// 1x1 kernels: every position selects its only input. P = 4 (3x3, stride 2): an I32Argmax
/// mask of 1 * (1 + 1) * 32 = 64 bytes holds 16 bytes of values. P = 36 needs 144 bytes but the
/// mask has 1 * (3 + 1) * 32 = 128: rejected (Ascend uses the bit mask for 1x1 kernels).
#[test]
fn one_by_one_kernels() {
    let x = Array3::from_shape_fn((2, 3, 3), |(c, i, j)| (c * 9 + i * 3 + j) as f32);
    let params = MaxPool2dParams::new([1, 1]).with_stride([2, 2]);
    let want = array![[[0, 2], [6, 8]], [[0, 2], [6, 8]]];
    let bits = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    assert_eq!(bits.mask.as_array().shape(), &[2, 1, 64]);
    assert_eq!(bits.mask.to_indices::<i64>().unwrap(), want);
    // Both channels share block 0: words p = 0..3 of offset 0 hold bits 0 and 1.
    assert_eq!(&bits.mask.as_array().as_slice().unwrap()[..10], &[3, 0, 3, 0, 3, 0, 3, 0, 0, 0]);
    let a2 = max_pool2d_with_mask(&x, &params, I32Argmax).unwrap();
    assert_eq!(a2.mask.to_indices::<i64>().unwrap(), want);

    let big = Array3::<f32>::zeros((1, 6, 6));
    let e = max_pool2d_with_mask(&big, &MaxPool2dParams::new([1, 1]), I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "mask", .. }), "{e:?}");
    assert!(e.to_string().contains("128 bytes") && e.to_string().contains("144"), "{e}");
    assert!(max_pool2d_with_mask(&big, &MaxPool2dParams::new([1, 1]), Bitmask).is_ok());
}

macro_rules! for_all_types {
    ($($name:ident),*) => {$(
        mod $name {
            #[test] fn f32_i32() { super::$name::<f32, i32>() }
            #[test] fn f32_i64() { super::$name::<f32, i64>() }
            #[test] fn f64_i64() { super::$name::<f64, i64>() }
            #[test] fn f16_i32() { super::$name::<half::f16, i32>() }
            #[test] fn bf16_i64() { super::$name::<half::bf16, i64>() }
        }
    )*};
}

for_all_types!(overlapping, dilation);

/// Large enough that the mask forward encodes in several parts on several threads (`I32Argmax`:
/// runs of 65,536 values; `Bitmask`: 16-channel blocks, here two per image, the second partial):
/// the mask holds the same arg-max as the indices forward, at every thread count.
#[test]
fn large_masks_encode_in_parts_on_every_thread_count() {
    let x = ndarray::Array4::from_shape_fn((2, 20, 64, 60), |(n, c, h, w)| {
        ((n * 7919 + c * 104_729 + h * 31 + w * 17) % 1009) as f32
    });
    let params = MaxPool2dParams::new([2, 2]);
    let want = max_pool2d_with_indices(&x, &params).unwrap().indices;
    assert!(want.len() > 65_536 / 2, "{} outputs", want.len());
    let big = ndarray::Array4::from_shape_fn((1, 3, 300, 300), |(_, c, h, w)| {
        ((c * 13 + h * 7 + w * 3) % 97) as f32
    });
    let want_big = max_pool2d_with_indices(&big, &params).unwrap().indices;
    assert!(want_big.len() > 65_536, "{} outputs", want_big.len());
    for threads in [1, 2, 7] {
        let cpu = poolgrad::device::cpu::Cpu::new(poolgrad::device::cpu::Parallelism::Threads(
            threads.try_into().unwrap(),
        ))
        .unwrap()
        .with_grain(0);
        let bits = poolgrad::on(&cpu).max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
        assert_eq!(bits.mask.to_indices::<i64>().unwrap(), want, "Bitmask, {threads} threads");
        let values = poolgrad::on(&cpu).max_pool2d_with_mask(&big, &params, I32Argmax).unwrap();
        assert_eq!(values.mask.to_indices::<i64>().unwrap(), want_big, "I32Argmax, {threads} threads");
    }
}

/// Half-type gradients with NaNs (quiet, signalling, negative), infinities of both signs meeting
/// on one element, sums that overflow, subnormals and ties to even: every backward (`i64`
/// indices, both mask layouts; 1 and 2 threads) stores, bit for bit, the row-major f32 sum of the
/// gradients widened by `half`, rounded once by `half`.
fn special_gradients<T: PoolFloat>(specials: &[u16]) {
    let (c, h, w) = (16, 8, 8);
    // Odd rows (shared by two windows of k3 s2 p1) hold the larger values, so several windows
    // pick the same element and their gradients meet.
    let x = Array4::from_shape_fn((1, c, h, w), |(_, ch, i, j)| {
        cast::<T>(((i * w + j) * 37 + ch * 11) as f64 % 64.0 + if i % 2 == 1 { 100.0 } else { 0.0 })
    });
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let indices = max_pool2d_with_indices(&x, &params).unwrap().indices;
    let mut draw = specials.iter().cycle();
    let go = indices.mapv(|_| bytemuck::cast::<u16, T>(*draw.next().unwrap()));
    let mut sums = vec![0f32; c * h * w];
    for (((_, ch, _, _), &g), &i) in go.indexed_iter().zip(&indices) {
        sums[ch * h * w + i as usize] += g.to_f64_exact() as f32;
    }
    let want: Vec<u16> = sums.iter().map(|&s| bytemuck::cast(T::round_from_f64(f64::from(s)))).collect();
    assert!(want.iter().any(|&b| bytemuck::cast::<u16, T>(b).to_f64_exact().is_nan()), "a NaN is summed");
    let bits = |gi: &Array4<T>| bytemuck::cast_slice::<T, u16>(gi.as_slice().unwrap()).to_vec();
    let shape = [1, c, h, w];
    let i32argmax = Mask::<I32Argmax, _>::from_indices(&indices, &params, &shape).unwrap();
    let bitmask = Mask::<Bitmask, _>::from_indices(&indices, &params, &shape).unwrap();
    for cpu in [&poolgrad::device::cpu::Cpu::sequential(), common::cpu_with_threads(2)] {
        let flat = poolgrad::on(cpu).max_pool2d_with_indices_backward(&go, &x, &indices, &params).unwrap();
        assert_eq!(bits(&flat), want, "i64 indices");
        let by_argmax = poolgrad::on(cpu).max_pool2d_with_mask_backward(&go, &x, &i32argmax).unwrap();
        assert_eq!(bits(&by_argmax), want, "I32Argmax");
        let by_bits = poolgrad::on(cpu).max_pool2d_with_mask_backward(&go, &x, &bitmask).unwrap();
        assert_eq!(bits(&by_bits), want, "Bitmask");
    }
}

#[test]
fn special_gradients_bf16() {
    // Quiet and signalling NaNs, a negative NaN with a full payload, +-inf, the largest finite
    // value (two overflow), the smallest subnormals, 1 + 2^-7 (ties on 1), and plain values.
    special_gradients::<half::bf16>(&[
        0x7FC1, 0x3F80, 0x7F81, 0x7F80, 0xFF80, 0x7F7F, 0x7F7F, 0x0001, 0x8001, 0x3F81, 0x3F80, 0xFFFF,
        0x4000,
    ]);
}

#[test]
fn special_gradients_f16() {
    special_gradients::<half::f16>(&[
        0x7E01, 0x3C00, 0x7C01, 0x7C00, 0xFC00, 0x7BFF, 0x7BFF, 0x0001, 0x8001, 0x3C01, 0x3C00, 0xFFFF,
        0x4000,
    ]);
}

/// Windows of -inf only point at their first input (PyTorch's rule), here on the scalar scan of
/// one window at a time: a 5x5 plane pooled by 2x2 windows, stride 2, padding 1, to 3x3. The
/// windows' first inputs, clipped by the padding, are rows 0, 1, 3 and columns 0, 1, 3.
#[test]
fn windows_of_negative_infinity_point_at_their_first_input() {
    let x = Array3::<f32>::from_elem((1, 5, 5), f32::NEG_INFINITY);
    let params = MaxPool2dParams::new([2, 2]).with_padding([1, 1]);
    let p = max_pool2d_with_indices(&x, &params).unwrap();
    assert_eq!(p.indices, array![[[0, 1, 3], [5, 6, 8], [15, 16, 18]]]);
    assert!(p.output.iter().all(|&v| v == f32::NEG_INFINITY));
}

/// Masks are equal when their bytes and the pooling they belong to are: a value moved inside its
/// window makes them differ, and so does the same bytes under another pooling (ceil mode, which
/// gives this input the same output and mask shape).
#[test]
fn masks_are_equal_when_bytes_and_pooling_are() {
    let params = MaxPool2dParams::new([2, 2]);
    let idx = array![[[[0i64, 2], [8, 10]]]]; // the top-left input of each 2x2 window of a 4x4 plane
    let a = Mask::<I32Argmax, ndarray::Ix4>::from_indices(&idx, &params, &[1, 1, 4, 4]).unwrap();
    assert!(a == a.clone());
    let mut moved = idx.clone();
    moved[[0, 0, 1, 1]] = 15; // the bottom-right input of the last window
    let b = Mask::<I32Argmax, ndarray::Ix4>::from_indices(&moved, &params, &[1, 1, 4, 4]).unwrap();
    assert!(a != b);
    let ceil = params.with_ceil_mode(true);
    let c = Mask::<I32Argmax, ndarray::Ix4>::from_raw(a.as_array().clone(), &ceil, &[1, 1, 4, 4]).unwrap();
    assert_eq!(c.as_array(), a.as_array());
    assert!(a != c);
    // By value, the same bytes: the four flat indices as little-endian i32 from byte 0.
    let bytes = a.into_array();
    let values: Vec<i8> = bytes.iter().take(16).copied().collect();
    assert_eq!(values, [0, 0, 0, 0, 2, 0, 0, 0, 8, 0, 0, 0, 10, 0, 0, 0]);
    assert_eq!(bytes, *c.as_array());
}

/// The forward writes the whole mask, whatever the buffer held: the `I32Argmax` values from byte
/// 0, and zeros after them (hand-worked: 2x2 windows of a 4x4 plane whose maxima are at flat
/// positions 5, 2, 13 and 11; the mask is `[1, 1, 4, 64]`, 256 bytes).
#[test]
fn the_forward_zeroes_the_mask_bytes_after_the_values() {
    use poolgrad::op::MaxPool2dWithMask;
    use poolgrad::{MaskMut, Plan, TensorMut, TensorRef};
    let mut x = Array4::<f32>::zeros((1, 1, 4, 4));
    for flat in [5, 2, 13, 11] {
        x[[0, 0, flat / 4, flat % 4]] = 1.0;
    }
    let mut output = Array4::<f32>::zeros((1, 1, 2, 2));
    let mut bytes = Array4::<i8>::from_elem((1, 1, 4, 64), 77);
    let op = MaxPool2dWithMask {
        input: TensorRef::from_array(&x).unwrap(),
        params: MaxPool2dParams::new([2, 2]),
        output: TensorMut::from_array(&mut output).unwrap(),
        mask: MaskMut::new(TensorMut::from_array(&mut bytes).unwrap(), I32Argmax),
    };
    Plan::new(&Cpu::sequential(), op).unwrap().run().unwrap();
    let mut expected = vec![0i8; 256];
    expected[..16].copy_from_slice(&[5, 0, 0, 0, 2, 0, 0, 0, 13, 0, 0, 0, 11, 0, 0, 0]);
    assert_eq!(bytes.iter().copied().collect::<Vec<_>>(), expected);
    assert_eq!(output, Array4::from_elem((1, 1, 2, 2), 1.0));
}

/// The `I32Argmax` forward's workspace, worked by hand (f32, kernel 2 on 8x8 planes, 16 planes
/// on one thread). Its values are the forward's `i32` indices: where the mask's bytes can be
/// seen as `i32` (a contiguous buffer on a 4-byte boundary, or a strided one staged in the
/// workspace), they are pooled straight into them and the workspace holds only the blocked
/// kernel's scratch (a band of 8 interleaved planes of the 2 input rows a window spans, 2 x 8 x
/// 8 f32, 512 bytes, and the offsets of an output row of 8 planes, 8 x 4: 640 bytes) and the
/// staging of the strided mask (its 16 x 4 x 64 = 4096 bytes). A buffer that starts one byte off
/// adds a region of every plane's indices (16 x 16 x 4 = 1024 bytes). The three write the same
/// bytes.
#[test]
fn the_i32argmax_forward_pools_into_the_mask() {
    use poolgrad::{MaskMut, Plan, TensorMut, TensorRef};
    let k2 = MaxPool2dParams::new([2, 2]);
    let x = Array4::<f32>::from_shape_fn((1, 16, 8, 8), |(_, c, h, w)| ((c * 7 + h * 5 + w * 3) % 11) as f32);
    let shape = poolgrad::geometry::mask_shape(1, 16, [2, 2], [4, 4]).unwrap();
    assert_eq!(shape, [1, 16, 4, 64]);
    let len: usize = shape.iter().product();
    let run = |bytes: ndarray::ArrayViewMut4<'_, i8>| {
        let mut out = Array4::<f32>::zeros((1, 16, 4, 4));
        let op = poolgrad::op::MaxPool2dWithMask {
            input: TensorRef::from_array(&x).unwrap(),
            params: k2,
            output: TensorMut::from_array(&mut out).unwrap(),
            mask: MaskMut::new(TensorMut::from_view(bytes).unwrap(), I32Argmax),
        };
        let cpu = Cpu::sequential();
        let plan = Plan::new(&cpu, op).unwrap();
        let size = plan.workspace_size();
        plan.run().unwrap();
        size
    };
    let mut owned = Array4::<i8>::from_elem(shape, 77);
    assert_eq!(run(owned.view_mut()), 640);
    let mut words = vec![i32::from_ne_bytes([77; 4]); len / 4 + 1];
    let bytes: &mut [i8] = bytemuck::cast_slice_mut(&mut words);
    assert_eq!(run(ndarray::ArrayViewMut4::from_shape(shape, &mut bytes[1..=len]).unwrap()), 1024 + 640);
    let mut wide = Array4::<i8>::from_elem((1, 16, 4, 128), 77);
    assert_eq!(run(wide.slice_mut(ndarray::s![.., .., .., ..;2])), 4096 + 640);
    // The values: each window's first maximum, from a plain loop.
    let mut expected = vec![0i8; len];
    for c in 0..16 {
        for p in 0..16 {
            let (oh, ow) = (p / 4, p % 4);
            let taps = (0..4).map(|t| (2 * oh + t / 2, 2 * ow + t % 2));
            let best = taps.clone().map(|(h, w)| x[[0, c, h, w]]).fold(f32::MIN, f32::max);
            let (h, w) = taps.clone().find(|&(h, w)| x[[0, c, h, w]] == best).unwrap();
            let at = 4 * (c * 16 + p);
            expected[at..at + 4].copy_from_slice(&((h * 8 + w) as i32).to_le_bytes().map(|b| b as i8));
        }
    }
    assert_eq!(owned.as_slice().unwrap(), &expected[..]);
    assert_eq!(&bytes[1..=len], &expected[..]);
    assert_eq!(bytes[0], 77);
    assert_eq!(wide.slice(ndarray::s![.., .., .., ..;2]).iter().copied().collect::<Vec<_>>(), expected);
    // No planes: nothing to pool, no workspace, an empty mask.
    let none = Array4::<f32>::zeros((0, 16, 8, 8));
    let p = poolgrad::on(&Cpu::with_threads(2).unwrap().with_grain(0))
        .max_pool2d_with_mask(&none, &k2, I32Argmax)
        .unwrap();
    assert_eq!((p.output.shape(), p.mask.as_array().shape()), (&[0, 16, 4, 4][..], &[0, 16, 4, 64][..]));
}

/// The `Bitmask` forward's workspace, worked by hand (f32, kernel 2 on 8x8 planes: 4x4 = 16
/// outputs per plane). With at least one 16-channel block per thread it pools and encodes block
/// by block, up to 4 tasks per thread: each task keeps one block's `i32` indices (16 channels x 16 outputs = 256, 1024
/// bytes), and the forward's blocked kernel (planes of at most 2048 inputs) keeps per task a
/// band of 8 interleaved planes of the 2 input rows a window spans (2 x 8 x 8 f32, 512 bytes)
/// and the offsets of an output row of the 8 planes (8 x 4, 128 bytes): 640 bytes. With fewer
/// blocks than threads it keeps every plane's indices instead (16 per plane).
#[test]
fn the_bitmask_forward_sizes_its_workspace_by_blocks_per_thread() {
    use poolgrad::{MaskMut, Plan, TensorMut, TensorRef};
    let k2 = MaxPool2dParams::new([2, 2]);
    let two = Cpu::with_threads(2).unwrap().with_grain(0);
    let size = |cpu: &Cpu, n: usize, c: usize| {
        let x = Array4::<f32>::zeros((n, c, 8, 8));
        let mut out = Array4::<f32>::zeros((n, c, 4, 4));
        let mut bytes =
            Mask::<Bitmask, ndarray::Ix4>::zeros(&k2, &[n, c, 8, 8], Bitmask).unwrap().into_array();
        let op = poolgrad::op::MaxPool2dWithMask {
            input: TensorRef::from_array(&x).unwrap(),
            params: k2,
            output: TensorMut::from_array(&mut out).unwrap(),
            mask: MaskMut::new(TensorMut::from_array(&mut bytes).unwrap(), Bitmask),
        };
        Plan::new(cpu, op).unwrap().workspace_size()
    };
    // 2 x 20 channels: 4 blocks (16 + 4 channels per batch), 40 planes: on one thread one task.
    assert_eq!(size(&Cpu::sequential(), 2, 20), 1024 + 640);
    // One block: fused on one thread (1024 + 640).
    assert_eq!(size(&Cpu::sequential(), 1, 16), 1024 + 640);
    if cfg!(feature = "rayon") {
        assert_eq!(two.threads(), 2);
        // 4 blocks, a task each (up to 4 tasks per thread), one block's indices each; the
        // forward's scratch for its own split of the 40 planes: beyond a task per thread,
        // tasks of 8 planes at least, so 5 tasks.
        assert_eq!(size(&two, 2, 20), 4 * 1024 + 5 * 640);
        // 1 block for 2 threads: every plane's indices (16 x 16 x 4 bytes) and 2 tasks of 8
        // planes (bands are for fewer planes than threads).
        assert_eq!(size(&two, 1, 16), 16 * 16 * 4 + 2 * 640);
    } else {
        // Without rayon every device runs on one thread.
        assert_eq!(two.threads(), 1);
        assert_eq!(size(&two, 2, 20), 1024 + 640);
    }
    // No planes, no workspace.
    assert_eq!(size(&two, 0, 20), 0);
}

/// Fewer `Bitmask` blocks than threads: each block's output rows are encoded in bands, a task
/// each; windows that the position-by-position encoder does not cover (9x9: 81 offsets) send
/// the block to the whole encoder instead. Either way the mask holds the forward's indices,
/// with the same bytes on 1, 2 and 7 threads (grain 0, so that small calls use the threads):
/// one block of 3 channels of 40x37, and two blocks (batch 2, 5 channels), for a 3x3 window
/// with stride 2 and padding 1 and a 9x9 window with padding 4.
#[test]
fn fewer_bitmask_blocks_than_threads_encode_in_bands() {
    for (shape, kernel, padding) in [([1, 3, 40, 37], 3, 1), ([2, 5, 40, 37], 3, 1), ([1, 3, 40, 37], 9, 4)] {
        let x =
            Array4::from_shape_fn(shape, |(n, c, h, w)| ((n * 7 + c * 13 + h * 31 + w * 17) % 101) as f32);
        let params =
            MaxPool2dParams::new([kernel, kernel]).with_stride([2, 2]).with_padding([padding, padding]);
        let want = max_pool2d_with_indices(&x, &params).unwrap().indices;
        let masks: Vec<_> = [1, 2, 7]
            .into_iter()
            .map(|threads| {
                let cpu = Cpu::with_threads(threads).unwrap().with_grain(0);
                poolgrad::on(&cpu).max_pool2d_with_mask(&x, &params, Bitmask).unwrap().mask
            })
            .collect();
        for mask in &masks {
            assert_eq!(mask.to_indices::<i64>().unwrap(), want, "{shape:?}, kernel {kernel}");
            assert_eq!(mask.as_array(), masks[0].as_array(), "{shape:?}, kernel {kernel}");
        }
    }
}
