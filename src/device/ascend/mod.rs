//! The Ascend NPU device (feature `ascend`): CANN's aclnn operators through its C ABI.
//!
//! The CANN libraries are opened at run time, so the crate builds without the SDK and without
//! headers. They are searched under `ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`,
//! `/usr/local/Ascend/ascend-toolkit/latest` and `/usr/local/Ascend/cann` (each in `lib64/`),
//! then by name through the loader path (`LD_LIBRARY_PATH`); symbols are resolved across
//! `libascendcl.so`, `libnnopbase.so` and `libopapi.so` or the split `libopapi_nn.so`. Sourcing
//! CANN's `set_env.sh` sets all of this up.
//!
//! [`Ascend`] runs the six 2-D operations through the same [`Plan`](crate::Plan) ->
//! [`Executor`](crate::Executor) path as the CPU: `aclnnAdaptiveMaxPool2d`,
//! `aclnnAdaptiveMaxPool2dBackward`, `aclnnMaxPool2dWithMask`, `aclnnMaxPool2dWithMaskBackward`,
//! `aclnnMaxPool2dWithIndices` and `aclnnMaxPool2dWithIndicesBackward` (int32 indices on the
//! device; `i64` callers are converted, and checked against the plane); and the four 3-D ones,
//! `aclnnMaxPool3dWithArgmax`, `aclnnAdaptiveMaxPool3d` and their backwards, on 5-D
//! `ACL_FORMAT_NCDHW` tensors with int32 indices (Atlas A2/A3 and the 950; f32, f16, bf16); and
//! max unpooling with its backward and the double backwards on `aclnnMaxUnpool2d`,
//! `aclnnMaxUnpool3d` and their backwards (module `unpool`). Every one of them also runs on
//! tensors that stay in device memory ([`NpuTensor`], views of a caller's memory), queued on an
//! [`AscendStream`] (module `resident`; the stream's methods in module `calls`).
//! [`Plan::new`](crate::Plan::new) checks everything this crate knows about the device before any
//! device call (the SoC's operators and dtypes, dilation, the ceil-mode strides of the legacy kernel (310P and Atlas training), the mask
//! layout, `H*W <= i32::MAX`, the adaptive backward's 2^24 limit on non-divisible shapes, index
//! values), then allocates device buffers and creates the `aclTensor`s (4-D, `ACL_FORMAT_NCHW`).
//! [`Executor::run`](crate::Executor::run) copies the inputs to the device, runs CANN's two phases
//! back to back (`aclnnXxxGetWorkspaceSize`, then `aclnnXxx` on the device's stream with the
//! workspace), synchronises and copies the outputs back.
//!
//! **Errors mid-run.** If a launch or a copy fails after work was queued, the stream is
//! synchronised before any buffer is freed, and the error is returned.
//!
//! **Sharing the NPU with other libraries.** poolgrad works in the device's *primary context*,
//! the one `aclrtSetDevice` binds and torch_npu uses; it creates no context and destroys none. What
//! it does to a thread and a device:
//! - [`Ascend::new`] calls `aclrtSetDevice` (one reference to the device, released by
//!   `aclrtResetDevice` when the `Ascend` is dropped) and creates one stream of its own there,
//!   destroyed on drop; the device's primary context goes with its last reference, which may be
//!   another library's.
//! - Every call (opening, planning, running, freeing, dropping) records the calling thread's current
//!   context (`aclrtGetCurrentContext`), makes the primary context current only if another one is,
//!   and makes the recorded one current again before it returns, on every path. A thread that
//!   torch_npu or another library bound keeps its context and its streams: CANN launches only on
//!   streams of the current context, and torch_npu binds each thread once and never again.
//! - A thread that had no context keeps the device's primary context afterwards (ACL has no call
//!   that unbinds a thread), as `aclrtSetDevice` would have left it.
//!
//! **Determinism is process-wide** on current CANN: nnopbase reads the process-level
//! `ACL_OPT_DETERMINISTIC` during `GetWorkspaceSize` (hicann/opbase since 2026-01; earlier
//! versions read the context's), and the runtime's context setter also stores the process value.
//! [`Ascend::deterministic`] therefore sets both, and it affects every `Ascend` and every other
//! CANN user in the process (the context it sets is the device's primary context, which other
//! libraries share). [`Ascend::is_deterministic`] reads the option back from CANN.
//!
//! **`aclFinalize`.** CANN 8.1's `acl.h` asks for `aclFinalize` before the process exits.
//! poolgrad never finalises on its own (another user of the process, such as torch_npu, may still
//! need CANN): call [`finalize`] once every device, workspace and plan is dropped. Where the
//! runtime exports `aclFinalizeReference`, it releases only poolgrad's reference (CANN counts
//! every `aclInit` and tears down at the last release), so it is safe beside other users; on
//! older runtimes it calls `aclFinalize`, and only if poolgrad's `aclInit` initialised CANN, so
//! call it there only if poolgrad is the process's only CANN user. Either way no `Ascend` can be
//! opened afterwards, whatever library directory is asked for, and [`Ascend::is_available`]
//! (which never initialises CANN) answers false.
//!
//! **Phase 1 runs with the launch.** [`Plan::new`](crate::Plan::new) makes every check poolgrad
//! knows of the device and stages the tensors; CANN's own phase 1 (`aclnnXxxGetWorkspaceSize`)
//! runs when the plan runs, right before the launch, on the thread that runs it. CANN documents
//! one life for an executor that is not repeatable (phase 1 creates it, phase 2 releases it), so
//! none is kept in a plan, dropped unlaunched or moved across threads; phase 1 also reads the
//! deterministic setting in force when the plan runs. So a plan's
//! [`workspace_size`](crate::Plan::workspace_size) is 0 on this device: CANN's phase 1 sizes the
//! workspace, and the run grows the [`Workspace`](crate::Workspace) it is given to that size
//! (never shrinking it), so a workspace reused across runs is allocated once.
//!
//! **A failed wait frees nothing.** A synchronisation that fails (a timeout, for example) does
//! not stop the stream's kernel, so after one poolgrad frees no device memory, and destroys
//! neither the stream nor its device reference, until a later wait succeeds; if none does, they
//! are left for the process's end rather than freed under a running kernel.
//!
//! **Host tensors or device tensors.** `Ascend` itself runs operations on host tensors (ndarray
//! views), copying them to and from the device on every run. Tensors that stay in device memory
//! ([`NpuTensor`], or the caller's memory through [`TensorRef::from_device_ptr`](crate::TensorRef::from_device_ptr))
//! run on an [`AscendStream`]: poolgrad's own stream ([`Ascend::stream`]) or one the caller owns
//! ([`AscendStream::from_raw`]). There a run queues its operator and returns: no copy, no wait.
//! On poolgrad's stream, freeing or downloading device memory waits for what was queued; on the
//! caller's, the caller synchronises, as the `unsafe` constructors' contracts say.
//!
//! **Tested against a test double, not hardware.** No NPU was available to this crate's
//! developers: the backend is built from CANN's documented C signatures and tested against a double
//! of that ABI (`tests/cann-double`). The facts it relies on and which of them are unconfirmed on
//! hardware are listed in the README.
//!
//! ```no_run
//! # #[cfg(feature = "ascend")] {
//! use poolgrad::{Plan, TensorMut, TensorRef, device::ascend::Ascend, op::AdaptiveMaxPool2dBackward};
//! if !Ascend::is_available() {
//!     return Ok(());
//! }
//! let npu = Ascend::new(0)?.deterministic(true)?;
//! let (g, idx, x) = ([1.0f32, 2.0], [3i64, 3], [0.0f32; 4]);
//! let mut gi = [0.0f32; 4];
//! Plan::new(&npu, AdaptiveMaxPool2dBackward {
//!     grad_output: TensorRef::from_slice(&g, &[1, 1, 2])?,
//!     self_: TensorRef::from_slice(&x, &[1, 2, 2])?,
//!     indices: TensorRef::from_slice(&idx, &[1, 1, 2])?,
//!     grad_input: TensorMut::from_slice(&mut gi, &[1, 2, 2])?,
//! })?
//! .run()?;
//! assert_eq!(gi, [0.0, 0.0, 0.0, 3.0]);
//! # }
//! # Ok::<(), poolgrad::Error>(())
//! ```

