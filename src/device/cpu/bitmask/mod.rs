//! The `Bitmask` backward on the CPU: the mask is read in `(n, 16-channel)` blocks. Blocks of
//! at most 4 channels (which a decoder would take a channel at a time) are gathered
//! ([`gather`]): each input element sums its gradient from the bits, in bands of input rows.
//! Wider blocks are decoded into every channel's window offset (without a branch per bit) and
//! scattered channel by channel like the flat-index backward; a block that is not one bit per
//! channel and position takes a bit-by-bit kernel. With fewer wide blocks than threads, blocks
//! are decoded in bands of output rows into flat indices, which the shared scatter kernel then
//! adds.

mod gather;

use core::ops::Range;

use num_traits::Zero;

use super::Cpu;
use super::scatter::prepare_max_pool as prepare_scatter;
use super::scatter::{self, BadIndex, Direct, Rounded, ScatterPrepared, Sums};
use super::schedule::{Taps, max_pool_taps};
use super::schedule::{block_runs, rows_per_band, task_count};
use super::simd::Isa;
use super::{Carver, Sizer, task_share};
use crate::alloc::collect_exact;
use crate::element::PoolFloat;
use crate::error::{Result, UNNAMED};
use crate::mask;
use crate::op::MaxPoolGeometry;

/// Phase-1 state of a `Bitmask` backward: the windows, how blocks are shared among tasks, and
/// their scratch.
#[derive(Debug)]
pub struct BitmaskPrepared {
    windows: Windows,
    split: BlockSplit,
    /// Tasks with f32 accumulators ...
    acc_tasks: usize,
    /// ... of a block's planes ([`widest_block`]) plus one channel's gradients each for the
    /// half types, else 0 (sums go to the output); in whole cache lines ([`task_share`]).
    acc_per_task: usize,
    /// The instructions the `f16` sums are rounded with ([`Rounded::settled`]).
    isa: Isa,
}

/// How the `(n, 16-channel block)`s of a `Bitmask` backward are shared among tasks.
#[derive(Debug)]
enum BlockSplit {
    /// Runs of whole blocks, one run per task: each block is decoded and scattered while its
    /// offsets are in cache, into `taps_per_task` bytes ([`widest_block`] per output position, in
    /// whole cache lines; 0 without a decoder).
    Blocks { tasks: usize, taps_per_task: usize },
    /// Fewer blocks than threads: each block is decoded in bands of `rows` output rows, one task
    /// per band, into the flat index of every channel and position (the `I32Argmax` values the
    /// same forward would write); those are then scattered by the flat-index kernel (over
    /// planes, or bands of a plane's input rows). Blocks that do not decode take the bit-by-bit
    /// kernel afterwards, one at a time.
    Bands { rows: usize, scatter: ScatterPrepared },
    /// Blocks of at most [`GATHERED_CHANNELS`] channels: every input element gathers its sum,
    /// in bands of input rows of each block (whole blocks unless there are fewer blocks than
    /// threads), shared among tasks in runs.
    Gather(gather::GatherPrepared),
}

/// Blocks of at most this many channels are gathered rather than decoded, however many blocks
/// there are. The decoder takes such blocks a channel at a time (`decode_few`), while the
/// gather's cost per channel does not depend on the block; a full block of 16 channels is
/// decoded, which serves its 16 channels at once. Both give the same sums, bit for bit, so any
/// value is correct; this one is where gathering stops paying on the benchmark machine
/// (`benches/README.md`, "The measurements behind the tuning constants").
const GATHERED_CHANNELS: usize = 4;

impl BlockSplit {
    /// Band tasks and decoded bytes per task of [`BlockSplit::Bands`].
    fn bands(g: &MaxPoolGeometry, rows: usize) -> (usize, usize) {
        (g.n * g.channel_blocks() * g.ho.div_ceil(rows), widest_block(g) * rows * g.wo)
    }
}

/// The channels of the widest block (the first): at most 16.
///
/// The decoded offsets of a block take a slot of one byte per channel at each output position
/// (channel `ch` of the `q`-th decoded position at byte `channels * q + ch`), so at most this
/// many bytes per position; and the half types sum a block in at most this many f32 planes.
fn widest_block(g: &MaxPoolGeometry) -> usize {
    g.block_planes(0).len()
}

/// The valid taps of every output row and column, with the window offset of the first one.
#[derive(Debug)]
pub struct Windows {
    rows: Vec<(Taps, usize)>,
    cols: Vec<(Taps, usize)>,
    /// The input index of window offset 0 is `row_origins[oh] + col_origins[ow]` (wrapping:
    /// below zero for windows that start in padding).
    row_origins: Vec<usize>,
    col_origins: Vec<usize>,
    /// The output columns in the runs that are decoded together ([`column_runs`]).
    col_runs: Vec<Range<usize>>,
    /// What the decoder needs; none when a window has more than [`MAX_TAPS`] taps.
    decoding: Option<Decoding>,
}

/// The window offsets of a decodable mask.
#[derive(Debug)]
struct Decoding {
    /// `i·W + j` for each window offset `k = i·kW + j` (zero past `kH·kW`): the input index of
    /// tap `k` relative to the window's origin. Indexed by a byte, so never out of bounds.
    tap_offsets: Box<[usize; MAX_TAPS]>,
    /// Binary digits of the largest offset.
    digits: usize,
}

