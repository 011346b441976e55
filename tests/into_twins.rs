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

/// A sentinel the kernels never write here: finite, not an integer multiple of the values the
/// cases draw (ties, quarters, small integers).
const SENTINEL: f64 = 1234.5;

/// A buffer twice as wide as `shape`, every element `fill`; the even columns are the strided view
/// written into, the odd ones must keep `fill`.
fn wide<E: Clone>(shape: Ix4, fill: E) -> Array4<E> {
    let mut wide = shape;
    wide[3] *= 2;
    Array4::from_elem(wide, fill)
}

fn even_columns<E>(a: &mut Array4<E>) -> ArrayViewMut<'_, E, Ix4> {
    a.slice_mut(s![.., .., .., ..;2])
}

/// The odd columns still hold `fill` (bit for bit).
fn untouched<T: PoolFloat>(a: &Array4<T>, fill: T) -> bool {
    a.slice(s![.., .., .., 1..;2]).iter().all(|v| bytemuck::bytes_of(v) == bytemuck::bytes_of(&fill))
}

fn adaptive_into_checks<T: PoolFloat, I: ArgmaxIndex>(
    case: AdaptiveCase<T, I, Ix4>,
) -> Result<(), TestCaseError> {
    let fill = T::round_from_f64(SENTINEL);
    // Forward into owned arrays holding garbage, and into strided views.
    let mut out = Array4::from_elem(case.output.raw_dim(), fill);
    let mut idx = Array4::<I>::zeros(case.output.raw_dim());
    idx.fill(case.indices[[0, 0, 0, 0]]); // garbage in the valid range
    adaptive_max_pool2d_into(&case.input, case.output_size, &mut out, &mut idx).unwrap();
    case.check_forward(&out, &idx)?;
    let (mut wide_out, mut wide_idx) =
        (wide(case.output.raw_dim(), fill), wide(case.output.raw_dim(), idx[[0, 0, 0, 0]]));
    adaptive_max_pool2d_into_on(
        &Cpu::with_threads(2).unwrap(),
        &case.input,
        case.output_size,
        &mut even_columns(&mut wide_out),
        &mut even_columns(&mut wide_idx),
    )
    .unwrap();
    case.check_forward(&even_columns(&mut wide_out).to_owned(), &even_columns(&mut wide_idx).to_owned())?;
    prop_assert!(untouched(&wide_out, fill));
    // Backward into garbage, owned and strided.
    case.check_backward(|g| {
        let mut gi = Array4::from_elem(case.input.raw_dim(), fill);
        adaptive_max_pool2d_backward_into(g, &case.input, &case.indices, &mut gi).unwrap();
        gi
    })?;
    case.check_backward(|g| {
        let mut gi = wide(case.input.raw_dim(), fill);
        adaptive_max_pool2d_backward_into_on(
            &Cpu::sequential(),
            g,
            &case.input,
            &case.indices,
            &mut even_columns(&mut gi),
        )
        .unwrap();
        let result = even_columns(&mut gi).to_owned();
        assert!(untouched(&gi, fill));
        result
    })?;
    Ok(())
}

fn max_pool_into_checks<T: PoolFloat, I: ArgmaxIndex>(
    case: MaxPoolCase<T, I, Ix4>,
) -> Result<(), TestCaseError> {
    let fill = T::round_from_f64(SENTINEL);
    let mut out = Array4::from_elem(case.output.raw_dim(), fill);
    let mut idx = Array4::<I>::zeros(case.output.raw_dim());
    max_pool2d_with_indices_into(&case.input, &case.params, &mut out, &mut idx).unwrap();
    case.check_forward(&out, &idx)?;
    let (mut wide_out, mut wide_idx) =
        (wide(case.output.raw_dim(), fill), wide(case.output.raw_dim(), idx[[0, 0, 0, 0]]));
    max_pool2d_with_indices_into_on(
        &Cpu::with_threads(2).unwrap(),
        &case.input,
        &case.params,
        &mut even_columns(&mut wide_out),
        &mut even_columns(&mut wide_idx),
    )
    .unwrap();
    case.check_forward(&even_columns(&mut wide_out).to_owned(), &even_columns(&mut wide_idx).to_owned())?;
    prop_assert!(untouched(&wide_out, fill));
    case.check_backward(|g| {
        let mut gi = Array4::from_elem(case.input.raw_dim(), fill);
        max_pool2d_with_indices_backward_into(g, &case.input, &case.indices, &case.params, &mut gi).unwrap();
        gi
    })?;
    case.check_backward(|g| {
        let mut gi = wide(case.input.raw_dim(), fill);
        let view = &mut even_columns(&mut gi);
        max_pool2d_with_indices_backward_into_on(
            &Cpu::sequential(),
            g,
            &case.input,
            &case.indices,
            &case.params,
            view,
        )
        .unwrap();
        let result = even_columns(&mut gi).to_owned();
        assert!(untouched(&gi, fill));
        result
    })?;
    Ok(())
}

