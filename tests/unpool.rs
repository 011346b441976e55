//! Max unpooling (1-D, 2-D and 3-D), its backward, and the max poolings' double backward: against
//! plain loops, and against each other through the adjoint identity `<F x, g> = <x, Fᵀ g>` (each
//! pair is linear: unpooling and its backward, a pooling's backward and its double backward),
//! on drawn indices with repeats, in every element and index type and several thread counts.

mod common;

use ndarray::{Array2, Array3, Array4, Array5, ArrayD, IxDyn};
use poolgrad::device::cpu::Cpu;
use poolgrad::{ArgmaxIndex, Error, PoolFloat, on};
use proptest::prelude::*;

/// Drawn planes: `[n, c, pooled..]` values and indices into `full` positions, many repeated.
#[derive(Debug, Clone)]
struct Case {
    pooled: Vec<usize>,
    full: Vec<usize>,
    values: Vec<f64>,
    indices: Vec<usize>,
    gradient: Vec<f64>,
}

fn cases(axes: usize) -> impl Strategy<Value = Case> {
    (1usize..=2, 1usize..=3, prop::collection::vec(1usize..=4, axes), prop::collection::vec(1usize..=5, axes))
        .prop_flat_map(|(n, c, pooled, full)| {
            let count: usize = n * c * pooled.iter().product::<usize>();
            let positions: usize = full.iter().product();
            let full_count = n * c * positions;
            (
                Just([vec![n, c], pooled].concat()),
                Just([vec![n, c], full].concat()),
                prop::collection::vec((-64i32..64).prop_map(|v| f64::from(v) / 4.0), count),
                // Few distinct positions: repeats are common.
                prop::collection::vec(0..positions.min(3 + positions / 3), count),
                prop::collection::vec((-64i32..64).prop_map(|v| f64::from(v) / 4.0), full_count),
            )
        })
        .prop_map(|(pooled, full, values, indices, gradient)| Case {
            pooled,
            full,
            values,
            indices,
            gradient,
        })
}

