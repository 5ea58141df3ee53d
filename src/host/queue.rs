//! The cross-process queue: who waits, whether a request ahead keeps its turn, and how a
//! waiter sleeps until something changes.
//!
//! - **Wait files.** A process that has waited keeps `gpu0.wait.<pid>` locked while it lives
//!   and writes the record of its waiting request into it (blank while none waits), then its
//!   heartbeat, renewed every few milliseconds while it waits: for the order of the queue, for
//!   [`status`](crate::host::status) and for the message of a wait that times out. Where
//!   another process holds that name (another user can make anything at a name it can guess),
//!   the file is `gpu0.wait.<pid>.<random>` instead ([`make_locked_file`]); readers take the
//!   pid from the record. Unlocked ones are leftovers of killed processes, removed by this
//!   user's waiters when they first wait in the directory.
//! - **Turns.** A waiting request keeps its turn while it shows signs of life. One whose pid
//!   names no process here (another PID namespace's, or a forged record), that is stopped
//!   (`SIGSTOP`, Ctrl-Z, a debugger; seen through `/proc` on Linux), or whose heartbeat is
//!   older than [`GRACE`] (frozen by the cgroup freezer, stopped in another namespace) loses
//!   its turn: the requests behind it go past it. When the head has lost its turn, the oldest
//!   waiter that keeps its own takes free slots past it, and newer requests, new arrivals
//!   included, let it go first, as they would the head. A gate held without a record (a head
//!   between taking the gate and either its slots or its record) loses its turn once it has
//!   stayed so for [`GRACE`].
//! - **Only arrivals race.** A request that has just arrived tries the gate at once (a
//!   directory scan on every acquisition would cost the uncontended path), which lets it slip
//!   in during the microseconds after a release.
//! - **Waking.** `gpu0.notify` is written after every release, so waiters watching with
//!   inotify (Linux) wake within microseconds. Where no watch can be had (inotify instances
//!   are a per-user limit that any program can exhaust) waiters poll with a backoff of at most
//!   [`RECHECK`]; every wait also re-checks at that interval.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::lock::is_locked;
use super::record::{HolderRecord, RECORD_LEN, padded, padded_text, read_start};
use crate::clock::BootTime;
use crate::sys::{self, ChangeWatch};

/// Longest sleep between re-checks while waiting, as a safety net under the change watch (the
/// kernel reports the close of a killed holder's file just before it drops that file's lock),
/// and the longest step of the polling fallback.
pub(super) const RECHECK: Duration = Duration::from_millis(25);
/// First step of the polling fallback.
pub(super) const POLL_FIRST: Duration = Duration::from_millis(1);

