//! The library's platform layer: every call of the library that differs between operating
//! systems lives below this module, so the modules above it carry no platform `cfg`
//! (`cli/tests/it/platform.rs` greps the library's sources to keep it so). The CLI binary's own
//! signal forwarding for `run`, in `cli/src/bin/gpu-test-permit/run.rs`, is not part of the library
//! and keeps its platform code there.
//!
//! This file is the portable face: the functions the rest of the crate calls, and the logic that
//! every platform shares. Each platform's calls live in a file of their own, picked below:
//! - `unix.rs`, every Unix: file modes, owners and groups, `O_NOFOLLOW`, descriptor limits,
//!   process groups and signals, the raw standard streams of a probe child;
//! - `linux.rs`, what only Linux offers: inotify, `/proc`, `gettid`, the coarse clock,
//!   `PR_SET_PDEATHSIG`, `waitid` with `WNOWAIT`;
//! - `portable.rs`, std-only stand-ins for those Linux calls on every other platform;
//! - `windows.rs`, Windows' side of what `unix.rs` does, mostly std's portable behaviour.
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
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

#[cfg(not(any(unix, windows)))]
compile_error!("gpu-test-permit supports Unix and Windows");

#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

// `kernel`: Linux's own calls, or std-only stand-ins for them elsewhere.
#[cfg(target_os = "linux")]
use linux as kernel;
#[cfg(not(target_os = "linux"))]
use portable as kernel;
// `os`: what every Unix shares, or Windows' side of it.
#[cfg(unix)]
use unix as os;
#[cfg(windows)]
use windows as os;

/// The per-user default slot directory: `gpu-test-permit-<uid>` in `/tmp`, or the first usable
/// alternative when another user holds that name (on Unix, see the module docs); a
/// `gpu-test-permit` directory in the temporary directory elsewhere. Chosen once per process;
/// the first call prints one line when an alternative is used.
pub(crate) fn default_slot_dir() -> PathBuf {
    os::default_slot_dir()
}

/// `base` made particular to this user where users have ids (`<base>-<uid>` on Unix), for a
/// directory of this user's own inside one that several users may share.
pub(crate) fn per_user_name(base: &str) -> String {
    os::per_user_name(base)
}

/// This process's id, without a system call once it has been asked for a few times: `getpid`
/// costs a kernel entry on every acquire otherwise. A child made by `fork` (without `exec`)
/// asks again: the cache is cleared in the child by an `atfork` handler.
///
/// The first [`PID_ASKED`] calls ask the kernel and cache nothing: registering the handler
/// touches a page of the C library that a process taking one permit (a test under nextest: a
/// few calls) would fault in for nothing, which costs more than the system calls it saves.
pub(crate) fn pid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let cached = PID.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    if CALLS.fetch_add(1, Ordering::Relaxed) < PID_ASKED {
        return std::process::id();
    }
    // The fork handlers forget the cached pid in a child.
    watch_forks();
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// [`pid`]'s cache: 0 until it is set, and in a child made by `fork` (see [`watch_forks`]).
static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// How many forks this process has begun and finished (`fork` without a new process image:
/// the child shares every open file description) since [`watch_forks`] was first called, as
/// `(begun, finished)`. A lock taken after reading `f`, and let go when this reads `f` again,
/// was copied into no child made by `fork` while it was held: a fork whose child was made in
/// between changed one of the counts, or is still under way (begun and finished differ).
/// Always `(0, 0)` where there is no `fork`.
pub(crate) fn forks() -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::sync::atomic::Ordering::SeqCst;
        // Finished first: a fork that finishes between the two reads shows as under way.
        let finished = FORKS_FINISHED.load(SeqCst);
        (FORKS_BEGUN.load(SeqCst), finished)
    }
    #[cfg(not(unix))]
    {
        (0, 0)
    }
}

#[cfg(unix)]
static FORKS_BEGUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
#[cfg(unix)]
static FORKS_FINISHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Registers this crate's `atfork` handlers, once: they count a fork as begun before the child
/// is made and as finished in the parent after ([`forks`]), and make the child forget the
/// parent's cached process id ([`pid`]). Registered at the first use of either, not at start:
/// registering touches a page of the C library that a process which never needs them would
/// fault in for nothing.
pub(crate) fn watch_forks() {
    #[cfg(unix)]
    {
        use std::sync::atomic::Ordering::{Relaxed, SeqCst};
        static ONCE: std::sync::Once = std::sync::Once::new();
        // Async-signal-safe, all three: one atomic operation each.
        extern "C" fn begun() {
            FORKS_BEGUN.fetch_add(1, SeqCst);
        }
        extern "C" fn finished() {
            FORKS_FINISHED.fetch_add(1, SeqCst);
        }
        extern "C" fn forget_pid_in_child() {
            PID.store(0, Relaxed);
        }
        ONCE.call_once(|| {
            // SAFETY: registers handlers that only operate on atomics.
            unsafe { libc::pthread_atfork(Some(begun), Some(finished), Some(forget_pid_in_child)) };
        });
    }
}

