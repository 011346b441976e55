//! The downstream testing kit (`poolgrad::testing`): poolgrad's own operations pass its checks,
//! and deliberately wrong user implementations are caught with a readable report.

use ndarray::{Array4, ArrayD, Axis, Ix4, IxDyn};
use poolgrad::testing::{
    FiniteDifference, MaxPoolCase, ParamBounds, Shapes, Values, VolumeShapes, adaptive_cases,
    adaptive3d_cases, check_gradient, finite_difference_check, mask_cases, max_pool_cases, max_pool3d_cases,
    reference::Pooling,
};
use poolgrad::{Bitmask, I32Argmax, MaxPool2dParams, PoolFloat};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestError, TestRunner};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn poolgrad_adaptive_passes_the_kit(case in adaptive_cases::<f32, i64, ndarray::IxDyn>(Shapes::default(), Values::WithNan)) {
        let mine = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| poolgrad::adaptive_max_pool2d_backward(g, &case.input, &case.indices).unwrap())?;
    }

    #[test]
    fn poolgrad_max_pool_passes_the_kit(
        case in max_pool_cases::<half::bf16, i32, ndarray::IxDyn>(Shapes::default(), ParamBounds::default(), Values::Ties),
    ) {
        let mine = poolgrad::max_pool2d_with_indices_i32(&case.input, &case.params).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| {
            poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap()
        })?;
    }

    #[test]
    fn poolgrad_bitmask_passes_the_kit(
        case in mask_cases::<f32, Bitmask, ndarray::IxDyn>(Shapes { channels: 1..=20, ..Shapes::default() }, ParamBounds::default(), Values::Ties),
    ) {
        let mine = poolgrad::max_pool2d_with_mask(&case.input, &case.params, Bitmask).unwrap();
        case.check_forward(&mine.output, &mine.mask)?;
        case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
    }

    #[test]
    fn poolgrad_i32argmax_passes_the_kit(
        case in mask_cases::<half::f16, I32Argmax, ndarray::IxDyn>(Shapes::default(), ParamBounds::default(), Values::Distinct),
    ) {
        let mine = poolgrad::max_pool2d_with_mask(&case.input, &case.params, I32Argmax).unwrap();
        case.check_forward(&mine.output, &mine.mask)?;
        case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
    }

    /// poolgrad's gradient equals the finite differences wherever the windows have a clear maximum.
    #[test]
    fn poolgrad_gradient_matches_finite_differences(
        case in max_pool_cases::<f64, i64, ndarray::IxDyn>(Shapes::default(), ParamBounds::default(), Values::Distinct),
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
        max_pool_cases::<f32, i64, ndarray::IxDyn>(Shapes::default(), ParamBounds::default(), Values::Ties),
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
    let report = first_failure(
        adaptive_cases::<f32, i64, ndarray::IxDyn>(Shapes::default(), Values::Distinct),
        |case| {
            let (out, idx) = off_by_one_forward(&case.input, case.output_size);
            case.check_forward(&out, &idx)?;
            Ok(())
        },
    );
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

/// A user's backward that only handles channel 0 (a loop bound written as `1` instead of `c`).
fn first_channel_only(g: &Array4<f32>, input: &Array4<f32>, idx: &Array4<i64>) -> Array4<f32> {
    let mut gx = Array4::<f32>::zeros(input.raw_dim());
    let w = input.dim().3;
    for ((n, c, oh, ow), &i) in idx.indexed_iter() {
        if c == 0 {
            gx[[n, c, i as usize / w, i as usize % w]] += g[[n, c, oh, ow]];
        }
    }
    gx
}

/// Shrinking with the shipped defaults (`Shapes::default()`, proptest's default `Config`) reaches
/// the smallest case that shows the bug: one batch, two channels, a 1x1 plane, pooled to 1x1.
#[test]
fn failures_shrink_to_the_smallest_case_with_the_default_settings() {
    let strategy = max_pool_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties);
    let mut runner = TestRunner::new(Config { failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy, |case| {
        case.check_backward(|g| first_channel_only(g, &case.input, &case.indices))?;
        Ok(())
    });
    let Err(TestError::Fail(reason, minimal)) = result else { panic!("the bug was not found: {result:?}") };
    println!("minimal case: input {:?}, params {:?}: {reason}", minimal.input.shape(), minimal.params);
    assert_eq!(minimal.input.shape(), &[1, 2, 1, 1], "{reason}");
    assert_eq!(minimal.grad_output.shape(), &[1, 2, 1, 1]);
    assert_eq!(minimal.params.kernel(), [1, 1]);
}

/// The default shapes reach past one 16-channel block (the `Bitmask` groups channels by 16), in
/// about a fifth of the cases (channels are drawn in 1..=20).
#[test]
fn the_default_shapes_cross_a_sixteen_channel_block() {
    let strategy = mask_cases::<f32, Bitmask, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties);
    let mut runner = TestRunner::deterministic();
    let (mut wide, total) = (0, 500);
    for _ in 0..total {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        assert_eq!(case.input.ndim(), 4);
        if case.input.dim().1 > 16 {
            wide += 1;
        }
    }
    println!("{wide} of {total} default cases have more than 16 channels");
    assert!((50..=150).contains(&wide), "{wide} of {total}");
}

