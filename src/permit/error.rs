//! Why a permit could not be had, and who was in the way.

use std::fmt;
use std::time::Duration;

use super::want::{PermitKind, Refused};
use crate::config::INHERITED_VAR;
use crate::host::HostError;

/// Why a permit could not be had.
///
/// ```
/// use gpu_test_permit::{AcquireError, PermitKind, PermitPool};
///
/// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
/// let held = pool.acquire();
/// std::thread::scope(|s| {
///     // Another thread finds the one permit taken.
///     s.spawn(|| {
///         let e = pool.try_acquire(PermitKind::Shared).unwrap_err();
///         assert!(matches!(e, AcquireError::WouldBlock), "{e}");
///     });
/// });
/// drop(held);
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum AcquireError {
    /// The deadline passed; the error lists who held the permits.
    Timeout(Box<WaitTimeout>),
    /// The thread holds a shared permit and asked for an exclusive one, which would wait for
    /// itself forever. Take the exclusive permit first, or drop the shared one.
    ExclusiveWhileShared,
    /// A non-blocking request ([`PermitPool::try_acquire`](crate::PermitPool::try_acquire)) found no free permit.
    WouldBlock,
    /// A weighted request asked for more units than one GPU has: it could never be served.
    #[non_exhaustive]
    TooLarge {
        /// Units asked for (from a weight, or from declared memory).
        asked: usize,
        /// Units one GPU has (N), or those of the permit this process works inside.
        per_gpu: usize,
        /// The pool works inside a permit inherited from `gpu-test-permit run`, which holds
        /// `per_gpu` units.
        inherited: bool,
    },
    /// An exclusive permit was asked for inside a shared permit inherited from
    /// `gpu-test-permit run`: the rest of the GPU is others', so it could never be granted.
    #[non_exhaustive]
    ExclusiveInsideShared {
        /// Units of the inherited permit.
        held: usize,
    },
    /// A request declared more memory than one GPU's budget: it could never be served.
    #[non_exhaustive]
    MemoryTooLarge {
        /// Bytes declared.
        asked: u64,
        /// The per-GPU budget, bytes.
        budget: u64,
    },
    /// A request asked for more GPUs than one group of the pool has (`GPU_TEST_PERMIT_GPUS`,
    /// [`PoolBuilder::gpus`](crate::PoolBuilder::gpus)): it could never be served.
    #[non_exhaustive]
    TooManyGpus {
        /// GPUs asked for.
        asked: usize,
        /// The most GPUs one request can have: the pool's GPUs, or its largest group's.
        widest: usize,
        /// The pool's GPUs.
        gpus: usize,
        /// The pool works inside a permit inherited from `gpu-test-permit run`, which holds
        /// `widest` GPUs.
        inherited: bool,
    },
    /// The thread holds a permit of fewer units than it now asks for; waiting for more would
    /// wait for itself. Take the larger permit first, or drop the smaller one.
    #[non_exhaustive]
    NestedLarger {
        /// Units of the permit the thread holds.
        held: usize,
        /// Units asked for.
        asked: usize,
    },
    /// The host slots could not be used.
    Host(HostError),
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Timeout(t) => t.fmt(f),
            AcquireError::ExclusiveWhileShared => f.write_str(
                "this thread asked for an exclusive GPU permit while holding a \
                 shared one, which would wait for itself forever; take the exclusive permit \
                 before any shared one, or drop the shared one first",
            ),
            AcquireError::WouldBlock => f.write_str("no GPU permit is free right now"),
            AcquireError::TooLarge {
                asked,
                per_gpu,
                inherited: false,
            } => write!(
                f,
                "asked for a GPU permit of {asked} units, but a GPU has only {per_gpu} ({}); \
                 ask for at most {per_gpu} units, take the exclusive permit, or raise N",
                crate::config::Config::global().concurrency_var
            ),
            AcquireError::TooLarge { asked, per_gpu, .. } => write!(
                f,
                "asked for a GPU permit of {asked} units, but this process works inside the \
                 permit of `gpu-test-permit run` ({INHERITED_VAR}), which holds {per_gpu}; give \
                 `run` --units {asked} (or --exclusive)"
            ),
            AcquireError::ExclusiveInsideShared { held } => write!(
                f,
                "asked for an exclusive GPU permit, but this process works inside a shared \
                 permit of {held} unit(s) held by `gpu-test-permit run` ({INHERITED_VAR}): the \
                 rest of the GPU is other processes'; run it under `gpu-test-permit run \
                 --exclusive`, or ask for at most {held} unit(s)"
            ),
            AcquireError::MemoryTooLarge { asked, budget } => write!(
                f,
                "declared {} of GPU memory, but the budget of one GPU is {} \
                 (GPU_TEST_PERMIT_GPU_MEMORY, or the device memory the probe found); declare \
                 at most that, or raise the budget",
                crate::config::format_bytes(*asked),
                crate::config::format_bytes(*budget)
            ),
            AcquireError::TooManyGpus {
                asked,
                widest,
                inherited: true,
                ..
            } => write!(
                f,
                "asked for a GPU permit on {asked} GPUs, but this process works inside the \
                 permit of `gpu-test-permit run` ({INHERITED_VAR}), which holds {widest}; give \
                 `run` --gpus {asked} or more, or ask for at most {widest}"
            ),
            AcquireError::TooManyGpus {
                asked,
                widest,
                gpus,
                ..
            } if widest == gpus => write!(
                f,
                "asked for a GPU permit on {asked} GPUs, but the pool spans {gpus}; ask for at \
                 most {gpus}, or set GPU_TEST_PERMIT_GPUS to the GPUs this host has"
            ),
            AcquireError::TooManyGpus {
                asked,
                widest,
                gpus,
                ..
            } => write!(
                f,
                "asked for a GPU permit on {asked} GPUs, but a permit stays within one group \
                 of GPU_TEST_PERMIT_GPUS and the largest has {widest} (of {gpus} GPUs); ask \
                 for at most {widest}, or name larger groups"
            ),
            AcquireError::NestedLarger { held, asked } => write!(
                f,
                "this thread holds a GPU permit of {held} unit(s) and asked for {asked}, which \
                 would wait for itself forever; take the larger permit first (nested requests \
                 of at most {held} units then use it), or drop the smaller one"
            ),
            AcquireError::Host(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AcquireError::Host(e) => Some(e),
            _ => None,
        }
    }
}

