//! [`AscendStream`]: a stream of an Ascend device as the device that runs operations on tensors
//! in its memory ([`Npu`](super::Npu)), queued without waiting.

use core::ffi::c_void;
use core::fmt;
use std::sync::{Arc, Mutex};

use super::ffi::{Queue, RawStream};
use super::{Ascend, AscendMemory, Graveyard};
use crate::device::internal::DeviceImpl;
use crate::device::{Device, DeviceLimits};
use crate::error::{Error, Result, UNNAMED};
use crate::plan::Workspace;

/// A stream of an Ascend device: the device for plans whose tensors are in the NPU's memory
/// ([`Npu`](super::Npu) descriptors). A plan run on it queues the operator on the stream and
/// returns: no copy to or from the host, no wait. Results are ready once the stream has run
/// them, in the order they were queued.
///
/// Two kinds:
/// - [`Ascend::stream`]: poolgrad's own stream. Safe: dropping a tensor or workspace, or copying
///   one to the host ([`NpuTensor::to_array`](super::NpuTensor::to_array)), first waits for
///   what poolgrad queued there; [`AscendStream::synchronize`] waits explicitly.
/// - [`AscendStream::from_raw`]: a stream the caller owns (for example torch_npu's current
///   stream). poolgrad never waits for it; the caller synchronises it before reading results or
///   freeing memory, as its `unsafe` contract says.
///
/// The workspace ([`Workspace`]`<AscendStream>`) is device memory, grown to
/// what CANN's phase 1 asks and reused across runs; a buffer replaced while an operator may
/// still use it is kept until the workspace is dropped. The methods that allocate their outputs
/// ([`AscendStream::adaptive_max_pool2d`] and the five others) use a workspace of the stream's own.
///
/// ```no_run
/// use poolgrad::device::ascend::{Ascend, NpuTensor};
/// let npu = Ascend::new(0)?;
/// let x = NpuTensor::from_array(&npu, &ndarray::Array4::<f32>::ones((2, 8, 12, 12)))?;
/// let g = NpuTensor::from_array(&npu, &ndarray::Array4::<f32>::ones((2, 8, 3, 3)))?;
/// let stream = npu.stream();
/// let pooled = stream.adaptive_max_pool2d(&x, [3, 3])?; // queued
/// let gx = stream.adaptive_max_pool2d_backward(&g, &x, &pooled.indices)?; // queued after it
/// stream.synchronize()?;
/// assert_eq!(gx.to_array()?.sum(), 144.0); // each of the 2 * 8 * 3 * 3 gradients lands once
/// # Ok::<(), poolgrad::Error>(())
/// ```
pub struct AscendStream<'d> {
    device: &'d Ascend,
    queue: Queue,
    /// Workspace buffers of a caller's stream that no workspace holds any more.
    graveyard: Option<Graveyard>,
    /// The workspace of the methods that allocate their outputs ([`AscendStream::adaptive_max_pool2d`]
    /// and the others), grown as phase 1 asks and reused.
    pub(super) workspace: Mutex<Workspace<AscendStream<'d>>>,
}

impl fmt::Debug for AscendStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.queue {
            Queue::Own => "poolgrad's",
            Queue::Foreign(_) => "the caller's",
        };
        f.debug_struct("AscendStream").field("device", self.device).field("stream", &kind).finish()
    }
}

impl Ascend {
    /// poolgrad's own stream of this device, for plans on device tensors: each run queues its
    /// operator and returns; [`AscendStream::synchronize`] waits for them. Safe to use as it is:
    /// freeing device memory and copying it to the host wait for this stream first.
    pub fn stream(&self) -> AscendStream<'_> {
        AscendStream::new(self, Queue::Own, None)
    }
}

