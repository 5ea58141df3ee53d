//! This process's slot files: each opened (and created, where no process made it yet) at its
//! first use, with a descriptor kept in reserve for it until then; and the locks on them,
//! taken and given back.
//!
//! A test process under nextest takes one permit: it opens the one slot file it locks, not
//! all N of them (two system calls, a path walk and a `stat`, for every slot it never
//! touches). The reserve keeps the promise that opening all of them up front kept: a process
//! that uses up its descriptors after its pool is made (a test, a GPU driver) can still open
//! its slots. The reserve is copies of the layout file's descriptor (`dup`: no path walk);
//! a slot opened when descriptors are plentiful gives one copy back, so a process holds as
//! many descriptors as it did with every slot open, and one that finds none left frees a copy
//! and tries again.
//!
//! The process that lays the directory out makes every slot file ([`Slots::make_every`]), so
//! that they belong to its user as the layout file does: in a directory shared through a group,
//! a file another member made may be closed to an owner outside the group. A waiter opens every
//! slot before it watches them for changes (inotify watches names that exist); a permit of
//! every slot opens them all as it takes them.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::error::{HostError, io_err};
use super::layout::{Layout, fd_budget_counted, slot_name};
use super::record::RECORD_LEN;
use crate::sys;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) path: PathBuf,
    /// Set at the slot's first use by this process.
    file: OnceLock<File>,
    /// Held by a permit of this process: the lock belongs to the shared open file, so the
    /// kernel would grant it again to another thread of ours.
    pub(super) held: AtomicBool,
    /// [`sys::forks`] as read just before the lock was taken: begun and finished.
    forks_begun: AtomicU64,
    forks_finished: AtomicU64,
    /// Whether the held lock's description was passed on to a command (`pass_to`).
    passed: AtomicBool,
}

impl Slot {
    pub(super) fn new(path: PathBuf) -> Slot {
        Slot {
            path,
            file: OnceLock::new(),
            held: AtomicBool::new(false),
            forks_begun: AtomicU64::new(0),
            forks_finished: AtomicU64::new(0),
            passed: AtomicBool::new(false),
        }
    }

    /// Marks the held lock's description as passed on to another process.
    pub(super) fn pass_on(&self) {
        self.passed.store(true, Ordering::Release);
    }

    /// Whether another process may share the held lock's description: it was passed on, or
    /// this process has forked since the lock was taken, or is forking now.
    fn may_be_shared(&self) -> bool {
        let (begun, finished) = sys::forks();
        self.passed.load(Ordering::Acquire)
            || begun != finished
            || begun != self.forks_begun.load(Ordering::Acquire)
            || finished != self.forks_finished.load(Ordering::Acquire)
    }

    /// The slot's file, if this process has opened it: always for a slot it holds.
    pub(super) fn opened(&self) -> Option<&File> {
        self.file.get()
    }
}

/// The descriptors kept for the slots not opened yet, one copy of `layout_file` per slot, and
/// one more for letting go of a slot ([`Slots::release`] opens the slot's file again).
fn reserve(
    dir: &Path,
    layout: Layout,
    layout_file: &File,
    slots: usize,
) -> Result<Vec<File>, HostError> {
    let path = dir.join("gpu0.layout");
    let copy = || layout_file.try_clone();
    let mut files = Vec::new();
    for _ in 0..slots {
        files.push(counted(dir, layout, &path, &copy)?);
    }
    // The one for letting go.
    files.push(counted(dir, layout, &path, &copy)?);
    Ok(files)
}

/// Opens (creating if needed) a lock file of `dir`, as [`counted`] does out of descriptors.
pub(super) fn open_counted(
    dir: &Path,
    layout: Layout,
    path: &Path,
    shared: bool,
) -> Result<File, HostError> {
    counted(dir, layout, path, &|| sys::open_lock_file(path, shared))
}

/// Opens (creating if needed) a lock file of `dir` that only its owner writes
/// ([`sys::open_owner_file`]), as [`counted`] does out of descriptors; with whether this
/// process may write it.
pub(super) fn open_owner_counted(
    dir: &Path,
    layout: Layout,
    path: &Path,
    shared: bool,
) -> Result<(File, bool, sys::Writer), HostError> {
    let opened = std::cell::Cell::new((true, sys::Writer::Unknown));
    let file = counted(dir, layout, path, &|| {
        let (file, writable, writer) = sys::open_owner_file(path, shared)?;
        opened.set((writable, writer));
        Ok(file)
    })?;
    let (writable, writer) = opened.get();
    Ok((file, writable, writer))
}

