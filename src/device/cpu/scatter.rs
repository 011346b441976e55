//! The backward kernel shared by every flat-index gradient (adaptive, max pooling with indices,
//! and the `I32Argmax` mask): zero each plane, then add each gradient at its index in row-major
//! output order. Each index is checked against the plane as it is used, so the indices are read
//! once.

use super::Cpu;
use super::forward::{planes_per_task, task_count};
use super::workspace::{Carver, Sizer};

use num_traits::Zero;

use crate::element::{AccFloat, PoolFloat};
use crate::error::{Error, Result};
use crate::index::ArgmaxIndex;
use crate::tensor::{TensorMut, TensorRef};

/// Phase-1 state of a scatter.
#[derive(Debug)]
pub struct ScatterPrepared {
    tasks: usize,
    /// f32 accumulators per task: a plane for the half types, else 0 (sums go to the output).
    acc_per_task: usize,
    /// f32 gradients per task: one converted plane of `grad_output` for the half types, else 0.
    grad_per_task: usize,
}

/// Sizes of a scatter: `planes` planes of `hw` inputs receiving `ohw` gradients each.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScatterShape {
    pub planes: usize,
    pub hw: usize,
    pub ohw: usize,
}

/// An index outside its plane: element `element` of the indices (row-major) holds `value`.
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
    /// Plans a scatter and adds its scratch to `sizer`.
    pub(super) fn new<T: PoolFloat>(cpu: &Cpu, shape: ScatterShape, sizer: &mut Sizer) -> Result<Self> {
        let tasks = task_count(cpu, shape.planes);
        let half = T::as_acc(&[]).is_none();
        let (acc_per_task, grad_per_task) = if half { (shape.hw, shape.ohw) } else { (0, 0) };
        sizer.region::<T::Acc>(tasks * acc_per_task)?;
        sizer.region::<T::Acc>(tasks * grad_per_task)?;
        Ok(ScatterPrepared { tasks, acc_per_task, grad_per_task })
    }

    /// Carves the scratch counted by [`ScatterPrepared::new`].
    pub(super) fn scratch<'w, T: PoolFloat>(&self, carver: &mut Carver<'w>) -> Result<ScatterScratch<'w, T>> {
        Ok(ScatterScratch {
            acc: carver.region::<T::Acc>(self.tasks * self.acc_per_task)?,
            grad: carver.region::<T::Acc>(self.tasks * self.grad_per_task)?,
        })
    }
}

/// Plans the backward of a flat-index pooling from the views of one call.
pub(super) fn prepare_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    op: &'static str,
    grad_output: &TensorRef<'_, T>,
    indices: &TensorRef<'_, I>,
    grad_input: &TensorMut<'_, T>,
    shape: ScatterShape,
) -> Result<(ScatterPrepared, usize)> {
    let mut sizer = Sizer::new(op);
    sizer.stage(&grad_output.view())?;
    sizer.stage(&indices.view())?;
    sizer.stage(&grad_input.as_ref().view())?;
    let prepared = ScatterPrepared::new::<T>(cpu, shape, &mut sizer)?;
    Ok((prepared, sizer.total()))
}

/// Runs a backward planned by [`prepare_indexed`]; `bad_index` turns the first index outside
/// its plane (element, value) into the operation's error.
pub(super) fn run_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    op: &'static str,
    (grad_output, indices, grad_input): (TensorRef<'_, T>, TensorRef<'_, I>, TensorMut<'_, T>),
    shape: ScatterShape,
    p: &ScatterPrepared,
    memory: &mut [u64],
    bad_index: impl FnOnce(usize, i64) -> Error,
) -> Result<()> {
    let mut carver = Carver::new(op, memory);
    let go = carver.stage(grad_output.view())?;
    let ix = carver.stage(indices.view())?;
    let mut gi = carver.output(grad_input.into_view())?;
    let scratch = p.scratch::<T>(&mut carver)?;
    let checked = scatter(cpu, shape, p, go, ix, gi.slice(), scratch);
    gi.finish(op, "grad_input")?;
    checked.map_err(|bad| bad_index(bad.element, bad.value))
}

