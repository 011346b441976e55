//! Every rejected input of the adaptive operations: the variant, its fields and the message.

mod common;

use common::{assert_message, plan_adaptive_i32_indices, with_global_pool_plan};

use ndarray::{Array, Array1, Array3, Array4, ArrayView, IxDyn, ShapeBuilder};
use poolgrad::device::cpu::Cpu;
use poolgrad::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
use poolgrad::{DType, Error, Plan, TensorMut, TensorRef, Workspace};
use poolgrad::{adaptive_max_pool2d, adaptive_max_pool2d_backward};

const FWD: &str = "adaptive_max_pool2d";
const BWD: &str = "adaptive_max_pool2d_backward";

/// A rank-2 `Array2` does not compile (the `PoolDim` doctest); an `IxDyn` array of rank 2 is
/// refused at run time.
#[test]
fn rank_two_input_is_rejected() {
    let x = ndarray::ArrayD::<f32>::zeros(IxDyn(&[4, 4]));
    let e = adaptive_max_pool2d(&x, [2, 2]).unwrap_err();
    assert!(matches!(e, Error::Rank { op: FWD, arg: "input", got: 2, .. }), "{e:?}");
    assert_message(&e, &["`input`", "3 (C, H, W) or 4 (N, C, H, W)", "got 2", "[4, 4]"]);
}

#[test]
fn rank_five_grad_output_is_rejected() {
    let g = Array::<f32, _>::zeros(IxDyn(&[1, 1, 1, 2, 2]));
    let x = Array::<f32, _>::zeros(IxDyn(&[1, 1, 4, 4]));
    let i = Array::<i64, _>::zeros(IxDyn(&[1, 1, 2, 2]));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert!(matches!(e, Error::Rank { op: BWD, arg: "grad_output", got: 5, .. }), "{e:?}");
    assert_message(&e, &["`grad_output`", "got 5"]);
}

#[test]
fn grad_output_with_other_channels_is_rejected() {
    let x = Array4::<f32>::zeros((1, 3, 4, 4));
    let g = Array4::<f32>::zeros((1, 2, 2, 2));
    let i = Array4::<i64>::zeros((1, 2, 2, 2));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: BWD,
            arg: "grad_output",
            expected: vec![1, 3, 2, 2],
            got: vec![1, 2, 2, 2]
        }
    );
    assert_message(&e, &["`grad_output`", "[1, 2, 2, 2]", "expected [1, 3, 2, 2]"]);
}

#[test]
fn indices_of_another_shape_are_rejected() {
    let x = Array4::<f32>::zeros((2, 3, 4, 4));
    let g = Array4::<f32>::zeros((2, 3, 2, 2));
    let i = Array4::<i32>::zeros((2, 3, 2, 3));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: BWD, arg: "indices", expected: vec![2, 3, 2, 2], got: vec![2, 3, 2, 3] }
    );
    assert_message(&e, &["`indices`", "[2, 3, 2, 3]", "expected [2, 3, 2, 2]"]);
}

#[test]
fn mixed_ranks_are_rejected() {
    let x = Array::<f32, _>::zeros(IxDyn(&[3, 4, 4]));
    let g = Array::<f32, _>::zeros(IxDyn(&[1, 3, 2, 2]));
    let i = Array::<i64, _>::zeros(IxDyn(&[1, 3, 2, 2]));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: BWD, arg: "grad_output", expected: vec![3, 2, 2], got: vec![1, 3, 2, 2] }
    );
}

#[test]
fn zero_in_output_size_is_rejected() {
    let x = Array3::<f32>::zeros((2, 4, 4));
    for size in [[0, 3], [3, 0]] {
        let e = adaptive_max_pool2d(&x, size).unwrap_err();
        assert!(matches!(e, Error::InvalidParameter { op: FWD, arg: "output_size", .. }), "{e:?}");
        assert_message(&e, &["`output_size`", &format!("{size:?}"), "Ho >= 1 and Wo >= 1"]);
    }
}

#[test]
fn empty_grad_output_plane_is_rejected() {
    let x = Array3::<f32>::zeros((2, 4, 4));
    let g = Array3::<f32>::zeros((2, 0, 3));
    let i = Array3::<i64>::zeros((2, 0, 3));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(e, Error::EmptyDimension { op: BWD, arg: "grad_output", axis: "Ho", shape: vec![2, 0, 3] });
    assert_message(&e, &["`grad_output`", "[2, 0, 3]", "Ho"]);
}

