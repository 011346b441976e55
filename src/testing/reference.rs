//! Reference implementations of the six operations, of the 3-D and 1-D poolings
//! ([`max_pool3d_with_indices`], [`adaptive_max_pool3d`], [`max_pool3d_backward`],
//! [`max_pool1d_with_indices`], [`adaptive_max_pool1d`], [`max_pool1d_backward`]), of max
//! unpooling ([`max_unpool2d`], [`max_unpool3d`] and their backwards) and of the double
//! backwards ([`max_pool2d_double_backward`], [`max_pool3d_double_backward`]): obvious
//! loops, sums in `f64`, written from the definitions and not from the kernels. They are the
//! definition of the semantics; use them to check any implementation (this crate's kernels
//! included).
//!
//! - A window is scanned in row-major order; the first maximum wins; a NaN is taken and a later
//!   NaN replaces it; padding is never read. The index is `ih * W + iw` inside the `(n, c)`
//!   plane, and starts at the window's first input (so a window of `-inf` points there).
//! - Adaptive window `i` of an axis `n` long pooled to `m` is `⌊i·n/m⌋ .. ⌈(i+1)·n/m⌉`; a max-pool
//!   window reads `o·s − p + i·d` for `i < k`, skipping positions outside the input. Output sizes
//!   come from [`MaxPool2dParams::output_size`].
//! - A backward adds each `grad_output[n, c, oh, ow]` at its selected position; the sum of each
//!   input position is formed in `f64` and rounded to `T` once. (poolgrad's kernels sum in `f32`
//!   or `f64` in row-major order, so `f32`, `f16` and `bf16` results may differ from the reference
//!   by the `f32` summation error: compare with [`Tolerance::for_dtype`](super::Tolerance::for_dtype).)
//!
//! Inputs are ndarray arrays or views of rank 3 (`[C, H, W]`) or 4 (`[N, C, H, W]`); results have
//! the input's rank. Indices come back as `i64`.

use ndarray::{Array, Array4, ArrayRef, ArrayView4, Dimension};

use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::mask::{Mask, MaskLayout};
use crate::params::MaxPool2dParams;
use crate::tensor::TensorRef;
use crate::{PoolFloat, alloc};

/// Which pooling a window belongs to.
///
/// ```
/// use poolgrad::testing::reference::Pooling;
/// let global = Pooling::Adaptive([1, 1]);
/// assert_eq!(global.window([2, 2], [1, 1], 0, 0).len(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Adaptive max pooling to `[Ho, Wo]`.
    Adaptive([usize; 2]),
    /// Max pooling with these parameters.
    Max(MaxPool2dParams),
}

impl Pooling {
    /// The pooled size `[Ho, Wo]` of an `[H, W]` plane.
    ///
    /// ```
    /// use poolgrad::MaxPool2dParams;
    /// use poolgrad::testing::reference::Pooling;
    /// assert_eq!(Pooling::Adaptive([3, 2]).output_size([5, 5])?, [3, 2]);
    /// assert_eq!(Pooling::Max(MaxPool2dParams::new([2, 2])).output_size([5, 5])?, [2, 2]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// A zero adaptive output size, or the errors of [`MaxPool2dParams::output_size`].
    pub fn output_size(&self, input: [usize; 2]) -> Result<[usize; 2]> {
        match self {
            Pooling::Adaptive(size) => {
                crate::shape::output_size("reference", "output_size", *size)?;
                Ok(*size)
            }
            Pooling::Max(params) => params.output_size(input),
        }
    }

    /// The input positions `(ih, iw)` window `(oh, ow)` reads, in row-major order.
    ///
    /// ```
    /// use poolgrad::MaxPool2dParams;
    /// use poolgrad::testing::reference::Pooling;
    /// let p = Pooling::Max(MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]));
    /// assert_eq!(p.window([4, 4], [2, 2], 0, 0), vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    /// assert_eq!(Pooling::Adaptive([1, 3]).window([1, 5], [1, 3], 0, 1), vec![(0, 1), (0, 2), (0, 3)]);
    /// ```
    pub fn window(
        &self,
        [h, w]: [usize; 2],
        [ho, wo]: [usize; 2],
        oh: usize,
        ow: usize,
    ) -> Vec<(usize, usize)> {
        let rows = self.axis(0, h, ho, oh);
        let cols = self.axis(1, w, wo, ow);
        rows.iter().flat_map(|&ih| cols.iter().map(move |&iw| (ih, iw))).collect()
    }

    fn axis(&self, a: usize, n: usize, m: usize, o: usize) -> Vec<usize> {
        match self {
            Pooling::Adaptive(_) => axis_taps(o, n, Some(m), [0; 4]),
            Pooling::Max(p) => {
                axis_taps(o, n, None, [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]])
            }
        }
    }
}