/// Opens a lock file of `dir` that another process made, as [`counted`] does out of
/// descriptors; an error where there is none.
pub(super) fn open_existing_counted(
    dir: &Path,
    layout: Layout,
    path: &Path,
) -> Result<File, HostError> {
    counted(dir, layout, path, &|| sys::open_existing_lock_file(path))
}

/// Makes a descriptor for the file at `path` with `make`; out of descriptors, it says how many
/// the layout needs and the limits, or raises the soft limit where the hard one allows and
/// tries once more, as a layout refused up front would.
fn counted(
    dir: &Path,
    layout: Layout,
    path: &Path,
    make: &dyn Fn() -> std::io::Result<File>,
) -> Result<File, HostError> {
    let made = match make() {
        Err(e) if sys::is_too_many_open_files(&e) => {
            fd_budget_counted(dir, layout, sys::Counted::Exhausted)?;
            make()
        }
        made => made,
    };
    match made {
        Ok(file) => Ok(file),
        Err(e) => Err(io_err(path, e)),
    }
}

/// The slots of one directory for this process, with the descriptors kept for those not
/// opened yet.
#[derive(Debug)]
pub(super) struct Slots {
    dir: PathBuf,
    layout: Layout,
    /// Whether the directory is shared by several users (the mode new files get).
    shared: bool,
    slots: Vec<Slot>,
    /// One descriptor for each slot not opened yet.
    reserve: parking_lot::Mutex<Vec<File>>,
}

