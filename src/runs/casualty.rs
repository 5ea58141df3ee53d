//! The host's casualty record: tests that failed beside others at some N and passed alone,
//! one JSON line each in `gpu0.casualties`, the newest 64 kept, in the slot directory's state
//! directory (where the hang record is). A retry
//! that passes alone appends its own; the trace's advice on N reads them as it reads hangs,
//! for the tests they name.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::json::{self, FieldReader, Fields, Object, Record, Value};

use super::read::read_run;
use super::summary::casualties_of;

const CASUALTIES_FILE: &str = "gpu0.casualties";
const CASUALTIES_KEPT: usize = 64;
/// The largest run file a passing retry reads to find out whether it is a casualty.
const CASUALTY_READ_LIMIT: u64 = 64 << 20;

/// A test that failed while others held permits and passed alone on a retry, as recorded in
/// the slot directory's `gpu0.casualties`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CasualtyRecord {
    /// When the retry passed, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The run (nextest's run id).
    pub run: String,
    /// The test binary.
    pub binary: String,
    /// The test.
    pub test: String,
    /// Permits per GPU when it failed.
    pub per_gpu: usize,
    /// GPUs the permits spanned when it failed.
    pub gpus: usize,
    /// The most units other tests held at once beside it.
    pub units_beside: usize,
    /// The tests that held permits beside it (binary and name), the first few.
    pub beside: Vec<String>,
}

/// A line of `gpu0.casualties`, every field always written, in this order. Unversioned.
impl json::Write for CasualtyRecord {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("unix_ms", self.unix_ms)
                .field("run", &self.run)
                .field("binary", &self.binary)
                .field("test", &self.test)
                .field("per_gpu", self.per_gpu)
                .field("gpus", self.gpus)
                .field("units_beside", self.units_beside)
                .field("beside", &self.beside)
                .finish(),
        );
    }
}

impl Record for CasualtyRecord {
    fn read_json(v: &Value) -> Result<CasualtyRecord, String> {
        let f = Fields::of(v, "casualty record")?;
        let mut r = FieldReader::new(f);
        let record = CasualtyRecord {
            unix_ms: r.req("unix_ms"),
            run: r.req("run"),
            binary: r.req("binary"),
            test: r.req("test"),
            per_gpu: r.req("per_gpu"),
            gpus: r.req("gpus"),
            units_beside: r.req("units_beside"),
            beside: r.req("beside"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl CasualtyRecord {
    /// The N it failed at: permits per GPU times GPUs.
    pub fn n(&self) -> usize {
        self.per_gpu.saturating_mul(self.gpus)
    }

    /// The day it was recorded, `YYYY-MM-DD` (UTC).
    pub fn date(&self) -> String {
        crate::hangs::utc_date(self.unix_ms)
    }
}

/// Forgets the casualty records of slot directory `dir`, as
/// [`forget_hangs`](crate::hangs::forget_hangs) forgets hangs. Returns how many there were.
///
/// # Errors
///
/// A record file that exists but cannot be emptied.
#[cfg(any(test, feature = "__cli"))]
pub fn forget_casualties(dir: &Path) -> std::io::Result<usize> {
    let count = recorded_casualties(dir).len();
    crate::hangs::forget_kept(dir, CASUALTIES_FILE)?;
    Ok(count)
}

/// The casualties recorded for slot directory `dir`, oldest first: in its state directory, as
/// [`recorded_hangs`](crate::hangs::recorded_hangs) reads hangs, and in `dir` itself
/// (unreadable lines are skipped).
pub fn recorded_casualties(dir: &Path) -> Vec<CasualtyRecord> {
    crate::hangs::read_kept_for(dir, CASUALTIES_FILE, |r: &CasualtyRecord| r.unix_ms)
}

/// After a retry's permit `hold` was returned without a failure: if the test failed beside
/// others in an earlier attempt and this attempt had the GPU to itself, records the casualty
/// (once per process).
pub(super) fn after_passing_retry(dir: &Path, run: &str, hold: u64) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.load(Ordering::Relaxed) {
        return;
    }
    // A test process reads the run's records only while they are of a size a run of tens of
    // thousands of tests writes: a file grown past it (by a test in a loop, or by anyone who
    // can write the directory) must not cost a passing test its memory.
    match std::fs::symlink_metadata(dir.join(super::file_name(run))) {
        Ok(m) if m.len() <= CASUALTY_READ_LIMIT => {}
        _ => return,
    }
    let Ok(Some(records)) = read_run(dir, run) else {
        return;
    };
    let (binary, test) = crate::nextest::current_test();
    let pid = std::process::id();
    // Only this process's own grant makes it the retry that passed.
    if !granted(&records.records, pid, hold) {
        return;
    }
    let casualties = casualties_of(&records);
    let mut found = None;
    for c in &casualties {
        if c.key.binary == binary && c.key.test == test {
            found = Some(c);
            break;
        }
    }
    let Some(c) = found else {
        return;
    };
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let mut beside = Vec::new();
    for b in &c.beside[..c.beside.len().min(8)] {
        beside.push(format!("{b}"));
    }
    let record = CasualtyRecord {
        unix_ms: crate::clock::now_unix_ms(),
        run: run.to_string(),
        binary,
        test,
        per_gpu: c.per_gpu,
        gpus: c.gpus,
        units_beside: c.units_beside,
        beside,
    };
    crate::hangs::append_kept(
        &crate::hangs::record_dir(dir),
        CASUALTIES_FILE,
        &record,
        CASUALTIES_KEPT,
    );
    crate::notice::line(&format!(
        "{} failed at N = {} beside {} and passed alone: a contention casualty \
         (`gpu-test-permit report` lists the run's)",
        record.test,
        record.n(),
        crate::joined(&record.beside, ", ")
    ));
}

/// Whether `records` hold the grant of hold `hold` to process `pid`.
fn granted(records: &[super::RunRecord], pid: u32, hold: u64) -> bool {
    for r in records {
        if let super::RunRecord::Grant(g) = r
            && g.pid == pid
            && g.hold == hold
        {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes for [`known`], byte for byte (as the serde-derived code of
    /// earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/casualties/records");

    fn known() -> Vec<CasualtyRecord> {
        let c = CasualtyRecord {
            unix_ms: 1_764_300_000_002,
            run: "run-1".into(),
            binary: "suite::gpu".into(),
            test: "flaky \u{1b}[31m".into(),
            per_gpu: 3,
            gpus: 1,
            units_beside: 2,
            beside: vec!["suite::gpu::a".into(), "suite::gpu::b".into()],
        };
        let d = CasualtyRecord {
            beside: vec![],
            unix_ms: 5,
            ..c.clone()
        };
        vec![c, d]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        crate::json::check_golden(GOLDEN, &known());
    }
}
