//! Comparisons and invariants that return a readable [`Mismatch`] (the first position that
//! differs, the expected and the actual value) instead of a bare assertion.

use core::fmt;

use ndarray::{Array, ArrayView, Dimension};

use crate::element::{DType, Element, PoolFloat};

/// How far a value may be from its reference: `|actual - expected| <= abs + rel * |expected|`.
///
/// ```
/// use poolgrad::testing::Tolerance;
/// let t = Tolerance::for_dtype(poolgrad::DType::BF16);
/// assert!(t.accepts(256.0, 257.0));
/// assert!(!Tolerance::exact().accepts(1.0, 1.0 + 1e-12));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

impl Tolerance {
    /// Equality (NaN equals NaN).
    pub fn exact() -> Self {
        Tolerance { abs: 0.0, rel: 0.0 }
    }

    /// For sums of gradients in `dtype`: a few units in the last place of the type, enough for
    /// an `f32` summation order that differs from the reference's exact sum.
    pub fn for_dtype(dtype: DType) -> Self {
        match dtype {
            DType::F64 => Tolerance { abs: 1e-12, rel: 1e-12 },
            DType::F32 => Tolerance { abs: 1e-5, rel: 1e-5 },
            DType::F16 => Tolerance { abs: 1e-3, rel: 2e-3 },
            DType::BF16 => Tolerance { abs: 1e-2, rel: 1.6e-2 },
            _ => Tolerance::exact(),
        }
    }

    /// Whether `actual` is close enough to `expected` (NaN matches NaN, infinities must match).
    pub fn accepts(&self, expected: f64, actual: f64) -> bool {
        if expected.is_nan() || actual.is_nan() {
            return expected.is_nan() && actual.is_nan();
        }
        if expected.is_infinite() || actual.is_infinite() {
            return expected == actual;
        }
        (actual - expected).abs() <= self.abs + self.rel * expected.abs()
    }
}

/// The first difference between a result and its reference.
///
/// ```
/// use poolgrad::testing::Mismatch;
/// let m = Mismatch {
///     what: "backward vs reference".into(),
///     position: vec![1, 0, 4],
///     expected: -4.0,
///     actual: -2.0,
///     detail: "tolerance abs 0.00001 + rel 0.00001".into(),
/// };
/// assert_eq!(m.to_string(), "backward vs reference: first mismatch at [1, 0, 4]: expected -4, got -2 (tolerance abs 0.00001 + rel 0.00001)");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// What was compared, e.g. `"backward vs reference"`.
    pub what: String,
    /// The position of the first difference (empty when the shapes differ).
    pub position: Vec<usize>,
    /// The reference value.
    pub expected: f64,
    /// The value found.
    pub actual: f64,
    /// More context: the tolerance, the shapes, or the rule broken.
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.position.is_empty() {
            write!(f, "{}: {}", self.what, self.detail)
        } else {
            write!(
                f,
                "{}: first mismatch at {:?}: expected {}, got {} ({})",
                self.what, self.position, self.expected, self.actual, self.detail
            )
        }
    }
}

impl std::error::Error for Mismatch {}

// `Mismatch` is a `std::error::Error`, so proptest's blanket `From` turns it into a
// `TestCaseError` and `?` works inside `proptest!`.

fn shape_mismatch(what: &str, expected: &[usize], actual: &[usize]) -> Mismatch {
    Mismatch {
        what: what.into(),
        position: Vec::new(),
        expected: f64::NAN,
        actual: f64::NAN,
        detail: format!("shape {actual:?}, expected {expected:?}"),
    }
}

