//! Devices that run plans: the [`Device`] trait and its implementations.
//!
//! - [`Cpu`](cpu::Cpu): safe Rust kernels, sequential or on rayon thread pools.
//! - `Ascend` (feature `ascend`): an Ascend NPU through CANN's aclnn operators, for all six
//!   operations (adaptive, with indices and with mask; forward and backward).
//!
//! A device implements [`Runs<O>`] for each operation `O` it can execute; a missing
//! implementation is a compile error, not a run-time one.

use core::fmt;

use crate::error::Result;
use crate::op::Operation;
mod limits;
pub use limits::DeviceLimits;

#[cfg(feature = "ascend")]
pub mod ascend;
pub mod cpu;

pub(crate) mod internal {
    use super::*;

    /// How a device holds workspace memory. Not part of the public API.
    pub trait DeviceImpl {
        /// Workspace memory.
        type Memory: Send + fmt::Debug;
        /// Allocates at least `bytes` bytes of workspace.
        fn alloc_workspace(&self, bytes: usize) -> Result<Self::Memory>;
        /// The usable size of `memory`, in bytes.
        fn workspace_len(memory: &Self::Memory) -> usize;
    }

    /// How a device runs operation `O`. Not part of the public API.
    pub trait Launch<O: Operation>: DeviceImpl {
        /// What phase 1 leaves for phase 2 (buffer layout, device handles).
        type Prepared: Send;
        /// Phase 1 after the device-independent checks: returns the state and workspace bytes.
        fn prepare(&self, op: &O, geometry: &O::Geometry) -> Result<(Self::Prepared, usize)>;
        /// Phase 2.
        fn launch(
            &self,
            op: O,
            geometry: &O::Geometry,
            prepared: Self::Prepared,
            workspace: &mut Self::Memory,
        ) -> Result<()>;
    }
}

/// A device that executes plans. Sealed: the implementations are [`cpu::Cpu`] (and, with the
/// `ascend` feature, the Ascend NPU).
pub trait Device: internal::DeviceImpl + fmt::Debug + Send + Sync {
    /// Short name used in error messages, e.g. `"cpu"`.
    fn name(&self) -> &'static str;

    /// Limits of this device beyond the operations' own rules, checked in phase 1.
    fn limits(&self) -> DeviceLimits;
}

/// Marks that device `Self` can run operation `O` (through [`Plan`](crate::Plan)).
pub trait Runs<O: Operation>: Device + internal::Launch<O> {}

impl<D, O> Runs<O> for D
where
    D: Device + internal::Launch<O>,
    O: Operation,
{
}
