//! The `Bitmask` backward as a gather: each input element of a channel sums the gradients of
//! the windows whose bit for that channel is set at the element's tap, in row-major output
//! order, and is written once (no zeroing pass). A window whose bit is clear adds `+0`, which
//! changes no sum (a sum that starts at `+0` is never `-0`), so the result is the scatter's, bit
//! for bit, whatever the mask holds (no bit, one, or several per window).
//!
//! An input row is computed a residue of the column stride at a time: columns
//! `iw = sw * m + r - pw` take tap `j = sw * t + r` of window `ow = m - t`, so for one output
//! row and one `t` the windows of consecutive `m` are consecutive: their mask words and
//! gradients are read as contiguous runs and added run by run (vectorised), in order of output
//! row, then of `t` downwards (window column upwards). The block's words for the rows' windows
//! serve all its channels while they are in cache. In the half types each channel keeps its
//! gradient rows widened to `f32` in a ring of as many rows as one input row reads, so a
//! gradient row is widened once, not once for every input row that reads it.
//!
//! Used when the blocks are narrow (`GATHERED_CHANNELS`), however many there are: the units of
//! work are whole blocks, or bands of input rows when there are fewer blocks than threads, which
//! need no bookkeeping between them (each element is written by one band). With many channels a
//! block, the set-up of each row's runs and the words read again for every channel make it
//! slower than decoding the block once for all its channels, which the other splits do.

use core::ops::Range;

use num_traits::Zero;

use super::{Block, Windows, widest_block};
use crate::alloc::collect_exact;
use crate::device::cpu::Cpu;
use crate::device::cpu::scatter::BadIndex;
use crate::device::cpu::schedule::{Taps, readers};
use crate::device::cpu::schedule::{rows_per_band, runs, task_count};
use crate::device::cpu::simd::{self, Isa};
use crate::device::cpu::{Carver, Sizer, task_share};
use crate::element::{AccFloat, PoolFloat};
use crate::error::{Error, Result, UNNAMED};
use crate::op::MaxPoolGeometry;

/// Phase-1 state of a gathered `Bitmask` backward: what every input row does (its column runs and
/// where its sums go), and how the `(n, 16-channel block, band of input rows)` units are
/// shared among tasks.
#[derive(Debug)]
pub(super) struct GatherPrepared {
    /// The output rows whose windows read each input row, in order.
    row_readers: Vec<Range<usize>>,
    columns: Columns,
    /// Input rows per band of a block: all of them unless there are fewer blocks than threads.
    rows: usize,
    tasks: usize,
    /// Rows of each channel's ring of widened gradient rows (the half types): the most output
    /// rows that read one input row; 0 for `f32` and `f64`, read where they are.
    ring_rows: usize,
    /// Each task's scratch, in `T::Acc`: the sums of one input row, for `f16` the row in column
    /// order ([`Columns::store`]), and for the half types a ring of widened gradient rows per
    /// channel of a block; in whole cache lines.
    scratch_per_task: usize,
    /// The instructions the tasks run with (module `simd`), detected once, in phase 1.
    isa: Isa,
}

/// The column structure shared by every input row. The columns `iw = sw * m + r - pw` of a
/// residue `r` of the column stride `sw` take tap `j = sw * t + r` of window `ow = m - t`: for
/// one window row, a run of consecutive windows and of consecutive sums. A row's sums are kept
/// residue after residue (each residue's columns in order).
#[derive(Debug)]
struct Columns {
    /// Each residue's runs, `t` downwards (window columns upwards): at most `kW` runs.
    runs: Vec<ColumnRun>,
    /// Each residue's sums, residue `c` (input columns `c, c + sW, ...`) at index `c`:
    /// `min(sW, W)` of them.
    stores: Vec<Range<usize>>,
    /// Sums per row: one per input column.
    sums: usize,
    /// The column stride.
    stride: usize,
}

/// Tap column `j` of the windows `ow..ow + len`, added to the row's sums from `sums_at`.
#[derive(Debug, Clone, Copy)]
struct ColumnRun {
    j: usize,
    ow: usize,
    len: usize,
    sums_at: usize,
}

