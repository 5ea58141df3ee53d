//! Threads waiting inside a process, behind its permits and its request at the host slots, as
//! `status` shows them: a real process with several threads, a real slot directory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{cli, files_named, tempdir};

const ROLE: &str = "GTP_TEST_WAITERS_CHILD";
const THREADS: usize = 8;

/// The child: `THREADS` threads of one process take permits of one pool with N = 2 on the
/// slot directory in `ROLE`, and hold them until a file `release` appears there.
#[test]
#[ignore = "run by threads_waiting_in_a_process_show_in_status"]
fn waiters_child() {
    let Some(dir) = std::env::var_os(ROLE) else {
        return;
    };
    let dir = Path::new(&dir);
    let pool = crate::util::pool(dir, 2);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let permit = pool.acquire();
                while !dir.join("release").exists() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                drop(permit);
            });
        }
    });
}

fn child(dir: &Path) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    crate::util::clear_permit_env(&mut c);
    c.args([
        "--exact",
        "waiters::waiters_child",
        "--nocapture",
        "--include-ignored",
        "--test-threads",
        "1",
    ])
    .env(ROLE, dir)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

fn status(dir: &Path) -> String {
    let out = cli(dir, 2)
        .args(["status", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}

/// `status` until it shows `line`, for up to 20 s.
fn status_showing(dir: &Path, line: &str) -> String {
    let start = Instant::now();
    loop {
        let text = status(dir);
        if text.lines().any(|l| l.starts_with(line)) || start.elapsed() > Duration::from_secs(20) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn threads_waiting_in_a_process_show_in_status() {
    let dir = tempdir();
    let mut c = child(dir.path());
    let line = format!(
        "pid {}: {} threads waiting in-process (since ",
        c.id(),
        THREADS - 2
    );
    let text = status_showing(dir.path(), &line);
    assert!(text.lines().any(|l| l.starts_with(&line)), "{text}");
    assert!(!text.contains("waiting: nobody"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("held")).count(),
        2,
        "{text}"
    );
    // Released: the threads take their permits in turn and the process exits; its file goes
    // with its pool.
    std::fs::write(dir.path().join("release"), b"").unwrap();
    assert!(c.wait().unwrap().success());
    let text = status(dir.path());
    assert!(!text.contains("in-process"), "{text}");
    assert!(text.contains("waiting: nobody"), "{text}");
    assert_eq!(files_named(dir.path(), "threads"), 0);
}

#[test]
fn threads_of_a_killed_process_vanish_from_status() {
    let dir = tempdir();
    let mut c = child(dir.path());
    let line = format!("pid {}: {} threads waiting in-process", c.id(), THREADS - 2);
    let text = status_showing(dir.path(), &line);
    assert!(text.lines().any(|l| l.starts_with(&line)), "{text}");
    assert_eq!(files_named(dir.path(), "gpu0.threads."), 1);
    // SIGKILL: no destructor runs, the file stays behind, unlocked.
    c.kill().unwrap();
    c.wait().unwrap();
    assert_eq!(files_named(dir.path(), "gpu0.threads."), 1);
    let text = status(dir.path());
    assert!(!text.contains("in-process"), "{text}");
    assert!(text.contains("waiting: nobody"), "{text}");
    assert_eq!(
        files_named(dir.path(), "gpu0.threads."),
        0,
        "the leftover is removed"
    );
}
