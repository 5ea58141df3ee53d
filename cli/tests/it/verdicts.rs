//! Verdicts: `gpu-test-permit watch` as cargo's target runner tells "the tests failed" from "the
//! process failed after (or around) the tests", with real processes: `fixtures/verdicts`, a
//! suite whose process crashes or hangs at exit (an exit handler, the main thread's
//! thread-local destructor, a library's destructor as it is unloaded), whose test crashes only
//! beside another, or always. Run directly as cargo runs a target runner, under `cargo test`,
//! and under `cargo nextest run`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::util::{
    bin, cargo_program, clear_permit_env, manifest_dir, shown, stderr, stdout, target_tmpdir,
    tempdir,
};

/// The fixture's test binary, built once per process.
fn suite() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        crate::util::test_executable("gpu-test-permit-verdicts", "suite", &target_dir())
    })
}

fn target_dir() -> PathBuf {
    target_tmpdir().join("verdicts")
}

fn cargo() -> Command {
    let mut c = Command::new(cargo_program());
    clear_permit_env(&mut c);
    c.current_dir(manifest_dir());
    c
}

/// The stand-in library whose destructor crashes or spins as it is unloaded.
fn unload_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = target_tmpdir().join("verdicts-stub");
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join(format!("libunload-{}.so", std::process::id()));
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(manifest_dir().join("tests/stub/verdicts_unload.c"))
            .status()
            .unwrap();
        assert!(built.success(), "cc could not build the stand-in library");
        lib
    })
}

/// `env` for the suite: its own slot directory, and what it is asked to do.
fn env(c: &mut Command, slots: &Path, asks: &[(&str, &str)]) {
    c.env("GPU_TEST_PERMIT_DIR", slots)
        .env("GPU_TEST_PERMIT_EXIT_GRACE", "1s")
        .env("VERDICTS_LIBRARY", unload_library());
    for (k, v) in asks {
        c.env(k, v);
    }
}

/// The suite run by `gpu-test-permit watch --`, as cargo runs a target runner.
fn watched(args: &[&str], asks: &[(&str, &str)]) -> Output {
    let slots = tempdir();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["watch", "--"]).arg(suite()).args(args);
    env(&mut c, slots.path(), asks);
    c.stdin(Stdio::null()).output().unwrap()
}

/// The suite run alone, as without the runner.
fn unwatched(args: &[&str], asks: &[(&str, &str)]) -> Output {
    let slots = tempdir();
    let mut c = Command::new(suite());
    clear_permit_env(&mut c);
    c.args(args);
    env(&mut c, slots.path(), asks);
    c.stdin(Stdio::null()).output().unwrap()
}

fn signal_of(o: &Output) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    o.status.signal()
}

/// Every test passed, then the process crashed, exited non-zero or hung at exit: a teardown
/// fault, said in one line with the signal (or the hang and what its threads waited in), the
/// tests that held permits last, and the drivers; the run passes as its tests did.
#[test]
fn a_process_that_fails_after_every_test_passed_is_a_teardown_fault_and_passes() {
    for (mode, how) in [
        ("segv", "died by SIGSEGV"),
        ("abort", "died by SIGABRT"),
        ("exit3", "died by exit code 3"),
        ("tls-segv", "died by SIGSEGV"),
        ("unload-segv", "died by SIGSEGV"),
        ("spin", "hung at exit"),
        ("tls-spin", "hung at exit"),
        ("unload-spin", "hung at exit"),
    ] {
        let out = watched(&[], &[("VERDICTS_AT_EXIT", mode)]);
        let err = stderr(&out);
        assert!(out.status.success(), "{mode}: {}", shown(&out));
        assert!(
            err.contains("teardown fault") && err.contains(how),
            "{mode}: {}",
            shown(&out)
        );
        assert!(err.contains("held last by"), "{mode}: {}", shown(&out));
        assert!(
            stdout(&out).contains("test result: ok. 5 passed; 0 failed"),
            "{mode}: the tests' output passes through: {}",
            shown(&out)
        );
        // Without the runner, it is a crash (or, hung, never ends: not run that way here).
        if !how.starts_with("hung") {
            assert!(
                !unwatched(&[], &[("VERDICTS_AT_EXIT", mode)])
                    .status
                    .success()
            );
        }
    }
}

