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
//! ```
//! use gpu_test_permit::PermitPool;
//!
//! // A pool of its own slot directory: every process that names it shares its N = 2.
//! let dir = std::env::temp_dir().join(format!("gtp-doc-host-{}", std::process::id()));
//! let pool = PermitPool::builder().concurrency(2).slot_dir(&dir).build()?;
//! let permit = pool.acquire();
//! assert_eq!(permit.slots().len(), 1); // one slot file of `dir`, locked
//! # drop(permit); drop(pool); std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), gpu_test_permit::host::HostError>(())
//! ```
//!
//! # How it works
//!
//! One directory of small files; every rule below is a lock the kernel keeps, so a process
//! that dies for any reason lets go of all of it.
//!
//! | file | locked by | how, and for how long | what it holds | rules in |
//! |---|---|---|---|---|
//! | `gpu0.layout` | every process using the directory | shared, while it has the slots open; exclusive only to (re)write it when nobody else uses it | N per GPU and the GPUs | [`layout`](Layout) |
//! | `gpu0.gate` | the head of the queue | exclusive, from its first failed try to its grant | the head's record | `take_turn` below |
//! | `gpu0.slot<i>` (GPU `i % gpus`) | a holder | exclusive, while it holds the slot; all at once, or none, for a permit of several units or GPUs | the holder's record, stamped at the grant | `try_take`, `write_records` below; `fit.rs`; `slot.rs` |
//! | `gpu0.wait.<pid>` (`gpu0.wait.<pid>.<random>` where another process holds that name) | its process | exclusive, for the process's life (made and locked as `gpu0.new-wait.<pid>.<random>`, then linked into place, so never seen unlocked) | the waiting request's record and heartbeat (blank while none waits) | `queue.rs` |
//! | `gpu0.threads.<pid>.<pool>` (with `.<random>` where another process holds that name) | its process | exclusive, for the pool's life (made and locked as `gpu0.new-threads.<pid>.<pool>.<random>`, then linked into place), from the first wait of one of its threads | how many of the pool's threads wait in its in-process queue, and since when | `threads.rs` |
//! | `gpu0.backfill` (made by the first backfiller) | a request taking units past the head; a holder letting go of several slots | exclusive, while it counts, takes and writes its records; while it lets go (waiting 50 ms at most for it) | nothing | `backfill.rs`; `release` below |
//! | `gpu0.notify` | nobody | written after every release | nothing: its change wakes the waiters | `queue.rs` |
//! | `gpu0.budget` | a process reading or writing it | exclusive, for a read and perhaps a write | the memory budget its users convert with | `budget.rs` |
//! | `gpu0.slot<i>.inside-<uid>/` | the processes inside a passed-on permit | a directory like this one, as many slots as the permit | their share of the permit | `inherit.rs` |
//!
//! In order, a request of this process:
//!
//! 1. waits for its turn among this process's threads (one acquirer at a time goes through
//!    the gate, whose lock cannot tell a process's threads apart);
//! 2. tries the gate, unless it has waited already and an older waiting request of another
//!    process keeps its turn ([`Liveness`]): waiting processes are served first come first
//!    served;
//! 3. holding the gate, takes its slots at once or not at all: `u` on each of `k` GPUs of one
//!    group (a plain permit: one slot, `k` = 1), the GPUs [`fit`](Placement) picks from the
//!    free slots it counts (best fit: the fewest free that fit), passing over a GPU whose free
//!    memory (NVML, for a request that declares memory) falls short of the declaration plus
//!    what its holders declared and have not allocated; otherwise it writes its record into
//!    the gate and waits there, so that no light request takes a slot it needs;
//! 4. without the gate, takes slots only if the head has lost its turn and no older waiter
//!    keeps its own, or, behind a head that keeps its turn, where the hold times on record
//!    say that taking free units now does not delay the head (`backfill.rs`);
//! 5. lists itself in its wait file, renews its heartbeat, and sleeps until a change (inotify
//!    on the slot files, the gate and `gpu0.notify`) or 25 ms, then goes back to 2;
//! 6. once granted, leaves the list, lets go of the gate and writes its record into its slots:
//!    a change to files every waiter watches, which wakes them.
//!
//! Only the order among waiters is judged from records; the cap is the slot locks themselves,
//! so no record, forged or stale, can put more than N holders on a GPU. What keeps the cap
//! (who may share a lock's open file description, who may ever unlock one, when a directory
//! counts as unused, what "cannot tell" means) is written down, with the code and the tests
//! of each rule, in `docs/protocol.md`: a held slot whose description another process may
//! share is let go by closing this process's copy of it, never by unlocking it (`slot.rs`),
//! and a child forked without `exec` neither takes slots nor lets go of any
//! (`HostSlots::forked`). A process needs one
//! descriptor per slot plus five; the soft descriptor limit is raised (up to the hard one) where
//! that is not enough, and a layout that cannot fit is refused before any file is created. The
//! process that lays the directory out makes every slot file; each process opens a slot's file
//! at the slot's first use (making it, should it be missing), with a descriptor kept in reserve
//! for it until then (`slot.rs`).

mod backfill;
mod budget;
mod error;
mod fit;
mod inherit;
mod layout;
mod lock;
mod queue;
pub(crate) mod record;
mod slot;
#[cfg(any(test, feature = "__cli"))]
pub(crate) mod status;
pub(crate) mod tests_file;
pub(crate) mod threads;

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::sys::{self, ChangeWatch};

pub use error::HostError;
pub use fit::Placement;

/// What a permit that declares memory needs free on its GPU beside its declaration, where
/// NVML tells the free memory (`GPU_TEST_PERMIT_LIVE_MEMORY`): a new test process's CUDA
/// context (300 to 500 MiB on current GPUs and drivers) and some slack, bytes.
///
/// ```
/// use gpu_test_permit::host::LIVE_MARGIN;
///
/// // A test that declares 4 GiB waits, where NVML tells, until its GPU has this much free.
/// let declared: u64 = 4 << 30;
/// let needed = declared + LIVE_MARGIN;
/// assert!(needed > declared);
/// ```
pub const LIVE_MARGIN: u64 = crate::live::MARGIN;
pub(crate) use fit::Topology;
pub(crate) use inherit::{
    InheritError, adopt_inherited, let_other_users_probe, other_share_dir_in_use, outermost_dir,
    share_dir, share_layout,
};
pub use layout::Layout;
pub(crate) use queue::GRACE;
pub use queue::Liveness;
pub(crate) use record::HolderRecord;
#[cfg(any(test, feature = "__cli"))]
pub(crate) use record::escape_controls;
#[cfg(test)]
pub(crate) use status::status;
pub(crate) use threads::ThreadsFile;

