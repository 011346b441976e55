//! The burn bridge (`--features burn`, burn 0.22 on its ndarray backend): gradients through
//! burn's autodiff equal PyTorch's on hand-worked cases (ties, overlapping windows, padding, ceil
//! mode, NaN) and poolgrad's own backward bit for bit, under both checkpointing strategies; the
//! max-pool forward and backward match burn's own operator wherever burn follows PyTorch (finite
//! inputs), and the NaN case where it does not is shown; bad input gives typed errors. The
//! hand-worked cases, shared with the candle bridge's tests, are in `common/bridge_cases.rs`.

// burn 0.22 deprecates its ndarray backend (for burn-flex); the bridge is for it, on purpose.
#![allow(deprecated)]

use burn_tensor::ops::MaxPoolOptions;
use burn_tensor::{Device, Int, Tensor, TensorData};
use ndarray::{ArrayD, IxDyn};
use poolgrad::MaxPool2dParams;

#[path = "common/bridge_cases.rs"]
mod bridge_cases;
use bridge_cases::{
    Op, gradient_values, hand_worked_cases, in_f32, in_f64, poolgrad_gradient, same_values, scatter_loop,
    unpool_case, values,
};

fn plain() -> Device {
    Device::ndarray()
}

fn autodiff() -> Device {
    Device::ndarray().autodiff()
}

fn balanced() -> Device {
    Device::ndarray().autodiff().gradient_checkpointing()
}

fn tensor_f32(values: &[f64], shape: [usize; 4], device: &Device) -> Tensor<4> {
    let v: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    let t = Tensor::from_data(TensorData::new(v, shape), device);
    assert_eq!(t.dtype(), burn_tensor::DType::F32);
    t
}

fn tensor_f64(values: &[f64], shape: [usize; 4], device: &Device) -> Tensor<4> {
    // (burn 0.22 converts data to the device's float dtype, F32 by default, unless asked.)
    let options = burn_tensor::TensorCreationOptions::new(device.clone()).with_dtype(burn_tensor::DType::F64);
    let t = Tensor::from_data(TensorData::new(values.to_vec(), shape), options);
    assert_eq!(t.dtype(), burn_tensor::DType::F64);
    t
}

fn values_f64(t: Tensor<4>) -> Vec<f64> {
    let data = t.into_data();
    match data.try_to_vec::<f64>() {
        Ok(v) => v,
        Err(_) => data.try_to_vec::<f32>().expect("f32 or f64").into_iter().map(f64::from).collect(),
    }
}

fn indices_i64(t: Tensor<4, Int>) -> Vec<i64> {
    t.into_data().try_to_vec::<i64>().expect("i64 indices")
}

/// `Σ y·w`: its gradient with respect to `y` is `w`.
fn weighted_sum(y: Tensor<4>, w: &[f64]) -> Tensor<1> {
    let shape: [usize; 4] = y.dims();
    let w = if y.dtype() == burn_tensor::DType::F64 {
        tensor_f64(w, shape, &y.device())
    } else {
        tensor_f32(w, shape, &y.device())
    };
    (y * w).sum()
}

fn apply(op: Op, x: Tensor<4>) -> Tensor<4> {
    match op {
        Op::MaxPool(p) => poolgrad::burn::max_pool2d(x, &p).expect("valid"),
        Op::Adaptive(size) => poolgrad::burn::adaptive_max_pool2d(x, size).expect("valid"),
        Op::Mask(_) => unreachable!("burn has no mask form: the cases are filtered"),
    }
}

#[test]
fn gradients_through_burn_autodiff_are_pytorchs_on_hand_worked_cases() {
    for case in hand_worked_cases().into_iter().filter(|c| !matches!(c.op, Op::Mask(_))) {
        let shape: [usize; 4] = case.shape.as_slice().try_into().expect("4-D cases");
        for (device_name, device) in [("autodiff", autodiff()), ("balanced checkpointing", balanced())] {
            for make in [tensor_f32 as fn(&[f64], [usize; 4], &Device) -> Tensor<4>, tensor_f64] {
                let x = make(&case.x, shape, &device).require_grad();
                let y = apply(case.op, x.clone());
                let y_values = values_f64(y.clone());
                assert!(same_values(&y_values, &case.y), "{} {device_name}: output {y_values:?}", case.name);
                let grads = weighted_sum(y, &case.w).backward();
                let gx = values_f64(x.grad(&grads).expect("x requires grad"));
                assert_eq!(gx, case.gx, "{} {device_name}: input gradient", case.name);
            }
        }
        // Without autodiff the forward is the same.
        let y = apply(case.op, tensor_f64(&case.x, shape, &plain()));
        assert!(same_values(&values_f64(y), &case.y), "{} plain", case.name);
    }
}

fn to_ndarray(values: &[f64], shape: [usize; 4]) -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(&shape), values.to_vec()).expect("shape")
}

