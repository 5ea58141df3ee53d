//! Contention casualties from a trace alone: its hold events carry the attempt (under nextest
//! retries) and whether the test had failed when it returned the permit, which is what the run
//! records say too. A trace file travels (a CI artifact); the slot directory's records stay on
//! their host.

use super::read::RunRecords;
use super::record::{GrantRecord, Outcome, ReleaseRecord, RunRecord};
use super::summary::{Casualty, casualties_of};
use crate::trace::TraceEvent;

/// The tests of `events` that failed while other tests held permits and passed alone on a
/// later attempt (see [`summarize`](super::summarize)). Only traces of runs with retries can
/// show any: without an attempt, every hold is the test's first.
///
/// ```
/// use gpu_test_permit::__private::runs::casualties_in_trace;
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent};
///
/// let hold = |test: &str, pid, ts, dur, attempt, failed, exclusive| TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid, tid: 1,
///     args: TraceArgs {
///         test: test.into(), capacity: 2, gpus: 1, units: if exclusive { 2 } else { 1 },
///         exclusive, attempt: Some(attempt), failed, ..Default::default()
///     },
/// };
/// let events = [
///     hold("draws", 1, 0, 100, 1, false, false),
///     hold("uploads", 2, 10, 20, 1, true, false), // failed beside `draws`
///     hold("uploads", 3, 200, 20, 2, false, true), // passed alone
/// ];
/// let c = casualties_in_trace(&events);
/// assert_eq!(c.len(), 1);
/// assert_eq!((c[0].key.test.as_str(), c[0].n()), ("uploads", 2));
/// assert_eq!(c[0].beside[0].test, "draws");
/// ```
#[cfg(any(test, feature = "__cli"))]
pub fn casualties_in_trace(events: &[TraceEvent]) -> Vec<Casualty> {
    let mut records = Vec::new();
    for (i, e) in events.iter().filter(|e| e.name == "hold").enumerate() {
        let a = &e.args;
        let gpus = a.gpus.max(1);
        let hold = i as u64 + 1;
        records.push(RunRecord::Grant(GrantRecord {
            run: String::new(),
            unix_us: e.ts,
            pid: e.pid,
            hold,
            binary: String::new(),
            test: a.test.clone(),
            attempt: a.attempt.unwrap_or(1),
            total_attempts: a.attempt.unwrap_or(1),
            units: a.held_units(),
            exclusive: a.exclusive,
            per_gpu: a.capacity / gpus,
            gpus,
            alone: false,
            waited_us: 0,
            learned: a.learned,
        }));
        records.push(RunRecord::Release(ReleaseRecord {
            run: String::new(),
            unix_us: e.ts.saturating_add(e.dur),
            pid: e.pid,
            hold,
            outcome: if a.failed {
                Outcome::Panicked
            } else {
                Outcome::Passed
            },
            memory_used: a.memory_used,
        }));
    }
    casualties_of(&RunRecords {
        records,
        ..RunRecords::default()
    })
}