impl Columns {
    /// The runs and stores of every input row, from the windows' column taps `cols`.
    fn of_windows(g: &MaxPoolGeometry, cols: &[(Taps, usize)]) -> Result<Self> {
        let ([_, kw], [_, sw]) = (g.params.kernel(), g.params.stride());
        // Input columns `c, c + sW, ...` for each residue `c` of the column stride that exists.
        let residues = sw.min(g.w);
        let mut sums = 0;
        let stores = (0..residues).map(|c| {
            let columns = (g.w - c).div_ceil(sw);
            let store = sums..sums + columns;
            sums += columns;
            store
        });
        let stores = collect_exact(UNNAMED, "residues", residues, stores)?;
        // The windows that read a residue's columns at window column `j`: the windows of
        // consecutive columns are consecutive (a window starts `sW` columns after the one before),
        // and the `j` of one residue differ by multiples of `sW`, so run `(c, j)` is kept at
        // `c * per_residue + j / sW`: O(kW + min(sW, W)) slots in all.
        let per_residue = kw.div_ceil(sw);
        let mut slots =
            collect_exact(UNNAMED, "column runs", residues * per_residue, core::iter::repeat(None))?;
        for (ow, (taps, first)) in cols.iter().enumerate() {
            for iw in taps.span() {
                let j = first + (iw - taps.start);
                let (c, m) = (iw % sw, iw / sw);
                match &mut slots[c * per_residue + j / sw] {
                    Some(ColumnRun { len, .. }) => *len += 1,
                    slot => *slot = Some(ColumnRun { j, ow, len: 1, sums_at: stores[c].start + m }),
                }
            }
        }
        // Each residue's runs by window column downwards: the windows of a column upwards.
        let runs = || slots.chunks(per_residue.max(1)).flat_map(|slots| slots.iter().rev().flatten());
        let runs = collect_exact(UNNAMED, "column runs", runs().count(), runs().copied())?;
        Ok(Columns { runs, stores, sums, stride: sw })
    }

    /// Stores a row's `sums` into its input row `gi`, each rounded once, in column order:
    /// `f32` and `f64` straight into the row, `bf16` rounded one by one on the way, `f16` put
    /// into `row` (one accumulator per column; not with one residue, whose sums are in column
    /// order already) and then rounded as one slice ([`simd::narrow`], F16C in the `isa` copy;
    /// [`Accumulate::ROUNDS_SLICES_FASTER`](crate::element::Accumulate)). The same bits
    /// every way.
    #[inline(always)]
    fn store<T: PoolFloat>(&self, isa: Isa, sums: &[T::Acc], row: &mut [T::Acc], gi: &mut [T]) {
        match T::as_acc_mut(gi) {
            Some(gi) => self.in_column_order(sums, gi, |sum| sum),
            None if T::ROUNDS_SLICES_FASTER => match &self.stores[..] {
                // One residue: the sums are in column order already.
                [one] => simd::narrow(isa, &sums[one.clone()], gi),
                _ => {
                    let row = &mut row[..gi.len()];
                    self.in_column_order(sums, row, |sum| sum);
                    simd::narrow(isa, row, gi);
                }
            },
            None => self.in_column_order(sums, gi, T::from_acc),
        }
    }

    /// `out[iw]` = `f(the sum of input column iw)`, from `sums` kept residue after residue.
    #[inline(always)]
    fn in_column_order<A: Copy, O>(&self, sums: &[A], out: &mut [O], f: impl Fn(A) -> O) {
        match &self.stores[..] {
            [one] => {
                for (out, &sum) in out.iter_mut().zip(&sums[one.clone()]) {
                    *out = f(sum);
                }
            }
            // Two residues (stride 2, or a wider stride over two columns): the sums of columns
            // 0, 2, ... and of columns 1, 3, ..., interleaved.
            [even, odd] => {
                let (even, odd) = (&sums[even.clone()], &sums[odd.clone()]);
                let (pairs, last) = out.as_chunks_mut::<2>();
                for ((pair, &e), &o) in pairs.iter_mut().zip(even).zip(odd) {
                    *pair = [f(e), f(o)];
                }
                if let ([out], Some(&e)) = (last, even.get(pairs.len())) {
                    *out = f(e);
                }
            }
            stores => {
                let sw = self.stride;
                for (c, at) in stores.iter().enumerate() {
                    for (out, &sum) in out[c..].chunks_mut(sw).zip(&sums[at.clone()]) {
                        out[0] = f(sum);
                    }
                }
            }
        }
    }
}

