//! A slot directory that other users write (mode 1777, as the guide's shared-runner recipe
//! makes it): what another user writes may change the order of grants, never raise this
//! user's N, lose this user's records or hold up its first test (docs/protocol.md, "Who may
//! write what"). The other user is `nobody`, through `setpriv`, where the tests run as root.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::util::{Holder, as_nobody, bin, cli, shown, tempdir};

const LONG: Duration = Duration::from_secs(30);

/// A slot directory of mode 1777 in a fresh temporary directory that `nobody` may enter.
fn shared_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let slots = dir.path().join("slots");
    std::fs::create_dir(&slots).unwrap();
    std::fs::set_permissions(&slots, std::fs::Permissions::from_mode(0o1777)).unwrap();
    (dir, slots)
}

/// Runs `script` as `nobody` (`setpriv`) under `sh -c`, with `$SLOTS` set to `slots`.
fn nobody_runs(setpriv: &str, slots: &Path, script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{setpriv} sh -c '{script}'"))
        .env("SLOTS", slots)
        .env("BIN", bin())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A `hold` of this user's at N = `n` in `slots`, with a deadline of `timeout`: its output.
fn hold_once(slots: &Path, n: usize, timeout: &str) -> Output {
    cli(slots, n)
        .env("GPU_TEST_PERMIT_TIMEOUT", timeout)
        .args(["hold", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Finding 1: the layout file was writable by everyone, and one plain write of
/// `{"v":1,"per_gpu":3,"gpus":1}` over its start made the next process configured with N = 1
/// adopt N = 3 and take a second slot beside the first holder's.
#[test]
fn another_users_write_over_the_layout_raises_nobodys_n() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let (_dir, slots) = shared_dir();
    let first = Holder::spawn({
        let mut c = cli(&slots, 1);
        c.arg("hold");
        c
    });
    assert!(first.held_within(LONG));
    // No lock, no process of the crate: a plain write over the record's start.
    let wrote = nobody_runs(
        &setpriv,
        &slots,
        r#"printf "{\"v\":1,\"per_gpu\":3,\"gpus\":1}" | dd of="$SLOTS/gpu0.layout" conv=notrunc 2>&1"#,
    );
    let second = hold_once(&slots, 1, "1s");
    let (status, _) = first.release();
    assert!(status.success());
    assert!(
        !second.status.success(),
        "a process at N = 1 was granted beside the first holder after another user wrote the \
         layout (the write: {})\n{}",
        shown(&wrote),
        shown(&second)
    );
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("gave up"),
        "{}",
        shown(&second)
    );
}

/// A layout another user set (its file theirs, which only they may write) with more permits
/// per GPU than this process's N is declined: this process is granted only while at most its
/// own N units are held, and says who set the layout.
#[test]
fn a_layout_another_user_set_higher_holds_this_users_processes_to_their_own_n() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let (dir, slots) = shared_dir();
    let held = dir.path().join("held");
    // The other user lays the directory out at N = 3 and holds one unit for a while.
    let mut theirs = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{setpriv} env GPU_TEST_PERMIT_DIR=\"$SLOTS\" REALIZAR_GPU_TEST_CONCURRENCY=3 \
             \"$BIN\" hold --for 4s >'{}' 2>&1",
            held.display()
        ))
        .env("SLOTS", &slots)
        .env("BIN", bin())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&held).is_ok_and(|t| t.contains("held")) {
        assert!(start.elapsed() < LONG, "the other user's hold never held");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mine = hold_once(&slots, 1, "1s");
    let mine_text = shown(&mine);
    let two = hold_once(&slots, 2, "10s");
    theirs.wait().unwrap();
    assert!(
        !mine.status.success(),
        "granted at N = 1 beside the other user's holder: {mine_text}"
    );
    assert!(mine_text.contains("uid 65534"), "{mine_text}");
    assert!(mine_text.contains("declines"), "{mine_text}");
    // At N = 2 it is granted beside the other user's one unit: 2 units held, its own N.
    assert!(two.status.success(), "{}", shown(&two));
}

/// Finding 3: pruning counted every user's run files towards the 32 it keeps but could remove
/// only this user's, so another user's files dated ahead made each new run of this user's
/// delete its previous run's records.
#[test]
fn another_users_run_files_cost_this_user_no_record() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let (_dir, slots) = shared_dir();
    let flood = nobody_runs(
        &setpriv,
        &slots,
        r#"i=0; while [ $i -lt 40 ]; do echo x > "$SLOTS/gpu0.run.theirs$i"; touch -d "+1 day" "$SLOTS/gpu0.run.theirs$i"; i=$((i+1)); done"#,
    );
    assert!(flood.status.success(), "{}", shown(&flood));
    let run = |id: &str| {
        let out = cli(&slots, 2)
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", id)
            .args(["hold", "--for", "1ms"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", shown(&out));
    };
    run("run-a");
    let records = slots.join("gpu0.run.run-a");
    let written = std::fs::metadata(&records).unwrap().len();
    assert!(written > 0);
    // Only its owner may write a run's file: the other user can neither empty nor forge it.
    let emptied = nobody_runs(
        &setpriv,
        &slots,
        r#"truncate -s 0 "$SLOTS/gpu0.run.run-a" 2>&1; echo "{}" >> "$SLOTS/gpu0.run.run-a" 2>&1"#,
    );
    assert_eq!(
        std::fs::metadata(&records).unwrap().len(),
        written,
        "another user changed this user's run records: {}",
        shown(&emptied)
    );
    run("run-b");
    assert!(
        slots.join("gpu0.run.run-a").exists(),
        "the previous run's records were removed"
    );
    let report = cli(&slots, 2)
        .args(["report", "--run-id", "run-a"])
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", shown(&report));
    // The other user's files are still theirs and all there.
    let theirs = std::fs::read_dir(&slots)
        .unwrap()
        .filter(|e| {
            e.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("gpu0.run.theirs")
            })
        })
        .count();
    assert_eq!(theirs, 40);
}