/// A small model: `loss = Σ w1 · maxpool(x) + Σ w2 · adaptive(x)`, its input gradient from
/// poolgrad's two backwards, checked against finite differences of the loss itself.
fn model_gradient<T: PoolFloat + std::iter::Sum>(
    case: &MaxPoolCase<T, i64, Ix4>,
) -> Result<poolgrad::testing::GradCheck, TestCaseError> {
    let params = case.params;
    let w2 = Array4::from_shape_fn((case.input.dim().0, case.input.dim().1, 2, 2), |(n, c, h, w)| {
        T::round_from_f64(((n + 2 * c + 3 * h + w) % 5) as f64 - 2.0)
    });
    let w1 = case.grad_output.clone();
    let loss = |x: &Array4<T>| -> T {
        let pooled = poolgrad::max_pool2d_with_indices(x, &params).unwrap().output;
        let adaptive = poolgrad::adaptive_max_pool2d(x, [2, 2]).unwrap().output;
        let first =
            pooled.iter().zip(&w1).map(|(&a, &b)| T::round_from_f64(a.to_f64_exact() * b.to_f64_exact()));
        let second =
            adaptive.iter().zip(&w2).map(|(&a, &b)| T::round_from_f64(a.to_f64_exact() * b.to_f64_exact()));
        first.chain(second).sum()
    };
    let p = poolgrad::max_pool2d_with_indices(&case.input, &params).unwrap();
    let a = poolgrad::adaptive_max_pool2d(&case.input, [2, 2]).unwrap();
    let g1 = poolgrad::max_pool2d_with_indices_backward(&w1, &case.input, &p.indices, &params).unwrap();
    let g2 = poolgrad::adaptive_max_pool2d_backward(&w2, &case.input, &a.indices).unwrap();
    let gradient = ndarray::Zip::from(&g1)
        .and(&g2)
        .map_collect(|&x, &y| T::round_from_f64(x.to_f64_exact() + y.to_f64_exact()));
    Ok(check_gradient(loss, &case.input, &gradient, &FiniteDifference::for_dtype(T::DTYPE))?)
}

fn small() -> Shapes {
    Shapes { batch: 1..=1, channels: 1..=3, height: 2..=6, width: 2..=6 }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_models_gradient_passes_the_check_in_f32(
        case in max_pool_cases::<f32, i64, Ix4>(small(), ParamBounds::default(), Values::Distinct),
    ) {
        let report = model_gradient(&case)?;
        prop_assert_eq!(report.checked + report.skipped, case.input.len());
    }

    #[test]
    fn a_models_gradient_passes_the_check_in_f64(
        case in max_pool_cases::<f64, i64, Ix4>(small(), ParamBounds::default(), Values::Distinct),
    ) {
        let report = model_gradient(&case)?;
        prop_assert_eq!(report.checked + report.skipped, case.input.len());
    }
}

/// On a hand-worked case every input is checked (distinct values, no ties), and a gradient with
/// one value moved is caught at that position, in f32 and f64; ties are skipped, not failed.
#[test]
fn the_loss_check_catches_a_moved_gradient_and_skips_ties() {
    fn run<T: PoolFloat + std::iter::Sum>() {
        let v = |x: f64| T::round_from_f64(x);
        let x = Array4::from_shape_fn((1, 1, 4, 4), |(_, _, h, w)| {
            v([0.0, 5.0, 1.0, 1.5, 2.0, 3.0, 7.0, 0.0, 9.0, 1.0, 6.0, 4.0, 0.0, 8.0, 6.5, 2.0][h * 4 + w])
        });
        let params = MaxPool2dParams::new([2, 2]);
        let w = Array4::from_shape_fn((1, 1, 2, 2), |(_, _, h, k)| v([1.0, -2.0, 0.5, 3.0][h * 2 + k]));
        let loss = |x: &Array4<T>| -> T {
            let out = poolgrad::max_pool2d_with_indices(x, &params).unwrap().output;
            out.iter().zip(&w).map(|(&a, &b)| v(a.to_f64_exact() * b.to_f64_exact())).sum()
        };
        // By hand: the windows {0, 5, 2, 3}, {1, 1.5, 7, 0}, {9, 1, 0, 8}, {6, 4, 6.5, 2} have
        // their maxima 5 at (0,1), 7 at (1,2), 9 at (2,0), 6.5 at (3,2).
        let mut gx = Array4::from_elem((1, 1, 4, 4), v(0.0));
        gx[[0, 0, 0, 1]] = v(1.0);
        gx[[0, 0, 1, 2]] = v(-2.0);
        gx[[0, 0, 2, 0]] = v(0.5);
        gx[[0, 0, 3, 2]] = v(3.0);
        let settings = FiniteDifference::for_dtype(T::DTYPE);
        let ok = check_gradient(loss, &x, &gx, &settings).unwrap();
        assert_eq!((ok.checked, ok.skipped), (16, 0), "{}", T::DTYPE);
        let mut moved = gx.clone();
        moved[[0, 0, 3, 2]] = v(0.0);
        moved[[0, 0, 2, 2]] = v(3.0); // on 6, the runner-up: found first in row-major order
        let m = check_gradient(loss, &x, &moved, &settings).unwrap_err();
        assert_eq!(m.position, vec![0, 0, 2, 2], "{m}");
        assert_eq!((m.expected.round(), m.actual), (0.0, 3.0), "{m}");
        // A tie: both 9s of the window {9, 9, 0, 8}; neither side can be checked.
        let mut tied = x.clone();
        tied[[0, 0, 2, 1]] = v(9.0);
        let ok = check_gradient(loss, &tied, &gx, &settings).unwrap();
        assert_eq!((ok.checked, ok.skipped), (14, 2), "{}", T::DTYPE);
    }
    run::<f32>();
    run::<f64>();
}

