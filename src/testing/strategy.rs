//! proptest strategies that generate valid cases for each operation, with their forward results
//! (from the [`reference`](mod@super::reference)) so a backward can be tested directly.

use core::fmt;
use core::marker::PhantomData;
use core::ops::RangeInclusive;

use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

use super::check::{
    Mismatch, Tolerance, check_gradient_invariants, check_linearity, compare, compare_indices,
};
use super::reference::{self, Pooling};
use crate::element::PoolFloat;
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout};
use crate::params::MaxPool2dParams;

/// Bounds of the generated shapes.
///
/// ```
/// let small = poolgrad::testing::Shapes { channels: 1..=20, ..Default::default() };
/// assert_eq!(small.height, 1..=8);
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
    /// Whether 3-D `[C, H, W]` cases are generated too (half of them).
    pub allow_3d: bool,
}

impl Default for Shapes {
    fn default() -> Self {
        Shapes { batch: 1..=2, channels: 1..=4, height: 1..=8, width: 1..=8, allow_3d: true }
    }
}

/// The input values of generated cases.
///
/// ```
/// use poolgrad::testing::{adaptive_cases, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive_cases::<f32, i32>(Shapes::default(), Values::WithNan))| {
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

/// Bounds of generated max-pooling parameters. Padding is drawn in `0..=kernel/2`; parameters
/// that leave no window, or a dilated window with no input, are not generated.
///
/// ```
/// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
/// use proptest::prelude::*;
/// let stems = ParamBounds { kernel: 3..=3, stride: 2..=2, dilation: 1..=1, ceil_mode: false };
/// proptest!(|(case in max_pool_cases::<f32, i64>(Shapes::default(), stems.clone(), Values::Distinct))| {
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

fn value_strategy(values: Values) -> BoxedStrategy<f64> {
    match values {
        Values::Ties => (-2i32..2).prop_map(f64::from).boxed(),
        Values::Distinct => (-500i32..500).prop_map(|v| f64::from(v) / 4.0).boxed(),
        Values::WithNan => prop_oneof![9 => (-2i32..2).prop_map(f64::from), 1 => Just(f64::NAN)].boxed(),
    }
}

/// Input dims (3-D or 4-D) and data, as f64.
fn input_strategy(shapes: &Shapes, values: Values) -> impl Strategy<Value = ArrayD<f64>> + use<> {
    let Shapes { batch, channels, height, width, allow_3d } = shapes.clone();
    let three_d = if allow_3d { any::<bool>().boxed() } else { Just(false).boxed() };
    (batch, channels, height, width, three_d).prop_flat_map(move |(n, c, h, w, three_d)| {
        let dims: Vec<usize> = if three_d { vec![c, h, w] } else { vec![n, c, h, w] };
        let len: usize = dims.iter().product();
        proptest::collection::vec(value_strategy(values), len)
            .prop_map(move |v| ArrayD::from_shape_vec(IxDyn(&dims), v).expect("length matches"))
    })
}

/// Gradients: small integers in `-8..8`, so that sums are exact in f32 and f64.
fn grad_strategy(dims: Vec<usize>) -> impl Strategy<Value = ArrayD<f64>> {
    let len: usize = dims.iter().product();
    proptest::collection::vec((-8i32..8).prop_map(f64::from), len)
        .prop_map(move |v| ArrayD::from_shape_vec(IxDyn(&dims), v).expect("length matches"))
}

fn to_t<T: PoolFloat>(a: &ArrayD<f64>) -> ArrayD<T> {
    a.mapv(T::round_from_f64)
}

fn to_index<I: ArgmaxIndex>(a: &ArrayD<i64>) -> ArrayD<I> {
    a.mapv(|v| I::try_from_flat(v as usize).unwrap_or_default())
}

fn pooled_dims(input: &[usize], out: [usize; 2]) -> Vec<usize> {
    let mut d = input.to_vec();
    let r = d.len();
    d[r - 2] = out[0];
    d[r - 1] = out[1];
    d
}

/// A generated adaptive max-pooling case with its reference forward; see [`adaptive_cases`].
#[derive(Debug, Clone)]
pub struct AdaptiveCase<T, I> {
    /// The input, `[C, H, W]` or `[N, C, H, W]`.
    pub input: ArrayD<T>,
    /// `[Ho, Wo]`, each in `1..=size + 2` (so `Ho > H` occurs).
    pub output_size: [usize; 2],
    /// Reference pooled values.
    pub output: ArrayD<T>,
    /// Reference flat arg-max indices.
    pub indices: ArrayD<I>,
    /// A gradient of the output (small integers).
    pub grad_output: ArrayD<T>,
}