/// How long a waiting request may show no sign of life (its wait file's heartbeat, renewed
/// every few milliseconds while it waits) before it loses its turn to the requests behind it.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// Whether a waiting request of another process can use its turn, as the requests behind it
/// judge it. A request that cannot loses its turn: the others go past it, the oldest of them
/// first. Only the order is at stake: the slots themselves are locks, so the cap holds
/// whatever is judged here.
///
/// ```
/// use gpu_test_permit::host::Liveness;
///
/// assert!(Liveness::Active.keeps_turn());
/// assert!(!Liveness::Stopped.keeps_turn(), "a stopped head lets the others go past it");
/// ```
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
    ///
    /// ```
    /// use gpu_test_permit::host::Liveness;
    ///
    /// assert!(Liveness::Active.keeps_turn());
    /// assert!(!Liveness::Unseen.keeps_turn());
    /// ```
    pub fn keeps_turn(self) -> bool {
        self == Liveness::Active
    }

    /// Judges process `pid` whose last heartbeat is `age_ms` old ([`beat_age_ms`]; negative:
    /// from the future). A heartbeat from the future beyond the grace period (a forged one)
    /// counts as none.
    pub(super) fn judge(pid: u32, age_ms: i64) -> Liveness {
        if !sys::process_is_visible(pid) {
            return Liveness::Unseen;
        }
        if sys::process_is_stopped(pid) {
            return Liveness::Stopped;
        }
        let grace = GRACE.as_millis() as i64;
        if age_ms > grace || age_ms < -grace {
            Liveness::Silent(Duration::from_millis(age_ms.unsigned_abs()))
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

/// Where a wait file is made and locked before it is linked to its name:
/// `gpu0.new-wait.<pid>.<random>`, a name nobody else can know beforehand. A wait file is never
/// seen unlocked, which `status` and sweepers would take for a dead waiter's leftover and
/// remove.
pub(super) const STAGING_PREFIX: &str = "gpu0.new-wait.";

/// This process's wait file in `dir`, made and locked, and where: `gpu0.wait.<pid>`, or where
/// another process holds that name, `gpu0.wait.<pid>.<random>` ([`make_locked_file`]). `None`
/// when it cannot be had: the request then waits unlisted, and tries again later.
fn make_wait_file(dir: &Path) -> Option<(PathBuf, File)> {
    let pid = std::process::id();
    make_locked_file(
        dir,
        &format!("{STAGING_PREFIX}{pid}"),
        &format!("{WAIT_PREFIX}{pid}"),
    )
}

/// A file of this process in `dir`, made and locked, and the path it has: `name`, or where
/// another process holds that name (a directory, FIFO or file another user made there, a
/// file of a process of the same pid in another PID namespace), `name.<random>`: whoever can
/// guess a name can take it first, so a taken one is never waited for. Readers find a
/// process's files by the pid their names begin with and their records hold.
///
/// Where open files can be renamed (Unix) the file is made and locked under a staging name,
/// `staging.<random>`, then linked to its name, which never replaces what is there
/// (`link(2)`; where the file system has no hard links, renamed, which replaces only a file of
/// this user), and its staging name removed: it is never seen unlocked. Elsewhere it is made in
/// place and locked. A lock refused (another process probing the file) or a file removed
/// between the open and the lock is tried again, a little later each time.
pub(super) fn make_locked_file(dir: &Path, staging: &str, name: &str) -> Option<(PathBuf, File)> {
    let shared = sys::is_shared_dir(dir);
    let mut path = dir.join(name);
    let (mut attempt, mut taken) = (0, 0);
    while attempt < 8 && taken < 4 {
        let placed = if sys::RENAMES_OPEN_FILES {
            let staged = dir.join(format!("{staging}.{}", unguessable()));
            let Ok(file) = sys::open_lock_file(&staged, shared) else {
                return None;
            };
            // The record's and heartbeat's space, while the disk has it.
            let _ = sys::reserve(&file, RECORD_AND_BEAT);
            let placed = if file.try_lock().is_ok() && sys::same_file(&staged, &file) {
                match place(&staged, &path) {
                    Ok(()) => Ok(file),
                    Err(e) => Err(e),
                }
            } else {
                Err(Placing::Again)
            };
            let _ = std::fs::remove_file(&staged);
            placed
        } else {
            match sys::open_lock_file(&path, shared) {
                Ok(file) if file.try_lock().is_ok() => Ok(file),
                Ok(_) => Err(Placing::Again),
                Err(_) => Err(Placing::Taken),
            }
        };
        match placed {
            // Locked by this description, and still the file at the path: ours.
            Ok(file) if sys::same_file(&path, &file) => return Some((path, file)),
            Ok(_) | Err(Placing::Taken) => {
                taken += 1;
                path = dir.join(format!("{name}.{}", unguessable()));
            }
            Err(Placing::Again) => {
                std::thread::sleep(Duration::from_micros(100 << attempt));
                attempt += 1;
            }
        }
    }
    None
}

/// Why a file could not be placed at its name.
enum Placing {
    /// Something else is there.
    Taken,
    /// Its staging name was swept or probed meanwhile: try again.
    Again,
}

/// Gives the locked file at `staged` the name `path` as well, never replacing what is there.
fn place(staged: &Path, path: &Path) -> Result<(), Placing> {
    match std::fs::hard_link(staged, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Placing::Taken),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Placing::Again),
        // No hard links on this file system: renamed, where nothing is at the name.
        Err(_) if std::fs::symlink_metadata(path).is_ok() => Err(Placing::Taken),
        Err(_) => match std::fs::rename(staged, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Placing::Again),
            Err(_) => Err(Placing::Taken),
        },
    }
}

