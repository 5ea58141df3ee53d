//! The slot directory against other local users: planted links, shared group directories,
//! squatted defaults and special files. Tests that switch uids run as root (as CI does) and skip
//! with a printed reason otherwise.

#![cfg(unix)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpu_test_permit::__private::host::status;
use gpu_test_permit::PermitPool;

use crate::util::{Holder, bin, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a test that switches uids can run; prints why not.
fn root_or_skip(test: &str) -> bool {
    if !is_root() {
        println!("skipped {test}: switching to other uids needs root (CI runs as root)");
    }
    is_root()
}

/// Uids and gids no account uses, different for every test process, so concurrent runs never
/// meet in the fixed default directories under /tmp.
fn ids(n: u32) -> Vec<u32> {
    let base = 3_000_000_000 + (std::process::id() % 100_000) * 16;
    (0..n).map(|i| base + i).collect()
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// Runs `cmd` to completion, killing it after `limit`: `None` when it had to be killed.
fn output_within(mut cmd: Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(child.wait_with_output().unwrap())
}

/// The CLI as another uid and gid, under `umask 077`, with the permit environment cleared.
fn cli_as(dir: Option<&Path>, uid: u32, gid: u32, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("umask 077; exec \"$0\" \"$@\"")
        .arg(bin())
        .args(args);
    crate::util::clear_permit_env(&mut c);
    if let Some(dir) = dir {
        c.env("GPU_TEST_PERMIT_DIR", dir);
    }
    c.env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
        .uid(uid)
        .gid(gid);
    c
}

#[test]
fn write_check_never_follows_a_planted_symlink() {
    let root = tempdir();
    let victim = root.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dir = root.path().join("slots");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Where the write check of this process used to create and truncate its probe file.
    let planted = dir.join(format!(".write-check-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    PermitPool::builder().slot_dir(&dir).build().unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(
        std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the planted link is not ours to remove"
    );
}

/// Runs `hold` as user A and then as user B (each `(uid, gid)`, both under `umask 077`) on
/// `dir` with N = 1: B must wait while A holds, then get the permit. Returns the mode of the
/// slot files, which must all agree, and their group.
fn two_users_share_the_cap(dir: &Path, a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    let first = Holder::spawn(cli_as(Some(dir), a.0, a.1, &["hold"]));
    assert!(first.held_within(LONG), "user A could not hold");
    let second = Holder::spawn(cli_as(Some(dir), b.0, b.1, &["hold"]));
    assert!(
        !second.held_within(Duration::from_millis(500)),
        "user B did not wait for user A's permit (N = 1)"
    );
    let (status, err) = first.release();
    assert!(status.success(), "{err}");
    assert!(second.held_within(LONG), "user B never got the permit");
    let (status, err) = second.release();
    assert!(status.success(), "user B failed: {err}");
    let metas: Vec<_> = ["gpu0.gate", "gpu0.slot0", "gpu0.notify"]
        .iter()
        .map(|name| std::fs::metadata(dir.join(name)).unwrap())
        .map(|m| (m.mode() & 0o777, m.gid()))
        .collect();
    assert!(metas.iter().all(|m| *m == metas[0]), "{metas:?}");
    metas[0]
}

#[test]
fn shared_group_directory_works_across_users_with_any_umask() {
    if !root_or_skip("shared_group_directory_works_across_users_with_any_umask") {
        return;
    }
    let [group, a, a_gid, b] = ids(4)[..] else {
        unreachable!()
    };
    let root = tempdir();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Owned by user A, group-owned by the sharing group, setgid so files inherit the group.
    let dir = root.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(a), Some(group)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).unwrap();
    // A is not in the group itself (its primary group is another); B is a member of the group,
    // not the directory's owner.
    let (mode, gid) = two_users_share_the_cap(&dir, (a, a_gid), (b, group));
    assert_eq!((mode, gid), (0o660, group), "mode {mode:o}");
}

/// Whoever lays out a shared directory makes every slot file of it, as it makes the layout:
/// a member of the group who takes a slot nobody used yet finds that slot's file made, and the
/// directory's owner, outside the group, can still take it after the member.
#[test]
fn the_user_who_lays_out_a_shared_directory_makes_every_slot_file() {
    if !root_or_skip("the_user_who_lays_out_a_shared_directory_makes_every_slot_file") {
        return;
    }
    let [group, a, a_gid, b] = ids(4)[..] else {
        unreachable!()
    };
    let root = tempdir();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(a), Some(group)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let hold = |uid, gid| {
        let mut c = cli_as(Some(&dir), uid, gid, &["hold"]);
        c.env("REALIZAR_GPU_TEST_CONCURRENCY", "2");
        Holder::spawn(c)
    };
    // A lays the directory out (N = 2) and holds slot 0.
    let a1 = hold(a, a_gid);
    assert!(a1.held_within(LONG), "user A could not hold");
    let owner = |name: &str| std::fs::metadata(dir.join(name)).unwrap().uid();
    assert_eq!(
        owner("gpu0.slot1"),
        a,
        "slot 1's file is made by whoever lays out"
    );
    // B, a member, takes slot 1; a second process of A waits for it, and takes it after B.
    let b1 = hold(b, group);
    assert!(b1.held_within(LONG), "user B could not hold");
    let a2 = hold(a, a_gid);
    assert!(
        !a2.held_within(Duration::from_millis(500)),
        "a third permit at N = 2"
    );
    let (status, err) = b1.release();
    assert!(status.success(), "user B failed: {err}");
    assert!(a2.held_within(LONG), "user A never got slot 1 after user B");
    for holder in [a1, a2] {
        let (status, err) = holder.release();
        assert!(status.success(), "user A failed: {err}");
    }
}

#[test]
fn sticky_world_writable_directory_works_across_users_with_any_umask() {
    if !root_or_skip("sticky_world_writable_directory_works_across_users_with_any_umask") {
        return;
    }
    let [a, b] = ids(2)[..] else { unreachable!() };
    let root = tempdir();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (mode, _) = two_users_share_the_cap(&dir, (a, a), (b, b));
    assert_eq!(mode, 0o666, "mode {mode:o}");
}

/// Removes fixed paths under /tmp when the test ends, however it ends.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

#[test]
fn squatted_default_directory_falls_back_to_a_private_one() {
    if !root_or_skip("squatted_default_directory_falls_back_to_a_private_one") {
        return;
    }
    let [user, squatter] = ids(2)[..] else {
        unreachable!()
    };
    let default = PathBuf::from(format!("/tmp/gpu-test-permit-{user}"));
    let alternatives: Vec<PathBuf> = (1..4)
        .map(|i| PathBuf::from(format!("/tmp/gpu-test-permit-{user}-{i}")))
        .collect();
    let mut all = vec![default.clone()];
    all.extend(alternatives.iter().cloned());
    let _cleanup = RemoveOnDrop(all.clone());
    for p in &all {
        let _ = std::fs::remove_dir_all(p);
    }
    // The squatter took the default and the first alternative.
    for p in [&default, &alternatives[0]] {
        std::fs::create_dir(p).unwrap();
        std::os::unix::fs::chown(p, Some(squatter), Some(squatter)).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let out =
        output_within(cli_as(None, user, user, &["run", "--", "true"]), LONG).expect("run hung");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let used = &alternatives[1];
    assert!(
        err.contains(&format!("uid {squatter}")) && err.contains(&*used.to_string_lossy()),
        "no line says why another directory is used: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let meta = std::fs::symlink_metadata(used).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.uid(), user);
    assert_eq!(meta.mode() & 0o777, 0o700);
    // Every process of the user lands on the same directory, `status` included.
    let out = output_within(cli_as(None, user, user, &["status"]), LONG).expect("status hung");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("slot directory {}", used.display())),
        "{text}"
    );
    assert!(text.contains("slot 0: free"), "{text}");
}

#[test]
fn status_does_not_block_on_a_fifo_slot_file() {
    let dir = tempdir();
    mkfifo(&dir.path().join("gpu0.slot0"));
    mkfifo(&dir.path().join("gpu0.wait.1"));
    let mut c = cli(dir.path(), 1);
    c.args(["status", "--dir"]).arg(dir.path());
    let out = output_within(c, Duration::from_secs(10)).expect("status blocked on a FIFO");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("gpu0.slot0") && text.contains("not a regular file"),
        "{text}"
    );

    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(status(&path));
    });
    let s = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("host::status blocked on a FIFO")
        .unwrap();
    assert!(s.slots.is_empty() && s.waiters.is_empty(), "{s:?}");
    assert_eq!(s.skipped.len(), 2, "{s:?}");
    // A FIFO is never removed as a killed waiter's leftover.
    assert!(dir.path().join("gpu0.wait.1").exists());
}

