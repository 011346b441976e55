//! Inputs and thread pools shared by the divan benchmarks.

use ndarray::Array4;
use poolgrad::PoolFloat;
use poolgrad::device::cpu::{Cpu, Parallelism};

/// A deterministic input with few ties (values 0 to 100 in a pattern over all four axes).
pub fn input<T: PoolFloat>(shape: (usize, usize, usize, usize)) -> Array4<T> {
    Array4::from_shape_fn(shape, |(n, c, h, w)| {
        let v = ((n * 31 + c * 17 + h * 7 + w * 3) % 101) as f32;
        T::from_acc(num_traits::cast(v).unwrap())
    })
}

/// A CPU device with its own pool of `threads` threads.
pub fn cpu(threads: usize) -> Cpu {
    Cpu::new(Parallelism::Threads(threads.try_into().unwrap())).unwrap()
}
