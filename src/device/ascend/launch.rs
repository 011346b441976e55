//! The operators on the Ascend device: phase-1 checks and staging, phase-2 copies and launch.
//!
//! Tensors are passed to CANN as contiguous 4-D NCHW tensors (a 3-D call has `N = 1`, as ops-nn
//! itself unsqueezes 3-D inputs to NCHW), and the 3-D operators' as 5-D NCDHW tensors (likewise
//! `N = 1` for a 4-D call). Non-contiguous host views are gathered into a host buffer first.

use std::borrow::Cow;
use std::sync::Arc;

use ndarray::ArrayView4;

use super::ffi::{self, AclTensor, Call, DeviceBuffer, IntArray, PoolParams, Session, StreamGuard};
use super::soc::DeviceOp;
use super::{Ascend, AscendMemory, INT32_PLANE, Replaced};
use crate::alloc::{collect_exact, zeroed_vec};
use crate::device::DeviceLimits;
use crate::device::internal::Launch;
use crate::element::{DType, Element, PoolFloat};
use crate::error::{DeviceLimitKind, Error, Result, UNNAMED};
use crate::index::{ArgmaxIndex, repr::IndexRepr};
use crate::mask::{MaskLayout, i32_prefix, read_i32_prefix};
use crate::op::{
    AdaptiveGeometry, AdaptiveGeometry3d, AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3d,
    AdaptiveMaxPool3dBackward, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask,
    MaxPool2dWithMaskBackward, MaxPool3dGeometry, MaxPool3dWithIndices, MaxPool3dWithIndicesBackward,
    MaxPoolGeometry, VolumeSizes,
};
use crate::params::MaxPoolParams;
use crate::tensor::{TensorMut, TensorRef};

/// What [`Plan::new`](crate::Plan::new) leaves for the run: nothing for an empty batch, else
/// the staged device tensors and the operator's attributes ([`ForwardBuffers`] or
/// [`BackwardBuffers`]). CANN's own phase 1 is not here: it runs with the launch
/// ([`StreamGuard::execute`] says why).
pub struct AscendPrepared<B>(pub(super) Option<B>);

/// The operator of a forward with its attributes: the adaptive output size, or the pooling
/// parameters.
pub(super) enum ForwardAttrs {
    Adaptive { op: DeviceOp, output_size: IntArray },
    Pool { op: DeviceOp, params: PoolParams },
}

/// The operator of a backward with its attributes: none for an adaptive one, or the pooling
/// parameters.
pub(super) enum BackwardAttrs {
    Adaptive(DeviceOp),
    Pool { op: DeviceOp, params: PoolParams },
}

/// The staged tensors of a forward. Fields drop in declaration order, which is CANN's teardown
/// order: the attribute arrays, then each descriptor before its memory.
pub struct ForwardBuffers<B = StagedBuffer> {
    pub(super) attrs: ForwardAttrs,
    pub(super) input: Staged<B>,
    pub(super) output: Staged<B>,
    /// int64 or int32 indices, or the int8 mask ([`PoolArgmax`]).
    pub(super) argmax: Staged<B>,
}

/// The staged tensors of a backward (drop order as for [`ForwardBuffers`]).
pub struct BackwardBuffers<B = StagedBuffer> {
    pub(super) attrs: BackwardAttrs,
    pub(super) grad_output: Staged<B>,
    /// Described for its shape; never uploaded, as no operator reads its values.
    pub(super) self_: Staged<B>,
    /// The indices or the int8 mask ([`PoolArgmax`]).
    pub(super) argmax: Staged<B>,
    pub(super) grad_input: Staged<B>,
}

impl<B> ForwardBuffers<B> {
    /// The operator call over these tensors.
    pub(super) fn call(&self) -> Call<'_> {
        let (input, out, argmax) = (&self.input.tensor, &self.output.tensor, &self.argmax.tensor);
        match self.attrs {
            ForwardAttrs::Adaptive { op, ref output_size } => {
                Call::AdaptiveForward { op, input, output_size, out, indices: argmax }
            }
            ForwardAttrs::Pool { op, ref params } => Call::PoolForward { op, input, params, out, argmax },
        }
    }
}

impl<B> BackwardBuffers<B> {
    /// The operator call over these tensors.
    pub(super) fn call(&self) -> Call<'_> {
        let (grad_output, input) = (&self.grad_output.tensor, &self.self_.tensor);
        let (argmax, grad_input) = (&self.argmax.tensor, &self.grad_input.tensor);
        match self.attrs {
            BackwardAttrs::Adaptive(op) => {
                Call::AdaptiveBackward { op, grad_output, input, indices: argmax, grad_input }
            }
            BackwardAttrs::Pool { op, ref params } => {
                Call::PoolBackward { op, grad_output, input, argmax, params, grad_input }
            }
        }
    }
}

impl<B: core::fmt::Debug> core::fmt::Debug for ForwardBuffers<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (input, output, argmax) = (&self.input.buffer, &self.output.buffer, &self.argmax.buffer);
        f.debug_struct("ForwardBuffers")
            .field("input", input)
            .field("output", output)
            .field("argmax", argmax)
            .finish()
    }
}

