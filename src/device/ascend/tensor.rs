//! Tensors in an Ascend device's memory: [`Npu`], the memory marker of the operation
//! descriptors; [`NpuTensor`], device memory poolgrad owns; and views of memory the caller owns
//! ([`TensorRef::from_device_ptr`], [`TensorMut::from_device_ptr`]).
//!
//! A device view is a device address, a shape and the device it lives on. It is never read on the
//! host: shapes are checked in phase 1 as for host views, and values only by the operators.

use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use std::sync::{Arc, Mutex};

use ndarray::{ArrayBase, ArrayD, Data, IxDyn};

use super::Ascend;
use super::ffi::{DeviceAddr, DeviceBuffer, Session};
use crate::alloc::{collect_exact, zeroed_vec};
use crate::element::{DType, Element};
use crate::error::{Error, Result, UNNAMED};
use crate::tensor::{Memory, TensorMut, TensorRef, VIEW_RANKS, ViewDim, as_4d, memory};

/// The memory of an Ascend device: the `M` of an operation descriptor whose tensors live on the
/// NPU, for plans on an [`AscendStream`](super::AscendStream).
///
/// ```no_run
/// use poolgrad::device::ascend::{Ascend, Npu, NpuTensor};
/// use poolgrad::{Plan, Workspace, op::AdaptiveMaxPool2dBackward};
/// let npu = Ascend::new(0)?;
/// let stream = npu.stream();
/// let x = NpuTensor::<f32>::zeros(&npu, &[1, 4, 4])?;
/// let g = NpuTensor::from_array(&npu, &ndarray::Array3::<f32>::ones((1, 2, 2)))?;
/// let idx = NpuTensor::from_array(&npu, &ndarray::Array3::<i64>::zeros((1, 2, 2)))?;
/// let mut gx = NpuTensor::<f32>::zeros(&npu, &[1, 4, 4])?;
/// let op: AdaptiveMaxPool2dBackward<'_, f32, i64, Npu> = AdaptiveMaxPool2dBackward {
///     grad_output: (&g).into(),
///     self_: (&x).into(),
///     indices: (&idx).into(),
///     grad_input: (&mut gx).into(),
/// };
/// let mut ws = Workspace::new(&stream, 0)?;
/// Plan::new(&stream, op)?.run_in(&mut ws)?; // queued: no copy, no wait
/// assert_eq!(gx.to_array()?[[0, 0, 0]], 4.0); // waits for the stream, then copies
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Npu;

impl memory::Sealed for Npu {}

impl Memory for Npu {
    type Ref<'a, E: Element> = DeviceRef<'a, E>;
    type Mut<'a, E: Element> = DeviceMut<'a, E>;

    fn ref_shape<'s, E: Element>(data: &'s DeviceRef<'_, E>) -> &'s [usize] {
        &data.shape
    }

    fn mut_shape<'s, E: Element>(data: &'s DeviceMut<'_, E>) -> &'s [usize] {
        &data.shape
    }

    fn read<'s, E: Element>(data: &'s DeviceMut<'_, E>) -> DeviceRef<'s, E> {
        let values = data.values.map_or(Values::Promised, |v| *v.lock().unwrap_or_else(|e| e.into_inner()));
        DeviceRef { addr: data.addr, shape: data.shape, device_id: data.device_id, values, life: PhantomData }
    }

    fn reborrow<'s, E: Element>(data: &'s mut DeviceMut<'_, E>) -> DeviceMut<'s, E> {
        DeviceMut {
            addr: data.addr,
            shape: data.shape,
            device_id: data.device_id,
            values: data.values,
            life: PhantomData,
        }
    }
}