/// Compares `actual` with `expected` element by element.
///
/// ```
/// use ndarray::array;
/// use poolgrad::testing::{compare, Tolerance};
/// let e = array![[[1.0f32, 2.0]]].into_dyn();
/// let a = array![[[1.0f32, 2.5]]].into_dyn();
/// let m = compare("demo", e.view(), a.view(), Tolerance::exact()).unwrap_err();
/// assert_eq!(m.position, vec![0, 0, 1]);
/// assert_eq!(m.to_string(), "demo: first mismatch at [0, 0, 1]: expected 2, got 2.5 (tolerance abs 0 + rel 0)");
/// ```
///
/// # Errors
/// The first [`Mismatch`], or a shape difference.
pub fn compare<T: PoolFloat, D: Dimension>(
    what: &str,
    expected: ArrayView<'_, T, D>,
    actual: ArrayView<'_, T, D>,
    tolerance: Tolerance,
) -> Result<(), Mismatch> {
    if expected.shape() != actual.shape() {
        return Err(shape_mismatch(what, expected.shape(), actual.shape()));
    }
    let (expected, actual) = (expected.into_dyn(), actual.into_dyn());
    for ((position, &e), &a) in expected.indexed_iter().zip(actual.iter()) {
        let (e, a) = (e.to_f64_exact(), a.to_f64_exact());
        if !tolerance.accepts(e, a) {
            return Err(Mismatch {
                what: what.into(),
                position: position.slice().to_vec(),
                expected: e,
                actual: a,
                detail: format!("tolerance abs {} + rel {}", tolerance.abs, tolerance.rel),
            });
        }
    }
    Ok(())
}

/// Compares index arrays (or mask bytes) exactly.
///
/// ```
/// use ndarray::array;
/// let e = array![[1i64, 6], [8, 10]].into_dyn();
/// let a = array![[1i64, 6], [8, 14]].into_dyn();
/// let m = poolgrad::testing::compare_indices("indices", e.view(), a.view()).unwrap_err();
/// assert_eq!((m.position, m.expected, m.actual), (vec![1, 1], 10.0, 14.0));
/// ```
///
/// # Errors
/// The first [`Mismatch`], or a shape difference.
pub fn compare_indices<I: Element + Into<i64>, D: Dimension>(
    what: &str,
    expected: ArrayView<'_, I, D>,
    actual: ArrayView<'_, I, D>,
) -> Result<(), Mismatch> {
    if expected.shape() != actual.shape() {
        return Err(shape_mismatch(what, expected.shape(), actual.shape()));
    }
    let (expected, actual) = (expected.into_dyn(), actual.into_dyn());
    for ((position, &e), &a) in expected.indexed_iter().zip(actual.iter()) {
        if e != a {
            return Err(Mismatch {
                what: what.into(),
                position: position.slice().to_vec(),
                expected: e.into() as f64,
                actual: a.into() as f64,
                detail: "indices must be equal (first maximum in row-major order)".into(),
            });
        }
    }
    Ok(())
}

/// The invariants of a pooling gradient, given the `(output element, input position)` pairs the
/// forward selected: `grad_input` is zero wherever nothing was selected, and its sum equals the
/// sum of `grad_output` (within the dtype's tolerance, scaled by the number of terms).
///
/// ```
/// use ndarray::array;
/// use poolgrad::testing::check_gradient_invariants;
/// let g = array![[[1.0f32, 2.0]]].into_dyn();
/// let selected = [(0, 1), (1, 1)]; // both outputs chose input 1 of a 1x3 plane
/// let good = array![[[0.0f32, 3.0, 0.0]]].into_dyn();
/// assert!(check_gradient_invariants(g.view(), &selected, good.view()).is_ok());
/// let stray = array![[[0.5f32, 2.5, 0.0]]].into_dyn(); // input 0 was never selected
/// assert_eq!(check_gradient_invariants(g.view(), &selected, stray.view()).unwrap_err().position, vec![0, 0, 0]);
/// ```
///
/// # Errors
/// The first [`Mismatch`]; a [`Mismatch`] without a position for arrays of fewer than two
/// dimensions, which have no plane.
pub fn check_gradient_invariants<T: PoolFloat, D: Dimension>(
    grad_output: ArrayView<'_, T, D>,
    selected: &[(usize, usize)],
    grad_input: ArrayView<'_, T, D>,
) -> Result<(), Mismatch> {
    if grad_input.ndim() < 2 {
        return Err(Mismatch {
            what: "gradient invariants".into(),
            position: Vec::new(),
            expected: f64::NAN,
            actual: f64::NAN,
            detail: format!(
                "grad_input has shape {:?}, expected [.., H, W] (3-D or 4-D)",
                grad_input.shape()
            ),
        });
    }
    let shape = grad_input.shape();
    let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let plane = h * w;
    let outputs_per_plane =
        grad_output.shape()[grad_output.ndim() - 2] * grad_output.shape()[grad_output.ndim() - 1];
    let mut hit = vec![false; grad_input.len()];
    for &(e, flat) in selected {
        if let Some(slot) = hit.get_mut((e / outputs_per_plane.max(1)) * plane + flat) {
            *slot = true;
        }
    }
    for ((position, &g), &touched) in grad_input.view().into_dyn().indexed_iter().zip(&hit) {
        if !touched && g.to_f64_exact() != 0.0 {
            return Err(Mismatch {
                what: "gradient invariants".into(),
                position: position.slice().to_vec(),
                expected: 0.0,
                actual: g.to_f64_exact(),
                detail: "no window selected this input, so its gradient must be 0".into(),
            });
        }
    }
    let go: Vec<f64> = grad_output.iter().map(|g| g.to_f64_exact()).collect();
    let want: f64 = selected.iter().map(|&(e, _)| go.get(e).copied().unwrap_or(0.0)).sum();
    let got: f64 = grad_input.iter().map(|g| g.to_f64_exact()).sum();
    let terms = selected.len().max(1) as f64;
    let t = Tolerance::for_dtype(T::DTYPE);
    let scaled = Tolerance { abs: t.abs * terms, rel: t.rel * terms.sqrt() };
    if !scaled.accepts(want, got) {
        return Err(Mismatch {
            what: "gradient invariants".into(),
            position: Vec::new(),
            expected: want,
            actual: got,
            detail: format!("sum(grad_input) = {got}, but the selected gradients sum to {want}"),
        });
    }
    Ok(())
}

