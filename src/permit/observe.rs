//! What watches permits come and go without keeping the cap: the nextest hint, the tally of
//! GPU tests, the run records, the hold-deadline watchdog, the trace and the driver watch; and
//! where the permit path learns what is running (the test, its thread, the run).
//!
//! The acquisition and release paths (`pool`, `inner`) call the observers at five points of a
//! permit's life, with plain values (the test, the thread, units, slot numbers, times, the
//! slot directory's path):
//!
//! | point | when |
//! |---|---|
//! | [`Observers::asking`] | a request that needs a new permit, before it waits for anything |
//! | [`Observers::naming`] | it holds its units in the process, before it asks the host slots |
//! | [`Observers::granted`] | it holds its slots and its seat |
//! | [`Observers::releasing`] | the permit's last guard dropped, before its slots are free |
//! | [`Observers::released`] | its slots are free, before its units go back to the process |
//!
//! Nothing here can take or free a slot: this file is handed no pool, seat, semaphore or slot
//! directory, and names none of them (the layering test checks it). What an observer keeps of
//! a permit while it is held ([`Held`]) is kept in its seat for it, opaque to the seat.
//!
//! Nor can an observer's panic reach the cap's path: each point runs its observers inside
//! [`contained`], which catches a panic, says once per process which point it hit, and goes
//! on with what the point returns when it has nothing (no names, nothing kept). The permit
//! itself is built before [`Observers::granted`] runs, so that even a panic that escaped
//! (a build with `panic = "abort"` ends the process, whose locks the kernel drops) would
//! return its units as the guard unwinds.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::watchdog::{Watched, unwatch, watch};
use crate::host::Layout;
use crate::trace::{TraceArgs, TraceEvent, Tracer};

/// The observers of one pool, set when it is built.
pub(super) struct Observers {
    tracer: Option<Tracer>,
    /// Whether grants and releases go to the run records: under nextest, and in a pool whose
    /// N `auto` chose (outside nextest its process is a run of its own); never inside a permit
    /// passed on by `run`, whose runner records it.
    records: bool,
    /// Whether the process gives nextest's test-group hint (not inside a passed-on permit).
    hint: bool,
    /// Whether a permit needs names and wall-clock times: for the host's holder records, or
    /// the trace.
    names: bool,
    /// See [`PoolBuilder::hold_timeout`](super::builder::PoolBuilder::hold_timeout).
    hold_timeout: Option<Duration>,
    /// Units of the pool (N times the GPUs) and its GPUs, as the trace shows them.
    capacity: usize,
    layout: Layout,
    /// The N and the slot directory that hang records name (inside a permit passed on by
    /// `run`, those of the permit and the outermost directory).
    named: (Layout, Option<PathBuf>),
}

/// What the pool tells its observers when it is built.
pub(super) struct Pool<'a> {
    /// Where to append the trace (`None`: no trace).
    pub(super) trace: Option<&'a Path>,
    /// Whether the pool's grants are recorded under any run (`auto`, learned weights); under
    /// nextest they always are.
    pub(super) records: bool,
    /// Whether the pool works inside a permit passed on by `run`.
    pub(super) inherited: bool,
    /// Whether the pool has host slots, whose holder records carry names.
    pub(super) host: bool,
    pub(super) hold_timeout: Option<Duration>,
    pub(super) capacity: usize,
    pub(super) layout: Layout,
    /// The N and the slot directory that records name.
    pub(super) named: (Layout, Option<PathBuf>),
}

/// A request's [`Observers::asking`]: when it asked, where the trace needs it.
#[derive(Clone, Copy)]
pub(super) struct Asking {
    wall: Option<SystemTime>,
}

/// The names of a permit's holder, for the host's holder record and the observers.
#[derive(Debug)]
pub(super) struct Names {
    /// The running test's name ([`crate::nextest::current_test_name`]).
    pub(super) test: String,
    /// The thread that asks.
    pub(super) thread: String,
    /// When its units were held in the process.
    pub(super) since_wall: SystemTime,
}

impl Names {
    /// The running test's binary, as the records name it.
    pub(super) fn binary(&self) -> String {
        crate::nextest::current_test_binary()
    }
}

/// What a permit holds, as the observers show it.
#[derive(Clone, Copy)]
pub(super) struct Shown {
    pub(super) units: usize,
    pub(super) exclusive: bool,
    /// The memory it declared.
    pub(super) memory: Option<u64>,
    /// The per-GPU memory budget, where it is resolved.
    pub(super) budget: Option<u64>,
}

