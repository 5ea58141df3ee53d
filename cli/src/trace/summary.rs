//! The summary of a trace: per-test waits and holds, utilisation, peak, the what-if for other
//! N and the memory advice.

use std::collections::HashMap;

use super::model::{Prediction, Slowdown};
use super::requests::Replayable;
use gpu_test_permit::trace::{TraceEvent, peak_concurrency};

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
    /// the trace, at most 1024 x 1024: no pool is larger).
    pub capacity: usize,
    /// Per test, longest wait first.
    pub tests: Vec<TestSummary>,
    /// From the first request to the last release, microseconds.
    pub span_us: u64,
    /// Held unit-time over the unit-time available (`capacity x span`), 0 to 1.
    pub utilisation: f64,
    /// Most permit units held at once.
    pub peak: usize,
    /// Estimated span of the same requests with other pool sizes, `(N, microseconds)`, each
    /// hold as long as it was in the trace. Pool sizes from 1 to twice `capacity`: every one
    /// where that is at most 256 sizes; for a larger pool every one up to [`MODEL_MAX_N`],
    /// then each about an eighth larger than the one before, with `capacity` itself.
    pub what_if: Vec<(usize, u64)>,
    /// How hold times grew with the units held at the same time, fitted from the trace: the
    /// model behind [`predicted`](Self::predicted).
    pub slowdown: Slowdown,
    /// Estimated span with other pool sizes from the [`slowdown`](Self::slowdown) model: the
    /// requests of [`what_if`](Self::what_if) replayed with the holds sharing the GPU as the
    /// model says, moment by moment. The same pool sizes, up to [`MODEL_MAX_N`].
    pub predicted: Vec<Prediction>,
    /// Tests whose measured GPU memory (`memory_used`) exceeded what they declared, or the
    /// share of the memory budget their units stand for, with a weight or a declaration that
    /// would cover it. By test name.
    pub memory: Vec<MemoryAdvice>,
    /// Permits granted but never returned: their process was killed or aborted (a hold
    /// deadline, a crash) while it held them, or it still holds them.
    pub unreleased: Vec<Unreleased>,
    /// Holds granted past a request that waited at the head of the queue, by backfilling
    /// (their hold events say `backfilled`).
    pub backfilled: usize,
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

/// A test that used more GPU memory than it declared, or than its units' share of the
/// budget, and what would cover it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryAdvice {
    /// Test name.
    pub test: String,
    /// The most GPU memory one of its holds was measured to use, bytes.
    pub used: u64,
    /// What that hold declared, bytes.
    pub declared: Option<u64>,
    /// Units that hold took.
    pub units: usize,
    /// The share of the per-GPU memory budget its units stand for (`budget x units / N`),
    /// bytes, when a budget was set.
    pub share: Option<u64>,
    /// With a budget, the units whose share covers `used`: `ceil(used / (budget / N))`, at
    /// most N (then it needs more than a whole GPU's budget, see
    /// [`over_budget`](Self::over_budget)).
    pub suggested_units: Option<usize>,
    /// Whether `used` exceeded the whole per-GPU budget.
    pub over_budget: bool,
    /// A declaration that covers `used`: it rounded up to a whole MiB, bytes.
    pub suggested_memory: u64,
}

/// The largest pool size the [`Slowdown`] model replays ([`Summary::predicted`] stops there;
/// the fixed-duration [`Summary::what_if`] does not).
pub const MODEL_MAX_N: usize = 64;

/// Summarises the events of a trace. `None` when it holds no hold span.
///
/// Holds count their permit units (a weighted permit `k`, an exclusive one the pool). The
/// what-if replays the requests in the order they were made, each holding as long as it did,
/// on a first-come first-served pool of the other size: a request for `k` units waits until
/// `k` are free, and the requests behind it wait behind it. The [`Slowdown`] model's replay
/// ([`Summary::predicted`]) lets each hold progress as fast as the holds beside it allow; see
/// the [module docs](crate::trace#the-slowdown-model) for what it assumes.
///
/// Cost: O(e log e) for `e` events, plus O(m log m) per replayed pool size for `m` holds (for
/// the model, times three, for the estimate and the ends of its range, plus a step per
/// distinct weight at each of its events); the replays stop at the first size at which no
/// request waited for a permit, since every larger pool serves the requests the same way.
///
/// ```
/// use gpu_test_permit_cli::trace::{TraceArgs, TraceEvent, summarize};
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
/// // ... if running side by side did not slow them down. The trace cannot tell whether it
/// // does (they never overlapped): the model's range runs from there to "no faster at all".
/// let p = s.predicted[1];
/// assert_eq!(p.low_us, 100_000);
/// assert!(p.high_us.abs_diff(200_000) < 1_000, "{p:?}");
/// ```
pub fn summarize(events: &[TraceEvent]) -> Option<Summary> {
    summarize_with(events, None)
}