/// Calls of [`pid`] that ask the kernel before it caches the answer.
const PID_ASKED: u32 = 8;

/// A cheap monotonic timestamp in nanoseconds, for "held for how long" diagnostics: the coarse
/// clock on Linux (a few ms resolution, no syscall), std's `Instant` elsewhere.
pub(crate) fn coarse_ns() -> u64 {
    kernel::coarse_ns()
}

/// Time since a [`coarse_ns`] timestamp.
pub(crate) fn coarse_elapsed(since: u64) -> Duration {
    Duration::from_nanos(coarse_ns().saturating_sub(since))
}

/// Starts a thread named `name` that runs `body`, and lets it run on its own.
pub(crate) fn spawn_named(name: &str, body: fn()) -> io::Result<()> {
    spawn_boxed(name, Box::new(body))
}

/// [`spawn_named`] for a body that owns what it works on: every thread the crate starts shares
/// one copy of the standard library's thread start, for a boxed closure.
pub(crate) fn spawn_boxed(name: &str, body: Box<dyn FnOnce() + Send>) -> io::Result<()> {
    match std::thread::Builder::new().name(name.into()).spawn(body) {
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
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
            let n = kernel::raw_thread_number();
            let t = std::thread::current();
            let name = match t.name() {
                Some(name) => name.to_string(),
                None => format!("{:?}", t.id()),
            };
            thread_names().lock().push((n, name));
            c.set(n);
        }
        c.get()
    })
}

/// The name of each thread that took a permit, by [`thread_number`]: a list, not a hash map,
/// since it is written once a thread and read only to explain a wait, and a hash map's random
/// keys cost every test process a system call and its code pages.
fn thread_names() -> &'static parking_lot::Mutex<Vec<(u64, String)>> {
    static NAMES: parking_lot::Mutex<Vec<(u64, String)>> = parking_lot::Mutex::new(Vec::new());
    &NAMES
}

/// The name recorded for a [`thread_number`].
pub(crate) fn thread_name(number: u64) -> String {
    // The latest entry of that number (the system may reuse a thread's number).
    let names = thread_names().lock();
    for (n, name) in names.iter().rev() {
        if *n == number {
            return name.clone();
        }
    }
    format!("thread {number}")
}

/// Creates `dir` (mode 0700 on Unix) if it is missing and checks that it is safe to keep lock
/// files in: a real directory (not a symlink), not writable by everyone unless the sticky bit is
/// set, owned by this user or root or shared with this user through a group (see the module
/// docs), and writable by this user.
pub(crate) fn prepare_dir(dir: &Path) -> Result<(), String> {
    prepare_dir_with(dir, true)?;
    Ok(())
}

/// [`prepare_dir`], with the write test (a file created and removed) only if `write_test`:
/// a directory whose slot files exist was writable when they were made, and opening them
/// read-write is the test that matters then. Returns what the directory is, as checked (see
/// [`is_shared_dir_meta`]).
pub(crate) fn prepare_dir_with(dir: &Path, write_test: bool) -> Result<std::fs::Metadata, String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent()
                && let Err(e) = std::fs::create_dir_all(parent)
            {
                return Err(format!(
                    "cannot create the parent of slot directory {}: {e}",
                    dir.display()
                ));
            }
            match os::create_private_dir(dir) {
                Ok(()) => {}
                // Another process won the race; checked below.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(format!(
                        "cannot create slot directory {}: {e}",
                        dir.display()
                    ));
                }
            }
            match std::fs::symlink_metadata(dir) {
                Ok(meta) => meta,
                Err(e) => {
                    return Err(format!(
                        "cannot inspect slot directory {}: {e}",
                        dir.display()
                    ));
                }
            }
        }
        Err(e) => {
            return Err(format!(
                "cannot inspect slot directory {}: {e}",
                dir.display()
            ));
        }
        Ok(meta) => meta,
    };
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
    os::check_owner_and_mode(dir, &meta)?;
    if write_test {
        check_writable(dir)?;
    }
    Ok(meta)
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
        os::private_no_follow(&mut opts);
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

/// Whether a file that this process holds open and locked can be renamed over another name
/// (Unix; Windows refuses to replace a file another process has open).
pub(crate) const RENAMES_OPEN_FILES: bool = cfg!(unix);

/// Opens (creating if needed) a lock file for reading and writing without following a
/// symbolic link at its name, and without blocking on a FIFO or device planted there: anything
/// but a regular file is refused.
///
/// In a shared directory (`shared_dir`, see [`is_shared_dir`]) an existing file is opened
/// without `O_CREAT`, which `fs.protected_regular` forbids on other users' files in sticky
/// directories; a new one gets the directory's group and the mode the directory is shared with
/// (group and, in a world-writable directory, others read and write), whatever the umask.
pub(crate) fn open_lock_file(path: &Path, shared_dir: bool) -> io::Result<File> {
    let (file, _) = os::open_lock_file(path, shared_dir)?;
    Ok(file)
}

