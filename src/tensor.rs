//! Tensor views: [`TensorRef`] (read) and [`TensorMut`] (write) over 3-D `(C, H, W)` or 4-D
//! `(N, C, H, W)` data with strides in elements.
//!
//! A view is a checked [`ndarray`] view underneath, seen as 4-D (a 3-D view has `N = 1`) and
//! remembering the rank it was built with, so results and error positions use the caller's rank.
//! Every constructor is fallible: out-of-bounds shapes and strides, overflowing sizes and (for
//! [`TensorMut`]) strides that make two elements share memory are errors, never panics.

use ndarray::{ArrayBase, ArrayView, ArrayView4, ArrayViewMut, ArrayViewMut4, Axis, Data, DataMut};
use ndarray::{Dimension, ShapeBuilder};

use crate::element::Element;
use crate::error::{Error, Result};

pub(crate) const RANKS: &str = "3 (C, H, W) or 4 (N, C, H, W)";

/// A read-only view of a 3-D or 4-D tensor.
///
/// ```
/// use poolgrad::TensorRef;
/// let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let t = TensorRef::from_slice(&data, &[1, 2, 3])?; // C = 1, H = 2, W = 3
/// assert_eq!(t.shape(), [1, 1, 2, 3]);
/// assert_eq!(t.dims(), vec![1, 2, 3]);
/// // Every other column: strides in elements.
/// let s = TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[6, 3, 2])?;
/// assert_eq!(s.view()[[0, 0, 1, 1]], 6.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a, E> {
    view: ArrayView4<'a, E>,
    ndim: usize,
}

/// A writable view of a 3-D or 4-D tensor. Its elements never alias one another.
///
/// ```
/// use poolgrad::TensorMut;
/// let mut data = [0.0f32; 8];
/// let mut t = TensorMut::from_slice(&mut data, &[2, 1, 2, 2])?;
/// t.view_mut()[[1, 0, 1, 1]] = 7.0;
/// assert_eq!(data[7], 7.0);
/// // Overlapping strides are refused for outputs.
/// let mut data = [0.0f32; 8];
/// assert!(TensorMut::from_slice_with_strides(&mut data, &[1, 2, 2], &[4, 1, 1]).is_err());
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct TensorMut<'a, E> {
    view: ArrayViewMut4<'a, E>,
    ndim: usize,
}

fn check_rank(op: &'static str, arg: &'static str, shape: &[usize]) -> Result<()> {
    match shape.len() {
        3 | 4 => Ok(()),
        got => Err(Error::Rank { op, arg, expected: RANKS, got, shape: shape.to_vec() }),
    }
}

fn as_4d(shape: &[usize]) -> [usize; 4] {
    match *shape {
        [c, h, w] => [1, c, h, w],
        [n, c, h, w] => [n, c, h, w],
        _ => [0; 4], // unreachable after check_rank
    }
}

fn strides_4d(strides: &[usize]) -> [usize; 4] {
    match *strides {
        [c, h, w] => [0, c, h, w],
        [n, c, h, w] => [n, c, h, w],
        _ => [0; 4],
    }
}

fn check_strides_len(op: &'static str, shape: &[usize], strides: &[usize]) -> Result<()> {
    if shape.len() == strides.len() {
        Ok(())
    } else {
        Err(Error::Layout {
            op,
            arg: "strides",
            reason: format!(
                "has {} entries {strides:?}, expected one per dimension of shape {shape:?}",
                strides.len()
            ),
        })
    }
}

fn check_exact_len(op: &'static str, shape: &[usize], len: usize) -> Result<()> {
    let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match count {
        None => Err(Error::Overflow {
            op,
            arg: "shape",
            what: format!("the element count of {shape:?} exceeds usize::MAX"),
        }),
        Some(n) if n != len => Err(Error::Layout {
            op,
            arg: "data",
            reason: format!("has {len} elements, but shape {shape:?} needs {n}"),
        }),
        Some(_) => Ok(()),
    }
}

impl<'a, E: Element> TensorRef<'a, E> {
    /// A contiguous, row-major view of `data` with `shape` (3-D `[C, H, W]` or 4-D `[N, C, H, W]`).
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank, [`Error::Layout`] if `data.len()` differs from the
    /// element count, [`Error::Overflow`] if the count does not fit.
    pub fn from_slice(data: &'a [E], shape: &[usize]) -> Result<Self> {
        const OP: &str = "TensorRef::from_slice";
        check_rank(OP, "shape", shape)?;
        check_exact_len(OP, shape, data.len())?;
        let view =
            ArrayView::from_shape(as_4d(shape), data).map_err(|e| Error::from_shape(OP, "shape", e))?;
        Ok(Self { view, ndim: shape.len() })
    }

