//! Hand-worked examples of adaptive max pooling, forward and backward, for every element type and
//! both index types. Expected values are worked out by hand in the comments.

mod common;

use common::{cast, to_f64};
use ndarray::{Array, Array3, Array4, array};
use poolgrad::{ArgmaxIndex, PoolFloat, adaptive_max_pool2d, adaptive_max_pool2d_backward};

fn f<T: PoolFloat>(a: Array3<f64>) -> Array3<T> {
    a.mapv(cast::<T>)
}

fn idx_i64<I: ArgmaxIndex>(a: &Array3<I>) -> Array3<i64> {
    a.mapv(|v| v.to_i64())
}

fn vals<T: PoolFloat>(a: &Array3<T>) -> Array3<f64> {
    a.mapv(to_f64)
}

fn idx<I: ArgmaxIndex>(a: Array3<i64>) -> Array3<I> {
    a.mapv(|v| I::try_from_flat(v as usize).unwrap())
}

/// The 4x4 example of ascend-semantics.md A.5: divisible windows (2x2, stride 2), with a tie in
/// the last window. Windows: {0,5,2,3} max 5 at 1; {1,1,7,0} max 7 at 6; {9,1,0,8} max 9 at 8;
/// {6,4,6,2} max 6, first at 10 (not 14).
fn divisible<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(array![[[0., 5., 1., 1.], [2., 3., 7., 0.], [9., 1., 6., 4.], [0., 8., 6., 2.]]]);
    let p = common::adaptive::<T, I, _>(&x, [2, 2]).unwrap();
    assert_eq!(vals(&p.output), array![[[5., 7.], [9., 6.]]]);
    assert_eq!(idx_i64(&p.indices), array![[[1, 6], [8, 10]]]);
    // gradInput[0,1]=g0, [1,2]=g1, [2,0]=g2, [2,2]=g3 (A.5).
    let g = f::<T>(array![[[1., 2.], [3., 4.]]]);
    let gi = adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap();
    assert_eq!(vals(&gi), array![[[0., 1., 0., 0.], [0., 0., 2., 0.], [3., 0., 4., 0.], [0., 0., 0., 0.]]]);
}

/// Non-divisible: W = 5 pooled to 3 gives windows [0,2), [1,4), [3,5) (overlapping).
/// x = [3, 1, 4, 1, 5] → maxima 3 at 0, 4 at 2, 5 at 4. A second row with the maximum in the
/// overlap: [0, 0, 9, 9, 0] → windows {0,0} first max at 0, {0,9,9} at 2, {9,0} at 3.
fn non_divisible<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(array![[[3., 1., 4., 1., 5.]], [[0., 0., 9., 9., 0.]]]);
    let p = common::adaptive::<T, I, _>(&x, [1, 3]).unwrap();
    assert_eq!(vals(&p.output), array![[[3., 4., 5.]], [[0., 9., 9.]]]);
    assert_eq!(idx_i64(&p.indices), array![[[0, 2, 4]], [[0, 2, 3]]]);
    let g = f::<T>(array![[[1., 2., 4.]], [[8., 16., 32.]]]);
    let gi = adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap();
    assert_eq!(vals(&gi), array![[[1., 0., 2., 0., 4.]], [[8., 0., 16., 32., 0.]]]);
}

/// 3x3 to 2x2: windows [0,2) and [1,3) on both axes; the centre 9 is in all four, so its gradient
/// is the sum 1+2+3+4 = 10.
fn overlapping_sum<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(array![[[1., 2., 3.], [4., 9., 5.], [6., 7., 8.]]]);
    let p = common::adaptive::<T, I, _>(&x, [2, 2]).unwrap();
    assert_eq!(idx_i64(&p.indices), array![[[4, 4], [4, 4]]]);
    let g = f::<T>(array![[[1., 2.], [3., 4.]]]);
    let gi = adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap();
    assert_eq!(vals(&gi), array![[[0., 0., 0.], [0., 10., 0.], [0., 0., 0.]]]);
}

/// Ho > H: H = 2 pooled to 3 gives windows [0,1), [0,2), [1,2): rows 0, {0,1}, 1.
/// x = [[2],[7]] → 2 at 0, 7 at 1, 7 at 1; gradients [1, 10, 100] → [1, 110].
fn upsampling<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(array![[[2.], [7.]]]);
    let p = common::adaptive::<T, I, _>(&x, [3, 2]).unwrap();
    // W = 1 pooled to 2: both windows are [0, 1).
    assert_eq!(vals(&p.output), array![[[2., 2.], [7., 7.], [7., 7.]]]);
    assert_eq!(idx_i64(&p.indices), array![[[0, 0], [1, 1], [1, 1]]]);
    let g = f::<T>(array![[[1., 0.], [10., 0.], [100., 0.]]]);
    let gi = adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap();
    assert_eq!(vals(&gi), array![[[1.], [110.]]]);
}

