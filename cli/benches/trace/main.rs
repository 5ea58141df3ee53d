//! Trace summary benchmarks: `gpu-test-permit trace` on large traces, beside the quadratic
//! algorithm it replaced ([`baseline`], kept verbatim).
//!
//! - `summary/100k-holds-n2`: a run of 100,000 holds on N = 2 (200,000 events).
//! - `summary/20k-holds-n2`: the same at 20,000 holds, where the baseline is still bearable.
//! - `summary/2k-holds-n1024`: a large N, where the what-if replay of every N from 1 to 2N
//!   dominated.
//!
//! The baseline at 100k holds takes tens of seconds an iteration; the groups run 10 samples.
//! Run with `cargo bench --bench trace`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

mod baseline;
mod synthetic;

fn summary(c: &mut Criterion) {
    let mut g = c.benchmark_group("summary");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    let cases = [
        ("100k-holds-n2", synthetic::run_trace(1, 100_000, 2, 0)),
        ("20k-holds-n2", synthetic::run_trace(2, 20_000, 2, 0)),
        ("2k-holds-n1024", synthetic::run_trace(3, 2_000, 1024, 0)),
    ];
    for (name, events) in &cases {
        // Same answer, or the comparison means nothing.
        let ours = gpu_test_permit_cli::trace::summarize(events).unwrap();
        g.bench_function(format!("{name}/ours"), |b| {
            b.iter(|| gpu_test_permit_cli::trace::summarize(std::hint::black_box(events)))
        });
        g.bench_function(format!("{name}/baseline"), |b| {
            b.iter(|| baseline::summarize(std::hint::black_box(events)))
        });
        let old = baseline::summarize(events).unwrap();
        assert_eq!(
            (ours.span_us, ours.peak, &ours.what_if),
            (old.span_us, old.peak, &old.what_if),
            "{name}"
        );
    }
    g.finish();
}

criterion_group!(benches, summary);
criterion_main!(benches);
