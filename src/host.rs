//! Host slots: the cross-process layer.
//!
//! The cap is a property of the GPU, not of one process: under `cargo nextest` every test is a
//! process of its own, doctests are processes, and two test runs may share a runner. So every
//! real permit also holds one *slot*: an advisory file lock (`flock` on Unix, `LockFileEx` on
//! Windows, through std's [`File::try_lock`]) on one of the slot files in a shared directory.
//! The kernel drops a file lock when its process dies for any reason, SIGKILL included, so a
//! crashed test never leaks a slot.
//!
//! Advisory locks only bind processes that take them: a GPU program that does not use this crate
//! is not held back.
//!
//! # How it works
//!
//! Layout of the directory (the slots of every GPU are numbered together, `gpu0.slot<i>`; slot
//! `i` belongs to GPU `i % gpus`):
//! - `gpu0.layout`: the permits per GPU and the GPU count the directory serves. Every process
//!   using the directory holds a shared lock on it for as long as it has the slots open. Only a
//!   process that gets it exclusively — nobody else is using the directory — may (re)write it;
//!   every other process *adopts* the recorded layout, with one warning when its own
//!   configuration differs. So two processes that share a directory always agree on how many
//!   slots there are, and an exclusive permit really is all of them.
//! - `gpu0.gate`: whoever holds this lock is the head of the cross-process queue. A request
//!   that finds no free slot keeps the gate while it waits, and writes its own record into the
//!   gate file; the others wait for the gate. A request for several slots — k slots of one
//!   GPU for a weighted permit, every slot for an exclusive one — takes them all at once or
//!   none (it never sits on some while waiting for the rest), and once it holds the gate
//!   nobody else takes a slot, so light requests cannot starve it and two heavy requests cannot
//!   deadlock. Before that it waits for the gate like any waiter: every release wakes the
//!   waiters, the gate changes hands at each grant, and a waiter lets any older waiting
//!   request of another process that keeps its turn (by the time it began to wait, then
//!   pid; read from the `gpu0.wait.<pid>` files) take it first, so waiting processes are
//!   served first come first served. Only a request that has just arrived tries at once (a
//!   directory scan on every acquisition would cost the uncontended path), which lets it
//!   slip in during the microseconds after a release. Light requests take the slots a heavy
//!   holder leaves free. (Byte-range locks on one file, one byte a unit, would take k units
//!   in one call, but only open-file-description locks die with the description rather than
//!   with any close in the process, and those are Linux's alone; whole-file locks under the
//!   gate give the same all-or-none wherever `flock` or `LockFileEx` exists.)
//!   A waiting request keeps its turn while it shows signs of life: it renews a heartbeat in
//!   its wait file every few milliseconds while it waits. One whose pid names no process
//!   here (another PID namespace's, or a forged record), that is stopped (`SIGSTOP`, Ctrl-Z,
//!   a debugger; seen through `/proc` on Linux), or whose heartbeat is older than a second
//!   (frozen by the cgroup freezer, stopped in another namespace) loses its turn
//!   ([`Liveness`]): the requests behind it go past it. When the head has lost its turn, the
//!   oldest waiter that keeps its own takes free slots past it, and newer requests, new
//!   arrivals included, let that one go first, as they would the head. A gate held without a
//!   record (a head between taking the gate and either its slots or its record) loses its
//!   turn once it has stayed so for a second. Only the order is judged this way: the slots
//!   themselves are locks, so no judgement can put more than N holders on a GPU. A dead
//!   head's lock is gone.
//!   A multi-slot request locks its slots one by one and gives them back unless it gets all
//!   of them; stopped in those microseconds, it keeps the ones it locked, as a stopped holder
//!   keeps its permit, until it resumes or dies. Records are written only once all are taken
//!   (a record written and blanked on every failed attempt would wake every waiter that
//!   watches the slots, itself included), so such slots are locked without a record: a wait
//!   that times out and [`status`] name their owner from `/proc/locks` on Linux.
//! - `gpu0.slot<i>`: the slot locks. The holder writes a JSON record of itself (pid, test,
//!   thread, when granted) into its slot for diagnostics; a record counts only while its
//!   slot is locked.
//! - `gpu0.budget`: the per-GPU memory budget the directory's current users convert memory
//!   declarations with: the first budget one of them settled on; blanked by a
//!   process that finds the directory unused.
//! - `gpu0.notify`: written after every release, so waiters (watching with inotify on Linux)
//!   wake within microseconds. Where no watch can be had (inotify instances are a per-user
//!   limit that any program can exhaust) waiters poll with a backoff of at most
//!   25 ms instead; every wait also re-checks at that interval.
//! - `gpu0.wait.<pid>`: a process that has waited keeps this file locked while it lives and
//!   writes the record of its waiting request into it (blank while none waits), then its
//!   heartbeat, for the order of the queue, for [`status`] and for the message of a wait that
//!   times out; unlocked ones are leftovers of killed processes and are removed when a
//!   process opens the directory.
//! - `gpu0.slot<i>.inside-<uid>/`: the slot directory of the processes working inside a
//!   permit passed on by `gpu-test-permit run` whose first slot is `i` (see
//!   [`InheritedPermit`](crate::config::InheritedPermit)), laid out like this one with as
//!   many slots as the permit holds: they share its units there, so that together they hold
//!   at most what it holds.
//!
//! A process needs one descriptor per slot plus four; the soft descriptor limit is raised (up
//! to the hard one) where that is not enough, and a layout that cannot fit is refused before
//! any file is created.

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::{self, ChangeWatch};

// The hang record lives in `crate::hangs`; its public paths here stay.
#[doc(no_inline)]
pub use crate::hangs::{HangRecord, recorded_hangs};

/// Longest sleep between re-checks while waiting, as a safety net under the change watch (the
/// kernel reports the close of a killed holder's file just before it drops that file's lock),
/// and the longest step of the polling fallback.
const RECHECK: Duration = Duration::from_millis(25);
/// First step of the polling fallback.
const POLL_FIRST: Duration = Duration::from_millis(1);
/// Size of a slot file's holder record.
const RECORD_LEN: usize = 1024;
const NAME_LIMIT: usize = 300;
/// Size of the layout record.
const LAYOUT_LEN: usize = 256;
/// Version of the directory layout; a directory laid out by another version is refused.
const LAYOUT_VERSION: u32 = 1;
/// How long opening waits for another process that is laying out the directory.
const LAYOUT_WAIT: Duration = Duration::from_secs(10);
/// Files a process keeps open besides its slots: layout, gate, notify and its wait file.
const FIXED_FILES: usize = 4;

/// What a slot's holder writes about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    /// Process id.
    pub pid: u32,
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name (or id).
    pub thread: String,
    /// When the permit was granted (in a wait record: when the wait began), milliseconds since
    /// the Unix epoch.
    pub since_unix_ms: u64,
    /// Whether this is part of an exclusive permit.
    pub exclusive: bool,
    /// The holder's permits per GPU, N.
    pub concurrency: usize,
    /// Units of the permit (1; k for a weighted permit; all slots for an exclusive one).
    /// Records of earlier versions lack it: 1.
    #[serde(default = "one")]
    pub units: usize,
    /// GPU memory the permit's request declared, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

fn one() -> usize {
    1
}

impl HolderRecord {
    fn encode(&self) -> Vec<u8> {
        let mut r = self.clone();
        let mut limit = NAME_LIMIT;
        loop {
            truncate(&mut r.test, limit);
            truncate(&mut r.thread, limit);
            let buf = serde_json::to_vec(&r).expect("a holder record always serialises");
            // Escaping can make a name up to six times longer; shorten until it fits.
            if buf.len() < RECORD_LEN {
                return padded(buf, RECORD_LEN);
            }
            limit /= 2;
        }
    }