    /// A view of `data` with `shape` and `strides` (in elements, one per dimension). Strides may be
    /// zero (broadcast) or overlap: the view is only read.
    ///
    /// # Errors
    /// [`Error::Rank`], [`Error::Layout`] if a stride count differs from the rank or an element
    /// lies past the end of `data`, [`Error::Overflow`] if a size or offset overflows.
    pub fn from_slice_with_strides(data: &'a [E], shape: &[usize], strides: &[usize]) -> Result<Self> {
        const OP: &str = "TensorRef::from_slice_with_strides";
        check_rank(OP, "shape", shape)?;
        check_strides_len(OP, shape, strides)?;
        let view = ArrayView::from_shape(as_4d(shape).strides(strides_4d(strides)), data)
            .map_err(|e| Error::from_shape(OP, "strides", e))?;
        Ok(Self { view, ndim: shape.len() })
    }

    /// A view of any 3-D or 4-D ndarray array or view (any strides, including negative ones).
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank.
    pub fn from_array<S, D>(array: &'a ArrayBase<S, D>) -> Result<Self>
    where
        S: Data<Elem = E>,
        D: Dimension,
    {
        Self::named(array.view(), "TensorRef::from_array", "array")
    }

    /// A view from an ndarray view, keeping the view's lifetime (any strides).
    ///
    /// ```
    /// use ndarray::{Array3, s};
    /// let a = Array3::<f32>::zeros((2, 4, 6));
    /// let t = poolgrad::TensorRef::from_view(a.slice(s![.., .., ..;2]))?;
    /// assert_eq!(t.shape(), [1, 2, 4, 3]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank.
    pub fn from_view<D: Dimension>(view: ArrayView<'a, E, D>) -> Result<Self> {
        Self::named(view, "TensorRef::from_view", "view")
    }

    /// Like [`TensorRef::from_view`], with the operation and argument named in errors.
    pub(crate) fn named<D: Dimension>(
        view: ArrayView<'a, E, D>,
        op: &'static str,
        arg: &'static str,
    ) -> Result<Self> {
        let view = view.into_dyn();
        check_rank(op, arg, view.shape())?;
        let ndim = view.ndim();
        let view = if ndim == 3 { view.insert_axis(Axis(0)) } else { view };
        let view = view.into_dimensionality().map_err(|e| Error::from_shape(op, arg, e))?;
        Ok(Self { view, ndim })
    }

    /// The shape seen as 4-D `[N, C, H, W]` (`N = 1` for a 3-D tensor).
    pub fn shape(&self) -> [usize; 4] {
        dims4(self.view.shape())
    }

    /// The shape in the rank the view was built with.
    pub fn dims(&self) -> Vec<usize> {
        user_dims(self.view.shape(), self.ndim)
    }

    /// The rank the view was built with: 3 or 4.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// The data as a 4-D ndarray view.
    pub fn view(&self) -> ArrayView4<'a, E> {
        self.view
    }
}

impl<'a, E: Element> TensorMut<'a, E> {
    /// A contiguous, row-major view of `data` with `shape` (3-D or 4-D).
    ///
    /// # Errors
    /// As [`TensorRef::from_slice`].
    pub fn from_slice(data: &'a mut [E], shape: &[usize]) -> Result<Self> {
        const OP: &str = "TensorMut::from_slice";
        check_rank(OP, "shape", shape)?;
        check_exact_len(OP, shape, data.len())?;
        let view =
            ArrayViewMut::from_shape(as_4d(shape), data).map_err(|e| Error::from_shape(OP, "shape", e))?;
        Ok(Self { view, ndim: shape.len() })
    }

    /// A view of `data` with `shape` and `strides` (in elements). Unlike an input view, no two
    /// elements may share memory.
    ///
    /// # Errors
    /// As [`TensorRef::from_slice_with_strides`], plus [`Error::Layout`] when strides alias.
    pub fn from_slice_with_strides(data: &'a mut [E], shape: &[usize], strides: &[usize]) -> Result<Self> {
        const OP: &str = "TensorMut::from_slice_with_strides";
        check_rank(OP, "shape", shape)?;
        check_strides_len(OP, shape, strides)?;
        let mut strides4 = strides_4d(strides);
        if shape.len() == 3 {
            // The added batch axis has length 1: give it a stride that cannot alias.
            strides4[0] = 1;
        }
        let view = ArrayViewMut::from_shape(as_4d(shape).strides(strides4), data)
            .map_err(|e| Error::from_shape(OP, "strides", e))?;
        Ok(Self { view, ndim: shape.len() })
    }

