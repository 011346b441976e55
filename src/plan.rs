//! The two-phase API, as in aclnn: a [`Plan`] validates an operation and reports its workspace
//! size (phase 1, `aclnnXxxGetWorkspaceSize`); bound to a [`Workspace`] it becomes an
//! [`Executor`] that runs once (phase 2, `aclnnXxx`).

use core::fmt;

use crate::device::internal::Launch;
use crate::device::{Device, Runs};
use crate::error::{Error, Result};
use crate::op::Operation;

/// A validated operation bound to a device (phase 1).
///
/// [`Plan::new`] performs every check that needs no tensor data: ranks, shapes, strides,
/// parameters and the device's limits. Running then fails only for device reasons or, on the
/// CPU, for an index outside its plane (checked as it is used, so the indices are read once).
///
/// ```
/// use poolgrad::{Plan, TensorMut, TensorRef, Workspace, device::cpu::Cpu, op::AdaptiveMaxPool2dBackward};
/// let cpu = Cpu::sequential();
/// let x = [0.0f32; 6];
/// let (g, idx) = ([1.0f32, 2.0], [0i64, 5]);
/// let mut gi = [0.0f32; 6];
/// let plan = Plan::new(&cpu, AdaptiveMaxPool2dBackward {
///     grad_output: TensorRef::from_slice(&g, &[1, 1, 2])?,
///     self_: TensorRef::from_slice(&x, &[1, 2, 3])?,
///     indices: TensorRef::from_slice(&idx, &[1, 1, 2])?,
///     grad_input: TensorMut::from_slice(&mut gi, &[1, 2, 3])?,
/// })?;
/// let mut ws = Workspace::new(&cpu, plan.workspace_size())?; // reusable across plans
/// plan.bind(&mut ws)?.run()?;
/// assert_eq!(gi, [1.0, 0.0, 0.0, 0.0, 0.0, 2.0]);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[must_use = "a plan does nothing until it is run"]
pub struct Plan<'d, D: Runs<O>, O: Operation> {
    device: &'d D,
    op: O,
    geometry: O::Geometry,
    prepared: <D as Launch<O>>::Prepared,
    workspace_size: usize,
}

impl<D: Runs<O>, O: Operation + fmt::Debug> fmt::Debug for Plan<'_, D, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("device", self.device)
            .field("op", &self.op)
            .field("geometry", &self.geometry)
            .field("workspace_size", &self.workspace_size)
            .finish_non_exhaustive()
    }
}

impl<'d, D: Runs<O>, O: Operation> Plan<'d, D, O> {
    /// Phase 1: validates `op` for `device` and computes the workspace it needs.
    ///
    /// # Errors
    /// Every validation error of the operation ([`Error::Rank`], [`Error::ShapeMismatch`],
    /// [`Error::EmptyDimension`], [`Error::InvalidParameter`], [`Error::OutputTooSmall`],
    /// [`Error::IndexTypeTooNarrow`], [`Error::Overflow`]) and [`Error::DeviceLimit`].
    pub fn new(device: &'d D, op: O) -> Result<Self> {
        let geometry = op.validate()?;
        Self::checked(device, op, geometry)
    }

    /// Phase 1 of an `op` already checked: `geometry` is what its inputs' check returned, and
    /// its outputs were allocated to the shapes `geometry` gives (the free functions'
    /// allocating forms), so `validate` would find nothing; only the device is asked.
    pub(crate) fn checked(device: &'d D, op: O, geometry: O::Geometry) -> Result<Self> {
        // The device's errors are named here, once, for the operation the caller asked for.
        let phase_1 = || {
            device.limits().check(&O::demands(&geometry), device.name())?;
            device.prepare(&op, &geometry)
        };
        let (prepared, workspace_size) = phase_1().map_err(|e| e.named(O::NAME))?;
        Ok(Self { device, op, geometry, prepared, workspace_size })
    }

    /// Bytes of workspace the plan needs (0 when the kernels need none).
    pub fn workspace_size(&self) -> usize {
        self.workspace_size
    }

    /// Sizes derived during validation.
    pub fn geometry(&self) -> &O::Geometry {
        &self.geometry
    }

