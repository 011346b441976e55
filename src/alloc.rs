//! Fallible, zero-initialised allocation: an impossible size is an [`Error`], never an abort.

use ndarray::{Array, Dimension, IxDyn};

use crate::error::{Error, Result};

/// `len` zeroed elements, or [`Error::Overflow`] / [`Error::Allocation`] naming `arg`.
///
/// Zeroed memory comes from the allocator's zeroing path (`calloc`), so large buffers cost no
/// extra pass over memory.
pub(crate) fn zeroed_vec<E: bytemuck::Zeroable>(
    op: &'static str,
    arg: &'static str,
    len: usize,
) -> Result<Vec<E>> {
    let bytes = len.checked_mul(size_of::<E>()).filter(|&b| b <= isize::MAX as usize).ok_or_else(|| {
        Error::Overflow {
            op,
            arg,
            what: format!("{len} elements of {} bytes exceed isize::MAX bytes", size_of::<E>()),
        }
    })?;
    bytemuck::allocation::try_zeroed_slice_box::<E>(len).map(Vec::from).map_err(|()| Error::Allocation {
        op,
        arg,
        bytes,
    })
}

/// The first `len` items as a vector, or [`Error::Allocation`] when there is no room for them.
pub(crate) fn collect_exact<T>(
    op: &'static str,
    arg: &'static str,
    len: usize,
    items: impl Iterator<Item = T>,
) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::Allocation {
        op,
        arg,
        bytes: len.saturating_mul(size_of::<T>()),
    })?;
    v.extend(items.take(len));
    Ok(v)
}

/// A zeroed array of shape `dims` (the caller's rank `D`).
pub(crate) fn zeroed_array<E, D>(op: &'static str, arg: &'static str, dims: &[usize]) -> Result<Array<E, D>>
where
    E: bytemuck::Zeroable + Clone,
    D: Dimension,
{
    let len = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| Error::Overflow {
        op,
        arg,
        what: format!("the element count of shape {dims:?} exceeds usize::MAX"),
    })?;
    into_array(op, arg, zeroed_vec::<E>(op, arg, len)?, dims)
}

/// `data` as a row-major array of shape `dims` (the caller's rank `D`).
pub(crate) fn into_array<E, D: Dimension>(
    op: &'static str,
    arg: &'static str,
    data: Vec<E>,
    dims: &[usize],
) -> Result<Array<E, D>> {
    Array::from_shape_vec(IxDyn(dims), data)
        .and_then(|a| a.into_dimensionality::<D>())
        .map_err(|e| Error::from_shape(op, arg, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors() {
        let e = zeroed_vec::<f32>("t", "x", usize::MAX / 2).unwrap_err();
        assert!(matches!(e, Error::Overflow { arg: "x", .. }), "{e}");
        // Fits in isize but not in any machine's memory (on 32-bit targets, every size that
        // fits in isize might be had).
        #[cfg(target_pointer_width = "64")]
        {
            let e = zeroed_vec::<u8>("t", "x", 1 << 62).unwrap_err();
            assert_eq!(e, Error::Allocation { op: "t", arg: "x", bytes: 1 << 62 });
        }
        let e = zeroed_array::<f32, ndarray::Ix2>("t", "x", &[usize::MAX, 2]).unwrap_err();
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
    }
}
