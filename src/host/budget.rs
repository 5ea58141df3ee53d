//! The memory budget the processes of a directory convert declarations with.

use std::fs::TryLockError;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::queue::POLL_FIRST;
use super::record::{padded, padded_text, read_start};
use crate::sys;

/// The per-GPU memory budget every process using the directory converts declarations with:
/// the first budget a process of the directory's current users settled on (recorded in
/// `gpu0.budget`, which goes when a process finds the directory unused). A process with a
/// budget of its own records it if none is recorded, and otherwise adopts the recorded one,
/// saying so once when the two differ; a process without one adopts the recorded one.
///
/// Where no budget can be agreed on, the process converts with its own and says why, in one
/// line naming the record: the record is not a regular file (a FIFO, a directory or a
/// link is refused without blocking), holds no budget (a count [`is_budget`] refuses is no
/// GPU's), or stays locked past [`BUDGET_WAIT`] while blank (a locked record that holds a
/// budget is read anyway: one is only ever rewritten once nobody uses the directory).
pub(super) fn agree_on_budget(dir: &Path, own: Option<u64>) -> Option<u64> {
    let path = dir.join(BUDGET_FILE);
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
            dir.display()
        ));
        own
    };
    let file = match sys::open_lock_file(&path, sys::is_shared_dir(dir)) {
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
    let read = || {
        let raw = read_start(&file, BUDGET_LEN)?;
        Some(decode_budget(&raw))
    };
    let mut recorded = read();
    if !locked && let Some(Ok(Some(first))) = recorded {
        // A budget, once recorded, stays until nobody uses the directory, so it can be
        // read without the lock; read twice, in case the holder is writing it right now.
        std::thread::sleep(POLL_FIRST);
        let same = matches!(read(), Some(Ok(Some(again))) if again == first);
        if !same {
            recorded = Some(Ok(None));
        }
    }
    let agreed = match recorded {
        Some(Ok(Some(r))) => adopt_budget(dir, r, own),
        Some(Err(problem)) => unshared(format!(
            "ignoring the corrupt memory budget record {record} ({problem}; the next \
                 process that finds the directory unused clears it)"
        )),
        None => unshared(format!("cannot read the memory budget record {record}")),
        Some(Ok(None)) if !locked => {
            let by = match sys::lock_owner(&file) {
                Some(pid) => format!(" by pid {pid}"),
                None => String::new(),
            };
            unshared(format!(
                "the memory budget record {record} has been kept locked{by} for {}s without \
                     a budget in it (by a process stopped while it agreed on one, or one that \
                     is not this crate's)",
                BUDGET_WAIT.as_secs_f64()
            ))
        }
        // None recorded yet: ours, if it is one, is the directory's from now on.
        Some(Ok(None)) => match own {
            Some(bytes) if !is_budget(bytes) => unshared(format!(
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
fn adopt_budget(dir: &Path, recorded: u64, own: Option<u64>) -> Option<u64> {
    if let Some(own) = own
        && own != recorded
    {
        crate::notice::line(&format!(
            "slot directory {} budgets {} of GPU memory per GPU (set by a process using it \
                 now); this process's {} is not used, so that every process turns declarations \
                 into the same units. Give every process that shares the directory the same \
                 GPU_TEST_PERMIT_GPU_MEMORY",
            dir.display(),
            crate::config::format_bytes(recorded),
            crate::config::format_bytes(own),
        ));
    }
    Some(recorded)
}

/// The memory budget the directory's current users agreed on (see
/// [`HostSlots::agree_on_budget`]): bytes per GPU, or blank.
const BUDGET_FILE: &str = "gpu0.budget";
const BUDGET_LEN: usize = 64;
/// The least budget a record may hold ([`is_budget`]): 1 MiB.
const LEAST_BUDGET: u64 = 1 << 20;
/// How long a process waits for the budget record held locked by another before it converts
/// with its own budget.
const BUDGET_WAIT: Duration = Duration::from_secs(1);

/// The budget in a budget record: bytes, none (blank), or why it is corrupt.
fn decode_budget(raw: &[u8]) -> Result<Option<u64>, String> {
    let Some(text) = padded_text(raw)? else {
        return Ok(None);
    };
    match text.parse::<u64>() {
        Ok(b) if is_budget(b) => Ok(Some(b)),
        Ok(b) => Err(format!("{b} bytes {}", implausible_budget(b))),
        Err(_) => Err(format!("{text:?} is no byte count")),
    }
}

/// Whether `bytes` is a budget a record may hold: a GPU with less than 1 MiB is none, and a
/// record below it (a forged `1`) would make every memory declaration fail; one above
/// [`MAX_MEMORY`](crate::config::MAX_MEMORY), 1 PiB, would count every declaration as one unit.
fn is_budget(bytes: u64) -> bool {
    matches!(bytes, LEAST_BUDGET..=crate::config::MAX_MEMORY)
}

/// Why `bytes`, which [`is_budget`] refuses, is no GPU's budget.
fn implausible_budget(bytes: u64) -> &'static str {
    if bytes < LEAST_BUDGET {
        "is below 1 MiB, no GPU's budget"
    } else {
        "is above 1 PiB, no GPU's budget"
    }
}

/// Blanks the budget record of a directory nobody uses (its users' budget goes with them),
/// unless `in_use` finds a slot of it held (see `agree_on_layout`). A
/// blank record rather than none: in a sticky shared directory only its owner could remove it.
/// Anything but a regular file at its name is left alone (without blocking on a FIFO): the
/// next process to use the directory names it.
pub(super) fn forget_budget(dir: &Path, in_use: impl FnOnce() -> bool) {
    let path = dir.join(BUDGET_FILE);
    if let Ok(file) = sys::open_regular_for_reading(&path) {
        drop(file);
        // Its users are still there, holding slots without the layout.
        if in_use() {
            return;
        }
        if let Ok(file) = sys::open_lock_file(&path, sys::is_shared_dir(dir)) {
            let _ = sys::write_at(&file, &[b' '; BUDGET_LEN], 0);
        }
    }
}
