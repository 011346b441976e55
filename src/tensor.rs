//! Tensor views: [`TensorRef`] (read) and [`TensorMut`] (write) over 3-D `(C, H, W)`, 4-D
//! `(N, C, H, W)` or, for the 3-D poolings, 5-D `(N, C, D, H, W)` data with strides in elements.
//!
//! A view is a checked [`ndarray`] view underneath, seen as 4-D (a 3-D view has `N = 1`; a 5-D
//! view has its `D` and `H` axes merged into one, `[N, C, D·H, W]`, which visits the elements in
//! the same row-major order) and remembering the shape it was built with, so results and error
//! positions use the caller's rank.
//! Every constructor is fallible: out-of-bounds shapes and strides, overflowing sizes and (for
//! [`TensorMut`]) strides that make two elements share memory are errors, never panics.

use core::fmt;

use ndarray::{ArrayBase, ArrayView, ArrayView4, ArrayViewMut, ArrayViewMut4, Axis, Data, DataMut};
use ndarray::{Dimension, Ix3, Ix4, Ix5, IxDyn, RawData, ShapeBuilder};

use crate::element::Element;
use crate::error::{Error, Result, UNNAMED};

/// Where a tensor's elements live: [`Host`] memory (ndarray arrays and slices), or, with the
/// `ascend` feature, an Ascend NPU's memory (`device::ascend::Npu`). Sealed.
///
/// Every operation descriptor takes its tensors in one memory `M` (by default [`Host`]), and a
/// device runs the operations whose memory it can address: the CPU runs [`Host`] tensors only,
/// so handing it NPU memory does not compile. Shapes, ranks and parameters are checked the same
/// way in every memory, by the same code.
pub trait Memory: memory::Sealed + Copy + fmt::Debug + Send + Sync + 'static {
    /// A read-only view of elements `E` in this memory.
    #[doc(hidden)]
    type Ref<'a, E: Element>: Copy + fmt::Debug;
    /// A writable view of elements `E` in this memory.
    #[doc(hidden)]
    type Mut<'a, E: Element>: fmt::Debug;
    /// The 4-D shape of `data`.
    #[doc(hidden)]
    fn ref_shape<'s, E: Element>(data: &'s Self::Ref<'_, E>) -> &'s [usize];
    /// The 4-D shape of `data`.
    #[doc(hidden)]
    fn mut_shape<'s, E: Element>(data: &'s Self::Mut<'_, E>) -> &'s [usize];
    /// A read-only view of `data`.
    #[doc(hidden)]
    fn read<'s, E: Element>(data: &'s Self::Mut<'_, E>) -> Self::Ref<'s, E>;
    /// A shorter-lived writable view of `data`.
    #[doc(hidden)]
    fn reborrow<'s, E: Element>(data: &'s mut Self::Mut<'_, E>) -> Self::Mut<'s, E>;
}

pub(crate) mod memory {
    /// Implemented for [`Host`](super::Host) and the Ascend device's memory only.
    pub trait Sealed {}
}

/// Host memory: the elements of ndarray arrays, views and slices. The default memory of every
/// tensor view and operation descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Host;

impl memory::Sealed for Host {}

impl Memory for Host {
    type Ref<'a, E: Element> = ArrayView4<'a, E>;
    type Mut<'a, E: Element> = ArrayViewMut4<'a, E>;

    fn ref_shape<'s, E: Element>(data: &'s ArrayView4<'_, E>) -> &'s [usize] {
        data.shape()
    }

    fn mut_shape<'s, E: Element>(data: &'s ArrayViewMut4<'_, E>) -> &'s [usize] {
        data.shape()
    }

    fn read<'s, E: Element>(data: &'s ArrayViewMut4<'_, E>) -> ArrayView4<'s, E> {
        data.view()
    }

    fn reborrow<'s, E: Element>(data: &'s mut ArrayViewMut4<'_, E>) -> ArrayViewMut4<'s, E> {
        data.view_mut()
    }
}

pub(crate) const RANKS: &str = "3 (C, H, W) or 4 (N, C, H, W)";

/// The ranks the views themselves accept (each operation then asks for its own).
pub(crate) const VIEW_RANKS: &str = "3, 4 or 5 (N, C, D, H, W)";

/// The caller's shape of a view: up to 5 dimensions, kept inline (no allocation per view).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dims {
    len: usize,
    dims: [usize; 5],
}

impl Dims {
    fn of(shape: &[usize]) -> Self {
        let mut dims = [0; 5];
        dims[..shape.len()].copy_from_slice(shape);
        Dims { len: shape.len(), dims }
    }
}

impl core::ops::Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.dims[..self.len]
    }
}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

mod sealed {
    /// Implemented for `Ix3`, `Ix4`, `Ix5` and `IxDyn` only.
    pub trait Sealed {}
    impl Sealed for ndarray::Ix2 {}
    impl Sealed for ndarray::Ix3 {}
    impl Sealed for ndarray::Ix4 {}
    impl Sealed for ndarray::Ix5 {}
    impl Sealed for ndarray::IxDyn {}
}

/// The ndarray dimension types the operations accept: [`Ix3`](type@Ix3) (`[C, H, W]`) and
/// [`Ix4`](type@Ix4) (`[N, C, H, W]`), whose rank is right by construction, and [`IxDyn`](type@IxDyn), whose rank is checked at
/// run time ([`Error::Rank`]). Sealed.
///
/// Any other rank does not compile:
///
/// ```compile_fail
/// let x = ndarray::Array2::<f32>::zeros((4, 4));
/// let _ = poolgrad::adaptive_max_pool2d(&x, [2, 2]);
/// ```
pub trait PoolDim: ViewDim {}
impl PoolDim for Ix3 {}
impl PoolDim for Ix4 {}
impl PoolDim for IxDyn {}

