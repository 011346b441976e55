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

/// Waits 0.6 s before the first benchmark. On this project's machine a fresh process ran
/// 2-thread kernels about as slowly as 1-thread ones for its first 0.3 to 0.5 s, whenever its
/// threads were made (see `settle` in `examples/bench.rs`). A bench process that slept 0.6 s
/// before making its pool did not: `adaptive_ovl_f32`, 2 threads, 1.47 to 2.07 ms over 5 runs
/// against 2.72 to 3.55 ms without.
pub fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(600));
}
