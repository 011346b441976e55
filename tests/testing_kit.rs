//! The downstream testing kit (`poolgrad::testing`): poolgrad's own operations pass its checks,
//! and deliberately wrong user implementations are caught with a readable report.

use ndarray::{ArrayD, Axis, IxDyn};
use poolgrad::testing::{
    FiniteDifference, ParamBounds, Shapes, Values, adaptive_cases, finite_difference_check, mask_cases,
    max_pool_cases, reference::Pooling,
};
use poolgrad::{Bitmask, I32Argmax, MaxPool2dParams};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn poolgrad_adaptive_passes_the_kit(case in adaptive_cases::<f32, i64>(Shapes::default(), Values::WithNan)) {
        let mine = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| poolgrad::adaptive_max_pool2d_backward(g, &case.input, &case.indices).unwrap())?;
    }

    #[test]
    fn poolgrad_max_pool_passes_the_kit(
        case in max_pool_cases::<half::bf16, i32>(Shapes::default(), ParamBounds::default(), Values::Ties),
    ) {
        let mine = poolgrad::max_pool2d_with_indices_i32(&case.input, &case.params).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| {
            poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap()
        })?;
    }

    #[test]
    fn poolgrad_bitmask_passes_the_kit(
        case in mask_cases::<f32, Bitmask>(Shapes { channels: 1..=20, ..Shapes::default() }, ParamBounds::default(), Values::Ties),
    ) {
        let mine = poolgrad::max_pool2d_with_mask(&case.input, &case.params, Bitmask).unwrap();
        case.check_forward(&mine.output, &mine.mask)?;
        case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
    }

    #[test]
    fn poolgrad_i32argmax_passes_the_kit(
        case in mask_cases::<half::f16, I32Argmax>(Shapes::default(), ParamBounds::default(), Values::Distinct),
    ) {
        let mine = poolgrad::max_pool2d_with_mask(&case.input, &case.params, I32Argmax).unwrap();
        case.check_forward(&mine.output, &mine.mask)?;
        case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
    }

    /// poolgrad's gradient equals the finite differences wherever the windows have a clear maximum.
    #[test]
    fn poolgrad_gradient_matches_finite_differences(
        case in max_pool_cases::<f64, i64>(Shapes::default(), ParamBounds::default(), Values::Distinct),
    ) {
        let gx = poolgrad::max_pool2d_with_indices_backward(&case.grad_output, &case.input, &case.indices, &case.params).unwrap();
        let report = finite_difference_check(&case.pooling(), &case.input, &case.grad_output, &gx, &FiniteDifference::default())?;
        prop_assert_eq!(report.checked + report.skipped, case.input.len());
    }
}

/// A user's backward that forgets to accumulate (`=` instead of `+=`): overlapping windows that
/// pick the same input lose gradient.
fn dropped_accumulation(g: &ArrayD<f32>, input: &ArrayD<f32>, idx: &ArrayD<i64>) -> ArrayD<f32> {
    let mut gx = ArrayD::<f32>::zeros(input.raw_dim());
    let s = input.shape();
    let plane = s[s.len() - 2] * s[s.len() - 1];
    let outputs = g.len() / (gx.len() / plane);
    let flat = gx.as_slice_mut().unwrap();
    for (e, (&gv, &i)) in g.iter().zip(idx.iter()).enumerate() {
        flat[(e / outputs) * plane + i as usize] = gv; // the bug
    }
    gx
}

/// Runs a property with the kit's strategy and returns the report of the minimal failure.
fn first_failure<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) -> String {
    let mut runner = TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() });
    match runner.run(&strategy, test) {
        Err(TestError::Fail(reason, _)) => reason.to_string(),
        other => panic!("the kit did not catch the bug: {other:?}"),
    }
}

#[test]
fn a_dropped_accumulation_is_caught_with_a_readable_report() {
    let report = first_failure(
        max_pool_cases::<f32, i64>(Shapes::default(), ParamBounds::default(), Values::Ties),
        |case| {
            case.check_backward(|g| dropped_accumulation(g, &case.input, &case.indices))?;
            Ok(())
        },
    );
    println!("report printed for a dropped accumulation:\n  {report}");
    assert!(report.contains("backward vs reference: first mismatch at ["), "{report}");
    assert!(report.contains("expected") && report.contains("got"), "{report}");
}

