//! Which GPU backends and devices does this machine have? Asked safely, and once.
//!
//! # What is asked
//!
//! The probe needs none of the project's GPU crates, and none of this crate's features:
//! - **CUDA**: the driver library (`libcuda.so.1`, or `libcuda.so`; `nvcuda.dll` on Windows)
//!   is loaded at run time and asked through the driver API: `cuInit`, the driver version, the
//!   device count, and each device's name, memory and whether it is integrated. A project on
//!   any CUDA bindings (any `cudarc`, or none) gets the same answer.
//! - **wgpu**, with the `wgpu` feature: wgpu's own adapter enumeration, so every backend wgpu
//!   has on the platform (Vulkan, Metal, DX12, GL), in the order the wgpu fixture tries them.
//! - **wgpu**, without the feature: the Vulkan loader (`libvulkan.so.1`, or `libvulkan.so`;
//!   `vulkan-1.dll` on Windows) is loaded at run time, and a Vulkan 1.0 instance lists its
//!   physical devices: name, type (discrete, integrated, CPU, ...), driver and API version,
//!   device-local memory. This is wgpu's Vulkan backend's view of the machine, driven by the
//!   same `VK_DRIVER_FILES`/`VK_ICD_FILENAMES`. It answers
//!   [`NotBuilt`](ProbeOutcome::NotBuilt) where only wgpu itself could: on macOS (Metal), and
//!   where `WGPU_BACKEND` names no Vulkan (`gl`, `dx12`, `metal`).
//!
//! # Where it is asked
//!
//! GPU drivers crash (SIGSEGV, aborts) or hang inside their initialisation. So by default
//! [`probe`] asks in a **child process**: the current executable is started again with a
//! private, verified request (see below), a constructor in this crate answers before the
//! child's `main` runs (no test code runs in the child), writes a structured answer on its
//! standard output and exits without unwinding. The parent enforces a
//! deadline (`GPU_TEST_PERMIT_PROBE_TIMEOUT`, default 10 s), kills and reaps a child that passes
//! it, and classifies what happened as a [`ProbeOutcome`]. Each backend gets its own child, so a
//! crashing CUDA driver cannot spoil the wgpu answer.
//!
//! ```
//! use gpu_test_permit::probe::{probe, Backend};
//!
//! let report = probe(Backend::Wgpu);
//! println!("{report}"); // e.g. "wgpu: 1 device: llvmpipe (LLVM 15.0.6, 256 bits) [vulkan, cpu, ...]"
//! if let Some(devices) = report.outcome.devices() {
//!     assert!(!devices.is_empty());
//! }
//! ```
//!
//! # What a probe child cannot do to the caller
//!
//! - **Outlive its deadline.** The deadline is absolute: a child that has not answered by then
//!   is killed with `SIGKILL`, however much it is still writing, and the probe returns
//!   [`ProbeOutcome::TimedOut`] at the deadline, not when the child's output stops.
//! - **Fill the caller's memory.** Its output is read into bounded buffers: the last 2 KiB of
//!   standard error (the driver's last words, in the report) and the last 64 KiB of standard
//!   output before its answer.
//! - **Turn a crash into a timeout.** The child's exit decides, not the end of its pipes: when a
//!   driver leaves a helper process holding them, the crash is reported once the child is gone
//!   (its pipes get 100 ms to deliver the rest).
//! - **Stay behind.** On every way out of a probe (answer, crash, deadline, error, panic) the
//!   child is killed if need be and reaped: no zombie. On Unix it leads a process group of its
//!   own, killed with it, so no helper a driver started remains (on other systems than Linux,
//!   only while the child has not exited yet). On Linux the child also dies with the thread
//!   that started it (`PR_SET_PDEATHSIG`; that thread is the one waiting for it), so a test
//!   process killed mid-probe does not leave a hung driver behind.
//! - **Be faked by a stale variable.** The request is a fresh random token in a pipe that the
//!   child gets as standard input, and the private variable names that pipe by device and
//!   inode. A process is a probe child only when both agree, and the first look consumes the
//!   token and removes the variable. `GPU_TEST_PERMIT_PROBE_CHILD` left in an environment (or
//!   inherited by a program the child starts) is removed with a note on standard error and the
//!   program runs as usual. A probe called inside a probe child (by a constructor that runs
//!   before this crate's) starts no child of its own and reports an error instead.
//!
//! # Caching
//!
//! [`probe`] caches its answer per process, and under `cargo nextest` (which runs every test in a
//! process of its own) also in a file shared by all processes of one run, keyed by
//! `NEXTEST_RUN_ID` and by a hash of what else changes the answer: the probe deadline and mode,
//! and the environment that selects drivers and devices (`LD_LIBRARY_PATH`,
//! `CUDA_VISIBLE_DEVICES`, `WGPU_BACKEND`, `VK_DRIVER_FILES`, `VK_ICD_FILENAMES`, `DISPLAY`, and
//! a few more). A run of thousands of test processes probes each backend once per key.
//!
//! The run cache keeps answers, not accidents: every outcome is kept for the run except a
//! timeout (or a child that could not start), which the run's next processes probe again; only
//! the third timed-out attempt becomes the run's answer. A report read from the file says so
//! ([`ProbeSource::RunCache`], [`ProbeReport::run_cache`]), and a skip or failure because of a
//! broken answer from it names the file to delete for a fresh probe. The file lives in the slot
//! directory (`GPU_TEST_PERMIT_DIR`), is written atomically (a temporary file renamed into place)
//! under a file lock so concurrent first probes start one child (a process waits for that lock
//! at most one probe deadline and 3 s, then probes on its own), and is validated when read; a
//! corrupt, foreign or stale file, or one with numbers out of range, is ignored and the backend
//! probed again. [`probe_with`] never caches.
//!
//! # Probing in-process
//!
//! `GPU_TEST_PERMIT_PROBE=in-process` (or [`ProbeOptions::in_process`]) probes inside the
//! calling process: no child start (tens of milliseconds saved), but a crashing driver takes
//! the test process with it and a hanging one hangs it. Use it where drivers are known good.
//!
//! # What the constructor needs
//!
//! The child's answer comes from a constructor (`ctor`) in this crate, so it works in any
//! executable that links `gpu-test-permit`: your test binaries, benches and programs. Cargo
//! links a dependency into a test binary when the binary uses it, which a test that calls
//! [`probe`] (or a macro of this crate) does. [`self_test`] checks it.

