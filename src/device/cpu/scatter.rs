//! The backward kernel shared by every flat-index gradient (adaptive, max pooling with indices,
//! and the `I32Argmax` mask): zero each plane, then add each gradient at its index in row-major
//! output order. Each index is checked against the plane as it is used, so the indices are read
//! once.
//!
//! Tasks own runs of whole planes or, with fewer planes than threads, bands of input rows of one
//! plane. A band reads the gradient rows whose windows reach its rows and adds, in row-major
//! order, the gradients that land in them: with every index inside its window's rows, each
//! element gets the same additions in the same order as from a whole-plane task, so the results
//! are bit-identical for every split. An index outside its window's rows (the backward allows
//! any index in the plane) is met by a band that reads its row; that plane is then redone whole
//! on one thread, which also finds the first index outside the plane.

use core::ops::Range;

use super::Cpu;
use super::forward::{Planes, Taps, planes_per_task, rows_per_band, task_count};
use super::workspace::{CacheLine, Carver, Sizer, task_share};

use num_traits::Zero;

use crate::alloc::collect_exact;
use crate::element::PoolFloat;
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::tensor::{TensorMut, TensorRef};

/// Phase-1 state of a scatter.
#[derive(Debug)]
pub struct ScatterPrepared {
    planes: Planes,
    split: Split,
    /// f32 accumulators per task: a plane for the half types, else 0 (sums go to the output).
    /// Each task's share is rounded up to whole cache lines ([`task_share`]), as is `grad`'s.
    acc_per_task: usize,
    /// f32 gradients per task: one converted plane of `grad_output` for the half types, else 0.
    grad_per_task: usize,
}

/// How the planes are shared among tasks.
#[derive(Debug)]
enum Split {
    /// `tasks` runs of `per_task` whole planes.
    Planes { tasks: usize, per_task: usize },
    /// Every plane cut into the same bands of input rows, one task per band and plane.
    Bands(InputBands),
}

/// Bands of `rows` input rows (the last may be shorter) and what each must read.
#[derive(Debug)]
struct InputBands {
    rows: usize,
    /// The output rows band `b` reads: every row whose window reaches band `b`.
    reads: Vec<Range<usize>>,
    /// The input rows of each output row's window.
    windows: Vec<Range<usize>>,
}

impl InputBands {
    /// Bands for `planes` on `threads` threads, or `None` when whole planes keep every thread
    /// busy (or a window is empty, which no band could check).
    fn new(op: &'static str, threads: usize, planes: Planes, window_rows: &[Taps]) -> Result<Option<Self>> {
        let Planes { count, h, ho, wo, .. } = planes;
        if count == 0 || count >= threads || h < 2 || wo == 0 || window_rows.len() != ho {
            return Ok(None);
        }
        let windows = collect_exact(op, "windows", ho, window_rows.iter().map(Taps::span))?;
        if windows.iter().any(|w| w.is_empty()) {
            return Ok(None);
        }
        let rows = rows_per_band(threads, count, h);
        let mut reads = collect_exact(op, "bands", h.div_ceil(rows), core::iter::repeat(0..0))?;
        for (o, window) in windows.iter().enumerate() {
            for read in &mut reads[window.start / rows..=(window.end - 1) / rows] {
                // Reads end past a row once they have one, so an end of 0 means none yet.
                let start = if read.end == 0 { o } else { read.start };
                *read = start..o + 1;
            }
        }
        Ok(Some(InputBands { rows, reads, windows }))
    }
}

/// An index the scatter cannot use: element `element` of the indices (row-major) holds `value`,
/// outside its plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BadIndex {
    pub element: usize,
    pub value: i64,
}

/// Scratch of one scatter, carved from the workspace.
pub(super) struct ScatterScratch<'w, T: PoolFloat> {
    acc: &'w mut [T::Acc],
    grad: &'w mut [T::Acc],
}

impl ScatterPrepared {
    /// Plans a scatter over `planes` (whose output row `o` pools the input rows of
    /// `window_rows[o]`) and adds its scratch to `sizer`.
    pub(super) fn new<T: PoolFloat>(
        cpu: &Cpu,
        planes: Planes,
        window_rows: &[Taps],
        sizer: &mut Sizer,
    ) -> Result<Self> {
        let split = match InputBands::new(sizer.op(), cpu.threads(), planes, window_rows)? {
            Some(bands) => Split::Bands(bands),
            None => {
                let tasks = task_count(cpu, planes.count);
                Split::Planes { tasks, per_task: planes_per_task(planes.count, tasks) }
            }
        };
        let half = T::as_acc(&[]).is_none();
        let (hw, ohw) = (planes.h * planes.w, planes.ho * planes.wo);
        let (acc_per_task, grad_per_task) =
            if half { (task_share::<T::Acc>(hw), task_share::<T::Acc>(ohw)) } else { (0, 0) };
        let p = ScatterPrepared { planes, split, acc_per_task, grad_per_task };
        sizer.region::<T::Acc>(p.tasks() * acc_per_task)?;
        sizer.region::<T::Acc>(p.tasks() * grad_per_task)?;
        Ok(p)
    }

