//! Backfilling: while a request waits at the head of the queue for units that are not free
//! yet, a request behind it may take free units now where, by the hold times on record, that
//! does not delay the head (what Slurm's backfill scheduler does for the first job of its
//! queue).
//!
//! The head holds the gate, so without backfilling nobody else takes a slot while it waits:
//! right for the cap and for the head, but the units it cannot use yet stand idle. A request
//! behind it (units on one GPU, not exclusive, with a hold time on record) looks at the
//! holders, GPU by GPU, against what the head needs (its units on each of its GPUs, in one
//! group):
//!
//! - the **shadow time**: the earliest moment the head could start, as the holders' grants and
//!   their hold times on record tell; a holder whose hold time is not on record, or who has
//!   held past it already, counts as letting go now (the head could start no earlier);
//! - the **extra units**: the units free at the shadow time beyond what the head needs there,
//!   counting only the holders expected to have let go by then (one not on record or overdue
//!   counts as holding on forever).
//!
//! Its arithmetic reads one clock, the host's boot clock ([`Clock`]: `CLOCK_BOOTTIME`, which
//! every process reads alike and no wall-clock step or faked time moves; the wall clock
//! only where there is no boot clock): a holder's grant time is its record's `since_boot_ms`,
//! set at the grant, compared with the backfiller's own reading. The record's wall-clock time
//! is for people only: a holder whose wall clock reads an hour ahead, or a host whose wall
//! clock steps back after a grant, would put that holder's end an hour later, and a long
//! request would be let in "before" a head that could start in seconds. A record whose grant
//! cannot be placed on the boot clock — written by an earlier version (no `since_boot_ms`),
//! of another boot (its `boot_id` is not ours), or later than our reading — is not known, as
//! one with no hold time on record: it lets go now for the shadow time, never for the extra
//! units, so nothing is let in on its strength.
//!
//! It takes its units now only if they are free and either its own hold time ends before the
//! shadow time (it is done before the head could start anyway), or its units are extra on
//! whichever GPU it lands (the head still fits at the shadow time with it holding on). A request with no hold time on record never
//! backfills. So, where the hold times hold, the head starts when it would have without
//! backfilling; a backfilled request that overruns delays it by at most its overrun.
//!
//! One backfiller decides at a time: each holds `gpu0.backfill` locked while it counts, takes
//! and writes its records, so that the next one counts it. A holder of several slots lets go
//! of them under the same lock (waiting [`RELEASE_WAIT`] at most for it), so that no count
//! sees some of them free and the others held on (and the head, which could start now, as
//! waiting for them). The first backfiller of a directory makes `gpu0.backfill`; until then
//! there is nothing to lock, and a releasing process looks for it at most every
//! [`MISSING_RECHECK`]. It counts by the holders' records,
//! and only where they allow it by the slots' locks too (a slot with a blank record may be
//! held by a holder not yet recorded): a head that can start now never finds a slot locked
//! for a moment by a count. This only orders requests: the cap
//! stays the slot locks, and a forged record, a forged or stale history or a stopped
//! backfiller changes at most who goes first (`docs/protocol.md`, 12).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::record::HolderRecord;
use super::tests_file::{self, TESTS_FILE};
use crate::clock::{self, BootTime};
use crate::sys;

/// The lock one backfiller at a time holds while it counts and takes, and a holder of several
/// slots while it lets go of them, in the slot directory; made by the first backfiller.
pub(crate) const BACKFILL_FILE: &str = "gpu0.backfill";

/// How long a release of several slots waits for `gpu0.backfill` before it lets go of its
/// slots without it: a backfiller holds it for microseconds, and one that holds it longer is
/// stopped, so decides nothing meanwhile.
pub(crate) const RELEASE_WAIT: Duration = Duration::from_millis(50);

/// How long a process that found `gpu0.backfill` missing at a release of several slots goes
/// on releasing without looking for it again: releases where nothing backfills cost no more
/// than a look now and then.
pub(crate) const MISSING_RECHECK: Duration = Duration::from_millis(100);

/// How a request may take units past the waiting head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backfill {
    /// Its hold time ends before the head could start.
    Before,
    /// The head will not need the units it takes.
    Beside,
}

/// One GPU's units as backfilling counts them: how many are free, and for each held one when
/// its holder is expected to let go (milliseconds of [`Clock`]; `None`: not known, or
/// overdue).
#[derive(Clone, Debug, Default)]
pub(crate) struct GpuUnits {
    pub(crate) free: usize,
    pub(crate) ends: Vec<Option<u64>>,
}

