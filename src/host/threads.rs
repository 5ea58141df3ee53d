//! Threads of one process waiting inside it: `gpu0.threads.<pid>.<pool>`.
//!
//! The cross-process queue lists one request per process (its wait file, `queue.rs`); the
//! other threads of that process wait in its pool's in-process FIFO queue, where no other
//! process sees them. A pool with host slots whose threads queue there publishes how many wait
//! and since when the oldest of them waits in a file of its own, beside the wait files:
//!
//! - made and locked under `gpu0.new-threads.<pid>.<pool>.<random>`, then linked into place,
//!   so it is never seen unlocked; named `gpu0.threads.<pid>.<pool>.<random>` where another
//!   process holds the plain name (`queue::make_locked_file`); locked for the life of the pool
//!   (of the process, for the global pool) and removed when the pool is dropped;
//! - made at the first wait of one of the pool's threads (a process whose threads never wait
//!   never makes it), and rewritten only when the queue changes (a thread joins it, leaves it,
//!   or is granted its units), never on the path of an acquisition that does not wait;
//! - an unlocked one is a killed process's leftover: [`status`](super::status) ignores it and
//!   removes it where it is this user's, as do waiters sweeping the wait files; a pid reused by
//!   a later process whose sweep has not removed the leftover takes a suffixed name beside it.
//!
//! Diagnostics only: a pool that cannot make or write the file waits all the same.

use std::fs::File;
use std::path::{Path, PathBuf};
#[cfg(any(test, feature = "__cli"))]
use std::time::Duration;
use std::time::Instant;

#[cfg(any(test, feature = "__cli"))]
use super::lock::is_locked;
#[cfg(any(test, feature = "__cli"))]
use super::queue::beat_age_ms;
use super::queue::{LIST_RETRY, THREADS_PREFIX, THREADS_STAGING_PREFIX};
use super::record::padded;
#[cfg(any(test, feature = "__cli"))]
use super::record::{padded_text, read_start};
use crate::sys;

/// Size of the file's text: the count and the oldest wait's start.
const THREADS_LEN: usize = 48;

/// Threads of one process waiting in its in-process queue, as `gpu-test-permit status` reads
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct ThreadsWaiting {
    /// The process.
    pub pid: u32,
    /// How many of its threads wait in its in-process queue (behind the request it has at the
    /// host slots, if any, and the permits it holds).
    pub threads: usize,
    /// How long the oldest of them has waited.
    pub waited: Duration,
}

/// What a pool publishes of its in-process queue, in `dir`.
#[derive(Debug)]
pub(crate) struct ThreadsFile {
    dir: PathBuf,
    name: String,
    /// The process that made this value: a child forked from it publishes nothing.
    pid: u32,
    state: parking_lot::Mutex<Published>,
}

#[derive(Debug, Default)]
struct Published {
    file: Option<(PathBuf, File)>,
    /// When the file last could not be made: tried again at a later change, at most every
    /// `LIST_RETRY` (as a wait file is).
    failed: Option<Instant>,
    /// What the file says now: the count and the oldest wait's start.
    last: (usize, Option<Instant>),
}

impl ThreadsFile {
    /// The file of pool `pool` of this process in slot directory `dir`; nothing is made yet.
    pub(crate) fn new(dir: &Path, pool: u64) -> ThreadsFile {
        let pid = sys::pid();
        ThreadsFile {
            dir: dir.to_path_buf(),
            name: format!("{pid}.{pool}"),
            pid,
            state: parking_lot::Mutex::new(Published::default()),
        }
    }

    /// Publishes that `threads` threads wait in the pool's queue, the oldest since `oldest`.
    /// Writes only when that differs from what the file says; makes the file at the first
    /// wait.
    pub(crate) fn publish(&self, threads: usize, oldest: Option<Instant>) {
        let mut state = self.state.lock();
        let now = (threads, if threads == 0 { None } else { oldest });
        if state.last == now
            || matches!(state.failed, Some(at) if at.elapsed() < LIST_RETRY)
            || sys::pid() != self.pid
        {
            return;
        }
        if state.file.is_none() {
            if threads == 0 {
                return;
            }
            let made = super::queue::make_locked_file(
                &self.dir,
                &format!("{THREADS_STAGING_PREFIX}{}", self.name),
                &format!("{THREADS_PREFIX}{}", self.name),
            );
            match made {
                Some(made) => state.file = Some(made),
                None => {
                    state.failed = Some(Instant::now());
                    return;
                }
            }
        }
        let Some((_, file)) = &state.file else { return };
        let text = match now {
            (0, _) | (_, None) => Vec::new(),
            (threads, Some(since)) => {
                let ago = since.elapsed().as_millis() as u64;
                let start = match sys::boot_ms() {
                    Some(ms) => format!("b{}", ms.saturating_sub(ago)),
                    None => crate::clock::now_unix_ms().saturating_sub(ago).to_string(),
                };
                format!("{threads} {start}").into_bytes()
            }
        };
        let _ = sys::write_at(file, &padded(text, THREADS_LEN), 0);
        state.last = now;
    }
}

