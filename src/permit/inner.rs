//! The pool's shared state ([`PoolInner`]): what the pool handle, its permits and its builder
//! all point at, with what the acquisition and release paths read and write in it. Below the
//! guards and the pool's public face; it knows neither.

use std::path::Path;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::Duration;

use super::budget::{Budget, probed_memory};
use super::holder::Holders;
use super::inherited::Inherited;
use super::learned::Learned;
use super::local::LocalPool;
use super::observe::{Held, Observers, Release, Shown};
use super::seat::{GUARD_BITS, NO_SLOT, Seat};
use super::want::Want;
use crate::host::{HostError, HostSlots, Layout};
use crate::sync::Ordering;

pub(super) struct PoolInner {
    pub(super) local: LocalPool,
    pub(super) seats: Box<[Seat]>,
    /// Who holds its permits: threads, and tests with learned weights.
    pub(super) holders: Holders,
    pub(super) host: Option<HostSlots>,
    /// Why the global pool has no host slots: every acquisition fails with it.
    pub(super) host_error: Option<HostError>,
    pub(super) timeout: Duration,
    /// What watches its permits come and go (records, trace, watchdog, hints): told at a few
    /// points of the acquisition and release paths, with plain values.
    pub(super) observers: Observers,
    /// GPUs the permits span; a permit's device is its slot modulo this.
    pub(super) gpus: usize,
    /// Permits per GPU, N: the capacity over the GPUs.
    pub(super) per_gpu: usize,
    /// Where the slot directory's layout, set by another user, has more permits per GPU than
    /// this process asked for: the units each of its permits holds besides its own on each of
    /// its GPUs (the directory's N less its own), so that it is granted only while at most
    /// its own N units of a GPU are held (`HostSlots::declined`). 0 otherwise.
    pub(super) pad: usize,
    /// The groups a k-GPU request stays within.
    pub(super) topology: crate::host::Topology,
    pub(super) placement: crate::host::Placement,
    /// The CUDA ordinal of each GPU (by device), where a permit that declares memory waits
    /// for it to be free on its GPU now (NVML); `None`: the budget alone.
    pub(super) live: Option<Vec<usize>>,
    /// Whether requests behind a waiting head may take units past it (`host::backfill`).
    pub(super) backfill: bool,
    /// The permit a parent holds for this process, when the pool works inside it.
    pub(super) inherited: Option<Inherited>,
    /// Where the per-GPU memory budget comes from.
    pub(super) budget_source: Option<crate::config::MemoryBudget>,
    /// The per-GPU memory budget, resolved at the first request that declares memory (a
    /// percentage needs the probe), with what turns declarations into units.
    pub(super) budget: OnceLock<Option<Budget>>,
    /// Without a configured budget, ask the probe (the global pool only).
    pub(super) probe_budget: bool,
    /// Learned weights (`GPU_TEST_PERMIT_WEIGHTS=learned`), for a pool with host slots that
    /// is not inside an inherited permit; `None` is off.
    pub(super) learned: Option<Learned>,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<PoolInner>();
};

impl PoolInner {
    /// N per GPU and the GPUs, as this pool counts them.
    pub(super) fn layout(&self) -> Layout {
        Layout {
            per_gpu: self.per_gpu,
            gpus: self.gpus,
        }
    }

    /// This process's own N: the directory's N per GPU less the units each permit holds
    /// besides its own where another user set the directory's layout higher (`pad`).
    pub(super) fn own_per_gpu(&self) -> usize {
        self.per_gpu - self.pad
    }

    /// Units of one GPU as N counts them; inside an inherited permit, N of the parent's slot
    /// directory (memory is converted with it).
    pub(super) fn units_per_gpu(&self) -> usize {
        match &self.inherited {
            Some(inherited) => inherited.permit.per_gpu,
            None => self.own_per_gpu(),
        }
    }

