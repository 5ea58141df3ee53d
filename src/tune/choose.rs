//! The choice itself: a pure function of the history, the hang and casualty records, the GPU
//! and the ceiling (see the [module docs](crate::__private::tune#how-n-is-chosen)).

use crate::order::SortedMap;

use super::history::HistoryEntry;
use crate::hangs::HangRecord;
use crate::runs::CasualtyRecord;

/// The N of a run with no history on its GPU: the seed, known safe on the GPU this crate was
/// made for.
pub const SEED: usize = crate::config::DEFAULT_CONCURRENCY;
/// The least gain the model must predict for one step up to be worth a run.
pub const WORTH_A_RUN: f64 = 0.05;
/// Runs within this share of the fastest measured count as fast as it: the smallest such N
/// is chosen.
pub const WITHIN: f64 = 0.05;
/// The share of busy time some test must have waited for a permit for the cap to count as
/// what limits the run.
pub const CAP_LIMITS: f64 = 0.10;
/// Runs per N that are measured (the newest; their median counts).
const RUNS_PER_N: usize = 3;

/// What `auto` chose, and why.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Choice {
    /// Permits per GPU.
    pub per_gpu: usize,
    /// How it was reached.
    pub step: Step,
    /// Why, in one line (without the leading `N = ...`).
    pub why: String,
    /// The most permits per GPU that could have been chosen: the ceiling, or less where an
    /// N hung or had casualties.
    pub limit: usize,
}

/// How a [`Choice`] was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// No run on record with this GPU and driver, nor any other: the seed.
    Seed,
    /// The GPU or driver changed: the last N that ran clean on this host.
    Resume,
    /// One step above the largest N measured.
    Explore,
    /// The smallest N within [`WITHIN`] of the fastest measured.
    Settle,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "N = {} (auto: {})", self.per_gpu, self.why)
    }
}

/// What the choice is made from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The run history, oldest first.
    pub history: &'a [HistoryEntry],
    /// The host's hang records.
    pub hangs: &'a [HangRecord],
    /// The host's contention casualties.
    pub casualties: &'a [CasualtyRecord],
    /// The GPUs and driver now ("" where unknown).
    pub gpu: &'a str,
    /// GPUs the permits span.
    pub gpus: usize,
    /// The most permits per GPU the user allows.
    pub ceiling: usize,
    /// Now, milliseconds since the Unix epoch.
    pub now_ms: u64,
}