/// What is known of the values of an index tensor (or of the int32 words of an `I32Argmax`
/// mask) on the device, so that a backward never hands CANN an index outside the plane (CANN
/// does not check them; a device kernel would write outside `grad_input`), and an unpooling
/// runs only where poolgrad's rule for repeated indices holds.
///
/// `distinct_in` is a run length `K` such that no `K` consecutive elements from the start (the
/// elements `[jK, (j+1)K)`) hold a value twice, or 0 when none is known. Runs of `K` without a
/// repeat have none in runs of any `P` dividing `K`, so indices whose planes of `P` positions
/// divide `K` repeat no position in any plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    /// Memory the caller owns: [`TensorRef::from_device_ptr`]'s contract covers the values.
    Promised,
    /// Every value lies in `[0, below)`: written by a forward over planes of `below` elements,
    /// or zeroed (`below` 1, `distinct_in` 1).
    Written { below: u64, distinct_in: u64 },
    /// Copied from the host, where every value was read: all lie in `[0, below)` when `below` is
    /// not `u64::MAX`; `witness` is the first negative value, or else the first largest one, as
    /// `(element, value)`.
    Scanned { below: u64, witness: (usize, i64), distinct_in: u64 },
    /// Nothing is known (a `Bitmask` mask's words, or element types that are not indices).
    Unknown,
}

impl Values {
    /// What a scan of `host` (the elements of a tensor of type `E` and shape `shape`) shows.
    fn scan<E: Element>(host: &[E], shape: &[usize]) -> Values {
        match E::DTYPE {
            DType::I64 => Self::scan_values(bytemuck::cast_slice::<E, i64>(host).iter().copied(), shape),
            DType::I32 => {
                Self::scan_values(bytemuck::cast_slice::<E, i32>(host).iter().map(|&v| v as i64), shape)
            }
            // An `I32Argmax` mask's values are native-endian int32 words of its bytes (a mask's
            // rows are whole words: 32 bytes and more); no unpooling reads them (no shape: no
            // planes to find repeats in).
            DType::I8 => Self::scan_values(
                bytemuck::cast_slice::<E, u8>(host)
                    .chunks_exact(4)
                    .map(|w| i32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as i64),
                &[],
            ),
            _ => Values::Unknown,
        }
    }

    /// The bounds of `values` and, for the planes of an unpooling of a tensor of `shape` (its
    /// last two axes, or its last three), the longest of those plane sizes in which no value
    /// repeats.
    fn scan_values(values: impl Iterator<Item = i64> + Clone, shape: &[usize]) -> Values {
        let mut witness = (0, 0i64);
        for (e, v) in values.clone().enumerate() {
            if v < 0 {
                return Values::Scanned { below: u64::MAX, witness: (e, v), distinct_in: 0 };
            }
            if v > witness.1 {
                witness = (e, v);
            }
        }
        let planes =
            |axes: usize| (shape.len() > axes).then(|| shape[shape.len() - axes..].iter().product::<usize>());
        let distinct_in = [planes(3), planes(2)]
            .into_iter()
            .flatten()
            .find(|&plane| plane > 0 && no_repeat_in_runs(values.clone(), plane))
            .unwrap_or(0);
        Values::Scanned { below: witness.1 as u64 + 1, witness, distinct_in: distinct_in as u64 }
    }

    /// Refuses values not known to lie in `[0, plane)`; `index_error(element, value)` makes the
    /// error for a value read on the host.
    pub(crate) fn check(
        self,
        arg: &'static str,
        plane: usize,
        index_error: impl Fn(usize, i64) -> Error,
    ) -> Result<()> {
        let plane = plane as u64;
        match self {
            Values::Promised => Ok(()),
            Values::Written { below, .. } | Values::Scanned { below, .. } if below <= plane => Ok(()),
            Values::Scanned { witness: (e, v), .. } => Err(index_error(e, v)),
            Values::Written { below, .. } => Err(Error::InvalidParameter {
                op: UNNAMED,
                arg,
                expected: format!("device values in [0, {plane}), the positions of a plane they index"),
                got: format!("values written by a pooling over planes of {below} elements"),
            }),
            Values::Unknown => Err(Error::InvalidParameter {
                op: UNNAMED,
                arg,
                expected: format!("device values known to lie in [0, {plane})"),
                got: "a device tensor whose values poolgrad has not seen (not uploaded, zeroed or \
                      written by an index-producing forward)"
                    .to_string(),
            }),
        }
    }

