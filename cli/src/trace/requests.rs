//! A trace's permit requests as the fit and the replay read them: the runs a file holds, when
//! each request was made, the units held beside each hold, and which release each request
//! followed.

use std::collections::HashMap;

use gpu_test_permit::trace::TraceEvent;

/// The runs of a trace file that several runs at different N appended to: the events split
/// where `capacity` changes, in time order, when the parts do not overlap in time. Otherwise
/// (one N, or parts that overlap) all of `events` as one run.
pub fn split_runs(events: &[TraceEvent]) -> Vec<Vec<TraceEvent>> {
    let mut sorted: Vec<&TraceEvent> = events.iter().collect();
    sorted.sort_by_key(|e| e.ts);
    let mut runs: Vec<Vec<TraceEvent>> = Vec::new();
    for e in sorted {
        match runs.last_mut() {
            Some(run) if run[0].args.capacity == e.args.capacity => run.push(e.clone()),
            _ => runs.push(vec![e.clone()]),
        }
    }
    let disjoint = runs.windows(2).all(|w| {
        let end = w[0].iter().map(TraceEvent::end).max().unwrap_or(0);
        end <= w[1][0].ts
    });
    if runs.len() > 1 && disjoint {
        runs
    } else {
        vec![events.to_vec()]
    }
}

/// When the request behind each hold was made: the start of the wait that ended where the hold
/// began (a wait span ends exactly at its hold's start), or the hold's start without one. Where
/// several waits of one thread end at the same moment, the first in the trace counts.
pub(super) struct RequestTimes(HashMap<(u32, u64, u64), u64>);

impl RequestTimes {
    pub(super) fn new(events: &[TraceEvent]) -> RequestTimes {
        let mut waits = HashMap::new();
        for w in events.iter().filter(|e| e.name == "wait") {
            waits.entry((w.pid, w.tid, w.end())).or_insert(w.ts);
        }
        RequestTimes(waits)
    }

    pub(super) fn of(&self, hold: &TraceEvent) -> u64 {
        self.0
            .get(&(hold.pid, hold.tid, hold.ts))
            .copied()
            .unwrap_or(hold.ts)
    }
}

/// One permit request of a trace, for the replays.
#[derive(Clone, Debug)]
pub(super) struct Request {
    /// When it was made, microseconds from the start of the trace.
    pub(super) arrival: u64,
    /// When its hold ended in the trace.
    pub(super) release: u64,
    /// How long it held its permit in the trace.
    pub(super) hold: u64,
    /// Units it took (an exclusive request takes the whole replayed pool instead).
    pub(super) units: usize,
    pub(super) exclusive: bool,
    /// Units other holds kept busy on its GPU, on average over its hold, in the trace.
    pub(super) others: f64,
    /// Its test, for the slowdown fit.
    pub(super) test: usize,
    /// For the model's replay: the request whose release it followed, and how long after
    /// (see [`Replayable::new`]).
    pub(super) after: Option<(usize, u64)>,
}

/// The requests of a trace in the order they were made, ready to replay.
pub(super) struct Replayable {
    pub(super) requests: Vec<Request>,
    /// For each request, the request that followed its release, if one did.
    pub(super) follower: Vec<Option<usize>>,
    pub(super) gpus: usize,
    /// The most units a request took: pools smaller than this clamp it.
    pub(super) max_units: usize,
}

impl Replayable {
    /// The holds' requests, in order. For the model's replay, each request made after a
    /// release is paired with a release, in order (the first such request with the first
    /// release, and so on; a release pairs only with a request made after it): a test runner
    /// with a fixed number of threads starts a test when one ends, so a request follows a
    /// release by the runner's start-up and the test's work before its permit, wherever the
    /// release falls.
    pub(super) fn new(events: &[TraceEvent], holds: &[&TraceEvent], start: u64) -> Replayable {
        let asked = RequestTimes::new(events);
        let gpus = holds.iter().map(|h| h.args.gpus).max().unwrap_or(1).max(1);
        let spans: Vec<(u64, u64, usize)> = holds
            .iter()
            .map(|h| (h.ts - start, h.dur, h.args.held_units()))
            .collect();
        let others = others_load(&spans, gpus);
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut requests: Vec<Request> = holds
            .iter()
            .zip(others)
            .map(|(h, others)| {
                let next = names.len();
                Request {
                    arrival: asked.of(h) - start,
                    release: h.end() - start,
                    hold: h.dur,
                    units: h.args.held_units(),
                    exclusive: h.args.exclusive,
                    others,
                    test: *names.entry(h.args.test.as_str()).or_insert(next),
                    after: None,
                }
            })
            .collect();
        // Stable: requests made in the same microsecond keep the order of the trace.
        requests.sort_by_key(|r| r.arrival);
        let mut releases: Vec<(u64, usize)> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| (r.release, i))
            .collect();
        releases.sort_unstable();
        let mut follower = vec![None; requests.len()];
        let mut next_release = releases.iter().peekable();
        for (j, r) in requests.iter_mut().enumerate() {
            // A release before this request, by an earlier one (so the replay meets it first).
            if let Some(&&(at, i)) = next_release.peek()
                && at <= r.arrival
                && i < j
            {
                next_release.next();
                r.after = Some((i, r.arrival - at));
                follower[i] = Some(j);
            }
        }
        let max_units = requests.iter().map(|r| r.units).max().unwrap_or(1);
        Replayable {
            requests,
            follower,
            gpus,
            max_units,
        }
    }

    /// The hold times of the trace.
    pub(super) fn holds(&self) -> Vec<u64> {
        self.requests.iter().map(|r| r.hold).collect()
    }
}

/// For each span `(begin, duration, units)`, the units the other spans keep busy during it,
/// averaged over its duration and divided by `gpus` (0 for a span of no duration). One sweep
/// over the sorted edges keeps the integral of the load so far; a span's integral is its
/// value at the span's end less its value at the start: O(m log m).
fn others_load(spans: &[(u64, u64, usize)], gpus: usize) -> Vec<f64> {
    // (time, span, is the end): the order at one time does not matter, the integral is the
    // same there.
    let mut edges: Vec<(u64, u32, bool)> = Vec::with_capacity(spans.len() * 2);
    for (i, &(b, d, _)) in spans.iter().enumerate() {
        edges.push((b, i as u32, false));
        edges.push((b.saturating_add(d), i as u32, true));
    }
    edges.sort_unstable_by_key(|e| e.0);
    let mut integral = vec![0.0f64; spans.len()];
    let (mut area, mut load, mut at) = (0.0f64, 0i64, 0u64);
    for (t, i, end) in edges {
        area += load as f64 * (t - at) as f64;
        at = t;
        let units = spans[i as usize].2 as i64;
        if end {
            integral[i as usize] += area;
            load -= units;
        } else {
            integral[i as usize] -= area;
            load += units;
        }
    }
    spans
        .iter()
        .zip(integral)
        .map(|(&(_, d, u), total)| {
            if d == 0 {
                return 0.0;
            }
            ((total / d as f64 - u as f64) / gpus as f64).max(0.0)
        })
        .collect()
}
