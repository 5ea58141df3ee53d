//! Wait and hold spans as Chrome trace-event JSON (`GPU_TEST_PERMIT_TRACE=<file>`).
//!
//! The file is in the JSON Array Format of the trace-event spec: a `[` line, then one complete
//! event object per line, each followed by a comma; the closing `]` is optional in that format,
//! so processes can keep appending. Perfetto (ui.perfetto.dev) and `chrome://tracing` open it.
//! Each event is written with a single `write` to a file opened in append mode, so events from
//! many processes never interleave within a line. Timestamps are microseconds since the Unix
//! epoch, so spans from different processes line up.
//!
//! The path may be a symbolic link (it is followed, as for any output file), but what it names
//! must be a regular file: a FIFO, socket, device or directory is refused with one line on
//! standard error and tracing is off, the permits work as ever. A new file is made under a
//! temporary name beside it that is never opened through a link.
//!
//! For a parser, [`read_trace`] returns the events of such a file and the lines it could not
//! use (a line cut short by a full disk, events no pool writes), [`read_events`] the events or
//! an error naming the first such line; [`summarize`] says what they tell about choosing N.
//!
//! # The slowdown model
//!
//! The what-if ([`Summary::what_if`]) replays a run's requests on a pool of another size, each
//! hold as long as it was. On a shared GPU that misleads: tests that share the GPU slow each
//! other down, so a run at N = 2 whose holds took twice as long as alone replays at N = 1 as
//! twice as long as it would take, and at N = 4 as faster than it would be. The model
//! ([`Slowdown`], [`Summary::predicted`]) assumes:
//!
//! - **A hold's time grows linearly with the units held beside it, until the GPU is
//!   saturated.** A hold of `u` units that takes `d` alone takes `d x (1 + a x o)` when
//!   other holds keep `o` units of its GPU busy on average over its life (per GPU: the units
//!   of the whole pool divided by its GPUs; a weighted permit's units count as its weight),
//!   and at least `d x (u + o) / s` once the `u + o` units busy exceed the GPU's throughput
//!   `s` (in holds at full speed, [`Slowdown::saturation`]): past it, every hold runs at its
//!   share. `a = 0`: holds do not slow each other until the GPU is saturated; `a = 1`: the
//!   GPU's throughput is fixed, two holds side by side take as long as one after the other.
//!   One `a` and one `s` for all tests: each test has its own time alone, not its own curve.
//!   Without the bound a slope fitted where two tests barely slow each other (lavapipe on two
//!   CPU cores) promises four at once to be twice as fast as two, where they are no faster.
//! - **`a` and `s` come from the trace.** Each hold's `o` is measured from the holds that
//!   overlap it; `a` and `s` are the least-squares fit of `ln d = ln alone + ln g(o)`. Where
//!   tests held permits at concurrencies at least half a unit apart (traces of two runs at
//!   different N in one file, or tests that take permits repeatedly), each such test has its
//!   own time alone ([`SlowdownBasis::RepeatedTests`]). Otherwise, where enough holds ran at
//!   low and at high concurrency, all tests share one ([`SlowdownBasis::Overlap`]: it assumes
//!   the tests that happened to run alone are like the others). A saturated run (every hold
//!   at about N) or a run at N = 1 cannot tell `a` at all ([`SlowdownBasis::NotIdentified`]):
//!   the model then takes `a = 1/2`, the middle of `0..=1`, with no bound, and reports the
//!   whole of `0..=1` as the range. To pin `a` down, trace a run at another N into the same
//!   file, or fit with [`Slowdown::fit`] on the events of both.
//! - **The model promises no throughput it has not seen.** The bound counts as shown when it
//!   fits significantly better than the slope alone (a likelihood-ratio test at 95 %); that
//!   takes holds at three loads or more, one of them past the bound (runs at N = 1, 2 and 4).
//!   Where it is not shown (runs at N = 1 and 2: a slope and a bound fit two loads equally
//!   well), `s` is the most throughput the holds saw: beyond the highest N traced, the point
//!   estimate expects no gain, and the fast end of the range lets the throughput keep growing
//!   along the slope. On the H100 and on lavapipe, the GPU was saturated by N = 2 (see
//!   BENCHMARKS.md).
//! - **The range** is a bootstrap over tests (or holds): the 5th to 95th percentile of `a`
//!   and of `s` over 100 resamples. Its fast end replays the low `a` with the high `s` (no
//!   bound where the trace does not show one), its slow end the high `a` with the low `s`.
//! - **The replay shares the GPU moment by moment.** At another N the holds are simulated
//!   event by event: between a request and a release each hold progresses at `1 / g(o)` of
//!   its speed alone, `o` the units held beside it at that moment, and ends once it has done
//!   its time alone. (The fit measures `o` as the average over a hold's life, which is what
//!   a hold in a run at a steady N sees.)
//! - **Requests are paced by releases.** A test runner runs a fixed number of tests at once
//!   (cargo test's threads; nextest's, each test a process), so after the first few, a test
//!   starts when another ends. The model pairs each request made after a release with a
//!   release (in order) and replays it as long after that release as it came in the trace:
//!   the runner's start-up (a process under nextest) and the test's work before its permit.
//!   The fixed-duration what-if keeps each request at its time, as it always did.
//! - **What the trace does not hold**, the model does not predict: the span runs from the
//!   first request to the last release, so the build, the runner's start-up before the first
//!   test asks and the end after the last release are outside it (about 0.3 s of a nextest
//!   run on the H100). Under a nextest test group whose `max-threads` is below the new N, the
//!   group, not the permits, caps the tests: change both.
//!
//! Checked against runs of the example suite at N = 1 to 8 on an H100 and on lavapipe: see
//! BENCHMARKS.md ("What-if model").

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
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
/// read; [`read_events`] fills in what they lack (`units`: 1, or `capacity` for an exclusive
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
}

impl TraceEvent {
    /// When it ended, microseconds since the Unix epoch (saturating: an event [`read_trace`]
    /// accepts never overflows).
    fn end(&self) -> u64 {
        self.ts.saturating_add(self.dur)
    }
}

impl TraceArgs {
    /// Permit units the permit took: `units`, or where an event lacks them (0: a trace of an
    /// earlier version, or an event not read by [`read_events`]), 1 or, for an exclusive
    /// permit, `capacity`.
    fn held_units(&self) -> usize {
        match self.units {
            0 if self.exclusive => self.capacity.max(1),
            0 => 1,
            k => k,
        }
    }

    /// Fills in what traces of earlier versions lack.
    fn normalise(&mut self) {
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

/// The latest moment, in microseconds since the Unix epoch, that an event may end at: 2^53,
/// about the year 2255. Within it, times are exact in the `f64` the model computes in, and
/// no end overflows.
const MAX_TIME_US: u64 = 1 << 53;

/// The most GPU memory, in bytes, that an event may declare, measure or budget: 1 PiB, far
/// beyond any GPU.
const MAX_MEMORY: u64 = 1 << 50;

/// A trace file as [`read_trace`] reads it: its events, and the lines it could not use.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TraceFile {
    /// The events, in the order of the file.
    pub events: Vec<TraceEvent>,
    /// The lines that held no usable event (or not only usable ones), in order.
    pub skipped: Vec<SkippedLine>,
}

/// A line of a trace file that [`read_trace`] could not use, or not all of.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedLine {
    /// Its number, from 1.
    pub line: usize,
    /// Why, in words.
    pub reason: String,
}

