//! Names in a shared (1777) slot directory that another user takes first: the names a waiter
//! would give its wait file, known from its pid before it waits. Real processes: `hold`s of
//! the CLI, a waiter started stopped so that its pid is known, and the other user (`nobody`,
//! through `setpriv`) making things at its names.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Holder, bin, clear_permit_env, cli, tempdir};

const LONG: Duration = Duration::from_secs(10);
const NOBODY: u32 = 65534;

/// `setpriv` to `nobody`, where this test runs as root and `setpriv` works.
fn as_nobody() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let setpriv = "setpriv --reuid=65534 --regid=65534 --clear-groups";
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("{setpriv} true"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(setpriv)
}

/// `status` of `slots`, as printed.
fn status(slots: &Path) -> String {
    let out = cli(slots, 1)
        .args(["status", "--dir"])
        .arg(slots)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (for [`LONG`] at most) until `status` has a line that begins with `starts` and names
/// process `pid`; the last `status` printed, and whether it did.
fn named_within(slots: &Path, starts: &str, pid: u32) -> (bool, String) {
    let start = Instant::now();
    loop {
        let out = status(slots);
        let named = out
            .lines()
            .any(|l| l.starts_with(starts) && l.contains(&format!("pid {pid} ")));
        if named || start.elapsed() > LONG {
            return (named, out);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `hold` of one unit of `slots` at N = 1, held until its standard input closes.
fn hold(slots: &Path) -> Holder {
    let mut c = cli(slots, 1);
    c.arg("hold");
    Holder::spawn(c)
}

/// At N = 1 in a shared slot directory: a holder, a head of the queue waiting behind it, then
/// a waiter whose pid another user learns before it waits and makes things at its names with
/// `squat` (a shell command run as `nobody`, with `$SLOTS` and `$PID`), then a later request.
/// Checks that `status` names the waiter while it waits, and that the grants go in the order
/// of arrival: the head, the waiter, the later request. Returns the slot directory, the
/// waiter's pid and the directory that holds it (removed on drop).
fn squatted_waiter(squat: &str) -> Option<(PathBuf, u32, tempfile::TempDir)> {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root and setpriv (util-linux) to act as user nobody");
        return None;
    };
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let slots = dir.path().join("slots");
    std::fs::create_dir(&slots).unwrap();
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o1777)).unwrap();

    let first = hold(&slots);
    assert!(first.held_within(LONG), "the first hold was not granted");
    let head = hold(&slots);
    let (named, out) = named_within(&slots, "head of the queue", head.child.id());
    assert!(named, "the second hold did not head the queue:\n{out}");

    // The waiter, stopped before it starts: its pid is the shell's, which `exec` keeps.
    let mut c = Command::new("sh");
    clear_permit_env(&mut c);
    c.env("GPU_TEST_PERMIT_DIR", &slots)
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .args(["-c", "echo $$; read go; exec \"$0\" hold"])
        .arg(bin());
    let mut waiter = Holder::spawn(c);
    let pid: u32 = waiter
        .lines
        .recv_timeout(LONG)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let squatted = Command::new("sh")
        .arg("-c")
        .arg(format!("{setpriv} sh -c '{squat}'"))
        .env("SLOTS", &slots)
        .env("PID", pid.to_string())
        .output()
        .unwrap();
    assert!(
        squatted.status.success(),
        "{}",
        String::from_utf8_lossy(&squatted.stderr)
    );
    let stdin = waiter.child.stdin.as_mut().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();

    let (listed, out) = named_within(&slots, "waiting", pid);
    assert!(
        listed,
        "`status` never named the waiter (pid {pid}) whose names another user took:\n{out}"
    );
    let later = hold(&slots);
    let (listed, out) = named_within(&slots, "waiting", later.child.id());
    assert!(listed, "the later request was not listed:\n{out}");

    // The grants, one unit at a time: the head, then the waiter, then the later request.
    let (ended, err) = first.release();
    assert!(ended.success(), "{err}");
    assert!(head.held_within(LONG), "the head was not granted next");
    let (ended, err) = head.release();
    assert!(ended.success(), "{err}");
    let waiter_held = waiter.held_within(LONG);
    let later_held = later.lines.try_recv().ok();
    assert!(
        waiter_held,
        "the waiter (pid {pid}) was not granted after the head; the later request: {later_held:?}"
    );
    let (ended, err) = waiter.release();
    assert!(ended.success(), "{err}");
    assert!(
        later.held_within(LONG),
        "the later request was not granted last"
    );
    let (ended, err) = later.release();
    assert!(ended.success(), "{err}");
    Some((slots, pid, dir))
}

/// The owner of what is at `path` (not followed), and whether it is a directory.
fn owner(path: &Path) -> (u32, bool) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.is_dir())
}