/// Linearity of a backward in `grad_output`: `f(a + b) == f(a) + f(b)` and `f(2a) == 2 f(a)`,
/// within the dtype's tolerance.
///
/// ```
/// use ndarray::array;
/// use poolgrad::testing::check_linearity;
/// let x = array![[[1.0f32, 3.0]]];
/// let idx = array![[[1i64]]];
/// let backward = |g: &ndarray::ArrayD<f32>| {
///     let g3 = g.view().into_dimensionality::<ndarray::Ix3>().unwrap();
///     poolgrad::adaptive_max_pool2d_backward(&g3, &x, &idx).unwrap().into_dyn()
/// };
/// let (a, b) = (array![[[2.0f32]]].into_dyn(), array![[[-5.0f32]]].into_dyn());
/// assert!(check_linearity(backward, &a, &b).is_ok());
/// // Not linear: a backward that adds a constant.
/// assert!(check_linearity(|g: &ndarray::ArrayD<f32>| g.mapv(|v| v + 1.0), &a, &b).is_err());
/// ```
///
/// # Errors
/// The first [`Mismatch`].
pub fn check_linearity<T: PoolFloat, D: Dimension>(
    backward: impl Fn(&Array<T, D>) -> Array<T, D>,
    a: &Array<T, D>,
    b: &Array<T, D>,
) -> Result<(), Mismatch> {
    let t = Tolerance::for_dtype(T::DTYPE);
    let sum = ndarray::Zip::from(a)
        .and(b)
        .map_collect(|&x, &y| T::round_from_f64(x.to_f64_exact() + y.to_f64_exact()));
    let f_sum = backward(&sum);
    let (fa, fb) = (backward(a), backward(b));
    let f_a_plus_f_b = ndarray::Zip::from(&fa)
        .and(&fb)
        .map_collect(|&x, &y| T::round_from_f64(x.to_f64_exact() + y.to_f64_exact()));
    compare(
        "linearity: f(a + b) vs f(a) + f(b)",
        f_a_plus_f_b.view(),
        f_sum.view(),
        Tolerance { abs: 2.0 * t.abs, rel: 2.0 * t.rel },
    )?;
    let double = a.mapv(|x| T::round_from_f64(2.0 * x.to_f64_exact()));
    let twice = fa.mapv(|x| T::round_from_f64(2.0 * x.to_f64_exact()));
    compare("linearity: f(2a) vs 2 f(a)", twice.view(), backward(&double).view(), t)
}