/// 64 random bits, in hex, for a name no other process can know beforehand: std's randomly
/// keyed hasher (its keys come from the system's random source) over this process's pid and a
/// count.
pub(super) fn unguessable() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Removes wait files and threads files ([`super::threads`]) whose process is gone (unlocked
/// ones), their staging names included, where they are this user's: a file of another user is
/// theirs to remove (a sticky directory would refuse anyway, except to root), whether a dead
/// process of theirs left it or they made it at a name a waiter of ours would take. The global
/// pool of a process is never dropped, so its wait file outlives it. Run by a process before
/// its first wait in the directory: only waiters read wait files.
pub(super) fn sweep_wait_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mine = format!("{WAIT_PREFIX}{}", std::process::id());
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = name.starts_with(WAIT_PREFIX)
            || name.starts_with(STAGING_PREFIX)
            || name.starts_with(THREADS_PREFIX)
            || name.starts_with(THREADS_STAGING_PREFIX);
        if !ours || name == mine {
            continue;
        }
        let path = entry.path();
        let Ok(file) = sys::open_regular_for_reading(&path) else {
            continue;
        };
        // Removed while locked: its owner, if it comes back to life under a reused pid,
        // checks that its file is still the one at the path.
        if sys::is_own_file(&file) && file.try_lock().is_ok() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// How the head of the queue of `dir`, recorded as `record` in the gate with heartbeat
/// `gate_beat` (the age of the one written after the record, if any), stands; see
/// [`HostSlots::head_liveness`].
pub(super) fn head_liveness(
    dir: &Path,
    record: &HolderRecord,
    gate_beat: Option<i64>,
    first_seen: Option<Instant>,
) -> Liveness {
    // The fresher of the two: the gate's is renewed less often, the wait file's may have found
    // no space.
    let listed = match wait_entry_of(dir, record.pid) {
        Some(w) => Some(w.beat_age_ms),
        None => None,
    };
    let beat = match (gate_beat, listed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let age = match (beat, first_seen) {
        (Some(age), _) => age,
        (None, Some(at)) => at.elapsed().as_millis() as i64,
        (None, None) => wait_age_ms(record),
    };
    Liveness::judge(record.pid, age)
}

/// The head's record in the gate and the age of the heartbeat after it, if it wrote one.
pub(super) fn read_head(gate: &File) -> Option<(HolderRecord, Option<i64>)> {
    let raw = read_start(gate, RECORD_AND_BEAT as usize)?;
    let record = HolderRecord::decode(&raw[..raw.len().min(RECORD_LEN)]).ok()??;
    Some((record, beat_after_record(&raw)))
}

/// The age of the heartbeat after the record in `raw`, a wait file's or the gate's start
/// ([`beat_age_ms`]).
fn beat_after_record(raw: &[u8]) -> Option<i64> {
    match raw.get(RECORD_LEN..) {
        Some(beat) => beat_age_ms(beat),
        None => None,
    }
}

/// A heartbeat to write now: `b` and the milliseconds of the boot clock ([`sys::boot_ms`]),
/// which every process of the host shares and no clock step moves; the wall clock's Unix
/// milliseconds where there is no such clock.
pub(super) fn beat_now() -> Vec<u8> {
    let text = match sys::boot_ms() {
        Some(ms) => format!("b{ms}"),
        None => crate::clock::now_unix_ms().to_string(),
    };
    padded(text.into_bytes(), BEAT_LEN)
}

/// How many milliseconds ago heartbeat `raw` ([`beat_now`]) was written; negative when it
/// is from the future. `None` for none, or one this process cannot read: a boot-clock beat
/// where there is no boot clock, or anything else.
pub(super) fn beat_age_ms(raw: &[u8]) -> Option<i64> {
    let text = padded_text(raw).ok().flatten()?;
    match text.strip_prefix('b') {
        Some(boot) => {
            let beat = boot.parse::<u64>().ok()?;
            Some(sys::boot_ms()? as i64 - beat as i64)
        }
        // A wall-clock beat (an earlier version's, or a host without a boot clock).
        None => match text.parse::<u64>() {
            Ok(ms) => Some(wall_age_ms(ms)),
            Err(_) => None,
        },
    }
}

/// How long ago Unix milliseconds `ms` were, by the wall clock.
pub(super) fn wall_age_ms(ms: u64) -> i64 {
    crate::clock::now_unix_ms() as i64 - ms as i64
}

/// How long ago the wait of `record` began (negative: in the future), for a request with no
/// heartbeat to judge by: on the boot clock where the record has a time of this boot, else by
/// the wall clock.
fn wait_age_ms(record: &HolderRecord) -> i64 {
    match (crate::clock::boot_now(), record.since_boot_ms) {
        (Some(now), Some(at)) if record.boot_id.as_deref() == now.boot_id => {
            now.ms as i64 - at as i64
        }
        _ => wall_age_ms(record.since_unix_ms),
    }
}

/// Where the waiting request `record` stands in the queue's order, as every process of this
/// version on the host reads it alike (`now`: this process's boot clock, [`boot_now`]):
/// requests go first by the smaller key. The key is one value per record, so ordering by it is
/// a total order, whichever records lack a boot-clock time:
///
/// - a record with a time of this boot on the boot clock (`since_boot_ms` and `boot_id`, when
///   its wait began; this version writes both wherever there is a boot clock) is ordered by
///   that time, which no process's wall clock moves: a waiter whose wall clock is an hour
///   behind neither jumps ahead of the requests that waited before it nor, an hour ahead,
///   falls behind the next hour's;
/// - a record that has none (an earlier version's, or one of another boot, which is no time
///   now) comes after every such record, and among its kind by the wall-clock time it was
///   written with (`since_unix_ms`), as earlier versions order the queue. It can be placed
///   nowhere among the others without reading two processes' wall clocks as one, and after
///   them it is never the cause of two waiters of this version each letting the other go
///   first (an earlier version's waiter lets those go first whom its wall clock says are
///   older, and this version's never let it go first);
/// - where there is no boot clock (macOS) every record is of the second kind: wall-clock order.
///
/// Ties go by pid.
///
/// [`boot_now`]: crate::clock::boot_now
pub(super) fn order_key(record: &HolderRecord, now: Option<BootTime>) -> (bool, u64, u32) {
    if let Some(now) = now
        && let Some(at) = record.boot_ms_in(now)
    {
        return (false, at, record.pid);
    }
    (true, record.since_unix_ms, record.pid)
}

/// A waiting request as its wait file tells: its record and its last heartbeat.
pub(super) struct WaitEntry {
    pub(super) record: HolderRecord,
    /// How long ago its last heartbeat was written ([`beat_age_ms`]); a file without one
    /// counts from when the wait began.
    pub(super) beat_age_ms: i64,
}

/// The waiting requests of live processes (locked wait files with a record in them), in the
/// queue's order ([`order_key`]).
pub(super) fn wait_entries(dir: &Path) -> Vec<WaitEntry> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(WAIT_PREFIX) {
            continue;
        }
        if let Some(w) = wait_entry(&entry.path()) {
            out.push(w);
        }
    }
    let now = crate::clock::boot_now();
    crate::order::sort_by(&mut out, |a, b| {
        order_key(&a.record, now).cmp(&order_key(&b.record, now))
    });
    out
}