/// Through burn's autodiff, on larger inputs with ties and overlapping windows, the gradient
/// equals poolgrad's own backward on the same data, bit for bit (f64 and f32).
#[test]
fn gradients_equal_poolgrads_backward_bit_for_bit() {
    let shape = [2, 3, 9, 11];
    let len: usize = shape.iter().product();
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]).with_ceil_mode(true);
    for (op, seed) in [
        (Op::MaxPool(stem), 1),
        (Op::MaxPool(MaxPool2dParams::new([2, 3]).with_dilation([2, 1])), 2),
        (Op::Adaptive([4, 5]), 3),
    ] {
        for device in [autodiff(), balanced()] {
            let xv = values(len, seed);
            let x = tensor_f64(&xv, shape, &device).require_grad();
            let y = apply(op, x.clone());
            let w = gradient_values(y.shape().num_elements(), seed + 10);
            let out_shape: [usize; 4] = y.dims();
            let gx = values_f64(x.grad(&weighted_sum(y, &w).backward()).expect("x"));

            let x_nd = to_ndarray(&xv, shape);
            let w_nd = to_ndarray(&w, out_shape);
            let direct = poolgrad_gradient(op, &x_nd, &w_nd);
            let direct: Vec<f64> = direct.iter().copied().collect();
            assert!(gx.iter().zip(&direct).all(|(a, b)| a.to_bits() == b.to_bits()));
            assert!(direct.iter().filter(|v| **v != 0.0).count() > 10, "non-trivial");

            // f32 too: the same values, rounded once from f32 sums.
            let x = tensor_f32(&xv, shape, &device).require_grad();
            let y = apply(op, x.clone());
            let gx = values_f64(x.grad(&weighted_sum(y, &w).backward()).expect("x"));
            let x32 = x_nd.mapv(|v| v as f32);
            let w32 = w_nd.mapv(|v| v as f32);
            let direct32 = poolgrad_gradient(op, &x32, &w32);
            assert!(gx.iter().zip(direct32.iter()).all(|(a, b)| (*a as f32).to_bits() == b.to_bits()));
        }
    }
}

fn burn_options(p: &MaxPool2dParams) -> MaxPoolOptions<2> {
    MaxPoolOptions::new(p.kernel())
        .with_stride(p.stride())
        .with_padding(p.padding())
        .with_dilation(p.dilation())
        .with_ceil_mode(p.ceil_mode())
}

/// Where burn has the operator, poolgrad gives burn's results on finite inputs: the same
/// outputs and indices from `max_pool2d_with_indices`, the same gradient from its backward and
/// from autodiff through burn's `max_pool2d`. Inputs have many ties; parameters cover padding,
/// stride, dilation and ceil mode.
#[test]
fn max_pool_matches_burns_own_operator_on_finite_inputs() {
    let params = [
        MaxPool2dParams::new([2, 2]),
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]),
        MaxPool2dParams::new([3, 2]).with_stride([1, 2]).with_padding([1, 0]).with_ceil_mode(true),
        MaxPool2dParams::new([2, 3]).with_stride([2, 1]).with_dilation([2, 2]),
        MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]).with_ceil_mode(true),
    ];
    for (k, p) in params.iter().enumerate() {
        for shape in [[2, 3, 9, 11], [1, 2, 8, 8], [1, 1, 5, 7]] {
            let len: usize = shape.iter().product();
            let xv = values(len, 100 + k as u64);
            let x = tensor_f64(&xv, shape, &plain());

            let (ours, our_indices) = poolgrad::burn::max_pool2d_with_indices(x.clone(), p).unwrap();
            let (burns, burn_indices) =
                burn_tensor::module::max_pool2d_with_indices(x.clone(), burn_options(p));
            assert_eq!(ours.dims(), burns.dims(), "{p:?} {shape:?}");
            assert_eq!(values_f64(ours.clone()), values_f64(burns), "{p:?} {shape:?}");
            assert_eq!(
                indices_i64(our_indices.clone()),
                indices_i64(burn_indices.clone()),
                "{p:?} {shape:?}"
            );

            let w = gradient_values(ours.shape().num_elements(), 7);
            let g = tensor_f64(&w, ours.dims(), &plain());
            let our_gx =
                poolgrad::burn::max_pool2d_with_indices_backward(g.clone(), x.clone(), our_indices, p)
                    .unwrap();
            let [kh, kw] = p.kernel();
            let burn_gx = burn_tensor::module::max_pool2d_with_indices_backward(
                x.clone(),
                [kh, kw],
                p.stride(),
                p.padding(),
                p.dilation(),
                p.ceil_mode(),
                g,
                burn_indices,
            );
            assert_eq!(values_f64(our_gx), values_f64(burn_gx), "{p:?} {shape:?}");

            // Autodiff through burn's own max_pool2d against ours.
            let xa = tensor_f64(&xv, shape, &autodiff()).require_grad();
            let burn_auto = xa
                .grad(
                    &weighted_sum(burn_tensor::module::max_pool2d(xa.clone(), burn_options(p)), &w)
                        .backward(),
                )
                .unwrap();
            let xb = tensor_f64(&xv, shape, &autodiff()).require_grad();
            let our_auto = xb
                .grad(&weighted_sum(poolgrad::burn::max_pool2d(xb.clone(), p).unwrap(), &w).backward())
                .unwrap();
            assert_eq!(values_f64(our_auto), values_f64(burn_auto), "{p:?} {shape:?}");
        }
    }
}

