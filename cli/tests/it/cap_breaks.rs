//! The cap and the waits against descriptors that travel: each test is one way the cap or a
//! wait was broken, named after it, with real processes (see `docs/protocol.md`, whose
//! invariants these attack). The scenarios use the CLI (`hold`, `run`) and, where a process
//! must use the library itself, [`break_client`] in a child of this test binary.

#![cfg(unix)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpu_test_permit::__private::host::status;
use gpu_test_permit::host::Layout;

use crate::util::{Holder, as_nobody, bin, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Set for [`break_client`]: what it does.
const ROLE: &str = "GTP_BREAK_ROLE";
const DIR: &str = "GTP_BREAK_DIR";

/// Whether a process other than this one holds a lock on the file at `path` (probed through
/// a description of this test's own).
fn locked_elsewhere(path: &Path) -> bool {
    let file = File::open(path).unwrap();
    match file.try_lock() {
        Ok(()) => {
            file.unlock().unwrap();
            false
        }
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(e)) => panic!("{}: {e}", path.display()),
    }
}

fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let give_up = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The library side of the tests below, in a child of this test binary; passes at once when
/// run on its own.
#[test]
#[ignore = "a child of the tests in this module"]
fn break_client() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let slot = dir.join("gpu0.slot0");
    let pool = || crate::util::pool(&dir, 1);
    match role.as_str() {
        // A permit taken and returned, then fork: parent and child each ask for one.
        "fork-request" => {
            let pool = pool();
            drop(pool.acquire());
            // SAFETY: the child only calls the library, prints and leaves with `_exit`.
            let pid = unsafe { libc::fork() };
            let who = if pid == 0 { "child" } else { "parent" };
            match pool.try_acquire_for(Duration::from_millis(500)) {
                Ok(p) => {
                    say(&format!("{who} granted"));
                    std::thread::sleep(Duration::from_millis(300));
                    drop(p);
                }
                Err(e) => say(&format!("{who} refused: {e}")),
            }
            if pid == 0 {
                // SAFETY: leaves the forked child without running the parent's exit handlers.
                unsafe { libc::_exit(0) };
            }
            reap(pid);
        }
        // A permit held, then fork: the child drops its copy of the guard and exits; the
        // parent's slot must stay held.
        "fork-drop" => {
            let pool = pool();
            let permit = pool.acquire();
            // SAFETY: as above.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // The forking thread's permit serves its nested requests in the child too.
                match pool.try_acquire(gpu_test_permit::PermitKind::Shared) {
                    Ok(nested) => say(&format!("child nested: {}", nested.is_nested())),
                    Err(e) => say(&format!("child refused a nested request: {e}")),
                }
                drop(permit);
                // SAFETY: as above.
                unsafe { libc::_exit(0) };
            }
            reap(pid);
            // A description of this process's own conflicts with the permit's as another
            // process's would.
            say(&format!(
                "after the child dropped its copy: slot {}",
                if locked_elsewhere(&slot) {
                    "held"
                } else {
                    "free"
                }
            ));
            drop(permit);
        }
        // A permit held, then fork: the parent returns it at once, the child works on in it
        // for a while. Another process must not get the slot until the child has exited.
        "fork-outlive" => {
            let pool = pool();
            let permit = pool.acquire();
            // SAFETY: as above.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                std::thread::sleep(Duration::from_millis(800));
                // SAFETY: as above.
                unsafe { libc::_exit(0) };
            }
            drop(permit);
            say(&format!(
                "parent returned its permit while the child works: slot {}",
                if locked_elsewhere(&slot) {
                    "held"
                } else {
                    "free"
                }
            ));
            reap(pid);
            say(&format!(
                "after the child exited: slot {}",
                if locked_elsewhere(&slot) {
                    "held"
                } else {
                    "free"
                }
            ));
        }
        // With every descriptor taken after the pool is made, one unit behind a stopped head
        // that waits for two (N = 2, one unit held).
        "out-of-descriptors" => {
            let pool = crate::util::pool(&dir, 2);
            let asked = Instant::now();
            let taken = take_every_descriptor();
            let got = pool.try_acquire_for(Duration::from_secs(6));
            let took = asked.elapsed();
            give_back(taken);
            match got {
                Ok(p) => say(&format!(
                    "granted slot {:?} after {} ms",
                    p.slots(),
                    took.as_millis()
                )),
                Err(e) => say(&format!("refused after {} ms: {e}", took.as_millis())),
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

/// Copies of standard error until the process may open no more descriptors, with the hard
/// limit lowered to the soft one (so nothing can raise it).
fn take_every_descriptor() -> Vec<i32> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit to read into and set from; dup of standard error.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_max = lim.rlim_cur;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let mut taken = Vec::new();
    loop {
        // SAFETY: as above.
        let fd = unsafe { libc::dup(2) };
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

/// Runs [`break_client`] as `role` on `dir`; returns its standard output.
fn client(role: &str, dir: &Path) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    crate::util::clear_permit_env(&mut c);
    let out = c
        .args([
            "--exact",
            "cap_breaks::break_client",
            "--nocapture",
            "--include-ignored",
            "--test-threads",
            "1",
        ])
        .env(ROLE, role)
        .env(DIR, dir)
        .env("GPU_TEST_PERMIT_TIMEOUT", "30s")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Finding 1: `run -- sh -c '( job & ); exit'`. `run` returned its permit when its command
/// exited by unlocking the slot's description, which the job shares; the next process was
/// granted the slot while the job still worked inside the permit.
#[test]
fn a_background_job_of_runs_command_keeps_the_permit_after_run_returns() {
    let dir = tempdir();
    let job = dir.path().join("job");
    let script = format!(
        "( '{bin}' hold --for 30s >'{job}' 2>&1 </dev/null & ); \
         while ! grep -q held '{job}'; do sleep 0.01; done; exit 0",
        bin = bin().display(),
        job = job.display()
    );
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "30s")
        .args(["run", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let held = std::fs::read_to_string(&job).unwrap();
    let pid: libc::pid_t = held
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{held}"));
    // `run` has returned; the job works on inside its permit.
    let next = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    let early = next.held_within(Duration::from_millis(700));
    // SAFETY: kill(2) on the job this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        !early,
        "another process was granted the slot while run's background job held it"
    );
    assert!(
        next.held_within(LONG),
        "the slot stayed taken after the job died"
    );
}

/// Finding 2: after `fork` without `exec`, flock granted the child the lock its parent's
/// description already held, and both held slot 0 at N = 1.
#[test]
fn a_child_forked_without_exec_takes_no_permit_of_its_own() {
    let dir = tempdir();
    let out = client("fork-request", dir.path());
    assert!(out.contains("parent granted"), "{out}");
    assert!(out.contains("child refused"), "{out}");
    assert!(out.contains("forked without exec"), "{out}");
}

/// Finding 2: a forked child that dropped its copy of the parent's guard unlocked the
/// parent's slot.
#[test]
fn a_forked_child_that_drops_its_copy_of_a_guard_leaves_the_parents_slot_held() {
    let dir = tempdir();
    let out = client("fork-drop", dir.path());
    assert!(out.contains("child nested: true"), "{out}");
    assert!(
        out.contains("after the child dropped its copy: slot held"),
        "{out}"
    );
}

/// Finding 2: a permit held when a child was forked is the child's too; the parent's
/// release leaves it held until the child has exited.
#[test]
fn a_permit_held_at_fork_stays_held_until_the_child_exits() {
    let dir = tempdir();
    let out = client("fork-outlive", dir.path());
    assert!(
        out.contains("parent returned its permit while the child works: slot held"),
        "{out}"
    );
    assert!(out.contains("after the child exited: slot free"), "{out}");
}

/// Finding 3: a descendant of `run` that changes user shared `run`'s units through a share
/// directory of its own, because the other user's private share directory could not be
/// opened and "cannot open" was read as "not in use".
#[test]
fn a_second_user_inside_one_run_takes_no_units_beside_the_first() {
    use std::os::unix::fs::PermissionsExt;
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let slots = dir.path().join("slots");
    let out = dir.path().join("out");
    for d in [&slots, &out] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let (a, b) = (out.join("a"), out.join("b"));
    let script = format!(
        "'{bin}' hold --for 3s >'{a}' 2>&1 </dev/null & \
         while ! grep -q held '{a}'; do sleep 0.01; done; \
         {setpriv} '{bin}' hold --for 1s >'{b}' 2>&1 </dev/null; wait",
        bin = bin().display(),
        a = a.display(),
        b = b.display()
    );
    let run = cli(&slots, 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "5s")
        .args(["run", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (a, b) = (
        std::fs::read_to_string(&a).unwrap(),
        std::fs::read_to_string(&b).unwrap(),
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(a.contains("held"), "{a}\n{err}");
    assert!(
        !b.contains("held"),
        "a second user held a unit beside the first inside a one-unit permit:\n{b}"
    );
    assert!(b.contains("another user"), "{b}");
}

/// Finding 4: `run` held slot 1 at N = 2 and was killed; its command kept the slot but
/// nobody held the layout, so a process configured with N = 1 took the directory for unused,
/// rewrote the layout and took slot 0: two holders under N = 1.
#[test]
fn the_layout_stays_while_a_killed_runs_command_holds_a_slot() {
    let dir = tempdir();
    let first = Holder::spawn({
        let mut c = cli(dir.path(), 2);
        c.arg("hold");
        c
    });
    assert!(first.held_within(LONG));
    let orphan = crate::util::Orphan::start(dir.path(), 2);
    let (status_first, _) = first.release();
    assert!(status_first.success());
    // Only the command holds a slot now (slot 1), and nobody the layout.
    assert!(locked_elsewhere(&dir.path().join("gpu0.slot1")));
    let second = Holder::spawn({
        let mut c = cli(dir.path(), 1);
        c.arg("hold");
        c
    });
    let held = second.held_within(LONG);
    let layout = status(dir.path()).unwrap().layout;
    drop(orphan);
    assert!(held);
    assert_eq!(
        layout,
        Some(Layout {
            per_gpu: 2,
            gpus: 1
        }),
        "the layout was rewritten while a slot was held"
    );
}

/// At N = 2 in `dir`: a `hold` of one unit, granted, and a `hold --units 2` behind it that
/// heads the queue (holds the gate) and waits.
fn holder_and_waiting_head(dir: &Path) -> (Holder, Holder) {
    let hold = |args: &[&str]| {
        let mut c = cli(dir, 2);
        c.arg("hold").args(args);
        Holder::spawn(c)
    };
    let holder = hold(&[]);
    assert!(holder.held_within(LONG));
    let head = hold(&["--units", "2"]);
    let gate = dir.join("gpu0.gate");
    wait_for(|| locked_elsewhere(&gate), "the head to take the gate");
    (holder, head)
}

/// Stops process `pid`, a head that re-checks the free slot `free` now and then, at a moment
/// when it does not hold that slot: one stopped in the microseconds of a try keeps the slot it
/// had just locked (as a stopped holder keeps its permit).
fn stop_between_tries(pid: u32, free: &Path) {
    for _ in 0..50 {
        // SAFETY: kill(2) on a process the test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(20));
        if !locked_elsewhere(free) {
            return;
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        std::thread::sleep(Duration::from_millis(7));
    }
    panic!("the head held {} whenever it was stopped", free.display());
}

/// Finding 5: a waiter out of descriptors probed the gate through a new open file; the open
/// failed, "cannot probe" was read as "not locked", the stopped head was never judged, and
/// the wait ran out its timeout with slot 1 free.
#[test]
fn a_waiter_out_of_descriptors_goes_past_a_stopped_head() {
    let dir = tempdir();
    // The head: two units, one free; it holds the gate and waits. Then it is stopped.
    let (_holder, head) = holder_and_waiting_head(dir.path());
    stop_between_tries(head.child.id(), &dir.path().join("gpu0.slot1"));
    let out = client("out-of-descriptors", dir.path());
    // SAFETY: as above.
    unsafe { libc::kill(head.child.id() as libc::pid_t, libc::SIGCONT) };
    assert!(out.contains("granted slot [1]"), "{out}");
}

/// Finding 6: a hold deadline that fired inside `run` (N = 4) recorded the hang with the N of
/// the processes' share of `run`'s permit (N = 1), in their share directory, where neither
/// `history` nor `auto` reads it.
#[test]
fn a_hang_inside_run_is_recorded_with_the_hosts_n_in_the_hosts_directory() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let script = format!(
        "sleep 3 | GPU_TEST_PERMIT_HOLD_TIMEOUT=1s '{}' hold",
        bin().display()
    );
    let out = cli(&slots, 4)
        .args(["run", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("N = 4 permit(s) per GPU"), "{err}");
    let hangs = gpu_test_permit::__private::host::recorded_hangs(&slots);
    assert_eq!(hangs.len(), 1, "{hangs:?}\n{err}");
    assert_eq!((hangs[0].per_gpu, hangs[0].gpus), (4, 1), "{hangs:?}");
    let share = std::fs::read_dir(&slots)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(".inside-"))
        .expect("the share directory")
        .path();
    assert!(
        gpu_test_permit::__private::host::recorded_hangs(&share).is_empty(),
        "a hang recorded in the share directory"
    );
}

/// A tmpfs of `size` bytes mounted on a directory of its own, unmounted on drop: a disk that
/// fills up. Needs root (CI runs as root); `None` elsewhere.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempdir();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full.
    fn fill(&self) {
        let mut f = File::create(self.path().join("filler")).unwrap();
        let block = [0u8; 4096];
        while f.write_all(&block).is_ok() {}
        assert!(f.write_all(&block).is_err(), "the disk is full");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Finding 7: the gate and wait files were made empty, so on a full disk the head could not
/// write its record or heartbeat, lost its turn after a second, and a light request that came
/// later was granted before the waiting 2-unit request; `status` showed nobody waiting.
#[test]
fn on_a_full_disk_the_head_of_the_queue_keeps_its_turn() {
    let Some(disk) = SmallDisk::mount("512k") else {
        eprintln!("not run: mounting a tmpfs needs root");
        return;
    };
    let dir = disk.path().join("slots");
    let hold = |args: &[&str]| {
        let mut c = cli(&dir, 2);
        c.arg("hold").args(args);
        Holder::spawn(c)
    };
    let first = hold(&[]);
    assert!(first.held_within(LONG));
    disk.fill();
    let head = hold(&["--units", "2"]);
    let gate = dir.join("gpu0.gate");
    wait_for(|| locked_elsewhere(&gate), "the head to take the gate");
    let light = hold(&[]);
    // Well past the grace after which a head that shows no sign of life loses its turn.
    let light_early = light.held_within(Duration::from_millis(2500));
    let seen = status(&dir).unwrap().head;
    assert!(
        !light_early,
        "a light request went past the head of the queue on a full disk"
    );
    let seen = seen.expect("status shows the head of the queue");
    assert_eq!(seen.request.pid, head.child.id());
    assert_eq!(seen.request.units, 2);
    drop(first.release());
    assert!(head.held_within(LONG), "the head got its two units");
    drop(head.release());
    assert!(light.held_within(LONG));
}

/// Finding 8: with `ulimit -n 64` every pool was refused ("may open only 0 more") while
/// about 60 descriptors were free: a fixed headroom of 64 was kept for the program.
#[test]
fn a_small_descriptor_limit_still_leaves_room_for_the_slots() {
    let dir = tempdir();
    let c = cli(dir.path(), 2);
    let mut sh = Command::new("sh");
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let out = sh
        .arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec '{}' hold --for 1ms",
            bin().display()
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("held"));
    // Where the slots do not fit, the message says how many are kept for the program.
    let out = Command::new("sh")
        .envs(
            cli(dir.path(), 64)
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec '{}' hold --for 1ms",
            bin().display()
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("left free for the program itself"), "{err}");
}

/// libfaketime's preload library, where the `faketime` package put it. Preloaded directly,
/// not through the `faketime` wrapper: the wrapper makes a named semaphore and shared memory
/// named by its pid, which a wrapper killed by a test leaves behind, and a later wrapper that
/// gets the same pid then refuses to start ("sem_open: File exists").
pub(crate) fn libfaketime() -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/lib"), PathBuf::from("/usr/local/lib")];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        dirs.extend(entries.flatten().map(|e| e.path()));
    }
    dirs.into_iter()
        .map(|d| d.join("faketime").join("libfaketime.so.1"))
        .find(|lib| lib.is_file())
}

/// Finding 8: heartbeats were wall-clock times, so a head whose clock reads otherwise than
/// the waiter's (a clock step between a beat and its reading, a process under another wall
/// clock) looked silent or from the future, and lost its turn. The head here runs under
/// libfaketime an hour ahead (its monotonic and boot clocks untouched).
#[test]
fn a_wall_clock_step_does_not_silence_the_head_of_the_queue() {
    let Some(lib) = libfaketime() else {
        eprintln!("not run: needs libfaketime (apt-get install faketime)");
        return;
    };
    let ahead = |c: &mut Command| {
        c.env("LD_PRELOAD", &lib)
            .env("FAKETIME", "+1h")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    };
    // The preload works: `date` reads an hour ahead.
    let mut date = Command::new("date");
    date.arg("+%s");
    ahead(&mut date);
    let read: u64 = String::from_utf8(date.output().unwrap().stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        read >= now + 3500,
        "{} did not put date an hour ahead: {read}, now {now}",
        lib.display()
    );
    let dir = tempdir();
    let hold = |args: &[&str], is_ahead: bool| {
        let mut c = cli(dir.path(), 2);
        if is_ahead {
            ahead(&mut c);
        }
        c.arg("hold").args(args);
        Holder::spawn(c)
    };
    let first = hold(&[], false);
    assert!(first.held_within(LONG));
    let head = hold(&["--units", "2"], true);
    let gate = dir.path().join("gpu0.gate");
    wait_for(|| locked_elsewhere(&gate), "the head to take the gate");
    let light = hold(&[], false);
    let light_early = light.held_within(Duration::from_millis(2500));
    assert!(
        !light_early,
        "a light request went past a head whose wall clock reads an hour ahead"
    );
    drop(first.release());
    assert!(head.held_within(LONG));
    drop(head.release());
    assert!(light.held_within(LONG));
}

/// Finding 8: a grant that declares memory wrote its declaration into its slots only after
/// it let go of the gate, so the next head's memory check (NVML's free memory less what the
/// holders declared) could miss it. The order of the system calls, logged by an LD_PRELOAD
/// library (`cli/tests/stub/lock_log.c`), shows the declaration written before the gate is let go.
#[test]
fn a_memory_declaration_is_written_before_the_gate_is_let_go() {
    let dir = tempdir();
    let lib = crate::stub::library_dir("lock_log", &["liblock_log.so"]);
    let log = dir.path().join("log");
    let slots = dir.path().join("slots");
    let out = cli(&slots, 2)
        .env("GPU_TEST_PERMIT_GPU_MEMORY", "2GiB")
        .env("LD_PRELOAD", lib.join("liblock_log.so"))
        .env("LOCK_LOG", &log)
        .args(["hold", "--memory", "1GiB", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let gate = format!("{}/gpu0.gate", slots.display());
    // The grant's record: the first write of a record (`{`) into a slot file.
    let record = lines
        .iter()
        .position(|l| l.starts_with("pwrite ") && l.contains("/gpu0.slot") && l.ends_with(" 0 {"))
        .unwrap_or_else(|| panic!("no record written:\n{log}"));
    // The gate let go (LOCK_UN = 8).
    let unlock = lines
        .iter()
        .position(|l| *l == format!("flock {gate} 8"))
        .unwrap_or_else(|| panic!("the gate was never let go:\n{log}"));
    assert!(
        record < unlock,
        "the declaration was written after the gate was let go:\n{log}"
    );
}

/// CPU time (user and system) process `pid` has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Past the command name, which may hold spaces: fields 14 and 15 of the line.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The head of the queue renews a heartbeat beside its record in the gate, which every waiter
/// watches, the head included: renewed at every wake-up, each write woke the head again, and
/// it spun (two thirds of a core). A waiting head sleeps.
#[test]
#[cfg(target_os = "linux")]
fn the_head_of_the_queue_sleeps_while_it_waits() {
    let dir = tempdir();
    let (first, head) = holder_and_waiting_head(dir.path());
    let before = cpu_ticks(head.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(head.child.id()) - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    assert!(
        used * 10 < 2 * hz,
        "the waiting head used {used} ticks of CPU in 2 s ({hz} a second)"
    );
    drop(first.release());
    assert!(head.held_within(LONG));
}
