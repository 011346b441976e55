//! The Ascend int8 mask of `aclnnMaxPool2dWithMask` in both of its layouts, and every encoding
//! and decoding of it (this module is the only place that knows the byte layout).
//!
//! The mask has shape `[N, C, kH·kW, (⌈Ho·Wo/16⌉ + 1)·32]` (3-D input: without `N`) whatever the
//! layout; its bytes mean different things:
//!
//! - [`I32Argmax`] (Atlas A2/A3, kernels other than 1x1): little-endian `i32` flat arg-max values
//!   `ih·W + iw`, packed in `N, C, Ho, Wo` order from byte 0; the rest of the buffer is not read
//!   (the forward writes zeros there).
//! - [`Bitmask`] (Atlas training and 310P, and 1x1 kernels on A2): `u16` words
//!   `[N][⌈C/16⌉][kH·kW][⌈Ho·Wo/16⌉ + 1][16]`; bit `b` (least significant first) of word
//!   `(n, c1, k, p)` says that channel `16·c1 + b` had its first maximum at window offset
//!   `k = i·kW + j` for output position `p = oh·Wo + ow`. Bits of channels `>= C` and words past
//!   `Ho·Wo` are ignored, and the forward leaves them zero.
//!
//! The byte offsets are those of the flat, row-major buffer: the `[N, C, kH·kW, ...]` shape is only
//! a container.

use core::fmt;
use core::marker::PhantomData;

use ndarray::{Array, ArrayBase, ArrayView4, Data, Dimension};

use crate::alloc::into_array;
use crate::element::sealed::Sealed;
use crate::error::{Error, Result};
use crate::geometry::{mask_shape, mask_words_per_row, pool_window_origin};
use crate::index::ArgmaxIndex;
use crate::params::MaxPool2dParams;
use crate::tensor::{TensorMut, TensorRef, user_dims};
use crate::validate::MaxPoolGeometry;

pub(crate) mod layout_repr {
    /// Which layout a marker stands for. Not part of the public API.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LayoutKind {
        I32Argmax,
        Bitmask,
    }

    /// Maps a layout marker to its kind. Not part of the public API.
    pub trait LayoutRepr {
        const KIND: LayoutKind;
    }
}

use layout_repr::{LayoutKind, LayoutRepr};

/// A layout of the Ascend int8 mask: [`I32Argmax`] or [`Bitmask`]. Sealed.
pub trait MaskLayout: Sealed + LayoutRepr + fmt::Debug + Send + Sync + 'static {
    /// The layout's name, for messages.
    const NAME: &'static str;
}

/// The layout Atlas A2/A3 write for kernels other than 1x1: `i32` flat arg-max values packed from
/// byte 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum I32Argmax {}

/// The legacy layout (Atlas training, 310P, and 1x1 kernels on A2): one bit per channel in
/// 16-channel `u16` words, one word per window offset and output position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bitmask {}

impl Sealed for I32Argmax {}
impl Sealed for Bitmask {}
impl LayoutRepr for I32Argmax {
    const KIND: LayoutKind = LayoutKind::I32Argmax;
}
impl LayoutRepr for Bitmask {
    const KIND: LayoutKind = LayoutKind::Bitmask;
}
impl MaskLayout for I32Argmax {
    const NAME: &'static str = "I32Argmax";
}
impl MaskLayout for Bitmask {
    const NAME: &'static str = "Bitmask";
}

/// Mask-specific sizes and checks of a max pooling.
impl MaxPoolGeometry {
    /// Checks `params` for a mask operation (dilation 1) on an input of shape `input_dims`.
    pub(crate) fn for_mask(
        op: &'static str,
        arg: &'static str,
        params: &MaxPool2dParams,
        input_dims: &[usize],
    ) -> Result<Self> {
        params.check_mask_op(op)?;
        let g = MaxPoolGeometry::new(op, arg, params, input_dims)?;
        if g.bytes().is_none() {
            // The kernel is at fault when its offsets alone overflow the smallest mask (one
            // plane, one output: rows of 64 bytes); otherwise the input's size.
            let [kh, kw] = params.kernel();
            let kernel_alone = kh.checked_mul(kw).and_then(|k| k.checked_mul(64)).is_none();
            let what = format!(
                "the mask of N·C·kH·kW·(⌈Ho·Wo/16⌉ + 1)·32 bytes, for {}, exceeds usize::MAX",
                g.describe()
            );
            return Err(Error::Overflow { op, arg: if kernel_alone { "kernel" } else { arg }, what });
        }
        Ok(g)
    }

