//! Workspace layout for CPU kernels: typed regions carved out of the byte workspace, and
//! contiguous staging of views that are not in row-major order.
//!
//! Kernels see only contiguous row-major slices. A view that already is one is used in place; any
//! other (strided, broadcast, negative strides) is copied into a workspace region first (inputs)
//! or computed there and copied out afterwards (outputs). The decision lives here, once.

use bytemuck::{Pod, Zeroable};
use ndarray::{ArrayView4, ArrayViewMut4};

use crate::element::Element;
use crate::error::{Error, Result, UNNAMED};

/// The unit of CPU workspace memory: one cache line, aligned to one. Every region starts on a
/// line of its own.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
pub struct CacheLine([u8; 64]);

/// Regions start at multiples of this many bytes (a cache line).
const ALIGN: usize = size_of::<CacheLine>();

/// The elements of `E` in each task's share of a region split among tasks: `len` rounded up to
/// whole cache lines, so tasks running side by side never write to the same line (false
/// sharing). Kernels use the first `len`.
pub(super) fn task_share<E>(len: usize) -> usize {
    let per_line = (ALIGN / size_of::<E>().max(1)).max(1);
    len.checked_next_multiple_of(per_line).unwrap_or(len)
}

fn region_bytes<E>(len: usize) -> Result<usize> {
    len.checked_mul(size_of::<E>()).and_then(|b| b.checked_next_multiple_of(ALIGN)).ok_or_else(|| {
        Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: format!("{len} elements of {} bytes", size_of::<E>()),
        }
    })
}

/// Phase 1: adds up the regions a kernel will take, in the order it takes them.
#[derive(Debug)]
pub(super) struct Sizer {
    bytes: usize,
}

impl Sizer {
    pub(super) fn new() -> Self {
        Sizer { bytes: 0 }
    }

    /// A region of `len` elements of `E`.
    pub(super) fn region<E>(&mut self, len: usize) -> Result<()> {
        let b = region_bytes::<E>(len)?;
        self.bytes = self.bytes.checked_add(b).ok_or_else(|| Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: "the sum of the workspace regions".into(),
        })?;
        Ok(())
    }

    /// A staging region for `view` if it is not row-major contiguous.
    pub(super) fn stage<E: Element>(&mut self, view: &ArrayView4<'_, E>) -> Result<()> {
        if view.is_standard_layout() { Ok(()) } else { self.region::<E>(view.len()) }
    }

    pub(super) fn total(&self) -> usize {
        self.bytes
    }
}

/// Phase 2: hands out the regions a [`Sizer`] counted, in the same order.
#[derive(Debug)]
pub(super) struct Carver<'w> {
    rest: &'w mut [u8],
}

impl<'w> Carver<'w> {
    pub(super) fn new(memory: &'w mut [CacheLine]) -> Self {
        Carver { rest: bytemuck::cast_slice_mut(memory) }
    }

