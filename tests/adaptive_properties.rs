//! Property tests of adaptive max pooling, on the cases of the crate's own testing kit
//! (`poolgrad::testing`), plus what the kit does not check: the exact `f32` summation order,
//! strided views and thread counts.

mod common;

use common::{arr_f64, same_bits};
use ndarray::{Array4, ArrayD, ArrayView4, Axis, s};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
use poolgrad::testing::{AdaptiveCase, Shapes, Values, adaptive_cases};
use poolgrad::{ArgmaxIndex, Plan, PoolFloat, TensorMut, TensorRef};
use proptest::prelude::*;

fn cases<T: PoolFloat, I: ArgmaxIndex>() -> impl Strategy<Value = AdaptiveCase<T, I>> {
    let shapes = Shapes { batch: 1..=3, channels: 1..=4, height: 1..=9, width: 1..=9 };
    prop_oneof![
        adaptive_cases(shapes.clone(), Values::Ties),
        adaptive_cases(shapes.clone(), Values::Distinct),
        adaptive_cases(shapes, Values::WithNan),
    ]
}

/// Enough planes for the forward's blocked kernel (8 planes at a time, then the rest).
fn many_planes<T: PoolFloat, I: ArgmaxIndex>() -> impl Strategy<Value = AdaptiveCase<T, I>> {
    let shapes = Shapes { batch: 1..=2, channels: 9..=40, height: 1..=9, width: 1..=9 };
    prop_oneof![adaptive_cases(shapes.clone(), Values::Ties), adaptive_cases(shapes, Values::WithNan)]
}

fn as4<E: Clone>(a: &ArrayD<E>) -> Array4<E> {
    let v = if a.ndim() == 3 { a.view().insert_axis(Axis(0)) } else { a.view() };
    v.into_dimensionality().expect("3-D or 4-D").to_owned()
}

/// The free functions against the kit's reference (forward exactly; backward at the dtype's
/// tolerance, with the gradient invariants and linearity), in the case's own rank.
fn check_against_kit<T: PoolFloat, I: ArgmaxIndex>(case: &AdaptiveCase<T, I>) -> Result<(), TestCaseError> {
    let mine = common::adaptive::<T, I, _>(&case.input, case.output_size).unwrap();
    prop_assert_eq!(mine.output.ndim(), case.input.ndim());
    case.check_forward(&mine.output, &mine.indices)?;
    case.check_backward(|g| poolgrad::adaptive_max_pool2d_backward(g, &case.input, &case.indices).unwrap())?;
    Ok(())
}

/// Beyond the kit's tolerance: f32 results are PyTorch's row-major f32 sums bit for bit, and the
/// half types are that f32 sum rounded once.
fn check_summation_order<T: PoolFloat, I: ArgmaxIndex>(
    case: &AdaptiveCase<T, I>,
) -> Result<(), TestCaseError> {
    let gi = poolgrad::adaptive_max_pool2d_backward(&case.grad_output, &case.input, &case.indices).unwrap();
    let (go, idx) = (arr_f64(as4(&case.grad_output).view()), as4(&case.indices).mapv(|i| i.to_i64()));
    let (_, _, h, w) = as4(&case.input).dim();
    let want = common::backward_rounded_once::<T>(go.view(), idx.view(), h, w);
    prop_assert!(same_bits(&arr_f64(as4(&gi).view()), &want), "not the row-major sum rounded once");
    Ok(())
}

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
fn check_views<T: PoolFloat, I: ArgmaxIndex>(case: &AdaptiveCase<T, I>) -> Result<(), TestCaseError> {
    let (x, g, want_idx) = (as4(&case.input), as4(&case.grad_output), as4(&case.indices));
    let (n, c, h, w) = x.dim();
    let [ho, wo] = case.output_size;
    let cpu = Cpu::sequential();

    // Input: every other column of a wider array. Outputs: transposed storage.
    let mut wide = Array4::<T>::from_elem((n, c, h, 2 * w), T::round_from_f64(f64::NAN));
    wide.slice_mut(s![.., .., .., ..;2]).assign(&x);
    let mut out_t = Array4::<T>::zeros((n, c, wo, ho));
    let mut idx_t = Array4::<I>::zeros((n, c, wo, ho));
    {
        let mut ov = out_t.view_mut().permuted_axes([0, 1, 3, 2]);
        let mut iv = idx_t.view_mut().permuted_axes([0, 1, 3, 2]);
        plan_forward(
            &cpu,
            wide.slice(s![.., .., .., ..;2]),
            case.output_size,
            TensorMut::from_view(ov.view_mut()).unwrap(),
            TensorMut::from_view(iv.view_mut()).unwrap(),
        );
    }
    prop_assert!(same_bits(
        &arr_f64(out_t.permuted_axes([0, 1, 3, 2]).view()),
        &arr_f64(as4(&case.output).view())
    ));
    prop_assert_eq!(idx_t.permuted_axes([0, 1, 3, 2]), want_idx.clone());

    // Backward: a reversed-row gradient view (negative stride), strided indices and a strided
    // gradient output whose other channels must stay untouched.
    let want_gi =
        as4(&poolgrad::adaptive_max_pool2d_backward(&case.grad_output, &case.input, &case.indices).unwrap());
    let g_rev_storage = g.slice(s![.., .., ..;-1, ..]).to_owned();
    let mut idx_wide = Array4::<I>::zeros((n, c, ho, 3 * wo));
    idx_wide.slice_mut(s![.., .., .., ..;3]).assign(&want_idx);
    let mut gi_wide = Array4::<T>::from_elem((n, 2 * c, h, w), T::round_from_f64(f64::NAN));
    {
        let mut gv = gi_wide.slice_mut(s![.., ..;2, .., ..]);
        plan_backward(
            &cpu,
            g_rev_storage.slice(s![.., .., ..;-1, ..]),
            wide.slice(s![.., .., .., ..;2]),
            idx_wide.slice(s![.., .., .., ..;3]),
            TensorMut::from_view(gv.view_mut()).unwrap(),
        );
    }
    prop_assert!(same_bits(&arr_f64(gi_wide.slice(s![.., ..;2, .., ..])), &arr_f64(want_gi.view())));
    prop_assert!(gi_wide.slice(s![.., 1..;2, .., ..]).iter().all(|v| v.to_f64_exact().is_nan()));
    Ok(())
}

/// 1, 2 and 7 threads give identical bits, forward and backward.
fn check_threads<T: PoolFloat, I: ArgmaxIndex>(case: &AdaptiveCase<T, I>) -> Result<(), TestCaseError> {
    let (x, g) = (as4(&case.input), as4(&case.grad_output));
    let (n, c, h, w) = x.dim();
    let [ho, wo] = case.output_size;
    let run = |cpu: &Cpu| {
        let mut out = Array4::<T>::zeros((n, c, ho, wo));
        let mut idx = Array4::<I>::zeros((n, c, ho, wo));
        plan_forward(
            cpu,
            x.view(),
            case.output_size,
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
                #[test] fn against_the_kit(c in cases::<$t, $i>()) { check_against_kit(&c)?; }
                #[test] fn summation_order(c in cases::<$t, $i>()) { check_summation_order(&c)?; }
                #[test] fn views_match_contiguous(c in cases::<$t, $i>()) { check_views(&c)?; }
                #[test] fn thread_counts_agree(c in cases::<$t, $i>()) { check_threads(&c)?; }
            }
            proptest! {
                #![proptest_config(ProptestConfig::with_cases(16))]
                #[test] fn many_planes_agree(c in many_planes::<$t, $i>()) {
                    check_against_kit(&c)?;
                    check_threads(&c)?;
                }
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