impl<B: core::fmt::Debug> core::fmt::Debug for BackwardBuffers<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BackwardBuffers")
            .field("grad_output", &self.grad_output.buffer)
            .field("argmax", &self.argmax.buffer)
            .field("grad_input", &self.grad_input.buffer)
            .finish_non_exhaustive()
    }
}

impl<B> core::fmt::Debug for AscendPrepared<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AscendPrepared").field("device_work", &self.0.is_some()).finish_non_exhaustive()
    }
}

impl<B> AscendPrepared<B> {
    /// Nothing for the device to do (an empty batch): the run only leaves the empty outputs.
    pub(super) fn nothing() -> (Self, usize) {
        (AscendPrepared(None), 0)
    }

    /// Staged device work. The workspace is sized by CANN's phase 1 when the plan runs, so the
    /// plan asks for none (the run grows the workspace it is given:
    /// [`AscendMemory::grown_to`](super::AscendMemory::grown_to)).
    pub(super) fn of(buffers: B) -> (Self, usize) {
        (AscendPrepared(Some(buffers)), 0)
    }
}

/// A device buffer that poolgrad staged a host tensor in.
#[derive(Debug)]
pub struct StagedBuffer(pub(super) DeviceBuffer);

/// An `aclTensor` descriptor with the device buffer staged for it (`B` = `()` over a tensor
/// already on the device, whose memory is not poolgrad's to hold).
pub(super) struct Staged<B = StagedBuffer> {
    pub(super) tensor: AclTensor,
    pub(super) buffer: B,
}

/// A device tensor to stage: its argument name, dims (4-D, or 5-D for the 3-D operators) and
/// device dtype.
#[derive(Clone, Copy)]
pub(super) struct Spec {
    arg: &'static str,
    dims: [usize; 5],
    rank: usize,
    dtype: DType,
}

impl Spec {
    pub(super) fn new<const R: usize>(arg: &'static str, dims: [usize; R], dtype: DType) -> Self {
        const { assert!(R == 4 || R == 5) };
        let mut all = [0; 5];
        all[..R].copy_from_slice(&dims);
        Spec { arg, dims: all, rank: R, dtype }
    }

    fn dims(&self) -> &[usize] {
        &self.dims[..self.rank]
    }

    fn bytes(&self) -> Result<usize> {
        let (arg, dims, dtype) = (self.arg, self.dims(), self.dtype);
        dims.iter().try_fold(dtype_bytes(dtype), |a, &d| a.checked_mul(d)).ok_or_else(|| Error::Overflow {
            op: UNNAMED,
            arg,
            what: format!("the byte count of {dims:?} {dtype}"),
        })
    }
}

/// Stages the device tensors of an operation on `session`.
pub(super) struct Staging<'s> {
    /// The session whose memory the tensors are allocated in.
    session: &'s Arc<Session>,
}

impl<'s> Staging<'s> {
    /// Checks, before any device call, that the tensors of `specs` fit in the device's memory
    /// together (when CANN reported its size at open): a plan that can never be allocated is
    /// refused with [`DeviceLimitKind::Memory`] instead of failing in `aclrtMalloc`.
    pub(super) fn checked(session: &'s Arc<Session>, specs: &[Spec]) -> Result<Self> {
        let mut total = 0usize;
        for spec in specs {
            total = total.checked_add(spec.bytes()?).ok_or_else(|| Error::Overflow {
                op: UNNAMED,
                arg: spec.arg,
                what: "the byte count of the device tensors together".to_string(),
            })?;
        }
        if let Some(memory) = session.memory_total().filter(|&m| total > m) {
            let args: Vec<&str> = specs.iter().map(|s| s.arg).collect();
            return Err(Error::DeviceLimit {
                device: "ascend",
                op: UNNAMED,
                about: DeviceLimitKind::Memory,
                limit: format!("{memory} bytes in all (aclrtGetMemInfo)"),
                got: format!("{total} bytes for {}", args.join(", ")),
            });
        }
        Ok(Staging { session })
    }

    /// Allocates a device buffer for `spec` and describes it.
    pub(super) fn add(&self, spec: Spec) -> Result<Staged> {
        let buffer = self.session.alloc(spec.bytes()?)?;
        let tensor = self.session.tensor(spec.dims(), acl_dtype(spec.dtype), Some(&buffer))?;
        Ok(Staged { tensor, buffer: StagedBuffer(buffer) })
    }
}

fn dtype_bytes(dtype: DType) -> usize {
    match dtype {
        DType::I8 => 1,
        DType::F16 | DType::BF16 => 2,
        DType::F32 | DType::I32 => 4,
        DType::F64 | DType::I64 => 8,
    }
}

pub(super) fn acl_dtype(dtype: DType) -> i32 {
    use ffi::dtype::*;
    match dtype {
        DType::F32 => FLOAT,
        DType::F16 => FLOAT16,
        DType::BF16 => BF16,
        DType::F64 => DOUBLE,
        DType::I8 => INT8,
        DType::I32 => INT32,
        DType::I64 => INT64,
    }
}