/// Ties: the first maximum in row-major order wins.
fn ties<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(array![[[1., 5.], [5., 2.]], [[4., 4.], [4., 4.]]]);
    let p = common::adaptive::<T, I, _>(&x, [1, 1]).unwrap();
    assert_eq!(idx_i64(&p.indices), array![[[1]], [[0]]]);
}

/// NaN: taken over any number, a later NaN replaces an earlier one; -inf windows point at their
/// first element.
fn nan_and_infinity<T: PoolFloat, I: ArgmaxIndex>() {
    let nan = f64::NAN;
    let x = f::<T>(array![
        [[1., nan], [3., nan]],
        [[nan, 9.], [1., 2.]],
        [[f64::NEG_INFINITY, f64::NEG_INFINITY], [f64::NEG_INFINITY, f64::NEG_INFINITY]]
    ]);
    let p = common::adaptive::<T, I, _>(&x, [1, 1]).unwrap();
    assert_eq!(idx_i64(&p.indices), array![[[3]], [[0]], [[0]]]);
    let out = vals(&p.output);
    assert!(out[[0, 0, 0]].is_nan() && out[[1, 0, 0]].is_nan());
    assert_eq!(out[[2, 0, 0]], f64::NEG_INFINITY);
}

/// 4-D input: two batches of the divisible example, the second negated (its maxima move).
fn four_d<T: PoolFloat, I: ArgmaxIndex>() {
    let base = array![[0., 5., 1., 1.], [2., 3., 7., 0.], [9., 1., 6., 4.], [0., 8., 6., 2.]];
    let mut x4 = Array4::<f64>::zeros((2, 1, 4, 4));
    x4.slice_mut(ndarray::s![0, 0, .., ..]).assign(&base);
    x4.slice_mut(ndarray::s![1, 0, .., ..]).assign(&base.mapv(|v: f64| -v));
    let x = x4.mapv(cast::<T>);
    let p = common::adaptive::<T, I, _>(&x, [2, 2]).unwrap();
    assert_eq!(p.indices.ndim(), 4);
    // Negated windows: {0,-5,-2,-3} max 0 at 0; {-1,-1,-7,0} max 0 at 7; {-9,-1,0,-8} max 0 at 12;
    // {-6,-4,-6,-2} max -2 at 15.
    assert_eq!(p.indices.mapv(|v| v.to_i64()), array![[[[1, 6], [8, 10]]], [[[0, 7], [12, 15]]]]);
    let g = Array::from_elem((2, 1, 2, 2), cast::<T>(1.0));
    let gi = adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap();
    let gi = gi.mapv(to_f64);
    assert_eq!(gi.sum(), 8.0);
    assert_eq!(gi[[1, 0, 3, 3]], 1.0);
    assert_eq!(gi[[1, 0, 1, 3]], 1.0);
}

/// Indices given by hand (not from the forward) reach the backward unchanged.
fn backward_from_given_indices<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(Array3::zeros((1, 2, 3)));
    let indices = idx::<I>(array![[[5, 0], [5, 5]]]);
    let g = f::<T>(array![[[0.5, 0.25], [1.0, 2.0]]]);
    let gi = adaptive_max_pool2d_backward(&g, &x, &indices).unwrap();
    assert_eq!(vals(&gi), array![[[0.25, 0., 0.], [0., 0., 3.5]]]);
}

/// Global pooling (output 1x1): one gradient per plane, stored as the sum of its gradients,
/// `0 + g`. Four planes of 2x3: 1.5 at index 4; -0 at index 0, where the sum +0 + -0 is +0 (as
/// PyTorch's zeros-then-add gives); -2 at index 5; NaN at index 2.
fn global<T: PoolFloat, I: ArgmaxIndex>() {
    let x = f::<T>(Array3::zeros((4, 2, 3)));
    let indices = idx::<I>(array![[[4]], [[0]], [[5]], [[2]]]);
    let g = f::<T>(array![[[1.5]], [[-0.0]], [[-2.0]], [[f64::NAN]]]);
    let gi = vals(&adaptive_max_pool2d_backward(&g, &x, &indices).unwrap());
    let nan = f64::NAN;
    let want = array![
        [[0., 0., 0.], [0., 1.5, 0.]],
        [[0., 0., 0.], [0., 0., 0.]],
        [[0., 0., 0.], [0., 0., -2.]],
        [[0., 0., nan], [0., 0., 0.]]
    ];
    for (got, want) in gi.iter().zip(&want) {
        assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{gi:?}");
    }
}

