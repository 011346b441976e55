//! The backward kernel shared by every flat-index gradient (adaptive, max pooling with indices,
//! and the `I32Argmax` mask): zero each plane, then add each gradient at its index in row-major
//! output order. The two backwards with flat indices are nothing else, and their `Launch` impls
//! are here. Each index is checked against the plane as it is used, so the indices are read
//! once. Large planes are zeroed a window's rows at a time, just ahead of the additions that
//! reach them ([`ZERO_BY_ROWS`]); an index beyond the rows zeroed so far (any index in the plane
//! is allowed) zeroes the rest of the plane first, so the additions are the same.
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
use super::schedule::{InputBands, Planes, Planned, ScatterSplit, Taps, Windowed, Work};
use super::simd::{self, Isa};
use super::{CacheLine, Carver, Output, Sizer, task_share};

use num_traits::Zero;

use crate::alloc::collect_exact;
use crate::device::internal::Launch;
use crate::element::{AccFloat, Element, PoolFloat};
use crate::error::{Error, Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{
    AdaptiveGeometry, AdaptiveGeometry3d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3dBackward,
    MaxPool2dWithIndicesBackward, MaxPool3dGeometry, MaxPool3dWithIndicesBackward, MaxPoolGeometry,
};
use crate::tensor::{TensorMut, TensorRef};

/// Phase-1 state of a scatter.
#[derive(Debug)]
pub struct ScatterPrepared {
    planes: Planes,
    split: ScatterSplit,
    /// The input rows of each output row's windows (none when the planes are empty).
    windows: Vec<Range<usize>>,
    /// The runs of a whole plane ([`ScatterPrepared::whole_plane_runs`]).
    plane_runs: Vec<Run>,
    /// f32 accumulators per task: a plane for the half types, else 0 (sums go to the output, as
    /// they do for planes of one gradient).
    /// Each task's share is rounded up to whole cache lines ([`task_share`]), as is `grad`'s.
    acc_per_task: usize,
    /// f32 gradients per task: one converted plane of `grad_output` for the half types, else 0.
    grad_per_task: usize,
    /// The instructions the half types' settled sums are rounded with ([`Rounded::settled`]).
    isa: Isa,
}

/// Whole planes of at least this many bytes are zeroed a window's rows at a time, just before
/// their sums, rather than all at once: the rows are then still in the first-level cache when
/// the sums land. Smaller planes are zeroed at once (one `memset`, in cache anyway), because on
/// them the extra calls of zeroing by rows cost more than the cache misses they save.
///
/// Any value stores the same gradients (each element is zeroed before its first addition,
/// [`zeroes_by_rows`]); the value is where the two ways cross on the benchmark machine:
/// `benches/README.md`, "The measurements behind the tuning constants".
const ZERO_BY_ROWS: usize = 16 * 1024;

/// Whether the whole planes of `planes`, of `T`, whose output row `o` has windows on input rows
/// `windows[o]`, are zeroed a window's rows at a time: planes of at least [`ZERO_BY_ROWS`]
/// bytes with windows for every output row.
///
/// A tuning decision: it chooses how a plane is zeroed, never what is stored. Zeroed at once or
/// by rows, each element is zeroed before its first addition ([`add_by_rows`]).
fn zeroes_by_rows<T>(planes: Planes, windows: &[Range<usize>]) -> bool {
    let Planes { h, w, ho, .. } = planes;
    plane_zeroed_by_rows::<T>(h * w) && windows.len() == ho
}

/// Whether a plane of `hw` elements of `T` is large enough to be zeroed a window's rows at a
/// time: at least [`ZERO_BY_ROWS`] bytes. The one size rule of both backward kernels (this one
/// and the `Bitmask` one), and a tuning decision in both: either way each element is zeroed
/// before its first addition.
pub(super) fn plane_zeroed_by_rows<T>(hw: usize) -> bool {
    hw.saturating_mul(size_of::<T>()) >= ZERO_BY_ROWS
}

/// How far into a plane of `planes` the zeroing has to reach before the gradients of an output
/// row whose windows read input rows `window` are added: the end of its last row.
///
/// A tuning decision as well: [`add_by_rows`] zeroes the rest of the plane before any index
/// past the elements zeroed so far, and never zeroes an element twice, so any reach stores the
/// same gradient; this one zeroes each row just before its first sums, while it is in cache.
fn zeroing_reach(window: &Range<usize>, planes: Planes) -> usize {
    (window.end * planes.w).min(planes.h * planes.w)
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
    pub(super) fn plan<T: PoolFloat>(
        cpu: &Cpu,
        planes: Planes,
        window_rows: &[Taps],
        sizer: &mut Sizer,
    ) -> Result<Self> {
        let windows =
            collect_exact(UNNAMED, "windows", window_rows.len(), window_rows.iter().map(Taps::span))?;
        let split = ScatterSplit::of(cpu, planes, &windows)?;
        // The half types sum in scratch, but for planes of one gradient.
        let summed_in_scratch =
            T::as_acc(&[]).is_none() && !matches!(split, ScatterSplit::OneGradient { .. });
        let (hw, ohw) = (planes.h * planes.w, planes.ho * planes.wo);
        let (acc_per_task, grad_per_task) =
            if summed_in_scratch { (task_share::<T::Acc>(hw), task_share::<T::Acc>(ohw)) } else { (0, 0) };
        let plane_runs = Self::whole_plane_runs::<T>(planes, &windows)?;
        let isa = cpu.isa();
        let p = ScatterPrepared { planes, split, windows, plane_runs, acc_per_task, grad_per_task, isa };
        sizer.region::<T::Acc>(p.tasks() * acc_per_task)?;
        sizer.region::<T::Acc>(p.tasks() * grad_per_task)?;
        Ok(p)
    }

    /// The runs of a whole plane of `T` zeroed by rows ([`Plane`]): when
    /// [`zeroes_by_rows`] says so, each output row's gradients, with how far into the plane its
    /// windows reach. Else none: the plane is zeroed at once.
    fn whole_plane_runs<T>(planes: Planes, windows: &[Range<usize>]) -> Result<Vec<Run>> {
        let Planes { ho, wo, .. } = planes;
        if !zeroes_by_rows::<T>(planes, windows) {
            return Ok(Vec::new());
        }
        let per_row = windows.iter().enumerate().map(|(o, window)| Run {
            gradients: o * wo..(o + 1) * wo,
            allowed: 0..zeroing_reach(window, planes),
        });
        collect_exact(UNNAMED, "runs", ho, per_row)
    }

    fn tasks(&self) -> usize {
        self.split.tasks(self.planes.count)
    }

    /// Carves the scratch counted by [`ScatterPrepared::plan`].
    pub(super) fn scratch<'w, T: PoolFloat>(&self, carver: &mut Carver<'w>) -> Result<ScatterScratch<'w, T>> {
        Ok(ScatterScratch {
            acc: carver.region::<T::Acc>(self.tasks() * self.acc_per_task)?,
            grad: carver.region::<T::Acc>(self.tasks() * self.grad_per_task)?,
        })
    }
}

