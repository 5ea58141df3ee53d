//! Many threads, thousands of cycles, a gauge that must never exceed N.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::util::{pool, tempdir};

#[test]
fn sixty_four_threads_never_exceed_n() {
    let dir = tempdir();
    for n in [1usize, 2, 3] {
        let pool = pool(dir.path().join(format!("n{n}")).as_path(), n);
        let gauge = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let cycles = AtomicUsize::new(0);
        thread::scope(|s| {
            for t in 0..64 {
                let (pool, gauge, peak, cycles) = (&pool, &gauge, &peak, &cycles);
                s.spawn(move || {
                    for i in 0..50 {
                        let exclusive = (t + i) % 29 == 0;
                        let p = if exclusive {
                            pool.acquire_exclusive()
                        } else {
                            pool.acquire()
                        };
                        let units = if exclusive { n } else { 1 };
                        let now = gauge.fetch_add(units, Ordering::SeqCst) + units;
                        peak.fetch_max(now, Ordering::SeqCst);
                        assert!(now <= n, "{now} units held with N = {n}");
                        // Nested acquisitions are free and change nothing.
                        let nested = pool.acquire();
                        assert!(nested.is_nested());
                        if i % 7 == 0 {
                            thread::yield_now();
                        }
                        gauge.fetch_sub(units, Ordering::SeqCst);
                        // Sometimes the permit is dropped on another thread.
                        if i % 10 == 0 {
                            thread::spawn(move || drop((p, nested))).join().unwrap();
                        } else {
                            drop(nested);
                            drop(p);
                        }
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(cycles.load(Ordering::Relaxed), 64 * 50);
        assert_eq!(
            peak.load(Ordering::SeqCst),
            n,
            "the cap should also be reached"
        );
        // Nothing was lost: every permit can be taken again at once.
        let all = pool
            .try_acquire_exclusive_for(Duration::from_millis(100))
            .unwrap();
        assert_eq!(all.slots().len(), n);
    }
}
