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

/// The H100 traces of the example suite (`../shared/data/h100-example-suite`, beside the
/// checkout): `(file, events, wall seconds from the data's README)`.
fn h100_traces() -> Vec<(String, Vec<gpu_test_permit::trace::TraceEvent>, f64)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/h100-example-suite");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_else(|e| {
        panic!(
            "the H100 traces are missing ({}: {e}); CI has ../shared beside the checkout",
            dir.display()
        )
    });
    // Table rows: | file | runner | N | wall (s) |
    let mut out = Vec::new();
    for row in readme.lines().filter(|l| l.starts_with("| ") && l.contains(".json")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let wall: f64 = cells[3].parse().expect("wall seconds");
        let events = read_events(&dir.join(cells[0])).unwrap();
        out.push((cells[0].to_string(), events, wall));
    }
    assert!(out.len() >= 5, "{} traces in {}", out.len(), dir.display());
    out
}

/// Predicts each H100 run's span from each other run of the same runner, and checks the model
/// against what was measured: see BENCHMARKS.md ("What-if model against the H100"). Prints the
/// table with `cargo nextest run -E 'test(h100)' --no-capture`.
#[test]
fn trace_model_predicts_the_h100_runs() {
    use gpu_test_permit::trace::{Slowdown, predict, replay_fixed, summarize};
    let traces = h100_traces();
    let runner = |f: &str| f.split('-').next().unwrap().to_string();
    let summaries: Vec<_> = traces
        .iter()
        .map(|(_, e, _)| summarize(e).unwrap())
        .collect();
    let s = |us: u64| us as f64 / 1e6;
    println!(
        "| from | fit | to N | fixed replay (s) | model (s) | model range (s) | measured span (s) | \
         model wall (s) | measured wall (s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // (from, to, model error, fixed error) as fractions of the measured span.
    let mut errors = Vec::new();
    for (i, (from, events, wall_from)) in traces.iter().enumerate() {
        let source = &summaries[i];
        // Time outside the permits (start-up before the first request, the end after the last
        // release) taken as the same in every run of one runner.
        let outside = wall_from - s(source.span_us);
        for (j, (to, _, wall_to)) in traces.iter().enumerate() {
            if i == j || runner(from) != runner(to) {
                continue;
            }
            let n = summaries[j].capacity;
            let measured = summaries[j].span_us;
            let fixed = replay_fixed(events, n).unwrap();
            let p = predict(events, &source.slowdown, n).unwrap();
            println!(
                "| {from} | {:?} | {n} | {:.2} | **{:.2}** | {:.2}-{:.2} | {:.2} | {:.2} | {:.2} |",
                source.slowdown.basis,
                s(fixed),
                s(p.span_us),
                s(p.low_us),
                s(p.high_us),
                s(measured),
                s(p.span_us) + outside,
                wall_to
            );
            let err = |x: u64| (x as f64 - measured as f64) / measured as f64;
            errors.push((from.clone(), n, err(p.span_us), err(fixed), p, measured));
        }
    }
    // Two runs fitted together (each test seen at two concurrencies), replaying the N = 2 run.
    let (n1, n2) = (&traces[0].1, &traces[1].1);
    let both: Vec<_> = n1.iter().chain(n2).cloned().collect();
    let fit = Slowdown::fit(&both);
    println!("\nfit from nextest-N1 + nextest-N2: {fit:?}");
    for (to, _, wall_to) in traces.iter().filter(|t| runner(&t.0) == "nextest") {
        let j = traces.iter().position(|t| &t.0 == to).unwrap();
        let n = summaries[j].capacity;
        let p = predict(n2, &fit, n).unwrap();
        println!(
            "| nextest-N2.json | N1 + N2 | {n} | | **{:.2}** | {:.2}-{:.2} | {:.2} | | {wall_to:.2} |",
            s(p.span_us),
            s(p.low_us),
            s(p.high_us),
            s(summaries[j].span_us),
        );
    }
    for e in &errors {
        println!("{e:?}");
    }
}