/// The waiting request of process `pid` in its wait file: `gpu0.wait.<pid>`, or where another
/// process held that name when it was made, `gpu0.wait.<pid>.<random>` ([`make_locked_file`]),
/// found by a scan of `dir` only when the first tells none.
pub(super) fn wait_entry_of(dir: &Path, pid: u32) -> Option<WaitEntry> {
    let plain = format!("{WAIT_PREFIX}{pid}");
    if let Some(w) = wait_entry(&dir.join(&plain))
        && w.record.pid == pid
    {
        return Some(w);
    }
    let suffixed = format!("{plain}.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return None;
    };
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&suffixed) {
            continue;
        }
        if let Some(w) = wait_entry(&entry.path())
            && w.record.pid == pid
        {
            return Some(w);
        }
    }
    None
}

/// The waiting request in wait file `path`, if the file is locked (its process lives) and
/// holds one.
pub(super) fn wait_entry(path: &Path) -> Option<WaitEntry> {
    let Ok(file) = sys::open_regular_for_reading(path) else {
        return None;
    };
    // Read first: most wait files are blank (their processes wait for nothing now), and a
    // blank one needs no lock probe.
    let raw = read_start(&file, RECORD_LEN + BEAT_LEN)?;
    let record = HolderRecord::decode(&raw[..raw.len().min(RECORD_LEN)]).ok()??;
    if !is_locked(&file) {
        return None;
    }
    let beat_age_ms = match beat_after_record(&raw) {
        Some(age) => age,
        None => wait_age_ms(&record),
    };
    Some(WaitEntry {
        record,
        beat_age_ms,
    })
}