/// Median effective concurrency and the rest, of the newest runs at one N.
#[derive(Clone, Copy, Debug)]
struct AtN {
    runs: usize,
    effective: f64,
    concurrency: f64,
    waited: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::order::sort_by(&mut v, f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Chooses the N of a run (see the [module docs](crate::__private::tune#how-n-is-chosen)).
pub fn choose(inputs: &Inputs<'_>) -> Choice {
    let Inputs {
        history,
        hangs,
        casualties,
        gpu,
        gpus,
        ceiling,
        now_ms,
    } = *inputs;
    let ceiling = ceiling.max(1);
    let applies = |run: Option<&str>| applies(history, gpu, run);
    let trusted = |unix_ms: u64| crate::hangs::trusted_at(unix_ms, now_ms);
    let mut limit = ceiling;
    let mut limit_why: Option<String> = None;
    let mut rule_out = |n: usize, why: String| {
        if n <= limit {
            limit = n.saturating_sub(1).max(1);
            limit_why = Some(why);
        }
    };
    let driver = if gpu.is_empty() {
        String::new()
    } else {
        format!(" with {gpu}")
    };
    for h in hangs {
        if !(trusted(h.unix_ms) && applies(h.run.as_deref())) {
            continue;
        }
        rule_out(
            per_gpu(h.per_gpu, h.gpus, gpus),
            format!(
                "N = {} hung on {}{driver}",
                per_gpu(h.per_gpu, h.gpus, gpus),
                h.date()
            ),
        );
    }
    for c in casualties {
        if !(trusted(c.unix_ms) && applies(Some(&c.run))) {
            continue;
        }
        let n = per_gpu(c.per_gpu, c.gpus, gpus);
        rule_out(
            n,
            format!(
                "{} failed beside others at N = {n} on {}{driver}",
                c.test,
                c.date()
            ),
        );
    }
    let mut mine: Vec<&HistoryEntry> = Vec::new();
    for e in history {
        if e.gpu == gpu && e.gpus == gpus && trusted(e.unix_ms) {
            mine.push(e);
        }
    }
    // An N whose processes died holding permits twice is ruled out as a hang is.
    let mut lost: SortedMap<usize, usize> = SortedMap::new();
    for e in &mine {
        if e.unreturned > 0 {
            *lost.get_or_insert_with(e.per_gpu, || 0) += 1;
        }
    }
    for (&n, &times) in lost.iter() {
        if times >= 2 {
            rule_out(
                n,
                format!("tests died holding permits at N = {n} in {times} runs"),
            );
        }
    }
    // The newest run lost permits: step below it at once.
    if let Some(last) = mine.last()
        && last.unreturned > 0
    {
        rule_out(
            last.per_gpu,
            format!(
                "the last run, at N = {}, lost {} permit(s) to tests that died holding them",
                last.per_gpu, last.unreturned
            ),
        );
    }
    let limited_by = || match &limit_why {
        Some(why) => format!("; {why}; ceiling {ceiling}"),
        None => format!("; ceiling {ceiling}"),
    };

    let mut measured_runs: Vec<&HistoryEntry> = Vec::new();
    for e in &mine {
        if e.measurable() && 1 <= e.per_gpu && e.per_gpu <= limit {
            measured_runs.push(e);
        }
    }
    // The Ns measured, each once.
    let mut ns: Vec<usize> = Vec::new();
    for e in &measured_runs {
        ns.push(e.per_gpu);
    }
    crate::order::sort_dedup(&mut ns);
    let mut stats: SortedMap<usize, AtN> = SortedMap::new();
    for &n in &ns {
        // The runs at this N, oldest first.
        let mut runs: Vec<&HistoryEntry> = Vec::new();
        for e in &measured_runs {
            if e.per_gpu == n {
                runs.push(e);
            }
        }
        // The newest runs at this N (in whichever order: only their medians count).
        let newest = &runs[runs.len().saturating_sub(RUNS_PER_N)..];
        let (mut effective, mut concurrency, mut waited) = (Vec::new(), Vec::new(), Vec::new());
        for e in newest {
            effective.push(e.effective());
            concurrency.push(e.concurrency());
            waited.push(e.waited());
        }
        let at = AtN {
            runs: newest.len(),
            effective: median(effective),
            concurrency: median(concurrency),
            waited: median(waited),
        };
        stats.insert(n, at);
    }

    if stats.is_empty() {
        // Nothing measured on this GPU: the last N that ran clean on this host with another
        // GPU or driver, else the seed.
        let mut elsewhere = None;
        for e in history.iter().rev() {
            if e.gpu != gpu
                && e.gpus == gpus
                && e.per_gpu >= 1
                && e.measurable()
                && trusted(e.unix_ms)
            {
                elsewhere = Some(e);
                break;
            }
        }
        return match elsewhere {
            Some(e) => {
                let n = e.per_gpu.min(limit);
                let was = if e.gpu.is_empty() {
                    "runs with a fixed N".to_string()
                } else {
                    e.gpu.clone()
                };
                Choice {
                    per_gpu: n,
                    step: Step::Resume,
                    why: format!(
                        "no run on record{driver}; starting from N = {}, the last N that ran \
                         clean on this host ({was}, {}){}",
                        e.per_gpu,
                        e.date(),
                        limited_by()
                    ),
                    limit,
                }
            }
            None => Choice {
                per_gpu: SEED.min(limit),
                step: Step::Seed,
                why: format!(
                    "no run on record{driver}; starting at {SEED}{}",
                    limited_by()
                ),
                limit,
            },
        };
    }

    let mut best = 0.0;
    for s in stats.values() {
        best = f64::max(best, s.effective);
    }
    let mut settle = SEED;
    for (&n, s) in stats.iter() {
        if s.effective >= (1.0 - WITHIN) * best {
            settle = n;
            break;
        }
    }
    let (&top, top_at) = stats.iter().next_back().expect("not empty");
    // The largest N first.
    let mut measured = String::new();
    for (n, s) in stats.iter().rev() {
        if measured.is_empty() {
            measured.push_str(&format!(
                "{} run(s) at {n} did {:.2} tests' work at once (waited {:.0}% of the time)",
                s.runs,
                s.effective,
                s.waited * 100.0
            ));
        } else {
            measured.push_str(&format!(
                ", {} at {n} did {:.2} ({:.0}%)",
                s.runs,
                s.effective,
                s.waited * 100.0
            ));
        }
    }

    // One step up: only from the frontier, while tests wait for permits, the throughput kept
    // growing and the model predicts a gain worth a run.
    let next = top + 1;
    let frontier = top_at.effective >= (1.0 - WITHIN) * best;
    let growing = match stats.get(&(top - 1)) {
        Some(below) => top_at.effective >= (1.0 + WITHIN) * below.effective,
        None => true,
    };
    let predicted = predict(&stats, top, next);
    let gain = predicted / top_at.effective.max(f64::MIN_POSITIVE) - 1.0;
    if next <= limit && frontier && growing && top_at.waited >= CAP_LIMITS && gain >= WORTH_A_RUN {
        return Choice {
            per_gpu: next,
            step: Step::Explore,
            why: format!(
                "exploring, N = {next} predicted {:+.0}%: {measured}{}",
                gain * 100.0,
                limited_by()
            ),
            limit,
        };
    }
    let reason = if next > limit {
        format!("N = {next} not allowed")
    } else if !frontier {
        format!("N = {top} was no faster")
    } else if !growing {
        format!("the throughput stopped growing at N = {top}")
    } else if top_at.waited < CAP_LIMITS {
        format!("tests seldom waited for permits at N = {top}")
    } else {
        format!(
            "N = {next} predicted {:+.0}%, not worth a run",
            gain * 100.0
        )
    };
    Choice {
        per_gpu: settle,
        step: Step::Settle,
        why: format!(
            "settled on the smallest N within {:.0}% of the fastest, {reason}: {measured}{}",
            WITHIN * 100.0,
            limited_by()
        ),
        limit,
    }
}

/// The effective concurrency the model predicts at `next`: hold times grow linearly with the
/// units held at once, `g(c) = 1 + a (c - 1)`, `a` fitted (least squares through `g(1) = 1`)
/// to the N measured; the units held at once grow in proportion to N.
fn predict(stats: &SortedMap<usize, AtN>, top: usize, next: usize) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for s in stats.values() {
        let x = s.concurrency - 1.0;
        let g = s.concurrency / s.effective.max(f64::MIN_POSITIVE);
        num += x * (g - 1.0);
        den += x * x;
    }
    let a = if den > 1e-9 {
        (num / den).max(0.0)
    } else {
        0.0
    };
    let c = stats
        .get(&top)
        .expect("`top` is a key of `stats`")
        .concurrency
        * next as f64
        / top as f64;
    c / (1.0 + a * (c - 1.0).max(0.0))
}

/// The GPUs and driver run `run` used, as the history has it.
fn gpu_of<'h>(history: &'h [HistoryEntry], run: &str) -> Option<&'h str> {
    for e in history {
        if e.run == run || e.run == crate::runs::run_key(run) {
            return Some(&e.gpu);
        }
    }
    None
}

/// Whether a record of run `run` counts against GPU `gpu`: unless it is known to be of
/// another.
fn applies(history: &[HistoryEntry], gpu: &str, run: Option<&str>) -> bool {
    let Some(run) = run else {
        return true;
    };
    match gpu_of(history, run) {
        Some(g) => g == gpu,
        None => true,
    }
}

/// Permits per GPU of a record made with `gpus_then` GPUs, on a pool of `gpus`.
fn per_gpu(per_gpu: usize, gpus_then: usize, gpus: usize) -> usize {
    if gpus_then == gpus {
        per_gpu
    } else {
        per_gpu
            .saturating_mul(gpus_then)
            .div_ceil(gpus.max(1))
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hangs::TRUSTED_FOR;

    const DAY: u64 = 86_400_000;

    fn entry(run: &str, n: usize, effective: f64, waited: f64, gpu: &str, at: u64) -> HistoryEntry {
        let busy = 1_000_000;
        HistoryEntry {
            v: 1,
            run: run.into(),
            unix_ms: at,
            per_gpu: n,
            gpus: 1,
            auto: true,
            gpu: gpu.into(),
            holds: 24,
            span_us: busy,
            busy_us: busy,
            unit_us: busy.saturating_mul(n as u64),
            work_us: (effective * busy as f64) as u64,
            queued_us: (waited * busy as f64) as u64,
            peak: n,
            unreturned: 0,
            failed: 0,
            casualties: 0,
            why: None,
            source_len: 1,
        }
    }

    /// The choice for one GPU of identity "" with ceiling `ceiling`, at `now_ms`.
    fn pick(history: &[HistoryEntry], hangs: &[HangRecord], ceiling: usize, now_ms: u64) -> Choice {
        choose(&Inputs {
            history,
            hangs,
            casualties: &[],
            gpu: "",
            gpus: 1,
            ceiling,
            now_ms,
        })
    }

    fn hang(run: &str, n: usize, at: u64) -> HangRecord {
        let mut h = <HangRecord as crate::json::Record>::from_text(&format!(
            r#"{{"unix_ms":{at},"per_gpu":{n},"gpus":1,"test":"t","held_ms":1}}"#
        ))
        .unwrap();
        h.run = Some(run.into());
        h
    }

    /// The simulated GPU of the module docs' scenario: throughput saturates at 3 tests, 4 at
    /// once wedge it. Returns the N of each run.
    fn simulate(
        runs: usize,
        gpu: &str,
        history: &mut Vec<HistoryEntry>,
        hangs: &mut Vec<HangRecord>,
        start: u64,
    ) -> Vec<usize> {
        let mut ns = Vec::new();
        for i in 0..runs {
            let now = start + i as u64 * 60_000;
            let c = choose(&Inputs {
                history,
                hangs,
                casualties: &[],
                gpu,
                gpus: 1,
                ceiling: 8,
                now_ms: now,
            });
            let run = format!("{gpu}-{i}");
            let n = c.per_gpu;
            ns.push(n);
            if n >= 4 {
                let mut e = entry(&run, n, 3.0, 0.9, gpu, now);
                e.unreturned = n;
                history.push(e);
                hangs.push(hang(&run, n, now));
            } else {
                history.push(entry(&run, n, n as f64, 0.8, gpu, now));
            }
        }
        ns
    }

    #[test]
    fn it_climbs_one_step_at_a_time_backs_off_after_a_hang_and_resumes_after_a_driver_change() {
        let (mut history, mut hangs) = (Vec::new(), Vec::new());
        let ns = simulate(10, "stub 12.8", &mut history, &mut hangs, 100 * DAY);
        assert_eq!(ns, [2, 3, 4, 3, 3, 3, 3, 3, 3, 3]);
        // A new driver: from the last N that ran clean, then one step, which hangs again.
        let ns = simulate(4, "stub 12.9", &mut history, &mut hangs, 101 * DAY);
        assert_eq!(ns, [3, 4, 3, 3]);
    }

    #[test]
    fn it_settles_where_the_throughput_stops_growing() {
        // 2 -> 2.0, 3 -> 2.05: not 5 % more, so 3 is not worth it and 4 is never tried.
        let history = [
            entry("a", 2, 2.0, 0.5, "", DAY),
            entry("b", 3, 2.05, 0.5, "", DAY + 1),
        ];
        let c = pick(&history, &[], 8, 2 * DAY);
        assert_eq!((c.per_gpu, c.step), (2, Step::Settle), "{c}");
        assert!(c.why.contains("stopped growing at N = 3"), "{c}");
    }

    #[test]
    fn it_does_not_explore_when_tests_seldom_wait() {
        let history = [entry("a", 2, 2.0, 0.01, "", DAY)];
        let c = pick(&history, &[], 8, 2 * DAY);
        assert_eq!((c.per_gpu, c.step), (2, Step::Settle), "{c}");
        assert!(c.why.contains("seldom waited"), "{c}");
    }

    /// Finding 8: hang, casualty and history records dated in the future stayed trusted until
    /// that date plus 30 days (a clock that was wrong when they were written, or forged ones).
    #[test]
    fn hang_casualty_and_history_records_dated_in_the_future_are_not_trusted() {
        let now = 40 * DAY;
        let later = now + 10 * DAY;
        let history = [entry("a", 2, 2.0, 0.9, "", DAY * 39)];
        let with =
            |hangs: &[HangRecord], casualties: &[CasualtyRecord], history: &[HistoryEntry]| {
                choose(&Inputs {
                    history,
                    hangs,
                    casualties,
                    gpu: "",
                    gpus: 1,
                    ceiling: 8,
                    now_ms: now,
                })
            };
        // Dated now, each rules N = 3 out; dated ten days from now, none does.
        let mut h = hang("x", 3, now);
        h.run = None;
        assert_eq!(with(std::slice::from_ref(&h), &[], &history).per_gpu, 2);
        h.unix_ms = later;
        assert_eq!(with(&[h], &[], &history).per_gpu, 3);
        let mut c = <CasualtyRecord as crate::json::Record>::from_text(&format!(
            r#"{{"unix_ms":{now},"run":"a","binary":"b","test":"t","per_gpu":3,"gpus":1,"units_beside":2,"beside":[]}}"#
        ))
        .unwrap();
        assert_eq!(with(&[], std::slice::from_ref(&c), &history).per_gpu, 2);
        c.unix_ms = later;
        assert_eq!(with(&[], &[c], &history).per_gpu, 3);
        // A history entry from the future: as if there were none (N = 2, where to start).
        let future = [entry("a", 2, 2.0, 0.9, "", later)];
        let c = with(&[], &[], &future);
        assert_eq!(c, with(&[], &[], &[]), "{c}");
        // Within the skew a record still counts.
        let mut h = hang("x", 3, now + crate::hangs::FUTURE_SKEW.as_millis() as u64);
        h.run = None;
        assert_eq!(with(&[h], &[], &history).per_gpu, 2);
    }

    #[test]
    fn old_hangs_other_gpus_hangs_and_the_ceiling_bound_it() {
        let history = [entry("a", 2, 2.0, 0.9, "", DAY)];
        let choose_with = |hangs: &[HangRecord], ceiling| {
            choose(&Inputs {
                history: &history,
                hangs,
                casualties: &[],
                gpu: "",
                gpus: 1,
                ceiling,
                now_ms: 2 * DAY,
            })
        };
        assert_eq!(choose_with(&[], 8).per_gpu, 3);
        assert_eq!(choose_with(&[], 2).per_gpu, 2);
        // A hang at 3 of unknown GPU rules 3 out; one older than the trust window does not.
        let mut h = hang("x", 3, DAY);
        h.run = None;
        assert_eq!(choose_with(std::slice::from_ref(&h), 8).per_gpu, 2);
        let mut old = h.clone();
        old.unix_ms = 0;
        let now_far = DAY + TRUSTED_FOR.as_millis() as u64 + 1;
        let c = choose(&Inputs {
            history: &[entry("a", 2, 2.0, 0.9, "", now_far - 1)],
            hangs: &[old],
            casualties: &[],
            gpu: "",
            gpus: 1,
            ceiling: 8,
            now_ms: now_far,
        });
        assert_eq!(c.per_gpu, 3, "{c}");
        // A hang recorded on another GPU does not bind this one.
        let other = [
            entry("a", 2, 2.0, 0.9, "", DAY),
            entry("y", 2, 2.0, 0.9, "other", DAY),
        ];
        let c = choose(&Inputs {
            history: &other,
            hangs: &[hang("y", 3, DAY)],
            casualties: &[],
            gpu: "",
            gpus: 1,
            ceiling: 8,
            now_ms: 2 * DAY,
        });
        assert_eq!(c.per_gpu, 3, "{c}");
    }

    #[test]
    fn forged_entries_choose_nothing_out_of_range() {
        let mut zero = entry("z", 0, 5.0, 0.9, "", DAY);
        zero.holds = 100;
        let mut huge = entry("h", usize::MAX, 1e9, 1.0, "", DAY);
        huge.holds = usize::MAX;
        let mut idle = entry("i", 2, 0.0, 0.0, "", DAY);
        idle.busy_us = 0;
        idle.work_us = u64::MAX;
        let mut other = entry("o", 0, 5.0, 0.9, "x", DAY);
        other.holds = 100;
        for history in [vec![zero], vec![huge], vec![idle], vec![other]] {
            let c = pick(&history, &[], 8, 2 * DAY);
            assert!((1..=8).contains(&c.per_gpu), "{c}");
        }
    }

    #[test]
    fn a_run_that_lost_permits_is_backed_off_at_once() {
        let mut lost = entry("b", 3, 3.0, 0.9, "", DAY + 1);
        lost.unreturned = 1;
        let history = [entry("a", 2, 2.0, 0.9, "", DAY), lost];
        let c = pick(&history, &[], 8, 2 * DAY);
        assert_eq!(c.per_gpu, 2, "{c}");
        assert!(c.why.contains("lost 1 permit"), "{c}");
    }
}
