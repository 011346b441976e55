//! The candle bridge (`--features candle`): gradients through candle's autograd equal PyTorch's on
//! hand-worked cases (ties, overlapping windows, padding, ceil mode, NaN) and poolgrad's own
//! backward bit for bit, in every float dtype and for every layout candle makes; bad input gives
//! candle errors with poolgrad's messages; and candle's own `max_pool2d` backward is shown to
//! differ from PyTorch's rule, the reason the bridge exists. The hand-worked cases, shared with
//! the burn bridge's tests, are in `common/bridge_cases.rs`.

use candle_core::{DType, Device, Tensor, Var, WithDType};
use ndarray::{ArrayD, IxDyn};
use poolgrad::{Bitmask, I32Argmax, MaxPool2dParams, PoolFloat};

#[path = "common/bridge_cases.rs"]
mod bridge_cases;
use bridge_cases::{
    Op, gradient_values, hand_worked_cases, in_f32, in_f64, poolgrad_gradient, same_values, scatter_loop,
    unpool_case, values,
};

type Result<T = ()> = candle_core::Result<T>;

fn cpu() -> Device {
    Device::Cpu
}

fn flat<T: WithDType>(t: &Tensor) -> Result<Vec<T>> {
    t.flatten_all()?.to_vec1::<T>()
}

/// `values` (in f64, exact in every dtype used) as a `dtype` variable of `shape`.
fn var(values: &[f64], shape: &[usize], dtype: DType) -> Result<Var> {
    Var::from_tensor(&Tensor::new(values, &cpu())?.reshape(shape)?.to_dtype(dtype)?)
}

/// `Σ y·w`: its gradient with respect to `y` is `w`, so `x`'s gradient is the backward of `w`.
fn weighted_sum(y: &Tensor, w: &[f64]) -> Result<Tensor> {
    let w = Tensor::new(w, &cpu())?.reshape(y.shape())?.to_dtype(y.dtype())?;
    (y * w)?.sum_all()
}

fn grad_f64(grads: &candle_core::backprop::GradStore, x: &Var) -> Result<Vec<f64>> {
    let g = grads.get(x).expect("x takes part in the loss");
    flat::<f64>(&g.to_dtype(DType::F64)?)
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

fn apply(op: Op, x: &Tensor) -> Result<Tensor> {
    match op {
        Op::MaxPool(p) => poolgrad::candle::max_pool2d(x, &p),
        Op::Adaptive(size) => poolgrad::candle::adaptive_max_pool2d(x, size),
        Op::Mask(p) => Ok(poolgrad::candle::max_pool2d_with_mask(x, &p, Bitmask)?.0),
    }
}

#[test]
fn gradients_through_candle_autograd_are_pytorchs_on_hand_worked_cases() -> Result {
    for case in hand_worked_cases() {
        for dtype in FLOATS {
            let x = var(&case.x, &case.shape, dtype)?;
            let y = apply(case.op, &x)?;
            let y_values = flat::<f64>(&y.to_dtype(DType::F64)?)?;
            assert!(same_values(&y_values, &case.y), "{} {dtype:?}: output {y_values:?}", case.name);
            let grads = weighted_sum(&y, &case.w)?.backward()?;
            let gx = grad_f64(&grads, &x)?;
            assert_eq!(gx, case.gx, "{} {dtype:?}: input gradient", case.name);
        }
    }
    Ok(())
}

fn to_ndarray<T: WithDType>(t: &Tensor) -> Result<ArrayD<T>> {
    Ok(ArrayD::from_shape_vec(IxDyn(t.dims()), flat::<T>(t)?).expect("shape"))
}

fn bits_equal<T: WithDType + PoolFloat>(a: &Tensor, b: &ArrayD<T>) -> Result<bool> {
    let a = to_ndarray::<T>(a)?;
    Ok(a.shape() == b.shape()
        && a.iter().zip(b.iter()).all(|(x, y)| x.to_f64_exact().to_bits() == y.to_f64_exact().to_bits()))
}

/// Through candle's autograd, on larger inputs with ties and overlapping windows, the input
/// gradient equals poolgrad's own backward on the same ndarray data, bit for bit: the bridge
/// adds nothing and loses nothing (f16 and bf16 included: summed in f32, rounded once).
fn equals_poolgrad_backward<T: WithDType + PoolFloat>() -> Result {
    let dtype = <T as WithDType>::DTYPE;
    let shape = [2, 3, 9, 11];
    let len: usize = shape.iter().product();
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]).with_ceil_mode(true);
    for (op, seed) in
        [(Op::MaxPool(stem), 1), (Op::Adaptive([4, 5]), 2), (Op::Mask(stem.with_ceil_mode(false)), 3)]
    {
        let x = var(&values(len, seed), &shape, dtype)?;
        let y = apply(op, &x)?;
        let w = gradient_values(y.elem_count(), seed + 10);
        let grads = weighted_sum(&y, &w)?.backward()?;
        let via_candle = grads.get(&x).expect("x takes part");

        let x_nd = to_ndarray::<T>(x.as_tensor())?;
        let w_nd = to_ndarray::<T>(&Tensor::new(w.as_slice(), &cpu())?.reshape(y.shape())?.to_dtype(dtype)?)?;
        let direct = poolgrad_gradient(op, &x_nd, &w_nd);
        assert!(bits_equal(via_candle, &direct)?, "{dtype:?}: candle's gradient differs from poolgrad's");
        // And the values are not trivial: some windows share a maximum (gradients add up).
        assert!(direct.iter().filter(|v| v.to_f64_exact() != 0.0).count() > 10);
    }
    Ok(())
}

#[test]
fn gradients_equal_poolgrads_backward_bit_for_bit_f32() -> Result {
    equals_poolgrad_backward::<f32>()
}

