//! The platform layer: every call that differs between operating systems lives here, so the
//! modules above it have no `cfg` noise.
//!
//! # Slot directories and other local users
//!
//! A slot directory decides who shares a cap, so on Unix it is checked against the other users
//! of the host ([`prepare_dir`], [`open_lock_file`]):
//! - **Private** (the default, `/tmp/gpu-test-permit-<uid>`, mode 0700): owned by this user.
//!   Another user can create that name in `/tmp` first; then the first of `<name>-1` ...
//!   `<name>-16` that this user owns, else the first free one, is used ([`default_slot_dir`]).
//! - **Shared through a group** (the way for several users, e.g. `chgrp gpu DIR; chmod 2770
//!   DIR`): a directory owned by another user is accepted when it is group-writable, has the
//!   setgid bit and its group is one of this process's groups. Root-owned directories are
//!   accepted as they are (root could change anything anyway). Lock files created in a group- or
//!   world-writable directory get the directory's group and mode 0660 (0666 when world-writable)
//!   set with `fchmod`, so a member's umask cannot lock the others out.
//! - A world-writable directory is accepted only with the sticky bit, and lets every local user
//!   share the cap.
//!
//! Lock files are never followed through symbolic links, existing ones are opened without
//! `O_CREAT` (which `fs.protected_regular` refuses on other users' files in sticky
//! directories, even for root), and anything but a regular file is refused without blocking.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The per-user default slot directory: `gpu-test-permit-<uid>` in `/tmp`, or the first usable
/// alternative when another user holds that name (see [`choose_private_dir`]). Chosen once per
/// process; the first call prints one line when an alternative is used.
pub(crate) fn default_slot_dir() -> PathBuf {
    #[cfg(unix)]
    {
        static CHOSEN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        CHOSEN
            .get_or_init(|| {
                let base = Path::new("/tmp");
                let base = if base.is_dir() {
                    base.to_path_buf()
                } else {
                    std::env::temp_dir()
                };
                let me = effective_uid();
                let (dir, note) = choose_private_dir(&base, &format!("gpu-test-permit-{me}"), me);
                if let Some(note) = note {
                    eprintln!("gpu-test-permit: {note}");
                }
                dir
            })
            .clone()
    }
    #[cfg(not(unix))]
    {
        std::env::temp_dir().join("gpu-test-permit")
    }
}

/// How many alternatives to a per-user directory are tried when other users hold its name.
#[cfg(unix)]
const ALTERNATIVES: usize = 16;

/// Picks the per-user directory `name` in the shared `base` (like `/tmp`), where any local user
/// can create that name first. The candidates are `name`, `name-1` ... `name-16`; the choice is
/// the first one that belongs to user `me` (or root), else the first one that does not exist.
/// The rule depends only on what exists, so every process of the user makes the same choice,
/// also after a squatter removes its directory again. When all are taken, `name` itself is
/// returned and [`prepare_dir`] reports its owner.
///
/// Returns the directory and, when it is not `name`, a line saying why.
#[cfg(unix)]
fn choose_private_dir(base: &Path, name: &str, me: u32) -> (PathBuf, Option<String>) {
    use std::os::unix::fs::MetadataExt;
    let candidate = |i: usize| match i {
        0 => base.join(name),
        i => base.join(format!("{name}-{i}")),
    };
    let owner = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.uid());
    let primary = candidate(0);
    let ours = (0..=ALTERNATIVES)
        .map(candidate)
        .find(|p| matches!(owner(p), Ok(uid) if uid == me || uid == 0));
    let free = || {
        (0..=ALTERNATIVES)
            .map(candidate)
            .find(|p| matches!(owner(p), Err(e) if e.kind() == io::ErrorKind::NotFound))
    };
    let Some(dir) = ours.or_else(free) else {
        return (primary, None);
    };
    if dir == primary {
        return (dir, None);
    }
    let why = match owner(&primary) {
        Ok(uid) => format!("belongs to uid {uid}, not to this user (uid {me})"),
        Err(_) => "is missing, but this user took an alternative while another user held it".into(),
    };
    let note = format!(
        "{} {why}; using {} instead (every process of this user does the same; set \
         GPU_TEST_PERMIT_DIR to choose a directory)",
        primary.display(),
        dir.display()
    );
    (dir, Some(note))
}

