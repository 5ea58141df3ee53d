//! GPU driver libraries in a test process: which it loaded, and whether it held a permit then.
//!
//! A test that builds its GPU object without a permit escapes the cap, and nothing in the
//! permits' own records can see it. What can be seen is the driver: a process that uses a GPU
//! maps its driver library (`libcuda`, a Vulkan ICD such as NVIDIA's `libGLX_nvidia`, Mesa's
//! `libvulkan_radeon`, `libvulkan_intel` or `libvulkan_lvp`, AMDVLK, SwiftShader,
//! `libnvidia-*`, `libnvcuvid`, `libnvoptix`, Level Zero's `libze_intel_gpu`, an OpenCL ICD
//! such as `libigdrcl` or `libamdocl64`; see [`driver_by_name`]), or any library that a
//! Vulkan ICD manifest or OpenCL vendor file installed on the machine names, whatever its name
//! ([`driver_library`]). Two ways to see it:
//!
//! - **Watched** (Linux with glibc): `gpu-test-permit watch -- COMMAND` (or `run --watch`), as
//!   cargo's target runner (for `cargo test` and nextest alike), starts the test process with
//!   glibc's loader log (`LD_DEBUG=files`) in a private directory, and names the log to the
//!   process in [`WATCH_VAR`]. Every process of the command (the test, and each process it
//!   starts that inherits the environment: a tool a test runs, a script's programs) writes
//!   its own log there, `ld.<pid>`: one line for every library it maps, as it maps it. This
//!   crate writes a line into its process's log each time the process goes from no permit to
//!   one and back ([`HELD_MARK`], [`FREE_MARK`]). The order of the lines says which drivers
//!   each process loaded while it held no permit (the command's `gpu_test_permit_cli::watch_log`,
//!   read as a stream:
//!   no log is too long), however briefly they stayed. When the command exits the watcher
//!   reads every process's log, counts what they say as the test's, and records it in the
//!   run's records, which `report` reads. A process started inside a permit passed on to it
//!   ([`GpuTestPermit::pass_to`](crate::GpuTestPermit::pass_to), `gpu-test-permit run`)
//!   writes its log as `held.<pid>` ([`INSIDE_PERMIT_LOG`]) and held the permit all its life.
//!   This crate's own probe children are left out: they load drivers without a permit on
//!   purpose, and are started without the loader's log, so they write none. So are the
//!   drivers that NVIDIA's management library loads (`nvmlInit` maps `libcuda`, and opens no
//!   context): the log names `libnvidia-ml` as what loaded them.
//! - **In-process** (Linux, any libc; no watcher): at the process's first permit this crate
//!   looks at what the process has mapped (the loader's list of loaded objects, then, where it
//!   names a driver or a Vulkan, OpenCL or Level Zero loader, `/proc/self/maps`); a driver
//!   already there was loaded before the first permit, unless this crate's own NVML query
//!   mapped it (for a permit that declares memory). Under nextest, a test process that
//!   never took a permit looks again as it exits. A driver unloaded before either look (wgpu
//!   unloads the Vulkan drivers when its instance is dropped) is not seen this way: watch the
//!   run for that (`report` of a run that was not watched says so).
//!
//! **Linked at build time.** A program linked to a driver (`-lcuda`: the `DT_NEEDED` of
//! cudarc's `dynamic-linking`, of `cust`) maps it as it starts, before its first instruction,
//! in every test, CPU tests included; mapping it touches no GPU (`cuInit` does). Such drivers
//! are reported apart, never as loads without a permit: in the log, what the loader maps
//! before the program's first constructor (`calling init`) or its `transferring control`
//! (the watch log's `linked`; a `dlopen` in a constructor still counts as a load); in the
//! in-process look, the drivers among the executable's own dependencies, transitively
//! ([`linked_at_build_time`], read from the ELF files only when a driver is mapped). The
//! watch cannot tell which tests of such a program use the GPU: the driver is there before
//! any of them runs.
//!
//! Under `cargo nextest` both are recorded in the run's records ([`DriversRecord`]) and
//! `gpu-test-permit report` names the tests in a section of their own; under `cargo test` a
//! test binary that had a driver loaded before its first permit says so in one line as it
//! exits. Other platforms see nothing: [`loaded_drivers`] returns `None` there.
//!
//! ```
//! # #[cfg(feature = "__cli")] { // only the command's build has `__private`
//! use gpu_test_permit::__private::drivers::driver_library;
//!
//! assert!(driver_library("/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"));
//! assert!(driver_library("libcuda.so.1"));
//! assert!(!driver_library("libvulkan.so.1")); // the loader, not a driver
//! # }
//! ```
//!
//! [`DriversRecord`]: crate::runs::DriversRecord

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::config::WATCH_VAR;