/// The backward state of a max pooling with flat indices, with its scratch added to `sizer`
/// (what the `I32Argmax` mask backward and the banded `Bitmask` backward scatter with).
pub(super) fn prepare_max_pool<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ScatterPrepared> {
    ScatterPrepared::plan::<T>(cpu, Planes::from(g), &g.taps()?.0, sizer)
}

/// Phase 1 of the backward of a flat-index pooling (adaptive, or max pooling with indices), on
/// the device the call's size deserves ([`Planned`]).
fn prepare_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    (grad_output, indices, grad_input): (&TensorRef<'_, T>, &TensorRef<'_, I>, &TensorMut<'_, T>),
) -> Result<(Planned<ScatterPrepared>, usize)> {
    let window_rows = g.taps()?.0;
    Planned::of(cpu, Work::backward(g.plane_sizes()), |cpu| {
        let mut sizer = Sizer::new();
        sizer.stage(&grad_output.view())?;
        sizer.stage(&indices.view())?;
        sizer.stage(&grad_input.as_ref().view())?;
        let prepared = ScatterPrepared::plan::<T>(cpu, g.plane_sizes(), &window_rows, &mut sizer)?;
        Ok((prepared, sizer.total()))
    })
}

/// Phase 2 of [`prepare_indexed`]: the first index outside its plane is the operation's error.
fn run_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    (grad_output, indices, grad_input): (TensorRef<'_, T>, TensorRef<'_, I>, TensorMut<'_, T>),
    p: &Planned<ScatterPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    let mut carver = Carver::new(memory);
    let go = carver.stage(grad_output.view())?;
    let ix = carver.stage(indices.view())?;
    scatter_into(p.device(cpu), &p.plan, (go, ix, grad_input), carver, |e, v| g.bad_index(e, v))
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndicesBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        prepare_indexed(self, g, (&op.grad_output, &op.indices, &op.grad_input))
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.grad_output, op.indices, op.grad_input), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        prepare_indexed(self, g, (&op.grad_output, &op.indices, &op.grad_input))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.grad_output, op.indices, op.grad_input), &p, memory)
    }
}

