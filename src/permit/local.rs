//! The in-process layer: a FIFO-fair counting semaphore whose waiters park (no spinning) and
//! whose uncontended acquire and release take one uncontended mutex each and make no syscall.
//!
//! A request asks for `units` permits (1 for a shared permit, all of them for an exclusive one).
//! Requests are granted strictly in arrival order: a request that cannot be served waits, and so
//! does everything that arrives after it, so an exclusive request is never starved by a stream
//! of shared ones.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{AtomicU64, Mutex, Ordering, Thread, current, park, park_timeout};

/// Who holds in-process permits, for diagnostics.
#[derive(Clone, Debug)]
pub(crate) struct LocalHolder {
    pub(crate) id: u64,
    pub(crate) units: usize,
    pub(crate) thread: std::thread::Thread,
    /// [`crate::sys::coarse_ns`] when granted.
    pub(crate) since: u64,
}

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
    /// 0 while waiting; the holder id once granted.
    granted: AtomicU64,
    parker: Thread,
    thread: std::thread::Thread,
}

#[derive(Debug)]
struct State {
    available: usize,
    next_id: u64,
    queue: VecDeque<Arc<Waiter>>,
    holders: Vec<LocalHolder>,
}

impl State {
    fn grant(&mut self, units: usize, thread: std::thread::Thread) -> u64 {
        self.available -= units;
        self.next_id += 1;
        let id = self.next_id;
        self.holders.push(LocalHolder {
            id,
            units,
            thread,
            since: crate::sys::coarse_ns(),
        });
        id
    }

    /// Grants queued requests from the front while they fit.
    fn grant_waiters(&mut self) {
        while let Some(w) = self.queue.front() {
            if w.units > self.available {
                break;
            }
            let w = self.queue.pop_front().unwrap();
            let id = self.grant(w.units, w.thread.clone());
            w.granted.store(id, Ordering::Release);
            w.parker.unpark();
        }
    }
}

/// The in-process semaphore.
#[derive(Debug)]
pub(crate) struct LocalPool {
    capacity: usize,
    state: Mutex<State>,
}

impl LocalPool {
    pub(crate) fn new(capacity: usize) -> LocalPool {
        assert!(capacity >= 1);
        LocalPool {
            capacity,
            state: Mutex::new(State {
                available: capacity,
                next_id: 0,
                queue: VecDeque::new(),
                holders: Vec::new(),
            }),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes `units` permits, waiting in FIFO order until the deadline. Returns the holder id
    /// and, if it had to wait, when the wait started; or the timeout (nothing is held then).
    pub(crate) fn acquire(
        &self,
        units: usize,
        deadline: Deadline,
    ) -> Result<(u64, Option<Instant>), LocalTimeout> {
        debug_assert!(units >= 1 && units <= self.capacity);
        let (waiter, start, deadline) = {
            let mut st = self.state.lock();
            if st.queue.is_empty() && st.available >= units {
                return Ok((st.grant(units, std::thread::current()), None));
            }
            let start = Instant::now();
            if let Deadline::Now = deadline {
                return Err(LocalTimeout { since: start });
            }
            let w = Arc::new(Waiter {
                units,
                granted: AtomicU64::new(0),
                parker: current(),
                thread: std::thread::current(),
            });
            st.queue.push_back(w.clone());
            (w, start, deadline.resolve(start))
        };
        loop {
            let id = waiter.granted.load(Ordering::Acquire);
            if id != 0 {
                return Ok((id, Some(start)));
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
        let mut st = self.state.lock();
        let id = waiter.granted.load(Ordering::Acquire);
        if id != 0 {
            return Ok((id, Some(start)));
        }
        st.queue.retain(|w| !Arc::ptr_eq(w, &waiter));
        // We may have been the head that blocked smaller requests behind us.
        st.grant_waiters();
        Err(LocalTimeout { since: start })
    }

    /// Returns the permits of holder `id`.
    pub(crate) fn release(&self, id: u64) {
        let mut st = self.state.lock();
        let pos = st
            .holders
            .iter()
            .position(|h| h.id == id)
            .expect("gpu-test-permit: released an unknown in-process permit");
        let h = st.holders.swap_remove(pos);
        st.available += h.units;
        debug_assert!(st.available <= self.capacity);
        st.grant_waiters();
    }

    /// The current holders and the number of queued requests.
    pub(crate) fn snapshot(&self) -> (Vec<LocalHolder>, usize) {
        let st = self.state.lock();
        (st.holders.clone(), st.queue.len())
    }

    /// Permits not held right now.
    #[cfg(any(test, loom))]
    pub(crate) fn available(&self) -> usize {
        self.state.lock().available
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_exclusive_is_not_starved_by_shared() {
        let pool = Arc::new(LocalPool::new(2));
        let a = pool.acquire(1, Deadline::Never).unwrap().0;
        // An exclusive request queues behind the held permit...
        let p = pool.clone();
        let excl = std::thread::spawn(move || {
            let id = p.acquire(2, Deadline::Never).unwrap().0;
            p.release(id);
        });
        while pool.snapshot().1 == 0 {
            std::thread::yield_now();
        }
        // ...and a later shared request must not overtake it even though one permit is free.
        assert!(pool.acquire(1, Deadline::Now).is_err());
        assert!(pool.acquire(1, Deadline::After(Duration::from_millis(20))).is_err());
        pool.release(a);
        excl.join().unwrap();
        assert_eq!(pool.available(), 2);
    }

    #[test]
    fn timed_out_head_lets_the_next_request_through() {
        let pool = Arc::new(LocalPool::new(2));
        let a = pool.acquire(1, Deadline::Never).unwrap().0;
        let p = pool.clone();
        // An exclusive head that gives up must not leave a shared request behind it stuck.
        let excl = std::thread::spawn(move || {
            p.acquire(2, Deadline::After(Duration::from_millis(50))).is_ok()
        });
        while pool.snapshot().1 == 0 {
            std::thread::yield_now();
        }
        let p = pool.clone();
        let shared =
            std::thread::spawn(move || p.acquire(1, Deadline::Never).map(|(id, _)| p.release(id)));
        assert!(!excl.join().unwrap());
        assert!(shared.join().unwrap().is_ok());
        pool.release(a);
        assert_eq!(pool.available(), 2);
    }
}
