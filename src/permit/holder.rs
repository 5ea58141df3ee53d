//! Who holds a permit, so that the holder's next request joins it instead of taking units of
//! its own: the rule of a reentrant lock, which `lock_api` keys by the owning thread
//! (`RawReentrantMutex` and `GetThreadId`). Here one key has two kinds ([`Key`]):
//!
//! - [`Key::Thread`], the current thread: every request of a thread that holds a permit of the
//!   pool (or has [entered](super::GpuTestPermit::enter) one) gets one more guard of it;
//! - [`Key::Test`], a test by its name, with learned weights: the test's other threads join
//!   the learned permit it holds, since its measured weight covers the whole test, and a
//!   thread that waited for units its own test holds would wait for itself.
//!
//! Either way an entry ([`Holding`]) names a seat and the seat's generation when noted; it only
//! helps find the permit. The guards are counted in the seat, so a guard may drop on any
//! thread: a holder joins its permit by [`try_join`], one compare-and-swap that fails where
//! the seat has moved on (another generation, or no live guard), and an entry that fails is
//! forgotten on the way. The thread's entries are in a thread-local list (no lock, no line
//! other threads write: the nested path stays a few nanoseconds); the tests' entries are the
//! pool's ([`Holders`]), under a lock, looked at only with learned weights on.

use super::seat::{GUARD_BITS, GUARDS, Seat};
use crate::sync::Ordering;

/// Who holds a permit (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(super) enum Key<'a> {
    /// The current thread.
    Thread,
    /// The test of this name (`<binary>::<test>`), on whichever thread.
    Test(&'a str),
}

/// A permit a holder holds: its pool, seat and the seat's generation when noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    pub(super) pool_id: u64,
    pub(super) seat: usize,
    pub(super) generation: u64,
}

/// What an attempt to join a held permit found ([`try_join`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
    /// One more guard of the permit is counted.
    Joined,
    /// The seat moved on: its permit is gone.
    Gone,
    /// The permit has as many guards as a seat counts.
    Full,
}

