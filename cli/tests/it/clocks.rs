//! Processes whose wall clocks are set apart (libfaketime, their boot and monotonic clocks
//! untouched): the queue's order and the ages `status` and the timeout diagnosis show are read
//! on the host's boot clock, which every process reads alike.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use gpu_test_permit::__private::host::status;

use crate::backfill::{pairs, wall_clock_off};
use crate::util::{Holder, cli, release, tempdir};

const LONG: Duration = Duration::from_secs(20);

/// A `hold` process on `dir` (N = 1, one GPU) with `env` beside the suite's.
fn hold(dir: &Path, env: &[(&str, &str)]) -> Holder {
    let mut c = cli(dir, 1);
    c.env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
        .arg("hold");
    for (k, v) in env {
        c.env(k, v);
    }
    Holder::spawn(c)
}

/// Waits, at most [`LONG`], until `f` holds.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + LONG;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until process `pid` is on record as waiting in `dir`: listed, or at the head.
fn listed(dir: &Path, pid: u32) {
    wait_until(&format!("pid {pid} waits"), || {
        let s = status(dir).unwrap();
        s.waiters.iter().any(|w| w.pid == pid)
            || s.head.as_ref().is_some_and(|h| h.request.pid == pid)
    });
}

/// The pid whose record holds the only slot of `dir`, once one does and it is not `not`.
fn next_holder(dir: &Path, not: u32) -> u32 {
    let mut holder = None;
    wait_until("the slot's next holder records itself", || {
        holder = status(dir)
            .unwrap()
            .slots
            .iter()
            .find_map(|slot| slot.holder.as_ref().map(|r| r.pid))
            .filter(|&pid| pid != not);
        holder.is_some()
    });
    holder.unwrap()
}

/// The queue is first come, first served between waiters (the head of the queue aside, which
/// holds the gate). Ordered by the wall clock each waiter stamped its wait with, a waiter
/// whose wall clock is an hour behind went ahead of one that had waited before it, and one
/// whose wall clock is an hour ahead went behind one that came after it. Ordered on the boot
/// clock, the first to wait is served first either way.
#[test]
fn a_waiter_whose_wall_clock_is_an_hour_off_keeps_its_place_in_the_queue() {
    for (first, second) in [("", "-1h"), ("+1h", "")] {
        let env = |offset: &str| match offset {
            "" => Some(Vec::new()),
            offset => wall_clock_off(offset),
        };
        let (Some(first_env), Some(second_env)) = (env(first), env(second)) else {
            eprintln!("not run: needs libfaketime (apt-get install faketime)");
            return;
        };
        let dir = tempdir();
        let dir = dir.path();
        let holder = hold(dir, &[]);
        assert!(holder.held_within(LONG), "the holder");
        // The head of the queue takes the slot next whatever the order: it holds the gate.
        let head = hold(dir, &[]);
        let head_pid = head.child.id();
        wait_until("the head holds the gate", || {
            status(dir)
                .unwrap()
                .head
                .is_some_and(|h| h.request.pid == head_pid)
        });
        let a = hold(dir, &pairs(&first_env));
        listed(dir, a.child.id());
        let b = hold(dir, &pairs(&second_env));
        listed(dir, b.child.id());
        let order: Vec<u32> = status(dir).unwrap().waiters.iter().map(|w| w.pid).collect();
        let (a_pid, b_pid) = (a.child.id(), b.child.id());
        assert_eq!(
            order
                .iter()
                .filter(|&&p| p == a_pid || p == b_pid)
                .copied()
                .collect::<Vec<_>>(),
            vec![a_pid, b_pid],
            "status's order of the waiters (first {first:?}, second {second:?})"
        );
        release(holder);
        assert!(head.held_within(LONG), "the head");
        release(head);
        let next = next_holder(dir, head_pid);
        assert_eq!(
            next, a_pid,
            "the first waiter's wall clock {first:?}, the second's {second:?}: the second \
             (pid {b_pid}) was served before the first (pid {a_pid})"
        );
        assert!(a.held_within(LONG), "the first waiter");
        assert!(!b.held_within(Duration::ZERO), "the cap");
        release(a);
        assert!(b.held_within(LONG), "the second waiter");
        release(b);
    }
}

