//! CPU kernels of adaptive max pooling, forward and backward.

use core::ops::Range;

use num_traits::Zero;

use super::Cpu;
use super::workspace::{Carver, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::adaptive_windows;
use crate::index::ArgmaxIndex;
use crate::op::internal::OperationImpl;
use crate::op::{AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};

/// Phase-1 state of the forward: the windows of every output row and column.
#[derive(Debug)]
pub struct ForwardPrepared {
    rows: Vec<Range<usize>>,
    cols: Vec<Range<usize>>,
    tasks: usize,
}

/// Phase-1 state of the backward.
#[derive(Debug)]
pub struct BackwardPrepared {
    tasks: usize,
    /// f32 accumulator elements per task (0 when gradients accumulate in place).
    acc_per_task: usize,
}

/// Planes handled by each of `tasks` tasks (at least 1, so chunk sizes are never zero).
fn planes_per_task(planes: usize, tasks: usize) -> usize {
    planes.div_ceil(tasks.max(1)).max(1)
}

fn task_count(cpu: &Cpu, planes: usize) -> usize {
    cpu.threads().min(planes).max(1)
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        let mut sizer = Sizer::new(AdaptiveMaxPool2d::<T, I>::NAME);
        sizer.stage(&op.input.view())?;
        sizer.stage(&op.output.as_ref().view())?;
        sizer.stage(&op.indices.as_ref().view())?;
        let prepared = ForwardPrepared {
            rows: adaptive_windows(g.h, g.ho),
            cols: adaptive_windows(g.w, g.wo),
            tasks: task_count(self, g.planes()),
        };
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "adaptive_max_pool2d";
        let AdaptiveMaxPool2d { input, output, indices, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let x = carver.stage(input.view())?;
        let mut out = carver.output(output.into_view())?;
        let mut idx = carver.output(indices.into_view())?;
        forward(self, g, &p, x, out.slice(), idx.slice());
        out.finish(OP, "output")?;
        idx.finish(OP, "indices")
    }
}

struct ForwardTask<'s, T, I> {
    x: &'s [T],
    out: &'s mut [T],
    idx: &'s mut [I],
}

fn forward<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &AdaptiveGeometry,
    p: &ForwardPrepared,
    x: &[T],
    out: &mut [T],
    idx: &mut [I],
) {
    let (hw, ohw) = (g.h * g.w, g.ho * g.wo);
    let per = planes_per_task(g.planes(), p.tasks);
    let tasks: Vec<_> = x
        .chunks(per * hw)
        .zip(out.chunks_mut(per * ohw))
        .zip(idx.chunks_mut(per * ohw))
        .map(|((x, out), idx)| ForwardTask { x, out, idx })
        .collect();
    cpu.for_each_task(tasks, |t| {
        for ((x, out), idx) in t.x.chunks(hw).zip(t.out.chunks_mut(ohw)).zip(t.idx.chunks_mut(ohw)) {
            pool_plane(x, g.w, &p.rows, &p.cols, out, idx);
        }
    });
}

/// One plane: for each window, the first maximum in row-major order; a NaN is taken and a later
/// NaN replaces it (PyTorch's rule).
fn pool_plane<T: PoolFloat, I: ArgmaxIndex>(
    x: &[T],
    w: usize,
    rows: &[Range<usize>],
    cols: &[Range<usize>],
    out: &mut [T],
    idx: &mut [I],
) {
    let mut slots = out.iter_mut().zip(idx.iter_mut());
    for r in rows {
        for c in cols {
            let mut best = T::neg_infinity();
            let mut best_at = r.start * w + c.start;
            for ih in r.clone() {
                let base = ih * w;
                for (iw, &v) in x[base + c.start..base + c.end].iter().enumerate() {
                    if v > best || v.is_nan() {
                        best = v;
                        best_at = base + c.start + iw;
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

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Cpu {
    type Prepared = BackwardPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(BackwardPrepared, usize)> {
        let mut sizer = Sizer::new(AdaptiveMaxPool2dBackward::<T, I>::NAME);
        sizer.stage(&op.grad_output.view())?;
        sizer.stage(&op.indices.view())?;
        sizer.stage(&op.grad_input.as_ref().view())?;
        let tasks = task_count(self, g.planes());
        let acc_per_task = if T::as_acc_mut(&mut []).is_some() { 0 } else { g.h * g.w };
        sizer.region::<T::Acc>(tasks * acc_per_task)?;
        Ok((BackwardPrepared { tasks, acc_per_task }, sizer.total()))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
        p: BackwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "adaptive_max_pool2d_backward";
        let AdaptiveMaxPool2dBackward { grad_output, indices, grad_input, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let go = carver.stage(grad_output.view())?;
        let ix = carver.stage(indices.view())?;
        let mut gi = carver.output(grad_input.into_view())?;
        let acc = carver.region::<T::Acc>(p.tasks * p.acc_per_task)?;
        backward(self, g, &p, go, ix, gi.slice(), acc);
        gi.finish(OP, "grad_input")
    }
}

struct BackwardTask<'s, T: PoolFloat, I> {
    go: &'s [T],
    ix: &'s [I],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
}

fn backward<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &AdaptiveGeometry,
    p: &BackwardPrepared,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let (hw, ohw) = (g.h * g.w, g.ho * g.wo);
    let per = planes_per_task(g.planes(), p.tasks);
    let mut accs = acc.chunks_mut(p.acc_per_task.max(1));
    let tasks: Vec<_> = gi
        .chunks_mut(per * hw)
        .zip(go.chunks(per * ohw))
        .zip(ix.chunks(per * ohw))
        .map(|((gi, go), ix)| BackwardTask { go, ix, gi, acc: accs.next().unwrap_or(&mut []) })
        .collect();
    cpu.for_each_task(tasks, |t| {
        for ((gi, go), ix) in t.gi.chunks_mut(hw).zip(t.go.chunks(ohw)).zip(t.ix.chunks(ohw)) {
            scatter_plane(go, ix, gi, &mut *t.acc);
        }
    });
}

/// One plane: zero it, then add every gradient at its index in row-major output order. The half
/// types sum in an f32 plane and round once at the end.
fn scatter_plane<T: PoolFloat, I: ArgmaxIndex>(go: &[T], ix: &[I], gi: &mut [T], acc: &mut [T::Acc]) {
    if let Some(direct) = T::as_acc_mut(gi) {
        direct.fill(T::Acc::zero());
        scatter(go, ix, direct);
    } else {
        let acc = &mut acc[..gi.len()];
        acc.fill(T::Acc::zero());
        scatter(go, ix, acc);
        T::from_acc_slice(acc, gi);
    }
}

#[inline]
fn scatter<T: PoolFloat, I: ArgmaxIndex>(go: &[T], ix: &[I], acc: &mut [T::Acc]) {
    for (&g, &i) in go.iter().zip(ix) {
        // Phase 1 checked every index against the plane size.
        acc[i.flat_trusted()] += g.to_acc();
    }
}