/// Adaptive max-pooling cases.
///
/// ```
/// use poolgrad::testing::{adaptive_cases, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in adaptive_cases::<f32, i64>(Shapes::default(), Values::Ties))| {
///     let mine = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
///     case.check_forward(&mine.output, &mine.indices)?;
/// });
/// ```
pub fn adaptive_cases<T: PoolFloat, I: ArgmaxIndex>(
    shapes: Shapes,
    values: Values,
) -> impl Strategy<Value = AdaptiveCase<T, I>> {
    let (hmax, wmax) = (*shapes.height.end() + 2, *shapes.width.end() + 2);
    (input_strategy(&shapes, values), 1..=hmax, 1..=wmax)
        .prop_flat_map(|(x, ho, wo)| {
            let dims = pooled_dims(x.shape(), [ho, wo]);
            (Just(x), Just([ho, wo]), grad_strategy(dims))
        })
        .prop_map(|(x, output_size, g)| {
            let input = to_t::<T>(&x);
            let (output, indices) = reference::adaptive_max_pool2d(&input, output_size).expect("valid case");
            AdaptiveCase { input, output_size, output, indices: to_index(&indices), grad_output: to_t(&g) }
        })
}

/// A generated max-pooling case (flat indices) with its reference forward; see
/// [`max_pool_cases`].
#[derive(Debug, Clone)]
pub struct MaxPoolCase<T, I> {
    /// The input, `[C, H, W]` or `[N, C, H, W]`.
    pub input: ArrayD<T>,
    /// Valid parameters for this input.
    pub params: MaxPool2dParams,
    /// Reference pooled values.
    pub output: ArrayD<T>,
    /// Reference flat arg-max indices.
    pub indices: ArrayD<I>,
    /// A gradient of the output (small integers).
    pub grad_output: ArrayD<T>,
}

fn params_strategy(bounds: &ParamBounds) -> impl Strategy<Value = MaxPool2dParams> + use<> {
    let ParamBounds { kernel, stride, dilation, ceil_mode } = bounds.clone();
    let axis = (kernel, stride, dilation).prop_flat_map(|(k, s, d)| (Just(k), Just(s), 0..=k / 2, Just(d)));
    let ceil = if ceil_mode { any::<bool>().boxed() } else { Just(false).boxed() };
    (axis.clone(), axis, ceil).prop_map(|((kh, sh, ph, dh), (kw, sw, pw, dw), ceil)| {
        MaxPool2dParams::new([kh, kw])
            .with_stride([sh, sw])
            .with_padding([ph, pw])
            .with_dilation([dh, dw])
            .with_ceil_mode(ceil)
    })
}

/// Max-pooling cases with flat indices (any dilation in `params.dilation`).
///
/// ```
/// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in max_pool_cases::<f64, i32>(Shapes::default(), ParamBounds::default(), Values::Distinct))| {
///     let gx = poolgrad::max_pool2d_with_indices_backward(&case.grad_output, &case.input, &case.indices, &case.params).unwrap();
///     case.check_backward(|g| poolgrad::max_pool2d_with_indices_backward(g, &case.input, &case.indices, &case.params).unwrap())?;
///     # let _ = gx;
/// });
/// ```
pub fn max_pool_cases<T: PoolFloat, I: ArgmaxIndex>(
    shapes: Shapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = MaxPoolCase<T, I>> {
    (input_strategy(&shapes, values), params_strategy(&bounds))
        .prop_filter_map("parameters leave no window on this input", |(x, params)| {
            let input = to_t::<T>(&x);
            let (output, indices) = reference::max_pool2d_with_indices(&input, &params).ok()?;
            Some((input, params, output, to_index::<I>(&indices)))
        })
        .prop_flat_map(|(input, params, output, indices)| {
            let dims = output.shape().to_vec();
            (Just((input, params, output, indices)), grad_strategy(dims))
        })
        .prop_map(|((input, params, output, indices), g)| MaxPoolCase {
            input,
            params,
            output,
            indices,
            grad_output: to_t(&g),
        })
}

/// A generated max-pooling case with an Ascend mask in layout `L`; see [`mask_cases`].
pub struct MaskCase<T, L: MaskLayout> {
    /// The input, `[C, H, W]` or `[N, C, H, W]`.
    pub input: ArrayD<T>,
    /// Valid parameters (dilation 1).
    pub params: MaxPool2dParams,
    /// Reference pooled values.
    pub output: ArrayD<T>,
    /// Reference mask.
    pub mask: Mask<L, IxDyn>,
    /// A gradient of the output (small integers).
    pub grad_output: ArrayD<T>,
    layout: PhantomData<fn() -> L>,
}

impl<T: fmt::Debug, L: MaskLayout> fmt::Debug for MaskCase<T, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaskCase")
            .field("input", &self.input)
            .field("params", &self.params)
            .field("layout", &L::NAME)
            .field("grad_output", &self.grad_output)
            .finish_non_exhaustive()
    }
}

