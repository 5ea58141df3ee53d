//! Longest first: a suite of 20 short GPU tests (100 ms) and 3 long ones (2 s) whose names sort
//! last (`fixtures/long-short`), run by `cargo nextest` at N = 2 in a test group of 2.
//!
//! - `by-name` (the baseline): the tool config file `gpu-test-permit nextest-snippet` prints
//!   without history, so nextest starts tests by binary and name: the long ones last.
//! - `longest-first`: the same after one run to learn, with the priorities the snippet then
//!   adds (`nextest_config::priority_block` from `tune::hold_times`).
//!
//! Each sample is one whole `cargo nextest run` (its listing and process starts included), so
//! the lower bound, (20 x 0.1 + 3 x 2) / 2 = 4.0 s, is approached from above. Target: the
//! longest-first median within 1.1x of it. After criterion, the medians and ratios are printed.
//!
//! Run with `cargo bench --bench longest_first` (needs cargo-nextest); see BENCHMARKS.md.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use criterion::Criterion;

#[path = "../../benches/support/nextest.rs"]
mod nextest;
use nextest::{nextest_run, timed_run};

const SUITE: &str = "gpu-test-permit-long-short";
const LOWER_BOUND: Duration = Duration::from_secs(4);

struct Setup {
    work: tempfile::TempDir,
    target: PathBuf,
}

impl Setup {
    fn slots(&self) -> PathBuf {
        self.work.path().join("slots")
    }

    /// One `cargo nextest run` of the suite with `tool` as this crate's tool config file.
    fn run(&self, tool: &Path) -> Duration {
        let empty = self.work.path().join("suite-nextest.toml");
        std::fs::write(&empty, "").unwrap();
        let mut tool_arg = std::ffi::OsString::from("gpu-test-permit:");
        tool_arg.push(tool);
        let mut c = nextest_run(SUITE, &self.target, 8, &empty);
        c.arg("--tool-config-file")
            .arg(tool_arg)
            .env("GPU_TEST_PERMIT_DIR", self.slots())
            .env("GPU_TEST_PERMIT_STATE", self.work.path().join("state"))
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
            .env("LONG_SHORT_BENCH", "1");
        timed_run(c)
    }
}

static TIMES: Mutex<Vec<(&'static str, Duration)>> = Mutex::new(Vec::new());

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let setup = Setup {
        work: tempfile::tempdir().unwrap(),
        target: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/longest-first"),
    };
    let by_name = setup.work.path().join("by-name.toml");
    std::fs::write(
        &by_name,
        gpu_test_permit::__private::nextest::group_snippet(2),
    )
    .unwrap();
    // The run to learn from (it builds the suite too).
    setup.run(&by_name);
    let times = gpu_test_permit::__private::tune::hold_times(&setup.slots());
    let tests: Vec<(&str, &str, Duration)> = times
        .iter()
        .map(|t| (t.binary.as_str(), t.test.as_str(), t.hold))
        .collect();
    let priorities = gpu_test_permit_cli::nextest_config::priority_block(&tests);
    assert!(priorities.contains("gpu_zz_long_0"), "{priorities}");
    let longest = setup.work.path().join("longest-first.toml");
    std::fs::write(
        &longest,
        gpu_test_permit::__private::nextest::group_snippet(2) + &priorities,
    )
    .unwrap();

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(60))
        .configure_from_args();
    let mut g = c.benchmark_group("long-short-suite");
    for (name, tool) in [("by-name", &by_name), ("longest-first", &longest)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let took = setup.run(tool);
                    TIMES.lock().unwrap().push((name, took));
                    total += took;
                }
                total
            })
        });
    }
    g.finish();
    c.final_summary();

    let all = TIMES.lock().unwrap();
    let of = |name: &str| -> Vec<Duration> {
        all.iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .collect()
    };
    let (base, ours) = (of("by-name"), of("longest-first"));
    if base.is_empty() || ours.is_empty() {
        return;
    }
    let (base, ours) = (median(base), median(ours));
    println!(
        "long-short suite: by name {:.2} s, longest first {:.2} s (median of each run timed): \
         {:.2}x; lower bound {:.1} s: by name {:.2}x, longest first {:.2}x (target <= 1.1x)",
        base.as_secs_f64(),
        ours.as_secs_f64(),
        ours.as_secs_f64() / base.as_secs_f64(),
        LOWER_BOUND.as_secs_f64(),
        base.as_secs_f64() / LOWER_BOUND.as_secs_f64(),
        ours.as_secs_f64() / LOWER_BOUND.as_secs_f64(),
    );
}
