//! Backfilling across real processes: `gpu-test-permit hold` processes named as nextest names
//! tests (`NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME`), sharing one slot directory, with hold
//! times on record in the state directory's `gpu0.tests` that the test writes (and forges).
//! Each holder holds until the test closes its standard input, so what is checked is who gets
//! units while whom waits, never how fast.

#![cfg(unix)]

use std::time::Duration;

use gpu_test_permit::__private::host::status;

use crate::util::{Holder, cli, release, signal, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Long enough for a process that could take its permit to have taken it.
const SETTLE: Duration = Duration::from_millis(600);

struct Suite {
    dir: tempfile::TempDir,
    n: usize,
    gpus: usize,
}

impl Suite {
    fn new(n: usize) -> Suite {
        Suite::on_gpus(n, 1)
    }

    /// `gpus` GPUs of N = `n` units each.
    fn on_gpus(n: usize, gpus: usize) -> Suite {
        let dir = tempdir();
        std::fs::create_dir(dir.path().join("slots")).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        Suite { dir, n, gpus }
    }

    fn slots(&self) -> std::path::PathBuf {
        self.dir.path().join("slots")
    }

    /// The hold events of the trace every holder writes: (test, whether it was backfilled).
    fn holds(&self) -> Vec<(String, bool)> {
        let text = std::fs::read_to_string(self.dir.path().join("trace.json")).unwrap();
        text.lines()
            .filter(|l| l.contains("\"name\":\"hold\""))
            .map(|l| {
                let test = l
                    .split("\"test\":\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                (test.to_string(), l.contains("\"backfilled\":true"))
            })
            .collect()
    }

    fn history(&self) -> std::path::PathBuf {
        self.dir.path().join("state").join("gpu0.tests")
    }

    /// Hold times on record, in `gpu0.tests`'s format: binary `suite`, each test's name and
    /// its hold time in microseconds.
    fn record(&self, tests: &[(&str, u64)]) {
        let lines: String = tests
            .iter()
            .map(|(name, us)| {
                format!(
                    "{{\"test\":\"suite::{name}\",\"us\":{us},\"seen\":1,\"binary\":\"suite\",\"name\":\"{name}\"}}\n"
                )
            })
            .collect();
        std::fs::write(self.history(), lines).unwrap();
    }

    /// A `hold` process of test `name` (of binary `suite`) with `args` (`--units 5`,
    /// `--exclusive`), and `env` beside the suite's.
    fn hold(&self, name: &str, args: &[&str], env: &[(&str, &str)]) -> Holder {
        let mut c = cli(&self.slots(), self.n);
        c.env("GPU_TEST_PERMIT_STATE", self.dir.path().join("state"))
            .env("NEXTEST_RUN_ID", "backfill-test")
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_BINARY_ID", "suite")
            .env("NEXTEST_TEST_NAME", name)
            .env("GPU_TEST_PERMIT_TIMEOUT", "60s")
            .env("GPU_TEST_PERMIT_GPUS", self.gpus.to_string())
            .env("GPU_TEST_PERMIT_TRACE", self.dir.path().join("trace.json"))
            .arg("hold")
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Holder::spawn(c)
    }

    /// A heavy holder of `units` units, and then a heavy head (`head_args`) waiting behind it.
    fn holder_and_head(&self, units: &str, head_args: &[&str]) -> (Holder, Holder) {
        let holder = self.hold("heavy", &["--units", units], &[]);
        assert!(holder.held_within(LONG), "the heavy holder");
        let head = self.hold("heavy", head_args, &[]);
        self.wait_for_head(&head);
        (holder, head)
    }

    /// Waits until `h` heads the queue (holds the gate with its record).
    fn wait_for_head(&self, h: &Holder) {
        crate::util::wait_for_head(&self.slots(), h.child.id(), LONG);
    }
}

impl Suite {
    /// Asserts that `h` holds its permit within [`LONG`]; if not, says who holds what.
    fn starts(&self, h: &Holder, what: &str) {
        if !h.held_within(LONG) {
            let held: Vec<String> = status(&self.slots())
                .map(|s| {
                    s.slots
                        .iter()
                        .filter(|slot| slot.held)
                        .map(|slot| match &slot.holder {
                            Some(r) => format!("{}: {} ({})", slot.index, r.test, r.pid),
                            None => format!("{}: no record", slot.index),
                        })
                        .collect()
                })
                .unwrap_or_default();
            panic!(
                "{what}; slots held: {held:?}; holds so far (test, backfilled): {:?}",
                self.holds()
            );
        }
    }
}

