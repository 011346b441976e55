//! The double's process state: handles, device memory, streams, call counts, injected failures
//! and recorded violations.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CString, c_char};
use std::sync::{LazyLock, Mutex, MutexGuard};

pub(crate) static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::new()));

/// The state, even after a panic in another thread (the double must not abort the test process).
pub(crate) fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The thread's binding, as the runtime keeps it (`InnerThreadLocalContainer`: a current
    /// context, `CurCtx`, and a reference to a device's primary context, `CurRef`).
    static BINDING: Cell<Binding> = const { Cell::new(Binding { context: 0, primary_of: None }) };
    static RECENT_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A thread's context binding (hicann/runtime `src/runtime/api/impl/api_impl.cc`):
/// `aclrtSetDevice` sets `primary_of` and clears `context` (`ApiImpl::SetDevice`, `SetCurRef`
/// then `SetCurCtx(nullptr)`); `aclrtSetCurrentContext` and `aclrtCreateContext` set `context`
/// and clear `primary_of` (`ApiImpl::ContextSetCurrent`: `SetCurRef(nullptr)`, "must be null for
/// context switch").
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding {
    /// The context set current (`CurCtx`), 0 for none.
    pub context: usize,
    /// The device whose primary context `aclrtSetDevice` bound (`CurRef`).
    pub primary_of: Option<i32>,
}

pub(crate) fn binding() -> Binding {
    BINDING.with(Cell::get)
}

pub(crate) fn set_binding(b: Binding) {
    BINDING.with(|c| c.set(b));
}

/// What `aclGetRecentErrMsg` returns on this thread (valid until the next failure on it).
pub(crate) fn recent_error() -> *const c_char {
    RECENT_ERROR.with(|e| e.borrow().as_ptr())
}

/// Records `msg` as this thread's recent error and returns `code`.
pub(crate) fn fail(code: i32, msg: &str) -> i32 {
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    RECENT_ERROR.with(|e| *e.borrow_mut() = msg);
    code
}

/// Counts a call of `function`; returns the status to fail with if a failure was injected.
pub(crate) fn enter(function: &str) -> Option<i32> {
    let mut s = lock();
    *s.calls.entry(function.to_string()).or_default() += 1;
    s.total_calls += 1;
    let pos = s.injections.iter().position(|i| i.function == function)?;
    if s.injections[pos].skip > 0 {
        s.injections[pos].skip -= 1;
        return None;
    }
    let injected = s.injections.remove(pos);
    drop(s);
    Some(fail(injected.status, &format!("{function}: injected failure {}", injected.status)))
}

/// A live context.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// A device's primary context (made by `aclrtSetDevice`, never destroyed by the user).
    pub primary: bool,
    /// Its ACL_OPT_DETERMINISTIC value (`None` until set).
    pub deterministic: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) struct TensorDesc {
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub storage: Vec<i64>,
    pub dtype: i32,
    pub offset: i64,
    pub format: i32,
    pub addr: usize,
}

impl TensorDesc {
    pub fn numel(&self) -> usize {
        self.dims.iter().map(|&d| d.max(0) as usize).product()
    }

    pub fn dims_usize(&self) -> Vec<usize> {
        self.dims.iter().map(|&d| d.max(0) as usize).collect()
    }

    /// Byte address of element 0 of the view.
    pub fn start(&self) -> usize {
        self.addr + self.offset.max(0) as usize * itemsize(self.dtype)
    }

    pub fn byte_len(&self) -> usize {
        self.numel() * itemsize(self.dtype)
    }
}

pub(crate) fn itemsize(dtype: i32) -> usize {
    match dtype {
        crate::ACL_INT8 | 4 | 12 => 1,
        crate::ACL_FLOAT16 | crate::ACL_BF16 | 6 | 7 => 2,
        crate::ACL_FLOAT | crate::ACL_INT32 | 8 => 4,
        _ => 8,
    }
}