    /// Binds a workspace of at least [`Plan::workspace_size`] bytes (phase 2 starts here).
    ///
    /// # Errors
    /// [`Error::WorkspaceTooSmall`].
    pub fn bind<'w>(self, workspace: &'w mut Workspace<D>) -> Result<Executor<'d, 'w, D, O>> {
        if workspace.len() < self.workspace_size {
            return Err(Error::WorkspaceTooSmall {
                op: O::NAME,
                expected: self.workspace_size,
                got: workspace.len(),
            });
        }
        Ok(Executor { plan: self, workspace })
    }

    /// Runs in `workspace`, growing it first if it is smaller than [`Plan::workspace_size`]: the
    /// form for loops that run many plans with one workspace.
    ///
    /// ```
    /// use ndarray::Array4;
    /// use poolgrad::{Plan, Workspace, device::cpu::Cpu, op::AdaptiveMaxPool2dBackward};
    /// let cpu = Cpu::sequential();
    /// let mut ws = Workspace::new(&cpu, 0)?; // grows on demand, then is reused
    /// for size in [4, 8, 16] {
    ///     let x = Array4::<f32>::zeros((1, 2, size, size));
    ///     let (g, idx) = (Array4::<f32>::ones((1, 2, 2, 2)), Array4::<i64>::zeros((1, 2, 2, 2)));
    ///     let mut gi = Array4::<f32>::zeros(x.raw_dim());
    ///     let op = AdaptiveMaxPool2dBackward {
    ///         grad_output: (&g).into(),
    ///         self_: (&x).into(),
    ///         indices: (&idx).into(),
    ///         grad_input: (&mut gi).into(),
    ///     };
    ///     Plan::new(&cpu, op)?.run_in(&mut ws)?;
    ///     assert_eq!(gi[[0, 1, 0, 0]], 4.0);
    /// }
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Allocation`] if the workspace cannot grow, and the errors of [`Executor::run`].
    pub fn run_in(self, workspace: &mut Workspace<D>) -> Result<()> {
        workspace.ensure(self.device, self.workspace_size)?;
        self.bind(workspace)?.run()
    }

    /// Allocates the workspace, binds it and runs: phase 2 in one call.
    ///
    /// # Errors
    /// [`Error::Allocation`] if the workspace cannot be allocated, and the errors of
    /// [`Executor::run`].
    pub fn run(self) -> Result<()> {
        let mut workspace = Workspace::new(self.device, self.workspace_size)?;
        self.bind(&mut workspace)?.run()
    }
}

/// A plan bound to its workspace, ready to run once (phase 2).
///
/// ```
/// use ndarray::{Array4, array};
/// use poolgrad::{MaxPool2dParams, Plan, Workspace, device::cpu::Cpu, op::MaxPool2dWithIndices};
/// let cpu = Cpu::sequential();
/// let x = array![[[[1.0f32, 4.0], [3.0, 2.0]]]];
/// let (mut out, mut idx) = (Array4::<f32>::zeros((1, 1, 1, 1)), Array4::<i32>::zeros((1, 1, 1, 1)));
/// let op = MaxPool2dWithIndices {
///     input: (&x).into(),
///     params: MaxPool2dParams::new([2, 2]),
///     output: (&mut out).into(),
///     indices: (&mut idx).into(),
/// };
/// let plan = Plan::new(&cpu, op)?;
/// let mut ws = Workspace::new(&cpu, plan.workspace_size())?;
/// let executor = plan.bind(&mut ws)?; // the workspace is borrowed until the run
/// executor.run()?;
/// assert_eq!((out[[0, 0, 0, 0]], idx[[0, 0, 0, 0]]), (4.0, 1));
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[must_use = "an executor does nothing until it is run"]
pub struct Executor<'d, 'w, D: Runs<O>, O: Operation> {
    plan: Plan<'d, D, O>,
    workspace: &'w mut Workspace<D>,
}

impl<D: Runs<O>, O: Operation + fmt::Debug> fmt::Debug for Executor<'_, '_, D, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor").field("plan", &self.plan).field("workspace", &self.workspace).finish()
    }
}

impl<D: Runs<O>, O: Operation> Executor<'_, '_, D, O> {
    /// Runs the operation, writing its outputs.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] for the first index (or `I32Argmax` mask value) outside its
    /// `H * W` plane, in row-major order, whatever the thread count; the gradient is then all
    /// zeros. Device errors on devices other than the CPU.
    pub fn run(self) -> Result<()> {
        let Plan { device, op, geometry, prepared, .. } = self.plan;
        device.launch(op, &geometry, prepared, &mut self.workspace.memory).map_err(|e| e.named(O::NAME))
    }
}

/// Scratch memory for plans on device `D`, reusable across plans of at most its size.
///
/// ```
/// use poolgrad::{Error, Workspace, device::cpu::Cpu};
/// let cpu = Cpu::sequential();
/// let mut ws = Workspace::new(&cpu, 1000)?;
/// assert!(ws.len() >= 1000); // the CPU rounds up to whole cache lines
/// ws.ensure(&cpu, 5000)?; // grows when a larger plan comes (see also `Plan::run_in`)
/// assert!(ws.len() >= 5000);
/// // Memory that cannot be had is an error, not an abort.
/// assert!(matches!(Workspace::new(&cpu, usize::MAX), Err(Error::Allocation { .. } | Error::Overflow { .. })));
/// # Ok::<(), poolgrad::Error>(())
/// ```
pub struct Workspace<D: Device> {
    memory: D::Memory,
}

impl<D: Device> fmt::Debug for Workspace<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace").field("bytes", &self.len()).finish()
    }
}

impl<D: Device> Workspace<D> {
    /// Allocates at least `bytes` bytes of workspace on `device` (the CPU rounds up to whole
    /// 64-byte cache lines; [`Workspace::len`] says how many bytes it got).
    ///
    /// # Errors
    /// [`Error::Allocation`] when the memory cannot be had (never an abort).
    pub fn new(device: &D, bytes: usize) -> Result<Self> {
        Ok(Self { memory: device.alloc_workspace(bytes)? })
    }

    /// A workspace of `memory` that a device made itself (for a device that keeps one).
    #[cfg_attr(not(feature = "ascend"), allow(dead_code))] // `AscendStream`'s own workspace
    pub(crate) fn of_memory(memory: D::Memory) -> Self {
        Self { memory }
    }

    /// Grows the workspace to at least `bytes` bytes on `device` if it is smaller (its contents
    /// are not kept); does nothing if it is large enough.
    ///
    /// ```
    /// use poolgrad::{Workspace, device::cpu::Cpu};
    /// let cpu = Cpu::sequential();
    /// let mut ws = Workspace::new(&cpu, 100)?;
    /// ws.ensure(&cpu, 1000)?;
    /// assert!(ws.len() >= 1000);
    /// ws.ensure(&cpu, 10)?; // never shrinks
    /// assert!(ws.len() >= 1000);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Allocation`] when the memory cannot be had; the workspace is then unchanged.
    pub fn ensure(&mut self, device: &D, bytes: usize) -> Result<()> {
        if self.len() < bytes {
            self.memory = device.alloc_workspace(bytes)?;
        }
        Ok(())
    }

    /// Usable size in bytes.
    pub fn len(&self) -> usize {
        D::workspace_len(&self.memory)
    }

    /// Whether the workspace has no usable bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
