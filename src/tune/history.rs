//! The host's run history: one JSON line per run in `gpu0.history` (the newest
//! [`HISTORY_KEPT`]), and each test's reference hold time in `gpu0.tests` (the newest
//! [`TESTS_KEPT`] tests), both in the slot directory's state directory. Each file is read and
//! replaced whole under its own lock, in one write; a line that is not a record (cut short,
//! written by another version or another program) is ignored and said once.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::measure::{RunMeasure, measure};
use crate::host::tests_file::{self, TESTS_FILE, TestLine};
use crate::json::{self, FieldReader, Fields, Object, Record, Value};
use crate::sys;

/// The file of the run history.
pub(crate) const HISTORY_FILE: &str = "gpu0.history";
/// When the history was last forgotten: runs that began before are not measured again.
const SINCE_FILE: &str = "gpu0.history-since";
/// The runs read that measured to nothing, each at the length it was read (`KEY LEN` a line):
/// not read again until they grow.
const UNMEASURED_FILE: &str = "gpu0.unmeasured";
/// Unmeasured runs remembered: this user keeps [`crate::runs::RUNS_KEPT`] run files.
const UNMEASURED_KEPT: usize = 64;
/// Runs kept in the history: the newest.
pub const HISTORY_KEPT: usize = 50;
/// Tests whose reference hold time is kept: those seen most recently.
pub const TESTS_KEPT: usize = 4096;
/// Version of a history line; lines of another version are ignored.
const VERSION: u32 = 1;
/// The most of a history file that is read.
const READ_LIMIT: usize = 8 << 20;
/// Run files larger than this are not measured (a run of 20,000 tests writes about 10 MiB; a
/// larger file is a runaway loop, and reading it would hold up the run that measures it).
const MEASURE_LIMIT: u64 = 64 << 20;
/// How long a reader or writer waits for a file's lock; a process stopped holding it delays
/// nothing longer.
const LOCK_PATIENCE: Duration = Duration::from_millis(500);

/// One run as the history keeps it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// Version of the line's format.
    pub v: u32,
    /// The run id (as its record file is named).
    pub run: String,
    /// When its first permit was asked for, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Permits per GPU in force.
    pub per_gpu: usize,
    /// GPUs the permits spanned.
    pub gpus: usize,
    /// Whether `auto` chose its N.
    pub auto: bool,
    /// The GPUs and driver, as the probe saw them when `auto` chose ("" where unknown: a run
    /// with a fixed N, or no backend).
    pub gpu: String,
    /// Permits returned.
    pub holds: usize,
    /// From the first request to the last release, microseconds.
    pub span_us: u64,
    /// Time at least one permit was held, microseconds.
    pub busy_us: u64,
    /// Units times the time they were held, microseconds.
    pub unit_us: u64,
    /// The tests' work: each hold counted as its test's reference time (the shortest mean
    /// hold it had in a run on record), microseconds.
    pub work_us: u64,
    /// Time at least one request waited for a permit, microseconds.
    pub queued_us: u64,
    /// The most units held at once.
    pub peak: usize,
    /// Permits never returned (a process died holding one).
    pub unreturned: usize,
    /// Permits returned by a failing test.
    pub failed: usize,
    /// Tests that failed beside others and passed alone.
    pub casualties: usize,
    /// Why `auto` chose its N.
    pub why: Option<String>,
    /// Bytes of the record file measured (measured again when it grew).
    pub source_len: u64,
}

/// A line of `gpu0.history`: every field in the order of the type, `why` only where `auto`
/// chose. Versioned by `v` ([`VERSION`]): lines of another version are ignored.
impl json::Write for HistoryEntry {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("v", self.v)
                .field("run", &self.run)
                .field("unix_ms", self.unix_ms)
                .field("per_gpu", self.per_gpu)
                .field("gpus", self.gpus)
                .field("auto", self.auto)
                .field("gpu", &self.gpu)
                .field("holds", self.holds)
                .field("span_us", self.span_us)
                .field("busy_us", self.busy_us)
                .field("unit_us", self.unit_us)
                .field("work_us", self.work_us)
                .field("queued_us", self.queued_us)
                .field("peak", self.peak)
                .field("unreturned", self.unreturned)
                .field("failed", self.failed)
                .field("casualties", self.casualties)
                .some("why", &self.why)
                .field("source_len", self.source_len)
                .finish(),
        );
    }
}

