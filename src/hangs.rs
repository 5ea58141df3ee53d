//! The host's hang record: permits held past the hold deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`),
//! one JSON line each in `gpu0.hangs`, the newest 64 kept, in the slot directory's state
//! directory (`GPU_TEST_PERMIT_STATE`; for the default slot directory, under `/tmp`, the
//! user's `~/.local/state/gpu-test-permit`), so that a reboot, which a wedged GPU often needs,
//! does not forget that an N hung.
//! The watchdog (and `gpu-test-permit run`) append to it; the trace's what-if reads it, so that
//! an N that hung on this host is not advised again — for [`TRUSTED_FOR`]: a driver update or a
//! fixed test can make an old hang meaningless, so an old record is shown, not obeyed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::json::{self, FieldReader, Fields, Object, Record, Value};
use crate::sys;

/// A permit held past the hold deadline on this host, as recorded in the slot directory's
/// `gpu0.hangs`. Records written before `pid` and `units` were kept read with those as `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangRecord {
    /// When it was found past the deadline, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Permits per GPU in force.
    pub per_gpu: usize,
    /// GPUs the permits spanned.
    pub gpus: usize,
    /// What held the permit: the test's name, or the command line of a command that
    /// `gpu-test-permit run` held it for.
    pub test: String,
    /// How long it had held it, milliseconds.
    pub held_ms: u64,
    /// The process that held it (for `run`, its command).
    pub pid: Option<u32>,
    /// The units the permit held (all of them for an exclusive permit).
    pub units: Option<usize>,
    /// The run it hung in (nextest's run id; with `REALIZAR_GPU_TEST_CONCURRENCY=auto`
    /// outside nextest, the process's), which ties it to the GPU and driver that run used.
    pub run: Option<String>,
}

/// A line of `gpu0.hangs`: `{"unix_ms":..,"per_gpu":..,"gpus":..,"test":"..","held_ms":..}`,
/// then `pid`, `units` and `run` where known (records written before they were kept lack
/// them). Unversioned.
impl json::Write for HangRecord {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("unix_ms", self.unix_ms)
                .field("per_gpu", self.per_gpu)
                .field("gpus", self.gpus)
                .field("test", &self.test)
                .field("held_ms", self.held_ms)
                .some("pid", &self.pid)
                .some("units", &self.units)
                .some("run", &self.run)
                .finish(),
        );
    }
}

