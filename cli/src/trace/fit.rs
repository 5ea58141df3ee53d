//! Fitting the slowdown model: the least-squares fit of `ln d = ln alone + ln g(o)` to a
//! trace's holds, whether the trace shows the GPU's saturation, and the bootstrap range (see the
//! [module docs](crate::trace#the-slowdown-model)).

use std::collections::HashMap;

use super::model::{Slowdown, SlowdownBasis};
use super::requests::{Replayable, Request};
use gpu_test_permit::trace::TraceEvent;

impl Slowdown {
    /// Fits the model to the holds of `events`. The events may hold several runs (traced
    /// into one file, or read from several and put together): a hold's concurrency is
    /// measured from the holds that overlap it in time, and a test seen at several
    /// concurrencies is what gives the fit its strongest basis,
    /// [`SlowdownBasis::RepeatedTests`].
    ///
    /// ```
    /// use gpu_test_permit_cli::trace::{Slowdown, SlowdownBasis, TraceArgs, TraceEvent};
    /// let hold = |test: &str, tid, ts, dur| TraceEvent {
    ///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur,
    ///     pid: 1, tid, args: TraceArgs { test: test.into(), capacity: 2, ..Default::default() },
    /// };
    /// // Three tests, each run alone (100 ms) and beside another one (150 ms).
    /// let mut events = Vec::new();
    /// for (i, t) in ["a", "b", "c"].into_iter().enumerate() {
    ///     let alone = i as u64 * 100_000;
    ///     events.push(hold(t, 1, alone, 100_000));
    ///     events.push(hold(t, 1, 1_000_000 + alone * 2, 150_000));
    ///     events.push(hold("partner", 2, 1_000_000 + alone * 2, 150_000));
    /// }
    /// let s = Slowdown::fit(&events);
    /// assert_eq!(s.basis, SlowdownBasis::RepeatedTests { tests: 3 });
    /// assert!((s.factor - 0.5).abs() < 0.01, "{s:?}");
    /// ```
    pub fn fit(events: &[TraceEvent]) -> Slowdown {
        let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
        let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
        Replayable::new(events, &holds, start).fit()
    }
}

impl Replayable {
    /// Fits [`Slowdown`] to the trace's holds (see [`SlowdownBasis`] for the two ways).
    pub(super) fn fit(&self) -> Slowdown {
        const SPREAD: f64 = 0.5;
        // The holds that took time, by test.
        let mut by_test: HashMap<usize, Vec<Point>> = HashMap::new();
        for r in self.requests.iter().filter(|r| r.hold > 0) {
            by_test.entry(r.test).or_default().push(Point::new(r));
        }
        let spread = |g: &[Point]| {
            let (lo, hi) = g.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
                (lo.min(p.others), hi.max(p.others))
            });
            hi - lo
        };
        let mut repeated: Vec<Vec<Point>> = by_test
            .into_values()
            .filter(|g| g.len() >= 2 && spread(g) >= SPREAD)
            .collect();
        if repeated.len() >= 3 {
            // HashMap order is arbitrary; the bootstrap's draws must not be.
            repeated.sort_by(|a, b| a.partial_cmp(b).expect("finite logs"));
            let tests = repeated.len();
            return fit_with_range(&repeated, false, SlowdownBasis::RepeatedTests { tests });
        }
        let all: Vec<Vec<Point>> = self
            .requests
            .iter()
            .filter(|r| r.hold > 0)
            .map(|r| vec![Point::new(r)])
            .collect();
        let (lo, hi) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), g| {
            (lo.min(g[0].others), hi.max(g[0].others))
        });
        let mid = (lo + hi) / 2.0;
        let (low, high): (Vec<f64>, Vec<f64>) =
            all.iter().map(|g| g[0].others).partition(|&o| o < mid);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let enough = (all.len() / 10).max(5);
        if low.len() >= enough && high.len() >= enough && mean(&high) - mean(&low) >= SPREAD {
            let holds = all.len();
            return fit_with_range(&all, true, SlowdownBasis::Overlap { holds });
        }
        Slowdown {
            factor: 0.5,
            low: 0.0,
            high: 1.0,
            saturation: None,
            saturation_low: None,
            saturation_high: None,
            basis: SlowdownBasis::NotIdentified,
        }
    }
}

