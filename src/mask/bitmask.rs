//! The [`Bitmask`] layout (Atlas training and 310P, and 1x1 kernels on A2): `u16` words
//! `[N][⌈C/16⌉][kH·kW][⌈Ho·Wo/16⌉ + 1][16]`; bit `b` (least significant first) of word
//! `(n, c1, k, p)` says that channel `16·c1 + b` had its first maximum at window offset
//! `k = i·kW + j` for output position `p = oh·Wo + ow`. Bits of channels `>= C` and words past
//! `Ho·Wo` are ignored, and the forward leaves them zero.
//!
//! Encoding goes one `(n, 16-channel)` block at a time: position by position where every index
//! lies in its window (eight positions at a time where their windows lie inside the plane's
//! columns), else in row-major order, so that the first index outside its window is the error.
//! Position by position, a block can also be encoded in bands of output rows ([`row_bands`]),
//! which threads encode side by side: each band owns its positions' words of every window
//! offset.

use core::ops::Range;

use super::layout::internal::{LayoutImpl, Run, Visitor};
use super::layout::{MaskBytes, MaskLayout};
use crate::element::sealed::Sealed;
use crate::error::{Error, Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::shape::MaxPoolGeometry;

/// The legacy layout (Atlas training, 310P, and 1x1 kernels on A2): one bit per channel in
/// 16-channel `u16` words, one word per window offset and output position. A marker type, and its
/// one value (as [`I32Argmax`](crate::I32Argmax) is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Bitmask;

impl Sealed for Bitmask {}

impl MaskLayout for Bitmask {
    const NAME: &'static str = "Bitmask";
}

impl LayoutImpl for Bitmask {
    const I32_VALUES: bool = false;
    const CHANNEL_BLOCKS: bool = true;

    /// Every pooling has a `Bitmask`: the mask shape holds a word per window offset and position.
    fn check(_: &MaxPoolGeometry) -> Result<()> {
        Ok(())
    }

    fn part_count(g: &MaxPoolGeometry, values: usize) -> usize {
        if values == 0 { 0 } else { g.n * g.channel_blocks() }
    }

    fn part_indices(g: &MaxPoolGeometry, _: usize, part: usize) -> Range<usize> {
        let planes = crate::geometry::mask_block_planes(g.c, part);
        planes.start * g.positions()..planes.end * g.positions()
    }

    fn part_bytes(g: &MaxPoolGeometry, _: usize, part: usize) -> Range<usize> {
        let block = word_offset(g, 0, 1, 0, 0);
        part * block..(part + 1) * block
    }

    /// Each index must lie in its window (the error is [`Error::IndexNotInWindow`]).
    fn encode_in_order<I: ArgmaxIndex>(
        run: Run<'_>,
        values: impl Iterator<Item = I>,
        out: &mut [i8],
    ) -> Result<()> {
        let Run { g, arg, first, base } = run;
        let plane = g.h * g.w;
        let (positions, wo) = (g.positions().max(1), g.wo.max(1));
        let [kh, kw] = g.params.kernel();
        let ([sh, sw], [ph, pw]) = (g.params.stride(), g.params.padding());
        // The element's plane and position, advanced one element at a time.
        let (mut plane_index, mut p) = (first / positions, first % positions);
        for (e, v) in (first..).zip(values) {
            let (oh, ow) = (p / wo, p % wo);
            let flat = v.flat_in(plane).ok_or_else(|| g.index_error(UNNAMED, arg, e, v.to_i64()))?;
            let (ih, iw) = (flat / g.w, flat % g.w);
            // The window offset, if the index lies in its window (rows and columns counted
            // from the window's origin `o·s - pad`).
            let i = (ih + ph).wrapping_sub(oh * sh);
            let j = (iw + pw).wrapping_sub(ow * sw);
            if i >= kh || j >= kw {
                return Err(Error::IndexNotInWindow {
                    op: UNNAMED,
                    arg,
                    position: g.pooled_position(e),
                    value: v.to_i64(),
                });
            }
            let (n, c) = (plane_index / g.c, plane_index % g.c);
            let o = word_offset(g, n, c / 16, i * kw + j, p) - base;
            // (Each channel sets its bit once, in a zeroed word: `^` would do the same.)
            write_word(out, o, read_word(out, o) | 1 << (c % 16));
            p += 1;
            if p == positions {
                (plane_index, p) = (plane_index + 1, 0);
            }
        }
        Ok(())
    }

    /// Position by position when every index is in its window; otherwise in row-major order, so
    /// that the first index that is not is the error.
    fn encode_part<I: ArgmaxIndex>(run: Run<'_>, indices: &[I], out: &mut [i8]) -> Result<()> {
        out.fill(0);
        if encode_by_position(run.g, indices, out) {
            return Ok(());
        }
        out.fill(0);
        Self::encode_in_order(run, indices.iter().copied(), out)
    }

    /// Errors: a position whose channel has no bit, several bits, or a bit that points into
    /// padding.
    fn decode<I: ArgmaxIndex>(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, out: &mut [I]) -> Result<()> {
        let p_count = g.positions();
        for (e, dst) in out.iter_mut().enumerate() {
            let (plane_index, p) = (e / p_count, e % p_count);
            let (n, c) = (plane_index / g.c, plane_index % g.c);
            let bit = 1u16 << (c % 16);
            let mut set =
                (0..g.offsets()).filter(|&k| bytes.word(word_offset(g, n, c / 16, k, p)) & bit != 0);
            let content = |reason: String| Error::MaskContent {
                op: UNNAMED,
                arg: "mask",
                position: g.pooled_position(e),
                reason,
            };
            let k = match (set.next(), set.next()) {
                (Some(k), None) => k,
                (None, _) => return Err(content("no window offset has its bit set".into())),
                (Some(a), Some(b)) => {
                    return Err(content(format!("window offsets {a} and {b} both have their bit set")));
                }
            };
            let flat = g
                .flat_of(p, k)
                .ok_or_else(|| content(format!("the bit of window offset {k} points into padding")))?;
            *dst = I::try_from_flat(flat)
                .ok_or_else(|| content(format!("index {flat} does not fit the index type")))?;
        }
        Ok(())
    }

    /// One pair per set bit (so possibly none or several per element), skipping bits that point
    /// into padding and bits of channels past `C`. Never an error.
    fn visit_selected(g: &MaxPoolGeometry, bytes: &MaskBytes<'_>, f: Visitor<'_>) -> Result<()> {
        let (positions, row_bytes) = (g.positions(), word_offset(g, 0, 0, 1, 0));
        for plane_index in 0..g.planes() {
            let (n, c) = (plane_index / g.c, plane_index % g.c);
            let (bit, first_word) = (1 << (c % 16), word_offset(g, n, c / 16, 0, 0));
            for p in 0..positions {
                for k in 0..g.offsets() {
                    if bytes.word(first_word + k * row_bytes + 2 * p) & bit != 0
                        && let Some(flat) = g.flat_of(p, k)
                    {
                        f(plane_index * positions + p, flat);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Byte offset of the `Bitmask` word `(n, c1, k, p)` of a mask of the sizes of `g`.
#[inline]
pub(crate) fn word_offset(g: &MaxPoolGeometry, n: usize, c1: usize, k: usize, p: usize) -> usize {
    2 * (((n * g.channel_blocks() + c1) * g.offsets() + k) * g.row_words() + p)
}

/// The `Bitmask` word at byte `offset`.
#[inline]
pub(crate) fn read_word(bytes: &[i8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset] as u8, bytes[offset + 1] as u8])
}

/// Stores the `Bitmask` word at byte `offset` (little-endian, as [`read_word`] reads it).
#[inline]
pub(crate) fn write_word(bytes: &mut [i8], offset: usize, word: u16) {
    let [lo, hi] = word.to_le_bytes();
    bytes[offset..offset + 2].copy_from_slice(&[lo as i8, hi as i8]);
}

/// `N` consecutive `Bitmask` words from byte `offset` (positions `p..p + N` of one `(n, c1, k)`
/// row), or `None` past the end of `bytes`. A row holds 16 words more than there are positions,
/// so 16 words from any position of a row stay inside that row.
#[inline(always)]
pub(crate) fn read_words<const N: usize>(bytes: &[i8], offset: usize) -> Option<[u16; N]> {
    let run = bytes.get(offset..offset.checked_add(2 * N)?)?;
    Some(core::array::from_fn(|l| u16::from_le_bytes([run[2 * l] as u8, run[2 * l + 1] as u8])))
}

/// Stores `N` consecutive `Bitmask` words from byte `offset` (as [`read_words`] reads them), or
/// `None`, storing nothing, past the end of `bytes`.
#[inline(always)]
pub(crate) fn write_words<const N: usize>(bytes: &mut [i8], offset: usize, words: &[u16; N]) -> Option<()> {
    let run = bytes.get_mut(offset..offset.checked_add(2 * N)?)?;
    for (pair, word) in run.chunks_exact_mut(2).zip(words) {
        let [lo, hi] = word.to_le_bytes();
        pair.copy_from_slice(&[lo as i8, hi as i8]);
    }
    Some(())
}

/// [`read_words`] four to a `u64`: word `4 * q + l` of the run in bits `16 * l..16 * l + 16` of
/// element `q`, so that the lanes of one word can be worked on four at a time.
#[inline(always)]
pub(crate) fn read_word_quads<const Q: usize>(bytes: &[i8], offset: usize) -> Option<[u64; Q]> {
    // (An offset near `usize::MAX` wraps to an empty range, which `get` turns down too.)
    let run: &[u8] = bytemuck::cast_slice(bytes.get(offset..offset.wrapping_add(8 * Q))?);
    let mut quads = [0; Q];
    for (quad, eight) in quads.iter_mut().zip(run.chunks_exact(8)) {
        *quad = u64::from_le_bytes(eight.try_into().unwrap_or_default());
    }
    Some(quads)
}

/// Encodes one block's indices (channel-major, at most 16 channels) position by position: the
/// channels set their bits in the position's window words, which are then stored. Output
/// columns whose windows lie inside the plane's columns go [`LANES`] at a time
/// ([`Block::encode_lanes`]), the others one at a time ([`Block::encode_position`]). `out`
/// must start zeroed. False, with `out` partly written, when some index is not in its window,
/// or when the windows are larger than [`WindowTaps`] covers.
fn encode_by_position<I: ArgmaxIndex>(g: &MaxPoolGeometry, indices: &[I], out: &mut [i8]) -> bool {
    let mut words: Vec<&mut [i8]> = offset_rows(g, out).collect();
    encode_rows_by_position(g, indices, 0..g.ho, &mut words)
}

/// The rows of words of one block's bytes `block`, one per window offset (a row is
/// `word_offset(g, 0, 0, 1, 0)` bytes: at least 32, as a row holds 16 words past its
/// positions).
fn offset_rows<'m>(g: &MaxPoolGeometry, block: &'m mut [i8]) -> impl Iterator<Item = &'m mut [i8]> {
    block.chunks_mut(word_offset(g, 0, 0, 1, 0).max(1)).take(g.offsets())
}

/// [`encode_by_position`] for output rows `rows` of the block: `words[k]` holds the words of
/// window offset `k` from the first of those rows' positions on (at least up to the last).
fn encode_rows_by_position<I: ArgmaxIndex>(
    g: &MaxPoolGeometry,
    indices: &[I],
    rows: Range<usize>,
    words: &mut [&mut [i8]],
) -> bool {
    let Some(taps) = WindowTaps::of(g) else { return false };
    let Some(block) = Block::of(g, &taps, indices) else { return false };
    if words.len() < g.offsets() {
        return false;
    }
    let sw = g.params.stride()[1];
    let first = rows.start * g.wo;
    // Columns whose windows lie inside the plane's columns, `LANES` at a time (the last group
    // ending at the last of them, overlapping the one before: its words are written again, the
    // same); the others, and all of them when they are fewer than `LANES`, one at a time.
    let inner = block.lane_columns();
    let lanes = if inner.len() >= LANES { inner } else { inner.start..inner.start };
    for oh in rows {
        let (row_origin, p) = (block.row_origin(oh), oh * g.wo);
        for ow in lanes.clone().step_by(LANES) {
            let ow = ow.min(lanes.end - LANES);
            if !block.encode_lanes(row_origin, (p + ow, p + ow - first), ow * sw, words) {
                return false;
            }
        }
        for ow in (0..lanes.start).chain(lanes.end..g.wo) {
            if !block.encode_position(row_origin, (p + ow, p + ow - first), ow * sw, words) {
                return false;
            }
        }
    }
    true
}

/// A band of output rows of one `(n, 16-channel)` block's encoding, which threads can encode
/// side by side: its rows, and the words it owns of each window offset's row of words (those of
/// its positions; the last band also owns the words past the last position).
pub(crate) struct RowBand<'m> {
    rows: Range<usize>,
    words: Vec<&'m mut [i8]>,
}

/// The bytes `block` of one block's encoding (as [`LayoutImpl::part_bytes`] gives them) cut
/// into bands of `rows_per_band` output rows (at least 1).
pub(crate) fn row_bands<'m>(
    g: &MaxPoolGeometry,
    block: &'m mut [i8],
    rows_per_band: usize,
) -> Vec<RowBand<'m>> {
    let rows_per_band = rows_per_band.max(1);
    let mut bands: Vec<RowBand<'m>> = (0..g.ho)
        .step_by(rows_per_band)
        .map(|start| RowBand { rows: start..(start + rows_per_band).min(g.ho), words: Vec::new() })
        .collect();
    for mut row in offset_rows(g, block) {
        let count = bands.len();
        for (b, band) in bands.iter_mut().enumerate() {
            let bytes = if b + 1 == count { row.len() } else { (2 * band.rows.len() * g.wo).min(row.len()) };
            let (own, rest) = core::mem::take(&mut row).split_at_mut(bytes);
            band.words.push(own);
            row = rest;
        }
    }
    bands
}