/// Reads a trace file written by this crate, leaving out what cannot be used. Lines that are
/// not events (the `[` header, a closing `]`, blank lines) are passed over; a line that is
/// not an event is skipped and listed with its number. A line where an event was cut short
/// (a full disk stops a write part way; the next event then lands on the same line) still
/// gives the whole events after the cut, and is listed too.
///
/// An event that says what no trace of this crate can is skipped the same way, so that every
/// number the summaries compute from the rest is meaningful and no sum overflows:
///
/// - an end (`ts + dur`) past 2^53 microseconds after the Unix epoch (about the year 2255);
/// - more than [`MAX_CONCURRENCY`](crate::config::MAX_CONCURRENCY) GPUs, a `capacity` above
///   that many permits per GPU, or more `units` than the `capacity`;
/// - a `memory`, `memory_used` or `memory_budget` above 1 PiB.
///
/// Bytes that are not UTF-8 are read as U+FFFD.
///
/// # Errors
///
/// When the file cannot be read at all.
///
/// ```
/// use gpu_test_permit::trace::read_trace;
/// let dir = std::env::temp_dir().join(format!("read-trace-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("t.json");
/// let event = r#"{"name":"hold","cat":"gpu-test-permit","ph":"X","ts":0,"dur":5,"pid":1,"tid":1,"args":{"test":"t","thread":"t","slots":[0],"exclusive":false,"capacity":2}}"#;
/// // Line 3: an event cut short, then a whole one.
/// let text = format!("[\n{event},\n{{\"name\":\"ho{event},\n");
/// std::fs::write(&path, text).unwrap();
/// let trace = read_trace(&path).unwrap();
/// assert_eq!(trace.events.len(), 2);
/// assert_eq!(trace.skipped.len(), 1);
/// assert_eq!(trace.skipped[0].line, 3);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_trace(path: &Path) -> io::Result<TraceFile> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut out = TraceFile::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim().trim_end_matches(',');
        if line.is_empty() || line == "[" || line == "]" {
            continue;
        }
        if let Err(reason) = parse_line(line, &mut out.events) {
            out.skipped.push(SkippedLine {
                line: i + 1,
                reason,
            });
        }
    }
    Ok(out)
}

/// Appends the events of one line (its trailing comma trimmed) to `events`; an error says
/// why the line, or a part of it, could not be used.
fn parse_line(line: &str, events: &mut Vec<TraceEvent>) -> Result<(), String> {
    let not_json = match parse_event(line) {
        Ok(ev) => {
            check(&ev)?;
            events.push(ev);
            return Ok(());
        }
        Err(e) => e,
    };
    // This crate writes each event as one object that starts with its name, and inside a
    // JSON string a quote is escaped: every `{"name":` past the start begins another event.
    let mut bounds: Vec<usize> = line
        .match_indices("{\"name\":")
        .map(|(i, _)| i)
        .filter(|&i| i > 0)
        .collect();
    if bounds.is_empty() {
        return Err(not_json);
    }
    bounds.insert(0, 0);
    bounds.push(line.len());
    let parts: Vec<&str> = bounds
        .windows(2)
        .map(|w| line[w[0]..w[1]].trim().trim_end_matches(','))
        .collect();
    let (mut read, mut bad) = (0, None);
    for (k, part) in parts.iter().enumerate() {
        let result = match parse_event(part) {
            Ok(ev) => check(&ev).map(|()| ev),
            // Followed by another event: a write cut short.
            Err(_) if k + 1 < parts.len() => Err("an event cut short (a write stopped part way, \
                 as a full disk leaves it)"
                .to_string()),
            Err(e) => Err(e),
        };
        match result {
            Ok(ev) => {
                events.push(ev);
                read += 1;
            }
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
    }
    match bad {
        None => Ok(()),
        Some(e) if read > 0 => Err(format!(
            "{e}; the {read} other event(s) on the line were read"
        )),
        Some(e) => Err(e),
    }
}

/// One event, normalised (see [`TraceArgs`]), or why `text` is none.
fn parse_event(text: &str) -> Result<TraceEvent, String> {
    let mut ev: TraceEvent = serde_json::from_str(text).map_err(|e| {
        // The text is one line of the file: its column is what locates the problem.
        let message = e.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m);
        format!("not a trace event ({message} at column {})", e.column())
    })?;
    ev.args.normalise();
    Ok(ev)
}

/// Whether `ev` is within what this crate can write (see [`read_trace`]).
fn check(ev: &TraceEvent) -> Result<(), String> {
    use crate::config::MAX_CONCURRENCY;
    let a = &ev.args;
    if ev
        .ts
        .checked_add(ev.dur)
        .is_none_or(|end| end > MAX_TIME_US)
    {
        return Err(format!(
            "its end, ts {} + dur {} microseconds, is past the year 2255 (2^53 microseconds \
             after 1970)",
            ev.ts, ev.dur
        ));
    }
    if a.gpus > MAX_CONCURRENCY {
        return Err(format!(
            "gpus {} is more than {MAX_CONCURRENCY}, the most a pool spans",
            a.gpus
        ));
    }
    if a.capacity > MAX_CONCURRENCY * a.gpus {
        return Err(format!(
            "capacity {} is more than {MAX_CONCURRENCY} permits per GPU times {} GPU(s)",
            a.capacity, a.gpus
        ));
    }
    if a.units > a.capacity.max(1) {
        return Err(format!(
            "units {} is more than the pool's capacity {}",
            a.units, a.capacity
        ));
    }
    for (name, bytes) in [
        ("memory", a.memory),
        ("memory_used", a.memory_used),
        ("memory_budget", a.memory_budget),
    ] {
        if let Some(bytes) = bytes.filter(|&b| b > MAX_MEMORY) {
            return Err(format!(
                "{name} {bytes} bytes is more than 1 PiB, more than any GPU has"
            ));
        }
    }
    Ok(())
}

/// Reads the events of a trace file written by this crate, strictly: [`read_trace`], with
/// every line it would skip an error instead (the first, naming its line).
///
/// # Errors
///
/// When the file cannot be read, or a line is not an event [`read_trace`] accepts.
pub fn read_events(path: &Path) -> io::Result<Vec<TraceEvent>> {
    let trace = read_trace(path)?;
    match trace.skipped.first() {
        Some(s) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} line {}: {}", path.display(), s.line, s.reason),
        )),
        None => Ok(trace.events),
    }
}

/// The largest number of permit units held at the same moment according to `events` (a
/// weighted hold counts its `units`, an exclusive one `capacity`).
pub fn peak_concurrency(events: &[TraceEvent]) -> usize {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for e in events.iter().filter(|e| e.name == "hold") {
        let units = e.args.held_units() as i64;
        edges.push((e.ts, units));
        edges.push((e.end(), -units));
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

/// Wait and hold times of one test in a trace.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TestSummary {
    /// Test name.
    pub test: String,
    /// Permits it took.
    pub permits: usize,
    /// Total time it waited for permits, microseconds.
    pub wait_us: u64,
    /// Total time it held permits, microseconds.
    pub hold_us: u64,
}

/// What a trace says about a run, for choosing N.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    /// Permits in the pool the run used, N per GPU times the GPUs (the largest `capacity` in
    /// the trace, at most 1024 x 1024: no pool is larger).
    pub capacity: usize,
    /// Per test, longest wait first.
    pub tests: Vec<TestSummary>,
    /// From the first request to the last release, microseconds.
    pub span_us: u64,
    /// Held unit-time over the unit-time available (`capacity x span`), 0 to 1.
    pub utilisation: f64,
    /// Most permit units held at once.
    pub peak: usize,
    /// Estimated span of the same requests with other pool sizes, `(N, microseconds)`, each
    /// hold as long as it was in the trace. Pool sizes from 1 to twice `capacity`: every one
    /// where that is at most 256 sizes; for a larger pool every one up to [`MODEL_MAX_N`],
    /// then each about an eighth larger than the one before, with `capacity` itself.
    pub what_if: Vec<(usize, u64)>,
    /// How hold times grew with the units held at the same time, fitted from the trace: the
    /// model behind [`predicted`](Self::predicted).
    pub slowdown: Slowdown,
    /// Estimated span with other pool sizes from the [`slowdown`](Self::slowdown) model: the
    /// requests of [`what_if`](Self::what_if) replayed with the holds sharing the GPU as the
    /// model says, moment by moment. The same pool sizes, up to [`MODEL_MAX_N`].
    pub predicted: Vec<Prediction>,
    /// Tests whose measured GPU memory (`memory_used`) exceeded what they declared, or the
    /// share of the memory budget their units stand for, with a weight or a declaration that
    /// would cover it. By test name.
    pub memory: Vec<MemoryAdvice>,
    /// Permits granted but never returned: their process was killed or aborted (a hold
    /// deadline, a crash) while it held them, or it still holds them.
    pub unreleased: Vec<Unreleased>,
}

