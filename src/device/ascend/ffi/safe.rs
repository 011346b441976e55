//! The owning layer: RAII handles over CANN objects ([`Session`] = device reference + stream,
//! [`StreamGuard`], [`DeviceBuffer`], [`AclTensor`], [`IntArray`]), each releasing what it owns in
//! `Drop` without panicking, in CANN's teardown order (tensors and arrays, buffers, then stream
//! and device), and the operators' two phases ([`StreamGuard::execute`]).

#![allow(unsafe_code)]

use core::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::result::Runtime;
use super::sys::{
    ACL_SUCCESS, AclIntArrayC, AclTensorC, Api, Exec, FORMAT_NCDHW, FORMAT_NCHW, FORMAT_ND, IntArr, Launch,
    MALLOC_HUGE_FIRST, MEM_HBM, MEMCPY_DEVICE_TO_HOST, MEMCPY_HOST_TO_DEVICE, OPT_DETERMINISTIC,
};
use crate::device::ascend::soc::DeviceOp;
use crate::error::{AscendError, Error, Result};

/// One device in use: a reference to its primary context (`aclrtSetDevice`) and a stream there.
/// Every method binds the primary context on the calling thread for its CANN calls and gives the
/// thread back its own binding afterwards ([`ThreadContext`]), so a session can be used from any
/// thread, including threads that another CANN user of the process has bound.
pub(crate) struct Session {
    rt: Arc<Runtime>,
    device_id: i32,
    /// The device's primary context: retained by `aclrtSetDevice` in [`Session::open`], released
    /// by `aclrtResetDevice` on drop; never created or destroyed here.
    context: *mut c_void,
    stream: *mut c_void,
    /// The device memory available to applications, in bytes, as `aclrtGetMemInfo` reported it
    /// when the session opened; `None` where the runtime does not export it or does not answer.
    memory_total: Option<usize>,
    /// Serialises launch-synchronise-copy sequences on the stream.
    stream_lock: Mutex<()>,
    /// Launches on the stream so far (each counted before it is made).
    queued: AtomicU64,
    /// The launches a successful wait has seen finish: while it is below `queued`, a kernel may
    /// still run (queued without a wait, or a wait failed), so no memory is freed and nothing is
    /// copied to the host until a wait succeeds ([`Session::settle`]).
    finished: AtomicU64,
}

// SAFETY: the context and stream handles are plain identifiers that CANN lets any thread use once
// the context is current on it (`aclrtSetCurrentContext`), which every method does first; stream
// work is serialised by `stream_lock`.
unsafe impl Send for Session {}
// SAFETY: as for `Send`: no method touches the handles without binding the context, and the only
// mutable state (the stream's queue) is guarded by `stream_lock`.
unsafe impl Sync for Session {}

/// The calling thread's CANN context while poolgrad works on it, given back on drop.
///
/// CANN binds each thread to one context at a time (hicann/runtime `api_impl.cc`:
/// `ApiImpl::ContextSetCurrent` sets it and drops the binding to a primary context that
/// `aclrtSetDevice` made), and launches only on streams of that context (`ApiImpl::KernelLaunch`,
/// `RT_ERROR_STREAM_CONTEXT`). A library that switched a thread and left it so would break every
/// later launch of another library on that thread: torch_npu binds each thread once and never
/// again (`c10_npu::SetDevice` caches the device per thread). So poolgrad records the context
/// current on entry (`aclrtGetCurrentContext`), switches only if it must, and switches back when
/// done, on every path. A thread that had no context keeps the one poolgrad bound: ACL has no
/// call that unbinds a thread (`aclrtSetCurrentContext` refuses NULL), and it is the device's
/// primary context, which `aclrtSetDevice` itself would leave.
struct ThreadContext<'r> {
    rt: &'r Runtime,
    /// The context current on entry, `None` if the thread had none.
    saved: Option<*mut c_void>,
    /// The context current now, as far as this guard has changed it.
    current: Option<*mut c_void>,
}

