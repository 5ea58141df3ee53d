//! `find-gpu-tests [-- NEXTEST-ARGS...]`: which tests of a suite need a GPU, found by running
//! them once with every GPU driver hidden, and the nextest filter that names exactly those.
//!
//! A filter by name (`test(/gpu/)`) is a guess: it misses every GPU test whose name does not
//! say so. Here a test is a GPU test when, with no driver to be found, it fails or it prints
//! this crate's skip line (`gpu-test-permit: SKIP ...`, see `decision::skip_line`), or the text
//! given with `--skip-mark` (a suite's own "no GPU; skipping"; the option may be repeated). A test that returns early
//! without a word looks like a CPU test: nothing outside it can tell.
//!
//! 1. `cargo nextest list --message-format json NEXTEST-ARGS`: every test, by test binary.
//! 2. `cargo nextest run NEXTEST-ARGS` under a profile of this command's own (a nextest tool
//!    config file in a private directory: no fail-fast, no retries, a JUnit report that keeps
//!    every test's output), in an environment that hides the drivers ([`hide_gpu_drivers`]).
//! 3. The report's failures and skip lines decide; [`filterset`] names the GPU tests, one
//!    test binary per line, the whole binary where all its tests need the GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use gpu_test_permit::config::{
    DIR_VAR, INHERITED_VAR, REQUIRE_VAR, SKIP_LOG_VAR, STATE_VAR, TRACE_VAR,
};
use gpu_test_permit::nextest::{GROUP, TOOL};

use crate::args::Args;

/// The nextest profile of the run, defined by the tool config file written for it. It
/// inherits the suite's `default` profile: its overrides, test groups and timeouts apply.
const PROFILE: &str = "gpu-test-permit-find";

/// The start of the line the crate prints where a test skips (`decision::skip_line`).
const SKIP_MARK: &str = "gpu-test-permit: SKIP ";

pub(crate) fn main(args: &Args) -> Result<ExitCode, String> {
    let nextest_args = args.operands();
    let own_marks: Vec<String> = args
        .values("--skip-mark")
        .iter()
        .map(|m| m.to_string_lossy().into_owned())
        .collect();
    if own_marks.iter().any(String::is_empty) {
        return Err(args.error("--skip-mark needs a text to look for"));
    }
    let marks: Vec<&str> = std::iter::once(SKIP_MARK)
        .chain(own_marks.iter().map(String::as_str))
        .collect();
    let work = WorkDir::new()?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    let mut list = Command::new(&cargo);
    list.args(["nextest", "list", "--message-format", "json"])
        .args(nextest_args);
    hide_gpu_drivers(&mut list, &work.0);
    let out = list
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run `cargo nextest list`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "find-gpu-tests: `cargo nextest list` failed ({}); is cargo-nextest installed?",
            out.status
        ));
    }
    let listed = parse_listing(&String::from_utf8_lossy(&out.stdout))?;
    let to_run = listed.values().flatten().filter(|t| t.runs).count();

    let mut cases = Vec::new();
    if to_run > 0 {
        let junit = work.0.join("junit.xml");
        let tool_config = work.0.join("find.toml");
        std::fs::write(&tool_config, profile_config(&junit))
            .map_err(|e| format!("cannot write {}: {e}", tool_config.display()))?;
        let mut tool_arg = OsString::from(format!("{TOOL}:"));
        tool_arg.push(&tool_config);
        let mut run = Command::new(&cargo);
        run.args(["nextest", "run", "--profile", PROFILE, "--tool-config-file"])
            .arg(tool_arg)
            .args(["--no-fail-fast", "--retries", "0"])
            .args(["--success-output", "never", "--failure-output", "never"])
            .args(["--status-level", "slow", "--final-status-level", "none"])
            .args(nextest_args);
        hide_gpu_drivers(&mut run, &work.0);
        eprintln!("find-gpu-tests: running {to_run} tests with every GPU driver hidden");
        // Standard output carries the filter: nextest's goes to standard error.
        let status = run
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::io::stderr()))
            .status()
            .map_err(|e| format!("cannot run `cargo nextest run`: {e}"))?;
        let report = std::fs::read_to_string(&junit).map_err(|e| {
            format!(
                "find-gpu-tests: `cargo nextest run` ended ({status}) without its report {}: {e}",
                junit.display()
            )
        })?;
        cases = parse_junit(&report, &marks);
    }

    let found = classify(&listed, &cases);
    for (binary, name) in &found.failed {
        eprintln!("find-gpu-tests: failed with no GPU driver: {binary} {name}");
    }
    if found.not_run > 0 {
        eprintln!(
            "find-gpu-tests: {} listed tests did not run (ignored or filtered out) and are in \
             no group; `-- --run-ignored all` runs the ignored ones too",
            found.not_run
        );
    }
    print!("{}", override_block(&found, &listed));
    Ok(ExitCode::SUCCESS)
}

