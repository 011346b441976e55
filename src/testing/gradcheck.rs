//! Finite-difference gradient checks: of one max pooling (valid away from ties), and of any user
//! function from an input to a scalar loss (kinks detected and skipped).

use ndarray::{Array, ArrayD, Dimension};

use super::check::Mismatch;
use super::reference::{Pooling, forward4};
use crate::element::{DType, PoolFloat};

/// Settings of [`finite_difference_check`].
///
/// ```
/// use poolgrad::testing::FiniteDifference;
/// let loose = FiniteDifference { tolerance: 1e-4, ..FiniteDifference::default() };
/// assert!(loose.margin > 2.0 * loose.eps);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FiniteDifference {
    /// The step: each checked input is moved by `±eps`.
    pub eps: f64,
    /// An input is checked only if, in every window that reads it, the maximum beats the second
    /// largest value by more than `margin` (which must exceed `2 * eps`), so no arg-max moves.
    pub margin: f64,
    /// Allowed `|finite difference - gradient|`, plus the same amount relative to the gradient.
    pub tolerance: f64,
}

impl Default for FiniteDifference {
    /// For `f64`: `eps` 1e-3, `margin` 1e-2, `tolerance` 1e-6.
    fn default() -> Self {
        FiniteDifference { eps: 1e-3, margin: 1e-2, tolerance: 1e-6 }
    }
}

impl FiniteDifference {
    /// Settings for a loss computed in `dtype`: the default for `f64`; for `f32` a step of
    /// `2^-4` (exact, and below half the `1/4` spacing of the kit's `Values::Distinct`) and a
    /// tolerance of `1e-2`, room for the rounding of an `f32` loss divided by the step; for the
    /// half types a step of `2^-2` and a tolerance of `0.1`.
    ///
    /// ```
    /// use poolgrad::{DType, testing::FiniteDifference};
    /// assert_eq!(FiniteDifference::for_dtype(DType::F64), FiniteDifference::default());
    /// assert_eq!(FiniteDifference::for_dtype(DType::F32).eps, 0.0625);
    /// ```
    pub fn for_dtype(dtype: DType) -> Self {
        match dtype {
            DType::F32 => FiniteDifference { eps: 0.0625, margin: 0.25, tolerance: 1e-2 },
            DType::F16 | DType::BF16 => FiniteDifference { eps: 0.25, margin: 1.0, tolerance: 0.1 },
            _ => FiniteDifference::default(),
        }
    }
}

/// How many inputs [`finite_difference_check`] compared, and how many it skipped near ties.
///
/// ```
/// use ndarray::array;
/// use poolgrad::testing::{finite_difference_check, reference::Pooling, FiniteDifference};
/// let x = array![[[1.0, 1.0]]].into_dyn(); // a tie: neither input can be checked
/// let report = finite_difference_check(&Pooling::Adaptive([1, 1]), &x, &array![[[1.0]]].into_dyn(),
///     &array![[[1.0, 0.0]]].into_dyn(), &FiniteDifference::default())?;
/// assert_eq!((report.checked, report.skipped), (0, 2));
/// # Ok::<(), poolgrad::testing::Mismatch>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GradCheck {
    /// Inputs whose gradient was compared with a central difference.
    pub checked: usize,
    /// Inputs skipped because a window that reads them has no clear maximum (or a NaN).
    pub skipped: usize,
}