mod elf;

/// The line written into a watched process's loader log when it goes from no permit to one.
pub const HELD_MARK: &str = "gpu-test-permit: held";
/// The line written when it goes back to none.
pub const FREE_MARK: &str = "gpu-test-permit: free";

/// Whether the library at `path` (or named `path`) is a GPU driver on this machine: one known
/// by its file name ([`driver_by_name`]), or one that an installed Vulkan ICD manifest or
/// OpenCL vendor file names (the Vulkan loader's search path, `VK_DRIVER_FILES`,
/// `VK_ICD_FILENAMES` and `VK_ADD_DRIVER_FILES` included; `/etc/OpenCL/vendors`,
/// `OCL_ICD_VENDORS`; Level Zero's `ZE_ENABLE_ALT_DRIVERS`). The manifests are read once per
/// process, the first time a name is not on the list; one that cannot be read or is not a
/// manifest is skipped.
pub fn driver_library(path: &str) -> bool {
    driver_by_name(path) || crate::icd::named_by_manifest(path)
}

/// Whether the library at `path` (or named `path`) is a GPU driver by its file name alone:
/// mapping it means the process reached a GPU (or a software one such as lavapipe or
/// SwiftShader):
///
/// - CUDA: `libcuda.so*`, `nvcuda.dll`; NVIDIA's other driver libraries `libnvidia-*` (its
///   management library `libnvidia-ml`, which opens no context, is left out), its video
///   decoder `libnvcuvid` and ray tracer `libnvoptix`;
/// - Vulkan drivers (ICDs): NVIDIA's `libGLX_nvidia`, Mesa's `libvulkan_*` (radeon, intel,
///   lvp, nouveau, ...), AMDVLK's `amdvlk*`, SwiftShader's `libvk_swiftshader`; not the loader
///   `libvulkan.so` itself, which a process loads to find out that there is no driver;
/// - GL: NVIDIA's `libEGL_nvidia`, Mesa's `libgallium*` and `*_dri.so`;
/// - ROCm/HIP: `libamdhip64`, `libhsa-runtime64`;
/// - Level Zero: Intel's GPU driver `libze_intel_gpu` (not the loader `libze_loader`);
/// - OpenCL drivers (ICDs): Intel's `libigdrcl`, AMD's `libamdocl*` (not the loader
///   `libOpenCL`).
///
/// ```
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::drivers::driver_by_name;
///
/// assert!(driver_by_name("/usr/lib/x86_64-linux-gnu/libvk_swiftshader.so"));
/// assert!(driver_by_name("libze_intel_gpu.so.1"));
/// assert!(!driver_by_name("libOpenCL.so.1"));
/// # }
/// ```
pub fn driver_by_name(path: &str) -> bool {
    let name = library_name(path);
    // Up to the first `.so`, else all of it.
    let mut end = 0;
    while end < name.len() && !name.as_bytes()[end..].starts_with(b".so") {
        end += 1;
    }
    let stem = &name[..end];
    if stem.ends_with("_dri") {
        return true;
    }
    (stem == "libcuda" || name.eq_ignore_ascii_case("nvcuda.dll"))
        || (starts_with_any(stem, &DRIVER_PREFIXES) && !stem.starts_with("libnvidia-ml"))
}

