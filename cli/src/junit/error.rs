//! Errors: what is wrong with a report, and where (a pass knows the byte; its line is
//! counted only when there is an error).

use std::fmt;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use quick_xml::reader::Reader;

/// Where in a report: the byte, and its line and column (both from 1; the column counts
/// bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Bytes from the start of the file.
    pub byte: u64,
    /// The line, from 1.
    pub line: u64,
    /// The byte within the line, from 1.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {} (byte {})",
            self.line, self.column, self.byte
        )
    }
}

/// What is wrong, in a [`JunitError`].
#[derive(Debug)]
#[non_exhaustive]
pub enum JunitErrorKind {
    /// Reading the report, or writing or renaming the output, failed.
    Io {
        /// What was being done: `read`, `write`, `rename`.
        op: &'static str,
        /// The error.
        error: io::Error,
    },
    /// The file is not XML: what the parser says.
    NotXml(String),
    /// The file ends inside an element or a tag: it was cut short.
    Truncated {
        /// The innermost element left open, or the markup cut (`a tag`).
        open: String,
    },
    /// The root element is not `<testsuites>` or `<testsuite>` (`None`: there is none).
    NotJunit {
        /// The root element's name.
        root: Option<String>,
    },
    /// A count attribute (`tests`, `skipped`) of a suite is not a whole number.
    BadCount {
        /// The element.
        element: String,
        /// The attribute.
        attribute: &'static str,
        /// Its value.
        value: String,
    },
    /// The report changed between the two passes (it was still being written).
    Changed,
}

/// A JUnit report that could not be read or rewritten. Its message names the file, and
/// where in it the problem is.
#[derive(Debug)]
pub struct JunitError {
    pub(super) path: PathBuf,
    pub(super) at: Option<Position>,
    pub(super) kind: JunitErrorKind,
}

impl JunitError {
    /// The file: the report, or for a failed write the output or its temporary file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where in the report, when the problem is at a place.
    pub fn position(&self) -> Option<Position> {
        self.at
    }

    /// What is wrong.
    pub fn kind(&self) -> &JunitErrorKind {
        &self.kind
    }
}

impl fmt::Display for JunitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(at) = self.at {
            write!(f, ": {at}")?;
        }
        match &self.kind {
            JunitErrorKind::Io { op, error } => write!(f, ": cannot {op}: {error}"),
            JunitErrorKind::NotXml(msg) => write!(f, ": not XML: {msg}"),
            JunitErrorKind::Truncated { open } => {
                write!(f, ": truncated: the file ends inside {open}")
            }
            JunitErrorKind::NotJunit { root: None } => f.write_str(
                ": not a JUnit report: no root element (expected <testsuites> or <testsuite>)",
            ),
            JunitErrorKind::NotJunit { root: Some(r) } => write!(
                f,
                ": not a JUnit report: the root element is <{r}>, not <testsuites> or \
                 <testsuite>"
            ),
            JunitErrorKind::BadCount {
                element,
                attribute,
                value,
            } => write!(
                f,
                ": <{element}> has {attribute}=\"{value}\", which is not a whole number"
            ),
            JunitErrorKind::Changed => f.write_str(
                ": changed while it was being rewritten (is the test run still writing it?)",
            ),
        }
    }
}

impl std::error::Error for JunitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            JunitErrorKind::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A failure of a pass, before it is given its file and line.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) kind: JunitErrorKind,
    /// The byte it is at.
    pub(super) at: Option<u64>,
    /// Whether writing the output failed.
    pub(super) writing: bool,
}

impl Failure {
    pub(super) fn at(kind: JunitErrorKind, at: u64) -> Failure {
        Failure {
            kind,
            at: Some(at),
            writing: false,
        }
    }

    pub(super) fn read(error: io::Error) -> Failure {
        Failure {
            kind: JunitErrorKind::Io { op: "read", error },
            at: None,
            writing: false,
        }
    }

    pub(super) fn write(error: io::Error) -> Failure {
        Failure {
            kind: JunitErrorKind::Io { op: "write", error },
            at: None,
            writing: true,
        }
    }

    /// The error, of file `path` (`out` for writes); its line and column are counted in the
    /// report `open` opens again.
    pub(super) fn locate<R: Read>(
        self,
        path: &Path,
        out: &Path,
        open: impl Fn() -> io::Result<R>,
    ) -> JunitError {
        let at = self.at.map(|byte| {
            let (line, column) = open()
                .and_then(|r| line_and_column(r, byte))
                .unwrap_or((0, 0));
            Position { byte, line, column }
        });
        JunitError {
            path: if self.writing { out } else { path }.to_path_buf(),
            at,
            kind: self.kind,
        }
    }
}

/// The line and column (from 1) of byte `byte` of `r`.
pub(super) fn line_and_column(r: impl Read, byte: u64) -> io::Result<(u64, u64)> {
    let mut r = BufReader::new(r.take(byte));
    let (mut line, mut line_start, mut read) = (1, 0, 0u64);
    loop {
        let chunk = io::BufRead::fill_buf(&mut r)?;
        if chunk.is_empty() {
            return Ok((line, byte - line_start + 1));
        }
        for (i, b) in chunk.iter().enumerate() {
            if *b == b'\n' {
                line += 1;
                line_start = read + i as u64 + 1;
            }
        }
        let n = chunk.len();
        read += n as u64;
        io::BufRead::consume(&mut r, n);
    }
}

/// A quick-xml error of `reader` (whose positions miss `bom` bytes) as a failure.
pub(super) fn xml_failure<R>(reader: &Reader<R>, bom: u64, e: quick_xml::Error) -> Failure {
    use quick_xml::errors::SyntaxError as S;
    let at = reader.error_position() + bom;
    let kind = match e {
        quick_xml::Error::Io(error) => {
            return Failure::read(io::Error::new(error.kind(), error.to_string()));
        }
        // Every syntax error is markup that the end of the file cut.
        quick_xml::Error::Syntax(s) => JunitErrorKind::Truncated {
            open: match s {
                S::UnclosedComment => "a comment",
                S::UnclosedCData => "a CDATA section",
                S::UnclosedPI | S::UnclosedXmlDecl => "a processing instruction",
                S::UnclosedDoctype => "the DOCTYPE",
                S::InvalidBangMarkup => "markup starting `<!`",
                _ => "a tag",
            }
            .to_string(),
        },
        other => JunitErrorKind::NotXml(other.to_string()),
    };
    Failure::at(kind, at)
}

pub(super) fn io_error(path: &Path, op: &'static str, error: io::Error) -> JunitError {
    JunitError {
        path: path.to_path_buf(),
        at: None,
        kind: JunitErrorKind::Io { op, error },
    }
}
