//! Element types: the sealed [`PoolFloat`] trait for values and gradients, and [`DType`] tags.

use core::fmt;
use core::ops::AddAssign;

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

/// The accumulator types, `f32` and `f64`. Sealed.
pub trait AccFloat: Element + num_traits::Float + AddAssign {}

/// Float element types the pooling operations accept: `f32`, `f64`, [`half::f16`] and
/// [`half::bf16`]. Sealed.
///
/// Gradients are accumulated in [`PoolFloat::Acc`]: `f32` for `f32`, `f16` and `bf16`, `f64` for
/// `f64`. The half types therefore round exactly once, when the finished sum is stored.
///
/// ```
/// use poolgrad::PoolFloat;
/// let x = half::bf16::from_f32(1.5);
/// assert_eq!(x.to_acc(), 1.5f32);
/// assert_eq!(half::bf16::from_acc(256.0 + 1.0), half::bf16::from_f32(256.0)); // rounds once
/// ```
pub trait PoolFloat: Element + num_traits::Float + Default {
    /// The type gradients are summed in.
    type Acc: AccFloat;

    /// Widens to the accumulator type (exact).
    fn to_acc(self) -> Self::Acc;

    /// Rounds an accumulated value to this type (round to nearest, ties to even).
    fn from_acc(acc: Self::Acc) -> Self;

    /// Stores `src` into `dst`, rounding each value once (bulk, vectorised for the half types).
    /// Both slices must have the same length; extra elements of the longer one are left alone.
    fn from_acc_slice(src: &[Self::Acc], dst: &mut [Self]);

    /// The slice itself as accumulators when `Acc` is `Self` (`f32`, `f64`), else `None`.
    fn as_acc_mut(values: &mut [Self]) -> Option<&mut [Self::Acc]>;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i8 => I8, i32 => I32, i64 => I64);

impl AccFloat for f32 {}
impl AccFloat for f64 {}

macro_rules! native_float {
    ($($t:ty),*) => {$(
        impl PoolFloat for $t {
            type Acc = $t;
            #[inline(always)]
            fn to_acc(self) -> $t { self }
            #[inline(always)]
            fn from_acc(acc: $t) -> $t { acc }
            fn from_acc_slice(src: &[$t], dst: &mut [$t]) {
                let n = src.len().min(dst.len());
                dst[..n].copy_from_slice(&src[..n]);
            }
            fn as_acc_mut(values: &mut [$t]) -> Option<&mut [$t]> { Some(values) }
        }
    )*};
}
native_float!(f32, f64);

macro_rules! half_float {
    ($($t:ty),*) => {$(
        impl PoolFloat for $t {
            type Acc = f32;
            #[inline(always)]
            fn to_acc(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn from_acc(acc: f32) -> $t { <$t>::from_f32(acc) }
            fn from_acc_slice(src: &[f32], dst: &mut [$t]) {
                let n = src.len().min(dst.len());
                dst[..n].convert_from_f32_slice(&src[..n]);
            }
            fn as_acc_mut(_: &mut [$t]) -> Option<&mut [f32]> { None }
        }
    )*};
}
half_float!(f16, bf16);

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

    #[test]
    fn native_types_accumulate_in_place() {
        let mut v = [1.0f32, 2.0];
        assert!(f32::as_acc_mut(&mut v).is_some());
        let mut h = [f16::ONE];
        assert!(f16::as_acc_mut(&mut h).is_none());
        assert_eq!(DType::BF16.to_string(), "bf16");
    }
}