/// Another user made directories at the waiter's wait-file name and at the name it staged that
/// file under: the waiter was never listed, and later requests overtook it.
#[test]
fn a_waiter_whose_names_another_user_took_is_listed_and_keeps_its_place() {
    let squat = r#"mkdir "$SLOTS/gpu0.wait.$PID" "$SLOTS/gpu0.new-wait.$PID""#;
    let Some((slots, pid, _dir)) = squatted_waiter(squat) else {
        return;
    };
    // What the other user made is theirs, left as it was.
    for name in [format!("gpu0.wait.{pid}"), format!("gpu0.new-wait.{pid}")] {
        assert_eq!(owner(&slots.join(&name)), (NOBODY, true), "{name}");
    }
}

/// Another user made a file at the waiter's wait-file name: neither the waiter (root, which a
/// sticky directory does not stop) nor `status` replaces or removes it.
#[test]
fn a_file_another_user_made_at_a_waiters_name_stays_theirs() {
    let squat = r#"touch "$SLOTS/gpu0.wait.$PID""#;
    let Some((slots, pid, _dir)) = squatted_waiter(squat) else {
        return;
    };
    let name = slots.join(format!("gpu0.wait.{pid}"));
    assert_eq!(owner(&name), (NOBODY, false), "replaced");
    // `status` and the sweeps of the waiters take unlocked wait files for the leftovers of dead
    // processes: this one is not this user's to remove.
    status(&slots);
    assert_eq!(owner(&name), (NOBODY, false), "removed by status");
}

/// The directory's shared files have fixed names, which another user may make first: a
/// directory at the layout's, the gate's, a slot's or `gpu0.notify`'s name fails the request
/// at once with an error naming it; at `gpu0.budget`'s or `gpu0.backfill`'s, the request is
/// granted without them.
#[test]
fn shared_files_another_user_took_fail_the_request_with_their_name_or_are_done_without() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root and setpriv (util-linux) to act as user nobody");
        return;
    };
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fatal = ["gpu0.layout", "gpu0.gate", "gpu0.slot0", "gpu0.notify"];
    for name in fatal.iter().chain(&["gpu0.budget", "gpu0.backfill"]) {
        let slots = dir.path().join(format!("slots-{name}"));
        std::fs::create_dir(&slots).unwrap();
        std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let taken = slots.join(name);
        let made = Command::new("sh")
            .arg("-c")
            .arg(format!("{setpriv} mkdir \"$TAKEN\""))
            .env("TAKEN", &taken)
            .status()
            .unwrap();
        assert!(made.success());
        let out = cli(&slots, 1)
            .env("GPU_TEST_PERMIT_TIMEOUT", "10s")
            .args(["hold", "--memory", "1G", "--for", "10ms"])
            .env("GPU_TEST_PERMIT_GPU_MEMORY", "8G")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if fatal.contains(name) {
            assert_eq!(out.status.code(), Some(2), "{name}: {stdout}{stderr}");
            assert!(
                stderr.contains(&taken.display().to_string()),
                "{name}: {stderr}"
            );
        } else {
            assert!(out.status.success(), "{name}: {stdout}{stderr}");
            assert!(stdout.contains("held"), "{name}: {stdout}{stderr}");
        }
        assert_eq!(owner(&taken), (NOBODY, true), "{name}");
    }
}
