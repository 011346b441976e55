//! What each Ascend SoC supports: operators, dtypes, parameters and the mask layout it writes.
//!
//! **SoC names.** CANN describes every chip it knows in a platform config file
//! (`data/platform_config/<SoC>.ini` of a toolkit; `src/platform/platform_config/` of the
//! open-sourced runtime, hicann/runtime). The family is read from the name by exact match against
//! those files, never by prefix: `Ascend910B` (no digit) is a first-generation training chip
//! (`Short_SoC_version=Ascend910`, `NpuArch=1001`), while `Ascend910B1` is an Atlas A2
//! (`Short_SoC_version=Ascend910B`, `NpuArch=2201`). The A3 names (`Ascend910_93xx`) and the 950
//! names (`Ascend950PR_*`, `Ascend950DT_*`, and in CANN 8.1 `Ascend910_95` and `Ascend910_55xx`,
//! `AIC_version=AIC-C-310`) are series, matched by their documented prefix and a non-empty suffix.
//! Every other name (310B, 610, 031, 035, 350, BS9SX, MC61, Kirin, ...) is [`SocFamily::Other`]:
//! the device opens, but every operator is refused with an error naming the SoC.
//!
//! **Operators and dtypes.** The product-support table and "数据类型" column of each operator's
//! ops-nn document (`aclnnAdaptiveMaxPool2d.md`, `aclnnAdaptiveMaxPool2dBackward.md`,
//! `aclnnMaxPool2dWithMask.md`, `aclnnMaxPool2dWithMaskBackward.md`, `aclnnMaxPool2dWithIndices.md`,
//! `aclnnMaxPool2dWithIndicesBackward.md`), checked against the dtype lists of their op_api
//! sources (`GetDtypeSupportListBySocVersion`, keyed by NpuArch):
//!
//! | operator | A2/A3 | Atlas training | 310P | 950 |
//! |---|---|---|---|---|
//! | AdaptiveMaxPool2d | f32 f16 bf16 f64 | f32 f16 f64 (AI CPU) | no | f32 f16 bf16 f64 |
//! | AdaptiveMaxPool2dBackward | f32 f16 bf16 | no | no | f32 f16 bf16 |
//! | MaxPool2dWithMask | f32 f16 bf16 | f32 f16 (computed in f16) | f32 | no (deprecated) |
//! | MaxPool2dWithMaskBackward | f32 f16 bf16 | f32 f16 (computed in f16) | no | no (deprecated) |
//! | MaxPool2dWithIndices | f32 f16 bf16 | no | no | f32 f16 bf16 |
//! | MaxPool2dWithIndicesBackward | f32 | no | no | f32 f16 bf16 |
//! | MaxPool3dWithArgmax, `...Backward` | f32 f16 bf16 | no | no | f32 f16 bf16 |
//! | AdaptiveMaxPool3d, `...Backward` | f32 f16 bf16 | no | no | f32 f16 bf16 |
//! | MaxUnpool2d, MaxUnpool3d, MaxUnpool3dBackward | f32 f16 f64 | no | no | f32 f16 f64 |
//! | MaxUnpool2dBackward | f32 f16 | no | no | f32 f16 |
//!
//! The 3-D rows are read from the op_api sources alone (`aclnn_max_pool3d_with_argmax.cpp`,
//! `aclnn_max_pool3d_with_argmax_backward.cpp`, `aclnn_adaptive_max_pool3d.cpp`,
//! `aclnn_adaptive_max_pool3d_backward.cpp`); their indices are INT32 on A2/A3, INT32 or INT64
//! on the 950, and poolgrad passes INT32 on both.
//!
//! Dilation must be 1 except on the 950 (`CheckShape`: "dilation only support 1" unless
//! `IsRegbase`). On the 310P, `aclnnMaxPool2dWithMask.md` excludes some ceil-mode strides, and Atlas training runs the same kernel
//! ([`SocFamily::ceil_mode_limit`]).

use core::fmt;

use crate::element::DType;
use crate::mask::{Bitmask, I32Argmax, MaskLayout};
use crate::params::MaxPool2dParams;

