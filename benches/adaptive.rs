//! Adaptive max pooling, forward and backward, on the CPU (divan harness: `cargo bench`).
//!
//! Shapes are the anchor cases of `benches/torch-anchor/bench.py` scaled to a quick run.
//! Timing belongs here and in examples, never in unit tests.

mod common;

use common::{cpu, input};
use divan::{Bencher, black_box};
use ndarray::Array4;
use poolgrad::op::{AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward};
use poolgrad::{Plan, PoolFloat, TensorMut, TensorRef, Workspace};

fn main() {
    common::settle();
    divan::main();
}

/// Input shape `(N, C, H, W)` and output size `[Ho, Wo]`.
type Case = ((usize, usize, usize, usize), [usize; 2]);

const SHAPES: [Case; 3] = [
    ((8, 256, 28, 28), [7, 7]), // divisible
    ((8, 256, 30, 30), [7, 7]), // overlapping windows
    ((16, 2048, 7, 7), [1, 1]), // global pooling
];

#[divan::bench(types = [f32, half::bf16, half::f16], args = [0, 1, 2], consts = [1, 2])]
fn backward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, case: usize) {
    let (shape, out) = SHAPES[case];
    let x = input::<T>(shape);
    let p = poolgrad::adaptive_max_pool2d(&x, out).unwrap();
    let mut gi = Array4::<T>::zeros(shape);
    let device = cpu(THREADS);
    let mut ws = Workspace::new(&device, 1 << 24).unwrap();
    bencher.bench_local(|| {
        let op = AdaptiveMaxPool2dBackward {
            grad_output: TensorRef::from_array(&p.output).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            indices: TensorRef::from_array(&p.indices).unwrap(),
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&gi);
    });
}

#[divan::bench(types = [f32, half::bf16, half::f16], args = [0, 1, 2], consts = [1, 2])]
fn forward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, case: usize) {
    let (shape, out) = SHAPES[case];
    let x = input::<T>(shape);
    let (n, c, _, _) = shape;
    let mut o = Array4::<T>::zeros((n, c, out[0], out[1]));
    let mut i = Array4::<i64>::zeros((n, c, out[0], out[1]));
    let device = cpu(THREADS);
    let mut ws = Workspace::new(&device, 0).unwrap();
    bencher.bench_local(|| {
        let op = AdaptiveMaxPool2d {
            input: TensorRef::from_array(&x).unwrap(),
            output_size: out,
            output: TensorMut::from_array(&mut o).unwrap(),
            indices: TensorMut::from_array(&mut i).unwrap(),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&o);
    });
}
