//! What a run's records say: the tests that skipped, the contention casualties, the permits
//! never returned, the peak.

use crate::order::SortedMap;

use super::read::RunRecords;
use super::record::{GrantRecord, Outcome, RunRecord};

/// A test, as nextest's JUnit report names it: `classname` (the binary id) and `name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TestKey {
    /// The test binary (`NEXTEST_BINARY_ID`).
    pub binary: String,
    /// The test's name.
    pub test: String,
}

impl std::fmt::Display for TestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.binary, self.test)
    }
}

/// A test whose last attempt skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct SkippedTest {
    /// The test.
    pub key: TestKey,
    /// The backend that had no device.
    pub backend: String,
    /// Why.
    pub reason: String,
    /// The attempt that skipped.
    pub attempt: u32,
}

#[cfg(any(test, feature = "__cli"))]
impl SkippedTest {
    /// The skip as one line: `backend=<backend>: <reason>`.
    pub fn message(&self) -> String {
        format!("backend={}: {}", self.backend, self.reason)
    }
}

/// A test that failed while other tests held permits, and passed when retried alone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Casualty {
    /// The test.
    pub key: TestKey,
    /// The attempt that failed beside others (the last such).
    pub failed_attempt: u32,
    /// The attempt that passed alone.
    pub passed_attempt: u32,
    /// Permits per GPU when it failed.
    pub per_gpu: usize,
    /// GPUs the permits spanned when it failed.
    pub gpus: usize,
    /// The most units other tests held at once while it held its permit.
    pub units_beside: usize,
    /// The tests that held permits while it did, in the order they first did.
    pub beside: Vec<TestKey>,
}

impl Casualty {
    /// The N it failed at: permits per GPU times GPUs.
    #[cfg(any(test, feature = "__cli"))]
    pub fn n(&self) -> usize {
        self.per_gpu.saturating_mul(self.gpus)
    }
}

/// A grant record with no release record: a permit granted and never returned, its process
/// died holding it (a crash, an abort, a hold deadline, a kill), or still holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct UnreleasedGrant {
    /// The test.
    pub key: TestKey,
    /// Its attempt.
    pub attempt: u32,
    /// The process.
    pub pid: u32,
    /// When it was granted, microseconds since the Unix epoch.
    pub granted_us: u64,
}

/// A test that held learned units (`GPU_TEST_PERMIT_WEIGHTS=learned`): it declared nothing,
/// and its units came from the most memory it was measured to use in earlier runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct LearnedWeight {
    /// The test.
    pub key: TestKey,
    /// The units it held (the most, where it took several permits).
    pub units: usize,
    /// The measured peak they were learned from, bytes.
    pub learned: u64,
}

/// A test whose process reached a GPU driver without a permit: it escaped the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct Escaped {
    /// The test.
    pub key: TestKey,
    /// The drivers it loaded while holding no permit, as the records name them (by path,
    /// or by name where the loader was asked for one).
    pub drivers: Vec<String>,
    /// Whether it held a permit at all (then it loaded one before its first, or between two).
    pub held: bool,
    /// How it was seen: `watched` or `mapped` (see [`DriversRecord`](super::DriversRecord)).
    pub seen: String,
    /// Whether a process the test started, not the test's own, loaded one of them.
    pub started_process: bool,
}

