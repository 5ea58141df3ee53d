//! What every Unix shares: file modes, owners and groups, `O_NOFOLLOW`, descriptor limits,
//! process groups and signals, the raw standard streams of a probe child.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use super::{Counted, DescriptorLimits};

pub(super) fn default_slot_dir() -> PathBuf {
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
                crate::notice::line(&note);
            }
            dir
        })
        .clone()
}

/// How many alternatives to a per-user directory are tried when other users hold its name.
const ALTERNATIVES: usize = 16;

/// Picks the per-user directory `name` in the shared `base` (like `/tmp`), where any local user
/// can create that name first. The candidates are `name`, `name-1` ... `name-16`; the choice is
/// the first one that belongs to user `me` (or root), else the first one that does not exist.
/// The rule depends only on what exists, so every process of the user makes the same choice,
/// also after a squatter removes its directory again. When all are taken, `name` itself is
/// returned and [`prepare_dir`](super::prepare_dir) reports its owner.
///
/// Returns the directory and, when it is not `name`, a line saying why.
fn choose_private_dir(base: &Path, name: &str, me: u32) -> (PathBuf, Option<String>) {
    let primary = candidate(base, name, 0);
    let mut chosen = None;
    for i in 0..=ALTERNATIVES {
        let p = candidate(base, name, i);
        if matches!(owner(&p), Ok(uid) if uid == me || uid == 0) {
            chosen = Some(p);
            break;
        }
    }
    if chosen.is_none() {
        for i in 0..=ALTERNATIVES {
            let p = candidate(base, name, i);
            if matches!(owner(&p), Err(e) if e.kind() == io::ErrorKind::NotFound) {
                chosen = Some(p);
                break;
            }
        }
    }
    let Some(dir) = chosen else {
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

/// Candidate `i` of [`choose_private_dir`]: `name`, then `name-i`, in `base`.
fn candidate(base: &Path, name: &str, i: usize) -> PathBuf {
    match i {
        0 => base.join(name),
        i => base.join(format!("{name}-{i}")),
    }
}

/// The owner of `p` (a symbolic link's own).
fn owner(p: &Path) -> io::Result<u32> {
    Ok(std::fs::symlink_metadata(p)?.uid())
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub(super) fn owned_by_this_user(meta: &std::fs::Metadata) -> bool {
    meta.uid() == effective_uid()
}

pub(super) fn per_user_name(base: &str) -> String {
    format!("{base}-{}", effective_uid())
}

pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

pub(super) fn check_owner_and_mode(dir: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
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

/// Group-writable with the setgid bit: the files made in it keep the directory's group.
fn is_group_shared(mode: u32) -> bool {
    mode & 0o2020 == 0o2020
}

/// Whether `gid` is this process's effective group or one of its supplementary groups.
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

/// A file created for this user only (mode 0600), never through a symbolic link.
pub(super) fn private_no_follow(opts: &mut OpenOptions) {
    opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
}

/// No symbolic link followed, and no wait for a writer when the name is a FIFO.
pub(super) fn no_follow_no_block(opts: &mut OpenOptions) {
    opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
}

/// No wait for the other end when the name is a FIFO (on a regular file `O_NONBLOCK` has no
/// effect).
pub(super) fn no_block(opts: &mut OpenOptions) {
    opts.custom_flags(libc::O_NONBLOCK);
}

pub(super) fn open_lock_file(path: &Path, shared_dir: bool) -> io::Result<(File, u64)> {
    let (file, meta, _) = open_lock_file_as(path, shared_dir, false)?;
    Ok((file, meta.len()))
}

/// [`open_lock_file`] for a file that only its owner may write ([`super::open_owner_file`]):
/// made without write bits for the group and others, given that mode where this user owns it,
/// and opened for reading only where another user owns it. Returns the file and whether this
/// process may write it.
pub(super) fn open_owner_file(
    path: &Path,
    shared_dir: bool,
) -> io::Result<(File, bool, super::Writer)> {
    let (file, meta, writable) = open_lock_file_as(path, shared_dir, true)?;
    // As it was found: a file of this user's that others may write (an earlier version made
    // them so) says nothing this user alone wrote until this user rewrites it
    // ([`super::restrict_to_owner`]).
    Ok((file, writable, writer_of(meta.uid(), meta.mode())))
}

fn open_lock_file_as(
    path: &Path,
    shared_dir: bool,
    owner_writes: bool,
) -> io::Result<(File, std::fs::Metadata, bool)> {
    let mut mode = if shared_dir {
        shared_file_mode(path)
    } else {
        0o600
    };
    if owner_writes {
        mode &= !0o022;
    }
    let open = |create: bool, write: bool| {
        let mut opts = OpenOptions::new();
        opts.read(true).write(write);
        if create {
            opts.create_new(true).mode(mode);
        }
        // O_NONBLOCK only matters for what is refused below: it keeps `open` on a FIFO
        // from waiting for a writer.
        no_follow_no_block(&mut opts);
        opts.open(path)
    };
    let mut tries = 0;
    let mut writable = true;
    let file = loop {
        match open(false, true) {
            Ok(file) => break file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            // Another user's file that only its owner writes: read and locked, never written.
            Err(e) if owner_writes && e.kind() == io::ErrorKind::PermissionDenied => {
                match open(false, false) {
                    Ok(file) => {
                        writable = false;
                        break file;
                    }
                    Err(e) => return Err(explain_open_error(path, e)),
                }
            }
            Err(e) => return Err(explain_open_error(path, e)),
        }
        match open(true, true) {
            Ok(file) => break file,
            // Another process created it between the two calls.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(explain_open_error(path, e)),
        }
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(super::not_a_regular_file(&meta));
    }
    // A private directory's files are this user's and made without others' write bits. A file
    // only its owner writes gets the read bits it lacks (a umask such as 077 took them) but
    // keeps any write bits others have: its content may then be another user's until its
    // owner rewrites it, and the mode says so (`restrict_to_owner`).
    if shared_dir {
        let mode = if owner_writes {
            mode | (meta.mode() & 0o022)
        } else {
            mode
        };
        share_with_group(&file, &meta, path, mode);
    }
    Ok((file, meta, writable))
}

/// Who may have written the open file `file` ([`super::Writer`]): its owner alone, or any
/// user its mode lets write it.
pub(super) fn writer(file: &File) -> super::Writer {
    match file.metadata() {
        Ok(meta) => writer_of(meta.uid(), meta.mode()),
        Err(_) => super::Writer::Unknown,
    }
}

/// Takes the write bits of the group and others away from `file`, which this process has just
/// written whole, where it owns it: from now on only its owner writes it.
pub(super) fn restrict_to_owner(file: &File) {
    let Ok(meta) = file.metadata() else { return };
    if meta.uid() == effective_uid() && meta.mode() & 0o022 != 0 {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o755));
    }
}

/// Who may have written a file owned by `uid` of mode `mode`.
fn writer_of(uid: u32, mode: u32) -> super::Writer {
    if mode & 0o022 != 0 {
        return super::Writer::Others { owner: uid };
    }
    if uid == effective_uid() {
        super::Writer::ThisUser
    } else {
        super::Writer::User(uid)
    }
}

/// The mode of a lock file in a shared directory: read and write for whoever may write the
/// directory (its group, and everyone in a world-writable sticky one).
fn shared_file_mode(path: &Path) -> u32 {
    let dir_mode = match parent_metadata(path) {
        Some(m) => m.mode(),
        None => 0o020,
    };
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
fn share_with_group(file: &File, meta: &std::fs::Metadata, path: &Path, mode: u32) {
    if meta.uid() != effective_uid() {
        return;
    }
    if meta.mode() & 0o777 != mode {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    }
    if let Some(dir) = parent_metadata(path)
        && dir.gid() != meta.gid()
    {
        let _ = std::os::unix::fs::fchown(file, None, Some(dir.gid()));
    }
}

/// The metadata of the directory `path` is in.
fn parent_metadata(path: &Path) -> Option<std::fs::Metadata> {
    let Ok(meta) = std::fs::metadata(path.parent()?) else {
        return None;
    };
    Some(meta)
}

pub(super) fn open_private_file(dir: &Path, name: &str) -> Option<File> {
    let me = effective_uid();
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return None;
    };
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return None;
    }
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(name))
    else {
        return None;
    };
    let Ok(meta) = file.metadata() else {
        return None;
    };
    (meta.uid() == me).then_some(file)
}

