//! The SoC names CANN knows and the architecture each declares, as ops-nn dispatches on them.
//!
//! Models: the platform config files, one per SoC (`[version] SoC_version`, `Short_SoC_version`
//! and `NpuArch`): CANN 8.1.RC1 `data/platform_config/*.ini` (leideng/CANN-8.1.RC1) and
//! hicann/runtime `src/platform/platform_config/**/*.ini`. ops-nn reads the SoC through
//! `GetCurrentPlatformInfo().GetCurNpuArch()` / `GetSocVersion()`, so the double keys every
//! per-SoC decision on the architecture read from this table, never on a name prefix. CANN 8.1's
//! `Ascend910_95` and `Ascend910_5591` declare `AIC_version=AIC-C-310` (`dav-c310`/`dav-310r6`),
//! the 950 generation's architecture (3510 in the later runtime's files).

/// `NpuArch` values (`platform_config/*.ini`) and the names ops-nn gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    /// `NpuArch=1001` (`DAV_1001`): Atlas training (Ascend910).
    Dav1001,
    /// `NpuArch=2002` (`DAV_2002`): Atlas inference (Ascend310P).
    Dav2002,
    /// `NpuArch=2201` (`DAV_2201`): Atlas A2 (SocVersion ASCEND910B) and A3 (ASCEND910_93).
    Dav2201,
    /// `NpuArch=3510` (`DAV_3510`, "regbase", `IsRegbase()`): the 950 generation.
    Dav3510,
    /// Any other architecture (310B, 610, 031, 035, BS9SX, MC61, Kirin, ...).
    Other,
}

/// `(SoC_version, NpuArch)` of every platform config file of the two sources.
const SOCS: &[(&str, Arch)] = &[
    // CANN 8.1.RC1 data/platform_config/ (32 files)
    ("AS31XM1X", Arch::Other),
    ("Ascend031", Arch::Other),
    ("Ascend035", Arch::Other),
    ("Ascend035A", Arch::Other),
    ("Ascend035B", Arch::Other),
    ("Ascend310B1", Arch::Other),
    ("Ascend310B2", Arch::Other),
    ("Ascend310B3", Arch::Other),
    ("Ascend310B4", Arch::Other),
    ("Ascend310P1", Arch::Dav2002),
    ("Ascend310P3", Arch::Dav2002),
    ("Ascend310P5", Arch::Dav2002),
    ("Ascend310P7", Arch::Dav2002),
    ("Ascend610", Arch::Other),
    ("Ascend610Lite", Arch::Other),
    ("Ascend910B", Arch::Dav1001),
    ("Ascend910B1", Arch::Dav2201),
    ("Ascend910B2", Arch::Dav2201),
    ("Ascend910B2C", Arch::Dav2201),
    ("Ascend910B3", Arch::Dav2201),
    ("Ascend910B4", Arch::Dav2201),
    ("Ascend910_5591", Arch::Dav3510),
    ("Ascend910_9362", Arch::Dav2201),
    ("Ascend910_9391", Arch::Dav2201),
    ("Ascend910_95", Arch::Dav3510),
    ("BS9SX1AA", Arch::Other),
    ("BS9SX1AB", Arch::Other),
    ("BS9SX1AC", Arch::Other),
    ("BS9SX2AA", Arch::Other),
    ("BS9SX2AB", Arch::Other),
    ("MC61AM21AA", Arch::Other),
    ("MC61AM21AB", Arch::Other),
    // hicann/runtime src/platform/platform_config/ (names 8.1.RC1 lacks)
    ("Ascend350_354f", Arch::Dav3510),
    ("Ascend350_355e", Arch::Dav3510),
    ("Ascend910A", Arch::Dav1001),
    ("Ascend910B4-1", Arch::Dav2201),
    ("Ascend910PremiumA", Arch::Dav1001),
    ("Ascend910ProA", Arch::Dav1001),
    ("Ascend910ProB", Arch::Dav1001),
    ("Ascend910_9363", Arch::Dav2201),
    ("Ascend910_9372", Arch::Dav2201),
    ("Ascend910_9381", Arch::Dav2201),
    ("Ascend910_9382", Arch::Dav2201),
    ("Ascend910_9392", Arch::Dav2201),
    ("Ascend950DT_950x", Arch::Dav3510),
    ("Ascend950DT_950y", Arch::Dav3510),
    ("Ascend950DT_9571", Arch::Dav3510),
    ("Ascend950DT_9572", Arch::Dav3510),
    ("Ascend950DT_9573", Arch::Dav3510),
    ("Ascend950DT_9574", Arch::Dav3510),
    ("Ascend950DT_9575", Arch::Dav3510),
    ("Ascend950DT_9576", Arch::Dav3510),
    ("Ascend950DT_9577", Arch::Dav3510),
    ("Ascend950DT_9578", Arch::Dav3510),
    ("Ascend950DT_9581", Arch::Dav3510),
    ("Ascend950DT_9581x", Arch::Dav3510),
    ("Ascend950DT_9582", Arch::Dav3510),
    ("Ascend950DT_9582x", Arch::Dav3510),
    ("Ascend950DT_9583", Arch::Dav3510),
    ("Ascend950DT_9584", Arch::Dav3510),
    ("Ascend950DT_9585", Arch::Dav3510),
    ("Ascend950DT_9586", Arch::Dav3510),
    ("Ascend950DT_9587", Arch::Dav3510),
    ("Ascend950DT_9588", Arch::Dav3510),
    ("Ascend950DT_9591", Arch::Dav3510),
    ("Ascend950DT_9592", Arch::Dav3510),
    ("Ascend950DT_9595", Arch::Dav3510),
    ("Ascend950DT_9596", Arch::Dav3510),
    ("Ascend950DT_95A1", Arch::Dav3510),
    ("Ascend950DT_95A2", Arch::Dav3510),
    ("Ascend950PR_950z", Arch::Dav3510),
    ("Ascend950PR_9579", Arch::Dav3510),
    ("Ascend950PR_957b", Arch::Dav3510),
    ("Ascend950PR_957bx", Arch::Dav3510),
    ("Ascend950PR_957c", Arch::Dav3510),
    ("Ascend950PR_957d", Arch::Dav3510),
    ("Ascend950PR_9589", Arch::Dav3510),
    ("Ascend950PR_958b", Arch::Dav3510),
    ("Ascend950PR_9599", Arch::Dav3510),
    ("KirinDev0000", Arch::Other),
    ("KirinDev0001", Arch::Other),
    ("KirinDev0002", Arch::Other),
    ("KirinDev0003", Arch::Other),
    ("Kirin9030", Arch::Other),
    ("KirinX90", Arch::Other),
];

/// The architecture of SoC `name` (a name no config file declares has none CANN knows).
pub(crate) fn arch(name: &str) -> Arch {
    SOCS.iter().find(|(n, _)| *n == name).map_or(Arch::Other, |&(_, a)| a)
}

/// Every SoC name of the table (for the double's own tests).
#[cfg(test)]
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    SOCS.iter().map(|&(n, _)| n)
}
