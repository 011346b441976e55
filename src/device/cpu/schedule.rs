//! What each CPU task reads and which task computes it: the windows of every output (the plane
//! sizes, [`Planes`], and the taps of every output row and column, [`Taps`], built from the two
//! window formulas of [`crate::geometry`]; the kernels index these tables and none recomputes a
//! window), then how the kernels share their work among tasks: every split in one place.
//!
//! | Kernel | Split | Chosen in |
//! |---|---|---|
//! | forward (all three forwards) | [`PlaneSplit`]: runs of whole planes, or, with fewer planes than threads, bands of output rows of each plane | `forward::ForwardPrepared::plan` |
//! | flat-index backward (adaptive, with indices, `I32Argmax`) | [`ScatterSplit`]: runs of whole planes (of one gradient each, or not), or, with fewer planes than threads, [`InputBands`] of input rows of each plane | `scatter::ScatterPrepared::plan` |
//! | `Bitmask` backward | blocks of at most 4 channels: [`runs`] of bands of [`rows_per_band`] input rows of each `(n, 16-channel)` block (whole blocks unless there are fewer blocks than threads), each input element gathering its sum; wider blocks: [`block_runs`], or with fewer blocks than threads bands of [`rows_per_band`] output rows of each block, decoded into flat indices that the flat-index backward then adds | `bitmask::BitmaskPrepared::plan` |
//! | `Bitmask` forward, at least as many blocks as threads | [`block_runs`]: each block pooled and encoded at once | `mask::MaskForwardPrepared` |
//! | mask forwards otherwise | the forward's [`PlaneSplit`], then [`runs`] of the encoding's parts (`crate::mask::EncodeParts`: 65536 `I32Argmax` values, or one `Bitmask` block); with fewer `Bitmask` blocks than threads, each block in bands of [`rows_per_band`] output rows | `mask::encode` |
//!
//! The counts all come from [`task_count`] (a few tasks per thread, [`TASKS_PER_THREAD`], at
//! most one per unit of work), [`planes_per_task`] and [`rows_per_band`].
//!
//! **Small work stays on the calling thread.** Every operation first asks [`sized`] which device
//! it runs on, in both phases, from its sizes alone ([`Work`]): a call with less work than
//! [`GRAIN`] is planned and run as on `Cpu::sequential()`, so it never waits for a pool; above
//! it every thread gets work as the table says. The grain is the work at which the pool starts
//! to finish first: handing tasks to a pool and waiting for them costs a fixed time, which
//! work below the grain does not repay. A backward's element costs a quarter of a forward's tap
//! (it streams memory), which puts both crossovers at the same grain. The crossovers measured:
//! `benches/README.md`, "The measurements behind the tuning constants".
//!
//! **Why no result depends on the thread count.** Every output element (a pooled value and its
//! index, a gradient, a mask byte) is written by exactly one task, by the same operations in the
//! same order whichever task it is:
//! - a forward scans each window in the same order, whether its plane is whole or in bands;
//! - a backward element receives its additions in row-major output order: a band of input rows
//!   reads the gradient rows whose windows reach it, in order, so with every index inside its
//!   window's rows it adds what a whole-plane task adds, in the same order; an index outside its
//!   window's rows (which the backward allows) sends its plane to be redone whole on one thread;
//! - the parts of a mask encoding own disjoint bytes, each encoded the same way alone;
//! - errors: each task stops at its first bad index, and the tasks' results are read in task
//!   (row-major) order, so the error is the first bad index of the whole call.

use core::ops::Range;

use super::Cpu;
use super::interleave::BLOCK;
use crate::alloc::collect_exact;
use crate::error::{Result, UNNAMED};
use crate::geometry::{adaptive_window, pool_window_taps};
use crate::shape::{AdaptiveGeometry, AdaptiveGeometry3d, MaxPool3dGeometry, MaxPoolGeometry, VolumeSizes};

/// The input positions one output reads along one axis: `start + i * step` for `i < count`
/// (`count >= 1`, checked in phase 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taps {
    pub start: usize,
    pub count: usize,
    pub step: usize,
}

impl Taps {
    /// The taps of every output of an axis, for the kernels' tests: adaptive from `input` to
    /// `output`, or max pooling `[kernel, stride, padding, dilation]` (the crate's two window
    /// formulas).
    #[cfg(test)]
    pub(super) fn of_axis(input: usize, output: usize, pooling: Option<[usize; 4]>) -> Vec<Taps> {
        (0..output)
            .map(|o| match pooling {
                None => {
                    let r = adaptive_window(o, input, output);
                    Taps { start: r.start, count: r.len(), step: 1 }
                }
                Some([k, s, p, d]) => {
                    let (start, count) = pool_window_taps(o, input, k, s, p, d);
                    Taps { start, count, step: d }
                }
            })
            .collect()
    }

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

/// What the operations with flat indices need of their geometry (adaptive or max pooling): the
/// plane sizes, each output's window taps, how much a forward reads (for [`Planned`]), and the
/// error for a bad index.
pub(super) trait Windowed {
    fn plane_sizes(&self) -> Planes;
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)>;
    fn forward_work(&self) -> Work;
    fn bad_index(&self, element: usize, value: i64) -> crate::Error;
}