/// The elements of `view` in row-major order, borrowed when it is contiguous.
pub(super) fn host_elements<'a, E: Element>(
    arg: &'static str,
    view: ArrayView4<'a, E>,
) -> Result<Cow<'a, [E]>> {
    match view.to_slice() {
        Some(s) => Ok(Cow::Borrowed(s)),
        None => Ok(Cow::Owned(collect_exact(UNNAMED, arg, view.len(), view.iter().copied())?)),
    }
}

pub(super) fn upload<E: Element>(
    stream: &StreamGuard<'_>,
    arg: &'static str,
    buffer: &DeviceBuffer,
    view: ArrayView4<'_, E>,
) -> Result<()> {
    let host = host_elements(arg, view)?;
    stream.upload(buffer, bytemuck::cast_slice(&host))
}

pub(super) fn download<E: Element>(
    stream: &StreamGuard<'_>,
    arg: &'static str,
    buffer: &DeviceBuffer,
    out: TensorMut<'_, E>,
) -> Result<()> {
    let mut view = out.into_view();
    if let Some(s) = view.as_slice_mut() {
        return stream.download(buffer, bytemuck::cast_slice_mut(s));
    }
    let mut host = zeroed_vec::<E>(UNNAMED, arg, view.len())?;
    stream.download(buffer, bytemuck::cast_slice_mut(&mut host))?;
    view.iter_mut().zip(host).for_each(|(d, s)| *d = s);
    Ok(())
}

impl Ascend {
    /// Refuses operator `kind` on `dtype` if the SoC does not support them or the CANN libraries lack the
    /// operator (no device call).
    pub(super) fn check_support(&self, kind: DeviceOp, dtype: DType) -> Result<()> {
        self.session.exports(kind)?;
        if self.cann_decides {
            return Ok(());
        }
        let dtypes = self.family.dtypes(kind).map_err(|why| Error::DeviceLimit {
            device: "ascend",
            op: UNNAMED,
            about: DeviceLimitKind::Operator,
            limit: format!("no {} ({why})", kind.symbol()),
            got: format!("SoC {} ({})", self.soc, self.family),
        })?;
        if !dtypes.contains(&dtype) {
            let list: Vec<String> = dtypes.iter().map(ToString::to_string).collect();
            return Err(Error::DeviceLimit {
                device: "ascend",
                op: UNNAMED,
                about: DeviceLimitKind::DType,
                limit: format!("{} on SoC {} ({})", list.join(", "), self.soc, self.family),
                got: dtype.to_string(),
            });
        }
        Ok(())
    }

    /// Refuses a mask of layout `L` if the SoC writes the other layout for this kernel.
    pub(super) fn check_layout<L: MaskLayout>(&self, g: &MaxPoolGeometry) -> Result<()> {
        let kernel = g.params.kernel();
        let name = self.family.mask_layout(kernel);
        if name == L::NAME || self.cann_decides {
            return Ok(());
        }
        Err(Error::DeviceLimit {
            device: "ascend",
            op: UNNAMED,
            about: DeviceLimitKind::MaskLayout,
            limit: format!(
                "{name} masks only: SoC {} ({}) uses the {name} layout for a {}x{} kernel",
                self.soc, self.family, kernel[0], kernel[1]
            ),
            got: format!("a {} mask", L::NAME),
        })
    }

    /// Refuses a dilation other than 1 where the SoC's kernels take none (all but the 950).
    pub(super) fn check_dilation(&self, dilation: &[usize]) -> Result<()> {
        if self.cann_decides || self.family.supports_dilation() || dilation.iter().all(|&d| d == 1) {
            return Ok(());
        }
        let ones = vec![1; dilation.len()];
        Err(Error::DeviceLimit {
            device: "ascend",
            op: UNNAMED,
            about: DeviceLimitKind::Parameter("dilation"),
            limit: format!("{ones:?} only on SoC {} ({})", self.soc, self.family),
            got: format!("{dilation:?}"),
        })
    }

    /// Refuses parameters the SoC's kernels do not take: a dilation other than 1 (all but the
    /// 950), and the ceil-mode strides of the legacy kernel (310P and Atlas training) (`SocFamily::ceil_mode_limit`).
    pub(super) fn check_params(&self, g: &MaxPoolGeometry) -> Result<()> {
        let p = &g.params;
        if self.cann_decides {
            return Ok(());
        }
        self.check_dilation(&p.dilation())?;
        if let Some(d) = self.family.ceil_mode_limit(p, [g.h, g.w]) {
            let (axis, len) = if d == 0 { ("H", g.h) } else { ("W", g.w) };
            return Err(Error::DeviceLimit {
                device: "ascend",
                op: UNNAMED,
                about: DeviceLimitKind::Parameter("ceil_mode"),
                limit: format!(
                    "no ceil-mode window that starts in the padding on SoC {} ({}): the documented \
                     limit of the legacy kernel (310P, Atlas training) s >= ({axis}_in + padding) / ({axis}_out - 1)",
                    self.soc, self.family
                ),
                got: format!(
                    "kernel {:?}, stride {:?}, padding {:?} with ceil_mode on {axis} = {len}",
                    p.kernel(),
                    p.stride(),
                    p.padding()
                ),
            });
        }
        Ok(())
    }

