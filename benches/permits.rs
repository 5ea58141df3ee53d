//! Permit benchmarks, each beside a baseline where one makes sense.
//!
//! - `uncontended`: acquire + release of the in-process layer, ours against a straightforward
//!   Mutex + Condvar + thread-local semaphore (the baseline).
//! - `nested`: a nested acquisition on a thread that already holds a permit, with its release
//!   and (`acquire-only`) without it.
//! - `host_slot`: acquire + release including the host slot (file locks); the same with
//!   `GPU_TEST_PERMIT_WEIGHTS=learned` (`weights-learned`: a test with no measured peak).
//! - `handoff`: release-to-waiter-running latency, in process and across processes; across
//!   processes also to the last of a queue of 3 waiting processes, and the same beside 10,000
//!   blank wait files that live processes keep locked.
//! - `suite`: 48 simulated GPU tests holding 100 ms each with N = 2 (ideal: 2.4 s), as threads
//!   (like `cargo test`) and as processes (like `cargo nextest`).
//!
//! Run with `cargo bench --bench permits`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::cell::Cell;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/clock.rs"]
mod clock;
use clock::monotonic_ns;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group};
use gpu_test_permit::PermitPool;

/// The baseline: a counting semaphore from std's Mutex and Condvar, reentrant through a
/// thread-local depth counter.
struct Baseline {
    count: Mutex<usize>,
    cv: Condvar,
}

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

struct BaselineGuard<'a>(&'a Baseline);

impl Baseline {
    fn new(n: usize) -> Self {
        Baseline {
            count: Mutex::new(n),
            cv: Condvar::new(),
        }
    }
    fn acquire(&self) -> BaselineGuard<'_> {
        if DEPTH.get() == 0 {
            let mut c = self.count.lock().unwrap();
            while *c == 0 {
                c = self.cv.wait(c).unwrap();
            }
            *c -= 1;
        }
        DEPTH.set(DEPTH.get() + 1);
        BaselineGuard(self)
    }
}

impl Drop for BaselineGuard<'_> {
    fn drop(&mut self) {
        DEPTH.set(DEPTH.get() - 1);
        if DEPTH.get() == 0 {
            *self.0.count.lock().unwrap() += 1;
            self.0.cv.notify_one();
        }
    }
}

fn local_pool(n: usize) -> PermitPool {
    PermitPool::builder()
        .concurrency(n)
        .in_process_only()
        .build()
        .unwrap()
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    let ours = local_pool(2);
    g.bench_function("gpu-test-permit", |b| b.iter(|| drop(ours.acquire())));
    let base = Baseline::new(2);
    g.bench_function("baseline-mutex-condvar", |b| {
        b.iter(|| drop(base.acquire()))
    });
    g.finish();
}

fn nested(c: &mut Criterion) {
    let mut g = c.benchmark_group("nested");
    let ours = local_pool(2);
    let _outer = ours.acquire();
    g.bench_function("gpu-test-permit", |b| b.iter(|| drop(ours.acquire())));
    let base = Baseline::new(2);
    let _outer_base = base.acquire();
    g.bench_function("baseline-mutex-condvar", |b| {
        b.iter(|| drop(base.acquire()))
    });
    // Through the global pool, as tests call it (`gpu_test_permit::acquire()`), on a slot
    // directory of the bench's own.
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: no other thread of the bench reads the environment now.
    unsafe { std::env::set_var("GPU_TEST_PERMIT_DIR", dir.path()) };
    let _outer_global = gpu_test_permit::acquire();
    g.bench_function("global/gpu-test-permit", |b| {
        b.iter(|| drop(gpu_test_permit::acquire()))
    });
    // The acquisition alone: guards are collected and dropped outside the timed part.
    g.bench_function("acquire-only/gpu-test-permit", |b| {
        b.iter_custom(|iters| acquire_only(iters, || ours.acquire()))
    });
    g.bench_function("acquire-only/baseline-mutex-condvar", |b| {
        b.iter_custom(|iters| acquire_only(iters, || base.acquire()))
    });
    g.finish();
}

/// Times `iters` acquisitions in batches of 1024, dropping each batch's guards untimed.
fn acquire_only<G>(iters: u64, acquire: impl Fn() -> G) -> Duration {
    let mut held = Vec::with_capacity(1024);
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(1024);
        let t = Instant::now();
        for _ in 0..n {
            held.push(acquire());
        }
        total += t.elapsed();
        held.clear();
        left -= n;
    }
    total
}

