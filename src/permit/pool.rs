//! The pool of permits, its builder, and the acquisition paths.

use std::fmt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use super::local::{Deadline, LocalPool, LocalTimeout};
use super::seat::{
    Detail, GUARD_BITS, GUARDS, GpuTestPermit, NO_MEMORY, NO_SLOT, Nested, Seat, ThreadPermit,
    with_thread_permits,
};
use super::{AcquireError, Holder, PermitKind, WaitTimeout, Waiter};
use crate::clock::unix_ms;
use crate::config::{Config, INHERITED_VAR, SlotDir};
use crate::host::{
    Blockers, HolderRecord, HostError, HostSlots, HostWaitError, InheritError, Layout,
};
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
/// - **Weighted**: a permit holds 1 unit, k units of one GPU
///   ([`acquire_weighted`](Self::acquire_weighted), [`acquire_memory`](Self::acquire_memory)),
///   or every unit (exclusive); its units are taken at once or not at all.
/// - **Fair**: requests are served in arrival order within a process; a heavy (weighted or
///   exclusive) request is not overtaken by later light ones. Across processes, the head of the
///   queue is whoever holds the slot directory's gate, and it takes its units before anyone
///   else takes any; processes waiting for the gate take it in the order they began to wait.
/// - **Reentrant per thread**: a thread holding a permit of this pool gets nested guards
///   without waiting for requests of at most its units. At most one real permit per thread.
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
    /// Permits per GPU, N: the capacity over the GPUs.
    pub(super) per_gpu: usize,
    /// The permit a parent holds for this process, when the pool works inside it.
    pub(super) inherited: Option<Inherited>,
    /// Where the per-GPU memory budget comes from.
    pub(super) budget_source: Option<crate::config::MemoryBudget>,
    /// The per-GPU memory budget, resolved at the first request that declares memory (a
    /// percentage needs the probe), with what turns declarations into units.
    pub(super) budget: OnceLock<Option<Budget>>,
    /// Without a configured budget, ask the probe (the global pool only).
    pub(super) probe_budget: bool,
}

/// The process-wide pool ([`PermitPool::global`]).
static GLOBAL: OnceLock<PermitPool> = OnceLock::new();

/// A permit inherited from a parent process (`gpu-test-permit run`). The pool's host slots are
/// those of the directory in which every process inside that permit shares its units
/// ([`crate::host::share_dir`]), so that all of them together hold at most what the parent
/// holds.
pub(super) struct Inherited {
    /// The parent's permit, as it was passed.
    pub(super) permit: crate::config::InheritedPermit,
    /// This process's descriptors of the parent's slot descriptions (they keep the slots
    /// locked while this process lives).
    _files: Vec<std::fs::File>,
}

impl Inherited {
    /// The parent's slot that shared slot `index` stands for: the one at that position for a
    /// shared permit, the same slot for an exclusive one (whose layout the shared slots copy).
    pub(super) fn parent_slot(&self, index: usize) -> usize {
        if self.permit.exclusive {
            index
        } else {
            self.permit.slots.get(index).map_or(index, |s| s.index)
        }
    }

    /// The GPU shared slot `index` is for, as the parent numbers its GPUs.
    pub(super) fn gpu_of(&self, index: usize) -> usize {
        if self.permit.exclusive {
            index % self.permit.gpus.max(1)
        } else {
            self.permit
                .slots
                .first()
                .map_or(0, |s| self.permit.gpu_of(s))
        }
    }
}

impl PoolInner {
    /// N per GPU and the GPUs, as this pool counts them.
    pub(super) fn layout(&self) -> Layout {
        Layout {
            per_gpu: self.per_gpu,
            gpus: self.gpus,
        }
    }

    /// Units of one GPU as N counts them; inside an inherited permit, N of the parent's slot
    /// directory (memory is converted with it).
    fn units_per_gpu(&self) -> usize {
        match &self.inherited {
            Some(inherited) => inherited.permit.per_gpu,
            None => self.per_gpu,
        }
    }