/// A grant, as the observers hear of it ([`Observers::granted`]).
pub(super) struct Grant<'a> {
    pub(super) shown: Shown,
    /// The slot directory the slots were taken in (`None`: an in-process pool).
    pub(super) slot_dir: Option<&'a Path>,
    /// The host slots held, in increasing order.
    pub(super) slots: &'a [usize],
    /// When the host slots granted them (`None`: no host slots).
    pub(super) at: Option<SystemTime>,
    /// How long it waited, in the process and at the host slots.
    pub(super) waited: Duration,
    /// A retry that runs alone.
    pub(super) alone: bool,
    /// The measured peak its units were learned from.
    pub(super) learned: Option<u64>,
    /// Granted past a waiting head.
    pub(super) backfilled: bool,
}

/// What the observers keep of a permit while it is held: its names and times, the number the
/// run records know it by, its watch.
#[derive(Debug)]
pub(super) struct Held {
    names: Option<Names>,
    /// The number the run records know the permit by (0: not recorded).
    run_hold: u64,
    /// The measured peak memory its units were learned from, bytes (a learned weight).
    learned: Option<u64>,
    /// Granted past a waiting head, by backfilling.
    backfilled: bool,
    /// The hold-deadline watch of the permit, or 0 (see `watchdog`).
    watch: u64,
}

/// A release, stamped before the slots go ([`Observers::releasing`]).
pub(super) struct Releasing {
    held: Option<Held>,
    /// When the permit was let go, where the trace or the run records need it.
    at: Option<SystemTime>,
}

/// A release, as the observers hear of it ([`Observers::released`]).
pub(super) struct Release<'a> {
    pub(super) shown: Shown,
    /// The slot directory (`None`: an in-process pool).
    pub(super) slot_dir: Option<&'a Path>,
    /// Whether the slots went back to the host (a child forked without `exec` returns none of
    /// its parent's, and records none of it).
    pub(super) returned: bool,
    pub(super) slots: Vec<usize>,
    /// The most memory recorded as used while it was held.
    pub(super) used: Option<u64>,
}

impl Observers {
    /// The observers of a pool: opens its trace (saying so where it cannot).
    pub(super) fn new(pool: Pool<'_>) -> Observers {
        let tracer = match pool.trace {
            None => None,
            Some(p) => match Tracer::open(p) {
                Ok(t) => Some(t),
                Err(e) => {
                    crate::notice::line(&format!(
                        "cannot open trace file {} ({e}); tracing is off",
                        p.display()
                    ));
                    None
                }
            },
        };
        Observers {
            records: !pool.inherited && (pool.records || crate::runs::nextest_run().is_some()),
            hint: !pool.inherited,
            names: pool.host || tracer.is_some(),
            tracer,
            hold_timeout: pool.hold_timeout,
            capacity: pool.capacity,
            layout: pool.layout,
            named: pool.named,
        }
    }

    /// Whether the observers keep anything of a permit while it is held (a seat's [`Held`]).
    #[inline]
    pub(super) fn keep(&self) -> bool {
        self.names || self.hold_timeout.is_some()
    }

    /// Says in the trace the N that `auto` chose, `line` as it was announced.
    pub(super) fn chose(&self, line: &str, per_gpu: usize, gpus: usize) {
        if let Some(tracer) = &self.tracer {
            tracer.write(&TraceEvent::auto(line, per_gpu, gpus));
        }
    }

    /// A request asks for a new permit: nextest's test-group hint where one is due, and the
    /// time, where the trace shows the wait.
    #[inline]
    pub(super) fn asking(&self) -> Asking {
        contained("asked for", || Asking { wall: None }, || self.asking_now())
    }

    #[inline(always)]
    fn asking_now(&self) -> Asking {
        #[cfg(test)]
        panic_here("asked for");
        if self.hint {
            crate::nextest::hint_once(self.capacity);
        }
        // Only pay for wall clocks where something records them: the uncontended in-process
        // path reads no clock but the coarse one.
        Asking {
            wall: if self.tracer.is_some() {
                Some(SystemTime::now())
            } else {
                None
            },
        }
    }

    /// The request holds its units in the process: the names its holder record and the
    /// observers carry, where any needs them, and the test counted as a GPU test.
    #[inline]
    pub(super) fn naming(&self) -> Option<Names> {
        if !self.names {
            return None;
        }
        // Where the names cannot be had, the holder record still needs some: the slots are
        // taken with these.
        let unnamed = || {
            Some(Names {
                test: String::from("(unnamed)"),
                thread: String::new(),
                since_wall: SystemTime::now(),
            })
        };
        contained("named", unnamed, || Some(self.names_now()))
    }

