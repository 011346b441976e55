//! The 3-D forwards with flat indices (max pooling and adaptive max pooling), one axis at a time.
//!
//! A window of a 3-D pooling is the product of its taps along depth, rows and columns, and the
//! rule of every forward ([`replaces_best`]: the last NaN of the window, or else its first
//! maximum, in row-major `(d, h, w)` order) is lexicographic, so the window can be taken one axis
//! at a time, from the last axis to the first: each input row's column windows, then each
//! slice's row windows among those, then the depth windows among those ([`meet_rows`]). Each
//! pass meets its candidates in increasing order of its own axis, each candidate being the
//! result of the axes after it. If the window holds a NaN, the last candidate holding one holds
//! the window's last NaN there, and the pass takes it; if not, the first candidate holding the
//! largest value holds the window's first maximum there, and the pass takes that. A window of
//! `-inf` points at its first tap either way. So the result is that of one scan of the whole
//! window in row-major order. Each tap is met once per candidate of its axis rather than once
//! per window: for kernel 3 and stride 2, `3/2 + 3/4 + 3/8` comparisons per input position
//! rather than `27/8`.
//!
//! Volumes go [`BLOCK`] at a time ([`pool_block`]): their rows interleaved so that one vector
//! holds a position of every volume, every pass a vector at a time for any windows. Volumes
//! left over, and the bands of output depths that split one volume among threads, go one at a
//! time ([`pool_volume`]) with the 2-D forward's column scans. Either way an output depth is
//! finished as soon as the slices it reads are pooled, which are kept only while a window reads
//! them ([`slices_to_pool`]).
//!
//! Values are compared widened to the accumulator type and narrowed back, both exact for numbers
//! (each is an input value) and neither caring for a NaN's bits (`bf16` is then a shift each
//! way, [`simd::widen_compared`]); a NaN is read again from the input at its position, so every
//! output keeps its input's bits. Positions are kept flat in the volume, in 32 bits where the
//! volume allows.

use core::ops::Range;

use super::forward::{ColumnGroup, LANES, lanes, meet_lanes, replaces_best, single_window, window};
use super::interleave::{BLOCK, deinterleave, interleave_widened};
use super::schedule::{PlaneSplit, Planned, Taps, VolumeWindowed, Windowed};
use super::simd::{self, Isa};
use super::{CacheLine, Carver, Cpu, Sizer, task_share};

use crate::device::internal::Launch;
use crate::element::{AccFloat, PoolFloat};
use crate::error::{Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveGeometry3d, AdaptiveMaxPool3d, MaxPool3dGeometry, MaxPool3dWithIndices};
use crate::tensor::{TensorMut, TensorRef};

/// Phase-1 state of a 3-D forward: the windows along each axis, and how the work is split.
#[derive(Debug)]
pub struct VolumeForwardPrepared {
    /// The input rows of each output row of a slice, and the columns of each output column.
    rows: Vec<Taps>,
    cols: Vec<Taps>,
    /// How the columns of one volume's rows are scanned ([`pool_columns`]), and of a block's
    /// ([`block_columns`]).
    groups: Vec<ColumnGroup>,
    runs: Vec<ColumnRun>,
    /// The input slices of each output depth.
    depth: Vec<Taps>,
    /// The pooled slices a task keeps ([`slices_to_pool`]): as many as a depth window spans when
    /// the windows start and end in increasing order, else every slice of the volume.
    ring: usize,
    /// Whether the depth windows start and end in increasing order (with dilation and padding a
    /// window may start before the one ahead of it).
    in_order: bool,
    /// The input rows of a slice that the windows read, from the first to the last.
    row_span: Range<usize>,
    /// The input volume's `[D, H, W]`.
    input: [usize; 3],
    /// Runs of whole volumes, or bands of output depths of one volume.
    split: PlaneSplit,
    /// Whether positions in a volume need 64 bits (a volume of more than `i32::MAX` positions).
    long_positions: bool,
    /// Whether volumes are pooled [`BLOCK`] at a time ([`pool_block`]): in tasks of whole
    /// volumes, with 32-bit positions, each task's runs of [`BLOCK`] volumes and a last run of
    /// at least [`BLOCK_FROM`]; the other volumes one at a time ([`pool_volume`]).
    blocked: bool,
    /// Scratch of each task, in whole cache lines: accumulator-type values ([`Scratch`]), and
    /// positions.
    values_per_task: usize,
    positions_per_task: usize,
    /// The instructions the tasks run with, detected once, in phase 1.
    isa: Isa,
}

/// The fewest volumes pooled as a block of their own ([`pool_block`]) rather than one at a time:
/// a block costs about the same whatever the number of its volumes, and one volume at a time
/// costs a few times a block's volume. A tuning decision: both give the same bits.
const BLOCK_FROM: usize = BLOCK / 2;

/// The scratch of one task, in elements, for `lanes` volumes pooled at a time ([`BLOCK`] or 1):
/// the row being read, widened (half types only), and interleaved (a block's, with a column more
/// that no window reads, [`windows_apart`]); the column pass of a slice's rows; the row pass of
/// the slices a depth window reads (`ring` of them, [`slices_to_pool`]); the depth pass of one
/// output depth; and that taken apart by volume (a block's). The last four hold values and as
/// many positions.
struct Scratch {
    widened: usize,
    band: usize,
    columns: usize,
    slices: usize,
    depth: usize,
    lane: usize,
}

impl Scratch {
    fn of<T: PoolFloat>(lanes: usize, [ring, h, w]: [usize; 3], (ho, wo): (usize, usize)) -> Self {
        let widened = if T::as_acc(&[]).is_some() { 0 } else { lanes * w };
        let band = if lanes > 1 { lanes * (w + 1) } else { 0 };
        let ohw = ho * wo;
        let lane = if lanes > 1 { lanes * ohw } else { 0 };
        Scratch {
            widened,
            band,
            columns: lanes * h * wo,
            slices: lanes * ring * ohw,
            depth: lanes * ohw,
            lane,
        }
    }

    /// Values per task (accumulator type).
    fn values(&self) -> usize {
        self.widened + self.band + self.positions()
    }

    /// Positions per task.
    fn positions(&self) -> usize {
        self.columns + self.slices + self.depth + self.lane
    }
}

/// A task's scratch, carved as [`Scratch`] says.
struct Carved<'s, A, P> {
    widened: &'s mut [A],
    band: &'s mut [A],
    columns: (&'s mut [A], &'s mut [P]),
    slices: (&'s mut [A], &'s mut [P]),
    depth: (&'s mut [A], &'s mut [P]),
    lane: (&'s mut [A], &'s mut [P]),
}