/// A permit the trace shows granted and never returned.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreleased {
    /// The test that held it.
    pub test: String,
    /// Its process.
    pub pid: u32,
    /// When it was granted, microseconds from the start of the trace.
    pub granted_us: u64,
}

/// How hold times grow with concurrency: a hold of `u` units that takes `d` alone takes
/// `d x max(1 + factor x o, (u + o) / max(saturation, u))` while other holds keep `o` units of
/// its GPU busy on average (see the [module docs](self#the-slowdown-model)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Slowdown {
    /// The fitted factor `a`: 0, hold times do not depend on concurrency; 1, every unit held
    /// beside a hold slows it as much as running one more test's hold after it (the GPU's
    /// throughput is fixed).
    pub factor: f64,
    /// The low end of the factor's range (5th percentile of a bootstrap over tests or holds).
    pub low: f64,
    /// The high end of the factor's range (95th percentile).
    pub high: f64,
    /// The GPU's throughput, in units of holds running at full speed: with more units busy
    /// than this, each hold slows in proportion (`(u + o) / saturation`), whatever `factor`
    /// says. Fitted where the trace shows it; where it does not (the throughput kept growing
    /// up to the highest concurrency seen), the most the trace showed: the model promises no
    /// more throughput than the GPU delivered. `None`: no such bound (a [`given`](Self::given)
    /// factor, or [`SlowdownBasis::NotIdentified`], whose range already runs to "throughput
    /// fixed").
    pub saturation: Option<f64>,
    /// The saturation at the slow end of the range (5th percentile of the bootstrap), used
    /// with [`high`](Self::high).
    pub saturation_low: Option<f64>,
    /// The saturation at the fast end of the range, used with [`low`](Self::low): the 95th
    /// percentile of the bootstrap where the trace shows the bound, `None` (unbounded: the
    /// throughput keeps growing as `factor` says) where it does not.
    pub saturation_high: Option<f64>,
    /// What the fit rests on.
    pub basis: SlowdownBasis,
}

/// What a [`Slowdown`] was fitted from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowdownBasis {
    /// `tests` tests held permits at concurrencies at least half a unit apart (several runs
    /// traced into one file, or tests that take permits repeatedly): each test keeps its own
    /// time alone and the factor is shared. The strongest basis.
    RepeatedTests {
        /// Tests the fit used.
        tests: usize,
    },
    /// `holds` holds ran at different concurrencies (a run with idle stretches, a long tail):
    /// fitted across tests, assuming that the tests which ran at low and at high concurrency
    /// would take alike alone.
    Overlap {
        /// Holds the fit used.
        holds: usize,
    },
    /// Every hold ran at about the same concurrency (a saturated run, or N = 1), so the trace
    /// cannot tell how hold times grow with it. The factor is the middle of the range from 0
    /// (hold times fixed) to 1 (the GPU's throughput fixed), and the range is all of it.
    NotIdentified,
    /// Given, not fitted ([`Slowdown::given`]).
    Given,
}

/// A [`Slowdown`] model's estimate of a run's span with `n` permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Prediction {
    /// Permits in the pool (N per GPU times the GPUs).
    pub n: usize,
    /// Estimated span at the fitted factor and saturation, microseconds.
    pub span_us: u64,
    /// The span at the fast end of the model's range, microseconds.
    pub low_us: u64,
    /// The span at the slow end of the model's range, microseconds.
    pub high_us: u64,
}

/// A test that used more GPU memory than it declared, or than its units' share of the
/// budget, and what would cover it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryAdvice {
    /// Test name.
    pub test: String,
    /// The most GPU memory one of its holds was measured to use, bytes.
    pub used: u64,
    /// What that hold declared, bytes.
    pub declared: Option<u64>,
    /// Units that hold took.
    pub units: usize,
    /// The share of the per-GPU memory budget its units stand for (`budget x units / N`),
    /// bytes, when a budget was set.
    pub share: Option<u64>,
    /// With a budget, the units whose share covers `used`: `ceil(used / (budget / N))`, at
    /// most N (then it needs more than a whole GPU's budget, see
    /// [`over_budget`](Self::over_budget)).
    pub suggested_units: Option<usize>,
    /// Whether `used` exceeded the whole per-GPU budget.
    pub over_budget: bool,
    /// A declaration that covers `used`: it rounded up to a whole MiB, bytes.
    pub suggested_memory: u64,
}

/// The largest pool size the [`Slowdown`] model replays ([`Summary::predicted`] stops there;
/// the fixed-duration [`Summary::what_if`] does not).
pub const MODEL_MAX_N: usize = 64;

/// Summarises the events of a trace. `None` when it holds no hold span.
///
/// Holds count their permit units (a weighted permit `k`, an exclusive one the pool). The
/// what-if replays the requests in the order they were made, each holding as long as it did,
/// on a first-come first-served pool of the other size: a request for `k` units waits until
/// `k` are free, and the requests behind it wait behind it. The [`Slowdown`] model's replay
/// ([`Summary::predicted`]) lets each hold progress as fast as the holds beside it allow; see
/// the [module docs](self#the-slowdown-model) for what it assumes.
///
/// Cost: O(e log e) for `e` events, plus O(m log m) per replayed pool size for `m` holds (for
/// the model, times three, for the estimate and the ends of its range, plus a step per
/// distinct weight at each of its events); the replays stop at the first size at which no
/// request waited for a permit, since every larger pool serves the requests the same way.
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent, summarize};
/// let ev = |name: &str, ts, dur| TraceEvent {
///     name: name.into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid: 1, tid: 1,
///     args: TraceArgs { test: "t".into(), thread: "t".into(), slots: vec![0],
///                       exclusive: false, capacity: 1, ..Default::default() },
/// };
/// // Two 100 ms holds one after the other on N = 1; the second waited 100 ms.
/// let s = summarize(&[ev("wait", 0, 0), ev("hold", 0, 100_000),
///                     ev("wait", 0, 100_000), ev("hold", 100_000, 100_000)]).unwrap();
/// assert_eq!((s.peak, s.span_us), (1, 200_000));
/// assert_eq!(s.what_if[1], (2, 100_000)); // with N = 2 both would have run at once
/// // ... if running side by side did not slow them down. The trace cannot tell whether it
/// // does (they never overlapped): the model's range runs from there to "no faster at all".
/// let p = s.predicted[1];
/// assert_eq!(p.low_us, 100_000);
/// assert!(p.high_us.abs_diff(200_000) < 1_000, "{p:?}");
/// ```
pub fn summarize(events: &[TraceEvent]) -> Option<Summary> {
    summarize_with(events, None)
}

