//! The four operations with flat indices on the CPU (adaptive and regular max pooling, forward
//! and backward): each output's window taps (from the adaptive formula or the max-pooling
//! parameters), then the shared forward and scatter kernels, on the device the call's size
//! deserves ([`sized`]).

use super::Cpu;
use super::forward::{self, ForwardPrepared};
use super::scatter::{self, ScatterPrepared};
use super::schedule::{Work, sized};
use super::windows::{Planes, adaptive_taps, max_pool_taps};
use super::workspace::{CacheLine, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::index::ArgmaxIndex;
use crate::op::{
    AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices,
    MaxPool2dWithIndicesBackward, MaxPoolGeometry, name,
};

/// The forward state of a max pooling, with its scratch added to `sizer`.
pub(super) fn prepare_forward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ForwardPrepared> {
    let (rows, cols) = max_pool_taps(sizer.op(), g)?;
    ForwardPrepared::new::<T>(cpu, rows, cols, Planes::from(g), sizer)
}

/// The backward state of a max pooling with flat indices, with its scratch added to `sizer`.
pub(super) fn prepare_scatter<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ScatterPrepared> {
    ScatterPrepared::new::<T>(cpu, Planes::from(g), &max_pool_taps(sizer.op(), g)?.0, sizer)
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let (rows, cols) = max_pool_taps(OP, g)?;
        forward::prepare_indexed(
            sized(self, Work::max_pool_forward(g)),
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
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        forward::run_indexed(
            sized(self, Work::max_pool_forward(g)),
            name::MAX_POOL2D_WITH_INDICES,
            views,
            Planes::from(g),
            &p,
            memory,
        )
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndicesBackward<'a, T, I>> for Cpu {
    type Prepared = ScatterPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(ScatterPrepared, usize)> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let views = (&op.grad_output, &op.indices, &op.grad_input);
        scatter::prepare_indexed(
            sized(self, Work::backward(g)),
            OP,
            views,
            Planes::from(g),
            &max_pool_taps(OP, g)?.0,
        )
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
        p: ScatterPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES_BACKWARD;
        let views = (op.grad_output, op.indices, op.grad_input);
        scatter::run_indexed(sized(self, Work::backward(g)), OP, views, &p, memory, |e, v| {
            g.index_error(OP, "indices", e, v)
        })
    }
}

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
