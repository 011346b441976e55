//! A test double of the CANN C ABI, for poolgrad's Ascend backend tests.
//!
//! One shared library exports the symbols of `libascendcl.so` (runtime), `libnnopbase.so`
//! (tensor and executor handles) and `libopapi.so` (the six 2-D and four 3-D pooling operators
//! and the four unpooling ones, in two phases). The test harness links it under those three names. "Device" memory is host
//! memory owned by the double; operators are queued on their stream by the second-phase call and executed by
//! `aclrtSynchronizeStream`, as on a real device, so a host copy taken before synchronising reads
//! stale bytes and is reported.
//!
//! Written from CANN's documented signatures, enum values, status codes and operator contracts
//! (poolgrad's `docs/ascend-semantics.md`, sections A to C, which cite the CANN headers and
//! the hicann/ops-nn sources), with its own plain loops: it shares no code with poolgrad, so
//! agreement between the two is evidence, not tautology.
//!
//! What it checks, like CANN: dtype and format enums, ranks and shapes (including the int8 mask
//! shape), the parameters' ranges, the SoC's dtype and operator support, that the workspace passed
//! to phase 2 is at least the size phase 1 reported, that an executor runs once (unless made
//! repeatable) and is not used after it is freed. What it checks beyond CANN (recorded as
//! *violations*, which the tests require to be empty): device-to-host copies or frees of buffers
//! with unfinished work, handles destroyed twice or in the wrong order, device memory accessed out
//! of bounds, and index values that would make a real device write outside its buffer.
//!
//! How threads and contexts are bound, as hicann/runtime does it (`api_impl.cc`, each function
//! below cites its lines): each thread has a current context or a reference to a device's primary
//! context (`aclrtSetDevice`); `aclrtSetCurrentContext` replaces either; streams belong to the
//! context current when they were made, and a launch or a stream destroy in another context fails
//! (`ACL_ERROR_RT_STREAM_CONTEXT`), so a library that leaves another library's thread switched is
//! caught the way CANN would catch it.
//!
//! How executors are owned, as hicann/opbase does it (each behaviour below cites its source):
//! an executor from phase 1 is the caller's until it is passed to the second phase, which deletes
//! it whether the run succeeds or fails; using or destroying it afterwards is a recorded violation
//! (on a real NPU, a use after free). `aclSetAclOpExecutorRepeatable` fails for the mask operators,
//! as nnopbase's repeatability check does for them.
//!
//! Control (for tests only): the `cann_double_*` functions at the end of this file set the SoC
//! name, inject a status into the n-th next call of any function, and report live handles, call
//! counts and violations.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
// The `cann81` variant leaves the adaptive backward unreachable.
#![cfg_attr(feature = "cann81", allow(dead_code))]

mod exec;
// The tests drive the adaptive backward, which the `cann81` variant does not export.
#[cfg(all(test, not(feature = "cann81")))]
mod observed;
mod platform;
mod state;

use core::ffi::{c_char, c_void};
use std::ffi::{CStr, CString};

use state::{Binding, Job, MaskParams, TensorDesc, binding, enter, fail, set_binding};

type AclError = i32;

// acl_base.h
const ACL_SUCCESS: AclError = 0;
const ACL_ERROR_INVALID_PARAM: AclError = 100_000;
const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
const ACL_ERROR_INVALID_FILE: AclError = 100_003;
const ACL_ERROR_REPEAT_FINALIZE: AclError = 100_037;
const ACL_ERROR_INVALID_DEVICE: AclError = 200_002;
const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
// aclnn status codes (ops-nn docs/zh/context/aclnn_return_code.md)
const ACLNN_ERR_PARAM_NULLPTR: i32 = 161_001;
const ACLNN_ERR_PARAM_INVALID: i32 = 161_002;
const ACLNN_ERR_INNER: i32 = 561_000;
const ACLNN_ERR_INNER_NULLPTR: i32 = 561_103;
// rt_error_codes.h
const ACL_ERROR_RT_CONTEXT_NULL: AclError = 107_002;
const ACL_ERROR_RT_STREAM_CONTEXT: AclError = 107_003;
const ACL_ERROR_RT_SYSPARAMOPT_NOT_SET: AclError = 107_021;

// aclDataType
pub(crate) const ACL_FLOAT: i32 = 0;
pub(crate) const ACL_FLOAT16: i32 = 1;
pub(crate) const ACL_INT8: i32 = 2;
pub(crate) const ACL_INT32: i32 = 3;
pub(crate) const ACL_INT64: i32 = 9;
pub(crate) const ACL_DOUBLE: i32 = 11;
pub(crate) const ACL_BF16: i32 = 27;
const KNOWN_DTYPES: [i32; 20] = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 27, 29, 30, 33, 5];
// aclFormat
pub(crate) const ACL_FORMAT_NCHW: i32 = 0;
pub(crate) const ACL_FORMAT_ND: i32 = 2;
pub(crate) const ACL_FORMAT_NCL: i32 = 47;
const KNOWN_FORMATS: [i32; 15] = [-1, 0, 1, 2, 3, 4, 12, 16, 27, 29, 30, 32, 33, 35, 47];
// aclrtMemcpyKind
const HOST_TO_HOST: i32 = 0;
const HOST_TO_DEVICE: i32 = 1;
const DEVICE_TO_HOST: i32 = 2;
const DEVICE_TO_DEVICE: i32 = 3;

// ---------------------------------------------------------------------------------------------
// libascendcl: acl.h, acl_rt.h

/// Models `aclInitImpl` (hicann/runtime `src/acl/aclrt_impl/acl.cpp` l.382-392): a repeated
/// `aclInit` counts one more reference and returns `ACL_ERROR_REPEAT_INITIALIZE`.
#[unsafe(no_mangle)]
pub extern "C" fn aclInit(_config_path: *const c_char) -> AclError {
    if let Some(e) = enter("aclInit") {
        return e;
    }
    let mut s = state::lock();
    if s.init_refs > 0 {
        s.init_refs += 1;
        return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: repeated initialisation");
    }
    s.init_refs = 1;
    s.finalized = false;
    ACL_SUCCESS
}

/// Models `aclFinalizeImpl` (`acl.cpp` l.630-645): tears down whatever the count
/// (`aclFinalizeInternal` sets it to 0); a second call is `ACL_ERROR_REPEAT_FINALIZE`.
#[unsafe(no_mangle)]
pub extern "C" fn aclFinalize() -> AclError {
    if let Some(e) = enter("aclFinalize") {
        return e;
    }
    let mut s = state::lock();
    if s.finalized {
        return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: repeated finalisation");
    }
    (s.finalized, s.init_refs) = (true, 0);
    ACL_SUCCESS
}

/// Models `aclFinalizeReferenceImpl` (`acl.cpp` l.648-): releases one reference, tearing down at
/// the last; with none left, `ACL_ERROR_REPEAT_FINALIZE`. Absent from CANN 8.1 (its `acl.h`
/// declares no such function).
#[cfg(not(feature = "cann81"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclFinalizeReference(ref_count: *mut u64) -> AclError {
    if let Some(e) = enter("aclFinalizeReference") {
        return e;
    }
    let mut s = state::lock();
    let report = |n: u64| {
        if !ref_count.is_null() {
            // SAFETY: checked non-null; the caller passes a valid `uint64_t*`.
            unsafe { *ref_count = n };
        }
    };
    match s.init_refs {
        0 => {
            report(0);
            fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalizeReference: called without a matching aclInit")
        }
        1 => {
            (s.finalized, s.init_refs) = (true, 0);
            report(0);
            ACL_SUCCESS
        }
        n => {
            s.init_refs = n - 1;
            report(n - 1);
            ACL_SUCCESS
        }
    }
}

