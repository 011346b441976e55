//! Independent reference implementations (plain loops, written from the definitions in
//! DESIGN.md and PyTorch's kernels, not from the crate's code) and test helpers.
#![allow(dead_code)]

use std::sync::OnceLock;

use ndarray::{Array4, ArrayView4};
use num_traits::NumCast;
use poolgrad::PoolFloat;
use poolgrad::device::cpu::{Cpu, Parallelism};

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

/// Reference output length of max pooling, counted window by window (not from the formula):
/// floor mode counts windows inside the padded input; ceil mode also counts a last partial window
/// if it starts inside `input + padding`.
pub fn pool_len(n: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> usize {
    let eff = d * (k - 1) + 1;
    (0..n + 2 * p + 1)
        .filter(
            |o| if ceil { o * s + eff < n + 2 * p + s && o * s < n + p } else { o * s + eff <= n + 2 * p },
        )
        .count()
}

/// Reference max pooling in f64, trying every tap and skipping the ones outside the input.
pub fn max_pool_forward(
    x: ArrayView4<f64>,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    out: [usize; 2],
) -> (Array4<f64>, Array4<i64>) {
    let (n, c, h, w) = x.dim();
    let mut vals = Array4::zeros((n, c, out[0], out[1]));
    let mut idx = Array4::zeros((n, c, out[0], out[1]));
    for b in 0..n {
        for ch in 0..c {
            for oh in 0..out[0] {
                for ow in 0..out[1] {
                    let mut best = f64::NEG_INFINITY;
                    let mut best_at: Option<i64> = None;
                    for i in 0..k[0] {
                        let ih = (oh * s[0] + i * d[0]) as i64 - p[0] as i64;
                        if ih < 0 || ih >= h as i64 {
                            continue;
                        }
                        for j in 0..k[1] {
                            let iw = (ow * s[1] + j * d[1]) as i64 - p[1] as i64;
                            if iw < 0 || iw >= w as i64 {
                                continue;
                            }
                            let at = ih * w as i64 + iw;
                            let v = x[[b, ch, ih as usize, iw as usize]];
                            best_at.get_or_insert(at);
                            if v > best || v.is_nan() {
                                best = v;
                                best_at = Some(at);
                            }
                        }
                    }
                    vals[[b, ch, oh, ow]] = best;
                    idx[[b, ch, oh, ow]] = best_at.expect("every window reads an input");
                }
            }
        }
    }
    (vals, idx)
}

/// Checks a backward result `gi` (as f64) against the references: exact per dtype (f64: the f64
/// sum; others: the f32 row-major sum rounded once), the sum conserved for f32/f64 (the gradients
/// are small integers), and nonzero only at indexed positions.
pub fn check_scatter<T: PoolFloat>(
    gi: &Array4<f64>,
    grad: &Array4<f64>,
    idx: &Array4<i64>,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::prop_assert;
    let (_, _, h, w) = gi.dim();
    let exact = backward_f64(grad.view(), idx.view(), h, w);
    let want = if T::DTYPE == poolgrad::DType::F64 {
        exact.clone()
    } else {
        backward_f32(grad.view(), idx.view(), h, w)
            .mapv(|v| to_f64(T::from_acc(num_traits::cast(v).unwrap())))
    };
    prop_assert!(same_bits(gi, &want), "backward differs from the f32-accumulated reference");
    let tolerance = match T::DTYPE {
        poolgrad::DType::F16 => 1e-3,
        poolgrad::DType::BF16 => 8e-3,
        _ => 0.0,
    };
    for (a, e) in gi.iter().zip(exact.iter()) {
        prop_assert!(approx::relative_eq!(*a, *e, max_relative = tolerance, epsilon = 0.0), "{a} vs {e}");
    }
    if matches!(T::DTYPE, poolgrad::DType::F32 | poolgrad::DType::F64) {
        prop_assert!(gi.sum() == grad.sum(), "sum {} != {}", gi.sum(), grad.sum());
    }
    for ((b, c, ih, iw), v) in gi.indexed_iter() {
        if *v != 0.0 {
            let k = (ih * w + iw) as i64;
            prop_assert!(
                idx.slice(ndarray::s![b, c, .., ..]).iter().any(|&i| i == k),
                "gradient at unindexed ({ih}, {iw})"
            );
        }
    }
    Ok(())
}

/// A CPU device with a dedicated pool of 2 or 7 threads, built once per test binary.
pub fn cpu_with_threads(threads: usize) -> &'static Cpu {
    static POOLS: OnceLock<[Cpu; 2]> = OnceLock::new();
    let pools = POOLS
        .get_or_init(|| [2usize, 7].map(|t| Cpu::new(Parallelism::Threads(t.try_into().unwrap())).unwrap()));
    match threads {
        2 => &pools[0],
        7 => &pools[1],
        _ => panic!("no pool of {threads} threads"),
    }
}

/// Asserts that an error's message contains every part.
pub fn assert_message(e: &poolgrad::Error, parts: &[&str]) {
    let m = e.to_string();
    for p in parts {
        assert!(m.contains(p), "message {m:?} lacks {p:?}");
    }
}
