//! The Ascend mask operations on the CPU. The forward pools with `i32` indices into the
//! workspace and encodes them; the backward scatters `I32Argmax` values with the shared scatter
//! kernel, and reads `Bitmask` words in 16-channel blocks.

use num_traits::Zero;

use super::Cpu;
use super::forward::{self, ForwardPrepared, Taps, planes_per_task};
use super::maxpool::{planes, prepare_forward, scatter_shape};
use super::scatter::{self, ScatterPrepared};
use super::workspace::{Carver, Sizer};
use crate::alloc::collect_exact;
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::pool_window_taps;
use crate::mask::layout_repr::LayoutKind;
use crate::mask::{self, MaskLayout};
use crate::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward, MaxPoolGeometry};

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMask<'a, T, L>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithMask<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        let mut sizer = Sizer::new("max_pool2d_with_mask");
        sizer.stage(&op.input.view())?;
        sizer.stage(&op.output.as_ref().view())?;
        sizer.stage(&op.mask.bytes.as_ref().view())?;
        sizer.region::<i32>(g.planes() * g.positions())?;
        let prepared = prepare_forward::<T>(self, g, &mut sizer)?;
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: MaxPool2dWithMask<'a, T, L>,
        g: &MaxPoolGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "max_pool2d_with_mask";
        let MaxPool2dWithMask { input, output, mask, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let x = carver.stage(input.view())?;
        let mut out = carver.output(output.into_view())?;
        let mut bytes = carver.output(mask.bytes.into_view())?;
        let idx = carver.region::<i32>(g.planes() * g.positions())?;
        let scratch = p.scratch::<T>(&mut carver)?;
        forward::pool(self, planes(g), &p, x, out.slice(), idx, scratch);
        mask::encode(OP, "mask", L::KIND, g, idx, bytes.slice())?;
        out.finish(OP, "output")?;
        bytes.finish(OP, "mask")
    }
}

/// Phase-1 state of a mask backward.
#[derive(Debug)]
pub enum MaskBackwardPrepared {
    /// Scatter the `I32Argmax` values, read in place or copied into the workspace.
    I32Argmax { scatter: ScatterPrepared, copy_values: bool },
    /// Read the bit mask in 16-channel blocks.
    Bitmask { tasks: usize, acc_per_task: usize, windows: Windows },
}

/// The valid taps of every output row and column, with the window offset of the first one.
#[derive(Debug)]
pub struct Windows {
    rows: Vec<(Taps, usize)>,
    cols: Vec<(Taps, usize)>,
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
        Ok(Windows { rows: axis(0, g.h, g.ho)?, cols: axis(1, g.w, g.wo)? })
    }
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMaskBackward<'a, T, L>> for Cpu {
    type Prepared = MaskBackwardPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithMaskBackward<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(MaskBackwardPrepared, usize)> {
        let mut sizer = Sizer::new("max_pool2d_with_mask_backward");
        sizer.stage(&op.grad_output.view())?;
        let count = g.planes() * g.positions();
        let prepared = match L::KIND {
            LayoutKind::I32Argmax => {
                let bytes = op.mask.bytes.view();
                let in_place = bytes.to_slice().and_then(|b| mask::i32_prefix(b, count)).is_some();
                if !in_place {
                    sizer.region::<i32>(count)?;
                }
                sizer.stage(&op.grad_input.as_ref().view())?;
                let scatter = ScatterPrepared::new::<T>(self, scatter_shape(g), &mut sizer)?;
                MaskBackwardPrepared::I32Argmax { scatter, copy_values: !in_place }
            }
            LayoutKind::Bitmask => {
                sizer.stage(&op.mask.bytes.view())?;
                sizer.stage(&op.grad_input.as_ref().view())?;
                let tasks = self.threads().min(g.n * g.channel_blocks()).max(1);
                let acc_per_task = if T::as_acc_mut(&mut []).is_some() { 0 } else { 16 * g.h * g.w };
                sizer.region::<T::Acc>(tasks * acc_per_task)?;
                MaskBackwardPrepared::Bitmask { tasks, acc_per_task, windows: Windows::new(g)? }
            }
        };
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: MaxPool2dWithMaskBackward<'a, T, L>,
        g: &MaxPoolGeometry,
        p: MaskBackwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "max_pool2d_with_mask_backward";
        let MaxPool2dWithMaskBackward { grad_output, mask, grad_input, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let go = carver.stage(grad_output.view())?;
        match p {
            MaskBackwardPrepared::I32Argmax { scatter, copy_values } => {
                let count = g.planes() * g.positions();
                let values: &[i32] = if copy_values {
                    let region = carver.region::<i32>(count)?;
                    mask::read_i32_prefix(mask.bytes.view(), region);
                    region
                } else {
                    let bytes = mask.bytes.view().to_slice().unwrap_or(&[]);
                    mask::i32_prefix(bytes, count).unwrap_or(&[])
                };
                let mut gi = carver.output(grad_input.into_view())?;
                let scratch = scatter.scratch::<T>(&mut carver)?;
                let checked =
                    scatter::scatter(self, scatter_shape(g), &scatter, go, values, gi.slice(), scratch);
                gi.finish(OP, "grad_input")?;
                checked.map_err(|bad| g.index_error(OP, "mask", bad.element, bad.value))
            }
            MaskBackwardPrepared::Bitmask { tasks, acc_per_task, windows } => {
                let bits = carver.stage(mask.bytes.view())?;
                let mut gi = carver.output(grad_input.into_view())?;
                let acc = carver.region::<T::Acc>(tasks * acc_per_task)?;
                bitmask_backward(self, g, &windows, tasks, acc_per_task, go, bits, gi.slice(), acc);
                gi.finish(OP, "grad_input")
            }
        }
    }
}

