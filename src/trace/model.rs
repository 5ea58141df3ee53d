//! The slowdown model and its replay: how a run would have gone at another N (see the
//! [module docs](crate::trace#the-slowdown-model)).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::event::TraceEvent;

/// How hold times grow with concurrency: a hold of `u` units that takes `d` alone takes
/// `d x max(1 + factor x o, (u + o) / max(saturation, u))` while other holds keep `o` units of
/// its GPU busy on average (see the [module docs](crate::trace#the-slowdown-model)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Slowdown {
    /// The fitted factor `a`: 0, hold times do not depend on concurrency; 1, every unit held
    /// beside a hold slows it as much as running one more test's hold after it (the GPU's
    /// throughput is fixed).
    pub factor: f64,
    /// The low end of the factor's range (5th percentile of a bootstrap over tests or holds).
    pub low: f64,
    /// The high end of the factor's range (95th percentile).
    pub high: f64,
    /// The GPU's throughput, in units of holds running at full speed: with more units busy
    /// than this, each hold slows in proportion (`(u + o) / saturation`), whatever `factor`
    /// says. Fitted where the trace shows it; where it does not (the throughput kept growing
    /// up to the highest concurrency seen), the most the trace showed: the model promises no
    /// more throughput than the GPU delivered. `None`: no such bound (a [`given`](Self::given)
    /// factor, or [`SlowdownBasis::NotIdentified`], whose range already runs to "throughput
    /// fixed").
    pub saturation: Option<f64>,
    /// The saturation at the slow end of the range (5th percentile of the bootstrap), used
    /// with [`high`](Self::high).
    pub saturation_low: Option<f64>,
    /// The saturation at the fast end of the range, used with [`low`](Self::low): the 95th
    /// percentile of the bootstrap where the trace shows the bound, `None` (unbounded: the
    /// throughput keeps growing as `factor` says) where it does not.
    pub saturation_high: Option<f64>,
    /// What the fit rests on.
    pub basis: SlowdownBasis,
}

/// What a [`Slowdown`] was fitted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowdownBasis {
    /// `tests` tests held permits at concurrencies at least half a unit apart (several runs
    /// traced into one file, or tests that take permits repeatedly): each test keeps its own
    /// time alone and the factor is shared. The strongest basis.
    RepeatedTests {
        /// Tests the fit used.
        tests: usize,
    },
    /// `holds` holds ran at different concurrencies (a run with idle stretches, a long tail):
    /// fitted across tests, assuming that the tests which ran at low and at high concurrency
    /// would take alike alone.
    Overlap {
        /// Holds the fit used.
        holds: usize,
    },
    /// Every hold ran at about the same concurrency (a saturated run, or N = 1), so the trace
    /// cannot tell how hold times grow with it. The factor is the middle of the range from 0
    /// (hold times fixed) to 1 (the GPU's throughput fixed), and the range is all of it.
    NotIdentified,
    /// Given, not fitted ([`Slowdown::given`]).
    Given,
}

/// A [`Slowdown`] model's estimate of a run's span with `n` permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prediction {
    /// Permits in the pool (N per GPU times the GPUs).
    pub n: usize,
    /// Estimated span at the fitted factor and saturation, microseconds.
    pub span_us: u64,
    /// The span at the fast end of the model's range, microseconds.
    pub low_us: u64,
    /// The span at the slow end of the model's range, microseconds.
    pub high_us: u64,
}

impl Slowdown {
    /// A factor known from elsewhere, with no range; `Slowdown::given(0.0)` keeps hold times
    /// as they were.
    pub fn given(factor: f64) -> Slowdown {
        Slowdown {
            factor,
            low: factor,
            high: factor,
            saturation: None,
            saturation_low: None,
            saturation_high: None,
            basis: SlowdownBasis::Given,
        }
    }

    /// This model with the GPU's throughput bounded at `saturation` units of holds at full
    /// speed, at both ends of the range too (see [`saturation`](Self::saturation)).
    ///
    /// ```
    /// use gpu_test_permit::trace::Slowdown;
    /// let s = Slowdown::given(0.1).with_saturation(2.0);
    /// assert_eq!(s.slowdown(1.0, 1), 1.1); // two holds: 1 + 0.1 x 1
    /// assert_eq!(s.slowdown(3.0, 1), 2.0); // four holds: 4 / 2
    /// assert_eq!(s.slowdown(0.0, 4), 1.0); // a 4-unit hold alone runs at full speed
    /// ```
    pub fn with_saturation(self, saturation: f64) -> Slowdown {
        let s = Some(saturation.max(1.0));
        Slowdown {
            saturation: s,
            saturation_low: s,
            saturation_high: s,
            ..self
        }
    }

    /// How many times as long as alone a hold of `units` takes with `others` units held
    /// beside it on its GPU, at the point estimate.
    pub fn slowdown(&self, others: f64, units: usize) -> f64 {
        Curve::new(self.factor, self.saturation).g(others, units)
    }

    /// The point estimate and the fast and slow ends of the range.
    fn curves(&self) -> [Curve; 3] {
        [
            Curve::new(self.factor, self.saturation),
            Curve::new(self.low, self.saturation_high),
            Curve::new(self.high, self.saturation_low),
        ]
    }

