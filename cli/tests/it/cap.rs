//! Attacks on the cap and on the waits, with real processes: every client adds its permit's
//! units to a counter file right after the grant and takes them off right before the release
//! (under the counter file's own lock), and reports a violation whenever the count passes N.

#![cfg(unix)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_test_permit::__private::host::status;
use gpu_test_permit::PermitPool;

use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Set for [`cap_client`]: what the client does (see [`Role`]).
const ROLE: &str = "GTP_CAP_ROLE";
const DIR: &str = "GTP_CAP_DIR";
const GAUGE: &str = "GTP_CAP_GAUGE";
const N: &str = "GTP_CAP_N";
const SECS: &str = "GTP_CAP_SECS";

/// Adds `delta` units to the counter in `path`; returns the count after.
pub(crate) fn gauge_add(path: &Path, delta: i64) -> i64 {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    f.lock().unwrap();
    let mut text = String::new();
    f.read_to_string(&mut text).unwrap();
    let now = text.trim().parse::<i64>().unwrap_or(0) + delta;
    f.seek(SeekFrom::Start(0)).unwrap();
    f.set_len(0).unwrap();
    write!(f, "{now}").unwrap();
    f.unlock().unwrap();
    now
}

/// Counts a grant of `units` in the gauge, printing a violation past `n`.
pub(crate) fn enter(gauge: &Path, units: usize, n: usize) {
    let now = gauge_add(gauge, units as i64);
    if now > n as i64 {
        println!("VIOLATION {now} units held at once, N = {n}");
    }
}

pub(crate) fn leave(gauge: &Path, units: usize) {
    gauge_add(gauge, -(units as i64));
}

struct ClientEnv {
    dir: PathBuf,
    gauge: PathBuf,
    n: usize,
    until: Instant,
    /// The client stops once this file exists.
    stop: PathBuf,
}

fn client_env() -> ClientEnv {
    let var = |k: &str| std::env::var(k).unwrap();
    ClientEnv {
        dir: var(DIR).into(),
        gauge: var(GAUGE).into(),
        n: var(N).parse().unwrap(),
        stop: PathBuf::from(var(GAUGE)).with_extension("stop"),
        until: Instant::now() + Duration::from_secs_f64(var(SECS).parse().unwrap()),
    }
}

/// Takes and returns one unit in a loop, counting each grant.
fn cycle(pool: &PermitPool, env: &ClientEnv, hold: Duration) -> usize {
    let mut grants = 0;
    while Instant::now() < env.until && !env.stop.exists() {
        let p = pool.acquire();
        enter(&env.gauge, 1, env.n);
        grants += 1;
        std::thread::sleep(hold);
        leave(&env.gauge, 1);
        drop(p);
    }
    grants
}

/// The client side of the tests below; passes at once when run on its own.
#[test]
#[ignore = "a child of the tests in this module"]
fn cap_client() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let env = client_env();
    let pool = crate::util::pool(&env.dir, env.n);
    match role.as_str() {
        // One unit at a time, held for 200 µs or, as a light test beside heavy ones, 200 ms.
        "cycle" | "light" => {
            let hold = if role == "light" {
                Duration::from_millis(200)
            } else {
                Duration::from_micros(200)
            };
            let grants = cycle(&pool, &env, hold);
            println!("grants {grants}");
        }
        // One thread holds a unit throughout, one takes and returns another in a loop, six
        // give up after 50 µs over and over: each timed-out wait reads who is in the way.
        "time-out" => {
            let held = pool.acquire();
            enter(&env.gauge, 1, env.n);
            let timeouts = std::thread::scope(|s| {
                s.spawn(|| cycle(&pool, &env, Duration::from_micros(50)));
                let quick: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            let mut timeouts = 0usize;
                            while Instant::now() < env.until {
                                match pool.try_acquire_for(Duration::from_micros(50)) {
                                    Ok(p) => {
                                        enter(&env.gauge, 1, env.n);
                                        leave(&env.gauge, 1);
                                        drop(p);
                                    }
                                    Err(_) => timeouts += 1,
                                }
                            }
                            timeouts
                        })
                    })
                    .collect();
                quick.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
            });
            leave(&env.gauge, 1);
            drop(held);
            println!("timeouts {timeouts}");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Starts [`cap_client`] as `role` on `dir` with N = `n` for `secs` seconds.