/// Where burn departs from PyTorch: its max pool never selects a NaN (`val > max` is false for
/// NaN). On the window 1, NaN, 3, NaN burn's maximum is 3 (flat 2); PyTorch's and poolgrad's is
/// the NaN at flat 3.
#[test]
fn burns_max_pool_skips_nan_where_pytorch_and_poolgrad_take_it() {
    let x = tensor_f64(&[1., f64::NAN, 3., f64::NAN], [1, 1, 2, 2], &plain());
    let p = MaxPool2dParams::new([2, 2]);
    let (burns, burn_indices) = burn_tensor::module::max_pool2d_with_indices(x.clone(), burn_options(&p));
    assert_eq!(values_f64(burns), [3.0]);
    assert_eq!(indices_i64(burn_indices), [2]);
    let (ours, our_indices) = poolgrad::burn::max_pool2d_with_indices(x, &p).unwrap();
    assert!(values_f64(ours)[0].is_nan());
    assert_eq!(indices_i64(our_indices), [3]);
}

/// burn's strided tensors (dimensions swapped, sliced) are read in place and give the result
/// of the same data laid out contiguously.
#[test]
fn swapped_and_sliced_tensors_give_the_results_of_their_contiguous_data() {
    let shape = [2, 3, 8, 10];
    let xv = values(shape.iter().product(), 9);
    let x = tensor_f64(&xv, shape, &plain());
    let x_nd = to_ndarray(&xv, shape);
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);

    let swapped = x.clone().swap_dims(2, 3);
    let mut swapped_nd = x_nd.clone();
    swapped_nd.swap_axes(2, 3);
    let sliced = x.slice([0..2, 1..3, 2..7, 1..9]);
    let sliced_nd = x_nd.slice(ndarray::s![0..2, 1..3, 2..7, 1..9]).to_owned().into_dyn();
    for (name, t, nd) in
        [("swapped", swapped, swapped_nd.as_standard_layout().to_owned()), ("sliced", sliced, sliced_nd)]
    {
        let (y, idx) = poolgrad::burn::max_pool2d_with_indices(t.clone(), &stem).unwrap();
        let want = poolgrad::max_pool2d_with_indices(&nd, &stem).unwrap();
        assert_eq!(values_f64(y), want.output.iter().copied().collect::<Vec<_>>(), "{name}");
        assert_eq!(indices_i64(idx), want.indices.iter().copied().collect::<Vec<_>>(), "{name}");
        let (y, idx) = poolgrad::burn::adaptive_max_pool2d_with_indices(t, [3, 4]).unwrap();
        let want = poolgrad::adaptive_max_pool2d(&nd, [3, 4]).unwrap();
        assert_eq!(values_f64(y), want.output.iter().copied().collect::<Vec<_>>(), "{name}");
        assert_eq!(indices_i64(idx), want.indices.iter().copied().collect::<Vec<_>>(), "{name}");
    }
}

/// The explicit backwards take I64 or I32 indices, on plain and autodiff tensors, and equal the
/// autodiff gradient.
#[test]
fn explicit_backwards_take_i64_or_i32_indices_and_equal_autodiff() {
    let shape = [1, 2, 7, 6];
    let xv = values(shape.iter().product(), 21);
    for device in [plain(), autodiff()] {
        let x = tensor_f64(&xv, shape, &device);
        let (y, idx) = poolgrad::burn::adaptive_max_pool2d_with_indices(x.clone(), [3, 4]).unwrap();
        let w = gradient_values(y.shape().num_elements(), 4);
        let g = tensor_f64(&w, y.dims(), &device);
        let with_i64 =
            poolgrad::burn::adaptive_max_pool2d_backward(g.clone(), x.clone(), idx.clone()).unwrap();
        let with_i32 =
            poolgrad::burn::adaptive_max_pool2d_backward(g, x, idx.cast(burn_tensor::DType::I32)).unwrap();
        let xa = tensor_f64(&xv, shape, &autodiff()).require_grad();
        let auto = xa
            .grad(
                &weighted_sum(poolgrad::burn::adaptive_max_pool2d(xa.clone(), [3, 4]).unwrap(), &w)
                    .backward(),
            )
            .unwrap();
        let auto = values_f64(auto);
        assert_eq!(values_f64(with_i64), auto);
        assert_eq!(values_f64(with_i32), auto);
    }
}

