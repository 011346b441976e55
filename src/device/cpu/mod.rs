//! The CPU device: safe Rust kernels, sequential or on rayon thread pools.
//!
//! Work is split over `(n, c)` planes or, with fewer planes than threads, over bands of rows of
//! each plane (every split is in module `schedule`, with which kernel uses it); every output
//! element is computed by one task, in a fixed order, so results are bit-identical for every
//! thread count.

use core::fmt;
use core::num::NonZeroUsize;
#[cfg(feature = "rayon")]
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use ndarray::{ArrayView4, ArrayViewMut4};

use crate::device::{Device, DeviceLimits, internal::DeviceImpl};
use crate::element::Element;
use crate::error::{Error, Result, UNNAMED};

mod bitmask;
mod forward;
mod indexed;
mod interleave;
mod mask;
mod scatter;
mod schedule;
mod simd;
mod volume;

/// How the CPU device spreads work over threads. Results are bit-identical for every setting.
///
/// ```
/// use poolgrad::device::cpu::{Cpu, Parallelism};
/// let x = ndarray::Array4::from_shape_fn((2, 3, 9, 9), |(n, c, h, w)| ((n + 2 * c + 3 * h + 5 * w) % 7) as f32);
/// let sequential = Cpu::new(Parallelism::Sequential)?;
/// let global = Cpu::new(Parallelism::AllThreads)?; // rayon's global pool
/// let own = Cpu::new(Parallelism::Threads(3.try_into().unwrap()))?; // a pool of its own (or Cpu::with_threads(3))
/// let a = poolgrad::on(&sequential).adaptive_max_pool2d(&x, [4, 4])?;
/// assert_eq!(a, poolgrad::on(&global).adaptive_max_pool2d(&x, [4, 4])?);
/// assert_eq!(a, poolgrad::on(&own).adaptive_max_pool2d(&x, [4, 4])?);
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Parallelism {
    /// Everything on the calling thread.
    Sequential,
    /// A dedicated rayon pool of this many threads, built by [`Cpu::new`]. Without the `rayon`
    /// feature this runs sequentially.
    Threads(NonZeroUsize),
    /// rayon's global pool (all hardware threads unless configured otherwise). Without the
    /// `rayon` feature this runs sequentially.
    AllThreads,
    /// A pool the caller built.
    #[cfg(feature = "rayon")]
    Pool(Arc<rayon::ThreadPool>),
}

impl fmt::Debug for Parallelism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parallelism::Sequential => f.write_str("Sequential"),
            Parallelism::Threads(n) => write!(f, "Threads({n})"),
            Parallelism::AllThreads => f.write_str("AllThreads"),
            #[cfg(feature = "rayon")]
            Parallelism::Pool(p) => write!(f, "Pool({} threads)", p.current_num_threads()),
        }
    }
}

/// The CPU device.
///
/// ```
/// use poolgrad::device::cpu::Cpu;
/// let seq = Cpu::sequential();
/// assert_eq!(seq.threads(), 1);
/// assert!(matches!(seq.parallelism(), poolgrad::device::cpu::Parallelism::Sequential));
/// # #[cfg(feature = "rayon")] {
/// use poolgrad::device::cpu::Parallelism;
/// let two = Cpu::new(Parallelism::Threads(2.try_into().unwrap()))?;
/// assert_eq!(two.threads(), 2);
/// assert!(matches!(two.parallelism(), Parallelism::Threads(n) if n.get() == 2));
/// assert!(matches!(Cpu::default().parallelism(), Parallelism::AllThreads));
/// # }
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Clone)]
pub struct Cpu {
    runner: Runner,
    /// Work below which a call runs on the calling thread ([`Cpu::with_grain`]).
    grain: u64,
    /// Whether kernels may use the vector and conversion instructions the processor has
    /// ([`Cpu::with_vector_instructions`]).
    vector: bool,
}

/// How a [`Cpu`] runs its tasks: its one source of truth.
#[derive(Clone)]
enum Runner {
    /// On the calling thread.
    Sequential,
    /// On rayon's global pool.
    #[cfg(feature = "rayon")]
    GlobalPool,
    /// On a pool of its own: built by [`Cpu::new`] for `Parallelism::Threads(n)` (`built_for`
    /// is `Some(n)`), or the caller's (`Parallelism::Pool`).
    #[cfg(feature = "rayon")]
    OwnPool { pool: Arc<rayon::ThreadPool>, built_for: Option<NonZeroUsize> },
}

