//! Probes of other processes' locks, always through a description opened for the purpose:
//! probing through a description that holds (or is taking) a lock of this process would
//! convert that lock, and the probe's unlock drop it.

use std::fs::{File, TryLockError};
use std::path::Path;

use crate::sys;

/// Whether some process holds a lock on the file at `path`, probed through a description
/// opened for the purpose (false when it cannot be opened).
pub(super) fn is_locked_at(path: &Path) -> bool {
    sys::open_regular_for_reading(path).is_ok_and(|f| is_locked(&f))
}

/// Whether another open file description holds a lock on `file` (probes with a shared lock).
/// Only for descriptions that hold no lock of this process: on one that does, the probe would
/// convert that lock and its unlock drop it.
pub(super) fn is_locked(file: &File) -> bool {
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}

/// Whether a process uses the slot directory of layout file `path` (its users hold it locked
/// shared): probed with an exclusive lock through a description of its own, given back at
/// once.
pub(super) fn in_use(path: &Path) -> bool {
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
