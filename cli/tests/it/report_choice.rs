//! Which run `report` reads without `--run-id`: one of this user's, and only where no other
//! run of this user may be the one that just ended. Two jobs on one runner record runs side by
//! side; another user's run in a shared directory is never chosen.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use crate::util::{bin, cli, tempdir};

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `cmd` as a test process of nextest run `run` (test `test` of binary `jobs`).
fn test_process(run: &str, test: &str, mut cmd: Command) -> Output {
    cmd.env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_BINARY_ID", "jobs")
        .env("NEXTEST_TEST_NAME", test)
        .stdin(Stdio::null());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{run} {test}: {}", text(&out));
    out
}

/// A test that takes one permit for a millisecond.
fn holds(slots: &Path) -> Command {
    let mut c = cli(slots, 2);
    c.args(["hold", "--for", "1ms"]);
    c
}

/// [`holds`] under the driver watch, as the target runner runs a test: a run of it can say
/// that no test loaded a driver without a permit.
fn holds_watched(slots: &Path) -> Command {
    let mut c = cli(slots, 2);
    c.args(["watch", "--"])
        .arg(bin())
        .args(["hold", "--for", "1ms"]);
    c
}

fn report(slots: &Path, args: &[&str]) -> Output {
    cli(slots, 2)
        .args(["report", "--dir"])
        .arg(slots)
        .args(args)
        .output()
        .unwrap()
}

/// Sets the time run `run`'s file in `slots` was last written to `ago` before now.
fn written_ago(slots: &Path, run: &str, ago: Duration) {
    let file = std::fs::File::options()
        .append(true)
        .open(slots.join(format!("gpu0.run.{run}")))
        .unwrap();
    file.set_modified(SystemTime::now() - ago).unwrap();
}

/// Job A's test loads a driver (the stand-in libcuda) without a permit; job B, beside it on
/// the same runner, records one permit a moment later. Job A's `report` must not read job B's
/// run: it refuses, naming both, until the run is named.
#[test]
fn report_refuses_to_guess_between_runs_side_by_side() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let libcuda = crate::stub::driver_dir("cuda_probe").join("libcuda.so.1");
    let job_a = crate::icd::watched_child(&slots, &[&libcuda]);
    test_process("job-a", "escapes", job_a);
    test_process("job-b", "holds", holds_watched(&slots));

    let out = report(&slots, &["--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for says in [
        "2 runs of this user in",
        "may be the run that just ended, newest first: job-b (last written ",
        ", job-a (last written ",
        "name the run with --run-id ID",
        "Nextest run ID <uuid>",
    ] {
        assert!(stderr.contains(says), "not {says:?}: {}", text(&out));
    }
    assert!(out.stdout.is_empty(), "{}", text(&out));

    let out = report(&slots, &["--run-id", "job-a", "--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  jobs escapes: loaded libcuda.so.1")),
        "{}",
        text(&out)
    );
    let out = report(&slots, &["--run-id", "job-b", "--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Job A ended well before job B began: job B's run is the one that just ended.
    written_ago(&slots, "job-a", 4 * gpu_test_permit_cli::records::BESIDE);
    let out = report(&slots, &["--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("run job-b ("), "{}", text(&out));
}

/// `setpriv` to `nobody`, where this test runs as root.
fn as_nobody() -> Option<Command> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let mut c = Command::new("setpriv");
    crate::util::clear_permit_env(&mut c);
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    Some(c)
}

/// In a shared slot directory another user records a run after this user's: `report` reads
/// this user's, and says so when this user has none.
#[test]
fn report_leaves_out_another_users_runs() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(mut nobody) = as_nobody() else {
        panic!("needs root and setpriv: run as root, as CI does");
    };
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let slots = dir.path().join("slots");
    std::fs::create_dir(&slots).unwrap();
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o1777)).unwrap();

    test_process("mine", "holds", holds(&slots));
    written_ago(&slots, "mine", 4 * gpu_test_permit_cli::records::BESIDE);
    nobody
        .arg(bin())
        .args(["hold", "--for", "1ms"])
        .env("GPU_TEST_PERMIT_DIR", &slots)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2");
    test_process("theirs", "holds", nobody);
    let theirs = slots.join("gpu0.run.theirs");
    assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), 65534);

    let out = report(&slots, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("run mine ("), "{}", text(&out));
    // Named, it is read.
    let out = report(&slots, &["--run-id", "theirs"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("run theirs ("));

    std::fs::remove_file(slots.join("gpu0.run.mine")).unwrap();
    let out = report(&slots, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no run recorded in")
            && stderr.contains(" by this user (")
            && stderr
                .contains("; 1 run of other users is there, which `report` reads only when named"),
        "{}",
        text(&out)
    );
}

/// A test process that loads a GPU driver without a permit and unloads it again before it
/// exits, as a wgpu test does with its Vulkan drivers. Unwatched, nothing of it is seen, and
/// `report --fail-on-unpermitted` fails the run as one that cannot tell, saying how to watch
/// it, where it used to pass in silence; watched, the test is named. A watched run with no
/// escape passes.
#[test]
fn an_unwatched_run_cannot_pass_fail_on_unpermitted() {
    let dir = tempdir();
    let slots = dir.path().join("slots");
    let libcuda = crate::stub::driver_dir("cuda_probe").join("libcuda.so.1");
    let loads_and_unloads = |watched: bool| {
        let args = crate::icd::child_args();
        let mut c = if watched {
            let mut c = cli(&slots, 2);
            c.args(["watch", "--"]).args(&args);
            c
        } else {
            let mut c = Command::new(&args[0]);
            crate::util::clear_permit_env(&mut c);
            c.args(&args[1..])
                .env("GPU_TEST_PERMIT_DIR", &slots)
                .env("REALIZAR_GPU_TEST_CONCURRENCY", "2");
            c
        };
        c.env(crate::icd::LOAD_VAR, &libcuda)
            .env(crate::icd::UNLOAD_VAR, "1");
        c
    };

    // The run records the test (a permit taken beside it makes its records certain to exist).
    test_process("unwatched", "loads_and_unloads", loads_and_unloads(false));
    test_process("unwatched", "holds", holds(&slots));
    let out = report(&slots, &["--run-id", "unwatched", "--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for says in [
        "run unwatched was not watched, so --fail-on-unpermitted cannot tell",
        "gpu-test-permit watch --",
    ] {
        assert!(stderr.contains(says), "not {says:?}: {}", text(&out));
    }
    assert!(
        !stderr.contains("loaded a GPU driver without a permit ("),
        "{}",
        text(&out)
    );
    // Without the option the report still reads, and says what it cannot have seen.
    let out = report(&slots, &["--run-id", "unwatched"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("this run was not watched"),
        "{}",
        text(&out)
    );

    test_process("watched", "loads_and_unloads", loads_and_unloads(true));
    let out = report(&slots, &["--run-id", "watched", "--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  jobs loads_and_unloads: loaded libcuda.so.1")),
        "{}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("was not watched"),
        "{}",
        text(&out)
    );

    test_process("clean", "holds", holds_watched(&slots));
    let out = report(&slots, &["--run-id", "clean", "--fail-on-unpermitted"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
