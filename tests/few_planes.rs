//! How the CPU splits and zeroes planes in a backward.
//!
//! With fewer planes than threads, the CPU cuts each plane into bands of input rows, each band
//! reading the gradient rows whose windows reach it; an index outside its window's rows
//! (allowed: the backward adds a gradient wherever its index points) makes the plane be redone
//! whole. Large planes (8 KiB and more) are zeroed a window's rows at a time, just ahead of the
//! additions; an index past the rows zeroed so far zeroes the rest of the plane first.
//!
//! These properties draw indices inside their windows (the forward's case, and the fast paths)
//! or anywhere in a run of the plane (many on the same element), optionally move one anywhere
//! in the plane (the redo, or the rest zeroed early) or out of it (the error), and check 2, 3
//! and 7 threads against 1, bit for bit, and against the row-major `f32` sum rounded once. The
//! gradient is also written into an output filled with NaN beforehand, so an element left
//! unwritten shows. Windows are listed here from their definitions, not from the crate.

mod common;

use common::{arr_f64, same_bits};
use ndarray::Array4;
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2dBackward, MaxPool2dWithIndicesBackward, MaxPool2dWithMaskBackward};
use poolgrad::{
    Bitmask, I32Argmax, Mask, MaskLayout, MaxPool2dParams, Plan, PoolFloat, TensorMut, TensorRef,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The pooling whose backward runs.
#[derive(Debug, Clone)]
enum Pooling {
    Max(MaxPool2dParams),
    Adaptive([usize; 2]),
}

/// The input positions window `o` of an axis reads (sorted, in range).
fn window(pooling: &Pooling, axis: usize, n: usize, o: usize) -> Vec<usize> {
    match pooling {
        Pooling::Max(p) => {
            let [k, s, pad, d] = [p.kernel()[axis], p.stride()[axis], p.padding()[axis], p.dilation()[axis]];
            (0..k)
                .map(|i| (o * s + i * d) as i64 - pad as i64)
                .filter(|&t| t >= 0 && t < n as i64)
                .map(|t| t as usize)
                .collect()
        }
        Pooling::Adaptive(out) => {
            let m = out[axis];
            ((o * n) / m..((o + 1) * n).div_ceil(m)).collect()
        }
    }
}

fn output_len(pooling: &Pooling, axis: usize, n: usize) -> usize {
    match pooling {
        Pooling::Max(p) => common::pool_len(
            n,
            p.kernel()[axis],
            p.stride()[axis],
            p.padding()[axis],
            p.dilation()[axis],
            p.ceil_mode(),
        ),
        Pooling::Adaptive(out) => out[axis],
    }
}

/// Where the indices are drawn.
#[derive(Debug, Clone, Copy)]
enum Draw {
    /// Each in its window, uniformly.
    InWindows,
    /// Anywhere in `base..base + span` (modulo the plane), whatever the window.
    Run { base: usize, span: usize },
}

/// What happens to one index after they are drawn.
#[derive(Debug, Clone, Copy)]
enum Edit {
    None,
    /// Index `at` (modulo the count) points anywhere in its plane (`to` modulo `H * W`).
    Anywhere {
        at: usize,
        to: usize,
    },
    /// Index `at` points past its plane.
    OutOfPlane {
        at: usize,
    },
}

fn edits() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => Just(Edit::None),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(at, to)| Edit::Anywhere { at, to }),
        1 => any::<usize>().prop_map(|at| Edit::OutOfPlane { at }),
    ]
}

fn max_poolings() -> impl Strategy<Value = Pooling> {
    (1..=4usize, 1..=3usize, 1..=3usize, 0..=2usize, any::<bool>(), 1..=3usize).prop_map(
        |(k, s, d, p, ceil, kw)| {
            let params = MaxPool2dParams::new([k, kw])
                .with_stride([s, 1])
                .with_padding([p.min(k / 2), 0])
                .with_dilation([d, 1])
                .with_ceil_mode(ceil);
            Pooling::Max(params)
        },
    )
}

fn adaptive_poolings() -> impl Strategy<Value = Pooling> {
    (1..=45usize, 1..=9usize).prop_map(|(ho, wo)| Pooling::Adaptive([ho, wo]))
}