struct BlockTask<'s, T: PoolFloat> {
    blocks: core::ops::Range<usize>,
    go: &'s [T],
    gi: &'s mut [T],
    acc: &'s mut [T::Acc],
}

/// Scatters through a `Bitmask`, one `(n, 16-channel block)` at a time; each task owns a run of
/// consecutive blocks (consecutive planes of `grad_input`).
#[allow(clippy::too_many_arguments)]
fn bitmask_backward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    windows: &Windows,
    tasks: usize,
    acc_per_task: usize,
    go: &[T],
    bits: &[i8],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let (hw, positions, c1s) = (g.h * g.w, g.positions(), g.channel_blocks());
    let blocks = g.n * c1s;
    let first_plane = |b: usize| (b / c1s) * g.c + ((b % c1s) * 16).min(g.c);
    let per = planes_per_task(blocks, tasks);
    let mut accs = acc.chunks_mut(acc_per_task.max(1));
    let (mut gi_rest, mut go_rest) = (gi, go);
    let mut list = Vec::with_capacity(tasks);
    for b0 in (0..blocks).step_by(per) {
        let b1 = (b0 + per).min(blocks);
        let planes = first_plane(b1) - first_plane(b0);
        let (gi_head, gi_tail) = core::mem::take(&mut gi_rest).split_at_mut(planes * hw);
        let (go_head, go_tail) = go_rest.split_at(planes * positions);
        (gi_rest, go_rest) = (gi_tail, go_tail);
        list.push(BlockTask {
            blocks: b0..b1,
            go: go_head,
            gi: gi_head,
            acc: accs.next().unwrap_or(&mut []),
        });
    }
    cpu.for_each_task(list, |t| {
        let (mut gi, mut go) = (t.gi, t.go);
        for b in t.blocks {
            let (n, c1) = (b / c1s, b % c1s);
            let channels = (g.c - 16 * c1).min(16);
            let (gi_block, gi_tail) = gi.split_at_mut(channels * hw);
            let (go_block, go_tail) = go.split_at(channels * positions);
            (gi, go) = (gi_tail, go_tail);
            block_backward(g, windows, n, c1, channels, go_block, bits, gi_block, &mut *t.acc);
        }
    });
}

/// One block of up to 16 channels: for each output position in row-major order and each valid
/// window offset, add the gradient of every channel whose bit is set. Bits of channels past `C`
/// are masked off; offsets that lie in padding are never visited, so their bits add nothing.
///
/// An input row is zeroed just before the first output row whose windows reach it (as oneDNN
/// does), so the rows being summed stay in cache across the block's channels: a bit always
/// points inside its own window, so no contribution lands on a row not yet zeroed.
#[allow(clippy::too_many_arguments)]
fn block_backward<T: PoolFloat>(
    g: &MaxPoolGeometry,
    windows: &Windows,
    n: usize,
    c1: usize,
    channels: usize,
    go: &[T],
    bits: &[i8],
    gi: &mut [T],
    acc: &mut [T::Acc],
) {
    let (hw, positions, w) = (g.h * g.w, g.positions(), g.w);
    let kw = g.params.kernel()[1];
    let valid: u16 = if channels >= 16 { u16::MAX } else { (1u16 << channels) - 1 };
    let block = g.word_offset(n, c1, 0, 0);
    let row_bytes = g.word_offset(0, 0, 1, 0);
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
                    let k = i * kw + j0 + b;
                    let word = mask::read_word(bits, block + k * row_bytes + 2 * p) & valid;
                    let flat = ih * w + c.start + b;
                    let mut rest = word;
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
