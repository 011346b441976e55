//! Free functions over ndarray arrays: the one-line entry points.
//!
//! Each accepts owned arrays or views of rank 3 (`[C, H, W]`) or 4 (`[N, C, H, W]`) with any
//! strides, runs on the default [`Cpu`] device, and returns owned arrays of the input's rank.

use ndarray::{Array, ArrayBase, Data, Dimension};

use crate::device::cpu::Cpu;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
use crate::plan::Plan;
use crate::tensor::{TensorMut, TensorRef, with_spatial};

/// The result of a max-pooling forward: pooled values and flat arg-max indices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled<T, I, D: Dimension> {
    /// Pooled values.
    pub output: Array<T, D>,
    /// Flat index `ih * W + iw` of each value inside its `(n, c)` plane.
    pub indices: Array<I, D>,
}

/// Adaptive 2-D max pooling of `input` to `output_size = [Ho, Wo]`, with PyTorch's semantics
/// (first maximum wins; a NaN wins and a later NaN replaces it). `Ho > H` and `Wo > W` are allowed.
///
/// ```
/// use ndarray::array;
/// let x = array![[[0.0f32, 5.0, 1.0, 1.0], [2.0, 3.0, 7.0, 0.0], [9.0, 1.0, 6.0, 4.0], [0.0, 8.0, 6.0, 2.0]]];
/// let p = poolgrad::adaptive_max_pool2d::<f32, i64, _, _>(&x, [2, 2])?;
/// assert_eq!(p.output, array![[[5.0, 7.0], [9.0, 6.0]]]);
/// assert_eq!(p.indices, array![[[1, 6], [8, 10]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`](crate::Error::Rank), [`Error::EmptyDimension`](crate::Error::EmptyDimension),
/// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for a zero in `output_size`,
/// [`Error::IndexTypeTooNarrow`](crate::Error::IndexTypeTooNarrow) when `H * W` exceeds the index
/// type, [`Error::Overflow`](crate::Error::Overflow) / [`Error::Allocation`](crate::Error::Allocation)
/// when the output cannot be allocated.
pub fn adaptive_max_pool2d<T, I, S, D>(
    input: &ArrayBase<S, D>,
    output_size: [usize; 2],
) -> Result<Pooled<T, I, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S: Data<Elem = T>,
    D: Dimension,
{
    const OP: &str = "adaptive_max_pool2d";
    let input = TensorRef::named(input.view(), OP, "input")?;
    crate::validate::pooling_input(OP, "input", &input)?;
    crate::validate::output_size(OP, "output_size", output_size)?;
    let dims = with_spatial(input.shape(), output_size, input.ndim());
    let mut output = crate::alloc::zeroed_array::<T, D>(OP, "output", &dims)?;
    let mut indices = crate::alloc::zeroed_array::<I, D>(OP, "indices", &dims)?;
    let op = AdaptiveMaxPool2d {
        input,
        output_size,
        output: TensorMut::named(output.view_mut(), OP, "output")?,
        indices: TensorMut::named(indices.view_mut(), OP, "indices")?,
    };
    Plan::new(&Cpu::default(), op)?.run()?;
    Ok(Pooled { output, indices })
}

/// Gradient of [`adaptive_max_pool2d`] (`aclnnAdaptiveMaxPool2dBackward`): each
/// `grad_output[n, c, oh, ow]` is added to `grad_input[n, c, idx]`, `idx = indices[n, c, oh, ow]`,
/// in row-major output order; positions no index points at are zero. `self_` is the forward
/// input: only its shape is read.
///
/// f32 and f64 results equal PyTorch's CPU kernel bit for bit; f16 and bf16 sum in f32 and round
/// once. Results do not depend on the number of threads.
///
/// ```
/// use ndarray::array;
/// let x = array![[[1.0f32, 2.0, 3.0], [4.0, 9.0, 5.0], [6.0, 7.0, 8.0]]];
/// let p = poolgrad::adaptive_max_pool2d::<f32, i32, _, _>(&x, [2, 2])?; // overlapping windows
/// assert_eq!(p.indices, array![[[4, 4], [4, 4]]]);
/// let g = array![[[1.0f32, 2.0], [3.0, 4.0]]];
/// let gi = poolgrad::adaptive_max_pool2d_backward(&g, &x, &p.indices)?;
/// assert_eq!(gi, array![[[0.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// [`Error::Rank`](crate::Error::Rank), [`Error::ShapeMismatch`](crate::Error::ShapeMismatch)
/// when `grad_output` or `indices` is not `[N, C, Ho, Wo]` for `self_ = [N, C, H, W]`,
/// [`Error::EmptyDimension`](crate::Error::EmptyDimension),
/// [`Error::IndexOutOfRange`](crate::Error::IndexOutOfRange) for an index outside `[0, H*W)`,
/// [`Error::Overflow`](crate::Error::Overflow) / [`Error::Allocation`](crate::Error::Allocation).
pub fn adaptive_max_pool2d_backward<T, I, S1, S2, S3, D>(
    grad_output: &ArrayBase<S1, D>,
    self_: &ArrayBase<S2, D>,
    indices: &ArrayBase<S3, D>,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
    S3: Data<Elem = I>,
    D: Dimension,
{
    const OP: &str = "adaptive_max_pool2d_backward";
    let self_ = TensorRef::named(self_.view(), OP, "self_")?;
    let grad_output = TensorRef::named(grad_output.view(), OP, "grad_output")?;
    let indices = TensorRef::named(indices.view(), OP, "indices")?;
    // Shape errors take precedence over the allocation of the result.
    crate::op::adaptive_backward_shapes(&grad_output, &self_, &indices)?;
    let mut grad_input = crate::alloc::zeroed_array::<T, D>(OP, "grad_input", &self_.dims())?;
    let op = AdaptiveMaxPool2dBackward {
        grad_output,
        self_,
        indices,
        grad_input: TensorMut::named(grad_input.view_mut(), OP, "grad_input")?,
    };
    Plan::new(&Cpu::default(), op)?.run()?;
    Ok(grad_input)
}
