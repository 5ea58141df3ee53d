//! GPU test permits: a counting semaphore per GPU host, reentrant per thread, held by RAII guards.

mod local;

use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::config::{Config, SlotDir};
use crate::host::{Blockers, HolderRecord, HostError, HostSlots, HostWaitError, Layout, unix_ms};
use crate::trace::{TraceArgs, TraceEvent, Tracer};
pub(crate) use local::Deadline;
use local::{LocalPool, LocalTimeout};

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Takes a shared GPU permit from the [global pool](PermitPool::global), waiting for one as long
/// as `GPU_TEST_PERMIT_TIMEOUT` allows (10 minutes by default).
///
/// A thread that already holds a permit gets a nested guard at once. Hold the guard for as long
/// as the test uses the GPU, and create GPU resources only after this returns.
///
/// # Panics
///
/// When the wait passes its deadline (the message lists who holds the permits), and when the
/// slot directory is unusable (the message says how to fix it). In a test, that fails the test.
///
/// # Examples
///
/// ```
/// let permit = gpu_test_permit::acquire();
/// // ... create the GPU context, run the test ...
/// drop(permit); // after every GPU object
/// ```
pub fn acquire() -> GpuTestPermit {
    PermitPool::global().acquire()
}

/// Takes every permit of the [global pool](PermitPool::global): nothing else runs on the GPU
/// while the guard lives. For memory-hungry tests and CUDA graph capture tests.
///
/// # Panics
///
/// As [`acquire`], and when the calling thread already holds a shared permit (waiting would
/// deadlock on itself; take the exclusive permit first).
///
/// # Examples
///
/// ```
/// let all = gpu_test_permit::acquire_exclusive();
/// assert!(all.is_exclusive());
/// ```
pub fn acquire_exclusive() -> GpuTestPermit {
    PermitPool::global().acquire_exclusive()
}

/// Like [`acquire`], but waits at most `timeout` and returns an error instead of panicking.
///
/// # Errors
///
/// [`AcquireError::Timeout`] with the holders when the deadline passes, and
/// [`AcquireError::Host`] when the slot directory is unusable.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let permit = gpu_test_permit::try_acquire_for(Duration::from_secs(30))?;
/// # Ok::<(), gpu_test_permit::AcquireError>(())
/// ```
pub fn try_acquire_for(timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
    PermitPool::global().try_acquire_for(timeout)
}

/// Whether a permit is one of N or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermitKind {
    /// One of the pool's N permits.
    Shared,
    /// All N permits at once.
    Exclusive,
}

/// A held GPU permit. Dropping the guard returns the permit (on any thread).
///
/// Guards obtained while the thread already holds a permit (nested acquisitions, and
/// [`share`](Self::share)) keep the same permit; it is returned when the last of its guards
/// drops. Put the permit *last* in a fixture struct, so the GPU objects declared before it drop
/// first (or use [`Permitted`](crate::Permitted), which gets the order right).
#[must_use = "the permit is returned as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct GpuTestPermit {
    /// Alive while any guard of the permit lives: the permit's units are not returned before
    /// its last guard drops, and a pool is freed only once all units are back.
    pool: NonNull<PoolInner>,
    seat: usize,
    nested: Nested,
}

/// Whether a guard is its permit's first or a later one. A full word rather than a `bool`: a
/// guard is returned through memory, and a one-byte store read back as part of a wider copy
/// stalls store forwarding on the nested fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Nested {
    No = 0,
    Yes = 1,
}

// SAFETY: a guard only reaches its pool through `pool`, which stays valid while the guard lives
// (the permit's units are returned by its last guard, as that guard's last use of the pool);
// everything it touches there is atomics and mutexes, so guards may move to and be used from
// any thread.
unsafe impl Send for GpuTestPermit {}
// SAFETY: as above; `&GpuTestPermit` only reads atomics.
unsafe impl Sync for GpuTestPermit {}

impl GpuTestPermit {
    fn pool(&self) -> &PoolInner {
        // SAFETY: see the `Send` impl; this guard counts in `seat`, so the pool is alive.
        unsafe { self.pool.as_ref() }
    }

    fn seat(&self) -> &Seat {
        &self.pool().seats[self.seat]
    }

    /// Whether this guard holds the whole pool.
    pub fn is_exclusive(&self) -> bool {
        self.kind() == PermitKind::Exclusive
    }

    /// Shared or exclusive.
    pub fn kind(&self) -> PermitKind {
        if self.seat().exclusive.load(Ordering::Relaxed) {
            PermitKind::Exclusive
        } else {
            PermitKind::Shared
        }
    }

    /// Whether this guard came from a nested acquisition or [`share`](Self::share), i.e. another
    /// guard of the same permit exists or existed.
    pub fn is_nested(&self) -> bool {
        self.nested == Nested::Yes
    }

