//! Reading a run's records back: every line that parses, a count of those that do not.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
#[cfg(any(test, feature = "__cli"))]
use std::time::Duration;
use std::time::SystemTime;

use super::record::RunRecord;
use super::{file_name, run_files};
use crate::json::Record;
use crate::sys;

/// The most of a run's file that is read: 20,000 tests write about 10 MiB.
const READ_LIMIT: u64 = 512 << 20;
/// The longest line read; a longer one is not a record.
const LONGEST_LINE: usize = 64 << 10;

/// The records of one run, as read from its file in the slot directory.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RunRecords {
    /// The run id.
    pub run_id: String,
    /// The file they were read from (the command names it).
    #[cfg_attr(not(feature = "__cli"), allow(dead_code))]
    pub path: PathBuf,
    /// The records, in the order they were written.
    pub records: Vec<RunRecord>,
    /// Lines that were not records (cut short, too long, written by something else) or were
    /// records of another run; they are left out.
    pub unreadable: usize,
    /// Whether the file was larger than the most that is read (512 MiB) and its end left out.
    pub truncated: bool,
}

/// A record file that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunsError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for RunsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot read the run records {}: {}",
            self.path.display(),
            self.message
        )
    }
}

impl std::error::Error for RunsError {}

/// The records of run `run_id` in slot directory `dir`, or `None` when it has none.
///
/// # Errors
///
/// When the run's file exists but cannot be read, or is not a regular file.
pub fn read_run(dir: &Path, run_id: &str) -> Result<Option<RunRecords>, RunsError> {
    let path = dir.join(file_name(run_id));
    let file = match sys::open_regular_for_reading(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(RunsError {
                path,
                message: e.to_string(),
            });
        }
    };
    let mut out = RunRecords {
        run_id: run_id.to_string(),
        path: path.clone(),
        ..RunRecords::default()
    };
    let mut reader = BufReader::with_capacity(1 << 16, file.take(READ_LIMIT + 1));
    let mut line = Vec::new();
    let mut read_bytes: u64 = 0;
    loop {
        line.clear();
        let n = match reader
            .by_ref()
            .take(LONGEST_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(n) => n,
            Err(e) => {
                return Err(RunsError {
                    path,
                    message: e.to_string(),
                });
            }
        };
        if n == 0 {
            break;
        }
        read_bytes += n as u64;
        if read_bytes > READ_LIMIT {
            out.truncated = true;
            break;
        }
        if line.last() != Some(&b'\n') {
            if n > LONGEST_LINE {
                // Skip the rest of the overlong line.
                let mut rest = Vec::new();
                let _ = reader.read_until(b'\n', &mut rest);
                read_bytes += rest.len() as u64;
            }
            out.unreadable += 1;
            continue;
        }
        match RunRecord::from_bytes(&line) {
            // A run id that cannot be a file name is found under its hash: `run_id` may be
            // either.
            Ok(r) if r.run() == run_id || file_name(r.run()) == file_name(run_id) => {
                if out.records.is_empty() {
                    out.run_id = r.run().to_string();
                }
                out.records.push(r);
            }
            _ => out.unreadable += 1,
        }
    }
    Ok(Some(out))
}

/// A run with records in a slot directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedRun {
    /// The run id.
    pub run_id: String,
    /// When its file was last written.
    pub modified: SystemTime,
    /// Bytes in its file.
    pub len: u64,
    /// Whether its file belongs to this process's user (in a shared directory, other users'
    /// runs are there too).
    pub mine: bool,
}

/// The runs recorded in `dir`, the most recently written last. A run whose id could not be a
/// file name is listed under the name its file has.
pub fn recorded_runs(dir: &Path) -> Vec<RecordedRun> {
    let mut runs: Vec<RecordedRun> = Vec::new();
    for f in run_files(dir) {
        let Some(name) = f.path.file_name() else {
            continue;
        };
        let name = name.to_string_lossy();
        let Some(key) = name.strip_prefix(super::FILE_PREFIX) else {
            continue;
        };
        runs.push(RecordedRun {
            run_id: key.to_string(),
            modified: f.modified,
            len: f.len,
            mine: f.mine,
        });
    }
    crate::order::sort_by(&mut runs, |a, b| a.modified.cmp(&b.modified));
    runs
}

/// When the first record of run `run_id` in `dir` was written (its own time), where its
/// first line is a record.
#[cfg(any(test, feature = "__cli"))]
pub fn first_record_time(dir: &Path, run_id: &str) -> Option<SystemTime> {
    let file = sys::open_regular_for_reading(&dir.join(file_name(run_id))).ok()?;
    let mut line = Vec::new();
    BufReader::new(file.take(LONGEST_LINE as u64 + 1))
        .read_until(b'\n', &mut line)
        .ok()?;
    let record = RunRecord::from_bytes(&line).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_micros(record.unix_us()))
}
