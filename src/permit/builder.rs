//! [`PoolBuilder`]: a pool's N, GPUs, slot directory, deadlines, budget and trace.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::Duration;

use super::holder::Holders;
use super::inherited::Inherited;
use super::inner::PoolInner;
use super::learned::Learned;
use super::local::LocalPool;
use super::observe::{self, Observers};
use super::pool::PermitPool;
use super::seat::Seat;
use crate::config::{SlotDir, Weights};
use crate::host::{HostError, HostSlots, Layout, Placement, Topology};

/// Configures a [`PermitPool`].
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit::PermitPool;
///
/// let pool = PermitPool::builder()
///     .concurrency(2)
///     .timeout(Duration::from_secs(30))
///     .in_process_only()
///     .build()?;
/// assert_eq!((pool.concurrency(), pool.timeout()), (2, Duration::from_secs(30)));
/// assert_eq!(pool.slot_dir(), None, "in-process only: no host slots");
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct PoolBuilder {
    pub(super) concurrency: usize,
    pub(super) gpus: usize,
    pub(super) slot_dir: Option<SlotDir>,
    pub(super) timeout: Duration,
    pub(super) hold_timeout: Option<Duration>,
    pub(super) trace: Option<PathBuf>,
    pub(super) memory_budget: Option<crate::config::MemoryBudget>,
    pub(super) probe_budget: bool,
    /// `REALIZAR_GPU_TEST_CONCURRENCY=auto`: N is chosen for the run ([`crate::tune`]).
    pub(super) auto: bool,
    /// Whose word sets the units of a request that declares nothing.
    pub(super) weights: Weights,
    /// Groups of devices a k-GPU request stays within (none: one group).
    pub(super) groups: Vec<Vec<usize>>,
    pub(super) placement: Placement,
    /// Whether memory declarations wait for free memory (NVML).
    pub(super) live_memory: bool,
    pub(super) backfill: bool,
    /// The CUDA ordinal of each device (`GPU_TEST_PERMIT_GPUS`'s list), for NVML; `None`:
    /// device k is ordinal k.
    pub(super) gpu_ids: Option<Vec<usize>>,
}

impl PoolBuilder {
    /// N chosen by `auto` for this process's run, as `REALIZAR_GPU_TEST_CONCURRENCY=auto`
    /// chooses it for the global pool (for benchmarks; the run is the process's own unless
    /// it runs under nextest, and `auto` must be configured for the process to have one).
    #[doc(hidden)]
    pub fn auto_concurrency(mut self) -> Self {
        self.auto = true;
        self
    }
}

