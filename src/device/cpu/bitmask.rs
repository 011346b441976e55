//! The `Bitmask` backward on the CPU: the mask is read in `(n, 16-channel)` blocks. A block is
//! decoded into every channel's window offset (without a branch per bit) and scattered channel
//! by channel like the flat-index backward; a block that is not one bit per channel and position
//! takes a bit-by-bit kernel. With fewer blocks than threads, blocks are decoded in bands of
//! output rows into flat indices, which the shared scatter kernel then adds.

use core::ops::Range;

use num_traits::Zero;

use super::Cpu;
use super::forward::{Taps, planes_per_task, rows_per_band, task_count};
use super::maxpool::prepare_scatter;
use super::scatter::{self, BadIndex, Direct, Rounded, ScatterPrepared, Sums};
use super::workspace::{Carver, Sizer, task_share};
use crate::alloc::collect_exact;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::pool_window_taps;
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
    /// ... of 16 planes plus one channel's gradients each for the half types, else 0 (sums go
    /// to the output); in whole cache lines ([`task_share`]).
    acc_per_task: usize,
}

/// How the `(n, 16-channel block)`s of a `Bitmask` backward are shared among tasks.
#[derive(Debug)]
enum BlockSplit {
    /// Runs of whole blocks, one run per task: each block is decoded and scattered while its
    /// offsets are in cache, into `taps_per_task` bytes (16 per output position, in whole
    /// cache lines; 0 without a decoder).
    Blocks { tasks: usize, taps_per_task: usize },
    /// Fewer blocks than threads: each block is decoded in bands of `rows` output rows, one task
    /// per band, into the flat index of every channel and position (the `I32Argmax` values the
    /// same forward would write); those are then scattered by the flat-index kernel (over
    /// planes, or bands of a plane's input rows). Blocks that do not decode take the bit-by-bit
    /// kernel afterwards, one at a time.
    Bands { rows: usize, scatter: ScatterPrepared },
}

impl BlockSplit {
    /// Band tasks and decoded bytes per task of [`BlockSplit::Bands`].
    fn bands(g: &MaxPoolGeometry, rows: usize) -> (usize, usize) {
        (g.n * g.channel_blocks() * g.ho.div_ceil(rows), 16 * rows * g.wo)
    }
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
    fn new(g: &MaxPoolGeometry) -> Result<Self> {
        let p = &g.params;
        let axis = |a: usize, input: usize, output: usize| {
            let len = if g.planes() == 0 { 0 } else { output };
            let windows = (0..len).map(|o| {
                let (k, s, pad) = (p.kernel()[a], p.stride()[a], p.padding()[a]);
                let (start, count) = pool_window_taps(o, input, k, s, pad, 1);
                // The first valid tap's offset in the window: start - (o*s - pad) >= 0.
                let first = (start + pad).saturating_sub(o * s);
                (Taps { start, count, step: 1 }, first)
            });
            collect_exact("max_pool2d_with_mask_backward", "windows", len, windows)
        };
        let (rows, cols) = (axis(0, g.h, g.ho)?, axis(1, g.w, g.wo)?);
        let origins = |taps: &[(Taps, usize)], scale: usize| {
            let origins = taps.iter().map(|(t, first)| (t.start.wrapping_sub(*first)).wrapping_mul(scale));
            collect_exact("max_pool2d_with_mask_backward", "windows", taps.len(), origins)
        };
        let [kh, kw] = p.kernel();
        let decoding = (kh * kw <= MAX_TAPS).then(|| {
            let mut tap_offsets = Box::new([0; MAX_TAPS]);
            for (k, offset) in tap_offsets[..kh * kw].iter_mut().enumerate() {
                *offset = (k / kw) * g.w + k % kw;
            }
            Decoding { tap_offsets, digits: (kh * kw).next_power_of_two().trailing_zeros() as usize }
        });
        Ok(Windows {
            row_origins: origins(&rows, g.w)?,
            col_origins: origins(&cols, 1)?,
            decoding,
            rows,
            cols,
        })
    }
}

