//! Synchronisation primitives of the in-process permit state machine (`permit::local` and the
//! seats), swappable for loom's under `--cfg loom` so the model checker can explore its
//! interleavings.
//!
//! Two things stay outside the model in both builds: the std `Arc` that keeps a queued waiter
//! alive (what orders the hand-off is the waiter's `granted` flag and the queue mutex, which are
//! loom's), and the parking_lot mutex of a seat's details, which hold diagnostics only.

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