/// Opens (creating if needed) a lock file whose content only its owner may write, in a slot
/// or state directory other users may share (`gpu0.layout`): made without write bits for
/// the group and others (a file of this user's that has them loses them), opened for reading
/// only where another user owns it. Its lock works either way. Returns the file and whether
/// this process may write it, and who may have written it (as [`writer`] tells, without
/// another `fstat`).
pub(crate) fn open_owner_file(path: &Path, shared_dir: bool) -> io::Result<(File, bool, Writer)> {
    os::open_owner_file(path, shared_dir)
}

/// Takes the write bits of the group and others away from `file`, which this process owns and
/// has just written whole (a layout): from now on only its owner writes it.
pub(crate) fn restrict_to_owner(file: &File) {
    os::restrict_to_owner(file);
}

/// Opens `path` for reading where it is a regular file of this user's: never through a link,
/// nor from a FIFO, nor a file another user made at its name.
pub(crate) fn open_own_regular(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    // One `fstat` for the kind and the owner.
    let (file, meta) = open_regular_no_follow_meta(opts, path)?;
    if !owned_by_this_user(&meta) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "another user's file",
        ));
    }
    Ok(file)
}

/// Who may have written a file: what its content can be trusted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Windows has no slot directory other users share: this user wrote everything there.
#[cfg_attr(windows, allow(dead_code))]
pub(crate) enum Writer {
    /// This process's user alone (it owns the file, and nobody else may write it).
    ThisUser,
    /// User `uid` alone (its owner).
    User(u32),
    /// Any user its mode lets write it (its group's, or everyone's), whoever owns it.
    Others { owner: u32 },
    /// It could not be told.
    Unknown,
}

/// Who may have written the open file `file`.
pub(crate) fn writer(file: &File) -> Writer {
    os::writer(file)
}

/// Opens an existing lock file for locking, without following a symbolic link and without
/// blocking, refusing anything but a regular file; `NotFound` where nobody has made it.
pub(crate) fn open_existing_lock_file(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    open_regular_no_follow(opts, path)
}

/// Opens an existing file for reading without following a symbolic link and without blocking,
/// refusing anything but a regular file: for reading slot and wait files that another user of a
/// shared directory could have replaced with a FIFO.
pub(crate) fn open_regular_for_reading(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    open_regular_no_follow(opts, path)
}

/// Opens `path` with `opts` without following a symbolic link and without blocking, refusing
/// anything but a regular file.
fn open_regular_no_follow(opts: OpenOptions, path: &Path) -> io::Result<File> {
    Ok(open_regular_no_follow_meta(opts, path)?.0)
}

/// [`open_regular_no_follow`], with the opened file's metadata.
fn open_regular_no_follow_meta(
    mut opts: OpenOptions,
    path: &Path,
) -> io::Result<(File, std::fs::Metadata)> {
    os::no_follow_no_block(&mut opts);
    let file = match opts.open(path) {
        Ok(file) => file,
        Err(e) => return Err(os::explain_open_error(path, e)),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_a_regular_file(&meta));
    }
    Ok((file, meta))
}

/// The files this process has mapped now (its executable, libraries, mapped data), by path;
/// `None` where that cannot be seen (Linux only: `/proc/self/maps`).
pub(crate) fn mapped_files() -> Option<Vec<String>> {
    kernel::mapped_files()
}

/// Whether `wanted` holds for the path (or name) of one of the objects the dynamic loader has
/// loaded into this process (the executable, as `""`, and every shared library, whether the
/// executable needs it or `dlopen` loaded it), asked in the loader's order until one answers
/// yes; `None` where the loader's list cannot be seen (Linux only: `dl_iterate_phdr`). No
/// system call and no file read: a look at the loader's list in memory. `wanted` is given each
/// name as the loader keeps it, NUL-terminated. It runs under the loader's lock: it must not
/// load a library, and must not panic (nothing unwinds into the loader: a panic ends the
/// process).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn any_loaded_object(wanted: fn(*const std::ffi::c_char) -> bool) -> Option<bool> {
    kernel::any_loaded_object(wanted)
}

