//! What the slot directory's records say, read after the fact: which run just ended
//! ([`just_ended`]), a nextest run's records ([`last_run`]), the nextest hint a run left
//! ([`recorded_hint`]), and what the host's hang records say about N ([`advice`]).
//!
//! Test processes write these records through `gpu-test-permit`; only the command and the
//! tools that read them need this module.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use gpu_test_permit::__private::hangs::{HangRecord, from_the_future, trusted_at, utc_date};
use gpu_test_permit::__private::runs::{
    RecordedRun, RunRecords, RunsError, first_record_time, read_run, recorded_runs,
};

/// The records of the run of this user most recently written in `dir`, or `None` when there
/// is none. Runs of other users (in a shared directory) are left out: read one by its id
/// ([`read_run`]). To read the run that just ended, ask [`just_ended`] first: beside another
/// run, the one written last need not be it.
///
/// # Errors
///
/// As [`read_run`].
pub fn last_run(dir: &Path) -> Result<Option<RunRecords>, RunsError> {
    let Some(last) = recorded_runs(dir).into_iter().rfind(|r| r.mine) else {
        return Ok(None);
    };
    read_run(dir, &last.run_id)
}

/// How long before the first record of the newest run another run's last record may have been
/// written for it to count as beside the newest one ([`just_ended`]): longer than the time from
/// the end of a CI job's `cargo nextest run` to its `report` step.
pub const BESIDE: Duration = Duration::from_secs(30);

/// Which of this user's runs in a slot directory may be the run that just ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JustEnded {
    /// This user has no run recorded there; `others` is how many runs of other users are.
    Nothing {
        /// Runs of other users in the directory.
        others: usize,
    },
    /// One run: its id.
    One(String),
    /// Several, the most recently written last: they ran side by side, or one began right
    /// after another ended, so either may be the one a caller's run was.
    Several(Vec<RecordedRun>),
}

/// Which of this user's runs in `dir` may be the run that just ended: the run written last
/// (the newest), and every other run of this user whose file was last written no earlier than
/// [`BESIDE`] before the newest run's first record. Those ran beside the newest run (one still
/// being written is one of them), or ended just before it began: a CI job whose run ended then
/// may be asking, and the newest run is not its own. Runs of other users are never candidates:
/// nobody else can choose what this user's `report` reads.
///
/// A run that begins more than [`BESIDE`] after a caller's run ended and before the caller
/// asks is not told apart from the caller's; name the run (`report --run-id`) where jobs share
/// a slot directory.
pub fn just_ended(dir: &Path) -> JustEnded {
    let (mine, others): (Vec<RecordedRun>, Vec<RecordedRun>) =
        recorded_runs(dir).into_iter().partition(|r| r.mine);
    let Some(newest) = mine.last() else {
        return JustEnded::Nothing {
            others: others.len(),
        };
    };
    let began =
        first_record_time(dir, &newest.run_id).map_or(newest.modified, |t| t.min(newest.modified));
    let from = began.checked_sub(BESIDE).unwrap_or(SystemTime::UNIX_EPOCH);
    let candidates: Vec<RecordedRun> = mine
        .iter()
        .filter(|r| r.modified >= from)
        .cloned()
        .collect();
    match candidates.as_slice() {
        [one] => JustEnded::One(one.run_id.clone()),
        _ => JustEnded::Several(candidates),
    }
}

/// The record of the last `cargo nextest` run whose tests took permits outside a test group
/// ([`recorded_hint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedHint {
    /// The run's `NEXTEST_RUN_ID`.
    pub run_id: String,
    /// The `max-threads` of the group the hint gave: the host's permits.
    pub max_threads: usize,
    /// When its first such test took a permit, milliseconds since the Unix epoch.
    pub recorded_unix_ms: u64,
}

impl RecordedHint {
    /// The hint in one line, for the commands that show it.
    pub fn line(&self) -> String {
        format!(
            "GPU tests of cargo nextest run {} took permits outside a test group, so nextest \
             started GPU test processes that then waited for a permit; put them in a group of \
             max-threads = {} (`gpu-test-permit nextest-snippet` prints one)",
            self.run_id, self.max_threads
        )
    }
}