    pub(crate) fn offsets(&self) -> usize {
        self.params.kernel()[0] * self.params.kernel()[1]
    }

    pub(crate) fn channel_blocks(&self) -> usize {
        self.c.div_ceil(16)
    }

    /// The planes (`n * C + c`) of `Bitmask` block `b = n * channel_blocks + c1`: its channels
    /// `16 * c1 ..` (16, or fewer in the last block of a batch), consecutive planes.
    pub(crate) fn block_planes(&self, b: usize) -> core::ops::Range<usize> {
        block_planes(self.c, b)
    }

    /// `u16` words per `(n, c1, k)` row.
    pub(crate) fn row_words(&self) -> usize {
        // Checked in `new` (through `shape4`).
        mask_words_per_row(self.positions()).unwrap_or(0)
    }

    pub(crate) fn shape4(&self) -> Option<[usize; 4]> {
        mask_shape(self.n, self.c, self.params.kernel(), [self.ho, self.wo])
    }

    /// The mask shape in the caller's rank.
    pub(crate) fn dims(&self) -> Vec<usize> {
        user_dims(&self.shape4().unwrap_or_default(), self.ndim)
    }

    pub(crate) fn bytes(&self) -> Option<usize> {
        self.shape4()?.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Byte offset of the `Bitmask` word `(n, c1, k, p)`.
    #[inline]
    pub(crate) fn word_offset(&self, n: usize, c1: usize, k: usize, p: usize) -> usize {
        2 * (((n * self.channel_blocks() + c1) * self.offsets() + k) * self.row_words() + p)
    }

    /// The flat input index read by window offset `k` of output position `p`, or `None` in padding.
    #[inline]
    pub(crate) fn flat_of(&self, p: usize, k: usize) -> Option<usize> {
        let kw = self.params.kernel()[1];
        let (oh, ow) = (p / self.wo, p % self.wo);
        let ih = pool_window_origin(oh, self.params.stride()[0], self.params.padding()[0]) + (k / kw) as i128;
        let iw = pool_window_origin(ow, self.params.stride()[1], self.params.padding()[1]) + (k % kw) as i128;
        let inside = (0..self.h as i128).contains(&ih) && (0..self.w as i128).contains(&iw);
        inside.then(|| ih as usize * self.w + iw as usize)
    }

    /// Phase-1 checks of `L` on these sizes: an `I32Argmax` mask must hold `4·N·C·Ho·Wo` bytes and
    /// planes addressable by `i32`.
    pub(crate) fn check_layout<L: MaskLayout>(&self, op: &'static str) -> Result<()> {
        if L::KIND == LayoutKind::I32Argmax {
            let plane = self.h * self.w;
            if plane as u64 > <i32 as ArgmaxIndex>::MAX_PLANE {
                return Err(Error::IndexTypeTooNarrow {
                    op,
                    arg: "mask",
                    dtype: crate::DType::I32,
                    max: <i32 as ArgmaxIndex>::MAX_PLANE,
                    plane,
                });
            }
            let need = self.planes().saturating_mul(self.positions()).saturating_mul(4);
            let have = self.bytes().unwrap_or(0);
            if need > have {
                return Err(Error::InvalidParameter {
                    op,
                    arg: "mask",
                    expected: format!(
                        "an I32Argmax mask of {have} bytes to hold 4 * N*C*Ho*Wo = {need} bytes \
                         (on Ascend, 1x1 kernels use the Bitmask layout)"
                    ),
                    got: format!("kernel {:?}", self.params.kernel()),
                });
            }
        }
        Ok(())
    }
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

/// A mask's bytes in whatever memory layout its array has, read by their offset in the flat,
/// row-major buffer (the only order the layouts are defined in): directly when the array is in
/// standard layout, through its strides otherwise. Never a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaskBytes<'a> {
    Contiguous(&'a [i8]),
    Strided(ArrayView4<'a, i8>),
}

impl<'a> MaskBytes<'a> {
    /// The bytes of a 3-D or 4-D mask array (as [`Mask`] holds; any other rank reads as empty).
    pub(crate) fn of<D: Dimension>(data: &'a Array<i8, D>) -> Self {
        match data.as_slice() {
            Some(bytes) => MaskBytes::Contiguous(bytes),
            None => match TensorRef::named(data.view(), "Mask", "mask") {
                Ok(t) => MaskBytes::Strided(t.view()),
                Err(_) => MaskBytes::Contiguous(&[]),
            },
        }
    }

    /// The byte at flat offset `offset`.
    #[inline]
    fn byte(&self, offset: usize) -> u8 {
        match self {
            MaskBytes::Contiguous(bytes) => bytes[offset] as u8,
            MaskBytes::Strided(view) => {
                let [_, c, k, row] = dims4_of(view);
                let (rest, x) = (offset / row, offset % row);
                let (rest, kk) = (rest / k, rest % k);
                view[[rest / c, rest % c, kk, x]] as u8
            }
        }
    }

    /// The `Bitmask` word at byte `offset`.
    #[inline]
    pub(crate) fn word(&self, offset: usize) -> u16 {
        match self {
            MaskBytes::Contiguous(bytes) => read_word(bytes, offset),
            MaskBytes::Strided(_) => u16::from_le_bytes([self.byte(offset), self.byte(offset + 1)]),
        }
    }

    /// `I32Argmax` value `e` (little-endian, from byte `4·e`).
    #[inline]
    pub(crate) fn value(&self, e: usize) -> i32 {
        i32::from_le_bytes(core::array::from_fn(|b| self.byte(4 * e + b)))
    }
}

fn dims4_of(view: &ArrayView4<'_, i8>) -> [usize; 4] {
    let (n, c, k, row) = view.dim();
    [n, c.max(1), k.max(1), row.max(1)]
}

/// Writes `indices` (`N·C·Ho·Wo` flat arg-max values, row-major) into the contiguous mask `out`
/// in layout `kind`; every other byte becomes zero.
///
/// Errors: an index outside the plane; for `Bitmask`, an index outside its window.
pub(crate) fn encode<I: ArgmaxIndex>(
    op: &'static str,
    arg: &'static str,
    kind: LayoutKind,
    g: &MaxPoolGeometry,
    indices: &[I],
    out: &mut [i8],
) -> Result<()> {
    let parts = EncodeParts::new(kind, g, indices.len(), out.len());
    let (body, tail) = out.split_at_mut(parts.tail().start.min(out.len()));
    tail.fill(0);
    parts.encode_runs(op, arg, g, 0..parts.count(), indices, body)
}

/// How an encoding splits into independent parts (for threads): `I32Argmax` into runs of
/// values, `Bitmask` into `(n, 16-channel block)`s; each part owns a run of the indices and a
/// run of the mask bytes. The bytes past the last part ([`EncodeParts::tail`]) are only zeroed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EncodeParts {
    kind: LayoutKind,
    /// Parts; all the values (`I32Argmax`); channels, positions and bytes of a block
    /// (`Bitmask`); the mask's bytes.
    count: usize,
    total: usize,
    c: usize,
    positions: usize,
    block_bytes: usize,
    bytes: usize,
}

impl EncodeParts {
    /// `I32Argmax` values per part.
    const RUN: usize = 1 << 16;

    pub(crate) fn new(kind: LayoutKind, g: &MaxPoolGeometry, values: usize, bytes: usize) -> Self {
        let (count, block_bytes) = match kind {
            LayoutKind::I32Argmax => (values.div_ceil(Self::RUN), 0),
            LayoutKind::Bitmask => {
                (if values == 0 { 0 } else { g.n * g.channel_blocks() }, g.word_offset(0, 1, 0, 0))
            }
        };
        EncodeParts { kind, count, total: values, c: g.c, positions: g.positions(), block_bytes, bytes }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The element (row-major, in the indices) of the part's first index.
    pub(crate) fn first_element(&self, part: usize) -> usize {
        self.indices(part).start
    }

    pub(crate) fn indices(&self, part: usize) -> core::ops::Range<usize> {
        match self.kind {
            LayoutKind::I32Argmax => part * Self::RUN..((part + 1) * Self::RUN).min(self.total),
            LayoutKind::Bitmask => {
                let planes = block_planes(self.c, part);
                planes.start * self.positions..planes.end * self.positions
            }
        }
    }

    pub(crate) fn bytes(&self, part: usize) -> core::ops::Range<usize> {
        match self.kind {
            LayoutKind::I32Argmax => {
                let values = self.indices(part);
                4 * values.start..4 * values.end
            }
            LayoutKind::Bitmask => part * self.block_bytes..(part + 1) * self.block_bytes,
        }
    }

    /// Encodes parts `runs` (consecutive) of `indices` into `out`, their bytes (from the first
    /// part's first byte on).
    pub(crate) fn encode_runs<I: ArgmaxIndex>(
        &self,
        op: &'static str,
        arg: &'static str,
        g: &MaxPoolGeometry,
        runs: core::ops::Range<usize>,
        indices: &[I],
        out: &mut [i8],
    ) -> Result<()> {
        let base = self.bytes(runs.start).start;
        for part in runs {
            let bytes = self.bytes(part);
            let out = &mut out[bytes.start - base..bytes.end - base];
            self.encode_part(op, arg, g, part, &indices[self.indices(part)], out)?;
        }
        Ok(())
    }

    /// Encodes part `part` from its own indices (elements [`EncodeParts::indices`] of the whole)
    /// into its own bytes ([`EncodeParts::bytes`] of the mask).
    pub(crate) fn encode_part<I: ArgmaxIndex>(
        &self,
        op: &'static str,
        arg: &'static str,
        g: &MaxPoolGeometry,
        part: usize,
        indices: &[I],
        out: &mut [i8],
    ) -> Result<()> {
        encode_part(op, arg, self.kind, g, self.first_element(part), indices, out)
    }

    /// The bytes after the last part.
    pub(crate) fn tail(&self) -> core::ops::RangeFrom<usize> {
        match self.count {
            0 => 0..,
            n => self.bytes(n - 1).end.min(self.bytes)..,
        }
    }
}

/// See [`MaxPoolGeometry::block_planes`] (`c` channels; no planes without channels).
fn block_planes(c: usize, b: usize) -> core::ops::Range<usize> {
    let c1s = c.div_ceil(16);
    let first = |b: usize| (b / c1s) * c + ((b % c1s) * 16).min(c);
    if c1s == 0 { 0..0 } else { first(b)..first(b + 1) }
}

/// Encodes one part (see [`EncodeParts`]): `indices` from element `first` on, into `out`, which
/// it fills entirely (zeros where no bit or value goes).
fn encode_part<I: ArgmaxIndex>(
    op: &'static str,
    arg: &'static str,
    kind: LayoutKind,
    g: &MaxPoolGeometry,
    first: usize,
    indices: &[I],
    out: &mut [i8],
) -> Result<()> {
    out.fill(0);
    // One (n, 16-channel block) of a `Bitmask`: position by position when every index is in its
    // window; otherwise in row-major order, so that the first index that is not is the error.
    if kind == LayoutKind::Bitmask {
        if encode_by_position(g, indices, out) {
            return Ok(());
        }
        out.fill(0);
    }
    // A `Bitmask` part starts at a block's first plane: at its word `(k = 0, p = 0)`.
    let plane = first / g.positions().max(1);
    let base = g.word_offset(plane / g.c.max(1), plane % g.c.max(1) / 16, 0, 0);
    encode_in_order(op, arg, kind, g, first, base, indices.iter().copied(), out)
}

/// Encodes `values`, the indices of the pooled output from element `first` on in row-major
/// order, into `out`, which must start zeroed: the `I32Argmax` bytes of those values, or the
/// `Bitmask` bytes from byte `base` of the mask on (`base` is not used for `I32Argmax`). Reads each
/// index once, in order (so any strided or broadcast source works without a copy), and stops at
/// the first one that is outside its plane or, for `Bitmask`, outside its window.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_in_order<I: ArgmaxIndex>(
    op: &'static str,
    arg: &'static str,
    kind: LayoutKind,
    g: &MaxPoolGeometry,
    first: usize,
    base: usize,
    values: impl Iterator<Item = I>,
    out: &mut [i8],
) -> Result<()> {
    let plane = g.h * g.w;
    let (positions, wo) = (g.positions().max(1), g.wo.max(1));
    let bad = |e: usize, v: I| Error::IndexOutOfRange {
        op,
        arg,
        position: g.pooled_position(e),
        value: v.to_i64(),
        plane,
    };
    match kind {
        LayoutKind::I32Argmax => {
            for ((e, v), dst) in (first..).zip(values).zip(out.chunks_exact_mut(4)) {
                let flat = v.flat_in(plane).ok_or_else(|| bad(e, v))?;
                for (d, b) in dst.iter_mut().zip((flat as i32).to_le_bytes()) {
                    *d = b as i8;
                }
            }
        }
        LayoutKind::Bitmask => {
            let [kh, kw] = g.params.kernel();
            let ([sh, sw], [ph, pw]) = (g.params.stride(), g.params.padding());
            // The element's plane and position, advanced one element at a time.
            let (mut plane_index, mut p) = (first / positions, first % positions);
            for (e, v) in (first..).zip(values) {
                let (oh, ow) = (p / wo, p % wo);
                let flat = v.flat_in(plane).ok_or_else(|| bad(e, v))?;
                let (ih, iw) = (flat / g.w, flat % g.w);
                // The window offset, if the index lies in its window (rows and columns counted
                // from the window's origin `o·s - pad`).
                let i = (ih + ph).wrapping_sub(oh * sh);
                let j = (iw + pw).wrapping_sub(ow * sw);
                if i >= kh || j >= kw {
                    return Err(Error::IndexNotInWindow {
                        op,
                        arg,
                        position: g.pooled_position(e),
                        value: v.to_i64(),
                    });
                }
                let (n, c) = (plane_index / g.c, plane_index % g.c);
                let o = g.word_offset(n, c / 16, i * kw + j, p) - base;
                // (Each channel sets its bit once, in a zeroed word: `^` would do the same.)
                write_word(out, o, read_word(out, o) | 1 << (c % 16));
                p += 1;
                if p == positions {
                    (plane_index, p) = (plane_index + 1, 0);
                }
            }
        }
    }
    Ok(())
}

/// Encodes one block's indices (channel-major, at most 16 channels) position by position: the
/// channels set their bits in the position's window words, which are then stored. `out` must
/// start zeroed. False, with `out` partly written, when some index is not in its window, or
/// when the windows are larger than [`WindowTaps`] covers.
fn encode_by_position<I: ArgmaxIndex>(g: &MaxPoolGeometry, indices: &[I], out: &mut [i8]) -> bool {
    let ([sh, sw], [ph, pw]) = (g.params.stride(), g.params.padding());
    let (w, plane, positions, offsets) = (g.w, g.h * g.w, g.positions(), g.offsets());
    let Some(taps) = WindowTaps::new(g) else { return false };
    if positions == 0 {
        return false;
    }
    let (channels, row_bytes) = (indices.len() / positions, g.word_offset(0, 0, 1, 0));
    for oh in 0..g.ho {
        // The flat position of the window's origin `(oh·sh - ph, ow·sw - pw)`, modulo 2^64.
        let row_origin = (oh * sh).wrapping_sub(ph).wrapping_mul(w);
        for ow in 0..g.wo {
            let (p, col_origin) = (oh * g.wo + ow, (ow * sw).wrapping_sub(pw));
            let origin = row_origin.wrapping_add(col_origin);
            let mut words = [0u16; WindowTaps::MAX_OFFSETS];
            for bit in 0..channels.min(16) {
                let Some(flat) = indices[bit * positions + p].flat_in(plane) else { return false };
                let Some((k, j)) = taps.at(flat.wrapping_sub(origin)) else { return false };
                // A tap whose column is outside the plane: the index is in another row.
                if col_origin.wrapping_add(j) >= w {
                    return false;
                }
                words[k] |= 1 << bit;
            }
            for (k, &word) in words[..offsets].iter().enumerate() {
                write_word(out, k * row_bytes + 2 * p, word);
            }
        }
    }
    true
}

/// The taps of a pooling window by their distance `d` (flat, row-major) from the window's
/// origin: `d = i·W + j` for the tap in row `i < kH` and column `j < min(kW, W)` of the window,
/// which is window offset `i·kW + j`. A distance that is not a tap, or a tap whose column lies
/// outside the plane, is not in the window; a tap in a column `j >= W` (kernels wider than the
/// plane) is not found here, and is left to the exact encoder.
struct WindowTaps {
    /// `k | j << 8` per distance, or [`WindowTaps::NONE`].
    taps: [u16; WindowTaps::MAX_SPAN],
    span: usize,
}

impl WindowTaps {
    /// Windows of up to this many offsets (one word each per position, on the stack).
    const MAX_OFFSETS: usize = 64;
    /// Distances up to this (`kH · W`).
    const MAX_SPAN: usize = 4096;
    const NONE: u16 = u16::MAX;

    fn new(g: &MaxPoolGeometry) -> Option<Self> {
        let ([kh, kw], w) = (g.params.kernel(), g.w);
        let span = kh.checked_mul(w).filter(|&s| s <= Self::MAX_SPAN)?;
        if g.offsets() > Self::MAX_OFFSETS {
            return None;
        }
        let mut taps = [Self::NONE; Self::MAX_SPAN];
        for i in 0..kh {
            for j in 0..kw.min(w) {
                // Both below 64 (checked above): a byte each.
                taps[i * w + j] = (i * kw + j) as u16 | (j as u16) << 8;
            }
        }
        Some(WindowTaps { taps, span })
    }

    /// The window offset `k` and column `j` of the tap at distance `d`, if it is one.
    #[inline(always)]
    fn at(&self, d: usize) -> Option<(usize, usize)> {
        match *self.taps[..self.span].get(d)? {
            Self::NONE => None,
            t => Some((usize::from(t & 0xff), usize::from(t >> 8))),
        }
    }
}

/// Reads the flat arg-max index of every output position from the mask `bytes`.
///
/// Errors: an `I32Argmax` value outside the plane; a `Bitmask` position whose channel has no bit,
/// several bits, or a bit that points into padding.
pub(crate) fn decode<I: ArgmaxIndex>(
    op: &'static str,
    arg: &'static str,
    kind: LayoutKind,
    g: &MaxPoolGeometry,
    bytes: &MaskBytes<'_>,
    out: &mut [I],
) -> Result<()> {
    let plane = g.h * g.w;
    let to_index = |flat: usize| I::try_from_flat(flat);
    match kind {
        LayoutKind::I32Argmax => {
            for (e, dst) in out.iter_mut().enumerate() {
                let v = bytes.value(e);
                let flat = (v >= 0 && (v as usize) < plane).then_some(v as usize);
                *dst = flat.and_then(to_index).ok_or_else(|| Error::IndexOutOfRange {
                    op,
                    arg,
                    position: g.pooled_position(e),
                    value: v.into(),
                    plane,
                })?;
            }
        }
        LayoutKind::Bitmask => {
            let p_count = g.positions();
            for (e, dst) in out.iter_mut().enumerate() {
                let (plane_index, p) = (e / p_count, e % p_count);
                let (n, c) = (plane_index / g.c, plane_index % g.c);
                let bit = 1u16 << (c % 16);
                let mut set =
                    (0..g.offsets()).filter(|&k| bytes.word(g.word_offset(n, c / 16, k, p)) & bit != 0);
                let content =
                    |reason: String| Error::MaskContent { op, arg, position: g.pooled_position(e), reason };
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
                *dst = to_index(flat)
                    .ok_or_else(|| content(format!("index {flat} does not fit the index type")))?;
            }
        }
    }
    Ok(())
}

/// The `I32Argmax` values as `i32` without copying, when the bytes allow it (a little-endian host
/// and a 4-byte aligned buffer).
pub(crate) fn i32_prefix(bytes: &[i8], count: usize) -> Option<&[i32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    bytemuck::try_cast_slice(bytes.get(..count.checked_mul(4)?)?).ok()
}

/// Copies the `I32Argmax` values of any mask view (logical row-major byte order) into `out`.
pub(crate) fn read_i32_prefix(view: ArrayView4<'_, i8>, out: &mut [i32]) {
    let mut bytes = view.iter().map(|&b| b as u8);
    for v in out {
        let mut b = [0u8; 4];
        for x in &mut b {
            *x = bytes.next().unwrap_or(0);
        }
        *v = i32::from_le_bytes(b);
    }
}

/// A read-only view of a mask in layout `L`, for the two-phase API.
#[derive(Debug, Clone, Copy)]
pub struct MaskRef<'a, L: MaskLayout> {
    pub(crate) bytes: TensorRef<'a, i8>,
    layout: PhantomData<fn() -> L>,
}

impl<'a, L: MaskLayout> MaskRef<'a, L> {
    /// Treats `bytes` as a mask in layout `L`; its shape is checked by the plan.
    pub fn new(bytes: TensorRef<'a, i8>) -> Self {
        MaskRef { bytes, layout: PhantomData }
    }

