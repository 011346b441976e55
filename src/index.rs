//! Index kinds: flat arg-max indices (`i32`, `i64`) through the sealed [`ArgmaxIndex`] trait.

use core::fmt;

use crate::element::Element;

pub(crate) mod repr {
    /// Kernel-side conversions, not part of the public API.
    pub trait IndexRepr: Copy {
        /// `i` as this type; the caller has checked `i < MAX_PLANE`.
        fn from_flat_checked(i: usize) -> Self;
        /// The index as `usize` where it fits `isize`; any other index (negative, or an `i64`
        /// too large for a narrower `usize`) becomes larger than `isize::MAX`, past every range
        /// of positions.
        fn to_usize_wrapping(self) -> usize;
        /// The index as `u32` where it lies in `0..2^31`; any other index becomes at least
        /// 2^31, past every plane of the 32-bit kernels (for loops that vectorise in 32-bit
        /// lanes).
        fn to_u32_wrapping(self) -> u32;

        /// The flat position if it lies in `0..plane`.
        #[inline(always)]
        fn flat_in(self, plane: usize) -> Option<usize> {
            let at = self.to_usize_wrapping();
            (at as isize >= 0 && at < plane).then_some(at)
        }

        /// The flat position if it lies in `start..start + len`, with one comparison; for ranges
        /// of positions, which end at most at `isize::MAX` (as slice lengths do).
        #[inline(always)]
        fn flat_within(self, start: usize, len: usize) -> Option<usize> {
            let at = self.to_usize_wrapping();
            (at.wrapping_sub(start) < len).then_some(at)
        }
    }
}

/// A flat arg-max index `ih * W + iw` inside one `(n, c)` plane, as PyTorch stores it: `i32` or
/// `i64`. Sealed.
///
/// ```
/// use poolgrad::ArgmaxIndex;
/// assert_eq!(<i32 as ArgmaxIndex>::MAX_PLANE, 1 << 31);
/// assert_eq!(i32::try_from_flat(7), Some(7));
/// assert_eq!(i32::try_from_flat(1 << 31), None);
/// ```
pub trait ArgmaxIndex:
    Element
    + Default
    + num_traits::Zero
    + Ord
    + core::hash::Hash
    + fmt::Display
    + Into<i64>
    + TryFrom<i64>
    + repr::IndexRepr
{
    /// The largest plane size `H * W` whose every position this type can hold.
    const MAX_PLANE: u64;

    /// The index as `i64` (exact).
    fn to_i64(self) -> i64;

    /// The flat position `i` as this type, or `None` if it does not fit.
    fn try_from_flat(i: usize) -> Option<Self>;
}

impl repr::IndexRepr for i32 {
    #[inline(always)]
    fn from_flat_checked(i: usize) -> Self {
        i as i32
    }
    #[inline(always)]
    fn to_usize_wrapping(self) -> usize {
        // Sign extension: a negative index becomes at least `usize::MAX / 2 + 1`.
        self as isize as usize
    }
    #[inline(always)]
    fn to_u32_wrapping(self) -> u32 {
        // A negative index becomes at least 2^31.
        self as u32
    }
}

impl repr::IndexRepr for i64 {
    #[inline(always)]
    fn from_flat_checked(i: usize) -> Self {
        i as i64
    }
    #[inline(always)]
    fn to_usize_wrapping(self) -> usize {
        if usize::BITS >= 64 {
            // A negative index becomes at least 2^63.
            self as usize
        } else {
            usize::try_from(self).unwrap_or(usize::MAX)
        }
    }
    #[inline(always)]
    fn to_u32_wrapping(self) -> u32 {
        u32::try_from(self).unwrap_or(u32::MAX)
    }
}

impl ArgmaxIndex for i32 {
    const MAX_PLANE: u64 = 1 << 31;
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn try_from_flat(i: usize) -> Option<Self> {
        i32::try_from(i).ok()
    }
}

impl ArgmaxIndex for i64 {
    const MAX_PLANE: u64 = 1 << 63;
    fn to_i64(self) -> i64 {
        self
    }
    fn try_from_flat(i: usize) -> Option<Self> {
        i64::try_from(i).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::repr::IndexRepr;

    #[test]
    fn range_check_rejects_negative_and_too_large() {
        assert_eq!((-1i32).flat_in(10), None);
        assert_eq!(10i32.flat_in(10), None);
        assert_eq!(9i32.flat_in(10), Some(9));
        assert_eq!(i64::MIN.flat_in(usize::MAX), None);
        assert_eq!((-1i64).flat_in(usize::MAX), None);
        assert_eq!(5i64.flat_in(6), Some(5));
    }

    /// `flat_within` against the plain two-sided test, on every value near the ends of a few
    /// ranges and on the extreme indices.
    #[test]
    fn window_check_is_the_two_sided_test() {
        let ranges = [(0usize, 0usize), (0, 1), (0, 10), (3, 4), (7, 1), (1 << 31, 5), (usize::MAX >> 2, 9)];
        for (start, len) in ranges {
            let near = |v: usize| (v.saturating_sub(3)..v.saturating_add(3)).map(|x| x as i64);
            let values =
                near(start).chain(near(start + len)).chain([-1, i64::MIN, i64::MAX, i32::MIN.into()]);
            for v in values {
                let want =
                    (v >= 0 && (v as usize) >= start && (v as usize) < start + len).then_some(v as usize);
                assert_eq!(v.flat_within(start, len), want, "i64 {v} in {start}+{len}");
                if let Ok(v32) = i32::try_from(v) {
                    assert_eq!(v32.flat_within(start, len), want, "i32 {v} in {start}+{len}");
                }
            }
        }
    }
}
