//! Shape formulas, each in exactly one place.
//!
//! Adaptive pooling window `i` of an axis of length `n` pooled to `m` outputs is the half-open
//! range `⌊i·n/m⌋ .. ⌈(i+1)·n/m⌉` (integer arithmetic, as PyTorch's `AdaptivePooling.h` and CANN's
//! AICPU kernel compute it; the `⌈i·n/m⌉` in the aclnn document is a typo). Consecutive windows
//! overlap when `m` does not divide `n`, and `m > n` is allowed.

use core::ops::Range;

/// The input range pooled into output `i` of an adaptive axis (`input` long, `output` outputs).
///
/// Requires `output > 0` and `i < output`.
///
/// ```
/// use poolgrad::geometry::adaptive_window;
/// // 5 inputs to 3 outputs: overlapping windows.
/// assert_eq!(adaptive_window(0, 5, 3), 0..2);
/// assert_eq!(adaptive_window(1, 5, 3), 1..4);
/// assert_eq!(adaptive_window(2, 5, 3), 3..5);
/// // 2 inputs to 3 outputs: windows repeat inputs.
/// assert_eq!(adaptive_window(1, 2, 3), 0..2);
/// ```
pub fn adaptive_window(i: usize, input: usize, output: usize) -> Range<usize> {
    // u128 keeps i * input exact for every usize; the quotients are at most `input`.
    let (i, n, m) = (i as u128, input as u128, output as u128);
    let start = (i * n) / m;
    let end = ((i + 1) * n).div_ceil(m);
    start as usize..end as usize
}

/// Whether adaptive pooling from `input` to `output` uses equal, non-overlapping windows on
/// both axes (`H % Ho == 0` and `W % Wo == 0`).
pub fn adaptive_is_divisible([h, w]: [usize; 2], [ho, wo]: [usize; 2]) -> bool {
    ho != 0 && wo != 0 && h % ho == 0 && w % wo == 0
}

/// The adaptive windows of every output along one axis.
pub(crate) fn adaptive_windows(input: usize, output: usize) -> Vec<Range<usize>> {
    (0..output).map(|i| adaptive_window(i, input, output)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_axis_and_are_never_empty() {
        for n in 1..40 {
            for m in 1..45 {
                let ws = adaptive_windows(n, m);
                assert_eq!(ws[0].start, 0);
                assert_eq!(ws[m - 1].end, n);
                for (i, w) in ws.iter().enumerate() {
                    assert!(w.start < w.end, "n={n} m={m} i={i} {w:?}");
                    // Definition: start is the largest s with s*m <= i*n; end the smallest e with e*m >= (i+1)*n.
                    assert!(w.start * m <= i * n && (w.start + 1) * m > i * n);
                    assert!(w.end * m >= (i + 1) * n && (w.end - 1) * m < (i + 1) * n);
                }
                for pair in ws.windows(2) {
                    assert!(pair[1].start <= pair[0].end, "gap between windows for n={n} m={m}");
                }
            }
        }
    }

    #[test]
    fn huge_sizes_do_not_overflow() {
        let n = usize::MAX;
        assert_eq!(adaptive_window(2, n, 3), (n / 3) * 2..n);
        assert!(adaptive_is_divisible([8, 9], [4, 3]));
        assert!(!adaptive_is_divisible([8, 9], [3, 3]));
    }
}
