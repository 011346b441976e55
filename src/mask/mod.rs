//! The Ascend int8 mask of `aclnnMaxPool2dWithMask`: the [`Mask`] type and its views. What every
//! layout provides is in [`layout`]; each layout is a file ([`i32_argmax`], [`bitmask`]), the only
//! one that knows where its values or bits are stored; [`codec`] splits an encoding into parts
//! for threads.

mod bitmask;
mod codec;
mod i32_argmax;
mod layout;

use core::marker::PhantomData;

use ndarray::{Array, ArrayBase, Data, Dimension};

use crate::alloc::into_array;
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::params::MaxPool2dParams;
use crate::shape::MaxPoolGeometry;
use crate::tensor::{Host, Memory, TensorMut, TensorRef};

pub use bitmask::Bitmask;
#[cfg(test)]
pub(crate) use bitmask::write_word;
pub(crate) use bitmask::{read_word, read_word_quads, read_words, row_bands, word_offset};
pub(crate) use codec::{EncodeParts, encode};
pub use i32_argmax::I32Argmax;
pub(crate) use i32_argmax::{i32_in_place, i32_prefix, i32_prefix_mut, read_i32_prefix};
pub(crate) use layout::MaskBytes;
pub use layout::MaskLayout;
pub(crate) use layout::internal::{LayoutImpl, Run};

/// A read-only view of a mask in layout `L`, for the two-phase API.
#[derive(Debug)]
pub struct MaskRef<'a, L: MaskLayout, M: Memory = Host> {
    pub(crate) bytes: TensorRef<'a, i8, M>,
    layout: PhantomData<fn() -> L>,
}

impl<L: MaskLayout, M: Memory> Clone for MaskRef<'_, L, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L: MaskLayout, M: Memory> Copy for MaskRef<'_, L, M> {}

impl<'a, L: MaskLayout, M: Memory> MaskRef<'a, L, M> {
    /// Treats `bytes` as a mask in `layout`; its shape is checked by the plan.
    ///
    /// ```
    /// use poolgrad::{Bitmask, MaskRef, TensorRef};
    /// let bytes = ndarray::Array3::<i8>::zeros((1, 4, 64));
    /// let mask = MaskRef::new(TensorRef::from(&bytes), Bitmask);
    /// assert_eq!(mask.bytes().dims(), vec![1, 4, 64]);
    /// ```
    pub fn new(bytes: TensorRef<'a, i8, M>, _layout: L) -> Self {
        MaskRef { bytes, layout: PhantomData }
    }

    /// The bytes.
    pub fn bytes(&self) -> TensorRef<'a, i8, M> {
        self.bytes
    }
}

/// A writable view of a mask in layout `L`, for the two-phase API.
#[derive(Debug)]
pub struct MaskMut<'a, L: MaskLayout, M: Memory = Host> {
    pub(crate) bytes: TensorMut<'a, i8, M>,
    layout: PhantomData<fn() -> L>,
}

impl<'a, L: MaskLayout, M: Memory> MaskMut<'a, L, M> {
    /// Treats `bytes` as a mask in `layout`; its shape is checked by the plan.
    pub fn new(bytes: TensorMut<'a, i8, M>, _layout: L) -> Self {
        MaskMut { bytes, layout: PhantomData }
    }
}

/// An Ascend int8 mask in layout `L`, with the pooling it belongs to.
///
/// ```
/// use ndarray::array;
/// use poolgrad::{Bitmask, I32Argmax, Mask, MaxPool2dParams};
/// let params = MaxPool2dParams::new([2, 2]);
/// let indices = array![[[1i64, 6], [8, 10]]]; // from a 4x4 input
/// let a2 = Mask::<I32Argmax, _>::from_indices(&indices, &params, &[1, 4, 4])?;
/// assert_eq!(a2.as_array().shape(), &[1, 4, 64]);
/// assert_eq!(&a2.as_array().as_slice().unwrap()[..8], &[1, 0, 0, 0, 6, 0, 0, 0]);
/// let legacy = Mask::<Bitmask, _>::from_indices(&indices, &params, &[1, 4, 4])?;
/// assert_eq!(legacy.to_indices::<i64>()?, indices);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct Mask<L: MaskLayout, D: Dimension> {
    data: Array<i8, D>,
    geometry: MaxPoolGeometry,
    layout: PhantomData<fn() -> L>,
}

impl<L: MaskLayout, D: Dimension> Clone for Mask<L, D> {
    fn clone(&self) -> Self {
        Mask { data: self.data.clone(), geometry: self.geometry, layout: PhantomData }
    }
}

/// Equal when the bytes and the pooling they belong to are equal.
impl<L: MaskLayout, D: Dimension> PartialEq for Mask<L, D> {
    fn eq(&self, other: &Self) -> bool {
        self.geometry == other.geometry && self.data == other.data
    }
}

