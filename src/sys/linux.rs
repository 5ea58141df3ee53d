//! What only Linux offers: the coarse clock, `gettid`, inotify, `/proc`, `PR_SET_PDEATHSIG`
//! and `waitid` with `WNOWAIT`. `portable.rs` stands in for these everywhere else.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

pub(super) fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC_COARSE always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds of `CLOCK_BOOTTIME`: one clock for every process of the host, which neither
/// a clock step nor NTP moves, and which counts time suspended.
pub(super) fn boot_ms() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000)
}

/// The id of the boot that `CLOCK_BOOTTIME` counts from (`/proc/sys/kernel/random/boot_id`),
/// the same for every process of the host until it restarts.
pub(super) fn boot_id() -> Option<String> {
    use std::io::Read;
    // One `read` (a UUID and a newline: 37 bytes), where `read_to_string` asks the file's
    // size and reads to the end: 3 system calls a process, not 6.
    let Ok(mut file) = std::fs::File::open("/proc/sys/kernel/random/boot_id") else {
        return None;
    };
    let mut buf = [0u8; 64];
    let n = file.read(&mut buf).ok()?;
    let mut bytes = buf[..n].to_vec();
    if n == buf.len() {
        file.read_to_end(&mut bytes).ok()?;
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return None;
    };
    let id = text.trim();
    if id.is_empty() {
        None
    } else {
        Some(id.to_string())
    }
}

/// Space for `len` bytes from the start of `file`, allocated now without changing its length
/// or contents (`fallocate` with `FALLOC_FL_KEEP_SIZE`): later writes within it do not need
/// space the file system may no longer have.
pub(super) fn reserve(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `fallocate` on an open descriptor; it touches no memory of ours.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            0,
            len as libc::off_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel thread id.
pub(super) fn raw_thread_number() -> u64 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u64 }
}

/// An inotify descriptor that watches the files.
pub(super) struct ChangeWatch {
    fd: OwnedFd,
}

impl ChangeWatch {
    pub(super) fn new(paths: &[&Path]) -> io::Result<ChangeWatch> {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain syscall; the returned descriptor is owned below.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        for p in paths {
            let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"));
            };
            let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_ATTRIB;
            // SAFETY: `c` is a valid NUL-terminated string; `raw` is our inotify descriptor.
            let wd = unsafe { libc::inotify_add_watch(raw, c.as_ptr(), mask) };
            if wd < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(ChangeWatch { fd })
    }

    pub(super) fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
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
}

/// The fields of `/proc/<pid>/stat` after the command ("S ppid ..."): the command may itself
/// contain ") ", so the line is split at the last one.
fn stat_after_command(pid: u32) -> Option<String> {
    let Ok(mut stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return None;
    };
    let command_end = stat.rfind(") ")?;
    stat.drain(..command_end + 2);
    Some(stat)
}

/// `pid`'s parent, from `/proc`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = stat_after_command(pid)?;
    let Ok(parent) = stat.split_whitespace().nth(1)?.parse::<u32>() else {
        return None;
    };
    Some(parent)
}

pub(super) fn process_is_stopped(pid: u32) -> bool {
    match stat_after_command(pid) {
        Some(rest) => matches!(rest.chars().next(), Some('T' | 't')),
        None => false,
    }
}

pub(super) fn process_name(pid: u32) -> Option<String> {
    let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
        return None;
    };
    let name = comm.trim_end_matches('\n');
    if name.is_empty() {
        None
    } else {
        Some(name.to_string())
    }
}

/// Whether `pid` is this process or one of its ancestors, from the parent ids in `/proc`;
/// `None` where the chain cannot be read.
pub(super) fn is_self_or_ancestor(pid: u32) -> Option<bool> {
    let mut current = std::process::id();
    // A chain is as long as the process tree is deep; bounded against a forged `/proc`.
    for _ in 0..4096 {
        if current == pid {
            return Some(true);
        }
        if current <= 1 {
            return Some(false);
        }
        current = parent_of(current)?;
    }
    None
}

/// The first of `among` met going up from `pid` through its parents (`pid` itself included),
/// from the parent ids in `/proc`; `None` when none is, or the chain cannot be read.
pub(super) fn ancestor_among(pid: u32, among: &[u32]) -> Option<u32> {
    let mut current = pid;
    // Bounded: a process tree is seldom deeper, and `/proc` could be forged.
    for _ in 0..64 {
        if among.contains(&current) {
            return Some(current);
        }
        if current <= 1 {
            return None;
        }
        current = parent_of(current)?;
    }
    None
}