/// The 3-D backwards are the same scatter: their indices are flat in the volume, which the
/// geometry describes as a plane of `D·H` rows (`schedule::VolumeWindowed`).
impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool3dWithIndicesBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &MaxPool3dWithIndicesBackward<'a, T, I>,
        g: &MaxPool3dGeometry,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        prepare_indexed(self, g, (&op.grad_output, &op.indices, &op.grad_input))
    }

    fn launch(
        &self,
        op: MaxPool3dWithIndicesBackward<'a, T, I>,
        g: &MaxPool3dGeometry,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.grad_output, op.indices, op.grad_input), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool3dBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool3dBackward<'a, T, I>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        prepare_indexed(self, g, (&op.grad_output, &op.indices, &op.grad_input))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool3dBackward<'a, T, I>,
        g: &AdaptiveGeometry3d,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.grad_output, op.indices, op.grad_input), &p, memory)
    }
}

/// Scatters the staged `go` and `ix` into `grad_input` (carved from what is left of `carver`,
/// written back if staged), leaving it unzeroed where it is known zero ([`skips_zeroing`]);
/// `bad_index` turns the first index outside its plane (element, value) into the operation's
/// error.
pub(super) fn scatter_into<'g: 'w, 'w, T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    (go, ix, grad_input): (&[T], &[I], TensorMut<'g, T>),
    mut carver: Carver<'w>,
    bad_index: impl FnOnce(usize, i64) -> Error,
) -> Result<()> {
    let known_zero = grad_input.is_known_zero();
    let mut gi = carver.output(grad_input.into_view())?;
    let cleared = skips_zeroing(known_zero, &mut gi);
    let scratch = p.scratch::<T>(&mut carver)?;
    let checked = scatter(cpu, p, go, ix, gi.slice(), scratch, cleared);
    gi.finish("grad_input")?;
    checked.map_err(|bad| bad_index(bad.element, bad.value))
}

/// Scatters every plane. On an index outside its plane, `gi` is zeroed and the first such index
/// (in row-major order) is returned. `cleared` says whether `gi` already holds only zeros that
/// need not be written again ([`skips_zeroing`]).
pub(super) fn scatter<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    scratch: ScatterScratch<'_, T>,
    cleared: bool,
) -> core::result::Result<(), BadIndex> {
    let ohw = p.planes.ho * p.planes.wo;
    let bad = match &p.split {
        ScatterSplit::Planes { per_task, .. } => {
            whole_planes(cpu, p, *per_task, (go, ix, gi), scratch, cleared)
        }
        ScatterSplit::OneGradient { per_task, .. } => one_gradient_runs(cpu, p, *per_task, go, ix, gi),
        ScatterSplit::Bands(bands) => banded_planes(cpu, p, bands, go, ix, gi, scratch),
    };
    match bad {
        None => Ok(()),
        Some((plane, k)) => {
            gi.fill(T::default());
            let element = plane * ohw + k;
            Err(BadIndex { element, value: ix[element].to_i64() })
        }
    }
}

