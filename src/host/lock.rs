//! Probes of other processes' locks, always through a description opened for the purpose:
//! probing through a description that holds (or is taking) a lock of this process would
//! convert that lock, and the probe's unlock drop it.
//!
//! A probe that cannot be made (the file cannot be opened: another user's private directory,
//! no descriptor left; or the kernel refuses the lock call) has learned nothing, and every
//! caller reads it the conservative way: locked, in use. Never free: reading "cannot tell" as
//! "free" is how a permit's units were once given twice (see `docs/protocol.md`).

use std::fs::{File, TryLockError};
use std::path::Path;

use crate::sys;

/// What a probe of a file's lock found.
#[derive(Debug)]
pub(super) enum Probe {
    /// No other open file description holds a lock on it.
    Free,
    /// Another description holds a lock on it.
    Locked,
    /// The probe could not be made: nothing is known.
    Unknown(std::io::Error),
}

impl Probe {
    /// The conservative reading: locked unless it is known to be free.
    pub(super) fn maybe_locked(&self) -> bool {
        !matches!(self, Probe::Free)
    }
}

/// Whether some process may hold a lock on the file at `path`, probed through a description
/// opened for the purpose: true when it cannot be opened or probed (see the module docs).
pub(super) fn is_locked_at(path: &Path) -> bool {
    probe_at(path, Shared).maybe_locked()
}

use Mode::{Exclusive, Shared};

/// Which lock a probe tries: a shared one finds exclusive holders, an exclusive one finds any.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mode {
    Shared,
    Exclusive,
}

/// Probes the lock on the file at `path` through a description of its own.
pub(super) fn probe_at(path: &Path, mode: Mode) -> Probe {
    match sys::open_regular_for_reading(path) {
        Ok(file) => probe(&file, mode),
        Err(e) => Probe::Unknown(e),
    }
}

/// Probes the lock on `file`, which must hold no lock of this process: on one that does, the
/// probe would convert that lock and its unlock drop it.
fn probe(file: &File, mode: Mode) -> Probe {
    let tried = match mode {
        Shared => file.try_lock_shared(),
        Exclusive => file.try_lock(),
    };
    match tried {
        Ok(()) => {
            let _ = file.unlock();
            Probe::Free
        }
        Err(TryLockError::WouldBlock) => Probe::Locked,
        Err(TryLockError::Error(e)) => Probe::Unknown(e),
    }
}

/// Whether another open file description may hold a lock on `file` (probes with a shared
/// lock; true when the probe fails). Only for descriptions that hold no lock of this process.
pub(super) fn is_locked(file: &File) -> bool {
    probe(file, Shared).maybe_locked()
}

/// Whether a process uses the slot directory of layout file `path` (its users hold it locked
/// shared): probed with an exclusive lock through a description of its own, given back at
/// once. What cannot be probed is [`Probe::Unknown`], for the caller to read as in use.
pub(super) fn in_use(path: &Path) -> Probe {
    probe_at(path, Exclusive)
}