impl Windowed for AdaptiveGeometry {
    fn plane_sizes(&self) -> Planes {
        Planes::from(self)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        adaptive_taps(self)
    }
    fn forward_work(&self) -> Work {
        Work::adaptive_forward(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.index_error(UNNAMED, "indices", element, value)
    }
}

impl Windowed for MaxPoolGeometry {
    fn plane_sizes(&self) -> Planes {
        Planes::from(self)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        max_pool_taps(self)
    }
    fn forward_work(&self) -> Work {
        Work::max_pool_forward(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.index_error(UNNAMED, "indices", element, value)
    }
}

/// What the 3-D poolings add to [`Windowed`]: a 3-D pooling is the 2-D pooling of every `[H, W]`
/// slice of its volumes (its [`VolumeWindowed::slices`]), then, for every output, the best of
/// those slices' results along its depth window ([`VolumeWindowed::depth_taps`]). As
/// [`Windowed`], a 3-D geometry describes its volumes as planes of `D·H` rows of `W`, which is
/// what the flat-index backward adds into (the indices are flat in the volume).
pub(super) trait VolumeWindowed: Windowed {
    /// The 2-D pooling of every slice: `N·C·D` planes of `[H, W]`, with the plane's windows.
    type Slices: Windowed;
    fn slices(&self) -> Self::Slices;
    /// The input slices each output depth reads.
    fn depth_taps(&self) -> Result<Vec<Taps>>;
    fn sizes(&self) -> &VolumeSizes;
}

/// The planes of `D·H` rows that [`Windowed`] makes of a 3-D pooling's volumes.
fn volume_planes(s: &VolumeSizes) -> Planes {
    let ([d, h, w], [od, oh, ow]) = (s.input, s.output);
    Planes { count: s.volumes(), h: d * h, w, ho: od * oh, wo: ow }
}

/// The taps of [`Windowed::taps`] for a 3-D pooling: the columns are the slices', and the rows
/// of output row `(od, oh)` in the volume's plane of `D·H` rows are the hull of the rows it
/// reads (row window `oh` in each slice of depth window `od`, which are not one run of rows):
/// from the first row it reads to the last, widened where needed so that starts and ends never
/// go back ([`monotone_windows`]), as the flat-index backward needs.
///
/// The hull rather than the depth window's whole slices is a tuning decision: the backward
/// zeroes a plane up to the end of each output row's window just before adding its gradients,
/// so a window that ends at the last row it reads keeps the zeroing a few rows ahead of the
/// additions, in cache, where whole slices zero a slice or two at a time. Any superset whose
/// bounds never go back adds the same sums (`add_by_rows` zeroes the rest of a plane before an
/// index past what it has zeroed).
fn volume_taps(g: &impl VolumeWindowed) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let (rows, cols) = g.slices().taps()?;
    let h = g.sizes().input[1];
    let depth = if rows.is_empty() { Vec::new() } else { g.depth_taps()? };
    let len = depth.len() * rows.len();
    let hulls = depth.iter().flat_map(|d| {
        let slices = d.span();
        rows.iter().map(move |r| {
            let rows = r.span();
            let start = slices.start * h + rows.start;
            let end = match slices.end.checked_sub(1) {
                Some(last) if !rows.is_empty() => last * h + rows.end,
                _ => start,
            };
            Taps { start, count: end - start, step: 1 }
        })
    });
    let mut windows = collect_exact(UNNAMED, "windows", len, hulls)?;
    monotone_windows(&mut windows);
    Ok((windows, cols))
}

/// Widens runs of rows (`step` 1) so that neither their starts nor their ends ever go back: each
/// end becomes the largest end up to it, each start the smallest start from it on. Each run
/// only grows, so it still holds every row it held.
fn monotone_windows(windows: &mut [Taps]) {
    let mut end = 0;
    for w in windows.iter_mut() {
        end = end.max(w.start + w.count);
        w.count = end - w.start;
    }
    let mut start = usize::MAX;
    for w in windows.iter_mut().rev() {
        let end = w.start + w.count;
        start = start.min(w.start);
        *w = Taps { start, count: end - start, step: 1 };
    }
}

/// The forward work of a 3-D pooling: each output reads at most the slices' taps times the
/// depth taps.
fn volume_work(g: &impl VolumeWindowed) -> Work {
    let Work::Forward { taps, .. } = g.slices().forward_work() else { unreachable!("a forward") };
    let depth = g.depth_taps().map_or(0, |d| d.iter().map(|t| t.count).max().unwrap_or(0));
    Work::Forward { planes: volume_planes(g.sizes()), taps: taps.saturating_mul(depth) }
}

impl VolumeWindowed for AdaptiveGeometry3d {
    type Slices = AdaptiveGeometry;
    fn slices(&self) -> AdaptiveGeometry {
        let s = &self.sizes;
        let ([d, h, w], [_, ho, wo]) = (s.input, s.output);
        AdaptiveGeometry { n: s.volumes(), c: d, h, w, ho, wo, ndim: 4 }
    }
    fn depth_taps(&self) -> Result<Vec<Taps>> {
        let (d, od) = (self.sizes.input[0], self.sizes.output[0]);
        let taps = (0..od).map(|o| {
            let r = adaptive_window(o, d, od);
            Taps { start: r.start, count: r.len(), step: 1 }
        });
        collect_exact(UNNAMED, "windows", od, taps)
    }
    fn sizes(&self) -> &VolumeSizes {
        &self.sizes
    }
}

impl VolumeWindowed for MaxPool3dGeometry {
    type Slices = MaxPoolGeometry;
    fn slices(&self) -> MaxPoolGeometry {
        let s = &self.sizes;
        let ([d, h, w], [_, ho, wo]) = (s.input, s.output);
        MaxPoolGeometry { n: s.volumes(), c: d, h, w, ho, wo, params: self.params.axes::<2>(1), ndim: 4 }
    }
    fn depth_taps(&self) -> Result<Vec<Taps>> {
        let p = &self.params;
        let (d, od) = (self.sizes.input[0], self.sizes.output[0]);
        let [k, s, pad, dil] = [p.kernel()[0], p.stride()[0], p.padding()[0], p.dilation()[0]];
        let taps = (0..od).map(|o| {
            let (start, count) = pool_window_taps(o, d, k, s, pad, dil);
            Taps { start, count, step: dil }
        });
        collect_exact(UNNAMED, "windows", od, taps)
    }
    fn sizes(&self) -> &VolumeSizes {
        &self.sizes
    }
}

/// The 3-D geometries as [`Windowed`]: their volumes as planes of `D·H` rows.
impl Windowed for AdaptiveGeometry3d {
    fn plane_sizes(&self) -> Planes {
        volume_planes(&self.sizes)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        volume_taps(self)
    }
    fn forward_work(&self) -> Work {
        volume_work(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.sizes.index_error(UNNAMED, "indices", element, value)
    }
}

impl Windowed for MaxPool3dGeometry {
    fn plane_sizes(&self) -> Planes {
        volume_planes(&self.sizes)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        volume_taps(self)
    }
    fn forward_work(&self) -> Work {
        volume_work(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.sizes.index_error(UNNAMED, "indices", element, value)
    }
}

/// The default grain: work below which a call runs on the calling thread, in [`Work::units`].
/// Any grain gives the same results (no result depends on the thread count); the value is where
/// the calling thread alone stops finishing first (module doc).
pub(super) const GRAIN: u64 = 1 << 17;

/// How much a call does, estimated from its sizes alone (so both phases agree), for [`sized`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Work {
    /// A forward whose every output reads at most `taps` input positions.
    Forward { planes: Planes, taps: usize },
    /// A backward: every input position zeroed, every gradient added.
    Backward(Planes),
}

impl Work {
    /// A forward of adaptive windows: the largest window has `ceil(H / Ho) + 1` rows (and
    /// likewise columns) at most.
    pub(super) fn adaptive_forward(g: &AdaptiveGeometry) -> Self {
        let most = |input: usize, output: usize| input.div_ceil(output.max(1)) + 1;
        Work::Forward { planes: Planes::from(g), taps: most(g.h, g.ho).saturating_mul(most(g.w, g.wo)) }
    }