#[test]
fn gradients_equal_poolgrads_backward_bit_for_bit_f64() -> Result {
    equals_poolgrad_backward::<f64>()
}

#[test]
fn gradients_equal_poolgrads_backward_bit_for_bit_f16() -> Result {
    equals_poolgrad_backward::<poolgrad::half::f16>()
}

#[test]
fn gradients_equal_poolgrads_backward_bit_for_bit_bf16() -> Result {
    equals_poolgrad_backward::<poolgrad::half::bf16>()
}

/// The half types sum in f32 and round once. A 1x1 input pooled to 1x3 is the maximum of all
/// three windows and collects 1024 + 0.5 + 0.5: in f32 that is 1025, exact in f16 (spacing 1 in
/// [1024, 2048)); adding in f16 would round 1024.5 to even, 1024, twice, and give 1024.
#[test]
fn half_gradients_are_summed_in_f32_and_rounded_once() -> Result {
    let x = var(&[9.0], &[1, 1, 1], DType::F16)?;
    let y = poolgrad::candle::adaptive_max_pool2d(&x, [1, 3])?;
    let grads = weighted_sum(&y, &[1024.0, 0.5, 0.5])?.backward()?;
    assert_eq!(grad_f64(&grads, &x)?, [1025.0]);
    Ok(())
}

/// Every layout candle makes is read in place and gives the result of the contiguous copy:
/// transposed, narrowed (an offset), broadcast (stride 0), and the gradient flows back through
/// the view to the variable.
#[test]
fn strided_offset_and_broadcast_layouts_match_their_contiguous_copies() -> Result {
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let base = var(&values(2 * 3 * 8 * 10, 7), &[2, 3, 8, 10], DType::F32)?;
    let views: Vec<(&str, Tensor)> = vec![
        ("transposed", base.transpose(2, 3)?),
        ("narrowed", base.narrow(3, 2, 7)?.narrow(1, 1, 2)?),
        ("permuted", base.permute((1, 0, 2, 3))?),
        ("broadcast", base.narrow(0, 0, 1)?.narrow(1, 0, 1)?.broadcast_as((3, 2, 8, 10))?),
    ];
    for (name, view) in views {
        assert!(!view.is_contiguous(), "{name} is a strided view");
        let copy = view.contiguous()?.detach();
        for op in [Op::MaxPool(stem), Op::Adaptive([3, 2]), Op::Mask(stem)] {
            let y_view = apply(op, &view)?;
            let y_copy = apply(op, &copy)?;
            assert_eq!(flat::<f32>(&y_view)?, flat::<f32>(&y_copy)?, "{name}");
        }
        // The gradient reaches the variable through the view: by the chain rule it is the
        // view op's backward applied to the gradient with respect to the view, which is
        // poolgrad's backward on the contiguous copy (a variable of its own here). So it equals
        // the gradient of Σ view · g_copy, where candle's view backward does all the work.
        let copy_var = Var::from_tensor(&copy)?;
        let w = gradient_values(poolgrad::candle::max_pool2d(&copy, &stem)?.elem_count(), 3);
        let g_base = weighted_sum(&poolgrad::candle::max_pool2d(&view, &stem)?, &w)?.backward()?;
        let g_copy = weighted_sum(&poolgrad::candle::max_pool2d(&copy_var, &stem)?, &w)?.backward()?;
        let g_copy = g_copy.get(&copy_var).expect("copy").detach();
        let through_view = (view * &g_copy)?.sum_all()?.backward()?;
        assert_eq!(
            flat::<f32>(g_base.get(&base).expect("base"))?,
            flat::<f32>(through_view.get(&base).expect("base"))?,
            "{name}"
        );
        assert!(flat::<f32>(&g_copy)?.iter().any(|&v| v != 0.0));
    }
    Ok(())
}

/// The gradient through a transposed view, worked by hand: x = [[1, 2], [3, 4]] viewed as its
/// transpose [[1, 3], [2, 4]], adaptive-pooled to 1x1 (maximum 4, at (1, 1) of either):
/// x's gradient is 1 at (1, 1).
#[test]
fn gradient_through_a_transposed_view_lands_on_the_right_element() -> Result {
    let x = var(&[1., 2., 3., 4.], &[1, 1, 2, 2], DType::F32)?;
    let t = x.transpose(2, 3)?;
    let (y, idx) = poolgrad::candle::adaptive_max_pool2d_with_indices(&t, [1, 2])?;
    // The view's columns: [1, 2] (max 2 at view flat 2) and [3, 4] (max 4 at view flat 3).
    assert_eq!(flat::<f32>(&y)?, [2., 4.]);
    assert_eq!(flat::<i64>(&idx)?, [2, 3]);
    let grads = weighted_sum(&y, &[10., 20.])?.backward()?;
    // View (1, 0) is x (0, 1) = flat 1; view (1, 1) is x (1, 1) = flat 3.
    assert_eq!(grad_f64(&grads, &x)?, [0., 10., 0., 20.]);
    Ok(())
}

