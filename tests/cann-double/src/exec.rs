//! The operators: phase-1 checks as CANN documents them, and plain loops that execute them.
//!
//! Sources (`docs/ascend-semantics.md`): adaptive windows and the backward's contract (B), the mask shape
//! (A.1), the I32Argmax prefix (A.2), the 5HD bit mask (A.3), output size and parameter checks
//! (A.4). Per-SoC decisions are keyed on the architecture, as ops-nn's are
//! (`GetCurrentPlatformInfo().GetCurNpuArch()`), read from the platform-config table
//! (`platform.rs`). Formats are checked as each operator's ops-nn document lists them.

use half::{bf16, f16};

use crate::platform::{Arch, arch};
use crate::state::{Job, MaskParams, Queued, State, TensorDesc, itemsize};
use crate::{
    ACL_BF16, ACL_DOUBLE, ACL_FLOAT, ACL_FLOAT16, ACL_FORMAT_NCHW, ACL_FORMAT_NCL, ACL_FORMAT_ND, ACL_INT8,
    ACL_INT32, ACL_INT64, ACLNN_ERR_INNER_NULLPTR, ACLNN_ERR_PARAM_INVALID, KNOWN_DTYPES, KNOWN_FORMATS,
};

/// The formats of 4-D tensors (3-D tensors: the same list with NCL for NCHW) each operator's
/// ops-nn document lists, as far as the double models them (it does not model NHWC):
/// `aclnnAdaptiveMaxPool2d.md` NCHW/NCL/NHWC (ND is an error: "self的format不是NCHW/NHWC/NCL";
/// the AI CPU path's `CheckInputFormat` refuses it); `aclnnAdaptiveMaxPool2dBackward.md` ND, and
/// NCHW as its op_api's `CheckFormat` accepts (torch_npu passes NCHW);
/// `aclnnMaxPool2dWithMask.md` NCHW, ND; `aclnnMaxPool2dWithMaskBackward.md` NCHW only;
/// `aclnnMaxPool2dWithIndices.md` NCHW, ND (NHWC not on A2/A3); `aclnnMaxPool2dWithIndicesBackward.md`
/// NCHW, ND.
///
/// The 3-D poolings check formats against each other and per architecture, and the unpoolings
/// not at all: every known format passes here, and `check` applies their rules.
fn formats(job: &Job, rank: usize) -> &'static [i32] {
    if job.checks_its_own_layout() {
        return &KNOWN_FORMATS;
    }
    let nchw = if rank == 3 { ACL_FORMAT_NCL } else { ACL_FORMAT_NCHW };
    match (job, nchw) {
        (Job::AdaptiveForward { .. }, ACL_FORMAT_NCL) => &[ACL_FORMAT_NCL],
        (Job::AdaptiveForward { .. }, _) => &[ACL_FORMAT_NCHW],
        (Job::MaskBackward { .. }, ACL_FORMAT_NCL) => &[ACL_FORMAT_NCL],
        (Job::MaskBackward { .. }, _) => &[ACL_FORMAT_NCHW],
        (_, ACL_FORMAT_NCL) => &[ACL_FORMAT_NCL, ACL_FORMAT_ND],
        _ => &[ACL_FORMAT_NCHW, ACL_FORMAT_ND],
    }
}

type Check = Result<(), (i32, String)>;

fn invalid(msg: String) -> (i32, String) {
    (ACLNN_ERR_PARAM_INVALID, msg)
}

/// Dtypes, formats (those `job` documents), contiguity and device placement of one tensor.
fn check_tensor(s: &State, job: &Job, name: &str, t: &TensorDesc, dtypes: &[i32]) -> Check {
    if !KNOWN_DTYPES.contains(&t.dtype) || !KNOWN_FORMATS.contains(&t.format) {
        return Err(invalid(format!("{name}: unknown dtype {} or format {}", t.dtype, t.format)));
    }
    if !dtypes.contains(&t.dtype) {
        return Err(invalid(format!("{name}: dtype {} not in {dtypes:?}", t.dtype)));
    }
    let allowed = formats(job, t.dims.len());
    if !allowed.contains(&t.format) {
        return Err(invalid(format!(
            "{name}: format {} of a {}-D tensor, but {} documents {allowed:?}",
            t.format,
            t.dims.len(),
            job.kind()
        )));
    }
    // The 3-D poolings take 4-D (CDHW) or 5-D (NCDHW) tensors and the unpoolings ranks by their
    // number of spatial axes; each op_api checks the ranks its own way (`check`).
    if !job.checks_its_own_layout() && t.dims.len() != 3 && t.dims.len() != 4 && name != "indices" {
        return Err(invalid(format!("{name}: rank {} (expected 3 or 4)", t.dims.len())));
    }
    if t.dims.iter().any(|&d| d < 0) || t.offset < 0 || t.strides.len() != t.dims.len() {
        return Err(invalid(format!("{name}: negative dims or offset, or strides of another rank")));
    }
    // Contiguous row-major strides (this double does not implement strided views); an empty
    // view reads nothing, whatever its strides.
    let mut expect = 1i64;
    for (d, s) in t.dims.iter().zip(&t.strides).rev() {
        if t.numel() > 0 && *d > 1 && *s != expect {
            return Err(invalid(format!(
                "{name}: strides {:?} are not contiguous for {:?}",
                t.strides, t.dims
            )));
        }
        expect *= d;
    }
    let storage: i64 = t.storage.iter().product();
    if (t.offset as usize + t.numel()) > storage.max(0) as usize {
        return Err(invalid(format!(
            "{name}: view of {:?} at offset {} exceeds storage {:?}",
            t.dims, t.offset, t.storage
        )));
    }
    if t.numel() > 0 && s.device_range(t.start(), t.byte_len()).is_none() {
        return Err(invalid(format!("{name}: data is not {} bytes of device memory", t.byte_len())));
    }
    Ok(())
}

/// `[N, C, H, W]` of a 3-D or 4-D tensor (N = 1 for 3-D).
fn nchw(t: &TensorDesc) -> [usize; 4] {
    let d = t.dims_usize();
    if d.len() == 3 { [1, d[0], d[1], d[2]] } else { [d[0], d[1], d[2], d[3]] }
}

fn with_spatial(t: &TensorDesc, h: usize, w: usize) -> Vec<i64> {
    let mut d = t.dims.clone();
    let r = d.len();
    d[r - 2] = h as i64;
    d[r - 1] = w as i64;
    d
}

