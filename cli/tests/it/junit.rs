//! The `junit` command: a nextest JUnit report rewritten from the run's records in the slot
//! directory (skips, and the verdicts of `watch`), checked by parsing the XML it writes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quick_xml::events::Event;
use quick_xml::reader::Reader;

use crate::util::{cli, tempdir};

const RUN: &str = "0b21430d-56d4-438d-b4b6-b0d0e0ead151";
const OTHER_RUN: &str = "6f1c2a9e-0000-4000-8000-000000000001";

/// Writes run `run`'s record file in `dir`: one skip line per (binary, test, backend).
fn record_skips(dir: &Path, run: &str, skips: &[(&str, &str, &str)]) {
    let mut text = String::new();
    for (i, (binary, test, backend)) in skips.iter().enumerate() {
        let line = serde_json::json!({
            "kind": "skip", "run": run, "unix_us": 1 + i as u64, "pid": 1,
            "binary": binary, "test": test, "attempt": 1, "backend": backend,
            "reason": format!("{backend} not installed"),
        });
        writeln!(text, "{line}").unwrap();
    }
    std::fs::write(dir.join(format!("gpu0.run.{run}")), text).unwrap();
}

/// A verdict record line, as the library writes it (`RunRecord::Verdict`; the golden file
/// tests/data/run-records/records has one).
struct VerdictLine<'a> {
    binary: &'a str,
    test: &'a str,
    fault: &'a str,
    ended: &'a str,
    failed: bool,
    said: &'a str,
}

