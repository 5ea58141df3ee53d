//! GPU driver libraries in a test process: which it loaded, and whether it held a permit then.
//!
//! A test that builds its GPU object without a permit escapes the cap, and nothing in the
//! permits' own records can see it. What can be seen is the driver: a process that uses a GPU
//! maps its driver library (`libcuda`, a Vulkan ICD such as NVIDIA's `libGLX_nvidia`, Mesa's
//! `libvulkan_radeon`, `libvulkan_intel` or `libvulkan_lvp`, AMDVLK, `libnvidia-*`; see
//! [`driver_library`]). Two ways to see it:
//!
//! - **Watched** (Linux with glibc): `gpu-test-permit watch -- COMMAND` (or `run --watch`), as
//!   cargo's target runner (for `cargo test` and nextest alike), starts the test process with
//!   glibc's loader log (`LD_DEBUG=files`) in a private file, and names that file to the
//!   process in [`WATCH_VAR`]. The loader writes one line for every library the process maps,
//!   as it maps it; this crate writes a line into the same file each time the process goes
//!   from no permit to one and back ([`HELD_MARK`], [`FREE_MARK`]). The order of the lines says which drivers were loaded
//!   while the process held no permit ([`read_watch_log`]), however briefly they stayed. When
//!   the command exits the watcher records what it saw in the run's records, which `report`
//!   reads.
//! - **In-process** (Linux, any libc; no watcher): at the process's first permit this crate
//!   looks at what the process has mapped (`/proc/self/maps`); a driver already there was
//!   loaded before the first permit. Under nextest, a test process that never took a permit
//!   looks again as it exits. A driver unloaded before either look (wgpu unloads the Vulkan
//!   drivers when its instance is dropped) is not seen this way: watch the run for that.
//!
//! Under `cargo nextest` both are recorded in the run's records ([`DriversRecord`]) and
//! `gpu-test-permit report` names the tests in a section of their own; under `cargo test` a
//! test binary that had a driver loaded before its first permit says so in one line as it
//! exits. Other platforms see nothing: [`loaded_drivers`] returns `None` there.
//!
//! ```
//! use gpu_test_permit::drivers::{driver_library, read_watch_log};
//!
//! assert!(driver_library("/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"));
//! assert!(driver_library("libcuda.so.1"));
//! assert!(!driver_library("libvulkan.so.1")); // the loader, not a driver
//!
//! let log = "\
//!     4242:\tfile=libcuda.so.1 [0];  generating link map
//! gpu-test-permit: held
//!     4242:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
//! gpu-test-permit: free
//! ";
//! let seen = read_watch_log(log);
//! assert_eq!(seen.loaded, ["libcuda.so.1", "/usr/lib/libvulkan_lvp.so"]);
//! assert_eq!(seen.unpermitted, ["libcuda.so.1"]);
//! assert!(seen.before_first_permit);
//! ```
//!
//! [`DriversRecord`]: crate::runs::DriversRecord

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::config::WATCH_VAR;

/// The line written into a watched process's loader log when it goes from no permit to one.
pub const HELD_MARK: &str = "gpu-test-permit: held";
/// The line written when it goes back to none.
pub const FREE_MARK: &str = "gpu-test-permit: free";

/// Whether the library at `path` (or named `path`) is a GPU driver: mapping it means the
/// process reached a GPU (or a software one such as lavapipe). By its file name:
///
/// - CUDA: `libcuda.so*`, `nvcuda.dll`; NVIDIA's other driver libraries `libnvidia-*` (its
///   management library `libnvidia-ml`, which opens no context, is left out);
/// - Vulkan drivers (ICDs): NVIDIA's `libGLX_nvidia`, Mesa's `libvulkan_*` (radeon, intel,
///   lvp, nouveau, ...), AMDVLK's `amdvlk*`; not the loader `libvulkan.so` itself, which a
///   process loads to find out that there is no driver;
/// - GL: NVIDIA's `libEGL_nvidia`, Mesa's `libgallium*` and `*_dri.so`;
/// - ROCm/HIP: `libamdhip64`, `libhsa-runtime64`.
pub fn driver_library(path: &str) -> bool {
    let name = library_name(path);
    let stem = name.split(".so").next().unwrap_or(name);
    if stem.ends_with("_dri") {
        return true;
    }
    const PREFIXES: [&str; 8] = [
        "libvulkan_",
        "libGLX_nvidia",
        "libEGL_nvidia",
        "amdvlk",
        "libgallium",
        "libamdhip64",
        "libhsa-runtime64",
        "libnvidia-",
    ];
    (stem == "libcuda" || name.eq_ignore_ascii_case("nvcuda.dll"))
        || (PREFIXES.iter().any(|p| stem.starts_with(p)) && !stem.starts_with("libnvidia-ml"))
}

