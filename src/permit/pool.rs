//! The pool of permits, its builder, and the acquisition paths.

use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use super::local::{Deadline, LocalPool, LocalTimeout};
use super::seat::{
    Detail, GUARD_BITS, GUARDS, GpuTestPermit, NO_SLOT, Nested, Seat, ThreadPermit,
    with_thread_permits,
};
use super::{AcquireError, Holder, PermitKind, WaitTimeout, Waiter};
use crate::clock::unix_ms;
use crate::config::{Config, INHERITED_VAR, SlotDir};
use crate::host::{Blockers, HolderRecord, HostError, HostSlots, HostWaitError, Layout};
use crate::sync::Ordering;
use crate::trace::{TraceArgs, TraceEvent, Tracer};

/// A pool of GPU permits: N per GPU host, shared by the threads of this process and, through
/// host slots, by every process using the same slot directory.
///
/// Most code uses the [global pool](Self::global) through [`acquire`](crate::acquire). Separate pools are for
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

pub(super) struct PoolInner {
    pub(super) id: u64,
    pub(super) local: LocalPool,
    pub(super) seats: Box<[Seat]>,
    pub(super) host: Option<HostSlots>,
    /// Why the global pool has no host slots: every acquisition fails with it.
    pub(super) host_error: Option<HostError>,
    pub(super) timeout: Duration,
    /// See [`PoolBuilder::hold_timeout`].
    pub(super) hold_timeout: Option<Duration>,
    pub(super) tracer: Option<Tracer>,
    /// GPUs the permits span; a permit's device is its slot modulo this.
    pub(super) gpus: usize,
    /// The permit a parent holds for this process, when the pool works inside it.
    pub(super) inherited: Option<Inherited>,
}

/// A permit inherited from a parent process (`gpu-test-permit run`): the pool takes no host
/// slot and hands out at most the units the parent holds, on the parent's slots.
pub(super) struct Inherited {
    /// The parent's permit, as it was passed.
    pub(super) permit: crate::config::InheritedPermit,
    /// This process's descriptors of the parent's slot descriptions (they keep the slots
    /// locked while this process lives).
    _files: Vec<std::fs::File>,
}

impl Inherited {
    /// The slots held: `first..first + count`.
    pub(super) fn slots(&self) -> std::ops::Range<usize> {
        let first = self.permit.slots[0].index;
        first..first + self.permit.slots.len()
    }
}

impl PoolInner {
    /// Whether permits record names and wall-clock times (for host records or the trace).
    /// N per GPU and the GPUs, as this pool counts them.
    pub(super) fn layout(&self) -> Layout {
        Layout {
            per_gpu: self.local.capacity() / self.gpus,
            gpus: self.gpus,
        }
    }

    pub(super) fn detailed(&self) -> bool {
        self.host.is_some() || self.tracer.is_some()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn event(
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
                capacity: self.local.capacity(),
                units: if exclusive { self.local.capacity() } else { 1 },
                gpus: self.gpus,
                ..Default::default()
            },
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
    hold_timeout: Option<Duration>,
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

    /// The hold deadline: a permit of this pool held longer than `deadline` makes the process
    /// print what is known (holders, since when, the N in force) and abort, so that a test
    /// stuck in a wedged driver fails the run instead of hanging it
    /// (`GPU_TEST_PERMIT_HOLD_TIMEOUT` for the global pool; off by default).
    pub fn hold_timeout(mut self, deadline: Duration) -> Self {
        self.hold_timeout = Some(deadline);
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
            Some(dir) => {
                let dir = dir.path().map_err(HostError::Directory)?;
                Some(HostSlots::open(&dir, wanted)?)
            }
        };
        // Processes sharing a directory share its layout (see `host`).
        if let Some(layout) = host.as_ref().map(HostSlots::layout) {
            self.concurrency = layout.per_gpu;
            self.gpus = layout.gpus;
        }
        Ok(self.finish(host, None, None))
    }