/// The `_with_indices` forms return PyTorch's flat indices as I64 tensors, and the explicit
/// backwards take them (or I32 ones) and give the autograd gradient.
#[test]
fn indices_forms_and_explicit_backwards_agree_with_autograd() -> Result {
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let x = var(&values(2 * 2 * 7 * 6, 11), &[2, 2, 7, 6], DType::F64)?;
    let (y, idx) = poolgrad::candle::max_pool2d_with_indices(&x, &stem)?;
    assert_eq!(idx.dtype(), DType::I64);
    let x_nd = to_ndarray::<f64>(x.as_tensor())?;
    let reference = poolgrad::max_pool2d_with_indices(&x_nd, &stem).unwrap();
    assert_eq!(to_ndarray::<i64>(&idx)?, reference.indices);
    let w = gradient_values(y.elem_count(), 5);
    let auto = weighted_sum(&y, &w)?.backward()?.get(&x).expect("x").clone();
    let g = Tensor::new(w.as_slice(), &cpu())?.reshape(y.shape())?;
    for idx in [idx.clone(), idx.to_dtype(DType::I32)?] {
        let explicit = poolgrad::candle::max_pool2d_with_indices_backward(&g, &x, &idx, &stem)?;
        assert_eq!(flat::<f64>(&explicit)?, flat::<f64>(&auto)?);
    }

    let (y, idx) = poolgrad::candle::adaptive_max_pool2d_with_indices(&x, [3, 4])?;
    assert_eq!(to_ndarray::<i64>(&idx)?, poolgrad::adaptive_max_pool2d(&x_nd, [3, 4]).unwrap().indices);
    let w = gradient_values(y.elem_count(), 6);
    let auto = weighted_sum(&y, &w)?.backward()?.get(&x).expect("x").clone();
    let g = Tensor::new(w.as_slice(), &cpu())?.reshape(y.shape())?;
    let explicit = poolgrad::candle::adaptive_max_pool2d_backward(&g, &x, &idx.to_dtype(DType::I32)?)?;
    assert_eq!(flat::<f64>(&explicit)?, flat::<f64>(&auto)?);

    let (y, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &stem, I32Argmax)?;
    assert_eq!(mask.to_indices::<i64>().unwrap(), reference.indices);
    let w = gradient_values(y.elem_count(), 7);
    let auto = weighted_sum(&y, &w)?.backward()?.get(&x).expect("x").clone();
    let g = Tensor::new(w.as_slice(), &cpu())?.reshape(y.shape())?;
    let explicit = poolgrad::candle::max_pool2d_with_mask_backward(&g, &x, &mask)?;
    assert_eq!(flat::<f64>(&explicit)?, flat::<f64>(&auto)?);
    Ok(())
}

fn message(r: Result<impl std::fmt::Debug>) -> String {
    r.expect_err("an error").to_string()
}

/// Bad input is a candle error whose message is poolgrad's: the operation, the argument, what
/// was expected and what was given. No panic.
#[test]
fn bad_input_gives_errors_that_name_the_argument() -> Result {
    let p = MaxPool2dParams::new([2, 2]);
    let x2 = Tensor::zeros((4, 4), DType::F32, &cpu())?;
    let m = message(poolgrad::candle::max_pool2d(&x2, &p));
    assert!(
        m.contains("poolgrad::candle::max_pool2d")
            && m.contains("`x`")
            && m.contains("3 (C, H, W)")
            && m.contains("[4, 4]"),
        "{m}"
    );

    let x_u8 = Tensor::zeros((1, 4, 4), DType::U8, &cpu())?;
    let m = message(poolgrad::candle::adaptive_max_pool2d(&x_u8, [2, 2]));
    assert!(m.contains("`x`") && m.contains("F32, F64, F16 or BF16") && m.contains("u8"), "{m}");

    let x = Tensor::zeros((1, 4, 4), DType::F32, &cpu())?;
    let m = message(poolgrad::candle::max_pool2d(&x, &MaxPool2dParams::new([0, 2])));
    assert!(m.contains("kernel"), "poolgrad's own message: {m}");
    let m = message(poolgrad::candle::max_pool2d(&x, &MaxPool2dParams::new([5, 5])));
    assert!(m.contains("max_pool2d"), "{m}");

    let (y, idx) = poolgrad::candle::max_pool2d_with_indices(&x, &p)?;
    let g64 = y.to_dtype(DType::F64)?;
    let m = message(poolgrad::candle::max_pool2d_with_indices_backward(&g64, &x, &idx, &p));
    assert!(m.contains("`grad_output`") && m.contains("f32") && m.contains("f64"), "{m}");
    let m =
        message(poolgrad::candle::max_pool2d_with_indices_backward(&y, &x, &idx.to_dtype(DType::U32)?, &p));
    assert!(m.contains("`indices`") && m.contains("I64 or I32") && m.contains("u32"), "{m}");
    let wrong = Tensor::new(&[[[0i64, 99], [0, 0]]], &cpu())?;
    let m = message(poolgrad::candle::max_pool2d_with_indices_backward(&y, &x, &wrong, &p));
    assert!(m.contains("99"), "the out-of-range index is named: {m}");
    let small = Tensor::zeros((1, 1, 2), DType::F32, &cpu())?;
    let m = message(poolgrad::candle::adaptive_max_pool2d_backward(&small, &x, &idx));
    assert!(m.contains("`indices` has shape [1, 2, 2], expected [1, 1, 2]"), "{m}");

    let (_, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &p, Bitmask)?;
    let other = Tensor::zeros((1, 6, 6), DType::F32, &cpu())?;
    let m = message(poolgrad::candle::max_pool2d_with_mask_backward(&y, &other, &mask));
    assert!(m.contains("self_") || m.contains("shape"), "{m}");
    Ok(())
}

