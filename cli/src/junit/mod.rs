//! Skips and verdicts in the JUnit report: a test that skipped at run time becomes a
//! `<testcase>` with a `<skipped>` child instead of a pass, and a test whose process crashed or
//! hung after or around its tests carries that verdict.
//!
//! No Rust test runner can mark a test skipped once it runs, so nextest's JUnit report
//! (`[profile.<p>.junit] path`) shows every GPU test that found no device as passed. The
//! crate records each such skip ([`runs`](gpu_test_permit::__private::runs)); [`mark_skipped`] writes them into
//! the report:
//!
//! - every `<testcase>` whose test the skips name, and that passed (no `<failure>` or
//!   `<error>` child; a flaky test whose last attempt skipped counts), gets
//!   `<skipped message="backend=wgpu: no adapter ..."/>` as its first child, where the JUnit
//!   schema puts it (a self-closing `<testcase/>` is opened and closed around it; after its
//!   `<properties>`, where it has them);
//! - the `skipped` count of its `<testsuite>` and of the `<testsuites>` root grows by the
//!   testcases marked (the attribute is added where absent); `tests` stays, as JUnit's tests
//!   include the skipped ones;
//! - a testcase that already has `<skipped>`, or failed, is left as it is;
//! - every other byte stays as it was: declaration, comments, CDATA, entities, whitespace.
//!
//! Under `gpu-test-permit watch`, the verdict on a test process that crashed, exited non-zero
//! or hung at exit after its tests had their results (a teardown fault), or crashed while they
//! ran, is recorded too ([`VerdictRecord`]). [`mark`] writes them as well: every testcase
//! whose test a verdict names, passed or failed, gets
//!
//! - `<properties><property name="gpu-test-permit.verdict" value="teardown: SIGSEGV"/></properties>`
//!   (the [`VERDICT_PROPERTY`]; the verdict's fault and how the process ended) as its first
//!   child, JUnit's per-testcase properties, or the property added at the end of the
//!   `<properties>` it has;
//! - the line the watch said, as `gpu-test-permit: <line>`, appended to its own
//!   `<system-err>` (after a line break where its text does not end with one), or in a new
//!   `<system-err>` as its last child.
//!
//! A test with several verdicts (one per attempt) gets a property and a line for each. Nothing
//! else changes: no `<failure>` is added or taken away, and no count changes (a verdict that
//! failed the test failed its process, which nextest reports). A testcase that has a
//! `gpu-test-permit.verdict` property already is left as it is, so a report marked twice is
//! marked once.
//!
//! A test is known by the testcase's `classname` (nextest's binary id, the `<testsuite>`'s
//! name when absent) and `name`, as the records have them. Only the innermost
//! `<testsuite>` of a testcase is counted.
//!
//! The report is streamed, never held in memory: a first pass finds the testcases to mark and
//! counts the skips per suite (the counts sit in start tags written before those testcases), a
//! second copies the report with the changes into a temporary file beside the output, which
//! is then renamed over it. The output is never half-written: on any error it is untouched
//! and the temporary file is gone.
//!
//! [`report_run_id`] reads the run id nextest writes into its report (the `uuid` of
//! `<testsuites>`), the key of the run's records.
//!
//! ```
//! use gpu_test_permit_cli::junit::{Skip, mark_skipped_in};
//!
//! let report = r#"<testsuites name="nextest-run" tests="2" skipped="0" failures="0" errors="0">
//!     <testsuite name="gpu-suite" tests="2" skipped="0" errors="0" failures="0">
//!         <testcase name="matmul" classname="gpu-suite" time="0.004"/>
//!         <testcase name="cpu_only" classname="gpu-suite" time="0.001"/>
//!     </testsuite>
//! </testsuites>
//! "#;
//! let skips = [Skip::new("gpu-suite", "matmul", "cuda", "not installed")];
//! let (xml, marked) = mark_skipped_in(report.as_bytes(), &skips).unwrap();
//! assert_eq!(marked.testcases, 1);
//! let xml = String::from_utf8(xml).unwrap();
//! assert!(xml.contains(r#"<testsuite name="gpu-suite" tests="2" skipped="1""#));
//! assert!(xml.contains(
//!     r#"<testcase name="matmul" classname="gpu-suite" time="0.004">
//!             <skipped message="backend=cuda: not installed"/>
//!         </testcase>"#
//! ));
//! assert!(xml.contains(r#"<testcase name="cpu_only" classname="gpu-suite" time="0.001"/>"#));
//! ```
//!
//! A verdict:
//!
//! ```
//! use gpu_test_permit_cli::junit::{Verdict, mark_in};
//!
//! let report = r#"<testsuite name="gpu-suite" tests="1"><testcase name="matmul" classname="gpu-suite"/></testsuite>"#;
//! let said = "teardown fault: `gpu-suite` died by SIGSEGV after all 1 of its tests had their results";
//! let verdicts = [Verdict::new("gpu-suite", "matmul", "teardown", "SIGSEGV", said)];
//! let (xml, marked) = mark_in(report.as_bytes(), &[], &verdicts).unwrap();
//! assert_eq!(marked.verdict_testcases, 1);
//! assert_eq!(
//!     String::from_utf8(xml).unwrap(),
//!     format!(
//!         "<testsuite name=\"gpu-suite\" tests=\"1\"><testcase name=\"matmul\" classname=\"gpu-suite\">\
//!          <properties><property name=\"gpu-test-permit.verdict\" value=\"teardown: SIGSEGV\"/></properties>\
//!          <system-err>gpu-test-permit: {said}</system-err></testcase></testsuite>"
//!     )
//! );
//! ```