/// Read from `/proc/locks`: the `FLOCK` line of the file's device and inode (not a waiter's
/// `->` line), whose pid is the process that took the lock.
pub(super) fn lock_owner(file: &std::fs::File) -> Option<u32> {
    let (dev, ino) = super::file_identity(file)?;
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return None;
    };
    locks_owner(&locks, major as u64, minor as u64, ino)
}

/// The owner in `/proc/locks` text of the `flock` lock on device `major:minor`, inode `ino`.
fn locks_owner(locks: &str, major: u64, minor: u64, ino: u64) -> Option<u32> {
    for line in locks.lines() {
        if let Some(pid) = flock_owner(line, major, minor, ino) {
            return Some(pid);
        }
    }
    None
}

/// The owner on one `/proc/locks` line of the `flock` lock on device `major:minor`, inode
/// `ino`; `None` where the line is not that lock's.
fn flock_owner(line: &str, major: u64, minor: u64, ino: u64) -> Option<u32> {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
    let mut fields = line.split_whitespace();
    fields.next()?;
    if fields.next()? != "FLOCK" {
        return None;
    }
    let Ok(pid) = fields.nth(2)?.parse::<u32>() else {
        return None;
    };
    let mut id = fields.next()?.split(':');
    let same = u64::from_str_radix(id.next()?, 16).ok()? == major
        && u64::from_str_radix(id.next()?, 16).ok()? == minor
        && id.next()?.parse::<u64>().ok()? == ino;
    (same && pid > 0).then_some(pid)
}

/// Counted in `/proc/self/fd`.
pub(super) fn open_descriptors() -> u64 {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries.count() as u64,
        Err(_) => super::DESCRIPTORS_ESTIMATE,
    }
}

/// `SIGKILL` for the child when the thread that starts it ends.
pub(super) fn die_with_spawning_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec the closure makes only async-signal-safe calls
    // (`prctl`, `getppid`) and does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the signal was armed: nobody would wait.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Looks with `waitid(WNOWAIT)`, which leaves the child unreaped (and `reaped` alone).
pub(super) fn child_has_exited(
    child: &mut Child,
    _reaped: &mut Option<ExitStatus>,
) -> io::Result<bool> {
    // SAFETY: `waitid` fills a plain struct; WNOWAIT leaves the child waitable.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    let r = unsafe { libc::waitid(libc::P_PID, child.id(), &mut info, flags) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    // SAFETY: `waitid` succeeded, so the pid field is initialised (0 while running).
    Ok(unsafe { info.si_pid() } != 0)
}

/// The most of `/proc/self/maps` that is read. The kernel writes it, a line (at most a few
/// KiB: a path is at most `PATH_MAX`) for each of at most `vm.max_map_count` (65,530)
/// mappings; a process's real maps are tens of KiB. A bound all the same, as every read of
/// the look is.
const MOST_MAPS: u64 = 64 << 20;

/// The files this process has mapped now, by path, each once (`/proc/self/maps`, read by
/// [`maps_line_path`]); `None` when that cannot be read. A path that is not UTF-8 is kept with
/// its bad bytes replaced: its file name still says what it is, and opening it fails.
pub(super) fn mapped_files() -> Option<Vec<String>> {
    use std::io::Read;
    let Ok(file) = std::fs::File::open("/proc/self/maps") else {
        return None;
    };
    let mut maps = Vec::new();
    file.take(MOST_MAPS).read_to_end(&mut maps).ok()?;
    let mut out: Vec<String> = Vec::new();
    // Whole lines only: one cut short at the bound would name a path cut short.
    let (mut start, mut at) = (0, 0);
    while at < maps.len() {
        if maps[at] == b'\n' {
            if let Some(path) = maps_line_path(&maps[start..at]) {
                let path = String::from_utf8_lossy(path);
                let mut seen = false;
                for p in &out {
                    if *p == path {
                        seen = true;
                        break;
                    }
                }
                if !seen {
                    out.push(path.into_owned());
                }
            }
            start = at + 1;
        }
        at += 1;
    }
    Some(out)
}

/// What the kernel writes after the path of a mapped file that has been removed since.
const DELETED: &[u8] = b" (deleted)";

/// The path of the file that one line of `/proc/<pid>/maps` (without its newline) maps;
/// `None` for an anonymous mapping, a pseudo-file (`[heap]`, `[stack]`, `[vdso]`) or a line
/// that is not one of the kernel's.
///
/// A line is `ADDRESSES PERMS OFFSET DEVICE INODE` and, for a file, spaces to a column and the
/// path, to the end of the line: all of it, spaces included (a library under `My Drivers/`).
/// The kernel writes a newline in a path as `\012`, so a line is always whole. The `
/// (deleted)` it adds after the path of a file removed since it was mapped is left out: the
/// path is the one the process loaded the file by, and its file name the one a driver is
/// known by (`drivers::library_name`) and a `DT_NEEDED` entry names. (A file really named
/// `... (deleted)` is taken for that name without the suffix, which then names no file.)
fn maps_line_path(line: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    for _ in 0..5 {
        // A field, then the spaces after it.
        let start = at;
        while at < line.len() && !line[at].is_ascii_whitespace() {
            at += 1;
        }
        if at == start {
            return None;
        }
        while at < line.len() && line[at].is_ascii_whitespace() {
            at += 1;
        }
    }
    let path = line.get(at..)?;
    if path.first() != Some(&b'/') {
        return None;
    }
    Some(path.strip_suffix(DELETED).unwrap_or(path))
}

