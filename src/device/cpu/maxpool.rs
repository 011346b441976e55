//! Max pooling with flat indices on the CPU: window taps from the parameters, then the shared
//! forward and scatter kernels.

use super::Cpu;
use super::forward::{self, ForwardPrepared, Planes, Taps};
use super::scatter::{self, ScatterPrepared};
use super::workspace::{CacheLine, Sizer};
use crate::alloc::collect_exact;
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::pool_window_taps;
use crate::index::ArgmaxIndex;
use crate::op::{MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPoolGeometry, name};

/// The valid taps of every output row and column of a max pooling, operation `op`.
/// (None when there are no planes: the output is empty, whatever its other sizes.)
fn window_taps(op: &'static str, g: &MaxPoolGeometry) -> Result<(Vec<Taps>, Vec<Taps>)> {
    let p = &g.params;
    let axis = |a: usize, input: usize, output: usize| -> Result<Vec<Taps>> {
        let [k, s, pad, d] = [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]];
        let len = if g.planes() == 0 { 0 } else { output };
        let taps = (0..len).map(|o| {
            let (start, count) = pool_window_taps(o, input, k, s, pad, d);
            Taps { start, count, step: d }
        });
        collect_exact(op, "windows", len, taps)
    };
    Ok((axis(0, g.h, g.ho)?, axis(1, g.w, g.wo)?))
}

/// The forward state of a max pooling, with its scratch added to `sizer`.
pub(super) fn prepare_forward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ForwardPrepared> {
    let (rows, cols) = window_taps(sizer.op(), g)?;
    ForwardPrepared::new::<T>(cpu, rows, cols, planes(g), sizer)
}

pub(super) fn planes(g: &MaxPoolGeometry) -> Planes {
    Planes { count: g.planes(), h: g.h, w: g.w, ho: g.ho, wo: g.wo }
}

/// The backward state of a max pooling with flat indices, with its scratch added to `sizer`.
pub(super) fn prepare_scatter<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ScatterPrepared> {
    ScatterPrepared::new::<T>(cpu, planes(g), &window_taps(sizer.op(), g)?.0, sizer)
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        const OP: &str = name::MAX_POOL2D_WITH_INDICES;
        let (rows, cols) = window_taps(OP, g)?;
        forward::prepare_indexed(self, OP, &op.input, &op.output, &op.indices, rows, cols, planes(g))
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        forward::run_indexed(self, name::MAX_POOL2D_WITH_INDICES, views, planes(g), &p, memory)
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
        scatter::prepare_indexed(self, OP, views, planes(g), &window_taps(OP, g)?.0)
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
        scatter::run_indexed(self, OP, views, &p, memory, |e, v| g.index_error(OP, "indices", e, v))
    }
}
