//! A mixed suite: 16 light GPU tests (1 unit) and 4 heavy ones (5 units), 250 ms each, whose
//! names interleave (`fixtures/mixed`), all 20 started at once by `cargo nextest` at N = 8
//! units (with a 1 GiB memory budget). No two heavy tests fit together and three light ones
//! fit beside each, so the ideal is five rounds: 1.25 s.
//!
//! - `permits`: the tests' own weighted permits (`REALIZAR_GPU_TEST_CONCURRENCY=8`, a slot
//!   directory of the bench's own), no nextest test group: every test process is started and
//!   the permits' queue decides who runs, first come first served (no hold time on record).
//! - `backfilling`: the same, from its second run on, with no command in between: the first
//!   process of each run brings the runs before it into the history (hold times on record),
//!   so a light test behind a heavy one waiting at the head takes the units the heavy one
//!   cannot use yet (`docs/protocol.md`, 12).
//! - `floor`: `permits` with the tests holding their permits for 0.25 ms instead of 250: what a
//!   run costs besides the holds (cargo, nextest's listing, 20 process starts), measured in the
//!   same run, so that the schedule can be judged against the ideal plus that floor.
//! - `threads-required` (the baseline): nextest alone, a test group `gpu` of 8 threads with
//!   `threads-required = 5` for the heavy tests and 1 for the light ones, started by name; the
//!   permits are at N = 64, where nobody waits (the crate has no switch that turns them off).
//!
//! Each sample is one whole `cargo nextest run` (its listing and process starts included), so
//! the ideal is approached from above. After criterion, each variant's median, fastest and
//! slowest run, the ratio of the medians (permits / threads-required) and each variant's
//! slowest run over the ideal are printed.
//!
//! `MIXED_SAMPLES=n` skips criterion and times n runs of each variant, alternating
//! (permits, threads-required, permits, ...), then prints the same summary: a quick
//! measurement on a shared machine.
//!
//! Run with `cargo bench --bench mixed_suite` (needs cargo-nextest); see BENCHMARKS.md.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use criterion::{Criterion, SamplingMode};

#[path = "../../benches/support/nextest.rs"]
mod nextest;
use nextest::{nextest_run, timed_run};

const SUITE: &str = "gpu-test-permit-mixed";
/// Four rounds of one heavy and three light tests, and one of the last four light ones.
const IDEAL: Duration = Duration::from_millis(1250);

/// nextest's own weights: a test group of N = 8 threads, the heavy tests taking 5 of them.
const THREADS_REQUIRED: &str = r#"
[test-groups]
gpu = { max-threads = 8 }

[[profile.default.overrides]]
filter = 'package(gpu-test-permit-mixed) & test(/_heavy$/)'
test-group = 'gpu'
threads-required = 5

[[profile.default.overrides]]
filter = 'package(gpu-test-permit-mixed)'
test-group = 'gpu'
threads-required = 1
"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Permits,
    Backfilling,
    ThreadsRequired,
    Floor,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::Permits,
        Variant::Backfilling,
        Variant::ThreadsRequired,
        Variant::Floor,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Permits => "permits",
            Variant::Backfilling => "backfilling",
            Variant::ThreadsRequired => "threads-required",
            Variant::Floor => "floor",
        }
    }
}

/// One variant's slot directory, state directory and nextest config file, made fresh when the
/// bench starts.
struct Setup {
    variant: Variant,
    work: tempfile::TempDir,
    target: PathBuf,
    config: PathBuf,
}

impl Setup {
    fn new(variant: Variant, target: &Path) -> Setup {
        let work = tempfile::tempdir().unwrap();
        let config = work.path().join("nextest.toml");
        let text = match variant {
            Variant::ThreadsRequired => THREADS_REQUIRED,
            _ => "",
        };
        std::fs::write(&config, text).unwrap();
        Setup {
            variant,
            work,
            target: target.to_path_buf(),
            config,
        }
    }

    /// One `cargo nextest run` of the suite, all 20 tests started at once.
    fn run(&self) -> Duration {
        let n = match self.variant {
            Variant::ThreadsRequired => "64",
            _ => "8",
        };
        let mut c = nextest_run(SUITE, &self.target, 20, &self.config);
        c.env("GPU_TEST_PERMIT_DIR", self.work.path().join("slots"))
            .env("GPU_TEST_PERMIT_STATE", self.work.path().join("state"))
            .env("GPU_TEST_PERMIT_GPU_MEMORY", "1GiB")
            .env("GPU_TEST_PERMIT_TRACE", self.trace())
            .env("REALIZAR_GPU_TEST_CONCURRENCY", n);
        if self.variant != Variant::Floor {
            c.env("MIXED_BENCH", "1");
        }
        let _ = std::fs::remove_file(self.trace());
        timed_run(c)
    }

