//! The pool's public face ([`PermitPool`]): the handle that owns the shared state, its
//! accessors, and the acquisition paths (nested, checked, new). The builder, the global pool
//! and requests add their constructors in files of their own above this one.

use std::fmt;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant, SystemTime};

use super::budget::no_budget_notice;
use super::error::AcquireError;
use super::guard::{GpuTestPermit, Nested};
use super::holder::Key;
use super::inner::PoolInner;
use super::learned::{Learned, learned_units};
use super::local::{Deadline, LocalTimeout};
use super::observe::{Grant, Names, Shown};
use super::seat::{NO_MEMORY, NO_SLOT};
use super::want::{PermitKind, Refused, Want};
use crate::clock::unix_ms;
use crate::host::{HolderRecord, HostWaitError};
use crate::sync::Ordering;

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
///
/// ```
/// use gpu_test_permit::PermitPool;
///
/// // Most tests use the global pool (`gpu_test_permit::acquire()`); a pool of its own suits a
/// // suite's unit tests of its own fixtures.
/// let pool = PermitPool::builder().concurrency(3).in_process_only().build()?;
/// assert_eq!((pool.concurrency(), pool.gpus(), pool.capacity()), (3, 1, 3));
/// let one = pool.acquire();
/// assert_eq!(one.units(), 1);
/// drop(one);
/// let all = pool.acquire_weighted(3);
/// assert_eq!(all.units(), 3);
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
pub struct PermitPool {
    /// Owned (a `Box`); freed by `Drop` or, while permits are out, by the last release.
    pub(super) inner: NonNull<PoolInner>,
}

/// Whether this process is a retry of a test that must run alone: nextest's attempt is above 1
/// and `GPU_TEST_PERMIT_RETRY` is `alone` (the default). Said once, on standard error.
fn retry_alone() -> bool {
    static ALONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALONE.get_or_init(|| {
        let cfg = crate::config::Config::global();
        let Some(n) = &cfg.nextest else {
            return false;
        };
        if !n.is_retry() {
            return false;
        }
        if cfg.retry != crate::config::RetryMode::Alone {
            return false;
        }
        crate::notice::line(&format!(
            "attempt {} of {}: this test's permits are exclusive, so it reruns with the GPU to \
             itself ({}=same keeps them as asked)",
            n.attempt.unwrap_or(2),
            n.total_attempts.unwrap_or(0),
            crate::config::RETRY_VAR
        ));
        true
    })
}

impl fmt::Debug for PermitPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitPool")
            .field("concurrency", &self.concurrency())
            .field("gpus", &self.gpus())
            .field("slot_dir", &self.inner().slot_dir())
            .field("timeout", &self.inner().timeout)
            .finish_non_exhaustive()
    }
}

