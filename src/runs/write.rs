//! Writing records: one line each, appended under the file's lock, so that lines from the
//! run's processes never interleave; best effort, as a record must never fail a test.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::record::{DriversRecord, GrantRecord, Outcome, ReleaseRecord, RunRecord, SkipRecord};
use super::{FILE_PREFIX, RUNS_KEPT, file_name, run_files};
use crate::config::Config;
use crate::json::Record;
use crate::nextest::{current_test, cut};
use crate::sys;

/// The open record files of this process, one per directory (almost always one).
static OPEN: parking_lot::Mutex<Vec<(PathBuf, File)>> = parking_lot::Mutex::new(Vec::new());
/// Said once: records cannot be written.
static WARNED: AtomicBool = AtomicBool::new(false);
/// Numbers the permits of this process for their records.
static NEXT_HOLD: AtomicU64 = AtomicU64::new(1);
/// How `gpu-test-permit run`'s command ended ([`set_command_outcome`]): 0 while unknown, else
/// [`EXITED`] or [`SIGNALLED`] in the high half and the code or signal in the low half.
static COMMAND_OUTCOME: AtomicU64 = AtomicU64::new(0);
const EXITED: u64 = 1 << 32;
const SIGNALLED: u64 = 2 << 32;

/// The run this process belongs to: nextest's `NEXTEST_RUN_ID`; outside nextest, with
/// `REALIZAR_GPU_TEST_CONCURRENCY=auto` or `GPU_TEST_PERMIT_WEIGHTS=learned`, the process
/// itself (`p<pid>-<start, ms>`), whose records are what `auto` and learned weights learn
/// from. Otherwise nothing is recorded.
pub(crate) fn run_id() -> Option<&'static str> {
    let nextest = nextest_run();
    if nextest.is_some() || !learns() {
        return nextest;
    }
    static PROCESS_RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    // As a function pointer, as the GPU identity is made: one instantiation for both.
    Some(PROCESS_RUN.get_or_init(process_run as fn() -> String))
}

/// The run id of a process that is its own run: `p<pid>-<start, ms>`.
fn process_run() -> String {
    format!("p{}-{}", std::process::id(), crate::clock::now_unix_ms())
}

fn attempts() -> (u32, u32) {
    let Some(n) = &Config::global().nextest else {
        return (1, 1);
    };
    let attempt = n.attempt.unwrap_or(1);
    let total = n.total_attempts.unwrap_or(attempt).max(attempt);
    (attempt, total)
}

/// Records of a process that is a run of its own (`auto` outside nextest), kept until it
/// exits (or [`PENDING_MOST`] are kept, or a hold deadline aborts it): nobody else writes to
/// its file, so the acquire path pays a push instead of a locked write.
static PENDING: parking_lot::Mutex<Vec<(PathBuf, Vec<RunRecord>)>> =
    parking_lot::Mutex::new(Vec::new());
/// Records kept before they are written.
const PENDING_MOST: usize = 8192;

/// nextest's `NEXTEST_RUN_ID`, when this process runs under nextest.
pub(crate) fn nextest_run() -> Option<&'static str> {
    let Some(n) = &Config::global().nextest else {
        return None;
    };
    match n.run_id.as_deref() {
        Some(r) if !r.is_empty() => Some(r),
        _ => None,
    }
}

/// Whether `auto` or learned weights learn from this process's records.
fn learns() -> bool {
    let cfg = Config::global();
    cfg.auto_concurrency || cfg.weights == crate::config::Weights::Learned
}

/// Whether this process is a run of its own: it learns, outside nextest.
fn own_run() -> bool {
    nextest_run().is_none() && learns()
}

/// Appends `record` to the run's file in `dir` (for a process that is a run of its own, when
/// it exits: see [`flush`]).
pub(crate) fn append(dir: &Path, record: RunRecord) {
    // A run kept apart from the host's (`find-gpu-tests`) records where it is told to.
    let apart = Config::global().records_dir.clone();
    let dir = apart.as_deref().unwrap_or(dir);
    if own_run() {
        let full = {
            let mut pending = PENDING.lock();
            if pending.capacity() == 0 {
                flush_at_exit();
            }
            match pending.last_mut() {
                Some((d, records)) if d == dir => records.push(record),
                _ => pending.push((dir.to_path_buf(), vec![record])),
            }
            let mut held = 0;
            for (_, records) in pending.iter() {
                held += records.len();
            }
            held >= PENDING_MOST
        };
        if full {
            flush();
        }
        return;
    }
    let mut line = record.to_text();
    line.push('\n');
    write_now(dir, record.run(), &line);
}