impl Runner {
    /// The runner of `parallelism`, its pool built here ([`Cpu::new`]; cargo-mutants does not
    /// look inside functions named `new`, so the logic lives here).
    fn for_parallelism(parallelism: Parallelism) -> Result<Self> {
        #[cfg(feature = "rayon")]
        let runner = match parallelism {
            Parallelism::Sequential => Runner::Sequential,
            Parallelism::AllThreads => Runner::GlobalPool,
            Parallelism::Threads(n) => {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(n.get())
                    .build()
                    .map_err(|e| crate::Error::ThreadPool { threads: n.get(), reason: e.to_string() })?;
                Runner::OwnPool { pool: Arc::new(pool), built_for: Some(n) }
            }
            Parallelism::Pool(pool) => Runner::OwnPool { pool, built_for: None },
        };
        #[cfg(not(feature = "rayon"))]
        let runner = {
            let _ = parallelism;
            Runner::Sequential
        };
        Ok(runner)
    }
}

impl fmt::Debug for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cpu")
            .field("parallelism", &self.parallelism())
            .field("grain", &self.grain)
            .field("vector_instructions", &self.vector)
            .finish()
    }
}

impl Default for Cpu {
    /// rayon's global pool with the `rayon` feature, else sequential.
    fn default() -> Self {
        #[cfg(feature = "rayon")]
        return Cpu { runner: Runner::GlobalPool, grain: schedule::GRAIN, vector: true };
        #[cfg(not(feature = "rayon"))]
        return Cpu::sequential();
    }
}

impl Cpu {
    /// A CPU device with the given parallelism; [`Parallelism::Threads`] builds its pool here.
    ///
    /// # Errors
    /// [`Error::ThreadPool`] (feature `rayon`) if rayon cannot start the
    /// threads.
    pub fn new(parallelism: Parallelism) -> Result<Self> {
        Ok(Cpu { runner: Runner::for_parallelism(parallelism)?, grain: schedule::GRAIN, vector: true })
    }

    /// A CPU device with a rayon pool of its own of `threads` threads
    /// ([`Parallelism::Threads`]); sequential without the `rayon` feature.
    ///
    /// ```
    /// use poolgrad::device::cpu::Cpu;
    /// let cpu = Cpu::with_threads(2)?;
    /// // Two threads with the `rayon` feature; without it, the calling thread alone.
    /// assert_eq!(cpu.threads(), if cfg!(feature = "rayon") { 2 } else { 1 });
    /// assert!(Cpu::with_threads(0).is_err());
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for 0 threads, and the errors of
    /// [`Cpu::new`].
    pub fn with_threads(threads: usize) -> Result<Self> {
        let threads = NonZeroUsize::new(threads).ok_or_else(|| crate::Error::InvalidParameter {
            op: "Cpu::with_threads",
            arg: "threads",
            expected: "at least 1".into(),
            got: "0".into(),
        })?;
        Cpu::new(Parallelism::Threads(threads))
    }

    /// Runs everything on the calling thread.
    pub const fn sequential() -> Self {
        Cpu::calling_thread(true)
    }

    /// How this device runs: the setting it was made with (without the `rayon` feature, always
    /// [`Parallelism::Sequential`]).
    pub fn parallelism(&self) -> Parallelism {
        match &self.runner {
            Runner::Sequential => Parallelism::Sequential,
            #[cfg(feature = "rayon")]
            Runner::GlobalPool => Parallelism::AllThreads,
            #[cfg(feature = "rayon")]
            Runner::OwnPool { built_for: Some(n), .. } => Parallelism::Threads(*n),
            #[cfg(feature = "rayon")]
            Runner::OwnPool { pool, built_for: None } => Parallelism::Pool(Arc::clone(pool)),
        }
    }

    /// This device with another grain: the work below which a call runs on the calling thread
    /// rather than waiting for the pool, in units of about a nanosecond of one thread's time
    /// (a forward counts one per window tap it reads, a backward one per four elements it zeroes
    /// or adds). The default, [`Cpu::DEFAULT_GRAIN`], is where the pool started to pay on this
    /// project's 2-thread machine; `0` splits every call among the threads (as the tests of the
    /// work splits do). Results do not depend on it.
    ///
    /// ```
    /// use poolgrad::device::cpu::Cpu;
    /// let cpu = Cpu::default();
    /// assert_eq!(cpu.grain(), Cpu::DEFAULT_GRAIN);
    /// assert_eq!(cpu.with_grain(0).grain(), 0);
    /// ```
    #[must_use]
    pub fn with_grain(self, grain: u64) -> Self {
        Cpu { grain, ..self }
    }

