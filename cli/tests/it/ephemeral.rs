//! Learning that survives ephemeral CI runners: what a run learns lives in its slot directory
//! (the run records) and its state directory (the history and hold times), which a fresh runner
//! does not have. Carried from one job to the next, as a CI cache restores a directory (the
//! guide's "Ephemeral runners"), the slot directory (its own state directory, as
//! `GPU_TEST_PERMIT_DIR` makes it) teaches the next job's first test process the hold times of
//! the tests before it.

use std::path::Path;

use crate::util::{cli, tempdir};

/// A test process of nextest run `run` named `name`, holding a permit for 20 ms in `slots`.
fn test_process(slots: &Path, run: &str, name: &str) {
    let out = cli(slots, 2)
        .env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("NEXTEST_BINARY_ID", "suite::gpu")
        .env("NEXTEST_TEST_NAME", name)
        .args(["hold", "--for", "20ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{run} {name}: {out:?}");
}

/// Copies the regular files of `from` into a new directory `to`, as a CI cache saves and
/// restores a directory on another machine (the locks are not carried: no process holds them).
fn carry(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[test]
fn a_slot_directory_carried_to_a_fresh_runner_teaches_its_first_test_process() {
    let work = tempdir();
    let first_job = work.path().join("job-1");
    for name in ["gpu_a", "gpu_b", "gpu_c"] {
        test_process(&first_job, "run-1", name);
    }
    assert!(
        !first_job.join("gpu0.tests").exists(),
        "run-1 had no run before it to learn from"
    );

    // A fresh runner without the directory learns nothing from the job before.
    let fresh = work.path().join("fresh");
    test_process(&fresh, "run-2", "gpu_a");
    assert!(!fresh.join("gpu0.tests").exists());

    // The next job, with the directory restored: its first test process learns run-1's tests
    // before its first permit.
    let next_job = work.path().join("job-2");
    carry(&first_job, &next_job);
    test_process(&next_job, "run-2", "gpu_a");
    let times = std::fs::read_to_string(next_job.join("gpu0.tests")).unwrap();
    // Each with its hold time, which backfilling and the longest-first order read.
    for name in ["gpu_a", "gpu_b", "gpu_c"] {
        assert!(times.contains(&format!("\"name\":\"{name}\"")), "{times}");
    }
    assert_eq!(times.matches("\"us\":").count(), 3, "{times}");
}