/// The float dtypes of `op` on the current SoC: each op_api's `GetDtypeSupportListBySocVersion`
/// (or `GetDtypeSupportList`), keyed on the architecture; an empty list is "support for %s is not
/// implemented" (`ACLNN_ERR_PARAM_INVALID`).
fn float_dtypes(s: &State, op: &str) -> Result<&'static [i32], (i32, String)> {
    const ALL: &[i32] = &[ACL_FLOAT, ACL_FLOAT16, ACL_BF16];
    let soc = s.soc();
    let not_implemented = || Err(invalid(format!("{op}: support for {soc} is not implemented")));
    match (arch(&soc), op) {
        // aclnn_adaptive_max_pool2d.cpp: DTYPE_SUPPORT_LIST_ASCEND910B on DAV_2201 and regbase,
        // DTYPE_SUPPORT_LIST (the AI CPU path) on every other SoC.
        (Arch::Dav2201 | Arch::Dav3510, "AdaptiveMaxPool2d") => {
            Ok(&[ACL_FLOAT, ACL_DOUBLE, ACL_FLOAT16, ACL_BF16])
        }
        (_, "AdaptiveMaxPool2d") => Ok(&[ACL_FLOAT, ACL_DOUBLE, ACL_FLOAT16]),
        (Arch::Dav2201 | Arch::Dav3510, "AdaptiveMaxPool2dBackward") => Ok(ALL),
        // `adaptive_max_pool_common.cpp` `GetDtypeSupportListBySocVersion`: an empty list, which
        // `CheckDtypeValid` refuses with `ACLNN_ERR_PARAM_INVALID`.
        (_, "AdaptiveMaxPool2dBackward") => not_implemented(),
        // aclnnMaxPool2dWithMask{,Backward}GetWorkspaceSize: `!IsRegbase()` or
        // "deprecated, please use the aclnnMaxPool2dWithIndices interface".
        (Arch::Dav3510, "MaxPool2dWithMask" | "MaxPool2dWithMaskBackward") => {
            Err(invalid(format!("{op} is deprecated on {soc}, please use aclnnMaxPool2dWithIndices")))
        }
        (Arch::Dav2201, "MaxPool2dWithMask" | "MaxPool2dWithMaskBackward") => Ok(ALL),
        (Arch::Dav1001, "MaxPool2dWithMask" | "MaxPool2dWithMaskBackward") => Ok(&[ACL_FLOAT16, ACL_FLOAT]),
        (Arch::Dav2002, "MaxPool2dWithMask") => Ok(&[ACL_FLOAT]),
        (Arch::Dav2201 | Arch::Dav3510, "MaxPool2dWithIndices") => Ok(ALL),
        (Arch::Dav2201, "MaxPool2dWithIndicesBackward") => Ok(&[ACL_FLOAT]),
        (Arch::Dav3510, "MaxPool2dWithIndicesBackward") => Ok(ALL),
        // aclnn_max_pool3d_with_argmax.cpp `CheckPlatform` (l.195-204) and `GetDtypeSupportList`
        // (l.58-66): DAV_2201 or regbase; aclnn_max_pool3d_with_argmax_backward.cpp
        // `GetDtypeSupportListBySocVersion` (l.66-81): DAV_3510, DAV_2201; aclnn_adaptive_max_pool3d.cpp
        // `GetDtypeSupportList` (l.94-101) and adaptive_max_pool_common.cpp (l.56-74): ASCEND910B,
        // ASCEND910_93 (the DAV_2201 SoCs) or regbase. BF16, FLOAT16, FLOAT on each.
        (
            Arch::Dav2201 | Arch::Dav3510,
            "MaxPool3dWithArgmax"
            | "MaxPool3dWithArgmaxBackward"
            | "AdaptiveMaxPool3d"
            | "AdaptiveMaxPool3dBackward",
        ) => Ok(ALL),
        // index/scatter_elements/op_api/aclnn_max_unpool{2,3}d.cpp and
        // index/gather_elements/op_api/aclnn_max_unpool3d_backward.cpp `DTYPE_SUPPORT_LIST`;
        // aclnn_max_unpool2d_backward.cpp's has BOOL where the others have DOUBLE. None of the
        // four checks the SoC (their documents list A2, A3 and the 950).
        (_, "MaxUnpool2d" | "MaxUnpool3d" | "MaxUnpool3dBackward") => Ok(&UNPOOL_DTYPES),
        (_, "MaxUnpool2dBackward") => Ok(&UNPOOL2D_BACKWARD_DTYPES),
        _ => not_implemented(),
    }
}

/// `aclDataType` UINT8, INT16 and BOOL.
const ACL_UINT8: i32 = 4;
const ACL_INT16: i32 = 6;
const ACL_BOOL: i32 = 12;
/// The unpooling operators' `DTYPE_SUPPORT_LIST` (but the 2-D backward's).
const UNPOOL_DTYPES: [i32; 8] =
    [ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_UINT8, ACL_INT16, ACL_INT32, ACL_INT64, ACL_DOUBLE];
/// aclnn_max_unpool2d_backward.cpp `DTYPE_SUPPORT_LIST` (l.40-42).
const UNPOOL2D_BACKWARD_DTYPES: [i32; 8] =
    [ACL_FLOAT, ACL_FLOAT16, ACL_INT8, ACL_UINT8, ACL_INT16, ACL_INT32, ACL_INT64, ACL_BOOL];

/// The index dtypes of the 3-D operators: INT32 (`INDICES_DTYPE_SUPPORT_LIST`, and the
/// adaptive backward's `POOL3D_INDICES_DTYPE_SUPPORT_LIST`), INT32 or INT64 on regbase.
fn indices_3d(s: &State) -> &'static [i32] {
    if arch(&s.soc()) == Arch::Dav3510 { &[ACL_INT32, ACL_INT64] } else { &[ACL_INT32] }
}

/// `op::IsPrivateFormat` (hicann/opbase `format_utils.cpp`): the formats of `KNOWN_FORMATS` it
/// names (NC1HWC0, FRACTAL_Z, NC1HWC0_C04, FRACTAL_NZ, NDC1HWC0, FRACTAL_Z_3D).
const PRIVATE_FORMATS: [i32; 6] = [3, 4, 12, 29, 32, 33];
/// `ge::FORMAT_NDHWC`, `ge::FORMAT_NCDHW`.
const ACL_FORMAT_NDHWC: i32 = 27;
const ACL_FORMAT_NCDHW: i32 = 30;

/// A 3-D operator's `kernelSize`, `stride`, `padding` or `dilation`: 1 or 3 values (a stride may
/// also be empty: the kernel), as `[D, H, W]`.
fn triple(v: &[i64], name: &str, empty: Option<[i64; 3]>) -> Result<[i64; 3], (i32, String)> {
    match (v.len(), empty) {
        (0, Some(d)) => Ok(d),
        (1, _) => Ok([v[0]; 3]),
        (3, _) => Ok([v[0], v[1], v[2]]),
        _ => Err(invalid(format!("The length of {name} can be only 1 or 3"))),
    }
}

/// The parameters of a 3-D max pooling as `CheckParamsValid` reads and checks them
/// (aclnn_max_pool3d_with_argmax.cpp l.114-182; the backward's l.145-210 differs only in its
/// dilation rule, `forward`): kernel above 0, stride above 0 (the kernel when empty), padding
/// from 0 to half the kernel; the forward's dilation 1 on DAV_2201 and DAV_1001, the
/// backward's above 0.
fn pool3d(s: &State, params: &MaskParams, forward: bool) -> Result<[[i64; 3]; 4], (i32, String)> {
    let k = triple(&params.kernel, "kernelSize", None)?;
    let st = triple(&params.stride, "stride", Some(k))?;
    let p = triple(&params.padding, "padding", None)?;
    let d = triple(&params.dilation, "dilation", None)?;
    if k.iter().any(|&v| v <= 0) || st.iter().any(|&v| v <= 0) {
        return Err(invalid(format!("kernel {k:?} and stride {st:?} should be greater than 0")));
    }
    if p.iter().zip(&k).any(|(&p, &k)| p < 0 || p > k / 2) {
        return Err(invalid(format!("padding {p:?} should be in 0 ..= half of kernel size {k:?}")));
    }
    let dilation_ok = if forward {
        !matches!(arch(&s.soc()), Arch::Dav2201 | Arch::Dav1001) || d == [1, 1, 1]
    } else {
        d.iter().all(|&v| v > 0)
    };
    if !dilation_ok {
        return Err(invalid(format!("The value of dilation should be equal 1, but got {d:?}")));
    }
    Ok([k, st, p, d])
}

/// An unpooling's `self` and `indices`: ranks 3 or 4 (`axes` = 2) or 4 or 5 (`axes` = 3), one
/// shape (`CheckShape`), and non-empty dimensions after the first (`CheckInpuNullTensor`).
fn unpool_shapes(input: &TensorDesc, indices: &TensorDesc, axes: usize) -> Check {
    if input.dims.len() != axes + 1 && input.dims.len() != axes + 2 {
        return Err(invalid(format!(
            "Expected self to be a {}d or {}d Tensor, instead got: {}",
            axes + 1,
            axes + 2,
            input.dims.len()
        )));
    }
    if indices.dims.len() != input.dims.len() {
        return Err(invalid("Expected dim of self and indices to be equal".into()));
    }
    same_dims("indices", indices, &input.dims)?;
    if input.dims[1..].iter().any(|&d| d <= 0) {
        return Err(invalid(format!(
            "expected input to have non-empty spatial dimensions, but input has sizes {:?}",
            input.dims
        )));
    }
    Ok(())
}

/// An unpooling's `outputSize` (`axes` values above 0, their product at least self's spatial
/// one) and, for the 3-D operators, 3 strides above 0 and 3 paddings (`CheckOutputSize`,
/// `CheckIntArrayShapeMaxUnPool3D`).
fn unpool_sizes(
    input: &TensorDesc,
    output_size: &[i64],
    stride_padding: Option<&(Vec<i64>, Vec<i64>)>,
    axes: usize,
) -> Check {
    if output_size.len() != axes {
        return Err(invalid(format!("outputSize length should be {axes}, but now is {}", output_size.len())));
    }
    if let Some((stride, padding)) = stride_padding
        && (stride.len() != 3 || padding.len() != 3 || stride.iter().any(|&v| v <= 0))
    {
        return Err(invalid(format!(
            "stride {stride:?} and padding {padding:?}: 3 elements each, strides above 0"
        )));
    }
    if output_size.iter().any(|&o| o <= 0) {
        return Err(invalid(format!("outputSize value should greater than 0, got {output_size:?}")));
    }
    let spatial: i64 = input.dims[input.dims.len() - axes..].iter().product();
    if output_size.iter().product::<i64>() < spatial {
        return Err(invalid(format!(
            "The output sizes {output_size:?} should cover self's {spatial} positions"
        )));
    }
    Ok(())
}