    fn decode(raw: &[u8]) -> Result<Option<HolderRecord>, String> {
        let Some(text) = padded_text(raw)? else {
            return Ok(None);
        };
        let mut r: HolderRecord = serde_json::from_str(text).map_err(|e| e.to_string())?;
        // Another process wrote the names: keep them from moving a terminal's cursor or
        // starting a forged line wherever they are shown.
        r.test = escape_controls(&r.test);
        r.thread = escape_controls(&r.thread);
        Ok(Some(r))
    }
}

/// `text` with control characters and bidirectional overrides escaped as Rust writes them
/// (`\r`, `\u{1b}`).
pub(crate) fn escape_controls(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A record as the directory's files keep it: `text`, a newline, then spaces up to `len` (a
/// fixed size, so that a rewrite covers the whole of the one before). [`padded_text`] reads it.
fn padded(mut text: Vec<u8>, len: usize) -> Vec<u8> {
    text.push(b'\n');
    text.resize(len.max(text.len()), b' ');
    text
}

/// The text of a padded record (blank or all padding: none).
fn padded_text(raw: &[u8]) -> Result<Option<&str>, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8".to_string())?;
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    Ok((!text.is_empty()).then_some(text))
}

fn truncate(s: &mut String, limit: usize) {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

/// How a slot directory is laid out: permits per GPU and GPUs. Recorded in the directory by
/// the first process that uses it; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Permits (slots) per GPU: N.
    pub per_gpu: usize,
    /// GPUs the slots span.
    pub gpus: usize,
}

impl Layout {
    /// Slots in all: N per GPU times the GPUs.
    pub fn slots(&self) -> usize {
        self.per_gpu.saturating_mul(self.gpus)
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "N = {} permit(s) per GPU x {} GPU(s)",
            self.per_gpu, self.gpus
        )
    }
}

#[derive(Serialize, Deserialize)]
struct LayoutRecord {
    v: u32,
    per_gpu: usize,
    gpus: usize,
}

impl Layout {
    fn encode(&self) -> Vec<u8> {
        let buf = serde_json::to_vec(&LayoutRecord {
            v: LAYOUT_VERSION,
            per_gpu: self.per_gpu,
            gpus: self.gpus,
        })
        .expect("a layout always serialises");
        padded(buf, LAYOUT_LEN)
    }

    fn decode(raw: &[u8]) -> Result<Option<Layout>, String> {
        let Some(text) = padded_text(raw)? else {
            return Ok(None);
        };
        let r: LayoutRecord = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if r.v != LAYOUT_VERSION {
            return Err(format!(
                "layout version {} (this build uses {LAYOUT_VERSION})",
                r.v
            ));
        }
        let layout = Layout {
            per_gpu: r.per_gpu,
            gpus: r.gpus,
        };
        if layout.per_gpu == 0
            || layout.gpus == 0
            || layout.per_gpu > crate::config::MAX_CONCURRENCY
            || layout.gpus > crate::config::MAX_CONCURRENCY
        {
            return Err(format!("out-of-range layout {layout}"));
        }
        Ok(Some(layout))
    }
}

/// Why host slots could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum HostError {
    /// The slot directory is missing, insecure or unusable; the message says what to do.
    Directory(String),
    /// A slot file could not be opened or locked.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The process may not open enough files for the slots; the message says what to change.
    Descriptors(String),
    /// A permit inherited from a parent process (`gpu-test-permit run`) is held but cannot
    /// be used here; the message says why and what to change.
    Inherited(String),
}

impl Clone for HostError {
    /// An I/O error is copied by its kind, OS error code and message.
    fn clone(&self) -> HostError {
        match self {
            HostError::Directory(m) => HostError::Directory(m.clone()),
            HostError::Descriptors(m) => HostError::Descriptors(m.clone()),
            HostError::Inherited(m) => HostError::Inherited(m.clone()),
            HostError::Io { path, error } => HostError::Io {
                path: path.clone(),
                error: match error.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(error.kind(), error.to_string()),
                },
            },
        }
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Directory(msg) | HostError::Descriptors(msg) | HostError::Inherited(msg) => {
                write!(f, "{msg}")
            }
            HostError::Io { path, error } => write!(
                f,
                "cannot use slot file {}: {error}; check the slot directory or set \
                 GPU_TEST_PERMIT_DIR",
                path.display()
            ),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Io { error, .. } => Some(error),
            HostError::Directory(_) | HostError::Descriptors(_) | HostError::Inherited(_) => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HostError + '_ {
    move |error| HostError::Io {
        path: path.to_path_buf(),
        error,
    }
}

#[derive(Debug)]
struct Slot {
    path: PathBuf,
    file: File,
    /// Held by a permit of this process: the lock belongs to the shared open file, so the
    /// kernel would grant it again to another thread of ours.
    held: AtomicBool,
}

/// The slot files of one directory, opened once per process.
#[derive(Debug)]
pub(crate) struct HostSlots {
    dir: PathBuf,
    layout: Layout,
    /// Locked shared for the life of this value: the layout is in use.
    _layout_file: File,
    gate_path: PathBuf,
    gate: File,
    notify_path: PathBuf,
    notify: File,
    slots: Vec<Slot>,
    /// One acquirer of this process at a time goes through the gate (the gate's lock belongs to
    /// the shared open file, so it cannot tell our threads apart).
    acquire_lock: parking_lot::Mutex<Waiting>,
    warned_corrupt: AtomicBool,
}

/// A request waiting for slots, or the head of the queue, as a timed-out wait sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WaitingRequest {
    pub(crate) record: HolderRecord,
    /// It holds the gate: the queue's head.
    pub(crate) head: bool,
    /// Whether it keeps its turn, and if not, why.
    pub(crate) liveness: Liveness,
}

/// How long a waiting request may show no sign of life (its wait file's heartbeat, renewed
/// every few milliseconds while it waits) before it loses its turn to the requests behind it.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// Whether a waiting request of another process can use its turn, as the requests behind it
/// judge it. A request that cannot loses its turn: the others go past it, the oldest of them
/// first. Only the order is at stake: the slots themselves are locks, so the cap holds
/// whatever is judged here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    /// Running, and renewing its heartbeat: it keeps its turn.
    Active,
    /// Its process is stopped (`SIGSTOP`, Ctrl-Z, a debugger).
    Stopped,
    /// Its record names a process id that no process here has: one of another PID
    /// namespace (a container), or a forged record.
    Unseen,
    /// No heartbeat for this long: a process frozen by the cgroup freezer (`docker pause`),
    /// stopped in another PID namespace, or a record nobody keeps up.
    Silent(Duration),
}

impl Liveness {
    /// Whether the request keeps its turn.
    pub fn keeps_turn(self) -> bool {
        self == Liveness::Active
    }

