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

/// Per-device limits, checked by [`Plan::new`](crate::Plan::new) before any device call. `None`
/// means no limit.
///
/// ```
/// use poolgrad::device::{Device, cpu::Cpu};
/// let limits = Cpu::sequential().limits();
/// assert_eq!(limits.max_plane, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceLimits {
    /// Largest plane `H * W` of any pooling input.
    pub max_plane: Option<usize>,
    /// Largest plane `H * W` of an adaptive pooling backward whose windows are not all equal
    /// (`H % Ho != 0` or `W % Wo != 0`). CANN's AdaptiveMaxPool2dBackward documents 2^24; the
    /// forward has no such limit.
    pub max_non_divisible_adaptive_plane: Option<usize>,
}

impl DeviceLimits {
    /// No limits (the CPU).
    pub fn none() -> Self {
        Self::default()
    }

    /// These limits with a largest plane `H * W`.
    #[must_use]
    pub fn with_max_plane(mut self, max: usize) -> Self {
        self.max_plane = Some(max);
        self
    }

    /// These limits with a largest non-divisible adaptive plane.
    #[must_use]
    pub fn with_max_non_divisible_adaptive_plane(mut self, max: usize) -> Self {
        self.max_non_divisible_adaptive_plane = Some(max);
        self
    }
}
