//! The max-pooling forward kernel shared by adaptive and regular max pooling (each output reads
//! a window given by its row and column taps), and the two forwards with flat indices, which are
//! nothing else. Each task runs in the copy of the kernels compiled
//! for the widest vector instructions the processor has ([`pool_task`]).

use super::Cpu;
use super::interleave::{BLOCK, interleave_widened};
use super::schedule::{PlaneSplit, Planes, Planned, Taps, Windowed};
use super::simd::{self, Isa};
use super::{CacheLine, Carver, Sizer, task_share};

use crate::device::internal::Launch;
use crate::element::{AccFloat, PoolFloat};
use crate::error::{Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveGeometry, AdaptiveMaxPool2d, MaxPool2dWithIndices, MaxPoolGeometry};
use crate::tensor::{TensorMut, TensorRef};

/// Phase-1 state of a forward: the taps of every output row and column, and how the work is
/// split.
#[derive(Debug)]
pub struct ForwardPrepared {
    pub(super) rows: Vec<Taps>,
    pub(super) cols: Vec<Taps>,
    groups: Vec<ColumnGroup>,
    pub(super) split: PlaneSplit,
    /// Whether planes are pooled [`BLOCK`] at a time: planes of at most [`BLOCK_PLANE_MAX`]
    /// elements, whose windows do not span the width or are one window over the whole plane
    /// (global pooling), in tasks of whole planes, at least [`BLOCK`] of them or
    /// `partial_from`. (Windows over whole rows of several output rows go to [`span`], one
    /// plane at a time.)
    blocked: bool,
    /// The fewest planes the blocked kernel takes in a block of their own (the planes left
    /// after whole blocks, or a task of fewer than [`BLOCK`]): [`partial_blocks_from`].
    partial_from: usize,
    /// The most input rows a window spans: the rows the blocked kernel interleaves at a time.
    band_rows: usize,
    /// Whether each plane has one window covering all of it (global pooling): one span per plane
    /// for the planes that the blocked kernel does not take.
    whole_plane: bool,
    /// Accumulator-type scratch per task ([`acc_per_task`]).
    acc_per_task: usize,
    /// The instructions the tasks run with ([`pool_task`]), detected once, in phase 1.
    isa: Isa,
}

impl ForwardPrepared {
    /// Plans a forward over `planes` and adds its scratch to `sizer`.
    pub(super) fn plan<T: PoolFloat>(
        cpu: &Cpu,
        rows: Vec<Taps>,
        cols: Vec<Taps>,
        planes: Planes,
        sizer: &mut Sizer,
    ) -> Result<Self> {
        let split = PlaneSplit::of(cpu, planes.count, planes.ho);
        let hw = planes.h * planes.w;
        let full_width = cols.len() == 1 && cols[0] == Taps { start: 0, count: planes.w, step: 1 };
        // (A single output row is never cut into bands, and bands give a task one plane, so
        // neither kernel needs to ask for whole planes.)
        let whole_plane =
            full_width && hw <= EXACT_POSITIONS && rows == [Taps { start: 0, count: planes.h, step: 1 }];
        let groups = ColumnGroup::plan(&cols)?;
        let partial_from = partial_blocks_from(&cols, &groups);
        // (Global pooling keeps the smaller bound: its larger planes have a kernel of their own.)
        let plane_max = if whole_plane { BLOCK_PLANE_MAX } else { block_plane_max(&rows, &groups) };
        let blocked = hw <= plane_max
            && split.bands == 1
            && (!full_width || whole_plane)
            && split.planes_per_task >= partial_from.min(BLOCK);
        let band_rows = rows.iter().map(|r| r.span().len()).max().unwrap_or(0);
        let acc_per_task = acc_per_task::<T>(blocked.then_some(band_rows), planes);
        sizer.region::<T::Acc>(split.tasks() * acc_per_task)?;
        let isa = cpu.isa();
        Ok(ForwardPrepared {
            rows,
            cols,
            groups,
            split,
            blocked,
            partial_from,
            band_rows,
            whole_plane,
            acc_per_task,
            isa,
        })
    }

    /// How many tasks the forward's scratch is for.
    pub(super) fn tasks(&self) -> usize {
        self.split.tasks()
    }

    /// Accumulator-type scratch each task needs.
    pub(super) fn acc_per_task(&self) -> usize {
        self.acc_per_task
    }

    /// Carves the scratch counted by [`ForwardPrepared::plan`].
    pub(super) fn scratch<'w, T: PoolFloat>(&self, carver: &mut Carver<'w>) -> Result<&'w mut [T::Acc]> {
        carver.region::<T::Acc>(self.split.tasks() * self.acc_per_task)
    }
}

/// Accumulator-type scratch per task ([`ForwardPrepared::acc_per_task`]), in whole cache lines:
/// for the half types, one widened input plane, for the planes pooled one at a time (every plane
/// of a kernel that is not blocked, and a blocked task's planes too few for a block of their
/// own, [`planes_in_blocks`]); and for the blocked kernel over bands of `band_rows` input rows,
/// at least the band of [`BLOCK`] interleaved planes, a row of offsets and (half types) the band
/// of every plane widened.
fn acc_per_task<T: PoolFloat>(band_rows: Option<usize>, planes: Planes) -> usize {
    let widened = |len| if T::as_acc(&[]).is_some() { 0 } else { len };
    let one_plane = widened(planes.h * planes.w);
    task_share::<T::Acc>(match band_rows {
        Some(rows) => {
            let band = BLOCK * rows * planes.w;
            (band + BLOCK * planes.wo + widened(band)).max(one_plane)
        }
        None => one_plane,
    })
}

/// The forward state of a max pooling, with its scratch added to `sizer` (the mask forwards'
/// first step).
pub(super) fn prepare_max_pool<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ForwardPrepared> {
    let (rows, cols) = g.taps()?;
    ForwardPrepared::plan::<T>(cpu, rows, cols, Planes::from(g), sizer)
}

/// Phase 1 of a forward that writes values and flat indices (adaptive, or max pooling with
/// indices), on the device the call's size deserves ([`Planned`]).
fn prepare_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    (input, output, indices): (&TensorRef<'_, T>, &TensorMut<'_, T>, &TensorMut<'_, I>),
) -> Result<(Planned<ForwardPrepared>, usize)> {
    let (rows, cols) = g.taps()?;
    Planned::of(cpu, g.forward_work(), |cpu| {
        let mut sizer = Sizer::new();
        sizer.stage(&input.view())?;
        sizer.stage(&output.as_ref().view())?;
        sizer.stage(&indices.as_ref().view())?;
        let prepared = ForwardPrepared::plan::<T>(cpu, rows, cols, g.plane_sizes(), &mut sizer)?;
        Ok((prepared, sizer.total()))
    })
}

/// Phase 2 of [`prepare_indexed`].
fn run_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    (input, output, indices): (TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
    p: &Planned<ForwardPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    let mut carver = Carver::new(memory);
    let x = carver.stage(input.view())?;
    let mut out = carver.output(output.into_view())?;
    let mut idx = carver.output(indices.into_view())?;
    let scratch = p.plan.scratch::<T>(&mut carver)?;
    pool(p.device(cpu), g.plane_sizes(), &p.plan, x, out.slice(), idx.slice(), scratch);
    out.finish("output")?;
    idx.finish("indices")
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Cpu {
    type Prepared = Planned<ForwardPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<ForwardPrepared>, usize)> {
        prepare_indexed(self, g, (&op.input, &op.output, &op.indices))
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        p: Planned<ForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.input, op.output, op.indices), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Cpu {
    type Prepared = Planned<ForwardPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(Planned<ForwardPrepared>, usize)> {
        prepare_indexed(self, g, (&op.input, &op.output, &op.indices))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: Planned<ForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        run_indexed(self, g, (op.input, op.output, op.indices), &p, memory)
    }
}

struct Task<'s, T: PoolFloat, I> {
    /// The input planes the task reads (whole planes).
    x: &'s [T],
    /// The output rows of the task within each plane: `row0..row0 + rows`.
    row0: usize,
    rows: usize,
    out: &'s mut [T],
    idx: &'s mut [I],
    acc: &'s mut [T::Acc],
}