/// `self`'s dims with the spatial ones replaced by `output_size`.
fn unpooled(input: &TensorDesc, output_size: &[i64]) -> Vec<i64> {
    let mut d = input.dims.clone();
    let r = d.len();
    d[r - output_size.len()..].copy_from_slice(output_size);
    d
}

/// `[N, C, D, H, W]` of a 4-D or 5-D tensor (N = 1 for 4-D).
fn ncdhw(t: &TensorDesc) -> [usize; 5] {
    let d = t.dims_usize();
    if d.len() == 4 { [1, d[0], d[1], d[2], d[3]] } else { [d[0], d[1], d[2], d[3], d[4]] }
}

/// `t`'s dims with the last three replaced by `dhw`.
fn with_volume(t: &TensorDesc, dhw: [i64; 3]) -> Vec<i64> {
    let mut d = t.dims.clone();
    let r = d.len();
    d[r - 3..].copy_from_slice(&dhw);
    d
}

/// Rank 4 or 5 (`"4D or 5D tensor expected"`).
fn rank_4_or_5(name: &str, t: &TensorDesc) -> Check {
    if t.dims.len() != 4 && t.dims.len() != 5 {
        return Err(invalid(format!("4D or 5D tensor expected for {name} but got dim num:{}", t.dims.len())));
    }
    Ok(())
}

/// `D * H * W <= INT32_MAX` (`CheckSelfShapeSupport`, `checkExceptiveValue`).
fn int32_volume(t: &TensorDesc) -> Check {
    let [_, _, d, h, w] = ncdhw(t);
    if (d * h * w) as u64 > i32::MAX as u64 {
        return Err(invalid(format!(
            "The size of self should be less than or equal to 2^31 - 1, but got {}",
            d * h * w
        )));
    }
    Ok(())
}

/// The index dtypes of the with-indices operators: INT32/INT64 forward (`INDICES_DTYPE_SUPPORT_LIST`);
/// backward INT32/INT8 on DAV_2201, INT32/INT64 on regbase.
fn indices_dtypes(s: &State, op: &str) -> &'static [i32] {
    match (arch(&s.soc()), op) {
        (Arch::Dav2201, "MaxPool2dWithIndicesBackward") => &[ACL_INT32, ACL_INT8],
        _ => &[ACL_INT32, ACL_INT64],
    }
}

fn check_plane(name: &str, h: usize, w: usize) -> Check {
    if h == 0 || w == 0 {
        return Err(invalid(format!("{name}: empty H or W")));
    }
    if (h * w) as u64 > i32::MAX as u64 {
        return Err(invalid(format!("{name}: H*W = {} exceeds INT32_MAX", h * w)));
    }
    Ok(())
}

/// The max-pooling op_apis refuse `C = 0` (ops-nn `aclnn_max_pool2d_with_indices_backward.cpp`
/// `CheckGradInputAndIndicesShape`, l.315: "Expected tensor with optional 0 dim batch size";
/// the forward's `CheckShape` likewise).
fn channels(c: usize) -> Check {
    if c == 0 {
        return Err(invalid("Expected tensor with optional 0 dim batch size, but got nInputPlane: 0".into()));
    }
    Ok(())
}

/// Output length of max pooling (A.4), `None` if `k, s, p, d` are out of range. Dilation must
/// be 1 unless `regbase` (`CheckShape`: "dilation only support 1" unless `IsRegbase()`).
fn pool_len(len: i64, k: i64, s: i64, p: i64, d: i64, ceil: bool, regbase: bool) -> Option<i64> {
    if k <= 0 || s <= 0 || d <= 0 || (d != 1 && !regbase) || p < 0 || p > k / 2 {
        return None;
    }
    let mut o = (len + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 }).div_euclid(s) + 1;
    if ceil && (o - 1) * s >= len + p {
        o -= 1;
    }
    (o >= 1).then_some(o)
}

/// Kernel, stride, padding as pairs, and `[Ho, Wo]`, checked as aclnn does.
struct Pool {
    k: [i64; 2],
    s: [i64; 2],
    p: [i64; 2],
    d: [i64; 2],
    out: [usize; 2],
}

fn pair(v: &[i64], name: &str, allow_empty: Option<[i64; 2]>) -> Result<[i64; 2], (i32, String)> {
    match (v.len(), allow_empty) {
        (0, Some(d)) => Ok(d),
        (1, _) => Ok([v[0], v[0]]),
        (2, _) => Ok([v[0], v[1]]),
        _ => Err(invalid(format!("{name}: {} values", v.len()))),
    }
}

fn pool(params: &MaskParams, h: usize, w: usize, regbase: bool) -> Result<Pool, (i32, String)> {
    let k = pair(&params.kernel, "kernelSize", None)?;
    let s = pair(&params.stride, "stride", Some(k))?;
    let p = pair(&params.padding, "padding", None)?;
    let d = pair(&params.dilation, "dilation", None)?;
    let ho = pool_len(h as i64, k[0], s[0], p[0], d[0], params.ceil_mode, regbase);
    let wo = pool_len(w as i64, k[1], s[1], p[1], d[1], params.ceil_mode, regbase);
    match (ho, wo) {
        (Some(ho), Some(wo)) => Ok(Pool { k, s, p, d, out: [ho as usize, wo as usize] }),
        _ => Err(invalid(format!(
            "kernel {k:?} stride {s:?} padding {p:?} dilation {d:?} invalid for {h}x{w}"
        ))),
    }
}

/// Shape of the int8 mask (A.1).
fn mask_dims(x: &TensorDesc, pool: &Pool) -> Vec<i64> {
    let words = (pool.out[0] * pool.out[1]).div_ceil(16) + 1;
    let mut d = x.dims[..x.dims.len() - 2].to_vec();
    d.push(pool.k[0] * pool.k[1]);
    d.push(words as i64 * 32);
    d
}

fn same_dims(name: &str, t: &TensorDesc, expected: &[i64]) -> Check {
    if t.dims != expected {
        return Err(invalid(format!("{name}: shape {:?}, expected {expected:?}", t.dims)));
    }
    Ok(())
}

/// The backwards' index or mask shape: ops-nn `aclnn_max_pool2d_with_indices_backward.cpp`
/// `CheckGradInputAndIndicesShape` calls `CheckGradInputAndIndicesShapeIsMask` and drops its
/// result (l.346), so CANN accepts any shape there; only the kernel would read out of range.
fn unchecked_index_shape(_indices: &TensorDesc) {}

/// Whether `job` has no work: an empty `self` (the max-pooling op_apis, `self->IsEmpty()`), or for
/// the adaptive backward any empty input (l.135). Phase 1 then returns a workspace of 0 and an
/// executor with no kernels, which can be made repeatable.
pub(crate) fn empty(job: &Job) -> bool {
    match job {
        Job::AdaptiveBackward { grad_output, input, indices, .. }
        | Job::Pool3dBackward { grad_output, input, indices, .. }
        | Job::Adaptive3dBackward { grad_output, input, indices, .. } => {
            [grad_output, input, indices].iter().any(|t| t.numel() == 0)
        }
        // aclnn_max_pool3d_with_argmax.cpp l.260: `self->IsEmpty() || out->IsEmpty()`.
        Job::Pool3dForward { input, out, .. } => input.numel() == 0 || out.numel() == 0,
        // aclnn_max_unpool{2,3}d.cpp and aclnn_max_unpool2d_backward.cpp: `self->IsEmpty()`;
        // aclnn_max_unpool3d_backward.cpp (l.211): `gradOutput->IsEmpty()`.
        Job::Unpool { input, .. } | Job::UnpoolBackward { input, stride_padding: None, .. } => {
            input.numel() == 0
        }
        Job::UnpoolBackward { grad_output, .. } => grad_output.numel() == 0,
        Job::Adaptive3dForward { input, .. } => input.numel() == 0,
        Job::AdaptiveForward { input, .. }
        | Job::MaskForward { input, .. }
        | Job::MaskBackward { input, .. }
        | Job::IndicesForward { input, .. }
        | Job::IndicesBackward { input, .. } => input.numel() == 0,
    }
}

