//! Training a small burn model through poolgrad's adaptive max pooling (which burn lacks):
//! `cargo run --example burn_adaptive --features burn`.
//!
//! The model (no convolution), on burn 0.22's ndarray backend with autodiff, in f64: a
//! per-channel scale and shift, a ResNet stem's max pool (kernel 3, stride 2, padding 1), an
//! adaptive max pool to 1x1, and a linear layer to two outputs, with a squared-error loss against
//! fixed targets. Before training, every parameter's autodiff gradient is checked against central
//! finite differences of the loss; then a few SGD steps lower the loss.

// burn 0.22 deprecates its ndarray backend in favour of burn-flex; poolgrad's bridge is for the
// ndarray backend, whose arrays it reads in place.
#![allow(deprecated)]

use burn_tensor::{DType, Device, Tensor, TensorCreationOptions, TensorData};
use poolgrad::MaxPool2dParams;

const BATCH: usize = 4;
const CHANNELS: usize = 3;
const SIDE: usize = 12;
const OUTPUTS: usize = 2;

#[path = "common/xorshift.rs"]
mod xorshift;
use xorshift::noise;

fn f64_tensor<const D: usize>(values: Vec<f64>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(
        TensorData::new(values, shape),
        TensorCreationOptions::new(device.clone()).with_dtype(DType::F64),
    )
}

fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().try_to_vec::<f64>().expect("f64 tensor")
}

/// Parameters as plain values; each step builds autodiff tensors from them.
#[derive(Clone)]
struct Model {
    scale: Vec<f64>,  // [1, C, 1, 1]
    shift: Vec<f64>,  // [1, C, 1, 1]
    weight: Vec<f64>, // [C, OUTPUTS]
}

struct Tracked {
    scale: Tensor<4>,
    shift: Tensor<4>,
    weight: Tensor<2>,
}

impl Model {
    fn track(&self, device: &Device) -> Tracked {
        Tracked {
            scale: f64_tensor(self.scale.clone(), [1, CHANNELS, 1, 1], device).require_grad(),
            shift: f64_tensor(self.shift.clone(), [1, CHANNELS, 1, 1], device).require_grad(),
            weight: f64_tensor(self.weight.clone(), [CHANNELS, OUTPUTS], device).require_grad(),
        }
    }
}

fn loss(p: &Tracked, x: &Tensor<4>, target: &Tensor<2>) -> Result<Tensor<1>, poolgrad::burn::Error> {
    let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    let h = x.clone() * p.scale.clone() + p.shift.clone();
    let h = poolgrad::burn::max_pool2d(h, &stem)?; // [B, C, 6, 6]
    let h = poolgrad::burn::adaptive_max_pool2d(h, [1, 1])?; // [B, C, 1, 1]
    let y = h.reshape([BATCH, CHANNELS]).matmul(p.weight.clone()); // [B, OUTPUTS]
    Ok((y - target.clone()).powi_scalar(2).mean())
}

fn loss_value(
    model: &Model,
    x: &Tensor<4>,
    target: &Tensor<2>,
    device: &Device,
) -> Result<f64, poolgrad::burn::Error> {
    Ok(to_vec(loss(&model.track(device), x, target)?)[0])
}

/// The gradient of every parameter, by autodiff.
fn gradients(
    model: &Model,
    x: &Tensor<4>,
    target: &Tensor<2>,
    device: &Device,
) -> Result<[Vec<f64>; 3], poolgrad::burn::Error> {
    let p = model.track(device);
    let grads = loss(&p, x, target)?.backward();
    let take = |g: Option<Vec<f64>>| g.expect("every parameter takes part");
    Ok([
        take(p.scale.grad(&grads).map(to_vec)),
        take(p.shift.grad(&grads).map(to_vec)),
        take(p.weight.grad(&grads).map(to_vec)),
    ])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::ndarray().autodiff();
    let x = f64_tensor(noise(BATCH * CHANNELS * SIDE * SIDE, 1), [BATCH, CHANNELS, SIDE, SIDE], &device);
    let target = f64_tensor(noise(BATCH * OUTPUTS, 2), [BATCH, OUTPUTS], &device);
    let mut model = Model {
        scale: vec![1.0; CHANNELS],
        shift: vec![0.0; CHANNELS],
        weight: noise(CHANNELS * OUTPUTS, 3),
    };

    // Central differences for every parameter element. (Max pooling is piecewise linear; with
    // continuous random inputs no maximum changes within ±h.)
    let autodiff = gradients(&model, &x, &target, &device)?;
    let h = 1e-6;
    let mut worst = 0.0f64;
    for (which, analytic) in autodiff.iter().enumerate() {
        for (i, &a) in analytic.iter().enumerate() {
            let at = |delta: f64| {
                let mut m = model.clone();
                [&mut m.scale, &mut m.shift, &mut m.weight][which][i] += delta;
                loss_value(&m, &x, &target, &device)
            };
            let numeric = (at(h)? - at(-h)?) / (2.0 * h);
            worst = worst.max((numeric - a).abs() / numeric.abs().max(1e-3));
        }
    }
    println!("finite differences vs autodiff: largest relative difference {worst:.1e}");
    if worst > 1e-6 {
        return Err(format!("gradient check failed: {worst:e}").into());
    }

    let learning_rate = 0.2;
    let first = loss_value(&model, &x, &target, &device)?;
    let mut last = first;
    for step in 1..=20 {
        let [gs, gb, gw] = gradients(&model, &x, &target, &device)?;
        for (p, g) in [(&mut model.scale, gs), (&mut model.shift, gb), (&mut model.weight, gw)] {
            p.iter_mut().zip(g).for_each(|(v, g)| *v -= learning_rate * g);
        }
        last = loss_value(&model, &x, &target, &device)?;
        if step % 5 == 0 {
            println!("step {step:2}: loss {last:.6}");
        }
    }
    println!("loss {first:.6} -> {last:.6} in 20 SGD steps (f64; the pools are poolgrad's)");
    if last.is_nan() || last >= 0.5 * first {
        return Err(format!("the loss did not halve: {first} -> {last}").into());
    }
    Ok(())
}
