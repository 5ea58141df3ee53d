//! Weighted permits: what they buy (a suite's makespan) and what they cost (acquire + release).
//!
//! - `makespan-threads`, `makespan-processes`: a simulated suite of 40 light tests (1/8 of the
//!   GPU's memory) and 8 heavy ones (half of it), each holding its permit for 50 ms, run by 16
//!   runners as threads of one process (like `cargo test`) and as one process per test (like
//!   `cargo nextest`). The baseline, `count-only`, is what a count alone can do safely: N = 2,
//!   since two heavy tests fill the GPU, and every test takes one permit (`acquire()`). Ours,
//!   `weighted`: N = 8 units over the same memory budget, every test declares its memory
//!   (`acquire_memory`), so a light test takes 1 unit and a heavy one 4. Ideal makespans: 48 x
//!   50 ms / 2 = 1.2 s against (40 x 1 + 8 x 4) x 50 ms / 8 = 0.45 s. Each run is traced, and
//!   the trace is checked: never more units (and declared memory) at once than the GPU has.
//! - `overhead-in-process`, `overhead-host-slots`: an uncontended `acquire_weighted(2)` + drop
//!   (and `acquire_memory` of 2 units) beside a plain `acquire()` + drop, on a pool of N = 4,
//!   in process only and with host slots (file locks) in a temporary directory.
//! - `overhead-handoff-cross-process`: release-to-waiter-running latency across processes: this
//!   process holds both units of an N = 2 directory and releases them; a child waiting for 1
//!   unit (`acquire()`) or for 2 (`acquire_weighted(2)`) notes when it runs.
//!
//! After criterion, the makespans criterion took, and interleaved rounds of the uncontended
//! acquisitions and of the hand-offs (so that drift in a shared machine hits ours and the
//! baseline alike), print medians and ratios. Targets: weighted makespan <= 0.6x the count-only
//! one; weighted acquire + release within 1.2x of a single permit's in process, within 1.5x
//! across processes (host slots).
//!
//! Child processes are this bench's executable started again with [`CHILD_VAR`] set; they use
//! the library's global pool, configured through the environment as a test process's would be.
//! `GPU_TEST_PERMIT_WEIGHTED_BENCH_CHILD="spin local|host single|weighted-2|memory-2 CALLS"`
//! runs one kind of uncontended acquisition CALLS times, for instruction counts under
//! `valgrind --tool=callgrind` (stable where timings on a shared machine are not).
//!
//! Run with `cargo bench --bench weighted`; see BENCHMARKS.md for figures.
#![allow(missing_docs)]

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/clock.rs"]
mod clock;
use clock::monotonic_ns;
use criterion::{Criterion, SamplingMode, criterion_group};
use gpu_test_permit::trace::{TraceEvent, read_events};
use gpu_test_permit::{GpuTestPermit, PermitPool};

const GIB: u64 = 1 << 30;
/// The simulated GPU's memory.
const BUDGET: u64 = 80 * GIB;
const BUDGET_TEXT: &str = "80GiB";
const LIGHT_MEMORY: u64 = BUDGET / 8;
const HEAVY_MEMORY: u64 = BUDGET / 2;
const TESTS: usize = 48;
/// Every sixth test is heavy: 8 of 48, spread through the suite.
fn is_heavy(test: usize) -> bool {
    test % 6 == 5
}
const HOLD: Duration = Duration::from_millis(50);
const RUNNERS: usize = 16;

/// The two ways to cap the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    /// N = 2, one permit per test.
    CountOnly,
    /// N = 8 units of an 80 GiB budget; tests declare their memory.
    Weighted,
}

impl Cap {
    const BOTH: [Cap; 2] = [Cap::CountOnly, Cap::Weighted];

    fn name(self) -> &'static str {
        match self {
            Cap::CountOnly => "count-only",
            Cap::Weighted => "weighted",
        }
    }

    fn n(self) -> usize {
        match self {
            Cap::CountOnly => 2,
            Cap::Weighted => 8,
        }
    }

    fn from_name(name: &str) -> Cap {
        match name {
            "count-only" => Cap::CountOnly,
            "weighted" => Cap::Weighted,
            other => panic!("unknown cap {other}"),
        }
    }

    /// One simulated test: take the permit, "use the GPU", release.
    fn run_test(self, pool: &PermitPool, test: usize) {
        let memory = if is_heavy(test) {
            HEAVY_MEMORY
        } else {
            LIGHT_MEMORY
        };
        let _permit = match self {
            Cap::CountOnly => pool.acquire(),
            Cap::Weighted => pool.acquire_memory(memory),
        };
        thread::sleep(HOLD);
    }
}