    /// The most units one permit of this pool can hold, and whether an inherited permit is what
    /// sets it (the units a shared parent permit holds; N otherwise: an exclusive parent
    /// holds N on each GPU, and one request's units come from one GPU).
    pub(super) fn unit_limit(&self) -> (usize, bool) {
        match &self.inherited {
            Some(inherited) if !inherited.permit.exclusive => {
                (inherited.permit.slots.len() / inherited.gpus(), true)
            }
            Some(inherited) => (inherited.permit.per_gpu, true),
            None => (self.own_per_gpu(), false),
        }
    }

    /// Where `want` waits for its declared memory to be free on its GPU (NVML): the bytes and
    /// the CUDA ordinal of each GPU; `None` for a request that declares none, an exclusive one,
    /// and a pool without live memory.
    pub(super) fn live_memory(&self, want: Want) -> Option<(u64, &[usize])> {
        match (&self.live, want.memory) {
            (Some(ordinals), Some(bytes)) if !want.exclusive => Some((bytes, ordinals.as_slice())),
            _ => None,
        }
    }

    /// The most GPUs one permit of this pool can span (its widest group; inside an inherited
    /// permit, the parent's GPUs), and the pool's GPUs.
    pub(super) fn gpu_limit(&self) -> (usize, usize) {
        match &self.inherited {
            Some(inherited) => (inherited.gpus(), inherited.gpus()),
            None => (self.topology.widest(), self.gpus),
        }
    }

    /// The units of a memory request that needs neither checks nor a first resolution of the
    /// budget: it asks for 1 unit and is not exclusive, the budget is resolved, and the
    /// declaration is one the budget serves inline ([`Budget::inline_units`]). `None`: the
    /// request goes to [`PermitPool::resolve`].
    #[inline(always)]
    pub(super) fn inline_memory_units(&self, want: Want) -> Option<usize> {
        let bytes = want.memory?;
        if want.exclusive || want.units != 1 {
            return None;
        }
        self.budget.get()?.as_ref()?.inline_units(bytes)
    }
}

impl PoolInner {
    /// The per-GPU memory budget (resolved once; a percentage or no setting asks the CUDA
    /// probe).
    pub(super) fn memory_budget(&self) -> Option<Budget> {
        *self.budget.get_or_init(|| {
            let own = match self.budget_source {
                Some(crate::config::MemoryBudget::Bytes(b)) => Some(b),
                Some(crate::config::MemoryBudget::Percent(p)) => {
                    probed_memory(true).map(|m| (m as f64 * p / 100.0) as u64)
                }
                // The global pool only: a pool from the builder has the budget it was given.
                None if self.probe_budget => probed_memory(false),
                None => None,
            };
            let own = match own {
                Some(b) if b > 0 => Some(b),
                _ => None,
            };
            // Processes sharing host slots convert with one budget, as they share one N.
            let agreed = match &self.host {
                Some(host) => host.agree_on_budget(own),
                None => own,
            };
            let (limit, _) = self.unit_limit();
            Some(Budget::new(agreed?, self.units_per_gpu(), limit))
        })
    }
}

impl PoolInner {
    /// The pool's slot directory, where it has host slots.
    pub(super) fn slot_dir(&self) -> Option<&Path> {
        match &self.host {
            Some(host) => Some(host.dir()),
            None => None,
        }
    }

    /// The host slots held by the permit in `seat` (see [`GpuTestPermit::slots`]).
    pub(super) fn held_slots(&self, seat: usize) -> Vec<usize> {
        let s = &self.seats[seat];
        let first = s.first_slot.load(Ordering::Relaxed);
        if first == NO_SLOT {
            Vec::new()
        } else if s.exclusive.load(Ordering::Relaxed) {
            (0..self.local.capacity()).collect()
        } else if s.units.load(Ordering::Relaxed) == 1 {
            vec![first]
        } else {
            s.slots.lock().clone()
        }
    }

