//! Cross-process behaviour, with the `gpu-test-permit hold` command as the other processes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use gpu_test_permit::trace::{TraceArgs, TraceEvent, peak_concurrency, read_events};

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

#[test]
fn config_warnings_of_a_nextest_run_are_recorded_once_and_shown_by_config() {
    let dir = tempdir();
    let test_process = |run_id: &str, concurrency: &str, timeout: &str| {
        cli(dir.path(), 2)
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", run_id)
            .env("NEXTEST_TEST_GROUP", "gpu")
            .env("NEXTEST_TEST_GROUP_SLOT", "0")
            .env("REALIZAR_GPU_TEST_CONCURRENCY", concurrency)
            .env("GPU_TEST_PERMIT_TIMEOUT", timeout)
            .args(["hold", "--for", "1ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // Test processes of one run, side by side, each with the same bad value.
    let run_a: Vec<_> = (0..4).map(|_| test_process("run-a", "2x", "60s")).collect();
    for mut p in run_a {
        assert!(p.wait().unwrap().success());
    }
    // A later process of the run adds only what is new.
    assert!(test_process("run-a", "2x", "1y").wait().unwrap().success());
    let config = || {
        let out = cli(dir.path(), 2).arg("config").output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let shown = config();
    let recorded: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("configuration warnings of cargo nextest run run-a"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(
        recorded,
        [
            "  REALIZAR_GPU_TEST_CONCURRENCY='2x' is not a whole number; using 2",
            "  GPU_TEST_PERMIT_TIMEOUT='1y' is not a duration like 90, 90s, \
             1500ms or 10m; using 600s",
        ],
        "{shown}"
    );
    assert!(shown.contains("warnings: none"), "{shown}");
    // The next run with warnings replaces the record; one without leaves it.
    assert!(test_process("run-b", "0", "60s").wait().unwrap().success());
    assert!(test_process("run-c", "2", "60s").wait().unwrap().success());
    let shown = config();
    assert!(shown.contains("nextest run run-b"), "{shown}");
    assert!(shown.contains("'0' must be at least 1"), "{shown}");
    assert!(!shown.contains("2x"), "{shown}");
}

#[test]
fn config_with_strict_mode_fails_commands_before_they_start() {
    let dir = tempdir();
    let out = cli(dir.path(), 2)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2 x")
        .env("GPU_TEST_PERMIT_STRICT_CONFIG", "1")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("gpu-test-permit: GPU_TEST_PERMIT_STRICT_CONFIG is set"),
        "{err}"
    );
    assert!(err.contains("'2 x' is not a whole number"), "{err}");
}

/// Every command, as `help` lists them.
const COMMANDS: [&str; 9] = [
    "probe",
    "hold",
    "run",
    "status",
    "trace",
    "config",
    "nextest-snippet",
    "find-gpu-tests",
    "help",
];

#[test]
fn every_command_prints_its_usage_for_help_and_succeeds() {
    let dir = tempdir();
    let overview = cli(dir.path(), 2).arg("help").output().unwrap();
    assert!(overview.status.success());
    let overview = String::from_utf8(overview.stdout).unwrap();
    for name in COMMANDS {
        assert!(
            overview.contains(&format!("\n  {name}")),
            "{name} is missing from:\n{overview}"
        );
        for help in [&[name, "--help"][..], &[name, "-h"], &["help", name]] {
            // Help needs no working configuration: strict mode with a bad value stops nothing.
            let out = cli(dir.path(), 2)
                .env("REALIZAR_GPU_TEST_CONCURRENCY", "x")
                .env("GPU_TEST_PERMIT_STRICT_CONFIG", "1")
                .args(help)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{help:?}: {out:?}");
            assert!(
                text.starts_with(&format!("usage: gpu-test-permit {name}")),
                "{help:?}: {text}"
            );
            assert!(out.stderr.is_empty(), "{help:?}: {out:?}");
        }
    }
    for top in ["--help", "-h"] {
        let out = cli(dir.path(), 2).arg(top).output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), overview);
    }
}

#[test]
fn hold_options_in_any_order_give_the_same_result() {
    let dir = tempdir();
    for args in [
        &["hold", "--exclusive", "--for", "1ms"][..],
        &["hold", "--for=1ms", "--exclusive"],
    ] {
        let out = cli(dir.path(), 2).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        // Exclusive: both slots.
        assert!(text.contains(" slots=0,1\n"), "{args:?}: {text}");
        assert!(text.ends_with("released\n"), "{args:?}: {text}");
    }
}

#[test]
fn an_unknown_option_is_named_with_its_command() {
    let dir = tempdir();
    for (args, usage) in [
        (
            &["hold", "--bogus"][..],
            "hold [--exclusive | --units K | --memory SIZE] [--gpus K] [--for DURATION]",
        ),
        (
            &["hold", "--for=1ms", "--bogus=1"],
            "hold [--exclusive | --units K | --memory SIZE] [--gpus K] [--for DURATION]",
        ),
        (
            &["run", "--bogus", "--", "true"],
            "run [--exclusive | --units K | --memory SIZE] [--gpus K] [--group GROUP] [--filter TEXT] \
             [--watch] [--] COMMAND [ARGS...]",
        ),
        (&["status", "--bogus"], "status [--dir DIR]"),
        (&["config", "--bogus"], "config"),
    ] {
        let out = cli(dir.path(), 2).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "gpu-test-permit: {}: unknown option `--bogus`\nusage: gpu-test-permit {usage}\n",
                args[0]
            ),
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn run_leaves_its_commands_options_to_the_command() {
    let dir = tempdir();
    let command = ["sh", "-c", "echo \"$@\"", "sh", "--help", "--exclusive"];
    for ours in [&["run"][..], &["run", "--"]] {
        let out = cli(dir.path(), 1)
            .args(ours)
            .args(command)
            .output()
            .unwrap();
        assert!(out.status.success(), "{ours:?}: {out:?}");
        assert_eq!(out.stdout, b"--help --exclusive\n", "{ours:?}");
    }
}

#[test]
fn errors_name_the_program_once() {
    let dir = tempdir();
    let fails = |args: &[&str], env: &[(&str, &str)]| {
        let out = cli(dir.path(), 2)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} {env:?}: {out:?}");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !text.contains("gpu-test-permit: gpu-test-permit:"),
            "{args:?} {env:?}: {text}"
        );
        if out.status.code() == Some(2) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.starts_with("gpu-test-permit: "),
                "{args:?} {env:?}: {err}"
            );
        }
    };
    let hold = ["hold", "--for", "1ms"];
    fails(&hold, &[("GPU_TEST_PERMIT_DIR", "relative/slots")]);
    fails(
        &hold,
        &[
            ("REALIZAR_GPU_TEST_CONCURRENCY", "2 x"),
            ("GPU_TEST_PERMIT_STRICT_CONFIG", "1"),
        ],
    );
    fails(&["status"], &[("GPU_TEST_PERMIT_DIR", "relative/slots")]);
    // Exit 1, with the policy's error in the table.
    fails(&["probe"], &[("GPU_TEST_PERMIT_REQUIRE", "cdua")]);
    fails(&["hold", "--for", "soon"], &[]);
    fails(&["nonsense"], &[]);
}