impl Windows {
    /// (None when there are no planes: the output is empty, whatever its other sizes.)
    fn of(g: &MaxPoolGeometry) -> Result<Self> {
        let p = &g.params;
        // (Dilation 1: checked for the mask operations in phase 1.)
        let (row_taps, col_taps) = max_pool_taps(g)?;
        let with_first = |taps: Vec<Taps>, a: usize| {
            let (s, pad) = (p.stride()[a], p.padding()[a]);
            // The first valid tap's offset in the window: start - (o*s - pad) >= 0.
            let first = taps.iter().enumerate().map(|(o, t)| (*t, (t.start + pad).saturating_sub(o * s)));
            collect_exact(UNNAMED, "windows", taps.len(), first)
        };
        let (rows, cols) = (with_first(row_taps, 0)?, with_first(col_taps, 1)?);
        let origins = |taps: &[(Taps, usize)], scale: usize| {
            let origins = taps.iter().map(|(t, first)| (t.start.wrapping_sub(*first)).wrapping_mul(scale));
            collect_exact(UNNAMED, "windows", taps.len(), origins)
        };
        let [kh, kw] = p.kernel();
        let decoding = (kh * kw <= MAX_TAPS).then(|| {
            let mut tap_offsets = Box::new([0; MAX_TAPS]);
            for (k, offset) in tap_offsets[..kh * kw].iter_mut().enumerate() {
                *offset = (k / kw) * g.w + k % kw;
            }
            Decoding { tap_offsets, digits: (kh * kw).next_power_of_two().trailing_zeros() as usize }
        });
        let runs = column_runs(&cols).count();
        let col_runs = collect_exact(UNNAMED, "windows", runs, column_runs(&cols))?;
        Ok(Windows {
            row_origins: origins(&rows, g.w)?,
            col_origins: origins(&cols, 1)?,
            col_runs,
            decoding,
            rows,
            cols,
        })
    }
}

impl BitmaskPrepared {
    /// Plans the backward of `g` and adds its scratch to `sizer`.
    pub(super) fn plan<T: PoolFloat>(cpu: &Cpu, g: &MaxPoolGeometry, sizer: &mut Sizer) -> Result<Self> {
        let windows = Windows::of(g)?;
        // Half types: a block's planes of f32 sums (the bit-by-bit kernel sums a block at once)
        // and one channel's widened gradients (the decoded scatter).
        let acc_per_task = if T::as_acc_mut(&mut []).is_some() {
            0
        } else {
            task_share::<T::Acc>(widest_block(g) * g.h * g.w + g.positions())
        };
        let (threads, blocks) = (cpu.threads(), g.n * g.channel_blocks());
        let flat_fits = i32::try_from(g.h * g.w).is_ok();
        let few_blocks = blocks > 0 && blocks < threads;
        let (split, acc_tasks) = if blocks > 0 && widest_block(g) <= GATHERED_CHANNELS {
            (BlockSplit::Gather(gather::GatherPrepared::plan::<T>(cpu, g, &windows, sizer)?), 0)
        } else if few_blocks && windows.decoding.is_some() && flat_fits {
            let rows = rows_per_band(threads, blocks, g.ho);
            let (tasks, taps_per_task) = BlockSplit::bands(g, rows);
            sizer.region::<T::Acc>(acc_per_task)?;
            sizer.region::<i32>(g.planes() * g.positions())?;
            sizer.region::<i8>(tasks * taps_per_task)?;
            (BlockSplit::Bands { rows, scatter: prepare_scatter::<T>(cpu, g, sizer)? }, 1)
        } else {
            let tasks = task_count(cpu, blocks);
            let taps_per_task = if windows.decoding.is_some() {
                task_share::<u8>(widest_block(g) * g.positions())
            } else {
                0
            };
            sizer.region::<T::Acc>(tasks * acc_per_task)?;
            sizer.region::<i8>(tasks * taps_per_task)?;
            (BlockSplit::Blocks { tasks, taps_per_task }, tasks)
        };
        Ok(BitmaskPrepared { windows, split, acc_tasks, acc_per_task, isa: cpu.isa() })
    }
}

