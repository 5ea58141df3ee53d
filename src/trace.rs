//! Wait and hold spans as Chrome trace-event JSON (`GPU_TEST_PERMIT_TRACE=<file>`).
//!
//! The file is in the JSON Array Format of the trace-event spec: a `[` line, then one complete
//! event object per line, each followed by a comma; the closing `]` is optional in that format,
//! so processes can keep appending. Perfetto (ui.perfetto.dev) and `chrome://tracing` open it.
//! Each event is written with a single `write` to a file opened in append mode, so events from
//! many processes never interleave within a line. Timestamps are microseconds since the Unix
//! epoch, so spans from different processes line up.
//!
//! For a parser, [`read_events`] returns the events of such a file.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One trace event (a "complete" event, phase `X`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// `wait` (from asking to getting a permit) or `hold` (from getting to releasing it).
    pub name: String,
    /// Always `gpu-test-permit`.
    pub cat: String,
    /// Always `X`.
    pub ph: String,
    /// Start, microseconds since the Unix epoch.
    pub ts: u64,
    /// Duration in microseconds.
    pub dur: u64,
    /// Process id.
    pub pid: u32,
    /// Thread number.
    pub tid: u64,
    /// Details.
    pub args: TraceArgs,
}

/// Details of a [`TraceEvent`].
///
/// Fields added after the first release have defaults, so traces of earlier versions still
/// read; [`read_events`] fills in what they lack (`units`: 1, or `capacity` for an exclusive
/// permit; `gpus`: 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceArgs {
    /// Test name.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Host slots held (empty for a wait that timed out, and for in-process-only pools).
    pub slots: Vec<usize>,
    /// Whether the permit is exclusive.
    pub exclusive: bool,
    /// Permits in the pool: N per GPU times the GPUs (`concurrency` in traces written by
    /// earlier versions).
    #[serde(alias = "concurrency")]
    pub capacity: usize,
    /// Permit units the permit held: 1 for a plain permit, k for a weighted one, `capacity`
    /// for an exclusive one.
    #[serde(default)]
    pub units: usize,
    /// GPUs the pool spans (its `capacity` is N per GPU times this).
    #[serde(default)]
    pub gpus: usize,
    /// GPU memory the test declared it needs, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// GPU memory the test was measured to use, in bytes, where its fixture could measure it
    /// (hold events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// The per-GPU memory budget in force, in bytes, when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
}

impl TraceArgs {
    /// Fills in what traces of earlier versions lack.
    fn normalise(&mut self) {
        if self.units == 0 {
            self.units = if self.exclusive { self.capacity } else { 1 };
        }
        if self.gpus == 0 {
            self.gpus = 1;
        }
    }
}

/// Appends events to a trace file.
#[derive(Debug)]
pub(crate) struct Tracer {
    path: PathBuf,
    file: File,
}

impl Tracer {
    /// Opens `path` for appending, writing the `[` header first if the file is new.
    pub(crate) fn open(path: &Path) -> io::Result<Tracer> {
        if !path.exists() {
            // Create the file with its header in one step (a hard link of a finished file), so
            // that no process can append an event before the header.
            let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
            std::fs::write(&tmp, b"[\n")?;
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Tracer {
            path: path.to_path_buf(),
            file,
        })
    }

    pub(crate) fn write(&self, event: &TraceEvent) {
        let mut line = serde_json::to_vec(event).expect("a trace event always serialises");
        line.extend_from_slice(b",\n");
        // One write call per event: O_APPEND makes it land whole at the end of the file.
        match (&self.file).write(&line) {
            Ok(n) if n == line.len() => {}
            Ok(_) | Err(_) => crate::notice::line(&format!(
                "could not append a trace event to {}",
                self.path.display()
            )),
        }
    }
}

/// Reads the events of a trace file written by this crate. Lines that are not events (the `[`
/// header, a closing `]`) are skipped; a line that is not valid JSON is an error naming it.
pub fn read_events(path: &Path) -> io::Result<Vec<TraceEvent>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim().trim_end_matches(',');
        if line.is_empty() || line == "[" || line == "]" {
            continue;
        }
        let mut ev: TraceEvent = serde_json::from_str(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} line {}: {e}", path.display(), i + 1),
            )
        })?;
        ev.args.normalise();
        out.push(ev);
    }
    Ok(out)
}

