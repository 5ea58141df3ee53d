//! What `REALIZAR_GPU_TEST_CONCURRENCY=auto` costs, each beside the same with a fixed N:
//!
//! - `choose`: the choice itself from a full history (50 runs, a hang, at N = 2 to 4).
//! - `layout`: a process's first permit pool on a new slot directory: opening it with a fixed
//!   N, against choosing N first (the history brought up to date and read, the hang and
//!   casualty records read, the choice written into the layout and the run's records); and
//!   `choose_now`, that part alone (creating the slot files dominates the rest, and how long
//!   that takes varies with the file system).
//! - `acquire`: an uncontended acquire + release of a host-wide permit afterwards, in a pool of
//!   a fixed N and in one whose N `auto` chose (whose grants and releases go to the run's
//!   records, kept until the process exits).
//!
//! Run with `cargo bench --bench auto`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::path::Path;

use criterion::{BatchSize, Criterion, criterion_group};
use gpu_test_permit::__private::tune::{HistoryEntry, Inputs, choose};
use gpu_test_permit::PermitPool;

/// A history of 50 runs on one GPU: N = 2, 3 and 4, as `auto` leaves it after settling.
fn history_lines() -> Vec<String> {
    (0..50u64)
        .map(|i| {
            let n = 2 + (i % 3) as usize;
            let busy = 10_000_000u64;
            format!(
                r#"{{"v":1,"run":"run-{i}","unix_ms":{},"per_gpu":{n},"gpus":1,"auto":true,"gpu":"","holds":200,"span_us":{busy},"busy_us":{busy},"unit_us":{},"work_us":{},"queued_us":{},"peak":{n},"unreturned":0,"failed":0,"casualties":0,"source_len":1000}}"#,
                1_700_000_000_000 + i * 60_000,
                busy * n as u64,
                busy * n.min(3) as u64,
                busy / 2,
            )
        })
        .collect()
}

fn choose_bench(c: &mut Criterion) {
    let history: Vec<HistoryEntry> = history_lines()
        .iter()
        .map(|l| HistoryEntry::from_json(l).unwrap())
        .collect();
    let mut g = c.benchmark_group("choose");
    g.bench_function("50-runs", |b| {
        b.iter(|| {
            choose(&Inputs {
                history: &history,
                hangs: &[],
                casualties: &[],
                gpu: "",
                gpus: 1,
                ceiling: 8,
                now_ms: 1_700_000_000_000 + 50 * 60_000,
            })
        })
    });
    g.finish();
}

fn fresh_dir(root: &Path) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    root.join(format!(
        "slots-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

fn layout(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("layout");
    g.bench_function("fixed", |b| {
        b.iter_batched(
            || fresh_dir(root.path()),
            |dir| {
                PermitPool::builder()
                    .concurrency(2)
                    .slot_dir(&dir)
                    .build()
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    // What `auto` adds to it, alone: the history brought up to date and read, the hang and
    // casualty records read, the choice made.
    let used = fresh_dir(root.path());
    std::fs::create_dir_all(&used).unwrap();
    g.bench_function("choose_now", |b| {
        b.iter(|| gpu_test_permit::__private::tune::choose_now(&used, 1, None))
    });
    g.bench_function("auto", |b| {
        b.iter_batched(
            || fresh_dir(root.path()),
            |dir| {
                PermitPool::builder()
                    .auto_concurrency()
                    .slot_dir(&dir)
                    .build()
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn acquire(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let fixed = PermitPool::builder()
        .concurrency(2)
        .slot_dir(root.path().join("fixed"))
        .build()
        .unwrap();
    let auto = PermitPool::builder()
        .auto_concurrency()
        .slot_dir(root.path().join("auto"))
        .build()
        .unwrap();
    let mut g = c.benchmark_group("acquire");
    g.bench_function("fixed", |b| b.iter(|| drop(fixed.acquire())));
    g.bench_function("auto", |b| b.iter(|| drop(auto.acquire())));
    g.finish();
}

// `layout` last: the pools it leaves behind keep records of their own.
criterion_group!(benches, choose_bench, acquire, layout);

fn main() {
    // `auto` as a user sets it, with a state directory of its own holding a full history.
    let state = tempfile::tempdir().unwrap();
    let text: String = history_lines().iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(state.path().join("gpu0.history"), text).unwrap();
    // SAFETY: no other thread runs yet.
    unsafe {
        std::env::set_var("REALIZAR_GPU_TEST_CONCURRENCY", "auto");
        std::env::set_var("GPU_TEST_PERMIT_STATE", state.path());
        std::env::set_var("GPU_TEST_PERMIT_DIR", state.path().join("global"));
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