/// A forward that keeps the last maximum of a window instead of the first: its values are right,
/// so only the indices show the bug.
#[test]
fn a_last_maximum_forward_is_caught_by_its_indices() {
    let report = first_failure(
        max_pool_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties),
        |case| {
            let (_, _, h, w) = case.input.dim();
            let [ho, wo] = case.params.output_size([h, w]).unwrap();
            let mut indices = case.indices.clone();
            for ((b, ch, oh, ow), i) in indices.indexed_iter_mut() {
                let best = case.output[[b, ch, oh, ow]];
                // The last position of the window holding the maximum, by brute force over the
                // reference's window.
                let taps = Pooling::Max(case.params).window([h, w], [ho, wo], oh, ow);
                if let Some(&(ih, iw)) =
                    taps.iter().rev().find(|&&(ih, iw)| case.input[[b, ch, ih, iw]] == best)
                {
                    *i = (ih * w + iw) as i64;
                }
            }
            case.check_forward(&case.output, &indices)?;
            Ok(())
        },
    );
    println!("report printed for a last-maximum forward:\n  {report}");
    assert!(report.starts_with("forward indices vs reference: first mismatch at ["), "{report}");
}

/// A backward that leaves a trace (1e-7, within the f32 tolerance of the comparison) where no
/// window selected anything: the comparison with the reference accepts it, the invariants do not.
#[test]
fn a_stray_gradient_below_the_tolerance_is_caught_by_the_invariants() {
    let report = first_failure(
        max_pool_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Distinct),
        |case| {
            case.check_backward(|g| {
                let mut gx =
                    poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params)
                        .unwrap();
                if let Some(v) = gx.iter_mut().find(|v| **v == 0.0) {
                    *v = 1e-7;
                }
                gx
            })?;
            Ok(())
        },
    );
    println!("report printed for a stray gradient:\n  {report}");
    assert!(report.starts_with("gradient invariants: first mismatch at ["), "{report}");
    assert!(report.contains("no window selected this input"), "{report}");
}

/// Draws `count` cases of a strategy with a fixed seed.
fn draw<S: Strategy>(strategy: S, count: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..count).map(|_| strategy.new_tree(&mut runner).unwrap().current()).collect()
}

/// The values and gradients of generated cases stay in the sets the kit documents, and fill them.
#[test]
fn generated_values_keep_their_documented_ranges() {
    // Every input value (or, with `grads`, every output gradient) of 200 cases of `values`.
    let all = |values, grads: bool| -> Vec<f64> {
        let cases =
            draw(max_pool_cases::<f64, i64, Ix4>(Shapes::default(), ParamBounds::default(), values), 200);
        cases
            .iter()
            .flat_map(|c| if grads { c.grad_output.iter() } else { c.input.iter() })
            .copied()
            .collect()
    };
    // The share of `values` equal to each of `levels` is in `range`, and there is nothing else.
    let shares_within = |values: &[f64], levels: &[f64], range: std::ops::Range<f64>, what: &str| {
        for &v in levels {
            let share = values.iter().filter(|&&x| x == v).count() as f64 / values.len() as f64;
            assert!(range.contains(&share), "{what} {v}: {share}");
        }
        assert!(values.iter().all(|v| levels.contains(v)), "{what}: a value outside {levels:?}");
    };
    let tie_levels = [-2.0, -1.0, 0.0, 1.0];
    // Ties: -2, -1, 0, 1, each of them.
    shares_within(&all(Values::Ties, false), &tie_levels, 0.2..0.3, "ties");
    // Distinct: multiples of 1/4 in [-125, 125), spread.
    let distinct = all(Values::Distinct, false);
    assert!(distinct.iter().all(|&v| (-125.0..125.0).contains(&v) && (v * 4.0).fract() == 0.0));
    let mut seen: Vec<i64> = distinct.iter().map(|&v| (v * 4.0) as i64).collect();
    seen.sort_unstable();
    seen.dedup();
    assert!(seen.len() > 900, "{} distinct values", seen.len());
    // WithNan: about one NaN in ten, the rest as Ties.
    let with_nan = all(Values::WithNan, false);
    let nans = with_nan.iter().filter(|v| v.is_nan()).count() as f64 / with_nan.len() as f64;
    assert!((0.07..0.13).contains(&nans), "{nans}");
    let numbers: Vec<f64> = with_nan.into_iter().filter(|v| !v.is_nan()).collect();
    shares_within(&numbers, &tie_levels, 0.2..0.3, "with NaN");
    // Gradients: non-zero integers, every one of ±1..=8.
    let grad_levels: Vec<f64> = (1..=8).flat_map(|m| [m as f64, -(m as f64)]).collect();
    shares_within(&all(Values::Ties, true), &grad_levels, 0.04..0.085, "gradient");
}

/// Padding is drawn in `0..=kernel/2`, every value of it.
#[test]
fn generated_padding_covers_zero_to_half_the_kernel() {
    let bounds = ParamBounds { kernel: 4..=5, ..ParamBounds::default() };
    let cases = draw(max_pool_cases::<f32, i64, Ix4>(Shapes::default(), bounds, Values::Ties), 300);
    let mut seen = [[false; 3]; 2];
    for case in &cases {
        for (seen, (k, p)) in seen.iter_mut().zip(case.params.kernel().into_iter().zip(case.params.padding()))
        {
            assert!(p <= k / 2, "{:?}", case.params);
            seen[p] = true;
        }
    }
    assert_eq!(seen, [[true; 3]; 2]);
}