#[cfg(unix)]
fn non_utf8(bytes: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(bytes.to_vec())
}

#[cfg(unix)]
#[test]
fn cli_non_utf8_arguments_get_a_clear_error_or_pass_through() {
    let dir = tempdir();
    let bad = non_utf8(b"a\xffb");
    for args in [
        vec![bad.clone()],
        vec!["hold".into(), "--for".into(), bad.clone()],
        vec!["trace".into(), "f".into(), "--max-peak".into(), bad.clone()],
    ] {
        let out = cli(dir.path(), 2).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("gpu-test-permit: "), "{args:?}: {err}");
        assert!(err.contains("a\u{fffd}b"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A path: accepted, and named in the error.
    let out = cli(dir.path(), 2)
        .arg("trace")
        .arg(dir.path().join(&bad))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot read") && err.contains("a\u{fffd}b"),
        "{err}"
    );
    // A command's arguments: passed on byte for byte.
    let out = cli(dir.path(), 2)
        .args(["run", "--", "printf", "%s|%s"])
        .arg(&bad)
        .arg(non_utf8(b"\xfe"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"a\xffb|\xfe");
}

#[cfg(unix)]
#[test]
fn run_dies_of_the_signal_that_killed_its_command() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir();
    for (sig, name) in [
        (libc::SIGSEGV, "SEGV"),
        (libc::SIGABRT, "ABRT"),
        (libc::SIGKILL, "KILL"),
    ] {
        let status = cli(dir.path(), 1)
            .args(["run", "--", "sh", "-c"])
            .arg(format!("kill -{name} $$"))
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(sig), "{name}: {status:?}");
    }
    // The permit was released before: the next command gets it at once.
    let status = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "2s")
        .args(["run", "--", "true"])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Starts `run -- sh -c SCRIPT` with N = 1; the script's first line on stdout is its pid.
