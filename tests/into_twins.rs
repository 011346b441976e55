//! The `_into` twins (PyTorch's `out=`): each writes what the reference computes (the testing
//! kit's cases carry `poolgrad::testing::reference`'s plain loops, never the forms under test)
//! into the caller's arrays, owned or strided views, replacing whatever was there and touching
//! nothing outside the view; the same checks as the allocating forms, with errors naming the
//! argument.

use ndarray::{Array3, Array4, ArrayViewMut, Ix4, s};
use poolgrad::prelude::*;
use poolgrad::testing::{
    AdaptiveCase, MaskCase, MaxPoolCase, ParamBounds, Shapes, Values, adaptive_cases, mask_cases,
    max_pool_cases,
};
use proptest::prelude::*;

/// Garbage no call here writes (rounded to 1234 in f16, 1232 in bf16): forward values lie in
/// the cases' inputs (in [-125, 125)), and a gradient sums at most a few dozen of the kit's
/// gradients (each at most 8 in magnitude) on these small shapes.
const SENTINEL: f64 = 1234.5;

/// The caller's buffers an `_into` form is tested with.
#[derive(Clone, Copy, Debug)]
enum Buffer {
    /// An owned array holding garbage, written by the `_into` form on the default device.
    Owned,
    /// The even columns of an array twice as wide, written by the `_into` method of
    /// `on(&Cpu::with_threads(2))`; the odd columns must keep their garbage.
    Strided,
}

impl Buffer {
    const BOTH: [Buffer; 2] = [Buffer::Owned, Buffer::Strided];

    /// A buffer for a result of `shape`, every element `fill`.
    fn filled<E: Clone>(self, shape: Ix4, fill: E) -> Array4<E> {
        let mut dims = shape;
        if let Buffer::Strided = self {
            dims[3] *= 2;
        }
        Array4::from_elem(dims, fill)
    }

    /// The view the `_into` form writes.
    fn view<'a, E>(self, a: &'a mut Array4<E>) -> ArrayViewMut<'a, E, Ix4> {
        match self {
            Buffer::Owned => a.view_mut(),
            Buffer::Strided => a.slice_mut(s![.., .., .., ..;2]),
        }
    }

    /// What was written, after checking (strided) that nothing outside the view changed.
    fn written<E: bytemuck::Pod>(self, a: Array4<E>, fill: E) -> Array4<E> {
        match self {
            Buffer::Owned => a,
            Buffer::Strided => {
                let outside = a.slice(s![.., .., .., 1..;2]);
                assert!(
                    outside.iter().all(|v| bytemuck::bytes_of(v) == bytemuck::bytes_of(&fill)),
                    "wrote outside the view"
                );
                a.slice(s![.., .., .., ..;2]).to_owned()
            }
        }
    }
}

fn two_threads() -> Cpu {
    Cpu::with_threads(2).unwrap().with_grain(0)
}

fn adaptive_into_checks<T: PoolFloat, I: ArgmaxIndex>(
    case: AdaptiveCase<T, I, Ix4>,
) -> Result<(), TestCaseError> {
    let (fill, ifill) = (T::round_from_f64(SENTINEL), case.indices[[0, 0, 0, 0]]);
    let (x, size, shape) = (&case.input, case.output_size, case.output.raw_dim());
    for b in Buffer::BOTH {
        let (mut out, mut idx) = (b.filled(shape, fill), b.filled(shape, ifill));
        let (o, i) = (&mut b.view(&mut out), &mut b.view(&mut idx));
        match b {
            Buffer::Owned => adaptive_max_pool2d_into(x, size, o, i),
            Buffer::Strided => poolgrad::on(&two_threads()).adaptive_max_pool2d_into(x, size, o, i),
        }
        .unwrap();
        case.check_forward(&b.written(out, fill), &b.written(idx, ifill))?;
        case.check_backward(|g| {
            let mut gi = b.filled(x.raw_dim(), fill);
            let view = &mut b.view(&mut gi);
            match b {
                Buffer::Owned => adaptive_max_pool2d_backward_into(g, x, &case.indices, view),
                Buffer::Strided => {
                    poolgrad::on(&two_threads()).adaptive_max_pool2d_backward_into(g, x, &case.indices, view)
                }
            }
            .unwrap();
            b.written(gi, fill)
        })?;
    }
    Ok(())
}

