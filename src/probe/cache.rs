//! The probe answer shared by the processes of one `cargo nextest` run.
//!
//! One file per run and backend, `<slot dir>/probe-<uid>/<run id>-<backend>.json`, next to a
//! `.lock` file. A process that finds no valid file takes the lock, looks again (another
//! process may have just probed), probes, writes a temporary file and renames it into place,
//! so readers see either no file or a whole one. Files older than a day are removed.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{Backend, ProbeOptions, ProbeOutcome, ProbeReport, ProbeSource, probe_with};
use crate::config::{Config, SlotDir};

const FORMAT: &str = "gpu-test-permit-probe-cache";
const VERSION: u32 = 1;
/// Older files belong to a run that is long over (or to a clock gone wrong): not trusted.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: String,
    version: u32,
    run_id: String,
    backend: Backend,
    written_unix_ms: u64,
    report: ProbeReport,
}

/// Probes through the run cache when running under `cargo nextest`, else directly.
pub(super) fn probe_shared(backend: Backend, opts: &ProbeOptions, cfg: &Config) -> ProbeReport {
    if !backend.is_built() {
        return probe_with(backend, opts);
    }
    let Some(run_id) = cfg.nextest.as_ref().and_then(|n| n.run_id.as_deref()) else {
        return probe_with(backend, opts);
    };
    if let Some(report) = read_fast(cfg, run_id, backend) {
        return report;
    }
    let dir = match cache_dir(cfg) {
        Ok(dir) => dir,
        Err(e) => {
            warn_once(&format!(
                "gpu-test-permit: not sharing probe results between test processes: {e}"
            ));
            return probe_with(backend, opts);
        }
    };
    let path = dir.join(format!("{}-{backend}.json", file_stem(run_id)));
    if let Some(report) = read_valid(&path, run_id, backend) {
        return report;
    }
    // Concurrent first probes of one run: one probes, the others wait here and read its answer.
    let lock = match crate::sys::open_lock_file(&path.with_extension("lock"), false)
        .and_then(|f| f.lock().map(|()| f))
    {
        Ok(f) => f,
        Err(e) => {
            warn_once(&format!(
                "gpu-test-permit: cannot lock the probe cache {}: {e}; probing without it",
                path.display()
            ));
            return probe_with(backend, opts);
        }
    };
    if let Some(report) = read_valid(&path, run_id, backend) {
        return report;
    }
    let report = probe_with(backend, opts);
    if let Err(e) = write_atomically(&path, run_id, &report) {
        warn_once(&format!(
            "gpu-test-permit: cannot write the probe cache {}: {e}",
            path.display()
        ));
    }
    drop(lock);
    remove_old_files(&dir);
    report
}

fn warn_once(msg: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| eprintln!("{msg}"));
}

fn slot_dir(cfg: &Config) -> Result<PathBuf, String> {
    match &cfg.slot_dir {
        SlotDir::Default => Ok(crate::config::default_slot_dir()),
        SlotDir::Explicit(p) => Ok(p.clone()),
        SlotDir::Invalid(msg) => Err(msg.clone()),
    }
}

/// Per user: the slot directory may be shared by several users, the cache need not be.
fn user_dir(slots: &Path) -> PathBuf {
    #[cfg(unix)]
    {
        slots.join(format!("probe-{}", crate::sys::effective_uid()))
    }
    #[cfg(not(unix))]
    {
        slots.join("probe")
    }
}

fn cache_dir(cfg: &Config) -> Result<PathBuf, String> {
    let slots = slot_dir(cfg)?;
    crate::sys::prepare_dir(&slots)?;
    let dir = user_dir(&slots);
    crate::sys::prepare_dir(&dir)?;
    Ok(dir)
}

/// The common case of every test process after a run's first: the file is there. Checks
/// ownership with two `stat`s instead of `prepare_dir`'s write test, and leaves anything
/// unusual to the slow path.
#[cfg(unix)]
fn read_fast(cfg: &Config, run_id: &str, backend: Backend) -> Option<ProbeReport> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let me = crate::sys::effective_uid();
    let dir = user_dir(&slot_dir(cfg).ok()?);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return None;
    }
    let path = dir.join(format!("{}-{backend}.json", file_stem(run_id)));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .ok()?;
    if file.metadata().ok()?.uid() != me {
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    validate(&bytes, run_id, backend, now_ms()).ok()
}

