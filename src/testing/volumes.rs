//! proptest strategies for the 3-D poolings, built as the 2-D ones are ([`strategy`](super)):
//! every part of a case drawn on its own, values hashed from a seed and their `(n, c, d, h, w)`
//! position (so shrinking keeps the elements that remain), drawn kernels fitted to the drawn
//! volume rather than rejected.
//!
//! Cases are typed by rank: `D = Ix5` gives `[N, C, D, H, W]` arrays, `Ix4` gives `[C, D, H, W]`,
//! and `IxDyn` mixes both.

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
use crate::params::MaxPool3dParams;
use crate::tensor::VolumeDim;

/// Bounds of generated volumes. The rank comes from the case type: `Ix5` cases are
/// `[N, C, D, H, W]`, `Ix4` cases `[C, D, H, W]`, `IxDyn` cases either (half each).
///
/// ```
/// let deep = poolgrad::testing::VolumeShapes { depth: 1..=16, ..Default::default() };
/// assert_eq!(deep.height, 1..=6);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeShapes {
    /// Batch `N` (5-D cases).
    pub batch: RangeInclusive<usize>,
    /// Channels `C`.
    pub channels: RangeInclusive<usize>,
    /// Input depth `D`.
    pub depth: RangeInclusive<usize>,
    /// Input height `H`.
    pub height: RangeInclusive<usize>,
    /// Input width `W`.
    pub width: RangeInclusive<usize>,
}

impl Default for VolumeShapes {
    fn default() -> Self {
        VolumeShapes { batch: 1..=2, channels: 1..=3, depth: 1..=5, height: 1..=6, width: 1..=6 }
    }
}

/// The sizes of a case: `[n, c, d, h, w]` and whether it is unbatched (4-D).
#[derive(Debug, Clone, Copy)]
struct Sizes {
    ncdhw: [usize; 5],
    unbatched: bool,
}

impl Sizes {
    /// An array of `D` with spatial size `dhw`, `f` giving each element from its 5-D position.
    fn array<T: PoolFloat, D: VolumeDim>(
        &self,
        dhw: [usize; 3],
        f: impl Fn([usize; 5]) -> f64,
    ) -> Array<T, D> {
        let [n, c, ..] = self.ncdhw;
        let [d, h, w] = dhw;
        let unbatched = self.unbatched;
        let dims = if unbatched { vec![c, d, h, w] } else { vec![n, c, d, h, w] };
        let a = ArrayD::from_shape_fn(IxDyn(&dims), |p| {
            let p = p.slice();
            let at = if unbatched { [0, p[0], p[1], p[2], p[3]] } else { [p[0], p[1], p[2], p[3], p[4]] };
            T::round_from_f64(f(at))
        });
        a.into_dimensionality().expect("the rank was chosen for D")
    }

    fn spatial(&self) -> [usize; 3] {
        let [.., d, h, w] = self.ncdhw;
        [d, h, w]
    }
}

/// Sizes for rank `D`: 5-D for `Ix5`, 4-D (batch 1) for `Ix4`, either for `IxDyn`.
fn sizes_strategy<D: VolumeDim>(shapes: &VolumeShapes) -> impl Strategy<Value = Sizes> + use<D> {
    let VolumeShapes { batch, channels, depth, height, width } = shapes.clone();
    let unbatched = match D::NDIM {
        Some(4) => Just(true).boxed(),
        Some(_) => Just(false).boxed(),
        None => any::<bool>().boxed(),
    };
    (batch, channels, depth, height, width, unbatched).prop_map(|(n, c, d, h, w, unbatched)| Sizes {
        ncdhw: [if unbatched { 1 } else { n }, c, d, h, w],
        unbatched,
    })
}

/// A generated adaptive 3-D max-pooling case with its reference forward; see
/// [`adaptive3d_cases`].
#[derive(Debug, Clone)]
pub struct Adaptive3dCase<T, I, D: Dimension = IxDyn> {
    /// The input, `[N, C, D, H, W]` (or `[C, D, H, W]`, as `D` says).
    pub input: Array<T, D>,
    /// `[Do, Ho, Wo]`, each in `1..=size + 2` (so outputs above the input occur).
    pub output_size: [usize; 3],
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference flat arg-max indices, `(id * H + ih) * W + iw` in each volume.
    pub indices: Array<I, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
}

