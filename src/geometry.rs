//! Shape formulas, each in exactly one place.
//!
//! Adaptive pooling window `i` of an axis of length `n` pooled to `m` outputs is the half-open
//! range `⌊i·n/m⌋ .. ⌈(i+1)·n/m⌉` (integer arithmetic, as PyTorch's `AdaptivePooling.h` and CANN's
//! AICPU kernel compute it; the `⌈i·n/m⌉` in the aclnn document is a typo). Consecutive windows
//! overlap when `m` does not divide `n`, and `m > n` is allowed.
//!
//! Max pooling along an axis of length `n` with kernel `k`, stride `s`, padding `p` and dilation
//! `d` has `⌊(n + 2p − d(k−1) − 1 + (ceil ? s−1 : 0)) / s⌋ + 1` outputs, minus one in ceil mode
//! when the last window would start at or past `n + p` (PyTorch's `pooling_output_shape` and
//! aclnn's `PoolingOutShape`). Window `o` reads inputs `o·s − p + i·d` for `i < k`, skipping the
//! ones outside `0..n` (padding is never selected).
//!
//! The Ascend int8 mask of a `[N, C, H, W]` input pooled to `Ho x Wo` with a `kH x kW` kernel has
//! shape `[N, C, kH·kW, (⌈Ho·Wo/16⌉ + 1)·32]`.

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
    product_quotient(i, input, output, false)..product_quotient(i + 1, input, output, true)
}

/// `⌊a·b/c⌋`, or `⌈a·b/c⌉` when `round_up`, for `c > 0` and a result that fits in `usize` (the
/// adaptive windows' bounds, at most `input`). The product is taken in 128 bits only when it
/// overflows `usize`: a 128-bit division is a library call of about a hundred instructions, paid
/// per window on every call.
fn product_quotient(a: usize, b: usize, c: usize, round_up: bool) -> usize {
    match a.checked_mul(b) {
        Some(p) if round_up => p.div_ceil(c),
        Some(p) => p / c,
        None => {
            let (p, c) = (a as u128 * b as u128, c as u128);
            (if round_up { p.div_ceil(c) } else { p / c }) as usize
        }
    }
}

/// `a / b` for `a >= 0` and `b > 0`, in 64 bits when both fit (always, unless a parameter is
/// near `usize::MAX`): the max-pooling formulas work in `i128` so that no sum or product of
/// parameters overflows, and a 128-bit division is a library call.
fn quotient(a: i128, b: i128) -> i128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => i128::from(a / b),
        _ => a / b,
    }
}

/// Whether adaptive pooling from `input` to `output` uses equal, non-overlapping windows on
/// both axes (`H % Ho == 0` and `W % Wo == 0`).
pub fn adaptive_is_divisible(input: [usize; 2], output: [usize; 2]) -> bool {
    adaptive_divides(input, output)
}

/// [`adaptive_is_divisible`] on any number of axes: every window is `input / output` long and
/// starts where the one before ends, so no two windows share an input.
pub(crate) fn adaptive_divides<const N: usize>(input: [usize; N], output: [usize; N]) -> bool {
    input.iter().zip(&output).all(|(&i, &o)| o != 0 && i % o == 0)
}

/// The number of max-pooling outputs along one axis, or `None` when it is below 1 (or the
/// parameters make no sense: a zero kernel, stride or dilation).
///
/// ```
/// use poolgrad::geometry::pool_output_len;
/// assert_eq!(pool_output_len(112, 3, 2, 1, 1, false), Some(56));
/// // ceil mode adds a partial window ...
/// assert_eq!(pool_output_len(5, 2, 2, 0, 1, true), Some(3));
/// // ... unless it would start in the right padding: H=4, k=2, s=3, p=1.
/// assert_eq!(pool_output_len(4, 2, 3, 1, 1, true), Some(2));
/// assert_eq!(pool_output_len(2, 5, 1, 0, 1, false), None);
/// ```
pub fn pool_output_len(
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let (n, k, s, p, d) = (input as i128, kernel as i128, stride as i128, padding as i128, dilation as i128);
    let span = n + 2 * p - d * (k - 1) - 1 + if ceil_mode { s - 1 } else { 0 };
    if span < 0 {
        return None; // the window is longer than the padded input
    }
    let mut out = quotient(span, s) + 1;
    if ceil_mode && (out - 1) * s >= n + p {
        out -= 1;
    }
    if out < 1 { None } else { usize::try_from(out).ok() }
}

