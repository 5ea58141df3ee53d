//! The README's recipes for a suite that does not use the crate, run for real: `cargo nextest`
//! on `fixtures/plain-suite` (four "GPU" tests of 200 ms that record when they ran, two CPU
//! tests) with `gpu-test-permit run` as the target runner and as a wrapper script, configured
//! by the text `gpu-test-permit nextest-snippet --runner` / `--wrapper` prints.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_test_permit::trace::{peak_concurrency, read_events};

use crate::util::{bin, clear_permit_env, tempdir};

const GPU_TESTS: [&str; 4] = ["gpu_draw", "gpu_matmul", "gpu_reduce", "gpu_scan"];

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
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
    let mut all = Vec::new();
    for e in std::fs::read_dir(&records).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let f: Vec<&str> = text.split_whitespace().collect();
        all.push(Record {
            name: f[0].to_string(),
            start: f[2].parse().unwrap(),
            end: f[3].parse().unwrap(),
        });
    }
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

#[test]
fn target_runner_recipe_caps_a_plain_suite() {
    if !have_nextest() {
        return;
    }
    let snippet = with_bin(&gpu_test_permit::nextest::runner_snippet(4));
    let (cargo_part, nextest_part) = snippet.split_once("# .config/nextest.toml").unwrap();
    let runner = cargo_part
        .lines()
        .find_map(|l| l.strip_prefix("runner = "))
        .unwrap();
    assert!(cargo_part.contains("[target.'cfg(all())']"));
    let (records, trace) = run_suite(1, |c, work| {
        let config = work.join("nextest.toml");
        std::fs::write(&config, nextest_part).unwrap();
        c.arg("--config-file")
            .arg(config)
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
    let snippet = with_bin(&gpu_test_permit::nextest::wrapper_snippet(4));
    let (records, trace) = run_suite(2, |c, work| {
        let config = work.join("nextest.toml");
        std::fs::write(&config, &snippet).unwrap();
        c.arg("--config-file").arg(config);
    });
    check(2, &records, &trace);
}

#[test]
fn the_readme_shows_the_snippets_the_tool_prints() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for snippet in [
        gpu_test_permit::nextest::runner_snippet(2),
        gpu_test_permit::nextest::wrapper_snippet(2),
    ] {
        assert!(readme.contains(&snippet), "README.md lacks:\n{snippet}");
    }
}