/// Pools every plane of the row-major `x` into `out` and `idx`.
pub(super) fn pool<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    planes: Planes,
    p: &ForwardPrepared,
    x: &[T],
    out: &mut [T],
    idx: &mut [I],
    scratch: &mut [T::Acc],
) {
    let (hw, ohw) = (planes.h * planes.w, planes.ho * planes.wo);
    let PlaneSplit { planes_per_task: per, rows_per_band, .. } = p.split;
    let mut accs = scratch.chunks_mut(p.acc_per_task.max(1));
    let mut tasks = Vec::with_capacity(p.split.tasks());
    if p.split.bands == 1 {
        for ((x, out), idx) in
            x.chunks(per * hw).zip(out.chunks_mut(per * ohw)).zip(idx.chunks_mut(per * ohw))
        {
            let acc = accs.next().unwrap_or(&mut []);
            tasks.push(Task { x, row0: 0, rows: planes.ho, out, idx, acc });
        }
    } else {
        let band = rows_per_band * planes.wo;
        for ((x, out), idx) in x.chunks(hw).zip(out.chunks_mut(ohw)).zip(idx.chunks_mut(ohw)) {
            for (b, (out, idx)) in out.chunks_mut(band).zip(idx.chunks_mut(band)).enumerate() {
                let (row0, rows) = (b * rows_per_band, out.len() / planes.wo);
                tasks.push(Task { x, row0, rows, out, idx, acc: accs.next().unwrap_or(&mut []) });
            }
        }
    }
    cpu.for_each_task(tasks, |t| pool_task(planes, p, t));
}

/// Pools whole planes on the calling thread: `x` holds whole input planes, `out` and `idx` the
/// same planes' outputs, and `acc` at least [`ForwardPrepared::acc_per_task`] elements. Used by
/// callers that split the work themselves (the fused `Bitmask` forward).
pub(super) fn pool_planes<T: PoolFloat, I: ArgmaxIndex>(
    planes: Planes,
    p: &ForwardPrepared,
    x: &[T],
    out: &mut [T],
    idx: &mut [I],
    acc: &mut [T::Acc],
) {
    pool_task(planes, p, Task { x, row0: 0, rows: planes.ho, out, idx, acc });
}

/// One task of [`pool`]: its whole planes, or its band of output rows of one plane, in the copy
/// of the kernels for the instructions the plan found ([`ForwardPrepared`]'s `isa`, module
/// `simd`): [`pool_task_body`] and what it calls are inlined into each copy. The code is the same
/// in every copy, and so are the results; a direct call of `pool_task_body::<_, _, false>` is
/// the baseline copy, which the tests hold the dispatched one to, bit for bit.
fn pool_task<T: PoolFloat, I: ArgmaxIndex>(planes: Planes, p: &ForwardPrepared, t: Task<'_, T, I>) {
    if p.isa.is_wide() {
        p.isa.enter(
            #[inline(always)]
            || pool_task_body::<T, I, true>(planes, p, t),
        )
    } else {
        pool_task_body::<T, I, false>(planes, p, t)
    }
}

/// [`pool_task`]'s work, inlined into each of its copies; `WIDE` in the copy whose registers
/// hold 8 `f32` or more (x86-64-v3), where [`wide_window`] takes 8 columns at a time.
#[inline(always)]
fn pool_task_body<T: PoolFloat, I: ArgmaxIndex, const WIDE: bool>(
    planes: Planes,
    p: &ForwardPrepared,
    mut t: Task<'_, T, I>,
) {
    let wide = WIDE;
    let (hw, ohw) = (planes.h * planes.w, planes.ho * planes.wo);
    if p.blocked {
        // Whole planes, BLOCK at a time, the rest in a last block of their own when there are
        // enough of them, else one by one.
        let in_blocks = planes_in_blocks(t.x.len() / hw, p.partial_from);
        let (xb, xr) = t.x.split_at(in_blocks * hw);
        let (ob, or) = t.out.split_at_mut(in_blocks * ohw);
        let (ib, ir) = t.idx.split_at_mut(in_blocks * ohw);
        for ((x, out), idx) in
            xb.chunks(BLOCK * hw).zip(ob.chunks_mut(BLOCK * ohw)).zip(ib.chunks_mut(BLOCK * ohw))
        {
            pool_block::<T, I>(x, planes, p, t.acc, out, idx);
        }
        (t.x, t.out, t.idx) = (xr, or, ir);
        if t.x.is_empty() {
            return;
        }
    }
    if p.whole_plane {
        // One window per plane, the whole plane: one span each.
        for ((x, o), i) in t.x.chunks(hw).zip(t.out.iter_mut()).zip(t.idx.iter_mut()) {
            let xa = match T::as_acc(x) {
                Some(xa) => xa,
                None => {
                    simd::widen_compared(p.isa, x, &mut t.acc[..hw]);
                    &t.acc[..hw]
                }
            };
            let at = span(xa);
            *o = x[at];
            *i = I::from_flat_checked(at);
        }
        return;
    }
    let chunk = (t.rows * planes.wo).max(1);
    let rows = &p.rows[t.row0..t.row0 + t.rows];
    for ((x, out), idx) in t.x.chunks(hw).zip(t.out.chunks_mut(chunk)).zip(t.idx.chunks_mut(chunk)) {
        match T::as_acc(x) {
            Some(xa) => pool_plane(x, xa, planes.w, (rows, &p.cols, &p.groups), (out, idx), wide),
            None => {
                let xa = &mut t.acc[..hw];
                simd::widen_compared(p.isa, x, xa);
                pool_plane(x, xa, planes.w, (rows, &p.cols, &p.groups), (out, idx), wide);
            }
        }
    }
}

/// The largest plane (elements) pooled by the blocked kernel, for windows that neither overlap
/// along rows nor are scanned one at a time along columns ([`block_plane_max`]). Set when the
/// kernel interleaved [`BLOCK`] whole planes (which then stayed in the L2 cache); it now
/// interleaves bands of rows.
const BLOCK_PLANE_MAX: usize = 2048;

/// The largest plane the blocked kernel takes, for windows on rows `rows` whose columns go in
/// `groups`: [`BLOCK_PLANE_MAX`], or twice it when consecutive windows share rows (the band keeps
/// those rows interleaved, where one plane at a time reads them again) or some columns are
/// scanned one window at a time (which the blocked kernel does [`BLOCK`] planes at once). A
/// tuning decision: both kernels give the same bits. Measured on 56x56 planes (`benches/README.md`,
/// "The measurements behind the tuning constants"): a 3-D pooling's slices, with kernel 3 and
/// stride 2 or adaptive 8x8 windows, took 0.77x and 0.34x the time blocked; kernel 2 with
/// stride 2 (rows not shared, 8 columns at a time) 1.20x, so it stays with one plane at a time.
fn block_plane_max(rows: &[Taps], groups: &[ColumnGroup]) -> usize {
    let shared_rows = rows.windows(2).any(|pair| pair[1].start < pair[0].span().end);
    let one_at_a_time = groups.iter().any(|g| matches!(g, ColumnGroup::Single(_)));
    if shared_rows || one_at_a_time { 2 * BLOCK_PLANE_MAX } else { BLOCK_PLANE_MAX }
}

