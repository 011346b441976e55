//! The CANN C ABI: loading the libraries, the function table, and RAII handles.
//!
//! This is the only module of the crate with `unsafe` code. Every C signature below was copied from
//! the CANN headers (`acl/acl.h`, `acl/acl_rt.h`, `aclnn/acl_meta.h` of CANN 8.1.RC1) and the
//! hicann/ops-nn operator docs (`aclnnAdaptiveMaxPool2d.md`, `aclnnAdaptiveMaxPool2dBackward.md`,
//! `aclnnMaxPool2dWithMask.md`, `aclnnMaxPool2dWithMaskBackward.md`, `aclnnMaxPool2dWithIndices.md`,
//! `aclnnMaxPool2dWithIndicesBackward.md`); C enums are `int`.
//!
//! Three layers, bottom up:
//! - [`Api`]: the resolved function pointers and the [`Library`] values that keep them valid;
//! - [`Runtime`]: a loaded, initialised CANN (`aclInit` once per process; `aclFinalize` only when
//!   the user asks for it through [`finalize`], see the `ascend` module docs);
//! - RAII handles ([`Session`] = device + context + stream, [`DeviceBuffer`], [`AclTensor`],
//!   [`IntArray`], [`OpExecutor`]), each releasing what it owns in `Drop` without panicking, in
//!   CANN's teardown order (tensors and arrays, executor, buffers, then stream, context, device).
//!
//! **Executors are one-shot.** An executor from `aclnnXxxGetWorkspaceSize` belongs to this crate
//! until it is passed to `aclnnXxx`; from that call on it belongs to CANN, which deletes it when the
//! launch returns, successful or not (hicann/opbase `op_executor.cpp`, `CommonOpExecutorRun`:
//! `delete executor`, or `DeleteExecutorForError`). [`OpExecutor`] models exactly that: launching
//! consumes it, and dropping one that was never launched destroys it with
//! `aclDestroyAclOpExecutor` (`acl_op_api.cpp` deletes ordinary executors and cache wrappers).
//! No executor is made repeatable: `aclSetAclOpExecutorRepeatable` fails with `ACLNN_ERR_INNER`
//! for the mask operators, whose op_api points internal views at the caller's mask buffer
//! (`SetStorageAddr` + `SetFromWorkspace(false)`), which nnopbase's
//! `LauncherRepeatableChecker::CheckLaunchArg` rejects, and for any executor served from the aclnn
//! cache; and a [`Plan`](crate::Plan) runs at most once by construction, so repeatability would buy
//! nothing. torch_npu does the same (`EXEC_NPU_CMD`: phase 1, then the launch at once).

#![allow(unsafe_code)]

use core::ffi::{CStr, c_char, c_void};
use core::marker::{PhantomData, PhantomPinned};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use libloading::Library;

use super::soc::DeviceOp;
use super::status;
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

type Tensor = *const AclTensorC;
type TensorOut = *mut AclTensorC;
type IntArr = *const AclIntArrayC;
type Exec = *mut AclOpExecutorC;

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
const FORMAT_NCHW: i32 = 0;
/// `aclFormat::ACL_FORMAT_ND`, for tensors of another rank.
const FORMAT_ND: i32 = 2;
/// `aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST`.
const MALLOC_HUGE_FIRST: i32 = 0;
/// `aclrtMemcpyKind` values.
const MEMCPY_HOST_TO_DEVICE: i32 = 1;
const MEMCPY_DEVICE_TO_HOST: i32 = 2;
/// `aclSysParamOpt::ACL_OPT_DETERMINISTIC`.
const OPT_DETERMINISTIC: i32 = 0;
const ACL_SUCCESS: i32 = 0;
const ACL_ERROR_REPEAT_INITIALIZE: i32 = 100_002;

