//! The CPU device: safe Rust kernels, sequential or on rayon thread pools.
//!
//! Work is split over `(n, c)` planes or, with fewer planes than threads, over bands of rows of
//! each plane; every output element is computed by one task, in a fixed order, so results are
//! bit-identical for every thread count.

use core::fmt;
use core::num::NonZeroUsize;
#[cfg(feature = "rayon")]
use std::sync::Arc;

use crate::device::{Device, DeviceLimits, internal::DeviceImpl};
use crate::error::Result;
use workspace::CacheLine;

mod adaptive;
mod bitmask;
mod forward;
mod mask;
mod maxpool;
mod scatter;
mod workspace;

/// How the CPU device spreads work over threads.
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
/// # #[cfg(feature = "rayon")] {
/// use poolgrad::device::cpu::Parallelism;
/// let two = Cpu::new(Parallelism::Threads(2.try_into().unwrap()))?;
/// assert_eq!(two.threads(), 2);
/// # }
/// # Ok::<(), poolgrad::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cpu {
    parallelism: Parallelism,
    #[cfg(feature = "rayon")]
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl Default for Cpu {
    /// rayon's global pool with the `rayon` feature, else sequential.
    fn default() -> Self {
        #[cfg(feature = "rayon")]
        return Cpu { parallelism: Parallelism::AllThreads, pool: None };
        #[cfg(not(feature = "rayon"))]
        return Cpu::sequential();
    }
}

impl Cpu {
    /// A CPU device with the given parallelism; [`Parallelism::Threads`] builds its pool here.
    ///
    /// # Errors
    /// [`Error::ThreadPool`](crate::Error::ThreadPool) if rayon cannot start the threads.
    pub fn new(parallelism: Parallelism) -> Result<Self> {
        #[cfg(feature = "rayon")]
        {
            let pool = match &parallelism {
                Parallelism::Threads(n) => Some(Arc::new(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(n.get())
                        .build()
                        .map_err(|e| crate::Error::ThreadPool { threads: n.get(), reason: e.to_string() })?,
                )),
                Parallelism::Pool(p) => Some(Arc::clone(p)),
                Parallelism::Sequential | Parallelism::AllThreads => None,
            };
            Ok(Cpu { parallelism, pool })
        }
        #[cfg(not(feature = "rayon"))]
        Ok(Cpu { parallelism })
    }

    /// Runs everything on the calling thread.
    pub fn sequential() -> Self {
        Cpu {
            parallelism: Parallelism::Sequential,
            #[cfg(feature = "rayon")]
            pool: None,
        }
    }

    /// The parallelism setting.
    pub fn parallelism(&self) -> &Parallelism {
        &self.parallelism
    }

    /// Threads that kernels will use (1 without the `rayon` feature).
    pub fn threads(&self) -> usize {
        #[cfg(not(feature = "rayon"))]
        return 1;
        #[cfg(feature = "rayon")]
        match &self.parallelism {
            Parallelism::Sequential => 1,
            Parallelism::AllThreads => rayon::current_num_threads(),
            Parallelism::Threads(_) | Parallelism::Pool(_) => {
                self.pool.as_ref().map_or(1, |p| p.current_num_threads())
            }
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
                match (&self.parallelism, &self.pool) {
                    (Parallelism::Sequential, _) => {}
                    (_, Some(pool)) => return pool.install(|| tasks.into_par_iter().map(f).collect()),
                    (_, None) => return tasks.into_par_iter().map(f).collect(),
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
        DeviceLimits::none()
    }
}
