//! `Mask` reads its inputs in place, whatever their memory layout, and allocates only its result.
//!
//! The heap of this test binary is counted and capped (`cap`): each call runs with a budget of
//! its result plus a few MiB, so a copy of the input or an oversized reservation would fail to
//! allocate (an abort, which fails the run) where the call itself must succeed or return its
//! error. The cases are those of the second hostile-input pass, at sizes a debug build runs in
//! seconds. Expected values are worked by hand from the layouts' definitions, never from the
//! crate.

mod capped_heap;

use capped_heap::{MIB, serial, within};
use ndarray::{Array4, ArrayView4, Ix3, Ix4, ShapeBuilder, s};
use poolgrad::{Bitmask, Error, I32Argmax, Mask, MaskLayout, MaxPool2dParams};

/// `Mask::selected` on a large `Bitmask` whose bits select two inputs: the answer is those two
/// pairs. It used to reserve a pair for every output position first (here 256 MiB).
#[test]
fn selected_allocates_only_its_pairs() {
    let _serial = serial();
    let (params, side) = (MaxPool2dParams::new([1, 1]), 1usize << 12);
    // One plane, a 1x1 kernel: one row of u16 words, word p for output position p = input p.
    let shape = poolgrad::geometry::mask_shape(1, 1, [1, 1], [side, side]).unwrap();
    assert_eq!(shape, [1, 1, 1, (side * side / 16 + 1) * 32]);
    let mut data = Array4::<i8>::zeros(shape);
    let last = side * side - 1;
    for p in [5, last] {
        data[[0, 0, 0, 2 * p]] = 1; // bit 0 (channel 0) of word p, low byte first
    }
    let mask = Mask::<Bitmask, _>::from_raw(data, &params, &[1, 1, side, side]).unwrap();
    let pairs = within(4 * MIB, || mask.selected()).unwrap();
    assert_eq!(pairs, vec![(5, 5), (last, last)]);
    // Reserved at its exact size, once (a growing vector would hold 4).
    assert_eq!(pairs.capacity(), 2);
}

/// `selected` checks every `I32Argmax` value against the plane, negative ones included, and
/// reports the first bad one with its position, in any memory layout.
#[test]
fn selected_refuses_values_outside_the_plane() {
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 2]);
    // A 4x4 plane pooled to 2x2: values 0..4 at bytes 0..16, little-endian.
    for (bad, position) in [(-1i32, [0, 0, 1, 0]), (16, [0, 0, 0, 1])] {
        let mut data = Array4::<i8>::zeros((1, 1, 4, 64));
        for (e, v) in [5i32, 6, 9, 10].into_iter().enumerate() {
            let v = if position == [0, 0, e / 2, e % 2] { bad } else { v };
            for (b, byte) in v.to_le_bytes().into_iter().enumerate() {
                data[[0, 0, 0, 4 * e + b]] = byte as i8;
            }
        }
        let mut fortran = Array4::<i8>::zeros(data.raw_dim().f());
        fortran.assign(&data);
        for bytes in [data, fortran] {
            let mask = Mask::<I32Argmax, _>::from_raw(bytes, &params, &[1, 1, 4, 4]).unwrap();
            let e = mask.selected().unwrap_err();
            let expected = Error::IndexOutOfRange {
                op: "Mask::selected",
                arg: "mask",
                position: position.to_vec(),
                value: i64::from(bad),
                plane: 16,
            };
            assert_eq!(e, expected);
        }
    }
}