/// A heavy holder of 5 units of 8 and a heavy head waiting for 5: the three units the head
/// cannot use yet go to light tests whose hold times on record end before the head could
/// start, and the head starts the moment the holder lets go.
#[test]
fn light_tests_take_the_units_a_waiting_heavy_head_cannot_use_yet() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("light", 1_000_000)]);
    let (h1, h2) = s.holder_and_head("5", &["--units", "5"]);
    let lights: Vec<Holder> = (0..3).map(|_| s.hold("light", &[], &[])).collect();
    for l in &lights {
        assert!(
            l.held_within(LONG),
            "a light test waited behind the heavy head"
        );
    }
    // No unit is left: the next light one waits, and so does the head.
    let l4 = s.hold("light", &[], &[]);
    assert!(!l4.held_within(SETTLE));
    assert!(!h2.held_within(Duration::ZERO));
    release(h1);
    s.starts(&h2, "the head did not start when the holder let go");
    assert!(
        !l4.held_within(SETTLE),
        "a light test took a unit with none free"
    );
    for l in lights {
        release(l);
    }
    assert!(l4.held_within(LONG));
    release(h2);
    release(l4);
    // The trace marks the three light holds that went past the head, and only those.
    let mut holds = s.holds();
    holds.sort();
    let want = [("heavy", false), ("heavy", false), ("light", false)]
        .into_iter()
        .chain([("light", true); 3]);
    let mut want: Vec<(String, bool)> = want.map(|(t, b)| (t.to_string(), b)).collect();
    want.sort();
    assert_eq!(holds, want);
    // And `gpu-test-permit trace` counts them.
    let out = cli(&s.slots(), 8)
        .arg("trace")
        .arg(s.dir.path().join("trace.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("backfilled: 3 of the holds were granted past a request waiting"),
        "{text}"
    );
}

/// A holder of several units lets go of them under `gpu0.backfill`, so that no backfiller's
/// count sees some of them free and the rest held on (and a head that can start now as one
/// still waiting for them): held by another process, the release waits for it, 50 ms at most,
/// and then lets go without it. Where no request has backfilled, the file is not there, and
/// a release does not make it.
#[test]
fn a_holder_of_several_units_lets_go_of_them_under_the_backfill_lock() {
    let s = Suite::new(8);
    // Where no request has backfilled there is no lock to take, and none is made.
    let h = s.hold("heavy", &["--units", "5"], &[]);
    assert!(h.held_within(LONG));
    release(h);
    assert!(!s.slots().join("gpu0.backfill").exists());
    let h = s.hold("heavy", &["--units", "5"], &[]);
    assert!(h.held_within(LONG));
    let stuck = std::fs::File::create(s.slots().join("gpu0.backfill")).unwrap();
    stuck.lock().unwrap();
    let start = std::time::Instant::now();
    release(h);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(50),
        "it let go of its units in {took:?}, without waiting for the backfill lock"
    );
    // Every unit is free again, the backfill lock still held.
    let all = s.hold("heavy", &["--exclusive"], &[]);
    s.starts(&all, "the units were not let go");
    release(all);
}

/// The race the backfill lock closes, with real processes: a holder of 20 units of 32 lets go
/// while a head for 20 waits behind it, a light holder of the 12 others is expected to let go
/// soon, and light requests wait. A count made while the holder is halfway through letting go
/// (some of its units free, the rest held for long by its record) would find the head fitting
/// only once the light holder has gone, and a waiting request fitting beside it: the head,
/// which could start now, would wait for the light holder. Each round, the head starts.
#[test]
fn a_head_starts_when_a_holder_of_several_units_lets_go_with_light_requests_waiting() {
    for round in 0..8 {
        let s = Suite::new(32);
        s.record(&[("heavy", 100_000_000), ("light", 5_000_000)]);
        let (h1, head) = s.holder_and_head("20", &["--units", "20"]);
        let light = s.hold("light", &["--units", "12"], &[]);
        assert!(
            light.held_within(LONG),
            "round {round}: done before the head"
        );
        let waiting: Vec<Holder> = (0..4).map(|_| s.hold("light", &[], &[])).collect();
        std::thread::sleep(Duration::from_millis(100));
        release(h1);
        s.starts(&head, &format!("round {round}: the head did not start"));
        for w in &waiting {
            assert!(
                !w.held_within(Duration::ZERO),
                "round {round}: with none free"
            );
        }
    }
}