impl<L: MaskLayout, D: Dimension> Mask<L, D> {
    /// Wraps raw mask bytes (for example copied off a device) for a pooling with `params` of an
    /// input of shape `input_shape`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `data` has the mask shape of that pooling; the errors of
    /// the parameters.
    pub fn from_raw(data: Array<i8, D>, params: &MaxPool2dParams, input_shape: &[usize]) -> Result<Self> {
        const OP: &str = "Mask::from_raw";
        let geometry = MaxPoolGeometry::for_mask(OP, "input_shape", params, input_shape)?;
        L::check(&geometry).map_err(|e| e.named(OP))?;
        crate::shape::same_shape(OP, "data", data.shape(), &geometry.dims())?;
        Ok(Mask { data, geometry, layout: PhantomData })
    }

    /// A mask of zero bytes for a pooling with `params` of an input of shape `input_shape` (the
    /// rank of `D`), in `layout`: the buffer [`max_pool2d_with_mask_into`](crate::max_pool2d_with_mask_into)
    /// refills.
    ///
    /// ```
    /// use poolgrad::{I32Argmax, Mask, MaxPool2dParams};
    /// let mask = Mask::<_, ndarray::Ix4>::zeros(&MaxPool2dParams::new([2, 2]), &[2, 3, 4, 4], I32Argmax)?;
    /// assert_eq!(mask.as_array().shape(), &[2, 3, 4, 64]);
    /// assert_eq!(mask.pooled_shape(), vec![2, 3, 2, 2]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of the parameters and of the layout ([`Mask::from_raw`]'s), [`Error::Rank`]
    /// for an `input_shape` of another rank than `D`'s, [`Error::Allocation`].
    pub fn zeros(params: &MaxPool2dParams, input_shape: &[usize], _layout: L) -> Result<Self> {
        const OP: &str = "Mask::zeros";
        if let Some(rank) = D::NDIM.filter(|&rank| rank != input_shape.len()) {
            let expected = if rank == 3 { "3 (the mask's Ix3)" } else { "4 (the mask's Ix4)" };
            let (got, shape) = (input_shape.len(), input_shape.to_vec());
            return Err(Error::Rank { op: OP, arg: "input_shape", expected, got, shape });
        }
        let geometry = MaxPoolGeometry::for_mask(OP, "input_shape", params, input_shape)?;
        L::check(&geometry).map_err(|e| e.named(OP))?;
        let data = crate::alloc::zeroed_array::<i8, D>(OP, "mask", &geometry.dims())?;
        Ok(Mask { data, geometry, layout: PhantomData })
    }

    /// Encodes flat arg-max indices (shape `[N, C, Ho, Wo]`) as a mask.
    ///
    /// Indices in any memory layout (strided, broadcast, reversed) are read in place, in row-major
    /// order; only the mask is allocated.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for indices of another shape, [`Error::IndexOutOfRange`] for an
    /// index outside the plane, [`Error::IndexNotInWindow`] (`Bitmask`) for an index outside its
    /// window (the first such index in row-major order); [`Error::Allocation`] when the mask does
    /// not fit in memory.
    pub fn from_indices<I, S>(
        indices: &ArrayBase<S, D>,
        params: &MaxPool2dParams,
        input_shape: &[usize],
    ) -> Result<Self>
    where
        I: ArgmaxIndex,
        S: Data<Elem = I>,
    {
        const OP: &str = "Mask::from_indices";
        let geometry = MaxPoolGeometry::for_mask(OP, "input_shape", params, input_shape)?;
        L::check(&geometry).map_err(|e| e.named(OP))?;
        crate::shape::same_shape(OP, "indices", indices.shape(), &geometry.pooled_dims())?;
        let bytes = geometry.bytes().unwrap_or(0);
        let mut data = crate::alloc::zeroed_vec::<i8>(OP, "mask", bytes)?;
        match indices.as_slice() {
            Some(flat) => encode::<L, _>("indices", &geometry, flat, &mut data),
            // Strided or broadcast indices: read in place, in row-major order (the mask is
            // zeroed, as the in-order encoder needs).
            None => L::encode_in_order(Run::whole(&geometry, "indices"), indices.iter().copied(), &mut data),
        }
        .map_err(|e| e.named(OP))?;
        let data = into_array(OP, "mask", data, &geometry.dims())?;
        Ok(Mask { data, geometry, layout: PhantomData })
    }

    /// Decodes the flat arg-max index of every output position (shape `[N, C, Ho, Wo]`).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an `I32Argmax` value outside the plane;
    /// [`Error::MaskContent`] for a `Bitmask` position whose channel has no bit, several bits or
    /// a bit in padding; [`Error::Allocation`] when the indices do not fit in memory.
    pub fn to_indices<I: ArgmaxIndex>(&self) -> Result<Array<I, D>> {
        const OP: &str = "Mask::to_indices";
        let g = &self.geometry;
        let count = g.planes() * g.positions();
        let mut out = crate::alloc::zeroed_vec::<I>(OP, "indices", count)?;
        L::decode(g, &MaskBytes::of(&self.data), &mut out).map_err(|e| e.named(OP))?;
        into_array(OP, "indices", out, &g.pooled_dims())
    }