/// Broadcast indices (one element seen at every position) are read in place: the second
/// position's index is outside its window, and that is the error, without a copy of the 2^26
/// indices (512 MiB) first.
#[test]
fn from_indices_reads_broadcast_indices_in_place() {
    let _serial = serial();
    let (params, side) = (MaxPool2dParams::new([1, 1]), 1usize << 13);
    let zero = [0i64];
    let idx = ArrayView4::from_shape((1, 1, side, side).strides((0, 0, 0, 0)), &zero[..]).unwrap();
    // The result alone: (2^26 / 16 + 1) * 32 bytes, 128 MiB.
    let mask_bytes = (side * side / 16 + 1) * 32;
    let e = within(mask_bytes + 4 * MIB, || {
        Mask::<Bitmask, Ix4>::from_indices(&idx, &params, &[1, 1, side, side])
    });
    assert_eq!(
        e.unwrap_err(),
        Error::IndexNotInWindow {
            op: "Mask::from_indices",
            arg: "indices",
            position: vec![0, 0, 0, 1],
            value: 0
        }
    );

    // I32Argmax does not look at windows: value 1 everywhere is a valid mask, written in place.
    let params = MaxPool2dParams::new([2, 2]);
    // 2^22 indices (a 32 MiB copy), a 32 MiB mask.
    let one = [1i64];
    let (half, quarter) = (side / 2, side / 4);
    let idx = ArrayView4::from_shape((1, 1, quarter, quarter).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let mask_bytes = 4 * (quarter * quarter / 16 + 1) * 32;
    let mask = within(mask_bytes + 4 * MIB, || {
        Mask::<I32Argmax, Ix4>::from_indices(&idx, &params, &[1, 1, half, half])
    })
    .unwrap();
    let bytes = mask.as_array().as_slice().unwrap();
    assert_eq!(bytes.len(), mask_bytes);
    let (values, rest) = bytes.split_at(4 * quarter * quarter);
    assert!(values.chunks_exact(4).all(|v| v == [1, 0, 0, 0]));
    assert!(rest.iter().all(|&b| b == 0));
}

/// A Fortran-order mask (as `from_raw` accepts) is decoded in place by `to_indices` and
/// `selected`; each allocates its result only (1 MiB of indices, 4 MiB of pairs), where a copy
/// of the mask (4.7 MB) used to come first.
#[test]
fn fortran_order_masks_are_read_in_place() {
    let _serial = serial();
    let params = MaxPool2dParams::new([3, 3]);
    let (side, out) = (1536usize, 512usize);
    // Each window's centre: (3·oh + 1, 3·ow + 1).
    let idx = Array4::<i64>::from_shape_fn((1, 1, out, out), |(_, _, oh, ow)| {
        ((3 * oh + 1) * side + 3 * ow + 1) as i64
    });
    let standard = Mask::<I32Argmax, Ix4>::from_indices(&idx, &params, &[1, 1, side, side]).unwrap();
    let mut fortran = Array4::<i8>::zeros(standard.as_array().raw_dim().f());
    fortran.assign(standard.as_array());
    drop(standard);
    assert!(fortran.as_slice().is_none() && fortran.len() > 4 * MIB + MIB / 2);
    let mask = Mask::<I32Argmax, Ix4>::from_raw(fortran, &params, &[1, 1, side, side]).unwrap();

    let decoded = within(MIB + 2 * MIB, || mask.to_indices::<i32>()).unwrap();
    assert!(decoded.iter().zip(&idx).all(|(&d, &i)| i64::from(d) == i));
    drop(decoded);
    let pairs = within(4 * MIB + MIB, || mask.selected()).unwrap();
    assert_eq!(pairs.len(), out * out);
    assert!(pairs.iter().zip(&idx).enumerate().all(|(e, (&pair, &i))| pair == (e, i as usize)));
}

/// Hand-worked indices of a pooling with several parts (two batches of 20 channels: four
/// 16-channel blocks, and more than 2^16 values), every one inside its window: row `ch % kh`
/// and column `(ch / kh + oh) % kw` of it, so that the 16 channels of a `Bitmask` word (its low
/// byte and its high byte) set different bits.
fn hand_indices(params: &MaxPool2dParams, [n, c, h, w]: [usize; 4]) -> Array4<i64> {
    let [ho, wo] = params.output_size([h, w]).unwrap();
    let ([kh, kw], [sh, sw]) = (params.kernel(), params.stride());
    Array4::from_shape_fn((n, c, ho, wo), |(_, ch, oh, ow)| {
        let (i, j) = (ch % kh, (ch / kh + oh) % kw);
        ((oh * sh + i) * w + ow * sw + j) as i64
    })
}

/// Strided, reversed and Fortran-order indices encode to the same mask as a standard-layout copy
/// of the same values, in both layouts, and decode back to them from a Fortran-order mask.
#[test]
fn every_index_layout_encodes_alike() {
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 3]).with_stride([2, 3]);
    let input = [2, 20, 100, 120];
    let idx = hand_indices(&params, input);
    assert!(idx.len() > 1 << 16);
    let reversed = idx.slice(s![.., ..;-1, .., ..]);
    let mut fortran = Array4::<i64>::zeros(idx.raw_dim().f());
    fortran.assign(&idx);
    let mut wide = Array4::<i64>::zeros((2, 20, 50, 80));
    wide.slice_mut(s![.., .., .., ..;2]).assign(&idx);
    let strided = wide.slice(s![.., .., .., ..;2]);
    check_layouts::<Bitmask>(&params, input, &idx, &[reversed, fortran.view(), strided]);
    check_layouts::<I32Argmax>(&params, input, &idx, &[reversed, fortran.view(), strided]);
}

