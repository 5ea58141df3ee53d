//! What a request asks for ([`PermitRequest`], the fixtures' `GpuNeed`), and why one can be
//! refused before it waits.

use std::time::{Duration, Instant};

use super::error::AcquireError;
use super::guard::GpuTestPermit;
use super::local::Deadline;
use super::pool::PermitPool;
use super::want::Want;

/// A permit request being built: see [`PermitPool::request`].
///
/// ```
/// use gpu_test_permit::PermitPool;
///
/// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
/// let heavy = pool.request().units(3).acquire();
/// assert_eq!(heavy.units(), 3);
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use = "a request does nothing until acquired"]
pub struct PermitRequest<'p> {
    pub(super) pool: &'p PermitPool,
    pub(super) want: Want,
}

impl PermitRequest<'_> {
    /// Asks for `units` of one GPU's N units (1 by default): a test that needs the GPU of k
    /// ordinary tests counts as k. All units come from one GPU. With a declared
    /// [`memory`](Self::memory) as well, the larger of the two counts.
    ///
    /// # Panics
    ///
    /// If `units` is 0.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// assert_eq!(pool.request().units(3).acquire().units(), 3);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn units(mut self, units: usize) -> Self {
        assert!(units >= 1, "a permit holds at least one unit");
        self.want.units = units;
        self
    }

    /// Asks for `gpus` distinct GPUs (1 by default), each with the request's
    /// [`units`](Self::units) or [`memory`](Self::memory): a collective or pipeline test that
    /// needs several GPUs at once. All of them are taken at once, or none, across processes too,
    /// and within one group of `GPU_TEST_PERMIT_GPUS` where it names groups. The permit's
    /// [`devices`](GpuTestPermit::devices) are the GPUs.
    ///
    /// A request for more GPUs than the pool (or its largest group) has fails at once with
    /// [`AcquireError::TooManyGpus`].
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    /// # let dir = std::env::temp_dir().join(format!("gtp-doc-gpus-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).gpus(4).slot_dir(&dir).build()?;
    /// let pair = pool.request().gpus(2).acquire();
    /// assert_eq!(pair.devices().len(), 2);
    /// assert!(pool.request().gpus(5).try_acquire().is_err());
    /// # drop(pair); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    ///
    /// # Panics
    ///
    /// If `gpus` is 0.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let dir = std::env::temp_dir().join(format!("gtp-doc-request-gpus-{}", std::process::id()));
    /// let pool = PermitPool::builder().concurrency(2).gpus(4).slot_dir(&dir).build()?;
    /// let permit = pool.request().gpus(2).units(2).acquire(); // both units of 2 GPUs
    /// assert_eq!(permit.devices().len(), 2);
    /// # drop(permit); drop(pool); std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn gpus(mut self, gpus: usize) -> Self {
        assert!(gpus >= 1, "a permit is for at least one GPU");
        self.want.gpus = gpus;
        self
    }

    /// Declares the GPU memory the test needs: it takes `ceil(bytes / (budget / N))` units,
    /// where the budget is one GPU's (`GPU_TEST_PERMIT_GPU_MEMORY`,
    /// [`PoolBuilder::memory_budget`](crate::PoolBuilder::memory_budget), or the device memory the CUDA probe reports). Without a
    /// known budget the request takes one unit, and the process says so once.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).memory_budget(16 << 30).in_process_only().build()?;
    /// let permit = pool.request().memory(8 << 30).acquire();
    /// assert_eq!((permit.memory(), permit.units()), (Some(8 << 30), 2));
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn memory(mut self, bytes: u64) -> Self {
        self.want.memory = Some(bytes);
        self
    }

    /// Asks for every unit of every GPU: nothing else runs on the GPU while it is held.
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// assert!(pool.request().exclusive().acquire().is_exclusive());
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let permit = pool.request().units(2).acquire();
    /// assert_eq!(permit.units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire(self) -> GpuTestPermit {
        self.pool.acquire_or_panic(self.want)
    }

    /// Takes the permit only if its units are free now.
    ///
    /// # Errors
    ///
    /// [`AcquireError::WouldBlock`] when they are not, and the others of [`AcquireError`].
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let held = pool.request().units(2).acquire();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| assert!(pool.request().try_acquire().is_err(), "nothing free"));
    /// });
    /// drop(held);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn try_acquire(self) -> Result<GpuTestPermit, AcquireError> {
        self.pool.acquire_inner(self.want, Deadline::Now)
    }

    /// Takes the permit, waiting at most `timeout`.
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
    /// let permit = pool.request().units(2).acquire_for(Duration::from_secs(1)).expect("free");
    /// assert_eq!(permit.units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_for(self, timeout: Duration) -> Result<GpuTestPermit, AcquireError> {
        self.pool.acquire_inner(self.want, Deadline::After(timeout))
    }

    /// Takes the permit, waiting until `deadline` (`None`: no deadline; use with care).
    ///
    /// # Errors
    ///
    /// See [`AcquireError`].
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
    /// let deadline = Some(Instant::now() + Duration::from_secs(1)); // `None`: the pool's timeout
    /// assert!(pool.request().acquire_until(deadline).is_ok());
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn acquire_until(self, deadline: Option<Instant>) -> Result<GpuTestPermit, AcquireError> {
        self.pool
            .acquire_inner(self.want, Deadline::until(deadline))
    }
}

impl PermitPool {
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
    ///
    /// ```
    /// use gpu_test_permit::PermitPool;
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let permit = pool.request().units(2).acquire();
    /// assert_eq!(permit.units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn request(&self) -> PermitRequest<'_> {
        self.request_for(Want::ONE)
    }

    /// A request for `want`, built elsewhere (the fixtures' `GpuNeed`).
    pub(crate) fn request_for(&self, want: Want) -> PermitRequest<'_> {
        PermitRequest { pool: self, want }
    }
}
