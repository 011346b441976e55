//! proptest strategies for the 1-D poolings, built as the 2-D ones are ([`strategy`](super)):
//! every part of a case drawn on its own, values hashed from a seed and their position, drawn
//! kernels fitted to the drawn line rather than rejected.
//!
//! Cases are typed by rank: `D = Ix3` gives `[N, C, L]` arrays, `Ix2` gives `[C, L]`, and
//! `IxDyn` mixes both.

use core::ops::RangeInclusive;

use ndarray::{Array, ArrayD, Dimension, IxDyn};
use proptest::prelude::*;

use super::check::{Mismatch, Tolerance, compare, compare_indices};
use super::reference;
use super::strategy::{
    ParamBounds, Values, axis_strategy, check_backward_common, fitted, grad_at, index_pairs, params_of,
    reference_failed, to_index, value_at,
};
use crate::element::PoolFloat;
use crate::index::ArgmaxIndex;
use crate::params::MaxPool1dParams;
use crate::tensor::LineDim;

/// Bounds of generated lines. The rank comes from the case type: `Ix3` cases are `[N, C, L]`,
/// `Ix2` cases `[C, L]`, `IxDyn` cases either (half each).
///
/// ```
/// let long = poolgrad::testing::LineShapes { length: 1..=64, ..Default::default() };
/// assert_eq!(long.channels, 1..=4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineShapes {
    /// Batch `N` (3-D cases).
    pub batch: RangeInclusive<usize>,
    /// Channels `C`.
    pub channels: RangeInclusive<usize>,
    /// Input length `L`.
    pub length: RangeInclusive<usize>,
}

impl Default for LineShapes {
    fn default() -> Self {
        LineShapes { batch: 1..=2, channels: 1..=4, length: 1..=16 }
    }
}

/// The sizes of a 1-D case: `[n, c, l]` and whether it is unbatched (2-D).
#[derive(Debug, Clone, Copy)]
struct Sizes {
    ncl: [usize; 3],
    unbatched: bool,
}

impl Sizes {
    /// An array of `D` of length `l`, `f` giving each element from its `[n, c, l]` position.
    fn array<T: PoolFloat, D: LineDim>(&self, l: usize, f: impl Fn([usize; 3]) -> f64) -> Array<T, D> {
        let [n, c, _] = self.ncl;
        let dims = if self.unbatched { vec![c, l] } else { vec![n, c, l] };
        let unbatched = self.unbatched;
        let a = ArrayD::from_shape_fn(IxDyn(&dims), |p| {
            let p = p.slice();
            let at = if unbatched { [0, p[0], p[1]] } else { [p[0], p[1], p[2]] };
            T::round_from_f64(f(at))
        });
        a.into_dimensionality().expect("the rank was chosen for D")
    }
}

fn sizes_strategy<D: LineDim>(shapes: &LineShapes) -> impl Strategy<Value = Sizes> + use<D> {
    let LineShapes { batch, channels, length } = shapes.clone();
    let unbatched = match D::NDIM {
        Some(2) => Just(true).boxed(),
        Some(_) => Just(false).boxed(),
        None => any::<bool>().boxed(),
    };
    (batch, channels, length, unbatched)
        .prop_map(|(n, c, l, unbatched)| Sizes { ncl: [if unbatched { 1 } else { n }, c, l], unbatched })
}

/// A generated 1-D max-pooling case (adaptive when `params` is `None`) with its reference
/// forward; see [`max_pool1d_cases`] and [`adaptive1d_cases`].
#[derive(Debug, Clone)]
pub struct LineCase<T, I, D: Dimension = IxDyn> {
    /// The input, `[N, C, L]` (or `[C, L]`, as `D` says).
    pub input: Array<T, D>,
    /// The pooling's parameters, or `None` for an adaptive pooling.
    pub params: Option<MaxPool1dParams>,
    /// The pooled length (the adaptive output size).
    pub output_size: usize,
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference flat arg-max indices in each line.
    pub indices: Array<I, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
}

/// 1-D max-pooling cases within `bounds` (fitted to the drawn line as [`ParamBounds`] says), of
/// rank `D`.
///
/// ```
/// use ndarray::Ix3;
/// use poolgrad::testing::{max_pool1d_cases, LineShapes, ParamBounds, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in max_pool1d_cases::<f32, i64, Ix3>(LineShapes::default(), ParamBounds::default(), Values::Ties))| {
///     let p = poolgrad::max_pool1d_with_indices(&case.input, &case.params.unwrap()).unwrap();
///     case.check_forward(&p.output, &p.indices)?;
/// });
/// ```
pub fn max_pool1d_cases<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    shapes: LineShapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = LineCase<T, I, D>> {
    let smallest = *bounds.kernel.start();
    let ceil = if bounds.ceil_mode { any::<bool>().boxed() } else { Just(false).boxed() };
    let params = (axis_strategy(&bounds), ceil).prop_map(|(a, ceil)| params_of([a], ceil));
    (params, sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_filter_map(
        "even the smallest kernel leaves no window on this input",
        move |(params, sizes, seed, grad_seed)| {
            let input = sizes.array::<T, D>(sizes.ncl[2], |p| value_at(values, seed, &p));
            let (params, (output, indices)) =
                fitted(params, smallest, |p| reference::max_pool1d_with_indices(&input, p).ok())?;
            let [out] = params.output_size([sizes.ncl[2]]).ok()?;
            let grad_output = sizes.array::<T, D>(out, |p| grad_at(grad_seed, &p));
            let indices = to_index(&indices);
            Some(LineCase { input, params: Some(params), output_size: out, output, indices, grad_output })
        },
    )
}

/// Adaptive 1-D max-pooling cases of rank `D`, the output size in `1..=length + 2`.
///
/// ```
/// use ndarray::Ix2;
/// use poolgrad::testing::{adaptive1d_cases, LineShapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive1d_cases::<f64, i32, Ix2>(LineShapes::default(), Values::WithNan))| {
///     case.check_backward(|g| poolgrad::adaptive_max_pool1d_backward(g, &case.input, &case.indices).unwrap())?;
/// });
/// ```
pub fn adaptive1d_cases<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    shapes: LineShapes,
    values: Values,
) -> impl Strategy<Value = LineCase<T, I, D>> {
    let most = *shapes.length.end() + 2;
    (1..=most, sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_map(
        move |(out, sizes, seed, grad_seed)| {
            let input = sizes.array::<T, D>(sizes.ncl[2], |p| value_at(values, seed, &p));
            let (output, indices) = reference::adaptive_max_pool1d(&input, out).expect("valid case");
            let grad_output = sizes.array::<T, D>(out, |p| grad_at(grad_seed, &p));
            let indices = to_index(&indices);
            LineCase { input, params: None, output_size: out, output, indices, grad_output }
        },
    )
}

impl<T: PoolFloat, I: ArgmaxIndex, D: LineDim> LineCase<T, I, D> {
    /// Checks a forward's values and indices against the reference, exactly (see
    /// [`max_pool1d_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, indices: &Array<I, D>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices("forward indices vs reference", self.indices.view(), indices.view())
    }

    /// Runs `backward` on the case's gradient and checks it against the reference, the gradient
    /// invariants and linearity (see [`adaptive1d_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        let reference = reference::max_pool1d_backward(&self.grad_output, &self.input, &self.indices)
            .map_err(reference_failed)?;
        let length = self.input.shape()[self.input.ndim() - 1];
        let selected = index_pairs(&self.indices, length);
        check_backward_common(&self.grad_output, &reference, &selected, 1, backward)
    }
}