/// One hold, for the fit, with the logarithms its residual needs.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct Point {
    ln_hold: f64,
    /// Units others kept busy on its GPU beside it, on average.
    others: f64,
    /// `ln units`.
    ln_units: f64,
    /// `ln(units + others)`: its GPU's load.
    ln_load: f64,
}

impl Point {
    fn new(r: &Request) -> Point {
        let units = r.units.max(1) as f64;
        Point {
            ln_hold: (r.hold as f64).ln(),
            others: r.others,
            ln_units: units.ln(),
            ln_load: (units + r.others).ln(),
        }
    }

    /// `ln g` at this hold for factor `a` and `ln_saturation` (infinite: no bound).
    fn ln_slowdown(&self, a: f64, ln_saturation: f64) -> f64 {
        (a * self.others)
            .ln_1p()
            .max(self.ln_load - ln_saturation.max(self.ln_units))
    }
}

/// The least-squares loss of `ln hold = ln alone + ln g(others)` over `groups` of holds, with
/// factor `a` and the throughput bounded at `e^ln_saturation` (infinite: no bound): each group
/// has its own `ln alone` (a test seen at several concurrencies), or with `shared` all share
/// one.
fn loss(groups: &[&Vec<Point>], shared: bool, a: f64, ln_saturation: f64) -> f64 {
    fn residuals(g: &[Point], a: f64, s: f64) -> impl Iterator<Item = f64> + '_ {
        g.iter().map(move |p| p.ln_hold - p.ln_slowdown(a, s))
    }
    let s = ln_saturation;
    if shared {
        let n: usize = groups.iter().map(|g| g.len()).sum();
        let mean = groups.iter().flat_map(|g| residuals(g, a, s)).sum::<f64>() / n as f64;
        groups
            .iter()
            .flat_map(|g| residuals(g, a, s))
            .map(|x| (x - mean).powi(2))
            .sum::<f64>()
    } else {
        groups
            .iter()
            .map(|g| {
                let mean = residuals(g, a, s).sum::<f64>() / g.len() as f64;
                residuals(g, a, s).map(|x| (x - mean).powi(2)).sum::<f64>()
            })
            .sum()
    }
}

