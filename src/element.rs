//! Element types: the sealed [`PoolFloat`] trait for values and gradients, and [`DType`] tags.

use core::fmt;
use core::ops::Neg;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

pub(crate) mod sealed {
    /// Implemented only inside this crate: downstream code cannot add element or index types.
    pub trait Sealed {}
}

/// Run-time tag of an element type, used in error messages and device dtype checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
    /// Signed 8-bit integer (the Ascend mask bytes).
    I8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
        })
    }
}

/// Any element a tensor view can hold: the float types and the index types. Sealed.
pub trait Element: sealed::Sealed + bytemuck::Pod + Send + Sync + fmt::Debug + PartialEq + 'static {
    /// The run-time tag of this type.
    const DTYPE: DType;
}

pub(crate) mod internal {
    //! The kernels' side of the element traits: public traits in a private module, so users can
    //! neither name nor implement them, and their methods (named so that they cannot clash with
    //! a user's own traits) are not semver-bound API.

    use core::ops::AddAssign;

    use super::Element;

    /// The accumulator types, `f32` and `f64`.
    pub trait AccFloat: Element + num_traits::Float + AddAssign {
        /// `if take { yes } else { no }` without a branch (a conditional move on the bits), for
        /// data-dependent choices in hot loops.
        fn choose(take: bool, yes: Self, no: Self) -> Self;

        /// `self` if `keep`, else `+0` (a mask on the bits, which vectorises).
        fn kept_if(self, keep: bool) -> Self;

        /// A position kept as this type (a whole number below 2^24, exact in every
        /// accumulator type) back as `usize`: a plain conversion, without `num_traits`' range
        /// tests.
        fn to_position(self) -> usize;
    }

    /// What the kernels need of a [`PoolFloat`](super::PoolFloat): gradients are accumulated in
    /// [`Accumulate::Acc`] (`f32` for `f32`, `f16` and `bf16`; `f64` for `f64`), so the half
    /// types round exactly once, when the finished sum is stored.
    pub trait Accumulate: Element + Default + PartialOrd {
        /// The type gradients are summed in.
        type Acc: AccFloat;

        /// Widens to the accumulator type (exact).
        fn to_acc(self) -> Self::Acc;

        /// Rounds an accumulated value to this type (round to nearest, ties to even).
        fn from_acc(acc: Self::Acc) -> Self;

        /// Widens to the accumulator type for comparing alone: every number to the value that
        /// [`Accumulate::to_acc`] gives, every NaN to a NaN (its payload and quiet bit
        /// unspecified). The forwards only compare widened values and take a NaN's bits from
        /// the input, so this is all they need, and for `bf16` it is one shift: `to_acc` also
        /// sets a NaN's quiet bit.
        #[inline(always)]
        fn to_acc_compared(self) -> Self::Acc {
            self.to_acc()
        }

        /// The value of this type that `acc` is, when it is one (a value of this type widened,
        /// not a NaN); for any other `acc` the result is unspecified. Nothing is rounded, so for
        /// `bf16` it is one shift: [`Accumulate::from_acc`] also tests for NaN and rounds.
        #[inline(always)]
        fn from_acc_exact(acc: Self::Acc) -> Self {
            Self::from_acc(acc)
        }

        /// Rounds `acc` like [`Accumulate::from_acc`] when it is a sum of values widened by
        /// [`Accumulate::to_acc`] (or zero), as gradients are summed; may be cheaper. `bf16` skips
        /// its NaN test, which such sums do not need: a NaN among them is quiet (arithmetic quiets
        /// NaNs, and widening does) and carries the low 16 bits of a widened `bf16` or of the
        /// preferred NaN (Rust's floating-point rules), all zero, so rounding keeps it as it is.
        /// For other NaNs the result is unspecified.
        #[inline(always)]
        fn from_acc_sum(acc: Self::Acc) -> Self {
            Self::from_acc(acc)
        }