impl PoolBuilder {
    /// Permits per GPU (at least 1); on a one-GPU pool, per host.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(3).in_process_only().build()?;
    /// assert_eq!(pool.concurrency(), 3);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn concurrency(mut self, n: usize) -> Self {
        assert!(n >= 1, "a permit pool needs at least one permit");
        self.concurrency = n;
        self
    }

    /// GPUs the pool spans (default 1): it holds `concurrency x gpus` permits, and each
    /// permit's [`device`](crate::GpuTestPermit::device) is its host slot modulo `gpus`, so no GPU
    /// gets more than `concurrency` of them.
    ///
    /// # Panics
    ///
    /// If `gpus` is 0.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).gpus(4).in_process_only().build()?;
    /// assert_eq!((pool.gpus(), pool.capacity()), (4, 8));
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn gpus(mut self, gpus: usize) -> Self {
        assert!(gpus >= 1, "a permit pool spans at least one GPU");
        self.gpus = gpus;
        self
    }

    /// Groups of GPUs (permit devices, below [`gpus`](Self::gpus)) that a request for several
    /// GPUs ([`PermitRequest::gpus`](crate::PermitRequest::gpus)) must stay within: GPUs that
    /// share a switch, say (`GPU_TEST_PERMIT_GPUS=0,1,2,3;4,5,6,7` for the global pool).
    /// Devices no group names are groups of one. Without groups, any GPUs.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    /// # let dir = std::env::temp_dir().join(format!("gtp-doc-groups-{}", std::process::id()));
    /// let pool = PermitPool::builder()
    ///     .concurrency(1)
    ///     .gpus(4)
    ///     .gpu_groups(vec![vec![0, 1], vec![2, 3]])
    ///     .slot_dir(&dir)
    ///     .build()?;
    /// let pair = pool.request().gpus(2).acquire();
    /// assert!(pair.devices() == [0, 1] || pair.devices() == [2, 3]);
    /// assert!(pool.request().gpus(3).try_acquire().is_err()); // no group has 3
    /// # drop(pair); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn gpu_groups(mut self, groups: Vec<Vec<usize>>) -> Self {
        self.groups = groups;
        self
    }

    /// How requests are placed on the GPUs ([`Placement::BestFit`] by default; for the global
    /// pool, `GPU_TEST_PERMIT_PLACEMENT`).
    ///
    /// ```
    /// use gpu_test_permit::{config::Placement, PermitPool};
    ///
    /// let pool = PermitPool::builder().gpus(2).placement(Placement::Spread).in_process_only().build()?;
    /// assert_eq!(pool.gpus(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// Whether a permit that declares memory ([`PermitRequest::memory`](crate::PermitRequest::memory))
    /// is granted only when its GPU has that much free now, as NVML reports it, less what the
    /// other holders on that GPU declared and have not yet allocated, plus
    /// [`LIVE_MARGIN`](crate::host::LIVE_MARGIN) (off by default for a built pool; the global
    /// pool follows `GPU_TEST_PERMIT_LIVE_MEMORY`, on by default). NVML is loaded at the first
    /// such request, where the driver provides `libnvidia-ml.so.1`; without it, or for a pool
    /// without host slots, declarations count against the budget alone. Device k is CUDA
    /// ordinal k of this process.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).memory_budget(16 << 30).live_memory(false).in_process_only().build()?;
    /// // The declaration counts against the budget alone, whatever NVML says.
    /// assert_eq!(pool.acquire_memory(8 << 30).units(), 1);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn live_memory(mut self, on: bool) -> Self {
        self.live_memory = on;
        self
    }

    /// Whether a request waiting behind the head of the queue may take free units past it
    /// where the hold times on record (the history's `gpu0.tests`) say that does not delay the
    /// head (on by default; the global pool follows `GPU_TEST_PERMIT_BACKFILL`). Off: first
    /// come, first served. Only the order changes: the cap is the same either way.
    ///
    /// ```
    /// let pool = gpu_test_permit::PermitPool::builder()
    ///     .concurrency(8)
    ///     .backfill(false)
    ///     .in_process_only()
    ///     .build()
    ///     .unwrap();
    /// let _permit = pool.acquire();
    /// ```
    pub fn backfill(mut self, on: bool) -> Self {
        self.backfill = on;
        self
    }

    pub(super) fn capacity(&self) -> usize {
        self.concurrency
            .checked_mul(self.gpus)
            .expect("gpu-test-permit: permits x GPUs overflows")
    }

    /// Keeps host slots in `dir` (shared with every process using the same directory).
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let dir = std::env::temp_dir().join(format!("gtp-doc-slot-dir-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).slot_dir(&dir).build()?;
    /// assert_eq!(pool.slot_dir(), Some(dir.as_path()));
    /// # drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn slot_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.slot_dir = Some(SlotDir::Explicit(dir.as_ref().to_path_buf()));
        self
    }

    /// Limits this process only: no host slots. Other processes are not counted.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// assert_eq!(pool.slot_dir(), None); // other processes are not counted
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn in_process_only(mut self) -> Self {
        self.slot_dir = None;
        self
    }

    /// The deadline of [`PermitPool::acquire`] and [`PermitPool::acquire_exclusive`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).timeout(Duration::from_secs(120)).in_process_only().build()?;
    /// assert_eq!(pool.timeout(), Duration::from_secs(120));
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The hold deadline: a permit of this pool held longer than `deadline` makes the process
    /// print what is known (holders, since when, the N in force) and abort, so that a test
    /// stuck in a wedged driver fails the run instead of hanging it
    /// (`GPU_TEST_PERMIT_HOLD_TIMEOUT` for the global pool; off by default). A process that
    /// ends the holder its own way sets a handler instead: [`on_hold_timeout`](crate::on_hold_timeout).
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).hold_timeout(Duration::from_secs(900)).in_process_only().build()?;
    /// // A permit held for 15 minutes is a wedged test: see `on_hold_timeout` for what happens then.
    /// let _permit = pool.acquire();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).memory_budget(80 << 30).in_process_only().build()?;
    /// assert_eq!(pool.acquire_memory(20 << 30).units(), 1);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        assert!(bytes >= 1, "a memory budget is at least one byte");
        self.memory_budget = Some(crate::config::MemoryBudget::Bytes(bytes));
        self
    }

    /// Whose word sets the units of a request that declares nothing (one unit, not
    /// exclusive, no memory): [`Weights::Declared`] (the default: one unit) or
    /// [`Weights::Learned`]: with a [memory budget](Self::memory_budget) and a slot directory,
    /// the units of the most memory the running test was measured to use in the runs recorded
    /// in that directory's history, plus
    /// [`LEARNED_MARGIN_PERCENT`](crate::config::LEARNED_MARGIN_PERCENT), at most a whole GPU
    /// (`GPU_TEST_PERMIT_WEIGHTS` for the global pool). A request that declares units, memory
    /// or exclusivity takes what it declares.
    ///
    /// ```
    /// use gpu_test_permit::{config::Weights, PermitPool};
    ///
    /// let pool = PermitPool::builder().weights(Weights::Declared).in_process_only().build()?;
    /// assert_eq!(pool.acquire().units(), 1);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn weights(mut self, weights: Weights) -> Self {
        self.weights = weights;
        self
    }

    /// Appends wait and hold spans to `path` (see [`trace`](crate::trace)).
    ///
    /// ```
    /// use gpu_test_permit::{trace::read_events, PermitPool};
    ///
    /// let path = std::env::temp_dir().join(format!("gtp-doc-trace-{}.json", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).trace(&path).in_process_only().build()?;
    /// drop(pool.acquire());
    /// let events = read_events(&path).unwrap();
    /// assert!(events.iter().any(|e| e.name == "hold"));
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn trace(mut self, path: impl AsRef<Path>) -> Self {
        self.trace = Some(path.as_ref().to_path_buf());
        self
    }

    /// Creates the pool. Opening the slot directory happens here (checking it, agreeing on its
    /// layout, reserving the descriptors its files need); if it fails, the error is returned.
    /// Each slot's own file is opened at the slot's first use, so a slot file that cannot be
    /// used (a FIFO planted at its name, say) fails the acquisition that meets it, with
    /// [`AcquireError::Host`](crate::AcquireError::Host).
    ///
    /// # Errors
    ///
    /// [`HostError`] when the slot directory is unusable or insecure.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// assert_eq!(pool.capacity(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn build(mut self) -> Result<PermitPool, HostError> {
        let wanted = Layout {
            per_gpu: self.concurrency,
            gpus: self.gpus,
        };
        let mut chosen = None;
        let host = match &self.slot_dir {
            None => None,
            Some(dir) => {
                let dir = dir.path().map_err(HostError::Directory)?;
                let auto_run = if self.auto { observe::run_id() } else { None };
                match auto_run {
                    Some(run) => {
                        let (host, choice) = open_auto(&dir, self.gpus, run, self.timeout)?;
                        chosen = choice;
                        Some(host)
                    }
                    None => {
                        let host = HostSlots::open(&dir, wanted, self.timeout)?;
                        // Under nextest, the run's first process learns the hold times of the
                        // runs before it (`auto` does as it chooses), before any permit.
                        if let Some(run) = observe::run_id() {
                            crate::tune::learn_before_run(&dir, run);
                        }
                        Some(host)
                    }
                }
            }
        };
        // Processes sharing a directory share its layout (see `host`).
        if let Some(host) = &host {
            let layout = host.layout();
            self.concurrency = layout.per_gpu;
            self.gpus = layout.gpus;
        }
        let pool = self.finish(host, None, None);
        if let Some(choice) = chosen {
            pool.inner()
                .observers
                .chose(&choice.to_string(), choice.per_gpu, pool.gpus());
        }
        Ok(pool)
    }

    pub(super) fn finish(
        self,
        host: Option<HostSlots>,
        host_error: Option<HostError>,
        inherited: Option<Inherited>,
    ) -> PermitPool {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // A pool whose every acquisition fails with `host_error` never seats a permit: it
        // gets none, however large the layout that was refused (a layout refused for want of
        // descriptors may be a million units).
        let seats = if host_error.is_some() {
            0
        } else {
            self.capacity()
        };
        // Inside an inherited permit, whoever passed it on weighed the command.
        let learned = match (&host, &inherited) {
            (Some(host), None) if self.weights == Weights::Learned => {
                Some(Learned::new(host.dir().to_path_buf()))
            }
            _ => None,
        };
        // A layout another user set that raises this process's N or GPUs is declined: its
        // permits hold to what it asked for (see `HostSlots::declined`).
        let declined = match (&host, &inherited) {
            (Some(host), None) => host.declined(),
            _ => None,
        };
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Threads waiting in this pool are published beside the host's wait files.
        let published = host
            .as_ref()
            .map(|h| crate::host::ThreadsFile::new(h.dir(), id));
        let observers = Observers::new(observe::Pool {
            trace: self.trace.as_deref(),
            records: self.auto || learned.is_some(),
            inherited: inherited.is_some(),
            host: host.is_some(),
            hold_timeout: self.hold_timeout,
            capacity: self.capacity(),
            layout: Layout {
                per_gpu: self.concurrency,
                gpus: self.gpus,
            },
            named: named(
                Layout {
                    per_gpu: self.concurrency,
                    gpus: self.gpus,
                },
                host.as_ref(),
                inherited.as_ref(),
            ),
        });
        PermitPool {
            inner: NonNull::from(Box::leak(Box::new(PoolInner {
                local: LocalPool::publishing(self.capacity(), published),
                seats: new_seats(seats),
                holders: Holders::new(id),
                gpus: self.gpus,
                per_gpu: self.concurrency,
                pad: match declined {
                    Some(own) => self.concurrency - own.per_gpu,
                    None => 0,
                },
                topology: match (&inherited, declined) {
                    (Some(i), _) => Topology::flat(i.gpus()),
                    // Its GPUs, not the directory's others.
                    (None, Some(own)) if self.groups.is_empty() => Topology::flat(own.gpus),
                    (None, Some(own)) => Topology::grouped(own.gpus, &self.groups),
                    (None, None) if self.groups.is_empty() => Topology::flat(self.gpus),
                    (None, None) => Topology::grouped(self.gpus, &self.groups),
                },
                placement: self.placement,
                live: match (&host, &inherited) {
                    (Some(_), None) if self.live_memory => Some(match &self.gpu_ids {
                        Some(ids) if ids.len() >= self.gpus => ids.clone(),
                        _ => (0..self.gpus).collect(),
                    }),
                    _ => None,
                },
                backfill: self.backfill,
                host,
                host_error,
                timeout: self.timeout,
                observers,
                inherited,
                budget_source: self.memory_budget,
                budget: OnceLock::new(),
                probe_budget: self.probe_budget,
                learned,
            }))),
        }
    }
}

