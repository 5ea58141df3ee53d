//! Weighted permits across real processes: `gpu-test-permit hold --units K` processes sharing
//! one temporary slot directory, `run --units K` passing its permit to a command, killed and
//! stopped holders and waiters, and permits that span two GPUs.

#![cfg(unix)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use gpu_test_permit::__private::host::{HostStatus, status};
use gpu_test_permit::{AcquireError, PermitKind};

use crate::util::{Holder, cli, signal, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Long enough for a process that could take its permit to have taken it.
const SETTLE: Duration = Duration::from_millis(400);

/// `hold --units units` (1: a plain `hold`) with N = `n`, plus `extra` arguments.
fn hold(dir: &Path, n: usize, units: usize, extra: &[&str]) -> Holder {
    let mut c = cli(dir, n);
    c.arg("hold");
    if units > 1 {
        c.args(["--units", &units.to_string()]);
    }
    c.args(extra);
    Holder::spawn(c)
}

/// What a `held pid=P units=K slots=A,B` line says.
#[derive(Debug)]
struct Held {
    units: usize,
    slots: Vec<usize>,
}

/// Waits up to `d` for `h`'s `held` line.
fn held_within(h: &Holder, d: Duration) -> Option<Held> {
    let line = h.lines.recv_timeout(d).ok()?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_string()
    };
    assert!(line.starts_with("held "), "{line}");
    Some(Held {
        units: field("units=").parse().unwrap(),
        slots: field("slots=")
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect(),
    })
}

