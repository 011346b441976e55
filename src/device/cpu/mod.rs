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

use crate::device::{Device, DeviceLimits, internal::DeviceImpl};
use crate::error::Result;
use workspace::CacheLine;

mod bitmask;
mod forward;
mod indexed;
mod interleave;
mod mask;
mod scatter;
mod schedule;
mod windows;
mod workspace;

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
        f.debug_struct("Cpu").field("parallelism", &self.parallelism()).field("grain", &self.grain).finish()
    }
}

impl Default for Cpu {
    /// rayon's global pool with the `rayon` feature, else sequential.
    fn default() -> Self {
        #[cfg(feature = "rayon")]
        return Cpu { runner: Runner::GlobalPool, grain: schedule::GRAIN };
        #[cfg(not(feature = "rayon"))]
        return Cpu::sequential();
    }
}

impl Cpu {
    /// A CPU device with the given parallelism; [`Parallelism::Threads`] builds its pool here.
    ///
    /// # Errors
    /// [`Error::ThreadPool`](crate::Error::ThreadPool) (feature `rayon`) if rayon cannot start the
    /// threads.
    pub fn new(parallelism: Parallelism) -> Result<Self> {
        Ok(Cpu { runner: Runner::for_parallelism(parallelism)?, grain: schedule::GRAIN })
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
    /// [`Error::InvalidParameter`](crate::Error::InvalidParameter) for 0 threads, and the errors of
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
        Cpu { runner: Runner::Sequential, grain: schedule::GRAIN }
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
        assert_eq!(format!("{coarse:?}"), "Cpu { parallelism: Sequential, grain: 5 }");
    }

    #[test]
    fn a_callers_pool_is_used_and_reported() {
        let pool = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap());
        let cpu = Cpu::new(Parallelism::Pool(Arc::clone(&pool))).unwrap();
        assert_eq!(cpu.threads(), 3);
        let Parallelism::Pool(reported) = cpu.parallelism() else { panic!("{cpu:?}") };
        assert!(Arc::ptr_eq(&reported, &pool));
        assert_eq!(format!("{cpu:?}"), "Cpu { parallelism: Pool(3 threads), grain: 131072 }");
        // Tasks run on that pool's threads.
        let on_pool = cpu.map_tasks(vec![0, 1, 2, 3], |_| pool.current_thread_index().is_some());
        assert_eq!(on_pool, [true; 4]);
    }
}