impl GatherPrepared {
    /// Plans the backward of `g`, whose windows are `windows`, and adds its scratch to `sizer`.
    pub(super) fn plan<T: PoolFloat>(
        cpu: &Cpu,
        g: &MaxPoolGeometry,
        windows: &Windows,
        sizer: &mut Sizer,
    ) -> Result<Self> {
        let row_taps = windows.rows.iter().map(|(taps, _)| *taps);
        let row_readers = readers(row_taps, g.h)?;
        let columns = Columns::of_windows(g, &windows.cols)?;
        let blocks = g.n * g.channel_blocks();
        let rows = rows_per_band(cpu.threads(), blocks, g.h);
        let tasks = task_count(cpu, blocks * g.h.div_ceil(rows));
        let ring_rows = match T::as_acc(&[]) {
            Some(_) => 0,
            None => row_readers.iter().map(ExactSizeIterator::len).max().unwrap_or(0),
        };
        let channels = widest_block(g);
        let rings = channels.checked_mul(ring_rows).and_then(|rows| rows.checked_mul(g.wo));
        // (`f16`: the sums of a row, and the row in column order.)
        let sums = if T::ROUNDS_SLICES_FASTER { 2 * columns.sums } else { columns.sums };
        let scratch = rings.and_then(|rings| rings.checked_add(sums));
        let scratch_per_task = task_share::<T::Acc>(scratch.ok_or_else(|| Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: format!("{ring_rows} widened gradient rows of {} for each of {channels} channels", g.wo),
        })?);
        sizer.region::<T::Acc>(tasks * scratch_per_task)?;
        let isa = cpu.isa();
        Ok(GatherPrepared { row_readers, columns, rows, tasks, ring_rows, scratch_per_task, isa })
    }
}

/// A band of input rows of one block: the rows of each of its channels' gradients.
struct Unit<'s, T> {
    block: Block,
    /// The planes of the block's channels.
    planes: Range<usize>,
    rows: Range<usize>,
    grad_input: Vec<&'s mut [T]>,
}

/// Runs a backward planned by [`GatherPrepared::plan`] for `windows`, its scratch carved from
/// `carver`.
/// The inner result is always `Ok`: any mask has a gradient (the forward's, one bit per
/// window; no bit adds nothing; several bits add the gradient at each). `(go, bits, gi)` are the
/// call's gradient, mask and input gradient.
pub(super) fn backward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    windows: &Windows,
    p: &GatherPrepared,
    (go, bits, gi): (&[T], &[i8], &mut [T]),
    carver: &mut Carver<'_>,
) -> Result<core::result::Result<(), BadIndex>> {
    let scratch = carver.region::<T::Acc>(p.tasks * p.scratch_per_task)?;
    let band = p.rows * g.w;
    let mut planes = gi.chunks_mut((g.h * g.w).max(1));
    let mut units = Vec::new();
    for b in 0..g.n * g.channel_blocks() {
        let block_planes = g.block_planes(b);
        let mut channels: Vec<_> =
            block_planes.clone().map(|_| planes.next().unwrap_or_default().chunks_mut(band.max(1))).collect();
        for first in (0..g.h).step_by(p.rows.max(1)) {
            let grad_input = channels.iter_mut().map(|c| c.next().unwrap_or_default()).collect();
            let rows = first..(first + p.rows).min(g.h);
            units.push(Unit { block: Block::at(g, b), planes: block_planes.clone(), rows, grad_input });
        }
    }
    let mut scratches = scratch.chunks_mut(p.scratch_per_task.max(1));
    let mut units = units.into_iter();
    let tasks: Vec<_> = runs(units.len(), p.tasks)
        .map(|run| (units.by_ref().take(run.len()).collect::<Vec<_>>(), scratches.next().unwrap_or_default()))
        .collect();
    cpu.for_each_task(tasks, |(units, scratch)| {
        let task = GatherTask { g, windows, p, units, go, bits, scratch };
        p.isa.enter(
            #[inline(always)]
            || task.run(),
        )
    });
    Ok(Ok(()))
}