fn max_pool_into_checks<T: PoolFloat, I: ArgmaxIndex>(
    case: MaxPoolCase<T, I, Ix4>,
) -> Result<(), TestCaseError> {
    let (fill, ifill) = (T::round_from_f64(SENTINEL), case.indices[[0, 0, 0, 0]]);
    let (x, params, shape) = (&case.input, &case.params, case.output.raw_dim());
    for b in Buffer::BOTH {
        let (mut out, mut idx) = (b.filled(shape, fill), b.filled(shape, ifill));
        let (o, i) = (&mut b.view(&mut out), &mut b.view(&mut idx));
        match b {
            Buffer::Owned => max_pool2d_with_indices_into(x, params, o, i),
            Buffer::Strided => poolgrad::on(&two_threads()).max_pool2d_with_indices_into(x, params, o, i),
        }
        .unwrap();
        case.check_forward(&b.written(out, fill), &b.written(idx, ifill))?;
        case.check_backward(|g| {
            let mut gi = b.filled(x.raw_dim(), fill);
            let view = &mut b.view(&mut gi);
            let ix = &case.indices;
            match b {
                Buffer::Owned => max_pool2d_with_indices_backward_into(g, x, ix, params, view),
                Buffer::Strided => {
                    poolgrad::on(&two_threads()).max_pool2d_with_indices_backward_into(g, x, ix, params, view)
                }
            }
            .unwrap();
            b.written(gi, fill)
        })?;
    }
    Ok(())
}

fn mask_into_checks<T: PoolFloat, L: MaskLayout>(case: MaskCase<T, L, Ix4>) -> Result<(), TestCaseError> {
    let fill = T::round_from_f64(SENTINEL);
    let (x, shape) = (&case.input, case.output.raw_dim());
    // A mask that held another result first: the input reversed along W.
    let reversed = x.slice(s![.., .., .., ..;-1]).to_owned();
    for b in Buffer::BOTH {
        let mut mask = Mask::zeros(&case.params, x.shape(), L::default()).unwrap();
        let mut out = b.filled(shape, fill);
        let o = &mut b.view(&mut out);
        max_pool2d_with_mask_into(&reversed, o, &mut mask).unwrap();
        match b {
            Buffer::Owned => max_pool2d_with_mask_into(x, o, &mut mask),
            Buffer::Strided => poolgrad::on(&two_threads()).max_pool2d_with_mask_into(x, o, &mut mask),
        }
        .unwrap();
        case.check_forward(&b.written(out, fill), &mask)?;
        case.check_backward(|g| {
            let mut gi = b.filled(x.raw_dim(), fill);
            let view = &mut b.view(&mut gi);
            match b {
                Buffer::Owned => max_pool2d_with_mask_backward_into(g, x, &case.mask, view),
                Buffer::Strided => {
                    poolgrad::on(&two_threads()).max_pool2d_with_mask_backward_into(g, x, &case.mask, view)
                }
            }
            .unwrap();
            b.written(gi, fill)
        })?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test] fn adaptive_f32_i64(case in adaptive_cases::<f32, i64, Ix4>(Shapes::default(), Values::WithNan)) { adaptive_into_checks(case)?; }
    #[test] fn adaptive_f64_i32(case in adaptive_cases::<f64, i32, Ix4>(Shapes::default(), Values::Distinct)) { adaptive_into_checks(case)?; }
    #[test] fn adaptive_f16_i32(case in adaptive_cases::<half::f16, i32, Ix4>(Shapes::default(), Values::Ties)) { adaptive_into_checks(case)?; }
    #[test] fn adaptive_bf16_i64(case in adaptive_cases::<half::bf16, i64, Ix4>(Shapes::default(), Values::WithNan)) { adaptive_into_checks(case)?; }
    #[test] fn max_pool_f32_i32(case in max_pool_cases::<f32, i32, Ix4>(Shapes::default(), ParamBounds::default(), Values::WithNan)) { max_pool_into_checks(case)?; }
    #[test] fn max_pool_f64_i64(case in max_pool_cases::<f64, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties)) { max_pool_into_checks(case)?; }
    #[test] fn max_pool_f16_i64(case in max_pool_cases::<half::f16, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties)) { max_pool_into_checks(case)?; }
    #[test] fn max_pool_bf16_i32(case in max_pool_cases::<half::bf16, i32, Ix4>(Shapes::default(), ParamBounds::default(), Values::Distinct)) { max_pool_into_checks(case)?; }
    #[test] fn mask_f32_bitmask(case in mask_cases::<f32, Bitmask, Ix4>(Shapes::default(), ParamBounds::default(), Values::WithNan)) { mask_into_checks(case)?; }
    #[test] fn mask_bf16_i32argmax(case in mask_cases::<half::bf16, I32Argmax, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties)) { mask_into_checks(case)?; }
    #[test] fn mask_f16_bitmask(case in mask_cases::<half::f16, Bitmask, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties)) { mask_into_checks(case)?; }
    #[test] fn mask_f64_i32argmax(case in mask_cases::<f64, I32Argmax, Ix4>(Shapes::default(), ParamBounds::default(), Values::Distinct)) { mask_into_checks(case)?; }
}