impl<'r> ThreadContext<'r> {
    /// Records the calling thread's current context.
    fn save(rt: &'r Runtime) -> Self {
        let saved = rt.current_context().ok();
        ThreadContext { rt, saved, current: saved }
    }

    /// Makes `context` current on the calling thread (no call if it is already).
    fn enter(&mut self, context: *mut c_void) -> Result<()> {
        if self.current != Some(context) {
            // SAFETY: `context` is live (the caller's session holds the device).
            let code = unsafe { (self.rt.api.aclrt_set_current_context)(context) };
            self.rt.check("aclrtSetCurrentContext", code)?;
            self.current = Some(context);
        }
        Ok(())
    }
}

impl Drop for ThreadContext<'_> {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.filter(|&saved| self.current != Some(saved)) {
            // A context its owner destroyed meanwhile cannot be made current again, and a drop
            // has no one to tell: the thread is then left as its owner's teardown would leave it.
            // SAFETY: `saved` was current on this thread on entry; CANN checks that it is still
            // valid and refuses it otherwise.
            let _ = unsafe { (self.rt.api.aclrt_set_current_context)(saved) };
        }
    }
}

/// The total of the current device's memory that applications can use (`aclrtGetMemInfo` for
/// `ACL_HBM_MEM`, which CANN answers for DDR on SoCs without HBM), or `None`: the symbol is
/// missing, the call fails, or it reports 0 (CANN's answer for a memory kind the hardware lacks).
/// Only a pre-check rests on it (`launch.rs`, `Staging`), so a missing answer costs nothing but
/// that: allocations are still checked by `aclrtMalloc`.
fn memory_total(rt: &Runtime) -> Option<usize> {
    let get = rt.api.aclrt_get_mem_info?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: `free` and `total` are valid `size_t*` for the call; the device was set by the caller.
    let code = unsafe { get(MEM_HBM, &mut free, &mut total) };
    (code == ACL_SUCCESS && total > 0).then_some(total)
}

impl Session {
    /// Sets device `device_id` (retaining its primary context) and creates a stream there; the
    /// calling thread gets its own context back.
    pub(crate) fn open(rt: Arc<Runtime>, device_id: i32) -> Result<Arc<Session>> {
        let (context, stream, memory_total) = {
            let mut thread = ThreadContext::save(&rt);
            // SAFETY: plain integer argument.
            rt.check("aclrtSetDevice", unsafe { (rt.api.aclrt_set_device)(device_id) })?;
            // `aclrtSetDevice` bound the thread to the device's primary context, whatever it had.
            thread.current = None;
            let opened = rt.current_context().and_then(|context| {
                thread.current = Some(context);
                let mut stream = core::ptr::null_mut();
                // SAFETY: the primary context is current on this thread; `stream` is a valid out-pointer.
                let code = unsafe { (rt.api.aclrt_create_stream)(&mut stream) };
                rt.check("aclrtCreateStream", code)?;
                Ok((context, stream, memory_total(&rt)))
            });
            if opened.is_err() {
                // SAFETY: undoes the successful `aclrtSetDevice` above.
                unsafe { (rt.api.aclrt_reset_device)(device_id) };
            }
            opened?
        };
        let stream_lock = Mutex::new(());
        let (queued, finished) = (AtomicU64::new(0), AtomicU64::new(0));
        Ok(Arc::new(Session { rt, device_id, context, stream, memory_total, stream_lock, queued, finished }))
    }

    /// The device memory available to applications (bytes), if CANN reported it at open.
    pub(crate) fn memory_total(&self) -> Option<usize> {
        self.memory_total
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Makes this session's context current on the calling thread until the guard is dropped.
    fn bind(&self) -> Result<ThreadContext<'_>> {
        let mut thread = ThreadContext::save(&self.rt);
        thread.enter(self.context)?;
        Ok(thread)
    }