use core::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::device::{Device, DeviceLimits, internal::DeviceImpl};
use crate::error::{Error, Result, UNNAMED};
use crate::mask::MaskLayout;
use crate::params::MaxPool2dParams;

mod calls;
mod ffi;
mod launch;
mod resident;
mod soc;
mod status;
mod stream;
mod tensor;
mod unpool;

pub use calls::{NpuPooled, NpuPooledMask};
pub use soc::SocFamily;
pub use stream::AscendStream;
pub use tensor::{DeviceMut, DeviceRef, Npu, NpuTensor};

use ffi::{DeviceBuffer, Runtime, Session};

/// The largest plane whose flat indices an INT32 index tensor holds.
const INT32_PLANE: usize = i32::MAX as usize;

/// The largest non-divisible adaptive plane `H * W` CANN's AdaptiveMaxPool2dBackward documents
/// (`aclnnAdaptiveMaxPool2dBackward.md`, 约束说明; no other operator documents it).
const MAX_NON_DIVISIBLE_ADAPTIVE_PLANE: usize = 1 << 24;

/// Releases poolgrad's hold on CANN (module docs): `aclFinalizeReference` where the runtime
/// exports it (CANN counts every `aclInit` and tears down at the last release, so this is safe
/// beside torch_npu), else `aclFinalize` if poolgrad's `aclInit` was the one that initialised
/// CANN. Afterwards no [`Ascend`] can be opened in this process, from any library directory, and
/// [`Ascend::is_available`] is false. A second call does nothing.
///
/// # Errors
/// [`Error::InvalidParameter`] while any `Ascend`, workspace or plan is alive (nothing is
/// finalised then), and [`AscendError::Cann`](crate::AscendError::Cann) if `aclFinalize` fails.
pub fn finalize() -> Result<()> {
    ffi::finalize()
}