        /// The sum `0 + self`, accumulated in [`Accumulate::Acc`] and rounded once: what a
        /// position that receives one gradient holds. That is `self` itself, but `-0` gives `+0`
        /// and a NaN gets its quiet bit (on the bits alone for the half types, with no widening or
        /// rounding).
        #[inline(always)]
        fn sum_of_one(self) -> Self {
            Self::from_acc_sum(<Self::Acc as num_traits::Zero>::zero() + self.to_acc())
        }

        /// Widens `src` into `dst` (bulk, vectorised for the half types). Both slices must have
        /// the same length; extra elements of the longer one are left alone.
        fn to_acc_slice(src: &[Self], dst: &mut [Self::Acc]);

        /// Stores `src` into `dst`, rounding each value once (bulk, vectorised for the half
        /// types). Both slices must have the same length; extra elements of the longer one are
        /// left alone.
        fn from_acc_slice(src: &[Self::Acc], dst: &mut [Self]);

        /// Whether sums are rounded faster as slices than one value at a time: `f16`, whose
        /// slices convert with F16C 8 at a time where the processor has it (the kernels' vector
        /// copy rounds them through `simd::narrow`, in one call; elsewhere `half` converts them,
        /// [`Accumulate::from_acc_slice`]), where one value at a time is the software rounding.
        /// The backwards then round a row of sums once it is final (or, in the `Bitmask`
        /// gather, once it is put in order) rather than each running sum. `bf16` rounds in a
        /// few integer instructions, as cheap per running sum and vectorised in the gather's
        /// reordering loop.
        const ROUNDS_SLICES_FASTER: bool = false;

        /// The slice itself as accumulators when `Acc` is `Self` (`f32`, `f64`), else `None`.
        fn as_acc_mut(values: &mut [Self]) -> Option<&mut [Self::Acc]>;

        /// The slice itself as accumulator values when `Acc` is `Self` (`f32`, `f64`), else `None`.
        fn as_acc(values: &[Self]) -> Option<&[Self::Acc]>;
    }
}

pub(crate) use internal::{AccFloat, Accumulate};

/// Float element types the pooling operations accept: `f32`, `f64`, [`half::f16`] and
/// [`half::bf16`]. Sealed.
///
/// Gradients are accumulated in `f32` for `f32`, `f16` and `bf16`, and in `f64` for `f64`: the
/// half types round exactly once, when the finished sum is stored. The trait carries only what
/// generic code around the operations needs: exact conversions through `f64`.
///
/// ```
/// use poolgrad::PoolFloat;
/// fn mean<T: PoolFloat>(values: &[T]) -> f64 {
///     values.iter().map(|v| v.to_f64_exact()).sum::<f64>() / values.len() as f64
/// }
/// assert_eq!(mean(&[half::bf16::from_f32(1.5), half::bf16::from_f32(2.5)]), 2.0);
/// assert_eq!(half::bf16::round_from_f64(256.0 + 1.0), half::bf16::from_f32(256.0)); // ties to even
/// ```
pub trait PoolFloat:
    Element
    + Default
    + PartialOrd
    + fmt::Display
    + Neg<Output = Self>
    + num_traits::Zero
    + num_traits::One
    + Accumulate
{
    /// Rounds an `f64` to this type once (round to nearest, ties to even).
    fn round_from_f64(value: f64) -> Self;

    /// The value as `f64` (exact).
    fn to_f64_exact(self) -> f64;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, i32 => I32, i64 => I64);

impl AccFloat for f32 {
    #[inline(always)]
    fn choose(take: bool, yes: f32, no: f32) -> f32 {
        f32::from_bits(core::hint::select_unpredictable(take, yes.to_bits(), no.to_bits()))
    }

    #[inline(always)]
    fn kept_if(self, keep: bool) -> f32 {
        f32::from_bits(self.to_bits() & 0u32.wrapping_sub(u32::from(keep)))
    }

    #[inline(always)]
    fn to_position(self) -> usize {
        self as usize
    }
}

impl AccFloat for f64 {
    #[inline(always)]
    fn choose(take: bool, yes: f64, no: f64) -> f64 {
        f64::from_bits(core::hint::select_unpredictable(take, yes.to_bits(), no.to_bits()))
    }