/// The files that libraries this crate loaded for its own use mapped into the process, as its
/// maps name them ([`for_own_use`]).
static OWN_MAPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Runs `load`, which loads a library this crate uses itself, and keeps the files it maps as
/// the crate's own ([`mapped_for_own_use`]), so that the look for GPU drivers a test loaded
/// without a permit leaves them out: `nvmlInit` loads `libcuda` on NVIDIA's driver (580), and
/// keeps it. Reads the process's maps before and after (Linux; elsewhere nothing is kept),
/// once a library: the crate loads NVML once a process, where a permit or the CUDA fixture
/// asks for live memory. A file another thread maps at the same moment is kept too.
pub(crate) fn for_own_use<T>(load: impl FnOnce() -> T) -> T {
    let before = mapped_files();
    let out = load();
    if let (Some(before), Some(after)) = (before, mapped_files()) {
        let mut own = OWN_MAPPED.lock().unwrap_or_else(|e| e.into_inner());
        for p in after {
            if !before.contains(&p) && !own.contains(&p) {
                own.push(p);
            }
        }
    }
    out
}

/// Whether `path`, a file of this process's maps, was mapped by a library this crate loaded
/// for its own use ([`for_own_use`]).
pub(crate) fn mapped_for_own_use(path: &str) -> bool {
    OWN_MAPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|o| o == path)
}

/// Opens an existing regular file for appending, never through a symbolic link and without
/// blocking on a FIFO at its name.
pub(crate) fn open_regular_for_append_no_follow(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.append(true);
    open_regular_no_follow(opts, path)
}

/// Opens an existing file for appending without blocking on a FIFO or device at its name:
/// anything but a regular file is refused. A symbolic link at `path` is followed (the path is
/// one a user chose for output, as with a shell's `>>`); one that leads nowhere is an error,
/// never a file created at its target.
pub(crate) fn open_regular_for_append(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.append(true);
    os::no_block(&mut opts);
    let file = match opts.open(path) {
        Ok(file) => file,
        // A FIFO without a reader answers ENXIO, a directory EISDIR: say what the name is.
        Err(e) => {
            return Err(match std::fs::metadata(path) {
                Ok(meta) if !meta.file_type().is_file() => special_file(&meta),
                Err(_) if is_symlink(path) => io::Error::new(
                    e.kind(),
                    "a symbolic link to nothing (a file is not created at a link's target)",
                ),
                _ => e,
            });
        }
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(special_file(&meta));
    }
    Ok(file)
}

/// Whether `path` names a symbolic link (the link itself, not followed).
fn is_symlink(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) => m.is_symlink(),
        Err(_) => false,
    }
}

/// Opens a file for reading without blocking on a FIFO or device at its name (a symbolic link
/// is followed): anything but a regular file is refused. For files this crate reads but never
/// wrote, such as the GPU drivers' manifests.
pub(crate) fn open_regular_to_read(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    os::no_block(&mut opts);
    let file = opts.open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(special_file(&meta));
    }
    Ok(file)
}

/// The most bytes this process reads, in all its life, from files another user owns that it
/// opens only to look at them: the ELF headers of the libraries it has mapped
/// (`drivers::linked_at_build_time`) and the drivers' manifests (`icd`). A library's headers,
/// dynamic section and string table are a few KiB, a manifest less than one, and a process
/// reads a few hundred of them at most: 64 MiB is far past what real files need, and bounds
/// what files crafted to be large (a string table that fills a file, a manifest directory of
/// thousands) can make a test process read. Past it, [`read_looked_at`] reads nothing more and
/// the look sees what it saw so far.
pub(crate) const FOREIGN_READ_BUDGET: u64 = 64 << 20;

/// The bytes read so far from files another user owns ([`FOREIGN_READ_BUDGET`]).
static FOREIGN_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A file this process opens only to look at it, and that someone else may have written:
/// opened by [`open_to_look`], read by [`read_looked_at`] alone.
#[derive(Debug)]
pub(crate) struct LookedAt {
    file: File,
    /// Its length when it was opened: no read goes past it.
    len: u64,
    /// Whether another user owns it: its reads count against [`FOREIGN_READ_BUDGET`].
    foreign: bool,
}

impl LookedAt {
    /// Its length when it was opened.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// Opens `path` to look at its contents: without blocking on a FIFO or device at its name (a
/// symbolic link is followed), refusing anything the *opened* file's `fstat` does not call a
/// regular file, so that a name swapped for a FIFO between a look at it and the open blocks
/// nothing ([`open_regular_to_read`]). Close-on-exec, as every file the standard library opens.
pub(crate) fn open_to_look(path: &Path) -> io::Result<LookedAt> {
    let file = open_regular_to_read(path)?;
    let meta = file.metadata()?;
    Ok(LookedAt {
        len: meta.len(),
        foreign: !owned_by_this_user(&meta),
        file,
    })
}

/// Up to `most` bytes of `file` from `offset`: fewer where the file (as long as it was when
/// it was opened) ends first, none past its end. `None` where it cannot be read, or where it
/// is another user's and reading it would pass this process's [`FOREIGN_READ_BUDGET`].
pub(crate) fn read_looked_at(file: &mut LookedAt, offset: u64, most: u64) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let len = most.min(file.len.saturating_sub(offset));
    if file.foreign && !charge(&FOREIGN_READ, len, FOREIGN_READ_BUDGET) {
        return None;
    }
    let mut out = Vec::new();
    if len == 0 {
        return Some(out);
    }
    if file.file.seek(SeekFrom::Start(offset)).is_err() {
        return None;
    }
    // `take`: a file that grew since it was opened is read no further.
    (&mut file.file).take(len).read_to_end(&mut out).ok()?;
    Some(out)
}

