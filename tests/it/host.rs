//! Host slots: the cap across pools (separate open files, like separate processes) and the
//! slot directory's checks.

use std::thread;
use std::time::Duration;

use gpu_test_permit::config::Config;
use gpu_test_permit::host::HostError;
use gpu_test_permit::{AcquireError, PermitKind, PermitPool};

use crate::util::{pool, tempdir};

#[test]
fn two_pools_on_one_directory_share_the_cap() {
    let dir = tempdir();
    let a = pool(dir.path(), 1);
    let b = pool(dir.path(), 1);
    let held = a.try_acquire_for(Duration::from_millis(100)).unwrap();
    assert_eq!(held.slots(), 0..1);
    let err = b.try_acquire_for(Duration::from_millis(150)).unwrap_err();
    let AcquireError::Timeout(t) = err else {
        panic!("{err}")
    };
    // The other "process" is the same pid here; the host record names the holding test.
    assert_eq!(t.concurrency, 1);
    assert!(matches!(
        b.try_acquire(PermitKind::Shared),
        Err(AcquireError::WouldBlock)
    ));
    drop(held);
    let p = b.try_acquire_for(Duration::from_millis(100)).unwrap();
    assert_eq!(p.slots(), 0..1);
}

#[test]
fn a_waiting_pool_wakes_quickly_when_the_other_releases() {
    let dir = tempdir();
    let a = pool(dir.path(), 1);
    let b = pool(dir.path(), 1);
    let held = a.acquire();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let p = b.acquire();
            p.held_for()
        });
        thread::sleep(Duration::from_millis(100));
        let released = std::time::Instant::now();
        drop(held);
        waiter.join().unwrap();
        // Generous bound: the change watch wakes in microseconds, the fallback re-check in 25 ms.
        assert!(released.elapsed() < Duration::from_secs(2));
    });
}

#[test]
fn exclusive_takes_every_slot_of_the_host() {
    let dir = tempdir();
    let a = pool(dir.path(), 3);
    let b = pool(dir.path(), 3);
    let all = a.acquire_exclusive();
    assert_eq!(all.slots(), 0..3);
    assert!(matches!(
        b.try_acquire(PermitKind::Shared),
        Err(AcquireError::WouldBlock)
    ));
    drop(all);
    let one = b.acquire();
    // An exclusive request waits for the held slot, then gets all three.
    thread::scope(|s| {
        let e = s.spawn(|| {
            a.try_acquire_exclusive_for(Duration::from_secs(10))
                .map(|p| p.slots())
        });
        thread::sleep(Duration::from_millis(50));
        drop(one);
        assert_eq!(e.join().unwrap().unwrap(), 0..3);
    });
}

fn build_err(dir: &std::path::Path) -> String {
    match PermitPool::builder().slot_dir(dir).build() {
        Ok(_) => panic!("{} should be refused", dir.display()),
        Err(e @ HostError::Directory(_)) => e.to_string(),
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[cfg(unix)]
#[test]
fn unusable_and_insecure_directories_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempdir();

    let file = root.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let msg = build_err(&file);
    assert!(msg.contains("is not a directory"), "{msg}");

    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let msg = build_err(&link);
    assert!(msg.contains("symbolic link"), "{msg}");

    let open = root.path().join("world-writable");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let msg = build_err(&open);
    assert!(
        msg.contains("writable by everyone without the sticky bit") && msg.contains("chmod +t"),
        "{msg}"
    );
    // With the sticky bit (like /tmp) a shared directory is fine.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    PermitPool::builder().slot_dir(&open).build().unwrap();

    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me == 0 {
        // Root may create files anywhere its permissions allow; a directory owned by another
        // user is refused, and sysfs is a root-owned directory nobody can create files in.
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let msg = build_err(&theirs);
        assert!(msg.contains("owned by uid 65534"), "{msg}");
        let msg = build_err(std::path::Path::new("/sys/kernel"));
        assert!(msg.contains("not writable"), "{msg}");
    } else {
        let ro = root.path().join("read-only");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
        let msg = build_err(&ro);
        assert!(msg.contains("not writable"), "{msg}");
        // "/" is owned by root, not by us, but root-owned directories are allowed: it fails
        // on writability instead.
    }
}

#[test]
fn missing_directories_are_created_private() {
    let root = tempdir();
    let dir = root.path().join("a/b/slots");
    let pool = PermitPool::builder().slot_dir(&dir).build().unwrap();
    assert_eq!(pool.slot_dir(), Some(dir.as_path()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}

#[test]
fn a_relative_directory_from_the_environment_is_refused_not_replaced() {
    let cfg = Config::from_lookup(|n| (n == "GPU_TEST_PERMIT_DIR").then(|| "slots".into()));
    let gpu_test_permit::config::SlotDir::Invalid(msg) = cfg.slot_dir else {
        panic!()
    };
    assert!(msg.contains("not an absolute path"));
}