/// Without a hold time on record, or with backfilling off, a light test waits behind the
/// head, first come first served.
#[test]
fn without_a_hold_time_on_record_or_with_backfilling_off_the_head_goes_first() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("light", 1_000_000)]);
    let (h1, h2) = s.holder_and_head("5", &["--units", "5"]);
    let unknown = s.hold("new_test", &[], &[]);
    let off = s.hold("light", &[], &[("GPU_TEST_PERMIT_BACKFILL", "off")]);
    assert!(
        !unknown.held_within(SETTLE),
        "a test not on record backfilled"
    );
    assert!(
        !off.held_within(Duration::ZERO),
        "GPU_TEST_PERMIT_BACKFILL=off backfilled"
    );
    release(h1);
    assert!(h2.held_within(LONG));
    assert!(unknown.held_within(LONG));
    assert!(off.held_within(LONG));
    release(h2);
    release(unknown);
    release(off);
}

/// A light test that would outlast the head's start takes units only where the head will
/// not need them then: beside a head of 5 units of 8, yes; beside an exclusive head, no.
#[test]
fn a_long_request_backfills_only_units_the_head_will_not_need() {
    for (head_args, backfills) in [(&["--units", "5"][..], true), (&["--exclusive"][..], false)] {
        let s = Suite::new(8);
        s.record(&[("heavy", 10_000_000), ("long_light", 100_000_000)]);
        let (h1, head) = s.holder_and_head("5", head_args);
        let l = s.hold("long_light", &[], &[]);
        let took = l.held_within(if backfills { LONG } else { SETTLE });
        assert_eq!(took, backfills, "beside a head of {head_args:?}");
        release(h1);
        assert!(
            head.held_within(LONG),
            "the head did not start when the holder let go"
        );
        if !backfills {
            assert!(!l.held_within(SETTLE), "it went before the exclusive head");
            release(head);
            assert!(l.held_within(LONG));
            release(l);
        } else {
            release(head);
            release(l);
        }
    }
}

/// On two GPUs of 4 units, holders of 3 on each and a head behind them: a light test done
/// before the head could start takes a unit past it; a long one takes one only where the head
/// keeps enough on either GPU for it (2 on both, yes; every unit, no).
#[test]
fn on_two_gpus_a_head_for_units_on_both_is_backfilled_as_on_one() {
    for (head_args, long_backfills) in [
        (&["--gpus", "2", "--units", "2"][..], true),
        (&["--exclusive"][..], false),
    ] {
        let s = Suite::on_gpus(4, 2);
        s.record(&[
            ("heavy", 10_000_000),
            ("light", 1_000_000),
            ("long_light", 100_000_000),
        ]);
        let a = s.hold("heavy", &["--units", "3"], &[]);
        assert!(a.held_within(LONG));
        let (b, head) = s.holder_and_head("3", head_args);
        let light = s.hold("light", &[], &[]);
        assert!(
            light.held_within(LONG),
            "done before the head could start: {head_args:?}"
        );
        let long = s.hold("long_light", &[], &[]);
        let took = long.held_within(if long_backfills { LONG } else { SETTLE });
        assert_eq!(took, long_backfills, "beside a head of {head_args:?}");
        release(a);
        release(b);
        if long_backfills {
            assert!(
                head.held_within(LONG),
                "3 units left on each GPU: the head's 2 on both"
            );
            release(light);
            release(long);
            release(head);
        } else {
            assert!(
                !head.held_within(SETTLE),
                "the cap: the light test still holds its unit"
            );
            release(light);
            assert!(head.held_within(LONG));
            assert!(!long.held_within(SETTLE));
            release(head);
            assert!(long.held_within(LONG));
            release(long);
        }
    }
}

