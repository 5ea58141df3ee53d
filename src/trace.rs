//! Wait and hold spans as Chrome trace-event JSON (`GPU_TEST_PERMIT_TRACE=<file>`).
//!
//! The file is in the JSON Array Format of the trace-event spec: a `[` line, then one complete
//! event object per line, each followed by a comma; the closing `]` is optional in that format,
//! so processes can keep appending. Perfetto (ui.perfetto.dev) and `chrome://tracing` open it.
//! Each event is written with a single `write` to a file opened in append mode, so events from
//! many processes never interleave within a line. Timestamps are microseconds since the Unix
//! epoch, so spans from different processes line up.
//!
//! For a parser, [`read_events`] returns the events of such a file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One trace event (a "complete" event, phase `X`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// `wait` (from asking to getting a permit) or `hold` (from getting to releasing it).
    pub name: String,
    /// Always `gpu-test-permit`.
    pub cat: String,
    /// Always `X`.
    pub ph: String,
    /// Start, microseconds since the Unix epoch.
    pub ts: u64,
    /// Duration in microseconds.
    pub dur: u64,
    /// Process id.
    pub pid: u32,
    /// Thread number.
    pub tid: u64,
    /// Details.
    pub args: TraceArgs,
}

/// Details of a [`TraceEvent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceArgs {
    /// Test name.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Host slots held (empty for a wait that timed out, and for in-process-only pools).
    pub slots: Vec<usize>,
    /// Whether the permit is exclusive.
    pub exclusive: bool,
    /// The pool's permit count N.
    pub concurrency: usize,
}

/// Appends events to a trace file.
#[derive(Debug)]
pub(crate) struct Tracer {
    path: PathBuf,
    file: File,
}

impl Tracer {
    /// Opens `path` for appending, writing the `[` header first if the file is new.
    pub(crate) fn open(path: &Path) -> io::Result<Tracer> {
        if !path.exists() {
            // Create the file with its header in one step (a hard link of a finished file), so
            // that no process can append an event before the header.
            let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
            std::fs::write(&tmp, b"[\n")?;
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Tracer {
            path: path.to_path_buf(),
            file,
        })
    }

    pub(crate) fn write(&self, event: &TraceEvent) {
        let mut line = serde_json::to_vec(event).expect("a trace event always serialises");
        line.extend_from_slice(b",\n");
        // One write call per event: O_APPEND makes it land whole at the end of the file.
        match (&self.file).write(&line) {
            Ok(n) if n == line.len() => {}
            Ok(_) | Err(_) => eprintln!(
                "gpu-test-permit: could not append a trace event to {}",
                self.path.display()
            ),
        }
    }
}

pub(crate) fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Reads the events of a trace file written by this crate. Lines that are not events (the `[`
/// header, a closing `]`) are skipped; a line that is not valid JSON is an error naming it.
pub fn read_events(path: &Path) -> io::Result<Vec<TraceEvent>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim().trim_end_matches(',');
        if line.is_empty() || line == "[" || line == "]" {
            continue;
        }
        let ev = serde_json::from_str(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} line {}: {e}", path.display(), i + 1),
            )
        })?;
        out.push(ev);
    }
    Ok(out)
}

/// The largest number of permit units held at the same moment according to `events` (an
/// exclusive hold counts as `concurrency` units).
pub fn peak_concurrency(events: &[TraceEvent]) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for e in events.iter().filter(|e| e.name == "hold") {
        let units = if e.args.exclusive {
            e.args.concurrency
        } else {
            1
        } as i64;
        edges.push((e.ts, units));
        edges.push((e.ts + e.dur, -units));
    }
    // At equal timestamps, count releases before acquisitions.
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut cur, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        peak = peak.max(cur);
    }
    peak as usize
}