    /// Refuses indices not known to repeat no position within each plane of `plane` indices:
    /// where indices repeat, which value the device's scatter keeps is not defined, and poolgrad's
    /// rule (the last one wins, and alone gets the gradient) takes the values on the host.
    pub(crate) fn check_distinct(self, arg: &'static str, plane: usize) -> Result<()> {
        let known = match self {
            Values::Promised => return Ok(()),
            Values::Written { distinct_in, .. } | Values::Scanned { distinct_in, .. } => distinct_in,
            Values::Unknown => 0,
        };
        if plane == 0 || (known != 0 && known.is_multiple_of(plane as u64)) {
            return Ok(());
        }
        Err(Error::InvalidParameter {
            op: UNNAMED,
            arg,
            expected: format!(
                "device indices known to repeat no position within a plane of {plane} (uploaded \
                 without repeats, or written by a forward whose windows do not overlap)"
            ),
            got: "indices that may repeat a position: unpool them on the host, where poolgrad \
                  keeps the last of equal indices"
                .to_string(),
        })
    }
}

/// Whether no run `[jK, (j+1)K)` of `values` (`K` = `run`, the last run possibly shorter) holds a
/// value twice.
fn no_repeat_in_runs(values: impl Iterator<Item = i64>, run: usize) -> bool {
    let mut scratch = Vec::with_capacity(run);
    let mut values = values.peekable();
    while values.peek().is_some() {
        scratch.clear();
        scratch.extend(values.by_ref().take(run));
        scratch.sort_unstable();
        if scratch.windows(2).any(|w| w[0] == w[1]) {
            return false;
        }
    }
    true
}

/// A read-only view of elements in an Ascend device's memory: what a [`TensorRef`]`<E, Npu>`
/// holds. Made by [`NpuTensor::view`] or [`TensorRef::from_device_ptr`].
pub struct DeviceRef<'a, E: Element> {
    addr: DeviceAddr,
    shape: [usize; 4],
    device_id: i32,
    values: Values,
    life: PhantomData<&'a [E]>,
}

impl<E: Element> Clone for DeviceRef<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Element> Copy for DeviceRef<'_, E> {}

impl<E: Element> fmt::Debug for DeviceRef<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceRef")
            .field("device_id", &self.device_id)
            .field("shape", &self.shape)
            .field("dtype", &E::DTYPE)
            .finish_non_exhaustive()
    }
}

/// A writable view of elements in an Ascend device's memory: what a [`TensorMut`]`<E, Npu>`
/// holds. Made by [`NpuTensor::view_mut`] or [`TensorMut::from_device_ptr`].
pub struct DeviceMut<'a, E: Element> {
    addr: DeviceAddr,
    shape: [usize; 4],
    device_id: i32,
    /// Where an [`NpuTensor`] keeps what is known of its values; `None` for the caller's memory.
    values: Option<&'a Mutex<Values>>,
    life: PhantomData<&'a mut [E]>,
}

impl<E: Element> fmt::Debug for DeviceMut<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMut")
            .field("device_id", &self.device_id)
            .field("shape", &self.shape)
            .field("dtype", &E::DTYPE)
            .finish_non_exhaustive()
    }
}

impl<E: Element> DeviceRef<'_, E> {
    pub(crate) fn addr(&self) -> DeviceAddr {
        self.addr
    }

    pub(crate) fn device_id(&self) -> i32 {
        self.device_id
    }

    pub(crate) fn values(&self) -> Values {
        self.values
    }
}

impl<E: Element> DeviceMut<'_, E> {
    pub(crate) fn addr(&self) -> DeviceAddr {
        self.addr
    }

    pub(crate) fn device_id(&self) -> i32 {
        self.device_id
    }

    /// Records what a launch writes into this tensor's values (nothing for the caller's memory).
    pub(crate) fn set_values(&self, values: Values) {
        if let Some(slot) = self.values {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = values;
        }
    }

    /// The byte length of the elements.
    pub(crate) fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * size_of::<E>()
    }
}