/// A slot whose record is blank but whose lock is held (a holder between its grant and its
/// record, stopped there; here a lock this test takes itself) counts as held for a time
/// unknown: of the 3 units free beside a holder of 4 and a head for 5, a long request may take
/// only 2, not the 3 the records alone would allow, or the head would wait for it.
#[test]
fn a_locked_slot_without_a_record_counts_as_held() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("long_light", 100_000_000)]);
    let (h1, head) = s.holder_and_head("4", &["--units", "5"]);
    let unrecorded = std::fs::File::open(s.slots().join("gpu0.slot7")).unwrap();
    unrecorded.lock().unwrap();
    let a = s.hold("long_light", &[], &[]);
    let b = s.hold("long_light", &[], &[]);
    assert!(a.held_within(LONG));
    assert!(b.held_within(LONG));
    let c = s.hold("long_light", &[], &[]);
    assert!(
        !c.held_within(SETTLE),
        "it took a unit the head needs while slot 7 is held"
    );
    // The head starts when h1 lets go, though slot 7 stays locked: 4 + 3 - 2 = 5.
    release(h1);
    assert!(head.held_within(LONG));
    drop(unrecorded);
    release(head);
    assert!(c.held_within(LONG));
    release(a);
    release(b);
    release(c);
}

/// A holder's record outlives a holder that was killed; one whose process is gone counts as
/// blank, and the slot's lock decides: here a record of a gone process, expected to hold on
/// for long, in a free slot leaves 3 units the head will not need, not 2.
#[test]
fn a_record_whose_process_is_gone_does_not_hold_its_slot() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("long_light", 100_000_000)]);
    let (h1, head) = s.holder_and_head("4", &["--units", "5"]);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let gone = format!(
        "{{\"pid\":4000000,\"test\":\"long_light\",\"binary\":\"suite\",\"thread\":\"t\",\"since_unix_ms\":{now_ms},\"exclusive\":false,\"concurrency\":8,\"units\":1}}\n"
    );
    std::fs::write(s.slots().join("gpu0.slot7"), gone).unwrap();
    let longs: Vec<Holder> = (0..3).map(|_| s.hold("long_light", &[], &[])).collect();
    for l in &longs {
        assert!(
            l.held_within(LONG),
            "slot 7 is free: 3 units are spare beside the head"
        );
    }
    release(h1);
    assert!(head.held_within(LONG), "4 + 4 - 3 = 5");
    release(head);
    for l in longs {
        release(l);
    }
}

/// `gpu0.backfill` held by another process for good (a backfiller stopped while it decides,
/// or another user's process) stops backfilling, and nothing else: the light request waits its
/// turn behind the head, and both are served.
#[test]
fn a_backfill_lock_held_elsewhere_stops_backfilling_only() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("light", 1_000_000)]);
    let (h1, h2) = s.holder_and_head("5", &["--units", "5"]);
    let stuck = std::fs::File::create(s.slots().join("gpu0.backfill")).unwrap();
    stuck.lock().unwrap();
    let l = s.hold("light", &[], &[]);
    assert!(
        !l.held_within(SETTLE),
        "it backfilled past a backfill lock held elsewhere"
    );
    release(h1);
    assert!(h2.held_within(LONG));
    assert!(l.held_within(LONG), "first come, first served goes on");
    release(h2);
    release(l);
}

/// A backfilled holder stopped past its hold time on record delays the head until it goes,
/// as any holder would (the cap), but lets nobody else in: once the holder the head waits for
/// has let go, an overdue holder counts as holding on, so nothing is done before the head
/// could start.
#[test]
fn a_stopped_backfilled_holder_lets_no_other_request_past_the_head() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("light", 200_000)]);
    let (h1, head) = s.holder_and_head("5", &["--exclusive"]);
    let l1 = s.hold("light", &[], &[]);
    assert!(l1.held_within(LONG));
    // Past its 200 ms, and stopped.
    std::thread::sleep(SETTLE);
    signal(l1.child.id(), libc::SIGSTOP);
    release(h1);
    // Everything but l1's unit is free, and the head needs them all.
    let l2 = s.hold("light", &[], &[]);
    assert!(
        !l2.held_within(SETTLE),
        "a request went past the head beside an overdue holder"
    );
    assert!(
        !head.held_within(Duration::ZERO),
        "the cap: l1 still holds its unit"
    );
    signal(l1.child.id(), libc::SIGCONT);
    release(l1);
    assert!(head.held_within(LONG));
    assert!(!l2.held_within(SETTLE));
    release(head);
    assert!(l2.held_within(LONG));
    release(l2);
}