    /// Whether the stream has no work that might still run: true when a successful wait has seen
    /// every launch finish; otherwise (work queued without a wait, [`Session::enqueue`], or a
    /// failed wait, [`StreamGuard::execute`]) the stream is waited for and the answer is whether
    /// that wait succeeded. Memory is freed, and the stream destroyed, only when it is true: a
    /// kernel still running would read or write memory returned to the allocator.
    fn settle(&self) -> bool {
        if self.is_settled() {
            return true;
        }
        // Not under `stream_lock`: a buffer may be dropped while this thread holds the stream,
        // and waiting for a stream is safe from any thread (it also waits for others' work).
        let Ok(_bound) = self.bind() else { return false };
        self.wait() == ACL_SUCCESS
    }

    /// Waits for the stream (its context current) and records the outcome: a failed wait (for
    /// example `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`) does not stop the stream's tasks
    /// (hicann/runtime `api_impl.cc`, `ApiImpl::StreamSynchronize`, l.1732-1741: a timeout
    /// reports the task still running), so it leaves the session unsettled until a wait succeeds.
    /// A successful wait covers the launches counted before it began; one another thread makes
    /// meanwhile stays unsettled.
    fn wait(&self) -> i32 {
        let upto = self.queued.load(Ordering::Acquire);
        // SAFETY: the stream is live (destroyed only by `Session::drop`).
        let code = unsafe { (self.rt.api.aclrt_synchronize_stream)(self.stream) };
        if code == ACL_SUCCESS {
            self.finished.fetch_max(upto, Ordering::AcqRel);
        }
        code
    }

    /// Whether a successful wait has seen every launch so far finish.
    fn is_settled(&self) -> bool {
        self.finished.load(Ordering::Acquire) >= self.queued.load(Ordering::Acquire)
    }

    /// Counts a launch about to be made on the session's stream.
    fn count_launch(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// Sets `ACL_OPT_DETERMINISTIC` on this session's context (`aclrtCtxSetSysParamOpt`).
    pub(crate) fn set_context_deterministic(&self, on: bool) -> Result<()> {
        let _bound = self.bind()?;
        // SAFETY: integer arguments; the context is current.
        let code = unsafe { (self.rt.api.aclrt_ctx_set_sys_param_opt)(OPT_DETERMINISTIC, on as i64) };
        self.rt.check("aclrtCtxSetSysParamOpt", code)
    }

    /// Sets `ACL_OPT_DETERMINISTIC` for the process (`aclrtSetSysParamOpt`, which current
    /// nnopbase reads: hicann/opbase `GetDeterministicLevelFromRt`; torch_npu sets both levels,
    /// `OpParamMaker.cpp`). Where the runtime does not export it: an error if `required`, else
    /// nothing (older runtimes read the context's level only).
    pub(crate) fn set_process_deterministic(&self, on: bool, required: bool) -> Result<()> {
        let set = match self.op(self.rt.api.aclrt_set_sys_param_opt, "aclrtSetSysParamOpt") {
            Ok(set) => set,
            Err(e) => return if required { Err(e) } else { Ok(()) },
        };
        // SAFETY: integer arguments.
        let code = unsafe { set(OPT_DETERMINISTIC, on as i64) };
        self.rt.check("aclrtSetSysParamOpt", code)
    }

    /// `ACL_OPT_DETERMINISTIC` as CANN reports it now: `(context, process)`, each `None` where the
    /// runtime does not export the getter or reports the option unset.
    pub(crate) fn deterministic_levels(&self) -> Result<(Option<i64>, Option<i64>)> {
        let _bound = self.bind()?;
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
        let _bound = self.bind()?;
        let mut ptr = core::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; size and policy are plain values.
        let code = unsafe { (self.rt.api.aclrt_malloc)(&mut ptr, bytes, MALLOC_HUGE_FIRST) };
        self.rt.check("aclrtMalloc", code)?;
        Ok(DeviceBuffer { session: Arc::clone(self), ptr, len: bytes })
    }

    /// Locks the stream for one launch-synchronise-copy sequence.
    pub(crate) fn stream(&self) -> Result<StreamGuard<'_>> {
        let guard = self.stream_lock.lock().unwrap_or_else(|e| e.into_inner());
        let bound = self.bind()?;
        Ok(StreamGuard { session: self, pending: false.into(), _bound: bound, _guard: guard })
    }