#[test]
fn lock_file_that_is_a_fifo_is_refused() {
    let dir = tempdir();
    mkfifo(&dir.path().join("gpu0.slot0"));
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // A slot's file is opened at the slot's first use: the permit is refused.
        let pool = PermitPool::builder().slot_dir(&path).build().unwrap();
        let got = pool.try_acquire_for(Duration::from_secs(5));
        tx.send(got.map(drop).map_err(|e| e.to_string()))
    });
    let msg = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("opening the slots blocked on a FIFO")
        .expect_err("a FIFO was used as a slot file");
    assert!(
        msg.contains("gpu0.slot0") && msg.contains("not a regular file"),
        "{msg}"
    );
}

#[test]
fn status_escapes_control_characters_in_records() {
    let dir = tempdir();
    let evil = "evil\x1b[2J\r\nforged slot 7: free\u{202e}";
    let holder = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold")
            .env("NEXTEST_RUN_ID", "escapes")
            .env("NEXTEST_TEST_NAME", evil)
            .env("GPU_TEST_PERMIT_GPUS", "1");
        c
    });
    assert!(holder.held_within(LONG));
    let mut c = cli(dir.path(), 1);
    c.args(["status", "--dir"]).arg(dir.path());
    let out = output_within(c, LONG).expect("status hung");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains(['\x1b', '\r', '\u{202e}']),
        "raw control characters: {text:?}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("forged")),
        "a forged line: {text}"
    );
    assert!(
        text.contains(r"evil\u{1b}[2J\r\nforged slot 7: free\u{202e}"),
        "{text}"
    );
    let (status, err) = holder.release();
    assert!(status.success(), "{err}");
}

