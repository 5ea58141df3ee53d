//! Run records: what happened to each GPU test of a test run, so that the run's report can
//! say it — tests that skipped at run time, which every Rust runner shows as passed, and
//! tests that failed beside others and passed alone on a retry.
//!
//! Under `cargo nextest` (`NEXTEST_RUN_ID` set) every test process appends to one file per run
//! in the slot directory, `gpu0.run.<run id>`, one JSON line per event ([`RunRecord`]):
//!
//! - a **skip** ([`require_backend!`](crate::require_backend) or a fixture found no device);
//! - a **grant** of a host-wide permit, with the test, its attempt (nextest's
//!   `NEXTEST_ATTEMPT`), its units and the N in force;
//! - a **release**, with how the test stood then ([`Outcome`]: panicking means failed;
//!   `gpu-test-permit run` records its command's exit);
//! - **drivers** a test process loaded without a permit, or every driver it (and each process
//!   it started) loaded where it was watched, with those its program was linked to at build
//!   time apart ([`DriversRecord`], see [`drivers`](crate::drivers)); every watched test has
//!   one, so that a run's records say whether it was watched.
//!
//! Each line is written with one write under the file's lock, so lines of the run's
//! processes never interleave; a process that dies mid-hold leaves a grant without a release.
//! The newest 32 runs' files are kept. Writing is best effort: a record that cannot be
//! written is said once on standard error and never fails a test.
//!
//! Reading: [`read_run`] gives a run's records (the command says which of
//! this user's runs may be the one that just ended), [`summarize`] what they say
//! ([`RunSummary`]: skips, contention casualties, the peak), which `gpu-test-permit report`
//! prints and `gpu-test-permit junit` writes into nextest's JUnit report.
//!
//! A **contention casualty** is a test that failed while other tests held permits and then,
//! retried with the GPU to itself (`GPU_TEST_PERMIT_RETRY=alone`, the default), passed. The
//! retry that passes records it in `gpu0.casualties` in the slot directory's state directory,
//! beside the hang record ([`recorded_casualties`]), which the trace's advice on N reads as it
//! reads hangs.
//!
//! Outside nextest nothing is written; under `cargo test` a test binary that skipped GPU tests
//! says so in one line at exit instead ([`tally`]).
//!
//! ```
//! # #[cfg(feature = "__cli")] { // only the command's build has `__private`
//! use gpu_test_permit::__private::runs::{read_run, recorded_runs, summarize};
//!
//! # fn main() -> Result<(), gpu_test_permit::__private::runs::RunsError> {
//! let dir = gpu_test_permit::config::Config::from_env()
//!     .slot_dir_path()
//!     .expect("a usable slot directory");
//! let last = recorded_runs(&dir).into_iter().rfind(|r| r.mine);
//! match last.map(|r| read_run(&dir, &r.run_id)).transpose()?.flatten() {
//!     None => println!("no nextest run recorded in {}", dir.display()),
//!     Some(run) => {
//!         let s = summarize(&run);
//!         println!("run {}: {} GPU tests, {} skipped", s.run_id, s.gpu_tests, s.skipped.len());
//!         for c in &s.casualties {
//!             println!("{} failed at N = {} beside {:?}", c.key, c.n(), c.beside);
//!         }
//!     }
//! }
//! # Ok(())
//! # }
//! # }
//! ```

mod casualty;
mod read;
mod record;
mod summary;
pub mod tally;
#[cfg(any(test, feature = "__cli"))]
mod trace;
mod write;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The test a record names: [`nextest::current_test`](crate::nextest::current_test).
pub(crate) use crate::nextest::current_test;
#[cfg(any(test, feature = "__cli"))]
pub use casualty::forget_casualties;
pub use casualty::{CasualtyRecord, recorded_casualties};
#[cfg(any(test, feature = "__cli"))]
pub use read::{RecordedRun, RunsError, first_record_time};
pub use read::{RunRecords, read_run, recorded_runs};
pub use record::{ChoiceRecord, ReleaseRecord, RunRecord};
#[cfg(any(test, feature = "__cli"))]
pub use record::{DriversRecord, GrantRecord, Outcome, SkipRecord, VerdictRecord};
pub(crate) use summary::casualties_of;
#[cfg(any(test, feature = "__cli"))]
pub use summary::{
    Casualty, Escaped, LearnedWeight, RunSummary, SkippedTest, TestKey, UnreleasedGrant, summarize,
};
#[cfg(any(test, feature = "__cli"))]
pub use trace::casualties_in_trace;
#[cfg(any(test, feature = "__cli"))]
#[doc(hidden)]
pub use write::set_command_outcome;
pub(crate) use write::{
    Granted, append, flush, granted, nextest_run, outcome_now, record_drivers, record_skip,
    released, run_id, traced_attempt,
};
#[cfg(any(test, feature = "__cli"))]
pub(crate) use write::{record_verdict, record_watched};

/// The names of run files start with this.
pub(crate) const FILE_PREFIX: &str = "gpu0.run.";
/// Runs whose files are kept.
pub(crate) const RUNS_KEPT: usize = 32;

/// The file name of run `run`: [`FILE_PREFIX`] and its [`run_key`].
pub(crate) fn file_name(run: &str) -> String {
    format!("{FILE_PREFIX}{}", run_key(run))
}

/// The key of run `run`, as its file is named after [`FILE_PREFIX`] and as `auto`'s choice in
/// the layout and the history name it: the run id where it is a safe file name (nextest's are
/// UUIDs), else a hash of it.
pub(crate) fn run_key(run: &str) -> String {
    let safe = !run.is_empty() && run.len() <= 100 && safe_bytes(run) && !run.starts_with('.');
    if safe {
        run.to_string()
    } else {
        // FNV-1a, 64 bits: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in run.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("h{h:016x}")
    }
}

/// Whether every byte of `run` is an ASCII letter or digit, `-`, `_` or `.`.
fn safe_bytes(run: &str) -> bool {
    for b in run.bytes() {
        if !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            return false;
        }
    }
    true
}

/// A run file of a slot directory, as [`run_files`] lists it.
pub(crate) struct RunFile {
    pub(crate) path: PathBuf,
    /// When it was last written.
    pub(crate) modified: SystemTime,
    pub(crate) len: u64,
    /// Whether it belongs to this process's user (in a shared directory, other users' runs
    /// are there too).
    pub(crate) mine: bool,
}

/// The run files in `dir` (regular files, never followed through a link), each with what one
/// `lstat` tells of it.
pub(crate) fn run_files(dir: &Path) -> Vec<RunFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for e in entries {
        let Ok(e) = e else {
            continue;
        };
        if !e.file_name().to_string_lossy().starts_with(FILE_PREFIX) {
            continue;
        }
        let Ok(meta) = e.metadata() else {
            continue;
        };
        if meta.is_file() {
            files.push(RunFile {
                path: e.path(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                len: meta.len(),
                mine: crate::sys::owned_by_this_user(&meta),
            });
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_that_are_not_safe_file_names_are_hashed() {
        let uuid = "0b21430d-56d4-438d-b4b6-b0d0e0ead151";
        assert_eq!(file_name(uuid), format!("gpu0.run.{uuid}"));
        for bad in ["../x", "", ".hidden", "a/b", "a b", &"x".repeat(101)] {
            let name = file_name(bad);
            assert!(name.starts_with("gpu0.run.h"), "{bad:?} -> {name}");
            assert_eq!(name.len(), "gpu0.run.h".len() + 16);
        }
        assert_ne!(file_name("a/b"), file_name("a/c"));
    }
}