impl<T: Clone, L: MaskLayout> Clone for MaskCase<T, L> {
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

/// Max-pooling cases with an Ascend mask (dilation 1; `I32Argmax` cases whose mask could not
/// hold the values, 1x1 kernels on large outputs, are not generated).
///
/// ```
/// use poolgrad::testing::{mask_cases, ParamBounds, Shapes, Values};
/// use poolgrad::Bitmask;
/// use proptest::prelude::*;
/// proptest!(|(case in mask_cases::<f32, Bitmask>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
///     case.check_backward(|g| poolgrad::max_pool2d_with_mask_backward(g, &case.input, &case.mask).unwrap())?;
/// });
/// ```
pub fn mask_cases<T: PoolFloat, L: MaskLayout>(
    shapes: Shapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = MaskCase<T, L>> {
    let bounds = ParamBounds { dilation: 1..=1, ..bounds };
    (input_strategy(&shapes, values), params_strategy(&bounds))
        .prop_filter_map("parameters leave no window, or the mask cannot hold the values", |(x, params)| {
            let input = to_t::<T>(&x);
            let (output, mask) = reference::max_pool2d_with_mask(&input, &params, L::default()).ok()?;
            Some((input, params, output, mask))
        })
        .prop_flat_map(|(input, params, output, mask)| {
            let dims = output.shape().to_vec();
            (Just((input, params, output, mask)), grad_strategy(dims))
        })
        .prop_map(|((input, params, output, mask), g)| MaskCase {
            input,
            params,
            output,
            mask,
            grad_output: to_t(&g),
            layout: PhantomData,
        })
}

/// A second gradient for linearity checks: a pattern independent of the first.
fn other_grad<T: PoolFloat>(like: &ArrayD<T>) -> ArrayD<T> {
    let mut k = 0i64;
    like.mapv(|_| {
        k += 1;
        T::round_from_f64(((k * 7) % 11 - 5) as f64)
    })
}

/// Checks a backward against a reference gradient, the invariants and linearity.
fn check_backward_common<T: PoolFloat>(
    grad_output: &ArrayD<T>,
    reference: &ArrayD<T>,
    selected: &[(usize, usize)],
    backward: impl Fn(&ArrayD<T>) -> ArrayD<T>,
) -> Result<(), Mismatch> {
    let mine = backward(grad_output);
    compare("backward vs reference", reference.view(), mine.view(), Tolerance::for_dtype(T::DTYPE))?;
    check_gradient_invariants(grad_output.view(), selected, mine.view())?;
    check_linearity(&backward, grad_output, &other_grad(grad_output))
}

fn index_pairs<I: ArgmaxIndex>(indices: &ArrayD<I>, plane: usize) -> Vec<(usize, usize)> {
    indices.iter().enumerate().filter_map(|(e, &i)| i.flat_in(plane).map(|f| (e, f))).collect()
}

fn plane_of<T>(input: &ArrayD<T>) -> usize {
    let s = input.shape();
    s[s.len() - 2] * s[s.len() - 1]
}

impl<T: PoolFloat, I: ArgmaxIndex> AdaptiveCase<T, I> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use poolgrad::testing::{adaptive_cases, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<half::bf16, i64>(Shapes::default(), Values::Ties))| {
    ///     let p = poolgrad::adaptive_max_pool2d(&case.input, case.output_size).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &ArrayD<T>, indices: &ArrayD<I>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices("forward indices vs reference", self.indices.view(), indices.view())
    }

    /// Runs `backward` (a function of `grad_output`; the case's input and indices are at hand)
    /// and checks it against the reference, the gradient invariants and linearity.
    ///
    /// ```
    /// use poolgrad::testing::{adaptive_cases, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<f64, i32>(Shapes::default(), Values::Distinct))| {
    ///     case.check_backward(|g| poolgrad::adaptive_max_pool2d_backward(g, &case.input, &case.indices).unwrap())?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&ArrayD<T>) -> ArrayD<T>) -> Result<(), Mismatch> {
        let reference =
            reference::adaptive_max_pool2d_backward(&self.grad_output, &self.input, &self.indices)
                .map_err(reference_failed)?;
        let selected = index_pairs(&self.indices, plane_of(&self.input));
        check_backward_common(&self.grad_output, &reference, &selected, backward)
    }

