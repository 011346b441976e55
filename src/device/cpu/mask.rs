//! The Ascend mask operations on the CPU. The forward pools with `i32` indices. `I32Argmax` values
//! are those indices: pooled straight into the mask where its bytes can be seen as `i32`, else
//! into the workspace and encoded. `Bitmask` encodes them one `(n, 16-channel)` block at a time
//! per thread when there are enough blocks (the block's indices are encoded while in cache), else
//! every plane first, and then each block in bands of output rows, one per thread. The mask's
//! bytes past the encoding are zeroed on all the call's threads. The backward scatters
//! `I32Argmax` values with the shared scatter kernel, and reads `Bitmask` words in 16-channel
//! blocks (module `bitmask`).

use super::Cpu;
use super::bitmask::{self, BitmaskPrepared};
use super::forward::{self, ForwardPrepared};

use super::scatter::{self, ScatterPrepared};
use super::schedule::Planes;
use super::schedule::{Planned, Work, block_runs, rows_per_band, runs, task_count};
use super::{CacheLine, Carver, Sizer, task_share};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::{Error, Result, UNNAMED};
use crate::mask::{self, LayoutImpl, MaskLayout};
use crate::op::{MaxPool2dWithMask, MaxPool2dWithMaskBackward, MaxPoolGeometry};

/// Phase-1 state of a mask forward.
#[derive(Debug)]
pub struct MaskForwardPrepared {
    forward: ForwardPrepared,
    /// `Bitmask` with at least as many `(n, 16-channel)` blocks as threads: this many tasks,
    /// each pooling its blocks one at a time into a block of `i32` indices and encoding that
    /// block while the indices are in cache. Otherwise (`None`) every plane is pooled into a
    /// region of indices, which is then encoded.
    fused_tasks: Option<usize>,
    /// `I32Argmax` whose mask bytes (in place, or staged on a cache line) can be seen as `i32`
    /// on this host: the values are the forward's indices, pooled straight into the mask with
    /// no region of indices and no encoding pass.
    values_in_mask: bool,
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMask<'a, T, L>> for Cpu {
    type Prepared = Planned<MaskForwardPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithMask<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<MaskForwardPrepared>, usize)> {
        Planned::of(self, Work::max_pool_forward(g), |cpu| {
            let mut sizer = Sizer::new();
            sizer.stage(&op.input.view())?;
            sizer.stage(&op.output.as_ref().view())?;
            sizer.stage(&op.mask.bytes.as_ref().view())?;
            let forward = forward::prepare_max_pool::<T>(cpu, g, &mut sizer)?;
            // Fused when every thread gets a block (so never without blocks: threads >= 1), on
            // no more tasks than the forward reserved scratch for.
            let blocks = g.n * g.channel_blocks();
            let fused = L::CHANNEL_BLOCKS && blocks >= cpu.threads();
            let fused_tasks = fused.then(|| task_count(cpu, blocks).min(forward.tasks()));
            let values_in_mask = L::I32_VALUES
                && match op.mask.bytes.as_ref().view().to_slice() {
                    Some(bytes) => mask::i32_in_place(bytes),
                    // Staged in a workspace region, which starts on a cache line.
                    None => cfg!(target_endian = "little"),
                };
            if !values_in_mask {
                sizer.region::<i32>(index_count(g, fused_tasks)?)?;
            }
            Ok((MaskForwardPrepared { forward, fused_tasks, values_in_mask }, sizer.total()))
        })
    }

    fn launch(
        &self,
        op: MaxPool2dWithMask<'a, T, L>,
        g: &MaxPoolGeometry,
        p: Planned<MaskForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let cpu = p.device(self);
        let p = p.plan;
        let MaxPool2dWithMask { input, output, mask, .. } = op;
        let mut carver = Carver::new(memory);
        let x = carver.stage(input.view())?;
        let mut out = carver.output(output.into_view())?;
        let mut bytes = carver.output(mask.bytes.into_view())?;
        if p.values_in_mask {
            let scratch = p.forward.scratch::<T>(&mut carver)?;
            let parts = mask::EncodeParts::<L>::whole(g, bytes.slice().len());
            let values = zero_tail(cpu, &parts, bytes.slice());
            let count = g.planes() * g.positions();
            let values = mask::i32_prefix_mut(values, count).ok_or_else(|| Error::Layout {
                op: UNNAMED,
                arg: "mask",
                reason: "changed its alignment between the phases: its bytes cannot be seen as i32".into(),
            })?;
            forward::pool(cpu, Planes::from(g), &p.forward, x, out.slice(), values, scratch);
            out.finish("output")?;
            return bytes.finish("mask");
        }
        let scratch = p.forward.scratch::<T>(&mut carver)?;
        let idx = carver.region::<i32>(index_count(g, p.fused_tasks)?)?;
        match p.fused_tasks {
            Some(tasks) => {
                let data = (x, out.slice(), bytes.slice());
                pool_and_encode_blocks::<T, L>(cpu, g, &p.forward, tasks, data, (idx, scratch))?
            }
            None => {
                forward::pool(cpu, Planes::from(g), &p.forward, x, out.slice(), idx, scratch);
                encode::<L>(cpu, g, idx, bytes.slice())?;
            }
        }
        out.finish("output")?;
        bytes.finish("mask")
    }
}