    /// The host slots this permit holds: one for a shared permit, all N for an exclusive one,
    /// none for a pool without host slots. The first slot is a natural device ordinal hint.
    pub fn slots(&self) -> std::ops::Range<usize> {
        let first = self.seat().first_slot.load(Ordering::Relaxed);
        if first == NO_SLOT {
            0..0
        } else if self.is_exclusive() {
            0..self.pool().local.capacity()
        } else {
            first..first + 1
        }
    }

    /// The GPU this permit is for, on a pool that spans several GPUs
    /// ([`PoolBuilder::gpus`], `GPU_TEST_PERMIT_GPUS`): its host slot modulo the number of GPUs,
    /// so that N permits per GPU spread over all of them. `Some(0)` on a one-GPU pool; `None`
    /// for an exclusive permit (it holds every GPU) and on a multi-GPU pool without host slots.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    /// # let dir = std::env::temp_dir().join(format!("gtp-doc-device-{}", std::process::id()));
    /// // One permit per GPU on a two-GPU host.
    /// let pool = PermitPool::builder().concurrency(1).gpus(2).slot_dir(&dir).build()?;
    /// let mine = pool.acquire();
    /// let theirs = std::thread::scope(|s| s.spawn(|| pool.acquire().device()).join().unwrap());
    /// assert_eq!((mine.device(), theirs), (Some(0), Some(1)));
    /// # drop(mine); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn device(&self) -> Option<usize> {
        let gpus = self.pool().gpus;
        if self.is_exclusive() {
            return None;
        }
        match self.slots() {
            s if s.is_empty() => (gpus == 1).then_some(0),
            s => Some(s.start % gpus),
        }
    }

    /// How long the permit has been held.
    pub fn held_for(&self) -> Duration {
        crate::sys::coarse_elapsed(self.seat().since.load(Ordering::Relaxed))
    }

    /// Another guard of the same permit, to hand to a worker thread. The permit is returned
    /// when the last guard drops. On the worker, [`enter`](Self::enter) makes nested
    /// acquisitions use this permit instead of waiting for a new one.
    ///
    /// # Panics
    ///
    /// If one permit has more than 16 million live guards.
    ///
    /// # Examples
    ///
    /// ```
    /// let permit = gpu_test_permit::acquire();
    /// let for_worker = permit.share();
    /// std::thread::spawn(move || {
    ///     let _entered = for_worker.enter();
    ///     let nested = gpu_test_permit::acquire(); // free: the worker uses the test's permit
    ///     assert!(nested.is_nested());
    /// })
    /// .join()
    /// .unwrap();
    /// ```
    pub fn share(&self) -> GpuTestPermit {
        let before = self.seat().word.fetch_add(1, Ordering::Relaxed);
        assert!(
            before & GUARDS < GUARDS,
            "gpu-test-permit: too many guards of one permit"
        );
        GpuTestPermit {
            pool: self.pool,
            seat: self.seat,
            nested: Nested::Yes,
        }
    }

    /// Makes the current thread count as holding this permit until the returned guard drops:
    /// acquisitions from its pool on this thread return nested guards.
    pub fn enter(&self) -> EnteredPermit<'_> {
        let generation = self.seat().word.load(Ordering::Relaxed) >> GUARD_BITS;
        let entry = ThreadPermit {
            pool_id: self.pool().id,
            seat: self.seat,
            generation,
        };
        with_thread_permits(|v| v.push(entry));
        EnteredPermit {
            permit: self,
            entry,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for GpuTestPermit {
    fn drop(&mut self) {
        let before = self.seat().word.fetch_sub(1, Ordering::AcqRel);
        if before & GUARDS == 1 {
            // The last guard of the permit: return it.
            // SAFETY: the pool is alive: this permit's units are still out, and `release`
            // returns them as its last use of the pool.
            unsafe { PoolInner::release(self.pool, self.seat) };
        }
    }
}

impl fmt::Debug for GpuTestPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuTestPermit")
            .field("kind", &self.kind())
            .field("nested", &self.is_nested())
            .field("slots", &self.slots())
            .field("held_for", &self.held_for())
            .finish()
    }
}

/// The current thread counts as holding a permit while this lives (see
/// [`GpuTestPermit::enter`]). Not `Send`: it is about the thread that created it.
#[must_use = "the thread stops counting as a holder when this is dropped"]
pub struct EnteredPermit<'a> {
    permit: &'a GpuTestPermit,
    entry: ThreadPermit,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for EnteredPermit<'_> {
    fn drop(&mut self) {
        let entry = self.entry;
        with_thread_permits(|v| {
            if let Some(pos) = v.iter().rposition(|e| *e == entry) {
                v.remove(pos);
            }
        });
    }
}