/// Values and `i64` indices of a pooling of a 4-D view.
pub(crate) fn forward4<T: PoolFloat>(
    x: ArrayView4<'_, T>,
    pooling: &Pooling,
) -> Result<(Array4<T>, Array4<i64>)> {
    let (n, c, h, w) = x.dim();
    let [ho, wo] = pooling.output_size([h, w])?;
    let mut values = alloc::zeroed_array::<T, ndarray::Ix4>("reference", "output", &[n, c, ho, wo])?;
    let mut indices = alloc::zeroed_array::<i64, ndarray::Ix4>("reference", "indices", &[n, c, ho, wo])?;
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                for ow in 0..wo {
                    let taps = pooling.window([h, w], [ho, wo], oh, ow);
                    let Some(&(ih0, iw0)) = taps.first() else {
                        return Err(Error::InvalidParameter {
                            op: "reference",
                            arg: "params",
                            expected: "every window to read at least one input".into(),
                            got: format!("window ({oh}, {ow}) reads none"),
                        });
                    };
                    let mut best = f64::NEG_INFINITY;
                    let mut best_at = ih0 * w + iw0;
                    for (ih, iw) in taps {
                        let v = x[[b, ch, ih, iw]].to_f64_exact();
                        if v > best || v.is_nan() {
                            best = v;
                            best_at = ih * w + iw;
                        }
                    }
                    values[[b, ch, oh, ow]] = x[[b, ch, best_at / w, best_at % w]];
                    indices[[b, ch, oh, ow]] = best_at as i64;
                }
            }
        }
    }
    Ok((values, indices))
}

/// Sums `grad_output` at the selected positions in f64 and rounds once.
fn backward4<T: PoolFloat>(
    go: ArrayView4<'_, T>,
    input: [usize; 4],
    selected: impl Iterator<Item = (usize, usize)>,
) -> Result<Array4<T>> {
    let [n, c, h, w] = input;
    let (_, _, ho, wo) = go.dim();
    let mut sums = alloc::zeroed_array::<f64, ndarray::Ix4>("reference", "grad_input", &[n, c, h, w])?;
    for (e, flat) in selected {
        let (plane, q) = (e / (ho * wo), e % (ho * wo));
        let (b, ch) = (plane / c, plane % c);
        sums[[b, ch, flat / w, flat % w]] += go[[b, ch, q / wo, q % wo]].to_f64_exact();
    }
    let mut out = alloc::zeroed_array::<T, ndarray::Ix4>("reference", "grad_input", &[n, c, h, w])?;
    out.zip_mut_with(&sums, |o, &s| *o = T::round_from_f64(s));
    Ok(out)
}

fn view4<'a, T: crate::Element, D: Dimension>(
    a: &'a ArrayRef<T, D>,
    arg: &'static str,
) -> Result<TensorRef<'a, T>> {
    // The views take 5-D arrays too (the 3-D poolings'); the references are the 2-D ones.
    if !(3..=4).contains(&a.ndim()) {
        let expected = crate::tensor::RANKS;
        return Err(Error::Rank { op: "reference", arg, expected, got: a.ndim(), shape: a.shape().to_vec() });
    }
    TensorRef::named(a.view(), arg).map_err(|e| e.named("reference"))
}

fn restore<T, D: Dimension>(a: Array4<T>, ndim: usize) -> Result<Array<T, D>> {
    let dims = crate::tensor::user_dims(a.shape(), ndim);
    let data = a.into_raw_vec_and_offset().0;
    alloc::into_array("reference", "result", data, &dims)
}

/// Flat indices as `(element, position)` pairs, read in place: every index is checked against
/// the plane first (the first bad one, in row-major order, is the error), so nothing is
/// allocated for them.
fn index_pairs<'a, I: ArgmaxIndex>(
    indices: &TensorRef<'a, I>,
    plane: usize,
) -> Result<impl Iterator<Item = (usize, usize)> + 'a> {
    let view = indices.view();
    if let Some((e, &i)) = view.iter().enumerate().find(|(_, i)| i.flat_in(plane).is_none()) {
        let dims = indices.dims();
        return Err(crate::shape::index_error("reference", "indices", (e, i.to_i64()), &dims, plane));
    }
    Ok(view.into_iter().enumerate().filter_map(move |(e, &i)| Some((e, i.flat_in(plane)?))))
}

