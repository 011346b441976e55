//! The backward kernel shared by every flat-index gradient (adaptive, max pooling with indices,
//! and the `I32Argmax` mask): zero each plane, then add each gradient at its index in row-major
//! output order.

use num_traits::Zero;

use super::Cpu;
use super::forward::{planes_per_task, task_count};
use super::workspace::Sizer;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::index::ArgmaxIndex;

/// Phase-1 state of a scatter.
#[derive(Debug)]
pub struct ScatterPrepared {
    pub(super) tasks: usize,
    /// Accumulator elements per task (0 when gradients accumulate in place).
    pub(super) acc_per_task: usize,
}

/// Sizes of a scatter: `planes` planes of `hw` inputs receiving `ohw` gradients each.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScatterShape {
    pub planes: usize,
    pub hw: usize,
    pub ohw: usize,
}

impl ScatterPrepared {
    /// Plans a scatter and adds its accumulators to `sizer` (f32 planes for the half types).
    pub(super) fn new<T: PoolFloat>(cpu: &Cpu, shape: ScatterShape, sizer: &mut Sizer) -> Result<Self> {
        let tasks = task_count(cpu, shape.planes);
        let acc_per_task = if T::as_acc_mut(&mut []).is_some() { 0 } else { shape.hw };
        sizer.region::<T::Acc>(tasks * acc_per_task)?;
        Ok(ScatterPrepared { tasks, acc_per_task })
    }
}

struct Task<'s, T: PoolFloat, I> {
    go: &'s [T],
    ix: &'s [I],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
}

/// Scatters every plane. Indices were checked against the plane size in phase 1.
pub(super) fn scatter<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    shape: ScatterShape,
    p: &ScatterPrepared,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let ScatterShape { planes, hw, ohw } = shape;
    let per = planes_per_task(planes, p.tasks);
    let mut accs = acc.chunks_mut(p.acc_per_task.max(1));
    let tasks: Vec<_> = gi
        .chunks_mut(per * hw)
        .zip(go.chunks(per * ohw))
        .zip(ix.chunks(per * ohw))
        .map(|((gi, go), ix)| Task { go, ix, gi, acc: accs.next().unwrap_or(&mut []) })
        .collect();
    cpu.for_each_task(tasks, |t| {
        for ((gi, go), ix) in t.gi.chunks_mut(hw).zip(t.go.chunks(ohw)).zip(t.ix.chunks(ohw)) {
            scatter_plane(go, ix, gi, &mut *t.acc);
        }
    });
}

/// One plane. The half types sum in an f32 plane and round once at the end.
fn scatter_plane<T: PoolFloat, I: ArgmaxIndex>(go: &[T], ix: &[I], gi: &mut [T], acc: &mut [T::Acc]) {
    if let Some(direct) = T::as_acc_mut(gi) {
        direct.fill(T::Acc::zero());
        add_all(go, ix, direct);
    } else {
        let acc = &mut acc[..gi.len()];
        acc.fill(T::Acc::zero());
        add_all(go, ix, acc);
        T::from_acc_slice(acc, gi);
    }
}

#[inline]
fn add_all<T: PoolFloat, I: ArgmaxIndex>(go: &[T], ix: &[I], acc: &mut [T::Acc]) {
    for (&g, &i) in go.iter().zip(ix) {
        acc[i.flat_trusted()] += g.to_acc();
    }
}