/// One task's units, run in the plan's copy of the kernels (module `simd`): the kernels below,
/// all inlined, are compiled once for each instruction set and run in the copy for the
/// instructions the plan found. Same code, so the same results in every copy.
struct GatherTask<'a, 's, T: PoolFloat> {
    g: &'a MaxPoolGeometry,
    windows: &'a Windows,
    p: &'a GatherPrepared,
    units: Vec<Unit<'s, T>>,
    go: &'a [T],
    bits: &'a [i8],
    scratch: &'a mut [T::Acc],
}

impl<T: PoolFloat> GatherTask<'_, '_, T> {
    /// The task's units.
    #[inline(always)]
    fn run(self) {
        let GatherTask { g, windows, p, units, go, bits, scratch } = self;
        // The task's scratch: one row of sums, then (`f16`) the row in column order, then (the
        // half types) a ring per channel.
        let (sums, rest) = scratch.split_at_mut(p.columns.sums);
        let (row, rings) = rest.split_at_mut(if T::ROUNDS_SLICES_FASTER { p.columns.sums } else { 0 });
        let mut rings: Vec<_> = match p.ring_rows {
            0 => Vec::new(),
            slots => rings
                .chunks_mut((slots * g.wo).max(1))
                .map(|rows| Ring { rows, slots, wo: g.wo, filled: 0..0, isa: p.isa })
                .collect(),
        };
        for unit in units {
            gather_unit::<T>(g, windows, p, unit, (go, bits), (sums, &mut *row), &mut rings);
        }
    }
}

/// Every row of a unit, the block's channels one after the other for each row (so that the
/// mask words of the rows' windows, shared by the block's channels, stay in cache).
/// `(go, bits)` are the call's gradient and mask; `sums` holds a row's sums and `row_sums`
/// (`f16`) the row in column order ([`Columns::store`]); `rings` (the half types) a ring per
/// channel of the block.
#[inline(always)]
fn gather_unit<T: PoolFloat>(
    g: &MaxPoolGeometry,
    windows: &Windows,
    p: &GatherPrepared,
    unit: Unit<'_, T>,
    (go, bits): (&[T], &[i8]),
    (sums, row_sums): (&mut [T::Acc], &mut [T::Acc]),
    rings: &mut [Ring<'_, T::Acc>],
) {
    let (w, wo, positions) = (g.w, g.wo, g.positions());
    let Unit { block, planes, rows, mut grad_input } = unit;
    // The rings held another block's rows.
    for ring in rings.iter_mut() {
        ring.filled = 0..0;
    }
    for (local, ih) in rows.enumerate() {
        // In order of output row: a sum takes its additions in row-major output order.
        let ohs = &p.row_readers[ih];
        for (ch, (plane, gi)) in planes.clone().zip(&mut grad_input).enumerate() {
            let go = &go[plane * positions..(plane + 1) * positions];
            let go_rows = match T::as_acc(go) {
                Some(go) => GradRows { rows: go, slots: g.ho, wo },
                None => rings[ch].fill(go, ohs.clone()),
            };
            let row = Row {
                g,
                windows,
                columns: &p.columns,
                isa: p.isa,
                block,
                bit: 1 << ch,
                ih,
                ohs: ohs.clone(),
            };
            row.gather::<T>(go_rows, bits, &mut gi[local * w..(local + 1) * w], sums, &mut *row_sums);
        }
    }
}

/// A channel's gradient rows in `T::Acc`: row `oh` at slot `oh % slots`.
#[derive(Clone, Copy)]
struct GradRows<'a, A> {
    rows: &'a [A],
    slots: usize,
    wo: usize,
}

impl<'a, A> GradRows<'a, A> {
    #[inline(always)]
    fn row(self, oh: usize) -> &'a [A] {
        let at = oh % self.slots * self.wo;
        &self.rows[at..at + self.wo]
    }
}

/// A ring of `slots` widened gradient rows of one channel (the half types), row `oh` in slot
/// `oh % slots`: the input rows of a band read overlapping ranges of output rows, and each row
/// is widened once, not once for each input row that reads it.
struct Ring<'s, A> {
    rows: &'s mut [A],
    slots: usize,
    wo: usize,
    /// The rows the ring holds: at most `slots` consecutive ones.
    filled: Range<usize>,
    /// The copy of the kernels the task runs in, which widens the rows ([`simd::widen`]).
    isa: Isa,
}