/// hicann/ops-nn `adaptive_max_pool_common.cpp` `CheckParams` (l.118-125), which the 2-D and 3-D
/// adaptive backwards share: dtypes (the same for all but `indices`, INT32 or INT64; l.107-116),
/// then `CheckShapeSame` (l.76-105): equal ranks, `gradOutput`'s dims = `indices`', `self`'s =
/// `gradInput`'s.
fn adaptive_backward_common(s: &State, job: &Job, floats: &[i32], tensors: [&TensorDesc; 4]) -> Check {
    let [grad_output, input, indices, grad_input] = tensors;
    check_tensor(s, job, "gradOutput", grad_output, floats)?;
    check_tensor(s, job, "self", input, &[grad_output.dtype])?;
    check_tensor(s, job, "gradInput", grad_input, &[grad_output.dtype])?;
    check_tensor(s, job, "indices", indices, &[ACL_INT32, ACL_INT64])?;
    let ranks = [grad_output, indices, grad_input].map(|t| t.dims.len());
    if ranks.iter().any(|&r| r != input.dims.len()) {
        return Err(invalid("Dims of self and gradOutput and gradInput and indices should be same".into()));
    }
    same_dims("indices", indices, &grad_output.dims)?;
    same_dims("gradInput", grad_input, &input.dims)?;
    Ok(())
}