mod error;
mod file;
mod tag;
#[cfg(test)]
mod verdict_tests;
mod walk;

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use quick_xml::events::Event;
use quick_xml::reader::Reader;

pub use error::{JunitError, JunitErrorKind, Position};

use error::{Failure, io_error};
use file::{Input, TempFile, read_input, same_file};
use gpu_test_permit::__private::runs::{SkippedTest, VerdictRecord};
use walk::{Document, Element, Marks, attribute, plan, rewrite, step};

/// A test that skipped at run time, as the report is to say it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skip {
    /// The test binary: the testcase's `classname`.
    pub binary: String,
    /// The test: the testcase's `name`.
    pub test: String,
    /// The backend that had no device: `cuda`, `wgpu`.
    pub backend: String,
    /// Why.
    pub reason: String,
}

impl Skip {
    /// The skip of `test` in `binary`, for want of `backend`.
    pub fn new(
        binary: impl Into<String>,
        test: impl Into<String>,
        backend: impl Into<String>,
        reason: impl Into<String>,
    ) -> Skip {
        Skip {
            binary: binary.into(),
            test: test.into(),
            backend: backend.into(),
            reason: reason.into(),
        }
    }

    /// The `message` of its `<skipped>`: `backend=<backend>: <reason>`.
    pub fn message(&self) -> String {
        format!("backend={}: {}", self.backend, self.reason)
    }
}

impl From<&SkippedTest> for Skip {
    fn from(s: &SkippedTest) -> Skip {
        Skip::new(&s.key.binary, &s.key.test, &s.backend, &s.reason)
    }
}

/// The `name` of the `<property>` a verdict is written as.
pub const VERDICT_PROPERTY: &str = "gpu-test-permit.verdict";

/// A test process's verdict (`gpu-test-permit watch`): its process crashed, exited non-zero
/// or hung after or around its tests, as the report is to say it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The test binary: the testcase's `classname`.
    pub binary: String,
    /// The test: the testcase's `name`.
    pub test: String,
    /// `teardown`, `hang` or `crash`.
    pub fault: String,
    /// How the process ended: `SIGSEGV`, `exit code 3`, `hung at exit`.
    pub ended: String,
    /// The line the watch said.
    pub said: String,
}

impl Verdict {
    /// The verdict on `test` in `binary`: `fault`, the process having `ended` so; `said`,
    /// the line the watch said.
    pub fn new(
        binary: impl Into<String>,
        test: impl Into<String>,
        fault: impl Into<String>,
        ended: impl Into<String>,
        said: impl Into<String>,
    ) -> Verdict {
        Verdict {
            binary: binary.into(),
            test: test.into(),
            fault: fault.into(),
            ended: ended.into(),
            said: said.into(),
        }
    }