/// The fewest planes for which a block of fewer than [`BLOCK`] planes beats pooling them one by
/// one ([`pool_plane`]), from the windows' columns `cols` and their `groups`; more than
/// [`BLOCK`] when it never does. A block costs the same per tap whatever the number of its
/// planes; one by one, a window scanned alone costs a little more per tap than a block, 8
/// columns 2 apart about twice as much for the 8, and 8 columns 1 apart or a wide window far
/// less. So: any number of planes when every window is scanned alone, half a block when some go
/// 8 columns 2 apart, never when some go 8 columns 1 apart or are wide. Both ways give the same
/// results; the instruction counts behind the rule are in `benches/README.md`, "The
/// measurements behind the tuning constants".
fn partial_blocks_from(cols: &[Taps], groups: &[ColumnGroup]) -> usize {
    let narrow = cols.iter().all(|c| c.count < WIDE_LANES);
    let by_stride = |s| groups.iter().any(|g| matches!(g, ColumnGroup::Lanes { stride, .. } if *stride == s));
    if !narrow || by_stride(1) {
        BLOCK + 1
    } else if by_stride(2) {
        BLOCK / 2
    } else {
        1
    }
}

/// How many of a task's `count` planes the blocked kernel takes: its whole blocks, and the
/// planes left after them when there are at least `partial_from` ([`partial_blocks_from`]).
fn planes_in_blocks(count: usize, partial_from: usize) -> usize {
    let rest = count % BLOCK;
    if rest >= partial_from { count } else { count - rest }
}

/// Up to [`BLOCK`] planes at once, with the rule of [`pool_plane`], one output row at a time:
/// the input rows of the row's windows (its band) are interleaved into `band`
/// (`band[(y * w + c) * BLOCK + l]` is row `y` of the band, column `c`, of plane `l`, widened), so
/// every tap of a window is one vector of [`BLOCK`] lanes, and the windows of the planes are
/// scanned together, each lane keeping its best value and that tap's offset in the band (the
/// same for every lane at each step, so the loop vectorises). Rows that the next band shares
/// with this one are moved, not interleaved again. The offsets of a row's outputs are gathered
/// in `found` (`found[o * BLOCK + l]` for column `o` of plane `l`), then stored plane by plane.
/// With fewer than [`BLOCK`] planes the other lanes scan whatever the scratch holds, and their
/// results are not read. `scratch` holds [`ForwardPrepared::acc_per_task`] elements.
#[inline(always)]
fn pool_block<T: PoolFloat, I: ArgmaxIndex>(
    x: &[T],
    planes: Planes,
    p: &ForwardPrepared,
    scratch: &mut [T::Acc],
    out: &mut [T],
    idx: &mut [I],
) {
    let (w, wo, hw, ohw) = (planes.w, planes.wo, planes.h * planes.w, planes.ho * planes.wo);
    let (band, rest) = scratch.split_at_mut(BLOCK * p.band_rows * w);
    let (found, widened) = rest.split_at_mut(BLOCK * wo);
    // Offsets as `u32` in the space of `BLOCK * wo` accumulators (`f32` or `f64`): never fails.
    let found: &mut [u32] = bytemuck::cast_slice_mut(found);
    let mut held = 0..0;
    for (oh, r) in p.rows.iter().enumerate() {
        let need = r.span();
        // The rows the band holds already move to its top; the rest are interleaved.
        let kept = if held.contains(&need.start) {
            let kept = held.end.min(need.end);
            band.copy_within((need.start - held.start) * w * BLOCK..(kept - held.start) * w * BLOCK, 0);
            kept
        } else {
            need.start
        };
        let fresh = &mut band[(kept - need.start) * w * BLOCK..(need.end - need.start) * w * BLOCK];
        let columns = (need.end - kept) * w;
        if columns > 0 {
            let mut rows: [&[T]; BLOCK] = [&[]; BLOCK];
            let count = x.len() / hw;
            for (row, plane) in rows.iter_mut().zip(x.chunks_exact(hw)) {
                *row = &plane[kept * w..need.end * w];
            }
            interleave_widened(p.isa, &rows[..count], widened, fresh);
        }
        held = need;
        let (lanes, _) = band.as_chunks::<BLOCK>();
        // Windows of the same shape two at a time: independent chains of compare and select
        // (each step waits on the one before), which the processor overlaps. (The windows of an
        // axis all have the same step, the dilation, so the same count is the same shape.) A
        // window without such a neighbour is scanned alone, rather than as a pair with itself
        // (which would scan it twice).
        let mut o = 0;
        while let Some(c) = p.cols.get(o) {
            let pair = p.cols.get(o + 1).filter(|d| d.count == c.count);
            if let Some(d) = pair {
                let (mut best, mut best_tap) = (lanes[c.start], [c.start as u32; BLOCK]);
                let (mut next, mut next_tap) = (lanes[d.start], [d.start as u32; BLOCK]);
                for a in 0..r.count {
                    for b in 0..c.count {
                        let offset = a * r.step * w + b * c.step;
                        let (tap, tap_next) = (c.start + offset, d.start + offset);
                        meet(&mut best, &mut best_tap, &lanes[tap], tap);
                        meet(&mut next, &mut next_tap, &lanes[tap_next], tap_next);
                    }
                }
                found[o * BLOCK..(o + 1) * BLOCK].copy_from_slice(&best_tap);
                found[(o + 1) * BLOCK..(o + 2) * BLOCK].copy_from_slice(&next_tap);
                o += 2;
            } else {
                found[o * BLOCK..(o + 1) * BLOCK].copy_from_slice(&scan_alone(lanes, w, r, c));
                o += 1;
            }
        }
        let (origin, first) = (r.start * w, oh * wo);
        for (l, ((x, out), idx)) in
            x.chunks_exact(hw).zip(out.chunks_exact_mut(ohw)).zip(idx.chunks_exact_mut(ohw)).enumerate()
        {
            let (out, idx) = (&mut out[first..first + wo], &mut idx[first..first + wo]);
            for ((o, i), lanes) in out.iter_mut().zip(idx.iter_mut()).zip(found.chunks_exact(BLOCK)) {
                let at = origin + lanes[l] as usize;
                *o = x[at];
                *i = I::from_flat_checked(at);
            }
        }
    }
}

/// The taps of a window of rows `r` and columns `c` that [`pool_block`] scans alone, as
/// [`window`] would find them in each lane. Four chains of [`meet`] (each step of a chain waits
/// on the one before) run at once: row `a` of the window goes to chain `a % 4`, the rows past
/// the last whole group of four to chains 0, 1 and 2, and the chains then agree
/// ([`takes_over`]). Each chain meets its taps in increasing order, which is all
/// [`takes_over`] needs. (The chains are four named pairs, not an array: an array of them is
/// kept in memory, and the loop is no longer vectorised.)
#[inline(always)]
fn scan_alone<A: AccFloat>(lanes: &[[A; BLOCK]], w: usize, r: &Taps, c: &Taps) -> [u32; BLOCK] {
    let row = |a: usize| c.start + a * r.step * w;
    // Chain `k` starts from its first row's first tap (the last row's, for chains without one).
    let first = |k: usize| {
        let tap = row(k.min(r.count - 1));
        (lanes[tap], [tap as u32; BLOCK])
    };
    let (mut c0, mut c1, mut c2, mut c3) = (first(0), first(1), first(2), first(3));
    let whole = r.count - r.count % 4;
    for a in (0..whole).step_by(4) {
        for b in 0..c.count {
            let tap = |k: usize| row(a + k) + b * c.step;
            meet(&mut c0.0, &mut c0.1, &lanes[tap(0)], tap(0));
            meet(&mut c1.0, &mut c1.1, &lanes[tap(1)], tap(1));
            meet(&mut c2.0, &mut c2.1, &lanes[tap(2)], tap(2));
            meet(&mut c3.0, &mut c3.1, &lanes[tap(3)], tap(3));
        }
    }
    let rest = |a: usize, (best, best_tap): &mut ([A; BLOCK], [u32; BLOCK])| {
        if a < r.count {
            for b in 0..c.count {
                let tap = row(a) + b * c.step;
                meet(best, best_tap, &lanes[tap], tap);
            }
        }
    };
    rest(whole, &mut c0);
    rest(whole + 1, &mut c1);
    rest(whole + 2, &mut c2);
    // Chains without a row of their own hold a tap that another chain met, and agree with it.
    for (u, p) in [c1, c2, c3] {
        let (v, at) = &mut c0;
        for l in 0..BLOCK {
            let take = takes_over(u[l], p[l], v[l], at[l]);
            v[l] = A::choose(take, u[l], v[l]);
            at[l] = core::hint::select_unpredictable(take, p[l], at[l]);
        }
    }
    c0.1
}