fn backward_with_indices<T, I, D>(
    grad_output: TensorRef<'_, T>,
    self_: TensorRef<'_, T>,
    indices: TensorRef<'_, I>,
    pooling: &Pooling,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    D: Dimension,
{
    let [n, c, h, w] = self_.shape();
    let [ho, wo] = pooling.output_size([h, w])?;
    let pooled = crate::tensor::with_spatial([n, c, h, w], [ho, wo], self_.ndim());
    crate::shape::input_shape("reference", "grad_output", &grad_output, &pooled)?;
    crate::shape::input_shape("reference", "indices", &indices, &pooled)?;
    let pairs = index_pairs(&indices, h * w)?;
    restore(backward4(grad_output.view(), [n, c, h, w], pairs)?, self_.ndim())
}

/// Reference adaptive max pooling: `(values, indices)`.
///
/// ```
/// use ndarray::array;
/// let x = array![[[3.0f32, 1.0, 4.0, 1.0, 5.0]]];
/// let (v, i) = poolgrad::testing::reference::adaptive_max_pool2d(&x, [1, 3])?;
/// assert_eq!((v, i), (array![[[3.0, 4.0, 5.0]]], array![[[0, 2, 4]]]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 3 or 4, or a zero output size.
pub fn adaptive_max_pool2d<T, D>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 2],
) -> Result<(Array<T, D>, Array<i64, D>)>
where
    T: PoolFloat,
    D: Dimension,
{
    let x = view4(input, "input")?;
    let (v, i) = forward4(x.view(), &Pooling::Adaptive(output_size))?;
    Ok((restore(v, x.ndim())?, restore(i, x.ndim())?))
}

/// Reference backward of adaptive max pooling.
///
/// ```
/// use ndarray::array;
/// let x = array![[[0.0f32, 0.0, 0.0]]];
/// let g = array![[[1.0f32, 2.0]]];
/// let gx = poolgrad::testing::reference::adaptive_max_pool2d_backward(&g, &x, &array![[[1i64, 1]]])?;
/// assert_eq!(gx, array![[[0.0, 3.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// Ranks, shapes, or an index outside its plane.
pub fn adaptive_max_pool2d_backward<T, I, D>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    D: Dimension,
{
    let go = view4(grad_output, "grad_output")?;
    let [_, _, ho, wo] = go.shape();
    backward_with_indices(
        go,
        view4(self_, "self_")?,
        view4(indices, "indices")?,
        &Pooling::Adaptive([ho, wo]),
    )
}

/// Reference max pooling with flat indices.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[1.0f64, 2.0], [4.0, 3.0]]];
/// let (v, i) = poolgrad::testing::reference::max_pool2d_with_indices(&x, &MaxPool2dParams::new([2, 2]))?;
/// assert_eq!((v, i), (array![[[4.0]]], array![[[2]]]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 3 or 4, or parameters the input does not allow.
pub fn max_pool2d_with_indices<T, D>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
) -> Result<(Array<T, D>, Array<i64, D>)>
where
    T: PoolFloat,
    D: Dimension,
{
    let x = view4(input, "input")?;
    let (v, i) = forward4(x.view(), &Pooling::Max(*params))?;
    Ok((restore(v, x.ndim())?, restore(i, x.ndim())?))
}

/// Reference backward of max pooling with flat indices.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool2dParams;
/// let x = array![[[1.0f64, 2.0], [4.0, 3.0]]];
/// let gx = poolgrad::testing::reference::max_pool2d_with_indices_backward(
///     &array![[[5.0]]], &x, &array![[[2i32]]], &MaxPool2dParams::new([2, 2]))?;
/// assert_eq!(gx, array![[[0.0, 0.0], [5.0, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// Ranks, shapes, parameters, or an index outside its plane.
pub fn max_pool2d_with_indices_backward<T, I, D>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    params: &MaxPool2dParams,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    I: ArgmaxIndex,
    D: Dimension,
{
    backward_with_indices(
        view4(grad_output, "grad_output")?,
        view4(self_, "self_")?,
        view4(indices, "indices")?,
        &Pooling::Max(*params),
    )
}

/// Reference max pooling with an Ascend mask: the reference indices, encoded by [`Mask`] (whose
/// documentation defines both byte layouts).
///
/// ```
/// use ndarray::array;
/// use poolgrad::{Bitmask, MaxPool2dParams};
/// let x = array![[[1.0f32, 2.0], [4.0, 3.0]]];
/// let (_, mask) = poolgrad::testing::reference::max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), Bitmask)?;
/// assert_eq!(mask.to_indices::<i64>()?, array![[[2]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_pool2d_with_indices`], plus the mask operations' constraints (dilation 1).
pub fn max_pool2d_with_mask<T, L, D>(
    input: &ArrayRef<T, D>,
    params: &MaxPool2dParams,
    _layout: L,
) -> Result<(Array<T, D>, Mask<L, D>)>
where
    T: PoolFloat,
    L: MaskLayout,
    D: Dimension,
{
    let (values, indices) = max_pool2d_with_indices(input, params)?;
    let mask = Mask::from_indices(&indices, params, input.shape())?;
    Ok((values, mask))
}