/// Models `aclsysGetCANNVersion` (CANN 8.1 `acl.h`; hicann/runtime `acl_rt.h` l.1141): the
/// package's version as the install records it, `ACL_ERROR_INVALID_FILE` where the record is
/// missing (hicann/runtime's unit test of the call without `ASCEND_HOME_PATH`). The double
/// answers for `ACL_PKG_NAME_CANN` (0) only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclsysGetCANNVersion(name: i32, version: *mut u8) -> AclError {
    if let Some(e) = enter("aclsysGetCANNVersion") {
        return e;
    }
    if version.is_null() || name != 0 {
        return fail(
            ACL_ERROR_INVALID_PARAM,
            "aclsysGetCANNVersion: null version or a package other than CANN",
        );
    }
    let s = state::lock();
    let Some(release) = &s.release else {
        return fail(ACL_ERROR_INVALID_FILE, "aclsysGetCANNVersion: no version record in the install");
    };
    // `aclCANNPackageVersion`: `version[128]`, then four parts of 64 bytes and `reserved[128]`.
    let bytes = release.as_bytes_with_nul();
    // SAFETY: the caller passes an `aclCANNPackageVersion` (512 bytes); `bytes` is shorter than
    // its first field.
    unsafe {
        core::ptr::write_bytes(version, 0, 512);
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), version, bytes.len().min(127));
    }
    ACL_SUCCESS
}

/// Models `aclrtGetVersion`: the ACL interface version of the headers the runtime was built with,
/// 1.13.0 in CANN 8.1.RC1 (`acl.h`, "Current version is 1.13.0") and 1.17.0 in hicann/runtime
/// (`acl_rt.h` l.24-27, where the function is deprecated but still declared).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetVersion(major: *mut i32, minor: *mut i32, patch: *mut i32) -> AclError {
    if let Some(e) = enter("aclrtGetVersion") {
        return e;
    }
    if major.is_null() || minor.is_null() || patch.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetVersion: a null pointer");
    }
    let version = if cfg!(feature = "cann81") { (1, 13, 0) } else { (1, 17, 0) };
    // SAFETY: checked non-null; the caller passes valid `int32_t*`.
    unsafe { (*major, *minor, *patch) = version };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    state::recent_error()
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetSocName() -> *const c_char {
    if enter("aclrtGetSocName").is_some() {
        return core::ptr::null();
    }
    state::lock().soc_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> AclError {
    if let Some(e) = enter("aclrtGetDeviceCount") {
        return e;
    }
    if count.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is null");
    }
    // No `aclInit` needed: `aclrtGetDeviceCountImpl` (hicann/runtime
    // `src/acl/aclrt_impl/device.cpp` l.221-230) asks the driver directly.
    let s = state::lock();
    // SAFETY: checked non-null; the caller passes a valid `uint32_t*`.
    unsafe { *count = s.device_count };
    ACL_SUCCESS
}

/// Models hicann/runtime `api_impl.cc` `ApiImpl::SetDevice` (l.3445-3470): retains the device's
/// primary context (`Runtime::PrimaryContextRetain`, made on first use) and binds the thread to
/// it (`SetCurRef(context)`, then `SetCurCtx(nullptr)`), whatever context was current before.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtSetDevice") {
        return e;
    }
    let mut s = state::lock();
    if s.init_refs == 0 {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetDevice before aclInit");
    }
    if device_id < 0 || device_id as u32 >= s.device_count {
        return fail(ACL_ERROR_INVALID_DEVICE, &format!("aclrtSetDevice: no device {device_id}"));
    }
    if !s.primaries.contains_key(&device_id) {
        let id = s.new_handle();
        s.contexts.insert(id, state::Context { primary: true, deterministic: None });
        s.primaries.insert(device_id, (id, 0));
    }
    s.primaries.get_mut(&device_id).expect("inserted above").1 += 1;
    set_binding(Binding { context: 0, primary_of: Some(device_id) });
    ACL_SUCCESS
}

/// Models `ApiImpl::DeviceReset` (l.3753-3768): releases one reference to the device's primary
/// context (`Runtime::PrimaryContextRelease`), which is torn down with the last one. The calling
/// thread's binding is left as it is (a binding to a context torn down resolves to none,
/// `Runtime::CurrentContext`).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtResetDevice") {
        return e;
    }
    let mut s = state::lock();
    let Some(&(primary, refs)) = s.primaries.get(&device_id) else {
        s.violation(format!("aclrtResetDevice({device_id}) without a matching aclrtSetDevice"));
        return fail(ACL_ERROR_INVALID_DEVICE, "aclrtResetDevice: device not set");
    };
    if refs > 1 {
        s.primaries.get_mut(&device_id).expect("present").1 -= 1;
        return ACL_SUCCESS;
    }
    // The last reference: the primary context goes (contexts created with `aclrtCreateContext`
    // are their creator's to destroy).
    if s.streams.values().any(|st| st.context == primary) {
        s.violation("last aclrtResetDevice with streams of the primary context not destroyed".into());
    }
    s.primaries.remove(&device_id);
    s.contexts.remove(&primary);
    ACL_SUCCESS
}

/// Models `ApiImpl::ContextCreate` (l.4106-4129): the device id must be in range (no
/// `aclrtSetDevice` is needed), and the new context becomes current (`ContextSetCurrent`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateContext(context: *mut *mut c_void, device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtCreateContext") {
        return e;
    }
    if context.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateContext: context is null");
    }
    let mut s = state::lock();
    if device_id < 0 || device_id as u32 >= s.device_count {
        return fail(ACL_ERROR_INVALID_DEVICE, "aclrtCreateContext: no such device");
    }
    let id = s.new_handle();
    s.contexts.insert(id, state::Context { primary: false, deterministic: None });
    set_binding(Binding { context: id, primary_of: None });
    // SAFETY: checked non-null; the caller passes a valid `aclrtContext*`.
    unsafe { *context = id as *mut c_void };
    ACL_SUCCESS
}

/// Models `ApiImpl::ContextDestroy` (l.4131-4173): a primary context cannot be destroyed
/// ("Primary context cannot be destroyed explicitly", `RT_ERROR_CONTEXT_NULL`); the destroying
/// thread is left with no current context if it was current there. On other threads a binding to
/// it resolves to none from then on (`Runtime::CurrentContext` checks validity).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyContext(context: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtDestroyContext") {
        return e;
    }
    let mut s = state::lock();
    let id = context as usize;
    match s.contexts.get(&id) {
        None => {
            s.violation(format!("aclrtDestroyContext of unknown context {id:#x}"));
            return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtDestroyContext: unknown context");
        }
        Some(c) if c.primary => {
            s.violation("aclrtDestroyContext of a primary context".into());
            return fail(
                ACL_ERROR_RT_CONTEXT_NULL,
                "aclrtDestroyContext: primary context cannot be destroyed",
            );
        }
        Some(_) => {}
    }
    s.contexts.remove(&id);
    if s.streams.values().any(|st| st.context == id) {
        s.violation("aclrtDestroyContext before its streams were destroyed".into());
    }
    let b = binding();
    if b.context == id {
        set_binding(Binding { context: 0, ..b });
    }
    ACL_SUCCESS
}

/// Models hicann/runtime `src/acl/aclrt_impl/context.cpp` `aclrtSetCurrentContextImpl` (a null
/// context is refused, `ACL_REQUIRES_NOT_NULL`: ACL has no call that unbinds a thread) and
/// `ApiImpl::ContextSetCurrent` (l.4175-4191: `SetCurCtx(inCtx)`, `SetCurRef(nullptr)`).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetCurrentContext(context: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtSetCurrentContext") {
        return e;
    }
    if context.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: context is null");
    }
    let s = state::lock();
    if !s.contexts.contains_key(&(context as usize)) {
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtSetCurrentContext: the context has been destroyed");
    }
    set_binding(Binding { context: context as usize, primary_of: None });
    ACL_SUCCESS
}

/// Models `aclrtGetCurrentContextImpl` (`context.cpp`) over `ApiImpl::ContextGetCurrent`
/// (l.4193-4204): the context set current, else the primary context `aclrtSetDevice` bound, else
/// `ACL_ERROR_RT_CONTEXT_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetCurrentContext(context: *mut *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtGetCurrentContext") {
        return e;
    }
    if context.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: context is null");
    }
    match state::lock().current_context() {
        0 => fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetCurrentContext: no current context"),
        id => {
            // SAFETY: checked non-null; the caller passes a valid `aclrtContext*`.
            unsafe { *context = id as *mut c_void };
            ACL_SUCCESS
        }
    }
}