/// Runs of whole planes, one run per task, of the gradient `go`, the indices `ix` and the input
/// gradient `gi`. Returns the first bad index as (plane, position).
fn whole_planes<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    per_task: usize,
    (go, ix, gi): (&[T], &[I], &mut [T]),
    scratch: ScatterScratch<'_, T>,
    cleared: bool,
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
        // Sparse planes need their accumulators zero on entry (and leave them zero).
        acc.fill(T::Acc::zero());
        for (plane, ((gi, go), ix)) in gi.chunks_mut(hw).zip(go.chunks(ohw)).zip(ix.chunks(ohw)).enumerate() {
            add_into(go, ix, Plane { rows: &p.plane_runs }, gi, (acc, grad, p.isa), cleared)
                .map_err(|k| (first + plane, k))?;
        }
        Ok(())
    });
    bad.into_iter().find_map(|r| r.err())
}

/// Runs of whole planes of one gradient each ([`ScatterSplit::OneGradient`]), one run per task. Returns
/// the first bad index as (plane, position).
fn one_gradient_runs<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    p: &ScatterPrepared,
    per_task: usize,
    go: &[T],
    ix: &[I],
    gi: &mut [T],
) -> Option<(usize, usize)> {
    let hw = p.planes.h * p.planes.w;
    let tasks: Vec<_> =
        gi.chunks_mut(per_task * hw).zip(go.chunks(per_task)).zip(ix.chunks(per_task)).collect();
    let bad = cpu.map_tasks(tasks, |((gi, go), ix)| one_gradient_planes(go, ix, gi, hw));
    bad.into_iter().enumerate().find_map(|(t, r)| r.err().map(|plane| (t * per_task + plane, 0)))
}

/// Planes of one gradient each (output 1x1, global pooling) are zeroed this many bytes' worth at
/// a time, before their gradients are stored: one fill for many small planes, while they stay in
/// the first-level cache.
const ONE_GRADIENT_BLOCK: usize = 16 * 1024;

/// How many planes of `hw` inputs of `T` [`one_gradient_planes`] zeroes at a time: as many as
/// fill [`ONE_GRADIENT_BLOCK`] bytes, at least one.
///
/// A tuning decision: blocks of any size store the same gradients, since every block is zeroed
/// before its gradients are stored.
fn planes_per_zeroing_block<T>(hw: usize) -> usize {
    (ONE_GRADIENT_BLOCK / (hw * size_of::<T>())).max(1)
}

/// Planes of `hw` inputs and one gradient each, whole: zeroed a block at a time
/// ([`ONE_GRADIENT_BLOCK`]), then each gradient stored at its index as the sum `0 + g`, rounded
/// once ([`Accumulate::sum_of_one`](crate::element::Accumulate::sum_of_one)), exactly what [`add_into`] would store. Returns the first
/// plane whose index lies outside it.
fn one_gradient_planes<T: PoolFloat, I: ArgmaxIndex>(
    go: &[T],
    ix: &[I],
    gi: &mut [T],
    hw: usize,
) -> core::result::Result<(), usize> {
    let block = planes_per_zeroing_block::<T>(hw);
    let blocks = gi.chunks_mut(block * hw).zip(go.chunks(block)).zip(ix.chunks(block));
    for (b, ((gi, go), ix)) in blocks.enumerate() {
        gi.fill(T::default());
        for (p, (&g, &i)) in go.iter().zip(ix).enumerate() {
            let Some(at) = i.flat_in(hw) else { return Err(b * block + p) };
            gi[p * hw + at] = g.sum_of_one();
        }
    }
    Ok(())
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
    let windows = &p.windows;
    let flagged = cpu.map_tasks(tasks, |(plane, band, out, go, ix, acc, grad)| {
        // The band's gradients are output rows `read`; each run's are numbered from the first.
        let read = bands.reads[band].clone();
        let runs = read.clone().map(|o| Run {
            gradients: (o - read.start) * wo..(o - read.start + 1) * wo,
            // Inputs narrower than the window's rows would only send more planes to be redone
            // whole (an equivalent mutant of `end * w` narrows them: `.cargo/mutants.toml`).
            allowed: windows[o].start * w..windows[o].end * w,
        });
        let gradients = read.start * wo..read.end * wo;
        let owned = band * bands.rows * w;
        let (go, ix) = (&go[gradients.clone()], &ix[gradients]);
        add_into(go, ix, Band { runs, owned }, out, (acc, grad, p.isa), false).err().map(|_| plane)
    });
    let mut redo: Vec<usize> = flagged.into_iter().flatten().collect();
    redo.dedup();
    let (acc, grad) = (&mut scratch.acc[..p.acc_per_task], &mut scratch.grad[..p.grad_per_task]);
    acc.fill(T::Acc::zero());
    redo.into_iter().find_map(|plane| {
        let (gi, go, ix) =
            (&mut gi[plane * hw..][..hw], &go[plane * ohw..][..ohw], &ix[plane * ohw..][..ohw]);
        add_into(go, ix, Plane { rows: &p.plane_runs }, gi, (acc, grad, p.isa), false)
            .err()
            .map(|k| (plane, k))
    })
}

