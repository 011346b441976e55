//! Property tests of adaptive max pooling against the independent reference in `common`.

mod common;

use common::{arr_f64, arr_to, same_bits};
use ndarray::{Array4, ArrayView4, s};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
use poolgrad::{ArgmaxIndex, Plan, PoolFloat, TensorMut, TensorRef};
use proptest::prelude::*;

/// One random case: input values (small integers for many ties, or spread values, NaN
/// optional), gradients (small integers, so f32/f64 sums are exact), and the output size.
#[derive(Debug, Clone)]
struct Case {
    x: Array4<f64>,
    grad: Array4<f64>,
    out: [usize; 2],
    three_d: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=3, 1usize..=4, 1usize..=9, 1usize..=9, 1usize..=11, 1usize..=11, any::<bool>(), 0u8..3)
        .prop_flat_map(|(n, c, h, w, ho, wo, three_d, style)| {
            let n = if three_d { 1 } else { n };
            let len = n * c * h * w;
            let value = match style {
                0 => (-3i32..3).prop_map(f64::from).boxed(), // many ties
                1 => (-2000i32..2000).prop_map(|v| f64::from(v) / 8.0).boxed(), // spread, exact in f16
                _ => prop_oneof![9 => (-3i32..3).prop_map(f64::from), 1 => Just(f64::NAN)].boxed(),
            };
            (
                proptest::collection::vec(value, len),
                proptest::collection::vec((-8i32..8).prop_map(f64::from), n * c * ho * wo),
            )
                .prop_map(move |(xs, gs)| Case {
                    x: Array4::from_shape_vec((n, c, h, w), xs).unwrap(),
                    grad: Array4::from_shape_vec((n, c, ho, wo), gs).unwrap(),
                    out: [ho, wo],
                    three_d,
                })
        })
}

/// Runs the forward through the free function (3-D when the case says so).
fn forward<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> (Array4<T>, Array4<I>) {
    let x = arr_to::<T>(&case.x);
    if case.three_d {
        let x3 = x.index_axis(ndarray::Axis(0), 0).to_owned();
        let p = poolgrad::adaptive_max_pool2d::<T, I, _, _>(&x3, case.out).unwrap();
        assert_eq!(p.output.ndim(), 3);
        (p.output.insert_axis(ndarray::Axis(0)), p.indices.insert_axis(ndarray::Axis(0)))
    } else {
        let p = poolgrad::adaptive_max_pool2d::<T, I, _, _>(&x, case.out).unwrap();
        (p.output, p.indices)
    }
}

fn check_forward<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> Result<(), TestCaseError> {
    // The reference sees the values after rounding to T.
    let x = arr_f64(arr_to::<T>(&case.x).view());
    let (ref_out, ref_idx) = common::adaptive_forward(x.view(), case.out[0], case.out[1]);
    let (out, idx) = forward::<T, I>(case);
    prop_assert!(same_bits(&arr_f64(out.view()), &ref_out), "values differ");
    prop_assert_eq!(idx.mapv(|v| v.to_i64()), ref_idx);
    Ok(())
}

/// Backward through the free function, from the reference indices.
fn backward<T: PoolFloat, I: ArgmaxIndex>(case: &Case, idx: &Array4<i64>) -> Array4<T> {
    let x = arr_to::<T>(&case.x);
    let g = arr_to::<T>(&case.grad);
    let ix = idx.mapv(|v| I::try_from_flat(v as usize).unwrap());
    poolgrad::adaptive_max_pool2d_backward(&g, &x, &ix).unwrap()
}

fn check_backward<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> Result<(), TestCaseError> {
    let x = arr_f64(arr_to::<T>(&case.x).view());
    let (_, idx) = common::adaptive_forward(x.view(), case.out[0], case.out[1]);
    let gi = backward::<T, I>(case, &idx);
    common::check_scatter::<T>(&arr_f64(gi.view()), &case.grad, &idx)
}

/// Plans on a given device, from arbitrary views.
fn plan_forward<'a, T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    x: ArrayView4<'a, T>,
    out: [usize; 2],
    output: TensorMut<'a, T>,
    indices: TensorMut<'a, I>,
) {
    let op = AdaptiveMaxPool2d { input: TensorRef::from_view(x).unwrap(), output_size: out, output, indices };
    Plan::new(cpu, op).unwrap().run().unwrap();
}

fn plan_backward<'a, T: PoolFloat, I: ArgmaxIndex>(
    cpu: &Cpu,
    g: ArrayView4<'a, T>,
    x: ArrayView4<'a, T>,
    ix: ArrayView4<'a, I>,
    grad_input: TensorMut<'a, T>,
) {
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::from_view(g).unwrap(),
        self_: TensorRef::from_view(x).unwrap(),
        indices: TensorRef::from_view(ix).unwrap(),
        grad_input,
    };
    Plan::new(cpu, op).unwrap().run().unwrap();
}