/// One step of a window's scan in [`pool_block`]: each lane meets its value at `tap` (an offset
/// in the band, below 2^32: the band is at most a plane of [`BLOCK_PLANE_MAX`]) and takes it where
/// it replaces its best. The tap is the same for every lane, so the loop vectorises.
#[inline(always)]
fn meet<A: AccFloat>(best: &mut [A; BLOCK], best_tap: &mut [u32; BLOCK], v: &[A; BLOCK], tap: usize) {
    meet_lanes(best, best_tap, v, &[tap as u32; BLOCK]);
}

/// Each lane `l` meets value `v[l]` at position `at[l]` and takes both where the value replaces
/// its best ([`replaces_best`]), without a branch, so that the loop vectorises.
#[inline(always)]
pub(super) fn meet_lanes<A: AccFloat, P: Copy>(
    best: &mut [A; BLOCK],
    best_at: &mut [P; BLOCK],
    v: &[A; BLOCK],
    at: &[P; BLOCK],
) {
    for l in 0..BLOCK {
        let take = replaces_best(v[l], best[l]);
        best[l] = if take { v[l] } else { best[l] };
        best_at[l] = if take { at[l] } else { best_at[l] };
    }
}

/// Output columns computed together: independent windows whose compare-and-select chains the
/// processor overlaps, and which vectorise when their columns are 1 or 2 apart.
pub(super) const LANES: usize = 8;

/// How the output columns are computed: [`LANES`] at a time when their windows have the same taps
/// and start 1 or 2 apart (so the loads vectorise), otherwise one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ColumnGroup {
    Lanes { first: usize, stride: usize },
    Single(usize),
}

impl ColumnGroup {
    /// The groups of columns `cols`. Fewer than [`LANES`] columns left at the
    /// end go in one last group of the final [`LANES`] columns when those are regular: it
    /// overlaps the group before it, whose columns it computes again to the same values.
    pub(super) fn plan(cols: &[Taps]) -> Result<Vec<ColumnGroup>> {
        let mut groups =
            crate::alloc::collect_exact(UNNAMED, "column groups", cols.len(), core::iter::empty())?;
        let mut ow = 0;
        while ow < cols.len() {
            if let Some(stride) = lanes_stride(&cols[ow..(ow + LANES).min(cols.len())]) {
                groups.push(ColumnGroup::Lanes { first: ow, stride });
                ow += LANES;
            } else if let Some(last) = cols.len().checked_sub(LANES).filter(|&last| last < ow)
                && let Some(stride) = lanes_stride(&cols[last..])
            {
                groups.push(ColumnGroup::Lanes { first: last, stride });
                ow = cols.len();
            } else {
                groups.push(ColumnGroup::Single(ow));
                ow += 1;
            }
        }
        Ok(groups)
    }
}

/// The stride of `group` if it is [`LANES`] windows of the same taps starting 1 or 2 columns
/// apart (so the loads vectorise).
fn lanes_stride(group: &[Taps]) -> Option<usize> {
    let stride = group.get(1).map_or(0, |c| c.start.wrapping_sub(group[0].start));
    let regular = group.len() == LANES
        && (stride == 1 || stride == 2)
        && group.iter().enumerate().all(|(l, c)| {
            c.count == group[0].count && c.step == group[0].step && c.start == group[0].start + l * stride
        });
    regular.then_some(stride)
}

/// Some output rows of one plane: for each window, the first maximum in row-major order; a NaN is
/// taken and a later NaN replaces it (PyTorch's rule). The index starts at the window's first
/// input, so a window of `-inf` points there. Values are compared in `xa` (the plane widened to
/// the accumulator type, exact) and copied from `x`; data-dependent choices are made without
/// branches. The plane's values and indices go to `(out, idx)`.
#[inline(always)]
fn pool_plane<T: PoolFloat, I: ArgmaxIndex>(
    x: &[T],
    xa: &[T::Acc],
    w: usize,
    (rows, cols, groups): (&[Taps], &[Taps], &[ColumnGroup]),
    (out, idx): (&mut [T], &mut [I]),
    wide: bool,
) {
    let wo = cols.len();
    for (r, (out, idx)) in rows.iter().zip(out.chunks_mut(wo).zip(idx.chunks_mut(wo))) {
        for group in groups {
            match *group {
                ColumnGroup::Lanes { first, stride } => {
                    let found = if stride == 1 {
                        lanes::<T::Acc, 1>(xa, w, r, &cols[first])
                    } else {
                        lanes::<T::Acc, 2>(xa, w, r, &cols[first])
                    };
                    let (out, idx) = (&mut out[first..first + LANES], &mut idx[first..first + LANES]);
                    match found {
                        Some((_, taps)) => {
                            let origin = r.start * w + cols[first].start;
                            for (l, ((o, i), &tap)) in
                                out.iter_mut().zip(idx.iter_mut()).zip(&taps).enumerate()
                            {
                                let a = origin + tap as usize + l * stride;
                                *o = x[a];
                                *i = I::from_flat_checked(a);
                            }
                        }
                        None => {
                            for (l, (o, i)) in out.iter_mut().zip(idx.iter_mut()).enumerate() {
                                let a = window(xa, w, r, &cols[first + l]);
                                *o = x[a];
                                *i = I::from_flat_checked(a);
                            }
                        }
                    }
                }
                ColumnGroup::Single(ow) => {
                    let a = single_window(xa, w, r, &cols[ow], wide);
                    out[ow] = x[a];
                    idx[ow] = I::from_flat_checked(a);
                }
            }
        }
    }
}

/// The arg-max of a window of rows `r` and columns `c` that is scanned alone (a
/// [`ColumnGroup::Single`]), with the rule of [`pool_plane`]: as one contiguous span when it
/// reads whole rows, by lanes when its rows are wide ([`wide_window`], 8 columns at a time when
/// `wide`: in the copy whose registers hold 8 `f32` or more), else tap by tap.
#[inline(always)]
pub(super) fn single_window<A: AccFloat>(xa: &[A], w: usize, r: &Taps, c: &Taps, wide: bool) -> usize {
    if reads_whole_rows(r, c, w) && r.count * w <= EXACT_POSITIONS {
        r.start * w + span(&xa[r.start * w..(r.start + r.count) * w])
    } else if c.step == 1 && c.count >= WIDE_LANES && xa.len() <= EXACT_POSITIONS {
        if wide && c.count >= 2 * WIDE_LANES {
            wide_window::<_, { 2 * WIDE_LANES }>(xa, w, r, c)
        } else {
            wide_window::<_, WIDE_LANES>(xa, w, r, c)
        }
    } else {
        window(xa, w, r, c)
    }
}

