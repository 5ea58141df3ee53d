//! Host slots: the cap across pools (separate open files, like separate processes) and the
//! slot directory's checks.

use std::thread;
use std::time::Duration;

use gpu_test_permit::config::Config;
use gpu_test_permit::host::HostError;
use gpu_test_permit::{AcquireError, PermitKind, PermitPool};

use crate::util::{pool, tempdir};

#[test]
fn two_pools_on_one_directory_share_the_cap() {
    let dir = tempdir();
    let a = pool(dir.path(), 1);
    let b = pool(dir.path(), 1);
    let held = a.try_acquire_for(Duration::from_millis(100)).unwrap();
    assert_eq!(held.slots(), [0]);
    let err = b.try_acquire_for(Duration::from_millis(150)).unwrap_err();
    let AcquireError::Timeout(t) = err else {
        panic!("{err}")
    };
    // The other "process" is the same pid here; the host record names the holding test.
    assert_eq!(t.concurrency, 1);
    assert!(matches!(
        b.try_acquire(PermitKind::Shared),
        Err(AcquireError::WouldBlock)
    ));
    drop(held);
    let p = b.try_acquire_for(Duration::from_millis(100)).unwrap();
    assert_eq!(p.slots(), [0]);
}

#[test]
fn a_waiting_pool_wakes_quickly_when_the_other_releases() {
    let dir = tempdir();
    let a = pool(dir.path(), 1);
    let b = pool(dir.path(), 1);
    let held = a.acquire();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let p = b.acquire();
            p.held_for()
        });
        thread::sleep(Duration::from_millis(100));
        let released = std::time::Instant::now();
        drop(held);
        waiter.join().unwrap();
        // Generous bound: the change watch wakes in microseconds, the fallback re-check in 25 ms.
        assert!(released.elapsed() < Duration::from_secs(2));
    });
}

#[test]
fn exclusive_takes_every_slot_of_the_host() {
    let dir = tempdir();
    let a = pool(dir.path(), 3);
    let b = pool(dir.path(), 3);
    let all = a.acquire_exclusive();
    assert_eq!(all.slots(), [0, 1, 2]);
    assert!(matches!(
        b.try_acquire(PermitKind::Shared),
        Err(AcquireError::WouldBlock)
    ));
    drop(all);
    let one = b.acquire();
    // An exclusive request waits for the held slot, then gets all three.
    thread::scope(|s| {
        let e = s.spawn(|| {
            a.try_acquire_exclusive_for(Duration::from_secs(10))
                .map(|p| p.slots())
        });
        thread::sleep(Duration::from_millis(50));
        drop(one);
        assert_eq!(e.join().unwrap().unwrap(), [0, 1, 2]);
    });
}