/// Models hicann/runtime `src/runtime/api/api_c.cc`, `rtCtxSetSysParamOpt`: the context's value,
/// and (`sysParamOpt_[configOpt].store(configVal)`) the process's too.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtCtxSetSysParamOpt(opt: i32, value: i64) -> AclError {
    if let Some(e) = enter("aclrtCtxSetSysParamOpt") {
        return e;
    }
    let mut s = state::lock();
    let ctx = s.current_context();
    if opt != 0 || !(0..=3).contains(&value) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCtxSetSysParamOpt: bad option or value");
    }
    match s.contexts.get_mut(&ctx) {
        Some(c) => {
            c.deterministic = Some(value);
            s.process_deterministic = value;
            ACL_SUCCESS
        }
        None => {
            s.violation("aclrtCtxSetSysParamOpt without a current context on this thread".into());
            fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtCtxSetSysParamOpt: no current context")
        }
    }
}

/// Models `rtCtxGetSysParamOpt`: `ACL_ERROR_RT_SYSPARAMOPT_NOT_SET` until the context's value is set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxGetSysParamOpt(opt: i32, value: *mut i64) -> AclError {
    if let Some(e) = enter("aclrtCtxGetSysParamOpt") {
        return e;
    }
    if opt != 0 || value.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCtxGetSysParamOpt: bad option or null value");
    }
    let s = state::lock();
    match s.contexts.get(&s.current_context()).map(|c| c.deterministic) {
        Some(Some(v)) => {
            // SAFETY: checked non-null; the caller passes a valid `int64_t*`.
            unsafe { *value = v };
            ACL_SUCCESS
        }
        Some(None) => fail(ACL_ERROR_RT_SYSPARAMOPT_NOT_SET, "aclrtCtxGetSysParamOpt: not set"),
        None => fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtCtxGetSysParamOpt: no current context"),
    }
}

/// Models `rtSetSysParamOpt` (the process-level value, no context needed).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetSysParamOpt(opt: i32, value: i64) -> AclError {
    if let Some(e) = enter("aclrtSetSysParamOpt") {
        return e;
    }
    if opt != 0 || !(0..=3).contains(&value) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetSysParamOpt: bad option or value");
    }
    state::lock().process_deterministic = value;
    ACL_SUCCESS
}

/// Models `rtGetSysParamOpt`: `*configVal = sysParamOpt_[configOpt].load()` (0 until set).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSysParamOpt(opt: i32, value: *mut i64) -> AclError {
    if let Some(e) = enter("aclrtGetSysParamOpt") {
        return e;
    }
    if opt != 0 || value.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetSysParamOpt: bad option or null value");
    }
    // SAFETY: checked non-null; the caller passes a valid `int64_t*`.
    unsafe { *value = state::lock().process_deterministic };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtCreateStream") {
        return e;
    }
    if stream.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: stream is null");
    }
    let mut s = state::lock();
    // `ApiImpl::StreamCreate` (l.1481-1485): the stream belongs to the current context.
    let ctx = s.current_context();
    if ctx == 0 {
        s.violation("aclrtCreateStream without a current context on this thread".into());
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtCreateStream: no current context");
    }
    let id = s.new_handle();
    s.streams.insert(id, state::Stream { context: ctx, queue: Vec::new() });
    // SAFETY: checked non-null; the caller passes a valid `aclrtStream*`.
    unsafe { *stream = id as *mut c_void };
    ACL_SUCCESS
}

/// Models `ApiImpl::StreamDestroy` (l.1579-1589): the stream must belong to the current context
/// (`RT_ERROR_STREAM_CONTEXT` otherwise).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtDestroyStream") {
        return e;
    }
    let mut s = state::lock();
    if let Err(code) = s.stream_in_current_context(stream as usize, "aclrtDestroyStream") {
        return code;
    }
    match s.streams.remove(&(stream as usize)) {
        None => {
            s.violation(format!("aclrtDestroyStream of unknown stream {:#x}", stream as usize));
            fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyStream: unknown stream")
        }
        Some(st) => {
            if !st.queue.is_empty() {
                s.violation("aclrtDestroyStream with work not synchronised".into());
            }
            ACL_SUCCESS
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeStream(stream: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtSynchronizeStream") {
        // A failed wait leaves the stream's tasks queued, still to run: `ApiImpl::StreamSynchronize`
        // (l.1732-1741) reports a timeout (`RT_ERROR_STREAM_SYNC_TIMEOUT`) with the task still
        // running and stops nothing. So their buffers stay in use (freeing one is a violation)
        // until a later wait succeeds.
        return e;
    }
    let mut s = state::lock();
    // `ApiImpl::StreamSynchronize` (l.1704-1750) needs a current context, but not the stream's:
    // it switches to the stream's context for the call and back afterwards.
    if s.current_context() == 0 {
        s.violation("aclrtSynchronizeStream without a current context on this thread".into());
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtSynchronizeStream: no current context");
    }
    let id = stream as usize;
    let Some(st) = s.streams.get_mut(&id) else {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeStream: unknown stream");
    };
    let queue = std::mem::take(&mut st.queue);
    for task in queue {
        match &task {
            state::Task::Kernel(queued) if queued.executes => exec::run(&mut s, queued),
            state::Task::Kernel(_) => {}
            &state::Task::Memset { addr, len, value } => match s.device_range(addr, len) {
                Some(range) => s.device_bytes_mut(range).fill(value),
                None => s.violation("aclrtMemsetAsync: its memory was freed before the stream ran it".into()),
            },
        }
        for addr in task.addrs() {
            s.set_pending(addr, false);
        }
    }
    ACL_SUCCESS
}

/// Models `aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)` (CANN 9.0 runtime
/// API reference, `aclrtGetMemInfo`): the memory applications can use on the current device,
/// free and in total. A device must be set first (here: a current context, as `aclrtMalloc`
/// requires). The double's device has one memory (`memory_limit`), reported for `ACL_DDR_MEM`
/// (0) and `ACL_HBM_MEM` (1): CANN answers an HBM query from DDR where a SoC has no HBM. Other
/// kinds report 0 and 0, as CANN does for a kind the hardware lacks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(attr: i32, free: *mut usize, total: *mut usize) -> AclError {
    if let Some(e) = enter("aclrtGetMemInfo") {
        return e;
    }
    if free.is_null() || total.is_null() || !(0..=9).contains(&attr) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: null pointer or unknown memory attribute");
    }
    let mut s = state::lock();
    if s.current_context() == 0 {
        s.violation("aclrtGetMemInfo without a current context on this thread".into());
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtGetMemInfo: no device set");
    }
    let (f, t) = match attr {
        0 | 1 => (s.memory_limit.saturating_sub(s.allocated_bytes()), s.memory_limit),
        _ => (0, 0),
    };
    // SAFETY: checked non-null; the caller passes valid `size_t*`.
    unsafe {
        *free = f;
        *total = t;
    }
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, policy: i32) -> AclError {
    if let Some(e) = enter("aclrtMalloc") {
        return e;
    }
    if dev_ptr.is_null() || size == 0 {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: null pointer or size 0");
    }
    if !(0..=7).contains(&(policy & 0xff)) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: unknown memory policy");
    }
    let mut s = state::lock();
    if s.current_context() == 0 {
        s.violation("aclrtMalloc without a current context on this thread".into());
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtMalloc: no current context");
    }
    if size > s.memory_limit.saturating_sub(s.allocated_bytes()) {
        return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc: out of device memory");
    }
    // Fresh device memory holds garbage, not zeros.
    let buf = vec![0xA5u8; size].into_boxed_slice();
    let addr = buf.as_ptr() as usize;
    s.allocs.insert(addr, state::Alloc { data: buf, pending: false });
    // SAFETY: checked non-null; the caller passes a valid `void**`.
    unsafe { *dev_ptr = addr as *mut c_void };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtFree") {
        return e;
    }
    let mut s = state::lock();
    match s.allocs.remove(&(dev_ptr as usize)) {
        None => {
            s.violation(format!("aclrtFree of {:#x}, which is not a live allocation", dev_ptr as usize));
            fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: not an allocation")
        }
        Some(a) => {
            if a.pending || s.queued_workspace(dev_ptr as usize) {
                s.violation("aclrtFree of a buffer a queued operator still uses".into());
            }
            ACL_SUCCESS
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
) -> AclError {
    if let Some(e) = enter("aclrtMemcpy") {
        return e;
    }
    if count > dest_max || dst.is_null() || src.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: count > destMax or null pointer");
    }
    let mut s = state::lock();
    if s.current_context() == 0 {
        s.violation("aclrtMemcpy without a current context on this thread".into());
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "aclrtMemcpy: no current context");
    }
    let (dst, src) = (dst as usize, src as usize);
    match kind {
        HOST_TO_DEVICE => {
            let Some(range) = s.device_range(dst, count) else {
                s.violation(format!(
                    "aclrtMemcpy host-to-device: {count} bytes at {dst:#x} not in device memory"
                ));
                return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: bad device range");
            };
            // SAFETY: the caller promises `count` readable host bytes at `src` (aclrtMemcpy's contract).
            let host = unsafe { core::slice::from_raw_parts(src as *const u8, count) };
            s.device_bytes_mut(range).copy_from_slice(host);
            s.count("aclrtMemcpy:HostToDevice");
        }
        DEVICE_TO_HOST => {
            let Some(range) = s.device_range(src, count) else {
                s.violation(format!(
                    "aclrtMemcpy device-to-host: {count} bytes at {src:#x} not in device memory"
                ));
                return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: bad device range");
            };
            if s.allocs[&range.0].pending {
                s.violation(
                    "device-to-host copy of a buffer with unfinished work: stream not synchronised".into(),
                );
            }
            // SAFETY: the caller promises `count` writable host bytes at `dst`.
            let host = unsafe { core::slice::from_raw_parts_mut(dst as *mut u8, count) };
            host.copy_from_slice(s.device_bytes(range));
            s.count("aclrtMemcpy:DeviceToHost");
        }
        DEVICE_TO_DEVICE => {
            let (Some(d), Some(r)) = (s.device_range(dst, count), s.device_range(src, count)) else {
                return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: bad device range");
            };
            let bytes = s.device_bytes(r).to_vec();
            s.device_bytes_mut(d).copy_from_slice(&bytes);
        }
        HOST_TO_HOST => {
            // SAFETY: aclrtMemcpy's contract: both ranges valid host memory, not overlapping.
            unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, count) };
        }
        _ => return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: unknown kind"),
    }
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtMemset(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize) -> AclError {
    if let Some(e) = enter("aclrtMemset") {
        return e;
    }
    let mut s = state::lock();
    if count > max_count {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: count > maxCount");
    }
    let Some(range) = s.device_range(dev_ptr as usize, count) else {
        s.violation("aclrtMemset outside device memory".into());
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemset: bad device range");
    };
    s.device_bytes_mut(range).fill(value as u8);
    ACL_SUCCESS
}