/// Hides every GPU driver from `cmd` and what it starts, and keeps its permits apart from the
/// host's (`work` is a private directory):
///
/// - Vulkan: the loader reads its driver list from `VK_DRIVER_FILES` (`VK_ICD_FILENAMES`
///   before loader 1.3.207) instead of the system's; a file that does not exist lists none.
/// - GL: glvnd's EGL reads its vendor list from `__EGL_VENDOR_LIBRARY_FILENAMES`; no display
///   (`DISPLAY`, `WAYLAND_DISPLAY`), which also keeps Mesa from waiting on an X server.
/// - wgpu: `WGPU_BACKEND=vulkan`, so an instance made from the environment tries only the
///   hidden Vulkan (not Metal or DX12, which no variable hides).
/// - CUDA and ROCm: `CUDA_VISIBLE_DEVICES=-1` (and the HIP and ROCr ones): the driver loads,
///   and has no device to show.
/// - This crate: `GPU_TEST_PERMIT_REQUIRE=none`, so its tests skip, with their line, instead
///   of failing; slots (and so the run's records) in `work`; no trace, skip log, state
///   directory or inherited permit of the caller's.
pub(crate) fn hide_gpu_drivers(cmd: &mut Command, work: &Path) {
    let none = work.join("no-such-driver.json");
    for var in [
        "VK_DRIVER_FILES",
        "VK_ICD_FILENAMES",
        "__EGL_VENDOR_LIBRARY_FILENAMES",
    ] {
        cmd.env(var, &none);
    }
    for var in [
        "VK_ADD_DRIVER_FILES",
        "__EGL_VENDOR_LIBRARY_DIRS",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        TRACE_VAR,
        SKIP_LOG_VAR,
        STATE_VAR,
        INHERITED_VAR,
    ] {
        cmd.env_remove(var);
    }
    for var in [
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    ] {
        cmd.env(var, "-1");
    }
    cmd.env("WGPU_BACKEND", "vulkan")
        .env(REQUIRE_VAR, "none")
        .env(DIR_VAR, work.join("slots"));
}

/// The tool config file of the run: the [`PROFILE`], with a JUnit report at `junit` that
/// keeps the output of passing tests too (where the skip lines are).
fn profile_config(junit: &Path) -> String {
    format!(
        "[profile.{PROFILE}]
fail-fast = false
retries = 0

[profile.{PROFILE}.junit]
path = {}
store-success-output = true
store-failure-output = true
",
        toml_string(&junit.to_string_lossy())
    )
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A private directory for the run's files, removed when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> Result<WorkDir, String> {
        let base = std::env::temp_dir();
        let mut last = None;
        for attempt in 0..16 {
            let dir = base.join(format!(
                "gpu-test-permit-find-{}-{attempt}",
                std::process::id()
            ));
            #[cfg_attr(not(unix), allow(unused_mut))]
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(WorkDir(dir)),
                Err(e) => last = Some(e),
            }
        }
        Err(format!(
            "cannot create a directory in {}: {}",
            base.display(),
            last.map_or_else(String::new, |e| e.to_string())
        ))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A test of the listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) name: String,
    /// Whether `cargo nextest run` with the same arguments runs it (it matches the filters
    /// and is not ignored, or ignored ones run too).
    pub(crate) runs: bool,
}