/// What the head of the queue waits for: `units` free on each of `gpus` GPUs of one of
/// `groups` (an exclusive head: every unit of every GPU, one group of them all).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadNeeds<'a> {
    pub(crate) units: usize,
    pub(crate) gpus: usize,
    pub(crate) groups: &'a [Vec<usize>],
}

impl HeadNeeds<'_> {
    /// Whether the head could start with `avail[g]` units free on each GPU.
    fn fits(&self, avail: &[usize]) -> bool {
        for group in self.groups {
            let mut enough = 0;
            for &g in group {
                if let Some(&a) = avail.get(g)
                    && a >= self.units
                {
                    enough += 1;
                }
            }
            if enough >= self.gpus {
                return true;
            }
        }
        false
    }
}

/// The units free at time `t` on each of `gpus`: holders not on record let go now
/// (`unknown_now`), or never.
fn avail(gpus: &[GpuUnits], t: u64, unknown_now: bool) -> Vec<usize> {
    let mut avail = Vec::with_capacity(gpus.len());
    for g in gpus {
        let mut units = g.free;
        for end in &g.ends {
            let gone = match end {
                Some(end) => *end <= t,
                None => unknown_now,
            };
            if gone {
                units += 1;
            }
        }
        avail.push(units);
    }
    avail
}

/// The shadow time: the earliest moment at or after `now_ms` at which the head could start,
/// holders not on record letting go now and the others when expected (an end already past
/// counts as now).
fn shadow_time(now_ms: u64, head: &HeadNeeds<'_>, gpus: &[GpuUnits]) -> Option<u64> {
    let mut times: Vec<u64> = Vec::new();
    for g in gpus {
        for end in &g.ends {
            if let Some(end) = *end {
                times.push(end.max(now_ms));
            }
        }
    }
    times.push(now_ms);
    crate::order::sort_dedup(&mut times);
    for &t in &times {
        let at_t = avail(gpus, t, true);
        if head.fits(&at_t) {
            return Some(t);
        }
    }
    None
}

/// Whether a request of `units` units on one GPU whose hold time on record is `hold_ms` may
/// take units now, at `now_ms`, past a head that needs `head`, the GPUs' units being `gpus`.
pub(crate) fn decide(
    now_ms: u64,
    head: &HeadNeeds<'_>,
    gpus: &[GpuUnits],
    units: usize,
    hold_ms: u64,
) -> Option<Backfill> {
    let mut free = Vec::with_capacity(gpus.len());
    let mut room = false;
    for g in gpus {
        free.push(g.free);
        room |= g.free >= units;
    }
    // Where it could go; and nothing goes past a head that can start now.
    if units == 0 || !room || head.fits(&free) {
        return None;
    }
    let shadow = shadow_time(now_ms, head, gpus)?;
    if shadow > now_ms && now_ms.saturating_add(hold_ms) <= shadow {
        return Some(Backfill::Before);
    }
    // Beside: wherever it lands, the head still fits at the shadow time though holders not on
    // record never let go and this request holds on too.
    let at_shadow = avail(gpus, shadow, false);
    for (g, &f) in free.iter().enumerate() {
        if f < units {
            continue;
        }
        let mut left = at_shadow.clone();
        left[g] -= units;
        if !head.fits(&left) {
            return None;
        }
    }
    Some(Backfill::Beside)
}

/// The clock backfilling's arithmetic reads, as read once per count: the boot clock where the
/// host has one, else the wall clock (no other clock is shared by every process there).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Clock {
    /// The boot clock, which no wall-clock step, skew or faked time moves.
    Boot(BootTime),
    /// Unix milliseconds.
    Wall(u64),
}

impl Clock {
    /// The clock, read now.
    pub(crate) fn now() -> Clock {
        match clock::boot_now() {
            Some(boot) => Clock::Boot(boot),
            None => Clock::Wall(clock::now_unix_ms()),
        }
    }

    /// The reading, milliseconds.
    pub(crate) fn ms(&self) -> u64 {
        match self {
            Clock::Boot(boot) => boot.ms,
            Clock::Wall(ms) => *ms,
        }
    }

    /// When holder record `r` says its permit was granted, on this clock; `None` where it cannot
    /// be placed on it: no boot-clock time in it (a record of an earlier version), one of
    /// another boot, or a time later than this reading.
    pub(crate) fn granted(&self, r: &HolderRecord) -> Option<u64> {
        let at = match self {
            Clock::Boot(now) => r.boot_ms_in(*now)?,
            Clock::Wall(_) => r.since_unix_ms,
        };
        if at <= self.ms() { Some(at) } else { None }
    }
}

