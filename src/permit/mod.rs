//! GPU test permits: a counting semaphore per GPU host, reentrant per thread, held by RAII guards.
//!
//! Files, top to bottom (each uses only those below it):
//!
//! | file | what |
//! |---|---|
//! | `global`, `builder`, `request` | constructors: the process-wide pool from the environment, [`PoolBuilder`], [`PermitRequest`] |
//! | `pool` | [`PermitPool`]'s public face and the acquisition paths: nested, checked, new |
//! | `guard` | [`GpuTestPermit`] and [`EnteredPermit`]; the how-it-works of seats, guards and freeing the pool |
//! | `diagnosis` | who was in the way when a wait timed out |
//! | `inner` | the shared state every guard points at; claiming a seat, releasing a permit |
//! | `holder` | who holds a permit, by one key: a thread (reentrancy) or a test (a learned permit its threads share); joining it |
//! | `seat`, `budget`, `local`, `inherited`, `watchdog` | a permit's state, memory to units, the in-process FIFO semaphore, a parent's permit, the hold deadline |
//! | `learned` | learned weights: a test's measured peak memory to units (`GPU_TEST_PERMIT_WEIGHTS=learned`) |
//! | `observe` | what watches permits come and go (run records, trace, watchdog, tally, nextest's hint, the driver watch), told at named points with plain values; it cannot reach the slots |
//! | `error`, `want` | why a permit could not be had; what a request asks for |
//!
//! A request flows down: `pool` checks it (`want`, `budget`), serves it nested from a seat
//! this thread holds, or takes a new permit in the protocol's steps: shapes it, waits in
//! `local` and then at the host slots of [`crate::host`], claims a seat in `inner` and returns
//! a guard; the last guard's drop returns the seat, the host slots and the units through
//! `inner`. Both paths tell `observe` what happened, and only `observe` tells the records,
//! the trace, the watchdog and the rest.

mod budget;
mod builder;
mod diagnosis;
mod error;
mod global;
mod guard;
mod holder;
mod inherited;
mod inner;
mod learned;
mod local;
mod observe;
mod pool;
mod request;
mod seat;
mod want;
mod watchdog;

use std::time::Duration;

pub use builder::PoolBuilder;
pub use error::{AcquireError, Holder, WaitTimeout, Waiter};
pub use guard::{EnteredPermit, GpuTestPermit};
pub use pool::PermitPool;
pub use request::PermitRequest;
pub use want::PermitKind;
pub(crate) use want::Want;
pub use watchdog::{HoldTimeout, on_hold_timeout};

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
#[inline]
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

/// Takes a permit of `units` of one GPU's N units from the [global pool](PermitPool::global):
/// a test that needs as much of the GPU as k ordinary tests counts as k, so that N can be set
/// for the ordinary tests instead of the largest one. All units come from one GPU, and are
/// taken at once or not at all, across processes too; requests are served in arrival order,
/// so a heavy request is not starved by light ones.
///
/// A thread holding a permit of at least `units` units gets a nested guard at once.
///
/// # Panics
///
/// As [`acquire`]; and when `units` is more than a GPU has (N), and when the thread holds a
/// permit of fewer units (it would wait for itself).
///
/// # Examples
///
/// ```standalone_crate
/// // Half of a GPU shared by N = 4 ordinary tests.
/// # // SAFETY: the example's process has one thread at this point.
/// # unsafe { std::env::set_var("REALIZAR_GPU_TEST_CONCURRENCY", "4") };
/// # let dir = std::env::temp_dir().join(format!("gtp-doc-acquire-weighted-{}", std::process::id()));
/// # unsafe { std::env::set_var("GPU_TEST_PERMIT_DIR", &dir) };
/// let heavy = gpu_test_permit::acquire_weighted(2);
/// assert_eq!(heavy.units(), 2);
/// # drop(heavy); std::fs::remove_dir_all(&dir).ok();
/// ```
pub fn acquire_weighted(units: usize) -> GpuTestPermit {
    PermitPool::global().acquire_weighted(units)
}

/// Takes a permit on `gpus` distinct GPUs at once from the [global pool](PermitPool::global),
/// one unit on each, waiting as [`acquire`] does: for a test that needs several GPUs (a
/// collective, a pipeline). Its [`devices`](GpuTestPermit::devices) are the GPUs; a process it
/// starts sees exactly those through [`devices::export_devices`](crate::devices::export_devices)
/// (`gpu-test-permit run --gpus K` does it). More units or memory on each:
/// `PermitPool::global().request().gpus(k).units(u)`.
///
/// The global pool spans the GPUs of `GPU_TEST_PERMIT_GPUS` (by default the CUDA devices the
/// probe finds); groups there (`0,1,2,3;4,5,6,7`) keep a permit within one.
///
/// # Panics
///
/// As [`acquire`], and when `gpus` is more than the pool (or its largest group) has, which
/// could never be served.
///
/// # Examples
///
/// The same request on a pool of its own ([`PermitPool::acquire_gpus`]):
///
/// ```
/// use gpu_test_permit::PermitPool;
/// # let dir = std::env::temp_dir().join(format!("gtp-doc-fn-acquire-gpus-{}", std::process::id()));
/// let pool = PermitPool::builder().gpus(8).slot_dir(&dir).build()?;
/// let four = pool.acquire_gpus(4);
/// assert_eq!(four.devices().len(), 4);
/// # drop(four); drop(pool); std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), gpu_test_permit::host::HostError>(())
/// ```
pub fn acquire_gpus(gpus: usize) -> GpuTestPermit {
    PermitPool::global().acquire_gpus(gpus)
}

/// Takes a permit for a test that needs `bytes` of GPU memory from the
/// [global pool](PermitPool::global): it holds `ceil(bytes / (budget / N))` of its GPU's N
/// units, where the budget is `GPU_TEST_PERMIT_GPU_MEMORY` (a size, or a percentage of the
/// device memory) or, unset, the device memory the CUDA probe reports on discrete GPUs. N
/// still caps the number of tests; memory only makes big tests count as several.
///
/// Without a known budget (no variable, no CUDA device), the permit holds one unit and the
/// process says so once.
///
/// # Panics
///
/// As [`acquire_weighted`], and when `bytes` is more than one GPU's budget.
///
/// # Examples
///
/// ```standalone_crate
/// # // SAFETY: the example's process has one thread at this point.
/// # unsafe { std::env::set_var("REALIZAR_GPU_TEST_CONCURRENCY", "4") };
/// # let dir = std::env::temp_dir().join(format!("gtp-doc-acquire-memory-{}", std::process::id()));
/// # unsafe { std::env::set_var("GPU_TEST_PERMIT_DIR", &dir) };
/// # unsafe { std::env::set_var("GPU_TEST_PERMIT_GPU_MEMORY", "16GiB") };
/// // In a test: units of the global pool's budget.
/// let permit = gpu_test_permit::acquire_memory(6 << 30);
/// assert_eq!(permit.memory(), Some(6 << 30));
/// # drop(permit);
///
/// // The arithmetic, on a pool of the example's own (the global pool's N and budget come
/// // from the environment of the process, which an earlier example may have set up first):
/// // N = 4 on a 16 GiB budget makes units of 4 GiB, and 6 GiB takes two of them.
/// let pool = gpu_test_permit::PermitPool::builder()
///     .concurrency(4)
///     .memory_budget(16 << 30)
///     .in_process_only()
///     .build()?;
/// assert_eq!(pool.acquire_memory(6 << 30).units(), 2);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn acquire_memory(bytes: u64) -> GpuTestPermit {
    PermitPool::global().acquire_memory(bytes)
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
