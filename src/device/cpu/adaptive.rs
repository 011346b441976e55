//! Adaptive max pooling on the CPU: window taps from the adaptive formula, then the shared
//! forward and scatter kernels.

use super::Cpu;
use super::forward::{self, ForwardPrepared, Planes, Taps};
use super::scatter::{self, ScatterPrepared, ScatterShape};
use super::workspace::{Carver, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::Result;
use crate::geometry::adaptive_windows;
use crate::index::ArgmaxIndex;
use crate::op::{AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};

fn taps(input: usize, output: usize) -> Vec<Taps> {
    adaptive_windows(input, output)
        .into_iter()
        .map(|r| Taps { start: r.start, count: r.len(), step: 1 })
        .collect()
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
        let mut sizer = Sizer::new("adaptive_max_pool2d");
        sizer.stage(&op.input.view())?;
        sizer.stage(&op.output.as_ref().view())?;
        sizer.stage(&op.indices.as_ref().view())?;
        let prepared =
            ForwardPrepared::new::<T>(self, taps(g.h, g.ho), taps(g.w, g.wo), planes(g), &mut sizer)?;
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ForwardPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "adaptive_max_pool2d";
        let AdaptiveMaxPool2d { input, output, indices, .. } = op;
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

fn scatter_shape(g: &AdaptiveGeometry) -> ScatterShape {
    ScatterShape { planes: g.planes(), hw: g.h * g.w, ohw: g.ho * g.wo }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Cpu {
    type Prepared = ScatterPrepared;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(ScatterPrepared, usize)> {
        let mut sizer = Sizer::new("adaptive_max_pool2d_backward");
        sizer.stage(&op.grad_output.view())?;
        sizer.stage(&op.indices.view())?;
        sizer.stage(&op.grad_input.as_ref().view())?;
        let prepared = ScatterPrepared::new::<T>(self, scatter_shape(g), &mut sizer)?;
        Ok((prepared, sizer.total()))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
        p: ScatterPrepared,
        memory: &mut Vec<u64>,
    ) -> Result<()> {
        const OP: &str = "adaptive_max_pool2d_backward";
        let AdaptiveMaxPool2dBackward { grad_output, indices, grad_input, .. } = op;
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
