//! The operations that move values between pooled positions and the flat positions their
//! indices address: max unpooling (each value written at its index, the last of equal indices
//! winning), its backward (each gradient read from its index, kept only for the last of equal
//! indices, the one the forward wrote) and a max pooling's double backward (each second-order
//! gradient read at its output's arg-max). Tasks own runs of whole planes, and each plane is
//! worked by one task, so no result depends on the thread count. Indices are checked as they are
//! read, in the one pass that moves the values; the first index outside its plane (row-major) is
//! the error, and the output is then all zeros.

use super::schedule::{Planes, Planned, Work, runs, task_count};
use super::{CacheLine, Carver, Cpu, Sizer, task_share};

use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::{Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{IndexedGeometry, MaxPoolDoubleBackward, MaxUnpool, MaxUnpoolBackward};
use crate::tensor::{TensorMut, TensorRef};

/// What an indexed operation does with each index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// `full[idx[i]] = pooled[i]`, the last `i` of an index winning; the rest of `full` zero.
    Scatter,
    /// `pooled[i] = full[idx[i]]` for the last `i` of each index, zero for the earlier ones.
    GatherLast,
    /// `pooled[i] = full[idx[i]]`.
    Gather,
}

impl Move {
    /// Elements per plane of the side read and of the side written.
    fn lengths(self, g: &IndexedGeometry) -> (usize, usize) {
        match self {
            Move::Scatter => (g.pooled, g.full),
            Move::GatherLast | Move::Gather => (g.full, g.pooled),
        }
    }
}

/// Phase-1 state: the runs of planes, and the marks each task keeps (a byte per position of a
/// plane, for [`Move::GatherLast`]).
#[derive(Debug)]
pub struct IndexedPrepared {
    tasks: usize,
    marks_per_task: usize,
}

fn prepare<E: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &IndexedGeometry,
    how: Move,
    (source, indices, target): (&TensorRef<'_, E>, &TensorRef<'_, I>, &TensorMut<'_, E>),
) -> Result<(Planned<IndexedPrepared>, usize)> {
    let work = Work::Backward(Planes { count: g.planes, h: g.full, w: 1, ho: g.pooled, wo: 1 });
    Planned::of(cpu, work, |cpu| {
        let mut sizer = Sizer::new();
        sizer.stage(&source.view())?;
        sizer.stage(&indices.view())?;
        sizer.stage(&target.as_ref().view())?;
        let tasks = task_count(cpu, g.planes);
        let marks_per_task = if how == Move::GatherLast { task_share::<i8>(g.full) } else { 0 };
        sizer.region::<i8>(tasks * marks_per_task)?;
        Ok((IndexedPrepared { tasks, marks_per_task }, sizer.total()))
    })
}

fn run<E: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &IndexedGeometry,
    how: Move,
    (source, indices, target): (TensorRef<'_, E>, TensorRef<'_, I>, TensorMut<'_, E>),
    p: &Planned<IndexedPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    let mut carver = Carver::new(memory);
    let src = carver.stage(source.view())?;
    let idx = carver.stage(indices.view())?;
    let mut dst = carver.output(target.into_view())?;
    let marks = carver.region::<i8>(p.plan.tasks * p.plan.marks_per_task)?;
    let (src_len, dst_len) = how.lengths(g);
    let per = runs(g.planes, p.plan.tasks).next().map_or(1, |r| r.len().max(1));
    let mut marks = marks.chunks_mut(p.plan.marks_per_task.max(1));
    let tasks: Vec<_> = src
        .chunks(per * src_len.max(1))
        .zip(idx.chunks(per * g.pooled.max(1)))
        .zip(dst.slice().chunks_mut(per * dst_len.max(1)))
        .enumerate()
        .map(|(t, ((s, i), d))| (t * per, s, i, d, marks.next().unwrap_or(&mut [])))
        .collect();
    let results =
        p.device(cpu).map_tasks(tasks, |(first, s, i, d, m)| move_planes(g, how, first, (s, i, d), m));
    if let Some(Err((element, value))) = results.into_iter().find(Result::is_err) {
        dst.slice().fill(E::zero());
        dst.finish("output")?;
        return Err(g.index_error(UNNAMED, element, value));
    }
    dst.finish("output")
}