/// What a file that is not a regular file is, in words.
pub(super) fn special_file_kind(ft: &std::fs::FileType) -> &'static str {
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
}

/// Adds what a user can do to the errors that opening a slot file gives for files other users
/// made.
pub(super) fn explain_open_error(path: &Path, e: io::Error) -> io::Error {
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
    e
}

pub(super) fn is_shared_dir(meta: &std::fs::Metadata) -> bool {
    meta.mode() & 0o022 != 0
}

pub(super) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

pub(super) fn let_others_probe(dir: &Path, file: &Path) {
    let add = |path: &Path, bits: u32| {
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_symlink()
            && meta.mode() & bits != bits
            && meta.uid() == effective_uid()
        {
            let mode = (meta.mode() | bits) & 0o7777;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        }
    };
    add(dir, 0o011);
    add(file, 0o044);
}

/// See [`super::let_go`]. Linux and Android replace the descriptor with `dup3` (close-on-exec
/// set in the same call); elsewhere `dup2` clears the flag, and it is set again at once.
pub(super) fn let_go(file: &File, path: &Path, shared_dir: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (fresh, _) = open_lock_file(path, shared_dir)?;
    let (from, to) = (fresh.as_raw_fd(), file.as_raw_fd());
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: both are open descriptors of this process; `dup3` makes `to` name `from`'s
    // description, closing `to`'s old one, in one step (no other thread can see `to` closed).
    let rc = unsafe { libc::dup3(from, to, libc::O_CLOEXEC) };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    // SAFETY: as above, with `dup2`; then the close-on-exec flag that `dup2` cleared.
    let rc = unsafe {
        let rc = libc::dup2(from, to);
        if rc >= 0 {
            libc::fcntl(to, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        rc
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // `fresh` closes its own number; `to` keeps the new description.
    Ok(())
}

pub(super) fn read_at_start(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, 0)
}

pub(super) fn same_file(path: &Path, file: &File) -> bool {
    match (std::fs::symlink_metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// `open_descriptors` counts the descriptors open in this process now (or estimates them).
pub(super) fn ensure_descriptors(
    needed: usize,
    counted: Counted,
    open_descriptors: fn() -> u64,
) -> Result<(), DescriptorLimits> {
    /// Left free for the program itself (its test, the GPU driver, pipes): 64, or a quarter
    /// of a soft limit below 256, so that a small limit (`ulimit -n 64`) still leaves room for
    /// the slots.
    const HEADROOM: u64 = 64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write to.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(()); // unknown: let opening the files tell
    }
    /// Where the limit leaves this many to spare beyond the files needed and the headroom,
    /// the open descriptors are not counted (counting reads `/proc/self/fd`, the largest part
    /// of a test process's set-up): a process with more than that open finds out from the
    /// kernel's EMFILE instead, which the slot directory's opening reports with the count.
    const UNCOUNTED_SPARE: u64 = 1024;
    // `rlim_t` is narrower than u64 on some targets.
    #[allow(clippy::unnecessary_cast)]
    let (soft, hard, infinity) = (
        lim.rlim_cur as u64,
        lim.rlim_max as u64,
        libc::RLIM_INFINITY as u64,
    );
    let unlimited = |v: u64| v == infinity;
    let headroom = if unlimited(soft) {
        HEADROOM
    } else {
        HEADROOM.min(soft / 4)
    };
    let least = (needed as u64).saturating_add(headroom);
    if unlimited(soft)
        || (counted == Counted::IfTight && least.saturating_add(UNCOUNTED_SPARE) <= soft)
    {
        return Ok(());
    }
    let open = match counted {
        Counted::Exhausted => soft,
        Counted::IfTight => open_descriptors(),
    };
    let want = open.saturating_add(least);
    if want <= soft {
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
        available: soft.saturating_sub(open).saturating_sub(headroom),
        soft,
        hard,
        headroom,
    })
}

pub(super) fn pipe_identity(pipe: &io::PipeReader) -> io::Result<(u64, u64)> {
    let meta = File::from(std::os::fd::OwnedFd::from(pipe.try_clone()?)).metadata()?;
    Ok((meta.dev(), meta.ino()))
}

pub(super) fn stdin_carries_token(pipe: (u64, u64), token: &str) -> bool {
    // SAFETY: `fstat` fills a plain struct; an fd that is not open gives an error.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0
        || st.st_mode & libc::S_IFMT != libc::S_IFIFO
        || (st.st_dev as u64, st.st_ino as u64) != pipe
    {
        return false;
    }
    // The parent wrote the token before starting this process: it is there now or never.
    let mut pfd = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one valid pollfd without waiting.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 1 || pfd.revents & libc::POLLIN == 0 {
        return false;
    }
    let mut buf = [0u8; 64];
    // SAFETY: reads into a valid buffer of its length.
    let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
    let Ok(n) = usize::try_from(n) else {
        return false;
    };
    match buf.get(..n) {
        Some(got) => got.strip_suffix(b"\n") == Some(token.as_bytes()),
        None => false,
    }
}

/// Straight to fd 1: std's stdout buffer is not flushed by `_exit`.
pub(super) fn write_stdout_unbuffered(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid buffer of the given length.
        let n = unsafe { libc::write(1, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

pub(super) fn exit_now() -> ! {
    // SAFETY: `_exit` ends the process at once; nothing runs after it.
    unsafe { libc::_exit(0) }
}

pub(super) fn own_process_group(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
}

pub(super) fn kill_process_group(child: &Child) {
    // SAFETY: sends a signal. The caller guarantees that the child is not reaped yet; it leads
    // its group, so the id still names its group.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
}

/// Whether a process with this id exists in this process's PID namespace (`kill(pid, 0)`:
/// allowed, or refused for want of permission).
pub(super) fn process_is_visible(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

pub(super) fn exit_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(test)]
pub(super) fn exit_status(code: i32) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus::from_raw(code << 8)
}

pub(super) fn file_identity(file: &File) -> Option<(u64, u64)> {
    match file.metadata() {
        Ok(m) => Some((m.dev(), m.ino())),
        Err(_) => None,
    }
}

pub(super) fn inherited_file(fd: u64, identity: (u64, u64)) -> io::Result<File> {
    use std::os::fd::FromRawFd;
    let Ok(fd) = libc::c_int::try_from(fd) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no such descriptor",
        ));
    };
    // SAFETY: `fcntl` with `F_DUPFD_CLOEXEC` takes any number and fails with EBADF for one that
    // is not open; it touches no memory.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a descriptor just made for us, owned by nothing else.
    let file = unsafe { File::from_raw_fd(dup) };
    let meta = file.metadata()?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != identity {
        return Err(io::Error::other("it is open on another file"));
    }
    Ok(file)
}

pub(super) fn pass_to_child(cmd: &mut Command, file: &File) -> io::Result<u64> {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    // Close-on-exec here, as std makes every descriptor: only the command keeps it.
    let dup = OwnedFd::from(file.try_clone()?);
    let number = dup.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: `fcntl` is one. It owns `dup`, so the number names this description
    // for as long as `cmd` can spawn; the flag changes in the child's descriptor table only.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(dup.as_raw_fd(), libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    };
    Ok(number as u64)
}

#[cfg(not(target_vendor = "apple"))]
pub(super) const CUDA_DRIVER_LIBRARIES: &[&std::ffi::CStr] = &[c"libcuda.so.1", c"libcuda.so"];
#[cfg(target_vendor = "apple")]
pub(super) const CUDA_DRIVER_LIBRARIES: &[&std::ffi::CStr] = &[c"libcuda.dylib"];

#[cfg(not(target_vendor = "apple"))]
pub(super) const VULKAN_LOADER_LIBRARIES: &[&std::ffi::CStr] =
    &[c"libvulkan.so.1", c"libvulkan.so"];
#[cfg(target_vendor = "apple")]
pub(super) const VULKAN_LOADER_LIBRARIES: &[&std::ffi::CStr] = &[];

#[cfg(not(target_vendor = "apple"))]
pub(super) const LIBRARY_PATH_VAR: &str = "LD_LIBRARY_PATH";
#[cfg(target_vendor = "apple")]
pub(super) const LIBRARY_PATH_VAR: &str = "DYLD_LIBRARY_PATH";

/// A shared library opened with `dlopen` (`RTLD_NOW | RTLD_LOCAL`), never closed: the symbols
/// taken from it stay valid for the life of the process.
pub(super) fn open_library(name: &std::ffi::CStr) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: `name` is a valid C string; loading a library runs its initialisers, which is
    // what the caller asks for.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    std::ptr::NonNull::new(handle)
}

/// The address of `symbol` in a library from [`open_library`].
pub(super) fn library_symbol(
    library: std::ptr::NonNull<std::ffi::c_void>,
    symbol: &std::ffi::CStr,
) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: `library` is a live handle from `dlopen` (never closed) and `symbol` a valid C
    // string; `dlsym` only looks the name up.
    std::ptr::NonNull::new(unsafe { libc::dlsym(library.as_ptr(), symbol.as_ptr()) })
}

pub(super) fn is_too_many_open_files(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMFILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_its_pipe_is_not_honoured() {
        // This test process's standard input is not the named pipe.
        let token = "00112233445566778899aabbccddeeff";
        assert!(!stdin_carries_token((7, 42), token));
    }

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