#[test]
fn empty_c_h_or_w_is_rejected() {
    for (shape, axis) in [([1, 0, 4, 4], "C"), ([1, 2, 0, 4], "H"), ([1, 2, 4, 0], "W")] {
        let x = Array4::<f32>::zeros(shape);
        let e = adaptive_max_pool2d(&x, [2, 2]).unwrap_err();
        assert_eq!(e, Error::EmptyDimension { op: FWD, arg: "input", axis, shape: shape.to_vec() });
        assert_message(&e, &["`input`", &format!("{shape:?}"), &format!("its {axis} dimension")]);

        let [n, c, _, _] = shape;
        let g = Array4::<f32>::zeros((n, c, 2, 2));
        let i = Array4::<i64>::zeros((n, c, 2, 2));
        let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
        assert_eq!(e, Error::EmptyDimension { op: BWD, arg: "self_", axis, shape: shape.to_vec() });
    }
}

#[test]
fn empty_batch_is_fine() {
    let x = Array4::<f32>::zeros((0, 2, 4, 4));
    let p = adaptive_max_pool2d(&x, [2, 2]).unwrap();
    assert_eq!(p.output.shape(), &[0, 2, 2, 2]);
    let gi = adaptive_max_pool2d_backward(&p.output, &x, &p.indices).unwrap();
    assert_eq!(gi.shape(), &[0, 2, 4, 4]);
}

#[test]
fn index_outside_the_plane_is_rejected_with_its_position() {
    // H * W = 6: valid indices 0..6.
    let x = Array4::<f32>::zeros((2, 2, 2, 3));
    let g = Array4::<f32>::ones((2, 2, 1, 2));
    for (bad, value) in [(-1i64, -1i64), (6, 6), (i64::MAX, i64::MAX), (i64::MIN, i64::MIN)] {
        let mut i = Array4::<i64>::zeros((2, 2, 1, 2));
        i[[1, 0, 0, 1]] = bad;
        let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange { op: BWD, arg: "indices", position: vec![1, 0, 0, 1], value, plane: 6 }
        );
        assert_message(&e, &["`indices`", &value.to_string(), "[1, 0, 0, 1]", "[0, 6)"]);
    }
    // i32, 3-D: the position is reported in the caller's rank; the first bad index wins.
    let x = Array3::<f32>::zeros((2, 2, 2));
    let g = Array3::<f32>::ones((2, 1, 1));
    let i = ndarray::array![[[0i32]], [[-7]]];
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange { op: BWD, arg: "indices", position: vec![1, 0, 0], value: -7, plane: 4 }
    );
}

#[test]
fn index_in_a_strided_view_is_located() {
    let x = Array4::<f32>::zeros((1, 1, 2, 2));
    let g = Array4::<f32>::ones((1, 1, 2, 1));
    let mut storage = Array4::<i64>::zeros((1, 1, 2, 2));
    storage[[0, 0, 1, 1]] = 4; // visible through the view at [0, 0, 1, 0]
    storage[[0, 0, 0, 0]] = 99; // not visible
    let view = storage.slice(ndarray::s![.., .., .., 1..]);
    let e = adaptive_max_pool2d_backward(&g, &x, &view).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange { op: BWD, arg: "indices", position: vec![0, 0, 1, 0], value: 4, plane: 4 }
    );
}

#[test]
fn aliasing_output_strides_are_rejected() {
    let mut data = vec![0.0f32; 16];
    // Rows of 4 with a row stride of 2: elements (0, 2) and (1, 0) share memory.
    let e = TensorMut::from_slice_with_strides(&mut data, &[1, 1, 2, 4], &[16, 16, 2, 1]).unwrap_err();
    assert!(matches!(e, Error::Layout { arg: "strides", .. }), "{e:?}");
    assert_message(
        &e,
        &[
            "`strides` [16, 16, 2, 1] with shape [1, 1, 2, 4]",
            "positions [0, 0, 1, 0] and [0, 0, 0, 2] both address element 2",
        ],
    );
    // The same strides are fine for an input (read only).
    let data = vec![0.0f32; 16];
    assert!(TensorRef::from_slice_with_strides(&data, &[1, 1, 2, 4], &[16, 16, 2, 1]).is_ok());
}