/// Models `aclrtMemsetAsync(devPtr, maxCount, value, count, stream)` (hicann/runtime
/// `include/external/acl/acl_rt.h`): the memset is a task of `stream`, run in stream order when
/// the stream is synchronised; until then the memory is in use (freeing it or copying it to the
/// host is a violation). `ApiImpl::MemsetAsync` (`api_impl.cc` l.3215-3229) needs a current
/// context (`RT_ERROR_CONTEXT_NULL`) that owns the stream (`RT_ERROR_STREAM_CONTEXT`). (A null
/// stream, the context's default one, is not modelled: poolgrad always names its stream.)
#[unsafe(no_mangle)]
pub extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> AclError {
    if let Some(e) = enter("aclrtMemsetAsync") {
        return e;
    }
    let mut s = state::lock();
    if count > max_count {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: count > maxCount");
    }
    if s.device_range(dev_ptr as usize, count).is_none() {
        s.violation("aclrtMemsetAsync outside device memory".into());
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: bad device range");
    }
    if !s.streams.contains_key(&(stream as usize)) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemsetAsync: unknown stream");
    }
    if let Err(code) = s.stream_in_current_context(stream as usize, "aclrtMemsetAsync") {
        return code;
    }
    s.set_pending(dev_ptr as usize, true);
    let task = state::Task::Memset { addr: dev_ptr as usize, len: count, value: value as u8 };
    s.streams.get_mut(&(stream as usize)).unwrap().queue.push(task);
    ACL_SUCCESS
}