impl fmt::Debug for EnteredPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnteredPermit")
            .field("permit", self.permit)
            .finish()
    }
}

/// A permit the current thread holds: its pool, seat and the seat's generation when taken.
/// Only a lookup aid for reentrancy; the counts live in the pool, so a guard may be dropped on
/// any thread, and an entry whose permit is gone is recognised by the generation and pruned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ThreadPermit {
    pool_id: u64,
    seat: usize,
    generation: u64,
}

#[cfg(not(loom))]
thread_local! {
    static THREAD_PERMITS: std::cell::RefCell<Vec<ThreadPermit>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static THREAD_PERMITS: std::cell::RefCell<Vec<ThreadPermit>> =
        std::cell::RefCell::new(Vec::new());
}

fn with_thread_permits<R>(f: impl FnOnce(&mut Vec<ThreadPermit>) -> R) -> R {
    THREAD_PERMITS.with(|cell| f(&mut cell.borrow_mut()))
}

/// Bits of a seat's word that count live guards; the rest is the seat's generation.
const GUARD_BITS: u32 = 24;
const GUARDS: u64 = (1 << GUARD_BITS) - 1;
const NO_SLOT: usize = usize::MAX;

/// Where one real permit keeps its state. A pool has N seats, as many as it can have permits
/// (each permit holds at least one unit), so a request that got its units always finds a free
/// seat.
#[derive(Debug)]
struct Seat {
    /// Claimed by a permit (set first on claim, cleared last on release).
    claimed: AtomicBool,
    /// Generation (high bits) and number of live guards (low [`GUARD_BITS`]).
    word: AtomicU64,
    exclusive: AtomicBool,
    first_slot: AtomicUsize,
    /// [`crate::sys::coarse_ns`] when granted.
    since: AtomicU64,
    /// Thread that took it, for diagnostics.
    thread: AtomicU64,
    /// Names and wall-clock start, kept only where host records or a trace need them.
    detail: parking_lot::Mutex<Option<Detail>>,
}

#[derive(Debug)]
struct Detail {
    test: String,
    thread: String,
    since_wall: SystemTime,
}

impl Seat {
    fn new() -> Seat {
        Seat {
            claimed: AtomicBool::new(false),
            word: AtomicU64::new(0),
            exclusive: AtomicBool::new(false),
            first_slot: AtomicUsize::new(NO_SLOT),
            since: AtomicU64::new(0),
            thread: AtomicU64::new(0),
            detail: parking_lot::Mutex::new(None),
        }
    }
}

/// Why a permit could not be had.
#[derive(Debug)]
#[non_exhaustive]
pub enum AcquireError {
    /// The deadline passed; the error lists who held the permits.
    Timeout(WaitTimeout),
    /// The thread holds a shared permit and asked for an exclusive one, which would wait for
    /// itself forever. Take the exclusive permit first, or drop the shared one.
    ExclusiveWhileShared,
    /// A non-blocking request ([`PermitPool::try_acquire`]) found no free permit.
    WouldBlock,
    /// The host slots could not be used.
    Host(HostError),
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Timeout(t) => t.fmt(f),
            AcquireError::ExclusiveWhileShared => f.write_str(
                "gpu-test-permit: this thread asked for an exclusive GPU permit while holding a \
                 shared one, which would wait for itself forever; take the exclusive permit \
                 before any shared one, or drop the shared one first",
            ),
            AcquireError::WouldBlock => {
                f.write_str("gpu-test-permit: no GPU permit is free right now")
            }
            AcquireError::Host(e) => write!(f, "gpu-test-permit: {e}"),
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
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Process id.
    pub pid: u32,
    /// How long it has held the permit.
    pub held_for: Duration,
    /// Whether it holds the whole pool.
    pub exclusive: bool,
    /// Whether its process was stopped (`SIGSTOP`, Ctrl-Z, a debugger): it keeps its permit
    /// until it is resumed or killed.
    pub stopped: bool,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "test `{}` (thread `{}`, pid {}) for {:.1}s{}{}",
            self.test,
            self.thread,
            self.pid,
            self.held_for.as_secs_f64(),
            if self.exclusive { ", exclusive" } else { "" },
            if self.stopped {
                ", its process stopped (SIGSTOP, Ctrl-Z or a debugger)"
            } else {
                ""
            }
        )
    }
}

/// A wait that passed its deadline.
#[derive(Clone, Debug)]
pub struct WaitTimeout {
    /// How long the caller waited.
    pub waited: Duration,
    /// What was asked for.
    pub kind: PermitKind,
    /// The test that waited.
    pub test: String,
    /// The pool's permit count N.
    pub concurrency: usize,
    /// Who held permits when the wait gave up (this process and, through the host slots,
    /// others).
    pub holders: Vec<Holder>,
    /// Requests of other processes that were waiting too, the head of the queue first: they
    /// come before this one, unless stopped.
    pub waiters: Vec<Waiter>,
    /// Requests of this process queued at that moment.
    pub queued_here: usize,
}

