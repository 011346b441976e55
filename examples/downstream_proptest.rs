//! A downstream "model" — a hand-written max-pooling layer followed by a linear layer, both with
//! hand-written backwards — checked against poolgrad's testing kit.
//!
//! Run with `cargo run --example downstream_proptest --features proptest`. In a test suite the
//! same checks are one line each inside `proptest!` (see the README, "Testing your model against
//! poolgrad").

use ndarray::{Array2, ArrayD, Axis, IxDyn};
use poolgrad::MaxPool2dParams;
use poolgrad::testing::{
    FiniteDifference, ParamBounds, Shapes, Values, finite_difference_check, max_pool_cases,
};
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The user's pooling layer: 2-D max pooling written by hand (the code under test).
struct MyMaxPool {
    params: MaxPool2dParams,
}

impl MyMaxPool {
    /// Forward of a `[C, H, W]` or `[N, C, H, W]` input: values and flat arg-max indices.
    fn forward(&self, x: &ArrayD<f32>) -> (ArrayD<f32>, ArrayD<i64>) {
        let x4 = if x.ndim() == 3 { x.view().insert_axis(Axis(0)) } else { x.view() };
        let (n, c, h, w) = (x4.shape()[0], x4.shape()[1], x4.shape()[2], x4.shape()[3]);
        let [ho, wo] = self.params.output_size([h, w]).expect("valid parameters");
        let ([kh, kw], [sh, sw], [ph, pw], [dh, dw]) =
            (self.params.kernel(), self.params.stride(), self.params.padding(), self.params.dilation());
        let mut values = Vec::with_capacity(n * c * ho * wo);
        let mut indices = Vec::with_capacity(n * c * ho * wo);
        for b in 0..n {
            for ch in 0..c {
                for oh in 0..ho {
                    for ow in 0..wo {
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
                                let v = x4[[b, ch, ih, iw]];
                                // First maximum wins; a NaN wins and a later NaN replaces it.
                                if best.is_none_or(|(bv, _)| v > bv || v.is_nan()) {
                                    best = Some((v, ih * w + iw));
                                }
                            }
                        }
                        let (v, at) = best.expect("every window reads an input");
                        values.push(v);
                        indices.push(at as i64);
                    }
                }
            }
        }
        let mut dims = x.shape().to_vec();
        let r = dims.len();
        (dims[r - 2], dims[r - 1]) = (ho, wo);
        (
            ArrayD::from_shape_vec(IxDyn(&dims), values).unwrap(),
            ArrayD::from_shape_vec(IxDyn(&dims), indices).unwrap(),
        )
    }

    /// Backward: each output gradient goes to its arg-max, summed where windows overlap.
    fn backward(
        &self,
        grad_output: &ArrayD<f32>,
        input_shape: &[usize],
        indices: &ArrayD<i64>,
    ) -> ArrayD<f32> {
        let mut gx = ArrayD::<f32>::zeros(IxDyn(input_shape));
        let plane = input_shape[input_shape.len() - 2] * input_shape[input_shape.len() - 1];
        let outputs =
            grad_output.shape()[grad_output.ndim() - 2] * grad_output.shape()[grad_output.ndim() - 1];
        let flat = gx.as_slice_mut().unwrap();
        for (e, (&g, &i)) in grad_output.iter().zip(indices.iter()).enumerate() {
            flat[(e / outputs) * plane + i as usize] += g;
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

    fn forward(&self, features: &ArrayD<f32>) -> ndarray::Array1<f32> {
        self.weight.dot(&features.iter().copied().collect::<ndarray::Array1<f32>>())
    }

    /// `dL/df = W^T dL/dy`, shaped like the features.
    fn backward(&self, grad_y: &ndarray::Array1<f32>, feature_shape: &[usize]) -> ArrayD<f32> {
        self.weight.t().dot(grad_y).into_shape_with_order(IxDyn(feature_shape)).unwrap()
    }
}

fn main() {
    let mut runner = TestRunner::new(Config { cases: 128, failure_persistence: None, ..Config::default() });
    let strategy = max_pool_cases::<f32, i64>(
        Shapes { batch: 1..=1, channels: 1..=3, height: 2..=8, width: 2..=8, allow_3d: true },
        ParamBounds { dilation: 1..=2, ..ParamBounds::default() },
        Values::Distinct,
    );
    let fd_checked = std::cell::Cell::new(0);
    let result = runner.run(&strategy, |case| {
        let layer = MyMaxPool { params: case.params };

        // 1. The pooling layer, forward and backward, against the reference: one line each.
        let (values, indices) = layer.forward(&case.input);
        case.check_forward(&values, &indices)?;
        case.check_backward(|g| layer.backward(g, case.input.shape(), &case.indices))?;

        // 2. The whole model's input gradient against finite differences (valid away from ties).
        let linear = MyLinear::new(3, values.len());
        let y = linear.forward(&values);
        let grad_y = y.mapv(|v| 1.0 + v.signum()); // dL/dy of some loss
        let grad_pooled = linear.backward(&grad_y, values.shape());
        let grad_x = layer.backward(&grad_pooled, case.input.shape(), &indices);
        let report = finite_difference_check(
            &case.pooling(),
            &case.input.mapv(f64::from),
            &grad_pooled.mapv(f64::from),
            &grad_x.mapv(f64::from),
            &FiniteDifference { tolerance: 1e-4, ..FiniteDifference::default() },
        )?;
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