/// A value depends on its seed and its position only: a shrinking step that drops channels, rows
/// or columns keeps the values of the elements that remain. (A step shrinks one thing: a size or
/// a seed.)
#[test]
fn shrinking_keeps_each_value_at_its_position() {
    let strategy = adaptive_cases::<f32, i64, Ix4>(Shapes::default(), Values::Distinct);
    let mut runner = TestRunner::deterministic();
    let (mut kept, mut changed) = (0, 0);
    for _ in 0..20 {
        let mut tree = strategy.new_tree(&mut runner).unwrap();
        let mut before = tree.current();
        for _ in 0..10 {
            if !tree.simplify() {
                break;
            }
            let after = tree.current();
            if after.input.dim() != before.input.dim() {
                if after.input.indexed_iter().all(|(p, &v)| before.input[p] == v) {
                    kept += 1;
                } else {
                    changed += 1;
                }
            }
            before = after;
        }
    }
    assert!(kept > 10 && changed == 0, "{kept} shrinks kept their values, {changed} did not");
}

/// The settings per dtype, as documented.
#[test]
fn finite_difference_settings_per_dtype() {
    use poolgrad::DType;
    assert_eq!(FiniteDifference::for_dtype(DType::F64), FiniteDifference::default());
    let f32s = FiniteDifference::for_dtype(DType::F32);
    assert_eq!((f32s.eps, f32s.tolerance), (0.0625, 1e-2));
    for half in [DType::F16, DType::BF16] {
        let s = FiniteDifference::for_dtype(half);
        assert_eq!((s.eps, s.tolerance), (0.25, 0.1), "{half}");
    }
}

/// A step that rounds to no change is an error naming the value, on either side: at 256 a bf16
/// step of 0.75 up rounds back to 256 (the next value is 258) while the step down reaches 255;
/// at -256 it is the step down that vanishes.
#[test]
fn a_step_that_rounds_away_is_an_error() {
    use half::bf16;
    let settings = FiniteDifference { eps: 0.75, ..FiniteDifference::default() };
    for (value, at) in [(256.0f32, "from 256"), (-256.0, "from -256")] {
        let x = Array4::from_elem((1, 1, 1, 1), bf16::from_f32(value));
        let loss = |x: &Array4<bf16>| x[[0, 0, 0, 0]];
        let e = check_gradient(loss, &x, &Array4::from_elem((1, 1, 1, 1), bf16::ONE), &settings).unwrap_err();
        assert_eq!(e.position, vec![0, 0, 0, 0]);
        assert!(e.detail.contains(&format!("a step of 0.75 {at} rounds to no change in bf16")), "{e}");
    }
    // With both steps representable the same loss passes.
    let x = Array4::from_elem((1, 1, 1, 1), bf16::from_f32(100.0));
    let ok = check_gradient(
        |x: &Array4<bf16>| x[[0, 0, 0, 0]],
        &x,
        &Array4::from_elem((1, 1, 1, 1), bf16::ONE),
        &settings,
    );
    assert_eq!(ok.unwrap().checked, 1);
}

/// Kinks are told from the one-sided slopes with the relative rule `|right - left| > tolerance ·
/// (1 + |right| + |left|)`: slopes 3 and 3.02 agree at tolerance 0.01 (0.02 < 0.0702), slopes 3
/// and 5 do not; at tolerance 0 an exactly linear loss is still checked everywhere.
#[test]
fn kinks_are_told_by_the_documented_rule() {
    let x = Array4::from_elem((1, 1, 1, 1), 0.0f64);
    let settings = FiniteDifference { eps: 0.25, margin: 1.0, tolerance: 0.01 };
    let slight = |x: &Array4<f64>| 3.0 * x[[0, 0, 0, 0]] + 0.02 * x[[0, 0, 0, 0]].max(0.0);
    let report = check_gradient(slight, &x, &Array4::from_elem((1, 1, 1, 1), 3.01), &settings).unwrap();
    assert_eq!((report.checked, report.skipped), (1, 0));
    let sharp = |x: &Array4<f64>| 3.0 * x[[0, 0, 0, 0]] + 2.0 * x[[0, 0, 0, 0]].max(0.0);
    let report = check_gradient(sharp, &x, &Array4::from_elem((1, 1, 1, 1), 0.0), &settings).unwrap();
    assert_eq!((report.checked, report.skipped), (0, 1));
    let exact = FiniteDifference { eps: 0.25, margin: 1.0, tolerance: 0.0 };
    let linear = Array4::from_shape_fn((1, 1, 2, 2), |(_, _, h, w)| (h * 2 + w) as f64);
    let loss = |x: &Array4<f64>| x.iter().zip(&linear).map(|(a, b)| a * b).sum::<f64>();
    let report = check_gradient(loss, &Array4::from_elem((1, 1, 2, 2), 0.5), &linear, &exact).unwrap();
    assert_eq!((report.checked, report.skipped), (4, 0));
}

/// The kink rule weighs both slopes by their sum: slopes 0.5 and 0.52 agree at tolerance 0.0125
/// (0.02 <= 0.0125 · 2.02), which a threshold built any other way (0.0125 · 1.26 for the
/// product, 0.0125 · 1.02 for a difference) would call a kink.
#[test]
fn the_kink_rule_weighs_the_sum_of_both_slopes() {
    let x = Array4::from_elem((1, 1, 1, 1), 0.0f64);
    let settings = FiniteDifference { eps: 0.25, margin: 1.0, tolerance: 0.0125 };
    let loss = |x: &Array4<f64>| 0.5 * x[[0, 0, 0, 0]] + 0.02 * x[[0, 0, 0, 0]].max(0.0);
    let report = check_gradient(loss, &x, &Array4::from_elem((1, 1, 1, 1), 0.51), &settings).unwrap();
    assert_eq!((report.checked, report.skipped), (1, 0));
}