#[cfg(unix)]
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A cheap monotonic timestamp in nanoseconds, for "held for how long" diagnostics: the coarse
/// clock on Linux (a few ms resolution, no syscall), std's `Instant` elsewhere.
pub(crate) fn coarse_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC_COARSE always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(not(target_os = "linux"))]
    {
        static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// Time since a [`coarse_ns`] timestamp.
pub(crate) fn coarse_elapsed(since: u64) -> Duration {
    Duration::from_nanos(coarse_ns().saturating_sub(since))
}

/// A small number that identifies the calling thread in traces and diagnostics (the kernel
/// thread id on Linux), cached per thread. The first call on a thread also records its name for
/// [`thread_name`].
pub(crate) fn thread_number() -> u64 {
    thread_local! {
        static NUMBER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    NUMBER.with(|c| {
        if c.get() == 0 {
            let n = raw_thread_number();
            let t = std::thread::current();
            let name = t
                .name()
                .map_or_else(|| format!("{:?}", t.id()), str::to_string);
            thread_names().lock().insert(n, name);
            c.set(n);
        }
        c.get()
    })
}

fn thread_names() -> &'static parking_lot::Mutex<std::collections::HashMap<u64, String>> {
    static NAMES: std::sync::OnceLock<parking_lot::Mutex<std::collections::HashMap<u64, String>>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(Default::default)
}

/// The name recorded for a [`thread_number`].
pub(crate) fn thread_name(number: u64) -> String {
    thread_names()
        .lock()
        .get(&number)
        .cloned()
        .unwrap_or_else(|| format!("thread {number}"))
}

fn raw_thread_number() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions and cannot fail.
        unsafe { libc::gettid() as u64 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Creates `dir` (mode 0700 on Unix) if it is missing and checks that it is safe to keep lock
/// files in: a real directory (not a symlink), not writable by everyone unless the sticky bit is
/// set, owned by this user or root or shared with this user through a group (see the module
/// docs), and writable by this user.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    format!(
                        "cannot create the parent of slot directory {}: {e}",
                        dir.display()
                    )
                })?;
            }
            create_private_dir(dir).or_else(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(()) // another process won the race; checked below
                } else {
                    Err(format!(
                        "cannot create slot directory {}: {e}",
                        dir.display()
                    ))
                }
            })?;
        }
        Err(e) => {
            return Err(format!(
                "cannot inspect slot directory {}: {e}",
                dir.display()
            ));
        }
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot inspect slot directory {}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "slot directory {} is a symbolic link; refusing it because another user could \
             redirect it. Point GPU_TEST_PERMIT_DIR at the real directory",
            dir.display()
        ));
    }
    if !meta.is_dir() {
        return Err(format!(
            "slot directory {} exists but is not a directory; remove it or set \
             GPU_TEST_PERMIT_DIR to a directory",
            dir.display()
        ));
    }
    check_owner_and_mode(dir, &meta)?;
    check_writable(dir)
}

/// Writability is checked by creating the slot files too; this probe gives the clearer message.
/// The probe is a new file (`O_CREAT | O_EXCL`, no symlink followed): a name another user
/// planted, as a link to a victim's file or anything else, is left alone and the next name tried.
fn check_writable(dir: &Path) -> Result<(), String> {
    for attempt in 0..8 {
        let name = match attempt {
            0 => format!(".write-check-{}", std::process::id()),
            n => format!(".write-check-{}-{n}", std::process::id()),
        };
        let probe = dir.join(name);
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        match opts.open(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "slot directory {} is not writable by this user ({e}); fix its permissions \
                     or set GPU_TEST_PERMIT_DIR to a writable directory",
                    dir.display()
                ));
            }
        }
    }
    // Every name is taken: creating the slot files gives the verdict.
    Ok(())
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir(dir)
}

