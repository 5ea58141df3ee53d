//! Synchronisation primitives, swappable for loom's under `--cfg loom` so the model checker can
//! explore every interleaving of the in-process permit state machine.
//!
//! Loom has no `Weak`, so the permit's reference count stays std's in both builds; it is ordered
//! against other threads by the pool mutex, which is loom's.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current, park, yield_now};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current, park, park_timeout, yield_now};

/// Under loom there are no timed waits; a model never passes a deadline.
#[cfg(loom)]
pub(crate) fn park_timeout(_d: std::time::Duration) {
    park()
}

/// A mutex with parking_lot's API (`lock()` returns the guard directly).
#[cfg(not(loom))]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex(loom::sync::Mutex::new(v))
    }
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap()
    }
}
