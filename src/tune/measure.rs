//! What one run's records measure: how busy the GPU was, how much work it did in that time,
//! and how long tests waited for permits.

use crate::order::SortedMap;

use crate::runs::{ChoiceRecord, RunRecord, RunRecords};

/// A wait shorter than this is no wait: taking a free permit across processes costs
/// microseconds.
const WAIT_FLOOR_US: u64 = 1_000;

/// One test's holds in a run: how many, and their time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TestHolds {
    /// Its test binary and name, as nextest's JUnit report names them.
    pub(crate) binary: String,
    pub(crate) name: String,
    pub(crate) count: u64,
    pub(crate) hold_us: u64,
    /// The most memory its fixture measured, bytes.
    pub(crate) memory_used: Option<u64>,
}

/// What a run's records measure (see the [module docs](super)).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RunMeasure {
    /// When its first permit was asked for, milliseconds since the Unix epoch.
    pub(crate) start_ms: u64,
    /// The layout most of its permits were granted under.
    pub(crate) per_gpu: usize,
    pub(crate) gpus: usize,
    /// Permits returned (the holds measured).
    pub(crate) holds: usize,
    /// From the first request to the last release.
    pub(crate) span_us: u64,
    /// Time at least one permit was held.
    pub(crate) busy_us: u64,
    /// Units times the time they were held.
    pub(crate) unit_us: u64,
    /// Time at least one request waited (for 1 ms or more).
    pub(crate) queued_us: u64,
    /// The most units held at once.
    pub(crate) peak: usize,
    /// Permits never returned: their process died holding them.
    pub(crate) unreturned: usize,
    /// Permits returned by a failing test.
    pub(crate) failed: usize,
    /// Tests that failed beside others and passed alone.
    pub(crate) casualties: usize,
    /// Holds by test (binary and name), each test once, in the order of their keys.
    pub(crate) tests: Vec<(String, TestHolds)>,
    /// The choice `auto` recorded for the run.
    pub(crate) choice: Option<ChoiceRecord>,
}

/// Measures `run`: `None` when it granted no permit.
pub(crate) fn measure(run: &RunRecords) -> Option<RunMeasure> {
    let mut releases: Vec<((u32, u64), &crate::runs::ReleaseRecord)> = Vec::new();
    let mut choice = None;
    for r in &run.records {
        match r {
            RunRecord::Release(rel) => releases.push(((rel.pid, rel.hold), rel)),
            RunRecord::Choice(c) => choice = Some(c.clone()),
            _ => {}
        }
    }
    // A hold released twice counts its first release.
    let releases = SortedMap::from_pairs(releases, |_, _| {});
    let mut m = RunMeasure {
        choice,
        ..RunMeasure::default()
    };
    // How many grants each layout had (few layouts: a list).
    let mut layouts: Vec<((usize, usize), usize)> = Vec::new();
    // (time, +units / -units) for holds, (time, +1 / -1) for waits.
    let mut held: Vec<(u64, i64)> = Vec::new();
    let mut waits: Vec<(u64, i64)> = Vec::new();
    // Each returned hold's test, and the hold (summed by test below).
    let mut tests: Vec<(String, TestHolds)> = Vec::new();
    let mut first = u64::MAX;
    let mut last = 0u64;
    for r in &run.records {
        let RunRecord::Grant(g) = r else { continue };
        count_layout(&mut layouts, (g.per_gpu, g.gpus));
        let asked = g.unix_us.saturating_sub(g.waited_us);
        first = first.min(asked);
        if g.waited_us >= WAIT_FLOOR_US {
            waits.push((asked, 1));
            waits.push((g.unix_us, -1));
        }
        let Some(rel) = releases.get(&(g.pid, g.hold)) else {
            m.unreturned += 1;
            continue;
        };
        let end = rel.unix_us.max(g.unix_us);
        last = last.max(end);
        // No pool has more units than this; a record that says otherwise is clamped.
        let units = g
            .units_taken()
            .clamp(1, crate::config::MAX_CONCURRENCY * 1024);
        held.push((g.unix_us, units as i64));
        held.push((end, -(units as i64)));
        m.holds += 1;
        m.unit_us = m
            .unit_us
            .saturating_add((end - g.unix_us).saturating_mul(units as u64));
        if rel.outcome.failed() {
            m.failed += 1;
        }
        tests.push((
            crate::nextest::test_key(&g.binary, &g.test),
            TestHolds {
                binary: g.binary.clone(),
                name: g.test.clone(),
                count: 1,
                hold_us: end - g.unix_us,
                memory_used: rel.memory_used,
            },
        ));
    }
    if first == u64::MAX {
        return None;
    }
    m.tests = SortedMap::from_pairs(tests, add_holds).into_vec();
    // The layout of the most grants; of layouts as common, the largest.
    let mut most: Option<(usize, (usize, usize))> = None;
    for &(layout, count) in &layouts {
        match most {
            Some(known) if known >= (count, layout) => {}
            _ => most = Some((count, layout)),
        }
    }
    let (_, (per_gpu, gpus)) = most?;
    m.per_gpu = per_gpu;
    m.gpus = gpus;
    m.start_ms = first / 1000;
    m.span_us = last.saturating_sub(first);
    let (busy, peak) = sweep(&mut held);
    m.busy_us = busy;
    m.peak = peak;
    m.queued_us = sweep(&mut waits).0;
    m.casualties = crate::runs::casualties_of(run).len();
    Some(m)
}