    /// The work below which a call runs on the calling thread ([`Cpu::with_grain`]).
    pub fn grain(&self) -> u64 {
        self.grain
    }

    /// This device with the processor's vector and conversion instructions allowed (`true`, the
    /// default) or not. Allowed, each call detects once what the processor has (on x86-64:
    /// AVX2 with F16C) and runs the kernels that gain from it (the forwards, the `Bitmask`
    /// gather) compiled for it; otherwise, or on a processor without them, every kernel as
    /// compiled for the target's baseline.
    /// Results are the same bits either way (but for which payload a sum of two different NaNs
    /// carries, which Rust leaves to the compiler); turning them off serves tests and
    /// measurements.
    /// (The environment variable `POOLGRAD_ISA=baseline` turns them off for every device.)
    ///
    /// ```
    /// use poolgrad::device::cpu::Cpu;
    /// let x = ndarray::Array4::from_shape_fn((1, 2, 5, 5), |(_, c, h, w)| half::f16::from_f32((c + h * w) as f32 / 3.0));
    /// let baseline = Cpu::sequential().with_vector_instructions(false);
    /// assert!(!baseline.vector_instructions());
    /// let a = poolgrad::on(&baseline).adaptive_max_pool2d(&x, [2, 2])?;
    /// assert_eq!(a, poolgrad::on(&Cpu::sequential()).adaptive_max_pool2d(&x, [2, 2])?);
    /// # Ok::<(), poolgrad::Error>(())
    /// ```
    #[must_use]
    pub fn with_vector_instructions(self, allowed: bool) -> Self {
        Cpu { vector: allowed, ..self }
    }

    /// Whether kernels may use the processor's vector and conversion instructions
    /// ([`Cpu::with_vector_instructions`]).
    pub fn vector_instructions(&self) -> bool {
        self.vector
    }

    /// The instructions a call planned on this device runs with, detected now.
    fn isa(&self) -> simd::Isa {
        simd::Isa::of(self.vector)
    }

    /// The device of calls planned for the calling thread alone, with `vector` as set.
    const fn calling_thread(vector: bool) -> Cpu {
        Cpu { runner: Runner::Sequential, grain: schedule::GRAIN, vector }
    }

    /// The grain of every device until [`Cpu::with_grain`] changes it: 2^17 units (a unit is
    /// about one window tap of a forward), the work at which waiting for a thread pool starts
    /// to pay.
    pub const DEFAULT_GRAIN: u64 = schedule::GRAIN;

    /// Threads that kernels will use (1 without the `rayon` feature).
    pub fn threads(&self) -> usize {
        match &self.runner {
            Runner::Sequential => 1,
            #[cfg(feature = "rayon")]
            Runner::GlobalPool => rayon::current_num_threads(),
            #[cfg(feature = "rayon")]
            Runner::OwnPool { pool, .. } => pool.current_num_threads(),
        }
    }

    /// Runs `f` on every task, in parallel where the setting allows. Tasks are independent, so
    /// the result does not depend on which thread runs which task.
    fn for_each_task<X: Send>(&self, tasks: Vec<X>, f: impl Fn(X) + Send + Sync) {
        self.map_tasks(tasks, f);
    }

    /// Like [`Cpu::for_each_task`], collecting each task's result in task order.
    fn map_tasks<X: Send, R: Send>(&self, tasks: Vec<X>, f: impl Fn(X) -> R + Send + Sync) -> Vec<R> {
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            if tasks.len() > 1 {
                match &self.runner {
                    Runner::Sequential => {}
                    Runner::GlobalPool => return tasks.into_par_iter().map(f).collect(),
                    Runner::OwnPool { pool, .. } => {
                        return pool.install(|| tasks.into_par_iter().map(f).collect());
                    }
                }
            }
        }
        tasks.into_iter().map(f).collect()
    }
}

// The workspace, carved into typed regions, each starting on a cache line of its own: phase 1
// adds up the regions a kernel will take (`Sizer`), phase 2 hands them out in the same order
// (`Carver`). Kernels see only contiguous row-major slices. A view that already is one is used in
// place; any other (strided, broadcast, negative strides) is copied into a region first (inputs)
// or computed there and copied out afterwards (outputs). The decision lives here, once.

/// The unit of CPU workspace memory: one cache line, aligned to one. Every region starts on a
/// line of its own.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
pub struct CacheLine([u8; 64]);

/// Regions start at multiples of this many bytes (a cache line).
const ALIGN: usize = size_of::<CacheLine>();