struct Task<'s, T: PoolFloat, I> {
    /// Index of the task's first gradient in the whole tensor.
    first: usize,
    go: &'s [T],
    ix: &'s [I],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
    grad: &'s mut [T::Acc],
}

/// Scatters every plane. On an index outside its plane, `gi` is zeroed and the first such index
/// (in row-major order) is returned.
pub(super) fn scatter<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    shape: ScatterShape,
    p: &ScatterPrepared,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    scratch: ScatterScratch<'_, T>,
) -> core::result::Result<(), BadIndex> {
    let ScatterShape { planes, hw, ohw } = shape;
    let per = planes_per_task(planes, p.tasks);
    let mut accs = scratch.acc.chunks_mut(p.acc_per_task.max(1));
    let mut grads = scratch.grad.chunks_mut(p.grad_per_task.max(1));
    let tasks: Vec<_> = gi
        .chunks_mut(per * hw)
        .zip(go.chunks(per * ohw))
        .zip(ix.chunks(per * ohw))
        .enumerate()
        .map(|(t, ((gi, go), ix))| Task {
            first: t * per * ohw,
            go,
            ix,
            gi,
            acc: accs.next().unwrap_or(&mut []),
            grad: grads.next().unwrap_or(&mut []),
        })
        .collect();
    let bad = cpu.map_tasks(tasks, |t| {
        // The half types' accumulators start at zero; each plane puts back the zeros it used.
        t.acc.fill(T::Acc::zero());
        for (plane, ((gi, go), ix)) in
            t.gi.chunks_mut(hw).zip(t.go.chunks(ohw)).zip(t.ix.chunks(ohw)).enumerate()
        {
            scatter_plane(go, ix, gi, &mut *t.acc, &mut *t.grad)
                .map_err(|(k, value)| BadIndex { element: t.first + plane * ohw + k, value })?;
        }
        Ok(())
    });
    match bad.into_iter().find_map(|r| r.err()) {
        None => Ok(()),
        Some(first) => {
            gi.fill(T::zero());
            Err(first)
        }
    }
}

/// One plane. Returns the first bad index as (position in the plane, value).
///
/// `f32`/`f64` sum straight into the zeroed output plane. The half types widen their gradients
/// in bulk and sum in an f32 plane that is zero on entry (and left zero); after each addition
/// the rounded running sum is stored, so the last store to a position holds its whole sum
/// rounded once.
fn scatter_plane<T: PoolFloat, I: ArgmaxIndex>(
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    acc: &mut [T::Acc],
    grad: &mut [T::Acc],
) -> core::result::Result<(), (usize, i64)> {
    if let Some(direct) = T::as_acc_mut(gi) {
        let go = T::as_acc(go).unwrap_or(&[]);
        return add_all(go, ix, direct);
    }
    let len = gi.len();
    let (grad, acc) = (&mut grad[..go.len()], &mut acc[..len]);
    T::to_acc_slice(go, grad);
    gi.fill(T::zero());
    for (k, (&g, &i)) in grad.iter().zip(ix).enumerate() {
        let Some(at) = i.flat_in(len) else { return Err((k, i.to_i64())) };
        acc[at] += g;
        // The last store to a position holds its whole sum, rounded once.
        gi[at] = T::from_acc(acc[at]);
    }
    // Leave the accumulators zero for the next plane: only the touched ones changed.
    for &i in ix {
        acc[i.flat_in(len).unwrap_or(0)] = T::Acc::zero();
    }
    Ok(())
}

/// Zeroes `plane` and adds each gradient at its index, checking each index.
#[inline]
fn add_all<A: AccFloat, I: ArgmaxIndex>(
    go: &[A],
    ix: &[I],
    plane: &mut [A],
) -> core::result::Result<(), (usize, i64)> {
    plane.fill(A::zero());
    let len = plane.len();
    for (k, (&g, &i)) in go.iter().zip(ix).enumerate() {
        match i.flat_in(len) {
            Some(at) => plane[at] += g,
            None => return Err((k, i.to_i64())),
        }
    }
    Ok(())
}