    /// The most units one permit of this pool can hold, and whether an inherited permit is what
    /// sets it (the units a shared parent permit holds; N otherwise: an exclusive parent
    /// holds N on each GPU, and one request's units come from one GPU).
    fn unit_limit(&self) -> (usize, bool) {
        match &self.inherited {
            Some(inherited) if !inherited.permit.exclusive => (inherited.permit.slots.len(), true),
            Some(inherited) => (inherited.permit.per_gpu, true),
            None => (self.per_gpu, false),
        }
    }

    /// The units of a memory request that needs neither checks nor a first resolution of the
    /// budget: it asks for 1 unit and is not exclusive, the budget is resolved, and the
    /// declaration is one the budget serves inline ([`Budget::inline_units`]). `None`: the
    /// request goes to [`PermitPool::resolve`].
    #[inline(always)]
    fn inline_memory_units(&self, want: Want) -> Option<usize> {
        let bytes = want.memory?;
        if want.exclusive || want.units != 1 {
            return None;
        }
        self.budget.get()?.as_ref()?.inline_units(bytes)
    }

    /// Whether permits record names and wall-clock times (for host records or the trace).
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
        slots: Vec<usize>,
        exclusive: bool,
        units: usize,
        memory: Option<u64>,
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
                slots,
                exclusive,
                capacity: self.local.capacity(),
                units,
                gpus: self.gpus,
                memory,
                memory_used: None,
                memory_budget: self.budget.get().copied().flatten().map(|b| b.bytes),
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
    memory_budget: Option<crate::config::MemoryBudget>,
    probe_budget: bool,
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
    /// (`GPU_TEST_PERMIT_HOLD_TIMEOUT` for the global pool; off by default). A process that
    /// ends the holder its own way sets a handler instead: [`on_hold_timeout`](crate::on_hold_timeout).
    pub fn hold_timeout(mut self, deadline: Duration) -> Self {
        self.hold_timeout = Some(deadline);
        self
    }

