//! Who holds a slot, as `status` and a wait that timed out name it, when the process in the
//! slot's record is gone but the lock is not: real processes, real slot files.

#![cfg(unix)]

use std::process::Stdio;

use crate::util::{Orphan, cli};

#[test]
fn status_says_that_the_commands_of_a_killed_run_hold_its_slot() {
    let dir = crate::util::tempdir();
    let orphan = Orphan::start(dir.path(), 1);
    let out = cli(dir.path(), 1)
        .args(["status", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let slot = text
        .lines()
        .find(|l| l.starts_with("slot 0: held"))
        .unwrap_or_else(|| panic!("slot 0 not held: {text}"));
    assert!(slot.contains(&format!("by pid {} ", orphan.run)), "{slot}");
    assert!(
        slot.contains(&format!(
            "(pid {} has exited; the processes it started still hold the slot through the \
             descriptor they inherited",
            orphan.run
        )),
        "{slot}"
    );
}

#[test]
fn a_timed_out_wait_says_that_the_commands_of_a_killed_run_hold_its_slot() {
    let dir = crate::util::tempdir();
    let orphan = Orphan::start(dir.path(), 1);
    let out = cli(dir.path(), 1)
        .env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "1s")
        .args(["hold", "--for", "1ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "held the slot of run's command: {err}"
    );
    let holder = err
        .lines()
        .find(|l| l.contains(&format!("pid {})", orphan.run)))
        .unwrap_or_else(|| panic!("run not named as the holder: {err}"));
    assert!(
        holder.contains(&format!(
            "; pid {} has exited, and the processes it started still hold its slot(s) through \
             the descriptors they inherited",
            orphan.run
        )),
        "{holder}"
    );
}