fn check_layouts<L: MaskLayout>(
    params: &MaxPool2dParams,
    input: [usize; 4],
    idx: &Array4<i64>,
    views: &[ArrayView4<'_, i64>],
) {
    for view in views {
        assert!(view.as_slice().is_none());
        let in_place = Mask::<L, Ix4>::from_indices(view, params, &input).unwrap();
        let copied = Mask::<L, Ix4>::from_indices(&view.to_owned(), params, &input).unwrap();
        assert_eq!(in_place, copied, "{}", L::NAME);
    }
    let mask = Mask::<L, Ix4>::from_indices(idx, params, &input).unwrap();
    let mut fortran = Array4::<i8>::zeros(mask.as_array().raw_dim().f());
    fortran.assign(mask.as_array());
    let from_fortran = Mask::<L, Ix4>::from_raw(fortran, params, &input).unwrap();
    assert_eq!(from_fortran.to_indices::<i64>().unwrap(), idx);
    assert_eq!(from_fortran.selected().unwrap(), mask.selected().unwrap());
    let expected: Vec<(usize, usize)> = idx.iter().enumerate().map(|(e, &i)| (e, i as usize)).collect();
    assert_eq!(mask.selected().unwrap(), expected, "{}", L::NAME);
}

/// A bad index in a later part (batch 1, channel 17: the fourth `Bitmask` block and the third
/// run of 2^16 `I32Argmax` values) is reported at its own position, from standard-layout and
/// Fortran-order indices alike.
#[test]
fn errors_in_later_parts_carry_their_position() {
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 3]).with_stride([2, 3]);
    let input = [2, 20, 100, 120];
    let position = [1, 17, 39, 5];
    for (value, layouts) in [(12000 * 2 - 1, "both"), (-3, "both"), (0, "Bitmask")] {
        let mut idx = hand_indices(&params, input);
        idx[position] = value;
        let mut fortran = Array4::<i64>::zeros(idx.raw_dim().f());
        fortran.assign(&idx);
        // Window (39, 5) holds rows 78..80 and columns 15..18: input 0 is outside it, -3 and
        // 2·12000 − 1 = 23999 are outside the 100·120 = 12000 plane.
        let out_of_plane = Error::IndexOutOfRange {
            op: "Mask::from_indices",
            arg: "indices",
            position: position.to_vec(),
            value,
            plane: 12000,
        };
        let not_in_window = Error::IndexNotInWindow {
            op: "Mask::from_indices",
            arg: "indices",
            position: position.to_vec(),
            value,
        };
        for indices in [idx.view(), fortran.view()] {
            let e = Mask::<Bitmask, Ix4>::from_indices(&indices, &params, &input).unwrap_err();
            assert_eq!(e, if value == 0 { not_in_window.clone() } else { out_of_plane.clone() });
            let a2 = Mask::<I32Argmax, Ix4>::from_indices(&indices, &params, &input);
            match layouts {
                "both" => assert_eq!(a2.unwrap_err(), out_of_plane),
                _ => assert!(a2.is_ok(), "I32Argmax does not check windows"),
            }
        }
    }
}

/// A 3-D mask in Fortran order decodes through its own rank.
#[test]
fn three_d_fortran_masks_decode() {
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 2]);
    let idx = ndarray::array![[[1i64, 6], [8, 10]], [[4, 3], [13, 15]]]; // C = 2 planes of 4x4
    let mask = Mask::<Bitmask, Ix3>::from_indices(&idx, &params, &[2, 4, 4]).unwrap();
    let mut fortran = ndarray::Array3::<i8>::zeros(mask.as_array().raw_dim().f());
    fortran.assign(mask.as_array());
    let mask = Mask::<Bitmask, Ix3>::from_raw(fortran, &params, &[2, 4, 4]).unwrap();
    assert_eq!(mask.to_indices::<i64>().unwrap(), idx);
    let pairs = mask.selected().unwrap();
    assert_eq!(pairs, vec![(0, 1), (1, 6), (2, 8), (3, 10), (4, 4), (5, 3), (6, 13), (7, 15)]);
}