/// The file name of the library at `path` (a loader's log and a process's maps name
/// libraries by path, or by name alone).
///
/// ```
/// use gpu_test_permit::drivers::library_name;
///
/// assert_eq!(library_name("/usr/lib/libvulkan_lvp.so"), "libvulkan_lvp.so");
/// assert_eq!(library_name("libcuda.so.1"), "libcuda.so.1");
/// ```
pub fn library_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// The GPU driver libraries this process has mapped now, by path, or `None` where this cannot
/// be seen (not Linux, or `/proc` unreadable).
pub fn loaded_drivers() -> Option<Vec<String>> {
    let mapped = crate::sys::mapped_files()?;
    Some(mapped.into_iter().filter(|p| driver_library(p)).collect())
}

/// What a watched process's loader log says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchLog {
    /// The GPU driver libraries it loaded, in order, each once.
    pub loaded: Vec<String>,
    /// Those it loaded while it held no permit (each once).
    pub unpermitted: Vec<String>,
    /// Whether one of them was loaded before the process's first permit.
    pub before_first_permit: bool,
    /// Whether it held a permit at all.
    pub held: bool,
}

/// Reads a loader log written with `LD_DEBUG=files` into which this crate wrote its marks
/// (see the [module docs](self)). A library counts where the loader maps it (`generating link
/// map`); lines it does not know are skipped.
pub fn read_watch_log(text: &str) -> WatchLog {
    let mut out = WatchLog::default();
    let mut holding = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line == HELD_MARK {
            holding = true;
            out.held = true;
            continue;
        }
        if line == FREE_MARK {
            holding = false;
            continue;
        }
        // `  4242:\tfile=NAME [NS];  generating link map`
        let Some(rest) = line.split_once("file=").map(|(_, r)| r) else {
            continue;
        };
        let Some(name) = rest
            .strip_suffix("generating link map")
            .and_then(|r| r.trim_end().strip_suffix(';'))
            .and_then(|r| r.rsplit_once(" ["))
            .map(|(name, _)| name)
        else {
            continue;
        };
        if !driver_library(name) {
            continue;
        }
        if !out.loaded.iter().any(|l| l == name) {
            out.loaded.push(name.to_string());
        }
        if !holding {
            if !out.held {
                out.before_first_permit = true;
            }
            if !out.unpermitted.iter().any(|l| l == name) {
                out.unpermitted.push(name.to_string());
            }
        }
    }
    out
}

/// Whether this process has held a permit.
static EVER: AtomicBool = AtomicBool::new(false);

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
pub(crate) fn permit_taken() {
    if !EVER.load(Ordering::Relaxed) && !EVER.swap(true, Ordering::AcqRel) {
        first_permit();
    }
    if let Some(w) = watched() {
        let mut held = w.held.lock();
        *held += 1;
        if *held == 1 {
            mark(&w.log, HELD_MARK);
        }
    }
}

/// This process returned a permit.
pub(crate) fn permit_returned() {
    if let Some(w) = watched() {
        let mut held = w.held.lock();
        *held = held.saturating_sub(1);
        if *held == 0 {
            mark(&w.log, FREE_MARK);
        }
    }
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
            let log =
                crate::sys::open_regular_for_append_no_follow(std::path::Path::new(&path)).ok()?;
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
    if crate::config::inherits_a_permit() {
        // Inside `gpu-test-permit run`: the process has held its permit since it started.
        return;
    }
    let Some(drivers) = unpermitted_now() else {
        return;
    };
    if crate::runs::nextest_run().is_some() {
        crate::runs::record_drivers(drivers, true);
    } else if FIRST_PERMIT_LATE.set(drivers).is_ok() {
        crate::sys::at_exit(print_at_exit);
    }
}