/// `GPU_TEST_PERMIT_TEARDOWN=fail` fails a teardown fault as the process ended.
#[test]
fn teardown_fail_fails_a_teardown_fault_as_the_process_ended() {
    let slots = tempdir();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["watch", "--"]).arg(suite());
    env(&mut c, slots.path(), &[("VERDICTS_AT_EXIT", "segv")]);
    let out = c
        .env("GPU_TEST_PERMIT_TEARDOWN", "fail")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", shown(&out));
    assert_eq!(signal_of(&out), Some(libc::SIGSEGV), "{}", shown(&out));
    assert!(stderr(&out).contains("failing it"), "{}", shown(&out));
}

/// Nothing is hidden: a failing test still fails, crash at exit or not; a clean run says
/// nothing; `--list` and bad arguments end as they do without the runner; the output passes
/// through byte for byte.
#[test]
fn a_failure_stays_a_failure_and_a_clean_run_passes_as_it_is() {
    let failed = watched(&[], &[("VERDICTS_FAIL", "1"), ("VERDICTS_AT_EXIT", "segv")]);
    assert!(!failed.status.success(), "{}", shown(&failed));
    assert!(
        !stderr(&failed).contains("teardown fault"),
        "{}",
        shown(&failed)
    );
    let failed = watched(&[], &[("VERDICTS_FAIL", "1")]);
    assert_eq!(failed.status.code(), Some(101), "{}", shown(&failed));

    let clean = watched(&["--test-threads", "1"], &[]);
    assert!(clean.status.success(), "{}", shown(&clean));
    assert!(
        !stderr(&clean).contains("gpu-test-permit: teardown"),
        "{}",
        shown(&clean)
    );
    let alone = unwatched(&["--test-threads", "1"], &[]);
    let without_time = |o: &Output| {
        stdout(o)
            .lines()
            .map(|l| l.split("; finished in").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(without_time(&clean), without_time(&alone));

    let list = watched(&["--list"], &[("VERDICTS_AT_EXIT", "segv")]);
    let list_alone = unwatched(&["--list"], &[]);
    assert_eq!(stdout(&list), stdout(&list_alone));
    let bad = watched(&["--no-such-option"], &[]);
    let bad_alone = unwatched(&["--no-such-option"], &[]);
    assert_eq!(
        bad.status.code(),
        bad_alone.status.code(),
        "{}",
        shown(&bad)
    );
    assert!(
        !stderr(&bad).contains("gpu-test-permit: "),
        "{}",
        shown(&bad)
    );
}

/// A crash while tests run (`cargo test`'s one process): the tests without a result run again,
/// each alone. One that crashed only beside others passes alone: the run passes, the crash
/// named a contention casualty. One that crashes alone is named the crash and fails the run,
/// in the terse format (`-q`) too.
#[test]
fn a_crash_while_tests_run_reruns_the_tests_without_a_result_alone() {
    let beside = watched(&["--test-threads", "5"], &[("VERDICTS_BESIDE", "1")]);
    let err = stderr(&beside);
    assert!(beside.status.success(), "{}", shown(&beside));
    assert!(
        err.contains("crash: ") && err.contains("SIGABRT"),
        "{}",
        shown(&beside)
    );
    assert!(err.contains("contention"), "{}", shown(&beside));
    assert!(err.contains("beside_others"), "{}", shown(&beside));

    // Alone, each test's process still fails at exit: under the failing policy that fails the
    // run, as it would have failed a run without the crash.
    let slots = tempdir();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["watch", "--"])
        .arg(suite())
        .args(["--test-threads", "5"]);
    env(
        &mut c,
        slots.path(),
        &[("VERDICTS_BESIDE", "1"), ("VERDICTS_AT_EXIT", "segv")],
    );
    let strict = c
        .env("GPU_TEST_PERMIT_TEARDOWN", "fail")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(101), "{}", shown(&strict));
    assert!(
        stderr(&strict).contains("a teardown fault: SIGSEGV"),
        "{}",
        shown(&strict)
    );

    for args in [&[][..], &["-q"][..]] {
        let always = watched(args, &[("VERDICTS_ALWAYS", "1")]);
        let err = stderr(&always);
        assert_eq!(
            always.status.code(),
            Some(101),
            "{args:?}: {}",
            shown(&always)
        );
        assert!(
            err.contains("the crash: always_crashes (died by SIGSEGV)"),
            "{args:?}: {}",
            shown(&always)
        );
        assert!(
            err.contains("passed alone: "),
            "{args:?}: {}",
            shown(&always)
        );
    }
}