/// Reference backward through an Ascend mask: every position the mask selects
/// ([`Mask::selected`]) receives its output's gradient.
///
/// ```
/// use ndarray::array;
/// use poolgrad::{I32Argmax, MaxPool2dParams};
/// let params = MaxPool2dParams::new([2, 2]);
/// let x = array![[[1.0f32, 2.0], [4.0, 3.0]]];
/// let (_, mask) = poolgrad::testing::reference::max_pool2d_with_mask(&x, &params, I32Argmax)?;
/// let gx = poolgrad::testing::reference::max_pool2d_with_mask_backward(&array![[[1.5f32]]], &x, &mask)?;
/// assert_eq!(gx, array![[[0.0, 0.0], [1.5, 0.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// Ranks, shapes, or an `I32Argmax` value outside its plane.
pub fn max_pool2d_with_mask_backward<T, L, D>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    mask: &Mask<L, D>,
) -> Result<Array<T, D>>
where
    T: PoolFloat,
    L: MaskLayout,
    D: Dimension,
{
    let go = view4(grad_output, "grad_output")?;
    let x = view4(self_, "self_")?;
    crate::shape::same_shape("reference", "self_", &x.dims(), &mask.input_shape())?;
    crate::shape::input_shape("reference", "grad_output", &go, &mask.pooled_shape())?;
    let selected = mask.selected()?;
    restore(backward4(go.view(), x.shape(), selected.into_iter())?, x.ndim())
}

// ---------------------------------------------------------------------------------------------
// The 3-D poolings, max unpooling and the double backward: the same rules over volumes.

/// The input positions one output reads along one axis of `n` inputs: adaptive window `o` of
/// `out` (`⌊o·n/out⌋ .. ⌈(o+1)·n/out⌉`, in 128 bits), or max-pooling taps `o·s − p + i·d` that
/// fall inside the input (the kernel may be far larger than the input, so only those are
/// visited). Every reference's windows, 2-D and 3-D.
fn axis_taps(o: usize, n: usize, adaptive: Option<usize>, [k, s, p, d]: [usize; 4]) -> Vec<usize> {
    match adaptive {
        Some(out) => {
            let (o, n, m) = (o as u128, n as u128, out as u128);
            ((o * n / m) as usize..((o + 1) * n).div_ceil(m) as usize).collect()
        }
        None => {
            let (first, count) = crate::geometry::pool_window_taps(o, n, k, s, p, d);
            (0..count).map(|i| first + i * d).collect()
        }
    }
}

/// `[N, C, D, H, W]` of a 3-D pooling's array (rank 4 or 5), C, D, H, W non-empty.
fn volume_shape<E, D: Dimension>(a: &ArrayRef<E, D>, arg: &'static str) -> Result<[usize; 5]> {
    crate::shape::volume_dims("reference", arg, a.shape())
}

/// A 3-D pooling of `input`, window by window: `adaptive` to `size`, or with `params`.
fn forward3d<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    size: [usize; 3],
    params: Option<&crate::MaxPool3dParams>,
) -> Result<(Array<T, D>, Array<i64, D>)> {
    let [n, c, d, h, w] = volume_shape(input, "input")?;
    let out = match params {
        Some(p) => p.output_size_for("reference", "input", [d, h, w])?,
        None => {
            crate::shape::output_size3("reference", "output_size", size)?;
            size
        }
    };
    let x = input.as_standard_layout();
    let xs = x.as_slice().unwrap_or(&[]);
    let axis = |a: usize, o: usize, len: usize| match params {
        Some(p) => axis_taps(o, len, None, [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]]),
        None => axis_taps(o, len, Some(out[a]), [0; 4]),
    };
    let pooled = out.iter().try_fold(n * c, |a, &o| a.checked_mul(o));
    let len =
        pooled.ok_or_else(|| Error::Overflow { op: "reference", arg: "output", what: format!("{out:?}") })?;
    let mut values = crate::alloc::zeroed_vec::<T>("reference", "output", len)?;
    let mut indices = crate::alloc::zeroed_vec::<i64>("reference", "indices", len)?;
    let per = out[0] * out[1] * out[2];
    for (e, (v, i)) in values.iter_mut().zip(indices.iter_mut()).enumerate() {
        let (volume, o) = (e / per, e % per);
        let (od, oh, ow) = (o / (out[1] * out[2]), (o / out[2]) % out[1], o % out[2]);
        let (ds, hs, ws) = (axis(0, od, d), axis(1, oh, h), axis(2, ow, w));
        let (mut best, mut at) = (f64::NEG_INFINITY, (ds[0] * h + hs[0]) * w + ws[0]);
        for &z in &ds {
            for &y in &hs {
                for &xx in &ws {
                    let t = (z * h + y) * w + xx;
                    let value = xs[volume * d * h * w + t].to_f64_exact();
                    if value > best || value.is_nan() {
                        (best, at) = (value, t);
                    }
                }
            }
        }
        *v = xs[volume * d * h * w + at];
        *i = at as i64;
    }
    let dims = crate::op::unpooled_dims(input.shape(), out);
    Ok((
        alloc::into_array("reference", "output", values, &dims)?,
        alloc::into_array("reference", "indices", indices, &dims)?,
    ))
}