/// An Ascend NPU: one device, in its primary context, with a stream of its own.
///
/// `Ascend` is `Send` and `Sync`: every call binds the device's primary context on the calling
/// thread for its CANN calls and gives the thread its own context back afterwards (module docs),
/// and launches on its stream are serialised. Dropping it destroys the stream and releases the
/// device (`aclrtResetDevice`), after every buffer and plan made from it is gone.
pub struct Ascend {
    session: Arc<Session>,
    soc: String,
    family: SocFamily,
    device_id: i32,
    /// Set by [`Ascend::cann_decides`]: poolgrad's device-limit refusals are skipped.
    cann_decides: bool,
}

impl fmt::Debug for Ascend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ascend")
            .field("device_id", &self.device_id)
            .field("soc", &self.soc)
            .field("libraries", &self.session.runtime().origin())
            .finish()
    }
}

impl Ascend {
    /// Opens NPU `device_id`, loading CANN from the default locations (module docs).
    ///
    /// # Errors
    /// [`AscendError::Unavailable`](crate::AscendError::Unavailable) if the libraries or a required symbol cannot be found (the error
    /// lists every path tried), [`AscendError::Cann`](crate::AscendError::Cann) if `aclInit`, `aclrtSetDevice`, the context or the
    /// stream fail (for example for a device that does not exist).
    pub fn new(device_id: i32) -> Result<Self> {
        Self::open(Runtime::load(ffi::default_roots(), true)?, device_id)
    }

    /// Opens NPU `device_id`, loading CANN only from `dir` (`dir/lib64/` or `dir/` itself): no
    /// environment variable and no loader path is consulted. For CANN installed in an unusual
    /// place, and for tests.
    ///
    /// # Errors
    /// As [`Ascend::new`].
    pub fn with_library_dir(dir: impl AsRef<Path>, device_id: i32) -> Result<Self> {
        Self::open(Runtime::load(vec![dir.as_ref().to_path_buf()], false)?, device_id)
    }

    fn open(rt: Arc<Runtime>, device_id: i32) -> Result<Self> {
        let session = Session::open(rt, device_id)?;
        // After aclrtSetDevice: the SoC of the device in use.
        let soc = session.runtime().soc_name()?;
        Ok(Ascend { session, family: SocFamily::from_soc_name(&soc), soc, device_id, cann_decides: false })
    }

