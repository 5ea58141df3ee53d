//! Ready GPU fixtures: a permit, the probe's verdict and the GPU objects in one value that
//! drops the GPU objects before the permit. The backends are [`crate::wgpu`] and
//! [`crate::cuda`]; [`Permitted`](crate::Permitted) does the same for your own types.
//!
//! A fixture's permit is one unit of its GPU unless the test says it needs more
//! ([`GpuNeed`]: `units = K`, `memory = BYTES` or `exclusive` in the fixture macros). Where the
//! backend can measure what the test used, the fixture records it on the permit
//! ([`GpuTestPermit::record_memory_used`]) before the permit is returned: see `memory`.

use std::fmt;
use std::time::Duration;

use crate::permit::Want;
use crate::{GpuTestPermit, PermitPool};

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
pub(crate) mod memory;
#[cfg(feature = "cuda")]
mod nvml;
#[cfg(feature = "wgpu")]
pub(crate) mod wgpu;

/// How much of a GPU a fixture's permit holds: one unit by default, `k` units of the GPU's N,
/// enough units for a declared amount of memory, or the whole pool. The fixture macros build
/// it from their arguments (`device_or_skip!(units = 2)`, `context_or_skip!(memory = 8 << 30)`,
/// `device_or_skip!(exclusive)`); the fixture functions (`wgpu::device_for`,
/// `cuda::context_for`) take it as a value.
///
/// Units and memory are those of [`PermitPool::request`]: `units(k)` needs `k <= N`, `memory`
/// is converted to `ceil(bytes / (budget / N))` units of the budget `GPU_TEST_PERMIT_GPU_MEMORY`
/// sets (one unit, with a notice, when no budget is known), and with both the larger counts.
///
/// # Examples
///
/// ```
/// use gpu_test_permit::GpuNeed;
///
/// let light = GpuNeed::default();
/// let heavy = GpuNeed::default().units(2);
/// let big = GpuNeed::default().memory(6 << 30);
/// let whole = GpuNeed::default().exclusive();
/// assert_eq!((light.units_asked(), heavy.units_asked()), (1, 2));
/// assert_eq!(big.memory_declared(), Some(6 << 30));
/// assert!(whole.is_exclusive() && !big.is_exclusive());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub struct GpuNeed(Want);

impl Default for GpuNeed {
    /// One unit: an ordinary test.
    fn default() -> Self {
        GpuNeed(Want::ONE)
    }
}

impl GpuNeed {
    /// Asks for `units` of the GPU's N units ([`PermitRequest::units`](crate::PermitRequest::units)).
    ///
    /// # Panics
    ///
    /// If `units` is 0.
    pub fn units(mut self, units: usize) -> Self {
        assert!(units >= 1, "a permit holds at least one unit");
        self.0.units = units;
        self
    }

    /// Declares the GPU memory the test needs, in bytes
    /// ([`PermitRequest::memory`](crate::PermitRequest::memory)).
    pub fn memory(mut self, bytes: u64) -> Self {
        self.0.memory = Some(bytes);
        self
    }

    /// Asks for every unit of every GPU of the pool: nothing else runs on the GPU meanwhile.
    pub fn exclusive(mut self) -> Self {
        self.0.exclusive = true;
        self
    }

    /// The units asked for (1 unless [`units`](Self::units) set more).
    pub fn units_asked(&self) -> usize {
        self.0.units
    }

    /// The memory declared, in bytes.
    pub fn memory_declared(&self) -> Option<u64> {
        self.0.memory
    }

    /// Whether the whole pool is asked for.
    pub fn is_exclusive(&self) -> bool {
        self.0.exclusive
    }

    /// Takes the permit from the global pool, waiting up to its deadline. A request that can
    /// never be served, a wait past the deadline and an unusable slot directory are failures
    /// of the test, with the pool's message.
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
    pub(crate) fn acquire(self) -> Result<GpuTestPermit, FixtureError> {
        let pool = PermitPool::global();
        pool.request_for(self.0)
            .acquire_for(pool.timeout())
            .map_err(|e| FixtureError::Fail(e.to_string()))
    }
}