/// The ndarray dimension types the 3-D poolings accept: [`Ix4`](type@Ix4) (`[C, D, H, W]`) and
/// [`Ix5`](type@Ix5) (`[N, C, D, H, W]`), whose rank is right by construction, and
/// [`IxDyn`](type@IxDyn), whose rank is checked at run time ([`Error::Rank`]). Sealed.
///
/// ```compile_fail
/// let x = ndarray::Array3::<f32>::zeros((4, 4, 4));
/// let _ = poolgrad::adaptive_max_pool3d(&x, [2, 2, 2]);
/// ```
pub trait VolumeDim: ViewDim {}
impl VolumeDim for Ix4 {}
impl VolumeDim for Ix5 {}
impl VolumeDim for IxDyn {}

/// The ndarray dimension types the 1-D poolings accept: [`Ix2`](type@ndarray::Ix2) (`[C, L]`)
/// and [`Ix3`](type@Ix3) (`[N, C, L]`), whose rank is right by construction, and
/// [`IxDyn`](type@IxDyn), whose rank is checked at run time ([`Error::Rank`]). Sealed.
pub trait LineDim: Dimension + sealed::Sealed {}
impl LineDim for ndarray::Ix2 {}
impl LineDim for Ix3 {}
impl LineDim for IxDyn {}

/// Every dimension type a view is made from: those of [`PoolDim`] and of [`VolumeDim`]. Sealed.
pub trait ViewDim: Dimension + sealed::Sealed {}
impl ViewDim for Ix3 {}
impl ViewDim for Ix4 {}
impl ViewDim for Ix5 {}
impl ViewDim for IxDyn {}

/// A read-only view of a 3-D, 4-D or 5-D tensor.
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
pub struct TensorRef<'a, E: Element, M: Memory = Host> {
    view: M::Ref<'a, E>,
    dims: Dims,
}

impl<E: Element, M: Memory> Clone for TensorRef<'_, E, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Element, M: Memory> Copy for TensorRef<'_, E, M> {}

impl<E: Element, M: Memory> fmt::Debug for TensorRef<'_, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef").field("view", &self.view).field("dims", &self.dims).finish()
    }
}

/// A writable view of a 3-D, 4-D or 5-D tensor. Its elements never alias one another.
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
pub struct TensorMut<'a, E: Element, M: Memory = Host> {
    view: M::Mut<'a, E>,
    dims: Dims,
    /// Every element is known to be +0 (an array the crate has just allocated zeroed), so a
    /// kernel may leave it unzeroed. Set only inside the crate ([`TensorMut::known_zero`]).
    zeroed: bool,
}

impl<E: Element, M: Memory> fmt::Debug for TensorMut<'_, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorMut")
            .field("view", &self.view)
            .field("dims", &self.dims)
            .field("zeroed", &self.zeroed)
            .finish()
    }
}

fn check_rank(arg: &'static str, shape: &[usize]) -> Result<()> {
    match shape.len() {
        3..=5 => Ok(()),
        got => Err(Error::Rank { op: UNNAMED, arg, expected: VIEW_RANKS, got, shape: shape.to_vec() }),
    }
}

/// The error for a 5-D view whose `D` and `H` axes cannot be merged into one axis of steps of
/// one stride (a view sliced along `D` or `H` with steps, or with those axes transposed).
fn unmerged(arg: &'static str, shape: &[usize], strides: &[isize]) -> Error {
    Error::Layout {
        op: UNNAMED,
        arg,
        reason: format!(
            "of shape {shape:?} has strides {strides:?}, whose D and H axes do not merge into one \
             (the stride of D must be H times that of H); copy it to a standard layout first"
        ),
    }
}

/// `view` as `[N, C, H, W]` (a 3-D view gains `N = 1`; a 5-D view has its `D` and `H` axes
/// merged), with the shape it had; another rank, or a 5-D view whose `D` and `H` do not merge
/// ([`unmerged`]), is an error naming `arg`. Views of a static rank convert without a dynamic
/// shape (no allocation: the tiny calls of property tests pay this on every tensor).
fn as_nchw<S: RawData, D: Dimension>(
    view: ArrayBase<S, D>,
    arg: &'static str,
) -> Result<(ArrayBase<S, Ix4>, Dims)> {
    check_rank(arg, view.shape())?;
    let dims = Dims::of(view.shape());
    let nchw = match D::NDIM {
        Some(4) => view.into_dimensionality::<Ix4>(),
        Some(3) => view.into_dimensionality::<Ix3>().map(|v| v.insert_axis(Axis(0))),
        _ if dims.len == 5 => {
            let mut view =
                view.into_dimensionality::<Ix5>().map_err(|e| Error::from_shape(UNNAMED, arg, e))?;
            if view.is_empty() {
                // Nothing to address: a standard-layout view of no elements.
                let [n, c, d, h, w] = dims.dims;
                view.into_shape_with_order([n, c, d * h, w])
            } else if view.merge_axes(Axis(2), Axis(3)) {
                // `D` now has length 1.
                Ok(view.index_axis_move(Axis(2), 0))
            } else {
                return Err(unmerged(arg, &dims, view.strides()));
            }
        }
        _ => {
            let view = view.into_dyn();
            let view = if dims.len == 3 { view.insert_axis(Axis(0)) } else { view };
            view.into_dimensionality::<Ix4>()
        }
    };
    Ok((nchw.map_err(|e| Error::from_shape(UNNAMED, arg, e))?, dims))
}

/// A shape of rank 3, 4 or 5 seen as `[N, C, H, W]` (see the module documentation).
pub(crate) fn as_4d(shape: &[usize]) -> [usize; 4] {
    match *shape {
        [c, h, w] => [1, c, h, w],
        [n, c, h, w] => [n, c, h, w],
        [n, c, d, h, w] => [n, c, d * h, w],
        _ => [0; 4], // unreachable after check_rank
    }
}