    /// Creates a contiguous tensor of `dims` over `buffer` (or over no memory when `None`, for an
    /// empty tensor): NCHW when 4-D, NCDHW when 5-D, ND otherwise.
    pub(crate) fn tensor(
        self: &Arc<Self>,
        dims: &[usize],
        dtype: i32,
        buffer: Option<&DeviceBuffer>,
    ) -> Result<AclTensor> {
        self.tensor_at(dims, dtype, buffer.map_or(DeviceAddr::NULL, DeviceBuffer::addr))
    }

    /// Creates a contiguous tensor of `dims` over the device memory at `data` (null for an empty
    /// tensor): NCHW when 4-D, NCDHW when 5-D, ND otherwise.
    pub(crate) fn tensor_at(
        self: &Arc<Self>,
        dims: &[usize],
        dtype: i32,
        data: DeviceAddr,
    ) -> Result<AclTensor> {
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1].max(1);
        }
        let storage = [dims.iter().product::<i64>()];
        let data = data.0 as *mut c_void;
        // SAFETY: the three arrays live across the call and have the lengths passed; CANN copies
        // them. `data` is device memory of at least `storage` elements, or null for no elements.
        let ptr = unsafe {
            (self.rt.api.acl_create_tensor)(
                dims.as_ptr(),
                dims.len() as u64,
                dtype,
                strides.as_ptr(),
                0,
                match dims.len() {
                    4 => FORMAT_NCHW,
                    5 => FORMAT_NCDHW,
                    _ => FORMAT_ND,
                },
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

    fn op<T>(&self, op: Option<T>, symbol: &'static str) -> Result<T> {
        op.ok_or_else(|| {
            Error::Ascend(AscendError::Unavailable {
                reason: format!("`{symbol}` is not exported by the CANN libraries (it needs a newer CANN)"),
                tried: vec![self.rt.origin().to_string()],
            })
        })
    }

    /// Refuses `kind` unless the libraries export both of its phases (they are resolved together:
    /// an older CANN lacks both).
    pub(crate) fn exports(&self, kind: DeviceOp) -> Result<()> {
        self.op(self.rt.api.launch(kind), kind.workspace_symbol()).map(|_| ())
    }

    /// Phase 1 of `call`: CANN's checks, the workspace size and the executor (non-null on
    /// success; a failed phase 1 leaves none, as ops-nn builds it in a `UniqueExecutor` that
    /// frees it on every early return), with the operator's phase-2 function, resolved with it
    /// (the two are exported together), so that no executor is made that could not be launched.
    fn phase_one(&self, call: &Call<'_>) -> Result<(Exec, u64, Launch)> {
        let kind = call.op();
        let function = kind.workspace_symbol();
        let api = &self.rt.api;
        let (mut size, mut exec): (u64, Exec) = (0, core::ptr::null_mut());
        let (s, e) = (&mut size as *mut u64, &mut exec as *mut Exec);
        let (code, launch) = match *call {
            Call::AdaptiveForward { op, input, output_size, out, indices } => {
                let (ws, launch) = self.op(api.adaptive_forward(op), function)?;
                // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                (unsafe { ws(input.ptr, output_size.ptr, out.ptr, indices.ptr, s, e) }, launch)
            }
            Call::AdaptiveBackward { op, grad_output, input, indices, grad_input } => {
                let (ws, launch) = self.op(api.adaptive_backward(op), function)?;
                // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                (unsafe { ws(grad_output.ptr, input.ptr, indices.ptr, grad_input.ptr, s, e) }, launch)
            }
            Call::PoolForward { op, input, params, out, argmax } => {
                let (ws, launch) = self.op(api.pool_forward(op), function)?;
                let [k, st, p, d] = params.arrays();
                // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                (unsafe { ws(input.ptr, k, st, p, d, params.ceil_mode, out.ptr, argmax.ptr, s, e) }, launch)
            }
            Call::PoolBackward { op, grad_output, input, argmax, params, grad_input } => {
                let (ws, launch) = self.op(api.pool_backward(op), function)?;
                let [k, st, p, d] = params.arrays();
                // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                let code = unsafe {
                    ws(
                        grad_output.ptr,
                        input.ptr,
                        argmax.ptr,
                        k,
                        st,
                        p,
                        d,
                        params.ceil_mode,
                        grad_input.ptr,
                        s,
                        e,
                    )
                };
                (code, launch)
            }
            // The 2-D operators take no stride and padding, the 3-D ones do (`Call::op`'s symbol
            // follows from which).
            Call::Unpool { input, indices, output_size, stride_padding, out, .. } => match stride_padding {
                None => {
                    let (ws, launch) = self.op(api.unpool2d, function)?;
                    // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                    (unsafe { ws(input.ptr, indices.ptr, output_size.ptr, out.ptr, s, e) }, launch)
                }
                Some([stride, padding]) => {
                    let (ws, launch) = self.op(api.unpool3d, function)?;
                    let (st, p) = (stride.ptr.cast_const(), padding.ptr.cast_const());
                    // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                    (unsafe { ws(input.ptr, indices.ptr, output_size.ptr, st, p, out.ptr, s, e) }, launch)
                }
            },
            Call::UnpoolBackward {
                grad_output, input, indices, output_size, stride_padding, out, ..
            } => {
                let (go, x, idx, size) = (grad_output.ptr, input.ptr, indices.ptr, output_size.ptr);
                match stride_padding {
                    None => {
                        let (ws, launch) = self.op(api.unpool2d_backward, function)?;
                        // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                        (unsafe { ws(go, x, idx, size, out.ptr, s, e) }, launch)
                    }
                    Some([stride, padding]) => {
                        let (ws, launch) = self.op(api.unpool3d_backward, function)?;
                        let (st, p) = (stride.ptr.cast_const(), padding.ptr.cast_const());
                        // SAFETY: live handles made by this session, as the signature takes; `s`, `e` valid out-pointers.
                        (unsafe { ws(go, x, idx, size, st, p, out.ptr, s, e) }, launch)
                    }
                }
            }
        };
        self.rt.check(function, code)?;
        if exec.is_null() {
            return Err(self.rt.null_error(function));
        }
        Ok((exec, size, launch))
    }
}

