//! The format of `gpu0.tests`, the tests' reference hold times: one JSON line a test, in the
//! slot directory's state directory. [`tune`](crate::tune) writes it from the recorded runs
//! (and reads it back to update it); backfilling reads the hold times and `learned` weights the
//! memory. Both sides read and write it through this module alone.
//!
//! A line of this version reads `{"v":1,"test":"<binary>::<name>","us":...,"seen":...}`, with
//! `mem`, `binary` and `name` where known. Lines written before the format had a version have
//! no `v` and the same fields: they read as they did. A line of another version, or one that
//! is not a line of this format (cut short, garbage), is left out, and counted.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::json::{self, FieldReader, Fields, Object, Record, Value};
use crate::sys;

/// The file, in the state directory.
pub(crate) const TESTS_FILE: &str = "gpu0.tests";

/// The path of state file `name` (`gpu0.tests`, `gpu0.history`, ...) in state directory
/// `state`: in a directory other users may write (a shared slot directory that is its own
/// state directory), this user's own file, `NAME-UID`, so that what another user writes can
/// neither change nor truncate what this user learned, nor teach it anything.
pub(crate) fn state_path(state: &Path, name: &str) -> PathBuf {
    // Asked once a process for its state directory (one `stat`), as every test process of a
    // nextest run asks at its first permit.
    static SEEN: std::sync::OnceLock<(PathBuf, bool)> = std::sync::OnceLock::new();
    let (seen, shared) = SEEN.get_or_init(|| (state.to_path_buf(), sys::is_shared_dir(state)));
    let shared = if seen == state {
        *shared
    } else {
        sys::is_shared_dir(state)
    };
    if shared {
        state.join(sys::per_user_name(name))
    } else {
        state.join(name)
    }
}

/// The state file at `path` ([`state_path`]), opened for reading where it is a regular file of
/// this user's: never through a link, nor from a FIFO, nor one another user made at its name.
pub(crate) fn open_own(path: &Path) -> Option<File> {
    sys::open_own_regular(path).ok()
}

/// The state file at `path` ([`state_path`]), opened (made if missing) for writing where it is
/// this user's and nobody else may write it.
pub(crate) fn open_own_for_writing(path: &Path) -> std::io::Result<File> {
    let shared = path.parent().is_some_and(sys::is_shared_dir);
    let (file, writable, writer) = sys::open_owner_file(path, shared)?;
    if !writable || writer != sys::Writer::ThisUser {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to another user, or other users may write it; it is left alone",
                path.display()
            ),
        ));
    }
    Ok(file)
}

/// The version of a line this build writes.
const VERSION: u32 = 1;

/// What `v` reads in a line written before the format had a version.
const UNVERSIONED: u32 = 0;

/// The most of the file that is read.
pub(crate) const READ_LIMIT: usize = 8 << 20;

/// One line of [`TESTS_FILE`]: a test's reference hold time.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TestLine {
    /// Version of the line's format ([`UNVERSIONED`] where it has none).
    v: u32,
    /// `<binary>::<name>`, as run records name the test.
    pub(crate) test: String,
    /// The shortest mean hold it had in one run, microseconds.
    pub(crate) us: u64,
    /// When it was last seen, milliseconds since the Unix epoch (0 where a line does not say:
    /// the first to be dropped when the file is full).
    pub(crate) seen: u64,
    /// The most GPU memory its fixture measured, bytes.
    pub(crate) mem: Option<u64>,
    /// Its test binary, apart from its name (lines written before these were kept have
    /// neither: only `test`, the two joined by `::`).
    pub(crate) binary: Option<String>,
    /// Its name within the binary.
    pub(crate) name: Option<String>,
}

impl json::Write for TestLine {
    fn write(&self, out: &mut String) {
        out.push_str(
            &Object::new()
                .field("v", self.v)
                .field("test", &self.test)
                .field("us", self.us)
                .field("seen", self.seen)
                .some("mem", &self.mem)
                .some("binary", &self.binary)
                .some("name", &self.name)
                .finish(),
        );
    }
}

impl Record for TestLine {
    fn read_json(v: &Value) -> Result<TestLine, String> {
        let f = Fields::of(v, "gpu0.tests line")?;
        let mut r = FieldReader::new(f);
        let record = TestLine {
            v: r.or("v", UNVERSIONED),
            test: r.req("test"),
            us: r.req("us"),
            seen: r.or_default("seen"),
            mem: r.opt("mem"),
            binary: r.opt("binary"),
            name: r.opt("name"),
        };
        match r.error() {
            None => Ok(record),
            Some(e) => Err(e),
        }
    }
}

