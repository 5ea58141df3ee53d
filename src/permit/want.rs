//! What a request asks for ([`Want`]: units, exclusive, memory; [`PermitKind`]), and why one
//! can be refused before it waits ([`Refused`]). A leaf: the pool, the guards and the errors
//! all speak it.

/// Whether a permit is one of N or all of them.
///
/// ```
/// use gpu_test_permit::{PermitKind, PermitPool};
///
/// let pool = PermitPool::builder().concurrency(2).in_process_only().build()?;
/// assert_eq!(pool.acquire().kind(), PermitKind::Shared);
/// let all = pool.acquire_exclusive();
/// assert_eq!((all.kind(), all.units()), (PermitKind::Exclusive, 2));
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermitKind {
    /// One of the pool's N permits.
    Shared,
    /// All N permits at once.
    Exclusive,
}

/// What a request asks for ([`PermitRequest`], and the fixtures' `GpuNeed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Want {
    /// Units on each GPU (ignored when exclusive).
    pub(crate) units: usize,
    /// GPUs, distinct (ignored when exclusive).
    pub(crate) gpus: usize,
    pub(crate) exclusive: bool,
    /// Declared GPU memory, bytes.
    pub(crate) memory: Option<u64>,
}

impl Want {
    pub(crate) const ONE: Want = Want {
        units: 1,
        gpus: 1,
        exclusive: false,
        memory: None,
    };
    pub(super) const EXCLUSIVE: Want = Want {
        units: 1,
        gpus: 1,
        exclusive: true,
        memory: None,
    };

    pub(super) fn of(kind: PermitKind) -> Want {
        match kind {
            PermitKind::Shared => Want::ONE,
            PermitKind::Exclusive => Want::EXCLUSIVE,
        }
    }

    /// Units the request takes from a pool of `capacity`: all of them when exclusive, else
    /// its units on each of its GPUs.
    pub(super) fn held_units(&self, capacity: usize) -> usize {
        if self.exclusive {
            capacity
        } else {
            self.units.saturating_mul(self.gpus)
        }
    }

    pub(super) fn kind(&self) -> PermitKind {
        if self.exclusive {
            PermitKind::Exclusive
        } else {
            PermitKind::Shared
        }
    }
}

/// Why `PermitPool::resolve` refused a request: small, so that the check's result stays in
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
    Gpus {
        asked: usize,
        widest: usize,
        gpus: usize,
        inherited: bool,
    },
}