    /// The bytes.
    pub fn bytes(&self) -> TensorRef<'a, i8> {
        self.bytes
    }
}

/// A writable view of a mask in layout `L`, for the two-phase API.
#[derive(Debug)]
pub struct MaskMut<'a, L: MaskLayout> {
    pub(crate) bytes: TensorMut<'a, i8>,
    layout: PhantomData<fn() -> L>,
}

impl<'a, L: MaskLayout> MaskMut<'a, L> {
    /// Treats `bytes` as a mask in layout `L`; its shape is checked by the plan.
    pub fn new(bytes: TensorMut<'a, i8>) -> Self {
        MaskMut { bytes, layout: PhantomData }
    }
}

/// An Ascend int8 mask in layout `L`, with the pooling it belongs to.
///
/// ```
/// use ndarray::array;
/// use poolgrad::{Bitmask, I32Argmax, Mask, MaxPool2dParams};
/// let params = MaxPool2dParams::new([2, 2]);
/// let indices = array![[[1i64, 6], [8, 10]]]; // from a 4x4 input
/// let a2 = Mask::<I32Argmax, _>::from_indices(&indices, &params, &[1, 4, 4])?;
/// assert_eq!(a2.as_array().shape(), &[1, 4, 64]);
/// assert_eq!(&a2.as_array().as_slice().unwrap()[..8], &[1, 0, 0, 0, 6, 0, 0, 0]);
/// let legacy = Mask::<Bitmask, _>::from_indices(&indices, &params, &[1, 4, 4])?;
/// assert_eq!(legacy.to_indices::<i64>()?, indices);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug)]
pub struct Mask<L: MaskLayout, D: Dimension> {
    data: Array<i8, D>,
    geometry: MaxPoolGeometry,
    layout: PhantomData<fn() -> L>,
}

