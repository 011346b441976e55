//! Independent reference implementations (plain loops, written from the definitions in
//! DESIGN.md and PyTorch's kernels, not from the crate's code) and test helpers.
#![allow(dead_code)]

use ndarray::{Array4, ArrayView4};
use num_traits::NumCast;
use poolgrad::PoolFloat;

/// `floor(i * n / m) .. ceil((i + 1) * n / m)`, written out directly (not with the crate's
/// `div_ceil` form, on purpose).
#[allow(clippy::manual_div_ceil)]
pub fn window(i: usize, n: usize, m: usize) -> (usize, usize) {
    let start = (i * n) / m;
    let end = ((i + 1) * n + m - 1) / m;
    (start, end)
}

/// Reference adaptive max pooling in f64: `(values, flat indices)`.
pub fn adaptive_forward(x: ArrayView4<f64>, ho: usize, wo: usize) -> (Array4<f64>, Array4<i64>) {
    let (n, c, h, w) = x.dim();
    let mut out = Array4::zeros((n, c, ho, wo));
    let mut idx = Array4::zeros((n, c, ho, wo));
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                let (h0, h1) = window(oh, h, ho);
                for ow in 0..wo {
                    let (w0, w1) = window(ow, w, wo);
                    let mut best = f64::NEG_INFINITY;
                    let mut best_at = (h0 * w + w0) as i64;
                    for ih in h0..h1 {
                        for iw in w0..w1 {
                            let v = x[[b, ch, ih, iw]];
                            if v > best || v.is_nan() {
                                best = v;
                                best_at = (ih * w + iw) as i64;
                            }
                        }
                    }
                    out[[b, ch, oh, ow]] = best;
                    idx[[b, ch, oh, ow]] = best_at;
                }
            }
        }
    }
    (out, idx)
}

/// Reference backward: sums in f64, in row-major output order.
pub fn backward_f64(go: ArrayView4<f64>, idx: ArrayView4<i64>, h: usize, w: usize) -> Array4<f64> {
    let (n, c, ho, wo) = go.dim();
    let mut gi = Array4::zeros((n, c, h, w));
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                for ow in 0..wo {
                    let k = idx[[b, ch, oh, ow]] as usize;
                    gi[[b, ch, k / w, k % w]] += go[[b, ch, oh, ow]];
                }
            }
        }
    }
    gi
}

/// Reference backward summed in f32 in row-major output order (PyTorch's f32 kernel, and the
/// accumulator of the half types before their single rounding).
pub fn backward_f32(go: ArrayView4<f64>, idx: ArrayView4<i64>, h: usize, w: usize) -> Array4<f32> {
    let (n, c, ho, wo) = go.dim();
    let mut gi = Array4::<f32>::zeros((n, c, h, w));
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..ho {
                for ow in 0..wo {
                    let k = idx[[b, ch, oh, ow]] as usize;
                    gi[[b, ch, k / w, k % w]] += go[[b, ch, oh, ow]] as f32;
                }
            }
        }
    }
    gi
}

/// `T` from f64 (exact for the small values the tests use).
pub fn cast<T: PoolFloat>(v: f64) -> T {
    <T as NumCast>::from(v).expect("value representable")
}

pub fn to_f64<T: PoolFloat>(v: T) -> f64 {
    v.to_f64().expect("finite or NaN converts")
}

pub fn arr_to<T: PoolFloat>(a: &Array4<f64>) -> Array4<T> {
    a.mapv(cast::<T>)
}

pub fn arr_f64<T: PoolFloat>(a: ArrayView4<T>) -> Array4<f64> {
    a.mapv(to_f64)
}

/// Bitwise equality of f64 images (NaN equals NaN).
pub fn same_bits(a: &Array4<f64>, b: &Array4<f64>) -> bool {
    a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}