    pub(super) fn region<E: Element>(&mut self, len: usize) -> Result<&'w mut [E]> {
        let bytes = region_bytes::<E>(len)?;
        let too_small = |got| Error::WorkspaceTooSmall { op: UNNAMED, expected: bytes, got };
        if bytes > self.rest.len() {
            return Err(too_small(self.rest.len()));
        }
        let (head, tail) = core::mem::take(&mut self.rest).split_at_mut(bytes);
        self.rest = tail;
        let used = len * size_of::<E>();
        bytemuck::try_cast_slice_mut(&mut head[..used]).map_err(|_| too_small(bytes))
    }

    /// `view` as a contiguous slice: itself, or a copy in a workspace region.
    pub(super) fn stage<E: Element>(&mut self, view: ArrayView4<'w, E>) -> Result<&'w [E]> {
        if let Some(slice) = view.to_slice() {
            return Ok(slice);
        }
        let region = self.region::<E>(view.len())?;
        let mut staged = ArrayViewMut4::from_shape(view.dim(), region)
            .map_err(|e| Error::from_shape(UNNAMED, "workspace", e))?;
        staged.assign(&view);
        Ok(staged.into_slice().unwrap_or(&mut []))
    }

    /// A contiguous slice to write `target`'s elements into, copied back by [`Output::finish`].
    pub(super) fn output<E: Element>(&mut self, target: ArrayViewMut4<'w, E>) -> Result<Output<'w, E>> {
        if target.is_standard_layout() {
            let direct = target.into_slice().unwrap_or(&mut []);
            return Ok(Output::Direct(direct));
        }
        let stage = self.region::<E>(target.len())?;
        Ok(Output::Staged { stage, target })
    }
}

/// An output being computed: in place, or in a staging region.
#[derive(Debug)]
pub(super) enum Output<'w, E> {
    Direct(&'w mut [E]),
    Staged { stage: &'w mut [E], target: ArrayViewMut4<'w, E> },
}

impl<E: Element> Output<'_, E> {
    /// The row-major slice to write.
    pub(super) fn slice(&mut self) -> &mut [E] {
        match self {
            Output::Direct(s) => s,
            Output::Staged { stage, .. } => stage,
        }
    }

    /// Whether the result is computed in place (not staged).
    pub(super) fn in_place(&self) -> bool {
        matches!(self, Output::Direct(_))
    }

    /// Copies a staged result to its strided destination.
    pub(super) fn finish(self, arg: &'static str) -> Result<()> {
        if let Output::Staged { stage, mut target } = self {
            let staged = ArrayView4::from_shape(target.dim(), &*stage)
                .map_err(|e| Error::from_shape(UNNAMED, arg, e))?;
            target.assign(&staged);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array4, s};

    #[test]
    fn sizer_and_carver_agree() {
        let a = Array4::<f32>::from_shape_fn((2, 3, 4, 5), |(n, c, h, w)| {
            (n * 1000 + c * 100 + h * 10 + w) as f32
        });
        let strided = a.slice(s![.., .., ..;2, ..]);
        let mut sizer = Sizer::new();
        sizer.stage(&a.view()).unwrap();
        sizer.stage(&strided).unwrap();
        sizer.region::<f64>(3).unwrap();
        assert_eq!(sizer.total(), (2 * 3 * 2 * 5 * 4usize).next_multiple_of(64) + 64);
        let mut mem = vec![CacheLine::zeroed(); sizer.total() / ALIGN];
        let mut carver = Carver::new(&mut mem);
        assert_eq!(carver.stage(a.view()).unwrap(), a.as_slice().unwrap());
        let staged = carver.stage(strided).unwrap().to_vec();
        assert_eq!(staged, strided.iter().copied().collect::<Vec<_>>());
        assert_eq!(carver.region::<f64>(3).unwrap().len(), 3);
        assert!(matches!(carver.region::<f64>(1), Err(Error::WorkspaceTooSmall { .. })));
    }

    #[test]
    fn regions_and_task_shares_start_on_lines_of_their_own() {
        assert_eq!(task_share::<f32>(0), 0);
        assert_eq!(task_share::<f32>(1), 16);
        assert_eq!(task_share::<f32>(49), 64);
        assert_eq!(task_share::<f32>(64), 64);
        assert_eq!(task_share::<u8>(65), 128);
        assert_eq!(task_share::<f64>(9), 16);
        // Too long to pad: left as it is (the region's size check reports the overflow).
        assert_eq!(task_share::<f32>(usize::MAX), usize::MAX);
        let mut mem = vec![CacheLine::zeroed(); 9];
        let mut carver = Carver::new(&mut mem);
        let first = carver.region::<i8>(3).unwrap().as_ptr() as usize;
        let shares = carver.region::<f32>(2 * task_share::<f32>(49)).unwrap();
        let starts = shares.chunks(task_share::<f32>(49)).map(|share| share.as_ptr() as usize);
        for address in starts.chain([first]) {
            assert_eq!(address % 64, 0, "{address:#x}");
        }
    }
}