// ---------------------------------------------------------------------------------------------
// libnnopbase: aclnn/acl_meta.h

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateTensor(
    view_dims: *const i64,
    view_dims_num: u64,
    data_type: i32,
    stride: *const i64,
    offset: i64,
    format: i32,
    storage_dims: *const i64,
    storage_dims_num: u64,
    tensor_data: *mut c_void,
) -> *mut c_void {
    if enter("aclCreateTensor").is_some() {
        return core::ptr::null_mut();
    }
    if view_dims_num > 8 || storage_dims_num > 8 {
        return core::ptr::null_mut();
    }
    if (view_dims_num > 0 && (view_dims.is_null() || stride.is_null()))
        || (storage_dims_num > 0 && storage_dims.is_null())
    {
        return core::ptr::null_mut();
    }
    let read = |p: *const i64, n: u64| -> Vec<i64> {
        if n == 0 {
            return Vec::new();
        }
        // SAFETY: checked non-null above; the caller passes `n` readable `int64_t`.
        unsafe { core::slice::from_raw_parts(p, n as usize) }.to_vec()
    };
    let desc = TensorDesc {
        dims: read(view_dims, view_dims_num),
        strides: read(stride, view_dims_num),
        storage: read(storage_dims, storage_dims_num),
        dtype: data_type,
        offset,
        format,
        addr: tensor_data as usize,
    };
    let mut s = state::lock();
    let id = s.new_handle();
    s.tensors.insert(id, desc);
    id as *mut c_void
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut c_void {
    if enter("aclCreateIntArray").is_some() {
        return core::ptr::null_mut();
    }
    if size > 0 && value.is_null() || size > 64 {
        return core::ptr::null_mut();
    }
    let values = if size == 0 {
        Vec::new()
    } else {
        // SAFETY: checked non-null; the caller passes `size` readable `int64_t`.
        unsafe { core::slice::from_raw_parts(value, size as usize) }.to_vec()
    };
    let mut s = state::lock();
    let id = s.new_handle();
    s.int_arrays.insert(id, values);
    id as *mut c_void
}

#[unsafe(no_mangle)]
pub extern "C" fn aclDestroyTensor(tensor: *const c_void) -> i32 {
    if let Some(e) = enter("aclDestroyTensor") {
        return e;
    }
    let mut s = state::lock();
    if s.tensors.remove(&(tensor as usize)).is_none() {
        s.violation(format!("aclDestroyTensor of unknown tensor {:#x}", tensor as usize));
        return fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyTensor: unknown tensor");
    }
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn aclDestroyIntArray(array: *const c_void) -> i32 {
    if let Some(e) = enter("aclDestroyIntArray") {
        return e;
    }
    let mut s = state::lock();
    if s.int_arrays.remove(&(array as usize)).is_none() {
        s.violation(format!("aclDestroyIntArray of unknown array {:#x}", array as usize));
        return fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyIntArray: unknown array");
    }
    0
}

/// Models hicann/opbase `acl_op_api.cpp` `aclSetAclOpExecutorRepeatable` ->
/// `op_executor.cpp` `OpExecutorImpl::SetRepeatable`: every kernel launcher must pass
/// `LauncherRepeatableChecker::CheckLaunchArg` (`common/inc/kernel_launcher.h`), which fails for a
/// tensor that is neither workspace, nor a caller's tensor, nor a recorded `ViewCopy` relation.
/// The mask operators' op_api (ops-nn `aclnn_max_pool2d_with_indices.cpp`,
/// `aclnn_max_pool2d_with_indices_backward.cpp`) points such internal tensors at the caller's
/// mask (`SetStorageAddr(indices->GetStorageAddr()); SetFromWorkspace(false)`), so CANN answers
/// `ACLNN_ERR_INNER` for them; the reason goes only to the log (`OP_LOGW`), not to
/// `aclGetRecentErrMsg`.
#[unsafe(no_mangle)]
pub extern "C" fn aclSetAclOpExecutorRepeatable(executor: *mut c_void) -> i32 {
    if let Some(e) = enter("aclSetAclOpExecutorRepeatable") {
        return e;
    }
    let mut s = state::lock();
    let id = executor as usize;
    if s.consumed.contains(&id) {
        s.violation(format!(
            "aclSetAclOpExecutorRepeatable on executor {id:#x} after its launch: CANN deleted it (use after free)"
        ));
        return ACLNN_ERR_INNER;
    }
    match s.executors.get_mut(&id) {
        // An executor with no kernels (an empty input) has no launcher to refuse.
        Some(ex)
            if matches!(ex.job, Job::MaskForward { .. } | Job::MaskBackward { .. })
                && !exec::empty(&ex.job) =>
        {
            ACLNN_ERR_INNER
        }
        Some(ex) => {
            ex.repeatable = true;
            0
        }
        None => {
            s.violation("aclSetAclOpExecutorRepeatable of an unknown or freed executor".into());
            fail(ACLNN_ERR_PARAM_NULLPTR, "aclSetAclOpExecutorRepeatable: unknown executor")
        }
    }
}

/// Models `acl_op_api.cpp` `aclDestroyAclOpExecutor`: deletes an executor the caller still owns
/// (never launched, or repeatable). One that a launch consumed was deleted by CANN already.
#[unsafe(no_mangle)]
pub extern "C" fn aclDestroyAclOpExecutor(executor: *mut c_void) -> i32 {
    if let Some(e) = enter("aclDestroyAclOpExecutor") {
        return e;
    }
    let mut s = state::lock();
    let id = executor as usize;
    if s.consumed.contains(&id) {
        s.violation(format!(
            "aclDestroyAclOpExecutor on executor {id:#x} after its launch: CANN deleted it already (double free)"
        ));
        return ACLNN_ERR_INNER;
    }
    match s.executors.remove(&id) {
        Some(_) => 0,
        None => {
            s.violation("aclDestroyAclOpExecutor of an unknown or freed executor".into());
            fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyAclOpExecutor: unknown executor")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// libopapi: the operators

/// Output parameters of every `*GetWorkspaceSize`.
struct Phase1Out {
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
}

impl Phase1Out {
    /// Validates `job` (a CANN status on failure), then registers its executor.
    fn finish(self, name: &str, job: Result<Job, (i32, String)>) -> i32 {
        if self.workspace_size.is_null() || self.executor.is_null() {
            return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: workspaceSize or executor is null"));
        }
        let mut s = state::lock();
        let job = match job.and_then(|job| exec::check(&s, &job).map(|()| job)) {
            Ok(job) => job,
            Err((code, msg)) => {
                drop(s);
                return fail(code, &format!("{name}: {msg}"));
            }
        };
        let workspace = exec::workspace_size(&job);
        let id = s.new_handle();
        // The deterministic level is read in phase 1, from the process option (hicann/opbase
        // `op_executor.cpp`: `GetDeterministicLevelFromRt` -> `aclrtGetSysParamOpt`).
        let deterministic = s.process_deterministic;
        s.executors.insert(id, state::Executor { job, workspace, repeatable: false, deterministic });
        // SAFETY: both checked non-null; the caller passes valid out-pointers.
        unsafe {
            *self.workspace_size = workspace;
            *self.executor = id as *mut c_void;
        }
        0
    }
}

fn tensor(s: &state::State, name: &str, t: *const c_void) -> Result<TensorDesc, (i32, String)> {
    if t.is_null() {
        return Err((ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")));
    }
    s.tensors
        .get(&(t as usize))
        .cloned()
        .ok_or((ACLNN_ERR_PARAM_NULLPTR, format!("{name} is not a live aclTensor")))
}

fn int_array(s: &state::State, name: &str, a: *const c_void) -> Result<Vec<i64>, (i32, String)> {
    if a.is_null() {
        return Err((ACLNN_ERR_PARAM_NULLPTR, format!("{name} is null")));
    }
    s.int_arrays
        .get(&(a as usize))
        .cloned()
        .ok_or((ACLNN_ERR_PARAM_NULLPTR, format!("{name} is not a live aclIntArray")))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool2dGetWorkspaceSize(
    self_: *const c_void,
    output_size: *const c_void,
    out: *const c_void,
    indices: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    const NAME: &str = "aclnnAdaptiveMaxPool2dGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::AdaptiveForward {
                input: tensor(&s, "self", self_)?,
                output_size: int_array(&s, "outputSize", output_size)?,
                out: tensor(&s, "outputOut", out)?,
                indices: tensor(&s, "indicesOut", indices)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
}

/// Absent with the `cann81` feature, as in CANN 8.1.RC1 (ascend-semantics.md B).
#[cfg(not(feature = "cann81"))]
#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    grad_input: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    const NAME: &str = "aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::AdaptiveBackward {
                grad_output: tensor(&s, "gradOutput", grad_output)?,
                input: tensor(&s, "self", self_)?,
                indices: tensor(&s, "indices", indices)?,
                grad_input: tensor(&s, "gradInput", grad_input)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
}

fn mask_params(
    s: &state::State,
    kernel: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
) -> Result<MaskParams, (i32, String)> {
    Ok(MaskParams {
        kernel: int_array(s, "kernelSize", kernel)?,
        stride: int_array(s, "stride", stride)?,
        padding: int_array(s, "padding", padding)?,
        dilation: int_array(s, "dilation", dilation)?,
        ceil_mode,
    })
}

/// The tensors and parameters of a max-pooling forward, as a job.
type PoolForwardJob = fn(TensorDesc, MaskParams, TensorDesc, TensorDesc) -> Job;
/// The tensors and parameters of a max-pooling backward, as a job.
type PoolBackwardJob = fn(TensorDesc, TensorDesc, TensorDesc, MaskParams, TensorDesc) -> Job;

/// Phase 1 of the two max-pooling forwards, which share one signature (ops-nn
/// `aclnn_max_pool2d_with_indices.cpp`): `job` says which operator.
fn pool_forward_phase1(
    name: &str,
    job: PoolForwardJob,
    (self_, kernel_size, stride, padding, dilation, ceil_mode): PoolArgs,
    out: *const c_void,
    indices: *const c_void,
    phase1: Phase1Out,
) -> i32 {
    if let Some(e) = enter(name) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(job(
                tensor(&s, "self", self_)?,
                mask_params(&s, kernel_size, stride, padding, dilation, ceil_mode)?,
                tensor(&s, "out", out)?,
                tensor(&s, "indices", indices)?,
            ))
        })()
    };
    phase1.finish(name, job)
}

/// Phase 1 of the two max-pooling backwards, which share one signature (ops-nn
/// `aclnn_max_pool2d_with_indices_backward.cpp`): `job` says which operator.
fn pool_backward_phase1(
    name: &str,
    job: PoolBackwardJob,
    grad_output: *const c_void,
    (self_, kernel_size, stride, padding, dilation, ceil_mode): PoolArgs,
    indices: *const c_void,
    grad_input: *const c_void,
    phase1: Phase1Out,
) -> i32 {
    if let Some(e) = enter(name) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(job(
                tensor(&s, "gradOutput", grad_output)?,
                tensor(&s, "self", self_)?,
                tensor(&s, "indices", indices)?,
                mask_params(&s, kernel_size, stride, padding, dilation, ceil_mode)?,
                tensor(&s, "gradInput", grad_input)?,
            ))
        })()
    };
    phase1.finish(name, job)
}

/// `self`, kernel size, stride, padding, dilation and ceil mode.
type PoolArgs = (*const c_void, *const c_void, *const c_void, *const c_void, *const c_void, bool);

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithMaskGetWorkspaceSize(
    self_: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    out: *const c_void,
    indices: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_forward_phase1(
        "aclnnMaxPool2dWithMaskGetWorkspaceSize",
        |input, params, out, mask| Job::MaskForward { input, params, out, mask },
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        out,
        indices,
        Phase1Out { workspace_size, executor },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    grad_input: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_backward_phase1(
        "aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize",
        |grad_output, input, mask, params, grad_input| Job::MaskBackward {
            grad_output,
            input,
            mask,
            params,
            grad_input,
        },
        grad_output,
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        indices,
        grad_input,
        Phase1Out { workspace_size, executor },
    )
}

/// `aclnnMaxPool2dWithIndicesGetWorkspaceSize` (ops-nn `aclnn_max_pool2d_with_indices.cpp`).
#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithIndicesGetWorkspaceSize(
    self_: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    out: *const c_void,
    indices: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_forward_phase1(
        "aclnnMaxPool2dWithIndicesGetWorkspaceSize",
        |input, params, out, indices| Job::IndicesForward { input, params, out, indices },
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        out,
        indices,
        Phase1Out { workspace_size, executor },
    )
}

/// `aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize` (ops-nn
/// `aclnn_max_pool2d_with_indices_backward.cpp`).
#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    grad_input: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_backward_phase1(
        "aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize",
        |grad_output, input, indices, params, grad_input| Job::IndicesBackward {
            grad_output,
            input,
            indices,
            params,
            grad_input,
        },
        grad_output,
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        indices,
        grad_input,
        Phase1Out { workspace_size, executor },
    )
}