/// One operator call as its phase 1 takes it: the operator (one of the variant's family, which
/// share a signature) and the descriptors and parameters of its arguments.
#[derive(Clone, Copy)]
pub(crate) enum Call<'t> {
    /// `aclnnAdaptiveMaxPool2d` or `aclnnAdaptiveMaxPool3d`.
    AdaptiveForward {
        op: DeviceOp,
        input: &'t AclTensor,
        output_size: &'t IntArray,
        out: &'t AclTensor,
        indices: &'t AclTensor,
    },
    /// `aclnnAdaptiveMaxPool2dBackward` or `aclnnAdaptiveMaxPool3dBackward`.
    AdaptiveBackward {
        op: DeviceOp,
        grad_output: &'t AclTensor,
        input: &'t AclTensor,
        indices: &'t AclTensor,
        grad_input: &'t AclTensor,
    },
    /// `aclnnMaxPool2dWithIndices`, `aclnnMaxPool2dWithMask` or `aclnnMaxPool3dWithArgmax`.
    PoolForward {
        op: DeviceOp,
        input: &'t AclTensor,
        params: &'t PoolParams,
        out: &'t AclTensor,
        argmax: &'t AclTensor,
    },
    /// `aclnnMaxPool2dWithIndicesBackward`, `aclnnMaxPool2dWithMaskBackward` or
    /// `aclnnMaxPool3dWithArgmaxBackward`.
    PoolBackward {
        op: DeviceOp,
        grad_output: &'t AclTensor,
        input: &'t AclTensor,
        argmax: &'t AclTensor,
        params: &'t PoolParams,
        grad_input: &'t AclTensor,
    },
    /// `aclnnMaxUnpool2d`, or `aclnnMaxUnpool3d` with its `[stride, padding]`.
    Unpool {
        op: DeviceOp,
        input: &'t AclTensor,
        indices: &'t AclTensor,
        output_size: &'t IntArray,
        stride_padding: Option<[&'t IntArray; 2]>,
        out: &'t AclTensor,
    },
    /// `aclnnMaxUnpool2dBackward`, or `aclnnMaxUnpool3dBackward` with its `[stride, padding]`.
    UnpoolBackward {
        op: DeviceOp,
        grad_output: &'t AclTensor,
        input: &'t AclTensor,
        indices: &'t AclTensor,
        output_size: &'t IntArray,
        stride_padding: Option<[&'t IntArray; 2]>,
        out: &'t AclTensor,
    },
}

impl Call<'_> {
    /// The operator called.
    pub(crate) fn op(&self) -> DeviceOp {
        match *self {
            Call::AdaptiveForward { op, .. }
            | Call::AdaptiveBackward { op, .. }
            | Call::PoolForward { op, .. }
            | Call::PoolBackward { op, .. }
            | Call::Unpool { op, .. }
            | Call::UnpoolBackward { op, .. } => op,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A stream that may still run a kernel (a wait failed and no later one succeeded) is
        // left as it is, with the device reference that keeps its memory: tearing it down could
        // free what the kernel uses. CANN reclaims both when the process exits.
        if !self.settle() {
            return;
        }
        // Teardown in CANN's order: the stream (in its context, which `aclrtDestroyStream`
        // requires), then the device reference. The primary context is the device's, not ours:
        // it goes with the last reference, which may be another library's. Failures cannot be
        // reported from `drop`; the handles are gone either way.
        {
            let _bound = self.bind();
            // SAFETY: the stream is live and owned by this session; nothing uses it after drop.
            unsafe { (self.rt.api.aclrt_destroy_stream)(self.stream) };
        }
        // SAFETY: releases the reference `aclrtSetDevice` took in `open`.
        unsafe { (self.rt.api.aclrt_reset_device)(self.device_id) };
    }
}

/// Exclusive use of a session's stream, with its context current. Dropped with work possibly
/// queued (a launch that failed part-way, a failed copy after a launch), it synchronises the
/// stream first, so that no buffer the work uses is freed under it.
pub(crate) struct StreamGuard<'s> {
    session: &'s Session,
    /// Whether work may be queued that no synchronisation has waited for.
    pending: core::cell::Cell<bool>,
    /// The session's context, current while the guard lives (after the synchronisation in `Drop`).
    _bound: ThreadContext<'s>,
    _guard: MutexGuard<'s, ()>,
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        if self.pending.get() {
            // The error that brought us here is already on its way to the caller; this wait only
            // keeps the buffers alive until the device is done with them (or, if it fails too,
            // marks the session unsettled, so that they are not freed at all).
            let _ = self.synchronize();
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

    /// Runs `call`: phase 1, then at once phase 2 on this stream with the workspace that
    /// `workspace` gives for the size phase 1 asked, then waits for the stream.
    ///
    /// The two phases run back to back on the calling thread because that is the only life CANN
    /// documents for an executor that is not repeatable: phase 1 creates it and phase 2 releases
    /// it (hicann/opbase `docs/zh/api/nnopbase/aclnn/aclDestroyAclOpExecutor.md`; that function is
    /// documented for repeatable executors only). So no executor outlives this call, crosses a
    /// thread or waits in CANN's per-thread cache. If `workspace` fails between the phases, the
    /// executor is left to CANN, for which it documents no release (torch_npu leaves it the same
    /// way when its workspace allocation throws: Ascend/op-plugin `op_api_common.h`,
    /// `EXEC_NPU_CMD`).
    pub(crate) fn execute<'w>(
        &self,
        call: Call<'_>,
        workspace: impl FnOnce(u64) -> Result<Option<&'w DeviceBuffer>>,
    ) -> Result<()> {
        let name = call.op().symbol();
        let (exec, size, launch) = self.session.phase_one(&call)?;
        let ws = workspace(size)?.map_or(core::ptr::null_mut(), |w| w.ptr);
        self.pending.set(true);
        self.session.count_launch();
        // SAFETY: `exec` is the live executor phase 1 just made for this operator, handed over to
        // CANN, which deletes it when the call returns; `ws` is device memory of at least `size`
        // bytes (the caller's contract for `workspace`) or null when `size` is 0; the stream is live.
        let code = unsafe { launch(ws, size, exec, self.session.stream) };
        self.rt().check(name, code)?;
        self.synchronize()
    }

    /// Waits for the stream ([`Session::wait`]: a failed wait leaves the session unsettled, and
    /// no memory is freed until a later one succeeds).
    fn synchronize(&self) -> Result<()> {
        let code = self.session.wait();
        self.pending.set(false);
        self.rt().check("aclrtSynchronizeStream", code)
    }
}

