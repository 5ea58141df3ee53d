//! Windows' side of what `unix.rs` does: std's portable behaviour where Unix has modes, owners,
//! descriptor limits, process groups and signals, and positioned reads and writes through
//! `seek_read` and `seek_write`.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use super::DescriptorLimits;

pub(super) fn default_slot_dir() -> PathBuf {
    std::env::temp_dir().join("gpu-test-permit")
}

pub(super) fn per_user_name(base: &str) -> String {
    base.to_string()
}

pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir(dir)
}

pub(super) fn check_owner_and_mode(_dir: &Path, _meta: &std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

pub(super) fn private_no_follow(_opts: &mut OpenOptions) {}

pub(super) fn no_follow_no_block(_opts: &mut OpenOptions) {}

pub(super) fn no_block(_opts: &mut OpenOptions) {}

pub(super) fn open_lock_file(path: &Path, _shared_dir: bool) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let len = file.metadata()?.len();
    Ok((file, len))
}

pub(super) fn open_owner_file(
    path: &Path,
    shared_dir: bool,
) -> io::Result<(File, bool, super::Writer)> {
    let (file, _) = open_lock_file(path, shared_dir)?;
    Ok((file, true, super::Writer::ThisUser))
}

pub(super) fn restrict_to_owner(_file: &File) {}

/// No other user shares a slot directory here (none is shared: [`is_shared_dir`]).
pub(super) fn writer(_file: &File) -> super::Writer {
    super::Writer::ThisUser
}

pub(super) fn let_others_probe(_dir: &Path, _file: &Path) {}

/// See [`super::let_go`]: no process shares a handle's lock here (no `fork`, and permits
/// are not passed on), so unlocking is letting go.
pub(super) fn let_go(file: &File, _path: &Path, _shared_dir: bool) -> io::Result<()> {
    file.unlock()
}

pub(super) fn open_private_file(_dir: &Path, _name: &str) -> Option<File> {
    None
}

pub(super) fn special_file_kind(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

pub(super) fn explain_open_error(_path: &Path, e: io::Error) -> io::Error {
    e
}

pub(super) fn owned_by_this_user(_meta: &std::fs::Metadata) -> bool {
    true
}

pub(super) fn is_shared_dir(_meta: &std::fs::Metadata) -> bool {
    false
}

pub(super) fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n =
            std::os::windows::fs::FileExt::seek_write(file, &buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

pub(super) fn read_at_start(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, 0)
}

pub(super) fn same_file(_path: &Path, _file: &File) -> bool {
    true
}

pub(super) fn ensure_descriptors(
    _needed: usize,
    _counted: super::Counted,
    _open_descriptors: fn() -> u64,
) -> Result<(), DescriptorLimits> {
    Ok(())
}

pub(super) fn pipe_identity(_pipe: &io::PipeReader) -> io::Result<(u64, u64)> {
    Ok((0, 0))
}

/// Without file identities to compare, a request is recognised by its form alone.
pub(super) fn stdin_carries_token(_pipe: (u64, u64), _token: &str) -> bool {
    true
}

pub(super) fn write_stdout_unbuffered(bytes: &[u8]) {
    use std::io::Write;
    let mut out = io::stdout();
    let _ = out.write_all(bytes);
    let _ = out.flush();
}

pub(super) fn exit_now() -> ! {
    std::process::exit(0)
}

pub(super) fn own_process_group(_cmd: &mut Command) {}

pub(super) fn kill_process_group(_child: &Child) {}

pub(super) fn exit_signal(_status: &ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
pub(super) fn exit_status(code: i32) -> ExitStatus {
    use std::os::windows::process::ExitStatusExt;
    ExitStatus::from_raw(code as u32)
}

pub(super) fn file_identity(_file: &File) -> Option<(u64, u64)> {
    None
}

pub(super) fn inherited_file(_fd: u64, _identity: (u64, u64)) -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "inherited permits need Unix descriptors",
    ))
}

pub(super) fn pass_to_child(_cmd: &mut Command, _file: &File) -> io::Result<u64> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "passing a permit to a command needs Unix descriptors",
    ))
}

pub(super) const CUDA_DRIVER_LIBRARIES: &[&std::ffi::CStr] = &[c"nvcuda.dll"];

pub(super) const VULKAN_LOADER_LIBRARIES: &[&std::ffi::CStr] = &[c"vulkan-1.dll"];

pub(super) const LIBRARY_PATH_VAR: &str = "PATH";

#[link(name = "kernel32")]
unsafe extern "system" {
    fn LoadLibraryA(name: *const std::ffi::c_char) -> *mut std::ffi::c_void;
    fn GetProcAddress(
        module: *mut std::ffi::c_void,
        name: *const std::ffi::c_char,
    ) -> *mut std::ffi::c_void;
}

/// A DLL loaded with `LoadLibraryA`, never freed: the symbols taken from it stay valid for the
/// life of the process.
pub(super) fn open_library(name: &std::ffi::CStr) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: `name` is a valid C string; loading a library runs its initialisers, which is
    // what the caller asks for.
    std::ptr::NonNull::new(unsafe { LoadLibraryA(name.as_ptr()) })
}

/// The address of `symbol` in a library from [`open_library`].
pub(super) fn library_symbol(
    library: std::ptr::NonNull<std::ffi::c_void>,
    symbol: &std::ffi::CStr,
) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    // SAFETY: `library` is a live module handle (never freed) and `symbol` a valid C string;
    // `GetProcAddress` only looks the name up.
    std::ptr::NonNull::new(unsafe { GetProcAddress(library.as_ptr(), symbol.as_ptr()) })
}

/// Not told here: every process counts as visible.
pub(super) fn process_is_visible(_pid: u32) -> bool {
    true
}

pub(super) fn is_too_many_open_files(_e: &io::Error) -> bool {
    false
}