/// Runs a backward planned by [`BitmaskPrepared::plan`], its scratch carved from `carver`. The
/// inner result is the shared scatter's (with fewer blocks than threads), which decoded indices
/// never fail.
pub(super) fn backward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    p: &BitmaskPrepared,
    go: &[T],
    bits: &[i8],
    gi: &mut [T],
    carver: &mut Carver<'_>,
) -> Result<core::result::Result<(), BadIndex>> {
    let acc = carver.region::<T::Acc>(p.acc_tasks * p.acc_per_task)?;
    match &p.split {
        &BlockSplit::Blocks { tasks, taps_per_task } => {
            let taps = bytemuck::cast_slice_mut(carver.region::<i8>(tasks * taps_per_task)?);
            by_blocks(cpu, g, p, tasks, (go, bits, gi), (acc, taps));
            Ok(Ok(()))
        }
        BlockSplit::Bands { rows, scatter } => {
            let flat = carver.region::<i32>(g.planes() * g.positions())?;
            let (tasks, taps_per_task) = BlockSplit::bands(g, *rows);
            let taps = bytemuck::cast_slice_mut(carver.region::<i8>(tasks * taps_per_task)?);
            let scratch = scatter.scratch::<T>(carver)?;
            let undecoded = decode_to_indices(cpu, g, &p.windows, *rows, bits, flat, taps);
            let checked = scatter::scatter(cpu, scatter, go, flat, gi, scratch, false);
            for b in undecoded {
                let block = Block::at(g, b);
                let planes = g.block_planes(b);
                let go = &go[planes.start * g.positions()..planes.end * g.positions()];
                let gi = &mut gi[planes.start * g.h * g.w..planes.end * g.h * g.w];
                scatter_bits(g, &p.windows, &block, go, bits, gi, acc);
            }
            Ok(checked)
        }
        BlockSplit::Gather(gather) => gather::backward(cpu, g, &p.windows, gather, (go, bits, gi), carver),
    }
}

struct BlockTask<'s, T: PoolFloat> {
    blocks: core::ops::Range<usize>,
    go: &'s [T],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
    taps: &'s mut [u8],
}

/// Scatters through a `Bitmask`, one `(n, 16-channel block)` at a time; each of `tasks` tasks
/// owns a run of consecutive blocks (consecutive planes of `grad_input`). `(go, bits, gi)` are
/// the call's gradient, mask and input gradient; `(acc, taps)` the workspace's scratch.
fn by_blocks<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    p: &BitmaskPrepared,
    tasks: usize,
    (go, bits, gi): (&[T], &[i8], &mut [T]),
    (acc, taps): (&mut [T::Acc], &mut [u8]),
) {
    let (hw, positions) = (g.h * g.w, g.positions());
    let mut accs = acc.chunks_mut(p.acc_per_task.max(1));
    let mut tapss = taps.chunks_mut((taps.len() / tasks.max(1)).max(1));
    let (mut gi_rest, mut go_rest) = (gi, go);
    let mut list = Vec::with_capacity(tasks);
    for (blocks, planes) in block_runs(g, tasks) {
        let (gi_head, gi_tail) = core::mem::take(&mut gi_rest).split_at_mut(planes.len() * hw);
        let (go_head, go_tail) = go_rest.split_at(planes.len() * positions);
        (gi_rest, go_rest) = (gi_tail, go_tail);
        list.push(BlockTask {
            blocks,
            go: go_head,
            gi: gi_head,
            acc: accs.next().unwrap_or(&mut []),
            taps: tapss.next().unwrap_or(&mut []),
        });
    }
    cpu.for_each_task(list, |t| {
        let (mut gi, mut go) = (t.gi, t.go);
        for b in t.blocks {
            let block = Block::at(g, b);
            let (gi_block, gi_tail) = gi.split_at_mut(block.channels * hw);
            let (go_block, go_tail) = go.split_at(block.channels * positions);
            (gi, go) = (gi_tail, go_tail);
            if decode_rows(g, &p.windows, &block, bits, 0..g.ho, &mut *t.taps) {
                let (go, gi) = (go_block, gi_block);
                scatter_decoded(g, &p.windows, block.channels, (go, &*t.taps, gi), &mut *t.acc, p.isa);
            } else {
                scatter_bits(g, &p.windows, &block, go_block, bits, gi_block, &mut *t.acc);
            }
        }
    });
}

/// One `(n, 16-channel block)` of the mask.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// Channels of the block that exist (16, or fewer in the last block), and their bits.
    channels: usize,
    valid: u16,
    /// Byte offset of the block's word `(k = 0, p = 0)`, and from one `k` to the next.
    first_word: usize,
    row_bytes: usize,
}

impl Block {
    /// Block `b = n * channel_blocks + c1`.
    fn at(g: &MaxPoolGeometry, b: usize) -> Self {
        let (n, c1) = (b / g.channel_blocks(), b % g.channel_blocks());
        let channels = g.block_planes(b).len();
        Block {
            channels,
            valid: if channels >= 16 { u16::MAX } else { (1u16 << channels) - 1 },
            first_word: mask::word_offset(g, n, c1, 0, 0),
            row_bytes: mask::word_offset(g, 0, 0, 1, 0),
        }
    }

    /// The bytes of the words `(k, p..p + len)`. Phase 1 checked the mask's length against its
    /// shape, and `(k, p)` are those of a window that exists.
    #[inline(always)]
    fn words<'b>(&self, bits: &'b [i8], k: usize, p: usize, len: usize) -> &'b [i8] {
        let first = self.first_word + k * self.row_bytes + 2 * p;
        &bits[first..first + 2 * len]
    }

    /// The bits of the existing channels in word `(k, p)`.
    #[inline(always)]
    fn word(&self, bits: &[i8], k: usize, p: usize) -> u16 {
        mask::read_word(bits, self.first_word + k * self.row_bytes + 2 * p) & self.valid
    }
}

/// The output columns in runs of up to [`LANES`] neighbours whose windows have the same valid
/// offsets (every interior column), decoded together.
fn column_runs(cols: &[(Taps, usize)]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut ow = 0;
    core::iter::from_fn(move || {
        let (c, j0) = cols.get(ow)?;
        let same = cols[ow..].iter().take(LANES).take_while(|(t, j)| t.count == c.count && j == j0);
        let run = ow..ow + same.count();
        ow = run.end;
        Some(run)
    })
}