fn arr<E: Clone>(shape: &[usize], v: Vec<E>) -> ArrayD<E> {
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

fn check<T: PoolFloat, I: ArgmaxIndex>(c: &Case, cpu: &Cpu) -> Result<(), TestCaseError> {
    let f64s = |a: &ArrayD<T>| a.iter().map(|&v| common::to_f64(v)).collect::<Vec<f64>>();
    let x = arr(&c.pooled, c.values.iter().map(|&v| common::cast::<T>(v)).collect());
    let idx = arr(&c.pooled, c.indices.iter().map(|&j| I::try_from(j as i64).ok().unwrap()).collect());
    let g = arr(&c.full, c.gradient.iter().map(|&v| common::cast::<T>(v)).collect());
    let dev = on(cpu);
    let axes = c.pooled.len() - 2;
    let (y, gx, ggo) = if axes == 1 {
        let y = dev.max_unpool1d(&x, &idx, c.full[2]).unwrap();
        (y, dev.max_unpool1d_backward(&g, &idx).unwrap(), dev.max_pool1d_double_backward(&g, &idx).unwrap())
    } else if axes == 2 {
        let size = [c.full[2], c.full[3]];
        let y = dev.max_unpool2d(&x, &idx, size).unwrap();
        (y, dev.max_unpool2d_backward(&g, &idx).unwrap(), dev.max_pool2d_double_backward(&g, &idx).unwrap())
    } else {
        let size = [c.full[2], c.full[3], c.full[4]];
        let y = dev.max_unpool3d(&x, &idx, size).unwrap();
        (y, dev.max_unpool3d_backward(&g, &idx).unwrap(), dev.max_pool3d_double_backward(&g, &idx).unwrap())
    };
    let (p, f): (usize, usize) = (c.pooled[2..].iter().product(), c.full[2..].iter().product());
    let want = common::unpool_loops(&c.values, &c.indices, p, f, &c.gradient);
    prop_assert_eq!(f64s(&y), want.output);
    prop_assert_eq!(f64s(&gx), want.gradient);
    prop_assert_eq!(f64s(&ggo), want.gathered);
    // Adjoints, exact in f64 for these quarters: <unpool(x), g> = <x, unpool_backward(g)>, and
    // <backward(go), ggi> = <go, double_backward(ggi)> with the pooling backward's scatter-add.
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
    prop_assert_eq!(dot(&f64s(&y), &c.gradient), dot(&c.values, &f64s(&gx)));
    let mut scatter_add = vec![0.0; c.gradient.len()];
    for (i, (&v, &j)) in c.values.iter().zip(&c.indices).enumerate() {
        scatter_add[(i / p) * f + j] += v;
    }
    prop_assert_eq!(dot(&scatter_add, &c.gradient), dot(&c.values, &f64s(&ggo)));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn unpool1d_f32_i32(c in cases(1)) { check::<f32, i32>(&c, &Cpu::sequential())?; }
    #[test]
    fn unpool1d_bf16_i64(c in cases(1)) { check::<half::bf16, i64>(&c, common::cpu_with_threads(3))?; }
    #[test]
    fn unpool2d_f32_i64(c in cases(2)) { check::<f32, i64>(&c, &Cpu::sequential())?; }
    #[test]
    fn unpool2d_bf16_i32(c in cases(2)) { check::<half::bf16, i32>(&c, common::cpu_with_threads(3))?; }
    #[test]
    fn unpool3d_f64_i32(c in cases(3)) { check::<f64, i32>(&c, common::cpu_with_threads(2))?; }
    #[test]
    fn unpool3d_f16_i64(c in cases(3)) { check::<half::f16, i64>(&c, common::cpu_with_threads(7))?; }
}

/// Unpooling a max pooling's result restores each maximum at its place (PyTorch's use of the
/// pair), and every thread count gives the same bits.
#[test]
fn unpooling_a_max_pooling_and_threads() {
    let x =
        Array4::from_shape_fn((2, 3, 12, 10), |(n, c, h, w)| ((n * 7 + c * 5 + h * 3 + w * 11) % 13) as f32);
    let params = poolgrad::MaxPool2dParams::new([3, 3]).with_stride([1, 1]).with_padding([1, 1]);
    let p = poolgrad::max_pool2d_with_indices(&x, &params).unwrap();
    let y = poolgrad::max_unpool2d(&p.output, &p.indices, [12, 10]).unwrap();
    for ((&v, &i), (n, c)) in p
        .output
        .iter()
        .zip(&p.indices)
        .zip((0..2).flat_map(|n| (0..3).map(move |c| (n, c))).flat_map(|nc| std::iter::repeat_n(nc, 120)))
    {
        let (h, w) = (i as usize / 10, i as usize % 10);
        assert_eq!(y[[n, c, h, w]], v);
        assert_eq!(x[[n, c, h, w]], v);
    }
    let g = x.mapv(|v| v * 0.5 - 1.0);
    let alone = on(&Cpu::sequential()).max_unpool2d_backward(&g, &p.indices).unwrap();
    for threads in [2, 3, 7] {
        let cpu = common::cpu_with_threads(threads);
        assert_eq!(on(cpu).max_unpool2d(&p.output, &p.indices, [12, 10]).unwrap(), y);
        assert_eq!(on(cpu).max_unpool2d_backward(&g, &p.indices).unwrap(), alone);
    }
    // 3-D: the same with volumes.
    let v =
        Array5::from_shape_fn((1, 2, 4, 6, 6), |(_, c, d, h, w)| ((c * 5 + d * 7 + h * 3 + w) % 11) as f64);
    let q = poolgrad::max_pool3d_with_indices(&v, &poolgrad::MaxPool3dParams::new([2, 2, 2])).unwrap();
    let u = poolgrad::max_unpool3d(&q.output, &q.indices, [4, 6, 6]).unwrap();
    assert_eq!(u.sum(), q.output.sum());
    let ggo = poolgrad::max_pool3d_double_backward(&v, &q.indices).unwrap();
    assert_eq!(ggo, q.output);
}

/// Errors name the operation, the argument and the first bad index with its position; the
/// output is then zero.
#[test]
fn errors_name_the_first_bad_index() {
    let x = Array4::<f32>::ones((1, 2, 1, 3));
    let mut idx = Array4::<i64>::zeros((1, 2, 1, 3));
    idx[[0, 1, 0, 1]] = 4;
    idx[[0, 1, 0, 2]] = -1;
    let mut y = Array4::<f32>::from_elem((1, 2, 2, 2), 9.0);
    let e = poolgrad::max_unpool2d_into(&x, &idx, [2, 2], &mut y).unwrap_err();
    match e {
        Error::IndexOutOfRange { op, arg, position, value, plane } => {
            assert_eq!(
                (op, arg, position, value, plane),
                ("max_unpool2d", "indices", vec![0, 1, 0, 1], 4, 4)
            );
        }
        e => panic!("{e}"),
    }
    assert!(y.iter().all(|&v| v == 0.0));
    let e = poolgrad::max_unpool2d(&x, &idx, [0, 2]).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: "max_unpool2d", arg: "output_size", .. }), "{e}");
    let e = poolgrad::max_unpool2d(&x, &Array4::<i64>::zeros((1, 2, 1, 2)), [2, 2]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { arg: "indices", .. }), "{e}");
    let g = Array4::<f32>::ones((1, 3, 2, 2));
    let e = poolgrad::max_unpool2d_backward(&g, &Array4::<i64>::zeros((1, 2, 1, 3))).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "max_unpool2d_backward", arg: "grad_output", .. }), "{e}");
    let e = poolgrad::max_pool2d_double_backward(&Array4::<f32>::ones((1, 2, 2, 2)), &idx).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { op: "max_pool2d_double_backward", value: 4, .. }), "{e}");
    // The unpooling's backward reads each plane from its end; the error is still the first bad
    // index in row-major order (4, before -1), and the gradient is all zeros.
    let mut gx = Array4::<f32>::from_elem((1, 2, 1, 3), 9.0);
    let e =
        poolgrad::max_unpool2d_backward_into(&Array4::<f32>::ones((1, 2, 2, 2)), &idx, &mut gx).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "max_unpool2d_backward", value: 4, ref position, .. } if position == &[0, 1, 0, 1]),
        "{e}"
    );
    assert!(gx.iter().all(|&v| v == 0.0), "{gx}");
    let e = poolgrad::max_unpool3d(
        &ArrayD::<f32>::zeros(IxDyn(&[2, 2, 2])),
        &ArrayD::<i64>::zeros(IxDyn(&[2, 2, 2])),
        [1, 1, 1],
    )
    .unwrap_err();
    assert!(matches!(e, Error::Rank { op: "max_unpool3d", got: 3, .. }), "{e}");
}