/// Reference adaptive 3-D max pooling of `[N, C, D, H, W]` or `[C, D, H, W]`: `(values, indices)`,
/// each window scanned in row-major `(d, h, w)` order, indices flat in the volume.
///
/// ```
/// use ndarray::Array5;
/// let x = Array5::from_shape_fn((1, 1, 2, 2, 2), |(_, _, d, h, w)| (d * 4 + h * 2 + w) as f32);
/// let (v, i) = poolgrad::testing::reference::adaptive_max_pool3d(&x, [1, 1, 1])?;
/// assert_eq!((v[[0, 0, 0, 0, 0]], i[[0, 0, 0, 0, 0]]), (7.0, 7));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 4 or 5, an empty `C`, `D`, `H` or `W`, a zero output size.
pub fn adaptive_max_pool3d<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    output_size: [usize; 3],
) -> Result<(Array<T, D>, Array<i64, D>)> {
    forward3d(input, output_size, None)
}

/// Reference 3-D max pooling with indices: the windows of [`crate::MaxPool3dParams`].
///
/// ```
/// use ndarray::Array5;
/// use poolgrad::MaxPool3dParams;
/// let x = Array5::from_shape_fn((1, 1, 2, 2, 2), |(_, _, d, h, w)| (d * 4 + h * 2 + w) as f32);
/// let p = MaxPool3dParams::new([1, 2, 2]);
/// let (v, i) = poolgrad::testing::reference::max_pool3d_with_indices(&x, &p)?;
/// assert_eq!(v.iter().copied().collect::<Vec<_>>(), [3.0, 7.0]);
/// assert_eq!(i.iter().copied().collect::<Vec<_>>(), [3, 7]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`adaptive_max_pool3d`], and the parameter errors of
/// [`MaxPoolParams::output_size`](crate::MaxPoolParams::output_size).
pub fn max_pool3d_with_indices<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    params: &crate::MaxPool3dParams,
) -> Result<(Array<T, D>, Array<i64, D>)> {
    forward3d(input, [0; 3], Some(params))
}

/// Reference backward of the 3-D poolings (adaptive or not: the indices say where): each
/// gradient added at its index, the sums formed in `f64` and rounded to `T` once.
///
/// ```
/// use ndarray::Array5;
/// let x = Array5::<f32>::zeros((1, 1, 1, 2, 2));
/// let (g, i) = (Array5::from_elem((1, 1, 1, 1, 2), 1.5f32), Array5::from_elem((1, 1, 1, 1, 2), 3i64));
/// let gx = poolgrad::testing::reference::max_pool3d_backward(&g, &x, &i)?;
/// assert_eq!(gx[[0, 0, 0, 1, 1]], 3.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 4 or 5, shapes that disagree, an index outside its volume.
pub fn max_pool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    let [n, c, d, h, w] = volume_shape(self_, "self_")?;
    let [.., od, oh, ow] = volume_shape(grad_output, "grad_output")?;
    let pooled = crate::op::unpooled_dims(self_.shape(), [od, oh, ow]);
    crate::shape::same_shape("reference", "grad_output", grad_output.shape(), &pooled)?;
    crate::shape::same_shape("reference", "indices", indices.shape(), &pooled)?;
    let volume = d * h * w;
    let mut sums = crate::alloc::zeroed_vec::<f64>("reference", "grad_input", n * c * volume)?;
    let per = od * oh * ow;
    for (e, (g, i)) in grad_output.iter().zip(indices.iter()).enumerate() {
        let at = i.flat_in(volume).ok_or_else(|| {
            let position = crate::tensor::position_in(e, &pooled);
            Error::IndexOutOfRange {
                op: "reference",
                arg: "indices",
                position,
                value: i.to_i64(),
                plane: volume,
            }
        })?;
        sums[(e / per) * volume + at] += g.to_f64_exact();
    }
    let data = sums.into_iter().map(T::round_from_f64).collect();
    alloc::into_array("reference", "grad_input", data, self_.shape())
}

// The 1-D poolings: the same rules along one axis.

