//! What each output reads, for every kernel: the plane sizes ([`Planes`]) and the taps of every
//! output row and column ([`Taps`]), built from the two window formulas of
//! [`crate::geometry`] (the adaptive one and the max-pooling one). The kernels index these
//! tables; none recomputes a window.

use core::ops::Range;

use crate::alloc::collect_exact;
use crate::error::{Result, UNNAMED};
use crate::geometry::{adaptive_window, pool_window_taps};
use crate::shape::{AdaptiveGeometry, MaxPoolGeometry};

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

/// The taps of every output row and column of an adaptive pooling.
/// (None when there are no planes: the output is empty, whatever its other sizes.)
pub(super) fn adaptive_taps(g: &AdaptiveGeometry) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let axis = |input: usize, output: usize| -> Result<Vec<Taps>> {
        let len = if g.planes() == 0 { 0 } else { output };
        let windows = (0..len).map(|o| adaptive_window(o, input, output));
        collect_exact(
            UNNAMED,
            "windows",
            len,
            windows.map(|r| Taps { start: r.start, count: r.len(), step: 1 }),
        )
    };
    Ok((axis(g.h, g.ho)?, axis(g.w, g.wo)?))
}

/// The valid taps (those inside the input) of every output row and column of a max pooling.
/// (None when there are no planes: the output is empty, whatever its other
/// sizes.)
pub(super) fn max_pool_taps(g: &MaxPoolGeometry) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let p = &g.params;
    let axis = |a: usize, input: usize, output: usize| -> Result<Vec<Taps>> {
        let [k, s, pad, d] = [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]];
        let len = if g.planes() == 0 { 0 } else { output };
        let taps = (0..len).map(|o| {
            let (start, count) = pool_window_taps(o, input, k, s, pad, d);
            Taps { start, count, step: d }
        });
        collect_exact(UNNAMED, "windows", len, taps)
    };
    Ok((axis(0, g.h, g.ho)?, axis(1, g.w, g.wo)?))
}

/// The outputs that read each input position `0..input` along one axis, in order: the inverse of
/// `taps` (every output's taps, in output order). The spans of successive outputs
/// start and end in order along an axis (both window formulas move forward with the output), so
/// the outputs whose span holds a position are a range; with step 1 (no dilation) each of them
/// reads the position. Built in one pass over the taps.
pub(super) fn readers(taps: impl Iterator<Item = Taps>, input: usize) -> Result<Vec<Range<usize>>> {
    let mut readers = collect_exact(UNNAMED, "windows", input, (0..input).map(|_| 0..0))?;
    for (o, taps) in taps.enumerate() {
        for x in taps.span() {
            let reading = &mut readers[x];
            // (`0..0` until the first reader.)
            if reading.end == 0 {
                reading.start = o;
            }
            reading.end = o + 1;
        }
    }
    Ok(readers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `readers` inverts the taps: output `o` is in the range of input `x` exactly when its window
    /// covers `x` (window `o` of a max pooling covers `o*s - p .. o*s - p + k`, clipped to the
    /// input; an adaptive one its formula's range), for every kernel, stride and padding up to 5,
    /// inputs up to 12, with floor mode's output count and one more (ceil mode's at most).
    #[test]
    fn readers_are_the_outputs_whose_window_covers_the_input() {
        let check = |taps: &[Taps], covers: &dyn Fn(usize, usize) -> bool, input: usize, what: &str| {
            let got = readers(taps.iter().copied(), input).unwrap();
            for (x, got) in got.iter().enumerate() {
                let want: Vec<usize> = (0..taps.len()).filter(|&o| covers(o, x)).collect();
                assert_eq!(got.clone().collect::<Vec<_>>(), want, "{what}: input {x}");
            }
        };
        for n in 1..=12usize {
            for k in 1..=5 {
                for s in 1..=5 {
                    for p in 0..=k / 2 {
                        let floor = (n + 2 * p).saturating_sub(k) / s + 1;
                        for outputs in [floor, floor + 1] {
                            let taps: Vec<Taps> = (0..outputs)
                                .map(|o| {
                                    let (start, count) = pool_window_taps(o, n, k, s, p, 1);
                                    Taps { start, count, step: 1 }
                                })
                                .collect();
                            let covers = |o: usize, x: usize| (o * s..o * s + k).contains(&(x + p));
                            check(&taps, &covers, n, &format!("n{n} k{k} s{s} p{p} outputs {outputs}"));
                        }
                    }
                }
            }
            for outputs in 1..=n + 2 {
                let taps: Vec<Taps> = (0..outputs)
                    .map(|o| {
                        let r = adaptive_window(o, n, outputs);
                        Taps { start: r.start, count: r.len(), step: 1 }
                    })
                    .collect();
                let covers = |o: usize, x: usize| adaptive_window(o, n, outputs).contains(&x);
                check(&taps, &covers, n, &format!("adaptive n{n} outputs {outputs}"));
            }
        }
    }
}
