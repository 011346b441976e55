//! The status layer: a loaded, initialised CANN ([`Runtime`]: `aclInit` once per process,
//! `aclFinalize` only through [`finalize`]) and the turning of every status code or null
//! handle into a typed error with CANN's own message.

#![allow(unsafe_code)]

use core::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::sys::{ACL_ERROR_REPEAT_INITIALIZE, ACL_SUCCESS, Api, CannPackageVersion, PKG_NAME_CANN};
use crate::device::ascend::status;
use crate::error::{AscendError, Error, Result};

/// A loaded and initialised CANN.
pub(crate) struct Runtime {
    pub(super) api: Api,
    /// Where it was loaded from (for messages).
    origin: String,
    /// Where it was searched for (the roots; empty for the loader path alone).
    roots: Vec<PathBuf>,
    /// Whether this crate's `aclInit` initialised CANN (not `ACL_ERROR_REPEAT_INITIALIZE`, which
    /// means another user of the process, such as torch_npu, did and owns `aclFinalize`).
    initialized_here: bool,
}

/// Runtimes loaded so far, by search configuration: each set of libraries is opened and
/// initialised once per process.
static RUNTIMES: Mutex<Vec<(SearchKey, Arc<Runtime>)>> = Mutex::new(Vec::new());

/// Search roots, and whether the loader path is searched after them.
type SearchKey = (Vec<PathBuf>, bool);

/// Set by [`finalize`]: CANN is finalised for the process, so no runtime is loaded or used again,
/// whatever the search key (`aclInit` after `aclFinalize` is not supported: `acl_rt.h`, "After
/// calling aclFinalize, the services cannot continue to be used normally").
static FINALIZED: AtomicBool = AtomicBool::new(false);

fn finalized_error(tried: String) -> Error {
    Error::Ascend(AscendError::Unavailable {
        reason: "poolgrad::device::ascend::finalize() was called: CANN is finalised for this process".into(),
        tried: vec![tried],
    })
}

impl Runtime {
    /// Loads CANN from `roots` (and the loader path if `loader_path`), calling `aclInit` the first
    /// time.
    pub(crate) fn load(roots: Vec<PathBuf>, loader_path: bool) -> Result<Arc<Runtime>> {
        let mut cache = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        let key = (roots, loader_path);
        if FINALIZED.load(Ordering::Acquire) {
            return Err(finalized_error(origin(&key.0)));
        }
        if let Some((_, rt)) = cache.iter().find(|(k, _)| *k == key) {
            return Ok(Arc::clone(rt));
        }
        let api = Api::load(&key.0, key.1)?;
        let mut rt = Runtime { api, origin: origin(&key.0), roots: key.0.clone(), initialized_here: false };
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

    /// The number of devices CANN reports from `roots` (and the loader path if `loader_path`),
    /// without initialising it: the libraries are opened (the loader shares them with a runtime
    /// already loaded from there) and `aclrtGetDeviceCount` is asked, which needs no `aclInit`
    /// (hicann/runtime `src/acl/aclrt_impl/device.cpp`, `aclrtGetDeviceCountImpl`, l.221-230,
    /// asks the driver directly). `None` when the libraries do not load or do not answer, and
    /// after [`finalize`].
    pub(crate) fn device_count_without_init(roots: Vec<PathBuf>, loader_path: bool) -> Option<u32> {
        if FINALIZED.load(Ordering::Acquire) {
            return None;
        }
        let api = Api::load(&roots, loader_path).ok()?;
        let mut count = 0u32;
        // SAFETY: `count` is a valid `uint32_t*` for the duration of the call.
        (unsafe { (api.aclrt_get_device_count)(&mut count) } == ACL_SUCCESS).then_some(count)
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

    /// The CANN release installed (for example `"8.1.RC1"`), and where it was read: from
    /// `aclsysGetCANNVersion(ACL_PKG_NAME_CANN)` where the runtime exports it and answers, else
    /// from the `version=` line of the toolkit's install record,
    /// `<root>/<arch>-linux/ascend_toolkit_install.info` (CANN installation guide, "File
    /// Paths"), in the first search root that has one.
    pub(crate) fn release(&self) -> Option<(String, String)> {
        if let Some(get) = self.api.aclsys_get_cann_version {
            // SAFETY: `CannPackageVersion` is plain bytes, for which all-zero is valid.
            let mut v: CannPackageVersion = unsafe { core::mem::zeroed() };
            // SAFETY: `v` is a valid, writable `aclCANNPackageVersion` for the duration of the call.
            if unsafe { get(PKG_NAME_CANN, &mut v) } == ACL_SUCCESS {
                let bytes: Vec<u8> = v.version.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
                let text = String::from_utf8_lossy(&bytes).trim().to_string();
                if !text.is_empty() {
                    return Some((text, "aclsysGetCANNVersion".into()));
                }
            }
        }
        self.roots.iter().find_map(|root| install_record_version(root))
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

/// The search roots as one string, for messages.
fn origin(roots: &[PathBuf]) -> String {
    if roots.is_empty() {
        "the loader path".to_string()
    } else {
        roots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// The `version=` value of `<root>/<arch>-linux/ascend_toolkit_install.info` (or of that file in
/// `root` itself), with the path read.
fn install_record_version(root: &std::path::Path) -> Option<(String, String)> {
    const RECORD: &str = "ascend_toolkit_install.info";
    let mut candidates = vec![root.join(RECORD)];
    if let Ok(dirs) = std::fs::read_dir(root) {
        let mut arch: Vec<PathBuf> = dirs
            .filter_map(|d| d.ok().map(|d| d.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-linux")))
            .map(|p| p.join(RECORD))
            .collect();
        arch.sort();
        candidates.extend(arch);
    }
    candidates.into_iter().find_map(|path| {
        let text = std::fs::read_to_string(&path).ok()?;
        let line = text.lines().find_map(|l| l.trim().strip_prefix("version="))?;
        Some((line.trim().to_string(), path.display().to_string()))
    })
}

/// Releases poolgrad's hold on every CANN it loaded (see [`crate::device::ascend::finalize`]):
/// `aclFinalizeReference` where the runtime exports it (it counts every `aclInit`, the repeated
/// ones included, and tears down only at the last: hicann/runtime `acl.cpp`, `aclInitImpl`
/// l.382-392 and `aclFinalizeReferenceImpl` l.648-), else `aclFinalize` if poolgrad's `aclInit`
/// was the one that initialised CANN. Afterwards no runtime is loaded again in this process.
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
    if FINALIZED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    for (_, rt) in cache.iter() {
        // No session, buffer or handle of this runtime is alive (checked above), and this runs once
        // per process (`FINALIZED` was false until the swap).
        if let Some(release) = rt.api.acl_finalize_reference {
            // SAFETY: as above; a null `refCount` is allowed (`acl_rt.h`).
            let code = unsafe { release(core::ptr::null_mut()) };
            rt.check("aclFinalizeReference", code)?;
        } else if rt.initialized_here {
            // SAFETY: as above; poolgrad's `aclInit` initialised this CANN.
            let code = unsafe { (rt.api.acl_finalize)() };
            rt.check("aclFinalize", code)?;
        }
    }
    Ok(())
}