    /// The GPU memory of one GPU that permits budget (`GPU_TEST_PERMIT_GPU_MEMORY` for the
    /// global pool): a request declaring `bytes` ([`PermitPool::acquire_memory`]) takes
    /// `ceil(bytes / (budget / N))` of the GPU's N units. Without a budget, such a request
    /// takes one unit (and says so once).
    ///
    /// # Panics
    ///
    /// If `bytes` is 0.
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        assert!(bytes >= 1, "a memory budget is at least one byte");
        self.memory_budget = Some(crate::config::MemoryBudget::Bytes(bytes));
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
        // A pool whose every acquisition fails with `host_error` never seats a permit: it
        // gets none, however large the layout that was refused (a layout refused for want of
        // descriptors may be a million units).
        let seats = if host_error.is_some() {
            0
        } else {
            self.capacity()
        };
        PermitPool {
            inner: NonNull::from(Box::leak(Box::new(PoolInner {
                id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                local: LocalPool::new(self.capacity()),
                seats: (0..seats).map(|_| Seat::new()).collect(),
                gpus: self.gpus,
                per_gpu: self.concurrency,
                host,
                host_error,
                timeout: self.timeout,
                hold_timeout: self.hold_timeout,
                tracer,
                inherited,
                budget_source: self.memory_budget,
                budget: OnceLock::new(),
                probe_budget: self.probe_budget,
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
            memory_budget: None,
            probe_budget: false,
        }
    }

    /// The process-wide pool, configured from the environment ([`Config::global`]) on first
    /// use. If its slot directory is unusable, every acquisition fails with that error.
    #[inline]
    pub fn global() -> &'static PermitPool {
        // Inline: once set up, one load and a branch on every `gpu_test_permit::acquire()`.
        match GLOBAL.get() {
            Some(pool) => pool,
            None => PermitPool::global_first(),
        }
    }

    /// Sets up [`global`](Self::global) on first use. Out of line: it runs once.
    #[cold]
    #[inline(never)]
    fn global_first() -> &'static PermitPool {
        GLOBAL.get_or_init(|| {
            let cfg = Config::global();
            if let Some(inherited) = &cfg.inherited {
                let ignored = |why: &str| {
                    crate::notice::line(&format!(
                        "ignoring the permit inherited through {INHERITED_VAR}: it {why}; this \
                         process takes permits from the host slots as usual"
                    ))
                };
                match inherited {
                    Err(why) => ignored(why),
                    Ok(permit) => match crate::host::adopt_inherited(permit) {
                        Ok(files) => {
                            return PermitPool::inside(
                                Inherited {
                                    permit: permit.clone(),
                                    _files: files,
                                },
                                cfg,
                            );
                        }
                        Err(InheritError::Leftover(why)) => ignored(&why),
                        Err(InheritError::Unusable(why)) => {
                            let error = HostError::Inherited(format!(
                                "the permit inherited through {INHERITED_VAR} {why}"
                            ));
                            return PermitPool::builder()
                                .timeout(cfg.timeout)
                                .in_process_only()
                                .finish(None, Some(error), None);
                        }
                    },
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
            b.memory_budget = cfg.gpu_memory;
            b.probe_budget = true;
            match b.clone().build() {
                Ok(pool) => pool,
                Err(e) => b.in_process_only().finish(None, Some(e), None),
            }
        })
    }

    /// The global pool of a process started inside a parent's permit: its host slots are
    /// those every process inside the permit shares ([`crate::host::share_dir`]), as many as
    /// the parent holds. Not traced: the parent's own span covers its command.
    fn inside(inherited: Inherited, cfg: &Config) -> PermitPool {
        let layout = crate::host::share_layout(&inherited.permit);
        let dir = crate::host::share_dir(&inherited.permit);
        let mut b = PermitPool::builder()
            .concurrency(layout.per_gpu)
            .gpus(layout.gpus)
            .in_process_only()
            .timeout(cfg.timeout);
        b.hold_timeout = cfg.hold_timeout;
        b.memory_budget = cfg.gpu_memory;
        b.probe_budget = true;
        let host = HostSlots::open(&dir, layout).and_then(|host| {
            if let Some(other) = crate::host::other_share_dir_in_use(&inherited.permit) {
                Err(HostError::Inherited(format!(
                    "processes of another user work inside the permit inherited through \
                     {INHERITED_VAR} now ({} is in use), and each user's processes would \
                     share its units apart from the others': run the processes inside one \
                     permit as one user",
                    other.display()
                )))
            } else if host.layout() == layout {
                Ok(host)
            } else {
                // Only a process of another tree could have set it: never work in more units
                // than the parent holds.
                Err(HostError::Inherited(format!(
                    "the directory {} in which the processes inside the permit inherited \
                     through {INHERITED_VAR} share it serves {}, not the permit's {layout}; \
                     remove it once no process uses it",
                    dir.display(),
                    host.layout()
                )))
            }
        });
        match host {
            Ok(host) => b.finish(Some(host), None, Some(inherited)),
            Err(e) => b.finish(None, Some(e), Some(inherited)),
        }
    }

    /// Permits per GPU (N).
    pub fn concurrency(&self) -> usize {
        self.inner().layout().per_gpu
    }

    /// GPUs the pool spans (inside a permit inherited from `gpu-test-permit run`, the GPUs
    /// the parent numbers its devices among).
    pub fn gpus(&self) -> usize {
        let inner = self.inner();
        match &inner.inherited {
            Some(inherited) => inherited.permit.gpus,
            None => inner.gpus,
        }
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
        self.acquire_or_panic(Want::ONE)
    }

    /// Takes every permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// As [`acquire_exclusive`](crate::acquire_exclusive).
    pub fn acquire_exclusive(&self) -> GpuTestPermit {
        self.acquire_or_panic(Want::EXCLUSIVE)
    }

    /// Takes a permit of `units` units, all on one GPU, waiting up to the pool's deadline; see
    /// [`acquire_weighted`](crate::acquire_weighted).
    ///
    /// # Panics
    ///
    /// As [`acquire_weighted`](crate::acquire_weighted).
    pub fn acquire_weighted(&self, units: usize) -> GpuTestPermit {
        self.request().units(units).acquire()
    }

    /// Takes a permit for a test that needs `bytes` of GPU memory, waiting up to the pool's
    /// deadline; see [`acquire_memory`](crate::acquire_memory).
    ///
    /// # Panics
    ///
    /// As [`acquire_memory`](crate::acquire_memory).
    pub fn acquire_memory(&self, bytes: u64) -> GpuTestPermit {
        self.request().memory(bytes).acquire()
    }

    /// A request to build: units, memory, exclusive, then how long to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder()
    ///     .concurrency(8)
    ///     .memory_budget(64 << 30)
    ///     .in_process_only()
    ///     .build()?;
    /// // 20 GiB of a 64 GiB GPU with N = 8: 3 of its 8 units (8 GiB each).
    /// let big = pool.request().memory(20 << 30).acquire_for(Duration::from_secs(60))?;
    /// assert_eq!(big.units(), 3);
    /// // Nested requests of at most 3 units on this thread use it.
    /// assert!(pool.acquire_weighted(2).is_nested());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request(&self) -> PermitRequest<'_> {
        self.request_for(Want::ONE)
    }

    /// A request for `want`, built elsewhere (the fixtures' `GpuNeed`).
    pub(crate) fn request_for(&self, want: Want) -> PermitRequest<'_> {
        PermitRequest { pool: self, want }
    }

    /// Takes a shared permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(Want::ONE, Deadline::After(timeout))
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
        self.acquire_inner(Want::EXCLUSIVE, Deadline::After(timeout))
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
        self.acquire_inner(Want::of(kind), Deadline::Now)
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
        self.acquire_inner(
            Want::of(kind),
            deadline.map_or(Deadline::Never, Deadline::At),
        )
    }