/// When a holder granted at `granted_ms` ([`Clock::granted`]) whose hold time on record is
/// `hold_ms` is expected to let go; `None` when not known (no grant time that can be placed
/// on the clock, or no hold time on record), or already past at `now_ms` (overdue: it may hold
/// on for any time yet).
pub(crate) fn expected_end(
    granted_ms: Option<u64>,
    hold_ms: Option<u64>,
    now_ms: u64,
) -> Option<u64> {
    let end = granted_ms?.saturating_add(hold_ms?);
    if end > now_ms { Some(end) } else { None }
}

/// The tests' hold times on record, milliseconds (rounded up), by `<binary>::<test>` (how run
/// records name a test).
#[derive(Debug, Default)]
pub(crate) struct HoldTimes(HashMap<String, u64>);

impl HoldTimes {
    /// The hold times as [`TESTS_FILE`] of slot directory `dir`'s state directory records them
    /// now: read once per process by a request that waits behind a head. Never waits: read
    /// without the file's lock (a writer replaces it in one write; a line cut short is left
    /// out), never through a link nor from a FIFO, at most 8 MiB; garbage lines are left out,
    /// and a file that cannot be read gives none.
    pub(crate) fn read(dir: &Path) -> HoldTimes {
        let state = crate::config::Config::global().state_dir_for(dir);
        // Where the state directory could not be made, the slot directory keeps the file.
        let mut found = None;
        for d in &[state.as_path(), dir] {
            if let Some(file) = tests_file::open_own(&tests_file::state_path(d, TESTS_FILE)) {
                found = Some(file);
                break;
            }
        }
        let Some(file) = found else {
            return HoldTimes::default();
        };
        let mut buf = vec![0u8; tests_file::READ_LIMIT];
        let Ok(n) = sys::read_at_start(&file, &mut buf) else {
            return HoldTimes::default();
        };
        buf.truncate(n);
        HoldTimes::parse(&String::from_utf8_lossy(&buf))
    }

    /// The hold times of [`TESTS_FILE`]'s lines in `text`, garbage left out.
    fn parse(text: &str) -> HoldTimes {
        let mut times = HashMap::new();
        let (mut lines, _) = tests_file::parse(text);
        for t in &mut lines {
            times.insert(std::mem::take(&mut t.test), t.us.div_ceil(1000));
        }
        HoldTimes(times)
    }