#[cfg(unix)]
fn check_owner_and_mode(dir: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = effective_uid();
    let mode = meta.mode();
    if meta.uid() != me && meta.uid() != 0 && !(is_group_shared(mode) && in_group(meta.gid())) {
        return Err(format!(
            "slot directory {} is owned by uid {}, not by this user (uid {me}) or root, and is \
             not shared with this user through a group (group {} is not one of this user's, or \
             the directory is not group-writable with the setgid bit; mode {:o}); another user \
             could tamper with the slots. Set GPU_TEST_PERMIT_DIR to a directory you own, or \
             share one through a group: `chgrp GROUP DIR; chmod 2770 DIR`",
            dir.display(),
            meta.uid(),
            meta.gid(),
            mode & 0o7777
        ));
    }
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "slot directory {} is writable by everyone without the sticky bit (mode {:o}); any \
             user could replace the slot files. Run `chmod +t` or `chmod o-w` on it",
            dir.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_owner_and_mode(_dir: &Path, _meta: &std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

/// Group-writable with the setgid bit: the files made in it keep the directory's group.
#[cfg(unix)]
fn is_group_shared(mode: u32) -> bool {
    mode & 0o2020 == 0o2020
}

/// Whether `gid` is this process's effective group or one of its supplementary groups.
#[cfg(unix)]
fn in_group(gid: u32) -> bool {
    // SAFETY: getegid has no preconditions and cannot fail.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    // SAFETY: with a size of 0, getgroups only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return false;
    }
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `groups` has room for `n` entries.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    n > 0 && groups[..n as usize].contains(&gid)
}

/// Opens (creating if needed) a lock file for reading and writing without following a
/// symbolic link at its name, and without blocking on a FIFO or device planted there: anything
/// but a regular file is refused.
///
/// In a shared directory (`shared_dir`, see [`is_shared_dir`]) an existing file is opened
/// without `O_CREAT`, which `fs.protected_regular` forbids on other users' files in sticky
/// directories; a new one gets the directory's group and the mode the directory is shared with
/// (group and, in a world-writable directory, others read and write), whatever the umask.
pub(crate) fn open_lock_file(path: &Path, shared_dir: bool) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mode = if shared_dir {
            shared_file_mode(path)
        } else {
            0o600
        };
        let open = |create: bool| {
            let mut opts = OpenOptions::new();
            opts.read(true).write(true);
            if create {
                opts.create_new(true).mode(mode);
            }
            // O_NONBLOCK only matters for what is refused below: it keeps `open` on a FIFO
            // from waiting for a writer.
            opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
        };
        let mut tries = 0;
        let file = loop {
            match open(false) {
                Ok(file) => break file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(explain_open_error(path, e)),
            }
            match open(true) {
                Ok(file) => break file,
                // Another process created it between the two calls.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
                Err(e) => return Err(explain_open_error(path, e)),
            }
        };
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(not_a_regular_file(&meta));
        }
        if shared_dir {
            share_with_group(&file, &meta, path, mode);
        }
        Ok(file)
    }
    #[cfg(not(unix))]
    {
        let _ = shared_dir;
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
    }
}

/// The mode of a lock file in a shared directory: read and write for whoever may write the
/// directory (its group, and everyone in a world-writable sticky one).
#[cfg(unix)]
fn shared_file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let dir_mode = path
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .map_or(0o020, |m| m.mode());
    let mut mode = 0o600;
    if dir_mode & 0o020 != 0 {
        mode |= 0o060;
    }
    if dir_mode & 0o002 != 0 {
        mode |= 0o006;
    }
    mode
}

/// Gives a lock file this process owns the shared mode (a umask such as 077 takes the group's
/// bits away at creation) and the directory's group (which a directory without the setgid bit
/// does not pass on). Best effort: a member that cannot open the file gets a clear error.
#[cfg(unix)]
fn share_with_group(file: &File, meta: &std::fs::Metadata, path: &Path, mode: u32) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if meta.uid() != effective_uid() {
        return;
    }
    if meta.mode() & 0o777 != mode {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    }
    if let Some(dir) = path.parent().and_then(|d| std::fs::metadata(d).ok())
        && dir.gid() != meta.gid()
    {
        let _ = std::os::unix::fs::fchown(file, None, Some(dir.gid()));
    }
}

/// Opens an existing file for reading without following a symbolic link and without blocking,
/// refusing anything but a regular file: for reading slot and wait files that another user of a
/// shared directory could have replaced with a FIFO.
pub(crate) fn open_regular_for_reading(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(|e| explain_open_error(path, e))?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_a_regular_file(&meta));
    }
    Ok(file)
}