/// A bad index in planes that a later task works is named where it is: each task reports the
/// element of its own planes' bad index, which the run turns into a position of the whole index
/// tensor. 64 planes of 2 x 2 indices on 2, 3 and 7 threads (runs of several planes a task), one
/// index past the 4 x 4 output in the last plane (batch 3, channel 15), at row 0, column 1.
#[test]
fn a_bad_index_in_a_later_tasks_planes_is_named_where_it_is() {
    let mut idx = Array4::<i64>::from_shape_fn((4, 16, 2, 2), |(_, _, r, c)| (2 * r * 4 + 2 * c) as i64);
    idx[[3, 15, 0, 1]] = 16;
    let (x, g) = (Array4::<f32>::ones((4, 16, 2, 2)), Array4::<f32>::ones((4, 16, 4, 4)));
    let named = |e: Error| match e {
        Error::IndexOutOfRange { position, value, .. } => (position, value),
        e => panic!("{e}"),
    };
    let want = (vec![3, 15, 0, 1], 16);
    for threads in [2, 3, 7] {
        let cpu = common::cpu_with_threads(threads);
        assert_eq!(named(on(cpu).max_unpool2d(&x, &idx, [4, 4]).unwrap_err()), want, "unpooling");
        assert_eq!(named(on(cpu).max_unpool2d_backward(&g, &idx).unwrap_err()), want, "its backward");
        assert_eq!(named(on(cpu).max_pool2d_double_backward(&g, &idx).unwrap_err()), want, "double backward");
    }
}

