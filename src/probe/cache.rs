//! The probe answer shared by the processes of one `cargo nextest` run.
//!
//! One file per run, backend and [key](key), `<slot dir>/probe-<uid>/<run id>-<backend>-<key>.json`,
//! next to a `.lock` file. The key is a hash of what changes the answer besides the machine:
//! the probe deadline and mode and the environment that selects drivers and devices
//! ([`KEY_VARS`]), so test processes of one run that differ there do not share an answer.
//!
//! A process that finds no final answer takes the lock (waiting at most one probe's deadline
//! and a little more, then probing on its own), looks again (another process may have just
//! probed), probes, writes a temporary file and renames it into place, so readers see either
//! no file or a whole one. A timed-out probe (or a child that could not start) may be an
//! accident of a busy machine: it is counted in the file and probed again by the run's next
//! processes, and only the [`TIMEOUT_ATTEMPTS`]th becomes the run's answer. Files older than
//! a day are removed.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime};

use super::child::inside_probe_child;
use super::fresh::probe_with;
use super::options::ProbeOptions;
use super::outcome::ProbeOutcome;
use super::report::{ProbeReport, ProbeSource};
use super::spawn::START_FAILED;
use crate::backend::{Backend, ProbeMode};
use crate::config::Config;
use crate::json::{self, Fields, Object, Record, Value};

const FORMAT: &str = "gpu-test-permit-probe-cache";
const VERSION: u32 = 2;
/// Older files belong to a run that is long over (or to a clock gone wrong): not trusted.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// How many timed-out probes of one run (and key) it takes before a timeout is the run's answer.
pub(super) const TIMEOUT_ATTEMPTS: u32 = 3;
/// How much longer than one probe's deadline a process waits for the lock that another
/// process holds while it probes.
const LOCK_SLACK: Duration = Duration::from_secs(3);

#[derive(Debug, PartialEq)]
struct CacheFile {
    format: String,
    version: u32,
    run_id: String,
    backend: Backend,
    key: String,
    written_unix_ms: u64,
    /// Timed-out (or unstarted) probes of this run and key so far.
    timeouts: u32,
    report: ProbeReport,
}

/// The file: `{"format":"gpu-test-permit-probe-cache","version":2,"run_id":..,"backend":..,
/// "key":..,"written_unix_ms":..,"timeouts":..,"report":{...}}` (the report without
/// `run_cache`).
impl json::Write for CacheFile {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("format", &self.format)
                .field("version", self.version)
                .field("run_id", &self.run_id)
                .field("backend", self.backend)
                .field("key", &self.key)
                .field("written_unix_ms", self.written_unix_ms)
                .field("timeouts", self.timeouts)
                .field("report", &self.report)
                .finish(),
        );
    }
}

impl Record for CacheFile {
    fn read_json(v: &Value) -> Result<CacheFile, String> {
        let f = Fields::of(v, "probe cache file")?;
        Ok(CacheFile {
            format: f.req("format")?,
            version: f.req("version")?,
            run_id: f.req("run_id")?,
            backend: Backend::read_field(&f, "backend")?,
            key: f.req("key")?,
            written_unix_ms: f.req("written_unix_ms")?,
            timeouts: f.req("timeouts")?,
            report: f.record("report")?,
        })
    }
}

impl CacheFile {
    /// Whether the report is the run's answer, or only the latest of too few attempts.
    fn is_final(&self) -> bool {
        !is_transient(&self.report.outcome) || self.timeouts >= TIMEOUT_ATTEMPTS
    }

    fn into_report(self, path: &Path) -> ProbeReport {
        ProbeReport {
            source: ProbeSource::RunCache,
            run_cache: Some(path.to_path_buf()),
            ..self.report
        }
    }
}

/// Outcomes that a busy moment can cause: a deadline passed, a child that could not start.
fn is_transient(outcome: &ProbeOutcome) -> bool {
    match outcome {
        ProbeOutcome::TimedOut { .. } => true,
        ProbeOutcome::Error { detail } => detail.starts_with(START_FAILED),
        _ => false,
    }
}