/// Where the loss is not finite on either side of an input, or at the input itself, the input is
/// skipped, not failed.
#[test]
fn non_finite_losses_are_skipped() {
    let settings = FiniteDifference { eps: 0.25, ..FiniteDifference::default() };
    let one = |v: f64| Array4::from_elem((1, 1, 1, 1), v);
    let above = |x: &Array4<f64>| if x[[0, 0, 0, 0]] > 0.1 { f64::NAN } else { x[[0, 0, 0, 0]] };
    let below = |x: &Array4<f64>| if x[[0, 0, 0, 0]] < -0.1 { f64::INFINITY } else { x[[0, 0, 0, 0]] };
    let at = |x: &Array4<f64>| if x[[0, 0, 0, 0]] == 0.0 { f64::NAN } else { x[[0, 0, 0, 0]] };
    for (what, report) in [
        ("NaN above", check_gradient(above, &one(0.0), &one(1.0), &settings)),
        ("infinite below", check_gradient(below, &one(0.0), &one(1.0), &settings)),
        ("NaN at the input", check_gradient(at, &one(0.0), &one(1.0), &settings)),
    ] {
        let report = report.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!((report.checked, report.skipped), (0, 1), "{what}");
    }
}

/// The gradient may differ from the central difference by `tolerance · (1 + |gradient|)`:
/// relative for large gradients. A slope of 9.04 against a claimed 9 passes at tolerance 0.01
/// (0.04 <= 0.1), a claimed 8.8 does not (0.24 > 0.098).
#[test]
fn the_gradient_tolerance_is_relative_to_the_gradient() {
    let x = Array4::from_elem((1, 1, 1, 1), 1.0f64);
    let settings = FiniteDifference { eps: 0.25, margin: 1.0, tolerance: 0.01 };
    let loss = |x: &Array4<f64>| 9.04 * x[[0, 0, 0, 0]];
    let ok = check_gradient(loss, &x, &Array4::from_elem((1, 1, 1, 1), 9.0), &settings).unwrap();
    assert_eq!(ok.checked, 1);
    let e = check_gradient(loss, &x, &Array4::from_elem((1, 1, 1, 1), 8.8), &settings).unwrap_err();
    assert_eq!((e.expected, e.actual), (9.04, 8.8));
}

/// Adaptive output sizes are drawn in `1..=size + 2` on each axis, so larger outputs than
/// inputs occur.
#[test]
fn adaptive_output_sizes_reach_two_past_the_input() {
    let shapes = Shapes { height: 1..=5, width: 1..=6, ..Shapes::default() };
    let cases = draw(adaptive_cases::<f32, i64, Ix4>(shapes, Values::Ties), 300);
    let most = |axis: usize| cases.iter().map(|c| c.output_size[axis]).max().unwrap();
    assert_eq!((most(0), most(1)), (7, 8));
    assert!(cases.iter().all(|c| c.output_size.iter().all(|&s| s >= 1)));
    assert!(cases.iter().any(|c| c.output_size[0] > c.input.dim().2));
}

/// Mask cases use dilation 1 whatever the bounds say (the mask operations take no other).
#[test]
fn mask_cases_use_dilation_one_whatever_the_bounds() {
    let bounds = ParamBounds { dilation: 2..=3, ..ParamBounds::default() };
    let cases = draw(mask_cases::<f32, Bitmask, Ix4>(Shapes::default(), bounds, Values::Ties), 50);
    assert!(cases.iter().all(|c| c.params.dilation() == [1, 1]));
}

/// A mask backward that drops the gradient of every channel but the first is caught by the mask
/// case's check.
#[test]
fn a_wrong_mask_backward_is_caught() {
    let report = first_failure(
        mask_cases::<f32, I32Argmax, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties),
        |case| {
            case.check_backward(|g| {
                let mut gx = poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap();
                gx.slice_mut(ndarray::s![.., 1.., .., ..]).fill(0.0);
                gx
            })?;
            Ok(())
        },
    );
    assert!(report.starts_with("backward vs reference: first mismatch at [0, 1, "), "{report}");
}

/// The invariants' sum check allows for summation error in proportion to the number of terms:
/// over 100 f32 terms, `abs · 100` (1e-3) when the gradients cancel, and `rel · √100` (relative
/// 1e-4) of a sum of 100: so 5e-4 and 5e-3 off pass, 5e-3 and 5e-2 off do not.
#[test]
fn the_invariants_sum_tolerance_grows_with_the_terms() {
    use ndarray::Array3;
    use poolgrad::testing::check_gradient_invariants;
    // A 10x10 plane pooled 1x1 by 1x1: output e selects input e.
    let selected: Vec<(usize, usize)> = (0..100).map(|e| (e, e)).collect();
    let check = |grads: &Array3<f32>, first: f32| {
        let mut gi = grads.clone();
        gi[[0, 0, 0]] = first;
        check_gradient_invariants(grads.view(), &selected, gi.view())
    };
    let cancelling =
        Array3::from_shape_fn((1, 10, 10), |(_, h, w)| if (h + w) % 2 == 0 { 1.0f32 } else { -1.0 });
    assert!(check(&cancelling, 1.0 + 5e-4).is_ok());
    assert!(check(&cancelling, 1.0 + 5e-3).is_err());
    let ones = Array3::from_elem((1, 10, 10), 1.0f32);
    assert!(check(&ones, 1.0 + 5e-3).is_ok());
    let e = check(&ones, 1.0 + 5e-2).unwrap_err();
    assert!(e.to_string().contains("but the selected gradients sum to 100"), "{e}");
    // No plane, no check: an error, not a panic.
    let flat = ndarray::Array1::from_elem(4, 1.0f32);
    let e = check_gradient_invariants(flat.view(), &[], flat.view()).unwrap_err();
    assert!(e.to_string().contains("grad_input has shape [4], expected [.., H, W]"), "{e}");
}

