//! Ready GPU fixtures: a permit, the probe's verdict and the GPU objects in one value that
//! drops the GPU objects before the permit. The backends are [`crate::wgpu`] and
//! [`crate::cuda`]; [`Permitted`](crate::Permitted) does the same for your own types.

use std::fmt;

use crate::GpuTestPermit;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(feature = "wgpu")]
pub(crate) mod wgpu;

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
