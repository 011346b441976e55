//! What the candle and burn bridge tests share: hand-worked cases with PyTorch's values, and
//! deterministic inputs with many ties. Included by `candle_bridge.rs` and `burn_bridge.rs`.
//!
//! Expected values are worked out by hand in the comments, from PyTorch's CPU kernels: a value
//! replaces the running maximum of a row-major window scan when it is greater or NaN, so the
//! first maximum wins and the last NaN wins; the backward adds each output's gradient at its
//! index.

#![allow(dead_code)] // each bridge uses what its framework has (burn has no mask form)

#[path = "equality.rs"]
mod equality;
#[path = "scatter.rs"]
mod scatter;
#[path = "unpooling.rs"]
mod unpooling;
#[path = "../../examples/common/xorshift.rs"]
mod xorshift;

pub use scatter::{in_f32, in_f64, scatter_loop};

use ndarray::ArrayD;
use poolgrad::{Bitmask, MaxPool2dParams, PoolFloat};

/// The input gradient by poolgrad's own free functions (forward for the indices or mask, then
/// its backward), on ndarray data: what a bridge must reproduce bit for bit.
pub fn poolgrad_gradient<T: PoolFloat>(op: Op, x: &ArrayD<T>, grad_output: &ArrayD<T>) -> ArrayD<T> {
    match op {
        Op::MaxPool(p) => {
            let pooled = poolgrad::max_pool2d_with_indices(x, &p).unwrap();
            poolgrad::max_pool2d_with_indices_backward(grad_output, x, &pooled.indices, &p).unwrap()
        }
        Op::Adaptive(size) => {
            let pooled = poolgrad::adaptive_max_pool2d(x, size).unwrap();
            poolgrad::adaptive_max_pool2d_backward(grad_output, x, &pooled.indices).unwrap()
        }
        Op::Mask(p) => {
            let pooled = poolgrad::max_pool2d_with_mask(x, &p, Bitmask).unwrap();
            poolgrad::max_pool2d_with_mask_backward(grad_output, x, &pooled.mask).unwrap()
        }
    }
}

/// One hand-worked case: input, operation, gradient of the output, expected output and input
/// gradient.
#[derive(Clone)]
pub struct Case {
    pub name: &'static str,
    pub x: Vec<f64>,
    pub shape: Vec<usize>,
    pub op: Op,
    pub w: Vec<f64>,
    pub y: Vec<f64>,
    pub gx: Vec<f64>,
}

#[derive(Clone, Copy)]
pub enum Op {
    MaxPool(MaxPool2dParams),
    Adaptive([usize; 2]),
    Mask(MaxPool2dParams),
}