fn not_a_regular_file(meta: &std::fs::Metadata) -> io::Error {
    let ft = meta.file_type();
    #[cfg(unix)]
    let kind = {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "a special file"
        }
    };
    #[cfg(not(unix))]
    let kind = if ft.is_dir() {
        "a directory"
    } else {
        "a special file"
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "not a regular file but {kind}; a slot directory holds only this crate's files, \
             so remove it"
        ),
    )
}

/// Adds what a user can do to the errors that opening a slot file gives for files other users
/// made.
fn explain_open_error(path: &Path, e: io::Error) -> io::Error {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if e.raw_os_error() == Some(libc::ELOOP) {
            return io::Error::new(
                e.kind(),
                format!("{e}: it is a symbolic link, which a slot file never is; remove it"),
            );
        }
        if e.kind() == io::ErrorKind::PermissionDenied
            && let Ok(meta) = std::fs::symlink_metadata(path)
            && meta.uid() != effective_uid()
        {
            return io::Error::new(
                e.kind(),
                format!(
                    "{e}: it belongs to uid {} (group {}, mode {:o}). In a slot directory shared \
                     by several users every file must be readable and writable by the group: \
                     make the directory group-owned and setgid (`chgrp GROUP DIR; chmod 2770 \
                     DIR`) and its files group-writable (`chgrp GROUP DIR/*; chmod g+rw DIR/*`)",
                    meta.uid(),
                    meta.gid(),
                    meta.mode() & 0o7777
                ),
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    e
}

/// Whether a directory is meant to be shared by several users (world- or group-writable).
pub(crate) fn is_shared_dir(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir)
            .map(|m| m.mode() & 0o022 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        false
    }
}

/// Writes `buf` at `offset` without moving a shared cursor.
pub(crate) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n = std::os::windows::fs::FileExt::seek_write(
                file,
                &buf[done..],
                offset + done as u64,
            )?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += n;
        }
        Ok(())
    }
}

/// Reads up to `buf.len()` bytes at offset 0.
pub(crate) fn read_at_start(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, 0)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, 0)
    }
}

/// Waits for a change to a set of files: a write to any of them, or the last close of a file
/// opened for writing (which is what a process that exits or is killed does to its lock files).
///
/// On Linux this is inotify, so a wait costs no CPU and wakes within microseconds. Elsewhere it
/// falls back to sleeping in short steps. A caller re-checks its condition after every return:
/// changes can be spurious, and the kernel reports a close just before it drops the closing
/// file's locks, so callers also wake up periodically.
pub(crate) struct ChangeWatch {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    #[cfg(not(target_os = "linux"))]
    step: Duration,
}

impl std::fmt::Debug for ChangeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeWatch").finish_non_exhaustive()
    }
}

impl ChangeWatch {
    /// Starts watching `paths`. Changes that happen after this returns are never missed.
    pub(crate) fn new(paths: &[&Path]) -> io::Result<ChangeWatch> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::{FromRawFd, OwnedFd};
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: plain syscall; the returned descriptor is owned below.
            let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            for p in paths {
                let c = std::ffi::CString::new(p.as_os_str().as_bytes())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
                let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_ATTRIB;
                // SAFETY: `c` is a valid NUL-terminated string; `raw` is our inotify descriptor.
                let wd = unsafe { libc::inotify_add_watch(raw, c.as_ptr(), mask) };
                if wd < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(ChangeWatch { fd })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = paths;
            Ok(ChangeWatch {
                step: Duration::from_micros(200),
            })
        }
    }

    /// Blocks until a change is seen or `timeout` passes. Returns whether a change was seen.
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let raw = self.fd.as_raw_fd();
            let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut pfd = libc::pollfd {
                fd: raw,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is a valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                };
            }
            if n == 0 {
                return Ok(false);
            }
            // Drain every queued event; only "something changed" matters.
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: `buf` is writable for its whole length.
                let r = unsafe { libc::read(raw, buf.as_mut_ptr().cast(), buf.len()) };
                if r <= 0 {
                    break;
                }
            }
            Ok(true)
        }
        #[cfg(not(target_os = "linux"))]
        {
            std::thread::sleep(self.step.min(timeout));
            self.step = (self.step * 2).min(Duration::from_millis(20));
            Ok(false)
        }
    }
}