/// The valid offsets `k = i * kw + j` of the windows of a run: `i` in `rows`, `j` in `cols`.
struct ValidOffsets {
    rows: Range<usize>,
    cols: Range<usize>,
    kw: usize,
}

impl ValidOffsets {
    /// The offsets, a window row at a time.
    #[inline(always)]
    fn by_rows(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.rows.clone().map(|i| i * self.kw + self.cols.start..i * self.kw + self.cols.end)
    }
}

/// Decodes output rows `rows` of the block into `taps` (from the first of `rows`, a slot per
/// output position of each channel's window offset, [`widest_block`]) when every channel has
/// exactly one bit among the valid offsets of every position, as every forward writes it. False
/// otherwise (and without a decoder: windows of more than 256 taps).
///
/// Positions are decoded in runs of up to [`LANES`] neighbours of one output row whose windows
/// have the same valid offsets (every interior position of a row), so that the words of one
/// offset are read as one contiguous run.
fn decode_rows(
    g: &MaxPoolGeometry,
    windows: &Windows,
    block: &Block,
    bits: &[i8],
    rows: Range<usize>,
    taps: &mut [u8],
) -> bool {
    let Some(Decoding { digits, .. }) = windows.decoding else { return false };
    // Phase 1 gave every task slots for its rows. (Fewer would not change a result, only send
    // blocks to the bit-by-bit kernel: this is the one place a sizing mistake would show.)
    debug_assert!(
        taps.len() >= block.channels * rows.len() * g.wo,
        "{} decoding slots for {} rows of {} channels",
        taps.len(),
        rows.len(),
        block.channels
    );
    let kw = g.params.kernel()[1];
    let first = rows.start * g.wo;
    for (oh, (r, i0)) in windows.rows.iter().enumerate().take(rows.end).skip(rows.start) {
        for run in &windows.col_runs {
            let (c, j0) = &windows.cols[run.start];
            let (lanes, p) = (run.len(), oh * g.wo + run.start);
            let ks = ValidOffsets { rows: *i0..i0 + r.count, cols: *j0..j0 + c.count, kw };
            let slots = block.channels * (p - first)..block.channels * (p - first + lanes);
            let Some(out) = taps.get_mut(slots) else { return false };
            if !decode_run(block, bits, p, lanes, ks, digits, out) {
                return false;
            }
        }
    }
    true
}

/// Decodes every block in bands of `rows` output rows, one task per block and band, into
/// `flat`: each channel's flat input index `ih * W + iw` per position (plane-major, as the
/// `I32Argmax` layout holds them). Returns the blocks that do not decode; their values are left
/// 0 (inside every plane), for the bit-by-bit kernel to redo.
fn decode_to_indices(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    windows: &Windows,
    rows: usize,
    bits: &[i8],
    flat: &mut [i32],
    taps: &mut [u8],
) -> Vec<usize> {
    let (positions, band) = (g.positions(), rows * g.wo);
    let blocks = g.n * g.channel_blocks();
    let Some(Decoding { tap_offsets, .. }) = &windows.decoding else { return (0..blocks).collect() };
    let mut planes = flat.chunks_mut(positions.max(1));
    let mut tapss = taps.chunks_mut(widest_block(g) * band.max(1));
    let mut tasks = Vec::with_capacity(blocks * g.ho.div_ceil(rows));
    for b in 0..blocks {
        let block = Block::at(g, b);
        let mut channels: Vec<_> =
            (0..block.channels).map(|_| planes.next().unwrap_or_default().chunks_mut(band.max(1))).collect();
        for oh in (0..g.ho).step_by(rows) {
            let outs: Vec<&mut [i32]> = channels.iter_mut().map(|c| c.next().unwrap_or_default()).collect();
            tasks.push((b, block, oh..(oh + rows).min(g.ho), outs, tapss.next().unwrap_or_default()));
        }
    }
    let decoded = cpu.map_tasks(tasks, |(b, block, rows, mut outs, taps)| {
        if !decode_rows(g, windows, &block, bits, rows.clone(), taps) {
            outs.iter_mut().for_each(|out| out.fill(0));
            return Some(b);
        }
        let wo = g.wo.max(1);
        for (ch, out) in outs.iter_mut().enumerate() {
            let taps_by_rows = taps.chunks_exact(block.channels * wo);
            for ((&row, out), taps) in
                windows.row_origins[rows.clone()].iter().zip(out.chunks_mut(wo)).zip(taps_by_rows)
            {
                let slots = taps.chunks_exact(block.channels);
                for ((value, &col), slot) in out.iter_mut().zip(&windows.col_origins).zip(slots) {
                    // A decoded offset is a valid tap of its window: inside the plane, whose size
                    // fits i32.
                    let flat = row.wrapping_add(col).wrapping_add(tap_offsets[usize::from(slot[ch])]);
                    *value = i32::try_from(flat).unwrap_or(-1);
                }
            }
        }
        None
    });
    let mut undecoded: Vec<usize> = decoded.into_iter().flatten().collect();
    undecoded.dedup();
    undecoded
}