fn host_slot(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let pool = PermitPool::builder()
        .concurrency(2)
        .slot_dir(dir.path())
        .build()
        .unwrap();
    let mut g = c.benchmark_group("host_slot");
    g.bench_function("acquire-release", |b| b.iter(|| drop(pool.acquire())));
    // Backfilling off: an uncontended request never reads the history of hold times (only one
    // that waits behind a head does), so this should cost what the above does, backfilling on.
    let off_dir = tempfile::tempdir().unwrap();
    let off = PermitPool::builder()
        .concurrency(2)
        .slot_dir(off_dir.path())
        .backfill(false)
        .build()
        .unwrap();
    g.bench_function("acquire-release/backfill-off", |b| {
        b.iter(|| drop(off.acquire()))
    });
    // With learned weights on (and a budget, so that each request that declares nothing
    // looks its test up): what they cost a test with no measured peak in a history that
    // knows other tests', against the above.
    let learned_dir = tempfile::tempdir().unwrap();
    let state = gpu_test_permit::config::Config::global().state_dir_for(learned_dir.path());
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("gpu0.tests"),
        "{\"test\":\"other::test\",\"us\":1000,\"seen\":1,\"mem\":1073741824}\n",
    )
    .unwrap();
    let learned = PermitPool::builder()
        .concurrency(2)
        .slot_dir(learned_dir.path())
        .memory_budget(1 << 30)
        .weights(gpu_test_permit::config::Weights::Learned)
        .build()
        .unwrap();
    g.bench_function("acquire-release/weights-learned", |b| {
        b.iter(|| drop(learned.acquire()))
    });
    g.finish();
}

/// Release-to-running latency: a waiter blocks on a full pool; the holder notes the time and
/// releases; the waiter notes when it runs.
fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.sample_size(30);

    let pool = Arc::new(local_pool(1));
    g.bench_function("in-process/gpu-test-permit", |b| {
        b.iter_custom(|iters| handoff_threads(iters, || pool.acquire()))
    });
    let base = Arc::new(Baseline::new(1));
    g.bench_function("in-process/baseline-mutex-condvar", |b| {
        b.iter_custom(|iters| handoff_threads(iters, || base.acquire()))
    });

    let dir = tempfile::tempdir().unwrap();
    cross_process_queue(&mut g, "cross-process/gpu-test-permit", dir.path(), 1);
    // A queue of processes, and the same queue beside many blank wait files, locked as by
    // processes that waited once and live on: a waiter that is not the head reads them
    // whenever it is woken, to let older waiters go first.
    let name = format!("cross-process-queue-of-{QUEUE}");
    let dir = tempfile::tempdir().unwrap();
    cross_process_queue(
        &mut g,
        &format!("{name}/gpu-test-permit"),
        dir.path(),
        QUEUE,
    );
    let crowded = tempfile::tempdir().unwrap();
    match idle_wait_files(crowded.path(), IDLE_WAIT_FILES) {
        Ok(_files) => cross_process_queue(
            &mut g,
            &format!("{name}-beside-{IDLE_WAIT_FILES}-idle-wait-files/gpu-test-permit"),
            crowded.path(),
            QUEUE,
        ),
        Err(e) => println!("skipped the queue beside {IDLE_WAIT_FILES} wait files: {e}"),
    }
    g.finish();
}

/// Waiting processes in the queue hand-offs.
const QUEUE: usize = 3;
/// Blank wait files the crowded queue finds in its directory.
const IDLE_WAIT_FILES: usize = 10_000;

/// Release-to-running latency across processes on `dir` (N = 1): this process holds the
/// permit while `waiters` children wait for it, each to take it and give it back at once;
/// timed from the release to the moment the last of them runs.
fn cross_process_queue(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    dir: &Path,
    waiters: usize,
) {
    let pool = PermitPool::builder()
        .concurrency(1)
        .slot_dir(dir)
        .build()
        .unwrap();
    let mut children: Vec<_> = (0..waiters)
        .map(|_| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .env(CHILD_VAR, "handoff")
                .env("GPU_TEST_PERMIT_DIR", dir)
                .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
                .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let to_child = child.stdin.take().unwrap();
            let from_child = BufReader::new(child.stdout.take().unwrap());
            (child, to_child, from_child)
        })
        .collect();
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let held = pool.acquire();
                for (_, to_child, _) in &mut children {
                    writeln!(to_child, "go").unwrap();
                    to_child.flush().unwrap();
                }
                // Let the children reach their waits before releasing.
                thread::sleep(Duration::from_millis(2 * waiters as u64));
                let t0 = monotonic_ns();
                drop(held);
                let mut last = t0;
                for (_, _, from_child) in &mut children {
                    let mut line = String::new();
                    from_child.read_line(&mut line).unwrap();
                    last = last.max(line.trim().parse().unwrap());
                }
                total += Duration::from_nanos(last - t0);
            }
            total
        })
    });
    for (mut child, to_child, _) in children {
        drop(to_child);
        let _ = child.wait();
    }
}

