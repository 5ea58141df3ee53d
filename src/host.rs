//! Host slots: the cross-process layer.
//!
//! The cap is a property of the GPU, not of one process: under `cargo nextest` every test is a
//! process of its own, doctests are processes, and two test runs may share a runner. So every
//! real permit also holds one *slot*: an advisory file lock (`flock` on Unix, `LockFileEx` on
//! Windows, through std's [`File::try_lock`]) on one of N slot files in a shared directory.
//! The kernel drops a file lock when its process dies for any reason, SIGKILL included, so a
//! crashed test never leaks a slot.
//!
//! Advisory locks only bind processes that take them: a GPU program that does not use this crate
//! is not held back.
//!
//! Layout of the directory (host treated as one GPU, `gpu0`):
//! - `gpu0.gate`: whoever holds this lock is the head of the cross-process queue and is the only
//!   process that may take slots; the others wait for the gate. An exclusive request collects
//!   slots one by one while holding the gate, so it cannot be starved and two exclusive requests
//!   cannot deadlock.
//! - `gpu0.slot<i>`: the slot locks. The holder writes a JSON record of itself (pid, test,
//!   thread, since) into its slot for diagnostics; records of free slots are stale and ignored.
//! - `gpu0.notify`: written after every release, so waiters (watching with inotify on Linux)
//!   wake within microseconds instead of polling.
//! - `gpu0.wait.<pid>`: a process that has waited keeps this file locked while it lives and
//!   writes the record of its waiting request into it (blank while none waits), for
//!   [`status`]; an unlocked one is a killed process's leftover, removed by [`status`].

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::sys::{self, ChangeWatch};

/// Longest sleep between re-checks while waiting, as a safety net under the change watch (the
/// kernel reports the close of a killed holder's file just before it drops that file's lock).
const RECHECK: Duration = Duration::from_millis(25);
/// Size of a slot file's holder record.
const RECORD_LEN: usize = 1024;
const NAME_LIMIT: usize = 300;

/// What a slot's holder writes about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    /// Process id.
    pub pid: u32,
    /// Test name, as far as it is known.
    pub test: String,
    /// Thread name (or id).
    pub thread: String,
    /// When the permit was granted, milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// Whether this is part of an exclusive permit.
    pub exclusive: bool,
    /// The holder's permit count N, to spot processes configured differently.
    pub concurrency: usize,
}

impl HolderRecord {
    fn encode(&self) -> Vec<u8> {
        let mut r = self.clone();
        let mut limit = NAME_LIMIT;
        loop {
            truncate(&mut r.test, limit);
            truncate(&mut r.thread, limit);
            let mut buf = serde_json::to_vec(&r).expect("a holder record always serialises");
            // Escaping can make a name up to six times longer; shorten until it fits.
            if buf.len() < RECORD_LEN {
                buf.push(b'\n');
                buf.resize(RECORD_LEN, b' ');
                return buf;
            }
            limit /= 2;
        }
    }

    fn decode(raw: &[u8]) -> Result<Option<HolderRecord>, String> {
        let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8".to_string())?;
        let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
        if text.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| e.to_string())
    }
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

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Directory(msg) => write!(f, "{msg}"),
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
            HostError::Directory(_) => None,
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

/// The outcome of a wait that did not get its slots.
#[derive(Debug)]
pub(crate) enum HostWaitError {
    TimedOut(Vec<HolderRecord>),
    Failed(HostError),
}