/// Why the bridge exists: candle's own `max_pool2d` backward (candle-core 0.11.1) is not
/// PyTorch's. It gives a window's gradient, times the share of the window's taps that equal the
/// maximum, to every tap equal to it. On the ties case: window 1 (3, 3, 0, 1) gives 1 · 2/4 to
/// both 3s, window 2 (1, 2, 2, 0) gives 2 · 2/4 to both 2s; PyTorch gives 1 to the first 3 and 2
/// to the first 2. Without ties too: a 2x2 window with one maximum passes on a quarter of its
/// gradient (1 · 1/4), where PyTorch passes all of it. And kernel 2, stride 1 has no backward.
#[test]
fn candles_own_max_pool_backward_is_not_pytorchs() -> Result {
    let single = var(&[0., 1., 2., 3.], &[1, 1, 2, 2], DType::F32)?;
    let candles = grad_f64(&single.max_pool2d(2)?.sum_all()?.backward()?, &single)?;
    assert_eq!(candles, [0.0, 0.0, 0.0, 0.25]);
    let ours = poolgrad::candle::max_pool2d(&single, &MaxPool2dParams::new([2, 2]))?;
    assert_eq!(grad_f64(&ours.sum_all()?.backward()?, &single)?, [0.0, 0.0, 0.0, 1.0]);

    let x = var(&[3., 3., 1., 2., 0., 1., 2., 0.], &[1, 1, 2, 4], DType::F32)?;
    let w = [1., 2.];

    let candle_grads = weighted_sum(&x.max_pool2d(2)?, &w)?.backward()?;
    let candles = grad_f64(&candle_grads, &x)?;
    assert_eq!(candles, [0.5, 0.5, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]);

    let ours = grad_f64(
        &weighted_sum(&poolgrad::candle::max_pool2d(&x, &MaxPool2dParams::new([2, 2]))?, &w)?.backward()?,
        &x,
    )?;
    let pytorch = [1., 0., 0., 2., 0., 0., 0., 0.];
    assert_eq!(ours, pytorch);
    assert_ne!(candles, pytorch);

    let y = x.max_pool2d_with_stride(2, 1)?;
    let m = message(weighted_sum(&y, &[1.; 3])?.backward().map(|_| ()));
    assert!(m.contains("ksize"), "candle refuses kernel != stride: {m}");
    Ok(())
}

/// Every function's errors begin with its own name (not a sibling's that it shares code with).
#[test]
fn each_function_names_itself_in_its_errors() -> Result {
    let p = MaxPool2dParams::new([2, 2]);
    let x2 = Tensor::zeros((4, 4), DType::F32, &cpu())?;
    let x_u8 = Tensor::zeros((1, 4, 4), DType::U8, &cpu())?;
    let x = Tensor::zeros((1, 4, 4), DType::F32, &cpu())?;
    let (y, idx) = poolgrad::candle::max_pool2d_with_indices(&x, &p)?;
    let (_, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &p, Bitmask)?;
    let g64 = y.to_dtype(DType::F64)?;
    let idx_u32 = idx.to_dtype(DType::U32)?;
    let cases: [(&str, String); 8] = [
        ("max_pool2d", message(poolgrad::candle::max_pool2d(&x2, &p))),
        ("max_pool2d_with_indices", message(poolgrad::candle::max_pool2d_with_indices(&x2, &p))),
        (
            "max_pool2d_with_indices_backward",
            message(poolgrad::candle::max_pool2d_with_indices_backward(&g64, &x, &idx, &p)),
        ),
        ("adaptive_max_pool2d", message(poolgrad::candle::adaptive_max_pool2d(&x_u8, [2, 2]))),
        (
            "adaptive_max_pool2d_with_indices",
            message(poolgrad::candle::adaptive_max_pool2d_with_indices(&x_u8, [2, 2])),
        ),
        (
            "adaptive_max_pool2d_backward",
            message(poolgrad::candle::adaptive_max_pool2d_backward(&y, &x, &idx_u32)),
        ),
        ("max_pool2d_with_mask", message(poolgrad::candle::max_pool2d_with_mask(&x2, &p, I32Argmax))),
        (
            "max_pool2d_with_mask_backward",
            message(poolgrad::candle::max_pool2d_with_mask_backward(&g64, &x, &mask)),
        ),
    ];
    for (function, m) in cases {
        assert!(m.contains(&format!("poolgrad::candle::{function}: `")), "{function}: {m}");
    }
    Ok(())
}

/// An `N = 0` batch gives empty results through every forward and backward (as the free
/// functions do, and whatever strides candle keeps on the empty tensor); an empty `C`, `H` or `W`
/// is the empty-dimension error, named for the function called and its `x`. Both ranks, a
/// transposed view too.
#[test]
fn empty_tensors_of_every_axis_through_every_function() -> Result {
    let p = MaxPool2dParams::new([2, 2]);
    let pooled_dims = |d: &[usize]| -> Vec<usize> { [&d[..d.len() - 2], &[2, 2]].concat() };
    for dims in [vec![0, 2, 4, 4], vec![0, 3, 4, 4]] {
        for x in [
            Tensor::zeros(dims.as_slice(), DType::F32, &cpu())?,
            Tensor::zeros(dims.as_slice(), DType::F32, &cpu())?.transpose(2, 3)?,
        ] {
            let x = Var::from_tensor(&x)?;
            let forwards: [Tensor; 4] = [
                poolgrad::candle::max_pool2d(&x, &p)?,
                poolgrad::candle::adaptive_max_pool2d(&x, [2, 2])?,
                poolgrad::candle::max_pool2d_with_mask(&x, &p, I32Argmax)?.0,
                poolgrad::candle::max_pool2d_with_mask(&x, &p, Bitmask)?.0,
            ];
            for y in forwards {
                assert_eq!(y.dims(), pooled_dims(&dims));
                let grads = y.sum_all()?.backward()?;
                assert_eq!(grads.get(&x).expect("x takes part").dims(), dims.as_slice());
            }
            let g = Tensor::zeros(pooled_dims(&dims), DType::F32, &cpu())?;
            let (_, idx) = poolgrad::candle::max_pool2d_with_indices(&x, &p)?;
            assert_eq!(
                poolgrad::candle::max_pool2d_with_indices_backward(&g, &x, &idx, &p)?.dims(),
                dims.as_slice()
            );
            let (_, idx) = poolgrad::candle::adaptive_max_pool2d_with_indices(&x, [2, 2])?;
            assert_eq!(poolgrad::candle::adaptive_max_pool2d_backward(&g, &x, &idx)?.dims(), dims.as_slice());
            let (_, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &p, Bitmask)?;
            assert_eq!(
                poolgrad::candle::max_pool2d_with_mask_backward(&g, &x, &mask)?.dims(),
                dims.as_slice()
            );
        }
    }
    for (dims, axis) in [
        (vec![1, 0, 4, 4], "C"),
        (vec![1, 2, 0, 4], "H"),
        (vec![1, 2, 4, 0], "W"),
        (vec![0, 4, 4], "C"),
        (vec![2, 0, 4], "H"),
        (vec![2, 4, 0], "W"),
    ] {
        let x = Tensor::zeros(dims.as_slice(), DType::F32, &cpu())?;
        let says = |f: &str| {
            format!(
                "poolgrad::candle::{f}: `x` has shape {dims:?}, but its {axis} dimension must not be empty"
            )
        };
        let err = |r: Result<Tensor>| r.expect_err("an empty dimension").to_string();
        assert!(err(poolgrad::candle::max_pool2d(&x, &p)).starts_with(&says("max_pool2d")));
        assert!(
            err(poolgrad::candle::adaptive_max_pool2d(&x, [2, 2])).starts_with(&says("adaptive_max_pool2d"))
        );
        let masked = poolgrad::candle::max_pool2d_with_mask(&x, &p, Bitmask).map(|(y, _)| y);
        assert!(err(masked).starts_with(&says("max_pool2d_with_mask")));
        let g = Tensor::zeros(pooled_dims(&dims), DType::F32, &cpu())?;
        let idx = Tensor::zeros(pooled_dims(&dims), DType::I64, &cpu())?;
        let backward = poolgrad::candle::max_pool2d_with_indices_backward(&g, &x, &idx, &p);
        assert!(err(backward).starts_with(&says("max_pool2d_with_indices_backward")));
        let backward = poolgrad::candle::adaptive_max_pool2d_backward(&g, &x, &idx);
        assert!(err(backward).starts_with(&says("adaptive_max_pool2d_backward")));
    }
    Ok(())
}