impl Scratch {
    fn carve<'s, A, P>(&self, values: &'s mut [A], positions: &'s mut [P]) -> Carved<'s, A, P> {
        let (widened, values) = values.split_at_mut(self.widened);
        let (band, values) = values.split_at_mut(self.band);
        let (column_values, values) = values.split_at_mut(self.columns);
        let (slice_values, values) = values.split_at_mut(self.slices);
        let (column_positions, positions) = positions.split_at_mut(self.columns);
        let (slice_positions, positions) = positions.split_at_mut(self.slices);
        let (depth_values, values) = values.split_at_mut(self.depth);
        let (depth_positions, positions) = positions.split_at_mut(self.depth);
        Carved {
            widened,
            band,
            columns: (column_values, column_positions),
            slices: (slice_values, slice_positions),
            depth: (depth_values, depth_positions),
            lane: (&mut values[..self.lane], &mut positions[..self.lane]),
        }
    }
}

impl VolumeForwardPrepared {
    fn plan<T: PoolFloat>(cpu: &Cpu, g: &impl VolumeWindowed, sizer: &mut Sizer) -> Result<Self> {
        let (rows, cols) = g.slices().taps()?;
        let sizes = g.sizes();
        Self::of_taps::<T>(cpu, (g.depth_taps()?, rows, cols), (sizes.input, sizes.volumes()), sizer)
    }

    /// [`VolumeForwardPrepared::plan`] from the windows along each axis, over `volumes` volumes
    /// of `input` (`[D, H, W]`).
    fn of_taps<T: PoolFloat>(
        cpu: &Cpu,
        (depth, rows, cols): (Vec<Taps>, Vec<Taps>, Vec<Taps>),
        (input, volumes): ([usize; 3], usize),
        sizer: &mut Sizer,
    ) -> Result<Self> {
        let groups = ColumnGroup::plan(&cols)?;
        let runs = ColumnRun::plan(&cols)?;
        let in_order =
            depth.windows(2).all(|w| w[0].start <= w[1].start && w[0].span().end <= w[1].span().end);
        let ring = if in_order { depth.iter().map(|t| t.span().len()).max().unwrap_or(0) } else { input[0] };
        let row_span = span_of(&rows);
        // (The volume's elements are in memory, so their count is a `usize`.)
        let long_positions = input.iter().product::<usize>() > i32::MAX as usize;
        let split = PlaneSplit::of(cpu, volumes, depth.len());
        let blocked = !long_positions && split.bands == 1 && split.planes_per_task >= BLOCK_FROM;
        let lanes = if blocked { BLOCK } else { 1 };
        let scratch = Scratch::of::<T>(lanes, [ring, input[1], input[2]], (rows.len(), cols.len()));
        let values_per_task = task_share::<T::Acc>(scratch.values());
        let positions = scratch.positions();
        let positions_per_task =
            if long_positions { task_share::<i64>(positions) } else { task_share::<i32>(positions) };
        sizer.region::<T::Acc>(split.tasks() * values_per_task)?;
        if long_positions {
            sizer.region::<i64>(split.tasks() * positions_per_task)?;
        } else {
            sizer.region::<i32>(split.tasks() * positions_per_task)?;
        }
        Ok(VolumeForwardPrepared {
            rows,
            cols,
            groups,
            runs,
            depth,
            ring,
            in_order,
            row_span,
            input,
            split,
            long_positions,
            blocked,
            values_per_task,
            positions_per_task,
            isa: cpu.isa(),
        })
    }

    /// The scratch of one task.
    fn scratch<T: PoolFloat>(&self) -> Scratch {
        let lanes = if self.blocked { BLOCK } else { 1 };
        Scratch::of::<T>(lanes, [self.ring, self.input[1], self.input[2]], (self.rows.len(), self.cols.len()))
    }
}

/// Phase 1 of a 3-D forward, on the device the call's size deserves ([`Planned`]).
fn prepare_volumes<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl VolumeWindowed,
    (input, output, indices): (&TensorRef<'_, T>, &TensorMut<'_, T>, &TensorMut<'_, I>),
) -> Result<(Planned<VolumeForwardPrepared>, usize)> {
    Planned::of(cpu, g.forward_work(), |cpu| {
        let mut sizer = Sizer::new();
        sizer.stage(&input.view())?;
        sizer.stage(&output.as_ref().view())?;
        sizer.stage(&indices.as_ref().view())?;
        let prepared = VolumeForwardPrepared::plan::<T>(cpu, g, &mut sizer)?;
        Ok((prepared, sizer.total()))
    })
}

/// One task of a 3-D forward: whole volumes, or output depths `row0..row0 + rows` of one, with
/// its scratch (`P`: positions in a volume).
struct VolumeTask<'s, T: PoolFloat, I, P> {
    x: &'s [T],
    row0: usize,
    rows: usize,
    out: &'s mut [T],
    idx: &'s mut [I],
    values: &'s mut [T::Acc],
    positions: &'s mut [P],
}

/// Phase 2 of [`prepare_volumes`]: positions in 32 bits where the volume allows.
fn run_volumes<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    tensors: (TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
    p: &Planned<VolumeForwardPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    if p.plan.long_positions {
        run_volumes_with::<T, I, i64>(cpu, tensors, p, memory)
    } else {
        run_volumes_with::<T, I, i32>(cpu, tensors, p, memory)
    }
}