    /// The parameters as CANN's `aclIntArray`s, one value per axis.
    pub(super) fn pool_params<const N: usize>(&self, p: &MaxPoolParams<N>) -> Result<PoolParams> {
        let array = |v: [usize; N]| self.session.int_array(&v.map(|x| x as i64));
        Ok(PoolParams {
            kernel: array(p.kernel())?,
            stride: array(p.stride())?,
            padding: array(p.padding())?,
            dilation: array(p.dilation())?,
            ceil_mode: p.ceil_mode(),
        })
    }

    /// The staged work of `prepared` (`None` for an empty batch), once `memory` is found to be
    /// this device's.
    pub(super) fn device_work<'p, B>(
        &self,
        prepared: &'p AscendPrepared<B>,
        memory: &AscendMemory,
    ) -> Result<Option<&'p B>> {
        self.workspace(memory)?;
        Ok(prepared.0.as_ref())
    }

    /// Runs `call` on `stream`, both phases ([`StreamGuard::execute`]), with the workspace of
    /// `memory` grown to what phase 1 asks.
    pub(super) fn execute_call(
        &self,
        stream: &StreamGuard<'_>,
        call: Call<'_>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        stream.execute(call, |size| memory.grown_to(&self.session, size, Replaced::Freed))
    }
}

pub(super) fn adaptive_dims(g: &AdaptiveGeometry) -> ([usize; 4], [usize; 4]) {
    ([g.n, g.c, g.h, g.w], [g.n, g.c, g.ho, g.wo])
}

/// Refuses a plane the with-indices and mask operators cannot address: their indices are INT32
/// on every SoC (the 950's `limits` leave the plane open for the adaptive operators only). The
/// host path checks it while staging, the device path while describing.
pub(super) fn int32_plane(g: &MaxPoolGeometry) -> Result<()> {
    DeviceLimits::default().with_max_plane(INT32_PLANE).check_plane(g.h, g.w, "ascend")
}

pub(super) fn pool_dims(g: &MaxPoolGeometry) -> Result<([usize; 4], [usize; 4], [usize; 4])> {
    let mask = g.shape4().ok_or_else(|| Error::Overflow {
        op: UNNAMED,
        arg: "mask",
        what: format!("the mask shape, for {}", g.describe()),
    })?;
    Ok(([g.n, g.c, g.h, g.w], [g.n, g.c, g.ho, g.wo], mask))
}

/// The arg-max tensor of a max pooling on the device: the int8 mask, or int32 indices.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PoolArgmax {
    Mask,
    Indices,
}

impl PoolArgmax {
    /// The 2-D forward operator that writes this arg-max tensor.
    pub(super) fn forward(self) -> DeviceOp {
        match self {
            PoolArgmax::Mask => DeviceOp::MaskForward,
            PoolArgmax::Indices => DeviceOp::WithIndicesForward,
        }
    }

    /// The 2-D backward operator that reads this arg-max tensor.
    pub(super) fn backward(self) -> DeviceOp {
        match self {
            PoolArgmax::Mask => DeviceOp::MaskBackward,
            PoolArgmax::Indices => DeviceOp::WithIndicesBackward,
        }
    }

    /// The argument name, the dims and the device dtype of the arg-max tensor.
    pub(super) fn staged(self, pooled: [usize; 4], mask: [usize; 4]) -> (&'static str, [usize; 4], DType) {
        match self {
            PoolArgmax::Mask => ("mask", mask, DType::I8),
            // INT32, the kernels' own type (MaxPool3DWithArgmaxV2 and MaxPoolWithArgmaxV3 write
            // int32; INT64 would add a Cast); i64 callers are converted on the host.
            PoolArgmax::Indices => ("indices", pooled, DType::I32),
        }
    }
}

/// The first index of `view` outside `0..plane`, as `(element, value)`: a device does not check
/// index values, and one outside the plane would make it write outside `grad_input`, so
/// host-staged indices are checked before any device call.
pub(super) fn first_outside<I: ArgmaxIndex>(view: ArrayView4<'_, I>, plane: usize) -> Option<(usize, i64)> {
    view.iter()
        .enumerate()
        .find(|(_, v)| v.flat_in(plane).is_none())
        .map(|(e, &v)| (e, ArgmaxIndex::to_i64(v)))
}

/// Writes indices read back from the device (`S`: the device's index type) into `out` as `I`,
/// refusing any that is outside the plane or does not fit `I` with `error(element, value)`.
fn indices_from_device<S, I>(
    out: TensorMut<'_, I>,
    device: &[S],
    plane: usize,
    error: impl Fn(usize, i64) -> Error,
) -> Result<()>
where
    S: IndexRepr + Into<i64>,
    I: ArgmaxIndex,
{
    let mut out = out.into_view();
    for (e, (dst, &v)) in out.iter_mut().zip(device).enumerate() {
        *dst = v.flat_in(plane).and_then(I::try_from_flat).ok_or_else(|| error(e, v.into()))?;
    }
    Ok(())
}