    /// The `value` of its `<property>`: `<fault>: <ended>` (`teardown: SIGSEGV`).
    pub fn value(&self) -> String {
        format!("{}: {}", self.fault, self.ended)
    }
}

impl From<&VerdictRecord> for Verdict {
    fn from(v: &VerdictRecord) -> Verdict {
        Verdict::new(&v.binary, &v.test, &v.fault, &v.ended, &v.said)
    }
}

/// Why a skip's or a verdict's testcase was left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Left {
    /// The report says the test failed (`<failure>` or `<error>`): a failure stays a failure
    /// (skips only; a verdict marks a failed test too).
    Failed,
    /// The testcase already has `<skipped>`.
    AlreadySkipped,
    /// The testcase already has a [`VERDICT_PROPERTY`] property: the report was marked
    /// before.
    AlreadyMarked,
}

/// What [`mark`] (or [`mark_skipped`]) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Marked {
    /// Testcases that now have `<skipped>` (a test listed twice is marked twice).
    pub testcases: u64,
    /// The skips that marked a testcase, in the order given.
    pub marked: Vec<Skip>,
    /// The skips whose testcases were all left as they were, and why (the first's reason).
    pub left: Vec<(Skip, Left)>,
    /// The skips that name no testcase of the report.
    pub unmatched: Vec<Skip>,
    /// Testcases that now have their verdicts (a test listed twice is marked twice).
    pub verdict_testcases: u64,
    /// The verdicts written into a testcase, in the order given.
    pub verdicts: Vec<Verdict>,
    /// The verdicts whose testcases were all left as they were, and why
    /// ([`Left::AlreadyMarked`]).
    pub verdicts_left: Vec<(Verdict, Left)>,
    /// The verdicts that name no testcase of the report.
    pub verdicts_unmatched: Vec<Verdict>,
    /// Whether the output was written (not when the report is rewritten in place and nothing
    /// is marked: it is left untouched).
    pub written: bool,
}

/// Rewrites the JUnit report `report` into `output` (which may be `report`) with every
/// testcase that `skips` names and that passed marked skipped, and the suites' `skipped`
/// counts grown to match, and every testcase that `verdicts` names given its verdicts as
/// properties and lines of its `<system-err>` (see the [module docs](self)).
///
/// The output is written to a temporary file beside it, then renamed over it, keeping the
/// permissions of the file it replaces. When `output` is `report` and nothing is to be
/// marked, the report is left untouched ([`Marked::written`] is false).
///
/// # Errors
///
/// The report cannot be read, is not XML, is cut short, is not a JUnit report (its root is
/// not `<testsuites>` or `<testsuite>`), has a `tests` or `skipped` count that is not a
/// number, or changed while it was read; the output cannot be written. The output is then
/// as it was, and no temporary file is left.
pub fn mark(
    report: &Path,
    output: &Path,
    skips: &[Skip],
    verdicts: &[Verdict],
) -> Result<Marked, JunitError> {
    let marks = Marks::new(skips, verdicts);
    let open = || File::open(report);
    let located = |f: Failure| f.locate(report, output, open);
    let plan = read_input(open)
        .and_then(|input| plan(input, &marks))
        .map_err(located)?;
    let mut marked = plan.outcome(&marks);
    if !plan.changes() && same_file(report, output) {
        return Ok(marked);
    }
    let tmp = TempFile::beside(output)?;
    let located = |f: Failure| f.locate(report, &tmp.path, open);
    let mut out = BufWriter::with_capacity(1 << 16, tmp.file());
    read_input(open)
        .and_then(|input| rewrite(input, &mut out, &plan, &marks))
        .map_err(located)?;
    out.flush().map_err(|e| io_error(&tmp.path, "write", e))?;
    drop(out);
    if let Ok(meta) = fs::metadata(output) {
        // Best effort: the file replaced keeps its mode; a new one has the default.
        let _ = tmp.file().set_permissions(meta.permissions());
    }
    tmp.file()
        .sync_all()
        .map_err(|e| io_error(&tmp.path, "write", e))?;
    tmp.rename_to(output)?;
    marked.written = true;
    Ok(marked)
}

