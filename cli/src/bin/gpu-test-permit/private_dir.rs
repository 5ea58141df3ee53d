//! The private directories of `find-gpu-tests` (its run's files) and of `watch` and `run
//! --watch` (the loader's log of the watched command): `gpu-test-permit-<what>-<pid>-<n>` in
//! the temporary directory, made so only this user can enter them, removed when dropped.
//!
//! A process killed outright (SIGKILL, the OOM killer, a CI job's timeout) removes nothing, and
//! `watch` runs once per test process: left alone, such directories pile up in `/tmp`. So each
//! one's `owner` file is locked for as long as its process lives, and making a directory first
//! removes this user's directories of the same kind that nobody holds.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::report::process_is_visible;

/// The file whose lock says that the directory's process lives.
const OWNER: &str = "owner";

/// How long a directory must have been left unchanged before it is removed for holding no
/// lock: its process locks `owner` microseconds after making it, so only a process stopped in
/// between (and then given its directory back only to find it gone) could lose it.
const LEFT_FOR: Duration = Duration::from_secs(60);

/// A private directory, removed when dropped; see the [module](self).
#[derive(Debug)]
pub(crate) struct PrivateDir {
    path: PathBuf,
    /// Locked while this lives.
    owner: Option<File>,
}

impl PrivateDir {
    /// A new directory `gpu-test-permit-<what>-<pid>-<n>` in the temporary directory, only
    /// this user can enter, after removing the ones of the same `what` that killed processes
    /// of this user left behind.
    pub(crate) fn new(what: &str) -> Result<PrivateDir, String> {
        let base = std::env::temp_dir();
        remove_left_behind(&base, what);
        let mut last = None;
        for attempt in 0..16 {
            let path = base.join(format!(
                "gpu-test-permit-{what}-{}-{attempt}",
                std::process::id()
            ));
            #[cfg_attr(not(unix), allow(unused_mut))]
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&path) {
                Ok(()) => {
                    return make_owner(&path)
                        .map(|owner| PrivateDir {
                            path: path.clone(),
                            owner: Some(owner),
                        })
                        .map_err(|e| {
                            let _ = std::fs::remove_dir_all(&path);
                            format!("cannot create {}: {e}", path.join(OWNER).display())
                        });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(format!(
            "cannot create a directory in {}: {}",
            base.display(),
            last.map_or_else(String::new, |e| e.to_string())
        ))
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Unlocked first: a file still open cannot be removed on Windows.
        drop(self.owner.take());
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Makes `dir`'s owner file and locks it. Where the file system takes no locks (some network
/// file systems) the directory goes unheld, and is still kept: a later process cannot lock
/// its owner file either, which [`remove_left_behind`] takes as held.
fn make_owner(dir: &Path) -> io::Result<File> {
    let owner = File::create_new(dir.join(OWNER))?;
    let _ = owner.try_lock();
    Ok(owner)
}

/// Removes this user's `gpu-test-permit-<what>-<pid>-<n>` directories in `base` whose process
/// is gone: unchanged for [`LEFT_FOR`], with an `owner` file nobody holds locked (or, made
/// before directories had one, with no process `pid` left). Best effort: whatever cannot be
/// read or removed is left as it is, and so is a directory whose `owner` is not a regular
/// file (nothing here opens what could block).
fn remove_left_behind(base: &Path, what: &str) {
    let prefix = format!("gpu-test-permit-{what}-");
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        // Not followed: a link there is not one of these directories.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let unchanged_for = meta.modified().ok().and_then(|m| m.elapsed().ok());
        if !meta.is_dir() || !mine(&meta) || unchanged_for.is_none_or(|age| age < LEFT_FOR) {
            continue;
        }
        let owner = path.join(OWNER);
        // Only a regular file is ours: a FIFO (or a device, a socket, a link) at the name
        // would block or mislead the open that locks it, so its directory is left alone.
        // Opened without following a link and without blocking all the same: the name may
        // change between the look and the open.
        let gone = match std::fs::symlink_metadata(&owner) {
            Ok(meta) if !meta.file_type().is_file() => false,
            Ok(_) => match gpu_test_permit::__private::open_regular_for_reading(&owner) {
                // Kept where it is held, or where the file system takes no locks.
                Ok(owner) => owner.try_lock().is_ok(),
                Err(_) => false,
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => !process_is_visible(pid),
            Err(_) => false,
        };
        if gone {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(unix)]
fn mine(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    meta.uid() == unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn mine(_: &std::fs::Metadata) -> bool {
    // The temporary directory is the user's own.
    true
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn age(dir: &Path, by: Duration) {
        let then = std::time::SystemTime::now() - by;
        File::open(dir).unwrap().set_modified(then).unwrap();
    }

    #[test]
    fn removes_only_what_nobody_holds_and_was_left_long_enough() {
        let base = tempfile::tempdir().unwrap();
        let make = |name: &str, owner: bool, old: bool| {
            let dir = base.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("ld.1"), b"log").unwrap();
            if owner {
                std::fs::write(dir.join(OWNER), b"").unwrap();
            }
            if old {
                age(&dir, 2 * LEFT_FOR);
            }
            dir
        };
        let left = make("gpu-test-permit-watch-4000000-0", true, true);
        let young = make("gpu-test-permit-watch-4000000-1", true, false);
        let held = make("gpu-test-permit-watch-4000000-2", true, true);
        let lock = File::open(held.join(OWNER)).unwrap();
        lock.try_lock().unwrap();
        // Made before directories had an owner file: its process is gone (no pid is above
        // 2^22 on Linux), or it is this one.
        let old_gone = make("gpu-test-permit-watch-4194400-0", false, true);
        let old_alive = make(
            &format!("gpu-test-permit-watch-{}-0", std::process::id()),
            false,
            true,
        );
        let other = make("gpu-test-permit-find-4000000-0", true, true);
        let not_ours = make("gpu-test-permit-watch-x-0", true, true);
        // Another user's (where this test may give one away: as root).
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let users = make("gpu-test-permit-watch-4000000-3", true, false);
        if root {
            std::os::unix::fs::chown(&users, Some(65534), Some(65534)).unwrap();
        }
        age(&users, 2 * LEFT_FOR);

        remove_left_behind(base.path(), "watch");
        for (dir, kept) in [
            (&left, false),
            (&young, true),
            (&held, true),
            (&old_gone, false),
            (&old_alive, true),
            (&other, true),
            (&not_ours, true),
            (&users, root),
        ] {
            assert_eq!(dir.exists(), kept, "{}", dir.display());
        }
        drop(lock);
        age(&held, 2 * LEFT_FOR);
        remove_left_behind(base.path(), "watch");
        assert!(!held.exists());
    }

    #[test]
    fn an_owner_that_is_not_a_regular_file_is_not_opened_and_its_directory_stays() {
        let base = tempfile::tempdir().unwrap();
        let fifo_dir = base.path().join("gpu-test-permit-watch-4000000-0");
        let link_dir = base.path().join("gpu-test-permit-watch-4000000-1");
        for dir in [&fifo_dir, &link_dir] {
            std::fs::create_dir(dir).unwrap();
        }
        let fifo =
            std::ffi::CString::new(fifo_dir.join(OWNER).into_os_string().into_encoded_bytes())
                .unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/null", link_dir.join(OWNER)).unwrap();
        for dir in [&fifo_dir, &link_dir] {
            age(dir, 2 * LEFT_FOR);
        }
        // An open that blocked on the FIFO would never come back: the sweep runs aside.
        let (done, finished) = std::sync::mpsc::channel();
        let swept = base.path().to_path_buf();
        std::thread::spawn(move || {
            remove_left_behind(&swept, "watch");
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(30)).is_ok(),
            "the sweep blocked on a FIFO"
        );
        assert!(fifo_dir.join(OWNER).exists() && link_dir.exists());
    }

    #[test]
    fn a_directory_is_held_while_it_lives_and_removed_when_dropped() {
        let dir = PrivateDir::new("unit").unwrap();
        let path = dir.path().to_path_buf();
        let other = File::open(path.join(OWNER)).unwrap();
        assert!(other.try_lock().is_err(), "the owner file is not locked");
        age(&path, 2 * LEFT_FOR);
        remove_left_behind(&std::env::temp_dir(), "unit");
        assert!(path.exists(), "a live directory was removed");
        drop(other);
        drop(dir);
        assert!(!path.exists());
    }
}