/// `aclnnXxxGetWorkspaceSize` of `aclnnAdaptiveMaxPool2d(self, outputSize, outputOut, indicesOut, ...)`.
type AdaptiveForwardWs =
    unsafe extern "C" fn(Tensor, IntArr, TensorOut, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(gradOutput, self, indices, gradInput, ...)`.
type AdaptiveBackwardWs = unsafe extern "C" fn(Tensor, Tensor, Tensor, TensorOut, *mut u64, *mut Exec) -> i32;
/// `aclnnMaxPool2dWithMaskGetWorkspaceSize(self, kernelSize, stride, padding, dilation, ceilMode, out,
/// indices, ...)`; `aclnnMaxPool2dWithIndicesGetWorkspaceSize` has the same signature.
type PoolForwardWs = unsafe extern "C" fn(
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
/// has the same signature.
type PoolBackwardWs = unsafe extern "C" fn(
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
/// The second phase of every operator: `aclnnXxx(workspace, workspaceSize, executor, stream)`.
type Launch = unsafe extern "C" fn(*mut c_void, u64, Exec, *mut c_void) -> i32;

/// The resolved CANN functions. The `Library` values keep every pointer valid.
pub(crate) struct Api {
    acl_init: unsafe extern "C" fn(*const c_char) -> i32,
    acl_finalize: unsafe extern "C" fn() -> i32,
    acl_get_recent_err_msg: unsafe extern "C" fn() -> *const c_char,
    aclrt_get_device_count: unsafe extern "C" fn(*mut u32) -> i32,
    aclrt_get_soc_name: unsafe extern "C" fn() -> *const c_char,
    /// `aclrtGetVersion(int32_t*, int32_t*, int32_t*)` (deprecated in newer runtimes, still exported).
    aclrt_get_version: Option<unsafe extern "C" fn(*mut i32, *mut i32, *mut i32) -> i32>,
    aclrt_set_device: unsafe extern "C" fn(i32) -> i32,
    aclrt_reset_device: unsafe extern "C" fn(i32) -> i32,
    aclrt_create_context: unsafe extern "C" fn(*mut *mut c_void, i32) -> i32,
    aclrt_destroy_context: unsafe extern "C" fn(*mut c_void) -> i32,
    aclrt_set_current_context: unsafe extern "C" fn(*mut c_void) -> i32,
    aclrt_ctx_set_sys_param_opt: unsafe extern "C" fn(i32, i64) -> i32,
    /// The process-level option (newer runtimes; nnopbase reads it since hicann/opbase c501b51).
    aclrt_set_sys_param_opt: Option<unsafe extern "C" fn(i32, i64) -> i32>,
    aclrt_get_sys_param_opt: Option<unsafe extern "C" fn(i32, *mut i64) -> i32>,
    aclrt_ctx_get_sys_param_opt: Option<unsafe extern "C" fn(i32, *mut i64) -> i32>,
    aclrt_create_stream: unsafe extern "C" fn(*mut *mut c_void) -> i32,
    aclrt_destroy_stream: unsafe extern "C" fn(*mut c_void) -> i32,
    aclrt_synchronize_stream: unsafe extern "C" fn(*mut c_void) -> i32,
    aclrt_malloc: unsafe extern "C" fn(*mut *mut c_void, usize, i32) -> i32,
    aclrt_free: unsafe extern "C" fn(*mut c_void) -> i32,
    aclrt_memcpy: unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, i32) -> i32,
    aclrt_memset: unsafe extern "C" fn(*mut c_void, usize, i32, usize) -> i32,
    acl_create_tensor: unsafe extern "C" fn(
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
    acl_destroy_tensor: unsafe extern "C" fn(Tensor) -> i32,
    acl_create_int_array: unsafe extern "C" fn(*const i64, u64) -> *mut AclIntArrayC,
    acl_destroy_int_array: unsafe extern "C" fn(IntArr) -> i32,
    acl_destroy_executor: unsafe extern "C" fn(Exec) -> i32,
    adaptive_forward: Option<(AdaptiveForwardWs, Launch)>,
    adaptive_backward: Option<(AdaptiveBackwardWs, Launch)>,
    mask_forward: Option<(PoolForwardWs, Launch)>,
    mask_backward: Option<(PoolBackwardWs, Launch)>,
    indices_forward: Option<(PoolForwardWs, Launch)>,
    indices_backward: Option<(PoolBackwardWs, Launch)>,
    _libraries: Vec<Library>,
}

/// The library files, in resolution order: a symbol comes from the first that exports it.
const LIBRARIES: [&str; 4] = ["libascendcl.so", "libnnopbase.so", "libopapi.so", "libopapi_nn.so"];

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
    fn load(roots: &[PathBuf], loader_path: bool) -> Result<Api> {
        let (libs, mut tried) = open_libraries(roots, loader_path);
        let loaded: Vec<String> = libs.iter().map(|(p, _)| p.display().to_string()).collect();
        if !libs.iter().any(|(p, _)| p.file_name().is_some_and(|n| n == "libascendcl.so")) {
            return Err(Error::Ascend(AscendError::Unavailable {
                reason: "libascendcl.so not found".into(),
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
            acl_get_recent_err_msg: required!("aclGetRecentErrMsg"),
            aclrt_get_device_count: required!("aclrtGetDeviceCount"),
            aclrt_get_soc_name: required!("aclrtGetSocName"),
            aclrt_get_version: optional!("aclrtGetVersion"),
            aclrt_set_device: required!("aclrtSetDevice"),
            aclrt_reset_device: required!("aclrtResetDevice"),
            aclrt_create_context: required!("aclrtCreateContext"),
            aclrt_destroy_context: required!("aclrtDestroyContext"),
            aclrt_set_current_context: required!("aclrtSetCurrentContext"),
            aclrt_ctx_set_sys_param_opt: required!("aclrtCtxSetSysParamOpt"),
            aclrt_set_sys_param_opt: optional!("aclrtSetSysParamOpt"),
            aclrt_get_sys_param_opt: optional!("aclrtGetSysParamOpt"),
            aclrt_ctx_get_sys_param_opt: optional!("aclrtCtxGetSysParamOpt"),
            aclrt_create_stream: required!("aclrtCreateStream"),
            aclrt_destroy_stream: required!("aclrtDestroyStream"),
            aclrt_synchronize_stream: required!("aclrtSynchronizeStream"),
            aclrt_malloc: required!("aclrtMalloc"),
            aclrt_free: required!("aclrtFree"),
            aclrt_memcpy: required!("aclrtMemcpy"),
            aclrt_memset: required!("aclrtMemset"),
            acl_create_tensor: required!("aclCreateTensor"),
            acl_destroy_tensor: required!("aclDestroyTensor"),
            acl_create_int_array: required!("aclCreateIntArray"),
            acl_destroy_int_array: required!("aclDestroyIntArray"),
            acl_destroy_executor: required!("aclDestroyAclOpExecutor"),
            adaptive_forward: op!(DeviceOp::AdaptiveForward),
            adaptive_backward: op!(DeviceOp::AdaptiveBackward),
            mask_forward: op!(DeviceOp::MaskForward),
            mask_backward: op!(DeviceOp::MaskBackward),
            indices_forward: op!(DeviceOp::WithIndicesForward),
            indices_backward: op!(DeviceOp::WithIndicesBackward),
            _libraries: libs.into_iter().map(|(_, l)| l).collect(),
        })
    }
}

/// A loaded and initialised CANN.
pub(crate) struct Runtime {
    api: Api,
    /// Where it was loaded from (for messages).
    origin: String,
    /// Whether this crate's `aclInit` initialised CANN (not `ACL_ERROR_REPEAT_INITIALIZE`, which
    /// means another user of the process, such as torch_npu, did and owns `aclFinalize`).
    initialized_here: bool,
    /// Set by [`finalize`]: no new session may use this runtime.
    finalized: std::sync::atomic::AtomicBool,
}

impl core::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runtime").field("origin", &self.origin).finish_non_exhaustive()
    }
}

/// Runtimes loaded so far, by search configuration: each set of libraries is opened and
/// initialised once per process.
static RUNTIMES: Mutex<Vec<(SearchKey, Arc<Runtime>)>> = Mutex::new(Vec::new());

/// Search roots, and whether the loader path is searched after them.
type SearchKey = (Vec<PathBuf>, bool);

impl Runtime {
    /// Loads CANN from `roots` (and the loader path if `loader_path`), calling `aclInit` the first
    /// time.
    pub(crate) fn load(roots: Vec<PathBuf>, loader_path: bool) -> Result<Arc<Runtime>> {
        let mut cache = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        let key = (roots, loader_path);
        if let Some((_, rt)) = cache.iter().find(|(k, _)| *k == key) {
            if rt.finalized.load(std::sync::atomic::Ordering::Acquire) {
                return Err(Error::Ascend(AscendError::Unavailable {
                    reason:
                        "poolgrad::device::ascend::finalize() was called: CANN is finalised for this process"
                            .into(),
                    tried: vec![rt.origin.clone()],
                }));
            }
            return Ok(Arc::clone(rt));
        }
        let api = Api::load(&key.0, key.1)?;
        let origin = if key.0.is_empty() {
            "the loader path".to_string()
        } else {
            key.0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        };
        let mut rt = Runtime { api, origin, initialized_here: false, finalized: false.into() };
        // SAFETY: `aclInit(NULL)` is the documented default initialisation.
        let code = unsafe { (rt.api.acl_init)(core::ptr::null()) };
        if code != ACL_SUCCESS && code != ACL_ERROR_REPEAT_INITIALIZE {
            return Err(rt.error("aclInit", code));
        }
        rt.initialized_here = code == ACL_SUCCESS;
        let rt = Arc::new(rt);
        cache.push((key, Arc::clone(&rt)));
        Ok(rt)
    }

    /// The error for `function` returning `code`, with CANN's recent message.
    fn error(&self, function: &'static str, code: i32) -> Error {
        let (name, meaning) = status::describe(code);
        Error::Ascend(AscendError::Cann {
            function,
            status: Some(code),
            name,
            meaning,
            message: self.recent_message(),
        })
    }

    /// The error for `function` returning a null handle.
    fn null_error(&self, function: &'static str) -> Error {
        Error::Ascend(AscendError::Cann {
            function,
            status: None,
            name: "null handle",
            meaning: "the function returned a null pointer instead of the object it creates",
            message: self.recent_message(),
        })
    }

    fn check(&self, function: &'static str, code: i32) -> Result<()> {
        if code == ACL_SUCCESS { Ok(()) } else { Err(self.error(function, code)) }
    }

    fn recent_message(&self) -> String {
        // SAFETY: `aclGetRecentErrMsg` takes no arguments and returns NULL or a NUL-terminated
        // string valid until the next CANN call on this thread; it is copied at once.
        unsafe {
            let p = (self.api.acl_get_recent_err_msg)();
            if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
        }
    }

    /// Number of devices (`aclrtGetDeviceCount`).
    pub(crate) fn device_count(&self) -> Result<u32> {
        let mut count = 0u32;
        // SAFETY: `count` is a valid `uint32_t*` for the duration of the call.
        self.check("aclrtGetDeviceCount", unsafe { (self.api.aclrt_get_device_count)(&mut count) })?;
        Ok(count)
    }

    /// The SoC name (`aclrtGetSocName`), e.g. `"Ascend910B1"`.
    pub(crate) fn soc_name(&self) -> Result<String> {
        // SAFETY: no arguments; returns NULL or a static NUL-terminated string, copied at once.
        let p = unsafe { (self.api.aclrt_get_soc_name)() };
        if p.is_null() {
            return Err(self.null_error("aclrtGetSocName"));
        }
        // SAFETY: non-null, NUL-terminated (the function's contract).
        Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// The ACL runtime version (`aclrtGetVersion`), where the runtime exports it and answers.
    pub(crate) fn version(&self) -> Option<String> {
        let get = self.api.aclrt_get_version?;
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: three valid `int32_t*` for the duration of the call.
        let code = unsafe { get(&mut major, &mut minor, &mut patch) };
        (code == ACL_SUCCESS).then(|| format!("{major}.{minor}.{patch}"))
    }

    /// Where the libraries came from.
    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }
}

/// One device in use: `aclrtSetDevice`, a context and a stream. Every method makes the context
/// current on the calling thread first, so a session can be used from any thread.
pub(crate) struct Session {
    rt: Arc<Runtime>,
    device_id: i32,
    context: *mut c_void,
    stream: *mut c_void,
    /// Serialises launch-synchronise-copy sequences on the stream.
    stream_lock: Mutex<()>,
}

// SAFETY: the context and stream handles are plain identifiers that CANN lets any thread use once
// the context is current on it (`aclrtSetCurrentContext`), which every method does first; stream
// work is serialised by `stream_lock`.
unsafe impl Send for Session {}
// SAFETY: as for `Send`: no method touches the handles without binding the context, and the only
// mutable state (the stream's queue) is guarded by `stream_lock`.
unsafe impl Sync for Session {}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session").field("device_id", &self.device_id).field("runtime", &self.rt).finish()
    }
}

impl Session {
    /// Sets device `device_id` and creates a context and a stream on it.
    pub(crate) fn open(rt: Arc<Runtime>, device_id: i32) -> Result<Arc<Session>> {
        // SAFETY: plain integer argument.
        rt.check("aclrtSetDevice", unsafe { (rt.api.aclrt_set_device)(device_id) })?;
        let mut context = core::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer.
        let code = unsafe { (rt.api.aclrt_create_context)(&mut context, device_id) };
        if code != ACL_SUCCESS {
            let e = rt.error("aclrtCreateContext", code);
            // SAFETY: undoes the successful `aclrtSetDevice` above.
            unsafe { (rt.api.aclrt_reset_device)(device_id) };
            return Err(e);
        }
        let mut stream = core::ptr::null_mut();
        // SAFETY: the new context is current on this thread; `stream` is a valid out-pointer.
        let code = unsafe { (rt.api.aclrt_create_stream)(&mut stream) };
        if code != ACL_SUCCESS {
            let e = rt.error("aclrtCreateStream", code);
            // SAFETY: undoes the context and device set above, in CANN's order.
            unsafe {
                (rt.api.aclrt_destroy_context)(context);
                (rt.api.aclrt_reset_device)(device_id);
            }
            return Err(e);
        }
        Ok(Arc::new(Session { rt, device_id, context, stream, stream_lock: Mutex::new(()) }))
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Makes this session's context current on the calling thread.
    fn bind(&self) -> Result<()> {
        // SAFETY: `context` is live until `Drop`.
        self.rt
            .check("aclrtSetCurrentContext", unsafe { (self.rt.api.aclrt_set_current_context)(self.context) })
    }

    /// Sets `ACL_OPT_DETERMINISTIC` on this session's context and, where the runtime exports
    /// `aclrtSetSysParamOpt`, for the process (which current nnopbase reads: hicann/opbase
    /// `GetDeterministicLevelFromRt`; torch_npu sets both, `OpParamMaker.cpp`).
    pub(crate) fn set_deterministic(&self, on: bool) -> Result<()> {
        self.bind()?;
        // SAFETY: integer arguments; the context is current.
        let code = unsafe { (self.rt.api.aclrt_ctx_set_sys_param_opt)(OPT_DETERMINISTIC, on as i64) };
        self.rt.check("aclrtCtxSetSysParamOpt", code)?;
        if let Some(set) = self.rt.api.aclrt_set_sys_param_opt {
            // SAFETY: integer arguments.
            let code = unsafe { set(OPT_DETERMINISTIC, on as i64) };
            self.rt.check("aclrtSetSysParamOpt", code)?;
        }
        Ok(())
    }

    /// `ACL_OPT_DETERMINISTIC` as CANN reports it now: `(context, process)`, each `None` where the
    /// runtime does not export the getter or reports the option unset.
    pub(crate) fn deterministic_levels(&self) -> Result<(Option<i64>, Option<i64>)> {
        self.bind()?;
        let read = |get: Option<unsafe extern "C" fn(i32, *mut i64) -> i32>| {
            get.and_then(|get| {
                let mut value = 0i64;
                // SAFETY: `value` is a valid `int64_t*` for the call; the context is current.
                (unsafe { get(OPT_DETERMINISTIC, &mut value) } == ACL_SUCCESS).then_some(value)
            })
        };
        Ok((read(self.rt.api.aclrt_ctx_get_sys_param_opt), read(self.rt.api.aclrt_get_sys_param_opt)))
    }

    /// Allocates `bytes` (> 0) of device memory.
    pub(crate) fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer> {
        debug_assert!(bytes > 0);
        self.bind()?;
        let mut ptr = core::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; size and policy are plain values.
        let code = unsafe { (self.rt.api.aclrt_malloc)(&mut ptr, bytes, MALLOC_HUGE_FIRST) };
        self.rt.check("aclrtMalloc", code)?;
        Ok(DeviceBuffer { session: Arc::clone(self), ptr, len: bytes })
    }

    /// Locks the stream for one launch-synchronise-copy sequence.
    pub(crate) fn stream(&self) -> Result<StreamGuard<'_>> {
        let guard = self.stream_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.bind()?;
        Ok(StreamGuard { session: self, pending: false.into(), _guard: guard })
    }

    /// Creates a contiguous tensor of `dims` over `buffer` (or over no memory when `None`, for an
    /// empty tensor): NCHW when 4-D, ND otherwise.
    pub(crate) fn tensor(
        self: &Arc<Self>,
        dims: &[usize],
        dtype: i32,
        buffer: Option<&DeviceBuffer>,
    ) -> Result<AclTensor> {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1].max(1);
        }
        let storage = [dims.iter().product::<i64>()];
        let data = buffer.map_or(core::ptr::null_mut(), |b| b.ptr);
        // SAFETY: the three arrays live across the call and have the lengths passed; CANN copies
        // them. `data` is device memory of at least `storage` elements, or null for no elements.
        let ptr = unsafe {
            (self.rt.api.acl_create_tensor)(
                dims.as_ptr(),
                dims.len() as u64,
                dtype,
                strides.as_ptr(),
                0,
                if dims.len() == 4 { FORMAT_NCHW } else { FORMAT_ND },
                storage.as_ptr(),
                1,
                data,
            )
        };
        if ptr.is_null() {
            return Err(self.rt.null_error("aclCreateTensor"));
        }
        Ok(AclTensor { rt: Arc::clone(&self.rt), ptr })
    }

    /// Creates an `aclIntArray` of `values`.
    pub(crate) fn int_array(&self, values: &[i64]) -> Result<IntArray> {
        // SAFETY: `values` is valid for `values.len()` elements during the call; CANN copies it.
        let ptr = unsafe { (self.rt.api.acl_create_int_array)(values.as_ptr(), values.len() as u64) };
        if ptr.is_null() {
            return Err(self.rt.null_error("aclCreateIntArray"));
        }
        Ok(IntArray { rt: Arc::clone(&self.rt), ptr })
    }

    /// Takes ownership of the executor phase 1 returned (one-shot: see the module docs).
    fn executor(&self, function: &'static str, code: i32, ptr: Exec) -> Result<OpExecutor> {
        // A failed phase 1 leaves no executor to release (ops-nn builds it in a
        // `UniqueExecutor`, which frees it on every early return).
        self.rt.check(function, code)?;
        if ptr.is_null() {
            return Err(self.rt.null_error(function));
        }
        Ok(OpExecutor { rt: Arc::clone(&self.rt), ptr })
    }

    fn op<T>(&self, op: Option<T>, symbol: &'static str) -> Result<T> {
        op.ok_or_else(|| {
            Error::Ascend(AscendError::Unavailable {
                reason: format!("`{symbol}` is not exported by the CANN libraries (it needs a newer CANN)"),
                tried: vec![self.rt.origin.clone()],
            })
        })
    }

    /// Phase 1 of an operator: `call` is its `aclnnXxxGetWorkspaceSize` with the workspace-size
    /// and executor out-pointers.
    fn phase1(
        &self,
        function: &'static str,
        call: impl FnOnce(*mut u64, *mut Exec) -> i32,
    ) -> Result<(OpExecutor, u64)> {
        self.bind()?;
        let (mut size, mut exec) = (0u64, core::ptr::null_mut());
        let code = call(&mut size, &mut exec);
        Ok((self.executor(function, code, exec)?, size))
    }

    /// Phase 1 of `aclnnAdaptiveMaxPool2d`.
    pub(crate) fn adaptive_forward_plan(
        &self,
        input: &AclTensor,
        output_size: &IntArray,
        out: &AclTensor,
        indices: &AclTensor,
    ) -> Result<(OpExecutor, u64)> {
        let ws_symbol = DeviceOp::AdaptiveForward.workspace_symbol();
        let (ws, _) = self.op(self.rt.api.adaptive_forward, ws_symbol)?;
        // SAFETY: live handles created by this session; valid out-pointers.
        self.phase1(ws_symbol, |size, exec| unsafe {
            ws(input.ptr, output_size.ptr, out.ptr, indices.ptr, size, exec)
        })
    }

    /// Phase 1 of `aclnnAdaptiveMaxPool2dBackward`.
    pub(crate) fn adaptive_backward_plan(
        &self,
        grad_output: &AclTensor,
        input: &AclTensor,
        indices: &AclTensor,
        grad_input: &AclTensor,
    ) -> Result<(OpExecutor, u64)> {
        let ws_symbol = DeviceOp::AdaptiveBackward.workspace_symbol();
        let (ws, _) = self.op(self.rt.api.adaptive_backward, ws_symbol)?;
        // SAFETY: live handles created by this session; valid out-pointers.
        self.phase1(ws_symbol, |size, exec| unsafe {
            ws(grad_output.ptr, input.ptr, indices.ptr, grad_input.ptr, size, exec)
        })
    }

    /// Phase 1 of `aclnnMaxPool2dWithMask` (`indices` false) or `aclnnMaxPool2dWithIndices`.
    pub(crate) fn pool_forward_plan(
        &self,
        indices: bool,
        input: &AclTensor,
        params: &PoolParams,
        out: &AclTensor,
        argmax: &AclTensor,
    ) -> Result<(OpExecutor, u64)> {
        let (op, ws) = if indices {
            (self.rt.api.indices_forward, DeviceOp::WithIndicesForward.workspace_symbol())
        } else {
            (self.rt.api.mask_forward, DeviceOp::MaskForward.workspace_symbol())
        };
        let (call, _) = self.op(op, ws)?;
        let [k, s, p, d] = params.arrays();
        // SAFETY: live handles created by this session; valid out-pointers.
        self.phase1(ws, |size, exec| unsafe {
            call(input.ptr, k, s, p, d, params.ceil_mode, out.ptr, argmax.ptr, size, exec)
        })
    }

    /// Phase 1 of `aclnnMaxPool2dWithMaskBackward` (`indices` false) or
    /// `aclnnMaxPool2dWithIndicesBackward`.
    pub(crate) fn pool_backward_plan(
        &self,
        indices: bool,
        grad_output: &AclTensor,
        input: &AclTensor,
        argmax: &AclTensor,
        params: &PoolParams,
        grad_input: &AclTensor,
    ) -> Result<(OpExecutor, u64)> {
        let (op, ws) = if indices {
            (self.rt.api.indices_backward, DeviceOp::WithIndicesBackward.workspace_symbol())
        } else {
            (self.rt.api.mask_backward, DeviceOp::MaskBackward.workspace_symbol())
        };
        let (call, _) = self.op(op, ws)?;
        let [k, s, p, d] = params.arrays();
        // SAFETY: live handles created by this session; valid out-pointers.
        self.phase1(ws, |size, exec| unsafe {
            call(
                grad_output.ptr,
                input.ptr,
                argmax.ptr,
                k,
                s,
                p,
                d,
                params.ceil_mode,
                grad_input.ptr,
                size,
                exec,
            )
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Teardown in CANN's order: stream, context, device. Failures cannot be reported from
        // `drop`; the handles are gone either way.
        // SAFETY: the handles are live and owned by this session; nothing uses them after drop.
        unsafe {
            (self.rt.api.aclrt_set_current_context)(self.context);
            (self.rt.api.aclrt_destroy_stream)(self.stream);
            (self.rt.api.aclrt_destroy_context)(self.context);
            (self.rt.api.aclrt_reset_device)(self.device_id);
        }
    }
}

/// Exclusive use of a session's stream, with its context current. Dropped with work possibly
/// queued (a launch that failed part-way, a failed copy after a launch), it synchronises the
/// stream first, so that no buffer the work uses is freed under it.
pub(crate) struct StreamGuard<'s> {
    session: &'s Session,
    /// Whether work may be queued that no synchronisation has waited for.
    pending: core::cell::Cell<bool>,
    _guard: MutexGuard<'s, ()>,
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        if self.pending.get() {
            // The error that brought us here is already on its way to the caller; this
            // synchronisation only keeps the buffers alive until the device is done with them.
            // SAFETY: the stream is live.
            let _ = unsafe { (self.rt().api.aclrt_synchronize_stream)(self.session.stream) };
        }
    }
}