/// A 3-D `[C, H, W]`, 4-D `[N, C, H, W]` (or `[C, D, H, W]`) or 5-D `[N, C, D, H, W]` shape as
/// 4-D (a 5-D shape with `D` and `H` merged, as host views see it); another rank, or an element
/// count (in bytes) past `isize::MAX`, is an error naming `arg`.
fn device_shape<E: Element>(arg: &'static str, shape: &[usize]) -> Result<[usize; 4]> {
    if !(3..=5).contains(&shape.len()) {
        return Err(Error::Rank {
            op: UNNAMED,
            arg,
            expected: VIEW_RANKS,
            got: shape.len(),
            shape: shape.to_vec(),
        });
    }
    let bytes = shape.iter().try_fold(size_of::<E>(), |a, &d| a.checked_mul(d));
    match bytes {
        Some(b) if b <= isize::MAX as usize => Ok(as_4d(shape)),
        _ => Err(Error::Overflow {
            op: UNNAMED,
            arg,
            what: format!("the byte count of shape {shape:?} of {}", E::DTYPE),
        }),
    }
}

/// Checks a caller's device pointer and strides: non-null unless the tensor is empty, aligned to
/// the element, strides of a contiguous row-major tensor (an axis of length 0 or 1 may have any).
fn check_device_ptr<E: Element>(ptr: *const c_void, shape: &[usize], strides: &[usize]) -> Result<()> {
    let count: usize = shape.iter().product();
    if count > 0 && ptr.is_null() {
        return Err(Error::InvalidParameter {
            op: UNNAMED,
            arg: "ptr",
            expected: "device memory (a non-null address)".to_string(),
            got: "a null pointer".to_string(),
        });
    }
    if !(ptr as usize).is_multiple_of(align_of::<E>()) {
        return Err(Error::InvalidParameter {
            op: UNNAMED,
            arg: "ptr",
            expected: format!("an address aligned to {} bytes ({})", align_of::<E>(), E::DTYPE),
            got: format!("{ptr:p}"),
        });
    }
    if strides.len() != shape.len() {
        return Err(Error::Layout {
            op: UNNAMED,
            arg: "strides",
            reason: format!(
                "has {} entries {strides:?}, expected one per dimension of shape {shape:?}",
                strides.len()
            ),
        });
    }
    let mut expected = 1usize;
    for axis in (0..shape.len()).rev() {
        if shape[axis] > 1 && strides[axis] != expected {
            return Err(Error::Layout {
                op: UNNAMED,
                arg: "strides",
                reason: format!(
                    "{strides:?} with shape {shape:?} are not row-major contiguous (axis {axis} needs \
                     stride {expected}): device tensors are passed to CANN contiguous; make the tensor \
                     contiguous first (for example `.contiguous()` in torch)"
                ),
            });
        }
        expected = expected.saturating_mul(shape[axis]);
    }
    Ok(())
}

