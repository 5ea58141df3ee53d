//! The events a permit writes, and the file they are appended to.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::json::{self, FieldReader, Fields, Object, Record, Value};

/// One trace event (a "complete" event, phase `X`).
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent};
///
/// // A hold of two units for 1.5 ms, as a weighted permit writes it.
/// let hold = TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(),
///     ts: 1_000, dur: 1_500, pid: 7, tid: 1,
///     args: TraceArgs { test: "gpu::reduce".into(), units: 2, capacity: 4, ..Default::default() },
/// };
/// assert_eq!(hold.end(), 2_500);
/// ```
#[derive(Clone, Debug, PartialEq)]
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
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent};
///
/// fn declared_more_than_used(e: &TraceEvent) -> bool {
///     matches!((e.args.memory, e.args.memory_used), (Some(d), Some(u)) if d > u)
/// }
/// let args = TraceArgs { memory: Some(8 << 30), memory_used: Some(3 << 30), ..Default::default() };
/// let e = TraceEvent {
///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(),
///     ts: 0, dur: 10, pid: 1, tid: 1, args,
/// };
/// assert!(declared_more_than_used(&e));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    pub capacity: usize,
    /// Permit units the permit held: 1 for a plain permit, k for a weighted one, `capacity`
    /// for an exclusive one.
    pub units: usize,
    /// GPUs the pool spans (its `capacity` is N per GPU times this).
    pub gpus: usize,
    /// GPU memory the test declared it needs, in bytes.
    pub memory: Option<u64>,
    /// GPU memory the test was measured to use, in bytes, where its fixture could measure it
    /// (hold events only).
    pub memory_used: Option<u64>,
    /// The per-GPU memory budget in force, in bytes, when one was set.
    pub memory_budget: Option<u64>,
    /// Which attempt of the test this was (nextest's `NEXTEST_ATTEMPT`), where nextest runs
    /// with retries: 2 and above are retries of a test that failed.
    pub attempt: Option<u32>,
    /// Whether the test had failed when it returned the permit (its thread was panicking, or
    /// `gpu-test-permit run`'s command failed); hold events only.
    pub failed: bool,
    /// Where the permit's units were learned (`GPU_TEST_PERMIT_WEIGHTS=learned`: the test
    /// declared nothing), the most GPU memory the test was measured to use in earlier runs,
    /// bytes.
    pub learned: Option<u64>,
    /// Whether the permit was granted past a request waiting at the head of the queue, by
    /// backfilling ([`host`](crate::host)); hold events only.
    pub backfilled: bool,
}

/// An event, one line of the trace file (followed by `,`): `{"name":..,"cat":..,"ph":..,
/// "ts":..,"dur":..,"pid":..,"tid":..,"args":{"test":..,"thread":..,"slots":[..],
/// "exclusive":..,"capacity":..,"units":..,"gpus":..}}`, with the args added later after
/// those where they are set (`memory`, `memory_used`, `memory_budget`, `attempt`, `failed`,
/// `learned`, `backfilled`, in that order). Unversioned: Chrome's trace format.
impl json::Write for TraceEvent {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("name", &self.name)
                .field("cat", &self.cat)
                .field("ph", &self.ph)
                .field("ts", self.ts)
                .field("dur", self.dur)
                .field("pid", self.pid)
                .field("tid", self.tid)
                .field("args", &self.args)
                .finish(),
        );
    }
}

impl json::Write for TraceArgs {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("test", &self.test)
                .field("thread", &self.thread)
                .field("slots", &self.slots)
                .field("exclusive", self.exclusive)
                .field("capacity", self.capacity)
                .field("units", self.units)
                .field("gpus", self.gpus)
                .some("memory", &self.memory)
                .some("memory_used", &self.memory_used)
                .some("memory_budget", &self.memory_budget)
                .some("attempt", &self.attempt)
                .when(self.failed, "failed", true)
                .some("learned", &self.learned)
                .when(self.backfilled, "backfilled", true)
                .finish(),
        );
    }
}

impl Record for TraceEvent {
    fn read_json(v: &Value) -> Result<TraceEvent, String> {
        let f = Fields::of(v, "trace event")?;
        let mut r = FieldReader::new(f);
        let (name, cat, ph) = (r.req("name"), r.req("cat"), r.req("ph"));
        let (ts, dur, pid, tid) = (r.req("ts"), r.req("dur"), r.req("pid"), r.req("tid"));
        if let Some(e) = r.error() {
            return Err(e);
        }
        Ok(TraceEvent {
            name,
            cat,
            ph,
            ts,
            dur,
            pid,
            tid,
            args: f.record("args")?,
        })
    }
}

impl Record for TraceArgs {
    fn read_json(v: &Value) -> Result<TraceArgs, String> {
        let f = Fields::of(v, "args")?;
        let mut r = FieldReader::new(f);
        // `concurrency` in traces of earlier versions.
        let capacity = match f.raw("capacity") {
            Some(_) => r.req("capacity"),
            None => r.req("concurrency"),
        };
        let args = TraceArgs {
            test: r.req("test"),
            thread: r.req("thread"),
            slots: r.req("slots"),
            exclusive: r.req("exclusive"),
            capacity,
            units: r.or_default("units"),
            gpus: r.or_default("gpus"),
            memory: r.opt("memory"),
            memory_used: r.opt("memory_used"),
            memory_budget: r.opt("memory_budget"),
            attempt: r.opt("attempt"),
            failed: r.or_default("failed"),
            learned: r.opt("learned"),
            backfilled: r.or_default("backfilled"),
        };
        match r.error() {
            None => Ok(args),
            Some(e) => Err(e),
        }
    }
}

