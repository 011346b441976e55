//! The instructions a call's kernels run with, chosen once per call at run time: [`Isa`].
//!
//! The kernels are compiled twice: for the target's baseline (on x86-64, SSE2), and for
//! x86-64-v3 with F16C (AVX2, FMA and the `f16` conversion instructions, which every x86-64
//! processor since 2015 has). Phase 1 detects them once ([`Isa::of`]) and every task of the
//! call runs in the copy its plan chose ([`Isa::enter`]). The copies run the same Rust code, so
//! their results are the same bits: the compiler vectorises the same loops wider and contracts
//! nothing (Rust never fuses floating-point operations on its own). One thing Rust leaves to
//! the compiler: a sum of two NaNs with different payloads carries one of them, and which one
//! may differ between the copies (an addition's operands may be swapped); such a sum is NaN in
//! every copy.
//!
//! Conversions: the kernels that run in the x86-64-v3 copy convert `f16` slices with F16C
//! through [`widen`] and [`narrow`], one call for a whole slice (`half`'s slice conversions
//! call an out-of-line function for every 8 values, which cost the forwards a quarter of
//! their time); elsewhere `f16` slices convert through `half`'s F16C routines (`half` detects
//! F16C itself), and single values through this crate's software conversions
//! ([`crate::element`], the reference every processor can run); `bf16` converts in integer
//! code. The tests hold every hardware conversion to the software ones, bit for bit.
//!
//! Which kernels take the x86-64-v3 copy: the forwards and the `Bitmask` gather, in every
//! element type. The flat-index scatter and the `Bitmask` block backward run the baseline
//! copy (each running sum rounded with F16C in the x86-64-v3 copy ran no faster,
//! `benches/README.md`), and round their final `f16` sums as slices through [`narrow`] with
//! the call's `Isa`.
//!
//! `unsafe`: `pulp` makes the token ([`V3`]) only after detecting its features and runs code
//! compiled for them, safely; `half` detects F16C itself before it converts. `pulp` has no
//! F16C conversions, so [`widen`] and [`narrow`] call a `#[target_feature(enable = "f16c")]`
//! function of their own, whose intrinsics are safe inside it; the call itself is `unsafe`
//! (the compiler cannot see that the token proves the feature), the only `unsafe` of this
//! module, one statement each, with its `// SAFETY:` line.
//!
//! The tests run every kernel in both copies: the environment variable `POOLGRAD_ISA=baseline`
//! makes every call of the process run the baseline copy, and [`Cpu::with_vector_instructions`]
//! (`false`) does so for one device.
//!
//! [`Cpu::with_vector_instructions`]: super::Cpu::with_vector_instructions

use crate::element::{Accumulate, PoolFloat};

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pulp::simd_type! {
    /// x86-64-v3 with F16C: the token that proves the processor has them.
    pub(super) struct V3 {
        pub sse: "sse",
        pub sse2: "sse2",
        pub fxsr: "fxsr",
        pub sse3: "sse3",
        pub ssse3: "ssse3",
        pub sse4_1: "sse4.1",
        pub sse4_2: "sse4.2",
        pub popcnt: "popcnt",
        pub avx: "avx",
        pub avx2: "avx2",
        pub bmi1: "bmi1",
        pub bmi2: "bmi2",
        pub fma: "fma",
        pub lzcnt: "lzcnt",
        pub f16c: "f16c",
    }
}

/// The instructions a call's kernels run with.
#[derive(Debug, Clone, Copy)]
pub(super) enum Isa {
    /// The target's baseline, and the software conversions.
    Baseline,
    /// x86-64-v3 with F16C.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    V3(V3),
}

/// The environment variable that makes every call of the process run the baseline copy when it
/// is `baseline` (read once).
const ISA_VARIABLE: &str = "POOLGRAD_ISA";

/// Whether [`ISA_VARIABLE`] asks for the baseline.
fn baseline_asked() -> bool {
    static ASKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ASKED.get_or_init(|| std::env::var(ISA_VARIABLE).is_ok_and(|v| v.eq_ignore_ascii_case("baseline")))
}

impl Isa {
    /// The best copy this processor runs, or the baseline when `vector` is off (a
    /// [`Cpu`](super::Cpu)'s setting) or the environment asks for it.
    pub(super) fn of(vector: bool) -> Isa {
        if !vector || baseline_asked() { Isa::Baseline } else { Isa::best() }
    }

    /// The best copy this processor runs, whatever the settings: what the tests that hold a
    /// vector path to the baseline run.
    pub(super) fn best() -> Isa {
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if let Some(v3) = V3::try_new() {
            return Isa::V3(v3);
        }
        Isa::Baseline
    }

    /// Whether the copy has F16C and vector registers of 8 `f32` or more (the kernels' wide
    /// paths).
    #[inline(always)]
    pub(super) fn is_wide(self) -> bool {
        !matches!(self, Isa::Baseline)
    }