/// Errors from poolgrad's checks name the function the user called and the arguments the user
/// passed (`x`, not the free functions' `input` or `self_`); the messages are hand-written from
/// the checks' documented rules.
#[test]
fn errors_name_the_function_called_and_its_arguments() -> Result {
    let x = Tensor::zeros((1, 2, 1, 1), DType::F32, &cpu())?;
    let e = poolgrad::candle::max_pool2d(&x, &MaxPool2dParams::new([2, 2])).unwrap_err().to_string();
    assert!(e.starts_with("poolgrad::candle::max_pool2d: `kernel` is [2, 2]"), "{e}");
    let x = Tensor::zeros((1, 2, 4, 4), DType::F32, &cpu())?;
    let g = Tensor::zeros((1, 2, 3, 2), DType::F32, &cpu())?;
    let idx = Tensor::zeros((1, 2, 2, 2), DType::I64, &cpu())?;
    let e = poolgrad::candle::adaptive_max_pool2d_backward(&g, &x, &idx).unwrap_err().to_string();
    assert!(
        e.starts_with("poolgrad::candle::adaptive_max_pool2d_backward: `indices` has shape [1, 2, 2, 2], expected [1, 2, 3, 2]"),
        "{e}"
    );
    let idx = Tensor::new(&[[[[0i64, 0], [0, 16]], [[0, 0], [0, 0]]]], &cpu())?;
    let g = Tensor::zeros((1, 2, 2, 2), DType::F32, &cpu())?;
    let e = poolgrad::candle::max_pool2d_with_indices_backward(&g, &x, &idx, &MaxPool2dParams::new([2, 2]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("poolgrad::candle::max_pool2d_with_indices_backward: `indices` holds 16"), "{e}");
    let (_, mask) = poolgrad::candle::max_pool2d_with_mask(&x, &MaxPool2dParams::new([2, 2]), Bitmask)?;
    let other = Tensor::zeros((1, 2, 6, 6), DType::F32, &cpu())?;
    let e = poolgrad::candle::max_pool2d_with_mask_backward(&g, &other, &mask).unwrap_err().to_string();
    assert!(e.starts_with("poolgrad::candle::max_pool2d_with_mask_backward: `x` has shape [1, 2, 6, 6], expected [1, 2, 4, 4]"), "{e}");
    Ok(())
}

/// The 3-D and 1-D poolings through candle's autograd: each gradient equals poolgrad's own
/// backward on the same arrays, bit for bit, and a tensor of another rank is an error naming
/// the function.
#[test]
fn volumes_and_lines_through_candle_autograd() -> Result {
    let values: Vec<f64> = (0..2 * 3 * 5 * 6 * 4).map(|v| ((v * 37) % 23) as f64 - 11.0).collect();
    let x = var(&values, &[2, 3, 5, 6, 4], DType::F32)?;
    let p3 = poolgrad::MaxPool3dParams::new([2, 3, 2]).with_stride([1, 2, 2]).with_padding([1, 1, 0]);
    let w: Vec<f64> = (0..2 * 3 * 6 * 3 * 2).map(|v| (v % 7) as f64 - 3.0).collect();
    let y = poolgrad::candle::max_pool3d(&x, &p3)?;
    let grads = weighted_sum(&y, &w)?.backward()?;
    let xa = to_ndarray::<f32>(x.as_tensor())?;
    let pooled = poolgrad::max_pool3d_with_indices(&xa, &p3).unwrap();
    let g = ndarray::ArrayD::from_shape_vec(pooled.output.raw_dim(), w.iter().map(|&v| v as f32).collect())
        .unwrap();
    let want = poolgrad::max_pool3d_with_indices_backward(&g, &xa, &pooled.indices, &p3).unwrap();
    assert!(bits_equal(grads.get(&x).expect("x takes part"), &want)?);

    let y = poolgrad::candle::adaptive_max_pool3d(&x, [3, 4, 3])?;
    let grads = y.sum_all()?.backward()?;
    let pooled = poolgrad::adaptive_max_pool3d(&xa, [3, 4, 3]).unwrap();
    let want = poolgrad::adaptive_max_pool3d_backward(&pooled.output.mapv(|_| 1.0f32), &xa, &pooled.indices)
        .unwrap();
    assert!(bits_equal(grads.get(&x).expect("x takes part"), &want)?);

    let line = var(&values[..3 * 10], &[3, 10], DType::F64)?;
    let p1 = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
    let (y, idx) = poolgrad::candle::max_pool1d_with_indices(&line, &p1)?;
    let grads = y.sum_all()?.backward()?;
    let la = to_ndarray::<f64>(line.as_tensor())?;
    let pooled = poolgrad::max_pool1d_with_indices(&la, &p1).unwrap();
    assert_eq!(flat::<i64>(&idx)?, pooled.indices.iter().copied().collect::<Vec<_>>());
    let want =
        poolgrad::max_pool1d_with_indices_backward(&pooled.output.mapv(|_| 1.0), &la, &pooled.indices, &p1)
            .unwrap();
    assert!(bits_equal(grads.get(&line).expect("line takes part"), &want)?);

    let m = message(poolgrad::candle::max_pool3d(line.as_tensor(), &p3));
    assert!(
        m.contains("poolgrad::candle::max_pool3d") && m.contains("`x`") && m.contains("5 (N, C, D, H, W)"),
        "{m}"
    );
    Ok(())
}

/// The explicit backwards of the 3-D and 1-D poolings and of the unpoolings, on I64 and I32
/// indices: the poolings' against a plain loop over the forward's indices (and candle's
/// autograd gradient), the unpoolings' against the plain unpooling loop (the last of equal
/// indices alone reads its gradient), and their own gradient against the unpooling loop;
/// errors name the function called.
#[test]
fn explicit_family_backwards_equal_plain_loops() -> Result {
    type Forward<'p> = Box<dyn Fn(&Tensor) -> Result<(Tensor, Tensor)> + 'p>;
    type Backward<'p> = Box<dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor> + 'p>;
    let p3 = poolgrad::MaxPool3dParams::new([2, 3, 2]).with_stride([1, 2, 2]).with_padding([1, 1, 0]);
    let p1 = poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]).with_ceil_mode(true);
    let cases: [(&str, Vec<usize>, Forward, Backward); 4] = [
        (
            "max 3-D",
            vec![2, 3, 5, 6, 4],
            Box::new(|x| poolgrad::candle::max_pool3d_with_indices(x, &p3)),
            Box::new(|g, x, i| poolgrad::candle::max_pool3d_with_indices_backward(g, x, i, &p3)),
        ),
        (
            "adaptive 3-D",
            vec![3, 5, 6, 4],
            Box::new(|x| poolgrad::candle::adaptive_max_pool3d_with_indices(x, [3, 4, 3])),
            Box::new(poolgrad::candle::adaptive_max_pool3d_backward),
        ),
        (
            "max 1-D",
            vec![2, 3, 10],
            Box::new(|x| poolgrad::candle::max_pool1d_with_indices(x, &p1)),
            Box::new(|g, x, i| poolgrad::candle::max_pool1d_with_indices_backward(g, x, i, &p1)),
        ),
        (
            "adaptive 1-D",
            vec![3, 10],
            Box::new(|x| poolgrad::candle::adaptive_max_pool1d_with_indices(x, 4)),
            Box::new(poolgrad::candle::adaptive_max_pool1d_backward),
        ),
    ];
    for (name, shape, forward, backward) in cases {
        for dtype in [DType::F32, DType::F64, DType::BF16] {
            let x = var(&values(shape.iter().product(), 5), &shape, dtype)?;
            let (y, idx) = forward(x.as_tensor())?;
            let w = gradient_values(y.elem_count(), 6);
            let g = Tensor::new(w.as_slice(), &cpu())?.reshape(y.shape())?.to_dtype(dtype)?;
            let w_as_typed = flat::<f64>(&g.to_dtype(DType::F64)?)?;
            let spatial = if name.ends_with("3-D") { 3 } else { 1 };
            let per_plane: usize = shape[shape.len() - spatial..].iter().product();
            // f64 sums in f64; f32 and bf16 in f32, and bf16 rounds the whole sum once.
            let sums = (&w_as_typed[..], &flat::<i64>(&idx)?[..]);
            let planes = (x.elem_count() / per_plane, per_plane);
            let want: Vec<f64> = match dtype {
                DType::F64 => scatter_loop(sums, planes, in_f64),
                DType::F32 => scatter_loop(sums, planes, in_f32),
                _ => scatter_loop(sums, planes, in_f32)
                    .iter()
                    .map(|&v| half::bf16::from_f64(v).to_f64())
                    .collect(),
            };
            for indices in [idx.clone(), idx.to_dtype(DType::I32)?] {
                let gx = flat::<f64>(&backward(&g, x.as_tensor(), &indices)?.to_dtype(DType::F64)?)?;
                assert!(gx == want, "{name} {dtype:?}: {gx:?} against {want:?}");
            }
            let grads = (y * &g)?.sum_all()?.backward()?;
            let auto = flat::<f64>(&backward(&g, x.as_tensor(), &idx)?.to_dtype(DType::F64)?)?;
            assert_eq!(grad_f64(&grads, &x)?, auto, "{name} {dtype:?}: autograd");
        }
    }

    type UnpoolBackward = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let unpoolings: [(&str, Vec<usize>, Vec<usize>, UnpoolBackward); 3] = [
        ("1-D", vec![2, 3, 4], vec![2, 3, 7], poolgrad::candle::max_unpool1d_backward),
        ("2-D", vec![1, 2, 2, 3], vec![1, 2, 3, 4], poolgrad::candle::max_unpool2d_backward),
        ("3-D", vec![1, 2, 2, 1, 2], vec![1, 2, 2, 2, 3], poolgrad::candle::max_unpool3d_backward),
    ];
    for (name, pooled, full, backward) in unpoolings {
        let (count, planes) = (pooled.iter().product::<usize>(), pooled[0] * pooled[1]);
        let c = unpool_case(planes, count / planes, full.iter().product::<usize>() / planes);
        let indices = Tensor::new(c.indices.as_slice(), &cpu())?.reshape(pooled.as_slice())?;
        let g = Tensor::new(c.weights.as_slice(), &cpu())?.reshape(full.as_slice())?;
        for indices in [indices.clone(), indices.to_dtype(DType::I32)?] {
            let gx = backward(&g, &indices)?;
            assert_eq!(gx.dims(), pooled.as_slice(), "{name}");
            assert_eq!(flat::<f64>(&gx)?, c.want.gradient, "{name}");
        }
        // Differentiable as a gather layer: the gradient of `Σ gx·v` with respect to `g` is the
        // unpooling of `v` to `g`'s size.
        let gv = var(&c.weights, &full, DType::F64)?;
        let grads = weighted_sum(&backward(gv.as_tensor(), &indices)?, &c.values)?.backward()?;
        assert_eq!(grad_f64(&grads, &gv)?, c.want.output, "{name}: gradient of the backward");
        let e = message(backward(&g, &indices.to_dtype(DType::U8)?));
        assert!(
            e.starts_with(&format!("poolgrad::candle::max_unpool{}d_backward: `indices`", &name[..1])),
            "{e}"
        );
    }
    let x = var(&values(60, 5), &[2, 3, 10], DType::F32)?;
    let (y, idx) = poolgrad::candle::max_pool1d_with_indices(x.as_tensor(), &p1)?;
    let e = message(poolgrad::candle::max_pool1d_with_indices_backward(
        &y,
        x.as_tensor(),
        &idx.to_dtype(DType::U8)?,
        &p1,
    ));
    assert!(e.starts_with("poolgrad::candle::max_pool1d_with_indices_backward: `indices`"), "{e}");
    let e = message(poolgrad::candle::adaptive_max_pool3d_backward(&y, x.as_tensor(), &idx));
    assert!(e.starts_with("poolgrad::candle::adaptive_max_pool3d_backward: "), "{e}");
    Ok(())
}