    #[inline(always)]
    fn kept_if(self, keep: bool) -> f64 {
        f64::from_bits(self.to_bits() & 0u64.wrapping_sub(u64::from(keep)))
    }

    #[inline(always)]
    fn to_position(self) -> usize {
        self as usize
    }
}

macro_rules! native_float {
    ($($t:ty),*) => {$(
        impl Accumulate for $t {
            type Acc = $t;
            #[inline(always)]
            fn to_acc(self) -> $t { self }
            #[inline(always)]
            fn from_acc(acc: $t) -> $t { acc }
            fn to_acc_slice(src: &[$t], dst: &mut [$t]) {
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
            }
            fn from_acc_slice(src: &[$t], dst: &mut [$t]) {
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
            }
            fn as_acc_mut(values: &mut [$t]) -> Option<&mut [$t]> { Some(values) }
            fn as_acc(values: &[$t]) -> Option<&[$t]> { Some(values) }
        }
        impl PoolFloat for $t {
            fn round_from_f64(value: f64) -> $t { value as $t }
            fn to_f64_exact(self) -> f64 { self as f64 }
        }
    )*};
}
native_float!(f32, f64);

impl Accumulate for f16 {
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        if F16_INSTRUCTIONS { self.to_f32() } else { f32::from_bits(f16_bits_to_f32_bits(self.to_bits())) }
    }
    #[inline(always)]
    fn from_acc(acc: f32) -> f16 {
        if F16_INSTRUCTIONS {
            f16::from_f32(acc)
        } else {
            f16::from_bits(f32_bits_to_f16_bits(acc.to_bits()))
        }
    }
    #[inline(always)]
    fn sum_of_one(self) -> f16 {
        f16::from_bits(half_sum_of_one(self.to_bits(), 0x7C00, 0x0200))
    }
    fn to_acc_slice(src: &[f16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        // F16C when the processor has it (detected at run time by `half`) in groups of 4; the
        // last few one by one, which is cheaper than `half`'s padded copy of a short tail.
        let bulk = n - n % 4;
        if bulk > 0 {
            src[..bulk].convert_to_f32_slice(&mut dst[..bulk]);
        }
        for (d, &s) in dst[bulk..n].iter_mut().zip(&src[bulk..n]) {
            *d = s.to_acc();
        }
    }
    fn from_acc_slice(src: &[f32], dst: &mut [f16]) {
        let n = src.len().min(dst.len());
        let bulk = n - n % 4;
        if bulk > 0 {
            dst[..bulk].convert_from_f32_slice(&src[..bulk]);
        }
        for (d, &s) in dst[bulk..n].iter_mut().zip(&src[bulk..n]) {
            *d = f16::from_acc(s);
        }
    }
    const ROUNDS_SLICES_FASTER: bool = true;

    fn as_acc_mut(_: &mut [f16]) -> Option<&mut [f32]> {
        None
    }
    fn as_acc(_: &[f16]) -> Option<&[f32]> {
        None
    }
}

impl PoolFloat for f16 {
    fn round_from_f64(value: f64) -> f16 {
        f16::from_f64(value)
    }
    fn to_f64_exact(self) -> f64 {
        self.to_f64()
    }
}

