//! The README's recipes, run for real: `cargo nextest` on `fixtures/plain-suite` (four "GPU"
//! tests of 200 ms that record when they ran, two CPU tests) with `gpu-test-permit run` as the
//! target runner and as a wrapper script, configured by the text `gpu-test-permit
//! nextest-snippet --runner` / `--wrapper` prints; the snippet as a tool config file beside a
//! suite's own configuration; and `gpu-test-permit find-gpu-tests` on the example suite.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_test_permit::trace::{peak_concurrency, read_events};

use crate::util::{bin, clear_permit_env, stdout_of, tempdir};

const GPU_TESTS: [&str; 4] = ["gpu_draw", "gpu_matmul", "gpu_reduce", "gpu_scan"];

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    c.current_dir(crate::util::workspace_root());
    c
}

/// `cargo nextest run` of the plain suite, its tests recording when they ran into `records`,
/// with more test processes (6) than permits, so that the cap is ours, not nextest's.
pub(crate) fn plain_suite_run(records: &Path) -> Command {
    let mut c = cargo();
    c.args([
        "nextest",
        "run",
        "--offline",
        "-p",
        "gpu-test-permit-plain-suite",
    ])
    .arg("--target-dir")
    .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plain-suite"))
    .args(["--test-threads", "6", "--status-level", "fail"])
    .env("PLAIN_SUITE_RECORDS", records);
    c
}

pub(crate) fn have_nextest() -> bool {
    let ok = cargo()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("recipes: SKIPPED, cargo-nextest is not installed (cargo install cargo-nextest)");
    }
    ok
}

/// One `cargo nextest run` of the plain suite with N = `n`; `configure` adds the recipe.
/// Returns the records and the trace's hold events (test name, pid).
fn run_suite(n: usize, configure: impl FnOnce(&mut Command, &Path)) -> (Vec<Record>, PathBuf) {
    let work = tempdir();
    let records = work.path().join("records");
    std::fs::create_dir(&records).unwrap();
    let trace = work.path().join("trace.json");
    let mut c = plain_suite_run(&records);
    c.env("GPU_TEST_PERMIT_DIR", work.path().join("slots"))
        .env("REALIZAR_GPU_TEST_CONCURRENCY", n.to_string())
        .env("GPU_TEST_PERMIT_TRACE", &trace);
    configure(&mut c, work.path());
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let all = read_records(&records);
    // Keep the trace: the work directory goes with this function.
    let kept = tempdir().keep().join("trace.json");
    std::fs::copy(&trace, &kept).unwrap();
    (all, kept)
}

struct Record {
    name: String,
    start: u128,
    end: u128,
}