impl TestLine {
    /// A line of this version for test `name` of binary `binary`, with reference hold time
    /// `us`, last seen at `seen` (Unix milliseconds).
    pub(crate) fn new(binary: String, name: String, us: u64, seen: u64) -> TestLine {
        TestLine {
            v: VERSION,
            test: crate::nextest::test_key(&binary, &name),
            us,
            seen,
            mem: None,
            binary: Some(binary),
            name: Some(name),
        }
    }

    /// The line `line` of the file, if it is one of a version this build reads.
    fn decode(line: &str) -> Option<TestLine> {
        let t = TestLine::from_text(line).ok()?;
        if matches!(t.v, VERSION | UNVERSIONED) {
            Some(t)
        } else {
            None
        }
    }
}

/// The lines of file text `text`, and how many non-blank lines were left out.
pub(crate) fn parse(text: &str) -> (Vec<TestLine>, usize) {
    let mut bad = 0;
    let mut lines = Vec::new();
    for l in text.lines() {
        if l.trim().is_empty() {
            continue;
        }
        match TestLine::decode(l) {
            Some(t) => lines.push(t),
            None => bad += 1,
        }
    }
    (lines, bad)
}

/// The file's text for `lines`, each written at this version, one a line.
pub(crate) fn encode(lines: &[TestLine]) -> String {
    let mut text = String::new();
    for t in lines {
        let t = TestLine {
            v: VERSION,
            ..t.clone()
        };
        text.push_str(&t.to_text());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What this version writes for [`known`], byte for byte; and what it must read.
    const GOLDEN: &str = include_str!("../../tests/data/gpu0.tests/v1");
    /// Lines written before the format had a version, which this version must read as before.
    const UNVERSIONED_LINES: &str = include_str!("../../tests/data/gpu0.tests/unversioned");

    /// The lines of [`GOLDEN`].
    fn known() -> Vec<TestLine> {
        let heavy = TestLine {
            mem: Some(8 << 30),
            ..TestLine::new("suite".into(), "heavy".into(), 250_000, 1_764_300_000_000)
        };
        let light = TestLine::new(
            "suite".into(),
            "light \"quoted\" \u{e9}".into(),
            1_500,
            1_764_300_000_001,
        );
        vec![heavy, light]
    }

    #[test]
    fn the_writer_writes_the_golden_file_byte_for_byte() {
        assert_eq!(encode(&known()), GOLDEN);
        // A line read from an unversioned file is written at this version.
        let (old, _) = parse(UNVERSIONED_LINES);
        assert!(encode(&old).lines().all(|l| l.starts_with(r#"{"v":1,"#)));
    }

    #[test]
    fn the_reader_reads_the_golden_file() {
        assert_eq!(parse(GOLDEN), (known(), 0));
    }

    #[test]
    fn lines_without_a_version_read_as_before() {
        let (lines, bad) = parse(UNVERSIONED_LINES);
        assert_eq!(bad, 0);
        let got: Vec<_> = lines
            .iter()
            .map(|t| {
                (
                    t.test.as_str(),
                    t.us,
                    t.seen,
                    t.mem,
                    t.binary.as_deref(),
                    t.name.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "old::before-binaries",
                    1_000,
                    1_700_000_000_000,
                    None,
                    None,
                    None
                ),
                (
                    "suite::measured",
                    2_000,
                    1_700_000_000_001,
                    Some(1 << 30),
                    Some("suite"),
                    Some("measured")
                ),
                ("hand::written", 3_000, 0, None, None, None),
            ]
        );
    }

    #[test]
    fn other_versions_and_garbage_are_left_out_and_counted() {
        let text = format!(
            "{GOLDEN}{{\"v\":2,\"test\":\"a::b\",\"us\":1,\"seen\":1}}\n\
             not json\n\
             {{\"test\":\"a::c\",\"us\":-1}}\n\
             {{\"v\":1,\"test\":\"a::d\",\"us\":5,\"se\n\
             \n   \n\
             {{\"us\":5,\"seen\":1}}\n"
        );
        assert_eq!(parse(&text), (known(), 5));
    }
}