impl Ascend {
    /// Stages a max-pooling forward whose checks have passed: input, output and the arg-max
    /// tensor, with the pooling parameters.
    fn plan_pool_forward(
        &self,
        argmax: PoolArgmax,
        g: &MaxPoolGeometry,
        dtype: DType,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_plane(g)?;
        let (input, pooled, mask) = pool_dims(g)?;
        let (arg, argmax_dims, argmax_dtype) = argmax.staged(pooled, mask);
        let (x, out) = (Spec::new("input", input, dtype), Spec::new("output", pooled, dtype));
        let arg = Spec::new(arg, argmax_dims, argmax_dtype);
        let s = Staging::checked(&self.session, &[x, out, arg])?;
        let (x, out, arg) = (s.add(x)?, s.add(out)?, s.add(arg)?);
        let attrs = ForwardAttrs::Pool { op: argmax.forward(), params: self.pool_params(&g.params)? };
        Ok(AscendPrepared::of(ForwardBuffers { attrs, input: x, output: out, argmax: arg }))
    }

    /// Stages a max-pooling backward whose checks have passed: `grad_output`, `self_`, the
    /// arg-max tensor and `grad_input`, with the pooling parameters.
    fn plan_pool_backward(
        &self,
        argmax: PoolArgmax,
        g: &MaxPoolGeometry,
        dtype: DType,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_plane(g)?;
        let (input, pooled, mask) = pool_dims(g)?;
        let (arg, argmax_dims, argmax_dtype) = argmax.staged(pooled, mask);
        let (go, x) = (Spec::new("grad_output", pooled, dtype), Spec::new("self_", input, dtype));
        let (arg, gi) = (Spec::new(arg, argmax_dims, argmax_dtype), Spec::new("grad_input", input, dtype));
        let s = Staging::checked(&self.session, &[go, x, arg, gi])?;
        let (go, x, arg, gi) = (s.add(go)?, s.add(x)?, s.add(arg)?, s.add(gi)?);
        let attrs = BackwardAttrs::Pool { op: argmax.backward(), params: self.pool_params(&g.params)? };
        let buffers = BackwardBuffers { attrs, grad_output: go, self_: x, argmax: arg, grad_input: gi };
        Ok(AscendPrepared::of(buffers))
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2d<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<ForwardBuffers>;

    fn prepare(
        &self,
        _op: &AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        self.check_support(DeviceOp::AdaptiveForward, T::DTYPE)?;
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let (input, pooled) = adaptive_dims(g);
        let (x, out) = (Spec::new("input", input, T::DTYPE), Spec::new("output", pooled, T::DTYPE));
        // aclnnAdaptiveMaxPool2d writes INT64 indices only; i32 callers get them converted.
        let idx = Spec::new("indices", pooled, DType::I64);
        let s = Staging::checked(&self.session, &[x, out, idx])?;
        let (x, out, idx) = (s.add(x)?, s.add(out)?, s.add(idx)?);
        let output_size = self.session.int_array(&[g.ho as i64, g.wo as i64])?;
        let attrs = ForwardAttrs::Adaptive { op: DeviceOp::AdaptiveForward, output_size };
        Ok(AscendPrepared::of(ForwardBuffers { attrs, input: x, output: out, argmax: idx }))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2d<'a, T, I>,
        g: &AdaptiveGeometry,
        prepared: AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        // aclnnAdaptiveMaxPool2d writes INT64 indices.
        let error = |e, v| g.index_error(UNNAMED, "indices", e, v);
        self.run_forward_with_indices::<T, I, i64>(
            (&op.input, op.output, op.indices),
            (g.h * g.w, error),
            &prepared,
            memory,
        )
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool2dBackward<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<BackwardBuffers>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool2dBackward<'a, T, I>,
        g: &AdaptiveGeometry,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        self.check_support(DeviceOp::AdaptiveBackward, T::DTYPE)?;
        if let Some((e, v)) = first_outside(op.indices.view(), g.h * g.w) {
            return Err(g.index_error(UNNAMED, "indices", e, v));
        }
        if g.planes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        let (input, pooled) = adaptive_dims(g);
        let (go, x) = (Spec::new("grad_output", pooled, T::DTYPE), Spec::new("self_", input, T::DTYPE));
        let (idx, gi) = (Spec::new("indices", pooled, I::DTYPE), Spec::new("grad_input", input, T::DTYPE));
        let s = Staging::checked(&self.session, &[go, x, idx, gi])?;
        let (go, x, idx, gi) = (s.add(go)?, s.add(x)?, s.add(idx)?, s.add(gi)?);
        let attrs = BackwardAttrs::Adaptive(DeviceOp::AdaptiveBackward);
        let buffers = BackwardBuffers { attrs, grad_output: go, self_: x, argmax: idx, grad_input: gi };
        Ok(AscendPrepared::of(buffers))
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool2dBackward<'a, T, I>,
        _g: &AdaptiveGeometry,
        prepared: AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device_work(&prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        // `self_` is not uploaded: the operator reads only its shape.
        upload(&stream, "grad_output", &b.grad_output.buffer.0, op.grad_output.view())?;
        upload(&stream, "indices", &b.argmax.buffer.0, op.indices.view())?;
        self.execute_call(&stream, b.call(), memory)?;
        download(&stream, "grad_input", &b.grad_input.buffer.0, op.grad_input)
    }
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMask<'a, T, L>> for Ascend {
    type Prepared = AscendPrepared<ForwardBuffers>;

    fn prepare(
        &self,
        _op: &MaxPool2dWithMask<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        self.check_support(DeviceOp::MaskForward, T::DTYPE)?;
        self.check_params(g)?;
        self.check_layout::<L>(g)?;
        self.plan_pool_forward(PoolArgmax::Mask, g, T::DTYPE)
    }

    fn launch(
        &self,
        op: MaxPool2dWithMask<'a, T, L>,
        _g: &MaxPoolGeometry,
        prepared: AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device_work(&prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        upload(&stream, "input", &b.input.buffer.0, op.input.view())?;
        // The operator writes only part of the mask (the i32 prefix, or the bit-mask words): the
        // rest is zero, as the CPU backend leaves it.
        stream.zero(&b.argmax.buffer.0)?;
        self.execute_call(&stream, b.call(), memory)?;
        download(&stream, "output", &b.output.buffer.0, op.output)?;
        download(&stream, "mask", &b.argmax.buffer.0, op.mask.bytes)
    }
}

impl<'a, T: PoolFloat, L: MaskLayout> Launch<MaxPool2dWithMaskBackward<'a, T, L>> for Ascend {
    type Prepared = AscendPrepared<BackwardBuffers>;

    fn prepare(
        &self,
        op: &MaxPool2dWithMaskBackward<'a, T, L>,
        g: &MaxPoolGeometry,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        self.check_support(DeviceOp::MaskBackward, T::DTYPE)?;
        self.check_params(g)?;
        self.check_layout::<L>(g)?;
        if L::I32_VALUES {
            // As for indices: a value outside the plane would make the device write outside
            // grad_input, so the host-staged values are checked before any device call.
            // Read in place when the bytes allow it, as the CPU backend does; else copied.
            let count = g.planes() * g.positions();
            let bytes = op.mask.bytes.view();
            let values: Cow<'_, [i32]> = match bytes.to_slice().and_then(|b| i32_prefix(b, count)) {
                Some(values) => Cow::Borrowed(values),
                None => {
                    let mut copy = zeroed_vec::<i32>(UNNAMED, "mask", count)?;
                    read_i32_prefix(bytes, &mut copy);
                    Cow::Owned(copy)
                }
            };
            let plane = g.h * g.w;
            if let Some((e, &v)) = values.iter().enumerate().find(|(_, v)| v.flat_in(plane).is_none()) {
                return Err(g.index_error(UNNAMED, "mask", e, v as i64));
            }
        }
        self.plan_pool_backward(PoolArgmax::Mask, g, T::DTYPE)
    }

    fn launch(
        &self,
        op: MaxPool2dWithMaskBackward<'a, T, L>,
        _g: &MaxPoolGeometry,
        prepared: AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device_work(&prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        upload(&stream, "grad_output", &b.grad_output.buffer.0, op.grad_output.view())?;
        upload(&stream, "mask", &b.argmax.buffer.0, op.mask.bytes.view())?;
        self.execute_call(&stream, b.call(), memory)?;
        download(&stream, "grad_input", &b.grad_input.buffer.0, op.grad_input)
    }
}

/// Indices as the int32 tensor the with-indices operators take: borrowed when they are `i32` and
/// contiguous, else converted. The caller has checked every value against the plane (at most
/// `i32::MAX` on this device), so the conversion is exact.
fn int32_indices<'a, I: ArgmaxIndex>(arg: &'static str, view: ArrayView4<'a, I>) -> Result<Cow<'a, [i32]>> {
    if I::DTYPE == DType::I32
        && let Some(s) = view.to_slice()
    {
        return Ok(Cow::Borrowed(bytemuck::cast_slice(s)));
    }
    let values = view.iter().map(|&v| ArgmaxIndex::to_i64(v) as i32);
    Ok(Cow::Owned(collect_exact(UNNAMED, arg, view.len(), values)?))
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndices<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<ForwardBuffers>;

    fn prepare(
        &self,
        _op: &MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        self.check_support(DeviceOp::WithIndicesForward, T::DTYPE)?;
        self.check_params(g)?;
        self.plan_pool_forward(PoolArgmax::Indices, g, T::DTYPE)
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndices<'a, T, I>,
        g: &MaxPoolGeometry,
        prepared: AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let error = |e, v| g.index_error(UNNAMED, "indices", e, v);
        self.run_forward_with_indices::<T, I, i32>(
            (&op.input, op.output, op.indices),
            (g.h * g.w, error),
            &prepared,
            memory,
        )
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool2dWithIndicesBackward<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<BackwardBuffers>;

    fn prepare(
        &self,
        op: &MaxPool2dWithIndicesBackward<'a, T, I>,
        g: &MaxPoolGeometry,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        self.check_support(DeviceOp::WithIndicesBackward, T::DTYPE)?;
        self.check_params(g)?;
        // CANN documents indices in [0, H_in * W_in) but does not check them.
        if let Some((e, v)) = first_outside(op.indices.view(), g.h * g.w) {
            return Err(g.index_error(UNNAMED, "indices", e, v));
        }
        self.plan_pool_backward(PoolArgmax::Indices, g, T::DTYPE)
    }

    fn launch(
        &self,
        op: MaxPool2dWithIndicesBackward<'a, T, I>,
        _g: &MaxPoolGeometry,
        prepared: AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.run_int32_backward((&op.grad_output, &op.indices, op.grad_input), &prepared, memory)
    }
}

/// `[N, C, D, H, W]` of a 3-D operation's input and output: 5-D NCDHW descriptors whatever the
/// caller's rank (`N = 1` for `[C, D, H, W]`, as the op_apis themselves unsqueeze CDHW inputs).
pub(super) fn volume_dims(s: &VolumeSizes) -> ([usize; 5], [usize; 5]) {
    let ([d, h, w], [od, oh, ow]) = (s.input, s.output);
    ([s.n, s.c, d, h, w], [s.n, s.c, od, oh, ow])
}

/// Refuses a volume whose flat indices do not fit the INT32 indices poolgrad passes to the 3-D
/// operators (the only type A2/A3 take; the 950 also takes INT64, which poolgrad does not use).
pub(super) fn int32_volume(s: &VolumeSizes) -> Result<()> {
    let [d, h, w] = s.input;
    DeviceLimits::default().with_max_plane(INT32_PLANE).check_plane(d * h, w, "ascend")
}

impl Ascend {
    /// Stages a 3-D forward whose checks have passed: input, output and INT32 indices, with the
    /// operator's attributes.
    fn plan_volume_forward(
        &self,
        sizes: &VolumeSizes,
        dtype: DType,
        attrs: impl FnOnce() -> Result<ForwardAttrs>,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        if sizes.volumes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_volume(sizes)?;
        let (input, pooled) = volume_dims(sizes);
        let (x, out) = (Spec::new("input", input, dtype), Spec::new("output", pooled, dtype));
        let idx = Spec::new("indices", pooled, DType::I32);
        let s = Staging::checked(&self.session, &[x, out, idx])?;
        let (x, out, idx) = (s.add(x)?, s.add(out)?, s.add(idx)?);
        Ok(AscendPrepared::of(ForwardBuffers { attrs: attrs()?, input: x, output: out, argmax: idx }))
    }

    /// Runs a 3-D forward staged by [`Ascend::plan_volume_forward`]: its INT32 indices are
    /// flat in each volume.
    fn run_volume_forward<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        tensors: (&TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
        sizes: &VolumeSizes,
        prepared: &AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let [d, h, w] = sizes.input;
        let error = |e, v| sizes.index_error(UNNAMED, "indices", e, v);
        self.run_forward_with_indices::<T, I, i32>(tensors, (d * h * w, error), prepared, memory)
    }

    /// Stages a 3-D backward whose checks have passed, after checking every index against the
    /// volume: `grad_output`, `self_`, INT32 indices and `grad_input`.
    fn plan_volume_backward<I: ArgmaxIndex>(
        &self,
        sizes: &VolumeSizes,
        indices: ArrayView4<'_, I>,
        dtype: DType,
        attrs: impl FnOnce() -> Result<BackwardAttrs>,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        let [d, h, w] = sizes.input;
        // The kernels do not check index values; one outside the volume would make them write
        // outside grad_input.
        if let Some((e, v)) = first_outside(indices, d * h * w) {
            return Err(sizes.index_error(UNNAMED, "indices", e, v));
        }
        if sizes.volumes() == 0 {
            return Ok(AscendPrepared::nothing());
        }
        int32_volume(sizes)?;
        let (input, pooled) = volume_dims(sizes);
        let (go, x) = (Spec::new("grad_output", pooled, dtype), Spec::new("self_", input, dtype));
        let (idx, gi) = (Spec::new("indices", pooled, DType::I32), Spec::new("grad_input", input, dtype));
        let s = Staging::checked(&self.session, &[go, x, idx, gi])?;
        let (go, x, idx, gi) = (s.add(go)?, s.add(x)?, s.add(idx)?, s.add(gi)?);
        let buffers =
            BackwardBuffers { attrs: attrs()?, grad_output: go, self_: x, argmax: idx, grad_input: gi };
        Ok(AscendPrepared::of(buffers))
    }

    /// Runs a staged forward with indices: uploads `input`, runs the operator, and writes back
    /// the values and the indices (read as the device's `S`, written as `I`, each checked against
    /// the `plane` they address, `error(element, value)` for one that is not).
    fn run_forward_with_indices<T: PoolFloat, I: ArgmaxIndex, S>(
        &self,
        (input, output, indices): (&TensorRef<'_, T>, TensorMut<'_, T>, TensorMut<'_, I>),
        (plane, error): (usize, impl Fn(usize, i64) -> Error),
        prepared: &AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()>
    where
        S: IndexRepr + Into<i64> + bytemuck::Pod,
    {
        let Some(b) = self.device_work(prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        upload(&stream, "input", &b.input.buffer.0, input.view())?;
        self.execute_call(&stream, b.call(), memory)?;
        let count = output.as_ref().view().len();
        download(&stream, "output", &b.output.buffer.0, output)?;
        let mut device = zeroed_vec::<S>(UNNAMED, "indices", count)?;
        stream.download(&b.argmax.buffer.0, bytemuck::cast_slice_mut(&mut device))?;
        indices_from_device(indices, &device, plane, error)
    }

    /// Runs a staged backward that takes INT32 indices (the with-indices ones, 2-D and 3-D):
    /// uploads `grad_output` and the indices, runs the operator and writes back `grad_input`.
    fn run_int32_backward<T: PoolFloat, I: ArgmaxIndex>(
        &self,
        (grad_output, indices, grad_input): (&TensorRef<'_, T>, &TensorRef<'_, I>, TensorMut<'_, T>),
        prepared: &AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        let Some(b) = self.device_work(prepared, memory)? else { return Ok(()) };
        let stream = self.session.stream()?;
        // `self_` is not uploaded: the operators read only its shape.
        upload(&stream, "grad_output", &b.grad_output.buffer.0, grad_output.view())?;
        let device = int32_indices("indices", indices.view())?;
        stream.upload(&b.argmax.buffer.0, bytemuck::cast_slice(&device))?;
        self.execute_call(&stream, b.call(), memory)?;
        download(&stream, "grad_input", &b.grad_input.buffer.0, grad_input)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool3dWithIndices<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<ForwardBuffers>;

    fn prepare(
        &self,
        _op: &MaxPool3dWithIndices<'a, T, I>,
        g: &MaxPool3dGeometry,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        self.check_support(DeviceOp::Pool3dForward, T::DTYPE)?;
        self.check_dilation(&g.params.dilation())?;
        self.plan_volume_forward(&g.sizes, T::DTYPE, || {
            Ok(ForwardAttrs::Pool { op: DeviceOp::Pool3dForward, params: self.pool_params(&g.params)? })
        })
    }

    fn launch(
        &self,
        op: MaxPool3dWithIndices<'a, T, I>,
        g: &MaxPool3dGeometry,
        prepared: AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.run_volume_forward((&op.input, op.output, op.indices), &g.sizes, &prepared, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<MaxPool3dWithIndicesBackward<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<BackwardBuffers>;

    /// No dilation check: `aclnnMaxPool3dWithArgmaxBackward`'s `CheckParamsValid` takes any
    /// dilation above 0 on every SoC.
    fn prepare(
        &self,
        op: &MaxPool3dWithIndicesBackward<'a, T, I>,
        g: &MaxPool3dGeometry,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        self.check_support(DeviceOp::Pool3dBackward, T::DTYPE)?;
        self.plan_volume_backward(&g.sizes, op.indices.view(), T::DTYPE, || {
            Ok(BackwardAttrs::Pool { op: DeviceOp::Pool3dBackward, params: self.pool_params(&g.params)? })
        })
    }

    fn launch(
        &self,
        op: MaxPool3dWithIndicesBackward<'a, T, I>,
        _g: &MaxPool3dGeometry,
        prepared: AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.run_int32_backward((&op.grad_output, &op.indices, op.grad_input), &prepared, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool3d<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<ForwardBuffers>;

    fn prepare(
        &self,
        _op: &AdaptiveMaxPool3d<'a, T, I>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(AscendPrepared<ForwardBuffers>, usize)> {
        self.check_support(DeviceOp::Adaptive3dForward, T::DTYPE)?;
        self.plan_volume_forward(&g.sizes, T::DTYPE, || {
            let output_size = self.session.int_array(&g.sizes.output.map(|o| o as i64))?;
            Ok(ForwardAttrs::Adaptive { op: DeviceOp::Adaptive3dForward, output_size })
        })
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool3d<'a, T, I>,
        g: &AdaptiveGeometry3d,
        prepared: AscendPrepared<ForwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.run_volume_forward((&op.input, op.output, op.indices), &g.sizes, &prepared, memory)
    }
}

impl<'a, T: PoolFloat, I: ArgmaxIndex> Launch<AdaptiveMaxPool3dBackward<'a, T, I>> for Ascend {
    type Prepared = AscendPrepared<BackwardBuffers>;

    fn prepare(
        &self,
        op: &AdaptiveMaxPool3dBackward<'a, T, I>,
        g: &AdaptiveGeometry3d,
    ) -> Result<(AscendPrepared<BackwardBuffers>, usize)> {
        self.check_support(DeviceOp::Adaptive3dBackward, T::DTYPE)?;
        self.plan_volume_backward(&g.sizes, op.indices.view(), T::DTYPE, || {
            Ok(BackwardAttrs::Adaptive(DeviceOp::Adaptive3dBackward))
        })
    }

    fn launch(
        &self,
        op: AdaptiveMaxPool3dBackward<'a, T, I>,
        _g: &AdaptiveGeometry3d,
        prepared: AscendPrepared<BackwardBuffers>,
        memory: &mut AscendMemory,
    ) -> Result<()> {
        self.run_int32_backward((&op.grad_output, &op.indices, op.grad_input), &prepared, memory)
    }
}