    /// A forward of max-pooling windows: `kernel` taps at most.
    pub(super) fn max_pool_forward(g: &MaxPoolGeometry) -> Self {
        let [kh, kw] = g.params.kernel();
        Work::Forward { planes: Planes::from(g), taps: kh.saturating_mul(kw) }
    }

    /// A backward over the planes of `g`.
    pub(super) fn backward(g: impl Into<Planes>) -> Self {
        Work::Backward(g.into())
    }

    /// The estimate: one unit per tap a forward reads (a comparison and a branch); a quarter
    /// unit per element a backward zeroes or adds (streaming memory, a few times cheaper).
    pub(super) fn units(&self) -> u64 {
        let (p, per_plane) = match *self {
            Work::Forward { planes: p, taps } => {
                (p, (p.ho as u64).saturating_mul(p.wo as u64).saturating_mul(taps as u64))
            }
            Work::Backward(p) => (
                p,
                ((p.h as u64).saturating_mul(p.w as u64).saturating_add((p.ho as u64) * (p.wo as u64))) / 4,
            ),
        };
        per_plane.saturating_mul(p.count as u64)
    }
}

/// The device a call runs on: `cpu`, or, for less [`Work`] than its grain ([`GRAIN`] unless
/// `Cpu::with_grain` set another), the calling thread alone (no pool round trip). Results are
/// the same either way (module doc).
pub(super) fn sized(cpu: &Cpu, work: Work) -> &Cpu {
    if work.units() < cpu.grain { calling_thread(cpu) } else { cpu }
}

/// The device of calls planned for the calling thread alone, with `cpu`'s choice of
/// instructions.
pub(super) fn calling_thread(cpu: &Cpu) -> &'static Cpu {
    static CALLING_THREAD: [Cpu; 2] = [Cpu::calling_thread(false), Cpu::calling_thread(true)];
    &CALLING_THREAD[usize::from(cpu.vector_instructions())]
}

/// What phase 1 planned, with the device it planned for ([`sized`]): phase 2 runs there
/// without estimating the work again, so both phases agree by construction.
#[derive(Debug)]
pub struct Planned<P> {
    alone: bool,
    /// The kernel's own plan.
    pub(super) plan: P,
}

impl<P> Planned<P> {
    /// Phase 1 of a call of `work` on `cpu`: `plan` runs for the device the work deserves and
    /// returns its plan and workspace size.
    pub(super) fn of(
        cpu: &Cpu,
        work: Work,
        plan: impl FnOnce(&Cpu) -> Result<(P, usize)>,
    ) -> Result<(Self, usize)> {
        let device = sized(cpu, work);
        let (plan, bytes) = plan(device)?;
        Ok((Planned { alone: !core::ptr::eq(device, cpu), plan }, bytes))
    }