/// Two users of a sticky world-writable directory turn memory into units with the first one's
/// budget, and once nobody uses the directory the record (owned by the first user, so not the
/// second's to remove there) is cleared by the second, whose own budget then counts.
#[test]
fn users_of_a_shared_directory_share_its_memory_budget() {
    if !root_or_skip("users_of_a_shared_directory_share_its_memory_budget") {
        return;
    }
    let [a, b] = ids(2)[..] else { unreachable!() };
    let root = tempdir();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let hold = |uid: u32, budget: &str| {
        let mut c = cli_as(Some(&dir), uid, uid, &["hold", "--memory", "6GiB"]);
        c.env("REALIZAR_GPU_TEST_CONCURRENCY", "4")
            .env("GPU_TEST_PERMIT_GPU_MEMORY", budget);
        Holder::spawn(c)
    };
    let units = |h: &Holder| {
        let line = h.lines.recv_timeout(LONG).expect("a held line");
        assert!(line.starts_with("held"), "{line}");
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("units="))
            .expect("units in the held line")
            .to_string()
    };
    // 16 GiB over N = 4: 6 GiB takes 2 units of 4 GiB.
    let first = hold(a, "16GiB");
    assert_eq!(units(&first), "2");
    // 8 GiB would take 3 units of 2 GiB; the directory's 16 GiB counts, and B is told.
    let second = hold(b, "8GiB");
    assert_eq!(units(&second), "2");
    let (status, err) = second.release();
    assert!(status.success(), "{err}");
    assert!(err.contains("budgets 16 GiB of GPU memory"), "{err}");
    let (status, err) = first.release();
    assert!(status.success(), "{err}");
    // Nobody uses the directory: B clears A's record and B's budget counts.
    let again = hold(b, "8GiB");
    assert_eq!(units(&again), "3");
    let (status, err) = again.release();
    assert!(status.success(), "{err}");
    let owner = std::fs::metadata(dir.join("gpu0.budget")).unwrap().uid();
    assert_eq!(owner, a, "the record stays A's file, rewritten by B");
}

const GIB: u64 = 1 << 30;

/// `hold --memory 6GiB --for 1ms` on `dir` (N = 4, one GPU) with a budget of `budget`, run to
/// the end: the units it held (`None` when it held nothing), and its standard error.
fn hold_6gib(dir: &Path, budget: &str) -> (Option<usize>, String) {
    let mut c = cli(dir, 4);
    c.args(["hold", "--memory", "6GiB", "--for", "1ms"])
        .env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_GPU_MEMORY", budget)
        .env("GPU_TEST_PERMIT_TIMEOUT", "20s");
    let out = output_within(c, LONG).expect("hold hung");
    let units = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("units="))
        .map(|u| u.parse().unwrap());
    (units, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A pool of `dir` as `hold_6gib`'s processes lay it out, using the directory (so that its
/// budget record is not cleared as that of an unused directory) with `budget` recorded.
fn user_of(dir: &Path, budget: Option<u64>) -> PermitPool {
    let mut b = PermitPool::builder().concurrency(4).slot_dir(dir);
    if let Some(bytes) = budget {
        b = b.memory_budget(bytes);
        let pool = b.build().unwrap();
        // The first declaration settles, and records, the budget.
        drop(pool.acquire_memory(GIB));
        return pool;
    }
    b.build().unwrap()
}

#[test]
fn a_budget_record_that_is_a_fifo_a_directory_or_a_link_is_named_and_never_blocks() {
    for kind in ["FIFO", "directory", "symbolic link"] {
        let dir = tempdir();
        let record = dir.path().join("gpu0.budget");
        let victim = dir.path().join("victim");
        match kind {
            "FIFO" => mkfifo(&record),
            "directory" => std::fs::create_dir(&record).unwrap(),
            _ => {
                std::fs::write(&victim, b"1").unwrap();
                std::os::unix::fs::symlink(&victim, &record).unwrap();
            }
        }
        let started = Instant::now();
        // 16 GiB over N = 4: units of 4 GiB, 2 of them for 6 GiB.
        let (units, err) = hold_6gib(dir.path(), "16GiB");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{kind}: blocked"
        );
        assert_eq!(units, Some(2), "{kind}: {err}");
        assert_eq!(err.lines().count(), 1, "{kind}: one line: {err}");
        assert!(
            err.contains(&format!("memory budget record {}", record.display())),
            "{kind}: {err}"
        );
        assert!(err.contains(kind), "{kind}: {err}");
        assert!(err.contains("its own budget, 16 GiB"), "{kind}: {err}");
        if kind == "symbolic link" {
            assert_eq!(
                std::fs::read(&victim).unwrap(),
                b"1",
                "written through the link"
            );
        }
    }
}

