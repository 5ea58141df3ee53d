//! `gpu-test-permit ci -- <test command>` with real processes, under `cargo nextest run` and
//! `cargo test`: `fixtures/verdicts` (a test that fails, a process that crashes after its
//! tests) and `fixtures/adopter` (a test that loads the stand-in CUDA driver without a
//! permit), each run's nextest configuration a file of the test's own (`--config-file`), so
//! that its JUnit report is its own. And the example GitHub Actions workflow
//! (`examples/ci/github-gpu-runner.yml`): its `ci` line parses, and its nextest profile writes
//! a JUnit report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::recipes::have_nextest;
use crate::util::{
    bin, cargo_program, clear_permit_env, shown, stderr, stdout, target_tmpdir, tempdir,
    workspace_root,
};

/// `gpu-test-permit ci FLAGS -- COMMAND` in the workspace, with slot directory `slots` and
/// `env`.
fn ci(flags: &[&str], command: &[OsString], slots: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CARGO_TARGET_") {
            c.env_remove(k);
        }
    }
    c.current_dir(workspace_root())
        .arg("ci")
        .args(flags)
        .arg("--")
        .args(command)
        .env("GPU_TEST_PERMIT_DIR", slots)
        .env("GPU_TEST_PERMIT_EXIT_GRACE", "1s")
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn os(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

/// A nextest configuration of a test's own in `work`: profile `citest` writes its JUnit report
/// under `work/store`. Returns the arguments that use it and where the report lands.
fn nextest_config(work: &Path) -> (Vec<OsString>, PathBuf) {
    let file = work.join("nextest.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\ndir = \"{}\"\n\n[profile.citest]\nfail-fast = false\n\n\
             [profile.citest.junit]\npath = \"junit.xml\"\n",
            work.join("store").display()
        ),
    )
    .unwrap();
    let mut args = os(&["--config-file"]);
    args.push(file.into());
    args.extend(os(&["--profile", "citest"]));
    (args, work.join("store/citest/junit.xml"))
}

/// `cargo nextest run` of the verdicts fixture, with the configuration in `work`.
fn verdicts_nextest(work: &Path) -> (Vec<OsString>, PathBuf) {
    let mut command = vec![cargo_program()];
    command.extend(os(&[
        "nextest",
        "run",
        "--offline",
        "-p",
        "gpu-test-permit-verdicts",
        "--test",
        "suite",
        "--status-level",
        "fail",
        "--target-dir",
    ]));
    command.push(target_tmpdir().join("verdicts").into());
    let (config, junit) = nextest_config(work);
    command.extend(config);
    (command, junit)
}

/// `cargo test` of the verdicts fixture.
fn verdicts_cargo_test() -> Vec<OsString> {
    let mut command = vec![cargo_program()];
    command.extend(os(&[
        "test",
        "--offline",
        "-p",
        "gpu-test-permit-verdicts",
        "--test",
        "suite",
        "--target-dir",
    ]));
    command.push(target_tmpdir().join("verdicts").into());
    command
}

/// A clean run passes and says it was watched; a failing test fails `ci` with the command's
/// code; a teardown fault passes by default, is marked in the JUnit report, and fails with
/// `--fail-on-teardown`; all under nextest.
#[test]
fn under_nextest_ci_watches_marks_the_junit_report_and_judges() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");

    let (command, junit) = verdicts_nextest(work.path());
    let out = ci(&[], &command, &slots, &[]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stdout(&out).contains("watched 5 test processes"),
        "{}",
        shown(&out)
    );
    assert!(stdout(&out).starts_with("run "), "{}", shown(&out));
    assert!(
        stderr(&out).contains("recorded no skips and no verdicts; left unchanged"),
        "{}",
        shown(&out)
    );

    let out = ci(&[], &command, &slots, &[("VERDICTS_FAIL", "1")]);
    assert_eq!(out.status.code(), Some(100), "{}", shown(&out));
    assert!(
        stderr(&out).contains("gpu-test-permit: ci failed: the test command failed"),
        "{}",
        shown(&out)
    );

    // A teardown fault: passes by default, and the JUnit report says which tests had one.
    let out = ci(&[], &command, &slots, &[("VERDICTS_AT_EXIT", "segv")]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stdout(&out).contains("teardown (SIGSEGV), passed as its tests did"),
        "{}",
        shown(&out)
    );
    assert!(
        stderr(&out).contains("5 tests marked with a verdict"),
        "{}",
        shown(&out)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(
        xml.matches("<property name=\"gpu-test-permit.verdict\" value=\"teardown: SIGSEGV\"/>")
            .count(),
        5,
        "{xml}"
    );
    assert!(!xml.contains("<failure"), "{xml}");

    let out = ci(
        &["--fail-on-teardown"],
        &command,
        &slots,
        &[("VERDICTS_AT_EXIT", "segv")],
    );
    assert!(!out.status.success(), "{}", shown(&out));
    assert!(
        stderr(&out).contains("gpu-test-permit: ci failed: 5 teardown faults: "),
        "{}",
        shown(&out)
    );
    assert!(
        stderr(&out).contains("(--fail-on-teardown)"),
        "{}",
        shown(&out)
    );

    // --no-junit leaves the report as nextest wrote it.
    let out = ci(
        &["--no-junit"],
        &command,
        &slots,
        &[("VERDICTS_AT_EXIT", "segv")],
    );
    assert!(out.status.success(), "{}", shown(&out));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(!xml.contains("gpu-test-permit.verdict"), "{xml}");
}