/// `aclnnMaxPool3dWithArgmaxGetWorkspaceSize` (ops-nn
/// `pooling/max_pool3d_with_argmax_v2/op_api/aclnn_max_pool3d_with_argmax.cpp`): the 2-D
/// forwards' signature, over 4-D or 5-D tensors.
#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool3dWithArgmaxGetWorkspaceSize(
    self_: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    out: *const c_void,
    indices: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_forward_phase1(
        "aclnnMaxPool3dWithArgmaxGetWorkspaceSize",
        |input, params, out, indices| Job::Pool3dForward { input, params, out, indices },
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        out,
        indices,
        Phase1Out { workspace_size, executor },
    )
}

/// `aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize` (ops-nn
/// `pooling/max_pool3d_grad_with_argmax/op_api/aclnn_max_pool3d_with_argmax_backward.cpp`).
#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    kernel_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    dilation: *const c_void,
    ceil_mode: bool,
    grad_input: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    pool_backward_phase1(
        "aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize",
        |grad_output, input, indices, params, grad_input| Job::Pool3dBackward {
            grad_output,
            input,
            indices,
            params,
            grad_input,
        },
        grad_output,
        (self_, kernel_size, stride, padding, dilation, ceil_mode),
        indices,
        grad_input,
        Phase1Out { workspace_size, executor },
    )
}

/// `aclnnAdaptiveMaxPool3dGetWorkspaceSize` (ops-nn
/// `pooling/adaptive_max_pool3d/op_api/aclnn_adaptive_max_pool3d.cpp`).
#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool3dGetWorkspaceSize(
    self_: *const c_void,
    output_size: *const c_void,
    out: *const c_void,
    indices: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    const NAME: &str = "aclnnAdaptiveMaxPool3dGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::Adaptive3dForward {
                input: tensor(&s, "self", self_)?,
                output_size: int_array(&s, "outputSize", output_size)?,
                out: tensor(&s, "outputOut", out)?,
                indices: tensor(&s, "indicesOut", indices)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
}

/// `aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize` (ops-nn
/// `pooling/adaptive_max_pool3d_grad/op_api/aclnn_adaptive_max_pool3d_backward.cpp`); its header
/// is in CANN 8.1.RC1, so the `cann81` variant exports it too.
#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    grad_input: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    const NAME: &str = "aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::Adaptive3dBackward {
                grad_output: tensor(&s, "gradOutput", grad_output)?,
                input: tensor(&s, "self", self_)?,
                indices: tensor(&s, "indices", indices)?,
                grad_input: tensor(&s, "gradInput", grad_input)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
}

/// An unpooling's `self`, `indices`, `outputSize` and, for the 3-D operators, `stride` and
/// `padding`.
type UnpoolArgs = (TensorDesc, TensorDesc, Vec<i64>, Option<(Vec<i64>, Vec<i64>)>);

/// Reads an unpooling's arguments from their handles.
fn unpool_args(
    s: &state::State,
    (self_, indices, output_size): (*const c_void, *const c_void, *const c_void),
    stride_padding: Option<(*const c_void, *const c_void)>,
) -> Result<UnpoolArgs, (i32, String)> {
    let stride_padding = match stride_padding {
        Some((st, p)) => Some((int_array(s, "stride", st)?, int_array(s, "padding", p)?)),
        None => None,
    };
    Ok((
        tensor(s, "self", self_)?,
        tensor(s, "indices", indices)?,
        int_array(s, "outputSize", output_size)?,
        stride_padding,
    ))
}

/// Phase 1 of the two unpoolings (ops-nn `index/scatter_elements/op_api/aclnn_max_unpool2d.cpp`,
/// `aclnn_max_unpool3d.cpp`).
fn unpool_phase1(
    name: &str,
    args: (*const c_void, *const c_void, *const c_void),
    stride_padding: Option<(*const c_void, *const c_void)>,
    out: *const c_void,
    phase1: Phase1Out,
) -> i32 {
    if let Some(e) = enter(name) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            let (input, indices, output_size, stride_padding) = unpool_args(&s, args, stride_padding)?;
            Ok(Job::Unpool { input, indices, output_size, stride_padding, out: tensor(&s, "out", out)? })
        })()
    };
    phase1.finish(name, job)
}

