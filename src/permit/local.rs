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

use crate::sync::{AtomicBool, AtomicUsize, Mutex, Ordering, Thread, current, park, park_timeout};

/// Set in the state word while the queue is not empty.
const QUEUED: usize = 1 << (usize::BITS - 1);

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
    granted: AtomicBool,
    parker: Thread,
}

/// The in-process semaphore.
#[derive(Debug)]
pub(crate) struct LocalPool {
    capacity: usize,
    /// Free units, plus [`QUEUED`].
    state: AtomicUsize,
    queue: Mutex<VecDeque<Arc<Waiter>>>,
}

impl LocalPool {
    pub(crate) fn new(capacity: usize) -> LocalPool {
        assert!((1..QUEUED).contains(&capacity));
        LocalPool {
            capacity,
            state: AtomicUsize::new(capacity),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes `units` if they are free and nobody is queued.
    fn try_fast(&self, units: usize) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & QUEUED != 0 || s < units {
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
                granted: AtomicBool::new(false),
                parker: current(),
            });
            // Raise the flag before looking at the count: a release either sees the flag and
            // comes through the mutex, or its units are visible to `grant` below.
            self.state.fetch_or(QUEUED, Ordering::AcqRel);
            q.push_back(w.clone());
            self.grant(&mut q);
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
        Err(LocalTimeout { since: start })
    }

    /// Grants queued requests from the front while they fit; lowers the flag when the queue
    /// empties. Called with the queue locked.
    fn grant(&self, q: &mut VecDeque<Arc<Waiter>>) {
        while let Some(head) = q.front() {
            let mut s = self.state.load(Ordering::Acquire);
            loop {
                if s & !QUEUED < head.units {
                    return;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s - head.units,
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

    /// Returns `units` permits.
    pub(crate) fn release(&self, units: usize) {
        let before = self.state.fetch_add(units, Ordering::AcqRel);
        debug_assert!((before & !QUEUED) + units <= self.capacity);
        if before & QUEUED != 0 {
            let mut q = self.queue.lock();
            self.grant(&mut q);
        }
    }

    /// Requests queued right now.
    pub(crate) fn queued(&self) -> usize {
        self.queue.lock().len()
    }

    /// Permits not held right now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.state.load(Ordering::Acquire) & !QUEUED
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
            p.release(2);
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
        pool.release(1);
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
        pool.release(1);
        assert_eq!(pool.available(), 2);
    }
}