impl Accumulate for bf16 {
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        f32::from_bits(bf16_bits_to_f32_bits(self.to_bits()))
    }
    #[inline(always)]
    fn from_acc(acc: f32) -> bf16 {
        bf16::from_bits(f32_bits_to_bf16_bits(acc.to_bits()))
    }
    #[inline(always)]
    fn to_acc_compared(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[inline(always)]
    fn from_acc_exact(acc: f32) -> bf16 {
        bf16::from_bits((acc.to_bits() >> 16) as u16)
    }
    #[inline(always)]
    fn from_acc_sum(acc: f32) -> bf16 {
        bf16::from_bits(sum_f32_bits_to_bf16_bits(acc.to_bits()))
    }
    #[inline(always)]
    fn sum_of_one(self) -> bf16 {
        bf16::from_bits(half_sum_of_one(self.to_bits(), 0x7F80, 0x0040))
    }
    #[inline(always)]
    fn to_acc_slice(src: &[bf16], dst: &mut [f32]) {
        let bits: &[u16] = bytemuck::cast_slice(src);
        for (d, &b) in dst.iter_mut().zip(bits) {
            *d = f32::from_bits(bf16_bits_to_f32_bits(b));
        }
    }
    fn from_acc_slice(src: &[f32], dst: &mut [bf16]) {
        let bits: &mut [u16] = bytemuck::cast_slice_mut(dst);
        for (d, &v) in bits.iter_mut().zip(src) {
            *d = f32_bits_to_bf16_bits(v.to_bits());
        }
    }
    fn as_acc_mut(_: &mut [bf16]) -> Option<&mut [f32]> {
        None
    }
    fn as_acc(_: &[bf16]) -> Option<&[f32]> {
        None
    }
}

impl PoolFloat for bf16 {
    fn round_from_f64(value: f64) -> bf16 {
        bf16::from_f64(value)
    }
    fn to_f64_exact(self) -> f64 {
        self.to_f64()
    }
}

/// [`Accumulate::sum_of_one`] on the bits of a half type whose exponent bits are `exponent` and
/// whose quiet bit is `quiet`: `-0` becomes `+0`, a NaN gets its quiet bit (as widening it and
/// adding zero does), anything else stays as it is. Without branches.
#[inline(always)]
fn half_sum_of_one(b: u16, exponent: u16, quiet: u16) -> u16 {
    let magnitude = b & 0x7FFF;
    let zero = if magnitude == 0 { 0 } else { 0xFFFF };
    let nan = if magnitude > exponent { quiet } else { 0 };
    (b & zero) | nan
}

/// `bf16::to_f32` without branches, so slice loops vectorise (even with SSE2 only): a shift, and
/// the quiet bit set on NaN as `half` does.
#[inline(always)]
fn bf16_bits_to_f32_bits(b: u16) -> u32 {
    let w = u32::from(b) << 16;
    // Both sides are below 2^31: a signed compare, which SSE2 has.
    let nan = ((w & 0x7FFF_FFFF) as i32 > 0x7F80_0000) as u32;
    w | (nan << 22)
}

/// `bf16::from_f32` without branches: round to nearest, ties to even, by adding `0x7FFF` plus
/// the lowest kept bit; NaN keeps its top bits and gets the quiet bit, as `half` does. The
/// arithmetic shift lets SSE2 narrow with a signed pack.
#[inline(always)]
fn f32_bits_to_bf16_bits(x: u32) -> u16 {
    let nan = (x & 0x7FFF_FFFF) as i32 > 0x7F80_0000;
    let rounded = (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) as i32) >> 16;
    let quiet = ((x as i32) >> 16) | 0x0040;
    (if nan { quiet } else { rounded }) as u16
}

/// Whether `half` converts `f16` with an instruction the compiler can inline: the target enables
/// F16C (x86) or FP16 (AArch64) at compile time. Otherwise `half` tests for it at run time and
/// calls an out-of-line function for each value; the scalar conversions below give the same bits
/// inline, without the test and the call.
const F16_INSTRUCTIONS: bool = cfg!(any(
    all(any(target_arch = "x86", target_arch = "x86_64"), target_feature = "f16c"),
    all(target_arch = "aarch64", target_feature = "fp16"),
));