/// Two `ci` runs side by side in one slot directory: each reads its own run (nextest's run id
/// from its own standard error), one with teardown faults, one without.
#[test]
fn two_ci_runs_side_by_side_in_one_slot_directory_each_report_their_own_run() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // Built once first, so that the two runs overlap in their tests, not in cargo's lock.
    let (command_a, junit_a) = verdicts_nextest(&a);
    let (command_b, junit_b) = verdicts_nextest(&b);
    let warm = ci(&["--no-junit"], &command_a, &work.path().join("warm"), &[]);
    assert!(warm.status.success(), "{}", shown(&warm));
    let (out_a, out_b) = std::thread::scope(|s| {
        let faulty = s.spawn(|| ci(&[], &command_a, &slots, &[("VERDICTS_AT_EXIT", "segv")]));
        let clean = s.spawn(|| ci(&[], &command_b, &slots, &[]));
        (faulty.join().unwrap(), clean.join().unwrap())
    });
    assert!(out_a.status.success(), "{}", shown(&out_a));
    assert!(out_b.status.success(), "{}", shown(&out_b));
    assert!(
        stdout(&out_a).contains("processes that failed after or around their tests: 5"),
        "{}",
        shown(&out_a)
    );
    assert!(
        !stdout(&out_b).contains("processes that failed after or around their tests"),
        "{}",
        shown(&out_b)
    );
    assert!(
        stdout(&out_b).contains("watched 5 test processes"),
        "{}",
        shown(&out_b)
    );
    let run_of = |out: &Output| {
        stdout(out)
            .strip_prefix("run ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .to_string()
    };
    let (run_a, run_b) = (run_of(&out_a), run_of(&out_b));
    assert_ne!(run_a, run_b);
    let uuid = |junit: &Path| {
        gpu_test_permit_cli::junit::report_run_id(junit)
            .unwrap()
            .unwrap()
    };
    assert_eq!(uuid(&junit_a), run_a);
    assert_eq!(uuid(&junit_b), run_b);
    assert!(
        std::fs::read_to_string(&junit_a)
            .unwrap()
            .contains("gpu-test-permit.verdict")
    );
    assert!(
        !std::fs::read_to_string(&junit_b)
            .unwrap()
            .contains("gpu-test-permit.verdict")
    );
}

/// Under `cargo test` (no run records): a clean run passes and says how many test binaries
/// were watched, a failing test fails `ci` with cargo's code, a teardown fault passes and
/// fails with `--fail-on-teardown`.
#[test]
fn under_cargo_test_ci_judges_what_the_watch_said() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let command = verdicts_cargo_test();

    let out = ci(&[], &command, &slots, &[]);
    assert!(out.status.success(), "{}", shown(&out));
    let said = stdout(&out);
    assert!(
        said.contains("a `cargo test` run has no run records"),
        "{}",
        shown(&out)
    );
    assert!(said.contains("watched 1 test binary"), "{}", shown(&out));
    assert!(said.contains("teardown faults: 0"), "{}", shown(&out));

    let out = ci(&[], &command, &slots, &[("VERDICTS_FAIL", "1")]);
    assert_eq!(out.status.code(), Some(101), "{}", shown(&out));
    assert!(
        stderr(&out).contains("gpu-test-permit: ci failed: the test command failed"),
        "{}",
        shown(&out)
    );

    let out = ci(&[], &command, &slots, &[("VERDICTS_AT_EXIT", "segv")]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stdout(&out).contains("teardown faults: 1"),
        "{}",
        shown(&out)
    );

    let out = ci(
        &["--fail-on-teardown"],
        &command,
        &slots,
        &[("VERDICTS_AT_EXIT", "segv")],
    );
    assert!(!out.status.success(), "{}", shown(&out));
    assert!(
        stderr(&out).contains("gpu-test-permit: ci failed: 1 teardown fault (--fail-on-teardown)"),
        "{}",
        shown(&out)
    );
}