/// [`run_volumes`] with positions of type `P`.
fn run_volumes_with<T: PoolFloat, I: ArgmaxIndex, P: ArgmaxIndex>(
    cpu: &Cpu,
    (input, output, indices): (TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
    p: &Planned<VolumeForwardPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    let plan = &p.plan;
    let mut carver = Carver::new(memory);
    let x = carver.stage(input.view())?;
    let mut out = carver.output(output.into_view())?;
    let mut idx = carver.output(indices.into_view())?;
    let tasks = plan.split.tasks();
    let values = carver.region::<T::Acc>(tasks * plan.values_per_task)?;
    let positions = carver.region::<P>(tasks * plan.positions_per_task)?;
    let volume: usize = plan.input.iter().product();
    let ohw = plan.rows.len() * plan.cols.len();
    let pooled_len = plan.depth.len() * ohw;
    let PlaneSplit { planes_per_task: per, rows_per_band, bands, .. } = plan.split;
    // (A share of 0 elements makes no chunks: those tasks take empty slices.)
    let mut values = values.chunks_mut(plan.values_per_task.max(1));
    let mut positions = positions.chunks_mut(plan.positions_per_task.max(1));
    let mut scratch = || (values.next().unwrap_or(&mut []), positions.next().unwrap_or(&mut []));
    let mut work = Vec::with_capacity(tasks);
    let run = if bands == 1 { per } else { 1 };
    // (An empty batch has no windows, and no output to chunk.)
    for ((x, out), idx) in x
        .chunks((run * volume).max(1))
        .zip(out.slice().chunks_mut((run * pooled_len).max(1)))
        .zip(idx.slice().chunks_mut((run * pooled_len).max(1)))
    {
        if bands == 1 {
            let (values, positions) = scratch();
            work.push(VolumeTask { x, row0: 0, rows: plan.depth.len(), out, idx, values, positions });
        } else {
            let band = rows_per_band * ohw;
            for (b, (out, idx)) in out.chunks_mut(band).zip(idx.chunks_mut(band)).enumerate() {
                let (values, positions) = scratch();
                let rows = out.len() / ohw.max(1);
                work.push(VolumeTask { x, row0: b * rows_per_band, rows, out, idx, values, positions });
            }
        }
    }
    // Each task in the copy of the kernels for the instructions the plan found; the code is the
    // same in every copy, and so are the results.
    p.device(cpu).for_each_task(work, |t| {
        if plan.isa.is_wide() {
            plan.isa.enter(
                #[inline(always)]
                || pool_task::<T, I, P, true>(plan, t),
            )
        } else {
            pool_task::<T, I, P, false>(plan, t)
        }
    });
    out.finish("output")?;
    idx.finish("indices")
}

/// A task of [`run_volumes`]: its volumes [`BLOCK`] at a time ([`pool_block`]) when the plan is
/// blocked, the rest one at a time ([`pool_volume`]). `WIDE` in the copy whose registers hold 8
/// `f32` or more.
#[inline(always)]
fn pool_task<T: PoolFloat, I: ArgmaxIndex, P: ArgmaxIndex, const WIDE: bool>(
    p: &VolumeForwardPrepared,
    t: VolumeTask<'_, T, I, P>,
) {
    let volume: usize = p.input.iter().product();
    let ohw = p.rows.len() * p.cols.len();
    if ohw == 0 || volume == 0 || t.rows == 0 {
        return;
    }
    let pooled = t.rows * ohw;
    let mut scratch = p.scratch::<T>().carve(t.values, t.positions);
    let count = t.x.len() / volume;
    let in_blocks = match count % BLOCK {
        _ if !p.blocked => 0,
        rest if rest < BLOCK_FROM => count - rest,
        _ => count,
    };
    let (xb, xr) = t.x.split_at(in_blocks * volume);
    let (ob, or) = t.out.split_at_mut(in_blocks * pooled);
    let (ib, ir) = t.idx.split_at_mut(in_blocks * pooled);
    for ((x, out), idx) in
        xb.chunks(BLOCK * volume).zip(ob.chunks_mut(BLOCK * pooled)).zip(ib.chunks_mut(BLOCK * pooled))
    {
        pool_block::<T, I, P>(p, x, (out, idx), &mut scratch);
    }
    let depths = t.row0..t.row0 + t.rows;
    for ((x, out), idx) in xr.chunks(volume).zip(or.chunks_mut(pooled)).zip(ir.chunks_mut(pooled)) {
        pool_volume::<T, I, P, WIDE>(p, x, depths.clone(), (out, idx), &mut scratch);
    }
}

/// The inputs that the windows `windows` of one axis read, from the first to the last (with
/// dilation a window may start before the one ahead of it).
fn span_of(windows: &[Taps]) -> Range<usize> {
    match (windows.iter().map(|t| t.start).min(), windows.iter().map(|t| t.span().end).max()) {
        (Some(start), Some(end)) => start..end,
        _ => 0..0,
    }
}

/// One volume `x`, output depths `depths` of it, by the module's rule, one output depth at a
/// time: for each slice it reads that is not pooled yet ([`slices_to_pool`]), the column pass of
/// its rows ([`pool_columns`]) and its row pass ([`pool_rows`]); then its depth pass
/// ([`meet_rows`]) and its outputs.
#[inline(always)]
fn pool_volume<T: PoolFloat, I: ArgmaxIndex, P: ArgmaxIndex, const WIDE: bool>(
    p: &VolumeForwardPrepared,
    x: &[T],
    depths: Range<usize>,
    (out, idx): (&mut [T], &mut [I]),
    scratch: &mut Carved<'_, T::Acc, P>,
) {
    let [_, h, w] = p.input;
    let (wo, hw) = (p.cols.len(), h * w);
    let ohw = p.rows.len() * wo;
    let (mut out, mut idx) = (out.chunks_mut(ohw), idx.chunks_mut(ohw));
    each_output_depth(
        p,
        (&p.depth[depths], 1),
        scratch,
        #[inline(always)]
        |scratch, s, row| {
            let at = s * hw + row * w;
            let xs = &x[at..at + w];
            let xa = match T::as_acc(xs) {
                Some(xa) => xa,
                None => {
                    let widened = &mut scratch.widened[..w];
                    simd::widen_compared(p.isa, xs, widened);
                    &*widened
                }
            };
            let columns = row * wo..(row + 1) * wo;
            pool_columns::<_, _, WIDE>(
                (xa, at),
                (&p.cols, &p.groups),
                (&mut scratch.columns.0[columns.clone()], &mut scratch.columns.1[columns]),
            );
        },
        #[inline(always)]
        |(best, at), _, _| {
            if let (Some(out), Some(idx)) = (out.next(), idx.next()) {
                write_outputs(p.isa, x, (best, at), (out, idx));
            }
        },
    );
}

/// The passes of the module's rule over output depths `depths` (the `k`-th of them in order), for
/// `lanes` volumes at a time (the rows of the scratch are `lanes` times as long): for each slice
/// a depth window reads that is not pooled yet ([`slices_to_pool`]), `columns(scratch, s, row)`
/// fills the column pass of each of its rows and the row pass follows ([`pool_rows`]); then the
/// depth pass ([`meet_rows`]) and `finish((values, positions), lane, k)` with its result and
/// the scratch that takes it apart by volume.
#[inline(always)]
fn each_output_depth<A: AccFloat, P: ArgmaxIndex>(
    p: &VolumeForwardPrepared,
    (depths, lanes): (&[Taps], usize),
    scratch: &mut Carved<'_, A, P>,
    mut columns: impl FnMut(&mut Carved<'_, A, P>, usize, usize),
    mut finish: impl FnMut((&[A], &[P]), &mut (&mut [A], &mut [P]), usize),
) {
    let (len, ohw) = (lanes * p.cols.len(), lanes * p.rows.len() * p.cols.len());
    let mut pooled = 0;
    for (k, taps) in depths.iter().enumerate() {
        for s in slices_to_pool(p, depths, taps, &mut pooled) {
            for row in p.row_span.clone() {
                columns(scratch, s, row);
            }
            pool_rows(p, s % p.ring, len, &scratch.columns, &mut scratch.slices);
        }
        // (A volume alone may use a block's scratch, longer.)
        let (best, at) = (&mut scratch.depth.0[..ohw], &mut scratch.depth.1[..ohw]);
        let row_of = |j| (taps.start + j * taps.step) % p.ring;
        meet_rows(
            (taps.count, row_of),
            (&scratch.slices.0[..], &scratch.slices.1[..]),
            (&mut *best, &mut *at),
        );
        finish((best, at), &mut scratch.lane, k);
    }
}

/// The slices that depth window `taps` reads and that are not pooled yet, when the slices before
/// `pooled` are (or are never read); moves `pooled` past them. Each is pooled into slot
/// `s % ring` of the scratch. When the windows start and end in increasing order, a window
/// reads the slices after those of the windows before it, a slice stays until no window reads
/// it, and the slices of one window never meet (a window spans at most `ring` slices); else the
/// first window pools every slice the windows `depths` read (`ring` is the volume's depth, each
/// slice in a slot of its own).
fn slices_to_pool(
    p: &VolumeForwardPrepared,
    depths: &[Taps],
    taps: &Taps,
    pooled: &mut usize,
) -> Range<usize> {
    let span = if p.in_order { taps.span() } else { span_of(depths) };
    let fresh = (*pooled).max(span.start)..span.end;
    *pooled = (*pooled).max(span.end);
    fresh
}

/// The row pass of one slice: each output row's input rows among the column pass `columns`
/// (rows of `len` elements), into slot `slot` of `slices` ([`slices_to_pool`]).
#[inline(always)]
fn pool_rows<A: AccFloat, P: Copy>(
    p: &VolumeForwardPrepared,
    slot: usize,
    len: usize,
    columns: &(&mut [A], &mut [P]),
    slices: &mut (&mut [A], &mut [P]),
) {
    let pooled = slot * p.rows.len() * len..(slot + 1) * p.rows.len() * len;
    let values = slices.0[pooled.clone()].chunks_mut(len);
    let positions = slices.1[pooled].chunks_mut(len);
    for (r, (values, positions)) in p.rows.iter().zip(values.zip(positions)) {
        meet_rows((r.count, |k| r.start + k * r.step), (&columns.0[..], &columns.1[..]), (values, positions));
    }
}

/// [`pool_volume`] for [`BLOCK`] volumes at once (or fewer, the last of a task): each input row
/// of the volumes is interleaved into `band` (`band[c * BLOCK + l]` is column `c` of volume
/// `l`, widened), so that every tap of a window is one vector of [`BLOCK`] lanes, and every pass
/// goes a vector at a time, each lane keeping its best value and that value's position. Lanes
/// without a volume hold whatever the scratch holds, and their results are not read.
#[inline(always)]
fn pool_block<T: PoolFloat, I: ArgmaxIndex, P: ArgmaxIndex>(
    p: &VolumeForwardPrepared,
    x: &[T],
    (out, idx): (&mut [T], &mut [I]),
    scratch: &mut Carved<'_, T::Acc, P>,
) {
    let [_, h, w] = p.input;
    let (wo, hw) = (p.cols.len(), h * w);
    let volume = p.input[0] * hw;
    let count = x.len() / volume;
    let lanes = BLOCK * wo;
    let ohw = p.rows.len() * wo;
    let pooled_len = p.depth.len() * ohw;
    each_output_depth(
        p,
        (&p.depth, BLOCK),
        scratch,
        #[inline(always)]
        |scratch, s, row| {
            let at = s * hw + row * w;
            let mut rows: [&[T]; BLOCK] = [&[]; BLOCK];
            for (r, x) in rows.iter_mut().zip(x.chunks_exact(volume)) {
                *r = &x[at..at + w];
            }
            interleave_widened(p.isa, &rows[..count], scratch.widened, &mut scratch.band[..BLOCK * w]);
            let columns = row * lanes..(row + 1) * lanes;
            block_columns(
                p.isa,
                (scratch.band.as_chunks::<BLOCK>().0, at),
                &p.runs,
                (&mut scratch.columns.0[columns.clone()], &mut scratch.columns.1[columns]),
            );
        },
        #[inline(always)]
        |(best, at), (lane_best, lane_at), d| {
            let (mut lane_best, mut lane_at) =
                (lane_best.chunks_exact_mut(ohw), lane_at.chunks_exact_mut(ohw));
            let mut lane_best: [&mut [T::Acc]; BLOCK] =
                core::array::from_fn(|_| lane_best.next().unwrap_or(&mut []));
            let mut lane_at: [&mut [P]; BLOCK] = core::array::from_fn(|_| lane_at.next().unwrap_or(&mut []));
            deinterleave(p.isa, best, &mut lane_best[..count]);
            deinterleave(p.isa, at, &mut lane_at[..count]);
            for ((((x, out), idx), best), at) in x
                .chunks_exact(volume)
                .zip(out.chunks_exact_mut(pooled_len))
                .zip(idx.chunks_exact_mut(pooled_len))
                .zip(&lane_best[..count])
                .zip(&lane_at[..count])
            {
                let (out, idx) = (&mut out[d * ohw..(d + 1) * ohw], &mut idx[d * ohw..(d + 1) * ohw]);
                write_outputs(p.isa, x, (best, at), (out, idx));
            }
        },
    );
}

/// The outputs of one output depth of volume `x`, from the depth pass's values `best` and their
/// positions `at`: each value narrowed back to `T` (exact, as it is an input value widened), but
/// a NaN read again from the input at its position (its widened bits are unspecified), so
/// every value keeps its bits; and each position as an index.
#[inline(always)]
fn write_outputs<T: PoolFloat, I: ArgmaxIndex, P: ArgmaxIndex>(
    isa: Isa,
    x: &[T],
    (best, at): (&[T::Acc], &[P]),
    (out, idx): (&mut [T], &mut [I]),
) {
    simd::narrow_exact(isa, best, out);
    let mut nan = false;
    for ((i, &a), &b) in idx.iter_mut().zip(at).zip(best) {
        *i = I::from_flat_checked(a.to_usize_wrapping());
        nan |= num_traits::Float::is_nan(b);
    }
    if nan {
        for ((o, &a), &b) in out.iter_mut().zip(at).zip(best) {
            if num_traits::Float::is_nan(b) {
                *o = x[a.to_usize_wrapping()];
            }
        }
    }
}

/// Output columns whose windows have the same number of taps and the same step, starting
/// `stride` columns apart (at least 1, when `len` is more than 1: windows that start together,
/// as padding and ceil mode make them at an edge, are runs of their own): `len` of them from
/// output column `first`, the first window starting at input column `start`. [`block_columns`]
/// takes a run a window at a time, its taps unrolled where there are few, each window's
/// positions a vector step from the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ColumnRun {
    first: usize,
    len: usize,
    start: usize,
    stride: usize,
    count: usize,
    step: usize,
}

impl ColumnRun {
    /// The runs of `cols`, each as long as it can be, in order.
    fn plan(cols: &[Taps]) -> Result<Vec<ColumnRun>> {
        let mut runs = crate::alloc::collect_exact(UNNAMED, "column runs", cols.len(), core::iter::empty())?;
        let mut first = 0;
        while let Some(c) = cols.get(first) {
            let stride = cols.get(first + 1).map_or(0, |d| d.start.wrapping_sub(c.start));
            let len = 1 + cols[first + 1..]
                .iter()
                .enumerate()
                .take_while(|&(k, d)| {
                    stride > 0
                        && d.count == c.count
                        && d.step == c.step
                        && Some(d.start) == stride.checked_mul(k + 1).and_then(|o| c.start.checked_add(o))
                })
                .count();
            runs.push(ColumnRun { first, len, start: c.start, stride, count: c.count, step: c.step });
            first += len;
        }
        Ok(runs)
    }
}

/// The column pass of one interleaved input row of a block (`band`, at `origin` in each volume):
/// each output column's window, tap by tap, a vector of [`BLOCK`] volumes at a time
/// ([`meet_lanes`]), as values and positions in the volumes. Runs of windows of up to 4
/// consecutive columns (every max pooling's without dilation, but the widest kernels) go with
/// their taps unrolled ([`block_run`]), the rest tap by tap.
#[inline(always)]
fn block_columns<A: AccFloat, P: ArgmaxIndex>(
    isa: Isa,
    (band, origin): (&[[A; BLOCK]], usize),
    runs: &[ColumnRun],
    (values, positions): (&mut [A], &mut [P]),
) {
    let (values, positions) = (values.as_chunks_mut::<BLOCK>().0, positions.as_chunks_mut::<BLOCK>().0);
    for run in runs {
        let at = run.first..run.first + run.len;
        let found = (&mut values[at.clone()], &mut positions[at]);
        match (run.count, run.step) {
            (1, _) => block_run::<A, P, 1>(isa, band, origin, run, found),
            (2, 1) => block_run::<A, P, 2>(isa, band, origin, run, found),
            (3, 1) => block_run::<A, P, 3>(isa, band, origin, run, found),
            (4, 1) => block_run::<A, P, 4>(isa, band, origin, run, found),
            _ => block_run::<A, P, 0>(isa, band, origin, run, found),
        }
    }
}

/// The windows of one run of columns ([`ColumnRun`]) of an interleaved row: `K` consecutive
/// columns each when `K` is not 0 (the loop unrolled), else the run's taps, each met in order.
/// Positions are kept as `u32` lanes (a volume's positions are below 2^31 in a block), each
/// window's a vector step from the one before.
#[inline(always)]
fn block_run<A: AccFloat, P: ArgmaxIndex, const K: usize>(
    isa: Isa,
    band: &[[A; BLOCK]],
    origin: usize,
    run: &ColumnRun,
    (values, positions): (&mut [[A; BLOCK]], &mut [[P; BLOCK]]),
) {
    if block_run_avx::<A, P, K>(isa, band, origin, run, (values, positions)) {
        return;
    }
    let (count, step) = if K == 0 { (run.count, run.step) } else { (K, 1) };
    let lanes = |v: usize| [v as u32; BLOCK];
    let (stride, tap) = (lanes(run.stride), lanes(step));
    let mut first_at = lanes(origin + run.start);
    // The windows as the band's windows of their span, a stride apart: no index is tested in
    // the loop (the plan keeps every window inside the row), and the compiler keeps a window a
    // vector step rather than spreading the loop across windows.
    let windows = band.get(run.start..).unwrap_or_default().windows((count - 1) * step + 1);
    for ((v, q), window) in
        values.iter_mut().zip(positions.iter_mut()).zip(windows.step_by(run.stride.max(1)))
    {
        let (mut best, mut best_at, mut at) = (window[0], first_at, first_at);
        for b in 1..count {
            at = core::array::from_fn(|l| at[l] + tap[l]);
            meet_lanes(&mut best, &mut best_at, &window[b * step], &at);
        }
        *v = best;
        *q = best_at.map(|a| P::from_flat_checked(a as usize));
        first_at = core::array::from_fn(|l| first_at[l].wrapping_add(stride[l]));
    }
}

/// [`block_run`] in AVX registers, for `f32` values, 32-bit positions and `K` taps (not 0), where
/// `isa` has AVX2; returns whether it ran. Each window is one vector of [`BLOCK`] lanes per tap
/// ([`ColumnMeet`]). Written with `pulp`'s wrappers of the intrinsics, so that each window stays
/// one vector step (left to itself, the compiler spreads the loop across windows, lane by lane,
/// which costs more). Windows 1 or 2 columns apart go through [`windows_apart`], with no index
/// tested in the loop; the rest, and any window that ends in the columns after the last whole
/// step, one by one.
#[inline(always)]
fn block_run_avx<A: AccFloat, P: ArgmaxIndex, const K: usize>(
    isa: Isa,
    band: &[[A; BLOCK]],
    origin: usize,
    run: &ColumnRun,
    (values, positions): (&mut [[A; BLOCK]], &mut [[P; BLOCK]]),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let (Isa::V3(simd), 4, 4, 1..) = (isa, size_of::<A>(), size_of::<P>(), K) {
        let band: &[[f32; BLOCK]] = bytemuck::cast_slice::<A, f32>(band.as_flattened()).as_chunks().0;
        let values: &mut [[f32; BLOCK]] =
            bytemuck::cast_slice_mut::<A, f32>(values.as_flattened_mut()).as_chunks_mut().0;
        let positions: &mut [[u32; BLOCK]] =
            bytemuck::cast_slice_mut::<P, u32>(positions.as_flattened_mut()).as_chunks_mut().0;
        let mut meet = ColumnMeet::<K>::new(simd, origin + run.start, run.stride);
        let band = band.get(run.start..).unwrap_or_default();
        let done = match run.stride {
            1 => windows_apart::<K, 1>(band, (values, positions), &mut meet),
            2 => windows_apart::<K, 2>(band, (values, positions), &mut meet),
            _ => 0,
        };
        if done == values.len() {
            return true;
        }
        let (values, positions) =
            (values.get_mut(done..).unwrap_or_default(), positions.get_mut(done..).unwrap_or_default());
        let rest = band.get(done * run.stride..).unwrap_or_default().windows(K).step_by(run.stride.max(1));
        for (found, taps) in values.iter_mut().zip(positions.iter_mut()).zip(rest) {
            meet.window(core::array::from_fn(|b| taps[b]), found);
        }
        return true;
    }
    let _ = (isa, band, origin, run, values, positions);
    false
}

/// A window's value and position in [`block_run_avx`].
#[cfg(target_arch = "x86_64")]
type Found<'f> = (&'f mut [f32; BLOCK], &'f mut [u32; BLOCK]);

/// The windows of `K` taps (at least 1) of a run in [`block_run_avx`], one after the other: in
/// each lane, a tap's value is taken where it is larger than the best or NaN ([`replaces_best`]:
/// `best < v`, ordered, or `v` unordered with itself) with its tap number, and the position is
/// the window's first tap's plus that number, the first tap's moving a stride each window.
#[cfg(target_arch = "x86_64")]
struct ColumnMeet<const K: usize> {
    simd: simd::V3,
    /// `taps[b]` holds `b` in every lane.
    taps: [core::arch::x86_64::__m256i; K],
    stride: core::arch::x86_64::__m256i,
    first_at: core::arch::x86_64::__m256i,
}

#[cfg(target_arch = "x86_64")]
impl<const K: usize> ColumnMeet<K> {
    #[inline(always)]
    fn new(simd: simd::V3, first_at: usize, stride: usize) -> Self {
        let lanes = |v: usize| simd.avx._mm256_set1_epi32(v as i32);
        ColumnMeet {
            simd,
            taps: core::array::from_fn(lanes),
            stride: lanes(stride),
            first_at: lanes(first_at),
        }
    }

    /// The next window, its `K` columns `column`, into `found`.
    #[inline(always)]
    fn window(&mut self, column: [[f32; BLOCK]; K], (v, q): Found<'_>) {
        use core::arch::x86_64::{__m256, _CMP_LT_OQ, _CMP_UNORD_Q};
        let (avx, avx2) = (self.simd.avx, self.simd.avx2);
        let mut best: __m256 = pulp::cast(column[0]);
        let mut tap = avx._mm256_setzero_si256();
        for (&x, &tap_number) in column[1..].iter().zip(&self.taps[1..]) {
            let x: __m256 = pulp::cast(x);
            let take = avx._mm256_or_ps(
                avx._mm256_cmp_ps::<_CMP_LT_OQ>(best, x),
                avx._mm256_cmp_ps::<_CMP_UNORD_Q>(x, x),
            );
            best = avx._mm256_blendv_ps(best, x, take);
            tap = avx2._mm256_blendv_epi8(tap, tap_number, avx._mm256_castps_si256(take));
        }
        *v = pulp::cast(best);
        *q = pulp::cast(avx2._mm256_add_epi32(self.first_at, tap));
        self.first_at = avx2._mm256_add_epi32(self.first_at, self.stride);
    }
}

/// The first windows of `K` columns of a run whose windows start `S` columns apart, from the
/// run's first column (`band[0]`), each by `meet`; returns how many. The band is taken `S`
/// columns at a time, zipped with itself a step or more ahead for windows wider than a step, so
/// the loop's only test is its count. A window's last column may be the first of a step whose
/// second is past the row: the blocks' band holds a column more than a row ([`Scratch`]), never
/// a tap, so every window of a row is in whole steps.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn windows_apart<const K: usize, const S: usize>(
    band: &[[f32; BLOCK]],
    (values, positions): (&mut [[f32; BLOCK]], &mut [[u32; BLOCK]]),
    meet: &mut ColumnMeet<K>,
) -> usize {
    let steps = band.as_chunks::<S>().0;
    // Steps `i` ahead, for the windows that reach them (`K <= 4`); the others zip the band
    // with itself, unread.
    let ahead = |i: usize| steps.get(if (K - 1) / S >= i { i } else { 0 }..).unwrap_or_default();
    let zipped = steps.iter().zip(ahead(1)).zip(ahead(2)).zip(ahead(3));
    let mut done = 0;
    for (found, (((s0, s1), s2), s3)) in values.iter_mut().zip(positions.iter_mut()).zip(zipped) {
        meet.window(core::array::from_fn(|b| [s0, s1, s2, s3][b / S][b % S]), found);
        done += 1;
    }
    done
}