/// `f16::to_f32` inline, in integer and float arithmetic: the exponent rebiased; subnormals
/// normalised by one exact float subtraction; infinities kept; NaNs keep their payload and get the
/// quiet bit, as `half` (and F16C) do.
#[inline(always)]
fn f16_bits_to_f32_bits(h: u16) -> u32 {
    const EXP: u32 = 0x7C00 << 13;
    let h = u32::from(h);
    let bits = (h & 0x7FFF) << 13;
    let exp = bits & EXP;
    let mut o = bits + ((127 - 15) << 23);
    if exp == EXP {
        // Infinity or NaN: the largest exponent, and the quiet bit for a NaN.
        o += (128 - 16) << 23;
        if bits != EXP {
            o |= 0x0040_0000;
        }
    } else if exp == 0 {
        // Zero or subnormal: as 2^-14 (1 + m / 1024), less 2^-14, which is exact.
        o = (f32::from_bits(o + (1 << 23)) - f32::from_bits(113 << 23)).to_bits();
    }
    o | ((h & 0x8000) << 16)
}

/// `f16::from_f32` inline: round to nearest, ties to even. Normal results add the rounding bias
/// to the rebiased bits (a carry out of the mantissa is the correct next exponent, up to
/// infinity); subnormal results let one float addition of 0.5 do the rounding; values of 2^16 and
/// more give infinity; NaNs keep their top payload bits and get the quiet bit, as `half` (and
/// F16C) do.
#[inline(always)]
fn f32_bits_to_f16_bits(x: u32) -> u16 {
    const NORMAL: u32 = 113 << 23; // 2^-14, the least normal f16
    let sign = ((x >> 16) & 0x8000) as u16;
    let a = x & 0x7FFF_FFFF;
    // One comparison for the common case, `2^-14 <= a < 2^16`.
    let above_normal = a.wrapping_sub(NORMAL);
    let magnitude = if above_normal < 0x4780_0000 - NORMAL {
        // Rebiased: `a - (112 << 23)`, that is `above_normal + (1 << 23)`.
        let odd = (a >> 13) & 1;
        (above_normal + (1 << 23) + 0x0FFF + odd) >> 13
    } else if a < NORMAL {
        // Below 2^-14: a subnormal or zero. Adding 0.5 rounds the value to a multiple of 2^-24
        // (the subnormal step) in the low mantissa bits.
        const HALF: u32 = 126 << 23;
        (f32::from_bits(a) + f32::from_bits(HALF)).to_bits() - HALF
    } else if a > 0x7F80_0000 {
        // NaN.
        0x7E00 | ((a >> 13) & 0x03FF)
    } else {
        // 2^16 or more, or infinity.
        0x7C00
    };
    sign | magnitude as u16
}