/// How this process waits for changes.
#[derive(Debug)]
pub(super) enum Watch {
    Changes(ChangeWatch),
    /// No watch could be had: sleep in growing steps.
    Poll,
}

/// What this process keeps for the one request of it that may wait at a time (the others wait
/// for [`HostSlots::acquire_lock`]). Both parts are made on the first wait and kept: closing an
/// inotify descriptor waits for a kernel grace period (about 10 ms), which would otherwise fall
/// between a release and the waiter getting its slot.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    pub(super) watch: Option<Watch>,
    /// Next step of the polling fallback.
    pub(super) poll_step: Option<Duration>,
    /// `gpu0.wait.<pid>` (or `gpu0.wait.<pid>.<random>` where that name was taken, see
    /// [`make_locked_file`]), locked for the life of the process, holding the record of the
    /// request waiting now (blank while none waits), so that [`status`] can list waiters and
    /// tell a killed process's leftover (unlocked) from a live one.
    pub(super) file: Option<(PathBuf, File)>,
    /// Whether the request waiting now is on record in `file`.
    pub(super) listed: bool,
    /// When the wait file last could not be made.
    list_failed: Option<Instant>,
}

/// How long a waiter whose wait file (or threads file) could not be made waits before it
/// tries again.
pub(super) const LIST_RETRY: Duration = Duration::from_millis(100);

impl Waiting {
    /// Writes `record` into the wait file, once per request. A waiter that cannot register
    /// still waits, and tries again at its wake-ups, at most every [`LIST_RETRY`]: the file
    /// could not be made where, say, other processes' sweeps removed it each time it was
    /// about to take it (`make_locked_file`), and unlisted, the waiter would be invisible to
    /// `status` and to the waiters behind it for the rest of its wait.
    pub(super) fn list(&mut self, dir: &Path, record: &HolderRecord) {
        if self.listed {
            return;
        }
        if let Some((path, file)) = &self.file
            && !sys::same_file(path, file)
        {
            // Swept by another process while we were not waiting (a reused pid): make anew.
            self.file = None;
        }
        if self.file.is_none() {
            if let Some(at) = self.list_failed
                && at.elapsed() < LIST_RETRY
            {
                return;
            }
            // The first wait of this process in `dir`: clear the leftovers of dead waiters
            // first. Here rather than at every open of the directory, so that a process that
            // never waits (most test processes) never scans it.
            sweep_wait_files(dir);
            self.file = make_wait_file(dir);
            self.list_failed = if self.file.is_none() {
                Some(Instant::now())
            } else {
                None
            };
        }
        let Some((_, file)) = &self.file else {
            return;
        };
        let _ = sys::write_at(file, &record.encode(), 0);
        self.listed = true;
        self.beat();
    }

    /// Renews the heartbeat of the head of the queue, written after its record in the gate
    /// (whose space was reserved when it was made: a full disk does not silence the head).
    pub(super) fn beat_gate(gate: &File) {
        let _ = sys::write_at(gate, &beat_now(), RECORD_LEN as u64);
    }

    /// Renews the heartbeat of the listed request: the sign of life by which the requests
    /// behind it judge that it can still use its turn ([`Liveness`]).
    pub(super) fn beat(&self) {
        if self.listed
            && let Some((_, file)) = &self.file
        {
            let _ = sys::write_at(file, &beat_now(), RECORD_LEN as u64);
        }
    }

    /// Blanks the record once the request stops waiting.
    pub(super) fn unlist(&mut self) {
        self.poll_step = None;
        if std::mem::take(&mut self.listed)
            && let Some((_, file)) = &self.file
        {
            let _ = sys::write_at(file, &[b' '; RECORD_LEN], 0);
        }
    }