/// A 1x4x4 input (hand-worked: windows of 2x2 hold maxima 5, 7, 9, 6 at flat 1, 6, 8, 10).
fn x() -> Array3<f32> {
    ndarray::array![[
        [0.0f32, 5.0, 1.0, 1.0],
        [2.0, 3.0, 7.0, 0.0],
        [9.0, 1.0, 6.0, 4.0],
        [0.0, 8.0, 6.0, 2.0]
    ]]
}

fn shape_error(op: &'static str, arg: &'static str, expected: &[usize], got: &[usize]) -> Error {
    Error::ShapeMismatch { op, arg, expected: expected.to_vec(), got: got.to_vec() }
}

#[test]
fn outputs_of_another_shape_are_errors_naming_them() {
    let (x, k2) = (x(), MaxPool2dParams::new([2, 2]));
    let (mut out, mut idx) = (Array3::<f32>::zeros((1, 2, 2)), Array3::<i64>::zeros((1, 2, 2)));
    let (mut bad_out, mut bad_idx) = (Array3::<f32>::zeros((1, 2, 3)), Array3::<i64>::zeros((1, 3, 2)));
    let mismatch = |op, arg, got: &[usize]| shape_error(op, arg, &[1, 2, 2], got);
    assert_eq!(
        adaptive_max_pool2d_into(&x, [2, 2], &mut bad_out, &mut idx),
        Err(mismatch("adaptive_max_pool2d", "output", &[1, 2, 3]))
    );
    assert_eq!(
        adaptive_max_pool2d_into(&x, [2, 2], &mut out, &mut bad_idx),
        Err(mismatch("adaptive_max_pool2d", "indices", &[1, 3, 2]))
    );
    assert_eq!(
        max_pool2d_with_indices_into(&x, &k2, &mut bad_out, &mut idx),
        Err(mismatch("max_pool2d_with_indices", "output", &[1, 2, 3]))
    );
    let mut mask = Mask::zeros(&k2, &[1, 4, 4], Bitmask).unwrap();
    assert_eq!(
        max_pool2d_with_mask_into(&x, &mut bad_out, &mut mask),
        Err(mismatch("max_pool2d_with_mask", "output", &[1, 2, 3]))
    );
    // Backwards: grad_input must have self_'s shape.
    let g = Array3::<f32>::ones((1, 2, 2));
    let mut bad_gi = Array3::<f32>::zeros((1, 4, 5));
    let gi_mismatch = |op| shape_error(op, "grad_input", &[1, 4, 4], &[1, 4, 5]);
    let p = max_pool2d_with_indices(&x, &k2).unwrap();
    assert_eq!(
        adaptive_max_pool2d_backward_into(&g, &x, &p.indices, &mut bad_gi),
        Err(gi_mismatch("adaptive_max_pool2d_backward"))
    );
    assert_eq!(
        max_pool2d_with_indices_backward_into(&g, &x, &p.indices, &k2, &mut bad_gi),
        Err(gi_mismatch("max_pool2d_with_indices_backward"))
    );
    let m = max_pool2d_with_mask(&x, &k2, Bitmask).unwrap();
    assert_eq!(
        max_pool2d_with_mask_backward_into(&g, &x, &m.mask, &mut bad_gi),
        Err(gi_mismatch("max_pool2d_with_mask_backward"))
    );
}