/// The strides of [`as_4d`]'s shape, or `None` for a 5-D shape whose `D` and `H` do not merge.
/// (An axis of length 1 or less never steps, so its stride does not constrain the merge.)
fn strides_4d(shape: &[usize], strides: &[usize]) -> Option<[usize; 4]> {
    Some(match (shape, strides) {
        (_, &[c, h, w]) => [0, c, h, w],
        (_, &[n, c, h, w]) => [n, c, h, w],
        (&[_, _, d, h, _], &[n, c, sd, sh, w]) => {
            let merged = if h <= 1 {
                sd
            } else if d <= 1 || Some(sd) == h.checked_mul(sh) {
                sh
            } else {
                return None;
            };
            [n, c, merged, w]
        }
        _ => [0; 4],
    })
}

fn check_exact_len(shape: &[usize], len: usize) -> Result<()> {
    let count = element_count(shape)?;
    if count != len {
        return Err(Error::Layout {
            op: UNNAMED,
            arg: "data",
            reason: format!("has {len} elements, but shape {shape:?} needs {count}"),
        });
    }
    Ok(())
}

/// The element count of `shape`, which must fit in `isize` (as ndarray requires, counting only
/// the non-empty axes).
fn element_count(shape: &[usize]) -> Result<usize> {
    let nonzero = shape.iter().filter(|&&d| d != 0).try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match nonzero {
        Some(n) if n <= isize::MAX as usize => Ok(if shape.contains(&0) { 0 } else { n }),
        _ => Err(Error::Overflow {
            op: UNNAMED,
            arg: "shape",
            what: format!(
                "the element count of shape {shape:?} (its non-empty axes multiplied) exceeds isize::MAX = {}",
                isize::MAX
            ),
        }),
    }
}

/// Checks `shape` and `strides` (in elements, one per dimension) against a slice of `len`
/// elements before ndarray sees them, so that every error carries the values, and returns the
/// strides ndarray is to use.
///
/// The contract: a stride is a forward step, in elements. On an axis of length 0 or 1 it is
/// never taken and may be anything (it becomes 0). On a longer axis it must keep every element
/// inside the data: the offset of the last element, `Σ stride·(length − 1)`, must be below `len`
/// ([`Error::Layout`] otherwise, [`Error::Overflow`] when the sum itself overflows). With
/// `exclusive` (outputs), no two elements may share memory, by ndarray's rule: in ascending order
/// of stride, each stride must exceed the offset of the last element of the axes before it.
fn check_strides(shape: &[usize], strides: &[usize], len: usize, exclusive: bool) -> Result<Vec<usize>> {
    if shape.len() != strides.len() {
        return Err(Error::Layout {
            op: UNNAMED,
            arg: "strides",
            reason: format!(
                "has {} entries {strides:?}, expected one per dimension of shape {shape:?}",
                strides.len()
            ),
        });
    }
    let count = element_count(shape)?;
    let used: Vec<usize> = (0..shape.len()).map(|a| if shape[a] >= 2 { strides[a] } else { 0 }).collect();
    let last = (0..shape.len())
        .try_fold(0usize, |acc, a| acc.checked_add(used[a].checked_mul(shape[a].saturating_sub(1))?))
        .ok_or_else(|| Error::Overflow {
            op: UNNAMED,
            arg: "strides",
            what: format!(
                "strides {strides:?} with shape {shape:?} place the last element at \
                 Σ stride·(length − 1), which exceeds usize::MAX"
            ),
        })?;
    // ndarray's rule for empty arrays: the offset may reach the end of the data, not pass it.
    if (count > 0 && last >= len) || (count == 0 && last > len) {
        // The axis that steps farthest (its last element's offset alone).
        let reach = |a: usize| used[a].saturating_mul(shape[a].saturating_sub(1));
        let culprit = (0..shape.len())
            .max_by_key(|&a| reach(a))
            .map(|a| {
                format!("; axis {a} alone (length {}, stride {}) reaches {}", shape[a], strides[a], reach(a))
            })
            .unwrap_or_default();
        return Err(Error::Layout {
            op: UNNAMED,
            arg: "strides",
            reason: format!(
                "{strides:?} with shape {shape:?} place the last element at offset {last}, past the \
                 end of the data ({len} elements, so offsets below {len}){culprit}"
            ),
        });
    }
    if exclusive && count > 0 {
        check_no_alias(shape, strides, &used)?;
    }
    Ok(used)
}

/// [`check_strides`]' aliasing rule, with a pair of positions that share an element when one is
/// easy to find (a zero stride, or a multiple of one stride equal to a multiple of another).
fn check_no_alias(shape: &[usize], strides: &[usize], used: &[usize]) -> Result<()> {
    let mut axes: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] >= 2).collect();
    axes.sort_by_key(|&a| used[a]);
    let mut span = 0usize; // offset of the last element of the axes so far (fits: checked above)
    for &a in &axes {
        if used[a] > span {
            span += used[a] * (shape[a] - 1);
            continue;
        }
        let witness = match alias_witness(shape, used) {
            Witness::Pair(p, q, offset) => {
                format!(": positions {p:?} and {q:?} both address element {offset}")
            }
            Witness::NoneExists => "; no two elements share memory here, but ndarray's mutable views need \
                                    the rule"
                .to_string(),
            Witness::NotFound => String::new(),
        };
        return Err(Error::Layout {
            op: UNNAMED,
            arg: "strides",
            reason: format!(
                "{strides:?} with shape {shape:?} do not give every element memory of its own, as an \
                 output needs (in ascending order of stride, each stride must exceed the offset {span} \
                 of the last element of the axes before it, and stride {} of axis {a} does not){witness}",
                used[a]
            ),
        });
    }
    Ok(())
}

