//! 3-D max pooling and adaptive 3-D max pooling, forward and backward, against a reference
//! written here from PyTorch's definitions (plain loops over every tap, sums in `f64`), on drawn
//! volumes with ties, NaN, `-inf`, padding, dilation and ceil mode, in every element and index
//! type, several thread counts and strided views; plus hand-worked examples.

mod common;

use ndarray::{Array5, ArrayD, ArrayView5, IxDyn, ShapeBuilder, s};
use poolgrad::device::cpu::Cpu;
use poolgrad::{ArgmaxIndex, Error, MaxPool3dParams, PoolFloat, on};
use proptest::prelude::*;

/// How the windows of one axis are made.
#[derive(Debug, Clone, Copy)]
enum Axis {
    /// PyTorch's adaptive rule: window `o` is `⌊o·n/m⌋ .. ⌈(o+1)·n/m⌉`.
    Adaptive { out: usize },
    /// Kernel, stride, padding, dilation: taps `o·s − p + i·d`, those inside the input.
    Max { k: usize, s: usize, p: usize, d: usize },
}

impl Axis {
    fn window(&self, o: usize, n: usize) -> Vec<usize> {
        match *self {
            Axis::Adaptive { out } => ((o * n) / out..((o + 1) * n).div_ceil(out)).collect(),
            Axis::Max { k, s, p, d } => (0..k as i64)
                .map(|i| o as i64 * s as i64 - p as i64 + i * d as i64)
                .filter(|&t| t >= 0 && t < n as i64)
                .map(|t| t as usize)
                .collect(),
        }
    }

    /// The output length: PyTorch's `pooling_output_shape`, counted window by window.
    fn len(&self, n: usize, ceil: bool) -> usize {
        match *self {
            Axis::Adaptive { out } => out,
            Axis::Max { k, s, p, d } => common::pool_len(n, k, s, p, d, ceil),
        }
    }
}

/// The reference forward of `x` (`[N, C, D, H, W]`, as `f64`): per window, every tap in
/// row-major `(d, h, w)` order, starting from `-inf` at the first tap; a tap replaces the best
/// when it is larger or NaN.
fn forward(x: &Array5<f64>, axes: [Axis; 3], ceil: bool) -> (Array5<f64>, Array5<i64>) {
    let (n, c, d, h, w) = x.dim();
    let [od, oh, ow] = [axes[0].len(d, ceil), axes[1].len(h, ceil), axes[2].len(w, ceil)];
    let mut values = Array5::zeros((n, c, od, oh, ow));
    let mut indices = Array5::zeros((n, c, od, oh, ow));
    for ((b, ch, a, i, j), v) in values.indexed_iter_mut() {
        let (ds, hs, ws) = (axes[0].window(a, d), axes[1].window(i, h), axes[2].window(j, w));
        let mut best = f64::NEG_INFINITY;
        let mut at = (ds[0] * h + hs[0]) * w + ws[0];
        for &z in &ds {
            for &y in &hs {
                for &x_ in &ws {
                    let value = x[[b, ch, z, y, x_]];
                    if value > best || value.is_nan() {
                        best = value;
                        at = (z * h + y) * w + x_;
                    }
                }
            }
        }
        *v = best;
        indices[[b, ch, a, i, j]] = at as i64;
    }
    (values, indices)
}

/// The reference backward: each gradient added at its index, in `f64`.
fn backward(go: &Array5<f64>, idx: &Array5<i64>, input: [usize; 5]) -> Array5<f64> {
    let [n, c, d, h, w] = input;
    let mut gi = Array5::<f64>::zeros((n, c, d, h, w));
    for ((b, ch, ..), (&g, &i)) in go.indexed_iter().zip(idx.iter()).map(|((p, g), i)| (p, (g, i))) {
        let i = i as usize;
        gi[[b, ch, i / (h * w), (i / w) % h, i % w]] += g;
    }
    gi
}

fn to<T: PoolFloat>(a: &Array5<f64>) -> Array5<T> {
    a.mapv(common::cast::<T>)
}