/// Someone holding a permit, as shown in a [`WaitTimeout`].
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit::{AcquireError, PermitPool};
///
/// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
/// let _held = pool.acquire();
/// let e = std::thread::scope(|s| {
///     s.spawn(|| pool.try_acquire_for(Duration::from_millis(20)).unwrap_err()).join().unwrap()
/// });
/// let AcquireError::Timeout(t) = e else { panic!("{e}") };
/// let holder = &t.holders[0];
/// assert_eq!((holder.pid, holder.units, holder.exclusive), (std::process::id(), 1, false));
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Process id.
    pub pid: u32,
    /// How long it has held the permit; `None` where that cannot be told: a holder that wrote
    /// no record, or a record whose grant time this process cannot place (one later than now
    /// by the wall clock, where the record has no boot-clock time).
    pub held_for: Option<Duration>,
    /// Whether it holds the whole pool.
    pub exclusive: bool,
    /// Permit units it holds (1, k for a weighted permit, all for an exclusive one).
    pub units: usize,
    /// Whether its process was stopped (`SIGSTOP`, Ctrl-Z, a debugger): it keeps its permit
    /// until it is resumed or killed.
    pub stopped: bool,
    /// Whether it recorded itself in its slots. `false`: slots locked by a process that wrote
    /// no record there (`units` of them), so its test, thread and hold time are unknown (empty
    /// and `None`): a process taking the several slots of a weighted or exclusive permit,
    /// caught in the microseconds before it has them all (stopped there, it keeps them until
    /// it is resumed or killed), or one whose record could not be written. `pid` is the lock's
    /// owner where the system tells it (`/proc/locks` on Linux), else 0.
    pub recorded: bool,
    /// Whether no process here has `pid` while its slots stay locked: it exited, and the
    /// processes it started hold the slots through the descriptors they inherited (a slot's
    /// lock lives as long as any process has its open file, as after `gpu-test-permit run`
    /// was killed), or it runs in another PID namespace.
    pub exited: bool,
}

impl Holder {
    /// What completes a line about a holder that [`exited`](Self::exited).
    fn exited_text(&self) -> String {
        if !self.exited {
            return String::new();
        }
        format!(
            "; pid {} has exited, and the processes it started still hold its slot(s) through \
             the descriptors they inherited (or it runs in another PID namespace): end them to \
             free the slot(s)",
            self.pid
        )
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stopped = if self.stopped {
            ", its process stopped (SIGSTOP, Ctrl-Z or a debugger)"
        } else {
            ""
        };
        if !self.recorded {
            let who = if self.pid == 0 {
                "a process this system cannot name".to_string()
            } else {
                format!("pid {}", self.pid)
            };
            return write!(
                f,
                "{} slot(s) locked by {who} that wrote no record there{stopped}: a process \
                 taking the slots of a weighted or exclusive permit (stopped in the middle, it \
                 keeps them until it is resumed or killed), or one that could not write its \
                 record{}",
                self.units,
                self.exited_text()
            );
        }
        write!(
            f,
            "test `{}` (thread `{}`, pid {}) for {}{}{}{}",
            self.test,
            self.thread,
            self.pid,
            how_long(self.held_for),
            if self.exclusive {
                ", exclusive".to_string()
            } else if self.units > 1 {
                format!(", {} units", self.units)
            } else {
                String::new()
            },
            stopped,
            self.exited_text()
        )
    }
}