    /// Fits the model to the holds of `events`. The events may hold several runs (traced
    /// into one file, or read from several and put together): a hold's concurrency is
    /// measured from the holds that overlap it in time, and a test seen at several
    /// concurrencies is what gives the fit its strongest basis,
    /// [`SlowdownBasis::RepeatedTests`].
    ///
    /// ```
    /// use gpu_test_permit::trace::{Slowdown, SlowdownBasis, TraceArgs, TraceEvent};
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

/// Predicts the span of the run in `events` with `n` permits under `slowdown` (fitted from
/// these events, or from others: runs of the same suite at other N). `None` when the events
/// hold no hold span.
pub fn predict(events: &[TraceEvent], slowdown: &Slowdown, n: usize) -> Option<Prediction> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() || n == 0 {
        return None;
    }
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    Replayable::new(events, &holds, start)
        .predict(slowdown, n..=n)
        .pop()
}

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

/// The span of the run in `events` replayed with `n` permits, each hold as long as it was and
/// each request made when it was: [`Summary::what_if`](crate::trace::Summary::what_if) for any `n`. `None` when the events
/// hold no hold span.
pub fn replay_fixed(events: &[TraceEvent], n: usize) -> Option<u64> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() || n == 0 {
        return None;
    }
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let run = Replayable::new(events, &holds, start);
    Some(run.replay(&run.holds(), n).0)
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

/// A moment, or an amount of progress, in the simulation: microseconds, ordered for its heaps.
#[derive(Clone, Copy, Debug, PartialEq)]
struct At(f64);

impl Eq for At {}

impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for At {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One permit request of a trace, for the replays.
#[derive(Clone, Debug)]
struct Request {
    /// When it was made, microseconds from the start of the trace.
    arrival: u64,
    /// When its hold ended in the trace.
    release: u64,
    /// How long it held its permit in the trace.
    hold: u64,
    /// Units it took (an exclusive request takes the whole replayed pool instead).
    units: usize,
    exclusive: bool,
    /// Units other holds kept busy on its GPU, on average over its hold, in the trace.
    others: f64,
    /// Its test, for the slowdown fit.
    test: usize,
    /// For the model's replay: the request whose release it followed, and how long after
    /// (see [`Replayable::new`]).
    after: Option<(usize, u64)>,
}

/// The requests of a trace in the order they were made, ready to replay.
pub(super) struct Replayable {
    requests: Vec<Request>,
    /// For each request, the request that followed its release, if one did.
    follower: Vec<Option<usize>>,
    gpus: usize,
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

    /// Units request `r` takes from a pool of `n`.
    fn units(r: &Request, n: usize) -> usize {
        if r.exclusive { n } else { r.units.clamp(1, n) }
    }

    /// The end of the replay of the requests with hold times `holds` on `n` permits served
    /// first come first served, each request coming when it did, and whether a request
    /// waited.
    ///
    /// The holds begun so far wait in a min-heap of `(finish, units)`. Since service is in
    /// order, starts never go back in time: a cursor moves forward to each request's arrival,
    /// drops the holds finished by then, and then to the next finishes until the request's
    /// units are free. Each request goes through the heap once: O(m log m).
    pub(super) fn replay(&self, holds: &[u64], n: usize) -> (u64, bool) {
        let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let (mut free, mut now, mut end, mut waited) = (n, 0u64, 0u64, false);
        for (r, &hold) in self.requests.iter().zip(holds) {
            let units = Self::units(r, n);
            now = now.max(r.arrival);
            while let Some(&Reverse((finish, u))) = busy.peek() {
                if finish > now && free >= units {
                    break;
                }
                busy.pop();
                now = now.max(finish);
                free += u;
            }
            waited |= now > r.arrival;
            free -= units;
            let finish = now.saturating_add(hold);
            busy.push(Reverse((finish, units)));
            end = end.max(finish);
        }
        (end, waited)
    }

    /// The span with `n` permits when each request's time alone is `alone` and the holds
    /// share the GPU as `curve` says, and whether a request waited.
    ///
    /// An event-driven simulation: between events (a request comes, a hold ends) each hold
    /// progresses at `1 / g(o, u)` of its speed alone, `o` the units the others hold at that
    /// moment, and ends once it has done its time alone. (Rescaling each hold by the load
    /// averaged over its life instead overstates it wherever the load changes during a hold:
    /// a hold that began among 40 and ended alone would count as slowed by the average.)
    /// Requests are served first come first served; a request that followed a release in
    /// the trace comes as long after the release it is paired with.
    ///
    /// The rate depends on a hold's units only (the load is the pool's), so the holds of one
    /// weight share a clock of progress and wait in a min-heap of the progress at which each
    /// ends: an event costs O(log m) plus one step per distinct weight.
    fn simulate(&self, alone: &[f64], curve: Curve, n: usize) -> (u64, bool) {
        /// Holds of one weight: the progress their clock has made and, per hold, the progress
        /// at which it ends.
        struct Weight {
            units: usize,
            progress: f64,
            ends: BinaryHeap<Reverse<(At, usize)>>,
        }
        let gpus = self.gpus as f64;
        let mut coming: BinaryHeap<Reverse<(At, usize)>> = self
            .requests
            .iter()
            .enumerate()
            .filter(|(_, r)| r.after.is_none())
            .map(|(i, r)| Reverse((At(r.arrival as f64), i)))
            .collect();
        let mut came = vec![0.0f64; self.requests.len()];
        let mut queue: std::collections::VecDeque<usize> = Default::default();
        let mut weights: Vec<Weight> = Vec::new();
        let (mut now, mut free, mut load, mut end, mut waited) = (0.0f64, n, 0usize, 0.0f64, false);
        let rate = |w: &Weight, load: usize| 1.0 / curve.g((load - w.units) as f64 / gpus, w.units);
        loop {
            // Serve the queue in order while units are free.
            while let Some(&j) = queue.front() {
                let units = Self::units(&self.requests[j], n);
                if units > free {
                    break;
                }
                queue.pop_front();
                free -= units;
                load += units;
                waited |= now > came[j];
                let w = match weights.iter().position(|w| w.units == units) {
                    Some(w) => w,
                    None => {
                        weights.push(Weight {
                            units,
                            progress: 0.0,
                            ends: BinaryHeap::new(),
                        });
                        weights.len() - 1
                    }
                };
                let w = &mut weights[w];
                w.ends.push(Reverse((At(w.progress + alone[j]), j)));
            }
            // The next event: the first hold to end at today's rates, or the next request.
            let ending = weights
                .iter()
                .enumerate()
                .filter_map(|(k, w)| {
                    let &Reverse((At(at), _)) = w.ends.peek()?;
                    Some((now + ((at - w.progress) / rate(w, load)).max(0.0), k))
                })
                .min_by(|x, y| x.0.total_cmp(&y.0));
            let next_request = coming.peek().map(|&Reverse((At(at), _))| at);
            let (at, ends) = match (ending, next_request) {
                (Some((e, k)), Some(c)) if e <= c => (e, Some(k)),
                (Some((e, k)), None) => (e, Some(k)),
                (_, Some(c)) => (c.max(now), None),
                (None, None) => break,
            };
            for w in weights.iter_mut().filter(|w| !w.ends.is_empty()) {
                w.progress += (at - now) * rate(w, load);
            }
            now = at;
            match ends {
                Some(k) => {
                    let w = &mut weights[k];
                    let Reverse((At(done), j)) = w.ends.pop().expect("a hold to end");
                    w.progress = done;
                    free += w.units;
                    load -= w.units;
                    end = end.max(now);
                    if let Some(f) = self.follower[j] {
                        let (_, gap) = self.requests[f].after.expect("a follower follows");
                        coming.push(Reverse((At(now + gap as f64), f)));
                    }
                }
                None => {
                    let Reverse((_, j)) = coming.pop().expect("a request to come");
                    came[j] = now;
                    queue.push_back(j);
                }
            }
        }
        (end.round() as u64, waited)
    }

    /// Each request's time alone under `curve`.
    fn alone(&self, curve: Curve) -> Vec<f64> {
        self.requests
            .iter()
            .map(|r| r.hold as f64 / curve.g(r.others, r.units))
            .collect()
    }

    /// The model's estimates for the pool sizes `sizes`, at the fitted factor and its range.
    pub(super) fn predict(
        &self,
        slowdown: &Slowdown,
        sizes: std::ops::RangeInclusive<usize>,
    ) -> Vec<Prediction> {
        let curves = slowdown.curves();
        let alone: Vec<Vec<f64>> = curves.iter().map(|&c| self.alone(c)).collect();
        // Per curve, the span once no request waits (every larger pool gives the same).
        let mut unconstrained: [Option<u64>; 3] = [None; 3];
        sizes
            .map(|n| {
                let mut spans = [0u64; 3];
                for i in 0..3 {
                    spans[i] = match unconstrained[i] {
                        Some(span) => span,
                        None if i > 0 && curves[i] == curves[0] => spans[0],
                        None => {
                            let (span, waited) = self.simulate(&alone[i], curves[i], n);
                            if !waited && n >= self.max_units {
                                unconstrained[i] = Some(span);
                            }
                            span
                        }
                    };
                }
                Prediction {
                    n,
                    span_us: spans[0],
                    low_us: *spans.iter().min().expect("three spans"),
                    high_us: *spans.iter().max().expect("three spans"),
                }
            })
            .collect()
    }

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

/// The slowdown curve of one end of a [`Slowdown`]'s range: `g(o, u) = max(1 + a x o,
/// (u + o) / max(s, u))` for a hold of `u` units with `o` beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Curve {
    a: f64,
    saturation: Option<f64>,
}

impl Curve {
    fn new(a: f64, saturation: Option<f64>) -> Curve {
        Curve { a, saturation }
    }

    fn g(&self, others: f64, units: usize) -> f64 {
        let linear = 1.0 + self.a * others;
        match self.saturation {
            Some(s) => {
                let units = units as f64;
                linear.max((units + others) / s.max(units))
            }
            None => linear,
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