/// The 1-D operations on a hand-worked line. A max pooling of kernel 3, stride 2, padding 1
/// over `[3, 9, 4, 9, 1, 2]` has windows on positions 0..=1, 1..=3 and 3..=5, whose first
/// maxima are at 1, 1 and 3. Unpooling `[5, 7, 8]` at those indices writes 7 at 1 (the last of
/// the two equal indices wins over 5) and 8 at 3; the unpooling's backward gives the gradient at
/// 1 to the second element only, and the double backward reads it for both. Every thread count
/// and the `[C, L]` rank give the same.
#[test]
fn one_dimensional_by_hand() {
    let x = ndarray::array![[[3.0f32, 9.0, 4.0, 9.0, 1.0, 2.0]]];
    let params = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]);
    let idx = poolgrad::max_pool1d_with_indices(&x, &params).unwrap().indices;
    assert_eq!(idx, ndarray::array![[[1i64, 1, 3]]]);
    let values = ndarray::array![[[5.0f32, 7.0, 8.0]]];
    let y = poolgrad::max_unpool1d(&values, &idx, 6).unwrap();
    assert_eq!(y, ndarray::array![[[0.0, 7.0, 0.0, 8.0, 0.0, 0.0]]]);
    let g = ndarray::array![[[10.0f32, 20.0, 30.0, 40.0, 50.0, 60.0]]];
    let gx = poolgrad::max_unpool1d_backward(&g, &idx).unwrap();
    assert_eq!(gx, ndarray::array![[[0.0, 20.0, 40.0]]]);
    let ggo = poolgrad::max_pool1d_double_backward(&g, &idx).unwrap();
    assert_eq!(ggo, ndarray::array![[[20.0, 20.0, 40.0]]]);
    for threads in [2, 3] {
        let cpu = common::cpu_with_threads(threads);
        assert_eq!(on(cpu).max_unpool1d(&values, &idx, 6).unwrap(), y);
        assert_eq!(on(cpu).max_unpool1d_backward(&g, &idx).unwrap(), gx);
        assert_eq!(on(cpu).max_pool1d_double_backward(&g, &idx).unwrap(), ggo);
    }
    let first = |a: &Array3<f32>| a.index_axis(ndarray::Axis(0), 0).to_owned();
    let lines: Array2<f32> = first(&g);
    let idx2: Array2<i64> = idx.index_axis(ndarray::Axis(0), 0).to_owned();
    assert_eq!(poolgrad::max_pool1d_double_backward(&lines, &idx2).unwrap(), first(&ggo));
    let mut into = Array2::<f32>::from_elem((1, 3), 7.0);
    poolgrad::max_unpool1d_backward_into(&lines, &idx2, &mut into).unwrap();
    assert_eq!(into, first(&gx));
    let mut out = Array2::<f32>::from_elem((1, 6), 7.0);
    poolgrad::max_unpool1d_into(&first(&values), &idx2, 6, &mut out).unwrap();
    assert_eq!(out, first(&y));
    let mut ggo2 = Array2::<f32>::from_elem((1, 3), 7.0);
    poolgrad::max_pool1d_double_backward_into(&lines, &idx2, &mut ggo2).unwrap();
    assert_eq!(ggo2, first(&ggo));
}