#[cfg(unix)]
fn run_sh(dir: &std::path::Path, script: &str) -> (Holder, libc::pid_t) {
    let run = Holder::spawn({
        let mut c = cli(dir, 1);
        c.args(["run", "--", "sh", "-c", script]);
        // A test run started as a background job of a non-interactive shell inherits SIGINT
        // ignored, and so would the command: these tests are about what `run` passes on to a
        // command that takes the signal's default action.
        // SAFETY: signal(2) only, between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        c
    });
    let pid = run.lines.recv_timeout(LONG).unwrap().parse().unwrap();
    (run, pid)
}

#[cfg(unix)]
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// `watch` and `run --watch` keep the loader's log in a private directory of the temporary
/// directory. A process killed outright removes nothing; the next one of the same user removes
/// what its process left behind, and never a live one's.
#[cfg(target_os = "linux")]
#[test]
fn a_watch_directory_a_killed_process_left_is_removed_by_the_next_watch() {
    use std::os::unix::process::CommandExt;
    let slots = tempdir();
    let tmp = tempdir();
    let watch = |args: &[&str]| {
        let mut c = cli(slots.path(), 2);
        c.env("TMPDIR", tmp.path()).args(args).stdin(Stdio::null());
        c
    };
    let dirs = || {
        let mut names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("gpu-test-permit-watch-"))
            .collect();
        names.sort();
        names
    };
    // In groups of their own, so that the kill takes the command too.
    let mut killed = watch(&["watch", "--", "sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    let mut live = watch(&["run", "--watch", "--", "sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    let mine = |pid: u32| format!("gpu-test-permit-watch-{pid}-0");
    let both = {
        let mut both = vec![mine(killed.id()), mine(live.id())];
        both.sort();
        both
    };
    let until = Instant::now() + LONG;
    while dirs() != both
        || !both
            .iter()
            .all(|d| tmp.path().join(d).join("owner").exists())
    {
        assert!(
            Instant::now() < until,
            "directories {:?}, not {both:?}",
            dirs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let group = |c: &std::process::Child| -(c.id() as libc::pid_t);
    // SAFETY: kill(2) of the child's own process group.
    unsafe { libc::kill(group(&killed), libc::SIGKILL) };
    killed.wait().unwrap();
    assert_eq!(dirs(), both, "a killed process removed its directory");
    // Left for two minutes, as far as the next process can tell.
    for d in &both {
        let then = std::time::SystemTime::now() - Duration::from_secs(120);
        let dir = std::fs::File::open(tmp.path().join(d)).unwrap();
        dir.set_modified(then).unwrap();
    }

    let out = watch(&["watch", "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        dirs(),
        [mine(live.id())],
        "not only the live directory is left"
    );

    // SAFETY: as above.
    unsafe { libc::kill(group(&live), libc::SIGTERM) };
    live.wait().unwrap();
    assert_eq!(
        dirs(),
        Vec::<String>::new(),
        "a process that ended left its directory"
    );
}

#[cfg(unix)]
#[test]
fn run_passes_sigterm_on_and_holds_the_slot_until_the_command_exits() {
    let dir = tempdir();
    let (mut run, sh) = run_sh(
        dir.path(),
        "trap 'echo term; sleep 2; exit 5' TERM; echo $$; while :; do sleep 0.05; done",
    );
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(run.child.id() as libc::pid_t, libc::SIGTERM) };
    let got = run.lines.recv_timeout(Duration::from_secs(5));
    if got.is_err() {
        // SAFETY: cleaning up the command left running.
        unsafe { libc::kill(sh, libc::SIGKILL) };
    }
    assert_eq!(
        got.as_deref(),
        Ok("term"),
        "the command did not get SIGTERM"
    );
    // The command is still finishing: its permit is still held.
    let second = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    assert!(
        !second.held_within(Duration::from_millis(500)),
        "the slot was free while the command still ran"
    );
    let status = run.child.wait().unwrap();
    assert_eq!(status.code(), Some(5), "run exits as its command did");
    assert!(second.held_within(LONG));
}

#[cfg(unix)]
#[test]
fn run_dies_of_a_forwarded_sigterm_or_sigint_with_its_command() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (mut run, sleep) = run_sh(dir.path(), "echo $$; exec sleep 30");
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(run.child.id() as libc::pid_t, sig) };
        let status = run.child.wait().unwrap();
        let left_running = alive(sleep);
        if left_running {
            // SAFETY: cleaning up the command left running.
            unsafe { libc::kill(sleep, libc::SIGKILL) };
        }
        assert!(!left_running, "signal {sig}: the command outlived run");
        assert_eq!(status.signal(), Some(sig), "{status:?}");
    }
}