/// Whether `name` starts with one of `prefixes`.
fn starts_with_any(name: &str, prefixes: &[&str]) -> bool {
    for p in prefixes {
        if name.starts_with(p) {
            return true;
        }
    }
    false
}

/// The starts of drivers' file names ([`driver_by_name`]).
const DRIVER_PREFIXES: [&str; 14] = [
    "libvulkan_",
    "libGLX_nvidia",
    "libEGL_nvidia",
    "amdvlk",
    "libgallium",
    "libamdhip64",
    "libhsa-runtime64",
    "libnvidia-",
    "libnvcuvid",
    "libnvoptix",
    "libvk_swiftshader",
    "libze_intel_gpu",
    "libigdrcl",
    "libamdocl",
];

/// The width of a cell of [`AFTER_LIB`], and how many it has.
const CELL: usize = 15;
const CELLS: usize = 16;

/// How the file names of the drivers ([`DRIVER_PREFIXES`]), of the loaders that find drivers
/// through manifests ([`crate::icd::LOADERS`]) and of CUDA's driver go on after `lib` (all of
/// them start so but AMDVLK's `amdvlk`): a cell of [`CELL`] bytes each, NULs after the text.
/// What [`may_be_a_driver_or_loader`] reads (`the_quick_table_is_the_drivers_and_the_loaders`).
const AFTER_LIB: [u8; CELL * CELLS] = *b"\
    vulkan\0\0\0\0\0\0\0\0\0\
    GLX_nvidia\0\0\0\0\0\
    EGL_nvidia\0\0\0\0\0\
    gallium\0\0\0\0\0\0\0\0\
    amdhip64\0\0\0\0\0\0\0\
    hsa-runtime64\0\0\
    nvidia-\0\0\0\0\0\0\0\0\
    nvcuvid\0\0\0\0\0\0\0\0\
    nvoptix\0\0\0\0\0\0\0\0\
    vk_swiftshader\0\
    ze_intel_gpu\0\0\0\
    igdrcl\0\0\0\0\0\0\0\0\0\
    amdocl\0\0\0\0\0\0\0\0\0\
    OpenCL\0\0\0\0\0\0\0\0\0\
    ze_loader\0\0\0\0\0\0\
    cuda\0\0\0\0\0\0\0\0\0\0\0";

/// Whether the library at `path`, a NUL-terminated name from the dynamic loader's list, may be
/// a GPU driver by its file name ([`driver_by_name`]) or a loader that finds drivers through
/// manifests: its file name is `lib` and one of [`AFTER_LIB`]'s, starts with `amdvlk`, or has
/// `_dri` in it (Mesa's `*_dri.so`). Yes for every one of them, and for few others.
///
/// It runs at the exit of every test process of a nextest run, as tests are built: unoptimised,
/// where each helper a function calls (a slice's length, an iterator's step) is code elsewhere
/// in the binary that a new process faults in, 64 KiB at a time. So it reads the bytes through
/// the pointer and compares them in straight-line code, with no call; a name that is none of
/// them (the C library's, the loader's) is told in a few comparisons a cell.
fn may_be_a_driver_or_loader(path: *const std::ffi::c_char) -> bool {
    let base = path as usize;
    // The file name: after the last separator.
    let mut start = 0;
    let mut end = 0;
    loop {
        // SAFETY: `path` is NUL-terminated, and `end` has not passed its NUL.
        let b = unsafe { *((base + end) as *const u8) };
        if b == 0 {
            break;
        }
        end += 1;
        if b == b'/' || b == b'\\' {
            start = end;
        }
    }
    let name = base + start;
    let len = end - start;
    // SAFETY (every read below): at an index below `len`, within the name.
    if len > 3
        && unsafe { *(name as *const u8) } == b'l'
        && unsafe { *((name + 1) as *const u8) } == b'i'
        && unsafe { *((name + 2) as *const u8) } == b'b'
    {
        let mut cell = 0;
        while cell < CELL * CELLS {
            let mut i = 0;
            loop {
                let want = AFTER_LIB[cell + i];
                if want == 0 {
                    return true;
                }
                if 3 + i >= len || unsafe { *((name + 3 + i) as *const u8) } != want {
                    break;
                }
                i += 1;
            }
            cell += CELL;
        }
    } else {
        const AMDVLK: [u8; 6] = *b"amdvlk";
        let mut i = 0;
        while i < 6 && i < len && unsafe { *((name + i) as *const u8) } == AMDVLK[i] {
            i += 1;
        }
        if i == 6 {
            return true;
        }
    }
    // `*_dri.so`.
    let mut i = 0;
    while i + 4 <= len {
        let p = name + i;
        if unsafe { *(p as *const u8) } == b'_'
            && unsafe { *((p + 1) as *const u8) } == b'd'
            && unsafe { *((p + 2) as *const u8) } == b'r'
            && unsafe { *((p + 3) as *const u8) } == b'i'
        {
            return true;
        }
        i += 1;
    }
    false
}