/// Phase 1 of the two unpooling backwards (ops-nn
/// `index/gather_elements/op_api/aclnn_max_unpool2d_backward.cpp`, `aclnn_max_unpool3d_backward.cpp`).
fn unpool_backward_phase1(
    name: &str,
    grad_output: *const c_void,
    args: (*const c_void, *const c_void, *const c_void),
    stride_padding: Option<(*const c_void, *const c_void)>,
    out: *const c_void,
    phase1: Phase1Out,
) -> i32 {
    if let Some(e) = enter(name) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            let grad_output = tensor(&s, "gradOutput", grad_output)?;
            let (input, indices, output_size, stride_padding) = unpool_args(&s, args, stride_padding)?;
            let out = tensor(&s, "out", out)?;
            Ok(Job::UnpoolBackward { grad_output, input, indices, output_size, stride_padding, out })
        })()
    };
    phase1.finish(name, job)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool2dGetWorkspaceSize(
    self_: *const c_void,
    indices: *const c_void,
    output_size: *const c_void,
    out: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    let phase1 = Phase1Out { workspace_size, executor };
    unpool_phase1("aclnnMaxUnpool2dGetWorkspaceSize", (self_, indices, output_size), None, out, phase1)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool3dGetWorkspaceSize(
    self_: *const c_void,
    indices: *const c_void,
    output_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    out: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    let phase1 = Phase1Out { workspace_size, executor };
    let args = (self_, indices, output_size);
    unpool_phase1("aclnnMaxUnpool3dGetWorkspaceSize", args, Some((stride, padding)), out, phase1)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool2dBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    output_size: *const c_void,
    out: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    let phase1 = Phase1Out { workspace_size, executor };
    let args = (self_, indices, output_size);
    unpool_backward_phase1("aclnnMaxUnpool2dBackwardGetWorkspaceSize", grad_output, args, None, out, phase1)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool3dBackwardGetWorkspaceSize(
    grad_output: *const c_void,
    self_: *const c_void,
    indices: *const c_void,
    output_size: *const c_void,
    stride: *const c_void,
    padding: *const c_void,
    out: *const c_void,
    workspace_size: *mut u64,
    executor: *mut *mut c_void,
) -> i32 {
    let phase1 = Phase1Out { workspace_size, executor };
    let (args, sp) = ((self_, indices, output_size), Some((stride, padding)));
    unpool_backward_phase1("aclnnMaxUnpool3dBackwardGetWorkspaceSize", grad_output, args, sp, out, phase1)
}

/// The second phase of every operator: queue the executor's job on `stream`.
///
/// Models hicann/opbase `op_executor.cpp`, `CommonOpExecutorRun`: a null executor is refused
/// as is (`ACLNN_ERR_PARAM_NULLPTR`); any other non-repeatable executor is deleted by the call
/// whatever happens (`DeleteExecutorForError` on a null workspace, `delete executor` after
/// `executor->Run()`, successful or not). A run that fails (an injected status) may have queued
/// the kernels it launched before the failure: they keep the operator's buffers in use until the
/// stream is synchronised, and produce nothing.
fn launch(
    name: &str,
    kind: &str,
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    let injected = enter(name);
    let mut s = state::lock();
    let id = executor as usize;
    if id == 0 {
        return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: executor is nullptr"));
    }
    if s.consumed.contains(&id) {
        s.violation(format!(
            "{name}: executor {id:#x} launched again after its launch: CANN deleted it (use after free)"
        ));
        return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: executor already deleted"));
    }
    let Some(ex) = s.executors.get(&id).cloned() else {
        s.violation(format!("{name}: executor {id:#x} unknown or destroyed"));
        return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: unknown executor"));
    };
    // From here on a non-repeatable executor is CANN's, and gone when this call returns.
    if !ex.repeatable {
        s.executors.remove(&id);
        s.consumed.insert(id);
    }
    if ex.job.kind() != kind {
        s.violation(format!("{name} called with an executor of {}", ex.job.kind()));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: executor of another operator"));
    }
    if ex.workspace > 0 && workspace.is_null() {
        return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: workspace is nullptr"));
    }
    if size < ex.workspace {
        let need = ex.workspace;
        s.violation(format!("{name}: workspaceSize {size} is less than the {need} bytes phase 1 reported"));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: workspace too small"));
    }
    if ex.workspace > 0 && s.device_range(workspace as usize, ex.workspace as usize).is_none() {
        s.violation(format!("{name}: workspace is not {} bytes of device memory", ex.workspace));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: bad workspace"));
    }
    if !s.streams.contains_key(&(stream as usize)) {
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: unknown stream"));
    }
    // The kernels are launched on `stream` in the current context: `ApiImpl::KernelLaunch`
    // (l.529-542) fails with `RT_ERROR_STREAM_CONTEXT` for a stream of another context. (Which
    // aclnn status a real launch then returns is not modelled: the runtime's is passed on.)
    if let Err(code) = s.stream_in_current_context(stream as usize, name) {
        return code;
    }
    // Every buffer of the operator is in use until the stream is synchronised.
    for t in ex.job.tensors() {
        s.set_pending(t.addr, true);
    }
    let queued = state::Queued {
        job: ex.job,
        workspace: (workspace as usize, ex.workspace),
        deterministic: ex.deterministic,
        executes: injected.is_none(),
    };
    s.streams.get_mut(&(stream as usize)).unwrap().queue.push(state::Task::Kernel(Box::new(queued)));
    injected.unwrap_or(0)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool2d(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnAdaptiveMaxPool2d", "AdaptiveMaxPool2d", workspace, size, executor, stream)
}

#[cfg(not(feature = "cann81"))]
#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool2dBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnAdaptiveMaxPool2dBackward", "AdaptiveMaxPool2dBackward", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithMask(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxPool2dWithMask", "MaxPool2dWithMask", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithMaskBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxPool2dWithMaskBackward", "MaxPool2dWithMaskBackward", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithIndices(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxPool2dWithIndices", "MaxPool2dWithIndices", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool2dWithIndicesBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch(
        "aclnnMaxPool2dWithIndicesBackward",
        "MaxPool2dWithIndicesBackward",
        workspace,
        size,
        executor,
        stream,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool3dWithArgmax(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxPool3dWithArgmax", "MaxPool3dWithArgmax", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxPool3dWithArgmaxBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch(
        "aclnnMaxPool3dWithArgmaxBackward",
        "MaxPool3dWithArgmaxBackward",
        workspace,
        size,
        executor,
        stream,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool3d(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnAdaptiveMaxPool3d", "AdaptiveMaxPool3d", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnAdaptiveMaxPool3dBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnAdaptiveMaxPool3dBackward", "AdaptiveMaxPool3dBackward", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool2d(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxUnpool2d", "MaxUnpool2d", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool3d(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxUnpool3d", "MaxUnpool3d", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool2dBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxUnpool2dBackward", "MaxUnpool2dBackward", workspace, size, executor, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclnnMaxUnpool3dBackward(
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    launch("aclnnMaxUnpool3dBackward", "MaxUnpool3dBackward", workspace, size, executor, stream)
}

// ---------------------------------------------------------------------------------------------
// Control, for tests only.

/// Resets every handle, counter, violation and injection; SoC "Ascend910B1", one device.
#[unsafe(no_mangle)]
pub extern "C" fn cann_double_reset() {
    state::lock().reset();
}

/// Sets the SoC name `aclrtGetSocName` returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_set_soc(name: *const c_char) {
    // SAFETY: the test passes a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) }.to_owned();
    state::lock().set_soc(name);
}

/// Sets the CANN release `aclsysGetCANNVersion` reports; NULL for an install without its version
/// record.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_set_release(release: *const c_char) {
    // SAFETY: the test passes NULL or a NUL-terminated string.
    let release = (!release.is_null()).then(|| unsafe { CStr::from_ptr(release) }.to_owned());
    state::lock().release = release;
}

/// `aclInit`'s reference count (`aclInitRefCount`).
#[unsafe(no_mangle)]
pub extern "C" fn cann_double_init_refs() -> u64 {
    state::lock().init_refs
}

/// Sets the number of devices and the device memory limit in bytes.
#[unsafe(no_mangle)]
pub extern "C" fn cann_double_set_devices(count: u32, memory_limit: u64) {
    let mut s = state::lock();
    s.device_count = count;
    s.memory_limit = memory_limit as usize;
}

/// Makes the `(skip + 1)`-th next call of `function` return `status` (once).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_inject(function: *const c_char, status: i32, skip: u32) {
    // SAFETY: the test passes a NUL-terminated string.
    let function = unsafe { CStr::from_ptr(function) }.to_string_lossy().into_owned();
    state::lock().injections.push(state::Injection { function, status, skip });
}

/// Live handles of kind `what`: "tensors", "int_arrays", "executors", "allocations", "streams",
/// "contexts", "devices" (sets minus resets); -1 for an unknown kind.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_live(what: *const c_char) -> i64 {
    // SAFETY: the test passes a NUL-terminated string.
    let what = unsafe { CStr::from_ptr(what) }.to_string_lossy();
    state::lock().live(&what)
}

/// Calls made to `function` since the last reset ("*" = every function).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_calls(function: *const c_char) -> u64 {
    // SAFETY: the test passes a NUL-terminated string.
    let function = unsafe { CStr::from_ptr(function) }.to_string_lossy();
    state::lock().calls(&function)
}

/// The deterministic setting of the most recently executed operator (-1 if none ran).
#[unsafe(no_mangle)]
pub extern "C" fn cann_double_last_deterministic() -> i64 {
    state::lock().last_deterministic
}

/// Writes the violations, one per line, NUL-terminated, into `buf` of `len` bytes; returns the
/// length needed (without the NUL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cann_double_violations(buf: *mut c_char, len: usize) -> usize {
    let text = CString::new(state::lock().violations.join("\n")).unwrap_or_default();
    let bytes = text.as_bytes_with_nul();
    if !buf.is_null() && len > 0 {
        let n = bytes.len().min(len);
        // SAFETY: the test passes `len` writable bytes at `buf`.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n) };
        // SAFETY: as above; `len - 1` is in bounds.
        unsafe { *buf.add(len - 1) = 0 };
    }
    bytes.len() - 1
}

#[cfg(all(test, not(feature = "cann81")))]
mod tests {
    use super::platform::{Arch, arch, names};
    use super::*;

    /// The double's state is process-wide: its tests take turns.
    pub(crate) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A zeroed 4-D NCHW tensor of `dims` over fresh device memory.
    fn tensor_of(dims: [i64; 4], dtype: i32) -> *mut c_void {
        let numel: i64 = dims.iter().product();
        let mut ptr = core::ptr::null_mut();
        let bytes = (numel as usize) * state::itemsize(dtype);
        assert_eq!(unsafe { aclrtMalloc(&mut ptr, bytes, 0) }, 0);
        assert_eq!(aclrtMemset(ptr, bytes, 0, bytes), 0);
        let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
        let t = unsafe {
            aclCreateTensor(
                dims.as_ptr(),
                4,
                dtype,
                strides.as_ptr(),
                0,
                ACL_FORMAT_NCHW,
                [numel].as_ptr(),
                1,
                ptr,
            )
        };
        assert!(!t.is_null());
        t
    }