    /// Every (output element, input position) pair the mask selects, in row-major output order:
    /// `element` indexes the pooled output `[N, C, Ho, Wo]` flattened, `flat = ih * W + iw` the
    /// input plane. An `I32Argmax` mask selects one position per output; a `Bitmask` selects one
    /// per set bit (so possibly none or several), skipping bits that point into padding and bits
    /// of channels past `C`. This is what the backward sums over.
    ///
    /// ```
    /// use ndarray::array;
    /// use poolgrad::{Bitmask, Mask, MaxPool2dParams};
    /// let mask = Mask::<Bitmask, _>::from_indices(&array![[[1i64, 6]]], &MaxPool2dParams::new([2, 2]), &[1, 2, 4])?;
    /// assert_eq!(mask.selected()?, vec![(0, 1), (1, 6)]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// Reads the mask in place whatever its memory layout, and allocates only the result, at its
    /// exact size.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an `I32Argmax` value outside the plane (found before
    /// anything is allocated); [`Error::Allocation`] when the pairs do not fit in memory.
    pub fn selected(&self) -> Result<Vec<(usize, usize)>> {
        const OP: &str = "Mask::selected";
        // Two passes: the first finds the first bad value (before anything is allocated) and
        // counts the pairs, so that the result is allocated once, at its exact size.
        let (g, bytes) = (&self.geometry, MaskBytes::of(&self.data));
        let visit =
            |f: &mut dyn FnMut(usize, usize)| L::visit_selected(g, &bytes, f).map_err(|e| e.named(OP));
        let mut count = 0usize;
        visit(&mut |_, _| count += 1)?;
        let mut pairs = Vec::new();
        pairs.try_reserve_exact(count).map_err(|_| Error::Allocation {
            op: OP,
            arg: "pairs",
            bytes: count.saturating_mul(size_of::<(usize, usize)>()),
        })?;
        visit(&mut |e, flat| pairs.push((e, flat)))?;
        Ok(pairs)
    }

    /// The mask bytes.
    pub fn as_array(&self) -> &Array<i8, D> {
        &self.data
    }

    /// The mask bytes, by value.
    pub fn into_array(self) -> Array<i8, D> {
        self.data
    }

    /// The pooling parameters the mask belongs to.
    pub fn params(&self) -> &MaxPool2dParams {
        &self.geometry.params
    }

    /// The shape of the pooled input.
    pub fn input_shape(&self) -> Vec<usize> {
        self.geometry.input_dims()
    }

    /// The shape of the pooled output, `[N, C, Ho, Wo]`.
    pub fn pooled_shape(&self) -> Vec<usize> {
        self.geometry.pooled_dims()
    }

    /// A view for the two-phase API.
    pub fn view(&self) -> MaskRef<'_, L> {
        MaskRef::new(TensorRef::of_checked_rank(self.data.view()), L::default())
    }

    /// The same selections in layout `L2`, as the device that reads it needs (for example a
    /// legacy [`Bitmask`] for an `I32Argmax` mask).
    ///
    /// ```
    /// use ndarray::Array4;
    /// use poolgrad::{Bitmask, I32Argmax, Mask, MaxPool2dParams};
    /// let x = Array4::from_shape_fn((1, 3, 5, 5), |(_, c, h, w)| ((c * 7 + h * 3 + w * 5) % 11) as f32);
    /// let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    /// let m = poolgrad::max_pool2d_with_mask(&x, &params, I32Argmax)?;
    /// let legacy: Mask<Bitmask, _> = m.mask.convert()?;
    /// assert_eq!(legacy.to_indices::<i64>()?, m.mask.to_indices::<i64>()?);
    /// assert_eq!(legacy.convert::<I32Argmax>()?, m.mask);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// The errors of [`Mask::to_indices`] on this mask; [`Error::InvalidParameter`] when an
    /// `I32Argmax` mask cannot hold this pooling's values (1x1 kernels on larger outputs);
    /// [`Error::IndexNotInWindow`] for an `I32Argmax` value outside its window, which a `Bitmask`
    /// cannot encode (no forward writes one, but bytes given to [`Mask::from_raw`] may hold one);
    /// [`Error::Allocation`].
    pub fn convert<L2: MaskLayout>(&self) -> Result<Mask<L2, D>> {
        const OP: &str = "Mask::convert";
        let g = &self.geometry;
        L2::check(g).map_err(|e| e.named(OP))?;
        let mut indices = crate::alloc::zeroed_vec::<i64>(OP, "mask", g.planes() * g.positions())?;
        L::decode(g, &MaskBytes::of(&self.data), &mut indices).map_err(|e| e.named(OP))?;
        let mut data = crate::alloc::zeroed_vec::<i8>(OP, "mask", g.bytes().unwrap_or(0))?;
        encode::<L2, _>("mask", g, &indices, &mut data).map_err(|e| e.named(OP))?;
        let data = into_array(OP, "mask", data, &g.dims())?;
        Ok(Mask::from_parts(data, *g))
    }

    /// The mask bytes, writable, for a forward that refills them.
    pub(crate) fn bytes_mut(&mut self) -> ndarray::ArrayViewMut<'_, i8, D> {
        self.data.view_mut()
    }

    pub(crate) fn from_parts(data: Array<i8, D>, geometry: MaxPoolGeometry) -> Self {
        Mask { data, geometry, layout: PhantomData }
    }
}
