//! The directory's layout (N per GPU, GPUs), agreed by every process that uses it.
//!
//! Every process using the directory holds `gpu0.layout` locked shared for as long as it has
//! the slots open. Only a process that gets it exclusively (nobody else is using the
//! directory) may (re)write it; every other process *adopts* the recorded layout, with one
//! warning when its own configuration differs. So two processes that share a directory always
//! agree on how many slots there are, and an exclusive permit really is all of them.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use super::budget::forget_budget;
use super::error::HostError;
use super::error::io_err;
use super::lock::{Mode, Probe, probe_at};
use super::queue::RECHECK;
use super::record::{padded, padded_text};
use crate::json::{self, FieldReader, Fields, Object, Record, Value};
use crate::sys;

/// Size of the layout record.
pub(super) const LAYOUT_LEN: usize = 256;
/// Version of the directory layout; a directory laid out by another version is refused.
const LAYOUT_VERSION: u32 = 1;
/// How long opening waits for another process that is laying out the directory.
const LAYOUT_WAIT: Duration = Duration::from_secs(10);
/// Files a process keeps open besides its slots: layout, gate, notify, its wait file, and one
/// kept for letting go of a slot (which opens the slot's file again).
const FIXED_FILES: usize = 5;

/// How a slot directory is laid out: permits per GPU and GPUs. Recorded in the directory by
/// the first process that uses it; see the [module docs](crate::host).
///
/// ```
/// use gpu_test_permit::host::Layout;
///
/// let layout = Layout { per_gpu: 2, gpus: 4 };
/// assert_eq!(layout.slots(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Permits (slots) per GPU: N.
    pub per_gpu: usize,
    /// GPUs the slots span.
    pub gpus: usize,
}

impl Layout {
    /// Slots in all: N per GPU times the GPUs.
    ///
    /// ```
    /// use gpu_test_permit::host::Layout;
    ///
    /// assert_eq!(Layout { per_gpu: 3, gpus: 2 }.slots(), 6);
    /// ```
    pub fn slots(&self) -> usize {
        self.per_gpu.saturating_mul(self.gpus)
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "N = {} permit(s) per GPU x {} GPU(s)",
            self.per_gpu, self.gpus
        )
    }
}

/// `gpu0.layout`: `{"v":1,"per_gpu":8,"gpus":1}`, with `"run":"KEY"` last where it is
/// `auto`'s choice for a run; padded with spaces to [`LAYOUT_LEN`].
#[derive(Debug, PartialEq, Eq)]
struct LayoutRecord {
    v: u32,
    per_gpu: usize,
    gpus: usize,
    /// The run whose `auto` choice this layout is (a key of at most 100 file-name bytes).
    run: Option<String>,
}

impl json::Write for LayoutRecord {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("v", self.v)
                .field("per_gpu", self.per_gpu)
                .field("gpus", self.gpus)
                .some("run", &self.run)
                .finish(),
        );
    }
}