impl RowBand<'_> {
    /// Zeroes the band's words and encodes its rows from the block's `indices` (as
    /// [`LayoutImpl::part_indices`] gives them) position by position: false, with the words
    /// partly written, where the block's whole encoding ([`LayoutImpl::encode_part`]) is needed
    /// (an index not in its window, or windows [`WindowTaps`] does not cover).
    pub(crate) fn encode<I: ArgmaxIndex>(&mut self, g: &MaxPoolGeometry, indices: &[I]) -> bool {
        for words in &mut self.words {
            words.fill(0);
        }
        encode_rows_by_position(g, indices, self.rows.clone(), &mut self.words)
    }
}

/// Output positions encoded together by [`Block::encode_lanes`].
const LANES: usize = 8;

/// One block's indices and what [`encode_by_position`] needs to encode them.
struct Block<'a, I> {
    g: &'a MaxPoolGeometry,
    taps: &'a WindowTaps,
    /// Channel-major: `channels` runs of `g.positions()` indices.
    indices: &'a [I],
    channels: usize,
}

impl<'a, I: ArgmaxIndex> Block<'a, I> {
    /// The block of `indices` (at most 16 channels are encoded) with its windows' `taps`, if it
    /// has positions.
    fn of(g: &'a MaxPoolGeometry, taps: &'a WindowTaps, indices: &'a [I]) -> Option<Self> {
        let channels = indices.len().checked_div(g.positions())?.min(16);
        Some(Block { g, taps, indices, channels })
    }

