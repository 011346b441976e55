//! Every rejected input of the max-pooling operations: the variant, its fields and the message.

mod common;

use common::assert_message;

use ndarray::{Array3, Array4, array};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::MaxPool2dWithMaskBackward;
use poolgrad::{
    Bitmask, Error, I32Argmax, Mask, MaskRef, MaxPool2dParams, Plan, TensorMut, TensorRef,
    max_pool2d_with_indices, max_pool2d_with_indices_backward, max_pool2d_with_mask,
    max_pool2d_with_mask_backward,
};

const IDX: &str = "max_pool2d_with_indices";
const IDX_BWD: &str = "max_pool2d_with_indices_backward";
const MASK: &str = "max_pool2d_with_mask";
const MASK_BWD: &str = "max_pool2d_with_mask_backward";

#[test]
fn zero_kernel_stride_or_dilation() {
    let x = Array3::<f32>::zeros((1, 4, 4));
    for (params, arg, got) in [
        (MaxPool2dParams::new([0, 2]), "kernel", "[0, 2]"),
        (MaxPool2dParams::new([2, 2]).with_stride([2, 0]), "stride", "[2, 0]"),
        (MaxPool2dParams::new([2, 2]).with_dilation([0, 1]), "dilation", "[0, 1]"),
    ] {
        let e = max_pool2d_with_indices(&x, &params).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidParameter {
                op: IDX,
                arg,
                expected: "two values, each at least 1".into(),
                got: got.into()
            }
        );
        assert_message(&e, &[&format!("`{arg}`"), got, "at least 1"]);
    }
}

#[test]
fn padding_above_half_the_kernel() {
    let x = Array3::<f32>::zeros((1, 8, 8));
    let params = MaxPool2dParams::new([3, 4]).with_padding([2, 2]);
    let e = max_pool2d_with_mask(&x, &params, Bitmask).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: MASK, arg: "padding", .. }), "{e:?}");
    assert_message(&e, &["`padding`", "[2, 2]", "at most [1, 2]"]);
    assert!(
        poolgrad::max_pool2d_with_indices_i32(&x, &MaxPool2dParams::new([3, 4]).with_padding([1, 2])).is_ok()
    );
}

/// Whether `e` is the forward's [`Error::OutputTooSmall`] blaming `arg` along `axis` of an
/// input of spatial sizes `input`.
fn too_small(e: &Error, arg: &str, axis: &str, input: [usize; 2]) -> bool {
    matches!(e, Error::OutputTooSmall { op: IDX, arg: a, axis: x, input: i, .. }
        if *a == arg && *x == axis && i.as_slice() == input)
}

#[test]
fn output_below_one() {
    let x = Array4::<f32>::zeros((1, 1, 2, 9));
    let params = MaxPool2dParams::new([3, 3]);
    let e = max_pool2d_with_indices(&x, &params).unwrap_err();
    assert!(too_small(&e, "kernel", "H", [2, 9]), "{e:?}");
    assert_eq!(
        e.to_string(),
        "max_pool2d_with_indices: `kernel` is [3, 3], so a window spans 3 inputs along H, expected at \
         most 2 (H = 2 plus padding 0 on each side): the output would be empty"
    );
}