/// The kit's 3-D references agree with poolgrad on drawn volumes (ties, NaN, `-inf`, padding,
/// dilation, ceil mode), and the reference backward with poolgrad's (f64: exact sums).
#[test]
fn the_three_dimensional_references_agree_with_poolgrad() {
    use ndarray::Array5;
    use poolgrad::testing::reference;
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    let strategy = (
        1usize..=2,
        1usize..=2,
        1usize..=6,
        1usize..=6,
        1usize..=6,
        1usize..=3,
        1usize..=2,
        any::<u64>(),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(n, c, d, h, w, k, s, seed, ceil)| {
            let mut state = seed | 1;
            let x = Array5::from_shape_simple_fn((n, c, d, h, w), || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                match state % 10 {
                    0 => f64::NAN,
                    1 => f64::NEG_INFINITY,
                    r => (r % 4) as f64,
                }
            });
            let p = poolgrad::MaxPool3dParams::new([k; 3])
                .with_stride([s; 3])
                .with_padding([k / 2; 3])
                .with_ceil_mode(ceil);
            let same = |a: &Array5<f64>, b: &Array5<f64>| {
                a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
            };
            if let Ok((v, i)) = reference::max_pool3d_with_indices(&x, &p) {
                let got = poolgrad::max_pool3d_with_indices(&x, &p).unwrap();
                prop_assert!(same(&v, &got.output));
                prop_assert_eq!(&i, &got.indices);
                let g = v.mapv(|v| if v.is_nan() { 0.5 } else { v + 0.25 });
                let want = reference::max_pool3d_backward(&g, &x, &i).unwrap();
                prop_assert!(same(
                    &want,
                    &poolgrad::max_pool3d_with_indices_backward(&g, &x, &i, &p).unwrap()
                ));
            } else {
                prop_assert!(poolgrad::max_pool3d_with_indices(&x, &p).is_err());
            }
            let size = [d.div_ceil(2), h + 1, w];
            let (v, i) = reference::adaptive_max_pool3d(&x, size).unwrap();
            let got = poolgrad::adaptive_max_pool3d(&x, size).unwrap();
            prop_assert!(same(&v, &got.output));
            prop_assert_eq!(&i, &got.indices);
            Ok(())
        })
        .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn poolgrad_max_pool3d_passes_the_kit(
        case in max_pool3d_cases::<half::f16, i64, IxDyn>(VolumeShapes::default(), ParamBounds::default(), Values::WithNan),
    ) {
        let mine = poolgrad::max_pool3d_with_indices(&case.input, &case.params).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| {
            poolgrad::max_pool3d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap()
        })?;
    }

    #[test]
    fn poolgrad_adaptive3d_passes_the_kit(
        case in adaptive3d_cases::<f64, i32, ndarray::Ix5>(VolumeShapes::default(), Values::Distinct),
    ) {
        let mine = poolgrad::adaptive_max_pool3d_i32(&case.input, case.output_size).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| poolgrad::adaptive_max_pool3d_backward(g, &case.input, &case.indices).unwrap())?;
    }
}

/// The 3-D strategies draw what their bounds say: `[C, D, H, W]` cases for `Ix4`, every
/// dimension in its range, kernels, strides and dilations in theirs, paddings up to half the
/// kernel, and outputs above the input for the adaptive cases.
#[test]
fn the_volume_strategies_keep_their_bounds() {
    let shapes = VolumeShapes { depth: 2..=4, ..VolumeShapes::default() };
    let bounds = ParamBounds { kernel: 1..=3, stride: 1..=2, dilation: 1..=2, ceil_mode: true };
    let cases = draw(max_pool3d_cases::<f32, i64, ndarray::Ix4>(shapes.clone(), bounds, Values::Ties), 200);
    for case in &cases {
        let [c, d, h, w] = [0, 1, 2, 3].map(|a| case.input.shape()[a]);
        assert!((1..=3).contains(&c) && (2..=4).contains(&d) && (1..=6).contains(&h) && (1..=6).contains(&w));
        let (k, s, p, dil) =
            (case.params.kernel(), case.params.stride(), case.params.padding(), case.params.dilation());
        for a in 0..3 {
            assert!((1..=3).contains(&k[a]) && (1..=2).contains(&s[a]) && (1..=2).contains(&dil[a]));
            assert!(p[a] <= k[a] / 2, "{:?}", case.params);
        }
        assert_eq!(case.output.shape(), case.grad_output.shape());
    }
    assert!(cases.iter().any(|c| c.params.ceil_mode()) && cases.iter().any(|c| c.params.padding() != [0; 3]));
    let cases = draw(adaptive3d_cases::<f32, i32, IxDyn>(shapes, Values::Ties), 200);
    assert!(cases.iter().any(|c| c.input.ndim() == 4) && cases.iter().any(|c| c.input.ndim() == 5));
    assert!(cases.iter().any(|c| c.output_size[0] > c.input.shape()[c.input.ndim() - 3]));
}

/// A user's 3-D forward that takes the *last* maximum of each window (`>=`) is caught by the
/// kit's indices on tied inputs, with a report that names the indices.
#[test]
fn a_last_maximum_volume_forward_is_caught() {
    let strategy = max_pool3d_cases::<f32, i64, ndarray::Ix5>(
        VolumeShapes::default(),
        ParamBounds { kernel: 2..=3, ..ParamBounds::default() },
        Values::Ties,
    );
    let report = first_failure(strategy, |case| {
        let (output, indices) = last_maximum_3d(&case.input, &case.params);
        case.check_forward(&output, &indices)?;
        Ok(())
    });
    assert!(report.contains("forward indices vs reference"), "{report}");
}