/// A user's adaptive forward with an off-by-one window end (`⌈(i+1)H/Ho⌉ - 1`).
fn off_by_one_forward(x: &ArrayD<f32>, [ho, wo]: [usize; 2]) -> (ArrayD<f32>, ArrayD<i64>) {
    let x4 = if x.ndim() == 3 { x.view().insert_axis(Axis(0)) } else { x.view() };
    let s = x4.shape().to_vec();
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    let mut dims = x.shape().to_vec();
    let r = dims.len();
    dims[r - 2] = ho;
    dims[r - 1] = wo;
    let mut out = Vec::new();
    let mut idx = Vec::new();
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                for ow in 0..wo {
                    let (h0, h1) =
                        (oh * h / ho, ((oh + 1) * h).div_ceil(ho).saturating_sub(1).max(oh * h / ho + 1));
                    let (w0, w1) = (ow * w / wo, ((ow + 1) * w).div_ceil(wo));
                    let mut best = (f32::NEG_INFINITY, (h0 * w + w0) as i64);
                    for ih in h0..h1 {
                        for iw in w0..w1 {
                            let v = x4[[b, ch, ih, iw]];
                            if v > best.0 || v.is_nan() {
                                best = (v, (ih * w + iw) as i64);
                            }
                        }
                    }
                    out.push(best.0);
                    idx.push(best.1);
                }
            }
        }
    }
    (ArrayD::from_shape_vec(IxDyn(&dims), out).unwrap(), ArrayD::from_shape_vec(IxDyn(&dims), idx).unwrap())
}

#[test]
fn an_off_by_one_window_is_caught_with_a_readable_report() {
    let report = first_failure(adaptive_cases::<f32, i64>(Shapes::default(), Values::Distinct), |case| {
        let (out, idx) = off_by_one_forward(&case.input, case.output_size);
        case.check_forward(&out, &idx)?;
        Ok(())
    });
    println!("report printed for an off-by-one window:\n  {report}");
    assert!(
        report.contains("forward values vs reference: first mismatch at [")
            || report.contains("forward indices"),
        "{report}"
    );
}

#[test]
fn finite_differences_catch_a_gradient_at_the_wrong_place() {
    // 1x4x4, k=2, s=2: four windows with clear maxima.
    let x = ndarray::array![[
        [0.0, 5.0, 1.0, 1.5],
        [2.0, 3.0, 7.0, 0.0],
        [9.0, 1.0, 6.0, 4.0],
        [0.0, 8.0, 6.5, 2.0]
    ]]
    .into_dyn();
    let pooling = Pooling::Max(MaxPool2dParams::new([2, 2]));
    let g = ndarray::array![[[1.0, 2.0], [3.0, 4.0]]].into_dyn();
    let right =
        poolgrad::testing::reference::max_pool2d_with_indices(&x, &MaxPool2dParams::new([2, 2])).unwrap().1;
    let gx =
        poolgrad::max_pool2d_with_indices_backward(&g, &x, &right, &MaxPool2dParams::new([2, 2])).unwrap();
    let ok = finite_difference_check(&pooling, &x, &g, &gx, &FiniteDifference::default()).unwrap();
    assert_eq!((ok.checked, ok.skipped), (16, 0));
    // The gradient of the last window put on its second-largest value (6 instead of 6.5).
    let mut wrong = gx.clone();
    wrong[[0, 3, 2]] = 0.0;
    wrong[[0, 2, 2]] = 4.0;
    let m = finite_difference_check(&pooling, &x, &g, &wrong, &FiniteDifference::default()).unwrap_err();
    println!("finite-difference report: {m}");
    assert_eq!(m.position, vec![0, 2, 2]);
    assert_eq!((m.expected.round(), m.actual), (0.0, 4.0));
}