/// A test that loads a GPU driver (the stand-in libcuda) without a permit fails `ci`, which
/// names it; `--allow-unpermitted` passes it. Under nextest and under `cargo test`.
#[test]
fn an_escape_fails_ci_and_is_named() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let cuda = crate::stub::driver_dir("cuda_probe");
    let cuda = cuda.to_str().unwrap();
    let mut command = vec![cargo_program()];
    let target = target_tmpdir().join("adopter");
    if have_nextest() {
        command.extend(os(&[
            "nextest",
            "run",
            "--offline",
            "-p",
            "gpu-test-permit-adopter",
            "--test",
            "integration",
            "--status-level",
            "fail",
            "--target-dir",
        ]));
        command.push(target.clone().into());
        let (config, _) = nextest_config(work.path());
        command.extend(config);
        command.extend(os(&[
            "-E",
            "test(=cuda_raw_from_outside) | test(=cpu_sums_from_outside)",
        ]));
        let out = ci(&[], &command, &slots, &[("LD_LIBRARY_PATH", cuda)]);
        assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
        assert!(
            stderr(&out).contains(
                "gpu-test-permit: ci failed: 1 test loaded a GPU driver without a permit: \
                 gpu-test-permit-adopter::integration cuda_raw_from_outside"
            ),
            "{}",
            shown(&out)
        );
        assert!(
            stdout(&out).contains("loaded a GPU driver without a permit: 1"),
            "{}",
            shown(&out)
        );
        assert!(
            stdout(&out).contains("watched 2 test processes"),
            "{}",
            shown(&out)
        );
        let out = ci(
            &["--allow-unpermitted"],
            &command,
            &slots,
            &[("LD_LIBRARY_PATH", cuda)],
        );
        assert!(out.status.success(), "{}", shown(&out));
    }

    let mut command = vec![cargo_program()];
    command.extend(os(&[
        "test",
        "--offline",
        "-p",
        "gpu-test-permit-adopter",
        "--test",
        "integration",
        "--target-dir",
    ]));
    command.push(target.into());
    command.extend(os(&["--", "--exact", "cuda_raw_from_outside"]));
    let out = ci(&[], &command, &slots, &[("LD_LIBRARY_PATH", cuda)]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stderr(&out).contains(
            "gpu-test-permit: ci failed: 1 test binary loaded a GPU driver without a permit"
        ),
        "{}",
        shown(&out)
    );
    assert!(stdout(&out).contains("libcuda.so.1"), "{}", shown(&out));
}

