//! Who holds and who waits, read without taking anything.

use std::fs::TryLockError;
use std::io;
use std::path::{Path, PathBuf};

use super::layout::{LAYOUT_LEN, Layout};
use super::lock::is_locked;
use super::queue::{
    Liveness, THREADS_PREFIX, WAIT_PREFIX, head_liveness, order_key, read_head, wait_entry,
};
use super::record::{HolderRecord, read_record, read_start};
use super::threads::{ThreadsWaiting, read_threads};
use crate::sys;

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
    /// Every slot of the directory's layout, by index (one whose file no process has made
    /// yet is free: a process makes a slot's file at the slot's first use), and any other
    /// slot file found.
    pub slots: Vec<SlotStatus>,
    /// Requests waiting for slots now, one per waiting process (the threads of one process
    /// queue inside it, behind this one), in the queue's order: by when each began to wait on
    /// the host's boot clock; requests whose records have no time of this boot on it (an
    /// earlier version's) after those, by their wall-clock time.
    pub waiters: Vec<HolderRecord>,
    /// Per entry of [`waiters`](Self::waiters), whether it keeps its turn, and if not, why
    /// ([`Liveness`]): one that lost it holds nobody back.
    pub waiter_liveness: Vec<Liveness>,
    /// Files named like slot or wait files that were not read, such as a FIFO or a file this
    /// user may not open, by name.
    pub skipped: Vec<SkippedFile>,
    /// The layout the directory serves (see the [module docs](crate::host)), if it has one.
    pub layout: Option<Layout>,
    /// The head of the cross-process queue, when a request waits at the gate.
    pub head: Option<QueueHead>,
    /// Threads waiting inside live processes, in their in-process queues (behind the request
    /// their process has in [`waiters`](Self::waiters), if any, or the permits it holds),
    /// per pool that has such threads, longest waiting first.
    pub in_process: Vec<ThreadsWaiting>,
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
/// A missing directory has no slots. Leftover wait records of killed processes of this user,
/// and their files of threads waiting in-process, are removed; another user's are left to them.
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
        in_process: Vec::new(),
    };
    let mut waiting = Vec::new();
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
        if name.starts_with(THREADS_PREFIX) {
            if let Ok(Some(t)) = read_threads(&path, &name) {
                out.in_process.push(t);
            }
            continue;
        }
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
                let liveness = Liveness::judge(w.record.pid, w.beat_age_ms);
                (w.record, liveness)
            })),
            // A killed waiter's leftover, removed where it is this user's: a file of another
            // user is theirs (one they made at a name a waiter would take, say).
            None if sys::is_own_file(&file) => {
                let _ = std::fs::remove_file(&path);
            }
            None => {}
        }
    }
    out.slots.sort_by_key(|s| s.index);
    // In the queue's order, as the waiters themselves read it.
    let now = crate::clock::boot_now();
    waiting.sort_by_key(|(w, _)| order_key(w, now));
    (out.waiters, out.waiter_liveness) = waiting.into_iter().unzip();
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    out.in_process
        .sort_by(|a, b| b.waited.cmp(&a.waited).then(a.pid.cmp(&b.pid)));
    if let Ok(file) = sys::open_regular_for_reading(&dir.join("gpu0.layout")) {
        out.layout = read_start(&file, LAYOUT_LEN).and_then(|b| Layout::decode(&b).ok().flatten());
    }
    // A process makes a slot's file at the slot's first use: a slot of the layout without
    // one has never been taken, and is free.
    if let Some(layout) = out.layout {
        let skipped: Vec<&Path> = out.skipped.iter().map(|f| f.path.as_path()).collect();
        for index in 0..layout.slots() {
            let listed = out.slots.iter().any(|s| s.index == index);
            if !listed && !skipped.contains(&dir.join(format!("gpu0.slot{index}")).as_path()) {
                out.slots.push(SlotStatus {
                    index,
                    held: false,
                    holder: None,
                    owner: None,
                    owner_stopped: false,
                });
            }
        }
        out.slots.sort_by_key(|s| s.index);
    }
    if let Ok(gate) = sys::open_regular_for_reading(&dir.join("gpu0.gate"))
        && is_locked(&gate)
    {
        out.head = read_head(&gate).map(|(request, beat)| {
            let liveness = head_liveness(dir, &request, beat, None);
            QueueHead {
                stopped: liveness == Liveness::Stopped,
                liveness,
                request,
            }
        });
    }
    Ok(out)
}

/// One GPU's memory as NVML reports it now ([`gpu_memory`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuMemoryStatus {
    /// The GPU's memory, bytes.
    pub total: u64,
    /// Bytes no process has allocated.
    pub free: u64,
    /// The processes with a context on the GPU, most memory first.
    pub processes: Vec<GpuProcessStatus>,
}

/// A process on a GPU, as [`gpu_memory`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuProcessStatus {
    /// Its pid (in the host's pid namespace: NVML's).
    pub pid: u32,
    /// The GPU memory it uses, bytes; `None` where the driver cannot tell.
    pub used: Option<u64>,
    /// Its name, where NVML or the system tells it.
    pub name: Option<String>,
    /// The permit holder, among those asked about, that this process is or descends from
    /// (`gpu-test-permit run`'s command descends from `run`); `None`: it holds no permit.
    pub holder: Option<u32>,
}

/// CUDA device `ordinal`'s memory now, as NVML reports it (`libnvidia-ml.so.1`, loaded at the
/// first call), with each process on it and which of `holders` (pids of permit holders, as
/// [`status`] finds them) it belongs to. `None` without NVML, when a call fails, or when NVML
/// does not answer within 2 s. `ordinal` is a CUDA ordinal of this process (after its
/// `CUDA_VISIBLE_DEVICES`).
pub fn gpu_memory(ordinal: usize, holders: &[u32]) -> Option<GpuMemoryStatus> {
    let memory = crate::live::memory_within(ordinal, crate::live::ANSWER_WITHIN)?;
    let mut processes: Vec<GpuProcessStatus> = memory
        .processes
        .iter()
        .map(|p| GpuProcessStatus {
            pid: p.pid,
            used: p.used,
            name: crate::live::process_name(p.pid),
            holder: sys::ancestor_among(p.pid, holders),
        })
        .collect();
    processes.sort_by(|a, b| b.used.cmp(&a.used).then(a.pid.cmp(&b.pid)));
    Some(GpuMemoryStatus {
        total: memory.total,
        free: memory.free,
        processes,
    })
}