/// The column pass of one input row `xa` of a volume (at `origin` in it): each output column's
/// window, as its value and position in the volume. Columns go as the 2-D forward plans them
/// ([`ColumnGroup`]): [`LANES`] windows 1 or 2 apart at once ([`lanes`]), other windows one at a
/// time.
#[inline(always)]
fn pool_columns<A: AccFloat, P: ArgmaxIndex, const WIDE: bool>(
    (xa, origin): (&[A], usize),
    (cols, groups): (&[Taps], &[ColumnGroup]),
    (values, positions): (&mut [A], &mut [P]),
) {
    let w = xa.len();
    let one = Taps { start: 0, count: 1, step: 1 };
    for group in groups {
        let (first, stride) = match *group {
            ColumnGroup::Single(ow) => {
                let a = single_window(xa, w, &one, &cols[ow], WIDE);
                values[ow] = xa[a];
                positions[ow] = P::from_flat_checked(origin + a);
                continue;
            }
            ColumnGroup::Lanes { first, stride } => (first, stride),
        };
        let c = &cols[first];
        let found = if stride == 1 { lanes::<A, 1>(xa, w, &one, c) } else { lanes::<A, 2>(xa, w, &one, c) };
        match found {
            Some((best, taps)) => {
                values[first..first + LANES].copy_from_slice(&best);
                let origin = origin + c.start;
                for (l, (p, &tap)) in positions[first..first + LANES].iter_mut().zip(&taps).enumerate() {
                    *p = P::from_flat_checked(origin + l * stride + tap as usize);
                }
            }
            None => {
                for ow in first..first + LANES {
                    let a = window(xa, w, &one, &cols[ow]);
                    values[ow] = xa[a];
                    positions[ow] = P::from_flat_checked(origin + a);
                }
            }
        }
    }
}

