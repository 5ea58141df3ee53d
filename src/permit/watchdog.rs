//! The hold deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`): a permit held past it means a test is
//! stuck, usually in a GPU driver that deadlocked under concurrent use. Nothing in `cargo test`
//! ends such a test; the run would hang until CI kills it hours later, saying nothing. So one
//! thread per process watches the permits of pools with a hold deadline, and when one is held
//! past it, prints what is known — who holds permits and since when, the N in force, that a
//! lower N is the usual cure — records the hang in the slot directory (so the trace's what-if
//! does not recommend that N again on this host) and aborts the process: the run fails at
//! once, and says why.
//!
//! A program that can end what holds the permit better than an abort can (a runner whose
//! child holds it: aborting the runner would leave the child holding the slot) sets a handler
//! with [`on_hold_timeout`]; the watchdog then hands it each late permit instead.
//!
//! Registering costs a mutex per permit taken and returned, and only in pools with a deadline.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::hangs::HangRecord;
use crate::host::Layout;

/// A permit under watch.
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) test: String,
    pub(super) thread: String,
    pub(super) exclusive: bool,
    /// Units held (every unit of the pool when exclusive).
    pub(super) units: usize,
    pub(super) deadline: Duration,
    /// N per GPU and GPUs of the pool.
    pub(super) layout: Layout,
    /// The pool's slot directory, for the hang record.
    pub(super) slot_dir: Option<PathBuf>,
}

struct Entry {
    id: u64,
    since: Instant,
    watched: Watched,
}

type Handler = Box<dyn Fn(HoldTimeout) + Send + Sync>;

static HANDLER: OnceLock<Handler> = OnceLock::new();

/// Replaces what this process does when one of its permits is held past its pool's hold
/// deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`, [`PoolBuilder::hold_timeout`]): instead of
/// printing the diagnosis, recording the hang and aborting, the watchdog calls `handler` once
/// for each such permit, with what it knows, and does nothing else. Returns whether the
/// handler was set: only the first call sets one.
///
/// For programs that can end what holds the permit themselves, such as a runner whose child
/// process works inside it (`gpu-test-permit run` ends its command). The handler runs on the
/// watchdog's thread: other late permits wait until it returns.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
///
/// let (late, told) = mpsc::channel();
/// let set = gpu_test_permit::on_hold_timeout(move |t| {
///     let _ = late.send(t);
/// });
/// assert!(set);
/// # drop(told);
/// // ... take permits; a permit held past the deadline arrives on `told` ...
/// ```
///
/// [`PoolBuilder::hold_timeout`]: crate::PoolBuilder::hold_timeout
pub fn on_hold_timeout(handler: impl Fn(HoldTimeout) + Send + Sync + 'static) -> bool {
    HANDLER.set(Box::new(handler)).is_ok()
}

/// A permit held past its pool's hold deadline, as the watchdog found it (see
/// [`on_hold_timeout`]).
///
/// ```
/// use gpu_test_permit::HoldTimeout;
///
/// // What a handler given to `on_hold_timeout` may do with one: say it, record it, and end the
/// // process, whose permits the kernel then frees.
/// fn handle(late: HoldTimeout) {
///     eprintln!("{}", late.diagnosis());
///     late.record();
///     std::process::abort();
/// }
/// # let _: fn(HoldTimeout) = handle;
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HoldTimeout {
    /// What holds the permit: the test's name (see
    /// [`current_test_name`](crate::nextest::current_test_name)), or a command (see
    /// [`HoldTimeout::held_by_command`]).
    pub holder: String,
    /// The thread that took it.
    pub thread: String,
    /// The process that holds it.
    pub pid: u32,
    /// Units held (every unit of the pool when exclusive).
    pub units: usize,
    /// Whether it is exclusive.
    pub exclusive: bool,
    /// How long it had been held when found.
    pub held: Duration,
    /// The hold deadline it passed.
    pub deadline: Duration,
    /// N per GPU and GPUs of its pool.
    pub layout: Layout,
    /// Whether `holder` is a command rather than a test.
    command: bool,
    slot_dir: Option<PathBuf>,
    /// Every permit this process held at that moment, this one first: (holder, thread, held,
    /// exclusive).
    held_here: Vec<(String, String, Duration, bool)>,
}

impl HoldTimeout {
    fn new(late: &Entry, all: &[Entry], now: Instant) -> HoldTimeout {
        let w = &late.watched;
        let mut held_here = Vec::new();
        held_here.push(listed(late, now));
        for e in all {
            if e.id != late.id {
                held_here.push(listed(e, now));
            }
        }
        HoldTimeout {
            holder: w.test.clone(),
            thread: w.thread.clone(),
            pid: std::process::id(),
            units: w.units,
            exclusive: w.exclusive,
            held: now.duration_since(late.since),
            deadline: w.deadline,
            layout: w.layout,
            command: false,
            slot_dir: w.slot_dir.clone(),
            held_here,
        }
    }

    /// Names `command`, process `pid`, as what holds the permit: a runner holds it for a
    /// command that works inside it. The diagnosis and the hang record then name the command.
    ///
    /// ```
    /// use gpu_test_permit::HoldTimeout;
    ///
    /// // A tool that holds a permit for a command it started names the command, not itself.
    /// fn on_late(late: HoldTimeout, child: &std::process::Child) -> HoldTimeout {
    ///     late.held_by_command("cargo test --release", child.id())
    /// }
    /// # let _ = on_late;
    /// ```
    pub fn held_by_command(mut self, command: impl Into<String>, pid: u32) -> HoldTimeout {
        self.holder = command.into();
        self.pid = pid;
        self.command = true;
        if let Some(first) = self.held_here.first_mut() {
            first.0.clone_from(&self.holder);
        }
        self
    }

