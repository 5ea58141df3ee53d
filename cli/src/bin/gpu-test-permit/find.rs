//! `find-gpu-tests [--skip-mark TEXT ...] [--by loads|hidden] [-- NEXTEST-ARGS...]`: which
//! tests of a suite need a GPU, and the nextest filter that names exactly those.
//!
//! A filter by name (`test(/gpu/)`) is a guess: it misses every GPU test whose name does not
//! say so. Here a test is a GPU test by what it does, found two ways (both by default):
//!
//! - **loads** — with the drivers present, every test runs under `gpu-test-permit run
//!   --watch` (cargo's target runner for the run), which holds a permit while the test runs
//!   and watches which libraries its process maps (glibc's loader log, see
//!   `gpu_test_permit::__private::drivers`): a test whose process maps a GPU driver (libcuda, a Vulkan
//!   driver, libnvidia-*) is a GPU test, and so is one that skips with this crate's skip line
//!   (no device of its backend). This finds the tests that fall back to the CPU when no GPU
//!   is found, which hiding the drivers cannot. Linux with glibc.
//! - **hidden** — with every GPU driver hidden ([`hide_gpu_drivers`]), a test that fails, or
//!   prints the crate's skip line (`gpu-test-permit: SKIP ...`, see `decision::skip_line`),
//!   or a text given with `--skip-mark` (a suite's own "no GPU; skipping"), is a GPU test. A
//!   test that returns early without a word, or falls back to the CPU, looks like a CPU test
//!   this way.
//!
//! 1. `cargo nextest list --message-format json NEXTEST-ARGS`: every test, by test binary
//!    (options only `cargo nextest run` takes, such as `-j`, are left out of the listing).
//! 2. `cargo nextest run NEXTEST-ARGS` once per way, under a profile of this command's own (a
//!    nextest tool config file in a private directory: no fail-fast, no retries, a JUnit
//!    report that keeps every test's output). Its tests take their permits in the caller's
//!    slot directory, within the host's cap beside every other GPU user there (a busy host
//!    makes the run wait, never over-subscribes the GPU); what the run records goes to the
//!    private directory, apart from the host's runs.
//! 3. Each test found is named on standard error with why; [`filterset`] names them all, one
//!    test binary per line, the whole binary where all its tests need the GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use gpu_test_permit::__private::drivers::library_name;
use gpu_test_permit::__private::nextest::{GROUP, TOOL};
use gpu_test_permit::config::{Config, RECORDS_VAR, REQUIRE_VAR, SKIP_LOG_VAR, TRACE_VAR};

use crate::args::Args;
use crate::private_dir::PrivateDir;

/// The nextest profile of the run, defined by the tool config file written for it. It
/// inherits the suite's `default` profile: its overrides, test groups and timeouts apply.
const PROFILE: &str = "gpu-test-permit-find";

/// The start of the line the crate prints where a test skips (`decision::skip_line`).
const SKIP_MARK: &str = "gpu-test-permit: SKIP ";

/// Options of `cargo nextest run` that `cargo nextest list` rejects, and whether each takes a
/// value (as the next argument, or after `=`).
const RUN_ONLY: &[(&str, bool)] = &[
    ("-j", true),
    ("--test-threads", true),
    ("-R", true),
    ("--rerun", true),
    ("--retries", true),
    ("--fail-fast", false),
    ("--no-fail-fast", false),
    ("--max-fail", true),
    ("--no-capture", false),
    ("--nocapture", false),
    ("--no-run", false),
    ("--no-tests", true),
    ("--success-output", true),
    ("--failure-output", true),
    ("--status-level", true),
    ("--final-status-level", true),
    ("--flaky-result", true),
    ("--hide-progress-bar", false),
    ("--max-progress-running", true),
    ("--message-format", true),
    ("--message-format-version", true),
    ("--no-input-handler", false),
    ("--no-output-indent", false),
    ("--stress-count", true),
    ("--stress-duration", true),
    ("--debugger", true),
    ("--tracer", true),
];

/// `args` without the options of [`RUN_ONLY`] (and their values), up to a `--` after which
/// the arguments are the test binaries' own.
pub(crate) fn listing_args(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a == "--" {
            out.push(a.clone());
            out.extend(rest.cloned());
            break;
        }
        let text = a.to_string_lossy();
        let (name, inline) = match text.split_once('=') {
            Some((n, _)) if n.starts_with("--") => (n, true),
            _ => (&*text, false),
        };
        // `-j4` as well as `-j 4`.
        let short_joined = RUN_ONLY
            .iter()
            .any(|(o, v)| *v && o.len() == 2 && name.len() > 2 && name.starts_with(o));
        match RUN_ONLY.iter().find(|(o, _)| *o == name) {
            Some((_, true)) if !inline => {
                rest.next();
            }
            Some(_) => {}
            None if short_joined => {}
            None => out.push(a.clone()),
        }
    }
    out
}

