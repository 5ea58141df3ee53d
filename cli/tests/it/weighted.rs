//! Weighted and memory-declaring permits in one process: units, nesting, the checks that
//! fail at once, memory turned into units, and k units from one GPU.

use std::thread;
use std::time::Duration;

use gpu_test_permit::{AcquireError, PermitKind, PermitPool};

use crate::util::{pool, tempdir};

const GIB: u64 = 1 << 30;

/// A pool of N = 4 on `dir`'s slots, with `budget` bytes of GPU memory (none: no budget of
/// its own).
fn budget_pool(dir: &std::path::Path, budget: Option<u64>) -> PermitPool {
    let mut b = PermitPool::builder().concurrency(4).slot_dir(dir);
    if let Some(bytes) = budget {
        b = b.memory_budget(bytes);
    }
    b.build().unwrap()
}

#[test]
fn a_weighted_permit_holds_its_units_on_the_host_and_in_the_process() {
    let dir = tempdir();
    let a = pool(dir.path(), 4);
    let b = pool(dir.path(), 4);
    let heavy = a.acquire_weighted(3);
    assert_eq!((heavy.units(), heavy.slots().len()), (3, 3));
    thread::scope(|s| {
        s.spawn(|| {
            // One unit is left: in this pool and, through the slots, in the other one.
            let err = a.request().units(2).try_acquire().unwrap_err();
            assert!(matches!(err, AcquireError::WouldBlock), "{err}");
            let err = b.request().units(2).try_acquire().unwrap_err();
            assert!(matches!(err, AcquireError::WouldBlock), "{err}");
            let light = b.try_acquire(PermitKind::Shared).unwrap();
            assert_eq!(light.units(), 1);
            assert!(!heavy.slots().contains(&light.slots()[0]));
        });
    });
    drop(heavy);
    let all = b
        .request()
        .units(4)
        .acquire_for(Duration::from_secs(5))
        .unwrap();
    assert_eq!(all.slots(), [0, 1, 2, 3]);
}