/// The file name of the library at `path` (a loader's log and a process's maps name
/// libraries by path, or by name alone).
///
/// ```
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::drivers::library_name;
///
/// assert_eq!(library_name("/usr/lib/libvulkan_lvp.so"), "libvulkan_lvp.so");
/// assert_eq!(library_name("libcuda.so.1"), "libcuda.so.1");
/// # }
/// ```
pub fn library_name(path: &str) -> &str {
    crate::icd::file_name(path)
}

/// The GPU driver libraries this process has mapped now, by path, or `None` where this cannot
/// be seen (not Linux, or `/proc` unreadable). The driver manifests ([`driver_library`]) are
/// read only where the process has a loader that reads them mapped (Vulkan's, OpenCL's, Level
/// Zero's): a process without one pays for the list of names alone.
#[cfg(any(test, feature = "__cli"))]
pub fn loaded_drivers() -> Option<Vec<String>> {
    let mapped = crate::sys::mapped_files()?;
    let through_manifests = reads_manifests(&mapped);
    Some(
        mapped
            .iter()
            .filter(|p| mapped_driver(p, through_manifests))
            .cloned()
            .collect(),
    )
}

/// Whether a loader that reads the driver manifests (Vulkan's, OpenCL's, Level Zero's) is
/// among `mapped`, the files of one process's maps.
fn reads_manifests(mapped: &[String]) -> bool {
    for p in mapped {
        if crate::icd::is_loader(p) {
            return true;
        }
    }
    false
}

/// [`driver_library`] for a file `p` of one process's maps: the driver manifests are asked
/// only where `through_manifests` ([`reads_manifests`] of the maps), so a process that loaded
/// none pays for the list of names alone.
fn mapped_driver(p: &str, through_manifests: bool) -> bool {
    driver_by_name(p) || (through_manifests && crate::icd::named_by_manifest(p))
}

/// Whether this process has held a permit.
static EVER: AtomicBool = AtomicBool::new(false);

/// Whether `p`, a driver among this process's maps, was mapped by a library this crate loaded
/// for its own use (`sys::for_own_use`): NVIDIA's management library, whose `nvmlInit` loads
/// `libcuda` (and keeps it) though it opens no context, as a permit that declares memory asks
/// it for the GPU's free memory before it is granted. Never a test's load.
fn own_driver(p: &str) -> bool {
    crate::sys::mapped_for_own_use(p)
}

/// Where the process is watched: its loader log, and the permits it holds now (outermost ones:
/// a permit a thread takes inside its own counts once). The count and the mark of a change
/// between none and some are one step under the lock, so that the marks come in the order
/// the changes did.
struct Watched {
    log: std::fs::File,
    held: parking_lot::Mutex<usize>,
}

/// This process took a permit. The first one looks for drivers loaded before it; where the
/// process is watched, every change between none and some is marked in the loader's log.
/// Unwatched, this is two loads and two branches after the first permit: the uncontended
/// acquire path pays nothing more.
pub(crate) fn permit_taken(test: Option<&str>) {
    if !EVER.load(Ordering::Relaxed) && !EVER.swap(true, Ordering::AcqRel) {
        first_permit();
    }
    if let Some(w) = watched() {
        let mut held = w.held.lock();
        *held += 1;
        if *held == 1 {
            mark(&w.log, HELD_MARK);
        }
        mark_test(&w.log, GRANTED_MARK, test);
    }
}