/// What a run's records say ([`summarize`]).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct RunSummary {
    /// The run id.
    pub run_id: String,
    /// Tests that took a permit or skipped.
    pub gpu_tests: usize,
    /// Tests that took a permit in some attempt.
    pub tests_with_permits: usize,
    /// Permits granted.
    pub permits: usize,
    /// Tests whose last attempt skipped, in the order of their skips.
    pub skipped: Vec<SkippedTest>,
    /// Tests that failed beside others and passed alone.
    pub casualties: Vec<Casualty>,
    /// Tests that were retried (nextest ran more than one attempt), with their last attempt.
    pub retried: Vec<(TestKey, u32)>,
    /// Permits never returned.
    pub unreleased: Vec<UnreleasedGrant>,
    /// The most units held at once.
    pub peak_units: usize,
    /// The layouts in force, `(per_gpu, gpus)`, as the grants recorded them.
    pub layouts: Vec<(usize, usize)>,
    /// The first and last record's time, microseconds since the Unix epoch.
    pub span_us: Option<(u64, u64)>,
    /// Lines of the file that were not records of this run.
    pub unreadable: usize,
    /// The N `REALIZAR_GPU_TEST_CONCURRENCY=auto` chose for the run, and why (the last
    /// choice recorded).
    pub choice: Option<super::record::ChoiceRecord>,
    /// Tests that held learned units, most units first.
    pub learned: Vec<LearnedWeight>,
    /// Tests whose process loaded a GPU driver while it held no permit, by name.
    pub escaped: Vec<Escaped>,
    /// Tests whose process was watched loading a GPU driver (with a permit or without), by
    /// name, with the drivers it loaded: the run's GPU tests as the drivers tell them.
    pub loaded_drivers: Vec<(TestKey, Vec<String>)>,
    /// Tests whose program was linked to a GPU driver at build time, by name, with those
    /// drivers: not escapes (see [`drivers`](crate::__private::drivers)).
    pub linked_drivers: Vec<(TestKey, Vec<String>)>,
    /// Tests whose processes were watched (`gpu-test-permit watch`): where there are none,
    /// only drivers still mapped when a test looked at itself were seen.
    pub watched_tests: usize,
    /// Watched test processes that crashed or hung after or around their tests (teardown
    /// faults, hangs at exit, crashes while tests ran), in the records' order.
    pub verdicts: Vec<super::record::VerdictRecord>,
}

/// One permit's life, as the records tell it.
#[derive(Clone, Debug)]
struct Hold<'a> {
    grant: &'a GrantRecord,
    /// When it was returned; for a permit never returned, the test's next attempt or the
    /// run's last record, whichever comes first.
    end_us: u64,
    outcome: Option<Outcome>,
}

/// Each test's attempts and each permit's life, as the records tell them: what both
/// [`summarize`] and the casualties a test process looks for ([`casualties_of`]) read.
struct Lives<'a> {
    /// Each test's last attempt.
    last_attempt: SortedMap<TestKey, u32>,
    /// Every grant, in the records' order.
    holds: Vec<Hold<'a>>,
    /// The grants never returned, in the records' order.
    #[cfg(any(test, feature = "__cli"))]
    unreleased: Vec<UnreleasedGrant>,
}

fn lives(records: &[RunRecord]) -> Lives<'_> {
    let mut last_us = 0;
    for r in records {
        last_us = last_us.max(r.unix_us());
    }
    // Releases by (pid, hold); a pid reused later in the run releases after its own grant.
    // Each test's attempts: the last one, and when each began (its first record). Each map is
    // made from its pairs at once (one sort), not a key at a time.
    let mut releases = Vec::new();
    let mut attempts = Vec::new();
    let mut starts = Vec::new();
    for r in records {
        let (key, attempt, at) = match r {
            RunRecord::Release(rel) => {
                releases.push(((rel.pid, rel.hold), vec![(rel.unix_us, rel.outcome)]));
                continue;
            }
            RunRecord::Grant(g) => (key_of(&g.binary, &g.test), g.attempt, g.unix_us),
            RunRecord::Skip(k) => (key_of(&k.binary, &k.test), k.attempt, k.unix_us),
            RunRecord::Drivers(_) | RunRecord::Choice(_) | RunRecord::Verdict(_) => continue,
        };
        attempts.push((key.clone(), attempt));
        starts.push(((key, attempt), at));
    }
    let releases: SortedMap<(u32, u64), Vec<(u64, Outcome)>> =
        SortedMap::from_pairs(releases, |all, mut more| all.append(&mut more));
    let last_attempt: SortedMap<TestKey, u32> =
        SortedMap::from_pairs(attempts, |last, a| *last = (*last).max(a));
    let attempt_start: SortedMap<(TestKey, u32), u64> =
        SortedMap::from_pairs(starts, |first, at| *first = (*first).min(at));
    let mut holds: Vec<Hold<'_>> = Vec::new();
    #[cfg(any(test, feature = "__cli"))]
    let mut unreleased = Vec::new();
    for r in records {
        let RunRecord::Grant(g) = r else { continue };
        // The first release at or after the grant (of releases as early, the first listed).
        let mut release: Option<(u64, Outcome)> = None;
        if let Some(v) = releases.get(&(g.pid, g.hold)) {
            for &(at, outcome) in v {
                let earlier = match release {
                    Some((first, _)) => at < first,
                    None => true,
                };
                if at >= g.unix_us && earlier {
                    release = Some((at, outcome));
                }
            }
        }
        let (end_us, outcome) = match release {
            Some((at, outcome)) => (at, Some(outcome)),
            None => {
                let key = key_of(&g.binary, &g.test);
                let next = match attempt_start.get(&(key.clone(), g.attempt + 1)) {
                    Some(&start) => start,
                    None => last_us,
                };
                #[cfg(any(test, feature = "__cli"))]
                unreleased.push(UnreleasedGrant {
                    key,
                    attempt: g.attempt,
                    pid: g.pid,
                    granted_us: g.unix_us,
                });
                (next.max(g.unix_us), None)
            }
        };
        holds.push(Hold {
            grant: g,
            end_us,
            outcome,
        });
    }
    Lives {
        last_attempt,
        holds,
        #[cfg(any(test, feature = "__cli"))]
        unreleased,
    }
}