fn build_err(dir: &std::path::Path) -> String {
    match PermitPool::builder().slot_dir(dir).build() {
        Ok(_) => panic!("{} should be refused", dir.display()),
        Err(e @ HostError::Directory(_)) => e.to_string(),
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[cfg(unix)]
#[test]
fn unusable_and_insecure_directories_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempdir();

    let file = root.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let msg = build_err(&file);
    assert!(msg.contains("is not a directory"), "{msg}");

    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let msg = build_err(&link);
    assert!(msg.contains("symbolic link"), "{msg}");

    let open = root.path().join("world-writable");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let msg = build_err(&open);
    assert!(
        msg.contains("writable by everyone without the sticky bit") && msg.contains("chmod +t"),
        "{msg}"
    );
    // With the sticky bit (like /tmp) a shared directory is fine.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    PermitPool::builder().slot_dir(&open).build().unwrap();

    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me == 0 {
        // Root may create files anywhere its permissions allow; a directory owned by another
        // user is refused, and sysfs is a root-owned directory nobody can create files in.
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let msg = build_err(&theirs);
        assert!(msg.contains("owned by uid 65534"), "{msg}");
        let msg = build_err(std::path::Path::new("/sys/kernel"));
        assert!(msg.contains("not writable"), "{msg}");
    } else {
        let ro = root.path().join("read-only");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
        let msg = build_err(&ro);
        assert!(msg.contains("not writable"), "{msg}");
        // "/" is owned by root, not by us, but root-owned directories are allowed: it fails
        // on writability instead.
    }
}

#[test]
fn missing_directories_are_created_private() {
    let root = tempdir();
    let dir = root.path().join("a/b/slots");
    let pool = PermitPool::builder().slot_dir(&dir).build().unwrap();
    assert_eq!(pool.slot_dir(), Some(dir.as_path()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

#[test]
fn a_relative_directory_from_the_environment_is_refused_not_replaced() {
    let cfg = Config::from_lookup(|n| (n == "GPU_TEST_PERMIT_DIR").then(|| "slots".into()));
    let gpu_test_permit::config::SlotDir::Invalid(msg) = cfg.slot_dir else {
        panic!()
    };
    assert!(msg.contains("not an absolute path"));
}

// Cross-process cases: real `gpu-test-permit hold` processes sharing one directory.

#[cfg(unix)]
mod processes {
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use gpu_test_permit::AcquireError;

    use crate::util::{Holder, cli, signal, tempdir};

    fn hold(dir: &Path, n: usize, env: &[(&str, &str)], args: &[&str]) -> Holder {
        let mut c = cli(dir, n);
        c.arg("hold").args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Holder::spawn(c)
    }

    fn pid(h: &Holder) -> u32 {
        h.child.id()
    }

    fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + timeout;
        while !f() {
            assert!(Instant::now() < end, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn waiting(dir: &Path, pid: u32) -> bool {
        gpu_test_permit::__private::host::status(dir)
            .unwrap()
            .waiters
            .iter()
            .any(|w| w.pid == pid)
    }

    /// A holder that gives up after `timeout`: its exit status and standard error.
    fn timed_out_hold(dir: &Path, n: usize, timeout: &str) -> (std::process::ExitStatus, String) {
        let out = cli(dir, n)
            .env("GPU_TEST_PERMIT_TIMEOUT", timeout)
            .args(["hold", "--for", "1ms"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn a_stopped_waiter_at_the_head_does_not_keep_a_free_slot_from_others() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        let b = hold(dir.path(), 1, &[], &[]);
        let b_pid = pid(&b);
        wait_until("the second holder waits", Duration::from_secs(20), || {
            waiting(dir.path(), b_pid)
        });
        signal(b_pid, libc::SIGSTOP);
        // Status shows the stopped head (once the signal has landed).
        let mut seen = None;
        wait_until(
            "status shows the stopped head",
            Duration::from_secs(10),
            || {
                let s = gpu_test_permit::__private::host::status(dir.path()).unwrap();
                let stopped = s
                    .head
                    .as_ref()
                    .is_some_and(|h| h.request.pid == b_pid && h.stopped);
                seen = Some(s);
                stopped
            },
        );
        let seen = seen.unwrap();
        assert_eq!(
            seen.layout,
            Some(gpu_test_permit::host::Layout {
                per_gpu: 1,
                gpus: 1
            })
        );
        let (status, _) = a.release();
        assert!(status.success());
        // The slot is free and the head of the queue cannot take it: a third process must.
        let c = hold(dir.path(), 1, &[("GPU_TEST_PERMIT_TIMEOUT", "30s")], &[]);
        let took = c.held_within(Duration::from_secs(15));
        signal(b_pid, libc::SIGCONT);
        assert!(took, "a free slot stayed free behind a stopped waiter");
        // Resumed, the stopped waiter still gets its turn.
        let (status, _) = c.release();
        assert!(status.success());
        assert!(b.held_within(Duration::from_secs(20)));
        assert!(b.release().0.success());
    }

    #[test]
    fn a_timed_out_wait_names_the_holder_and_the_stopped_head_of_the_queue() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        let b = hold(dir.path(), 1, &[], &["--exclusive"]);
        let b_pid = pid(&b);
        wait_until("the second holder waits", Duration::from_secs(20), || {
            waiting(dir.path(), b_pid)
        });
        signal(b_pid, libc::SIGSTOP);
        let (status, err) = timed_out_hold(dir.path(), 1, "500ms");
        signal(b_pid, libc::SIGCONT);
        assert!(!status.success(), "{err}");
        assert!(err.contains(&format!("pid {})", pid(&a))), "{err}");
        assert!(
            err.contains(&format!("pid {}) waiting", b_pid))
                && err
                    .contains("an exclusive permit, at the head of the queue, its process stopped"),
            "{err}"
        );
        drop(b);
    }

    #[test]
    fn a_timed_out_wait_names_live_holders_only_and_a_waiting_exclusive_request() {
        let dir = tempdir();
        let d = hold(dir.path(), 2, &[], &[]);
        assert!(d.held_within(Duration::from_secs(20)));
        let mut killed = hold(dir.path(), 2, &[], &[]);
        assert!(killed.held_within(Duration::from_secs(20)));
        let killed_pid = pid(&killed);
        // Killed: its slot is free again, with its record still in the file.
        killed.child.kill().unwrap();
        killed.child.wait().unwrap();
        let e = hold(dir.path(), 2, &[], &["--exclusive"]);
        let e_pid = pid(&e);
        wait_until(
            "the exclusive request waits",
            Duration::from_secs(20),
            || waiting(dir.path(), e_pid),
        );
        // The exclusive request holds no slot while it waits: status shows it waiting, and
        // one slot free (looked at again where it caught the request in the microseconds of a
        // re-check, in which it locks the free slot to see that it cannot have them all).
        let mut status = gpu_test_permit::__private::host::status(dir.path()).unwrap();
        for _ in 0..50 {
            if status.slots.iter().filter(|s| s.held).count() == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            status = gpu_test_permit::__private::host::status(dir.path()).unwrap();
        }
        assert_eq!(
            status.slots.iter().filter(|s| s.held).count(),
            1,
            "{status:?}"
        );
        let (code, err) = timed_out_hold(dir.path(), 2, "500ms");
        assert!(!code.success(), "{err}");
        assert!(err.contains(&format!("pid {})", pid(&d))), "{err}");
        assert!(
            err.contains(&format!("pid {}) waiting", e_pid)) && err.contains("head of the queue"),
            "{err}"
        );
        assert!(!err.contains(&format!("pid {killed_pid})")), "{err}");
        drop(e);
    }

    #[test]
    fn processes_configured_with_different_n_share_the_directory_layout() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &["--exclusive"]);
        assert!(a.held_within(Duration::from_secs(20)));
        // N = 2 would see a second slot; the directory serves N = 1, and its one slot is taken.
        let b = hold(dir.path(), 2, &[], &[]);
        assert!(!b.held_within(Duration::from_millis(700)), "the cap broke");
        // Two GPUs would see a second slot too.
        let c = hold(dir.path(), 1, &[("GPU_TEST_PERMIT_GPUS", "2")], &[]);
        assert!(!c.held_within(Duration::from_millis(300)), "the cap broke");
        assert!(a.release().0.success());
        assert!(b.held_within(Duration::from_secs(20)));
        let (status, err) = b.release();
        assert!(status.success());
        assert!(
            err.contains("N = 1 permit(s) per GPU x 1 GPU(s)")
                && err.contains("asked for N = 2 permit(s) per GPU x 1 GPU(s)"),
            "{err}"
        );
        assert!(c.held_within(Duration::from_secs(20)));
        let (_, err) = c.release();
        assert!(
            err.contains("asked for N = 1 permit(s) per GPU x 2 GPU(s)"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_nobody_uses_takes_the_new_layout() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        assert!(a.release().0.success());
        let b = hold(dir.path(), 2, &[], &["--exclusive"]);
        assert!(b.held_within(Duration::from_secs(20)));
        let (status, err) = b.release();
        assert!(status.success() && !err.contains("asked for"), "{err}");
    }

    #[test]
    fn stale_wait_files_of_killed_processes_are_swept() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        let mut dead = hold(dir.path(), 1, &[], &[]);
        let dead_pid = pid(&dead);
        let live = hold(dir.path(), 1, &[], &[]);
        let live_pid = pid(&live);
        wait_until("both wait", Duration::from_secs(20), || {
            waiting(dir.path(), dead_pid) && waiting(dir.path(), live_pid)
        });
        dead.child.kill().unwrap();
        dead.child.wait().unwrap();
        let stale = dir.path().join(format!("gpu0.wait.{dead_pid}"));
        let alive = dir.path().join(format!("gpu0.wait.{live_pid}"));
        assert!(stale.exists() && alive.exists());
        // A process that opens the directory leaves them; its first wait sweeps them.
        let pool = crate::util::pool(dir.path(), 1);
        assert!(stale.exists(), "opening the directory scanned it");
        assert!(matches!(
            pool.try_acquire_for(Duration::from_millis(200)),
            Err(AcquireError::Timeout(_))
        ));
        assert!(!stale.exists(), "a dead process's wait file was left");
        assert!(alive.exists(), "a live waiter's file was removed");
        drop(live);
        drop(a);
    }

    #[test]
    fn a_corrupt_layout_file_is_rewritten_when_unused_and_refused_when_in_use() {
        let dir = tempdir();
        let layout = dir.path().join("gpu0.layout");
        std::fs::write(&layout, b"{\"v\":1,\"per_gpu\":1e300,\"gpus\":-1}\x1b[2J").unwrap();
        // Nobody uses the directory: the next process lays it out anew.
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        // In use: garbage written now cannot be fixed under the users' feet.
        std::fs::write(&layout, b"garbage").unwrap();
        let err = gpu_test_permit::PermitPool::builder()
            .concurrency(1)
            .slot_dir(dir.path())
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is corrupt") && err.contains("GPU_TEST_PERMIT_DIR"),
            "{err}"
        );
        assert!(a.release().0.success());
        crate::util::pool(dir.path(), 1);
    }

    #[test]
    fn a_timed_out_wait_says_when_a_holder_is_stopped() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        signal(pid(&a), libc::SIGSTOP);
        let (status, err) = timed_out_hold(dir.path(), 1, "300ms");
        signal(pid(&a), libc::SIGCONT);
        assert!(!status.success(), "{err}");
        assert!(
            err.contains(&format!("pid {}) for", pid(&a))) && err.contains("its process stopped"),
            "{err}"
        );
    }

    fn shell_hold(dir: &Path, n: usize, ulimit: &str) -> std::process::Output {
        let mut c = cli(dir, n);
        let program = c.get_program().to_owned();
        c.env("GTP_BIN", program);
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(format!(
                "ulimit {ulimit} && exec \"$GTP_BIN\" hold --for 1ms"
            ))
            .stdin(Stdio::null());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        sh.output().unwrap()
    }

    #[test]
    fn a_concurrency_beyond_the_descriptor_limit_is_refused_before_any_slot_file_is_made() {
        let dir = tempdir();
        let out = shell_hold(dir.path(), 1024, "-n 256");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("needs 1029 open files") && err.contains("ulimit -n"),
            "{err}"
        );
        assert_eq!(
            crate::util::files_named(dir.path(), "gpu0.slot"),
            0,
            "slot files were left behind"
        );
    }

    #[test]
    fn the_soft_descriptor_limit_is_raised_when_the_hard_one_allows() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        if lim.rlim_max < 2048 {
            eprintln!(
                "skipped: the hard descriptor limit {} is below 2048",
                lim.rlim_max
            );
            return;
        }
        let dir = tempdir();
        let out = shell_hold(dir.path(), 1024, "-Sn 256");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("held"));
    }

    /// `hold` started with all but 8 of its descriptors taken (the limit far above what N = 8
    /// needs, so the budget does not count them up front): opening the slots meets EMFILE,
    /// which is explained as a refused layout is, or cured by raising the soft limit.
    #[test]
    fn a_process_out_of_descriptors_while_opening_the_slots_is_told_why_or_raises_its_limit() {
        use std::os::unix::process::CommandExt;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        let soft: u64 = 1200;
        for hard in [soft, 4096] {
            if lim.rlim_max < hard {
                eprintln!("skipped hard = {hard}: the hard limit is {}", lim.rlim_max);
                continue;
            }
            let dir = tempdir();
            let mut c = cli(dir.path(), 8);
            c.args(["hold", "--for", "1ms"]).stdin(Stdio::null());
            // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, dup2).
            unsafe {
                c.pre_exec(move || {
                    let l = libc::rlimit {
                        rlim_cur: soft as libc::rlim_t,
                        rlim_max: hard as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    for fd in 3..(soft as i32 - 8) {
                        libc::dup2(2, fd);
                    }
                    Ok(())
                });
            }
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if hard == soft {
                assert!(!out.status.success(), "{err}");
                assert!(
                    err.contains("needs 13 open files") && err.contains("ulimit -n"),
                    "{err}"
                );
            } else {
                assert!(out.status.success(), "{err}");
                assert!(String::from_utf8_lossy(&out.stdout).starts_with("held"));
            }
        }
    }

    /// Copies of standard input until the process may open no more descriptors.
    fn take_every_descriptor() -> Vec<i32> {
        let mut taken = Vec::new();
        loop {
            // SAFETY: dup of standard input; the copies are closed by `give_back`.
            let fd = unsafe { libc::dup(0) };
            if fd < 0 {
                return taken;
            }
            taken.push(fd);
        }
    }

    fn give_back(taken: Vec<i32>) {
        for fd in taken {
            // SAFETY: closes copies made by `take_every_descriptor`.
            unsafe { libc::close(fd) };
        }
    }

    const NO_SPARE_CHILD: &str = "GTP_NO_SPARE_CHILD_DIR";

    /// Runs in a child of this test binary: a pool of two whose second slot no process has
    /// made yet; with every descriptor taken after the pool is made, it still makes and
    /// takes that slot at once.
    #[test]
    #[ignore = "run by a_process_out_of_descriptors_makes_a_slot_file_it_never_opened"]
    fn no_spare_child() {
        let Some(dir) = std::env::var_os(NO_SPARE_CHILD) else {
            return;
        };
        // No raising the soft limit either: the hard one is lowered to it.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid rlimit to read into and to set from.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
            lim.rlim_max = lim.rlim_cur;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
        let pool = crate::util::pool(Path::new(&dir), 2);
        let taken = take_every_descriptor();
        let got = pool.try_acquire(gpu_test_permit::PermitKind::Shared);
        let made = Path::new(&dir).join("gpu0.slot1").exists();
        give_back(taken);
        assert!(made, "the second slot's file was made");
        drop(got.unwrap());
        println!("no-spare-child-ok");
    }

    #[test]
    fn a_process_out_of_descriptors_makes_a_slot_file_it_never_opened() {
        let dir = tempdir();
        let a = hold(dir.path(), 2, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        // The holder laid the directory out and made both slot files; it keeps open only the
        // one it holds. Without slot 1's file, the child has to make it.
        std::fs::remove_file(dir.path().join("gpu0.slot1")).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "host::processes::no_spare_child",
                "--nocapture",
                "--include-ignored",
                "--test-threads",
                "1",
            ])
            .env(NO_SPARE_CHILD, dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("no-spare-child-ok"),
            "{text}\n{err}"
        );
        assert!(a.release().0.success());
    }

    #[test]
    fn a_process_that_takes_one_permit_opens_one_slot_file_and_status_shows_every_slot() {
        let dir = tempdir();
        let slot_files_open = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .filter(|target| {
                    target.parent() == Some(dir.path())
                        && target
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("gpu0.slot"))
                })
                .collect::<Vec<_>>()
        };
        // The first pool lays the directory out and makes its slot files, keeping none open.
        let first = crate::util::pool(dir.path(), 8);
        // A pool that adopts the layout, as every later test process does, opens the one slot
        // file it takes.
        let pool = crate::util::pool(dir.path(), 8);
        let permit = pool.acquire();
        if cfg!(target_os = "linux") {
            assert_eq!(slot_files_open(), [dir.path().join("gpu0.slot0")]);
        }
        // A slot of the layout whose file nobody has made is free.
        for i in 2..8 {
            std::fs::remove_file(dir.path().join(format!("gpu0.slot{i}"))).unwrap();
        }
        let s = gpu_test_permit::__private::host::status(dir.path()).unwrap();
        assert_eq!(s.slots.len(), 8, "{s:?}");
        assert_eq!(
            s.slots.iter().map(|s| s.held).collect::<Vec<_>>(),
            [true, false, false, false, false, false, false, false]
        );
        // Another pool of the process, as another test process would be: its permit takes the
        // next slot, and one of those nobody made is made when a permit takes it.
        let other = crate::util::pool(dir.path(), 8);
        let second = other
            .try_acquire(gpu_test_permit::PermitKind::Shared)
            .unwrap();
        let third = first
            .try_acquire(gpu_test_permit::PermitKind::Shared)
            .unwrap();
        assert!(dir.path().join("gpu0.slot2").exists());
        let s = gpu_test_permit::__private::host::status(dir.path()).unwrap();
        assert_eq!(
            s.slots.iter().map(|s| s.held).collect::<Vec<_>>(),
            [true, true, true, false, false, false, false, false]
        );
        drop((permit, second, third));
    }

    const NO_WATCH_CHILD: &str = "GTP_NO_WATCH_CHILD_DIR";

    /// Runs in a child of this test binary: with every descriptor taken, no change watch can
    /// be made, and the wait must still end when the slot is freed.
    #[test]
    #[ignore = "run by waits_without_a_change_watch_by_polling"]
    fn no_watch_child() {
        let Some(dir) = std::env::var_os(NO_WATCH_CHILD) else {
            return;
        };
        let pool = crate::util::pool(Path::new(&dir), 1);
        let taken = take_every_descriptor();
        let now = pool.try_acquire(gpu_test_permit::PermitKind::Shared);
        assert!(matches!(now, Err(AcquireError::WouldBlock)), "{now:?}");
        println!("no-watch-child-waiting");
        let got = pool.try_acquire_for(Duration::from_secs(30));
        give_back(taken);
        drop(got.unwrap());
        println!("no-watch-child-ok");
    }

    #[test]
    fn waits_without_a_change_watch_by_polling() {
        let dir = tempdir();
        let a = hold(dir.path(), 1, &[], &[]);
        assert!(a.held_within(Duration::from_secs(20)));
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "host::processes::no_watch_child",
                "--nocapture",
                "--include-ignored",
                "--test-threads",
                "1",
            ])
            .env(NO_WATCH_CHILD, dir.path());
        let child = Holder::spawn(child);
        let mut seen = Vec::new();
        while let Ok(line) = child.lines.recv_timeout(Duration::from_secs(20)) {
            let started = line.ends_with("no-watch-child-waiting");
            seen.push(line);
            if started {
                break;
            }
        }
        assert!(
            seen.last()
                .is_some_and(|l| l.ends_with("no-watch-child-waiting")),
            "{seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
        assert!(a.release().0.success());
        let mut ok = false;
        while let Ok(line) = child.lines.recv_timeout(Duration::from_secs(20)) {
            if line.contains("no-watch-child-ok") {
                ok = true;
                break;
            }
        }
        let (status, err) = child.release();
        assert!(ok && status.success(), "{status}: {err}");
        assert!(err.contains("waiting by polling"), "{err}");
    }
}