/// The key of the answers `opts` gets in this environment: a hash of the deadline, the mode
/// and [`PROBE_KEY_VARS`](crate::config::PROBE_KEY_VARS) as the probe child would see them.
fn key(opts: &ProbeOptions) -> String {
    // FNV-1a: stable across builds and processes, unlike std's hashers.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        // Each field, then 0xff.
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    };
    eat(&opts.timeout.as_millis().to_le_bytes());
    eat(&[matches!(opts.mode, ProbeMode::InProcess) as u8]);
    for name in crate::config::PROBE_KEY_VARS {
        eat(name.as_bytes());
        let value = key_var(opts, name);
        eat(&[u8::from(value.is_some())]);
        eat(match &value {
            Some(v) => v.as_encoded_bytes(),
            None => &[],
        });
    }
    format!("{h:016x}")
}

/// The value variable `name` has in the probe `opts` describe: the last that `opts` set (or
/// removed), else this process's.
fn key_var(opts: &ProbeOptions, name: &str) -> Option<std::ffi::OsString> {
    let mut at = opts.env.len();
    while at > 0 {
        at -= 1;
        let (k, v) = &opts.env[at];
        if k == name {
            return v.clone();
        }
    }
    crate::config::probe_key_var(name)
}

/// Probes through the run cache when running under `cargo nextest`, else directly.
pub(super) fn probe_shared(backend: Backend, opts: &ProbeOptions, cfg: &Config) -> ProbeReport {
    // A probe child (a constructor calling the probe) must not answer for the whole run.
    if !backend.is_built() || inside_probe_child() {
        return probe_with(backend, opts);
    }
    let Some(crate::config::NextestEnv {
        run_id: Some(run_id),
        ..
    }) = &cfg.nextest
    else {
        return probe_with(backend, opts);
    };
    let key = key(opts);
    let name = format!("{}-{backend}-{key}.json", file_stem(run_id));
    if let Some(report) = read_fast(cfg, &name, run_id, backend, &key) {
        return report;
    }
    let dir = match cache_dir(cfg) {
        Ok(dir) => dir,
        Err(e) => {
            warn_once(&format!(
                "not sharing probe results between test processes: {e}"
            ));
            return probe_with(backend, opts);
        }
    };
    let path = dir.join(name);
    if let Some(file) = read_valid(&path, run_id, backend, &key)
        && file.is_final()
    {
        return file.into_report(&path);
    }
    // Concurrent first probes of one run: one probes, the others wait here and read its answer.
    let lock_path = path.with_extension("lock");
    let lock = match lock_until(&lock_path, opts.timeout + LOCK_SLACK) {
        Ok(Some(f)) => f,
        Ok(None) => {
            warn_once(&format!(
                "gave up waiting for the probe cache lock {} after {} ms \
                 (another test process is probing); probing without the cache",
                lock_path.display(),
                (opts.timeout + LOCK_SLACK).as_millis()
            ));
            return probe_with(backend, opts);
        }
        Err(e) => {
            warn_once(&format!(
                "cannot lock the probe cache {}: {e}; probing without it",
                path.display()
            ));
            return probe_with(backend, opts);
        }
    };
    let previous = read_valid(&path, run_id, backend, &key);
    let timeouts = match previous {
        Some(file) if file.is_final() => return file.into_report(&path),
        Some(file) => file.timeouts,
        None => 0,
    };
    let report = probe_with(backend, opts);
    let timeouts = timeouts + u32::from(is_transient(&report.outcome));
    if let Err(e) = write_atomically(&path, run_id, &key, timeouts, &report) {
        warn_once(&format!(
            "cannot write the probe cache {}: {e}",
            path.display()
        ));
    }
    drop(lock);
    remove_old_files(&dir);
    report
}