/// Appends run `run`'s verdict records to its record file in `dir`.
fn record_verdicts(dir: &Path, run: &str, verdicts: &[VerdictLine<'_>]) {
    let path = dir.join(format!("gpu0.run.{run}"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    for (i, v) in verdicts.iter().enumerate() {
        let line = serde_json::json!({
            "kind": "verdict", "run": run, "unix_us": 1_000 + i as u64, "pid": 4248 + i as u32,
            "binary": v.binary, "test": v.test, "attempt": 1, "fault": v.fault,
            "ended": v.ended, "failed": v.failed, "said": v.said,
        });
        writeln!(text, "{line}").unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// A nextest-style report of `suites` (binary id, its test names); `uuid` on the root. A test
/// named `failing*` failed, `flaky*` passed on a retry.
fn report(uuid: Option<&str>, suites: &[(&str, &[&str])]) -> String {
    let tests: usize = suites.iter().map(|(_, t)| t.len()).sum();
    let uuid = uuid.map_or(String::new(), |u| format!(" uuid=\"{u}\""));
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nextest-run\" \
         tests=\"{tests}\" skipped=\"0\" failures=\"0\" errors=\"0\"{uuid} \
         timestamp=\"2026-11-24T10:00:00.000+00:00\" time=\"1.000\">\n"
    );
    for (binary, names) in suites {
        writeln!(
            xml,
            "    <testsuite name=\"{binary}\" tests=\"{}\" disabled=\"0\" errors=\"0\" \
             failures=\"0\">",
            names.len()
        )
        .unwrap();
        for name in *names {
            let open = format!(
                "        <testcase name=\"{name}\" classname=\"{binary}\" \
                 timestamp=\"2026-11-24T10:00:00.000+00:00\" time=\"0.010\""
            );
            if name.starts_with("failing") {
                writeln!(
                    xml,
                    "{open}>\n            <failure type=\"test failure\">boom &amp; more\
                     </failure>\n            <system-out>out &lt;x&gt;</system-out>\n        \
                     </testcase>"
                )
                .unwrap();
            } else if name.starts_with("flaky") {
                writeln!(
                    xml,
                    "{open}>\n            <flakyFailure type=\"test failure\">\
                     <system-out>o</system-out></flakyFailure>\n        </testcase>"
                )
                .unwrap();
            } else {
                writeln!(xml, "{open}/>").unwrap();
            }
        }
        xml.push_str("    </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// What a report says, parsed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// The root's `skipped` and `tests`.
    pub(crate) root: (Option<u64>, Option<u64>),
    /// Per suite: `skipped`, `tests`.
    pub(crate) suites: BTreeMap<String, (Option<u64>, Option<u64>)>,
    /// The testcases with `<skipped>`, by (classname, name), with its message.
    pub(crate) skipped: BTreeMap<(String, String), String>,
    pub(crate) testcases: usize,
    /// The testcases with `gpu-test-permit.verdict` properties, with their values.
    pub(crate) verdicts: BTreeMap<(String, String), Vec<String>>,
    /// The text of each testcase's own `<system-err>`, entities resolved.
    pub(crate) system_err: BTreeMap<(String, String), String>,
    /// The first child element of each testcase that has children.
    pub(crate) first_child: BTreeMap<(String, String), String>,
    /// The testcases with `<failure>`.
    pub(crate) failed: BTreeSet<(String, String)>,
}

pub(crate) fn parse(xml: &str) -> Parsed {
    let mut reader = Reader::from_str(xml);
    let mut p = Parsed::default();
    let mut case: Option<(String, String)> = None;
    let attr = |e: &quick_xml::events::BytesStart<'_>, name: &str| {
        e.try_get_attribute(name).unwrap().map(|a| {
            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .unwrap()
                .into_owned()
        })
    };
    let num = |v: Option<String>| v.map(|v| v.parse::<u64>().unwrap());
    // The open elements' depth, and where the testcase and its <system-err> are.
    let mut depth = 0;
    let mut case_depth = 0;
    let mut err: Option<String> = None;
    loop {
        let event = reader.read_event().unwrap();
        if let (Event::Start(e) | Event::Empty(e), Some(key)) = (&event, &case)
            && depth == case_depth + 1
        {
            let name = e.name().as_ref().to_string();
            p.first_child.entry(key.clone()).or_insert(name.clone());
            match name.as_str() {
                "failure" => {
                    p.failed.insert(key.clone());
                }
                "system-err" => {
                    if matches!(event, Event::Start(_)) {
                        err = Some(String::new());
                    } else {
                        p.system_err.insert(key.clone(), String::new());
                    }
                }
                _ => {}
            }
        }
        match &event {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                "testsuites" => p.root = (num(attr(e, "skipped")), num(attr(e, "tests"))),
                "testsuite" => {
                    p.suites.insert(
                        attr(e, "name").unwrap(),
                        (num(attr(e, "skipped")), num(attr(e, "tests"))),
                    );
                }
                "testcase" => {
                    p.testcases += 1;
                    let key = (attr(e, "classname").unwrap(), attr(e, "name").unwrap());
                    if matches!(event, Event::Start(_)) {
                        case = Some(key);
                        case_depth = depth;
                    }
                }
                "skipped" => {
                    let key = case.clone().expect("<skipped> inside a testcase");
                    p.skipped.insert(key, attr(e, "message").unwrap());
                }
                "property" if attr(e, "name").as_deref() == Some("gpu-test-permit.verdict") => {
                    let key = case.clone().expect("<property> inside a testcase");
                    let value = attr(e, "value").unwrap();
                    p.verdicts.entry(key).or_default().push(value);
                }
                _ => {}
            },
            Event::Text(t) => {
                if let Some(text) = err.as_mut() {
                    text.push_str(t);
                }
            }
            Event::CData(t) => {
                if let Some(text) = err.as_mut() {
                    text.push_str(t);
                }
            }
            Event::GeneralRef(r) => {
                if let Some(text) = err.as_mut() {
                    match r.resolve_char_ref().unwrap() {
                        Some(c) => text.push(c),
                        None => {
                            text.push_str(quick_xml::escape::resolve_predefined_entity(r).unwrap())
                        }
                    }
                }
            }
            Event::End(e) if e.name().as_ref() == "testcase" => case = None,
            Event::End(e) if e.name().as_ref() == "system-err" => {
                if let (Some(text), Some(key)) = (err.take(), &case) {
                    p.system_err.insert(key.clone(), text);
                }
            }
            Event::Eof => return p,
            _ => {}
        }
        match event {
            Event::Start(_) => depth += 1,
            Event::End(_) => depth -= 1,
            _ => {}
        }
    }
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

fn junit(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut c = cli(dir, 2);
    c.arg("junit").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    Outcome {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The names in `dir`, but the run files.
fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("gpu0."))
        .collect()
}

fn key(binary: &str, test: &str) -> (String, String) {
    (binary.to_string(), test.to_string())
}

/// A slot directory with a report at `junit.xml`.
fn setup(xml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempdir();
    let path = dir.path().join("junit.xml");
    std::fs::write(&path, xml).unwrap();
    (dir, path)
}

const SUITES: &[(&str, &[&str])] = &[
    (
        "gpu-suite::matmul",
        &[
            "cuda_matmul",
            "wgpu_matmul",
            "cpu_reference",
            "flaky_upload",
        ],
    ),
    (
        "gpu-suite::graphs",
        &["cuda_graph_replays", "failing_cuda_capture"],
    ),
];

#[test]
fn junit_marks_the_runs_skips_in_place_and_the_counts_agree() {
    let (dir, path) = setup(&report(Some(RUN), SUITES));
    record_skips(
        dir.path(),
        RUN,
        &[
            ("gpu-suite::matmul", "cuda_matmul", "cuda"),
            ("gpu-suite::matmul", "flaky_upload", "wgpu"),
            ("gpu-suite::graphs", "cuda_graph_replays", "cuda"),
            ("gpu-suite::graphs", "failing_cuda_capture", "cuda"),
            ("gpu-suite::gone", "not_in_the_report", "cuda"),
        ],
    );
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "junit.xml: 3 tests marked skipped, 0 tests marked with a verdict (run {RUN})"
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(
            "note: 1 test that the records of run 0b21430d-56d4-438d-b4b6-b0d0e0ead151 say \
             skipped matches no testcase of"
        ) && out.stderr.contains("gpu-suite::gone not_in_the_report"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(
            "note: 1 test that the records say skipped failed in the report, and is left failed"
        ),
        "{}",
        out.stderr
    );

    let p = parse(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(p.testcases, 6);
    assert_eq!(p.root, (Some(3), Some(6)));
    assert_eq!(p.suites["gpu-suite::matmul"], (Some(2), Some(4)));
    assert_eq!(p.suites["gpu-suite::graphs"], (Some(1), Some(2)));
    assert_eq!(
        p.skipped.keys().cloned().collect::<Vec<_>>(),
        [
            key("gpu-suite::graphs", "cuda_graph_replays"),
            key("gpu-suite::matmul", "cuda_matmul"),
            key("gpu-suite::matmul", "flaky_upload"),
        ]
    );
    assert_eq!(
        p.skipped[&key("gpu-suite::matmul", "flaky_upload")],
        "backend=wgpu: wgpu not installed"
    );
    // Nothing but the report in the directory: no temporary file is left.
    assert_eq!(files(dir.path()), BTreeSet::from(["junit.xml".to_string()]));

    // Marked once, marked: a second rewrite adds nothing.
    let before = std::fs::read_to_string(&path).unwrap();
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("0 tests marked skipped"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("are already skipped in the report"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

const TEARDOWN_SAID: &str = "teardown fault: `gpu-suite` died by SIGSEGV after all 1 of its \
                             tests had their results <libcuda.so.1 & \"nvidia\">";
const CRASH_SAID: &str = "crash: `gpu-suite` died by SIGABRT while failing_cuda_capture ran";

#[test]
fn junit_marks_the_runs_verdicts_and_leaves_pass_and_failure_as_they_were() {
    let (dir, path) = setup(&report(Some(RUN), SUITES));
    let target = dir.path().join("marked.xml");
    record_skips(
        dir.path(),
        RUN,
        &[("gpu-suite::matmul", "cuda_matmul", "cuda")],
    );
    record_verdicts(
        dir.path(),
        RUN,
        &[
            VerdictLine {
                binary: "gpu-suite::matmul",
                test: "cpu_reference",
                fault: "teardown",
                ended: "SIGSEGV",
                failed: false,
                said: TEARDOWN_SAID,
            },
            VerdictLine {
                binary: "gpu-suite::graphs",
                test: "failing_cuda_capture",
                fault: "crash",
                ended: "SIGABRT",
                failed: true,
                said: CRASH_SAID,
            },
            VerdictLine {
                binary: "gpu-suite::gone",
                test: "not_in_the_report",
                fault: "hang",
                ended: "hung at exit",
                failed: false,
                said: "hung",
            },
        ],
    );
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "-o", target.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "junit.xml: 1 test marked skipped, 2 tests marked with a verdict (run {RUN}), \
             written to"
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "note: 1 test that the records of run {RUN} give a verdict matches no testcase of"
        )) && out.stderr.contains("gpu-suite::gone not_in_the_report"),
        "{}",
        out.stderr
    );

    let before = parse(&std::fs::read_to_string(&path).unwrap());
    let p = parse(&std::fs::read_to_string(&target).unwrap());
    let teardown = key("gpu-suite::matmul", "cpu_reference");
    let crash = key("gpu-suite::graphs", "failing_cuda_capture");
    assert_eq!(
        p.verdicts,
        BTreeMap::from([
            (crash.clone(), vec!["crash: SIGABRT".to_string()]),
            (teardown.clone(), vec!["teardown: SIGSEGV".to_string()]),
        ])
    );
    assert_eq!(
        p.system_err,
        BTreeMap::from([
            (crash.clone(), format!("gpu-test-permit: {CRASH_SAID}")),
            (
                teardown.clone(),
                format!("gpu-test-permit: {TEARDOWN_SAID}")
            ),
        ])
    );
    // Properties first in each marked testcase.
    assert_eq!(p.first_child[&teardown], "properties");
    assert_eq!(p.first_child[&crash], "properties");
    // What passed passed and what failed failed; the counts are the skips'.
    assert_eq!(p.failed, before.failed);
    assert_eq!(p.failed, BTreeSet::from([crash.clone()]));
    assert!(!p.skipped.contains_key(&teardown) && !p.skipped.contains_key(&crash));
    assert_eq!(p.root, (Some(1), Some(6)));
    assert_eq!(
        p.skipped.keys().cloned().collect::<Vec<_>>(),
        [key("gpu-suite::matmul", "cuda_matmul")]
    );
    assert_eq!(p.testcases, before.testcases);
    // The other testcases are as they were.
    assert_eq!(p.first_child.len(), before.first_child.len() + 2);
    for k in before.first_child.keys().filter(|k| **k != crash) {
        assert_eq!(p.first_child[k], before.first_child[k], "{k:?}");
    }
}

#[test]
fn junit_marks_a_run_with_verdicts_alone_once() {
    let xml = report(Some(RUN), SUITES);
    let (dir, path) = setup(&xml);
    record_verdicts(
        dir.path(),
        RUN,
        &[VerdictLine {
            binary: "gpu-suite::matmul",
            test: "flaky_upload",
            fault: "hang",
            ended: "hung at exit",
            failed: false,
            said: "hang at exit: `gpu-suite` still ran 10s after its last result",
        }],
    );
    let out = junit(dir.path(), &[path.to_str().unwrap(), "--fail-on-skip"], &[]);
    // A verdict is no skip: --fail-on-skip does not fail on it.
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("0 tests marked skipped, 1 test marked with a verdict"),
        "{}",
        out.stderr
    );
    let once = std::fs::read_to_string(&path).unwrap();
    let p = parse(&once);
    let flaky = key("gpu-suite::matmul", "flaky_upload");
    assert_eq!(p.verdicts[&flaky], ["hang: hung at exit"]);
    assert_eq!(
        p.system_err[&flaky],
        "gpu-test-permit: hang at exit: `gpu-suite` still ran 10s after its last result"
    );
    assert_eq!(p.root, (Some(0), Some(6)));
    assert_eq!(files(dir.path()), BTreeSet::from(["junit.xml".to_string()]));

    // Marked once, marked: a second rewrite adds nothing, and says so.
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("0 tests marked skipped, 0 tests marked with a verdict")
            && out.stderr.contains(
                "note: 1 test already has a verdict in the report: \
                 gpu-suite::matmul flaky_upload"
            ),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), once);
}

#[test]
fn junit_writes_to_another_file_with_o() {
    let xml = report(Some(RUN), SUITES);
    let (dir, path) = setup(&xml);
    record_skips(
        dir.path(),
        RUN,
        &[("gpu-suite::matmul", "wgpu_matmul", "wgpu")],
    );
    let target = dir.path().join("out").join("marked.xml");
    std::fs::create_dir(target.parent().unwrap()).unwrap();
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "-o", target.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 test marked skipped"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);
    let p = parse(&std::fs::read_to_string(&target).unwrap());
    assert_eq!(p.root.0, Some(1));
    assert_eq!(
        p.skipped.keys().cloned().collect::<Vec<_>>(),
        [key("gpu-suite::matmul", "wgpu_matmul")]
    );
    assert_eq!(
        files(&dir.path().join("out")),
        BTreeSet::from(["marked.xml".to_string()])
    );
}

#[test]
fn junit_fails_on_skip_when_asked_and_on_a_required_backend_by_default() {
    let xml = report(Some(RUN), SUITES);
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);
    let cases: &[Case<'_>] = &[
        (&[], &[], 0, ""),
        (
            &["--fail-on-skip"],
            &[],
            1,
            "1 test skipped (--fail-on-skip)",
        ),
        (
            &[],
            &[("GPU_TEST_PERMIT_REQUIRE", "cuda")],
            1,
            "1 test skipped for want of a backend that GPU_TEST_PERMIT_REQUIRE=cuda requires: \
             gpu-suite::matmul cuda_matmul (backend=cuda)",
        ),
        (&[], &[("GPU_TEST_PERMIT_REQUIRE", "wgpu")], 0, ""),
        (
            &[],
            &[("GPU_TEST_PERMIT_REQUIRE", "any")],
            1,
            "GPU_TEST_PERMIT_REQUIRE=any",
        ),
        (&[], &[("GPU_TEST_PERMIT_REQUIRE", "none")], 0, ""),
    ];
    for (args, env, code, says) in cases {
        let (dir, path) = setup(&xml);
        record_skips(
            dir.path(),
            RUN,
            &[("gpu-suite::matmul", "cuda_matmul", "cuda")],
        );
        let mut all = vec![path.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = junit(dir.path(), &all, env);
        assert_eq!(out.code, Some(*code), "{args:?} {env:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(says),
            "{args:?} {env:?}: {}",
            out.stderr
        );
        // Failing or not, the report is rewritten.
        assert_eq!(
            parse(&std::fs::read_to_string(&path).unwrap()).root.0,
            Some(1)
        );
    }
}

#[test]
fn junit_leaves_a_report_without_records_of_its_run_unchanged() {
    let xml = report(Some(RUN), SUITES);
    let (dir, path) = setup(&xml);
    // Records of another run only: the report's run has none.
    record_skips(
        dir.path(),
        OTHER_RUN,
        &[("gpu-suite::matmul", "cuda_matmul", "cuda")],
    );
    let out = junit(dir.path(), &[path.to_str().unwrap(), "--fail-on-skip"], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("no records of run {RUN} (the report's uuid) in"))
            && out.stderr.contains("left unchanged"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);

    // --run-id naming another run than the report's is refused.
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "--run-id", OTHER_RUN],
        &[],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("is the report of run"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);

    // A run that recorded no skips.
    std::fs::write(dir.path().join(format!("gpu0.run.{RUN}")), "").unwrap();
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("recorded no skips and no verdicts; left unchanged"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);

    // With -o, the output is a copy.
    let copy = dir.path().join("copy.xml");
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "-o", copy.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("copied unchanged to"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), xml);
}

#[test]
fn junit_without_a_uuid_takes_the_run_id_or_the_last_run() {
    let xml = report(None, SUITES);
    let (dir, path) = setup(&xml);
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("no run is recorded in"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);

    record_skips(
        dir.path(),
        OTHER_RUN,
        &[("gpu-suite::graphs", "cuda_graph_replays", "cuda")],
    );
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "--run-id", "no-such-run"],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("no records of run no-such-run (--run-id)"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), xml);

    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("names no run (no uuid on <testsuites>): taking the last run recorded in")
            && out.stderr.contains(&format!(
                "1 test marked skipped, 0 tests marked with a verdict (run {OTHER_RUN})"
            )),
        "{}",
        out.stderr
    );
    assert_eq!(
        parse(&std::fs::read_to_string(&path).unwrap()).root.0,
        Some(1)
    );

    std::fs::write(&path, &xml).unwrap();
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "--run-id", OTHER_RUN],
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 test marked skipped"),
        "{}",
        out.stderr
    );
}

