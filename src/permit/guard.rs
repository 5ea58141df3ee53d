//! The guards of a held permit ([`GpuTestPermit`], [`EnteredPermit`]) and how they keep their
//! pool alive.
//!
//! # How it works
//!
//! A pool has one [`Seat`] per unit it can hand out (N per GPU times the GPUs): a permit holds
//! at least one unit, so a request that got its units always finds a free seat. A seat's
//! `word` packs a generation (high bits) and the number of live guards of its permit (low
//! [`GUARD_BITS`]). Taking a new permit claims a seat and bumps its generation; a nested
//! acquisition or [`GpuTestPermit::share`] adds a guard with one compare-and-swap; a guard's
//! drop removes one, and the drop that removes the last returns the permit
//! ([`PoolInner::release`]).
//!
//! Who holds a permit (the thread that took or entered it; with learned weights, also its
//! test) is noted by `holder`, keyed by that holder, as (pool, seat, generation): only a
//! lookup aid for joining it: the counts live in the pool, so a guard may move to and drop on
//! any thread, and an entry whose permit is gone is recognised by a changed generation (or no
//! guards) and pruned.
//!
//! Guards point at the pool through a raw pointer. The pool is freed either by its handle's
//! drop, when nothing is out, or — when permits outlive the handle — by the release that
//! returns the last unit ([`LocalPool::close`](super::local) decides which, atomically). So a
//! guard's pointer is valid for as long as the guard lives, which is what the `unsafe` below

use std::fmt;
use std::ptr::NonNull;
use std::time::Duration;

use super::holder::{Holders, Holding, Key};
use super::inner::PoolInner;
use super::seat::{GUARD_BITS, GUARDS, NO_MEMORY, NO_SLOT, Seat};
use super::want::PermitKind;
use crate::sync::Ordering;

/// A held GPU permit. Dropping the guard returns the permit (on any thread).
///
/// Guards obtained while the thread already holds a permit (nested acquisitions, and
/// [`share`](Self::share)) keep the same permit; it is returned when the last of its guards
/// drops. Put the permit *last* in a fixture struct, so the GPU objects declared before it drop
/// first (or use [`Permitted`](crate::Permitted), which gets the order right).
///
/// ```
/// use gpu_test_permit::PermitPool;
///
/// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
/// let permit = pool.acquire(); // the GPU objects are made after this line, dropped before it ends
/// assert_eq!(permit.units(), 1);
/// assert!(!permit.is_exclusive());
/// let nested = pool.acquire(); // the same thread again: free, no second unit
/// assert!(nested.is_nested());
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[must_use = "the permit is returned as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct GpuTestPermit {
    /// Alive while any guard of the permit lives: the permit's units are not returned before
    /// its last guard drops, and a pool is freed only once all units are back.
    pub(super) pool: NonNull<PoolInner>,
    pub(super) seat: usize,
    pub(super) nested: Nested,
}