/// The casualties of a run's records (see [`RunSummary::casualties`]), without the rest of
/// its summary: what a test process that passed on a retry looks for.
pub(crate) fn casualties_of(run: &RunRecords) -> Vec<Casualty> {
    let l = lives(&run.records);
    casualties(&l.holds, &l.last_attempt)
}

/// Summarizes a run's records.
#[cfg(any(test, feature = "__cli"))]
pub fn summarize(run: &RunRecords) -> RunSummary {
    let mut s = RunSummary {
        run_id: run.run_id.clone(),
        unreadable: run.unreadable,
        ..RunSummary::default()
    };
    let records = &run.records;
    let first = records.iter().map(RunRecord::unix_us).min();
    let last = records.iter().map(RunRecord::unix_us).max();
    s.span_us = first.zip(last);
    let Lives {
        last_attempt,
        holds,
        unreleased,
    } = lives(records);
    // Each driver once, in the order first seen.
    let add = |to: &mut Vec<String>, from: &[String]| {
        for lib in from {
            if !to.contains(lib) {
                to.push(lib.clone());
            }
        }
    };
    let once = |from: &[String]| {
        let mut out = Vec::new();
        add(&mut out, from);
        out
    };
    // Per test, made from their pairs at once (one sort), each folded in the records' order.
    let mut watched = Vec::new();
    let mut loaded = Vec::new();
    let mut linked = Vec::new();
    let mut escaped = Vec::new();
    // A test's skips: where its first came in the records, and its last.
    let mut skips = Vec::new();
    for (at, r) in records.iter().enumerate() {
        match r {
            RunRecord::Drivers(d) => {
                let key = key_of(&d.binary, &d.test);
                if d.seen == "watched" {
                    watched.push(key.clone());
                    if !d.drivers.is_empty() {
                        loaded.push((key.clone(), once(&d.drivers)));
                    }
                }
                if !d.linked.is_empty() {
                    linked.push((key.clone(), once(&d.linked)));
                }
                if d.escaped() {
                    let e = Escaped {
                        key: key.clone(),
                        drivers: once(&d.unpermitted),
                        held: d.held,
                        seen: d.seen.clone(),
                        started_process: d.started_process,
                    };
                    escaped.push((key, e));
                }
            }
            RunRecord::Choice(c) => s.choice = Some(c.clone()),
            RunRecord::Skip(k) => {
                let key = key_of(&k.binary, &k.test);
                let skip = SkippedTest {
                    key: key.clone(),
                    backend: k.backend.clone(),
                    reason: k.reason.clone(),
                    attempt: k.attempt,
                };
                skips.push((key, (at, skip)));
            }
            RunRecord::Verdict(v) => s.verdicts.push(v.clone()),
            RunRecord::Grant(_) | RunRecord::Release(_) => {}
        }
    }
    let merge = |all: &mut Vec<String>, more: Vec<String>| add(all, &more);
    let escaped = SortedMap::from_pairs(escaped, |e: &mut Escaped, more: Escaped| {
        e.started_process |= more.started_process;
        add(&mut e.drivers, &more.drivers);
        if more.seen == "watched" {
            e.seen = more.seen;
        }
    });
    s.escaped = escaped.into_values();
    s.loaded_drivers = SortedMap::from_pairs(loaded, merge).into_vec();
    s.linked_drivers = SortedMap::from_pairs(linked, merge).into_vec();
    crate::order::sort_dedup(&mut watched);
    s.watched_tests = watched.len();
    s.gpu_tests = last_attempt.len();
    s.retried = last_attempt
        .iter()
        .filter(|(_, a)| **a > 1)
        .map(|(k, a)| (k.clone(), *a))
        .collect();
    // A test's last skip counts where it was the test's last attempt, in the order the tests
    // first skipped.
    let skips = SortedMap::from_pairs(skips, |(_, last), (_, later)| *last = later);
    let mut skipped: Vec<(usize, SkippedTest)> = skips
        .into_values()
        .into_iter()
        .filter(|(_, skip)| last_attempt.get(&skip.key) == Some(&skip.attempt))
        .collect();
    crate::order::sort_by_key(&mut skipped, |(first, _)| *first);
    s.skipped = skipped.into_iter().map(|(_, skip)| skip).collect();
    s.unreleased = unreleased;

    let mut layouts = Vec::new();
    let mut with_permits = Vec::new();
    for h in &holds {
        layouts.push((h.grant.per_gpu, h.grant.gpus));
        with_permits.push(key_of(&h.grant.binary, &h.grant.test));
    }
    // Each test's largest learned permit (the first of the largest).
    let mut learned = Vec::new();
    for g in holds.iter().map(|h| h.grant) {
        let Some(bytes) = g.learned else { continue };
        let key = key_of(&g.binary, &g.test);
        let w = LearnedWeight {
            key: key.clone(),
            units: g.units,
            learned: bytes,
        };
        learned.push((key, w));
    }
    let learned = SortedMap::from_pairs(learned, |w: &mut LearnedWeight, more: LearnedWeight| {
        if more.units > w.units {
            (w.units, w.learned) = (more.units, more.learned);
        }
    });
    s.learned = learned.into_values();
    crate::order::sort_by(&mut s.learned, |a, b| {
        b.units.cmp(&a.units).then_with(|| a.key.cmp(&b.key))
    });
    s.permits = holds.len();
    crate::order::sort_dedup(&mut with_permits);
    s.tests_with_permits = with_permits.len();
    crate::order::sort_dedup(&mut layouts);
    s.layouts = layouts;
    s.peak_units = peak(&holds);
    s.casualties = casualties(&holds, &last_attempt);
    s
}