/// Phase-1 checks of `job` on the current SoC.
pub(crate) fn check(s: &State, job: &Job) -> Check {
    let floats = float_dtypes(s, job.kind())?;
    match job {
        Job::AdaptiveForward { input, output_size, out, indices } => {
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "outputOut", out, &[input.dtype])?;
            check_tensor(s, job, "indicesOut", indices, &[ACL_INT64])?;
            let [_, c, h, w] = nchw(input);
            // CANN's own phase 1 on a 1x1x32768x65536 f16 input (the recorded observations,
            // `aclnnAdaptiveMaxPool2d/1x1x32768x65536_to_2x2_f16_i64`): success on the 950
            // (INT64 indices, no plane limit), ACLNN_ERR_INNER_NULLPTR on A2/A3.
            if h == 0 || w == 0 {
                return Err(invalid("self: empty H or W".into()));
            }
            if arch(&s.soc()) != Arch::Dav3510 && (h * w) as u64 > i32::MAX as u64 {
                return Err((ACLNN_ERR_INNER_NULLPTR, format!("self: H*W = {} exceeds INT32_MAX", h * w)));
            }
            if c == 0 || output_size.len() != 2 || output_size.iter().any(|&o| o <= 0) {
                return Err(invalid(format!("outputSize {output_size:?} or C = {c}")));
            }
            let expected = with_spatial(input, output_size[0] as usize, output_size[1] as usize);
            same_dims("outputOut", out, &expected)?;
            same_dims("indicesOut", indices, &expected)
        }
        // hicann/ops-nn `adaptive_max_pool_common.cpp` `CheckParams` (dtypes, then `CheckShapeSame`:
        // equal ranks, gradOutput's dims = indices', self's = gradInput's; nothing ties C, Ho or
        // Wo together), then `aclnn_adaptive_max_pool2d_backward.cpp` `CheckFormat` and
        // `CheckSelfShapeSupport` (`H*W <= INT32_MAX` unless regbase; no 2^24 limit), and success
        // with no work for an empty tensor (l.135-139).
        Job::AdaptiveBackward { grad_output, input, indices, grad_input } => {
            adaptive_backward_common(s, job, floats, [grad_output, input, indices, grad_input])?;
            // aclnn_adaptive_max_pool2d_backward.cpp `CheckFormat`: all four the same format.
            if [grad_output, grad_input, indices].iter().any(|t| t.format != input.format) {
                return Err(invalid(
                    "Format of self and gradOutput and gradInput and indices should be same".into(),
                ));
            }
            let [_, _, h, w] = nchw(input);
            if arch(&s.soc()) != Arch::Dav3510 && (h * w) as u64 > i32::MAX as u64 {
                return Err(invalid(format!("self: H*W = {} exceeds INT32_MAX", h * w)));
            }
            Ok(())
        }
        Job::MaskForward { input, params, out, mask } => {
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "out", out, &[input.dtype])?;
            check_tensor(s, job, "indices", mask, &[ACL_INT8])?;
            let [_, c, h, w] = nchw(input);
            check_plane("self", h, w)?;
            channels(c)?;
            let pool = pool(params, h, w, false)?;
            same_dims("out", out, &with_spatial(input, pool.out[0], pool.out[1]))?;
            same_dims("indices", mask, &mask_dims(input, &pool))
        }
        Job::IndicesForward { input, params, out, indices } => {
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "out", out, &[input.dtype])?;
            check_tensor(s, job, "indices", indices, indices_dtypes(s, job.kind()))?;
            if out.format != input.format {
                return Err(invalid("Format of input and output should be same".into()));
            }
            let [_, c, h, w] = nchw(input);
            check_plane("self", h, w)?;
            channels(c)?;
            let pool = pool(params, h, w, arch(&s.soc()) == Arch::Dav3510)?;
            same_dims("out", out, &with_spatial(input, pool.out[0], pool.out[1]))?;
            same_dims("indices", indices, &out.dims)
        }
        Job::IndicesBackward { grad_output, input, indices, params, grad_input } => {
            check_tensor(s, job, "gradOutput", grad_output, floats)?;
            check_tensor(s, job, "self", input, &[grad_output.dtype])?;
            check_tensor(s, job, "gradInput", grad_input, &[grad_output.dtype])?;
            check_tensor(s, job, "indices", indices, indices_dtypes(s, job.kind()))?;
            if grad_output.format != input.format || grad_input.format != input.format {
                return Err(invalid("Format of self and gradOutput and gradInput should be same".into()));
            }
            let [_, c, h, w] = nchw(input);
            check_plane("self", h, w)?;
            channels(c)?;
            let pool = pool(params, h, w, arch(&s.soc()) == Arch::Dav3510)?;
            same_dims("gradOutput", grad_output, &with_spatial(input, pool.out[0], pool.out[1]))?;
            // The indices' shape is checked and the answer discarded (`unchecked_index_shape`).
            same_dims("gradInput", grad_input, &input.dims)
        }
        Job::MaskBackward { grad_output, input, mask, params, grad_input } => {
            check_tensor(s, job, "gradOutput", grad_output, floats)?;
            check_tensor(s, job, "self", input, &[grad_output.dtype])?;
            check_tensor(s, job, "gradInput", grad_input, &[grad_output.dtype])?;
            check_tensor(s, job, "indices", mask, &[ACL_INT8])?;
            let [_, c, h, w] = nchw(input);
            check_plane("self", h, w)?;
            channels(c)?;
            let pool = pool(params, h, w, false)?;
            same_dims("gradOutput", grad_output, &with_spatial(input, pool.out[0], pool.out[1]))?;
            unchecked_index_shape(mask);
            same_dims("gradInput", grad_input, &input.dims)
        }
        // aclnn_max_pool3d_with_argmax.cpp `CheckParams` (l.184-193: dtypes l.68-79, formats
        // l.81-112, parameters l.114-182), the empty case (l.260-264), then the l0op's output
        // shape (`max_pool3d_with_argmax_v2.cpp` `PoolingOutShape`, the 2-D rule per axis)
        // compared with `out` and `indices` (`CheckReduceOutShape`, l.296-297).
        Job::Pool3dForward { input, params, out, indices } => {
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "out", out, &[input.dtype])?;
            check_tensor(s, job, "indices", indices, indices_3d(s))?;
            if out.format != input.format || indices.format != input.format {
                return Err(invalid("Format of input and output (and indices) should be same".into()));
            }
            rank_4_or_5("inputs", input)?;
            let regbase = arch(&s.soc()) == Arch::Dav3510;
            let nd_formats = [ACL_FORMAT_NDHWC, ACL_FORMAT_NCDHW, ACL_FORMAT_NCHW, ACL_FORMAT_ND];
            if regbase && !nd_formats.contains(&input.format) {
                return Err(invalid(format!("Format of input is not supported, self [{}]", input.format)));
            }
            let [k, st, p, d] = pool3d(s, params, true)?;
            if empty(job) {
                return Ok(());
            }
            let [_, _, id, ih, iw] = ncdhw(input);
            let len = |a: usize, n: usize| {
                pool_len(n as i64, k[a], st[a], p[a], d[a], params.ceil_mode, true).unwrap_or(0)
            };
            let expected = with_volume(input, [len(0, id), len(1, ih), len(2, iw)]);
            same_dims("out", out, &expected)?;
            same_dims("indices", indices, &expected)
        }
        // aclnn_max_pool3d_with_argmax_backward.cpp `CheckParams` (l.240-252): dtypes (l.83-96),
        // formats and ranks (l.98-143), parameters (l.145-210), `D*H*W <= INT32_MAX` unless
        // regbase (l.212-230), indices shaped as gradOutput and gradInput as self (l.232-238).
        // Nothing ties gradOutput's D, H, W to the parameters in the op_api.
        Job::Pool3dBackward { grad_output, input, indices, params, grad_input } => {
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "indices", indices, indices_3d(s))?;
            check_tensor(s, job, "gradOutput", grad_output, &[input.dtype])?;
            check_tensor(s, job, "gradInput", grad_input, &[input.dtype])?;
            if grad_output.format != input.format || grad_input.format != input.format {
                return Err(invalid("Format of self and gradOutput and gradInput should be same".into()));
            }
            if [grad_output, input, indices, grad_input].iter().any(|t| PRIVATE_FORMATS.contains(&t.format)) {
                return Err(invalid(
                    "Private format is not supported, please use a non-private format such as NCDHW.".into(),
                ));
            }
            rank_4_or_5("gradOutput", grad_output)?;
            rank_4_or_5("gradInput", grad_input)?;
            rank_4_or_5("indices", indices)?;
            rank_4_or_5("self", input)?;
            pool3d(s, params, false)?;
            if arch(&s.soc()) != Arch::Dav3510 {
                int32_volume(input)?;
            }
            same_dims("indices", indices, &grad_output.dims)?;
            same_dims("gradInput", grad_input, &input.dims)
        }
        // aclnn_adaptive_max_pool3d.cpp `CheckParams` (l.270-290): ranks (l.70-92), dtypes
        // (l.103-114), formats (l.117-139), outputSize against out (l.165-214), out's dtype
        // (l.216-220), the platform (l.222-226), non-empty C, D, H, W, `D*H*W <= INT32_MAX` with
        // INT32 indices and outputSize above 0 (l.228-268); then the empty case (l.457-473) and
        // the indices' full shape (`CheckReduceOutShape`, l.366 and l.396).
        Job::Adaptive3dForward { input, output_size, out, indices } => {
            for (name, t) in [("self", input), ("out", out), ("indices", indices)] {
                rank_4_or_5(name, t)?;
            }
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "outputOut", out, floats)?;
            check_tensor(s, job, "indicesOut", indices, indices_3d(s))?;
            let regbase = arch(&s.soc()) == Arch::Dav3510;
            let allowed: &[i32] = if regbase {
                &[ACL_FORMAT_NCDHW, ACL_FORMAT_NCHW, ACL_FORMAT_ND]
            } else {
                &[ACL_FORMAT_NCDHW, ACL_FORMAT_NCHW]
            };
            if !allowed.contains(&input.format) || out.format != input.format {
                return Err(invalid(format!(
                    "Format of input should be one of {allowed:?} and equal out's, got {} and {}",
                    input.format, out.format
                )));
            }
            let [_, _, id, ih, iw] = ncdhw(input);
            let size: [i64; 3] = match (output_size.len(), regbase) {
                (3, _) => [output_size[0], output_size[1], output_size[2]],
                (1, true) => [output_size[0]; 3],
                (0, true) => [id as i64, ih as i64, iw as i64],
                _ => return Err(invalid("outputSize length should be 3.".into())),
            };
            if out.dtype != input.dtype {
                return Err(invalid("out's dtype should be self's".into()));
            }
            if input.dims[1..].iter().any(|&d| d < 1) {
                return Err(invalid("a dim of selfShape after the first is smaller than 1".into()));
            }
            if !regbase || indices.dtype == ACL_INT32 {
                int32_volume(input)?;
            }
            if size.iter().any(|&o| o < 1) {
                return Err(invalid(format!("outputSize {size:?} has a value less than 1")));
            }
            let expected = with_volume(input, size);
            same_dims("outputOut", out, &expected)?;
            // l.207-212 compares only the first `outputSize.size()` dims of indices and out.
            if indices.dims.iter().zip(&out.dims).take(output_size.len()).any(|(a, b)| a != b) {
                return Err(invalid("The dims of outShape value should match the indicesShape value".into()));
            }
            if empty(job) {
                return Ok(());
            }
            same_dims("indicesOut", indices, &expected)
        }
        // aclnn_max_unpool2d.cpp `CheckParams` (l.132-150: dtypes l.61-67, ranks and shapes
        // l.69-84, non-empty C, H, W l.86-101, outputSize l.103-130), then for a non-empty self
        // `out` reshaped to `[N, C, oH * oW]` (l.221: a tensor of another element count does not
        // reshape, ACLNN_ERR_INNER_NULLPTR; inferred from the Reshape); aclnn_max_unpool3d.cpp
        // `CheckParams` (l.134-158: dtypes l.66-72, shapes l.74-91, non-empty C, D, H, W and the
        // int arrays in level2_base.h l.391-460, out's shape l.93-132).
        Job::Unpool { input, indices, output_size, stride_padding, out } => {
            let axes = if stride_padding.is_some() { 3 } else { 2 };
            check_tensor(s, job, "self", input, floats)?;
            check_tensor(s, job, "out", out, &[input.dtype])?;
            check_tensor(s, job, "indices", indices, &[ACL_INT32, ACL_INT64])?;
            unpool_shapes(input, indices, axes)?;
            unpool_sizes(input, output_size, stride_padding.as_ref(), axes)?;
            let expected = unpooled(input, output_size);
            if axes == 3 {
                return same_dims("out", out, &expected);
            }
            if !empty(job) && out.numel() != expected.iter().product::<i64>() as usize {
                return Err((
                    ACLNN_ERR_INNER_NULLPTR,
                    format!("out {:?} does not reshape to {expected:?}", out.dims),
                ));
            }
            Ok(())
        }
        // aclnn_max_unpool2d_backward.cpp `CheckParams` (l.129-142: dtypes l.58-68, shapes
        // l.70-127) and an empty gradOutput with a non-empty self (l.173-176);
        // aclnn_max_unpool3d_backward.cpp `CheckParams` (l.141-168: dtypes l.63-73, INT64 indices
        // only; shapes l.75-97; level2_base.h's checks as the forward's; gradOutput l.99-139).
        Job::UnpoolBackward { grad_output, input, indices, output_size, stride_padding, out } => {
            let axes = if stride_padding.is_some() { 3 } else { 2 };
            check_tensor(s, job, "gradOutput", grad_output, floats)?;
            check_tensor(s, job, "self", input, &[grad_output.dtype])?;
            // The 2-D backward casts its result to out's dtype (`OP_CHECK_RESULT_DTYPE_CAST_FAILED`),
            // the 3-D one asks for gradOutput's.
            let same = [grad_output.dtype];
            check_tensor(s, job, "out", out, if axes == 2 { floats } else { &same })?;
            let index_dtypes: &[i32] = if axes == 2 { &[ACL_INT32, ACL_INT64] } else { &[ACL_INT64] };
            check_tensor(s, job, "indices", indices, index_dtypes)?;
            if axes == 2 {
                if input.dims.len() != 3 && input.dims.len() != 4 {
                    return Err(invalid(format!(
                        "Expected self to be a 3d or 4d Tensor, instead got: {}",
                        input.dims.len()
                    )));
                }
                if grad_output.dims.len() != input.dims.len()
                    || grad_output.dims[..input.dims.len() - 2] != input.dims[..input.dims.len() - 2]
                {
                    return Err(invalid("Expected (N, C) of self and gradOutput to be equal".into()));
                }
                same_dims("indices", indices, &input.dims)?;
                same_dims("out", out, &input.dims)?;
                if output_size.len() != 2 {
                    return Err(invalid(format!(
                        "Expected size of outputSize must be 2, but got: {}",
                        output_size.len()
                    )));
                }
                if grad_output.dims[grad_output.dims.len() - 2..] != output_size[..] {
                    return Err(invalid("Inconsistent gradOutput size".into()));
                }
                if grad_output.numel() == 0 && input.numel() != 0 {
                    return Err(invalid("gradOutput is empty tensor, self should be empty tensor.".into()));
                }
                return Ok(());
            }
            unpool_shapes(input, indices, axes)?;
            same_dims("out", out, &input.dims)?;
            unpool_sizes(input, output_size, stride_padding.as_ref(), axes)?;
            same_dims("gradOutput", grad_output, &unpooled(input, output_size))
        }
        // adaptive_max_pool_common.cpp `CheckParams` (l.118-125: dtypes l.107-116, equal ranks,
        // indices shaped as gradOutput and gradInput as self, l.76-105), then
        // aclnn_adaptive_max_pool3d_backward.cpp `CheckSelfShapeSupport` (l.89-106), `CheckFormat`
        // (l.40-87: one format, not private, ranks 4 or 5) and INT32 indices unless regbase
        // (l.124-128).
        Job::Adaptive3dBackward { grad_output, input, indices, grad_input } => {
            adaptive_backward_common(s, job, floats, [grad_output, input, indices, grad_input])?;
            if arch(&s.soc()) != Arch::Dav3510 {
                int32_volume(input)?;
            }
            if [grad_output, grad_input, indices].iter().any(|t| t.format != input.format) {
                return Err(invalid(
                    "Format of self and gradOutput and gradInput and indices should be same".into(),
                ));
            }
            if PRIVATE_FORMATS.contains(&input.format) {
                return Err(invalid("Format only support NCDHW or CDHW".into()));
            }
            rank_4_or_5("self", input)?;
            if !indices_3d(s).contains(&indices.dtype) {
                return Err(invalid(format!("indices: dtype {} not in {:?}", indices.dtype, indices_3d(s))));
            }
            Ok(())
        }
    }
}