/// The 1-D `_into` forms write strided views (every other element of a wider line) as the
/// allocating forms compute, on 1 and 3 threads, and leave the elements between untouched.
#[test]
fn one_dimensional_into_strided_views() {
    let values = Array3::from_shape_fn((2, 3, 5), |(n, c, l)| (n * 15 + c * 5 + l) as f32 - 7.0);
    let idx = Array3::from_shape_fn((2, 3, 5), |(n, c, l)| ((n + c * 2 + l * 3) % 4) as i32);
    let g = Array3::from_shape_fn((2, 3, 9), |(n, c, l)| (n * 27 + c * 9 + l) as f32 * 0.5);
    let unpooled = poolgrad::max_unpool1d(&values, &idx, 9).unwrap();
    let gathered = poolgrad::max_unpool1d_backward(&g, &idx).unwrap();
    let doubled = poolgrad::max_pool1d_double_backward(&g, &idx).unwrap();
    let sequential = Cpu::sequential();
    for cpu in [&sequential, common::cpu_with_threads(3)] {
        let dev = on(cpu);
        let mut wide = Array3::<f32>::from_elem((2, 3, 18), -99.0);
        dev.max_unpool1d_into(&values, &idx, 9, &mut wide.slice_mut(ndarray::s![.., .., ..;2])).unwrap();
        assert_eq!(wide.slice(ndarray::s![.., .., ..;2]), unpooled);
        assert!(wide.slice(ndarray::s![.., .., 1..;2]).iter().all(|&v| v == -99.0));
        for (want, backward) in [(&gathered, true), (&doubled, false)] {
            let mut wide = Array3::<f32>::from_elem((2, 3, 10), -99.0);
            let mut view = wide.slice_mut(ndarray::s![.., .., ..;2]);
            if backward {
                dev.max_unpool1d_backward_into(&g, &idx, &mut view).unwrap();
            } else {
                dev.max_pool1d_double_backward_into(&g, &idx, &mut view).unwrap();
            }
            assert_eq!(wide.slice(ndarray::s![.., .., ..;2]), *want);
            assert!(wide.slice(ndarray::s![.., .., 1..;2]).iter().all(|&v| v == -99.0));
        }
    }
}