/// Checks `gradient`, claimed to be `d/dx sum(grad_output * pool(x))` at `input`, against
/// central differences `(L(x + eps e_j) - L(x - eps e_j)) / (2 eps)` computed with the reference
/// forward in `f64`.
///
/// Max pooling is piecewise linear: away from ties the difference is exact, so every input
/// whose windows all have a maximum clear of the runner-up by `margin` is checked; the others
/// are skipped and counted. Inputs no window reads must have a zero gradient. Use it to check an
/// autodiff engine's pooling gradient (or a hand-written backward) on small inputs: each checked
/// input costs two forwards.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// use poolgrad::testing::{finite_difference_check, reference::Pooling, FiniteDifference};
/// let x = array![[[1.0, 5.0, 2.0], [0.0, 3.0, 4.0]]].into_dyn();
/// let pooling = Pooling::Max(MaxPool2dParams::new([2, 2]).with_stride([1, 1]));
/// let g = array![[[1.0, 2.0]]].into_dyn();
/// // Both windows, {1, 5, 0, 3} and {5, 2, 3, 4}, select the 5: it receives 1 + 2.
/// let grad = array![[[0.0, 3.0, 0.0], [0.0, 0.0, 0.0]]].into_dyn();
/// let report = finite_difference_check(&pooling, &x, &g, &grad, &FiniteDifference::default())?;
/// assert_eq!(report.checked, 6);
/// let wrong = array![[[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]].into_dyn();
/// let m = finite_difference_check(&pooling, &x, &g, &wrong, &FiniteDifference::default()).unwrap_err();
/// assert_eq!(m.position, vec![0, 0, 1]);
/// # Ok::<(), poolgrad::testing::Mismatch>(())
/// ```
///
/// # Errors
/// The first input whose gradient differs from its finite difference, or a shape problem.
pub fn finite_difference_check(
    pooling: &Pooling,
    input: &ArrayD<f64>,
    grad_output: &ArrayD<f64>,
    gradient: &ArrayD<f64>,
    settings: &FiniteDifference,
) -> Result<GradCheck, Mismatch> {
    let fail = |detail: String| Mismatch {
        what: "finite-difference check".into(),
        position: Vec::new(),
        expected: f64::NAN,
        actual: f64::NAN,
        detail,
    };
    if gradient.shape() != input.shape() {
        return Err(fail(format!(
            "gradient has shape {:?}, the input {:?}",
            gradient.shape(),
            input.shape()
        )));
    }
    let x4 = as4(input).ok_or_else(|| fail(format!("input must be 3-D or 4-D, got {:?}", input.shape())))?;
    let (n, c, h, w) = x4.dim();
    let [ho, wo] = pooling.output_size([h, w]).map_err(|e| fail(e.to_string()))?;
    let g4 = as4(grad_output).filter(|g| g.dim() == (n, c, ho, wo)).ok_or_else(|| {
        fail(format!("grad_output has shape {:?}, expected the pooled shape", grad_output.shape()))
    })?;
    let loss = |x: &ndarray::Array4<f64>| -> Result<f64, Mismatch> {
        let (values, _) = forward4(x.view(), pooling).map_err(|e| fail(e.to_string()))?;
        Ok(values.iter().zip(g4.iter()).map(|(v, g)| v * g).sum())
    };

    // Which inputs every window reading them leaves clear of ties.
    let mut clear = vec![true; x4.len()];
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                for ow in 0..wo {
                    let taps = pooling.window([h, w], [ho, wo], oh, ow);
                    let vals: Vec<f64> = taps.iter().map(|&(i, j)| x4[[b, ch, i, j]]).collect();
                    let top = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let runner_up = match vals.iter().position(|&v| v == top) {
                        Some(at) => vals
                            .iter()
                            .enumerate()
                            .filter(|&(k, _)| k != at)
                            .map(|(_, &v)| v)
                            .fold(f64::NEG_INFINITY, f64::max),
                        None => f64::NEG_INFINITY,
                    };
                    let finite = vals.iter().all(|v| v.is_finite());
                    if !finite || top - runner_up <= settings.margin {
                        for &(i, j) in &taps {
                            clear[((b * c + ch) * h + i) * w + j] = false;
                        }
                    }
                }
            }
        }
    }

    let g_in = as4(gradient).ok_or_else(|| fail("gradient must be 3-D or 4-D".into()))?;
    let mut x = x4.to_owned();
    let mut report = GradCheck { checked: 0, skipped: 0 };
    for (k, ((b, ch, i, j), &claimed)) in g_in.indexed_iter().enumerate() {
        if !clear[k] {
            report.skipped += 1;
            continue;
        }
        let original = x[[b, ch, i, j]];
        x[[b, ch, i, j]] = original + settings.eps;
        let plus = loss(&x)?;
        x[[b, ch, i, j]] = original - settings.eps;
        let minus = loss(&x)?;
        x[[b, ch, i, j]] = original;
        let estimate = (plus - minus) / (2.0 * settings.eps);
        if (estimate - claimed).abs() > settings.tolerance * (1.0 + claimed.abs()) {
            let position = if input.ndim() == 3 { vec![ch, i, j] } else { vec![b, ch, i, j] };
            return Err(Mismatch {
                what: "finite-difference check".into(),
                position,
                expected: estimate,
                actual: claimed,
                detail: format!("central difference with eps {} vs the gradient given", settings.eps),
            });
        }
        report.checked += 1;
    }
    Ok(report)
}