/// [`mark`] of a report in memory: the rewritten report and what was marked.
///
/// # Errors
///
/// As [`mark`], but for I/O: the report is not XML, is cut short, is not a JUnit report, or
/// has a count that is not a number. The error's path is `(input)`.
pub fn mark_in(
    report: &[u8],
    skips: &[Skip],
    verdicts: &[Verdict],
) -> Result<(Vec<u8>, Marked), JunitError> {
    let path = Path::new("(input)");
    let marks = Marks::new(skips, verdicts);
    let open = || Ok::<_, io::Error>(report);
    let located = |f: Failure| f.locate(path, path, open);
    let plan = read_input(open)
        .and_then(|input| plan(input, &marks))
        .map_err(located)?;
    let mut out = Vec::with_capacity(report.len() + 256 * plan.marked.len());
    read_input(open)
        .and_then(|input| rewrite(input, &mut out, &plan, &marks))
        .map_err(located)?;
    let mut marked = plan.outcome(&marks);
    marked.written = true;
    Ok((out, marked))
}

/// [`mark`] with skips alone: every testcase that `skips` names and that passed marked
/// skipped.
///
/// # Errors
///
/// As [`mark`].
pub fn mark_skipped(report: &Path, output: &Path, skips: &[Skip]) -> Result<Marked, JunitError> {
    mark(report, output, skips, &[])
}

/// [`mark_in`] with skips alone.
///
/// # Errors
///
/// As [`mark_in`].
pub fn mark_skipped_in(report: &[u8], skips: &[Skip]) -> Result<(Vec<u8>, Marked), JunitError> {
    mark_in(report, skips, &[])
}

/// The run id in JUnit report `report`: the `uuid` attribute nextest writes on its
/// `<testsuites>` root (its `NEXTEST_RUN_ID`). `None` when the root has none or is a
/// `<testsuite>`. Reads no further than the root's start tag.
///
/// # Errors
///
/// The report cannot be read, or is not a JUnit report up to its root's start tag.
pub fn report_run_id(report: &Path) -> Result<Option<String>, JunitError> {
    let open = || File::open(report);
    read_input(open)
        .and_then(run_id_of)
        .map_err(|f| f.locate(report, report, open))
}