    /// Judges process `pid` whose last heartbeat was at `beat_ms` (Unix milliseconds), now
    /// being `now_ms`. A heartbeat from the future beyond the grace period (a forged one, or
    /// a clock set back) counts as none.
    fn judge(pid: u32, beat_ms: u64, now_ms: u64) -> Liveness {
        if !sys::process_is_visible(pid) {
            return Liveness::Unseen;
        }
        if sys::process_is_stopped(pid) {
            return Liveness::Stopped;
        }
        let grace = GRACE.as_millis() as u64;
        let age = now_ms.saturating_sub(beat_ms);
        if age > grace || beat_ms > now_ms.saturating_add(grace) {
            Liveness::Silent(Duration::from_millis(age))
        } else {
            Liveness::Active
        }
    }
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Liveness::Active => write!(f, "running"),
            Liveness::Stopped => write!(f, "its process stopped (SIGSTOP, Ctrl-Z or a debugger)"),
            Liveness::Unseen => write!(
                f,
                "its pid names no process here (a process of another PID namespace, or a \
                 forged record)"
            ),
            Liveness::Silent(d) => write!(
                f,
                "no sign of life for {:.1}s (frozen, e.g. by `docker pause`, stopped in another \
                 PID namespace, or a record nobody keeps up)",
                d.as_secs_f64()
            ),
        }
    }
}

/// Who was in the way of a wait that timed out.
#[derive(Clone, Debug, Default)]
pub(crate) struct Blockers {
    /// Records of the locked slots.
    pub(crate) holders: Vec<HolderRecord>,
    /// Per locked slot without a record (blank, or corrupt), the lock's owner where the
    /// system tells it ([`sys::lock_owner`]).
    pub(crate) unrecorded: Vec<Option<u32>>,
    /// Other processes' waiting requests, the head first.
    pub(crate) waiting: Vec<WaitingRequest>,
}

/// The outcome of a wait that did not get its slots.
#[derive(Debug)]
pub(crate) enum HostWaitError {
    /// The deadline passed; [`HostSlots::blockers`] tells who is in the way.
    TimedOut,
    Failed(HostError),
}