#[test]
fn a_budget_record_below_one_mib_or_above_one_pib_is_corrupt_not_a_budget() {
    // A budget of one byte would fail every declaration; one of 16 EiB would count every
    // declaration as one unit.
    for (forged, says) in [
        ("1", "1 bytes is below 1 MiB"),
        (
            "18446744073709551615",
            "18446744073709551615 bytes is above 1 PiB",
        ),
    ] {
        let dir = tempdir();
        let _user = user_of(dir.path(), None);
        let record = dir.path().join("gpu0.budget");
        let mut text = format!("{forged}\n").into_bytes();
        text.resize(64, b' ');
        std::fs::write(&record, text).unwrap();
        let (units, err) = hold_6gib(dir.path(), "16GiB");
        assert_eq!(units, Some(2), "{forged}: {err}");
        assert!(
            err.contains(&format!(
                "ignoring the corrupt memory budget record {}",
                record.display()
            )),
            "{err}"
        );
        assert!(err.contains(says), "{err}");
        assert!(err.contains("its own budget, 16 GiB"), "{err}");
    }
}

#[test]
fn a_budget_record_held_locked_is_still_read_when_it_holds_a_budget() {
    let dir = tempdir();
    // The directory's users convert with 8 GiB: units of 2 GiB over N = 4.
    let _user = user_of(dir.path(), Some(8 * GIB));
    let record = std::fs::File::open(dir.path().join("gpu0.budget")).unwrap();
    record.lock().unwrap();
    // With its own 32 GiB, 6 GiB would be 1 unit; with the directory's 8 GiB it is 3.
    let (units, err) = hold_6gib(dir.path(), "32GiB");
    assert_eq!(units, Some(3), "{err}");
    assert!(err.contains("budgets 8 GiB of GPU memory"), "{err}");
    assert!(err.contains("32 GiB is not used"), "{err}");
}

#[test]
fn a_blank_budget_record_held_locked_is_waited_for_then_named() {
    let dir = tempdir();
    let path = dir.path().join("gpu0.budget");
    let record = std::fs::File::create(&path).unwrap();
    record.lock().unwrap();
    let started = Instant::now();
    let (units, err) = hold_6gib(dir.path(), "16GiB");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited too long"
    );
    assert_eq!(units, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!(
            "the memory budget record {} has been kept locked by pid {}",
            path.display(),
            std::process::id()
        )),
        "{err}"
    );
    assert!(err.contains("its own budget, 16 GiB"), "{err}");
    assert!(err.contains("may not share"), "{err}");
}

/// A layout refused for want of descriptors (N = 1024 on 1024 GPUs: a million slots, against
/// a limit of 256) leaves the process a pool whose every acquisition fails with the refusal:
/// it seats nobody, so it allocates no seats either (about 180 MB of them for that layout).
#[cfg(target_os = "linux")]
#[test]
fn a_layout_refused_by_the_descriptor_limit_allocates_no_seats() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let dir = tempdir();
    let mut c = cli(dir.path(), 1024);
    c.args(["hold", "--for", "1ms"])
        .env("GPU_TEST_PERMIT_GPUS", "1024")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and the closure touches nothing else.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    // Reaped by wait4 below, which also reports its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = c.spawn().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, which nothing else waits for; `status` and `usage` are
    // valid to write.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t);
    assert!(err.contains("open files"), "not refused: {err}");
    assert_ne!(libc::WEXITSTATUS(status), 0, "{err}");
    // Kilobytes on Linux. The process itself needs about 10 MB.
    let peak_mb = usage.ru_maxrss / 1024;
    assert!(peak_mb < 64, "peak resident memory {peak_mb} MB");
}