/// What [`alias_witness`] found.
enum Witness {
    /// Two positions (in the caller's rank) that share an element, and its offset.
    Pair(Vec<usize>, Vec<usize>, usize),
    /// Every element has its own offset (the rule is stricter than aliasing).
    NoneExists,
    /// Too many elements to look at each, and no simple pair.
    NotFound,
}

/// Two positions that share an element: along one axis of stride 0, `i` steps along one axis
/// and `j` along another with `i·s = j·t`, or, for up to [`WITNESS_SEARCH`] elements, any two.
fn alias_witness(shape: &[usize], used: &[usize]) -> Witness {
    let position = |e: usize| position_in(e, shape);
    let at = |moves: &[(usize, usize)]| {
        let mut p = vec![0; shape.len()];
        for &(axis, steps) in moves {
            p[axis] = steps;
        }
        p
    };
    let long: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] >= 2).collect();
    if let Some(&a) = long.iter().find(|&&a| used[a] == 0) {
        return Witness::Pair(at(&[]), at(&[(a, 1)]), 0);
    }
    for (x, &a) in long.iter().enumerate() {
        for &b in &long[x + 1..] {
            let (s, t) = (used[a], used[b]);
            let Some(lcm) = s.checked_mul(t / gcd(s, t)) else { continue };
            let (i, j) = (lcm / s, lcm / t);
            if i < shape[a] && j < shape[b] {
                return Witness::Pair(at(&[(a, i)]), at(&[(b, j)]), lcm);
            }
        }
    }
    let count: usize = shape.iter().product();
    if count > WITNESS_SEARCH {
        return Witness::NotFound;
    }
    // Every element's offset (all below the data's length, checked before), sorted.
    let mut offsets: Vec<(usize, usize)> =
        (0..count).map(|e| (position(e).iter().zip(used).map(|(i, s)| i * s).sum(), e)).collect();
    offsets.sort_unstable();
    match offsets.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Witness::Pair(position(w[0].1), position(w[1].1), w[0].0),
        None => Witness::NoneExists,
    }
}