/// The 1-D operations' errors are in 1-D terms: their own names, ranks 2 and 3, and the first
/// bad index's position without the row the 2-D operations add.
#[test]
fn one_dimensional_errors() {
    let x = Array3::<f32>::ones((1, 2, 3));
    let mut idx = Array3::<i64>::zeros((1, 2, 3));
    idx[[0, 1, 1]] = 4;
    idx[[0, 1, 2]] = -1;
    let mut y = Array3::<f32>::from_elem((1, 2, 4), 9.0);
    match poolgrad::max_unpool1d_into(&x, &idx, 4, &mut y).unwrap_err() {
        Error::IndexOutOfRange { op, arg, position, value, plane } => {
            assert_eq!((op, arg, position, value, plane), ("max_unpool1d", "indices", vec![0, 1, 1], 4, 4));
        }
        e => panic!("{e}"),
    }
    assert!(y.iter().all(|&v| v == 0.0), "{y}");
    let e = poolgrad::max_unpool1d(&x, &idx, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { op: "max_unpool1d", arg: "output_size", .. }), "{e}");
    let e = poolgrad::max_unpool1d(&x, &Array3::<i64>::zeros((1, 2, 2)), 4).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "max_unpool1d", arg: "indices", ref expected, .. } if expected == &[1, 2, 3]),
        "{e}"
    );
    let mut short = Array3::<f32>::zeros((1, 2, 3));
    let e = poolgrad::max_unpool1d_into(&x, &Array3::<i64>::zeros((1, 2, 3)), 4, &mut short).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "max_unpool1d", arg: "output", ref expected, .. } if expected == &[1, 2, 4]),
        "{e}"
    );
    let e = poolgrad::max_unpool1d_backward(&Array3::<f32>::ones((1, 3, 4)), &idx).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "max_unpool1d_backward", arg: "grad_output", .. }), "{e}");
    let e = poolgrad::max_unpool1d_backward(&Array3::<f32>::ones((1, 2, 4)), &idx).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "max_unpool1d_backward", value: 4, ref position, .. } if position == &[0, 1, 1]),
        "{e}"
    );
    let e = poolgrad::max_pool1d_double_backward(&Array3::<f32>::ones((1, 2, 4)), &idx).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "max_pool1d_double_backward", value: 4, ref position, .. } if position == &[0, 1, 1]),
        "{e}"
    );
    let mut ggo = Array3::<f32>::zeros((1, 2, 4));
    let e = poolgrad::max_pool1d_double_backward_into(
        &Array3::<f32>::ones((1, 2, 4)),
        &Array3::<i64>::zeros((1, 2, 3)),
        &mut ggo,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "max_pool1d_double_backward", arg: "grad_grad_output", .. }),
        "{e}"
    );
    let e = poolgrad::max_pool1d_double_backward(
        &ArrayD::<f32>::zeros(IxDyn(&[2, 2, 2, 2])),
        &ArrayD::<i64>::zeros(IxDyn(&[2, 2, 2, 2])),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Rank { op: "max_pool1d_double_backward", got: 4, .. }), "{e}");
    // Rank 0: checked before the line is viewed as a plane.
    let (zero_x, zero_i) = (ArrayD::<f32>::zeros(IxDyn(&[])), ArrayD::<i64>::zeros(IxDyn(&[])));
    let e = poolgrad::max_unpool1d(&zero_x, &zero_i, 3).unwrap_err();
    assert!(matches!(e, Error::Rank { op: "max_unpool1d", got: 0, .. }), "{e}");
    let e = poolgrad::max_unpool1d_backward(&x.clone().into_dyn(), &zero_i).unwrap_err();
    assert!(matches!(e, Error::Rank { op: "max_unpool1d_backward", got: 0, .. }), "{e}");
    let e = poolgrad::max_pool1d_double_backward(&zero_x, &idx.clone().into_dyn()).unwrap_err();
    assert!(matches!(e, Error::Rank { op: "max_pool1d_double_backward", got: 0, .. }), "{e}");
    let e = poolgrad::max_unpool1d(&Array3::<f32>::ones((1, 0, 3)), &Array3::<i64>::zeros((1, 0, 3)), 4)
        .unwrap_err();
    assert!(matches!(e, Error::EmptyDimension { op: "max_unpool1d", .. }), "{e}");
    // `i32` addresses 2^31 positions, not one more.
    let e = poolgrad::max_unpool1d(&x, &Array3::<i32>::zeros((1, 2, 3)), (1 << 31) + 1).unwrap_err();
    assert!(matches!(e, Error::IndexTypeTooNarrow { op: "max_unpool1d", .. }), "{e}");
}

/// PyTorch 2.x CPU's results: `python benches/torch-anchor/line_unpool_cases.py DIR`, then
/// `POOLGRAD_TORCH_CASES=DIR cargo test --release --test unpool against_pytorch -- --ignored`.
/// The unpooling and the double backward equal PyTorch's bit for bit (NaNs as NaNs). The
/// unpooling's backward equals PyTorch's gather wherever an index is not repeated in its plane;
/// where it is, the last repeat gets PyTorch's value and the earlier ones 0 (poolgrad's rule,
/// the transpose of its forward; PyTorch gives every repeat the gradient, pytorch#80204).
#[test]
#[ignore = "needs POOLGRAD_TORCH_CASES from benches/torch-anchor/line_unpool_cases.py"]
fn against_pytorch() {
    let dir = std::env::var("POOLGRAD_TORCH_CASES").expect("POOLGRAD_TORCH_CASES: a directory of cases");
    let manifest = std::fs::read_to_string(format!("{dir}/unpool.txt")).unwrap();
    let (mut checked, mut repeats) = (0, 0);
    for line in manifest.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n: Vec<usize> = f[2..].iter().map(|v| v.parse().unwrap()).collect();
        let rank = n[0];
        let (shape, size) = (n[1..=rank].to_vec(), n[rank + 1..].to_vec());
        let file = |ext: &str| std::fs::read(format!("{dir}/{}.{ext}", f[0])).unwrap();
        repeats += match f[1] {
            "f32" => torch_unpool::<f32, 4>(&file, &shape, &size, f32::from_le_bytes),
            "f64" => torch_unpool::<f64, 8>(&file, &shape, &size, f64::from_le_bytes),
            "f16" => torch_unpool::<half::f16, 2>(&file, &shape, &size, half::f16::from_le_bytes),
            _ => torch_unpool::<half::bf16, 2>(&file, &shape, &size, half::bf16::from_le_bytes),
        }
        .unwrap_or_else(|e| panic!("{line}: {e}"));
        checked += 1;
    }
    assert!(checked >= 40 && repeats > 0, "{checked} cases, {repeats} repeated indices");
    eprintln!("{checked} unpooling cases equal to PyTorch's ({repeats} repeated indices by poolgrad's rule)");
}

