//! A downstream "model" — a hand-written max-pooling layer followed by a linear layer, both with
//! hand-written backwards, on `Array4` — checked against poolgrad's testing kit.
//!
//! Run with `cargo run --example downstream_proptest --features proptest`. In a test suite the
//! same checks are one line each inside `proptest!` (see the README, "Testing your model
//! against poolgrad").

use ndarray::{Array1, Array2, Array4, Ix4};
use poolgrad::MaxPool2dParams;
use poolgrad::testing::proptest::test_runner::{Config, TestCaseError, TestRunner};
use poolgrad::testing::{FiniteDifference, ParamBounds, Shapes, Values, check_gradient, max_pool_cases};

/// The user's pooling layer: 2-D max pooling written by hand (the code under test).
struct MyMaxPool {
    params: MaxPool2dParams,
}

impl MyMaxPool {
    /// Forward of an `[N, C, H, W]` input: values and flat arg-max indices.
    fn forward(&self, x: &Array4<f32>) -> (Array4<f32>, Array4<i64>) {
        let (n, c, h, w) = x.dim();
        let [ho, wo] = self.params.output_size([h, w]).expect("valid parameters");
        let ([kh, kw], [sh, sw], [ph, pw], [dh, dw]) =
            (self.params.kernel(), self.params.stride(), self.params.padding(), self.params.dilation());
        let mut values = Array4::zeros((n, c, ho, wo));
        let mut indices = Array4::zeros((n, c, ho, wo));
        for ((b, ch, oh, ow), v) in values.indexed_iter_mut() {
            let mut best: Option<(f32, usize)> = None;
            for i in 0..kh {
                for j in 0..kw {
                    let (ih, iw) = (
                        (oh * sh + i * dh) as isize - ph as isize,
                        (ow * sw + j * dw) as isize - pw as isize,
                    );
                    if ih < 0 || iw < 0 || ih >= h as isize || iw >= w as isize {
                        continue;
                    }
                    let (ih, iw) = (ih as usize, iw as usize);
                    let x = x[[b, ch, ih, iw]];
                    // First maximum wins; a NaN wins and a later NaN replaces it.
                    if best.is_none_or(|(bv, _)| x > bv || x.is_nan()) {
                        best = Some((x, ih * w + iw));
                    }
                }
            }
            let (value, at) = best.expect("every window reads an input");
            *v = value;
            indices[[b, ch, oh, ow]] = at as i64;
        }
        (values, indices)
    }

    /// Backward: each output gradient goes to its arg-max, summed where windows overlap.
    fn backward(&self, grad_output: &Array4<f32>, input: &Array4<f32>, indices: &Array4<i64>) -> Array4<f32> {
        let mut gx = Array4::zeros(input.raw_dim());
        let w = input.dim().3;
        for ((b, c, oh, ow), &i) in indices.indexed_iter() {
            gx[[b, c, i as usize / w, i as usize % w]] += grad_output[[b, c, oh, ow]];
        }
        gx
    }
}

/// The user's linear layer on the flattened pooled features: `y = W f`.
struct MyLinear {
    weight: Array2<f32>,
}

impl MyLinear {
    fn new(outputs: usize, features: usize) -> Self {
        let weight = Array2::from_shape_fn((outputs, features), |(o, f)| ((o * 5 + f * 3) % 7) as f32 - 3.0);
        MyLinear { weight }
    }

    fn forward(&self, features: &Array4<f32>) -> Array1<f32> {
        self.weight.dot(&features.iter().copied().collect::<Array1<f32>>())
    }

    /// `dL/df = W^T dL/dy`, shaped like the features.
    fn backward(&self, grad_y: &Array1<f32>, feature_shape: (usize, usize, usize, usize)) -> Array4<f32> {
        self.weight.t().dot(grad_y).into_shape_with_order(feature_shape).unwrap()
    }
}

fn main() {
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    let strategy = max_pool_cases::<f32, i64, Ix4>(
        Shapes { batch: 1..=1, channels: 1..=3, height: 2..=8, width: 2..=8 },
        ParamBounds { dilation: 1..=2, ..ParamBounds::default() },
        Values::Distinct,
    );
    let fd_checked = std::cell::Cell::new(0);
    let result = runner.run(&strategy, |case| {
        let layer = MyMaxPool { params: case.params };

        // 1. The pooling layer, forward and backward, against the reference: one line each.
        let (values, indices) = layer.forward(&case.input);
        case.check_forward(&values, &indices)?;
        case.check_backward(|g| layer.backward(g, &case.input, &case.indices))?;

        // 2. The whole model's input gradient against finite differences of its loss
        //    `L = Σ y` (kinks, where a window has a tie, are skipped).
        let linear = MyLinear::new(3, values.len());
        let loss = |x: &Array4<f32>| linear.forward(&layer.forward(x).0).sum();
        let grad_y = Array1::ones(3);
        let grad_pooled = linear.backward(&grad_y, values.dim());
        let grad_x = layer.backward(&grad_pooled, &case.input, &indices);
        let report =
            check_gradient(loss, &case.input, &grad_x, &FiniteDifference::for_dtype(poolgrad::DType::F32))?;
        fd_checked.set(fd_checked.get() + report.checked);
        Ok::<(), TestCaseError>(())
    });
    match result {
        Ok(()) => println!(
            "the hand-written max pooling + linear model passed 128 generated cases \
             (forward, backward, invariants, linearity; {} inputs checked by finite differences)",
            fd_checked.get()
        ),
        Err(e) => {
            eprintln!("the kit found a bug in the model: {e}");
            std::process::exit(1);
        }
    }
}