    /// Claims a free seat for a permit that holds its units. Returns the seat and its
    /// generation.
    pub(super) fn claim_seat(&self) -> (usize, u64) {
        loop {
            let mut i = 0;
            while i < self.seats.len() {
                let seat = &self.seats[i];
                if seat
                    .claimed
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    let generation = (seat.word.load(Ordering::Relaxed) >> GUARD_BITS) + 1;
                    seat.word
                        .store(generation << GUARD_BITS | 1, Ordering::Release);
                    return (i, generation);
                }
                i += 1;
            }
            // Unreachable by counting (N seats, at most N permits hold units); a releasing
            // permit frees its seat before its units, so this only waits out that window.
            crate::sync::yield_now();
        }
    }

    /// Returns the permit in `seat`, whose last guard just dropped; frees the pool if its
    /// handle is gone and this was its last permit. The protocol's steps, in order: read the
    /// seat, unclaim it, return the slots, return the units; the observers hear of it before
    /// the slots go ([`Observers::releasing`]) and after ([`Observers::released`]).
    ///
    /// # Safety
    ///
    /// `this` points to a live pool, `seat` holds a permit whose last guard is gone, and the
    /// caller does not touch the pool afterwards.
    // Out of line: inlined into the guard's drop, it would cost every nested guard's drop.
    #[inline(never)]
    pub(super) unsafe fn release(this: NonNull<PoolInner>, seat: usize) {
        // SAFETY: the permit's units are out, so the pool is alive until they are returned.
        let pool = unsafe { this.as_ref() };
        let returned = pool.read_seat(seat);
        // Read everything first: once unclaimed, the seat belongs to the next permit.
        pool.seats[seat].claimed.store(false, Ordering::Release);
        // Before the slots go: the release's run record is stamped now, so that no record
        // shows this permit beside the next holder of its slots.
        let releasing = pool.observers.releasing(returned.held);
        let slot_dir = pool.slot_dir();
        let went_back = pool.return_slots(&returned.slots);
        pool.observers.released(
            releasing,
            Release {
                shown: Shown {
                    budget: pool.budget_bytes(),
                    ..returned.shown
                },
                slot_dir,
                returned: went_back,
                slots: returned.slots,
                used: returned.used,
            },
        );
        // SAFETY: as this function's; the units are its last touch of the pool.
        unsafe { PoolInner::return_units(this, returned.shown.units) };
    }

    /// Release, step 1: what the permit in `seat` held, and what its observers kept, taken out
    /// of the seat.
    fn read_seat(&self, seat: usize) -> Returned {
        let s = &self.seats[seat];
        Returned {
            shown: Shown {
                units: s.units.load(Ordering::Relaxed),
                exclusive: s.exclusive.load(Ordering::Relaxed),
                memory: s.declared_memory(),
                budget: None,
            },
            slots: self.held_slots(seat),
            used: match s.memory_used.swap(0, Ordering::Relaxed) {
                0 => None,
                bytes => Some(bytes),
            },
            held: if self.observers.keep() {
                s.observed.lock().take()
            } else {
                None
            },
        }
    }

    /// Release, step 3: the host slots `slots` go back to the slot directory. Returns whether
    /// they did: a child forked without `exec` returns nothing of its parent's.
    fn return_slots(&self, slots: &[usize]) -> bool {
        match &self.host {
            Some(host) => host.release(slots),
            None => false,
        }
    }

    /// Release, step 4: `units` go back to the process's semaphore, the last touch of the
    /// pool; a closed pool whose last units these were is freed.
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release)'s.
    unsafe fn return_units(this: NonNull<PoolInner>, units: usize) {
        // SAFETY: the units are still out, so the pool is alive.
        let pool = unsafe { this.as_ref() };
        if pool.local.release(units) {
            // SAFETY: the pool's handle is gone and this release was the last thing it
            // waited for; nothing else can reach it. It was allocated as a `Box`.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    /// The resolved per-GPU memory budget in bytes, as the observers show it.
    pub(super) fn budget_bytes(&self) -> Option<u64> {
        self.budget.get().copied().flatten().map(|b| b.bytes)
    }
}

/// What a returned permit held ([`PoolInner::read_seat`]).
struct Returned {
    shown: Shown,
    slots: Vec<usize>,
    used: Option<u64>,
    held: Option<Held>,
}
