//! The process-wide registry of captures open through [`CaptureScope`](super::CaptureScope).
//!
//! # How it works
//!
//! A per-stream query (`cuStreamIsCapturing`) sees only that stream's capture, but a
//! global-mode capture forbids allocation and synchronizing calls on every thread, and a
//! thread-local one on its own thread. So each scope registers itself here for as long as its
//! capture is open, and the guard reads the registry after the query.
//!
//! - `OPEN[mode]` counts the open captures of each mode in the process; `HERE[mode]` (a
//!   thread-local) counts those open on the calling thread. A scope begins and ends on one
//!   thread, so `HERE` is exact and "elsewhere" is `OPEN - HERE`.
//! - `ANY_OPEN` is the sum of `OPEN`. The guard's common case (not capturing, nothing open)
//!   costs this one load: no thread-local access, no per-mode loads.
//! - A [`Registration`] adds to all three right after the driver has begun a scope's capture,
//!   and takes away as it drops, after the scope has ended the capture (or tried to).
//! - Reads are a snapshot, not a lock: another thread may end a capture between the loads
//!   (hence the saturating subtraction), or begin one right after them, which the guard then
//!   does not see.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{CaptureMode, ModeCounts, OpenCaptures};

/// Open captures per mode, process-wide, and per thread: begin and end of one
/// [`CaptureScope`](super::CaptureScope) happen on one thread, so the thread-local count is exact.
static OPEN: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];
/// Sum of `OPEN`, for the fast path.
static ANY_OPEN: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static HERE: [Cell<usize>; 3] = const { [Cell::new(0), Cell::new(0), Cell::new(0)] };
}

/// Whether any capture is open through a scope, on any thread: the guard's fast path.
#[inline]
pub(super) fn any_open() -> bool {
    ANY_OPEN.load(Ordering::Acquire) != 0
}

impl OpenCaptures {
    /// What [`CaptureScope`](super::CaptureScope)s have open right now, seen from the calling
    /// thread.
    ///
    /// ```
    /// use gpu_test_permit::capture::{decide, CaptureStatus, OpenCaptures, Operation};
    ///
    /// // No capture is open through a `CaptureScope`: the guard's rule lets an allocation through.
    /// let open = OpenCaptures::current();
    /// assert_eq!(open, OpenCaptures::default());
    /// assert!(decide(Operation::Alloc, CaptureStatus::None, &open).is_ok());
    /// ```
    pub fn current() -> Self {
        let mut open = OpenCaptures::default();
        // The common case, no capture open anywhere, costs one load and no thread-local access.
        if !any_open() {
            return open;
        }
        // During thread teardown the thread-local is gone; this thread can no longer be inside
        // a scope then, so everything open is elsewhere.
        let here: [usize; 3] = HERE
            .try_with(|here| std::array::from_fn(|i| here[i].get()))
            .unwrap_or_default();
        let all: [usize; 3] = std::array::from_fn(|i| OPEN[i].load(Ordering::Acquire));
        // Another thread may end a capture between the loads: never underflow.
        let elsewhere: [usize; 3] = std::array::from_fn(|i| all[i].saturating_sub(here[i]));
        open.here = ModeCounts {
            global: here[0],
            thread_local: here[1],
            relaxed: here[2],
        };
        open.elsewhere = ModeCounts {
            global: elsewhere[0],
            thread_local: elsewhere[1],
            relaxed: elsewhere[2],
        };
        open
    }
}

/// One open capture, counted in the registry from [`register`](Self::register) until it drops.
/// Not `Send`: it must drop on the thread that registered it, or `HERE` would be wrong.
#[derive(Debug)]
pub(super) struct Registration {
    mode: CaptureMode,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Registration {
    /// Counts a capture of `mode` as open on this thread.
    pub(super) fn register(mode: CaptureMode) -> Self {
        OPEN[mode.index()].fetch_add(1, Ordering::AcqRel);
        ANY_OPEN.fetch_add(1, Ordering::AcqRel);
        HERE.with(|here| here[mode.index()].set(here[mode.index()].get() + 1));
        Registration {
            mode,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        HERE.with(|here| here[self.mode.index()].set(here[self.mode.index()].get() - 1));
        OPEN[self.mode.index()].fetch_sub(1, Ordering::AcqRel);
        ANY_OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}
