//! 1-D max pooling and adaptive 1-D max pooling, forward and backward, against a reference
//! written here from PyTorch's definitions (every tap in order, sums in `f64`), on drawn inputs
//! with ties, NaN, `-inf`, padding, dilation and ceil mode, in every element and index type;
//! plus the errors, named in 1-D terms.

mod common;

use ndarray::{Array2, Array3, ArrayD, IxDyn, array};
use poolgrad::device::cpu::Cpu;
use poolgrad::{ArgmaxIndex, Error, MaxPool1dParams, PoolFloat, on};
use proptest::prelude::*;

/// The taps of window `o`: adaptive (`Some(out)`), or kernel, stride, padding, dilation.
fn window(o: usize, l: usize, adaptive: Option<usize>, [k, s, p, d]: [usize; 4]) -> Vec<usize> {
    match adaptive {
        Some(out) => ((o * l) / out..((o + 1) * l).div_ceil(out)).collect(),
        None => (0..k as i64)
            .map(|i| o as i64 * s as i64 - p as i64 + i * d as i64)
            .filter(|&t| t >= 0 && t < l as i64)
            .map(|t| t as usize)
            .collect(),
    }
}

/// Values of the kinds the property tests draw: ties, spread integers, or NaN and `-inf`.
fn values(len: usize, seed: u64, kind: u8) -> Vec<f64> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match (kind, s % 8) {
                (0, r) => (r % 3) as f64,
                (1, _) => ((s >> 3) % 256) as f64 - 128.0,
                (_, 0) => f64::NAN,
                (_, 1) => f64::NEG_INFINITY,
                (_, r) => r as f64,
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Case {
    x: Array3<f64>,
    adaptive: Option<usize>,
    kspd: [usize; 4],
    ceil: bool,
    seed: u64,
}

fn cases() -> impl Strategy<Value = Case> {
    (1usize..=2, 1usize..=3, 1usize..=12, 0u8..3, any::<u64>(), any::<bool>(), any::<bool>()).prop_flat_map(
        |(n, c, l, kind, seed, adaptive, ceil)| {
            let x = Array3::from_shape_vec((n, c, l), values(n * c * l, seed, kind)).unwrap();
            (Just(x), 1..=l + 2, 1usize..=4, 1usize..=3, 1usize..=3, any::<prop::sample::Index>()).prop_map(
                move |(x, out, k, s, d, pad)| {
                    let p = pad.index(k / 2 + 1);
                    let lo = common::pool_len(l, k, s, p, d, ceil);
                    let fits = d * (k - 1) < l + 2 * p;
                    let reads =
                        fits && lo > 0 && (0..lo).all(|o| !window(o, l, None, [k, s, p, d]).is_empty());
                    // Parameters with no valid window (their errors have tests of their own)
                    // give way to a window of one.
                    let kspd = if reads { [k, s, p, d] } else { [1, s, 0, 1] };
                    Case { x, adaptive: adaptive.then_some(out), kspd, ceil, seed }
                },
            )
        },
    )
}

fn check<T: PoolFloat, I: ArgmaxIndex>(case: &Case, cpu: &Cpu) -> Result<(), TestCaseError> {
    let x: Array3<T> = case.x.mapv(common::cast::<T>);
    let xf = x.mapv(common::to_f64);
    let (n, c, l) = x.dim();
    let [k, s, p, d] = case.kspd;
    let lo = case.adaptive.unwrap_or_else(|| common::pool_len(l, k, s, p, d, case.ceil));
    let params = MaxPool1dParams::new([k])
        .with_stride([s])
        .with_padding([p])
        .with_dilation([d])
        .with_ceil_mode(case.ceil);
    let mut want_v = Array3::<f64>::zeros((n, c, lo));
    let mut want_i = Array3::<i64>::zeros((n, c, lo));
    for ((b, ch, o), v) in want_v.indexed_iter_mut() {
        let taps = window(o, l, case.adaptive, case.kspd);
        let (mut best, mut at) = (f64::NEG_INFINITY, taps[0]);
        for t in taps {
            let value = xf[[b, ch, t]];
            if value > best || value.is_nan() {
                (best, at) = (value, t);
            }
        }
        *v = best;
        want_i[[b, ch, o]] = at as i64;
    }
    let dev = on(cpu);
    let (mut out, mut idx) = (Array3::<T>::zeros((n, c, lo)), Array3::<I>::zeros((n, c, lo)));
    match case.adaptive {
        Some(size) => dev.adaptive_max_pool1d_into(&x, size, &mut out, &mut idx).unwrap(),
        None => dev.max_pool1d_with_indices_into(&x, &params, &mut out, &mut idx).unwrap(),
    }
    let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
    prop_assert!(
        out.iter().zip(&want_v).all(|(&a, &b)| same(common::to_f64(a), b)),
        "{:?} vs {:?}",
        out,
        want_v
    );
    prop_assert_eq!(idx.mapv(|i| i.to_i64()), want_i.clone());

    // The backward: the f32 sums in output order, rounded once (f64: the sums themselves).
    let go =
        Array3::from_shape_vec((n, c, lo), values(n * c * lo, case.seed ^ 5, 1)).unwrap().mapv(|v| v / 4.0);
    let go_t = go.mapv(common::cast::<T>);
    let gi = match case.adaptive {
        Some(_) => dev.adaptive_max_pool1d_backward(&go_t, &x, &idx).unwrap(),
        None => dev.max_pool1d_with_indices_backward(&go_t, &x, &idx, &params).unwrap(),
    };
    let mut sums32 = Array3::<f32>::zeros((n, c, l));
    let mut sums64 = Array3::<f64>::zeros((n, c, l));
    for (((b, ch, _), &g), &i) in go.indexed_iter().zip(want_i.iter()) {
        sums32[[b, ch, i as usize]] += g as f32;
        sums64[[b, ch, i as usize]] += g;
    }
    let want = if T::DTYPE == poolgrad::DType::F64 {
        sums64
    } else {
        sums32.mapv(|v| T::round_from_f64(f64::from(v)).to_f64_exact())
    };
    prop_assert!(gi.iter().zip(&want).all(|(&a, &b)| same(common::to_f64(a), b)), "{:?} vs {:?}", gi, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn f32_i64(case in cases()) { check::<f32, i64>(&case, &Cpu::sequential())?; }
    #[test]
    fn f64_i32(case in cases()) { check::<f64, i32>(&case, common::cpu_with_threads(3))?; }
    #[test]
    fn f16_i64(case in cases()) { check::<half::f16, i64>(&case, common::cpu_with_threads(2))?; }
    #[test]
    fn bf16_i32(case in cases()) { check::<half::bf16, i32>(&case, common::cpu_with_threads(7))?; }
}

/// `[C, L]` inputs, strided views and `IxDyn` arrays.
#[test]
fn unbatched_strided_and_dynamic() {
    let x = Array3::from_shape_vec((2, 3, 10), values(60, 3, 1)).unwrap().mapv(|v| v as f32);
    let params = MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
    let want = poolgrad::max_pool1d_with_indices(&x, &params).unwrap();
    let one = x.index_axis(ndarray::Axis(0), 0);
    let p = poolgrad::max_pool1d_with_indices(&one, &params).unwrap();
    assert_eq!(p.indices, want.indices.index_axis(ndarray::Axis(0), 0));
    let reversed = x.slice(ndarray::s![.., ..;-1, ..]);
    let q = poolgrad::max_pool1d_with_indices(&reversed, &params).unwrap();
    assert_eq!(q.indices, want.indices.slice(ndarray::s![.., ..;-1, ..]));
    let dynamic: ArrayD<f32> = x.clone().into_dyn();
    assert_eq!(poolgrad::adaptive_max_pool1d(&dynamic, 4).unwrap().indices.shape(), &[2, 3, 4]);
    let e = poolgrad::adaptive_max_pool1d(&ArrayD::<f32>::zeros(IxDyn(&[1, 2, 3, 4])), 2).unwrap_err();
    assert!(matches!(e, Error::Rank { op: "adaptive_max_pool1d", arg: "input", got: 4, .. }), "{e}");
    assert!(e.to_string().contains("2 (C, L) or 3 (N, C, L)"), "{e}");
}

/// Errors are in 1-D terms: the 1-D operation's name, its parameters and the `L` axis, and an
/// index's position in the caller's rank.
#[test]
fn errors_are_in_one_dimensional_terms() {
    let x = Array2::<f32>::zeros((2, 5));
    let e = poolgrad::max_pool1d_with_indices(&x, &MaxPool1dParams::new([0])).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: "max_pool1d_with_indices", arg: "kernel", .. }), "{e}");
    assert!(e.to_string().contains("one value, each at least 1") && e.to_string().contains("[0]"), "{e}");
    let e = poolgrad::max_pool1d_with_indices(&x, &MaxPool1dParams::new([6])).unwrap_err();
    assert!(matches!(e, Error::OutputTooSmall { axis: "L", .. }), "{e}");
    let e = poolgrad::adaptive_max_pool1d(&x, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { arg: "output_size", .. }), "{e}");
    let e = poolgrad::adaptive_max_pool1d(&Array2::<f32>::zeros((2, 0)), 1).unwrap_err();
    assert!(matches!(e, Error::EmptyDimension { axis: "L", .. }), "{e}");
    let g = array![[1.0f32, 1.0], [1.0, 1.0]];
    let e = poolgrad::adaptive_max_pool1d_backward(&g, &x, &array![[0i64, 1], [2, 5]]).unwrap_err();
    match e {
        Error::IndexOutOfRange { op, position, value, plane, .. } => {
            assert_eq!((op, position, value, plane), ("adaptive_max_pool1d_backward", vec![1, 1], 5, 5));
        }
        e => panic!("{e}"),
    }
    let e =
        poolgrad::max_pool1d_with_indices_backward(&g, &x, &array![[0i64], [1]], &MaxPool1dParams::new([2]))
            .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "max_pool1d_with_indices_backward", arg: "indices", .. }),
        "{e}"
    );
    let mut out = Array2::<f32>::zeros((2, 3));
    let mut idx = Array2::<i64>::zeros((2, 2));
    let e = poolgrad::max_pool1d_with_indices_into(&x, &MaxPool1dParams::new([2]), &mut out, &mut idx)
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { arg: "output", .. }), "{e}");
}