/// Wall times of each whole-suite run, by benchmark, for the summary after criterion.
static SAMPLES: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

fn record(name: &str, took: Duration) {
    SAMPLES.lock().unwrap().push((name.to_string(), took));
}

fn samples(name: &str) -> Vec<Duration> {
    SAMPLES
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _)| n == name)
        .map(|&(_, d)| d)
        .collect()
}

/// Where the makespan runs keep their slot directories and traces.
struct SuiteDirs {
    root: tempfile::TempDir,
}

impl SuiteDirs {
    fn new() -> SuiteDirs {
        SuiteDirs {
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// A slot directory per cap and runner kind: the two caps lay out their slots differently.
    fn slots(&self, kind: &str, cap: Cap) -> PathBuf {
        let dir = self.root.path().join(format!("{kind}-{}", cap.name()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn trace(&self, kind: &str, cap: Cap) -> PathBuf {
        self.root
            .path()
            .join(format!("{kind}-{}.trace.json", cap.name()))
    }
}

static DIRS: std::sync::OnceLock<SuiteDirs> = std::sync::OnceLock::new();

fn dirs() -> &'static SuiteDirs {
    DIRS.get_or_init(SuiteDirs::new)
}

fn makespan_group<'c>(
    c: &'c mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'c, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    // Runs take about a second: ten samples of one or a few runs each.
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_millis(1));
    g.measurement_time(Duration::from_secs(12));
    g
}

/// The suite as threads of one process, 16 runners taking the next test as they free up.
fn makespan_threads(c: &mut Criterion) {
    let mut g = makespan_group(c, "makespan-threads");
    for cap in Cap::BOTH {
        let pool = PermitPool::builder()
            .concurrency(cap.n())
            .memory_budget(BUDGET)
            .slot_dir(dirs().slots("threads", cap))
            .trace(dirs().trace("threads", cap))
            .build()
            .unwrap();
        let id = format!("makespan-threads/{}", cap.name());
        g.bench_function(cap.name(), |b| {
            b.iter_custom(|iters| run_suite(&id, iters, |test| cap.run_test(&pool, test)))
        });
    }
    g.finish();
}

/// The suite as one process per test (like nextest), 16 running at a time, sharing a slot
/// directory.
fn makespan_processes(c: &mut Criterion) {
    let mut g = makespan_group(c, "makespan-processes");
    let exe = std::env::current_exe().unwrap();
    let run_id = format!("bench-weighted-{}", std::process::id());
    for cap in Cap::BOTH {
        let slots = dirs().slots("processes", cap);
        let trace = dirs().trace("processes", cap);
        let id = format!("makespan-processes/{}", cap.name());
        let spawn = |test: usize| {
            let mut cmd = Command::new(&exe);
            cmd.env(CHILD_VAR, format!("suite {} {test}", cap.name()))
                // What nextest tells every test process (the run id shares the probe cache of
                // a run among its processes).
                .env("NEXTEST_EXECUTION_MODE", "process-per-test")
                .env("NEXTEST_RUN_ID", &run_id)
                .env("NEXTEST_TEST_NAME", format!("test_{test:02}"))
                .env("NEXTEST_TEST_GROUP", "gpu")
                .env("NEXTEST_TEST_GROUP_SLOT", "0")
                .env("GPU_TEST_PERMIT_DIR", &slots)
                .env("GPU_TEST_PERMIT_TRACE", &trace)
                .env("GPU_TEST_PERMIT_GPU_MEMORY", BUDGET_TEXT)
                .env("GPU_TEST_PERMIT_GPUS", "1")
                .env("REALIZAR_GPU_TEST_CONCURRENCY", cap.n().to_string())
                .env_remove("GPU_TEST_PERMIT_CONCURRENCY");
            cmd
        };
        g.bench_function(cap.name(), |b| {
            b.iter_custom(|iters| {
                run_suite(&id, iters, |test| {
                    let status = spawn(test).status().unwrap();
                    assert!(status.success(), "test {test}: {status}");
                })
            })
        });
    }
    g.finish();
}

/// Runs the suite `iters` times, `RUNNERS` threads (`runner-<r>`) taking the next of the
/// `TESTS` tests as they finish one, like a test runner's threads; records each run's wall
/// time under `id` and returns their sum.
fn run_suite(id: &str, iters: u64, run_test: impl Fn(usize) + Sync) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        let next = AtomicUsize::new(0);
        thread::scope(|s| {
            for r in 0..RUNNERS {
                let (next, run_test) = (&next, &run_test);
                thread::Builder::new()
                    .name(format!("runner-{r}"))
                    .spawn_scoped(s, move || {
                        loop {
                            let test = next.fetch_add(1, Ordering::Relaxed);
                            if test >= TESTS {
                                break;
                            }
                            run_test(test);
                        }
                    })
                    .unwrap();
            }
        });
        let took = t.elapsed();
        record(id, took);
        total += took;
    }
    total
}

