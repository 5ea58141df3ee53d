//! Permits inherited from a parent process, and the directory in which the processes inside
//! one share it.

use std::fs::{File, TryLockError};
use std::path::PathBuf;

use super::layout::{Layout, slot_index, slot_name};
use super::lock::{Probe, in_use, is_locked_at};
use crate::sys;

/// Why a permit inherited from a parent process cannot be used.
#[derive(Debug)]
pub(crate) enum InheritError {
    /// Its slots are free (the parent has released them), or held by a process that is not
    /// an ancestor of this one: the variable is a leftover of another run. The process may
    /// take permits of its own.
    Leftover(String),
    /// Its slots are held, but not through descriptors this process has: taking slots beside
    /// its ancestor's permit would break the cap, so the process takes none.
    Unusable(String),
}

/// Checks a permit inherited from a parent process (see
/// [`InheritedPermit`](crate::config::InheritedPermit)): each slot file is held, each
/// descriptor is open, is the slot file of its index in the named directory (same device and
/// inode, so neither a reused descriptor number nor a replaced file passes), and holds the
/// lock through that very description. Returns this process's own descriptors of those
/// descriptions, which keep the slots locked while it lives.
///
/// # Errors
///
/// Why the inherited permit cannot be used, completing "the inherited permit ...".
pub(crate) fn adopt_inherited(
    permit: &crate::config::InheritedPermit,
) -> Result<Vec<File>, InheritError> {
    let mut files = Vec::with_capacity(permit.slots.len());
    for slot in &permit.slots {
        let path = permit.dir.join(slot_name(slot.index));
        // Through a description of our own: held by somebody at all?
        if !is_locked_at(&path) {
            return Err(InheritError::Leftover(format!(
                "names slot file {}, which nobody holds now (its holder has released it)",
                path.display()
            )));
        }
        let held_elsewhere = |what: String| {
            // Held by a process that is not an ancestor: not this process's permit at all.
            let owner = match sys::open_regular_for_reading(&path) {
                Ok(f) => sys::lock_owner(&f),
                Err(_) => None,
            };
            // (A dead owner's lock is kept by its descendants, which may be this process's
            // ancestors: not a leftover.)
            if let Some(owner) = owner
                && sys::process_is_visible(owner)
                && sys::is_self_or_ancestor(owner) == Some(false)
            {
                return InheritError::Leftover(format!(
                    "names slot file {}, which another process holds (pid {owner}, not an \
                     ancestor of this one): a leftover of another run",
                    path.display()
                ));
            }
            InheritError::Unusable(format!(
                "names descriptor {fd} for slot file {path}, which is held now, but {what}. A \
                 process between `gpu-test-permit run` and this one closed the descriptor: \
                 keep it open for the processes that use GPUs (Python's subprocess closes \
                 descriptors unless told `pass_fds=({fd},)` or `close_fds=False`; other \
                 harnesses have a similar setting). A permit of this process's own beside its \
                 ancestor's would break the cap, so this process takes none",
                fd = slot.fd,
                path = path.display()
            ))
        };
        let file = match sys::inherited_file(slot.fd, (slot.dev, slot.ino)) {
            Ok(file) => file,
            Err(e) => {
                return Err(held_elsewhere(format!(
                    "this process does not have it ({e})"
                )));
            }
        };
        if !sys::same_file(&path, &file) {
            return Err(held_elsewhere(
                "that descriptor is not this slot file (removed or replaced)".into(),
            ));
        }
        // Locking it again through our descriptor converts our own lock; another
        // description's lock refuses.
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(held_elsewhere(
                    "another open file of it holds the lock, not that descriptor".into(),
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(InheritError::Unusable(format!("{}: {e}", path.display())));
            }
        }
        files.push(file);
    }
    Ok(files)
}

/// The directory in which the processes working inside `permit` share its units:
/// `gpu0.slot<first>.inside-<uid>` beside the parent's slots (private to the user that made
/// it, so one per user), where `<first>` is the permit's first slot. Only one process tree
/// holds that slot at a time, so the directory is that tree's alone while it uses it.
pub(crate) fn share_dir(permit: &crate::config::InheritedPermit) -> PathBuf {
    let mut first = match permit.slots.first() {
        Some(s) => s.index,
        None => 0,
    };
    for s in &permit.slots {
        first = first.min(s.index);
    }
    permit
        .dir
        .join(sys::per_user_name(&format!("{}.inside", slot_name(first))))
}

/// Another user's directory for the processes inside `permit` ([`share_dir`] is one per
/// user) that is in use now, or may be, if there is one: with why it could not be told,
/// where it could not (see [`let_other_users_probe`]). Only one process tree holds a slot at
/// a time, so its users are inside the same permit: two such directories at once would give
/// that permit's units twice. To be checked once this process uses its own, so that of two
/// processes that start at once, at least one sees the other.
pub(crate) fn other_share_dir_in_use(
    permit: &crate::config::InheritedPermit,
) -> Option<(PathBuf, Option<String>)> {
    let own = share_dir(permit);
    let prefix = own.file_name()?.to_str()?.rsplit_once('-')?.0.to_string() + "-";
    let entries = match std::fs::read_dir(&permit.dir) {
        Ok(entries) => entries,
        // Nothing known of the others: in use, as far as this process can tell.
        Err(e) => return Some((permit.dir.clone(), Some(format!("cannot list it: {e}")))),
    };
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let p = entry.path();
        if p == own {
            continue;
        }
        let Some(name) = p.file_name() else { continue };
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) {
            continue;
        }
        match in_use(&p.join("gpu0.layout")) {
            Probe::Free => {}
            Probe::Locked => return Some((p, None)),
            // Made empty and never used, by a process that died at once: nobody in it.
            Probe::Unknown(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Probe::Unknown(e) => return Some((p, Some(e.to_string()))),
        }
    }
    None
}

/// Lets other users probe whether the processes inside a permit use the share directory
/// `dir` (this user's [`share_dir`]): the directory may be entered (not listed) and its
/// layout file read by anyone, so that [`other_share_dir_in_use`] of another user's process
/// inside the same permit can see it in use rather than be unable to tell.
pub(crate) fn let_other_users_probe(dir: &std::path::Path) {
    sys::let_others_probe(dir, &dir.join("gpu0.layout"));
}

/// The slot directory that `dir` is a share directory in ([`share_dir`], nested as deep as
/// `run`s inside `run`s go), or `dir` itself: the directory whose N is the host's.
pub(crate) fn outermost_dir(dir: &std::path::Path) -> PathBuf {
    let mut dir = dir;
    while let Some(name) = dir.file_name()
        && let Some(name) = name.to_str()
        && let Some(parent) = dir.parent()
    {
        let is_share = match name.find(".inside") {
            Some(at) => slot_index(&name[..at]).is_some(),
            None => false,
        };
        if !is_share {
            break;
        }
        dir = parent;
    }
    dir.to_path_buf()
}

/// How the processes inside `permit` lay out their shared slots: as many as the parent holds
/// on each of its GPUs, over those GPUs, for a shared permit; the parent's whole layout for an
/// exclusive one.
pub(crate) fn share_layout(permit: &crate::config::InheritedPermit) -> Layout {
    if permit.exclusive {
        Layout {
            per_gpu: permit.per_gpu,
            gpus: permit.gpus,
        }
    } else {
        // As many slots as the parent holds on each of its GPUs; shared slot `i` stands for
        // one of the parent's slots on its `i % k`-th GPU.
        let gpus = permit.devices().len().max(1);
        Layout {
            per_gpu: (permit.slots.len() / gpus).max(1),
            gpus,
        }
    }
}