/// The last `cargo nextest` run recorded in slot directory `dir` whose tests took permits
/// outside a test group, or `None` when none is recorded (or the record is of an earlier
/// version, which kept only the run id).
///
/// # Errors
///
/// Reading the file failed (other than its not existing).
pub fn recorded_hint(dir: &Path) -> io::Result<Option<RecordedHint>> {
    let text =
        match std::fs::read_to_string(dir.join(gpu_test_permit::__private::nextest::HINT_FILE)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok(None),
            Err(e) => return Err(e),
        };
    let mut lines = text.lines();
    let mut parse = || -> Option<RecordedHint> {
        let run_id = lines.next()?.to_string();
        let max_threads = lines.next()?.strip_prefix("max-threads ")?.parse().ok()?;
        let recorded_unix_ms = lines.next()?.strip_prefix("at ")?.parse().ok()?;
        Some(RecordedHint {
            run_id,
            max_threads,
            recorded_unix_ms,
        })
    };
    Ok(parse())
}

/// What a host's hang records say about N at one moment: see [`advice`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HangAdvice {
    /// The smallest N that hung within [`TRUSTED_FOR`](gpu_test_permit::__private::hangs::TRUSTED_FOR): neither it nor any larger N is advised.
    pub hung_at: Option<usize>,
    /// The smallest N below `hung_at` (any N, when there is none) that hung only longer ago
    /// than that: shown, not obeyed.
    pub too_old: Option<OldHang>,
}

/// A hang too old to rule its N out (see [`HangAdvice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OldHang {
    /// The N that hung.
    pub n: usize,
    /// When it last hung there, milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

impl OldHang {
    /// The day it last hung, `YYYY-MM-DD` (UTC).
    pub fn date(&self) -> String {
        utc_date(self.unix_ms)
    }
}

/// What `records` say at `now_unix_ms`: a record counts for [`TRUSTED_FOR`](gpu_test_permit::__private::hangs::TRUSTED_FOR); an older one
/// counts only where a newer record confirms it (the same N or a smaller one hung since, which
/// then rules out at least as much), and is otherwise reported as too old.
pub fn advice(records: &[HangRecord], now_unix_ms: u64) -> HangAdvice {
    let recent = |r: &&HangRecord| trusted_at(r.unix_ms, now_unix_ms);
    let hung_at = records.iter().filter(recent).map(HangRecord::n).min();
    let too_old = records
        .iter()
        .filter(|r| {
            !recent(r)
                && !from_the_future(r.unix_ms, now_unix_ms)
                && hung_at.is_none_or(|h| r.n() < h)
        })
        .map(HangRecord::n)
        .min()
        .map(|n| OldHang {
            n,
            unix_ms: records
                .iter()
                .filter(|r| r.n() == n)
                .map(|r| r.unix_ms)
                .max()
                .unwrap_or_default(),
        });
    HangAdvice { hung_at, too_old }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_test_permit::__private::hangs::FUTURE_SKEW;

    /// A hang dated in the future (a clock that was wrong when it was written, or a forged
    /// record) neither rules its N out nor shows as too old.
    #[test]
    fn a_hang_dated_in_the_future_is_not_trusted() {
        let now = 100 * 86_400_000;
        assert_eq!(advice(&[at(3, now)], now).hung_at, Some(3));
        let future = advice(&[at(3, now + 10 * 86_400_000)], now);
        assert_eq!((future.hung_at, future.too_old), (None, None));
        let within = advice(&[at(3, now + FUTURE_SKEW.as_millis() as u64)], now);
        assert_eq!(within.hung_at, Some(3));
    }

    const DAY: u64 = 86_400_000;

    fn at(n: usize, unix_ms: u64) -> HangRecord {
        HangRecord {
            unix_ms,
            per_gpu: n,
            gpus: 1,
            test: "t".into(),
            held_ms: 1,
            pid: None,
            units: None,
            run: None,
        }
    }

    #[test]
    fn a_record_counts_for_its_age_limit_unless_a_newer_one_confirms_it() {
        let now = 100 * DAY;
        let old = now - 31 * DAY;
        let recent = now - DAY;
        // (records, hung_at, too old: (n, when))
        let cases = [
            (vec![], None, None),
            (vec![at(2, recent)], Some(2), None),
            (vec![at(2, old)], None, Some((2, old))),
            // Confirmed by a newer record of the same N, or of a smaller one.
            (vec![at(2, old), at(2, recent)], Some(2), None),
            (vec![at(3, old), at(2, recent)], Some(2), None),
            // A newer record of a larger N rules out only from there.
            (vec![at(2, old), at(3, recent)], Some(3), Some((2, old))),
        ];
        for (i, (records, hung_at, too_old)) in cases.into_iter().enumerate() {
            let a = advice(&records, now);
            assert_eq!(a.hung_at, hung_at, "case {i}");
            assert_eq!(a.too_old.map(|o| (o.n, o.unix_ms)), too_old, "case {i}");
        }
    }
}