    /// The device phase 1 planned for: `cpu` itself, or the calling thread alone.
    pub(super) fn device<'c>(&self, cpu: &'c Cpu) -> &'c Cpu {
        if self.alone { calling_thread(cpu) } else { cpu }
    }
}

/// Planes handled by each of `tasks` tasks (at least 1, so chunk sizes are never zero).
pub(super) fn planes_per_task(planes: usize, tasks: usize) -> usize {
    planes.div_ceil(tasks.max(1)).max(1)
}

/// Rows per band when `units` (planes or blocks, fewer than `threads`) of `rows` rows each are
/// cut into bands so that every thread gets one (at least 1).
pub(super) fn rows_per_band(threads: usize, units: usize, rows: usize) -> usize {
    rows.div_ceil(threads.div_ceil(units.max(1)).min(rows).max(1)).max(1)
}

/// How many tasks each thread of a pool gets, where the units of work allow.
///
/// A tuning decision, never a result: any count stores the same bits (module doc). Several
/// tasks per thread let the pool balance itself: the threads take tasks as they become free, so
/// a thread slowed by whatever else its core runs does fewer of them, where with one task per
/// thread the call waits for the slowest. Four tasks per thread removed the wait on the
/// benchmark machine; more only added scratch (`benches/README.md`, "The measurements behind
/// the tuning constants").
pub(super) const TASKS_PER_THREAD: usize = 4;

/// Tasks for `units` units of work: [`TASKS_PER_THREAD`] per thread of a pool (one on a single
/// thread, which has nothing to balance), at most one per unit, and none (so no scratch) when
/// there are no units, however large they are ([`tasks_of_at_least`] with units of one).
pub(super) fn task_count(cpu: &Cpu, units: usize) -> usize {
    tasks_of_at_least(cpu, units, 1)
}

/// Tasks for `units` units of work, as [`task_count`], where a task beyond one per thread must
/// get at least `least` units (a kernel that works on `least` units at once): one per thread
/// and at most one per unit, then more, up to [`TASKS_PER_THREAD`] per thread, while each keeps
/// `least` units. The count is that of the [`runs`] the units make (9 units for 8 tasks make
/// runs of 2, so 5 tasks), so that no scratch is reserved for a task without units.
pub(super) fn tasks_of_at_least(cpu: &Cpu, units: usize, least: usize) -> usize {
    let threads = cpu.threads();
    let balanced = if threads > 1 { threads.saturating_mul(TASKS_PER_THREAD) } else { threads };
    let wanted = balanced.min(units.div_ceil(least.max(1))).max(threads.min(units));
    units.div_ceil(planes_per_task(units, wanted))
}

/// Consecutive runs of `units` units, one per task of `tasks`: [`planes_per_task`] units each
/// (the last run may be shorter).
pub(super) fn runs(units: usize, tasks: usize) -> impl Iterator<Item = Range<usize>> {
    let per = planes_per_task(units, tasks);
    (0..units).step_by(per).map(move |first| first..(first + per).min(units))
}

/// The `(n, 16-channel)` blocks of a `Bitmask` in [`runs`] of consecutive blocks, one per task
/// of `tasks`, each with its planes (consecutive too).
pub(super) fn block_runs(
    g: &MaxPoolGeometry,
    tasks: usize,
) -> impl Iterator<Item = (Range<usize>, Range<usize>)> {
    runs(g.n * g.channel_blocks(), tasks).map(move |run| {
        let planes = g.block_planes(run.start).start..g.block_planes(run.end - 1).end;
        (run, planes)
    })
}