impl<'d> AscendStream<'d> {
    /// A stream the caller owns (an `aclrtStream`, for example
    /// `torch_npu.npu.current_stream().npu_stream`), on which plans queue their operators with no
    /// synchronisation of poolgrad's.
    ///
    /// poolgrad launches with the CANN context current on the calling thread, or, if the thread
    /// has none, the device's primary context, which is torch_npu's.
    ///
    /// # Safety
    /// - `stream` is a live stream of `device`'s NPU, of the context current on the threads that
    ///   run plans on this handle (or of the primary context, for threads with none), and it stays
    ///   live while this handle or a workspace made from it is alive;
    /// - every operator queued through this handle has finished (the stream was synchronised, or
    ///   its completion otherwise waited for) before the caller reads a result it writes, frees
    ///   or reuses memory it reads or writes, or drops the handle or a workspace made from it.
    ///   poolgrad's own tensors ([`NpuTensor`](super::NpuTensor)) wait only for poolgrad's stream
    ///   when dropped, not for this one. A run that returns an error may have queued part of its
    ///   work: the same holds after it.
    // `unsafe` by contract only (the function body has no unsafe operation): the one other
    // `unsafe` item of the crate outside the FFI module, with `from_device_ptr`.
    #[allow(unsafe_code)]
    pub unsafe fn from_raw(device: &'d Ascend, stream: *mut c_void) -> Self {
        let graveyard = Some(Arc::new(Mutex::new(Vec::new())));
        AscendStream::new(device, Queue::Foreign(RawStream(stream as usize)), graveyard)
    }

    fn new(device: &'d Ascend, queue: Queue, graveyard: Option<Graveyard>) -> Self {
        let workspace = Mutex::new(Workspace::of_memory(AscendMemory::new(None, graveyard.clone(), queue)));
        AscendStream { device, queue, graveyard, workspace }
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &'d Ascend {
        self.device
    }

    /// Waits until the stream has run everything queued on it (`aclrtSynchronizeStream`).
    ///
    /// # Errors
    /// [`AscendError::Cann`](crate::AscendError::Cann) if the wait fails, or an operator queued
    /// earlier failed on the device.
    pub fn synchronize(&self) -> Result<()> {
        match self.queue {
            Queue::Own => self.device.session.finish(),
            Queue::Foreign(stream) => self.device.session.synchronize_foreign(stream),
        }
    }

    pub(super) fn queue(&self) -> Queue {
        self.queue
    }

    /// Refuses a workspace made for another stream (before any device call): operators of two
    /// streams may run at once, and must not share scratch memory.
    pub(super) fn own_workspace(&self, memory: &AscendMemory) -> Result<()> {
        if memory.queue == self.queue {
            return Ok(());
        }
        Err(Error::InvalidParameter {
            op: UNNAMED,
            arg: "workspace",
            expected: format!("a workspace made for this stream ({self:?})"),
            got: "a workspace made for another stream".to_string(),
        })
    }

    /// Refuses a tensor of another device (before any device call).
    pub(super) fn placed(&self, arg: &'static str, device_id: i32) -> Result<()> {
        if device_id == self.device.device_id() {
            return Ok(());
        }
        Err(Error::InvalidParameter {
            op: UNNAMED,
            arg,
            expected: format!("a tensor on Ascend device {}, the stream's", self.device.device_id()),
            got: format!("a tensor on Ascend device {device_id}"),
        })
    }
}

impl DeviceImpl for AscendStream<'_> {
    type Memory = AscendMemory;

    fn alloc_workspace(&self, bytes: usize) -> Result<AscendMemory> {
        let buffer = if bytes == 0 { None } else { Some(self.device.session.alloc(bytes)?) };
        Ok(AscendMemory::new(buffer, self.graveyard.clone(), self.queue))
    }

    fn workspace_len(memory: &AscendMemory) -> usize {
        Ascend::workspace_len(memory)
    }
}

impl Device for AscendStream<'_> {
    fn name(&self) -> &'static str {
        "ascend"
    }

    /// The limits of the stream's device ([`Ascend`]'s).
    fn limits(&self) -> DeviceLimits {
        self.device.limits()
    }
}