/// One pass of the module's rule: each position of `best` and `at` takes the best of `count`
/// rows among `values` and `positions` (the `k`-th is row `row_of(k)`, at `row_of(k) *
/// best.len()`), met in that order ([`replaces_best`]), as a value and its position. Whole rows
/// at a time, each position without a branch, so that the loops vectorise.
///
/// The first loop meets the first two rows, or three when `count` is odd, and writes `best`
/// without reading it; each loop after it meets two more rows into `best`. No loop meets a single
/// row into `best` in place: on x86 the compiler makes that a masked store (of the lanes that
/// changed), which AMD's processors run several times slower than a plain store
/// (`benches/README.md`). The rows are met in the same order whatever the grouping, so the
/// results are the same.
#[inline(always)]
fn meet_rows<A: AccFloat, P: Copy>(
    (count, row_of): (usize, impl Fn(usize) -> usize),
    (values, positions): (&[A], &[P]),
    (best, at): (&mut [A], &mut [P]),
) {
    let len = best.len();
    let row = |k: usize| {
        let r = row_of(k) * len..(row_of(k) + 1) * len;
        (&values[r.clone()], &positions[r])
    };
    let (u, p) = row(0);
    if count == 1 {
        best.copy_from_slice(u);
        at.copy_from_slice(p);
        return;
    }
    let (v, q) = row(1);
    let best_at = best.iter_mut().zip(at.iter_mut());
    if count % 2 == 0 {
        for ((b, a), (((&u, &p), &v), &q)) in best_at.zip(u.iter().zip(p).zip(v).zip(q)) {
            (*b, *a) = met((u, p), (v, q));
        }
    } else {
        let (w, s) = row(2);
        for ((b, a), (((((&u, &p), &v), &q), &w), &s)) in
            best_at.zip(u.iter().zip(p).zip(v).zip(q).zip(w).zip(s))
        {
            (*b, *a) = met(met((u, p), (v, q)), (w, s));
        }
    }
    for k in (2 + count % 2..count).step_by(2) {
        let ((v, q), (w, s)) = (row(k), row(k + 1));
        for ((b, a), (((&v, &q), &w), &s)) in
            best.iter_mut().zip(at.iter_mut()).zip(v.iter().zip(q).zip(w).zip(s))
        {
            (*b, *a) = met(met((*b, *a), (v, q)), (w, s));
        }
    }
}