/// Adds `len` to `spent` where that keeps it at most `budget`; whether it did. One atomic
/// compare-and-swap, usually: it runs in a test process's first permit.
fn charge(spent: &std::sync::atomic::AtomicU64, len: u64, budget: u64) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let mut now = spent.load(Relaxed);
    loop {
        let Some(after) = now.checked_add(len) else {
            return false;
        };
        if after > budget {
            return false;
        }
        match spent.compare_exchange_weak(now, after, Relaxed, Relaxed) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

/// Whether the file or directory of `meta` belongs to this process's effective user; always
/// where files have no owner to compare (not on Unix).
pub(crate) fn owned_by_this_user(meta: &std::fs::Metadata) -> bool {
    os::owned_by_this_user(meta)
}

/// The error for a name that is not a regular file: what it is instead.
fn special_file(meta: &std::fs::Metadata) -> io::Error {
    let kind = os::special_file_kind(&meta.file_type());
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file but {kind}"),
    )
}

/// Opens `dir/name` for reading when `dir` is a real directory that this user owns and no one
/// else may write, and the file (not followed through a symbolic link) is this user's too:
/// two `stat`s instead of [`prepare_dir`]'s write test, for a cache's common case. `None`
/// otherwise, and always where owners cannot be told this cheaply (not on Unix).
pub(crate) fn open_private_file(dir: &Path, name: &str) -> Option<File> {
    os::open_private_file(dir, name)
}

/// The error for a slot file that is not a regular file.
fn not_a_regular_file(meta: &std::fs::Metadata) -> io::Error {
    let kind = os::special_file_kind(&meta.file_type());
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "not a regular file but {kind}; a slot directory holds only this crate's files, \
             so remove it"
        ),
    )
}

/// Whether a directory is meant to be shared by several users (world- or group-writable);
/// never where files have no such modes (not on Unix).
pub(crate) fn is_shared_dir(dir: &Path) -> bool {
    match std::fs::metadata(dir) {
        Ok(meta) => is_shared_dir_meta(&meta),
        Err(_) => false,
    }
}

/// [`is_shared_dir`] for a directory already inspected.
pub(crate) fn is_shared_dir_meta(meta: &std::fs::Metadata) -> bool {
    os::is_shared_dir(meta)
}

/// Takes `file`'s exclusive lock within `patience`; whether it did. Never waits longer: a
/// stopped process holding the lock must not hold up the caller.
///
/// Tries again after 50 µs, then twice as long each time up to a millisecond. The locks taken
/// this way are held for microseconds (a record appended, `gpu0.backfill` while a backfiller
/// counts), and a release of several slots waits for `gpu0.backfill` before it lets go of
/// them: a fixed millisecond would add up to a millisecond to that release, the short first
/// waits add tens of microseconds, and a longer holder is still tried only once a millisecond.
pub(crate) fn lock_within(file: &File, patience: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + patience;
    let mut pause = std::time::Duration::from_micros(50);
    loop {
        match file.try_lock() {
            Ok(()) => return true,
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < end => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(1));
            }
            Err(_) => return false,
        }
    }
}

/// Writes `buf` at `offset` without moving a shared cursor.
pub(crate) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    os::write_at(file, buf, offset)
}

/// Ends this process's share in the lock held through `file`'s open file description,
/// without unlocking that description: `file` is made to refer to a new description of the
/// file at `path` (which holds no lock) and the old one is closed here. Where nobody else
/// shares the old description, that ends its lock; where somebody does (a command the permit
/// was passed to and its background jobs, a child forked without `exec`), the lock stays
/// theirs until they close it too. An unlock (`LOCK_UN`) would end it for all of them.
///
/// Fails, changing nothing, when the file cannot be opened again (out of descriptors, the
/// directory removed).
pub(crate) fn let_go(file: &File, path: &Path, shared_dir: bool) -> io::Result<()> {
    os::let_go(file, path, shared_dir)
}

/// Lets every user enter (not list) directory `dir` and read `file` in it, so that other
/// users' processes can probe the file's lock (Unix; only the owner can change modes, and a
/// failure changes nothing). Nothing to do elsewhere.
pub(crate) fn let_others_probe(dir: &Path, file: &Path) {
    os::let_others_probe(dir, file)
}

/// Allocates space for the first `len` bytes of `file` without changing it, so that records
/// written there later fit on a file system that has filled up since (Linux; elsewhere
/// nothing is reserved).
pub(crate) fn reserve(file: &File, len: u64) -> io::Result<()> {
    kernel::reserve(file, len)
}