impl<A: AccFloat> Ring<'_, A> {
    /// Makes the ring hold the rows `ohs` (at most `slots` of them) of the channel's gradient `go`,
    /// widening those it does not hold, and returns the rows it holds.
    #[inline(always)]
    fn fill<T: PoolFloat<Acc = A>>(&mut self, go: &[T], ohs: Range<usize>) -> GradRows<'_, A> {
        let Ring { slots, wo, isa, .. } = *self;
        if !(self.filled.start..=self.filled.end).contains(&ohs.start) {
            self.filled = ohs.start..ohs.start;
        }
        for oh in self.filled.end..ohs.end {
            let at = oh % slots * wo;
            simd::widen(isa, &go[oh * wo..(oh + 1) * wo], &mut self.rows[at..at + wo]);
        }
        // The last `slots` rows widened are the ones still in their slots.
        let end = self.filled.end.max(ohs.end);
        self.filled = self.filled.start.max(end.saturating_sub(slots))..end;
        GradRows { rows: self.rows, slots, wo }
    }
}

/// Input row `ih` of the channel whose mask bit is `bit` in `block`.
struct Row<'a> {
    g: &'a MaxPoolGeometry,
    windows: &'a Windows,
    columns: &'a Columns,
    /// The copy of the kernels the task runs in, which rounds the stored sums
    /// ([`simd::narrow`]).
    isa: Isa,
    block: Block,
    bit: u16,
    ih: usize,
    /// The output rows whose windows read `ih`, in order.
    ohs: Range<usize>,
}

impl Row<'_> {
    /// Writes the row's sums to `gi` (one row of the channel's gradient), from the channel's
    /// gradient rows `go_rows`, summing in `sums` (and, for `f16`, putting them in column order
    /// in `row`: [`Columns::store`]).
    #[inline(always)]
    fn gather<T: PoolFloat>(
        &self,
        go_rows: GradRows<'_, T::Acc>,
        bits: &[i8],
        gi: &mut [T],
        sums: &mut [T::Acc],
        row: &mut [T::Acc],
    ) {
        let Row { g, windows, columns, isa, block, bit, ih, ref ohs } = *self;
        let ([_, kw], wo) = (g.params.kernel(), g.wo);
        sums.fill(T::Acc::zero());
        for oh in ohs.clone() {
            // The window row at which `ih` is read: its first valid tap's, plus the distance.
            let (taps, first) = windows.rows[oh];
            let i = first + (ih - taps.start);
            let go_row = go_rows.row(oh);
            for &ColumnRun { j, ow, len, sums_at } in &columns.runs {
                let words = block.words(bits, i * kw + j, oh * wo + ow, len);
                add_run(&mut sums[sums_at..sums_at + len], &go_row[ow..ow + len], words, bit);
            }
        }
        columns.store::<T>(isa, sums, row, gi);
    }
}