/// Adds a test's `later` holds to its first (whose binary and name stay).
fn add_holds(t: &mut TestHolds, later: TestHolds) {
    t.count += later.count;
    t.hold_us = t.hold_us.saturating_add(later.hold_us);
    if let Some(bytes) = later.memory_used {
        t.memory_used = Some(match t.memory_used {
            Some(b) => b.max(bytes),
            None => bytes,
        });
    }
}

/// Counts one grant of `layout` in `layouts`.
fn count_layout(layouts: &mut Vec<((usize, usize), usize)>, layout: (usize, usize)) {
    for (known, count) in layouts.iter_mut() {
        if *known == layout {
            *count += 1;
            return;
        }
    }
    layouts.push((layout, 1));
}

/// The time the running sum of `events` is above zero, and its largest value.
fn sweep(events: &mut [(u64, i64)]) -> (u64, usize) {
    // Ends before starts at the same moment: a permit handed on is not two at once.
    crate::order::sort(events);
    let (mut level, mut peak, mut covered, mut since) = (0i64, 0i64, 0u64, 0u64);
    for &(at, step) in events.iter() {
        if level > 0 {
            covered += at - since;
        }
        level += step;
        peak = peak.max(level);
        since = at;
    }
    (covered, peak.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_records_measure_without_overflow() {
        let line = |s: &str| <RunRecord as crate::json::Record>::from_text(s).unwrap();
        let run = RunRecords {
            records: vec![
                line(
                    r#"{"kind":"grant","run":"r","unix_us":18446744073709551615,"pid":1,"hold":1,"binary":"b","test":"t","attempt":1,"total_attempts":1,"units":18446744073709551615,"exclusive":true,"per_gpu":18446744073709551615,"gpus":18446744073709551615,"waited_us":18446744073709551615}"#,
                ),
                line(
                    r#"{"kind":"release","run":"r","unix_us":0,"pid":1,"hold":1,"outcome":"passed"}"#,
                ),
                line(
                    r#"{"kind":"grant","run":"r","unix_us":5,"pid":2,"hold":1,"binary":"b","test":"u","attempt":1,"total_attempts":1,"units":3,"exclusive":false,"per_gpu":2,"gpus":1}"#,
                ),
            ],
            ..RunRecords::default()
        };
        let m = measure(&run).unwrap();
        assert_eq!((m.holds, m.unreturned), (1, 1));
    }

    #[test]
    fn the_sweep_counts_covered_time_once_and_handovers_as_one() {
        let mut e = vec![(0, 1), (10, -1), (5, 1), (20, -1), (20, 1), (30, -1)];
        assert_eq!(sweep(&mut e), (30, 2));
        let mut gap = vec![(0, 1), (10, -1), (15, 2), (25, -2)];
        assert_eq!(sweep(&mut gap), (20, 2));
        assert_eq!(sweep(&mut []), (0, 0));
    }
}