/// The backward through a plan into an output filled with NaN beforehand.
fn into_nan<T: PoolFloat>(
    cpu: &Cpu,
    pooling: &Pooling,
    go: &Array4<T>,
    x: &Array4<T>,
    idx: &Array4<i64>,
) -> poolgrad::Result<Array4<T>> {
    let mut gi = Array4::from_elem(x.dim(), T::round_from_f64(f64::NAN));
    let (grad_output, self_) = (TensorRef::from_array(go)?, TensorRef::from_array(x)?);
    let (indices, grad_input) = (TensorRef::from_array(idx)?, TensorMut::from_array(&mut gi)?);
    match pooling {
        Pooling::Max(params) => {
            let params = *params;
            let op = MaxPool2dWithIndicesBackward { grad_output, self_, indices, params, grad_input };
            Plan::new(cpu, op)?.run()?;
        }
        Pooling::Adaptive(_) => {
            let op = AdaptiveMaxPool2dBackward { grad_output, self_, indices, grad_input };
            Plan::new(cpu, op)?.run()?;
        }
    }
    Ok(gi)
}

/// The mask backward through a plan into an output filled with NaN beforehand.
fn mask_into_nan<T: PoolFloat, L: MaskLayout>(
    cpu: &Cpu,
    params: MaxPool2dParams,
    go: &Array4<T>,
    x: &Array4<T>,
    mask: &Mask<L, ndarray::Ix4>,
) -> poolgrad::Result<Array4<T>> {
    let mut gi = Array4::from_elem(x.dim(), T::round_from_f64(f64::NAN));
    let op = MaxPool2dWithMaskBackward {
        grad_output: TensorRef::from_array(go)?,
        self_: TensorRef::from_array(x)?,
        mask: mask.view(),
        params,
        grad_input: TensorMut::from_array(&mut gi)?,
    };
    Plan::new(cpu, op)?.run()?;
    Ok(gi)
}

