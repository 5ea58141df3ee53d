//! The in-process layer: a FIFO-fair counting semaphore.
//!
//! The count and a "someone is queued" flag share one atomic word. While nobody is queued,
//! acquire and release are a single atomic operation each: no lock, no syscall. Once a request
//! has to wait it joins a FIFO queue under a mutex and parks (no spinning); the flag then makes
//! every later request queue behind it, and makes releases go through the mutex to hand their
//! units to the queue's head. So requests are granted strictly in arrival order and an
//! exclusive request (all units) is never starved by a stream of shared ones.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering, Thread, current, park, park_timeout};

// The state word: free units in the low 32 bits, then a count of releases that are handing
// units to the queue, then two flags.
const AVAILABLE: u64 = (1 << 32) - 1;
const IN_FLIGHT_ONE: u64 = 1 << 32;
const IN_FLIGHT: u64 = ((1 << 30) - 1) << 32;
/// Set when the pool's owner dropped it; the pool is freed once nothing is held or in flight.
const CLOSED: u64 = 1 << 62;
/// Set while the queue is not empty.
const QUEUED: u64 = 1 << 63;

/// How long a request may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// Not at all.
    Now,
    /// Up to this long from when the wait starts (no clock is read when no wait is needed).
    After(Duration),
    /// Until this instant.
    At(Instant),
    /// Forever.
    Never,
}

impl Deadline {
    /// Until `deadline`, or forever where there is none.
    pub(crate) fn until(deadline: Option<Instant>) -> Deadline {
        match deadline {
            Some(t) => Deadline::At(t),
            None => Deadline::Never,
        }
    }

    pub(crate) fn resolve(self, start: Instant) -> Option<Instant> {
        match self {
            Deadline::Now => Some(start),
            Deadline::After(d) => Some(start + d),
            Deadline::At(t) => Some(t),
            Deadline::Never => None,
        }
    }
}

/// A request that gave up; `since` is when it started waiting.
#[derive(Debug)]
pub(crate) struct LocalTimeout {
    pub(crate) since: Instant,
}

#[derive(Debug)]
struct Waiter {
    units: usize,
    /// When it began to wait.
    since: Instant,
    granted: AtomicBool,
    parker: Thread,
}

/// The in-process semaphore.
#[derive(Debug)]
pub(crate) struct LocalPool {
    capacity: usize,
    /// Free units, releases in flight, [`CLOSED`] and [`QUEUED`].
    state: AtomicU64,
    queue: Mutex<VecDeque<Arc<Waiter>>>,
    /// Where the queue's length and its oldest wait are published for `status` (a pool with
    /// host slots): written under the queue's mutex when the queue changes, never on the path
    /// of a request that does not wait. Boxed: the pool's hot words stay close together.
    published: Option<Box<crate::host::ThreadsFile>>,
}

impl LocalPool {
    #[cfg(all(test, not(loom)))]
    pub(crate) fn new(capacity: usize) -> LocalPool {
        LocalPool::publishing(capacity, None)
    }

    /// A pool whose queue is published in `published` (see [`crate::host::ThreadsFile`]).
    pub(crate) fn publishing(
        capacity: usize,
        published: Option<crate::host::ThreadsFile>,
    ) -> LocalPool {
        assert!((1..=u32::MAX as usize / 2).contains(&capacity));
        LocalPool {
            capacity,
            state: AtomicU64::new(capacity as u64),
            queue: Mutex::new(VecDeque::new()),
            published: published.map(Box::new),
        }
    }

