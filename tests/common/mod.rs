//! Independent reference implementations (plain loops, written from the definitions in
//! `docs/design.md` and PyTorch's kernels, not from the crate's code) and test helpers.
#![allow(dead_code)]

use std::sync::OnceLock;

mod equality;
mod forwards;
mod scatter;
mod unpooling;

pub use equality::same_or_both_nan;

#[allow(unused_imports)]
pub use forwards::{adaptive, adaptive_on, max_pool, max_pool_on};
#[allow(unused_imports)]
pub use unpooling::unpool_loops;

use ndarray::{Array4, ArrayView4};
use poolgrad::device::cpu::{Cpu, Parallelism};
use poolgrad::{PoolDim, PoolFloat};

/// Reference backward: sums in f64, in row-major output order ([`scatter::scatter_loop`]).
pub fn backward_f64(go: ArrayView4<f64>, idx: ArrayView4<i64>, h: usize, w: usize) -> Array4<f64> {
    backward_with(go, idx, (h, w), scatter::in_f64)
}

/// Reference backward summed in f32 in row-major output order (PyTorch's f32 kernel, and the
/// accumulator of the half types before their single rounding).
pub fn backward_f32(go: ArrayView4<f64>, idx: ArrayView4<i64>, h: usize, w: usize) -> Array4<f32> {
    backward_with(go, idx, (h, w), scatter::in_f32).mapv(|v| v as f32)
}

/// The plain scatter of `go` at `idx` into planes of `h x w`, each sum made by `add`.
fn backward_with(
    go: ArrayView4<f64>,
    idx: ArrayView4<i64>,
    (h, w): (usize, usize),
    add: fn(f64, f64) -> f64,
) -> Array4<f64> {
    let (n, c, _, _) = go.dim();
    let (go, idx): (Vec<f64>, Vec<i64>) = (go.iter().copied().collect(), idx.iter().copied().collect());
    let sums = scatter::scatter_loop((&go, &idx), (n * c, h * w), add);
    Array4::from_shape_vec((n, c, h, w), sums).expect("n * c planes of h * w")
}

/// Reference backward of element type `T`: the f64 sums for `f64`; for the others the f32 sums
/// of [`backward_f32`] (the accumulator of the half types), each rounded once to `T`. As f64.
pub fn backward_rounded_once<T: PoolFloat>(
    go: ArrayView4<f64>,
    idx: ArrayView4<i64>,
    h: usize,
    w: usize,
) -> Array4<f64> {
    if T::DTYPE == poolgrad::DType::F64 {
        return backward_f64(go, idx, h, w);
    }
    backward_f32(go, idx, h, w).mapv(|v| T::from_acc(num_traits::cast(v).unwrap()).to_f64_exact())
}

/// `T` from f64 (exact for the small values the tests use).
pub fn cast<T: PoolFloat>(v: f64) -> T {
    let t = T::round_from_f64(v);
    assert!(t.to_f64_exact() == v || v.is_nan(), "{v} is not exact in {}", T::DTYPE);
    t
}

pub fn to_f64<T: PoolFloat>(v: T) -> f64 {
    v.to_f64_exact()
}

pub fn arr_to<T: PoolFloat>(a: &Array4<f64>) -> Array4<T> {
    a.mapv(cast::<T>)
}

pub fn arr_f64<T: PoolFloat>(a: ArrayView4<T>) -> Array4<f64> {
    a.mapv(to_f64)
}

/// Bitwise equality of f64 images (NaN equals NaN).
pub fn same_bits(a: &Array4<f64>, b: &Array4<f64>) -> bool {
    a.shape() == b.shape() && a.iter().zip(b.iter()).all(|(x, y)| same_or_both_nan(*x, *y))
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

/// A CPU device with a dedicated pool of 2, 3 or 7 threads, built once per test binary, that
/// splits every call however small (grain 0), so that small cases exercise the work splits.
pub fn cpu_with_threads(threads: usize) -> &'static Cpu {
    static POOLS: OnceLock<[Cpu; 3]> = OnceLock::new();
    let pools = POOLS.get_or_init(|| {
        [2usize, 3, 7].map(|t| Cpu::new(Parallelism::Threads(t.try_into().unwrap())).unwrap().with_grain(0))
    });
    match threads {
        2 => &pools[0],
        3 => &pools[1],
        7 => &pools[2],
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

/// Phase 1 only of an adaptive max pooling of `input` (one plane: N = C = 1) to 1x1 with `i32`
/// indices: the index-width check stops here, so a test whose check is missing fails at once
/// instead of pooling a plane of 2^31 elements.
pub fn plan_adaptive_i32_indices<D: PoolDim>(x: ndarray::ArrayView<'_, f32, D>) -> poolgrad::Result<()> {
    with_global_pool_plan::<i32, _, _>(x, |plan, _| plan.map(|_| ()))
}

/// The phase-1 plan of an adaptive max pooling of `x` (one plane) to 1x1 with indices `I`, on
/// one thread, given to `f` with its device.
pub fn with_global_pool_plan<I, D, R>(
    x: ndarray::ArrayView<'_, f32, D>,
    f: impl FnOnce(
        poolgrad::Result<poolgrad::Plan<'_, Cpu, poolgrad::op::AdaptiveMaxPool2d<'_, f32, I>>>,
        &Cpu,
    ) -> R,
) -> R
where
    I: poolgrad::ArgmaxIndex,
    D: PoolDim,
{
    // 1x1 outputs of the input's rank.
    let ones = ndarray::IxDyn(&vec![1; x.ndim()]);
    let (mut out, mut idx) = (ndarray::ArrayD::<f32>::zeros(ones.clone()), ndarray::ArrayD::<I>::zeros(ones));
    let cpu = Cpu::sequential();
    let op = (|| {
        Ok(poolgrad::op::AdaptiveMaxPool2d {
            input: poolgrad::TensorRef::from_view(x)?,
            output_size: [1, 1],
            output: poolgrad::TensorMut::from_array(&mut out)?,
            indices: poolgrad::TensorMut::from_array(&mut idx)?,
        })
    })();
    f(op.and_then(|op| poolgrad::Plan::new(&cpu, op)), &cpu)
}

/// The elements of a raw little-endian file written by the PyTorch case scripts
/// (`benches/torch-anchor/*_cases.py`), `B` bytes each.
pub fn le_elements<T, const B: usize>(bytes: &[u8], from_le: fn([u8; B]) -> T) -> Vec<T> {
    bytes.chunks_exact(B).map(|c| from_le(c.try_into().expect("B bytes"))).collect()
}

/// The int64 indices of such a file.
pub fn le_indices(bytes: &[u8]) -> Vec<i64> {
    le_elements(bytes, i64::from_le_bytes)
}

/// The same elements bit for bit, NaNs compared as NaNs: a selected NaN is the input's in
/// poolgrad, where PyTorch's bf16 kernels give the canonical NaN.
pub fn same_bits_nan_as_nan<T: PoolFloat>(a: &[T], b: &[T]) -> bool {
    // (Widening is exact and one-to-one on numbers, so equal f64 bits are equal bits of `T`.)
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_or_both_nan(x.to_f64_exact(), y.to_f64_exact()))
}