/// A wait that passed its deadline.
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit::{AcquireError, PermitKind, PermitPool};
///
/// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
/// let _held = pool.acquire();
/// let e = std::thread::scope(|s| {
///     s.spawn(|| pool.try_acquire_for(Duration::from_millis(20)).unwrap_err()).join().unwrap()
/// });
/// let AcquireError::Timeout(t) = e else { panic!("{e}") };
/// assert_eq!((t.kind, t.units, t.capacity), (PermitKind::Shared, 1, 1));
/// assert!(t.waited >= Duration::from_millis(20));
/// assert_eq!(t.holders.len(), 1);
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WaitTimeout {
    /// How long the caller waited.
    pub waited: Duration,
    /// What was asked for.
    pub kind: PermitKind,
    /// Permit units asked for.
    pub units: usize,
    /// The test that waited.
    pub test: String,
    /// Permits per GPU: N.
    pub concurrency: usize,
    /// Permits in the pool: N per GPU times the GPUs.
    pub capacity: usize,
    /// Who held permits when the wait gave up (this process and, through the host slots,
    /// others).
    pub holders: Vec<Holder>,
    /// Requests of other processes that were waiting too, the head of the queue first: they
    /// come before this one, unless stopped.
    pub waiters: Vec<Waiter>,
    /// Requests of this process queued at that moment.
    pub queued_here: usize,
    /// Why no GPU had the memory the request declared free, as NVML reported it at the last
    /// attempt (`GPU_TEST_PERMIT_LIVE_MEMORY`), naming the processes that use it without a
    /// permit; `None` when memory did not hold it back.
    pub memory: Option<String>,
}

/// A request of another process that was waiting when a wait gave up, as shown in a
/// [`WaitTimeout`].
///
/// ```
/// use gpu_test_permit::WaitTimeout;
///
/// /// What a suite's own timeout handling might print: the queue ahead of it.
/// fn queue_ahead(t: &WaitTimeout) -> Vec<String> {
///     t.waiters
///         .iter()
///         .filter(|w| w.head || !w.stopped)
///         .map(|w| format!("{} (pid {}): {} unit(s)", w.test, w.pid, w.units))
///         .collect()
/// }
/// # let _ = queue_ahead;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Process id.
    pub pid: u32,
    /// How long it had been waiting; `None` where that cannot be told (as for
    /// [`Holder::held_for`]).
    pub waiting_for: Option<Duration>,
    /// Whether it asked for the whole pool.
    pub exclusive: bool,
    /// Permit units it asked for.
    pub units: usize,
    /// Whether it was the head of the queue (the next to take a permit).
    pub head: bool,
    /// Whether its process was stopped (`SIGSTOP`, Ctrl-Z, a debugger): a stopped head loses
    /// its turn to the waiters behind it.
    pub stopped: bool,
    /// Whether it kept its turn, and if not, why (stopped, a pid no process here has, or no
    /// sign of life): a request that lost its turn holds nobody back.
    pub liveness: crate::host::Liveness,
}

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "test `{}` (thread `{}`, pid {}) waiting {} for a{} permit{}{}",
            self.test,
            self.thread,
            self.pid,
            how_long(self.waiting_for),
            sized(self.exclusive, self.units),
            if self.head {
                ", at the head of the queue"
            } else {
                ""
            },
            if self.liveness.keeps_turn() {
                String::new()
            } else {
                format!(
                    ", {}: it lost its turn to the requests behind it",
                    self.liveness
                )
            }
        )
    }
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "test `{}` waited {:.1}s for a{} GPU permit (N = {}{}) and gave up.",
            self.test,
            self.waited.as_secs_f64(),
            sized(self.kind == PermitKind::Exclusive, self.units),
            self.concurrency,
            if self.capacity == self.concurrency {
                String::new()
            } else {
                format!(" per GPU, {} in all", self.capacity)
            }
        )?;
        if self.holders.is_empty() {
            write!(f, " No permit holder was found.")?;
        } else {
            write!(f, " Holders:")?;
            for h in &self.holders {
                write!(f, "\n  - {h}")?;
            }
        }
        if !self.waiters.is_empty() {
            write!(f, "\nWaiting in other processes:")?;
            for w in &self.waiters {
                write!(f, "\n  - {w}")?;
            }
        }
        if self.queued_here > 0 {
            write!(
                f,
                "\n  ({} more request(s) of this process queued)",
                self.queued_here
            )?;
        }
        if let Some(memory) = &self.memory {
            return write!(
                f,
                "\nHeld back by GPU memory, not by permits: {memory}. Memory that processes \
                 without a permit use frees when they end; GPU_TEST_PERMIT_LIVE_MEMORY=off \
                 counts declarations against the budget alone."
            );
        }
        // (Holders without a record have no known hold time.)
        // (Hold times come from millisecond records: allow for their rounding. A hold time
        // that cannot be told is no sign of being stuck.)
        let mut running = 0;
        let mut all_whole_wait = true;
        for h in &self.holders {
            if h.stopped || !h.recorded {
                continue;
            }
            running += 1;
            match h.held_for {
                Some(held) if held + Duration::from_millis(50) >= self.waited => {}
                _ => all_whole_wait = false,
            }
        }
        if running > 0 && all_whole_wait {
            // Nothing changed hands while this test waited: stuck rather than busy.
            write!(
                f,
                "\nEvery holder held its permit for the whole wait: they look stuck rather than \
                 busy, as in a GPU driver that deadlocked under concurrent use. A lower {} is \
                 the usual cure; GPU_TEST_PERMIT_HOLD_TIMEOUT makes a stuck holder fail with a \
                 diagnosis.",
                crate::config::Config::global().concurrency_var
            )
        } else {
            write!(
                f,
                "\nA holder that is stuck is the usual cause; otherwise raise \
                 GPU_TEST_PERMIT_TIMEOUT."
            )
        }
    }
}