/// Positions decoded together.
const LANES: usize = 16;

/// Decodes `lanes` (at most [`LANES`]) consecutive positions from `p` whose valid window offsets
/// are `ks` into `out`, a slot of a byte per channel for each position, without a branch per
/// bit: the binary digits of each channel's offset are gathered as 16-channel words (`digit[j]`
/// = OR of the words of the offsets with bit `j` set), then spread to one byte per channel.
/// Blocks of at most 4 channels take [`decode_few`]. False if a channel has no bit or more than
/// one.
fn decode_run(
    block: &Block,
    bits: &[i8],
    p: usize,
    lanes: usize,
    ks: ValidOffsets,
    digits: usize,
    out: &mut [u8],
) -> bool {
    match block.channels {
        1 => return decode_few::<1>(block, bits, p, lanes, ks, out),
        2 => return decode_few::<2>(block, bits, p, lanes, ks, out),
        3 => return decode_few::<3>(block, bits, p, lanes, ks, out),
        4 => return decode_few::<4>(block, bits, p, lanes, ks, out),
        _ => {}
    }
    let mut seen = [0u16; LANES];
    let mut repeated = [0u16; LANES];
    let mut digit = [[0u16; LANES]; 8];
    for k in ks.by_rows().flatten() {
        // Always `LANES` words, one load (they stay inside the row; those past the run are unused).
        let first = block.first_word + k * block.row_bytes + 2 * p;
        let Some(words) = mask::read_words::<LANES>(bits, first) else { return false };
        let words = words.map(|w| w & block.valid);
        for l in 0..LANES {
            repeated[l] |= seen[l] & words[l];
            seen[l] |= words[l];
        }
        let mut rest = k;
        while rest != 0 {
            let j = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            for (d, w) in digit[j].iter_mut().zip(&words) {
                *d |= w;
            }
        }
    }
    if (0..lanes).any(|l| seen[l] != block.valid || repeated[l] != 0) {
        return false;
    }
    for (l, slot) in out.chunks_exact_mut(block.channels).enumerate() {
        let (mut low, mut high) = (0u64, 0u64);
        for (j, d) in digit[..digits].iter().enumerate() {
            low |= SPREAD[usize::from(d[l] & 0xff)] << j;
            high |= SPREAD[usize::from(d[l] >> 8)] << j;
        }
        let [low, high] = [low.to_le_bytes(), high.to_le_bytes()];
        if let Ok(slot) = <&mut [u8; 16]>::try_from(&mut *slot) {
            // A whole block: two stores.
            slot[..8].copy_from_slice(&low);
            slot[8..].copy_from_slice(&high);
        } else {
            for (byte, value) in slot.iter_mut().zip(low.into_iter().chain(high)) {
                *byte = value;
            }
        }
    }
    true
}

/// [`decode_run`] for a block of `C` (at most 4) channels, at a cost per channel rather than per
/// block. Four lanes share a `u64` (16 bits each): each channel's offset in each lane is summed
/// from the offsets whose word has its bit, while the bits are counted. Exactly one bit gives the
/// offset itself.
#[inline(never)]
fn decode_few<const C: usize>(
    block: &Block,
    bits: &[i8],
    p: usize,
    lanes: usize,
    ks: ValidOffsets,
    out: &mut [u8],
) -> bool {
    /// The lowest bit of each 16-bit lane.
    const LOW: u64 = 0x0001_0001_0001_0001;
    let mut offsets = [[0u64; LANES / 4]; C];
    let mut counts = [[0u64; LANES / 4]; C];
    for window_row in ks.by_rows() {
        for k in window_row {
            let first = block.first_word + k * block.row_bytes + 2 * p;
            let Some(quads) = mask::read_word_quads::<{ LANES / 4 }>(bits, first) else { return false };
            // A decoded window has at most `MAX_TAPS` (256) offsets, so no lane's sum carries
            // into the next: at most 256 bits, and 256 offsets of at most 255.
            let k = k as u64;
            for (ch, (offsets, counts)) in offsets.iter_mut().zip(&mut counts).enumerate() {
                for q in 0..LANES / 4 {
                    let hits = (quads[q] >> ch) & LOW;
                    counts[q] += hits;
                    offsets[q] += hits * k;
                }
            }
        }
    }
    for (ch, (offsets, counts)) in offsets.iter().zip(&counts).enumerate() {
        // Every lane of the run (not those past it) has exactly one bit.
        let ones = counts.iter().enumerate().map(|(q, &count)| {
            let used = lanes.saturating_sub(4 * q).min(4);
            let in_run = if used == 4 { u64::MAX } else { (1u64 << (16 * used)) - 1 };
            (count ^ LOW) & in_run
        });
        if ones.fold(0, |any, lane| any | lane) != 0 {
            return false;
        }
        for (slots, quad) in out.chunks_mut(4 * C).zip(offsets) {
            for (l, slot) in slots.chunks_exact_mut(C).enumerate() {
                slot[ch] = (quad >> (16 * l)) as u8;
            }
        }
    }
    true
}