/// Elements up to which [`alias_witness`] compares every pair of offsets.
const WITNESS_SEARCH: usize = 1 << 12;

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<'a, E: Element> TensorRef<'a, E> {
    /// A contiguous, row-major view of `data` with `shape` (3-D `[C, H, W]` or 4-D `[N, C, H, W]`).
    ///
    /// # Errors
    /// [`Error::Rank`] for another rank, [`Error::Layout`] if `data.len()` differs from the
    /// element count, [`Error::Overflow`] if the count does not fit.
    pub fn from_slice(data: &'a [E], shape: &[usize]) -> Result<Self> {
        const OP: &str = "TensorRef::from_slice";
        check_rank("shape", shape)
            .and_then(|()| check_exact_len(shape, data.len()))
            .map_err(|e| e.named(OP))?;
        let view =
            ArrayView::from_shape(as_4d(shape), data).map_err(|e| Error::from_shape(OP, "shape", e))?;
        Ok(Self { view, dims: Dims::of(shape) })
    }

    /// A view of `data` with `shape` and `strides` (in elements, one per dimension). Strides may be
    /// zero (broadcast) or overlap: the view is only read.
    ///
    /// A stride is a forward step: element `[i, j, ..]` is `data[i·s0 + j·s1 + ..]`, and every
    /// element must lie inside `data`. A stride is only taken on an axis of length 2 or more; on
    /// an axis of length 0 or 1 it may be anything. (Reversed views come from ndarray views with
    /// negative strides, through [`TensorRef::from_view`].)
    ///
    /// ```
    /// use poolgrad::{Error, TensorRef};
    /// let data = [0.0f32; 8];
    /// // The last element of [1, 2, 2] with strides [4, 3, 1] is at 3 + 1 = 4: inside.
    /// assert!(TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[4, 3, 1]).is_ok());
    /// // A stride of usize::MAX is a step far past the end, never a step back.
    /// let e = TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[4, usize::MAX, 1]).unwrap_err();
    /// assert!(matches!(e, Error::Overflow { arg: "strides", .. }), "{e}");
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Rank`]; [`Error::Layout`] (`strides`) if the stride count differs from the rank or
    /// the last element, at `Σ stride·(length − 1)`, lies past the end of `data`;
    /// [`Error::Overflow`] (`shape`) if the element count exceeds `isize::MAX`, (`strides`) if
    /// that sum exceeds `usize::MAX`.
    pub fn from_slice_with_strides(data: &'a [E], shape: &[usize], strides: &[usize]) -> Result<Self> {
        const OP: &str = "TensorRef::from_slice_with_strides";
        let strides = check_rank("shape", shape)
            .and_then(|()| check_strides(shape, strides, data.len(), false))
            .map_err(|e| e.named(OP))?;
        let strides4 = strides_4d(shape, &strides).ok_or_else(|| {
            unmerged("strides", shape, &strides.iter().map(|&s| s as isize).collect::<Vec<_>>()).named(OP)
        })?;
        let view = ArrayView::from_shape(as_4d(shape).strides(strides4), data)
            .map_err(|e| Error::from_shape(OP, "strides", e))?;
        Ok(Self { view, dims: Dims::of(shape) })
    }

    /// A view of any 3-D, 4-D or 5-D ndarray array or view (any strides, including negative ones;
    /// a 5-D one whose `D` and `H` axes merge).
    /// For `Ix3` and `Ix4` arrays, `TensorRef::from(&array)` cannot fail.
    ///
    /// # Errors
    /// [`Error::Rank`] for an `IxDyn` array of another rank.
    pub fn from_array<S, D>(array: &'a ArrayBase<S, D>) -> Result<Self>
    where
        S: Data<Elem = E>,
        D: ViewDim,
    {
        Self::named(array.view(), "array").map_err(|e| e.named("TensorRef::from_array"))
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
    /// [`Error::Rank`] for an `IxDyn` view of another rank.
    pub fn from_view<D: ViewDim>(view: ArrayView<'a, E, D>) -> Result<Self> {
        Self::named(view, "view").map_err(|e| e.named("TensorRef::from_view"))
    }

    /// Like [`TensorRef::from_view`], with the argument named in errors (the caller names the
    /// operation).
    pub(crate) fn named<D: Dimension>(view: ArrayView<'a, E, D>, arg: &'static str) -> Result<Self> {
        let (view, dims) = as_nchw(view, arg)?;
        Ok(Self { view, dims })
    }

    /// A view of data whose rank is 3 or 4 by construction (a [`Mask`](crate::Mask)'s bytes,
    /// checked when the mask was made).
    pub(crate) fn of_checked_rank<D: Dimension>(view: ArrayView<'a, E, D>) -> Self {
        Self::named(view, "view").expect("rank 3 or 4, checked when the data was made")
    }

    /// The data as a 4-D ndarray view.
    pub fn view(&self) -> ArrayView4<'a, E> {
        self.view
    }
}

impl<'a, E: Element, M: Memory> TensorRef<'a, E, M> {
    /// A view of `data`, whose 4-D shape was checked by its constructor, with the caller's
    /// shape `dims` (rank 3, 4 or 5, seen as `data`'s shape by [`as_4d`]).
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device memory's views
    pub(crate) fn from_parts(view: M::Ref<'a, E>, dims: &[usize]) -> Self {
        debug_assert_eq!(M::ref_shape(&view), as_4d(dims));
        TensorRef { view, dims: Dims::of(dims) }
    }

    /// The memory-specific view underneath.
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device memory's views
    pub(crate) fn data(&self) -> M::Ref<'a, E> {
        self.view
    }

    /// The shape seen as 4-D `[N, C, H, W]` (`N = 1` for a 3-D tensor; `[N, C, D·H, W]` for a
    /// 5-D one).
    pub fn shape(&self) -> [usize; 4] {
        dims4(M::ref_shape(&self.view))
    }

    /// The shape in the rank the view was built with.
    pub fn dims(&self) -> Vec<usize> {
        self.dims.to_vec()
    }

    /// [`TensorRef::dims`], borrowed.
    pub(crate) fn user_shape(&self) -> &[usize] {
        &self.dims
    }

    /// The rank the view was built with: 3, 4 or 5.
    pub fn ndim(&self) -> usize {
        self.dims.len
    }
}

impl<'a, E: Element> TensorMut<'a, E> {
    /// A contiguous, row-major view of `data` with `shape` (3-D or 4-D).
    ///
    /// # Errors
    /// As [`TensorRef::from_slice`].
    pub fn from_slice(data: &'a mut [E], shape: &[usize]) -> Result<Self> {
        const OP: &str = "TensorMut::from_slice";
        check_rank("shape", shape)
            .and_then(|()| check_exact_len(shape, data.len()))
            .map_err(|e| e.named(OP))?;
        let view =
            ArrayViewMut::from_shape(as_4d(shape), data).map_err(|e| Error::from_shape(OP, "shape", e))?;
        Ok(Self { view, dims: Dims::of(shape), zeroed: false })
    }

    /// A view of `data` with `shape` and `strides` (in elements), under the contract of
    /// [`TensorRef::from_slice_with_strides`]. Unlike an input view, no two elements may share
    /// memory: sorted by stride, the axes of length 2 or more must each step past the last
    /// element of the ones before (so no zero strides, no interleaving).
    ///
    /// # Errors
    /// As [`TensorRef::from_slice_with_strides`], plus [`Error::Layout`] when strides alias.
    pub fn from_slice_with_strides(data: &'a mut [E], shape: &[usize], strides: &[usize]) -> Result<Self> {
        const OP: &str = "TensorMut::from_slice_with_strides";
        let strides = check_rank("shape", shape)
            .and_then(|()| check_strides(shape, strides, data.len(), true))
            .map_err(|e| e.named(OP))?;
        // (The batch axis added to a 3-D shape has length 1: its stride 0 is never taken.)
        let strides4 = strides_4d(shape, &strides).ok_or_else(|| {
            unmerged("strides", shape, &strides.iter().map(|&s| s as isize).collect::<Vec<_>>()).named(OP)
        })?;
        let view = ArrayViewMut::from_shape(as_4d(shape).strides(strides4), data)
            .map_err(|e| Error::from_shape(OP, "strides", e))?;
        Ok(Self { view, dims: Dims::of(shape), zeroed: false })
    }

    /// A writable view of any 3-D or 4-D ndarray array or mutable view. For `Ix3` and `Ix4`
    /// arrays, `TensorMut::from(&mut array)` cannot fail.
    ///
    /// # Errors
    /// [`Error::Rank`] for an `IxDyn` array of another rank.
    pub fn from_array<S, D>(array: &'a mut ArrayBase<S, D>) -> Result<Self>
    where
        S: DataMut<Elem = E>,
        D: ViewDim,
    {
        Self::named(array.view_mut(), "array").map_err(|e| e.named("TensorMut::from_array"))
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
    /// [`Error::Rank`] for an `IxDyn` view of another rank.
    pub fn from_view<D: ViewDim>(view: ArrayViewMut<'a, E, D>) -> Result<Self> {
        Self::named(view, "view").map_err(|e| e.named("TensorMut::from_view"))
    }

    pub(crate) fn named<D: Dimension>(view: ArrayViewMut<'a, E, D>, arg: &'static str) -> Result<Self> {
        let (view, dims) = as_nchw(view, arg)?;
        Ok(Self { view, dims, zeroed: false })
    }

    /// The same tensor, marked as holding only +0: for an array the crate has just allocated
    /// zeroed, and nothing else.
    pub(crate) fn known_zero(mut self) -> Self {
        self.zeroed = true;
        self
    }

    /// Whether every element is known to be +0 ([`TensorMut::known_zero`]).
    pub(crate) fn is_known_zero(&self) -> bool {
        self.zeroed
    }

    /// The data as a 4-D ndarray view.
    pub fn view_mut(&mut self) -> ArrayViewMut4<'_, E> {
        self.view.view_mut()
    }

    pub(crate) fn into_view(self) -> ArrayViewMut4<'a, E> {
        self.view
    }
}

impl<'a, E: Element, M: Memory> TensorMut<'a, E, M> {
    /// A writable view of `data`, whose 4-D shape was checked by its constructor, with the
    /// caller's shape `dims` (as [`TensorRef::from_parts`]).
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device memory's views
    pub(crate) fn from_parts(view: M::Mut<'a, E>, dims: &[usize]) -> Self {
        debug_assert_eq!(M::mut_shape(&view), as_4d(dims));
        TensorMut { view, dims: Dims::of(dims), zeroed: false }
    }

    /// The memory-specific view underneath.
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device memory's views
    pub(crate) fn into_data(self) -> M::Mut<'a, E> {
        self.view
    }

    /// The memory-specific view underneath, borrowed.
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // the device memory's views
    pub(crate) fn data_ref(&self) -> &M::Mut<'a, E> {
        &self.view
    }

    /// The shape seen as 4-D `[N, C, H, W]` (`[N, C, D·H, W]` for a 5-D tensor).
    pub fn shape(&self) -> [usize; 4] {
        dims4(M::mut_shape(&self.view))
    }

    /// The shape in the rank the view was built with.
    pub fn dims(&self) -> Vec<usize> {
        self.dims.to_vec()
    }

    /// [`TensorMut::dims`], borrowed.
    pub(crate) fn user_shape(&self) -> &[usize] {
        &self.dims
    }

    /// The rank the view was built with: 3, 4 or 5.
    pub fn ndim(&self) -> usize {
        self.dims.len
    }

    /// A read-only view of the same data.
    pub fn as_ref(&self) -> TensorRef<'_, E, M> {
        TensorRef { view: M::read(&self.view), dims: self.dims }
    }

    /// A shorter-lived writable view of the same data.
    pub fn reborrow(&mut self) -> TensorMut<'_, E, M> {
        TensorMut { view: M::reborrow(&mut self.view), dims: self.dims, zeroed: self.zeroed }
    }
}

/// `Ix4` views and arrays convert without a check: their rank is right by construction.
///
/// ```
/// use ndarray::{Array3, Array4};
/// use poolgrad::{TensorMut, TensorRef};
/// let x = Array4::<f32>::zeros((2, 3, 4, 5));
/// let t = TensorRef::from(&x);
/// assert_eq!(t.shape(), [2, 3, 4, 5]);
/// let mut y = Array3::<f32>::zeros((3, 4, 5));
/// let m: TensorMut<'_, f32> = (&mut y).into();
/// assert_eq!(m.dims(), vec![3, 4, 5]);
/// ```
impl<'a, E: Element> From<ArrayView4<'a, E>> for TensorRef<'a, E> {
    fn from(view: ArrayView4<'a, E>) -> Self {
        TensorRef { view, dims: Dims::of(view.shape()) }
    }
}