/// Under `cargo test` with the watch as cargo's target runner: a teardown fault passes (it fails
/// without the runner), a test that always crashes fails and is named.
#[test]
fn under_cargo_test_the_runner_gives_each_binary_its_verdict() {
    let runner_var = crate::util::runner_var();
    let runner = format!("{} watch --", bin().display());
    let run = |with_runner: bool, asks: &[(&str, &str)]| {
        let slots = tempdir();
        let mut c = cargo();
        c.args([
            "test",
            "--offline",
            "-q",
            "-p",
            "gpu-test-permit-verdicts",
            "--test",
            "suite",
        ])
        .arg("--target-dir")
        .arg(target_dir());
        env(&mut c, slots.path(), asks);
        if with_runner {
            c.env(&runner_var, &runner);
        }
        c.stdin(Stdio::null()).output().unwrap()
    };
    let crash_at_exit = [("VERDICTS_AT_EXIT", "segv")];
    assert!(!run(false, &crash_at_exit).status.success());
    let out = run(true, &crash_at_exit);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(stderr(&out).contains("teardown fault"), "{}", shown(&out));
    let out = run(true, &[("VERDICTS_AT_EXIT", "tls-spin")]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(stderr(&out).contains("hung at exit"), "{}", shown(&out));
    let out = run(true, &[("VERDICTS_BESIDE", "1")]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stderr(&out).contains("contention casualty"),
        "{}",
        shown(&out)
    );
    let out = run(true, &[("VERDICTS_ALWAYS", "1")]);
    assert!(!out.status.success(), "{}", shown(&out));
    assert!(
        stderr(&out).contains("the crash: always_crashes"),
        "{}",
        shown(&out)
    );
}

/// Under `cargo nextest run` (a process a test) with the watch as cargo's target runner: a
/// teardown fault passes and goes into the run's records, which `report` lists and
/// `report --fail-on-teardown` fails on; a test that crashes alone fails.
#[test]
fn under_nextest_a_teardown_fault_passes_and_report_lists_it() {
    if !crate::recipes::have_nextest() {
        return;
    }
    let runner_var = crate::util::runner_var();
    let runner = format!("{} watch --", bin().display());
    let slots = tempdir();
    let run_in = |slots: &Path, asks: &[(&str, &str)]| {
        let mut c = cargo();
        c.args([
            "nextest",
            "run",
            "--offline",
            "-p",
            "gpu-test-permit-verdicts",
            "--test",
            "suite",
            "--status-level",
            "fail",
            "--no-fail-fast",
        ])
        .arg("--target-dir")
        .arg(target_dir())
        .env(&runner_var, &runner);
        env(&mut c, slots, asks);
        c.stdin(Stdio::null()).output().unwrap()
    };
    let run = |asks: &[(&str, &str)]| run_in(slots.path(), asks);
    // A hang at exit, ended after the grace: passes too.
    let hung = tempdir();
    let out = run_in(hung.path(), &[("VERDICTS_AT_EXIT", "tls-spin")]);
    assert!(out.status.success(), "{}", shown(&out));
    let out = run(&[("VERDICTS_AT_EXIT", "segv")]);
    assert!(out.status.success(), "{}", shown(&out));
    let report = |flags: &[&str]| {
        let mut c = Command::new(bin());
        clear_permit_env(&mut c);
        c.arg("report")
            .args(flags)
            .env("GPU_TEST_PERMIT_DIR", slots.path())
            .output()
            .unwrap()
    };
    let listed = report(&[]);
    let text = stdout(&listed);
    assert!(listed.status.success(), "{}", shown(&listed));
    assert!(
        text.contains("processes that failed after or around their tests: 5"),
        "{}",
        shown(&listed)
    );
    assert!(text.contains("teardown (SIGSEGV)"), "{}", shown(&listed));
    let failing = report(&["--fail-on-teardown"]);
    assert!(!failing.status.success(), "{}", shown(&failing));
    assert!(
        stderr(&failing).contains("5 teardown faults"),
        "{}",
        shown(&failing)
    );

    let out = run(&[("VERDICTS_ALWAYS", "1")]);
    assert!(!out.status.success(), "{}", shown(&out));
}