/// How the forward splits planes into tasks: runs of whole planes, or, when there are fewer planes than
/// threads, bands of output rows of one plane (so batch 1 still uses every thread).
#[derive(Debug, Clone, Copy)]
pub(super) struct PlaneSplit {
    /// Planes per task (bands == 1) ...
    pub planes_per_task: usize,
    /// ... or bands of output rows per plane (planes_per_task == 1).
    pub bands: usize,
    /// Output rows per band.
    pub rows_per_band: usize,
    tasks: usize,
}

impl PlaneSplit {
    pub(super) fn of(cpu: &Cpu, planes: usize, rows: usize) -> Self {
        let threads = cpu.threads().max(1);
        if planes >= threads || rows <= 1 {
            // Beyond one per thread, tasks of a block of planes at least (the blocked kernel's).
            let tasks = tasks_of_at_least(cpu, planes, BLOCK);
            PlaneSplit {
                planes_per_task: planes_per_task(planes, tasks),
                bands: 1,
                rows_per_band: rows,
                tasks,
            }
        } else {
            let rows_per_band = rows_per_band(threads, planes, rows);
            let bands = rows.div_ceil(rows_per_band);
            PlaneSplit { planes_per_task: 1, bands, rows_per_band, tasks: planes * bands }
        }
    }

    pub(super) fn tasks(&self) -> usize {
        self.tasks
    }
}

/// How the flat-index backward ([`super::scatter`]) shares its planes among tasks.
#[derive(Debug)]
pub(super) enum ScatterSplit {
    /// `tasks` runs of `per_task` whole planes.
    Planes { tasks: usize, per_task: usize },
    /// As `Planes`, for planes of one gradient each (output 1x1, global pooling), which need no
    /// scratch.
    OneGradient { tasks: usize, per_task: usize },
    /// Every plane cut into the same bands of input rows, one task per band and plane.
    Bands(InputBands),
}

impl ScatterSplit {
    /// The split of `planes` on `cpu`, whose output row `o` has windows on input rows
    /// `windows[o]`.
    pub(super) fn of(cpu: &Cpu, planes: Planes, windows: &[Range<usize>]) -> Result<Self> {
        Ok(match InputBands::of(cpu.threads(), planes, windows)? {
            Some(bands) => ScatterSplit::Bands(bands),
            None => {
                let tasks = task_count(cpu, planes.count);
                let per_task = planes_per_task(planes.count, tasks);
                if planes.ho * planes.wo == 1 && planes.h * planes.w > 0 {
                    ScatterSplit::OneGradient { tasks, per_task }
                } else {
                    ScatterSplit::Planes { tasks, per_task }
                }
            }
        })
    }

    /// Tasks of the split of `planes` planes.
    pub(super) fn tasks(&self, planes: usize) -> usize {
        match self {
            ScatterSplit::Planes { tasks, .. } | ScatterSplit::OneGradient { tasks, .. } => *tasks,
            ScatterSplit::Bands(bands) => planes * bands.reads.len(),
        }
    }
}

/// Bands of `rows` input rows (the last may be shorter) and what each must read.
#[derive(Debug)]
pub(super) struct InputBands {
    pub rows: usize,
    /// The output rows band `b` reads: every row whose window reaches band `b`.
    pub reads: Vec<Range<usize>>,
}