/// The elements of `E` in each task's share of a region split among tasks: `len` rounded up to
/// whole cache lines, so tasks running side by side never write to the same line (false
/// sharing). Kernels use the first `len`.
pub(super) fn task_share<E>(len: usize) -> usize {
    let per_line = (ALIGN / size_of::<E>().max(1)).max(1);
    len.checked_next_multiple_of(per_line).unwrap_or(len)
}

fn region_bytes<E>(len: usize) -> Result<usize> {
    len.checked_mul(size_of::<E>()).and_then(|b| b.checked_next_multiple_of(ALIGN)).ok_or_else(|| {
        Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: format!("{len} elements of {} bytes", size_of::<E>()),
        }
    })
}

/// Phase 1: adds up the regions a kernel will take, in the order it takes them.
#[derive(Debug)]
pub(super) struct Sizer {
    bytes: usize,
}

impl Sizer {
    pub(super) fn new() -> Self {
        Sizer { bytes: 0 }
    }

    /// A region of `len` elements of `E`.
    pub(super) fn region<E>(&mut self, len: usize) -> Result<()> {
        let b = region_bytes::<E>(len)?;
        self.bytes = self.bytes.checked_add(b).ok_or_else(|| Error::Overflow {
            op: UNNAMED,
            arg: "workspace",
            what: "the sum of the workspace regions".into(),
        })?;
        Ok(())
    }

    /// A staging region for `view` if it is not row-major contiguous.
    pub(super) fn stage<E: Element>(&mut self, view: &ArrayView4<'_, E>) -> Result<()> {
        if view.is_standard_layout() { Ok(()) } else { self.region::<E>(view.len()) }
    }

    pub(super) fn total(&self) -> usize {
        self.bytes
    }
}

/// Phase 2: hands out the regions a [`Sizer`] counted, in the same order.
#[derive(Debug)]
pub(super) struct Carver<'w> {
    rest: &'w mut [u8],
}

impl<'w> Carver<'w> {
    pub(super) fn new(memory: &'w mut [CacheLine]) -> Self {
        Carver { rest: bytemuck::cast_slice_mut(memory) }
    }

    pub(super) fn region<E: Element>(&mut self, len: usize) -> Result<&'w mut [E]> {
        let bytes = region_bytes::<E>(len)?;
        let too_small = |got| Error::WorkspaceTooSmall { op: UNNAMED, expected: bytes, got };
        if bytes > self.rest.len() {
            return Err(too_small(self.rest.len()));
        }
        let (head, tail) = core::mem::take(&mut self.rest).split_at_mut(bytes);
        self.rest = tail;
        let used = len * size_of::<E>();
        bytemuck::try_cast_slice_mut(&mut head[..used]).map_err(|_| too_small(bytes))
    }

    /// `view` as a contiguous slice: itself, or a copy in a workspace region.
    pub(super) fn stage<E: Element>(&mut self, view: ArrayView4<'w, E>) -> Result<&'w [E]> {
        if let Some(slice) = view.to_slice() {
            return Ok(slice);
        }
        let region = self.region::<E>(view.len())?;
        let mut staged = ArrayViewMut4::from_shape(view.dim(), region)
            .map_err(|e| Error::from_shape(UNNAMED, "workspace", e))?;
        staged.assign(&view);
        Ok(staged.into_slice().unwrap_or(&mut []))
    }

    /// A contiguous slice to write `target`'s elements into, copied back by [`Output::finish`].
    pub(super) fn output<E: Element>(&mut self, target: ArrayViewMut4<'w, E>) -> Result<Output<'w, E>> {
        if target.is_standard_layout() {
            let direct = target.into_slice().unwrap_or(&mut []);
            return Ok(Output::Direct(direct));
        }
        let stage = self.region::<E>(target.len())?;
        Ok(Output::Staged { stage, target })
    }
}

/// An output being computed: in place, or in a staging region.
#[derive(Debug)]
pub(super) enum Output<'w, E> {
    Direct(&'w mut [E]),
    Staged { stage: &'w mut [E], target: ArrayViewMut4<'w, E> },
}

impl<E: Element> Output<'_, E> {
    /// The row-major slice to write.
    pub(super) fn slice(&mut self) -> &mut [E] {
        match self {
            Output::Direct(s) => s,
            Output::Staged { stage, .. } => stage,
        }
    }

    /// Whether the result is computed in place (not staged).
    pub(super) fn in_place(&self) -> bool {
        matches!(self, Output::Direct(_))
    }

    /// Copies a staged result to its strided destination.
    pub(super) fn finish(self, arg: &'static str) -> Result<()> {
        if let Output::Staged { stage, mut target } = self {
            let staged = ArrayView4::from_shape(target.dim(), &*stage)
                .map_err(|e| Error::from_shape(UNNAMED, arg, e))?;
            target.assign(&staged);
        }
        Ok(())
    }
}