    #[inline]
    fn acquire_or_panic(&self, want: Want) -> GpuTestPermit {
        match self.acquire_inner(want, Deadline::After(self.inner().timeout)) {
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
    fn acquire_inner(&self, want: Want, wait: Deadline) -> Result<GpuTestPermit, AcquireError> {
        // Weighted and memory requests are checked (and memory turned into units) first: a
        // request that can never be served fails at once, nested or not. Those that cannot
        // fail take an inline path: a request of at most N units, and a memory declaration
        // within what the resolved budget serves inline.
        let inner = self.inner();
        let want = if want.memory.is_none()
            && ((want.units == 1 && !(want.exclusive && inner.inherited.is_some()))
                || (!want.exclusive && inner.inherited.is_none() && want.units <= inner.per_gpu))
        {
            want
        } else if let Some(units) = inner.inline_memory_units(want) {
            Want { units, ..want }
        } else {
            self.resolve(want)?
        };
        if let Some(seat) = self.nested_seat() {
            let guard = GpuTestPermit {
                pool: self.inner,
                seat,
                nested: Nested::Yes,
            };
            // Read from the seat, not through `&guard`: a guard whose address is taken is
            // built on the stack and copied out, which costs a store-forwarding stall here.
            let held = &self.inner().seats[seat];
            if want.exclusive && !held.exclusive.load(Ordering::Relaxed) {
                drop(guard);
                return Err(AcquireError::ExclusiveWhileShared);
            }
            if want.units > 1 {
                let held = held.units.load(Ordering::Relaxed);
                if want.units > held {
                    drop(guard);
                    return Err(AcquireError::NestedLarger {
                        held,
                        asked: want.units,
                    });
                }
            }
            return Ok(guard);
        }
        self.acquire_new(want, wait)
    }

    /// Checks a weighted or memory request and turns its memory into units (resolving the
    /// budget at the first declaration). Out of line: the requests that come here are those
    /// the inline paths of `acquire_inner` cannot serve.
    #[inline(never)]
    fn resolve(&self, mut want: Want) -> Result<Want, Refused> {
        let inner = self.inner();
        if want.exclusive {
            return match &inner.inherited {
                // All of a GPU, inside a part of it: the parent's other units are others'.
                Some(inherited) if !inherited.permit.exclusive => Err(Refused::ExclusiveInside {
                    held: inherited.permit.slots.len(),
                }),
                _ => Ok(want),
            };
        }
        if let Some(bytes) = want.memory {
            match inner.memory_budget() {
                Some(budget) if bytes > budget.bytes => {
                    return Err(Refused::Memory {
                        asked: bytes,
                        budget: budget.bytes,
                    });
                }
                Some(budget) => {
                    let units = budget.units(bytes);
                    want.units = want.units.max(units.max(1) as usize);
                }
                None => no_budget_notice(bytes),
            }
        }
        let (limit, inherited) = inner.unit_limit();
        if want.units > limit {
            return Err(Refused::TooLarge {
                asked: want.units,
                limit,
                inherited,
            });
        }
        Ok(want)
    }

    /// Takes a permit this thread does not hold yet.
    #[inline(never)]
    fn acquire_new(&self, want: Want, wait: Deadline) -> Result<GpuTestPermit, AcquireError> {
        let inner = self.inner();
        if let Some(e) = &inner.host_error {
            return Err(AcquireError::Host(e.clone()));
        }
        if inner.inherited.is_none() {
            crate::nextest::hint_once(inner.local.capacity());
        }
        let exclusive = want.exclusive;
        let units = want.held_units(inner.local.capacity());
        // Only pay for wall clocks and names where something records them: the uncontended
        // in-process path reads no clock but the coarse one.
        let asked_wall = inner.tracer.as_ref().map(|_| SystemTime::now());
        let waited_since = match inner.local.acquire(units, wait) {
            Ok(since) => since,
            Err(LocalTimeout { since }) => {
                return Err(match wait {
                    Deadline::Now => AcquireError::WouldBlock,
                    _ => self.timeout_error(want, since),
                });
            }
        };
        let mut slots: Vec<usize> = Vec::new();
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
                    units,
                    memory: want.memory,
                };
                match host.acquire(units, exclusive, wait.resolve(start), &record) {
                    Ok(got) => {
                        slots = got;
                        d.since_wall = SystemTime::now();
                    }
                    Err(e) => {
                        let freed = inner.local.release(units);
                        debug_assert!(!freed, "a pool cannot close while borrowed");
                        return Err(match e {
                            HostWaitError::TimedOut if matches!(wait, Deadline::Now) => {
                                AcquireError::WouldBlock
                            }
                            HostWaitError::TimedOut => self.timeout_error(want, start),
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
        seat.units.store(units, Ordering::Relaxed);
        seat.memory
            .store(want.memory.unwrap_or(NO_MEMORY), Ordering::Relaxed);
        slots.sort_unstable();
        seat.first_slot
            .store(slots.first().copied().unwrap_or(NO_SLOT), Ordering::Relaxed);
        if units > 1 && !exclusive && !slots.is_empty() {
            *seat.slots.lock() = slots.clone();
        }
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
                units,
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
                t.write(&inner.event("wait", ts, dur, &d, slots, exclusive, units, want.memory));
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

    fn timeout_error(&self, want: Want, asked: Instant) -> AcquireError {
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
        // A permit of k units wrote its record into each of its k slots: list it once.
        let mut holders: Vec<Holder> = count_equal(blockers.holders)
            .into_iter()
            .map(|(r, slots)| Holder {
                held_for: since(r.since_unix_ms),
                stopped: r.pid != pid && crate::sys::process_is_stopped(r.pid),
                exited: r.pid != pid && !crate::sys::process_is_visible(r.pid),
                units: r.units.max(slots),
                test: r.test,
                thread: r.thread,
                pid: r.pid,
                exclusive: r.exclusive,
                recorded: true,
            })
            .collect();
        // Slots locked without a record, by owner (0: not known here).
        let unrecorded = count_equal(blockers.unrecorded.into_iter().map(|o| o.unwrap_or(0)));
        holders.extend(unrecorded.into_iter().map(|(owner, slots)| Holder {
            test: String::new(),
            thread: String::new(),
            pid: owner,
            held_for: Duration::ZERO,
            exclusive: false,
            units: slots,
            stopped: owner != 0 && owner != pid && crate::sys::process_is_stopped(owner),
            exited: owner != 0 && owner != pid && !crate::sys::process_is_visible(owner),
            recorded: false,
        }));
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
                    units: seat.units.load(Ordering::Relaxed),
                    stopped: false,
                    exited: false,
                    recorded: true,
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
                units: w.record.units,
                head: w.head,
                stopped: w.liveness == crate::host::Liveness::Stopped,
                liveness: w.liveness,
            })
            .collect();
        AcquireError::Timeout(Box::new(WaitTimeout {
            waited: asked.elapsed(),
            kind: want.kind(),
            units: want.held_units(inner.local.capacity()),
            test,
            concurrency: inner.layout().per_gpu,
            capacity: inner.local.capacity(),
            holders,
            waiters,
            queued_here: inner.local.queued(),
        }))
    }
}

/// The distinct items of `items`, in the order first seen, each with how many times it came.
fn count_equal<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<(T, usize)> {
    let mut out: Vec<(T, usize)> = Vec::new();
    for item in items {
        match out.iter_mut().find(|(seen, _)| *seen == item) {
            Some((_, n)) => *n += 1,
            None => out.push((item, 1)),
        }
    }
    out
}

/// Why [`PermitPool::resolve`] refused a request: small, so that the check's result stays in
/// registers; the error is made from it only when a request is refused.
#[derive(Clone, Copy, Debug)]
enum Refused {
    TooLarge {
        asked: usize,
        limit: usize,
        inherited: bool,
    },
    Memory {
        asked: u64,
        budget: u64,
    },
    ExclusiveInside {
        held: usize,
    },
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
        }
    }
}

/// What a request asks for ([`PermitRequest`], and the fixtures' `GpuNeed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Want {
    /// Units on one GPU (ignored when exclusive).
    pub(crate) units: usize,
    pub(crate) exclusive: bool,
    /// Declared GPU memory, bytes.
    pub(crate) memory: Option<u64>,
}

impl Want {
    pub(crate) const ONE: Want = Want {
        units: 1,
        exclusive: false,
        memory: None,
    };
    const EXCLUSIVE: Want = Want {
        units: 1,
        exclusive: true,
        memory: None,
    };