/// The `i32` indices a mask forward keeps in its workspace: a block's (at most 16 planes) per
/// fused task, each task's on lines of its own, or every plane's.
fn index_count(g: &MaxPoolGeometry, fused_tasks: Option<usize>) -> Result<usize> {
    let block = g.c.min(16).checked_mul(g.positions()).map(task_share::<i32>);
    let count = match fused_tasks {
        Some(tasks) => block.and_then(|block| block.checked_mul(tasks)),
        None => g.planes().checked_mul(g.positions()),
    };
    count.ok_or_else(|| Error::Overflow {
        op: UNNAMED,
        arg: "workspace",
        what: format!("the index slots of the workspace, for {}", g.describe()),
    })
}

/// The fused `Bitmask` forward: `tasks` tasks, each owning a run of consecutive `(n, 16-channel)`
/// blocks (consecutive planes, and consecutive bytes of the mask); each block is pooled into
/// the task's indices and encoded at once. The first bad index (in row-major order) is the
/// error; a forward's own indices are never bad. `(x, out, mask)` are the call's input, output
/// and mask; `(idx, scratch)` the workspace's index slots and accumulators.
fn pool_and_encode_blocks<T: PoolFloat, L: MaskLayout>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    p: &ForwardPrepared,
    tasks: usize,
    (x, out, mask): (&[T], &mut [T], &mut [i8]),
    (idx, scratch): (&mut [i32], &mut [T::Acc]),
) -> Result<()> {
    let (hw, positions) = (g.h * g.w, g.positions());
    let parts = mask::EncodeParts::<L>::whole(g, mask.len());
    let mut mask_rest = zero_tail(cpu, &parts, mask);
    let (mut x_rest, mut out_rest) = (x, out);
    // One block's indices per task, as `index_count` sized them.
    let mut idxs = idx.chunks_mut((idx.len() / tasks.max(1)).max(1));
    let mut accs = scratch.chunks_mut(p.acc_per_task().max(1));
    let mut list = Vec::with_capacity(tasks);
    for (run, planes) in block_runs(g, tasks) {
        let (x_head, x_tail) = x_rest.split_at(planes.len() * hw);
        let (out_head, out_tail) = core::mem::take(&mut out_rest).split_at_mut(planes.len() * positions);
        let mask_len = parts.bytes(run.end - 1).end - parts.bytes(run.start).start;
        let (mask_head, mask_tail) = core::mem::take(&mut mask_rest).split_at_mut(mask_len);
        (x_rest, out_rest, mask_rest) = (x_tail, out_tail, mask_tail);
        let (idx, acc) = (idxs.next().unwrap_or_default(), accs.next().unwrap_or_default());
        list.push((run, x_head, out_head, mask_head, idx, acc));
    }
    let results = cpu.map_tasks(list, |(run, mut x, mut out, mut mask, idx, acc)| {
        for b in run {
            let channels = g.block_planes(b).len();
            let (xb, x_tail) = x.split_at(channels * hw);
            let (ob, out_tail) = core::mem::take(&mut out).split_at_mut(channels * positions);
            let (mb, mask_tail) = core::mem::take(&mut mask).split_at_mut(parts.bytes(b).len());
            (x, out, mask) = (x_tail, out_tail, mask_tail);
            let idx = &mut idx[..channels * positions];
            forward::pool_planes(Planes::from(g), p, xb, ob, idx, acc);
            parts.encode_part("mask", b, idx, mb)?;
        }
        Ok(())
    });
    results.into_iter().collect()
}