    /// The trace of the last run.
    fn trace(&self) -> PathBuf {
        self.work.path().join("trace.json")
    }

    /// How many permits of the last run were granted past a waiting head.
    fn backfilled(&self) -> usize {
        std::fs::read_to_string(self.trace())
            .map(|t| t.matches("\"backfilled\":true").count())
            .unwrap_or(0)
    }

    /// Checks that the runs so far learned hold times by themselves (the first process of a
    /// run brings the runs before it into the history): no `gpu-test-permit history` ran.
    fn learned(&self) {
        assert!(
            self.work.path().join("state").join("gpu0.tests").exists(),
            "the runs learned no hold times"
        );
    }
}

static BACKFILLED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

static TIMES: Mutex<Vec<(Variant, Duration)>> = Mutex::new(Vec::new());

fn timed(setup: &Setup) -> Duration {
    let took = setup.run();
    TIMES.lock().unwrap().push((setup.variant, took));
    if setup.variant == Variant::Backfilling {
        BACKFILLED.lock().unwrap().push(setup.backfilled());
    }
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mixed-suite");
    let setups: Vec<Setup> = Variant::ALL
        .iter()
        .map(|&v| Setup::new(v, &target))
        .collect();
    // Untimed: the first run builds the suite, and is the run that backfilling's second run
    // learns from as it starts; a second untimed run of it shows that it did.
    for setup in &setups {
        setup.run();
        if setup.variant == Variant::Backfilling {
            setup.run();
            setup.learned();
        }
    }

    match std::env::var("MIXED_SAMPLES") {
        Ok(n) => {
            let n: usize = n.trim().parse().expect("MIXED_SAMPLES: a whole number");
            for i in 0..n {
                for setup in &setups {
                    let took = timed(setup);
                    eprintln!(
                        "{i:>3} {:<16} {:.3} s",
                        setup.variant.name(),
                        took.as_secs_f64()
                    );
                }
            }
        }
        Err(_) => {
            let mut c = Criterion::default()
                .sample_size(10)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(15))
                .configure_from_args();
            let mut g = c.benchmark_group("mixed-suite");
            g.sampling_mode(SamplingMode::Flat);
            for setup in &setups {
                g.bench_function(setup.variant.name(), |b| {
                    b.iter_custom(|iters| (0..iters).map(|_| timed(setup)).sum())
                });
            }
            g.finish();
            c.final_summary();
        }
    }

    let all = TIMES.lock().unwrap();
    let of = |v: Variant| -> Vec<Duration> {
        all.iter()
            .filter(|(w, _)| *w == v)
            .map(|(_, t)| *t)
            .collect()
    };
    let floor = median(of(Variant::Floor));
    let mut medians = Vec::new();
    for v in Variant::ALL {
        let times = of(v);
        if times.is_empty() {
            return;
        }
        let (min, max) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
        let runs = times.len();
        let med = median(times);
        let judged = if v == Variant::Floor {
            String::new()
        } else {
            format!(
                "; worst / ideal {:.2} s: {:.2}x, over the floor {:.2}x",
                IDEAL.as_secs_f64(),
                max.as_secs_f64() / IDEAL.as_secs_f64(),
                max.as_secs_f64() / (IDEAL + floor).as_secs_f64(),
            )
        };
        println!(
            "mixed suite, {:<16} {runs:>3} runs: median {:.2} s, min {:.2} s, max {:.2} s{judged}",
            v.name(),
            med.as_secs_f64(),
            min.as_secs_f64(),
            max.as_secs_f64(),
        );
        medians.push(med);
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "mixed suite, medians: permits / threads-required {:.2}x, backfilling / threads-required \
         {:.2}x, backfilling / permits {:.2}x; the floor (a run besides its holds) {:.2} s",
        ratio(medians[0], medians[2]),
        ratio(medians[1], medians[2]),
        ratio(medians[1], medians[0]),
        floor.as_secs_f64(),
    );
    let backfilled = BACKFILLED.lock().unwrap();
    println!(
        "mixed suite, backfilling: grants past a waiting head per run: {:?}",
        *backfilled
    );
}
