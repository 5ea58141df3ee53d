//! Cap how many GPU tests use the GPU at once — across test threads, `cargo nextest`'s
//! process-per-test runs, doctests and side-by-side test runs — with one pool for CUDA and wgpu.
//!
//! Too many GPU contexts at once over-subscribe a GPU: drivers hang or crash. Wrap each GPU
//! test's fixture in a permit, and at most N tests (`REALIZAR_GPU_TEST_CONCURRENCY`, default 2)
//! hold the GPU at any moment on the host:
//!
//! ```
//! // In a `#[test]` function:
//! fn matmul_matches_cpu() {
//!     let _permit = gpu_test_permit::acquire(); // waits while N other tests hold the GPU
//!     // ... create the device, run the kernels, check the results ...
//! } // GPU objects declared after the permit drop first, then the permit
//! # matmul_matches_cpu();
//! ```
//!
//! # What you get
//!
//! - [`acquire`] / [`acquire_exclusive`] / [`try_acquire_for`]: RAII [`GpuTestPermit`] guards
//!   from the process-wide [`PermitPool`]. Reentrant per thread (a fixture that builds a CUDA
//!   and a wgpu object on one thread never waits on itself), movable between threads,
//!   shareable with worker threads ([`GpuTestPermit::share`]).
//! - Big and small tests: [`acquire_weighted`] (a test that counts as k of a GPU's N) and
//!   [`acquire_memory`] (k from the GPU memory it declares against `GPU_TEST_PERMIT_GPU_MEMORY`),
//!   [`PermitPool::request`] for both; k units of one GPU, taken at once, across processes too.
//! - [`Permitted<T>`]: acquire, then build `T`; drop `T`, then release.
//! - Host slots ([`host`]): the cap holds across processes through file locks that the kernel
//!   frees when a process dies, even by SIGKILL.
//! - Fair, bounded waits: FIFO within a process, a heavy (weighted or exclusive) request is not
//!   starved by light ones, and a
//!   wait past `GPU_TEST_PERMIT_TIMEOUT` fails with the list of holders instead of hanging.
//! - [`nextest`] awareness and a [`trace`] of every wait and hold that Perfetto opens.
//! - [`probe`]: which backends and devices this machine has, found in a child process so that
//!   a crashing or hanging driver cannot take the test run down; cached per process and per
//!   nextest run. It loads the driver libraries (`libcuda`, the Vulkan loader) at run time, so
//!   it needs none of the features and none of the project's GPU crates. [`decision`] turns it and `GPU_TEST_PERMIT_REQUIRE` into run, skip or fail
//!   ([`require_backend!`]).
//! - Fixtures: `wgpu::device_or_skip!()` and `cuda::context_or_skip!()` (features `wgpu`,
//!   `cuda`) take a permit, consult the probe and create the GPU objects, which drop before
//!   the permit. A heavy test says how much of the GPU it needs (`device_or_skip!(units = 2)`,
//!   `context_or_skip!(memory = 8 << 30)`, [`GpuNeed`]); the fixture records the memory it
//!   measured on the permit, and so in the trace.
//! - The run's truth: under `cargo nextest`, each run's skips, permits and retries recorded in
//!   the slot directory, so that the run's report tells the truth: `gpu-test-permit junit`
//!   marks the tests that skipped at run time as skipped in nextest's JUnit report, a retried
//!   test reruns with the GPU to itself (`GPU_TEST_PERMIT_RETRY`), and a test that failed
//!   beside others and passed alone is named a contention casualty (`gpu-test-permit report`).
//!   Under `cargo test` a binary that skipped GPU tests says so at exit. Reading the records
//!   is the command's (`gpu-test-permit-cli`).
//! - Tuning: `REALIZAR_GPU_TEST_CONCURRENCY=auto` chooses each run's N from this host's
//!   history (the fastest N measured that never hung nor made a test fail beside others,
//!   found one step at a time, up to `GPU_TEST_PERMIT_MAX_CONCURRENCY`), and
//!   `GPU_TEST_PERMIT_WEIGHTS=learned` weighs a test that declares nothing by its measured
//!   peak memory.
//! - [`devices`]: the `CUDA_VISIBLE_DEVICES` (and HIP, ROCr) values that pin a process
//!   started under a permit to the permit's GPU.
//! - `capture` (feature `cuda`): a CUDA graph capture guard that refuses allocations, uploads
//!   and synchronization during a capture with a typed error.
//!
//! # Environment
//!
//! `REALIZAR_GPU_TEST_CONCURRENCY` sets N; every variable the crate reads is in the table of
//! [`config`]'s documentation.
//!
//! All of them are parsed in [`config`]; a bad value is reported on one line, never a panic.
//!
//! # What it does not do
//!
//! Host slots are advisory locks: programs that do not use this crate are not held back. The
//! slot directory decides who shares a cap, so processes in different containers share one
//! only if they see the same directory (mount it and set `GPU_TEST_PERMIT_DIR`).

