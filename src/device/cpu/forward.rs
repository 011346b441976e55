//! The max-pooling forward kernel shared by adaptive and regular max pooling: each output reads
//! a window given by its row and column taps.

use super::Cpu;
use crate::element::PoolFloat;
use crate::index::ArgmaxIndex;

/// The input positions one output reads along one axis: `start + i * step` for `i < count`
/// (`count >= 1`, checked in phase 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taps {
    pub start: usize,
    pub count: usize,
    pub step: usize,
}

/// Phase-1 state of a forward: the taps of every output row and column.
#[derive(Debug)]
pub struct ForwardPrepared {
    pub(super) rows: Vec<Taps>,
    pub(super) cols: Vec<Taps>,
    pub(super) tasks: usize,
}

/// Sizes of a forward call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planes {
    pub count: usize,
    pub h: usize,
    pub w: usize,
    pub ho: usize,
    pub wo: usize,
}

/// Planes handled by each of `tasks` tasks (at least 1, so chunk sizes are never zero).
pub(super) fn planes_per_task(planes: usize, tasks: usize) -> usize {
    planes.div_ceil(tasks.max(1)).max(1)
}

pub(super) fn task_count(cpu: &Cpu, planes: usize) -> usize {
    cpu.threads().min(planes).max(1)
}

struct Task<'s, T, I> {
    x: &'s [T],
    out: &'s mut [T],
    idx: &'s mut [I],
}

/// Pools every plane of the row-major `x` into `out` and `idx`.
pub(super) fn pool<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    planes: Planes,
    p: &ForwardPrepared,
    x: &[T],
    out: &mut [T],
    idx: &mut [I],
) {
    let (hw, ohw) = (planes.h * planes.w, planes.ho * planes.wo);
    let per = planes_per_task(planes.count, p.tasks);
    let tasks: Vec<_> = x
        .chunks(per * hw)
        .zip(out.chunks_mut(per * ohw))
        .zip(idx.chunks_mut(per * ohw))
        .map(|((x, out), idx)| Task { x, out, idx })
        .collect();
    cpu.for_each_task(tasks, |t| {
        for ((x, out), idx) in t.x.chunks(hw).zip(t.out.chunks_mut(ohw)).zip(t.idx.chunks_mut(ohw)) {
            pool_plane(x, planes.w, &p.rows, &p.cols, out, idx);
        }
    });
}

/// One plane: for each window, the first maximum in row-major order; a NaN is taken and a later
/// NaN replaces it (PyTorch's rule). The index starts at the window's first input, so a window of
/// `-inf` points there.
fn pool_plane<T: PoolFloat, I: ArgmaxIndex>(
    x: &[T],
    w: usize,
    rows: &[Taps],
    cols: &[Taps],
    out: &mut [T],
    idx: &mut [I],
) {
    let mut slots = out.iter_mut().zip(idx.iter_mut());
    for r in rows {
        for c in cols {
            let mut best = T::neg_infinity();
            let mut best_at = r.start * w + c.start;
            for a in 0..r.count {
                let base = (r.start + a * r.step) * w;
                for b in 0..c.count {
                    let at = base + c.start + b * c.step;
                    let v = x[at];
                    if v > best || v.is_nan() {
                        best = v;
                        best_at = at;
                    }
                }
            }
            if let Some((o, i)) = slots.next() {
                *o = best;
                *i = I::from_flat_checked(best_at);
            }
        }
    }
}