/// `dl_iterate_phdr` over the loaded objects, asking `wanted` of each one's name until it
/// answers yes. Straight-line code, as what `wanted` is for runs at the exit of every test
/// process (`drivers::may_hold_a_driver`).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(super) fn any_loaded_object(wanted: fn(*const libc::c_char) -> bool) -> Option<bool> {
    // Miri cannot call into the dynamic loader: "cannot tell", and the caller reads the maps.
    if cfg!(miri) {
        return None;
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `fn` passed below, as a pointer.
        let wanted = unsafe {
            std::mem::transmute::<*mut libc::c_void, fn(*const libc::c_char) -> bool>(data)
        };
        // SAFETY: the loader passes a valid `info` whose name is null or NUL-terminated.
        let name = unsafe { (*info).dlpi_name };
        if name as usize == 0 {
            return 0;
        }
        wanted(name) as libc::c_int
    }
    // SAFETY: `each` matches the callback type; `data` is `wanted`, which `each` calls.
    let found = unsafe { libc::dl_iterate_phdr(Some(each), wanted as *mut libc::c_void) };
    Some(found != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_id_is_the_kernel_files_line() {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        let id = boot_id().expect("a boot id");
        assert_eq!(id, text.trim());
        assert_eq!(id.len(), 36, "{id:?}");
        assert_eq!(
            boot_id().as_deref(),
            Some(id.as_str()),
            "the same each time"
        );
    }

    #[test]
    fn a_maps_line_names_its_whole_path() {
        let path = |line: &str| maps_line_path(line.as_bytes()).map(|p| p.to_vec());
        let lib = "7f2c3a000000-7f2c3a022000 r--p 00000000 08:01 1311 ";
        let pad = "                      ";
        let cases: &[(String, Option<&str>)] = &[
            (
                format!("{lib}{pad}/usr/lib/libc.so.6"),
                Some("/usr/lib/libc.so.6"),
            ),
            (
                format!("{lib}{pad}/opt/My Drivers/libcuda.so.1"),
                Some("/opt/My Drivers/libcuda.so.1"),
            ),
            (format!("{lib}{pad}/a  b /c "), Some("/a  b /c ")),
            (
                format!("{lib}{pad}/usr/lib/libcuda.so.1 (deleted)"),
                Some("/usr/lib/libcuda.so.1"),
            ),
            (format!("{lib}{pad}/tmp/x\\012y"), Some("/tmp/x\\012y")),
            (format!("{lib}/no/padding"), Some("/no/padding")),
            ("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ".to_string(), None),
            ("7ffd1000-7ffd2000 rw-p 00000000 00:00 0".to_string(), None),
            (format!("55d0-55d1 rw-p 00000000 00:00 0 {pad}[heap]"), None),
            (format!("7ffd-7ffe r-xp 00000000 00:00 0 {pad}[vdso]"), None),
            ("7ffd-7ffe r-xp 0 00:00".to_string(), None),
            ("/usr/lib/libc.so.6".to_string(), None),
            ("".to_string(), None),
            ("      ".to_string(), None),
            ("a b c d e".to_string(), None),
            ("a b c d e f".to_string(), None),
        ];
        for (line, want) in cases {
            assert_eq!(path(line), want.map(|w| w.as_bytes().to_vec()), "{line:?}");
        }
        // Bytes that are not UTF-8 are a path's too.
        let mut line = format!("{lib}{pad}/tmp/").into_bytes();
        line.extend_from_slice(b"\xff\xfelibcuda.so");
        assert_eq!(maps_line_path(&line), Some(&b"/tmp/\xff\xfelibcuda.so"[..]));
    }

    #[test]
    fn this_process_maps_name_its_libraries_whole() {
        // A file at a path with spaces, mapped: its whole path is among the maps'.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("My Drivers (x)");
        std::fs::create_dir(&path).unwrap();
        let path = path.join("libfuzz map.so (deleted)");
        std::fs::write(&path, b"0123").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh read-only private mapping of an open file, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let mapped = mapped_files().unwrap();
        let whole = path.to_str().unwrap();
        let without = whole.strip_suffix(" (deleted)").unwrap();
        // Named " (deleted)" on purpose: taken for the kernel's suffix, as documented.
        assert!(
            mapped.iter().any(|m| m == without),
            "{without} not in {mapped:?}"
        );
        std::fs::remove_file(&path).unwrap();
        let mapped = mapped_files().unwrap();
        assert!(
            mapped.iter().any(|m| m == whole),
            "{whole} not in {mapped:?}"
        );
        // SAFETY: the mapping made above.
        assert_eq!(unsafe { libc::munmap(at, 4) }, 0);
    }

    #[test]
    fn maps_lines_of_any_bytes_read_without_a_panic() {
        use crate::fuzz_tests::{corpus, mutate, run};
        let samples: Vec<&[u8]> = vec![
            b"7f2c3a000000-7f2c3a022000 r--p 00000000 08:01 1311        /usr/lib/libc.so.6",
            b"7f2c3a000000-7f2c3a022000 r--p 00000000 08:01 1311   /opt/My Drivers/libcuda.so.1",
            b"7f2c3a000000-7f2c3a022000 r--p 00000000 08:01 1311   /x/libcuda.so (deleted)",
            b"55d0-55d1 rw-p 00000000 00:00 0                          [heap]",
            b"7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ",
        ];
        let check = |line: &[u8]| {
            if let Some(p) = maps_line_path(line) {
                // A path is a `/` and what follows, to the end of the line, less one
                // " (deleted)".
                assert_eq!(p.first(), Some(&b'/'), "{line:?}");
                let mut whole = p.to_vec();
                if !line.ends_with(&whole) {
                    whole.extend_from_slice(DELETED);
                }
                assert!(line.ends_with(&whole), "{line:?}");
            }
        };
        for (_, bytes) in corpus("maps") {
            for line in bytes.split(|&b| b == b'\n') {
                check(line);
            }
        }
        let ran = run("maps", 20_000, &mut |rng| {
            let line = if rng.one_in(4) {
                rng.bytes(b" /-0123456789abcdefrwxp:[]()deleted")
            } else {
                let sample = rng.sample(&samples);
                mutate(rng, sample, &samples)
            };
            check(&line);
        });
        eprintln!("maps: {ran} cases");
    }

    #[test]
    fn lock_owners_are_read_from_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 00:2b:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 99 00:2b:1234 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 77 fd:01:555 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 1313 fd:01:555 0 EOF\n";
        assert_eq!(locks_owner(locks, 0, 0x2b, 1234), Some(4242));
        assert_eq!(locks_owner(locks, 0xfd, 1, 555), Some(1313));
        assert_eq!(locks_owner(locks, 0xfd, 1, 556), None);
        assert_eq!(locks_owner("garbage\n1:\n", 0, 0x2b, 1234), None);
    }

    #[test]
    fn the_owner_of_a_lock_this_process_took_is_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("slot")).unwrap();
        assert_eq!(lock_owner(&file), None);
        file.try_lock().unwrap();
        assert_eq!(lock_owner(&file), Some(std::process::id()));
    }

    /// The names the loader's list gave [`collect`] (one test uses them).
    static NAMES: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());

    fn collect(name: *const libc::c_char) -> bool {
        // SAFETY: the loader's names are NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr(name) };
        NAMES.lock().push(name.to_string_lossy().into_owned());
        false
    }

    fn names_libc(name: *const libc::c_char) -> bool {
        // SAFETY: as above.
        let name = unsafe { std::ffi::CStr::from_ptr(name) };
        NAMES.lock().push(String::new());
        name.to_bytes().windows(7).any(|w| w == b"libc.so")
    }

    #[test]
    fn the_loaders_list_names_the_libraries_the_maps_name() {
        NAMES.lock().clear();
        let found = any_loaded_object(collect);
        let names = std::mem::take(&mut *NAMES.lock());
        assert_eq!(found, Some(false), "{names:?}");
        // Every shared library this test binary has mapped is on the loader's list, by the
        // same file name.
        let mapped = mapped_files().unwrap();
        let file = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
        let listed: Vec<String> = names.iter().map(|n| file(n)).collect();
        let libraries: Vec<String> = mapped
            .iter()
            .map(|p| file(p))
            .filter(|f| f.starts_with("libc.so") || f.starts_with("ld-linux"))
            .collect();
        assert!(!libraries.is_empty(), "{mapped:?}");
        for lib in &libraries {
            assert!(listed.contains(lib), "{lib} not in {names:?}");
        }
        // The first yes ends the look.
        let found = any_loaded_object(names_libc);
        let asked = std::mem::take(&mut *NAMES.lock()).len();
        assert_eq!(found, Some(true));
        assert!(asked <= names.len());
    }
}
