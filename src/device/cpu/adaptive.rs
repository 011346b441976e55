//! Adaptive max pooling on the CPU: window taps from the adaptive formula, then the shared
//! forward and scatter kernels.

use super::Cpu;
use super::forward::{self, ForwardPrepared, Planes, Taps};
use super::scatter::{self, ScatterPrepared};
use super::workspace::CacheLine;
use crate::alloc::collect_exact;
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::adaptive_window;
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, name};

/// The windows of one axis of operation `op` (none when there are no planes: the output is
/// empty, whatever its other sizes).
fn taps(op: &'static str, g: &AdaptiveGeometry, input: usize, output: usize) -> Result<Vec<Taps>> {
    let len = if g.planes() == 0 { 0 } else { output };
    let windows = (0..len).map(|i| adaptive_window(i, input, output));
    collect_exact(op, "windows", len, windows.map(|r| Taps { start: r.start, count: r.len(), step: 1 }))
}

fn planes(g: &AdaptiveGeometry) -> Planes {
    Planes { count: g.planes(), h: g.h, w: g.w, ho: g.ho, wo: g.wo }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let (rows, cols) = (taps(OP, g, g.h, g.ho)?, taps(OP, g, g.w, g.wo)?);
        forward::prepare_indexed(self, OP, &op.input, &op.output, &op.indices, rows, cols, planes(g))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        forward::run_indexed(self, name::ADAPTIVE_MAX_POOL2D, views, planes(g), &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Cpu {
    type Prepared = ScatterPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(ScatterPrepared, usize)> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        let views = (&op.grad_output, &op.indices, &op.grad_input);
        scatter::prepare_indexed(self, OP, views, planes(g), &taps(OP, g, g.h, g.ho)?)
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ScatterPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D_BACKWARD;
        let views = (op.grad_output, op.indices, op.grad_input);
        scatter::run_indexed(self, OP, views, &p, memory, |e, v| g.index_error(OP, "indices", e, v))
    }
}