/// Bad input is a typed error naming the operation and argument; no panic.
#[test]
fn bad_input_gives_typed_errors() {
    let x = tensor_f32(&[0.0; 16], [1, 1, 4, 4], &plain());
    let e = poolgrad::burn::max_pool2d(x.clone(), &MaxPool2dParams::new([0, 2])).unwrap_err();
    assert!(matches!(e, poolgrad::burn::Error::Pool(poolgrad::Error::InvalidParameter { .. })), "{e}");
    let e = poolgrad::burn::adaptive_max_pool2d(x.clone(), [0, 2]).unwrap_err();
    assert!(matches!(e, poolgrad::burn::Error::Pool(_)), "{e}");

    let p = MaxPool2dParams::new([2, 2]);
    let (y, idx) = poolgrad::burn::max_pool2d_with_indices(x.clone(), &p).unwrap();
    let g64 = tensor_f64(&[1.0; 4], [1, 1, 2, 2], &plain());
    let e = poolgrad::burn::max_pool2d_with_indices_backward(g64, x.clone(), idx.clone(), &p).unwrap_err();
    expect_dtype_error(&e, "grad_output", ["F32", "F64"]);

    let idx16 = idx.clone().cast(burn_tensor::DType::I16);
    let e = poolgrad::burn::max_pool2d_with_indices_backward(y.clone(), x.clone(), idx16, &p).unwrap_err();
    expect_dtype_error(&e, "indices", ["I64 or I32", "I16"]);

    let wrong = Tensor::<4, Int>::from_data(TensorData::new(vec![0i64, 99, 0, 0], [1, 1, 2, 2]), &plain());
    let e = poolgrad::burn::max_pool2d_with_indices_backward(y, x, wrong, &p).unwrap_err();
    assert!(matches!(e, poolgrad::burn::Error::Pool(poolgrad::Error::IndexOutOfRange { .. })), "{e}");
}

/// The backwards' errors begin with their own names. (The forwards' own messages, for a tensor
/// off the ndarray backend or of a dtype it lacks, cannot be produced in this build: ndarray is
/// the only backend compiled in, and its floats are F32 and F64.)
#[test]
fn each_backward_names_itself_in_its_errors() {
    let x = tensor_f32(&[0.0; 16], [1, 1, 4, 4], &plain());
    let p = MaxPool2dParams::new([2, 2]);
    let (y, idx) = poolgrad::burn::max_pool2d_with_indices(x.clone(), &p).unwrap();
    let idx16 = idx.cast(burn_tensor::DType::I16);
    let e = poolgrad::burn::max_pool2d_with_indices_backward(y.clone(), x.clone(), idx16.clone(), &p)
        .unwrap_err();
    assert!(e.to_string().starts_with("poolgrad::burn::max_pool2d_with_indices_backward: `indices`"), "{e}");
    let e = poolgrad::burn::adaptive_max_pool2d_backward(y, x, idx16).unwrap_err();
    assert!(e.to_string().starts_with("poolgrad::burn::adaptive_max_pool2d_backward: `indices`"), "{e}");
}

/// `e` is a dtype error about `arg` whose message names each of `words` (what was expected and
/// what was given).
fn expect_dtype_error(e: &poolgrad::burn::Error, arg: &str, words: [&str; 2]) {
    let m = e.to_string();
    assert!(matches!(e, poolgrad::burn::Error::DType { arg: a, .. } if *a == arg), "{m}");
    assert!(words.iter().all(|w| m.contains(w)), "{m}");
}

/// poolgrad's own checks name the function called and its `x` too (not the free functions'
/// `input` and `self_`), in the forwards and the backwards.
#[test]
fn pooling_errors_name_the_function_called_and_its_x() {
    let x = tensor_f32(&[0.0; 4], [1, 1, 1, 4], &plain());
    let e = poolgrad::burn::max_pool2d(x, &MaxPool2dParams::new([2, 2])).unwrap_err();
    assert!(e.to_string().starts_with("poolgrad::burn::max_pool2d: `kernel` is [2, 2]"), "{e}");
    let x = tensor_f32(&[0.0; 16], [1, 1, 4, 4], &plain());
    let other = tensor_f32(&[0.0; 36], [1, 1, 6, 6], &plain());
    let (y, idx) = poolgrad::burn::adaptive_max_pool2d_with_indices(x, [2, 2]).unwrap();
    let e = poolgrad::burn::max_pool2d_with_indices_backward(y, other, idx, &MaxPool2dParams::new([2, 2]))
        .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "poolgrad::burn::max_pool2d_with_indices_backward: `grad_output` has shape [1, 1, 2, 2], expected [1, 1, 3, 3]"
        ),
        "{e}"
    );
}

