//! Backward sums when many gradients share few positions. The backward accepts any index inside
//! its plane, so these cases pick indices freely (from a few positions of each plane, or from all
//! of them) and gradients from values whose sums show every slip of order or rounding: in f16,
//! `2048 + 1 + 1` summed in f32 and rounded once is 2050, but rounded after each addition it is
//! 2048; zeros of both signs, cancellations back to zero, the largest finite values, infinities,
//! NaN and subnormals. The reference is a plain row-major loop in f32 (f64 for f64), rounded
//! once, on 1, 2 and 7 threads: whole planes, sparse and dense, zeroed at once or by rows, and
//! bands of rows that meet indices outside their windows.

mod common;

use common::{arr_f64, same_bits};
use ndarray::Array4;
use poolgrad::device::cpu::Cpu;
use poolgrad::op::AdaptiveMaxPool2dBackward;
use poolgrad::{ArgmaxIndex, Plan, PoolFloat, TensorMut, TensorRef};
use proptest::prelude::*;

/// Gradient values (as f64, rounded to the element type): each a multiple of the least f16
/// subnormal, so sums of a few of them are exact in f32, until the large ones come in.
const VALUES: [f64; 16] = [
    2048.0,
    1.0,
    -1.0,
    0.0,
    -0.0,
    0.5,
    256.0,
    3.0,
    65504.0,
    -65504.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    5.960464477539063e-8, // 2^-24
    -1.7881393432617188e-7,
    0.099975586,
];

#[derive(Debug, Clone)]
struct Crowded {
    input: [usize; 4],
    output: [usize; 2],
    /// Flat indices into each plane, row-major over `[n, c, ho, wo]`.
    indices: Vec<i64>,
    /// Positions in `VALUES`, row-major over `[n, c, ho, wo]`.
    values: Vec<usize>,
}

fn crowded() -> impl Strategy<Value = Crowded> {
    // Planes of up to 96 x 96, up to 9 of them; a third of them at least 86 x 86, large enough to
    // be zeroed by rows in every type (16 KiB: 8192 elements in the half types). 1 to 8 outputs a
    // side, so that planes are sparse or dense.
    let plane =
        prop_oneof![(1usize..=12, 1usize..=96), (40usize..=96, 1usize..=96), (86usize..=96, 86usize..=96)];
    let dims = (1usize..=3, 1usize..=3, plane, 1usize..=8, 1usize..=8);
    dims.prop_flat_map(|(n, c, (h, w), ho, wo)| {
        let (hw, gradients) = (h * w, n * c * ho * wo);
        // Either a few positions for every plane (crowded: the corners often among them), or any
        // position.
        let last = hw as i64 - 1;
        let spots = prop::collection::vec(prop_oneof![Just(0), Just(last), 0..=last], 1..=4);
        let picks = prop::collection::vec((any::<prop::sample::Index>(), 0..hw as i64), gradients);
        let crowded = any::<bool>();
        let values = prop::collection::vec(0..VALUES.len(), gradients);
        (Just(([n, c, h, w], [ho, wo])), spots, picks, crowded, values)
    })
    .prop_map(|((input, output), spots, picks, crowded, values)| {
        let indices =
            picks.iter().map(|&(pick, anywhere)| if crowded { *pick.get(&spots) } else { anywhere });
        Crowded { input, output, indices: indices.collect(), values }
    })
}

/// The backward of `case` through the plan API on `cpu`.
fn backward<T: PoolFloat, I: ArgmaxIndex>(cpu: &Cpu, case: &Crowded) -> Array4<T> {
    let ([n, c, h, w], [ho, wo]) = (case.input, case.output);
    let go = Array4::from_shape_vec(
        (n, c, ho, wo),
        case.values.iter().map(|&v| T::round_from_f64(VALUES[v])).collect(),
    )
    .unwrap();
    let ix = case.indices.iter().map(|&i| I::try_from_flat(i as usize).expect("index fits"));
    let ix = Array4::from_shape_vec((n, c, ho, wo), ix.collect()).unwrap();
    let x = Array4::<T>::zeros((n, c, h, w));
    let mut gi = Array4::<T>::from_elem((n, c, h, w), T::round_from_f64(f64::NAN));
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::from_array(&go).unwrap(),
        self_: TensorRef::from_array(&x).unwrap(),
        indices: TensorRef::from_array(&ix).unwrap(),
        grad_input: TensorMut::from_array(&mut gi).unwrap(),
    };
    Plan::new(cpu, op).unwrap().run().unwrap();
    gi
}

/// The plain loop: f32 sums (f64 for f64) in row-major output order, rounded once.
fn reference<T: PoolFloat>(case: &Crowded) -> Array4<f64> {
    let ([n, c, h, w], [ho, wo]) = (case.input, case.output);
    let go = case.values.iter().map(|&v| T::round_from_f64(VALUES[v]).to_f64_exact());
    let go = Array4::from_shape_vec((n, c, ho, wo), go.collect()).unwrap();
    let ix = Array4::from_shape_vec((n, c, ho, wo), case.indices.clone()).unwrap();
    common::backward_rounded_once::<T>(go.view(), ix.view(), h, w)
}