/// Units and declared memory held at once, at most, according to a trace's hold events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Peak {
    units: usize,
    memory: u64,
    holds: usize,
}

fn weighted_peak(events: &[TraceEvent]) -> Peak {
    let mut edges: Vec<(u64, i64, i64)> = Vec::new();
    let mut holds = 0;
    for e in events.iter().filter(|e| e.name == "hold") {
        holds += 1;
        let units = e.args.units as i64;
        let memory = e.args.memory.unwrap_or(0) as i64;
        edges.push((e.ts, units, memory));
        edges.push((e.ts + e.dur, -units, -memory));
    }
    // At equal timestamps, releases before acquisitions.
    edges.sort_by_key(|&(t, u, _)| (t, u));
    let (mut units, mut memory, mut peak) = (0i64, 0i64, Peak::default());
    for (_, du, dm) in edges {
        units += du;
        memory += dm;
        peak.units = peak.units.max(units as usize);
        peak.memory = peak.memory.max(memory as u64);
    }
    peak.holds = holds;
    peak
}

/// Checks the traces of the makespan runs: never more units at once than the GPU has, and (for
/// the weighted cap, whose tests declare memory) never more declared memory than its budget.
fn check_traces() {
    for kind in ["threads", "processes"] {
        for cap in Cap::BOTH {
            let path = dirs().trace(kind, cap);
            if !path.exists() {
                continue;
            }
            let events = read_events(&path).unwrap();
            let peak = weighted_peak(&events);
            if peak.holds == 0 {
                // Filtered out of this run.
                continue;
            }
            let worst_memory = match cap {
                // Count-only tests declare nothing: the worst case is every holder heavy.
                Cap::CountOnly => peak.units as u64 * HEAVY_MEMORY,
                Cap::Weighted => peak.memory,
            };
            let memory = match cap {
                Cap::CountOnly => "at most (peak holders x heavy tests' memory)",
                Cap::Weighted => "declared, at most",
            };
            println!(
                "trace {kind}/{}: {} holds, at most {} of {} units at once, memory {memory} \
                 {} GiB of {} GiB",
                cap.name(),
                peak.holds,
                peak.units,
                cap.n(),
                worst_memory / GIB,
                BUDGET / GIB,
            );
            assert_eq!(peak.holds % TESTS, 0, "every test's hold is traced");
            assert!(peak.units <= cap.n(), "{kind}/{}: {peak:?}", cap.name());
            assert!(worst_memory <= BUDGET, "{kind}/{}: {peak:?}", cap.name());
        }
    }
}

