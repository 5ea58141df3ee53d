//! `nextest-snippet` prints a tool config file that nextest reads, whatever names the host's
//! history holds: a test name with a line break, a quote or any control character (another
//! user's run recorded in a shared slot directory) is escaped, and each priority's filter
//! matches exactly the test it names, never another.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::recipes::have_nextest;
use crate::util::{clear_permit_env, cli, tempdir};

const SUITE: &str = "gpu-test-permit-plain-suite";
const BINARY: &str = "gpu-test-permit-plain-suite::suite";

/// A real test of the plain suite, and names near it that must not match it (or any other
/// test): a line break, spaces at either end, a filterset's own syntax, a TOML literal
/// string's end, and control characters TOML forbids in a string.
const REAL: &str = "gpu_draw";
const ODD: [&str; 7] = [
    "gpu_matmul\n",
    "gpu_scan\ntest = 'x'",
    " gpu_scan",
    "gpu_scan ",
    "gpu_reduce) | test(=gpu_reduce",
    "gpu_reduce'''\n[x]",
    "gpu_draw\u{7f}\u{1}\t\r\"\\",
];

fn plain_suite_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("plain-suite")
}

/// `cargo nextest list` of the plain suite with `args`: the tests that match, as (binary id,
/// name), or nextest's error.
fn listed(args: &[OsString]) -> Result<BTreeSet<(String, String)>, String> {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    let out = c
        .current_dir(crate::util::workspace_root())
        .args(["nextest", "list", "--offline", "--message-format", "json"])
        .args(["-p", SUITE, "--target-dir"])
        .arg(plain_suite_target())
        .args(args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut tests = BTreeSet::new();
    for (id, suite) in listing["rust-suites"].as_object().unwrap() {
        for (name, case) in suite["testcases"].as_object().unwrap() {
            if case["filter-match"]["status"] == "matches" {
                tests.insert((id.clone(), name.clone()));
            }
        }
    }
    Ok(tests)
}

/// Records a hold of test `name` of the plain suite's binary in `slots`, as a test process
/// under nextest does: `hold` with nextest's variables for that test.
fn record_hold(slots: &Path, run: &str, name: &str) {
    let out = cli(slots, 2)
        .env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_BINARY_ID", BINARY)
        .env("NEXTEST_TEST_NAME", name)
        .args(["hold", "--for", "20ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{name:?}: {out:?}");
}

#[test]
fn the_snippet_of_odd_test_names_is_toml_nextest_reads_and_names_only_them() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = "8c0c5bd2-7f61-4c1e-9a43-2f3b9a6d0e11";
    record_hold(&slots, run, REAL);
    for name in ODD {
        record_hold(&slots, run, name);
    }
    let out = cli(&slots, 2).arg("nextest-snippet").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let snippet = String::from_utf8(out.stdout).unwrap();
    // TOML allows no control character in a string or a comment, but the tab (which the
    // filters escape too).
    for line in snippet.lines() {
        assert!(!line.chars().any(char::is_control), "{line:?}\n{snippet}");
    }
    let filters: Vec<&str> = snippet
        .lines()
        .filter_map(|l| l.strip_prefix("filter = '")?.strip_suffix('\''))
        .filter(|f| f.starts_with("binary_id("))
        .collect();
    assert_eq!(filters.len(), 1 + ODD.len(), "{snippet}");

    // nextest parses the file, filters and all.
    let file = work.path().join("gpu-test-permit.toml");
    std::fs::write(&file, &snippet).unwrap();
    let mut tool = OsString::from("gpu-test-permit:");
    tool.push(&file);
    let all = listed(&["--tool-config-file".into(), tool]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        all.contains(&(BINARY.to_string(), REAL.to_string())),
        "{all:?}"
    );

    // Each filter, as nextest reads it, matches the test it names: the real one exactly, and
    // none of the others (no such test exists), never a neighbour.
    let mut matched = Vec::new();
    for filter in &filters {
        let tests = listed(&["-E".into(), filter.into()])
            .unwrap_or_else(|e| panic!("{filter}: {e}\n{snippet}"));
        matched.push((filter.to_string(), tests));
    }
    let real = (BINARY.to_string(), REAL.to_string());
    let real_filter = format!("binary_id(={BINARY}) & test(={REAL})");
    for (filter, tests) in &matched {
        if *filter == real_filter {
            assert_eq!(*tests, BTreeSet::from([real.clone()]), "{filter}");
        } else {
            assert_eq!(*tests, BTreeSet::new(), "{filter}");
        }
    }
    assert!(matched.iter().any(|(f, _)| *f == real_filter), "{snippet}");
}

/// `nextest-snippet` puts in the GPU test group exactly the tests this user's runs saw use the
/// GPU, once a run was watched: those that took a permit and those that loaded a GPU driver
/// without one, not a test that did neither. Before any watched run, the group is the guess by
/// name. nextest reads the file, and its filter matches exactly those tests.
#[test]
fn after_a_watched_run_the_group_names_exactly_the_tests_that_used_the_gpu() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");
    let snippet = || {
        let out = cli(&slots, 2).arg("nextest-snippet").output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let as_test = |mut c: Command, run: &str, name: &str| {
        c.env("NEXTEST_RUN_ID", run)
            .env("NEXTEST_BINARY_ID", BINARY)
            .env("NEXTEST_TEST_NAME", name);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
    };

    // A run that was not watched: the guess.
    record_hold(&slots, "not-watched", "gpu_draw");
    let guessed = snippet();
    assert!(guessed.contains("filter = 'test(/gpu/)'"), "{guessed}");

    // A watched run: one test holds a permit, one loads a driver without one, one does neither.
    let run = "watched";
    let mut holds = cli(&slots, 2);
    holds
        .args(["watch", "--"])
        .arg(crate::util::bin())
        .args(["hold", "--for", "20ms"]);
    as_test(holds, run, "gpu_matmul");
    let libcuda = crate::stub::driver_dir("cuda_probe").join("libcuda.so.1");
    as_test(
        crate::icd::watched_child(&slots, &[&libcuda]),
        run,
        "cpu_adds",
    );
    let mut nothing = cli(&slots, 2);
    nothing.args(["watch", "--", "true"]);
    as_test(nothing, run, "cpu_sorts");

    let config = snippet();
    assert!(!config.contains("test(/gpu/)"), "{config}");
    assert!(
        config.contains("this user's 2 run(s) recorded in the slot directory (1 watched)"),
        "{config}"
    );
    let filter = config
        .split("filter = '''\n")
        .nth(1)
        .and_then(|rest| rest.split("\n'''").next())
        .unwrap_or_else(|| panic!("no learned filter in:\n{config}"));
    let file = work.path().join("gpu-test-permit.toml");
    std::fs::write(&file, &config).unwrap();
    let mut tool = OsString::from("gpu-test-permit:");
    tool.push(&file);
    let matched = listed(&[
        "--tool-config-file".into(),
        tool,
        "-E".into(),
        filter.into(),
    ])
    .unwrap_or_else(|e| panic!("{e}\n{config}"));
    let expected: BTreeSet<(String, String)> = ["gpu_draw", "gpu_matmul", "cpu_adds"]
        .iter()
        .map(|t| (BINARY.to_string(), t.to_string()))
        .collect();
    assert_eq!(matched, expected, "{config}");
}