/// Gradients `gradients` (positions in the slices given to [`add_into`]) whose windows cover the
/// plane's flat inputs `allowed`. A band requires their indices to lie there; a whole plane
/// takes any index in the plane and zeroes itself up to `allowed.end` before adding them.
#[derive(Debug, Clone)]
struct Run {
    gradients: Range<usize>,
    allowed: Range<usize>,
}

/// What [`add_into`] fills: a [`Band`] or a [`Plane`].
trait Part {
    /// Whether this is a whole plane (any index in it allowed).
    const WHOLE_PLANE: bool;

    /// Zeroes `sums` and adds to them, in order, each gradient whose index lands in them.
    /// Returns the position (in `ix`) of the first index this part does not allow.
    fn add<G: Copy, I: ArgmaxIndex>(
        self,
        go: &[G],
        ix: &[I],
        sums: &mut impl Sums<G>,
    ) -> core::result::Result<(), usize>;
}

/// A band of a plane, from its flat input `owned` on, fed by `runs`, whose indices must lie in
/// their windows' rows.
struct Band<R> {
    runs: R,
    owned: usize,
}

/// A whole plane, any index in it allowed; zeroed a window's rows at a time when `rows` (the runs
/// of each output row) are given, else at once.
struct Plane<'r> {
    rows: &'r [Run],
}

impl<R: Iterator<Item = Run>> Part for Band<R> {
    const WHOLE_PLANE: bool = false;

    /// The band's sums are inputs `owned..owned + sums.len()` of the plane; an index outside
    /// its run's `allowed` inputs is not allowed.
    #[inline(always)]
    fn add<G: Copy, I: ArgmaxIndex>(
        self,
        go: &[G],
        ix: &[I],
        sums: &mut impl Sums<G>,
    ) -> core::result::Result<(), usize> {
        let (len, owned) = (sums.len(), self.owned);
        sums.zero(0..len);
        for Run { gradients, allowed } in self.runs {
            let first = gradients.start;
            for (k, (&g, &i)) in go[gradients.clone()].iter().zip(&ix[gradients]).enumerate() {
                match i.flat_within(allowed.start, allowed.len()) {
                    Some(at) => {
                        let local = at.wrapping_sub(owned);
                        if local < len {
                            sums.add(local, g);
                        }
                    }
                    None => return Err(first + k),
                }
            }
        }
        sums.settle(len);
        Ok(())
    }
}

impl Part for Plane<'_> {
    const WHOLE_PLANE: bool = true;

    /// Any index in the plane is allowed. With `rows`, the plane is zeroed as the windows reach
    /// further (`allowed.end`), so each row is zeroed just before its first sums, while it is
    /// still in the cache; an index past the rows zeroed so far zeroes the rest first. Without,
    /// it is zeroed at once.
    #[inline(always)]
    fn add<G: Copy, I: ArgmaxIndex>(
        self,
        go: &[G],
        ix: &[I],
        sums: &mut impl Sums<G>,
    ) -> core::result::Result<(), usize> {
        let len = sums.len();
        if self.rows.is_empty() {
            sums.zero(0..len);
            let added = add_within(sums, go, ix);
            sums.settle(len);
            return if added < ix.len() { Err(added) } else { Ok(()) };
        }
        add_by_rows(go, ix, self.rows, sums)
    }
}