/// Whether a guard is its permit's first or a later one. A full word rather than a `bool`: a
/// guard is returned through memory, and a one-byte store read back as part of a wider copy
/// stalls store forwarding on the nested fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(super) enum Nested {
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
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// assert!(pool.acquire_exclusive().is_exclusive());
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn is_exclusive(&self) -> bool {
        self.kind() == PermitKind::Exclusive
    }

    /// Shared or exclusive.
    ///
    /// ```
    /// use gpu_test_permit::{PermitKind, PermitPool};
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// assert_eq!(pool.acquire_weighted(2).kind(), PermitKind::Shared);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn kind(&self) -> PermitKind {
        if self.seat().exclusive.load(Ordering::Relaxed) {
            PermitKind::Exclusive
        } else {
            PermitKind::Shared
        }
    }

    /// Whether this guard came from a nested acquisition or [`share`](Self::share), i.e. another
    /// guard of the same permit exists or existed.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let outer = pool.acquire();
    /// let inner = pool.acquire(); // a fixture inside the test, on the same thread
    /// assert!(!outer.is_nested() && inner.is_nested());
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn is_nested(&self) -> bool {
        self.nested == Nested::Yes
    }

    /// Permit units this permit holds: 1 for a plain permit, k for a weighted one
    /// ([`acquire_weighted`](crate::acquire_weighted), or memory converted to units), every
    /// unit of the pool for an exclusive one.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// assert_eq!(pool.acquire_weighted(3).units(), 3);
    /// assert_eq!(pool.acquire_exclusive().units(), 4);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn units(&self) -> usize {
        let seat = self.seat();
        let units = seat.units.load(Ordering::Relaxed);
        // Without the directory's other units it holds besides, in a layout another user set
        // higher than this process's N (`PoolInner::pad`): an exclusive permit is this
        // process's N on every GPU, as it counts them.
        let pool = self.pool();
        if pool.pad == 0 {
            return units;
        }
        let gpus = if seat.exclusive.load(Ordering::Relaxed) {
            pool.gpus
        } else {
            seat.gpus.load(Ordering::Relaxed).max(1)
        };
        units - pool.pad * gpus
    }

    /// The GPU memory the permit's request declared, in bytes
    /// ([`acquire_memory`](crate::acquire_memory)).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).memory_budget(16 << 30).in_process_only().build()?;
    /// // 6 GiB of a 16 GiB budget in units of 4 GiB: 2 units.
    /// let permit = pool.acquire_memory(6 << 30);
    /// assert_eq!((permit.memory(), permit.units()), (Some(6 << 30), 2));
    /// drop(permit);
    /// assert_eq!(pool.acquire().memory(), None);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn memory(&self) -> Option<u64> {
        self.seat().declared_memory()
    }

    /// Records the GPU memory the test was measured to use while it held this permit (the
    /// fixtures call this where they can measure it). The largest value recorded goes into the
    /// trace's hold event, where `gpu-test-permit trace` compares it with the declaration.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let permit = pool.acquire();
    /// // What the test's own allocator reports, for the trace's hold event.
    /// permit.record_memory_used(512 << 20);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn record_memory_used(&self, bytes: u64) {
        self.seat()
            .memory_used
            .fetch_max(bytes.min(NO_MEMORY - 1), Ordering::Relaxed);
    }

    /// The host slots this permit holds, in increasing order: one for a plain permit, k (all
    /// on one GPU) for a weighted one, all of them for an exclusive one, none for a pool
    /// without host slots. Inside a permit inherited from `gpu-test-permit run`, the parent's
    /// slots that this permit's units stand for. The first slot is a natural device ordinal
    /// hint.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let dir = std::env::temp_dir().join(format!("gtp-doc-slots-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(4).slot_dir(&dir).build()?;
    /// let permit = pool.acquire_weighted(2);
    /// assert_eq!(permit.slots().len(), 2);
    /// drop(permit);
    /// let in_process = PermitPool::builder().in_process_only().build()?;
    /// assert!(in_process.acquire().slots().is_empty());
    /// # drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn slots(&self) -> Vec<usize> {
        let pool = self.pool();
        let mut slots = pool.held_slots(self.seat);
        if let Some(inherited) = &pool.inherited {
            for s in &mut slots {
                *s = inherited.parent_slot(*s);
            }
            crate::order::sort(&mut slots);
        }
        slots
    }

    /// The GPU this permit is for, on a pool that spans several GPUs
    /// ([`PoolBuilder::gpus`](crate::PoolBuilder::gpus), `GPU_TEST_PERMIT_GPUS`): its host slot modulo the number of GPUs,
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
        if self.is_exclusive() {
            return None;
        }
        if self.seat().gpus.load(Ordering::Relaxed) > 1 {
            return self.devices().first().copied();
        }
        let pool = self.pool();
        match (
            self.seat().first_slot.load(Ordering::Relaxed),
            &pool.inherited,
        ) {
            (NO_SLOT, _) => (pool.gpus == 1).then_some(0),
            (first, Some(inherited)) => Some(inherited.gpu_of(first)),
            (first, None) => Some(first % pool.gpus),
        }
    }

    /// The GPUs this permit is for, in increasing order: the one [`device`](Self::device) for a
    /// plain or weighted permit, the k GPUs of a [`gpus(k)`](crate::PermitRequest::gpus)
    /// request, every GPU of the pool for an exclusive permit. Empty on a multi-GPU pool
    /// without host slots, which places nothing. Inside a permit inherited from
    /// `gpu-test-permit run`, as the parent numbers its GPUs.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    /// # let dir = std::env::temp_dir().join(format!("gtp-doc-devices-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(1).gpus(3).slot_dir(&dir).build()?;
    /// let one = pool.acquire();
    /// // Two GPUs at once: the two that `one` leaves free.
    /// let two = std::thread::scope(|s| s.spawn(|| pool.request().gpus(2).acquire().devices()).join().unwrap());
    /// assert_eq!(two.len(), 2);
    /// assert!(!two.contains(&one.device().unwrap()));
    /// # drop(one); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn devices(&self) -> Vec<usize> {
        let pool = self.pool();
        if self.is_exclusive() {
            let gpus = match &pool.inherited {
                Some(inherited) => inherited.gpus(),
                None => pool.gpus,
            };
            return (0..gpus).collect();
        }
        if self.seat().gpus.load(Ordering::Relaxed) <= 1 {
            return match self.device() {
                Some(device) => vec![device],
                None => Vec::new(),
            };
        }
        let mut devices = pool.held_slots(self.seat);
        for slot in devices.iter_mut() {
            *slot = match &pool.inherited {
                Some(inherited) => inherited.gpu_of(*slot),
                None => *slot % pool.gpus.max(1),
            };
        }
        crate::order::sort_dedup(&mut devices);
        devices
    }

    /// Lets the process that `cmd` starts, and everything it starts, work inside this permit
    /// instead of taking permits of their own: their global pools take none of the host's
    /// slots, and all of them together hold at most what this permit holds (they share its
    /// units through slot files of their own beside its slots), on the same device. This is
    /// what `gpu-test-permit run` does for its command.
    ///
    /// The command inherits the open files that hold this permit's slot locks (as descriptors
    /// without close-on-exec) and finds them named in
    /// [`INHERITED_VAR`](crate::config::INHERITED_VAR). A lock belongs to the open file, so the
    /// slots stay locked while any process holding them lives, even if this one is killed with
    /// SIGKILL; dropping this permit unlocks them for every holder. On a pool that itself works
    /// inside an inherited permit, the command works inside this permit's share of it.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](std::io::ErrorKind::Unsupported) on a pool without host slots and where
    /// descriptors are not inherited by number (not on Unix); an error duplicating a
    /// descriptor.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let dir = std::env::temp_dir().join(format!("gtp-doc-pass-to-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).slot_dir(&dir).build()?;
    /// let permit = pool.acquire();
    /// let mut cmd = std::process::Command::new("true"); // a GPU program that takes no permit
    /// if permit.pass_to(&mut cmd).is_ok() {
    ///     // It runs inside this permit: everything it starts counts against this one unit.
    ///     assert!(cmd.status().is_ok());
    /// }
    /// # drop(permit); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn pass_to(&self, cmd: &mut std::process::Command) -> std::io::Result<()> {
        use crate::config::{INHERITED_VAR, InheritedPermit, InheritedSlot};
        let pool = self.pool();
        let Some(host) = &pool.host else {
            return Err(unsupported(
                "a pool without host slots has no permit to pass on",
            ));
        };
        let mut slots = Vec::new();
        for &index in &pool.held_slots(self.seat) {
            let file = host.slot_file(index);
            let Some((dev, ino)) = crate::sys::file_identity(file) else {
                return Err(unsupported("slot files have no identity to check here"));
            };
            let fd = crate::sys::pass_to_child(cmd, file)?;
            let slot = InheritedSlot::new(index, fd, dev, ino);
            // Inside an inherited permit these are the slots its processes share: named with
            // their GPUs, counted in the parent's N.
            slots.push(match &pool.inherited {
                Some(inherited) => slot.on_gpu(inherited.gpu_of(index)),
                None => slot,
            });
        }
        let (per_gpu, gpus) = match &pool.inherited {
            Some(inherited) => (inherited.permit.per_gpu, inherited.permit.gpus),
            None => (host.layout().per_gpu, host.layout().gpus),
        };
        let permit = InheritedPermit::new(
            per_gpu,
            gpus,
            self.is_exclusive(),
            slots,
            host.dir().to_path_buf(),
        );
        cmd.env(INHERITED_VAR, permit.to_os_string());
        super::observe::passing_on(cmd);
        Ok(())
    }

    /// How long the permit has been held.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let permit = pool.acquire();
    /// // ... the test ...
    /// println!("held for {:?}", permit.held_for());
    /// assert!(permit.held_for() < std::time::Duration::from_secs(600));
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
    /// let permit = pool.acquire();
    /// let for_worker = permit.share();
    /// std::thread::scope(|s| {
    ///     s.spawn(move || {
    ///         let _entered = for_worker.enter();
    ///         // The worker's fixture takes no unit of its own (with N = 1 it would wait forever).
    ///         assert!(pool.acquire().is_nested());
    ///     });
    /// });
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn enter(&self) -> EnteredPermit<'_> {
        let generation = self.seat().word.load(Ordering::Relaxed) >> GUARD_BITS;
        let entry = self.pool().holders.note(Key::Thread, self.seat, generation);
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
///
/// ```
/// use gpu_test_permit::PermitPool;
///
/// let pool = PermitPool::builder().concurrency(1).in_process_only().build()?;
/// let permit = pool.acquire();
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         let _entered = permit.enter(); // this worker counts as holding the test's permit
///         assert!(pool.acquire().is_nested());
///     });
/// });
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[must_use = "the thread stops counting as a holder when this is dropped"]
pub struct EnteredPermit<'a> {
    permit: &'a GpuTestPermit,
    entry: Holding,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for EnteredPermit<'_> {
    fn drop(&mut self) {
        Holders::leave_thread(self.entry);
    }
}

impl fmt::Debug for EnteredPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnteredPermit")
            .field("permit", self.permit)
            .finish()
    }
}

/// The error of what this system or pool cannot do.
fn unsupported(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, what)
}