/// The product family of an Ascend SoC, from its name (`aclrtGetSocName`).
///
/// ```
/// use poolgrad::device::ascend::SocFamily;
/// assert_eq!(SocFamily::from_soc_name("Ascend910B3"), SocFamily::AtlasA2A3);
/// assert_eq!(SocFamily::from_soc_name("Ascend910_9391"), SocFamily::AtlasA2A3);
/// assert_eq!(SocFamily::from_soc_name("Ascend910B"), SocFamily::AtlasTraining);
/// assert_eq!(SocFamily::from_soc_name("Ascend910ProB"), SocFamily::AtlasTraining);
/// assert_eq!(SocFamily::from_soc_name("Ascend310P3"), SocFamily::Atlas310P);
/// assert_eq!(SocFamily::from_soc_name("Ascend950PR_9599"), SocFamily::Ascend950);
/// assert_eq!(SocFamily::from_soc_name("Ascend310B1"), SocFamily::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SocFamily {
    /// Atlas A2 (`Ascend910B1`, `B2`, `B2C`, `B3`, `B4`, `B4-1`) and A3 (`Ascend910_93xx`),
    /// `NpuArch` 2201: every operator; masks in the `I32Argmax` layout except for 1x1 kernels.
    AtlasA2A3,
    /// Atlas training (`Ascend910A`, `Ascend910B`, `Ascend910ProA`, `Ascend910ProB`,
    /// `Ascend910PremiumA`), `NpuArch` 1001: the mask operators in f32 and f16, `Bitmask`
    /// layout, f32 computed in f16; the adaptive forward on the AI CPU.
    AtlasTraining,
    /// Atlas inference (`Ascend310P1`, `P3`, `P5`, `P7`), `NpuArch` 2002: the mask forward in
    /// f32 only, `Bitmask` layout.
    Atlas310P,
    /// The 950 generation (`Ascend950PR_*`, `Ascend950DT_*`; in CANN 8.1 `Ascend910_95` and
    /// `Ascend910_55xx`), `NpuArch` 3510: the adaptive and the with-indices operators; CANN
    /// rejects the mask operators there.
    Ascend950,
    /// A SoC this crate has no facts about: every operator is refused.
    Other,
}

/// Exact names of the A2 chips (platform configs with `Short_SoC_version=Ascend910B`).
const A2: [&str; 6] =
    ["Ascend910B1", "Ascend910B2", "Ascend910B2C", "Ascend910B3", "Ascend910B4", "Ascend910B4-1"];
/// Exact names of the first-generation training chips (`Short_SoC_version=Ascend910`).
const TRAINING: [&str; 5] =
    ["Ascend910A", "Ascend910B", "Ascend910ProA", "Ascend910ProB", "Ascend910PremiumA"];
/// Exact names of the 310P chips (`Short_SoC_version=Ascend310P`).
const P310: [&str; 4] = ["Ascend310P1", "Ascend310P3", "Ascend310P5", "Ascend310P7"];
/// Series named by a prefix and a suffix of model digits or letters: `(prefix, family)`.
const SERIES: [(&str, SocFamily); 5] = [
    ("Ascend910_93", SocFamily::AtlasA2A3),
    // hicann/runtime `platform_config/cann-dev/Ascend350_354f.ini`, `_355e.ini`: `NpuArch=3510`,
    // the 950's architecture, on which ops-nn keys these operators (`IsRegbase`).
    ("Ascend350_", SocFamily::Ascend950),
    ("Ascend950PR_", SocFamily::Ascend950),
    ("Ascend950DT_", SocFamily::Ascend950),
    ("Ascend910_55", SocFamily::Ascend950),
];

