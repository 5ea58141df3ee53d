//! Backfilling: while a request waits at the head of the queue for units that are not free
//! yet, a request behind it may take free units now where, by the hold times on record, that
//! does not delay the head (what Slurm's backfill scheduler does for the first job of its
//! queue).
//!
//! The head holds the gate, so without backfilling nobody else takes a slot while it waits:
//! right for the cap and for the head, but the units it cannot use yet stand idle. A request
//! behind it (one GPU, not exclusive, with a hold time on record) looks at the holders:
//!
//! - the **shadow time**: the earliest moment the head could start, as the holders' grants and
//!   their hold times on record tell; a holder whose hold time is not on record, or who has
//!   held past it already, counts as letting go now (the head could start no earlier);
//! - the **extra units**: the units free at the shadow time beyond the head's need, counting
//!   only the holders expected to have let go by then (one not on record or overdue counts as
//!   holding on forever).
//!
//! It takes its units now only if they are free and either its own hold time ends before the
//! shadow time (it is done before the head could start anyway), or it takes no more than the
//! extra units (the head will not need them). A request with no hold time on record never
//! backfills. So, where the hold times hold, the head starts when it would have without
//! backfilling; a backfilled request that overruns delays it by at most its overrun.
//!
//! One backfiller decides at a time: each holds `gpu0.backfill` locked while it counts, takes
//! and writes its records, so that the next one counts it. This only orders requests: the cap
//! stays the slot locks, and a forged record, a forged or stale history or a stopped
//! backfiller changes at most who goes first (`docs/protocol.md`, 12).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::sys;

/// The tests' reference hold times, one JSON line a test, in the state directory: written by
/// [`tune`](crate::tune) from the recorded runs, read here.
pub(crate) const TESTS_FILE: &str = "gpu0.tests";

/// The most of [`TESTS_FILE`] that is read.
const READ_LIMIT: usize = 8 << 20;

/// What backfilling reads of a line of [`TESTS_FILE`].
#[derive(Deserialize)]
struct TestLine {
    /// `<binary>::<test>`.
    test: String,
    /// Its reference hold time, microseconds.
    us: u64,
}

/// The tests' hold times as [`TESTS_FILE`] records them now, by `<binary>::<test>` (how run
/// records name a test): read once per process by a request that waits behind a heavy head.
/// Never waits: read without the file's lock (a writer replaces it in one write; a line cut
/// short is left out), never through a link nor from a FIFO, at most 8 MiB; garbage lines are
/// left out, and a file that cannot be read gives none.
pub(crate) fn recorded_hold_times(dir: &Path) -> HashMap<String, std::time::Duration> {
    let state = crate::config::Config::global().state_dir_for(dir);
    // Where the state directory could not be made, the slot directory keeps the file.
    let Some(file) = [state.as_path(), dir]
        .into_iter()
        .find_map(|d| sys::open_regular_for_reading(&d.join(TESTS_FILE)).ok())
    else {
        return HashMap::new();
    };
    let mut buf = vec![0u8; READ_LIMIT];
    let Ok(n) = sys::read_at_start(&file, &mut buf) else {
        return HashMap::new();
    };
    buf.truncate(n);
    String::from_utf8_lossy(&buf)
        .lines()
        .filter_map(|l| serde_json::from_str::<TestLine>(l).ok())
        .map(|t| (t.test, std::time::Duration::from_micros(t.us)))
        .collect()
}

/// How a request may take units past the waiting head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backfill {
    /// Its hold time ends before the head could start.
    Before,
    /// The head will not need the units it takes.
    Beside,
}

/// Whether a request of `units` units whose hold time on record is `hold_ms` may take units
/// now, at `now_ms`, past a head that needs `need` units: `free` units are free, and each held
/// unit is expected to be let go at `ends[i]` (Unix milliseconds; `None`: not known, or
/// overdue). Every unit of the GPU is either free or in `ends`.
pub(crate) fn decide(
    now_ms: u64,
    need: usize,
    free: usize,
    ends: &[Option<u64>],
    units: usize,
    hold_ms: u64,
) -> Option<Backfill> {
    if units == 0 || units > free || free >= need {
        return None;
    }
    let unknown = ends.iter().filter(|e| e.is_none()).count();
    let mut known: Vec<u64> = ends.iter().flatten().map(|&end| end.max(now_ms)).collect();
    known.sort_unstable();
    // The shadow time: holders not on record let go now, the others as expected.
    let mut ready = free + unknown;
    let mut shadow = now_ms;
    let mut released = 0;
    while ready < need {
        shadow = *known.get(released)?;
        ready += 1;
        released += 1;
    }
    // Every holder expected to let go at that same moment.
    while known.get(released).is_some_and(|&end| end <= shadow) {
        released += 1;
    }
    let extra = (free + released).saturating_sub(need);
    if shadow > now_ms && now_ms.saturating_add(hold_ms) <= shadow {
        Some(Backfill::Before)
    } else if units <= extra {
        Some(Backfill::Beside)
    } else {
        None
    }
}