impl BitmaskPrepared {
    /// Plans the backward of `g` and adds its scratch to `sizer`.
    pub(super) fn new<T: PoolFloat>(cpu: &Cpu, g: &MaxPoolGeometry, sizer: &mut Sizer) -> Result<Self> {
        let windows = Windows::new(g)?;
        // Half types: 16 planes of f32 sums (the bit-by-bit kernel sums a block at once) and one
        // channel's widened gradients (the decoded scatter).
        let acc_per_task = if T::as_acc_mut(&mut []).is_some() {
            0
        } else {
            task_share::<T::Acc>(16 * g.h * g.w + g.positions())
        };
        let (threads, blocks) = (cpu.threads(), g.n * g.channel_blocks());
        let flat_fits = i32::try_from(g.h * g.w).is_ok();
        let (split, acc_tasks) = if windows.decoding.is_some() && blocks > 0 && blocks < threads && flat_fits
        {
            let rows = rows_per_band(threads, blocks, g.ho);
            let (tasks, taps_per_task) = BlockSplit::bands(g, rows);
            sizer.region::<T::Acc>(acc_per_task)?;
            sizer.region::<i32>(g.planes() * g.positions())?;
            sizer.region::<i8>(tasks * taps_per_task)?;
            (BlockSplit::Bands { rows, scatter: prepare_scatter::<T>(cpu, g, sizer)? }, 1)
        } else {
            let tasks = task_count(cpu, blocks);
            let taps_per_task =
                if windows.decoding.is_some() { task_share::<u8>(16 * g.positions()) } else { 0 };
            sizer.region::<T::Acc>(tasks * acc_per_task)?;
            sizer.region::<i8>(tasks * taps_per_task)?;
            (BlockSplit::Blocks { tasks, taps_per_task }, tasks)
        };
        Ok(BitmaskPrepared { windows, split, acc_tasks, acc_per_task })
    }
}

/// Runs a backward planned by [`BitmaskPrepared::new`], its scratch carved from `carver`. The
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
            by_blocks(cpu, g, p, tasks, go, bits, gi, acc, taps);
            Ok(Ok(()))
        }
        BlockSplit::Bands { rows, scatter } => {
            let flat = carver.region::<i32>(g.planes() * g.positions())?;
            let (tasks, taps_per_task) = BlockSplit::bands(g, *rows);
            let taps = bytemuck::cast_slice_mut(carver.region::<i8>(tasks * taps_per_task)?);
            let scratch = scatter.scratch::<T>(carver)?;
            let undecoded = decode_to_indices(cpu, g, &p.windows, *rows, bits, flat, taps);
            let checked = scatter::scatter(cpu, scatter, go, flat, gi, scratch);
            for b in undecoded {
                let block = Block::new(g, b);
                let planes = g.block_planes(b);
                let go = &go[planes.start * g.positions()..planes.end * g.positions()];
                let gi = &mut gi[planes.start * g.h * g.w..planes.end * g.h * g.w];
                scatter_bits(g, &p.windows, &block, go, bits, gi, acc);
            }
            Ok(checked)
        }
    }
}

struct BlockTask<'s, T: PoolFloat> {
    blocks: core::ops::Range<usize>,
    go: &'s [T],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
    taps: &'s mut [u8],
}

/// The `(n, 16-channel)` blocks in runs of consecutive blocks, one per task of `tasks`, each
/// with its planes (consecutive too).
pub(super) fn block_runs(
    g: &MaxPoolGeometry,
    tasks: usize,
) -> impl Iterator<Item = (Range<usize>, Range<usize>)> {
    let blocks = g.n * g.channel_blocks();
    let per = planes_per_task(blocks, tasks);
    (0..blocks).step_by(per).map(move |first| {
        let run = first..(first + per).min(blocks);
        let planes = g.block_planes(first).start..g.block_planes(run.end - 1).end;
        (run, planes)
    })
}

/// Scatters through a `Bitmask`, one `(n, 16-channel block)` at a time; each of `tasks` tasks
/// owns a run of consecutive blocks (consecutive planes of `grad_input`).
#[allow(clippy::too_many_arguments)]
fn by_blocks<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    p: &BitmaskPrepared,
    tasks: usize,
    go: &[T],
    bits: &[i8],
    gi: &mut [T],
    acc: &mut [T::Acc],
    taps: &mut [u8],
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
            let block = Block::new(g, b);
            let (gi_block, gi_tail) = gi.split_at_mut(block.channels * hw);
            let (go_block, go_tail) = go.split_at(block.channels * positions);
            (gi, go) = (gi_tail, go_tail);
            if decode_rows(g, &p.windows, &block, bits, 0..g.ho, &mut *t.taps) {
                scatter_decoded(g, &p.windows, block.channels, go_block, &*t.taps, gi_block, &mut *t.acc);
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
    fn new(g: &MaxPoolGeometry, b: usize) -> Self {
        let (n, c1) = (b / g.channel_blocks(), b % g.channel_blocks());
        let channels = g.block_planes(b).len();
        Block {
            channels,
            valid: if channels >= 16 { u16::MAX } else { (1u16 << channels) - 1 },
            first_word: g.word_offset(n, c1, 0, 0),
            row_bytes: g.word_offset(0, 0, 1, 0),
        }
    }

    /// The bits of the existing channels in word `(k, p)`.
    #[inline(always)]
    fn word(&self, bits: &[i8], k: usize, p: usize) -> u16 {
        mask::read_word(bits, self.first_word + k * self.row_bytes + 2 * p) & self.valid
    }
}