#[derive(Debug, Clone)]
pub(crate) struct MaskParams {
    pub kernel: Vec<i64>,
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    pub dilation: Vec<i64>,
    pub ceil_mode: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Job {
    AdaptiveForward {
        input: TensorDesc,
        output_size: Vec<i64>,
        out: TensorDesc,
        indices: TensorDesc,
    },
    AdaptiveBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        indices: TensorDesc,
        grad_input: TensorDesc,
    },
    MaskForward {
        input: TensorDesc,
        params: MaskParams,
        out: TensorDesc,
        mask: TensorDesc,
    },
    MaskBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        mask: TensorDesc,
        params: MaskParams,
        grad_input: TensorDesc,
    },
    IndicesForward {
        input: TensorDesc,
        params: MaskParams,
        out: TensorDesc,
        indices: TensorDesc,
    },
    IndicesBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        indices: TensorDesc,
        params: MaskParams,
        grad_input: TensorDesc,
    },
    /// `aclnnMaxPool3dWithArgmax`.
    Pool3dForward {
        input: TensorDesc,
        params: MaskParams,
        out: TensorDesc,
        indices: TensorDesc,
    },
    /// `aclnnMaxPool3dWithArgmaxBackward`.
    Pool3dBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        indices: TensorDesc,
        params: MaskParams,
        grad_input: TensorDesc,
    },
    /// `aclnnAdaptiveMaxPool3d`.
    Adaptive3dForward {
        input: TensorDesc,
        output_size: Vec<i64>,
        out: TensorDesc,
        indices: TensorDesc,
    },
    /// `aclnnAdaptiveMaxPool3dBackward`.
    Adaptive3dBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        indices: TensorDesc,
        grad_input: TensorDesc,
    },
    /// `aclnnMaxUnpool2d`, or `aclnnMaxUnpool3d` with its stride and padding.
    Unpool {
        input: TensorDesc,
        indices: TensorDesc,
        output_size: Vec<i64>,
        stride_padding: Option<(Vec<i64>, Vec<i64>)>,
        out: TensorDesc,
    },
    /// `aclnnMaxUnpool2dBackward`, or `aclnnMaxUnpool3dBackward` with its stride and padding.
    UnpoolBackward {
        grad_output: TensorDesc,
        input: TensorDesc,
        indices: TensorDesc,
        output_size: Vec<i64>,
        stride_padding: Option<(Vec<i64>, Vec<i64>)>,
        out: TensorDesc,
    },
}

