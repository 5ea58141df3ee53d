//! A text timeline of a trace.

use super::requests::RequestTimes;
use gpu_test_permit::trace::TraceEvent;

/// Renders the holds of a trace as a text timeline, one row per hold in the order they began:
/// `.` while the request waited, `#` while it held the permit, `tick_ms` milliseconds a
/// character. Rows are labelled with the process, thread and slot; control characters in
/// thread names are escaped as Rust writes them (`\u{1b}`).
///
/// A row's timeline is at most 1,000 characters: where `tick_ms` would take more, the tick
/// is as much coarser as it takes, and the header line says which it is. Labels are padded
/// to the longest, up to 64 characters; a longer one keeps its start and end with `...`
/// between them (libtest names a test's thread after the test), so the columns stay aligned.
///
/// ```
/// use gpu_test_permit_cli::trace::{TraceArgs, TraceEvent, timeline};
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
    const WIDEST: usize = 64;
    let label = |h: &TraceEvent| {
        elide_middle(
            &format!(
                "pid {} {}",
                h.pid,
                gpu_test_permit::__private::escape_controls(&h.args.thread)
            ),
            WIDEST,
        )
    };
    let width = holds
        .iter()
        .map(|h| label(h).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(14, WIDEST);
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

/// `text` if it has at most `width` characters, else its start and end with `...` between
/// them, `width` characters in all.
fn elide_middle(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width {
        return text.to_string();
    }
    let keep = width.saturating_sub(3);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = chars[..head].iter().collect();
    out.push_str("...");
    out.extend(&chars[chars.len() - tail..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_lose_their_middle_and_keep_the_columns() {
        assert_eq!(elide_middle("short", 10), "short");
        assert_eq!(elide_middle("abcdefghijkl", 10), "abcd...jkl");
        assert_eq!(elide_middle("ééééééééééé", 5), "é...é");
        let ev = |name: &str, tid: u64, thread: &str, ts, dur| TraceEvent {
            name: name.into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts,
            dur,
            pid: 7,
            tid,
            args: crate::trace::TraceArgs {
                test: thread.into(),
                thread: thread.into(),
                slots: vec![0],
                capacity: 1,
                ..Default::default()
            },
        };
        let long = format!("tests::{}_end", "x".repeat(80));
        let text = timeline(
            &[
                ev("wait", 1, &long, 0, 0),
                ev("hold", 1, &long, 0, 100_000),
                ev("wait", 2, "short", 0, 100_000),
                ev("hold", 2, "short", 100_000, 100_000),
            ],
            50,
        );
        let rows: Vec<&str> = text.lines().collect();
        // The slot column starts at the same place in every row: after 64 characters.
        assert!(rows[1].starts_with("pid 7 tests::xxx"), "{text}");
        assert!(
            rows[1].contains("...") && rows[1].contains("x_end "),
            "{text}"
        );
        assert_eq!(rows[1].chars().nth(64), Some(' '), "{text}");
        assert_eq!(rows[2].chars().nth(64), Some(' '), "{text}");
        assert_eq!(rows[1].chars().nth(65), Some('0'), "{text}");
        assert_eq!(rows[2].chars().nth(65), Some('0'), "{text}");
        assert_eq!(rows[0].chars().nth(65), Some('s'), "{text}");
    }
}