/// The seconds `line` shows after `word` (`held 1.5s by …`), if it shows a number there.
fn seconds_after(line: &str, word: &str) -> Option<f64> {
    line.split(word)
        .nth(1)?
        .split_whitespace()
        .next()?
        .trim_end_matches(':')
        .strip_suffix('s')?
        .parse()
        .ok()
}

/// A holder whose wall clock is an hour ahead was shown by `status` as holding for 0.0s, and
/// the head of the queue behind it, with the same clock, as waiting for 0.0s; with wall
/// clocks an hour behind, both for an hour. Read on the boot clock, each shows how long it has
/// held or waited: at least the second it has been seen doing so, and no longer than since
/// the test started it.
#[test]
fn status_shows_how_long_a_process_whose_wall_clock_is_an_hour_off_has_held_and_waited() {
    for offset in ["+1h", "-1h"] {
        let Some(off) = wall_clock_off(offset) else {
            eprintln!("not run: needs libfaketime (apt-get install faketime)");
            return;
        };
        let dir = tempdir();
        let dir = dir.path();
        let started = Instant::now();
        let holder = hold(dir, &pairs(&off));
        assert!(holder.held_within(LONG), "the holder");
        let head = hold(dir, &pairs(&off));
        let head_pid = head.child.id();
        wait_until("the head holds the gate", || {
            status(dir)
                .unwrap()
                .head
                .is_some_and(|h| h.request.pid == head_pid)
        });
        std::thread::sleep(Duration::from_millis(1100));
        let out = cli(dir, 1).arg("status").output().unwrap();
        let upper = started.elapsed().as_secs_f64() + 0.1;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        for (prefix, word) in [("slot 0:", "held "), ("head of the queue", "queue ")] {
            let line = text
                .lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no `{prefix}` line:\n{text}"));
            let shown = seconds_after(line, word)
                .unwrap_or_else(|| panic!("wall clock {offset}: no age in `{line}`"));
            assert!(
                (1.0..=upper).contains(&shown),
                "wall clock {offset}: `{line}` shows {shown}s, not between 1.0s and {upper:.1}s"
            );
        }
        release(holder);
        assert!(head.held_within(LONG), "the head");
        release(head);
    }
}

/// The timeout diagnosis of a request that waited behind a holder whose wall clock is an hour
/// ahead said the holder had held for 0.0s, so not that it had held its permit for the whole
/// wait (it had: it looks stuck). Read on the boot clock, it says both.
#[test]
fn the_timeout_diagnosis_tells_how_long_a_holder_an_hour_ahead_has_held() {
    let Some(ahead) = wall_clock_off("+1h") else {
        eprintln!("not run: needs libfaketime (apt-get install faketime)");
        return;
    };
    let dir = tempdir();
    let dir = dir.path();
    let started = Instant::now();
    let holder = hold(dir, &pairs(&ahead));
    assert!(holder.held_within(LONG), "the holder");
    let out = cli(dir, 1)
        .env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "2s")
        .args(["hold", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let upper = started.elapsed().as_secs_f64() + 0.1;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "it did not time out: {err}");
    let line = err
        .lines()
        .find(|l| l.contains(&format!("pid {}) for ", holder.child.id())))
        .unwrap_or_else(|| panic!("the holder is not named:\n{err}"));
    let shown = seconds_after(line, ") for ").unwrap_or_else(|| panic!("no hold time in `{line}`"));
    assert!(
        (2.0..=upper).contains(&shown),
        "`{line}` shows {shown}s, not between the 2.0s wait and {upper:.1}s"
    );
    assert!(
        err.contains("Every holder held its permit for the whole wait"),
        "{err}"
    );
    release(holder);
}