/// How the tests are found (`--by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ways {
    loads: bool,
    hidden: bool,
}

/// Why a test is a GPU test.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Why {
    /// Its process mapped these GPU drivers (file names).
    Loaded(Vec<String>),
    /// It printed the crate's skip line with the drivers present (its backend had no device).
    SkippedPresent,
    /// It failed with every driver hidden.
    FailedHidden,
    /// It printed the crate's skip line with every driver hidden.
    SkippedHidden,
    /// It printed one of the suite's own `--skip-mark` texts with every driver hidden.
    MarkedHidden,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Loaded(d) => write!(f, "loaded {}", d.join(", ")),
            Why::SkippedPresent => f.write_str("skipped with the crate's skip line"),
            Why::FailedHidden => f.write_str("failed with no GPU driver"),
            Why::SkippedHidden => f.write_str("printed the crate's skip line with no GPU driver"),
            Why::MarkedHidden => f.write_str("printed a --skip-mark text with no GPU driver"),
        }
    }
}

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
    let ways = match args.value("--by").map(OsStr::to_string_lossy).as_deref() {
        None => Ways {
            loads: true,
            hidden: true,
        },
        Some("loads") => Ways {
            loads: true,
            hidden: false,
        },
        Some("hidden") => Ways {
            loads: false,
            hidden: true,
        },
        Some(other) => {
            return Err(args.error(format_args!(
                "--by takes `loads` or `hidden`, not `{other}`"
            )));
        }
    };
    // The tests take the host's permits: a slot directory that cannot be used is said once
    // here, before the suite is built and run only to have every permit refused.
    Config::global().slot_dir_path()?;
    let work = PrivateDir::new("find")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    let mut list = Command::new(&cargo);
    list.args(["nextest", "list", "--message-format", "json"])
        .args(listing_args(nextest_args));
    hide_gpu_drivers(&mut list, work.path());
    let out = list.stdin(Stdio::null()).output().map_err(|e| {
        format!("cannot run `cargo nextest list` (is cargo-nextest installed?): {e}")
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let missing = err.contains("no such command") || err.contains("no such subcommand");
        return Err(format!(
            "find-gpu-tests: `cargo nextest list` failed ({}){}:
{}",
            out.status,
            if missing {
                "; install cargo-nextest (cargo install cargo-nextest --locked)"
            } else {
                ""
            },
            tail(&err, 4000)
        ));
    }
    let listed = parse_listing(&String::from_utf8_lossy(&out.stdout))?;
    let to_run = listed.values().flatten().filter(|t| t.runs).count();

    let mut why: BTreeMap<(String, String), Vec<Why>> = BTreeMap::new();
    let mut ran: BTreeSet<(String, String)> = BTreeSet::new();
    if to_run > 0 && ways.loads {
        eprintln!(
            "find-gpu-tests: running {to_run} tests with the GPU drivers present, each under \
             `gpu-test-permit run --watch`"
        );
        let dir = work.path().join("present");
        let (cases, records) = present_run(&cargo, nextest_args, &dir)?;
        for c in &cases {
            ran.insert((c.binary.clone(), c.name.clone()));
            if c.marks.crate_line {
                add(&mut why, c, Why::SkippedPresent);
            }
        }
        for (key, drivers) in records {
            why.entry(key).or_default().push(Why::Loaded(drivers));
        }
    }
    if to_run > 0 && ways.hidden {
        eprintln!("find-gpu-tests: running {to_run} tests with every GPU driver hidden");
        let dir = work.path().join("hidden");
        let cases = hidden_run(&cargo, nextest_args, &dir, &own_marks)?;
        hidden_reasons(&cases, &mut why, &mut ran);
    }

    let found = classify(&listed, &why, &ran);
    for ((binary, name), reasons) in &why {
        let reasons: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        eprintln!(
            "find-gpu-tests: GPU test {binary} {name}: {}",
            reasons.join("; ")
        );
    }
    if found.not_run > 0 {
        eprintln!(
            "find-gpu-tests: {} listed tests did not run (ignored or filtered out) and are in \
             no group; `-- --run-ignored all` runs the ignored ones too",
            found.not_run
        );
    }
    print!("{}", override_block(&found, &listed, &why));
    Ok(ExitCode::SUCCESS)
}