    /// The diagnosis the watchdog prints (without what it does next): who holds permits in
    /// this process and for how long, the N in force, and that a lower N is the usual cure.
    ///
    /// ```
    /// use gpu_test_permit::HoldTimeout;
    ///
    /// // Say it on standard error and end the process: its permits are freed with it.
    /// fn handle(late: HoldTimeout) {
    ///     eprintln!("{}", late.diagnosis());
    ///     std::process::abort();
    /// }
    /// # let _ = handle;
    /// ```
    pub fn diagnosis(&self) -> String {
        let what = if self.command { "command" } else { "test" };
        let whose = if self.command {
            format!("pid {}", self.pid)
        } else {
            format!("thread `{}`, pid {}", self.thread, self.pid)
        };
        let mut msg = format!(
            "\ngpu-test-permit: HOLD TIMEOUT: {what} `{}` ({whose}) has held its GPU permit for \
             {:.1}s, past GPU_TEST_PERMIT_HOLD_TIMEOUT={:?}. It is stuck, most likely in the \
             GPU driver: a driver can deadlock when several tests create and destroy GPU \
             contexts at once.\n  permits held in this process:\n",
            self.holder,
            self.held.as_secs_f64(),
            self.deadline
        );
        let mut first = true;
        for (holder, thread, held, exclusive) in &self.held_here {
            let whose = if first && self.command {
                format!("command `{holder}` (pid {})", self.pid)
            } else {
                format!("test `{holder}` (thread `{thread}`)")
            };
            first = false;
            msg.push_str(&format!(
                "  - {whose} for {:.1}s{}\n",
                held.as_secs_f64(),
                if *exclusive { ", exclusive" } else { "" }
            ));
        }
        msg.push_str(&format!(
            "  in force: {}. A lower {} is the usual cure; `gpu-test-permit status` shows the \
             other processes' permits. This N is recorded as having hung on this host.",
            self.layout,
            crate::config::Config::global().concurrency_var
        ));
        msg
    }

    /// Appends the hang to the record of its pool's slot directory (`gpu0.hangs` in its state
    /// directory; `gpu-test-permit history` shows it), so that the trace's what-if does not advise this N on
    /// this host, after a reboot too.
    /// Best effort; nothing where the pool has no slot directory.
    ///
    /// ```
    /// use gpu_test_permit::HoldTimeout;
    ///
    /// // A handler that keeps the process alive still records the hang, so that the N it hung at
    /// // is not advised again.
    /// fn keep_going(late: HoldTimeout) {
    ///     late.record();
    ///     eprintln!("{} held a permit for {:?}", late.holder, late.held);
    /// }
    /// # let _ = keep_going;
    /// ```
    pub fn record(&self) {
        let Some(dir) = &self.slot_dir else {
            return;
        };
        let mut record = HangRecord::now(
            self.layout.per_gpu,
            self.layout.gpus,
            &self.holder,
            self.held,
        );
        record.pid = Some(self.pid);
        record.units = Some(self.units);
        record.run = crate::runs::run_id().map(str::to_string);
        crate::hangs::record_hang(dir, &record);
    }
}

/// A permit as [`HoldTimeout`] lists it: (holder, thread, held, exclusive).
fn listed(e: &Entry, now: Instant) -> (String, String, Duration, bool) {
    (
        e.watched.test.clone(),
        e.watched.thread.clone(),
        now.duration_since(e.since),
        e.watched.exclusive,
    )
}

fn list() -> &'static parking_lot::Mutex<Vec<Entry>> {
    static LIST: OnceLock<parking_lot::Mutex<Vec<Entry>>> = OnceLock::new();
    LIST.get_or_init(|| {
        crate::sys::spawn_named("gpu-test-permit-watchdog", run)
            .expect("gpu-test-permit: cannot start the hold-deadline watchdog thread");
        parking_lot::Mutex::new(Vec::new())
    })
}

/// Starts watching a permit granted now. Returns the id to [`unwatch`] it with (never 0).
pub(super) fn watch(watched: Watched) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    list().lock().push(Entry {
        id,
        since: Instant::now(),
        watched,
    });
    id
}

/// Stops watching a returned permit (one handed to a handler is no longer watched).
pub(super) fn unwatch(id: u64) {
    // Ids are never reused: at most one entry has it.
    let mut list = list().lock();
    for i in 0..list.len() {
        if list[i].id == id {
            list.remove(i);
            return;
        }
    }
}

fn run() {
    loop {
        let step = {
            let mut list = list().lock();
            let now = Instant::now();
            let mut first_late = None;
            let mut i = 0;
            while i < list.len() {
                if now.duration_since(list[i].since) > list[i].watched.deadline {
                    first_late = Some(i);
                    break;
                }
                i += 1;
            }
            if let Some(i) = first_late {
                let late = HoldTimeout::new(&list[i], &list, now);
                if let Some(handler) = HANDLER.get() {
                    list.swap_remove(i);
                    // Outside the lock: the handler may return the permit (and unwatch it).
                    drop(list);
                    handler(late);
                    continue;
                }
                crate::notice::text(&format!(
                    "{} Aborting, so that the run fails now instead of hanging.\n",
                    late.diagnosis()
                ));
                late.record();
                crate::runs::flush();
                std::process::abort();
            }
            // Check a few times per deadline, at most once a second.
            let mut step = Duration::from_secs(1);
            for e in list.iter() {
                step = step.min(e.watched.deadline / 4);
            }
            step.max(Duration::from_millis(10))
        };
        std::thread::sleep(step);
    }
}