/// Decodes output rows `rows` of the block into `taps` (16 bytes per output position from the
/// first of `rows`: each channel's window offset) when every channel has exactly one bit among
/// the valid offsets of every position, as every forward writes it. False otherwise (and
/// without a decoder: windows of more than 256 taps).
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
    let kw = g.params.kernel()[1];
    let first = rows.start * g.wo;
    for (oh, (r, i0)) in windows.rows.iter().enumerate().take(rows.end).skip(rows.start) {
        let mut ow = 0;
        while ow < g.wo {
            let (c, j0) = &windows.cols[ow];
            let same =
                windows.cols[ow..].iter().take(LANES).take_while(|(t, j)| t.count == c.count && j == j0);
            let lanes = same.count();
            let ks = (*i0..i0 + r.count).flat_map(|i| i * kw + j0..i * kw + j0 + c.count);
            let p = oh * g.wo + ow;
            let Some(out) = taps.get_mut(16 * (p - first)..16 * (p - first + lanes)) else { return false };
            if !decode_run(block, bits, p, lanes, ks, digits, out) {
                return false;
            }
            ow += lanes;
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
    let mut tapss = taps.chunks_mut(16 * band.max(1));
    let mut tasks = Vec::with_capacity(blocks * g.ho.div_ceil(rows));
    for b in 0..blocks {
        let block = Block::new(g, b);
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
        let origins = windows.row_origins[rows]
            .iter()
            .flat_map(|&row| windows.col_origins.iter().map(move |&col| row.wrapping_add(col)));
        for (ch, out) in outs.iter_mut().enumerate() {
            for ((value, origin), taps) in out.iter_mut().zip(origins.clone()).zip(taps.chunks_exact(16)) {
                // A decoded offset is a valid tap of its window: inside the plane, whose size fits i32.
                *value = i32::try_from(origin.wrapping_add(tap_offsets[usize::from(taps[ch])])).unwrap_or(-1);
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

/// Blocks of at most this many channels are decoded channel by channel.
const FEW_CHANNELS: usize = 4;

/// Decodes `lanes` (at most [`LANES`]) consecutive positions from `p` whose valid window offsets
/// are `ks`, into 16 bytes per position, without a branch per bit: the binary digits of each
/// channel's offset are gathered as 16-channel words (`digit[j]` = OR of the words of the offsets
/// with bit `j` set), then spread to one byte per channel. False if a channel has no bit or more
/// than one.
fn decode_run(
    block: &Block,
    bits: &[i8],
    p: usize,
    lanes: usize,
    ks: impl Iterator<Item = usize>,
    digits: usize,
    out: &mut [u8],
) -> bool {
    let mut seen = [0u16; LANES];
    let mut repeated = [0u16; LANES];
    let mut digit = [[0u16; LANES]; 8];
    for k in ks {
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
    if block.channels <= FEW_CHANNELS {
        // Few channels: each channel's offsets for all lanes at once, instead of spreading all
        // 16 channels of each lane.
        for ch in 0..block.channels {
            let mut offsets = [0u8; LANES];
            for (j, d) in digit[..digits].iter().enumerate() {
                for (offset, &word) in offsets.iter_mut().zip(d) {
                    *offset |= (((word >> ch) & 1) as u8) << j;
                }
            }
            for (slot, offset) in out.chunks_exact_mut(16).zip(offsets) {
                slot[ch] = offset;
            }
        }
        return true;
    }
    for (l, slot) in out.chunks_exact_mut(16).enumerate() {
        let (mut low, mut high) = (0u64, 0u64);
        for (j, d) in digit[..digits].iter().enumerate() {
            low |= SPREAD[usize::from(d[l] & 0xff)] << j;
            high |= SPREAD[usize::from(d[l] >> 8)] << j;
        }
        slot[..8].copy_from_slice(&low.to_le_bytes());
        slot[8..].copy_from_slice(&high.to_le_bytes());
    }
    true
}

/// Scatters a decoded block channel by channel, exactly as the flat-index kernel does: zero the
/// plane (a window's rows at a time on large planes), then add each gradient at its input index
/// in row-major output order. `f32`/`f64` sum straight into the plane; the half types widen the
/// channel's gradients into `acc` past its first plane, sum in that plane and store each
/// rounded running sum, so the last store to an element holds its whole sum rounded once.
fn scatter_decoded<T: PoolFloat>(
    g: &MaxPoolGeometry,
    windows: &Windows,
    channels: usize,
    go: &[T],
    taps: &[u8],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let (hw, positions) = (g.h * g.w, g.positions());
    let Some(Decoding { tap_offsets, .. }) = &windows.decoding else { return };
    let by_rows = hw.saturating_mul(size_of::<T>()) >= scatter::ZERO_BY_ROWS;
    let (acc, grad) = acc.split_at_mut(hw.min(acc.len()));
    for ch in 0..channels {
        let go = &go[ch * positions..(ch + 1) * positions];
        let gi = &mut gi[ch * hw..(ch + 1) * hw];
        let decoded = Decoded { g, windows, tap_offsets, ch, taps, by_rows };
        if let Some(direct) = T::as_acc_mut(gi) {
            decoded.add(T::as_acc(go).unwrap_or(&[]), &mut Direct(direct));
        } else {
            let grad = &mut grad[..positions];
            T::to_acc_slice(go, grad);
            decoded.add(grad, &mut Rounded::new(acc, gi));
        }
    }
}

/// Channel `ch` of a decoded block.
struct Decoded<'a> {
    g: &'a MaxPoolGeometry,
    windows: &'a Windows,
    tap_offsets: &'a [usize; MAX_TAPS],
    ch: usize,
    taps: &'a [u8],
    /// Whether the plane is zeroed a window's rows at a time (as the flat-index kernel does on
    /// planes of [`scatter::ZERO_BY_ROWS`] bytes and more), or at once.
    by_rows: bool,
}

impl Decoded<'_> {
    /// Zeroes `sums` (the channel's plane) and adds each gradient at its decoded input index, in
    /// row-major output order. Every decoded offset is a valid tap of its window: inside the
    /// plane, in the rows zeroed before its output row.
    #[inline(always)]
    fn add<G: Copy>(&self, go: &[G], sums: &mut impl Sums<G>) {
        let Decoded { g, windows, tap_offsets, ch, taps, by_rows } = *self;
        let (wo, len) = (g.wo.max(1), sums.len());
        let mut zeroed = 0;
        let rows = windows.rows.iter().zip(&windows.row_origins);
        for (((window, _), &row), (go, taps)) in rows.zip(go.chunks_exact(wo).zip(taps.chunks_exact(16 * wo)))
        {
            let reach = if by_rows { (window.span().end * g.w).min(len) } else { len };
            if reach > zeroed {
                sums.zero(zeroed..reach);
                zeroed = reach;
            }
            for ((&col, &go), taps) in windows.col_origins.iter().zip(go).zip(taps.chunks_exact(16)) {
                sums.add(row.wrapping_add(col).wrapping_add(tap_offsets[usize::from(taps[ch % 16])]), go);
            }
        }
        sums.zero(zeroed..len);
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

    /// Decoding in bands of output rows gives back the indices the mask was made from, whatever
    /// the band height; a block with a cleared word does not decode and is reported.
    #[test]
    fn bands_decode_to_the_forward_indices() {
        let (shape, params) =
            ([2, 20, 9, 11], MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]));
        let x = Array4::from_shape_fn(shape, |(n, c, i, j)| ((n * 7 + c * 13 + i * 5 + j * 3) % 17) as f32);
        let indices = crate::max_pool2d_with_indices::<f32, i64, _, _>(&x, &params).unwrap().indices;
        let mask = Mask::<Bitmask, _>::from_indices(&indices, &params, &shape).unwrap();
        let g = MaxPoolGeometry::for_mask("test", "input_shape", &params, &shape).unwrap();
        let windows = Windows::new(&g).unwrap();
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
        let at = g.word_offset(1, 1, 4, 0);
        bits[at..at + 2].fill(0);
        let mut flat = vec![-7; want.len()];
        let (tasks, taps_per_task) = BlockSplit::bands(&g, 2);
        let mut taps = vec![0u8; tasks * taps_per_task];
        let undecoded = decode_to_indices(&Cpu::sequential(), &g, &windows, 2, &bits, &mut flat, &mut taps);
        assert_eq!(undecoded, vec![3]);
    }
}
