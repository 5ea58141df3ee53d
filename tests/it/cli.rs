//! Cross-process behaviour, with the `gpu-test-permit hold` command as the other processes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use gpu_test_permit::trace::{peak_concurrency, read_events};

use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);

#[test]
fn processes_share_the_cap_and_the_trace_shows_it() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let start = Instant::now();
    let children: Vec<_> = (0..6)
        .map(|_| {
            cli(dir.path(), 2)
                .args(["hold", "--for", "300ms"])
                .env("GPU_TEST_PERMIT_TRACE", &trace)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // Six holds of 300 ms, two at a time: at least three rounds.
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    let events = read_events(&trace).unwrap();
    let holds: Vec<_> = events.iter().filter(|e| e.name == "hold").collect();
    assert_eq!(holds.len(), 6);
    let pids: std::collections::HashSet<_> = holds.iter().map(|e| e.pid).collect();
    assert_eq!(pids.len(), 6);
    assert_eq!(peak_concurrency(&events), 2);
}

#[test]
fn a_killed_holder_frees_its_slot_at_once() {
    let dir = tempdir();
    let mut first = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    assert!(first.held_within(LONG));
    let second = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    assert!(
        !second.held_within(Duration::from_millis(300)),
        "the cap of 1 was not enforced"
    );
    let killed = Instant::now();
    first.child.kill().unwrap(); // SIGKILL: no destructor runs
    first.child.wait().unwrap();
    assert!(second.held_within(LONG));
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    let (status, _) = second.release();
    assert!(status.success());
}

#[test]
fn an_exclusive_holder_keeps_other_processes_out() {
    let dir = tempdir();
    let excl = Holder::spawn({
        let mut c = cli(dir.path(), 2);
        c.args(["hold", "--exclusive"]);
        c
    });
    assert!(excl.held_within(LONG));
    let shared = Holder::spawn({
        let mut c = cli(dir.path(), 2);
        c.arg("hold");
        c
    });
    assert!(!shared.held_within(Duration::from_millis(300)));
    let (status, _) = excl.release();
    assert!(status.success());
    assert!(shared.held_within(LONG));
}

#[test]
fn a_timed_out_process_lists_the_holder_and_skips_corrupt_records() {
    let dir = tempdir();
    let holder = Holder::spawn({
        let mut c = cli(dir.path(), 2);
        c.arg("hold");
        c
    });
    assert!(holder.held_within(LONG));
    let holder_pid = holder.child.id();
    let second = Holder::spawn({
        let mut c = cli(dir.path(), 2);
        c.arg("hold");
        c
    });
    assert!(second.held_within(LONG));
    // Scribble over the second holder's record: a corrupt record must not break the waiter.
    let slot1 = dir.path().join("gpu0.slot1");
    std::fs::write(&slot1, b"\x00garbage{{{").unwrap();
    let out = cli(dir.path(), 2)
        .args(["hold", "--for", "1ms"])
        .env("GPU_TEST_PERMIT_TIMEOUT", "300ms")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("waited 0.3s"), "{err}");
    assert!(err.contains(&format!("pid {holder_pid}")), "{err}");
    assert!(err.contains("ignoring the corrupt holder record"), "{err}");
    drop(second);
    drop(holder);
}

#[test]
fn bad_environment_values_print_one_line_and_use_the_default() {
    let dir = tempdir();
    let out = cli(dir.path(), 2)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "3abc")
        .args(["hold", "--for", "1ms"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("REALIZAR_GPU_TEST_CONCURRENCY"))
            .collect::<Vec<_>>(),
        ["gpu-test-permit: REALIZAR_GPU_TEST_CONCURRENCY='3abc' is not a whole number; using 2"]
    );
}

#[test]
fn an_invalid_directory_fails_with_advice() {
    let dir = tempdir();
    let out = cli(dir.path(), 2)
        .env("GPU_TEST_PERMIT_DIR", "relative/slots")
        .args(["hold", "--for", "1ms"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("GPU_TEST_PERMIT_DIR='relative/slots' is not an absolute path"),
        "{err}"
    );
}

#[test]
fn nextest_outside_a_group_gets_one_hint_inside_none() {
    let dir = tempdir();
    let run = |group: &str| {
        let out = cli(dir.path(), 3)
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", "00000000-0000-0000-0000-000000000000")
            .env("NEXTEST_TEST_GROUP", group)
            .env(
                "NEXTEST_TEST_GROUP_SLOT",
                if group == "@global" { "none" } else { "0" },
            )
            .args(["hold", "--for", "1ms"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let hint = run("@global");
    assert_eq!(hint.matches("[test-groups]").count(), 1, "{hint}");
    assert!(hint.contains("max-threads = 3"), "{hint}");
    assert_eq!(run("gpu"), "");
}

#[test]
fn run_holds_a_permit_around_a_command() {
    let dir = tempdir();
    let blocker = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    assert!(blocker.held_within(LONG));
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "200ms")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "must not run without a permit");
    drop(blocker);
    let status = cli(dir.path(), 1)
        .args(["run", "--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
}