/// What the run with every driver hidden says of its `cases`: those that failed or printed a
/// skip line are GPU tests.
fn hidden_reasons(
    cases: &[Case],
    why: &mut BTreeMap<(String, String), Vec<Why>>,
    ran: &mut BTreeSet<(String, String)>,
) {
    for c in cases {
        ran.insert((c.binary.clone(), c.name.clone()));
        if c.failed {
            add(why, c, Why::FailedHidden);
        }
        if c.marks.crate_line {
            add(why, c, Why::SkippedHidden);
        }
        if c.marks.own {
            add(why, c, Why::MarkedHidden);
        }
    }
}

fn add(why: &mut BTreeMap<(String, String), Vec<Why>>, c: &Case, reason: Why) {
    let reasons = why.entry((c.binary.clone(), c.name.clone())).or_default();
    if !reasons.contains(&reason) {
        reasons.push(reason);
    }
}

/// The last `most` bytes of `text` (at a character boundary).
fn tail(text: &str, most: usize) -> &str {
    let mut start = text.len().saturating_sub(most);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `cargo nextest run` of the suite with the drivers present, every test under `run --watch`;
/// its JUnit cases, and the tests whose process loaded a GPU driver, with the drivers' names.
#[allow(clippy::type_complexity)]
fn present_run(
    cargo: &OsStr,
    nextest_args: &[OsString],
    dir: &Path,
) -> Result<(Vec<Case>, Vec<((String, String), Vec<String>)>), String> {
    std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find this program's own path: {e}"))?;
    let exe = exe.to_string_lossy();
    if exe.chars().any(char::is_whitespace) {
        return Err(format!(
            "find-gpu-tests: this program's path has a space ({exe}), which cargo's target \
             runner variable cannot carry; install it elsewhere, or use --by hidden"
        ));
    }
    let mut run = nextest_run(cargo, nextest_args, dir)?;
    let runner = format!("{exe} run --watch --");
    let triples = targets(nextest_args);
    if triples.is_empty() {
        return Err("find-gpu-tests: cannot tell this host's target triple (`rustc -vV`)".into());
    }
    for triple in triples {
        let var = format!(
            "CARGO_TARGET_{}_RUNNER",
            triple.to_ascii_uppercase().replace(['-', '.'], "_")
        );
        run.env(var, &runner);
    }
    keep_apart(&mut run, dir);
    let cases = run_and_read(&mut run, dir, &[])?;
    let loaded: Vec<((String, String), Vec<String>)> =
        match gpu_test_permit_cli::records::last_run(&records_dir(dir))
            .map_err(|e| e.to_string())?
        {
            Some(records) => gpu_test_permit::__private::runs::summarize(&records)
                .loaded_drivers
                .into_iter()
                .map(|(key, drivers)| {
                    let names = drivers.iter().map(|d| library_name(d).to_string());
                    ((key.binary, key.test), names.collect())
                })
                .collect(),
            None => Vec::new(),
        };
    if loaded.is_empty() && !cfg!(all(target_os = "linux", target_env = "gnu")) {
        eprintln!(
            "find-gpu-tests: driver loads can be watched only on Linux with glibc; here only \
             the skip lines count in this run"
        );
    }
    Ok((cases, loaded))
}

/// The target triples the run builds for: `--target` values, else this host's.
fn targets(args: &[OsString]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--target" {
            out.extend(it.next());
        } else if let Some(t) = a.strip_prefix("--target=") {
            out.push(t.to_string());
        }
    }
    if out.is_empty() {
        out.extend(host_triple());
    }
    out
}

/// This host's target triple, as `rustc -vV` says it.
fn host_triple() -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
}

/// `cargo nextest run` of the suite with every GPU driver hidden; its JUnit cases.
fn hidden_run(
    cargo: &OsStr,
    nextest_args: &[OsString],
    dir: &Path,
    own_marks: &[String],
) -> Result<Vec<Case>, String> {
    std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut run = nextest_run(cargo, nextest_args, dir)?;
    hide_gpu_drivers(&mut run, dir);
    let marks: Vec<&str> = own_marks.iter().map(String::as_str).collect();
    run_and_read(&mut run, dir, &marks)
}

/// `cargo nextest run NEXTEST-ARGS` under this command's profile, its report in `dir`.
fn nextest_run(cargo: &OsStr, nextest_args: &[OsString], dir: &Path) -> Result<Command, String> {
    let junit = dir.join("junit.xml");
    let tool_config = dir.join("find.toml");
    std::fs::write(&tool_config, profile_config(&junit))
        .map_err(|e| format!("cannot write {}: {e}", tool_config.display()))?;
    let mut tool_arg = OsString::from(format!("{TOOL}:"));
    tool_arg.push(&tool_config);
    let mut run = Command::new(cargo);
    run.args(["nextest", "run", "--profile", PROFILE, "--tool-config-file"])
        .arg(tool_arg)
        .args(nextest_args)
        .args(["--no-fail-fast", "--retries", "0"])
        .args(["--success-output", "never", "--failure-output", "never"])
        .args(["--status-level", "slow", "--final-status-level", "none"]);
    Ok(run)
}