fn key_of(binary: &str, test: &str) -> TestKey {
    TestKey {
        binary: binary.to_string(),
        test: test.to_string(),
    }
}

/// The most units held at once.
#[cfg(any(test, feature = "__cli"))]
fn peak(holds: &[Hold<'_>]) -> usize {
    most_at_once(
        holds
            .iter()
            .map(|h| (h.grant.unix_us, h.end_us, h.grant.units_taken())),
    )
}

/// Whether two holds overlapped in time (touching ends do not).
fn overlap(a: &Hold<'_>, b: &Hold<'_>) -> bool {
    a.grant.unix_us < b.end_us && b.grant.unix_us < a.end_us
}

/// The most units `others` held at once while `h` was held.
fn most_beside(h: &Hold<'_>, others: &[&Hold<'_>]) -> usize {
    most_at_once(others.iter().map(|o| {
        (
            o.grant.unix_us.max(h.grant.unix_us),
            o.end_us.min(h.end_us),
            o.grant.units_taken(),
        )
    }))
}

/// The most units held at once by spans of `(from, to, units)`; a span that ends at the
/// moment another begins is not beside it.
fn most_at_once(spans: impl Iterator<Item = (u64, u64, usize)>) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for (from, to, units) in spans {
        edges.push((from, units as i64));
        edges.push((to, -(units as i64)));
    }
    // Releases before grants at the same moment, as in a trace.
    crate::trace::peak_of(&mut edges)
}