/// The N (with the GPUs) and the slot directory that records and messages of a pool of
/// `layout` name. Inside a permit inherited from `run`, those of the permit passed on and of
/// the outermost slot directory: the processes inside share a part of the host's units through
/// a directory of their own, whose N (the units `run` holds) is no N of the host, and which
/// neither `history` nor `auto` reads.
fn named(
    layout: Layout,
    host: Option<&HostSlots>,
    inherited: Option<&Inherited>,
) -> (Layout, Option<PathBuf>) {
    match inherited {
        Some(inherited) => (
            Layout {
                per_gpu: inherited.permit.per_gpu,
                gpus: inherited.permit.gpus,
            },
            Some(crate::host::outermost_dir(&inherited.permit.dir)),
        ),
        None => (layout, host.map(|h| h.dir().to_path_buf())),
    }
}

/// `n` free seats.
fn new_seats(n: usize) -> Box<[Seat]> {
    let mut seats = Vec::with_capacity(n);
    for _ in 0..n {
        seats.push(Seat::new());
    }
    seats.into_boxed_slice()
}

/// Opens the slots of `dir` with the N `auto` chooses for run `run`, and says the choice when
/// this process made it (and returns it, for the trace).
fn open_auto(
    dir: &Path,
    gpus: usize,
    run: &str,
    patience: std::time::Duration,
) -> Result<(HostSlots, Option<crate::tune::Choice>), HostError> {
    let mut choice = None;
    let key = observe::run_key(run);
    let (host, chose) = HostSlots::open_auto(
        dir,
        gpus,
        &key,
        || {
            let c = crate::tune::choose_now(dir, gpus, Some(run));
            let n = c.per_gpu;
            choice = Some(c);
            n
        },
        patience,
    )?;
    match (chose, choice) {
        (Some(layout), Some(mut c)) => {
            c.per_gpu = layout.per_gpu;
            crate::tune::announce(dir, run, gpus, &c);
            Ok((host, Some(c)))
        }
        _ => Ok((host, None)),
    }
}

impl PermitPool {
    /// A builder with the defaults: N = 2, the default slot directory, a 10-minute deadline.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// assert_eq!(pool.concurrency(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
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
            auto: false,
            weights: Weights::Declared,
            groups: Vec::new(),
            placement: Placement::BestFit,
            live_memory: false,
            backfill: true,
            gpu_ids: None,
        }
    }
}