    fn of(kind: PermitKind) -> Want {
        match kind {
            PermitKind::Shared => Want::ONE,
            PermitKind::Exclusive => Want::EXCLUSIVE,
        }
    }

    /// Units the request takes from a pool of `capacity`: all of them when exclusive.
    fn held_units(&self, capacity: usize) -> usize {
        if self.exclusive { capacity } else { self.units }
    }

    fn kind(&self) -> PermitKind {
        if self.exclusive {
            PermitKind::Exclusive
        } else {
            PermitKind::Shared
        }
    }
}

/// A permit request being built: see [`PermitPool::request`].
#[derive(Debug, Clone, Copy)]
#[must_use = "a request does nothing until acquired"]
pub struct PermitRequest<'p> {
    pool: &'p PermitPool,
    want: Want,
}

impl PermitRequest<'_> {
    /// Asks for `units` of one GPU's N units (1 by default): a test that needs the GPU of k
    /// ordinary tests counts as k. All units come from one GPU. With a declared
    /// [`memory`](Self::memory) as well, the larger of the two counts.
    ///
    /// # Panics
    ///
    /// If `units` is 0.
    pub fn units(mut self, units: usize) -> Self {
        assert!(units >= 1, "a permit holds at least one unit");
        self.want.units = units;
        self
    }

    /// Declares the GPU memory the test needs: it takes `ceil(bytes / (budget / N))` units,
    /// where the budget is one GPU's (`GPU_TEST_PERMIT_GPU_MEMORY`,
    /// [`PoolBuilder::memory_budget`], or the device memory the CUDA probe reports). Without a
    /// known budget the request takes one unit, and the process says so once.
    pub fn memory(mut self, bytes: u64) -> Self {
        self.want.memory = Some(bytes);
        self
    }

    /// Asks for every unit of every GPU: nothing else runs on the GPU while it is held.
    pub fn exclusive(mut self) -> Self {
        self.want.exclusive = true;
        self
    }

    /// Takes the permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// When the request can never be served (more units or memory than a GPU has), when the
    /// thread holds a smaller permit (see [`AcquireError::NestedLarger`]), when the deadline
    /// passes, and when the slot directory is unusable. In a test, that fails the test.
    pub fn acquire(self) -> GpuTestPermit {
        self.pool.acquire_or_panic(self.want)
    }

    /// Takes the permit only if its units are free now.
    ///
    /// # Errors
    ///
    /// [`AcquireError::WouldBlock`] when they are not, and the others of [`AcquireError`].
    pub fn try_acquire(self) -> Result<GpuTestPermit, AcquireError> {
        self.pool.acquire_inner(self.want, Deadline::Now)
    }

    /// Takes the permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn acquire_for(self, timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
        self.pool.acquire_inner(self.want, Deadline::After(timeout))
    }

    /// Takes the permit, waiting until `deadline` (`None`: no deadline; use with care).
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    pub fn acquire_until(self, deadline: Option<Instant>) -> Result<GpuTestPermit, AcquireError> {
        self.pool
            .acquire_inner(self.want, deadline.map_or(Deadline::Never, Deadline::At))
    }
}