/// [`summarize`] with a [`Slowdown`] fitted elsewhere (from these events and runs of the same
/// suite at other N, say), or with `None`, fitted from `events`.
pub fn summarize_with(events: &[TraceEvent], slowdown: Option<&Slowdown>) -> Option<Summary> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() {
        return None;
    }
    // No pool is larger (events that say otherwise are not this crate's, see `read_trace`).
    let most = crate::config::MAX_CONCURRENCY * crate::config::MAX_CONCURRENCY;
    let capacity = events
        .iter()
        .map(|e| e.args.capacity)
        .max()
        .unwrap_or(1)
        .clamp(1, most);
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let end = events.iter().map(TraceEvent::end).max().unwrap_or(0);
    let span_us = end - start;

    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut tests: Vec<TestSummary> = Vec::new();
    for e in events {
        let i = *index.entry(e.args.test.as_str()).or_insert_with(|| {
            tests.push(TestSummary {
                test: e.args.test.clone(),
                permits: 0,
                wait_us: 0,
                hold_us: 0,
            });
            tests.len() - 1
        });
        match e.name.as_str() {
            "wait" => tests[i].wait_us = tests[i].wait_us.saturating_add(e.dur),
            "hold" => {
                tests[i].permits += 1;
                tests[i].hold_us = tests[i].hold_us.saturating_add(e.dur);
            }
            _ => {}
        }
    }
    tests.sort_by(|a, b| b.wait_us.cmp(&a.wait_us).then(a.test.cmp(&b.test)));

    let held: u128 = holds
        .iter()
        .map(|e| e.dur as u128 * e.args.held_units() as u128)
        .sum();
    let utilisation = if span_us == 0 {
        1.0
    } else {
        held as f64 / (capacity as f64 * span_us as f64)
    };

    let run = Replayable::new(events, &holds, start);
    let hold_times = run.holds();
    let sizes = what_if_sizes(capacity);
    let mut what_if = Vec::with_capacity(sizes.len());
    let mut unconstrained = None;
    for n in sizes {
        let span = match unconstrained {
            Some(span) => span,
            None => {
                let (span, waited) = run.replay(&hold_times, n);
                if !waited && n >= run.max_units {
                    unconstrained = Some(span);
                }
                span
            }
        };
        what_if.push((n, span));
    }
    let slowdown = slowdown.copied().unwrap_or_else(|| run.fit());
    let predicted = run.predict(&slowdown, 1..=(capacity * 2).min(MODEL_MAX_N));

    // A grant (the end of a wait) without a hold that starts there, in that process, for
    // that test: the permit was never returned. (The hold is written by the thread that drops
    // the permit, which may not be the one that took it: threads are no part of the match.)
    let returned: std::collections::HashSet<(u32, &str, u64)> = holds
        .iter()
        .map(|h| (h.pid, h.args.test.as_str(), h.ts))
        .collect();
    let mut unreleased: Vec<Unreleased> = events
        .iter()
        .filter(|w| w.name == "wait")
        .filter(|w| !returned.contains(&(w.pid, w.args.test.as_str(), w.end())))
        .map(|w| Unreleased {
            test: w.args.test.clone(),
            pid: w.pid,
            granted_us: w.end() - start,
        })
        .collect();
    unreleased.sort_by_key(|u| u.granted_us);
    Some(Summary {
        capacity,
        tests,
        span_us,
        utilisation,
        peak: peak_concurrency(events),
        what_if,
        slowdown,
        predicted,
        memory: memory_advice(&holds),
        unreleased,
    })
}

/// The pool sizes of [`Summary::what_if`] for a run on `capacity` permits.
fn what_if_sizes(capacity: usize) -> Vec<usize> {
    let top = capacity * 2;
    if top <= 256 {
        return (1..=top).collect();
    }
    // At most about 150 sizes for the largest pool (1024 GPUs of 1024 permits).
    let mut sizes: Vec<usize> = (1..=MODEL_MAX_N).collect();
    let mut n = MODEL_MAX_N;
    while n < top {
        n = (n + n.div_ceil(8)).min(top);
        sizes.push(n);
    }
    if let Err(at) = sizes.binary_search(&capacity) {
        sizes.insert(at, capacity);
    }
    sizes
}

impl Slowdown {
    /// A factor known from elsewhere, with no range; `Slowdown::given(0.0)` keeps hold times
    /// as they were.
    pub fn given(factor: f64) -> Slowdown {
        Slowdown {
            factor,
            low: factor,
            high: factor,
            saturation: None,
            saturation_low: None,
            saturation_high: None,
            basis: SlowdownBasis::Given,
        }
    }

    /// This model with the GPU's throughput bounded at `saturation` units of holds at full
    /// speed, at both ends of the range too (see [`saturation`](Self::saturation)).
    ///
    /// ```
    /// use gpu_test_permit::trace::Slowdown;
    /// let s = Slowdown::given(0.1).with_saturation(2.0);
    /// assert_eq!(s.slowdown(1.0, 1), 1.1); // two holds: 1 + 0.1 x 1
    /// assert_eq!(s.slowdown(3.0, 1), 2.0); // four holds: 4 / 2
    /// assert_eq!(s.slowdown(0.0, 4), 1.0); // a 4-unit hold alone runs at full speed
    /// ```
    pub fn with_saturation(self, saturation: f64) -> Slowdown {
        let s = Some(saturation.max(1.0));
        Slowdown {
            saturation: s,
            saturation_low: s,
            saturation_high: s,
            ..self
        }
    }

    /// How many times as long as alone a hold of `units` takes with `others` units held
    /// beside it on its GPU, at the point estimate.
    pub fn slowdown(&self, others: f64, units: usize) -> f64 {
        Curve::new(self.factor, self.saturation).g(others, units)
    }

    /// The point estimate and the fast and slow ends of the range.
    fn curves(&self) -> [Curve; 3] {
        [
            Curve::new(self.factor, self.saturation),
            Curve::new(self.low, self.saturation_high),
            Curve::new(self.high, self.saturation_low),
        ]
    }

    /// Fits the model to the holds of `events`. The events may hold several runs (traced
    /// into one file, or read from several and put together): a hold's concurrency is
    /// measured from the holds that overlap it in time, and a test seen at several
    /// concurrencies is what gives the fit its strongest basis,
    /// [`SlowdownBasis::RepeatedTests`].
    ///
    /// ```
    /// use gpu_test_permit::trace::{Slowdown, SlowdownBasis, TraceArgs, TraceEvent};
    /// let hold = |test: &str, tid, ts, dur| TraceEvent {
    ///     name: "hold".into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur,
    ///     pid: 1, tid, args: TraceArgs { test: test.into(), capacity: 2, ..Default::default() },
    /// };
    /// // Three tests, each run alone (100 ms) and beside another one (150 ms).
    /// let mut events = Vec::new();
    /// for (i, t) in ["a", "b", "c"].into_iter().enumerate() {
    ///     let alone = i as u64 * 100_000;
    ///     events.push(hold(t, 1, alone, 100_000));
    ///     events.push(hold(t, 1, 1_000_000 + alone * 2, 150_000));
    ///     events.push(hold("partner", 2, 1_000_000 + alone * 2, 150_000));
    /// }
    /// let s = Slowdown::fit(&events);
    /// assert_eq!(s.basis, SlowdownBasis::RepeatedTests { tests: 3 });
    /// assert!((s.factor - 0.5).abs() < 0.01, "{s:?}");
    /// ```
    pub fn fit(events: &[TraceEvent]) -> Slowdown {
        let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
        let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
        Replayable::new(events, &holds, start).fit()
    }
}

