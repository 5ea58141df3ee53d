//! What summarizing a run's records costs as the run grows (`report`, `junit`, `history`, and
//! a test process that passed on a retry looking for the casualties): the records of runs of
//! 5,000 and 50,000 permits, each a grant and a release of a test of its own, the processes'
//! pids in no order (as pids come back around), read from the run's file and summarized.
//!
//! A summary that builds its maps a key at a time in sorted vectors moves O(n) entries a key,
//! quadratic in the run; this one makes each map from its pairs with one sort. What the
//! figures show: the time a permit at 50,000 against at 5,000 (1.0 for a linear summary).
//!
//! Run with `cargo bench -p gpu-test-permit-cli --bench summary`.
#![allow(missing_docs)]

use std::io::Write;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpu_test_permit::__private::runs::{read_run, summarize};

const RUN: &str = "0b21430d-56d4-438d-b4b6-b0d0e0ead151";

/// A slot directory holding the records of a run of `permits` permits.
fn run_of(permits: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::create(dir.path().join(format!("gpu0.run.{RUN}"))).unwrap();
    let mut x: u64 = 88_172_645_463_325_252;
    let mut text = String::new();
    for i in 0..permits {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pid = x % 4_000_000;
        let at = 1_764_300_000_000_000 + i * 10;
        text.push_str(&format!(
            "{{\"kind\":\"grant\",\"run\":\"{RUN}\",\"unix_us\":{at},\"pid\":{pid},\"hold\":1,\
             \"binary\":\"suite::gpu\",\"test\":\"t{x:020}\",\"attempt\":1,\"total_attempts\":1,\
             \"units\":1,\"exclusive\":false,\"per_gpu\":4,\"gpus\":1,\"alone\":false,\
             \"waited_us\":0}}\n{{\"kind\":\"release\",\"run\":\"{RUN}\",\"unix_us\":{},\
             \"pid\":{pid},\"hold\":1,\"outcome\":\"passed\"}}\n",
            at + 5
        ));
    }
    file.write_all(text.as_bytes()).unwrap();
    dir
}

fn summary(c: &mut Criterion) {
    let mut g = c.benchmark_group("summary");
    g.sample_size(10);
    for permits in [5_000u64, 50_000] {
        let dir = run_of(permits);
        let run = read_run(dir.path(), RUN)
            .unwrap()
            .expect("the run's records");
        assert_eq!(run.records.len() as u64, 2 * permits, "every record read");
        assert_eq!(summarize(&run).permits as u64, permits);
        g.bench_with_input(BenchmarkId::new("summarize", permits), &run, |b, run| {
            b.iter(|| summarize(run))
        });
        g.bench_with_input(
            BenchmarkId::new("read-and-summarize", permits),
            &dir,
            |b, dir| b.iter(|| summarize(&read_run(dir.path(), RUN).unwrap().unwrap())),
        );
    }
    g.finish();
}

criterion_group!(benches, summary);
criterion_main!(benches);
