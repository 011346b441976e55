//! The four operations with flat indices on the CPU (adaptive and regular max pooling, forward
//! and backward): each output's window taps (from the adaptive formula or the max-pooling
//! parameters), then the shared forward and scatter kernels, on the device the call's size
//! deserves ([`Planned`]).

use super::Cpu;
use super::forward::{self, ForwardPrepared};
use super::scatter::{self, ScatterPrepared};
use super::schedule::{Planned, Work};
use super::windows::{Planes, Taps, adaptive_taps, max_pool_taps};
use super::workspace::{CacheLine, Sizer};
use crate::device::internal::Launch;
use crate::element::PoolFloat;
use crate::error::{Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{
    AdaptiveGeometry, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, MaxPool2dWithIndices,
    MaxPool2dWithIndicesBackward, MaxPoolGeometry,
};
use crate::tensor::{TensorMut, TensorRef};

/// The forward state of a max pooling, with its scratch added to `sizer`.
pub(super) fn prepare_forward<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ForwardPrepared> {
    let (rows, cols) = max_pool_taps(g)?;
    ForwardPrepared::plan::<T>(cpu, rows, cols, Planes::from(g), sizer)
}

/// The backward state of a max pooling with flat indices, with its scratch added to `sizer`.
pub(super) fn prepare_scatter<T: PoolFloat>(
    cpu: &Cpu,
    g: &MaxPoolGeometry,
    sizer: &mut Sizer,
) -> Result<ScatterPrepared> {
    ScatterPrepared::plan::<T>(cpu, Planes::from(g), &max_pool_taps(g)?.0, sizer)
}

/// What the four operations need of their geometry: the planes, each output's window taps, how
/// much a forward reads (for [`Planned`]), and the error for a bad index.
trait Windowed {
    fn planes(&self) -> Planes;
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)>;
    fn forward_work(&self) -> Work;
    fn bad_index(&self, element: usize, value: i64) -> crate::Error;
}

impl Windowed for AdaptiveGeometry {
    fn planes(&self) -> Planes {
        Planes::from(self)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        adaptive_taps(self)
    }
    fn forward_work(&self) -> Work {
        Work::adaptive_forward(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.index_error(UNNAMED, "indices", element, value)
    }
}

impl Windowed for MaxPoolGeometry {
    fn planes(&self) -> Planes {
        Planes::from(self)
    }
    fn taps(&self) -> Result<(Vec<Taps>, Vec<Taps>)> {
        max_pool_taps(self)
    }
    fn forward_work(&self) -> Work {
        Work::max_pool_forward(self)
    }
    fn bad_index(&self, element: usize, value: i64) -> crate::Error {
        self.index_error(UNNAMED, "indices", element, value)
    }
}

/// Phase 1 of a forward with indices on the device its size deserves.
fn prepare_forward_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    views: (&TensorRef<'_, T>, &TensorMut<'_, T>, &TensorMut<'_, I>),
) -> Result<(Planned<ForwardPrepared>, usize)> {
    let taps = g.taps()?;
    Planned::of(cpu, g.forward_work(), |cpu| forward::prepare_indexed(cpu, views, taps, g.planes()))
}

/// Phase 2 of [`prepare_forward_indexed`].
fn run_forward_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    views: (TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
    p: &Planned<ForwardPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    forward::run_indexed(p.device(cpu), views, g.planes(), &p.plan, memory)
}

/// Phase 1 of a backward with indices on the device its size deserves.
fn prepare_backward_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    views: (&TensorRef<'_, T>, &TensorRef<'_, I>, &TensorMut<'_, T>),
) -> Result<(Planned<ScatterPrepared>, usize)> {
    let taps = g.taps()?.0;
    Planned::of(cpu, Work::backward(g.planes()), |cpu| {
        scatter::prepare_indexed(cpu, views, g.planes(), &taps)
    })
}

/// Phase 2 of [`prepare_backward_indexed`].
fn run_backward_indexed<T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: &impl Windowed,
    views: (TensorRef<'_, T>, TensorRef<'_, I>, TensorMut<'_, T>),
    p: &Planned<ScatterPrepared>,
    memory: &mut [CacheLine],
) -> Result<()> {
    scatter::run_indexed(p.device(cpu), views, &p.plan, memory, |e, v| g.bad_index(e, v))
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Cpu {
    type Prepared = Planned<ForwardPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<ForwardPrepared>, usize)> {
        let views = (&op.input, &op.output, &op.indices);
        prepare_forward_indexed(self, g, views)
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        p: Planned<ForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        run_forward_indexed(self, g, views, &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndicesBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        let views = (&op.grad_output, &op.indices, &op.grad_input);
        prepare_backward_indexed(self, g, views)
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.grad_output, op.indices, op.grad_input);
        run_backward_indexed(self, g, views, &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Cpu {
    type Prepared = Planned<ForwardPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(Planned<ForwardPrepared>, usize)> {
        let views = (&op.input, &op.output, &op.indices);
        prepare_forward_indexed(self, g, views)
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        p: Planned<ForwardPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.input, op.output, op.indices);
        run_forward_indexed(self, g, views, &p, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Cpu {
    type Prepared = Planned<ScatterPrepared>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(Planned<ScatterPrepared>, usize)> {
        let views = (&op.grad_output, &op.indices, &op.grad_input);
        prepare_backward_indexed(self, g, views)
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
        p: Planned<ScatterPrepared>,
        memory: &mut Vec<CacheLine>,
    ) -> Result<()> {
        let views = (op.grad_output, op.indices, op.grad_input);
        run_backward_indexed(self, g, views, &p, memory)
    }
}