/// Milliseconds of a clock that every process of the host shares and no clock step moves
/// (`CLOCK_BOOTTIME` on Linux), where there is one.
pub(crate) fn boot_ms() -> Option<u64> {
    kernel::boot_ms()
}

/// The id of the boot that [`boot_ms`] counts from, where the host names one (Linux): a
/// boot-clock time of another boot (a record left from before a restart) is not comparable
/// with [`boot_ms`] now.
pub(crate) fn boot_id() -> Option<String> {
    kernel::boot_id()
}

/// Reads up to `buf.len()` bytes at offset 0.
pub(crate) fn read_at_start(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    os::read_at_start(file, buf)
}

/// Whether `path` still names the file open as `file` (it was not removed or replaced). Always
/// true where files have no identity to compare (not on Unix).
pub(crate) fn same_file(path: &Path, file: &File) -> bool {
    os::same_file(path, file)
}

/// Whether open file `file` belongs to this process's user (its effective uid), which alone
/// may remove it as its own leftover. Always true where files have no owners to compare (not on
/// Unix).
pub(crate) fn is_own_file(file: &File) -> bool {
    match file.metadata() {
        Ok(m) => owned_by_this_user(&m),
        Err(_) => false,
    }
}

/// Waits for a change to a set of files: a write to any of them, or the last close of a file
/// opened for writing (which is what a process that exits or is killed does to its lock files).
///
/// On Linux this is inotify, so a wait costs no CPU and wakes within microseconds. Elsewhere it
/// falls back to sleeping in short steps. A caller re-checks its condition after every return:
/// changes can be spurious, and the kernel reports a close just before it drops the closing
/// file's locks, so callers also wake up periodically.
pub(crate) struct ChangeWatch(kernel::ChangeWatch);

impl std::fmt::Debug for ChangeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeWatch").finish_non_exhaustive()
    }
}

impl ChangeWatch {
    /// Starts watching `paths`. Changes that happen after this returns are never missed.
    pub(crate) fn new(paths: &[&Path]) -> io::Result<ChangeWatch> {
        Ok(ChangeWatch(kernel::ChangeWatch::new(paths)?))
    }

    /// Blocks until a change is seen or `timeout` passes. Returns whether a change was seen.
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        self.0.wait(timeout)
    }
}

/// Whether process `pid` is stopped (`SIGSTOP`, Ctrl-Z, or halted by a debugger). Read from
/// `/proc` on Linux; `false` where that cannot be told.
pub(crate) fn process_is_stopped(pid: u32) -> bool {
    kernel::process_is_stopped(pid)
}

/// The first of `among` met going up from process `pid` through its parents, `pid` itself
/// included (from `/proc` on Linux; elsewhere `pid` alone is looked at).
pub(crate) fn ancestor_among(pid: u32, among: &[u32]) -> Option<u32> {
    kernel::ancestor_among(pid, among)
}

/// Whether a process with id `pid` can be seen from here (it may be one of another PID
/// namespace's that happens to share the number); true where that cannot be told.
pub(crate) fn process_is_visible(pid: u32) -> bool {
    os::process_is_visible(pid)
}

/// Whether `pid` is this process or one of its ancestors; `None` where that cannot be told
/// (only Linux's `/proc` tells it).
pub(crate) fn is_self_or_ancestor(pid: u32) -> Option<bool> {
    kernel::is_self_or_ancestor(pid)
}

/// The short name of process `pid` (its command, as `ps` shows it), read from `/proc/<pid>/comm`
/// on Linux; `None` where that cannot be told or the process is gone.
pub(crate) fn process_name(pid: u32) -> Option<String> {
    kernel::process_name(pid)
}

/// The process that holds the whole-file lock (`flock`) on `file`, read from `/proc/locks` on
/// Linux; `None` where that cannot be told, or when nobody holds one.
pub(crate) fn lock_owner(file: &std::fs::File) -> Option<u32> {
    kernel::lock_owner(file)
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
    /// Descriptors left free for the program itself (its test, the GPU driver, pipes), not
    /// counted in `available`.
    pub(crate) headroom: u64,
}

/// What is taken to be open where the descriptors open in a process cannot be counted.
const DESCRIPTORS_ESTIMATE: u64 = 64;

/// Makes room for `needed` more open files in this process: raises the soft descriptor limit
/// (up to the hard one) when the files open now plus `needed` and some headroom would pass it.
/// Where there is no such limit (not on Unix), there is always room.
pub(crate) fn ensure_descriptors(needed: usize, counted: Counted) -> Result<(), DescriptorLimits> {
    os::ensure_descriptors(needed, counted, kernel::open_descriptors)
}

/// Whether [`ensure_descriptors`] counts the descriptors open now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Only where the limit is within 1024 of what is needed: elsewhere a process would need
    /// over a thousand files open to run out, and opening reports EMFILE.
    IfTight,
    /// None: opening a file just failed with EMFILE, so every descriptor up to the soft limit
    /// is taken (counting them would need a descriptor too).
    Exhausted,
}