/// `[C, H, W]` views convert without a check, as `[1, C, H, W]`.
impl<'a, E: Element> From<ArrayView<'a, E, Ix3>> for TensorRef<'a, E> {
    fn from(view: ArrayView<'a, E, Ix3>) -> Self {
        TensorRef { dims: Dims::of(view.shape()), view: view.insert_axis(Axis(0)) }
    }
}

impl<'a, E: Element, S: Data<Elem = E>> From<&'a ArrayBase<S, Ix4>> for TensorRef<'a, E> {
    fn from(array: &'a ArrayBase<S, Ix4>) -> Self {
        array.view().into()
    }
}

impl<'a, E: Element, S: Data<Elem = E>> From<&'a ArrayBase<S, Ix3>> for TensorRef<'a, E> {
    fn from(array: &'a ArrayBase<S, Ix3>) -> Self {
        array.view().into()
    }
}

impl<'a, E: Element> From<ArrayViewMut4<'a, E>> for TensorMut<'a, E> {
    fn from(view: ArrayViewMut4<'a, E>) -> Self {
        TensorMut { dims: Dims::of(view.shape()), view, zeroed: false }
    }
}

impl<'a, E: Element> From<ArrayViewMut<'a, E, Ix3>> for TensorMut<'a, E> {
    fn from(view: ArrayViewMut<'a, E, Ix3>) -> Self {
        TensorMut { dims: Dims::of(view.shape()), view: view.insert_axis(Axis(0)), zeroed: false }
    }
}

impl<'a, E: Element, S: DataMut<Elem = E>> From<&'a mut ArrayBase<S, Ix4>> for TensorMut<'a, E> {
    fn from(array: &'a mut ArrayBase<S, Ix4>) -> Self {
        array.view_mut().into()
    }
}