/// [`Plane::add`] zeroing the plane by rows: `rows` are the runs of each output row. Out of
/// line, so that its loop state does not crowd the registers of the at-once path's additions on
/// small planes.
#[inline(never)]
fn add_by_rows<G: Copy, I: ArgmaxIndex>(
    go: &[G],
    ix: &[I],
    rows: &[Run],
    sums: &mut impl Sums<G>,
) -> core::result::Result<(), usize> {
    let len = sums.len();
    let mut zeroed = 0;
    for Run { gradients, allowed } in rows {
        let first = gradients.start;
        let (go, ix) = (&go[gradients.clone()], &ix[gradients.clone()]);
        if allowed.end > zeroed {
            let reach = allowed.end.min(len);
            sums.zero(zeroed..reach);
            zeroed = reach;
        }
        let mut k = 0;
        loop {
            k += add_within(&mut sums.head(zeroed), &go[k..], &ix[k..]);
            let Some(i) = ix.get(k) else { break };
            // An index past the rows zeroed so far: zero the rest of the plane, unless the
            // index lies outside it.
            if i.flat_in(len).is_none() {
                return Err(first + k);
            }
            sums.zero(zeroed..len);
            zeroed = len;
        }
    }
    sums.zero(zeroed..len);
    sums.settle(len);
    Ok(())
}

/// Zeroes `out` (a band or a whole plane) and adds to it, in row-major order, each gradient whose
/// index lands in it. Returns the position (in `ix`) of the first index outside its run's
/// `allowed` inputs (a band) or outside the plane.
///
/// `f32`/`f64` sum straight into `out`. The half types widen their gradients in bulk into `grad`
/// and sum in `acc` ([`Rounded`]), each position's whole sum rounded once. A band, or a plane
/// with few positions per index, zeroes `acc` alongside `out`; `f16` stores its rows rounded as
/// they become final ([`Rounded::settled`]), `bf16` each running sum ([`Rounded::running`]):
/// [`Accumulate::ROUNDS_SLICES_FASTER`](crate::element::Accumulate::ROUNDS_SLICES_FASTER). A
/// plane with many positions per index (sparse) stores running sums, and needs `acc` zero on
/// entry and leaves it zero, clearing only the sums it touched.
fn add_into<T: PoolFloat, I: ArgmaxIndex, P: Part>(
    go: &[T],
    ix: &[I],
    part: P,
    out: &mut [T],
    (acc, grad, isa): (&mut [T::Acc], &mut [T::Acc], Isa),
    cleared: bool,
) -> core::result::Result<(), usize> {
    let len = out.len();
    if let Some(direct) = T::as_acc_mut(out) {
        let go = T::as_acc(go).unwrap_or(&[]);
        return if cleared {
            part.add(go, ix, &mut Direct::<_, true>(direct))
        } else {
            part.add(go, ix, &mut Direct::<_, false>(direct))
        };
    }
    let (grad, acc) = (&mut grad[..go.len()], &mut acc[..len]);
    T::to_acc_slice(go, grad);
    let sparse = P::WHOLE_PLANE && sums_sparsely(len, ix.len());
    let result = if sparse {
        part.add(grad, ix, &mut Rounded::running(acc, out, false))
    } else if T::ROUNDS_SLICES_FASTER {
        part.add(grad, ix, &mut Rounded::settled(acc, out, isa))
    } else {
        part.add(grad, ix, &mut Rounded::running(acc, out, true))
    };
    if sparse {
        for &i in ix {
            if let Some(at) = i.flat_in(acc.len()) {
                acc[at] = T::Acc::zero();
            }
        }
    }
    result
}

/// Whether a whole plane of `positions` sums, fed by `indices` gradients, keeps its accumulators
/// zero by clearing only the sums its indices touched, rather than zeroing them all with the
/// plane: when it has more than 8 positions per index.
///
/// A tuning decision: either way every accumulator is zero before its first addition (a task
/// zeroes its accumulators on entry), so the sums are the same.
#[inline(always)]
fn sums_sparsely(positions: usize, indices: usize) -> bool {
    positions > 8 * indices
}