/// The line written into a watched process's loader log at each grant, with the test's name
/// after a space: what a watch names when the process crashes or hangs (the tests holding
/// permits then, or last).
pub const GRANTED_MARK: &str = "gpu-test-permit: granted";
/// The line written at each release, with the test's name after a space.
pub const RETURNED_MARK: &str = "gpu-test-permit: returned";

/// Writes `mark` and the test's name (`test`, else the running test's) as one line.
fn mark_test(file: &std::fs::File, mark: &str, test: Option<&str>) {
    let name = match test {
        Some(t) => t.to_string(),
        None => crate::nextest::current_test_name(),
    };
    // One line, whatever the name holds.
    let name: String = name
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    self::mark(file, &format!("{mark} {name}"));
}

/// This process returned a permit.
pub(crate) fn permit_returned(test: Option<&str>) {
    if let Some(w) = watched() {
        let mut held = w.held.lock();
        *held = held.saturating_sub(1);
        mark_test(&w.log, RETURNED_MARK, test);
        if *held == 0 {
            mark(&w.log, FREE_MARK);
        }
    }
}

/// The name the loader's logs of processes that work inside a permit passed on to them start
/// with, in the watch directory: `held.<pid>`, beside the `ld.<pid>` of the others.
pub const INSIDE_PERMIT_LOG: &str = "held";

/// Where this process is watched: makes the loader of `cmd` (a process that will work inside
/// a permit this process passes on to it, [`GpuTestPermit::pass_to`]) write its log as
/// [`INSIDE_PERMIT_LOG`]`.<pid>`, which the watcher reads as the log of a process that held a
/// permit all its life (it holds the permit's slot locks until it and the processes it
/// starts have exited), as are those of the processes it starts, which inherit the name. Its
/// loads are then no escapes, though it writes no marks (a tool that does not use this
/// crate).
///
/// [`GpuTestPermit::pass_to`]: crate::GpuTestPermit::pass_to
pub(crate) fn watch_inside_permit(cmd: &mut std::process::Command) {
    let Some(log) = crate::config::watch_log() else {
        return;
    };
    // Only where the watcher's log is the loader's: a variable set by hand changes nothing.
    if crate::config::loader_log().as_ref() != Some(&log) {
        return;
    }
    let Some(dir) = std::path::Path::new(&log).parent() else {
        return;
    };
    let held = dir.join(INSIDE_PERMIT_LOG);
    cmd.env("LD_DEBUG_OUTPUT", &held).env(WATCH_VAR, &held);
}

/// This process's loader log and permit count, where it is watched.
fn watched() -> Option<&'static Watched> {
    static WATCHED: std::sync::OnceLock<Option<Watched>> = std::sync::OnceLock::new();
    WATCHED
        .get_or_init(|| {
            let mut path = crate::config::watch_log()?;
            path.push(format!(".{}", std::process::id()));
            // Appended to, never created (the loader made it as the process started), and
            // never through a symbolic link.
            let Ok(log) =
                crate::sys::open_regular_for_append_no_follow(std::path::Path::new(&path))
            else {
                return None;
            };
            Some(Watched {
                log,
                held: parking_lot::Mutex::new(0),
            })
        })
        .as_ref()
}

fn mark(mut file: &std::fs::File, line: &str) {
    let _ = file.write_all(format!("{line}\n").as_bytes());
}

/// Drivers mapped at this process's first permit: loaded before it.
fn first_permit() {
    if !may_have_unpermitted_drivers() {
        return;
    }
    let Some(now) = unpermitted_now() else {
        return;
    };
    if crate::runs::nextest_run().is_some() {
        crate::runs::record_drivers(now.unpermitted, now.linked, true);
    } else if !now.unpermitted.is_empty() && FIRST_PERMIT_LATE.set(now.unpermitted).is_ok() {
        crate::sys::at_exit(print_at_exit);
    }
}