impl<'a, E: Element, S: DataMut<Elem = E>> From<&'a mut ArrayBase<S, Ix3>> for TensorMut<'a, E> {
    fn from(array: &'a mut ArrayBase<S, Ix3>) -> Self {
        array.view_mut().into()
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

/// The position, in the caller's rank, of element `e` of a row-major `[n, c, h, w]` tensor.
pub(crate) fn position(e: usize, dims: [usize; 4], ndim: usize) -> Vec<usize> {
    let [n, c, h, w] = dims;
    user_dims(&unflatten(e, (n, c, h, w)), ndim)
}

/// The position, in the caller's shape `dims`, of element `e` of a row-major tensor of that
/// shape (any rank).
pub(crate) fn position_in(mut e: usize, dims: &[usize]) -> Vec<usize> {
    let mut position = vec![0; dims.len()];
    for (p, &len) in position.iter_mut().zip(dims).rev() {
        *p = e % len.max(1);
        e /= len.max(1);
    }
    position
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

    /// Strides of 2^63 and more are steps far past the end, never steps back (ndarray would read
    /// `usize::MAX` as -1).
    #[test]
    fn huge_strides_are_forward_steps() {
        let data = [0.0f32; 8];
        let e = TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[4, usize::MAX, 1]).unwrap_err();
        let Error::Overflow { arg: "strides", what, .. } = &e else { panic!("{e:?}") };
        assert!(what.contains(&format!("strides [4, {}, 1] with shape [1, 2, 2]", usize::MAX)), "{e}");
        let mut out = [0.0f32; 8];
        let e =
            TensorMut::from_slice_with_strides(&mut out, &[1, 2, 2], &[4, usize::MAX - 1, 1]).unwrap_err();
        let Error::Layout { arg: "strides", reason, .. } = &e else { panic!("{e:?}") };
        let max = usize::MAX;
        assert!(reason.contains(&format!("at offset {max}, past the end of the data (8 elements")), "{e}");
        assert!(
            reason.contains(&format!("axis 1 alone (length 2, stride {}) reaches {}", max - 1, max - 1)),
            "{e}"
        );
        // 2^63 exactly: the smallest stride ndarray would take as negative.
        let e = TensorRef::from_slice_with_strides(&data, &[2, 1, 1, 1], &[1 << 63, 1, 1, 1]).unwrap_err();
        assert!(matches!(e, Error::Layout { arg: "strides", .. }), "{e:?}");
        // On an axis of length 1 a stride is never taken: anything goes, and reads stay right.
        let data: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let t = TensorRef::from_slice_with_strides(&data, &[1, 2, 2], &[usize::MAX, 4, 1]).unwrap();
        assert_eq!(t.view().iter().copied().collect::<Vec<_>>(), [0.0, 1.0, 4.0, 5.0]);
        let mut out = [0.0f32; 4];
        let mut t = TensorMut::from_slice_with_strides(&mut out, &[1, 1, 2, 2], &[usize::MAX, 1 << 63, 2, 1])
            .unwrap();
        t.view_mut()[[0, 0, 1, 0]] = 3.0;
        assert_eq!(out, [0.0, 0.0, 3.0, 0.0]);
    }

    #[test]
    fn layout_errors_carry_shape_strides_and_length() {
        let data = [0.0f32; 10];
        let e = TensorRef::from_slice_with_strides(&data, &[1, 3, 4], &[12, 4, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "TensorRef::from_slice_with_strides: `strides` [12, 4, 1] with shape [1, 3, 4] place the last \
             element at offset 11, past the end of the data (10 elements, so offsets below 10); axis 1 \
             alone (length 3, stride 4) reaches 8"
        );
        // The shape, not the strides, overflows: the error names the shape.
        let e = TensorRef::from_slice_with_strides(&data, &[1 << 32, 1 << 32, 1], &[0, 0, 0]).unwrap_err();
        assert_eq!(
            e,
            Error::Overflow {
                op: "TensorRef::from_slice_with_strides",
                arg: "shape",
                what: format!(
                    "the element count of shape [4294967296, 4294967296, 1] (its non-empty axes \
                     multiplied) exceeds isize::MAX = {}",
                    isize::MAX
                ),
            }
        );
        let e = TensorRef::from_slice(&data, &[1 << 62, 2, 2]).unwrap_err();
        assert!(matches!(e, Error::Overflow { arg: "shape", .. }), "{e:?}");
        let e = TensorRef::from_slice_with_strides(&data, &[1, 1, 3], &[1]).unwrap_err();
        assert!(
            e.to_string().contains("has 1 entries [1], expected one per dimension of shape [1, 1, 3]"),
            "{e}"
        );
    }

    /// The last element may sit at the data's last index, not past it; an empty view's offsets
    /// may reach the end of the data (ndarray's rule), not pass it.
    #[test]
    fn views_end_exactly_at_the_data() {
        let data = [0.0f32; 6];
        // Last element of [1, 2, 3] with strides [6, 3, 1]: 3 + 2 = 5.
        assert!(TensorRef::from_slice_with_strides(&data[..6], &[1, 2, 3], &[6, 3, 1]).is_ok());
        let e = TensorRef::from_slice_with_strides(&data[..5], &[1, 2, 3], &[6, 3, 1]).unwrap_err();
        assert!(e.to_string().contains("at offset 5, past the end of the data (5 elements"), "{e}");
        // Empty: [0, 2, 3] reaches offset 5 too.
        for (len, ok) in [(4, false), (5, true), (6, true)] {
            let result = TensorRef::from_slice_with_strides(&data[..len], &[0, 2, 3], &[0, 3, 1]);
            assert_eq!(result.is_ok(), ok, "len {len}: {result:?}");
            if let Err(e) = result {
                assert!(e.to_string().contains("at offset 5, past the end of the data (4 elements"), "{e}");
            }
            let mut out = [0.0f32; 6];
            let result = TensorMut::from_slice_with_strides(&mut out[..len], &[0, 2, 3], &[0, 3, 1]);
            assert_eq!(result.is_ok(), ok, "len {len} (output)");
        }
    }

    /// ndarray counts elements in `isize`: 2^63 of them are too many, even where `usize` holds
    /// the count.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn element_counts_stop_at_isize_max() {
        let data = [0.0f32; 1];
        for (shape, what) in [
            (&[1usize << 32, 1 << 31, 1][..], "[4294967296, 2147483648, 1]"),
            (&[0, 1 << 32, 1 << 31][..], "[0, 4294967296, 2147483648]"),
        ] {
            let e = TensorRef::from_slice_with_strides(&data, shape, &[0, 0, 0]).unwrap_err();
            assert!(matches!(e, Error::Overflow { arg: "shape", .. }), "{e:?}");
            assert!(e.to_string().contains(what), "{e}");
            let e = TensorRef::from_slice(&data, shape).unwrap_err();
            assert!(matches!(e, Error::Overflow { arg: "shape", .. }), "{e:?}");
        }
        // One below: fine for broadcast views.
        let shape = [1usize << 31, 1 << 31, 1];
        assert!(TensorRef::from_slice_with_strides(&data, &shape, &[0, 0, 0]).is_ok());
    }

    #[test]
    fn aliasing_errors_name_two_positions_that_share_an_element() {
        let mut data = [0.0f32; 16];
        let op = "TensorMut::from_slice_with_strides";
        // A zero stride on an axis of length 3.
        let e = TensorMut::from_slice_with_strides(&mut data, &[1, 1, 3, 3], &[0, 0, 0, 1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{op}: `strides` [0, 0, 0, 1] with shape [1, 1, 3, 3] do not give every element memory of \
                 its own, as an output needs (in ascending order of stride, each stride must exceed the \
                 offset 0 of the last element of the axes before it, and stride 0 of axis 2 does not): \
                 positions [0, 0, 0, 0] and [0, 0, 1, 0] both address element 0"
            )
        );
        // Rows of 4 columns that start 2 apart: row 1 starts at column 2 of row 0.
        let e = TensorMut::from_slice_with_strides(&mut data, &[1, 2, 4], &[8, 2, 1]).unwrap_err();
        assert!(
            e.to_string().ends_with(
                "the offset 3 of the last element of the axes before it, and stride 2 of axis 1 does not): \
                 positions [0, 1, 0] and [0, 0, 2] both address element 2"
            ),
            "{e}"
        );
        // Three axes together: 3 = 2 + 1.
        let e = TensorMut::from_slice_with_strides(&mut data, &[2, 2, 2], &[3, 2, 1]).unwrap_err();
        assert!(
            e.to_string().ends_with(
                "the offset 3 of the last element of the axes before it, and stride 3 of axis 0 does not): \
                 positions [0, 1, 1] and [1, 0, 0] both address element 3"
            ),
            "{e}"
        );
        // Interleaved axes that never collide (offsets 2i + 3j: 0, 3, 2, 5, 4, 7), which the rule
        // still refuses: the message says so.
        let e = TensorMut::from_slice_with_strides(&mut data, &[1, 3, 2], &[6, 2, 3]).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("no two elements share memory here, but ndarray's mutable views need the rule"),
            "{e}"
        );
        // Not aliasing: each stride steps past the others' last element.
        assert!(TensorMut::from_slice_with_strides(&mut data, &[2, 2, 2], &[1, 2, 4]).is_ok());
    }

    /// The witness search at its edges: a pair from a common multiple of two strides (found
    /// before any listing, so in axis order), none where the rule is stricter than aliasing, and
    /// the listing of every offset up to exactly `WITNESS_SEARCH` elements.
    #[test]
    fn alias_witnesses_at_their_edges() {
        let mut data = vec![0.0f32; 5000];
        let message = |shape: &[usize], strides: &[usize], data: &mut [f32]| {
            TensorMut::from_slice_with_strides(data, shape, strides).unwrap_err().to_string()
        };
        // Strides 4 and 6 (gcd 2): 3 steps of 4 = 2 steps of 6 = 12.
        let e = message(&[1, 4, 3], &[100, 4, 6], &mut data);
        assert!(e.ends_with("positions [0, 3, 0] and [0, 0, 2] both address element 12"), "{e}");
        // With only 3 rows, 3 steps of 4 do not exist: offsets 4i + 6j are all distinct.
        let e = message(&[1, 3, 3], &[20, 4, 6], &mut data);
        assert!(
            e.ends_with("no two elements share memory here, but ndarray's mutable views need the rule"),
            "{e}"
        );
        // 3 = 2 + 1 across three axes (no pair), found by listing all 2·2·2·512 = 4096 offsets.
        let e = message(&[2, 2, 2, 512], &[3, 2, 1, 8], &mut data);
        assert!(e.ends_with("positions [0, 1, 1, 0] and [1, 0, 0, 0] both address element 3"), "{e}");
        // Past the listing's limit: the rule alone.
        let e = message(&[2, 2, 2, 513], &[3, 2, 1, 8], &mut data);
        assert!(e.ends_with("and stride 3 of axis 0 does not)"), "{e}");
        // An empty output shares nothing, whatever its strides.
        assert!(TensorMut::from_slice_with_strides(&mut data[..1], &[0, 2, 2], &[0, 0, 1]).is_ok());
    }

    #[test]
    fn zero_strides_are_fine_for_inputs_but_not_outputs() {
        let mut data = vec![1.0f32; 4];
        assert!(TensorRef::from_slice_with_strides(&data, &[1, 1, 3, 3], &[0, 0, 0, 1]).is_ok());
        let e = TensorMut::from_slice_with_strides(&mut data, &[1, 1, 3, 3], &[0, 0, 0, 1]).unwrap_err();
        assert!(e.to_string().contains("both address element 0"), "{e}");
    }

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