/// A huge dilation, not the input, is at fault: the error says so, with the span it makes.
#[test]
fn output_below_one_from_dilation() {
    let x = Array4::<f32>::zeros((1, 1, 9, 9));
    let params = MaxPool2dParams::new([3, 3]).with_padding([1, 1]).with_dilation([1, 1000]);
    let e = max_pool2d_with_indices(&x, &params).unwrap_err();
    assert!(too_small(&e, "dilation", "W", [9, 9]), "{e:?}");
    assert_eq!(
        e.to_string(),
        "max_pool2d_with_indices: `dilation` is [1, 1000], so a window spans 2001 = 1000·(3 − 1) + 1 \
         inputs along W, expected at most 11 (W = 9 plus padding 1 on each side): the output would be \
         empty"
    );
    // A dilated kernel that would not fit undilated either: the kernel is at fault.
    let params = MaxPool2dParams::new([12, 3]).with_dilation([2, 1]);
    let e = max_pool2d_with_indices(&x, &params).unwrap_err();
    assert!(too_small(&e, "kernel", "H", [9, 9]), "{e:?}");
    assert!(
        e.to_string().contains("`kernel` is [12, 3], so a window spans 23 = 2·(12 − 1) + 1 inputs along H"),
        "{e}"
    );
    // Ceil mode gives a window stride − 1 more room.
    let params = MaxPool2dParams::new([5, 1]).with_stride([3, 1]).with_ceil_mode(true);
    let e = params.output_size([2, 4]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "MaxPool2dParams::output_size: `kernel` is [5, 1], so a window spans 5 inputs along H, expected \
         at most 4 (H = 2 plus padding 0 on each side, plus stride − 1 = 2 in ceil mode): the output \
         would be empty"
    );
    assert_eq!(params.output_size([3, 4]).unwrap(), [1, 4]);
}

/// An output length past `usize::MAX` is an overflow, not an empty output.
#[test]
fn output_length_overflow() {
    let params = MaxPool2dParams::new([2, 1]).with_stride([1, 1]).with_padding([1, 0]);
    let e = params.output_size([usize::MAX, 1]).unwrap_err();
    assert!(matches!(e, Error::Overflow { arg: "input", .. }), "{e:?}");
    assert_message(&e, &[&format!("along H = {}", usize::MAX), "exceeds usize::MAX"]);
}

/// A mask whose size overflows names the parameter at fault and its values, never an internal
/// struct.
#[cfg(target_pointer_width = "64")]
#[test]
fn mask_size_overflow_names_the_parameter() {
    let params = MaxPool2dParams::new([2, 2]);
    let e = Mask::<Bitmask, ndarray::Ix4>::from_raw(
        Array4::zeros((0, 0, 0, 0)),
        &params,
        &[1 << 40, 1 << 30, 2, 2],
    )
    .unwrap_err();
    assert_eq!(
        e,
        Error::Overflow {
            op: "Mask::from_raw",
            arg: "input_shape",
            what: "the mask of N·C·kH·kW·(⌈Ho·Wo/16⌉ + 1)·32 bytes, for input [1099511627776, 1073741824, 2, 2], \
                   kernel [2, 2] and output 1x1, exceeds usize::MAX"
                .into()
        }
    );
    let params = MaxPool2dParams::new([1 << 32, 1 << 32]).with_padding([1 << 31, 1 << 31]);
    let e = Mask::<Bitmask, ndarray::Ix4>::from_raw(Array4::zeros((0, 0, 0, 0)), &params, &[1, 1, 1, 1])
        .unwrap_err();
    assert!(matches!(e, Error::Overflow { arg: "kernel", .. }), "{e:?}");
    assert!(!e.to_string().contains("Geometry"), "{e}");
}

#[test]
fn dilation_on_a_mask_op() {
    let x = Array3::<f32>::zeros((1, 8, 8));
    let params = MaxPool2dParams::new([2, 2]).with_dilation([2, 1]);
    let e = max_pool2d_with_mask(&x, &params, I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: MASK, arg: "dilation", .. }), "{e:?}");
    assert_message(&e, &["`dilation`", "[2, 1]", "[1, 1]", "dilation"]);
    let g = Array3::<f32>::zeros((1, 3, 7));
    let mut gi = Array3::<f32>::zeros((1, 8, 8));
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::from_array(&g).unwrap(),
        self_: TensorRef::from_array(&x).unwrap(),
        mask: MaskRef::new(TensorRef::from_slice(&[0i8; 64 * 4], &[1, 4, 64]).unwrap(), Bitmask),
        params,
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    let e = Plan::new(&Cpu::sequential(), op).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: MASK_BWD, arg: "dilation", .. }), "{e:?}");
}

