//! Learning that survives ephemeral CI runners: what a run learns lives in its slot directory
//! (the run records) and its state directory (the history and hold times), which a fresh runner
//! does not have. Carried from one job to the next, as a CI cache restores a directory (the
//! guide's "Ephemeral runners"), the slot directory (its own state directory, as
//! `GPU_TEST_PERMIT_DIR` makes it) teaches the next job's first test process the hold times of
//! the tests before it.

use std::path::Path;
use std::time::Duration;

use crate::util::{Holder, cli, release, stdout_of, tempdir, wait_for_head};

const LONG: Duration = Duration::from_secs(20);
/// Long enough for a process that could take its permit to have taken it.
const SETTLE: Duration = Duration::from_millis(600);

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

/// A `hold` process of nextest run `run`, test `name` of binary `suite`, on 8 units, holding
/// until its standard input closes, writing its hold events to `trace`.
fn holder(slots: &Path, run: &str, name: &str, args: &[&str], trace: &Path) -> Holder {
    let mut c = cli(slots, 8);
    c.env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("NEXTEST_BINARY_ID", "suite")
        .env("NEXTEST_TEST_NAME", name)
        .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
        .env("GPU_TEST_PERMIT_TRACE", trace)
        .arg("hold")
        .args(args);
    Holder::spawn(c)
}

/// The first run on a fresh runner, in `slots`: a heavy test holds 5 units of 8, a second
/// waits for 5, and a light test asks for one. Returns whether the light one got its unit
/// while the heavy head waited (waiting `wait` for it), and the trace's hold events of the
/// light test.
fn first_run(slots: &Path, trace: &Path, wait: Duration) -> (bool, Vec<String>) {
    let h1 = holder(slots, "run-2", "heavy", &["--units", "5"], trace);
    assert!(h1.held_within(LONG), "the heavy holder");
    let h2 = holder(slots, "run-2", "heavy", &["--units", "5"], trace);
    wait_for_head(slots, h2.child.id(), LONG);
    let light = holder(slots, "run-2", "light", &[], trace);
    let backfilled = light.held_within(wait);
    release(h1);
    assert!(h2.held_within(LONG), "the head did not start");
    if !backfilled {
        assert!(light.held_within(LONG));
    }
    release(h2);
    release(light);
    let text = std::fs::read_to_string(trace).unwrap();
    let lights = text
        .lines()
        .filter(|l| l.contains("\"name\":\"hold\"") && l.contains("\"test\":\"light\""))
        .map(str::to_string)
        .collect();
    (backfilled, lights)
}

/// What the issue asks of a restored directory, on its first run: a short test backfills
/// past a heavy test that waits (the hold times learned from the job before tell it that the
/// short one ends first), `nextest-snippet` orders the learned tests longest first, and its
/// group names the tests that took permits. The same first run in a fresh directory waits
/// first come first served, and its snippet has no order and only a guess by name.
#[test]
fn a_restored_directory_backfills_orders_longest_first_and_names_the_group_on_its_first_run() {
    let work = tempdir();
    let first_job = work.path().join("job-1");
    for (name, args) in [
        ("heavy", ["--units", "5", "--for", "1500ms"].as_slice()),
        ("light", ["--for", "20ms"].as_slice()),
    ] {
        let out = cli(&first_job, 8)
            .env("NEXTEST_RUN_ID", "run-1")
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_BINARY_ID", "suite")
            .env("NEXTEST_TEST_NAME", name)
            .arg("hold")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "run-1 {name}: {out:?}");
    }
    let next_job = work.path().join("job-2");
    carry(&first_job, &next_job);
    let fresh = work.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();

    // Before any test of the job: the snippet a step prints for nextest.
    let snippet = |slots: &Path| {
        let mut c = cli(slots, 8);
        stdout_of(c.arg("nextest-snippet"))
    };
    let restored = snippet(&next_job);
    let heavy = restored
        .find("test(=heavy)'\npriority = ")
        .unwrap_or_else(|| panic!("no priority for heavy:\n{restored}"));
    let light = restored
        .find("test(=light)'\npriority = ")
        .unwrap_or_else(|| panic!("no priority for light:\n{restored}"));
    assert!(heavy < light, "the longest first:\n{restored}");
    assert!(
        restored.contains("binary_id(=suite) & test(=heavy)")
            && restored.contains("binary_id(=suite) & test(=light)"),
        "the learned group:\n{restored}"
    );
    let blank = snippet(&fresh);
    assert!(!blank.contains("priority ="), "{blank}");
    assert!(!blank.contains("test(=heavy)"), "{blank}");

    let (backfilled, lights) = first_run(&next_job, &work.path().join("restored.json"), LONG);
    assert!(
        backfilled,
        "on the restored directory's first run, the light test waited behind the heavy head"
    );
    assert!(
        lights.len() == 1 && lights[0].contains("\"backfilled\":true"),
        "{lights:?}"
    );
    let (backfilled, lights) = first_run(&fresh, &work.path().join("fresh.json"), SETTLE);
    assert!(
        !backfilled,
        "a fresh directory knows no hold time, yet the light test went past the head"
    );
    assert!(
        lights.len() == 1 && !lights[0].contains("\"backfilled\":true"),
        "{lights:?}"
    );
}