fn casualties(holds: &[Hold<'_>], last_attempt: &SortedMap<TestKey, u32>) -> Vec<Casualty> {
    let mut pairs = Vec::with_capacity(holds.len());
    for h in holds {
        pairs.push((key_of(&h.grant.binary, &h.grant.test), vec![h]));
    }
    let by_test: SortedMap<TestKey, Vec<&Hold<'_>>> =
        SortedMap::from_pairs(pairs, |all, mut more| all.append(&mut more));
    let mut out = Vec::new();
    for (key, mine) in by_test.iter() {
        let Some(&last) = last_attempt.get(key) else {
            continue;
        };
        if last < 2 {
            continue;
        }
        let others = |h: &Hold<'_>| -> Vec<&Hold<'_>> {
            let mut beside = Vec::new();
            for o in holds {
                if (o.grant.pid, o.grant.hold) != (h.grant.pid, h.grant.hold)
                    && (o.grant.binary != key.binary || o.grant.test != key.test)
                    && overlap(h, o)
                {
                    beside.push(o);
                }
            }
            beside
        };
        // The last attempt passed, and alone: every permit of it returned without a failure,
        // none beside another test's.
        let mut passed_alone = false;
        for h in mine {
            if h.grant.attempt != last {
                continue;
            }
            let passed = matches!(h.outcome, Some(o) if !o.failed());
            if !passed || !others(h).is_empty() {
                passed_alone = false;
                break;
            }
            passed_alone = true;
        }
        if !passed_alone {
            continue;
        }
        // The latest earlier attempt (each failed, or nextest would not have retried) that
        // held its permit beside others (of attempts as late, the last listed).
        let mut failed: Option<(&Hold<'_>, Vec<&Hold<'_>>)> = None;
        for h in mine {
            if h.grant.attempt >= last {
                continue;
            }
            let beside = others(h);
            if beside.is_empty() {
                continue;
            }
            let latest = match &failed {
                Some((f, _)) => {
                    (h.grant.attempt, h.grant.unix_us) >= (f.grant.attempt, f.grant.unix_us)
                }
                None => true,
            };
            if latest {
                failed = Some((*h, beside));
            }
        }
        let Some((h, mut beside)) = failed else {
            continue;
        };
        let mut names: Vec<TestKey> = Vec::new();
        // In the order they were granted (the most held beside it does not depend on it).
        crate::order::sort_by_key(&mut beside, |o| o.grant.unix_us);
        for o in &beside {
            let k = key_of(&o.grant.binary, &o.grant.test);
            if !names.contains(&k) {
                names.push(k);
            }
        }
        out.push(Casualty {
            key: key.clone(),
            failed_attempt: h.grant.attempt,
            passed_attempt: last,
            per_gpu: h.grant.per_gpu,
            gpus: h.grant.gpus,
            units_beside: most_beside(h, &beside),
            beside: names,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::record::{ReleaseRecord, SkipRecord};

    const RUN: &str = "r";

    fn grant(pid: u32, test: &str, attempt: u32, at: u64, exclusive: bool) -> RunRecord {
        RunRecord::Grant(GrantRecord {
            run: RUN.into(),
            unix_us: at,
            pid,
            hold: 1,
            binary: "b".into(),
            test: test.into(),
            attempt,
            total_attempts: 2,
            units: if exclusive { 2 } else { 1 },
            exclusive,
            per_gpu: 2,
            gpus: 1,
            alone: exclusive,
            waited_us: 0,
            learned: None,
        })
    }

    fn release(pid: u32, at: u64, outcome: Outcome) -> RunRecord {
        RunRecord::Release(ReleaseRecord {
            run: RUN.into(),
            unix_us: at,
            pid,
            hold: 1,
            outcome,
            memory_used: None,
        })
    }

    fn skip(pid: u32, test: &str, attempt: u32, at: u64) -> RunRecord {
        RunRecord::Skip(SkipRecord {
            run: RUN.into(),
            unix_us: at,
            pid,
            binary: "b".into(),
            test: test.into(),
            attempt,
            backend: "cuda".into(),
            reason: "not installed".into(),
        })
    }

    fn summary(records: Vec<RunRecord>) -> RunSummary {
        summarize(&RunRecords {
            run_id: RUN.into(),
            records,
            ..RunRecords::default()
        })
    }

    fn casualty_names(s: &RunSummary) -> Vec<&str> {
        s.casualties.iter().map(|c| c.key.test.as_str()).collect()
    }

    #[test]
    fn a_test_that_failed_beside_another_and_passed_alone_is_a_casualty() {
        let s = summary(vec![
            grant(1, "other", 1, 0, false),
            grant(2, "t", 1, 10, false),
            release(2, 20, Outcome::Panicked),
            release(1, 30, Outcome::Passed),
            grant(3, "t", 2, 40, true),
            release(3, 50, Outcome::Passed),
        ]);
        assert_eq!(casualty_names(&s), ["t"]);
        let c = &s.casualties[0];
        assert_eq!(
            (c.failed_attempt, c.passed_attempt, c.n(), c.units_beside),
            (1, 2, 2, 1)
        );
        assert_eq!(c.beside[0].test, "other");
        assert_eq!(s.peak_units, 2);
        assert_eq!(s.retried.len(), 1);
    }

    #[test]
    fn failing_alone_or_failing_last_or_meeting_only_afterwards_is_no_casualty() {
        let cases = [
            // Failed with nobody beside it: an ordinary flaky test.
            vec![
                grant(2, "t", 1, 10, false),
                release(2, 20, Outcome::Panicked),
                grant(1, "other", 1, 20, false),
                release(1, 30, Outcome::Passed),
                grant(3, "t", 2, 40, true),
                release(3, 50, Outcome::Passed),
            ],
            // Failed beside another and failed alone too.
            vec![
                grant(1, "other", 1, 0, false),
                grant(2, "t", 1, 10, false),
                release(2, 20, Outcome::Panicked),
                release(1, 30, Outcome::Passed),
                grant(3, "t", 2, 40, true),
                release(3, 50, Outcome::Panicked),
            ],
            // The retry passed, but beside another (GPU_TEST_PERMIT_RETRY=same).
            vec![
                grant(1, "other", 1, 0, false),
                grant(2, "t", 1, 10, false),
                release(2, 20, Outcome::Panicked),
                grant(3, "t", 2, 25, false),
                release(3, 28, Outcome::Passed),
                release(1, 30, Outcome::Passed),
            ],
            // The retry skipped.
            vec![
                grant(1, "other", 1, 0, false),
                grant(2, "t", 1, 10, false),
                release(2, 20, Outcome::Panicked),
                release(1, 30, Outcome::Passed),
                skip(3, "t", 2, 40),
            ],
        ];
        for (i, records) in cases.into_iter().enumerate() {
            let s = summary(records);
            assert!(s.casualties.is_empty(), "case {i}: {s:#?}");
            assert_eq!(s.retried.len(), 1, "case {i}");
        }
    }

    #[test]
    fn a_process_that_died_holding_its_permit_is_unreleased_and_can_be_a_casualty() {
        // Attempt 1 crashed (no release) while another held a permit; the retry passed alone.
        let s = summary(vec![
            grant(1, "other", 1, 0, false),
            grant(2, "t", 1, 10, false),
            release(1, 30, Outcome::Passed),
            grant(3, "t", 2, 40, true),
            release(3, 50, Outcome::Passed),
        ]);
        assert_eq!(s.unreleased.len(), 1);
        assert_eq!(s.unreleased[0].pid, 2);
        assert_eq!(casualty_names(&s), ["t"]);
        // Its hold ends where the next attempt begins: the peak does not count it beside it.
        assert_eq!(s.peak_units, 2);
    }

    #[test]
    fn a_skip_counts_where_it_was_the_last_attempt_and_a_reused_pid_releases_its_own_grant() {
        let s = summary(vec![
            skip(1, "s", 1, 0),
            grant(2, "t", 1, 10, false),
            release(2, 20, Outcome::Passed),
            // pid 2 again, later in the run.
            grant(2, "u", 1, 30, false),
            release(2, 40, Outcome::Passed),
        ]);
        assert_eq!(s.skipped.len(), 1);
        assert_eq!(s.skipped[0].message(), "backend=cuda: not installed");
        assert!(s.unreleased.is_empty());
        assert_eq!((s.gpu_tests, s.tests_with_permits, s.permits), (3, 2, 2));
        assert_eq!(s.peak_units, 1);
    }
}