impl TraceEvent {
    /// The event as its line of a trace file writes it, without the `,` that follows it
    /// there: compact JSON, the fields in the order of the type.
    ///
    /// ```
    /// use gpu_test_permit::trace::read_events;
    ///
    /// let json = r#"{"name":"hold","cat":"gpu-test-permit","ph":"X","ts":5,"dur":2,"pid":1,"tid":1,"args":{"test":"t","thread":"main","slots":[0],"exclusive":false,"capacity":2,"units":1,"gpus":1}}"#;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("trace.json");
    /// std::fs::write(&path, format!("[\n{json},\n"))?;
    /// let events = read_events(&path)?;
    /// assert_eq!(events[0].to_json(), json);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn to_json(&self) -> String {
        self.to_text()
    }

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

    /// When it ended, microseconds since the Unix epoch (saturating: an event
    /// [`read_events`](super::read_events) accepts never overflows).
    ///
    /// ```
    /// use gpu_test_permit::trace::{TraceArgs, TraceEvent};
    ///
    /// let e = TraceEvent {
    ///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(),
    ///     ts: 10, dur: 5, pid: 1, tid: 1, args: TraceArgs::default(),
    /// };
    /// assert_eq!(e.end(), 15);
    /// ```
    pub fn end(&self) -> u64 {
        self.ts.saturating_add(self.dur)
    }
}

impl TraceArgs {
    /// Permit units the permit took: `units`, or where an event lacks them (0: a trace of an
    /// earlier version, or an event not read by [`read_events`](crate::trace::read_events)), 1 or, for an exclusive
    /// permit, `capacity`.
    ///
    /// ```
    /// use gpu_test_permit::trace::TraceArgs;
    ///
    /// assert_eq!(TraceArgs { units: 3, ..Default::default() }.held_units(), 3);
    /// // An event of an earlier version, which had no `units`:
    /// assert_eq!(TraceArgs { exclusive: true, capacity: 4, ..Default::default() }.held_units(), 4);
    /// assert_eq!(TraceArgs::default().held_units(), 1);
    /// ```
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
        let file = match crate::sys::open_regular_for_append(path) {
            Ok(file) => file,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{e}; a trace is appended only to a regular file"),
                ));
            }
        };
        Ok(Tracer {
            path: path.to_path_buf(),
            file,
        })
    }

    pub(crate) fn write(&self, event: &TraceEvent) {
        let mut line = event.to_text().into_bytes();
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
    let linked = match written {
        Ok(()) => std::fs::hard_link(&tmp, path),
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// A trace file as this version writes it for [`known`], byte for byte (as the
    /// serde-derived code of earlier versions wrote it); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/trace/events");

    fn known() -> Vec<TraceEvent> {
        let full = TraceEvent {
            name: "hold".into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts: 1_764_300_000_000_000,
            dur: 250_000,
            pid: 4242,
            tid: 3,
            args: TraceArgs {
                test: "suite::gpu::draws \"x\" \u{e9}".into(),
                thread: "gpu::draws".into(),
                slots: vec![0, 5],
                exclusive: false,
                capacity: 8,
                units: 2,
                gpus: 2,
                memory: Some(8 << 30),
                memory_used: Some(123_456_789),
                memory_budget: Some(16 << 30),
                attempt: Some(2),
                failed: true,
                learned: Some(4 << 30),
                backfilled: true,
            },
        };
        let wait = TraceEvent {
            name: "wait".into(),
            cat: "gpu-test-permit".into(),
            ph: "X".into(),
            ts: 1_764_300_000_000_000,
            dur: 0,
            pid: 4242,
            tid: 3,
            args: TraceArgs {
                test: "t".into(),
                thread: "main".into(),
                slots: vec![],
                exclusive: true,
                capacity: 8,
                units: 8,
                gpus: 1,
                ..TraceArgs::default()
            },
        };
        let auto = TraceEvent {
            ts: 1_764_300_000_000_001,
            tid: 1,
            ..TraceEvent::auto("auto: N = 3 x 1 (2 runs)", 3, 1)
        };
        let auto = TraceEvent { pid: 4242, ..auto };
        vec![full, wait, auto]
    }

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        let tracer = Tracer::open(&path).unwrap();
        for e in known() {
            tracer.write(&e);
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), GOLDEN);
        let read: Vec<TraceEvent> = GOLDEN
            .lines()
            .skip(1)
            .map(|l| TraceEvent::from_text(l.strip_suffix(',').unwrap()).unwrap())
            .collect();
        assert_eq!(read, known());
    }

    /// Events of earlier versions: `concurrency` for `capacity`, no `units` or `gpus`.
    #[test]
    fn events_of_earlier_versions_read() {
        let e = TraceEvent::from_text(
            r#"{"name":"hold","cat":"gpu-test-permit","ph":"X","ts":1,"dur":2,"pid":3,"tid":4,"args":{"test":"t","thread":"main","slots":[1],"exclusive":true,"concurrency":4}}"#,
        )
        .unwrap();
        assert_eq!((e.args.capacity, e.args.units, e.args.gpus), (4, 0, 0));
        assert_eq!(e.args.held_units(), 4);
    }
}