#[test]
fn views_past_the_data_are_rejected() {
    let data = vec![0.0f32; 11];
    let e = TensorRef::from_slice(&data, &[1, 3, 4]).unwrap_err();
    assert_eq!(
        e,
        Error::Layout {
            op: "TensorRef::from_slice",
            arg: "data",
            reason: "has 11 elements, but shape [1, 3, 4] needs 12".into()
        }
    );
    let e = TensorRef::from_slice_with_strides(&data, &[1, 3, 4], &[12, 4, 1]).unwrap_err();
    assert!(matches!(e, Error::Layout { arg: "strides", .. }), "{e:?}");
    assert_message(
        &e,
        &["[12, 4, 1] with shape [1, 3, 4]", "at offset 11", "(11 elements, so offsets below 11)"],
    );
    let e = TensorRef::from_slice_with_strides(&data, &[1, 3, 4], &[12, 4]).unwrap_err();
    assert_message(&e, &["`strides`", "has 2 entries", "[1, 3, 4]"]);
}

// The sizes of these two (2^40 and more) exist only on 64-bit targets.
#[cfg(target_pointer_width = "64")]
#[test]
fn overflowing_sizes_are_errors() {
    let one = [0.0f32];
    // A broadcast view of 2^31 x 2^31 elements: its gradient needs 2^64 bytes.
    let x =
        ArrayView::from_shape((1, 1, 1usize << 31, 1usize << 31).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let g = Array4::<f32>::ones((1, 1, 1, 1));
    let i = Array4::<i64>::zeros((1, 1, 1, 1));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert!(matches!(e, Error::Overflow { op: BWD, arg: "grad_input", .. }), "{e:?}");
    assert_message(&e, &["`grad_input`", "overflows"]);

    // A shape whose element count overflows usize.
    let e = TensorRef::<f32>::from_slice(&one, &[1 << 40, 1 << 40, 1]).unwrap_err();
    assert!(matches!(e, Error::Overflow { arg: "shape", .. }), "{e:?}");
}

#[cfg(target_pointer_width = "64")]
#[test]
fn impossible_allocation_is_an_error_not_an_abort() {
    let one = [0.0f32];
    // 2^60 f32 = 2^62 bytes: fits in isize, but no machine can allocate it.
    let x =
        ArrayView::from_shape((1, 1, 1usize << 30, 1usize << 30).strides((0, 0, 0, 0)), &one[..]).unwrap();
    let g = Array4::<f32>::ones((1, 1, 1, 1));
    let i = Array4::<i64>::zeros((1, 1, 1, 1));
    let e = adaptive_max_pool2d_backward(&g, &x, &i).unwrap_err();
    assert_eq!(e, Error::Allocation { op: BWD, arg: "grad_input", bytes: 1 << 62 });
}

/// Checked in phase 1 first: with the check missing, `Plan::new` fails this test at once, where
/// the free function would go on to pool 2^31 elements.
#[test]
fn i32_indices_cannot_address_planes_over_2_pow_31() {
    let one = [0.0f32];
    let x = ArrayView::from_shape((1, 1, 1usize << 16, (1usize << 15) + 1).strides((0, 0, 0, 0)), &one[..])
        .unwrap();
    let plane = (1usize << 31) + (1 << 16);
    let expected =
        Error::IndexTypeTooNarrow { op: FWD, arg: "indices", dtype: DType::I32, max: 1 << 31, plane };
    assert_eq!(plan_adaptive_i32_indices(x), Err(expected.clone()));
    let e = poolgrad::adaptive_max_pool2d_i32(&x, [1, 1]).unwrap_err();
    assert_eq!(e, expected);
    assert_message(&e, &["`indices`", "i32", &plane.to_string()]);
}

#[test]
fn plan_rejects_outputs_of_the_wrong_shape() {
    let x = [0.0f32; 16];
    let (mut out, mut idx) = ([0.0f32; 4], [0i64; 6]);
    let op = AdaptiveMaxPool2d {
        input: TensorRef::from_slice(&x, &[1, 4, 4]).unwrap(),
        output_size: [2, 2],
        output: TensorMut::from_slice(&mut out, &[1, 2, 2]).unwrap(),
        indices: TensorMut::from_slice(&mut idx, &[1, 2, 3]).unwrap(),
    };
    let e = Plan::new(&Cpu::sequential(), op).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: FWD, arg: "indices", expected: vec![1, 2, 2], got: vec![1, 2, 3] }
    );

    let (g, i) = ([0.0f32; 4], [0i64; 4]);
    let mut gi = [0.0f32; 15];
    let op = AdaptiveMaxPool2dBackward {
        grad_output: TensorRef::from_slice(&g, &[1, 2, 2]).unwrap(),
        self_: TensorRef::from_slice(&x, &[1, 4, 4]).unwrap(),
        indices: TensorRef::from_slice(&i, &[1, 2, 2]).unwrap(),
        grad_input: TensorMut::from_slice(&mut gi, &[1, 3, 5]).unwrap(),
    };
    let e = Plan::new(&Cpu::sequential(), op).unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch { op: BWD, arg: "grad_input", expected: vec![1, 4, 4], got: vec![1, 3, 5] }
    );
}