    /// Whether CANN loads from the default locations and reports at least one device. Never fails,
    /// and initialises nothing: it opens the libraries and asks `aclrtGetDeviceCount`, which
    /// needs no `aclInit`, so calling it leaves CANN as it was for the process's other users
    /// (and for [`finalize`]). Always false after [`finalize`].
    pub fn is_available() -> bool {
        Runtime::device_count_without_init(ffi::default_roots(), true).is_some_and(|n| n > 0)
    }

    /// This device with poolgrad's own refusals of what it believes the SoC does not take left
    /// out, so that such calls reach CANN and CANN's own answer is seen: a diagnostic for
    /// hardware owners (the probe example's second pass), not for production use.
    ///
    /// Left out: the SoC's operators and element types, dilation and the 310P's ceil-mode
    /// strides, the mask layout the SoC writes, and the adaptive backward's documented 2^24
    /// limit. Kept, because they keep memory safe: shapes, index and mask values checked against
    /// the plane, planes whose flat indices fit the device's int32, and the device's memory. A
    /// mask of a layout the SoC does not write is decoded as the layout the caller named, so its
    /// results may be wrong, though never out of bounds.
    pub fn cann_decides(mut self) -> Self {
        self.cann_decides = true;
        self
    }

    /// Sets CANN's deterministic mode (`ACL_OPT_DETERMINISTIC`): for this device's primary context
    /// (`aclrtCtxSetSysParamOpt`, shared with every library using the device) and, where the runtime exports `aclrtSetSysParamOpt`, for the
    /// process, which is what current CANN reads. **Process-wide**: it applies to every plan made
    /// afterwards on any device of the process (module docs).
    ///
    /// Off by default, as in CANN. Off, the backward operators may accumulate overlapping windows
    /// concurrently, so f16/bf16 results can vary in the last bits from run to run (the CPU
    /// backend is always deterministic).
    ///
    /// # Errors
    /// [`AscendError::Cann`](crate::AscendError::Cann) if `aclrtCtxSetSysParamOpt` or `aclrtSetSysParamOpt` fails.
    pub fn deterministic(self, on: bool) -> Result<Self> {
        self.session.set_context_deterministic(on)?;
        self.session.set_process_deterministic(on, false)?;
        Ok(self)
    }

    /// Sets `ACL_OPT_DETERMINISTIC` at one of CANN's two levels only, leaving the other as it is:
    /// a diagnostic for finding which level a CANN release's operators read (the probe example
    /// sets one at a time and compares runs bit for bit). [`Ascend::deterministic`] sets both,
    /// which is what a user wants.
    ///
    /// # Errors
    /// [`AscendError::Cann`](crate::AscendError::Cann) if CANN refuses the setting, and
    /// [`AscendError::Unavailable`](crate::AscendError::Unavailable) for
    /// [`DeterministicLevel::Process`] where the runtime does not export `aclrtSetSysParamOpt`.
    pub fn deterministic_at(self, level: DeterministicLevel, on: bool) -> Result<Self> {
        match level {
            DeterministicLevel::Context => self.session.set_context_deterministic(on)?,
            DeterministicLevel::Process => self.session.set_process_deterministic(on, true)?,
        }
        Ok(self)
    }

    /// Whether CANN's deterministic mode is on, as CANN reports it now: `Some(on)` when every
    /// level the runtime lets us read (the context's, and the process's where
    /// `aclrtGetSysParamOpt` exists) agrees, `None` when they disagree (which one an operator
    /// reads then depends on the CANN version), when neither can be read, or when the context
    /// cannot be made current.
    pub fn is_deterministic(&self) -> Option<bool> {
        match self.session.deterministic_levels().ok()? {
            (Some(c), Some(p)) if (c != 0) == (p != 0) => Some(p != 0),
            (Some(_), Some(_)) | (None, None) => None,
            (Some(v), None) | (None, Some(v)) => Some(v != 0),
        }
    }