#[test]
fn requests_that_can_never_be_served_fail_at_once() {
    let p = PermitPool::builder()
        .concurrency(4)
        .memory_budget(16 * GIB)
        .in_process_only()
        .build()
        .unwrap();
    let err = p
        .request()
        .units(5)
        .acquire_for(Duration::from_secs(60))
        .unwrap_err();
    assert!(
        matches!(
            err,
            AcquireError::TooLarge {
                asked: 5,
                per_gpu: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("only 4"), "{err}");
    let err = p.request().memory(17 * GIB).try_acquire().unwrap_err();
    assert!(matches!(err, AcquireError::MemoryTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("17 GiB"), "{err}");
    assert!(err.to_string().contains("16 GiB"), "{err}");
}

#[test]
fn declared_memory_takes_its_share_of_the_units() {
    let p = PermitPool::builder()
        .concurrency(4)
        .memory_budget(16 * GIB)
        .in_process_only()
        .build()
        .unwrap();
    for (bytes, units) in [
        (1, 1),
        (4 * GIB, 1),
        (4 * GIB + 1, 2),
        (6 * GIB, 2),
        (16 * GIB, 4),
    ] {
        let permit = p.request().memory(bytes).try_acquire().unwrap();
        assert_eq!(
            (permit.units(), permit.memory()),
            (units, Some(bytes)),
            "{bytes} bytes"
        );
    }
    // A weight and a declaration: the larger counts.
    let permit = p.request().units(3).memory(GIB).try_acquire().unwrap();
    assert_eq!(permit.units(), 3);
}

#[test]
fn without_a_budget_a_memory_declaration_counts_as_one_unit() {
    let p = PermitPool::builder()
        .concurrency(2)
        .in_process_only()
        .build()
        .unwrap();
    let permit = p.request().memory(100 * GIB).try_acquire().unwrap();
    assert_eq!(permit.units(), 1);
}

#[test]
fn nested_requests_use_a_large_enough_permit_and_refuse_a_larger_one() {
    let dir = tempdir();
    let p = pool(dir.path(), 4);
    let outer = p.acquire_weighted(2);
    assert!(p.acquire_weighted(2).is_nested());
    assert!(p.acquire().is_nested());
    let err = p.request().units(3).try_acquire().unwrap_err();
    assert!(
        matches!(
            err,
            AcquireError::NestedLarger {
                held: 2,
                asked: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("take the larger permit first"),
        "{err}"
    );
    assert!(matches!(
        p.try_acquire(PermitKind::Exclusive),
        Err(AcquireError::ExclusiveWhileShared)
    ));
    drop(outer);
    // The units all came back.
    assert_eq!(p.request().units(4).try_acquire().unwrap().units(), 4);
    let all = p.acquire_exclusive();
    assert_eq!(all.units(), 4);
    assert!(p.acquire_weighted(4).is_nested());
}

#[test]
fn a_weighted_permit_takes_its_units_from_one_gpu() {
    let dir = tempdir();
    // Spread placement: a one-unit permit takes the lowest free slot, so units are left on
    // both GPUs (best fit, the default, would fill GPU 0 first).
    let two_gpus = || {
        PermitPool::builder()
            .concurrency(2)
            .gpus(2)
            .placement(gpu_test_permit::host::Placement::Spread)
            .slot_dir(dir.path())
            .build()
            .unwrap()
    };
    let (p, other) = (two_gpus(), two_gpus());
    // Slot 0 (GPU 0) taken: GPU 0 has one unit left, GPU 1 has two.
    let light = p.acquire();
    assert_eq!(light.device(), Some(0));
    let heavy = other.acquire_weighted(2);
    assert_eq!((heavy.device(), heavy.slots()), (Some(1), vec![1, 3]));
    drop(heavy);
    // One unit taken on each GPU: two are free in all, but no GPU has two.
    let on_gpu1 = thread::scope(|s| s.spawn(|| p.acquire()).join().unwrap());
    assert_eq!(on_gpu1.device(), Some(1));
    let err = other.request().units(2).try_acquire().unwrap_err();
    assert!(matches!(err, AcquireError::WouldBlock), "{err}");
    drop(light);
    let heavy = other.acquire_weighted(2);
    assert_eq!((heavy.device(), heavy.slots()), (Some(0), vec![0, 2]));
}

#[test]
fn a_timed_out_weighted_wait_names_the_units() {
    let dir = tempdir();
    let a = pool(dir.path(), 3);
    let b = pool(dir.path(), 3);
    let heavy = a.acquire_weighted(2);
    let err = b
        .request()
        .units(2)
        .acquire_for(Duration::from_millis(100))
        .unwrap_err();
    let AcquireError::Timeout(t) = &err else {
        panic!("{err}")
    };
    assert_eq!(t.units, 2);
    assert_eq!(t.holders.len(), 1, "{err}");
    assert_eq!(t.holders[0].units, 2);
    let text = err.to_string();
    assert!(text.contains("for a 2-unit GPU permit"), "{text}");
    assert!(text.contains(", 2 units"), "{text}");
    drop(heavy);
}

#[test]
fn pools_sharing_a_directory_turn_memory_into_units_with_one_budget() {
    let dir = tempdir();
    let build = |budget| budget_pool(dir.path(), budget);
    let units = |p: &PermitPool| p.request().memory(6 * GIB).try_acquire().unwrap().units();
    // 16 GiB over N = 4: units of 4 GiB, so 6 GiB takes 2.
    let first = build(Some(16 * GIB));
    assert_eq!(units(&first), 2);
    // 8 GiB would make units of 2 GiB (3 for 6 GiB): the directory's budget counts instead,
    // and so it does for a pool without a budget of its own.
    let second = build(Some(8 * GIB));
    assert_eq!(units(&second), 2);
    let third = build(None);
    assert_eq!(units(&third), 2);
    drop((first, second, third));
    // Nobody uses the directory any more: the next pool's budget is the one. Under `cargo
    // test` another test's thread may be starting a process just now: between its fork and its
    // exec the child shares this process's open files, the slot files' locks too, and for that
    // moment the directory is still in use. So the next pools are built until one finds it
    // unused, within a bound: a budget that never went would fail here.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let fourth = build(Some(8 * GIB));
        let got = units(&fourth);
        if got == 3 || std::time::Instant::now() > deadline {
            assert_eq!(got, 3);
            break;
        }
        assert_eq!(got, 2);
        drop(fourth);
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_corrupt_budget_record_is_ignored() {
    let dir = tempdir();
    let user = budget_pool(dir.path(), None);
    std::fs::write(dir.path().join("gpu0.budget"), "lots of memory\n").unwrap();
    let p = budget_pool(dir.path(), Some(8 * GIB));
    assert_eq!(
        p.request().memory(6 * GIB).try_acquire().unwrap().units(),
        3
    );
    drop((user, p));
    // The next pool that finds the directory unused clears it, and records its own budget
    // when it first needs one.
    let next = budget_pool(dir.path(), Some(16 * GIB));
    let record = std::fs::read_to_string(dir.path().join("gpu0.budget")).unwrap();
    assert_eq!(record.trim(), "");
    assert_eq!(
        next.request()
            .memory(6 * GIB)
            .try_acquire()
            .unwrap()
            .units(),
        2
    );
    let record = std::fs::read_to_string(dir.path().join("gpu0.budget")).unwrap();
    assert_eq!(record.trim(), (16 * GIB).to_string());
}

#[test]
fn a_budget_record_locked_by_a_stopped_process_costs_a_second_not_the_test() {
    let dir = tempdir();
    let user = budget_pool(dir.path(), None);
    // Another open file holds the record's lock and never lets go, as a process stopped
    // between reading and writing it would.
    let record = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join("gpu0.budget"))
        .unwrap();
    record.lock().unwrap();
    let p = budget_pool(dir.path(), Some(8 * GIB));
    let asked = std::time::Instant::now();
    let permit = p.request().memory(6 * GIB).try_acquire().unwrap();
    let took = asked.elapsed();
    // Its own budget, after about a second's wait for the record.
    assert_eq!(permit.units(), 3);
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop((permit, p, user));
}

#[test]
fn a_weight_is_checked_against_the_directory_s_n_not_the_pool_s_own() {
    let dir = tempdir();
    let first = pool(dir.path(), 2);
    // Configured with N = 8, it adopts the directory's N = 2: 4 units can never be had.
    let other = pool(dir.path(), 8);
    assert_eq!(other.concurrency(), 2);
    let err = other.request().units(4).try_acquire().unwrap_err();
    assert!(
        matches!(
            err,
            AcquireError::TooLarge {
                asked: 4,
                per_gpu: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(other.acquire_weighted(2).slots(), [0, 1]);
    drop(first);
}

const MIB: u64 = 1 << 20;

/// The running test as the run records and the history name it: `<binary>::<test>`.
fn this_test_key() -> String {
    let binary = std::env::var("NEXTEST_BINARY_ID").unwrap_or_else(|_| {
        let exe = std::env::current_exe().unwrap();
        let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
        match stem.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 => name.to_string(),
            _ => stem,
        }
    });
    let test = std::env::var("NEXTEST_TEST_NAME")
        .unwrap_or_else(|_| thread::current().name().unwrap().to_string());
    format!("{binary}::{test}")
}

/// Writes measured peaks into the history of slot directory `dir`, as measuring runs where
/// the tests' fixtures reported that much would.
fn write_peaks(dir: &std::path::Path, peaks: &[(&str, u64)]) {
    let state = gpu_test_permit::config::Config::global().state_dir_for(dir);
    std::fs::create_dir_all(&state).unwrap();
    let lines: String = peaks
        .iter()
        .map(|(test, mem)| {
            format!(
                "{}\n",
                serde_json::json!({"test": test, "us": 1000, "seen": 1, "mem": mem})
            )
        })
        .collect();
    std::fs::write(state.join("gpu0.tests"), lines).unwrap();
}

/// N = 4 on `dir`'s slots with learned weights, and `budget` bytes of GPU memory.
fn learned_pool(dir: &std::path::Path, budget: Option<u64>) -> PermitPool {
    let mut b = PermitPool::builder()
        .concurrency(4)
        .slot_dir(dir)
        .weights(gpu_test_permit::config::Weights::Learned);
    if let Some(bytes) = budget {
        b = b.memory_budget(bytes);
    }
    b.build().unwrap()
}

#[test]
fn a_test_that_declares_nothing_holds_the_units_of_its_learned_peak_and_a_declaration_wins() {
    let dir = tempdir();
    write_peaks(dir.path(), &[(&this_test_key(), 700 * MIB)]);
    // 700 MiB + 25 % of 1 GiB at N = 4: 3.4 units, so 4.
    let p = learned_pool(dir.path(), Some(GIB));
    let permit = p.try_acquire(PermitKind::Shared).unwrap();
    assert_eq!((permit.units(), permit.slots().len()), (4, 4));
    assert_eq!(permit.memory(), None, "a learned weight declares nothing");
    drop(permit);
    assert_eq!(p.acquire().units(), 4);
    // A declaration always wins: units, memory, exclusive.
    assert_eq!(p.request().units(2).try_acquire().unwrap().units(), 2);
    assert_eq!(p.acquire_weighted(3).units(), 3);
    let declared = p.request().memory(100 * MIB).try_acquire().unwrap();
    assert_eq!((declared.units(), declared.memory()), (1, Some(100 * MIB)));
    drop(declared);
    assert!(p.acquire_exclusive().is_exclusive());
    drop(p);
    // Without a budget nothing is learned; nor with weights declared.
    let p = learned_pool(dir.path(), None);
    assert_eq!(p.try_acquire(PermitKind::Shared).unwrap().units(), 1);
    drop(p);
    let p = budget_pool(dir.path(), Some(GIB));
    assert_eq!(p.try_acquire(PermitKind::Shared).unwrap().units(), 1);
}

#[test]
fn a_learned_peak_above_the_budget_takes_the_whole_gpu_and_is_never_refused() {
    let dir = tempdir();
    write_peaks(dir.path(), &[(&this_test_key(), 5 * GIB)]);
    let p = learned_pool(dir.path(), Some(GIB));
    let permit = p.try_acquire(PermitKind::Shared).unwrap();
    assert_eq!(permit.units(), 4);
    drop(permit);
    // A test with nothing on record holds one unit.
    thread::Builder::new()
        .name("a test never measured".into())
        .spawn(move || {
            if std::env::var_os("NEXTEST_TEST_NAME").is_none() {
                assert_eq!(p.try_acquire(PermitKind::Shared).unwrap().units(), 1);
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_thread_of_a_test_that_holds_its_learned_weight_joins_it_instead_of_waiting_for_it() {
    let dir = tempdir();
    write_peaks(dir.path(), &[(&this_test_key(), 900 * MIB)]);
    let p = learned_pool(dir.path(), Some(GIB));
    let whole = p.acquire();
    assert_eq!(whole.units(), 4);
    // Another thread of the same test (under nextest every thread of the test's process is;
    // under libtest, a thread of the test's name) would wait for the units its own test
    // holds: it joins the permit instead.
    let name = thread::current().name().unwrap().to_string();
    let joined = thread::scope(|s| {
        thread::Builder::new()
            .name(name)
            .spawn_scoped(s, || p.try_acquire_for(Duration::from_secs(5)).unwrap())
            .unwrap()
            .join()
            .unwrap()
    });
    assert!(joined.is_nested());
    assert_eq!((joined.units(), joined.slots()), (4, whole.slots()));
    // The permit lives while either guard does.
    drop(whole);
    let other = thread::scope(|s| {
        thread::Builder::new()
            .name("another test".into())
            .spawn_scoped(s, || p.try_acquire(PermitKind::Shared))
            .unwrap()
            .join()
            .unwrap()
    });
    if std::env::var_os("NEXTEST_TEST_NAME").is_some() {
        // Under nextest every thread of the process is the test's: it joins too.
        assert!(other.unwrap().is_nested());
    } else {
        let err = other.unwrap_err();
        assert!(matches!(err, AcquireError::WouldBlock), "{err}");
    }
    drop(joined);
    assert_eq!(p.acquire().units(), 4, "and comes free with the last");
}