impl SocFamily {
    /// The family of SoC `name`, exactly as CANN's platform configs name it.
    pub fn from_soc_name(name: &str) -> Self {
        if A2.contains(&name) {
            return SocFamily::AtlasA2A3;
        }
        if TRAINING.contains(&name) {
            return SocFamily::AtlasTraining;
        }
        if P310.contains(&name) {
            return SocFamily::Atlas310P;
        }
        if name == "Ascend910_95" {
            return SocFamily::Ascend950;
        }
        SERIES
            .iter()
            .find(|(prefix, _)| {
                name.strip_prefix(prefix)
                    .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()))
            })
            .map_or(SocFamily::Other, |&(_, family)| family)
    }

    /// The element types the family supports for `op`, or why it does not run `op` at all.
    pub(crate) fn dtypes(self, op: DeviceOp) -> Result<&'static [DType], &'static str> {
        use DType::{BF16, F16, F32, F64};
        use DeviceOp::*;
        use SocFamily::*;
        match (self, op) {
            (Other, _) => Err("this SoC is unknown to poolgrad, which has no facts about its operators"),
            (AtlasA2A3 | Ascend950, AdaptiveForward) => Ok(&[F32, F16, BF16, F64]),
            (AtlasTraining, AdaptiveForward) => Ok(&[F32, F16, F64]),
            (AtlasA2A3 | Ascend950, AdaptiveBackward | WithIndicesForward) => Ok(&[F32, F16, BF16]),
            (AtlasA2A3, MaskForward | MaskBackward) => Ok(&[F32, F16, BF16]),
            (AtlasTraining, MaskForward | MaskBackward) => Ok(&[F32, F16]),
            (Atlas310P, MaskForward) => Ok(&[F32]),
            (AtlasA2A3, WithIndicesBackward) => Ok(&[F32]),
            (Ascend950, WithIndicesBackward) => Ok(&[F32, F16, BF16]),
            (Ascend950, MaskForward | MaskBackward) => Err(
                "CANN rejects this operator on Ascend 950 (deprecated in favour of aclnnMaxPool2dWithIndices)",
            ),
            (_, AdaptiveForward) => {
                Err("CANN documents this operator for Atlas A2/A3, training and 950 only")
            }
            (_, MaskBackward) => Err("CANN documents this operator for Atlas A2/A3 and training only"),
            (_, AdaptiveBackward | WithIndicesForward | WithIndicesBackward) => {
                Err("CANN documents this operator for Atlas A2/A3 and Ascend 950 only")
            }
            // ops-nn `aclnn_max_pool3d_with_argmax.cpp` `CheckPlatform` and `GetDtypeSupportList`
            // (DAV_2201 or regbase), `aclnn_max_pool3d_with_argmax_backward.cpp` and
            // `adaptive_max_pool_common.cpp` `GetDtypeSupportListBySocVersion` (DAV_2201/3510,
            // ASCEND910B/910_93 or regbase), `aclnn_adaptive_max_pool3d.cpp` `checkPlatformValid`:
            // BF16, FLOAT16, FLOAT there, an empty list elsewhere.
            (
                AtlasA2A3 | Ascend950,
                Pool3dForward | Pool3dBackward | Adaptive3dForward | Adaptive3dBackward,
            ) => Ok(&[F32, F16, BF16]),
            (_, Pool3dForward | Pool3dBackward | Adaptive3dForward | Adaptive3dBackward) => {
                Err("CANN's op_api runs this operator on Atlas A2/A3 and Ascend 950 only")
            }
            // ops-nn `index/scatter_elements/op_api/aclnn_max_unpool{2,3}d.cpp` and
            // `index/gather_elements/op_api/aclnn_max_unpool{2,3}d_backward.cpp`
            // `DTYPE_SUPPORT_LIST` (floats: FLOAT, FLOAT16, and DOUBLE but in the 2-D backward's;
            // no BF16), on the SoCs their documents list (`aclnnMaxUnpool2d.md` 产品支持情况:
            // 950, A3, A2; the op_apis do not check the SoC).
            (AtlasA2A3 | Ascend950, Unpool2d | Unpool3d | Unpool3dBackward) => Ok(&[F32, F16, F64]),
            (AtlasA2A3 | Ascend950, Unpool2dBackward) => Ok(&[F32, F16]),
            (_, Unpool2d | Unpool3d | Unpool2dBackward | Unpool3dBackward) => {
                Err("CANN documents this operator for Atlas A2/A3 and Ascend 950 only")
            }
        }
    }

    /// Whether the family's kernels take a dilation other than 1 (only the 950's, `IsRegbase`):
    /// the 2-D operators' `CheckShape` and `aclnnMaxPool3dWithArgmax`'s `CheckParamsValid`
    /// ("The value of dilation should be equal 1" on DAV_2201 and DAV_1001). The 3-D backward's
    /// `CheckParamsValid` asks only for a dilation above 0, on every SoC.
    pub(crate) fn supports_dilation(self) -> bool {
        self == SocFamily::Ascend950
    }

    /// The ceil-mode limit of the legacy max-pool kernel, documented for the 310P in
    /// `aclnnMaxPool2dWithMask.md` ("当ceilMode=True时，暂不支持如下stride场景: s_h >= (H_in +
    /// padding_size) / (H_out - 1)", and likewise for W), on an `[h, w]` input: the first
    /// dimension (0 = H, 1 = W) that falls under it, if any.
    ///
    /// Read as: the case the rule exists for, where the last window of the plain ceil-mode count
    /// would start at or past `H_in + padding` (`(H_out - 1) * s >= H_in + p`, with `H_out`
    /// before the correction that drops that window), which aclnn sizes with the correction and
    /// the kernel (TBE `max_pool_with_argmaxv1`) computes without it when the padding is 0. Atlas
    /// training runs the same f16-only kernel (ops-nn `aclnn_max_pool2d_with_indices.cpp`,
    /// `GetCastDtypeForMask`, casts FLOAT to FLOAT16 on ASCEND910), so the documented condition
    /// is applied to both families, whole: it is what CANN documents, and the probe's ceil-mode
    /// cases show on hardware whether the kernel honours more. Other families: `None`.
    pub(crate) fn ceil_mode_limit(self, params: &MaxPool2dParams, input: [usize; 2]) -> Option<usize> {
        if !matches!(self, SocFamily::Atlas310P | SocFamily::AtlasTraining) || !params.ceil_mode() {
            return None;
        }
        (0..2).find(|&d| {
            let (len, k, s, p) = (input[d], params.kernel()[d], params.stride()[d], params.padding()[d]);
            // The uncorrected ceil-mode count: ceil((len + 2p - k) / s) + 1, when a window fits.
            // (A count of 1, whose one window starts at 0, never falls under it: 0 < len + p.)
            let span = (len + 2 * p).checked_sub(k);
            span.is_some_and(|span| span.div_ceil(s) * s >= len + p)
        })
    }

    /// The name of the layout this family's `aclnnMaxPool2dWithMask` writes for `kernel`
    /// (`aclnnMaxPool2dWithMaskGetWorkspaceSize`: the int32 path on ASCEND910B / ASCEND910_93
    /// for kernels other than 1x1, the 5HD bit mask otherwise).
    pub(crate) fn mask_layout(self, kernel: [usize; 2]) -> &'static str {
        if self == SocFamily::AtlasA2A3 && kernel != [1, 1] { I32Argmax::NAME } else { Bitmask::NAME }
    }
}