fn check<T: PoolFloat, I: ArgmaxIndex>(case: &Crowded) -> Result<(), TestCaseError> {
    let want = reference::<T>(case);
    let one = backward::<T, I>(&Cpu::sequential(), case);
    prop_assert!(same_bits(&arr_f64(one.view()), &want), "1 thread: not the row-major sum rounded once");
    for threads in [2, 7] {
        let many = backward::<T, I>(common::cpu_with_threads(threads), case);
        prop_assert!(same_bits(&arr_f64(many.view()), &want), "{} threads differ", threads);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test] fn f16_sums(case in crowded()) { check::<half::f16, i64>(&case)?; }
    #[test] fn bf16_sums(case in crowded()) { check::<half::bf16, i32>(&case)?; }
    #[test] fn f32_sums(case in crowded()) { check::<f32, i64>(&case)?; }
    #[test] fn f64_sums(case in crowded()) { check::<f64, i32>(&case)?; }
}

/// The case that tells the orders apart, by hand: three of four gradients on position 5 of a
/// sparse plane (36 positions), 2048 + 1 + 1 = 2050 in f16 (2048 rounded after each addition).
#[test]
fn three_gradients_on_one_position_round_once() {
    let case = Crowded {
        input: [1, 1, 6, 6],
        output: [2, 2],
        indices: vec![5, 5, 0, 5],
        values: vec![0, 1, 3, 1], // 2048, 1, 0, 1
    };
    let gi = backward::<half::f16, i64>(&Cpu::sequential(), &case);
    assert_eq!(gi[[0, 0, 0, 5]].to_f32(), 2050.0);
    assert_eq!(gi[[0, 0, 0, 0]].to_bits(), 0);
    assert_eq!(gi.iter().filter(|v| v.to_bits() != 0).count(), 1);
    // bf16: 256 + 1 + 1 = 258 (256 rounded after each addition).
    let gi = backward::<half::bf16, i64>(&Cpu::sequential(), &Crowded { values: vec![6, 1, 3, 1], ..case });
    assert_eq!(gi[[0, 0, 0, 5]].to_f32(), 258.0);
}

/// A dense `f16` plane large enough to be zeroed by rows (96 x 96, 18 KiB, pooled to 48 x 48)
/// sums in `f32` and stores the sums rounded once they are final; an index outside its window
/// may point back into rows that no later window reaches, so those rows are not final before
/// the plane is. Here output (0, 0) puts 2048 at element 0, and the first two outputs of the
/// last output row, whose windows are 90 rows further down, add 1 and 1 there: 2050, rounded
/// once (2048 if the late additions were lost, or rounded one by one). Every other output points at its window's first
/// element with a gradient of 0. On one thread (the whole plane) and on two (bands, then the
/// plane redone whole).
#[test]
fn an_index_back_into_early_rows_is_summed_before_they_are_stored() {
    let (h, w, ho, wo) = (96, 96, 48, 48);
    let mut indices: Vec<i64> = (0..ho * wo).map(|p| (2 * (p / wo) * w + 2 * (p % wo)) as i64).collect();
    let mut values = vec![3; ho * wo]; // 0.0
    values[0] = 0; // 2048
    for late in [(ho - 1) * wo, (ho - 1) * wo + 1] {
        indices[late] = 0;
        values[late] = 1; // 1.0
    }
    let case = Crowded { input: [1, 1, h, w], output: [ho, wo], indices, values };
    let sequential = Cpu::sequential();
    for cpu in [&sequential, common::cpu_with_threads(2)] {
        let gi = backward::<half::f16, i64>(cpu, &case);
        assert_eq!(gi[[0, 0, 0, 0]].to_f32(), 2050.0, "{} threads", cpu.threads());
        assert_eq!(gi.iter().filter(|v| v.to_bits() != 0).count(), 1, "{} threads", cpu.threads());
    }
}

/// A band of rows checks each index against its window's rows; an index outside them sends the
/// plane to be redone whole. The index just past a window that ends at a band boundary is the
/// one a band cannot see: here (one plane of 10 x 1 pooled to 10 x 1, so output row `o` pools
/// input row `o`; two threads, so bands of rows 0..5 and 5..10) output row 4 points at row 5.
/// Band 0 reads row 4's gradient but does not own row 5; band 1 owns row 5 but reads only the
/// output rows whose windows reach it (5 to 9). Only the redo adds it: row 5 holds 1 + 1 = 2
/// (values: `VALUES[1]` = 1 everywhere), row 4 nothing.
#[test]
fn an_index_just_past_a_window_that_ends_at_a_band_boundary() {
    let case = Crowded {
        input: [1, 1, 10, 1],
        output: [10, 1],
        indices: vec![0, 1, 2, 3, 5, 5, 6, 7, 8, 9],
        values: vec![1; 10],
    };
    let sequential = Cpu::sequential();
    for cpu in [&sequential, common::cpu_with_threads(2)] {
        let gi = backward::<f32, i64>(cpu, &case);
        let want = [1.0f32, 1.0, 1.0, 1.0, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0];
        assert_eq!(gi.iter().copied().collect::<Vec<_>>(), want, "{} threads", cpu.threads());
    }
}