#![warn(missing_docs)]
// The items `__private` re-exports for the command are `pub` in crate-private modules; without
// the command's feature nothing re-exports them.
#![cfg_attr(not(feature = "__cli"), allow(unreachable_pub))]
// The unit tests build what only the command uses, to test it, whether or not the command's
// feature is on; without it, nothing else uses that code.
#![cfg_attr(all(test, not(feature = "__cli")), allow(dead_code, unused_imports))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod capture;
mod clock;
pub mod config;
mod cuda_codes;
pub mod decision;
pub mod devices;
pub(crate) mod drivers;
mod fixture;
// Property tests of the readers of files others can write: test code alone.
#[cfg(test)]
mod fuzz_tests;
pub(crate) mod hangs;
pub mod host;
mod icd;
mod json;
mod live;
#[cfg(all(test, loom))]
mod loom_model;
mod mailbox;
pub mod nextest;
mod notice;
mod order;
mod permit;
mod permitted;
pub mod probe;
pub(crate) mod runs;
mod sync;
mod sys;
pub mod trace;
pub(crate) mod tune;

pub use fixture::{FixtureError, GpuNeed};
pub use permit::{
    AcquireError, EnteredPermit, GpuTestPermit, HoldTimeout, Holder, PermitKind, PermitPool,
    PermitRequest, PoolBuilder, WaitTimeout, Waiter, acquire, acquire_exclusive, acquire_gpus,
    acquire_memory, acquire_weighted, on_hold_timeout, try_acquire_for,
};
pub use permitted::Permitted;

/// `text` on one line: each `\r` and `\n` in it shown as ` | `.
pub(crate) fn one_line(text: &str) -> String {
    bars_for(text, b"\r\n")
}

/// `text` with each byte of `breaks` (ASCII, so a cut at one is a character boundary) shown as
/// ` | `; the text between them is copied a run at a time.
pub(crate) fn bars_for(text: &str, breaks: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut start = 0;
    for (at, b) in bytes.iter().enumerate() {
        if breaks.contains(b) {
            out.push_str(&text[start..at]);
            out.push_str(" | ");
            start = at + 1;
        }
    }
    out.push_str(&text[start..]);
    out
}

/// `items` joined by `sep`: what `[String]::join` makes, in one function for the crate.
pub(crate) fn joined(items: &[String], sep: &str) -> String {
    let mut out = String::new();
    let mut first = true;
    for item in items {
        if !first {
            out.push_str(sep);
        }
        out.push_str(item);
        first = false;
    }
    out
}

/// The CUDA fixture (feature `cuda`): a permit-holding context and stream in one line.
///
/// ```
/// fn gpu_saxpy() {
///     let gpu = gpu_test_permit::cuda::context_or_skip!(); // skips without a CUDA device
///     let _x = gpu.stream().alloc_zeros::<f32>(256).unwrap();
///     // ... launch, copy back, compare ...
/// } // the stream and context drop, then the permit
/// # gpu_saxpy();
/// ```
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda {
    pub use crate::fixture::cuda::*;
}

/// The wgpu fixture (feature `wgpu`): a permit-holding device and queue in one line.
///
/// ```
/// fn gpu_blur() {
///     let gpu = gpu_test_permit::wgpu::device_or_skip!(); // skips without an adapter
///     let _encoder = gpu.device().create_command_encoder(&Default::default());
///     // ... record, submit, read back ...
/// } // the device and queue drop, then the permit
/// # gpu_blur();
/// ```
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
pub mod wgpu {
    pub use crate::fixture::wgpu::*;
}

/// Not public API: entry points for this crate's own integration tests and for the
/// command-line tool (`gpu-test-permit-cli`, released with it), which cannot reach the crate's
/// internal modules. May change or go away in any release.
#[cfg(feature = "__cli")]
#[doc(hidden)]
pub mod __private {
    /// A process on a GPU as NVML lists it: its pid, and the memory it uses (`None`: NVML cannot
    /// tell).
    pub type LiveProcess = (u32, Option<u64>);

    /// CUDA device `gpu`'s memory now, from NVML: `(total, free, processes)` bytes; `None`
    /// without NVML or when a call fails.
    pub fn live_memory(gpu: usize) -> Option<(u64, u64, Vec<LiveProcess>)> {
        let m = crate::live::memory(gpu)?;
        let processes = m.processes.iter().map(|p| (p.pid, p.used)).collect();
        Some((m.total, m.free, processes))
    }

    /// The name of process `pid` for a message, from NVML or the system.
    pub fn live_process_name(pid: u32) -> Option<String> {
        crate::live::process_name(pid)
    }