/// PyTorch 2.x CPU's results, bit for bit: `python benches/torch-anchor/line_unpool_cases.py DIR`,
/// then `POOLGRAD_TORCH_CASES=DIR cargo test --release --test pool1d against_pytorch -- --ignored`
/// (the shapes of PyTorch's `test_max_pool1d*` and `test_adaptive_max_pool1d*`, ceil mode,
/// dilation, ties, NaN and -inf; every dtype; NaNs compare as NaNs, as PyTorch's bf16 kernels
/// return the canonical NaN).
#[test]
#[ignore = "needs POOLGRAD_TORCH_CASES from benches/torch-anchor/line_unpool_cases.py"]
fn against_pytorch() {
    let dir = std::env::var("POOLGRAD_TORCH_CASES").expect("POOLGRAD_TORCH_CASES: a directory of cases");
    let manifest = std::fs::read_to_string(format!("{dir}/lines.txt")).unwrap();
    let mut checked = 0;
    for line in manifest.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n: Vec<usize> = f[3..].iter().map(|v| v.parse().unwrap()).collect();
        let file = |ext: &str| std::fs::read(format!("{dir}/{}.{ext}", f[0])).unwrap();
        let case = LineTorchCase {
            shape: [n[0], n[1], n[2]],
            max: f[1] == "max",
            kspd: [n[3], n[4], n[5], n[6]],
            ceil: n[7] == 1,
            size: n[8],
        };
        match f[2] {
            "f32" => torch_line::<f32, 4>(&file, &case, f32::from_le_bytes),
            "f64" => torch_line::<f64, 8>(&file, &case, f64::from_le_bytes),
            "f16" => torch_line::<half::f16, 2>(&file, &case, half::f16::from_le_bytes),
            _ => torch_line::<half::bf16, 2>(&file, &case, half::bf16::from_le_bytes),
        }
        .unwrap_or_else(|e| panic!("{line}: {e}"));
        checked += 1;
    }
    assert!(checked >= 36, "{checked} cases");
    eprintln!("{checked} 1-D cases equal to PyTorch's, bit for bit");
}