    /// The flat position of the window origin row `oh·sh - ph` of output row `oh`, modulo 2^64.
    fn row_origin(&self, oh: usize) -> usize {
        let g = self.g;
        (oh * g.params.stride()[0]).wrapping_sub(g.params.padding()[0]).wrapping_mul(g.w)
    }

    /// The output columns whose windows read only columns inside the plane (so that a distance
    /// from the window's origin is a tap exactly when it is one of the window's distances), if
    /// the plane is small enough for distances in `u32` (see [`Block::encode_lanes`]); empty
    /// otherwise.
    fn lane_columns(&self) -> core::ops::Range<usize> {
        let g = self.g;
        let (kw, sw, pw) = (g.params.kernel()[1], g.params.stride()[1], g.params.padding()[1]);
        if g.h * g.w > u32::MAX as usize / 4 {
            return 0..0;
        }
        // (`w + pw - kw` below zero: no window fits in the plane's columns.)
        let Some(room) = (g.w + pw).checked_sub(kw) else { return 0..0 };
        // `ow·sw >= pw` and `ow·sw - pw + kw <= w`.
        let first = pw.div_ceil(sw);
        first..(room / sw + 1).min(g.wo).max(first)
    }

    /// Encodes position `p`, whose window starts at row origin `row_origin` (flat, modulo
    /// 2^64) and column `col + pad` (`col` is `ow·sw`), into word `at` of each offset's `words`.
    /// False when some channel's index is not in its window (or is a tap [`WindowTaps`] leaves
    /// to the exact encoder).
    fn encode_position(
        &self,
        row_origin: usize,
        (p, at): (usize, usize),
        col: usize,
        words: &mut [&mut [i8]],
    ) -> bool {
        let (g, plane, positions) = (self.g, self.g.h * self.g.w, self.g.positions());
        let col_origin = col.wrapping_sub(g.params.padding()[1]);
        let origin = row_origin.wrapping_add(col_origin);
        let mut bits = [0u16; WindowTaps::MAX_OFFSETS];
        for bit in 0..self.channels {
            let Some(flat) = self.indices[bit * positions + p].flat_in(plane) else { return false };
            let Some((k, j)) = self.taps.at(flat.wrapping_sub(origin)) else { return false };
            // A tap whose column is outside the plane: the index is in another row.
            if col_origin.wrapping_add(j) >= g.w {
                return false;
            }
            bits[k] |= 1 << bit;
        }
        for (row, &word) in words.iter_mut().zip(&bits[..g.offsets()]) {
            write_word(row, 2 * at, word);
        }
        true
    }