/// Strided, permuted and reversed views give the contiguous result bit for bit.
fn check_views<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> Result<(), TestCaseError> {
    let (n, c, h, w) = case.x.dim();
    let [ho, wo] = case.out;
    let cpu = Cpu::sequential();
    let x = arr_to::<T>(&case.x);
    let (want_out, want_idx) = forward::<T, I>(&Case { three_d: false, ..case.clone() });

    // Input: every other column of a wider array. Outputs: transposed storage (non-standard strides).
    let mut wide = Array4::<T>::from_elem((n, c, h, 2 * w), T::nan());
    wide.slice_mut(s![.., .., .., ..;2]).assign(&x);
    let mut out_t = Array4::<T>::zeros((n, c, wo, ho));
    let mut idx_t = Array4::<I>::zeros((n, c, wo, ho));
    {
        let mut ov = out_t.view_mut().permuted_axes([0, 1, 3, 2]);
        let mut iv = idx_t.view_mut().permuted_axes([0, 1, 3, 2]);
        plan_forward(
            &cpu,
            wide.slice(s![.., .., .., ..;2]),
            case.out,
            TensorMut::from_view(ov.view_mut()).unwrap(),
            TensorMut::from_view(iv.view_mut()).unwrap(),
        );
    }
    let got_out = out_t.permuted_axes([0, 1, 3, 2]);
    prop_assert!(same_bits(&arr_f64(got_out.view()), &arr_f64(want_out.view())));
    prop_assert_eq!(idx_t.permuted_axes([0, 1, 3, 2]), want_idx.clone());

    // Backward: reversed-row gradient view (negative stride), broadcast-free strided indices,
    // strided grad_input.
    let g = arr_to::<T>(&case.grad);
    let want_gi = {
        let mut gi = Array4::<T>::zeros((n, c, h, w));
        plan_backward(&cpu, g.view(), x.view(), want_idx.view(), TensorMut::from_array(&mut gi).unwrap());
        gi
    };
    let g_rev_storage = g.slice(s![.., .., ..;-1, ..]).to_owned();
    let g_view = g_rev_storage.slice(s![.., .., ..;-1, ..]);
    let mut idx_wide = Array4::<I>::zeros((n, c, ho, 3 * wo));
    idx_wide.slice_mut(s![.., .., .., ..;3]).assign(&want_idx);
    let mut gi_wide = Array4::<T>::from_elem((n, 2 * c, h, w), T::nan());
    {
        let mut gv = gi_wide.slice_mut(s![.., ..;2, .., ..]);
        plan_backward(
            &cpu,
            g_view,
            wide.slice(s![.., .., .., ..;2]),
            idx_wide.slice(s![.., .., .., ..;3]),
            TensorMut::from_view(gv.view_mut()).unwrap(),
        );
    }
    prop_assert!(same_bits(&arr_f64(gi_wide.slice(s![.., ..;2, .., ..])), &arr_f64(want_gi.view())));
    // The interleaved channels were not touched.
    prop_assert!(gi_wide.slice(s![.., 1..;2, .., ..]).iter().all(|v| v.is_nan()));
    Ok(())
}

/// 1, 2 and 7 threads give identical bits, forward and backward.
fn check_threads<T: PoolFloat, I: ArgmaxIndex>(case: &Case) -> Result<(), TestCaseError> {
    let (n, c, h, w) = case.x.dim();
    let [ho, wo] = case.out;
    let x = arr_to::<T>(&case.x);
    let g = arr_to::<T>(&case.grad);
    let run = |cpu: &Cpu| {
        let mut out = Array4::<T>::zeros((n, c, ho, wo));
        let mut idx = Array4::<I>::zeros((n, c, ho, wo));
        plan_forward(
            cpu,
            x.view(),
            case.out,
            TensorMut::from_array(&mut out).unwrap(),
            TensorMut::from_array(&mut idx).unwrap(),
        );
        let mut gi = Array4::<T>::zeros((n, c, h, w));
        plan_backward(cpu, g.view(), x.view(), idx.view(), TensorMut::from_array(&mut gi).unwrap());
        (arr_f64(out.view()), idx, arr_f64(gi.view()))
    };
    let one = run(&Cpu::sequential());
    for t in [2, 7] {
        let other = run(common::cpu_with_threads(t));
        prop_assert!(same_bits(&one.0, &other.0), "forward values differ with {t} threads");
        prop_assert_eq!(&one.1, &other.1);
        prop_assert!(same_bits(&one.2, &other.2), "backward differs with {t} threads");
    }
    Ok(())
}

macro_rules! properties {
    ($($t:ty, $i:ty, $m:ident);* $(;)?) => {$(
        mod $m {
            use super::*;
            proptest! {
                #![proptest_config(ProptestConfig::with_cases(48))]
                #[test] fn forward_matches_reference(c in case()) { check_forward::<$t, $i>(&c)?; }
                #[test] fn backward_matches_reference(c in case()) { check_backward::<$t, $i>(&c)?; }
                #[test] fn views_match_contiguous(c in case()) { check_views::<$t, $i>(&c)?; }
                #[test] fn thread_counts_agree(c in case()) { check_threads::<$t, $i>(&c)?; }
            }
        }
    )*};
}

properties! {
    f32, i64, f32_i64;
    f32, i32, f32_i32;
    f64, i64, f64_i64;
    half::f16, i32, f16_i32;
    half::bf16, i64, bf16_i64;
}
