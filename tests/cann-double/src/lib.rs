//! A test double of the CANN C ABI, for poolgrad's Ascend backend tests.
//!
//! One shared library exports the symbols of `libascendcl.so` (runtime), `libnnopbase.so`
//! (tensor and executor handles) and `libopapi.so` (the four pooling operators in two phases).
//! The test harness links it under those three names. "Device" memory is host memory owned by the
//! double; operators are queued on their stream by the second-phase call and executed by
//! `aclrtSynchronizeStream`, as on a real device, so a host copy taken before synchronising reads
//! stale bytes and is reported.
//!
//! Written from CANN's documented signatures, enum values, status codes and operator contracts
//! (poolgrad's `shared/docs/ascend-semantics.md`, sections A to C, which cite the CANN headers and
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
//! Control (for tests only): the `cann_double_*` functions at the end of this file set the SoC
//! name, inject a status into the n-th next call of any function, and report live handles, call
//! counts and violations.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
// The `cann81` variant leaves the adaptive backward unreachable.
#![cfg_attr(feature = "cann81", allow(dead_code))]

mod exec;
mod state;

use core::ffi::{c_char, c_void};
use std::ffi::{CStr, CString};

use state::{Job, MaskParams, TensorDesc, current_context, enter, fail, set_current_context};

type AclError = i32;

// acl_base.h
const ACL_SUCCESS: AclError = 0;
const ACL_ERROR_INVALID_PARAM: AclError = 100_000;
const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
const ACL_ERROR_INVALID_DEVICE: AclError = 200_002;
const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
// aclnn status codes (ops-nn docs/zh/context/aclnn_return_code.md)
const ACLNN_ERR_PARAM_NULLPTR: i32 = 161_001;
const ACLNN_ERR_PARAM_INVALID: i32 = 161_002;
const ACLNN_ERR_INNER_FIND_KERNEL_ERROR: i32 = 561_003;

// aclDataType
pub(crate) const ACL_FLOAT: i32 = 0;
pub(crate) const ACL_FLOAT16: i32 = 1;
pub(crate) const ACL_INT8: i32 = 2;
pub(crate) const ACL_INT32: i32 = 3;
pub(crate) const ACL_INT64: i32 = 9;
pub(crate) const ACL_BF16: i32 = 27;
const KNOWN_DTYPES: [i32; 20] = [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 27, 29, 30, 33, 5];
// aclFormat
const ACL_FORMAT_NCHW: i32 = 0;
const ACL_FORMAT_ND: i32 = 2;
const KNOWN_FORMATS: [i32; 15] = [-1, 0, 1, 2, 3, 4, 12, 16, 27, 29, 30, 32, 33, 35, 47];
// aclrtMemcpyKind
const HOST_TO_HOST: i32 = 0;
const HOST_TO_DEVICE: i32 = 1;
const DEVICE_TO_HOST: i32 = 2;
const DEVICE_TO_DEVICE: i32 = 3;

/// Which family of chips a SoC name belongs to (ascend-semantics.md A.0, A.4, B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// Atlas A2/A3 (Ascend910B*, Ascend910_93*).
    A2,
    /// Atlas training (Ascend910A, Ascend910ProB, ...).
    Training,
    /// Atlas inference (Ascend310P*).
    Inference310P,
    /// Ascend 950 (regbase).
    A950,
    Unknown,
}

pub(crate) fn family(soc: &str) -> Family {
    if soc.starts_with("Ascend910B") || soc.starts_with("Ascend910_93") {
        Family::A2
    } else if soc.starts_with("Ascend950") {
        Family::A950
    } else if soc.starts_with("Ascend910") {
        Family::Training
    } else if soc.starts_with("Ascend310P") {
        Family::Inference310P
    } else {
        Family::Unknown
    }
}

// ---------------------------------------------------------------------------------------------
// libascendcl: acl.h, acl_rt.h