#[cfg(unix)]
mod hold_deadline {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use crate::util::{cli, tempdir};

    #[test]
    fn a_permit_held_past_the_hold_deadline_aborts_with_a_diagnosis() {
        let dir = tempdir();
        let started = Instant::now();
        // `hold` keeps its permit until standard input closes: here, never.
        let mut child = cli(dir.path(), 1)
            .env("GPU_TEST_PERMIT_HOLD_TIMEOUT", "300ms")
            .arg("hold")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the stuck holder was not stopped"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{}: {err}",
            out.status
        );
        assert!(
            err.contains("HOLD TIMEOUT")
                && err.contains("past GPU_TEST_PERMIT_HOLD_TIMEOUT=300ms")
                && err.contains("N = 1 permit(s) per GPU x 1 GPU(s)")
                && err.contains("lower REALIZAR_GPU_TEST_CONCURRENCY"),
            "{err}"
        );
        let hangs = gpu_test_permit::__private::host::recorded_hangs(dir.path());
        assert_eq!(hangs.len(), 1, "{hangs:?}");
        assert_eq!((hangs[0].per_gpu, hangs[0].gpus), (1, 1));
        assert!(hangs[0].held_ms >= 300);
    }

    #[test]
    fn a_permit_returned_within_the_hold_deadline_is_left_alone() {
        let dir = tempdir();
        let out = cli(dir.path(), 1)
            .env("GPU_TEST_PERMIT_HOLD_TIMEOUT", "5s")
            .args(["hold", "--for", "200ms"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(gpu_test_permit::__private::host::recorded_hangs(dir.path()).is_empty());
    }
}

#[cfg(unix)]
#[test]
fn a_trace_shows_a_permit_never_released_and_the_what_if_avoids_the_n_that_hung() {
    use std::process::Stdio;
    let dir = crate::util::tempdir();
    let trace = dir.path().join("trace.json");
    let slots = dir.path().join("slots");
    let hold = |extra: &[(&str, &str)], args: &[&str]| {
        let mut c = crate::util::cli(&slots, 1);
        c.env("GPU_TEST_PERMIT_TRACE", &trace)
            .arg("hold")
            .args(args);
        for (k, v) in extra {
            c.env(k, v);
        }
        // Standard input stays open: `hold` keeps its permit until it closes, or `--for`.
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // (`wait` would close a standard input the child still owns.)
        let stdin = child.stdin.take();
        let status = child.wait().unwrap();
        drop(stdin);
        status
    };
    assert!(hold(&[], &["--for", "10ms"]).success());
    // Stuck: aborted at its hold deadline, with its permit.
    let stuck = hold(&[("GPU_TEST_PERMIT_HOLD_TIMEOUT", "200ms")], &[]);
    assert!(!stuck.success());
    let out = crate::util::cli(&slots, 1)
        .arg("trace")
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("NOT RELEASED").count(), 1, "{text}");
    assert!(
        text.contains("N = 2") && text.contains("not advised: a permit hung at N = 1"),
        "{text}"
    );
    // Nothing below N = 1 is left to suggest.
    assert!(
        text.contains("suggested N: none: a permit hung at N = 1 on this host"),
        "{text}"
    );
}
