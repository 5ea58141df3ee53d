//! Who was in the way when a wait timed out: the host's holders and waiters, and this
//! process's own holders, gathered into [`WaitTimeout`].

use std::time::Instant;

use super::error::{AcquireError, Holder, WaitTimeout, Waiter};
use super::inner::PoolInner;
use super::want::Want;
use crate::host::{Blockers, HostSlots};
use crate::sync::Ordering;

impl PoolInner {
    /// The error of a wait for `want` that began at `asked` and timed out.
    pub(super) fn timeout_error(&self, want: Want, asked: Instant) -> AcquireError {
        let test = super::observe::test_name();
        let inner = self;
        // Whether the wait ended in this process's queue or at the host slots, the slots say
        // who is in the way.
        let mut blockers = match &inner.host {
            Some(host) => HostSlots::blockers(host),
            None => Blockers::default(),
        };
        let pid = std::process::id();
        // Host records cover every process, this one included; seats add this process's
        // holders without a record (a pool without host slots).
        // A permit of k units wrote its record into each of its k slots: list it once.
        let mut holders: Vec<Holder> = Vec::new();
        let records = &mut blockers.holders;
        let counts = count_equal(records.len(), &|a, b| records[a] == records[b]);
        for &(first, slots) in &counts {
            let r = &mut records[first];
            holders.push(Holder {
                // On the boot clock where the record allows: a holder whose wall clock is an
                // hour ahead has not held for 0 s, nor one an hour behind for an hour.
                held_for: r.age(),
                stopped: r.pid != pid && crate::sys::process_is_stopped(r.pid),
                exited: r.pid != pid && !crate::sys::process_is_visible(r.pid),
                units: r.units.max(slots),
                test: std::mem::take(&mut r.test),
                thread: std::mem::take(&mut r.thread),
                pid: r.pid,
                exclusive: r.exclusive,
                recorded: true,
            });
        }
        // Slots locked without a record, by owner (0: not known here).
        let mut owners = Vec::with_capacity(blockers.unrecorded.len());
        for &owner in &blockers.unrecorded {
            owners.push(owner.unwrap_or(0));
        }
        let counts = count_equal(owners.len(), &|a, b| owners[a] == owners[b]);
        for &(first, slots) in &counts {
            let owner = owners[first];
            holders.push(Holder {
                test: String::new(),
                thread: String::new(),
                pid: owner,
                held_for: None,
                exclusive: false,
                units: slots,
                stopped: owner != 0 && owner != pid && crate::sys::process_is_stopped(owner),
                exited: owner != 0 && owner != pid && !crate::sys::process_is_visible(owner),
                recorded: false,
            });
        }
        if inner.host.is_none() {
            for seat in inner.seats.iter() {
                if !seat.claimed.load(Ordering::Acquire) {
                    continue;
                }
                let thread = crate::sys::thread_name(seat.thread.load(Ordering::Relaxed));
                holders.push(Holder {
                    test: thread.clone(),
                    thread,
                    pid,
                    held_for: Some(crate::sys::coarse_elapsed(
                        seat.since.load(Ordering::Relaxed),
                    )),
                    exclusive: seat.exclusive.load(Ordering::Relaxed),
                    units: seat.units.load(Ordering::Relaxed),
                    stopped: false,
                    exited: false,
                    recorded: true,
                });
            }
        }
        let mut waiters = Vec::with_capacity(blockers.waiting.len());
        for w in &mut blockers.waiting {
            waiters.push(Waiter {
                waiting_for: w.record.age(),
                test: std::mem::take(&mut w.record.test),
                thread: std::mem::take(&mut w.record.thread),
                pid: w.record.pid,
                exclusive: w.record.exclusive,
                units: w.record.units,
                head: w.head,
                stopped: w.liveness == crate::host::Liveness::Stopped,
                liveness: w.liveness,
            });
        }
        AcquireError::Timeout(Box::new(WaitTimeout {
            waited: asked.elapsed(),
            kind: want.kind(),
            units: want.held_units(inner.local.capacity()),
            test,
            concurrency: inner.layout().per_gpu,
            capacity: inner.local.capacity(),
            holders,
            waiters,
            queued_here: inner.local.queued(),
            // What the host last found short is this request's only where it declared memory
            // the host weighs: another request of this process may have left it.
            memory: match blockers.memory {
                Some(memory) if inner.live_memory(want).is_some() => Some(memory),
                _ => None,
            },
        }))
    }
}

/// The distinct items of a list of `len` items that `same` compares by index: the index of
/// each where first seen, in that order, with how many times it came.
fn count_equal(len: usize, same: &dyn Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    'items: for item in 0..len {
        for (seen, n) in out.iter_mut() {
            if same(*seen, item) {
                *n += 1;
                continue 'items;
            }
        }
        out.push((item, 1));
    }
    out
}
