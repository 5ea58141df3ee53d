//! This process's slot files: each opened (and created, where no process made it yet) at its
//! first use, with a descriptor kept in reserve for it until then.
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
//! A waiter opens every slot before it watches them for changes (inotify watches names that
//! exist); a permit of every slot opens them all as it takes them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

use super::error::{HostError, io_err};
use super::layout::{Layout, fd_budget_counted};
use crate::sys;

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) path: PathBuf,
    /// Set at the slot's first use by this process.
    file: OnceLock<File>,
    /// Held by a permit of this process: the lock belongs to the shared open file, so the
    /// kernel would grant it again to another thread of ours.
    pub(super) held: AtomicBool,
}

impl Slot {
    pub(super) fn new(path: PathBuf) -> Slot {
        Slot {
            path,
            file: OnceLock::new(),
            held: AtomicBool::new(false),
        }
    }

    /// The slot's file, if this process has opened it: always for a slot it holds.
    pub(super) fn opened(&self) -> Option<&File> {
        self.file.get()
    }
}

/// The descriptors kept for the slots not opened yet: one copy of `layout_file` per slot.
fn reserve(
    dir: &Path,
    layout: Layout,
    layout_file: &File,
    slots: usize,
) -> Result<Vec<File>, HostError> {
    let mut reserve = Vec::with_capacity(slots);
    for _ in 0..slots {
        let copy = match layout_file.try_clone() {
            Err(e) if sys::is_too_many_open_files(&e) => {
                fd_budget_counted(dir, layout, sys::Counted::Exhausted)?;
                layout_file.try_clone()
            }
            copied => copied,
        };
        reserve.push(copy.map_err(io_err(&dir.join("gpu0.layout")))?);
    }
    Ok(reserve)
}

/// Opens (creating if needed) a lock file of `dir`; out of descriptors, it says how many the
/// layout needs and the limits, or raises the soft limit where the hard one allows and tries
/// again, as a layout refused up front would.
pub(super) fn open_counted(
    dir: &Path,
    layout: Layout,
    path: &Path,
    shared: bool,
) -> Result<File, HostError> {
    match sys::open_lock_file(path, shared) {
        Err(e) if sys::is_too_many_open_files(&e) => {
            fd_budget_counted(dir, layout, sys::Counted::Exhausted)?;
            sys::open_lock_file(path, shared)
        }
        opened => opened,
    }
    .map_err(io_err(path))
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
        Ok(Slots {
            dir: dir.to_path_buf(),
            layout,
            shared,
            slots: (0..layout.slots())
                .map(|i| Slot::new(dir.join(format!("gpu0.slot{i}"))))
                .collect(),
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
        let file = loop {
            match sys::open_lock_file(&slot.path, self.shared) {
                Ok(file) => {
                    // Opened beside the reserve: give a copy back.
                    drop(self.reserve.lock().pop());
                    break file;
                }
                // Out of descriptors: a copy kept for this slot makes room.
                Err(e) if sys::is_too_many_open_files(&e) => {
                    if self.reserve.lock().pop().is_none() {
                        break open_counted(&self.dir, self.layout, &slot.path, self.shared)?;
                    }
                }
                Err(e) => return Err(io_err(&slot.path)(e)),
            }
        };
        // Another thread of this process may have opened it meanwhile: the first one stays.
        Ok(slot.file.get_or_init(|| file))
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
