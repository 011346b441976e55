//! What each Ascend SoC supports: operators, dtypes and the mask layout it writes.
//!
//! Sources (shared/docs/ascend-semantics.md): the mask dispatch by SoC and kernel size (A.0), the
//! dtypes per product (A.4: "A2/A3 FLOAT/FLOAT16/BFLOAT16; Atlas training no BF16; 310P forward
//! FLOAT only, backward unsupported on 310P"), the adaptive operators on A2/A3 only (B, and the
//! ops-nn `aclnnAdaptiveMaxPool2d.md` support table), and the mask operators' rejection on
//! Ascend 950 (A.0).

use core::fmt;

use crate::element::DType;
use crate::mask::layout_repr::LayoutKind;

/// The product family of an Ascend SoC, from its name (`aclrtGetSocName`).
///
/// ```
/// use poolgrad::device::ascend::SocFamily;
/// assert_eq!(SocFamily::from_soc_name("Ascend910B3"), SocFamily::AtlasA2A3);
/// assert_eq!(SocFamily::from_soc_name("Ascend910_9391"), SocFamily::AtlasA2A3);
/// assert_eq!(SocFamily::from_soc_name("Ascend910ProB"), SocFamily::AtlasTraining);
/// assert_eq!(SocFamily::from_soc_name("Ascend310P3"), SocFamily::Atlas310P);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SocFamily {
    /// Atlas A2/A3 (`Ascend910B*`, `Ascend910_93*`): every operator here; f32, f16, bf16; masks
    /// in the `I32Argmax` layout except for 1x1 kernels.
    AtlasA2A3,
    /// Atlas training (`Ascend910A`, `Ascend910ProB`, ...): the mask operators in f32 and f16, in
    /// the `Bitmask` layout; f32 input is computed in f16 on the device.
    AtlasTraining,
    /// Atlas inference (`Ascend310P*`): the mask forward in f32 only, `Bitmask` layout.
    Atlas310P,
    /// Ascend 950 (`Ascend950*`): the adaptive operators; CANN rejects the mask operators there.
    Ascend950,
    /// A SoC this crate has no facts about: every operator is refused.
    Other,
}

impl SocFamily {
    /// The family of SoC `name`.
    pub fn from_soc_name(name: &str) -> Self {
        if name.starts_with("Ascend910B") || name.starts_with("Ascend910_93") {
            SocFamily::AtlasA2A3
        } else if name.starts_with("Ascend950") {
            SocFamily::Ascend950
        } else if name.starts_with("Ascend910") {
            SocFamily::AtlasTraining
        } else if name.starts_with("Ascend310P") {
            SocFamily::Atlas310P
        } else {
            SocFamily::Other
        }
    }

    /// The element types the family supports for `op`, or why it does not run `op` at all.
    pub(crate) fn dtypes(self, op: DeviceOp) -> Result<&'static [DType], &'static str> {
        const ALL: &[DType] = &[DType::F32, DType::F16, DType::BF16];
        const NO_BF16: &[DType] = &[DType::F32, DType::F16];
        use DeviceOp::*;
        use SocFamily::*;
        match (self, op) {
            (AtlasA2A3, _) | (Ascend950, AdaptiveForward | AdaptiveBackward) => Ok(ALL),
            (AtlasTraining, MaskForward | MaskBackward) => Ok(NO_BF16),
            (Atlas310P, MaskForward) => Ok(&[DType::F32]),
            (Ascend950, MaskForward | MaskBackward) => Err(
                "CANN rejects this operator on Ascend 950 (deprecated in favour of aclnnMaxPool2dWithIndices)",
            ),
            (Other, _) => Err("this SoC is unknown to poolgrad, which has no facts about its operators"),
            _ => Err("CANN documents this operator for Atlas A2/A3 only"),
        }
    }

    /// The layout this family's `aclnnMaxPool2dWithMask` writes for `kernel` (A.0).
    pub(crate) fn mask_layout(self, kernel: [usize; 2]) -> LayoutKind {
        if self == SocFamily::AtlasA2A3 && kernel != [1, 1] {
            LayoutKind::I32Argmax
        } else {
            LayoutKind::Bitmask
        }
    }
}

/// The four operators the Ascend backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceOp {
    AdaptiveForward,
    AdaptiveBackward,
    MaskForward,
    MaskBackward,
}

impl fmt::Display for SocFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SocFamily::AtlasA2A3 => "Atlas A2/A3",
            SocFamily::AtlasTraining => "Atlas training",
            SocFamily::Atlas310P => "Atlas 310P",
            SocFamily::Ascend950 => "Ascend 950",
            SocFamily::Other => "unknown SoC family",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_follows_the_documented_tables() {
        use DeviceOp::*;
        assert_eq!(SocFamily::AtlasA2A3.dtypes(AdaptiveBackward).unwrap().len(), 3);
        assert!(SocFamily::AtlasTraining.dtypes(AdaptiveBackward).is_err());
        assert!(!SocFamily::AtlasTraining.dtypes(MaskBackward).unwrap().contains(&DType::BF16));
        assert_eq!(SocFamily::Atlas310P.dtypes(MaskForward).unwrap(), &[DType::F32]);
        assert!(SocFamily::Atlas310P.dtypes(MaskBackward).is_err());
        assert!(SocFamily::Ascend950.dtypes(MaskForward).is_err());
        assert!(SocFamily::Ascend950.dtypes(AdaptiveForward).is_ok());
        assert!(SocFamily::Other.dtypes(AdaptiveForward).is_err());
        assert_eq!(SocFamily::AtlasA2A3.mask_layout([3, 3]), LayoutKind::I32Argmax);
        assert_eq!(SocFamily::AtlasA2A3.mask_layout([1, 1]), LayoutKind::Bitmask);
        assert_eq!(SocFamily::AtlasTraining.mask_layout([3, 3]), LayoutKind::Bitmask);
        assert_eq!(SocFamily::from_soc_name("Ascend310B1"), SocFamily::Other);
        assert_eq!(SocFamily::from_soc_name("Ascend950PR_9599"), SocFamily::Ascend950);
    }
}