use error::io_err;
pub(crate) use layout::WantedLayout;
use layout::{Agreed, agree_on_layout, fd_budget, peek};
use lock::is_locked_at;
use queue::{RECHECK, Waiting, Watch, head_liveness, read_head, wait_entries};
use record::{read_decoded, read_record};
use slot::Slots;

/// The slot files of one directory, for one process: the gate and notify files opened once,
/// each slot at its first use (`slot.rs`).
#[derive(Debug)]
pub(crate) struct HostSlots {
    dir: PathBuf,
    layout: Layout,
    /// Who may have written the layout: a layout another user may have set is never a
    /// reason for this process to hold more than it asked for ([`HostSlots::declined`]).
    writer: sys::Writer,
    /// The layout this process asked for (for `auto`, its own choice).
    asked: Layout,
    /// Locked shared for the life of this value: the layout is in use.
    _layout_file: File,
    gate_path: PathBuf,
    gate: File,
    notify_path: PathBuf,
    notify: File,
    slots: Slots,
    /// One acquirer of this process at a time goes through the gate (the gate's lock belongs to
    /// the shared open file, so it cannot tell our threads apart).
    acquire_lock: parking_lot::Mutex<Waiting>,
    warned_corrupt: AtomicBool,
    /// Why the last attempt found no GPU with the memory it declared free (NVML), if it did.
    held_back: parking_lot::Mutex<Option<String>>,
    /// Whether this process said that NVML stopped answering.
    said_stuck: AtomicBool,
    /// `gpu0.backfill`, opened (made, should it be missing) at the first request that may
    /// backfill, or at a release of several slots once a backfiller has made it (`None`: it
    /// cannot be). Its lock belongs to the open file, which this process's threads share: the
    /// mutex keeps a releasing thread from unlocking what a backfilling one holds.
    backfill_file: OnceLock<Option<parking_lot::Mutex<File>>>,
    /// When a release of several slots last found `gpu0.backfill` missing (no request has
    /// backfilled in the directory): it looks again [`backfill::MISSING_RECHECK`] later.
    backfill_missing: parking_lot::Mutex<Option<Instant>>,
    /// The tests' hold times on record, read at the first request that may backfill.
    hold_times: OnceLock<backfill::HoldTimes>,
    /// The process that opened the slots. A child forked from it without `exec` shares its
    /// open file descriptions, and with them their locks: it neither takes slots nor lets go
    /// of the parent's ([`HostSlots::forked`]).
    pid: u32,
}

/// A slot directory whose layout file is open, halfway through [`HostSlots::open`].
struct Opening {
    layout_path: PathBuf,
    layout_file: File,
    /// Whether this process may write the layout file (another user's is read only).
    writable: bool,
    /// Who may have written the layout file.
    writer: sys::Writer,
    /// Whether the directory is shared by several users (the mode new files get).
    shared: bool,
}

/// Opens (creating if needed) lock file `name` of `dir`. Out of descriptors (more open than
/// the budget's uncounted spare), opening counts them, raises the soft limit where the hard one
/// allows and tries again, or says how many `layout` needs and the limits, as a layout refused
/// up front would.
fn open_file(
    dir: &Path,
    name: &str,
    layout: Layout,
    shared: bool,
) -> Result<(PathBuf, File), HostError> {
    let path = dir.join(name);
    let file = slot::open_counted(dir, layout, &path, shared)?;
    Ok((path, file))
}

/// What a process configured with `own` keeps of it in a directory laid out as `layout` by
/// `writer` ([`HostSlots::declined`]).
fn declined(layout: Layout, own: Layout, writer: sys::Writer) -> Option<Layout> {
    if writer == sys::Writer::ThisUser || (layout.per_gpu <= own.per_gpu && layout.gpus <= own.gpus)
    {
        return None;
    }
    Some(Layout {
        per_gpu: own.per_gpu.min(layout.per_gpu),
        gpus: own.gpus.min(layout.gpus),
    })
}

/// The line said where this process uses a layout other than the one it asked for: who set
/// it, and what this process does with it.
fn layout_notice(dir: &Path, layout: Layout, wanted: Layout, writer: sys::Writer) -> String {
    let var = crate::config::Config::global().concurrency_var;
    let who = match writer {
        sys::Writer::ThisUser => "set by a process of this user".to_string(),
        sys::Writer::User(uid) => format!("set by uid {uid}, the owner of its layout file"),
        sys::Writer::Others { owner } => format!(
            "its layout file, owned by uid {owner}, may be written by other users, so anyone \
             may have set it"
        ),
        sys::Writer::Unknown => "its layout file's owner cannot be told".to_string(),
    };
    match declined(layout, wanted, writer) {
        None => format!(
            "slot directory {} serves {layout} ({who}); this process asked for {wanted} and \
             uses the directory's layout, so that the cap holds. Give every process that \
             shares the directory the same {var} and GPU_TEST_PERMIT_GPUS, or a \
             GPU_TEST_PERMIT_DIR of its own",
            dir.display(),
        ),
        Some(kept) => format!(
            "slot directory {} serves {layout} ({who}); this process asked for {wanted} and \
             declines to hold more: it takes permits only while at most {} unit(s) of a GPU \
             are held, on its first {} GPU(s) (each of its permits also holds the directory's \
             {} other unit(s) of its GPU). Use a GPU_TEST_PERMIT_DIR of this user's own to \
             run with more",
            dir.display(),
            kept.per_gpu,
            kept.gpus,
            layout.per_gpu - kept.per_gpu,
        ),
    }
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

/// What a request's turn at the gate has done so far, from one try of `take_turn` to the next.
#[derive(Debug, Default)]
struct Turn {
    /// It holds the gate: it heads the queue.
    gate: bool,
    /// Its record is in the gate (blanked when it lets go of the gate).
    gate_recorded: bool,
    /// When it last beat the gate.
    gate_beat: Option<Instant>,
    /// It said that it waits for GPU memory (once a wait).
    said_memory: bool,
    /// The head as last seen, and since when ([`HostSlots::head_lost_turn`]).
    head_seen: Option<(Option<HolderRecord>, Instant)>,
    /// Its hold time on record, once looked up: `Some(None)` where it has none.
    own_hold: Option<Option<u64>>,
    /// It took its slots past the head by backfilling (its records are written).
    backfilled: bool,
}

/// Where a request stands in the queue at one try of `take_turn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// It holds the gate.
    Head,
    /// The head has lost its turn, and no older waiter keeps its own: it takes slots past it.
    PastHead,
    /// Behind a head that keeps its turn, or letting an older waiter go first: it may only
    /// backfill.
    Behind,
}