/// Whether process `pid` is stopped (`SIGSTOP`, Ctrl-Z, or halted by a debugger). Read from
/// `/proc` on Linux; `false` where that cannot be told.
pub(crate) fn process_is_stopped(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // "pid (comm) S ...": the command may itself contain ") ", so split at the last one.
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| matches!(state, 'T' | 't'))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        false
    }
}

/// Descriptor limits that leave too little room, from [`ensure_descriptors`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct DescriptorLimits {
    /// Descriptors this process could still open.
    pub(crate) available: u64,
    /// The soft limit.
    pub(crate) soft: u64,
    /// The hard limit.
    pub(crate) hard: u64,
}

/// Makes room for `needed` more open files in this process: raises the soft descriptor limit
/// (up to the hard one) when the files open now plus `needed` and some headroom would pass it.
pub(crate) fn ensure_descriptors(needed: usize) -> Result<(), DescriptorLimits> {
    #[cfg(unix)]
    {
        /// Left free for the program itself (its test, the GPU driver, pipes).
        const HEADROOM: u64 = 64;
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid rlimit to write to.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return Ok(()); // unknown: let opening the files tell
        }
        let open = open_descriptors();
        let want = open.saturating_add(needed as u64).saturating_add(HEADROOM);
        // `rlim_t` is narrower than u64 on some targets.
        #[allow(clippy::unnecessary_cast)]
        let (soft, hard, infinity) = (
            lim.rlim_cur as u64,
            lim.rlim_max as u64,
            libc::RLIM_INFINITY as u64,
        );
        let unlimited = |v: u64| v == infinity;
        if unlimited(soft) || want <= soft {
            return Ok(());
        }
        if unlimited(hard) || want <= hard {
            let raised = libc::rlimit {
                rlim_cur: want as libc::rlim_t,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: `raised` is a valid rlimit; raising the soft limit up to the hard one
            // needs no privilege.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                return Ok(());
            }
        }
        Err(DescriptorLimits {
            available: soft.saturating_sub(open).saturating_sub(HEADROOM),
            soft,
            hard,
        })
    }
    #[cfg(not(unix))]
    {
        let _ = needed;
        Ok(())
    }
}

/// Descriptors open in this process now (an estimate where it cannot be counted).
#[cfg(unix)]
fn open_descriptors() -> u64 {
    #[cfg(target_os = "linux")]
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        return entries.count() as u64;
    }
    64
}

/// Whether `path` still names the file open as `file` (it was not removed or replaced).
pub(crate) fn same_file(path: &Path, file: &File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::symlink_metadata(path), file.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, file);
        true
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn private_dir_choice_stays_put_once_an_alternative_is_taken() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path();
        let me = effective_uid();
        let other = if me == 0 { 3_999_999_001 } else { me + 1 };
        // Nothing there: the name itself.
        assert_eq!(choose_private_dir(base, "d", me), (base.join("d"), None));
        if me != 0 {
            println!("skipped the rest: making a directory another user owns needs root");
            return;
        }
        for name in ["d", "d-1"] {
            std::fs::create_dir(base.join(name)).unwrap();
            std::os::unix::fs::chown(base.join(name), Some(other), None).unwrap();
        }
        let (dir, note) = choose_private_dir(base, "d", me);
        assert_eq!(dir, base.join("d-2"));
        let note = note.unwrap();
        assert!(note.contains(&format!("uid {other}")), "{note}");
        std::fs::create_dir(&dir).unwrap();
        // The squatter leaves: the user's processes keep agreeing on the alternative.
        std::fs::remove_dir(base.join("d")).unwrap();
        let (again, note) = choose_private_dir(base, "d", me);
        assert_eq!(again, dir);
        assert!(note.unwrap().contains("is missing"));
        // Every name taken: the name itself, whose owner the directory check then reports.
        for i in 3..=ALTERNATIVES {
            let p = base.join(format!("d-{i}"));
            std::fs::create_dir(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(other), None).unwrap();
        }
        std::fs::remove_dir(&dir).unwrap();
        std::fs::create_dir(base.join("d")).unwrap();
        std::os::unix::fs::chown(base.join("d"), Some(other), None).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(other), None).unwrap();
        assert_eq!(choose_private_dir(base, "d", me), (base.join("d"), None));
    }
}