#[test]
fn hold_and_run_refuse_bad_units_and_sizes_with_exit_code_2() {
    let dir = tempdir();
    for command in ["hold", "run"] {
        for (given, says) in [
            (&["--units", "0"][..], "--units '0' must be at least 1"),
            (&["--units", "two"], "--units 'two' is not a whole number"),
            (&["--units="], "--units '' is empty"),
            (
                &["--memory", "lots"],
                "--memory 'lots' is not a size like 24GiB",
            ),
            (
                &["--memory", "0GB"],
                "--memory '0GB' must be a size above zero",
            ),
            (&["--memory", "50%"], "--memory '50%' is a percentage"),
            (
                &["--exclusive", "--units", "2"],
                "--exclusive takes every unit; give it or --units, not both",
            ),
            (
                &["--memory=1GiB", "--exclusive"],
                "--exclusive takes every unit; give it or --memory, not both",
            ),
        ] {
            let mut c = cli(dir.path(), 4);
            c.arg(command).args(given);
            if command == "run" {
                // Nothing runs: `touch` would leave a file behind.
                c.args(["--", "touch"]).arg(dir.path().join("ran"));
            } else {
                c.args(["--for", "1ms"]);
            }
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {given:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{command} {given:?}: {err}");
            assert!(
                err.starts_with(&format!("gpu-test-permit: {command}: {says}")),
                "{err}"
            );
            assert!(out.stdout.is_empty(), "{command} {given:?}");
            assert!(!dir.path().join("ran").exists(), "{command} {given:?} ran");
        }
        // More units than a GPU has: the pool's own error, before anything runs.
        let mut c = cli(dir.path(), 4);
        c.args([command, "--units", "5"]);
        if command == "run" {
            c.args(["--", "touch"]).arg(dir.path().join("ran"));
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("a GPU has only 4"), "{err}");
        assert!(!dir.path().join("ran").exists());
    }
}

#[test]
fn hold_prints_the_units_it_holds() {
    let dir = tempdir();
    for (args, env, says) in [
        (&["--units", "3"][..], None, " units=3 slots=0,1,2\n"),
        (&[][..], None, " units=1 slots=0\n"),
        (&["--exclusive"][..], None, " units=4 slots=0,1,2,3\n"),
        // 5 GB of 16 GiB with N = 4: two units of 4 GiB.
        (
            &["--memory", "5GB"][..],
            Some("16GiB"),
            " units=2 slots=0,1\n",
        ),
        // The larger of the two counts.
        (
            &["--memory", "5GB", "--units", "3"][..],
            Some("16GiB"),
            " units=3 slots=0,1,2\n",
        ),
    ] {
        let mut c = cli(dir.path(), 4);
        if let Some(budget) = env {
            c.env("GPU_TEST_PERMIT_GPU_MEMORY", budget);
        }
        let out = c
            .arg("hold")
            .args(args)
            .args(["--for", "1ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("held pid="), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
    }
}

#[test]
fn nextest_snippet_tells_nextest_the_weight_of_heavy_tests() {
    let dir = tempdir();
    let snippet = |n: usize, extra: &[&str]| {
        let out = cli(dir.path(), n)
            .arg("nextest-snippet")
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = snippet(4, &[]);
    assert!(
        text.starts_with(&gpu_test_permit::__private::nextest::group_snippet(4)),
        "{text}"
    );
    assert!(
        text.contains(
            "# [[profile.default.overrides]]\n# filter = 'test(/heavy_/)'\n\
             # test-group = '@tool:gpu-test-permit:gpu'\n# threads-required = 2\n"
        ),
        "{text}"
    );
    // Every added line is a comment: the block is valid as printed.
    let added = &text[gpu_test_permit::__private::nextest::group_snippet(4).len()..];
    assert!(
        added.lines().all(|l| l.is_empty() || l.starts_with('#')),
        "{added}"
    );
    assert!(snippet(8, &[]).contains("# threads-required = 4\n"));
    let wrapper = snippet(4, &["--wrapper"]);
    assert!(wrapper.contains("# threads-required = 2\n"), "{wrapper}");
    assert!(
        wrapper.contains("`command = 'gpu-test-permit run --units 2 --'`"),
        "{wrapper}"
    );
    // N = 1: every permit is a whole GPU, nothing to weigh; the runner is one command for
    // every test, so its tests hold one unit each.
    assert_eq!(
        snippet(1, &[]),
        gpu_test_permit::__private::nextest::group_snippet(1)
    );
    assert_eq!(
        snippet(4, &["--runner"]),
        gpu_test_permit_cli::nextest_config::runner_snippet(
            4,
            &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed
        )
    );
}

/// The weights block, uncommented and aimed at one test of the plain suite, in a real nextest
/// run: nextest never runs that test beside another one of the group (its 2 units fill a
/// group of 2), while the other GPU tests run two at a time.
#[test]
fn nextest_runs_a_weighted_test_alone_in_a_full_group() {
    if !crate::recipes::have_nextest() {
        return;
    }
    let work = tempdir();
    let out = cli(work.path(), 2).arg("nextest-snippet").output().unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    let mut uncommented = false;
    let config: String = printed
        .lines()
        .map(|l| {
            uncommented |= l == "# [[profile.default.overrides]]";
            let l = if uncommented {
                l.strip_prefix("# ").unwrap_or(l)
            } else {
                l
            };
            format!("{}\n", l.replace("test(/heavy_/)", "test(/gpu_matmul/)"))
        })
        .collect();
    assert!(config.contains("\nthreads-required = 2\n"), "{config}");
    let config_file = work.path().join("gpu-test-permit.toml");
    std::fs::write(&config_file, &config).unwrap();
    let records = work.path().join("records");
    std::fs::create_dir(&records).unwrap();
    let out = crate::recipes::plain_suite_run(&records)
        .args(["-E", "test(/gpu/)"])
        .args(crate::recipes::tool_config(&config_file))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut runs: Vec<(String, u128, u128)> = Vec::new();
    for e in std::fs::read_dir(&records).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let f: Vec<&str> = text.split_whitespace().collect();
        runs.push((
            f[0].to_string(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        ));
    }
    assert_eq!(runs.len(), 4, "{runs:?}");
    let overlap = |a: &(String, u128, u128), b: &(String, u128, u128)| a.1 < b.2 && b.1 < a.2;
    let heavy = runs.iter().find(|r| r.0 == "gpu_matmul").unwrap();
    for other in runs.iter().filter(|r| r.0 != "gpu_matmul") {
        assert!(!overlap(heavy, other), "{heavy:?} ran beside {other:?}");
    }
    // The group is not serial: the light ones overlapped.
    let lights: Vec<_> = runs.iter().filter(|r| r.0 != "gpu_matmul").collect();
    assert!(
        lights
            .iter()
            .any(|a| lights.iter().any(|b| a.0 != b.0 && overlap(a, b))),
        "{runs:?}"
    );
}

/// One line of a trace file as this crate writes it: an event of test `test` on thread `t1`
/// of a pool of 2, with what `args` changes of its details.
fn trace_line(
    name: &str,
    test: &str,
    ts: u64,
    dur: u64,
    args: impl FnOnce(&mut TraceArgs),
) -> String {
    let mut event = TraceEvent {
        name: name.into(),
        cat: "gpu-test-permit".into(),
        ph: "X".into(),
        ts,
        dur,
        pid: 1,
        tid: 1,
        args: TraceArgs {
            test: test.into(),
            thread: "t1".into(),
            slots: vec![0],
            capacity: 2,
            units: 1,
            gpus: 1,
            ..Default::default()
        },
    };
    args(&mut event.args);
    format!("{},", event.to_json())
}

/// A wait of 1 ms and a hold of 5 ms of test `test`, from `ts`.
fn wait_and_hold(test: &str, ts: u64, args: impl Fn(&mut TraceArgs)) -> [String; 2] {
    [
        trace_line("wait", test, ts, 1_000, &args),
        trace_line("hold", test, ts + 1_000, 5_000, &args),
    ]
}

/// `gpu-test-permit trace FILE ARGS` on the lines `lines` (after the `[` line): its exit
/// status, standard output and standard error; a panic when it runs past 30 s.
fn trace_command(
    dir: &std::path::Path,
    lines: &[String],
    args: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let file = dir.join("trace.json");
    std::fs::write(&file, format!("[\n{}\n", lines.join("\n"))).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = cli(dir, 2)
        .arg("trace")
        .arg(&file)
        .args(args)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`trace` ran past 30 s, {} bytes of output so far",
                std::fs::metadata(&out).unwrap().len()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    (status, read(out), read(err))
}

#[test]
fn trace_command_bounds_capacity_units_and_gpus_by_the_crates_limits() {
    let dir = tempdir();
    let mut lines = Vec::new();
    // Line 2 on: a run on the largest pool one GPU can have (1024 permits) ...
    lines.extend(wait_and_hold("a", 0, |a| a.capacity = 1024));
    lines.extend(wait_and_hold("b", 500, |a| a.capacity = 1024));
    // ... and, lines 6 to 9, events no pool writes.
    lines.push(trace_line("hold", "x", 0, 10, |a| {
        a.capacity = 1_000_000_000_000
    }));
    lines.push(trace_line("hold", "x", 0, 10, |a| a.capacity = 5_000_000));
    lines.push(trace_line("hold", "x", 0, 10, |a| a.gpus = 100_000));
    lines.push(trace_line("hold", "x", 0, 10, |a| a.units = 3));
    let (status, out, err) = trace_command(dir.path(), &lines, &["--timeline"]);
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        err.contains("skipped 4 unreadable lines: 6, 7, 8, 9")
            && err.contains("capacity 1000000000000 is more than 1024 permits per GPU"),
        "{err}"
    );
    // Every size up to the model's 64, then about an eighth larger each (with the run's).
    let rows = out.lines().filter(|l| l.starts_with("  N = ")).count();
    assert!((64..=120).contains(&rows), "{rows} rows:\n{out}");
    assert!(
        out.contains("N = 1024") && out.contains("(this run)"),
        "{out}"
    );
    assert!(out.lines().count() < 200, "{out}");
}

#[test]
fn trace_command_skips_timestamps_and_memory_that_no_run_can_have() {
    let dir = tempdir();
    let gib = 1u64 << 30;
    let mut lines = Vec::new();
    lines.extend(wait_and_hold("a", 0, |a| {
        a.memory = Some(gib);
        a.memory_used = Some(3 * gib);
    }));
    // Lines 4 to 7: an end that overflows, one past the year 2255, a wait as long as u64
    // allows, and memory no GPU has.
    lines.push(trace_line("hold", "x", u64::MAX - 50, 100, |_| {}));
    lines.push(trace_line("hold", "x", 1 << 60, 1, |_| {}));
    lines.push(trace_line("wait", "x", 0, u64::MAX, |_| {}));
    lines.push(trace_line("hold", "x", 0, 10, |a| {
        a.memory_used = Some(u64::MAX)
    }));
    for args in [&[][..], &["--timeline"]] {
        let (status, out, err) = trace_command(dir.path(), &lines, args);
        assert!(status.success(), "{status:?}\n{err}");
        assert!(
            err.contains("skipped 4 unreadable lines: 4, 5, 6, 7")
                && err.contains("past the year 2255"),
            "{err}"
        );
        assert!(out.contains("span 6.0 ms"), "{out}");
        assert!(out.contains("declare 3072.0 MiB"), "{out}");
        assert!(!out.contains("NOT RELEASED"), "{out}");
        assert!(out.lines().all(|l| l.len() < 1_100), "{out}");
    }
}

#[test]
fn trace_command_reads_on_past_a_truncated_line_and_lists_the_lines_it_skipped() {
    let dir = tempdir();
    let [wait, hold] = wait_and_hold("a", 0, |_| {});
    let [wait_b, hold_b] = wait_and_hold("b", 10_000, |_| {});
    // A full disk cut the write of line 5 short; the next event landed on the same line.
    let cut = &hold_b[..40];
    let lines = vec![
        wait,
        hold,
        wait_b,
        format!("{cut}{}", hold_b),
        "{\"name\":\"ho".to_string(),
        "\u{1}binary junk".to_string(),
    ];
    let (status, out, err) = trace_command(dir.path(), &lines, &[]);
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        err.contains("skipped 3 unreadable lines: 5, 6, 7")
            && err.contains("line 5: an event cut short"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Test b's hold, read from the line that was cut: both tests held one permit.
    let permits = |test: &str| {
        out.lines()
            .find(|l| l.ends_with(&format!("  {test}")))
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_string)
    };
    assert_eq!(permits("a").as_deref(), Some("1"), "{out}");
    assert_eq!(permits("b").as_deref(), Some("1"), "{out}");
}

#[test]
fn trace_command_escapes_control_characters_in_test_and_thread_names() {
    let dir = tempdir();
    let evil = "evil\u{1b}[2J\rforged\u{202e}";
    let mut lines = Vec::new();
    lines.extend(wait_and_hold(evil, 0, |a| a.thread = evil.into()));
    // A grant never returned: the not-released line names the test too.
    lines.push(trace_line("wait", evil, 10_000, 1_000, |_| {}));
    let (status, out, err) = trace_command(dir.path(), &lines, &["--timeline"]);
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        !out.contains(['\u{1b}', '\r', '\u{202e}']),
        "raw control characters:\n{out:?}"
    );
    let escaped = "evil\\u{1b}[2J\\rforged\\u{202e}";
    let shown = out.lines().filter(|l| l.contains(escaped)).count();
    // The per-test row, the not-released line and the timeline's row.
    assert_eq!(shown, 3, "{out}");
}

/// `nextest-snippet` prints text from the configuration: it creates no slot directory and no
/// slot file, even for 1,024 permits on each of 16 GPUs.
#[test]
fn nextest_snippet_opens_no_slot_files() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let out = cli(&slots, 1024)
        .env("GPU_TEST_PERMIT_GPUS", "16")
        .arg("nextest-snippet")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("{ max-threads = 16384 }"), "{text}");
    assert!(!slots.exists(), "nextest-snippet made {}", slots.display());
}