impl HostSlots {
    /// Opens (creating if needed) the slots of `dir` for `wanted`, checking the directory
    /// first. The slots opened follow the directory's recorded layout, which is `wanted` unless
    /// another process using the directory set a different one (see [`HostSlots::layout`]).
    pub(crate) fn open(dir: &Path, wanted: Layout) -> Result<HostSlots, HostError> {
        sys::prepare_dir(dir).map_err(HostError::Directory)?;
        let shared = sys::is_shared_dir(dir);
        let open = |name: &str| -> Result<(PathBuf, File), HostError> {
            let path = dir.join(name);
            let file = sys::open_lock_file(&path, shared).map_err(io_err(&path))?;
            Ok((path, file))
        };
        let (layout_path, layout_file) = open("gpu0.layout")?;
        // The descriptor budget is checked before any slot file is made: a layout that cannot
        // be opened must leave nothing behind.
        let layout = agree_on_layout(dir, &layout_path, &layout_file, wanted)?;
        fd_budget(dir, layout)?;
        if layout != wanted {
            crate::notice::line(&format!(
                "slot directory {} serves {layout} (set by a process using it now); this process \
                 asked for {wanted} and uses the directory's layout, so that the cap holds. Give \
                 every process that shares the directory the same REALIZAR_GPU_TEST_CONCURRENCY \
                 and GPU_TEST_PERMIT_GPUS, or a GPU_TEST_PERMIT_DIR of its own",
                dir.display()
            ));
        }
        let (gate_path, gate) = open("gpu0.gate")?;
        let (notify_path, notify) = open("gpu0.notify")?;
        let slots = (0..layout.slots())
            .map(|i| {
                open(&format!("gpu0.slot{i}")).map(|(path, file)| Slot {
                    path,
                    file,
                    held: AtomicBool::new(false),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        sweep_wait_files(dir);
        Ok(HostSlots {
            dir: dir.to_path_buf(),
            layout,
            _layout_file: layout_file,
            gate_path,
            gate,
            notify_path,
            notify,
            slots,
            acquire_lock: parking_lot::Mutex::new(Waiting::default()),
            warned_corrupt: AtomicBool::new(false),
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The layout the slots follow: the directory's, which may differ from the one asked for.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// The open file of slot `index`, whose description holds the slot's lock while this
    /// process holds the slot (for passing a held permit on to a command).
    pub(crate) fn slot_file(&self, index: usize) -> &File {
        &self.slots[index].file
    }

    /// Takes `units` slots of one GPU (every slot when `exclusive`), waiting until `deadline`.
    /// Returns the slot indices.
    pub(crate) fn acquire(
        &self,
        units: usize,
        exclusive: bool,
        deadline: Option<Instant>,
        record: &HolderRecord,
    ) -> Result<Vec<usize>, HostWaitError> {
        let units = if exclusive { self.slots.len() } else { units };
        let mut turn = match deadline {
            None => self.acquire_lock.lock(),
            Some(d) => match self.acquire_lock.try_lock_until(d) {
                Some(g) => g,
                None => return Err(HostWaitError::TimedOut),
            },
        };
        // Off the waiting list when it returns (see the end of `take_turn`).
        self.take_turn(units, exclusive, deadline, record, &mut turn)
    }

    fn take_turn(
        &self,
        units: usize,
        exclusive: bool,
        deadline: Option<Instant>,
        record: &HolderRecord,
        waiting: &mut Waiting,
    ) -> Result<Vec<usize>, HostWaitError> {
        let mut gate = false;
        let mut gate_recorded = false;
        let mut head_seen = None;
        let result = loop {
            // Once waiting, a request lets an older waiting request of another process that
            // keeps its turn go first: the waiters woken by a release would otherwise race
            // for the gate. (A new request tries at once: reading the waiters on every
            // acquisition would cost the uncontended path a directory scan.)
            let mut defer = !gate && waiting.listed && self.older_waiter_first(record);
            if !gate && !defer {
                match self.gate.try_lock() {
                    Ok(()) => gate = true,
                    Err(TryLockError::WouldBlock) => {}
                    Err(TryLockError::Error(e)) => {
                        break Err(HostWaitError::Failed(io_err(&self.gate_path)(e)));
                    }
                }
            }
            // The head takes slots. When the head has lost its turn, the oldest waiter that
            // keeps its own takes them past it, with the head's protection: a newer request,
            // even one that has just arrived, lets it go first.
            let mut past_head = false;
            if !gate && !defer && self.head_lost_turn(&mut head_seen) {
                defer = !waiting.listed && self.older_waiter_first(record);
                past_head = !defer;
            }
            if gate || past_head {
                match self.try_take(units, exclusive, record) {
                    Ok(Some(got)) => break Ok(got),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break Err(HostWaitError::TimedOut);
            }
            if gate && !gate_recorded {
                // Who heads the queue, for the others to judge whether it can still take its
                // turn, and for diagnostics.
                gate_recorded = sys::write_at(&self.gate, &record.encode(), 0).is_ok();
            }
            // A watch armed just now: check once more, since a release between the check
            // above and the arming would otherwise go unseen.
            if self.arm(waiting) {
                continue;
            }
            waiting.list(&self.dir, record);
            waiting.beat();
            waiting.wait(deadline);
        };
        // Off the list before anyone is woken: a waiter that finds this request still listed
        // would let it go first and wait for the next change.
        let was_listed = waiting.listed;
        waiting.unlist();
        if gate {
            if gate_recorded {
                let _ = sys::write_at(&self.gate, &[b' '; RECORD_LEN], 0);
            }
            if let Err(e) = self.gate.unlock() {
                if let Ok(got) = &result {
                    self.release(got);
                }
                return Err(HostWaitError::Failed(io_err(&self.gate_path)(e)));
            }
            // Wake whoever waits for the gate.
            self.notify();
        } else if was_listed {
            // Waiters that let this request go first look again.
            self.notify();
        }
        result
    }

    /// Takes `units` free slots now, all of them or none: any slots for an exclusive request
    /// (which asks for all), else slots of one GPU, the first GPU that has enough. Records are
    /// written only once all are taken.
    fn try_take(
        &self,
        units: usize,
        exclusive: bool,
        record: &HolderRecord,
    ) -> Result<Option<Vec<usize>>, HostWaitError> {
        let gpus = if exclusive || units == 1 {
            1
        } else {
            self.layout.gpus
        };
        for gpu in 0..gpus {
            let mut got = Vec::with_capacity(units);
            for (i, slot) in self.slots.iter().enumerate().skip(gpu).step_by(gpus) {
                if got.len() == units {
                    break;
                }
                if slot.held.load(Ordering::Acquire) {
                    continue;
                }
                match slot.file.try_lock() {
                    Ok(()) => {
                        slot.held.store(true, Ordering::Release);
                        got.push(i);
                    }
                    Err(TryLockError::WouldBlock) => {}
                    Err(TryLockError::Error(e)) => {
                        self.unlock_unrecorded(&got);
                        return Err(HostWaitError::Failed(io_err(&slot.path)(e)));
                    }
                }
            }
            if got.len() < units {
                self.unlock_unrecorded(&got);
                continue;
            }
            // Stamped with the grant: a holder's record tells how long it has held its slots,
            // not how long it waited for them.
            let granted = HolderRecord {
                since_unix_ms: crate::clock::now_unix_ms(),
                ..record.clone()
            };
            let bytes = granted.encode();
            for &i in &got {
                // A record is diagnostics only; failing to write one must not fail the test.
                let _ = sys::write_at(&self.slots[i].file, &bytes, 0);
            }
            return Ok(Some(got));
        }
        Ok(None)
    }

    /// Gives back slots taken by a request that could not get all it asked for. Nothing was
    /// written to them, and nobody is woken: the other waiters' own re-checks cover the moment.
    fn unlock_unrecorded(&self, slots: &[usize]) {
        for &i in slots {
            let slot = &self.slots[i];
            let _ = slot.file.unlock();
            slot.held.store(false, Ordering::Release);
        }
    }

    /// Whether another process has a waiting request older than `record` (by the time it
    /// began to wait, then by pid) that keeps its turn ([`Liveness::Active`]).
    fn older_waiter_first(&self, record: &HolderRecord) -> bool {
        let own = (record.since_unix_ms, record.pid);
        let now = crate::clock::now_unix_ms();
        wait_entries(&self.dir).iter().any(|w| {
            let r = &w.record;
            r.pid != record.pid
                && (r.since_unix_ms, r.pid) < own
                && Liveness::judge(r.pid, w.beat_ms, now).keeps_turn()
        })
    }

    /// Whether another process holds the gate but has lost its turn: stopped, unseen, or
    /// showing no sign of life for [`GRACE`]. A gate held with no record (a head caught
    /// between taking the gate and either its slots or writing its record, which takes
    /// microseconds) loses its turn once it has stayed so for [`GRACE`], as seen by `seen`.
    fn head_lost_turn(&self, seen: &mut Option<(Option<HolderRecord>, Instant)>) -> bool {
        if !is_locked_at(&self.gate_path) {
            *seen = None;
            return false;
        }
        let record = read_record(&self.gate);
        if record.as_ref().is_some_and(|r| r.pid == std::process::id()) {
            return false;
        }
        // First seen (by this process) with this record: the progress clock of a head that has
        // no heartbeat of its own to show.
        let first_seen = match seen {
            Some((r, at)) if *r == record => *at,
            _ => {
                *seen = Some((record.clone(), Instant::now()));
                Instant::now()
            }
        };
        match record {
            Some(record) => !self.head_liveness(&record, Some(first_seen)).keeps_turn(),
            None => first_seen.elapsed() > GRACE,
        }
    }

    /// How the head of the queue, recorded as `record`, stands: judged by its wait file's
    /// heartbeat, or where it has none, by how long it has been seen (`first_seen`; when not
    /// known, since it began to wait).
    fn head_liveness(&self, record: &HolderRecord, first_seen: Option<Instant>) -> Liveness {
        head_liveness(&self.dir, record, first_seen)
    }

    /// The head of the queue as its gate record tells, when another process holds the gate and
    /// has recorded itself (a head that takes slots at once never writes one).
    fn head(&self) -> Option<WaitingRequest> {
        let record = read_record(&self.gate)?;
        // Probed through a description of its own: this process's gate description may hold
        // the gate for another of its threads.
        if record.pid == std::process::id() || !is_locked_at(&self.gate_path) {
            return None;
        }
        Some(WaitingRequest {
            liveness: self.head_liveness(&record, None),
            record,
            head: true,
        })
    }

    /// Arms this process's change watch (gate, notify file and every slot) if it has none yet.
    /// Returns whether it was set up just now. Without a watch (inotify unavailable), waits
    /// poll.
    fn arm(&self, waiting: &mut Waiting) -> bool {
        if waiting.watch.is_some() {
            return false;
        }
        let mut paths: Vec<&Path> = vec![&self.gate_path, &self.notify_path];
        paths.extend(self.slots.iter().map(|s| s.path.as_path()));
        waiting.watch = Some(match ChangeWatch::new(&paths) {
            Ok(w) => Watch::Changes(w),
            Err(e) => {
                crate::notice::line(&format!(
                    "cannot watch the slot files in {} for changes ({e}); waiting by polling \
                     every {} ms at most instead (inotify instances and watches are per-user \
                     limits: fs.inotify.max_user_instances, fs.inotify.max_user_watches)",
                    self.dir.display(),
                    RECHECK.as_millis()
                ));
                Watch::Poll
            }
        });
        true
    }

    /// The per-GPU memory budget every process using the directory converts declarations with:
    /// the first budget a process of the directory's current users settled on (recorded in
    /// `gpu0.budget`, which goes when a process finds the directory unused). A process with a
    /// budget of its own records it if none is recorded, and otherwise adopts the recorded one,
    /// saying so once when the two differ; a process without one adopts the recorded one.
    ///
    /// Where no budget can be agreed on, the process converts with its own and says why, in one
    /// line naming the record: the record is not a regular file (a FIFO, a directory or a
    /// link is refused without blocking), holds no budget (a count outside [`BUDGETS`] is no
    /// GPU's), or stays locked past [`BUDGET_WAIT`] while blank (a locked record that holds a
    /// budget is read anyway: one is only ever rewritten once nobody uses the directory).
    pub(crate) fn agree_on_budget(&self, own: Option<u64>) -> Option<u64> {
        let path = self.dir.join(BUDGET_FILE);
        let record = path.display();
        // The one way to convert with a budget the other users may not share: with a notice.
        let unshared = |why: String| {
            let with = match own {
                Some(b) => format!("its own budget, {}", crate::config::format_bytes(b)),
                None => "no budget (a declaration counts as one unit)".to_string(),
            };
            crate::notice::line(&format!(
                "{why}; this process converts memory declarations with {with}, which the other \
                 processes using slot directory {} may not share",
                self.dir.display()
            ));
            own
        };
        let file = match sys::open_lock_file(&path, sys::is_shared_dir(&self.dir)) {
            Ok(file) => file,
            // (A directory answers EISDIR, not the refusal of other kinds of file.)
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
                return unshared(format!(
                    "cannot use the memory budget record {record}: it is a directory, which a \
                     slot file never is; remove it"
                ));
            }
            Err(e) => {
                return unshared(format!(
                    "cannot use the memory budget record {record} ({e})"
                ));
            }
        };
        // Held for a read and perhaps a write (microseconds), unless its holder was stopped in
        // between.
        let give_up = Instant::now() + BUDGET_WAIT;
        let locked = loop {
            match file.try_lock() {
                Ok(()) => break true,
                Err(TryLockError::WouldBlock) if Instant::now() < give_up => {
                    std::thread::sleep(POLL_FIRST);
                }
                Err(TryLockError::WouldBlock) => break false,
                Err(TryLockError::Error(e)) => {
                    return unshared(format!(
                        "cannot lock the memory budget record {record} ({e})"
                    ));
                }
            }
        };
        let read = || read_start(&file, BUDGET_LEN).map(|raw| decode_budget(&raw));
        let mut recorded = read();
        if !locked && matches!(recorded, Some(Ok(Some(_)))) {
            // A budget, once recorded, stays until nobody uses the directory, so it can be
            // read without the lock; read twice, in case the holder is writing it right now.
            std::thread::sleep(POLL_FIRST);
            if read() != recorded {
                recorded = Some(Ok(None));
            }
        }
        let agreed = match recorded {
            Some(Ok(Some(r))) => self.adopt_budget(r, own),
            Some(Err(problem)) => unshared(format!(
                "ignoring the corrupt memory budget record {record} ({problem}; the next \
                 process that finds the directory unused clears it)"
            )),
            None => unshared(format!("cannot read the memory budget record {record}")),
            Some(Ok(None)) if !locked => {
                let by = sys::lock_owner(&file)
                    .map(|pid| format!(" by pid {pid}"))
                    .unwrap_or_default();
                unshared(format!(
                    "the memory budget record {record} has been kept locked{by} for {}s without \
                     a budget in it (by a process stopped while it agreed on one, or one that \
                     is not this crate's)",
                    BUDGET_WAIT.as_secs_f64()
                ))
            }
            // None recorded yet: ours, if it is one, is the directory's from now on.
            Some(Ok(None)) => match own {
                Some(bytes) if !BUDGETS.contains(&bytes) => unshared(format!(
                    "this process's memory budget of {bytes} bytes is not recorded in {record}: \
                     it {}, and such a record is taken for a corrupt one",
                    implausible_budget(bytes)
                )),
                Some(bytes) => {
                    let text = padded(bytes.to_string().into_bytes(), BUDGET_LEN);
                    match sys::write_at(&file, &text, 0) {
                        Ok(()) => own,
                        Err(e) => unshared(format!(
                            "cannot write the memory budget record {record} ({e})"
                        )),
                    }
                }
                None => None,
            },
        };
        if locked {
            let _ = file.unlock();
        }
        agreed
    }

    /// `recorded`, the directory's budget, saying so once when `own` differs.
    fn adopt_budget(&self, recorded: u64, own: Option<u64>) -> Option<u64> {
        if let Some(own) = own.filter(|&b| b != recorded) {
            crate::notice::line(&format!(
                "slot directory {} budgets {} of GPU memory per GPU (set by a process using it \
                 now); this process's {} is not used, so that every process turns declarations \
                 into the same units. Give every process that shares the directory the same \
                 GPU_TEST_PERMIT_GPU_MEMORY",
                self.dir.display(),
                crate::config::format_bytes(recorded),
                crate::config::format_bytes(own),
            ));
        }
        Some(recorded)
    }

    /// Frees slots held by this process.
    pub(crate) fn release(&self, slots: &[usize]) {
        if slots.is_empty() {
            return;
        }
        let blank = [b' '; RECORD_LEN];
        for &i in slots {
            let slot = &self.slots[i];
            let _ = sys::write_at(&slot.file, &blank, 0);
            // Unlocking can only fail for a descriptor that is not ours; the lock then dies
            // with the process at the latest.
            let _ = slot.file.unlock();
            slot.held.store(false, Ordering::Release);
        }
        self.notify();
    }

    fn notify(&self) {
        let _ = sys::write_at(&self.notify, b"x", 0);
    }

    /// Who is in the way: the records of the locked slots, and the other processes' waiting
    /// requests. Read only for a wait that timed out: probing the locks of free slots can make
    /// another process's attempt fail (it is woken to retry).
    pub(crate) fn blockers(&self) -> Blockers {
        let mut probed = false;
        let mut holders = Vec::new();
        let mut unrecorded = Vec::new();
        for slot in &self.slots {
            // Never probe through `slot.file`: its description may hold (or be taking) another
            // thread's lock, which a probe would convert and its unlock drop.
            let locked = slot.held.load(Ordering::Acquire) || {
                probed = true;
                is_locked_at(&slot.path)
            };
            if !locked {
                continue;
            }
            match read_start(&slot.file, RECORD_LEN).map(|b| HolderRecord::decode(&b)) {
                Some(Ok(Some(r))) => holders.push(r),
                Some(Ok(None)) | None => unrecorded.push(sys::lock_owner(&slot.file)),
                Some(Err(e)) => {
                    unrecorded.push(sys::lock_owner(&slot.file));
                    if !self.warned_corrupt.swap(true, Ordering::Relaxed) {
                        crate::notice::line(&format!(
                            "ignoring the corrupt holder record in {} ({e}); it is rewritten \
                             by the slot's next holder",
                            slot.path.display()
                        ));
                    }
                }
            }
        }
        if probed {
            // Probing a free slot's lock may have made another process's attempt fail.
            self.notify();
        }
        let mut waiting: Vec<WaitingRequest> = self.head().into_iter().collect();
        let now = crate::clock::now_unix_ms();
        for entry in wait_entries(&self.dir) {
            let record = entry.record;
            if record.pid == std::process::id()
                || waiting.iter().any(|w| w.record.pid == record.pid)
            {
                continue;
            }
            waiting.push(WaitingRequest {
                liveness: Liveness::judge(record.pid, entry.beat_ms, now),
                record,
                head: false,
            });
        }
        Blockers {
            holders,
            unrecorded,
            waiting,
        }
    }
}

/// Why a permit inherited from a parent process cannot be used.
#[derive(Debug)]
pub(crate) enum InheritError {
    /// Its slots are free (the parent has released them), or held by a process that is not
    /// an ancestor of this one: the variable is a leftover of another run. The process may
    /// take permits of its own.
    Leftover(String),
    /// Its slots are held, but not through descriptors this process has: taking slots beside
    /// its ancestor's permit would break the cap, so the process takes none.
    Unusable(String),
}

/// Checks a permit inherited from a parent process (see
/// [`InheritedPermit`](crate::config::InheritedPermit)): each slot file is held, each
/// descriptor is open, is the slot file of its index in the named directory (same device and
/// inode, so neither a reused descriptor number nor a replaced file passes), and holds the
/// lock through that very description. Returns this process's own descriptors of those
/// descriptions, which keep the slots locked while it lives.
///
/// # Errors
///
/// Why the inherited permit cannot be used, completing "the inherited permit ...".
pub(crate) fn adopt_inherited(
    permit: &crate::config::InheritedPermit,
) -> Result<Vec<File>, InheritError> {
    let mut files = Vec::with_capacity(permit.slots.len());
    for slot in &permit.slots {
        let path = permit.dir.join(format!("gpu0.slot{}", slot.index));
        // Through a description of our own: held by somebody at all?
        if !is_locked_at(&path) {
            return Err(InheritError::Leftover(format!(
                "names slot file {}, which nobody holds now (its holder has released it)",
                path.display()
            )));
        }
        let held_elsewhere = |what: String| {
            // Held by a process that is not an ancestor: not this process's permit at all.
            let owner = sys::open_regular_for_reading(&path)
                .ok()
                .and_then(|f| sys::lock_owner(&f));
            // (A dead owner's lock is kept by its descendants, which may be this process's
            // ancestors: not a leftover.)
            if let Some(owner) = owner
                && sys::process_is_visible(owner)
                && sys::is_self_or_ancestor(owner) == Some(false)
            {
                return InheritError::Leftover(format!(
                    "names slot file {}, which another process holds (pid {owner}, not an \
                     ancestor of this one): a leftover of another run",
                    path.display()
                ));
            }
            InheritError::Unusable(format!(
                "names descriptor {fd} for slot file {path}, which is held now, but {what}. A \
                 process between `gpu-test-permit run` and this one closed the descriptor: \
                 keep it open for the processes that use GPUs (Python's subprocess closes \
                 descriptors unless told `pass_fds=({fd},)` or `close_fds=False`; other \
                 harnesses have a similar setting). A permit of this process's own beside its \
                 ancestor's would break the cap, so this process takes none",
                fd = slot.fd,
                path = path.display()
            ))
        };
        let file = sys::inherited_file(slot.fd, (slot.dev, slot.ino))
            .map_err(|e| held_elsewhere(format!("this process does not have it ({e})")))?;
        if !sys::same_file(&path, &file) {
            return Err(held_elsewhere(
                "that descriptor is not this slot file (removed or replaced)".into(),
            ));
        }
        // Locking it again through our descriptor converts our own lock; another
        // description's lock refuses.
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(held_elsewhere(
                    "another open file of it holds the lock, not that descriptor".into(),
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(InheritError::Unusable(format!("{}: {e}", path.display())));
            }
        }
        files.push(file);
    }
    Ok(files)
}

/// The directory in which the processes working inside `permit` share its units:
/// `gpu0.slot<first>.inside-<uid>` beside the parent's slots (private to the user that made
/// it, so one per user), where `<first>` is the permit's first slot. Only one process tree
/// holds that slot at a time, so the directory is that tree's alone while it uses it.
pub(crate) fn share_dir(permit: &crate::config::InheritedPermit) -> PathBuf {
    let first = permit.slots.iter().map(|s| s.index).min().unwrap_or(0);
    permit
        .dir
        .join(sys::per_user_name(&format!("gpu0.slot{first}.inside")))
}

/// Another user's directory for the processes inside `permit` ([`share_dir`] is one per
/// user) that is in use now, if there is one. Only one process tree holds a slot at a time,
/// so its users are inside the same permit: two such directories at once would give that
/// permit's units twice. To be checked once this process uses its own, so that of two
/// processes that start at once, at least one sees the other.
pub(crate) fn other_share_dir_in_use(permit: &crate::config::InheritedPermit) -> Option<PathBuf> {
    let own = share_dir(permit);
    let prefix = own.file_name()?.to_str()?.rsplit_once('-')?.0.to_string() + "-";
    std::fs::read_dir(&permit.dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p != &own
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
        })
        .find(|p| in_use(&p.join("gpu0.layout")))
}

/// Whether a process uses the slot directory of layout file `path` (its users hold it locked
/// shared): probed with an exclusive lock through a description of its own, given back at
/// once.
fn in_use(path: &Path) -> bool {
    let Ok(file) = sys::open_regular_for_reading(path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

/// How the processes inside `permit` lay out their shared slots: as many as the parent holds,
/// on its one GPU, for a shared permit; the parent's whole layout for an exclusive one.
pub(crate) fn share_layout(permit: &crate::config::InheritedPermit) -> Layout {
    if permit.exclusive {
        Layout {
            per_gpu: permit.per_gpu,
            gpus: permit.gpus,
        }
    } else {
        Layout {
            per_gpu: permit.slots.len(),
            gpus: 1,
        }
    }
}

/// Whether some process holds a lock on the file at `path`, probed through a description
/// opened for the purpose (false when it cannot be opened).
fn is_locked_at(path: &Path) -> bool {
    sys::open_regular_for_reading(path).is_ok_and(|f| is_locked(&f))
}

/// Whether another open file description holds a lock on `file` (probes with a shared lock).
/// Only for descriptions that hold no lock of this process: on one that does, the probe would
/// convert that lock and its unlock drop it.
fn is_locked(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

fn read_record(file: &File) -> Option<HolderRecord> {
    let buf = read_start(file, RECORD_LEN)?;
    HolderRecord::decode(&buf).ok().flatten()
}

/// The first `len` bytes of `file` (fewer if it is shorter).
fn read_start(file: &File, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let n = sys::read_at_start(file, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Settles the layout of `dir` and leaves `file` locked shared. Returns the layout in force.
/// `wanted` is written only where nobody else uses the directory, and only once
/// [`fd_budget`] allows it.
fn agree_on_layout(
    dir: &Path,
    path: &Path,
    file: &File,
    wanted: Layout,
) -> Result<Layout, HostError> {
    let give_up = Instant::now() + LAYOUT_WAIT;
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => {
                // Nobody else uses the directory: its layout is ours to set, and the memory
                // budget of its last users goes with them.
                forget_budget(dir);
                let written = fd_budget(dir, wanted)
                    .and_then(|()| sys::write_at(file, &wanted.encode(), 0).map_err(io_err(path)));
                // Not atomic: another process may set its layout in between; read it again
                // under the shared lock below.
                let _ = file.unlock();
                written?;
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_err(path)(e)),
        }
        match file.try_lock_shared() {
            Ok(()) => {
                let mut buf = vec![0u8; LAYOUT_LEN];
                let n = sys::read_at_start(file, &mut buf).map_err(io_err(path))?;
                match Layout::decode(&buf[..n]) {
                    Ok(Some(layout)) => return Ok(layout),
                    // Not written yet, by a process that failed or was killed before it
                    // wrote: the next round rewrites it if nobody else uses the directory.
                    Ok(None) => {
                        let _ = file.unlock();
                    }
                    Err(problem) => {
                        let _ = file.unlock();
                        // Only a process that finds the directory unused may rewrite it.
                        if matches!(file.try_lock(), Ok(())) {
                            let _ = file.unlock();
                            continue;
                        }
                        return Err(HostError::Directory(format!(
                            "the layout file {} of slot directory {} is corrupt ({problem}) \
                             while processes use the directory; stop them (or let them end) and \
                             the next process rewrites it, or set GPU_TEST_PERMIT_DIR to \
                             another directory",
                            path.display(),
                            dir.display()
                        )));
                    }
                }
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_err(path)(e)),
        }
        if Instant::now() >= give_up {
            return Err(HostError::Directory(format!(
                "slot directory {}: no agreed layout after {}s; another process keeps {} \
                 locked (it may be stopped while laying out the directory); resume or stop it, \
                 or set GPU_TEST_PERMIT_DIR to another directory",
                dir.display(),
                LAYOUT_WAIT.as_secs(),
                path.display()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(RECHECK);
    }
}

/// Makes sure this process may open the files of `layout` (raising the soft descriptor limit
/// where the hard one allows), before any of them is created.
fn fd_budget(dir: &Path, layout: Layout) -> Result<(), HostError> {
    let needed = layout.slots().saturating_add(FIXED_FILES);
    sys::ensure_descriptors(needed).map_err(|limits| {
        HostError::Descriptors(format!(
            "{layout} needs {needed} open files in every process using slot directory {}, but \
             this process may open only {} more (descriptor limit {}, hard limit {}); lower \
             REALIZAR_GPU_TEST_CONCURRENCY (or GPU_TEST_PERMIT_GPUS), or raise the limit \
             (`ulimit -n`, or `nofile` in /etc/security/limits.conf)",
            dir.display(),
            limits.available,
            limits.soft,
            limits.hard,
        ))
    })
}

/// Removes wait files whose process is gone (unlocked ones). The global pool of a process is
/// never dropped, so its wait file outlives it.
fn sweep_wait_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mine = format!("{WAIT_PREFIX}{}", std::process::id());
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(WAIT_PREFIX) || name == mine {
            continue;
        }
        let path = entry.path();
        let Some(file) = sys::open_regular_for_reading(&path).ok() else {
            continue;
        };
        // Removed while locked: its owner, if it comes back to life under a reused pid,
        // checks that its file is still the one at the path.
        if file.try_lock().is_ok() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// How the head of the queue of `dir`, recorded as `record`, stands; see
/// [`HostSlots::head_liveness`].
fn head_liveness(dir: &Path, record: &HolderRecord, first_seen: Option<Instant>) -> Liveness {
    let now = crate::clock::now_unix_ms();
    let beat = wait_entry(&dir.join(format!("{WAIT_PREFIX}{}", record.pid)))
        .filter(|w| w.record.pid == record.pid)
        .map(|w| w.beat_ms);
    let beat = match (beat, first_seen) {
        (Some(b), _) => b,
        (None, Some(at)) => now.saturating_sub(at.elapsed().as_millis() as u64),
        (None, None) => record.since_unix_ms,
    };
    Liveness::judge(record.pid, beat, now)
}

/// A waiting request as its wait file tells: its record and its last heartbeat.
struct WaitEntry {
    record: HolderRecord,
    /// Unix milliseconds of the last heartbeat; a file without one (written by an earlier
    /// version) counts from when the wait began.
    beat_ms: u64,
}

/// The waiting requests of live processes (locked wait files with a record in them), oldest
/// first.
fn wait_entries(dir: &Path) -> Vec<WaitEntry> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(WAIT_PREFIX)) {
            continue;
        }
        out.extend(wait_entry(&entry.path()));
    }
    out.sort_by_key(|w| w.record.since_unix_ms);
    out
}

/// The waiting request in wait file `path`, if the file is locked (its process lives) and
/// holds one.
fn wait_entry(path: &Path) -> Option<WaitEntry> {
    let file = sys::open_regular_for_reading(path).ok()?;
    // Read first: most wait files are blank (their processes wait for nothing now), and a
    // blank one needs no lock probe.
    let raw = read_start(&file, RECORD_LEN + BEAT_LEN)?;
    let record = HolderRecord::decode(&raw[..raw.len().min(RECORD_LEN)]).ok()??;
    if !is_locked(&file) {
        return None;
    }
    let beat_ms = raw
        .get(RECORD_LEN..)
        .and_then(|b| padded_text(b).ok().flatten())
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(record.since_unix_ms);
    Some(WaitEntry { record, beat_ms })
}

/// How this process waits for changes.
#[derive(Debug)]
enum Watch {
    Changes(ChangeWatch),
    /// No watch could be had: sleep in growing steps.
    Poll,
}

/// What this process keeps for the one request of it that may wait at a time (the others wait
/// for [`HostSlots::acquire_lock`]). Both parts are made on the first wait and kept: closing an
/// inotify descriptor waits for a kernel grace period (about 10 ms), which would otherwise fall
/// between a release and the waiter getting its slot.
#[derive(Debug, Default)]
struct Waiting {
    watch: Option<Watch>,
    /// Next step of the polling fallback.
    poll_step: Option<Duration>,
    /// `gpu0.wait.<pid>`, locked for the life of the process, holding the record of the
    /// request waiting now (blank while none waits), so that [`status`] can list waiters and
    /// tell a killed process's leftover (unlocked) from a live one.
    file: Option<(PathBuf, File)>,
    listed: bool,
}

impl Waiting {
    /// Writes `record` into the wait file, once per request. Diagnostics only: a waiter that
    /// cannot register still waits.
    fn list(&mut self, dir: &Path, record: &HolderRecord) {
        if self.listed {
            return;
        }
        self.listed = true;
        if self
            .file
            .as_ref()
            .is_some_and(|(path, file)| !sys::same_file(path, file))
        {
            // Swept by another process while we were not waiting (a reused pid): make anew.
            self.file = None;
        }
        if self.file.is_none() {
            let path = dir.join(format!("{WAIT_PREFIX}{}", std::process::id()));
            for _ in 0..3 {
                let Ok(file) = sys::open_lock_file(&path, sys::is_shared_dir(dir)) else {
                    return;
                };
                if file.try_lock().is_err() {
                    return;
                }
                // A sweeper may have removed the file between our open and our lock.
                if sys::same_file(&path, &file) {
                    self.file = Some((path, file));
                    break;
                }
            }
        }
        if let Some((_, file)) = &self.file {
            let _ = sys::write_at(file, &record.encode(), 0);
        }
        self.beat();
    }

    /// Renews the heartbeat of the listed request: the sign of life by which the requests
    /// behind it judge that it can still use its turn ([`Liveness`]).
    fn beat(&self) {
        if self.listed
            && let Some((_, file)) = &self.file
        {
            let now = crate::clock::now_unix_ms().to_string().into_bytes();
            let _ = sys::write_at(file, &padded(now, BEAT_LEN), RECORD_LEN as u64);
        }
    }

    /// Blanks the record once the request stops waiting.
    fn unlist(&mut self) {
        self.poll_step = None;
        if std::mem::take(&mut self.listed)
            && let Some((_, file)) = &self.file
        {
            let _ = sys::write_at(file, &[b' '; RECORD_LEN], 0);
        }
    }

    /// Waits for a change, or a re-check interval, or `deadline`, whichever comes first.
    fn wait(&mut self, deadline: Option<Instant>) {
        let step = match deadline {
            None => RECHECK,
            Some(d) => d.saturating_duration_since(Instant::now()).min(RECHECK),
        };
        match &mut self.watch {
            Some(Watch::Changes(w)) => {
                if w.wait(step).is_err() {
                    // A broken watch: poll from now on.
                    self.watch = Some(Watch::Poll);
                }
            }
            Some(Watch::Poll) | None => {
                let next = self.poll_step.unwrap_or(POLL_FIRST);
                std::thread::sleep(next.min(step));
                self.poll_step = Some((next * 2).min(RECHECK));
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some((path, _)) = &self.file {
            let _ = std::fs::remove_file(path);
        }
    }
}

const WAIT_PREFIX: &str = "gpu0.wait.";
/// Size of a wait file's heartbeat, written after its record.
const BEAT_LEN: usize = 32;
/// The memory budget the directory's current users agreed on (see
/// [`HostSlots::agree_on_budget`]): bytes per GPU, or blank.
const BUDGET_FILE: &str = "gpu0.budget";
const BUDGET_LEN: usize = 64;
/// The budgets a record may hold: a GPU with less than 1 MiB is none, and a record below it
/// (a forged `1`) would make every memory declaration fail; one above
/// [`MAX_MEMORY`](crate::config::MAX_MEMORY), 1 PiB, would count every declaration as one unit.
const BUDGETS: std::ops::RangeInclusive<u64> = (1 << 20)..=crate::config::MAX_MEMORY;
/// How long a process waits for the budget record held locked by another before it converts
/// with its own budget.
const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// The budget in a budget record: bytes, none (blank), or why it is corrupt.
fn decode_budget(raw: &[u8]) -> Result<Option<u64>, String> {
    let Some(text) = padded_text(raw)? else {
        return Ok(None);
    };
    match text.parse::<u64>() {
        Ok(b) if BUDGETS.contains(&b) => Ok(Some(b)),
        Ok(b) => Err(format!("{b} bytes {}", implausible_budget(b))),
        Err(_) => Err(format!("{text:?} is no byte count")),
    }
}

/// Why `bytes`, outside [`BUDGETS`], is no GPU's budget.
fn implausible_budget(bytes: u64) -> &'static str {
    if bytes < *BUDGETS.start() {
        "is below 1 MiB, no GPU's budget"
    } else {
        "is above 1 PiB, no GPU's budget"
    }
}

/// Blanks the budget record of a directory nobody uses (its users' budget goes with them). A
/// blank record rather than none: in a sticky shared directory only its owner could remove it.
/// Anything but a regular file at its name is left alone (without blocking on a FIFO): the
/// next process to use the directory names it.
fn forget_budget(dir: &Path) {
    let path = dir.join(BUDGET_FILE);
    if let Ok(file) = sys::open_regular_for_reading(&path) {
        drop(file);
        if let Ok(file) = sys::open_lock_file(&path, sys::is_shared_dir(dir)) {
            let _ = sys::write_at(&file, &[b' '; BUDGET_LEN], 0);
        }
    }
}

/// One slot as [`status`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotStatus {
    /// The slot's index.
    pub index: usize,
    /// Whether some process holds its lock now.
    pub held: bool,
    /// The holder's record, when held and readable.
    pub holder: Option<HolderRecord>,
    /// When held without a readable record (a process taking several slots at that moment,
    /// or stopped while it did; one whose record could not be written), the process that
    /// holds the lock, where the system tells it (`/proc/locks` on Linux).
    pub owner: Option<u32>,
    /// Whether that process is stopped (`SIGSTOP`, Ctrl-Z, a debugger): it keeps the slot
    /// until it is resumed or killed.
    pub owner_stopped: bool,
}

/// Who holds and who waits for the slots of a directory, read without taking anything.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStatus {
    /// The slot directory.
    pub dir: PathBuf,
    /// Every slot file found, by index.
    pub slots: Vec<SlotStatus>,
    /// Requests waiting for slots now, one per waiting process (the threads of one process
    /// queue inside it, behind this one).
    pub waiters: Vec<HolderRecord>,
    /// Per entry of [`waiters`](Self::waiters), whether it keeps its turn, and if not, why
    /// ([`Liveness`]): one that lost it holds nobody back.
    pub waiter_liveness: Vec<Liveness>,
    /// Files named like slot or wait files that were not read, such as a FIFO or a file this
    /// user may not open, by name.
    pub skipped: Vec<SkippedFile>,
    /// The layout the directory serves (see the [module docs](self)), if it has one.
    pub layout: Option<Layout>,
    /// The head of the cross-process queue, when a request waits at the gate.
    pub head: Option<QueueHead>,
}

/// The request at the head of the cross-process queue, as [`status`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueHead {
    /// Its record.
    pub request: HolderRecord,
    /// Its process is stopped (`SIGSTOP`, Ctrl-Z, a debugger): the requests behind it take
    /// free slots past it until it resumes.
    pub stopped: bool,
    /// Whether it keeps its turn, and if not, why ([`Liveness`]): one that lost it holds
    /// nobody back.
    pub liveness: Liveness,
}

/// A file [`status`] did not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedFile {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// Reads who holds and who waits for the slots in `dir`, without creating or taking anything.
/// A missing directory has no slots. Leftover wait records of killed processes are removed.
/// Never blocks: a FIFO, device or symbolic link named like a slot file is skipped and listed in
/// [`HostStatus::skipped`].
///
/// # Errors
///
/// When the directory exists but cannot be read.
pub fn status(dir: &Path) -> io::Result<HostStatus> {
    let mut out = HostStatus {
        dir: dir.to_path_buf(),
        slots: Vec::new(),
        waiters: Vec::new(),
        waiter_liveness: Vec::new(),
        skipped: Vec::new(),
        layout: None,
        head: None,
    };
    let mut waiting = Vec::new();
    let now = crate::clock::now_unix_ms();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let index = name
            .strip_prefix("gpu0.slot")
            .and_then(|i| i.parse::<usize>().ok());
        let waiter = name.starts_with(WAIT_PREFIX);
        if index.is_none() && !waiter {
            continue;
        }
        let mut skip = |reason: String| {
            out.skipped.push(SkippedFile {
                path: path.clone(),
                reason,
            })
        };
        let file = match sys::open_regular_for_reading(&path) {
            Ok(file) => file,
            // Removed since the listing: a waiter that stopped or a leftover cleaned up.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                skip(e.to_string());
                continue;
            }
        };
        let held = match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Error(e)) => {
                skip(format!("cannot test its lock: {e}"));
                continue;
            }
        };
        let record = || read_record(&file);
        match index {
            Some(index) => {
                let holder = if held { record() } else { None };
                let owner = if held && holder.is_none() {
                    sys::lock_owner(&file)
                } else {
                    None
                };
                out.slots.push(SlotStatus {
                    index,
                    held,
                    holder,
                    owner,
                    owner_stopped: owner.is_some_and(sys::process_is_stopped),
                })
            }
            None if held => waiting.extend(wait_entry(&path).map(|w| {
                let liveness = Liveness::judge(w.record.pid, w.beat_ms, now);
                (w.record, liveness)
            })),
            // A killed waiter's leftover.
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.slots.sort_by_key(|s| s.index);
    waiting.sort_by_key(|(w, _)| w.since_unix_ms);
    (out.waiters, out.waiter_liveness) = waiting.into_iter().unzip();
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    if let Ok(file) = sys::open_regular_for_reading(&dir.join("gpu0.layout")) {
        out.layout = read_start(&file, LAYOUT_LEN).and_then(|b| Layout::decode(&b).ok().flatten());
    }
    if let Ok(gate) = sys::open_regular_for_reading(&dir.join("gpu0.gate"))
        && is_locked(&gate)
    {
        out.head = read_record(&gate).map(|request| {
            let liveness = head_liveness(dir, &request, None);
            QueueHead {
                stopped: liveness == Liveness::Stopped,
                liveness,
                request,
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_are_padded() {
        let r = HolderRecord {
            pid: 7,
            test: "t".repeat(2000),
            thread: "main".into(),
            since_unix_ms: 5,
            exclusive: true,
            concurrency: 2,
            units: 2,
            memory: None,
        };
        let enc = r.encode();
        assert_eq!(enc.len(), RECORD_LEN);
        let back = HolderRecord::decode(&enc).unwrap().unwrap();
        assert_eq!(back.pid, 7);
        assert!(back.test.len() <= NAME_LIMIT + '…'.len_utf8());
        assert_eq!(HolderRecord::decode(&[b' '; 64]).unwrap(), None);
        assert!(HolderRecord::decode(b"{not json").is_err());
        let forged = HolderRecord {
            test: "t\x1b[2J\r\nforged \u{202e}x".into(),
            ..r
        };
        let back = HolderRecord::decode(&forged.encode()).unwrap().unwrap();
        assert_eq!(back.test, "t\\u{1b}[2J\\r\\nforged \\u{202e}x");
        assert!(HolderRecord::decode(&[0xff, 0xfe]).is_err());
    }
}