/// Encodes the forward's indices into the mask, the parts of the encoding (runs of values, or
/// 16-channel blocks) shared among the threads. The first bad index (row-major) is the error.
fn encode<L: MaskLayout>(cpu: &Cpu, g: &MaxPoolGeometry, indices: &[i32], out: &mut [i8]) -> Result<()> {
    let parts = mask::EncodeParts::<L>::of(g, indices.len(), out.len());
    let mut rest = zero_tail(cpu, &parts, out);
    if L::CHANNEL_BLOCKS && parts.count() < cpu.threads() {
        return encode_blocks_in_bands(cpu, g, &parts, indices, rest);
    }
    let mut tasks = Vec::new();
    for run in runs(parts.count(), task_count(cpu, parts.count())) {
        let len = parts.bytes(run.end - 1).end - parts.bytes(run.start).start;
        let (head, after) = core::mem::take(&mut rest).split_at_mut(len);
        rest = after;
        tasks.push((run, head));
    }
    let results = cpu.map_tasks(tasks, |(runs, out)| parts.encode_runs("mask", runs, indices, out));
    results.into_iter().collect()
}

/// The `Bitmask` encoding of fewer blocks than threads ([`encode`]), so that every thread gets
/// work: each block's output rows cut into bands ([`rows_per_band`]), one task each, every band
/// encoding its positions' words of each window offset. A block where some band cannot (an
/// index not in its window) is then encoded whole in row-major order, which finds the first
/// such index. The words are the same however the rows are cut: each position's words depend
/// on its own indices alone.
fn encode_blocks_in_bands<L: MaskLayout>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    parts: &mask::EncodeParts<L>,
    indices: &[i32],
    body: &mut [i8],
) -> Result<()> {
    let rows = rows_per_band(cpu.threads(), parts.count(), g.ho);
    for part in 0..parts.count() {
        let (idx, block) = (&indices[parts.indices(part)], &mut body[parts.bytes(part)]);
        let bands = mask::row_bands(g, block, rows);
        let encoded = cpu.map_tasks(bands, |mut band| band.encode(g, idx));
        if !encoded.into_iter().all(|ok| ok) {
            parts.encode_part("mask", part, idx, block)?;
        }
    }
    Ok(())
}

/// Zeroes the bytes of `mask` past the encoding's last part ([`mask::EncodeParts::tail`]; most of
/// an `I32Argmax` mask) on the tasks of `cpu`, and returns those before them. On fresh memory
/// this is the first touch of those pages: spread over the threads, as the kernels' writes are.
fn zero_tail<'m, L: MaskLayout>(cpu: &Cpu, parts: &mask::EncodeParts<L>, mask: &'m mut [i8]) -> &'m mut [i8] {
    /// Bytes a task zeroes at least.
    const PIECE: usize = 1 << 16;
    let (body, tail) = parts.split_tail(mask);
    let per = tail.len().div_ceil(task_count(cpu, tail.len().div_ceil(PIECE)).max(1)).max(1);
    cpu.map_tasks(tail.chunks_mut(per).collect(), |piece| piece.fill(0));
    body
}