    fn tasks(&self) -> usize {
        match &self.split {
            Split::Planes { tasks, .. } => *tasks,
            Split::Bands(bands) => self.planes.count * bands.reads.len(),
        }
    }

    /// Carves the scratch counted by [`ScatterPrepared::new`].
    pub(super) fn scratch<'w, T: PoolFloat>(&self, carver: &mut Carver<'w>) -> Result<ScatterScratch<'w, T>> {
        Ok(ScatterScratch {
            acc: carver.region::<T::Acc>(self.tasks() * self.acc_per_task)?,
            grad: carver.region::<T::Acc>(self.tasks() * self.grad_per_task)?,
        })
    }
}

/// Plans the backward of a flat-index pooling from the views of one call.
pub(super) fn prepare_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    op: &'static str,
    (grad_output, indices, grad_input): (&TensorRef<'_, T>, &TensorRef<'_, I>, &TensorMut<'_, T>),
    planes: Planes,
    window_rows: &[Taps],
) -> Result<(ScatterPrepared, usize)> {
    let mut sizer = Sizer::new(op);
    sizer.stage(&grad_output.view())?;
    sizer.stage(&indices.view())?;
    sizer.stage(&grad_input.as_ref().view())?;
    let prepared = ScatterPrepared::new::<T>(cpu, planes, window_rows, &mut sizer)?;
    Ok((prepared, sizer.total()))
}

/// Runs a backward planned by [`prepare_indexed`]; `bad_index` turns the first index outside
/// its plane (element, value) into the operation's error.
pub(super) fn run_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    op: &'static str,
    (grad_output, indices, grad_input): (TensorRef<'_, T>, TensorRef<'_, I>, TensorMut<'_, T>),
    p: &ScatterPrepared,
    memory: &mut [CacheLine],
    bad_index: impl FnOnce(usize, i64) -> Error,
) -> Result<()> {
    let mut carver = Carver::new(op, memory);
    let go = carver.stage(grad_output.view())?;
    let ix = carver.stage(indices.view())?;
    let mut gi = carver.output(grad_input.into_view())?;
    let scratch = p.scratch::<T>(&mut carver)?;
    let checked = scatter(cpu, p, go, ix, gi.slice(), scratch);
    gi.finish(op, "grad_input")?;
    checked.map_err(|bad| bad_index(bad.element, bad.value))
}

/// Scatters every plane. On an index outside its plane, `gi` is zeroed and the first such index
/// (in row-major order) is returned.
pub(super) fn scatter<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    scratch: ScatterScratch<'_, T>,
) -> core::result::Result<(), BadIndex> {
    let ohw = p.planes.ho * p.planes.wo;
    let bad = match &p.split {
        Split::Planes { per_task, .. } => whole_planes(cpu, p, *per_task, go, ix, gi, scratch),
        Split::Bands(bands) => banded_planes(cpu, p, bands, go, ix, gi, scratch),
    };
    match bad {
        None => Ok(()),
        Some((plane, k)) => {
            gi.fill(T::zero());
            let element = plane * ohw + k;
            Err(BadIndex { element, value: ix[element].to_i64() })
        }
    }
}

/// Runs of whole planes, one run per task. Returns the first bad index as (plane, position).
fn whole_planes<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    per_task: usize,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    scratch: ScatterScratch<'_, T>,
) -> Option<(usize, usize)> {
    let (hw, ohw) = (p.planes.h * p.planes.w, p.planes.ho * p.planes.wo);
    let mut accs = scratch.acc.chunks_mut(p.acc_per_task.max(1));
    let mut grads = scratch.grad.chunks_mut(p.grad_per_task.max(1));
    let tasks: Vec<_> = gi
        .chunks_mut(per_task * hw)
        .zip(go.chunks(per_task * ohw))
        .zip(ix.chunks(per_task * ohw))
        .enumerate()
        .map(|(t, ((gi, go), ix))| {
            let acc = accs.next().unwrap_or(&mut []);
            (t * per_task, gi, go, ix, acc, grads.next().unwrap_or(&mut []))
        })
        .collect();
    let bad = cpu.map_tasks(tasks, |(first, gi, go, ix, acc, grad)| {
        // The half types' accumulators start at zero; each plane puts back the zeros it used.
        acc.fill(T::Acc::zero());
        for (plane, ((gi, go), ix)) in gi.chunks_mut(hw).zip(go.chunks(ohw)).zip(ix.chunks(ohw)).enumerate() {
            let whole = core::iter::once(Run { gradients: 0..ohw, allowed: 0..hw });
            add_into::<_, _, false>(go, ix, whole, 0, gi, acc, grad).map_err(|k| (first + plane, k))?;
        }
        Ok(())
    });
    bad.into_iter().find_map(|r| r.err())
}

