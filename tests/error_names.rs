//! Errors raised below the operation layer (the CPU kernels, the mask layouts' encoders and
//! decoders, the tensor views' checks) carry no operation of their own: whoever the caller called
//! names them, once. Each case here reaches one of those places through a public entry point and
//! checks the name and argument the caller sees.

use ndarray::{Array3, Array4, IxDyn, array};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::MaxPool2dWithMaskBackward;
use poolgrad::{Bitmask, Error, I32Argmax, Mask, MaxPool2dParams, Plan, TensorMut, TensorRef};

/// The operation and argument an error names, for the variants these cases raise.
fn names(e: &Error) -> (&'static str, &'static str) {
    match *e {
        Error::IndexOutOfRange { op, arg, .. }
        | Error::IndexNotInWindow { op, arg, .. }
        | Error::MaskContent { op, arg, .. }
        | Error::InvalidParameter { op, arg, .. }
        | Error::Rank { op, arg, .. }
        | Error::Layout { op, arg, .. }
        | Error::Overflow { op, arg, .. } => (op, arg),
        ref other => panic!("unexpected error {other:?}"),
    }
}

/// A scatter kernel's index error, through the free function (phase 2 of its plan).
#[test]
fn a_kernel_error_names_the_free_function() {
    let x = Array4::<f32>::zeros((1, 1, 3, 3));
    let (grad, idx) = (Array4::<f32>::ones((1, 1, 1, 1)), array![[[[9i64]]]]);
    let e = poolgrad::adaptive_max_pool2d_backward(&grad, &x, &idx).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 9, plane: 9, .. }), "{e:?}");
    assert_eq!(names(&e), ("adaptive_max_pool2d_backward", "indices"));
    assert!(e.to_string().starts_with("adaptive_max_pool2d_backward: "), "{e}");
}

/// An `I32Argmax` value outside the plane, met by the CPU's mask backward in phase 2 of a plan
/// the caller made: the descriptor's name.
#[test]
fn a_mask_value_error_names_the_descriptor() {
    let params = MaxPool2dParams::new([2, 2]);
    let mut bytes = Array4::<i8>::zeros(poolgrad::geometry::mask_shape(1, 1, [2, 2], [1, 1]).unwrap());
    bytes[[0, 0, 0, 0]] = 16; // flat index 16 in a 4x4 plane (16 elements)
    let (x, grad) = (Array4::<f32>::zeros((1, 1, 4, 4)), Array4::<f32>::ones((1, 1, 2, 2)));
    let mut gi = Array4::<f32>::zeros((1, 1, 4, 4));
    let op = MaxPool2dWithMaskBackward {
        grad_output: (&grad).into(),
        self_: (&x).into(),
        mask: poolgrad::MaskRef::new(TensorRef::from(&bytes), I32Argmax),
        params,
        grad_input: (&mut gi).into(),
    };
    let e = Plan::new(&Cpu::sequential(), op).and_then(Plan::run).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { value: 16, .. }), "{e:?}");
    assert_eq!(names(&e), ("max_pool2d_with_mask_backward", "mask"));
}

/// The layouts' encoders, decoders and checks, through the `Mask` methods: each method's own name.
#[test]
fn the_layouts_errors_name_the_mask_method() {
    let params = MaxPool2dParams::new([2, 2]);
    // Index 10 lies outside a 2x2 plane; index 2 of a 3x3 plane, (0, 2), outside the window of
    // output (0, 0) (rows 0-1, columns 0-1).
    let e = Mask::<Bitmask, _>::from_indices(&array![[[10i64]]], &params, &[1, 2, 2]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e:?}");
    assert_eq!(names(&e), ("Mask::from_indices", "indices"));
    let e = Mask::<Bitmask, _>::from_indices(&array![[[2i64]]], &params, &[1, 3, 3]).unwrap_err();
    assert!(matches!(e, Error::IndexNotInWindow { value: 2, .. }), "{e:?}");
    assert_eq!(names(&e), ("Mask::from_indices", "indices"));

    let shape = poolgrad::geometry::mask_shape(1, 1, [2, 2], [1, 1]).unwrap();
    let blank = Array3::<i8>::zeros((shape[1], shape[2], shape[3]));
    let e =
        Mask::<Bitmask, _>::from_raw(blank, &params, &[1, 2, 2]).unwrap().to_indices::<i64>().unwrap_err();
    assert!(matches!(e, Error::MaskContent { .. }), "{e:?}");
    assert_eq!(names(&e), ("Mask::to_indices", "mask"));

    let mut bad = Array3::<i8>::zeros((shape[1], shape[2], shape[3]));
    bad[[0, 0, 0]] = -1;
    let mask = Mask::<I32Argmax, _>::from_raw(bad, &params, &[1, 2, 2]).unwrap();
    assert_eq!(names(&mask.selected().unwrap_err()), ("Mask::selected", "mask"));
    assert_eq!(names(&mask.convert::<Bitmask>().unwrap_err()), ("Mask::convert", "mask"));

    // A 1x1 kernel over more than 16 positions leaves an I32Argmax mask too small: the check.
    let one = MaxPool2dParams::new([1, 1]);
    let e = Mask::<I32Argmax, ndarray::Ix4>::zeros(&one, &[1, 1, 8, 8], I32Argmax).unwrap_err();
    assert_eq!(names(&e), ("Mask::zeros", "mask"));
}

/// The tensor views' checks: the constructor called.
#[test]
fn the_views_errors_name_the_constructor() {
    let flat = ndarray::Array::<f32, IxDyn>::zeros(IxDyn(&[2, 2]));
    assert_eq!(names(&TensorRef::from_array(&flat).unwrap_err()), ("TensorRef::from_array", "array"));
    let mut six = ndarray::Array::<f32, IxDyn>::zeros(IxDyn(&[1, 1, 1, 1, 1, 1]));
    assert_eq!(names(&TensorMut::from_view(six.view_mut()).unwrap_err()), ("TensorMut::from_view", "view"));
    // A 5-D view whose D and H do not merge (every other depth of 2 x 2).
    let five = ndarray::Array5::<f32>::zeros((1, 1, 4, 2, 2));
    let stepped = five.slice(ndarray::s![.., .., ..;2, .., ..]);
    assert_eq!(names(&TensorRef::from_view(stepped).unwrap_err()), ("TensorRef::from_view", "view"));
    let e =
        TensorRef::from_slice_with_strides(&[0.0f32; 16], &[1, 1, 2, 2, 2], &[16, 16, 8, 2, 1]).unwrap_err();
    assert_eq!(names(&e), ("TensorRef::from_slice_with_strides", "strides"));
    let data = [0.0f32; 4];
    assert_eq!(
        names(&TensorRef::from_slice(&data, &[1, 2, 3]).unwrap_err()),
        ("TensorRef::from_slice", "data")
    );
    let e = TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[4, usize::MAX, 1]).unwrap_err();
    assert_eq!(names(&e), ("TensorRef::from_slice_with_strides", "strides"));
    let mut out = [0.0f32; 4];
    let e = TensorMut::from_slice_with_strides(&mut out, &[1, 2, 2], &[0, 0, 1]).unwrap_err();
    assert_eq!(names(&e), ("TensorMut::from_slice_with_strides", "strides"));
}