pub fn hand_worked_cases() -> Vec<Case> {
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let mut cases = vec![
        // Ties, kernel 2 = stride 2 (candle's own case): window 1 holds 3, 3, 0, 1 (flat 0, 1,
        // 4, 5): the first 3 (flat 0) takes the gradient 1. Window 2 holds 1, 2, 2, 0 (flat 2,
        // 3, 6, 7): the first 2 in row-major order is flat 3, which takes 2.
        Case {
            name: "ties k2 s2",
            x: vec![3., 3., 1., 2., 0., 1., 2., 0.],
            shape: vec![1, 1, 2, 4],
            op: Op::MaxPool(MaxPool2dParams::new([2, 2])),
            w: vec![1., 2.],
            y: vec![3., 2.],
            gx: vec![1., 0., 0., 2., 0., 0., 0., 0.],
        },
        // A ResNet stem (k3 s2 p1) on 4x4 with 100 at (1, 1) = flat 5: rows -1..=1 and 1..=3
        // and columns likewise all contain it, so all four windows select flat 5 and it
        // collects 1 + 2 + 3 + 4 = 10 (overlapping windows, padding never selected).
        Case {
            name: "stem overlap",
            x: (0..16).map(|v| if v == 5 { 100.0 } else { f64::from(v) }).collect(),
            shape: vec![1, 1, 4, 4],
            op: Op::MaxPool(stem),
            w: vec![1., 2., 3., 4.],
            y: vec![100.; 4],
            gx: (0..16).map(|v| if v == 5 { 10.0 } else { 0.0 }).collect(),
        },
        // Ceil mode, 3x3 = 1..=9, k2 s2: output 2x2, the last row and column of windows are cut
        // by the border: maxima 5 (flat 4), 6 (5), 8 (7), 9 (8).
        Case {
            name: "ceil mode",
            x: (1..=9).map(f64::from).collect(),
            shape: vec![1, 1, 3, 3],
            op: Op::MaxPool(MaxPool2dParams::new([2, 2]).with_ceil_mode(true)),
            w: vec![1., 2., 3., 4.],
            y: vec![5., 6., 8., 9.],
            gx: vec![0., 0., 0., 0., 1., 2., 0., 3., 4.],
        },
        // NaN: a window 1, NaN, 3, NaN (flat 0, 1, 2, 3): NaN replaces the maximum each time it
        // is seen, so the last NaN (flat 3) is the index and takes the gradient 5.
        Case {
            name: "NaN",
            x: vec![1., f64::NAN, 3., f64::NAN],
            shape: vec![1, 1, 2, 2],
            op: Op::MaxPool(MaxPool2dParams::new([2, 2])),
            w: vec![5.],
            y: vec![f64::NAN],
            gx: vec![0., 0., 0., 5.],
        },
        // Adaptive 3x3 -> 2x2: windows rows [0, 2) and [1, 3), columns likewise; all hold the
        // 9 at flat 4, which collects 1 + 2 + 3 + 4 = 10.
        Case {
            name: "adaptive overlap",
            x: vec![1., 2., 3., 4., 9., 5., 6., 7., 8.],
            shape: vec![1, 1, 3, 3],
            op: Op::Adaptive([2, 2]),
            w: vec![1., 2., 3., 4.],
            y: vec![9.; 4],
            gx: vec![0., 0., 0., 0., 10., 0., 0., 0., 0.],
        },
        // Adaptive to 1x1 over a tie of 7s at flat 1 and 2: the first takes the gradient.
        Case {
            name: "adaptive tie",
            x: vec![0., 7., 7., 1.],
            shape: vec![1, 1, 2, 2],
            op: Op::Adaptive([1, 1]),
            w: vec![3.],
            y: vec![7.],
            gx: vec![0., 3., 0., 0.],
        },
    ];
    // The mask form (Bitmask layout) on the ties case: the same output and gradient.
    let ties = &cases[0];
    let mask_ties = Case { name: "mask ties", op: Op::Mask(MaxPool2dParams::new([2, 2])), ..ties.clone() };
    cases.push(mask_ties);
    cases
}

pub fn same_values(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(&g, &w)| equality::same_or_both_nan(g, w))
}

/// Deterministic values with many ties (eight levels), NaN-free.
pub fn values(len: usize, seed: u64) -> Vec<f64> {
    xorshift::draws(len, seed, |s| f64::from((s % 8) as u32) - 3.0)
}

/// Gradients with fractional parts, so that f16 and bf16 sums round.
pub fn gradient_values(len: usize, seed: u64) -> Vec<f64> {
    values(len, seed).iter().enumerate().map(|(i, v)| v + 0.1 * (i % 7) as f64 + 0.013).collect()
}

/// An unpooling case: `planes` planes of `per` values, each sent to one of the first three
/// positions of a plane of `plane` (so every plane of more than three values repeats an index),
/// a weight for each output position, and what the plain loops give: the output, and `x`'s
/// gradient of `L = Σ u·w` (`u` the unpooling), which is the unpooling's backward of `w`.
pub struct UnpoolCase {
    pub values: Vec<f64>,
    pub indices: Vec<i64>,
    pub weights: Vec<f64>,
    pub want: unpooling::Unpooled,
}

pub fn unpool_case(planes: usize, per: usize, plane: usize) -> UnpoolCase {
    let values: Vec<f64> = (0..planes * per).map(|v| ((v * 7) % 11) as f64 - 5.0).collect();
    let indices: Vec<i64> = (0..planes * per).map(|v| ((v * 5 + v / 3) % 3) as i64).collect();
    let weights: Vec<f64> = (0..planes * plane).map(|v| ((v * 3) % 13) as f64 - 6.0).collect();
    let positions: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
    let want = unpooling::unpool_loops(&values, &positions, per, plane, &weights);
    assert!(want.written < values.len(), "the case repeats an index");
    UnpoolCase { values, indices, weights, want }
}