/// Opens and locks the lock file at `path`, waiting at most `patience`; `None` when that
/// passed. The wait blocks on a thread of its own (std has no lock with a timeout); a wait
/// given up on ends there: the lock, if it comes, is released at once.
fn lock_until(path: &Path, patience: Duration) -> std::io::Result<Option<File>> {
    let file = crate::sys::open_lock_file(path, false)?;
    match file.try_lock() {
        Ok(()) => return Ok(Some(file)),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => return Err(e),
    }
    let answer = Arc::new(crate::mailbox::Mailbox::new());
    let tx = Arc::clone(&answer);
    crate::sys::spawn_boxed(
        "gpu-test-permit probe cache lock",
        Box::new(move || {
            // If nobody waits any more, the file and its lock drop with the message.
            tx.send(match file.lock() {
                Ok(()) => Ok(file),
                Err(e) => Err(e),
            });
        }),
    )?;
    match answer.recv_within(patience) {
        Some(Ok(file)) => Ok(Some(file)),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

fn warn_once(msg: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| crate::notice::line(msg));
}

/// Per user: the slot directory may be shared by several users, the cache need not be.
fn user_dir(slots: &Path) -> PathBuf {
    slots.join(crate::sys::per_user_name("probe"))
}

fn cache_dir(cfg: &Config) -> Result<PathBuf, String> {
    let slots = cfg.slot_dir_path()?;
    crate::sys::prepare_dir(&slots)?;
    let dir = user_dir(&slots);
    crate::sys::prepare_dir(&dir)?;
    Ok(dir)
}

/// The common case of every test process after a run's first: the file is there. Checks
/// ownership with two `stat`s instead of `prepare_dir`'s write test (where owners can be told
/// that cheaply), and leaves anything unusual to the slow path.
fn read_fast(
    cfg: &Config,
    name: &str,
    run_id: &str,
    backend: Backend,
    key: &str,
) -> Option<ProbeReport> {
    use std::io::Read;
    let dir = user_dir(&cfg.slot_dir_path().ok()?);
    let mut file = crate::sys::open_private_file(&dir, name)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let file = validate(&bytes, run_id, backend, key, crate::clock::now_unix_ms()).ok()?;
    if file.is_final() {
        Some(file.into_report(&dir.join(name)))
    } else {
        None
    }
}

/// A file-name-safe form of the run id (nextest's are UUIDs, but the variable is user input).
fn file_stem(run_id: &str) -> String {
    let mut s = String::new();
    for c in run_id.chars().take(80) {
        if c.is_ascii_alphanumeric() || c == '-' {
            s.push(c);
        } else {
            s.push('_');
        }
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

/// Reads the cache file; `None` when there is none or it cannot be trusted (then it is
/// reported once and probed again).
fn read_valid(path: &Path, run_id: &str, backend: Backend, key: &str) -> Option<CacheFile> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn_once(&format!(
                "cannot read the probe cache {}: {e}; probing again",
                path.display()
            ));
            return None;
        }
    };
    match validate(&bytes, run_id, backend, key, crate::clock::now_unix_ms()) {
        Ok(file) => Some(file),
        Err(why) => {
            warn_once(&format!(
                "ignoring the probe cache {}: {why}; probing again",
                path.display()
            ));
            None
        }
    }
}

fn validate(
    bytes: &[u8],
    run_id: &str,
    backend: Backend,
    key: &str,
    now: u64,
) -> Result<CacheFile, String> {
    let file = match CacheFile::from_bytes(bytes) {
        Ok(file) => file,
        Err(e) => return Err(format!("it is not a valid cache file ({e})")),
    };
    if file.format != FORMAT || file.version != VERSION {
        return Err(format!(
            "it has format {} version {}, expected {FORMAT} version {VERSION}",
            file.format, file.version
        ));
    }
    if file.run_id != run_id
        || file.backend != backend
        || file.report.backend != backend
        || file.key != key
    {
        return Err(format!(
            "it belongs to run {} backend {} key {}, not run {run_id} backend {backend} key {key}",
            file.run_id, file.backend, file.key
        ));
    }
    let age = now.saturating_sub(file.written_unix_ms);
    if age > MAX_AGE.as_millis() as u64 || file.written_unix_ms > now + 60_000 {
        return Err("it is stale (written more than a day ago, or in the future)".into());
    }
    if matches!(&file.report.outcome, ProbeOutcome::Devices { devices } if devices.is_empty()) {
        return Err("it lists an empty set of devices".into());
    }
    Ok(file)
}