/// A request of another process that was waiting when a wait gave up, as shown in a
/// [`WaitTimeout`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Process id.
    pub pid: u32,
    /// How long it had been waiting.
    pub waiting_for: Duration,
    /// Whether it asked for the whole pool.
    pub exclusive: bool,
    /// Whether it was the head of the queue (the next to take a permit).
    pub head: bool,
    /// Whether its process was stopped (`SIGSTOP`, Ctrl-Z, a debugger): a stopped head loses
    /// its turn to the waiters behind it.
    pub stopped: bool,
}

impl fmt::Display for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "test `{}` (thread `{}`, pid {}) waiting {:.1}s for a{} permit{}{}",
            self.test,
            self.thread,
            self.pid,
            self.waiting_for.as_secs_f64(),
            if self.exclusive { "n exclusive" } else { "" },
            if self.head {
                ", at the head of the queue"
            } else {
                ""
            },
            if self.stopped {
                ", its process stopped (SIGSTOP, Ctrl-Z or a debugger)"
            } else {
                ""
            }
        )
    }
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu-test-permit: test `{}` waited {:.1}s for a{} GPU permit (N = {}) and gave up.",
            self.test,
            self.waited.as_secs_f64(),
            if self.kind == PermitKind::Exclusive {
                "n exclusive"
            } else {
                ""
            },
            self.concurrency
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
        write!(
            f,
            "\nA holder that is stuck is the usual cause; otherwise raise GPU_TEST_PERMIT_TIMEOUT."
        )
    }
}

/// A pool of GPU permits: N per GPU host, shared by the threads of this process and, through
/// host slots, by every process using the same slot directory.
///
/// Most code uses the [global pool](Self::global) through [`acquire`]. Separate pools are for
/// tests and tools; two pools with the same slot directory and N still share the host's cap.
///
/// # Semantics
///
/// - **Fair**: requests are served in arrival order within a process; an exclusive request is
///   not overtaken by later shared ones. Across processes, the head of the queue is whoever
///   holds the slot directory's gate; among processes waiting for the gate the kernel picks.
/// - **Reentrant per thread**: a thread holding a permit of this pool gets nested guards
///   without waiting. At most one real permit per thread.
/// - **Bounded**: every wait has a deadline; past it the error lists the holders.
/// - **Crash-safe**: a process killed while holding frees its slot at once.
pub struct PermitPool {
    /// Owned (a `Box`); freed by `Drop` or, while permits are out, by the last release.
    inner: NonNull<PoolInner>,
}

struct PoolInner {
    id: u64,
    local: LocalPool,
    seats: Box<[Seat]>,
    host: Option<HostSlots>,
    host_error: Option<String>,
    timeout: Duration,
    tracer: Option<Tracer>,
    /// GPUs the permits span; a permit's device is its slot modulo this.
    gpus: usize,
}

impl PoolInner {
    /// Whether permits record names and wall-clock times (for host records or the trace).
    fn detailed(&self) -> bool {
        self.host.is_some() || self.tracer.is_some()
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        name: &str,
        ts: u64,
        dur: u64,
        detail: &Detail,
        slots: std::ops::Range<usize>,
        exclusive: bool,
    ) -> TraceEvent {
        TraceEvent {
            name: name.into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts,
            dur,
            pid: std::process::id(),
            tid: crate::sys::thread_number(),
            args: TraceArgs {
                test: detail.test.clone(),
                thread: detail.thread.clone(),
                slots: slots.collect(),
                exclusive,
                concurrency: self.local.capacity(),
            },
        }
    }