/// The largest number of permit units held at the same moment according to `events` (an
/// exclusive hold counts as `capacity` units).
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

/// Wait and hold times of one test in a trace.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TestSummary {
    /// Test name.
    pub test: String,
    /// Permits it took.
    pub permits: usize,
    /// Total time it waited for permits, microseconds.
    pub wait_us: u64,
    /// Total time it held permits, microseconds.
    pub hold_us: u64,
}

/// What a trace says about a run, for choosing N.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    /// Permits in the pool the run used, N per GPU times the GPUs (the largest `capacity` in
    /// the trace).
    pub capacity: usize,
    /// Per test, longest wait first.
    pub tests: Vec<TestSummary>,
    /// From the first request to the last release, microseconds.
    pub span_us: u64,
    /// Held permit-time over the permit-time available (`N x span`), 0 to 1.
    pub utilisation: f64,
    /// Most permit units held at once.
    pub peak: usize,
    /// Estimated span of the same requests with other values of N, `(N, microseconds)`.
    pub what_if: Vec<(usize, u64)>,
    /// Permits granted but never returned: their process was killed or aborted (a hold
    /// deadline, a crash) while it held them, or it still holds them.
    pub unreleased: Vec<Unreleased>,
}

/// A permit the trace shows granted and never returned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreleased {
    /// The test that held it.
    pub test: String,
    /// Its process.
    pub pid: u32,
    /// When it was granted, microseconds from the start of the trace.
    pub granted_us: u64,
}

/// Summarises the events of a trace. `None` when it holds no hold span.
///
/// The what-if estimate replays the requests in the order they were made, each holding as long
/// as it did, on a FIFO pool of the other size. It assumes hold times do not change with N;
/// on a GPU they grow as more tests share it, so read a larger N's estimate as a lower bound.
///
/// Cost: O(e log e) for `e` events, plus O(m log N) per replayed pool size for `m` holds; the
/// replays stop at the first size at which no request waited for a permit, since every larger
/// pool serves the requests the same way.
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent, summarize};
/// let ev = |name: &str, ts, dur| TraceEvent {
///     name: name.into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid: 1, tid: 1,
///     args: TraceArgs { test: "t".into(), thread: "t".into(), slots: vec![0],
///                       exclusive: false, capacity: 1, ..Default::default() },
/// };
/// // Two 100 ms holds one after the other on N = 1; the second waited 100 ms.
/// let s = summarize(&[ev("wait", 0, 0), ev("hold", 0, 100_000),
///                     ev("wait", 0, 100_000), ev("hold", 100_000, 100_000)]).unwrap();
/// assert_eq!((s.peak, s.span_us), (1, 200_000));
/// assert_eq!(s.what_if[1], (2, 100_000)); // with N = 2 both would have run at once
/// ```
pub fn summarize(events: &[TraceEvent]) -> Option<Summary> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() {
        return None;
    }
    let capacity = events
        .iter()
        .map(|e| e.args.capacity)
        .max()
        .unwrap_or(1)
        .max(1);
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let end = events.iter().map(|e| e.ts + e.dur).max().unwrap_or(0);
    let span_us = end - start;

    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut tests: Vec<TestSummary> = Vec::new();
    for e in events {
        let i = *index.entry(e.args.test.as_str()).or_insert_with(|| {
            tests.push(TestSummary {
                test: e.args.test.clone(),
                permits: 0,
                wait_us: 0,
                hold_us: 0,
            });
            tests.len() - 1
        });
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

    let units = |e: &TraceEvent| if e.args.exclusive { capacity } else { 1 };
    let held: u128 = holds.iter().map(|e| e.dur as u128 * units(e) as u128).sum();
    let utilisation = if span_us == 0 {
        1.0
    } else {
        held as f64 / (capacity as f64 * span_us as f64)
    };

    // Requests in the order they were made.
    let asked = RequestTimes::new(events);
    let mut requests: Vec<(u64, u64, bool)> = holds
        .iter()
        .map(|h| (asked.of(h) - start, h.dur, h.args.exclusive))
        .collect();
    // Stable: requests made in the same microsecond keep the order of the trace.
    requests.sort_by_key(|r| r.0);
    let mut what_if = Vec::with_capacity(capacity * 2);
    let mut unconstrained = None;
    for n in 1..=capacity * 2 {
        let span = match unconstrained {
            Some(span) => span,
            None => {
                let (span, waited) = replay(&requests, n);
                if !waited {
                    unconstrained = Some(span);
                }
                span
            }
        };
        what_if.push((n, span));
    }
    // A grant (the end of a wait) without a hold that starts there, in that process, for
    // that test: the permit was never returned. (The hold is written by the thread that drops
    // the permit, which may not be the one that took it: threads are no part of the match.)
    let returned: std::collections::HashSet<(u32, &str, u64)> = holds
        .iter()
        .map(|h| (h.pid, h.args.test.as_str(), h.ts))
        .collect();
    let mut unreleased: Vec<Unreleased> = events
        .iter()
        .filter(|w| w.name == "wait")
        .filter(|w| !returned.contains(&(w.pid, w.args.test.as_str(), w.ts + w.dur)))
        .map(|w| Unreleased {
            test: w.args.test.clone(),
            pid: w.pid,
            granted_us: w.ts + w.dur - start,
        })
        .collect();
    unreleased.sort_by_key(|u| u.granted_us);
    Some(Summary {
        capacity,
        tests,
        span_us,
        utilisation,
        peak: peak_concurrency(events),
        what_if,
        unreleased,
    })
}