/// Adds a guard to the permit in `seat` if it is still the permit of `generation` and has a
/// live guard. The one rule by which every holder joins its permit.
#[inline(always)]
pub(super) fn try_join(seat: &Seat, generation: u64) -> Join {
    let mut word = seat.word.load(Ordering::Relaxed);
    loop {
        let guards = word & GUARDS;
        if word >> GUARD_BITS != generation || guards == 0 {
            return Join::Gone;
        }
        if guards == GUARDS {
            return Join::Full;
        }
        match seat
            .word
            .compare_exchange_weak(word, word + 1, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return Join::Joined,
            Err(now) => word = now,
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    static THREAD: std::cell::RefCell<Vec<Holding>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static THREAD: std::cell::RefCell<Vec<Holding>> =
        std::cell::RefCell::new(Vec::new());
}

/// The holders of one pool's permits.
#[derive(Debug)]
pub(super) struct Holders {
    pool_id: u64,
    /// Learned permits held now (or lately: an entry whose seat has moved on is stale), by
    /// test.
    tests: parking_lot::Mutex<Vec<(String, Holding)>>,
}

impl Holders {
    /// The holders of the pool with id `pool_id`.
    pub(super) fn new(pool_id: u64) -> Holders {
        Holders {
            pool_id,
            tests: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Joins the permit of this pool that `key` holds, if it still lives: one more guard of
    /// it, in the seat returned. Entries whose permit is gone are forgotten on the way.
    ///
    /// # Panics
    ///
    /// When the thread's permit has as many guards as a seat counts. A test's full permit is
    /// not joined (its thread takes units of its own).
    #[inline(always)]
    pub(super) fn join(&self, key: Key<'_>, seats: &[Seat]) -> Option<usize> {
        match key {
            Key::Thread => self.join_thread(seats),
            Key::Test(test) => self.join_test(test, seats),
        }
    }

    /// Notes that `key` holds the permit of this pool in `seat`, of `generation`. A thread may
    /// hold several (of this pool and of others); a test holds one learned permit of the pool,
    /// and a seat one permit: an entry of the same seat is replaced.
    pub(super) fn note(&self, key: Key<'_>, seat: usize, generation: u64) -> Holding {
        let holding = Holding {
            pool_id: self.pool_id,
            seat,
            generation,
        };
        match key {
            Key::Thread => with_thread(|v| v.push(holding)),
            Key::Test(test) => {
                let mut tests = self.tests.lock();
                let mut i = 0;
                while i < tests.len() {
                    if tests[i].1.seat == seat {
                        tests.remove(i);
                    } else {
                        i += 1;
                    }
                }
                tests.push((test.to_string(), holding));
            }
        }
        holding
    }

    /// The latest thread entry of `holding` goes (a permit entered twice has two).
    pub(super) fn leave_thread(holding: Holding) {
        with_thread(|v| {
            let mut i = v.len();
            while i > 0 {
                i -= 1;
                if v[i] == holding {
                    v.remove(i);
                    break;
                }
            }
        });
    }

    /// [`join`](Self::join) for [`Key::Thread`]: the thread's latest entry of the pool first.
    #[inline(always)]
    fn join_thread(&self, seats: &[Seat]) -> Option<usize> {
        let pool_id = self.pool_id;
        with_thread(|v| {
            let mut i = v.len();
            while i > 0 {
                i -= 1;
                let e = v[i];
                if e.pool_id != pool_id {
                    continue;
                }
                match try_join(&seats[e.seat], e.generation) {
                    Join::Joined => return Some(e.seat),
                    Join::Gone => {
                        v.swap_remove(i);
                    }
                    Join::Full => panic!("gpu-test-permit: too many guards of one permit"),
                }
            }
            None
        })
    }

    /// [`join`](Self::join) for [`Key::Test`]. Out of line: only with learned weights.
    #[inline(never)]
    fn join_test(&self, test: &str, seats: &[Seat]) -> Option<usize> {
        let mut tests = self.tests.lock();
        let mut i = 0;
        while i < tests.len() {
            let e = tests[i].1;
            if tests[i].0 != test {
                i += 1;
            } else if try_join(&seats[e.seat], e.generation) == Join::Joined {
                return Some(e.seat);
            } else {
                tests.remove(i);
            }
        }
        None
    }

    /// The number of tests' entries (live or stale), for tests.
    #[cfg(all(test, not(loom)))]
    fn tests_noted(&self) -> usize {
        self.tests.lock().len()
    }
}

#[inline(always)]
fn with_thread<R>(f: impl FnOnce(&mut Vec<Holding>) -> R) -> R {
    THREAD.with(|cell| f(&mut cell.borrow_mut()))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Seats whose permits hold `guards` guards each, of generation 1.
    fn seats(guards: &[u64]) -> Vec<Seat> {
        let mut v = Vec::new();
        for &g in guards {
            let s = Seat::new();
            s.word.store(1 << GUARD_BITS | g, Ordering::Relaxed);
            v.push(s);
        }
        v
    }

    fn guards(s: &Seat) -> u64 {
        s.word.load(Ordering::Relaxed) & GUARDS
    }

    #[test]
    fn a_join_counts_a_guard_only_in_the_live_permit_of_its_generation() {
        let s = seats(&[1, 0, GUARDS]);
        assert_eq!(try_join(&s[0], 1), Join::Joined);
        assert_eq!(guards(&s[0]), 2);
        assert_eq!(try_join(&s[0], 2), Join::Gone, "another generation");
        assert_eq!(try_join(&s[1], 1), Join::Gone, "no live guard");
        assert_eq!(try_join(&s[2], 1), Join::Full);
        assert_eq!(guards(&s[0]), 2);
        assert_eq!(guards(&s[1]), 0);
        assert_eq!(guards(&s[2]), GUARDS);
    }

    #[test]
    fn a_thread_joins_its_own_permits_of_the_pool_and_forgets_gone_ones() {
        let s = seats(&[1, 1, 1]);
        let a = Holders::new(u64::MAX - 1);
        let b = Holders::new(u64::MAX - 2);
        assert_eq!(a.join(Key::Thread, &s), None);
        let h0 = a.note(Key::Thread, 0, 1);
        b.note(Key::Thread, 1, 1);
        // The latest entry of the pool, not another pool's.
        assert_eq!(a.join(Key::Thread, &s), Some(0));
        assert_eq!(guards(&s[0]), 2);
        // Another thread holds nothing of it.
        std::thread::scope(|scope| {
            scope.spawn(|| assert_eq!(a.join(Key::Thread, &s), None));
        });
        // Its permit gone (a new generation in the seat): forgotten, and nothing joined.
        s[0].word.store(2 << GUARD_BITS | 1, Ordering::Relaxed);
        assert_eq!(a.join(Key::Thread, &s), None);
        with_thread(|v| assert!(!v.contains(&h0)));
        assert_eq!(b.join(Key::Thread, &s), Some(1));
        let h2 = a.note(Key::Thread, 2, 1);
        Holders::leave_thread(h2);
        assert_eq!(a.join(Key::Thread, &s), None);
        Holders::leave_thread(b.note(Key::Thread, 1, 1));
        with_thread(|v| v.clear());
    }

    #[test]
    #[should_panic(expected = "too many guards of one permit")]
    fn a_thread_whose_permit_counts_every_guard_panics() {
        let s = seats(&[GUARDS]);
        let a = Holders::new(u64::MAX - 3);
        a.note(Key::Thread, 0, 1);
        a.join(Key::Thread, &s);
    }

    #[test]
    fn a_test_joins_the_learned_permit_it_holds_and_stale_ones_are_forgotten() {
        let s = seats(&[0, 0, 1, 1]);
        let h = Holders::new(u64::MAX - 4);
        h.note(Key::Test("b::big"), 2, 7);
        h.note(Key::Test("b::other"), 3, 1);
        // Another test finds nothing to join.
        assert_eq!(h.join(Key::Test("b::small"), &s), None);
        // The seat moved on (generation 1, not 7): forgotten.
        assert_eq!(h.join(Key::Test("b::big"), &s), None);
        assert_eq!(h.tests_noted(), 1);
        h.note(Key::Test("b::big"), 2, 1);
        assert_eq!(h.join(Key::Test("b::big"), &s), Some(2));
        assert_eq!(guards(&s[2]), 2);
        // A test's entries are not the thread's, nor the other way round.
        assert_eq!(h.join(Key::Thread, &s), None);
        // A seat taken again by another test replaces its entry.
        h.note(Key::Test("b::small"), 2, 1);
        assert_eq!(h.join(Key::Test("b::big"), &s), None);
        assert_eq!(h.tests_noted(), 2);
        // On any thread.
        std::thread::scope(|scope| {
            scope.spawn(|| assert_eq!(h.join(Key::Test("b::small"), &s), Some(2)));
        });
        // A full permit is not joined; its entry goes.
        s[3].word.store(1 << GUARD_BITS | GUARDS, Ordering::Relaxed);
        h.note(Key::Test("b::full"), 3, 1);
        assert_eq!(h.join(Key::Test("b::full"), &s), None);
        assert_eq!(guards(&s[3]), GUARDS);
    }
}