/// 3-D max pooling by plain loops, with the last maximum of each window (the bug under test).
fn last_maximum_3d(
    x: &ndarray::Array5<f32>,
    p: &poolgrad::MaxPool3dParams,
) -> (ndarray::Array5<f32>, ndarray::Array5<i64>) {
    let (n, c, d, h, w) = x.dim();
    let [od, oh, ow] = p.output_size([d, h, w]).unwrap();
    let taps = |o: usize, len: usize, a: usize| -> Vec<usize> {
        (0..p.kernel()[a])
            .map(|j| (o * p.stride()[a] + j * p.dilation()[a]) as i64 - p.padding()[a] as i64)
            .filter(|&i| (0..len as i64).contains(&i))
            .map(|i| i as usize)
            .collect()
    };
    let mut out = ndarray::Array5::<f32>::zeros((n, c, od, oh, ow));
    let mut idx = ndarray::Array5::<i64>::zeros((n, c, od, oh, ow));
    for ((b, ch, z, y, xx), o) in out.indexed_iter_mut() {
        let mut best = (f32::NEG_INFINITY, 0i64);
        for &i in &taps(z, d, 0) {
            for &j in &taps(y, h, 1) {
                for &l in &taps(xx, w, 2) {
                    let v = x[[b, ch, i, j, l]];
                    if v >= best.0 || v.is_nan() {
                        best = (v, ((i * h + j) * w + l) as i64);
                    }
                }
            }
        }
        *o = best.0;
        idx[[b, ch, z, y, xx]] = best.1;
    }
    (out, idx)
}

/// A stray gradient below the tolerance in a volume is caught by the invariants, at its position
/// in the volume's own axes (the kit checks volumes as planes of `D * H` rows).
#[test]
fn a_stray_gradient_in_a_volume_is_caught_at_its_position() {
    let report = first_failure(
        max_pool3d_cases::<f32, i64, ndarray::Ix5>(
            VolumeShapes::default(),
            ParamBounds::default(),
            Values::Distinct,
        ),
        |case| {
            case.check_backward(|g| {
                let mut gx =
                    poolgrad::max_pool3d_with_indices_backward(g, &case.input, &case.indices, &case.params)
                        .unwrap();
                let last = gx.iter_mut().enumerate().filter(|(_, v)| **v == 0.0).last().map(|(e, _)| e);
                if let Some(e) = last {
                    gx.as_slice_mut().unwrap()[e] = 1e-7;
                }
                gx
            })?;
            Ok(())
        },
    );
    println!("report printed for a stray gradient in a volume:\n  {report}");
    assert!(report.starts_with("gradient invariants: first mismatch at ["), "{report}");
    let position = &report["gradient invariants: first mismatch at [".len()..];
    let axes = position[..position.find(']').unwrap()].split(", ").count();
    assert_eq!(axes, 5, "the position has the volume's five axes: {report}");
}