/// An `N = 0` batch gives empty results, forward and backward, with and without autodiff (as the
/// free functions do); an empty `C`, `H` or `W` is the empty-dimension error, named for the
/// function called and its `x`.
#[test]
fn empty_tensors_of_every_axis() {
    let p = MaxPool2dParams::new([2, 2]);
    let mut differentiated = 0;
    for (device, differentiable) in [(plain(), false), (autodiff(), true), (balanced(), true)] {
        for x in
            [tensor_f32(&[], [0, 2, 4, 4], &device), tensor_f32(&[], [0, 2, 4, 4], &device).swap_dims(2, 3)]
        {
            let x = if differentiable { x.require_grad() } else { x };
            let y = poolgrad::burn::max_pool2d(x.clone(), &p).unwrap();
            let z = poolgrad::burn::adaptive_max_pool2d(x.clone(), [2, 2]).unwrap();
            assert_eq!((y.dims(), z.dims()), ([0, 2, 2, 2], [0, 2, 2, 2]));
            if differentiable {
                let grads = (y.sum() + z.sum()).backward();
                assert_eq!(x.grad(&grads).expect("x takes part").dims(), [0, 2, 4, 4]);
                differentiated += 1;
            }
            let (y, idx) = poolgrad::burn::max_pool2d_with_indices(x.clone(), &p).unwrap();
            let gx = poolgrad::burn::max_pool2d_with_indices_backward(y, x.clone(), idx, &p).unwrap();
            assert_eq!(gx.dims(), [0, 2, 4, 4]);
            let (z, idx) = poolgrad::burn::adaptive_max_pool2d_with_indices(x.clone(), [2, 2]).unwrap();
            assert_eq!(poolgrad::burn::adaptive_max_pool2d_backward(z, x, idx).unwrap().dims(), [0, 2, 4, 4]);
        }
    }
    assert_eq!(differentiated, 4, "both autodiff devices, both layouts");
    for (shape, axis) in [([1, 0, 4, 4], "C"), ([1, 2, 0, 4], "H"), ([1, 2, 4, 0], "W")] {
        let x = tensor_f32(&[], shape, &plain());
        let says = |f: &str| {
            format!(
                "poolgrad::burn::{f}: `x` has shape {shape:?}, but its {axis} dimension must not be empty"
            )
        };
        assert_eq!(poolgrad::burn::max_pool2d(x.clone(), &p).unwrap_err().to_string(), says("max_pool2d"));
        let e = poolgrad::burn::adaptive_max_pool2d(x.clone(), [2, 2]).unwrap_err();
        assert_eq!(e.to_string(), says("adaptive_max_pool2d"));
        let pooled = [shape[0], shape[1], 2, 2];
        let g = tensor_f32(&vec![0.0; pooled.iter().product()], pooled, &plain());
        let idx = Tensor::<4, Int>::from_data(
            TensorData::new(vec![0i64; pooled.iter().product()], pooled),
            &plain(),
        );
        let e = poolgrad::burn::max_pool2d_with_indices_backward(g.clone(), x.clone(), idx.clone(), &p)
            .unwrap_err();
        assert_eq!(e.to_string(), says("max_pool2d_with_indices_backward"));
        let e = poolgrad::burn::adaptive_max_pool2d_backward(g, x, idx).unwrap_err();
        assert_eq!(e.to_string(), says("adaptive_max_pool2d_backward"));
    }
}

/// The 3-D and 1-D poolings under burn's autodiff (both checkpointing strategies): each gradient
/// equals poolgrad's own backward on the same arrays, and the indices poolgrad's forward.
#[test]
fn volumes_and_lines_under_burn_autodiff() {
    let values: Vec<f64> = (0..2 * 3 * 5 * 6 * 4).map(|v| ((v * 37) % 23) as f64 - 11.0).collect();
    let xa = ArrayD::from_shape_vec(IxDyn(&[2, 3, 5, 6, 4]), values.clone()).unwrap();
    let p3 = poolgrad::MaxPool3dParams::new([2, 3, 2]).with_stride([1, 2, 2]).with_padding([1, 1, 0]);
    let pooled = poolgrad::max_pool3d_with_indices(&xa, &p3).unwrap();
    let want =
        poolgrad::max_pool3d_with_indices_backward(&pooled.output.mapv(|_| 1.0), &xa, &pooled.indices, &p3)
            .unwrap();
    let line_a = ArrayD::from_shape_vec(IxDyn(&[2, 3, 10]), values[..60].to_vec()).unwrap();
    let p1 = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
    let lp = poolgrad::max_pool1d_with_indices(&line_a, &p1).unwrap();
    let line_want =
        poolgrad::max_pool1d_with_indices_backward(&lp.output.mapv(|_| 1.0), &line_a, &lp.indices, &p1)
            .unwrap();
    for device in [autodiff(), balanced()] {
        let options =
            burn_tensor::TensorCreationOptions::new(device.clone()).with_dtype(burn_tensor::DType::F64);
        let x = Tensor::<5>::from_data(TensorData::new(values.clone(), [2, 3, 5, 6, 4]), options.clone())
            .require_grad();
        let (y, idx) = poolgrad::burn::max_pool3d_with_indices(x.clone(), &p3).unwrap();
        assert_eq!(
            idx.into_data().try_to_vec::<i64>().unwrap(),
            pooled.indices.iter().copied().collect::<Vec<_>>()
        );
        let gx = x.grad(&y.sum().backward()).expect("x requires grad");
        assert_eq!(gx.into_data().try_to_vec::<f64>().unwrap(), want.iter().copied().collect::<Vec<_>>());

        let line = Tensor::<3>::from_data(TensorData::new(values[..60].to_vec(), [2, 3, 10]), options)
            .require_grad();
        let y = poolgrad::burn::max_pool1d(line.clone(), &p1).unwrap();
        let gl = line.grad(&y.sum().backward()).expect("line requires grad");
        assert_eq!(
            gl.into_data().try_to_vec::<f64>().unwrap(),
            line_want.iter().copied().collect::<Vec<_>>()
        );
    }
    // Adaptive, plain (no autodiff): the values and indices are poolgrad's.
    let x = Tensor::<5>::from_data(
        TensorData::new(values.iter().map(|&v| v as f32).collect::<Vec<_>>(), [2, 3, 5, 6, 4]),
        &plain(),
    );
    let (y, idx) = poolgrad::burn::adaptive_max_pool3d_with_indices(x, [2, 4, 3]).unwrap();
    let want = poolgrad::adaptive_max_pool3d(&xa.mapv(|v| v as f32), [2, 4, 3]).unwrap();
    assert_eq!(y.into_data().try_to_vec::<f32>().unwrap(), want.output.iter().copied().collect::<Vec<_>>());
    assert_eq!(
        idx.into_data().try_to_vec::<i64>().unwrap(),
        want.indices.iter().copied().collect::<Vec<_>>()
    );
}