/// When the request behind each hold was made: the start of the wait that ended where the hold
/// began (a wait span ends exactly at its hold's start), or the hold's start without one. Where
/// several waits of one thread end at the same moment, the first in the trace counts.
struct RequestTimes(HashMap<(u32, u64, u64), u64>);

impl RequestTimes {
    fn new(events: &[TraceEvent]) -> RequestTimes {
        let mut waits = HashMap::new();
        for w in events.iter().filter(|e| e.name == "wait") {
            waits.entry((w.pid, w.tid, w.ts + w.dur)).or_insert(w.ts);
        }
        RequestTimes(waits)
    }

    fn of(&self, hold: &TraceEvent) -> u64 {
        self.0
            .get(&(hold.pid, hold.tid, hold.ts))
            .copied()
            .unwrap_or(hold.ts)
    }
}

/// The span of `requests` `(arrival, hold, exclusive)` served first-come first-served by `n`
/// permits (an exclusive request takes all of them), and whether any request waited because
/// all `n` permits were busy.
///
/// The permits' next-free times are kept as a min-heap of those set since the last exclusive
/// request plus, implicitly, `n - heap.len()` permits free at `floor` (the end of that
/// exclusive request, or 0), which is never later than anything in the heap. The latest free
/// time is the latest finish so far (`end`).
///
/// If no request waited for a permit with `n` permits, none waits with more, and every request
/// begins at the same time: the pool of `n + 1` is the same free times plus one that is no later
/// than any of them.
fn replay(requests: &[(u64, u64, bool)], n: usize) -> (u64, bool) {
    let mut busy: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(n.min(requests.len()));
    let mut floor = 0;
    let mut end = 0;
    let mut waited = false;
    for &(arrival, hold, exclusive) in requests {
        if exclusive {
            let finish = arrival.max(end) + hold;
            busy.clear();
            floor = finish;
            end = end.max(finish);
            continue;
        }
        let ready = arrival.max(floor);
        let begin = if busy.len() < n {
            ready
        } else {
            let Reverse(first_free) = busy.pop().expect("n >= 1 permits are busy");
            waited |= first_free > ready;
            ready.max(first_free)
        };
        let finish = begin + hold;
        busy.push(Reverse(finish));
        end = end.max(finish);
    }
    (end, waited)
}

/// Renders the holds of a trace as a text timeline, one row per hold in the order they began:
/// `.` while the request waited, `#` while it held the permit, `tick_ms` milliseconds a
/// character. Rows are labelled with the process, thread and slot.
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
    let requests = RequestTimes::new(events);
    for h in holds {
        let asked = requests.of(h);
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
