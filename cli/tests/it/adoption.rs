//! A suite that adopts the crate as a real project does (`fixtures/adopter`: wgpu 27, not the
//! crate's wgpu; no feature of this crate; GPU code that falls back to the CPU without an
//! adapter; the permit a field of its GPU type, turned on for unit and integration tests by a
//! dev-dependency on itself; some tests that open the GPU without one), run for real on
//! lavapipe: `find-gpu-tests` names exactly its GPU tests, `report` exactly those that escaped
//! the cap, and `cargo test` names the binary that loaded a driver before its first permit.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_test_permit::__private::runs::RunRecord;
use gpu_test_permit::probe::Backend;
use gpu_test_permit_cli::records::last_run;

use crate::recipes::have_nextest;
use crate::util::{bin, clear_permit_env, runner_var, tempdir};

const ADOPTER: &str = "gpu-test-permit-adopter";
const UNIT: &str = "gpu-test-permit-adopter";
const INTEGRATION: &str = "gpu-test-permit-adopter::integration";

/// The tests that open the GPU through `Gpu` (with a permit), as (binary, test).
const WITH_PERMIT: [(&str, &str); 4] = [
    (UNIT, "tests::gpu_doubles"),
    (UNIT, "tests::gpu_doubles_inside_a_held_gpu"),
    (INTEGRATION, "gpu_doubles_from_outside"),
    (INTEGRATION, "gpu_doubles_twice_in_one_test"),
];
/// The tests that open the GPU (wgpu) without a permit.
const ESCAPING: [(&str, &str); 2] = [
    (UNIT, "tests::raw_adapter_is_named"),
    (INTEGRATION, "raw_adapter_from_outside"),
];
/// The test that loads the CUDA driver through the suite's own bindings, without a permit.
const CUDA_RAW: (&str, &str) = (INTEGRATION, "cuda_raw_from_outside");

fn keys(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(b, t)| (b.to_string(), t.to_string()))
        .collect()
}

