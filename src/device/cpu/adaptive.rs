//! Adaptive max pooling on the CPU: window taps from the adaptive formula, then the shared
//! forward and scatter kernels.

use super::Cpu;
use super::forward::{self, ForwardPrepared};
use super::scatter::{self, ScatterPrepared};
use super::schedule::{Work, sized};
use super::windows::{Planes, adaptive_taps};
use super::workspace::CacheLine;
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, name};

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        const OP: &str = name::ADAPTIVE_MAX_POOL2D;
        let (rows, cols) = adaptive_taps(OP, g)?;
        forward::prepare_indexed(
            sized(self, Work::adaptive_forward(g)),
            OP,
            &op.input,
            &op.output,
            &op.indices,
            rows,
            cols,
            Planes::from(g),
        )
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        forward::run_indexed(
            sized(self, Work::adaptive_forward(g)),
            name::ADAPTIVE_MAX_POOL2D,
            views,
            Planes::from(g),
            &p,
            memory,
        )
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
        scatter::prepare_indexed(
            sized(self, Work::backward(g)),
            OP,
            views,
            Planes::from(g),
            &adaptive_taps(OP, g)?.0,
        )
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
        scatter::run_indexed(sized(self, Work::backward(g)), OP, views, &p, memory, |e, v| {
            g.index_error(OP, "indices", e, v)
        })
    }
}
