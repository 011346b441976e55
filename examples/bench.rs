//! Times poolgrad on the benchmark shapes of `benches/torch-anchor/bench.py` and prints one
//! JSON line per case, to read side by side with the anchor's lines from the same machine.
//!
//! ```sh
//! cargo run --release --example bench -- [--threads N] [--reps R] [--plan-only] [--no-floors] [--settle MS] [--case NAME]...
//! ```
//!
//! To profile a kernel (`perf record`, `valgrind --tool=callgrind`), pass `--plan-only
//! --no-floors`: the process then runs the plans alone, without the allocating functions and
//! without the floors, which move as much memory as the kernels.
//!
//! Each line has `name`, `median_s` (the plan API on preallocated outputs, the way a training
//! loop calls it), `median_fn_s` (the allocating free function, the way PyTorch's op is timed),
//! `tmin_bytes` (`docs/design.md` section 3: `H*W*b + Ho*Wo*(b+i)` per plane, with the index bytes `i` of
//! the variant), `gbps_on_tmin` (on `median_s`) and `floor_s`: the memory floor, the kernel's
//! memory traffic without its arithmetic (see `floor` and `forward_floor`). The `copy` case measures the
//! machine's copy bandwidth in this process, so each figure can be read as a fraction of it. (With
//! 2 threads each `memcpy` moves 128 MiB, below glibc's non-temporal threshold on this project's
//! machines, 192 MiB: it stores through the cache, each line written is first read, as in the
//! kernels.) Max-pool backward cases run with `i64` indices (the anchor's names) and with each
//! mask layout (`_i32argmax`, `_bitmask`); `fwd_` cases time the forwards. Kernels, copy and
//! floors run on one thread pool, which is first kept busy for `--settle` milliseconds (500 by
//! default; see `settle`).

use std::time::Instant;

use ndarray::{Array3, Array4, Array5, ArrayD, IxDyn};
use poolgrad::device::cpu::{Cpu, Parallelism};
use poolgrad::op::{
    AdaptiveMaxPool2d, AdaptiveMaxPool2dBackward, AdaptiveMaxPool3d, AdaptiveMaxPool3dBackward,
    MaxPool2dDoubleBackward, MaxPool2dWithIndices, MaxPool2dWithIndicesBackward, MaxPool2dWithMask,
    MaxPool2dWithMaskBackward, MaxPool3dWithIndices, MaxPool3dWithIndicesBackward, MaxUnpool2d,
    MaxUnpool2dBackward,
};
use poolgrad::{
    Bitmask, I32Argmax, MaskLayout, MaskMut, MaskRef, MaxPool1dParams, MaxPool2dParams, MaxPool3dParams,
    Plan, PoolFloat, TensorMut, TensorRef, Workspace,
};