/// Whether `e` is "too many open files" (this process's descriptor limit).
pub(crate) fn is_too_many_open_files(e: &io::Error) -> bool {
    os::is_too_many_open_files(e)
}

/// The device and inode that name a pipe (the same for both of its ends); `(0, 0)` where pipes
/// have no such identity (not on Unix).
pub(crate) fn pipe_identity(pipe: &io::PipeReader) -> io::Result<(u64, u64)> {
    os::pipe_identity(pipe)
}

/// Whether standard input is the pipe named `pipe` (device and inode, see [`pipe_identity`])
/// and holds `token` and a newline right now: read without waiting, and consumed. Where pipes
/// have no identity to compare (not on Unix) this cannot be told, and the answer is yes.
pub(crate) fn stdin_carries_token(pipe: (u64, u64), token: &str) -> bool {
    os::stdin_carries_token(pipe, token)
}

/// Writes `bytes` to standard output past std's buffer (which [`exit_now`] does not flush),
/// giving up silently when the stream fails.
pub(crate) fn write_stdout_unbuffered(bytes: &[u8]) {
    os::write_stdout_unbuffered(bytes);
}

/// Whether the variable named by `name` (NUL-terminated) is set, asked of the C library's
/// `getenv` in straight-line code (for `config::is_set`); `None` where it is asked otherwise
/// (Windows). Setting a variable while another thread reads the environment is what the
/// contract of `std::env::set_var` rules out.
#[cfg(unix)]
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn env_is_set(name: *const std::ffi::c_char) -> Option<bool> {
    // SAFETY: `name` is NUL-terminated (the caller's constant).
    Some(unsafe { libc::getenv(name) } as usize != 0)
}

/// Whether the variable named by `name` is set: asked otherwise here (`None`).
#[cfg(not(unix))]
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn env_is_set(_name: *const std::ffi::c_char) -> Option<bool> {
    None
}

/// Runs `callback` when the process ends normally (after `main` returns, or at `exit`), as C's
/// `atexit` does; not after [`exit_now`] or a fatal signal. The callback must not unwind.
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn at_exit(callback: extern "C" fn()) {
    unsafe extern "C" {
        safe fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
    }
    atexit(callback);
}

/// Ends the process with status 0 at once: on Unix `_exit`, so no atexit handler (of a
/// half-initialised driver, say) and no destructor runs.
pub(crate) fn exit_now() -> ! {
    os::exit_now()
}

/// Makes the child `cmd` starts lead a process group of its own (on Unix), so that helpers it
/// starts can be killed with it by [`kill_process_group`], and die with the thread that starts
/// it (on Linux: `SIGKILL` through `PR_SET_PDEATHSIG`).
pub(crate) fn contain_child(cmd: &mut Command) {
    os::own_process_group(cmd);
    kernel::die_with_spawning_thread(cmd);
}

/// Whether `child` has exited. Where the platform can look without reaping it (Linux), the
/// child is left unreaped, so its process group id cannot be reused before the group is killed
/// with [`kill_process_group`]; elsewhere it is reaped and its status stored in `reaped`.
/// Leaves `reaped` alone while it is `Some`.
pub(crate) fn child_has_exited(
    child: &mut Child,
    reaped: &mut Option<ExitStatus>,
) -> io::Result<bool> {
    kernel::child_has_exited(child, reaped)
}

/// Sends `SIGKILL` (on Unix) to the process group that `child` leads (see [`contain_child`]).
/// Only for a child not reaped yet, whose id still names its group.
pub(crate) fn kill_process_group(child: &Child) {
    os::kill_process_group(child);
}

/// The signal that ended a process, where processes end by signals (Unix).
pub(crate) fn exit_signal(status: &ExitStatus) -> Option<i32> {
    os::exit_signal(status)
}

/// The status of a process that exited with `code`.
/// Makes a FIFO at `path`, for tests of readers that must not wait on one; whether it could
/// (Unix only).
#[cfg(test)]
pub(crate) fn make_fifo(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) == 0 }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

#[cfg(test)]
pub(crate) fn exit_status(code: i32) -> ExitStatus {
    os::exit_status(code)
}

/// The device and inode of an open file, where files have them (Unix).
pub(crate) fn file_identity(file: &File) -> Option<(u64, u64)> {
    os::file_identity(file)
}

/// A descriptor of this process's own, for the open file description that descriptor `fd`
/// (inherited from a parent) refers to, if `fd` is open and is the file `identity` (device and
/// inode). The description is shared, so locks taken through the result are the parent's.
/// Unsupported where descriptors are not inherited by number (not on Unix).
pub(crate) fn inherited_file(fd: u64, identity: (u64, u64)) -> io::Result<File> {
    os::inherited_file(fd, identity)
}