impl<L: MaskLayout, D: Dimension> Clone for Mask<L, D> {
    fn clone(&self) -> Self {
        Mask { data: self.data.clone(), geometry: self.geometry, layout: PhantomData }
    }
}

/// Equal when the bytes and the pooling they belong to are equal.
impl<L: MaskLayout, D: Dimension> PartialEq for Mask<L, D> {
    fn eq(&self, other: &Self) -> bool {
        self.geometry == other.geometry && self.data == other.data
    }
}

impl<L: MaskLayout, D: Dimension> Mask<L, D> {
    /// Wraps raw mask bytes (for example copied off a device) for a pooling with `params` of an
    /// input of shape `input_shape`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `data` has the mask shape of that pooling; the errors of
    /// the parameters.
    pub fn from_raw(data: Array<i8, D>, params: &MaxPool2dParams, input_shape: &[usize]) -> Result<Self> {
        const OP: &str = "Mask::from_raw";
        let geometry = MaxPoolGeometry::for_mask(OP, "input_shape", params, input_shape)?;
        geometry.check_layout::<L>(OP)?;
        crate::validate::same_shape(OP, "data", data.shape().to_vec(), geometry.dims())?;
        Ok(Mask { data, geometry, layout: PhantomData })
    }

    /// Encodes flat arg-max indices (shape `[N, C, Ho, Wo]`) as a mask.
    ///
    /// Indices in any memory layout (strided, broadcast, reversed) are read in place, in row-major
    /// order; only the mask is allocated.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for indices of another shape, [`Error::IndexOutOfRange`] for an
    /// index outside the plane, [`Error::IndexNotInWindow`] (`Bitmask`) for an index outside its
    /// window (the first such index in row-major order); [`Error::Allocation`] when the mask does
    /// not fit in memory.
    pub fn from_indices<I, S>(
        indices: &ArrayBase<S, D>,
        params: &MaxPool2dParams,
        input_shape: &[usize],
    ) -> Result<Self>
    where
        I: ArgmaxIndex,
        S: Data<Elem = I>,
    {
        const OP: &str = "Mask::from_indices";
        let geometry = MaxPoolGeometry::for_mask(OP, "input_shape", params, input_shape)?;
        geometry.check_layout::<L>(OP)?;
        crate::validate::same_shape(OP, "indices", indices.shape().to_vec(), geometry.pooled_dims())?;
        let bytes = geometry.bytes().unwrap_or(0);
        let mut data = crate::alloc::zeroed_vec::<i8>(OP, "mask", bytes)?;
        match indices.as_slice() {
            Some(flat) => encode(OP, "indices", L::KIND, &geometry, flat, &mut data)?,
            // Strided or broadcast indices: read in place, in row-major order (the mask is
            // zeroed, as the in-order encoder needs).
            None => {
                encode_in_order(OP, "indices", L::KIND, &geometry, 0, 0, indices.iter().copied(), &mut data)?
            }
        }
        let data = into_array(OP, "mask", data, &geometry.dims())?;
        Ok(Mask { data, geometry, layout: PhantomData })
    }

