//! proptest strategies that generate valid cases for each operation, with their forward results
//! (from the [`reference`](mod@super::reference)) so a backward can be tested directly.
//!
//! Cases are typed by rank: `D = Ix4` gives `[N, C, H, W]` arrays (what a model typed `Array4`
//! takes), `Ix3` gives `[C, H, W]`, and `IxDyn` mixes both.
//!
//! # Shrinking
//!
//! Every part of a case is drawn independently (no `prop_flat_map`): the pooling (shrunk first,
//! towards a 1x1 kernel that every size allows), the sizes, and a seed for the input values and
//! one for the gradient. A value is a hash of its seed and its
//! `(n, c, h, w)` position, so when a failing case shrinks to fewer batches, channels, rows or
//! columns, the elements that remain keep their values, and a failure that depends on a few
//! elements keeps failing as the rest of the case goes away. Seeds shrink too (towards 0), which
//! changes every value at once. A drawn kernel too large for the drawn input is not rejected
//! but fitted (see [`ParamBounds`]), so a kernel shrinks all the way to the smallest the bounds
//! allow.

use core::fmt;
use core::marker::PhantomData;
use core::ops::RangeInclusive;

use ndarray::{Array, ArrayD, Dimension, IxDyn};
use proptest::prelude::*;

use super::check::{
    Mismatch, Tolerance, check_gradient_invariants, check_linearity, compare, compare_indices,
};
use super::reference::{self, Pooling};
use crate::element::PoolFloat;
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout};
use crate::params::{MaxPool2dParams, MaxPoolParams};
use crate::tensor::PoolDim;

/// Bounds of the generated shapes. The rank comes from the case type: `Ix4` cases are
/// `[N, C, H, W]`, `Ix3` cases `[C, H, W]`, `IxDyn` cases either (half each).
///
/// The default channel range crosses a 16-channel block (the Ascend `Bitmask` groups channels
/// by 16).
///
/// ```
/// let small = poolgrad::testing::Shapes { channels: 1..=3, ..Default::default() };
/// assert_eq!(small.height, 1..=8);
/// assert_eq!(poolgrad::testing::Shapes::default().channels, 1..=20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shapes {
    /// Batch `N` (4-D cases).
    pub batch: RangeInclusive<usize>,
    /// Channels `C`.
    pub channels: RangeInclusive<usize>,
    /// Input height `H`.
    pub height: RangeInclusive<usize>,
    /// Input width `W`.
    pub width: RangeInclusive<usize>,
}

impl Default for Shapes {
    fn default() -> Self {
        Shapes { batch: 1..=2, channels: 1..=20, height: 1..=8, width: 1..=8 }
    }
}

/// The input values of generated cases.
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{adaptive_cases, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive_cases::<f32, i32, Ix4>(Shapes::default(), Values::WithNan))| {
///     prop_assert_eq!(case.output.shape(), case.indices.shape());
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Small integers in `-2..2`: many ties, where first-maximum rules matter.
    Ties,
    /// Spread values (multiples of 1/4 in `[-125, 125)`), exact in every element type.
    Distinct,
    /// Small integers with about one NaN in ten.
    WithNan,
}

/// Bounds of generated max-pooling parameters. Padding is drawn in `0..=kernel/2`. Along an axis
/// where the drawn window does not fit the drawn input (no window, or a dilated window that reads
/// only padding), the case pools by the smallest kernel of the bounds, padded by half of it,
/// instead: a 1-wide kernel without padding under the default bounds, which fits every input.
/// So the smallest kernel is a little more frequent than the bounds alone make it, and a failing
/// case's kernel shrinks to it on any input. Where even that does not fit, no case is generated.
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
/// use proptest::prelude::*;
/// let stems = ParamBounds { kernel: 3..=3, stride: 2..=2, dilation: 1..=1, ceil_mode: false };
/// proptest!(|(case in max_pool_cases::<f32, i64, Ix4>(Shapes::default(), stems.clone(), Values::Distinct))| {
///     prop_assert_eq!(case.params.kernel(), [3, 3]);
///     prop_assert!(case.params.padding()[0] <= 1);
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamBounds {
    /// Kernel size per axis.
    pub kernel: RangeInclusive<usize>,
    /// Stride per axis.
    pub stride: RangeInclusive<usize>,
    /// Dilation per axis (the mask strategies use 1).
    pub dilation: RangeInclusive<usize>,
    /// Whether ceil mode is generated (half of the cases).
    pub ceil_mode: bool,
}