/// The tests of `cargo nextest list --message-format json`, by binary id.
pub(crate) fn parse_listing(json: &str) -> Result<BTreeMap<String, Vec<Listed>>, String> {
    let bad = |what: &str| format!("find-gpu-tests: the listing of cargo nextest {what}");
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(&format!("is not JSON: {e}")))?;
    let suites = value
        .get("rust-suites")
        .and_then(|s| s.as_object())
        .ok_or_else(|| bad("has no `rust-suites`"))?;
    let mut out = BTreeMap::new();
    for (key, suite) in suites {
        let id = suite
            .get("binary-id")
            .and_then(|v| v.as_str())
            .unwrap_or(key)
            .to_string();
        let mut tests = Vec::new();
        if let Some(cases) = suite.get("testcases").and_then(|c| c.as_object()) {
            for (name, case) in cases {
                let status = case
                    .get("filter-match")
                    .and_then(|m| m.get("status"))
                    .and_then(|s| s.as_str());
                tests.push(Listed {
                    name: name.clone(),
                    runs: status == Some("matches"),
                });
            }
        }
        out.insert(id, tests);
    }
    Ok(out)
}

/// One test case of a JUnit report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Case {
    /// The binary id (nextest's `classname`).
    pub(crate) binary: String,
    pub(crate) name: String,
    pub(crate) failed: bool,
    /// Its output has the crate's skip line, or the suite's own mark.
    pub(crate) skipped: bool,
}

/// The test cases of nextest's JUnit report: `<testcase name=".." classname="..">`, failed
/// where a `<failure>` or `<error>` is inside, skipped where the output inside has one of
/// `marks` (the crate's skip line, a suite's own).
pub(crate) fn parse_junit(xml: &str, marks: &[&str]) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<testcase ") {
        rest = &rest[at..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let (body, next) = if tag.ends_with('/') {
            ("", &rest[tag_end + 1..])
        } else {
            match rest.find("</testcase>") {
                Some(end) => (&rest[tag_end + 1..end], &rest[end..]),
                None => (&rest[tag_end + 1..], ""),
            }
        };
        if let (Some(name), Some(binary)) = (attribute(tag, "name"), attribute(tag, "classname")) {
            cases.push(Case {
                binary,
                name,
                failed: body.contains("<failure") || body.contains("<error"),
                skipped: {
                    let text = unescape_xml(body);
                    marks.iter().any(|m| text.contains(m))
                },
            });
        }
        rest = next;
    }
    cases
}

/// The value of attribute `name` in a start tag, unescaped.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(unescape_xml(&tag[start..start + len]))
}

fn unescape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest.find(';') else { break };
        let entity = &rest[1..semi];
        let c = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// What the run showed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// The GPU tests, by binary id.
    pub(crate) gpu: BTreeMap<String, BTreeSet<String>>,
    /// Of those, the ones that failed (binary id, name); the others printed the skip line.
    pub(crate) failed: Vec<(String, String)>,
    /// Tests that ran and are not GPU tests.
    pub(crate) cpu: usize,
    /// Listed tests that did not run.
    pub(crate) not_run: usize,
}

pub(crate) fn classify(listed: &BTreeMap<String, Vec<Listed>>, cases: &[Case]) -> Found {
    let mut found = Found::default();
    let mut ran = BTreeSet::new();
    for c in cases {
        ran.insert((c.binary.as_str(), c.name.as_str()));
        if c.failed || c.skipped {
            found
                .gpu
                .entry(c.binary.clone())
                .or_default()
                .insert(c.name.clone());
            if c.failed {
                found.failed.push((c.binary.clone(), c.name.clone()));
            }
        } else {
            found.cpu += 1;
        }
    }
    found.not_run = listed
        .iter()
        .flat_map(|(b, tests)| tests.iter().map(move |t| (b.as_str(), t.name.as_str())))
        .filter(|k| !ran.contains(k))
        .count();
    found
}

