//! The permit's behaviour within one process: reentrancy, cross-thread drops, exclusivity,
//! deadlines and panics.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpu_test_permit::{AcquireError, PermitKind, PermitPool};

use crate::util::{pool, tempdir};

const SHORT: Duration = Duration::from_millis(100);

/// Whether every permit of the pool is free, checked from a thread that holds none.
fn all_free(pool: &PermitPool) -> bool {
    thread::scope(|s| {
        s.spawn(|| pool.try_acquire(PermitKind::Exclusive).is_ok())
            .join()
            .unwrap()
    })
}

#[test]
fn nested_acquire_on_one_thread_does_not_wait() {
    let dir = tempdir();
    let pool = pool(dir.path(), 1);
    let outer = pool.try_acquire_for(SHORT).unwrap();
    assert!(!outer.is_nested());
    // With N = 1 a second real permit would deadlock; a nested one is immediate.
    let inner = pool.try_acquire_for(SHORT).unwrap();
    assert!(inner.is_nested());
    assert_eq!(inner.slots(), outer.slots());
    let exclusive_inside_shared = pool.try_acquire_exclusive_for(SHORT);
    assert!(matches!(
        exclusive_inside_shared,
        Err(AcquireError::ExclusiveWhileShared)
    ));
    drop(outer);
    // The permit lives until its last guard drops.
    let other = thread::scope(|s| {
        s.spawn(|| pool.try_acquire(PermitKind::Shared).is_ok())
            .join()
            .unwrap()
    });
    assert!(!other, "the nested guard still holds the permit");
    drop(inner);
    let other = thread::scope(|s| {
        s.spawn(|| pool.try_acquire(PermitKind::Shared).is_ok())
            .join()
            .unwrap()
    });
    assert!(other);
}

#[test]
fn exclusive_covers_nested_shared_and_exclusive() {
    let dir = tempdir();
    let pool = pool(dir.path(), 3);
    let all = pool.try_acquire_exclusive_for(SHORT).unwrap();
    assert!(all.is_exclusive());
    assert_eq!(all.slots().len(), 3);
    assert!(pool.try_acquire_for(SHORT).unwrap().is_nested());
    assert!(pool.try_acquire_exclusive_for(SHORT).unwrap().is_nested());
    thread::scope(|s| {
        s.spawn(|| {
            assert!(matches!(
                pool.try_acquire(PermitKind::Shared),
                Err(AcquireError::WouldBlock)
            ));
        });
    });
    drop(all);
    assert!(all_free(&pool));
}

#[test]
fn permit_moved_to_another_thread_and_dropped_there() {
    let dir = tempdir();
    let pool = pool(dir.path(), 2);
    let p = pool.try_acquire_for(SHORT).unwrap();
    let nested = pool.try_acquire_for(SHORT).unwrap();
    let (tx, rx) = mpsc::channel();
    thread::scope(|s| {
        s.spawn(move || {
            drop(p);
            drop(nested);
            tx.send(()).unwrap();
        });
    });
    rx.recv().unwrap();
    assert!(all_free(&pool));
    // And this thread can take a fresh, real permit afterwards.
    assert!(!pool.try_acquire_for(SHORT).unwrap().is_nested());
}

#[test]
fn shared_permit_lets_workers_nest_instead_of_waiting() {
    let dir = tempdir();
    let pool = pool(dir.path(), 1);
    let p = pool.try_acquire_for(SHORT).unwrap();
    thread::scope(|s| {
        for _ in 0..4 {
            let share = p.share();
            let pool = &pool;
            s.spawn(move || {
                // Without entering, a worker is a stranger and N = 1 is taken.
                assert!(matches!(
                    pool.try_acquire(PermitKind::Shared),
                    Err(AcquireError::WouldBlock)
                ));
                let _e = share.enter();
                let nested = pool.try_acquire_for(SHORT).unwrap();
                assert!(nested.is_nested());
            });
        }
    });
    drop(p);
    assert!(all_free(&pool));
}