fn client(role: &str, dir: &Path, gauge: &Path, n: usize, secs: f64) -> std::process::Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    crate::util::clear_permit_env(&mut c);
    c.args([
        "--exact",
        "cap::cap_client",
        "--nocapture",
        "--include-ignored",
        "--test-threads",
        "1",
    ])
    .env(ROLE, role)
    .env(DIR, dir)
    .env(GAUGE, gauge)
    .env(N, n.to_string())
    .env(SECS, secs.to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// The output of a finished client, which must have succeeded.
fn output(child: std::process::Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The number after `word` on the client's line that starts with it.
fn count(out: &str, word: &str) -> usize {
    out.lines()
        .find_map(|l| {
            let (_, after) = l.split_once(&format!("{word} "))?;
            after.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no `{word}` line in {out}"))
}

/// A wait that times out reads who is in the way, and must never do so through a file this
/// process locks with: the probe would turn another thread's exclusive lock into its own and
/// its unlock drop it, and another process would take the same slot.
#[test]
fn a_timed_out_wait_never_unlocks_another_threads_slot() {
    let dir = tempdir();
    let gauge = dir.path().join("gauge");
    let slots = dir.path().join("slots");
    let secs = 5.0;
    let prober = client("time-out", &slots, &gauge, 2, secs);
    let rival = client("cycle", &slots, &gauge, 2, secs);
    let prober = output(prober);
    let rival = output(rival);
    let violations: Vec<&str> = prober
        .lines()
        .chain(rival.lines())
        .filter(|l| l.starts_with("VIOLATION"))
        .collect();
    // The attack really ran: waits timed out by the thousand, and the rival got its turns.
    assert!(count(&prober, "timeouts") > 1000, "{prober}");
    assert!(count(&rival, "grants") > 10, "{rival}");
    assert!(violations.is_empty(), "the cap broke: {violations:?}");
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A holder record as the slot directory's files keep it: JSON, a newline, spaces to 1 KiB.
fn record(pid: u32, since_ms: u64, units: usize) -> Vec<u8> {
    let mut b = format!(
        "{{\"pid\":{pid},\"test\":\"forged\",\"thread\":\"t\",\"since_unix_ms\":{since_ms},\
         \"exclusive\":false,\"concurrency\":1,\"units\":{units}}}\n"
    )
    .into_bytes();
    b.resize(1024, b' ');
    b
}

/// Writes `bytes` into `dir/name` and locks it, as a live process's file would be.
fn locked_file(dir: &Path, name: &str, bytes: &[u8]) -> File {
    let path = dir.join(name);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(bytes).unwrap();
    f.lock().unwrap();
    f
}

/// Waits up to [`LONG`] until `f` holds; fails with `what` otherwise.
fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` has a request waiting for the slots of `dir`.
fn is_waiting(dir: &Path, pid: u32) -> bool {
    status(dir).unwrap().waiters.iter().any(|r| r.pid == pid)
}

/// Whether process `pid` heads the queue of `dir`.
fn heads(dir: &Path, pid: u32) -> bool {
    status(dir)
        .unwrap()
        .head
        .is_some_and(|h| h.request.pid == pid)
}

/// A hold process on `dir` with N = 1 and a wait deadline of `timeout`.
fn hold(dir: &Path, timeout: &str) -> Holder {
    let mut c = cli(dir, 1);
    c.env("GPU_TEST_PERMIT_TIMEOUT", timeout).arg("hold");
    Holder::spawn(c)
}

/// Liveness is judged by signs of life, not by `/proc`: an older waiting request whose
/// record names a pid no process here has (forged, or of another PID namespace), one whose
/// pid is a running process but whose record shows no heartbeat (a process of another
/// namespace stopped, one frozen by the cgroup freezer: its `/proc` state is not `T`), and a
/// head of the queue of either kind, all lose their turn: a free slot goes to the waiter
/// behind them at once, not at its timeout.
#[test]
fn a_head_or_older_waiter_that_shows_no_progress_loses_its_turn() {
    let old = now_ms() - 60_000;
    // (what stands in, the file, the pid its record names)
    let cases: [(&str, &str, u32); 4] = [
        (
            "an older waiter whose pid no process has",
            "gpu0.wait.4000000",
            4_000_000,
        ),
        ("an older waiter with no heartbeat", "gpu0.wait.1", 1),
        ("a head whose pid no process has", "gpu0.gate", 4_000_000),
        ("a head with no heartbeat", "gpu0.gate", 1),
    ];
    for (what, file, pid) in cases {
        let dir = tempdir();
        let first = hold(dir.path(), "30s");
        assert!(first.held_within(LONG), "{what}");
        let _forged = locked_file(dir.path(), file, &record(pid, old, 1));
        let waiter = hold(dir.path(), "30s");
        let p = waiter.child.id();
        wait_until(
            || is_waiting(dir.path(), p),
            &format!("{what}: the waiter never waited"),
        );
        assert!(first.release().0.success());
        let released = Instant::now();
        assert!(
            waiter.held_within(Duration::from_secs(10)),
            "{what}: a free slot stayed free"
        );
        // The grace period, and some room for a loaded machine.
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            released.elapsed()
        );
        assert!(waiter.release().0.success(), "{what}");
    }
}

/// A wait that times out says why a request ahead of it lost its turn.
#[test]
fn a_timed_out_wait_says_why_a_request_ahead_lost_its_turn() {
    let dir = tempdir();
    let first = hold(dir.path(), "30s");
    assert!(first.held_within(LONG));
    let old = now_ms() - 60_000;
    let _head = locked_file(dir.path(), "gpu0.gate", &record(1, old, 1));
    let _unseen = locked_file(dir.path(), "gpu0.wait.4000000", &record(4_000_000, old, 1));
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_TIMEOUT", "2s")
        .arg("hold")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("at the head of the queue, no sign of life for"),
        "{err}"
    );
    assert!(
        err.contains("pid 4000000") && err.contains("names no process here"),
        "{err}"
    );
    drop(first);
}

/// The namespace case for real where this machine lets a test make a PID namespace
/// (`unshare --pid`, as root): a waiter inside one records itself as pid 1, heads the queue
/// and is stopped from outside; the waiter behind it takes the freed slot.
#[test]
fn a_stopped_head_in_another_pid_namespace_loses_its_turn() {
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        // The stand-in above covers the same records.
        println!("unshare --pid is not allowed here: covered by the stand-in records only");
        return;
    }
    let dir = tempdir();
    let first = hold(dir.path(), "30s");
    assert!(first.held_within(LONG));
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork"])
        .arg(crate::util::bin())
        .arg("hold");
    crate::util::clear_permit_env(&mut c);
    c.env("GPU_TEST_PERMIT_DIR", dir.path())
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "60s");
    let inner = Holder::spawn(c);
    // Inside its namespace it is pid 1: its record says so.
    wait_until(
        || heads(dir.path(), 1),
        "the namespaced waiter never headed the queue",
    );
    let unshare = inner.child.id();
    let children =
        std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    let outer: libc::pid_t = children.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: kill(2) of a grandchild of this test.
    assert_eq!(unsafe { libc::kill(outer, libc::SIGSTOP) }, 0);
    let behind = hold(dir.path(), "30s");
    let p = behind.child.id();
    wait_until(
        || is_waiting(dir.path(), p),
        "the waiter behind never waited",
    );
    assert!(first.release().0.success());
    let served = behind.held_within(Duration::from_secs(10));
    // SAFETY: as above.
    unsafe { libc::kill(outer, libc::SIGKILL) };
    assert!(
        served,
        "the waiter behind a stopped head of another namespace waited"
    );
}

/// N = 4, six processes take and return one unit every 200 ms, the 4-unit head of the queue
/// is stopped, and a 3-unit request arrives: it is the oldest waiter that keeps its turn, so
/// the light requests that come after it let it go first, and it is served long before its
/// deadline.
#[test]
fn a_heavy_request_behind_a_stopped_head_is_protected_from_light_newcomers() {
    let dir = tempdir();
    let gauge = dir.path().join("gauge");
    let slots = dir.path().join("slots");
    let lights: Vec<_> = (0..6)
        .map(|_| client("light", &slots, &gauge, 4, 30.0))
        .collect();
    let heavy = {
        let mut c = cli(&slots, 4);
        c.env("GPU_TEST_PERMIT_TIMEOUT", "60s")
            .args(["hold", "--units", "4"]);
        Holder::spawn(c)
    };
    let hp = heavy.child.id();
    wait_until(
        || heads(&slots, hp),
        "the 4-unit request never headed the queue",
    );
    // SAFETY: kill(2) of a child of this test.
    assert_eq!(unsafe { libc::kill(hp as libc::pid_t, libc::SIGSTOP) }, 0);
    let three = {
        let mut c = cli(&slots, 4);
        c.env("GPU_TEST_PERMIT_TIMEOUT", "10s")
            .args(["hold", "--units", "3", "--for", "100ms"]);
        Holder::spawn(c)
    };
    let served = three.held_within(Duration::from_secs(12));
    // SAFETY: as above.
    unsafe { libc::kill(hp as libc::pid_t, libc::SIGKILL) };
    let (status3, err3) = three.release();
    std::fs::write(gauge.with_extension("stop"), "").unwrap();
    for l in lights {
        let out = output(l);
        assert!(!out.contains("VIOLATION"), "{out}");
    }
    assert!(
        served && status3.success(),
        "the 3-unit request starved: {err3}"
    );
}

/// `status` and a timed-out wait say how long a slot has been held, not how long its holder
/// waited for it: the record is stamped at the grant.
#[test]
fn a_holders_record_is_stamped_when_the_slot_is_granted() {
    let dir = tempdir();
    let first = hold(dir.path(), "30s");
    assert!(first.held_within(LONG));
    let second = hold(dir.path(), "30s");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(first.release().0.success());
    assert!(second.held_within(LONG));
    let granted = now_ms();
    let s = status(dir.path()).unwrap();
    let since = s
        .slots
        .iter()
        .find_map(|slot| slot.holder.as_ref())
        .unwrap()
        .since_unix_ms;
    // Stamped at the grant, not 1.5 s earlier when it began to wait.
    assert!(
        granted.saturating_sub(since) < 700,
        "held since {since}, now {granted}"
    );
    drop(second);
}

/// A frozen process for the freezer test: the cgroup it is frozen in, thawed and removed on
/// drop.
struct Frozen {
    cgroup: PathBuf,
    v1: bool,
}

impl Frozen {
    /// Freezes process `pid` in a cgroup of its own (cgroup v1's freezer, else v2's
    /// `cgroup.freeze`); `None` where this machine does not let a test do that.
    fn freeze(pid: u32) -> Option<Frozen> {
        let name = format!("gtp-test-{}-{pid}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/freezer");
        let (cgroup, v1) = if v1.join("freezer.state").exists() || v1.join("tasks").exists() {
            (v1.join(&name), true)
        } else if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            (Path::new("/sys/fs/cgroup").join(&name), false)
        } else {
            return None;
        };
        std::fs::create_dir(&cgroup).ok()?;
        let frozen = Frozen { cgroup, v1 };
        let (procs, state, value) = if v1 {
            ("tasks", "freezer.state", "FROZEN")
        } else {
            ("cgroup.procs", "cgroup.freeze", "1")
        };
        std::fs::write(frozen.cgroup.join(procs), pid.to_string()).ok()?;
        std::fs::write(frozen.cgroup.join(state), value).ok()?;
        Some(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let (state, value) = if self.v1 {
            ("freezer.state", "THAWED")
        } else {
            ("cgroup.freeze", "0")
        };
        let _ = std::fs::write(self.cgroup.join(state), value);
        // Removable once its process is gone (the tests kill it first).
        for _ in 0..100 {
            if std::fs::remove_dir(&self.cgroup).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The freezer case for real where this machine lets a test freeze a process (as root, with
/// a cgroup freezer): a waiter heads the queue and is frozen, as `docker pause` does (its
/// `/proc` state is not "stopped"); the waiter behind it takes the freed slot.
#[test]
fn a_frozen_head_of_the_queue_loses_its_turn() {
    let dir = tempdir();
    let first = hold(dir.path(), "30s");
    assert!(first.held_within(LONG));
    let mut head = hold(dir.path(), "60s");
    let hp = head.child.id();
    wait_until(
        || heads(dir.path(), hp),
        "the waiter never headed the queue",
    );
    let Some(frozen) = Frozen::freeze(hp) else {
        // The stand-in records of the test above cover the same judgement.
        println!("no cgroup freezer can be used here: covered by the stand-in records only");
        return;
    };
    let behind = hold(dir.path(), "30s");
    let p = behind.child.id();
    wait_until(
        || is_waiting(dir.path(), p),
        "the waiter behind never waited",
    );
    assert!(first.release().0.success());
    let served = behind.held_within(Duration::from_secs(10));
    let _ = head.child.kill();
    drop(frozen);
    let _ = head.child.wait();
    assert!(served, "the waiter behind a frozen head waited");
}

/// `status` says which waiting requests lost their turn and why, rather than showing a pid
/// of another namespace (or a forged one) as if it were this machine's.
#[test]
fn status_says_which_waiters_lost_their_turn_and_why() {
    let dir = tempdir();
    let old = now_ms() - 60_000;
    let _unseen = locked_file(dir.path(), "gpu0.wait.4000000", &record(4_000_000, old, 1));
    let _silent = locked_file(dir.path(), "gpu0.wait.1", &record(1, old, 1));
    let s = status(dir.path()).unwrap();
    assert_eq!(s.waiters.len(), 2, "{s:?}");
    assert!(s.waiter_liveness.iter().all(|l| !l.keeps_turn()), "{s:?}");
    let out = cli(dir.path(), 1).arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |pid: &str| {
        text.lines()
            .find(|l| l.starts_with("waiting") && l.contains(pid))
            .unwrap_or_else(|| panic!("no waiting line for {pid}: {text}"))
            .to_string()
    };
    assert!(
        line("pid 4000000").contains("names no process here"),
        "{text}"
    );
    assert!(line("pid 1 ").contains("no sign of life for"), "{text}");
}