#[cfg(not(unix))]
fn read_fast(_cfg: &Config, _run_id: &str, _backend: Backend) -> Option<ProbeReport> {
    None
}

/// A file-name-safe form of the run id (nextest's are UUIDs, but the variable is user input).
fn file_stem(run_id: &str) -> String {
    let mut s: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if s.is_empty() {
        s.push('_');
    }
    s
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Reads the cache file; `None` when there is none or it cannot be trusted (then it is
/// reported once and probed again).
fn read_valid(path: &Path, run_id: &str, backend: Backend) -> Option<ProbeReport> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn_once(&format!(
                "gpu-test-permit: cannot read the probe cache {}: {e}; probing again",
                path.display()
            ));
            return None;
        }
    };
    match validate(&bytes, run_id, backend, now_ms()) {
        Ok(report) => Some(report),
        Err(why) => {
            warn_once(&format!(
                "gpu-test-permit: ignoring the probe cache {}: {why}; probing again",
                path.display()
            ));
            None
        }
    }
}

fn validate(bytes: &[u8], run_id: &str, backend: Backend, now: u64) -> Result<ProbeReport, String> {
    let file: CacheFile =
        serde_json::from_slice(bytes).map_err(|e| format!("it is not a valid cache file ({e})"))?;
    if file.format != FORMAT || file.version != VERSION {
        return Err(format!(
            "it has format {} version {}, expected {FORMAT} version {VERSION}",
            file.format, file.version
        ));
    }
    if file.run_id != run_id || file.backend != backend || file.report.backend != backend {
        return Err(format!(
            "it belongs to run {} backend {}, not run {run_id} backend {backend}",
            file.run_id, file.backend
        ));
    }
    let age = now.saturating_sub(file.written_unix_ms);
    if age > MAX_AGE.as_millis() as u64 || file.written_unix_ms > now + 60_000 {
        return Err("it is stale (written more than a day ago, or in the future)".into());
    }
    if matches!(&file.report.outcome, ProbeOutcome::Devices { devices } if devices.is_empty()) {
        return Err("it lists an empty set of devices".into());
    }
    Ok(ProbeReport {
        source: ProbeSource::RunCache,
        ..file.report
    })
}

fn write_atomically(path: &Path, run_id: &str, report: &ProbeReport) -> std::io::Result<()> {
    let file = CacheFile {
        format: FORMAT.into(),
        version: VERSION,
        run_id: run_id.into(),
        backend: report.backend,
        written_unix_ms: now_ms(),
        report: report.clone(),
    };
    let json = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        // No fsync: a file cut short by a machine crash fails validation and is re-probed.
        f.write_all(&json)?;
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
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(run: &str, backend: Backend, written: u64, outcome: ProbeOutcome) -> Vec<u8> {
        serde_json::to_vec(&CacheFile {
            format: FORMAT.into(),
            version: VERSION,
            run_id: run.into(),
            backend,
            written_unix_ms: written,
            report: ProbeReport {
                backend,
                outcome,
                duration: Duration::from_millis(5),
                source: ProbeSource::Child,
            },
        })
        .unwrap()
    }

    #[test]
    fn validation() {
        let now = 1_000_000_000_000;
        let none = || ProbeOutcome::NoDevices { detail: "x".into() };
        let ok = validate(
            &file("r1", Backend::Cuda, now, none()),
            "r1",
            Backend::Cuda,
            now,
        );
        assert_eq!(ok.unwrap().source, ProbeSource::RunCache);
        let bad: [(Vec<u8>, &str); 6] = [
            (b"{\"format\":".to_vec(), "not a valid cache file"),
            (b"".to_vec(), "not a valid cache file"),
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
            let err = validate(&bytes, "r1", Backend::Cuda, now).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn run_ids_become_safe_file_names() {
        assert_eq!(file_stem("0b1f-AA"), "0b1f-AA");
        assert_eq!(file_stem("../x y"), "___x_y");
        assert_eq!(file_stem(""), "_");
        assert_eq!(file_stem(&"a".repeat(200)).len(), 80);
    }
}