impl<'a, E: Element> TensorRef<'a, E, super::Npu> {
    /// A read-only view of `shape` elements of type `E` at device address `ptr` on `device`'s
    /// NPU, with `strides` in elements (those of a row-major contiguous tensor; an axis of length
    /// 0 or 1 may have any): for example a torch_npu tensor's `data_ptr()`, `shape` and
    /// `stride()`, or memory from `aclrtMalloc`.
    ///
    /// # Safety
    /// For the whole lifetime `'a`:
    /// - `ptr` is the address of device memory on the NPU `device` opened (its `device_id`),
    ///   allocated by CANN (`aclrtMalloc`, or an allocator on top of it such as torch_npu's),
    ///   holding at least `shape`'s element count of `E`, aligned to `E`;
    /// - the memory stays allocated, and nothing writes it while an operator that reads it may
    ///   run: until the stream it was queued on has been synchronised (or its completion otherwise
    ///   waited for) after the last such operator;
    /// - when the view is passed as indices or as an `I32Argmax` mask to a backward, every value
    ///   lies in `[0, H * W)` of that backward's input plane (`[0, D * H * W)` of its volume for
    ///   the 3-D operators): CANN does not check them, and poolgrad cannot without copying them
    ///   to the host.
    /// - when the view is passed as indices to an unpooling or its backward, no position repeats
    ///   within a plane: poolgrad's rule for repeated indices (the last one wins) needs the
    ///   values on the host, and the device's scatter keeps one of equal indices, not defined
    ///   which.
    ///
    /// # Errors
    /// [`Error::Rank`] for a rank other than 3, 4 or 5; [`Error::InvalidParameter`] (`ptr`) for a
    /// null or misaligned address; [`Error::Layout`] for strides that are not row-major
    /// contiguous; [`Error::Overflow`] for a byte count past `isize::MAX`.
    // `unsafe` by contract only: the body has no unsafe operation.
    #[allow(unsafe_code)]
    pub unsafe fn from_device_ptr(
        device: &Ascend,
        ptr: *const c_void,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self> {
        const OP: &str = "TensorRef::from_device_ptr";
        let shape4 = device_shape::<E>("shape", shape)
            .and_then(|dims| check_device_ptr::<E>(ptr, shape, strides).map(|()| dims))
            .map_err(|e| e.named(OP))?;
        let data = DeviceRef {
            addr: DeviceAddr(ptr as usize),
            shape: shape4,
            device_id: device.device_id(),
            values: Values::Promised,
            life: PhantomData,
        };
        Ok(TensorRef::from_parts(data, shape))
    }
}

impl<'a, E: Element> TensorMut<'a, E, super::Npu> {
    /// A writable view of `shape` elements of type `E` at device address `ptr` on `device`'s NPU,
    /// under the contract of [`TensorRef::from_device_ptr`].
    ///
    /// # Safety
    /// As [`TensorRef::from_device_ptr`], and for the whole lifetime `'a` nothing else reads or
    /// writes the memory while an operator that writes it may run (until the stream it was
    /// queued on has been synchronised after the last one).
    ///
    /// # Errors
    /// As [`TensorRef::from_device_ptr`].
    // `unsafe` by contract only: the body has no unsafe operation.
    #[allow(unsafe_code)]
    pub unsafe fn from_device_ptr(
        device: &Ascend,
        ptr: *mut c_void,
        shape: &[usize],
        strides: &[usize],
    ) -> Result<Self> {
        const OP: &str = "TensorMut::from_device_ptr";
        let shape4 = device_shape::<E>("shape", shape)
            .and_then(|dims| check_device_ptr::<E>(ptr, shape, strides).map(|()| dims))
            .map_err(|e| e.named(OP))?;
        let data = DeviceMut {
            addr: DeviceAddr(ptr as usize),
            shape: shape4,
            device_id: device.device_id(),
            values: None,
            life: PhantomData,
        };
        Ok(TensorMut::from_parts(data, shape))
    }
}

/// A tensor in an Ascend device's memory, owned by poolgrad: allocated with `aclrtMalloc`, freed
/// on drop, shape `[C, H, W]`, `[N, C, H, W]` (or `[C, D, H, W]`) or `[N, C, D, H, W]`, row-major,
/// elements `E`.
///
/// It is the input or output of any operation whose descriptor's memory is [`Npu`], on an
/// [`AscendStream`](super::AscendStream) of its device; `(&tensor).into()` and
/// `(&mut tensor).into()` make the views. Copies to and from the host are explicit
/// ([`NpuTensor::from_array`], [`NpuTensor::to_array`]); nothing else copies.
///
/// **Freeing and reading wait for poolgrad's own stream.** While work that poolgrad queued on
/// its own stream ([`Ascend::stream`]) may be running, dropping a tensor or copying one to the
/// host first waits for that stream, so memory is never freed or read under a kernel. Work
/// queued on a caller's stream ([`AscendStream::from_raw`](super::AscendStream::from_raw)) is the
/// caller's to wait for, as that constructor's contract says.
pub struct NpuTensor<E: Element> {
    /// `None` for a tensor of no elements.
    buffer: Option<DeviceBuffer>,
    session: Arc<Session>,
    device_id: i32,
    /// The shape seen as 4-D (`D` and `H` of a 5-D shape merged), as in its views.
    shape: [usize; 4],
    /// The shape in the rank it was made with.
    dims: Vec<usize>,
    values: Mutex<Values>,
    element: PhantomData<E>,
}

impl<E: Element> fmt::Debug for NpuTensor<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NpuTensor")
            .field("device_id", &self.device_id)
            .field("dims", &self.dims())
            .field("dtype", &E::DTYPE)
            .finish()
    }
}

