//! The records: one JSON object a line, each with its run id, its time and its process.

use serde::{Deserialize, Serialize};

/// One line of a run's record file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunRecord {
    /// A test skipped: its backend had no device and was not required.
    Skip(SkipRecord),
    /// A permit was granted to a test.
    Grant(GrantRecord),
    /// A permit granted before was returned.
    Release(ReleaseRecord),
    /// `REALIZAR_GPU_TEST_CONCURRENCY=auto` chose the run's N (see [`tune`](crate::tune)).
    Choice(ChoiceRecord),
    /// A test process loaded GPU drivers (see [`drivers`](crate::drivers)).
    Drivers(DriversRecord),
}

impl RunRecord {
    /// The run the record belongs to.
    pub fn run(&self) -> &str {
        match self {
            RunRecord::Skip(r) => &r.run,
            RunRecord::Grant(r) => &r.run,
            RunRecord::Release(r) => &r.run,
            RunRecord::Choice(r) => &r.run,
            RunRecord::Drivers(r) => &r.run,
        }
    }

    /// When it was written, microseconds since the Unix epoch.
    pub fn unix_us(&self) -> u64 {
        match self {
            RunRecord::Skip(r) => r.unix_us,
            RunRecord::Grant(r) => r.unix_us,
            RunRecord::Release(r) => r.unix_us,
            RunRecord::Choice(r) => r.unix_us,
            RunRecord::Drivers(r) => r.unix_us,
        }
    }
}

/// A test that skipped at run time ([`require_backend!`](crate::require_backend) or a fixture).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SkipRecord {
    /// The run id (nextest's `NEXTEST_RUN_ID`).
    pub run: String,
    /// When, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The test's process.
    pub pid: u32,
    /// The test binary (nextest's `NEXTEST_BINARY_ID`; the JUnit report's `classname`).
    pub binary: String,
    /// The test's name (the JUnit report's `name`).
    pub test: String,
    /// The attempt that skipped (nextest's `NEXTEST_ATTEMPT`, 1 for the first).
    pub attempt: u32,
    /// The backend that had no device: `cuda`, `wgpu`.
    pub backend: String,
    /// Why, as the skip line says it.
    pub reason: String,
}

/// A permit granted to a test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GrantRecord {
    /// The run id.
    pub run: String,
    /// When it was granted, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process holding it.
    pub pid: u32,
    /// The permit's number within its process: its [`ReleaseRecord`] carries the same.
    pub hold: u64,
    /// The test binary.
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// The attempt (1 for the first).
    pub attempt: u32,
    /// The attempts the test has in all (1 + nextest's retries).
    pub total_attempts: u32,
    /// Units held: 1, a weight, units for declared memory, or every unit when exclusive.
    pub units: usize,
    /// Whether the permit holds every unit.
    pub exclusive: bool,
    /// Permits per GPU in force, N.
    pub per_gpu: usize,
    /// GPUs the permits span.
    pub gpus: usize,
    /// Whether the permit was made exclusive because the test is a retry
    /// (`GPU_TEST_PERMIT_RETRY=alone`).
    #[serde(default)]
    pub alone: bool,
    /// How long the request waited for its permit, microseconds (0 in records written before
    /// waits were kept).
    #[serde(default)]
    pub waited_us: u64,
    /// Where the units were learned (`GPU_TEST_PERMIT_WEIGHTS=learned`: the test declared
    /// nothing), the most GPU memory the test was measured to use in earlier runs, bytes,
    /// which its units (with the margin) cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<u64>,
}

impl GrantRecord {
    /// The units the permit kept from others: every unit of every GPU when exclusive.
    pub fn units_taken(&self) -> usize {
        if self.exclusive {
            self.per_gpu.saturating_mul(self.gpus).max(self.units)
        } else {
            self.units
        }
    }
}

/// A permit returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReleaseRecord {
    /// The run id.
    pub run: String,
    /// When it was returned, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process that held it.
    pub pid: u32,
    /// The permit's number within its process, as in its [`GrantRecord`].
    pub hold: u64,
    /// How the test stood when it returned the permit.
    pub outcome: Outcome,
    /// The most GPU memory its fixture measured it to use, bytes, where the fixture could
    /// measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
}

/// The N that `REALIZAR_GPU_TEST_CONCURRENCY=auto` chose for a run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChoiceRecord {
    /// The run id.
    pub run: String,
    /// When it was chosen, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The process that chose it.
    pub pid: u32,
    /// Permits per GPU chosen.
    pub per_gpu: usize,
    /// GPUs the permits span.
    pub gpus: usize,
    /// The GPUs and driver the choice was made for, as the probe saw them ("" where the
    /// crate was built without a backend or the probe found no device).
    pub gpu: String,
    /// Why, in one line.
    pub why: String,
}

/// GPU drivers a test process loaded, and whether it held a permit then (see
/// [`drivers`](crate::drivers)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DriversRecord {
    /// The run id.
    pub run: String,
    /// When it was written, microseconds since the Unix epoch.
    pub unix_us: u64,
    /// The test's process.
    pub pid: u32,
    /// The test binary.
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// The attempt (1 for the first).
    pub attempt: u32,
    /// The GPU driver libraries seen: every one the process (and, watched, each process it
    /// started) loaded as it ran where it was watched, the ones it had mapped where it looked
    /// at itself; in either case not those in `linked`.
    pub drivers: Vec<String>,
    /// Those it loaded while it held no permit.
    pub unpermitted: Vec<String>,
    /// Whether it loaded one before its first permit, or held none at all.
    pub before_first_permit: bool,
    /// Whether the process held a permit at all.
    pub held: bool,
    /// How it was seen: `watched` (the loader's log, every load) or `mapped` (the process
    /// looked at what it had mapped at its first permit or as it exited).
    pub seen: String,
    /// The GPU driver libraries its program was linked to at build time (mapped before its
    /// first instruction, or its executable's dependencies): not in `drivers`, never an
    /// escape (see [`drivers`](crate::drivers)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<String>,
    /// Whether a process the test started (a tool or helper it runs), not the test's own,
    /// loaded one of `unpermitted` (watched only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started_process: bool,
}

impl DriversRecord {
    /// Whether the process reached a GPU driver without a permit.
    pub fn escaped(&self) -> bool {
        !self.unpermitted.is_empty()
    }
}

/// How a test stood when its permit was returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Returned in the ordinary way: the test had not failed by then.
    Passed,
    /// Returned while the thread was panicking: the test failed.
    Panicked,
    /// `gpu-test-permit run`'s command exited with this code.
    Exited(i32),
    /// `gpu-test-permit run`'s command was ended by this signal.
    Signal(i32),
}

impl Outcome {
    /// Whether the test failed by the time the permit was returned.
    pub fn failed(self) -> bool {
        !matches!(self, Outcome::Passed | Outcome::Exited(0))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Passed => f.write_str("passed"),
            Outcome::Panicked => f.write_str("panicked"),
            Outcome::Exited(code) => write!(f, "exited with {code}"),
            Outcome::Signal(sig) => write!(f, "ended by signal {sig}"),
        }
    }
}