/// Tiling data for every operator, an FP32 accumulator for half-precision backwards, and for the
/// adaptive operators an f32 intermediate of the larger of input and output (what CANN's op_api
/// reserved in the recorded phase-1 calls, `facts/phase1.json`: 1536 bytes for a 2x3x7x7 input
/// pooled to 8x7, 2048 for its backward to 9x9). Nothing for a job with no work.
pub(crate) fn workspace_size(job: &Job) -> u64 {
    const TILING: u64 = 512;
    if empty(job) {
        return 0;
    }
    let intermediate =
        |a: &TensorDesc, b: &TensorDesc| (4 * a.numel().max(b.numel()) as u64).next_multiple_of(TILING);
    let accumulator = match job {
        Job::AdaptiveBackward { grad_input, .. } | Job::MaskBackward { grad_input, .. }
            if grad_input.dtype != ACL_FLOAT =>
        {
            4 * grad_input.numel() as u64
        }
        _ => 0,
    };
    let base = match job {
        Job::AdaptiveForward { input, out, .. } => intermediate(input, out).max(TILING),
        Job::AdaptiveBackward { input, grad_output, .. } => intermediate(input, grad_output).max(TILING),
        _ => TILING,
    };
    base + accumulator
}

fn read(bytes: &[u8], dtype: i32, i: usize) -> f64 {
    let b = |n: usize| &bytes[i * n..i * n + n];
    match dtype {
        ACL_FLOAT => f32::from_le_bytes(b(4).try_into().unwrap()) as f64,
        ACL_FLOAT16 => f16::from_le_bytes(b(2).try_into().unwrap()).to_f64(),
        ACL_BF16 => bf16::from_le_bytes(b(2).try_into().unwrap()).to_f64(),
        ACL_INT32 => i32::from_le_bytes(b(4).try_into().unwrap()) as f64,
        ACL_INT64 => i64::from_le_bytes(b(8).try_into().unwrap()) as f64,
        ACL_DOUBLE => f64::from_le_bytes(b(8).try_into().unwrap()),
        ACL_INT8 => i8::from_le_bytes(b(1).try_into().unwrap()) as f64,
        ACL_UINT8 | ACL_BOOL => b(1)[0] as f64,
        ACL_INT16 => i16::from_le_bytes(b(2).try_into().unwrap()) as f64,
        _ => f64::NAN,
    }
}

fn read_index(bytes: &[u8], dtype: i32, i: usize) -> i64 {
    match dtype {
        ACL_INT32 => i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as i64,
        _ => i64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()),
    }
}

/// Writes an f32 accumulator, rounded once to `dtype`.
fn write_acc(bytes: &mut [u8], dtype: i32, i: usize, v: f32) {
    match dtype {
        ACL_FLOAT => bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        ACL_FLOAT16 => bytes[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes()),
        _ => bytes[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
    }
}

fn load(s: &mut State, t: &TensorDesc) -> Vec<u8> {
    match s.device_range(t.start(), t.byte_len()) {
        Some(r) => s.device_bytes(r).to_vec(),
        None => {
            s.violation(format!("an input of {} bytes was freed before the operator ran", t.byte_len()));
            vec![0; t.byte_len()]
        }
    }
}

fn store(s: &mut State, t: &TensorDesc, bytes: &[u8]) {
    match s.device_range(t.start(), bytes.len()) {
        Some(r) => s.device_bytes_mut(r).copy_from_slice(bytes),
        None => s.violation(format!("output of {} bytes outside device memory", bytes.len())),
    }
}

/// First maximum of `values` in the given order; a NaN is taken and a later NaN replaces it.
fn argmax(values: impl Iterator<Item = (usize, f64)>) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in values {
        match best {
            Some((_, b)) if !(v > b || v.is_nan()) => {}
            _ => best = Some((i, v)),
        }
    }
    best
}

/// Executes a queued operator (at `aclrtSynchronizeStream`).
pub(crate) fn run(s: &mut State, q: &Queued) {
    s.last_deterministic = q.deterministic;
    // The kernels write their tiling data to the workspace first.
    let (ws, ws_len) = q.workspace;
    if ws_len > 0 {
        match s.device_range(ws, ws_len as usize) {
            Some(r) => s.device_bytes_mut(r).fill(0),
            None => s.violation("workspace freed before the operator ran".into()),
        }
    }
    match &q.job {
        Job::AdaptiveForward { input, out, indices, .. } => {
            let [n, c, h, w] = nchw(input);
            let [ho, wo] = [out.dims[out.dims.len() - 2] as usize, out.dims[out.dims.len() - 1] as usize];
            let x = load(s, input);
            let size = itemsize(input.dtype);
            let (mut y, mut idx) = (vec![0u8; out.byte_len()], vec![0u8; indices.byte_len()]);
            for plane in 0..n * c {
                for oh in 0..ho {
                    let (h0, h1) = (oh * h / ho, ((oh + 1) * h).div_ceil(ho));
                    for ow in 0..wo {
                        let (w0, w1) = (ow * w / wo, ((ow + 1) * w).div_ceil(wo));
                        let cells = (h0..h1).flat_map(|ih| (w0..w1).map(move |iw| ih * w + iw));
                        let (best, _) =
                            argmax(cells.map(|f| (f, read(&x, input.dtype, plane * h * w + f)))).unwrap();
                        let o = (plane * ho + oh) * wo + ow;
                        let src = (plane * h * w + best) * size;
                        y[o * size..(o + 1) * size].copy_from_slice(&x[src..src + size]);
                        idx[8 * o..8 * o + 8].copy_from_slice(&(best as i64).to_le_bytes());
                    }
                }
            }
            store(s, out, &y);
            store(s, indices, &idx);
        }
        Job::AdaptiveBackward { grad_output, input, indices, grad_input }
        | Job::IndicesBackward { grad_output, input, indices, grad_input, .. } => {
            scatter_by_index(s, grad_output, input, indices, grad_input)
        }
        Job::MaskForward { input, params, out, mask } => mask_forward(s, input, params, out, mask),
        Job::IndicesForward { input, params, out, indices } => {
            indices_forward(s, input, params, out, indices)
        }
        Job::MaskBackward { grad_output, input, mask, params, grad_input } => {
            mask_backward(s, grad_output, input, mask, params, grad_input)
        }
        Job::Pool3dForward { input, params, out, indices } => {
            let Ok([k, st, p, d]) = pool3d(s, params, true) else { return };
            let [.., od, oh, ow] = ncdhw(out);
            let taps = |a: usize, o: usize, len: usize| -> Vec<usize> {
                (0..k[a])
                    .map(|j| o as i64 * st[a] - p[a] + j * d[a])
                    .filter(|&i| (0..len as i64).contains(&i))
                    .map(|i| i as usize)
                    .collect()
            };
            volume_forward(s, input, out, indices, [od, oh, ow], taps)
        }
        Job::Adaptive3dForward { input, out, indices, .. } => {
            let [.., od, oh, ow] = ncdhw(out);
            let outs = [od, oh, ow];
            // PyTorch's adaptive windows, which the divisible case's MaxPool3D (kernel = stride =
            // input / output) also gives.
            let taps = |a: usize, o: usize, len: usize| -> Vec<usize> {
                (o * len / outs[a]..((o + 1) * len).div_ceil(outs[a])).collect()
            };
            volume_forward(s, input, out, indices, outs, taps)
        }
        Job::Unpool { input, indices, output_size, out, .. } => unpool(s, input, indices, output_size, out),
        Job::UnpoolBackward { grad_output, indices, output_size, out, .. } => {
            gather(s, grad_output, indices, output_size, out)
        }
        Job::Pool3dBackward { grad_output, input, indices, grad_input, .. }
        | Job::Adaptive3dBackward { grad_output, input, indices, grad_input } => {
            let [n, c, d, h, w] = ncdhw(input);
            scatter_into_planes(s, grad_output, indices, grad_input, n * c, d * h * w)
        }
    }
}