#[test]
fn junit_refuses_bad_reports_and_leaves_them_and_the_output_untouched() {
    let good = report(Some(RUN), SUITES);
    let cut = &good[..good.find("<failure").unwrap() + 3];
    let cases: &[(&str, &str, String)] = &[
        (
            "not XML",
            "not XML: text before the root element",
            "{\"a\": 1}\n".into(),
        ),
        (
            "empty",
            "not a JUnit report: no root element",
            String::new(),
        ),
        (
            "html",
            "the root element is <html>",
            "<html><body/></html>".into(),
        ),
        (
            "truncated",
            "truncated: the file ends inside a tag",
            cut.into(),
        ),
        (
            "truncated between tags",
            "truncated: the file ends inside <testsuite>",
            good[..good.find("    </testsuite>").unwrap()].into(),
        ),
        (
            "mismatched",
            "not XML: ill-formed document",
            good.replace("    </testsuite>\n</testsuites>", "</testsuites>"),
        ),
        (
            "bad count",
            "<testsuite> has tests=\"four\", which is not a whole number",
            good.replace("tests=\"4\"", "tests=\"four\""),
        ),
    ];
    for (what, says, xml) in cases {
        let (dir, path) = setup(xml);
        record_skips(
            dir.path(),
            RUN,
            &[("gpu-suite::matmul", "cuda_matmul", "cuda")],
        );
        let target = dir.path().join("out.xml");
        std::fs::write(&target, "previous").unwrap();
        for args in [
            vec![path.to_str().unwrap()],
            vec![path.to_str().unwrap(), "-o", target.to_str().unwrap()],
        ] {
            let out = junit(dir.path(), &args, &[]);
            assert_eq!(out.code, Some(2), "{what}: {}", out.stderr);
            assert!(
                out.stderr.contains(says) && out.stderr.contains("junit.xml"),
                "{what}: {}",
                out.stderr
            );
            if !xml.is_empty() {
                assert!(out.stderr.contains(": line "), "{what}: {}", out.stderr);
            }
            assert_eq!(std::fs::read_to_string(&path).unwrap(), *xml, "{what}");
            assert_eq!(
                std::fs::read_to_string(&target).unwrap(),
                "previous",
                "{what}"
            );
            assert_eq!(
                files(dir.path()),
                BTreeSet::from(["junit.xml".to_string(), "out.xml".to_string()]),
                "{what}"
            );
        }
    }

    // A missing report, and an output that cannot be written.
    let (dir, path) = setup(&good);
    let out = junit(dir.path(), &["no-such.xml"], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("no-such.xml: cannot read"),
        "{}",
        out.stderr
    );
    record_skips(
        dir.path(),
        RUN,
        &[("gpu-suite::matmul", "cuda_matmul", "cuda")],
    );
    let nowhere = dir.path().join("missing-dir").join("out.xml");
    let out = junit(
        dir.path(),
        &[path.to_str().unwrap(), "-o", nowhere.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("cannot create"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), good);
}

#[test]
fn junit_streams_a_huge_report() {
    // 40,000 testcases with output, about 12 MB; every tenth test skipped.
    let names: Vec<String> = (0..40_000).map(|i| format!("gpu_test_{i:05}")).collect();
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nextest-run\" \
         tests=\"40000\" skipped=\"0\" failures=\"0\" errors=\"0\" uuid=\"{RUN}\">\n"
    );
    for chunk in names.chunks(10_000).enumerate() {
        let (s, chunk) = chunk;
        writeln!(
            xml,
            "    <testsuite name=\"bin{s}\" tests=\"10000\" skipped=\"0\">"
        )
        .unwrap();
        for n in chunk {
            writeln!(
                xml,
                "        <testcase name=\"{n}\" classname=\"bin{s}\" time=\"0.001\">\n            \
                 <system-out>{}</system-out>\n        </testcase>",
                "output line &amp; more; ".repeat(8)
            )
            .unwrap();
        }
        xml.push_str("    </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    assert!(xml.len() > 10 << 20, "{}", xml.len());
    let (dir, path) = setup(&xml);
    let skips: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 10 == 0)
        .map(|(i, n)| (format!("bin{}", i / 10_000), n.clone()))
        .collect();
    let skips_ref: Vec<(&str, &str, &str)> = skips
        .iter()
        .map(|(b, t)| (b.as_str(), t.as_str(), "cuda"))
        .collect();
    record_skips(dir.path(), RUN, &skips_ref);

    // Cut in the middle: refused, left as it was.
    let cut = &xml[..xml.len() / 2];
    std::fs::write(&path, cut).unwrap();
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("truncated"), "{}", out.stderr);
    assert_eq!(std::fs::read(&path).unwrap(), cut.as_bytes());

    std::fs::write(&path, &xml).unwrap();
    let out = junit(dir.path(), &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("4000 tests marked skipped"),
        "{}",
        out.stderr
    );
    let p = parse(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(p.testcases, 40_000);
    assert_eq!(p.root, (Some(4000), Some(40_000)));
    for s in 0..4 {
        assert_eq!(p.suites[&format!("bin{s}")], (Some(1000), Some(10_000)));
    }
    assert_eq!(p.skipped.len(), 4000);
    assert_eq!(files(dir.path()), BTreeSet::from(["junit.xml".to_string()]));
}