/// Adds each gradient of `go` whose mask word (two bytes of `words`, little-endian) has `bit`
/// to its sum, and `+0` to the others: a mask on the bits, which the compiler vectorises.
#[inline(always)]
fn add_run<A: AccFloat>(sums: &mut [A], go: &[A], words: &[i8], bit: u16) {
    let (words, _) = words.as_chunks::<2>();
    for ((sum, &g), word) in sums.iter_mut().zip(go).zip(words) {
        *sum += g.kept_if(u16::from_le_bytes([word[0] as u8, word[1] as u8]) & bit != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::super::scatter_bits;
    use super::*;
    use crate::MaxPool2dParams;
    use crate::device::cpu::CacheLine;
    use crate::draws::Draws;
    use half::{bf16, f16};

    /// Gradient values with both zeros, infinities, a NaN, subnormals of every type, and values
    /// whose sums round (in the half types too).
    const VALUES: [f64; 12] = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.1,
        3.0e-3,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0e-40,
        6.0e-8,
        65504.0,
    ];

    /// An input row's sums are one per column, kept residue after residue of the column stride:
    /// residue `c`'s store holds the columns `iw < W` with `iw % sW == c`, counted one by one.
    #[test]
    fn columns_keep_one_sum_per_input_column_by_residue() {
        for (k, s, w) in (1..=4).flat_map(|k| (1..=5).flat_map(move |s| (k..=12).map(move |w| (k, s, w)))) {
            let params = MaxPool2dParams::new([1, k]).with_stride([1, s]);
            let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &[1, 1, 1, w]).unwrap();
            let columns = Columns::of_windows(&g, &Windows::of(&g).unwrap().cols).unwrap();
            assert_eq!(columns.sums, w, "k{k} s{s} w{w}");
            let mut at = 0;
            for (c, store) in columns.stores.iter().enumerate() {
                let count = (0..w).filter(|iw| iw % s == c).count();
                assert_eq!(store.clone(), at..at + count, "k{k} s{s} w{w}, residue {c}");
                at += count;
            }
            assert_eq!(columns.stores.len(), s.min(w), "k{k} s{s} w{w}");
        }
    }

    /// A ring holds, after each fill, every row asked for, widened from the gradient: rows that
    /// slide forward (kept rows not widened again), a jump ahead past the ring, a step back to
    /// rows whose slots were reused, and no rows. The ring's rows are compared with each
    /// gradient row converted on its own.
    #[test]
    fn a_ring_holds_the_rows_asked_for_however_they_move() {
        let (ho, wo, slots) = (12, 5, 3);
        let go: Vec<bf16> = (0..ho * wo).map(|e| bf16::from_f32(e as f32 - 7.25)).collect();
        let mut rows = vec![f32::NAN; slots * wo];
        let mut ring = Ring { rows: &mut rows, slots, wo, filled: 0..0, isa: Isa::best() };
        for ohs in [0..2, 0..3, 1..4, 2..5, 4..5, 5..5, 5..7, 10..12, 3..6, 0..1, 11..12] {
            let held = ring.fill(&go, ohs.clone());
            for oh in ohs.clone() {
                let want: Vec<f32> = go[oh * wo..(oh + 1) * wo].iter().map(|v| v.to_f32()).collect();
                assert_eq!(held.row(oh), &want[..], "row {oh} after filling {ohs:?}");
            }
            assert!(
                ring.filled.start <= ohs.start && ohs.end <= ring.filled.end,
                "{ohs:?}: {:?}",
                ring.filled
            );
            assert!(ring.filled.len() <= slots, "{ohs:?}: {:?}", ring.filled);
        }
    }

    /// A row the ring holds is not widened again: changed in the gradient after it was widened,
    /// it keeps its first value while the ring holds it, and is read anew once its slot was
    /// reused.
    #[test]
    fn a_ring_widens_each_row_once_while_it_holds_it() {
        let (wo, slots) = (2, 3);
        let mut go = vec![f16::ONE; 8 * wo];
        let mut rows = vec![f32::NAN; slots * wo];
        let mut ring = Ring { rows: &mut rows, slots, wo, filled: 0..0, isa: Isa::best() };
        ring.fill(&go, 0..3);
        go[wo..2 * wo].fill(f16::from_f32(2.0));
        assert_eq!(ring.fill(&go, 1..4).row(1), [1.0, 1.0]);
        ring.fill(&go, 4..5);
        assert_eq!(ring.fill(&go, 1..2).row(1), [2.0, 2.0]);
    }

    /// With fewer blocks than threads, a block's input rows are cut into bands so that every
    /// thread gets one; otherwise blocks stay whole, in runs of them, up to 4 per thread
    /// (`TASKS_PER_THREAD`). (Rows a band and tasks, worked by hand: 64 rows of 1 block on 2
    /// threads are 2 bands of 32; on 7 threads, 7 bands of 10 (the last of 4); 2 blocks on 3
    /// threads, 2 bands of 32 each, 4 units, a task each; 3 blocks on 2 threads, 3 tasks; 32
    /// blocks on 2 threads, 8 tasks of 4; 2 blocks of 3 rows on 7 threads, bands of a row, 6
    /// tasks.)
    /// (Threads need the `rayon` feature: without it every `Cpu` runs on the calling thread.)
    #[cfg(feature = "rayon")]
    #[test]
    fn fewer_blocks_than_threads_are_cut_into_a_band_for_every_thread() {
        let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
        for (shape, threads, rows, tasks) in [
            ([1, 1, 64, 64], 2, 32, 2),
            ([1, 3, 64, 64], 7, 10, 7),
            ([2, 4, 64, 64], 3, 32, 4),
            ([3, 1, 64, 64], 2, 64, 3),
            ([32, 3, 64, 64], 2, 64, 8),
            ([1, 2, 64, 64], 1, 64, 1),
            // Fewer rows than threads: a band a row, a task a band.
            ([1, 1, 4, 64], 7, 1, 4),
            ([2, 1, 3, 64], 7, 1, 6),
        ] {
            let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape).unwrap();
            let cpu = Cpu::with_threads(threads).unwrap();
            let windows = Windows::of(&g).unwrap();
            let p = GatherPrepared::plan::<f32>(&cpu, &g, &windows, &mut Sizer::new()).unwrap();
            assert_eq!((p.rows, p.tasks), (rows, tasks), "{shape:?} on {threads} threads");
        }
    }

    /// The gather equals the bit-by-bit scatter (the reference kernel) element for element, bits
    /// and all (NaN as NaN), for any mask bytes (no bit, one or several per window, bits in
    /// padding), every element type, strides 1 to 4 in each axis, kernels 1 to 4, paddings,
    /// ceil mode, 1 to 33 channels (partial blocks), and bands of every height.
    #[test]
    fn gather_equals_the_bit_by_bit_scatter() {
        fn case<T: PoolFloat>(draws: &mut Draws, cpus: &[Cpu]) {
            let (kh, kw) = (1 + draws.below(4), 1 + draws.below(4));
            let params = MaxPool2dParams::new([kh, kw])
                .with_stride([1 + draws.below(4), 1 + draws.below(4)])
                .with_padding([draws.below(kh / 2 + 1), draws.below(kw / 2 + 1)])
                .with_ceil_mode(draws.below(2) == 1);
            let shape = [
                1 + draws.below(2),
                [1, 3, 16, 17, 33][draws.below(5)],
                kh + draws.below(12),
                kw + draws.below(12),
            ];
            let Ok(g) = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape) else { return };
            let bytes = g.bytes().unwrap();
            let bits: Vec<i8> = (0..bytes).map(|_| draws.below(256) as u8 as i8).collect();
            let go: Vec<T> = (0..g.planes() * g.positions())
                .map(|_| T::round_from_f64(VALUES[draws.below(VALUES.len())]))
                .collect();
            // The reference, block by block.
            let (hw, positions) = (g.h * g.w, g.positions());
            let windows = Windows::of(&g).unwrap();
            let mut want = vec![T::default(); g.planes() * hw];
            let mut acc = vec![T::Acc::zero(); 16 * hw];
            for b in 0..g.n * g.channel_blocks() {
                let planes = g.block_planes(b);
                let go = &go[planes.start * positions..planes.end * positions];
                let gi = &mut want[planes.start * hw..planes.end * hw];
                scatter_bits(&g, &windows, &Block::at(&g, b), go, &bits, gi, &mut acc);
            }
            for cpu in cpus {
                let mut sizer = Sizer::new();
                let p = GatherPrepared::plan::<T>(cpu, &g, &windows, &mut sizer).unwrap();
                let mut memory =
                    vec![<CacheLine as bytemuck::Zeroable>::zeroed(); sizer.total().div_ceil(64)];
                let mut got = vec![T::round_from_f64(7.0); want.len()];
                let mut carver = Carver::new(&mut memory);
                backward(cpu, &g, &windows, &p, (&go, &bits, &mut got), &mut carver).unwrap().unwrap();
                for (e, (got, want)) in got.iter().zip(&want).enumerate() {
                    let same = bytemuck::bytes_of(got) == bytemuck::bytes_of(want)
                        || (num_traits::Float::is_nan(got.to_acc())
                            && num_traits::Float::is_nan(want.to_acc()));
                    assert!(
                        same,
                        "{:?} {params:?} {shape:?}, {} rows a band: element {e}: {got:?}, want {want:?}",
                        T::DTYPE,
                        p.rows
                    );
                }
            }
        }
        let cpus = [1, 2, 3, 7].map(|t| Cpu::with_threads(t).unwrap());
        let mut draws = Draws::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..150 {
            case::<f32>(&mut draws, &cpus);
            case::<f64>(&mut draws, &cpus);
            case::<f16>(&mut draws, &cpus);
            case::<bf16>(&mut draws, &cpus);
        }
    }
}
