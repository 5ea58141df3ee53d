//! Where one real permit keeps its state ([`Seat`]: N per pool, packed guard counts and
//! generations). The guards that count in a seat are in `guard`, the protocol in its header;
//! how a holder finds and joins the permit it holds, in `holder`.

use super::observe::Held;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Bits of a seat's word that count live guards; the rest is the seat's generation.
pub(super) const GUARD_BITS: u32 = 24;
pub(super) const GUARDS: u64 = (1 << GUARD_BITS) - 1;
pub(super) const NO_SLOT: usize = usize::MAX;
/// No memory declared.
pub(super) const NO_MEMORY: u64 = u64::MAX;

/// Where one real permit keeps its state. A pool has N seats, as many as it can have permits
/// (each permit holds at least one unit), so a request that got its units always finds a free
/// seat.
#[derive(Debug)]
pub(super) struct Seat {
    /// Claimed by a permit (set first on claim, cleared last on release).
    pub(super) claimed: AtomicBool,
    /// Generation (high bits) and number of live guards (low [`GUARD_BITS`]).
    pub(super) word: AtomicU64,
    pub(super) exclusive: AtomicBool,
    /// Units held (see [`GpuTestPermit::units`]).
    pub(super) units: AtomicUsize,
    /// GPUs the units are spread over (1 for an exclusive permit, which holds them all).
    pub(super) gpus: AtomicUsize,
    /// Declared memory in bytes, or [`NO_MEMORY`].
    pub(super) memory: AtomicU64,
    /// Largest measured memory use recorded (0: none).
    pub(super) memory_used: AtomicU64,
    /// The lowest host slot held, or [`NO_SLOT`].
    pub(super) first_slot: AtomicUsize,
    /// Every host slot held, for a weighted permit (units > 1, not exclusive) only.
    pub(super) slots: parking_lot::Mutex<Vec<usize>>,
    /// [`crate::sys::coarse_ns`] when granted.
    pub(super) since: AtomicU64,
    /// Thread that took it, for diagnostics.
    pub(super) thread: AtomicU64,
    /// What the observers keep of the permit while it is held (names, times, its run record
    /// and watch), only where they keep anything ([`Observers::keep`]).
    ///
    /// [`Observers::keep`]: super::observe::Observers::keep
    pub(super) observed: parking_lot::Mutex<Option<Held>>,
}

impl Seat {
    /// The memory the permit in this seat declared.
    pub(super) fn declared_memory(&self) -> Option<u64> {
        match self.memory.load(Ordering::Relaxed) {
            NO_MEMORY => None,
            bytes => Some(bytes),
        }
    }

    pub(super) fn new() -> Seat {
        Seat {
            claimed: AtomicBool::new(false),
            word: AtomicU64::new(0),
            exclusive: AtomicBool::new(false),
            units: AtomicUsize::new(0),
            gpus: AtomicUsize::new(1),
            memory: AtomicU64::new(NO_MEMORY),
            memory_used: AtomicU64::new(0),
            first_slot: AtomicUsize::new(NO_SLOT),
            slots: parking_lot::Mutex::new(Vec::new()),
            since: AtomicU64::new(0),
            thread: AtomicU64::new(0),
            observed: parking_lot::Mutex::new(None),
        }
    }
}
