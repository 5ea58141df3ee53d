//! Reading a trace file back, within what a file can mean: bad lines are skipped and counted.

use std::io;
use std::path::Path;

use super::event::TraceEvent;

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
    /// The choices of `REALIZAR_GPU_TEST_CONCURRENCY=auto` (instant events named `auto`,
    /// their `test` the line that says the N chosen and why), kept apart from the spans.
    pub choices: Vec<TraceEvent>,
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
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::trace::read_trace;
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
/// # }
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
    for e in std::mem::take(&mut out.events) {
        if e.name == "auto" {
            out.choices.push(e);
        } else {
            out.events.push(e);
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
    let mut bounds: Vec<usize> = Vec::new();
    for (i, _) in line.match_indices("{\"name\":") {
        if i > 0 {
            bounds.push(i);
        }
    }
    if bounds.is_empty() {
        return Err(not_json);
    }
    bounds.insert(0, 0);
    bounds.push(line.len());
    let mut parts: Vec<&str> = Vec::new();
    for w in bounds.windows(2) {
        parts.push(line[w[0]..w[1]].trim().trim_end_matches(','));
    }
    let (mut read, mut bad) = (0, None);
    for (k, part) in parts.iter().enumerate() {
        let result = match parse_event(part) {
            Ok(ev) => match check(&ev) {
                Ok(()) => Ok(ev),
                Err(e) => Err(e),
            },
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
    // The text is one line of the file: its column is what locates a syntax error.
    let value = match crate::json::parse(text) {
        Ok(value) => value,
        Err(e) => {
            return Err(format!(
                "not a trace event ({} at column {})",
                e.what,
                e.at + 1
            ));
        }
    };
    let mut ev = match <TraceEvent as crate::json::Record>::read_json(&value) {
        Ok(ev) => ev,
        Err(e) => return Err(format!("not a trace event ({e})")),
    };
    ev.args.normalise();
    Ok(ev)
}

/// Whether `ev` is within what this crate can write (see [`read_trace`]).
fn check(ev: &TraceEvent) -> Result<(), String> {
    use crate::config::MAX_CONCURRENCY;
    let a = &ev.args;
    let past = match ev.ts.checked_add(ev.dur) {
        Some(end) => end > MAX_TIME_US,
        None => true,
    };
    if past {
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
        if let Some(bytes) = bytes
            && bytes > MAX_MEMORY
        {
            return Err(format!(
                "{name} {bytes} bytes is more than 1 PiB, more than any GPU has"
            ));
        }
    }
    Ok(())
}

/// Reads the events of a trace file written by this crate, strictly: as the command reads
/// them, with every line it would skip an error instead (the first, naming its line).
///
/// # Errors
///
/// When the file cannot be read, or a line is not an event.
///
/// ```
/// use gpu_test_permit::trace::{peak_concurrency, read_events};
///
/// let dir = std::env::temp_dir().join(format!("gtp-doc-read-events-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("trace.json");
/// let event = r#"{"name":"hold","cat":"gpu-test-permit","ph":"X","ts":0,"dur":5,"pid":1,"tid":1,"args":{"test":"t","thread":"t","slots":[0],"exclusive":false,"capacity":2}}"#;
/// std::fs::write(&path, format!("[\n{event},\n")).unwrap();
/// let events = read_events(&path)?;
/// assert_eq!(peak_concurrency(&events), 1);
/// // A line that is not an event is an error naming it.
/// std::fs::write(&path, format!("[\n{event},\nnot an event,\n")).unwrap();
/// assert!(read_events(&path).unwrap_err().to_string().contains("line 3"));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), std::io::Error>(())
/// ```
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