    /// Claims a free seat for a permit that holds its units. Returns the seat and its
    /// generation.
    fn claim_seat(&self) -> (usize, u64) {
        loop {
            for (i, seat) in self.seats.iter().enumerate() {
                if seat
                    .claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    let generation = (seat.word.load(Ordering::Relaxed) >> GUARD_BITS) + 1;
                    seat.word
                        .store(generation << GUARD_BITS | 1, Ordering::Release);
                    return (i, generation);
                }
            }
            // Unreachable by counting (N seats, at most N permits hold units); a releasing
            // permit frees its seat before its units, so this only waits out that window.
            crate::sync::yield_now();
        }
    }

    /// Returns the permit in `seat`, whose last guard just dropped; frees the pool if its
    /// handle is gone and this was its last permit.
    ///
    /// # Safety
    ///
    /// `this` points to a live pool, `seat` holds a permit whose last guard is gone, and the
    /// caller does not touch the pool afterwards.
    unsafe fn release(this: NonNull<PoolInner>, seat: usize) {
        {
            // SAFETY: the permit's units are out, so the pool is alive until they are returned.
            let pool = unsafe { this.as_ref() };
            let s = &pool.seats[seat];
            let exclusive = s.exclusive.load(Ordering::Relaxed);
            let first_slot = s.first_slot.load(Ordering::Relaxed);
            let detail = if pool.detailed() {
                s.detail.lock().take()
            } else {
                None
            };
            let units = if exclusive { pool.local.capacity() } else { 1 };
            // Read everything first: once unclaimed, the seat belongs to the next permit.
            s.claimed.store(false, Ordering::Release);
            let end = pool.tracer.as_ref().map(|_| SystemTime::now());
            let slots = match first_slot {
                NO_SLOT => 0..0,
                _ if exclusive => 0..units,
                f => f..f + 1,
            };
            if let Some(host) = &pool.host {
                host.release(&slots.clone().collect::<Vec<_>>());
            }
            if let (Some(t), Some(end), Some(d)) = (&pool.tracer, end, &detail) {
                let ts = crate::trace::micros(d.since_wall);
                let dur = crate::trace::micros(end).saturating_sub(ts);
                t.write(&pool.event("hold", ts, dur, d, slots, exclusive));
            }
            // The last touch of the pool: once the units are back, a closed pool may go.
            if pool.local.release(units) {
                // SAFETY: the pool's handle is gone and this release was the last thing it
                // waited for; nothing else can reach it. It was allocated as a `Box`.
                drop(unsafe { Box::from_raw(this.as_ptr()) });
            }
        }
    }
}

impl fmt::Debug for PermitPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitPool")
            .field("concurrency", &self.concurrency())
            .field("gpus", &self.gpus())
            .field("slot_dir", &self.inner().host.as_ref().map(|h| h.dir()))
            .field("timeout", &self.inner().timeout)
            .finish_non_exhaustive()
    }
}

/// Configures a [`PermitPool`].
#[derive(Debug, Clone)]
#[must_use]
pub struct PoolBuilder {
    concurrency: usize,
    gpus: usize,
    slot_dir: Option<SlotDir>,
    timeout: Duration,
    trace: Option<PathBuf>,
}

impl PoolBuilder {
    /// Permits per GPU (at least 1); on a one-GPU pool, per host.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn concurrency(mut self, n: usize) -> Self {
        assert!(n >= 1, "a permit pool needs at least one permit");
        self.concurrency = n;
        self
    }

    /// GPUs the pool spans (default 1): it holds `concurrency x gpus` permits, and each
    /// permit's [`device`](GpuTestPermit::device) is its host slot modulo `gpus`, so no GPU
    /// gets more than `concurrency` of them.
    ///
    /// # Panics
    ///
    /// If `gpus` is 0.
    pub fn gpus(mut self, gpus: usize) -> Self {
        assert!(gpus >= 1, "a permit pool spans at least one GPU");
        self.gpus = gpus;
        self
    }

    fn capacity(&self) -> usize {
        self.concurrency
            .checked_mul(self.gpus)
            .expect("gpu-test-permit: permits x GPUs overflows")
    }

    /// Keeps host slots in `dir` (shared with every process using the same directory).
    pub fn slot_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.slot_dir = Some(SlotDir::Explicit(dir.as_ref().to_path_buf()));
        self
    }

    /// Limits this process only: no host slots. Other processes are not counted.
    pub fn in_process_only(mut self) -> Self {
        self.slot_dir = None;
        self
    }

    /// The deadline of [`PermitPool::acquire`] and [`PermitPool::acquire_exclusive`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Appends wait and hold spans to `path` (see [`trace`](crate::trace)).
    pub fn trace(mut self, path: impl AsRef<Path>) -> Self {
        self.trace = Some(path.as_ref().to_path_buf());
        self
    }

    /// Creates the pool. Opening the slot directory happens here; if it fails, the error is
    /// returned.
    ///
    /// # Errors
    ///
    /// [`HostError`] when the slot directory is unusable or insecure.
    pub fn build(mut self) -> Result<PermitPool, HostError> {
        let wanted = Layout {
            per_gpu: self.concurrency,
            gpus: self.gpus,
        };
        let host = match &self.slot_dir {
            None => None,
            Some(SlotDir::Default) => {
                Some(HostSlots::open(&crate::config::default_slot_dir(), wanted)?)
            }
            Some(SlotDir::Explicit(dir)) => Some(HostSlots::open(dir, wanted)?),
            Some(SlotDir::Invalid(msg)) => return Err(HostError::Directory(msg.clone())),
        };
        // Processes sharing a directory share its layout (see `host`).
        if let Some(layout) = host.as_ref().map(HostSlots::layout) {
            self.concurrency = layout.per_gpu;
            self.gpus = layout.gpus;
        }
        Ok(self.finish(host, None))
    }

    fn finish(self, host: Option<HostSlots>, host_error: Option<String>) -> PermitPool {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let tracer = self.trace.as_ref().and_then(|p| match Tracer::open(p) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!(
                    "gpu-test-permit: cannot open trace file {} ({e}); tracing is off",
                    p.display()
                );
                None
            }
        });
        PermitPool {
            inner: NonNull::from(Box::leak(Box::new(PoolInner {
                id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                local: LocalPool::new(self.capacity()),
                seats: (0..self.capacity()).map(|_| Seat::new()).collect(),
                gpus: self.gpus,
                host,
                host_error,
                timeout: self.timeout,
                tracer,
            }))),
        }
    }
}