    /// Decodes the flat arg-max index of every output position (shape `[N, C, Ho, Wo]`).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an `I32Argmax` value outside the plane;
    /// [`Error::MaskContent`] for a `Bitmask` position whose channel has no bit, several bits or
    /// a bit in padding; [`Error::Allocation`] when the indices do not fit in memory.
    pub fn to_indices<I: ArgmaxIndex>(&self) -> Result<Array<I, D>> {
        const OP: &str = "Mask::to_indices";
        let g = &self.geometry;
        let count = g.planes() * g.positions();
        let mut out = crate::alloc::zeroed_vec::<I>(OP, "indices", count)?;
        decode(OP, "mask", L::KIND, g, &MaskBytes::of(&self.data), &mut out)?;
        into_array(OP, "indices", out, &g.pooled_dims())
    }

    /// Every (output element, input position) pair the mask selects, in row-major output order:
    /// `element` indexes the pooled output `[N, C, Ho, Wo]` flattened, `flat = ih * W + iw` the
    /// input plane. An `I32Argmax` mask selects one position per output; a `Bitmask` selects one
    /// per set bit (so possibly none or several), skipping bits that point into padding and bits
    /// of channels past `C`. This is what the backward sums over.
    ///
    /// ```
    /// use ndarray::array;
    /// use poolgrad::{Bitmask, Mask, MaxPool2dParams};
    /// let mask = Mask::<Bitmask, _>::from_indices(&array![[[1i64, 6]]], &MaxPool2dParams::new([2, 2]), &[1, 2, 4])?;
    /// assert_eq!(mask.selected()?, vec![(0, 1), (1, 6)]);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// Reads the mask in place whatever its memory layout, and allocates only the result, at its
    /// exact size.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for an `I32Argmax` value outside the plane (found before
    /// anything is allocated); [`Error::Allocation`] when the pairs do not fit in memory.
    pub fn selected(&self) -> Result<Vec<(usize, usize)>> {
        const OP: &str = "Mask::selected";
        // Two passes: the first finds the first bad value (before anything is allocated) and
        // counts the pairs, so that the result is allocated once, at its exact size.
        let mut count = 0usize;
        self.visit_selected(OP, |_, _| count += 1)?;
        let mut pairs = Vec::new();
        pairs.try_reserve_exact(count).map_err(|_| Error::Allocation {
            op: OP,
            arg: "pairs",
            bytes: count.saturating_mul(size_of::<(usize, usize)>()),
        })?;
        self.visit_selected(OP, |e, flat| pairs.push((e, flat)))?;
        Ok(pairs)
    }