/// ScatterElements along the flattened plane, reduction "none": `out[plane, idx[e]] = self[e]`,
/// the rest zero. Which of equal indices wins is not defined by CANN: the double lets the
/// *first* win (the opposite of poolgrad's rule), so that a caller relying on the order shows.
/// An index outside the plane is a violation (a real device would write outside `out`).
fn unpool(s: &mut State, input: &TensorDesc, indices: &TensorDesc, output_size: &[i64], out: &TensorDesc) {
    let full = output_size.iter().product::<i64>() as usize;
    let pooled = input.dims[input.dims.len() - output_size.len()..].iter().product::<i64>() as usize;
    let size = itemsize(input.dtype);
    let (x, idx) = (load(s, input), load(s, indices));
    let mut y = vec![0u8; out.byte_len()];
    let mut written = vec![false; full];
    for plane in 0..input.numel() / pooled.max(1) {
        written.fill(false);
        for p in 0..pooled {
            let e = plane * pooled + p;
            let Some(i) = in_plane(s, &idx, indices.dtype, e, full, "write outside out") else { continue };
            if !std::mem::replace(&mut written[i], true) {
                let o = plane * full + i;
                y[o * size..(o + 1) * size].copy_from_slice(&x[e * size..(e + 1) * size]);
            }
        }
    }
    store(s, out, &y);
}

/// GatherElements along the flattened plane: `out[e] = gradOutput[plane, idx[e]]`, cast to
/// `out`'s dtype (the 2-D backward's `Cast`).
fn gather(
    s: &mut State,
    grad_output: &TensorDesc,
    indices: &TensorDesc,
    output_size: &[i64],
    out: &TensorDesc,
) {
    let full = output_size.iter().product::<i64>() as usize;
    let pooled = out.dims[out.dims.len() - output_size.len()..].iter().product::<i64>() as usize;
    let (g, idx) = (load(s, grad_output), load(s, indices));
    let (gs, os) = (itemsize(grad_output.dtype), itemsize(out.dtype));
    let mut y = vec![0u8; out.byte_len()];
    for e in 0..out.numel() {
        let plane = e / pooled.max(1);
        let Some(i) = in_plane(s, &idx, indices.dtype, e, full, "read outside gradOutput") else { continue };
        let src = plane * full + i;
        if grad_output.dtype == out.dtype {
            y[e * os..(e + 1) * os].copy_from_slice(&g[src * gs..(src + 1) * gs]);
        } else {
            write_value(&mut y, out.dtype, e, read(&g, grad_output.dtype, src));
        }
    }
    store(s, out, &y);
}

/// Writes `v` as element `i` of a `dtype` buffer (a cast: integers truncate, BOOL is `v != 0`).
fn write_value(bytes: &mut [u8], dtype: i32, i: usize, v: f64) {
    let n = itemsize(dtype);
    let dst = &mut bytes[i * n..(i + 1) * n];
    match dtype {
        ACL_FLOAT => dst.copy_from_slice(&(v as f32).to_le_bytes()),
        ACL_FLOAT16 => dst.copy_from_slice(&f16::from_f64(v).to_le_bytes()),
        ACL_DOUBLE => dst.copy_from_slice(&v.to_le_bytes()),
        ACL_INT8 => dst.copy_from_slice(&(v as i8).to_le_bytes()),
        ACL_UINT8 => dst.copy_from_slice(&(v as u8).to_le_bytes()),
        ACL_BOOL => dst[0] = u8::from(v != 0.0),
        ACL_INT16 => dst.copy_from_slice(&(v as i16).to_le_bytes()),
        ACL_INT32 => dst.copy_from_slice(&(v as i32).to_le_bytes()),
        _ => dst.copy_from_slice(&(v as i64).to_le_bytes()),
    }
}

/// A 3-D forward: for every `(n, c)` volume and output `(od, oh, ow)`, the first maximum (a NaN
/// is taken) over the window `taps(0, od, D) x taps(1, oh, H) x taps(2, ow, W)` scanned in
/// `(d, h, w)` order, with its flat index `(id * H + ih) * W + iw` written in the indices' dtype.
fn volume_forward(
    s: &mut State,
    input: &TensorDesc,
    out: &TensorDesc,
    indices: &TensorDesc,
    outs: [usize; 3],
    taps: impl Fn(usize, usize, usize) -> Vec<usize>,
) {
    let [n, c, d, h, w] = ncdhw(input);
    let [od, oh, ow] = outs;
    let x = load(s, input);
    let (size, isize_) = (itemsize(input.dtype), itemsize(indices.dtype));
    let (mut y, mut idx) = (vec![0u8; out.byte_len()], vec![0u8; indices.byte_len()]);
    let volume = d * h * w;
    for v in 0..n * c {
        for (o, (zd, (zh, zw))) in
            (0..od).flat_map(|a| (0..oh).flat_map(move |b| (0..ow).map(move |e| (a, (b, e))))).enumerate()
        {
            let (td, th, tw) = (taps(0, zd, d), taps(1, zh, h), taps(2, zw, w));
            let mut cells = Vec::with_capacity(td.len() * th.len() * tw.len());
            for &i in &td {
                for &j in &th {
                    cells.extend(tw.iter().map(|&l| (i * h + j) * w + l));
                }
            }
            let values = cells.into_iter().map(|f| (f, read(&x, input.dtype, v * volume + f)));
            let Some((best, _)) = argmax(values) else {
                continue;
            };
            let e = v * od * oh * ow + o;
            let src = (v * volume + best) * size;
            y[e * size..(e + 1) * size].copy_from_slice(&x[src..src + size]);
            idx[e * isize_..(e + 1) * isize_].copy_from_slice(&(best as i64).to_le_bytes()[..isize_]);
        }
    }
    store(s, out, &y);
    store(s, indices, &idx);
}

/// The backward of flat arg-max indices (both backwards that take them): `gradInput[n, c, idx] +=
/// gradOutput[n, c, o]` in row-major output order, accumulated in f32. An index outside the plane
/// is recorded as a violation (a real device would write outside gradInput) and skipped.
fn scatter_by_index(
    s: &mut State,
    grad_output: &TensorDesc,
    input: &TensorDesc,
    indices: &TensorDesc,
    grad_input: &TensorDesc,
) {
    let [n, c, h, w] = nchw(input);
    scatter_into_planes(s, grad_output, indices, grad_input, n * c, h * w)
}

/// `gradInput[plane, idx] += gradOutput[plane, o]` over `planes` planes of `len` positions, in
/// row-major output order, accumulated in f32; an index outside the plane is a violation.
fn scatter_into_planes(
    s: &mut State,
    grad_output: &TensorDesc,
    indices: &TensorDesc,
    grad_input: &TensorDesc,
    planes: usize,
    len: usize,
) {
    let positions = grad_output.numel() / planes;
    let (g, idx) = (load(s, grad_output), load(s, indices));
    let mut acc = vec![0f32; grad_input.numel()];
    for plane in 0..planes {
        for p in 0..positions {
            let e = plane * positions + p;
            let Some(i) = in_plane(s, &idx, indices.dtype, e, len, "write outside gradInput") else {
                continue;
            };
            acc[plane * len + i] += read(&g, grad_output.dtype, e) as f32;
        }
    }
    finish_gradient(s, grad_input, &acc);
}

/// Index `e` of `idx`, if it lies in `0..len`; else a recorded violation (what a real device
/// would then do: `consequence`).
fn in_plane(s: &mut State, idx: &[u8], dtype: i32, e: usize, len: usize, consequence: &str) -> Option<usize> {
    let i = read_index(idx, dtype, e);
    if (0..len as i64).contains(&i) {
        return Some(i as usize);
    }
    s.violation(format!("index {i} at element {e} reached the device: a real NPU would {consequence}"));
    None
}

