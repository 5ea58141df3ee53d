//! The hold deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`) for the CLI's own permits: `run` ends a
//! command that holds its permit too long, instead of aborting while the command holds on;
//! `hold --for` is no hang; and the trace's what-if trusts a hang record only for so long.
//! (A test process past the deadline aborts: `host::hold_deadline`.)

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gpu_test_permit::__private::host::recorded_hangs;

use crate::util::{cli, tempdir};

/// `run`'s exit code when it ended its command at the hold deadline.
const HOLD_TIMEOUT_EXIT: i32 = 124;

/// Whether process `pid` is gone within `within` (a zombie not yet reaped counts as gone).
fn gone_within(pid: libc::pid_t, within: Duration) -> bool {
    let give_up = Instant::now() + within;
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // The state follows the command name in parentheses: `Z` for a zombie.
        let alive = state.is_some_and(|s| !s.rsplit(')').next().unwrap_or("").starts_with(" Z"));
        if !alive {
            return true;
        }
        if Instant::now() > give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes killed when the test ends, whatever it found.
struct Reap(Vec<libc::pid_t>);

impl Drop for Reap {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill(2) on processes this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// `run -- sh -c SCRIPT` with a hold deadline of `deadline`, no terminal attached. The script
/// prints pids on its first line, which are returned.
fn run_sh(dir: &Path, deadline: &str, script: &str) -> (Child, Vec<libc::pid_t>) {
    run_sh_with(cli(dir, 1), deadline, script)
}

/// [`run_sh`] with the CLI command `cli` (its environment set up by the caller).
fn run_sh_with(mut cli: Command, deadline: &str, script: &str) -> (Child, Vec<libc::pid_t>) {
    let mut run = cli
        .env("GPU_TEST_PERMIT_HOLD_TIMEOUT", deadline)
        .args(["run", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pids = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    (run, pids)
}

/// Waits up to `within` for `child` to exit; its status and standard error. The error stream
/// is read on a thread and taken as far as it came: a process the command left behind may
/// hold it open.
fn exit_within(child: &mut Child, within: Duration) -> Option<(ExitStatus, String)> {
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        let _ = tx.send(err);
    });
    let give_up = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let err = rx
                .recv_timeout(Duration::from_secs(2))
                .unwrap_or_else(|_| "(standard error still open)".into());
            return Some((status, err));
        }
        if Instant::now() > give_up {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the one slot of `dir` is free: `hold` gets it at once.
fn slot_is_free(dir: &Path) -> bool {
    cli(dir, 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "2s")
        .args(["hold", "--for", "10ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn run_ends_its_command_and_what_it_started_at_the_hold_deadline_and_records_the_hang() {
    let dir = tempdir();
    let script = "sleep 30 & echo $$ $!; wait";
    let started = Instant::now();
    let (mut run, pids) = run_sh(dir.path(), "1s", script);
    let _reap = Reap(pids.clone());
    let (shell, sleep) = (pids[0], pids[1]);
    let ended = exit_within(&mut run, Duration::from_secs(15));
    let elapsed = started.elapsed();
    let _ = run.kill();
    let (status, err) = ended.expect("run did not end at the hold deadline");
    assert_eq!(status.code(), Some(HOLD_TIMEOUT_EXIT), "{status}: {err}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
    assert!(
        gone_within(shell, Duration::from_secs(2)),
        "the command still runs"
    );
    assert!(
        gone_within(sleep, Duration::from_secs(2)),
        "what the command started still runs"
    );
    assert!(slot_is_free(dir.path()), "the slot is still taken");
    assert!(
        err.contains(&format!(
            "HOLD TIMEOUT: command `sh -c {script}` (pid {shell})"
        )) && err.contains("past GPU_TEST_PERMIT_HOLD_TIMEOUT=1s")
            && err.contains("N = 1 permit(s) per GPU x 1 GPU(s)")
            && err.contains("SIGTERM to its process group")
            && err.contains("exiting with 124"),
        "{err}"
    );
    assert!(!err.contains("Aborting"), "{err}");
    let hangs = recorded_hangs(dir.path());
    assert_eq!(hangs.len(), 1, "{hangs:?}");
    let hang = &hangs[0];
    assert_eq!(hang.test, format!("sh -c {script}"));
    assert_eq!(hang.pid, Some(shell as u32));
    assert_eq!(hang.units, Some(1));
    assert_eq!(hang.n(), 1);
    assert!(hang.held_ms >= 1000, "{hang:?}");
}

#[test]
fn run_kills_a_command_that_ignores_sigterm_after_the_grace() {
    let dir = tempdir();
    let started = Instant::now();
    let (mut run, pids) = run_sh(
        dir.path(),
        "500ms",
        "trap '' TERM; echo $$; while :; do sleep 1; done",
    );
    let _reap = Reap(pids.clone());
    let ended = exit_within(&mut run, Duration::from_secs(20));
    let elapsed = started.elapsed();
    let _ = run.kill();
    let (status, err) = ended.expect("run did not end its command");
    assert_eq!(status.code(), Some(HOLD_TIMEOUT_EXIT), "{status}: {err}");
    // The deadline, then five seconds' grace.
    assert!(elapsed >= Duration::from_secs(5), "{elapsed:?}");
    assert!(gone_within(pids[0], Duration::from_secs(2)), "{err}");
    assert!(
        err.contains("SIGTERM, then SIGKILL 5s later, to its process group"),
        "{err}"
    );
    assert!(slot_is_free(dir.path()));
    assert_eq!(recorded_hangs(dir.path()).len(), 1);
}

#[test]
fn with_a_hold_deadline_a_signal_run_passes_on_reaches_the_commands_process_group() {
    let dir = tempdir();
    let (mut run, pids) = run_sh(dir.path(), "1m", "sleep 30 & echo $$ $!; wait");
    let _reap = Reap(pids.clone());
    // SAFETY: kill(2) on the `run` this test started.
    unsafe { libc::kill(run.id() as libc::pid_t, libc::SIGTERM) };
    let (status, err) = exit_within(&mut run, Duration::from_secs(10)).expect("run did not end");
    assert!(!status.success(), "{status}: {err}");
    assert!(
        gone_within(pids[1], Duration::from_secs(2)),
        "what the command started still runs"
    );
    assert!(recorded_hangs(dir.path()).is_empty());
}

#[test]
fn hold_for_longer_than_the_hold_deadline_records_no_hang() {
    let dir = tempdir();
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_HOLD_TIMEOUT", "1s")
        .args(["hold", "--for", "2s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("released"));
    assert!(!err.contains("HOLD TIMEOUT"), "{err}");
    assert!(recorded_hangs(dir.path()).is_empty());
}

#[test]
fn the_trace_does_not_trust_a_hang_record_older_than_its_age_limit() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let slots = dir.path().join("slots");
    let traced = |c: &mut Command| {
        c.env("GPU_TEST_PERMIT_TRACE", &trace)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    assert!(
        traced(cli(&slots, 1).args(["hold", "--for", "10ms"]))
            .status
            .success()
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let day = 86_400_000;
    // N = 1 hung 40 days ago, in the older format (no pid, no units).
    let old = now_ms - 40 * day;
    std::fs::write(
        slots.join("gpu0.hangs"),
        format!(
            "{{\"unix_ms\":{old},\"per_gpu\":1,\"gpus\":1,\"test\":\"gpu::old\",\"held_ms\":900}}\n"
        ),
    )
    .unwrap();
    let out = traced(cli(&slots, 1).arg("trace").arg(&trace));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let date = {
        let days = old / day;
        // The same day as the record's, written by the crate's own formatting.
        let probe = gpu_test_permit_cli::records::advice(&recorded_hangs(&slots), now_ms);
        let too_old = probe.too_old.expect("an old record is reported as such");
        assert_eq!(too_old.unix_ms / day, days);
        too_old.date()
    };
    assert!(!text.contains("not advised"), "{text}");
    assert!(
        text.contains(&format!(
            "(a permit hung at N = 1 on {date}, too old to rule N = 2 out)"
        )),
        "{text}"
    );
    assert!(text.contains("suggested N = "), "{text}");
    assert!(!text.contains("suggested N: none"), "{text}");
}

/// The hang record is kept in the state directory, which a reboot does not empty: with the
/// slot directory gone (as `/tmp` is after a reboot), the trace still advises no N at which a
/// permit hung.
#[test]
fn a_hang_is_recorded_in_the_state_directory_and_outlives_the_slot_directory() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let state = dir.path().join("state");
    let trace = dir.path().join("trace.json");
    let with_state = |c: &mut Command| {
        c.env("GPU_TEST_PERMIT_STATE", &state);
    };
    // A hang at N = 1.
    let mut c = cli(&slots, 1);
    with_state(&mut c);
    let (mut run, pids) = run_sh_with(c, "1s", "echo $$; exec sleep 30");
    let _reap = Reap(pids);
    let (status, err) = exit_within(&mut run, Duration::from_secs(15)).expect("run ended");
    assert_eq!(status.code(), Some(HOLD_TIMEOUT_EXIT), "{err}");
    assert!(
        state.join("gpu0.hangs").is_file(),
        "no hang record in the state directory"
    );
    assert!(
        !slots.join("gpu0.hangs").exists(),
        "the hang went to the slot directory"
    );
    // The slot directory is emptied, as a reboot empties /tmp; a trace at N = 1 and 2 later:
    std::fs::remove_dir_all(&slots).unwrap();
    for n in [1, 2] {
        let mut hold = cli(&slots, n);
        with_state(&mut hold);
        let out = hold
            .env("GPU_TEST_PERMIT_TRACE", &trace)
            .args(["hold", "--for", "10ms"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let mut t = cli(&slots, 2);
    with_state(&mut t);
    let out = t.arg("trace").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("(not advised: a permit hung at N = 1 on this host)"),
        "{text}"
    );
    // Without the state directory the record is not found: it was never in the slot directory.
    let out = cli(&slots, 2).arg("trace").arg(&trace).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not advised"));

    // `history` shows it and, asked to, forgets it: then N = 1 may be advised again.
    let history = |extra: &[&str]| {
        let mut c = cli(&slots, 2);
        with_state(&mut c);
        let out = c.arg("history").args(extra).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = history(&[]);
    assert!(
        shown.contains(&format!("in {}", state.display())),
        "{shown}"
    );
    assert!(
        shown.contains("hangs (permits held past GPU_TEST_PERMIT_HOLD_TIMEOUT): 1")
            && shown.contains("N = 1   `sh -c echo $$; exec sleep 30` held"),
        "{shown}"
    );
    assert!(
        shown.contains("the trace advises no N of 1 or more"),
        "{shown}"
    );
    let forgot = history(&["--forget"]);
    assert!(
        forgot.contains("forgot 0 runs, 1 hang and 0 casualties"),
        "{forgot}"
    );
    assert!(history(&[]).contains("hangs (permits held past GPU_TEST_PERMIT_HOLD_TIMEOUT): 0"));
    let mut t = cli(&slots, 2);
    with_state(&mut t);
    let out = t.arg("trace").arg(&trace).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not advised"));
}

/// A process stopped while holding the hang record's lock (as in the middle of recording a
/// hang) delays the next hang's `run` by half a second at most: that hang goes unrecorded,
/// and `run` still ends its command and exits with 124.
#[test]
fn a_stopped_holder_of_the_hang_records_lock_holds_up_no_hang() {
    let dir = tempdir();
    std::fs::write(dir.path().join("gpu0.hangs"), b"").unwrap();
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("gpu0.hangs"))
        .unwrap();
    held.lock().unwrap();
    let started = Instant::now();
    let (mut run, pids) = run_sh(dir.path(), "1s", "echo $$; exec sleep 30");
    let _reap = Reap(pids);
    let (status, err) = exit_within(&mut run, Duration::from_secs(15)).expect("run ended");
    assert_eq!(status.code(), Some(HOLD_TIMEOUT_EXIT), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    drop(held);
    assert!(recorded_hangs(dir.path()).is_empty());
}