impl PoolInner {
    /// The per-GPU memory budget (resolved once; a percentage or no setting asks the CUDA
    /// probe).
    fn memory_budget(&self) -> Option<Budget> {
        *self.budget.get_or_init(|| {
            let own = match self.budget_source {
                Some(crate::config::MemoryBudget::Bytes(b)) => Some(b),
                Some(crate::config::MemoryBudget::Percent(p)) => {
                    probed_memory(true).map(|m| (m as f64 * p / 100.0) as u64)
                }
                // The global pool only: a pool from the builder has the budget it was given.
                None if self.probe_budget => probed_memory(false),
                None => None,
            }
            .filter(|&b| b > 0);
            // Processes sharing host slots convert with one budget, as they share one N.
            let agreed = match &self.host {
                Some(host) => host.agree_on_budget(own),
                None => own,
            };
            let (limit, _) = self.unit_limit();
            agreed.map(|bytes| Budget::new(bytes, self.units_per_gpu(), limit))
        })
    }
}

/// One GPU's memory budget, with what turns a declaration into units without a division,
/// worked out once per pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Budget {
    /// Bytes (at least 1).
    pub(super) bytes: u64,
    /// `floor((2^64 - 1) / bytes)`.
    inverse: u64,
    /// The N declarations are converted with.
    per_gpu: u64,
    /// Declarations of fewer bytes are served without checks: they are within the budget,
    /// their units within what one permit can hold, and their bytes times `per_gpu` fit in a
    /// `u64` (0: none is).
    inline_below: u64,
}