/// The explicit backwards of the 3-D and 1-D poolings and of the unpoolings, F32 and F64, I64 and
/// I32 indices, on plain and autodiff tensors: the poolings' against a plain loop over the
/// forward's indices (summed in the dtype), the unpoolings' against the plain unpooling loop
/// (the last of equal indices alone reads its gradient), and their own gradient under autodiff
/// against the unpooling loop; errors name the function called.
#[test]
fn explicit_family_backwards_equal_plain_loops() {
    let p3 = poolgrad::MaxPool3dParams::new([2, 3, 2]).with_stride([1, 2, 2]).with_padding([1, 1, 0]);
    let p1 = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
    let to_f64 = |d: TensorData| match d.clone().try_to_vec::<f64>() {
        Ok(v) => v,
        Err(_) => d.try_to_vec::<f32>().expect("f32 or f64").into_iter().map(f64::from).collect(),
    };
    let (volume, line) = ([2, 3, 5, 6, 4], [2, 3, 10]);
    for dtype in [burn_tensor::DType::F32, burn_tensor::DType::F64] {
        let add = if dtype == burn_tensor::DType::F32 { in_f32 } else { in_f64 };
        for device in [plain(), autodiff()] {
            let options = burn_tensor::TensorCreationOptions::new(device.clone()).with_dtype(dtype);
            let data = |v: Vec<f64>, shape: &[usize]| TensorData::new(v, shape.to_vec());
            let check = |name: &str, gx: Vec<Tensor<5>>, w: &[f64], idx: &[i64]| {
                let want = scatter_loop((w, idx), (6, 120), add);
                for gx in gx {
                    assert_eq!(to_f64(gx.into_data()), want, "{name} {dtype:?}");
                }
            };
            let x = Tensor::<5>::from_data(data(values(720, 5), &volume), options.clone());
            let (y, idx) = poolgrad::burn::max_pool3d_with_indices(x.clone(), &p3).unwrap();
            let w = gradient_values(y.shape().num_elements(), 6);
            let g = Tensor::<5>::from_data(data(w.clone(), &y.dims()), options.clone());
            let ix = idx.clone().into_data().try_to_vec::<i64>().unwrap();
            let gx = [idx.clone(), idx.cast(burn_tensor::DType::I32)].map(|i| {
                poolgrad::burn::max_pool3d_with_indices_backward(g.clone(), x.clone(), i, &p3).unwrap()
            });
            check("max 3-D", gx.to_vec(), &w, &ix);
            let (y, idx) = poolgrad::burn::adaptive_max_pool3d_with_indices(x.clone(), [3, 4, 3]).unwrap();
            let w = gradient_values(y.shape().num_elements(), 7);
            let g = Tensor::<5>::from_data(data(w.clone(), &y.dims()), options.clone());
            let ix = idx.clone().into_data().try_to_vec::<i64>().unwrap();
            let gx = [idx.clone(), idx.cast(burn_tensor::DType::I32)]
                .map(|i| poolgrad::burn::adaptive_max_pool3d_backward(g.clone(), x.clone(), i).unwrap());
            check("adaptive 3-D", gx.to_vec(), &w, &ix);

            let x = Tensor::<3>::from_data(data(values(60, 8), &line), options.clone());
            let (y, idx) = poolgrad::burn::max_pool1d_with_indices(x.clone(), &p1).unwrap();
            let w = gradient_values(y.shape().num_elements(), 9);
            let g = Tensor::<3>::from_data(data(w.clone(), &y.dims()), options.clone());
            let ix = idx.clone().into_data().try_to_vec::<i64>().unwrap();
            let want = scatter_loop((&w, &ix), (6, 10), add);
            for i in [idx.clone(), idx.cast(burn_tensor::DType::I32)] {
                let gx =
                    poolgrad::burn::max_pool1d_with_indices_backward(g.clone(), x.clone(), i, &p1).unwrap();
                assert_eq!(to_f64(gx.into_data()), want, "max 1-D {dtype:?}");
            }
            let (y, idx) = poolgrad::burn::adaptive_max_pool1d_with_indices(x.clone(), 4).unwrap();
            let w = gradient_values(y.shape().num_elements(), 10);
            let g = Tensor::<3>::from_data(data(w.clone(), &y.dims()), options.clone());
            let ix = idx.clone().into_data().try_to_vec::<i64>().unwrap();
            let want = scatter_loop((&w, &ix), (6, 10), add);
            for i in [idx.clone(), idx.cast(burn_tensor::DType::I32)] {
                let gx = poolgrad::burn::adaptive_max_pool1d_backward(g.clone(), x.clone(), i).unwrap();
                assert_eq!(to_f64(gx.into_data()), want, "adaptive 1-D {dtype:?}");
            }
            let e =
                poolgrad::burn::max_pool1d_with_indices_backward(g.clone(), x.clone(), y.clone().int(), &p1)
                    .unwrap_err()
                    .to_string();
            assert!(e.starts_with("poolgrad::burn::max_pool1d_with_indices_backward: "), "{e}");

            // The unpoolings' backwards: planes of 12 positions, 6 values each to 3 of them.
            let c = unpool_case(2, 6, 12);
            let ints = |shape: &[usize]| TensorData::new(c.indices.clone(), shape.to_vec());
            let grad = |shape: &[usize]| data(c.weights.clone(), shape);
            for i in [
                Tensor::<4, Int>::from_data(ints(&[1, 2, 2, 3]), &device),
                Tensor::<4, Int>::from_data(ints(&[1, 2, 2, 3]), &device).cast(burn_tensor::DType::I32),
            ] {
                let g = Tensor::<4>::from_data(grad(&[1, 2, 3, 4]), options.clone());
                let gx = poolgrad::burn::max_unpool2d_backward(g, i).unwrap();
                assert_eq!(gx.dims(), [1, 2, 2, 3]);
                assert_eq!(to_f64(gx.into_data()), c.want.gradient, "2-D unpooling {dtype:?}");
            }
            let g = Tensor::<3>::from_data(grad(&[1, 2, 12]), options.clone());
            let i = Tensor::<3, Int>::from_data(ints(&[1, 2, 6]), &device);
            let gx = poolgrad::burn::max_unpool1d_backward(g, i).unwrap();
            assert_eq!(to_f64(gx.into_data()), c.want.gradient, "1-D unpooling {dtype:?}");
            let g = Tensor::<5>::from_data(grad(&[1, 2, 1, 3, 4]), options.clone());
            let i = Tensor::<5, Int>::from_data(ints(&[1, 2, 1, 2, 3]), &device);
            let gx = poolgrad::burn::max_unpool3d_backward(g.clone(), i).unwrap();
            assert_eq!(to_f64(gx.into_data()), c.want.gradient, "3-D unpooling {dtype:?}");
            let beyond =
                Tensor::<5, Int>::from_data(TensorData::new(vec![12i64; 12], [1, 2, 1, 2, 3]), &device);
            let e = poolgrad::burn::max_unpool3d_backward(g, beyond).unwrap_err().to_string();
            assert!(e.starts_with("poolgrad::burn::max_unpool3d_backward: `indices` holds 12"), "{e}");
        }
        // Recorded as a gather layer (both checkpointing strategies): the gradient of
        // `Σ gx·v` with respect to the gradient read is the unpooling of `v`.
        let c = unpool_case(2, 6, 12);
        for device in [autodiff(), balanced()] {
            let options = burn_tensor::TensorCreationOptions::new(device.clone()).with_dtype(dtype);
            let g = Tensor::<4>::from_data(TensorData::new(c.weights.clone(), [1, 2, 3, 4]), options.clone())
                .require_grad();
            let i = Tensor::<4, Int>::from_data(TensorData::new(c.indices.clone(), [1, 2, 2, 3]), &device);
            let v = Tensor::<4>::from_data(TensorData::new(c.values.clone(), [1, 2, 2, 3]), options.clone());
            let gx = poolgrad::burn::max_unpool2d_backward(g.clone(), i).unwrap();
            let dg = g.grad(&(gx * v).sum().backward()).expect("g requires grad");
            assert_eq!(to_f64(dg.into_data()), c.want.output, "gradient of the backward {dtype:?}");
        }
    }
}

