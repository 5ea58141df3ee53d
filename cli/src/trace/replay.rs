//! Replaying a trace's requests on a pool of another size: first come first served, each hold as
//! long as it was (the what-if), or event by event with the holds sharing the GPU as the
//! slowdown model says (the prediction).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::model::{Curve, Prediction, Slowdown};
use super::requests::{Replayable, Request};
use gpu_test_permit::trace::TraceEvent;

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

impl Replayable {
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
}