/// The drivers a process has mapped, judged.
struct MappedNow {
    /// Loaded as it ran: without a permit, where it held none.
    unpermitted: Vec<String>,
    /// Linked at build time ([`linked_at_build_time`]).
    linked: Vec<String>,
}

/// Whether this process may have drivers mapped that it loaded without a permit, as far as
/// can be told without reading a file: it does not work inside a permit passed on to it
/// (inside `gpu-test-permit run`, it has held its permit since it started), no watcher runs
/// it (the watcher sees every load, and says what it saw), and the loader's list names a
/// driver or a loader that reads manifests ([`may_hold_a_driver`]). Asked before
/// [`unpermitted_now`], at the first permit and at exit; straight-line code in its common
/// case, as the look at exit runs in every test process.
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
fn may_have_unpermitted_drivers() -> bool {
    !crate::config::inherits_a_permit() && !crate::config::is_watched() && may_hold_a_driver()
}

/// The drivers mapped now, where some are and they can be judged: an in-process probe
/// (`GPU_TEST_PERMIT_PROBE=in-process`) loads drivers without a permit on purpose. Asked
/// where [`may_have_unpermitted_drivers`] says yes: the process's maps are read only then, and
/// the executable's dependencies only where a driver is mapped.
fn unpermitted_now() -> Option<MappedNow> {
    let mut mapped = crate::sys::mapped_files()?;
    let through_manifests = reads_manifests(&mapped);
    let mut any = false;
    for p in &mapped {
        if mapped_driver(p, through_manifests) && !own_driver(p) {
            any = true;
            break;
        }
    }
    if !any {
        return None;
    }
    if crate::config::Config::global().probe_mode == crate::backend::ProbeMode::InProcess {
        return None;
    }
    let linked = linked_at_build_time(std::path::Path::new("/proc/self/exe"), &mapped);
    let mut unpermitted = Vec::new();
    for p in &mut mapped {
        if mapped_driver(p, through_manifests) && !linked.contains(p) && !own_driver(p) {
            unpermitted.push(std::mem::take(p));
        }
    }
    Some(MappedNow {
        unpermitted,
        linked,
    })
}

/// Whether this process may have a GPU driver mapped: the dynamic loader's list of the objects
/// it loaded (in memory: no system call, no file read) names a driver by its file name
/// ([`driver_by_name`]) or a loader that finds drivers through manifests (Vulkan's, OpenCL's,
/// Level Zero's), or cannot be seen. A driver is mapped by the loader, as the executable's
/// dependency or by `dlopen`, so a process whose list names neither has none; the maps, which
/// cost a test process far more to read, are read only where this says yes.
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
fn may_hold_a_driver() -> bool {
    // A `match`, not `unwrap_or`: unoptimised, that is a call to code elsewhere in the binary.
    #[allow(clippy::manual_unwrap_or)]
    match crate::sys::any_loaded_object(may_be_a_driver_or_loader) {
        Some(found) => found,
        None => true,
    }
}

/// The GPU drivers among `mapped` (paths of mapped files, as `/proc/<pid>/maps` names them)
/// that the executable at `exe` was linked to at build time: its `DT_NEEDED` libraries and
/// theirs, transitively, found among `mapped` by file name or by `DT_SONAME`. A program that
/// links `libcuda` maps it before its first instruction, whatever its tests do. Reads the ELF
/// files of the executable and of the libraries on the way (and, for a name no mapped file
/// bears, the sonames of the mapped files): a few small reads per library.
///
/// ```
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::drivers::linked_at_build_time;
///
/// // No test binary links a GPU driver; it links the C library.
/// let exe = std::env::current_exe().unwrap();
/// let mapped = vec!["/lib/x86_64-linux-gnu/libc.so.6".to_string()];
/// assert!(linked_at_build_time(&exe, &mapped).is_empty());
/// # }
/// ```
pub fn linked_at_build_time(exe: &std::path::Path, mapped: &[String]) -> Vec<String> {
    let mut any = false;
    for p in mapped {
        if driver_library(p) {
            any = true;
            break;
        }
    }
    if !any {
        return Vec::new();
    }
    let mut drivers = Vec::new();
    for p in &mut elf::needed_closure(exe, mapped) {
        if driver_library(p) {
            drivers.push(std::mem::take(p));
        }
    }
    drivers
}