/// Creates `n` blank wait files in `dir`, each locked through a descriptor this process keeps
/// (returned) as a live waiter's would be, raising the descriptor limit as far as needed.
/// Their pids are above any Linux pid, so no real waiter shares a name.
fn idle_wait_files(dir: &Path, n: usize) -> std::io::Result<Vec<std::fs::File>> {
    let needed = (n + 256) as libc::rlim_t;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit to write, then to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < needed {
            limit.rlim_cur = needed.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    if limit.rlim_cur < needed {
        return Err(std::io::Error::other(format!(
            "{needed} descriptors needed, the hard limit is {}",
            limit.rlim_max
        )));
    }
    (0..n)
        .map(|i| {
            let file = std::fs::File::create(dir.join(format!("gpu0.wait.{}", 5_000_000 + i)))?;
            file.lock()?;
            Ok(file)
        })
        .collect()
}

fn handoff_threads<G>(iters: u64, acquire: impl Fn() -> G + Sync) -> Duration {
    let mut total = Duration::ZERO;
    thread::scope(|s| {
        for _ in 0..iters {
            let held = acquire();
            let (ready_tx, ready_rx) = mpsc::channel();
            let acquire = &acquire;
            let waiter = s.spawn(move || {
                ready_tx.send(()).unwrap();
                let g = acquire();
                let t = Instant::now();
                drop(g);
                t
            });
            ready_rx.recv().unwrap();
            thread::sleep(Duration::from_micros(500));
            let t0 = Instant::now();
            drop(held);
            total += waiter.join().unwrap() - t0;
        }
    });
    total
}

const TESTS: usize = 48;
const HOLD: Duration = Duration::from_millis(100);
const RUNNERS: usize = 16;

/// 48 simulated GPU tests, 100 ms of GPU each, N = 2: ideally 48 / 2 x 0.1 s = 2.4 s.
fn suite(c: &mut Criterion) {
    let mut g = c.benchmark_group("suite-48x100ms-n2");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(1));
    g.measurement_time(Duration::from_secs(25));

    let dir = tempfile::tempdir().unwrap();
    let pool = PermitPool::builder()
        .concurrency(2)
        .slot_dir(dir.path())
        .build()
        .unwrap();
    g.bench_function(BenchmarkId::new("threads", RUNNERS), |b| {
        b.iter(|| {
            let next = std::sync::atomic::AtomicUsize::new(0);
            thread::scope(|s| {
                for _ in 0..RUNNERS {
                    s.spawn(|| {
                        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < TESTS {
                            let _p = pool.acquire();
                            thread::sleep(HOLD);
                        }
                    });
                }
            });
        })
    });
    let exe = std::env::current_exe().unwrap();
    let run_id = format!("bench-{}", std::process::id());
    g.bench_function(BenchmarkId::new("processes", RUNNERS), |b| {
        b.iter(|| {
            // Like nextest: one process per test, at most RUNNERS running at once.
            let mut running = Vec::new();
            for _ in 0..TESTS {
                if running.len() == RUNNERS {
                    let mut first: std::process::Child = running.remove(0);
                    assert!(first.wait().unwrap().success());
                }
                running.push(
                    Command::new(&exe)
                        .env(CHILD_VAR, "test")
                        // What nextest tells every test process (the run id shares the probe
                        // cache of a run among its processes).
                        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
                        .env("NEXTEST_RUN_ID", &run_id)
                        .env("NEXTEST_TEST_GROUP", "gpu")
                        .env("NEXTEST_TEST_GROUP_SLOT", "0")
                        .env("GPU_TEST_PERMIT_DIR", dir.path())
                        .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
                        .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
                        .spawn()
                        .unwrap(),
                );
            }
            for mut c in running {
                assert!(c.wait().unwrap().success());
            }
        })
    });
    g.finish();
}

const CHILD_VAR: &str = "GPU_TEST_PERMIT_BENCH_CHILD";

fn child(role: &str) {
    match role {
        "handoff" => {
            let stdin = std::io::stdin();
            let mut out = std::io::stdout().lock();
            for line in stdin.lock().lines() {
                if line.is_err() {
                    break;
                }
                let p = gpu_test_permit::acquire();
                let t = monotonic_ns();
                drop(p);
                writeln!(out, "{t}").unwrap();
                out.flush().unwrap();
            }
        }
        "test" => {
            let _p = gpu_test_permit::acquire();
            thread::sleep(HOLD);
        }
        other => panic!("unknown bench child role {other}"),
    }
}

criterion_group!(benches, uncontended, nested, host_slot, handoff, suite);

fn main() {
    if let Ok(role) = std::env::var(CHILD_VAR) {
        child(&role);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