impl Budget {
    /// `bytes` of one GPU, converted with `per_gpu` units per GPU, for permits of at most
    /// `limit` units.
    pub(super) fn new(bytes: u64, per_gpu: usize, limit: usize) -> Budget {
        let (n, limit) = (per_gpu as u128, limit as u128);
        // `need` takes `ceil(need x N / bytes)` units: at most `limit` when
        // `need x N <= limit x bytes`.
        let inline_below = if n == 0 || limit == 0 {
            0
        } else {
            let most = (bytes as u128)
                .min(limit * bytes as u128 / n)
                .min(u64::MAX as u128 / n);
            // `most` fits in a `u64`, being at most `bytes`; at `u64::MAX` that one
            // declaration takes the checked path.
            (most as u64).saturating_add(1)
        };
        Budget {
            bytes,
            inverse: u64::MAX / bytes,
            per_gpu: per_gpu as u64,
            inline_below,
        }
    }

    /// `ceil(need x per_gpu / bytes)`: the units `need` bytes take of a GPU's `per_gpu`.
    pub(super) fn units(&self, need: u64) -> u64 {
        match need.checked_mul(self.per_gpu) {
            Some(0) => 0,
            // ceil(x / bytes) = floor((x - 1) / bytes) + 1 for x >= 1.
            Some(scaled) => self.div_floor(scaled - 1) + 1,
            None => (need as u128 * self.per_gpu as u128).div_ceil(self.bytes as u128) as u64,
        }
    }

    /// The units of `need` bytes (at least 1) when it is below `inline_below`, which makes it
    /// a declaration that cannot be refused; `None` otherwise.
    #[inline(always)]
    pub(super) fn inline_units(&self, need: u64) -> Option<usize> {
        if need >= self.inline_below {
            return None;
        }
        // Below `inline_below`, `need x per_gpu` does not overflow, and the units are at most
        // the permit limit, a `usize`. `max(ceil(x / bytes), 1)` is
        // `floor((max(x, 1) - 1) / bytes) + 1`.
        let scaled = need * self.per_gpu;
        Some(self.div_floor(scaled.saturating_sub(1)) as usize + 1)
    }