/// Runs `run` and reads its JUnit report in `dir`, looking for `own_marks` besides the crate's
/// skip line.
fn run_and_read(run: &mut Command, dir: &Path, own_marks: &[&str]) -> Result<Vec<Case>, String> {
    // Standard output carries the filter: nextest's goes to standard error.
    let status = run
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("cannot run `cargo nextest run`: {e}"))?;
    let junit = dir.join("junit.xml");
    let report = std::fs::read_to_string(&junit).map_err(|e| {
        format!(
            "find-gpu-tests: `cargo nextest run` ended ({status}) without its report {}: {e}",
            junit.display()
        )
    })?;
    Ok(parse_junit(&report, own_marks))
}

/// Keeps the run's records apart from the host's, and its permits the host's: the tests
/// take their permits in the caller's slot directory (as `GPU_TEST_PERMIT_DIR`, or its
/// default, says for the caller), under the caller's N and state directory and inside an
/// inherited permit the caller works in, so that finding the GPU tests never runs more of
/// them than the host's cap allows beside everything else on the GPU. What the run records
/// goes to `work/records` instead of the slot directory ([`RECORDS_VAR`]), and no trace or
/// skip log of the caller's gets its events; tests skip where a backend has no device instead
/// of failing.
fn keep_apart(cmd: &mut Command, work: &Path) {
    for var in [TRACE_VAR, SKIP_LOG_VAR] {
        cmd.env_remove(var);
    }
    cmd.env(REQUIRE_VAR, "none")
        .env(RECORDS_VAR, records_dir(work));
}

/// Where the run of `work` records (see [`keep_apart`]).
fn records_dir(work: &Path) -> std::path::PathBuf {
    work.join("records")
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
///   of failing; the run's records in `work`, its permits the host's (see [`keep_apart`]).
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
    cmd.env("WGPU_BACKEND", "vulkan");
    keep_apart(cmd, work);
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

/// `s` as a TOML basic string: a quote and a backslash escaped, and every control character
/// (U+0000 to U+001F, U+007F, and the C1 controls, which TOML allows but no reader shows) as
/// TOML's short escape where it has one, else `\uXXXX`.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
    /// Which skip lines its output has.
    pub(crate) marks: Marks,
}

/// The skip lines in a test's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    /// The crate's skip line ([`SKIP_MARK`]).
    pub(crate) crate_line: bool,
    /// One of the suite's own `--skip-mark` texts.
    pub(crate) own: bool,
}