    /// Calls `f(element, flat)` for every pair [`Mask::selected`] returns, in its order.
    fn visit_selected(&self, op: &'static str, mut f: impl FnMut(usize, usize)) -> Result<()> {
        let g = &self.geometry;
        let bytes = MaskBytes::of(&self.data);
        let count = g.planes() * g.positions();
        match L::KIND {
            LayoutKind::I32Argmax => {
                let plane = g.h * g.w;
                for e in 0..count {
                    let v = bytes.value(e);
                    if v < 0 || v as usize >= plane {
                        return Err(g.index_error(op, "mask", e, v.into()));
                    }
                    f(e, v as usize);
                }
            }
            LayoutKind::Bitmask => {
                let (positions, row_bytes) = (g.positions(), g.word_offset(0, 0, 1, 0));
                for plane_index in 0..g.planes() {
                    let (n, c) = (plane_index / g.c, plane_index % g.c);
                    let (bit, first_word) = (1 << (c % 16), g.word_offset(n, c / 16, 0, 0));
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
            }
        }
        Ok(())
    }

    /// The mask bytes.
    pub fn as_array(&self) -> &Array<i8, D> {
        &self.data
    }

    /// The mask bytes, by value.
    pub fn into_array(self) -> Array<i8, D> {
        self.data
    }

    /// The pooling parameters the mask belongs to.
    pub fn params(&self) -> &MaxPool2dParams {
        &self.geometry.params
    }

    /// The shape of the pooled input.
    pub fn input_shape(&self) -> Vec<usize> {
        self.geometry.input_dims()
    }

    /// The shape of the pooled output, `[N, C, Ho, Wo]`.
    pub fn pooled_shape(&self) -> Vec<usize> {
        self.geometry.pooled_dims()
    }

    /// A view for the two-phase API.
    ///
    /// # Errors
    /// None in practice (the mask has rank 3 or 4).
    pub fn view(&self) -> Result<MaskRef<'_, L>> {
        Ok(MaskRef::new(TensorRef::named(self.data.view(), "Mask::view", "mask")?))
    }

    pub(crate) fn from_parts(data: Array<i8, D>, geometry: MaxPoolGeometry) -> Self {
        Mask { data, geometry, layout: PhantomData }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                                        expected[g.word_offset(0, 0, k, q)] |= 1;
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