/// Second order through the pooling: a gradient penalty `Σ (∂L/∂x)²` with `L = Σ y·w` and `w` a
/// variable. `∂L/∂x` is the backward of `w` (summed where windows overlap) and the penalty's
/// gradient with respect to `w` is `2·(∂L/∂x)` read at each output's arg-max: the double
/// backward. Computed here with plain loops over the forward's indices, for overlapping 2-D
/// windows, 1-D and 3-D poolings. candle keeps the graph of a gradient only with
/// `CANDLE_GRAD_DO_NOT_DETACH` set, read once per thread: [`second_order_runs_in_its_own_process`]
/// runs this test in a child process with it set.
#[test]
#[ignore = "needs CANDLE_GRAD_DO_NOT_DETACH=1; run by second_order_runs_in_its_own_process"]
fn second_order_gradients_flow_through_the_pooling() -> Result {
    assert!(
        std::env::var("CANDLE_GRAD_DO_NOT_DETACH").is_ok_and(|v| v == "1"),
        "run with CANDLE_GRAD_DO_NOT_DETACH=1"
    );
    let x_values: Vec<f64> = (0..60).map(|i| ((i * 37) % 61) as f64 - 30.0).collect();
    type Pool = fn(&Tensor) -> Result<(Tensor, Tensor)>;
    let cases: [(&str, Vec<usize>, Pool); 3] = [
        ("2-D k3 s1", vec![1, 2, 5, 6], |x| {
            poolgrad::candle::max_pool2d_with_indices(x, &MaxPool2dParams::new([3, 3]).with_stride([1, 1]))
        }),
        ("1-D k3 s2 p1", vec![2, 3, 10], |x| {
            poolgrad::candle::max_pool1d_with_indices(
                x,
                &poolgrad::MaxPool1dParams::new([3]).with_stride([2]).with_padding([1]),
            )
        }),
        ("3-D adaptive", vec![1, 3, 4, 5, 1], |x| {
            poolgrad::candle::adaptive_max_pool3d_with_indices(x, [3, 2, 1])
        }),
    ];
    for (name, shape, pool) in cases {
        let x = var(&x_values, &shape, DType::F64)?;
        let (y, indices) = pool(&x)?;
        let w_values: Vec<f64> = (0..y.elem_count()).map(|i| ((i * 5) % 7) as f64 - 3.0).collect();
        let w = var(&w_values, y.dims(), DType::F64)?;
        let loss = (&y * w.as_tensor())?.sum_all()?;
        let gx = loss.backward()?.get(&x).expect("x takes part").clone();
        let penalty = gx.sqr()?.sum_all()?;
        let gw = flat::<f64>(penalty.backward()?.get(&w).expect("w takes part in the penalty"))?;
        // The plain loops: ∂L/∂x by scatter-adding w at the indices, then 2·(∂L/∂x)[idx].
        let idx = flat::<i64>(&indices)?;
        let (plane, per) = (x_values.len() / (shape[0] * shape[1]), w_values.len() / (shape[0] * shape[1]));
        let mut dx = vec![0.0; x_values.len()];
        for (e, &i) in idx.iter().enumerate() {
            dx[(e / per) * plane + i as usize] += w_values[e];
        }
        assert_eq!(flat::<f64>(&gx)?, dx, "{name}: first order");
        let want: Vec<f64> =
            idx.iter().enumerate().map(|(e, &i)| 2.0 * dx[(e / per) * plane + i as usize]).collect();
        assert_eq!(gw, want, "{name}: the penalty's gradient with respect to w");
    }
    // Max unpooling, by hand: `x`'s gradient of `L = Σ unpool(x)·w` is `B w` (`w` read at each
    // index, the last of equal indices only), and the penalty `Σ (B w)²` has the gradient
    // `2·Bᵀ(B w)` with respect to `w`, where `Bᵀ` is the unpooling itself.
    let x = var(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 4], DType::F64)?;
    let idx = Tensor::new(&[[[2i64, 0, 2, 1]]], &cpu())?;
    let w = var(&[5.0, -3.0, 7.0, 2.0, 1.0], &[1, 1, 5], DType::F64)?;
    let u = poolgrad::candle::max_unpool1d(x.as_tensor(), &idx, 5)?;
    let gx = (&u * w.as_tensor())?.sum_all()?.backward()?.get(&x).expect("x takes part").clone();
    // Element 0's index 2 is written again by element 2: it gets 0.
    assert_eq!(flat::<f64>(&gx)?, [0.0, 5.0, 7.0, -3.0], "unpooling: first order");
    let gw = flat::<f64>(gx.sqr()?.sum_all()?.backward()?.get(&w).expect("w takes part in the penalty"))?;
    // 2·(B w) written back: position 0 from element 1, 1 from element 3, 2 from element 2.
    assert_eq!(gw, [10.0, -6.0, 14.0, 0.0, 0.0], "unpooling: the penalty's gradient with respect to w");
    Ok(())
}