/// Phase-1 state of a mask backward: which kernel reads the layout's bytes.
#[derive(Debug)]
pub enum MaskBackwardPrepared {
    /// Scatter the `i32` values the layout stores ([`LayoutImpl::I32_VALUES`]), read in place
    /// or copied into the workspace.
    I32Values { scatter: ScatterPrepared, copy_values: bool },
    /// Read the layout's bits 16 channels at a time ([`LayoutImpl::CHANNEL_BLOCKS`]).
    ChannelBlocks(BitmaskPrepared),
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMaskBackward<'a, T, L>> for Cpu {
    type Prepared = Planned<MaskBackwardPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithMaskBackward<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<MaskBackwardPrepared>, usize)> {
        // A layout must be one of the two kinds the kernels below read (a build-time error otherwise).
        const { assert!(<L as LayoutImpl>::I32_VALUES || <L as LayoutImpl>::CHANNEL_BLOCKS) };
        Planned::of(self, Work::backward(g), |cpu| {
            let mut sizer = Sizer::new();
            sizer.stage(&op.grad_output.view())?;
            let count = g.planes() * g.positions();
            let prepared = if L::I32_VALUES {
                let bytes = op.mask.bytes.view();
                let in_place = bytes.to_slice().and_then(|b| mask::i32_prefix(b, count)).is_some();
                if !in_place {
                    sizer.region::<i32>(count)?;
                }
                sizer.stage(&op.grad_input.as_ref().view())?;
                let scatter = scatter::prepare_max_pool::<T>(cpu, g, &mut sizer)?;
                MaskBackwardPrepared::I32Values { scatter, copy_values: !in_place }
            } else {
                sizer.stage(&op.mask.bytes.view())?;
                sizer.stage(&op.grad_input.as_ref().view())?;
                MaskBackwardPrepared::ChannelBlocks(BitmaskPrepared::plan::<T>(cpu, g, &mut sizer)?)
            };
            Ok((prepared, sizer.total()))
        })
    }

    fn launch(
        &self,
        op: MaxPool2dWithMaskBackward<'a, T, L>,
        g: &MaxPoolGeometry,
        p: Planned<MaskBackwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let cpu = p.device(self);
        let p = p.plan;
        let MaxPool2dWithMaskBackward { grad_output, mask, grad_input, .. } = op;
        let mut carver = Carver::new(memory);
        let go = carver.stage(grad_output.view())?;
        match p {
            MaskBackwardPrepared::I32Values { scatter, copy_values } => {
                let count = g.planes() * g.positions();
                let values: &[i32] = if copy_values {
                    let region = carver.region::<i32>(count)?;
                    mask::read_i32_prefix(mask.bytes.view(), region);
                    region
                } else {
                    let bytes = mask.bytes.view().to_slice().unwrap_or(&[]);
                    mask::i32_prefix(bytes, count).unwrap_or(&[])
                };
                scatter::scatter_into(cpu, &scatter, (go, values, grad_input), carver, |element, value| {
                    g.index_error(UNNAMED, "mask", element, value)
                })
            }
            MaskBackwardPrepared::ChannelBlocks(p) => {
                let bits = carver.stage(mask.bytes.view())?;
                let mut gi = carver.output(grad_input.into_view())?;
                let checked = bitmask::backward(cpu, g, &p, go, bits, gi.slice(), &mut carver);
                gi.finish("grad_input")?;
                // Decoded indices lie in their windows: no error is expected here.
                checked?.map_err(|bad| g.index_error(UNNAMED, "mask", bad.element, bad.value))
            }
        }
    }
}