impl DeviceImpl for Cpu {
    type Memory = Vec<CacheLine>;

    fn alloc_workspace(&self, bytes: usize) -> Result<Vec<CacheLine>> {
        crate::alloc::zeroed_vec("Workspace::new", "workspace", bytes.div_ceil(size_of::<CacheLine>()))
    }

    fn workspace_len(memory: &Vec<CacheLine>) -> usize {
        size_of_val(memory.as_slice())
    }
}

impl Device for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn limits(&self) -> DeviceLimits {
        DeviceLimits::default()
    }
}

#[cfg(all(test, feature = "rayon"))]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_device_runs_on_one_thread_with_the_default_grain() {
        let seq = Cpu::sequential();
        assert_eq!(seq.threads(), 1);
        assert!(matches!(seq.parallelism(), Parallelism::Sequential));
        assert_eq!(seq.grain(), 1 << 17);
        let coarse = seq.with_grain(5);
        assert_eq!(coarse.grain(), 5);
        assert_eq!(
            format!("{coarse:?}"),
            "Cpu { parallelism: Sequential, grain: 5, vector_instructions: true }"
        );
    }

    #[test]
    fn a_callers_pool_is_used_and_reported() {
        let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap());
        let cpu = Cpu::new(Parallelism::Pool(Arc::clone(&pool))).unwrap();
        assert_eq!(cpu.threads(), 3);
        let Parallelism::Pool(reported) = cpu.parallelism() else { panic!("{cpu:?}") };
        assert!(Arc::ptr_eq(&reported, &pool));
        assert_eq!(
            format!("{cpu:?}"),
            "Cpu { parallelism: Pool(3 threads), grain: 131072, vector_instructions: true }"
        );
        // Tasks run on that pool's threads.
        let on_pool = cpu.map_tasks(vec![0, 1, 2, 3], |_| pool.current_thread_index().is_some());
        assert_eq!(on_pool, [true; 4]);
    }
}

#[cfg(test)]
mod workspace_tests {
    use super::*;
    use ndarray::{Array4, s};

    #[test]
    fn sizer_and_carver_agree() {
        let a = Array4::<f32>::from_shape_fn((2, 3, 4, 5), |(n, c, h, w)| {
            (n * 1000 + c * 100 + h * 10 + w) as f32
        });
        let strided = a.slice(s![.., .., ..;2, ..]);
        let mut sizer = Sizer::new();
        sizer.stage(&a.view()).unwrap();
        sizer.stage(&strided).unwrap();
        sizer.region::<f64>(3).unwrap();
        assert_eq!(sizer.total(), (2 * 3 * 2 * 5 * 4usize).next_multiple_of(64) + 64);
        let mut mem = vec![CacheLine::zeroed(); sizer.total() / ALIGN];
        let mut carver = Carver::new(&mut mem);
        assert_eq!(carver.stage(a.view()).unwrap(), a.as_slice().unwrap());
        let staged = carver.stage(strided).unwrap().to_vec();
        assert_eq!(staged, strided.iter().copied().collect::<Vec<_>>());
        assert_eq!(carver.region::<f64>(3).unwrap().len(), 3);
        assert!(matches!(carver.region::<f64>(1), Err(Error::WorkspaceTooSmall { .. })));
    }

    #[test]
    fn regions_and_task_shares_start_on_lines_of_their_own() {
        assert_eq!(task_share::<f32>(0), 0);
        assert_eq!(task_share::<f32>(1), 16);
        assert_eq!(task_share::<f32>(49), 64);
        assert_eq!(task_share::<f32>(64), 64);
        assert_eq!(task_share::<u8>(65), 128);
        assert_eq!(task_share::<f64>(9), 16);
        // Too long to pad: left as it is (the region's size check reports the overflow).
        assert_eq!(task_share::<f32>(usize::MAX), usize::MAX);
        let mut mem = vec![CacheLine::zeroed(); 9];
        let mut carver = Carver::new(&mut mem);
        let first = carver.region::<i8>(3).unwrap().as_ptr() as usize;
        let shares = carver.region::<f32>(2 * task_share::<f32>(49)).unwrap();
        let starts = shares.chunks(task_share::<f32>(49)).map(|share| share.as_ptr() as usize);
        for address in starts.chain([first]) {
            assert_eq!(address % 64, 0, "{address:#x}");
        }
    }
}