/// The first input position of max-pooling window `o` (may be negative: padding).
pub(crate) fn pool_window_origin(o: usize, stride: usize, padding: usize) -> i128 {
    o as i128 * stride as i128 - padding as i128
}

/// The input positions max-pooling window `o` reads along one axis: `(first, count)`, the valid
/// taps being `first + i·dilation` for `i < count` (`count` is 0 if the window reads only
/// padding).
pub(crate) fn pool_window_taps(
    o: usize,
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
) -> (usize, usize) {
    let origin = pool_window_origin(o, stride, padding);
    let (n, k, d) = (input as i128, kernel as i128, dilation as i128);
    // First tap at or after 0, last tap before n. (At origin 0 both branches give 0: `<=` for
    // `<` is an equivalent mutant.)
    let first_i = if origin < 0 { quotient(-origin + d - 1, d) } else { 0 };
    let end_i = if origin >= n { 0 } else { quotient(n - origin + d - 1, d).min(k) };
    if end_i <= first_i {
        return (0, 0);
    }
    ((origin + first_i * d) as usize, (end_i - first_i) as usize)
}

/// Shape of the Ascend int8 mask: `[N, C, kH·kW, (⌈Ho·Wo/16⌉ + 1)·32]`, or `None` on overflow.
///
/// ```
/// // The 4x4, k=2, s=2 example of the Ascend documents: [1, 1, 4, 64].
/// assert_eq!(poolgrad::geometry::mask_shape(1, 1, [2, 2], [2, 2]), Some([1, 1, 4, 64]));
/// ```
pub fn mask_shape(n: usize, c: usize, [kh, kw]: [usize; 2], [ho, wo]: [usize; 2]) -> Option<[usize; 4]> {
    let row_bytes = mask_words_per_row(ho.checked_mul(wo)?)?.checked_mul(2)?;
    Some([n, c, kh.checked_mul(kw)?, row_bytes])
}

/// `u16` words per `(n, c-block, kernel offset)` row of the mask: `(⌈P/16⌉ + 1)·16`.
pub(crate) fn mask_words_per_row(positions: usize) -> Option<usize> {
    positions.div_ceil(16).checked_add(1)?.checked_mul(16)
}