#[test]
fn deadline_error_names_the_holders() {
    let dir = tempdir();
    let pool = pool(dir.path(), 1);
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let pool_ref = &pool;
    thread::scope(|s| {
        thread::Builder::new()
            .name("holder_test_name".into())
            .spawn_scoped(s, move || {
                let pool = pool_ref;
                let _p = pool.try_acquire_for(SHORT).unwrap();
                tx.send(()).unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
        rx.recv().unwrap();
        let start = Instant::now();
        let err = pool
            .try_acquire_for(Duration::from_millis(200))
            .unwrap_err();
        done_tx.send(()).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(200));
        let AcquireError::Timeout(t) = &err else {
            panic!("{err}")
        };
        assert_eq!(t.concurrency, 1);
        assert_eq!(t.kind, PermitKind::Shared);
        assert!(
            t.holders
                .iter()
                .any(|h| h.thread == "holder_test_name" && h.pid == std::process::id())
        );
        let msg = err.to_string();
        assert!(msg.contains("waited 0.2s"), "{msg}");
        assert!(msg.contains("holder_test_name"), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains("look stuck rather than busy"), "{msg}");
    });
    // The timed-out waiter left nothing behind.
    assert!(all_free(&pool));
}

#[test]
fn acquire_panics_with_the_message_past_the_pool_deadline() {
    let dir = tempdir();
    let pool = PermitPool::builder()
        .concurrency(1)
        .slot_dir(dir.path())
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let _held = pool.acquire();
    let msg = thread::scope(|s| {
        let e = s.spawn(|| pool.acquire()).join().unwrap_err();
        e.downcast_ref::<String>().cloned().unwrap()
    });
    assert!(msg.starts_with("gpu-test-permit: test `"), "{msg}");
    assert!(msg.contains("gave up"), "{msg}");
}

#[test]
fn panic_while_holding_returns_the_permit() {
    let dir = tempdir();
    let pool = pool(dir.path(), 1);
    let r = thread::scope(|s| {
        s.spawn(|| {
            let _p = pool.acquire();
            panic!("test failure while holding the GPU");
        })
        .join()
    });
    assert!(r.is_err());
    let again = pool.try_acquire_for(SHORT).unwrap();
    assert!(!again.is_nested());
}

#[test]
fn an_exclusive_waiter_is_not_starved_by_a_stream_of_shared_requests() {
    let dir = tempdir();
    let pool = pool(dir.path(), 2);
    let first = pool.try_acquire_for(SHORT).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        let excl = s.spawn(|| {
            pool.try_acquire_exclusive_for(Duration::from_secs(20))
                .map(|p| p.held_for())
        });
        // Shared requests keep arriving and leaving while the exclusive one waits.
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(p) = pool.try_acquire_for(Duration::from_millis(20)) {
                        thread::sleep(Duration::from_millis(2));
                        drop(p);
                    }
                }
            });
        }
        thread::sleep(Duration::from_millis(100));
        drop(first);
        let got = excl.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(got.is_ok(), "{got:?}");
    });
}

#[test]
fn global_pool_round_trip() {
    let p = gpu_test_permit::acquire();
    assert!(!p.is_exclusive());
    assert!(gpu_test_permit::acquire().is_nested());
    let built = gpu_test_permit::Permitted::new(|| vec![1u8; 4]);
    assert!(built.permit().is_nested());
    assert_eq!(built.len(), 4);
}

#[test]
fn permitted_drops_value_before_permit() {
    use std::sync::{Arc, Mutex};
    let dir = tempdir();
    let pool = pool(dir.path(), 1);
    let log = Arc::new(Mutex::new(Vec::<&str>::new()));
    struct Gpu(Arc<Mutex<Vec<&'static str>>>, *const PermitPool);
    impl Drop for Gpu {
        fn drop(&mut self) {
            // SAFETY: the pool outlives the value in this test.
            let pool = unsafe { &*self.1 };
            // While the value drops, the permit is still held.
            let free = thread::scope(|s| {
                s.spawn(|| pool.try_acquire(PermitKind::Shared).is_ok())
                    .join()
                    .unwrap()
            });
            self.0.lock().unwrap().push(if free {
                "permit already gone"
            } else {
                "value dropped under permit"
            });
        }
    }
    let v = gpu_test_permit::Permitted::try_new_in::<AcquireError>(&pool, || {
        Ok(Gpu(log.clone(), &pool))
    })
    .unwrap();
    drop(v);
    assert_eq!(*log.lock().unwrap(), ["value dropped under permit"]);
    assert!(pool.try_acquire(PermitKind::Shared).is_ok());
}

#[test]
fn a_permit_may_outlive_its_pool() {
    let dir = tempdir();
    let pool = pool(dir.path(), 2);
    let p = pool.acquire();
    let nested = pool.acquire();
    drop(pool);
    // The guards still work; the last one frees the pool.
    assert_eq!(p.slots().len(), 1);
    assert!(p.held_for() < Duration::from_secs(60));
    drop(p);
    drop(nested);
}

#[test]
fn a_pool_over_two_gpus_has_n_per_gpu_and_names_each_permits_device() {
    let dir = tempdir();
    let pool = PermitPool::builder()
        .concurrency(1)
        .gpus(2)
        .slot_dir(dir.path())
        .timeout(SHORT)
        .build()
        .unwrap();
    assert_eq!(
        (pool.concurrency(), pool.gpus(), pool.capacity()),
        (1, 2, 2)
    );
    let first = pool.acquire();
    assert_eq!(first.device(), Some(0));
    thread::scope(|s| {
        let second = s.spawn(|| pool.acquire()).join().unwrap();
        assert_eq!(second.device(), Some(1));
        // One permit per GPU, both GPUs taken: a third waits.
        let third = s
            .spawn(|| pool.try_acquire(PermitKind::Shared).err())
            .join()
            .unwrap();
        assert!(matches!(third, Some(AcquireError::WouldBlock)), "{third:?}");
        drop(second);
        // GPU 1 is free again, and the next permit gets it.
        let again = s.spawn(|| pool.acquire().device()).join().unwrap();
        assert_eq!(again, Some(1));
    });
    drop(first);
    let all = pool.acquire_exclusive();
    assert_eq!((all.device(), all.slots()), (None, vec![0, 1]));
}

#[test]
fn a_one_gpu_pool_names_gpu_zero_even_without_host_slots() {
    let pool = PermitPool::builder().in_process_only().build().unwrap();
    assert_eq!(pool.acquire().device(), Some(0));
}
