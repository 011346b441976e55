//! Max unpooling, its backward and the max poolings' double backwards on the Ascend device, on
//! host tensors: `aclnnMaxUnpool2d` / `aclnnMaxUnpool3d` scatter each value to its index
//! (ScatterElements, reduction "none", along the flattened plane), `aclnnMaxUnpool2dBackward` /
//! `aclnnMaxUnpool3dBackward` gather each gradient from its index (GatherElements). A double
//! backward is that same gather (`pooled[i] = full[idx[i]]`), so it runs on the unpooling's
//! backward operator.
//!
//! **Repeated indices.** poolgrad's rule (the CPU's): the last of equal indices in a plane wins
//! the unpooling, and alone gets the gradient in its backward. ScatterElements does not say which
//! of equal indices wins, and GatherElements gives each its value; so poolgrad makes the device's
//! result the rule's on the host: before the upload, each earlier value of a repeated index is
//! replaced by the last one's (whichever the device writes, it writes that value), and after the
//! download, the gradient of each earlier repeat is zeroed. The double backward is a plain gather
//! and needs neither.

use ndarray::ArrayView4;

use super::ffi::{Call, IntArray, Session};
use super::launch::{
    AscendPrepared, Spec, Staged, StagedBuffer, Staging, download, first_outside, host_elements, upload,
};
use super::soc::DeviceOp;
use super::{Ascend, AscendMemory};
use crate::alloc::{collect_exact, zeroed_vec};
use crate::device::internal::Launch;
use crate::element::{DType, PoolFloat};
use crate::error::{DeviceLimitKind, Error, Result, UNNAMED};
use crate::index::ArgmaxIndex;
use crate::op::{Axes, IndexedGeometry, MaxPoolDoubleBackward, MaxUnpool, MaxUnpoolBackward, SpatialAxes};
use crate::shape::spatial_dims;
use crate::tensor::TensorMut;

/// The operator and its attributes: the output size, and for the 3-D operators a stride and a
/// padding (which their op_apis check and do not otherwise use: ones and zeros).
pub(super) struct UnpoolAttrs {
    op: DeviceOp,
    output_size: IntArray,
    stride_padding: Option<[IntArray; 2]>,
}

impl UnpoolAttrs {
    /// The attributes of `op` unpooling to (or gathering from) the spatial size `full`.
    pub(super) fn new(session: &Session, op: DeviceOp, full: &[usize]) -> Result<Self> {
        let int_array = |v: &[usize]| session.int_array(&v.iter().map(|&x| x as i64).collect::<Vec<_>>());
        let stride_padding = (full.len() == 3)
            .then(|| Ok::<_, Error>([int_array(&[1; 3])?, int_array(&[0; 3])?]))
            .transpose()?;
        Ok(UnpoolAttrs { op, output_size: int_array(full)?, stride_padding })
    }
}

/// The staged tensors of an unpooling (`source` is `self`, and `self_` is absent) or of a
/// gather (`source` is `gradOutput`, `self_` the pooled-shape tensor the operator reads the
/// shape of); `B` as for [`Staged`]. Fields drop in declaration order, CANN's teardown order.
pub struct IndexedBuffers<B = StagedBuffer> {
    pub(super) attrs: UnpoolAttrs,
    pub(super) source: Staged<B>,
    pub(super) self_: Option<Staged<B>>,
    pub(super) indices: Staged<B>,
    pub(super) out: Staged<B>,
}

impl<B> core::fmt::Debug for IndexedBuffers<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IndexedBuffers").field("op", &self.attrs.op).finish_non_exhaustive()
    }
}

impl<B> IndexedBuffers<B> {
    pub(super) fn call(&self) -> Call<'_> {
        let UnpoolAttrs { op, ref output_size, ref stride_padding } = self.attrs;
        let stride_padding = stride_padding.as_ref().map(|[s, p]| [s, p]);
        let (indices, out) = (&self.indices.tensor, &self.out.tensor);
        match &self.self_ {
            None => {
                Call::Unpool { op, input: &self.source.tensor, indices, output_size, stride_padding, out }
            }
            Some(input) => Call::UnpoolBackward {
                op,
                grad_output: &self.source.tensor,
                input: &input.tensor,
                indices,
                output_size,
                stride_padding,
                out,
            },
        }
    }
}

/// Which of the three operations, on `N` spatial axes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Unpool,
    UnpoolBackward,
    DoubleBackward,
}