// SAFETY: `PermitPool` owns its `PoolInner` like a `Box` would, and `PoolInner` is `Send + Sync`
// (checked below).
unsafe impl Send for PermitPool {}
// SAFETY: as above.
unsafe impl Sync for PermitPool {}

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
    pub(super) fn inner(&self) -> &PoolInner {
        // SAFETY: the pool is freed only after this handle is dropped.
        unsafe { self.inner.as_ref() }
    }

    /// Permits per GPU (N).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(3).gpus(2).in_process_only().build()?;
    /// assert_eq!(pool.concurrency(), 3);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn concurrency(&self) -> usize {
        self.inner().own_per_gpu()
    }

    /// GPUs the pool spans (inside a permit inherited from `gpu-test-permit run`, the GPUs
    /// the parent numbers its devices among).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(3).gpus(2).in_process_only().build()?;
    /// assert_eq!(pool.gpus(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn gpus(&self) -> usize {
        let inner = self.inner();
        match &inner.inherited {
            Some(inherited) => inherited.permit.gpus,
            None => inner.gpus,
        }
    }

    /// Permits in all: N per GPU times the GPUs.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(3).gpus(2).in_process_only().build()?;
    /// assert_eq!(pool.capacity(), 6);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner().local.capacity()
    }

    /// The deadline of [`acquire`](Self::acquire) and [`acquire_exclusive`](Self::acquire_exclusive).
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).timeout(Duration::from_secs(5)).in_process_only().build()?;
    /// assert_eq!(pool.timeout(), Duration::from_secs(5));
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner().timeout
    }

    /// The slot directory, or `None` for an in-process-only pool.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// assert_eq!(pool.slot_dir(), None);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn slot_dir(&self) -> Option<&Path> {
        self.inner().slot_dir()
    }

    /// Takes a shared permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// When the deadline passes or the slot directory is unusable; see [`acquire`](crate::acquire).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let permit = pool.acquire(); // waits while both units are held by other threads
    /// assert_eq!(permit.units(), 1);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    #[inline]
    pub fn acquire(&self) -> GpuTestPermit {
        // Nested: a thread that holds a permit of this pool gets one more guard of it. Built
        // here, in the return slot, rather than returned through a `Result` and moved out of
        // it: that copy reads the guard back in a load wider than the stores that wrote it,
        // which stalls store forwarding (most of the nested path's time, by `perf annotate`).
        // A one-unit shared request needs none of `acquire_inner`'s checks when nested.
        if let Some(seat) = self.nested_seat() {
            return GpuTestPermit {
                pool: self.inner,
                seat,
                nested: Nested::Yes,
            };
        }
        self.acquire_or_panic(Want::ONE)
    }

    /// Takes every permit, waiting up to the pool's deadline.
    ///
    /// # Panics
    ///
    /// As [`acquire_exclusive`](crate::acquire_exclusive).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let all = pool.acquire_exclusive(); // nothing else holds a unit of the pool now
    /// assert_eq!(all.units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_exclusive(&self) -> GpuTestPermit {
        self.acquire_or_panic(Want::EXCLUSIVE)
    }

    /// Takes a permit of `units` units, all on one GPU, waiting up to the pool's deadline; see
    /// [`acquire_weighted`](crate::acquire_weighted).
    ///
    /// # Panics
    ///
    /// As [`acquire_weighted`](crate::acquire_weighted).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let heavy = pool.acquire_weighted(2); // half the GPU
    /// assert_eq!(heavy.units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_weighted(&self, units: usize) -> GpuTestPermit {
        self.request().units(units).acquire()
    }

    /// Takes a permit on `gpus` distinct GPUs, one unit on each, waiting up to the deadline:
    /// `request().gpus(gpus).acquire()` (see [`PermitRequest::gpus`](crate::PermitRequest::gpus)).
    ///
    /// # Panics
    ///
    /// As [`acquire`](Self::acquire), and when `gpus` is more than the pool (or its largest
    /// group) has.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let dir = std::env::temp_dir().join(format!("gtp-doc-acquire-gpus-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).gpus(4).slot_dir(&dir).build()?;
    /// let pair = pool.acquire_gpus(2);
    /// assert_eq!(pair.devices().len(), 2);
    /// # drop(pair); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_gpus(&self, gpus: usize) -> GpuTestPermit {
        self.request().gpus(gpus).acquire()
    }

    /// Takes a permit for a test that needs `bytes` of GPU memory, waiting up to the pool's
    /// deadline; see [`acquire_memory`](crate::acquire_memory).
    ///
    /// # Panics
    ///
    /// As [`acquire_memory`](crate::acquire_memory).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).memory_budget(80 << 30).in_process_only().build()?;
    /// // Units of 20 GiB: 30 GiB takes 2.
    /// assert_eq!(pool.acquire_memory(30 << 30).units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_memory(&self, bytes: u64) -> GpuTestPermit {
        self.request().memory(bytes).acquire()
    }

    /// Takes a shared permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
    /// let permit = pool.try_acquire_for(Duration::from_secs(1)).expect("nobody else holds it");
    /// assert_eq!(permit.units(), 1);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(Want::ONE, Deadline::After(timeout))
    }

    /// Takes every permit, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let all = pool.try_acquire_exclusive_for(Duration::from_secs(1)).expect("the pool is free");
    /// assert!(all.is_exclusive());
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
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
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use gpu_test_permit::{PermitKind, PermitPool};
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let permit = pool.acquire_until(PermitKind::Shared, Some(deadline)).expect("free");
    /// assert_eq!(permit.kind(), PermitKind::Shared);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_until(
        &self,
        kind: PermitKind,
        deadline: Option<Instant>,
    ) -> Result<GpuTestPermit, AcquireError> {
        self.acquire_inner(Want::of(kind), Deadline::until(deadline))
    }

    #[inline]
    pub(super) fn acquire_or_panic(&self, want: Want) -> GpuTestPermit {
        match self.acquire_inner(want, Deadline::After(self.inner().timeout)) {
            Ok(p) => p,
            Err(e) => panic!("gpu-test-permit: {e}"),
        }
    }

    /// The seat of a permit this thread already holds, with one more guard counted in it, if
    /// there is one. Returns a plain index (the guard is built by the caller): the hot path of
    /// nested acquisition stays small.
    #[inline(always)]
    fn nested_seat(&self) -> Option<usize> {
        let inner = self.inner();
        inner.holders.join(Key::Thread, &inner.seats)
    }

    #[inline(always)]
    pub(super) fn acquire_inner(
        &self,
        want: Want,
        wait: Deadline,
    ) -> Result<GpuTestPermit, AcquireError> {
        // Weighted and memory requests are checked (and memory turned into units) first: a
        // request that can never be served fails at once, nested or not. Those that cannot
        // fail take an inline path: a request of at most N units, and a memory declaration
        // within what the resolved budget serves inline.
        let inner = self.inner();
        let want = if want.gpus != 1 {
            self.resolve(want)?
        } else if want.memory.is_none()
            && ((want.units == 1 && !(want.exclusive && inner.inherited.is_some()))
                || (!want.exclusive
                    && inner.inherited.is_none()
                    && want.units <= inner.own_per_gpu()))
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
            if want.units > 1 || want.gpus > 1 {
                let units = held.units.load(Ordering::Relaxed);
                let gpus = held.gpus.load(Ordering::Relaxed).max(1);
                if want.gpus > gpus || want.units > (units / gpus).saturating_sub(inner.pad) {
                    drop(guard);
                    return Err(AcquireError::NestedLarger {
                        held: units,
                        asked: want.units.saturating_mul(want.gpus),
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
        let (widest, gpus) = inner.gpu_limit();
        if want.gpus > widest {
            return Err(Refused::Gpus {
                asked: want.gpus,
                widest,
                gpus,
                inherited: inner.inherited.is_some(),
            });
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

    /// What learned weights make of a request that declares nothing: with a memory budget in
    /// force and a measured peak for the running test, the permit its test holds on another
    /// thread (joined: the test's weight covers the test, and a thread waiting for units its
    /// own test holds would wait for itself), else the units of its peak. Out of line: it runs
    /// only with learned weights on.
    #[cold]
    #[inline(never)]
    fn learned_weight(&self, l: &Learned) -> Learning {
        let inner = self.inner();
        let Some(budget) = inner.memory_budget() else {
            return Learning::Nothing;
        };
        // Nothing measured on this host: no test's name need be looked up.
        let Some(peaks) = l.peaks() else {
            return Learning::Nothing;
        };
        let key = super::observe::test_key();
        let Some(&peak) = peaks.get(&key) else {
            return Learning::Nothing;
        };
        if let Some(seat) = inner.holders.join(Key::Test(&key), &inner.seats) {
            return Learning::Shared(seat);
        }
        let (limit, _) = inner.unit_limit();
        Learning::Units {
            units: learned_units(peak, &budget, limit),
            peak,
            key,
        }
    }

    /// Takes a permit this thread does not hold yet: the protocol's steps, in order. Shape the
    /// request (what it asks of the slots), take its units in the process, then its slots
    /// across processes, then claim a seat. The observers hear of it at named points
    /// ([`Observers::asking`], [`Observers::naming`], [`Observers::granted`]), with plain
    /// values.
    ///
    /// [`Observers::asking`]: super::observe::Observers::asking
    /// [`Observers::naming`]: super::observe::Observers::naming
    /// [`Observers::granted`]: super::observe::Observers::granted
    #[inline(never)]
    fn acquire_new(&self, want: Want, wait: Deadline) -> Result<GpuTestPermit, AcquireError> {
        let inner = self.inner();
        let shaped = match self.shape(want)? {
            Shape::Asks(shaped) => shaped,
            Shape::Joined(seat) => {
                return Ok(GpuTestPermit {
                    pool: self.inner,
                    seat,
                    nested: Nested::Yes,
                });
            }
        };
        let asking = inner.observers.asking();
        let waited_since = self.seat_in_process(&shaped, wait)?;
        let names = inner.observers.naming();
        let taken = self.slots_across_processes(&shaped, wait, waited_since, names.as_ref())?;
        let seat = self.claim(&shaped, &taken);
        // The guard before any observer hears of the grant: whatever happens there, the units
        // are the guard's to return.
        let permit = GpuTestPermit {
            pool: self.inner,
            seat,
            nested: Nested::No,
        };
        let held = inner.observers.granted(
            asking,
            names,
            Grant {
                shown: Shown {
                    units: shaped.units,
                    exclusive: shaped.want.exclusive,
                    memory: shaped.want.memory,
                    budget: inner.budget_bytes(),
                },
                slot_dir: inner.slot_dir(),
                slots: &taken.slots,
                at: taken.at,
                waited: taken.waited,
                alone: shaped.alone,
                learned: shaped.learned.as_ref().map(|(_, peak)| *peak),
                backfilled: taken.backfilled,
            },
        );
        if let Some(held) = held {
            *inner.seats[seat].observed.lock() = Some(held);
        }
        Ok(permit)
    }

    /// Step 1, shape the request: what it asks of the slots. A pool without its host slots
    /// refuses it; a retried test reruns with the GPU to itself (`GPU_TEST_PERMIT_RETRY`);
    /// with learned weights, a request that declares nothing takes its test's learned units,
    /// or joins the learned permit its test holds.
    fn shape(&self, mut want: Want) -> Result<Shape, AcquireError> {
        let inner = self.inner();
        if let Some(e) = &inner.host_error {
            return Err(AcquireError::Host(e.clone()));
        }
        // Inside an inherited permit, whoever passed it on has decided.
        let alone = !want.exclusive && inner.inherited.is_none() && retry_alone();
        if alone {
            want.exclusive = true;
        }
        // Learned weights: one branch when they are off.
        let mut learned = None;
        if let Some(l) = &inner.learned
            && want == Want::ONE
        {
            match self.learned_weight(l) {
                Learning::Nothing => {}
                Learning::Shared(seat) => return Ok(Shape::Joined(seat)),
                Learning::Units { units, peak, key } => {
                    want.units = units;
                    learned = Some((key, peak));
                }
            }
        }
        // In a directory whose layout another user set higher than this process's N, each of
        // its permits also holds the directory's other units of its GPUs (`PoolInner::pad`).
        if !want.exclusive {
            want.units += inner.pad;
        }
        Ok(Shape::Asks(Shaped {
            units: want.held_units(inner.local.capacity()),
            // An exclusive permit holds every GPU; its units are not spread over some of them.
            gpus: if want.exclusive { 1 } else { want.gpus },
            want,
            alone,
            learned,
        }))
    }

    /// Step 2, the seat in the process: the request's units of the process's semaphore, in
    /// arrival order. Returns when its wait began (`None`: it did not wait).
    fn seat_in_process(&self, s: &Shaped, wait: Deadline) -> Result<Option<Instant>, AcquireError> {
        let inner = self.inner();
        match inner.local.acquire(s.units, wait) {
            Ok(waited_since) => Ok(waited_since),
            Err(LocalTimeout { since }) => Err(match wait {
                Deadline::Now => AcquireError::WouldBlock,
                _ => inner.timeout_error(s.want, since),
            }),
        }
    }

    /// Step 3, the slots across processes (a pool with host slots): the request's units of the
    /// slot directory, in the host's queue, with the holder record the other processes read.
    /// Where it gets none, the units of step 2 go back.
    fn slots_across_processes(
        &self,
        s: &Shaped,
        wait: Deadline,
        waited_since: Option<Instant>,
        names: Option<&Names>,
    ) -> Result<Taken, AcquireError> {
        let inner = self.inner();
        let (Some(host), Some(names)) = (&inner.host, names) else {
            return Ok(Taken::default());
        };
        let start = match waited_since {
            Some(since) => since,
            None => Instant::now(),
        };
        // When the wait began on the boot clock as well: the queue's order reads it
        // (`queue::order_key`); the grant stamps its own (`HostSlots::write_records`).
        let (since_boot_ms, boot_id) = match crate::clock::boot_now() {
            Some(boot) => (Some(boot.ms), boot.boot_id),
            None => (None, None),
        };
        let record = HolderRecord {
            gpus: s.gpus,
            pid: crate::sys::pid(),
            test: names.test.clone(),
            binary: Some(names.binary()),
            thread: names.thread.clone(),
            since_unix_ms: unix_ms(names.since_wall),
            since_boot_ms,
            boot_id: boot_id.map(str::to_string),
            exclusive: s.want.exclusive,
            concurrency: inner.layout().per_gpu,
            units: s.units,
            memory: s.want.memory,
        };
        let take = crate::host::Take {
            units: s.want.units,
            gpus: s.want.gpus,
            exclusive: s.want.exclusive,
            topology: &inner.topology,
            placement: inner.placement,
            live: inner.live_memory(s.want),
            backfill: inner.backfill,
        };
        match host.acquire(&take, wait.resolve(start), &record) {
            Ok((mut slots, backfilled)) => {
                crate::order::sort(&mut slots);
                Ok(Taken {
                    slots,
                    backfilled,
                    at: Some(SystemTime::now()),
                    waited: start.elapsed(),
                })
            }
            Err(e) => {
                let freed = inner.local.release(s.units);
                debug_assert!(!freed, "a pool cannot close while borrowed");
                Err(match e {
                    HostWaitError::TimedOut if matches!(wait, Deadline::Now) => {
                        AcquireError::WouldBlock
                    }
                    HostWaitError::TimedOut => inner.timeout_error(s.want, start),
                    HostWaitError::Failed(e) => AcquireError::Host(e),
                })
            }
        }
    }

    /// Step 4, claim a seat: the permit's state where its guards find it, the learned permit
    /// its test's other threads join, and this thread's entry for nested requests. Returns
    /// the seat.
    fn claim(&self, s: &Shaped, taken: &Taken) -> usize {
        let inner = self.inner();
        let (seat_index, generation) = inner.claim_seat();
        if let Some((key, _)) = &s.learned {
            // Its test's other threads join it.
            inner.holders.note(Key::Test(key), seat_index, generation);
        }
        let seat = &inner.seats[seat_index];
        let exclusive = s.want.exclusive;
        seat.exclusive.store(exclusive, Ordering::Relaxed);
        seat.units.store(s.units, Ordering::Relaxed);
        seat.gpus.store(s.gpus, Ordering::Relaxed);
        seat.memory
            .store(s.want.memory.unwrap_or(NO_MEMORY), Ordering::Relaxed);
        seat.first_slot.store(
            taken.slots.first().copied().unwrap_or(NO_SLOT),
            Ordering::Relaxed,
        );
        if s.units > 1 && !exclusive && !taken.slots.is_empty() {
            *seat.slots.lock() = taken.slots.clone();
        }
        seat.since.store(crate::sys::coarse_ns(), Ordering::Relaxed);
        seat.thread
            .store(crate::sys::thread_number(), Ordering::Relaxed);
        inner.holders.note(Key::Thread, seat_index, generation);
        seat_index
    }
}

/// What shaping a request made of it ([`PermitPool::shape`]).
enum Shape {
    /// It asks the slots for a permit of its own.
    Asks(Shaped),
    /// It joined the learned permit its test holds, in this seat.
    Joined(usize),
}

/// A request shaped for the slots ([`PermitPool::shape`]).
struct Shaped {
    /// What it asks for: learned units, a retry's exclusivity applied.
    want: Want,
    /// The units it holds (every unit of the pool for an exclusive one).
    units: usize,
    /// The GPUs its units spread over (1 for an exclusive one, which holds them all).
    gpus: usize,
    /// A retry that runs alone.
    alone: bool,
    /// Its test's key (until the seat is claimed) and measured peak, where its units were
    /// learned.
    learned: Option<(String, u64)>,
}

/// What the slots across processes gave a request ([`PermitPool::slots_across_processes`]).
#[derive(Default)]
struct Taken {
    /// The host slots held, in increasing order (none for an in-process pool).
    slots: Vec<usize>,
    /// Granted past a waiting head.
    backfilled: bool,
    /// When the host granted them.
    at: Option<SystemTime>,
    /// How long it waited, in the process and at the host.
    waited: Duration,
}

/// What learned weights make of a request that declares nothing ([`PermitPool::learned_weight`]).
enum Learning {
    /// Nothing learned (no budget, no measured peak): one unit.
    Nothing,
    /// A guard of the learned permit its test holds in this seat.
    Shared(usize),
    /// The units of its test's measured peak of `peak` bytes.
    Units {
        units: usize,
        peak: u64,
        key: String,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::PermitPool;
    use crate::permit::observe::PANIC_AT;

    /// An observer made to panic at each point of a permit's life leaks nothing: the permit is
    /// granted and returned, and its unit is free again for this pool and for another pool of
    /// the same directory (its own open files, as another process has).
    #[test]
    fn an_observer_that_panics_at_any_point_leaks_no_unit() {
        let dir = tempfile::tempdir().unwrap();
        let slots = dir.path().join("slots");
        // With a trace, every point runs its observers.
        let pool = PermitPool::builder()
            .concurrency(1)
            .slot_dir(&slots)
            .trace(dir.path().join("trace.json"))
            .build()
            .unwrap();
        let other = PermitPool::builder()
            .concurrency(1)
            .slot_dir(&slots)
            .build()
            .unwrap();
        let patience = Duration::from_secs(5);
        for point in ["asked for", "named", "granted", "let go", "returned"] {
            *PANIC_AT.lock() = Some((std::thread::current().id(), point));
            let permit = pool.try_acquire_for(patience).expect(point);
            assert_eq!(permit.slots().len(), 1, "{point}");
            assert!(
                other.try_acquire_for(Duration::from_millis(20)).is_err(),
                "{point}: the unit is held while the permit is"
            );
            drop(permit);
            *PANIC_AT.lock() = None;
            drop(other.try_acquire_for(patience).expect(point));
            drop(pool.try_acquire_for(patience).expect(point));
        }
    }
}