fn check<T: PoolFloat>(
    pooling: Pooling,
    planes: usize,
    [h, w]: [usize; 2],
    seed: u64,
    (draw, edit): (Draw, Edit),
) -> Result<(), TestCaseError> {
    let (ho, wo) = (output_len(&pooling, 0, h), output_len(&pooling, 1, w));
    prop_assume!(ho > 0 && wo > 0);
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let rows: Vec<Vec<usize>> = (0..ho).map(|o| window(&pooling, 0, h, o)).collect();
    let cols: Vec<Vec<usize>> = (0..wo).map(|o| window(&pooling, 1, w, o)).collect();
    // Windows of padding alone are an error of the parameters, tested elsewhere.
    prop_assume!(rows.iter().chain(&cols).all(|taps| !taps.is_empty()));
    let mut idx = Array4::<i64>::from_shape_fn((1, planes, ho, wo), |(_, _, oh, ow)| {
        let (r, c) = (&rows[oh], &cols[ow]);
        let at = match draw {
            Draw::InWindows => r[next() as usize % r.len()] * w + c[next() as usize % c.len()],
            Draw::Run { base, span } => (base + next() as usize % span) % (h * w),
        };
        at as i64
    });
    let count = idx.len();
    match edit {
        Edit::None => {}
        Edit::Anywhere { at, to } => idx.as_slice_mut().unwrap()[at % count] = (to % (h * w)) as i64,
        Edit::OutOfPlane { at } => idx.as_slice_mut().unwrap()[at % count] = (h * w) as i64,
    }
    // Three decimals in [-1, 1]: sums that depend on their order in f32 and in the half types.
    let go = Array4::<T>::from_shape_simple_fn((1, planes, ho, wo), || {
        T::round_from_f64((next() % 2001) as f64 / 1000.0 - 1.0)
    });
    let x = Array4::<T>::zeros((1, planes, h, w));
    let run = |cpu: &Cpu| match &pooling {
        Pooling::Max(params) => poolgrad::on(cpu).max_pool2d_with_indices_backward(&go, &x, &idx, params),
        Pooling::Adaptive(_) => poolgrad::on(cpu).adaptive_max_pool2d_backward(&go, &x, &idx),
    };
    let one = run(&Cpu::sequential());
    for threads in [2, 3, 7] {
        let many = run(common::cpu_with_threads(threads));
        match (&one, &many) {
            (Ok(a), Ok(b)) => {
                prop_assert!(same_bits(&arr_f64(a.view()), &arr_f64(b.view())), "{threads} threads")
            }
            (Err(a), Err(b)) => prop_assert_eq!(format!("{a:?}"), format!("{b:?}")),
            _ => prop_assert!(false, "{threads} threads: {one:?} against {many:?}"),
        }
    }
    for (threads, cpu) in [(1, &Cpu::sequential()), (2, common::cpu_with_threads(2))] {
        match (&one, into_nan(cpu, &pooling, &go, &x, &idx)) {
            (Ok(a), Ok(b)) => {
                prop_assert!(same_bits(&arr_f64(a.view()), &arr_f64(b.view())), "into NaN, {threads} threads")
            }
            (Err(a), Err(b)) => prop_assert_eq!(format!("{a:?}"), format!("{b:?}")),
            (a, b) => prop_assert!(false, "into NaN, {threads} threads: {a:?} against {b:?}"),
        }
    }
    match (&one, edit) {
        (Ok(gi), Edit::None | Edit::Anywhere { .. }) => {
            let want = common::backward_rounded_once::<T>(arr_f64(go.view()).view(), idx.view(), h, w);
            prop_assert!(same_bits(&arr_f64(gi.view()), &want), "not the row-major f32 sum rounded once");
            // The same indices as an `I32Argmax` mask go through the same kernel (masks have
            // no dilation, and 1x1 kernels have no room for that layout).
            if let Pooling::Max(params) = &pooling
                && params.dilation() == [1, 1]
                && params.kernel() != [1, 1]
            {
                let mask = Mask::<I32Argmax, _>::from_indices(&idx, params, &[1, planes, h, w]).unwrap();
                for threads in [2, 3, 7] {
                    let cpu = common::cpu_with_threads(threads);
                    let by_mask = poolgrad::on(cpu).max_pool2d_with_mask_backward(&go, &x, &mask).unwrap();
                    prop_assert!(same_bits(&arr_f64(by_mask.view()), &want), "mask, {threads} threads");
                }
                // With every index in its window, a `Bitmask` too: its blocks are decoded and
                // scattered, or gathered in bands of rows with more threads than blocks.
                if matches!((draw, edit), (Draw::InWindows, Edit::None)) {
                    let mask = Mask::<Bitmask, _>::from_indices(&idx, params, &[1, planes, h, w]).unwrap();
                    for (threads, cpu) in [(1, &Cpu::sequential()), (2, common::cpu_with_threads(2))] {
                        let by_mask = mask_into_nan(cpu, *params, &go, &x, &mask).unwrap();
                        prop_assert!(
                            same_bits(&arr_f64(by_mask.view()), &want),
                            "bitmask, {threads} threads"
                        );
                    }
                }
            }
        }
        (Err(poolgrad::Error::IndexOutOfRange { position, value, plane, .. }), Edit::OutOfPlane { at }) => {
            // The one index moved out names itself: `[n, c, oh, ow]`, its value, the plane.
            let at = at % count;
            let want = vec![0, at / (ho * wo), at % (ho * wo) / wo, at % wo];
            prop_assert_eq!((position, *value, *plane), (&want, (h * w) as i64, h * w));
        }
        (other, _) => prop_assert!(false, "unexpected {other:?} after {edit:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test] fn max_pool_f32(pooling in max_poolings(), planes in 1..=3usize, h in 2..=40usize, w in 1..=12usize, seed: u64, edit in edits()) {
        check::<f32>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn max_pool_bf16(pooling in max_poolings(), planes in 1..=3usize, h in 2..=40usize, w in 1..=12usize, seed: u64, edit in edits()) {
        check::<half::bf16>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn adaptive_f32(pooling in adaptive_poolings(), planes in 1..=3usize, h in 2..=40usize, w in 1..=12usize, seed: u64, edit in edits()) {
        check::<f32>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn adaptive_f16(pooling in adaptive_poolings(), planes in 1..=3usize, h in 2..=40usize, w in 1..=12usize, seed: u64, edit in edits()) {
        check::<half::f16>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
}

proptest! {
    // Planes of 8256 to 12800 elements: 16 KiB and more in every type, so zeroed by rows; up to
    // 9 of them, so also whole planes on several threads.
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test] fn large_max_pool_f32(pooling in max_poolings(), planes in 1..=9usize, h in 96..=128usize, w in 86..=100usize, seed: u64, edit in edits()) {
        check::<f32>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn large_max_pool_bf16(pooling in max_poolings(), planes in 1..=9usize, h in 96..=128usize, w in 86..=100usize, seed: u64, edit in edits()) {
        check::<half::bf16>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn large_adaptive_f16(pooling in adaptive_poolings(), planes in 1..=9usize, h in 96..=128usize, w in 86..=100usize, seed: u64, edit in edits()) {
        check::<half::f16>(pooling, planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
}

proptest! {
    // Global pooling (output 1x1): planes of one gradient each, whole planes zeroed 16 KiB at a
    // time; up to 200 planes of up to 1600 elements, so from one block to dozens per task.
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test] fn global_f32(planes in 1..=200usize, h in 1..=40usize, w in 1..=40usize, seed: u64, edit in edits()) {
        check::<f32>(Pooling::Adaptive([1, 1]), planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn global_f16(planes in 1..=200usize, h in 1..=40usize, w in 1..=40usize, seed: u64, edit in edits()) {
        check::<half::f16>(Pooling::Adaptive([1, 1]), planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
    #[test] fn global_bf16(planes in 1..=200usize, h in 1..=40usize, w in 1..=40usize, seed: u64, edit in edits()) {
        check::<half::bf16>(Pooling::Adaptive([1, 1]), planes, [h, w], seed, (Draw::InWindows, edit))?;
    }
}

/// 100 x 100 planes pooled by a 2 x 2 kernel, indices anywhere in a run of up to 1000 elements.
fn scattered(base: usize, span: usize, edit: Edit) -> (Pooling, [usize; 2], (Draw, Edit)) {
    (Pooling::Max(MaxPool2dParams::new([2, 2])), [100, 100], (Draw::Run { base, span }, edit))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test] fn scattered_f32(planes in 1..=3usize, base in 0..9_000usize, span in 1..=1_000usize, seed: u64, edit in edits()) {
        let (pooling, shape, draw) = scattered(base, span, edit);
        check::<f32>(pooling, planes, shape, seed, draw)?;
    }
    #[test] fn scattered_bf16(planes in 1..=3usize, base in 0..9_000usize, span in 1..=1_000usize, seed: u64, edit in edits()) {
        let (pooling, shape, draw) = scattered(base, span, edit);
        check::<half::bf16>(pooling, planes, shape, seed, draw)?;
    }
}

/// A workspace is reused across plans, so a backward must not trust what it holds: here a
/// forward leaves its widened input (non-zero) there before each backward. The second backward
/// has an index moved out of its window, so its plane is redone whole.
#[test]
fn a_used_workspace_gives_the_same_sums() {
    use half::bf16;
    use poolgrad::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
    use poolgrad::{Plan, TensorMut, TensorRef, Workspace};

    let cpu = common::cpu_with_threads(2);
    let x = Array4::from_shape_fn((1, 1, 40, 12), |(_, _, i, j)| bf16::from_f32(1.0 + (i * 12 + j) as f32));
    let go = Array4::from_shape_fn((1, 1, 7, 5), |(_, _, i, j)| bf16::from_f32(0.25 + (i + j) as f32));
    let mut ws = Workspace::new(cpu, 1 << 20).unwrap();
    for moved in [None, Some(479)] {
        let (mut out, mut idx) = (Array4::<bf16>::zeros((1, 1, 7, 5)), Array4::<i64>::zeros((1, 1, 7, 5)));
        let forward = AdaptiveMaxPool2d {
            input: TensorRef::from_array(&x).unwrap(),
            output_size: [7, 5],
            output: TensorMut::from_array(&mut out).unwrap(),
            indices: TensorMut::from_array(&mut idx).unwrap(),
        };
        Plan::new(cpu, forward).unwrap().bind(&mut ws).unwrap().run().unwrap();
        if let Some(to) = moved {
            idx[[0, 0, 0, 0]] = to;
        }
        let mut gi = Array4::<bf16>::from_elem((1, 1, 40, 12), bf16::from_f32(7.0));
        let backward = AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_array(&go).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            indices: TensorRef::from_array(&idx).unwrap(),
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        Plan::new(cpu, backward).unwrap().bind(&mut ws).unwrap().run().unwrap();
        let fresh = poolgrad::on(cpu).adaptive_max_pool2d_backward(&go, &x, &idx).unwrap();
        assert_eq!(gi, fresh, "moved {moved:?}");
        let want = common::backward_f32(arr_f64(go.view()).view(), idx.view(), 40, 12).mapv(bf16::from_f32);
        assert_eq!(gi, want, "moved {moved:?}");
    }
}

/// A `Bitmask` backward of the half types reserves f32 sums for one block's planes (at most 16,
/// fewer with fewer channels), one channel's widened gradients, and a byte per channel and output
/// position of a block for its decoded offsets; each region rounded up to whole cache lines. On
/// one thread the blocks run one after another, so that is the whole workspace.
#[test]
fn bitmask_workspace_holds_one_block() {
    let params = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let (h, w, positions) = (64, 64, 32 * 32);
    for c in [1, 3, 16, 20] {
        let x = Array4::from_elem((1, c, h, w), half::bf16::ONE);
        let go = Array4::from_elem((1, c, 32, 32), half::bf16::ONE);
        let indices = poolgrad::max_pool2d_with_indices(&x, &params).unwrap().indices;
        let mask = Mask::<Bitmask, _>::from_indices(&indices, &params, &[1, c, h, w]).unwrap();
        let mut gi = Array4::from_elem(x.dim(), half::bf16::ZERO);
        let op = MaxPool2dWithMaskBackward {
            grad_output: TensorRef::from_array(&go).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            mask: mask.view(),
            params,
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        let block = c.min(16);
        let bound = 4 * (block * h * w + positions) + block * positions + 3 * 64;
        let needed = Plan::new(&Cpu::sequential(), op).unwrap().workspace_size();
        assert!(needed <= bound, "{c} channels: {needed} bytes, at most {bound} expected");
    }
}

/// The sizes of a 3x3, stride 2, padding 1 max pooling of `[n, c, h, w]` and its `Bitmask` bits,
/// read by the documented layout (u16 words `[N][⌈C/16⌉][9][(⌈Ho·Wo/16⌉ + 1)·16]`, bit `c % 16`).
struct BitsOf {
    shape: [usize; 4],
    pooled: [usize; 2],
}

impl BitsOf {
    fn new(shape: [usize; 4]) -> Self {
        let [_, _, h, w] = shape;
        BitsOf { shape, pooled: [(h - 1) / 2 + 1, (w - 1) / 2 + 1] }
    }

    fn params() -> MaxPool2dParams {
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1])
    }

    /// Byte offset and bit of `(n, c, k, p)`.
    fn at(&self, n: usize, c: usize, k: usize, p: usize) -> (usize, u8) {
        let [_, channels, _, _] = self.shape;
        let row_words = ((self.pooled[0] * self.pooled[1]).div_ceil(16) + 1) * 16;
        let word = ((n * channels.div_ceil(16) + c / 16) * 9 + k) * row_words + p;
        (2 * word + c % 16 / 8, 1 << (c % 8))
    }

    fn bit(&self, bytes: &[i8], n: usize, c: usize, k: usize, p: usize) -> bool {
        let (at, bit) = self.at(n, c, k, p);
        bytes[at] as u8 & bit != 0
    }

    fn flip(&self, bytes: &mut [i8], n: usize, c: usize, k: usize, p: usize) {
        let (at, bit) = self.at(n, c, k, p);
        bytes[at] = (bytes[at] as u8 ^ bit) as i8;
    }

    /// The backward as a plain f64 sum over every set bit inside the plane.
    fn backward(&self, bytes: &[i8], go: &Array4<f32>) -> Array4<f64> {
        let [n, c, h, w] = self.shape;
        let [ho, wo] = self.pooled;
        let mut gi = Array4::<f64>::zeros((n, c, h, w));
        for (a, b, oh, ow, k) in itertools_product(n, c, ho, wo) {
            let (ih, iw) = ((oh * 2 + k / 3) as isize - 1, (ow * 2 + k % 3) as isize - 1);
            let inside = (0..h as isize).contains(&ih) && (0..w as isize).contains(&iw);
            if inside && self.bit(bytes, a, b, k, oh * wo + ow) {
                gi[[a, b, ih as usize, iw as usize]] += f64::from(go[[a, b, oh, ow]]);
            }
        }
        gi
    }

    /// The forward's mask of `x` with `edit` applied to its bytes, the edited bytes, and the
    /// gradient on 1, 2, 3 and 7 threads checked against [`BitsOf::backward`].
    fn check(&self, edit: impl Fn(&Self, &mut [i8])) {
        let [n, c, h, w] = self.shape;
        let [ho, wo] = self.pooled;
        let x = Array4::from_shape_fn((n, c, h, w), |(a, b, i, j)| {
            ((a * 7 + b * 13 + i * 5 + j * 3) % 17) as f32
        });
        let go = Array4::from_shape_fn((n, c, ho, wo), |(a, b, i, j)| {
            ((a * 3 + b * 5 + i * 7 + j) % 11) as f32 + 0.5
        });
        let forward = poolgrad::max_pool2d_with_mask(&x, &Self::params(), Bitmask).unwrap();
        let mut bytes = forward.mask.as_array().as_slice().unwrap().to_vec();
        edit(self, &mut bytes);
        let raw = ndarray::Array::from_shape_vec(forward.mask.as_array().raw_dim(), bytes.clone()).unwrap();
        let mask = Mask::<Bitmask, _>::from_raw(raw, &Self::params(), &self.shape).unwrap();
        let want = self.backward(&bytes, &go);
        for (threads, cpu) in [(1, &Cpu::sequential()), (2, common::cpu_with_threads(2))]
            .into_iter()
            .chain([3, 7].map(|t| (t, common::cpu_with_threads(t))))
        {
            let gi = poolgrad::on(cpu).max_pool2d_with_mask_backward(&go, &x, &mask).unwrap();
            assert_eq!(gi.mapv(f64::from), want, "{:?}, {threads} threads", self.shape);
        }
    }
}

/// Blocks that do not decode: a position whose channel has a second bit, and one whose channel
/// has none, in the second and third of three blocks (N = 3, C = 2). On 1, 2 and 3 threads those
/// blocks are scattered bit by bit, into their own planes; on 7 threads (fewer blocks than
/// threads) every element gathers its sum from the bits. Either way the gradient is the
/// plain f64 sum over every set bit inside the plane, the mask read by its documented layout.
#[test]
fn undecodable_blocks_after_the_first_are_scattered_into_their_own_planes() {
    BitsOf::new([3, 2, 9, 11]).check(|m, bytes| {
        // Block 1 (n = 1): channel 1 at position 7 (oh 1, ow 1: every tap inside) gets a
        // second bit.
        let set = (0..9).find(|&k| m.bit(bytes, 1, 1, k, 7)).unwrap();
        m.flip(bytes, 1, 1, (set + 4) % 9, 7);
        // Block 2 (n = 2): channel 0 at position 0 loses its bit.
        let set = (0..9).find(|&k| m.bit(bytes, 2, 0, k, 0)).unwrap();
        m.flip(bytes, 2, 0, set, 0);
    });
}

/// Blocks of 1 to 4 channels are decoded four positions to a `u64`: a run of interior positions
/// in which two positions four apart (the same lane of two words) both lack their bit does not
/// decode, and those positions add nothing.
#[test]
fn two_missing_bits_four_positions_apart_add_nothing() {
    for c in 1..=4 {
        // 20 columns: output columns 1 to 9 are interior, one run; positions 2 and 6 of row 1.
        BitsOf::new([1, c, 5, 20]).check(|m, bytes| {
            for p in [10 + 2, 10 + 6] {
                let set = (0..9).find(|&k| m.bit(bytes, 0, c - 1, k, p)).unwrap();
                m.flip(bytes, 0, c - 1, set, p);
            }
        });
    }
}

/// Every `(n, c, oh, ow, k)` of a 3x3 window.
fn itertools_product(
    n: usize,
    c: usize,
    ho: usize,
    wo: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize, usize)> {
    (0..n).flat_map(move |a| {
        (0..c).flat_map(move |b| {
            (0..ho).flat_map(move |oh| (0..wo).flat_map(move |ow| (0..9).map(move |k| (a, b, oh, ow, k))))
        })
    })
}
