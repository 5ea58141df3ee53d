//! The trace summary as it was before it became O(n log n), kept as the baseline of the
//! `trace` benchmark and as the reference the equivalence test compares against.
//!
//! `requested_at` scans every event for each hold (quadratic in the trace), the per-test table
//! looks tests up by a linear search, and the what-if replay sorts all N free times for every
//! request of every N from 1 to 2N.

#![allow(dead_code, unreachable_pub, missing_docs)]

use gpu_test_permit::trace::TraceEvent;

/// The fields of `gpu_test_permit_cli::trace::Summary`, per test `(test, permits, wait, hold)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub concurrency: usize,
    pub tests: Vec<(String, usize, u64, u64)>,
    pub span_us: u64,
    pub utilisation: f64,
    pub peak: usize,
    pub what_if: Vec<(usize, u64)>,
}

struct TestSummary {
    test: String,
    permits: usize,
    wait_us: u64,
    hold_us: u64,
}

pub fn peak_concurrency(events: &[TraceEvent]) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for e in events.iter().filter(|e| e.name == "hold") {
        let units = if e.args.exclusive { e.args.capacity } else { 1 } as i64;
        edges.push((e.ts, units));
        edges.push((e.ts + e.dur, -units));
    }
    // At equal timestamps, count releases before acquisitions.
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        peak = peak.max(cur);
    }
    peak as usize
}

pub fn summarize(events: &[TraceEvent]) -> Option<Summary> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() {
        return None;
    }
    let concurrency = events
        .iter()
        .map(|e| e.args.capacity)
        .max()
        .unwrap_or(1)
        .max(1);
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let end = events.iter().map(|e| e.ts + e.dur).max().unwrap_or(0);
    let span_us = end - start;

    let mut tests: Vec<TestSummary> = Vec::new();
    for e in events {
        let i = match tests.iter().position(|t| t.test == e.args.test) {
            Some(i) => i,
            None => {
                tests.push(TestSummary {
                    test: e.args.test.clone(),
                    permits: 0,
                    wait_us: 0,
                    hold_us: 0,
                });
                tests.len() - 1
            }
        };
        match e.name.as_str() {
            "wait" => tests[i].wait_us += e.dur,
            "hold" => {
                tests[i].permits += 1;
                tests[i].hold_us += e.dur;
            }
            _ => {}
        }
    }
    tests.sort_by(|a, b| b.wait_us.cmp(&a.wait_us).then(a.test.cmp(&b.test)));

    let units = |e: &TraceEvent| if e.args.exclusive { concurrency } else { 1 };
    let held: u128 = holds.iter().map(|e| e.dur as u128 * units(e) as u128).sum();
    let utilisation = if span_us == 0 {
        1.0
    } else {
        held as f64 / (concurrency as f64 * span_us as f64)
    };

    // Requests in the order they were made.
    let mut requests: Vec<(u64, u64, bool)> = holds
        .iter()
        .map(|h| (requested_at(events, h) - start, h.dur, h.args.exclusive))
        .collect();
    // Stable: requests made in the same microsecond keep the order of the trace.
    requests.sort_by_key(|r| r.0);
    let what_if = (1..=concurrency * 2)
        .map(|n| (n, replay(&requests, n)))
        .collect();
    Some(Summary {
        concurrency,
        tests: tests
            .into_iter()
            .map(|t| (t.test, t.permits, t.wait_us, t.hold_us))
            .collect(),
        span_us,
        utilisation,
        peak: peak_concurrency(events),
        what_if,
    })
}

fn requested_at(events: &[TraceEvent], hold: &TraceEvent) -> u64 {
    events
        .iter()
        .find(|w| {
            w.name == "wait" && w.pid == hold.pid && w.tid == hold.tid && w.ts + w.dur == hold.ts
        })
        .map_or(hold.ts, |w| w.ts)
}

fn replay(requests: &[(u64, u64, bool)], n: usize) -> u64 {
    // When each permit is next free.
    let mut free_at = vec![0u64; n];
    let mut end = 0;
    for &(arrival, hold, exclusive) in requests {
        free_at.sort_unstable();
        let begin = if exclusive {
            arrival.max(free_at[n - 1])
        } else {
            arrival.max(free_at[0])
        };
        let finish = begin + hold;
        if exclusive {
            free_at.iter_mut().for_each(|f| *f = finish);
        } else {
            free_at[0] = finish;
        }
        end = end.max(finish);
    }
    end
}

pub fn timeline(events: &[TraceEvent], tick_ms: u64) -> String {
    use std::fmt::Write as _;
    let tick_us = tick_ms.max(1) * 1000;
    let Some(start) = events.iter().map(|e| e.ts).min() else {
        return String::new();
    };
    let mut holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    holds.sort_by_key(|e| (e.ts, e.pid, e.tid));
    let label = |h: &TraceEvent| format!("pid {} {}", h.pid, h.args.thread);
    let width = holds
        .iter()
        .map(|h| label(h).len())
        .max()
        .unwrap_or(0)
        .max(14);
    let mut out = format!(
        "{:<width$} {:<5} timeline ({tick_ms} ms per character)\n",
        "process/thread", "slot"
    );
    for h in holds {
        let asked = requested_at(events, h);
        let col = |t: u64| ((t - start) / tick_us) as usize;
        let slots: Vec<String> = h.args.slots.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(
            out,
            "{:<width$} {:<5} {}{}{}",
            label(h),
            slots.join(","),
            " ".repeat(col(asked)),
            ".".repeat(col(h.ts) - col(asked)),
            "#".repeat((col(h.ts + h.dur) - col(h.ts)).max(1)),
        );
    }
    out
}