/// A 1-D pooling of `input` (`[N, C, L]` or `[C, L]`), line by line: `adaptive` to `size`, or with
/// `params`.
fn forward1d<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    size: usize,
    params: Option<&crate::MaxPool1dParams>,
) -> Result<(Array<T, D>, Array<i64, D>)> {
    let [n, c, l] = crate::shape::line_dims("reference", "input", input.shape())?;
    let out = match params {
        Some(p) => p.output_size_for("reference", "input", [l])?[0],
        None if size == 0 => {
            return Err(Error::InvalidParameter {
                op: "reference",
                arg: "output_size",
                expected: "at least 1".into(),
                got: "0".into(),
            });
        }
        None => size,
    };
    let x = input.as_standard_layout();
    let xs = x.as_slice().unwrap_or(&[]);
    let taps = |o: usize| match params {
        Some(p) => axis_taps(o, l, None, [p.kernel()[0], p.stride()[0], p.padding()[0], p.dilation()[0]]),
        None => axis_taps(o, l, Some(out), [0; 4]),
    };
    let len = (n * c).checked_mul(out).ok_or_else(|| Error::Overflow {
        op: "reference",
        arg: "output",
        what: format!("{n} x {c} x {out}"),
    })?;
    let mut values = crate::alloc::zeroed_vec::<T>("reference", "output", len)?;
    let mut indices = crate::alloc::zeroed_vec::<i64>("reference", "indices", len)?;
    for (e, (v, i)) in values.iter_mut().zip(indices.iter_mut()).enumerate() {
        let (line, o) = (e / out, e % out);
        let taps = taps(o);
        let (mut best, mut at) = (f64::NEG_INFINITY, taps[0]);
        for t in taps {
            let value = xs[line * l + t].to_f64_exact();
            if value > best || value.is_nan() {
                (best, at) = (value, t);
            }
        }
        *v = xs[line * l + at];
        *i = at as i64;
    }
    let dims = crate::op::unpooled_dims(input.shape(), [out]);
    Ok((
        alloc::into_array("reference", "output", values, &dims)?,
        alloc::into_array("reference", "indices", indices, &dims)?,
    ))
}

/// Reference 1-D max pooling with indices of `[N, C, L]` or `[C, L]`: `(values, indices)`, each
/// window scanned in order, indices flat in the line.
///
/// ```
/// use ndarray::array;
/// use poolgrad::MaxPool1dParams;
/// let x = array![[[1.0f32, 5.0, 2.0, 5.0, 0.0]]];
/// let (v, i) = poolgrad::testing::reference::max_pool1d_with_indices(&x, &MaxPool1dParams::new([2]).with_stride([2]))?;
/// assert_eq!((v, i), (array![[[5.0, 5.0]]], array![[[1, 3]]]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 2 or 3, an empty `C` or `L`, and the parameter errors of
/// [`MaxPoolParams::output_size`](crate::MaxPoolParams::output_size).
pub fn max_pool1d_with_indices<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    params: &crate::MaxPool1dParams,
) -> Result<(Array<T, D>, Array<i64, D>)> {
    forward1d(input, 0, Some(params))
}

/// Reference adaptive 1-D max pooling of `[N, C, L]` or `[C, L]` to `output_size` windows.
///
/// ```
/// use ndarray::array;
/// let x = array![[1.0f32, 3.0, 2.0]];
/// let (v, i) = poolgrad::testing::reference::adaptive_max_pool1d(&x, 2)?;
/// assert_eq!((v, i), (array![[3.0, 3.0]], array![[1, 1]]));
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 2 or 3, an empty `C` or `L`, an output size of 0.
pub fn adaptive_max_pool1d<T: PoolFloat, D: Dimension>(
    input: &ArrayRef<T, D>,
    output_size: usize,
) -> Result<(Array<T, D>, Array<i64, D>)> {
    forward1d(input, output_size, None)
}

/// Reference backward of the 1-D poolings (adaptive or not: the indices say where): each
/// gradient added at its index, the sums formed in `f64` and rounded to `T` once.
///
/// ```
/// use ndarray::array;
/// let x = array![[0.0f32, 0.0, 0.0]];
/// let gx = poolgrad::testing::reference::max_pool1d_backward(&array![[1.5f32, 2.0]], &x, &array![[1i64, 1]])?;
/// assert_eq!(gx, array![[0.0, 3.5, 0.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// A rank other than 2 or 3, shapes that disagree, an index outside its line.
pub fn max_pool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &ArrayRef<T, D>,
    self_: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    let [n, c, l] = crate::shape::line_dims("reference", "self_", self_.shape())?;
    let [.., out] = crate::shape::line_dims("reference", "grad_output", grad_output.shape())?;
    let pooled = crate::op::unpooled_dims(self_.shape(), [out]);
    crate::shape::same_shape("reference", "grad_output", grad_output.shape(), &pooled)?;
    crate::shape::same_shape("reference", "indices", indices.shape(), &pooled)?;
    let mut sums = crate::alloc::zeroed_vec::<f64>("reference", "grad_input", n * c * l)?;
    for (e, (g, i)) in grad_output.iter().zip(indices.iter()).enumerate() {
        let at = i.flat_in(l).ok_or_else(|| Error::IndexOutOfRange {
            op: "reference",
            arg: "indices",
            position: crate::tensor::position_in(e, &pooled),
            value: i.to_i64(),
            plane: l,
        })?;
        sums[(e / out.max(1)) * l + at] += g.to_f64_exact();
    }
    let data = sums.into_iter().map(T::round_from_f64).collect();
    alloc::into_array("reference", "grad_input", data, self_.shape())
}