/// Makes the command `cmd` starts inherit `file`'s open file description, and returns the
/// descriptor number it has there: a duplicate that the command keeps across `exec` (no
/// close-on-exec in the child only). The duplicate lives as long as `cmd`. Unsupported where
/// descriptors are not inherited by number (not on Unix).
pub(crate) fn pass_to_child(cmd: &mut Command, file: &File) -> io::Result<u64> {
    os::pass_to_child(cmd, file)
}

/// A shared library loaded at run time and never unloaded (Unix: `dlopen`; Windows:
/// `LoadLibraryA`). Used for optional driver libraries the crate does not link against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Library(std::ptr::NonNull<std::ffi::c_void>);

// SAFETY: the handle is an opaque token that `dlsym` accepts from any thread; it is never
// closed.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    /// Loads `name` (a file name searched as the platform does, e.g. `libnvidia-ml.so.1`);
    /// `None` when it is not there.
    pub(crate) fn open(name: &std::ffi::CStr) -> Option<Library> {
        Some(Library(os::open_library(name)?))
    }

    /// The address of `symbol`, to be cast to its function type by the caller.
    pub(crate) fn symbol(
        &self,
        symbol: &std::ffi::CStr,
    ) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
        os::library_symbol(self.0, symbol)
    }
}

/// The names under which the CUDA driver library is looked for, in order (`libcuda.so.1`,
/// `nvcuda.dll`, ...).
pub(crate) const CUDA_DRIVER_LIBRARIES: &[&std::ffi::CStr] = os::CUDA_DRIVER_LIBRARIES;

/// The names under which the Vulkan loader is looked for, in order (`libvulkan.so.1`,
/// `vulkan-1.dll`); empty where wgpu does not use Vulkan by default (macOS, whose wgpu backend
/// is Metal).
pub(crate) const VULKAN_LOADER_LIBRARIES: &[&std::ffi::CStr] = os::VULKAN_LOADER_LIBRARIES;

/// The environment variable that adds directories to the dynamic loader's search
/// (`LD_LIBRARY_PATH`, `DYLD_LIBRARY_PATH`, `PATH`), for messages.
pub(crate) const LIBRARY_PATH_VAR: &str = os::LIBRARY_PATH_VAR;

#[cfg(all(test, unix))]
mod pid_tests {
    use super::pid;

    #[test]
    fn a_forked_child_knows_its_own_pid() {
        // Cached after `PID_ASKED` calls.
        let parent = pid();
        for _ in 0..super::PID_ASKED {
            assert_eq!(pid(), parent);
        }
        assert_eq!(parent, std::process::id());
        // SAFETY: the child only reads and stores atomics, asks getpid and `_exit`s.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let ok = pid() == std::process::id() && pid() != parent;
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(pid(), parent);
    }
}

#[cfg(test)]
mod look_tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn the_budget_is_spent_once_and_never_passed() {
        let spent = AtomicU64::new(0);
        assert!(charge(&spent, 60, 100));
        assert!(
            !charge(&spent, 41, 100),
            "past the budget: refused, not charged"
        );
        assert!(charge(&spent, 40, 100));
        assert!(charge(&spent, 0, 100));
        assert!(!charge(&spent, 1, 100));
        assert_eq!(spent.load(std::sync::atomic::Ordering::Relaxed), 100);
        let spent = AtomicU64::new(u64::MAX - 1);
        assert!(!charge(&spent, 2, u64::MAX), "no overflow");
        // Threads that charge at once never pass it together.
        let spent = AtomicU64::new(0);
        let granted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if charge(&spent, 7, 10_000) {
                            granted.fetch_add(7, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let granted = granted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(granted <= 10_000 && granted > 10_000 - 7, "{granted}");
    }

    #[test]
    fn a_looked_at_file_is_read_within_its_length_and_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let mut f = open_to_look(&path).unwrap();
        assert_eq!(f.len(), 10);
        assert!(!f.foreign, "a file of this user's own");
        assert_eq!(read_looked_at(&mut f, 2, 3).unwrap(), b"234");
        assert_eq!(read_looked_at(&mut f, 8, 100).unwrap(), b"89");
        assert_eq!(read_looked_at(&mut f, 10, 100).unwrap(), b"");
        assert_eq!(read_looked_at(&mut f, u64::MAX, u64::MAX).unwrap(), b"");
        // Grown since it was opened: read no further than it was.
        std::fs::write(&path, b"0123456789abcdef").unwrap();
        assert_eq!(read_looked_at(&mut f, 0, 100).unwrap(), b"0123456789");
        assert!(open_to_look(dir.path()).is_err(), "a directory");
        assert!(open_to_look(&dir.path().join("none")).is_err());
        // A FIFO with no writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        if make_fifo(&fifo) {
            assert!(open_to_look(&fifo).is_err());
            assert!(open_to_look(Path::new("/dev/null")).is_err());
        }
    }
}