fn finish_gradient(s: &mut State, grad_input: &TensorDesc, acc: &[f32]) {
    let mut bytes = vec![0u8; grad_input.byte_len()];
    for (i, &v) in acc.iter().enumerate() {
        write_acc(&mut bytes, grad_input.dtype, i, v);
    }
    store(s, grad_input, &bytes);
}

/// Which layout the SoC writes (A.0): the int32 prefix on A2/A3 for kernels other than 1x1,
/// otherwise the 5HD bit mask.
fn i32_prefix(s: &State, pool: &Pool) -> bool {
    arch(&s.soc()) == Arch::Dav2201 && pool.k != [1, 1]
}

/// The input cell of window offset `k` at output `(oh, ow)`, or `None` in padding.
fn cell(pool: &Pool, h: usize, w: usize, oh: usize, ow: usize, k: usize) -> Option<usize> {
    let kw = pool.k[1] as usize;
    let ih = oh as i64 * pool.s[0] - pool.p[0] + (k / kw) as i64 * pool.d[0];
    let iw = ow as i64 * pool.s[1] - pool.p[1] + (k % kw) as i64 * pool.d[1];
    ((0..h as i64).contains(&ih) && (0..w as i64).contains(&iw)).then(|| ih as usize * w + iw as usize)
}

fn mask_forward(s: &mut State, input: &TensorDesc, params: &MaskParams, out: &TensorDesc, mask: &TensorDesc) {
    let [n, c, h, w] = nchw(input);
    let Ok(pool) = pool(params, h, w, false) else { return };
    let [ho, wo] = pool.out;
    let positions = ho * wo;
    let taps = (pool.k[0] * pool.k[1]) as usize;
    let prefix = i32_prefix(s, &pool);
    // Atlas training computes FLOAT input in FLOAT16 (A.3, "Precision").
    let via_f16 = arch(&s.soc()) == Arch::Dav1001 && input.dtype == ACL_FLOAT;
    let x = load(s, input);
    let size = itemsize(input.dtype);
    let mut y = vec![0u8; out.byte_len()];
    let mut m = load(s, mask);
    let row = positions.div_ceil(16) * 16 + 16;
    let c1s = c.div_ceil(16);
    for plane in 0..n * c {
        for p in 0..positions {
            let (oh, ow) = (p / wo, p % wo);
            let taps_in = (0..taps).filter_map(|k| cell(&pool, h, w, oh, ow, k).map(|f| (k, f)));
            let (k, v) = argmax(taps_in.map(|(k, f)| {
                let v = read(&x, input.dtype, plane * h * w + f);
                (k, if via_f16 { f16::from_f64(v).to_f64() } else { v })
            }))
            .unwrap();
            let flat = cell(&pool, h, w, oh, ow, k).unwrap();
            let o = plane * positions + p;
            if via_f16 {
                y[4 * o..4 * o + 4].copy_from_slice(&(v as f32).to_le_bytes());
            } else {
                let src = (plane * h * w + flat) * size;
                y[o * size..(o + 1) * size].copy_from_slice(&x[src..src + size]);
            }
            if prefix {
                m[4 * o..4 * o + 4].copy_from_slice(&(flat as i32).to_le_bytes());
            }
        }
    }
    if !prefix {
        // Every word of the first ceil(P/16)*16 positions of each (n, c1, k) row is written: tail
        // positions are zero, 1x1 kernels write 0xFFFF, and channels past C (padding lanes that
        // compare equal) are inferred to keep their bit at k = 0. The "+1" block is not written.
        for nn in 0..n {
            for c1 in 0..c1s {
                for k in 0..taps {
                    for p in 0..positions.div_ceil(16) * 16 {
                        let word = ((nn * c1s + c1) * taps + k) * row + p;
                        let mut bits = 0u16;
                        if pool.k == [1, 1] {
                            bits = 0xFFFF;
                        } else if p < positions {
                            for b in 0..16 {
                                let ch = 16 * c1 + b;
                                let set = if ch < c {
                                    winner(&x, input.dtype, via_f16, &pool, [h, w], nn * c + ch, p) == k
                                } else {
                                    k == 0
                                };
                                bits |= (set as u16) << b;
                            }
                        }
                        m[2 * word..2 * word + 2].copy_from_slice(&bits.to_le_bytes());
                    }
                }
            }
        }
    }
    store(s, out, &y);
    store(s, mask, &m);
}

/// The window offset of the first maximum of plane `plane` at output position `p`.
fn winner(
    x: &[u8],
    dtype: i32,
    via_f16: bool,
    pool: &Pool,
    [h, w]: [usize; 2],
    plane: usize,
    p: usize,
) -> usize {
    let (oh, ow) = (p / pool.out[1], p % pool.out[1]);
    let taps = (pool.k[0] * pool.k[1]) as usize;
    let values = (0..taps).filter_map(|k| {
        cell(pool, h, w, oh, ow, k).map(|f| {
            let v = read(x, dtype, plane * h * w + f);
            (k, if via_f16 { f16::from_f64(v).to_f64() } else { v })
        })
    });
    argmax(values).map_or(usize::MAX, |(k, _)| k)
}

fn mask_backward(
    s: &mut State,
    grad_output: &TensorDesc,
    input: &TensorDesc,
    mask: &TensorDesc,
    params: &MaskParams,
    grad_input: &TensorDesc,
) {
    let [n, c, h, w] = nchw(input);
    let Ok(pool) = pool(params, h, w, false) else { return };
    let positions = pool.out[0] * pool.out[1];
    let taps = (pool.k[0] * pool.k[1]) as usize;
    let (g, m) = (load(s, grad_output), load(s, mask));
    let mut acc = vec![0f32; grad_input.numel()];
    let row = positions.div_ceil(16) * 16 + 16;
    let c1s = c.div_ceil(16);
    for plane in 0..n * c {
        let (nn, ch) = (plane / c, plane % c);
        for p in 0..positions {
            let e = plane * positions + p;
            let grad = read(&g, grad_output.dtype, e) as f32;
            if i32_prefix(s, &pool) {
                let i = i32::from_le_bytes(m[4 * e..4 * e + 4].try_into().unwrap()) as i64;
                if !(0..(h * w) as i64).contains(&i) {
                    s.violation(format!("mask value {i} at element {e} reached the device: a real NPU would write outside gradInput"));
                    continue;
                }
                acc[plane * h * w + i as usize] += grad;
            } else {
                for k in 0..taps {
                    let word = ((nn * c1s + ch / 16) * taps + k) * row + p;
                    let bits = u16::from_le_bytes([m[2 * word], m[2 * word + 1]]);
                    if bits & (1 << (ch % 16)) != 0
                        && let Some(f) = cell(&pool, h, w, p / pool.out[1], p % pool.out[1], k)
                    {
                        acc[plane * h * w + f] += grad;
                    }
                }
            }
        }
    }
    finish_gradient(s, grad_input, &acc);
}

/// `aclnnMaxPool2dWithIndices`: values and PyTorch-style flat indices (first maximum in window
/// order; a NaN is taken), written in the indices tensor's dtype.
fn indices_forward(
    s: &mut State,
    input: &TensorDesc,
    params: &MaskParams,
    out: &TensorDesc,
    indices: &TensorDesc,
) {
    let [n, c, h, w] = nchw(input);
    let regbase = arch(&s.soc()) == Arch::Dav3510;
    let Ok(pool) = pool(params, h, w, regbase) else { return };
    let [ho, wo] = pool.out;
    let taps = (pool.k[0] * pool.k[1]) as usize;
    let x = load(s, input);
    let size = itemsize(input.dtype);
    let isize_ = itemsize(indices.dtype);
    let (mut y, mut idx) = (vec![0u8; out.byte_len()], vec![0u8; indices.byte_len()]);
    for plane in 0..n * c {
        for p in 0..ho * wo {
            let taps_in = (0..taps).filter_map(|k| cell(&pool, h, w, p / wo, p % wo, k));
            let (best, _) = argmax(taps_in.map(|f| (f, read(&x, input.dtype, plane * h * w + f)))).unwrap();
            let o = plane * ho * wo + p;
            let src = (plane * h * w + best) * size;
            y[o * size..(o + 1) * size].copy_from_slice(&x[src..src + size]);
            let bytes = (best as i64).to_le_bytes();
            idx[o * isize_..(o + 1) * isize_].copy_from_slice(&bytes[..isize_]);
        }
    }
    store(s, out, &y);
    store(s, indices, &idx);
}