/// Where a scatter's sums go.
pub(super) trait Sums<G> {
    /// How many sums there are.
    fn len(&self) -> usize;
    /// The first `n` sums (all of them if there are fewer): a view whose length bounds every
    /// position, so additions through it need no other check.
    fn head(&mut self, n: usize) -> impl Sums<G> + '_;
    /// Zeroes the sums at positions `range`, before anything is added to them.
    fn zero(&mut self, range: Range<usize>);
    /// Adds `g` to the sum at `at`.
    fn add(&mut self, at: usize, g: G);
    /// Says that the sums before `end` are final: no later addition reaches them. Sums kept in
    /// accumulators are stored from here; those kept in the output, or stored as they run,
    /// have nothing to do. The flat-index kernel settles a part once, at its end (any index in
    /// the plane may come at any time); the `Bitmask` decoder, whose offsets lie in their
    /// windows, settles the rows before each output row's windows, which never start earlier
    /// in row-major order.
    #[inline(always)]
    fn settle(&mut self, end: usize) {
        let _ = end;
    }
}

/// Sums kept in the output itself (`f32`, `f64`). `CLEARED`: the output already holds only
/// zeros ([`skips_zeroing`]), and [`Sums::zero`] has nothing to do.
pub(super) struct Direct<'a, A, const CLEARED: bool>(pub(super) &'a mut [A]);

impl<A: AccFloat, const CLEARED: bool> Sums<A> for Direct<'_, A, CLEARED> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    fn head(&mut self, n: usize) -> impl Sums<A> + '_ {
        let n = n.min(self.0.len());
        Direct::<A, CLEARED>(&mut self.0[..n])
    }

    #[inline(always)]
    fn zero(&mut self, range: Range<usize>) {
        if !CLEARED {
            self.0[range].fill(A::zero());
        }
    }

    #[inline(always)]
    fn add(&mut self, at: usize, g: A) {
        self.0[at] += g;
    }
}

/// The largest output, in bytes, whose zeros a scatter trusts rather than writes again.
///
/// A tuning decision: an allocating backward's gradient comes zeroed from `calloc`, which clears
/// reused memory itself (so the kernel's zeroing is a second pass over it) but maps fresh pages
/// untouched, and on those the zeroing is the first touch: skipped, the first read maps the
/// shared zero page and the first addition copies it, which makes a large gradient several
/// times slower. Small gradients are mostly reused memory, still in cache after `calloc`, and
/// have few pages either way. Any bound stores the same sums: the skipped zeros are there.
/// (`benches/README.md`, "The measurements behind the tuning constants".)
const CLEARED_MAX_BYTES: usize = 256 * 1024;

/// Whether the scatter leaves `gi` unzeroed (`Direct<_, true>`): its tensor was `known_zero` (the
/// allocating function's), and it is computed in place (not staged) and at most
/// [`CLEARED_MAX_BYTES`]. Only `f32` and `f64`, which sum in the output itself, act on it
/// ([`add_into`]).
pub(super) fn skips_zeroing<T: Element>(known_zero: bool, gi: &mut Output<'_, T>) -> bool {
    known_zero && gi.in_place() && size_of_val(gi.slice()) <= CLEARED_MAX_BYTES
}

/// Sums kept in accumulators and stored rounded to the output (the half types), in one of two
/// ways with the same bits: each position holds its whole sum rounded once.
/// - Running (`SETTLED = false`): each running sum is stored rounded as it changes, so the last
///   store holds the whole sum. For `bf16`, whose rounding is a few integer instructions, and
///   for sparse planes (few additions over many positions), where rounding whole rows would cost
///   more than the additions.
/// - Settled (`SETTLED = true`, `f16`): the additions only add; the sums are stored rounded
///   once final ([`Sums::settle`]), as slices ([`simd::narrow`], F16C in the vector copy).
///
/// Either way the output is zeroed with the accumulators, ahead of the additions. Settled sums
/// overwrite those zeros, but zeroing brings the rows' cache lines in while the additions run,
/// where a first write at the settle waits for them.
pub(super) struct Rounded<'a, T: PoolFloat, const SETTLED: bool> {
    acc: &'a mut [T::Acc],
    out: &'a mut [T],
    /// Settled: the sums before this are stored (and final).
    stored: usize,
    /// Running: whether [`Sums::zero`] zeroes the accumulators too, or the caller keeps them
    /// zero (settled sums always zero them).
    zero_acc: bool,
    /// The instructions settled sums are rounded with ([`simd::narrow`]).
    isa: Isa,
}