/// When a holder granted at `since_ms` whose hold time on record is `hold_ms` is expected to
/// let go; `None` when unknown, or already past at `now_ms` (overdue: it may hold on for
/// any time yet).
pub(crate) fn expected_end(since_ms: u64, hold_ms: Option<u64>, now_ms: u64) -> Option<u64> {
    let end = since_ms.saturating_add(hold_ms?);
    (end > now_ms).then_some(end)
}

/// The tests' hold times on record, milliseconds (rounded up), by `<binary>::<test>`.
#[derive(Debug, Default)]
pub(crate) struct HoldTimes(HashMap<String, u64>);

impl HoldTimes {
    pub(crate) fn new(times: HashMap<String, std::time::Duration>) -> HoldTimes {
        HoldTimes(
            times
                .into_iter()
                .map(|(k, d)| {
                    (
                        k,
                        u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX),
                    )
                })
                .collect(),
        )
    }

    /// The hold time on record of test `test` of binary `binary`.
    pub(crate) fn of(&self, binary: Option<&str>, test: &str) -> Option<u64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&format!("{}::{test}", binary?)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    #[test]
    fn the_mixed_suite_packs_light_tests_beside_a_heavy_holder() {
        // N = 8; a heavy holder of 5 units until NOW + 250; the head needs 5; 3 free.
        let ends = [Some(NOW + 250); 5];
        // Done when the holder lets go, or fitting in the 3 units the head will not need then,
        // however long.
        assert_eq!(decide(NOW, 5, 3, &ends, 1, 250), Some(Backfill::Before));
        assert_eq!(decide(NOW, 5, 3, &ends, 1, 251), Some(Backfill::Beside));
        assert_eq!(decide(NOW, 5, 3, &ends, 3, 10_000), Some(Backfill::Beside));
        assert_eq!(decide(NOW, 5, 3, &ends, 4, 10), None, "more than is free");
    }

    #[test]
    fn a_request_done_before_the_head_could_start_goes_first() {
        // N = 4, an exclusive head (needs 4); 2 held until NOW + 1000, 2 free.
        let ends = [Some(NOW + 1000), Some(NOW + 1000)];
        assert_eq!(decide(NOW, 4, 2, &ends, 1, 900), Some(Backfill::Before));
        assert_eq!(decide(NOW, 4, 2, &ends, 2, 1000), Some(Backfill::Before));
        // One that would still hold a unit when the head could start: no spare units then.
        assert_eq!(decide(NOW, 4, 2, &ends, 1, 1001), None);
    }

    #[test]
    fn a_holder_not_on_record_lets_go_now_for_the_shadow_and_never_for_the_extra() {
        // N = 8, head needs 5, 2 free; 2 units of a holder not on record, 4 until NOW + 1000.
        let ends = [
            None,
            None,
            Some(NOW + 1000),
            Some(NOW + 1000),
            Some(NOW + 1000),
            Some(NOW + 1000),
        ];
        // Shadow NOW + 1000 (2 + 2 not on record + 4 >= 5); extra 2 + 4 - 5 = 1.
        assert_eq!(decide(NOW, 5, 2, &ends, 2, 1000), Some(Backfill::Before));
        assert_eq!(
            decide(NOW, 5, 2, &ends, 1, 1_000_000),
            Some(Backfill::Beside)
        );
        assert_eq!(decide(NOW, 5, 2, &ends, 2, 1_000_000), None);
        // Where the holders not on record alone would make room for the head, the shadow is
        // now: nothing is done before it.
        let ends = [None, None, None, Some(NOW + 1000)];
        assert_eq!(decide(NOW, 5, 2, &ends, 1, 1), None);
    }

    #[test]
    fn nothing_backfills_while_the_head_can_start() {
        let ends = [Some(NOW + 1000); 3];
        assert_eq!(decide(NOW, 5, 5, &ends, 1, 1), None);
        assert_eq!(decide(NOW, 4, 5, &ends, 1, 1), None);
    }

    #[test]
    fn overdue_holders_and_zero_units_never_make_room() {
        assert_eq!(expected_end(NOW - 500, Some(400), NOW), None, "overdue");
        assert_eq!(expected_end(NOW - 500, Some(600), NOW), Some(NOW + 100));
        assert_eq!(expected_end(NOW, None, NOW), None);
        assert_eq!(expected_end(NOW, Some(u64::MAX), NOW), Some(u64::MAX));
        assert_eq!(decide(NOW, 5, 3, &[Some(NOW + 9); 5], 0, 1), None);
    }

    #[test]
    fn a_layout_that_cannot_hold_the_head_backfills_nothing() {
        // The head needs more units than the GPU has (a layout rewritten since): no shadow.
        assert_eq!(decide(NOW, 9, 2, &[Some(NOW + 5); 4], 1, 1), None);
    }

    #[test]
    fn hold_times_round_up_to_milliseconds_and_need_a_binary() {
        let times = HoldTimes::new(HashMap::from([
            ("bin::a".to_string(), std::time::Duration::from_micros(1500)),
            (
                "bin::b".to_string(),
                std::time::Duration::from_secs(u64::MAX),
            ),
        ]));
        assert_eq!(times.of(Some("bin"), "a"), Some(2));
        assert_eq!(times.of(Some("bin"), "b"), Some(u64::MAX));
        assert_eq!(times.of(None, "a"), None);
        assert_eq!(times.of(Some("other"), "a"), None);
    }
}