/// One step of the module's rule: the best so far, `(b, a)`, and a value met after it with its
/// position, `(v, q)`: the value and position that the pair keeps ([`replaces_best`]), without a
/// branch.
#[inline(always)]
fn met<A: AccFloat, P: Copy>((b, a): (A, P), (v, q): (A, P)) -> (A, P) {
    let take = replaces_best(v, b);
    (A::choose(take, v, b), if take { q } else { a })
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool3dWithIndices<'a, T, I>> for Cpu {
    type Prepared = Planned<VolumeForwardPrepared>;

    fn prepare(
        &self,
        op: &MaxPool3dWithIndices<'a, T, I>,
        g: &MaxPool3dGeometry,
    ) -> Result<(Planned<VolumeForwardPrepared>, usize)> {
        prepare_volumes(self, g, (&op.input, &op.output, &op.indices))
    }

    fn launch(
        &self,
        op: MaxPool3dWithIndices<'a, T, I>,
        _: &MaxPool3dGeometry,
        p: Planned<VolumeForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_volumes(self, (op.input, op.output, op.indices), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool3d<'a, T, I>> for Cpu {
    type Prepared = Planned<VolumeForwardPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool3d<'a, T, I>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(Planned<VolumeForwardPrepared>, usize)> {
        prepare_volumes(self, g, (&op.input, &op.output, &op.indices))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool3d<'a, T, I>,
        _: &AdaptiveGeometry3d,
        p: Planned<VolumeForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_volumes(self, (op.input, op.output, op.indices), &p, memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draws::Draws;

    /// The reference: each output's window scanned tap by tap in row-major `(d, h, w)` order, a
    /// value taking the place of the best so far when it is larger or NaN (the window's first
    /// tap when all are `-inf`), compared as `f64`; the output is the input's element there,
    /// its bits as they are.
    fn reference<T: PoolFloat>(x: &[T], input: [usize; 3], axes: [&[Taps]; 3]) -> (Vec<u8>, Vec<i64>) {
        let [_, h, w] = input;
        let volume = input.iter().product::<usize>();
        let (mut out, mut idx) = (Vec::new(), Vec::new());
        for x in x.chunks(volume) {
            for d in axes[0] {
                for r in axes[1] {
                    for c in axes[2] {
                        let (mut best, mut at) = (f64::NEG_INFINITY, (d.start * h + r.start) * w + c.start);
                        for a in 0..d.count {
                            for b in 0..r.count {
                                for e in 0..c.count {
                                    let p = ((d.start + a * d.step) * h + r.start + b * r.step) * w
                                        + c.start
                                        + e * c.step;
                                    let v = x[p].to_f64_exact();
                                    if v > best || v.is_nan() {
                                        (best, at) = (v, p);
                                    }
                                }
                            }
                        }
                        out.extend_from_slice(bytemuck::bytes_of(&x[at]));
                        idx.push(at as i64);
                    }
                }
            }
        }
        (out, idx)
    }

    /// Where two results first differ (values as bytes, and indices), if they do.
    fn first_difference(got: &(Vec<u8>, Vec<i64>), want: &(Vec<u8>, Vec<i64>)) -> Option<String> {
        let value = got.0.iter().zip(&want.0).position(|(a, b)| a != b);
        let index = got.1.iter().zip(&want.1).position(|(a, b)| a != b);
        let lengths = (got.0.len(), got.1.len()) != (want.0.len(), want.1.len());
        (value.is_some() || index.is_some() || lengths).then(|| {
            format!(
                "first value byte {value:?}, first index {index:?} (got {:?}, want {:?})",
                index.map(|i| got.1[i]),
                index.map(|i| want.1[i])
            )
        })
    }

    /// One task over all of `x` (output depths `depths` of each volume), its volumes in blocks
    /// or one at a time, with positions of type `P`, in the dispatched copy or the baseline one.
    fn run<T: PoolFloat, P: ArgmaxIndex>(
        p: &VolumeForwardPrepared,
        x: &[T],
        depths: Range<usize>,
        dispatched: bool,
    ) -> (Vec<u8>, Vec<i64>) {
        let scratch = p.scratch::<T>();
        let mut values = vec![<T::Acc as num_traits::Zero>::zero(); scratch.values()];
        let mut positions = vec![P::zero(); scratch.positions()];
        let volumes = x.len() / p.input.iter().product::<usize>();
        let outputs = volumes * depths.len() * p.rows.len() * p.cols.len();
        let (mut out, mut idx) = (vec![T::default(); outputs], vec![0i64; outputs]);
        let (row0, rows) = (depths.start, depths.len());
        let t = VolumeTask {
            x,
            row0,
            rows,
            out: &mut out,
            idx: &mut idx,
            values: &mut values,
            positions: &mut positions,
        };
        if dispatched {
            p.isa.enter(|| pool_task::<T, i64, P, true>(p, t))
        } else {
            pool_task::<T, i64, P, false>(p, t)
        }
        (bytemuck::cast_slice(&out).to_vec(), idx)
    }

    /// Every way of the kernel (volumes in blocks, with a last block of fewer volumes, or one at
    /// a time; a band of output depths; 32- and 64-bit positions; the copy for the processor's
    /// vector instructions and the baseline copy) gives the reference's values, bit for bit,
    /// and indices, in all four element types, on values with ties, both zeros, infinities,
    /// NaNs with payloads (signalling ones in the half types, which widening quiets) and
    /// subnormals, for max pooling (padding, dilation, ceil-mode windows) and adaptive pooling.
    #[test]
    fn every_path_equals_the_reference() {
        fn check<T: PoolFloat>(bits: &[u64]) {
            // (volumes, [D, H, W], [OD, OH, OW], pooling)
            type Case = (usize, [usize; 3], [usize; 3], Option<[usize; 4]>);
            let cases: [Case; 15] = [
                (11, [5, 9, 12], [3, 5, 6], Some([3, 2, 1, 1])), // a block, then 3 alone
                (6, [4, 7, 9], [2, 3, 4], Some([2, 2, 0, 1])),   // a block of 6
                (3, [7, 11, 10], [3, 4, 3], Some([3, 2, 1, 2])), // dilated
                (9, [9, 8, 10], [5, 4, 6], Some([3, 1, 1, 3])),  // windows starting before the one ahead
                (9, [3, 6, 20], [2, 3, 10], Some([2, 2, 0, 1])), // 8 columns 2 apart
                (5, [6, 10, 17], [4, 3, 5], None),               // adaptive
                (2, [4, 5, 40], [4, 5, 3], None),                // wide adaptive windows
                (3, [9, 9, 9], [5, 5, 5], Some([7, 2, 3, 1])),   // 7 rows met: 3, then pairs
                (9, [9, 11, 7], [2, 2, 2], None),                // 5 and 6 rows met
                (9, [3, 4, 1], [4, 5, 2], Some([2, 1, 1, 1])),   // columns that start together
                (9, [5, 3, 2], [5, 3, 2], Some([3, 1, 1, 1])),   // ... with 2 taps each
                (9, [4, 6, 14], [1, 2, 5], Some([2, 3, 0, 1])),  // windows 3 columns apart
                (9, [4, 6, 13], [1, 2, 5], Some([4, 2, 0, 1])),  // 4 taps 2 apart
                (9, [4, 5, 9], [1, 2, 6], Some([4, 1, 0, 1])),   // 4 taps 1 apart
                (9, [3, 4, 9], [2, 2, 5], Some([1, 2, 0, 1])),   // 1 tap
            ];
            let mut draws = Draws::new(0x9E37_79B9_7F4A_7C15);
            for (volumes, input, output, pooling) in cases {
                let axes: Vec<Vec<Taps>> =
                    (0..3).map(|a| Taps::of_axis(input[a], output[a], pooling)).collect();
                let len = volumes * input.iter().product::<usize>();
                let bytes: Vec<u8> = (0..len)
                    .flat_map(|_| {
                        let pick = bits[(draws.next_u64() % bits.len() as u64) as usize];
                        pick.to_le_bytes().into_iter().take(size_of::<T>())
                    })
                    .collect();
                let x: Vec<T> = bytemuck::pod_collect_to_vec(&bytes);
                let cpu = Cpu::sequential();
                let taps = (axes[0].clone(), axes[1].clone(), axes[2].clone());
                let mut p =
                    VolumeForwardPrepared::of_taps::<T>(&cpu, taps, (input, volumes), &mut Sizer::new())
                        .unwrap();
                p.isa = Isa::best();
                let want = reference(&x, input, [&axes[0], &axes[1], &axes[2]]);
                for blocked in [true, false] {
                    p.blocked = blocked;
                    for dispatched in [true, false] {
                        let name = format!(
                            "{} {volumes}x{input:?} to {output:?}, {pooling:?}, blocked {blocked}, dispatched {dispatched}",
                            T::DTYPE
                        );
                        let all = 0..output[0];
                        let narrow = run::<T, i32>(&p, &x, all.clone(), dispatched);
                        assert_eq!(first_difference(&narrow, &want), None, "{name}");
                        let long = run::<T, i64>(&p, &x, all, dispatched);
                        assert_eq!(first_difference(&long, &want), None, "{name}, 64-bit positions");
                    }
                }
                // A band of output depths of one volume, as a task of bands runs it.
                p.blocked = false;
                let one = &x[..input.iter().product::<usize>()];
                let band = run::<T, i32>(&p, one, 1..output[0], true);
                let ohw = output[1] * output[2];
                let width = size_of::<T>();
                let want_band = (
                    want.0[ohw * width..output[0] * ohw * width].to_vec(),
                    want.1[ohw..output[0] * ohw].to_vec(),
                );
                assert_eq!(first_difference(&band, &want_band), None, "band of {input:?}");
            }
        }
        let f32_bits = [0.0f32, -0.0, 1.0, 1.0, 2.0, -3.5, f32::INFINITY, f32::NEG_INFINITY, 1e-40, 7.25]
            .map(|v| u64::from(v.to_bits()));
        let mut bits32 = f32_bits.to_vec();
        bits32.extend([0x7FC0_1234, 0xFFA0_0003, 0x7F80_0001]);
        check::<f32>(&bits32);
        let bits64: Vec<u64> = f32_bits
            .iter()
            .map(|&b| f64::from(f32::from_bits(b as u32)).to_bits())
            .chain([0x7FF8_0000_0000_1234, 0xFFF0_0000_0000_0003, 1])
            .collect();
        check::<f64>(&bits64);
        // Zeros, subnormals, 1, 2, -3.5, the largest finite, infinities, quiet and signalling NaNs.
        check::<half::f16>(&[
            0x0000, 0x8000, 0x0001, 0x03FF, 0x3C00, 0x3C00, 0x4000, 0xC300, 0x7BFF, 0x7C00, 0xFC00, 0x7E01,
            0x7C01, 0xFD55,
        ]);
        check::<half::bf16>(&[
            0x0000, 0x8000, 0x0001, 0x007F, 0x3F80, 0x3F80, 0x4000, 0xC060, 0x7F7F, 0x7F80, 0xFF80, 0x7FC1,
            0x7F81, 0xFFD5,
        ]);
    }
}