/// Checks `gradient`, claimed to be the gradient of the scalar `loss` at `input`, against finite
/// differences of `loss` itself: any function of the input (a whole model with its poolings, in
/// `f32` or `f64`), not one pooling.
///
/// For each input element `x_j`, `loss` is evaluated at `x_j + eps` and `x_j - eps` (each rounded
/// to `T`; the steps actually taken are used). Where the one-sided slopes agree (within
/// `tolerance`), the central difference must equal the claimed gradient within `tolerance` times
/// `1 + |gradient|`. Where they disagree, `x_j` sits on a kink (a tie in some max pooling, a NaN,
/// a `relu` at 0) and is skipped, as is any element whose losses are not finite. `margin` is not
/// used. The loss is evaluated `1 + 2 * input.len()` times: keep inputs small.
///
/// ```
/// use ndarray::{Array4, array};
/// use poolgrad::MaxPool2dParams;
/// use poolgrad::testing::{check_gradient, FiniteDifference};
/// let x: Array4<f32> = array![[[[0.0, 5.0, 1.0, 1.5], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.5, 2.0]]]];
/// let params = MaxPool2dParams::new([2, 2]);
/// let w: Array4<f32> = array![[[[1.0, -2.0], [0.5, 3.0]]]];
/// // The loss of a small model: a weighted sum of the pooled values.
/// let loss = |x: &Array4<f32>| (poolgrad::max_pool2d_with_indices(x, &params).unwrap().output * &w).sum();
/// let p = poolgrad::max_pool2d_with_indices(&x, &params)?;
/// let gx = poolgrad::max_pool2d_with_indices_backward(&w, &x, &p.indices, &params)?;
/// let report = check_gradient(loss, &x, &gx, &FiniteDifference::for_dtype(poolgrad::DType::F32))?;
/// assert_eq!((report.checked, report.skipped), (16, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// The first element whose gradient differs from its finite difference; a gradient of another
/// shape; a step that rounds to no change in `T` (choose a larger `eps`).
pub fn check_gradient<T, D, R>(
    mut loss: impl FnMut(&Array<T, D>) -> R,
    input: &Array<T, D>,
    gradient: &Array<T, D>,
    settings: &FiniteDifference,
) -> Result<GradCheck, Mismatch>
where
    T: PoolFloat,
    D: Dimension,
    R: PoolFloat,
{
    let fail = |position: Vec<usize>, detail: String| Mismatch {
        what: "finite-difference check of the loss".into(),
        position,
        expected: f64::NAN,
        actual: f64::NAN,
        detail,
    };
    if gradient.shape() != input.shape() {
        let detail = format!("gradient has shape {:?}, the input {:?}", gradient.shape(), input.shape());
        return Err(fail(Vec::new(), detail));
    }
    let base = loss(input).to_f64_exact();
    let mut x = input.to_owned();
    let mut report = GradCheck { checked: 0, skipped: 0 };
    let gradient = gradient.view().into_dyn();
    for ((position, &claimed), &original) in gradient.indexed_iter().zip(input.view().into_dyn().iter()) {
        let position = position.slice().to_vec();
        let at = original.to_f64_exact();
        let (up, down) = (T::round_from_f64(at + settings.eps), T::round_from_f64(at - settings.eps));
        let (step_up, step_down) = (up.to_f64_exact() - at, at - down.to_f64_exact());
        if !(step_up > 0.0 && step_down > 0.0) {
            let detail = format!("a step of {} from {at} rounds to no change in {}", settings.eps, T::DTYPE);
            return Err(fail(position, detail));
        }
        let mut loss_at = |v: T| {
            x.view_mut().into_dyn()[position.as_slice()] = v;
            loss(&x).to_f64_exact()
        };
        let (plus, minus) = (loss_at(up), loss_at(down));
        loss_at(original);
        let (right, left) = ((plus - base) / step_up, (base - minus) / step_down);
        let kink = (right - left).abs() > settings.tolerance * (1.0 + right.abs() + left.abs());
        if !(plus.is_finite() && minus.is_finite() && base.is_finite()) || kink {
            report.skipped += 1;
            continue;
        }
        let estimate = (plus - minus) / (step_up + step_down);
        let claimed = claimed.to_f64_exact();
        // (A NaN gradient is never within.)
        let within = (estimate - claimed).abs() <= settings.tolerance * (1.0 + claimed.abs());
        if !within {
            return Err(Mismatch {
                what: "finite-difference check of the loss".into(),
                position,
                expected: estimate,
                actual: claimed,
                detail: format!(
                    "central difference with steps +{step_up}/-{step_down} vs the gradient given"
                ),
            });
        }
        report.checked += 1;
    }
    Ok(report)
}

fn as4(a: &ArrayD<f64>) -> Option<ndarray::ArrayView4<'_, f64>> {
    match a.ndim() {
        3 => a.view().insert_axis(ndarray::Axis(0)).into_dimensionality().ok(),
        4 => a.view().into_dimensionality().ok(),
        _ => None,
    }
}