    /// Publishes the queue's length and its oldest wait, where the pool publishes them.
    /// Called with the queue locked, after it changed.
    fn publish(&self, q: &VecDeque<Arc<Waiter>>) {
        if let Some(p) = &self.published {
            p.publish(q.len(), q.front().map(|w| w.since));
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes `units` if they are free and nobody is queued.
    fn try_fast(&self, units: usize) -> bool {
        let units = units as u64;
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & QUEUED != 0 || s & AVAILABLE < units {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s - units,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Takes `units` permits, waiting in FIFO order until the deadline. Returns when the wait
    /// started (`None`: no wait was needed), or the timeout (nothing is held then).
    pub(crate) fn acquire(
        &self,
        units: usize,
        deadline: Deadline,
    ) -> Result<Option<Instant>, LocalTimeout> {
        debug_assert!(units >= 1 && units <= self.capacity);
        if self.try_fast(units) {
            return Ok(None);
        }
        let start = Instant::now();
        let (waiter, deadline) = {
            let mut q = self.queue.lock();
            if q.is_empty() && self.try_fast(units) {
                return Ok(Some(start));
            }
            if let Deadline::Now = deadline {
                return Err(LocalTimeout { since: start });
            }
            let w = Arc::new(Waiter {
                units,
                since: start,
                granted: AtomicBool::new(false),
                parker: current(),
            });
            // Raise the flag before looking at the count: a release either sees the flag and
            // comes through the mutex, or its units are visible to `grant` below.
            self.state.fetch_or(QUEUED, Ordering::AcqRel);
            q.push_back(w.clone());
            self.grant(&mut q);
            self.publish(&q);
            (w, deadline.resolve(start))
        };
        loop {
            if waiter.granted.load(Ordering::Acquire) {
                return Ok(Some(start));
            }
            match deadline {
                None => park(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    park_timeout(d - now);
                }
            }
        }
        // Deadline passed: leave the queue, unless a release granted us in the meantime.
        let mut q = self.queue.lock();
        if waiter.granted.load(Ordering::Acquire) {
            return Ok(Some(start));
        }
        q.retain(|w| !Arc::ptr_eq(w, &waiter));
        // We may have been the head that blocked smaller requests behind us.
        self.grant(&mut q);
        self.publish(&q);
        Err(LocalTimeout { since: start })
    }

    /// Grants queued requests from the front while they fit; lowers the flag when the queue
    /// empties. Called with the queue locked.
    fn grant(&self, q: &mut VecDeque<Arc<Waiter>>) {
        while let Some(head) = q.front() {
            let units = head.units as u64;
            let mut s = self.state.load(Ordering::Acquire);
            loop {
                if s & AVAILABLE < units {
                    return;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s - units,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
            }
            let w = q.pop_front().unwrap();
            w.granted.store(true, Ordering::Release);
            w.parker.unpark();
        }
        self.state.fetch_and(!QUEUED, Ordering::AcqRel);
    }

    /// Returns `units` permits. Returns `true` when the pool is closed and this was the last
    /// thing it waited for: the caller must free it, and nobody else touches it.
    #[must_use]
    pub(crate) fn release(&self, units: usize) -> bool {
        let units = units as u64;
        let mut s = self.state.load(Ordering::Relaxed);
        let handing_over = loop {
            // With a queue, mark this release as in flight until it has served the queue, so
            // the pool cannot be freed under it.
            let queued = s & QUEUED != 0;
            let new = s + units + if queued { IN_FLIGHT_ONE } else { 0 };
            debug_assert!((new & AVAILABLE) as usize <= self.capacity);
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if queued => break true,
                Ok(_) => return self.is_done(new),
                Err(now) => s = now,
            }
        };
        debug_assert!(handing_over);
        {
            let mut q = self.queue.lock();
            self.grant(&mut q);
            self.publish(&q);
        }
        let after = self.state.fetch_sub(IN_FLIGHT_ONE, Ordering::AcqRel) - IN_FLIGHT_ONE;
        self.is_done(after)
    }

    /// Marks the pool closed (its owner is gone). Returns `true` when nothing is held or in
    /// flight: the caller frees it. Otherwise the last [`release`](Self::release) does.
    #[must_use]
    pub(crate) fn close(&self) -> bool {
        let before = self.state.fetch_or(CLOSED, Ordering::AcqRel);
        self.is_done(before | CLOSED)
    }

    fn is_done(&self, s: u64) -> bool {
        s & CLOSED != 0 && s & IN_FLIGHT == 0 && (s & AVAILABLE) as usize == self.capacity
    }

    /// Requests queued right now.
    pub(crate) fn queued(&self) -> usize {
        self.queue.lock().len()
    }

    /// Permits not held right now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        (self.state.load(Ordering::Acquire) & AVAILABLE) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_exclusive_is_not_starved_by_shared() {
        let pool = Arc::new(LocalPool::new(2));
        pool.acquire(1, Deadline::Never).unwrap();
        // An exclusive request queues behind the held permit...
        let p = pool.clone();
        let excl = std::thread::spawn(move || {
            p.acquire(2, Deadline::Never).unwrap();
            assert!(!p.release(2));
        });
        while pool.queued() == 0 {
            std::thread::yield_now();
        }
        // ...and a later shared request must not overtake it even though one permit is free.
        assert!(pool.acquire(1, Deadline::Now).is_err());
        assert!(
            pool.acquire(1, Deadline::After(Duration::from_millis(20)))
                .is_err()
        );
        assert!(!pool.release(1));
        excl.join().unwrap();
        assert_eq!(pool.available(), 2);
        assert_eq!(
            pool.state.load(Ordering::Relaxed),
            2,
            "the queued flag is down again"
        );
    }

    #[test]
    fn timed_out_head_lets_the_next_request_through() {
        let pool = Arc::new(LocalPool::new(2));
        pool.acquire(1, Deadline::Never).unwrap();
        let p = pool.clone();
        // An exclusive head that gives up must not leave a shared request behind it stuck.
        let excl = std::thread::spawn(move || {
            p.acquire(2, Deadline::After(Duration::from_millis(50)))
                .is_ok()
        });
        while pool.queued() == 0 {
            std::thread::yield_now();
        }
        let p = pool.clone();
        let shared =
            std::thread::spawn(move || p.acquire(1, Deadline::Never).map(|_| p.release(1)));
        assert!(!excl.join().unwrap());
        assert!(shared.join().unwrap().is_ok());
        assert!(!pool.release(1));
        assert_eq!(pool.available(), 2);
        assert!(pool.close());
    }
}