/// Bands of input rows, one task per band and plane; a plane where a band met an index outside
/// its window's rows is then redone whole. Returns the first bad index as (plane, position).
fn banded_planes<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    bands: &InputBands,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    scratch: ScatterScratch<'_, T>,
) -> Option<(usize, usize)> {
    let Planes { h, w, ho, wo, .. } = p.planes;
    let (hw, ohw) = (h * w, ho * wo);
    let mut accs = scratch.acc.chunks_mut(p.acc_per_task.max(1));
    let mut grads = scratch.grad.chunks_mut(p.grad_per_task.max(1));
    let mut tasks = Vec::with_capacity(p.tasks());
    for (plane, ((gi, go), ix)) in gi.chunks_mut(hw).zip(go.chunks(ohw)).zip(ix.chunks(ohw)).enumerate() {
        for (band, out) in gi.chunks_mut(bands.rows * w).enumerate() {
            let acc = accs.next().unwrap_or(&mut []);
            tasks.push((plane, band, out, go, ix, acc, grads.next().unwrap_or(&mut [])));
        }
    }
    let flagged = cpu.map_tasks(tasks, |(plane, band, out, go, ix, acc, grad)| {
        // The workspace may hold anything: the band's accumulators (half types) start at zero.
        if let Some(acc) = acc.get_mut(..out.len()) {
            acc.fill(T::Acc::zero());
        }
        let read = bands.reads[band].clone();
        let base = read.start * wo;
        let runs = read.clone().map(|o| Run {
            gradients: o * wo - base..(o + 1) * wo - base,
            allowed: bands.windows[o].start * w..bands.windows[o].end * w,
        });
        let gradients = base..read.end * wo;
        let owned = band * bands.rows * w;
        let (go, ix) = (&go[gradients.clone()], &ix[gradients]);
        add_into::<_, _, true>(go, ix, runs, owned, out, acc, grad).err().map(|_| plane)
    });
    let mut redo: Vec<usize> = flagged.into_iter().flatten().collect();
    redo.dedup();
    let (acc, grad) = (&mut scratch.acc[..p.acc_per_task], &mut scratch.grad[..p.grad_per_task]);
    acc.fill(T::Acc::zero());
    redo.into_iter().find_map(|plane| {
        let (gi, go, ix) =
            (&mut gi[plane * hw..][..hw], &go[plane * ohw..][..ohw], &ix[plane * ohw..][..ohw]);
        let whole = core::iter::once(Run { gradients: 0..ohw, allowed: 0..hw });
        add_into::<_, _, false>(go, ix, whole, 0, gi, acc, grad).err().map(|k| (plane, k))
    })
}

/// Gradients `gradients` (positions in the slices given to [`add_runs`]) whose indices must lie
/// in the plane's flat inputs `allowed`.
struct Run {
    gradients: Range<usize>,
    allowed: Range<usize>,
}

/// Zeroes `out`, the plane's inputs from flat position `owned` on, and adds to it, in order, the
/// gradients of `runs` whose index lands in it. Returns the position (in `ix`) of the first
/// index outside its run's `allowed` inputs (`BAND`), or outside the plane (`out` is a whole
/// plane: `owned` is 0 and `allowed` is not read).
///
/// `f32`/`f64` sum straight into `out`. The half types widen their gradients in bulk into `grad`
/// and sum in `acc`, which is zero on entry and left zero; after each addition the rounded
/// running sum is stored, so the last store to a position holds its whole sum rounded once.
fn add_into<T: PoolFloat, I: ArgmaxIndex, const BAND: bool>(
    go: &[T],
    ix: &[I],
    runs: impl Iterator<Item = Run>,
    owned: usize,
    out: &mut [T],
    acc: &mut [T::Acc],
    grad: &mut [T::Acc],
) -> core::result::Result<(), usize> {
    let len = out.len();
    if let Some(direct) = T::as_acc_mut(out) {
        let go = T::as_acc(go).unwrap_or(&[]);
        direct.fill(T::Acc::zero());
        return add_runs::<_, _, BAND>(go, ix, runs, owned, len, |at, g| direct[at] += g);
    }
    let (grad, acc) = (&mut grad[..go.len()], &mut acc[..len]);
    T::to_acc_slice(go, grad);
    out.fill(T::zero());
    let added = add_runs::<_, _, BAND>(grad, ix, runs, owned, len, |at, g| add_rounded(acc, out, at, g));
    // A whole-plane task reuses the accumulators for its next plane: leave them zero, clearing
    // the touched ones, or all of them when they are few enough to be cleared faster in bulk.
    // (A band's task clears them before its only band.)
    if !BAND {
        if len <= 8 * ix.len() {
            acc.fill(T::Acc::zero());
        } else {
            for &i in ix {
                acc[i.flat_in(len).unwrap_or(0)] = T::Acc::zero();
            }
        }
    }
    added
}