impl Record for HangRecord {
    fn read_json(v: &Value) -> Result<HangRecord, String> {
        let f = Fields::of(v, "hang record")?;
        let mut r = FieldReader::new(f);
        let record = HangRecord {
            unix_ms: r.req("unix_ms"),
            per_gpu: r.req("per_gpu"),
            gpus: r.req("gpus"),
            test: r.req("test"),
            held_ms: r.req("held_ms"),
            pid: r.opt("pid"),
            units: r.opt("units"),
            run: r.opt("run"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl HangRecord {
    /// A record of `test`, held for `held` under N = `per_gpu` x `gpus`, made now.
    pub(crate) fn now(per_gpu: usize, gpus: usize, test: &str, held: Duration) -> HangRecord {
        HangRecord {
            unix_ms: crate::clock::now_unix_ms(),
            per_gpu,
            gpus,
            test: test.to_string(),
            held_ms: held.as_millis() as u64,
            pid: None,
            units: None,
            run: None,
        }
    }

    /// The N it hung at: permits per GPU times GPUs.
    #[cfg(any(test, feature = "__cli"))]
    pub fn n(&self) -> usize {
        self.per_gpu.saturating_mul(self.gpus)
    }

    /// The day it was recorded, `YYYY-MM-DD` (UTC).
    pub fn date(&self) -> String {
        utc_date(self.unix_ms)
    }
}

const HANGS_FILE: &str = "gpu0.hangs";
/// Records kept: the newest ones.
const HANGS_KEPT: usize = 64;
/// The longest the record is read.
const READ_LIMIT: usize = 1 << 20;

/// How long a hang record rules an N out: 30 days. An older record is shown as too old to rule
/// its N out; should that N still hang, the next hang records it afresh.
pub const TRUSTED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// Appends `record` to the hang record of slot directory `dir`, in its state directory
/// ([`record_dir`]; best effort: the process may be about to abort).
pub(crate) fn record_hang(dir: &Path, record: &HangRecord) {
    append_kept(&record_dir(dir), HANGS_FILE, record, HANGS_KEPT);
}

/// Where the records of slot directory `dir` that must outlive a reboot are written: its
/// state directory ([`Config::state_dir_for`](crate::config::Config::state_dir_for)), made if
/// missing; `dir` itself where that cannot be made (a home that cannot be written).
pub(crate) fn record_dir(dir: &Path) -> PathBuf {
    let state = crate::config::Config::global().state_dir_for(dir);
    if state != dir && sys::prepare_dir(&state).is_err() {
        return dir.to_path_buf();
    }
    state
}

/// The records in file `name` of slot directory `dir`: those of its state directory, and
/// those in `dir` itself (written by earlier versions, or where the state directory could not
/// be made), oldest first, each once.
pub(crate) fn read_kept_for<T>(dir: &Path, name: &str, when: fn(&T) -> u64) -> Vec<T>
where
    T: Record + PartialEq,
{
    let mut all: Vec<T> = Vec::new();
    for text in &kept_texts(dir, name) {
        // Unreadable lines are skipped.
        for l in text.lines() {
            let Ok(r) = T::from_text(l) else {
                continue;
            };
            if !all.contains(&r) {
                all.push(r);
            }
        }
    }
    crate::order::sort_by(&mut all, |a, b| when(a).cmp(&when(b)));
    all
}

/// The text of file `name` in each directory of [`kept_dirs`] that has one, in their order.
fn kept_texts(dir: &Path, name: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for d in &kept_dirs(dir) {
        let Ok(file) = sys::open_regular_for_reading(&d.join(name)) else {
            continue;
        };
        if let Some(text) = read(&file) {
            texts.push(text);
        }
    }
    texts
}

/// The directories the records of slot directory `dir` are kept in: its state directory, then
/// `dir` itself where that is another directory.
pub(crate) fn kept_dirs(dir: &Path) -> Vec<PathBuf> {
    let state = crate::config::Config::global().state_dir_for(dir);
    let another = state != dir;
    let mut dirs = Vec::with_capacity(2);
    dirs.push(state);
    if another {
        dirs.push(dir.to_path_buf());
    }
    dirs
}

/// Appends `record` as a JSON line to `dir/name` under the file's lock, keeping the newest
/// `kept` lines (best effort).
pub(crate) fn append_kept(dir: &Path, name: &str, record: &impl Record, kept: usize) {
    append_kept_line(dir, name, record.to_text(), kept);
}

/// [`append_kept`] with the record's line.
fn append_kept_line(dir: &Path, name: &str, line: String, kept: usize) {
    let path = dir.join(name);
    let Ok(file) = sys::open_lock_file(&path, sys::is_shared_dir(dir)) else {
        return;
    };
    // A process stopped with the lock must not hold up the one recording (which may be about
    // to abort, or a test that passed).
    if !sys::lock_within(&file, std::time::Duration::from_millis(500)) {
        return;
    }
    let mut lines: Vec<String> = Vec::new();
    if let Some(text) = read(&file) {
        for l in text.lines() {
            lines.push(l.to_string());
        }
    }
    lines.push(line);
    let start = lines.len().saturating_sub(kept);
    let mut text = String::new();
    for l in &lines[start..] {
        text.push_str(l);
        text.push('\n');
    }
    if sys::write_at(&file, text.as_bytes(), 0).is_ok() {
        let _ = file.set_len(text.len() as u64);
    }
}

fn read(file: &File) -> Option<String> {
    let mut buf = vec![0u8; READ_LIMIT];
    let n = sys::read_at_start(file, &mut buf).ok()?;
    buf.truncate(n);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Forgets the hang records of slot directory `dir` (in its state directory, and any in `dir`
/// itself): after a driver update or a fixed test, an N that hung may be tried again. Each
/// file is emptied under its lock, so a record being written meanwhile is either kept whole or
/// forgotten whole. Returns how many records there were.
///
/// # Errors
///
/// A record file that exists but cannot be emptied (permissions, another user's file).
#[cfg(any(test, feature = "__cli"))]
pub fn forget_hangs(dir: &Path) -> std::io::Result<usize> {
    let count = recorded_hangs(dir).len();
    forget_kept(dir, HANGS_FILE)?;
    Ok(count)
}

/// Empties file `name` in the state directory of slot directory `dir` and in `dir`.
#[cfg(any(test, feature = "__cli"))]
pub(crate) fn forget_kept(dir: &Path, name: &str) -> std::io::Result<()> {
    for d in kept_dirs(dir) {
        let path = d.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let file = sys::open_lock_file(&path, sys::is_shared_dir(&d))?;
        if !sys::lock_within(&file, std::time::Duration::from_secs(2)) {
            return Err(std::io::Error::other(format!(
                "{} is locked by another process",
                path.display()
            )));
        }
        file.set_len(0)?;
    }
    Ok(())
}

/// The hangs recorded for slot directory `dir`, oldest first: in its state directory
/// (`GPU_TEST_PERMIT_STATE`, see [`Config::state_dir_for`](crate::config::Config::state_dir_for)),
/// which a reboot does not empty, and in `dir` itself (none when there is no record;
/// unreadable lines are skipped).
pub fn recorded_hangs(dir: &Path) -> Vec<HangRecord> {
    read_kept_for(dir, HANGS_FILE, |r: &HangRecord| r.unix_ms)
}

/// How far past now a record's date may lie and still count: one dated later was written
/// under a clock that was wrong then, or forged, and trusting it would rule its N out until
/// that date plus [`TRUSTED_FOR`]. Such a record does not count (nor is it shown as too old).
pub const FUTURE_SKEW: Duration = Duration::from_secs(3600);

/// Whether a record dated `unix_ms` counts at `now_ms`: not older than [`TRUSTED_FOR`], and
/// not dated past now by more than [`FUTURE_SKEW`]. The one rule for hang, casualty and
/// history records.
pub fn trusted_at(unix_ms: u64, now_ms: u64) -> bool {
    !from_the_future(unix_ms, now_ms)
        && now_ms.saturating_sub(unix_ms) <= TRUSTED_FOR.as_millis() as u64
}

/// Whether a record dated `unix_ms` lies past `now_ms` by more than [`FUTURE_SKEW`].
pub fn from_the_future(unix_ms: u64, now_ms: u64) -> bool {
    unix_ms > now_ms.saturating_add(FUTURE_SKEW.as_millis() as u64)
}

/// `unix_ms` as a UTC date, `YYYY-MM-DD` (the civil-from-days algorithm of Howard Hinnant's
/// date library).
pub fn utc_date(unix_ms: u64) -> String {
    let days = (unix_ms / 86_400_000) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_the_older_format_still_parse() {
        let old = r#"{"unix_ms":5,"per_gpu":2,"gpus":1,"test":"gpu::draws","held_ms":300}"#;
        let r = HangRecord::from_text(old).unwrap();
        assert_eq!((r.n(), r.pid, r.units), (2, None, None));
        let new = HangRecord {
            pid: Some(7),
            units: Some(2),
            ..r.clone()
        };
        let line = new.to_text();
        assert_eq!(HangRecord::from_text(&line).unwrap(), new);
    }

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(1_767_225_599_000), "2025-12-31");
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes for [`known`], byte for byte (as the serde-derived code of
    /// earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../tests/data/hangs/records");

    fn known() -> Vec<HangRecord> {
        vec![
            HangRecord {
                unix_ms: 1_764_300_000_000,
                per_gpu: 4,
                gpus: 2,
                test: "suite::gpu::wedges \"it\"".into(),
                held_ms: 600_000,
                pid: Some(4242),
                units: Some(8),
                run: Some("0191a2b3-run".into()),
            },
            HangRecord {
                unix_ms: 1_764_300_000_001,
                per_gpu: 2,
                gpus: 1,
                test: "cargo test --release -- \\\\ é".into(),
                held_ms: 300,
                pid: None,
                units: None,
                run: None,
            },
        ]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        crate::json::check_golden(GOLDEN, &known());
    }
}