    #[inline(always)]
    fn names_now(&self) -> Names {
        #[cfg(test)]
        panic_here("named");
        let names = Names {
            test: crate::nextest::current_test_name(),
            thread: thread_label(),
            since_wall: SystemTime::now(),
        };
        crate::runs::tally::gpu_test(&names.test);
        names
    }

    /// The permit is granted: the run records, the watchdog, the trace's wait and the driver
    /// watch hear of it. Returns what is kept while it is held (`None`: nothing).
    pub(super) fn granted(
        &self,
        asking: Asking,
        names: Option<Names>,
        g: Grant<'_>,
    ) -> Option<Held> {
        contained("granted", || None, || self.granted_now(asking, names, g))
    }

    fn granted_now(&self, asking: Asking, names: Option<Names>, g: Grant<'_>) -> Option<Held> {
        #[cfg(test)]
        panic_here("granted");
        let mut held = Held {
            names,
            run_hold: 0,
            learned: g.learned,
            backfilled: g.backfilled,
            watch: 0,
        };
        if let (Some(names), Some(at)) = (&mut held.names, g.at) {
            names.since_wall = at;
        }
        if let Some(dir) = g.slot_dir
            && self.records
        {
            held.run_hold = crate::runs::granted(
                dir,
                crate::runs::Granted {
                    units: g.shown.units,
                    exclusive: g.shown.exclusive,
                    per_gpu: self.layout.per_gpu,
                    gpus: self.layout.gpus,
                    alone: g.alone,
                    waited: g.waited,
                    learned: g.learned,
                },
            );
        }
        if let Some(deadline) = self.hold_timeout {
            let (test, thread) = match &held.names {
                Some(n) => (n.test.clone(), n.thread.clone()),
                None => (crate::nextest::current_test_name(), thread_label()),
            };
            held.watch = watch(Watched {
                test,
                thread,
                exclusive: g.shown.exclusive,
                units: g.shown.units,
                deadline,
                layout: self.named.0,
                slot_dir: self.named.1.clone(),
            });
        }
        if let (Some(t), Some(asked), Some(names)) = (&self.tracer, asking.wall, &held.names) {
            let ts = crate::clock::unix_micros(asked);
            let dur = crate::clock::unix_micros(names.since_wall).saturating_sub(ts);
            let event = self.event("wait", ts, dur, &held, g.slots.to_vec(), g.shown);
            t.write(&event);
        }
        // Which GPU drivers the process loaded without a permit (looked at once, at its first).
        #[cfg(not(loom))]
        crate::drivers::permit_taken(held.names.as_ref().map(|n| n.test.as_str()));
        self.keep().then_some(held)
    }

    /// The permit's last guard dropped and its seat is free; its slots are not yet. The driver
    /// watch and the watchdog let it go, and the time it was let go is read here: the run
    /// record of its release is stamped before its slots are free, so that no record shows
    /// this permit beside the next holder of its slots (who may take them the moment they go).
    pub(super) fn releasing(&self, held: Option<Held>) -> Releasing {
        contained(
            "let go",
            || Releasing {
                held: None,
                at: None,
            },
            || self.releasing_now(held),
        )
    }

    fn releasing_now(&self, held: Option<Held>) -> Releasing {
        #[cfg(test)]
        panic_here("let go");
        #[cfg(not(loom))]
        crate::drivers::permit_returned(
            held.as_ref()
                .and_then(|h| h.names.as_ref())
                .map(|n| n.test.as_str()),
        );
        if let Some(h) = &held
            && h.watch != 0
        {
            unwatch(h.watch);
        }
        let stamped = self.tracer.is_some() || matches!(&held, Some(h) if h.run_hold != 0);
        Releasing {
            held,
            at: if stamped {
                Some(SystemTime::now())
            } else {
                None
            },
        }
    }

    /// The permit's slots are free: its release goes to the run records (where its slots went
    /// back to the host) and its hold to the trace.
    pub(super) fn released(&self, r: Releasing, rel: Release<'_>) {
        let (Some(held), Some(at)) = (&r.held, r.at) else {
            return;
        };
        contained("returned", || (), || self.released_now(held, at, rel))
    }

