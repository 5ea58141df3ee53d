//! `REALIZAR_GPU_TEST_CONCURRENCY=auto`: the N of each run chosen from this host's history —
//! the fastest N measured that never hung nor made a test fail beside others, found one step
//! at a time.
//!
//! # What is recorded
//!
//! With `auto`, every test process records its permits (the [run records](crate::runs), under
//! nextest as always, and outside nextest under a run id of its own process). When the next
//! run lays out the slot directory, the runs recorded since are measured and added to the
//! host's **history**, `gpu0.history` in the slot directory's state directory (see
//! [`Config::state_dir_for`](crate::config::Config::state_dir_for): not `/tmp`, so that a
//! reboot does not forget that an N hung), the newest [`HISTORY_KEPT`] runs. Each run keeps:
//! its N, the GPU and driver the probe saw, how long some permit was held (*busy*), how long
//! some test waited for one, the most units held at once, permits lost to processes that died
//! holding them, and its *work*: each hold counted at its test's reference time, the shortest
//! mean hold that test had in any run on record (`gpu0.tests`, the [`TESTS_KEPT`] tests seen
//! last). Work over busy time is the run's **effective concurrency**: how many tests' worth of
//! work the GPU did at once. It compares runs of different suites, filtered runs and whole
//! ones, fairly, because a test's work is the same whatever else runs. A run too small to
//! measure (fewer than two holds per permit) that lost no permit is not kept, so that a
//! doctest's process pushes no real run out. A line that is not a record is ignored with one
//! line on standard error; the history is never a reason to fail a test.
//!
//! # How N is chosen
//!
//! The first process of a run (the one that finds the slot directory unused, and no choice
//! for its run there yet) chooses, and writes the choice into the directory's layout with its
//! run id; every other process of the run adopts it, as every process adopts a layout today.
//! [`choose`] is a pure function of:
//!
//! - **the limit**: the ceiling [`MAX_CONCURRENCY_VAR`](crate::config::MAX_CONCURRENCY_VAR)
//!   (default [`DEFAULT_MAX_CONCURRENCY`](crate::config::DEFAULT_MAX_CONCURRENCY)), below any
//!   N that hung (a hold-deadline abort, [`hangs`](crate::hangs)) or had a contention
//!   casualty on this GPU and driver within [`TRUSTED_FOR`](crate::hangs::TRUSTED_FOR), below
//!   an N at which tests died holding permits in two runs, and below the N of the last run if
//!   it lost permits so: such a run is backed off at once;
//! - **the runs measured** with this GPU and driver at each N up to the limit (clean runs with
//!   at least two holds per permit; the median of the newest three).
//!
//! With no run measured on this GPU: the last N that ran clean on this host with another GPU
//! or driver (a driver update re-opens the question from there, not from the seed and not
//! above it), else the seed, 2. Otherwise one step above the largest N measured, when that is
//! allowed, that N was as fast as any, tests waited for permits at least [`CAP_LIMITS`] of
//! the time (the cap is what limits the run), the throughput still grew from the N below by
//! [`WITHIN`], and the model predicts a gain of at least [`WORTH_A_RUN`]; else the smallest N
//! within [`WITHIN`] of the fastest measured. The model: hold times grow linearly with the
//! units held at once, fitted to the runs measured.
//!
//! The choice and its reasons are said in one line on standard error by the process that
//! made it, recorded in the run's records (`gpu-test-permit report` shows it), written into
//! the trace, and shown by `gpu-test-permit config` (what `auto` would choose now) and
//! `gpu-test-permit history` (the record, which `--forget` empties).
//!
//! # Learned weights
//!
//! The same records carry the GPU memory each test's fixture measured (the wgpu allocator's
//! report; NVML's number for the process, where the library is present), and `gpu0.tests`
//! keeps the most each test was measured to use. With
//! [`WEIGHTS_VAR`](crate::config::WEIGHTS_VAR)`=learned` and a memory budget in force, a test
//! that declares nothing (no units, no memory, not exclusive) holds the units that peak plus
//! [`LEARNED_MARGIN_PERCENT`](crate::config::LEARNED_MARGIN_PERCENT) needs,
//! `ceil(peak x 1.25 / (budget / N))`, at least one and at most a whole GPU (a peak above the
//! budget takes the whole GPU; it is never refused). A declaration always wins, and a permit
//! inherited from `gpu-test-permit run` is left as its parent asked. While a test holds a
//! learned permit, a request of the same test on another of its threads joins that permit
//! instead of waiting for units its own test holds. A test process reads the table once, at
//! its first such request, after measuring the runs recorded since (as `auto` does); with
//! learned weights on, a process outside nextest records its permits under a run id of its
//! own, as with `auto`. A grant's record and the trace's events carry the peak a weight was
//! learned from: `gpu-test-permit report` and `trace` list the tests that held learned
//! weights, and `history` lists the measured peaks ([`learned_memory`]).
//!
//! ```
//! # #[cfg(feature = "__cli")] { // only the command's build has `__private`
//! use gpu_test_permit::__private::tune::{choose, Inputs, Step};
//!
//! // No history: the seed.
//! let c = choose(&Inputs {
//!     history: &[], hangs: &[], casualties: &[], gpu: "", gpus: 1, ceiling: 8, now_ms: 0,
//! });
//! assert_eq!((c.per_gpu, c.step), (2, Step::Seed));
//! assert_eq!(c.to_string(), "N = 2 (auto: no run on record; starting at 2; ceiling 8)");
//! # }
//! ```