    /// `floor(x / bytes)`. Multiplies by the inverse and corrects the estimate, which is at
    /// most 1 short: the inverse is at least `2^64 / bytes - 1`, so the product falls short
    /// of `x x 2^64 / bytes` by at most `x`, less than `2^64`.
    #[inline(always)]
    fn div_floor(&self, x: u64) -> u64 {
        let q = ((x as u128 * self.inverse as u128) >> 64) as u64;
        // q x bytes <= x, so this neither wraps nor overflows.
        let rest = x - q * self.bytes;
        debug_assert!(
            (rest as u128) < 2 * self.bytes as u128,
            "the estimate was more than 1 short"
        );
        q + u64::from(rest >= self.bytes)
    }
}

/// The smallest device memory the CUDA probe reports, in bytes; `None` without the `cuda`
/// feature, without CUDA devices, or (unless `unified_too`) when a device shares its memory
/// with the CPU: there the budget is what the user says it is.
fn probed_memory(unified_too: bool) -> Option<u64> {
    #[cfg(feature = "cuda")]
    {
        use crate::probe::{Backend, DeviceKind};
        let outcome = crate::probe::probe(Backend::Cuda).outcome;
        let devices = outcome.devices()?;
        if !unified_too && devices.iter().any(|d| d.kind == DeviceKind::Integrated) {
            return None;
        }
        devices.iter().filter_map(|d| d.memory_bytes).min()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = unified_too;
        None
    }
}

/// Says once per process that a memory declaration counts as one unit for want of a budget.
#[cold]
fn no_budget_notice(bytes: u64) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::notice::line(&format!(
            "a test declared {} of GPU memory, but no memory budget is known, so memory \
             declarations count as one permit unit; set {} (e.g. 64GiB, or 90% of the device \
             memory the CUDA probe reports)",
            crate::config::format_bytes(bytes),
            crate::config::GPU_MEMORY_VAR
        ));
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Budget;

    #[test]
    fn memory_to_units_without_a_division_matches_div_ceil() {
        // `limit` below `per_gpu`: inside an inherited permit of fewer units than N.
        let check = |bytes: u64, need: u64, per_gpu: usize, limit: usize| {
            let exact = (need as u128 * per_gpu as u128).div_ceil(bytes as u128) as u64;
            let budget = Budget::new(bytes, per_gpu, limit);
            let at = format!("{need} of {bytes} at N = {per_gpu}, limit {limit}");
            assert_eq!(budget.units(need), exact, "{at}");
            let units = exact.max(1);
            let servable = need <= bytes && units <= limit as u64;
            match budget.inline_units(need) {
                Some(inline) => {
                    assert!(servable, "{at}: served inline but refused when checked");
                    assert_eq!(inline as u64, units, "{at}");
                }
                // Only a declaration whose conversion overflows (or `u64::MAX` bytes) is left
                // to the checked path although it would be served.
                None => assert!(
                    !servable || need.checked_mul(per_gpu as u64).is_none() || need == u64::MAX,
                    "{at}: servable but not inline"
                ),
            }
        };
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200_000 {
            let bytes = (next() >> (next() % 64)).max(1);
            let need = next() >> (next() % 64);
            let per_gpu = (next() % 1024 + 1) as usize;
            let limit = if next() % 2 == 0 {
                per_gpu
            } else {
                (next() % per_gpu as u64 + 1) as usize
            };
            check(bytes, need, per_gpu, limit);
        }
        for bytes in [1, 2, 3, 7, 1 << 30, 80_000_000_000, u64::MAX / 3, u64::MAX] {
            for need in [
                0,
                1,
                bytes / 2,
                bytes / 2 + 1,
                bytes - 1,
                bytes,
                bytes.saturating_add(1),
                u64::MAX / 1024,
                u64::MAX,
            ] {
                for per_gpu in [1, 2, 3, 8, 1024] {
                    for limit in [1, (per_gpu / 2).max(1), per_gpu] {
                        check(bytes, need, per_gpu, limit);
                    }
                }
            }
        }
    }
}