    /// The SoC name CANN reports, e.g. `"Ascend910B1"`.
    pub fn soc_name(&self) -> &str {
        &self.soc
    }

    /// The SoC's product family, which decides dtypes, operators and the mask layout.
    pub fn soc_family(&self) -> SocFamily {
        self.family
    }

    /// The device id.
    pub fn device_id(&self) -> i32 {
        self.device_id
    }

    /// Whether this device's `aclnnMaxPool2dWithMask` writes masks in layout `L` for `params`
    /// (A2/A3 write `I32Argmax` except for 1x1 kernels; other SoCs write `Bitmask`). Says nothing
    /// of whether the SoC runs the operator at all.
    pub fn writes_mask_layout<L: MaskLayout>(&self, params: &MaxPool2dParams) -> bool {
        self.family.mask_layout(params.kernel()) == L::NAME
    }

    /// The version of the ACL interface, `"major.minor.patch"` (`aclrtGetVersion`), or `None` where the runtime does not export it or does not answer. This is
    /// the version of the C API, not of the CANN release: see [`Ascend::cann_release`].
    pub fn acl_interface_version(&self) -> Option<String> {
        self.session.runtime().version()
    }

    /// The CANN release installed (for example `"8.1.RC1"`) and where it was read:
    /// `aclsysGetCANNVersion` where the runtime exports it and answers, else the `version=` line
    /// of the toolkit's install record (`<arch>-linux/ascend_toolkit_install.info` under the
    /// search root the libraries came from). `None` when neither answers (libraries found
    /// through the loader path alone, from a runtime without the call).
    pub fn cann_release(&self) -> Option<CannRelease> {
        let (version, source) = self.session.runtime().release()?;
        Some(CannRelease { version, source })
    }

    /// The device memory applications can use, in bytes, as CANN reported it when the device was
    /// opened (`aclrtGetMemInfo`), or `None` where the runtime did not answer. Plans whose
    /// tensors need more than this together are refused in phase 1 with
    /// [`DeviceLimitKind::Memory`](crate::DeviceLimitKind::Memory); memory that other work holds
    /// is only found out by the allocation itself (an [`AscendError::Cann`](crate::AscendError::Cann)
    /// from `aclrtMalloc`).
    pub fn memory_total(&self) -> Option<usize> {
        self.session.memory_total()
    }

    /// Where the CANN libraries were loaded from.
    pub fn library_origin(&self) -> &str {
        self.session.runtime().origin()
    }
}

/// One of the two levels at which CANN keeps `ACL_OPT_DETERMINISTIC` ([`Ascend::deterministic_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeterministicLevel {
    /// The device's primary context (`aclrtCtxSetSysParamOpt`), which CANN releases before
    /// 2026-01 read.
    Context,
    /// The process (`aclrtSetSysParamOpt`), which current nnopbase reads.
    Process,
}

/// The CANN release a device runs on ([`Ascend::cann_release`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CannRelease {
    /// The release, as CANN writes it (for example `"8.1.RC1"`).
    pub version: String,
    /// Where it was read: `"aclsysGetCANNVersion"`, or the path of the install record.
    pub source: String,
}

/// Workspace memory on an Ascend device (none for a zero-byte workspace).
#[derive(Debug)]
pub struct AscendMemory {
    buffer: Option<DeviceBuffer>,
    /// Buffers a queued operator may still use, replaced when the workspace grew during a run
    /// on a stream ([`AscendStream`]): kept until the workspace is dropped.
    retired: Vec<DeviceBuffer>,
    /// For a workspace of a caller's stream: where its buffers go when it is dropped, to be freed
    /// with the last of the stream handle and its workspaces ([`AscendStream::from_raw`]).
    graveyard: Option<Graveyard>,
    /// The stream whose operators use the workspace (the session's own for the synchronous host
    /// path): a workspace shared by two streams would be used by two kernels at once.
    queue: ffi::Queue,
}

/// Buffers of a caller's stream that poolgrad no longer uses but a queued operator may: freed
/// when the last [`AscendStream`] handle or workspace holding them is dropped.
type Graveyard = Arc<std::sync::Mutex<Vec<DeviceBuffer>>>;

