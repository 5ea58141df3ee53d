//! The hold deadline (`GPU_TEST_PERMIT_HOLD_TIMEOUT`): a permit held past it means a test is
//! stuck, usually in a GPU driver that deadlocked under concurrent use. Nothing in `cargo test`
//! ends such a test; the run would hang until CI kills it hours later, saying nothing. So one
//! thread per process watches the permits of pools with a hold deadline, and when one is held
//! past it, prints what is known — who holds permits and since when, the N in force, that a
//! lower N is the usual cure — records the hang in the slot directory (so the trace's what-if
//! does not recommend that N again on this host) and aborts the process: the run fails at
//! once, and says why.
//!
//! Registering costs a mutex per permit taken and returned, and only in pools with a deadline.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A permit under watch.
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) test: String,
    pub(super) thread: String,
    pub(super) exclusive: bool,
    pub(super) deadline: Duration,
    /// N per GPU and GPUs of the pool.
    pub(super) layout: crate::host::Layout,
    /// The pool's slot directory, for the hang record.
    pub(super) slot_dir: Option<PathBuf>,
}

struct Entry {
    id: u64,
    since: Instant,
    watched: Watched,
}

fn list() -> &'static parking_lot::Mutex<Vec<Entry>> {
    static LIST: OnceLock<parking_lot::Mutex<Vec<Entry>>> = OnceLock::new();
    LIST.get_or_init(|| {
        std::thread::Builder::new()
            .name("gpu-test-permit-watchdog".into())
            .spawn(run)
            .expect("gpu-test-permit: cannot start the hold-deadline watchdog thread");
        parking_lot::Mutex::new(Vec::new())
    })
}

/// Starts watching a permit granted now. Returns the id to [`unwatch`] it with (never 0).
pub(super) fn watch(watched: Watched) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    list().lock().push(Entry {
        id,
        since: Instant::now(),
        watched,
    });
    id
}

/// Stops watching a returned permit.
pub(super) fn unwatch(id: u64) {
    list().lock().retain(|e| e.id != id);
}

fn run() {
    loop {
        let step = {
            let list = list().lock();
            let now = Instant::now();
            if let Some(late) = list
                .iter()
                .find(|e| now.duration_since(e.since) > e.watched.deadline)
            {
                let msg = diagnosis(late, &list, now);
                crate::notice::text(&msg);
                if let Some(dir) = &late.watched.slot_dir {
                    crate::host::record_hang(
                        dir,
                        late.watched.layout,
                        &late.watched.test,
                        now.duration_since(late.since),
                    );
                }
                std::process::abort();
            }
            // Check a few times per deadline, at most once a second.
            list.iter()
                .map(|e| e.watched.deadline / 4)
                .min()
                .unwrap_or(Duration::from_secs(1))
                .clamp(Duration::from_millis(10), Duration::from_secs(1))
        };
        std::thread::sleep(step);
    }
}

fn diagnosis(late: &Entry, all: &[Entry], now: Instant) -> String {
    let w = &late.watched;
    let mut msg = format!(
        "\ngpu-test-permit: HOLD TIMEOUT: test `{}` (thread `{}`, pid {}) has held its GPU \
         permit for {:.1}s, past GPU_TEST_PERMIT_HOLD_TIMEOUT={:?}. It is stuck, most likely \
         in the GPU driver: a driver can deadlock when several tests create and destroy GPU \
         contexts at once.\n  permits held in this process:\n",
        w.test,
        w.thread,
        std::process::id(),
        now.duration_since(late.since).as_secs_f64(),
        w.deadline
    );
    for e in all {
        msg.push_str(&format!(
            "  - test `{}` (thread `{}`) for {:.1}s{}\n",
            e.watched.test,
            e.watched.thread,
            now.duration_since(e.since).as_secs_f64(),
            if e.watched.exclusive {
                ", exclusive"
            } else {
                ""
            }
        ));
    }
    msg.push_str(&format!(
        "  in force: {}. A lower REALIZAR_GPU_TEST_CONCURRENCY is the usual cure; \
         `gpu-test-permit status` shows the other processes' permits. This N is recorded as \
         having hung on this host. Aborting, so that the run fails now instead of hanging.\n",
        w.layout
    ));
    msg
}
