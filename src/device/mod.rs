//! Devices that run plans: the [`Device`] trait and its implementations.
//!
//! - [`Cpu`](cpu::Cpu): safe Rust kernels, sequential or on rayon thread pools.
//! - `Ascend` (feature `ascend`): an Ascend NPU through CANN's aclnn operators, for the six 2-D
//!   operations (adaptive, with indices and with mask; forward and backward), the four 3-D
//!   poolings, max unpooling and the double backwards.
//!
//! A device implements [`Runs<O>`] for each operation `O` it can execute; a missing
//! implementation is a compile error, not a run-time one. What a device can run beyond the
//! operations' own rules is its [`DeviceLimits`], checked against what an operation demands
//! (which each operation states from its geometry).

use core::fmt;

use crate::error::{DeviceLimitKind, Error, Result, UNNAMED};
use crate::geometry::adaptive_is_divisible;
use crate::op::Operation;
use crate::op::internal::Demands;

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

/// Built by the devices only (`Default` is no limit, as on the CPU).
#[cfg(any(test, feature = "ascend"))]
impl DeviceLimits {
    /// These limits with a largest plane `H * W`.
    #[must_use]
    pub(crate) fn with_max_plane(mut self, max: usize) -> Self {
        self.max_plane = Some(max);
        self
    }

    /// These limits with a largest non-divisible adaptive plane.
    #[must_use]
    pub(crate) fn with_max_non_divisible_adaptive_plane(mut self, max: usize) -> Self {
        self.max_non_divisible_adaptive_plane = Some(max);
        self
    }
}

impl DeviceLimits {
    /// Checks what an operation demands against these limits of device `device` (phase 1,
    /// before any device call).
    ///
    /// # Errors
    /// [`Error::DeviceLimit`] (`PlaneSize`) for a plane above `max_plane`, or an adaptive
    /// backward's non-divisible plane above `max_non_divisible_adaptive_plane`.
    pub(crate) fn check(&self, demands: &Demands, device: &'static str) -> Result<()> {
        let [h, w] = demands.plane;
        self.check_plane(h, w, device)?;
        let plane = h * w;
        if let (Some(max), Some(pooled)) = (self.max_non_divisible_adaptive_plane, demands.adaptive_backward)
            && plane > max
            && !adaptive_is_divisible([h, w], pooled)
        {
            return Err(Error::DeviceLimit {
                device,
                op: UNNAMED,
                about: DeviceLimitKind::PlaneSize,
                limit: format!("at most {max} when H % Ho != 0 or W % Wo != 0"),
                got: format!("{plane} ({h}x{w} pooled to {}x{})", pooled[0], pooled[1]),
            });
        }
        Ok(())
    }

    /// Refuses a plane `h * w` above `max_plane` on `device` (`DeviceLimitKind::PlaneSize`).
    pub(crate) fn check_plane(&self, h: usize, w: usize, device: &'static str) -> Result<()> {
        match self.max_plane {
            Some(max) if h * w > max => Err(Error::DeviceLimit {
                device,
                op: UNNAMED,
                about: DeviceLimitKind::PlaneSize,
                limit: format!("at most {max}"),
                got: (h * w).to_string(),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an adaptive pooling of an `h x w` plane to `ho x wo` demands: the backward (`true`)
    /// or the forward.
    fn adaptive(h: usize, w: usize, ho: usize, wo: usize, backward: bool) -> Demands {
        Demands { plane: [h, w], adaptive_backward: backward.then_some([ho, wo]) }
    }

    #[test]
    fn device_limits_are_enforced() {
        let limits = DeviceLimits::default().with_max_non_divisible_adaptive_plane(1 << 24);
        // Divisible: no limit applies.
        assert!(limits.check(&adaptive(8192, 8192, 4096, 4096, true), "npu").is_ok());
        // Non-divisible and larger than 2^24.
        let e = limits.check(&adaptive(4097, 4097, 7, 7, true), "npu").unwrap_err();
        assert!(
            matches!(&e, Error::DeviceLimit { device: "npu", about: DeviceLimitKind::PlaneSize, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("16785409"), "{e}");
        // Non-divisible but small.
        assert!(limits.check(&adaptive(30, 30, 7, 7, true), "npu").is_ok());
        // The forward has no such limit (CANN documents it for the backward only).
        assert!(limits.check(&adaptive(4097, 4097, 7, 7, false), "npu").is_ok());

        let limits = DeviceLimits::default().with_max_plane(100);
        let e = limits.check(&adaptive(10, 11, 2, 2, true), "npu").unwrap_err();
        assert_eq!(
            e.named("adaptive_max_pool2d_backward").to_string(),
            "adaptive_max_pool2d_backward on npu: H * W is 110, but the device supports at most 100"
        );
        assert!(limits.check(&adaptive(10, 10, 2, 2, true), "npu").is_ok());
    }
}
