//! The status layer: a loaded, initialised CANN ([`Runtime`]: `aclInit` once per process,
//! `aclFinalize` only through [`finalize`]) and the turning of every status code or null
//! handle into a typed error with CANN's own message.

#![allow(unsafe_code)]

use core::ffi::CStr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::sys::{ACL_ERROR_REPEAT_INITIALIZE, ACL_SUCCESS, Api};
use crate::device::ascend::status;
use crate::error::{AscendError, Error, Result};

/// A loaded and initialised CANN.
pub(crate) struct Runtime {
    pub(super) api: Api,
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
    pub(super) fn error(&self, function: &'static str, code: i32) -> Error {
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
    pub(super) fn null_error(&self, function: &'static str) -> Error {
        Error::Ascend(AscendError::Cann {
            function,
            status: None,
            name: "null handle",
            meaning: "the function returned a null pointer instead of the object it creates",
            message: self.recent_message(),
        })
    }

    pub(super) fn check(&self, function: &'static str, code: i32) -> Result<()> {
        if code == ACL_SUCCESS { Ok(()) } else { Err(self.error(function, code)) }
    }

    pub(super) fn recent_message(&self) -> String {
        // SAFETY: `aclGetRecentErrMsg` takes no arguments and returns NULL or a NUL-terminated
        // string valid until the next CANN call on this thread; it is copied at once.
        unsafe {
            let p = (self.api.acl_get_recent_err_msg)();
            if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
        }
    }

    /// The calling thread's current context (`aclrtGetCurrentContext`; `ACL_ERROR_RT_CONTEXT_NULL`
    /// when it has none).
    pub(super) fn current_context(&self) -> Result<*mut core::ffi::c_void> {
        let mut context = core::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer for the call.
        let code = unsafe { (self.api.aclrt_get_current_context)(&mut context) };
        self.check("aclrtGetCurrentContext", code)?;
        if context.is_null() {
            return Err(self.null_error("aclrtGetCurrentContext"));
        }
        Ok(context)
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
