//! Checks shared by every operation's phase 1. Each returns a structured [`Error`].

use crate::element::Element;
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::tensor::{TensorMut, TensorRef, user_dims};

/// The 4-D shape `[N, C, H, W]` of a pooling input given in the caller's rank (3 or 4), whose C,
/// H and W must be non-empty (N may be 0).
pub(crate) fn pooling_dims(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<[usize; 4]> {
    let shape = match *dims {
        [c, h, w] => [1, c, h, w],
        [n, c, h, w] => [n, c, h, w],
        _ => {
            return Err(Error::Rank {
                op,
                arg,
                expected: crate::tensor::RANKS,
                got: dims.len(),
                shape: dims.to_vec(),
            });
        }
    };
    for (axis, name) in [(1, "C"), (2, "H"), (3, "W")] {
        if shape[axis] == 0 {
            return Err(Error::EmptyDimension { op, arg, axis: name, shape: dims.to_vec() });
        }
    }
    Ok(shape)
}

/// [`pooling_dims`] of a view.
pub(crate) fn pooling_input<E: Element>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E>,
) -> Result<[usize; 4]> {
    pooling_dims(op, arg, &t.dims())
}

/// `[ho, wo]` with both entries at least 1.
pub(crate) fn output_size(op: &'static str, arg: &'static str, size: [usize; 2]) -> Result<()> {
    if size.contains(&0) {
        return Err(Error::InvalidParameter {
            op,
            arg,
            expected: "[Ho, Wo] with Ho >= 1 and Wo >= 1".into(),
            got: format!("{size:?}"),
        });
    }
    Ok(())
}

/// `got` must equal `expected` (both in the caller's rank).
pub(crate) fn same_shape(
    op: &'static str,
    arg: &'static str,
    got: Vec<usize>,
    expected: Vec<usize>,
) -> Result<()> {
    if got == expected { Ok(()) } else { Err(Error::ShapeMismatch { op, arg, expected, got }) }
}

/// Shape check for an input view.
pub(crate) fn input_shape<E: Element>(
    op: &'static str,
    arg: &'static str,
    t: &TensorRef<'_, E>,
    expected: Vec<usize>,
) -> Result<()> {
    same_shape(op, arg, t.dims(), expected)
}

/// Shape check for an output view.
pub(crate) fn output_shape<E: Element>(
    op: &'static str,
    arg: &'static str,
    t: &TensorMut<'_, E>,
    expected: Vec<usize>,
) -> Result<()> {
    same_shape(op, arg, t.dims(), expected)
}

/// The index type `I` must hold every flat position of an `h * w` plane.
pub(crate) fn index_width<I: ArgmaxIndex>(op: &'static str, arg: &'static str, plane: usize) -> Result<()> {
    if (plane as u64) <= I::MAX_PLANE {
        Ok(())
    } else {
        Err(Error::IndexTypeTooNarrow { op, arg, dtype: I::DTYPE, max: I::MAX_PLANE, plane })
    }
}

/// `h * w` without overflow.
pub(crate) fn plane_size(op: &'static str, arg: &'static str, h: usize, w: usize) -> Result<usize> {
    h.checked_mul(w).ok_or_else(|| Error::Overflow { op, arg, what: format!("H * W = {h} * {w}") })
}

/// The position, in the caller's rank, of element `e` of a row-major `[n, c, h, w]` tensor.
pub(crate) fn position(e: usize, dims: [usize; 4], ndim: usize) -> Vec<usize> {
    let [n, c, h, w] = dims;
    user_dims(&unflatten(e, (n, c, h, w)), ndim)
}

/// The error for index `value` found at element `e` of a `[n, c, ho, wo]` index tensor.
pub(crate) fn index_error(
    op: &'static str,
    arg: &'static str,
    e: usize,
    value: i64,
    pooled: [usize; 4],
    ndim: usize,
    plane: usize,
) -> Error {
    Error::IndexOutOfRange { op, arg, position: position(e, pooled, ndim), value, plane }
}

fn unflatten(mut flat: usize, (_, c, h, w): (usize, usize, usize, usize)) -> [usize; 4] {
    let iw = flat % w;
    flat /= w;
    let ih = flat % h;
    flat /= h;
    [flat / c, flat % c, ih, iw]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unflatten_inverts_row_major_order() {
        let dims = (2, 3, 4, 5);
        let mut k = 0;
        for n in 0..2 {
            for c in 0..3 {
                for h in 0..4 {
                    for w in 0..5 {
                        assert_eq!(unflatten(k, dims), [n, c, h, w]);
                        k += 1;
                    }
                }
            }
        }
    }
}