fn mask_into_checks<T: PoolFloat, L: MaskLayout>(case: MaskCase<T, L, Ix4>) -> Result<(), TestCaseError> {
    let fill = T::round_from_f64(SENTINEL);
    let shape = case.input.shape().to_vec();
    // A mask that held another result: the reference's mask of the input reversed along W.
    let mut mask = Mask::zeros(&case.params, &shape, L::default()).unwrap();
    let mut out = Array4::from_elem(case.output.raw_dim(), fill);
    let reversed = case.input.slice(s![.., .., .., ..;-1]).to_owned();
    max_pool2d_with_mask_into(&reversed, &mut out, &mut mask).unwrap();
    max_pool2d_with_mask_into(&case.input, &mut out, &mut mask).unwrap();
    case.check_forward(&out, &mask)?;
    let mut wide_out = wide(case.output.raw_dim(), fill);
    let mut mask2 = Mask::zeros(&case.params, &shape, L::default()).unwrap();
    max_pool2d_with_mask_into_on(
        &Cpu::with_threads(2).unwrap(),
        &case.input,
        &mut even_columns(&mut wide_out),
        &mut mask2,
    )
    .unwrap();
    case.check_forward(&even_columns(&mut wide_out).to_owned(), &mask2)?;
    prop_assert!(untouched(&wide_out, fill));
    case.check_backward(|g| {
        let mut gi = Array4::from_elem(case.input.raw_dim(), fill);
        max_pool2d_with_mask_backward_into(g, &case.input, &case.mask, &mut gi).unwrap();
        gi
    })?;
    case.check_backward(|g| {
        let mut gi = wide(case.input.raw_dim(), fill);
        max_pool2d_with_mask_backward_into_on(
            &Cpu::sequential(),
            g,
            &case.input,
            &case.mask,
            &mut even_columns(&mut gi),
        )
        .unwrap();
        let result = even_columns(&mut gi).to_owned();
        assert!(untouched(&gi, fill));
        result
    })?;
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

#[test]
fn outputs_of_another_shape_are_errors_naming_them() {
    let (x, k2) = (x(), MaxPool2dParams::new([2, 2]));
    let (mut out, mut idx) = (Array3::<f32>::zeros((1, 2, 2)), Array3::<i64>::zeros((1, 2, 2)));
    let (mut bad_out, mut bad_idx) = (Array3::<f32>::zeros((1, 2, 3)), Array3::<i64>::zeros((1, 3, 2)));
    let mismatch =
        |op, arg, got: &[usize]| Error::ShapeMismatch { op, arg, expected: vec![1, 2, 2], got: got.to_vec() };
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
    let gi_mismatch =
        |op| Error::ShapeMismatch { op, arg: "grad_input", expected: vec![1, 4, 4], got: vec![1, 4, 5] };
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
        Err(Error::ShapeMismatch {
            op: "max_pool2d_with_mask",
            arg: "input",
            expected: vec![1, 4, 5],
            got: vec![1, 4, 4]
        })
    );
    let m = max_pool2d_with_mask(&x, &k2, I32Argmax).unwrap();
    let wider = Array3::<f32>::zeros((1, 4, 5));
    let mut gi = Array3::<f32>::zeros((1, 4, 5));
    assert_eq!(
        max_pool2d_with_mask_backward_into(&Array3::<f32>::ones((1, 2, 2)), &wider, &m.mask, &mut gi),
        Err(Error::ShapeMismatch {
            op: "max_pool2d_with_mask_backward",
            arg: "self_",
            expected: vec![1, 4, 4],
            got: vec![1, 4, 5]
        })
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