    /// Encodes the [`LANES`] positions from `p` on, in one output row, whose windows lie inside
    /// the plane's columns ([`Block::lane_columns`]); `col` is the first one's `ow·sw`. Each
    /// lane compares every channel's distance from its window's origin with each of the
    /// window's distances, and sets the channel's bit in the word of the one it equals (at
    /// most one: the distances differ), in loops over the lanes that the compiler vectorises.
    /// Distances are taken modulo 2^32: with planes below 2^30 elements an index in the plane
    /// lies less than 2^31 from any window origin, so only a true tap's distance equals one.
    /// False when some channel's index is outside the plane or its window: its bit is then
    /// missing from all of the lane's words.
    fn encode_lanes(
        &self,
        row_origin: usize,
        (p, at): (usize, usize),
        col: usize,
        words: &mut [&mut [i8]],
    ) -> bool {
        let (g, positions) = (self.g, self.g.positions());
        // Below 2^30 ([`Block::lane_columns`]).
        let plane = (g.h * g.w) as u32;
        let [_, sw] = g.params.stride();
        let origin = row_origin.wrapping_add(col.wrapping_sub(g.params.padding()[1])) as u32;
        let origins: [u32; LANES] = core::array::from_fn(|l| origin.wrapping_add((l * sw) as u32));
        // Each channel's distance from each lane's window origin, where it is below
        // `MAX_SPAN` (every tap's is); `u16::MAX`, which is no tap's, where it is not, or where
        // the index is outside the plane.
        let mut d = [[0u16; LANES]; 16];
        for (bit, d) in d[..self.channels].iter_mut().enumerate() {
            let Some(run) = self.indices.get(bit * positions + p..bit * positions + p + LANES) else {
                return false;
            };
            for l in 0..LANES {
                let flat = run[l].to_u32_wrapping();
                let at = flat.wrapping_sub(origins[l]);
                d[l] = if flat < plane && at < WindowTaps::MAX_SPAN as u32 { at as u16 } else { u16::MAX };
            }
        }
        let mut seen = [0u16; LANES];
        for (row, &tap) in words.iter_mut().zip(&self.taps.distances[..g.offsets()]) {
            // Channel `c`'s bit shifted in last but `c` (a shift by a variable would not
            // vectorise on 16-bit lanes).
            let mut word = [0u16; LANES];
            for d in d[..self.channels].iter().rev() {
                for l in 0..LANES {
                    word[l] = word[l] << 1 | u16::from(d[l] == tap);
                }
            }
            for l in 0..LANES {
                seen[l] |= word[l];
            }
            if write_words(row, 2 * at, &word).is_none() {
                return false;
            }
        }
        let every = ((1u32 << self.channels) - 1) as u16;
        seen.iter().all(|&s| s == every)
    }
}