#[unsafe(no_mangle)]
pub extern "C" fn aclInit(_config_path: *const c_char) -> AclError {
    if let Some(e) = enter("aclInit") {
        return e;
    }
    let mut s = state::lock();
    if s.initialized {
        return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: repeated initialisation");
    }
    s.initialized = true;
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclFinalize() -> AclError {
    if let Some(e) = enter("aclFinalize") {
        return e;
    }
    state::lock().initialized = false;
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
    let s = state::lock();
    if !s.initialized {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount before aclInit");
    }
    // SAFETY: checked non-null; the caller passes a valid `uint32_t*`.
    unsafe { *count = s.device_count };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtSetDevice") {
        return e;
    }
    let mut s = state::lock();
    if !s.initialized {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetDevice before aclInit");
    }
    if device_id < 0 || device_id as u32 >= s.device_count {
        return fail(ACL_ERROR_INVALID_DEVICE, &format!("aclrtSetDevice: no device {device_id}"));
    }
    s.device_refs += 1;
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtResetDevice") {
        return e;
    }
    let mut s = state::lock();
    if s.device_refs == 0 {
        s.violation(format!("aclrtResetDevice({device_id}) without a matching aclrtSetDevice"));
        return fail(ACL_ERROR_INVALID_DEVICE, "aclrtResetDevice: device not set");
    }
    if s.device_refs == 1 && !s.contexts.is_empty() {
        let n = s.contexts.len();
        s.violation(format!("last aclrtResetDevice with {n} context(s) not destroyed"));
    }
    s.device_refs -= 1;
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateContext(context: *mut *mut c_void, device_id: i32) -> AclError {
    if let Some(e) = enter("aclrtCreateContext") {
        return e;
    }
    if context.is_null() {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateContext: context is null");
    }
    let mut s = state::lock();
    if s.device_refs == 0 || device_id < 0 || device_id as u32 >= s.device_count {
        return fail(ACL_ERROR_INVALID_DEVICE, "aclrtCreateContext: device not set");
    }
    let id = s.new_handle();
    s.contexts.insert(id, 0);
    set_current_context(id);
    // SAFETY: checked non-null; the caller passes a valid `aclrtContext*`.
    unsafe { *context = id as *mut c_void };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyContext(context: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtDestroyContext") {
        return e;
    }
    let mut s = state::lock();
    let id = context as usize;
    if s.contexts.remove(&id).is_none() {
        s.violation(format!("aclrtDestroyContext of unknown context {id:#x}"));
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtDestroyContext: unknown context");
    }
    if s.streams.values().any(|st| st.context == id) {
        s.violation("aclrtDestroyContext before its streams were destroyed".into());
    }
    if current_context() == id {
        set_current_context(0);
    }
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetCurrentContext(context: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtSetCurrentContext") {
        return e;
    }
    let s = state::lock();
    if !s.contexts.contains_key(&(context as usize)) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetCurrentContext: unknown context");
    }
    set_current_context(context as usize);
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCtxSetSysParamOpt(opt: i32, value: i64) -> AclError {
    if let Some(e) = enter("aclrtCtxSetSysParamOpt") {
        return e;
    }
    let mut s = state::lock();
    let ctx = current_context();
    if opt != 0 || !(0..=1).contains(&value) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCtxSetSysParamOpt: bad option or value");
    }
    match s.contexts.get_mut(&ctx) {
        Some(det) => {
            *det = value;
            ACL_SUCCESS
        }
        None => {
            s.violation("aclrtCtxSetSysParamOpt without a current context on this thread".into());
            fail(ACL_ERROR_INVALID_PARAM, "aclrtCtxSetSysParamOpt: no current context")
        }
    }
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
    let ctx = current_context();
    if !s.contexts.contains_key(&ctx) {
        s.violation("aclrtCreateStream without a current context on this thread".into());
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream: no current context");
    }
    let id = s.new_handle();
    s.streams.insert(id, state::Stream { context: ctx, queue: Vec::new() });
    // SAFETY: checked non-null; the caller passes a valid `aclrtStream*`.
    unsafe { *stream = id as *mut c_void };
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> AclError {
    if let Some(e) = enter("aclrtDestroyStream") {
        return e;
    }
    let mut s = state::lock();
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
        // A failed synchronisation aborts the stream's tasks: nothing is left running.
        let mut s = state::lock();
        if let Some(st) = s.streams.get_mut(&(stream as usize)) {
            for queued in std::mem::take(&mut st.queue) {
                for t in queued.job.tensors() {
                    s.set_pending(t.addr, false);
                }
            }
        }
        return e;
    }
    let mut s = state::lock();
    let id = stream as usize;
    let Some(st) = s.streams.get_mut(&id) else {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtSynchronizeStream: unknown stream");
    };
    let queue = std::mem::take(&mut st.queue);
    for queued in queue {
        exec::run(&mut s, &queued);
        for t in queued.job.tensors() {
            s.set_pending(t.addr, false);
        }
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
    if !s.contexts.contains_key(&current_context()) {
        s.violation("aclrtMalloc without a current context on this thread".into());
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: no current context");
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
    if !s.contexts.contains_key(&current_context()) {
        s.violation("aclrtMemcpy without a current context on this thread".into());
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: no current context");
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

#[unsafe(no_mangle)]
pub extern "C" fn aclSetAclOpExecutorRepeatable(executor: *mut c_void) -> i32 {
    if let Some(e) = enter("aclSetAclOpExecutorRepeatable") {
        return e;
    }
    let mut s = state::lock();
    match s.executors.get_mut(&(executor as usize)) {
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

#[unsafe(no_mangle)]
pub extern "C" fn aclDestroyAclOpExecutor(executor: *mut c_void) -> i32 {
    if let Some(e) = enter("aclDestroyAclOpExecutor") {
        return e;
    }
    let mut s = state::lock();
    match s.executors.remove(&(executor as usize)) {
        // Repeatable executors, and executors that never ran, are the caller's to destroy.
        Some(_) => 0,
        None => {
            s.violation("aclDestroyAclOpExecutor of an unknown or freed executor".into());
            fail(ACLNN_ERR_PARAM_NULLPTR, "aclDestroyAclOpExecutor: unknown executor")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// libopapi: the four operators

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
        s.executors.insert(id, state::Executor { job, workspace, repeatable: false });
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
    const NAME: &str = "aclnnMaxPool2dWithMaskGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::MaskForward {
                input: tensor(&s, "self", self_)?,
                params: mask_params(&s, kernel_size, stride, padding, dilation, ceil_mode)?,
                out: tensor(&s, "out", out)?,
                mask: tensor(&s, "indices", indices)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
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
    const NAME: &str = "aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize";
    if let Some(e) = enter(NAME) {
        return e;
    }
    let job = {
        let s = state::lock();
        (|| {
            Ok(Job::MaskBackward {
                grad_output: tensor(&s, "gradOutput", grad_output)?,
                input: tensor(&s, "self", self_)?,
                mask: tensor(&s, "indices", indices)?,
                params: mask_params(&s, kernel_size, stride, padding, dilation, ceil_mode)?,
                grad_input: tensor(&s, "gradInput", grad_input)?,
            })
        })()
    };
    Phase1Out { workspace_size, executor }.finish(NAME, job)
}

/// The second phase of every operator: queue the executor's job on `stream`.
fn launch(
    name: &str,
    kind: &str,
    workspace: *mut c_void,
    size: u64,
    executor: *mut c_void,
    stream: *mut c_void,
) -> i32 {
    if let Some(e) = enter(name) {
        return e;
    }
    let mut s = state::lock();
    let id = executor as usize;
    let Some((ex_kind, ex_workspace)) = s.executors.get(&id).map(|ex| (ex.job.kind(), ex.workspace)) else {
        s.violation(format!("{name}: executor {id:#x} unknown, already run or destroyed"));
        return fail(ACLNN_ERR_PARAM_NULLPTR, &format!("{name}: unknown executor"));
    };
    if ex_kind != kind {
        s.violation(format!("{name} called with an executor of {ex_kind}"));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: executor of another operator"));
    }
    if size < ex_workspace {
        let need = ex_workspace;
        s.violation(format!("{name}: workspaceSize {size} is less than the {need} bytes phase 1 reported"));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: workspace too small"));
    }
    if ex_workspace > 0 && s.device_range(workspace as usize, ex_workspace as usize).is_none() {
        s.violation(format!("{name}: workspace is not {ex_workspace} bytes of device memory"));
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: bad workspace"));
    }
    if !s.streams.contains_key(&(stream as usize)) {
        return fail(ACLNN_ERR_PARAM_INVALID, &format!("{name}: unknown stream"));
    }
    let ex =
        if s.executors[&id].repeatable { s.executors[&id].clone() } else { s.executors.remove(&id).unwrap() };
    // Every buffer of the operator is in use until the stream is synchronised.
    for t in ex.job.tensors() {
        s.set_pending(t.addr, true);
    }
    let deterministic = s.contexts.get(&s.streams[&(stream as usize)].context).copied().unwrap_or(0);
    let queued = state::Queued { job: ex.job, workspace: (workspace as usize, ex.workspace), deterministic };
    s.streams.get_mut(&(stream as usize)).unwrap().queue.push(queued);
    0
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(family("Ascend910B1"), Family::A2);
        assert_eq!(family("Ascend910_9391"), Family::A2);
        assert_eq!(family("Ascend910ProB"), Family::Training);
        assert_eq!(family("Ascend310P3"), Family::Inference310P);
        assert_eq!(family("Ascend950PR"), Family::A950);
        assert_eq!(family("Ascend310B1"), Family::Unknown);
        let _ = (
            ACL_DOUBLE,
            ACL_FORMAT_NCHW,
            ACL_FORMAT_ND,
            KNOWN_DTYPES,
            KNOWN_FORMATS,
            ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
        );
    }
}