/// The aclnn operators the Ascend backend runs: the one list of them, with their symbols
/// (here) and what each SoC supports ([`SocFamily::dtypes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceOp {
    AdaptiveForward,
    AdaptiveBackward,
    MaskForward,
    MaskBackward,
    WithIndicesForward,
    WithIndicesBackward,
    /// `aclnnMaxPool3dWithArgmax`.
    Pool3dForward,
    /// `aclnnMaxPool3dWithArgmaxBackward`.
    Pool3dBackward,
    /// `aclnnAdaptiveMaxPool3d`.
    Adaptive3dForward,
    /// `aclnnAdaptiveMaxPool3dBackward`.
    Adaptive3dBackward,
    /// `aclnnMaxUnpool2d`.
    Unpool2d,
    /// `aclnnMaxUnpool3d`.
    Unpool3d,
    /// `aclnnMaxUnpool2dBackward` (also the 2-D max poolings' double backward: the same gather).
    Unpool2dBackward,
    /// `aclnnMaxUnpool3dBackward` (also the 3-D double backward).
    Unpool3dBackward,
}

impl DeviceOp {
    /// The operator's phase-2 (launch) symbol.
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            DeviceOp::AdaptiveForward => "aclnnAdaptiveMaxPool2d",
            DeviceOp::AdaptiveBackward => "aclnnAdaptiveMaxPool2dBackward",
            DeviceOp::MaskForward => "aclnnMaxPool2dWithMask",
            DeviceOp::MaskBackward => "aclnnMaxPool2dWithMaskBackward",
            DeviceOp::WithIndicesForward => "aclnnMaxPool2dWithIndices",
            DeviceOp::WithIndicesBackward => "aclnnMaxPool2dWithIndicesBackward",
            DeviceOp::Pool3dForward => "aclnnMaxPool3dWithArgmax",
            DeviceOp::Pool3dBackward => "aclnnMaxPool3dWithArgmaxBackward",
            DeviceOp::Adaptive3dForward => "aclnnAdaptiveMaxPool3d",
            DeviceOp::Adaptive3dBackward => "aclnnAdaptiveMaxPool3dBackward",
            DeviceOp::Unpool2d => "aclnnMaxUnpool2d",
            DeviceOp::Unpool3d => "aclnnMaxUnpool3d",
            DeviceOp::Unpool2dBackward => "aclnnMaxUnpool2dBackward",
            DeviceOp::Unpool3dBackward => "aclnnMaxUnpool3dBackward",
        }
    }

    /// The operator's phase-1 symbol, `aclnn<Op>GetWorkspaceSize`.
    pub(crate) fn workspace_symbol(self) -> &'static str {
        match self {
            DeviceOp::AdaptiveForward => "aclnnAdaptiveMaxPool2dGetWorkspaceSize",
            DeviceOp::AdaptiveBackward => "aclnnAdaptiveMaxPool2dBackwardGetWorkspaceSize",
            DeviceOp::MaskForward => "aclnnMaxPool2dWithMaskGetWorkspaceSize",
            DeviceOp::MaskBackward => "aclnnMaxPool2dWithMaskBackwardGetWorkspaceSize",
            DeviceOp::WithIndicesForward => "aclnnMaxPool2dWithIndicesGetWorkspaceSize",
            DeviceOp::WithIndicesBackward => "aclnnMaxPool2dWithIndicesBackwardGetWorkspaceSize",
            DeviceOp::Pool3dForward => "aclnnMaxPool3dWithArgmaxGetWorkspaceSize",
            DeviceOp::Pool3dBackward => "aclnnMaxPool3dWithArgmaxBackwardGetWorkspaceSize",
            DeviceOp::Adaptive3dForward => "aclnnAdaptiveMaxPool3dGetWorkspaceSize",
            DeviceOp::Adaptive3dBackward => "aclnnAdaptiveMaxPool3dBackwardGetWorkspaceSize",
            DeviceOp::Unpool2d => "aclnnMaxUnpool2dGetWorkspaceSize",
            DeviceOp::Unpool3d => "aclnnMaxUnpool3dGetWorkspaceSize",
            DeviceOp::Unpool2dBackward => "aclnnMaxUnpool2dBackwardGetWorkspaceSize",
            DeviceOp::Unpool3dBackward => "aclnnMaxUnpool3dBackwardGetWorkspaceSize",
        }
    }
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
    use SocFamily::*;

    /// Every file of CANN 8.1.RC1's `data/platform_config/` (leideng/CANN-8.1.RC1,
    /// `Ascend/ascend-toolkit/8.1.RC1/aarch64-linux/data/platform_config/*.ini`), with the family
    /// its `Short_SoC_version` / `AIC_version` puts it in.
    const CANN_81_PLATFORM_CONFIGS: [(&str, SocFamily); 32] = [
        ("AS31XM1X", Other),
        ("Ascend031", Other),
        ("Ascend035", Other),
        ("Ascend035A", Other),
        ("Ascend035B", Other),
        ("Ascend310B1", Other),
        ("Ascend310B2", Other),
        ("Ascend310B3", Other),
        ("Ascend310B4", Other),
        ("Ascend310P1", Atlas310P),
        ("Ascend310P3", Atlas310P),
        ("Ascend310P5", Atlas310P),
        ("Ascend310P7", Atlas310P),
        ("Ascend610", Other),
        ("Ascend610Lite", Other),
        ("Ascend910B", AtlasTraining),
        ("Ascend910B1", AtlasA2A3),
        ("Ascend910B2", AtlasA2A3),
        ("Ascend910B2C", AtlasA2A3),
        ("Ascend910B3", AtlasA2A3),
        ("Ascend910B4", AtlasA2A3),
        ("Ascend910_5591", Ascend950),
        ("Ascend910_9362", AtlasA2A3),
        ("Ascend910_9391", AtlasA2A3),
        ("Ascend910_95", Ascend950),
        ("BS9SX1AA", Other),
        ("BS9SX1AB", Other),
        ("BS9SX1AC", Other),
        ("BS9SX2AA", Other),
        ("BS9SX2AB", Other),
        ("MC61AM21AA", Other),
        ("MC61AM21AB", Other),
    ];

    /// The names of hicann/runtime's `src/platform/platform_config/` that CANN 8.1.RC1 lacks.
    const RUNTIME_PLATFORM_CONFIGS: [(&str, SocFamily); 19] = [
        ("Ascend350_354f", Ascend950),
        ("Ascend350_355e", Ascend950),
        ("Ascend910A", AtlasTraining),
        ("Ascend910B4-1", AtlasA2A3),
        ("Ascend910PremiumA", AtlasTraining),
        ("Ascend910ProA", AtlasTraining),
        ("Ascend910ProB", AtlasTraining),
        ("Ascend910_9363", AtlasA2A3),
        ("Ascend910_9372", AtlasA2A3),
        ("Ascend910_9381", AtlasA2A3),
        ("Ascend910_9382", AtlasA2A3),
        ("Ascend910_9392", AtlasA2A3),
        ("Ascend950DT_950x", Ascend950),
        ("Ascend950DT_95A2", Ascend950),
        ("Ascend950PR_9599", Ascend950),
        ("Ascend950PR_957bx", Ascend950),
        ("Kirin9030", Other),
        ("KirinX90", Other),
        ("KirinDev0000", Other),
    ];

    #[test]
    fn every_platform_config_name_is_classified_exactly() {
        for (name, family) in CANN_81_PLATFORM_CONFIGS.iter().chain(&RUNTIME_PLATFORM_CONFIGS) {
            assert_eq!(SocFamily::from_soc_name(name), *family, "{name}");
        }
    }

    #[test]
    fn near_misses_are_unknown() {
        for name in [
            "",
            "Ascend910",
            "Ascend910B5",
            "Ascend910B1 ",
            "ascend910b1",
            "Ascend910_93",
            "Ascend950",
            "Ascend950PR_",
            "Ascend310P",
            "Ascend310P2",
            "Ascend910_9",
            "Ascend910_55",
        ] {
            assert_eq!(SocFamily::from_soc_name(name), Other, "{name:?}");
        }
    }

    #[test]
    fn support_follows_the_documented_tables() {
        use DeviceOp::*;
        assert_eq!(AtlasA2A3.dtypes(AdaptiveBackward).unwrap(), &[DType::F32, DType::F16, DType::BF16]);
        assert!(AtlasA2A3.dtypes(AdaptiveForward).unwrap().contains(&DType::F64));
        assert_eq!(AtlasTraining.dtypes(AdaptiveForward).unwrap(), &[DType::F32, DType::F16, DType::F64]);
        assert!(AtlasTraining.dtypes(AdaptiveBackward).is_err());
        assert!(!AtlasTraining.dtypes(MaskBackward).unwrap().contains(&DType::BF16));
        assert_eq!(Atlas310P.dtypes(MaskForward).unwrap(), &[DType::F32]);
        assert!(Atlas310P.dtypes(MaskBackward).is_err());
        assert!(Atlas310P.dtypes(AdaptiveForward).is_err());
        assert!(Ascend950.dtypes(MaskForward).is_err());
        assert!(Ascend950.dtypes(AdaptiveForward).is_ok());
        assert_eq!(AtlasA2A3.dtypes(WithIndicesBackward).unwrap(), &[DType::F32]);
        assert_eq!(Ascend950.dtypes(WithIndicesBackward).unwrap().len(), 3);
        assert!(AtlasTraining.dtypes(WithIndicesForward).is_err());
        for op in [AdaptiveForward, AdaptiveBackward, MaskForward, MaskBackward, WithIndicesForward] {
            assert!(Other.dtypes(op).is_err());
        }
        assert_eq!(AtlasA2A3.mask_layout([3, 3]), "I32Argmax");
        assert_eq!(AtlasA2A3.mask_layout([1, 1]), "Bitmask");
        assert_eq!(AtlasTraining.mask_layout([3, 3]), "Bitmask");
        assert_eq!(AtlasA2A3.dtypes(Unpool2d).unwrap(), &[DType::F32, DType::F16, DType::F64]);
        assert_eq!(Ascend950.dtypes(Unpool2dBackward).unwrap(), &[DType::F32, DType::F16]);
        assert!(AtlasTraining.dtypes(Unpool3dBackward).is_err());
        for op in [Pool3dForward, Pool3dBackward, Adaptive3dForward, Adaptive3dBackward] {
            assert_eq!(AtlasA2A3.dtypes(op).unwrap(), &[DType::F32, DType::F16, DType::BF16]);
            assert_eq!(Ascend950.dtypes(op).unwrap(), &[DType::F32, DType::F16, DType::BF16]);
            for family in [AtlasTraining, Atlas310P, Other] {
                assert!(family.dtypes(op).is_err(), "{family} {op:?}");
            }
        }
    }

    #[test]
    fn ceil_mode_limit_of_the_legacy_kernel() {
        let p = |k: usize, s: usize, pad: usize, ceil: bool| {
            MaxPool2dParams::new([k, k]).with_stride([s, s]).with_padding([pad, pad]).with_ceil_mode(ceil)
        };
        // H = 5, k = 2, s = 2, p = 0: ceil gives windows at 0, 2, 4 (the last one partial, inside).
        assert_eq!(Atlas310P.ceil_mode_limit(&p(2, 2, 0, true), [5, 5]), None);
        // H = 4, k = 1, s = 2, p = 0: plain ceil counts 3 windows, the third starts at 4 = H: dropped.
        assert_eq!(Atlas310P.ceil_mode_limit(&p(1, 2, 0, true), [4, 4]), Some(0));
        assert_eq!(Atlas310P.ceil_mode_limit(&p(1, 2, 0, true), [5, 4]), Some(1));
        // H = 8, k = 1, s = 3, p = 0: windows at 0, 3, 6 and a fourth at 9 >= 8: dropped.
        assert_eq!(Atlas310P.ceil_mode_limit(&p(1, 3, 0, true), [8, 8]), Some(0));
        // H = 7, k = 1, s = 3: the third window starts at 6 < 7, the count is exact.
        assert_eq!(Atlas310P.ceil_mode_limit(&p(1, 3, 0, true), [7, 7]), None);
        // The review's case, H = 3, k = 2, s = 3: aclnn sizes 1 row, the kernel would make 2.
        assert_eq!(AtlasTraining.ceil_mode_limit(&p(2, 3, 0, true), [3, 3]), Some(0));
        // H = 6, k = 3, s = 2, p = 1: windows start at -1, 1, 3, 5; the one at 5 < 6 + 1 is kept.
        assert_eq!(Atlas310P.ceil_mode_limit(&p(3, 2, 1, true), [6, 6]), None);
        // Floor mode and the other families are never limited.
        assert_eq!(Atlas310P.ceil_mode_limit(&p(1, 2, 0, false), [4, 4]), None);
        // Atlas training runs the same kernel: the same limit.
        assert_eq!(AtlasTraining.ceil_mode_limit(&p(1, 2, 0, true), [4, 4]), Some(0));
        assert_eq!(AtlasA2A3.ceil_mode_limit(&p(1, 2, 0, true), [4, 4]), None);
    }
}
