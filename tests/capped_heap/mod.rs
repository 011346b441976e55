//! A counted, capped heap for a test binary (`mod capped_heap;` makes it the binary's global
//! allocator): a call run [`within`] a budget that allocates more than it fails to allocate, an
//! abort that fails the run, where the call itself must succeed or return its error.
#![allow(dead_code)]

use std::alloc::System;
use std::sync::{Mutex, MutexGuard};

use cap::Cap;

#[global_allocator]
static HEAP: Cap<System> = Cap::new(System, usize::MAX);

/// Every test of a binary with a capped heap takes this first: the budget is process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub const MIB: usize = 1 << 20;

/// Runs `f` with at most `budget` bytes of heap on top of what is allocated now.
pub fn within<R>(budget: usize, f: impl FnOnce() -> R) -> R {
    HEAP.set_limit(HEAP.allocated() + budget).expect("a limit above the heap in use");
    let r = f();
    HEAP.set_limit(usize::MAX).expect("no limit");
    r
}
