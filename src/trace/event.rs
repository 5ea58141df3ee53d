//! The events a permit writes, and the file they are appended to.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
///
/// Fields added after the first release have defaults, so traces of earlier versions still
/// read; [`read_events`](crate::trace::read_events) fills in what they lack (`units`: 1, or `capacity` for an exclusive
/// permit; `gpus`: 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceArgs {
    /// Test name.
    pub test: String,
    /// Thread name.
    pub thread: String,
    /// Host slots held (empty for a wait that timed out, and for in-process-only pools).
    pub slots: Vec<usize>,
    /// Whether the permit is exclusive.
    pub exclusive: bool,
    /// Permits in the pool: N per GPU times the GPUs (`concurrency` in traces written by
    /// earlier versions).
    #[serde(alias = "concurrency")]
    pub capacity: usize,
    /// Permit units the permit held: 1 for a plain permit, k for a weighted one, `capacity`
    /// for an exclusive one.
    #[serde(default)]
    pub units: usize,
    /// GPUs the pool spans (its `capacity` is N per GPU times this).
    #[serde(default)]
    pub gpus: usize,
    /// GPU memory the test declared it needs, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// GPU memory the test was measured to use, in bytes, where its fixture could measure it
    /// (hold events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// The per-GPU memory budget in force, in bytes, when one was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
    /// Which attempt of the test this was (nextest's `NEXTEST_ATTEMPT`), where nextest runs
    /// with retries: 2 and above are retries of a test that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Whether the test had failed when it returned the permit (its thread was panicking, or
    /// `gpu-test-permit run`'s command failed); hold events only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Where the permit's units were learned (`GPU_TEST_PERMIT_WEIGHTS=learned`: the test
    /// declared nothing), the most GPU memory the test was measured to use in earlier runs,
    /// bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<u64>,
    /// Whether the permit was granted past a request waiting at the head of the queue, by
    /// backfilling ([`host`](crate::host)); hold events only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfilled: bool,
}

impl TraceEvent {
    /// The instant event that records `auto`'s choice of `per_gpu` x `gpus` permits, said in
    /// `line`.
    pub(crate) fn auto(line: &str, per_gpu: usize, gpus: usize) -> TraceEvent {
        TraceEvent {
            name: "auto".into(),
            cat: "gpu-test-permit".into(),
            ph: "i".into(),
            ts: crate::clock::unix_micros(std::time::SystemTime::now()),
            dur: 0,
            pid: std::process::id(),
            tid: crate::sys::thread_number(),
            args: TraceArgs {
                test: line.to_string(),
                capacity: per_gpu.saturating_mul(gpus),
                units: 1,
                gpus,
                ..TraceArgs::default()
            },
        }
    }

    /// When it ended, microseconds since the Unix epoch (saturating: an event [`read_trace`](super::read_trace)
    /// accepts never overflows).
    pub fn end(&self) -> u64 {
        self.ts.saturating_add(self.dur)
    }
}

impl TraceArgs {
    /// Permit units the permit took: `units`, or where an event lacks them (0: a trace of an
    /// earlier version, or an event not read by [`read_events`](crate::trace::read_events)), 1 or, for an exclusive
    /// permit, `capacity`.
    pub fn held_units(&self) -> usize {
        match self.units {
            0 if self.exclusive => self.capacity.max(1),
            0 => 1,
            k => k,
        }
    }

    /// Fills in what traces of earlier versions lack.
    pub(super) fn normalise(&mut self) {
        self.units = self.held_units();
        if self.gpus == 0 {
            self.gpus = 1;
        }
    }
}

/// Appends events to a trace file.
#[derive(Debug)]
pub(crate) struct Tracer {
    path: PathBuf,
    file: File,
}

impl Tracer {
    /// Opens `path` for appending, writing the `[` header first if the file is new.
    ///
    /// A symbolic link at `path` is followed, as for any output file a user names; what it
    /// leads to must be a regular file. A FIFO, socket, device or directory is refused at once
    /// (a FIFO with no reader would otherwise block every permit of the process). A new file
    /// is made from a temporary file beside it that is created only where nothing of its name
    /// exists, so the header is never written through a link or into a file someone planted.
    pub(crate) fn open(path: &Path) -> io::Result<Tracer> {
        if !path.exists() {
            create_with_header(path)?;
        }
        let file = crate::sys::open_regular_for_append(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e}; a trace is appended only to a regular file"),
            )
        })?;
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
            Ok(_) | Err(_) => crate::notice::line(&format!(
                "could not append a trace event to {}",
                self.path.display()
            )),
        }
    }
}

/// Creates `path` holding the `[` header in one step (a hard link of a finished file), so that
/// no process can append an event before the header. Another process that creates it first
/// wins; its header is as good.
fn create_with_header(path: &Path) -> io::Result<()> {
    let pid = std::process::id();
    let mut made = None;
    for attempt in 0..8 {
        let tmp = path.with_extension(match attempt {
            0 => format!("tmp.{pid}"),
            n => format!("tmp.{pid}.{n}"),
        });
        // `create_new` (O_CREAT | O_EXCL) fails on any existing name, a symbolic link
        // included, instead of following it: a planted name is left alone, the next one tried.
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => {
                made = Some((tmp, file));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let Some((tmp, mut file)) = made else {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} and the 7 other temporary names beside it exist; remove them",
                path.with_extension(format!("tmp.{pid}")).display()
            ),
        ));
    };
    let written = file.write_all(b"[\n");
    drop(file);
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}