/// `--` is required, and a target runner the caller set already is refused, naming it (one
/// that is a `watch --` is kept).
#[test]
fn ci_refuses_a_runner_of_the_callers_and_a_command_without_dashes() {
    let work = tempdir();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    let out = c.args(["ci", "cargo", "test"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        stderr(&out).contains("put `--` before the test command"),
        "{}",
        shown(&out)
    );

    let host = String::from_utf8_lossy(&Command::new("rustc").arg("-vV").output().unwrap().stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .unwrap();
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_uppercase().replace('-', "_")
    );
    let command = os(&["cargo", "nextest", "run"]);
    let out = ci(&["--dry-run"], &command, work.path(), &[(&var, "valgrind")]);
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        stderr(&out).contains(&format!("{var} is set already, to `valgrind`")),
        "{}",
        shown(&out)
    );
    let ours = format!("{} watch --", bin().display());
    let out = ci(&["--dry-run"], &command, work.path(), &[(&var, &ours)]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(stdout(&out).contains("(set already)"), "{}", shown(&out));
    let out = ci(&["--dry-run"], &command, work.path(), &[]);
    assert!(
        stdout(&out).contains(&format!("target runner: {var}={ours}")),
        "{}",
        shown(&out)
    );
}

/// The example workflow: its `ci` line parses (`--dry-run`, in a project whose
/// `.config/nextest.toml` is the snippet the workflow shows), and the profile it names writes
/// the JUnit report the workflow publishes.
#[test]
fn the_example_workflow_runs_ci_with_a_profile_that_writes_a_junit_report() {
    let file = workspace_root().join("examples/ci/github-gpu-runner.yml");
    let yml = std::fs::read_to_string(&file).unwrap();
    // Not a workflow of this repository's.
    assert!(!file.starts_with(workspace_root().join(".github")));
    let line = yml
        .lines()
        .find_map(|l| l.trim().strip_prefix("run: gpu-test-permit ci "))
        .expect("a step that runs `gpu-test-permit ci`");
    let words: Vec<&str> = line.split_whitespace().collect();
    let dashes = words.iter().position(|w| *w == "--").expect("`--` in it");
    assert_eq!(
        &words[dashes + 1..],
        ["cargo", "nextest", "run", "--profile", "ci"]
    );
    // The nextest configuration the workflow's comments show, indented under `#`.
    let snippet: String = yml
        .lines()
        .skip_while(|l| !l.contains(".config/nextest.toml"))
        .skip(1)
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_start_matches('#').trim()))
        .collect();
    assert!(snippet.contains("[profile.ci.junit]"), "{snippet}");
    // The slot directory is the one the cache carries from job to job.
    let dir = yml
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("GPU_TEST_PERMIT_DIR: ${{ github.workspace }}/")
        })
        .expect("GPU_TEST_PERMIT_DIR in the workspace");
    let cached = yml
        .lines()
        .skip_while(|l| !l.contains("uses: actions/cache@"))
        .find_map(|l| l.trim().strip_prefix("path: "))
        .expect("a cache step");
    assert_eq!(cached, dir);

    let project = tempdir();
    let root = project.path();
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"ci-example\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "").unwrap();
    std::fs::create_dir_all(root.join(".config")).unwrap();
    std::fs::write(root.join(".config/nextest.toml"), &snippet).unwrap();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CARGO_TARGET_") {
            c.env_remove(k);
        }
    }
    let out = c
        .current_dir(root)
        .args(["ci", "--dry-run"])
        .args(&words)
        .env("GPU_TEST_PERMIT_DIR", root.join("slots"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shown(&out));
    let root = root.canonicalize().unwrap();
    let published = yml
        .lines()
        .skip_while(|l| !l.contains("uses: actions/upload-artifact@"))
        .find_map(|l| l.trim().strip_prefix("path: "))
        .expect("the step that publishes the report");
    assert_eq!(published, "target/nextest/ci/junit.xml");
    assert!(
        stdout(&out).contains(&format!(
            "JUnit report: {} ([profile.ci.junit] path in",
            root.join(published).display()
        )),
        "{}",
        shown(&out)
    );
}

/// `--group-file`: the run's GPU tests that the committed group file does not name are said,
/// and fail the step with `--fail-on-drift`; a file that names them all says so.
#[test]
fn ci_says_when_the_committed_gpu_test_group_no_longer_names_every_gpu_test() {
    if !have_nextest() {
        return;
    }
    let work = tempdir();
    let slots = work.path().join("slots");
    let (command, _) = verdicts_nextest(work.path());
    // Every test of the suite takes a permit: a group naming four of its five.
    let names = ["always_crashes", "beside_others", "one", "three", "two"];
    let group = |tests: &[&str]| {
        let file = work.path().join(format!("group-{}.toml", tests.len()));
        let filter: Vec<String> = tests.iter().map(|t| format!("test(={t})")).collect();
        std::fs::write(
            &file,
            format!(
                "[[profile.default.overrides]]\nfilter = '''\n\
                 (binary_id(=gpu-test-permit-verdicts::suite) & ({}))\n'''\n\
                 test-group = '@tool:gpu-test-permit:gpu'\n",
                filter.join(" | ")
            ),
        )
        .unwrap();
        file
    };
    let stale = group(&names[..4]);
    let flags = ["--group-file", stale.to_str().unwrap()];
    let out = ci(&flags, &command, &slots, &[]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stderr(&out).contains("does not name 1 test this run saw use the GPU")
            && stderr(&out).contains("gpu-test-permit-verdicts::suite two"),
        "{}",
        shown(&out)
    );
    let flags = ["--group-file", stale.to_str().unwrap(), "--fail-on-drift"];
    let out = ci(&flags, &command, &slots, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stderr(&out).contains("(--fail-on-drift)"),
        "{}",
        shown(&out)
    );
    let whole = group(&names);
    let flags = ["--group-file", whole.to_str().unwrap(), "--fail-on-drift"];
    let out = ci(&flags, &command, &slots, &[]);
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        stdout(&out).contains("names every one of this run's 5 GPU tests"),
        "{}",
        shown(&out)
    );
}