// Max unpooling and the double backward: values moved between pooled positions and the flat
// positions their indices address, over `N` spatial axes.

/// `(planes, pooled, full)` of an indexed operation whose pooled side has shape `pooled_shape`
/// and whose full side has spatial size `full` (checked: ranks, non-empty `C`).
fn indexed_sizes<const N: usize>(pooled_shape: &[usize], full: [usize; N]) -> Result<(usize, usize, usize)> {
    let (n, c, sizes) = crate::shape::spatial_dims::<N>("reference", "indices", pooled_shape)?;
    Ok((n * c, sizes.iter().product(), full.iter().product()))
}

/// The flat position of index `i` (element `e` of indices shaped `shape`) in a plane of `full`.
fn flat_index<I: ArgmaxIndex>(i: I, e: usize, shape: &[usize], full: usize) -> Result<usize> {
    i.flat_in(full).ok_or_else(|| Error::IndexOutOfRange {
        op: "reference",
        arg: "indices",
        position: crate::tensor::position_in(e, shape),
        value: i.to_i64(),
        plane: full,
    })
}

/// Max unpooling over `N` axes: each value written at its index (the last of equal indices in a
/// plane wins), zero elsewhere.
fn unpool<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; N],
) -> Result<Array<T, D>> {
    crate::shape::same_shape("reference", "indices", indices.shape(), input.shape())?;
    let (planes, pooled, full) = indexed_sizes(input.shape(), output_size)?;
    let mut out = crate::alloc::zeroed_vec::<T>("reference", "output", planes * full)?;
    for (e, (&v, &i)) in input.iter().zip(indices.iter()).enumerate() {
        let at = flat_index(i, e, indices.shape(), full)?;
        out[(e / pooled.max(1)) * full + at] = v;
    }
    alloc::into_array("reference", "output", out, &crate::op::unpooled_dims(input.shape(), output_size))
}

/// A gather over `N` axes: element `e` reads `full[idx[e]]` of its plane; with `last_only`, only
/// the last of equal indices in a plane reads, the others are zero.
fn gather<T: PoolFloat, I: ArgmaxIndex, D: Dimension, const N: usize>(
    full_side: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    last_only: bool,
) -> Result<Array<T, D>> {
    let (_, _, sizes) = crate::shape::spatial_dims::<N>("reference", "grad_output", full_side.shape())?;
    let expected = crate::op::unpooled_dims(indices.shape(), sizes);
    crate::shape::same_shape("reference", "grad_output", full_side.shape(), &expected)?;
    let (_, pooled, full) = indexed_sizes(indices.shape(), sizes)?;
    let src = full_side.as_standard_layout();
    let src = src.as_slice().unwrap_or(&[]);
    let idx: Vec<I> = indices.iter().copied().collect();
    let mut out = crate::alloc::zeroed_vec::<T>("reference", "grad_input", idx.len())?;
    let mut later = std::collections::HashSet::new();
    for e in (0..idx.len()).rev() {
        let plane = e / pooled.max(1);
        let at = plane * full + flat_index(idx[e], e, indices.shape(), full)?;
        if !last_only || later.insert(at) {
            out[e] = src[at];
        }
    }
    alloc::into_array("reference", "grad_input", out, indices.shape())
}

/// Reference 2-D max unpooling of `[N, C, H, W]` or `[C, H, W]` to `output_size`: each value
/// written at its flat index in its plane, the last of equal indices winning, zero elsewhere.
///
/// ```
/// use ndarray::array;
/// let y = poolgrad::testing::reference::max_unpool2d(&array![[[1.0f32, 2.0]]], &array![[[3i64, 3]]], [2, 2])?;
/// assert_eq!(y, array![[[0.0, 0.0], [0.0, 2.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// Ranks other than 3 or 4, shapes that disagree, an index outside its plane.
pub fn max_unpool2d<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 2],
) -> Result<Array<T, D>> {
    unpool(input, indices, output_size)
}

