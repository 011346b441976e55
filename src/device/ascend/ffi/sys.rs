//! The raw layer: CANN's C types, constants and function signatures, and [`Api`], the table of
//! resolved functions with the libraries that keep them valid. Nothing here calls CANN except
//! the library loading itself.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_void};
use core::marker::{PhantomData, PhantomPinned};
use std::path::PathBuf;

use libloading::Library;

use crate::device::ascend::soc::DeviceOp;
use crate::error::{AscendError, Error, Result};

/// Opaque `aclTensor` (the Rustonomicon's idiom for foreign types).
#[repr(C)]
pub(crate) struct AclTensorC {
    _p: [u8; 0],
    _m: PhantomData<(*mut u8, PhantomPinned)>,
}

/// Opaque `aclIntArray`.
#[repr(C)]
pub(crate) struct AclIntArrayC {
    _p: [u8; 0],
    _m: PhantomData<(*mut u8, PhantomPinned)>,
}

/// Opaque `aclOpExecutor`.
#[repr(C)]
pub(crate) struct AclOpExecutorC {
    _p: [u8; 0],
    _m: PhantomData<(*mut u8, PhantomPinned)>,
}

pub(super) type Tensor = *const AclTensorC;
pub(super) type TensorOut = *mut AclTensorC;
pub(super) type IntArr = *const AclIntArrayC;
pub(super) type Exec = *mut AclOpExecutorC;

/// `aclDataType` values (`acl/acl_base.h`).
pub(crate) mod dtype {
    pub const FLOAT: i32 = 0;
    pub const FLOAT16: i32 = 1;
    pub const INT8: i32 = 2;
    pub const INT32: i32 = 3;
    pub const INT64: i32 = 9;
    pub const DOUBLE: i32 = 11;
    pub const BF16: i32 = 27;
}

/// `aclFormat::ACL_FORMAT_NCHW`: every tensor this crate creates is 4-D (a 3-D call is described
/// with `N = 1`, as ops-nn itself unsqueezes 3-D inputs), and torch_npu and every CANN example
/// describe 4-D tensors as NCHW; the adaptive forward's AI CPU path refuses a 4-D ND tensor
/// (`aclnn_adaptive_max_pool2d.cpp`, `CheckInputFormat`).
pub(super) const FORMAT_NCHW: i32 = 0;
/// `aclFormat::ACL_FORMAT_ND`, for tensors of another rank.
pub(super) const FORMAT_ND: i32 = 2;
/// `ACL_FORMAT_NCDHW` (`acl_base.h`), the 3-D operators' five-dimensional layout.
pub(super) const FORMAT_NCDHW: i32 = 30;
/// `aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST`.
pub(super) const MALLOC_HUGE_FIRST: i32 = 0;
/// `aclrtMemAttr::ACL_HBM_MEM` (`acl/acl_rt.h`): all of the device's on-chip memory, huge and
/// normal pages. On SoCs without HBM (Atlas inference products, Atlas 200I/500 A2) CANN answers
/// for `ACL_DDR_MEM` instead (`aclrtGetMemInfo`'s documented constraints, CANN 9.0 runtime API).
pub(super) const MEM_HBM: i32 = 1;
/// `aclrtMemcpyKind` values.
pub(super) const MEMCPY_HOST_TO_DEVICE: i32 = 1;
pub(super) const MEMCPY_DEVICE_TO_HOST: i32 = 2;
/// `aclSysParamOpt::ACL_OPT_DETERMINISTIC`.
pub(super) const OPT_DETERMINISTIC: i32 = 0;
pub(super) const ACL_SUCCESS: i32 = 0;
pub(super) const ACL_ERROR_REPEAT_INITIALIZE: i32 = 100_002;