fn from<T: PoolFloat>(a: &Array5<T>) -> Array5<f64> {
    a.mapv(common::to_f64)
}

/// Equal as values, NaN equal to NaN, and `0.0` apart from `-0.0`.
fn same(a: &Array5<f64>, b: &Array5<f64>) -> bool {
    a.shape() == b.shape()
        && a.iter().zip(b).all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

/// A drawn case: an input volume batch, the axes' windows, ceil mode, a gradient.
#[derive(Debug, Clone)]
struct Case {
    x: Array5<f64>,
    axes: [Axis; 3],
    ceil: bool,
    params: Option<MaxPool3dParams>,
    seed: u64,
}

fn values_of(len: usize, seed: u64, kind: u8) -> Vec<f64> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match kind {
                // Ties: few distinct values.
                0 => (s % 4) as f64,
                // Distinct-ish, exact in every half type.
                1 => (s % 512) as f64 - 256.0,
                // With NaN and -inf.
                _ => match s % 8 {
                    0 => f64::NAN,
                    1 => f64::NEG_INFINITY,
                    r => r as f64,
                },
            }
        })
        .collect()
}

fn axis_strategy(n: usize) -> impl Strategy<Value = (Axis, usize, usize, usize, usize)> {
    (1usize..=4, 1usize..=3, 1usize..=2)
        .prop_flat_map(move |(k, s, d)| (Just(k), Just(s), 0..=k / 2, Just(d)))
        .prop_filter("a window that fits", move |&(k, _, p, d)| d * (k - 1) < n + 2 * p)
        .prop_map(|(k, s, p, d)| (Axis::Max { k, s, p, d }, k, s, p, d))
}

fn max_cases() -> impl Strategy<Value = Case> {
    (1usize..=2, 1usize..=3, 1usize..=6, 1usize..=6, 1usize..=7, 0u8..3, any::<u64>(), any::<bool>())
        .prop_flat_map(|(n, c, d, h, w, kind, seed, ceil)| {
            (axis_strategy(d), axis_strategy(h), axis_strategy(w)).prop_filter_map(
                "every window reads an input",
                move |(a, b, e)| {
                    let x = Array5::from_shape_vec((n, c, d, h, w), values_of(n * c * d * h * w, seed, kind))
                        .ok()?;
                    let axes = [a.0, b.0, e.0];
                    let params = MaxPool3dParams::new([a.1, b.1, e.1])
                        .with_stride([a.2, b.2, e.2])
                        .with_padding([a.3, b.3, e.3])
                        .with_dilation([a.4, b.4, e.4])
                        .with_ceil_mode(ceil);
                    let lens = [d, h, w];
                    let reads = (0..3).all(|i| {
                        (0..axes[i].len(lens[i], ceil)).all(|o| !axes[i].window(o, lens[i]).is_empty())
                    });
                    reads.then_some(Case { x, axes, ceil, params: Some(params), seed })
                },
            )
        })
}

fn adaptive_cases() -> impl Strategy<Value = Case> {
    (1usize..=2, 1usize..=3, 1usize..=7, 1usize..=7, 1usize..=7, 0u8..3, any::<u64>()).prop_flat_map(
        |(n, c, d, h, w, kind, seed)| {
            (1..=d + 2, 1..=h + 2, 1..=w + 2).prop_map(move |(a, b, e)| {
                let x = Array5::from_shape_vec((n, c, d, h, w), values_of(n * c * d * h * w, seed, kind))
                    .unwrap();
                let axes = [Axis::Adaptive { out: a }, Axis::Adaptive { out: b }, Axis::Adaptive { out: e }];
                Case { x, axes, ceil: false, params: None, seed }
            })
        },
    )
}

fn output_size(c: &Case) -> [usize; 3] {
    c.axes.map(|a| match a {
        Axis::Adaptive { out } => out,
        Axis::Max { .. } => 0,
    })
}