/// Scatters a decoded block channel by channel, exactly as the flat-index kernel does: zero the
/// plane (a window's rows at a time on large planes), then add each gradient at its input index
/// in row-major output order. `f32`/`f64` sum straight into the plane; the half types widen the
/// channel's gradients into `acc` past its first plane and sum in that plane, each sum stored
/// rounded once: `f16` rounds rows as they become final ([`Rounded::settled`]), `bf16` stores
/// each running sum ([`Rounded::running`]), as the flat-index kernel does
/// ([`Accumulate::ROUNDS_SLICES_FASTER`](crate::element::Accumulate::ROUNDS_SLICES_FASTER)).
fn scatter_decoded<T: PoolFloat>(
    g: &MaxPoolGeometry,
    windows: &Windows,
    channels: usize,
    (go, taps, gi): (&[T], &[u8], &mut [T]),
    acc: &mut [T::Acc],
    isa: Isa,
) {
    let (hw, positions) = (g.h * g.w, g.positions());
    let Some(Decoding { tap_offsets, .. }) = &windows.decoding else { return };
    let by_rows = scatter::plane_zeroed_by_rows::<T>(hw);
    let (acc, grad) = acc.split_at_mut(hw.min(acc.len()));
    for ch in 0..channels {
        let go = &go[ch * positions..(ch + 1) * positions];
        let gi = &mut gi[ch * hw..(ch + 1) * hw];
        let decoded = Decoded { g, windows, tap_offsets, ch, channels, taps, by_rows };
        if let Some(direct) = T::as_acc_mut(gi) {
            decoded.add(T::as_acc(go).unwrap_or(&[]), &mut Direct::<_, false>(direct));
        } else {
            let grad = &mut grad[..positions];
            T::to_acc_slice(go, grad);
            if T::ROUNDS_SLICES_FASTER {
                decoded.add(grad, &mut Rounded::settled(acc, gi, isa));
            } else {
                decoded.add(grad, &mut Rounded::running(acc, gi, true));
            }
        }
    }
}

/// Channel `ch` of a decoded block.
struct Decoded<'a> {
    g: &'a MaxPoolGeometry,
    windows: &'a Windows,
    tap_offsets: &'a [usize; MAX_TAPS],
    ch: usize,
    /// The block's channels: the bytes of a slot of `taps`.
    channels: usize,
    taps: &'a [u8],
    /// Whether the plane is zeroed a window's rows at a time
    /// ([`scatter::plane_zeroed_by_rows`], as in the flat-index kernel), or at once.
    by_rows: bool,
}

impl Decoded<'_> {
    /// Zeroes `sums` (the channel's plane) and adds each gradient at its decoded input index, in
    /// row-major output order. Every decoded offset is a valid tap of its window: inside the
    /// plane, in the rows zeroed before its output row.
    #[inline(always)]
    fn add<G: Copy>(&self, go: &[G], sums: &mut impl Sums<G>) {
        // Whole blocks, the common case, with a constant slot size.
        if self.channels == 16 {
            self.add_slots(go, sums, 16)
        } else {
            self.add_slots(go, sums, self.channels)
        }
    }

    /// [`Decoded::add`] with slots of `channels` bytes.
    #[inline(always)]
    fn add_slots<G: Copy>(&self, go: &[G], sums: &mut impl Sums<G>, channels: usize) {
        let Decoded { g, windows, tap_offsets, ch, taps, by_rows, .. } = *self;
        let (wo, len) = (g.wo.max(1), sums.len());
        let mut zeroed = 0;
        let rows = windows.rows.iter().zip(&windows.row_origins);
        let taps_by_rows = taps.chunks_exact(channels * wo);
        for (((window, _), &row), (go, taps)) in rows.zip(go.chunks_exact(wo).zip(taps_by_rows)) {
            // The windows start no earlier from here on (every decoded offset is in its window).
            sums.settle((window.span().start * g.w).min(zeroed));
            let reach = if by_rows { (window.span().end * g.w).min(len) } else { len };
            if reach > zeroed {
                sums.zero(zeroed..reach);
                zeroed = reach;
            }
            for ((&col, &go), slot) in windows.col_origins.iter().zip(go).zip(taps.chunks_exact(channels)) {
                sums.add(row.wrapping_add(col).wrapping_add(tap_offsets[usize::from(slot[ch])]), go);
            }
        }
        sums.zero(zeroed..len);
        sums.settle(len);
    }
}