/// Writes the records kept by [`append`] (at exit, and before a hold deadline aborts the
/// process): one write per directory.
pub(crate) fn flush() {
    let pending = std::mem::take(&mut *PENDING.lock());
    for (dir, records) in &pending {
        let mut text = String::new();
        for r in records {
            text.push_str(&r.to_text());
            text.push('\n');
        }
        if let Some(first) = records.first() {
            write_now(dir, first.run(), &text);
        }
    }
}

fn flush_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // As a function pointer, as the exit line's printer is registered: one instantiation.
    ONCE.call_once(register_flush as fn());
}

/// Flushes the pending records at exit.
fn register_flush() {
    extern "C" fn at_exit() {
        // After `main`; nothing here may unwind into C.
        let _ = std::panic::catch_unwind(flush);
    }
    crate::sys::at_exit(at_exit);
}

/// Appends `lines` (whole lines) to run `run`'s file in `dir` in one write.
fn write_now(dir: &Path, run: &str, lines: &str) {
    let line = lines;
    let mut open = OPEN.lock();
    let index = match opened(&open, dir) {
        Some(i) => i,
        None => match open_run_file(dir, run) {
            Ok(file) => {
                open.push((dir.to_path_buf(), file));
                open.len() - 1
            }
            Err(e) => return warn(dir, &e),
        },
    };
    let file = &open[index].1;
    // A writer stopped (or frozen) with the lock must not stop the run's other tests: the
    // lock is waited for briefly, then the record is dropped.
    if !sys::lock_within(file, LOCK_PATIENCE) {
        return warn(
            dir,
            &std::io::Error::other("another process has held the run file's lock for over 200 ms"),
        );
    }
    let written = match file.metadata() {
        Ok(meta) if meta.len() > MAX_FILE => Err(std::io::Error::other(format!(
            "the run's file has grown past {} MiB",
            MAX_FILE >> 20
        ))),
        Ok(meta) => sys::write_at(file, line.as_bytes(), meta.len()),
        Err(e) => Err(e),
    };
    let _ = file.unlock();
    if let Err(e) = written {
        warn(dir, &e);
    }
}

/// Where `open` holds the run file of directory `dir`.
fn opened(open: &[(PathBuf, File)], dir: &Path) -> Option<usize> {
    for (i, (d, _)) in open.iter().enumerate() {
        if d == dir {
            return Some(i);
        }
    }
    None
}

/// The longest a record waits for the run file's lock.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);
/// The largest a run's file grows: past it, records are dropped (a test that takes permits in
/// a loop must not fill the disk).
const MAX_FILE: u64 = 256 << 20;

fn warn(dir: &Path, e: &std::io::Error) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        crate::notice::line(&format!(
            "cannot record this test's skips and permits in {} ({e}); `gpu-test-permit junit` \
             and `report` will not know of them",
            dir.display()
        ));
    }
}

/// Opens (creating) the run's file; a process that creates it removes all but the newest
/// [`RUNS_KEPT`] runs' files of this user. Only its owner may write it: in a shared directory
/// another user can neither empty nor forge this user's records, and a file another user made
/// at the run's name is refused (its records are not this user's).
fn open_run_file(dir: &Path, run: &str) -> std::io::Result<File> {
    use crate::host::tests_file::open_own_for_writing;
    let path = dir.join(file_name(run));
    let file = match open_own_for_writing(&path) {
        // A test that skips before any permit is taken may be the first to use the directory.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            sys::prepare_dir(dir).map_err(std::io::Error::other)?;
            open_own_for_writing(&path)?
        }
        opened => opened?,
    };
    let len = file.metadata()?.len();
    if len == 0 {
        prune(dir, &path);
    }
    Ok(file)
}