impl Record for LayoutRecord {
    fn read_json(v: &Value) -> Result<LayoutRecord, String> {
        let f = Fields::of(v, "layout")?;
        let mut r = FieldReader::new(f);
        let record = LayoutRecord {
            v: r.req("v"),
            per_gpu: r.req("per_gpu"),
            gpus: r.req("gpus"),
            run: r.opt("run"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl LayoutRecord {
    /// The record in the form [`Layout::encode_for`] writes it (`{"v":1,"per_gpu":8,"gpus":1}`,
    /// with `,"run":"KEY"` before the brace where a run's key, safe file-name bytes, is
    /// there), read without building a JSON value: every process reads the layout when it
    /// opens the slots. `None` for anything else (other spacing or order, an
    /// escape, a number out of range), which the parser reads as before.
    fn parse_written(text: &str) -> Option<LayoutRecord> {
        /// The number `s` begins with, and what follows it.
        fn number(s: &str) -> Option<(u64, &str)> {
            let digits = leading_digits(s);
            // JSON has no leading zeros.
            if digits == 0 || (digits > 1 && s.starts_with('0')) {
                return None;
            }
            Some((s[..digits].parse().ok()?, &s[digits..]))
        }
        let (v, rest) = number(text.strip_prefix(r#"{"v":"#)?)?;
        let (per_gpu, rest) = number(rest.strip_prefix(r#","per_gpu":"#)?)?;
        let (gpus, rest) = number(rest.strip_prefix(r#","gpus":"#)?)?;
        let run = match rest {
            "}" => None,
            _ => {
                let key = rest.strip_prefix(r#","run":""#)?.strip_suffix(r#""}"#)?;
                for b in key.bytes() {
                    if !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
                        return None;
                    }
                }
                Some(key.to_string())
            }
        };
        let v = u32::try_from(v).ok()?;
        let per_gpu = usize::try_from(per_gpu).ok()?;
        let gpus = usize::try_from(gpus).ok()?;
        Some(LayoutRecord {
            v,
            per_gpu,
            gpus,
            run,
        })
    }
}

/// The file name of slot `i`.
pub(super) fn slot_name(i: usize) -> String {
    format!("gpu0.slot{i}")
}

/// The index of the slot whose file is named `name` ([`slot_name`] exactly), if it is one.
pub(super) fn slot_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("gpu0.slot")?;
    if digits.is_empty() || leading_digits(digits) != digits.len() {
        return None;
    }
    digits.parse().ok()
}

/// How many ASCII digits `s` begins with.
fn leading_digits(s: &str) -> usize {
    let mut n = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            break;
        }
        n += 1;
    }
    n
}

/// The layout a process asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WantedLayout<'a> {
    /// A fixed N: written where nobody uses the directory, adopted otherwise.
    Fixed(Layout),
    /// `auto`'s choice for the run whose key (a safe file name of at most 100 bytes) is
    /// `run`: written where nobody uses the directory and no process of the run has written
    /// one; adopted otherwise.
    Auto { layout: Layout, run: &'a str },
}

impl WantedLayout<'_> {
    pub(crate) fn layout(&self) -> Layout {
        match self {
            WantedLayout::Fixed(l) | WantedLayout::Auto { layout: l, .. } => *l,
        }
    }

    fn run(&self) -> Option<&str> {
        match self {
            WantedLayout::Fixed(_) => None,
            WantedLayout::Auto { run, .. } => Some(run),
        }
    }
}

impl Layout {
    fn encode_for(&self, run: Option<&str>) -> Vec<u8> {
        let record = LayoutRecord {
            v: LAYOUT_VERSION,
            per_gpu: self.per_gpu,
            gpus: self.gpus,
            run: run.map(str::to_string),
        };
        padded(record.to_text().into_bytes(), LAYOUT_LEN)
    }

    pub(super) fn decode(raw: &[u8]) -> Result<Option<Layout>, String> {
        match Layout::decode_tagged(raw)? {
            Some((layout, _)) => Ok(Some(layout)),
            None => Ok(None),
        }
    }

    /// The layout and the run whose `auto` choice it is.
    pub(super) fn decode_tagged(raw: &[u8]) -> Result<Option<(Layout, Option<String>)>, String> {
        let Some(text) = padded_text(raw)? else {
            return Ok(None);
        };
        let r = match LayoutRecord::parse_written(text) {
            Some(r) => r,
            None => LayoutRecord::from_text(text)?,
        };
        if r.v != LAYOUT_VERSION {
            return Err(format!(
                "layout version {} (this build uses {LAYOUT_VERSION})",
                r.v
            ));
        }
        let layout = Layout {
            per_gpu: r.per_gpu,
            gpus: r.gpus,
        };
        if layout.per_gpu == 0
            || layout.gpus == 0
            || layout.per_gpu > crate::config::MAX_CONCURRENCY
            || layout.gpus > crate::config::MAX_CONCURRENCY
        {
            return Err(format!("out-of-range layout {layout}"));
        }
        Ok(Some((layout, r.run)))
    }
}

/// The layout recorded in `file` and its run, read without its lock (a hint: `agree_on_layout`
/// decides).
pub(super) fn peek(file: &File) -> Option<(Layout, Option<String>)> {
    let mut buf = [0u8; LAYOUT_LEN];
    let n = sys::read_at_start(file, &mut buf).ok()?;
    Layout::decode_tagged(&buf[..n]).ok().flatten()
}

/// What [`agree_on_layout`] settled.
pub(super) struct Agreed {
    /// The layout in force.
    pub(super) layout: Layout,
    /// Whether this process wrote `want`'s `auto` choice, and it is the one in force.
    pub(super) chose: bool,
    /// Whether this process wrote the layout file (it found nobody using the directory, and
    /// another layout or none recorded): it makes the layout's slot files.
    pub(super) wrote: bool,
}

/// Settles the layout of `dir` and leaves `file` locked shared. `want` is written only where
/// nobody else uses the directory (and, for `auto`, no process of its run has written its
/// choice), only once [`fd_budget`] allows it, and only where this process may write `file`
/// (`writable`: another user's layout file is read, never written). Waits at most
/// [`LAYOUT_WAIT`], and never longer than `patience` (the pool's deadline for a permit): a
/// process that keeps the layout file locked, stopped or another user's, holds up no test past
/// its deadline.
pub(super) fn agree_on_layout(
    dir: &Path,
    path: &Path,
    file: &File,
    writable: bool,
    want: WantedLayout<'_>,
    patience: Duration,
) -> Result<Agreed, HostError> {
    // A deadline of nothing (a try) still lets a process laying the directory out finish.
    let waited = LAYOUT_WAIT.min(patience.max(Duration::from_millis(100)));
    let give_up = Instant::now() + waited;
    let mut pause = Duration::from_millis(1);
    let wanted = want.layout();
    let run = want.run().map(str::to_string);
    let mut chose = false;
    let mut wrote = false;
    loop {
        match file.try_lock() {
            Ok(()) => {
                let mut buf = [0u8; LAYOUT_LEN];
                let recorded = match sys::read_at_start(file, &mut buf) {
                    Ok(n) => Layout::decode_tagged(&buf[..n]).ok().flatten(),
                    Err(_) => None,
                };
                // Nobody holds the layout, but the directory is in use while any of its slots
                // is locked: by a command that inherited it from a `run` killed since, its
                // background jobs, a child forked without `exec`. Its layout then stays (it is
                // adopted below), and so does its memory budget. Looked at only where it
                // matters: the usual process finds the layout it wants and no budget.
                let already = match (&run, &recorded) {
                    (None, Some((layout, _))) => *layout == wanted,
                    (Some(run), Some((_, Some(theirs)))) => run == theirs,
                    _ => false,
                };
                let mut busy = None;
                let mut in_use = || {
                    if busy.is_none() {
                        busy = Some(slots_in_use(dir));
                    }
                    matches!(busy, Some(Some(_)))
                };
                // The memory budget of its last users goes with them.
                forget_budget(dir, &mut in_use);
                let written = if already {
                    // Already ours (the last users wanted the same, or a process of this run
                    // chose): nothing to write, and the descriptor budget is checked before
                    // the slots are opened.
                    Ok(())
                } else if !writable {
                    // Another user's layout: adopted (or declined, see `HostSlots::declined`)
                    // as it is, never rewritten; one that says nothing usable is its owner's
                    // to mend.
                    if recorded.is_none() {
                        let _ = file.unlock();
                        return Err(unwritable(dir, path, file));
                    }
                    Ok(())
                } else if in_use() {
                    if recorded.is_none() {
                        let _ = file.unlock();
                        return Err(HostError::Directory(format!(
                            "the layout file {} of slot directory {} is missing or unreadable \
                             while {}; stop the processes that hold its slots (or let them \
                             end) and the next process rewrites it, or set GPU_TEST_PERMIT_DIR \
                             to another directory",
                            path.display(),
                            dir.display(),
                            busy.flatten().unwrap_or_default()
                        )));
                    }
                    Ok(())
                } else {
                    let written = match fd_budget(dir, wanted) {
                        Ok(()) => {
                            match sys::write_at(file, &wanted.encode_for(run.as_deref()), 0) {
                                Ok(()) => {
                                    // Written whole by this user: only its owner writes it on.
                                    sys::restrict_to_owner(file);
                                    Ok(())
                                }
                                Err(e) => Err(io_err(path, e)),
                            }
                        }
                        Err(e) => Err(e),
                    };
                    chose = run.is_some() && written.is_ok();
                    wrote |= written.is_ok();
                    written
                };
                // Not atomic: another process may set its layout in between; read it again
                // under the shared lock below.
                let _ = file.unlock();
                written?;
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_err(path, e)),
        }
        match file.try_lock_shared() {
            Ok(()) => {
                let mut buf = vec![0u8; LAYOUT_LEN];
                let n = match sys::read_at_start(file, &mut buf) {
                    Ok(n) => n,
                    Err(e) => return Err(io_err(path, e)),
                };
                match Layout::decode(&buf[..n]) {
                    Ok(Some(layout)) => {
                        return Ok(Agreed {
                            layout,
                            chose: chose && layout == wanted,
                            wrote,
                        });
                    }
                    // Not written yet, by a process that failed or was killed before it
                    // wrote: the next round rewrites it if nobody else uses the directory.
                    Ok(None) => {
                        let _ = file.unlock();
                    }
                    Err(problem) => {
                        let _ = file.unlock();
                        // Only a process that finds the directory unused may rewrite it.
                        if !writable {
                            return Err(unwritable(dir, path, file));
                        }
                        if matches!(file.try_lock(), Ok(())) {
                            let _ = file.unlock();
                            continue;
                        }
                        return Err(HostError::Directory(format!(
                            "the layout file {} of slot directory {} is corrupt ({problem}) \
                             while processes use the directory; stop them (or let them end) and \
                             the next process rewrites it, or set GPU_TEST_PERMIT_DIR to \
                             another directory",
                            path.display(),
                            dir.display()
                        )));
                    }
                }
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_err(path, e)),
        }
        if Instant::now() >= give_up {
            return Err(HostError::Directory(format!(
                "slot directory {}: no agreed layout after {:.1}s; another process keeps {} \
                 locked (it may be stopped while laying out the directory); resume or stop it, \
                 or set GPU_TEST_PERMIT_DIR to another directory",
                dir.display(),
                waited.as_secs_f64(),
                path.display()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(RECHECK);
    }
}

/// The error for a layout file that says nothing usable and that this process may not
/// write: another user's.
fn unwritable(dir: &Path, path: &Path, file: &File) -> HostError {
    let owner = match sys::writer(file) {
        sys::Writer::User(uid) | sys::Writer::Others { owner: uid } => format!("uid {uid}"),
        _ => "another user".to_string(),
    };
    HostError::Directory(format!(
        "the layout file {} of slot directory {} is blank or corrupt, and only its owner, \
         {owner}, may rewrite it; ask them to remove it while nobody uses the directory, or set \
         GPU_TEST_PERMIT_DIR to a directory of this user's own",
        path.display(),
        dir.display()
    ))
}

/// Whether a slot file of `dir` is locked, or may be (its lock cannot be probed): what says
/// so, or `None` when every one is known to be free. Every `gpu0.slot<i>` file counts, not
/// only those of the recorded layout.
fn slots_in_use(dir: &Path) -> Option<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return Some(format!("its slot files cannot be listed ({e})")),
    };
    for entry in entries {
        let Ok(entry) = entry else { continue };
        // Anything but a regular file at a slot's name is no slot anybody holds: every
        // process refuses it (and the acquisition that meets it says so).
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if !kind.is_file() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if slot_index(name).is_none() {
            continue;
        }
        let path = entry.path();
        match probe_at(&path, Mode::Shared) {
            Probe::Free => {}
            // Removed since it was listed.
            Probe::Unknown(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Probe::Locked => {
                let by = match sys::open_regular_for_reading(&path) {
                    Ok(f) => match sys::lock_owner(&f) {
                        Some(pid) => format!(" by pid {pid}"),
                        None => String::new(),
                    },
                    Err(_) => String::new(),
                };
                return Some(format!("slot file {} is locked{by}", path.display()));
            }
            Probe::Unknown(e) => {
                return Some(format!(
                    "whether slot file {} is locked cannot be told ({e})",
                    path.display()
                ));
            }
        }
    }
    None
}

/// Makes sure this process may open the files of `layout` (raising the soft descriptor limit
/// where the hard one allows), before any of them is created.
pub(super) fn fd_budget(dir: &Path, layout: Layout) -> Result<(), HostError> {
    fd_budget_counted(dir, layout, sys::Counted::IfTight)
}

/// [`fd_budget`], counting the descriptors open as `counted` says: [`sys::Counted::Exhausted`]
/// explains an EMFILE met while opening the slots.
pub(super) fn fd_budget_counted(
    dir: &Path,
    layout: Layout,
    counted: sys::Counted,
) -> Result<(), HostError> {
    let needed = layout.slots().saturating_add(FIXED_FILES);
    let Err(limits) = sys::ensure_descriptors(needed, counted) else {
        return Ok(());
    };
    Err(HostError::Descriptors(format!(
        "{layout} needs {needed} open files in every process using slot directory {}, but \
         this process may open only {} more (descriptor limit {}, hard limit {}, of which \
         {} are left free for the program itself); lower {} (or \
         GPU_TEST_PERMIT_GPUS), or raise the limit (`ulimit -n`, or `nofile` in \
         /etc/security/limits.conf)",
        dir.display(),
        limits.available,
        limits.soft,
        limits.hard,
        limits.headroom,
        crate::config::Config::global().concurrency_var,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser-free read agrees with the JSON parser wherever it answers, and answers for
    /// every record this crate writes.
    #[test]
    fn written_records_read_without_the_parser_as_the_parser_reads_them() {
        for (layout, run) in [
            (
                Layout {
                    per_gpu: 2,
                    gpus: 1,
                },
                None,
            ),
            (
                Layout {
                    per_gpu: 8,
                    gpus: 1,
                },
                None,
            ),
            (
                Layout {
                    per_gpu: 64,
                    gpus: 16,
                },
                Some("r-1_a.b"),
            ),
            (
                Layout {
                    per_gpu: 3,
                    gpus: 8,
                },
                Some("h0123456789abcdef"),
            ),
        ] {
            let raw = layout.encode_for(run);
            let text = padded_text(&raw).unwrap().unwrap();
            let fast = LayoutRecord::parse_written(text).expect("a written record");
            let parsed = LayoutRecord::from_text(text).unwrap();
            assert_eq!(fast, parsed, "{text}");
            assert_eq!(
                Layout::decode_tagged(&raw).unwrap(),
                Some((layout, run.map(str::to_string)))
            );
        }
        // Left to the parser: what it reads otherwise, or refuses.
        for text in [
            r#"{ "v":1,"per_gpu":8,"gpus":1}"#,
            r#"{"per_gpu":8,"v":1,"gpus":1}"#,
            r#"{"v":1,"per_gpu":08,"gpus":1}"#,
            r#"{"v":1,"per_gpu":8,"gpus":1,"run":"a\u0041"}"#,
            r#"{"v":1,"per_gpu":8,"gpus":1,"run":"a b"}"#,
            r#"{"v":4294967296,"per_gpu":8,"gpus":1}"#,
            r#"{"v":1,"per_gpu":99999999999999999999999,"gpus":1}"#,
            r#"{"v":1,"per_gpu":8,"gpus":1}x"#,
            r#"{"v":1,"per_gpu":8,"gpus":}"#,
            r#"{"v":1,"per_gpu":-8,"gpus":1}"#,
        ] {
            assert_eq!(LayoutRecord::parse_written(text), None, "{text}");
        }
        assert_eq!(
            Layout::decode_tagged(br#"{ "v":1,"per_gpu":8,"gpus":1}"#).unwrap(),
            Some((
                Layout {
                    per_gpu: 8,
                    gpus: 1
                },
                None
            ))
        );
        assert!(Layout::decode_tagged(br#"{"v":2,"per_gpu":8,"gpus":1}"#).is_err());
        assert!(Layout::decode_tagged(br#"{"v":1,"per_gpu":0,"gpus":1}"#).is_err());
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// What this version writes, byte for byte (as the serde-derived code of earlier versions
    /// wrote it, before the padding); and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/layout/v1");

    #[test]
    fn the_golden_file_reads_and_writes_byte_for_byte() {
        let known = [
            (
                Layout {
                    per_gpu: 8,
                    gpus: 1,
                },
                None,
            ),
            (
                Layout {
                    per_gpu: 3,
                    gpus: 2,
                },
                Some("h0123456789abcdef"),
            ),
        ];
        let lines: Vec<&str> = GOLDEN.lines().collect();
        assert_eq!(lines.len(), known.len());
        for ((layout, run), line) in known.into_iter().zip(lines) {
            let raw = layout.encode_for(run);
            assert_eq!(raw.len(), LAYOUT_LEN);
            assert_eq!(padded_text(&raw).unwrap(), Some(line));
            let want = Some((layout, run.map(str::to_string)));
            assert_eq!(Layout::decode_tagged(line.as_bytes()).unwrap(), want);
            // The parser reads it as the fast path does.
            assert_eq!(
                LayoutRecord::from_text(line).unwrap(),
                LayoutRecord::parse_written(line).unwrap()
            );
        }
    }
}