/// The taps of a pooling window by their distance `d` (flat, row-major) from the window's
/// origin: `d = i·W + j` for the tap in row `i < kH` and column `j < min(kW, W)` of the window,
/// which is window offset `i·kW + j`. A distance that is not a tap, or a tap whose column lies
/// outside the plane, is not in the window; a tap in a column `j >= W` (kernels wider than the
/// plane) is not found here, and is left to the exact encoder.
struct WindowTaps {
    /// `k` and `j`, a byte each (`u16::from_le_bytes([k, j])`), per distance below `kH · W`,
    /// or [`WindowTaps::NONE`]: as long as the span, so that building the table of a small
    /// window costs little.
    taps: Vec<u16>,
    /// The distance `i·W + j` of window offset `k = i·kW + j` (below [`WindowTaps::MAX_SPAN`]),
    /// or [`WindowTaps::NOT_A_DISTANCE`] for a tap in a column past the plane's width (which
    /// [`Block::encode_lanes`] never meets: it takes windows inside the plane's columns).
    distances: [u16; WindowTaps::MAX_OFFSETS],
}

impl WindowTaps {
    /// Windows of up to this many offsets (one word each per position, on the stack).
    const MAX_OFFSETS: usize = 64;
    /// Distances up to this (`kH · W`).
    const MAX_SPAN: usize = 16384;
    const NONE: u16 = u16::MAX;
    /// Equal to no distance [`Block::encode_lanes`] compares: those are below
    /// [`WindowTaps::MAX_SPAN`], or `u16::MAX`.
    const NOT_A_DISTANCE: u16 = u16::MAX - 1;

    fn of(g: &MaxPoolGeometry) -> Option<Self> {
        let ([kh, kw], w) = (g.params.kernel(), g.w);
        let span = kh.checked_mul(w).filter(|&s| s <= Self::MAX_SPAN)?;
        if g.offsets() > Self::MAX_OFFSETS {
            return None;
        }
        let mut taps = vec![Self::NONE; span];
        let mut distances = [Self::NOT_A_DISTANCE; Self::MAX_OFFSETS];
        for i in 0..kh {
            for j in 0..kw.min(w) {
                // Both below 64 (checked above): a byte each.
                taps[i * w + j] = u16::from_le_bytes([(i * kw + j) as u8, j as u8]);
                // Below `MAX_SPAN`, 16384: a `u16`.
                distances[i * kw + j] = (i * w + j) as u16;
            }
        }
        Some(WindowTaps { taps, distances })
    }