/// The test cases of nextest's JUnit report: `<testcase name=".." classname="..">`, failed
/// where a `<failure>` or `<error>` is inside, with the skip lines in the output inside: the
/// crate's, and those of `own_marks` (a suite's own).
pub(crate) fn parse_junit(xml: &str, own_marks: &[&str]) -> Vec<Case> {
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
                marks: {
                    let text = unescape_xml(body);
                    Marks {
                        crate_line: text.contains(SKIP_MARK),
                        own: own_marks.iter().any(|m| text.contains(m)),
                    }
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

/// What the runs showed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// The GPU tests, by binary id.
    pub(crate) gpu: BTreeMap<String, BTreeSet<String>>,
    /// Tests that ran and are not GPU tests.
    pub(crate) cpu: usize,
    /// Listed tests that did not run.
    pub(crate) not_run: usize,
}

/// The GPU tests (those with a reason in `why`) among the tests that `ran`, and the listed
/// tests that did not run.
pub(crate) fn classify(
    listed: &BTreeMap<String, Vec<Listed>>,
    why: &BTreeMap<(String, String), Vec<Why>>,
    ran: &BTreeSet<(String, String)>,
) -> Found {
    let mut found = Found::default();
    for (binary, name) in why.keys() {
        found
            .gpu
            .entry(binary.clone())
            .or_default()
            .insert(name.clone());
    }
    found.cpu = ran.iter().filter(|k| !why.contains_key(*k)).count();
    found.not_run = listed
        .iter()
        .flat_map(|(b, tests)| tests.iter().map(move |t| (b.clone(), t.name.clone())))
        .filter(|k| !ran.contains(k) && !why.contains_key(k))
        .count();
    found
}

/// The nextest filterset of the GPU tests, one binary per line (joined by `|`):
/// `binary_id(=ID)` where every test the binary has is a GPU test, else
/// `(binary_id(=ID) & (test(=a) | test(=b)))`. `none()` where there are none.
pub(crate) fn filterset(found: &Found, listed: &BTreeMap<String, Vec<Listed>>) -> String {
    gpu_test_permit_cli::nextest_config::filterset_with(&found.gpu, |binary| {
        let gpu = &found.gpu[binary];
        listed
            .get(binary)
            .is_some_and(|tests| tests.iter().all(|t| gpu.contains(&t.name)))
    })
}

/// The override that puts the GPU tests in the test group, with what was found.
fn override_block(
    found: &Found,
    listed: &BTreeMap<String, Vec<Listed>>,
    why: &BTreeMap<(String, String), Vec<Why>>,
) -> String {
    let gpu: usize = found.gpu.values().map(BTreeSet::len).sum();
    let ran = gpu + found.cpu;
    let count = |f: fn(&Why) -> bool| why.values().filter(|w| w.iter().any(f)).count();
    let mut ways = Vec::new();
    for (n, what) in [
        (
            count(|w| matches!(w, Why::Loaded(_))),
            "loaded a GPU driver",
        ),
        (
            count(|w| matches!(w, Why::SkippedPresent | Why::SkippedHidden)),
            "printed the crate's skip line",
        ),
        (
            count(|w| matches!(w, Why::FailedHidden)),
            "failed with every GPU driver hidden",
        ),
        (
            count(|w| matches!(w, Why::MarkedHidden)),
            "printed a --skip-mark text with every GPU driver hidden",
        ),
    ] {
        if n > 0 {
            ways.push(format!("# - {n} {what}\n"));
        }
    }
    format!(
        "# The GPU tests that `gpu-test-permit find-gpu-tests` found: {gpu} of the {ran} tests \
         run,\n# found by what they did (a test may count in two lines):\n{}\
         # For the tool config file that `gpu-test-permit nextest-snippet` prints, in place \
         of its\n\
         # override by name (with --wrapper, the same filter goes in the scripts' filter).\n\
         [[profile.default.overrides]]\n\
         filter = '''\n{}\n'''\n\
         test-group = '{GROUP}'\n",
        ways.concat(),
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
            marks: Marks {
                crate_line: skipped,
                own: false,
            },
        }
    }

    /// What the hidden run's `cases` find.
    fn classify(listed: &BTreeMap<String, Vec<Listed>>, cases: &[Case]) -> Found {
        let (mut why, mut ran) = (BTreeMap::new(), BTreeSet::new());
        hidden_reasons(cases, &mut why, &mut ran);
        super::classify(listed, &why, &ran)
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
            parse_junit(xml, &[]),
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
        let cases = parse_junit(&own, &["no GPU & no skip line; skipping"]);
        assert!(
            cases[3].marks.own && !cases[3].marks.crate_line,
            "{cases:?}"
        );
        assert!(
            cases[0].marks.crate_line && !cases[0].marks.own,
            "{cases:?}"
        );
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
        assert_eq!((found.cpu, found.not_run), (2, 0));
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
    fn run_only_options_are_left_out_of_the_listing() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            listing_args(&args(&[
                "--lib",
                "-j",
                "4",
                "-p",
                "x",
                "-j8",
                "--test-threads=3",
                "--retries",
                "2",
                "--no-capture",
                "-E",
                "test(a)",
                "--status-level=all",
                "--",
                "-j",
                "1",
            ])),
            args(&["--lib", "-p", "x", "-E", "test(a)", "--", "-j", "1"])
        );
        // Options the listing takes stay, with their values.
        let kept = args(&[
            "--workspace",
            "--target",
            "x86_64-unknown-linux-gnu",
            "-P",
            "ci",
        ]);
        assert_eq!(listing_args(&kept), kept);
    }

    #[test]
    fn the_targets_are_the_runs_or_this_hosts() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            targets(&args(&[
                "--target",
                "a-b-c",
                "--target=d-e-f",
                "--",
                "--target",
                "x"
            ])),
            ["a-b-c", "d-e-f"]
        );
        let host = targets(&[]);
        assert_eq!(host.len(), 1, "{host:?}");
        assert!(host[0].contains('-'), "{host:?}");
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"C:\a "b""#), r#""C:\\a \"b\"""#);
        assert_eq!(
            toml_string("a\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}\u{85}é"),
            r#""a\b\t\n\f\r\u0001\u001F\u007F\u0085é""#
        );
    }
}