impl<'a, T: PoolFloat> Rounded<'a, T, false> {
    /// Running sums of the plane `out` in `acc` (as long): `zero` zeroes the output, and the
    /// accumulators too when `zero_acc` (else the caller keeps them zero).
    pub(super) fn running(acc: &'a mut [T::Acc], out: &'a mut [T], zero_acc: bool) -> Self {
        Rounded { acc, out, stored: 0, zero_acc, isa: Isa::Baseline }
    }
}

impl<'a, T: PoolFloat> Rounded<'a, T, true> {
    /// Settled sums of the plane `out` in `acc` (as long), rounded with `isa`: `zero` zeroes
    /// both, and [`Sums::settle`] stores the sums.
    pub(super) fn settled(acc: &'a mut [T::Acc], out: &'a mut [T], isa: Isa) -> Self {
        Rounded { acc, out, stored: 0, zero_acc: true, isa }
    }
}

impl<T: PoolFloat, const SETTLED: bool> Sums<T::Acc> for Rounded<'_, T, SETTLED> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.out.len()
    }

    #[inline(always)]
    fn head(&mut self, n: usize) -> impl Sums<T::Acc> + '_ {
        let n = n.min(self.out.len()).min(self.acc.len());
        let (acc, out) = (&mut self.acc[..n], &mut self.out[..n]);
        let (stored, zero_acc, isa) = (self.stored, self.zero_acc, self.isa);
        Rounded::<T, SETTLED> { acc, out, stored, zero_acc, isa }
    }

    #[inline(always)]
    fn zero(&mut self, range: Range<usize>) {
        if SETTLED || self.zero_acc {
            self.acc[range.clone()].fill(T::Acc::zero());
        }
        self.out[range].fill(T::default());
    }

    #[inline(always)]
    fn add(&mut self, at: usize, g: T::Acc) {
        debug_assert!(!SETTLED || at >= self.stored, "an addition to a settled sum");
        self.acc[at] += g;
        if !SETTLED {
            self.out[at] = T::from_acc_sum(self.acc[at]);
        }
    }

    #[inline(always)]
    fn settle(&mut self, end: usize) {
        let end = end.min(self.out.len()).min(self.acc.len());
        if SETTLED && end > self.stored {
            simd::narrow(self.isa, &self.acc[self.stored..end], &mut self.out[self.stored..end]);
            self.stored = end;
        }
    }
}

/// Adds gradients to `sums`, in order, while their indices lie inside it; returns how many it
/// added.
#[inline(always)]
fn add_within<G: Copy, I: ArgmaxIndex>(sums: &mut impl Sums<G>, go: &[G], ix: &[I]) -> usize {
    let len = sums.len();
    // Through a view bounded by `len`, whose bound the compiler sees: fewer instructions than
    // adding through `sums` itself.
    let mut sums = sums.head(len);
    let (go, ix) = (&go[..go.len().min(ix.len())], &ix[..go.len().min(ix.len())]);
    for k in 0..go.len() {
        match ix[k].flat_within(0, len) {
            Some(at) => sums.add(at, go[k]),
            None => return k,
        }
    }
    go.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the half types sum in scratch (a plane of f32 sums and one of widened gradients per
    /// task); f32 and f64 sum straight into `grad_input`, and planes of one gradient need none
    /// in any type (the gradient is stored where its index points).
    #[test]
    fn only_the_half_types_reserve_accumulator_scratch() {
        fn reserved<T: PoolFloat>(ho: usize) -> (usize, usize) {
            let cpu = Cpu::with_threads(2).unwrap();
            let planes = Planes { count: 4, h: 8, w: 8, ho, wo: ho };
            let rows = vec![Taps { start: 0, count: 8, step: 1 }; ho];
            let p = ScatterPrepared::plan::<T>(&cpu, planes, &rows, &mut Sizer::new()).unwrap();
            (p.acc_per_task, p.grad_per_task)
        }
        assert_eq!(reserved::<f32>(4), (0, 0));
        assert_eq!(reserved::<f64>(4), (0, 0));
        for (acc, grad) in [reserved::<half::f16>(4), reserved::<half::bf16>(4)] {
            assert!(acc >= 64 && grad >= 16, "{acc} sums and {grad} gradients per task");
        }
        assert_eq!(reserved::<half::bf16>(1), (0, 0));
        assert_eq!(reserved::<f32>(1), (0, 0));
    }
}