    /// A writable view of any 3-D or 4-D ndarray array or mutable view.
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank.
    pub fn from_array<S, D>(array: &'a mut ArrayBase<S, D>) -> Result<Self>
    where
        S: DataMut<Elem = E>,
        D: Dimension,
    {
        Self::named(array.view_mut(), "TensorMut::from_array", "array")
    }

    /// A writable view from an ndarray mutable view, keeping the view's lifetime.
    ///
    /// ```
    /// use ndarray::{Array3, s};
    /// let mut a = Array3::<f32>::zeros((2, 4, 6));
    /// let t = poolgrad::TensorMut::from_view(a.slice_mut(s![.., .., ..;2]))?;
    /// assert_eq!(t.dims(), vec![2, 4, 3]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank.
    pub fn from_view<D: Dimension>(view: ArrayViewMut<'a, E, D>) -> Result<Self> {
        Self::named(view, "TensorMut::from_view", "view")
    }

    pub(crate) fn named<D: Dimension>(
        view: ArrayViewMut<'a, E, D>,
        op: &'static str,
        arg: &'static str,
    ) -> Result<Self> {
        let view = view.into_dyn();
        check_rank(op, arg, view.shape())?;
        let ndim = view.ndim();
        let view = if ndim == 3 { view.insert_axis(Axis(0)) } else { view };
        let view = view.into_dimensionality().map_err(|e| Error::from_shape(op, arg, e))?;
        Ok(Self { view, ndim })
    }

    /// The shape seen as 4-D `[N, C, H, W]`.
    pub fn shape(&self) -> [usize; 4] {
        dims4(self.view.shape())
    }

    /// The shape in the rank the view was built with.
    pub fn dims(&self) -> Vec<usize> {
        user_dims(self.view.shape(), self.ndim)
    }

    /// The rank the view was built with: 3 or 4.
    pub fn ndim(&self) -> usize {
        self.ndim
    }

    /// A read-only view of the same data.
    pub fn as_ref(&self) -> TensorRef<'_, E> {
        TensorRef { view: self.view.view(), ndim: self.ndim }
    }

    /// The data as a 4-D ndarray view.
    pub fn view_mut(&mut self) -> ArrayViewMut4<'_, E> {
        self.view.view_mut()
    }

    /// A shorter-lived writable view of the same data.
    pub fn reborrow(&mut self) -> TensorMut<'_, E> {
        TensorMut { view: self.view.view_mut(), ndim: self.ndim }
    }

    pub(crate) fn into_view(self) -> ArrayViewMut4<'a, E> {
        self.view
    }
}

fn dims4(shape: &[usize]) -> [usize; 4] {
    [shape[0], shape[1], shape[2], shape[3]]
}

/// A 4-D shape or position in the caller's rank (drops the added batch axis of a 3-D tensor).
pub(crate) fn user_dims(shape4: &[usize], ndim: usize) -> Vec<usize> {
    shape4[4 - ndim..].to_vec()
}

/// The 4-D shape `shape` with its spatial dimensions replaced by `[h, w]`, in rank `ndim`.
pub(crate) fn with_spatial(shape4: [usize; 4], [h, w]: [usize; 2], ndim: usize) -> Vec<usize> {
    user_dims(&[shape4[0], shape4[1], h, w], ndim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_d_views_have_batch_one() {
        let data = vec![0.0f32; 24];
        let t = TensorRef::from_slice(&data, &[2, 3, 4]).unwrap();
        assert_eq!(t.shape(), [1, 2, 3, 4]);
        assert_eq!(t.ndim(), 3);
        assert!(t.view().as_slice().is_some());
    }

    #[test]
    fn out_of_bounds_strides_are_rejected() {
        let data = vec![0.0f32; 10];
        let e = TensorRef::from_slice_with_strides(&data, &[1, 1, 3, 4], &[12, 12, 4, 1]).unwrap_err();
        assert!(matches!(e, Error::Layout { arg: "strides", .. }), "{e}");
    }

    #[test]
    fn zero_strides_are_fine_for_inputs_but_not_outputs() {
        let mut data = vec![1.0f32; 4];
        assert!(TensorRef::from_slice_with_strides(&data, &[1, 1, 3, 3], &[0, 0, 0, 1]).is_ok());
        let e = TensorMut::from_slice_with_strides(&mut data, &[1, 1, 3, 3], &[0, 0, 0, 1]).unwrap_err();
        assert!(e.to_string().contains("alias"), "{e}");
    }
}