fn target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("adopter")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    c.current_dir(crate::util::workspace_root())
        .env("CARGO_PROFILE_DEV_DEBUG", "0");
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cargo nextest run` of the adopter with its slots (and records) in `slots` and the
/// stand-in CUDA driver in its library path; each test process under `gpu-test-permit watch`
/// (cargo's target runner) where `watched`. Fails unless every test passes.
fn run_nextest(slots: &Path, watched: bool) {
    let mut c = cargo();
    c.args(["nextest", "run", "--offline", "-p", ADOPTER, "--target-dir"])
        .arg(target())
        .args(["--status-level", "fail", "--no-fail-fast"])
        .env(gpu_test_permit::config::DIR_VAR, slots);
    if watched {
        c.env(runner_var(), format!("{} watch --", bin().display()));
    }
    with_stub_cuda(&mut c);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// The stand-in CUDA driver (it answers cuInit with one device), first in the library path.
fn with_stub_cuda(c: &mut Command) {
    let dir = crate::stub::driver_dir("cuda_probe");
    c.env("LD_LIBRARY_PATH", dir);
}

/// The last run's records in `slots`: the tests that loaded drivers without a permit (with
/// how they were seen), and the tests granted permits.
#[allow(clippy::type_complexity)]
fn recorded(
    slots: &Path,
) -> (
    BTreeSet<(String, String)>,
    BTreeSet<String>,
    BTreeSet<(String, String)>,
) {
    let run = last_run(slots).unwrap().expect("a recorded run");
    let (mut escaped, mut seen, mut granted) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for r in &run.records {
        match r {
            RunRecord::Drivers(d) if d.escaped() => {
                escaped.insert((d.binary.clone(), d.test.clone()));
                seen.insert(d.seen.clone());
            }
            RunRecord::Grant(g) => {
                granted.insert((g.binary.clone(), g.test.clone()));
            }
            _ => {}
        }
    }
    (escaped, seen, granted)
}

fn report(slots: &Path, fail: bool) -> Output {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.arg("report").arg("--dir").arg(slots);
    if fail {
        c.arg("--fail-on-unpermitted");
    }
    c.output().unwrap()
}

/// The tests `report` names in its section on drivers loaded without a permit.
fn reported_escapes(text: &str) -> BTreeSet<(String, String)> {
    let Some(section) = text.split("loaded a GPU driver without a permit: ").nth(1) else {
        return BTreeSet::new();
    };
    section
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (key, _) = l.trim().split_once(": ").unwrap();
            let (binary, test) = key.split_once(' ').unwrap();
            (binary.to_string(), test.to_string())
        })
        .collect()
}

#[test]
fn a_watched_run_names_its_escapes_in_report_and_its_gpu_tests_in_the_snippet() {
    gpu_test_permit::require_backend!(Backend::Wgpu);
    if !have_nextest() {
        return;
    }
    // Watched: every test process under `gpu-test-permit watch` (cargo's target runner).
    let work = tempdir();
    let slots = work.path().join("slots");
    run_nextest(&slots, true);

    let (escaped, seen, granted) = recorded(&slots);
    let mut expected = keys(&ESCAPING);
    expected.insert((CUDA_RAW.0.into(), CUDA_RAW.1.into()));
    assert_eq!(escaped, expected);
    assert_eq!(seen, BTreeSet::from(["watched".to_string()]));
    // The permit inside `Gpu` covers the integration tests as it does the unit tests.
    assert_eq!(granted, keys(&WITH_PERMIT));

    let out = report(&slots, false);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(reported_escapes(&shown), expected, "{shown}");
    assert!(
        shown.contains("loaded a GPU driver without a permit: 3 "),
        "{shown}"
    );
    assert!(shown.contains("libvulkan_lvp.so"), "{shown}");
    assert!(shown.contains("libcuda.so.1"), "{shown}");
    // The option that fails a CI step on them.
    let out = report(&slots, true);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("3 tests loaded a GPU driver without a permit"),
        "{}",
        text(&out)
    );

    // After that one watched run, `nextest-snippet` alone prints a tool config whose group
    // names exactly the tests that loaded a driver (with a permit or without), and nextest
    // reads it.
    let mut loaded = expected.clone();
    loaded.extend(keys(&WITH_PERMIT));
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    let out = c
        .arg("nextest-snippet")
        .env(gpu_test_permit::config::DIR_VAR, &slots)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let config = String::from_utf8(out.stdout).unwrap();
    assert!(!config.contains("test(/gpu/)"), "{config}");
    let filter = config
        .split("filter = '''\n")
        .nth(1)
        .and_then(|rest| rest.split("\n'''").next())
        .unwrap_or_else(|| panic!("no learned filter in:\n{config}"));
    let file = work.path().join("gpu-test-permit.toml");
    std::fs::write(&file, &config).unwrap();
    let mut tool = std::ffi::OsString::from("gpu-test-permit:");
    tool.push(&file);
    let out = cargo()
        .args([
            "nextest",
            "list",
            "--offline",
            "-p",
            ADOPTER,
            "--target-dir",
        ])
        .arg(target())
        .arg("--tool-config-file")
        .arg(&tool)
        .args(["--message-format", "json", "-E", filter])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{config}", text(&out));
    assert_eq!(listed_matches(&out.stdout), loaded, "{config}");
}

/// The tests a `cargo nextest list --message-format json` listing says match its filter, as
/// (binary id, name).
fn listed_matches(listing: &[u8]) -> BTreeSet<(String, String)> {
    let listing: serde_json::Value = serde_json::from_slice(listing).unwrap();
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

#[test]
fn unwatched_a_test_that_keeps_its_driver_loaded_is_still_named() {
    // Without a watcher each test process looks at its own maps as it exits: the CUDA driver
    // that the suite's bindings keep loaded is there; wgpu has unloaded the Vulkan drivers by
    // then, which only a watched run sees.
    gpu_test_permit::require_backend!(Backend::Wgpu);
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");
    run_nextest(&slots, false);
    let (escaped, seen, granted) = recorded(&slots);
    assert_eq!(escaped, keys(&[CUDA_RAW]));
    assert_eq!(seen, BTreeSet::from(["mapped".to_string()]));
    assert_eq!(granted, keys(&WITH_PERMIT));
    let shown = text(&report(&slots, false));
    assert_eq!(reported_escapes(&shown), keys(&[CUDA_RAW]), "{shown}");
    assert!(shown.contains("still mapped when looked at"), "{shown}");
    // The wgpu tests that escaped went unseen: the CI step that asks fails, saying why, beside
    // the escape it did see.
    let out = report(&slots, true);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for says in [
        "1 test loaded a GPU driver without a permit",
        "was not watched, so --fail-on-unpermitted cannot tell",
    ] {
        assert!(text(&out).contains(says), "not {says:?}: {}", text(&out));
    }
}

/// README's self dev-dependency keeps the crate's default features off: `cargo test
/// --no-default-features` tests the crate without them, `cargo test` with them, and the
/// permits are on either way.
#[test]
fn the_self_dev_dependency_leaves_the_default_features_to_the_command_line() {
    for (flags, asked) in [(&["--no-default-features"][..], "off"), (&[][..], "on")] {
        let mut c = cargo();
        c.args(["test", "--offline", "-p", ADOPTER, "--lib", "--target-dir"])
            .arg(target())
            .args(flags)
            .args(["--", "default_features_follow_the_command_line"])
            .env("ADOPTER_DEFAULTS", asked);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{asked}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "{asked}: {}",
            text(&out)
        );
    }
}