impl HostSlots {
    /// Opens (creating if needed) `capacity` slots in `dir`, checking the directory first.
    pub(crate) fn open(dir: &Path, capacity: usize) -> Result<HostSlots, HostError> {
        sys::prepare_dir(dir).map_err(HostError::Directory)?;
        let shared = sys::is_shared_dir(dir);
        let open = |name: String| -> Result<(PathBuf, File), HostError> {
            let path = dir.join(name);
            let file = sys::open_lock_file(&path, shared).map_err(io_err(&path))?;
            Ok((path, file))
        };
        let (gate_path, gate) = open("gpu0.gate".into())?;
        let (notify_path, notify) = open("gpu0.notify".into())?;
        let slots = (0..capacity)
            .map(|i| {
                open(format!("gpu0.slot{i}")).map(|(path, file)| Slot {
                    path,
                    file,
                    held: AtomicBool::new(false),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(HostSlots {
            dir: dir.to_path_buf(),
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

    /// Takes `units` slots, waiting until `deadline`. Returns the slot indices.
    pub(crate) fn acquire(
        &self,
        units: usize,
        deadline: Option<Instant>,
        record: &HolderRecord,
    ) -> Result<Vec<usize>, HostWaitError> {
        let mut turn = match deadline {
            None => self.acquire_lock.lock(),
            Some(d) => match self.acquire_lock.try_lock_until(d) {
                Some(g) => g,
                None => return Err(HostWaitError::TimedOut(self.holders(&[]))),
            },
        };
        let waiting = &mut *turn;
        let result = match self.lock_gate(deadline, record, waiting) {
            Err(e) => Err(e),
            Ok(()) => {
                let result = self.collect(units, deadline, record, waiting);
                let unlocked = self.gate.unlock().map_err(io_err(&self.gate_path));
                self.notify();
                match (result, unlocked) {
                    (Ok(got), Ok(())) => Ok(got),
                    (Ok(got), Err(e)) => {
                        self.release(&got);
                        Err(HostWaitError::Failed(e))
                    }
                    (Err(e), _) => Err(e),
                }
            }
        };
        waiting.unlist();
        result
    }

    fn lock_gate(
        &self,
        deadline: Option<Instant>,
        record: &HolderRecord,
        waiting: &mut Waiting,
    ) -> Result<(), HostWaitError> {
        loop {
            match self.gate.try_lock() {
                Ok(()) => return Ok(()),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => {
                    return Err(HostWaitError::Failed(io_err(&self.gate_path)(e)));
                }
            }
            // A watch armed just now: check once more, since a release between the check
            // above and the arming would otherwise go unseen.
            if self.arm(waiting)? {
                continue;
            }
            self.wait(waiting, deadline, &[], record)?;
        }
    }

    fn collect(
        &self,
        units: usize,
        deadline: Option<Instant>,
        record: &HolderRecord,
        waiting: &mut Waiting,
    ) -> Result<Vec<usize>, HostWaitError> {
        let mut got = Vec::with_capacity(units);
        let mut busy = Vec::new();
        loop {
            busy.clear();
            for (i, slot) in self.slots.iter().enumerate() {
                if got.len() == units {
                    break;
                }
                if got.contains(&i) {
                    continue;
                }
                if slot.held.load(Ordering::Acquire) {
                    busy.push(i);
                    continue;
                }
                match slot.file.try_lock() {
                    Ok(()) => {
                        slot.held.store(true, Ordering::Release);
                        got.push(i);
                    }
                    Err(TryLockError::WouldBlock) => busy.push(i),
                    Err(TryLockError::Error(e)) => {
                        self.release(&got);
                        return Err(HostWaitError::Failed(io_err(&slot.path)(e)));
                    }
                }
            }
            if got.len() == units {
                got.sort_unstable();
                let bytes = record.encode();
                for &i in &got {
                    // A record is diagnostics only; failing to write one must not fail the test.
                    let _ = sys::write_at(&self.slots[i].file, &bytes, 0);
                }
                return Ok(got);
            }
            let waited = match self.arm(waiting) {
                Ok(true) => continue,
                Ok(false) => self.wait(waiting, deadline, &busy, record),
                Err(e) => Err(e),
            };
            if let Err(e) = waited {
                // Give back what an exclusive request collected so far.
                self.release(&got);
                return Err(e);
            }
        }
    }

    /// Arms this process's change watch (gate, notify file and every slot) if it is not armed
    /// yet. Returns whether it was armed just now.
    fn arm(&self, waiting: &mut Waiting) -> Result<bool, HostWaitError> {
        if waiting.watch.is_some() {
            return Ok(false);
        }
        let mut paths: Vec<&Path> = vec![&self.gate_path, &self.notify_path];
        paths.extend(self.slots.iter().map(|s| s.path.as_path()));
        let watch =
            ChangeWatch::new(&paths).map_err(|e| HostWaitError::Failed(io_err(&self.dir)(e)))?;
        waiting.watch = Some(watch);
        Ok(true)
    }

    fn wait(
        &self,
        waiting: &mut Waiting,
        deadline: Option<Instant>,
        busy: &[usize],
        record: &HolderRecord,
    ) -> Result<(), HostWaitError> {
        waiting.list(&self.dir, record);
        let step = match deadline {
            None => RECHECK,
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(HostWaitError::TimedOut(self.holders(busy)));
                }
                (d - now).min(RECHECK)
            }
        };
        waiting
            .watch
            .as_mut()
            .expect("armed before waiting")
            .wait(step)
            .map_err(|e| HostWaitError::Failed(io_err(&self.dir)(e)))?;
        Ok(())
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

    /// Reads the holder records of `slots` (all slots when empty). Corrupt records are skipped
    /// with one warning per process.
    pub(crate) fn holders(&self, slots: &[usize]) -> Vec<HolderRecord> {
        let all: Vec<usize>;
        let slots = if slots.is_empty() {
            all = (0..self.slots.len()).collect();
            &all
        } else {
            slots
        };
        let mut out = Vec::new();
        for &i in slots {
            let slot = &self.slots[i];
            let mut buf = vec![0u8; RECORD_LEN];
            let n = match sys::read_at_start(&slot.file, &mut buf) {
                Ok(n) => n,
                Err(_) => continue,
            };
            match HolderRecord::decode(&buf[..n]) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(e) => {
                    if !self.warned_corrupt.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "gpu-test-permit: ignoring the corrupt holder record in {} ({e}); \
                             it is rewritten by the slot's next holder",
                            slot.path.display()
                        );
                    }
                }
            }
        }
        out
    }
}

/// What this process keeps for the one request of it that may wait at a time (the others wait
/// for [`HostSlots::acquire_lock`]). Both parts are made on the first wait and kept: closing an
/// inotify descriptor waits for a kernel grace period (about 10 ms), which would otherwise fall
/// between a release and the waiter getting its slot.
#[derive(Debug, Default)]
struct Waiting {
    watch: Option<ChangeWatch>,
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
        if self.file.is_none() {
            let path = dir.join(format!("{WAIT_PREFIX}{}", std::process::id()));
            let Ok(file) = sys::open_lock_file(&path, sys::is_shared_dir(dir)) else {
                return;
            };
            if file.try_lock().is_err() {
                return;
            }
            self.file = Some((path, file));
        }
        if let Some((_, file)) = &self.file {
            let _ = sys::write_at(file, &record.encode(), 0);
        }
    }

    /// Blanks the record once the request stops waiting.
    fn unlist(&mut self) {
        if std::mem::take(&mut self.listed)
            && let Some((_, file)) = &self.file
        {
            let _ = sys::write_at(file, &[b' '; RECORD_LEN], 0);
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
    /// Files named like slot or wait files that were not read, such as a FIFO or a file this
    /// user may not open, by name.
    pub skipped: Vec<SkippedFile>,
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
        skipped: Vec::new(),
    };
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
        let record = || {
            let mut buf = vec![0u8; RECORD_LEN];
            let n = sys::read_at_start(&file, &mut buf).ok()?;
            HolderRecord::decode(&buf[..n]).ok().flatten()
        };
        match index {
            Some(index) => out.slots.push(SlotStatus {
                index,
                held,
                holder: if held { record() } else { None },
            }),
            None if held => out.waiters.extend(record()),
            // A killed waiter's leftover.
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.slots.sort_by_key(|s| s.index);
    out.waiters.sort_by_key(|w| w.since_unix_ms);
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
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
        };
        let enc = r.encode();
        assert_eq!(enc.len(), RECORD_LEN);
        let back = HolderRecord::decode(&enc).unwrap().unwrap();
        assert_eq!(back.pid, 7);
        assert!(back.test.len() <= NAME_LIMIT + '…'.len_utf8());
        assert_eq!(HolderRecord::decode(&[b' '; 64]).unwrap(), None);
        assert!(HolderRecord::decode(b"{not json").is_err());
        assert!(HolderRecord::decode(&[0xff, 0xfe]).is_err());
    }
}