/// One case on `cpu`, in `T` with indices `I`: forward against the reference bit for bit,
/// backward against the reference sums (`f64`: exact; `f32`: the row-major `f32` sum; half
/// types: that sum rounded once).
fn check<T: PoolFloat, I: ArgmaxIndex>(case: &Case, cpu: &Cpu) -> Result<(), TestCaseError> {
    let x: Array5<T> = to(&case.x);
    let (want_v, want_i) = forward(&from(&x), case.axes, case.ceil);
    let dev = on(cpu);
    let (out, idx): (Array5<T>, Array5<I>) = match &case.params {
        Some(p) => {
            let mut out = Array5::<T>::zeros(want_v.raw_dim());
            let mut idx = Array5::<I>::zeros(want_v.raw_dim());
            dev.max_pool3d_with_indices_into(&x, p, &mut out, &mut idx).unwrap();
            (out, idx)
        }
        None => {
            let mut out = Array5::<T>::zeros(want_v.raw_dim());
            let mut idx = Array5::<I>::zeros(want_v.raw_dim());
            dev.adaptive_max_pool3d_into(&x, output_size(case), &mut out, &mut idx).unwrap();
            (out, idx)
        }
    };
    prop_assert!(same(&from(&out), &want_v), "values\n{:?}\nwant\n{:?}", out, want_v);
    prop_assert_eq!(idx.mapv(|i| i.to_i64()), want_i.clone());

    // A gradient of quarters in -64..64 (exact in every type, bf16 included): f64 sums are
    // exact; the f32 replay below is the row-major sum the kernels must give bit for bit.
    let go = Array5::from_shape_vec(
        want_v.raw_dim(),
        values_of(want_v.len(), case.seed ^ 0x9e37, 1)
            .iter()
            .map(|v| v.rem_euclid(256.0) / 4.0 - 32.0)
            .collect(),
    )
    .unwrap();
    let go_t: Array5<T> = to(&go);
    let gi = match &case.params {
        Some(p) => dev.max_pool3d_with_indices_backward(&go_t, &x, &idx, p).unwrap(),
        None => dev.adaptive_max_pool3d_backward(&go_t, &x, &idx).unwrap(),
    };
    let dims = case.x.dim();
    let shape = [dims.0, dims.1, dims.2, dims.3, dims.4];
    // The f32 sum in row-major output order (PyTorch's), rounded once to T.
    let mut f32_sums = Array5::<f32>::zeros(case.x.raw_dim());
    let (h, w) = (dims.3, dims.4);
    for (((b, ch, ..), &g), &i) in from(&go_t).indexed_iter().zip(want_i.iter()) {
        let i = i as usize;
        f32_sums[[b, ch, i / (h * w), (i / w) % h, i % w]] += g as f32;
    }
    let want = if T::DTYPE == poolgrad::DType::F64 {
        backward(&from(&go_t), &want_i, shape)
    } else {
        f32_sums.mapv(|v| T::round_from_f64(f64::from(v)).to_f64_exact())
    };
    prop_assert!(same(&from(&gi), &want), "backward\n{:?}\nwant\n{:?}", gi, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn max_pool3d_f32_i64(case in max_cases()) { check::<f32, i64>(&case, &Cpu::sequential())?; }
    #[test]
    fn max_pool3d_f64_i32(case in max_cases()) { check::<f64, i32>(&case, common::cpu_with_threads(3))?; }
    #[test]
    fn max_pool3d_f16_i32(case in max_cases()) { check::<half::f16, i32>(&case, common::cpu_with_threads(2))?; }
    #[test]
    fn max_pool3d_bf16_i64(case in max_cases()) { check::<half::bf16, i64>(&case, common::cpu_with_threads(7))?; }
    #[test]
    fn adaptive_max_pool3d_f32_i32(case in adaptive_cases()) { check::<f32, i32>(&case, common::cpu_with_threads(2))?; }
    #[test]
    fn adaptive_max_pool3d_f64_i64(case in adaptive_cases()) { check::<f64, i64>(&case, &Cpu::sequential())?; }
    #[test]
    fn adaptive_max_pool3d_f16_i64(case in adaptive_cases()) { check::<half::f16, i64>(&case, common::cpu_with_threads(3))?; }
    #[test]
    fn adaptive_max_pool3d_bf16_i32(case in adaptive_cases()) { check::<half::bf16, i32>(&case, common::cpu_with_threads(7))?; }
}

/// Every thread count and grain gives the same bits, on volumes large enough to be cut into
/// tasks of whole volumes and bands of output depths (grain 0: every call on the pool).
#[test]
fn results_do_not_depend_on_threads() {
    let x = Array5::from_shape_vec((1, 3, 9, 11, 10), values_of(3 * 9 * 11 * 10, 7, 2))
        .unwrap()
        .mapv(|v| v as f32);
    let params = MaxPool3dParams::new([3, 2, 3]).with_stride([2, 1, 2]).with_padding([1, 1, 1]);
    let alone = on(&Cpu::sequential()).max_pool3d_with_indices(&x, &params).unwrap();
    let adaptive_alone = on(&Cpu::sequential()).adaptive_max_pool3d(&x, [4, 5, 3]).unwrap();
    let go = alone.output.mapv(|v| if v.is_nan() { 1.0 } else { v * 0.5 + 0.125 });
    let back =
        on(&Cpu::sequential()).max_pool3d_with_indices_backward(&go, &x, &alone.indices, &params).unwrap();
    for threads in [2, 3, 5, 8] {
        let cpu = Cpu::with_threads(threads).unwrap().with_grain(0);
        let p = on(&cpu).max_pool3d_with_indices(&x, &params).unwrap();
        assert_eq!(p.indices, alone.indices, "{threads} threads");
        assert!(same(&p.output.mapv(f64::from), &alone.output.mapv(f64::from)));
        let a = on(&cpu).adaptive_max_pool3d(&x, [4, 5, 3]).unwrap();
        assert_eq!(a.indices, adaptive_alone.indices, "{threads} threads");
        let b = on(&cpu).max_pool3d_with_indices_backward(&go, &x, &alone.indices, &params).unwrap();
        assert!(same(&b.mapv(f64::from), &back.mapv(f64::from)), "{threads} threads");
    }
    // And against the reference.
    let axes = [
        Axis::Max { k: 3, s: 2, p: 1, d: 1 },
        Axis::Max { k: 2, s: 1, p: 1, d: 1 },
        Axis::Max { k: 3, s: 2, p: 1, d: 1 },
    ];
    let (v, i) = forward(&x.mapv(f64::from), axes, false);
    assert_eq!(alone.indices, i);
    assert!(same(&alone.output.mapv(f64::from), &v));
}

/// Strided views: a channels-last volume (its `D` and `H` merge) and a view sliced along `D`
/// with a step (they do not: the allocating forms copy it), `[C, D, H, W]` inputs, and a view
/// whose axes cannot be described as 4-D rejected by the Plan API's constructor.
#[test]
fn strided_and_unbatched_volumes() {
    let x = Array5::from_shape_vec((2, 3, 6, 5, 4), values_of(2 * 3 * 6 * 5 * 4, 11, 1))
        .unwrap()
        .mapv(|v| v as f32);
    let params = MaxPool3dParams::new([2, 2, 2]).with_stride([1, 2, 1]);
    let want = poolgrad::max_pool3d_with_indices(&x, &params).unwrap();
    // Channels last: the same values in NDHWC memory.
    let mut cl = Array5::<f32>::zeros((2, 6, 5, 4, 3));
    cl.assign(&x.view().permuted_axes([0, 2, 3, 4, 1]));
    let cl_view = cl.view().permuted_axes([0, 4, 1, 2, 3]);
    assert_eq!(poolgrad::max_pool3d_with_indices(&cl_view, &params).unwrap(), want);
    // Every other depth: D and H do not merge.
    let stepped = x.slice(s![.., .., ..;2, .., ..]);
    let owned = stepped.to_owned();
    assert_eq!(
        poolgrad::max_pool3d_with_indices(&stepped, &params).unwrap(),
        poolgrad::max_pool3d_with_indices(&owned, &params).unwrap()
    );
    let e = poolgrad::TensorRef::from_view(stepped).unwrap_err();
    assert!(matches!(e, Error::Layout { .. }), "{e}");
    assert!(e.to_string().contains("D and H axes do not merge"), "{e}");
    // Unbatched [C, D, H, W]: the batch's first volume.
    let one = x.index_axis(ndarray::Axis(0), 0);
    let p = poolgrad::max_pool3d_with_indices(&one, &params).unwrap();
    assert_eq!(p.indices, want.indices.index_axis(ndarray::Axis(0), 0));
    // IxDyn of rank 5 and of a wrong rank.
    let dynamic = x.clone().into_dyn();
    assert_eq!(poolgrad::adaptive_max_pool3d(&dynamic, [2, 2, 2]).unwrap().output.ndim(), 5);
    let flat: ArrayD<f32> = ArrayD::zeros(IxDyn(&[2, 3, 4]));
    let e = poolgrad::adaptive_max_pool3d(&flat, [1, 1, 1]).unwrap_err();
    assert!(matches!(e, Error::Rank { op: "adaptive_max_pool3d", arg: "input", got: 3, .. }), "{e}");
}

/// Hand-worked: a 2x3x3 volume, kernel 2, stride 1, padding 1 along depth only. Output depth 0
/// reads slice 0 alone (the other tap is padding); output depth 2 reads slice 1 alone.
#[test]
fn hand_worked_padding_along_depth() {
    // Slice 0: 0..9, slice 1: 9..18 reversed per slice, so slice 1's maximum is its first.
    let mut x = Array5::<f32>::zeros((1, 1, 2, 3, 3));
    for (i, v) in x.iter_mut().enumerate() {
        *v = if i < 9 { i as f32 } else { (26 - i) as f32 };
    }
    let params = MaxPool3dParams::new([2, 3, 3]).with_stride([1, 1, 1]).with_padding([1, 0, 0]);
    let p = poolgrad::max_pool3d_with_indices(&x, &params).unwrap();
    assert_eq!(p.output.iter().copied().collect::<Vec<_>>(), [8.0, 17.0, 17.0]);
    // Depth 0: slice 0's last element (8); depth 1: slice 1's first (flat 9, value 17 > 8);
    // depth 2: slice 1 again.
    assert_eq!(p.indices.iter().copied().collect::<Vec<_>>(), [8, 9, 9]);
    let g = Array5::from_shape_vec((1, 1, 3, 1, 1), vec![1.0f32, 2.0, 4.0]).unwrap();
    let gx = poolgrad::max_pool3d_with_indices_backward(&g, &x, &p.indices, &params).unwrap();
    assert_eq!((gx[[0, 0, 0, 2, 2]], gx[[0, 0, 1, 0, 0]], gx.sum()), (1.0, 6.0, 7.0));
}

/// NaN along depth: the last NaN of the window wins, even when an earlier slice holds a larger
/// value; a window of `-inf` points at its first tap.
#[test]
fn nan_and_negative_infinity_across_slices() {
    let mut x = Array5::from_elem((1, 1, 3, 2, 2), f32::NEG_INFINITY);
    x[[0, 0, 0, 1, 1]] = f32::NAN;
    x[[0, 0, 1, 0, 0]] = 100.0;
    x[[0, 0, 2, 0, 1]] = f32::NAN;
    let p = poolgrad::adaptive_max_pool3d(&x, [1, 1, 1]).unwrap();
    assert!(p.output[[0, 0, 0, 0, 0]].is_nan());
    assert_eq!(p.indices[[0, 0, 0, 0, 0]], 2 * 4 + 1);
    let q = poolgrad::adaptive_max_pool3d(&x, [3, 1, 1]).unwrap();
    assert_eq!(q.indices.iter().copied().collect::<Vec<_>>(), [3, 4, 9]);
    let r = poolgrad::adaptive_max_pool3d(&Array5::from_elem((1, 1, 2, 2, 2), f32::NEG_INFINITY), [1, 1, 1])
        .unwrap();
    assert_eq!(r.indices[[0, 0, 0, 0, 0]], 0);
}

/// Errors name the operation, the argument and what was expected.
/// Depth windows that start before the one ahead of them: kernel 3, dilation 3 and padding 1
/// read slices 2 and 5 for output depth 0, then 0, 3 and 6 for output depth 1. Against the
/// reference loops in every element type, on one thread (volumes eight at a time) and on
/// threads that split the volumes' output depths into bands (one volume).
#[test]
fn depth_windows_out_of_order() {
    let k = Axis::Max { k: 3, s: 1, p: 1, d: 3 };
    let rows = Axis::Max { k: 2, s: 1, p: 1, d: 2 };
    let params = MaxPool3dParams::new([3, 2, 2])
        .with_stride([1, 1, 1])
        .with_padding([1, 1, 1])
        .with_dilation([3, 2, 2]);
    for (volumes, seed) in [(9, 3), (1, 5)] {
        for kind in 0..3 {
            let x =
                Array5::from_shape_vec((1, volumes, 9, 5, 6), values_of(volumes * 270, seed, kind)).unwrap();
            let case = Case { x, axes: [k, rows, rows], ceil: false, params: Some(params), seed };
            for cpu in [&Cpu::sequential(), common::cpu_with_threads(2)] {
                check::<f32, i64>(&case, cpu).unwrap();
                check::<f64, i32>(&case, cpu).unwrap();
                check::<half::f16, i64>(&case, cpu).unwrap();
                check::<half::bf16, i32>(&case, cpu).unwrap();
            }
        }
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let x = Array5::<f32>::zeros((1, 2, 3, 4, 4));
    let e = poolgrad::max_pool3d_with_indices(&x, &MaxPool3dParams::new([2, 0, 2])).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: "max_pool3d_with_indices", arg: "kernel", .. }), "{e}");
    assert!(e.to_string().contains("three values, each at least 1"), "{e}");
    let e = poolgrad::max_pool3d_with_indices(&x, &MaxPool3dParams::new([4, 2, 2])).unwrap_err();
    assert!(matches!(e, Error::OutputTooSmall { arg: "kernel", axis: "D", .. }), "{e}");
    let e = poolgrad::adaptive_max_pool3d(&x, [1, 0, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidParameter { op: "adaptive_max_pool3d", arg: "output_size", .. }),
        "{e}"
    );
    let empty = Array5::<f32>::zeros((1, 2, 0, 4, 4));
    let e = poolgrad::adaptive_max_pool3d(&empty, [1, 1, 1]).unwrap_err();
    assert!(matches!(e, Error::EmptyDimension { axis: "D", .. }), "{e}");
    // An index outside the volume: the first one, with its 5-D position.
    let g = Array5::<f32>::ones((1, 2, 1, 2, 2));
    let mut idx = Array5::<i64>::zeros((1, 2, 1, 2, 2));
    idx[[0, 1, 0, 1, 0]] = 48;
    idx[[0, 1, 0, 1, 1]] = -1;
    let e = poolgrad::adaptive_max_pool3d_backward(&g, &x, &idx).unwrap_err();
    match e {
        Error::IndexOutOfRange { op, arg, position, value, plane } => {
            assert_eq!(
                (op, arg, position, value, plane),
                ("adaptive_max_pool3d_backward", "indices", vec![0, 1, 0, 1, 0], 48, 48)
            );
        }
        e => panic!("{e}"),
    }
    // Shapes that disagree.
    let e =
        poolgrad::adaptive_max_pool3d_backward(&g, &x, &Array5::<i64>::zeros((1, 2, 1, 2, 1))).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { arg: "indices", .. }), "{e}");
    // i32 indices of a volume of 2^31 + 2^20 positions: refused before anything is allocated.
    let params = MaxPool3dParams::new([1, 1, 1]);
    let huge = ArrayView5::<f32>::from_shape(
        (1, 1, (1 << 11) + 1, 1 << 10, 1 << 10).strides((0, 0, 0, 0, 0)),
        &[0.0],
    )
    .unwrap();
    let e = poolgrad::max_pool3d_with_indices_i32(&huge, &params).unwrap_err();
    assert!(matches!(e, Error::IndexTypeTooNarrow { arg: "indices", .. }), "{e}");
}