    /// Waits for a change, or a re-check interval, or `deadline`, whichever comes first.
    pub(super) fn wait(&mut self, deadline: Option<Instant>) {
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
        if let Some((path, file)) = &self.file
            && sys::same_file(path, file)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(super) const WAIT_PREFIX: &str = "gpu0.wait.";
/// Prefix of the files of threads waiting inside a process (`threads.rs`), which
/// [`sweep_wait_files`] clears with the wait files.
pub(super) const THREADS_PREFIX: &str = "gpu0.threads.";
/// Where such a file is made and locked before it is renamed to its name.
pub(super) const THREADS_STAGING_PREFIX: &str = "gpu0.new-threads.";
/// How often the head of the queue renews its heartbeat in the gate: well within [`GRACE`],
/// and seldom, because every write to the gate wakes every waiter (the head included).
pub(super) const GATE_BEAT: Duration = Duration::from_millis(200);

/// Size of a heartbeat, written after the record in a wait file and in the gate.
pub(super) const BEAT_LEN: usize = 32;
/// The space a wait file's or the gate's record and heartbeat take, reserved when the file
/// is made ([`sys::reserve`]).
pub(super) const RECORD_AND_BEAT: u64 = (RECORD_LEN + BEAT_LEN) as u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_whose_wait_file_could_not_be_made_lists_itself_once_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let record = record(1);
        // A slot directory not made yet: the wait file cannot be made.
        let slots = dir.path().join("slots");
        let path = slots.join(format!("{WAIT_PREFIX}{}", std::process::id()));
        let mut waiting = Waiting::default();
        waiting.list(&slots, &record);
        assert!(!waiting.listed && !path.exists());
        // Not tried again at once: a wake-up soon after costs nothing.
        std::fs::create_dir(&slots).unwrap();
        waiting.list(&slots, &record);
        assert!(!waiting.listed && !path.exists());
        std::thread::sleep(LIST_RETRY);
        waiting.list(&slots, &record);
        assert!(waiting.listed);
        assert_eq!(wait_entry(&path).map(|w| w.record), Some(record));
    }

    fn record(since_unix_ms: u64) -> HolderRecord {
        HolderRecord {
            pid: std::process::id(),
            test: "t".into(),
            binary: None,
            thread: "main".into(),
            since_unix_ms,
            since_boot_ms: None,
            boot_id: None,
            exclusive: false,
            concurrency: 2,
            units: 1,
            gpus: 1,
            memory: None,
        }
    }

