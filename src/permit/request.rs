//! What a request asks for ([`PermitRequest`], the fixtures' `GpuNeed`), and why one can be
//! refused before it waits.

use std::time::{Duration, Instant};

use super::local::Deadline;
use super::pool::PermitPool;
use super::{AcquireError, GpuTestPermit, PermitKind};

/// Why [`PermitPool::resolve`] refused a request: small, so that the check's result stays in
/// registers; the error is made from it only when a request is refused.
#[derive(Clone, Copy, Debug)]
pub(super) enum Refused {
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
    pub(super) const EXCLUSIVE: Want = Want {
        units: 1,
        exclusive: true,
        memory: None,
    };

    pub(super) fn of(kind: PermitKind) -> Want {
        match kind {
            PermitKind::Shared => Want::ONE,
            PermitKind::Exclusive => Want::EXCLUSIVE,
        }
    }

    /// Units the request takes from a pool of `capacity`: all of them when exclusive.
    pub(super) fn held_units(&self, capacity: usize) -> usize {
        if self.exclusive { capacity } else { self.units }
    }

    pub(super) fn kind(&self) -> PermitKind {
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
    pub fn units(mut self, units: usize) -> Self {
        assert!(units >= 1, "a permit holds at least one unit");
        self.want.units = units;
        self
    }

    /// Declares the GPU memory the test needs: it takes `ceil(bytes / (budget / N))` units,
    /// where the budget is one GPU's (`GPU_TEST_PERMIT_GPU_MEMORY`,
    /// [`PoolBuilder::memory_budget`](crate::PoolBuilder::memory_budget), or the device memory the CUDA probe reports). Without a
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