/// Whether a window of rows `r` and columns `c`, in a plane `w` wide, reads whole consecutive
/// rows: one contiguous span of the plane, which [`span`] scans faster than [`window`].
#[inline]
fn reads_whole_rows(r: &Taps, c: &Taps, w: usize) -> bool {
    c.start == 0 && c.count == w && (r.step == 1 || r.count == 1)
}

/// How far the last tap of a window of rows `r` and columns `c` (both with at least one tap)
/// lies from its first, in positions of a plane `w` wide.
#[inline(always)]
fn last_tap_offset(r: &Taps, c: &Taps, w: usize) -> usize {
    (r.count - 1) * r.step * w + (c.count - 1) * c.step
}

/// The arg-max of one window, scanning its taps in row-major order.
#[inline(always)]
pub(super) fn window<A: AccFloat>(xa: &[A], w: usize, r: &Taps, c: &Taps) -> usize {
    let mut best = A::neg_infinity();
    let mut best_at = r.start * w + c.start;
    for a in 0..r.count {
        let base = (r.start + a * r.step) * w + c.start;
        for b in 0..c.count {
            let at = base + b * c.step;
            let v = xa[at];
            if replaces_best(v, best) {
                best = v;
                best_at = at;
            }
        }
    }
    best_at
}

/// The arg-max of [`LANES`] windows on rows `r` whose columns are those of `first` shifted by
/// `S * lane`, as each lane's best value and its offset from its window's first tap
/// (`r.start * w + first.start + S * lane`). Each lane keeps the offset of its best tap, the
/// same for every lane at each step, so the loop vectorises (on 32-bit lanes: the offsets stay
/// `u32` until the caller widens them). `None` when a window spans 2^32 positions or more.
#[inline(always)]
pub(super) fn lanes<A: AccFloat, const S: usize>(
    xa: &[A],
    w: usize,
    r: &Taps,
    first: &Taps,
) -> Option<([A; LANES], [u32; LANES])> {
    let origin = r.start * w + first.start;
    u32::try_from(last_tap_offset(r, first, w)).ok()?;
    let mut best = [A::neg_infinity(); LANES];
    let mut best_tap = [0u32; LANES];
    for a in 0..r.count {
        for b in 0..first.count {
            let tap = a * r.step * w + b * first.step;
            let span = &xa[origin + tap..origin + tap + (LANES - 1) * S + 1];
            for l in 0..LANES {
                let v = span[l * S];
                let take = replaces_best(v, best[l]);
                best[l] = if take { v } else { best[l] };
                // Below 2^32: checked above.
                best_tap[l] = if take { tap as u32 } else { best_tap[l] };
            }
        }
    }
    Some((best, best_tap))
}

/// The arg-max of a contiguous span of at most [`EXACT_POSITIONS`] elements, with the rule of
/// [`pool_plane`]. Lane `l` scans positions `l, l + LANES, ...` (all lanes start from position 0);
/// the lanes then agree on the first maximum (the smallest position among equal values) or the
/// last NaN (the largest position). Positions are kept as floats (exact below
/// [`EXACT_POSITIONS`]), so that values and positions are selected by the same vector blend.
#[inline(always)]
fn span<A: AccFloat>(xa: &[A]) -> usize {
    let mut lanes = LaneBests::<A, LANES>::from(xa[0], 0);
    let chunks = xa.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (i, chunk) in chunks.enumerate() {
        lanes.take(chunk, position::<A>(i * LANES));
    }
    lanes.take(tail, position::<A>(xa.len() - tail.len()));
    lanes.agree()
}

/// The arg-max of a window whose rows read at least `N` consecutive columns, in a plane of at
/// most [`EXACT_POSITIONS`] elements, with the rule of [`pool_plane`]: each row is scanned `N`
/// columns at a time, then (when its length is not a multiple of `N`) its last `N` columns
/// again, by lanes that keep their best value and its position
/// (every lane starts from the window's first tap); the lanes then agree as in [`span`]. Each
/// lane meets its positions in increasing order, and every tap is met by some lane (those the
/// last group reads again by two, which agree), so the result is [`window`]'s. For the windows
/// of adaptive pooling, which have too few neighbours with the same taps to be computed
/// [`LANES`] columns at a time.
#[inline(always)]
fn wide_window<A: AccFloat, const N: usize>(xa: &[A], w: usize, r: &Taps, c: &Taps) -> usize {
    let first = r.start * w + c.start;
    let mut lanes = LaneBests::<A, N>::from(xa[first], first);
    let step = position::<A>(N);
    for a in 0..r.count {
        let row = (r.start + a * r.step) * w + c.start;
        let xs = &xa[row..row + c.count];
        let mut base = position::<A>(row);
        let groups = xs.chunks_exact(N);
        let ragged = !groups.remainder().is_empty();
        for group in groups {
            lanes.take(group, base);
            base += step;
        }
        if ragged {
            lanes.take(&xs[c.count - N..], position::<A>(row + c.count - N));
        }
    }
    lanes.agree()
}

/// The lanes of [`wide_window`]: one vector of `f32` on every x86-64, or twice as many in the
/// copy for registers of 8 (AVX2). Eight lanes in two SSE2 vectors need shuffles between the
/// halves of their masks, which cost more than the lanes save; any count finds the same tap.
const WIDE_LANES: usize = 4;

/// `N` lanes of a scan ([`span`], [`wide_window`]), each keeping its best value and that value's
/// position (as a float, exact below [`EXACT_POSITIONS`]), so that both are selected by the same
/// vector blend.
struct LaneBests<A, const N: usize> {
    best: [A; N],
    best_at: [A; N],
}

impl<A: AccFloat, const N: usize> LaneBests<A, N> {
    /// Every lane starting from `value` at position `at`.
    #[inline(always)]
    fn from(value: A, at: usize) -> Self {
        LaneBests { best: [value; N], best_at: [position::<A>(at); N] }
    }

    /// Lane `l` meets `group[l]` (for the first `group.len()` lanes, at most `N`), at position
    /// `base + l`, and takes it where it replaces its best ([`replaces_best`]).
    #[inline(always)]
    fn take(&mut self, group: &[A], base: A) {
        for l in 0..N {
            let Some(&v) = group.get(l) else { break };
            let take = replaces_best(v, self.best[l]);
            self.best[l] = A::choose(take, v, self.best[l]);
            self.best_at[l] = A::choose(take, base + position::<A>(l), self.best_at[l]);
        }
    }

    /// The position the lanes agree on, each having met its positions in increasing order: the
    /// first maximum (the smallest position among equal values) or the last NaN (the largest
    /// position).
    #[inline(always)]
    fn agree(self) -> usize {
        let LaneBests { best, best_at } = self;
        let (mut v, mut at) = (best[0], best_at[0]);
        for l in 1..N {
            let (u, p) = (best[l], best_at[l]);
            if takes_over(u, p, v, at) {
                (v, at) = (u, p);
            }
        }
        at.to_position()
    }
}

/// Whether a scan's result `u` at position `p` takes over from another's `v` at `at`, when the
/// scans met disjoint positions, each in increasing order, with the rule of [`pool_plane`]
/// (each holds its first maximum or its last NaN): the last NaN of all (the largest position),
/// else the first maximum (the larger value, or the smaller position among equal ones). Merging
/// scans this way in any order gives the result of one scan over all their positions.
#[inline(always)]
fn takes_over<A: AccFloat, P: PartialOrd>(u: A, p: P, v: A, at: P) -> bool {
    // Without a branch (`&` and `|` on `bool`s): a NaN `u` is neither larger than nor equal to `v`.
    (u.is_nan() & (!v.is_nan() | (p > at))) | (!v.is_nan() & ((u > v) | ((u == v) & (p < at))))
}

/// Positions below this are exact in every accumulator type (`f32` has a 24-bit significand).
const EXACT_POSITIONS: usize = 1 << 24;