/// Reference 3-D max unpooling of `[N, C, D, H, W]` or `[C, D, H, W]` ([`max_unpool2d`]'s rule
/// over volumes).
///
/// ```
/// use ndarray::Array5;
/// let (x, i) = (Array5::from_elem((1, 1, 1, 1, 1), 4.0f32), Array5::from_elem((1, 1, 1, 1, 1), 7i64));
/// let y = poolgrad::testing::reference::max_unpool3d(&x, &i, [2, 2, 2])?;
/// assert_eq!(y[[0, 0, 1, 1, 1]], 4.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d`], for ranks 4 and 5.
pub fn max_unpool3d<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: [usize; 3],
) -> Result<Array<T, D>> {
    unpool(input, indices, output_size)
}

/// Reference backward of [`max_unpool2d`]: each element reads the gradient at its index, but
/// only the last of equal indices in a plane (the one the forward wrote); the others get 0.
///
/// ```
/// use ndarray::array;
/// let g = array![[[0.0f32, 0.0], [0.0, 5.0]]];
/// let gx = poolgrad::testing::reference::max_unpool2d_backward(&g, &array![[[3i64, 3]]])?;
/// assert_eq!(gx, array![[[0.0, 5.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d`].
pub fn max_unpool2d_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 2>(grad_output, indices, true)
}

/// Reference backward of [`max_unpool3d`] ([`max_unpool2d_backward`]'s rule over volumes).
///
/// ```
/// use ndarray::Array5;
/// let g = Array5::from_shape_fn((1, 1, 1, 1, 2), |(.., w)| w as f32 + 1.0);
/// let gx = poolgrad::testing::reference::max_unpool3d_backward(&g, &Array5::from_elem((1, 1, 1, 1, 1), 1i64))?;
/// assert_eq!(gx[[0, 0, 0, 0, 0]], 2.0);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool3d`].
pub fn max_unpool3d_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 3>(grad_output, indices, true)
}

/// Reference double backward of a 2-D max pooling: each pooled element reads the second-order
/// gradient at its arg-max (every element, repeated indices included).
///
/// ```
/// use ndarray::array;
/// let ggx = array![[[0.0f32, 0.0], [0.0, 5.0]]];
/// let ggo = poolgrad::testing::reference::max_pool2d_double_backward(&ggx, &array![[[3i64, 3]]])?;
/// assert_eq!(ggo, array![[[5.0, 5.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d`].
pub fn max_pool2d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 2>(grad_grad_input, indices, false)
}

/// Reference double backward of a 3-D max pooling ([`max_pool2d_double_backward`] over volumes).
///
/// ```
/// use ndarray::Array5;
/// let ggx = Array5::from_shape_fn((1, 1, 1, 1, 2), |(.., w)| w as f32 + 1.0);
/// let ggo = poolgrad::testing::reference::max_pool3d_double_backward(&ggx, &Array5::from_elem((1, 1, 1, 1, 2), 1i64))?;
/// assert_eq!(ggo.iter().copied().collect::<Vec<_>>(), [2.0, 2.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool3d`].
pub fn max_pool3d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 3>(grad_grad_input, indices, false)
}

/// Reference 1-D max unpooling of `[N, C, L]` or `[C, L]` to length `output_size`
/// ([`max_unpool2d`]'s rule along a line).
///
/// ```
/// use ndarray::array;
/// let y = poolgrad::testing::reference::max_unpool1d(&array![[[1.0f32, 2.0]]], &array![[[3i64, 3]]], 4)?;
/// assert_eq!(y, array![[[0.0, 0.0, 0.0, 2.0]]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool2d`], for ranks 2 and 3.
pub fn max_unpool1d<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
    output_size: usize,
) -> Result<Array<T, D>> {
    unpool(input, indices, [output_size])
}

/// Reference backward of [`max_unpool1d`] ([`max_unpool2d_backward`]'s rule along a line).
///
/// ```
/// use ndarray::array;
/// let gx = poolgrad::testing::reference::max_unpool1d_backward(&array![[0.0f32, 5.0, 6.0]], &array![[1i64, 1]])?;
/// assert_eq!(gx, array![[0.0, 5.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool1d`].
pub fn max_unpool1d_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_output: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 1>(grad_output, indices, true)
}

/// Reference double backward of a 1-D max pooling ([`max_pool2d_double_backward`] along a line).
///
/// ```
/// use ndarray::array;
/// let ggo = poolgrad::testing::reference::max_pool1d_double_backward(&array![[0.0f32, 5.0, 6.0]], &array![[1i64, 1]])?;
/// assert_eq!(ggo, array![[5.0, 5.0]]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
///
/// # Errors
/// As [`max_unpool1d`].
pub fn max_pool1d_double_backward<T: PoolFloat, I: ArgmaxIndex, D: Dimension>(
    grad_grad_input: &ArrayRef<T, D>,
    indices: &ArrayRef<I, D>,
) -> Result<Array<T, D>> {
    gather::<T, I, D, 1>(grad_grad_input, indices, false)
}