#[derive(Clone, Copy, Debug)]
enum Kind {
    Adaptive([usize; 2]),
    MaxPool { k: usize, s: usize, p: usize, ceil: bool },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum DType {
    F32,
    F16,
    BF16,
}

/// The anchor's cases, then ours alone: name, kind, dtype, shape.
const CASES: [(&str, DType, [usize; 4], Kind); 14] = [
    ("adaptive_div_f32", DType::F32, [32, 256, 28, 28], Kind::Adaptive([7, 7])),
    ("adaptive_ovl_f32", DType::F32, [32, 256, 30, 30], Kind::Adaptive([7, 7])),
    ("adaptive_ovl_bf16", DType::BF16, [32, 256, 30, 30], Kind::Adaptive([7, 7])),
    ("adaptive_ovl_f16", DType::F16, [32, 256, 30, 30], Kind::Adaptive([7, 7])),
    ("adaptive_global_f32", DType::F32, [64, 2048, 7, 7], Kind::Adaptive([1, 1])),
    ("maxpool_stem_f32", DType::F32, [32, 64, 112, 112], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
    ("maxpool_stem_bf16", DType::BF16, [32, 64, 112, 112], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
    ("maxpool_k2_f32", DType::F32, [32, 128, 56, 56], Kind::MaxPool { k: 2, s: 2, p: 0, ceil: false }),
    ("maxpool_s1_b1_f32", DType::F32, [1, 64, 264, 264], Kind::MaxPool { k: 3, s: 1, p: 1, ceil: true }),
    // Not in the anchor: a single plane, fewer planes than threads.
    ("maxpool_plane_f32", DType::F32, [1, 1, 2048, 2048], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
    // Not in the anchor: the half types on the smallest planes (49 inputs, one gradient), where
    // per-plane costs and scratch shared between threads would show first.
    ("adaptive_global_bf16", DType::BF16, [64, 2048, 7, 7], Kind::Adaptive([1, 1])),
    ("adaptive_global_f16", DType::F16, [64, 2048, 7, 7], Kind::Adaptive([1, 1])),
    // Not in the anchor: a batch of 3-channel planes, whose `Bitmask` blocks are narrow enough to
    // gather, in a half type.
    ("maxpool_rgb_bf16", DType::BF16, [32, 3, 224, 224], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
    // The same in `f16`, whose gathered sums round through F16C in the x86-64-v3 copy.
    ("maxpool_rgb_f16", DType::F16, [32, 3, 224, 224], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
];

/// The 3-D cases, also in the anchor: name, kind (adaptive output, or a cubic kernel with
/// stride and padding), dtype, shape `[N, C, D, H, W]`. A video batch (16 frames of 56x56, 64
/// channels) pooled as video networks do after their stem.
const VOLUME_CASES: [(&str, DType, [usize; 5], Kind); 3] = [
    ("maxpool3d_video_f32", DType::F32, [8, 64, 16, 56, 56], Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false }),
    (
        "maxpool3d_video_bf16",
        DType::BF16,
        [8, 64, 16, 56, 56],
        Kind::MaxPool { k: 3, s: 2, p: 1, ceil: false },
    ),
    ("adaptive3d_video_f32", DType::F32, [8, 64, 16, 56, 56], Kind::Adaptive([7, 7])),
];

/// A 1-D case, also in the anchor: a batch of sequences (16 x 256 channels x 8000 steps, a
/// second of 8 kHz audio features) pooled k3 s2 p1.
const LINE_CASE: (&str, [usize; 3], [usize; 3]) = ("maxpool1d_audio_f32", [16, 256, 8000], [3, 2, 1]);

/// An unpooling case, also in the anchor: SegNet's decoder unpooling a k2 s2 pooling of
/// `[8, 64, 224, 224]`; the backward row times the unpooling's backward (a gather of the last of
/// equal indices), `fwd_` the unpooling, `double_backward_` the pooling's double backward.
const UNPOOL_CASE: (&str, [usize; 4]) = ("unpool2d_segnet_f32", [8, 64, 224, 224]);

struct Args {
    threads: usize,
    reps: usize,
    cases: Vec<String>,
    /// Skip the free-function timings (for profiling the kernels alone).
    plan_only: bool,
    /// Skip the memory floors too, so that a profile of the process holds the plans alone.
    no_floors: bool,
    /// How long every thread of the pool spins before the first case ([`settle`]).
    settle_ms: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args =
        Args { threads: 2, reps: 15, cases: Vec::new(), plan_only: false, no_floors: false, settle_ms: 500 };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--threads" => {
                args.threads = value("--threads")?.parse().map_err(|e| format!("--threads: {e}"))?
            }
            "--reps" => args.reps = value("--reps")?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--case" => args.cases.push(value("--case")?),
            "--plan-only" => args.plan_only = true,
            "--no-floors" => args.no_floors = true,
            "--settle" => {
                args.settle_ms = value("--settle")?.parse().map_err(|e| format!("--settle: {e}"))?
            }
            "--help" | "-h" => {
                return Err(
                    "usage: bench [--threads N] [--reps R] [--plan-only] [--no-floors] [--settle MS] [--case NAME]..."
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(args)
}

/// Deterministic values in [-1, 1) (xorshift), like the anchor's `randn` free of ties.
fn random<T: PoolFloat>(shape: &[usize], seed: u64) -> ArrayD<T> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let u = (state >> 40) as f32 / (1u64 << 24) as f32;
        T::from_acc(num_traits::cast(2.0 * u - 1.0).unwrap())
    })
}

static PLAN_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn plan_only() -> bool {
    PLAN_ONLY.load(std::sync::atomic::Ordering::Relaxed)
}

static NO_FLOORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the cases measure their memory floors (all but `--no-floors` runs): a floor zeroes
/// and reads as much memory as the kernel, so a profile of a run with floors is half floors.
fn floors() -> bool {
    !NO_FLOORS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The one thread pool of this run: the kernels' (through `Cpu`), the copy's and the floors'.
static POOL: std::sync::OnceLock<std::sync::Arc<rayon::ThreadPool>> = std::sync::OnceLock::new();

fn pool() -> &'static rayon::ThreadPool {
    POOL.get().expect("the pool is built first in main")
}

/// Keeps every thread of the pool busy for `ms` milliseconds before the first case.
///
/// On this project's machine (2 virtual CPUs, shared) a fresh process ran its first kernels on 2
/// threads about as slowly as on 1, for its first 0.3 to 0.5 s, whatever the buffers: over 60
/// repetitions of `maxpool_plane_f32` alone, the medians of each 15 were 3.1 to 3.8 ms until
/// then, and 1.5 to 1.7 ms after. Sleeping 0.3 s first removed most of it, spinning the pool's
/// threads for 0.5 s all of it. It goes with the process's age: a pool made after a sleep of
/// 0.6 s ran at full speed at once. Without this, whichever case ran first (every run with one
/// `--case`) was timed in that window. `--settle 0` turns it off.
fn settle(ms: u64) {
    let until = Instant::now() + std::time::Duration::from_millis(ms);
    pool().broadcast(|_| {
        let mut spins = 0u64;
        while Instant::now() < until {
            spins = std::hint::black_box(spins + 1);
        }
    });
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Median seconds of `reps` runs after two warm-up runs.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// One JSON line: `median_s`, each of `fields` that has a value, the minimum traffic and the
/// bandwidth on it.
fn report(name: &str, threads: usize, median_s: f64, fields: &[(&str, Option<f64>)], tmin: f64) {
    let fields: String =
        fields.iter().filter_map(|(key, t)| t.map(|t| format!(", \"{key}\": {t:.6e}"))).collect();
    println!(
        "{{\"name\": \"{name}\", \"threads\": {threads}, \"median_s\": {median_s:.6e}{fields}, \"tmin_bytes\": {tmin:.0}, \"gbps_on_tmin\": {:.2}}}",
        tmin / median_s / 1e9
    );
}

/// The allocation floor of a free function that returns `bytes` of fresh arrays: allocate them
/// zeroed as the crate does (`calloc`: fresh pages from the kernel above glibc's mmap threshold,
/// memory `calloc` clears itself below it), touch every page on the pool's threads (as the
/// kernels first touch it), and free them, in this process. An allocating function can cost no
/// less than its plan plus this.
fn alloc_floor(reps: usize, bytes: usize) -> f64 {
    use rayon::prelude::*;
    let page = 4096;
    time(reps, || {
        let mut v = bytemuck::zeroed_vec::<u8>(bytes);
        let per = bytes.div_ceil(pool().current_num_threads()).div_ceil(page).max(1) * page;
        pool().install(|| {
            v.par_chunks_mut(per).for_each(|part| part.iter_mut().step_by(page).for_each(|b| *b = 1))
        });
        std::hint::black_box(&v);
    })
}

/// The memory floor of a backward: the memory traffic of a scatter that builds each plane in
/// cache (the lines of `grad_input` are read for ownership and written back; safe Rust has no
/// non-temporal store) and streams its inputs (`reads`: the gradients and the indices or mask)
/// once, with no arithmetic, on the same number of threads. A kernel near it is bound by
/// memory, one well above it by its own work.
///
/// It is the faster of two ways to move those bytes: zero `grad_input` in pieces of whole
/// planes, at least 64 KiB, each followed by reading its share of the inputs; or zero it 2 KiB
/// at a time, each piece followed by its share (as the kernels zero large planes a few rows
/// ahead of their sums). The first suits small planes, where the second's calls cost; the
/// second large ones, which `memset` zeroes with `rep stosb` above 2 KiB, slower here on lines
/// not yet in cache than vector stores interleaved with the reads.
fn floor<T: PoolFloat>(reps: usize, gi: &mut [T], plane: usize, reads: [&[u8]; 2]) -> f64 {
    let planes = (65536 / size_of::<T>()).div_ceil(plane.max(1));
    let whole_planes = traffic(reps, gi, plane * planes, reads);
    let small = traffic(reps, gi, 2048 / size_of::<T>(), reads);
    whole_planes.min(small)
}

/// The memory floor of a forward: reading the input once and writing the outputs (values, and
/// indices or mask) once, with no arithmetic, on the same threads: the input in pieces of 64
/// KiB (at least one per thread), each followed by zeroing its share of each output.
fn forward_floor(reps: usize, input: &[u8], [values, indices]: [&mut [u8]; 2]) -> f64 {
    use rayon::prelude::*;
    let pieces = input.len().div_ceil(65536).max(pool().current_num_threads()).max(1);
    let share = |len: usize| len.div_ceil(pieces).max(1);
    let (per_input, per_values, per_indices) =
        (share(input.len()), share(values.len()), share(indices.len()));
    time(reps, || {
        let mut reads: Vec<&[u8]> = input.chunks(per_input).collect();
        reads.resize(pieces, &[]);
        let (values, indices) = (cut(values, per_values, pieces), cut(indices, per_indices, pieces));
        let sum: u64 = pool().install(|| {
            reads
                .into_par_iter()
                .zip(values)
                .zip(indices)
                .map(|((read, values), indices)| {
                    let sum = read_all(read);
                    values.fill(0);
                    indices.fill(0);
                    sum
                })
                .reduce(|| 0, u64::wrapping_add)
        });
        std::hint::black_box(sum);
    })
}

/// A backward row's floors, measured in this order: the memory floor of writing `gi` in planes
/// of `plane` elements from `reads` (unless `--no-floors`), then the allocation floor of `gi`
/// (unless `--plan-only`).
fn backward_floors<T: PoolFloat>(
    reps: usize,
    gi: &mut [T],
    plane: usize,
    reads: [&[u8]; 2],
) -> [Option<f64>; 2] {
    let t_floor = floors().then(|| floor(reps, gi, plane, reads));
    let t_alloc = (!plan_only()).then(|| alloc_floor(reps, size_of_val(gi)));
    [t_floor, t_alloc]
}

/// A forward row's floors, measured in this order: the allocation floor of its two outputs
/// (unless `--plan-only`), then the memory floor of reading `input` once and writing them
/// (unless `--no-floors`).
fn forward_floors(reps: usize, input: &[u8], outputs: [&mut [u8]; 2]) -> [Option<f64>; 2] {
    let t_alloc = (!plan_only()).then(|| alloc_floor(reps, outputs[0].len() + outputs[1].len()));
    let t_floor = floors().then(|| forward_floor(reps, input, outputs));
    [t_floor, t_alloc]
}

/// The fields of a row beside its plan's median: the free function's, and the floors.
fn row_fields(t_fn: Option<f64>, [t_floor, t_alloc]: [Option<f64>; 2]) -> [(&'static str, Option<f64>); 3] {
    [("median_fn_s", t_fn), ("floor_s", t_floor), ("alloc_floor_s", t_alloc)]
}

/// Reads every byte of `read` once (8 at a time where aligned), with no arithmetic worth the
/// name: a wrapping sum, so that the reads cannot be optimised away.
fn read_all(read: &[u8]) -> u64 {
    let (head, words, tail) = bytemuck::pod_align_to::<u8, u64>(read);
    let bytes = head.iter().chain(tail).fold(0u64, |s, &b| s.wrapping_add(u64::from(b)));
    words.iter().fold(bytes, |s, &w| s.wrapping_add(w))
}

/// `buffer` cut into `pieces` shares of `per` bytes (the last ones possibly empty).
fn cut(buffer: &mut [u8], per: usize, pieces: usize) -> Vec<&mut [u8]> {
    let mut shares: Vec<&mut [u8]> = buffer.chunks_mut(per).collect();
    shares.resize_with(pieces, Default::default);
    shares
}

/// The time to zero `grad_input` `piece` elements at a time, each piece followed by reading its
/// share of each of `reads`, every thread taking an equal run of pieces.
fn traffic<T: PoolFloat>(reps: usize, gi: &mut [T], piece: usize, reads: [&[u8]; 2]) -> f64 {
    use rayon::prelude::*;
    let (threads, len) = (pool().current_num_threads(), gi.len());
    let piece = piece.clamp(1, len.div_ceil(threads).max(1));
    let pieces = len.div_ceil(piece);
    // Piece `k` reads its share of each input right after zeroing its stretch of `grad_input`.
    let share = |read: &[u8], k: usize| {
        let at = |k: usize| (read.len() as u64 * k as u64 / pieces as u64) as usize;
        read_all(&read[at(k)..at(k + 1)])
    };
    let per_task = pieces.div_ceil(threads) * piece;
    time(reps, || {
        let sum: u64 = pool().install(|| {
            gi.par_chunks_mut(per_task)
                .enumerate()
                .map(|(task, out)| {
                    let first = task * per_task / piece;
                    out.chunks_mut(piece).enumerate().fold(0u64, |sum, (k, out)| {
                        out.fill(T::zero());
                        sum.wrapping_add(share(reads[0], first + k)).wrapping_add(share(reads[1], first + k))
                    })
                })
                .reduce(|| 0, u64::wrapping_add)
        });
        std::hint::black_box(sum);
    })
}

fn params(kind: Kind) -> MaxPool2dParams {
    match kind {
        Kind::MaxPool { k, s, p, ceil } => {
            MaxPool2dParams::new([k, k]).with_stride([s, s]).with_padding([p, p]).with_ceil_mode(ceil)
        }
        Kind::Adaptive(_) => unreachable!("adaptive cases have no max-pool parameters"),
    }
}

/// Minimum traffic per `docs/design.md` section 3: input plane once, gradient and index per output.
fn tmin<T>(shape: [usize; 4], out: [usize; 2], index_bytes: f64) -> f64 {
    let [n, c, h, w] = shape;
    let b = size_of::<T>() as f64;
    (n * c) as f64 * ((h * w) as f64 * b + (out[0] * out[1]) as f64 * (b + index_bytes))
}

fn to4<T: Clone>(a: ArrayD<T>) -> Array4<T> {
    a.into_dimensionality().expect("4-D")
}

fn run_case<T: PoolFloat>(
    cpu: &Cpu,
    reps: usize,
    name: &str,
    shape: [usize; 4],
    kind: Kind,
    selected: &dyn Fn(&str) -> bool,
) {
    // Build the inputs only when a variant of this case is asked for.
    let variants = [name.to_string(), format!("{name}_i32argmax"), format!("{name}_bitmask")];
    if !variants.iter().any(|v| selected(v) || selected(&format!("fwd_{v}"))) {
        return;
    }
    let threads = cpu.threads();
    let x = to4(random::<T>(&shape, 1));
    let mut ws = Workspace::new(cpu, 0).unwrap();
    let (pooled, out) = match kind {
        Kind::Adaptive(out) => (poolgrad::adaptive_max_pool2d(&x, out).unwrap(), out),
        Kind::MaxPool { .. } => {
            let p = poolgrad::max_pool2d_with_indices(&x, &params(kind)).unwrap();
            let out = [p.output.shape()[2], p.output.shape()[3]];
            (p, out)
        }
    };
    let g = to4(random::<T>(pooled.output.shape(), 2));
    let mut gi = Array4::<T>::zeros(x.raw_dim());

    if selected(name) {
        let t = match kind {
            Kind::Adaptive(_) => time(reps, || {
                let op = AdaptiveMaxPool2dBackward {
                    grad_output: TensorRef::from_array(&g).unwrap(),
                    self_: TensorRef::from_array(&x).unwrap(),
                    indices: TensorRef::from_array(&pooled.indices).unwrap(),
                    grad_input: TensorMut::from_array(&mut gi).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }),
            Kind::MaxPool { .. } => time(reps, || {
                let op = MaxPool2dWithIndicesBackward {
                    grad_output: TensorRef::from_array(&g).unwrap(),
                    self_: TensorRef::from_array(&x).unwrap(),
                    indices: TensorRef::from_array(&pooled.indices).unwrap(),
                    params: params(kind),
                    grad_input: TensorMut::from_array(&mut gi).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }),
        };
        let t_fn = (!plan_only()).then(|| match kind {
            Kind::Adaptive(_) => time(reps, || {
                std::hint::black_box(
                    poolgrad::adaptive_max_pool2d_backward(&g, &x, &pooled.indices).unwrap(),
                );
            }),
            Kind::MaxPool { .. } => time(reps, || {
                std::hint::black_box(
                    poolgrad::max_pool2d_with_indices_backward(&g, &x, &pooled.indices, &params(kind))
                        .unwrap(),
                );
            }),
        });
        let plane = shape[2] * shape[3];
        let reads = [
            bytemuck::cast_slice(g.as_slice().unwrap()),
            bytemuck::cast_slice(pooled.indices.as_slice().unwrap()),
        ];
        let fields = row_fields(t_fn, backward_floors(reps, gi.as_slice_mut().unwrap(), plane, reads));
        report(name, threads, t, &fields, tmin::<T>(shape, out, 8.0));
    }

    if let Kind::MaxPool { k, .. } = kind {
        mask_case::<T, I32Argmax>(cpu, reps, &format!("{name}_i32argmax"), &x, &g, kind, 4.0, selected);
        let bitmask_bytes = (k * k) as f64 * 2.0 / 16.0;
        mask_case::<T, Bitmask>(cpu, reps, &format!("{name}_bitmask"), &x, &g, kind, bitmask_bytes, selected);
    }

    let fwd = format!("fwd_{name}");
    if selected(&fwd) {
        let mut o = pooled.output.clone();
        let mut i = pooled.indices.clone();
        let t = time(reps, || match kind {
            Kind::Adaptive(out) => {
                let op = AdaptiveMaxPool2d {
                    input: TensorRef::from_array(&x).unwrap(),
                    output_size: out,
                    output: TensorMut::from_array(&mut o).unwrap(),
                    indices: TensorMut::from_array(&mut i).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
            Kind::MaxPool { .. } => {
                let op = MaxPool2dWithIndices {
                    input: TensorRef::from_array(&x).unwrap(),
                    params: params(kind),
                    output: TensorMut::from_array(&mut o).unwrap(),
                    indices: TensorMut::from_array(&mut i).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
        });
        let t_fn = (!plan_only()).then(|| match kind {
            Kind::Adaptive(out) => time(reps, || {
                std::hint::black_box(poolgrad::adaptive_max_pool2d(&x, out).unwrap());
            }),
            Kind::MaxPool { .. } => time(reps, || {
                std::hint::black_box(poolgrad::max_pool2d_with_indices(&x, &params(kind)).unwrap());
            }),
        });
        let outputs = [
            bytemuck::cast_slice_mut(o.as_slice_mut().unwrap()),
            bytemuck::cast_slice_mut(i.as_slice_mut().unwrap()),
        ];
        let fields =
            row_fields(t_fn, forward_floors(reps, bytemuck::cast_slice(x.as_slice().unwrap()), outputs));
        // The forward reads the input once and writes values and indices.
        report(&fwd, threads, t, &fields, tmin::<T>(shape, out, 8.0));
    }
}

#[allow(clippy::too_many_arguments)]
fn mask_case<T: PoolFloat, L: MaskLayout>(
    cpu: &Cpu,
    reps: usize,
    name: &str,
    x: &Array4<T>,
    g: &Array4<T>,
    kind: Kind,
    index_bytes: f64,
    selected: &dyn Fn(&str) -> bool,
) {
    let fwd = format!("fwd_{name}");
    if !selected(name) && !selected(&fwd) {
        return;
    }
    let p = params(kind);
    let pooled = poolgrad::max_pool2d_with_mask(x, &p, L::default()).unwrap();
    let out = [g.shape()[2], g.shape()[3]];
    let mut ws = Workspace::new(cpu, 0).unwrap();
    if selected(name) {
        mask_backward_case(cpu, reps, name, x, g, &pooled.mask, &p, index_bytes, &mut ws);
    }

    if selected(&fwd) {
        let mut o = pooled.output.clone();
        let mut m = pooled.mask.as_array().clone();
        let t = time(reps, || {
            let op = MaxPool2dWithMask {
                input: TensorRef::from_array(x).unwrap(),
                params: p,
                output: TensorMut::from_array(&mut o).unwrap(),
                mask: MaskMut::new(TensorMut::from_array(&mut m).unwrap(), L::default()),
            };
            run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(poolgrad::max_pool2d_with_mask(x, &p, L::default()).unwrap());
            })
        });
        let written = [
            bytemuck::cast_slice_mut(o.as_slice_mut().unwrap()),
            bytemuck::cast_slice_mut(m.as_slice_mut().unwrap()),
        ];
        let fields =
            row_fields(t_fn, forward_floors(reps, bytemuck::cast_slice(x.as_slice().unwrap()), written));
        // The forward writes the whole mask (zeros included).
        let outputs = g.len() as f64;
        let tmin = tmin::<T>(x.dim().into(), out, m.len() as f64 / outputs);
        report(&fwd, cpu.threads(), t, &fields, tmin);
    }
}

/// The mask backward of one case: plan API and allocating function.
#[allow(clippy::too_many_arguments)]
fn mask_backward_case<T: PoolFloat, L: MaskLayout>(
    cpu: &Cpu,
    reps: usize,
    name: &str,
    x: &Array4<T>,
    g: &Array4<T>,
    mask: &poolgrad::Mask<L, ndarray::Ix4>,
    p: &MaxPool2dParams,
    index_bytes: f64,
    ws: &mut Workspace<Cpu>,
) {
    let mut gi = Array4::<T>::zeros(x.raw_dim());
    let t = time(reps, || {
        let op = MaxPool2dWithMaskBackward {
            grad_output: TensorRef::from_array(g).unwrap(),
            self_: TensorRef::from_array(x).unwrap(),
            mask: MaskRef::new(TensorRef::from_array(mask.as_array()).unwrap(), L::default()),
            params: *p,
            grad_input: TensorMut::from_array(&mut gi).unwrap(),
        };
        run(Plan::new(cpu, op).unwrap(), ws, cpu);
    });
    let t_fn = (!plan_only()).then(|| {
        time(reps, || {
            std::hint::black_box(poolgrad::max_pool2d_with_mask_backward(g, x, mask).unwrap());
        })
    });
    let plane = x.shape()[2] * x.shape()[3];
    // The mask's shape is larger than its layout's bytes: read as many as T_min counts.
    let mask_bytes: &[u8] = bytemuck::cast_slice(mask.as_array().as_slice().unwrap());
    let used = ((g.len() as f64 * index_bytes).ceil() as usize).min(mask_bytes.len());
    let reads = [bytemuck::cast_slice(g.as_slice().unwrap()), &mask_bytes[..used]];
    let fields = row_fields(t_fn, backward_floors(reps, gi.as_slice_mut().unwrap(), plane, reads));
    let out = [g.shape()[2], g.shape()[3]];
    report(name, cpu.threads(), t, &fields, tmin::<T>(x.dim().into(), out, index_bytes));
}

/// Grows the workspace if the plan needs more, then runs.
fn run<O>(plan: Plan<'_, Cpu, O>, ws: &mut Workspace<Cpu>, cpu: &Cpu)
where
    O: poolgrad::op::Operation,
    Cpu: poolgrad::device::Runs<O>,
{
    if ws.len() < plan.workspace_size() {
        *ws = Workspace::new(cpu, plan.workspace_size()).unwrap();
    }
    plan.bind(ws).unwrap().run().unwrap();
}

/// The tiny cases: the calls property-based tests make by the thousand. Shape, and the pooling
/// (each shape with both operators).
const TINY: [[usize; 4]; 3] = [[1, 4, 9, 9], [2, 3, 32, 32], [8, 16, 16, 16]];

/// Seconds per call of `f`: the median over `reps` samples of `calls` calls each (a tiny call
/// is too short to time alone), after a warm-up sample.
fn time_per_call(reps: usize, calls: usize, mut f: impl FnMut()) -> f64 {
    time(reps, || (0..calls).for_each(|_| f())) / calls as f64
}

/// The tiny cases, f32, as a user calls them: each operator's backward (`tiny_bwd_*`) and
/// forward (`tiny_fwd_*`) through the allocating free function on the default device
/// (`median_s`, rayon's global pool, the grain deciding), on `Cpu::sequential()`
/// (`median_seq_s`), and the `_into` twin on the default device (`median_into_s`). The bench's
/// `--threads` does not apply: the default device is the user's.
fn tiny_cases(reps: usize, selected: &dyn Fn(&str) -> bool) {
    let (seq, default) = (Cpu::sequential(), Cpu::default());
    let calls = 200;
    for shape in TINY {
        let label = shape.map(|d| d.to_string()).join("x");
        let names = |op: &str| (format!("tiny_bwd_{op}_{label}"), format!("tiny_fwd_{op}_{label}"));
        let wanted = |op: &str| selected(&names(op).0) || selected(&names(op).1);
        if !wanted("adaptive") && !wanted("maxpool") {
            continue; // nothing to build (so that other cases' instruction counts stay their own)
        }
        let x = to4(random::<f32>(&shape, 1));
        for op in ["adaptive", "maxpool"] {
            let (bwd, fwd) = names(op);
            if !wanted(op) {
                continue;
            }
            let stem = MaxPool2dParams::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
            let forward = |cpu: &Cpu| match op {
                "adaptive" => poolgrad::on(cpu).adaptive_max_pool2d(&x, [3, 3]).unwrap(),
                _ => poolgrad::on(cpu).max_pool2d_with_indices(&x, &stem).unwrap(),
            };
            let p = forward(&default);
            let g = to4(random::<f32>(p.output.shape(), 2));
            let out = [p.output.shape()[2], p.output.shape()[3]];
            let tmin = tmin::<f32>(shape, out, 8.0);
            if selected(&bwd) {
                let backward = |cpu: &Cpu| match op {
                    "adaptive" => poolgrad::on(cpu).adaptive_max_pool2d_backward(&g, &x, &p.indices).unwrap(),
                    _ => {
                        poolgrad::on(cpu).max_pool2d_with_indices_backward(&g, &x, &p.indices, &stem).unwrap()
                    }
                };
                let t = time_per_call(reps, calls, || drop(std::hint::black_box(backward(&default))));
                let t_seq = time_per_call(reps, calls, || drop(std::hint::black_box(backward(&seq))));
                let mut gi = Array4::<f32>::zeros(x.raw_dim());
                let t_into = time_per_call(reps, calls, || match op {
                    "adaptive" => {
                        poolgrad::adaptive_max_pool2d_backward_into(&g, &x, &p.indices, &mut gi).unwrap()
                    }
                    _ => poolgrad::max_pool2d_with_indices_backward_into(&g, &x, &p.indices, &stem, &mut gi)
                        .unwrap(),
                });
                let fields = [("median_seq_s", Some(t_seq)), ("median_into_s", Some(t_into))];
                report(&bwd, default.threads(), t, &fields, tmin);
            }
            if selected(&fwd) {
                let t = time_per_call(reps, calls, || drop(std::hint::black_box(forward(&default))));
                let t_seq = time_per_call(reps, calls, || drop(std::hint::black_box(forward(&seq))));
                let (mut o, mut i) = (p.output.clone(), p.indices.clone());
                let t_into = time_per_call(reps, calls, || match op {
                    "adaptive" => poolgrad::adaptive_max_pool2d_into(&x, [3, 3], &mut o, &mut i).unwrap(),
                    _ => poolgrad::max_pool2d_with_indices_into(&x, &stem, &mut o, &mut i).unwrap(),
                });
                let fields = [("median_seq_s", Some(t_seq)), ("median_into_s", Some(t_into))];
                report(&fwd, default.threads(), t, &fields, tmin);
            }
        }
    }
}

/// The machine's copy bandwidth with this pool: 2 x 256 MiB, counted as read + write.
fn copy_case(cpu: &Cpu, reps: usize) {
    let n = 64 << 20;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let chunk = n.div_ceil(cpu.threads());
    let t = time(reps.min(7), || {
        use rayon::prelude::*;
        pool().install(|| {
            dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s))
        });
    });
    let bytes = 2.0 * (n * 4) as f64;
    println!(
        "{{\"name\": \"copy\", \"threads\": {}, \"median_s\": {t:.6e}, \"bytes\": {bytes:.0}, \"gbps\": {:.2}}}",
        cpu.threads(),
        bytes / t / 1e9
    );
}

fn params3(kind: Kind) -> MaxPool3dParams {
    match kind {
        Kind::MaxPool { k, s, p, ceil } => {
            MaxPool3dParams::new([k; 3]).with_stride([s; 3]).with_padding([p; 3]).with_ceil_mode(ceil)
        }
        Kind::Adaptive(_) => unreachable!("adaptive cases have no max-pool parameters"),
    }
}

/// The output size of an adaptive 3-D case: its depth pooled to 4, its plane to `out`.
fn adaptive3(out: [usize; 2]) -> [usize; 3] {
    [4, out[0], out[1]]
}

/// One 3-D case: the backward (`name`) and the forward (`fwd_name`), each through the plan API
/// and the allocating function, with their floors, as the 2-D cases.
fn run_volume_case<T: PoolFloat>(
    cpu: &Cpu,
    reps: usize,
    name: &str,
    shape: [usize; 5],
    kind: Kind,
    selected: &dyn Fn(&str) -> bool,
) {
    let fwd = format!("fwd_{name}");
    if !selected(name) && !selected(&fwd) {
        return;
    }
    let threads = cpu.threads();
    let x: Array5<T> = random::<T>(&shape, 1).into_dimensionality().expect("5-D");
    let mut ws = Workspace::new(cpu, 0).unwrap();
    let pooled = match kind {
        Kind::Adaptive(out) => poolgrad::adaptive_max_pool3d(&x, adaptive3(out)).unwrap(),
        Kind::MaxPool { .. } => poolgrad::max_pool3d_with_indices(&x, &params3(kind)).unwrap(),
    };
    let [n, c, d, h, w] = shape;
    let volume = d * h * w;
    let outputs = pooled.output.len() / (n * c);
    let b = size_of::<T>() as f64;
    let tmin = (n * c) as f64 * (volume as f64 * b + outputs as f64 * (b + 8.0));
    if selected(name) {
        let g: Array5<T> = random::<T>(pooled.output.shape(), 2).into_dimensionality().expect("5-D");
        let mut gi = Array5::<T>::zeros(x.raw_dim());
        let t = time(reps, || match kind {
            Kind::Adaptive(_) => {
                let op = AdaptiveMaxPool3dBackward {
                    grad_output: TensorRef::from_array(&g).unwrap(),
                    self_: TensorRef::from_array(&x).unwrap(),
                    indices: TensorRef::from_array(&pooled.indices).unwrap(),
                    grad_input: TensorMut::from_array(&mut gi).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
            Kind::MaxPool { .. } => {
                let op = MaxPool3dWithIndicesBackward {
                    grad_output: TensorRef::from_array(&g).unwrap(),
                    self_: TensorRef::from_array(&x).unwrap(),
                    indices: TensorRef::from_array(&pooled.indices).unwrap(),
                    params: params3(kind),
                    grad_input: TensorMut::from_array(&mut gi).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(match kind {
                    Kind::Adaptive(_) => poolgrad::adaptive_max_pool3d_backward(&g, &x, &pooled.indices),
                    Kind::MaxPool { .. } => {
                        poolgrad::max_pool3d_with_indices_backward(&g, &x, &pooled.indices, &params3(kind))
                    }
                })
                .unwrap();
            })
        });
        let reads = [
            bytemuck::cast_slice(g.as_slice().unwrap()),
            bytemuck::cast_slice(pooled.indices.as_slice().unwrap()),
        ];
        let fields = row_fields(t_fn, backward_floors(reps, gi.as_slice_mut().unwrap(), volume, reads));
        report(name, threads, t, &fields, tmin);
    }
    if selected(&fwd) {
        let (mut o, mut i) = (pooled.output.clone(), pooled.indices.clone());
        let t = time(reps, || match kind {
            Kind::Adaptive(out) => {
                let op = AdaptiveMaxPool3d {
                    input: TensorRef::from_array(&x).unwrap(),
                    output_size: adaptive3(out),
                    output: TensorMut::from_array(&mut o).unwrap(),
                    indices: TensorMut::from_array(&mut i).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
            Kind::MaxPool { .. } => {
                let op = MaxPool3dWithIndices {
                    input: TensorRef::from_array(&x).unwrap(),
                    params: params3(kind),
                    output: TensorMut::from_array(&mut o).unwrap(),
                    indices: TensorMut::from_array(&mut i).unwrap(),
                };
                run(Plan::new(cpu, op).unwrap(), &mut ws, cpu);
            }
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(match kind {
                    Kind::Adaptive(out) => poolgrad::adaptive_max_pool3d(&x, adaptive3(out)),
                    Kind::MaxPool { .. } => poolgrad::max_pool3d_with_indices(&x, &params3(kind)),
                })
                .unwrap();
            })
        });
        let outputs = [
            bytemuck::cast_slice_mut(o.as_slice_mut().unwrap()),
            bytemuck::cast_slice_mut(i.as_slice_mut().unwrap()),
        ];
        let fields =
            row_fields(t_fn, forward_floors(reps, bytemuck::cast_slice(x.as_slice().unwrap()), outputs));
        report(&fwd, threads, t, &fields, tmin);
    }
}

/// The 1-D case: the backward (`name`) and the forward (`fwd_name`), through the plan API and
/// the allocating function, with their floors.
fn run_line_case(cpu: &Cpu, reps: usize, selected: &dyn Fn(&str) -> bool) {
    let (name, shape, [k, s, p]) = LINE_CASE;
    let fwd = format!("fwd_{name}");
    if !selected(name) && !selected(&fwd) {
        return;
    }
    let params = MaxPool1dParams::new([k]).with_stride([s]).with_padding([p]);
    let x: Array3<f32> = random::<f32>(&shape, 1).into_dimensionality().expect("3-D");
    let pooled = poolgrad::max_pool1d_with_indices(&x, &params).unwrap();
    let [n, c, l] = shape;
    let lo = pooled.output.shape()[2];
    let tmin = (n * c) as f64 * (l as f64 * 4.0 + lo as f64 * 12.0);
    // `median_s` through the `_into` forms on the bench's device: a 1-D pooling has no
    // descriptor of its own (it plans the 2-D operation on planes one row high).
    if selected(name) {
        let g: Array3<f32> = random::<f32>(pooled.output.shape(), 2).into_dimensionality().expect("3-D");
        let mut gi = Array3::<f32>::zeros(x.raw_dim());
        // Through `on`, the plan API of a 1-D pooling (its descriptors are the 2-D ones).
        let t = time(reps, || {
            poolgrad::on(cpu)
                .max_pool1d_with_indices_backward_into(&g, &x, &pooled.indices, &params, &mut gi)
                .unwrap()
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(poolgrad::max_pool1d_with_indices_backward(
                    &g,
                    &x,
                    &pooled.indices,
                    &params,
                ))
                .unwrap();
            })
        });
        let reads = [
            bytemuck::cast_slice(g.as_slice().unwrap()),
            bytemuck::cast_slice(pooled.indices.as_slice().unwrap()),
        ];
        let fields = row_fields(t_fn, backward_floors(reps, gi.as_slice_mut().unwrap(), l, reads));
        report(name, cpu.threads(), t, &fields, tmin);
    }
    if selected(&fwd) {
        let (mut o, mut i) = (pooled.output.clone(), pooled.indices.clone());
        let t = time(reps, || {
            poolgrad::on(cpu).max_pool1d_with_indices_into(&x, &params, &mut o, &mut i).unwrap();
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(poolgrad::max_pool1d_with_indices(&x, &params)).unwrap();
            })
        });
        let outputs = [
            bytemuck::cast_slice_mut(o.as_slice_mut().unwrap()),
            bytemuck::cast_slice_mut(i.as_slice_mut().unwrap()),
        ];
        let fields =
            row_fields(t_fn, forward_floors(reps, bytemuck::cast_slice(x.as_slice().unwrap()), outputs));
        report(&fwd, cpu.threads(), t, &fields, tmin);
    }
}

/// The unpooling case: its backward (`name`), the unpooling (`fwd_name`) and the pooling's
/// double backward (`double_backward_name`), through the plan API and the allocating function;
/// each floor moves what the operation moves (two arrays read, one written) with no arithmetic.
fn run_unpool_case(cpu: &Cpu, reps: usize, selected: &dyn Fn(&str) -> bool) {
    let (name, shape) = UNPOOL_CASE;
    let (fwd, double) = (format!("fwd_{name}"), format!("double_backward_{name}"));
    if !selected(name) && !selected(&fwd) && !selected(&double) {
        return;
    }
    let x: Array4<f32> = to4(random::<f32>(&shape, 1));
    let pooled = poolgrad::max_pool2d_with_indices(&x, &MaxPool2dParams::new([2, 2])).unwrap();
    let (y, idx) = (&pooled.output, &pooled.indices);
    let size = [shape[2], shape[3]];
    let (full, outs) = (size[0] * size[1], y.shape()[2] * y.shape()[3]);
    let planes = (shape[0] * shape[1]) as f64;
    let tmin = planes * (full as f64 * 4.0 + outs as f64 * 12.0);
    let mut ws = Workspace::new(cpu, 0).unwrap();
    let g: Array4<f32> = to4(random::<f32>(&shape, 2));
    let reads_full =
        [bytemuck::cast_slice(g.as_slice().unwrap()), bytemuck::cast_slice(idx.as_slice().unwrap())];
    /// The three operations on the case's indices.
    #[derive(Clone, Copy, PartialEq)]
    enum Move {
        UnpoolBackward,
        Unpool,
        DoubleBackward,
    }
    for (row, how) in
        [(name.to_string(), Move::UnpoolBackward), (fwd, Move::Unpool), (double, Move::DoubleBackward)]
    {
        if !selected(&row) {
            continue;
        }
        // The unpooling writes the full plane; the two gathers write the pooled one.
        let (written, plane) = if how == Move::Unpool { (x.raw_dim(), full) } else { (y.raw_dim(), outs) };
        let mut out = Array4::<f32>::zeros(written);
        let t = time(reps, || {
            let (indices, output) =
                (TensorRef::from_array(idx).unwrap(), TensorMut::from_array(&mut out).unwrap());
            match how {
                Move::UnpoolBackward => {
                    let grad_output = TensorRef::from_array(&g).unwrap();
                    let op = MaxUnpool2dBackward { grad_output, indices, grad_input: output };
                    run(Plan::new(cpu, op).unwrap(), &mut ws, cpu)
                }
                Move::Unpool => {
                    let input = TensorRef::from_array(y).unwrap();
                    let op = MaxUnpool2d { input, indices, output_size: size, output };
                    run(Plan::new(cpu, op).unwrap(), &mut ws, cpu)
                }
                Move::DoubleBackward => {
                    let grad_grad_input = TensorRef::from_array(&g).unwrap();
                    let op = MaxPool2dDoubleBackward { grad_grad_input, indices, grad_grad_output: output };
                    run(Plan::new(cpu, op).unwrap(), &mut ws, cpu)
                }
            }
        });
        let t_fn = (!plan_only()).then(|| {
            time(reps, || {
                std::hint::black_box(match how {
                    Move::UnpoolBackward => poolgrad::max_unpool2d_backward(&g, idx),
                    Move::Unpool => poolgrad::max_unpool2d(y, idx, size),
                    Move::DoubleBackward => poolgrad::max_pool2d_double_backward(&g, idx),
                })
                .unwrap();
            })
        });
        let reads = if how == Move::Unpool {
            [bytemuck::cast_slice(y.as_slice().unwrap()), bytemuck::cast_slice(idx.as_slice().unwrap())]
        } else {
            reads_full
        };
        let fields = row_fields(t_fn, backward_floors(reps, out.as_slice_mut().unwrap(), plane, reads));
        report(&row, cpu.threads(), t, &fields, tmin);
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    PLAN_ONLY.store(args.plan_only, std::sync::atomic::Ordering::Relaxed);
    NO_FLOORS.store(args.no_floors, std::sync::atomic::Ordering::Relaxed);
    let threads =
        rayon::ThreadPoolBuilder::new().num_threads(args.threads.max(1)).build().expect("thread pool");
    let pool = POOL.get_or_init(|| std::sync::Arc::new(threads));
    let cpu = Cpu::new(Parallelism::Pool(std::sync::Arc::clone(pool))).expect("thread pool");
    let selected = |name: &str| args.cases.is_empty() || args.cases.iter().any(|c| c == name);
    settle(args.settle_ms);
    if selected("copy") {
        copy_case(&cpu, args.reps);
    }
    if !args.plan_only {
        tiny_cases(args.reps, &selected); // free functions only
    }
    for (name, dtype, shape, kind) in CASES {
        let wanted = |n: &str| selected(n);
        match dtype {
            DType::F32 => run_case::<f32>(&cpu, args.reps, name, shape, kind, &wanted),
            DType::F16 => run_case::<half::f16>(&cpu, args.reps, name, shape, kind, &wanted),
            DType::BF16 => run_case::<half::bf16>(&cpu, args.reps, name, shape, kind, &wanted),
        }
    }
    for (name, dtype, shape, kind) in VOLUME_CASES {
        let wanted = |n: &str| selected(n);
        match dtype {
            DType::F32 => run_volume_case::<f32>(&cpu, args.reps, name, shape, kind, &wanted),
            DType::F16 => run_volume_case::<half::f16>(&cpu, args.reps, name, shape, kind, &wanted),
            DType::BF16 => run_volume_case::<half::bf16>(&cpu, args.reps, name, shape, kind, &wanted),
        }
    }
    run_line_case(&cpu, args.reps, &selected);
    run_unpool_case(&cpu, args.reps, &selected);
}