/// One case; the number of repeated indices (earlier repeats) it had.
fn torch_unpool<T: PoolFloat, const B: usize>(
    file: &dyn Fn(&str) -> Vec<u8>,
    shape: &[usize],
    size: &[usize],
    from_le: fn([u8; B]) -> T,
) -> Result<usize, String> {
    let elems = |bytes: Vec<u8>| common::le_elements(&bytes, from_le);
    let same = common::same_bits_nan_as_nan::<T>;
    let spatial = shape.len() - 2;
    let idx = common::le_indices(&file("idx"));
    let pooled_len = idx.len() / (shape[0] * shape[1]);
    // The pooled arrays as `[N, C, 1.., P]`: any shape of the pooled side's element count serves.
    let mut pooled_dims = shape[..2].to_vec();
    pooled_dims.extend(std::iter::repeat_n(1, spatial - 1));
    pooled_dims.push(pooled_len);
    let array = |v: Vec<T>, dims: &[usize]| ArrayD::from_shape_vec(IxDyn(dims), v).unwrap();
    let y = array(elems(file("y")), &pooled_dims);
    let ix = ArrayD::from_shape_vec(IxDyn(&pooled_dims), idx.clone()).unwrap();
    let mut full_dims = shape[..2].to_vec();
    full_dims.extend_from_slice(size);
    let go = array(elems(file("go")), &full_dims);
    let ggx = array(elems(file("ggx")), &full_dims);
    let (out, gx, ggo) = if spatial == 1 {
        let unpooled = poolgrad::max_unpool1d(&y, &ix, size[0]);
        (unpooled, poolgrad::max_unpool1d_backward(&go, &ix), poolgrad::max_pool1d_double_backward(&ggx, &ix))
    } else if spatial == 2 {
        let unpooled = poolgrad::max_unpool2d(&y, &ix, [size[0], size[1]]);
        (unpooled, poolgrad::max_unpool2d_backward(&go, &ix), poolgrad::max_pool2d_double_backward(&ggx, &ix))
    } else {
        let unpooled = poolgrad::max_unpool3d(&y, &ix, [size[0], size[1], size[2]]);
        (unpooled, poolgrad::max_unpool3d_backward(&go, &ix), poolgrad::max_pool3d_double_backward(&ggx, &ix))
    };
    let (out, gx, ggo) =
        (out.map_err(|e| e.to_string())?, gx.map_err(|e| e.to_string())?, ggo.map_err(|e| e.to_string())?);
    if !same(out.as_slice().unwrap(), &elems(file("out"))) {
        return Err("unpooled values differ".into());
    }
    if !same(ggo.as_slice().unwrap(), &elems(file("ggo"))) {
        return Err("double backward differs".into());
    }
    // PyTorch's gather, with the earlier repeats of each index in its plane zeroed.
    let mut want = elems(file("gx_torch"));
    let mut repeats = 0;
    for (plane, idx) in idx.chunks(pooled_len).enumerate() {
        let mut seen = std::collections::HashSet::new();
        for (i, &j) in idx.iter().enumerate().rev() {
            if !seen.insert(j) {
                want[plane * pooled_len + i] = T::zero();
                repeats += 1;
            }
        }
    }
    if !same(gx.as_slice().unwrap(), &want) {
        return Err("unpooling backward differs".into());
    }
    Ok(repeats)
}