/// The plain suite's records in `dir`: `<name> <pid> <start µs> <end µs>`, a file each.
fn read_records(dir: &Path) -> Vec<Record> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            Record {
                name: f[0].to_string(),
                start: f[2].parse().unwrap(),
                end: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// The most records running at one instant.
fn most_at_once(records: &[Record]) -> usize {
    records
        .iter()
        .map(|r| {
            records
                .iter()
                .filter(|o| o.start <= r.start && r.start < o.end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The caps held: every GPU test ran, never more than `n` at once, and only the GPU tests
/// took permits (not the CPU tests, not nextest's listing of the binaries).
fn check(n: usize, records: &[Record], trace: &Path) {
    let mut ran: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    ran.sort();
    assert_eq!(ran, GPU_TESTS);
    assert!(
        most_at_once(records) <= n,
        "more than {n} GPU tests at once"
    );
    let events = read_events(trace).unwrap();
    let mut held: Vec<&str> = events
        .iter()
        .filter(|e| e.name == "hold")
        .map(|e| e.args.test.as_str())
        .collect();
    held.sort();
    assert_eq!(held, GPU_TESTS, "permits other than the GPU tests' own");
    assert!(peak_concurrency(&events) <= n);
    std::fs::remove_dir_all(trace.parent().unwrap()).ok();
}

/// `snippet` with `gpu-test-permit` replaced by the binary under test.
fn with_bin(snippet: &str) -> String {
    snippet
        .replace("gpu-test-permit run", &format!("{} run", bin().display()))
        .replace("\"gpu-test-permit\"", &format!("\"{}\"", bin().display()))
}

/// Where a snippet's tool config file starts.
pub(crate) const TOOL_FILE: &str = "# gpu-test-permit.toml";

/// The arguments that give nextest `tool_file` as this crate's tool config file, with the
/// suite's own configuration `suite` (the plain suite stands for a suite of its own here: the
/// workspace's `.config/nextest.toml`, which puts tests named `gpu` in a group of its own
/// first, is not its configuration). Both files are written beside `tool_file`.
pub(crate) fn tool_config_with(tool_file: &Path, suite: &str) -> Vec<OsString> {
    let suite_file = tool_file.with_file_name("suite-nextest.toml");
    std::fs::write(&suite_file, suite).unwrap();
    let mut tool = OsString::from("gpu-test-permit:");
    tool.push(tool_file);
    vec![
        "--config-file".into(),
        suite_file.into(),
        "--tool-config-file".into(),
        tool,
    ]
}

/// [`tool_config_with`] for a suite without configuration of its own.
pub(crate) fn tool_config(tool_file: &Path) -> Vec<OsString> {
    tool_config_with(tool_file, "")
}

#[test]
fn target_runner_recipe_caps_a_plain_suite() {
    if !have_nextest() {
        return;
    }
    let snippet = with_bin(&gpu_test_permit_cli::nextest_config::runner_snippet(
        4,
        &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
    ));
    let at = snippet.find(TOOL_FILE).unwrap();
    let (cargo_part, tool_part) = snippet.split_at(at);
    let runner = cargo_part
        .lines()
        .find_map(|l| l.strip_prefix("runner = "))
        .unwrap();
    assert!(cargo_part.contains("[target.'cfg(all())']"));
    let (records, trace) = run_suite(1, |c, work| {
        let tool_file = work.join("gpu-test-permit.toml");
        std::fs::write(&tool_file, tool_part).unwrap();
        c.args(tool_config(&tool_file))
            .arg("--config")
            .arg(format!("target.'cfg(all())'.runner={runner}"));
    });
    check(1, &records, &trace);
}

#[test]
fn wrapper_script_recipe_caps_a_plain_suite() {
    if !have_nextest() {
        return;
    }
    let snippet = with_bin(&gpu_test_permit_cli::nextest_config::wrapper_snippet(
        4,
        &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
    ));
    let at = snippet.find(TOOL_FILE).unwrap();
    let (suite_part, tool_part) = snippet.split_at(at);
    assert!(suite_part.contains("\nexperimental = [\"wrapper-scripts\"]\n"));
    let (records, trace) = run_suite(2, |c, work| {
        let tool_file = work.join("gpu-test-permit.toml");
        std::fs::write(&tool_file, tool_part).unwrap();
        c.args(tool_config_with(&tool_file, suite_part));
    });
    check(2, &records, &trace);
}

/// The GPU tests in the order they started, from the plain suite's records in `dir`.
fn start_order(dir: &Path) -> Vec<String> {
    let mut records = read_records(dir);
    records.sort_by_key(|r| r.start);
    records.into_iter().map(|r| r.name).collect()
}

#[test]
fn the_snippet_starts_the_longest_tests_first_once_the_history_knows_them() {
    if !have_nextest() {
        return;
    }
    // One permit and a group of one: the GPU tests run one at a time, in nextest's order.
    // `gpu_scan` is long and sorts last.
    let work = tempdir();
    let slots = work.path().join("slots");
    let snippet = |c: &mut Command| {
        clear_permit_env(c);
        c.arg("nextest-snippet")
            .arg("--runner")
            .env("GPU_TEST_PERMIT_DIR", &slots)
            .env("GPU_TEST_PERMIT_STATE", work.path().join("state"))
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "1");
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        with_bin(&String::from_utf8_lossy(&out.stdout))
    };
    let run = |text: &str, round: &str| {
        let records = work.path().join(format!("records-{round}"));
        std::fs::create_dir(&records).unwrap();
        let at = text.find(TOOL_FILE).unwrap();
        let (cargo_part, tool_part) = text.split_at(at);
        let runner = cargo_part
            .lines()
            .find_map(|l| l.strip_prefix("runner = "))
            .unwrap();
        let tool_file = work.path().join(format!("tool-{round}.toml"));
        std::fs::write(&tool_file, tool_part).unwrap();
        let mut c = plain_suite_run(&records);
        c.env("GPU_TEST_PERMIT_DIR", &slots)
            .env("GPU_TEST_PERMIT_STATE", work.path().join("state"))
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
            .env("PLAIN_SUITE_HOLD_MS", "gpu_scan=900")
            .args(tool_config(&tool_file))
            .arg("--config")
            .arg(format!("target.'cfg(all())'.runner={runner}"));
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        start_order(&records)
    };
    let first = snippet(&mut Command::new(bin()));
    assert!(!first.contains("priority ="), "no history yet:\n{first}");
    assert_eq!(run(&first, "1"), GPU_TESTS, "by name, the long test last");

    let second = snippet(&mut Command::new(bin()));
    assert!(
        second.contains(
            "filter = 'binary_id(=gpu-test-permit-plain-suite::suite) & test(=gpu_scan)'\n\
             priority = 100\n"
        ),
        "{second}"
    );
    for t in &GPU_TESTS[..3] {
        assert!(
            second.contains(&format!("test(={t})'\npriority = 9")),
            "{t}: {second}"
        );
    }
    assert!(
        !second.contains("cpu_"),
        "only tests that took permits: {second}"
    );
    let order = run(&second, "2");
    assert_eq!(order[0], "gpu_scan", "the longest first: {order:?}");
}

/// A forged history changes the priorities' order and nothing else: garbage is left out, a
/// hold of 0 or of half a million years is a place in the order, and a FIFO in the history's
/// place gives no priorities instead of a snippet that never comes.
#[test]
fn the_snippet_reads_a_forged_history_without_stalling() {
    let work = tempdir();
    let (slots, state) = slots_and_state(work.path());
    let snippet = || snippet_of(&slots, &state);
    std::fs::write(
        state.join("gpu0.tests"),
        "garbage\n\
         {\"test\":\"a::b\",\"us\":18446744073709551615,\"seen\":1,\"binary\":\"a\",\"name\":\"b\"}\n\
         {\"test\":\"a::c\",\"us\":0,\"seen\":1,\"binary\":\"a\",\"name\":\"c(1)'x\"}\n",
    )
    .unwrap();
    let text = snippet();
    assert!(
        text.contains("filter = 'binary_id(=a) & test(=b)'\npriority = 100\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "filter = 'binary_id(=a) & test(=c\\u{28}1\\u{29}\\u{27}x)'\npriority = 99\n"
        ),
        "{text}"
    );
    assert!(!text.contains("garbage"), "{text}");

    std::fs::remove_file(state.join("gpu0.tests")).unwrap();
    let fifo = std::ffi::CString::new(state.join("gpu0.tests").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let text = snippet();
    assert!(!text.contains("priority ="), "{text}");
    assert!(text.contains("[test-groups]"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// The history's hold times are read by the snippet as backfilling reads them: a line of this
/// version, one written before the format had a version, and one that does not say when its
/// test was last seen each give a priority; a line of a later version gives none.
#[test]
fn the_snippet_reads_each_line_of_the_history_that_backfilling_reads() {
    let work = tempdir();
    let (slots, state) = slots_and_state(work.path());
    std::fs::write(
        state.join("gpu0.tests"),
        "{\"v\":1,\"test\":\"a::now\",\"us\":4000,\"seen\":1,\"binary\":\"a\",\"name\":\"now\"}\n\
         {\"test\":\"a::unversioned\",\"us\":3000,\"seen\":1,\"binary\":\"a\",\"name\":\"unversioned\"}\n\
         {\"test\":\"a::unseen\",\"us\":2000,\"binary\":\"a\",\"name\":\"unseen\"}\n\
         {\"v\":2,\"test\":\"a::later\",\"us\":9000,\"seen\":1,\"binary\":\"a\",\"name\":\"later\"}\n",
    )
    .unwrap();
    let text = snippet_of(&slots, &state);
    for (test, priority) in [("now", 100), ("unversioned", 99), ("unseen", 98)] {
        assert!(
            text.contains(&format!(
                "filter = 'binary_id(=a) & test(={test})'\npriority = {priority}\n"
            )),
            "{test}: {text}"
        );
    }
    assert!(!text.contains("later"), "{text}");
}

/// A slot directory and a state directory, made, in `work`.
fn slots_and_state(work: &Path) -> (PathBuf, PathBuf) {
    let (slots, state) = (work.join("slots"), work.join("state"));
    std::fs::create_dir_all(&slots).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    (slots, state)
}

/// What `gpu-test-permit nextest-snippet` prints for slot directory `slots` and state
/// directory `state`.
fn snippet_of(slots: &Path, state: &Path) -> String {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    stdout_of(
        c.arg("nextest-snippet")
            .env("GPU_TEST_PERMIT_DIR", slots)
            .env("GPU_TEST_PERMIT_STATE", state),
    )
}

#[test]
fn the_readme_shows_the_snippets_the_tool_prints() {
    let readme = readme();
    for snippet in [
        gpu_test_permit::__private::nextest::group_snippet(2),
        gpu_test_permit_cli::nextest_config::runner_snippet(
            2,
            &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
        ),
        gpu_test_permit_cli::nextest_config::wrapper_snippet(
            2,
            &gpu_test_permit_cli::nextest_config::GroupFilter::Guessed,
        ),
    ] {
        assert!(readme.contains(&snippet), "README.md lacks:\n{snippet}");
    }
}

/// README.md and the guide it links to (docs/guide/), where the recipes are in full.
fn readme() -> String {
    crate::util::readme_and_guide()
}

/// The example suite's own target directory: the one of the `cargo test` running this is
/// locked while it runs. Built without debug info (a quarter less compile time).
fn example_suite_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("example-suite")
}

/// `cargo nextest list` of the example suite with `args`: its tests as (binary id, name).
fn example_suite_tests(args: &[&str]) -> BTreeSet<(String, String)> {
    let out = cargo()
        .args(["nextest", "list", "--offline", "--message-format", "json"])
        .args(["-p", EXAMPLE_SUITE])
        .arg("--target-dir")
        .arg(example_suite_target())
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut tests = BTreeSet::new();
    for (id, suite) in listing["rust-suites"].as_object().unwrap() {
        for (name, case) in suite["testcases"].as_object().unwrap() {
            if case["filter-match"]["status"] == "matches" {
                tests.insert((id.clone(), name.clone()));
            }
        }
    }
    tests
}

const EXAMPLE_SUITE: &str = "gpu-test-permit-example-suite";

/// The example suite's GPU tests whose names do not say so (`particles.rs`), and its CPU tests.
const PARTICLES_GPU: [&str; 2] = [
    "boids_advance_as_the_cpu_does",
    "water_relaxes_as_the_cpu_does",
];
const PARTICLES_CPU: [&str; 3] = [
    "advance_moves_by_velocity_times_the_step",
    "close_names_the_first_mismatch",
    "relaxing_a_flat_surface_keeps_it_flat",
];

/// On the example suite, `find-gpu-tests` prints an override whose filter matches exactly its
/// GPU tests: every test of the `cuda` and `wgpu_compute` binaries (named whole), and the two
/// of `particles` whose names lack "gpu", not its CPU tests. Without a GPU driver to hide
/// too: here they print the crate's skip line either way.
#[test]
fn find_gpu_tests_names_exactly_the_gpu_tests_of_the_example_suite() {
    if !have_nextest() {
        return;
    }
    let all = example_suite_tests(&[]);
    let particles = format!("{EXAMPLE_SUITE}::particles");
    let cpu: BTreeSet<(String, String)> = PARTICLES_CPU
        .iter()
        .map(|t| (particles.clone(), t.to_string()))
        .collect();
    let gpu: BTreeSet<(String, String)> = all.difference(&cpu).cloned().collect();
    assert!(cpu.is_subset(&all), "{all:?}");
    for t in PARTICLES_GPU {
        assert!(gpu.contains(&(particles.clone(), t.to_string())), "{all:?}");
    }
    assert!(gpu.len() > 40, "{gpu:?}");

    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    let out = c
        .current_dir(crate::util::workspace_root())
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .args(["find-gpu-tests", "--", "--offline", "-p", EXAMPLE_SUITE])
        .arg("--target-dir")
        .arg(example_suite_target())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let filter = text.split("'''").nth(1).unwrap_or_else(|| panic!("{text}"));
    assert!(
        filter.contains(&format!("binary_id(={EXAMPLE_SUITE}::cuda)\n")),
        "{filter}"
    );
    assert!(
        text.contains("\ntest-group = '@tool:gpu-test-permit:gpu'\n"),
        "{text}"
    );
    assert_eq!(example_suite_tests(&["-E", filter]), gpu, "{filter}");

    // The override in place of the guess in the snippet's tool config file: nextest reads it,
    // and puts the particles' GPU tests in the group.
    let snippet = gpu_test_permit::__private::nextest::group_snippet(2);
    let guess = "[[profile.default.overrides]]";
    let tool = format!(
        "{}{}",
        &snippet[..snippet.find(guess).unwrap()],
        &text[text.find(guess).unwrap()..]
    );
    let work = tempdir();
    let tool_file = work.path().join("gpu-test-permit.toml");
    std::fs::write(&tool_file, &tool).unwrap();
    let out = cargo()
        .args(["nextest", "show-config", "test-groups", "--offline"])
        .args(["-p", EXAMPLE_SUITE])
        .arg("--target-dir")
        .arg(example_suite_target())
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .args(tool_config(&tool_file))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}\n{out:?}");
    let group = shown
        .split("group: @tool:gpu-test-permit:gpu")
        .nth(1)
        .unwrap_or_else(|| panic!("{shown}"));
    for t in PARTICLES_GPU {
        assert!(group.contains(t), "{shown}");
    }
    for t in PARTICLES_CPU {
        assert!(!group.contains(t), "{shown}");
    }
}

/// The snippet is a nextest tool config file: nextest takes it beside the suite's own
/// `.config/nextest.toml` (here the workspace's, whose `gpu` group and overrides stay), where
/// `--config-file` would have replaced that file.
#[test]
fn the_snippet_is_a_tool_config_file_that_keeps_the_suites_own_config() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let tool_file = work.path().join("gpu-test-permit.toml");
    let printed = crate::util::cli(&work.path().join("slots"), 2)
        .arg("nextest-snippet")
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    std::fs::write(&tool_file, &printed.stdout).unwrap();
    let mut tool = OsString::from("gpu-test-permit:");
    tool.push(&tool_file);
    let out = cargo()
        .args(["nextest", "show-config", "test-groups", "--offline"])
        .args(["-p", EXAMPLE_SUITE])
        .arg("--target-dir")
        .arg(example_suite_target())
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .arg("--tool-config-file")
        .arg(tool)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("group: @tool:gpu-test-permit:gpu (max threads = 2)"),
        "{shown}"
    );
    // The suite's own group and override, with its own tests in it.
    let own = shown
        .split("group: gpu (max threads = 2)")
        .nth(1)
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(own.contains("filter 'test(/gpu_heavy/)'"), "{shown}");
    assert!(own.contains("gpu_f32_add"), "{shown}");
}

/// The snippets, the command's help and the hint printed under nextest say that a filter by
/// name is a guess, and name the command that finds the GPU tests.
#[test]
fn the_snippets_and_the_hint_call_a_name_filter_a_guess() {
    use gpu_test_permit::__private::nextest::{group_hint, group_snippet};
    use gpu_test_permit_cli::nextest_config::{GroupFilter, runner_snippet, wrapper_snippet};
    let env = gpu_test_permit::config::Config::from_lookup(|name| {
        (name == "NEXTEST_EXECUTION_MODE").then(|| "process-per-test".into())
    })
    .nextest
    .unwrap();
    let work = tempdir();
    let printed = crate::util::cli(&work.path().join("slots"), 2)
        .arg("nextest-snippet")
        .output()
        .unwrap();
    let help = crate::util::cli(&work.path().join("slots"), 2)
        .args(["nextest-snippet", "--help"])
        .output()
        .unwrap();
    for text in [
        group_snippet(2),
        runner_snippet(2, &GroupFilter::Guessed),
        wrapper_snippet(2, &GroupFilter::Guessed),
        group_hint(&env, 2).unwrap(),
        String::from_utf8_lossy(&printed.stdout).into_owned(),
    ] {
        assert!(text.contains("# A guess by name"), "{text}");
        assert!(text.contains("`gpu-test-permit find-gpu-tests`"), "{text}");
    }
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("a guess by"), "{help}");
    assert!(help.contains("`find-gpu-tests`"), "{help}");
}

/// The README says how to keep a permit's wait inside nextest's timeouts, and its example
/// does: `GPU_TEST_PERMIT_TIMEOUT` below `period` x `terminate-after`.
#[test]
fn the_readme_keeps_the_permit_timeout_below_nextests_kill() {
    let readme = readme();
    let (_, section) = readme
        .split_once("**Waiting inside nextest's timeouts.**")
        .expect("README.md has no section on nextest's timeouts");
    let section = section.split("\n**").next().unwrap();
    let permit = section
        .split("GPU_TEST_PERMIT_TIMEOUT=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no GPU_TEST_PERMIT_TIMEOUT=... in:\n{section}"));
    let permit = gpu_test_permit::__private::config::parse_duration(&permit.into()).unwrap();
    let timeout = section
        .lines()
        .find_map(|l| l.strip_prefix("slow-timeout = { period = \""))
        .unwrap_or_else(|| panic!("no slow-timeout in:\n{section}"));
    let (period, rest) = timeout.split_once('"').unwrap();
    let period = gpu_test_permit::__private::config::parse_duration(&period.into()).unwrap();
    let times: u32 = rest
        .split("terminate-after = ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no terminate-after in:\n{section}"));
    assert!(
        permit < period * times,
        "{permit:?} is not below {period:?} x {times}"
    );
}