/// PyTorch's CPU results, written by `benches/torch-anchor/pool3d_cases.py DIR` (it needs
/// PyTorch: `bash benches/torch-anchor/setup.sh` installs it), compared bit for bit: values,
/// indices and the gradient (PyTorch's own backward in f32 and f64; the half types' rule in f16
/// and bf16). Run with `POOLGRAD_TORCH_CASES=DIR cargo test --test pool3d against_pytorch --
/// --ignored`.
#[test]
#[ignore = "needs PyTorch's results: see the doc comment"]
fn against_pytorch() {
    let dir = std::env::var("POOLGRAD_TORCH_CASES")
        .expect("POOLGRAD_TORCH_CASES: a directory written by benches/torch-anchor/pool3d_cases.py");
    let manifest = std::fs::read_to_string(format!("{dir}/manifest.txt")).unwrap();
    let mut checked = 0;
    for line in manifest.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n: Vec<usize> = f[3..].iter().map(|v| v.parse().unwrap()).collect();
        let shape = [n[0], n[1], n[2], n[3], n[4]];
        let params = MaxPool3dParams::new([n[5], n[6], n[7]])
            .with_stride([n[8], n[9], n[10]])
            .with_padding([n[11], n[12], n[13]])
            .with_dilation([n[14], n[15], n[16]])
            .with_ceil_mode(n[17] == 1);
        let size = [n[18], n[19], n[20]];
        let max = f[1] == "max";
        let file = |ext: &str| std::fs::read(format!("{dir}/{}.{ext}", f[0])).unwrap();
        match f[2] {
            "f32" => torch_case::<f32, 4>(&file, shape, max, &params, size, f32::from_le_bytes),
            "f64" => torch_case::<f64, 8>(&file, shape, max, &params, size, f64::from_le_bytes),
            "f16" => torch_case::<half::f16, 2>(&file, shape, max, &params, size, half::f16::from_le_bytes),
            _ => torch_case::<half::bf16, 2>(&file, shape, max, &params, size, half::bf16::from_le_bytes),
        }
        .unwrap_or_else(|e| panic!("{line}: {e}"));
        checked += 1;
    }
    assert!(checked >= 52, "{checked} cases");
    eprintln!("{checked} cases equal to PyTorch's, bit for bit");
}

