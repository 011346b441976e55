//! Training a small candle model through poolgrad's pooling: `cargo run --example candle_train
//! --features candle`.
//!
//! The model (no convolution): a per-channel scale and shift, a ResNet stem's max pool (kernel 3,
//! stride 2, padding 1: candle's own `max_pool2d` has no backward for it), an adaptive max pool to
//! 1x1 (candle has none), and a linear layer to two outputs, with a squared-error loss against
//! fixed targets. A few SGD steps lower the loss; before them, the autograd gradient of every
//! parameter is checked against central finite differences of the loss.

use candle_core::{Device, Tensor, Var};
use poolgrad::MaxPool2dParams;

const BATCH: usize = 4;
const CHANNELS: usize = 3;
const SIDE: usize = 12;
const OUTPUTS: usize = 2;

#[path = "common/xorshift.rs"]
mod xorshift;
use xorshift::noise;

struct Model {
    scale: Var,  // [1, C, 1, 1]
    shift: Var,  // [1, C, 1, 1]
    weight: Var, // [C, OUTPUTS]
}

impl Model {
    fn new(device: &Device) -> candle_core::Result<Self> {
        Ok(Self {
            scale: Var::from_vec(vec![1.0f64; CHANNELS], (1, CHANNELS, 1, 1), device)?,
            shift: Var::from_vec(vec![0.0f64; CHANNELS], (1, CHANNELS, 1, 1), device)?,
            weight: Var::from_vec(noise(CHANNELS * OUTPUTS, 3), (CHANNELS, OUTPUTS), device)?,
        })
    }

    fn parameters(&self) -> [&Var; 3] {
        [&self.scale, &self.shift, &self.weight]
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
        let h = x.broadcast_mul(&self.scale)?.broadcast_add(&self.shift)?;
        let h = poolgrad::candle::max_pool2d(&h, &stem)?; // [B, C, 6, 6]
        let h = poolgrad::candle::adaptive_max_pool2d(&h, [1, 1])?; // [B, C, 1, 1]
        h.flatten_from(1)?.matmul(&self.weight) // [B, OUTPUTS]
    }

    fn loss(&self, x: &Tensor, target: &Tensor) -> candle_core::Result<Tensor> {
        (self.forward(x)? - target)?.sqr()?.mean_all()
    }
}

/// Central differences of the loss for every parameter element, against autograd: the largest
/// relative difference. (Max pooling is piecewise linear; with continuous random inputs no
/// maximum changes within ±h.)
fn check_gradients(model: &Model, x: &Tensor, target: &Tensor) -> candle_core::Result<f64> {
    let grads = model.loss(x, target)?.backward()?;
    let h = 1e-6;
    let mut worst = 0.0f64;
    for p in model.parameters() {
        let autograd = grads.get(p).expect("every parameter takes part").flatten_all()?.to_vec1::<f64>()?;
        let original = p.as_tensor().flatten_all()?.to_vec1::<f64>()?;
        for (i, &analytic) in autograd.iter().enumerate() {
            let at = |delta: f64| -> candle_core::Result<f64> {
                let mut v = original.clone();
                v[i] += delta;
                p.set(&Tensor::from_vec(v, p.shape(), p.device())?)?;
                model.loss(x, target)?.to_scalar::<f64>()
            };
            let numeric = (at(h)? - at(-h)?) / (2.0 * h);
            worst = worst.max((numeric - analytic).abs() / numeric.abs().max(1e-3));
        }
        p.set(&Tensor::from_vec(original, p.shape(), p.device())?)?;
    }
    Ok(worst)
}

fn main() -> candle_core::Result<()> {
    let device = Device::Cpu;
    let x =
        Tensor::from_vec(noise(BATCH * CHANNELS * SIDE * SIDE, 1), (BATCH, CHANNELS, SIDE, SIDE), &device)?;
    let target = Tensor::from_vec(noise(BATCH * OUTPUTS, 2), (BATCH, OUTPUTS), &device)?;
    let model = Model::new(&device)?;

    let worst = check_gradients(&model, &x, &target)?;
    println!("finite differences vs autograd: largest relative difference {worst:.1e}");
    if worst > 1e-6 {
        return Err(candle_core::Error::Msg(format!("gradient check failed: {worst:e}")));
    }

    let learning_rate = 0.2;
    let first = model.loss(&x, &target)?.to_scalar::<f64>()?;
    let mut loss = first;
    for step in 1..=20 {
        let grads = model.loss(&x, &target)?.backward()?;
        for p in model.parameters() {
            let g = grads.get(p).expect("every parameter takes part");
            p.set(&(p.as_tensor() - (g * learning_rate)?)?)?;
        }
        loss = model.loss(&x, &target)?.to_scalar::<f64>()?;
        if step % 5 == 0 {
            println!("step {step:2}: loss {loss:.6}");
        }
    }
    println!("loss {first:.6} -> {loss:.6} in 20 SGD steps (f64; the pools are poolgrad's)");
    if loss.is_nan() || loss >= 0.5 * first {
        return Err(candle_core::Error::Msg(format!("the loss did not halve: {first} -> {loss}")));
    }
    Ok(())
}