    pub(crate) fn open_device() -> *mut c_void {
        cann_double_reset();
        let _ = aclInit(core::ptr::null());
        assert_eq!(aclrtSetDevice(0), 0);
        let (mut ctx, mut stream) = (core::ptr::null_mut(), core::ptr::null_mut());
        assert_eq!(unsafe { aclrtCreateContext(&mut ctx, 0) }, 0);
        assert_eq!(unsafe { aclrtCreateStream(&mut stream) }, 0);
        stream
    }

    fn ints(v: &[i64]) -> *mut c_void {
        unsafe { aclCreateIntArray(v.as_ptr(), v.len() as u64) }
    }

    /// `aclrtMemsetAsync` is a task of its stream: it runs at the stream's synchronisation, in
    /// order; until then its memory is in use (a host copy or a free of it is a violation), and a
    /// stream of another context is refused.
    #[test]
    fn memset_async_runs_in_stream_order() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let stream = open_device();
        let mut ptr = core::ptr::null_mut();
        assert_eq!(unsafe { aclrtMalloc(&mut ptr, 8, 0) }, 0);
        assert_eq!(aclrtMemsetAsync(ptr, 8, 0, 8, stream), 0);
        let mut host = [0u8; 8];
        let copy =
            |host: &mut [u8; 8]| unsafe { aclrtMemcpy(host.as_mut_ptr().cast(), 8, ptr, 8, DEVICE_TO_HOST) };
        let violations = state::lock().violations.len();
        assert_eq!(copy(&mut host), 0);
        assert_eq!(host, [0xA5; 8], "not run before the synchronisation");
        assert_eq!(state::lock().violations.len(), violations + 1, "a host copy of memory in use is caught");
        assert_eq!(aclrtSynchronizeStream(stream), 0);
        assert_eq!(copy(&mut host), 0);
        assert_eq!(host, [0; 8], "run by the synchronisation");
        assert_eq!(state::lock().violations.len(), violations + 1);
        assert_eq!(state::lock().calls("aclrtMemcpy:DeviceToHost"), 2, "copies are counted by direction");
        // A stream of another context: `RT_ERROR_STREAM_CONTEXT`.
        let mut other = core::ptr::null_mut();
        assert_eq!(unsafe { aclrtCreateContext(&mut other, 0) }, 0);
        assert_ne!(aclrtMemsetAsync(ptr, 8, 0, 8, stream), 0);
        assert_eq!(aclrtFree(ptr), 0);
    }

    /// One test: the double's state is process-wide.
    #[test]
    fn executors_behave_as_nnopbase_owns_them() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let stream = open_device();
        // An adaptive backward, launched, then destroyed and launched again: both are violations.
        let (g, x, idx, gi) = (
            tensor_of([1, 1, 2, 2], ACL_FLOAT),
            tensor_of([1, 1, 4, 4], ACL_FLOAT),
            tensor_of([1, 1, 2, 2], ACL_INT64),
            tensor_of([1, 1, 4, 4], ACL_FLOAT),
        );
        let (mut ws, mut ex) = (0u64, core::ptr::null_mut());
        assert_eq!(aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(g, x, idx, gi, &mut ws, &mut ex), 0);
        let mut buf = core::ptr::null_mut();
        assert_eq!(unsafe { aclrtMalloc(&mut buf, ws as usize, 0) }, 0);
        assert_eq!(aclnnAdaptiveMaxPool2dBackward(buf, ws, ex, stream), 0);
        assert_eq!(aclrtSynchronizeStream(stream), 0);
        assert!(state::lock().violations.is_empty());
        assert_ne!(aclDestroyAclOpExecutor(ex), 0);
        assert!(state::lock().violations.iter().any(|v| v.contains("double free")));
        assert_ne!(aclnnAdaptiveMaxPool2dBackward(buf, ws, ex, stream), 0);
        assert!(state::lock().violations.iter().any(|v| v.contains("use after free")));
        assert_eq!(state::lock().live("executors"), 0);

        // A failed launch consumes the executor too (CommonOpExecutorRun deletes it on error).
        let mut ex = core::ptr::null_mut();
        assert_eq!(aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(g, x, idx, gi, &mut ws, &mut ex), 0);
        state::lock().injections.push(state::Injection {
            function: "aclnnAdaptiveMaxPool2dBackward".into(),
            status: 561_000,
            skip: 0,
        });
        assert_eq!(aclnnAdaptiveMaxPool2dBackward(buf, ws, ex, stream), 561_000);
        assert_eq!(state::lock().live("executors"), 0);
        assert!(state::lock().consumed.contains(&(ex as usize)));
        // Its kernels hold the buffers until the stream is synchronised.
        let before = state::lock().violations.len();
        assert_eq!(aclrtFree(buf), 0);
        assert_eq!(state::lock().violations.len(), before + 1, "a free under queued work is caught");
        assert_eq!(aclrtSynchronizeStream(stream), 0);

        // The mask operators cannot be made repeatable; the adaptive ones can.
        let (mx, mo, mm) = (
            tensor_of([1, 1, 4, 4], ACL_FLOAT),
            tensor_of([1, 1, 2, 2], ACL_FLOAT),
            tensor_of([1, 1, 4, 64], ACL_INT8),
        );
        let (k, st, pd, dl) = (ints(&[2, 2]), ints(&[2, 2]), ints(&[0, 0]), ints(&[1, 1]));
        let mut ex = core::ptr::null_mut();
        assert_eq!(
            aclnnMaxPool2dWithMaskGetWorkspaceSize(mx, k, st, pd, dl, false, mo, mm, &mut ws, &mut ex),
            0
        );
        assert_eq!(aclSetAclOpExecutorRepeatable(ex), ACLNN_ERR_INNER);
        assert_eq!(aclDestroyAclOpExecutor(ex), 0, "an unlaunched executor is the caller's to destroy");
        let mut ex = core::ptr::null_mut();
        assert_eq!(aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize(g, x, idx, gi, &mut ws, &mut ex), 0);
        assert_eq!(aclSetAclOpExecutorRepeatable(ex), 0);
        assert_eq!(aclDestroyAclOpExecutor(ex), 0);

        // The formats each operator documents: an ND tensor for the adaptive forward is refused.
        let dims = [1i64, 1, 4, 4];
        let strides = [16i64, 16, 4, 1];
        let mut p = core::ptr::null_mut();
        assert_eq!(unsafe { aclrtMalloc(&mut p, 64, 0) }, 0);
        let nd = unsafe {
            aclCreateTensor(
                dims.as_ptr(),
                4,
                ACL_FLOAT,
                strides.as_ptr(),
                0,
                ACL_FORMAT_ND,
                [16].as_ptr(),
                1,
                p,
            )
        };
        let (o, i) = (tensor_of([1, 1, 2, 2], ACL_FLOAT), tensor_of([1, 1, 2, 2], ACL_INT64));
        let size = ints(&[2, 2]);
        let mut ex = core::ptr::null_mut();
        assert_eq!(
            aclnnAdaptiveMaxPool2dGetWorkspaceSize(nd, size, o, i, &mut ws, &mut ex),
            ACLNN_ERR_PARAM_INVALID
        );
    }

    #[test]
    fn architectures_come_from_the_platform_configs() {
        assert_eq!(arch("Ascend910B1"), Arch::Dav2201);
        assert_eq!(arch("Ascend910B4-1"), Arch::Dav2201);
        assert_eq!(arch("Ascend910_9391"), Arch::Dav2201);
        assert_eq!(arch("Ascend910B"), Arch::Dav1001);
        assert_eq!(arch("Ascend910ProB"), Arch::Dav1001);
        assert_eq!(arch("Ascend310P3"), Arch::Dav2002);
        assert_eq!(arch("Ascend950PR_9599"), Arch::Dav3510);
        assert_eq!(arch("Ascend910_95"), Arch::Dav3510);
        assert_eq!(arch("Ascend310B1"), Arch::Other);
        assert_eq!(arch("Ascend910B9"), Arch::Other);
        assert!(names().count() >= 32);
    }
}