mod choose;
mod history;
mod measure;

use std::path::Path;

#[cfg(any(test, feature = "__cli"))]
pub use choose::{CAP_LIMITS, SEED, Step, WITHIN, WORTH_A_RUN};
pub use choose::{Choice, Inputs, choose};
#[cfg(any(test, feature = "__cli"))]
pub use history::{
    HISTORY_KEPT, HistoryEntry, HoldTime, TESTS_KEPT, forget_history, hold_times, learned_memory,
    read_history,
};
pub(crate) use history::{learn_before_run, learned_peaks};

/// The history of slot directory `dir`, oldest first, with the runs recorded since it was
/// last brought up to date measured and added (as the first process of a run does before it
/// chooses).
#[cfg(any(test, feature = "__cli"))]
pub fn measured_history(dir: &Path) -> Vec<HistoryEntry> {
    history::update_history(dir, None)
}

use crate::config::Config;

/// The GPUs and driver the probe sees, in one line: CUDA's devices (with feature `cuda`),
/// else wgpu's adapters (with feature `wgpu`); "" when neither finds a device or the crate
/// has neither backend. Probed once per process (and, under nextest, once per run).
pub fn gpu_identity() -> String {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    // As a function pointer, as the run id is made: one instantiation for both.
    IDENTITY
        .get_or_init(probe_identity as fn() -> String)
        .clone()
}

/// [`gpu_identity`], probed now.
fn probe_identity() -> String {
    for backend in crate::probe::Backend::ALL {
        if !backend.is_built() {
            continue;
        }
        let report = crate::probe::probe(backend);
        if let Some(devices) = report.outcome.devices()
            && !devices.is_empty()
        {
            let mut listed = String::new();
            let mut sep = "";
            for d in devices {
                listed.push_str(sep);
                sep = "; ";
                listed.push_str(&d.name);
                if let Some(bytes) = d.memory_bytes {
                    listed.push_str(&format!(" {}", crate::config::format_bytes(bytes)));
                }
                if let Some(driver) = &d.driver {
                    listed.push_str(&format!(", {driver}"));
                }
            }
            return format!("{}: {}", backend, listed);
        }
    }
    String::new()
}

/// What `auto` chooses now for a run of slot directory `dir` (not run `current`, which is
/// under way), with `gpus` GPUs: the history brought up to date first.
pub fn choose_now(dir: &Path, gpus: usize, current: Option<&str>) -> Choice {
    let cfg = Config::global();
    let history = history::update_history(dir, current);
    let hangs = crate::hangs::recorded_hangs(dir);
    let casualties = crate::runs::recorded_casualties(dir);
    let gpu = gpu_identity();
    choose(&Inputs {
        history: &history,
        hangs: &hangs,
        casualties: &casualties,
        gpu: &gpu,
        gpus,
        ceiling: cfg.max_concurrency.get(),
        now_ms: crate::clock::now_unix_ms(),
    })
}

/// Says and records a choice made for run `run` in slot directory `dir`: one line on standard
/// error, and a record in the run's records.
pub(crate) fn announce(dir: &Path, run: &str, gpus: usize, choice: &Choice) {
    crate::notice::line(&choice.to_string());
    crate::runs::append(
        dir,
        crate::runs::RunRecord::Choice(crate::runs::ChoiceRecord {
            run: run.to_string(),
            unix_us: crate::clock::unix_micros(std::time::SystemTime::now()),
            pid: std::process::id(),
            per_gpu: choice.per_gpu,
            gpus,
            gpu: gpu_identity(),
            why: choice.why.clone(),
        }),
    );
}
