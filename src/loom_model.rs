//! Bounded model check of the in-process permit state machine with loom.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_model` (a unit test, so
//! that loom is a dev-dependency, which never enters a project's lock file). Every interleaving of
//! three threads with up to three preemptions is explored for N = 1 and N = 2: shared and
//! exclusive requests, nested acquisitions, and a permit dropped on another thread than the one
//! that took it; and for N = 3, weighted requests (two of 2 units, one of 1) with nested ones.
//! The model asserts the invariant that matters: never more than N permit units held, and none
//! lost; and, since loom fails a model in which every thread is parked, that a waiting weighted
//! request always gets its units once others release them (every thread acquires).
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use crate::permit::{AcquireError, PermitKind, PermitPool};

fn model(n: usize) {
    let mut builder = loom::model::Builder::new();
    // Every interleaving with up to three preemptions (loom's advice: bugs need few), unless
    // LOOM_MAX_PREEMPTIONS says otherwise. The unbounded model passed too, in about 20 minutes
    // on two cores: too long for every CI run.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder.check(move || {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pool = Arc::new(
            PermitPool::builder()
                .concurrency(n)
                .in_process_only()
                .build()
                .unwrap(),
        );
        let gauge = Arc::new(AtomicUsize::new(0));

        let take = move |pool: &PermitPool, gauge: &AtomicUsize, kind: PermitKind| {
            let p = pool.acquire_until(kind, None).unwrap();
            let units = if kind == PermitKind::Exclusive { n } else { 1 };
            let now = gauge.fetch_add(units, Ordering::SeqCst) + units;
            assert!(now <= n, "{now} units held with N = {n}");
            (p, units)
        };

        // Thread A: a shared permit with a nested acquisition; the permit leaves the thread.
        let a = {
            let (pool, gauge) = (pool.clone(), gauge.clone());
            thread::spawn(move || {
                let (p, units) = take(&pool, &gauge, PermitKind::Shared);
                let nested = pool.acquire_until(PermitKind::Shared, None).unwrap();
                assert!(nested.is_nested());
                drop(nested);
                gauge.fetch_sub(units, Ordering::SeqCst);
                p // dropped by the main thread
            })
        };
        // Thread B: an exclusive permit.
        let b = {
            let (pool, gauge) = (pool.clone(), gauge.clone());
            thread::spawn(move || {
                let (p, units) = take(&pool, &gauge, PermitKind::Exclusive);
                assert!(
                    pool.acquire_until(PermitKind::Shared, None)
                        .unwrap()
                        .is_nested()
                );
                gauge.fetch_sub(units, Ordering::SeqCst);
                drop(p);
            })
        };
        // Main thread: drops A's permit (taken on another thread), then takes one of its own,
        // all while B may be waiting for or holding the whole pool.
        let from_a = a.join().unwrap();
        drop(from_a);
        let (p, units) = take(&pool, &gauge, PermitKind::Shared);
        gauge.fetch_sub(units, Ordering::SeqCst);
        drop(p);
        b.join().unwrap();

        // No permit was lost: the whole pool can be taken without waiting.
        let all = pool
            .try_acquire(PermitKind::Exclusive)
            .expect("a permit was lost");
        drop(all);
    });
    let runs = RUNS.load(std::sync::atomic::Ordering::Relaxed);
    println!("N = {n}: {runs} interleavings explored");
    assert!(runs > 100, "the model explored only {runs} interleavings");
}

#[test]
fn never_more_than_one_holder_with_n_1() {
    model(1);
}

#[test]
fn never_more_than_two_units_with_n_2() {
    model(2);
}

/// Weighted requests on N = 3: a thread asks for 2 units (with nested requests of 2 and 1
/// inside, and one of 3 that must fail rather than wait for itself), another thread and the
/// main thread for 1 each; the second thread's permit is dropped by the main thread. Where
/// both light permits are out, the heavy request waits until one of them is returned: it is
/// always served, never more than 3 units are held, and all come back.
#[test]
fn weighted_requests_on_n_3_are_all_served_within_the_cap() {
    const N: usize = 3;
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder.check(|| {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pool = Arc::new(
            PermitPool::builder()
                .concurrency(N)
                .in_process_only()
                .build()
                .unwrap(),
        );
        let gauge = Arc::new(AtomicUsize::new(0));
        let take = |pool: &PermitPool, gauge: &AtomicUsize, units: usize| {
            let p = pool.request().units(units).acquire_until(None).unwrap();
            assert_eq!(p.units(), units);
            let now = gauge.fetch_add(units, Ordering::SeqCst) + units;
            assert!(now <= N, "{now} units held with N = {N}");
            p
        };

        // Thread A: 2 units, with nested requests inside.
        let a = {
            let (pool, gauge) = (pool.clone(), gauge.clone());
            thread::spawn(move || {
                let p = take(&pool, &gauge, 2);
                let nested = pool.request().units(2).acquire_until(None).unwrap();
                assert!(nested.is_nested());
                assert!(
                    pool.acquire_until(PermitKind::Shared, None)
                        .unwrap()
                        .is_nested()
                );
                assert!(matches!(
                    pool.request().units(3).acquire_until(None),
                    Err(AcquireError::NestedLarger {
                        held: 2,
                        asked: 3,
                        ..
                    })
                ));
                drop(nested);
                gauge.fetch_sub(2, Ordering::SeqCst);
                drop(p);
            })
        };
        // Thread B: 1 unit; the permit leaves the thread.
        let b = {
            let (pool, gauge) = (pool.clone(), gauge.clone());
            thread::spawn(move || {
                let p = take(&pool, &gauge, 1);
                gauge.fetch_sub(1, Ordering::SeqCst);
                p // dropped by the main thread
            })
        };
        // Main thread: 1 unit, held while B's permit is dropped here.
        let light = take(&pool, &gauge, 1);
        let from_b = b.join().unwrap();
        drop(from_b);
        gauge.fetch_sub(1, Ordering::SeqCst);
        drop(light);
        a.join().unwrap();

        let all = pool
            .try_acquire(PermitKind::Exclusive)
            .expect("a unit was lost");
        assert_eq!(all.units(), N);
    });
    let runs = RUNS.load(std::sync::atomic::Ordering::Relaxed);
    println!("weighted, N = {N}: {runs} interleavings explored");
    assert!(runs > 100, "the model explored only {runs} interleavings");
}

/// The pool's handle is dropped while a permit taken on another thread is still out (and a
/// third thread may be queued): whoever comes last frees the pool, exactly once.
#[test]
fn pool_dropped_while_a_permit_is_out() {
    loom::model(|| {
        let pool = PermitPool::builder()
            .concurrency(1)
            .in_process_only()
            .build()
            .unwrap();
        let pool = Arc::new(pool);
        let p = pool.acquire_until(PermitKind::Shared, None).unwrap();
        let waiter = {
            let pool = pool.clone();
            thread::spawn(move || drop(pool.acquire_until(PermitKind::Shared, None).unwrap()))
        };
        let holder = thread::spawn(move || drop(p));
        drop(pool);
        holder.join().unwrap();
        waiter.join().unwrap();
    });
}
