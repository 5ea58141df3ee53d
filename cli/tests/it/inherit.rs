//! A command under `gpu-test-permit run` works inside `run`'s permit
//! (`GPU_TEST_PERMIT_INHERITED`): real processes, real slot files.

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
    // The processes inside run's permit share it through slots of their own beside its slot.
    let shared = pool.slot_dir().expect("the shared slots of run's permit");
    assert!(
        shared
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("gpu0.slot0.inside-"),
        "{shared:?}"
    );
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
    run_child_with(exclusive, &[]).0
}

/// [`run_child`] with more variables for `run` and its command; also returns their stderr.
fn run_child_with(exclusive: bool, env: &[(&str, &std::path::Path)]) -> (Duration, String) {
    let dir = tempdir();
    let mut c = cli(dir.path(), if exclusive { 2 } else { 1 });
    c.envs(env.iter().copied());
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
    (took, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn under_auto_run_chooses_n_and_its_command_works_inside_the_permit_without_choosing() {
    let state = tempdir();
    let (_, stderr) = run_child_with(
        false,
        &[
            (
                "REALIZAR_GPU_TEST_CONCURRENCY",
                std::path::Path::new("auto"),
            ),
            ("GPU_TEST_PERMIT_STATE", state.path()),
        ],
    );
    // `run` chose (one line); the test inside its permit did not choose again.
    assert_eq!(
        stderr.matches("gpu-test-permit: N = ").count(),
        1,
        "{stderr}"
    );
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
    let orphan = crate::util::Orphan::start(dir.path(), 1);
    let waiter = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    let held_early = waiter.held_within(Duration::from_millis(500));
    drop(orphan);
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

/// The processes under one `run` share its units: together they hold at most what `run`
/// holds, with waits, refusals and devices as for any permit.
#[cfg(unix)]
mod shared_units {
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use gpu_test_permit::{AcquireError, PermitPool};

    use crate::util::{Holder, cli, tempdir};

    /// Set for [`inside_child`]: what it does inside `run`'s permit.
    const ROLE: &str = "GTP_INSIDE_ROLE";
    const GAUGE: &str = "GTP_INSIDE_GAUGE";

    /// The child side of the tests below; passes at once when run on its own.
    #[test]
    #[ignore = "a child of the tests in this module"]
    fn inside_child() {
        let Ok(role) = std::env::var(ROLE) else {
            return;
        };
        let pool = PermitPool::global();
        match role.as_str() {
            // One unit at a time through the global pool for 3 s, counted in the gauge
            // against run's one unit.
            "cycle" => {
                let gauge = std::path::PathBuf::from(std::env::var(GAUGE).unwrap());
                let until = Instant::now() + Duration::from_secs(3);
                let mut grants = 0;
                while Instant::now() < until {
                    let p = gpu_test_permit::acquire();
                    crate::cap::enter(&gauge, 1, 1);
                    grants += 1;
                    std::thread::sleep(Duration::from_micros(300));
                    crate::cap::leave(&gauge, 1);
                    drop(p);
                }
                println!("grants {grants}");
            }
            "exclusive" => {
                let e = pool
                    .try_acquire_exclusive_for(Duration::from_secs(1))
                    .unwrap_err();
                assert!(
                    matches!(e, AcquireError::ExclusiveInsideShared { held: 1, .. }),
                    "{e}"
                );
                println!("refused: {e}");
                let e = pool.request().units(2).try_acquire().unwrap_err();
                assert!(matches!(e, AcquireError::TooLarge { .. }), "{e}");
                // What it holds is still its to use.
                assert_eq!(gpu_test_permit::acquire().units(), 1);
            }
            // Inside `run --exclusive` on 2 GPUs with N = 2: one unit held on each GPU leaves
            // one free on each, and a 2-unit request must wait rather than take one of each.
            "split" => {
                let take = || std::thread::scope(|s| s.spawn(|| pool.acquire()).join().unwrap());
                let a = take();
                let c = take();
                assert_eq!((a.device(), c.device()), (Some(0), Some(1)));
                let split = std::thread::scope(|s| {
                    s.spawn(|| {
                        pool.request()
                            .units(2)
                            .acquire_for(Duration::from_millis(500))
                    })
                    .join()
                    .unwrap()
                });
                assert!(
                    matches!(split, Err(AcquireError::Timeout(_))),
                    "2 units across GPUs: {:?}",
                    split.map(|p| p.slots())
                );
                drop(a);
                let two = pool
                    .request()
                    .units(2)
                    .acquire_for(Duration::from_secs(5))
                    .unwrap();
                assert_eq!(two.device(), Some(0));
                assert!(two.slots().iter().all(|s| s % 2 == 0), "{:?}", two.slots());
                println!("one GPU per request");
            }
            // A process between run and a grandchild that closes the descriptors it was
            // given, as Python's subprocess does by default.
            "close" => {
                let permit = gpu_test_permit::config::InheritedPermit::parse(
                    &std::env::var_os("GPU_TEST_PERMIT_INHERITED").unwrap(),
                )
                .unwrap();
                let fds: Vec<i32> = permit.slots.iter().map(|s| s.fd as i32).collect();
                let mut c = Command::new(crate::util::bin());
                c.args(["hold", "--for", "10ms"]);
                // SAFETY: close(2) only, between fork and exec.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
                        for &fd in &fds {
                            libc::close(fd);
                        }
                        Ok(())
                    });
                }
                let out = c.output().unwrap();
                println!("grandchild {}", out.status);
                println!("{}", String::from_utf8_lossy(&out.stdout));
                println!("{}", String::from_utf8_lossy(&out.stderr));
            }
            "plain" => match pool.try_acquire_for(Duration::from_secs(5)) {
                Ok(p) => println!("acquired {:?}", p.slots()),
                Err(e) => println!("refused: {e}"),
            },
            other => panic!("unknown role {other}"),
        }
    }

    /// `run` with N = `n` and `run_args`, around `command` (whose environment `run` gets
    /// too); returns whether it succeeded, and its output.
    fn run(dir: &Path, n: usize, run_args: &[&str], command: &mut Command) -> (bool, String) {
        let mut c = cli(dir, n);
        c.env("GPU_TEST_PERMIT_TIMEOUT", "30s")
            .arg("run")
            .args(run_args)
            .arg("--")
            .arg(command.get_program())
            .args(command.get_args());
        for (k, v) in command.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let out = c.stdin(Stdio::null()).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn child(role: &str) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([
            "inherit::shared_units::inside_child",
            "--exact",
            "--nocapture",
            "--include-ignored",
        ])
        .env(ROLE, role);
        c
    }

    /// Four processes that use the crate, started at once under `run` holding one unit:
    /// never more than one of them holds it at a time, and each gets its turns.
    #[test]
    fn descendants_of_run_share_its_units_and_never_hold_more_together() {
        let dir = tempdir();
        let gauge = dir.path().join("gauge");
        let exe = std::env::current_exe().unwrap();
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(
                "for i in 1 2 3 4; do \"$0\" inherit::shared_units::inside_child --exact \
                 --nocapture --include-ignored & done; wait",
            )
            .arg(&exe)
            .env(ROLE, "cycle")
            .env(GAUGE, &gauge);
        let slots = dir.path().join("slots");
        let (ok, out) = run(&slots, 1, &[], &mut sh);
        assert!(ok, "{out}");
        let grants: Vec<usize> = out
            .lines()
            .filter_map(|l| {
                l.split_once("grants ")?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(grants.len(), 4, "{out}");
        assert!(grants.iter().all(|&g| g > 0), "{grants:?}");
        assert!(!out.contains("VIOLATION"), "{out}");
    }

    /// Inside one unit of N = 4 (three other processes hold the rest), an exclusive request
    /// is refused at once with the reason, as is one of more units than inherited.
    #[test]
    fn an_exclusive_request_inside_a_shared_inherited_permit_is_refused() {
        let dir = tempdir();
        let others: Vec<Holder> = (0..3)
            .map(|_| {
                let mut c = cli(dir.path(), 4);
                c.arg("hold");
                Holder::spawn(c)
            })
            .collect();
        for h in &others {
            assert!(h.held_within(Duration::from_secs(20)));
        }
        let (ok, out) = run(dir.path(), 4, &[], &mut child("exclusive"));
        assert!(ok, "{out}");
        assert!(
            out.contains(
                "refused: asked for an exclusive GPU permit, but this process works \
                          inside a shared permit of 1 unit(s)"
            ),
            "{out}"
        );
    }

    /// Inside `run --exclusive` on two GPUs, the units of one request come from one GPU.
    #[test]
    fn inside_run_exclusive_a_weighted_request_takes_its_units_from_one_gpu() {
        let dir = tempdir();
        let mut c = child("split");
        // Copied onto run too (see `run`). Spread: the two one-unit permits take one unit
        // of each GPU.
        c.env("GPU_TEST_PERMIT_GPUS", "2")
            .env("GPU_TEST_PERMIT_PLACEMENT", "spread");
        let (ok, out) = run(dir.path(), 2, &["--exclusive"], &mut c);
        assert!(ok, "{out}");
        assert!(out.contains("one GPU per request"), "{out}");
    }

    /// A grandchild whose descriptor a process in between closed fails at once and says so,
    /// instead of waiting for its own ancestor's slot (N = 1) or taking another (N = 2).
    #[test]
    fn a_descriptor_closed_between_run_and_its_grandchild_fails_at_once_and_says_so() {
        for n in [1, 2] {
            let dir = tempdir();
            let started = Instant::now();
            let (ok, out) = run(dir.path(), n, &[], &mut child("close"));
            assert!(ok, "{out}");
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "N = {n}: {out}"
            );
            assert!(
                out.contains("grandchild exit status:")
                    && !out.contains("grandchild exit status: 0"),
                "N = {n}: {out}"
            );
            assert!(
                !out.contains("held pid="),
                "N = {n}: a second slot was taken: {out}"
            );
            assert!(
                out.contains("closed the descriptor") && out.contains("pass_fds"),
                "N = {n}: {out}"
            );
        }
    }

    /// The processes inside one permit share it through one directory per user; should
    /// another user's be in use for the same permit (processes of two users under one `run`),
    /// a process refuses rather than share the units apart from them. Stand-in: another
    /// user's directory whose layout file is locked, as its users keep it.
    #[test]
    fn processes_of_another_user_inside_the_same_permit_are_not_given_its_units_again() {
        let dir = tempdir();
        let other = dir.path().join("gpu0.slot0.inside-4000000000");
        std::fs::create_dir(&other).unwrap();
        let layout = std::fs::File::create(other.join("gpu0.layout")).unwrap();
        layout.lock_shared().unwrap();
        let (ok, out) = run(dir.path(), 1, &[], &mut child("plain"));
        assert!(ok, "{out}");
        assert!(
            out.contains("refused: processes of another user work inside the permit"),
            "{out}"
        );
        drop(layout);
        let (ok, out) = run(dir.path(), 1, &[], &mut child("plain"));
        assert!(ok && out.contains("acquired [0]"), "{out}");
    }

    /// Should this user's own directory for the permit be in use with another layout (a
    /// process of another tree left in it, or a forged one), a process refuses rather than
    /// work in more units than the parent holds. Stand-in: a layout of 3 slots, locked as its
    /// users keep it, where run holds 1.
    #[test]
    fn a_share_directory_serving_another_layout_is_refused() {
        let dir = tempdir();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let share = dir.path().join(format!("gpu0.slot0.inside-{uid}"));
        std::fs::create_dir(&share).unwrap();
        std::fs::set_permissions(&share, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let mut record = br#"{"v":1,"per_gpu":3,"gpus":1}"#.to_vec();
        record.push(b'\n');
        record.resize(256, b' ');
        std::fs::write(share.join("gpu0.layout"), &record).unwrap();
        let layout = std::fs::File::open(share.join("gpu0.layout")).unwrap();
        layout.lock_shared().unwrap();
        let (ok, out) = run(dir.path(), 1, &[], &mut child("plain"));
        assert!(ok, "{out}");
        assert!(
            out.contains("refused: the directory") && out.contains("serves"),
            "{out}"
        );
        drop(layout);
    }
}