impl<E: Element> NpuTensor<E> {
    /// Device memory for `shape` on `device`, not yet written.
    pub(super) fn alloc(device: &Ascend, shape: &[usize], values: Values) -> Result<Self> {
        let shape4 = device_shape::<E>("shape", shape)?;
        let bytes = shape4.iter().product::<usize>() * size_of::<E>();
        let session = Arc::clone(&device.session);
        let buffer = if bytes == 0 { None } else { Some(session.alloc(bytes)?) };
        let (device_id, values, element) = (device.device_id(), Mutex::new(values), PhantomData);
        Ok(NpuTensor { buffer, session, device_id, shape: shape4, dims: shape.to_vec(), values, element })
    }

    /// A tensor of zeros of `shape` (rank 3, 4 or 5) on `device` (`aclrtMalloc`, then `aclrtMemset`).
    ///
    /// # Errors
    /// [`Error::Rank`], [`Error::Overflow`], and [`AscendError::Cann`](crate::AscendError::Cann)
    /// if the memory cannot be had.
    pub fn zeros(device: &Ascend, shape: &[usize]) -> Result<Self> {
        let t = Self::alloc(device, shape, Values::Written { below: 1, distinct_in: 1 })
            .map_err(|e| e.named("NpuTensor::zeros"))?;
        if let Some(b) = &t.buffer {
            t.session.zero(b)?;
        }
        Ok(t)
    }

    /// A copy of `array` (rank 3, 4 or 5, any strides) on `device` (`aclrtMalloc`, then one
    /// `aclrtMemcpy`; a non-contiguous array is gathered on the host first). Index values are
    /// read on the way, so that a backward can refuse one outside its plane before the device
    /// sees it.
    ///
    /// # Errors
    /// As [`NpuTensor::zeros`].
    pub fn from_array<S, D>(device: &Ascend, array: &ArrayBase<S, D>) -> Result<Self>
    where
        S: Data<Elem = E>,
        D: ViewDim,
    {
        const OP: &str = "NpuTensor::from_array";
        let owned;
        let host: &[E] = match array.as_slice() {
            Some(s) => s,
            None => {
                owned = collect_exact(OP, "array", array.len(), array.iter().copied())?;
                &owned
            }
        };
        let t =
            Self::alloc(device, array.shape(), Values::scan(host, array.shape())).map_err(|e| e.named(OP))?;
        if let Some(b) = &t.buffer {
            t.session.copy_in(b, bytemuck::cast_slice(host))?;
        }
        Ok(t)
    }

    /// A copy of the tensor on the host, in its rank (`aclrtMemcpy`), once poolgrad's own stream
    /// has finished what it queued; work on a caller's stream must be waited for by the caller
    /// first.
    ///
    /// # Errors
    /// [`AscendError::Cann`](crate::AscendError::Cann) if the wait or the copy fails.
    pub fn to_array(&self) -> Result<ArrayD<E>> {
        const OP: &str = "NpuTensor::to_array";
        let mut host = zeroed_vec::<E>(OP, "tensor", self.shape.iter().product())?;
        if let Some(b) = &self.buffer {
            self.session.copy_out(b, bytemuck::cast_slice_mut(&mut host))?;
        }
        ArrayD::from_shape_vec(IxDyn(&self.dims()), host).map_err(|e| Error::from_shape(OP, "tensor", e))
    }