fn median(v: &mut [Duration]) -> Option<Duration> {
    v.sort();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn makespan_summary() {
    for kind in ["threads", "processes"] {
        let base = median(&mut samples(&format!("makespan-{kind}/count-only")));
        let ours = median(&mut samples(&format!("makespan-{kind}/weighted")));
        if let (Some(base), Some(ours)) = (base, ours) {
            println!(
                "makespan {kind}: count-only {:.3} s, weighted {:.3} s, weighted/count-only = {:.3}x \
                 (target <= 0.6x)",
                base.as_secs_f64(),
                ours.as_secs_f64(),
                ours.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
}

fn local_pool(n: usize) -> PermitPool {
    PermitPool::builder()
        .concurrency(n)
        .memory_budget(BUDGET)
        .in_process_only()
        .build()
        .unwrap()
}

fn host_pool(dir: &Path, n: usize) -> PermitPool {
    PermitPool::builder()
        .concurrency(n)
        .memory_budget(BUDGET)
        .slot_dir(dir)
        .build()
        .unwrap()
}

/// Half the budget of an N = 4 pool: 2 units.
const TWO_UNITS_OF_MEMORY: u64 = BUDGET / 2;

fn overhead_pairs(c: &mut Criterion, name: &str, pool: &PermitPool) {
    assert_eq!(pool.acquire_weighted(2).units(), 2);
    assert_eq!(pool.acquire_memory(TWO_UNITS_OF_MEMORY).units(), 2);
    let mut g = c.benchmark_group(name);
    g.bench_function(Kind::Single.name(), |b| {
        b.iter(|| drop(black_box(pool.acquire())))
    });
    g.bench_function(Kind::Weighted2.name(), |b| {
        b.iter(|| drop(black_box(pool.acquire_weighted(black_box(2)))))
    });
    g.bench_function(Kind::Memory2.name(), |b| {
        b.iter(|| {
            drop(black_box(
                pool.acquire_memory(black_box(TWO_UNITS_OF_MEMORY)),
            ))
        })
    });
    g.finish();
}

fn overhead_in_process(c: &mut Criterion) {
    overhead_pairs(c, "overhead-in-process", &local_pool(4));
}

fn overhead_host_slots(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    overhead_pairs(c, "overhead-host-slots", &host_pool(dir.path(), 4));
}

/// A child process that waits for a permit of `units` units whenever it is told to, and
/// reports when it got it: the far side of a cross-process hand-off.
struct HandoffChild {
    child: std::process::Child,
    to_child: std::process::ChildStdin,
    from_child: BufReader<std::process::ChildStdout>,
}

impl HandoffChild {
    fn spawn(dir: &Path, units: usize) -> HandoffChild {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_VAR, format!("handoff {units}"))
            .env("GPU_TEST_PERMIT_DIR", dir)
            .env("GPU_TEST_PERMIT_GPUS", "1")
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "2")
            .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        HandoffChild {
            to_child: child.stdin.take().unwrap(),
            from_child: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    /// One hand-off: `pool` (N = 2) takes both units, the child starts waiting, `pool`
    /// releases; returns the time from the release to the child running.
    fn once(&mut self, pool: &PermitPool) -> Duration {
        let held = pool.acquire_weighted(2);
        writeln!(self.to_child, "go").unwrap();
        self.to_child.flush().unwrap();
        // Let the child reach its wait before releasing.
        thread::sleep(Duration::from_millis(2));
        let t0 = monotonic_ns();
        drop(held);
        let mut line = String::new();
        self.from_child.read_line(&mut line).unwrap();
        let t1: u64 = line.trim().parse().unwrap();
        Duration::from_nanos(t1.saturating_sub(t0))
    }

    fn finish(self) {
        drop(self.to_child);
        let mut child = self.child;
        assert!(child.wait().unwrap().success());
    }
}

/// Release-to-running latency across processes: this process holds both units of an N = 2
/// directory; a child waits for 1 or 2 units and reports when it runs.
fn overhead_handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead-handoff-cross-process");
    g.sample_size(30);
    let dir = tempfile::tempdir().unwrap();
    let pool = host_pool(dir.path(), 2);
    for (name, units) in [("single", 1), ("weighted-2", 2)] {
        let mut child = HandoffChild::spawn(dir.path(), units);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| child.once(&pool)).sum())
        });
        child.finish();
    }
    g.finish();
}

/// The uncontended acquisitions compared: a single permit, the baseline, first.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Single,
    Weighted2,
    Memory2,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Single, Kind::Weighted2, Kind::Memory2];

    fn name(self) -> &'static str {
        match self {
            Kind::Single => "single",
            Kind::Weighted2 => "weighted-2",
            Kind::Memory2 => "memory-2",
        }
    }

    fn from_name(name: &str) -> Kind {
        *Kind::ALL
            .iter()
            .find(|k| k.name() == name)
            .unwrap_or_else(|| panic!("unknown acquisition {name}"))
    }

    /// Times `calls` acquisitions and releases of this kind, with a loop of its own for each
    /// kind (no dispatch inside the loop).
    fn time(self, pool: &PermitPool, calls: u64) -> Duration {
        fn run(calls: u64, acquire: impl Fn() -> GpuTestPermit) -> Duration {
            let t = Instant::now();
            for _ in 0..calls {
                drop(black_box(acquire()));
            }
            t.elapsed()
        }
        match self {
            Kind::Single => run(calls, || pool.acquire()),
            Kind::Weighted2 => run(calls, || pool.acquire_weighted(black_box(2))),
            Kind::Memory2 => run(calls, || {
                pool.acquire_memory(black_box(TWO_UNITS_OF_MEMORY))
            }),
        }
    }
}

