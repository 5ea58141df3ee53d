//! What the run records cost a test that skips: `report_skip` as a test under nextest calls it
//! (the skip line on standard error, the binary's tally, and the skip's record appended to the
//! run's file in the slot directory), beside the baseline of the skip line alone, as a skip was
//! reported before runs were recorded.
//!
//! Run with `cargo bench --bench runs 2>/dev/null` (every iteration prints a skip line on
//! standard error); see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::io::Write;

use criterion::{Criterion, criterion_group, criterion_main};
use gpu_test_permit::decision::{report_skip, skip_line};
use gpu_test_permit::probe::Backend;

const REASON: &str = "cuda not installed: libcuda.so.1 was not found";

fn skip(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // As nextest starts a test process, before the crate reads its configuration.
    // SAFETY: no other thread runs yet.
    unsafe {
        std::env::set_var("NEXTEST_RUN_ID", "0b21430d-56d4-438d-b4b6-b0d0e0ead151");
        std::env::set_var("NEXTEST_EXECUTION_MODE", "process-per-test");
        std::env::set_var("NEXTEST_BINARY_ID", "suite::gpu");
        std::env::set_var("NEXTEST_TEST_NAME", "gpu::kernel_matches_cpu");
        std::env::set_var("GPU_TEST_PERMIT_DIR", dir.path());
    }
    let mut g = c.benchmark_group("skip");
    g.bench_function("recorded/gpu-test-permit", |b| {
        b.iter(|| report_skip(Backend::Cuda, REASON))
    });
    g.bench_function("line-only/baseline", |b| {
        b.iter(|| {
            let line = skip_line("gpu::kernel_matches_cpu", Backend::Cuda, REASON);
            let _ = std::io::stderr()
                .lock()
                .write_all(format!("{line}\n").as_bytes());
        })
    });
    g.finish();
    let records = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("gpu0.run.")
        })
        .count();
    assert_eq!(records, 1, "the skips were recorded in one run file");
}

criterion_group!(benches, skip);
criterion_main!(benches);