#[test]
fn mask_of_the_wrong_shape() {
    // 4x4, k=2: the mask is [1, 4, 64].
    let x = Array3::<f32>::zeros((1, 4, 4));
    let g = Array3::<f32>::zeros((1, 2, 2));
    let params = MaxPool2dParams::new([2, 2]);
    let mut gi = Array3::<f32>::zeros((1, 4, 4));
    let bytes = Array3::<i8>::zeros((1, 4, 32));
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::from_array(&g).unwrap(),
        self_: TensorRef::from_array(&x).unwrap(),
        mask: MaskRef::new(TensorRef::from_array(&bytes).unwrap(), I32Argmax),
        params,
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    let e = Plan::new(&Cpu::sequential(), op).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: MASK_BWD, arg: "mask", expected: vec![1, 4, 64], got: vec![1, 4, 32] }
    );
    assert_message(&e, &["`mask`", "[1, 4, 32]", "expected [1, 4, 64]"]);

    let e =
        Mask::<Bitmask, _>::from_raw(Array4::<i8>::zeros((1, 1, 4, 64)), &params, &[1, 4, 4]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { arg: "data", .. }), "{e:?}");
}

#[test]
fn i32argmax_value_outside_the_plane() {
    let x = Array4::<f32>::zeros((1, 2, 4, 4));
    let params = MaxPool2dParams::new([2, 2]);
    let mut bytes = vec![0i8; 2 * 4 * 64];
    // Element 5 = (n 0, c 1, oh 0, ow 1): value 16 = H*W.
    bytes[20] = 16;
    let mask = Mask::<I32Argmax, _>::from_raw(
        Array4::from_shape_vec((1, 2, 4, 64), bytes).unwrap(),
        &params,
        &[1, 2, 4, 4],
    )
    .unwrap();
    let g = Array4::<f32>::ones((1, 2, 2, 2));
    let e = max_pool2d_with_mask_backward(&g, &x, &mask).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: MASK_BWD,
            arg: "mask",
            position: vec![0, 1, 0, 1],
            value: 16,
            plane: 16
        }
    );
    assert_message(&e, &["`mask`", "16", "[0, 1, 0, 1]", "[0, 16)"]);
    let e = mask.to_indices::<i64>().unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 16, .. }), "{e:?}");

    // A negative value (bytes ff ff ff ff = -1).
    let mut bytes = vec![0i8; 2 * 4 * 64];
    bytes[..4].copy_from_slice(&[-1, -1, -1, -1]);
    let mask = Mask::<I32Argmax, _>::from_raw(
        Array4::from_shape_vec((1, 2, 4, 64), bytes).unwrap(),
        &params,
        &[1, 2, 4, 4],
    )
    .unwrap();
    let e = max_pool2d_with_mask_backward(&g, &x, &mask).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { value: -1, ref position, .. } if *position == vec![0, 0, 0, 0]),
        "{e:?}"
    );
}

#[test]
fn grad_and_indices_shape_mismatches() {
    let x = Array4::<f32>::zeros((2, 3, 6, 6));
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]); // 3x3 output
    let g = Array4::<f32>::zeros((2, 3, 2, 3));
    let i = Array4::<i64>::zeros((2, 3, 3, 3));
    let e = max_pool2d_with_indices_backward(&g, &x, &i, &params).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: IDX_BWD,
            arg: "grad_output",
            expected: vec![2, 3, 3, 3],
            got: vec![2, 3, 2, 3]
        }
    );
    let g = Array4::<f32>::zeros((2, 3, 3, 3));
    let i = Array4::<i64>::zeros((1, 3, 3, 3));
    let e = max_pool2d_with_indices_backward(&g, &x, &i, &params).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: IDX_BWD,
            arg: "indices",
            expected: vec![2, 3, 3, 3],
            got: vec![1, 3, 3, 3]
        }
    );
    let mut i = Array4::<i64>::zeros((2, 3, 3, 3));
    i[[1, 2, 0, 2]] = 36;
    let e = max_pool2d_with_indices_backward(&g, &x, &i, &params).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: IDX_BWD,
            arg: "indices",
            position: vec![1, 2, 0, 2],
            value: 36,
            plane: 36
        }
    );
}