/// Max unpooling through candle's autograd, 1-D, 2-D and 3-D, with repeated indices: the output
/// and `x`'s gradient of `L = Σ u·w` (`u` the unpooling) against plain loops: `u` holds the last
/// value written at each position, and `x`'s gradient is `w` read at each index for the last of
/// equal indices only, 0 for the earlier ones. Errors name the function called.
#[test]
fn unpooling_through_candle_autograd() -> Result {
    type Unpool = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let cases: [(&str, Vec<usize>, Vec<usize>, Unpool); 3] = [
        ("1-D", vec![2, 3, 4], vec![2, 3, 7], |x, i| poolgrad::candle::max_unpool1d(x, i, 7)),
        ("2-D", vec![1, 2, 2, 3], vec![1, 2, 3, 4], |x, i| poolgrad::candle::max_unpool2d(x, i, [3, 4])),
        ("3-D", vec![1, 2, 2, 1, 2], vec![1, 2, 2, 2, 3], |x, i| {
            poolgrad::candle::max_unpool3d(x, i, [2, 2, 3])
        }),
    ];
    for (name, pooled, full, unpool) in cases {
        for dtype in [DType::F32, DType::F64, DType::BF16] {
            let (count, planes) = (pooled.iter().product::<usize>(), pooled[0] * pooled[1]);
            let c = unpool_case(planes, count / planes, full.iter().product::<usize>() / planes);
            let x = var(&c.values, &pooled, dtype)?;
            let indices = Tensor::new(c.indices.as_slice(), &cpu())?.reshape(pooled.as_slice())?;
            let u = unpool(x.as_tensor(), &indices)?;
            assert_eq!(u.dims(), full.as_slice(), "{name}");
            assert_eq!(flat::<f64>(&u.to_dtype(DType::F64)?)?, c.want.output, "{name} {dtype:?}: unpooling");
            let grads = weighted_sum(&u, &c.weights)?.backward()?;
            assert_eq!(grad_f64(&grads, &x)?, c.want.gradient, "{name} {dtype:?}: gradient of x");
        }
    }
    let x = Tensor::zeros((1, 1, 2), DType::F32, &cpu())?;
    let idx = Tensor::new(&[[[0i64, 5]]], &cpu())?;
    let e = poolgrad::candle::max_unpool1d(&x, &idx, 5).unwrap_err().to_string();
    assert!(e.starts_with("poolgrad::candle::max_unpool1d: `indices` holds 5"), "{e}");
    let e = poolgrad::candle::max_unpool2d(&x.to_dtype(DType::U8)?, &idx, [1, 5]).unwrap_err().to_string();
    assert!(
        e.starts_with("poolgrad::candle::max_unpool2d: `x` must have dtype F32, F64, F16 or BF16"),
        "{e}"
    );
    Ok(())
}