/// What a request takes: units on each of some GPUs, or every slot; and where it may go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Take<'a> {
    /// Slots on each GPU.
    pub(crate) units: usize,
    /// GPUs, distinct, all in one group of `topology`.
    pub(crate) gpus: usize,
    /// Every slot of every GPU (`units` and `gpus` are then ignored).
    pub(crate) exclusive: bool,
    pub(crate) topology: &'a Topology,
    pub(crate) placement: Placement,
    /// Declared memory on each GPU, bytes, to find free now (NVML) before taking a GPU, with
    /// the CUDA ordinal of each GPU (by device); `None`: the declaration counts against the
    /// budget alone.
    pub(crate) live: Option<(u64, &'a [usize])>,
    /// Whether it may take free units past a waiting head where the hold times on record say
    /// that does not delay the head ([`backfill`]).
    pub(crate) backfill: bool,
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
    /// Why this process's request found no GPU with the memory it declared free (NVML), if
    /// that held it back.
    pub(crate) memory: Option<String>,
}

/// The outcome of a wait that did not get its slots.
#[derive(Debug)]
pub(crate) enum HostWaitError {
    /// The deadline passed; [`HostSlots::blockers`] tells who is in the way.
    TimedOut,
    Failed(HostError),
}

impl From<HostError> for HostWaitError {
    fn from(e: HostError) -> HostWaitError {
        HostWaitError::Failed(e)
    }
}

impl HostSlots {
    /// Opens (creating if needed) the slots of `dir` for `wanted`, checking the directory
    /// first. The slots opened follow the directory's recorded layout, which is `wanted` unless
    /// another process using the directory set a different one (see [`HostSlots::layout`]).
    /// Waits for the directory's layout at most `patience` (see `agree_on_layout`).
    pub(crate) fn open(
        dir: &Path,
        wanted: Layout,
        patience: std::time::Duration,
    ) -> Result<HostSlots, HostError> {
        let opening = HostSlots::begin_open(dir, wanted)?;
        Ok(HostSlots::finish_open(dir, opening, WantedLayout::Fixed(wanted), patience)?.0)
    }

    /// Opens the slots of `dir` with the N `auto` chooses for the run whose key (a safe file
    /// name, at most 100 bytes) is `run`: adopted from the directory where a process of the
    /// run chose already, else `choose()` (called before any lock is taken: it may probe the
    /// GPU). Returns the slots, and the layout this process chose and wrote, if it did.
    pub(crate) fn open_auto(
        dir: &Path,
        gpus: usize,
        run: &str,
        choose: impl FnOnce() -> usize,
        patience: std::time::Duration,
    ) -> Result<(HostSlots, Option<Layout>), HostError> {
        // Until the directory says more, the seed is what the descriptors are counted for.
        let seed = Layout {
            per_gpu: crate::config::DEFAULT_CONCURRENCY,
            gpus,
        };
        let opening = HostSlots::begin_open(dir, seed)?;
        // A choice another user may have written is no choice of this run's: this process
        // chooses its own, which bounds what it adopts (`declined`).
        let theirs_trusted = opening.writer == sys::Writer::ThisUser;
        let layout = match peek(&opening.layout_file) {
            Some((layout, Some(theirs))) if theirs == run && theirs_trusted => layout,
            _ => Layout {
                per_gpu: choose(),
                gpus,
            },
        };
        let want = WantedLayout::Auto { layout, run };
        let (host, chose) = HostSlots::finish_open(dir, opening, want, patience)?;
        let layout = if chose { Some(host.layout) } else { None };
        Ok((host, layout))
    }

    /// Checks `dir` and opens its layout file, the first half of opening the slots: the
    /// caller then decides what it wants, where that depends on the recorded layout (see
    /// [`peek`]), and [`finish_open`](Self::finish_open) opens the rest. `expected` is what
    /// the descriptors are counted for until then.
    fn begin_open(dir: &Path, expected: Layout) -> Result<Opening, HostError> {
        // Where the layout file is there already (a directory used before), opening it
        // read-write below tests what the write test would.
        let used_before = match std::fs::symlink_metadata(dir.join("gpu0.layout")) {
            Ok(m) => m.file_type().is_file(),
            Err(_) => false,
        };
        let meta = match sys::prepare_dir_with(dir, !used_before) {
            Ok(meta) => meta,
            Err(e) => return Err(HostError::Directory(e)),
        };
        let shared = sys::is_shared_dir_meta(&meta);
        // Only its owner may write the layout: what another user may write can raise nobody's
        // N (docs/protocol.md, "Who may write what").
        let layout_path = dir.join("gpu0.layout");
        let (layout_file, writable, writer) =
            slot::open_owner_counted(dir, expected, &layout_path, shared)?;
        Ok(Opening {
            layout_path,
            layout_file,
            writable,
            writer,
            shared,
        })
    }