impl Default for ParamBounds {
    fn default() -> Self {
        ParamBounds { kernel: 1..=4, stride: 1..=3, dilation: 1..=2, ceil_mode: true }
    }
}

/// A 64-bit mix of a seed and a position (SplitMix64's finaliser over each coordinate).
fn hash(seed: u64, position: &[usize]) -> u64 {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for &p in position {
        h = (h ^ p as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    h
}

/// The input value at `position` (`[n, c, h, w]`, or `[n, c, d, h, w]` for a volume) for `seed`.
pub(super) fn value_at(values: Values, seed: u64, position: &[usize]) -> f64 {
    let r = hash(seed, position);
    match values {
        Values::Ties => (r % 4) as f64 - 2.0,
        Values::Distinct => ((r % 1000) as f64 - 500.0) / 4.0,
        Values::WithNan if r.is_multiple_of(10) => f64::NAN,
        Values::WithNan => ((r / 10) % 4) as f64 - 2.0,
    }
}

/// A gradient value at `position` for `seed`: a small non-zero integer, `±1..=8`, so that sums
/// are exact in f32 and f64 and every output's gradient shows where it lands (a zero would hide
/// a misplaced gradient, and let a failing case stop failing as it shrinks).
pub(super) fn grad_at(seed: u64, position: &[usize]) -> f64 {
    let r = hash(seed, position);
    let magnitude = (r % 8 + 1) as f64;
    if (r >> 32) & 1 == 1 { -magnitude } else { magnitude }
}

/// The sizes of a case: `[n, c, h, w]` and whether it is 3-D.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    nchw: [usize; 4],
    three_d: bool,
}

impl Sizes {
    fn dims(&self, [h, w]: [usize; 2]) -> Vec<usize> {
        let [n, c, ..] = self.nchw;
        if self.three_d { vec![c, h, w] } else { vec![n, c, h, w] }
    }

    /// An array of `D` with spatial size `[h, w]`, `f` giving each element from its 4-D position.
    fn array<T: PoolFloat, D: PoolDim>(&self, hw: [usize; 2], f: impl Fn([usize; 4]) -> f64) -> Array<T, D> {
        let dims = self.dims(hw);
        let three_d = self.three_d;
        let a = ArrayD::from_shape_fn(IxDyn(&dims), |p| {
            let p = p.slice();
            let at = if three_d { [0, p[0], p[1], p[2]] } else { [p[0], p[1], p[2], p[3]] };
            T::round_from_f64(f(at))
        });
        a.into_dimensionality().expect("the rank was chosen for D")
    }
}

/// Sizes for rank `D`: 4-D for `Ix4`, 3-D (batch 1) for `Ix3`, either for `IxDyn`.
fn sizes_strategy<D: PoolDim>(shapes: &Shapes) -> impl Strategy<Value = Sizes> + use<D> {
    let Shapes { batch, channels, height, width } = shapes.clone();
    let three_d = match D::NDIM {
        Some(3) => Just(true).boxed(),
        Some(_) => Just(false).boxed(),
        None => any::<bool>().boxed(),
    };
    (batch, channels, height, width, three_d)
        .prop_map(|(n, c, h, w, three_d)| Sizes { nchw: [if three_d { 1 } else { n }, c, h, w], three_d })
}

pub(super) fn to_index<I: ArgmaxIndex, D: Dimension>(a: &Array<i64, D>) -> Array<I, D> {
    a.mapv(|v| I::try_from_flat(v as usize).unwrap_or_default())
}

/// A generated adaptive max-pooling case with its reference forward; see [`adaptive_cases`].
#[derive(Debug, Clone)]
pub struct AdaptiveCase<T, I, D: Dimension = IxDyn> {
    /// The input, `[N, C, H, W]` (or `[C, H, W]`, as `D` says).
    pub input: Array<T, D>,
    /// `[Ho, Wo]`, each in `1..=size + 2` (so `Ho > H` occurs).
    pub output_size: [usize; 2],
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference flat arg-max indices.
    pub indices: Array<I, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
}

/// Adaptive max-pooling cases of rank `D` (`Ix4` for a model typed `Array4`).
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{adaptive_cases, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive_cases::<f32, i64, Ix4>(Shapes::default(), Values::Ties))| {
///     let mine = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
///     case.check_forward(&mine.output, &mine.indices)?;
/// });
/// ```
pub fn adaptive_cases<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    shapes: Shapes,
    values: Values,
) -> impl Strategy<Value = AdaptiveCase<T, I, D>> {
    let (hmax, wmax) = (*shapes.height.end() + 2, *shapes.width.end() + 2);
    (1..=hmax, 1..=wmax, sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_map(
        move |(ho, wo, sizes, seed, grad_seed)| {
            let [_, _, h, w] = sizes.nchw;
            let input = sizes.array::<T, D>([h, w], |p| value_at(values, seed, &p));
            let (output, indices) = reference::adaptive_max_pool2d(&input, [ho, wo]).expect("valid case");
            let grad_output = sizes.array::<T, D>([ho, wo], |p| grad_at(grad_seed, &p));
            AdaptiveCase { input, output_size: [ho, wo], output, indices: to_index(&indices), grad_output }
        },
    )
}

/// A generated max-pooling case (flat indices) with its reference forward; see
/// [`max_pool_cases`].
#[derive(Debug, Clone)]
pub struct MaxPoolCase<T, I, D: Dimension = IxDyn> {
    /// The input, `[N, C, H, W]` (or `[C, H, W]`, as `D` says).
    pub input: Array<T, D>,
    /// Valid parameters for this input.
    pub params: MaxPool2dParams,
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference flat arg-max indices.
    pub indices: Array<I, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
}

/// Parameters within `bounds`. Each field is drawn on its own (padding as a fraction of half
/// the kernel), so each shrinks on its own.
fn params_strategy(bounds: &ParamBounds) -> impl Strategy<Value = MaxPool2dParams> + use<> {
    let ceil = if bounds.ceil_mode { any::<bool>().boxed() } else { Just(false).boxed() };
    (axis_strategy(bounds), axis_strategy(bounds), ceil).prop_map(|(h, w, ceil)| params_of([h, w], ceil))
}

/// One axis's `(kernel, stride, padding draw, dilation)` within `bounds`.
pub(super) fn axis_strategy(
    bounds: &ParamBounds,
) -> impl Strategy<Value = (usize, usize, usize, usize)> + Clone + use<> {
    let ParamBounds { kernel, stride, dilation, .. } = bounds.clone();
    (kernel, stride, 0..=usize::from(u8::MAX), dilation)
}

/// The parameters of drawn axes: each padding drawn as a fraction of half its kernel.
pub(super) fn params_of<const N: usize>(
    axes: [(usize, usize, usize, usize); N],
    ceil: bool,
) -> MaxPoolParams<N> {
    MaxPoolParams::new(axes.map(|a| a.0))
        .with_stride(axes.map(|a| a.1))
        .with_padding(axes.map(|(k, _, pad, _)| pad % (k / 2 + 1)))
        .with_dilation(axes.map(|a| a.3))
        .with_ceil_mode(ceil)
}

/// `params` with `axis` pooled by a `kernel`-wide window padded by half of it (stride, dilation
/// and ceil mode kept).
fn refit<const N: usize>(params: MaxPoolParams<N>, axis: usize, kernel: usize) -> MaxPoolParams<N> {
    let (mut kernels, mut padding) = (params.kernel(), params.padding());
    kernels[axis] = kernel;
    padding[axis] = kernel / 2;
    MaxPoolParams::new(kernels)
        .with_stride(params.stride())
        .with_padding(padding)
        .with_dilation(params.dilation())
        .with_ceil_mode(params.ceil_mode())
}

/// The drawn `params` fitted to the drawn input, with `forward`'s result for them: the first of
/// `params` and `params` refitted along one axis, then two, ... (in height, in width, in both, for
/// a plane), to the `smallest` kernel the bounds allow (padded by half of it), that `forward`
/// accepts.
///
/// Fitting instead of rejecting keeps shrinking going. proptest shrinks a kernel by binary
/// search from its drawn size towards the smallest; a rejected step counts as a step that stopped
/// failing, so a kernel of 4 on a 1-wide input (allowed by a padding of 2) whose tries at 2 and 3
/// left no window would stay at 4, when 1 fails just as well. Fitted, those tries become the
/// smallest kernel, and the search goes on down to it.
pub(super) fn fitted<R, const N: usize>(
    params: MaxPoolParams<N>,
    smallest: usize,
    forward: impl Fn(&MaxPoolParams<N>) -> Option<R>,
) -> Option<(MaxPoolParams<N>, R)> {
    // Every set of axes to refit, fewest first (stable: in the order of their bits).
    let mut sets: Vec<u32> = (0..1u32 << N).collect();
    sets.sort_by_key(|s| s.count_ones());
    sets.into_iter().find_map(|set| {
        let p = (0..N).filter(|a| set & (1 << a) != 0).fold(params, |p, a| refit(p, a, smallest));
        Some((p, forward(&p)?))
    })
}

/// Max-pooling cases with flat indices (any dilation in `params.dilation`), of rank `D`.
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in max_pool_cases::<f64, i32, Ix4>(Shapes::default(), ParamBounds::default(), Values::Distinct))| {
///     case.check_backward(|g| poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap())?;
/// });
/// ```
pub fn max_pool_cases<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    shapes: Shapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = MaxPoolCase<T, I, D>> {
    let smallest = *bounds.kernel.start();
    (params_strategy(&bounds), sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_filter_map(
        "even the smallest kernel leaves no window on this input",
        move |(params, sizes, seed, grad_seed)| {
            let [_, _, h, w] = sizes.nchw;
            let input = sizes.array::<T, D>([h, w], |p| value_at(values, seed, &p));
            let (params, (output, indices)) =
                fitted(params, smallest, |p| reference::max_pool2d_with_indices(&input, p).ok())?;
            let pooled = params.output_size([h, w]).ok()?;
            let grad_output = sizes.array::<T, D>(pooled, |p| grad_at(grad_seed, &p));
            Some(MaxPoolCase { input, params, output, indices: to_index(&indices), grad_output })
        },
    )
}

/// A generated max-pooling case with an Ascend mask in layout `L`; see [`mask_cases`].
pub struct MaskCase<T, L: MaskLayout, D: Dimension = IxDyn> {
    /// The input, `[N, C, H, W]` (or `[C, H, W]`, as `D` says).
    pub input: Array<T, D>,
    /// Valid parameters (dilation 1).
    pub params: MaxPool2dParams,
    /// Reference pooled values.
    pub output: Array<T, D>,
    /// Reference mask.
    pub mask: Mask<L, D>,
    /// A gradient of the output (small non-zero integers).
    pub grad_output: Array<T, D>,
    layout: PhantomData<fn() -> L>,
}

impl<T: fmt::Debug, L: MaskLayout, D: Dimension> fmt::Debug for MaskCase<T, L, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaskCase")
            .field("input", &self.input)
            .field("params", &self.params)
            .field("layout", &L::NAME)
            .field("grad_output", &self.grad_output)
            .finish_non_exhaustive()
    }
}

impl<T: Clone, L: MaskLayout, D: Dimension> Clone for MaskCase<T, L, D> {
    fn clone(&self) -> Self {
        MaskCase {
            input: self.input.clone(),
            params: self.params,
            output: self.output.clone(),
            mask: self.mask.clone(),
            grad_output: self.grad_output.clone(),
            layout: PhantomData,
        }
    }
}

/// Max-pooling cases with an Ascend mask (dilation 1; fitted to the input as [`ParamBounds`]
/// says; `I32Argmax` cases whose mask could not hold the values, 1x1 kernels on large outputs,
/// are not generated), of rank `D`.
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{mask_cases, ParamBounds, Shapes, Values};
/// use poolgrad::Bitmask;
/// use proptest::prelude::*;
/// proptest!(|(case in mask_cases::<f32, Bitmask, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
///     case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
/// });
/// ```
pub fn mask_cases<T: PoolFloat, L: MaskLayout, D: PoolDim>(
    shapes: Shapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = MaskCase<T, L, D>> {
    let bounds = ParamBounds { dilation: 1..=1, ..bounds };
    let smallest = *bounds.kernel.start();
    (params_strategy(&bounds), sizes_strategy::<D>(&shapes), any::<u64>(), any::<u64>()).prop_filter_map(
        "even the smallest kernel leaves no window, or the mask cannot hold the values",
        move |(params, sizes, seed, grad_seed)| {
            let [_, _, h, w] = sizes.nchw;
            let input = sizes.array::<T, D>([h, w], |p| value_at(values, seed, &p));
            let (params, (output, mask)) =
                fitted(params, smallest, |p| reference::max_pool2d_with_mask(&input, p, L::default()).ok())?;
            let pooled = params.output_size([h, w]).ok()?;
            let grad_output = sizes.array::<T, D>(pooled, |p| grad_at(grad_seed, &p));
            Some(MaskCase { input, params, output, mask, grad_output, layout: PhantomData })
        },
    )
}

/// A second gradient for linearity checks: a pattern independent of the first.
pub(super) fn other_grad<T: PoolFloat, D: Dimension>(like: &Array<T, D>) -> Array<T, D> {
    let mut k = 0i64;
    like.mapv(|_| {
        k += 1;
        T::round_from_f64(((k * 7) % 11 - 5) as f64)
    })
}

/// Checks a backward against a reference gradient, the invariants and linearity; `spatial` is
/// the number of spatial axes (1 for lines, 2 for planes, 3 for volumes).
pub(super) fn check_backward_common<T: PoolFloat, D: Dimension>(
    grad_output: &Array<T, D>,
    reference: &Array<T, D>,
    selected: &[(usize, usize)],
    spatial: usize,
    backward: impl Fn(&Array<T, D>) -> Array<T, D>,
) -> Result<(), Mismatch> {
    let mine = backward(grad_output);
    compare("backward vs reference", reference.view(), mine.view(), Tolerance::for_dtype(T::DTYPE))?;
    invariants(grad_output, selected, &mine, spatial)?;
    check_linearity(&backward, grad_output, &other_grad(grad_output))
}

/// [`check_gradient_invariants`] on the positions of `spatial` axes seen as a plane: a line as a
/// plane one row high, a volume as a plane of `D * H` rows (a flat index in a line or a volume is
/// one in that plane); a mismatch's position is given back in the arrays' own axes.
fn invariants<T: PoolFloat, D: Dimension>(
    grad_output: &Array<T, D>,
    selected: &[(usize, usize)],
    grad_input: &Array<T, D>,
    spatial: usize,
) -> Result<(), Mismatch> {
    if spatial == 2 {
        return check_gradient_invariants(grad_output.view(), selected, grad_input.view());
    }
    let as_plane = |a: &Array<T, D>| {
        let s = a.shape();
        let r = s.len();
        let mut dims = s[..r - spatial].to_vec();
        match spatial {
            1 => dims.extend([1, s[r - 1]]),
            _ => dims.extend([s[r - 3] * s[r - 2], s[r - 1]]),
        }
        let flat: Vec<T> = a.iter().copied().collect();
        ArrayD::from_shape_vec(IxDyn(&dims), flat).expect("the same element count")
    };
    let h = grad_input.shape()[grad_input.ndim() - 2];
    check_gradient_invariants(as_plane(grad_output).view(), selected, as_plane(grad_input).view()).map_err(
        |mut m| {
            if let Some(r) = m.position.len().checked_sub(2) {
                let rows = m.position[r];
                match spatial {
                    1 => drop(m.position.remove(r)),
                    _ => drop(m.position.splice(r..=r, [rows / h, rows % h])),
                }
            }
            m
        },
    )
}

pub(super) fn index_pairs<I: ArgmaxIndex, D: Dimension>(
    indices: &Array<I, D>,
    plane: usize,
) -> Vec<(usize, usize)> {
    indices.iter().enumerate().filter_map(|(e, &i)| i.flat_in(plane).map(|f| (e, f))).collect()
}

fn plane_of<T, D: Dimension>(input: &Array<T, D>) -> usize {
    let s = input.shape();
    s[s.len() - 2] * s[s.len() - 1]
}

impl<T: PoolFloat, I: ArgmaxIndex, D: PoolDim> AdaptiveCase<T, I, D> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{adaptive_cases, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<half::bf16, i64, Ix4>(Shapes::default(), Values::Ties))| {
    ///     let p = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, indices: &Array<I, D>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices("forward indices vs reference", self.indices.view(), indices.view())
    }

    /// Runs `backward` (a function of `grad_output`; the case's input and indices are at hand)
    /// and checks it against the reference, the gradient invariants and linearity.
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{adaptive_cases, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<f64, i32, Ix4>(Shapes::default(), Values::Distinct))| {
    ///     case.check_backward(|g| poolgrad::adaptive_max_pool2d_backward(g, &case.input, &case.indices).unwrap())?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        let reference =
            reference::adaptive_max_pool2d_backward(&self.grad_output, &self.input, &self.indices)
                .map_err(reference_failed)?;
        let selected = index_pairs(&self.indices, plane_of(&self.input));
        check_backward_common(&self.grad_output, &reference, &selected, 2, backward)
    }

    /// The pooling, for [`finite_difference_check`](super::finite_difference_check).
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{adaptive_cases, reference::Pooling, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<f32, i64, Ix4>(Shapes::default(), Values::Ties))| {
    ///     prop_assert_eq!(case.pooling(), Pooling::Adaptive(case.output_size));
    /// });
    /// ```
    pub fn pooling(&self) -> Pooling {
        Pooling::Adaptive(self.output_size)
    }
}

impl<T: PoolFloat, I: ArgmaxIndex, D: PoolDim> MaxPoolCase<T, I, D> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in max_pool_cases::<f32, i32, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     let p = poolgrad::max_pool2d_with_indices_i32(&case.input, &case.params).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, indices: &Array<I, D>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices("forward indices vs reference", self.indices.view(), indices.view())
    }

    /// Runs `backward` on the case's gradient and checks it against the reference, the gradient
    /// invariants and linearity (see [`max_pool_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        let reference = reference::max_pool2d_with_indices_backward(
            &self.grad_output,
            &self.input,
            &self.indices,
            &self.params,
        )
        .map_err(reference_failed)?;
        let selected = index_pairs(&self.indices, plane_of(&self.input));
        check_backward_common(&self.grad_output, &reference, &selected, 2, backward)
    }

    /// The pooling, for [`finite_difference_check`](super::finite_difference_check).
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{max_pool_cases, reference::Pooling, ParamBounds, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in max_pool_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     prop_assert_eq!(case.pooling(), Pooling::Max(case.params));
    /// });
    /// ```
    pub fn pooling(&self) -> Pooling {
        Pooling::Max(self.params)
    }
}