/// An option given twice is refused with its name, whatever it is; the last one does not
/// silently win.
#[test]
fn a_repeated_option_is_refused_by_name() {
    let dir = tempdir();
    for (args, says) in [
        (
            &["hold", "--units", "2", "--units", "3"][..],
            "hold: option `--units` given twice (`2`, then `3`); give it once",
        ),
        (
            &["hold", "--for=1s", "--exclusive", "--for", "2s"],
            "hold: option `--for` given twice (`1s`, then `2s`); give it once",
        ),
        (
            &["run", "--group", "a", "--group=b", "--", "true"],
            "run: option `--group` given twice (`a`, then `b`); give it once",
        ),
        (
            &["probe", "--json", "--json"],
            "probe: option `--json` given twice; give it once",
        ),
    ] {
        let out = cli(dir.path(), 2).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("gpu-test-permit: {says}\n")),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
    }
}

/// The README says what the slot directory's symbolic-link check covers: the directory itself
/// is refused when it is a link, and a path through a linked parent is followed.
#[cfg(unix)]
#[test]
fn the_readme_says_what_the_slot_directory_symlink_check_covers() {
    let readme = crate::util::readme_and_guide();
    assert!(
        !readme.contains("reached through a symlink"),
        "README.md or the guide still says a directory reached through a symlink is refused"
    );
    assert!(
        readme.contains("itself a symbolic link")
            && readme.contains("a path through a symbolically linked\n  parent"),
        "neither README.md nor the guide says what is checked"
    );
    let work = tempdir();
    let real = work.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = work.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // The directory itself a link: refused.
    let out = cli(&link, 1)
        .args(["hold", "--for", "1ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a symbolic link"),
        "{out:?}"
    );
    // Its parent a link: followed and accepted.
    let out = cli(&link.join("slots"), 1)
        .args(["hold", "--for", "1ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(real.join("slots").is_dir());
}

/// Under nextest, a test outside a test group gives the hint on how to add one in full once
/// per run (the first process of the run), and one line in the others; a new run gives it in
/// full again, and where the run cannot be recorded every process gives it in full.
#[test]
fn the_nextest_hint_is_given_in_full_once_per_run() {
    let dir = tempdir();
    let hold = |run: &str| {
        let out = cli(dir.path(), 2)
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", run)
            .env("NEXTEST_TEST_GROUP", "@global")
            .args(["hold", "--for", "1ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let full = "Put GPU tests in a group of max-threads = 2";
    let short = "gpu-test-permit: this test runs under cargo nextest outside a test group; \
                 `gpu-test-permit nextest-snippet` prints one\n";
    let first = hold("run-1");
    assert!(first.contains(full), "{first}");
    assert_eq!(first.matches("[test-groups]").count(), 1, "{first}");
    for _ in 0..2 {
        let later = hold("run-1");
        assert!(!later.contains(full), "{later}");
        assert!(later.contains(short), "{later}");
    }
    assert!(hold("run-2").contains(full));
    assert!(!hold("run-2").contains(full));
    // The record cannot be written: as before, every process says it in full.
    let record = dir.path().join("nextest-hint.log");
    std::fs::remove_file(&record).unwrap();
    std::fs::create_dir(&record).unwrap();
    assert!(hold("run-3").contains(full));
    assert!(hold("run-3").contains(full));
}

/// `GPU_TEST_PERMIT_CONCURRENCY` alone sets N for a process, as `REALIZAR_GPU_TEST_CONCURRENCY`
/// would, and wins over it when both are set.
#[test]
fn the_crates_own_concurrency_name_sets_n() {
    let alone = |dir: &std::path::Path, extra: &[(&str, &str)]| {
        let mut c = std::process::Command::new(crate::util::bin());
        crate::util::clear_permit_env(&mut c);
        c.env("GPU_TEST_PERMIT_DIR", dir)
            .env("GPU_TEST_PERMIT_CONCURRENCY", "3");
        for (k, v) in extra {
            c.env(k, v);
        }
        c
    };
    for extra in [vec![], vec![("REALIZAR_GPU_TEST_CONCURRENCY", "5")]] {
        let dir = tempdir();
        let out = alone(dir.path(), &extra)
            .args(["hold", "--for", "1ms"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let out = cli(dir.path(), 1)
            .args(["status", "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l == "layout: N = 3 permit(s) per GPU x 1 GPU(s)"),
            "{extra:?}: {text}"
        );
        let differ = "REALIZAR_GPU_TEST_CONCURRENCY='5' differs from \
                      GPU_TEST_PERMIT_CONCURRENCY='3', which wins; using 3";
        assert_eq!(err.contains(differ), !extra.is_empty(), "{extra:?}: {err}");
        let out = alone(dir.path(), &extra).arg("config").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines().any(
                |l| l.trim_start().starts_with("GPU_TEST_PERMIT_CONCURRENCY")
                    && l.contains(" 3 (wins over REALIZAR_GPU_TEST_CONCURRENCY)")
            ),
            "{text}"
        );
    }
}

/// The hint on adding a test group, which nextest shows only with a failing test's output, is
/// kept in the slot directory: `report` prints it for the run it was given in, and `config`
/// for the last such run.
#[test]
fn the_nextest_hint_is_shown_by_report_and_config() {
    let dir = tempdir();
    let test_process = |run: &str, group: &str| {
        let out = cli(dir.path(), 3)
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", run)
            .env("NEXTEST_TEST_GROUP", group)
            .env("NEXTEST_TEST_NAME", "gpu_test")
            .args(["hold", "--for", "1ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let command = |args: &[&str]| {
        let out = cli(dir.path(), 3).args(args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{text}");
        text
    };
    let line = "GPU tests of cargo nextest run run-1 took permits outside a test group, so \
                nextest started GPU test processes that then waited for a permit; put them in a \
                group of max-threads = 3 (`gpu-test-permit nextest-snippet` prints one)";
    let config = command(&["config"]);
    assert!(
        config.contains("no cargo nextest run recorded GPU tests outside a test group"),
        "{config}"
    );
    test_process("run-1", "@global");
    test_process("run-1", "@global");
    let report = command(&["report", "--run-id", "run-1"]);
    assert!(
        report
            .lines()
            .any(|l| l == format!("outside a test group: {line}")),
        "{report}"
    );
    let config = command(&["config"]);
    assert!(
        config
            .lines()
            .any(|l| l.starts_with("outside a test group (recorded ") && l.ends_with(line)),
        "{config}"
    );
    // A run whose tests are in a group gets no hint, and its report none.
    test_process("run-2", "gpu");
    let report = command(&["report", "--run-id", "run-2"]);
    assert!(!report.contains("outside a test group"), "{report}");
}