/// Adds `g` to sum `at` and stores the running sum rounded: the last store to an element holds
/// its whole sum rounded once.
#[inline(always)]
pub(super) fn add_rounded<T: PoolFloat>(acc: &mut [T::Acc], out: &mut [T], at: usize, g: T::Acc) {
    acc[at] += g;
    out[at] = T::from_acc_sum(acc[at]);
}

/// Calls `add(index - owned, gradient)`, in order, for each gradient of `runs` whose index lands
/// in `owned..owned + len`. Returns the position (in `ix`) of the first index outside its run's
/// `allowed` inputs (`BAND`) or outside `0..len` (a whole plane).
#[inline(always)]
fn add_runs<G: Copy, I: ArgmaxIndex, const BAND: bool>(
    go: &[G],
    ix: &[I],
    runs: impl Iterator<Item = Run>,
    owned: usize,
    len: usize,
    mut add: impl FnMut(usize, G),
) -> core::result::Result<(), usize> {
    for Run { gradients, allowed } in runs {
        let first = gradients.start;
        let (start, span) = (allowed.start, allowed.len());
        for (k, (&g, &i)) in go[gradients.clone()].iter().zip(&ix[gradients]).enumerate() {
            if BAND {
                match i.flat_within(start, span) {
                    Some(at) => {
                        let local = at.wrapping_sub(owned);
                        if local < len {
                            add(local, g);
                        }
                    }
                    None => return Err(first + k),
                }
            } else {
                match i.flat_within(0, len) {
                    Some(at) => add(at, g),
                    None => return Err(first + k),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernel 3, stride 2, padding 1 on 10 rows: output row `o` pools input rows
    /// `2o - 1 ..= 2o + 1`, clipped to `0..10`.
    fn stem_rows() -> Vec<Taps> {
        let spans = [(0, 2), (1, 3), (3, 3), (5, 3), (7, 3)];
        spans.iter().map(|&(start, count)| Taps { start, count, step: 1 }).collect()
    }

    const ONE_PLANE: Planes = Planes { count: 1, h: 10, w: 4, ho: 5, wo: 2 };

    #[test]
    fn bands_read_every_row_whose_window_reaches_them() {
        // 2 threads: rows 0..5 and 5..10. Window 2 (rows 3..6) reaches both.
        let two = InputBands::new("test", 2, ONE_PLANE, &stem_rows()).unwrap().unwrap();
        assert_eq!((two.rows, two.reads), (5, vec![0..3, 2..5]));
        // 3 threads: rows 0..4, 4..8, 8..10.
        let three = InputBands::new("test", 3, ONE_PLANE, &stem_rows()).unwrap().unwrap();
        assert_eq!((three.rows, three.reads), (4, vec![0..3, 2..5, 4..5]));
        assert_eq!(three.windows, vec![0..2, 1..4, 3..6, 5..8, 7..10]);
    }

    #[test]
    fn whole_planes_when_they_keep_every_thread_busy() {
        let rows = stem_rows();
        assert!(InputBands::new("test", 1, ONE_PLANE, &rows).unwrap().is_none());
        assert!(InputBands::new("test", 2, Planes { count: 2, ..ONE_PLANE }, &rows).unwrap().is_none());
        assert!(InputBands::new("test", 2, Planes { count: 0, ..ONE_PLANE }, &rows).unwrap().is_none());
        // A window without rows cannot be checked by any band.
        let mut empty = rows.clone();
        empty[4].count = 0;
        assert!(InputBands::new("test", 2, ONE_PLANE, &empty).unwrap().is_none());
        // A single input row has nothing to cut.
        let flat = Planes { h: 1, ho: 1, ..ONE_PLANE };
        assert!(InputBands::new("test", 2, flat, &[Taps { start: 0, count: 1, step: 1 }]).unwrap().is_none());
    }
}