/// [`f32_bits_to_bf16_bits`] without the NaN test: the rounding alone. Exact for every value but
/// signalling NaNs and NaNs with non-zero low 16 bits (which could carry into the exponent or
/// sign).
#[inline(always)]
fn sum_f32_bits_to_bf16_bits(x: u32) -> u16 {
    (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_types_round_once_from_f32() {
        // 256 + 1 is not representable in bf16 (8 significant bits): rounds to even, 256.
        assert_eq!(bf16::from_acc(257.0).to_f32(), 256.0);
        // 2049 is not representable in f16 (11 significant bits).
        assert_eq!(f16::from_acc(2049.0).to_f32(), 2048.0);
        let mut dst = [bf16::ZERO; 3];
        bf16::from_acc_slice(&[1.0, 257.0, -3.5], &mut dst);
        assert_eq!(dst.map(|v| v.to_f32()), [1.0, 256.0, -3.5]);
    }

    /// The branch-free bf16 conversions equal `half`'s on every bf16 value, and on every f32 high
    /// half combined with low halves that exercise each rounding case.
    #[test]
    fn bf16_bulk_conversions_match_half() {
        for hi in 0..=u16::MAX {
            assert_eq!(bf16_bits_to_f32_bits(hi), bf16::from_bits(hi).to_f32().to_bits(), "{hi:#06x}");
            for lo in [0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF, 0x1234] {
                let x = (u32::from(hi) << 16) | lo;
                let want = bf16::from_f32(f32::from_bits(x)).to_bits();
                assert_eq!(f32_bits_to_bf16_bits(x), want, "{x:#010x}");
                // Sums hold no other NaNs than quiet ones with the low half zero.
                if !f32::from_bits(x).is_nan() || (lo == 0 && x & 0x0040_0000 != 0) {
                    assert_eq!(sum_f32_bits_to_bf16_bits(x), want, "sum: {x:#010x}");
                }
            }
        }
        let src = [1.0f32, 257.0, -3.5, f32::NAN, f32::INFINITY];
        let mut dst = [bf16::ZERO; 5];
        bf16::from_acc_slice(&src, &mut dst);
        let mut back = [0.0f32; 5];
        bf16::to_acc_slice(&dst, &mut back);
        assert_eq!(&back[..3], &[1.0, 256.0, -3.5]);
        assert!(back[3].is_nan() && back[4] == f32::INFINITY);
    }

    /// The conversions for comparing, against `half`'s: every `f16` and `bf16` widens to the
    /// value `half` gives (a NaN to a NaN) and comes back to its own bits if it is not a NaN;
    /// `f32` and `f64` are left as they are.
    #[test]
    fn compared_widening_and_exact_narrowing_keep_every_value() {
        fn check<T: PoolFloat>(value: T, wide: f64) {
            let compared = value.to_acc_compared();
            if wide.is_nan() {
                assert!(num_traits::Float::is_nan(compared), "{value:?}");
                return;
            }
            let back = num_traits::ToPrimitive::to_f64(&compared).unwrap_or(f64::NAN);
            assert_eq!(back.to_bits(), wide.to_bits(), "{value:?} widened");
            assert_eq!(T::from_acc_exact(compared), value, "{value:?} narrowed");
            assert_eq!(bytemuck::bytes_of(&T::from_acc_exact(compared)), bytemuck::bytes_of(&value));
        }
        for b in 0..=u16::MAX {
            let (h, g) = (f16::from_bits(b), bf16::from_bits(b));
            check(h, h.to_f64());
            check(g, g.to_f64());
        }
        for v in [0.0f32, -0.0, 1.5, -3.25e-39, f32::MAX, f32::NEG_INFINITY, f32::NAN] {
            check(v, f64::from(v));
            check(f64::from(v) / 3.0, f64::from(v) / 3.0);
        }
    }

    /// `half`'s conversion (F16C where the processor has it) and its software one, which must
    /// agree with each other and with [`f32_bits_to_f16_bits`].
    fn check_f32_to_f16(x: u32) {
        let v = f32::from_bits(x);
        let want = f16::from_f32(v).to_bits();
        assert_eq!(f16::from_f32_const(v).to_bits(), want, "half's two conversions: {x:#010x}");
        assert_eq!(f32_bits_to_f16_bits(x), want, "{x:#010x}");
    }

    /// The inline f16 widening equals `half`'s on all 65,536 values (NaN payloads included).
    #[test]
    fn f16_widening_matches_half_on_every_value() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32().to_bits();
            assert_eq!(f16_bits_to_f32_bits(h), want, "{h:#06x}");
            assert_eq!(f16::from_bits(h).to_acc().to_bits(), want, "to_acc: {h:#06x}");
        }
    }

    /// The inline f16 rounding equals `half`'s on every f32 high half combined with low halves
    /// that exercise each rounding case (the kept bit, the half-way bit and the sticky bits below
    /// it, for normal results; subnormal results round at bit 14 or above, which the high halves
    /// cover), and on a million more values spread over all of f32.
    #[test]
    fn f16_rounding_matches_half() {
        let lows =
            [0u32, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x3001, 0x7FFF, 0x8000, 0xE000, 0xFFFF];
        for hi in 0..=u32::from(u16::MAX) {
            for lo in lows {
                check_f32_to_f16((hi << 16) | lo);
            }
        }
        // An odd step visits every residue, so every low bit pattern turns up.
        let step = 4093u32;
        let mut x = 0u32;
        for _ in 0..(1u32 << 20) {
            check_f32_to_f16(x);
            x = x.wrapping_add(step);
        }
        assert_eq!(f16::from_acc(65519.996).to_f32(), 65504.0);
        assert!(f16::from_acc(65520.0).is_infinite());
        assert_eq!(f16::from_acc(2.0f32.powi(-25)).to_bits(), 0, "ties to even: zero");
        assert_eq!(f16::from_acc(1.5 * 2.0f32.powi(-24)).to_bits(), 2, "ties to even: 2");
    }

    /// Every one of the 2^32 f32 values: about 20 s in a release build, so not run by default
    /// (`cargo test --release --lib -- --ignored f16_rounding_exhaustive`).
    #[test]
    #[ignore = "exhaustive: run in release"]
    fn f16_rounding_exhaustive() {
        for x in 0..=u32::MAX {
            check_f32_to_f16(x);
        }
    }

    /// The f16 slice conversions (groups of 4 through `half`'s slice routines, the rest one by
    /// one) equal `half`'s scalar conversions at every length and every tail position.
    #[test]
    fn f16_slice_conversions_match_half_at_every_length() {
        // Zeros, subnormals, normals, the largest finite, infinities, quiet and signalling NaNs.
        let bits = [
            0x0000u16, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0xBC01, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01,
        ];
        // Wide values that round: ties to even, overflow to infinity, underflow to zero.
        let wide =
            [2049.0f32, 2051.0, -65520.0, 1e-8, f32::NAN, -0.0, 0.1, 65504.0, 3.0e-5, -7.25, 1e30, 5.96e-8];
        for len in 0..=bits.len() {
            let src: Vec<f16> = bits[..len].iter().map(|&b| f16::from_bits(b)).collect();
            let mut got = vec![0.0f32; len];
            f16::to_acc_slice(&src, &mut got);
            for (k, (g, h)) in got.iter().zip(&src).enumerate() {
                assert_eq!(g.to_bits(), h.to_f32().to_bits(), "to_acc_slice, length {len}, element {k}");
            }
            let mut narrow = vec![f16::ZERO; len];
            f16::from_acc_slice(&wide[..len], &mut narrow);
            for (k, (n, &w)) in narrow.iter().zip(&wide).enumerate() {
                assert_eq!(
                    n.to_bits(),
                    f16::from_f32(w).to_bits(),
                    "from_acc_slice, length {len}, element {k}"
                );
            }
        }
    }

    /// The sum of one gradient on the bits equals widening, adding zero and rounding, on every
    /// value of both half types (and on a spread of f32 and f64 values).
    #[test]
    fn sum_of_one_is_zero_plus_the_value_rounded_once() {
        fn widened<T: PoolFloat>(v: T) -> T {
            T::from_acc_sum(<T::Acc as num_traits::Zero>::zero() + v.to_acc())
        }
        for b in 0..=u16::MAX {
            let (h, s) = (f16::from_bits(b), bf16::from_bits(b));
            assert_eq!(h.sum_of_one().to_bits(), widened(h).to_bits(), "f16 {b:#06x}");
            assert_eq!(s.sum_of_one().to_bits(), widened(s).to_bits(), "bf16 {b:#06x}");
        }
        assert_eq!(f16::NEG_ZERO.sum_of_one().to_bits(), 0);
        assert_eq!(f16::from_bits(0x7C01).sum_of_one().to_bits(), 0x7E01, "signalling NaN quietened");
        assert_eq!(bf16::from_bits(0xFF81).sum_of_one().to_bits(), 0xFFC1, "signalling NaN quietened");
        for v in [0.0f32, -0.0, 1.5, -7.25e-40, f32::INFINITY, f32::MIN, f32::NAN] {
            assert_eq!(v.sum_of_one().to_bits(), (0.0 + v).to_bits(), "{v}");
            assert_eq!(f64::from(v).sum_of_one().to_bits(), (0.0 + f64::from(v)).to_bits(), "{v}");
        }
    }

    #[test]
    fn native_types_accumulate_in_place() {
        let mut v = [1.0f32, 2.0];
        assert!(f32::as_acc_mut(&mut v).is_some());
        let mut h = [f16::ONE];
        assert!(f16::as_acc_mut(&mut h).is_none());
        assert_eq!(DType::BF16.to_string(), "bf16");
    }
}