/// Predicts the span of the run in `events` with `n` permits under `slowdown` (fitted from
/// these events, or from others: runs of the same suite at other N). `None` when the events
/// hold no hold span.
pub fn predict(events: &[TraceEvent], slowdown: &Slowdown, n: usize) -> Option<Prediction> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() || n == 0 {
        return None;
    }
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    Replayable::new(events, &holds, start)
        .predict(slowdown, n..=n)
        .pop()
}

/// The runs of a trace file that several runs at different N appended to: the events split
/// where `capacity` changes, in time order, when the parts do not overlap in time. Otherwise
/// (one N, or parts that overlap) all of `events` as one run.
pub fn split_runs(events: &[TraceEvent]) -> Vec<Vec<TraceEvent>> {
    let mut sorted: Vec<&TraceEvent> = events.iter().collect();
    sorted.sort_by_key(|e| e.ts);
    let mut runs: Vec<Vec<TraceEvent>> = Vec::new();
    for e in sorted {
        match runs.last_mut() {
            Some(run) if run[0].args.capacity == e.args.capacity => run.push(e.clone()),
            _ => runs.push(vec![e.clone()]),
        }
    }
    let disjoint = runs.windows(2).all(|w| {
        let end = w[0].iter().map(TraceEvent::end).max().unwrap_or(0);
        end <= w[1][0].ts
    });
    if runs.len() > 1 && disjoint {
        runs
    } else {
        vec![events.to_vec()]
    }
}

/// The span of the run in `events` replayed with `n` permits, each hold as long as it was and
/// each request made when it was: [`Summary::what_if`] for any `n`. `None` when the events
/// hold no hold span.
pub fn replay_fixed(events: &[TraceEvent], n: usize) -> Option<u64> {
    let holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    if holds.is_empty() || n == 0 {
        return None;
    }
    let start = events.iter().map(|e| e.ts).min().unwrap_or(0);
    let run = Replayable::new(events, &holds, start);
    Some(run.replay(&run.holds(), n).0)
}

/// When the request behind each hold was made: the start of the wait that ended where the hold
/// began (a wait span ends exactly at its hold's start), or the hold's start without one. Where
/// several waits of one thread end at the same moment, the first in the trace counts.
struct RequestTimes(HashMap<(u32, u64, u64), u64>);

impl RequestTimes {
    fn new(events: &[TraceEvent]) -> RequestTimes {
        let mut waits = HashMap::new();
        for w in events.iter().filter(|e| e.name == "wait") {
            waits.entry((w.pid, w.tid, w.end())).or_insert(w.ts);
        }
        RequestTimes(waits)
    }

    fn of(&self, hold: &TraceEvent) -> u64 {
        self.0
            .get(&(hold.pid, hold.tid, hold.ts))
            .copied()
            .unwrap_or(hold.ts)
    }
}

/// A moment, or an amount of progress, in the simulation: microseconds, ordered for its heaps.
#[derive(Clone, Copy, Debug, PartialEq)]
struct At(f64);

impl Eq for At {}

impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for At {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One permit request of a trace, for the replays.
#[derive(Clone, Debug)]
struct Request {
    /// When it was made, microseconds from the start of the trace.
    arrival: u64,
    /// When its hold ended in the trace.
    release: u64,
    /// How long it held its permit in the trace.
    hold: u64,
    /// Units it took (an exclusive request takes the whole replayed pool instead).
    units: usize,
    exclusive: bool,
    /// Units other holds kept busy on its GPU, on average over its hold, in the trace.
    others: f64,
    /// Its test, for the slowdown fit.
    test: usize,
    /// For the model's replay: the request whose release it followed, and how long after
    /// (see [`Replayable::new`]).
    after: Option<(usize, u64)>,
}

/// The requests of a trace in the order they were made, ready to replay.
struct Replayable {
    requests: Vec<Request>,
    /// For each request, the request that followed its release, if one did.
    follower: Vec<Option<usize>>,
    gpus: usize,
    /// The most units a request took: pools smaller than this clamp it.
    max_units: usize,
}

impl Replayable {
    /// The holds' requests, in order. For the model's replay, each request made after a
    /// release is paired with a release, in order (the first such request with the first
    /// release, and so on; a release pairs only with a request made after it): a test runner
    /// with a fixed number of threads starts a test when one ends, so a request follows a
    /// release by the runner's start-up and the test's work before its permit, wherever the
    /// release falls.
    fn new(events: &[TraceEvent], holds: &[&TraceEvent], start: u64) -> Replayable {
        let asked = RequestTimes::new(events);
        let gpus = holds.iter().map(|h| h.args.gpus).max().unwrap_or(1).max(1);
        let spans: Vec<(u64, u64, usize)> = holds
            .iter()
            .map(|h| (h.ts - start, h.dur, h.args.held_units()))
            .collect();
        let others = others_load(&spans, gpus);
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut requests: Vec<Request> = holds
            .iter()
            .zip(others)
            .map(|(h, others)| {
                let next = names.len();
                Request {
                    arrival: asked.of(h) - start,
                    release: h.end() - start,
                    hold: h.dur,
                    units: h.args.held_units(),
                    exclusive: h.args.exclusive,
                    others,
                    test: *names.entry(h.args.test.as_str()).or_insert(next),
                    after: None,
                }
            })
            .collect();
        // Stable: requests made in the same microsecond keep the order of the trace.
        requests.sort_by_key(|r| r.arrival);
        let mut releases: Vec<(u64, usize)> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| (r.release, i))
            .collect();
        releases.sort_unstable();
        let mut follower = vec![None; requests.len()];
        let mut next_release = releases.iter().peekable();
        for (j, r) in requests.iter_mut().enumerate() {
            // A release before this request, by an earlier one (so the replay meets it first).
            if let Some(&&(at, i)) = next_release.peek()
                && at <= r.arrival
                && i < j
            {
                next_release.next();
                r.after = Some((i, r.arrival - at));
                follower[i] = Some(j);
            }
        }
        let max_units = requests.iter().map(|r| r.units).max().unwrap_or(1);
        Replayable {
            requests,
            follower,
            gpus,
            max_units,
        }
    }

    /// The hold times of the trace.
    fn holds(&self) -> Vec<u64> {
        self.requests.iter().map(|r| r.hold).collect()
    }

    /// Units request `r` takes from a pool of `n`.
    fn units(r: &Request, n: usize) -> usize {
        if r.exclusive { n } else { r.units.clamp(1, n) }
    }

    /// The end of the replay of the requests with hold times `holds` on `n` permits served
    /// first come first served, each request coming when it did, and whether a request
    /// waited.
    ///
    /// The holds begun so far wait in a min-heap of `(finish, units)`. Since service is in
    /// order, starts never go back in time: a cursor moves forward to each request's arrival,
    /// drops the holds finished by then, and then to the next finishes until the request's
    /// units are free. Each request goes through the heap once: O(m log m).
    fn replay(&self, holds: &[u64], n: usize) -> (u64, bool) {
        let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let (mut free, mut now, mut end, mut waited) = (n, 0u64, 0u64, false);
        for (r, &hold) in self.requests.iter().zip(holds) {
            let units = Self::units(r, n);
            now = now.max(r.arrival);
            while let Some(&Reverse((finish, u))) = busy.peek() {
                if finish > now && free >= units {
                    break;
                }
                busy.pop();
                now = now.max(finish);
                free += u;
            }
            waited |= now > r.arrival;
            free -= units;
            let finish = now.saturating_add(hold);
            busy.push(Reverse((finish, units)));
            end = end.max(finish);
        }
        (end, waited)
    }

    /// The span with `n` permits when each request's time alone is `alone` and the holds
    /// share the GPU as `curve` says, and whether a request waited.
    ///
    /// An event-driven simulation: between events (a request comes, a hold ends) each hold
    /// progresses at `1 / g(o, u)` of its speed alone, `o` the units the others hold at that
    /// moment, and ends once it has done its time alone. (Rescaling each hold by the load
    /// averaged over its life instead overstates it wherever the load changes during a hold:
    /// a hold that began among 40 and ended alone would count as slowed by the average.)
    /// Requests are served first come first served; a request that followed a release in
    /// the trace comes as long after the release it is paired with.
    ///
    /// The rate depends on a hold's units only (the load is the pool's), so the holds of one
    /// weight share a clock of progress and wait in a min-heap of the progress at which each
    /// ends: an event costs O(log m) plus one step per distinct weight.
    fn simulate(&self, alone: &[f64], curve: Curve, n: usize) -> (u64, bool) {
        /// Holds of one weight: the progress their clock has made and, per hold, the progress
        /// at which it ends.
        struct Weight {
            units: usize,
            progress: f64,
            ends: BinaryHeap<Reverse<(At, usize)>>,
        }
        let gpus = self.gpus as f64;
        let mut coming: BinaryHeap<Reverse<(At, usize)>> = self
            .requests
            .iter()
            .enumerate()
            .filter(|(_, r)| r.after.is_none())
            .map(|(i, r)| Reverse((At(r.arrival as f64), i)))
            .collect();
        let mut came = vec![0.0f64; self.requests.len()];
        let mut queue: std::collections::VecDeque<usize> = Default::default();
        let mut weights: Vec<Weight> = Vec::new();
        let (mut now, mut free, mut load, mut end, mut waited) = (0.0f64, n, 0usize, 0.0f64, false);
        let rate = |w: &Weight, load: usize| 1.0 / curve.g((load - w.units) as f64 / gpus, w.units);
        loop {
            // Serve the queue in order while units are free.
            while let Some(&j) = queue.front() {
                let units = Self::units(&self.requests[j], n);
                if units > free {
                    break;
                }
                queue.pop_front();
                free -= units;
                load += units;
                waited |= now > came[j];
                let w = match weights.iter().position(|w| w.units == units) {
                    Some(w) => w,
                    None => {
                        weights.push(Weight {
                            units,
                            progress: 0.0,
                            ends: BinaryHeap::new(),
                        });
                        weights.len() - 1
                    }
                };
                let w = &mut weights[w];
                w.ends.push(Reverse((At(w.progress + alone[j]), j)));
            }
            // The next event: the first hold to end at today's rates, or the next request.
            let ending = weights
                .iter()
                .enumerate()
                .filter_map(|(k, w)| {
                    let &Reverse((At(at), _)) = w.ends.peek()?;
                    Some((now + ((at - w.progress) / rate(w, load)).max(0.0), k))
                })
                .min_by(|x, y| x.0.total_cmp(&y.0));
            let next_request = coming.peek().map(|&Reverse((At(at), _))| at);
            let (at, ends) = match (ending, next_request) {
                (Some((e, k)), Some(c)) if e <= c => (e, Some(k)),
                (Some((e, k)), None) => (e, Some(k)),
                (_, Some(c)) => (c.max(now), None),
                (None, None) => break,
            };
            for w in weights.iter_mut().filter(|w| !w.ends.is_empty()) {
                w.progress += (at - now) * rate(w, load);
            }
            now = at;
            match ends {
                Some(k) => {
                    let w = &mut weights[k];
                    let Reverse((At(done), j)) = w.ends.pop().expect("a hold to end");
                    w.progress = done;
                    free += w.units;
                    load -= w.units;
                    end = end.max(now);
                    if let Some(f) = self.follower[j] {
                        let (_, gap) = self.requests[f].after.expect("a follower follows");
                        coming.push(Reverse((At(now + gap as f64), f)));
                    }
                }
                None => {
                    let Reverse((_, j)) = coming.pop().expect("a request to come");
                    came[j] = now;
                    queue.push_back(j);
                }
            }
        }
        (end.round() as u64, waited)
    }

    /// Each request's time alone under `curve`.
    fn alone(&self, curve: Curve) -> Vec<f64> {
        self.requests
            .iter()
            .map(|r| r.hold as f64 / curve.g(r.others, r.units))
            .collect()
    }

    /// The model's estimates for the pool sizes `sizes`, at the fitted factor and its range.
    fn predict(
        &self,
        slowdown: &Slowdown,
        sizes: std::ops::RangeInclusive<usize>,
    ) -> Vec<Prediction> {
        let curves = slowdown.curves();
        let alone: Vec<Vec<f64>> = curves.iter().map(|&c| self.alone(c)).collect();
        // Per curve, the span once no request waits (every larger pool gives the same).
        let mut unconstrained: [Option<u64>; 3] = [None; 3];
        sizes
            .map(|n| {
                let mut spans = [0u64; 3];
                for i in 0..3 {
                    spans[i] = match unconstrained[i] {
                        Some(span) => span,
                        None if i > 0 && curves[i] == curves[0] => spans[0],
                        None => {
                            let (span, waited) = self.simulate(&alone[i], curves[i], n);
                            if !waited && n >= self.max_units {
                                unconstrained[i] = Some(span);
                            }
                            span
                        }
                    };
                }
                Prediction {
                    n,
                    span_us: spans[0],
                    low_us: *spans.iter().min().expect("three spans"),
                    high_us: *spans.iter().max().expect("three spans"),
                }
            })
            .collect()
    }

    /// Fits [`Slowdown`] to the trace's holds (see [`SlowdownBasis`] for the two ways).
    fn fit(&self) -> Slowdown {
        const SPREAD: f64 = 0.5;
        // The holds that took time, by test.
        let mut by_test: HashMap<usize, Vec<Point>> = HashMap::new();
        for r in self.requests.iter().filter(|r| r.hold > 0) {
            by_test.entry(r.test).or_default().push(Point::new(r));
        }
        let spread = |g: &[Point]| {
            let (lo, hi) = g.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
                (lo.min(p.others), hi.max(p.others))
            });
            hi - lo
        };
        let mut repeated: Vec<Vec<Point>> = by_test
            .into_values()
            .filter(|g| g.len() >= 2 && spread(g) >= SPREAD)
            .collect();
        if repeated.len() >= 3 {
            // HashMap order is arbitrary; the bootstrap's draws must not be.
            repeated.sort_by(|a, b| a.partial_cmp(b).expect("finite logs"));
            let tests = repeated.len();
            return fit_with_range(&repeated, false, SlowdownBasis::RepeatedTests { tests });
        }
        let all: Vec<Vec<Point>> = self
            .requests
            .iter()
            .filter(|r| r.hold > 0)
            .map(|r| vec![Point::new(r)])
            .collect();
        let (lo, hi) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), g| {
            (lo.min(g[0].others), hi.max(g[0].others))
        });
        let mid = (lo + hi) / 2.0;
        let (low, high): (Vec<f64>, Vec<f64>) =
            all.iter().map(|g| g[0].others).partition(|&o| o < mid);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let enough = (all.len() / 10).max(5);
        if low.len() >= enough && high.len() >= enough && mean(&high) - mean(&low) >= SPREAD {
            let holds = all.len();
            return fit_with_range(&all, true, SlowdownBasis::Overlap { holds });
        }
        Slowdown {
            factor: 0.5,
            low: 0.0,
            high: 1.0,
            saturation: None,
            saturation_low: None,
            saturation_high: None,
            basis: SlowdownBasis::NotIdentified,
        }
    }
}

