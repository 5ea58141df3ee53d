//! The trace file: valid Chrome trace-event JSON even with many concurrent writers.

use std::thread;
use std::time::Duration;

use gpu_test_permit::PermitPool;
use gpu_test_permit::trace::{peak_concurrency, read_events};

use crate::util::tempdir;

#[test]
fn concurrent_writers_produce_whole_events_and_the_cap_shows() {
    let dir = tempdir();
    let trace = dir.path().join("trace.json");
    // Two pools on one slot directory behave like two processes.
    let pools: Vec<PermitPool> = (0..2)
        .map(|_| {
            PermitPool::builder()
                .concurrency(2)
                .slot_dir(dir.path().join("slots"))
                .trace(&trace)
                .build()
                .unwrap()
        })
        .collect();
    thread::scope(|s| {
        for t in 0..16 {
            let pool = &pools[t % 2];
            s.spawn(move || {
                for _ in 0..10 {
                    let _p = pool.acquire();
                    thread::sleep(Duration::from_micros(200));
                }
            });
        }
    });
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.starts_with("[\n"));
    // With a closing bracket it is a plain JSON array too.
    let closed = format!("{}]", text.trim_end().trim_end_matches(','));
    let all: serde_json::Value = serde_json::from_str(&closed).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 16 * 10 * 2);
    let events = read_events(&trace).unwrap();
    assert_eq!(events.iter().filter(|e| e.name == "hold").count(), 160);
    assert_eq!(events.iter().filter(|e| e.name == "wait").count(), 160);
    assert!(
        events
            .iter()
            .all(|e| e.ph == "X" && e.pid == std::process::id())
    );
    let peak = peak_concurrency(&events);
    assert!((1..=2).contains(&peak), "peak {peak}");
}

#[test]
fn corrupt_trace_lines_are_reported_with_their_line_number() {
    let dir = tempdir();
    let path = dir.path().join("t.json");
    std::fs::write(&path, "[\n{\"name\":\"hold\"\n").unwrap();
    let err = read_events(&path).unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[path = "../../benches/trace/baseline.rs"]
mod baseline;
#[path = "../../benches/trace/synthetic.rs"]
mod synthetic;

/// The summary and the timeline give exactly what the quadratic algorithm they replaced gave.
fn assert_same_as_baseline(events: &[gpu_test_permit::trace::TraceEvent], what: &str) {
    use gpu_test_permit::trace::{summarize, timeline};
    let ours = summarize(events);
    let old = baseline::summarize(events);
    match (ours, old) {
        (None, None) => {}
        (Some(s), Some(b)) => {
            let tests: Vec<_> = s
                .tests
                .iter()
                .map(|t| (t.test.clone(), t.permits, t.wait_us, t.hold_us))
                .collect();
            assert_eq!(s.capacity, b.concurrency, "{what}");
            assert_eq!(tests, b.tests, "{what}");
            assert_eq!(s.span_us, b.span_us, "{what}");
            assert_eq!(s.utilisation.to_bits(), b.utilisation.to_bits(), "{what}");
            assert_eq!(s.peak, b.peak, "{what}");
            assert_eq!(s.what_if, b.what_if, "{what}");
        }
        (s, b) => panic!("{what}: ours {s:?}, baseline {b:?}"),
    }
    assert_eq!(timeline(events, 1), baseline::timeline(events, 1), "{what}");
}

#[test]
fn trace_summary_matches_the_quadratic_algorithm_on_random_traces() {
    for seed in 0..400 {
        let events = synthetic::messy_trace(seed, (seed % 60) as usize);
        assert_same_as_baseline(&events, &format!("messy trace {seed}"));
    }
    for (seed, n, exclusive_every) in [(1, 1, 0), (2, 2, 0), (3, 3, 7), (4, 8, 0), (5, 8, 3)] {
        let events = synthetic::run_trace(seed, 400, n, exclusive_every);
        assert_same_as_baseline(&events, &format!("run trace {seed} (N = {n})"));
    }
}