impl Kind {
    /// The CANN operator that runs it on `n` spatial axes.
    pub(super) fn op(self, n: usize) -> DeviceOp {
        match (self, n) {
            (Kind::Unpool, 2) => DeviceOp::Unpool2d,
            (Kind::Unpool, _) => DeviceOp::Unpool3d,
            (_, 2) => DeviceOp::Unpool2dBackward,
            _ => DeviceOp::Unpool3dBackward,
        }
    }
}

/// aclnn_max_unpool2d.cpp `CheckOutputSize` and level2_base.h `CheckIntArrayShapeMaxUnPool3D`
/// (the 3-D forward and backward): the full plane at least as large as the pooled one. The 2-D
/// backward does not check it.
pub(super) fn unpooled_size(op: DeviceOp, g: &IndexedGeometry) -> Result<()> {
    if op != DeviceOp::Unpool2dBackward && g.full < g.pooled {
        return Err(Error::DeviceLimit {
            device: "ascend",
            op: UNNAMED,
            about: DeviceLimitKind::PlaneSize,
            limit: format!("{}: an unpooled plane of at least the pooled plane's positions", op.symbol()),
            got: format!("{} positions unpooled, {} pooled", g.full, g.pooled),
        });
    }
    Ok(())
}

/// A device tensor of `[n, c, spatial..]` (4-D for two spatial axes, 5-D for three).
fn spec(arg: &'static str, n: usize, c: usize, spatial: &[usize], dtype: DType) -> Spec {
    match *spatial {
        [h, w] => Spec::new(arg, [n, c, h, w], dtype),
        [d, h, w] => Spec::new(arg, [n, c, d, h, w], dtype),
        _ => unreachable!("2 or 3 spatial axes (`SpatialAxes`)"),
    }
}

impl Ascend {
    /// Phase 1 of the three: the SoC's support, every index (`indices`, the caller's) against
    /// the full plane, the size rule of the operators that check it, then the staged tensors;
    /// `full` is the spatial size of the full side.
    fn plan_indexed<const N: usize>(
        &self,
        kind: Kind,
        g: &IndexedGeometry,
        dtype: DType,
        indices: ArrayView4<'_, impl ArgmaxIndex>,
        full: [usize; N],
    ) -> Result<(AscendPrepared<IndexedBuffers>, usize)> {
        let op = kind.op(N);
        self.check_support(op, dtype)?;
        if let Some((e, v)) = first_outside(indices, g.full) {
            return Err(g.index_error(UNNAMED, e, v));
        }
        unpooled_size(op, g)?;
        if g.planes == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let (n, c, pooled) = spatial_dims::<N>(UNNAMED, "indices", &g.index_dims)?;
        let attrs = UnpoolAttrs::new(&self.session, op, &full)?;
        let idx = spec("indices", n, c, &pooled, DType::I64);
        let (source, self_, out) = match kind {
            Kind::Unpool => (spec("input", n, c, &pooled, dtype), None, spec("output", n, c, &full, dtype)),
            _ => (
                spec("grad_output", n, c, &full, dtype),
                Some(spec("self", n, c, &pooled, dtype)),
                spec("grad_input", n, c, &pooled, dtype),
            ),
        };
        let all: Vec<Spec> = [source, idx, out].into_iter().chain(self_).collect();
        let s = Staging::checked(&self.session, &all)?;
        let buffers = IndexedBuffers {
            attrs,
            source: s.add(source)?,
            self_: self_.map(|x| s.add(x)).transpose()?,
            indices: s.add(idx)?,
            out: s.add(out)?,
        };
        Ok(AscendPrepared::of(buffers))
    }