/// `s` for a filterset's name matcher: `\\` for a backslash, and the characters that would
/// end the matcher (`(`, `)`, `,`) as `\u{..}` escapes.
fn filter_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '(' | ')' | ',' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The nextest filterset of the GPU tests, one binary per line (joined by `|`):
/// `binary_id(=ID)` where every test the binary has is a GPU test, else
/// `(binary_id(=ID) & (test(=a) | test(=b)))`. `none()` where there are none.
pub(crate) fn filterset(found: &Found, listed: &BTreeMap<String, Vec<Listed>>) -> String {
    let mut parts = Vec::new();
    for (binary, gpu) in &found.gpu {
        let id = format!("binary_id(={})", filter_text(binary));
        let all = listed
            .get(binary)
            .is_some_and(|tests| tests.iter().all(|t| gpu.contains(&t.name)));
        if all {
            parts.push(id);
            continue;
        }
        let tests: Vec<String> = gpu
            .iter()
            .map(|t| format!("test(={})", filter_text(t)))
            .collect();
        let inline = format!("({id} & ({}))", tests.join(" | "));
        if inline.len() <= 96 {
            parts.push(inline);
        } else {
            parts.push(format!("({id} & (\n    {}\n))", tests.join("\n  | ")));
        }
    }
    if parts.is_empty() {
        "none()".to_string()
    } else {
        parts.join("\n| ")
    }
}