impl<T: PoolFloat, L: MaskLayout, D: PoolDim> MaskCase<T, L, D> {
    /// Checks a forward's values and mask bytes against the reference, exactly.
    ///
    /// ```
    /// use ndarray::Ix4;
    /// use poolgrad::testing::{mask_cases, ParamBounds, Shapes, Values};
    /// use poolgrad::I32Argmax;
    /// use proptest::prelude::*;
    /// proptest!(|(case in mask_cases::<f32, I32Argmax, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     let p = poolgrad::max_pool2d_with_mask(&case.input, &case.params, I32Argmax).unwrap();
    ///     case.check_forward(&p.output, &p.mask)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>, mask: &Mask<L, D>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices(
            "forward mask bytes vs reference",
            self.mask.as_array().view(),
            mask.as_array().view(),
        )
    }

    /// Runs `backward` on the case's gradient and checks it against the reference, the gradient
    /// invariants and linearity (see [`mask_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        let reference = reference::max_pool2d_with_mask_backward(&self.grad_output, &self.input, &self.mask)
            .map_err(reference_failed)?;
        let selected = self.mask.selected().map_err(reference_failed)?;
        check_backward_common(&self.grad_output, &reference, &selected, 2, backward)
    }
}

pub(super) fn reference_failed(e: crate::Error) -> Mismatch {
    Mismatch {
        what: "reference".into(),
        position: Vec::new(),
        expected: f64::NAN,
        actual: f64::NAN,
        detail: format!("the reference rejected the case: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use ndarray::Array4;

    use super::*;

    /// `fitted` with the reference forward on an `[h, w]` plane of zeros: the parameters it keeps.
    fn fit_with(params: MaxPool2dParams, smallest: usize, [h, w]: [usize; 2]) -> Option<MaxPool2dParams> {
        let input = Array4::<f32>::zeros((1, 1, h, w));
        Some(fitted(params, smallest, |p| reference::max_pool2d_with_indices(&input, p).ok())?.0)
    }

    fn fit_on(params: MaxPool2dParams, hw: [usize; 2]) -> MaxPool2dParams {
        fit_with(params, 1, hw).expect("a 1x1 kernel fits")
    }

    /// Worked by hand with the output size `(n + 2p - d(k-1) - 1) / s + 1` (at least 1, and a
    /// padding of at most half the kernel).
    #[test]
    fn a_window_too_large_for_the_input_becomes_one_wide_on_its_axis_only() {
        let p = |k, pad| MaxPool2dParams::new(k).with_stride([1, 1]).with_padding(pad);
        // [1, 4] without padding on a 1x1 plane: (1 - 3 - 1) / 1 + 1 < 1 in width.
        assert_eq!(fit_on(p([1, 4], [0, 0]), [1, 1]), p([1, 1], [0, 0]));
        // A padding of 2 lets the 4-wide kernel fit: (1 + 4 - 3 - 1) / 1 + 1 = 2 outputs.
        assert_eq!(fit_on(p([4, 1], [2, 0]), [1, 1]), p([4, 1], [2, 0]));
        // [2, 4] on [2, 1]: the height fits (one output), the width does not.
        assert_eq!(fit_on(p([2, 4], [1, 0]), [2, 1]), p([2, 1], [1, 0]));
        // [3, 3] on [1, 5]: the width fits (three outputs), the height does not.
        assert_eq!(fit_on(p([3, 3], [0, 0]), [1, 5]), p([1, 3], [0, 0]));
        // Dilation 2 spans 5 inputs with a 3-wide kernel: (4 - 4 - 1) / 2 rounds down to -1, no
        // window on 4 inputs; stride and dilation are kept.
        let dilated = MaxPool2dParams::new([3, 3]).with_stride([2, 3]).with_dilation([2, 2]);
        let one_by_one = MaxPool2dParams::new([1, 1]).with_stride([2, 3]).with_dilation([2, 2]);
        assert_eq!(fit_on(dilated, [4, 4]), one_by_one);
        // In ceil mode the quotient rounds up to 0: one window (inputs 0 and 2), kept.
        assert_eq!(fit_on(dilated.with_ceil_mode(true), [4, 4]), dilated.with_ceil_mode(true));
        assert_eq!(fit_on(dilated, [5, 5]), dilated);
    }

    /// Bounds whose smallest kernel is 3: the refit kernel is 3, padded by 1, and where even that
    /// leaves no window, no case.
    #[test]
    fn the_refit_kernel_is_the_smallest_of_the_bounds() {
        let p = |k, pad| MaxPool2dParams::new(k).with_stride([1, 1]).with_padding(pad);
        // [4, 4] unpadded on 1x1: no window; [3, 3] padded by 1: (1 + 2 - 2 - 1) / 1 + 1 = 1.
        assert_eq!(fit_with(p([4, 4], [0, 0]), 3, [1, 1]), Some(p([3, 3], [1, 1])));
        // On [1, 4] only the height is refit: 4 unpadded fits 4 columns once.
        assert_eq!(fit_with(p([4, 4], [0, 0]), 3, [1, 4]), Some(p([3, 4], [1, 0])));
        // Dilation 2: a 3-wide window spans 5, more than 1 + 2 * 1.
        assert_eq!(fit_with(p([4, 4], [0, 0]).with_dilation([2, 2]), 3, [1, 1]), None);
    }
}