/// Scatters any block bit by bit: for each output position in row-major order and each valid
/// window offset, add the gradient of every channel whose bit is set. Bits of channels past `C`
/// are masked off; offsets that lie in padding are never visited, so their bits add nothing.
///
/// An input row is zeroed just before the first output row whose windows reach it (as oneDNN
/// does), so the rows being summed stay in cache across the block's channels: a bit always
/// points inside its own window, so no contribution lands on a row not yet zeroed.
fn scatter_bits<T: PoolFloat>(
    g: &MaxPoolGeometry,
    windows: &Windows,
    block: &Block,
    go: &[T],
    bits: &[i8],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let (hw, positions, w, channels) = (g.h * g.w, g.positions(), g.w, block.channels);
    let kw = g.params.kernel()[1];
    let zero_rows = |acc: &mut [T::Acc], rows: core::ops::Range<usize>| {
        for ch in 0..channels {
            acc[ch * hw + rows.start * w..ch * hw + rows.end * w].fill(T::Acc::zero());
        }
    };
    let add_row = |acc: &mut [T::Acc], oh: usize| {
        let (r, i0) = &windows.rows[oh];
        for (ow, (c, j0)) in windows.cols.iter().enumerate() {
            let p = oh * g.wo + ow;
            for a in 0..r.count {
                let (ih, i) = (r.start + a, i0 + a);
                for b in 0..c.count {
                    let flat = ih * w + c.start + b;
                    let mut rest = block.word(bits, i * kw + j0 + b, p);
                    while rest != 0 {
                        let ch = rest.trailing_zeros() as usize;
                        rest &= rest - 1;
                        acc[ch * hw + flat] += go[ch * positions + p].to_acc();
                    }
                }
            }
        }
    };
    let sum = |acc: &mut [T::Acc]| {
        let mut zeroed = 0;
        for oh in 0..g.ho {
            let (r, _) = &windows.rows[oh];
            let reach = r.start + r.count;
            if reach > zeroed {
                zero_rows(acc, zeroed..reach);
                zeroed = reach;
            }
            add_row(acc, oh);
        }
        zero_rows(acc, zeroed..g.h);
    };
    if let Some(direct) = T::as_acc_mut(gi) {
        sum(direct);
    } else {
        let acc = &mut acc[..channels * hw];
        sum(acc);
        T::from_acc_slice(acc, gi);
    }
}

/// Window offsets fit a byte: larger windows are not decoded.
const MAX_TAPS: usize = 256;

