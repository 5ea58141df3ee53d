//! The in-process permit alone (no host slots, no processes): small enough for Miri, which
//! checks the seats' unsafe code and atomics for undefined behaviour
//! (`scripts/miri.sh`), and run as ordinary tests too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use gpu_test_permit::{AcquireError, PermitKind, PermitPool};

fn pool(n: usize) -> PermitPool {
    PermitPool::builder()
        .concurrency(n)
        .in_process_only()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[test]
fn threads_never_hold_more_than_n() {
    let pool = Arc::new(pool(2));
    let gauge = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (pool, gauge) = (pool.clone(), gauge.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let kind = if i == 0 {
                        PermitKind::Exclusive
                    } else {
                        PermitKind::Shared
                    };
                    let p = pool.acquire_until(kind, None).unwrap();
                    let units = if p.is_exclusive() { 2 } else { 1 };
                    let now = gauge.fetch_add(units, Ordering::SeqCst) + units;
                    assert!(now <= 2, "{now} units held at once");
                    let nested = pool.acquire();
                    assert!(nested.is_nested());
                    drop(nested);
                    gauge.fetch_sub(units, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(gauge.load(Ordering::SeqCst), 0);
}

#[test]
fn guards_move_share_and_drop_on_other_threads() {
    let pool = pool(1);
    let permit = pool.acquire();
    let shared = permit.share();
    thread::scope(|s| {
        s.spawn(|| {
            let entered = shared.enter();
            assert!(pool.acquire().is_nested());
            drop(entered);
        });
    });
    drop(shared);
    let full = |pool: &PermitPool| {
        thread::scope(|s| {
            s.spawn(|| {
                matches!(
                    pool.try_acquire(PermitKind::Shared),
                    Err(AcquireError::WouldBlock)
                )
            })
            .join()
            .unwrap()
        })
    };
    // Moved to another thread, the permit still counts, and is returned where it drops.
    let moved = thread::spawn(move || permit).join().unwrap();
    assert!(full(&pool));
    thread::spawn(move || drop(moved)).join().unwrap();
    assert!(!full(&pool));
}

#[test]
fn a_permit_outlives_its_pool_and_frees_it() {
    let pool = pool(2);
    let a = pool.acquire();
    let b = a.share();
    drop(pool);
    drop(a);
    thread::spawn(move || drop(b)).join().unwrap();
}

#[test]
fn a_waiter_is_handed_the_permit_and_a_timeout_returns_it() {
    let pool = pool(1);
    let held = pool.acquire();
    thread::scope(|s| {
        let late = s.spawn(|| pool.try_acquire_for(Duration::from_millis(1)).map(drop));
        assert!(matches!(
            late.join().unwrap(),
            Err(AcquireError::Timeout(_))
        ));
        let waiter = s.spawn(|| pool.acquire_until(PermitKind::Exclusive, None).map(drop));
        thread::sleep(Duration::from_millis(5));
        drop(held);
        waiter.join().unwrap().unwrap();
    });
    assert!(pool.try_acquire(PermitKind::Exclusive).is_ok());
}
