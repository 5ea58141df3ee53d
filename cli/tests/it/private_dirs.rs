//! The private directories of `watch`, `run --watch` and `find-gpu-tests` in the temporary
//! directory, and the sweep of those that killed processes left behind, with real processes.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::util::{cli, tempdir};

/// Waits for `child` at most `within`; kills it (and fails) where it has not ended by then.
fn ends_within(child: &mut Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes `dir` look unchanged for two minutes, as far as the sweep can tell.
fn age(dir: &Path) {
    let then = std::time::SystemTime::now() - Duration::from_secs(120);
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

/// A FIFO at a left-behind directory's `owner` file (another process of this user made it, or
/// a stray `mkfifo`) is not a lock this crate took: the sweep of `watch` and `run --watch`
/// opens nothing that could wait for a writer, starts the command at once, and leaves that
/// directory where it is, while it still removes a directory that is really left behind.
#[test]
fn a_fifo_at_a_left_behind_owner_file_blocks_no_watch() {
    let slots = tempdir();
    let tmp = tempdir();
    let fifo_dir = tmp.path().join("gpu-test-permit-watch-4000000-0");
    let left = tmp.path().join("gpu-test-permit-watch-4000000-1");
    for dir in [&fifo_dir, &left] {
        std::fs::create_dir(dir).unwrap();
    }
    let status = std::process::Command::new("mkfifo")
        .arg(fifo_dir.join("owner"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(left.join("owner"), b"").unwrap();
    for dir in [&fifo_dir, &left] {
        age(dir);
    }
    for args in [
        &["watch", "--", "true"][..],
        &["run", "--watch", "--", "true"],
    ] {
        let mut child = cli(slots.path(), 2)
            .env("TMPDIR", tmp.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let status = ends_within(&mut child, Duration::from_secs(60), &args.join(" "));
        assert!(status.success(), "{args:?}: {status}");
    }
    let kind = std::fs::symlink_metadata(fifo_dir.join("owner"))
        .unwrap()
        .file_type();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&kind),
        "the FIFO's directory was not left alone"
    );
    assert!(!left.exists(), "a directory really left behind was kept");
}