/// How often a fixture's memory use is sampled while it lives (see `memory`).
pub(crate) const MEMORY_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Why a fixture was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FixtureError {
    /// The backend has no device here and is not required: the test should skip.
    Skip(String),
    /// The test must fail: the backend is required but missing or broken, or the probe found a
    /// device but the fixture could not be created on it.
    Fail(String),
}

impl FixtureError {
    /// Whether the test should skip rather than fail.
    pub fn is_skip(&self) -> bool {
        matches!(self, FixtureError::Skip(_))
    }
}

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixtureError::Skip(r) => write!(f, "skipped: {r}"),
            FixtureError::Fail(r) => f.write_str(r),
        }
    }
}

impl std::error::Error for FixtureError {}

/// `Ok` when `backend`'s tests should run here, else the skip or failure the decision gives.
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
pub(crate) fn should_run(backend: crate::probe::Backend) -> Result<(), FixtureError> {
    match crate::decision::check(backend) {
        crate::decision::Decision::Run => Ok(()),
        crate::decision::Decision::Skip(r) => Err(FixtureError::Skip(r)),
        crate::decision::Decision::Fail(r) => Err(FixtureError::Fail(r)),
    }
}

/// The body of the `*_or_skip!` fixture macros: the fixture, or a reported skip and an early
/// `return $on_skip`, or a panic with the reason.
#[macro_export]
#[doc(hidden)]
macro_rules! __fixture_or_skip {
    ($make:expr, $backend:ident, $on_skip:expr) => {
        match $make {
            ::std::result::Result::Ok(gpu) => gpu,
            ::std::result::Result::Err($crate::FixtureError::Skip(reason)) => {
                $crate::decision::report_skip($crate::probe::Backend::$backend, &reason);
                return $on_skip;
            }
            ::std::result::Result::Err(e) => ::std::panic!(
                "gpu-test-permit: FAIL backend={}: {}",
                $crate::probe::Backend::$backend,
                e
            ),
        }
    };
}

/// The arguments of the `*_or_skip!` fixture macros after the first: `units = K`,
/// `memory = BYTES`, `exclusive` and `on_skip = VALUE`, separated by commas, in any order.
/// Collects them into a [`GpuNeed`] and the value to return on a skip, then expands to
/// [`__fixture_or_skip!`] over `$make(need)`.
#[macro_export]
#[doc(hidden)]
macro_rules! __fixture_args {
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; $(,)?) => {
        $crate::__fixture_or_skip!($make($need), $backend, $on_skip)
    };
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; units = $k:expr $(, $($rest:tt)*)?) => {
        $crate::__fixture_args!(@go $make, $backend, $need.units($k), $on_skip; $($($rest)*)?)
    };
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; memory = $b:expr $(, $($rest:tt)*)?) => {
        $crate::__fixture_args!(@go $make, $backend, $need.memory($b), $on_skip; $($($rest)*)?)
    };
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; exclusive $(, $($rest:tt)*)?) => {
        $crate::__fixture_args!(@go $make, $backend, $need.exclusive(), $on_skip; $($($rest)*)?)
    };
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; on_skip = $v:expr $(, $($rest:tt)*)?) => {
        $crate::__fixture_args!(@go $make, $backend, $need, $v; $($($rest)*)?)
    };
    (@go $make:path, $backend:ident, $need:expr, $on_skip:expr; $($other:tt)+) => {
        ::std::compile_error!(::std::concat!(
            "expected `units = K`, `memory = BYTES`, `exclusive` or `on_skip = VALUE`, found `",
            ::std::stringify!($($other)+),
            "`"
        ))
    };
}

/// Which of several equally good devices a permit should use, before taking it modulo the
/// caller's device count: the permit's own [`device`](GpuTestPermit::device) (its host slot
/// modulo the GPUs the pool spans, so the per-GPU cap holds across every process that shares
/// the slots); without one (an exclusive permit, a pool without host slots), nextest's group
/// slot when the test runs in a group, else 0.
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
pub(crate) fn slot_hint(permit: &GpuTestPermit) -> usize {
    permit.device().unwrap_or_else(|| {
        crate::nextest::current()
            .and_then(|n| n.group_slot)
            .map_or(0, |s| s as usize)
    })
}