/// The override that puts the GPU tests in the test group, with what was found.
fn override_block(found: &Found, listed: &BTreeMap<String, Vec<Listed>>) -> String {
    let gpu: usize = found.gpu.values().map(BTreeSet::len).sum();
    let ran = gpu + found.cpu;
    let failed = found.failed.len();
    format!(
        "# The GPU tests that `gpu-test-permit find-gpu-tests` found: {gpu} of the {ran} tests \
         run\n\
         # with every GPU driver hidden failed ({failed}) or printed the crate's skip line \
         ({}).\n\
         # For the tool config file that `gpu-test-permit nextest-snippet` prints, in place \
         of its\n\
         # override by name (with --wrapper, the same filter goes in the scripts' filter).\n\
         [[profile.default.overrides]]\n\
         filter = '''\n{}\n'''\n\
         test-group = '{GROUP}'\n",
        gpu - failed,
        filterset(found, listed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(tests: &[(&str, &[&str])]) -> BTreeMap<String, Vec<Listed>> {
        tests
            .iter()
            .map(|(b, names)| {
                let tests = names
                    .iter()
                    .map(|n| Listed {
                        name: n.to_string(),
                        runs: true,
                    })
                    .collect();
                (b.to_string(), tests)
            })
            .collect()
    }

    fn case(binary: &str, name: &str, failed: bool, skipped: bool) -> Case {
        Case {
            binary: binary.into(),
            name: name.into(),
            failed,
            skipped,
        }
    }

    #[test]
    fn the_skip_mark_is_the_start_of_the_crates_skip_line() {
        let line = gpu_test_permit::decision::skip_line(
            "t",
            gpu_test_permit::probe::Backend::Wgpu,
            "no devices",
        );
        assert!(line.starts_with(SKIP_MARK), "{line}");
    }

    #[test]
    fn the_listing_gives_each_binarys_tests_and_whether_they_run() {
        let json = r#"{"rust-build-meta": {}, "test-count": 3, "rust-suites": {
            "s::gpu": {"binary-id": "s::gpu", "testcases": {
                "a": {"kind": "test", "ignored": false, "filter-match": {"status": "matches"}},
                "b": {"kind": "test", "ignored": true,
                      "filter-match": {"status": "mismatch", "reason": "ignored"}}}},
            "s": {"binary-id": "s", "testcases": {}}}}"#;
        let got = parse_listing(json).unwrap();
        assert_eq!(got["s"], []);
        assert_eq!(
            got["s::gpu"],
            [
                Listed {
                    name: "a".into(),
                    runs: true
                },
                Listed {
                    name: "b".into(),
                    runs: false
                }
            ]
        );
        assert!(parse_listing("[]").unwrap_err().contains("rust-suites"));
    }

    #[test]
    fn junit_cases_fail_or_skip_by_what_is_inside_them() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4">
    <testsuite name="s::t" tests="4">
        <testcase name="skips" classname="s::t" time="0.01">
            <system-out>running 1 test</system-out>
            <system-err>gpu-test-permit: SKIP skips backend=wgpu: wgpu no devices
</system-err>
        </testcase>
        <testcase name="fails" classname="s::t" time="0.01">
            <failure message="test failed with exit code 101" type="test failure">x</failure>
        </testcase>
        <testcase name="m::a&lt;&amp;&gt;&#233;" classname="s::t" time="0.01"/>
        <testcase name="passes" classname="s::t" time="0.01">
            <system-out>ok</system-out>
        </testcase>
    </testsuite>
</testsuites>"#;
        assert_eq!(
            parse_junit(xml, &[SKIP_MARK]),
            [
                case("s::t", "skips", false, true),
                case("s::t", "fails", true, false),
                case("s::t", "m::a<&>\u{e9}", false, false),
                case("s::t", "passes", false, false),
            ]
        );
        // A suite's own mark, found in the output as it was printed (unescaped).
        let own = xml.replace(
            "<system-out>ok",
            "<system-out>no GPU &amp; no skip line; skipping",
        );
        let cases = parse_junit(&own, &[SKIP_MARK, "no GPU & no skip line; skipping"]);
        assert!(cases[3].skipped, "{cases:?}");
    }

    #[test]
    fn the_filter_names_whole_binaries_where_it_can() {
        let listed = listed(&[
            ("s::all", &["a", "b"]),
            ("s::mixed", &["boids", "cpu", "water"]),
            ("s::cpu", &["c"]),
        ]);
        let found = classify(
            &listed,
            &[
                case("s::all", "a", false, true),
                case("s::all", "b", true, false),
                case("s::mixed", "boids", false, true),
                case("s::mixed", "cpu", false, false),
                case("s::mixed", "water", true, false),
                case("s::cpu", "c", false, false),
            ],
        );
        assert_eq!((found.cpu, found.not_run, found.failed.len()), (2, 0, 2));
        assert_eq!(
            filterset(&found, &listed),
            "binary_id(=s::all)\n| (binary_id(=s::mixed) & (test(=boids) | test(=water)))"
        );
    }

    #[test]
    fn a_binary_with_tests_that_did_not_run_is_not_named_whole() {
        let listed = listed(&[("s::t", &["a", "ignored"])]);
        let found = classify(&listed, &[case("s::t", "a", true, false)]);
        assert_eq!(found.not_run, 1);
        assert_eq!(
            filterset(&found, &listed),
            "(binary_id(=s::t) & (test(=a)))"
        );
    }

    #[test]
    fn no_gpu_tests_is_the_empty_filter_and_odd_names_are_escaped() {
        let listed = listed(&[("s::t", &["a"])]);
        assert_eq!(filterset(&classify(&listed, &[]), &listed), "none()");
        let listed = self::listed(&[("s::t", &["f(1, 2)", "x"])]);
        let found = classify(&listed, &[case("s::t", "f(1, 2)", true, false)]);
        assert_eq!(
            filterset(&found, &listed),
            "(binary_id(=s::t) & (test(=f\\u{28}1\\u{2c} 2\\u{29})))"
        );
    }

    #[test]
    fn a_long_group_puts_one_test_a_line() {
        let names: Vec<String> = (0..8).map(|i| format!("module::test_{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut all = refs.clone();
        all.push("cpu");
        let listed = listed(&[("s::t", &all)]);
        let cases: Vec<Case> = refs.iter().map(|n| case("s::t", n, true, false)).collect();
        let text = filterset(&classify(&listed, &cases), &listed);
        assert!(
            text.starts_with(
                "(binary_id(=s::t) & (\n    test(=module::test_0)\n  | test(=module::test_1)\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("\n  | test(=module::test_7)\n))"), "{text}");
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"C:\a "b""#), r#""C:\\a \"b\"""#);
    }
}