/// The kit's 1-D, unpooling and double-backward references agree with poolgrad on drawn cases
/// (ties, NaN, `-inf`, padding, dilation, ceil mode; crowded indices with repeats for the
/// unpoolings), bit for bit in f64.
#[test]
fn the_line_and_unpooling_references_agree_with_poolgrad() {
    use ndarray::{Array3, Array4, Array5};
    use poolgrad::testing::reference;
    let same = |a: &[f64], b: &[f64]| {
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    };
    let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
    let strategy =
        (1usize..=2, 1usize..=3, 1usize..=9, 1usize..=4, 1usize..=3, 1usize..=2, any::<u64>(), any::<bool>());
    runner
        .run(&strategy, |(n, c, l, k, s, dil, seed, ceil)| {
            let mut state = seed | 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let x = Array3::from_shape_simple_fn((n, c, l), || match next() % 10 {
                0 => f64::NAN,
                1 => f64::NEG_INFINITY,
                r => (r % 4) as f64,
            });
            let p = poolgrad::MaxPool1dParams::new([k])
                .with_stride([s])
                .with_padding([k / 2])
                .with_dilation([dil])
                .with_ceil_mode(ceil);
            match reference::max_pool1d_with_indices(&x, &p) {
                Ok((v, i)) => {
                    let got = poolgrad::max_pool1d_with_indices(&x, &p).unwrap();
                    prop_assert!(same(v.as_slice().unwrap(), got.output.as_slice().unwrap()));
                    prop_assert_eq!(&i, &got.indices);
                    let g = v.mapv(|v| if v.is_nan() { 0.5 } else { v + 0.25 });
                    let want = reference::max_pool1d_backward(&g, &x, &i).unwrap();
                    let gx = poolgrad::max_pool1d_with_indices_backward(&g, &x, &i, &p).unwrap();
                    prop_assert!(same(want.as_slice().unwrap(), gx.as_slice().unwrap()));
                }
                Err(_) => prop_assert!(poolgrad::max_pool1d_with_indices(&x, &p).is_err()),
            }
            let (v, i) = reference::adaptive_max_pool1d(&x, l + 1 - l / 2).unwrap();
            let got = poolgrad::adaptive_max_pool1d(&x, l + 1 - l / 2).unwrap();
            prop_assert!(same(v.as_slice().unwrap(), got.output.as_slice().unwrap()));
            prop_assert_eq!(&i, &got.indices);

            // Unpooling [n, c, l, k] to [l + 1, s + 1] with crowded indices (repeats of different
            // values), its backward and the double backward; then the 3-D forms.
            let full = (l + 1) * (s + 1);
            let y = Array4::from_shape_simple_fn((n, c, l, k), || (next() % 7) as f64 - 3.0);
            let idx = Array4::from_shape_simple_fn((n, c, l, k), || (next() % full.min(3 + l) as u64) as i64);
            let want = reference::max_unpool2d(&y, &idx, [l + 1, s + 1]).unwrap();
            let got = poolgrad::max_unpool2d(&y, &idx, [l + 1, s + 1]).unwrap();
            prop_assert!(same(want.as_slice().unwrap(), got.as_slice().unwrap()));
            let g = Array4::from_shape_simple_fn((n, c, l + 1, s + 1), || (next() % 9) as f64);
            let want = reference::max_unpool2d_backward(&g, &idx).unwrap();
            prop_assert!(same(
                want.as_slice().unwrap(),
                poolgrad::max_unpool2d_backward(&g, &idx).unwrap().as_slice().unwrap()
            ));
            let want = reference::max_pool2d_double_backward(&g, &idx).unwrap();
            prop_assert!(same(
                want.as_slice().unwrap(),
                poolgrad::max_pool2d_double_backward(&g, &idx).unwrap().as_slice().unwrap()
            ));
            let y5 = y.clone().into_shape_with_order((n, c, 1, l, k)).unwrap();
            let idx5 = idx.clone().into_shape_with_order((n, c, 1, l, k)).unwrap();
            let g5 = Array5::from_shape_simple_fn((n, c, 2, l + 1, s + 1), || (next() % 9) as f64);
            let want = reference::max_unpool3d(&y5, &idx5, [2, l + 1, s + 1]).unwrap();
            prop_assert!(same(
                want.as_slice().unwrap(),
                poolgrad::max_unpool3d(&y5, &idx5, [2, l + 1, s + 1]).unwrap().as_slice().unwrap()
            ));
            let want = reference::max_unpool3d_backward(&g5, &idx5).unwrap();
            prop_assert!(same(
                want.as_slice().unwrap(),
                poolgrad::max_unpool3d_backward(&g5, &idx5).unwrap().as_slice().unwrap()
            ));
            let want = reference::max_pool3d_double_backward(&g5, &idx5).unwrap();
            prop_assert!(same(
                want.as_slice().unwrap(),
                poolgrad::max_pool3d_double_backward(&g5, &idx5).unwrap().as_slice().unwrap()
            ));
            Ok(())
        })
        .unwrap();
    // An index outside its plane is the reference's error too.
    let e = reference::max_unpool2d(&ndarray::array![[[1.0f32]]], &ndarray::array![[[4i64]]], [2, 2])
        .unwrap_err();
    assert!(matches!(e, poolgrad::Error::IndexOutOfRange { value: 4, plane: 4, .. }), "{e:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn poolgrad_max_pool1d_passes_the_kit(
        case in poolgrad::testing::max_pool1d_cases::<half::bf16, i32, IxDyn>(poolgrad::testing::LineShapes::default(), ParamBounds::default(), Values::WithNan),
    ) {
        let p = case.params.expect("a max pooling");
        let mine = poolgrad::max_pool1d_with_indices_i32(&case.input, &p).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| poolgrad::max_pool1d_with_indices_backward(g, &case.input, &case.indices, &p).unwrap())?;
    }

    #[test]
    fn poolgrad_adaptive1d_passes_the_kit(
        case in poolgrad::testing::adaptive1d_cases::<f32, i64, ndarray::Ix3>(poolgrad::testing::LineShapes::default(), Values::Distinct),
    ) {
        let mine = poolgrad::adaptive_max_pool1d(&case.input, case.output_size).unwrap();
        case.check_forward(&mine.output, &mine.indices)?;
        case.check_backward(|g| poolgrad::adaptive_max_pool1d_backward(g, &case.input, &case.indices).unwrap())?;
    }

    #[test]
    fn poolgrad_unpooling_passes_the_kit(
        case in poolgrad::testing::unpool2d_cases::<half::f16, i64, IxDyn>(Shapes::default(), ParamBounds::default(), Values::Ties),
    ) {
        let size = [case.output_size[0], case.output_size[1]];
        case.check_forward(&poolgrad::max_unpool2d(&case.input, &case.indices, size).unwrap())?;
        case.check_backward(|g| poolgrad::max_unpool2d_backward(g, &case.indices).unwrap())?;
        case.check_double_backward(|g| poolgrad::max_pool2d_double_backward(g, &case.indices).unwrap())?;
    }

    #[test]
    fn poolgrad_unpooling3d_passes_the_kit(
        case in poolgrad::testing::unpool3d_cases::<f32, i32, ndarray::Ix4>(VolumeShapes::default(), ParamBounds::default(), Values::WithNan),
    ) {
        let size = [case.output_size[0], case.output_size[1], case.output_size[2]];
        case.check_forward(&poolgrad::max_unpool3d(&case.input, &case.indices, size).unwrap())?;
        case.check_backward(|g| poolgrad::max_unpool3d_backward(g, &case.indices).unwrap())?;
        case.check_double_backward(|g| poolgrad::max_pool3d_double_backward(g, &case.indices).unwrap())?;
    }
}

/// An unpooling whose backward gives the gradient to every repeat of an index (a plain gather,
/// PyTorch's formula) is caught where overlapping windows repeat indices.
#[test]
fn a_gather_for_the_unpooling_backward_is_caught() {
    let stems = ParamBounds { kernel: 3..=3, stride: 1..=1, dilation: 1..=1, ceil_mode: false };
    let report = first_failure(
        poolgrad::testing::unpool2d_cases::<f32, i64, Ix4>(Shapes::default(), stems, Values::Distinct),
        |case| {
            case.check_backward(|g| poolgrad::max_pool2d_double_backward(g, &case.indices).unwrap())?;
            Ok(())
        },
    );
    assert!(report.contains("unpooling backward vs reference"), "{report}");
}