/// [`summarize`] with a [`Slowdown`] fitted elsewhere (from these events and runs of the same
/// suite at other N, say), or with `None`, fitted from `events`.
pub fn summarize_with(events: &[TraceEvent], slowdown: Option<&Slowdown>) -> Option<Summary> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() {
        return None;
    }
    // No pool is larger (events that say otherwise are not this crate's, see `read_trace`).
    let most = gpu_test_permit::config::MAX_CONCURRENCY * gpu_test_permit::config::MAX_CONCURRENCY;
    let capacity = events
        .iter()
        .map(|e| e.args.capacity)
        .max()
        .unwrap_or(1)
        .clamp(1, most);
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let end = events.iter().map(TraceEvent::end).max().unwrap_or(0);
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
            "wait" => tests[i].wait_us = tests[i].wait_us.saturating_add(e.dur),
            "hold" => {
                tests[i].permits += 1;
                tests[i].hold_us = tests[i].hold_us.saturating_add(e.dur);
            }
            _ => {}
        }
    }
    tests.sort_by(|a, b| b.wait_us.cmp(&a.wait_us).then(a.test.cmp(&b.test)));

    let held: u128 = holds
        .iter()
        .map(|e| e.dur as u128 * e.args.held_units() as u128)
        .sum();
    let utilisation = if span_us == 0 {
        1.0
    } else {
        held as f64 / (capacity as f64 * span_us as f64)
    };

    let run = Replayable::new(events, &holds, start);
    let hold_times = run.holds();
    let sizes = what_if_sizes(capacity);
    let mut what_if = Vec::with_capacity(sizes.len());
    let mut unconstrained = None;
    for n in sizes {
        let span = match unconstrained {
            Some(span) => span,
            None => {
                let (span, waited) = run.replay(&hold_times, n);
                if !waited && n >= run.max_units {
                    unconstrained = Some(span);
                }
                span
            }
        };
        what_if.push((n, span));
    }
    let slowdown = slowdown.copied().unwrap_or_else(|| run.fit());
    let predicted = run.predict(&slowdown, 1..=(capacity * 2).min(MODEL_MAX_N));

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
        .filter(|w| !returned.contains(&(w.pid, w.args.test.as_str(), w.end())))
        .map(|w| Unreleased {
            test: w.args.test.clone(),
            pid: w.pid,
            granted_us: w.end() - start,
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
        slowdown,
        predicted,
        memory: memory_advice(&holds),
        unreleased,
        backfilled: holds.iter().filter(|h| h.args.backfilled).count(),
    })
}

/// The pool sizes of [`Summary::what_if`] for a run on `capacity` permits.
fn what_if_sizes(capacity: usize) -> Vec<usize> {
    let top = capacity * 2;
    if top <= 256 {
        return (1..=top).collect();
    }
    // At most about 150 sizes for the largest pool (1024 GPUs of 1024 permits).
    let mut sizes: Vec<usize> = (1..=MODEL_MAX_N).collect();
    let mut n = MODEL_MAX_N;
    while n < top {
        n = (n + n.div_ceil(8)).min(top);
        sizes.push(n);
    }
    if let Err(at) = sizes.binary_search(&capacity) {
        sizes.insert(at, capacity);
    }
    sizes
}

/// The tests whose measured memory exceeded their declaration or their units' share of the
/// budget (see [`MemoryAdvice`]), the hold that used most for each.
fn memory_advice(holds: &[&TraceEvent]) -> Vec<MemoryAdvice> {
    const MIB: u64 = 1 << 20;
    let mut worst: HashMap<&str, MemoryAdvice> = HashMap::new();
    for h in holds {
        let Some(used) = h.args.memory_used else {
            continue;
        };
        let units = h.args.held_units();
        // N per GPU of the pool it held.
        let n = (h.args.capacity.max(1) / h.args.gpus.max(1)).max(1);
        let budget = h.args.memory_budget;
        let share = budget.map(|b| (b as u128 * units.min(n) as u128 / n as u128) as u64);
        let over_declared = h.args.memory.is_some_and(|m| used > m);
        let over_share = share.is_some_and(|s| used > s);
        if !(over_declared || over_share) {
            continue;
        }
        let needed = budget.map(|b| (used as u128 * n as u128).div_ceil(b.max(1) as u128));
        let advice = MemoryAdvice {
            test: h.args.test.clone(),
            used,
            declared: h.args.memory,
            units,
            share,
            suggested_units: needed.map(|k| (k as usize).clamp(1, n)),
            over_budget: budget.is_some_and(|b| used > b),
            suggested_memory: used.div_ceil(MIB).saturating_mul(MIB),
        };
        match worst.get(h.args.test.as_str()) {
            Some(w) if w.used >= used => {}
            _ => {
                worst.insert(h.args.test.as_str(), advice);
            }
        }
    }
    let mut out: Vec<MemoryAdvice> = worst.into_values().collect();
    out.sort_by(|a, b| a.test.cmp(&b.test));
    out
}
