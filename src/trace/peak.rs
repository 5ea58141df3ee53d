//! The most permit units held at once, from a trace: what a test checks to see the cap held.

use super::event::TraceEvent;

/// The largest number of permit units held at the same moment according to `events` (a
/// weighted hold counts its `units`, an exclusive one `capacity`).
///
/// ```
/// use gpu_test_permit::trace::{peak_concurrency, TraceArgs, TraceEvent};
///
/// let hold = |ts, units| TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur: 100,
///     pid: 1, tid: 1,
///     args: TraceArgs { units, capacity: 4, ..Default::default() },
/// };
/// // Two units from 0 to 100, one from 50 to 150, two from 100 (a release counts first).
/// let events = [hold(0, 2), hold(50, 1), hold(100, 2)];
/// assert_eq!(peak_concurrency(&events), 3);
/// ```
pub fn peak_concurrency(events: &[TraceEvent]) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for e in events {
        if e.name != "hold" {
            continue;
        }
        let units = e.args.held_units() as i64;
        edges.push((e.ts, units));
        edges.push((e.end(), -units));
    }
    peak_of(&mut edges)
}

/// The most held at once by `edges`, `(time, units taken or, negative, given back)`: also the
/// run summary's, over its grants and releases.
/// They are left sorted.
pub(crate) fn peak_of(edges: &mut [(u64, i64)]) -> usize {
    // At equal timestamps, count releases before acquisitions.
    crate::order::sort(edges);
    let (mut cur, mut peak) = (0i64, 0i64);
    for &(_, d) in edges.iter() {
        cur += d;
        peak = peak.max(cur);
    }
    peak as usize
}

/// Per GPU, the most permit units held on it at the same moment according to `events`, from
/// the host slots each hold event names (slot `i` is on GPU `i % gpus`, `gpus` as the events
/// say). Empty when the trace is of one GPU, or its holds name no slots (an in-process pool,
/// which places nothing).
///
/// ```
/// use gpu_test_permit::trace::{peak_per_gpu, TraceArgs, TraceEvent};
///
/// let hold = |ts, slots: Vec<usize>| TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur: 100,
///     pid: 1, tid: 1,
///     args: TraceArgs { units: slots.len(), slots, gpus: 4, capacity: 8, ..Default::default() },
/// };
/// // A permit on GPUs 1 and 2 (slots 1 and 2), beside one on GPU 1 (slot 5).
/// let events = [hold(0, vec![1, 2]), hold(50, vec![5])];
/// assert_eq!(peak_per_gpu(&events), [0, 2, 1, 0]);
/// ```
pub fn peak_per_gpu(events: &[TraceEvent]) -> Vec<usize> {
    // The most GPUs a hold says (as one GPU where none does).
    let mut gpus = 0;
    for e in events {
        if placed_hold(e) {
            gpus = gpus.max(e.args.gpus);
        }
    }
    if gpus <= 1 {
        return Vec::new();
    }
    let mut edges: Vec<Vec<(u64, i64)>> = Vec::with_capacity(gpus);
    for _ in 0..gpus {
        edges.push(Vec::new());
    }
    for e in events {
        if !placed_hold(e) {
            continue;
        }
        let g = e.args.gpus.max(1);
        for slot in &e.args.slots {
            edges[slot % g].push((e.ts, 1));
            edges[slot % g].push((e.end(), -1));
        }
    }
    let mut peaks = Vec::with_capacity(gpus);
    for gpu in edges.iter_mut() {
        peaks.push(peak_of(gpu));
    }
    peaks
}

/// A hold that names the host slots it took.
fn placed_hold(e: &TraceEvent) -> bool {
    e.name == "hold" && !e.args.slots.is_empty()
}