/// `aclnnXxxGetWorkspaceSize` of `aclnnAdaptiveMaxPool2d(self, outputSize, outputOut, indicesOut, ...)`;
/// `aclnnAdaptiveMaxPool3dGetWorkspaceSize` has the same signature.
pub(super) type AdaptiveForwardWs =
    unsafe extern "C" fn(Tensor, IntArr, TensorOut, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(gradOutput, self, indices, gradInput, ...)`;
/// `aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize` has the same signature.
pub(super) type AdaptiveBackwardWs =
    unsafe extern "C" fn(Tensor, Tensor, Tensor, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnMaxPool2dWithMaskGetWorkspaceSize(self, kernelSize, stride, padding, dilation, ceilMode, out,
/// indices, ...)`; `aclnnMaxPool2dWithIndicesGetWorkspaceSize` and
/// `aclnnMaxPool3dWithArgmaxGetWorkspaceSize` have the same signature.
pub(super) type PoolForwardWs = unsafe extern "C" fn(
    Tensor,
    IntArr,
    IntArr,
    IntArr,
    IntArr,
    bool,
    TensorOut,
    TensorOut,
    *mut u64,
    *mut Exec,
) -> i32;
/// `aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize(gradOutput, self, indices, kernelSize, stride,
/// padding, dilation, ceilMode, gradInput, ...)`; `aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize`
/// and `aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize` have the same signature.
pub(super) type PoolBackwardWs = unsafe extern "C" fn(
    Tensor,
    Tensor,
    Tensor,
    IntArr,
    IntArr,
    IntArr,
    IntArr,
    bool,
    TensorOut,
    *mut u64,
    *mut Exec,
) -> i32;
/// `aclnnMaxUnpool2dGetWorkspaceSize(self, indices, outputSize, out, ...)`.
pub(super) type Unpool2dWs =
    unsafe extern "C" fn(Tensor, Tensor, IntArr, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnMaxUnpool3dGetWorkspaceSize(self, indices, outputSize, stride, padding, out, ...)`.
pub(super) type Unpool3dWs =
    unsafe extern "C" fn(Tensor, Tensor, IntArr, IntArr, IntArr, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnMaxUnpool2dBackwardGetWorkspaceSize(gradOutput, self, indices, outputSize, out, ...)`.
pub(super) type Unpool2dBackwardWs =
    unsafe extern "C" fn(Tensor, Tensor, Tensor, IntArr, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnMaxUnpool3dBackwardGetWorkspaceSize(gradOutput, self, indices, outputSize, stride, padding,
/// out, ...)`.
pub(super) type Unpool3dBackwardWs = unsafe extern "C" fn(
    Tensor,
    Tensor,
    Tensor,
    IntArr,
    IntArr,
    IntArr,
    TensorOut,
    *mut u64,
    *mut Exec,
) -> i32;
/// The second phase of every operator: `aclnnXxx(workspace, workspaceSize, executor, stream)`.
pub(super) type Launch = unsafe extern "C" fn(*mut c_void, u64, Exec, *mut c_void) -> i32;

/// `aclCANNPackageVersion` (hicann/runtime `include/external/acl/acl_rt.h` l.980-987: text
/// fields of `ACL_PKG_VERSION_MAX_SIZE` (128) and `ACL_PKG_VERSION_PARTS_MAX_SIZE` (64) bytes).
#[repr(C)]
pub(super) struct CannPackageVersion {
    pub(super) version: [c_char; 128],
    pub(super) major: [c_char; 64],
    pub(super) minor: [c_char; 64],
    pub(super) release: [c_char; 64],
    pub(super) patch: [c_char; 64],
    pub(super) reserved: [c_char; 128],
}

/// `ACL_PKG_NAME_CANN`, the first `aclCANNPackageName` (`acl_rt.h` l.965-974).
pub(super) const PKG_NAME_CANN: i32 = 0;

/// The resolved CANN functions. The `Library` values keep every pointer valid.
pub(crate) struct Api {
    pub(super) acl_init: unsafe extern "C" fn(*const c_char) -> i32,
    pub(super) acl_finalize: unsafe extern "C" fn() -> i32,
    /// `aclFinalizeReference(uint64_t *refCount)` (hicann/runtime `acl_rt.h`; not in CANN 8.1).
    pub(super) acl_finalize_reference: Option<unsafe extern "C" fn(*mut u64) -> i32>,
    /// `aclsysGetCANNVersion(aclCANNPackageName, aclCANNPackageVersion*)` (hicann/runtime
    /// `acl_rt.h`, deprecated there for `aclsysGetVersionStr`, still exported).
    pub(super) aclsys_get_cann_version: Option<unsafe extern "C" fn(i32, *mut CannPackageVersion) -> i32>,
    pub(super) acl_get_recent_err_msg: unsafe extern "C" fn() -> *const c_char,
    pub(super) aclrt_get_device_count: unsafe extern "C" fn(*mut u32) -> i32,
    pub(super) aclrt_get_soc_name: unsafe extern "C" fn() -> *const c_char,
    /// `aclrtGetVersion(int32_t*, int32_t*, int32_t*)` (deprecated in newer runtimes, still exported).
    pub(super) aclrt_get_version: Option<unsafe extern "C" fn(*mut i32, *mut i32, *mut i32) -> i32>,
    pub(super) aclrt_set_device: unsafe extern "C" fn(i32) -> i32,
    pub(super) aclrt_reset_device: unsafe extern "C" fn(i32) -> i32,
    pub(super) aclrt_get_current_context: unsafe extern "C" fn(*mut *mut c_void) -> i32,
    pub(super) aclrt_set_current_context: unsafe extern "C" fn(*mut c_void) -> i32,
    pub(super) aclrt_ctx_set_sys_param_opt: unsafe extern "C" fn(i32, i64) -> i32,
    /// The process-level option (newer runtimes; nnopbase reads it since hicann/opbase c501b51).
    pub(super) aclrt_set_sys_param_opt: Option<unsafe extern "C" fn(i32, i64) -> i32>,
    pub(super) aclrt_get_sys_param_opt: Option<unsafe extern "C" fn(i32, *mut i64) -> i32>,
    pub(super) aclrt_ctx_get_sys_param_opt: Option<unsafe extern "C" fn(i32, *mut i64) -> i32>,
    pub(super) aclrt_create_stream: unsafe extern "C" fn(*mut *mut c_void) -> i32,
    pub(super) aclrt_destroy_stream: unsafe extern "C" fn(*mut c_void) -> i32,
    pub(super) aclrt_synchronize_stream: unsafe extern "C" fn(*mut c_void) -> i32,
    pub(super) aclrt_malloc: unsafe extern "C" fn(*mut *mut c_void, usize, i32) -> i32,
    /// `aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)`.
    pub(super) aclrt_get_mem_info: Option<unsafe extern "C" fn(i32, *mut usize, *mut usize) -> i32>,
    pub(super) aclrt_free: unsafe extern "C" fn(*mut c_void) -> i32,
    pub(super) aclrt_memcpy: unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, i32) -> i32,
    pub(super) aclrt_memset: unsafe extern "C" fn(*mut c_void, usize, i32, usize) -> i32,
    /// `aclrtMemsetAsync(devPtr, maxCount, value, count, stream)`: queued on `stream`.
    pub(super) aclrt_memset_async: unsafe extern "C" fn(*mut c_void, usize, i32, usize, *mut c_void) -> i32,
    pub(super) acl_create_tensor: unsafe extern "C" fn(
        *const i64,
        u64,
        i32,
        *const i64,
        i64,
        i32,
        *const i64,
        u64,
        *mut c_void,
    ) -> *mut AclTensorC,
    pub(super) acl_destroy_tensor: unsafe extern "C" fn(Tensor) -> i32,
    pub(super) acl_create_int_array: unsafe extern "C" fn(*const i64, u64) -> *mut AclIntArrayC,
    pub(super) acl_destroy_int_array: unsafe extern "C" fn(IntArr) -> i32,
    pub(super) adaptive_forward: Option<(AdaptiveForwardWs, Launch)>,
    pub(super) adaptive_backward: Option<(AdaptiveBackwardWs, Launch)>,
    pub(super) mask_forward: Option<(PoolForwardWs, Launch)>,
    pub(super) mask_backward: Option<(PoolBackwardWs, Launch)>,
    pub(super) indices_forward: Option<(PoolForwardWs, Launch)>,
    pub(super) indices_backward: Option<(PoolBackwardWs, Launch)>,
    pub(super) pool3d_forward: Option<(PoolForwardWs, Launch)>,
    pub(super) pool3d_backward: Option<(PoolBackwardWs, Launch)>,
    pub(super) adaptive3d_forward: Option<(AdaptiveForwardWs, Launch)>,
    pub(super) adaptive3d_backward: Option<(AdaptiveBackwardWs, Launch)>,
    pub(super) unpool2d: Option<(Unpool2dWs, Launch)>,
    pub(super) unpool3d: Option<(Unpool3dWs, Launch)>,
    pub(super) unpool2d_backward: Option<(Unpool2dBackwardWs, Launch)>,
    pub(super) unpool3d_backward: Option<(Unpool3dBackwardWs, Launch)>,
    _libraries: Vec<Library>,
}

/// The library files, in resolution order: a symbol comes from the first that exports it. The
/// runtime's `acl_rt.h` functions belong to `libacl_rt.so`; `libascendcl.so` still exports them
/// "for compatibility with older versions", to be dropped later (hicann/runtime
/// `docs/zh/api_ref/01_overview.md`), so the first is searched first and either will do.
const LIBRARIES: [&str; 5] =
    ["libacl_rt.so", "libascendcl.so", "libnnopbase.so", "libopapi.so", "libopapi_nn.so"];
/// The runtime libraries, one of which must be found.
const RUNTIME_LIBRARIES: [&str; 2] = ["libacl_rt.so", "libascendcl.so"];

/// Opens the CANN libraries under `roots` (each `root/lib64/<name>`, then `root/<name>`), and,
/// if `loader_path`, by bare name through the dynamic loader's search path.
fn open_libraries(roots: &[PathBuf], loader_path: bool) -> (Vec<(PathBuf, Library)>, Vec<String>) {
    let mut opened = Vec::new();
    let mut tried = Vec::new();
    for name in LIBRARIES {
        let mut candidates: Vec<PathBuf> =
            roots.iter().flat_map(|r| [r.join("lib64").join(name), r.join(name)]).collect();
        if loader_path {
            candidates.push(PathBuf::from(name));
        }
        for path in candidates {
            let bare = path.components().count() == 1;
            if !bare && !path.exists() {
                tried.push(format!("{} (not found)", path.display()));
                continue;
            }
            // SAFETY: loading a CANN library runs its initialisers, which is what CANN expects of
            // every client (torch_npu dlopens the same files). Nothing else in this process depends
            // on them not running.
            match unsafe { Library::new(&path) } {
                Ok(lib) => {
                    opened.push((path, lib));
                    break;
                }
                Err(e) => {
                    let detail = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
                    let place = if bare { " through the loader path" } else { "" };
                    tried.push(format!("{}{place} ({e}{detail})", path.display()));
                }
            }
        }
    }
    (opened, tried)
}

/// The first pointer to `symbol` among `libs`, typed as `T`.
///
/// # Safety
/// `T` must be the `unsafe extern "C" fn` type of the symbol's documented C signature.
unsafe fn find<T: Copy>(libs: &[(PathBuf, Library)], symbol: &str) -> Option<T> {
    libs.iter().find_map(|(_, lib)| {
        // SAFETY: the caller guarantees `T` matches the symbol's C type; the pointer is copied out
        // and stays valid while `lib` is kept in `Api::_libraries`.
        unsafe { lib.get::<T>(symbol) }.ok().map(|s| *s)
    })
}

impl Api {
    pub(super) fn load(roots: &[PathBuf], loader_path: bool) -> Result<Api> {
        let (libs, mut tried) = open_libraries(roots, loader_path);
        let loaded: Vec<String> = libs.iter().map(|(p, _)| p.display().to_string()).collect();
        if !libs.iter().any(|(p, _)| p.file_name().is_some_and(|n| RUNTIME_LIBRARIES.iter().any(|r| n == *r)))
        {
            return Err(Error::Ascend(AscendError::Unavailable {
                reason: "neither libacl_rt.so nor libascendcl.so found".into(),
                tried,
            }));
        }
        let missing = |symbol: &str, tried: &mut Vec<String>| {
            tried.splice(0..0, loaded.iter().map(|l| format!("{l} (loaded)")));
            Error::Ascend(AscendError::Unavailable {
                reason: format!("no library exports `{symbol}` (CANN too old or incomplete?)"),
                tried: std::mem::take(tried),
            })
        };
        macro_rules! required {
            ($name:literal) => {
                // SAFETY: each field's type is the C signature of `$name` (module docs).
                match unsafe { find(&libs, $name) } {
                    Some(f) => f,
                    None => return Err(missing($name, &mut tried)),
                }
            };
        }
        macro_rules! optional {
            ($name:literal) => {
                // SAFETY: each field's type is the C signature of `$name` (module docs).
                unsafe { find(&libs, $name) }
            };
        }
        macro_rules! op {
            ($op:expr) => {
                // SAFETY: the tuple types are the C signatures of the two phases (module docs).
                unsafe { find(&libs, $op.workspace_symbol()).zip(find(&libs, $op.symbol())) }
            };
        }
        Ok(Api {
            acl_init: required!("aclInit"),
            acl_finalize: required!("aclFinalize"),
            acl_finalize_reference: optional!("aclFinalizeReference"),
            aclsys_get_cann_version: optional!("aclsysGetCANNVersion"),
            acl_get_recent_err_msg: required!("aclGetRecentErrMsg"),
            aclrt_get_device_count: required!("aclrtGetDeviceCount"),
            aclrt_get_soc_name: required!("aclrtGetSocName"),
            aclrt_get_version: optional!("aclrtGetVersion"),
            aclrt_set_device: required!("aclrtSetDevice"),
            aclrt_reset_device: required!("aclrtResetDevice"),
            aclrt_get_current_context: required!("aclrtGetCurrentContext"),
            aclrt_set_current_context: required!("aclrtSetCurrentContext"),
            aclrt_ctx_set_sys_param_opt: required!("aclrtCtxSetSysParamOpt"),
            aclrt_set_sys_param_opt: optional!("aclrtSetSysParamOpt"),
            aclrt_get_sys_param_opt: optional!("aclrtGetSysParamOpt"),
            aclrt_ctx_get_sys_param_opt: optional!("aclrtCtxGetSysParamOpt"),
            aclrt_create_stream: required!("aclrtCreateStream"),
            aclrt_destroy_stream: required!("aclrtDestroyStream"),
            aclrt_synchronize_stream: required!("aclrtSynchronizeStream"),
            aclrt_malloc: required!("aclrtMalloc"),
            aclrt_get_mem_info: optional!("aclrtGetMemInfo"),
            aclrt_free: required!("aclrtFree"),
            aclrt_memcpy: required!("aclrtMemcpy"),
            aclrt_memset: required!("aclrtMemset"),
            aclrt_memset_async: required!("aclrtMemsetAsync"),
            acl_create_tensor: required!("aclCreateTensor"),
            acl_destroy_tensor: required!("aclDestroyTensor"),
            acl_create_int_array: required!("aclCreateIntArray"),
            acl_destroy_int_array: required!("aclDestroyIntArray"),
            adaptive_forward: op!(DeviceOp::AdaptiveForward),
            adaptive_backward: op!(DeviceOp::AdaptiveBackward),
            mask_forward: op!(DeviceOp::MaskForward),
            mask_backward: op!(DeviceOp::MaskBackward),
            indices_forward: op!(DeviceOp::WithIndicesForward),
            indices_backward: op!(DeviceOp::WithIndicesBackward),
            pool3d_forward: op!(DeviceOp::Pool3dForward),
            pool3d_backward: op!(DeviceOp::Pool3dBackward),
            adaptive3d_forward: op!(DeviceOp::Adaptive3dForward),
            adaptive3d_backward: op!(DeviceOp::Adaptive3dBackward),
            unpool2d: op!(DeviceOp::Unpool2d),
            unpool3d: op!(DeviceOp::Unpool3d),
            unpool2d_backward: op!(DeviceOp::Unpool2dBackward),
            unpool3d_backward: op!(DeviceOp::Unpool3dBackward),
            _libraries: libs.into_iter().map(|(_, l)| l).collect(),
        })
    }
}

impl Api {
    /// The phase-2 (launch) function of `op`, if the libraries export it.
    pub(super) fn launch(&self, op: DeviceOp) -> Option<Launch> {
        match op {
            DeviceOp::AdaptiveForward => self.adaptive_forward.map(|o| o.1),
            DeviceOp::AdaptiveBackward => self.adaptive_backward.map(|o| o.1),
            DeviceOp::MaskForward => self.mask_forward.map(|o| o.1),
            DeviceOp::MaskBackward => self.mask_backward.map(|o| o.1),
            DeviceOp::WithIndicesForward => self.indices_forward.map(|o| o.1),
            DeviceOp::WithIndicesBackward => self.indices_backward.map(|o| o.1),
            DeviceOp::Pool3dForward => self.pool3d_forward.map(|o| o.1),
            DeviceOp::Pool3dBackward => self.pool3d_backward.map(|o| o.1),
            DeviceOp::Adaptive3dForward => self.adaptive3d_forward.map(|o| o.1),
            DeviceOp::Adaptive3dBackward => self.adaptive3d_backward.map(|o| o.1),
            DeviceOp::Unpool2d => self.unpool2d.map(|o| o.1),
            DeviceOp::Unpool3d => self.unpool3d.map(|o| o.1),
            DeviceOp::Unpool2dBackward => self.unpool2d_backward.map(|o| o.1),
            DeviceOp::Unpool3dBackward => self.unpool3d_backward.map(|o| o.1),
        }
    }

    /// The two phases of the max-pooling forward `op` (the 2-D ones and the 3-D one share a
    /// signature), if the libraries export them.
    pub(super) fn pool_forward(&self, op: DeviceOp) -> Option<(PoolForwardWs, Launch)> {
        match op {
            DeviceOp::MaskForward => self.mask_forward,
            DeviceOp::WithIndicesForward => self.indices_forward,
            DeviceOp::Pool3dForward => self.pool3d_forward,
            _ => None,
        }
    }

    /// The two phases of the max-pooling backward `op`, if the libraries export them.
    pub(super) fn pool_backward(&self, op: DeviceOp) -> Option<(PoolBackwardWs, Launch)> {
        match op {
            DeviceOp::MaskBackward => self.mask_backward,
            DeviceOp::WithIndicesBackward => self.indices_backward,
            DeviceOp::Pool3dBackward => self.pool3d_backward,
            _ => None,
        }
    }

    /// The two phases of the adaptive forward `op` (2-D or 3-D, one signature).
    pub(super) fn adaptive_forward(&self, op: DeviceOp) -> Option<(AdaptiveForwardWs, Launch)> {
        match op {
            DeviceOp::AdaptiveForward => self.adaptive_forward,
            DeviceOp::Adaptive3dForward => self.adaptive3d_forward,
            _ => None,
        }
    }

    /// The two phases of the adaptive backward `op` (2-D or 3-D, one signature).
    pub(super) fn adaptive_backward(&self, op: DeviceOp) -> Option<(AdaptiveBackwardWs, Launch)> {
        match op {
            DeviceOp::AdaptiveBackward => self.adaptive_backward,
            DeviceOp::Adaptive3dBackward => self.adaptive3d_backward,
            _ => None,
        }
    }
}

/// The search roots used when none is given: `ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`, then the
/// default install directories.
pub(crate) fn default_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .collect();
    roots.extend(["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann"].map(PathBuf::from));
    roots.dedup();
    roots
}