/// The backward reads the values of a Fortran-order `I32Argmax` mask (copied, as they are not
/// contiguous) as it reads a standard one. Hand-worked: 2x2 windows of a 4x4 plane, two channels;
/// the gradient of window `(oh, ow)` is `1 + 4·c + 2·oh + ow` and lands on the window's
/// bottom-right input in channel 0, its top-left input in channel 1.
#[test]
fn backward_reads_fortran_order_i32_masks() {
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 2]);
    let idx = Array4::<i64>::from_shape_fn((1, 2, 2, 2), |(_, c, oh, ow)| {
        let (i, j) = if c == 0 { (1, 1) } else { (0, 0) };
        ((2 * oh + i) * 4 + 2 * ow + j) as i64
    });
    let g = Array4::<f32>::from_shape_fn((1, 2, 2, 2), |(_, c, oh, ow)| (1 + 4 * c + 2 * oh + ow) as f32);
    let x = Array4::<f32>::zeros((1, 2, 4, 4));
    let mut expected = Array4::<f32>::zeros((1, 2, 4, 4));
    for c in 0..2 {
        for (oh, ow) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let (i, j) = if c == 0 { (1, 1) } else { (0, 0) };
            expected[[0, c, 2 * oh + i, 2 * ow + j]] = (1 + 4 * c + 2 * oh + ow) as f32;
        }
    }
    let standard = Mask::<I32Argmax, Ix4>::from_indices(&idx, &params, &[1, 2, 4, 4]).unwrap();
    let mut fortran = Array4::<i8>::zeros(standard.as_array().raw_dim().f());
    fortran.assign(standard.as_array());
    assert!(fortran.as_slice().is_none());
    let mask = Mask::<I32Argmax, Ix4>::from_raw(fortran, &params, &[1, 2, 4, 4]).unwrap();
    assert_eq!(poolgrad::max_pool2d_with_mask_backward(&g, &x, &standard).unwrap(), expected);
    assert_eq!(poolgrad::max_pool2d_with_mask_backward(&g, &x, &mask).unwrap(), expected);
}

/// The cases of the hostile-input report at their full size, one per process, to be run by hand
/// in release under an address-space limit that the result fits in and a copy would not:
///
/// ```text
/// cargo test --release --test mask_in_place --no-run
/// (ulimit -v 8388608;  POOLGRAD_CASE=selected    cargo test --release --test mask_in_place -- --ignored full_size)
/// (ulimit -v 12582912; POOLGRAD_CASE=broadcast   cargo test --release --test mask_in_place -- --ignored full_size)
/// (ulimit -v 2097152;  POOLGRAD_CASE=fortran     cargo test --release --test mask_in_place -- --ignored full_size)
/// ```
///
/// `selected`: a zero `Bitmask` of 4 GiB for input `[1, 1, 2^16, 2^15]` (the old reservation:
/// 32 GiB). `broadcast`: zero-stride `i64` indices `[1, 1, 2^16, 2^16]` into an 8 GiB mask (the
/// old copy: 32 GiB). `fortran`: a 1.2 GB Fortran-order `I32Argmax` mask decoded to 256 MiB of
/// `i32` (the old copy: another 1.2 GB).
#[test]
#[ignore = "full-size cases, run by hand under ulimit -v (see the comment)"]
fn full_size() {
    let _serial = serial();
    match std::env::var("POOLGRAD_CASE").as_deref() {
        Ok("selected") => {
            let params = MaxPool2dParams::new([1, 1]);
            let shape = poolgrad::geometry::mask_shape(1, 1, [1, 1], [1 << 16, 1 << 15]).unwrap();
            let data = Array4::<i8>::zeros(shape);
            let mask = Mask::<Bitmask, _>::from_raw(data, &params, &[1, 1, 1 << 16, 1 << 15]).unwrap();
            assert_eq!(mask.selected().unwrap(), vec![]);
        }
        Ok("broadcast") => {
            let zero = [0i64];
            let dims = (1, 1, 1 << 16, 1 << 16);
            let idx = ArrayView4::from_shape(dims.strides((0, 0, 0, 0)), &zero[..]).unwrap();
            let params = MaxPool2dParams::new([1, 1]);
            let e = Mask::<Bitmask, Ix4>::from_indices(&idx, &params, &[1, 1, 1 << 16, 1 << 16]).unwrap_err();
            assert!(
                matches!(e, Error::IndexNotInWindow { ref position, .. } if position == &[0, 0, 0, 1]),
                "{e}"
            );
        }
        Ok("fortran") => {
            let params = MaxPool2dParams::new([3, 3]);
            let (side, out) = (3 << 13, 1 << 13);
            let shape = poolgrad::geometry::mask_shape(1, 1, [3, 3], [out, out]).unwrap();
            let mut fortran = Array4::<i8>::zeros(shape.f());
            // I32Argmax value e = 1 at every e: byte 4e is 1 (little-endian).
            let n = fortran.len();
            for (i, b) in fortran.as_slice_memory_order_mut().unwrap().iter_mut().enumerate() {
                // Memory order is column-major: element (0, 0, k, x) sits at k + 9·x.
                let (k, x) = (i % 9, i / 9);
                let flat = k * (n / 9) + x;
                *b = i8::from(flat < 4 * out * out && flat.is_multiple_of(4));
            }
            let mask = Mask::<I32Argmax, Ix4>::from_raw(fortran, &params, &[1, 1, side, side]).unwrap();
            let decoded = mask.to_indices::<i32>().unwrap();
            assert!(decoded.iter().all(|&v| v == 1));
        }
        other => panic!("set POOLGRAD_CASE to selected, broadcast or fortran (got {other:?})"),
    }
}