/// The planes (`n * C + c`) of `Bitmask` block `b = n * ⌈C/16⌉ + c1` of a mask of `c` channels:
/// its channels `16 * c1 ..` (16, or fewer in the last block of a batch), consecutive planes;
/// none without channels.
pub(crate) fn mask_block_planes(c: usize, b: usize) -> Range<usize> {
    let c1s = c.div_ceil(16);
    let first = |b: usize| (b / c1s) * c + ((b % c1s) * 16).min(c);
    if c1s == 0 { 0..0 } else { first(b)..first(b + 1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `adaptive_divides` against the windows themselves: it holds exactly when no input is in
    /// two windows, for inputs and outputs of 1 to 12 on one axis.
    #[test]
    fn dividing_adaptive_sizes_are_the_disjoint_windows() {
        for input in 1..=12 {
            for output in 1..=12 {
                let mut readers = vec![0; input];
                (0..output).flat_map(|i| adaptive_window(i, input, output)).for_each(|x| readers[x] += 1);
                let disjoint = readers.iter().all(|&r| r <= 1);
                assert_eq!(adaptive_divides([input], [output]), disjoint, "{input} -> {output}");
            }
        }
        assert!(adaptive_divides([4, 6, 9], [2, 3, 3]));
        assert!(!adaptive_divides([4, 6, 9], [2, 3, 4]));
    }

    /// A zero kernel, stride or dilation alone, the others valid, has no output.
    #[test]
    fn zero_parameters_alone_have_no_output() {
        assert_eq!(pool_output_len(6, 2, 2, 0, 1, false), Some(3));
        for ceil in [false, true] {
            assert_eq!(pool_output_len(6, 0, 2, 0, 1, ceil), None, "kernel 0");
            assert_eq!(pool_output_len(6, 2, 0, 0, 1, ceil), None, "stride 0");
            assert_eq!(pool_output_len(6, 2, 2, 0, 0, ceil), None, "dilation 0");
        }
    }

    #[test]
    fn windows_cover_the_axis_and_are_never_empty() {
        for n in 1..40 {
            for m in 1..45 {
                let ws: Vec<Range<usize>> = (0..m).map(|i| adaptive_window(i, n, m)).collect();
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

    /// Independent characterisation: floor mode counts windows that fit in the padded input;
    /// ceil mode counts windows that start before the padded input's last full-stride position
    /// and inside `input + padding`.
    #[test]
    fn pool_output_len_matches_window_counting() {
        for n in 1..12 {
            for k in 1..5 {
                for s in 1..5 {
                    for d in 1..4 {
                        for p in 0..=k / 2 {
                            let eff = d * (k - 1) + 1;
                            let padded = n + 2 * p;
                            let floor = (0..100).filter(|o| o * s + eff <= padded).count();
                            let ceil = (0..100).filter(|o| o * s + eff < padded + s && o * s < n + p).count();
                            let want = |c: usize| if c == 0 { None } else { Some(c) };
                            assert_eq!(
                                pool_output_len(n, k, s, p, d, false),
                                want(floor),
                                "n{n} k{k} s{s} p{p} d{d}"
                            );
                            assert_eq!(
                                pool_output_len(n, k, s, p, d, true),
                                want(ceil),
                                "ceil n{n} k{k} s{s} p{p} d{d}"
                            );
                        }
                    }
                }
            }
        }
        // burn's rule gives 4 here (no last-window correction); PyTorch and aclnn give 3.
        assert_eq!(pool_output_len(6, 1, 2, 0, 1, true), Some(3));
        assert_eq!(pool_output_len(4, 1, 2, 0, 1, true), Some(2));
    }

    #[test]
    fn window_taps_skip_padding() {
        for n in 1..10 {
            for k in 1..5 {
                for s in 1..4 {
                    for d in 1..4 {
                        for p in 0..=k / 2 {
                            for o in 0..8 {
                                let want: Vec<usize> = (0..k)
                                    .map(|i| o as i64 * s as i64 - p as i64 + (i * d) as i64)
                                    .filter(|&t| (0..n as i64).contains(&t))
                                    .map(|t| t as usize)
                                    .collect();
                                let (first, count) = pool_window_taps(o, n, k, s, p, d);
                                let got: Vec<usize> = (0..count).map(|i| first + i * d).collect();
                                assert_eq!(got, want, "o{o} n{n} k{k} s{s} p{p} d{d}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Parameters near `usize::MAX` take the 128-bit divisions: the taps still equal the ones
    /// found tap by tap in `i128`, and the output counts the windows that fit.
    #[test]
    fn window_taps_and_counts_of_huge_parameters() {
        let big = usize::MAX;
        for (n, k, s, p, d) in [(10, 3, 1, big, big), (10, 3, 1, big / 2, big / 2), (7, 2, big, big - 3, 3)] {
            for o in 0..3 {
                let origin = o as i128 * s as i128 - p as i128;
                let want: Vec<i128> = (0..k as i128)
                    .map(|i| origin + i * d as i128)
                    .filter(|t| (0..n as i128).contains(t))
                    .collect();
                let (first, count) = pool_window_taps(o, n, k, s, p, d);
                let got: Vec<i128> = (0..count as i128).map(|i| first as i128 + i * d as i128).collect();
                assert_eq!(got, want, "o{o} n{n} k{k} s{s} p{p} d{d}");
            }
        }
        // Windows of 2, stride 4, in 2^64 + 2 padded inputs: they start at 0, 4, .., 2^64.
        assert_eq!(pool_output_len(2, 2, 4, 1 << 63, 1, false), Some((1 << 62) + 1));
        // Stride near the limit: only the first window (ceil mode adds one, then drops it:
        // it would start past the input).
        assert_eq!(pool_output_len(5, 2, big, 0, 1, false), Some(1));
        assert_eq!(pool_output_len(5, 2, big, 0, 1, true), Some(1));
        // One window of 2^63 + 1 inputs in 2^63 + 10: 10 windows.
        assert_eq!(pool_output_len(10, 2, 1, 1 << 62, 1 << 63, false), Some(10));
    }

    #[test]
    fn mask_rows_hold_one_spare_block() {
        assert_eq!(mask_words_per_row(4), Some(32));
        assert_eq!(mask_words_per_row(16), Some(32));
        assert_eq!(mask_words_per_row(17), Some(48));
        assert_eq!(mask_shape(2, 3, [3, 3], [56, 56]), Some([2, 3, 9, (196 + 1) * 32]));
        assert_eq!(mask_shape(1, 1, [usize::MAX, 2], [1, 1]), None);
    }

    #[test]
    fn huge_sizes_do_not_overflow() {
        let n = usize::MAX;
        assert_eq!(adaptive_window(2, n, 3), (n / 3) * 2..n);
        assert!(adaptive_is_divisible([8, 9], [4, 3]));
        assert!(!adaptive_is_divisible([8, 9], [3, 3]));
    }
}