/// The point of `[lo, hi]` where `f` is least, and `f` there: the best of a grid of `steps`
/// intervals, then `sections` golden sections of the intervals beside it (each narrows the
/// bracket by 0.618).
fn minimize(f: impl Fn(f64) -> f64, lo: f64, hi: f64, steps: usize, sections: usize) -> (f64, f64) {
    let step = (hi - lo) / steps as f64;
    let (best, _) = (0..=steps)
        .map(|i| lo + i as f64 * step)
        .map(|x| (x, f(x)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .expect("a grid");
    let (mut lo, mut hi) = ((best - step).max(lo), (best + step).min(hi));
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut x1, mut x2) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..sections {
        if f1 <= f2 {
            (hi, x2, f2) = (x2, x1, f1);
            x1 = hi - phi * (hi - lo);
            f1 = f(x1);
        } else {
            (lo, x1, f1) = (x1, x2, f2);
            x2 = lo + phi * (hi - lo);
            f2 = f(x2);
        }
    }
    let x = (lo + hi) / 2.0;
    (x, f(x))
}

/// The factor that best fits `groups` with the throughput bounded at `e^ln_saturation`, and
/// the loss there. Searched on `[0, 4]`: a grid of 16, then 14 golden sections (to about
/// 7e-4).
fn fit_factor(groups: &[&Vec<Point>], shared: bool, ln_saturation: f64) -> (f64, f64) {
    minimize(|a| loss(groups, shared, a, ln_saturation), 0.0, 4.0, 16, 14)
}

/// Where [`fit_curve`] looks for the saturation.
#[derive(Clone, Copy)]
enum Search {
    /// Everywhere up to the highest load a hold saw.
    Everywhere,
    /// Near this `ln saturation` (a resample of a fit that showed it there).
    Near(f64),
    /// Nowhere: the bound is not shown (a resample of a fit that did not show it).
    Nowhere,
}

/// The factor and the saturation that best fit `groups`, and whether the trace shows the
/// saturation (the bound makes the fit significantly better). Where it does not, the factor is
/// the one fitted without a bound and the saturation the most throughput that factor says the
/// holds saw: the highest `(u + o) / (1 + a x o)`.
fn fit_curve(groups: &[&Vec<Point>], shared: bool, search: Search) -> (f64, f64, bool) {
    let (free, free_loss) = fit_factor(groups, shared, f64::INFINITY);
    let points = || groups.iter().flat_map(|g| g.iter());
    // Above the highest load a hold saw, the bound binds nowhere: search up to it, in steps
    // of at most a factor 1.25, then 8 golden sections (to within 1 %).
    let top = points().map(|p| p.ln_load).fold(0.0, f64::max).max(1e-3);
    let profile = |s| fit_factor(groups, shared, s).1;
    let bounded = match search {
        Search::Everywhere => {
            let steps = ((top / 1.25f64.ln()).ceil() as usize).max(4);
            Some(minimize(profile, 0.0, top, steps, 8))
        }
        Search::Near(at) => Some(minimize(
            profile,
            (at - 0.25).max(0.0),
            (at + 0.25).min(top),
            2,
            6,
        )),
        Search::Nowhere => None,
    };
    if let Some((ln_saturation, bounded_loss)) = bounded {
        // Shown: the bound fits significantly better, by a likelihood-ratio test at 95 % (one
        // more parameter: chi-squared 3.84 times the residual variance). Runs at two loads
        // alone (N = 1 and 2, say) never show it: a slope and a bound fit them equally well.
        let total = points().count();
        let alone = if shared { 1 } else { groups.len() };
        let dof = total.saturating_sub(alone + 2).max(1);
        // (And by more than rounding: on exact data both losses are all but 0.)
        let gain = free_loss - bounded_loss;
        if gain > 3.84 * bounded_loss / dof as f64 && gain > 1e-9 * total as f64 {
            let (a, _) = fit_factor(groups, shared, ln_saturation);
            return (a, ln_saturation.exp(), true);
        }
    }
    let seen = points()
        .map(|p| p.ln_load - (free * p.others).ln_1p())
        .fold(0.0, f64::max);
    (free, seen.exp(), false)
}

/// [`fit_curve`] on all `groups`, and its range from a bootstrap: 100 resamples of the groups
/// (at most 1,000 a resample, which widens the range of a larger trace, never narrows it), 5th
/// to 95th percentile, with a fixed seed so a trace always reads the same.
fn fit_with_range(groups: &[Vec<Point>], shared: bool, basis: SlowdownBasis) -> Slowdown {
    let all: Vec<&Vec<Point>> = groups.iter().collect();
    let (factor, saturation, shown) = fit_curve(&all, shared, Search::Everywhere);
    // The resamples look for the saturation near where the whole trace showed it, or not at
    // all where it did not (a resample that shows one the whole trace does not would only
    // narrow the fast end, which stays unbounded).
    let search = if shown {
        Search::Near(saturation.ln())
    } else {
        Search::Nowhere
    };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        // xorshift64*
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let size = groups.len().min(1_000);
    let (mut factors, mut saturations): (Vec<f64>, Vec<f64>) = (0..100)
        .map(|_| {
            let sample: Vec<&Vec<Point>> = (0..size)
                .map(|_| &groups[(next() % groups.len() as u64) as usize])
                .collect();
            let (a, s, _) = fit_curve(&sample, shared, search);
            (a, s)
        })
        .unzip();
    factors.sort_by(f64::total_cmp);
    saturations.sort_by(f64::total_cmp);
    Slowdown {
        factor,
        low: factors[4].min(factor),
        high: factors[94].max(factor),
        saturation: Some(saturation),
        saturation_low: Some(saturations[4].min(saturation)),
        saturation_high: shown.then(|| saturations[94].max(saturation)),
        basis,
    }
}