/// An `I32Argmax` mask whose bytes cannot be seen as `i32` (a view from byte 1 of a word-aligned
/// buffer) is pooled into the workspace and encoded in runs of 2^16 values shared among the
/// threads: with 4·256·200 = 204800 values (more than three runs) on 2 threads, every run lands
/// where an aligned mask has it, and the backward reads them all back.
#[test]
fn misaligned_i32_masks_encode_every_run() {
    use poolgrad::device::cpu::Cpu;
    use poolgrad::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward};
    use poolgrad::{MaskMut, MaskRef, Plan, TensorMut, TensorRef};
    let _serial = serial();
    let params = MaxPool2dParams::new([2, 2]);
    let x = Array4::from_shape_fn((1, 4, 512, 400), |(_, c, h, w)| ((c * 31 + h * 17 + w * 7) % 101) as f32);
    let cpu = Cpu::with_threads(2).unwrap();
    let aligned = poolgrad::on(&cpu).max_pool2d_with_mask(&x, &params, I32Argmax).unwrap();
    let shape = poolgrad::geometry::mask_shape(1, 4, [2, 2], [256, 200]).unwrap();
    let len: usize = shape.iter().product();
    let mut words = vec![i32::from_ne_bytes([77; 4]); (len + 1).div_ceil(4)];
    let shifted: &mut [i8] = bytemuck::cast_slice_mut(&mut words);
    let mut output = Array4::<f32>::zeros((1, 4, 256, 200));
    let op = MaxPool2dWithMask {
        input: TensorRef::from_array(&x).unwrap(),
        params,
        output: TensorMut::from_array(&mut output).unwrap(),
        mask: MaskMut::new(TensorMut::from_slice(&mut shifted[1..=len], &shape).unwrap(), I32Argmax),
    };
    Plan::new(&cpu, op).unwrap().run().unwrap();
    assert_eq!(output, aligned.output);
    assert_eq!(&shifted[1..=len], aligned.mask.as_array().as_slice().unwrap());
    // The backward reads those values from the misaligned bytes through a copy in its
    // workspace, sized for all of them.
    let grad = Array4::from_shape_fn((1, 4, 256, 200), |(_, c, h, w)| (c + h + w) as f32);
    let want = poolgrad::on(&cpu).max_pool2d_with_mask_backward(&grad, &x, &aligned.mask).unwrap();
    let mut grad_input = Array4::<f32>::zeros(x.raw_dim());
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::from_array(&grad).unwrap(),
        self_: TensorRef::from_array(&x).unwrap(),
        mask: MaskRef::new(TensorRef::from_slice(&shifted[1..=len], &shape).unwrap(), I32Argmax),
        params,
        grad_input: TensorMut::from_array(&mut grad_input).unwrap(),
    };
    Plan::new(&cpu, op).unwrap().run().unwrap();
    assert_eq!(grad_input, want);
}
