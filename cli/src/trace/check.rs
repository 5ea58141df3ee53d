//! Whether the model's estimates agree with the runs a trace measured ([`check_estimates`]).

use super::summary::Summary;
use gpu_test_permit::trace::TraceEvent;

/// How far outside the model's range a measured span may fall, as a fraction of the range's
/// nearer end, before the estimates are called untrustworthy: runs of one suite vary by a few
/// percent from one to the next.
pub const ESTIMATE_TOLERANCE: f64 = 0.05;

/// A measured run that the model's estimate for its own N does not account for
/// ([`check_estimates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Disagreement {
    /// The run's pool size (N per GPU times the GPUs).
    pub n: usize,
    /// Its span in the trace, from its first request to its last release, microseconds.
    pub measured_us: u64,
    /// The fast end of the model's range at that N, microseconds.
    pub low_us: u64,
    /// The slow end of the model's range at that N, microseconds.
    pub high_us: u64,
    /// Where this run and another, at another N, show that more permits did not make the
    /// suite faster although the run with fewer waited for permits.
    pub no_gain: Option<NoGain>,
}

/// Two measured runs of one suite of which the one with more permits was no faster, although
/// requests of the one with fewer waited for permits ([`Disagreement::no_gain`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoGain {
    /// The run with fewer permits: its N and span, microseconds.
    pub fewer: (usize, u64),
    /// The run with more permits: its N and span, microseconds.
    pub more: (usize, u64),
}

/// The span of one run's events, microseconds.
fn span(run: &[TraceEvent]) -> u64 {
    let start = run.iter().map(|e| e.ts).min().unwrap_or(0);
    let end = run.iter().map(TraceEvent::end).max().unwrap_or(0);
    end.saturating_sub(start)
}

/// Whether some request of `run` waited for a permit (a wait span of some length): permits
/// limited that run.
fn waited(run: &[TraceEvent]) -> bool {
    run.iter().any(|e| e.name == "wait" && e.dur > 0)
}

/// The measured runs of a trace (`runs`, as [`split_runs`](super::split_runs) gives them) whose
/// span falls outside the range that `summary` (of the last of them) estimates for their own N
/// by more than [`ESTIMATE_TOLERANCE`], in the order of `runs`. Where the model cannot account
/// for the runs it was fitted from, something other than permits (the CPU, memory, the disk)
/// sets the suite's pace, and its estimates for other N are not to be trusted.
///
/// Where such a run and another at another N show that more permits did not make the suite
/// faster, although the run with fewer waited for permits, the pair is given
/// ([`Disagreement::no_gain`]): permits were not what held it back.
///
/// ```
/// use gpu_test_permit_cli::trace::{TraceArgs, TraceEvent, check_estimates, split_runs, summarize};
/// let hold = |ts, dur, capacity| TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid: 1,
///     tid: 1, args: TraceArgs { test: "t".into(), capacity, ..Default::default() },
/// };
/// // One 100 ms hold: the model's estimate at the run's own N is the run itself.
/// let run = vec![hold(0, 100_000, 1)];
/// let s = summarize(&run).unwrap();
/// assert!(check_estimates(&split_runs(&run), &s).is_empty());
/// ```
pub fn check_estimates(runs: &[Vec<TraceEvent>], summary: &Summary) -> Vec<Disagreement> {
    let measured: Vec<(usize, u64, bool)> = runs
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| {
            let n = r.iter().map(|e| e.args.capacity).max().unwrap_or(1);
            (n, span(r), waited(r))
        })
        .collect();
    let mut out = Vec::new();
    for &(n, measured_us, waited_here) in &measured {
        let Some(p) = summary.predicted.iter().find(|p| p.n == n) else {
            continue;
        };
        let below = (measured_us as f64) < p.low_us as f64 * (1.0 - ESTIMATE_TOLERANCE);
        let above = (measured_us as f64) > p.high_us as f64 * (1.0 + ESTIMATE_TOLERANCE);
        if !(below || above) {
            continue;
        }
        let this = (n, measured_us, waited_here);
        let no_gain = measured.iter().find_map(|&other| {
            let (fewer, more) = if other.0 < n {
                (other, this)
            } else if other.0 > n {
                (this, other)
            } else {
                return None;
            };
            (fewer.2 && more.1 >= fewer.1).then_some(NoGain {
                fewer: (fewer.0, fewer.1),
                more: (more.0, more.1),
            })
        });
        out.push(Disagreement {
            n,
            measured_us,
            low_us: p.low_us,
            high_us: p.high_us,
            no_gain,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceArgs, split_runs, summarize};

    fn event(name: &str, ts: u64, dur: u64, capacity: usize) -> TraceEvent {
        TraceEvent {
            name: name.into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts,
            dur,
            pid: 1,
            tid: ts,
            args: TraceArgs {
                test: format!("t{ts}"),
                capacity,
                ..Default::default()
            },
        }
    }

    /// Two 100 ms holds at N = 1 (the second waited), then the same at N = 2 side by side.
    fn runs() -> Vec<TraceEvent> {
        vec![
            event("wait", 0, 0, 1),
            event("hold", 0, 100_000, 1),
            event("wait", 1, 99_999, 1),
            event("hold", 100_000, 100_000, 1),
            event("hold", 1_000_000, 100_000, 2),
            event("hold", 1_000_001, 100_000, 2),
        ]
    }

    #[test]
    fn runs_within_the_range_agree_and_runs_outside_it_do_not() {
        let events = runs();
        let split = split_runs(&events);
        assert_eq!(split.len(), 2);
        let mut s = summarize(&split[1]).unwrap();
        let one = s.predicted.iter().position(|p| p.n == 1).unwrap();
        // The model's own estimate: both runs as measured.
        s.predicted[one].low_us = 200_000;
        s.predicted[one].high_us = 200_000;
        assert_eq!(check_estimates(&split, &s), []);
        // Within the tolerance of the range's ends: still in agreement.
        s.predicted[one].low_us = 205_000;
        s.predicted[one].high_us = 209_000;
        assert_eq!(check_estimates(&split, &s), []);
        // Well outside it, either way.
        for (low, high) in [(300_000, 320_000), (100_000, 150_000)] {
            s.predicted[one].low_us = low;
            s.predicted[one].high_us = high;
            let found = check_estimates(&split, &s);
            assert_eq!(found.len(), 1, "{found:?}");
            assert_eq!(
                (
                    found[0].n,
                    found[0].measured_us,
                    found[0].low_us,
                    found[0].high_us
                ),
                (1, 200_000, low, high)
            );
            // N = 2 was faster: no pair to show.
            assert_eq!(found[0].no_gain, None);
        }
    }

    #[test]
    fn a_run_with_more_permits_that_was_no_faster_is_named() {
        let mut events = runs();
        // The N = 2 run's second hold starts only after the first: 200 ms, as at N = 1.
        events[5].ts = 1_100_000;
        let split = split_runs(&events);
        let mut s = summarize(&split[1]).unwrap();
        let i = s.predicted.iter().position(|p| p.n == 2).unwrap();
        s.predicted[i].low_us = 100_000;
        s.predicted[i].high_us = 110_000;
        let found = check_estimates(&split, &s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].n, 2);
        assert_eq!(
            found[0].no_gain,
            Some(NoGain {
                fewer: (1, 200_000),
                more: (2, 200_000)
            })
        );
    }
}