impl Job {
    pub fn kind(&self) -> &'static str {
        match self {
            Job::AdaptiveForward { .. } => "AdaptiveMaxPool2d",
            Job::AdaptiveBackward { .. } => "AdaptiveMaxPool2dBackward",
            Job::MaskForward { .. } => "MaxPool2dWithMask",
            Job::MaskBackward { .. } => "MaxPool2dWithMaskBackward",
            Job::IndicesForward { .. } => "MaxPool2dWithIndices",
            Job::IndicesBackward { .. } => "MaxPool2dWithIndicesBackward",
            Job::Pool3dForward { .. } => "MaxPool3dWithArgmax",
            Job::Pool3dBackward { .. } => "MaxPool3dWithArgmaxBackward",
            Job::Adaptive3dForward { .. } => "AdaptiveMaxPool3d",
            Job::Adaptive3dBackward { .. } => "AdaptiveMaxPool3dBackward",
            Job::Unpool { stride_padding: None, .. } => "MaxUnpool2d",
            Job::Unpool { .. } => "MaxUnpool3d",
            Job::UnpoolBackward { stride_padding: None, .. } => "MaxUnpool2dBackward",
            Job::UnpoolBackward { .. } => "MaxUnpool3dBackward",
        }
    }

    /// Whether the operator checks ranks and formats its own way (the 3-D poolings: 4-D or 5-D
    /// tensors; the unpoolings: any format, and ranks by their number of spatial axes).
    pub fn checks_its_own_layout(&self) -> bool {
        matches!(
            self,
            Job::Pool3dForward { .. }
                | Job::Pool3dBackward { .. }
                | Job::Adaptive3dForward { .. }
                | Job::Adaptive3dBackward { .. }
                | Job::Unpool { .. }
                | Job::UnpoolBackward { .. }
        )
    }

    /// Every tensor the operator reads or writes.
    pub fn tensors(&self) -> Vec<&TensorDesc> {
        match self {
            Job::AdaptiveForward { input, out, indices, .. }
            | Job::IndicesForward { input, out, indices, .. }
            | Job::Pool3dForward { input, out, indices, .. }
            | Job::Adaptive3dForward { input, out, indices, .. } => {
                vec![input, out, indices]
            }
            Job::IndicesBackward { grad_output, input, indices, grad_input, .. }
            | Job::Pool3dBackward { grad_output, input, indices, grad_input, .. }
            | Job::Adaptive3dBackward { grad_output, input, indices, grad_input } => {
                vec![grad_output, input, indices, grad_input]
            }
            Job::MaskForward { input, out, mask, .. } => vec![input, out, mask],
            Job::Unpool { input, indices, out, .. } => vec![input, indices, out],
            Job::UnpoolBackward { grad_output, input, indices, out, .. } => {
                vec![grad_output, input, indices, out]
            }
            Job::AdaptiveBackward { grad_output, input, indices, grad_input } => {
                vec![grad_output, input, indices, grad_input]
            }
            Job::MaskBackward { grad_output, input, mask, grad_input, .. } => {
                vec![grad_output, input, mask, grad_input]
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Executor {
    pub job: Job,
    pub workspace: u64,
    pub repeatable: bool,
    /// The deterministic level phase 1 read.
    pub deterministic: i64,
}

#[derive(Debug)]
pub(crate) struct Queued {
    pub job: Job,
    pub workspace: (usize, u64),
    pub deterministic: i64,
    /// False for the kernels a failed launch left queued: they hold the buffers, compute nothing.
    pub executes: bool,
}

/// One task of a stream, run in the order queued when the stream is synchronised.
#[derive(Debug)]
pub(crate) enum Task {
    /// An operator's kernels.
    Kernel(Box<Queued>),
    /// `aclrtMemsetAsync`: `len` bytes at `addr` set to `value`.
    Memset { addr: usize, len: usize, value: u8 },
}

impl Task {
    /// The device addresses the task uses (each allocation stays in use until it has run).
    pub fn addrs(&self) -> Vec<usize> {
        match self {
            Task::Kernel(q) => q.job.tensors().iter().map(|t| t.addr).collect(),
            Task::Memset { addr, .. } => vec![*addr],
        }
    }
}

#[derive(Debug)]
pub(crate) struct Stream {
    pub context: usize,
    pub queue: Vec<Task>,
}

#[derive(Debug)]
pub(crate) struct Alloc {
    pub data: Box<[u8]>,
    pub pending: bool,
}

#[derive(Debug)]
pub(crate) struct Injection {
    pub function: String,
    pub status: i32,
    pub skip: u32,
}

/// A range of device memory: allocation base, offset into it, length.
pub(crate) type Range = (usize, usize, usize);

#[derive(Debug)]
pub(crate) struct State {
    /// `aclInitRefCount` (hicann/runtime `src/acl/aclrt_impl/acl.cpp`): every `aclInit` counts,
    /// the repeated ones included; 0 before the first and after finalisation.
    pub init_refs: u64,
    /// `aclFinalizeFlag`: `aclFinalize` ran.
    pub finalized: bool,
    /// The CANN release `aclsysGetCANNVersion` reads from the install, `None` for an install
    /// without its version record.
    pub release: Option<CString>,
    pub device_count: u32,
    pub memory_limit: usize,
    /// Device -> its primary context and the references `aclrtSetDevice` took
    /// (`Runtime::PrimaryContextRetain` / `PrimaryContextRelease`).
    pub primaries: BTreeMap<i32, (usize, i64)>,
    /// Every live context, primary or created.
    pub contexts: HashMap<usize, Context>,
    /// The process-level ACL_OPT_DETERMINISTIC (the runtime's `sysParamOpt_`).
    pub process_deterministic: i64,
    pub streams: HashMap<usize, Stream>,
    pub allocs: BTreeMap<usize, Alloc>,
    pub tensors: HashMap<usize, TensorDesc>,
    pub int_arrays: HashMap<usize, Vec<i64>>,
    pub executors: HashMap<usize, Executor>,
    /// Executors a launch handed to CANN (deleted there): any later use is a violation.
    pub consumed: HashSet<usize>,
    pub injections: Vec<Injection>,
    pub violations: Vec<String>,
    pub last_deterministic: i64,
    calls: HashMap<String, u64>,
    total_calls: u64,
    /// Every SoC name ever set (the last is current), so returned pointers stay valid.
    socs: Vec<CString>,
    next_handle: usize,
}

impl State {
    fn new() -> Self {
        let mut s = State {
            init_refs: 0,
            finalized: false,
            release: Some(if cfg!(feature = "cann81") { c"8.1.RC1" } else { c"8.3.RC1" }.to_owned()),
            device_count: 1,
            memory_limit: 1 << 30,
            primaries: BTreeMap::new(),
            contexts: HashMap::new(),
            process_deterministic: 0,
            streams: HashMap::new(),
            allocs: BTreeMap::new(),
            tensors: HashMap::new(),
            int_arrays: HashMap::new(),
            executors: HashMap::new(),
            consumed: HashSet::new(),
            injections: Vec::new(),
            violations: Vec::new(),
            last_deterministic: -1,
            calls: HashMap::new(),
            total_calls: 0,
            socs: Vec::new(),
            next_handle: 0x1000,
        };
        s.set_soc(c"Ascend910B1".to_owned());
        s
    }

    /// Back to a fresh device; the process stays initialised (aclInit is once per process).
    pub fn reset(&mut self) {
        let (init_refs, finalized) = (self.init_refs, self.finalized);
        let socs = std::mem::take(&mut self.socs);
        let next_handle = self.next_handle;
        *self = State::new();
        self.socs.splice(0..0, socs);
        (self.init_refs, self.finalized) = (init_refs, finalized);
        self.next_handle = next_handle;
    }

    /// The calling thread's current context, as `Runtime::CurrentContext` resolves it
    /// (hicann/runtime `src/runtime/core/src/runtime.cc`): the context set current if it is still
    /// valid, else the primary context of the device `aclrtSetDevice` bound, else none (0).
    pub fn current_context(&self) -> usize {
        let b = binding();
        if b.context != 0 {
            return if self.contexts.contains_key(&b.context) { b.context } else { 0 };
        }
        b.primary_of.and_then(|d| self.primaries.get(&d)).map_or(0, |p| p.0)
    }

    /// `Ok` if `stream` belongs to the calling thread's current context; otherwise the status the
    /// runtime returns (`CHECK_CONTEXT_VALID_WITH_RETURN` and
    /// `COND_RETURN_AND_MSG_INVALID_CONTEXT_STREAM_WITH_FUNC_DESC` in `api_impl.cc`), recorded as
    /// the recent error. An unknown stream passes: the caller reports it.
    pub fn stream_in_current_context(&self, stream: usize, function: &str) -> Result<(), i32> {
        let current = self.current_context();
        match self.streams.get(&stream) {
            _ if current == 0 => {
                Err(fail(crate::ACL_ERROR_RT_CONTEXT_NULL, &format!("{function}: no current context")))
            }
            Some(st) if st.context != current => Err(fail(
                crate::ACL_ERROR_RT_STREAM_CONTEXT,
                &format!("{function}: the stream is not in the current context"),
            )),
            _ => Ok(()),
        }
    }

    pub fn new_handle(&mut self) -> usize {
        self.next_handle += 0x10;
        self.next_handle
    }

    pub fn set_soc(&mut self, name: CString) {
        self.socs.push(name);
    }

    pub fn soc(&self) -> String {
        self.socs.last().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    }

    pub fn soc_ptr(&self) -> *const c_char {
        self.socs.last().map_or(core::ptr::null(), |s| s.as_ptr())
    }

    pub fn violation(&mut self, msg: String) {
        self.violations.push(msg);
    }

    /// Counts one event `what` (read back with [`State::calls`]), for events finer than a
    /// function call: the direction of a copy, say.
    pub fn count(&mut self, what: &str) {
        *self.calls.entry(what.to_string()).or_default() += 1;
    }

    pub fn calls(&self, function: &str) -> u64 {
        if function == "*" { self.total_calls } else { self.calls.get(function).copied().unwrap_or(0) }
    }

    pub fn live(&self, what: &str) -> i64 {
        (match what {
            "tensors" => self.tensors.len(),
            "int_arrays" => self.int_arrays.len(),
            "executors" => self.executors.len(),
            "allocations" => self.allocs.len(),
            "streams" => self.streams.len(),
            "contexts" => self.contexts.len(),
            "devices" => return self.primaries.values().map(|p| p.1).sum(),
            _ => return -1,
        }) as i64
    }

    pub fn allocated_bytes(&self) -> usize {
        self.allocs.values().map(|a| a.data.len()).sum()
    }

    /// `len` bytes at `addr`, if they lie inside one allocation.
    pub fn device_range(&self, addr: usize, len: usize) -> Option<Range> {
        let (&base, alloc) = self.allocs.range(..=addr).next_back()?;
        let offset = addr - base;
        (offset.checked_add(len)? <= alloc.data.len()).then_some((base, offset, len))
    }

    pub fn device_bytes(&self, (base, offset, len): Range) -> &[u8] {
        &self.allocs[&base].data[offset..offset + len]
    }

    pub fn device_bytes_mut(&mut self, (base, offset, len): Range) -> &mut [u8] {
        &mut self.allocs.get_mut(&base).expect("checked range").data[offset..offset + len]
    }

    pub fn set_pending(&mut self, addr: usize, pending: bool) {
        if let Some((_, alloc)) = self.allocs.range_mut(..=addr).next_back() {
            alloc.pending = pending;
        }
    }

    pub fn queued_workspace(&self, addr: usize) -> bool {
        self.streams
            .values()
            .flat_map(|s| &s.queue)
            .any(|t| matches!(t, Task::Kernel(q) if q.workspace.1 > 0 && q.workspace.0 == addr))
    }
}