fn write_atomically(
    path: &Path,
    run_id: &str,
    key: &str,
    timeouts: u32,
    report: &ProbeReport,
) -> std::io::Result<()> {
    let file = CacheFile {
        format: FORMAT.into(),
        version: VERSION,
        run_id: run_id.into(),
        backend: report.backend,
        key: key.into(),
        written_unix_ms: crate::clock::now_unix_ms(),
        timeouts,
        report: ProbeReport {
            run_cache: None,
            ..report.clone()
        },
    };
    let json = file.to_text();
    // One name a process is enough: the caller holds the cache file's lock (`lock_until`, a
    // lock of its own open file, so threads of this process exclude each other too).
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        // No fsync: a file cut short by a machine crash fails validation and is re-probed.
        f.write_all(json.as_bytes())?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn remove_old_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let cutoff = SystemTime::now() - MAX_AGE;
    for entry in entries.flatten() {
        let old = match entry.metadata() {
            Ok(m) => matches!(m.modified(), Ok(t) if t < cutoff),
            Err(_) => false,
        };
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl ProbeReport {
    /// For a broken outcome (crash, hang, error, malformed answer) that came from the run
    /// cache: says so, and how to get a fresh probe. Skip and failure reasons end with it, so
    /// nobody hunts a driver bug in a test process that never probed.
    ///
    /// ```
    /// use gpu_test_permit::probe::{probe, Backend};
    ///
    /// let report = probe(Backend::Cuda);
    /// if let Some(note) = report.run_cache_note() {
    ///     println!("{report} ({note})");
    /// }
    /// ```
    pub fn run_cache_note(&self) -> Option<String> {
        let path = self.run_cache.as_ref()?;
        if !self.outcome.is_broken() {
            return None;
        }
        let attempts = match self.outcome {
            ProbeOutcome::TimedOut { .. } => {
                format!(" after {} timed-out attempts", TIMEOUT_ATTEMPTS)
            }
            _ => String::new(),
        };
        Some(format!(
            "this result comes from the run cache {}, written by an earlier test process of              this nextest run{attempts}; delete that file, or start a new run, for a fresh probe",
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(
        run: &str,
        backend: Backend,
        written: u64,
        timeouts: u32,
        outcome: ProbeOutcome,
    ) -> Vec<u8> {
        CacheFile {
            format: FORMAT.into(),
            version: VERSION,
            run_id: run.into(),
            backend,
            key: "k1".into(),
            written_unix_ms: written,
            timeouts,
            report: ProbeReport {
                backend,
                outcome,
                duration: Duration::from_millis(5),
                source: ProbeSource::Child,
                run_cache: None,
            },
        }
        .to_text()
        .into_bytes()
    }

    fn file(run: &str, backend: Backend, written: u64, outcome: ProbeOutcome) -> Vec<u8> {
        file_with(run, backend, written, 0, outcome)
    }

    #[test]
    fn validation() {
        let now = 1_000_000_000_000;
        let none = || ProbeOutcome::NoDevices { detail: "x".into() };
        let ok = validate(
            &file("r1", Backend::Cuda, now, none()),
            "r1",
            Backend::Cuda,
            "k1",
            now,
        )
        .unwrap();
        assert!(ok.is_final());
        let report = ok.into_report(Path::new("/c/r1.json"));
        assert_eq!(report.source, ProbeSource::RunCache);
        assert_eq!(report.run_cache.as_deref(), Some(Path::new("/c/r1.json")));
        let huge = String::from_utf8(file("r1", Backend::Cuda, now, none()))
            .unwrap()
            .replace("\"duration_ms\":5.0", "\"duration_ms\":1e300");
        let bad: [(Vec<u8>, &str); 7] = [
            (b"{\"format\":".to_vec(), "not a valid cache file"),
            (b"".to_vec(), "not a valid cache file"),
            (huge.into_bytes(), "not a valid cache file"),
            (
                file("r2", Backend::Cuda, now, none()),
                "belongs to run r2 backend cuda",
            ),
            (
                file("r1", Backend::Wgpu, now, none()),
                "belongs to run r1 backend wgpu",
            ),
            (
                file(
                    "r1",
                    Backend::Cuda,
                    now - MAX_AGE.as_millis() as u64 - 1,
                    none(),
                ),
                "stale",
            ),
            (
                file(
                    "r1",
                    Backend::Cuda,
                    now,
                    ProbeOutcome::Devices { devices: vec![] },
                ),
                "empty set",
            ),
        ];
        for (bytes, want) in bad {
            let err = validate(&bytes, "r1", Backend::Cuda, "k1", now)
                .err()
                .unwrap();
            assert!(err.contains(want), "{err}");
        }
        let err = validate(
            &file("r1", Backend::Cuda, now, none()),
            "r1",
            Backend::Cuda,
            "k2",
            now,
        )
        .err()
        .unwrap();
        assert!(err.contains("key k1"), "{err}");
    }

    #[test]
    fn a_timeout_is_the_answer_only_after_enough_attempts() {
        let now = 1_000_000_000_000;
        let timed_out = || ProbeOutcome::TimedOut {
            after: Duration::from_millis(300),
            stderr_tail: String::new(),
        };
        let unstarted = || ProbeOutcome::Error {
            detail: format!("{}: out of processes", START_FAILED),
        };
        let crashed = || ProbeOutcome::Crashed {
            signal: Some(11),
            exit_code: None,
            stderr_tail: String::new(),
        };
        for (outcome, timeouts, is_final) in [
            (timed_out(), 1, false),
            (timed_out(), TIMEOUT_ATTEMPTS - 1, false),
            (timed_out(), TIMEOUT_ATTEMPTS, true),
            (unstarted(), 1, false),
            (crashed(), 0, true),
        ] {
            let bytes = file_with("r1", Backend::Cuda, now, timeouts, outcome.clone());
            let f = validate(&bytes, "r1", Backend::Cuda, "k1", now).unwrap();
            assert_eq!(f.is_final(), is_final, "{outcome:?} after {timeouts}");
        }
    }

    #[test]
    fn the_key_follows_what_changes_the_answer() {
        let base = ProbeOptions::from_config(&Config::from_lookup(|_| None))
            .timeout(Duration::from_secs(10));
        let k = key(&base);
        assert_eq!(k, key(&base.clone()), "stable");
        assert_eq!(k.len(), 16);
        let others = [
            base.clone().timeout(Duration::from_secs(11)),
            base.clone().in_process(true),
            base.clone().env("CUDA_VISIBLE_DEVICES", "1"),
            base.clone().env("WGPU_BACKEND", "vulkan"),
            base.clone().env("VK_ICD_FILENAMES", "/x.json"),
            base.clone().env("LD_LIBRARY_PATH", "/opt/driver"),
        ];
        for o in others {
            assert_ne!(key(&o), k, "{o:?}");
        }
        // An unset variable and an empty one differ, too.
        let unset = base.clone().env_remove("WGPU_BACKEND");
        let empty = base.clone().env("WGPU_BACKEND", "");
        assert_ne!(key(&unset), key(&empty));
    }

    #[test]
    fn run_ids_become_safe_file_names() {
        assert_eq!(file_stem("0b1f-AA"), "0b1f-AA");
        assert_eq!(file_stem("../x y"), "___x_y");
        assert_eq!(file_stem(""), "_");
        assert_eq!(file_stem(&"a".repeat(200)).len(), 80);
    }
}

#[cfg(test)]
mod golden {
    //! The probe's JSON: reports (the run cache's and `probe --json`'s), the run cache file
    //! and the probe child's answer, as the serde-derived code of earlier versions wrote them.
    use super::*;
    use crate::probe::outcome::{Device, DeviceKind};
    use crate::probe::protocol::{Answer, Envelope, MARKER, parse_answer};

    const REPORTS: &str = include_str!("../../tests/data/probe-report/reports");
    const CACHE: &str = include_str!("../../tests/data/probe-cache/v2.json");
    const ANSWERS: &str = include_str!("../../tests/data/probe-answer/v1");

    fn outcomes() -> Vec<ProbeOutcome> {
        let dev = |index, kind, driver: Option<&str>, memory_bytes| Device {
            index,
            name: "NVIDIA GB10 \"x\" \u{e9}".into(),
            api: "cuda".into(),
            kind,
            driver: driver.map(str::to_string),
            memory_bytes,
        };
        vec![
            ProbeOutcome::Devices {
                devices: vec![
                    dev(0, DeviceKind::Discrete, Some("CUDA 12.8"), Some(128 << 30)),
                    dev(1, DeviceKind::Integrated, None, None),
                    dev(2, DeviceKind::Cpu, None, Some(1)),
                    dev(3, DeviceKind::Virtual, None, None),
                    dev(4, DeviceKind::Other, None, None),
                ],
            },
            ProbeOutcome::NoDevices {
                detail: "cuInit: CUDA_ERROR_NO_DEVICE (100)".into(),
            },
            ProbeOutcome::NotInstalled {
                detail: "libcuda.so.1 not found".into(),
            },
            ProbeOutcome::NotBuilt,
            ProbeOutcome::Error {
                detail: "cuInit failed\twith 999".into(),
            },
            ProbeOutcome::Crashed {
                signal: Some(11),
                exit_code: None,
                stderr_tail: "Segmentation fault\n".into(),
            },
            ProbeOutcome::Crashed {
                signal: None,
                exit_code: Some(-1),
                stderr_tail: String::new(),
            },
            ProbeOutcome::TimedOut {
                after: Duration::from_secs(5),
                stderr_tail: "stuck".into(),
            },
            ProbeOutcome::TimedOut {
                after: Duration::from_secs(100_000_000_000_000),
                stderr_tail: String::new(),
            },
            ProbeOutcome::Malformed {
                detail: "the answer is not valid JSON".into(),
                stderr_tail: "\u{1}".into(),
            },
        ]
    }

    /// The reports of [`REPORTS`]: every outcome and source, durations written plain and
    /// with an exponent.
    fn reports() -> Vec<ProbeReport> {
        let durations = [
            Duration::from_micros(12_345),
            Duration::from_millis(1000),
            Duration::from_nanos(1),
            Duration::ZERO,
            Duration::from_nanos(123_456_789),
            Duration::from_secs(3),
            Duration::from_nanos(7),
            Duration::from_secs(100_000_000_000_000),
            Duration::from_micros(1),
            Duration::from_nanos(10_500),
        ];
        let sources = [
            ProbeSource::Child,
            ProbeSource::InProcess,
            ProbeSource::ProcessCache,
            ProbeSource::RunCache,
        ];
        outcomes()
            .into_iter()
            .enumerate()
            .map(|(i, o)| ProbeReport {
                backend: if i % 2 == 0 {
                    Backend::Cuda
                } else {
                    Backend::Wgpu
                },
                outcome: o,
                duration: durations[i],
                source: sources[i % 4],
                run_cache: (i == 3)
                    .then(|| PathBuf::from("/tmp/gpu-test-permit/probe-1000/run-1-cuda-k.json")),
            })
            .collect()
    }

    #[test]
    fn reports_read_and_write_byte_for_byte() {
        let written: String = reports().iter().map(|r| r.to_json() + "\n").collect();
        assert_eq!(written, REPORTS);
        for (line, want) in REPORTS.lines().zip(reports()) {
            let read = ProbeReport::from_json(line).unwrap();
            // Milliseconds as a float: exact to the nanosecond for these.
            assert_eq!(read, want, "{line}");
        }
    }

    #[test]
    fn the_cache_file_reads_and_writes_byte_for_byte() {
        let file = CacheFile {
            format: FORMAT.into(),
            version: VERSION,
            run_id: "0191a2b3-run".into(),
            backend: Backend::Cuda,
            key: "0123456789abcdef".into(),
            written_unix_ms: 1_764_300_000_000,
            timeouts: 2,
            report: ProbeReport {
                backend: Backend::Cuda,
                outcome: outcomes().remove(0),
                duration: Duration::from_micros(12_345),
                source: ProbeSource::Child,
                run_cache: None,
            },
        };
        assert_eq!(file.to_text(), CACHE);
        let read = validate(
            CACHE.as_bytes(),
            "0191a2b3-run",
            Backend::Cuda,
            "0123456789abcdef",
            1_764_300_000_000,
        )
        .unwrap();
        assert_eq!(read, file);
    }

    #[test]
    fn answers_read_and_write_byte_for_byte() {
        let mut known: Vec<Envelope> = outcomes()
            .into_iter()
            .map(|outcome| Envelope {
                v: 1,
                answer: Answer::Probe { outcome },
            })
            .collect();
        known.push(Envelope {
            v: 1,
            answer: Answer::Pong { pid: 4242 },
        });
        crate::json::check_golden(ANSWERS, &known);
        for (line, want) in ANSWERS.lines().zip(known) {
            let stdout = format!("driver noise\n{MARKER}{line}\n");
            assert_eq!(parse_answer(stdout.as_bytes()).unwrap(), Some(want.answer));
        }
    }
}
