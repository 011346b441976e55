//! Max pooling with flat indices on the CPU: window taps from the parameters, then the shared
//! forward and scatter kernels.

use super::Cpu;
use super::forward::{self, ForwardPrepared, Planes, Taps};
use super::scatter::{self, ScatterPrepared, ScatterShape};
use super::workspace::{Carver, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::pool_window_taps;
use crate::index::ArgmaxIndex;
use crate::op::{MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPoolGeometry};

/// The forward state of a max pooling: the valid taps of every output row and column.
pub(super) fn prepare_forward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ForwardPrepared> {
    let p = &g.params;
    let axis = |a: usize, input: usize, output: usize| -> Vec<Taps> {
        let [k, s, pad, d] = [p.kernel()[a], p.stride()[a], p.padding()[a], p.dilation()[a]];
        (0..output)
            .map(|o| {
                let (start, count) = pool_window_taps(o, input, k, s, pad, d);
                Taps { start, count, step: d }
            })
            .collect()
    };
    ForwardPrepared::new::<T>(cpu, axis(0, g.h, g.ho), axis(1, g.w, g.wo), planes(g), sizer)
}

pub(super) fn planes(g: &MaxPoolGeometry) -> Planes {
    Planes { count: g.planes(), h: g.h, w: g.w, ho: g.ho, wo: g.wo }
}

pub(super) fn scatter_shape(g: &MaxPoolGeometry) -> ScatterShape {
    ScatterShape { planes: g.planes(), hw: g.h * g.w, ohw: g.positions() }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Cpu {
    type Prepared = ForwardPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(ForwardPrepared, usize)> {
        let mut sizer = Sizer::new("max_pool2d_with_indices");
        sizer.stage(&op.input.view())?;
        sizer.stage(&op.output.as_ref().view())?;
        sizer.stage(&op.indices.as_ref().view())?;
        let prepared = prepare_forward::<T>(self, g, &mut sizer)?;
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "max_pool2d_with_indices";
        let MaxPool2dWithIndices { input, output, indices, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let x = carver.stage(input.view())?;
        let mut out = carver.output(output.into_view())?;
        let mut idx = carver.output(indices.into_view())?;
        let scratch = p.scratch::<T>(&mut carver)?;
        forward::pool(self, planes(g), &p, x, out.slice(), idx.slice(), scratch);
        out.finish(OP, "output")?;
        idx.finish(OP, "indices")
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndicesBackward<'a, T, I>> for Cpu {
    type Prepared = ScatterPrepared;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(ScatterPrepared, usize)> {
        let mut sizer = Sizer::new("max_pool2d_with_indices_backward");
        sizer.stage(&op.grad_output.view())?;
        sizer.stage(&op.indices.view())?;
        sizer.stage(&op.grad_input.as_ref().view())?;
        let prepared = ScatterPrepared::new::<T>(self, scatter_shape(g), &mut sizer)?;
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
        p: ScatterPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "max_pool2d_with_indices_backward";
        let MaxPool2dWithIndicesBackward { grad_output, indices, grad_input, .. } = op;
        let mut carver = Carver::new(OP, memory);
        let go = carver.stage(grad_output.view())?;
        let ix = carver.stage(indices.view())?;
        let mut gi = carver.output(grad_input.into_view())?;
        let scratch = p.scratch::<T>(&mut carver)?;
        let checked = scatter::scatter(self, scatter_shape(g), &p, go, ix, gi.slice(), scratch);
        gi.finish(OP, "grad_input")?;
        checked.map_err(|bad| g.index_error(OP, "indices", bad.element, bad.value))
    }
}
