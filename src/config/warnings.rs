//! The record of a nextest run's configuration warnings in the slot directory.

use std::io::{self, Read, Seek, Write};
use std::path::Path;

use super::values::ConfigWarning;
use super::vars::WARNINGS_FILE;

/// The configuration warnings recorded by the test processes of one `cargo nextest` run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[doc(hidden)] // the `config` command's
pub struct RecordedWarnings {
    /// The run's `NEXTEST_RUN_ID`.
    pub run_id: String,
    /// When the first of them was recorded, milliseconds since the Unix epoch.
    pub recorded_unix_ms: u64,
    /// The warning lines, as printed on standard error.
    pub lines: Vec<String>,
}

const RECORD_HEADER: &str = "# gpu-test-permit configuration warnings of nextest run";

/// The warnings recorded in slot directory `dir` by the last `cargo nextest` run that had any
/// (see the module docs), or `None` when none are recorded.
///
/// # Errors
///
/// Reading the file failed (other than its not existing), or it is not such a record.
#[cfg(any(test, feature = "__cli"))]
#[doc(hidden)] // the `config` command's
pub fn recorded_warnings(dir: &Path) -> io::Result<Option<RecordedWarnings>> {
    let text = match std::fs::read_to_string(dir.join(WARNINGS_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(parse_record(&text))
}

fn parse_record(text: &str) -> Option<RecordedWarnings> {
    let mut lines = text.lines();
    let header = lines.next()?.strip_prefix(RECORD_HEADER)?;
    let (run_id, mut ms) = last_split(header.trim(), " at ")?;
    while let Some(rest) = ms.strip_suffix(" ms") {
        ms = rest;
    }
    let recorded_unix_ms = ms.parse().ok()?;
    let mut warnings = Vec::new();
    for line in lines {
        if !line.is_empty() {
            warnings.push(line.to_string());
        }
    }
    Some(RecordedWarnings {
        run_id: run_id.to_string(),
        recorded_unix_ms,
        lines: warnings,
    })
}

/// `text` split around the last `separator` in it.
fn last_split<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let mut at = text.len().checked_sub(separator.len())?;
    while !text.as_bytes()[at..].starts_with(separator.as_bytes()) {
        at = at.checked_sub(1)?;
    }
    Some((&text[..at], &text[at + separator.len()..]))
}

/// Adds `warnings` to the record of run `run_id` in `dir`, replacing the record of another run.
/// The file is locked while it is read and written, so concurrent test processes of one run
/// write each line once.
pub(super) fn record_warnings(
    dir: &Path,
    run_id: &str,
    warnings: &[ConfigWarning],
) -> io::Result<()> {
    if let Err(e) = crate::sys::prepare_dir(dir) {
        return Err(io::Error::other(e));
    }
    let mut file =
        crate::sys::open_lock_file(&dir.join(WARNINGS_FILE), crate::sys::is_shared_dir(dir))?;
    file.lock()?;
    let mut text = String::new();
    // A file that is not text is replaced like another run's record.
    let _ = file.read_to_string(&mut text);
    let mut lines: Vec<String> = match parse_record(&text) {
        Some(r) if r.run_id == run_id => r.lines,
        _ => {
            let now = crate::clock::now_unix_ms();
            file.set_len(0)?;
            file.seek(io::SeekFrom::Start(0))?;
            file.write_all(format!("{RECORD_HEADER} {run_id} at {now} ms\n").as_bytes())?;
            Vec::new()
        }
    };
    let mut add = String::new();
    for w in warnings {
        let line = w.to_string();
        if !lines.contains(&line) {
            add.push_str(&line);
            add.push('\n');
            lines.push(line);
        }
    }
    file.seek(io::SeekFrom::End(0))?;
    file.write_all(add.as_bytes())
}
