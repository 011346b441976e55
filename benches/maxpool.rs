//! Max pooling with indices and with the Ascend mask (both layouts), forward and backward, on the
//! CPU (divan harness: `cargo bench --bench maxpool`).
//!
//! Shapes are the max-pooling anchor cases of `benches/torch-anchor/bench.py` scaled to a
//! quick run. Timing belongs here and in examples, never in unit tests.

mod common;

use common::{cpu, input};
use divan::{Bencher, black_box};
use ndarray::Array4;
use poolgrad::op::{
    MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask, MaxPool2dWithMaskBackward,
};
use poolgrad::{
    Bitmask, I32Argmax, MaskLayout, MaskMut, MaskRef, MaxPool2dParams, Plan, PoolFloat, TensorMut, TensorRef,
    Workspace,
};

fn main() {
    common::settle();
    divan::main();
}

/// Input shape `(N, C, H, W)` and the pooling.
fn case(index: usize) -> ((usize, usize, usize, usize), MaxPool2dParams) {
    match index {
        // The ResNet stem: k3 s2 p1.
        0 => ((4, 64, 112, 112), MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1])),
        // k2 s2.
        1 => ((4, 128, 56, 56), MaxPool2dParams::new([2, 2])),
        // Batch 1, stride 1, ceil mode.
        _ => (
            (1, 64, 132, 132),
            MaxPool2dParams::new([3, 3]).with_stride([1, 1]).with_padding([1, 1]).with_ceil_mode(true),
        ),
    }
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn indices_backward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    let (shape, params) = case(index);
    let x = input::<T>(shape);
    let p = poolgrad::max_pool2d_with_indices(&x, &params).unwrap();
    let mut gi = Array4::<T>::zeros(shape);
    let device = cpu(THREADS);
    let mut ws = Workspace::new(&device, 1 << 24).unwrap();
    bencher.bench_local(|| {
        let op = MaxPool2dWithIndicesBackward {
            grad_output: TensorRef::from_array(&p.output).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            indices: TensorRef::from_array(&p.indices).unwrap(),
            params,
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&gi);
    });
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn indices_forward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    let (shape, params) = case(index);
    let x = input::<T>(shape);
    let p = poolgrad::max_pool2d_with_indices(&x, &params).unwrap();
    let (mut o, mut i) = (p.output, p.indices);
    let device = cpu(THREADS);
    let mut ws = Workspace::new(&device, 1 << 24).unwrap();
    bencher.bench_local(|| {
        let op = MaxPool2dWithIndices {
            input: TensorRef::from_array(&x).unwrap(),
            params,
            output: TensorMut::from_array(&mut o).unwrap(),
            indices: TensorMut::from_array(&mut i).unwrap(),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&o);
    });
}

fn mask_backward<T: PoolFloat, L: MaskLayout>(bencher: Bencher, index: usize, threads: usize) {
    let (shape, params) = case(index);
    let x = input::<T>(shape);
    let p = poolgrad::max_pool2d_with_mask(&x, &params, L::default()).unwrap();
    let mut gi = Array4::<T>::zeros(shape);
    let device = cpu(threads);
    let mut ws = Workspace::new(&device, 1 << 24).unwrap();
    bencher.bench_local(|| {
        let op = MaxPool2dWithMaskBackward {
            grad_output: TensorRef::from_array(&p.output).unwrap(),
            self_: TensorRef::from_array(&x).unwrap(),
            mask: MaskRef::new(TensorRef::from_array(p.mask.as_array()).unwrap(), L::default()),
            params,
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&gi);
    });
}

fn mask_forward<T: PoolFloat, L: MaskLayout>(bencher: Bencher, index: usize, threads: usize) {
    let (shape, params) = case(index);
    let x = input::<T>(shape);
    let p = poolgrad::max_pool2d_with_mask(&x, &params, L::default()).unwrap();
    let (mut o, mut m) = (p.output, p.mask.into_array());
    let device = cpu(threads);
    let mut ws = Workspace::new(&device, 1 << 24).unwrap();
    bencher.bench_local(|| {
        let op = MaxPool2dWithMask {
            input: TensorRef::from_array(&x).unwrap(),
            params,
            output: TensorMut::from_array(&mut o).unwrap(),
            mask: MaskMut::new(TensorMut::from_array(&mut m).unwrap(), L::default()),
        };
        Plan::new(&device, op).unwrap().bind(&mut ws).unwrap().run().unwrap();
        black_box(&m);
    });
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn i32argmax_backward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    mask_backward::<T, I32Argmax>(bencher, index, THREADS);
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn bitmask_backward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    mask_backward::<T, Bitmask>(bencher, index, THREADS);
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn i32argmax_forward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    mask_forward::<T, I32Argmax>(bencher, index, THREADS);
}

#[divan::bench(types = [f32, half::bf16], args = [0, 1, 2], consts = [1, 2])]
fn bitmask_forward<T: PoolFloat, const THREADS: usize>(bencher: Bencher, index: usize) {
    mask_forward::<T, Bitmask>(bencher, index, THREADS);
}
