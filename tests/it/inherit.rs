//! A command under `gpu-test-permit run` works inside `run`'s permit
//! (`GPU_TEST_PERMIT_INHERITED`): real processes, real slot files.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gpu_test_permit::{AcquireError, PermitKind};

use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Set for the child run of [`inherited_permit_child`]: `shared` or `exclusive`, the kind of
/// permit `run` holds for it.
const CHILD: &str = "GTP_INHERIT_CHILD";

/// The child side of the tests below; passes at once when run on its own.
#[test]
fn inherited_permit_child() {
    let Some(kind) = std::env::var_os(CHILD) else {
        return;
    };
    let asked = Instant::now();
    let permit = gpu_test_permit::acquire();
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    let pool = gpu_test_permit::PermitPool::global();
    assert_eq!(pool.slot_dir(), None, "the pool must not use host slots");
    if kind == "exclusive" {
        // `run --exclusive` with N = 2 holds both slots: two permits here, on slots 0 and 1.
        assert_eq!(pool.capacity(), 2);
        let other = std::thread::scope(|s| {
            s.spawn(|| {
                let p = pool.try_acquire(PermitKind::Shared).expect("a second unit");
                p.slots()
            })
            .join()
            .unwrap()
        });
        let mut slots = [permit.slots()[0], other[0]];
        slots.sort();
        assert_eq!(slots, [0, 1]);
    } else {
        // One slot: this permit, on run's slot and device; nothing left for another thread.
        assert_eq!(pool.capacity(), 1);
        assert_eq!(permit.slots(), [0]);
        assert_eq!(permit.device(), Some(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(matches!(
                    pool.try_acquire(PermitKind::Shared),
                    Err(AcquireError::WouldBlock)
                ));
            });
        });
    }
    println!("inside run's permit");
}

/// Runs the child test under `run` and checks that it ran inside `run`'s permit; returns how
/// long that took.
fn run_child(exclusive: bool) -> Duration {
    let dir = tempdir();
    let mut c = cli(dir.path(), if exclusive { 2 } else { 1 });
    c.env("GPU_TEST_PERMIT_TIMEOUT", "30s")
        .env(CHILD, if exclusive { "exclusive" } else { "shared" })
        .arg("run");
    if exclusive {
        c.arg("--exclusive");
    }
    c.arg("--").arg(std::env::current_exe().unwrap()).args([
        "inherit::inherited_permit_child",
        "--exact",
        "--nocapture",
    ]);
    let start = Instant::now();
    let out = c.output().unwrap();
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("inside run's permit"), "{stdout}");
    took
}

#[test]
fn a_test_that_uses_the_crate_under_run_with_one_permit_runs_at_once() {
    let took = run_child(false);
    // It would have waited for its own parent until the 30 s deadline.
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn under_run_exclusive_the_command_gets_every_slot() {
    run_child(true);
}

#[test]
fn the_slot_stays_locked_while_the_command_lives_after_run_is_killed() {
    let dir = tempdir();
    let mut run = cli(dir.path(), 1)
        .args(["run", "--", "sh", "-c", "echo $$; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(run.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let command: libc::pid_t = line.trim().parse().unwrap();
    run.kill().unwrap();
    run.wait().unwrap();
    let waiter = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    let held_early = waiter.held_within(Duration::from_millis(500));
    // SAFETY: kill(2) on the pid of the command, which the test started.
    unsafe { libc::kill(command, libc::SIGKILL) };
    assert!(!held_early, "the slot was free while the command still ran");
    assert!(
        waiter.held_within(LONG),
        "the slot stayed taken after the command died"
    );
}

/// `hold`, started by a shell that opened the slot file as descriptor 7 (a new open file
/// description, which holds no lock), with a hand-made `GPU_TEST_PERMIT_INHERITED` naming it.
fn hold_with_forged_variable(dir: &std::path::Path) -> Holder {
    use std::os::unix::fs::MetadataExt;
    let slot = dir.join("gpu0.slot0");
    let meta = std::fs::metadata(&slot).unwrap();
    let value = format!(
        "1:1x1:shared:0=7/{}/{}:{}",
        meta.dev(),
        meta.ino(),
        dir.display()
    );
    let mut sh = std::process::Command::new("sh");
    crate::util::clear_permit_env(&mut sh);
    sh.env("GPU_TEST_PERMIT_DIR", dir)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "30s")
        .env("GPU_TEST_PERMIT_INHERITED", value)
        .arg("-c")
        .arg(format!(
            "exec 7<'{}'; exec '{}' hold",
            slot.display(),
            crate::util::bin().display()
        ));
    Holder::spawn(sh)
}

#[test]
fn a_forged_or_stale_variable_is_ignored_with_one_line_and_the_cap_holds() {
    let dir = tempdir();
    // Make the slot file, and hold it.
    let first = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    assert!(first.held_within(LONG));
    // The descriptor is the slot file, but not the description that holds its lock: the
    // forger waits like anyone else.
    let forger = hold_with_forged_variable(dir.path());
    assert!(
        !forger.held_within(Duration::from_millis(500)),
        "a forged variable got past the cap"
    );
    let (status, _) = first.release();
    assert!(status.success());
    assert!(forger.held_within(LONG));
    let (status, err) = forger.release();
    assert!(status.success(), "{err}");
    let notices: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("GPU_TEST_PERMIT_INHERITED"))
        .collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(notices[0].contains("which another process holds"), "{err}");

    // Now nobody holds the slot: a stale variable (its holder released) is ignored too.
    let stale = hold_with_forged_variable(dir.path());
    assert!(stale.held_within(LONG));
    let (status, err) = stale.release();
    assert!(status.success(), "{err}");
    assert!(err.contains("which nobody holds now"), "{err}");
}

#[test]
fn a_malformed_variable_is_ignored_with_one_line() {
    let dir = tempdir();
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_INHERITED", "7:7:7")
        .args(["hold", "--for", "10ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("gpu-test-permit: ignoring the permit inherited through GPU_TEST_PERMIT_INHERITED: it has fewer than five"),
        "{err}"
    );
}