    /// The names in `dir` that begin with `prefix`.
    fn names(dir: &Path, prefix: &str) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect();
        crate::order::sort(&mut out);
        out
    }

    #[test]
    fn a_waiter_whose_wait_file_name_is_taken_lists_itself_under_another() {
        let dir = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        // Another process made a directory at the name (a rename onto it fails, EISDIR).
        let plain = dir.path().join(format!("{WAIT_PREFIX}{pid}"));
        std::fs::create_dir(&plain).unwrap();
        let mut waiting = Waiting::default();
        waiting.list(dir.path(), &record(5));
        assert!(waiting.listed, "not listed beside a taken name");
        let (path, _) = waiting.file.as_ref().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let suffix = name.strip_prefix(&format!("{WAIT_PREFIX}{pid}.")).unwrap();
        assert!(
            suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
            "{name}"
        );
        // Every reader finds it: the queue's order, the head's liveness, `status`.
        let entries = wait_entries(dir.path());
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].record, record(5));
        assert_eq!(
            wait_entry_of(dir.path(), pid).map(|w| w.record),
            Some(record(5))
        );
        let status = crate::host::status(dir.path()).unwrap();
        assert_eq!(status.waiters, vec![record(5)]);
        // No staging name is left behind, and the other process's directory is untouched.
        assert!(names(dir.path(), STAGING_PREFIX).is_empty());
        assert!(plain.is_dir());
        drop(waiting);
        assert_eq!(
            names(dir.path(), WAIT_PREFIX),
            vec![format!("{WAIT_PREFIX}{pid}")]
        );
    }

    #[test]
    fn a_live_file_at_the_name_is_never_replaced() {
        // A locked wait file of the same pid: a process of another PID namespace sharing the
        // directory, waiting. Renaming over it would take its listing away.
        let dir = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let plain = dir.path().join(format!("{WAIT_PREFIX}{pid}"));
        let theirs = std::fs::File::create(&plain).unwrap();
        sys::write_at(&theirs, &record(1).encode(), 0).unwrap();
        // Another open file description: its lock stands against this one's.
        let held = std::fs::File::open(&plain).unwrap();
        held.try_lock().unwrap();
        let mut waiting = Waiting::default();
        waiting.list(dir.path(), &record(5));
        assert!(waiting.listed);
        assert!(sys::same_file(&plain, &held), "the live file was replaced");
        let since: Vec<u64> = wait_entries(dir.path())
            .iter()
            .map(|w| w.record.since_unix_ms)
            .collect();
        assert_eq!(since, vec![1, 5]);
    }

    /// A wait record of process `pid` whose wait began at `unix` by its wall clock and at `boot`
    /// on the boot clock of `boot_id`.
    fn waiting(pid: u32, unix: u64, boot: Option<u64>, boot_id: Option<&str>) -> HolderRecord {
        HolderRecord {
            pid,
            since_boot_ms: boot,
            boot_id: boot_id.map(str::to_string),
            ..record(unix)
        }
    }

    #[test]
    fn the_queue_is_ordered_on_the_boot_clock_and_records_without_it_come_after() {
        const WALL: u64 = 1_700_000_000_000;
        let hour = 3_600_000;
        let now = Some(BootTime {
            ms: 50_000,
            boot_id: Some("this"),
        });
        let this = Some("this");
        // In the order they must come, whatever their wall clocks said.
        let want = [
            // Began to wait first, with a wall clock an hour ahead.
            waiting(10, WALL + hour, Some(1_000), this),
            waiting(11, WALL, Some(2_000), this),
            // A tie on the boot clock goes by pid.
            waiting(12, WALL - 7, Some(2_000), this),
            // Began to wait last, with a wall clock an hour behind.
            waiting(13, WALL - hour, Some(3_000), this),
            // An earlier version's records, and one of another boot, by their wall clocks.
            waiting(20, WALL - 2 * hour, None, None),
            waiting(21, WALL - hour, Some(1), Some("another")),
            waiting(22, WALL - hour, None, None),
            waiting(23, WALL + hour, None, None),
        ];
        // Every order of arrival sorts alike: the key is one value per record, a total order.
        let mut rotated = want.to_vec();
        for turn in 0..want.len() {
            rotated.rotate_left(1);
            for reversed in [false, true] {
                let mut v = rotated.clone();
                if reversed {
                    v.reverse();
                }
                crate::order::sort_by_key(&mut v, |r| order_key(r, now));
                let pids: Vec<u32> = v.iter().map(|r| r.pid).collect();
                assert_eq!(pids, [10, 11, 12, 13, 20, 21, 22, 23], "{turn} {reversed}");
            }
        }
        // Without a boot clock (macOS), the wall clock's order, as before.
        let mut v = want.to_vec();
        crate::order::sort_by_key(&mut v, |r| order_key(r, None));
        let pids: Vec<u32> = v.iter().map(|r| r.pid).collect();
        assert_eq!(pids, [20, 13, 21, 22, 12, 11, 10, 23]);
    }

    #[test]
    fn every_reader_of_the_wait_files_lists_them_in_the_queues_order() {
        // Live wait files (locked through another description) of three requests of this
        // process's pid — the order under test is what the files say. Where there is no boot
        // clock (not Linux), the order is the wall clock's, tested above.
        let Some(now) = crate::clock::boot_now() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let id = now.boot_id;
        let hour = 3_600_000;
        let wall = crate::clock::now_unix_ms();
        let records = [
            // Listed first by name, began to wait last, with its wall clock an hour behind.
            (
                "a",
                waiting(std::process::id(), wall - hour, Some(now.ms), id),
            ),
            ("b", waiting(std::process::id(), wall, Some(now.ms - 2), id)),
            (
                "c",
                waiting(std::process::id(), wall + hour, Some(now.ms - 1), id),
            ),
        ];
        let mut held = Vec::new();
        for (name, r) in &records {
            let path = dir.path().join(format!("{WAIT_PREFIX}1.{name}"));
            let file = std::fs::File::create(&path).unwrap();
            sys::write_at(&file, &r.encode(), 0).unwrap();
            let lock = std::fs::File::open(&path).unwrap();
            lock.try_lock().unwrap();
            held.push(lock);
        }
        let want = vec![
            records[1].1.clone(),
            records[2].1.clone(),
            records[0].1.clone(),
        ];
        let listed: Vec<HolderRecord> = wait_entries(dir.path())
            .into_iter()
            .map(|w| w.record)
            .collect();
        assert_eq!(listed, want);
        assert_eq!(crate::host::status(dir.path()).unwrap().waiters, want);
    }

    #[test]
    fn staging_names_cannot_be_known_beforehand() {
        let (a, b) = (unguessable(), unguessable());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
    }
}