    fn finish(
        self,
        host: Option<HostSlots>,
        host_error: Option<HostError>,
        inherited: Option<Inherited>,
    ) -> PermitPool {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let tracer = self.trace.as_ref().and_then(|p| match Tracer::open(p) {
            Ok(t) => Some(t),
            Err(e) => {
                crate::notice::line(&format!(
                    "cannot open trace file {} ({e}); tracing is off",
                    p.display()
                ));
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
                hold_timeout: self.hold_timeout,
                tracer,
                inherited,
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
            hold_timeout: None,
            trace: None,
        }
    }

    /// The process-wide pool, configured from the environment ([`Config::global`]) on first
    /// use. If its slot directory is unusable, every acquisition fails with that error.
    pub fn global() -> &'static PermitPool {
        static GLOBAL: OnceLock<PermitPool> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let cfg = Config::global();
            if let Some(inherited) = &cfg.inherited {
                match inherited.clone().and_then(|permit| {
                    crate::host::adopt_inherited(&permit).map(|files| Inherited {
                        permit,
                        _files: files,
                    })
                }) {
                    Ok(inherited) => return PermitPool::inside(inherited, cfg),
                    Err(why) => crate::notice::line(&format!(
                        "ignoring the permit inherited through {INHERITED_VAR}: it {why}; this \
                         process takes permits from the host slots as usual"
                    )),
                }
            }
            let gpus = cfg.gpus.map_or_else(detected_gpus, |g| g.get());
            let mut b = PermitPool::builder()
                .concurrency(cfg.concurrency.get())
                .gpus(gpus)
                .timeout(cfg.timeout);
            b.slot_dir = Some(cfg.slot_dir.clone());
            b.trace = cfg.trace.clone();
            b.hold_timeout = cfg.hold_timeout;
            match b.clone().build() {
                Ok(pool) => pool,
                Err(e) => b.in_process_only().finish(None, Some(e), None),
            }
        })
    }

    /// The global pool of a process started inside a parent's permit: in-process only, as
    /// many units as the parent holds. Not traced: the parent's own span covers its command.
    fn inside(inherited: Inherited, cfg: &Config) -> PermitPool {
        let mut b = PermitPool::builder()
            .concurrency(inherited.permit.slots.len())
            .in_process_only()
            .timeout(cfg.timeout);
        b.hold_timeout = cfg.hold_timeout;
        b.finish(None, None, Some(inherited))
    }

    /// Permits per GPU (N).
    pub fn concurrency(&self) -> usize {
        self.inner().layout().per_gpu
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
    /// When the deadline passes or the slot directory is unusable; see [`acquire`](crate::acquire).
    pub fn acquire(&self) -> GpuTestPermit {
        self.acquire_or_panic(PermitKind::Shared)
    }

    /// Takes every permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// As [`acquire_exclusive`](crate::acquire_exclusive).
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
            Err(e) => panic!("gpu-test-permit: {e}"),
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
        if let Some(e) = &inner.host_error {
            return Err(AcquireError::Host(e.clone()));
        }
        if inner.inherited.is_none() {
            crate::nextest::hint_once(inner.local.capacity());
        }
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
                    concurrency: inner.layout().per_gpu,
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
        if let Some(inherited) = &inner.inherited {
            // One seat per inherited slot; an exclusive permit holds them all from the first.
            first_slot = inherited.slots().start + if exclusive { 0 } else { seat_index };
        }
        let seat = &inner.seats[seat_index];
        seat.exclusive.store(exclusive, Ordering::Relaxed);
        seat.first_slot.store(first_slot, Ordering::Relaxed);
        seat.since.store(crate::sys::coarse_ns(), Ordering::Relaxed);
        seat.thread
            .store(crate::sys::thread_number(), Ordering::Relaxed);
        if let Some(deadline) = inner.hold_timeout {
            let (test, thread) = match &detail {
                Some(d) => (d.test.clone(), d.thread.clone()),
                None => (crate::nextest::current_test_name(), thread_label()),
            };
            let id = super::watchdog::watch(super::watchdog::Watched {
                test,
                thread,
                exclusive,
                deadline,
                layout: inner.layout(),
                slot_dir: inner.host.as_ref().map(|h| h.dir().to_path_buf()),
            });
            seat.watch.store(id, Ordering::Relaxed);
        }
        if let Some(d) = detail {
            if let (Some(t), Some(asked)) = (&inner.tracer, asked_wall) {
                let ts = crate::clock::unix_micros(asked);
                let dur = crate::clock::unix_micros(d.since_wall).saturating_sub(ts);
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
            concurrency: inner.layout().per_gpu,
            capacity: inner.local.capacity(),
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
