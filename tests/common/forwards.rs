//! The public forwards for a generic index type `I` (the crate's forwards are `i64`, with `_i32`
//! twins): shared by the test binaries and the fuzz targets.
#![allow(dead_code)]

use ndarray::ArrayRef;
use poolgrad::device::Runs;
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2d, MaxPool2dWithIndices};
use poolgrad::{ArgmaxIndex, DType, MaxPool2dParams, PoolDim, PoolFloat, Pooled};

/// A public forward's result with its `i64` or `i32` indices as `I` (forward indices are valid
/// positions, so they convert exactly).
fn with_indices_as<T, I: ArgmaxIndex, J: ArgmaxIndex, D: ndarray::Dimension>(
    p: Pooled<T, J, D>,
) -> Pooled<T, I, D> {
    let indices =
        p.indices.mapv(|v| I::try_from_flat(usize::try_from(v.to_i64()).expect("a position")).expect("fits"));
    Pooled { output: p.output, indices }
}

/// The public forward for index type `I`: [`poolgrad::On::adaptive_max_pool2d`] for `i64`,
/// [`poolgrad::On::adaptive_max_pool2d_i32`] for `i32`.
pub fn adaptive_on<Dev, T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    device: &Dev,
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
) -> poolgrad::Result<Pooled<T, I, D>>
where
    Dev: for<'a> Runs<AdaptiveMaxPool2d<'a, T, i64>> + for<'a> Runs<AdaptiveMaxPool2d<'a, T, i32>>,
{
    let on = poolgrad::on(device);
    in_index_type(
        || on.adaptive_max_pool2d(input, output_size),
        || on.adaptive_max_pool2d_i32(input, output_size),
    )
}

/// [`adaptive_on`] on the default CPU device.
pub fn adaptive<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
) -> poolgrad::Result<Pooled<T, I, D>> {
    adaptive_on(&Cpu::default(), input, output_size)
}

/// The public max-pooling forward for index type `I` (as [`adaptive_on`]).
pub fn max_pool_on<Dev, T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    device: &Dev,
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
) -> poolgrad::Result<Pooled<T, I, D>>
where
    Dev: for<'a> Runs<MaxPool2dWithIndices<'a, T, i64>> + for<'a> Runs<MaxPool2dWithIndices<'a, T, i32>>,
{
    let on = poolgrad::on(device);
    in_index_type(
        || on.max_pool2d_with_indices(input, params),
        || on.max_pool2d_with_indices_i32(input, params),
    )
}

/// [`max_pool_on`] on the default CPU device.
pub fn max_pool<T: PoolFloat, I: ArgmaxIndex, D: PoolDim>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
) -> poolgrad::Result<Pooled<T, I, D>> {
    max_pool_on(&Cpu::default(), input, params)
}

/// The forward of the form for `I`: `as_i64` or `as_i32` run, its indices as `I`.
fn in_index_type<T, I: ArgmaxIndex, D: ndarray::Dimension>(
    as_i64: impl FnOnce() -> poolgrad::Result<Pooled<T, i64, D>>,
    as_i32: impl FnOnce() -> poolgrad::Result<Pooled<T, i32, D>>,
) -> poolgrad::Result<Pooled<T, I, D>> {
    Ok(if I::DTYPE == DType::I32 { with_indices_as(as_i32()?) } else { with_indices_as(as_i64()?) })
}