/// The slowdown curve of one end of a [`Slowdown`]'s range: `g(o, u) = max(1 + a x o,
/// (u + o) / max(s, u))` for a hold of `u` units with `o` beside it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Curve {
    a: f64,
    saturation: Option<f64>,
}

impl Curve {
    fn new(a: f64, saturation: Option<f64>) -> Curve {
        Curve { a, saturation }
    }

    fn g(&self, others: f64, units: usize) -> f64 {
        let linear = 1.0 + self.a * others;
        match self.saturation {
            Some(s) => {
                let units = units as f64;
                linear.max((units + others) / s.max(units))
            }
            None => linear,
        }
    }
}

/// One hold, for the fit, with the logarithms its residual needs.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct Point {
    ln_hold: f64,
    /// Units others kept busy on its GPU beside it, on average.
    others: f64,
    /// `ln units`.
    ln_units: f64,
    /// `ln(units + others)`: its GPU's load.
    ln_load: f64,
}

impl Point {
    fn new(r: &Request) -> Point {
        let units = r.units.max(1) as f64;
        Point {
            ln_hold: (r.hold as f64).ln(),
            others: r.others,
            ln_units: units.ln(),
            ln_load: (units + r.others).ln(),
        }
    }

    /// `ln g` at this hold for factor `a` and `ln_saturation` (infinite: no bound).
    fn ln_slowdown(&self, a: f64, ln_saturation: f64) -> f64 {
        (a * self.others)
            .ln_1p()
            .max(self.ln_load - ln_saturation.max(self.ln_units))
    }
}

/// For each span `(begin, duration, units)`, the units the other spans keep busy during it,
/// averaged over its duration and divided by `gpus` (0 for a span of no duration). One sweep
/// over the sorted edges keeps the integral of the load so far; a span's integral is its
/// value at the span's end less its value at the start: O(m log m).
fn others_load(spans: &[(u64, u64, usize)], gpus: usize) -> Vec<f64> {
    // (time, span, is the end): the order at one time does not matter, the integral is the
    // same there.
    let mut edges: Vec<(u64, u32, bool)> = Vec::with_capacity(spans.len() * 2);
    for (i, &(b, d, _)) in spans.iter().enumerate() {
        edges.push((b, i as u32, false));
        edges.push((b.saturating_add(d), i as u32, true));
    }
    edges.sort_unstable_by_key(|e| e.0);
    let mut integral = vec![0.0f64; spans.len()];
    let (mut area, mut load, mut at) = (0.0f64, 0i64, 0u64);
    for (t, i, end) in edges {
        area += load as f64 * (t - at) as f64;
        at = t;
        let units = spans[i as usize].2 as i64;
        if end {
            integral[i as usize] += area;
            load -= units;
        } else {
            integral[i as usize] -= area;
            load += units;
        }
    }
    spans
        .iter()
        .zip(integral)
        .map(|(&(_, d, u), total)| {
            if d == 0 {
                return 0.0;
            }
            ((total / d as f64 - u as f64) / gpus as f64).max(0.0)
        })
        .collect()
}

/// The least-squares loss of `ln hold = ln alone + ln g(others)` over `groups` of holds, with
/// factor `a` and the throughput bounded at `e^ln_saturation` (infinite: no bound): each group
/// has its own `ln alone` (a test seen at several concurrencies), or with `shared` all share
/// one.
fn loss(groups: &[&Vec<Point>], shared: bool, a: f64, ln_saturation: f64) -> f64 {
    fn residuals(g: &[Point], a: f64, s: f64) -> impl Iterator<Item = f64> + '_ {
        g.iter().map(move |p| p.ln_hold - p.ln_slowdown(a, s))
    }
    let s = ln_saturation;
    if shared {
        let n: usize = groups.iter().map(|g| g.len()).sum();
        let mean = groups.iter().flat_map(|g| residuals(g, a, s)).sum::<f64>() / n as f64;
        groups
            .iter()
            .flat_map(|g| residuals(g, a, s))
            .map(|x| (x - mean).powi(2))
            .sum::<f64>()
    } else {
        groups
            .iter()
            .map(|g| {
                let mean = residuals(g, a, s).sum::<f64>() / g.len() as f64;
                residuals(g, a, s).map(|x| (x - mean).powi(2)).sum::<f64>()
            })
            .sum()
    }
}