impl std::error::Error for WaitTimeout {}

/// A hold or wait time as the diagnosis shows it: `1.5s`, or where it cannot be told, `an
/// unknown time`.
fn how_long(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
        None => "an unknown time".to_string(),
    }
}

/// What completes "a… permit" for a request: "n exclusive", " 3-unit", or nothing for one unit.
fn sized(exclusive: bool, units: usize) -> String {
    if exclusive {
        "n exclusive".to_string()
    } else if units > 1 {
        format!(" {units}-unit")
    } else {
        String::new()
    }
}

impl From<Refused> for AcquireError {
    #[cold]
    fn from(refused: Refused) -> AcquireError {
        match refused {
            Refused::TooLarge {
                asked,
                limit,
                inherited,
            } => AcquireError::TooLarge {
                asked,
                per_gpu: limit,
                inherited,
            },
            Refused::Memory { asked, budget } => AcquireError::MemoryTooLarge { asked, budget },
            Refused::ExclusiveInside { held } => AcquireError::ExclusiveInsideShared { held },
            Refused::Gpus {
                asked,
                widest,
                gpus,
                inherited,
            } => AcquireError::TooManyGpus {
                asked,
                widest,
                gpus,
                inherited,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(held_for: Option<Duration>) -> Holder {
        Holder {
            test: "gpu::draws".into(),
            thread: "main".into(),
            pid: 7,
            held_for,
            exclusive: false,
            units: 1,
            stopped: false,
            recorded: true,
            exited: false,
        }
    }

    fn timeout(holders: Vec<Holder>) -> WaitTimeout {
        WaitTimeout {
            waited: Duration::from_secs(2),
            kind: PermitKind::Shared,
            units: 1,
            test: "gpu::waits".into(),
            concurrency: 1,
            capacity: 1,
            holders,
            waiters: vec![Waiter {
                test: "gpu::queued".into(),
                thread: "main".into(),
                pid: 8,
                waiting_for: None,
                exclusive: false,
                units: 1,
                head: false,
                stopped: false,
                liveness: crate::host::Liveness::Active,
            }],
            queued_here: 0,
            memory: None,
        }
    }

    #[test]
    fn a_hold_time_that_cannot_be_told_is_said_so_and_is_no_sign_of_being_stuck() {
        let stuck = "Every holder held its permit for the whole wait";
        let whole = timeout(vec![holder(Some(Duration::from_secs(3)))]).to_string();
        assert!(
            whole.contains("pid 7) for 3.0s") && whole.contains(stuck),
            "{whole}"
        );
        for holders in [
            vec![holder(None)],
            vec![holder(Some(Duration::from_secs(3))), holder(None)],
        ] {
            let text = timeout(holders).to_string();
            assert!(text.contains("pid 7) for an unknown time"), "{text}");
            assert!(!text.contains(stuck), "{text}");
            assert!(
                text.contains("A holder that is stuck is the usual cause"),
                "{text}"
            );
            assert!(
                text.contains("pid 8) waiting an unknown time for a permit"),
                "{text}"
            );
        }
    }
}