    /// Runs `f` in this copy: compiled with its instructions, so `f` and everything it inlines
    /// (kernels mark their bodies `#[inline(always)]`) uses them.
    #[inline(always)]
    pub(super) fn enter<R>(self, f: impl FnOnce() -> R) -> R {
        match self {
            Isa::Baseline => f(),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Isa::V3(v3) => v3.vectorize(f),
        }
    }
}

/// Widens `src` into `dst` as [`Accumulate::to_acc_slice`] does, with the same bits (both
/// slices the same length; extra elements of the longer one are left alone). In the x86-64-v3
/// copy, `f16` goes through F16C 8 values at a time in one call for the whole slice, where
/// `half`'s slice conversion calls an out-of-line function for every 8; the other types, and
/// every type in the baseline copy, take [`Accumulate::to_acc_slice`].
#[inline(always)]
pub(super) fn widen<T: PoolFloat>(isa: Isa, src: &[T], dst: &mut [T::Acc]) {
    #[cfg(target_arch = "x86_64")]
    if let (Isa::V3(_), crate::element::DType::F16) = (isa, T::DTYPE) {
        // `T` is `f16` and `T::Acc` is `f32`: the casts keep every length.
        let (src, dst): (&[u16], &mut [f32]) = (bytemuck::cast_slice(src), bytemuck::cast_slice_mut(dst));
        // SAFETY: a `V3` token exists only once `pulp` has detected AVX and F16C on this
        // processor (`V3::try_new`), the features `widen_f16c` is compiled for.
        #[allow(unsafe_code)]
        unsafe {
            widen_f16c(src, dst)
        };
        return;
    }
    let _ = isa;
    T::to_acc_slice(src, dst)
}

/// Widens `src` into `dst` for comparing alone ([`Accumulate::to_acc_compared`]: every number
/// to its value, every NaN to a NaN), for the forwards (both slices the same length; extra
/// elements of the longer one are left alone). `f16` widens as in [`widen`] (F16C in the
/// x86-64-v3 copy); the other types one value at a time, which for `bf16` is a shift that the
/// compiler vectorises.
#[inline(always)]
pub(super) fn widen_compared<T: PoolFloat>(isa: Isa, src: &[T], dst: &mut [T::Acc]) {
    if T::DTYPE == crate::element::DType::F16 {
        return widen(isa, src, dst);
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.to_acc_compared();
    }
}

/// Narrows `src`, values of `T` widened, into `dst` ([`Accumulate::from_acc_exact`]: nothing
/// rounded, each number to its own bits, a NaN to bits unspecified), for the forwards (both
/// slices the same length; extra elements of the longer one are left alone). `f16` narrows as in
/// [`narrow`] (F16C in the x86-64-v3 copy, exact on such values); the other types one value at a
/// time, which for `bf16` is a shift.
#[inline(always)]
pub(super) fn narrow_exact<T: PoolFloat>(isa: Isa, src: &[T::Acc], dst: &mut [T]) {
    if T::DTYPE == crate::element::DType::F16 {
        return narrow(isa, src, dst);
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = T::from_acc_exact(s);
    }
}

/// The bits `src` of `f16` values widened into `dst` with `vcvtph2ps` (exact, subnormals
/// included; a NaN keeps its payload and gets the quiet bit, as the software conversion does),
/// 8 at a time, the last few by the software conversion.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn widen_f16c(src: &[u16], dst: &mut [f32]) {
    use core::arch::x86_64::{__m128i, _mm256_cvtph_ps};
    let n = src.len().min(dst.len());
    let ((groups, tail), (sources, rest)) = (dst[..n].as_chunks_mut::<8>(), src[..n].as_chunks::<8>());
    for (group, source) in groups.iter_mut().zip(sources) {
        let bits: __m128i = bytemuck::cast(*source);
        *group = bytemuck::cast(_mm256_cvtph_ps(bits));
    }
    for (d, &s) in tail.iter_mut().zip(rest) {
        *d = half::f16::from_bits(s).to_acc();
    }
}

/// Rounds `src` into `dst` as [`Accumulate::from_acc_slice`] does, with the same bits (both
/// slices the same length; extra elements of the longer one are left alone): in the x86-64-v3
/// copy, `f16` through F16C 8 values at a time in one call for the whole slice, as in
/// [`widen`]; the other types, and every type in the baseline copy, take
/// [`Accumulate::from_acc_slice`].
#[inline(always)]
pub(super) fn narrow<T: PoolFloat>(isa: Isa, src: &[T::Acc], dst: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if let (Isa::V3(_), crate::element::DType::F16) = (isa, T::DTYPE) {
        // `T` is `f16` and `T::Acc` is `f32`: the casts keep every length.
        let (src, dst): (&[f32], &mut [u16]) = (bytemuck::cast_slice(src), bytemuck::cast_slice_mut(dst));
        // SAFETY: a `V3` token exists only once `pulp` has detected AVX and F16C on this
        // processor (`V3::try_new`), the features `narrow_f16c` is compiled for.
        #[allow(unsafe_code)]
        unsafe {
            narrow_f16c(src, dst)
        };
        return;
    }
    let _ = isa;
    T::from_acc_slice(src, dst)
}