    fn released_now(&self, held: &Held, at: SystemTime, rel: Release<'_>) {
        #[cfg(test)]
        panic_here("returned");
        if let Some(dir) = rel.slot_dir
            && rel.returned
            && held.run_hold != 0
        {
            crate::runs::released(dir, held.run_hold, at, rel.used);
        }
        if let (Some(t), Some(names)) = (&self.tracer, &held.names) {
            let ts = crate::clock::unix_micros(names.since_wall);
            let dur = crate::clock::unix_micros(at).saturating_sub(ts);
            let mut event = self.event("hold", ts, dur, held, rel.slots, rel.shown);
            event.args.memory_used = rel.used;
            event.args.failed = crate::runs::outcome_now().failed();
            t.write(&event);
        }
    }

    fn event(
        &self,
        name: &str,
        ts: u64,
        dur: u64,
        held: &Held,
        slots: Vec<usize>,
        shown: Shown,
    ) -> TraceEvent {
        let (test, thread) = match &held.names {
            Some(n) => (n.test.clone(), n.thread.clone()),
            None => (String::new(), String::new()),
        };
        TraceEvent {
            name: name.into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts,
            dur,
            pid: std::process::id(),
            tid: crate::sys::thread_number(),
            args: TraceArgs {
                test,
                thread,
                slots,
                exclusive: shown.exclusive,
                capacity: self.capacity,
                units: shown.units,
                gpus: self.layout.gpus,
                memory: shown.memory,
                memory_used: None,
                memory_budget: shown.budget,
                attempt: crate::runs::traced_attempt(),
                failed: false,
                learned: held.learned,
                backfilled: held.backfilled && name == "hold",
            },
        }
    }
}

/// Runs the observers of point `point` (`work`), containing a panic in them: it is said once
/// per process ([`said_panic`]) and `fallback` stands for what they would have returned. A
/// panic in an observer (a record that cannot be written, a driver file that cannot be read)
/// must never unwind through the path that takes and frees units: between a unit taken and
/// its guard, it would leak the unit for the rest of the process.
#[inline(always)]
fn contained<T>(point: &'static str, fallback: impl FnOnce() -> T, work: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(value) => value,
        Err(payload) => {
            said_panic(point, payload.as_ref());
            fallback()
        }
    }
}

/// Says, once per process, that an observer panicked at point `point`.
#[cold]
#[inline(never)]
fn said_panic(point: &str, payload: &(dyn std::any::Any + Send)) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let what = match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => s.to_string(),
        (None, Some(s)) => s.clone(),
        (None, None) => "a panic without a message".to_string(),
    };
    crate::notice::line(&format!(
        "what watches permits (run records, trace, hold watchdog, driver look) panicked as a \
         permit was {point} ({what}); the permit's units are unaffected (held, and returned \
         as usual), but what is recorded of it may be missing. Said once per process; please \
         report it with this line"
    ));
}

/// The observer point made to panic, and on which thread (tests of [`contained`]).
#[cfg(test)]
pub(super) static PANIC_AT: parking_lot::Mutex<Option<(std::thread::ThreadId, &'static str)>> =
    parking_lot::Mutex::new(None);

/// Panics where a test made point `point` panic on this thread.
#[cfg(test)]
fn panic_here(point: &'static str) {
    if *PANIC_AT.lock() == Some((std::thread::current().id(), point)) {
        panic!("an observer made to panic at {point}");
    }
}

/// The running test's name ([`crate::nextest::current_test_name`]), for the messages of a
/// request that could not be served.
pub(super) fn test_name() -> String {
    crate::nextest::current_test_name()
}

/// The running test as run records and the history name it: `<binary>::<test>`.
pub(super) fn test_key() -> String {
    let (binary, test) = crate::nextest::current_test();
    crate::nextest::test_key(&binary, &test)
}

/// The run this process belongs to, where it is recorded (see [`crate::runs::run_id`]).
pub(super) fn run_id() -> Option<&'static str> {
    crate::runs::run_id()
}

/// The key under which `auto` records its choice for run `run`.
pub(super) fn run_key(run: &str) -> String {
    crate::runs::run_key(run)
}

/// A permit is passed on to `cmd`: where the driver watch looks on, it counts `cmd` and what it
/// starts as working inside a permit.
pub(super) fn passing_on(cmd: &mut std::process::Command) {
    crate::drivers::watch_inside_permit(cmd);
}

fn thread_label() -> String {
    let t = std::thread::current();
    match t.name() {
        Some(n) => n.to_string(),
        None => format!("{:?}", t.id()),
    }
}