    /// Opens an existing file for reading without following a symbolic link and without
    /// blocking on a FIFO or device at its name, refusing anything but a regular file (for the
    /// command-line tool, which may open files another process of this user could have made).
    pub fn open_regular_for_reading(path: &std::path::Path) -> std::io::Result<std::fs::File> {
        crate::sys::open_regular_for_reading(path)
    }

    /// What the loader's logs of watched command `pid` (the running test's) say, for
    /// [`record_watched`].
    #[derive(Debug)]
    pub struct Watched {
        /// The watched command's process.
        pub pid: u32,
        /// The GPU drivers its processes loaded as they ran.
        pub loaded: Vec<String>,
        /// Those loaded while no permit was held.
        pub unpermitted: Vec<String>,
        /// Whether one was loaded before the first permit.
        pub before_first_permit: bool,
        /// Whether a permit was held at all.
        pub held: bool,
        /// The drivers its program was linked to at build time.
        pub linked: Vec<String>,
        /// Whether a process the command started loaded one of `unpermitted`.
        pub started_process: bool,
    }

    /// Records what the loader's logs of a watched command say in the run's records, when
    /// this runs under nextest (`gpu-test-permit watch`): a record for every watched test, one
    /// that loaded no driver too, so that `report` knows the run was watched. Returns whether
    /// a record was written.
    pub fn record_watched(w: Watched) -> bool {
        crate::runs::record_watched(crate::runs::DriversRecord {
            run: String::new(),
            unix_us: 0,
            pid: w.pid,
            binary: String::new(),
            test: String::new(),
            attempt: 0,
            drivers: w.loaded,
            unpermitted: w.unpermitted,
            before_first_permit: w.before_first_permit,
            held: w.held,
            seen: String::new(),
            linked: w.linked,
            started_process: w.started_process,
        })
    }

    /// Records a watched test process's verdict (`gpu-test-permit watch`) in the run's
    /// records, when this runs under nextest: `fault` is `teardown`, `hang` or `crash`,
    /// `ended` how the process ended, `failed` whether the watch failed it, `said` the line
    /// it said. Returns whether a record was written.
    pub fn record_verdict(pid: u32, fault: &str, ended: &str, failed: bool, said: &str) -> bool {
        crate::runs::record_verdict(pid, fault, ended, failed, said)
    }

    /// `text` with every control character and non-space whitespace escaped, as a test name is
    /// shown on one line (the command-line tool's timeline).
    pub fn escape_controls(text: &str) -> String {
        crate::host::escape_controls(text)
    }

    /// The host's hang record (`gpu0.hangs`), for `gpu-test-permit history`, `report` and
    /// the what-if.
    pub mod hangs {
        pub use crate::hangs::*;
    }

    /// Who holds and who waits for a slot directory's slots, read without taking anything
    /// (`gpu-test-permit status` and `report`), and the GPUs' memory as NVML sees it.
    pub mod host {
        pub use crate::hangs::{HangRecord, recorded_hangs};
        pub use crate::host::record::HolderRecord;
        pub use crate::host::status::*;
        pub use crate::host::threads::ThreadsWaiting;
    }

    /// A nextest run's records in the slot directory: what `report`, `junit` and
    /// `find-gpu-tests` read.
    pub mod runs {
        pub use crate::runs::*;
    }

    /// The host's history of runs and what `REALIZAR_GPU_TEST_CONCURRENCY=auto` chooses from
    /// it (`gpu-test-permit history`, `config`, `nextest-snippet`).
    pub mod tune {
        pub use crate::tune::*;
    }

    /// GPU driver libraries and the marks a process writes in its loader's log
    /// (`gpu-test-permit watch`).
    pub mod drivers {
        pub use crate::drivers::*;
    }

    /// The nextest tool config file the hint and the command print.
    pub mod nextest {
        pub use crate::nextest::tool::*;
    }

    /// The value parsers and formatters behind [`Config`](crate::config::Config), for the
    /// command's own options.
    pub mod config {
        pub use crate::config::parse::{
            parse_concurrency, parse_duration, parse_gpus, parse_memory, parse_placement,
        };
        pub use crate::config::values::{Gpus, format_bytes};
        pub use crate::config::warnings::{RecordedWarnings, recorded_warnings};
    }

    /// A trace file read with the lines it could not use.
    pub mod trace {
        pub use crate::trace::read::{SkippedLine, TraceFile, read_trace};
    }
}

#[cfg(test)]
mod line_tests {
    #[test]
    fn line_breaks_read_as_bars() {
        assert_eq!(super::one_line("a\r\nb\nc"), "a |  | b | c");
        assert_eq!(super::bars_for("é\r\nx\n", b"\n"), "é\r | x | ");
        assert_eq!(super::bars_for("", b"\n"), "");
    }
}