    /// Opens the slots of `dir` for what `want` asks, once [`begin_open`](Self::begin_open)
    /// has opened the layout file. Returns the slots, and whether this process wrote `want`'s
    /// `auto` choice.
    fn finish_open(
        dir: &Path,
        opening: Opening,
        want: WantedLayout<'_>,
        patience: std::time::Duration,
    ) -> Result<(HostSlots, bool), HostError> {
        let Opening {
            layout_path,
            layout_file,
            writable,
            writer,
            shared,
        } = opening;
        // The descriptor budget is checked before any slot file is made: a layout that cannot
        // be opened must leave nothing behind.
        let Agreed {
            layout,
            chose,
            wrote,
        } = agree_on_layout(dir, &layout_path, &layout_file, writable, want, patience)?;
        fd_budget(dir, layout)?;
        let wanted = want.layout();
        if layout != wanted
            && (matches!(want, WantedLayout::Fixed(_)) || writer != sys::Writer::ThisUser)
        {
            crate::notice::line(&layout_notice(dir, layout, wanted, writer));
        }
        let (gate_path, gate) = open_file(dir, "gpu0.gate", layout, shared)?;
        if wrote {
            // The head's record and heartbeat, while the disk has room for them.
            let _ = sys::reserve(&gate, queue::RECORD_AND_BEAT);
        }
        let (notify_path, notify) = open_file(dir, "gpu0.notify", layout, shared)?;
        let slots = Slots::new(dir, layout, shared, &layout_file)?;
        if wrote {
            // Whoever lays the directory out makes every slot file of it, so that they are
            // its user's, as the layout file is: in a directory shared through a group, a file
            // another member made may be closed to an owner outside the group. The others
            // open a slot's file at its first use.
            slots.make_every();
        }
        let host = HostSlots {
            dir: dir.to_path_buf(),
            layout,
            writer,
            asked: wanted,
            _layout_file: layout_file,
            gate_path,
            gate,
            notify_path,
            notify,
            slots,
            acquire_lock: parking_lot::Mutex::new(Waiting::default()),
            warned_corrupt: AtomicBool::new(false),
            held_back: parking_lot::Mutex::new(None),
            said_stuck: AtomicBool::new(false),
            backfill_file: OnceLock::new(),
            backfill_missing: parking_lot::Mutex::new(None),
            hold_times: OnceLock::new(),
            pid: sys::pid(),
        };
        Ok((host, chose))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The layout the slots follow: the directory's, which may differ from the one asked for.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// What this process keeps of the layout it asked for, in a directory laid out by another
    /// user (or by anyone: its layout file writable by others) with more permits per GPU or
    /// more GPUs: the layout asked for, clipped to the directory's, whose N and GPUs its
    /// requests then hold to; `None` where it adopts the directory's layout as it is (this
    /// user's, or one that raises nothing). A layout another user wrote is never a reason to
    /// hold more than this process's own N allows.
    pub(crate) fn declined(&self) -> Option<Layout> {
        declined(self.layout, self.asked, self.writer)
    }

    /// The open file of slot `index`, whose description holds the slot's lock while this
    /// process holds the slot (for passing a held permit on to a command).
    pub(crate) fn slot_file(&self, index: usize) -> &File {
        let slot = &self.slots[index];
        // Another process will share its description: it is let go, never unlocked.
        slot.pass_on();
        slot.opened()
            .expect("a slot this process holds was opened to lock it")
    }

    /// Whether this process is a child forked (without `exec`) from the one that opened the
    /// slots. It shares the parent's open file descriptions: `flock` would grant it a lock the
    /// parent holds through one of them, and an unlock through its copy would end the
    /// parent's. So it takes no slots (its requests fail with [`HostError::Forked`]) and lets
    /// go of none: the parent's permits that it drops stay held through its copies of their
    /// descriptions until it exits, because whatever it started on the GPU is inside them.
    pub(crate) fn forked(&self) -> bool {
        sys::pid() != self.pid
    }

    /// Takes `take.units` slots on each of `take.gpus` GPUs (every slot when
    /// `take.exclusive`), waiting until `deadline`. Returns the slot indices, and whether they
    /// were taken past a waiting head (backfilled).
    pub(crate) fn acquire(
        &self,
        take: &Take<'_>,
        deadline: Option<Instant>,
        record: &HolderRecord,
    ) -> Result<(Vec<usize>, bool), HostWaitError> {
        if self.forked() {
            return Err(HostWaitError::Failed(HostError::Forked(format!(
                "this process (pid {}) was forked without exec from pid {}, which opened the \
                 slots of {}; it shares that process's open files and their locks, so it takes \
                 no permit of its own. Take permits in a process started with exec \
                 (std::process::Command), or take the permit before fork and use it in the \
                 child: a permit held when the child was forked stays held until both have \
                 let go of it",
                sys::pid(),
                self.pid,
                self.dir.display()
            ))));
        }
        let mut turn = match deadline {
            None => self.acquire_lock.lock(),
            Some(d) => match self.acquire_lock.try_lock_until(d) {
                Some(g) => g,
                None => return Err(HostWaitError::TimedOut),
            },
        };
        // Off the waiting list when it returns (see the end of `take_turn`).
        self.take_turn(take, deadline, record, &mut turn)
    }

    /// One request's turn at the gate (steps 2 to 6 of the [module docs](self)).
    ///
    /// The gate makes a multi-slot request safe: it takes its k slots all at once or none (it
    /// never sits on some while waiting for the rest), and once it holds the gate nobody else
    /// takes a slot, so light requests cannot starve it and two heavy requests cannot
    /// deadlock; light requests take the slots a heavy holder leaves free. (Byte-range locks on
    /// one file, a byte a unit, would take k units in one call, but only open-file-description
    /// locks die with the description rather than with any close in the process, and those
    /// are Linux's alone; whole-file locks under the gate give the same all-or-none wherever
    /// `flock` or `LockFileEx` exists.)
    fn take_turn(
        &self,
        take: &Take<'_>,
        deadline: Option<Instant>,
        record: &HolderRecord,
        waiting: &mut Waiting,
    ) -> Result<(Vec<usize>, bool), HostWaitError> {
        let mut turn = Turn::default();
        let result = loop {
            match self.try_in_turn(&mut turn, take, record, waiting) {
                Ok(Some(got)) => break Ok(got),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            if let Some(d) = deadline
                && Instant::now() >= d
            {
                break Err(HostWaitError::TimedOut);
            }
            if turn.gate {
                self.keep_gate(&mut turn, record);
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
        self.end_turn(&turn, result, record, waiting)
    }

    /// One try of `take_turn` (steps 2 to 4): the slots, where it found its place in the queue
    /// lets it take them and they are free.
    fn try_in_turn(
        &self,
        turn: &mut Turn,
        take: &Take<'_>,
        record: &HolderRecord,
        waiting: &Waiting,
    ) -> Result<Option<Vec<usize>>, HostWaitError> {
        match self.place_in_queue(turn, record, waiting)? {
            Place::Head | Place::PastHead => self.take_as_head(turn, take),
            Place::Behind => self.backfill_behind(turn, take, record),
        }
    }

    /// Where the request stands now (steps 2 and 4): at the head, holding the gate (taken now
    /// where it is free and no older waiter goes first), past a head that has lost its turn,
    /// or behind.
    fn place_in_queue(
        &self,
        turn: &mut Turn,
        record: &HolderRecord,
        waiting: &Waiting,
    ) -> Result<Place, HostWaitError> {
        // Once waiting, a request lets an older waiting request of another process that keeps
        // its turn go first: the waiters woken by a release would otherwise race for the
        // gate. (A new request tries at once: reading the waiters on every acquisition would
        // cost the uncontended path a directory scan.)
        let defer = !turn.gate && waiting.listed && self.older_waiter_first(record);
        if !turn.gate && !defer {
            match self.gate.try_lock() {
                Ok(()) => turn.gate = true,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => {
                    return Err(HostWaitError::Failed(io_err(&self.gate_path, e)));
                }
            }
        }
        if turn.gate {
            return Ok(Place::Head);
        }
        // When the head has lost its turn, the oldest waiter that keeps its own takes the
        // slots past it, with the head's protection: a newer request, even one that has just
        // arrived, lets it go first.
        if !defer && self.head_lost_turn(&mut turn.head_seen) {
            let older_first = !waiting.listed && self.older_waiter_first(record);
            if !older_first {
                return Ok(Place::PastHead);
            }
        }
        Ok(Place::Behind)
    }

    /// Takes the slots where they are free (step 3), for the head or a request past a head
    /// that lost its turn; says once a wait when memory, not slots, holds it back.
    fn take_as_head(
        &self,
        turn: &mut Turn,
        take: &Take<'_>,
    ) -> Result<Option<Vec<usize>>, HostWaitError> {
        if let Some(got) = self.try_take(take)? {
            return Ok(Some(got));
        }
        if take.live.is_some()
            && !turn.said_memory
            && let Some(why) = self.held_back_by_memory()
        {
            // Once a wait: memory that processes without a permit hold frees when they say,
            // not when a permit is returned.
            turn.said_memory = true;
            crate::notice::line(&format!(
                "waiting for GPU memory (GPU_TEST_PERMIT_LIVE_MEMORY=off counts declarations \
                 against the budget alone): {why}"
            ));
        }
        Ok(None)
    }

    /// Behind a head that keeps its turn (step 4): free units it cannot use yet, where the
    /// hold times on record say taking them does not delay it.
    fn backfill_behind(
        &self,
        turn: &mut Turn,
        take: &Take<'_>,
        record: &HolderRecord,
    ) -> Result<Option<Vec<usize>>, HostWaitError> {
        if !self.may_backfill(take) {
            return Ok(None);
        }
        let own_hold = match turn.own_hold {
            Some(hold) => hold,
            None => {
                let hold = self.hold_time(record);
                turn.own_hold = Some(hold);
                hold
            }
        };
        let Some(hold) = own_hold else {
            return Ok(None);
        };
        let got = self.try_backfill(take, record, hold)?;
        turn.backfilled = got.is_some();
        Ok(got)
    }

    /// The head's record in the gate and its heartbeat beside it (step 3), while it waits
    /// there.
    fn keep_gate(&self, turn: &mut Turn, record: &HolderRecord) {
        if !turn.gate_recorded {
            // Who heads the queue, for the others to judge whether it can still take its
            // turn, and for diagnostics, with its first heartbeat in the same write (each
            // write to the gate wakes every waiter). The space was reserved when the gate
            // was made (here too, for a gate an earlier version made), so that a full disk
            // does not silence the head.
            let _ = sys::reserve(&self.gate, queue::RECORD_AND_BEAT);
            let mut head = record.encode();
            head.extend_from_slice(&queue::beat_now());
            turn.gate_recorded = sys::write_at(&self.gate, &head, 0).is_ok();
            if turn.gate_recorded {
                turn.gate_beat = Some(Instant::now());
            }
        }
        let beat_due = match turn.gate_beat {
            Some(at) => at.elapsed() >= queue::GATE_BEAT,
            None => true,
        };
        if beat_due {
            // The head's sign of life, beside its record (its wait file's may not have found
            // space). Now and then only: every waiter watches the gate, the head included,
            // and each write wakes them all.
            Waiting::beat_gate(&self.gate);
            turn.gate_beat = Some(Instant::now());
        }
    }

    /// The end of `take_turn` (step 6): off the list, the gate let go, the records written,
    /// and whoever waits woken.
    fn end_turn(
        &self,
        turn: &Turn,
        result: Result<Vec<usize>, HostWaitError>,
        record: &HolderRecord,
        waiting: &mut Waiting,
    ) -> Result<(Vec<usize>, bool), HostWaitError> {
        // Off the list before anyone is woken: a waiter that finds this request still listed
        // would let it go first and wait for the next change.
        let was_listed = waiting.listed;
        waiting.unlist();
        // A grant through the gate that declares memory writes its records before it lets go
        // of the gate: the next head weighs the memory its GPU's holders declared, and must
        // find this one's declaration there (the others write theirs after, see below).
        let recorded_under_gate = turn.gate && record.memory.is_some() && result.is_ok();
        if recorded_under_gate && let Ok(got) = &result {
            self.write_records(got, record);
        }
        if turn.gate {
            if turn.gate_recorded {
                let _ = sys::write_at(&self.gate, &[b' '; queue::RECORD_AND_BEAT as usize], 0);
            }
            if let Err(e) = self.gate.unlock() {
                if let Ok(got) = &result {
                    let _ = self.release(got);
                }
                return Err(HostWaitError::Failed(io_err(&self.gate_path, e)));
            }
        }
        match &result {
            // Written under the gate: wake whoever waits for it now that it is free.
            Ok(_) if recorded_under_gate => self.notify(),
            // Written while it held the backfill lock.
            Ok(_) if turn.backfilled => {}
            // The holder's records, written now that the gate is free and this request off the
            // list: each write is a change to a slot file every waiter watches, so it also
            // wakes whoever waits for the gate or let this request go first.
            Ok(got) => self.write_records(got, record),
            // Wake whoever waits for the gate, or let this request go first.
            Err(_) if turn.gate || was_listed => self.notify(),
            Err(_) => {}
        }
        match result {
            Ok(got) => Ok((got, turn.backfilled)),
            Err(e) => Err(e),
        }
    }

    /// Writes the holder's record into each of its slots, stamped with the grant: a holder's
    /// record tells how long it has held its slots, not how long it waited for them.
    fn write_records(&self, got: &[usize], record: &HolderRecord) {
        let (since_boot_ms, boot_id) = match crate::clock::boot_now() {
            Some(boot) => (Some(boot.ms), boot.boot_id.map(str::to_string)),
            None => (None, None),
        };
        let granted = HolderRecord {
            since_unix_ms: crate::clock::now_unix_ms(),
            since_boot_ms,
            boot_id,
            ..record.clone()
        };
        let bytes = granted.encode();
        let mut written = false;
        for &i in got {
            // A record is diagnostics only; failing to write one must not fail the test.
            if let Some(file) = self.slots[i].opened() {
                written |= sys::write_at(file, &bytes, 0).is_ok();
            }
        }
        if !written {
            // No record, no change to wake the waiters with (a full disk): wake them anyway.
            self.notify();
        }
    }

    /// Whether `take` is a request that may backfill: asked for, units on one GPU (not
    /// exclusive).
    fn may_backfill(&self, take: &Take<'_>) -> bool {
        take.backfill && !take.exclusive && take.gpus == 1
    }

    /// The hold time on record of the test `record` names, milliseconds; the history is read
    /// once per directory, at the first request of this process that may backfill.
    fn hold_time(&self, record: &HolderRecord) -> Option<u64> {
        self.hold_times
            .get_or_init(|| backfill::HoldTimes::read(&self.dir))
            .of(record.binary.as_deref(), &record.test)
    }

    /// Takes `take`'s units now, past the head of the queue, if [`backfill::decide`] allows it
    /// for a request whose hold time on record is `hold` ms; the records are written before
    /// the next backfiller may decide. `None`: not now (no head that keeps its turn, not
    /// allowed, the units taken meanwhile, or another backfiller deciding).
    fn try_backfill(
        &self,
        take: &Take<'_>,
        record: &HolderRecord,
        hold: u64,
    ) -> Result<Option<Vec<usize>>, HostError> {
        // The head as the gate records it; held by a live process (the caller saw that it
        // keeps its turn).
        let Some((head, _)) = self.other_head() else {
            return Ok(None);
        };
        let gpus = self.layout.gpus;
        let every = [(0..gpus).collect::<Vec<usize>>()];
        let needs = if head.exclusive {
            backfill::HeadNeeds {
                units: self.layout.per_gpu,
                gpus,
                groups: &every,
            }
        } else {
            let k = head.gpus.clamp(1, gpus);
            backfill::HeadNeeds {
                units: head.units.div_ceil(k),
                gpus: k,
                groups: take.topology.groups(),
            }
        };
        let Some(lock) = self.backfill_lock_file() else {
            return Ok(None);
        };
        let lock = lock.lock();
        match lock.try_lock() {
            Ok(()) => {}
            // Another backfiller is deciding; its records wake this request.
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(_)) => return Ok(None),
        }
        let result = (|| {
            // The units as the holders' records tell: blank is free, a record is held until its
            // expected end, a record that cannot be read is held for a time unknown. A record
            // whose process is gone (killed: its record stays) counts as blank. Grant times are
            // read on the boot clock; one that cannot be placed on it is not known.
            let clock = backfill::Clock::now();
            let now = clock.ms();
            let mut units = Vec::with_capacity(gpus);
            for _ in 0..gpus {
                units.push(backfill::GpuUnits::default());
            }
            let mut blank = Vec::new();
            for i in 0..self.slots.len() {
                let gpu = &mut units[i % gpus];
                let read = match self.slots.file_now(i) {
                    Ok(file) => read_decoded(file),
                    Err(_) => None,
                };
                match read {
                    Some(Ok(None)) => {
                        gpu.free += 1;
                        blank.push(i);
                    }
                    Some(Ok(Some(r))) if r.pid != self.pid && !sys::process_is_visible(r.pid) => {
                        gpu.free += 1;
                        blank.push(i);
                    }
                    Some(Ok(Some(r))) => gpu.ends.push(backfill::expected_end(
                        clock.granted(&r),
                        self.hold_time(&r),
                        now,
                    )),
                    Some(Err(_)) | None => gpu.ends.push(None),
                }
            }
            // Locks are probed only where the records allow it, so that a head that can start
            // now never finds a slot it needs locked for a moment by this count.
            if backfill::decide(now, &needs, &units, take.units, hold).is_none() {
                return Ok(None);
            }
            // A blank slot may be held still: by a holder between its grant and its record
            // (stopped there, say), one whose record could not be written, or one of another
            // PID namespace. It counts as held for a time unknown.
            for &i in &blank {
                // A lock that cannot be probed has told nothing: held (docs/protocol.md, 7).
                if let Ok(true) = self.slots.lock(i) {
                    self.slots.unlock_unrecorded(&[i]);
                } else {
                    let gpu = &mut units[i % gpus];
                    gpu.free -= 1;
                    gpu.ends.push(None);
                }
            }
            if backfill::decide(now, &needs, &units, take.units, hold).is_none() {
                return Ok(None);
            }
            let got = self.try_take(take)?;
            if let Some(got) = &got {
                self.write_records(got, record);
            }
            Ok(got)
        })();
        let _ = lock.unlock();
        result
    }

    /// Takes the slots `take` asks for now, all of them or none: every slot for an exclusive
    /// request; else `take.units` slots on each of `take.gpus` GPUs of one group, the GPUs
    /// [`fit::place`] picks from the free units it finds.
    ///
    /// The slots are locked one by one and given back unless all of them are had; a process
    /// stopped in those microseconds keeps the ones it locked, as a stopped holder keeps its
    /// permit, until it resumes or dies. Records are written only once all are taken, and only
    /// after the gate is let go (a record written and blanked on every failed attempt would wake
    /// every waiter that watches the slots, this one included), so such slots are locked
    /// without a record for a moment: a wait that times out and [`status`] name their owner
    /// from `/proc/locks` on Linux.
    fn try_take(&self, take: &Take<'_>) -> Result<Option<Vec<usize>>, HostError> {
        let gpus = self.layout.gpus;
        if take.exclusive {
            return self.slots.take_in_order(self.slots.len(), 1);
        }
        let live = take.live.is_some();
        if gpus == 1 && !live {
            return self.slots.take_in_order(take.units, 1);
        }
        if take.gpus == 1 && take.placement == Placement::Spread && take.topology.is_flat() && !live
        {
            // The lowest free slot for one unit; else the first GPU with enough.
            let step = if take.units == 1 { 1 } else { gpus };
            return self.slots.take_in_order(take.units, step);
        }
        // Every slot's state, to place the request. A free slot is locked and let go at once:
        // a process stopped while it probes keeps one slot at most, not every free one (the
        // requests behind a stopped head take free slots past it). Under the gate nobody else
        // takes slots meanwhile, but for such a request: should one of the slots chosen be
        // taken when this one locks it, the request tries again at the next change.
        if live {
            *self.held_back.lock() = None;
        }
        // GPU by GPU, in the groups' order: for one GPU, best fit stops at a GPU with exactly
        // the units asked for free (none fits more tightly), and probes no further.
        let mut free: Vec<Vec<usize>> = Vec::with_capacity(gpus);
        for _ in 0..gpus {
            free.push(Vec::new());
        }
        let mut perfect = None;
        'probe: for group in take.topology.groups() {
            for &gpu in group {
                for i in (gpu..self.slots.len()).step_by(gpus) {
                    if self.slots.lock(i)? {
                        self.slots.unlock_unrecorded(&[i]);
                        free[gpu].push(i);
                    }
                }
                // A GPU whose memory is short now counts as full.
                if free[gpu].len() >= take.units && !self.has_room(gpu, &free[gpu], take) {
                    free[gpu].clear();
                }
                if take.gpus == 1
                    && take.placement == Placement::BestFit
                    && free[gpu].len() == take.units
                {
                    perfect = Some(vec![gpu]);
                    break 'probe;
                }
            }
        }
        let chosen = match perfect {
            Some(chosen) => chosen,
            None => {
                let mut counts = Vec::with_capacity(free.len());
                for f in &free {
                    counts.push(f.len());
                }
                let placed = fit::place(
                    &counts,
                    take.units,
                    take.gpus,
                    take.topology,
                    take.placement,
                );
                let Some(chosen) = placed else {
                    return Ok(None);
                };
                chosen
            }
        };
        let mut got = Vec::with_capacity(take.units * take.gpus);
        for &gpu in &chosen {
            for &i in &free[gpu][..take.units] {
                match self.slots.lock(i) {
                    Ok(true) => got.push(i),
                    Ok(false) => {
                        self.slots.unlock_unrecorded(&got);
                        return Ok(None);
                    }
                    Err(e) => {
                        self.slots.unlock_unrecorded(&got);
                        return Err(e);
                    }
                }
            }
        }
        crate::order::sort(&mut got);
        if live {
            // A GPU passed over for memory does not hold this request back.
            *self.held_back.lock() = None;
        }
        // The records are written by the caller, once the gate is free (`write_records`).
        Ok(Some(got))
    }

    /// Whether `gpu`, whose free slots are `free`, has the memory `take` declares free now as
    /// NVML reports it, less what the holders of its other slots declared and have not yet
    /// allocated, plus [`live::MARGIN`](crate::live::MARGIN). Without NVML (or a request that
    /// declares none), yes. When not, the reason is kept for the wait to tell.
    fn has_room(&self, gpu: usize, free: &[usize], take: &Take<'_>) -> bool {
        let Some((want, ordinals)) = take.live else {
            return true;
        };
        let ordinal = ordinals.get(gpu).copied().unwrap_or(gpu);
        let Some(memory) = crate::live::memory_within(ordinal, crate::live::ANSWER_WITHIN) else {
            if crate::live::stuck() && !self.said_stuck.swap(true, Ordering::Relaxed) {
                crate::notice::line(&format!(
                    "NVML did not answer within {} s (a wedged GPU driver?); permits that \
                     declare memory count against the budget alone until it does",
                    crate::live::ANSWER_WITHIN.as_secs()
                ));
            }
            return true;
        };
        // The holders on this GPU, from the records of its slots that are not free: a permit
        // of u units wrote one record into each of its u slots, counted once.
        let gpus = self.layout.gpus;
        let mut holders: Vec<HolderRecord> = Vec::new();
        for i in (gpu..self.slots.len()).step_by(gpus) {
            if free.contains(&i) {
                continue;
            }
            // Every slot of this GPU was opened to probe it (or is held by this process).
            let Some(file) = self.slots[i].opened() else {
                continue;
            };
            let Some(r) = read_record(file) else {
                continue;
            };
            if r.memory.is_none() {
                continue;
            }
            if !holders.contains(&r) {
                holders.push(r);
            }
        }
        // A process started under a holder's permit (`gpu-test-permit run`'s command and what
        // it starts) allocates for that holder, and one this process started for itself.
        let mut declared: Vec<(u32, u64)> = Vec::with_capacity(holders.len());
        let mut ours: Vec<u32> = Vec::with_capacity(holders.len() + 1);
        for r in &holders {
            declared.push((r.pid, r.memory.unwrap_or(0)));
            ours.push(r.pid);
        }
        let mut memory = memory;
        let own = sys::pid();
        ours.push(own);
        for p in &mut memory.processes {
            if let Some(holder) = sys::ancestor_among(p.pid, &ours) {
                p.pid = holder;
            }
        }
        match crate::live::admit(want, &memory, &declared, own) {
            crate::live::Admission::Admit => true,
            crate::live::Admission::Short(short) => {
                *self.held_back.lock() = Some(short.describe(ordinal));
                false
            }
        }
    }

    /// Why the last attempt of this process found no GPU with the memory it declared free
    /// (NVML), if it did: one line naming the processes that use the memory without a permit.
    pub(crate) fn held_back_by_memory(&self) -> Option<String> {
        self.held_back.lock().clone()
    }

    /// Whether another process has a waiting request ahead of `record` in the queue's order
    /// (by the time it began to wait on the boot clock, then by pid: [`queue::order_key`])
    /// that keeps its turn ([`Liveness::Active`]).
    fn older_waiter_first(&self, record: &HolderRecord) -> bool {
        let now = crate::clock::boot_now();
        let own = queue::order_key(record, now);
        for w in &wait_entries(&self.dir) {
            let r = &w.record;
            if r.pid != record.pid
                && queue::order_key(r, now) < own
                && Liveness::judge(r.pid, w.beat_age_ms).keeps_turn()
            {
                return true;
            }
        }
        false
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
        let (record, beat) = match read_head(&self.gate) {
            Some((r, b)) => (Some(r), b),
            None => (None, None),
        };
        if let Some(r) = &record
            && r.pid == std::process::id()
        {
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
            Some(record) => !self
                .head_liveness(&record, beat, Some(first_seen))
                .keeps_turn(),
            None => first_seen.elapsed() > GRACE,
        }
    }

    /// How the head of the queue, recorded as `record`, stands: judged by its heartbeat in the
    /// gate (`beat`: its age) or else in its wait file, or where it has none, by how long it
    /// has been seen (`first_seen`; when not known, since it began to wait).
    fn head_liveness(
        &self,
        record: &HolderRecord,
        beat: Option<i64>,
        first_seen: Option<Instant>,
    ) -> Liveness {
        head_liveness(&self.dir, record, beat, first_seen)
    }

    /// The head of the queue as its gate record tells, when another process holds the gate and
    /// has recorded itself (a head that takes slots at once never writes one).
    fn head(&self) -> Option<WaitingRequest> {
        let (record, beat) = self.other_head()?;
        Some(WaitingRequest {
            liveness: self.head_liveness(&record, beat, None),
            record,
            head: true,
        })
    }

    /// The head's record in the gate and the age of its heartbeat, where another process
    /// holds the gate and has recorded itself.
    fn other_head(&self) -> Option<(HolderRecord, Option<i64>)> {
        let (record, beat) = read_head(&self.gate)?;
        // Probed through a description of its own: this process's gate description may hold
        // the gate for another of its threads.
        if record.pid == std::process::id() || !is_locked_at(&self.gate_path) {
            return None;
        }
        Some((record, beat))
    }

    /// Arms this process's change watch (gate, notify file and every slot) if it has none yet.
    /// Returns whether it was set up just now. Without a watch (inotify unavailable), waits
    /// poll.
    fn arm(&self, waiting: &mut Waiting) -> bool {
        if waiting.watch.is_some() {
            return false;
        }
        // A watch is on a name that exists: the slots nobody used yet are made now.
        self.slots.open_every();
        let mut paths: Vec<&Path> = Vec::with_capacity(self.slots.len() + 2);
        paths.push(&self.gate_path);
        paths.push(&self.notify_path);
        for slot in self.slots.iter() {
            paths.push(&slot.path);
        }
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

    /// The per-GPU memory budget every process using the directory converts declarations with
    /// (see [`budget::agree_on_budget`]).
    pub(crate) fn agree_on_budget(&self, own: Option<u64>) -> Option<u64> {
        budget::agree_on_budget(&self.dir, own)
    }

    /// Frees slots held by this process. Returns false, freeing nothing, in a forked child
    /// (see [`forked`](Self::forked)): its copies of the parent's permits are not its to
    /// return.
    pub(crate) fn release(&self, slots: &[usize]) -> bool {
        if self.forked() {
            return false;
        }
        match slots.len() {
            0 => return true,
            1 => self.slots.release(slots),
            // Slots are let go one by one: a backfiller counting meanwhile would see some free
            // and the rest held until their record's end, and could take a unit past a head
            // that can start now. Let go under `gpu0.backfill`, the slots are free all at once
            // to every count (`docs/protocol.md`, 12). Where no request has backfilled, there
            // is no such file, and no lock to take.
            _ => match self.backfill_file_if_made() {
                Some(file) => {
                    let file = file.lock();
                    let locked = sys::lock_within(&file, backfill::RELEASE_WAIT);
                    self.slots.release(slots);
                    if locked {
                        let _ = file.unlock();
                    }
                }
                None => self.slots.release(slots),
            },
        }
        self.notify();
        true
    }

    /// `gpu0.backfill` for a release, where a backfiller has made it: while it is missing,
    /// looked for again at most every [`backfill::MISSING_RECHECK`].
    fn backfill_file_if_made(&self) -> Option<&parking_lot::Mutex<File>> {
        if let Some(file) = self.backfill_file.get() {
            return file.as_ref();
        }
        let mut missing = self.backfill_missing.lock();
        if let Some(at) = *missing
            && at.elapsed() < backfill::MISSING_RECHECK
        {
            return None;
        }
        let path = self.dir.join(backfill::BACKFILL_FILE);
        let kept = match slot::open_existing_counted(&self.dir, self.layout, &path) {
            // A backfilling thread of this process may have opened it meanwhile: that one.
            Ok(file) => {
                let mut file = Some(file);
                self.keep_backfill_file(&mut || file.take())
            }
            Err(_) => {
                *missing = Some(Instant::now());
                return None;
            }
        };
        drop(missing);
        kept
    }

    /// `gpu0.backfill`, opened (made, should it be missing) at its first use by this process.
    fn backfill_lock_file(&self) -> Option<&parking_lot::Mutex<File>> {
        self.keep_backfill_file(&mut || {
            let path = self.dir.join(backfill::BACKFILL_FILE);
            let shared = sys::is_shared_dir(&self.dir);
            slot::open_counted(&self.dir, self.layout, &path, shared).ok()
        })
    }

    /// `gpu0.backfill` as this process keeps it: what `open` gives (`None`: it cannot be
    /// had), called only where no thread of this process has set it yet. The one place that
    /// sets it.
    fn keep_backfill_file(
        &self,
        open: &mut dyn FnMut() -> Option<File>,
    ) -> Option<&parking_lot::Mutex<File>> {
        let kept = self.backfill_file.get_or_init(|| {
            let file = open()?;
            Some(parking_lot::Mutex::new(file))
        });
        kept.as_ref()
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
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            // Never probe through the slot's file: its description may hold (or be taking) another
            // thread's lock, which a probe would convert and its unlock drop.
            let locked = slot.held.load(Ordering::Acquire) || {
                probed = true;
                is_locked_at(&slot.path)
            };
            if !locked {
                continue;
            }
            let Ok(file) = self.slots.file_now(i) else {
                unrecorded.push(None);
                continue;
            };
            match read_decoded(file) {
                Some(Ok(Some(r))) => holders.push(r),
                Some(Ok(None)) | None => unrecorded.push(sys::lock_owner(file)),
                Some(Err(e)) => {
                    unrecorded.push(sys::lock_owner(file));
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
        let mut waiting: Vec<WaitingRequest> = Vec::new();
        if let Some(head) = self.head() {
            waiting.push(head);
        }
        'entries: for entry in &wait_entries(&self.dir) {
            let pid = entry.record.pid;
            if pid == std::process::id() {
                continue;
            }
            for w in &waiting {
                if w.record.pid == pid {
                    continue 'entries;
                }
            }
            waiting.push(WaitingRequest {
                liveness: Liveness::judge(pid, entry.beat_age_ms),
                record: entry.record.clone(),
                head: false,
            });
        }
        Blockers {
            holders,
            unrecorded,
            waiting,
            memory: self.held_back_by_memory(),
        }
    }
}