impl Record for HistoryEntry {
    fn read_json(v: &Value) -> Result<HistoryEntry, String> {
        let f = Fields::of(v, "history entry")?;
        let mut r = FieldReader::new(f);
        let record = HistoryEntry {
            v: r.req("v"),
            run: r.req("run"),
            unix_ms: r.req("unix_ms"),
            per_gpu: r.req("per_gpu"),
            gpus: r.req("gpus"),
            auto: r.req("auto"),
            gpu: r.req("gpu"),
            holds: r.req("holds"),
            span_us: r.req("span_us"),
            busy_us: r.req("busy_us"),
            unit_us: r.req("unit_us"),
            work_us: r.req("work_us"),
            queued_us: r.req("queued_us"),
            peak: r.req("peak"),
            unreturned: r.req("unreturned"),
            failed: r.req("failed"),
            casualties: r.req("casualties"),
            why: r.opt("why"),
            source_len: r.req("source_len"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl HistoryEntry {
    /// Reads one line of `gpu0.history` (as [`read_history`](crate::tune::read_history)
    /// reads the file; fields it does not know are ignored).
    ///
    /// # Errors
    ///
    /// Text that is not JSON, or not a history entry: the message names the field.
    ///
    /// ```
    /// use gpu_test_permit::__private::tune::HistoryEntry;
    ///
    /// let line = r#"{"v":1,"run":"r1","unix_ms":1,"per_gpu":2,"gpus":1,"auto":true,"gpu":"","holds":8,"span_us":9,"busy_us":8,"unit_us":16,"work_us":16,"queued_us":0,"peak":2,"unreturned":0,"failed":0,"casualties":0,"source_len":100}"#;
    /// let e = HistoryEntry::from_json(line)?;
    /// assert_eq!((e.per_gpu, e.effective()), (2, 2.0));
    /// # Ok::<(), String>(())
    /// ```
    #[cfg(any(test, feature = "__cli"))]
    pub fn from_json(text: &str) -> Result<HistoryEntry, String> {
        HistoryEntry::from_text(text)
    }

    /// The work the GPU did per unit of busy time, in tests' worth of work at once: `N` when
    /// every permit was busy and holds took their reference time, less where the GPU slowed
    /// them down or permits sat idle.
    pub fn effective(&self) -> f64 {
        self.work_us as f64 / self.busy_us.max(1) as f64
    }

    /// Units held at once while the GPU was busy, on average.
    pub fn concurrency(&self) -> f64 {
        self.unit_us as f64 / self.busy_us.max(1) as f64
    }

    /// The share of busy time during which some request waited for a permit.
    pub fn waited(&self) -> f64 {
        (self.queued_us as f64 / self.busy_us.max(1) as f64).min(1.0)
    }

    /// No permit was lost and no test was a contention casualty.
    pub fn clean(&self) -> bool {
        self.unreturned == 0 && self.casualties == 0
    }

    /// Clean, and large enough to say something about its N: at least two holds per
    /// permit, and busy for a millisecond.
    pub fn measurable(&self) -> bool {
        self.clean()
            && self.holds >= self.per_gpu.saturating_mul(self.gpus).saturating_mul(2)
            && self.busy_us >= 1_000
            && self.work_us > 0
    }

    /// The day it ran, `YYYY-MM-DD` (UTC).
    pub fn date(&self) -> String {
        crate::hangs::utc_date(self.unix_ms)
    }
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// The text of `file` (its first [`READ_LIMIT`] bytes, invalid UTF-8 replaced); `None` when
/// it cannot be read.
fn read_text(file: &File) -> Option<String> {
    let mut buf = vec![0u8; READ_LIMIT];
    let Ok(n) = sys::read_at_start(file, &mut buf) else {
        return None;
    };
    buf.truncate(n);
    Some(match String::from_utf8(buf) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The lines of `file` that `parse` reads as records, and how many it did not.
fn read_lines<T>(file: &File, parse: fn(&str) -> (Vec<T>, usize)) -> (Vec<T>, usize) {
    match read_text(file) {
        Some(text) => parse(&text),
        None => (Vec::new(), 0),
    }
}

/// The history's lines in `text` that parse, and how many did not.
fn history_lines(text: &str) -> (Vec<HistoryEntry>, usize) {
    let mut bad = 0;
    let mut records = Vec::new();
    for l in text.lines() {
        if l.trim().is_empty() {
            continue;
        }
        match HistoryEntry::from_text(l) {
            Ok(r) => records.push(r),
            Err(_) => bad += 1,
        }
    }
    (records, bad)
}

/// An entry of this version of the history's lines.
fn is_current(e: &HistoryEntry) -> bool {
    e.v == VERSION
}

/// The history's order: by when the runs began.
fn by_start(a: &HistoryEntry, b: &HistoryEntry) -> std::cmp::Ordering {
    a.unix_ms.cmp(&b.unix_ms)
}

/// Keeps the entries for which `keep` holds, in order.
fn keep_entries(entries: &mut Vec<HistoryEntry>, keep: &dyn Fn(&HistoryEntry) -> bool) {
    entries.retain(|e| keep(e));
}

fn say_ignored(path: &Path, bad: usize) {
    if bad > 0 && !WARNED.swap(true, Ordering::Relaxed) {
        crate::notice::line(&format!(
            "ignoring {bad} line(s) of {} that are not records of this version (cut short or \
             written by something else); `gpu-test-permit history --forget` empties it",
            path.display()
        ));
    }
}

/// The file in the state directory that names the last nextest run whose first process
/// brought the history up to date ([`learn_before_run`]).
pub(crate) const LEARNED_FILE: &str = "gpu0.learned";

/// Brings the history of slot directory `dir` and its tests' hold times up to date from the
/// runs recorded before nextest run `run`, once a run: the first process of the run to build
/// its pool does it, before it asks for any permit, so that backfilling and the longest-first
/// priorities know the earlier runs' hold times with no command in between. Every other
/// process of the run reads one small file ([`LEARNED_FILE`]) and goes on; one that finds
/// another learning now goes on at once: a request reads the hold times only when it comes
/// to wait behind a head (`host::backfill`), by when the learning is done, and a learner that
/// was stopped delays nobody. Nothing here can fail a test: where the state directory cannot
/// be written, nothing is learned.
pub(crate) fn learn_before_run(dir: &Path, run: &str) {
    let state = crate::hangs::record_dir(dir);
    let path = tests_file::state_path(&state, LEARNED_FILE);
    let key = format!("{}\n", crate::runs::run_key(run));
    // The common case, without the lock: this run learned already.
    if let Some(f) = tests_file::open_own(&path)
        && learned(&f, &key)
    {
        return;
    }
    let Ok(file) = tests_file::open_own_for_writing(&path) else {
        return;
    };
    if !sys::lock_within(&file, Duration::ZERO) {
        return;
    }
    // Another process of the run may have learned between the look above and the lock.
    if learned(&file, &key) {
        return;
    }
    update_history(dir, Some(run));
    replace(&file, &key);
}

/// Whether `file` (a [`LEARNED_FILE`]) holds `key`, the line of the run that learned.
fn learned(file: &File, key: &str) -> bool {
    let mut buf = [0u8; 160];
    match sys::read_at_start(file, &mut buf) {
        Ok(n) => buf[..n] == *key.as_bytes(),
        Err(_) => false,
    }
}

/// Replaces the content of `file` with `text`, one write.
fn replace(file: &File, text: &str) {
    if sys::write_at(file, text.as_bytes(), 0).is_ok() {
        let _ = file.set_len(text.len() as u64);
    }
}

/// The open, locked file `name` of directory `dir`, made if missing; `None` when it cannot be
/// had (the history is never a reason to fail a test).
fn open_locked(dir: &Path, name: &str) -> Option<File> {
    let Ok(file) = tests_file::open_own_for_writing(&tests_file::state_path(dir, name)) else {
        return None;
    };
    sys::lock_within(&file, LOCK_PATIENCE).then_some(file)
}

/// The records of file `name` in state directory `state`, for reading only. A writer replaces
/// the file in one write; one stopped holding the lock must not make the history forgotten,
/// so past the patience the file is read without it (lines cut short are ignored).
fn read_records<T>(state: &Path, name: &str, parse: fn(&str) -> (Vec<T>, usize)) -> Vec<T> {
    let path = tests_file::state_path(state, name);
    let Some(text) = read_for_records(&path) else {
        return Vec::new();
    };
    let (records, bad) = parse(&text);
    say_ignored(&path, bad);
    records
}

/// The text of the file at `path` as [`read_records`] reads it; `None` when it cannot be
/// opened or read.
fn read_for_records(path: &Path) -> Option<String> {
    let file = tests_file::open_own(path)?;
    let _locked = sys::lock_within(&file, LOCK_PATIENCE);
    read_text(&file)
}

/// The history of slot directory `dir` as recorded (without measuring new runs), oldest
/// first.
pub fn read_history(dir: &Path) -> Vec<HistoryEntry> {
    let mut entries = read_records(&crate::hangs::record_dir(dir), HISTORY_FILE, history_lines);
    keep_entries(&mut entries, &is_current);
    crate::order::sort_by(&mut entries, by_start);
    entries
}

/// The tests of slot directory `dir` whose GPU memory was measured (by their fixture, in a run
/// recorded and measured into the history), with the most each was measured to use, in bytes;
/// the largest first. A test is named `<binary>::<test>`, as its run records name it. What
/// [`WEIGHTS_VAR`](crate::config::WEIGHTS_VAR)`=learned` weighs tests by.
pub fn learned_memory(dir: &Path) -> Vec<(String, u64)> {
    let mut refs = read_records(
        &crate::hangs::record_dir(dir),
        TESTS_FILE,
        tests_file::parse,
    );
    let mut out: Vec<(String, u64)> = Vec::new();
    for r in &mut refs {
        if let Some(m) = r.mem
            && m > 0
        {
            out.push((std::mem::take(&mut r.test), m));
        }
    }
    crate::order::sort_by(&mut out, |a, b| match b.1.cmp(&a.1) {
        std::cmp::Ordering::Equal => a.0.cmp(&b.0),
        by_bytes => by_bytes,
    });
    out
}

/// A test's reference hold time: the shortest mean hold it had in one run on record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg(any(test, feature = "__cli"))]
pub struct HoldTime {
    /// The test binary (nextest's binary id).
    pub binary: String,
    /// The test's name.
    pub test: String,
    /// Its reference hold time.
    pub hold: Duration,
}

/// The tests of slot directory `dir` whose hold times the history knows (`gpu0.tests` in its
/// state directory), the longest first, with the runs recorded since the history was last
/// brought up to date measured first. Tests recorded before binaries and names were kept
/// apart are left out until they run again.
#[cfg(any(test, feature = "__cli"))]
pub fn hold_times(dir: &Path) -> Vec<HoldTime> {
    update_history(dir, None);
    let refs = read_records(
        &crate::hangs::record_dir(dir),
        TESTS_FILE,
        tests_file::parse,
    );
    let mut out: Vec<HoldTime> = refs
        .into_iter()
        .filter_map(|r| {
            Some(HoldTime {
                binary: r.binary?,
                test: r.name?,
                hold: Duration::from_micros(r.us),
            })
        })
        .collect();
    crate::order::sort_by(&mut out, |a, b| {
        b.hold
            .cmp(&a.hold)
            .then_with(|| (&a.binary, &a.test).cmp(&(&b.binary, &b.test)))
    });
    out
}

/// The measured peaks of [`learned_memory`], by test, with the runs recorded since the history
/// was last brought up to date (all but run `current`, under way) measured first.
pub(crate) fn learned_peaks(dir: &Path, current: Option<&str>) -> HashMap<String, u64> {
    update_history(dir, current);
    let mut peaks = HashMap::new();
    for (test, bytes) in &mut learned_memory(dir) {
        peaks.insert(std::mem::take(test), *bytes);
    }
    peaks
}

/// Measures the runs recorded in slot directory `dir` that the history lacks, or that grew
/// since they were measured (all but run `current`, still going), and adds them to the
/// history in its state directory. Returns the history, oldest first.
pub(crate) fn update_history(dir: &Path, current: Option<&str>) -> Vec<HistoryEntry> {
    let state = crate::hangs::record_dir(dir);
    let path = tests_file::state_path(&state, HISTORY_FILE);
    let file = match tests_file::open_own_for_writing(&path) {
        Ok(file) => file,
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                crate::notice::line(&format!(
                    "cannot keep the run history in {} ({e}); REALIZAR_GPU_TEST_CONCURRENCY=auto \
                     learns nothing new until it can (set GPU_TEST_PERMIT_STATE to a directory \
                     this user may write)",
                    path.display()
                ));
            }
            return read_history(dir);
        }
    };
    // Another process measuring now: what is recorded, without the runs it is adding.
    if !sys::lock_within(&file, LOCK_PATIENCE) {
        return read_history(dir);
    }
    let (mut entries, bad) = read_lines(&file, history_lines);
    say_ignored(&path, bad);
    keep_entries(&mut entries, &is_current);
    let current_key = current.map(crate::runs::run_key);
    let since = forgotten_since(&state);
    let mut fresh: Vec<(String, u64, RunMeasure)> = Vec::new();
    let unmeasured_before = read_unmeasured(&state);
    let mut unmeasured: Vec<(String, u64)> = Vec::new();
    for run in &mut crate::runs::recorded_runs(dir) {
        // Only this user's runs: in a shared directory another user's files, however many
        // and however large, cost this user's first test nothing.
        if !run.mine || Some(&run.run_id) == current_key.as_ref() {
            continue;
        }
        let len = run.len;
        if len > MEASURE_LIMIT || measured_at(&entries, &run.run_id, len) {
            continue;
        }
        let key = (std::mem::take(&mut run.run_id), len);
        // Read before at this length and found to measure to nothing: not read again.
        if unmeasured_before.contains(&key) {
            unmeasured.push(key);
            continue;
        }
        let measured = match crate::runs::read_run(dir, &key.0) {
            Ok(Some(records)) => measure(&records),
            _ => None,
        };
        match measured {
            Some(m) if m.start_ms >= since => fresh.push((key.0, len, m)),
            _ => unmeasured.push(key),
        }
    }
    if unmeasured != unmeasured_before {
        write_unmeasured(&state, &unmeasured);
    }
    if fresh.is_empty() {
        crate::order::sort_by(&mut entries, by_start);
        return entries;
    }
    let refs = update_refs(&state, &fresh);
    for (run, len, m) in &mut fresh {
        let (run, len) = (std::mem::take(run), *len);
        let mut work_us: u64 = 0;
        for (test, t) in &m.tests {
            let mean = t.hold_us / t.count.max(1);
            let r = refs.get(test).copied().unwrap_or(mean).min(mean);
            work_us += r.saturating_mul(t.count);
        }
        let (auto, gpu, why) = match m.choice.take() {
            Some(c) => (true, c.gpu, Some(c.why)),
            None => (false, String::new(), None),
        };
        let entry = HistoryEntry {
            v: VERSION,
            run: run.clone(),
            unix_ms: m.start_ms,
            per_gpu: m.per_gpu,
            gpus: m.gpus,
            auto,
            gpu,
            holds: m.holds,
            span_us: m.span_us,
            busy_us: m.busy_us,
            unit_us: m.unit_us,
            work_us,
            queued_us: m.queued_us,
            peak: m.peak,
            unreturned: m.unreturned,
            failed: m.failed,
            casualties: m.casualties,
            why,
            source_len: len,
        };
        keep_entries(&mut entries, &|e| e.run != run);
        // A run too small to measure that lost nothing (a doctest's process, a filtered run of
        // one test) teaches nothing: it is not kept, so it pushes no real run out.
        if entry.measurable() || !entry.clean() {
            entries.push(entry);
        }
    }
    crate::order::sort_by(&mut entries, by_start);
    let start = entries.len().saturating_sub(HISTORY_KEPT);
    let entries = entries.split_off(start);
    let mut text = String::new();
    for e in &entries {
        text.push_str(&e.to_text());
        text.push('\n');
    }
    replace(&file, &text);
    entries
}

/// When the history was last forgotten ([`SINCE_FILE`] in state directory `state`),
/// milliseconds since the Unix epoch; 0 where it never was, or the file says nothing usable.
fn forgotten_since(state: &Path) -> u64 {
    // Never through a link, nor from a FIFO planted at the name.
    let Some(f) = tests_file::open_own(&tests_file::state_path(state, SINCE_FILE)) else {
        return 0;
    };
    let mut buf = [0u8; 32];
    let Ok(n) = sys::read_at_start(&f, &mut buf) else {
        return 0;
    };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else {
        return 0;
    };
    let Ok(t) = text.trim().parse::<u64>() else {
        return 0;
    };
    // A time to come (a clock set wrong when it was written) would forget every run.
    if t <= crate::clock::now_unix_ms().saturating_add(86_400_000) {
        t
    } else {
        0
    }
}

/// The runs [`UNMEASURED_FILE`] in state directory `state` lists, with the lengths they were
/// read at; none where it cannot be read. Read only where this user wrote it.
fn read_unmeasured(state: &Path) -> Vec<(String, u64)> {
    let Some(file) = tests_file::open_own(&tests_file::state_path(state, UNMEASURED_FILE)) else {
        return Vec::new();
    };
    let mut buf = vec![0u8; UNMEASURED_KEPT * 160];
    let Ok(n) = sys::read_at_start(&file, &mut buf) else {
        return Vec::new();
    };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines().take(UNMEASURED_KEPT) {
        if let Some((key, len)) = line.split_once(' ')
            && let Ok(len) = len.parse::<u64>()
        {
            out.push((key.to_string(), len));
        }
    }
    out
}

/// Replaces [`UNMEASURED_FILE`] in state directory `state` with `runs` (the newest
/// [`UNMEASURED_KEPT`]), under the history's lock.
fn write_unmeasured(state: &Path, runs: &[(String, u64)]) {
    let mut text = String::new();
    for (key, len) in runs.iter().rev().take(UNMEASURED_KEPT).rev() {
        text.push_str(&format!("{key} {len}\n"));
    }
    if let Ok(file) =
        tests_file::open_own_for_writing(&tests_file::state_path(state, UNMEASURED_FILE))
    {
        replace(&file, &text);
    }
}

/// Whether `entries` hold run `run` measured when its record file was `len` bytes long.
fn measured_at(entries: &[HistoryEntry], run: &str, len: u64) -> bool {
    for e in entries {
        if e.run == run && e.source_len == len {
            return true;
        }
    }
    false
}

/// Updates the tests' reference hold times with `fresh` runs; returns them.
fn update_refs(state: &Path, fresh: &[(String, u64, RunMeasure)]) -> HashMap<String, u64> {
    let file = open_locked(state, TESTS_FILE);
    let (mut old, bad) = match &file {
        Some(f) => read_lines(f, tests_file::parse),
        None => (Vec::new(), 0),
    };
    say_ignored(&tests_file::state_path(state, TESTS_FILE), bad);
    let mut refs: HashMap<String, TestLine> = HashMap::new();
    for r in &mut old {
        refs.insert(r.test.clone(), std::mem::take(r));
    }
    for (_, _, m) in fresh {
        for (test, t) in &m.tests {
            let mean = t.hold_us / t.count.max(1);
            let r = match refs.entry(test.clone()) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => new.insert(TestLine::new(
                    t.binary.clone(),
                    t.name.clone(),
                    mean,
                    m.start_ms,
                )),
            };
            if r.binary.is_none() {
                (r.binary, r.name) = (Some(t.binary.clone()), Some(t.name.clone()));
            }
            r.us = r.us.min(mean);
            r.seen = r.seen.max(m.start_ms);
            if let Some(bytes) = t.memory_used {
                r.mem = Some(match r.mem {
                    Some(b) => b.max(bytes),
                    None => bytes,
                });
            }
        }
    }
    let mut kept: Vec<TestLine> = Vec::with_capacity(refs.len());
    for r in refs.into_values() {
        kept.push(r);
    }
    crate::order::sort_by(&mut kept, |a, b| match b.seen.cmp(&a.seen) {
        std::cmp::Ordering::Equal => a.test.cmp(&b.test),
        by_seen => by_seen,
    });
    kept.truncate(TESTS_KEPT);
    if let Some(file) = &file {
        replace(file, &tests_file::encode(&kept));
    }
    let mut times = HashMap::new();
    for r in &mut kept {
        times.insert(std::mem::take(&mut r.test), r.us);
    }
    times
}

/// Forgets the run history of slot directory `dir` and its tests' reference times; the runs
/// recorded so far are not measured again. Returns how many runs there were.
///
/// # Errors
///
/// A history file that exists but cannot be emptied (permissions, a lock held).
#[cfg(any(test, feature = "__cli"))]
pub fn forget_history(dir: &Path) -> std::io::Result<usize> {
    let count = read_history(dir).len();
    for name in [HISTORY_FILE, TESTS_FILE] {
        for d in crate::hangs::kept_dirs(dir) {
            let path = tests_file::state_path(&d, name);
            if std::fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let file = tests_file::open_own_for_writing(&path)?;
            if !sys::lock_within(&file, Duration::from_secs(2)) {
                return Err(std::io::Error::other(format!(
                    "{} is locked by another process",
                    path.display()
                )));
            }
            file.set_len(0)?;
        }
    }
    // Made (or `dir` itself) by `record_dir`.
    let state = crate::hangs::record_dir(dir);
    let since = tests_file::state_path(&state, SINCE_FILE);
    let file = tests_file::open_own_for_writing(&since)?;
    let text = format!("{}\n", crate::clock::now_unix_ms());
    sys::write_at(&file, text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)?;
    Ok(count)
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes for [`known`], byte for byte (as the serde-derived code of
    /// earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/history/v1");

    fn known() -> Vec<HistoryEntry> {
        let h = HistoryEntry {
            v: 1,
            run: "run-1".into(),
            unix_ms: 1_764_300_000_000,
            per_gpu: 3,
            gpus: 2,
            auto: true,
            gpu: "NVIDIA GB10 (CUDA 12.8)".into(),
            holds: 120,
            span_us: 60_000_000,
            busy_us: 55_000_000,
            unit_us: 150_000_000,
            work_us: 140_000_000,
            queued_us: 20_000_000,
            peak: 6,
            unreturned: 0,
            failed: 1,
            casualties: 0,
            why: Some("N = 3: \"busy\" 98%".into()),
            source_len: 123_456,
        };
        let h2 = HistoryEntry {
            run: "run-2".into(),
            auto: false,
            gpu: String::new(),
            why: None,
            unix_ms: 1_764_300_100_000,
            ..h.clone()
        };
        vec![h, h2]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        crate::json::check_golden(GOLDEN, &known());
        assert_eq!(history_lines(GOLDEN), (known(), 0));
    }
}