#[test]
fn a_small_workspace_is_rejected_before_running() {
    // A strided input must be staged: the plan needs workspace.
    let x = Array3::<f32>::from_shape_fn((1, 4, 8), |(_, h, w)| (h * 8 + w) as f32);
    let view = x.slice(ndarray::s![.., .., ..;2]);
    with_global_pool_plan::<i64, _, _>(view, |plan, cpu| {
        let plan = plan.unwrap();
        let needed = plan.workspace_size();
        assert!(needed >= 16 * 4, "staging 16 f32 needs at least 64 bytes, plan says {needed}");
        // The CPU hands out whole 64-byte cache lines: one line fewer is too small.
        let mut small = Workspace::new(cpu, needed - 64).unwrap();
        assert_eq!(small.len(), needed - 64);
        let e = plan.bind(&mut small).unwrap_err();
        assert_eq!(e, Error::WorkspaceTooSmall { op: FWD, expected: needed, got: needed - 64 });
        assert_message(&e, &[&needed.to_string(), &(needed - 64).to_string()]);
    });
}

/// Contiguous `f32` is read in place: no staging copy, and windows 4 columns wide (wide
/// windows, a plane by itself) need no kernel scratch either. (Windows narrower than that are
/// pooled with the planes interleaved, in scratch.)
#[test]
fn contiguous_f32_needs_no_workspace() {
    let x = Array1::<f32>::zeros(64).into_shape_with_order((1, 8, 8)).unwrap();
    let (mut out, mut idx) = (Array3::<f32>::zeros((1, 2, 2)), Array3::<i32>::zeros((1, 2, 2)));
    let cpu = Cpu::sequential();
    let plan = Plan::new(
        &cpu,
        AdaptiveMaxPool2d {
            input: TensorRef::from_array(&x).unwrap(),
            output_size: [2, 2],
            output: TensorMut::from_array(&mut out).unwrap(),
            indices: TensorMut::from_array(&mut idx).unwrap(),
        },
    )
    .unwrap();
    assert_eq!(plan.workspace_size(), 0);
}

/// Index values are data: `Plan::new` accepts them, `run` rejects the first bad one (row-major,
/// whatever the thread count) and leaves the gradient zeroed, never partly written.
fn bad_index_in_run<T: poolgrad::PoolFloat>(cpu: &Cpu) {
    let (n, c, h, w) = (3, 5, 4, 4);
    let x = Array4::<T>::zeros((n, c, h, w));
    let g = Array4::<T>::from_elem((n, c, 2, 2), T::one());
    let mut i = Array4::<i64>::from_shape_fn((n, c, 2, 2), |(_, _, a, b)| (a * 8 + b * 2) as i64);
    i[[2, 4, 1, 1]] = -3; // last plane
    i[[1, 3, 0, 1]] = 16; // an earlier plane: this one is reported
    let mut gi = Array4::<T>::from_elem((n, c, h, w), T::from_acc(num_traits::cast(7.0).unwrap()));
    let plan = Plan::new(
        cpu,
        AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_array(&g).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            indices: TensorRef::from_array(&i).unwrap(),
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        },
    )
    .expect("phase 1 reads no data");
    let e = plan.run().unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange { op: BWD, arg: "indices", position: vec![1, 3, 0, 1], value: 16, plane: 16 }
    );
    assert!(gi.iter().all(|v| *v == T::zero()), "gradient not zeroed after a bad index");
}

#[test]
fn bad_index_is_reported_by_run_and_zeroes_the_gradient() {
    // Grain 0: the small case is split among the seven threads.
    let seven =
        Cpu::new(poolgrad::device::cpu::Parallelism::Threads(7.try_into().unwrap())).unwrap().with_grain(0);
    for cpu in [Cpu::sequential(), seven] {
        bad_index_in_run::<f32>(&cpu);
        bad_index_in_run::<f64>(&cpu);
        bad_index_in_run::<half::bf16>(&cpu);
        bad_index_in_run::<half::f16>(&cpu);
    }
}