/// Bytes the process `pid` has read so far (`rchar` of `/proc/<pid>/io`).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    for line in io.lines() {
        if let Some(n) = line.strip_prefix("rchar: ") {
            return n.trim().parse().unwrap();
        }
    }
    panic!("no rchar in /proc/{pid}/io: {io}")
}

/// What the first process of nextest run `id` read (with learning on) by the time it held its
/// permit, in bytes.
fn first_process_reads(slots: &Path, id: &str) -> u64 {
    let holder = Holder::spawn({
        let mut c = cli(slots, 2);
        c.env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", id)
            .env("GPU_TEST_PERMIT_WEIGHTS", "learned")
            .arg("hold");
        c
    });
    assert!(holder.held_within(LONG));
    let read = bytes_read(holder.child.id());
    let (status, err) = holder.release();
    assert!(status.success(), "{err}");
    read
}

/// Finding 4: the first process of every run measured every user's unmeasured run files, up
/// to 64 MiB each, and measured again next run those that measured to nothing: seconds before
/// the first request, outside every timeout. Now it reads this user's runs alone, and a run
/// that measures to nothing is read once.
#[test]
fn the_first_test_of_a_run_reads_no_other_users_runs_and_reads_a_run_once() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let (_dir, slots) = shared_dir();
    const MIB: u64 = 1 << 20;
    // Another user's runs: four of 16 MiB, dated ahead.
    let flood = nobody_runs(
        &setpriv,
        &slots,
        r#"for i in 1 2 3 4; do head -c 16777216 /dev/zero | tr "\0" "x" > "$SLOTS/gpu0.run.big$i"; done"#,
    );
    assert!(flood.status.success(), "{}", shown(&flood));
    let first = first_process_reads(&slots, "run-1");
    assert!(
        first < 8 * MIB,
        "the first process read {first} bytes: other users' run files"
    );
    // This user's own run that measures to nothing (8 MiB of garbage): read once, by the next
    // run's first process, and not again while it does not grow.
    let own = slots.join("gpu0.run.garbage");
    std::fs::write(&own, vec![b'y'; (8 * MIB) as usize]).unwrap();
    let second = first_process_reads(&slots, "run-2");
    assert!(
        second >= 8 * MIB,
        "read {second} bytes: this user's run was not measured"
    );
    let third = first_process_reads(&slots, "run-3");
    assert!(
        third < 4 * MIB,
        "the third run read {third} bytes: a run that measured to nothing was read again"
    );
}

/// A process that keeps the layout file locked (another user's `flock`, or one stopped while
/// laying the directory out) holds a test up to its own deadline at most, not the ten seconds
/// a layout is waited for otherwise.
#[test]
fn a_layout_kept_locked_by_another_user_holds_a_test_up_no_longer_than_its_timeout() {
    let Some(setpriv) = as_nobody() else {
        eprintln!("not run: needs root, setpriv and a CLI that user nobody may run");
        return;
    };
    let (_dir, slots) = shared_dir();
    // The directory laid out by this user first, then locked by the other one.
    assert!(hold_once(&slots, 1, "10s").status.success());
    let mut locker = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{setpriv} flock -x \"$SLOTS/gpu0.layout\" sleep 20"
        ))
        .env("SLOTS", &slots)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Until the lock is taken: `flock -n` fails.
    let start = std::time::Instant::now();
    while Command::new("flock")
        .args(["-n", "-s"])
        .arg(slots.join("gpu0.layout"))
        .arg("true")
        .status()
        .unwrap()
        .success()
    {
        assert!(
            start.elapsed() < LONG,
            "the other user never locked the layout"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let asked = std::time::Instant::now();
    let out = hold_once(&slots, 1, "1s");
    let took = asked.elapsed();
    let _ = locker.kill();
    let _ = locker.wait();
    assert!(!out.status.success(), "{}", shown(&out));
    assert!(shown(&out).contains("no agreed layout"), "{}", shown(&out));
    assert!(
        took < Duration::from_secs(6),
        "a layout locked by another user held the test up {took:?} with a deadline of 1s"
    );
}