/// Byte `i` of `SPREAD[b]` is bit `i` of `b`.
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            table[b] |= ((b as u64 >> i) & 1) << (8 * i);
            i += 1;
        }
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bitmask, Mask, MaxPool2dParams};
    use ndarray::Array4;

    /// Windows of up to 256 taps (an offset fits a byte) are decoded, with as many binary digits
    /// as the largest offset needs; larger ones are not, whatever the shape of the kernel.
    #[test]
    fn windows_of_more_than_256_taps_have_no_decoder() {
        for (kernel, digits) in [
            ([16, 16], Some(8)),
            ([15, 17], Some(8)),
            ([1, 256], Some(8)),
            ([3, 3], Some(4)),
            ([1, 2], Some(1)),
            ([1, 1], Some(0)),
            ([16, 17], None),
            ([17, 17], None),
            ([1, 257], None),
            ([257, 1], None),
        ] {
            let params = MaxPool2dParams::new(kernel);
            let shape = [1, 3, kernel[0] + 2, kernel[1] + 2];
            let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape).unwrap();
            let decoding = Windows::of(&g).unwrap().decoding;
            assert_eq!(decoding.map(|d| d.digits), digits, "kernel {kernel:?}");
        }
    }

    /// The split rule, as measured and documented at [`GATHERED_CHANNELS`] and [`BlockSplit`]
    /// (every split gives the same sums; the rule is about speed and, for empty batches, about
    /// planning no tables): narrow blocks gather, however many; wide blocks fewer than threads
    /// decode in bands when a decoder exists and a plane's flat indices fit `i32`; otherwise
    /// whole blocks. Planned only (no tensor), so planes of 2^31 elements cost nothing.
    /// (Threads need the `rayon` feature: without it every `Cpu` runs on the calling thread.)
    #[cfg(feature = "rayon")]
    #[test]
    fn the_split_follows_the_measured_rule() {
        #[derive(Debug, PartialEq)]
        enum Split {
            Blocks,
            Bands,
            Gather,
        }
        let k3s2 = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
        let k17 = MaxPool2dParams::new([17, 17]);
        let cases = [
            ([1, 1, 64, 64], &k3s2, 2, Split::Gather),
            ([1, 4, 64, 64], &k3s2, 2, Split::Gather),
            ([32, 3, 64, 64], &k3s2, 1, Split::Gather),
            ([32, 3, 64, 64], &k3s2, 2, Split::Gather),
            ([1, 20, 64, 64], &k3s2, 3, Split::Bands),
            ([1, 5, 64, 64], &k3s2, 2, Split::Bands),
            ([1, 16, 64, 64], &k3s2, 2, Split::Bands),
            ([2, 16, 64, 64], &k3s2, 2, Split::Blocks),
            ([4, 16, 64, 64], &k3s2, 2, Split::Blocks),
            ([1, 16, 64, 64], &k3s2, 1, Split::Blocks),
            ([1, 16, 64, 64], &k17, 2, Split::Blocks),
            ([1, 16, 46340, 46340], &k3s2, 2, Split::Bands),
            ([1, 16, 46341, 46341], &k3s2, 2, Split::Blocks),
            ([0, 3, 64, 64], &k3s2, 2, Split::Blocks),
            ([0, 16, 64, 64], &k3s2, 2, Split::Blocks),
        ];
        for (shape, params, threads, want) in cases {
            let g = MaxPoolGeometry::for_mask("test", "input_shape", params, &shape).unwrap();
            let cpu = Cpu::with_threads(threads).unwrap();
            let p = BitmaskPrepared::plan::<f32>(&cpu, &g, &mut Sizer::new()).unwrap();
            let got = match p.split {
                BlockSplit::Blocks { .. } => Split::Blocks,
                BlockSplit::Bands { .. } => Split::Bands,
                BlockSplit::Gather(_) => Split::Gather,
            };
            assert_eq!(got, want, "{shape:?} {params:?} on {threads} threads");
        }
    }

    /// Decoding in bands of output rows gives back the indices the mask was made from, whatever
    /// the band height; a block with a cleared word does not decode and is reported.
    #[test]
    fn bands_decode_to_the_forward_indices() {
        let (shape, params) =
            ([2, 20, 9, 11], MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]));
        let x = Array4::from_shape_fn(shape, |(n, c, i, j)| ((n * 7 + c * 13 + i * 5 + j * 3) % 17) as f32);
        let indices = crate::max_pool2d_with_indices(&x, &params).unwrap().indices;
        let mask = Mask::<Bitmask, _>::from_indices(&indices, &params, &shape).unwrap();
        let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape).unwrap();
        let windows = Windows::of(&g).unwrap();
        let mut bits = mask.as_array().as_slice().unwrap().to_vec();
        let want: Vec<i32> = indices.iter().map(|&i| i as i32).collect();
        for rows in [1, 2, 5] {
            let (tasks, taps_per_task) = BlockSplit::bands(&g, rows);
            let (mut flat, mut taps) = (vec![-7; want.len()], vec![0u8; tasks * taps_per_task]);
            let undecoded =
                decode_to_indices(&Cpu::sequential(), &g, &windows, rows, &bits, &mut flat, &mut taps);
            assert_eq!((undecoded, &flat), (vec![], &want), "bands of {rows} rows");
        }
        // Clear the word of (n = 1, block 1, offset 4, position 0): channels 16..20 lose their bit.
        let at = mask::word_offset(&g, 1, 1, 4, 0);
        bits[at..at + 2].fill(0);
        let mut flat = vec![-7; want.len()];
        let (tasks, taps_per_task) = BlockSplit::bands(&g, 2);
        let mut taps = vec![0u8; tasks * taps_per_task];
        let undecoded = decode_to_indices(&Cpu::sequential(), &g, &windows, 2, &bits, &mut flat, &mut taps);
        assert_eq!(undecoded, vec![3]);
    }

    /// Every channel of every lane is checked, by both decoders (blocks of 1 to 4 channels, and
    /// wider ones) and in runs of every length (35 output columns: runs of 16 and shorter ones at
    /// the edges): a window whose bit is cleared, or that gets a second bit at another offset
    /// inside the input, does not decode. Untouched, each block decodes to the forward's indices.
    #[test]
    fn every_lane_and_channel_is_checked() {
        let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
        for c in [1, 2, 3, 4, 5, 16] {
            let shape = [1, c, 5, 70];
            let x = Array4::from_shape_fn(shape, |(_, c, i, j)| ((c * 13 + i * 7 + j * 5) % 23) as f32);
            let indices = crate::max_pool2d_with_indices(&x, &params).unwrap().indices;
            let mask = Mask::<Bitmask, _>::from_indices(&indices, &params, &shape).unwrap();
            let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape).unwrap();
            let (windows, block) = (Windows::of(&g).unwrap(), Block::at(&g, 0));
            let bits = mask.as_array().as_slice().unwrap().to_vec();
            let decodes = |bits: &[i8]| {
                let mut taps = vec![0u8; widest_block(&g) * g.positions()];
                decode_rows(&g, &windows, &block, bits, 0..g.ho, &mut taps).then_some(taps)
            };
            let taps = decodes(&bits).expect("the forward's mask decodes");
            let tap_offsets = &windows.decoding.as_ref().unwrap().tap_offsets;
            for (ch, p) in (0..c).flat_map(|ch| (0..g.positions()).map(move |p| (ch, p))) {
                let (oh, ow) = (p / g.wo, p % g.wo);
                let origin = windows.row_origins[oh].wrapping_add(windows.col_origins[ow]);
                let decoded = origin.wrapping_add(tap_offsets[usize::from(taps[c * p + ch])]);
                assert_eq!(
                    decoded as i64,
                    indices[[0, ch, oh, ow]],
                    "{c} channels: channel {ch}, position {p}"
                );
                let set = (0..9)
                    .find(|&k| mask::read_word(&bits, mask::word_offset(&g, 0, 0, k, p)) >> ch & 1 == 1);
                let set = set.expect("one bit per window");
                let mut cleared = bits.clone();
                let at = mask::word_offset(&g, 0, 0, set, p);
                mask::write_word(&mut cleared, at, mask::read_word(&bits, at) & !(1 << ch));
                assert!(decodes(&cleared).is_none(), "{c} channels: bit {ch} cleared at position {p}");
                for k in (0..9).filter(|&k| k != set && g.flat_of(p, k).is_some()) {
                    let mut doubled = bits.clone();
                    let at = mask::word_offset(&g, 0, 0, k, p);
                    mask::write_word(&mut doubled, at, mask::read_word(&bits, at) | 1 << ch);
                    assert!(
                        decodes(&doubled).is_none(),
                        "{c} channels: bit {ch} also at offset {k}, position {p}"
                    );
                }
            }
        }
    }
}