    /// The hold time on record of test `test` of binary `binary`.
    pub(crate) fn of(&self, binary: Option<&str>, test: &str) -> Option<u64> {
        if self.0.is_empty() {
            return None;
        }
        self.0
            .get(&crate::nextest::test_key(binary?, test))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    /// `decide` on one GPU: a head of `need` units, `free` units free, the others' ends.
    fn one(
        need: usize,
        free: usize,
        ends: &[Option<u64>],
        units: usize,
        hold: u64,
    ) -> Option<Backfill> {
        let groups = [vec![0]];
        let head = HeadNeeds {
            units: need,
            gpus: 1,
            groups: &groups,
        };
        let gpu = GpuUnits {
            free,
            ends: ends.to_vec(),
        };
        decide(NOW, &head, &[gpu], units, hold)
    }

    #[test]
    fn the_mixed_suite_packs_light_tests_beside_a_heavy_holder() {
        // N = 8; a heavy holder of 5 units until NOW + 250; the head needs 5; 3 free.
        let ends = [Some(NOW + 250); 5];
        // Done when the holder lets go, or fitting in the 3 units the head will not need then,
        // however long.
        assert_eq!(one(5, 3, &ends, 1, 250), Some(Backfill::Before));
        assert_eq!(one(5, 3, &ends, 1, 251), Some(Backfill::Beside));
        assert_eq!(one(5, 3, &ends, 3, 10_000), Some(Backfill::Beside));
        assert_eq!(one(5, 3, &ends, 4, 10), None, "more than is free");
    }

    #[test]
    fn a_request_done_before_the_head_could_start_goes_first() {
        // N = 4, an exclusive head (needs 4); 2 held until NOW + 1000, 2 free.
        let ends = [Some(NOW + 1000), Some(NOW + 1000)];
        assert_eq!(one(4, 2, &ends, 1, 900), Some(Backfill::Before));
        assert_eq!(one(4, 2, &ends, 2, 1000), Some(Backfill::Before));
        // One that would still hold a unit when the head could start: no spare units then.
        assert_eq!(one(4, 2, &ends, 1, 1001), None);
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
        assert_eq!(one(5, 2, &ends, 2, 1000), Some(Backfill::Before));
        assert_eq!(one(5, 2, &ends, 1, 1_000_000), Some(Backfill::Beside));
        assert_eq!(one(5, 2, &ends, 2, 1_000_000), None);
        // Where the holders not on record alone would make room for the head, the shadow is
        // now: nothing is done before it.
        let ends = [None, None, None, Some(NOW + 1000)];
        assert_eq!(one(5, 2, &ends, 1, 1), None);
    }

    #[test]
    fn nothing_backfills_while_the_head_can_start() {
        let ends = [Some(NOW + 1000); 3];
        assert_eq!(one(5, 5, &ends, 1, 1), None);
        assert_eq!(one(4, 5, &ends, 1, 1), None);
    }

    #[test]
    fn overdue_holders_and_zero_units_never_make_room() {
        assert_eq!(
            expected_end(Some(NOW - 500), Some(400), NOW),
            None,
            "overdue"
        );
        assert_eq!(
            expected_end(Some(NOW - 500), Some(600), NOW),
            Some(NOW + 100)
        );
        assert_eq!(expected_end(Some(NOW), None, NOW), None);
        assert_eq!(expected_end(None, Some(600), NOW), None, "no grant time");
        assert_eq!(expected_end(Some(NOW), Some(u64::MAX), NOW), Some(u64::MAX));
        assert_eq!(one(5, 3, &[Some(NOW + 9); 5], 0, 1), None);
    }

    /// A holder's record with grant time `boot_ms` of boot `boot_id` and a wall-clock time an
    /// hour ahead of `NOW`.
    fn granted(boot_ms: Option<u64>, boot_id: Option<&str>) -> HolderRecord {
        HolderRecord {
            pid: 1,
            test: "short".into(),
            binary: Some("suite".into()),
            thread: "main".into(),
            since_unix_ms: NOW + 3_600_000,
            since_boot_ms: boot_ms,
            boot_id: boot_id.map(str::to_string),
            exclusive: false,
            concurrency: 2,
            units: 1,
            gpus: 1,
            memory: None,
        }
    }

    #[test]
    fn grant_times_are_read_on_the_boot_clock_and_one_that_cannot_be_placed_is_not_known() {
        let now = Clock::Boot(BootTime {
            ms: NOW,
            boot_id: Some("this"),
        });
        // The wall-clock time, an hour ahead, is not read.
        let r = granted(Some(NOW - 500), Some("this"));
        assert_eq!(now.granted(&r), Some(NOW - 500));
        assert_eq!(now.granted(&granted(Some(NOW), Some("this"))), Some(NOW));
        for (r, what) in [
            (granted(None, None), "a record of an earlier version"),
            (granted(None, Some("this")), "no boot-clock time"),
            (granted(Some(NOW + 1), Some("this")), "later than now"),
            (granted(Some(NOW - 500), Some("another")), "another boot"),
            (granted(Some(NOW - 500), None), "no boot named"),
        ] {
            assert_eq!(now.granted(&r), None, "{what}");
        }
        // A host that names no boot compares the times alone.
        let unnamed = Clock::Boot(BootTime {
            ms: NOW,
            boot_id: None,
        });
        assert_eq!(
            unnamed.granted(&granted(Some(NOW - 500), None)),
            Some(NOW - 500)
        );
        // Where there is no boot clock, the wall clock: a time later than now is not known.
        let r = granted(None, None);
        assert_eq!(
            Clock::Wall(NOW + 3_600_000).granted(&r),
            Some(NOW + 3_600_000)
        );
        assert_eq!(Clock::Wall(NOW).granted(&r), None);
    }

    #[test]
    fn a_holder_an_hour_ahead_lets_no_long_request_past_the_head() {
        // N = 2: a holder of 1 unit granted 1 s ago with 2 s on record, a head for 2, 1 free,
        // a request of 12 s. Read on the boot clock, the holder ends in 1 s: the request would
        // still hold its unit then.
        let hold = Some(2000);
        let on_boot = expected_end(Some(NOW - 1000), hold, NOW);
        assert_eq!(one(2, 1, &[on_boot], 1, 12_000), None);
        // Its wall-clock time, an hour ahead, would have let the request in "before" the head.
        let on_wall = expected_end(Some(NOW + 3_600_000 - 1000), hold, NOW);
        assert_eq!(one(2, 1, &[on_wall], 1, 12_000), Some(Backfill::Before));
        // A grant that cannot be placed: not known, so nothing goes past the head.
        assert_eq!(one(2, 1, &[expected_end(None, hold, NOW)], 1, 12_000), None);
        assert_eq!(one(2, 1, &[expected_end(None, hold, NOW)], 1, 1), None);
    }

    #[test]
    fn a_layout_that_cannot_hold_the_head_backfills_nothing() {
        // The head needs more units than the GPU has (a layout rewritten since): no shadow.
        assert_eq!(one(9, 2, &[Some(NOW + 5); 4], 1, 1), None);
    }

    #[test]
    fn on_several_gpus_the_head_needs_its_units_on_enough_gpus_of_one_group() {
        // Two GPUs of 4, each 3 held until NOW + 1000 and 1 free; the head wants 2 on both.
        let gpu = GpuUnits {
            free: 1,
            ends: vec![Some(NOW + 1000); 3],
        };
        let both = [vec![0, 1]];
        let k_gpu = HeadNeeds {
            units: 2,
            gpus: 2,
            groups: &both,
        };
        let gpus = [gpu.clone(), gpu.clone()];
        assert_eq!(decide(NOW, &k_gpu, &gpus, 1, 500), Some(Backfill::Before));
        // Either GPU keeps 3 of its 4 for the head at the shadow time.
        assert_eq!(
            decide(NOW, &k_gpu, &gpus, 1, 10_000),
            Some(Backfill::Beside)
        );
        assert_eq!(
            decide(NOW, &k_gpu, &gpus, 2, 10_000),
            None,
            "2 free on neither"
        );
        let exclusive = HeadNeeds {
            units: 4,
            gpus: 2,
            groups: &both,
        };
        assert_eq!(
            decide(NOW, &exclusive, &gpus, 1, 500),
            Some(Backfill::Before)
        );
        assert_eq!(decide(NOW, &exclusive, &gpus, 1, 10_000), None);
        // Groups [0, 1] and [2, 3]; the head wants two whole GPUs of one group. GPUs 2 and 3
        // are held until much later, so group [0, 1] serves it first, at NOW + 1000.
        let groups = [vec![0, 1], vec![2, 3]];
        let whole = HeadNeeds {
            units: 4,
            gpus: 2,
            groups: &groups,
        };
        let gpus = [
            GpuUnits {
                free: 4,
                ends: vec![],
            },
            GpuUnits {
                free: 3,
                ends: vec![Some(NOW + 1000)],
            },
            GpuUnits {
                free: 0,
                ends: vec![Some(NOW + 100_000); 4],
            },
            GpuUnits {
                free: 0,
                ends: vec![Some(NOW + 100_000); 4],
            },
        ];
        assert_eq!(decide(NOW, &whole, &gpus, 1, 500), Some(Backfill::Before));
        assert_eq!(
            decide(NOW, &whole, &gpus, 1, 10_000),
            None,
            "it would land on 0 or 1"
        );
        // Held by holders not on record instead, GPUs 2 and 3 could be let go now: the head
        // could start now, and nothing is done before that.
        let unknown = GpuUnits {
            free: 0,
            ends: vec![None; 4],
        };
        let gpus = [gpus[0].clone(), gpus[1].clone(), unknown.clone(), unknown];
        assert_eq!(decide(NOW, &whole, &gpus, 1, 500), None);
        // Once GPU 1's holder has let go, the head can start now: nothing goes past it.
        let gpus = [
            GpuUnits {
                free: 4,
                ends: vec![],
            },
            GpuUnits {
                free: 4,
                ends: vec![],
            },
        ];
        assert_eq!(decide(NOW, &whole, &gpus, 1, 1), None);
    }

    #[test]
    fn hold_times_round_up_to_milliseconds_and_need_a_binary() {
        let times = HoldTimes::parse(&format!(
            "{{\"test\":\"bin::a\",\"us\":1500}}\nnot json\n{{\"test\":\"bin::b\",\"us\":{}}}\n",
            u64::MAX
        ));
        assert_eq!(times.of(Some("bin"), "a"), Some(2));
        assert_eq!(times.of(Some("bin"), "b"), Some(u64::MAX.div_ceil(1000)));
        assert_eq!(times.of(None, "a"), None);
        assert_eq!(times.of(Some("other"), "a"), None);
    }

    #[test]
    fn a_name_longer_than_records_keep_finds_its_hold_time() {
        // The history keys the test by its name as run records cut it; the holder's record
        // names it whole.
        let long = "n".repeat(crate::nextest::LONGEST_TEXT + 10);
        let recorded = crate::nextest::cut(long.clone());
        let line = format!("{{\"test\":\"bin::{recorded}\",\"us\":3000,\"seen\":1}}\n");
        let times = HoldTimes::parse(&line);
        assert_eq!(times.of(Some("bin"), &long), Some(3));
        assert_eq!(times.of(Some("bin"), &recorded), Some(3));
    }
}