/// Prints the medians of interleaved samples (nanoseconds), each kind's ratio to the first.
fn print_ratios(what: &str, kinds: &[&str], mut samples: Vec<Vec<f64>>, target: f64) {
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let show = |ns: f64| {
        if ns < 1e3 {
            format!("{ns:.1} ns")
        } else {
            format!("{:.2} µs", ns / 1e3)
        }
    };
    let mut line = format!("{what}: {} {}", kinds[0], show(medians[0]));
    for (kind, &m) in kinds.iter().zip(&medians).skip(1) {
        line += &format!(", {kind} {} ({:.3}x)", show(m), m / medians[0]);
    }
    println!("{line} (target <= {target}x)");
}

/// Interleaved rounds of each kind of uncontended acquire + release, so that drift in a noisy
/// machine hits all alike; prints the median per-call times and their ratios to the single
/// permit.
fn paired_uncontended(what: &str, pool: &PermitPool, rounds: usize, calls: u32, target: f64) {
    let mut samples = vec![Vec::new(); Kind::ALL.len()];
    for _ in 0..rounds {
        for (kind, out) in Kind::ALL.iter().zip(&mut samples) {
            out.push(kind.time(pool, calls.into()).as_nanos() as f64 / f64::from(calls));
        }
    }
    let names = Kind::ALL.map(Kind::name);
    print_ratios(what, &names, samples, target);
}

/// Alternating cross-process hand-offs to a child waiting for 1 unit and one waiting for 2.
fn paired_handoff(rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let pool = host_pool(dir.path(), 2);
    let mut children = [
        HandoffChild::spawn(dir.path(), 1),
        HandoffChild::spawn(dir.path(), 2),
    ];
    let mut samples = vec![Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (child, out) in children.iter_mut().zip(&mut samples) {
            out.push(child.once(&pool).as_nanos() as f64);
        }
    }
    for child in children {
        child.finish();
    }
    print_ratios(
        "hand-off across processes (N = 2)",
        &["single", "weighted-2"],
        samples,
        1.5,
    );
}

fn overhead_summary() {
    paired_uncontended(
        "uncontended in process (N = 4)",
        &local_pool(4),
        201,
        5_000,
        1.2,
    );
    let dir = tempfile::tempdir().unwrap();
    paired_uncontended(
        "uncontended with host slots (N = 4)",
        &host_pool(dir.path(), 4),
        201,
        100,
        1.5,
    );
    paired_handoff(500);
}

const CHILD_VAR: &str = "GPU_TEST_PERMIT_WEIGHTED_BENCH_CHILD";

fn child(role: &str) {
    let words: Vec<&str> = role.split(' ').collect();
    match words[..] {
        ["suite", cap, test] => {
            Cap::from_name(cap).run_test(PermitPool::global(), test.parse().unwrap());
        }
        ["handoff", units] => {
            let units: usize = units.parse().unwrap();
            let mut out = std::io::stdout().lock();
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
                let p = gpu_test_permit::acquire_weighted(units);
                let t = monotonic_ns();
                assert_eq!(p.units(), units);
                drop(p);
                writeln!(out, "{t}").unwrap();
                out.flush().unwrap();
            }
        }
        // For instruction counts (`valgrind --tool=callgrind`): `calls` uncontended
        // acquisitions of one kind, on a pool of N = 4 in process only or with host slots.
        ["spin", layer, what, calls] => {
            let dir = tempfile::tempdir().unwrap();
            let pool = match layer {
                "local" => local_pool(4),
                "host" => host_pool(dir.path(), 4),
                _ => panic!("unknown layer {layer}"),
            };
            let calls: u64 = calls.parse().unwrap();
            Kind::from_name(what).time(&pool, calls);
        }
        _ => panic!("unknown bench child role {role}"),
    }
}

criterion_group!(
    benches,
    makespan_threads,
    makespan_processes,
    overhead_in_process,
    overhead_host_slots,
    overhead_handoff
);

fn main() {
    if let Ok(role) = std::env::var(CHILD_VAR) {
        child(&role);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    check_traces();
    makespan_summary();
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion runs each
    // bench once as a smoke test, and the paired rounds are skipped too.
    if std::env::args().any(|a| a == "--bench") {
        overhead_summary();
    }
}
