//! What each output reads, for every kernel: the plane sizes ([`Planes`]) and the taps of every
//! output row and column ([`Taps`]), built from the two window formulas of
//! [`crate::geometry`] (the adaptive one and the max-pooling one). The kernels index these
//! tables; none recomputes a window.

use crate::alloc::collect_exact;
use crate::error::Result;
use crate::geometry::{adaptive_window, pool_window_taps};
use crate::validate::{AdaptiveGeometry, MaxPoolGeometry};

/// The input positions one output reads along one axis: `start + i * step` for `i < count`
/// (`count >= 1`, checked in phase 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taps {
    pub start: usize,
    pub count: usize,
    pub step: usize,
}

impl Taps {
    /// The input positions from the first tap to the last (empty without taps).
    pub(super) fn span(&self) -> core::ops::Range<usize> {
        match self.count {
            0 => self.start..self.start,
            n => self.start..self.start + (n - 1) * self.step + 1,
        }
    }
}

/// The sizes of a call's planes: how many, and their input and output heights and widths.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planes {
    pub count: usize,
    pub h: usize,
    pub w: usize,
    pub ho: usize,
    pub wo: usize,
}

impl From<&AdaptiveGeometry> for Planes {
    fn from(g: &AdaptiveGeometry) -> Self {
        Planes { count: g.planes(), h: g.h, w: g.w, ho: g.ho, wo: g.wo }
    }
}

impl From<&MaxPoolGeometry> for Planes {
    fn from(g: &MaxPoolGeometry) -> Self {
        Planes { count: g.planes(), h: g.h, w: g.w, ho: g.ho, wo: g.wo }
    }
}

/// The taps of every output row and column of an adaptive pooling, operation `op`.
/// (None when there are no planes: the output is empty, whatever its other sizes.)
pub(super) fn adaptive_taps(op: &'static str, g: &AdaptiveGeometry) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let axis = |input: usize, output: usize| -> Result<Vec<Taps>> {
        let len = if g.planes() == 0 { 0 } else { output };
        let windows = (0..len).map(|o| adaptive_window(o, input, output));
        collect_exact(op, "windows", len, windows.map(|r| Taps { start: r.start, count: r.len(), step: 1 }))
    };
    Ok((axis(g.h, g.ho)?, axis(g.w, g.wo)?))
}

/// The valid taps (those inside the input) of every output row and column of a max pooling,
/// operation `op`. (None when there are no planes: the output is empty, whatever its other
/// sizes.)
pub(super) fn max_pool_taps(op: &'static str, g: &MaxPoolGeometry) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let p = &g.params;
    let axis = |a: usize, input: usize, output: usize| -> Result<Vec<Taps>> {
        let [k, s, pad, d] = [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]];
        let len = if g.planes() == 0 { 0 } else { output };
        let taps = (0..len).map(|o| {
            let (start, count) = pool_window_taps(o, input, k, s, pad, d);
            Taps { start, count, step: d }
        });
        collect_exact(op, "windows", len, taps)
    };
    Ok((axis(0, g.h, g.ho)?, axis(1, g.w, g.wo)?))
}