#[test]
fn cargo_test_names_the_binary_that_loaded_a_driver_before_its_first_permit() {
    gpu_test_permit::require_backend!(Backend::Wgpu);
    let work = tempdir();
    // One thread, so the tests run in name order: `cuda_raw_from_outside` loads the CUDA
    // driver (and keeps it), then `gpu_doubles_from_outside` takes the binary's first permit.
    let mut c = cargo();
    c.args(["test", "--offline", "-p", ADOPTER, "--target-dir"])
        .arg(target())
        .args(["--test", "integration", "--"])
        .args(["--test-threads", "1"])
        .env(gpu_test_permit::config::DIR_VAR, work.path().join("slots"));
    with_stub_cuda(&mut c);
    let out = c.output().unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(
            "gpu-test-permit: test binary integration had a GPU driver loaded before its first \
             permit (libcuda.so.1)"
        ),
        "{shown}"
    );

    // Watched (`gpu-test-permit watch` as the target runner), every binary that loaded a driver
    // without a permit is named, the Vulkan drivers wgpu unloaded again included. A process
    // holds a permit while any of its threads does, so one test thread at a time: a driver
    // loaded beside another thread's permit counts as loaded with one.
    let mut c = cargo();
    c.args(["test", "--offline", "-p", ADOPTER, "--target-dir"])
        .arg(target())
        .args(["--", "--test-threads", "1"])
        .env(runner_var(), format!("{} watch --", bin().display()))
        .env(gpu_test_permit::config::DIR_VAR, work.path().join("slots"));
    let out = c.output().unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let named: Vec<&str> = shown
        .lines()
        .filter(|l| l.contains("loaded a GPU driver while it held no permit"))
        .collect();
    assert_eq!(named.len(), 2, "{shown}");
    assert!(
        named.iter().any(|l| l.contains("/integration-"))
            && named
                .iter()
                .any(|l| l.contains(&format!("/{}-", ADOPTER.replace('-', "_")))),
        "{named:?}"
    );
    assert!(
        named.iter().all(|l| l.contains("libvulkan_lvp.so")),
        "{named:?}"
    );
}

#[test]
fn find_gpu_tests_names_exactly_the_gpu_tests_that_fall_back_to_the_cpu() {
    gpu_test_permit::require_backend!(Backend::Wgpu);
    if !have_nextest() {
        return;
    }
    let find = |by: &str| {
        let mut c = Command::new(bin());
        clear_permit_env(&mut c);
        c.current_dir(crate::util::workspace_root())
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .args(["find-gpu-tests", "--by", by, "--"])
            .args(["--offline", "-p", ADOPTER, "-j", "4", "--target-dir"])
            .arg(target());
        with_stub_cuda(&mut c);
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let out = find("loads");
    let shown = text(&out);
    let named: BTreeSet<(String, String)> = shown
        .lines()
        .filter_map(|l| l.strip_prefix("find-gpu-tests: GPU test "))
        .map(|l| {
            let (key, _) = l.split_once(": ").unwrap();
            let (binary, test) = key.split_once(' ').unwrap();
            (binary.to_string(), test.to_string())
        })
        .collect();
    let mut gpu = keys(&WITH_PERMIT);
    gpu.extend(keys(&ESCAPING));
    gpu.insert((CUDA_RAW.0.into(), CUDA_RAW.1.into()));
    assert_eq!(named, gpu, "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("found: 7 of the 10 tests run"), "{stdout}");
    assert!(stdout.contains("test(=tests::gpu_doubles)"), "{stdout}");
    assert!(!stdout.contains("cpu_sums"), "{stdout}");

    // With every driver hidden these tests pass on the CPU: nothing tells them apart.
    let out = find("hidden");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("found: 0 of the 10 tests run"), "{stdout}");
}

#[test]
fn a_probe_under_watch_answers_as_it_does_without() {
    // The probe child inherits the loader's log settings: its answer must come through
    // unharmed, its loads are its own (not the watched process's), and `watch` ends as the
    // command did.
    let probe = |mode: &str, require: &str| {
        let mut c = Command::new(bin());
        clear_permit_env(&mut c);
        c.args(["watch", "--"])
            .arg(bin())
            .args(["probe", "--json", "cuda"])
            .env("CUDA_PROBE_STUB", mode)
            .env(gpu_test_permit::config::REQUIRE_VAR, require);
        with_stub_cuda(&mut c);
        c.output().unwrap()
    };
    let out = probe("ok", "none");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backends"][0]["outcome"]["status"], "devices", "{v}");
    assert_eq!(v["backends"][0]["source"], "child", "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("loaded a GPU driver"), "{stderr}");

    let out = probe("nodevice", "cuda");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backends"][0]["outcome"]["status"], "no_devices", "{v}");
}