fn run_id_of<R: Read>(input: Input<R>) -> Result<Option<String>, Failure> {
    let mut reader = Reader::from_reader(BufReader::new(input.rest));
    let mut buf = Vec::new();
    let mut doc = Document::default();
    loop {
        let (event, step) = step(&mut reader, &mut buf, &mut doc, input.bom)?;
        match (&event, step.element) {
            (Event::Start(e) | Event::Empty(e), Some((Element::Suites, _))) => {
                return attribute(e, "uuid", step.start);
            }
            (_, Some(_)) => return Ok(None),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tag::{add_skipped, attribute_ranges};
    use super::walk::count;
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- made by nextest -->
<testsuites name="nextest-run" tests="5" skipped="0" failures="1" errors="0" uuid="0b21430d-56d4-438d-b4b6-b0d0e0ead151" timestamp="2026-11-24T10:00:00.000+00:00" time="1.5">
    <testsuite name="suite::gpu" tests="4" disabled="0" errors="0" failures="1">
        <testcase name="a" classname="suite::gpu" timestamp="2026-11-24T10:00:00.000+00:00" time="0.1"/>
        <testcase name="b &amp; c" classname="suite::gpu" time="0.1">
            <system-out>x &lt; y <![CDATA[<raw & kept>]]> &#65;</system-out>
        </testcase>
        <testcase name="failed" classname="suite::gpu" time="0.1">
            <failure message="panicked" type="test failure">boom</failure>
        </testcase>
        <testcase name="flaky" classname="suite::gpu" time="0.1">
            <flakyFailure message="once" type="test failure"><system-out>o</system-out></flakyFailure>
        </testcase>
    </testsuite>
    <testsuite name="other" tests="1" skipped="2" errors="0" failures="0">
        <testcase name="a" classname="other" time="0.1"><skipped message="ignored"/></testcase>
    </testsuite>
</testsuites>
"#;

    fn skip(binary: &str, test: &str) -> Skip {
        Skip::new(binary, test, "cuda", "not installed")
    }

    fn run(report: &str, skips: &[Skip]) -> (String, Marked) {
        let (out, marked) = mark_skipped_in(report.as_bytes(), skips).unwrap();
        (String::from_utf8(out).unwrap(), marked)
    }

    fn error(report: &[u8]) -> JunitError {
        mark_skipped_in(report, &[skip("s", "t")]).unwrap_err()
    }

    /// Suite name and the `skipped` attribute of each suite, and of the root.
    fn counts(xml: &str) -> Vec<(String, Option<u64>)> {
        let mut reader = Reader::from_str(xml);
        let mut out = Vec::new();
        loop {
            match reader.read_event().unwrap() {
                Event::Start(e) | Event::Empty(e)
                    if matches!(e.name().as_ref(), "testsuite" | "testsuites") =>
                {
                    let name = attribute(&e, "name", 0).unwrap().unwrap();
                    out.push((name, count(&e, "skipped", 0).unwrap()));
                }
                Event::Eof => return out,
                _ => {}
            }
        }
    }

    #[test]
    fn marks_passed_and_flaky_tests_and_grows_the_counts() {
        let skips = [
            skip("suite::gpu", "a"),
            skip("suite::gpu", "b & c"),
            skip("suite::gpu", "flaky"),
        ];
        let (xml, marked) = run(REPORT, &skips);
        assert_eq!(marked.testcases, 3);
        assert_eq!(marked.marked, skips);
        assert!(marked.left.is_empty() && marked.unmatched.is_empty());
        assert_eq!(
            counts(&xml),
            [
                ("nextest-run".to_string(), Some(3)),
                ("suite::gpu".to_string(), Some(3)),
                ("other".to_string(), Some(2)),
            ]
        );
        // The self-closing testcase is opened and closed around its skip, at its indent.
        assert!(xml.contains(
            "<testcase name=\"a\" classname=\"suite::gpu\" \
             timestamp=\"2026-11-24T10:00:00.000+00:00\" time=\"0.1\">\n            \
             <skipped message=\"backend=cuda: not installed\"/>\n        </testcase>"
        ));
        // The skip is the first child.
        assert!(xml.contains(
            "time=\"0.1\">\n            <skipped message=\"backend=cuda: not installed\"/>\n            <flakyFailure"
        ));
        // The suite without the attribute gets it after its others.
        assert!(xml.contains(
            r#"<testsuite name="suite::gpu" tests="4" disabled="0" errors="0" failures="1" skipped="3">"#
        ));
        assert!(xml.contains(r#"tests="5" skipped="3" failures="1""#));
    }

    #[test]
    fn everything_else_is_byte_for_byte_the_same() {
        let (xml, _) = run(REPORT, &[skip("suite::gpu", "b & c")]);
        let skipped = "\n            <skipped message=\"backend=cuda: not installed\"/>";
        let expected = REPORT
            .replace(r#"skipped="0" failures="1""#, r#"skipped="1" failures="1""#)
            .replace(r#"failures="1">"#, r#"failures="1" skipped="1">"#)
            .replace(
                "classname=\"suite::gpu\" time=\"0.1\">\n            <system-out>",
                &format!(
                    "classname=\"suite::gpu\" time=\"0.1\">{skipped}\n            <system-out>"
                ),
            );
        assert_eq!(xml, expected);
        // Entities and CDATA as they were.
        assert!(xml.contains("x &lt; y <![CDATA[<raw & kept>]]> &#65;</system-out>"));
    }

    #[test]
    fn failed_and_already_skipped_tests_are_left_and_unknown_ones_reported() {
        let skips = [
            skip("suite::gpu", "failed"),
            skip("other", "a"),
            skip("suite::gpu", "not in the report"),
            skip("another binary", "a"),
        ];
        let (xml, marked) = run(REPORT, &skips);
        assert_eq!(marked.testcases, 0);
        assert_eq!(
            marked.left,
            [
                (skips[0].clone(), Left::Failed),
                (skips[1].clone(), Left::AlreadySkipped)
            ]
        );
        assert_eq!(marked.unmatched, skips[2..]);
        assert_eq!(xml, REPORT);
    }

    #[test]
    fn messages_are_escaped() {
        let s = Skip::new(
            "suite::gpu",
            "a",
            "wgpu",
            "no adapter <\"lavapipe\" & 'llvmpipe'>\nline\ttab\u{1b}[31m",
        );
        let (xml, marked) = run(REPORT, std::slice::from_ref(&s));
        assert_eq!(marked.testcases, 1);
        assert!(xml.contains(
            r#"<skipped message="backend=wgpu: no adapter &lt;&quot;lavapipe&quot; &amp; 'llvmpipe'&gt;&#10;line&#9;tab\u{1b}[31m"/>"#
        ), "{xml}");
        // A parser reads the message back.
        let mut reader = Reader::from_str(&xml);
        loop {
            match reader.read_event().unwrap() {
                Event::Empty(e) if e.name().as_ref() == "skipped" => {
                    let m = attribute(&e, "message", 0).unwrap().unwrap();
                    if m.starts_with("backend=wgpu") {
                        assert_eq!(
                            m,
                            format!("backend=wgpu: {}", s.reason.replace('\u{1b}', "\\u{1b}"))
                        );
                        break;
                    }
                }
                Event::Eof => panic!("no skipped"),
                _ => {}
            }
        }
    }

    #[test]
    fn a_testsuite_root_and_compact_xml() {
        let report = r#"<testsuite name="b" tests="2"><testcase name="t" classname="b"/><testcase name="u"></testcase></testsuite>"#;
        let (xml, marked) = run(report, &[skip("b", "t"), skip("b", "u")]);
        assert_eq!(marked.testcases, 2);
        assert_eq!(
            xml,
            r#"<testsuite name="b" tests="2" skipped="2"><testcase name="t" classname="b"><skipped message="backend=cuda: not installed"/></testcase><testcase name="u"><skipped message="backend=cuda: not installed"/></testcase></testsuite>"#
        );
    }

    #[test]
    fn byte_order_mark_single_quotes_and_tabs_are_kept() {
        let report = "\u{feff}<testsuites skipped = '1'>\n\t<testsuite name='b' skipped='0'>\n\t\t<testcase name='t' classname='b'/>\n\t</testsuite>\n</testsuites>\n";
        let (xml, _) = run(report, &[skip("b", "t")]);
        assert_eq!(
            xml,
            "\u{feff}<testsuites skipped = '2'>\n\t<testsuite name='b' skipped='1'>\n\t\t<testcase name='t' classname='b'>\n\t\t\t<skipped message=\"backend=cuda: not installed\"/>\n\t\t</testcase>\n\t</testsuite>\n</testsuites>\n"
        );
    }

    #[test]
    fn the_run_id_is_the_uuid_of_testsuites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junit.xml");
        fs::write(&path, REPORT).unwrap();
        assert_eq!(
            report_run_id(&path).unwrap().as_deref(),
            Some("0b21430d-56d4-438d-b4b6-b0d0e0ead151")
        );
        fs::write(&path, "<testsuite name='x'/>").unwrap();
        assert_eq!(report_run_id(&path).unwrap(), None);
        fs::write(&path, "<html/>").unwrap();
        assert!(report_run_id(&path).is_err());
    }

    #[test]
    fn bad_reports_are_errors_with_their_place() {
        let e = error(b"{\"not\": \"xml\"}");
        assert!(matches!(e.kind(), JunitErrorKind::NotXml(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "(input): line 1, column 1 (byte 0): not XML: text before the root element"
        );

        let e = error(b"");
        assert!(
            matches!(e.kind(), JunitErrorKind::NotJunit { root: None }),
            "{e}"
        );

        let e = error(b"<html><body/></html>");
        assert!(
            matches!(e.kind(), JunitErrorKind::NotJunit { root: Some(r) } if r == "html"),
            "{e}"
        );

        let cut = &REPORT.as_bytes()[..REPORT.find("<failure").unwrap()];
        let e = error(cut);
        assert!(
            matches!(e.kind(), JunitErrorKind::Truncated { open } if open == "<testcase>"),
            "{e}"
        );
        assert_eq!(e.position().unwrap().line, 10, "{e}");
        assert_eq!(e.position().unwrap().byte, cut.len() as u64, "{e}");

        let cut = &REPORT.as_bytes()[..REPORT.find("failures=\"1\">").unwrap() + 4];
        let e = error(cut);
        assert!(matches!(e.kind(), JunitErrorKind::Truncated { .. }), "{e}");
        assert_eq!(e.position().unwrap().line, 4, "{e}");

        let e = error(b"<testsuites>\n  <testsuite skipped=\"some\"/>\n</testsuites>");
        assert!(
            matches!(e.kind(), JunitErrorKind::BadCount { attribute: "skipped", value, .. } if value == "some"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "(input): line 2, column 3 (byte 15): <testsuite> has skipped=\"some\", which is not a whole number"
        );
        let e = error(b"<testsuites tests=\"-1\"/>");
        assert!(
            matches!(
                e.kind(),
                JunitErrorKind::BadCount {
                    attribute: "tests",
                    ..
                }
            ),
            "{e}"
        );

        let e = error(b"<testsuites><testsuite></testcase></testsuites>");
        assert!(matches!(e.kind(), JunitErrorKind::NotXml(_)), "{e}");
        let e = error(b"<testsuites a='1' a='2'/>");
        assert!(matches!(e.kind(), JunitErrorKind::NotXml(_)), "{e}");
        let e = error(b"<testsuites/><testsuites/>");
        assert!(matches!(e.kind(), JunitErrorKind::NotXml(_)), "{e}");
    }

    #[test]
    fn attribute_ranges_find_keys_and_values() {
        let tag = br#"<t a="1" b = '2' c="x'y">"#;
        let r: Vec<(&[u8], &[u8])> = attribute_ranges(tag)
            .into_iter()
            .map(|(k, v)| (&tag[k], &tag[v]))
            .collect();
        assert_eq!(
            r,
            [
                (&b"a"[..], &b"1"[..]),
                (&b"b"[..], &b"2"[..]),
                (&b"c"[..], &b"x'y"[..])
            ]
        );
        assert_eq!(add_skipped(b"<t/>", 2).unwrap(), b"<t skipped=\"2\"/>");
        assert_eq!(
            add_skipped(b"<t a='1' >", 2).unwrap(),
            b"<t a='1' skipped=\"2\" >"
        );
        assert_eq!(
            add_skipped(b"<t skipped=\"&#49;\">", 2).unwrap(),
            b"<t skipped=\"3\">"
        );
    }

    #[test]
    fn a_file_is_rewritten_in_place_or_to_another_and_left_alone_when_nothing_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junit.xml");
        fs::write(&path, REPORT).unwrap();
        let marked = mark_skipped(&path, &path, &[skip("nope", "nope")]).unwrap();
        assert!(!marked.written);
        assert_eq!(fs::read_to_string(&path).unwrap(), REPORT);

        let out = dir.path().join("out.xml");
        let marked = mark_skipped(&path, &out, &[skip("suite::gpu", "a")]).unwrap();
        assert!(marked.written);
        assert_eq!(fs::read_to_string(&path).unwrap(), REPORT);
        let (expected, _) = run(REPORT, &[skip("suite::gpu", "a")]);
        assert_eq!(fs::read_to_string(&out).unwrap(), expected);

        mark_skipped(&path, &path, &[skip("suite::gpu", "a")]).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), expected);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);

        let cut = dir.path().join("cut.xml");
        fs::write(&cut, &REPORT[..100]).unwrap();
        let e = mark_skipped(&cut, &out, &[skip("suite::gpu", "a")]).unwrap_err();
        assert_eq!(e.path(), cut);
        assert_eq!(fs::read_to_string(&out).unwrap(), expected);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