/// The point of `[lo, hi]` where `f` is least, and `f` there: the best of a grid of `steps`
/// intervals, then `sections` golden sections of the intervals beside it (each narrows the
/// bracket by 0.618).
fn minimize(f: impl Fn(f64) -> f64, lo: f64, hi: f64, steps: usize, sections: usize) -> (f64, f64) {
    let step = (hi - lo) / steps as f64;
    let (best, _) = (0..=steps)
        .map(|i| lo + i as f64 * step)
        .map(|x| (x, f(x)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .expect("a grid");
    let (mut lo, mut hi) = ((best - step).max(lo), (best + step).min(hi));
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut x1, mut x2) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
    let (mut f1, mut f2) = (f(x1), f(x2));
    for _ in 0..sections {
        if f1 <= f2 {
            (hi, x2, f2) = (x2, x1, f1);
            x1 = hi - phi * (hi - lo);
            f1 = f(x1);
        } else {
            (lo, x1, f1) = (x1, x2, f2);
            x2 = lo + phi * (hi - lo);
            f2 = f(x2);
        }
    }
    let x = (lo + hi) / 2.0;
    (x, f(x))
}

/// The factor that best fits `groups` with the throughput bounded at `e^ln_saturation`, and
/// the loss there. Searched on `[0, 4]`: a grid of 16, then 14 golden sections (to about
/// 7e-4).
fn fit_factor(groups: &[&Vec<Point>], shared: bool, ln_saturation: f64) -> (f64, f64) {
    minimize(|a| loss(groups, shared, a, ln_saturation), 0.0, 4.0, 16, 14)
}

/// Where [`fit_curve`] looks for the saturation.
#[derive(Clone, Copy)]
enum Search {
    /// Everywhere up to the highest load a hold saw.
    Everywhere,
    /// Near this `ln saturation` (a resample of a fit that showed it there).
    Near(f64),
    /// Nowhere: the bound is not shown (a resample of a fit that did not show it).
    Nowhere,
}

/// The factor and the saturation that best fit `groups`, and whether the trace shows the
/// saturation (the bound makes the fit significantly better). Where it does not, the factor is
/// the one fitted without a bound and the saturation the most throughput that factor says the
/// holds saw: the highest `(u + o) / (1 + a x o)`.
fn fit_curve(groups: &[&Vec<Point>], shared: bool, search: Search) -> (f64, f64, bool) {
    let (free, free_loss) = fit_factor(groups, shared, f64::INFINITY);
    let points = || groups.iter().flat_map(|g| g.iter());
    // Above the highest load a hold saw, the bound binds nowhere: search up to it, in steps
    // of at most a factor 1.25, then 8 golden sections (to within 1 %).
    let top = points().map(|p| p.ln_load).fold(0.0, f64::max).max(1e-3);
    let profile = |s| fit_factor(groups, shared, s).1;
    let bounded = match search {
        Search::Everywhere => {
            let steps = ((top / 1.25f64.ln()).ceil() as usize).max(4);
            Some(minimize(profile, 0.0, top, steps, 8))
        }
        Search::Near(at) => Some(minimize(
            profile,
            (at - 0.25).max(0.0),
            (at + 0.25).min(top),
            2,
            6,
        )),
        Search::Nowhere => None,
    };
    if let Some((ln_saturation, bounded_loss)) = bounded {
        // Shown: the bound fits significantly better, by a likelihood-ratio test at 95 % (one
        // more parameter: chi-squared 3.84 times the residual variance). Runs at two loads
        // alone (N = 1 and 2, say) never show it: a slope and a bound fit them equally well.
        let total = points().count();
        let alone = if shared { 1 } else { groups.len() };
        let dof = total.saturating_sub(alone + 2).max(1);
        // (And by more than rounding: on exact data both losses are all but 0.)
        let gain = free_loss - bounded_loss;
        if gain > 3.84 * bounded_loss / dof as f64 && gain > 1e-9 * total as f64 {
            let (a, _) = fit_factor(groups, shared, ln_saturation);
            return (a, ln_saturation.exp(), true);
        }
    }
    let seen = points()
        .map(|p| p.ln_load - (free * p.others).ln_1p())
        .fold(0.0, f64::max);
    (free, seen.exp(), false)
}

/// [`fit_curve`] on all `groups`, and its range from a bootstrap: 100 resamples of the groups
/// (at most 1,000 a resample, which widens the range of a larger trace, never narrows it), 5th
/// to 95th percentile, with a fixed seed so a trace always reads the same.
fn fit_with_range(groups: &[Vec<Point>], shared: bool, basis: SlowdownBasis) -> Slowdown {
    let all: Vec<&Vec<Point>> = groups.iter().collect();
    let (factor, saturation, shown) = fit_curve(&all, shared, Search::Everywhere);
    // The resamples look for the saturation near where the whole trace showed it, or not at
    // all where it did not (a resample that shows one the whole trace does not would only
    // narrow the fast end, which stays unbounded).
    let search = if shown {
        Search::Near(saturation.ln())
    } else {
        Search::Nowhere
    };
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        // xorshift64*
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let size = groups.len().min(1_000);
    let (mut factors, mut saturations): (Vec<f64>, Vec<f64>) = (0..100)
        .map(|_| {
            let sample: Vec<&Vec<Point>> = (0..size)
                .map(|_| &groups[(next() % groups.len() as u64) as usize])
                .collect();
            let (a, s, _) = fit_curve(&sample, shared, search);
            (a, s)
        })
        .unzip();
    factors.sort_by(f64::total_cmp);
    saturations.sort_by(f64::total_cmp);
    Slowdown {
        factor,
        low: factors[4].min(factor),
        high: factors[94].max(factor),
        saturation: Some(saturation),
        saturation_low: Some(saturations[4].min(saturation)),
        saturation_high: shown.then(|| saturations[94].max(saturation)),
        basis,
    }
}

/// The tests whose measured memory exceeded their declaration or their units' share of the
/// budget (see [`MemoryAdvice`]), the hold that used most for each.
fn memory_advice(holds: &[&TraceEvent]) -> Vec<MemoryAdvice> {
    const MIB: u64 = 1 << 20;
    let mut worst: HashMap<&str, MemoryAdvice> = HashMap::new();
    for h in holds {
        let Some(used) = h.args.memory_used else {
            continue;
        };
        let units = h.args.held_units();
        // N per GPU of the pool it held.
        let n = (h.args.capacity.max(1) / h.args.gpus.max(1)).max(1);
        let budget = h.args.memory_budget;
        let share = budget.map(|b| (b as u128 * units.min(n) as u128 / n as u128) as u64);
        let over_declared = h.args.memory.is_some_and(|m| used > m);
        let over_share = share.is_some_and(|s| used > s);
        if !(over_declared || over_share) {
            continue;
        }
        let needed = budget.map(|b| (used as u128 * n as u128).div_ceil(b.max(1) as u128));
        let advice = MemoryAdvice {
            test: h.args.test.clone(),
            used,
            declared: h.args.memory,
            units,
            share,
            suggested_units: needed.map(|k| (k as usize).clamp(1, n)),
            over_budget: budget.is_some_and(|b| used > b),
            suggested_memory: used.div_ceil(MIB).saturating_mul(MIB),
        };
        match worst.get(h.args.test.as_str()) {
            Some(w) if w.used >= used => {}
            _ => {
                worst.insert(h.args.test.as_str(), advice);
            }
        }
    }
    let mut out: Vec<MemoryAdvice> = worst.into_values().collect();
    out.sort_by(|a, b| a.test.cmp(&b.test));
    out
}

/// Renders the holds of a trace as a text timeline, one row per hold in the order they began:
/// `.` while the request waited, `#` while it held the permit, `tick_ms` milliseconds a
/// character. Rows are labelled with the process, thread and slot; control characters in
/// thread names are escaped as Rust writes them (`\u{1b}`).
///
/// A row's timeline is at most 1,000 characters: where `tick_ms` would take more, the tick
/// is as much coarser as it takes, and the header line says which it is. Labels are padded
/// to the longest, up to 64 characters.
///
/// ```
/// use gpu_test_permit::trace::{TraceArgs, TraceEvent, timeline};
/// let ev = |name: &str, tid, ts, dur| TraceEvent {
///     name: name.into(), cat: "gpu-test-permit".into(), ph: "X".into(), ts, dur, pid: 7, tid,
///     args: TraceArgs { test: "t".into(), thread: format!("t{tid}"), slots: vec![0],
///                       exclusive: false, capacity: 1, ..Default::default() },
/// };
/// let text = timeline(&[ev("wait", 1, 0, 0), ev("hold", 1, 0, 100_000),
///                       ev("wait", 2, 0, 100_000), ev("hold", 2, 100_000, 100_000)], 50);
/// let rows: Vec<&str> = text.lines().skip(1).collect();
/// assert!(rows[0].ends_with(" ##"));
/// assert!(rows[1].ends_with(" ..##"));
/// ```
pub fn timeline(events: &[TraceEvent], tick_ms: u64) -> String {
    use std::fmt::Write as _;
    const COLUMNS: u64 = 1_000;
    let Some(start) = events.iter().map(|e| e.ts).min() else {
        return String::new();
    };
    let end = events.iter().map(TraceEvent::end).max().unwrap_or(start);
    let tick_ms = tick_ms
        .max(1)
        .max((end - start).div_ceil(1000).div_ceil(COLUMNS));
    let tick_us = tick_ms.saturating_mul(1000);
    let mut holds: Vec<&TraceEvent> = events.iter().filter(|e| e.name == "hold").collect();
    holds.sort_by_key(|e| (e.ts, e.pid, e.tid));
    let label = |h: &TraceEvent| {
        format!(
            "pid {} {}",
            h.pid,
            crate::host::escape_controls(&h.args.thread)
        )
    };
    let width = holds
        .iter()
        .map(|h| label(h).len())
        .max()
        .unwrap_or(0)
        .clamp(14, 64);
    let mut out = format!(
        "{:<width$} {:<5} timeline ({tick_ms} ms per character)\n",
        "process/thread", "slot"
    );
    let requests = RequestTimes::new(events);
    for h in holds {
        let asked = requests.of(h);
        let col = |t: u64| (t.saturating_sub(start) / tick_us) as usize;
        let slots: Vec<String> = h.args.slots.iter().map(|s| s.to_string()).collect();
        let _ = writeln!(
            out,
            "{:<width$} {:<5} {}{}{}",
            label(h),
            slots.join(","),
            " ".repeat(col(asked)),
            ".".repeat(col(h.ts).saturating_sub(col(asked))),
            "#".repeat((col(h.end()) - col(h.ts)).max(1)),
        );
    }
    out
}