/// `src` rounded to the bits of `f16` values in `dst` with `vcvtps2ph` (round to nearest, ties
/// to even, by its immediate operand, whatever the rounding mode; subnormal results kept;
/// a NaN keeps the top of its payload and gets the quiet bit, as the software rounding does),
/// 8 at a time, the last few by the software rounding.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn narrow_f16c(src: &[f32], dst: &mut [u16]) {
    use core::arch::x86_64::{__m256, _MM_FROUND_TO_NEAREST_INT, _mm256_cvtps_ph};
    let n = src.len().min(dst.len());
    let ((groups, tail), (sources, rest)) = (dst[..n].as_chunks_mut::<8>(), src[..n].as_chunks::<8>());
    for (group, source) in groups.iter_mut().zip(sources) {
        let values: __m256 = bytemuck::cast(*source);
        *group = bytemuck::cast(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(values));
    }
    for (d, &s) in tail.iter_mut().zip(rest) {
        *d = half::f16::from_acc(s).to_bits();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Special values of f32 for the roundings: zeros, the f16 and bf16 subnormal and normal
    /// boundaries, values half-way between two of them (ties to even) and just off half-way,
    /// the largest finite values and past them, infinities, and NaNs with payloads (quiet and
    /// signalling, both signs).
    fn awkward_f32() -> Vec<f32> {
        let mut bits = vec![
            0x0000_0000u32,
            0x8000_0000,
            0x0000_0001,
            0x007F_FFFF,
            0x0080_0000,
            0x3380_0000, // 2^-24, the least f16 subnormal
            0x3300_0000, // 2^-25: half of it, a tie that goes to zero
            0x3300_0001,
            0x33C0_0000, // 1.5 · 2^-24: a tie that goes to 2 · 2^-24
            0x387F_C000, // just below 2^-14, the least f16 normal
            0x3880_0000,
            0x3F80_1000, // 1 + 2^-11: a tie between 1 and 1 + 2^-10
            0x3F80_1001,
            0x3F80_3000,
            0x3FFF_F000, // rounds up across a power of two, to 2
            0x477F_E000, // 65504, the largest f16
            0x477F_EFFF,
            0x477F_F000, // 65520: rounds to infinity
            0x7F7F_FFFF,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFFC1_2345,
            0x7FBF_FFFF,
            0x3F80_8000, // 1 + 2^-8: a bf16 tie
            0x3F81_8000,
            0x0040_0000, // an f32 subnormal
        ];
        // Spread over all of f32 by an odd step, so every low bit pattern turns up.
        bits.extend((0..1u32 << 16).map(|k| k.wrapping_mul(0x9E37_79B9)));
        bits.into_iter().map(f32::from_bits).collect()
    }

    /// `half`'s conversions (F16C where the processor has it) give the software conversions'
    /// bits: every `f16` widened, the awkward values rounded (one at a time and as one slice),
    /// and both slice forms at every length from 0 to 70, so that `half`'s groups of 4 and 8
    /// and the tails one by one are all met. Run inside the x86-64-v3 copy, where the
    /// instructions may be inlined, and outside it, where `half` calls them.
    #[test]
    fn hardware_conversions_give_the_software_bits() {
        let check = || {
            for h in 0..=u16::MAX {
                let (x, y) = (f16::from_bits(h), bf16::from_bits(h));
                assert_eq!(x.to_f32().to_bits(), x.to_acc().to_bits(), "{h:#06x}");
                assert_eq!(y.to_f32().to_bits(), y.to_acc().to_bits(), "{h:#06x}");
            }
            let values = awkward_f32();
            // `half`'s rounding (F16C where the processor has it), one value at a time and as
            // one slice, against the software rounding.
            let mut all = vec![f16::ZERO; values.len()];
            f16::from_acc_slice(&values, &mut all);
            for (&v, slice) in values.iter().zip(&all) {
                let b = v.to_bits();
                assert_eq!(f16::from_f32(v).to_bits(), f16::from_acc(v).to_bits(), "{b:#010x}");
                assert_eq!(slice.to_bits(), f16::from_acc(v).to_bits(), "{b:#010x} in a slice");
            }
            // The slice conversions (`half`'s F16C in groups, the tail one by one) at every
            // length from 0 to 70, against the software conversion of each element.
            for len in 0..=70 {
                let src: Vec<f16> =
                    (0..len).map(|k| f16::from_bits((k as u16).wrapping_mul(0x9E37))).collect();
                let mut wide = vec![0.0f32; len];
                f16::to_acc_slice(&src, &mut wide);
                for (w, s) in wide.iter().zip(&src) {
                    assert_eq!(w.to_bits(), s.to_acc().to_bits(), "widening {len}");
                }
                let sums = &values[values.len() - len..];
                let mut narrow = vec![f16::ZERO; len];
                f16::from_acc_slice(sums, &mut narrow);
                for (n, &v) in narrow.iter().zip(sums) {
                    assert_eq!(n.to_bits(), f16::from_acc(v).to_bits(), "rounding {len}");
                }
            }
        };
        check();
        Isa::best().enter(check);
    }

    /// [`widen`] and [`narrow`] give the software conversions' bits in every copy, in all four
    /// element types: every `f16` and `bf16` widened as one slice, the awkward values rounded
    /// as one slice (NaN payloads, ties, subnormal results, overflow), and both at every
    /// length from 0 to 40 and every start from 0 to 7, so that the groups of 8 and the tails
    /// are met at every alignment.
    #[test]
    fn widen_and_narrow_give_the_software_bits() {
        fn check<T: PoolFloat>(isa: Isa, values: &[T], sums: &[T::Acc]) {
            let software = |src: &[T]| src.iter().map(|v| v.to_acc()).collect::<Vec<_>>();
            let rounded = |src: &[T::Acc]| src.iter().map(|&a| T::from_acc(a)).collect::<Vec<_>>();
            let bits = |v: &[T]| bytemuck::cast_slice::<T, u8>(v).to_vec();
            let acc_bits = |v: &[T::Acc]| bytemuck::cast_slice::<T::Acc, u8>(v).to_vec();
            let mut wide = vec![T::Acc::zero(); values.len()];
            widen(isa, values, &mut wide);
            assert_eq!(acc_bits(&wide), acc_bits(&software(values)), "{} widened", T::DTYPE);
            let mut narrow_all = vec![T::default(); sums.len()];
            narrow(isa, sums, &mut narrow_all);
            assert_eq!(bits(&narrow_all), bits(&rounded(sums)), "{} rounded", T::DTYPE);
            for start in 0..8 {
                for len in 0..=40 {
                    let (src, acc) = (&values[start..start + len], &sums[start..start + len]);
                    let mut wide = vec![T::Acc::zero(); len];
                    widen(isa, src, &mut wide);
                    assert_eq!(acc_bits(&wide), acc_bits(&software(src)), "{} {start} {len}", T::DTYPE);
                    let mut out = vec![T::default(); len];
                    narrow(isa, acc, &mut out);
                    assert_eq!(bits(&out), bits(&rounded(acc)), "{} {start} {len}", T::DTYPE);
                }
            }
        }
        use num_traits::Zero;
        let awkward = awkward_f32();
        let every_f16: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let every_bf16: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let f32s: Vec<f32> = awkward.clone();
        let f64s: Vec<f64> = awkward.iter().map(|&v| f64::from(v)).collect();
        for isa in [Isa::Baseline, Isa::best()] {
            let run = || {
                check::<f16>(isa, &every_f16, &awkward);
                check::<bf16>(isa, &every_bf16, &awkward);
                check::<f32>(isa, &f32s, &f32s);
                check::<f64>(isa, &f64s, &f64s);
            };
            run();
            isa.enter(run);
        }
    }

    /// `POOLGRAD_ISA=baseline` and a device's setting both give the baseline; otherwise the
    /// processor's best, which on x86-64 is x86-64-v3 with F16C where it has them.
    #[test]
    fn the_baseline_is_asked_for_by_the_device_or_the_environment() {
        assert!(matches!(Isa::of(false), Isa::Baseline));
        let asked = std::env::var(ISA_VARIABLE).is_ok_and(|v| v.eq_ignore_ascii_case("baseline"));
        assert_eq!(Isa::of(true).is_wide(), !asked && Isa::best().is_wide());
        #[cfg(target_arch = "x86_64")]
        {
            let v3 = ["avx2", "fma", "f16c", "bmi1", "bmi2", "lzcnt", "popcnt"];
            let has = |f: &str| match f {
                "avx2" => std::is_x86_feature_detected!("avx2"),
                "fma" => std::is_x86_feature_detected!("fma"),
                "f16c" => std::is_x86_feature_detected!("f16c"),
                "bmi1" => std::is_x86_feature_detected!("bmi1"),
                "bmi2" => std::is_x86_feature_detected!("bmi2"),
                "lzcnt" => std::is_x86_feature_detected!("lzcnt"),
                _ => std::is_x86_feature_detected!("popcnt"),
            };
            assert_eq!(Isa::best().is_wide(), v3.iter().all(|f| has(f)));
        }
    }
}
