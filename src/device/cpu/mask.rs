//! The Ascend mask operations on the CPU. The forward pools with `i32` indices into the
//! workspace and encodes them; the backward scatters `I32Argmax` values with the shared scatter
//! kernel, and reads `Bitmask` words in 16-channel blocks (module `bitmask`).

use super::Cpu;
use super::bitmask::{self, BitmaskPrepared};
use super::forward::{self, ForwardPrepared, planes_per_task, task_count};
use super::maxpool::{planes, prepare_forward, prepare_scatter};
use super::scatter::{self, ScatterPrepared};
use super::workspace::{Carver, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
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
        encode(self, OP, L::KIND, g, idx, bytes.slice())?;
        out.finish(OP, "output")?;
        bytes.finish(OP, "mask")
    }
}

/// Encodes the forward's indices into the mask, the parts of the encoding (runs of values, or
/// 16-channel blocks) shared among the threads. The first bad index (row-major) is the error.
fn encode(
    cpu: &Cpu,
    op: &'static str,
    kind: LayoutKind,
    g: &MaxPoolGeometry,
    indices: &[i32],
    out: &mut [i8],
) -> Result<()> {
    let parts = mask::EncodeParts::new(kind, g, indices.len(), out.len());
    let (mut rest, tail) = out.split_at_mut(parts.tail().start.min(out.len()));
    tail.fill(0);
    let per = planes_per_task(parts.count(), task_count(cpu, parts.count()));
    let mut tasks = Vec::new();
    for first in (0..parts.count()).step_by(per) {
        let runs = first..(first + per).min(parts.count());
        let len = parts.bytes(runs.end - 1).end - parts.bytes(first).start;
        let (head, after) = core::mem::take(&mut rest).split_at_mut(len);
        rest = after;
        tasks.push((runs, head));
    }
    let results = cpu.map_tasks(tasks, |(runs, out)| parts.encode_runs(op, "mask", g, runs, indices, out));
    results.into_iter().collect()
}

/// Phase-1 state of a mask backward.
#[derive(Debug)]
pub enum MaskBackwardPrepared {
    /// Scatter the `I32Argmax` values, read in place or copied into the workspace.
    I32Argmax { scatter: ScatterPrepared, copy_values: bool },
    /// Read the bit mask in 16-channel blocks.
    Bitmask(BitmaskPrepared),
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
                let scatter = prepare_scatter::<T>(self, g, &mut sizer)?;
                MaskBackwardPrepared::I32Argmax { scatter, copy_values: !in_place }
            }
            LayoutKind::Bitmask => {
                sizer.stage(&op.mask.bytes.view())?;
                sizer.stage(&op.grad_input.as_ref().view())?;
                MaskBackwardPrepared::Bitmask(BitmaskPrepared::new::<T>(self, g, &mut sizer)?)
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
                let checked = scatter::scatter(self, &scatter, go, values, gi.slice(), scratch);
                gi.finish(OP, "grad_input")?;
                checked.map_err(|bad| g.index_error(OP, "mask", bad.element, bad.value))
            }
            MaskBackwardPrepared::Bitmask(p) => {
                let bits = carver.stage(mask.bytes.view())?;
                let mut gi = carver.output(grad_input.into_view())?;
                let checked = bitmask::backward(self, g, &p, go, bits, gi.slice(), &mut carver);
                gi.finish(OP, "grad_input")?;
                // Decoded indices lie in their windows: no error is expected here.
                checked?.map_err(|bad| g.index_error(OP, "mask", bad.element, bad.value))
            }
        }
    }
}
