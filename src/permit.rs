//! GPU test permits: a counting semaphore per GPU host, reentrant per thread, held by RAII guards.
//!
//! - [`pool`](PermitPool): the pool, its builder and the acquisition paths (in process, then
//!   the host slots of [`crate::host`]);
//! - `seat`: where a held permit keeps its state, the guards and the unsafe code that frees a
//!   pool only after its last permit is back;
//! - `local`: the in-process FIFO semaphore;
//! - `error`: why a permit could not be had, and who was in the way.

mod error;
mod local;
mod pool;
mod seat;
mod watchdog;

use std::time::Duration;

pub use error::{AcquireError, Holder, WaitTimeout, Waiter};
pub use pool::{PermitPool, PoolBuilder};
pub use seat::{EnteredPermit, GpuTestPermit};

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