    /// The pooling, for [`finite_difference_check`](super::finite_difference_check).
    ///
    /// ```
    /// use poolgrad::testing::{adaptive_cases, reference::Pooling, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in adaptive_cases::<f32, i64>(Shapes::default(), Values::Ties))| {
    ///     prop_assert_eq!(case.pooling(), Pooling::Adaptive(case.output_size));
    /// });
    /// ```
    pub fn pooling(&self) -> Pooling {
        Pooling::Adaptive(self.output_size)
    }
}

impl<T: PoolFloat, I: ArgmaxIndex> MaxPoolCase<T, I> {
    /// Checks a forward's values and indices against the reference, exactly.
    ///
    /// ```
    /// use poolgrad::testing::{max_pool_cases, ParamBounds, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in max_pool_cases::<f32, i32>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     let p = poolgrad::max_pool2d_with_indices_i32(&case.input, &case.params).unwrap();
    ///     case.check_forward(&p.output, &p.indices)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &ArrayD<T>, indices: &ArrayD<I>) -> Result<(), Mismatch> {
        compare("forward values vs reference", self.output.view(), output.view(), Tolerance::exact())?;
        compare_indices("forward indices vs reference", self.indices.view(), indices.view())
    }

    /// Runs `backward` on the case's gradient and checks it against the reference, the gradient
    /// invariants and linearity (see [`max_pool_cases`] for an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&ArrayD<T>) -> ArrayD<T>) -> Result<(), Mismatch> {
        let reference = reference::max_pool2d_with_indices_backward(
            &self.grad_output,
            &self.input,
            &self.indices,
            &self.params,
        )
        .map_err(reference_failed)?;
        let selected = index_pairs(&self.indices, plane_of(&self.input));
        check_backward_common(&self.grad_output, &reference, &selected, backward)
    }

    /// The pooling, for [`finite_difference_check`](super::finite_difference_check).
    ///
    /// ```
    /// use poolgrad::testing::{max_pool_cases, reference::Pooling, ParamBounds, Shapes, Values};
    /// use proptest::prelude::*;
    /// proptest!(|(case in max_pool_cases::<f32, i64>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     prop_assert_eq!(case.pooling(), Pooling::Max(case.params));
    /// });
    /// ```
    pub fn pooling(&self) -> Pooling {
        Pooling::Max(self.params)
    }
}

impl<T: PoolFloat, L: MaskLayout> MaskCase<T, L> {
    /// Checks a forward's values and mask bytes against the reference, exactly.
    ///
    /// ```
    /// use poolgrad::testing::{mask_cases, ParamBounds, Shapes, Values};
    /// use poolgrad::I32Argmax;
    /// use proptest::prelude::*;
    /// proptest!(|(case in mask_cases::<f32, I32Argmax>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
    ///     let p = poolgrad::max_pool2d_with_mask(&case.input, &case.params, I32Argmax).unwrap();
    ///     case.check_forward(&p.output, &p.mask)?;
    /// });
    /// ```
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &ArrayD<T>, mask: &Mask<L, IxDyn>) -> Result<(), Mismatch> {
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
    pub fn check_backward(&self, backward: impl Fn(&ArrayD<T>) -> ArrayD<T>) -> Result<(), Mismatch> {
        let reference = reference::max_pool2d_with_mask_backward(&self.grad_output, &self.input, &self.mask)
            .map_err(reference_failed)?;
        let selected = self.mask.selected().map_err(reference_failed)?;
        check_backward_common(&self.grad_output, &reference, &selected, backward)
    }
}

fn reference_failed(e: crate::Error) -> Mismatch {
    Mismatch {
        what: "reference".into(),
        position: Vec::new(),
        expected: f64::NAN,
        actual: f64::NAN,
        detail: format!("the reference rejected the case: {e}"),
    }
}