fn pid(h: &Holder) -> u32 {
    h.child.id()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn slots_of(s: &HostStatus, pid: u32) -> Vec<usize> {
    s.slots
        .iter()
        .filter(|slot| slot.holder.as_ref().is_some_and(|r| r.pid == pid))
        .map(|slot| slot.index)
        .collect()
}

/// The units a waiting process asks for, if it is listed as waiting.
fn waiting_units(s: &HostStatus, pid: u32) -> Option<usize> {
    s.waiters.iter().find(|w| w.pid == pid).map(|w| w.units)
}

/// `status` as the CLI prints it.
fn status_text(dir: &Path, n: usize) -> String {
    let out = cli(dir, n).arg("status").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_waiting_heavy_request_holds_no_slot_and_two_of_them_are_served_in_turn() {
    let dir = tempdir();
    let light = hold(dir.path(), 4, 2, &[]);
    assert_eq!(held_within(&light, LONG).unwrap().units, 2);
    let a = hold(dir.path(), 4, 3, &[]);
    let b = hold(dir.path(), 4, 3, &[]);
    wait_until("both heavy requests are listed as waiting", || {
        let s = status(dir.path()).unwrap();
        waiting_units(&s, pid(&a)) == Some(3) && waiting_units(&s, pid(&b)) == Some(3)
    });
    // While they wait, every slot with a holder is the 2-unit holder's; the waiters hold
    // nothing, however often one looks.
    for _ in 0..50 {
        let s = status(dir.path()).unwrap();
        let mut held: Vec<usize> = s
            .slots
            .iter()
            .filter(|slot| slot.holder.is_some())
            .map(|slot| slot.index)
            .collect();
        held.sort();
        assert_eq!(held, slots_of(&s, pid(&light)), "{s:?}");
        assert_eq!(held.len(), 2, "{s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = status_text(dir.path(), 4);
    assert!(
        text.lines().any(|l| l.starts_with("waiting")
            && l.contains(&format!("pid {}", pid(&a)))
            && l.ends_with(", 3 units")),
        "{text}"
    );
    assert!(held_within(&a, Duration::ZERO).is_none());
    assert!(held_within(&b, Duration::ZERO).is_none());

    // Two units come free: still not enough for either.
    assert!(light.release().0.success());
    let first = std::iter::repeat_with(|| {
        for (h, other) in [(&a, &b), (&b, &a)] {
            if let Some(got) = held_within(h, Duration::from_millis(10)) {
                return Some((h, other, got));
            }
        }
        None
    })
    .take(2000)
    .flatten()
    .next();
    let (first, second, got) = first.expect("neither 3-unit request was served");
    assert_eq!(got.slots.len(), 3, "{got:?}");
    assert!(
        held_within(second, SETTLE).is_none(),
        "both 3-unit permits were out with N = 4"
    );
    // The first one's release serves the second.
    signal(pid(first), libc::SIGKILL);
    assert_eq!(held_within(second, LONG).map(|h| h.units), Some(3));
}

#[test]
fn light_holders_run_beside_a_heavy_one_while_units_remain_and_status_lists_it_once() {
    let dir = tempdir();
    let heavy = hold(dir.path(), 4, 2, &[]);
    let got = held_within(&heavy, LONG).unwrap();
    assert_eq!(got.slots, [0, 1]);
    let lights: Vec<Holder> = (0..2).map(|_| hold(dir.path(), 4, 1, &[])).collect();
    for l in &lights {
        assert!(held_within(l, LONG).is_some(), "a light holder waited");
    }
    let third = hold(dir.path(), 4, 1, &[]);
    assert!(
        held_within(&third, SETTLE).is_none(),
        "5 units out with N = 4"
    );

    let text = status_text(dir.path(), 4);
    let heavy_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("pid {} ", pid(&heavy))))
        .collect();
    assert_eq!(heavy_lines.len(), 1, "{text}");
    assert!(heavy_lines[0].starts_with("slots 0,1: held "), "{text}");
    assert!(heavy_lines[0].ends_with(", 2 units"), "{text}");
    for l in &lights {
        assert_eq!(
            text.lines()
                .filter(
                    |line| line.starts_with("slot ") && line.contains(&format!("pid {} ", pid(l)))
                )
                .count(),
            1,
            "{text}"
        );
    }
    assert!(
        text.lines().any(|l| l.starts_with("waiting")
            && l.contains(&format!("pid {} ", pid(&third)))
            && !l.contains("units")),
        "{text}"
    );
}

#[test]
fn a_killed_heavy_holder_frees_all_its_units_at_once() {
    let dir = tempdir();
    let mut heavy = hold(dir.path(), 4, 4, &[]);
    assert_eq!(held_within(&heavy, LONG).unwrap().slots, [0, 1, 2, 3]);
    let next = hold(dir.path(), 4, 4, &[]);
    wait_until("the second 4-unit request waits", || {
        waiting_units(&status(dir.path()).unwrap(), pid(&next)) == Some(4)
    });
    let killed = Instant::now();
    heavy.child.kill().unwrap(); // SIGKILL: no destructor runs
    heavy.child.wait().unwrap();
    let got = held_within(&next, LONG).expect("the 4 units never came free");
    assert_eq!(got.slots, [0, 1, 2, 3]);
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
}

#[test]
fn on_two_gpus_a_weighted_permit_takes_its_units_from_one() {
    let dir = tempdir();
    let two_gpus = |units: usize, extra: &[&str]| {
        let mut c = cli(dir.path(), 2);
        // Spread: one-unit permits take the lowest free slot, one on each GPU.
        c.env("GPU_TEST_PERMIT_GPUS", "2")
            .env("GPU_TEST_PERMIT_PLACEMENT", "spread")
            .arg("hold");
        if units > 1 {
            c.args(["--units", &units.to_string()]);
        }
        c.args(extra);
        Holder::spawn(c)
    };
    // Slot 0 (GPU 0) and slot 1 (GPU 1) taken: two units are free, one on each GPU.
    let on_gpu0 = two_gpus(1, &[]);
    assert_eq!(held_within(&on_gpu0, LONG).unwrap().slots, [0]);
    let on_gpu1 = two_gpus(1, &[]);
    assert_eq!(held_within(&on_gpu1, LONG).unwrap().slots, [1]);
    let heavy = two_gpus(2, &[]);
    assert!(
        held_within(&heavy, SETTLE).is_none(),
        "a 2-unit permit took units of two GPUs"
    );
    // GPU 0 frees: the heavy request takes both of its slots.
    assert!(on_gpu0.release().0.success());
    let got = held_within(&heavy, LONG).unwrap();
    assert_eq!(got.slots, [0, 2]);
    drop(heavy);
    drop(on_gpu1);
    // Many at once, light and heavy: every permit keeps to one GPU.
    let all: Vec<Holder> = (0..8)
        .map(|i| two_gpus(1 + i % 2, &["--for", "50ms"]))
        .collect();
    for h in &all {
        let got = held_within(h, LONG).expect("a holder never got its permit");
        assert!(
            got.slots.iter().all(|s| s % 2 == got.slots[0] % 2),
            "{got:?}"
        );
        assert_eq!(got.slots.len(), got.units);
    }
}

#[test]
fn a_heavy_request_is_served_while_light_holders_keep_coming() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let n = 4;
    let spawn = |units: usize, hold_for: &str| {
        let mut c = cli(dir.path(), n);
        c.env("GPU_TEST_PERMIT_TRACE", &trace)
            .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
            .args(["hold", "--units", &units.to_string(), "--for", hold_for])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn().unwrap()
    };
    // Light holders fill the slots and keep coming, one every 60 ms for 4 s, each for 250 ms:
    // about what N = 4 slots can serve, so the light ones alone would keep the GPU busy.
    let stream_end = Instant::now() + Duration::from_secs(4);
    let mut lights = Vec::new();
    while lights.len() < n {
        lights.push(spawn(1, "250ms"));
    }
    wait_until("light holders fill the slots", || {
        status(dir.path())
            .unwrap()
            .slots
            .iter()
            .filter(|s| s.holder.is_some())
            .count()
            == n
    });
    let mut heavy = spawn(n - 1, "400ms");
    let heavy_pid = heavy.id();
    let mut head_at = None;
    let mut heavy_done = None;
    while Instant::now() < stream_end {
        std::thread::sleep(Duration::from_millis(60));
        lights.push(spawn(1, "250ms"));
        if head_at.is_none()
            && status(dir.path())
                .unwrap()
                .head
                .is_some_and(|h| h.request.pid == heavy_pid)
        {
            head_at = Some(SystemTime::now());
        }
        if heavy_done.is_none() && heavy.try_wait().unwrap().is_some() {
            heavy_done = Some(Instant::now());
        }
    }
    let heavy_status = heavy.wait().unwrap();
    for mut l in lights {
        assert!(l.wait().unwrap().success());
    }
    assert!(heavy_status.success());
    assert!(
        heavy_done.is_some(),
        "the 3-unit request was not served before the stream of light holders ended"
    );

    let events = gpu_test_permit::trace::read_events(&trace).unwrap();
    let holds: Vec<_> = events.iter().filter(|e| e.name == "hold").collect();
    let heavy_hold = holds.iter().find(|e| e.pid == heavy_pid).unwrap();
    assert_eq!(heavy_hold.args.units, n - 1);
    let heavy_wait = events
        .iter()
        .find(|e| e.name == "wait" && e.pid == heavy_pid)
        .unwrap();
    // Served within a bounded time: the light holders in its way hold 250 ms each.
    assert!(
        heavy_wait.dur < 2_000_000,
        "the heavy request waited {} ms",
        heavy_wait.dur / 1000
    );
    // Light requests that came once it headed the queue did not overtake it.
    let head_at = head_at.expect("status never showed the heavy request at the head");
    {
        let head_us = head_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let later: Vec<_> = events
            .iter()
            .filter(|e| e.name == "wait" && e.pid != heavy_pid && e.ts > head_us)
            .collect();
        assert!(
            !later.is_empty(),
            "no light request came after the heavy one"
        );
        for w in later {
            let granted = w.ts + w.dur;
            assert!(
                granted >= heavy_hold.ts,
                "a light request that came after the heavy one headed the queue got its permit \
                 {} ms before it",
                (heavy_hold.ts - granted) / 1000
            );
        }
    }
    // Never more than N units at once, counted from the holds.
    let mut edges: Vec<(u64, i64)> = holds
        .iter()
        .flat_map(|e| {
            [
                (e.ts, e.args.units as i64),
                (e.ts + e.dur, -(e.args.units as i64)),
            ]
        })
        .collect();
    edges.sort_by_key(|&(t, d)| (t, d));
    let mut now = 0;
    for (_, d) in edges {
        now += d;
        assert!(now <= n as i64, "{now} units held at once with N = {n}");
    }
}

#[test]
fn a_stopped_heavy_request_at_the_head_does_not_keep_a_freed_slot_from_light_ones() {
    let dir = tempdir();
    let a = hold(dir.path(), 2, 1, &[]);
    assert!(held_within(&a, LONG).is_some());
    let b = hold(dir.path(), 2, 1, &[]);
    assert!(held_within(&b, LONG).is_some());
    let heavy = hold(dir.path(), 2, 2, &[]);
    wait_until("the heavy request heads the queue", || {
        status(dir.path())
            .unwrap()
            .head
            .is_some_and(|h| h.request.pid == pid(&heavy) && h.request.units == 2)
    });
    signal(pid(&heavy), libc::SIGSTOP);
    wait_until("status shows the head stopped", || {
        status(dir.path()).unwrap().head.is_some_and(|h| h.stopped)
    });
    let text = status_text(dir.path(), 2);
    assert!(
        text.lines()
            .any(|l| l.starts_with("head of the queue") && l.contains("2 units")),
        "{text}"
    );
    assert!(a.release().0.success());
    // One slot is free; the stopped head cannot take it (and could not use one alone): a
    // light request behind it must.
    let light = hold(dir.path(), 2, 1, &["--for", "100ms"]);
    let took = held_within(&light, Duration::from_secs(10)).is_some();
    signal(pid(&heavy), libc::SIGCONT);
    assert!(
        took,
        "a free slot stayed free behind a stopped heavy request"
    );
    // Resumed, the heavy request still gets its turn once both units are free.
    assert!(b.release().0.success());
    assert_eq!(held_within(&heavy, LONG).map(|h| h.units), Some(2));
}

#[test]
fn a_stopped_heavy_holder_keeps_its_units_and_a_timed_out_wait_names_them() {
    let dir = tempdir();
    let heavy = hold(dir.path(), 3, 2, &[]);
    assert!(held_within(&heavy, LONG).is_some());
    signal(pid(&heavy), libc::SIGSTOP);
    // The third unit is still free for others.
    let light = hold(dir.path(), 3, 1, &[]);
    assert!(held_within(&light, LONG).is_some());
    let out = cli(dir.path(), 3)
        .env("GPU_TEST_PERMIT_TIMEOUT", "500ms")
        .args(["hold", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    signal(pid(&heavy), libc::SIGCONT);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains(&format!("pid {})", pid(&heavy))))
        .unwrap_or_else(|| panic!("the stopped holder is not named: {err}"));
    assert!(
        line.contains(", 2 units") && line.contains("its process stopped"),
        "{err}"
    );
    assert!(err.contains(&format!("pid {})", pid(&light))), "{err}");
}

/// Set for the child run of [`inherited_weighted_child`].
const CHILD: &str = "GTP_WEIGHTED_INHERIT_CHILD";

/// The child side of [`run_units_passes_a_k_unit_permit_to_its_command`]: it runs inside
/// `run --units 3`'s permit. Passes at once when run on its own.
#[test]
fn inherited_weighted_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let pool = gpu_test_permit::PermitPool::global();
    // The processes inside run's permit share it through slots of their own beside its slots.
    assert!(
        pool.slot_dir()
            .is_some_and(|d| d.to_string_lossy().contains(".inside-"))
    );
    assert_eq!(pool.capacity(), 3);
    let asked = Instant::now();
    let all = gpu_test_permit::acquire_weighted(3);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(all.units(), 3);
    println!("slots={:?}", all.slots());
    // Every unit is out: another thread finds none.
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(matches!(
                pool.try_acquire(PermitKind::Shared),
                Err(AcquireError::WouldBlock)
            ));
        });
    });
    drop(all);
    let err = pool.request().units(4).try_acquire().unwrap_err();
    assert!(
        matches!(
            err,
            AcquireError::TooLarge {
                asked: 4,
                per_gpu: 3,
                inherited: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--units 4"), "{err}");
    // One unit here, two on another thread: on slots of their own.
    let one = gpu_test_permit::acquire();
    let two = std::thread::scope(|s| s.spawn(|| pool.acquire_weighted(2).slots()).join().unwrap());
    assert_eq!(two.len(), 2);
    assert!(
        !two.contains(&one.slots()[0]),
        "permits on one inherited slot: {:?} and {two:?}",
        one.slots()
    );
    println!("inside run's 3-unit permit");
}

#[test]
fn run_units_passes_a_k_unit_permit_to_its_command() {
    let dir = tempdir();
    let light = hold(dir.path(), 4, 1, &[]);
    assert_eq!(held_within(&light, LONG).unwrap().slots, [0]);
    let mut c = cli(dir.path(), 4);
    c.env("GPU_TEST_PERMIT_TIMEOUT", "30s")
        .env(CHILD, "1")
        .args(["run", "--units", "3", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "weighted_processes::inherited_weighted_child",
            "--exact",
            "--nocapture",
        ]);
    let start = Instant::now();
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("inside run's 3-unit permit"), "{stdout}");
    // The command's 3-unit permit is run's: slots 1 to 3 (slot 0 is taken).
    assert!(stdout.contains("slots=[1, 2, 3]"), "{stdout}");
    // It would have waited for its own parent until the 30 s deadline.
    assert!(start.elapsed() < Duration::from_secs(15));
}

#[test]
fn run_units_holds_its_units_while_the_command_runs() {
    let dir = tempdir();
    let run = Holder::spawn({
        let mut c = cli(dir.path(), 3);
        c.args([
            "run",
            "--units",
            "2",
            "--",
            "sh",
            "-c",
            "echo started; read x; true",
        ]);
        c
    });
    assert_eq!(
        run.lines.recv_timeout(LONG).as_deref(),
        Ok("started"),
        "run did not start its command"
    );
    let s = status(dir.path()).unwrap();
    assert_eq!(slots_of(&s, pid(&run)), [0, 1], "{s:?}");
    // One unit is left beside run's two: a light holder gets it, a heavy one waits.
    let light = hold(dir.path(), 3, 1, &[]);
    assert_eq!(held_within(&light, LONG).unwrap().slots, [2]);
    drop(light);
    let heavy = hold(dir.path(), 3, 2, &[]);
    assert!(
        held_within(&heavy, SETTLE).is_none(),
        "4 units out with N = 3"
    );
    let (status, err) = run.release();
    assert!(status.success(), "{err}");
    assert!(held_within(&heavy, LONG).is_some());
}

#[test]
fn an_inherited_permit_of_k_slots_on_its_gpus_reads_back_and_others_are_refused() {
    use gpu_test_permit::config::InheritedPermit;
    use std::ffi::OsStr;
    // N = 4 on two GPUs: slots 0, 2, 4, 6 are GPU 0's.
    let good = "1:4x2:shared:2=5/1/10,6=6/1/11:/tmp/slots";
    let p = InheritedPermit::parse(OsStr::new(good)).unwrap();
    assert_eq!(p.slots.iter().map(|s| s.index).collect::<Vec<_>>(), [2, 6]);
    assert_eq!(p.to_os_string(), good);
    // A permit on two GPUs, one slot on each.
    let two = "1:4x2:shared:0=5/1/10,1=6/1/11:/tmp/slots";
    assert_eq!(
        InheritedPermit::parse(OsStr::new(two)).unwrap().devices(),
        [0, 1]
    );
    for bad in [
        // Slots of two GPUs, more on one than on the other.
        "1:4x2:shared:0=5/1/10,1=6/1/11,2=7/1/12:/tmp/slots",
        // The same slot twice.
        "1:4x2:shared:2=5/1/10,2=6/1/11:/tmp/slots",
        // More slots than one GPU has.
        "1:2x2:shared:0=5/1/10,2=6/1/11,4=7/1/12:/tmp/slots",
        // A slot the layout does not have.
        "1:2x1:shared:0=5/1/10,2=6/1/11:/tmp/slots",
    ] {
        let err = InheritedPermit::parse(OsStr::new(bad)).unwrap_err();
        assert!(err.contains("do not fit"), "{bad}: {err}");
    }
}

#[test]
fn a_memory_request_takes_the_units_its_size_needs() {
    let dir = tempdir();
    let out = cli(dir.path(), 4)
        .env("GPU_TEST_PERMIT_GPU_MEMORY", "16GiB")
        .args(["hold", "--memory", "6GiB", "--for", "1ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // 6 GiB of 16 GiB with N = 4: two units of 4 GiB.
    assert!(text.starts_with("held pid="), "{text}");
    assert!(text.contains(" units=2 slots=0,1\n"), "{text}");
}

/// A process stopped in the microseconds between locking some of a weighted permit's slots and
/// finding it cannot have them all keeps those slots, with no record in them, until it is
/// resumed or killed. `flock(1)` stands in for it (a slot locked, no record written): a wait
/// that times out names its pid and says it is stopped, as `status` does, and killing it
/// frees the slot.
#[cfg(target_os = "linux")]
#[test]
fn slots_locked_without_a_record_by_a_stopped_process_are_named() {
    let dir = tempdir();
    let a = hold(dir.path(), 2, 1, &[]);
    let taken = held_within(&a, LONG).unwrap().slots[0];
    let free = 1 - taken;
    // `--close`: the lock stays with flock itself, not with the command it runs.
    let mut locker = std::process::Command::new("flock")
        .args(["--nonblock", "--exclusive", "--close"])
        .arg(dir.path().join(format!("gpu0.slot{free}")))
        .args(["sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("flock(1), from util-linux");
    let locker_pid = locker.id();
    wait_until("the stand-in holds the free slot", || {
        status(dir.path())
            .unwrap()
            .slots
            .iter()
            .any(|s| s.index == free && s.held)
    });
    signal(locker_pid, libc::SIGSTOP);
    let out = cli(dir.path(), 2)
        .env("GPU_TEST_PERMIT_TIMEOUT", "500ms")
        .args(["hold", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = status(dir.path()).unwrap();
    let text = status_text(dir.path(), 2);
    signal(locker_pid, libc::SIGKILL);
    let _ = locker.wait();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "1 slot(s) locked by pid {locker_pid} that wrote no record there, its process \
             stopped (SIGSTOP, Ctrl-Z or a debugger)"
        )),
        "{err}"
    );
    // The holder with a record is named as before.
    assert!(err.contains(&format!("pid {})", pid(&a))), "{err}");
    let slot = s.slots.iter().find(|slot| slot.index == free).unwrap();
    assert_eq!(
        (slot.held, slot.owner, slot.owner_stopped),
        (true, Some(locker_pid), true)
    );
    assert!(
        text.contains(&format!(
            "slot {free}: held (no readable record) by pid {locker_pid}, its process stopped"
        )),
        "{text}"
    );
    // Killed, it frees the slot.
    let b = hold(dir.path(), 2, 1, &["--for", "1ms"]);
    assert_eq!(held_within(&b, LONG).map(|h| h.slots), Some(vec![free]));
}

/// Processes that wait for the slots are served in the order they began to wait, not in the
/// order they happen to wake after a release: five waiters behind one holder at N = 1, each
/// holding for 50 ms once served, take their turns first come first served (checked from the
/// trace). Racing for the gate, four of them would come in any of 24 orders.
#[test]
fn waiting_processes_are_served_in_the_order_they_began_to_wait() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    let spawn = |hold_for: &[&str]| {
        let mut c = cli(dir.path(), 1);
        c.env("GPU_TEST_PERMIT_TRACE", &trace)
            .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
            .arg("hold")
            .args(hold_for);
        Holder::spawn(c)
    };
    let first = spawn(&[]);
    assert!(held_within(&first, LONG).is_some());
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let w = spawn(&["--for", "50ms"]);
        let p = pid(&w);
        wait_until("the new request waits", || {
            status(dir.path())
                .unwrap()
                .waiters
                .iter()
                .any(|r| r.pid == p)
        });
        // Waiting records count milliseconds: the next one begins to wait in a later one.
        std::thread::sleep(Duration::from_millis(3));
        waiters.push(w);
    }
    let order: Vec<u32> = waiters.iter().map(pid).collect();
    assert!(first.release().0.success());
    for w in &waiters {
        assert!(held_within(w, LONG).is_some(), "a waiter was never served");
    }
    for w in waiters {
        assert!(w.release().0.success());
    }
    let mut holds: Vec<_> = gpu_test_permit::trace::read_events(&trace)
        .unwrap()
        .into_iter()
        .filter(|e| e.name == "hold")
        .collect();
    holds.sort_by_key(|e| e.ts);
    let served: Vec<u32> = holds.iter().map(|e| e.pid).skip(1).collect();
    assert_eq!(served, order, "served out of the order they began to wait");
}

/// A waiter that was killed, or is stopped, leaves no turn to wait for: the younger waiter
/// behind it takes the freed slot without waiting for it.
#[test]
fn a_killed_or_stopped_older_waiter_does_not_hold_back_a_younger_one() {
    for sig in [libc::SIGKILL, libc::SIGSTOP] {
        let dir = tempdir();
        let first = hold(dir.path(), 1, 1, &[]);
        assert!(held_within(&first, LONG).is_some());
        let older = hold(dir.path(), 1, 1, &[]);
        let younger = hold(dir.path(), 1, 1, &[]);
        for w in [&older, &younger] {
            let p = pid(w);
            wait_until("the request waits", || {
                status(dir.path())
                    .unwrap()
                    .waiters
                    .iter()
                    .any(|r| r.pid == p)
            });
            std::thread::sleep(Duration::from_millis(3));
        }
        signal(pid(&older), sig);
        assert!(first.release().0.success());
        let served = held_within(&younger, Duration::from_secs(10)).is_some();
        if sig == libc::SIGSTOP {
            signal(pid(&older), libc::SIGCONT);
        }
        assert!(
            served,
            "signal {sig}: the younger waiter waited for the older one"
        );
    }
}

/// A waiter lists itself while other processes read the directory as fast as they can:
/// `status` and sweepers lock each wait file a moment to tell a leftover from a live one, and a
/// waiter that met such a probe while it took its own file's lock must still list itself.
#[test]
fn waiters_list_themselves_while_the_directory_is_read_without_pause() {
    let dir = tempdir();
    let first = hold(dir.path(), 1, 1, &[]);
    assert!(held_within(&first, LONG).is_some());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, dir) = (stop.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = status(&dir);
                }
            })
        })
        .collect();
    let waiters: Vec<Holder> = (0..16).map(|_| hold(dir.path(), 1, 1, &[])).collect();
    let pids: Vec<u32> = waiters.iter().map(pid).collect();
    let end = Instant::now() + LONG;
    loop {
        let now = status(dir.path()).unwrap();
        let unlisted: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !now.waiters.iter().any(|r| r.pid == *p))
            .collect();
        if unlisted.is_empty() {
            break;
        }
        if Instant::now() >= end {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let files: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            let ended: Vec<String> = waiters
                .into_iter()
                .filter(|w| unlisted.contains(&pid(w)))
                .map(|mut w| {
                    let p = pid(&w);
                    // SIGKILL (as it shows) where it still waited; its own status where not.
                    let _ = w.child.kill();
                    let (status, err) = w.release();
                    format!("{p}: {status}, stderr {err:?}")
                })
                .collect();
            panic!(
                "{} of 16 requests never listed: {ended:?}; files {files:?}; {now:#?}",
                unlisted.len()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
}