impl InputBands {
    /// Bands for `planes` on `threads` threads, whose output row `o` has windows on input rows
    /// `windows[o]`, or `None` when whole planes keep every thread busy (or a window is empty,
    /// which no band could check).
    pub(super) fn of(threads: usize, planes: Planes, windows: &[Range<usize>]) -> Result<Option<Self>> {
        let Planes { count, h, ho, wo, .. } = planes;
        if count == 0 || count >= threads || h < 2 || wo == 0 || windows.len() != ho {
            return Ok(None);
        }
        if windows.iter().any(|w| w.is_empty()) {
            return Ok(None);
        }
        let rows = rows_per_band(threads, count, h);
        let mut reads = collect_exact(UNNAMED, "bands", h.div_ceil(rows), core::iter::repeat(0..0))?;
        for (o, window) in windows.iter().enumerate() {
            for read in &mut reads[window.start / rows..=(window.end - 1) / rows] {
                // Reads end past a row once they have one, so an end of 0 means none yet.
                let start = if read.end == 0 { o } else { read.start };
                *read = start..o + 1;
            }
        }
        Ok(Some(InputBands { rows, reads }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 3-D backward's windows, rows of a volume's plane of `D·H` rows: window `(od, oh)`
    /// starts at the first row read by it or by any output row after it, and ends after the last
    /// row read by it or by any output row before it (the smallest runs that hold the rows read
    /// and never go back). The rows read come from PyTorch's window rules, written out here:
    /// kernel 3 stride 2 padding 1 (the video case), ceil mode, a stride wider than the kernel
    /// (rows read by no window), dilation, windows that start together at the edge (padding 2,
    /// stride 1), a single slice, adaptive windows that overlap and that repeat (fewer inputs
    /// than outputs).
    #[test]
    fn volume_windows_are_the_monotone_hulls_of_the_rows_read() {
        fn pooled(len: usize, out: usize, [k, s, p, dil]: [usize; 4]) -> Vec<Vec<usize>> {
            let taps = |o: usize| (0..k).map(move |i| (o * s + i * dil).checked_sub(p));
            (0..out).map(|o| taps(o).flatten().filter(|&x| x < len).collect()).collect()
        }
        fn adaptive(len: usize, out: usize) -> Vec<Vec<usize>> {
            (0..out).map(|o| (o * len / out..((o + 1) * len).div_ceil(out)).collect()).collect()
        }
        fn check(what: &str, windows: &[Taps], h: usize, depths: &[Vec<usize>], rows: &[Vec<usize>]) {
            let mut read = Vec::new();
            for ds in depths {
                for rs in rows {
                    read.push(ds.iter().flat_map(|d| rs.iter().map(move |r| d * h + r)).collect::<Vec<_>>());
                }
            }
            assert_eq!(windows.len(), read.len(), "{what}");
            for (o, w) in windows.iter().enumerate() {
                let first = read[o..].iter().flatten().min().unwrap();
                let last = read[..=o].iter().flatten().max().unwrap();
                assert_eq!((w.step, w.span()), (1, *first..last + 1), "{what}: window {o}");
            }
        }
        let cases: [([usize; 3], [usize; 4], bool); 6] = [
            ([5, 6, 7], [3, 2, 1, 1], false),
            ([5, 6, 7], [3, 2, 1, 1], true),
            ([7, 8, 3], [2, 3, 0, 1], false),
            ([6, 7, 4], [2, 1, 1, 2], false),
            ([4, 5, 3], [5, 1, 2, 1], false),
            ([1, 4, 2], [1, 1, 0, 1], false),
        ];
        for (input @ [d, h, w], [k, s, p, dil], ceil) in cases {
            let params = crate::MaxPool3dParams::new([k; 3])
                .with_stride([s; 3])
                .with_padding([p; 3])
                .with_dilation([dil; 3])
                .with_ceil_mode(ceil);
            let g = MaxPool3dGeometry::checked("t", "x", &params, &[1, 2, d, h, w]).unwrap();
            let [od, oh, _] = g.sizes.output;
            let (windows, _) = volume_taps(&g).unwrap();
            let what = format!("{input:?} pooled by {:?}, ceil {ceil}", [k, s, p, dil]);
            check(&what, &windows, h, &pooled(d, od, [k, s, p, dil]), &pooled(h, oh, [k, s, p, dil]));
        }
        for (input @ [d, h, _], output @ [od, oh, _]) in [([7, 5, 4], [3, 2, 2]), ([3, 2, 5], [5, 4, 2])] {
            let sizes = VolumeSizes { n: 1, c: 2, input, output, ndim: 5 };
            let (windows, _) = volume_taps(&AdaptiveGeometry3d { sizes }).unwrap();
            let what = format!("{input:?} to {output:?}");
            check(&what, &windows, h, &adaptive(d, od), &adaptive(h, oh));
        }
    }

    /// Hand-counted: 2 planes of 10x10 pooled to 5x5.
    #[test]
    fn work_counts_forward_taps_and_a_quarter_of_backward_elements() {
        let p = Planes { count: 2, h: 10, w: 10, ho: 5, wo: 5 };
        assert_eq!(Work::Forward { planes: p, taps: 9 }.units(), 2 * 25 * 9);
        // (100 zeroed + 25 added) / 4 = 31 per plane.
        assert_eq!(Work::Backward(p).units(), 62);
    }

    /// The window bounds: 32 rows to 3 take at most ceil(32 / 3) + 1 = 12 rows (windows 0..11,
    /// 10..22, 21..32 have 11 or 12), 7 columns to 7 take 2; a 3x2 kernel takes 6 taps.
    #[test]
    fn forwards_count_their_largest_windows() {
        let a = AdaptiveGeometry { n: 1, c: 2, h: 32, w: 7, ho: 3, wo: 7, ndim: 4 };
        let Work::Forward { taps, .. } = Work::adaptive_forward(&a) else { panic!() };
        assert_eq!(taps, 12 * 2);
        let params = crate::MaxPool2dParams::new([3, 2]);
        let m = MaxPoolGeometry::checked("t", "x", &params, &[1, 2, 9, 8]).unwrap();
        let Work::Forward { planes, taps } = Work::max_pool_forward(&m) else { panic!() };
        assert_eq!((planes.count, planes.ho, planes.wo, taps), (2, 3, 4, 6));
    }

    /// Less work than the grain runs on the calling thread; the grain itself on the device.
    #[test]
    fn small_work_runs_on_the_calling_thread() {
        let two = Cpu::with_threads(2).unwrap();
        let one_tap = Planes { count: 1, h: 1, w: 1, ho: 1, wo: 1 };
        let work = |taps: u64| Work::Forward { planes: one_tap, taps: taps as usize };
        let below = sized(&two, work(GRAIN - 1));
        assert!(!core::ptr::eq(below, &two));
        assert!(matches!(below.parallelism(), super::super::Parallelism::Sequential));
        assert!(core::ptr::eq(sized(&two, work(GRAIN)), &two));
        // Grain 0: every call on the device, even one with no work.
        let eager = two.clone().with_grain(0);
        assert!(core::ptr::eq(sized(&eager, work(0)), &eager));
        // The default grain, 2^17 units as documented: a [1, 4, 9, 9] backward to 5x5
        // (4 * (81 + 25) / 4 = 104 units) and a forward of 2^17 - 1 taps stay on the calling
        // thread; 2^17 taps go to the pool.
        assert_eq!(Cpu::DEFAULT_GRAIN, 1 << 17);
        let tiny = Work::Backward(Planes { count: 4, h: 9, w: 9, ho: 5, wo: 5 });
        assert_eq!(tiny.units(), 104);
        let default = Cpu::with_threads(2).unwrap();
        assert!(!core::ptr::eq(sized(&default, tiny), &default));
        assert!(!core::ptr::eq(sized(&default, work((1 << 17) - 1)), &default));
        assert!(core::ptr::eq(sized(&default, work(1 << 17)), &default));
        // A custom grain is the threshold.
        let g100 = two.with_grain(100);
        assert!(!core::ptr::eq(sized(&g100, work(99)), &g100));
        assert!(core::ptr::eq(sized(&g100, work(100)), &g100));
    }

    /// Phase 1 plans for the device the work deserves, and phase 2 gets that device back from
    /// the plan: the calling thread below the grain, the device itself from it.
    #[test]
    fn a_plan_carries_its_device_to_phase_2() {
        let two = Cpu::with_threads(2).unwrap().with_grain(100);
        let one_tap = Planes { count: 1, h: 1, w: 1, ho: 1, wo: 1 };
        let work = |taps: usize| Work::Forward { planes: one_tap, taps };
        for (taps, alone) in [(99, true), (100, false)] {
            let (planned, bytes) =
                Planned::of(&two, work(taps), |cpu| Ok((core::ptr::eq(cpu, &two), 7))).unwrap();
            assert_eq!((planned.plan, bytes), (!alone, 7), "phase 1 planned for the device itself");
            assert_eq!(core::ptr::eq(planned.device(&two), &two), !alone, "phase 2's device");
        }
        let failed = Planned::<()>::of(&two, work(0), |_| {
            Err(crate::Error::WorkspaceTooSmall { op: "t", expected: 1, got: 0 })
        });
        assert!(failed.is_err());
    }

    /// Kernel 3, stride 2, padding 1 on 10 rows: output row `o` pools input rows
    /// `2o - 1 ..= 2o + 1`, clipped to `0..10`.
    fn stem_rows() -> Vec<Range<usize>> {
        let spans = [(0, 2), (1, 3), (3, 3), (5, 3), (7, 3)];
        let rows: Vec<_> =
            spans.iter().map(|&(start, count)| Taps { start, count, step: 1 }.span()).collect();
        assert_eq!(rows, vec![0..2, 1..4, 3..6, 5..8, 7..10]);
        rows
    }

    const ONE_PLANE: Planes = Planes { count: 1, h: 10, w: 4, ho: 5, wo: 2 };

    #[test]
    fn bands_read_every_row_whose_window_reaches_them() {
        // 2 threads: rows 0..5 and 5..10. Window 2 (rows 3..6) reaches both.
        let two = InputBands::of(2, ONE_PLANE, &stem_rows()).unwrap().unwrap();
        assert_eq!((two.rows, two.reads), (5, vec![0..3, 2..5]));
        // 3 threads: rows 0..4, 4..8, 8..10.
        let three = InputBands::of(3, ONE_PLANE, &stem_rows()).unwrap().unwrap();
        assert_eq!((three.rows, three.reads), (4, vec![0..3, 2..5, 4..5]));
    }

    #[test]
    fn whole_planes_when_they_keep_every_thread_busy() {
        let rows = stem_rows();
        assert!(InputBands::of(1, ONE_PLANE, &rows).unwrap().is_none());
        assert!(InputBands::of(2, Planes { count: 2, ..ONE_PLANE }, &rows).unwrap().is_none());
        assert!(InputBands::of(2, Planes { count: 0, ..ONE_PLANE }, &rows).unwrap().is_none());
        // A window without rows cannot be checked by any band.
        let mut empty = rows.clone();
        empty[4] = 7..7;
        assert!(InputBands::of(2, ONE_PLANE, &empty).unwrap().is_none());
        // A single input row has nothing to cut.
        let flat = Planes { h: 1, ho: 1, ..ONE_PLANE };
        assert!(InputBands::of(2, flat, core::slice::from_ref(&(0..1))).unwrap().is_none());
        // Windows that are not one per output row describe no band.
        assert!(InputBands::of(2, ONE_PLANE, &rows[..4]).unwrap().is_none());
    }

    /// Two input rows are already enough to cut: a band of one row each on 2 threads.
    #[test]
    fn two_input_rows_make_two_bands() {
        let two_rows = Planes { count: 1, h: 2, w: 4, ho: 2, wo: 2 };
        let bands = InputBands::of(2, two_rows, &[0..1, 1..2]).unwrap().unwrap();
        assert_eq!((bands.rows, bands.reads), (1, vec![0..1, 1..2]));
    }

    /// Fewer planes than threads: a forward cuts its plane into bands of output rows, one task
    /// each, so that batch 1 uses every thread; a single output row is not cut.
    /// (Threads need the `rayon` feature: without it every `Cpu` runs on the calling thread.)
    #[cfg(feature = "rayon")]
    #[test]
    fn a_forward_of_fewer_planes_than_threads_is_cut_into_bands() {
        let two = Cpu::with_threads(2).unwrap();
        let one_plane = PlaneSplit::of(&two, 1, 10);
        assert_eq!((one_plane.planes_per_task, one_plane.bands, one_plane.rows_per_band), (1, 2, 5));
        assert_eq!(one_plane.tasks(), 2);
        let one_row = PlaneSplit::of(&two, 1, 1);
        assert_eq!((one_row.bands, one_row.tasks()), (1, 1));
        // Enough planes: a task per thread, then more, up to TASKS_PER_THREAD (4) per thread,
        // while each keeps a block of 8 planes, as many as the runs of planes make.
        let busy = PlaneSplit::of(&two, 4, 10);
        assert_eq!((busy.planes_per_task, busy.bands, busy.tasks()), (2, 1, 2));
        // 20 planes: 3 blocks' worth, so 3 tasks, in runs of 7 (20 = 7 + 7 + 6).
        let some = PlaneSplit::of(&two, 20, 10);
        assert_eq!((some.planes_per_task, some.bands, some.tasks()), (7, 1, 3));
        // 100 planes: 8 tasks, runs of 13 (8 runs: 7 x 13 + 9).
        let many = PlaneSplit::of(&two, 100, 10);
        assert_eq!((many.planes_per_task, many.tasks()), (13, 8));
        let alone = PlaneSplit::of(&Cpu::sequential(), 20, 10);
        assert_eq!((alone.planes_per_task, alone.tasks()), (20, 1));
    }

    /// Up to 4 tasks per thread of a pool, at most one per unit, counted as the runs the units
    /// make, worked by hand for 2 threads: 9 units for 8 tasks are runs of 2, so 5 tasks; 100
    /// units, runs of 13, 8 tasks. One thread has one task, and no units no task.
    /// (Threads need the `rayon` feature: without it every `Cpu` runs on the calling thread.)
    #[cfg(feature = "rayon")]
    #[test]
    fn task_counts_are_the_runs_of_up_to_four_tasks_a_thread() {
        let two = Cpu::with_threads(2).unwrap();
        for (units, tasks) in [(0, 0), (1, 1), (3, 3), (8, 8), (9, 5), (17, 6), (100, 8)] {
            assert_eq!(task_count(&two, units), tasks, "{units} units");
            assert_eq!(runs(units, tasks).count(), tasks, "{units} units");
        }
        assert_eq!(task_count(&Cpu::sequential(), 100), 1);
        // Tasks of 8 units at least beyond one per thread: 20 units make 3, 12 make 2.
        assert_eq!(tasks_of_at_least(&two, 20, 8), 3);
        assert_eq!(tasks_of_at_least(&two, 12, 8), 2);
    }

    /// Planes of one gradient each (a 1x1 output: global pooling) take the split that needs no
    /// scratch, whatever their shape; planes with more gradients, or with no element to store
    /// one in, do not.
    /// (Threads need the `rayon` feature: without it every `Cpu` runs on the calling thread.)
    #[cfg(feature = "rayon")]
    #[test]
    fn global_pooling_takes_the_one_gradient_split() {
        let two = Cpu::with_threads(2).unwrap();
        let split = |h: usize, w: usize, ho: usize, wo: usize| {
            let planes = Planes { count: 4, h, w, ho, wo };
            let windows = vec![0..h; ho];
            ScatterSplit::of(&two, planes, &windows).unwrap()
        };
        for (h, w) in [(7, 7), (3, 7), (7, 3), (1, 1)] {
            assert!(
                matches!(split(h, w, 1, 1), ScatterSplit::OneGradient { tasks: 4, per_task: 1 }),
                "{h}x{w} to 1x1"
            );
        }
        assert!(matches!(split(7, 7, 1, 2), ScatterSplit::Planes { tasks: 4, per_task: 1 }));
        assert!(matches!(split(7, 7, 2, 1), ScatterSplit::Planes { .. }));
        assert!(matches!(split(0, 5, 1, 1), ScatterSplit::Planes { .. }));
    }

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