impl Drop for ThreadsFile {
    fn drop(&mut self) {
        if let Some((path, file)) = &self.state.get_mut().file
            && sys::pid() == self.pid
            && sys::same_file(path, file)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The process a threads file of name `name` belongs to.
#[cfg(any(test, feature = "__cli"))]
fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix(THREADS_PREFIX)?
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// Reads threads file `path` (named `name`): `Ok(None)` for one whose process waits for nothing
/// now; `Err(())` for an unlocked one, a killed process's leftover (removed here where it is
/// this user's: another user's file is theirs).
#[cfg(any(test, feature = "__cli"))]
pub(super) fn read_threads(path: &Path, name: &str) -> Result<Option<ThreadsWaiting>, ()> {
    let Some(pid) = pid_of(name) else {
        return Ok(None);
    };
    let Ok(file) = sys::open_regular_for_reading(path) else {
        return Ok(None);
    };
    if !is_locked(&file) {
        if sys::is_own_file(&file) {
            let _ = std::fs::remove_file(path);
        }
        return Err(());
    }
    // A live lock under a pid that names no process here: a process of another PID
    // namespace, whose pid means nothing here; its count still stands.
    let Some(raw) = read_start(&file, THREADS_LEN) else {
        return Ok(None);
    };
    let Some(text) = padded_text(&raw).ok().flatten() else {
        return Ok(None);
    };
    let mut parts = text.split_whitespace();
    let Some(threads) = parts.next().and_then(|t| t.parse::<usize>().ok()) else {
        return Ok(None);
    };
    let waited = parts
        .next()
        .and_then(|s| beat_age_ms(s.as_bytes()))
        .map_or(Duration::ZERO, |ms| Duration::from_millis(ms.max(0) as u64));
    Ok((threads > 0).then_some(ThreadsWaiting {
        pid,
        threads,
        waited,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_on_change_and_blanks_when_none_wait() {
        let dir = tempfile::tempdir().unwrap();
        let f = ThreadsFile::new(dir.path(), 7);
        let path = dir
            .path()
            .join(format!("{THREADS_PREFIX}{}.7", std::process::id()));
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        // Nobody waits: nothing is made.
        f.publish(0, None);
        assert!(!path.exists());
        let since = Instant::now() - Duration::from_millis(1500);
        f.publish(3, Some(since));
        let read = read_threads(&path, &name).unwrap().unwrap();
        assert_eq!((read.pid, read.threads), (std::process::id(), 3));
        assert!(
            read.waited >= Duration::from_millis(1400) && read.waited < Duration::from_secs(60),
            "{read:?}"
        );
        f.publish(0, None);
        assert_eq!(read_threads(&path, &name), Ok(None));
        drop(f);
        assert!(!path.exists(), "removed with its pool");
    }

    #[test]
    fn a_pool_whose_file_name_is_taken_publishes_under_another() {
        let dir = tempfile::tempdir().unwrap();
        // Another process made a directory at the name the pool's file would take.
        let plain = format!("{THREADS_PREFIX}{}.9", std::process::id());
        std::fs::create_dir(dir.path().join(&plain)).unwrap();
        let f = ThreadsFile::new(dir.path(), 9);
        f.publish(2, Some(Instant::now()));
        let status = crate::host::status(dir.path()).unwrap();
        assert_eq!(
            status
                .in_process
                .iter()
                .map(|t| (t.pid, t.threads))
                .collect::<Vec<_>>(),
            vec![(std::process::id(), 2)]
        );
        drop(f);
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left,
            vec![plain],
            "the pool's file is removed, the directory kept"
        );
    }

    #[test]
    fn an_unlocked_file_is_a_leftover() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("{THREADS_PREFIX}999999.1");
        let path = dir.path().join(&name);
        std::fs::write(&path, padded(b"5 b1".to_vec(), THREADS_LEN)).unwrap();
        assert_eq!(read_threads(&path, &name), Err(()));
        assert!(!path.exists());
    }
}