    /// A read-only view, for an operation descriptor.
    pub fn view(&self) -> TensorRef<'_, E, Npu> {
        let values = *self.values.lock().unwrap_or_else(|e| e.into_inner());
        let data = DeviceRef {
            addr: self.addr(),
            shape: self.shape,
            device_id: self.device_id,
            values,
            life: PhantomData,
        };
        TensorRef::from_parts(data, &self.dims)
    }

    /// A writable view, for an operation descriptor's output.
    pub fn view_mut(&mut self) -> TensorMut<'_, E, Npu> {
        let data = DeviceMut {
            addr: self.addr(),
            shape: self.shape,
            device_id: self.device_id,
            values: Some(&self.values),
            life: PhantomData,
        };
        TensorMut::from_parts(data, &self.dims)
    }

    fn addr(&self) -> DeviceAddr {
        self.buffer.as_ref().map_or(DeviceAddr::NULL, DeviceBuffer::addr)
    }

    /// The device address of the first element (null for an empty tensor), for handing the
    /// memory to another library, under the same rules as [`TensorRef::from_device_ptr`].
    pub fn device_ptr(&self) -> *const c_void {
        self.addr().0 as *const c_void
    }

    /// The shape in the rank the tensor was made with.
    pub fn dims(&self) -> Vec<usize> {
        self.dims.clone()
    }

    /// The device the memory is on.
    pub fn device_id(&self) -> i32 {
        self.device_id
    }
}

impl<'a, E: Element> From<&'a NpuTensor<E>> for TensorRef<'a, E, Npu> {
    fn from(t: &'a NpuTensor<E>) -> Self {
        t.view()
    }
}

impl<'a, E: Element> From<&'a mut NpuTensor<E>> for TensorMut<'a, E, Npu> {
    fn from(t: &'a mut NpuTensor<E>) -> Self {
        t.view_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run without repeats found on upload: the volume (last three axes) when no volume
    /// repeats a value, else the plane (last two), else none; and what `check_distinct` then
    /// lets through.
    #[test]
    fn uploads_record_the_planes_without_repeats() {
        let distinct_in = |values: &[i64], shape: &[usize]| match Values::scan(values, shape) {
            Values::Scanned { distinct_in, .. } => distinct_in,
            other => panic!("{other:?}"),
        };
        // Two volumes of 1 x 2 x 2: [0, 1, 2, 3] and [3, 2, 1, 0].
        assert_eq!(distinct_in(&[0, 1, 2, 3, 3, 2, 1, 0], &[1, 2, 1, 2, 2]), 4);
        // The volume [0, 1, 0, 1] repeats; its planes [0, 1] do not.
        assert_eq!(distinct_in(&[0, 1, 0, 1], &[1, 1, 2, 1, 2]), 2);
        // A plane repeats.
        assert_eq!(distinct_in(&[0, 1, 1, 2], &[1, 1, 2, 2]), 0);
        let i32s = [0i32, 1, 0, 1];
        assert!(matches!(
            Values::scan(&i32s, &[1, 2, 1, 2]),
            Values::Scanned { distinct_in: 2, below: 2, .. }
        ));
        // A negative value bounds nothing.
        assert!(matches!(Values::scan(&[0i64, -1], &[1, 1, 2]), Values::Scanned { distinct_in: 0, .. }));
        let planes_of_two = Values::Scanned { below: 2, witness: (1, 1), distinct_in: 2 };
        assert!(planes_of_two.check_distinct("indices", 2).is_ok());
        assert!(planes_of_two.check_distinct("indices", 1).is_ok());
        assert!(planes_of_two.check_distinct("indices", 4).is_err());
        assert!(Values::Written { below: 1, distinct_in: 1 }.check_distinct("indices", 2).is_err());
        assert!(Values::Unknown.check_distinct("indices", 2).is_err());
        assert!(Values::Unknown.check_distinct("indices", 0).is_ok(), "no plane, nothing to repeat");
        assert!(Values::Promised.check_distinct("indices", 9).is_ok(), "the caller's contract");
    }
}