/// Removes this user's oldest run files beyond [`RUNS_KEPT`] of this user's. Other users'
/// files in a shared directory are neither counted nor removed.
fn prune(dir: &Path, keep: &Path) {
    let mut files = run_files(dir);
    if files.len() <= RUNS_KEPT {
        return;
    }
    // Only this user's files count towards those kept: in a shared directory, other users'
    // (which this user may not remove) must not push this user's records out.
    files.retain(|f| f.mine);
    if files.len() <= RUNS_KEPT {
        return;
    }
    // Newest first.
    crate::order::sort_by(&mut files, |a, b| b.modified.cmp(&a.modified));
    for super::RunFile { path, .. } in files.split_off(RUNS_KEPT) {
        if path != keep
            && let Some(name) = path.file_name()
            && name.to_string_lossy().starts_with(FILE_PREFIX)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Records a skip of the running test, when it runs under nextest.
pub(crate) fn record_skip(backend: &str, reason: &str) {
    let Some(run) = run_id() else { return };
    let Ok(dir) = Config::global().slot_dir_path() else {
        return;
    };
    let (binary, test) = current_test();
    let record = RunRecord::Skip(SkipRecord {
        run: run.to_string(),
        unix_us: crate::clock::unix_micros(std::time::SystemTime::now()),
        pid: crate::sys::pid(),
        binary,
        test,
        attempt: attempts().0,
        backend: backend.to_string(),
        reason: cut(reason.to_string()),
    });
    append(&dir, record);
}

/// Records that this process (a test) had GPU `drivers` mapped without a permit, and
/// `linked` mapped as its executable's dependencies: at its first permit (`at_first_permit`)
/// or as it exited without ever holding one.
pub(crate) fn record_drivers(drivers: Vec<String>, linked: Vec<String>, at_first_permit: bool) {
    write_drivers(DriversRecord {
        run: String::new(),
        unix_us: 0,
        pid: crate::sys::pid(),
        binary: String::new(),
        test: String::new(),
        attempt: 0,
        unpermitted: drivers.clone(),
        before_first_permit: !drivers.is_empty(),
        drivers,
        held: at_first_permit,
        seen: "mapped".into(),
        linked,
        started_process: false,
    });
}

/// Records what the loader's logs of a watched command say (`record`'s pid, drivers and
/// flags, as the command's watch log (`gpu_test_permit_cli::watch_log::WatchLog::record`) fills them in: the running test's command, as the
/// watcher `gpu-test-permit watch` sees it, with every process it started), when this runs
/// under nextest: a record for every watched test, one that loaded no driver too, so that
/// `report` knows the run was watched. The run, the test, the time and `seen` are filled in
/// here. Returns whether a record was written.
#[cfg(any(test, feature = "__cli"))]
pub(crate) fn record_watched(mut record: DriversRecord) -> bool {
    for list in [
        &mut record.drivers,
        &mut record.unpermitted,
        &mut record.linked,
    ] {
        for d in list.iter_mut() {
            *d = cut(std::mem::take(d));
        }
    }
    record.seen = "watched".into();
    write_drivers(record)
}

/// Records a watched test process's verdict (see [`crate::__private::record_verdict`]) for
/// the running test of this nextest run; whether it was written.
#[cfg(any(test, feature = "__cli"))]
pub(crate) fn record_verdict(pid: u32, fault: &str, ended: &str, failed: bool, said: &str) -> bool {
    append_for_running_test(|t| {
        RunRecord::Verdict(super::record::VerdictRecord {
            run: t.run,
            unix_us: t.unix_us,
            pid,
            binary: t.binary,
            test: t.test,
            attempt: t.attempt,
            fault: fault.to_string(),
            ended: ended.to_string(),
            failed,
            said: cut(said.to_string()),
        })
    })
}

/// Writes `record` for the running test of this nextest run, filling in the run, the time,
/// the test and its attempt; whether it was written.
fn write_drivers(mut record: DriversRecord) -> bool {
    append_for_running_test(|t| {
        record.run = t.run;
        record.unix_us = t.unix_us;
        (record.binary, record.test) = (t.binary, t.test);
        record.attempt = t.attempt;
        RunRecord::Drivers(record)
    })
}

/// The running test of this nextest run, as its records name it, at the time of the record.
struct RunningTest {
    run: String,
    unix_us: u64,
    binary: String,
    test: String,
    attempt: u32,
}

/// Appends the record `make` builds for the running test of this nextest run to the run's file
/// in the configuration's slot directory; whether it was written (not outside nextest, nor
/// where the slot directory cannot be named).
fn append_for_running_test(make: impl FnOnce(RunningTest) -> RunRecord) -> bool {
    let Some(run) = nextest_run() else {
        return false;
    };
    let Ok(dir) = Config::global().slot_dir_path() else {
        return false;
    };
    let (binary, test) = current_test();
    let test = RunningTest {
        run: run.to_string(),
        unix_us: crate::clock::unix_micros(std::time::SystemTime::now()),
        binary,
        test,
        attempt: attempts().0,
    };
    append(&dir, make(test));
    true
}

/// What a permit's grant records: see [`granted`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granted {
    pub(crate) units: usize,
    pub(crate) exclusive: bool,
    pub(crate) per_gpu: usize,
    pub(crate) gpus: usize,
    pub(crate) alone: bool,
    /// How long the request waited for it.
    pub(crate) waited: std::time::Duration,
    /// The measured peak its units were learned from, bytes.
    pub(crate) learned: Option<u64>,
}

/// Records a permit granted to the running test in slot directory `dir`, when it runs under
/// nextest; returns the number its release is recorded under (0: not recorded). Called once
/// the slots are held, so the record's time is never before the grant.
pub(crate) fn granted(dir: &Path, g: Granted) -> u64 {
    let Some(run) = run_id() else { return 0 };
    let hold = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
    let (binary, test) = current_test();
    let (attempt, total_attempts) = attempts();
    let record = RunRecord::Grant(GrantRecord {
        run: run.to_string(),
        unix_us: crate::clock::unix_micros(std::time::SystemTime::now()),
        pid: crate::sys::pid(),
        hold,
        binary,
        test,
        attempt,
        total_attempts,
        units: g.units,
        exclusive: g.exclusive,
        per_gpu: g.per_gpu,
        gpus: g.gpus,
        alone: g.alone,
        waited_us: g.waited.as_micros().min(u128::from(u64::MAX)) as u64,
        learned: g.learned,
    });
    append(dir, record);
    hold
}

/// Records the return of permit `hold` (from [`granted`]) at `at`: panicking, the test failed;
/// under `gpu-test-permit run`, as its command ended.
pub(crate) fn released(dir: &Path, hold: u64, at: std::time::SystemTime, memory_used: Option<u64>) {
    let Some(run) = run_id() else { return };
    let outcome = outcome_now();
    let record = RunRecord::Release(ReleaseRecord {
        run: run.to_string(),
        unix_us: crate::clock::unix_micros(at),
        pid: crate::sys::pid(),
        hold,
        outcome,
        memory_used,
    });
    append(dir, record);
    if !outcome.failed() && attempts().0 > 1 {
        super::casualty::after_passing_retry(dir, run, hold);
    }
}

/// How the test stands as a permit is returned now: panicking, it failed; under
/// `gpu-test-permit run`, as its command ended.
pub(crate) fn outcome_now() -> Outcome {
    if std::thread::panicking() {
        return Outcome::Panicked;
    }
    let value = COMMAND_OUTCOME.load(Ordering::Relaxed);
    let low = value as u32 as i32;
    match value & !u64::from(u32::MAX) {
        EXITED => Outcome::Exited(low),
        SIGNALLED => Outcome::Signal(low),
        _ => Outcome::Passed,
    }
}

/// The attempt the trace's events carry: nextest's `NEXTEST_ATTEMPT` where the test has more
/// than one (nextest runs with retries), else none.
pub(crate) fn traced_attempt() -> Option<u32> {
    let (attempt, total) = attempts();
    (total > 1).then_some(attempt)
}

/// Tells the records how `gpu-test-permit run`'s command ended: its exit code, or the signal
/// that ended it. The permit's release record then carries it.
#[doc(hidden)]
#[cfg(any(test, feature = "__cli"))]
pub fn set_command_outcome(code: Option<i32>, signal: Option<i32>) {
    let value = match (code, signal) {
        (Some(code), _) => EXITED | u64::from(code as u32),
        (None, Some(sig)) => SIGNALLED | u64::from(sig as u32),
        (None, None) => return,
    };
    COMMAND_OUTCOME.store(value, Ordering::Relaxed);
}
