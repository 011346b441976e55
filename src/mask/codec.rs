//! Encoding flat arg-max indices as mask bytes, in parts that threads can take independently
//! (what the parts are, and how each is encoded, is the layout's: [`LayoutImpl`]).
//!
//! [`LayoutImpl`]: super::LayoutImpl

use core::marker::PhantomData;
use core::ops::{Range, RangeFrom};

use super::layout::MaskLayout;
use super::layout::internal::Run;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::shape::MaxPoolGeometry;

/// Writes `indices` (`N·C·Ho·Wo` flat arg-max values, row-major) into the contiguous mask `out`
/// in layout `L`; every other byte becomes zero.
///
/// Errors: the first index (row-major) that layout `L` cannot hold.
pub(crate) fn encode<L: MaskLayout, I: ArgmaxIndex>(
    arg: &'static str,
    g: &MaxPoolGeometry,
    indices: &[I],
    out: &mut [i8],
) -> Result<()> {
    let parts = EncodeParts::<L>::of(g, indices.len(), out.len());
    let body = parts.zero_tail(out);
    parts.encode_runs(arg, 0..parts.count(), indices, body)
}

/// How an encoding in layout `L` splits into independent parts (for threads): each part owns a
/// run of the indices and a run of the mask bytes ([`LayoutImpl::part_indices`](super::LayoutImpl::part_indices),
/// [`LayoutImpl::part_bytes`](super::LayoutImpl::part_bytes)). The bytes past the last part ([`EncodeParts::tail`]) are only
/// zeroed.
#[derive(Debug)]
pub(crate) struct EncodeParts<L> {
    g: MaxPoolGeometry,
    /// Parts; indices encoded; the mask's bytes.
    count: usize,
    values: usize,
    bytes: usize,
    layout: PhantomData<fn() -> L>,
}

impl<L> Clone for EncodeParts<L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for EncodeParts<L> {}

impl<L: MaskLayout> EncodeParts<L> {
    /// The parts of the encoding of `values` indices into a mask of `bytes` bytes.
    pub(crate) fn of(g: &MaxPoolGeometry, values: usize, bytes: usize) -> Self {
        EncodeParts { g: *g, count: L::part_count(g, values), values, bytes, layout: PhantomData }
    }

    /// The parts of a whole mask of `bytes` bytes, which encodes every plane's positions.
    pub(crate) fn whole(g: &MaxPoolGeometry, bytes: usize) -> Self {
        Self::of(g, g.planes() * g.positions(), bytes)
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The elements (row-major, in the indices) of part `part`.
    pub(crate) fn indices(&self, part: usize) -> Range<usize> {
        L::part_indices(&self.g, self.values, part)
    }

    /// The bytes (in the mask) of part `part`.
    pub(crate) fn bytes(&self, part: usize) -> Range<usize> {
        L::part_bytes(&self.g, self.values, part)
    }

    /// Encodes parts `runs` (consecutive) of `indices` into `out`, their bytes (from the first
    /// part's first byte on).
    pub(crate) fn encode_runs<I: ArgmaxIndex>(
        &self,
        arg: &'static str,
        runs: Range<usize>,
        indices: &[I],
        out: &mut [i8],
    ) -> Result<()> {
        let base = self.bytes(runs.start).start;
        for part in runs {
            let bytes = self.bytes(part);
            let out = &mut out[bytes.start - base..bytes.end - base];
            self.encode_part(arg, part, &indices[self.indices(part)], out)?;
        }
        Ok(())
    }

    /// Encodes part `part` from its own indices (elements [`EncodeParts::indices`] of the whole)
    /// into its own bytes ([`EncodeParts::bytes`] of the mask).
    pub(crate) fn encode_part<I: ArgmaxIndex>(
        &self,
        arg: &'static str,
        part: usize,
        indices: &[I],
        out: &mut [i8],
    ) -> Result<()> {
        let (first, base) = (self.indices(part).start, self.bytes(part).start);
        L::encode_part(Run { g: &self.g, arg, first, base }, indices, out)
    }

    /// Zeroes the bytes of `out` after the last part and returns those before them, which the
    /// parts own.
    pub(crate) fn zero_tail<'m>(&self, out: &'m mut [i8]) -> &'m mut [i8] {
        let (body, tail) = self.split_tail(out);
        tail.fill(0);
        body
    }

    /// `out` split into the bytes the parts own and those after the last part (to be zeroed).
    pub(crate) fn split_tail<'m>(&self, out: &'m mut [i8]) -> (&'m mut [i8], &'m mut [i8]) {
        out.split_at_mut(self.tail().start.min(out.len()))
    }

    /// The bytes after the last part.
    pub(crate) fn tail(&self) -> RangeFrom<usize> {
        match self.count {
            0 => 0..,
            n => self.bytes(n - 1).end.min(self.bytes)..,
        }
    }
}