/// Under `cargo test`: the drivers this process had loaded at its first permit.
static FIRST_PERMIT_LATE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The line a test binary prints as it exits when it had `drivers` loaded before its first
/// permit.
pub fn exit_line(binary: &str, drivers: &[String]) -> String {
    let mut names = String::new();
    for (i, d) in drivers.iter().enumerate() {
        if i > 0 {
            names.push_str(", ");
        }
        names.push_str(library_name(d));
    }
    format!(
        "gpu-test-permit: test binary {binary} had a GPU driver loaded before its first permit \
         ({names}): a test of it used the GPU without a permit (watch it with `gpu-test-permit \
         watch` as the target runner to see more)"
    )
}

extern "C" fn print_at_exit() {
    // After `main`; nothing here may unwind into C.
    let _ = std::panic::catch_unwind(|| {
        if let Some(drivers) = FIRST_PERMIT_LATE.get() {
            let (binary, _) = crate::runs::current_test();
            crate::notice::text(&format!("{}\n", exit_line(&binary, drivers)));
        }
    });
}

// Under nextest, a test process that never took a permit looks at its drivers as it exits.
// This runs in every test process of the run, GPU test or not: its common case (no nextest,
// a permit taken, a watcher that sees the loads itself, or no driver and no loader on the
// loader's list) is decided in straight-line code that calls little but the C library (see
// `config::is_set` and `may_be_a_driver_or_loader`).
#[ctor::ctor(unsafe)]
fn look_at_exit() {
    if !crate::config::in_nextest_run() {
        return;
    }
    extern "C" fn look() {
        if EVER.load(Ordering::Acquire) || !may_have_unpermitted_drivers() {
            return;
        }
        // After `main`; nothing here may unwind into C.
        let _ = std::panic::catch_unwind(|| {
            if let Some(now) = unpermitted_now() {
                crate::runs::record_drivers(now.unpermitted, now.linked, false);
            }
        });
    }
    crate::sys::at_exit(look);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`may_be_a_driver_or_loader`] of `path`, as the loader's list would name it.
    fn may_be(path: &str) -> bool {
        let path = std::ffi::CString::new(path).unwrap();
        may_be_a_driver_or_loader(path.as_ptr())
    }

    #[test]
    fn the_quick_table_is_the_drivers_and_the_loaders() {
        let mut listed = Vec::new();
        for cell in AFTER_LIB.chunks(CELL) {
            let text = cell.split(|&b| b == 0).next().unwrap();
            assert!(!text.is_empty() && text.len() < CELL, "{cell:?}");
            assert!(cell[text.len()..].iter().all(|&b| b == 0), "{cell:?}");
            listed.push(format!("lib{}", std::str::from_utf8(text).unwrap()));
        }
        listed.push("amdvlk".to_string());
        let mut wanted: Vec<&str> = DRIVER_PREFIXES.to_vec();
        wanted.extend(crate::icd::LOADERS);
        wanted.push("libcuda");
        for w in &wanted {
            assert!(
                listed.iter().any(|l| w.starts_with(l.as_str())),
                "{w} is not looked for"
            );
        }
        for l in &listed {
            assert!(
                wanted.iter().any(|w| w.starts_with(l.as_str())),
                "{l} is no driver's or loader's"
            );
        }
    }

    /// The rule of [`may_be_a_driver_or_loader`] written plainly, over a file name.
    fn by_the_lists(name: &str) -> bool {
        DRIVER_PREFIXES
            .iter()
            .chain(crate::icd::LOADERS.iter())
            .chain(["libcuda"].iter())
            .any(|p| name.starts_with(p))
            || name.contains("_dri")
    }

    #[test]
    fn the_quick_look_agrees_with_the_lists_on_every_start_of_every_name() {
        let mut names = vec![
            String::new(),
            "lib".into(),
            "l".into(),
            "_dri".into(),
            "x_dr".into(),
        ];
        for p in DRIVER_PREFIXES.iter().chain(crate::icd::LOADERS.iter()) {
            // Every start of each listed name, and each with one byte changed.
            for end in 0..=p.len() {
                names.push(p[..end].to_string());
                names.push(format!("{}.so.1", &p[..end]));
                if end > 0 {
                    let mut changed = p.as_bytes()[..end].to_vec();
                    changed[end - 1] ^= 0x20;
                    names.push(String::from_utf8_lossy(&changed).into_owned());
                }
            }
        }
        for name in names {
            for path in [
                name.clone(),
                format!("/usr/lib/{name}"),
                format!("C:\\lib\\{name}"),
            ] {
                assert_eq!(may_be(&path), by_the_lists(&name), "{path:?}");
            }
        }
    }

    #[test]
    fn drivers_are_known_by_their_file_names() {
        for yes in [
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
            "libcuda.so.1",
            "libcuda.so",
            "/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0",
            "/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so",
            "/usr/lib/x86_64-linux-gnu/libvulkan_radeon.so",
            "/usr/lib/x86_64-linux-gnu/libvulkan_intel.so",
            "/usr/lib/x86_64-linux-gnu/dri/radeonsi_dri.so",
            "/usr/lib/x86_64-linux-gnu/libgallium-24.2.8.so",
            "/opt/amdgpu/lib64/amdvlk64.so",
            "C:\\Windows\\System32\\nvcuda.dll",
            "/usr/lib/x86_64-linux-gnu/libnvcuvid.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvoptix.so.1",
            "/usr/lib/x86_64-linux-gnu/libvk_swiftshader.so",
            "/usr/lib/x86_64-linux-gnu/libze_intel_gpu.so.1",
            "/usr/lib/x86_64-linux-gnu/intel-opencl/libigdrcl.so",
            "/opt/rocm/lib/libamdocl64.so",
        ] {
            assert!(driver_by_name(yes), "{yes}");
            // The quick look reads the list of Linux's dynamic loader, which names no DLL.
            assert!(may_be(yes) || yes.ends_with(".dll"), "{yes}");
        }
        for no in [
            "/usr/lib/x86_64-linux-gnu/libvulkan.so.1.3.239",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
            "/usr/lib/x86_64-linux-gnu/libEGL.so.1",
            "/usr/lib/x86_64-linux-gnu/libcudart.so.12",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "libcudax.so",
            "/usr/lib/x86_64-linux-gnu/libze_loader.so.1",
            "/usr/lib/x86_64-linux-gnu/libOpenCL.so.1",
        ] {
            assert!(!driver_by_name(no), "{no}");
        }
    }

    #[test]
    fn the_loaders_list_is_looked_at_for_drivers_and_loaders_alone() {
        for yes in [
            "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
            "/usr/lib/x86_64-linux-gnu/libOpenCL.so.1",
            "/usr/lib/x86_64-linux-gnu/libze_loader.so.1",
            "/usr/lib/x86_64-linux-gnu/dri/iris_dri.so",
        ] {
            assert!(
                may_be(yes) && (driver_by_name(yes) || crate::icd::is_loader(yes)),
                "{yes}"
            );
        }
        // What a test binary loads.
        for no in [
            "",
            "linux-vdso.so.1",
            "/lib/x86_64-linux-gnu/libgcc_s.so.1",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        ] {
            assert!(!may_be(no), "{no}");
        }
    }

    #[test]
    fn every_driver_and_loader_prefix_passes_the_quick_look() {
        // The quick look tries the lists only for names that start with `lib`: a prefix that
        // does not must be tried on its own there.
        for p in DRIVER_PREFIXES.iter().chain(crate::icd::LOADERS.iter()) {
            for path in [format!("{p}.so"), format!("/usr/lib/{p}64.so.1")] {
                assert!(may_be(&path), "{path}");
            }
        }
    }
}
