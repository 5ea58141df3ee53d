//! A text timeline of a trace.

use super::event::TraceEvent;
use super::requests::RequestTimes;

/// Renders the holds of a trace as a text timeline, one row per hold in the order they began:
/// `.` while the request waited, `#` while it held the permit, `tick_ms` milliseconds a
/// character. Rows are labelled with the process, thread and slot; control characters in
/// thread names are escaped as Rust writes them (`\u{1b}`).
///
/// A row's timeline is at most 1,000 characters: where `tick_ms` would take more, the tick
/// is as much coarser as it takes, and the header line says which it is. Labels are padded
/// to the longest, up to 64 characters.
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent, timeline};
/// let ev = |name: &str, tid, ts, dur| TraceEvent {
///     name: name.into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid: 7, tid,
///     args: TraceArgs { test: "t".into(), thread: format!("t{tid}"), slots: vec![0],
///                       exclusive: false, capacity: 1, ..Default::default() },
/// };
/// let text = timeline(&[ev("wait", 1, 0, 0), ev("hold", 1, 0, 100_000),
///                       ev("wait", 2, 0, 100_000), ev("hold", 2, 100_000, 100_000)], 50);
/// let rows: Vec<&str> = text.lines().skip(1).collect();
/// assert!(rows[0].ends_with(" ##"));
/// assert!(rows[1].ends_with(" ..##"));
/// ```
pub fn timeline(events: &[TraceEvent], tick_ms: u64) -> String {
    use std::fmt::Write as _;
    const COLUMNS: u64 = 1_000;
    let Some(start) = events.iter().map(|e| e.ts).min() else {
        return String::new();
    };
    let end = events.iter().map(TraceEvent::end).max().unwrap_or(start);
    let tick_ms = tick_ms
        .max(1)
        .max((end - start).div_ceil(1000).div_ceil(COLUMNS));
    let tick_us = tick_ms.saturating_mul(1000);
    let mut holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    holds.sort_by_key(|e| (e.ts, e.pid, e.tid));
    let label = |h: &TraceEvent| {
        format!(
            "pid {} {}",
            h.pid,
            crate::host::escape_controls(&h.args.thread)
        )
    };
    let width = holds
        .iter()
        .map(|h| label(h).len())
        .max()
        .unwrap_or(0)
        .clamp(14, 64);
    let mut out = format!(
        "{:<width$} {:<5} timeline ({tick_ms} ms per character)\n",
        "process/thread", "slot"
    );
    let requests = RequestTimes::new(events);
    for h in holds {
        let asked = requests.of(h);
        let col = |t: u64| (t.saturating_sub(start) / tick_us) as usize;
        let slots: Vec<String> = h.args.slots.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(
            out,
            "{:<width$} {:<5} {}{}{}",
            label(h),
            slots.join(","),
            " ".repeat(col(asked)),
            ".".repeat(col(h.ts).saturating_sub(col(asked))),
            "#".repeat((col(h.end()) - col(h.ts)).max(1)),
        );
    }
    out
}