impl StreamGuard<'_> {
    fn rt(&self) -> &Runtime {
        &self.session.rt
    }

    /// Copies `host` to the start of `buffer`.
    pub(crate) fn upload(&self, buffer: &DeviceBuffer, host: &[u8]) -> Result<()> {
        assert!(host.len() <= buffer.len, "upload larger than its buffer");
        // SAFETY: `buffer` holds `buffer.len >= host.len()` device bytes; `host` is readable.
        let code = unsafe {
            (self.rt().api.aclrt_memcpy)(
                buffer.ptr,
                buffer.len,
                host.as_ptr().cast(),
                host.len(),
                MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.rt().check("aclrtMemcpy", code)
    }

    /// Copies the start of `buffer` into `host`.
    pub(crate) fn download(&self, buffer: &DeviceBuffer, host: &mut [u8]) -> Result<()> {
        assert!(host.len() <= buffer.len, "download larger than its buffer");
        // SAFETY: `host` is writable for `host.len()` bytes; `buffer` holds at least that many.
        let code = unsafe {
            (self.rt().api.aclrt_memcpy)(
                host.as_mut_ptr().cast(),
                host.len(),
                buffer.ptr,
                host.len(),
                MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.rt().check("aclrtMemcpy", code)
    }

    /// Sets every byte of `buffer` to zero.
    pub(crate) fn zero(&self, buffer: &DeviceBuffer) -> Result<()> {
        // SAFETY: `buffer` holds `buffer.len` device bytes.
        let code = unsafe { (self.rt().api.aclrt_memset)(buffer.ptr, buffer.len, 0, buffer.len) };
        self.rt().check("aclrtMemset", code)
    }

    /// Phase 2: launches `executor` on the stream with `workspace` (`size` bytes, as phase 1
    /// reported), consuming it, then waits for the stream.
    pub(crate) fn run(
        &self,
        kind: DeviceOp,
        executor: OpExecutor,
        workspace: Option<&DeviceBuffer>,
        size: u64,
    ) -> Result<()> {
        let api = &self.rt().api;
        let launch = match kind {
            DeviceOp::AdaptiveForward => api.adaptive_forward.map(|o| o.1),
            DeviceOp::AdaptiveBackward => api.adaptive_backward.map(|o| o.1),
            DeviceOp::MaskForward => api.mask_forward.map(|o| o.1),
            DeviceOp::MaskBackward => api.mask_backward.map(|o| o.1),
            DeviceOp::WithIndicesForward => api.indices_forward.map(|o| o.1),
            DeviceOp::WithIndicesBackward => api.indices_backward.map(|o| o.1),
        };
        let name = kind.symbol();
        // Not launched (unreachable in practice: phase 1 found the same library's symbols), the
        // executor is destroyed by its `Drop`.
        let launch = self.session.op(launch, name)?;
        let ws = workspace.map_or(core::ptr::null_mut(), |w| w.ptr);
        let exec = executor.hand_over();
        self.pending.set(true);
        // SAFETY: `exec` is a live executor made for this operator and handed over to CANN, which
        // deletes it when the call returns; `ws` is device memory of at least `size` bytes
        // (checked by the caller) or null when `size` is 0; the stream is live.
        let code = unsafe { launch(ws, size, exec, self.session.stream) };
        self.rt().check(name, code)?;
        // SAFETY: the stream is live.
        let code = unsafe { (api.aclrt_synchronize_stream)(self.session.stream) };
        // Whatever the outcome, the stream has stopped: a failed synchronisation aborts its tasks.
        self.pending.set(false);
        self.rt().check("aclrtSynchronizeStream", code)
    }
}

/// Kernel, stride, padding and dilation as `aclIntArray`s, and the ceil mode.
pub(crate) struct PoolParams {
    pub(crate) kernel: IntArray,
    pub(crate) stride: IntArray,
    pub(crate) padding: IntArray,
    pub(crate) dilation: IntArray,
    pub(crate) ceil_mode: bool,
}

impl PoolParams {
    /// Kernel, stride, padding and dilation, in the order of the operators' signatures.
    fn arrays(&self) -> [IntArr; 4] {
        [&self.kernel, &self.stride, &self.padding, &self.dilation].map(|a| a.ptr.cast_const())
    }
}

/// Device memory from `aclrtMalloc`, freed on drop.
pub(crate) struct DeviceBuffer {
    session: Arc<Session>,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the pointer is a device address, never dereferenced on the host; freeing it binds the
// session's context on whatever thread drops it.
unsafe impl Send for DeviceBuffer {}

impl core::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceBuffer").field("bytes", &self.len).finish()
    }
}

impl DeviceBuffer {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether this memory was allocated by `session`.
    pub(crate) fn belongs_to(&self, session: &Arc<Session>) -> bool {
        Arc::ptr_eq(&self.session, session)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let api = &self.session.rt.api;
        // SAFETY: `ptr` came from `aclrtMalloc` in this session's context and is freed once.
        unsafe {
            (api.aclrt_set_current_context)(self.session.context);
            (api.aclrt_free)(self.ptr);
        }
    }
}

/// A C object this crate owns, destroyed on drop: [`AclTensor`] or [`IntArray`].
pub(crate) struct Owned<C: Destroy> {
    rt: Arc<Runtime>,
    ptr: *mut C,
}

/// How a C object type is destroyed.
pub(crate) trait Destroy: Sized {
    /// Destroys `ptr`, which is live and owned by the caller.
    ///
    /// # Safety
    /// `ptr` must be live, of this type, created through `api`, and not used afterwards.
    unsafe fn destroy(api: &Api, ptr: *mut Self);
}

impl Destroy for AclTensorC {
    unsafe fn destroy(api: &Api, ptr: *mut Self) {
        // SAFETY: the caller's contract; `aclDestroyTensor` frees the descriptor only.
        unsafe { (api.acl_destroy_tensor)(ptr) };
    }
}

impl Destroy for AclIntArrayC {
    unsafe fn destroy(api: &Api, ptr: *mut Self) {
        // SAFETY: the caller's contract.
        unsafe { (api.acl_destroy_int_array)(ptr) };
    }
}

/// An `aclTensor` descriptor (the memory it describes is owned elsewhere).
pub(crate) type AclTensor = Owned<AclTensorC>;
/// An `aclIntArray`.
pub(crate) type IntArray = Owned<AclIntArrayC>;
// SAFETY: host-side objects that CANN does not tie to a thread; each is used by one plan at a time
// (it is moved into the launch).
unsafe impl<C: Destroy> Send for Owned<C> {}

impl<C: Destroy> Drop for Owned<C> {
    fn drop(&mut self) {
        // SAFETY: `ptr` was created through this runtime's API, is owned by `self` and is destroyed
        // once, here.
        unsafe { C::destroy(&self.rt.api, self.ptr) };
    }
}

/// Calls `aclFinalize` for every CANN this crate initialised (see [`crate::device::ascend::finalize`]).
pub(crate) fn finalize() -> Result<()> {
    let cache = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    // The cache holds one reference; any other is a live `Ascend`, buffer or plan.
    if let Some((_, rt)) = cache.iter().find(|(_, rt)| Arc::strong_count(rt) > 1) {
        return Err(Error::InvalidParameter {
            op: "ascend::finalize",
            arg: "devices",
            expected: "every Ascend device, workspace and plan dropped first".into(),
            got: format!("{} live handle(s) on CANN loaded from {}", Arc::strong_count(rt) - 1, rt.origin),
        });
    }
    for (_, rt) in cache.iter() {
        if rt.finalized.swap(true, std::sync::atomic::Ordering::AcqRel) || !rt.initialized_here {
            continue;
        }
        // SAFETY: no session, buffer or handle of this runtime is alive (checked above), and it
        // is finalised once: `finalized` was false until the swap.
        let code = unsafe { (rt.api.acl_finalize)() };
        rt.check("aclFinalize", code)?;
    }
    Ok(())
}

/// An `aclOpExecutor` from phase 1, owned by this crate until [`StreamGuard::run`] hands it over to
/// CANN (which then deletes it); destroyed with `aclDestroyAclOpExecutor` if dropped before that.
pub(crate) struct OpExecutor {
    rt: Arc<Runtime>,
    /// Null once handed over.
    ptr: Exec,
}

impl OpExecutor {
    /// Gives up ownership: from here on CANN owns (and deletes) the executor.
    fn hand_over(mut self) -> Exec {
        core::mem::replace(&mut self.ptr, core::ptr::null_mut())
    }
}

// SAFETY: a host-side object that CANN does not tie to a thread; it is used by one plan at a time
// (moved into the launch).
unsafe impl Send for OpExecutor {}

impl Drop for OpExecutor {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: a live executor from phase 1 that was never launched, so it is still ours;
            // destroyed once, here.
            unsafe { (self.rt.api.acl_destroy_executor)(self.ptr) };
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