    /// The window offset `k` and column `j` of the tap at distance `d`, if it is one.
    #[inline(always)]
    fn at(&self, d: usize) -> Option<(usize, usize)> {
        match *self.taps.get(d)? {
            Self::NONE => None,
            t => {
                let [k, j] = t.to_le_bytes();
                Some((usize::from(k), usize::from(j)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draws::Draws;
    use crate::params::MaxPool2dParams;

    /// Every index of every plane at every position of small poolings (kernels wider than the
    /// plane included): the position-by-position encoder accepts exactly the indices inside
    /// their window (it may leave those in columns past the plane's width, for kernels wider
    /// than it, to the exact encoder), and writes the bit of their window offset.
    #[test]
    fn encode_by_position_accepts_exactly_the_window() {
        let mut checked = 0;
        for (kh, kw, sh, sw, ceil) in itertools_like() {
            for (ph, pw) in [(0, 0), (kh / 2, kw / 2)] {
                for (h, w) in (1..=4).flat_map(|h| (1..=4).map(move |w| (h, w))) {
                    let params = MaxPool2dParams::new([kh, kw])
                        .with_stride([sh, sw])
                        .with_padding([ph, pw])
                        .with_ceil_mode(ceil);
                    let Ok(g) = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 1, h, w]) else {
                        continue;
                    };
                    // A valid index per position (its window's first tap inside the plane).
                    let first_tap = |p: usize| (0..g.offsets()).find_map(|k| g.flat_of(p, k));
                    let Some(valid): Option<Vec<i64>> =
                        (0..g.positions()).map(|p| first_tap(p).map(|f| f as i64)).collect()
                    else {
                        continue;
                    };
                    let bytes = g.bytes().unwrap();
                    for p in 0..g.positions() {
                        for flat in 0..h * w {
                            let mut indices = valid.clone();
                            indices[p] = flat as i64;
                            // Reference: the window offset of each index, from rows and columns.
                            let offset = |p: usize, f: usize| {
                                let (oh, ow, ih, iw) = (p / g.wo, p % g.wo, f / w, f % w);
                                let i = (ih + ph).checked_sub(oh * sh).filter(|&i| i < kh)?;
                                let j = (iw + pw).checked_sub(ow * sw).filter(|&j| j < kw)?;
                                Some((i * kw + j, j))
                            };
                            let mut out = vec![0i8; bytes];
                            let fast = encode_by_position(&g, &indices, &mut out);
                            // Taps in columns past the plane's width may be left to the exact encoder.
                            let wide = || {
                                indices
                                    .iter()
                                    .enumerate()
                                    .any(|(q, &f)| offset(q, f as usize).unwrap().1 >= w)
                            };
                            match offset(p, flat) {
                                None => assert!(!fast, "{params:?} {h}x{w}: p {p} accepted {flat}"),
                                Some(_) if !fast => {
                                    assert!(wide(), "{params:?} {h}x{w}: p {p} refused {flat}")
                                }
                                Some(_) => {
                                    let mut expected = vec![0i8; bytes];
                                    for (q, &f) in indices.iter().enumerate() {
                                        let (k, _) = offset(q, f as usize).unwrap();
                                        expected[word_offset(&g, 0, 0, k, q)] |= 1;
                                    }
                                    assert_eq!(out, expected, "{params:?} {h}x{w}: p {p}, index {flat}");
                                }
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// The position-by-position encoder covers windows of at most 64 offsets and 16384
    /// distances `kH · W`, and leaves larger ones to the exact encoder (worked from the limits:
    /// 8x8 and 16x4 are 64 offsets, 5x13 is 65; 16 rows of a 1024-wide plane span 16384, of a
    /// 1025-wide one 16400; 3 rows of a 2048-wide plane, 6144).
    #[test]
    fn window_taps_cover_64_offsets_and_16384_distances() {
        let covered = |kernel: [usize; 2], w: usize| {
            let params = MaxPool2dParams::new(kernel).with_stride([1, 1]);
            let g = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 1, kernel[0], w]).unwrap();
            WindowTaps::of(&g).is_some()
        };
        assert!(covered([8, 8], 8));
        assert!(!covered([5, 13], 13));
        assert!(!covered([13, 5], 5));
        assert!(covered([16, 4], 1024));
        assert!(!covered([16, 4], 1025));
        assert!(covered([3, 3], 2048));
    }

    /// Windows too large for [`WindowTaps`] (9x9, 81 offsets) are encoded all the same: a
    /// `Bitmask` made from indices decodes to those indices (every window's maximum at a
    /// different tap, walking the window).
    #[test]
    fn masks_of_windows_past_64_offsets_round_trip() {
        use crate::mask::{Bitmask, Mask};
        let params = MaxPool2dParams::new([9, 9]).with_stride([2, 3]).with_padding([4, 4]);
        let g = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 3, 11, 12]).unwrap();
        let indices = ndarray::Array4::from_shape_fn((1, 3, g.ho, g.wo), |(_, c, oh, ow)| {
            let p = oh * g.wo + ow;
            // The first tap inside the plane at or after offset `7 p + c`, cyclically.
            let k =
                (0..g.offsets()).map(|t| (7 * p + c + t) % g.offsets()).find(|&k| g.flat_of(p, k).is_some());
            g.flat_of(p, k.unwrap()).unwrap() as i64
        });
        let mask = Mask::<Bitmask, _>::from_indices(&indices, &params, &[1, 3, 11, 12]).unwrap();
        assert_eq!(mask.to_indices::<i64>().unwrap(), indices);
    }

    /// The lane encoder ([`Block::encode_lanes`]) against the exact encoder, which reads the
    /// indices in row-major order and finds each window offset from rows and columns
    /// ([`encode_in_order`]), and against the position-by-position encoder
    /// ([`Block::encode_position`], the lanes' scalar reference), bit for bit, on drawn
    /// geometries wide enough for lanes (planes 8 to 40 wide, kernels 1 to 4, strides 1 to 3,
    /// padding up to half the kernel, floor and ceil mode, 1 to 16 channels), in `i64` and
    /// `i32`. Half the cases hold one bad index (half of them in the first or last output
    /// column, where windows meet the padding): a neighbour of its tap (a column or a row away:
    /// in the window or not, the element a row before or after an edge window's first or last
    /// column among them), outside the plane (negative, past its end), or a tap plus or minus
    /// 2^32 (equal to a tap in 32-bit lanes). Accepted, with the same bytes, exactly when the
    /// exact encoder accepts.
    #[test]
    fn lanes_encode_as_the_exact_encoder() {
        let mut draws = Draws::new(0x5DEE_CE66_D1CE_4E5B);
        let (mut by_lanes, mut refused) = (0, 0);
        for _ in 0..2000 {
            let (kh, kw) = (1 + draws.below(4), 1 + draws.below(4));
            let (sh, sw) = (1 + draws.below(3), 1 + draws.below(3));
            let (ph, pw) = (draws.below(kh / 2 + 1), draws.below(kw / 2 + 1));
            let (h, w, c) = (kh + draws.below(6), 8 + draws.below(33), 1 + draws.below(16));
            let params = MaxPool2dParams::new([kh, kw])
                .with_stride([sh, sw])
                .with_padding([ph, pw])
                .with_ceil_mode(draws.below(2) == 1);
            let Ok(g) = MaxPoolGeometry::for_mask("test", "input", &params, &[1, c, h, w]) else { continue };
            let (positions, plane) = (g.positions(), (h * w) as i64);
            let mut indices: Vec<i64> = (0..c * positions)
                .map(|e| {
                    let taps: Vec<usize> =
                        (0..g.offsets()).filter_map(|k| g.flat_of(e % positions, k)).collect();
                    taps[draws.below(taps.len())] as i64
                })
                .collect();
            if draws.below(2) == 0 {
                // At an edge column half the time, where windows meet padding.
                let e = match draws.below(4) {
                    0 => draws.below(c * g.ho) * g.wo,
                    1 => draws.below(c * g.ho) * g.wo + g.wo - 1,
                    _ => draws.below(indices.len()),
                };
                let v = indices[e];
                indices[e] = match draws.below(8) {
                    0 => v + 1,
                    1 => v - 1,
                    2 => v + w as i64,
                    3 => v - w as i64,
                    4 => -1 - draws.below(3) as i64,
                    5 => plane + draws.below(3) as i64,
                    6 => v + (1 << 32),
                    _ => v - (1 << 32),
                };
            }
            let bytes = g.bytes().unwrap();
            let exact = exactly_encoded(&g, &indices);
            let accepted = exact.is_some();
            let taps = WindowTaps::of(&g).unwrap();
            let block = Block::of(&g, &taps, &indices[..]).unwrap();
            let mut alone = vec![0i8; bytes];
            let mut rows: Vec<&mut [i8]> = offset_rows(&g, &mut alone).collect();
            let one_by_one = (0..positions)
                .all(|p| block.encode_position(block.row_origin(p / g.wo), (p, p), p % g.wo * sw, &mut rows));
            let case = format!("{params:?} on [1, {c}, {h}, {w}]");
            assert_eq!(one_by_one, accepted, "{case}: position by position");
            // Bands of any height, each encoding its own rows (over bytes that start as garbage),
            // accept together exactly when the exact encoder does, with its bytes.
            // (The block's bytes: the mask's first part.)
            let rows_per_band = 1 + draws.below(g.ho);
            let mut banded = vec![-1i8; word_offset(&g, 0, 1, 0, 0)];
            let all =
                row_bands(&g, &mut banded, rows_per_band).iter_mut().all(|band| band.encode(&g, &indices));
            assert_eq!(all, accepted, "{case}: bands of {rows_per_band} rows");
            if let (true, Some(exact)) = (all, &exact) {
                assert_eq!(banded[..], exact[..banded.len()], "{case}: bands of {rows_per_band} rows");
            }
            let narrow: Option<Vec<i32>> = indices.iter().map(|&v| i32::try_from(v).ok()).collect();
            for fast in [Some(&indices[..]).map(|i| encoded(&g, i)), narrow.map(|i| encoded(&g, &i))]
                .into_iter()
                .flatten()
            {
                match fast {
                    Some(fast) => {
                        assert!(accepted, "{case}: accepted by lanes, refused by the exact encoder");
                        assert_eq!(Some(&fast), exact.as_ref(), "{case}");
                        assert_eq!(fast, alone, "{case}");
                    }
                    None => assert!(!accepted, "{case}: refused by lanes, accepted by the exact encoder"),
                }
            }
            by_lanes += usize::from(accepted && block.lane_columns().len() >= LANES);
            refused += usize::from(!accepted);
        }
        // Both outcomes, and the lanes, drawn often (worked out from the draws: most of the
        // planes are wide enough, half the cases hold a bad index, most of which is refused).
        assert!(by_lanes > 500 && refused > 300, "{by_lanes} accepted through lanes, {refused} refused");
    }

    /// An index one past the plane (`H·W`) lies at the distance of a tap in the row below the
    /// plane, which a window reaching into the bottom padding has: every encoder refuses it
    /// there, through the lanes too (the window of output row 3, column 1, of a k3 s1 p1 pooling
    /// of 4x16 planes starts at input row 2, column 0; its tap (2, 0) would be element 64).
    #[test]
    fn an_index_one_past_the_plane_is_refused_in_the_bottom_padding() {
        let params = MaxPool2dParams::new([3, 3]).with_stride([1, 1]).with_padding([1, 1]);
        let g = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 2, 4, 16]).unwrap();
        let taps = WindowTaps::of(&g).unwrap();
        let lanes = Block::<i64>::of(&g, &taps, &[]).unwrap().lane_columns();
        assert!(lanes.contains(&1) && lanes.len() >= LANES, "{lanes:?}");
        let (positions, wo) = (g.positions(), g.wo);
        for (channel, at) in [(0, 3 * wo + 1), (1, 3 * wo + 1)] {
            let mut indices: Vec<i64> =
                (0..2 * positions).map(|e| g.flat_of(e % positions, 4).unwrap() as i64).collect();
            assert!(encoded(&g, &indices).is_some(), "the window centres encode");
            indices[channel * positions + at] = 64;
            assert_eq!(exactly_encoded(&g, &indices), None, "the exact encoder refuses 64 at position {at}");
            assert_eq!(encoded(&g, &indices), None, "channel {channel}, position {at} (i64)");
            let narrow: Vec<i32> = indices.iter().map(|&v| v as i32).collect();
            assert_eq!(encoded(&g, &narrow), None, "channel {channel}, position {at} (i32)");
        }
    }

    /// Lanes take distances modulo 2^32 only on planes below 2^30 elements (see
    /// [`Block::encode_lanes`]): a plane of 2^30 - 1 elements still has lane columns, one of
    /// 2^30 none. (Geometry only: no tensor is made. 2^30 - 1 = 294903 · 3641, a width whose
    /// 1x1 windows [`WindowTaps`] covers.)
    #[test]
    fn lane_columns_stop_at_planes_of_2_pow_30() {
        let lane_columns = |h: usize, w: usize| {
            let params = MaxPool2dParams::new([1, 1]);
            let g = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 1, h, w]).unwrap();
            let taps = WindowTaps::of(&g).expect("1x1 windows of a plane at most 4096 wide");
            Block::<i64>::of(&g, &taps, &[]).unwrap().lane_columns()
        };
        assert_eq!(294903 * 3641, (1 << 30) - 1);
        assert_eq!(lane_columns(294903, 3641), 0..3641);
        assert_eq!(lane_columns(1 << 18, 1 << 12), 0..0);
        // Below the bound the range is the inner columns, whatever the height.
        assert_eq!(lane_columns((1 << 18) - 1, 1 << 12), 0..4096);
    }

    /// The lane columns are exactly the output columns `ow` whose windows lie inside the plane's
    /// columns, `ow·sw >= pw` and `ow·sw - pw + kW <= W`, found here by trying every column
    /// (kernels 1 to 5 wide, as wide as the plane or wider, strides 1 to 3, every padding up to
    /// half the kernel, floor and ceil). A range too narrow would only slow the encoder (the
    /// other columns give the same bytes), one too wide would read taps past the plane's edge.
    #[test]
    fn lane_columns_are_the_windows_inside_the_plane() {
        let mut checked = 0;
        for (kw, sw, ceil) in (1..=5).flat_map(|k| (1..=3).flat_map(move |s| [(k, s, false), (k, s, true)])) {
            for (pw, w) in (0..=kw / 2).flat_map(|p| (1..=30).map(move |w| (p, w))) {
                let params = MaxPool2dParams::new([2, kw])
                    .with_stride([1, sw])
                    .with_padding([0, pw])
                    .with_ceil_mode(ceil);
                let Ok(g) = MaxPoolGeometry::for_mask("test", "input", &params, &[1, 1, 2, w]) else {
                    continue;
                };
                let taps = WindowTaps::of(&g).unwrap();
                let got = Block::<i32>::of(&g, &taps, &[]).unwrap().lane_columns();
                let inside = |ow: usize| ow * sw >= pw && ow * sw - pw + kw <= w;
                let want: Vec<usize> = (0..g.wo).filter(|&ow| inside(ow)).collect();
                assert_eq!(
                    got.clone().collect::<Vec<_>>(),
                    want,
                    "kernel {kw}, stride {sw}, pad {pw}, width {w}"
                );
                checked += usize::from(!want.is_empty());
            }
        }
        assert!(checked > 1500, "{checked} geometries with lane columns");
    }

    /// [`encode_in_order`] (the exact encoder) into a zeroed mask: the bytes, or `None` where it
    /// refuses.
    fn exactly_encoded(g: &MaxPoolGeometry, indices: &[i64]) -> Option<Vec<i8>> {
        let mut out = vec![0i8; g.bytes().unwrap()];
        let values = indices.iter().copied();
        Bitmask::encode_in_order(Run::whole(g, "mask"), values, &mut out).ok().map(|()| out)
    }

    /// [`encode_by_position`] into a zeroed mask: the bytes, or `None` where it refuses.
    fn encoded<I: ArgmaxIndex>(g: &MaxPoolGeometry, indices: &[I]) -> Option<Vec<i8>> {
        let mut out = vec![0i8; g.bytes().unwrap()];
        encode_by_position(g, indices, &mut out).then_some(out)
    }

    /// Kernels 1 to 3, strides 1 and 2, floor and ceil mode.
    fn itertools_like() -> impl Iterator<Item = (usize, usize, usize, usize, bool)> {
        (1..=3).flat_map(|kh| {
            (1..=3).flat_map(move |kw| {
                (1..=2).flat_map(move |sh| {
                    (1..=2).flat_map(move |sw| [false, true].into_iter().map(move |c| (kh, kw, sh, sw, c)))
                })
            })
        })
    }
}