/// Runs [`second_order_gradients_flow_through_the_pooling`] in a child process of this test
/// binary with `CANDLE_GRAD_DO_NOT_DETACH=1` (candle reads it once per thread, at its first
/// backward; setting it in a running test would race the other tests).
#[test]
fn second_order_runs_in_its_own_process() {
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["second_order_gradients_flow_through_the_pooling", "--exact", "--ignored", "--nocapture"])
        .env("CANDLE_GRAD_DO_NOT_DETACH", "1")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1 passed"), "the child ran no test:\n{stdout}");
}

/// Without `CANDLE_GRAD_DO_NOT_DETACH`, candle detaches gradients: the first-order gradient is
/// the same, and it carries no graph (a penalty built on it does not reach `w`).
#[test]
fn without_the_setting_first_order_is_unchanged() -> Result {
    if std::env::var("CANDLE_GRAD_DO_NOT_DETACH").is_ok() {
        return Ok(());
    }
    let x = var(&[1.0, 5.0, 2.0, 4.0], &[1, 1, 2, 2], DType::F32)?;
    let y = poolgrad::candle::max_pool2d(&x, &MaxPool2dParams::new([1, 2]))?;
    let w = var(&[3.0, -2.0], y.dims(), DType::F32)?;
    let gx = (&y * w.as_tensor())?.sum_all()?.backward()?.get(&x).expect("x takes part").clone();
    assert_eq!(flat::<f32>(&gx)?, [0.0, 3.0, 0.0, -2.0]);
    assert!(gx.sqr()?.sum_all()?.backward()?.get(&w).is_none(), "a detached gradient has no graph");
    Ok(())
}