fn torch_case<T: PoolFloat, const B: usize>(
    file: &dyn Fn(&str) -> Vec<u8>,
    shape: [usize; 5],
    max: bool,
    params: &MaxPool3dParams,
    size: [usize; 3],
    from_le: fn([u8; B]) -> T,
) -> Result<(), String> {
    let elems = |bytes: Vec<u8>| common::le_elements(&bytes, from_le);
    let x = Array5::from_shape_vec(shape, elems(file("x"))).unwrap();
    let p = if max {
        poolgrad::max_pool3d_with_indices(&x, params)
    } else {
        poolgrad::adaptive_max_pool3d(&x, size)
    }
    .map_err(|e| e.to_string())?;
    // A selected NaN is the input's, bit for bit; PyTorch's bf16 kernels give the canonical NaN
    // (its 2-D ones too), so NaNs compare as NaNs.
    if !common::same_bits_nan_as_nan(p.output.as_slice().unwrap(), &elems(file("out"))) {
        return Err("values differ".into());
    }
    if p.indices.as_slice().unwrap() != common::le_indices(&file("idx")) {
        return Err("indices differ".into());
    }
    let go = Array5::from_shape_vec(p.output.raw_dim(), elems(file("go"))).unwrap();
    let gi = if max {
        poolgrad::max_pool3d_with_indices_backward(&go, &x, &p.indices, params)
    } else {
        poolgrad::adaptive_max_pool3d_backward(&go, &x, &p.indices)
    }
    .map_err(|e| e.to_string())?;
    // The gradients hold no NaN: bit for bit.
    let bytes = |a: &[T]| bytemuck::cast_slice::<T, u8>(a).to_vec();
    if bytes(gi.as_slice().unwrap()) != bytes(&elems(file("gi"))) {
        return Err("gradients differ".into());
    }
    Ok(())
}