/// The mask carries its parameters (nothing to contradict), and its input shape, which `self_`
/// must have.
#[test]
fn mask_backward_with_another_input() {
    let x = Array3::<f32>::zeros((1, 4, 4));
    let params = MaxPool2dParams::new([2, 2]);
    let pooled = max_pool2d_with_mask(&x, &params, Bitmask).unwrap();
    let g = Array3::<f32>::zeros((1, 2, 2));
    let y = Array3::<f32>::zeros((1, 5, 4)); // also pools to 2x2
    let e = max_pool2d_with_mask_backward(&g, &y, &pooled.mask).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: MASK_BWD, arg: "self_", expected: vec![1, 4, 4], got: vec![1, 5, 4] }
    );
}

#[test]
fn indices_outside_their_window_cannot_be_bitmask_encoded() {
    let params = MaxPool2dParams::new([2, 2]);
    // Output (0, 1) covers columns 2..4 of rows 0..2; index 0 is in the plane but not there.
    let idx = array![[[1i64, 0], [8, 10]]];
    let e = Mask::<Bitmask, _>::from_indices(&idx, &params, &[1, 4, 4]).unwrap_err();
    assert_eq!(
        e,
        Error::IndexNotInWindow {
            op: "Mask::from_indices",
            arg: "indices",
            position: vec![0, 0, 1],
            value: 0
        }
    );
    assert_message(&e, &["`indices`", "[0, 0, 1]", "outside"]);
    // The I32Argmax layout stores any in-plane index.
    assert!(Mask::<I32Argmax, _>::from_indices(&idx, &params, &[1, 4, 4]).is_ok());
    // Just past the window: one row below (row 2 for output row 0) and one column right (column 2
    // for output column 0), and just before it (row 1 for output row 1, in a 2x2 window at 2).
    for (at, value) in [(0, 8i64), (0, 2), (2, 5)] {
        let mut idx = array![[[1i64, 3], [9, 11]]];
        idx.as_slice_mut().unwrap()[at] = value;
        let e = Mask::<Bitmask, _>::from_indices(&idx, &params, &[1, 4, 4]).unwrap_err();
        assert!(matches!(e, Error::IndexNotInWindow { value: v, .. } if v == value), "{value}: {e:?}");
    }
    let idx = array![[[1i64, 16], [8, 10]]];
    let e = Mask::<I32Argmax, _>::from_indices(&idx, &params, &[1, 4, 4]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 16, plane: 16, .. }), "{e:?}");
}

#[test]
fn empty_bitmask_position_cannot_be_decoded() {
    let params = MaxPool2dParams::new([2, 2]);
    let mask = Mask::<Bitmask, _>::from_raw(Array3::<i8>::zeros((1, 4, 64)), &params, &[1, 4, 4]).unwrap();
    let e = mask.to_indices::<i32>().unwrap_err();
    assert_eq!(
        e,
        Error::MaskContent {
            op: "Mask::to_indices",
            arg: "mask",
            position: vec![0, 0, 0],
            reason: "no window offset has its bit set".into()
        }
    );
    // The backward of an empty bit mask is a zero gradient (no bit, no contribution).
    let g = Array3::<f32>::ones((1, 2, 2));
    let gx = max_pool2d_with_mask_backward(&g, &Array3::<f32>::zeros((1, 4, 4)), &mask).unwrap();
    assert!(gx.iter().all(|&v| v == 0.0));
}