/// The selection rule of every forward: value `v`, met after `best` in row-major window order,
/// takes its place when it is larger or NaN (so the first maximum wins, a NaN is taken, and a
/// later NaN replaces it). Without a branch: the two tests are never both true (a NaN compares
/// false), so `|` is the `||` the loops can vectorise.
#[inline(always)]
pub(super) fn replaces_best<A: AccFloat>(v: A, best: A) -> bool {
    (v > best) | v.is_nan()
}

/// Position `p` (below [`EXACT_POSITIONS`]) as an accumulator value, exactly.
#[inline(always)]
fn position<A: AccFloat>(p: usize) -> A {
    A::from(p as u32).unwrap_or_else(A::zero)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draws::Draws;

    fn taps(start: usize, count: usize, step: usize) -> Taps {
        Taps { start, count, step }
    }

    fn groups(cols: &[Taps]) -> Vec<ColumnGroup> {
        ColumnGroup::plan(cols).unwrap()
    }

    /// Columns go [`LANES`] at a time where their windows have the same taps and start 1 or 2
    /// apart, one at a time elsewhere (worked by hand from that rule).
    #[test]
    fn regular_columns_are_grouped_into_lanes() {
        use ColumnGroup::{Lanes, Single};
        // 16 windows of 3 taps, one column apart: two groups.
        let unit: Vec<_> = (0..16).map(|o| taps(o, 3, 1)).collect();
        assert_eq!(groups(&unit), [Lanes { first: 0, stride: 1 }, Lanes { first: 8, stride: 1 }]);
        // 10 windows two columns apart: a group, then the 2 left over in the last 8 (columns 2
        // to 7 computed twice).
        let two: Vec<_> = (0..10).map(|o| taps(2 * o, 2, 1)).collect();
        assert_eq!(groups(&two), [Lanes { first: 0, stride: 2 }, Lanes { first: 2, stride: 2 }]);
        // A first window clipped by padding: alone, then a group from the next.
        let padded: Vec<_> = (0..9).map(|o| if o == 0 { taps(0, 2, 1) } else { taps(o - 1, 3, 1) }).collect();
        assert_eq!(groups(&padded), [Single(0), Lanes { first: 1, stride: 1 }]);
        // The ResNet stem on 32 columns (k3 s2 p1, 16 windows): the clipped first alone, a group
        // from column 1, and the last 8 (from 8) again.
        let stem: Vec<_> =
            (0..16).map(|o| if o == 0 { taps(0, 2, 1) } else { taps(2 * o - 1, 3, 1) }).collect();
        assert_eq!(groups(&stem), [Single(0), Lanes { first: 1, stride: 2 }, Lanes { first: 8, stride: 2 }]);
        // The same on 31 columns: the last window is clipped too, so the last 8 are not regular.
        let mut clipped = stem.clone();
        clipped[15] = taps(29, 2, 1);
        let tail: Vec<_> = (9..16).map(Single).collect();
        assert_eq!(groups(&clipped)[..2], [Single(0), Lanes { first: 1, stride: 2 }]);
        assert_eq!(groups(&clipped)[2..], tail[..]);
    }

    #[test]
    fn irregular_columns_go_one_at_a_time() {
        let singles: Vec<_> = (0..8).map(ColumnGroup::Single).collect();
        // Three apart; a window with a tap fewer; with another step; starting out of line.
        let three: Vec<_> = (0..8).map(|o| taps(3 * o, 3, 1)).collect();
        assert_eq!(groups(&three), singles);
        let unit: Vec<_> = (0..8).map(|o| taps(o, 3, 1)).collect();
        for odd in [taps(5, 2, 1), taps(5, 3, 2), taps(6, 3, 1)] {
            let mut cols = unit.clone();
            cols[5] = odd;
            assert_eq!(groups(&cols), singles, "column 5: {odd:?}");
        }
        // Fewer than LANES columns.
        assert_eq!(groups(&unit[..7]), singles[..7]);
    }

    /// A window reads one contiguous span when it takes every column and consecutive rows (or
    /// one row, whatever its step).
    #[test]
    fn whole_rows_are_every_column_of_consecutive_rows() {
        let every_column = taps(0, 5, 1);
        assert!(reads_whole_rows(&taps(2, 3, 1), &every_column, 5));
        assert!(reads_whole_rows(&taps(2, 1, 4), &every_column, 5));
        // Dilated rows, a column short, not from column 0.
        assert!(!reads_whole_rows(&taps(2, 3, 2), &every_column, 5));
        assert!(!reads_whole_rows(&taps(2, 3, 1), &taps(0, 4, 1), 5));
        assert!(!reads_whole_rows(&taps(2, 3, 1), &taps(1, 5, 1), 6));
    }

    /// The last tap of 3 rows 2 apart and 4 columns 3 apart, in a plane 10 wide: 2 * 2 rows and
    /// 3 * 3 columns on, 49 positions from the first.
    #[test]
    fn the_last_tap_lies_rows_and_columns_on() {
        assert_eq!(last_tap_offset(&taps(5, 3, 2), &taps(1, 4, 3), 10), 49);
        assert_eq!(last_tap_offset(&taps(5, 1, 2), &taps(1, 1, 3), 10), 0);
    }

    /// Which kernel a plan takes, worked from the rules of the fields' docs: [`BLOCK`] planes a
    /// task of at most [`BLOCK_PLANE_MAX`] elements (45² = 2025, 46² = 2116; twice that for
    /// windows that share rows or are scanned one at a time: 64² = 4096, 65² = 4225), windows narrower
    /// than the plane or one window over the whole plane, for the blocked kernel; one window
    /// over the whole plane (global pooling) for the whole-plane kernel where the blocked one
    /// does not take the planes.
    #[test]
    fn the_kernel_follows_the_documented_rule() {
        let plan = |threads: usize, count: usize, [h, w]: [usize; 2], [ho, wo]: [usize; 2]| {
            let cpu = Cpu::with_threads(threads).unwrap();
            let planes = Planes { count, h, w, ho, wo };
            let (rows, cols) = (Taps::of_axis(h, ho, None), Taps::of_axis(w, wo, None));
            let p = ForwardPrepared::plan::<f32>(&cpu, rows, cols, planes, &mut Sizer::new()).unwrap();
            (p.blocked, p.whole_plane)
        };
        assert_eq!(plan(1, 8, [10, 10], [3, 3]), (true, false));
        assert_eq!(plan(1, 7, [10, 10], [3, 3]), (false, false));
        assert_eq!(plan(1, 8, [45, 45], [3, 3]), (true, false));
        // 46 rows to 3 share rows (windows 0..16, 15..31, 30..46): blocked up to 64x64.
        assert_eq!(plan(1, 8, [46, 46], [3, 3]), (true, false));
        assert_eq!(plan(1, 8, [64, 64], [3, 3]), (true, false));
        assert_eq!(plan(1, 8, [65, 65], [3, 3]), (false, false));
        // 48 to 3, windows of 16 that share no rows, 3 columns scanned one at a time: also.
        assert_eq!(plan(1, 8, [48, 48], [3, 3]), (true, false));
        // Windows over the whole width: neither blocked nor, with two output rows, whole-plane.
        assert_eq!(plan(1, 8, [10, 10], [2, 1]), (false, false));
        // Global pooling: blocked from a whole block (windows 10 columns wide take no partial
        // block), else whole-plane; whole-plane too past BLOCK_PLANE_MAX.
        assert_eq!(plan(1, 8, [10, 10], [1, 1]), (true, true));
        assert_eq!(plan(1, 7, [10, 10], [1, 1]), (false, true));
        assert_eq!(plan(1, 1, [10, 10], [1, 1]), (false, true));
        assert_eq!(plan(1, 8, [46, 46], [1, 1]), (false, true));
        // Windows 3 columns wide (9 to 3), each scanned alone one by one: blocked from 1 plane.
        assert_eq!(plan(1, 1, [9, 9], [3, 3]), (true, false));
        assert_eq!(plan(1, 5, [9, 9], [3, 3]), (true, false));
        // ... but not with a plane of more than twice BLOCK_PLANE_MAX, nor in bands (1 plane, 2
        // threads).
        assert_eq!(plan(1, 1, [66, 66], [15, 15]), (false, false));
        if cfg!(feature = "rayon") {
            assert_eq!(plan(2, 1, [9, 9], [3, 3]), (false, false));
        }
    }

    /// The fewest planes a block of fewer than [`BLOCK`] takes, by the documented rule: any number
    /// when every window is scanned alone (narrower than [`WIDE_LANES`] columns, not 8 at a
    /// time), half a block when some go 8 columns 2 apart, never (`BLOCK + 1`) when some go 8
    /// columns 1 apart or are [`WIDE_LANES`] or more columns wide.
    #[test]
    fn partial_blocks_follow_the_measured_rule() {
        let from = |cols: Vec<Taps>| partial_blocks_from(&cols, &groups(&cols));
        // k3 s2 p1 on 9 columns: 5 windows of at most 3 columns, too few for a group.
        assert_eq!(from(Taps::of_axis(9, 5, Some([3, 2, 1, 1]))), 1);
        // Adaptive 9 to 3, and dilated k3 s2 d2 on 12 columns: alone too.
        assert_eq!(from(Taps::of_axis(9, 3, None)), 1);
        assert_eq!(from(Taps::of_axis(12, 4, Some([3, 2, 2, 2]))), 1);
        // k3 s2 p1 on 32 columns: groups of 8 columns 2 apart.
        assert_eq!(from(Taps::of_axis(32, 16, Some([3, 2, 1, 1]))), BLOCK / 2);
        // k2 s1 on 20 columns: groups of 8 columns 1 apart.
        assert_eq!(from(Taps::of_axis(20, 19, Some([2, 1, 0, 1]))), BLOCK + 1);
        // Adaptive 10 to 3 (windows 4 wide) and 32 to 3 (11 wide): wide windows.
        assert_eq!(from(Taps::of_axis(10, 3, None)), BLOCK + 1);
        assert_eq!(from(Taps::of_axis(32, 3, None)), BLOCK + 1);
    }

    /// A task's whole blocks go to the blocked kernel, and the planes after them too when there
    /// are at least `partial_from` of them (worked by hand).
    #[test]
    fn the_planes_left_after_whole_blocks_follow_partial_from() {
        // 19 planes: 2 blocks and 3 left, which a block takes from 1 or 3, not from 4 or 9.
        assert_eq!(planes_in_blocks(19, 1), 19);
        assert_eq!(planes_in_blocks(19, 3), 19);
        assert_eq!(planes_in_blocks(19, 4), 16);
        assert_eq!(planes_in_blocks(19, BLOCK + 1), 16);
        // Fewer than a block: all or none; whole blocks: all, whatever the rule.
        assert_eq!(planes_in_blocks(6, BLOCK / 2), 6);
        assert_eq!(planes_in_blocks(3, BLOCK / 2), 0);
        assert_eq!(planes_in_blocks(16, BLOCK + 1), 16);
    }

    /// The blocked kernel, forced onto every number of planes from 1 to 19 (whole blocks, and a
    /// last block of each size from 1 to 7), finds for every window of every plane the tap of the
    /// scalar scan ([`window`], one tap at a time, the reference) and stores that input's value
    /// and flat index, bit for bit, in all four element types: max pooling with padding,
    /// dilation, ceil-mode windows and 8 columns 1 and 2 apart (which the rule sends elsewhere),
    /// adaptive pooling with overlapping windows, and global pooling of planes whose rows fill
    /// the four chains of a window scanned alone ([`scan_alone`]) once, twice and a half, or
    /// not at all, on values with ties, both zeros, infinities, NaNs and subnormals, and on the
    /// same without NaN (a window of 49 taps all but always holds one).
    #[test]
    fn blocks_of_any_size_find_the_scalar_scans_taps() {
        fn check<T: PoolFloat>() {
            let values =
                [0.0, -0.0, 1.0, 1.0, 2.0, -3.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-40, 6e-8];
            let no_nan = [0.0, -0.0, 1.0, 1.0, 2.0, -3.5, f64::INFINITY, f64::NEG_INFINITY, 1e-40, 6e-8];
            // (most planes, h, w, ho, wo, pooling)
            let cases: [Case; 10] = [
                (19, 9, 9, 5, 5, Some([3, 2, 1, 1])),     // padded, windows alone
                (19, 12, 12, 4, 4, Some([3, 2, 2, 2])),   // dilated, padded
                (19, 8, 8, 4, 4, Some([3, 2, 0, 1])),     // ceil mode: the last window clipped
                (19, 20, 20, 19, 19, Some([2, 1, 0, 1])), // 8 columns 1 apart
                (19, 32, 32, 16, 16, Some([3, 2, 1, 1])), // 8 columns 2 apart
                (19, 10, 7, 4, 3, None),                  // adaptive, overlapping
                (19, 7, 7, 1, 1, None),                   // global: 4 chains, then 3 rows
                (19, 9, 5, 1, 1, None),                   // global: 8 rows, then 1
                (19, 4, 6, 1, 1, None),                   // global: 4 rows, none left
                (19, 3, 5, 1, 1, None),                   // global: fewer rows than chains
            ];
            let mut draws = Draws::new(0x853C_49E6_748F_EA9B);
            for ((most, h, w, ho, wo, pooling), values) in
                cases.into_iter().flat_map(|case| [(case, &values[..]), (case, &no_nan[..])])
            {
                let (rows, cols) = (Taps::of_axis(h, ho, pooling), Taps::of_axis(w, wo, pooling));
                for count in 1..=most {
                    let x: Vec<T> = (0..count * h * w)
                        .map(|_| T::round_from_f64(values[(draws.next_u64() % values.len() as u64) as usize]))
                        .collect();
                    let planes = Planes { count, h, w, ho, wo };
                    let cpu = Cpu::sequential();
                    let mut sizer = Sizer::new();
                    let mut p =
                        ForwardPrepared::plan::<T>(&cpu, rows.clone(), cols.clone(), planes, &mut sizer)
                            .unwrap();
                    (p.blocked, p.partial_from) = (true, 1);
                    p.acc_per_task = acc_per_task::<T>(Some(p.band_rows), planes);
                    let (out, idx) = run_task(true, planes, &p, &x);
                    for (l, plane) in x.chunks(h * w).enumerate() {
                        let mut xa = vec![<T::Acc as num_traits::Zero>::zero(); h * w];
                        T::to_acc_slice(plane, &mut xa);
                        for (oh, r) in rows.iter().enumerate() {
                            for (ow, c) in cols.iter().enumerate() {
                                let at = window(&xa, w, r, c);
                                let o = l * ho * wo + oh * wo + ow;
                                let place = format!(
                                    "{} {count} planes {h}x{w} {pooling:?}: plane {l}, ({oh}, {ow})",
                                    T::DTYPE
                                );
                                assert_eq!(idx[o], at as i64, "{place}");
                                assert_eq!(
                                    bytemuck::bytes_of(&out[o]),
                                    bytemuck::bytes_of(&plane[at]),
                                    "{place}"
                                );
                            }
                        }
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
        check::<half::f16>();
        check::<half::bf16>();
    }

    /// One forward task over all of `x`, through the dispatched kernels or the baseline build.
    fn forward<T: PoolFloat>(
        dispatched: bool,
        planes: Planes,
        rows: &[Taps],
        cols: &[Taps],
        x: &[T],
    ) -> (Vec<u16>, Vec<i64>) {
        let cpu = Cpu::sequential();
        let mut sizer = Sizer::new();
        let mut p =
            ForwardPrepared::plan::<T>(&cpu, rows.to_vec(), cols.to_vec(), planes, &mut sizer).unwrap();
        // The best copy, even where the environment asks every call for the baseline.
        p.isa = Isa::best();
        let (out, idx) = run_task(dispatched, planes, &p, x);
        (bytemuck::cast_slice::<T, u16>(&out).to_vec(), idx)
    }

    /// One task of plan `p` over all of `x` (scratch as the plan sizes it), through the
    /// dispatched kernels or the baseline build: the values and the indices.
    fn run_task<T: PoolFloat>(
        dispatched: bool,
        planes: Planes,
        p: &ForwardPrepared,
        x: &[T],
    ) -> (Vec<T>, Vec<i64>) {
        let mut acc = vec![<T::Acc as num_traits::Zero>::zero(); p.acc_per_task()];
        let outputs = planes.count * planes.ho * planes.wo;
        let (mut out, mut idx) = (vec![T::default(); outputs], vec![0i64; outputs]);
        let t = Task { x, row0: 0, rows: planes.ho, out: &mut out, idx: &mut idx, acc: &mut acc };
        if dispatched {
            pool_task(planes, p, t)
        } else {
            pool_task_body::<T, i64, false>(planes, p, t)
        }
        (out, idx)
    }

    /// Planes, their input height and width, output height and width, and the max-pooling
    /// `[kernel, stride, padding, dilation]` (adaptive pooling without).
    type Case = (usize, usize, usize, usize, usize, Option<[usize; 4]>);

    /// The kernels dispatched for the processor's vector instructions (`pulp`: AVX2 where it
    /// has them) store the same values and indices, bit for bit, as the same kernels compiled
    /// for the baseline processor, which stay the reference: on every path (the blocked kernel
    /// and the planes after it, columns 8 at a time 1 and 2 apart, wide windows, one window at
    /// a time, dilated windows, whole planes), in all four element types, on values with ties,
    /// both zeros, infinities, NaNs and subnormals.
    #[test]
    fn dispatched_kernels_equal_the_baseline_build() {
        fn check<T: PoolFloat>() {
            let values = [
                0.0,
                -0.0,
                1.0,
                1.0,
                2.0,
                -3.5,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e-40,
                6e-8,
                7.25,
            ];
            // (planes, h, w, ho, wo, pooling)
            let cases: [Case; 11] = [
                (6, 32, 32, 3, 3, None),                 // wide windows
                (9, 16, 16, 3, 3, None),                 // blocked, then one plane
                (10, 30, 30, 7, 7, None),                // blocked, overlapping windows
                (3, 7, 7, 1, 1, None),                   // whole planes
                (3, 32, 32, 16, 16, Some([3, 2, 1, 1])), // 8 columns 2 apart, one alone
                (3, 20, 20, 19, 19, Some([2, 1, 0, 1])), // 8 columns 1 apart
                (1, 48, 48, 16, 16, Some([3, 3, 2, 2])), // dilated, one at a time
                (4, 9, 9, 5, 5, Some([3, 2, 1, 1])),     // few columns: a block of 4
                (6, 32, 32, 16, 16, Some([3, 2, 1, 1])), // 8 columns 2 apart: a block of 6
                (11, 9, 9, 5, 5, Some([3, 2, 1, 1])),    // a block of 8, then one of 3
                (8, 2, 5, 3, 3, None),                   // rows 2 to 3: the last band is all held
            ];
            let mut draws = Draws::new(0x2545_F491_4F6C_DD1D);
            for (count, h, w, ho, wo, pooling) in cases {
                for round in 0..20 {
                    let x: Vec<T> = (0..count * h * w)
                        .map(|_| {
                            let state = draws.next_u64();
                            // Every other round, NaNs and infinities only now and then.
                            let pick = (state % values.len() as u64) as usize;
                            let pick = if round % 2 == 0 && (6..=8).contains(&pick) { 11 } else { pick };
                            T::round_from_f64(
                                values[pick] + (state >> 40) as f64 % 3.0 * f64::from(round % 3 == 0),
                            )
                        })
                        .collect();
                    let planes = Planes { count, h, w, ho, wo };
                    let (rows, cols) = (Taps::of_axis(h, ho, pooling), Taps::of_axis(w, wo, pooling));
                    let want = forward(false, planes, &rows, &cols, &x);
                    let got = forward(true, planes, &rows, &cols, &x);
                    assert_eq!(
                        got,
                        want,
                        "{} {count}x{h}x{w} to {ho}x{wo}, {pooling:?}, round {round}",
                        T::DTYPE
                    );
                }
            }
        }
        check::<f32>();
        check::<f64>();
        check::<half::f16>();
        check::<half::bf16>();
    }

    /// The lanes of [`wide_window`], 4 or 8 of them, find [`window`]'s tap (the scalar scan, one
    /// tap at a time, is the reference) on every window of 4 (or 8) to 19 consecutive columns and 1 to 4 rows (1 or 2
    /// apart) of planes whose values are drawn from a few, with ties, infinities, NaNs and both
    /// zeros: every row length against the lane count, overlaps of the last group included.
    #[test]
    fn wide_windows_find_the_scalar_scans_tap() {
        fn check<A: AccFloat>(values: &[f64]) {
            let (h, w) = (9, 23);
            let mut draws = Draws::new(0x9E37_79B9_7F4A_7C15);
            for plane in 0..200 {
                let xa: Vec<A> = (0..h * w)
                    .map(|_| A::from(values[(draws.next_u64() % values.len() as u64) as usize]).unwrap())
                    .collect();
                for (count, rows, step) in (WIDE_LANES..20).flat_map(|n| [(n, 1, 1), (n, 3, 1), (n, 4, 2)]) {
                    for start in [0, w - count] {
                        let (r, c) = (taps(plane % 2, rows, step), taps(start, count, 1));
                        let want = window(&xa, w, &r, &c);
                        let four = wide_window::<A, WIDE_LANES>(&xa, w, &r, &c);
                        assert_eq!(four, want, "4 lanes, plane {plane}: rows {r:?}, columns {c:?}");
                        if count >= 2 * WIDE_LANES {
                            let eight = wide_window::<A, { 2 * WIDE_LANES }>(&xa, w, &r, &c);
                            assert_eq!(eight, want, "8 lanes, plane {plane}: rows {r:?}, columns {c:?}");
                        }
                    }
                }
            }
        }
        // Few values, so that windows hold ties; then NaN in one plane of 20 or so, and more.
        let few = [0.0, -0.0, 1.0, 2.0, 2.0, f64::NEG_INFINITY, f64::INFINITY];
        let nan: Vec<f64> = few.iter().copied().chain([f64::NAN]).collect();
        let mostly_nan = [f64::NAN, f64::NAN, 1.0, f64::NEG_INFINITY];
        for values in [&few[..], &nan, &mostly_nan, &[f64::NEG_INFINITY]] {
            check::<f32>(values);
            check::<f64>(values);
        }
    }

    /// A span runs from the first tap to one past the last: taps 2, 4, 6 (dilation 2) span
    /// 2..7; one tap spans itself; no tap spans nothing.
    #[test]
    fn a_span_covers_the_first_to_the_last_tap() {
        assert_eq!(Taps { start: 2, count: 3, step: 2 }.span(), 2..7);
        assert_eq!(Taps { start: 5, count: 4, step: 3 }.span(), 5..15);
        assert_eq!(Taps { start: 4, count: 1, step: 3 }.span(), 4..5);
        assert_eq!(Taps { start: 4, count: 0, step: 1 }.span(), 4..4);
    }
}