/// What becomes of a workspace buffer replaced by a larger one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replaced {
    /// Freed first, so that the two need not fit together: the synchronous path, whose stream
    /// was waited for, so nothing uses it.
    Freed,
    /// Kept until the workspace is dropped: an operator queued earlier may still use it.
    Retired,
}

impl AscendMemory {
    /// The workspace buffer, grown to the `size` bytes CANN's phase 1 asked for if it is
    /// smaller (never shrunk, as [`Workspace::ensure`](crate::Workspace::ensure)); `None` when
    /// `size` is 0.
    fn grown_to(
        &mut self,
        session: &Arc<Session>,
        size: u64,
        replaced: Replaced,
    ) -> Result<Option<&DeviceBuffer>> {
        let bytes = usize::try_from(size).map_err(|_| Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: format!("{size} bytes asked by CANN's phase 1 exceed usize::MAX"),
        })?;
        if bytes == 0 {
            return Ok(None);
        }
        if Ascend::workspace_len(self) < bytes {
            let old = self.buffer.take();
            match replaced {
                Replaced::Freed => drop(old),
                Replaced::Retired => self.retired.extend(old),
            }
            self.buffer = Some(session.alloc(bytes)?);
        }
        Ok(self.buffer.as_ref())
    }

    fn new(buffer: Option<DeviceBuffer>, graveyard: Option<Graveyard>, queue: ffi::Queue) -> Self {
        AscendMemory { buffer, retired: Vec::new(), graveyard, queue }
    }
}

impl Drop for AscendMemory {
    fn drop(&mut self) {
        if let Some(graveyard) = &self.graveyard {
            let mut buried = graveyard.lock().unwrap_or_else(|e| e.into_inner());
            buried.extend(self.buffer.take());
            buried.append(&mut self.retired);
        }
    }
}

impl DeviceImpl for Ascend {
    type Memory = AscendMemory;

    fn alloc_workspace(&self, bytes: usize) -> Result<AscendMemory> {
        let buffer = if bytes == 0 { None } else { Some(self.session.alloc(bytes)?) };
        Ok(AscendMemory::new(buffer, None, ffi::Queue::Own))
    }

    fn workspace_len(memory: &AscendMemory) -> usize {
        memory.buffer.as_ref().map_or(0, DeviceBuffer::len)
    }
}

impl Device for Ascend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    /// `H * W <= i32::MAX` (`D * H * W` for the 3-D operators) for every operator but on the 950
    /// generation, and at most 2^24 for adaptive backward shapes that are not divisible
    /// (documented for `aclnnAdaptiveMaxPool2dBackward` only; left out under
    /// [`Ascend::cann_decides`]).
    ///
    /// On the 950 the adaptive operators take larger planes: their indices are INT64 and the
    /// op_api skips its INT32 plane check on that architecture (ops-nn
    /// `adaptive_max_pool_common.cpp`, `IsRegbase`; CANN's phase 1 accepted a 32768 x 65536
    /// plane there and refused it on A2/A3). The with-indices and 3-D operators, whose indices
    /// poolgrad passes as INT32, keep the limit in their staging (`launch.rs`).
    fn limits(&self) -> DeviceLimits {
        let limits = if self.family == SocFamily::Ascend950 {
            DeviceLimits::default()
        } else {
            DeviceLimits::default().with_max_plane(INT32_PLANE)
        };
        if self.cann_decides {
            return limits;
        }
        limits.with_max_non_divisible_adaptive_plane(MAX_NON_DIVISIBLE_ADAPTIVE_PLANE)
    }
}

impl Ascend {
    /// The workspace buffer of `memory`, checked to belong to this device.
    fn workspace<'m>(&self, memory: &'m AscendMemory) -> Result<Option<&'m DeviceBuffer>> {
        match &memory.buffer {
            Some(b) if !b.belongs_to(&self.session) => Err(Error::InvalidParameter {
                op: UNNAMED,
                arg: "workspace",
                expected: format!("a workspace allocated on this Ascend device ({})", self.device_id),
                got: "a workspace of another Ascend device".to_string(),
            }),
            other => Ok(other.as_ref()),
        }
    }
}