macro_rules! for_all_types {
    ($($name:ident),*) => {$(
        mod $name {
            #[test] fn f32_i32() { super::$name::<f32, i32>() }
            #[test] fn f32_i64() { super::$name::<f32, i64>() }
            #[test] fn f64_i32() { super::$name::<f64, i32>() }
            #[test] fn f64_i64() { super::$name::<f64, i64>() }
            #[test] fn f16_i32() { super::$name::<half::f16, i32>() }
            #[test] fn f16_i64() { super::$name::<half::f16, i64>() }
            #[test] fn bf16_i32() { super::$name::<half::bf16, i32>() }
            #[test] fn bf16_i64() { super::$name::<half::bf16, i64>() }
        }
    )*};
}

for_all_types!(
    divisible,
    non_divisible,
    overlapping_sum,
    upsampling,
    ties,
    nan_and_infinity,
    four_d,
    backward_from_given_indices,
    global
);

/// bf16 holds 8 significant bits: 256 + 1 + 1 summed in f32 is 258 (representable), while
/// summing in bf16 would give 256 + 1 = 256, then 256 + 1 = 256.
#[test]
fn bf16_sums_in_f32_and_rounds_once() {
    use half::bf16;
    let x = Array3::<bf16>::zeros((1, 1, 1));
    let g = array![[[bf16::from_f32(256.0), bf16::from_f32(1.0), bf16::from_f32(1.0)]]];
    let indices = array![[[0i64, 0, 0]]];
    let gi = adaptive_max_pool2d_backward(&g, &x, &indices).unwrap();
    assert_eq!(gi[[0, 0, 0]].to_f32(), 258.0);
}

/// f16 (11 significant bits): 2048 + 1 + 1 = 2050 when summed in f32; f16 steps would stay 2048.
#[test]
fn f16_sums_in_f32_and_rounds_once() {
    use half::f16;
    let x = Array3::<f16>::zeros((1, 1, 1));
    let g = array![[[f16::from_f32(2048.0), f16::ONE, f16::ONE]]];
    let indices = array![[[0i32, 0, 0]]];
    let gi = adaptive_max_pool2d_backward(&g, &x, &indices).unwrap();
    assert_eq!(gi[[0, 0, 0]].to_f32(), 2050.0);
}

/// f32 sums in row-major output order, like PyTorch: 1e8 + 1 + 1 - 1e8. In f32, 1e8 + 1 = 1e8,
/// so the left-to-right sum is 0; any other order (or f64) gives a different answer.
#[test]
fn f32_sums_in_row_major_output_order() {
    let x = Array3::<f32>::zeros((1, 1, 1));
    let g = array![[[1e8f32, 1.0, 1.0, -1e8]]];
    let indices = array![[[0i64, 0, 0, 0]]];
    let gi = adaptive_max_pool2d_backward(&g, &x, &indices).unwrap();
    assert_eq!(gi[[0, 0, 0]], 0.0);
    // The same in f64 is exact.
    let gi = adaptive_max_pool2d_backward(&g.mapv(f64::from), &x.mapv(f64::from), &indices).unwrap();
    assert_eq!(gi[[0, 0, 0]], 2.0);
}

/// A window of more than 2^24 inputs (where f32 no longer holds every position exactly) keeps
/// its index exact: global pooling of a 4097 x 4097 plane (16785409 inputs) whose maximum is
/// at position 2^24 + 1 = 4095 * 4097 + 2, which f32 would round to 2^24. So do windows of
/// part of the rows in such a plane (pooled to 1 x 2: two windows of 2049 columns, scanned
/// alone): the first holds the maximum, the second only zeros, so its index is its first tap,
/// column 2048 of row 0.
#[test]
fn windows_beyond_exact_f32_positions_keep_exact_indices() {
    let mut x = Array3::<f32>::zeros((1, 4097, 4097));
    x[[0, 4095, 2]] = 1.0;
    let p = adaptive_max_pool2d(&x, [1, 1]).unwrap();
    assert_eq!(p.indices[[0, 0, 0]], (1 << 24) + 1);
    assert_eq!(p.output[[0, 0, 0]], 1.0);
    let p = adaptive_max_pool2d(&x, [1, 2]).unwrap();
    assert_eq!(p.indices, ndarray::array![[[(1 << 24) + 1, 2048]]]);
    assert_eq!(p.output, ndarray::array![[[1.0, 0.0]]]);
}