    /// Phase 2 of the three: uploads `source` (for the unpooling, with each earlier value of a
    /// repeated index replaced by the last one's) and the indices as INT64, runs the operator
    /// and writes the result back (for the unpooling's backward, with the gradient of each
    /// earlier repeat zeroed).
    fn run_indexed<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        kind: Kind,
        g: &IndexedGeometry,
        (source, indices, target): (ArrayView4<'_, T>, ArrayView4<'_, I>, TensorMut<'_, T>),
        prepared: &AscendPrepared<IndexedBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device_work(prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        // INT64 for every operator (the 3-D backward takes no other); checked in phase 1.
        let idx = collect_exact(
            UNNAMED,
            "indices",
            indices.len(),
            indices.iter().map(|&v| ArgmaxIndex::to_i64(v)),
        )?;
        if kind == Kind::Unpool {
            let mut values = host_elements("input", source)?.into_owned();
            last_value_everywhere(&mut values, &idx, g);
            stream.upload(&b.source.buffer.0, bytemuck::cast_slice(&values))?;
        } else {
            upload(&stream, "grad_output", &b.source.buffer.0, source)?;
        }
        stream.upload(&b.indices.buffer.0, bytemuck::cast_slice(&idx))?;
        self.execute_call(&stream, b.call(), memory)?;
        if kind != Kind::UnpoolBackward {
            return download(&stream, "output", &b.out.buffer.0, target);
        }
        let mut result = zeroed_vec::<T>(UNNAMED, "output", idx.len())?;
        stream.download(&b.out.buffer.0, bytemuck::cast_slice_mut(&mut result))?;
        zero_earlier_repeats(&mut result, &idx, g);
        let mut view = target.into_view();
        view.iter_mut().zip(result).for_each(|(d, s)| *d = s);
        Ok(())
    }
}

/// In each plane of `values` (the pooled side, row-major), gives every element whose index
/// repeats later the value of the last element with that index.
fn last_value_everywhere<T: Copy>(values: &mut [T], idx: &[i64], g: &IndexedGeometry) {
    let mut last: Vec<Option<T>> = vec![None; g.full];
    for (values, idx) in values.chunks_mut(g.pooled.max(1)).zip(idx.chunks(g.pooled.max(1))) {
        last.fill(None);
        for (v, &j) in values.iter_mut().zip(idx).rev() {
            match last[j as usize] {
                Some(winner) => *v = winner,
                None => last[j as usize] = Some(*v),
            }
        }
    }
}

/// In each plane of `grads` (the pooled side, row-major), zeroes every element whose index
/// repeats later: only the last of equal indices was written by the unpooling.
fn zero_earlier_repeats<T: PoolFloat>(grads: &mut [T], idx: &[i64], g: &IndexedGeometry) {
    let mut seen = vec![false; g.full];
    for (grads, idx) in grads.chunks_mut(g.pooled.max(1)).zip(idx.chunks(g.pooled.max(1))) {
        seen.fill(false);
        for (v, &j) in grads.iter_mut().zip(idx).rev() {
            if seen[j as usize] {
                *v = T::zero();
            }
            seen[j as usize] = true;
        }
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxUnpool<'a, T, I, N>> for Ascend
where
    Axes<N>: SpatialAxes,
{
    type Prepared = AscendPrepared<IndexedBuffers>;

    fn prepare(&self, op: &MaxUnpool<'a, T, I, N>, g: &IndexedGeometry) -> Result<(Self::Prepared, usize)> {
        self.plan_indexed(Kind::Unpool, g, T::DTYPE, op.indices.view(), op.output_size)
    }

    fn launch(
        &self,
        op: MaxUnpool<'a, T, I, N>,
        g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let io = (op.input.view(), op.indices.view(), op.output);
        self.run_indexed(Kind::Unpool, g, io, &prepared, memory)
    }
}

/// The full side's spatial size from its caller's shape.
pub(super) fn full_size<const N: usize>(dims: &[usize]) -> [usize; N] {
    core::array::from_fn(|i| dims[dims.len() - N + i])
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxUnpoolBackward<'a, T, I, N>> for Ascend
where
    Axes<N>: SpatialAxes,
{
    type Prepared = AscendPrepared<IndexedBuffers>;

    fn prepare(
        &self,
        op: &MaxUnpoolBackward<'a, T, I, N>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let full = full_size::<N>(&op.grad_output.dims());
        self.plan_indexed(Kind::UnpoolBackward, g, T::DTYPE, op.indices.view(), full)
    }

    fn launch(
        &self,
        op: MaxUnpoolBackward<'a, T, I, N>,
        g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let io = (op.grad_output.view(), op.indices.view(), op.grad_input);
        self.run_indexed(Kind::UnpoolBackward, g, io, &prepared, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex, const N: usize> Launch<MaxPoolDoubleBackward<'a, T, I, N>> for Ascend
where
    Axes<N>: SpatialAxes,
{
    type Prepared = AscendPrepared<IndexedBuffers>;

    fn prepare(
        &self,
        op: &MaxPoolDoubleBackward<'a, T, I, N>,
        g: &IndexedGeometry,
    ) -> Result<(Self::Prepared, usize)> {
        let full = full_size::<N>(&op.grad_grad_input.dims());
        self.plan_indexed(Kind::DoubleBackward, g, T::DTYPE, op.indices.view(), full)
    }

    fn launch(
        &self,
        op: MaxPoolDoubleBackward<'a, T, I, N>,
        g: &IndexedGeometry,
        prepared: Self::Prepared,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let io = (op.grad_grad_input.view(), op.indices.view(), op.grad_grad_output);
        self.run_indexed(Kind::DoubleBackward, g, io, &prepared, memory)
    }
}
