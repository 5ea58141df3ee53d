//! Synthetic traces for the `trace` benchmark and the equivalence test: a small deterministic
//! generator, so both see the same inputs without a random-number crate.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use gpu_test_permit::trace::{TraceArgs, TraceEvent};

/// xorshift64*: deterministic, good enough for test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn event(name: &str, test: String, pid: u32, tid: u64, ts: u64, dur: u64) -> TraceEvent {
    TraceEvent {
        name: name.into(),
        cat: "gpu-test-permit".into(),
        ph: "X".into(),
        ts,
        dur,
        pid,
        tid,
        args: TraceArgs {
            thread: format!("t{tid}"),
            test,
            slots: vec![0],
            exclusive: false,
            capacity: 1,
            ..Default::default()
        },
    }
}

/// A trace as a run with `n` permits writes it: `holds` requests arriving over time, each a
/// `wait` span from its request to its permit and a `hold` span after it, served first come
/// first served; about one in `exclusive_every` takes the whole pool (0: none). Tests have
/// ~`holds / 4` distinct names; events are in the order processes would append them.
pub fn run_trace(seed: u64, holds: usize, n: usize, exclusive_every: u64) -> Vec<TraceEvent> {
    let mut rng = Rng::new(seed);
    let mut free: BinaryHeap<Reverse<u64>> = (0..n).map(|_| Reverse(0)).collect();
    let mut last_free = 0u64;
    let mut events = Vec::with_capacity(holds * 2);
    let mut arrival = 1_700_000_000_000_000u64;
    let names = (holds / 4).max(1) as u64;
    for i in 0..holds {
        arrival += rng.below(20_000 / n as u64 + 1);
        let exclusive = exclusive_every > 0 && rng.below(exclusive_every) == 0;
        let dur = 1_000 + rng.below(100_000);
        let begin = if exclusive {
            let begin = arrival.max(last_free);
            free = (0..n).map(|_| Reverse(begin + dur)).collect();
            begin
        } else {
            let Reverse(f) = free.pop().unwrap();
            let begin = arrival.max(f);
            free.push(Reverse(begin + dur));
            begin
        };
        last_free = last_free.max(begin + dur);
        let pid = 1000 + (i % 97) as u32;
        let tid = rng.below(4);
        let test = format!("suite::gpu_test_{}", rng.below(names));
        let mut w = event("wait", test.clone(), pid, tid, arrival, begin - arrival);
        let mut h = event("hold", test, pid, tid, begin, dur);
        for e in [&mut w, &mut h] {
            e.args.exclusive = exclusive;
            e.args.capacity = n;
        }
        events.push(w);
        events.push(h);
    }
    events
}

/// An arbitrary trace that stresses the corner cases: equal timestamps, zero durations, waits
/// without holds and holds without waits, repeated (pid, thread, end) keys, exclusive holds,
/// mixed `concurrency` values and tests of the same name in many processes.
pub fn messy_trace(seed: u64, len: usize) -> Vec<TraceEvent> {
    let mut rng = Rng::new(seed);
    let mut events = Vec::with_capacity(len);
    for _ in 0..len {
        let name = match rng.below(10) {
            0..=4 => "hold",
            5..=8 => "wait",
            _ => "other",
        };
        let ts = 1_000 + rng.below(40) * 250;
        let dur = rng.below(4) * 250;
        let pid = 1 + rng.below(3) as u32;
        let tid = rng.below(3);
        let mut e = event(name, format!("t{}", rng.below(6)), pid, tid, ts, dur);
        e.args.exclusive = rng.below(8) == 0;
        e.args.capacity = 1 + rng.below(4) as usize;
        e.args.slots = (0..rng.below(3) as usize).collect();
        events.push(e);
    }
    events
}