pub use crate::backend::{Backend, ProbeMode, UnknownBackend};
use crate::config::Config;
// The files, top to bottom (each uses only those below it): this one, `probe` with the
// process cache; `cache`, the run cache shared by a nextest run's processes; `fresh`, one
// probe now, in process or in a child; `classify` (what a child's run means), `spawn` (the
// parent side: start, read, deadline, reap) and `child` (the constructor that answers in the
// child); `protocol`, the request and the answer line both sides speak; `backends`, the
// probing itself, which calls `cuda` (the CUDA driver library) and `vulkan` (the Vulkan
// loader), both through `native` (libraries loaded at run time); `outcome`, `report` and
// `options`, the types. A probe flows
// probe -> cache -> fresh -> spawn -> (child: protocol -> backends -> protocol) -> classify.

use std::sync::OnceLock;

mod backends;
mod cache;
mod child;
mod classify;
mod cuda;
mod fresh;
mod native;
mod options;
mod outcome;
mod protocol;
mod report;
mod spawn;
mod vulkan;

pub use fresh::{probe_with, self_test};
pub use options::ProbeOptions;
pub use outcome::{Device, DeviceKind, ProbeOutcome};
pub use report::{ProbeReport, ProbeSource};

/// Probes `backend` the way the environment asks, with caching: the first call in a process
/// probes (or, under `cargo nextest`, reads the run's shared answer), later calls return the
/// cached report with [`ProbeSource::ProcessCache`]. Never panics because of a driver.
///
/// ```
/// use gpu_test_permit::probe::{probe, Backend, ProbeSource};
///
/// let first = probe(Backend::Cuda);
/// let again = probe(Backend::Cuda);
/// assert_eq!(first.outcome, again.outcome);
/// assert_eq!(again.source, ProbeSource::ProcessCache);
/// ```
pub fn probe(backend: Backend) -> ProbeReport {
    static CACHE: [OnceLock<ProbeReport>; 2] = [OnceLock::new(), OnceLock::new()];
    let mut fresh = None;
    let cached = CACHE[backend.index()].get_or_init(|| {
        let cfg = Config::global();
        let opts = ProbeOptions::from_config(cfg);
        let report = cache::probe_shared(backend, &opts, cfg);
        fresh = Some(report.clone());
        report
    });
    match fresh {
        Some(report) => report,
        None => ProbeReport {
            backend,
            outcome: cached.outcome.clone(),
            duration: cached.duration,
            source: ProbeSource::ProcessCache,
            run_cache: cached.run_cache.clone(),
        },
    }
}