struct LineTorchCase {
    shape: [usize; 3],
    max: bool,
    kspd: [usize; 4],
    ceil: bool,
    size: usize,
}

fn torch_line<T: PoolFloat, const B: usize>(
    file: &dyn Fn(&str) -> Vec<u8>,
    case: &LineTorchCase,
    from_le: fn([u8; B]) -> T,
) -> Result<(), String> {
    let elems = |bytes: Vec<u8>| common::le_elements(&bytes, from_le);
    let same = common::same_bits_nan_as_nan::<T>;
    let [k, s, p, d] = case.kspd;
    let params = MaxPool1dParams::new([k])
        .with_stride([s])
        .with_padding([p])
        .with_dilation([d])
        .with_ceil_mode(case.ceil);
    let x = Array3::from_shape_vec(case.shape, elems(file("x"))).unwrap();
    let pooled = if case.max {
        poolgrad::max_pool1d_with_indices(&x, &params)
    } else {
        poolgrad::adaptive_max_pool1d(&x, case.size)
    }
    .map_err(|e| e.to_string())?;
    if !same(pooled.output.as_slice().unwrap(), &elems(file("out"))) {
        return Err("values differ".into());
    }
    let want_idx = common::le_indices(&file("idx"));
    if pooled.indices.as_slice().unwrap() != want_idx {
        return Err("indices differ".into());
    }
    let go = Array3::from_shape_vec(pooled.output.raw_dim(), elems(file("go"))).unwrap();
    let gi = if case.max {
        poolgrad::max_pool1d_with_indices_backward(&go, &x, &pooled.indices, &params)
    } else {
        poolgrad::adaptive_max_pool1d_backward(&go, &x, &pooled.indices)
    }
    .map_err(|e| e.to_string())?;
    if !same(gi.as_slice().unwrap(), &elems(file("gi"))) {
        return Err("gradients differ".into());
    }
    Ok(())
}