// SAFETY: `PermitPool` owns its `PoolInner` like a `Box` would, and `PoolInner` is `Send + Sync`
// (checked below).
unsafe impl Send for PermitPool {}
// SAFETY: as above.
unsafe impl Sync for PermitPool {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<PoolInner>();
};

impl Drop for PermitPool {
    fn drop(&mut self) {
        // Permits may outlive the pool handle: then the last of them frees the pool.
        if self.inner().local.close() {
            // SAFETY: nothing is held or in flight and the handle is gone, so nobody else can
            // reach the pool; it was allocated as a `Box` in `finish`.
            drop(unsafe { Box::from_raw(self.inner.as_ptr()) });
        }
    }
}

impl PermitPool {
    fn inner(&self) -> &PoolInner {
        // SAFETY: the pool is freed only after this handle is dropped.
        unsafe { self.inner.as_ref() }
    }

    /// A builder with the defaults: N = 2, the default slot directory, a 10-minute deadline.
    pub fn builder() -> PoolBuilder {
        PoolBuilder {
            concurrency: crate::config::DEFAULT_CONCURRENCY,
            gpus: 1,
            slot_dir: Some(SlotDir::Default),
            timeout: crate::config::DEFAULT_TIMEOUT,
            trace: None,
        }
    }

    /// The process-wide pool, configured from the environment ([`Config::global`]) on first
    /// use. If its slot directory is unusable, every acquisition fails with that error.
    pub fn global() -> &'static PermitPool {
        static GLOBAL: OnceLock<PermitPool> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let cfg = Config::global();
            let gpus = cfg.gpus.map_or_else(detected_gpus, |g| g.get());
            let mut b = PermitPool::builder()
                .concurrency(cfg.concurrency.get())
                .gpus(gpus)
                .timeout(cfg.timeout);
            b.slot_dir = Some(cfg.slot_dir.clone());
            b.trace = cfg.trace.clone();
            match b.clone().build() {
                Ok(pool) => pool,
                Err(e) => b.in_process_only().finish(None, Some(e.to_string())),
            }
        })
    }

    /// Permits per GPU (N).
    pub fn concurrency(&self) -> usize {
        self.inner().local.capacity() / self.inner().gpus
    }

    /// GPUs the pool spans.
    pub fn gpus(&self) -> usize {
        self.inner().gpus
    }

    /// Permits in all: N per GPU times the GPUs.
    pub fn capacity(&self) -> usize {
        self.inner().local.capacity()
    }

    /// The deadline of [`acquire`](Self::acquire) and [`acquire_exclusive`](Self::acquire_exclusive).
    pub fn timeout(&self) -> Duration {
        self.inner().timeout
    }

    /// The slot directory, or `None` for an in-process-only pool.
    pub fn slot_dir(&self) -> Option<&Path> {
        self.inner().host.as_ref().map(|h| h.dir())
    }

    /// Takes a shared permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// When the deadline passes or the slot directory is unusable; see [`acquire`].
    pub fn acquire(&self) -> GpuTestPermit {
        self.acquire_or_panic(PermitKind::Shared)
    }

    /// Takes every permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// As [`acquire_exclusive`].
    pub fn acquire_exclusive(&self) -> GpuTestPermit {
        self.acquire_or_panic(PermitKind::Exclusive)
    }

    /// Takes a shared permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(PermitKind::Shared, Deadline::After(timeout))
    }

    /// Takes every permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn try_acquire_exclusive_for(
        &self,
        timeout: Duration,
    ) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(PermitKind::Exclusive, Deadline::After(timeout))
    }

    /// Takes a permit of `kind` only if one is free now (a nested acquisition always succeeds).
    ///
    /// # Errors
    ///
    /// [`AcquireError::WouldBlock`] when none is free, and the others of [`AcquireError`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_test_permit::{AcquireError, PermitKind, PermitPool};
    ///
    /// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
    /// let first = pool.try_acquire(PermitKind::Shared)?;
    /// // The same thread gets a nested guard...
    /// assert!(pool.try_acquire(PermitKind::Shared)?.is_nested());
    /// // ...another thread finds the pool full.
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         assert!(matches!(pool.try_acquire(PermitKind::Shared), Err(AcquireError::WouldBlock)));
    ///     });
    /// });
    /// # drop(first);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self, kind: PermitKind) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(kind, Deadline::Now)
    }

    /// Takes a permit of `kind` waiting until `deadline` (`None`: no deadline; use with care).
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn acquire_until(
        &self,
        kind: PermitKind,
        deadline: Option<Instant>,
    ) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(kind, deadline.map_or(Deadline::Never, Deadline::At))
    }

    #[inline]
    fn acquire_or_panic(&self, kind: PermitKind) -> GpuTestPermit {
        match self.acquire_inner(kind, Deadline::After(self.inner().timeout)) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// The seat of a permit this thread already holds, with one more guard counted in it, if
    /// there is one. Returns a plain index (the guard is built by the caller): the hot path of
    /// nested acquisition stays small.
    #[inline]
    fn nested_seat(&self) -> Option<usize> {
        let inner = self.inner();
        with_thread_permits(|v| {
            let mut i = v.len();
            while i > 0 {
                i -= 1;
                let e = v[i];
                if e.pool_id != inner.id {
                    continue;
                }
                let seat = &inner.seats[e.seat];
                let mut word = seat.word.load(Ordering::Relaxed);
                loop {
                    if word >> GUARD_BITS != e.generation || word & GUARDS == 0 {
                        // That permit is gone; forget it.
                        v.swap_remove(i);
                        break;
                    }
                    assert!(
                        word & GUARDS < GUARDS,
                        "gpu-test-permit: too many guards of one permit"
                    );
                    match seat.word.compare_exchange_weak(
                        word,
                        word + 1,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Some(e.seat),
                        Err(now) => word = now,
                    }
                }
            }
            None
        })
    }

    #[inline(always)]
    fn acquire_inner(
        &self,
        kind: PermitKind,
        wait: Deadline,
    ) -> Result<GpuTestPermit, AcquireError> {
        if let Some(seat) = self.nested_seat() {
            let guard = GpuTestPermit {
                pool: self.inner,
                seat,
                nested: Nested::Yes,
            };
            // Read from the seat, not through `&guard`: a guard whose address is taken is
            // built on the stack and copied out, which costs a store-forwarding stall here.
            if kind == PermitKind::Exclusive
                && !self.inner().seats[seat].exclusive.load(Ordering::Relaxed)
            {
                drop(guard);
                return Err(AcquireError::ExclusiveWhileShared);
            }
            return Ok(guard);
        }
        self.acquire_new(kind, wait)
    }

    /// Takes a permit this thread does not hold yet.
    #[inline(never)]
    fn acquire_new(&self, kind: PermitKind, wait: Deadline) -> Result<GpuTestPermit, AcquireError> {
        let inner = self.inner();
        if let Some(msg) = &inner.host_error {
            return Err(AcquireError::Host(HostError::Directory(msg.clone())));
        }
        crate::nextest::hint_once(inner.local.capacity());
        let exclusive = kind == PermitKind::Exclusive;
        let units = if exclusive { inner.local.capacity() } else { 1 };
        // Only pay for wall clocks and names where something records them: the uncontended
        // in-process path reads no clock but the coarse one.
        let asked_wall = inner.tracer.as_ref().map(|_| SystemTime::now());
        let waited_since = match inner.local.acquire(units, wait) {
            Ok(since) => since,
            Err(LocalTimeout { since }) => {
                return Err(match wait {
                    Deadline::Now => AcquireError::WouldBlock,
                    _ => self.timeout_error(kind, since),
                });
            }
        };
        let mut first_slot = NO_SLOT;
        let mut detail = None;
        if inner.detailed() {
            let mut d = Detail {
                test: crate::nextest::current_test_name(),
                thread: thread_label(),
                since_wall: SystemTime::now(),
            };
            if let Some(host) = &inner.host {
                let start = waited_since.unwrap_or_else(Instant::now);
                let record = HolderRecord {
                    pid: std::process::id(),
                    test: d.test.clone(),
                    thread: d.thread.clone(),
                    since_unix_ms: unix_ms(d.since_wall),
                    exclusive,
                    concurrency: inner.local.capacity(),
                };
                match host.acquire(units, wait.resolve(start), &record) {
                    Ok(slots) => {
                        first_slot = slots[0];
                        d.since_wall = SystemTime::now();
                    }
                    Err(e) => {
                        let freed = inner.local.release(units);
                        debug_assert!(!freed, "a pool cannot close while borrowed");
                        return Err(match e {
                            HostWaitError::TimedOut if matches!(wait, Deadline::Now) => {
                                AcquireError::WouldBlock
                            }
                            HostWaitError::TimedOut => self.timeout_error(kind, start),
                            HostWaitError::Failed(e) => AcquireError::Host(e),
                        });
                    }
                }
            }
            detail = Some(d);
        }
        let (seat_index, generation) = inner.claim_seat();
        let seat = &inner.seats[seat_index];
        seat.exclusive.store(exclusive, Ordering::Relaxed);
        seat.first_slot.store(first_slot, Ordering::Relaxed);
        seat.since.store(crate::sys::coarse_ns(), Ordering::Relaxed);
        seat.thread
            .store(crate::sys::thread_number(), Ordering::Relaxed);
        if let Some(d) = detail {
            if let (Some(t), Some(asked)) = (&inner.tracer, asked_wall) {
                let ts = crate::trace::micros(asked);
                let dur = crate::trace::micros(d.since_wall).saturating_sub(ts);
                let slots = match first_slot {
                    NO_SLOT => 0..0,
                    _ if exclusive => 0..units,
                    f => f..f + 1,
                };
                t.write(&inner.event("wait", ts, dur, &d, slots, exclusive));
            }
            *seat.detail.lock() = Some(d);
        }
        let pool = self.inner;
        with_thread_permits(|v| {
            v.push(ThreadPermit {
                pool_id: inner.id,
                seat: seat_index,
                generation,
            })
        });
        Ok(GpuTestPermit {
            pool,
            seat: seat_index,
            nested: Nested::No,
        })
    }

    fn timeout_error(&self, kind: PermitKind, asked: Instant) -> AcquireError {
        let test = crate::nextest::current_test_name();
        let inner = self.inner();
        // Whether the wait ended in this process's queue or at the host slots, the slots say
        // who is in the way.
        let blockers = inner
            .host
            .as_ref()
            .map_or_else(Blockers::default, HostSlots::blockers);
        let pid = std::process::id();
        let now_ms = unix_ms(SystemTime::now());
        let since = |ms: u64| Duration::from_millis(now_ms.saturating_sub(ms));
        // Host records cover every process, this one included; seats add this process's
        // holders without a record (a pool without host slots).
        let mut holders: Vec<Holder> = blockers
            .holders
            .into_iter()
            .map(|r| Holder {
                held_for: since(r.since_unix_ms),
                stopped: r.pid != pid && crate::sys::process_is_stopped(r.pid),
                test: r.test,
                thread: r.thread,
                pid: r.pid,
                exclusive: r.exclusive,
            })
            .collect();
        if inner.host.is_none() {
            for seat in inner
                .seats
                .iter()
                .filter(|s| s.claimed.load(Ordering::Acquire))
            {
                let thread = crate::sys::thread_name(seat.thread.load(Ordering::Relaxed));
                holders.push(Holder {
                    test: thread.clone(),
                    thread,
                    pid,
                    held_for: crate::sys::coarse_elapsed(seat.since.load(Ordering::Relaxed)),
                    exclusive: seat.exclusive.load(Ordering::Relaxed),
                    stopped: false,
                });
            }
        }
        let waiters = blockers
            .waiting
            .into_iter()
            .map(|w| Waiter {
                waiting_for: since(w.record.since_unix_ms),
                test: w.record.test,
                thread: w.record.thread,
                pid: w.record.pid,
                exclusive: w.record.exclusive,
                head: w.head,
                stopped: w.stopped,
            })
            .collect();
        AcquireError::Timeout(WaitTimeout {
            waited: asked.elapsed(),
            kind,
            test,
            concurrency: inner.local.capacity(),
            holders,
            waiters,
            queued_here: inner.local.queued(),
        })
    }
}

fn thread_label() -> String {
    let t = std::thread::current();
    match t.name() {
        Some(n) => n.to_string(),
        None => format!("{:?}", t.id()),
    }
}

/// GPUs of this host as far as the probe knows: the CUDA devices when the crate is built with
/// `cuda` and the probe finds some, else 1 (wgpu lists one GPU under several APIs, so its
/// adapters are no count of GPUs; set `GPU_TEST_PERMIT_GPUS` on multi-GPU wgpu hosts).
fn detected_gpus() -> usize {
    #[cfg(feature = "cuda")]
    {
        crate::probe::probe(crate::probe::Backend::Cuda)
            .outcome
            .devices()
            .map_or(1, |d| d.len().max(1))
    }
    #[cfg(not(feature = "cuda"))]
    {
        1
    }
}
