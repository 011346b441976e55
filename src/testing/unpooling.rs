//! proptest strategies for max unpooling and the double backwards: a max pooling case turned
//! around, its pooled values and indices unpooled back to the pooling's input size. Where the
//! pooling's windows overlap, indices repeat (with equal values), which is where an unpooling's
//! rule for repeats shows.

use ndarray::{Array, ArrayD, Dimension, IxDyn};
use proptest::prelude::*;

use super::check::{Mismatch, Tolerance, check_linearity, compare};
use super::lines::{LineCase, LineShapes, max_pool1d_cases};
use super::reference;
use super::strategy::{
    MaxPoolCase, ParamBounds, Shapes, Values, grad_at, max_pool_cases, other_grad, reference_failed,
};
use super::volumes::{MaxPool3dCase, VolumeShapes, max_pool3d_cases};
use crate::element::PoolFloat;
use crate::index::ArgmaxIndex;
use crate::tensor::{LineDim, PoolDim, VolumeDim};

/// A generated max-unpooling case: the values and indices of a max pooling of an input of
/// `output_size`, its reference unpooling, and a gradient of that; see [`unpool1d_cases`],
/// [`unpool2d_cases`] and [`unpool3d_cases`]. Where the pooling's windows overlap, indices repeat
/// (with equal values).
#[derive(Debug, Clone)]
pub struct UnpoolCase<T, I, D: Dimension = IxDyn> {
    /// The pooled values, `[N, C, ..]` (or `[C, ..]`), 1, 2 or 3 spatial axes.
    pub input: Array<T, D>,
    /// Their flat indices in each plane (volume) of `output_size`.
    pub indices: Array<I, D>,
    /// The unpooled spatial size: the pooling's input size.
    pub output_size: Vec<usize>,
    /// The reference unpooling.
    pub output: Array<T, D>,
    /// A gradient of the unpooled output (small non-zero integers); also a second-order
    /// gradient for the double backward, which has the same shape.
    pub grad_output: Array<T, D>,
}

/// The unpooling case of a pooling's input, values and indices: `grad_seed` hashes the gradient.
fn unpool_case<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    pooling_input: &Array<T, D>,
    input: Array<T, D>,
    indices: Array<I, D>,
    spatial: usize,
    grad_seed: u64,
) -> UnpoolCase<T, I, D> {
    let shape = pooling_input.shape();
    let output_size = shape[shape.len() - spatial..].to_vec();
    let output = match spatial {
        1 => reference::max_unpool1d(&input, &indices, output_size[0]),
        2 => reference::max_unpool2d(&input, &indices, [output_size[0], output_size[1]]),
        _ => reference::max_unpool3d(&input, &indices, [output_size[0], output_size[1], output_size[2]]),
    }
    .expect("the pooling's own indices");
    let grad = ArrayD::from_shape_fn(IxDyn(shape), |p| T::round_from_f64(grad_at(grad_seed, p.slice())));
    let grad_output = grad.into_dimensionality().expect("the pooling input's rank");
    UnpoolCase { input, indices, output_size, output, grad_output }
}