/// Beside a head of 5 units of 8 and a holder of 4 expected to hold on for long, a holder of 2
/// past its hold time on record counts as never letting go: of the 2 free units, a request
/// that would outlast the head's start may take only the 1 the head will not need even then.
#[test]
fn an_overdue_holder_counts_as_holding_on_for_the_units_the_head_will_not_need() {
    let s = Suite::new(8);
    s.record(&[
        ("heavy", 10_000_000),
        ("light", 200_000),
        ("long_light", 100_000_000),
    ]);
    let (h1, head) = s.holder_and_head("4", &["--units", "5"]);
    let l1 = s.hold("light", &["--units", "2"], &[]);
    assert!(l1.held_within(LONG), "done before the head could start");
    // Past its 200 ms.
    std::thread::sleep(SETTLE);
    let two = s.hold("long_light", &["--units", "2"], &[]);
    assert!(
        !two.held_within(SETTLE),
        "it took a unit the head needs if l1 holds on"
    );
    let one = s.hold("long_light", &[], &[]);
    assert!(
        one.held_within(LONG),
        "one unit is spare even if l1 holds on"
    );
    // The head starts the moment h1 lets go, l1 still holding on: 8 - 2 - 1 = 5.
    release(h1);
    assert!(head.held_within(LONG));
    release(l1);
    release(head);
    assert!(two.held_within(LONG));
    release(two);
    release(one);
}

/// Hold times of 0 let light tests in while the heavy holder is expected to hold on; once it
/// has let go they count as holding on for an unknown time, so the head waits only for those
/// already in (their overruns), and no later one goes first.
#[test]
fn a_history_of_zero_hold_times_delays_the_head_by_the_overruns_it_let_in_only() {
    let s = Suite::new(8);
    s.record(&[("heavy", 10_000_000), ("light", 0)]);
    let (h1, head) = s.holder_and_head("5", &["--exclusive"]);
    let l1 = s.hold("light", &[], &[]);
    let l2 = s.hold("light", &[], &[]);
    assert!(l1.held_within(LONG));
    assert!(l2.held_within(LONG));
    release(h1);
    let l3 = s.hold("light", &[], &[]);
    assert!(
        !l3.held_within(SETTLE),
        "a later request went past the head"
    );
    release(l1);
    release(l2);
    assert!(
        head.held_within(LONG),
        "the head waited past the overruns it let in"
    );
    assert!(!l3.held_within(SETTLE));
    release(head);
    assert!(l3.held_within(LONG));
    release(l3);
}