/// One task's planes, from plane `first` on: the first bad index as `(element, value)`.
fn move_planes<E: PoolFloat, I: ArgmaxIndex>(
    g: &IndexedGeometry,
    how: Move,
    first: usize,
    (src, idx, dst): (&[E], &[I], &mut [E]),
    marks: &mut [i8],
) -> core::result::Result<(), (usize, i64)> {
    let (src_len, dst_len) = how.lengths(g);
    for (plane, idx) in idx.chunks(g.pooled.max(1)).enumerate() {
        let s = &src[plane * src_len..(plane + 1) * src_len];
        let d = &mut dst[plane * dst_len..(plane + 1) * dst_len];
        let bad = |i: usize, j: &I| ((first + plane) * g.pooled + i, j.to_i64());
        match how {
            Move::Scatter => {
                d.fill(E::zero());
                // `d` is the plane of `g.full` positions: `get_mut` is the index check (a
                // negative index wraps past every plane).
                for (i, (v, j)) in s.iter().zip(idx).enumerate() {
                    let Some(slot) = d.get_mut(j.to_usize_wrapping()) else { return Err(bad(i, j)) };
                    *slot = *v;
                }
            }
            Move::Gather => {
                for (i, (v, j)) in d.iter_mut().zip(idx).enumerate() {
                    let Some(&read) = s.get(j.to_usize_wrapping()) else { return Err(bad(i, j)) };
                    *v = read;
                }
            }
            Move::GatherLast => {
                // From the last index back: one that a later equal index already marked was
                // overwritten in the forward, and gets nothing. Scanning backwards, the bad
                // index reported is the earliest one met. A mark is a byte per position of
                // `s`, as many as it has, so that `s`'s index check is the marks' too (a bit
                // would take a check and a shift of its own).
                let marks = &mut marks[..s.len()];
                marks.fill(0);
                let mut earliest = None;
                for (i, (v, j)) in d.iter_mut().zip(idx).enumerate().rev() {
                    let at = j.to_usize_wrapping();
                    let Some(&read) = s.get(at) else {
                        earliest = Some(bad(i, j));
                        continue;
                    };
                    *v = if marks[at] != 0 { E::zero() } else { read };
                    marks[at] = 1;
                }
                if let Some(e) = earliest {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxUnpool<'a, T, I, N>> for Cpu
where
    crate::op::Axes<N>: crate::op::SpatialAxes,
{
    type Prepared = Planned<IndexedPrepared>;

    fn prepare(&self, op: &MaxUnpool<'a, T, I, N>, g: &IndexedGeometry) -> Result<(Self::Prepared, usize)> {
        prepare(self, g, Move::Scatter, (&op.input, &op.indices, &op.output))
    }

    fn launch(
        &self,
        op: MaxUnpool<'a, T, I, N>,
        g: &IndexedGeometry,
        p: Self::Prepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run(self, g, Move::Scatter, (op.input, op.indices, op.output), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxUnpoolBackward<'a, T, I, N>> for Cpu
where
    crate::op::Axes<N>: crate::op::SpatialAxes,
{
    type Prepared = Planned<IndexedPrepared>;

    fn prepare(
        &self,
        op: &MaxUnpoolBackward<'a, T, I, N>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        prepare(self, g, Move::GatherLast, (&op.grad_output, &op.indices, &op.grad_input))
    }

    fn launch(
        &self,
        op: MaxUnpoolBackward<'a, T, I, N>,
        g: &IndexedGeometry,
        p: Self::Prepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run(self, g, Move::GatherLast, (op.grad_output, op.indices, op.grad_input), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxPoolDoubleBackward<'a, T, I, N>> for Cpu
where
    crate::op::Axes<N>: crate::op::SpatialAxes,
{
    type Prepared = Planned<IndexedPrepared>;

    fn prepare(
        &self,
        op: &MaxPoolDoubleBackward<'a, T, I, N>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        prepare(self, g, Move::Gather, (&op.grad_grad_input, &op.indices, &op.grad_grad_output))
    }

    fn launch(
        &self,
        op: MaxPoolDoubleBackward<'a, T, I, N>,
        g: &IndexedGeometry,
        p: Self::Prepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run(self, g, Move::Gather, (op.grad_grad_input, op.indices, op.grad_grad_output), &p, memory)
    }
}