/// A device address: never dereferenced on the host, so it is a plain number here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceAddr(pub(crate) usize);

impl DeviceAddr {
    /// No memory (for a tensor of no elements).
    pub(crate) const NULL: DeviceAddr = DeviceAddr(0);
}

/// A stream that someone else created and owns (an `aclrtStream`), borrowed by an
/// [`AscendStream`](crate::device::ascend::AscendStream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawStream(pub(crate) usize);

/// Where an operator is queued: the session's own stream, or a caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// The session's stream.
    Own,
    /// A stream the caller owns, in the context current on the calling thread (or, if the
    /// thread has none, the device's primary context).
    Foreign(RawStream),
}

impl Session {
    /// Queues `call` on `queue` without waiting for it: bytes `zero` set to zero first
    /// (`aclrtMemsetAsync`, on the same stream), then phase 1 and at once phase 2, with the
    /// workspace `workspace` gives for the size phase 1 asked ([`StreamGuard::execute`] says why
    /// the phases run together). On the session's stream the launch is counted first (the session is unsettled):
    /// from then on no buffer of the session is freed and no result copied to the host before a
    /// wait for the stream succeeds ([`Session::settle`]). On a caller's stream nothing waits: the
    /// caller orders its own frees and reads after its own synchronisation (the contract of
    /// [`AscendStream::from_raw`](crate::device::ascend::AscendStream::from_raw)).
    pub(crate) fn enqueue<'w>(
        &self,
        queue: Queue,
        zero: &[(DeviceAddr, usize)],
        call: Call<'_>,
        workspace: impl FnOnce(u64) -> Result<Option<&'w DeviceBuffer>>,
    ) -> Result<()> {
        let (_guard, _bound, stream) = match queue {
            Queue::Own => {
                let guard = self.stream_lock.lock().unwrap_or_else(|e| e.into_inner());
                (Some(guard), self.bind()?, self.stream)
            }
            Queue::Foreign(RawStream(stream)) => {
                let mut thread = ThreadContext::save(&self.rt);
                if thread.saved.is_none() {
                    thread.enter(self.context)?;
                }
                (None, thread, stream as *mut c_void)
            }
        };
        if matches!(queue, Queue::Own) {
            self.count_launch();
        }
        for &(DeviceAddr(addr), len) in zero {
            // SAFETY: `addr` is device memory of at least `len` bytes (the caller's staging or
            // its tensor's checked extent); `stream` is live (ours, or the caller's contract).
            let code = unsafe { (self.rt.api.aclrt_memset_async)(addr as *mut c_void, len, 0, len, stream) };
            self.rt.check("aclrtMemsetAsync", code)?;
        }
        let name = call.op().symbol();
        let (exec, size, launch) = self.phase_one(&call)?;
        let ws = workspace(size)?.map_or(core::ptr::null_mut(), |w| w.ptr);
        // SAFETY: as in `StreamGuard::execute`: `exec` is the live executor phase 1 just made,
        // handed over to CANN; `ws` is device memory of at least `size` bytes or null when `size`
        // is 0; `stream` is live (ours, or the caller's contract).
        let code = unsafe { launch(ws, size, exec, stream) };
        self.rt.check(name, code)
    }

    /// Waits for a caller's stream (`aclrtSynchronizeStream`), in the context the calling thread
    /// has, or the device's primary context if it has none (as [`Session::enqueue`] launches).
    pub(crate) fn synchronize_foreign(&self, RawStream(stream): RawStream) -> Result<()> {
        let mut thread = ThreadContext::save(&self.rt);
        if thread.saved.is_none() {
            thread.enter(self.context)?;
        }
        // SAFETY: the stream is live: the contract of `AscendStream::from_raw`.
        let code = unsafe { (self.rt.api.aclrt_synchronize_stream)(stream as *mut c_void) };
        self.rt.check("aclrtSynchronizeStream", code)
    }

    /// Waits for the session's stream if work may be queued on it ([`Session::enqueue`]).
    pub(crate) fn finish(&self) -> Result<()> {
        if self.is_settled() {
            return Ok(());
        }
        let _bound = self.bind()?;
        let code = self.wait();
        self.rt.check("aclrtSynchronizeStream", code)
    }

    /// Copies `host` to the start of `buffer` (`aclrtMemcpy`, synchronous).
    pub(crate) fn copy_in(&self, buffer: &DeviceBuffer, host: &[u8]) -> Result<()> {
        self.stream()?.upload(buffer, host)
    }

    /// Copies the start of `buffer` into `host` once the session's stream has finished what it
    /// queued ([`Session::finish`]).
    pub(crate) fn copy_out(&self, buffer: &DeviceBuffer, host: &mut [u8]) -> Result<()> {
        self.finish()?;
        self.stream()?.download(buffer, host)
    }

    /// Sets every byte of `buffer` to zero (`aclrtMemset`, synchronous).
    pub(crate) fn zero(&self, buffer: &DeviceBuffer) -> Result<()> {
        self.stream()?.zero(buffer)
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
// SAFETY: a shared `DeviceBuffer` only gives out its address and length; nothing is mutated
// through `&DeviceBuffer`.
unsafe impl Sync for DeviceBuffer {}

impl core::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceBuffer").field("bytes", &self.len).finish()
    }
}

impl DeviceBuffer {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device address of the buffer.
    pub(crate) fn addr(&self) -> DeviceAddr {
        DeviceAddr(self.ptr as usize)
    }

    /// Whether this memory was allocated by `session`.
    pub(crate) fn belongs_to(&self, session: &Arc<Session>) -> bool {
        Arc::ptr_eq(&self.session, session)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Memory a kernel may still use is not freed (`Session::settle`).
        if !self.session.settle() {
            return;
        }
        // Freed in the session's context whatever happens: a failure to bind leaves CANN to refuse it.
        let _bound = self.session.bind();
        // SAFETY: `ptr` came from `aclrtMalloc` on this session's device and is freed once.
        unsafe { (self.session.rt.api.aclrt_free)(self.ptr) };
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