/// The drivers mapped now, where some are and they can be judged: an in-process probe
/// (`GPU_TEST_PERMIT_PROBE=in-process`) loads drivers without a permit on purpose.
fn unpermitted_now() -> Option<Vec<String>> {
    if crate::config::watch_log().is_some() {
        // The watcher sees every load, and says what it saw.
        return None;
    }
    let drivers = loaded_drivers().filter(|d| !d.is_empty())?;
    (crate::config::Config::global().probe_mode != crate::backend::ProbeMode::InProcess)
        .then_some(drivers)
}

/// Under `cargo test`: the drivers this process had loaded at its first permit.
static FIRST_PERMIT_LATE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The line a test binary prints as it exits when it had `drivers` loaded before its first
/// permit.
pub fn exit_line(binary: &str, drivers: &[String]) -> String {
    let names: Vec<&str> = drivers.iter().map(|d| library_name(d)).collect();
    format!(
        "gpu-test-permit: test binary {binary} had a GPU driver loaded before its first permit \
         ({}): a test of it used the GPU without a permit (watch it with `gpu-test-permit \
         watch` as the target runner to see more)",
        names.join(", ")
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
#[ctor::ctor(unsafe)]
fn look_at_exit() {
    if !crate::config::in_nextest_run() {
        return;
    }
    extern "C" fn look() {
        let _ = std::panic::catch_unwind(|| {
            if EVER.load(Ordering::Acquire) || crate::config::inherits_a_permit() {
                return;
            }
            if let Some(drivers) = unpermitted_now() {
                crate::runs::record_drivers(drivers, false);
            }
        });
    }
    crate::sys::at_exit(look);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert!(driver_library(yes), "{yes}");
        }
        for no in [
            "/usr/lib/x86_64-linux-gnu/libvulkan.so.1.3.239",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
            "/usr/lib/x86_64-linux-gnu/libEGL.so.1",
            "/usr/lib/x86_64-linux-gnu/libcudart.so.12",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "libcudax.so",
        ] {
            assert!(!driver_library(no), "{no}");
        }
    }

    #[test]
    fn a_watch_log_says_which_drivers_came_without_a_permit() {
        let log = "\
   77:\t
   77:\tfile=libm.so.6 [0];  needed by ./t [0]
   77:\tfile=libm.so.6 [0];  generating link map
   77:\t  dynamic: 0x1  base: 0x2   size: 0x3
gpu-test-permit: held
   77:\tfile=libvulkan.so.1 [0];  dynamically loaded by ./t [0]
   77:\tfile=libvulkan.so.1 [0];  generating link map
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  dynamically loaded by libvulkan.so.1 [0]
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  destroying link map
gpu-test-permit: free
   77:\tfile=/usr/lib/libvulkan_lvp.so [0];  generating link map
   77:\tfile=libcuda.so.1 [0];  generating link map
gpu-test-permit: held
   77:\tfile=libcuda.so.1 [0];  generating link map
garbage line file= without an end
";
        let seen = read_watch_log(log);
        assert_eq!(seen.loaded, ["/usr/lib/libvulkan_lvp.so", "libcuda.so.1"]);
        assert_eq!(
            seen.unpermitted,
            ["/usr/lib/libvulkan_lvp.so", "libcuda.so.1"]
        );
        assert!(!seen.before_first_permit);
        assert!(seen.held);

        let never = read_watch_log("   9:\tfile=libcuda.so.1 [0];  generating link map\n");
        assert!(never.before_first_permit && !never.held);
        assert_eq!(never.unpermitted, ["libcuda.so.1"]);
        assert_eq!(read_watch_log(""), WatchLog::default());
    }
}
