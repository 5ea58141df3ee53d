//! Runs that tell the truth: the run records of a real `cargo nextest` run of
//! `fixtures/truth-suite` with retries (skips, contention casualties), the line a test binary
//! prints under `cargo test`, retries that take the GPU alone, and `run`'s records.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_test_permit::__private::runs::{Outcome, RunRecord, recorded_casualties, summarize};
use gpu_test_permit_cli::records::last_run;

use crate::recipes::have_nextest;
use crate::util::{clear_permit_env, cli, tempdir};

const SKIPPED: [&str; 2] = ["cuda_graph_replays", "cuda_kernel_matches_cpu"];
const CASUALTIES: [&str; 2] = ["contended_reduce", "contended_upload"];
const BINARY: &str = "gpu-test-permit-truth-suite::suite";

/// Cargo, with the suite's CUDA tests pointed at a stand-in driver that has no device, so that
/// they skip on every machine (one with NVIDIA's driver too).
fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    c.current_dir(crate::util::workspace_root())
        .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB", "nodevice");
    c
}

fn suite_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("truth-suite")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A nextest run of the truth suite with one retry and a JUnit report; returns the slot
/// directory, the JUnit file and the run's output.
pub(crate) fn nextest_run(work: &Path, extra: &[&str]) -> (PathBuf, PathBuf, Output) {
    let shared = work.join("shared");
    let slots = work.join("slots");
    std::fs::create_dir_all(&shared).unwrap();
    let config = work.join("nextest.toml");
    // A store of its own, so that runs side by side do not share a report.
    let store = work.join("store");
    std::fs::write(
        &config,
        format!(
            "[store]\ndir = {:?}\n[profile.truth]\nretries = 1\n[profile.truth.junit]\n\
             path = \"junit.xml\"\n",
            store.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = cargo()
        .args([
            "nextest",
            "run",
            "--offline",
            "-p",
            "gpu-test-permit-truth-suite",
        ])
        .arg("--config-file")
        .arg(&config)
        .args([
            "--profile",
            "truth",
            "--test-threads",
            "8",
            "--status-level",
            "fail",
        ])
        .arg("--target-dir")
        .arg(suite_target())
        .args(extra)
        .env("TRUTH_SUITE_DIR", &shared)
        .env("GPU_TEST_PERMIT_DIR", &slots)
        .env("GPU_TEST_PERMIT_TRACE", work.join("trace.json"))
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
        .output()
        .unwrap();
    let junit = store.join("truth/junit.xml");
    (slots, junit, out)
}

#[test]
fn a_nextest_run_with_retries_records_its_skips_and_names_its_contention_casualties() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let (slots, junit, out) = nextest_run(work.path(), &[]);
    let all = text(&out);
    // The contended tests failed beside others, passed alone: flaky, and the run passes.
    assert!(out.status.success(), "{all}");
    for t in CASUALTIES {
        assert!(
            all.lines()
                .any(|l| l.contains("FLAKY 2/2") && l.contains(t)),
            "{all}"
        );
    }
    let records = last_run(&slots).unwrap().expect("the run is recorded");
    let s = summarize(&records);
    let mut skipped: Vec<&str> = s.skipped.iter().map(|k| k.key.test.as_str()).collect();
    skipped.sort();
    assert_eq!(skipped, SKIPPED);
    assert!(
        s.skipped
            .iter()
            .all(|k| k.key.binary == BINARY && k.backend == "cuda")
    );
    let mut casualties: Vec<&str> = s.casualties.iter().map(|c| c.key.test.as_str()).collect();
    casualties.sort();
    assert_eq!(casualties, CASUALTIES, "{s:#?}");
    for c in &s.casualties {
        assert_eq!((c.failed_attempt, c.passed_attempt, c.n()), (1, 2, 2));
        assert!(!c.beside.is_empty() && !c.beside.contains(&c.key));
    }
    assert!(
        s.peak_units <= 2,
        "the records show more units than N at once: {s:#?}"
    );
    assert!(s.unreleased.is_empty(), "{s:#?}");
    // Each retry had the GPU to itself: exclusive, and said why.
    let retries: Vec<_> = records
        .records
        .iter()
        .filter_map(|r| match r {
            RunRecord::Grant(g) if g.attempt == 2 => Some(g),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(
        retries
            .iter()
            .all(|g| g.exclusive && g.alone && g.units == 2)
    );
    // The passing retries recorded themselves for the trace's advice.
    let mut recorded: Vec<String> = recorded_casualties(&slots)
        .into_iter()
        .map(|c| c.test)
        .collect();
    recorded.sort();
    assert_eq!(recorded, CASUALTIES);

    // `report` names them, and --fail-on-casualty fails on them.
    let report = cli(&slots, 2).arg("report").output().unwrap();
    let said = text(&report);
    assert!(report.status.success(), "{said}");
    assert!(
        said.contains("skipped: 2") && said.contains("contention casualties: 2"),
        "{said}"
    );
    for t in CASUALTIES {
        assert!(
            said.lines()
                .any(|l| l.contains(t) && l.contains("failed at attempt 1 at N = 2 beside")),
            "{said}"
        );
    }
    let strict = cli(&slots, 2)
        .args(["report", "--fail-on-casualty"])
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
    let by_id = cli(&slots, 2)
        .args(["report", "--run-id", &records.run_id])
        .output()
        .unwrap();
    assert_eq!(by_id.stdout, report.stdout);

    // The trace marks them by itself (read where no records are: another slot directory).
    let elsewhere = tempdir();
    let out = cli(elsewhere.path(), 2)
        .arg("trace")
        .arg(work.path().join("trace.json"))
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let marked: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("CONTENTION CASUALTY: test `"))
        .collect();
    assert_eq!(marked.len(), 2, "{said}");
    for t in CASUALTIES {
        assert!(
            marked
                .iter()
                .any(|l| l.contains(&format!("`{t}` failed at N = 2 beside"))
                    && l.ends_with("and passed alone (in this trace)")),
            "{said}"
        );
    }
    assert!(said.contains("N = 2 and above left out"), "{said}");

    // `history` lists the casualties the retries recorded, and forgets them when asked.
    let out = cli(&slots, 2).arg("history").output().unwrap();
    let said = text(&out);
    assert!(
        said.contains("contention casualties (failed beside other tests, passed alone): 2"),
        "{said}"
    );
    let out = cli(&slots, 2)
        .args(["history", "--forget"])
        .output()
        .unwrap();
    assert!(
        text(&out).contains("1 run, 0 hangs and 2 casualties"),
        "{}",
        text(&out)
    );
    assert!(recorded_casualties(&slots).is_empty());
    // The run's records are still in the slot directory; forgotten, they are not measured again.
    let out = cli(&slots, 2).arg("history").output().unwrap();
    assert!(
        text(&out).contains("waited for a permit): 0\n"),
        "{}",
        text(&out)
    );

    // nextest's JUnit report, rewritten: exactly the skipped tests are marked, the counts agree,
    // the contended tests stay passed (flaky).
    let before = std::fs::read_to_string(&junit).unwrap();
    let parsed_before = crate::junit::parse(&before);
    assert_eq!(parsed_before.root, (Some(0), Some(7)), "{before}");
    assert!(parsed_before.skipped.is_empty());
    let rewritten = work.path().join("junit-rewritten.xml");
    let out = cli(&slots, 2)
        .arg("junit")
        .arg(&junit)
        .arg("-o")
        .arg(&rewritten)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = crate::junit::parse(&std::fs::read_to_string(&rewritten).unwrap());
    let marked: Vec<(&str, &str)> = after
        .skipped
        .keys()
        .map(|(b, t)| (b.as_str(), t.as_str()))
        .collect();
    assert_eq!(marked, SKIPPED.map(|t| (BINARY, t)), "{after:#?}");
    assert!(after.skipped.values().all(|m| m.starts_with(
        "backend=cuda: cuda no devices (cuInit reported CUDA_ERROR_NO_DEVICE (100))"
    )));
    assert_eq!(after.root, (Some(2), Some(7)));
    assert_eq!(after.suites[BINARY], (Some(2), Some(7)));
    assert_eq!(after.testcases, 7);
    assert_eq!(
        std::fs::read_to_string(&junit).unwrap(),
        before,
        "-o leaves FILE as it was"
    );
    // The records of another directory than the environment names, with --dir.
    let elsewhere = tempdir();
    let from_dir = work.path().join("from-dir.xml");
    let out = cli(elsewhere.path(), 2)
        .arg("junit")
        .arg(&junit)
        .arg("--dir")
        .arg(&slots)
        .arg("-o")
        .arg(&from_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        crate::junit::parse(&std::fs::read_to_string(&from_dir).unwrap()).skipped,
        after.skipped
    );
    // Where CUDA is required, its skips fail the step.
    let out = cli(&slots, 2)
        .env("GPU_TEST_PERMIT_REQUIRE", "cuda")
        .arg("junit")
        .arg(&junit)
        .arg("-o")
        .arg(work.path().join("required.xml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn with_retry_same_a_retry_takes_the_permit_it_asks_for() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let shared = work.path().join("shared");
    let slots = work.path().join("slots");
    std::fs::create_dir_all(&shared).unwrap();
    // The contended tests alone, N = 2: they meet each other in the first attempt; under
    // `same` the retries meet each other again and fail again.
    let out = cargo()
        .args([
            "nextest",
            "run",
            "--offline",
            "-p",
            "gpu-test-permit-truth-suite",
        ])
        .args(["--retries", "1", "--test-threads", "8", "--no-fail-fast"])
        .arg("--target-dir")
        .arg(suite_target())
        .args(["-E", "test(/contended|long_render/)"])
        .env("TRUTH_SUITE_DIR", &shared)
        .env("GPU_TEST_PERMIT_DIR", &slots)
        .env("GPU_TEST_PERMIT_RETRY", "same")
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
        .output()
        .unwrap();
    let records = last_run(&slots).unwrap().expect("the run is recorded");
    let grants: Vec<_> = records
        .records
        .iter()
        .filter_map(|r| match r {
            RunRecord::Grant(g) => Some(g),
            _ => None,
        })
        .collect();
    assert!(grants.iter().any(|g| g.attempt == 2), "{}", text(&out));
    assert!(
        grants
            .iter()
            .all(|g| !g.alone && !g.exclusive && g.units == 1),
        "{grants:#?}"
    );
}

#[test]
fn under_cargo_test_a_binary_says_at_exit_how_many_gpu_tests_skipped() {
    let work = tempdir();
    let shared = work.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let out = cargo()
        .args([
            "test",
            "--offline",
            "-p",
            "gpu-test-permit-truth-suite",
            "--test",
            "suite",
        ])
        .arg("--target-dir")
        .arg(suite_target())
        .args(["--", "cuda_", "quick_clear", "cpu_adds"])
        .env("TRUTH_SUITE_DIR", &shared)
        .env("GPU_TEST_PERMIT_DIR", work.path().join("slots"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text(&out));
    // libtest counts the skips as passes ...
    assert!(stdout.contains("test result: ok. 4 passed"), "{stdout}");
    // ... and the binary says what they were, once, on the real standard error.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("GPU tests skipped in this binary"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(
            "gpu-test-permit: 2 of 3 GPU tests skipped in this binary (backend=cuda: cuda no \
             devices (cuInit reported CUDA_ERROR_NO_DEVICE (100))"
        ),
        "{}",
        lines[0]
    );
    // Nothing is recorded outside nextest.
    let slots = work.path().join("slots");
    assert!(!slots.exists() || last_run(&slots).unwrap().is_none());
}

/// The environment nextest gives attempt `attempt` of test `t` of run `run`.
fn as_nextest(c: &mut Command, run: &str, t: &str, attempt: u32) {
    c.env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("NEXTEST_BINARY_ID", "suite::bin")
        .env("NEXTEST_TEST_NAME", t)
        .env("NEXTEST_ATTEMPT", attempt.to_string())
        .env("NEXTEST_TOTAL_ATTEMPTS", "2")
        .env("NEXTEST_TEST_GROUP", "gpu");
}

#[test]
fn a_retry_holds_every_unit_unless_retry_is_same() {
    let dir = tempdir();
    for (attempt, retry, says) in [
        (1, None, " units=1 slots=0\n"),
        (2, None, " units=3 slots=0,1,2\n"),
        (2, Some("alone"), " units=3 slots=0,1,2\n"),
        (2, Some("same"), " units=1 slots=0\n"),
    ] {
        let mut c = cli(dir.path(), 3);
        as_nextest(&mut c, "r1", "t", attempt);
        if let Some(r) = retry {
            c.env("GPU_TEST_PERMIT_RETRY", r);
        }
        let out = c.args(["hold", "--for", "1ms"]).output().unwrap();
        let held = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", text(&out));
        assert!(held.contains(says), "attempt {attempt} {retry:?}: {held}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.contains("reruns with the GPU to itself"),
            says.contains("units=3"),
            "{stderr}"
        );
    }
    // A weighted request is made exclusive too.
    let mut c = cli(dir.path(), 3);
    as_nextest(&mut c, "r1", "t", 2);
    let out = c
        .args(["hold", "--units", "2", "--for", "1ms"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" units=3 "),
        "{}",
        text(&out)
    );
    // A bad value falls back to alone, and says so.
    let mut c = cli(dir.path(), 3);
    as_nextest(&mut c, "r1", "t", 2);
    let out = c
        .env("GPU_TEST_PERMIT_RETRY", "solo")
        .args(["hold", "--for", "1ms"])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(all.contains(" units=3 "), "{all}");
    assert!(
        all.contains("GPU_TEST_PERMIT_RETRY='solo' is not alone or same; using alone"),
        "{all}"
    );
}

#[test]
fn run_records_how_its_command_ended_and_a_retry_under_run_takes_the_gpu_alone() {
    let dir = tempdir();
    for (attempt, code) in [(1, "3"), (2, "0")] {
        let mut c = cli(dir.path(), 2);
        as_nextest(&mut c, "r2", "flaky_under_run", attempt);
        let out = c
            .args(["run", "--", "sh", "-c", &format!("exit {code}")])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code.parse().unwrap()),
            "{}",
            text(&out)
        );
    }
    // A command ended by a signal.
    let mut c = cli(dir.path(), 2);
    as_nextest(&mut c, "r2", "killed_under_run", 1);
    let _ = c
        .args(["run", "--", "sh", "-c", "kill -9 $$"])
        .output()
        .unwrap();
    let records = last_run(dir.path()).unwrap().unwrap();
    let outcomes: Vec<Outcome> = records
        .records
        .iter()
        .filter_map(|r| match r {
            RunRecord::Release(r) => Some(r.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [Outcome::Exited(3), Outcome::Exited(0), Outcome::Signal(9)]
    );
    let grants: Vec<(u32, bool, usize)> = records
        .records
        .iter()
        .filter_map(|r| match r {
            RunRecord::Grant(g) => Some((g.attempt, g.exclusive, g.units)),
            _ => None,
        })
        .collect();
    assert_eq!(grants, [(1, false, 1), (2, true, 2), (1, false, 1)]);
    // Failed at attempt 1 with nobody beside: flaky, not a casualty.
    let s = summarize(&records);
    assert!(s.casualties.is_empty(), "{s:#?}");
    assert_eq!(s.retried.len(), 1);
}

#[test]
fn skips_are_recorded_where_no_permit_was_ever_taken() {
    if !have_nextest() {
        return;
    }
    // Only the skipping tests: the first record of the run creates the slot directory.
    let work = tempdir();
    let (slots, _, out) = nextest_run(work.path(), &["-E", "test(/^cuda_/)"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = summarize(&last_run(&slots).unwrap().expect("the run is recorded"));
    let mut skipped: Vec<&str> = s.skipped.iter().map(|k| k.key.test.as_str()).collect();
    skipped.sort();
    assert_eq!(skipped, SKIPPED);
    assert_eq!(s.permits, 0);
}

#[test]
fn the_trace_advises_no_n_at_which_one_of_its_tests_was_a_casualty() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let slots = dir.path().join("slots");
    for t in ["gpu_a", "gpu_b"] {
        let mut c = cli(&slots, 2);
        as_nextest(&mut c, "r4", t, 1);
        let out = c
            .env("GPU_TEST_PERMIT_TRACE", &trace)
            .args(["hold", "--for", "20ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
    let trace_text = || {
        let out = cli(&slots, 2).arg("trace").arg(&trace).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(!trace_text().contains("CONTENTION CASUALTY"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let record = |test: &str, n: usize| {
        format!(
            "{{\"unix_ms\":{now_ms},\"run\":\"r0\",\"binary\":\"suite::bin\",\"test\":\"{test}\",\
             \"per_gpu\":{n},\"gpus\":1,\"units_beside\":1,\"beside\":[\"suite::bin gpu_c\"]}}\n"
        )
    };
    // A casualty of a test this trace does not hold rules nothing out.
    std::fs::write(slots.join("gpu0.casualties"), record("gpu_elsewhere", 2)).unwrap();
    let text_without = trace_text();
    assert!(
        !text_without.contains("CONTENTION CASUALTY"),
        "{text_without}"
    );
    assert!(!text_without.contains("not advised"), "{text_without}");
    // One of this trace's tests failed at N = 2 beside another and passed alone.
    std::fs::write(
        slots.join("gpu0.casualties"),
        record("gpu_elsewhere", 2) + &record("gpu_b", 2) + "not json\n",
    )
    .unwrap();
    let said = trace_text();
    assert!(
        said.contains(
            "CONTENTION CASUALTY: test `gpu_b` failed at N = 2 beside suite::bin gpu_c and passed \
             alone (run r0)"
        ),
        "{said}"
    );
    let row = said
        .lines()
        .find(|l| l.trim_start().starts_with("N = 2 "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        row.contains("(not advised: `gpu_b` failed at N = 2 beside others and passed alone)"),
        "{row}"
    );
    let suggestion = said
        .lines()
        .find(|l| l.starts_with("suggested N"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(suggestion.starts_with("suggested N = 1"), "{suggestion}");
    assert!(
        suggestion.contains("`gpu_b` failed there beside others"),
        "{suggestion}"
    );
}

#[test]
fn report_reads_around_lines_that_are_not_records_and_refuses_what_is_not_a_file() {
    let dir = tempdir();
    let run = "5a5a5a5a-0000-4000-8000-000000000000";
    let path = dir.path().join(format!("gpu0.run.{run}"));
    let skip = |test: &str, run: &str| {
        format!(
            "{{\"kind\":\"skip\",\"run\":\"{run}\",\"unix_us\":1,\"pid\":1,\"binary\":\"b\",\
             \"test\":\"{test}\",\"attempt\":1,\"backend\":\"cuda\",\"reason\":\"not installed\"}}\n"
        )
    };
    let mut text = skip("kept", run);
    text.push_str("not json at all\n");
    text.push_str(&format!("{}\n", "x".repeat(200_000))); // longer than any record
    text.push_str(&skip("other_run", "another-run"));
    text.push_str("{\"kind\":\"launch\",\"run\":\"5a5a\"}\n"); // a kind no version writes
    text.push_str(&skip("\\u001b[2Jforged", run)); // JSON for ESC
    text.push_str("{\"kind\":\"skip\",\"run\""); // cut short by a full disk
    std::fs::write(&path, text).unwrap();
    let out = cli(dir.path(), 2).arg("report").output().unwrap();
    let said = text_of(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("skipped: 2"), "{said}");
    assert!(
        said.contains("b kept: backend=cuda: not installed"),
        "{said}"
    );
    // Control characters from the file are shown escaped, never sent to the terminal.
    assert!(
        said.contains("\\u{1b}[2Jforged") && !said.contains('\u{1b}'),
        "{said}"
    );
    assert!(said.contains("(5 lines of the file left out"), "{said}");

    // A FIFO where the run file would be: refused at once, never waited on.
    #[cfg(unix)]
    {
        let fifo_dir = tempdir();
        let fifo = fifo_dir.path().join(format!("gpu0.run.{run}"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let start = std::time::Instant::now();
        let out = cli(fifo_dir.path(), 2)
            .args(["report", "--run-id", run])
            .output()
            .unwrap();
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(out.status.code(), Some(2), "{}", text_of(&out));
        assert!(
            text_of(&out).contains("not a regular file but a FIFO"),
            "{}",
            text_of(&out)
        );
        // A test process of that run records nothing there, and is not held up.
        let mut c = cli(fifo_dir.path(), 2);
        as_nextest(&mut c, run, "t", 1);
        let out = c.args(["hold", "--for", "1ms"]).output().unwrap();
        assert!(out.status.success(), "{}", text_of(&out));
        assert!(
            text_of(&out).contains("cannot record this test's skips and permits"),
            "{}",
            text_of(&out)
        );
    }

    // No run at all, and an unknown run id: clear messages, exit 2.
    let empty = tempdir();
    let out = cli(empty.path(), 2).arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text_of(&out).contains("no run recorded in"),
        "{}",
        text_of(&out)
    );
    let out = cli(dir.path(), 2)
        .args(["report", "--run-id", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text_of(&out).contains("no records of run nope in") && text_of(&out).contains(run),
        "{}",
        text_of(&out)
    );
}

fn text_of(out: &Output) -> String {
    text(out)
}

#[test]
fn a_process_stopped_with_the_run_files_lock_holds_up_no_test() {
    let dir = tempdir();
    let run = "6b6b6b6b-0000-4000-8000-000000000000";
    // As a test process stopped (SIGSTOP, a frozen cgroup) in the middle of writing a record.
    let path = dir.path().join(format!("gpu0.run.{run}"));
    std::fs::write(&path, b"").unwrap();
    let held = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    held.lock().unwrap();
    let mut c = cli(dir.path(), 2);
    as_nextest(&mut c, run, "t", 1);
    let start = std::time::Instant::now();
    let out = c.args(["hold", "--for", "1ms"]).output().unwrap();
    let took = start.elapsed();
    assert!(out.status.success(), "{}", text(&out));
    // The grant's record and the release's each wait 200 ms at most.
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    assert!(
        text(&out).contains("held the run file's lock for over 200 ms"),
        "{}",
        text(&out)
    );
    drop(held);
    // Once it is free, records are written again.
    let mut c = cli(dir.path(), 2);
    as_nextest(&mut c, run, "t2", 1);
    assert!(
        c.args(["hold", "--for", "1ms"])
            .output()
            .unwrap()
            .status
            .success()
    );
    let s = summarize(&last_run(dir.path()).unwrap().unwrap());
    assert_eq!(s.permits, 1);
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_planted_at_the_run_file_is_never_written_through() {
    let dir = tempdir();
    let run = "7c7c7c7c-0000-4000-8000-000000000000";
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious\n").unwrap();
    let slots = dir.path().join("slots");
    std::fs::create_dir(&slots).unwrap();
    std::os::unix::fs::symlink(&victim, slots.join(format!("gpu0.run.{run}"))).unwrap();
    let mut c = cli(&slots, 2);
    as_nextest(&mut c, run, "t", 1);
    let out = c.args(["hold", "--for", "1ms"]).output().unwrap();
    // The permit is taken as ever; the records are not written, and it says so.
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("cannot record this test's skips and permits"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}