#[test]
fn a_mask_made_for_another_input_is_an_error() {
    let (x, k2) = (x(), MaxPool2dParams::new([2, 2]));
    let mut out = Array3::<f32>::zeros((1, 2, 2));
    let mut mask = Mask::zeros(&k2, &[1, 4, 5], I32Argmax).unwrap();
    assert_eq!(
        max_pool2d_with_mask_into(&x, &mut out, &mut mask),
        Err(shape_error("max_pool2d_with_mask", "input", &[1, 4, 5], &[1, 4, 4]))
    );
    let m = max_pool2d_with_mask(&x, &k2, I32Argmax).unwrap();
    let wider = Array3::<f32>::zeros((1, 4, 5));
    let mut gi = Array3::<f32>::zeros((1, 4, 5));
    assert_eq!(
        max_pool2d_with_mask_backward_into(&Array3::<f32>::ones((1, 2, 2)), &wider, &m.mask, &mut gi),
        Err(shape_error("max_pool2d_with_mask_backward", "self_", &[1, 4, 4], &[1, 4, 5]))
    );
}

/// A training loop's reuse: the second step's gradient replaces the first's (hand-worked: with
/// gradients 1, 2, 3, 4 at flat 1, 6, 8, 10, then 10, 20, 30, 40).
#[test]
fn a_reused_gradient_buffer_is_replaced_not_added_to() {
    let (x, k2) = (x(), MaxPool2dParams::new([2, 2]));
    let p = max_pool2d_with_indices_i32(&x, &k2).unwrap();
    let mut gi = Array3::<f32>::zeros((1, 4, 4));
    for scale in [1.0f32, 10.0] {
        let g = ndarray::array![[[1.0f32, 2.0], [3.0, 4.0]]] * scale;
        max_pool2d_with_indices_backward_into(&g, &x, &p.indices, &k2, &mut gi).unwrap();
        let mut want = Array3::<f32>::zeros((1, 4, 4));
        for (flat, v) in [(1, 1.0), (6, 2.0), (8, 3.0), (10, 4.0)] {
            want[[0, flat / 4, flat % 4]] = v * scale;
        }
        assert_eq!(gi, want);
    }
}

#[test]
fn mask_zeros_checks_its_pooling_and_rank() {
    let k2 = MaxPool2dParams::new([2, 2]);
    let m = Mask::<Bitmask, ndarray::Ix3>::zeros(&k2, &[1, 4, 4], Bitmask).unwrap();
    assert!(m.as_array().iter().all(|&b| b == 0));
    assert_eq!(m.params(), &k2);
    assert_eq!(m.input_shape(), vec![1, 4, 4]);
    // The same as from_raw's check: a 1x1 kernel over 16x16 leaves an I32Argmax mask too small.
    let k1 = MaxPool2dParams::new([1, 1]);
    let e = Mask::<I32Argmax, ndarray::Ix4>::zeros(&k1, &[1, 1, 16, 16], I32Argmax).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { .. }), "{e}");
    // A shape of another rank than the mask's dimension.
    let e = Mask::<Bitmask, ndarray::Ix4>::zeros(&k2, &[1, 4, 4], Bitmask).unwrap_err();
    assert_eq!(
        e,
        Error::Rank {
            op: "Mask::zeros",
            arg: "input_shape",
            expected: "4 (the mask's Ix4)",
            got: 3,
            shape: vec![1, 4, 4]
        }
    );
}