/// Adaptive 3-D max-pooling cases of rank `D` (`Ix5` for a model typed `Array5`).
///
/// ```
/// use ndarray::Ix5;
/// use poolgrad::testing::{adaptive3d_cases, Values, VolumeShapes};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive3d_cases::<f32, i64, Ix5>(VolumeShapes::default(), Values::Ties))| {
///     let mine = poolgrad::adaptive_max_pool3d(&case.input, case.output_size).unwrap();
///     case.check_forward(&mine.output, &mine.indices)?;
/// });
/// ```
pub fn adaptive3d_cases<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    shapes: VolumeShapes,
    values: Values,
) -> impl Strategy<Value = Adaptive3dCase<T, I, D>> {
    let most = |r: &RangeInclusive<usize>| *r.end() + 2;
    let outs = (1..=most(&shapes.depth), 1..=most(&shapes.height), 1..=most(&shapes.width));
    (outs, sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_map(
        move |((od, oh, ow), sizes, seed, grad_seed)| {
            let input = sizes.array::<T, D>(sizes.spatial(), |p| value_at(values, seed, &p));
            let output_size = [od, oh, ow];
            let (output, indices) = reference::adaptive_max_pool3d(&input, output_size).expect("valid case");
            let grad_output = sizes.array::<T, D>(output_size, |p| grad_at(grad_seed, &p));
            Adaptive3dCase { input, output_size, output, indices: to_index(&indices), grad_output }
        },
    )
}

/// A generated 3-D max-pooling case (flat indices in each volume) with its reference forward;
/// see [`max_pool3d_cases`].
#[derive(Debug, Clone)]
pub struct MaxPool3dCase<T, I, D: Dimension = IxDyn> {
    /// The input, `[N, C, D, H, W]` (or `[C, D, H, W]`, as `D` says).
    pub input: Array<T, D>,
    /// Valid parameters for this input.
    pub params: MaxPool3dParams,
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference flat arg-max indices, `(id * H + ih) * W + iw` in each volume.
    pub indices: Array<I, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
}

/// 3-D max-pooling cases within `bounds` (each axis drawn and fitted as [`ParamBounds`] says
/// for a plane), of rank `D`.
///
/// ```
/// use ndarray::Ix5;
/// use poolgrad::testing::{max_pool3d_cases, ParamBounds, Values, VolumeShapes};
/// use proptest::prelude::*;
/// proptest!(|(case in max_pool3d_cases::<f64, i32, Ix5>(VolumeShapes::default(), ParamBounds::default(), Values::Distinct))| {
///     case.check_backward(|g| poolgrad::max_pool3d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap())?;
/// });
/// ```
pub fn max_pool3d_cases<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    shapes: VolumeShapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = MaxPool3dCase<T, I, D>> {
    let smallest = *bounds.kernel.start();
    let ceil = if bounds.ceil_mode { any::<bool>().boxed() } else { Just(false).boxed() };
    let axes = (axis_strategy(&bounds), axis_strategy(&bounds), axis_strategy(&bounds), ceil);
    let params = axes.prop_map(|(d, h, w, ceil)| params_of([d, h, w], ceil));
    (params, sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_filter_map(
        "even the smallest kernel leaves no window on this input",
        move |(params, sizes, seed, grad_seed)| {
            let input = sizes.array::<T, D>(sizes.spatial(), |p| value_at(values, seed, &p));
            let (params, (output, indices)) =
                fitted(params, smallest, |p| reference::max_pool3d_with_indices(&input, p).ok())?;
            let pooled = params.output_size(sizes.spatial()).ok()?;
            let grad_output = sizes.array::<T, D>(pooled, |p| grad_at(grad_seed, &p));
            Some(MaxPool3dCase { input, params, output, indices: to_index(&indices), grad_output })
        },
    )
}

/// `D * H * W` of a volume array.
fn volume_of<T, D: Dimension>(input: &Array<T, D>) -> usize {
    input.shape()[input.ndim() - 3..].iter().product()
}

/// Values and indices against the reference's, exactly.
fn check_forward_exact<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    (want_output, want_indices): (&Array<T, D>, &Array<I, D>),
    output: &Array<T, D>,
    indices: &Array<I, D>,
) -> Result<(), Mismatch> {
    compare("forward values vs reference", want_output.view(), output.view(), Tolerance::exact())?;
    compare_indices("forward indices vs reference", want_indices.view(), indices.view())
}

/// The 3-D backward of a case against the reference, the invariants and linearity.
fn check_backward_3d<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &Array<T, D>,
    input: &Array<T, D>,
    indices: &Array<I, D>,
    backward: impl Fn(&Array<T, D>) -> Array<T, D>,
) -> Result<(), Mismatch> {
    let reference = reference::max_pool3d_backward(grad_output, input, indices).map_err(reference_failed)?;
    let selected = index_pairs(indices, volume_of(input));
    check_backward_common(grad_output, &reference, &selected, 3, backward)
}

impl<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim> Adaptive3dCase<T, I, D> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{adaptive3d_cases, Values, VolumeShapes};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive3d_cases::<half::bf16, i32, Ix4>(VolumeShapes::default(), Values::WithNan))| {
    ///     let p = poolgrad::adaptive_max_pool3d_i32(&case.input, case.output_size).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, indices: &Array<I, D>) -> Result<(), Mismatch> {
        check_forward_exact((&self.output, &self.indices), output, indices)
    }

    /// Runs `backward` (a function of `grad_output`) and checks it against the reference, the
    /// gradient invariants and linearity.
    ///
    /// ```
    /// use ndarray::Ix5;
    /// use poolgrad::testing::{adaptive3d_cases, Values, VolumeShapes};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive3d_cases::<f32, i64, Ix5>(VolumeShapes::default(), Values::Distinct))| {
    ///     case.check_backward(|g| poolgrad::adaptive_max_pool3d_backward(g, &case.input, &case.indices).unwrap())?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        check_backward_3d(&self.grad_output, &self.input, &self.indices, backward)
    }
}

impl<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim> MaxPool3dCase<T, I, D> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use ndarray::Ix5;
    /// use poolgrad::testing::{max_pool3d_cases, ParamBounds, Values, VolumeShapes};
    /// use proptest::prelude::*;
    /// proptest!(|(case in max_pool3d_cases::<f32, i64, Ix5>(VolumeShapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     let p = poolgrad::max_pool3d_with_indices(&case.input, &case.params).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, indices: &Array<I, D>) -> Result<(), Mismatch> {
        check_forward_exact((&self.output, &self.indices), output, indices)
    }

    /// Runs `backward` on the case's gradient and checks it against the reference, the gradient
    /// invariants and linearity (see [`max_pool3d_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        check_backward_3d(&self.grad_output, &self.input, &self.indices, backward)
    }
}
