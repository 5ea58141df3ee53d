//! The platform layer: every call that differs between operating systems lives here, so the
//! modules above it have no `cfg` noise.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The per-user default slot directory.
pub(crate) fn default_slot_dir() -> PathBuf {
    #[cfg(unix)]
    {
        let base = Path::new("/tmp");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        base.join(format!("gpu-test-permit-{}", effective_uid()))
    }
    #[cfg(not(unix))]
    {
        std::env::temp_dir().join("gpu-test-permit")
    }
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
/// files in: a real directory (not a symlink), owned by this user or root, writable by this
/// user, and not writable by everyone unless the sticky bit is set.
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
    // Writability is checked by creating the slot files; an explicit probe here gives the
    // clearer message.
    let probe = dir.join(format!(".write-check-{}", std::process::id()));
    match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!(
            "slot directory {} is not writable by this user ({e}); fix its permissions or set \
             GPU_TEST_PERMIT_DIR to a writable directory",
            dir.display()
        )),
    }
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
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "slot directory {} is owned by uid {}, not by this user (uid {me}) or root; another \
             user could tamper with the slots. Remove it, or set GPU_TEST_PERMIT_DIR to a \
             directory you own (or a root-owned one shared by the runner's users)",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.mode();
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

/// Opens (creating if needed) a lock file for reading and writing without following a
/// symbolic link at its name.
pub(crate) fn open_lock_file(path: &Path, shared_dir: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // In a directory shared by several users the files must be usable by all of them.
        opts.mode(if shared_dir { 0o666 } else { 0o600 });
        opts.custom_flags(libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    let _ = shared_dir;
    opts.open(path)
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

/// Opens an existing regular file for reading without following a symbolic link and without
/// blocking (a FIFO planted under a slot file's name is not opened for good).
pub(crate) fn open_existing_regular(path: &Path) -> Option<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = opts.open(path).ok()?;
    file.metadata().ok()?.is_file().then_some(file)
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