/// A history that cannot be read as one — a FIFO at its name (which a plain open would block
/// on), garbage, or a file another process keeps locked — gives no hold times: nothing
/// backfills and nothing stalls.
#[test]
fn a_fifo_garbage_or_a_locked_history_backfills_nothing_and_stalls_nothing() {
    for forged in ["fifo", "garbage", "locked"] {
        let s = Suite::new(8);
        let mut _lock = None;
        match forged {
            "fifo" => {
                let path =
                    std::ffi::CString::new(s.history().as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: mkfifo(3) with a valid C string.
                assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
            }
            "garbage" => {
                std::fs::write(s.history(), b"\xff\xfe{\"test\":\n\0\0not json\n").unwrap()
            }
            _ => {
                // Locked (by this process, for the whole test): backfilling does not wait
                // for the lock, and reads the file as it is.
                s.record(&[("heavy", 10_000_000), ("light", 1_000_000)]);
                let file = std::fs::File::open(s.history()).unwrap();
                file.lock().unwrap();
                _lock = Some(file);
            }
        }
        let (h1, h2) = s.holder_and_head("5", &["--units", "5"]);
        let l = s.hold("light", &[], &[]);
        let backfilled = l.held_within(SETTLE);
        // A locked file is read without its lock: its hold times count.
        assert_eq!(backfilled, forged == "locked", "{forged}");
        release(h1);
        assert!(h2.held_within(LONG), "{forged}");
        if !backfilled {
            assert!(l.held_within(LONG), "{forged}");
        }
        release(h2);
        release(l);
    }
}

/// `gpu-test-permit config` says whether backfilling is on, and a value that is neither `on`
/// nor `off` is a warning that keeps it on.
#[test]
fn config_says_whether_backfilling_is_on() {
    let dir = tempdir();
    let config = |value: &str| {
        let out = cli(dir.path(), 2)
            .env("GPU_TEST_PERMIT_BACKFILL", value)
            .arg("config")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let off = config("off");
    assert!(
        off.contains("GPU_TEST_PERMIT_BACKFILL         off"),
        "{off}"
    );
    let bad = config("sometimes");
    assert!(bad.contains("GPU_TEST_PERMIT_BACKFILL         on"), "{bad}");
    assert!(
        bad.contains("GPU_TEST_PERMIT_BACKFILL='sometimes' is not on or off; using on"),
        "{bad}"
    );
}

/// The environment that runs a process under libfaketime with its wall clock `offset` away
/// (`+1h`, `-1h`), its monotonic and boot clocks untouched; checked to work, with `date`.
/// `None` where libfaketime is not installed.
pub(crate) fn wall_clock_off(offset: &str) -> Option<Vec<(String, String)>> {
    let lib = crate::cap_breaks::libfaketime()?;
    let env = vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("FAKETIME".to_string(), offset.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
    ];
    let out = std::process::Command::new("date")
        .arg("+%s")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let read: i64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let ahead = !offset.starts_with('-');
    let off = if ahead { read - now } else { now - read };
    assert!(
        off >= 3500,
        "{} did not put date {offset} off: {read}, now {now}",
        lib.display()
    );
    Some(env)
}

/// `env` as [`Suite::hold`] takes it.
pub(crate) fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The holds the trace records, each as (test, backfilled), in the order they ended.
fn holds_of(tests: &[(&str, bool)]) -> Vec<(String, bool)> {
    tests.iter().map(|&(t, b)| (t.to_string(), b)).collect()
}

/// Grant times were wall-clock times, compared with the backfiller's wall clock: with the
/// holder's wall clock an hour ahead, or the backfiller's an hour behind (what a host's clock
/// stepped back after the grant looks like), a holder of 2 s on record seemed to hold on for
/// an hour and 2 s, and a request of 12 s was let in "before" a head that could start in 2 s.
/// Read on the boot clock, which libfaketime leaves alone, the holder ends in 2 s: the request
/// would still hold its unit then, so it waits behind the head.
#[test]
fn a_wall_clock_an_hour_off_lets_no_long_request_past_the_head() {
    for (skewed, offset) in [("holder", "+1h"), ("backfiller", "-1h")] {
        let Some(off) = wall_clock_off(offset) else {
            eprintln!("not run: needs libfaketime (apt-get install faketime)");
            return;
        };
        let env_of = |who: &str| if who == skewed { pairs(&off) } else { vec![] };
        let s = Suite::new(2);
        s.record(&[
            ("short", 2_000_000),
            ("heavy", 2_000_000),
            ("long_light", 12_000_000),
        ]);
        let holder = s.hold("short", &[], &env_of("holder"));
        s.starts(&holder, "the holder");
        let head = s.hold("heavy", &["--units", "2"], &[]);
        s.wait_for_head(&head);
        let long = s.hold("long_light", &[], &env_of("backfiller"));
        assert!(
            !long.held_within(Duration::from_secs(2)),
            "the {skewed}'s wall clock {offset}: a request of 12 s was let in past a head that \
             could start when a holder of 2 s lets go"
        );
        release(holder);
        s.starts(
            &head,
            &format!("the {skewed}'s wall clock {offset}: the head"),
        );
        assert!(!long.held_within(Duration::ZERO), "the cap");
        release(head);
        s.starts(&long, "the long request after the head");
        release(long);
        assert_eq!(
            s.holds(),
            holds_of(&[("short", false), ("heavy", false), ("long_light", false)]),
            "the {skewed}'s wall clock {offset}"
        );
    }
}

/// The same holder an hour ahead, with the head waiting under `GPU_TEST_PERMIT_TIMEOUT=8s`:
/// the request let in past it held its unit past the head's deadline, and the head gave up
/// while a later request held the unit it waited for. It is served once the holder lets go.
#[test]
fn a_head_with_a_timeout_is_served_beside_a_holder_an_hour_ahead() {
    let Some(ahead) = wall_clock_off("+1h") else {
        eprintln!("not run: needs libfaketime (apt-get install faketime)");
        return;
    };
    let s = Suite::new(2);
    s.record(&[
        ("short", 2_000_000),
        ("heavy", 2_000_000),
        ("long_light", 12_000_000),
    ]);
    let holder = s.hold("short", &[], &pairs(&ahead));
    s.starts(&holder, "the holder");
    let head = s.hold(
        "heavy",
        &["--units", "2"],
        &[("GPU_TEST_PERMIT_TIMEOUT", "8s")],
    );
    s.wait_for_head(&head);
    let long = s.hold("long_light", &[], &[]);
    // Its chance to be let in past the head, within the holder's 2 s.
    std::thread::sleep(Duration::from_millis(1500));
    release(holder);
    if !head.held_within(LONG) {
        let holds = s.holds();
        let (status, err) = head.release();
        panic!("the head was not served ({status}): {err}; holds so far: {holds:?}");
    }
    assert!(!long.held_within(Duration::ZERO), "the cap");
    release(head);
    s.starts(&long, "the long request after the head");
    release(long);
    assert_eq!(
        s.holds(),
        holds_of(&[("short", false), ("heavy", false), ("long_light", false)])
    );
}

/// A holder's grant time that cannot be placed on the boot clock — a record of an earlier
/// version (no `since_boot_ms`), a time later than now, a time of another boot — is not known:
/// the holder lets go now for the shadow time and never for the extra units, so nothing is
/// let in past the head on its strength; the record as the holder wrote it lets a request of
/// 1 s in before a head that waits for a holder of 30 s.
#[cfg(target_os = "linux")]
#[test]
fn a_grant_time_that_cannot_be_placed_on_the_boot_clock_lets_nothing_past_the_head() {
    for forged in [
        "as written",
        "earlier version",
        "later than now",
        "another boot",
    ] {
        let s = Suite::new(2);
        s.record(&[
            ("short", 30_000_000),
            ("heavy", 2_000_000),
            ("light", 1_000_000),
        ]);
        let holder = s.hold("short", &[], &[]);
        s.starts(&holder, "the holder");
        let pid = holder.child.id();
        let slot = status(&s.slots())
            .unwrap()
            .slots
            .iter()
            .find(|slot| slot.holder.as_ref().is_some_and(|r| r.pid == pid))
            .map(|slot| s.slots().join(format!("gpu0.slot{}", slot.index)))
            .expect("the holder's record");
        let text = std::fs::read_to_string(&slot).unwrap();
        let mut record: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        let fields = record.as_object_mut().unwrap();
        match forged {
            "as written" => {}
            "earlier version" => {
                fields.remove("since_boot_ms");
                fields.remove("boot_id");
            }
            "later than now" => {
                let at = fields["since_boot_ms"].as_u64().expect("a boot-clock time");
                fields.insert("since_boot_ms".into(), (at + 3_600_000).into());
            }
            _ => {
                fields.insert(
                    "boot_id".into(),
                    "00000000-0000-4000-8000-000000000000".into(),
                );
            }
        }
        let mut forged_text = serde_json::to_string(&record).unwrap();
        forged_text.push('\n');
        std::fs::write(&slot, format!("{forged_text:<1024}")).unwrap();
        let head = s.hold("heavy", &["--units", "2"], &[]);
        s.wait_for_head(&head);
        let light = s.hold("light", &[], &[]);
        let backfills = forged == "as written";
        let backfilled = light.held_within(if backfills { LONG } else { SETTLE });
        assert_eq!(
            backfilled, backfills,
            "{forged}: {record} (let in past the head: {backfilled})"
        );
        release(holder);
        if backfilled {
            release(light);
            s.starts(&head, forged);
            release(head);
        } else {
            s.starts(&head, forged);
            assert!(!light.held_within(Duration::ZERO), "{forged}: the cap");
            release(head);
            s.starts(&light, forged);
            release(light);
        }
        let mut holds = s.holds();
        holds.sort();
        let mut want = holds_of(&[("short", false), ("heavy", false), ("light", backfills)]);
        want.sort();
        assert_eq!(holds, want, "{forged}");
    }
}

#[path = "../../../benches/support/nextest.rs"]
mod suite_run;

/// A mixed suite (`fixtures/mixed`: 16 light tests of one unit, 4 heavy ones of five, 250 ms
/// each, at N = 8, all started at once) run twice under `cargo nextest` with one slot
/// directory and nothing in between: the first run has no hold time on record and backfills
/// nothing; the second run's first process learns the first run's hold times before any
/// permit, so light tests take units beside a heavy one waiting at the head. No command runs
/// between the two (no `history`, no `nextest-snippet`). Where the scheduler started the
/// second run's processes too far apart for any head to wait, it runs again, at most twice.
#[test]
fn the_second_run_of_a_mixed_suite_backfills_with_no_command_between() {
    if !crate::recipes::have_nextest() {
        return;
    }
    let work = tempdir();
    let config = work.path().join("nextest.toml");
    std::fs::write(&config, "").unwrap();
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mixed-suite");
    let trace = work.path().join("trace.json");
    let run = || {
        let mut c = suite_run::nextest_run("gpu-test-permit-mixed", &target, 20, &config);
        c.env("GPU_TEST_PERMIT_DIR", work.path().join("slots"))
            .env("GPU_TEST_PERMIT_STATE", work.path().join("state"))
            .env("GPU_TEST_PERMIT_GPU_MEMORY", "1GiB")
            .env("GPU_TEST_PERMIT_TRACE", &trace)
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "8")
            .env("MIXED_BENCH", "1");
        let _ = std::fs::remove_file(&trace);
        suite_run::timed_run(c);
        let events = gpu_test_permit::trace::read_events(&trace).unwrap();
        let holds = events.iter().filter(|e| e.name == "hold").count();
        assert_eq!(holds, 20, "every test's hold is traced");
        // A hold granted past a waiting head is marked so.
        events
            .iter()
            .filter(|e| e.name == "hold" && e.args.backfilled)
            .count()
    };
    assert_eq!(run(), 0, "nothing on record: the first run cannot backfill");
    let state = work.path().join("state");
    assert!(
        !state.join("gpu0.tests").exists(),
        "the first run learned from no earlier run"
    );
    // Whether a light test comes while a heavy one waits at the head is up to the scheduler:
    // on a loaded machine the processes may start so far apart that no head waits. A run that
    // had no such moment is run again (each again with no command before it); a run that
    // learned nothing never backfills, however often it runs.
    let mut backfilled = Vec::new();
    for _ in 0..3 {
        backfilled.push(run());
        assert!(
            state.join("gpu0.tests").exists(),
            "the second run learned the first run's hold times"
        );
        if backfilled.last() > Some(&0) {
            break;
        }
    }
    assert!(
        backfilled.iter().any(|&n| n > 0),
        "no run after the first backfilled a permit: {backfilled:?}"
    );
}

/// The first process of a nextest run learns the runs before it, but never waits for another
/// that is learning: with `gpu0.learned`'s lock held (a learner stopped mid-way), a test
/// process of the next run takes its permit and ends without learning; once the lock is free,
/// the next process of that run learns.
#[cfg(unix)]
#[test]
fn a_stopped_learner_keeps_no_test_waiting_and_the_next_process_learns() {
    use std::os::fd::AsRawFd;
    let work = tempdir();
    let slots = work.path().join("slots");
    let state = work.path().join("state");
    let test = |run: &str, name: &str| {
        let out = cli(&slots, 2)
            .env("GPU_TEST_PERMIT_STATE", &state)
            .env("NEXTEST_RUN_ID", run)
            .env("NEXTEST_BINARY_ID", "suite::gpu")
            .env("NEXTEST_TEST_NAME", name)
            .args(["hold", "--for", "20ms"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{run} {name}: {out:?}");
    };
    for name in ["gpu_a", "gpu_b", "gpu_c"] {
        test("run-1", name);
    }
    assert!(
        !state.join("gpu0.tests").exists(),
        "run-1 had no run before it"
    );

    // A learner of run-2 that stopped while it held the lock.
    let learned = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(state.join("gpu0.learned"))
        .unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::flock(learned.as_raw_fd(), libc::LOCK_EX) },
        0
    );
    test("run-2", "gpu_a");
    assert!(
        !state.join("gpu0.tests").exists(),
        "a process learned while another held the lock"
    );

    drop(learned);
    test("run-2", "gpu_b");
    let times = std::fs::read_to_string(state.join("gpu0.tests")).unwrap();
    for name in ["gpu_a", "gpu_b", "gpu_c"] {
        assert!(times.contains(&format!("\"name\":\"{name}\"")), "{times}");
    }
}
