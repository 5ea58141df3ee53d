//! Probe benchmarks: what a backend probe costs, and what the caches save.
//!
//! - `child`: one probe in a child process per backend (the default), beside the same probe
//!   in-process (the opt-in) and a `ping` child that only answers (the cost of starting a child
//!   of this executable at all).
//! - `cached`: a lookup in this process's cache, beside a fresh child probe.
//! - `nextest-run`: in a fresh process, as every test under nextest is, the first probe of a run
//!   (starts the probe child and writes the run cache) against a later one (reads the run
//!   cache). Timed inside the process, around the `probe` call only.
//!
//! Run with `cargo bench --all-features --bench probe`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use gpu_test_permit::probe::{self, Backend, ProbeOptions};

const CHILD_VAR: &str = "PROBE_BENCH_CHILD";

fn opts() -> ProbeOptions {
    ProbeOptions::from_env().timeout(Duration::from_secs(60))
}

fn child(c: &mut Criterion) {
    let mut g = c.benchmark_group("child");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("ping", |b| {
        b.iter(|| probe::self_test(&opts()).unwrap());
    });
    for backend in Backend::ALL.into_iter().filter(|b| b.is_built()) {
        g.bench_function(format!("{backend}/child"), |b| {
            b.iter(|| probe::probe_with(backend, &opts()));
        });
        g.bench_function(format!("{backend}/in-process"), |b| {
            b.iter(|| probe::probe_with(backend, &opts().in_process(true)));
        });
    }
    g.finish();
}

fn cached(c: &mut Criterion) {
    let mut g = c.benchmark_group("cached");
    for backend in Backend::ALL {
        let _ = probe::probe(backend); // fill the process cache
        g.bench_function(format!("{backend}/process-cache"), |b| {
            b.iter(|| probe::probe(backend));
        });
    }
    g.finish();
}

/// Starts this bench binary as a test process of nextest run `run_id` and returns how long
/// its `probe` call took, measured inside it.
fn timed_probe_in_fresh_process(
    run_id: &str,
    slots: &std::path::Path,
    backend: Backend,
) -> Duration {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_VAR, backend.name())
        .env("NEXTEST_RUN_ID", run_id)
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("GPU_TEST_PERMIT_DIR", slots)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let nanos: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("probe-ns "))
        .unwrap_or_else(|| panic!("no timing in {text:?}"))
        .parse()
        .unwrap();
    Duration::from_nanos(nanos)
}

fn nextest_run(c: &mut Criterion) {
    let slots = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("nextest-run");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    for backend in Backend::ALL.into_iter().filter(|b| b.is_built()) {
        let mut run = 0u64;
        g.bench_function(format!("{backend}/first-probe"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        run += 1;
                        let id = format!("bench-first-{}-{run}", std::process::id());
                        timed_probe_in_fresh_process(&id, slots.path(), backend)
                    })
                    .sum()
            });
        });
        let id = format!("bench-rest-{}", std::process::id());
        timed_probe_in_fresh_process(&id, slots.path(), backend); // the run's first probe
        g.bench_function(format!("{backend}/later-probe"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timed_probe_in_fresh_process(&id, slots.path(), backend))
                    .sum()
            });
        });
    }
    g.finish();
}

criterion_group!(benches, child, cached, nextest_run);

fn main() {
    if let Ok(name) = std::env::var(CHILD_VAR) {
        let backend: Backend = name.parse().unwrap();
        let t = Instant::now();
        let report = probe::probe(backend);
        let ns = t.elapsed().as_nanos();
        std::hint::black_box(report);
        println!("probe-ns {ns}");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