/// Max unpooling on plain tensors and under burn's autodiff (both checkpointing strategies),
/// 2-D, 1-D and 3-D (the same planes of 12 positions, 6 values each to 3 of them: repeats),
/// F32 and F64: the output and `x`'s gradient of `Σ u·w` against plain loops (the last of equal
/// indices wins and alone gets its gradient); errors name the function called.
#[test]
fn unpooling_under_burn_autodiff() {
    let c = unpool_case(2, 6, 12);
    let (xv, idx, w) = (&c.values[..], &c.indices, &c.weights[..]);
    let (want_u, want_gx) = (&c.want.output[..], &c.want.gradient[..]);
    let data = |values: &[f64], shape: &[usize], f64s: bool| {
        if f64s {
            TensorData::new(values.to_vec(), shape.to_vec())
        } else {
            TensorData::new(values.iter().map(|&v| v as f32).collect::<Vec<_>>(), shape.to_vec())
        }
    };
    let to_f64 = |d: TensorData| match d.clone().try_to_vec::<f64>() {
        Ok(v) => v,
        Err(_) => d.try_to_vec::<f32>().expect("f32 or f64").into_iter().map(f64::from).collect(),
    };
    for f64s in [false, true] {
        let dtype = if f64s { burn_tensor::DType::F64 } else { burn_tensor::DType::F32 };
        for (device, recorded) in [(plain(), false), (autodiff(), true), (balanced(), true)] {
            let options = burn_tensor::TensorCreationOptions::new(device.clone()).with_dtype(dtype);
            let float = |values: &[f64], shape: &[usize]| (data(values, shape, f64s), options.clone());
            let ints = |shape: &[usize]| TensorData::new(idx.clone(), shape.to_vec());
            // 2-D.
            let (d, o) = float(xv, &[1, 2, 2, 3]);
            let x = Tensor::<4>::from_data(d, o);
            let x = if recorded { x.require_grad() } else { x };
            let i = Tensor::<4, Int>::from_data(ints(&[1, 2, 2, 3]), &device);
            let u = poolgrad::burn::max_unpool2d(x.clone(), i, [3, 4]).unwrap();
            assert_eq!(u.dims(), [1, 2, 3, 4]);
            assert_eq!(to_f64(u.clone().into_data()), want_u, "2-D, F64 {f64s}");
            if recorded {
                let (d, o) = float(w, &[1, 2, 3, 4]);
                let gx =
                    x.grad(&(u * Tensor::<4>::from_data(d, o)).sum().backward()).expect("x requires grad");
                assert_eq!(to_f64(gx.into_data()), want_gx, "2-D gradient, F64 {f64s}");
            }
            // 1-D.
            let (d, o) = float(xv, &[1, 2, 6]);
            let x = Tensor::<3>::from_data(d, o);
            let x = if recorded { x.require_grad() } else { x };
            let i = Tensor::<3, Int>::from_data(ints(&[1, 2, 6]), &device);
            let u = poolgrad::burn::max_unpool1d(x.clone(), i, 12).unwrap();
            assert_eq!(to_f64(u.clone().into_data()), want_u, "1-D, F64 {f64s}");
            if recorded {
                let (d, o) = float(w, &[1, 2, 12]);
                let gx =
                    x.grad(&(u * Tensor::<3>::from_data(d, o)).sum().backward()).expect("x requires grad");
                assert_eq!(to_f64(gx.into_data()), want_gx, "1-D gradient, F64 {f64s}");
            }
            // 3-D.
            let (d, o) = float(xv, &[1, 2, 1, 2, 3]);
            let x = Tensor::<5>::from_data(d, o);
            let x = if recorded { x.require_grad() } else { x };
            let i = Tensor::<5, Int>::from_data(ints(&[1, 2, 1, 2, 3]), &device);
            let u = poolgrad::burn::max_unpool3d(x.clone(), i, [1, 3, 4]).unwrap();
            assert_eq!(to_f64(u.clone().into_data()), want_u, "3-D, F64 {f64s}");
            if recorded {
                let (d, o) = float(w, &[1, 2, 1, 3, 4]);
                let gx =
                    x.grad(&(u * Tensor::<5>::from_data(d, o)).sum().backward()).expect("x requires grad");
                assert_eq!(to_f64(gx.into_data()), want_gx, "3-D gradient, F64 {f64s}");
            }
        }
    }
    let x = Tensor::<3>::from_data(TensorData::new(vec![1.0f32, 2.0], [1, 1, 2]), &autodiff());
    let i = Tensor::<3, Int>::from_data(TensorData::new(vec![0i64, 5], [1, 1, 2]), &autodiff());
    let e = poolgrad::burn::max_unpool1d(x, i, 5).unwrap_err().to_string();
    assert!(e.starts_with("poolgrad::burn::max_unpool1d: `indices` holds 5"), "{e}");
}
