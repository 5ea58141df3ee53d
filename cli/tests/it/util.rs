use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpu_test_permit::PermitPool;

/// A pool with its own slot directory, so tests never share slots with each other.
pub fn pool(dir: &Path, n: usize) -> PermitPool {
    PermitPool::builder()
        .concurrency(n)
        .slot_dir(dir)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("gtp-test")
        .tempdir()
        .unwrap()
}

/// The CLI: where nextest (or, for a test binary run by hand away from its build,
/// `CARGO_BIN_EXE_gpu-test-permit`) says it is at run time, as when the test binaries run from
/// an archive on another machine; else where it was built.
pub fn bin() -> PathBuf {
    run_time_path("NEXTEST_BIN_EXE_gpu-test-permit")
        .or_else(|| run_time_path("CARGO_BIN_EXE_gpu-test-permit"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpu-test-permit")))
}

/// The crate's directory (the stand-in drivers' sources are under it): where cargo or nextest
/// says it is at run time (nextest remaps it for an archive run on another machine), else where
/// it was built.
pub fn manifest_dir() -> PathBuf {
    run_time_path("CARGO_MANIFEST_DIR").unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The workspace's root: the library's crate (`src/`), the fixtures, README.md and the docs.
/// This test suite is the command-line crate's (`cli/`), one level below.
pub fn workspace_root() -> PathBuf {
    let dir = manifest_dir();
    dir.parent().map(Path::to_path_buf).unwrap_or(dir)
}

/// Scratch space for files the tests build (the stand-in drivers): `CARGO_TARGET_TMPDIR` when
/// set at run time, as `scripts/gpu-device.sh` does where the test binaries run away from the
/// tree that built them, else the build's own.
pub fn target_tmpdir() -> PathBuf {
    run_time_path("CARGO_TARGET_TMPDIR")
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

fn run_time_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Removes every variable of this crate and of nextest from `c`'s environment.
pub fn clear_permit_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("GPU_TEST_PERMIT_")
            || k.starts_with("NEXTEST_")
            || k == "REALIZAR_GPU_TEST_CONCURRENCY"
        {
            c.env_remove(&*k);
        }
    }
}

/// The standard output of `c`, run to its end, which must succeed (its standard error is the
/// failure's message).
pub fn stdout_of(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How many entries of `dir` have a name containing `part`.
pub fn files_named(dir: &Path, part: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(part)
        })
        .count()
}

/// The CLI with a clean permit environment pointing at `dir`.
pub fn cli(dir: &Path, n: usize) -> Command {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.env("GPU_TEST_PERMIT_DIR", dir)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", n.to_string());
    c
}

/// A `hold` child whose stdout lines arrive on a channel.
pub struct Holder {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Holder {
    pub fn spawn(mut cmd: Command) -> Holder {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Holder { child, lines }
    }

    /// Waits for the `held` line.
    pub fn held_within(&self, d: Duration) -> bool {
        matches!(self.lines.recv_timeout(d), Ok(l) if l.starts_with("held"))
    }

    /// Closes stdin: the holder releases and exits. Returns its status and stderr.
    pub fn release(mut self) -> (std::process::ExitStatus, String) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `sig` to process `pid`, a child of the test; it must exist.
#[cfg(unix)]
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) of a child of this test.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

/// A command left running by a `run` that was killed: it holds `run`'s slot through the
/// descriptor it inherited. Killed on drop, whatever the test's outcome.
#[cfg(unix)]
pub struct Orphan {
    /// The pid of the killed `run`, which the slot's record names.
    pub run: u32,
    pub command: libc::pid_t,
}

#[cfg(unix)]
impl Orphan {
    /// `run -- sleep 60` on `dir` (N = `n`, one GPU), with `run` killed once the command has
    /// started.
    pub fn start(dir: &Path, n: usize) -> Orphan {
        let mut run = cli(dir, n)
            .env("GPU_TEST_PERMIT_GPUS", "1")
            .args(["run", "--", "sh", "-c", "echo $$; exec sleep 60"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(run.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let orphan = Orphan {
            run: run.id(),
            command: line.trim().parse().unwrap(),
        };
        run.kill().unwrap();
        run.wait().unwrap();
        orphan
    }
}

#[cfg(unix)]
impl Drop for Orphan {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of the command the test started.
        unsafe { libc::kill(self.command, libc::SIGKILL) };
    }
}

/// Every `.rs` file below `dir`, appended to `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `setpriv` to `nobody`, where this test runs as root and `nobody` can run the CLI: the
/// command prefix that runs a command as another user.
#[cfg(unix)]
pub fn as_nobody() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let setpriv = "setpriv --reuid=65534 --regid=65534 --clear-groups";
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("{setpriv} '{}' help", bin().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| setpriv.to_string())
}

/// The executable of test target `test` of workspace package `package`, built (offline) into
/// `target_dir`: a fixture's test binary, run directly by the tests.
pub fn test_executable(package: &str, test: &str, target_dir: &Path) -> PathBuf {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    clear_permit_env(&mut c);
    let out = c
        .current_dir(manifest_dir())
        .args([
            "test",
            "--offline",
            "--no-run",
            "--message-format=json",
            "-p",
            package,
        ])
        .args(["--test", test])
        .arg("--target-dir")
        .arg(target_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == test)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the fixture's test executable")
}

/// cargo's target runner variable for this host (`CARGO_TARGET_<TRIPLE>_RUNNER`).
pub fn runner_var() -> String {
    let out = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host");
    format!(
        "CARGO_TARGET_{}_RUNNER",
        host.to_ascii_uppercase().replace('-', "_")
    )
}

/// README.md and every page of the guide (`docs/guide/`), joined: where a recipe or a promise
/// is written down for users.
pub fn readme_and_guide() -> String {
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs/guide"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cargo running these tests (`CARGO`), else `cargo` from `PATH`.
pub fn cargo_program() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// A finished command's standard output, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A finished command's standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A finished command's status and both outputs, for an assertion's message.
pub fn shown(o: &Output) -> String {
    format!(
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// Lets `h` go (closes its standard input) and asserts that it exited successfully.
pub fn release(h: Holder) {
    let (status, err) = h.release();
    assert!(status.success(), "{status}: {err}");
}

/// Waits until the request of process `pid` heads the queue of slot directory `slots` (holds
/// the gate with its record), `within` at most.
pub fn wait_for_head(slots: &Path, pid: u32, within: Duration) {
    let end = Instant::now() + within;
    loop {
        let s = gpu_test_permit::__private::host::status(slots).unwrap();
        if s.head.as_ref().is_some_and(|head| head.request.pid == pid) {
            return;
        }
        assert!(Instant::now() < end, "{pid} never headed the queue: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