impl Slots {
    /// The slots of `layout` in `dir`, none opened yet, with a copy of `layout_file`'s
    /// descriptor kept for each.
    pub(super) fn new(
        dir: &Path,
        layout: Layout,
        shared: bool,
        layout_file: &File,
    ) -> Result<Slots, HostError> {
        let mut slots = Vec::with_capacity(layout.slots());
        for i in 0..layout.slots() {
            slots.push(Slot::new(dir.join(slot_name(i))));
        }
        Ok(Slots {
            dir: dir.to_path_buf(),
            layout,
            shared,
            slots,
            reserve: parking_lot::Mutex::new(reserve(dir, layout, layout_file, layout.slots())?),
        })
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Slot> {
        self.slots.iter()
    }

    /// Slot `i`'s file, opened now if this process has not opened it yet.
    pub(super) fn file_now(&self, i: usize) -> Result<&File, HostError> {
        let slot = &self.slots[i];
        if let Some(file) = slot.opened() {
            return Ok(file);
        }
        let mut made_room = false;
        let file = loop {
            match sys::open_lock_file(&slot.path, self.shared) {
                Ok(file) => {
                    // Opened beside the reserve: give a copy back (unless one made room).
                    if !made_room {
                        drop(self.reserve.lock().pop());
                    }
                    break file;
                }
                // Out of descriptors: a copy kept for this slot makes room.
                Err(e) if sys::is_too_many_open_files(&e) => {
                    made_room = true;
                    if self.reserve.lock().pop().is_none() {
                        break open_counted(&self.dir, self.layout, &slot.path, self.shared)?;
                    }
                }
                Err(e) => return Err(io_err(&slot.path, e)),
            }
        };
        // Another thread of this process may have opened it meanwhile: the first one stays.
        Ok(slot.file.get_or_init(|| file))
    }

    /// Locks slot `i` for this process if it is free: `Ok(true)` when it locked it now (and
    /// marked it held), `Ok(false)` when a holder (this process included) has it.
    pub(super) fn lock(&self, i: usize) -> Result<bool, HostError> {
        let slot = &self.slots[i];
        if slot.held.load(Ordering::Acquire) {
            return Ok(false);
        }
        let file = self.file_now(i)?;
        // Read before the lock is taken: a fork after it counts.
        sys::watch_forks();
        let (begun, finished) = sys::forks();
        match file.try_lock() {
            Ok(()) => {
                slot.forks_begun.store(begun, Ordering::Release);
                slot.forks_finished.store(finished, Ordering::Release);
                slot.passed.store(false, Ordering::Release);
                slot.held.store(true, Ordering::Release);
                Ok(true)
            }
            Err(TryLockError::WouldBlock) => Ok(false),
            Err(TryLockError::Error(e)) => Err(io_err(&slot.path, e)),
        }
    }

    /// Gives back slots taken by a request that could not get all it asked for (or locked
    /// for a moment to see that they are free). Nothing was written to them, and nobody is
    /// woken: the other waiters' own re-checks cover the moment. Unlocked rather than let go
    /// ([`Slots::release`]): these descriptions never carried a grant, so no other process
    /// works inside a permit through them (a child forked in those microseconds refuses
    /// requests of its own).
    pub(super) fn unlock_unrecorded(&self, slots: &[usize]) {
        for &i in slots {
            let slot = &self.slots[i];
            if let Some(file) = slot.opened() {
                let _ = file.unlock();
            }
            slot.held.store(false, Ordering::Release);
        }
    }

    /// Takes `units` free slots of one GPU now, or none: trying GPUs in order, each GPU's slots
    /// from every `step`-th slot on (`step` 1: any slots, the lowest free first). The records
    /// are written by the caller.
    pub(super) fn take_in_order(
        &self,
        units: usize,
        step: usize,
    ) -> Result<Option<Vec<usize>>, HostError> {
        for gpu in 0..step {
            let mut got = Vec::with_capacity(units);
            for i in (gpu..self.slots.len()).step_by(step) {
                if got.len() == units {
                    break;
                }
                match self.lock(i) {
                    Ok(true) => got.push(i),
                    Ok(false) => {}
                    Err(e) => {
                        self.unlock_unrecorded(&got);
                        return Err(e);
                    }
                }
            }
            if got.len() < units {
                self.unlock_unrecorded(&got);
                continue;
            }
            return Ok(Some(got));
        }
        Ok(None)
    }

    /// Frees slots held by this process: each holder record blanked, and each lock ended for
    /// this process. Where another process may share the lock's description (a command the
    /// permit was passed to and its background jobs, a child forked without `exec` while the
    /// lock was held), this process's share is let go ([`sys::let_go`]): the description is
    /// closed here, never unlocked, and the others' work stays inside the permit until they
    /// end. Only a description nobody else can share (never passed on, no fork since the lock
    /// was taken) is unlocked, which costs one system call instead of four. Where the slot
    /// file cannot be opened again (out of descriptors, the directory removed), the slot stays
    /// held by this process until it exits, and says so: never a lock ended under a process
    /// that shares it.
    pub(super) fn release(&self, slots: &[usize]) {
        let blank = [b' '; RECORD_LEN];
        for &i in slots {
            let slot = &self.slots[i];
            if let Some(file) = slot.opened() {
                let _ = sys::write_at(file, &blank, 0);
                if !slot.may_be_shared() && file.unlock().is_ok() {
                    slot.held.store(false, Ordering::Release);
                    continue;
                }
                let let_go = loop {
                    match sys::let_go(file, &slot.path, self.shared) {
                        // Out of descriptors: the copy kept for letting go makes room, or a
                        // soft limit raised where the hard one allows.
                        Err(e) if sys::is_too_many_open_files(&e) => {
                            if self.reserve.lock().pop().is_some() {
                                continue;
                            }
                            break match fd_budget_counted(
                                &self.dir,
                                self.layout,
                                sys::Counted::Exhausted,
                            ) {
                                Ok(()) => sys::let_go(file, &slot.path, self.shared),
                                Err(_) => Err(e),
                            };
                        }
                        done => break done,
                    }
                };
                if let Err(e) = let_go {
                    crate::notice::line(&format!(
                        "cannot let go of slot {} ({e}): it stays held by this process (pid \
                         {}) until it exits, so that no process that shares its lock loses it",
                        slot.path.display(),
                        sys::pid()
                    ));
                    continue;
                }
            }
            slot.held.store(false, Ordering::Release);
        }
    }

    /// Makes every slot's file that does not exist yet, as far as it can, without keeping it
    /// open (what cannot be made is said by the acquisition that meets it).
    pub(super) fn make_every(&self) {
        for slot in &self.slots {
            // With its holder record's space, while the disk has it.
            if let Ok(file) = sys::open_lock_file(&slot.path, self.shared) {
                let _ = sys::reserve(&file, RECORD_LEN as u64);
            }
        }
    }

    /// Opens every slot not opened yet, as far as it can (before watching them all).
    pub(super) fn open_every(&self) {
        for i in 0..self.slots.len() {
            let _ = self.file_now(i);
        }
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Slot;

    fn index(&self, i: usize) -> &Slot {
        &self.slots[i]
    }
}