/// 1-D max-unpooling cases: each of a [`max_pool1d_cases`] pooling, of rank `D`.
///
/// ```
/// use ndarray::Ix3;
/// use poolgrad::testing::{unpool1d_cases, LineShapes, ParamBounds, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in unpool1d_cases::<f32, i64, Ix3>(LineShapes::default(), ParamBounds::default(), Values::Ties))| {
///     case.check_forward(&poolgrad::max_unpool1d(&case.input, &case.indices, case.output_size[0]).unwrap())?;
///     case.check_backward(|g| poolgrad::max_unpool1d_backward(g, &case.indices).unwrap())?;
///     case.check_double_backward(|g| poolgrad::max_pool1d_double_backward(g, &case.indices).unwrap())?;
/// });
/// ```
pub fn unpool1d_cases<T: PoolFloat, I: ArgmaxIndex, D: LineDim>(
    shapes: LineShapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = UnpoolCase<T, I, D>> {
    (max_pool1d_cases::<T, I, D>(shapes, bounds, values), any::<u64>()).prop_map(
        |(case, seed): (LineCase<T, I, D>, u64)| unpool_case(&case.input, case.output, case.indices, 1, seed),
    )
}

/// 2-D max-unpooling cases: each of a [`max_pool_cases`] pooling, of rank `D`.
///
/// ```
/// use ndarray::Ix4;
/// use poolgrad::testing::{unpool2d_cases, ParamBounds, Shapes, Values};
/// use proptest::prelude::*;
/// proptest!(|(case in unpool2d_cases::<f32, i64, Ix4>(Shapes::default(), ParamBounds::default(), Values::Ties))| {
///     let size = [case.output_size[0], case.output_size[1]];
///     case.check_forward(&poolgrad::max_unpool2d(&case.input, &case.indices, size).unwrap())?;
///     case.check_backward(|g| poolgrad::max_unpool2d_backward(g, &case.indices).unwrap())?;
///     case.check_double_backward(|g| poolgrad::max_pool2d_double_backward(g, &case.indices).unwrap())?;
/// });
/// ```
pub fn unpool2d_cases<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    shapes: Shapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = UnpoolCase<T, I, D>> {
    (max_pool_cases::<T, I, D>(shapes, bounds, values), any::<u64>()).prop_map(
        |(case, seed): (MaxPoolCase<T, I, D>, u64)| {
            unpool_case(&case.input, case.output, case.indices, 2, seed)
        },
    )
}

/// 3-D max-unpooling cases: each of a [`max_pool3d_cases`] pooling, of rank `D`.
///
/// ```
/// use ndarray::Ix5;
/// use poolgrad::testing::{unpool3d_cases, ParamBounds, Values, VolumeShapes};
/// use proptest::prelude::*;
/// proptest!(|(case in unpool3d_cases::<f64, i32, Ix5>(VolumeShapes::default(), ParamBounds::default(), Values::Distinct))| {
///     let size = [case.output_size[0], case.output_size[1], case.output_size[2]];
///     case.check_forward(&poolgrad::max_unpool3d(&case.input, &case.indices, size).unwrap())?;
///     case.check_backward(|g| poolgrad::max_unpool3d_backward(g, &case.indices).unwrap())?;
/// });
/// ```
pub fn unpool3d_cases<T: PoolFloat, I: ArgmaxIndex, D: VolumeDim>(
    shapes: VolumeShapes,
    bounds: ParamBounds,
    values: Values,
) -> impl Strategy<Value = UnpoolCase<T, I, D>> {
    (max_pool3d_cases::<T, I, D>(shapes, bounds, values), any::<u64>()).prop_map(
        |(case, seed): (MaxPool3dCase<T, I, D>, u64)| {
            unpool_case(&case.input, case.output, case.indices, 3, seed)
        },
    )
}

impl<T: PoolFloat, I: ArgmaxIndex, D: Dimension> UnpoolCase<T, I, D> {
    /// The reference of a gather of `full` at the indices: the unpooling's backward
    /// (`last_only`) or the double backward.
    fn gathered(&self, full: &Array<T, D>, last_only: bool) -> crate::Result<Array<T, D>> {
        match (self.output_size.len(), last_only) {
            (1, true) => reference::max_unpool1d_backward(full, &self.indices),
            (1, false) => reference::max_pool1d_double_backward(full, &self.indices),
            (2, true) => reference::max_unpool2d_backward(full, &self.indices),
            (2, false) => reference::max_pool2d_double_backward(full, &self.indices),
            (_, true) => reference::max_unpool3d_backward(full, &self.indices),
            (_, false) => reference::max_pool3d_double_backward(full, &self.indices),
        }
    }

    /// A gather `f` checked against the reference and for linearity.
    fn check_gather(&self, last_only: bool, f: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        let reference = self.gathered(&self.grad_output, last_only).map_err(reference_failed)?;
        let what = if last_only { "unpooling backward vs reference" } else { "double backward vs reference" };
        compare(what, reference.view(), f(&self.grad_output).view(), Tolerance::exact())?;
        check_linearity(&f, &self.grad_output, &other_grad(&self.grad_output))
    }

    /// Checks an unpooling's result against the reference, exactly (see [`unpool2d_cases`] for
    /// an example).
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_forward(&self, output: &Array<T, D>) -> Result<(), Mismatch> {
        compare("unpooling vs reference", self.output.view(), output.view(), Tolerance::exact())
    }

    /// Runs an unpooling's `backward` on the case's gradient: the reference (the gradient read
    /// at each index, for the last of repeated indices only), exactly, and linearity.
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_backward(&self, backward: impl Fn(&Array<T, D>) -> Array<T, D>) -> Result<(), Mismatch> {
        self.check_gather(true, backward)
    }

    /// Runs a max pooling's `double_backward` on the case's gradient (taken as the second-order
    /// gradient of the pooling's input): the reference (read at every index), exactly, and
    /// linearity.
    ///
    /// # Errors
    /// The first [`Mismatch`].
    pub fn check_double_backward(
        &self,
        double_backward: impl Fn(&Array<T, D>) -> Array<T, D>,
    ) -> Result<(), Mismatch> {
        self.check_gather(false, double_backward)
    }
}
