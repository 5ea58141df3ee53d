//! Permits on several GPUs: what placement buys (a mixed suite's makespan, and how many tests
//! share each GPU) and what it costs (acquire + release).
//!
//! - `makespan-saturated`, `makespan-partly-busy`: a simulated suite on 8 GPUs with N = 2 per
//!   GPU (16 units): one-GPU tests (one unit, holding 10 to 30 ms, 20 on average, unless said)
//!   and four-GPU tests that need their four GPUs whole (`request().gpus(4).units(2)`, holding
//!   60 ms unless said), in
//!   one fixed, seeded-shuffled order, run by runner threads of one process that take the next
//!   test as they free up; criterion times the whole suite (its makespan). `saturated`: 48
//!   one-GPU and 6 four-GPU tests, 16 runners (as many as the units). `partly-busy`: 96 and 8,
//!   8 runners, so that the one-GPU tests alone fill half the units and where they go decides
//!   whether four GPUs are whole when a four-GPU test arrives. `long-narrow`: 48 one-GPU tests
//!   of 60 to 100 ms and 8 four-GPU tests of 20 ms, 8 runners: the shape best fit is for.
//!   Ours, `best-fit` (the default placement): a one-GPU test goes to the busiest GPU that
//!   still has a unit, so whole GPUs stay free for four-GPU tests. `spread`, the previous
//!   behaviour: slot order, one-GPU tests spread over every GPU. `count-only`, what a count
//!   alone gives (a nextest test group of max-threads = 16): an in-process pool of 16 units on
//!   one "GPU", a one-GPU test takes 1 unit and a four-GPU test 8, and with no placement every
//!   test uses CUDA's default device, 0 (a four-GPU test 0-3).
//!   Each configuration also runs each suite once traced; the trace's hold events (their host
//!   slots; slot `i` is on GPU `i % 8`) give the most tests and units at once on each GPU for
//!   best fit and spread, which must never exceed N = 2 (the bench panics otherwise); for
//!   count-only, which holds no slots, the tests' own record of the devices they use.
//! - `overhead`: an uncontended `acquire()` + drop on a pool of 8 GPUs with N = 2 and host slots
//!   (file locks) in a temporary directory, best fit (which probes every slot's lock to count
//!   each GPU's free units) against spread (which takes the first free slot), and a four-GPU
//!   `request().gpus(4).acquire()` + drop under each.
//!
//! After criterion, the bench prints the makespan medians (criterion's runs, and interleaved
//! rounds of the three configurations so that drift on a shared machine hits all alike), each
//! one's ratio to best fit, the peaks per GPU, and the medians of interleaved rounds of the
//! uncontended acquisitions with their ratios to spread. Target: best fit's makespan below
//! spread's. It is, but by 1-3 % only, within noise on a shared machine: most four-GPU tests
//! arrive while another holds half the GPUs and one-GPU tests fill the rest, so neither
//! placement has four whole GPUs to give; see BENCHMARKS.md ("Several GPUs: placement").
//!
//! Run with `cargo bench --bench multi_gpu` (about 2 minutes).
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group};
use gpu_test_permit::__private::trace::read_trace;
use gpu_test_permit::host::Placement;
use gpu_test_permit::trace::TraceEvent;
use gpu_test_permit::{GpuTestPermit, PermitPool};

const GPUS: usize = 8;
/// N: permits (units) per GPU.
const PER_GPU: usize = 2;
/// GPUs a wide test needs, each whole.
const WIDE_GPUS: usize = 4;
const SEED: u64 = 0x6770_752d_7065_726d;

/// A simulated suite and how its runners run it.
#[derive(Clone, Copy, Debug)]
struct Shape {
    name: &'static str,
    runners: usize,
    one_gpu_tests: usize,
    wide_tests: usize,
    /// A one-GPU test holds `narrow_ms.0` to `narrow_ms.0 + narrow_ms.1` ms.
    narrow_ms: (u64, u64),
    /// A four-GPU test holds this long, ms.
    wide_ms: u64,
}

const SHAPES: [Shape; 3] = [
    // As many runners as units: every unit is asked for all the time.
    Shape {
        name: "saturated",
        runners: 16,
        one_gpu_tests: 48,
        wide_tests: 6,
        narrow_ms: (10, 20),
        wide_ms: 60,
    },
    // Half as many runners as units, and fewer four-GPU tests among more one-GPU ones: the
    // one-GPU tests alone fill half the units, so where they go leaves GPUs whole or not.
    Shape {
        name: "partly-busy",
        runners: 8,
        one_gpu_tests: 96,
        wide_tests: 8,
        narrow_ms: (10, 20),
        wide_ms: 60,
    },
    // Long one-GPU tests beside short four-GPU ones, half as many runners as units: spread
    // leaves a one-GPU test on every GPU, so a four-GPU test waits for four of them to end,
    // and the runners queued behind it idle; best fit packs them and leaves GPUs whole.
    Shape {
        name: "long-narrow",
        runners: 8,
        one_gpu_tests: 48,
        wide_tests: 8,
        narrow_ms: (60, 40),
        wide_ms: 20,
    },
];

/// One test of a suite.
#[derive(Clone, Copy, Debug)]
struct Test {
    wide: bool,
    hold: Duration,
}

impl Shape {
    /// The suite, in the order the runners take it: one-GPU tests hold `narrow_ms`, four-GPU
    /// tests `wide_ms`.
    fn suite(&self) -> Vec<Test> {
        // splitmix64: the same suite in every run, on every machine.
        let mut state = SEED;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut tests: Vec<Test> = (0..self.one_gpu_tests + self.wide_tests)
            .map(|t| match t >= self.one_gpu_tests {
                true => Test {
                    wide: true,
                    hold: Duration::from_millis(self.wide_ms),
                },
                false => Test {
                    wide: false,
                    hold: Duration::from_millis(self.narrow_ms.0 + next() % (self.narrow_ms.1 + 1)),
                },
            })
            .collect();
        // Fisher-Yates.
        for i in (1..tests.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            tests.swap(i, j);
        }
        tests
    }

    /// The makespan were every unit busy from start to end: units x hold over the 16 units.
    fn ideal(&self) -> Duration {
        let unit_time: Duration = self
            .suite()
            .iter()
            .map(|t| {
                t.hold
                    * if t.wide {
                        (WIDE_GPUS * PER_GPU) as u32
                    } else {
                        1
                    }
            })
            .sum();
        unit_time / (GPUS * PER_GPU) as u32
    }
}

/// The three ways to run the suite on 8 GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    /// Host slots, best-fit placement (the default).
    BestFit,
    /// Host slots, slot order (the previous behaviour).
    Spread,
    /// 16 units in process, one "GPU": what a count alone gives.
    CountOnly,
}

impl Config {
    const ALL: [Config; 3] = [Config::BestFit, Config::Spread, Config::CountOnly];

    fn name(self) -> &'static str {
        match self {
            Config::BestFit => "best-fit",
            Config::Spread => "spread",
            Config::CountOnly => "count-only",
        }
    }

    fn pool(self, slots: PathBuf, trace: Option<PathBuf>) -> PermitPool {
        let b = match self {
            Config::BestFit => placed(slots, Placement::BestFit),
            Config::Spread => placed(slots, Placement::Spread),
            Config::CountOnly => PermitPool::builder()
                .concurrency(PER_GPU * GPUS)
                .gpus(1)
                .in_process_only(),
        };
        match trace {
            Some(path) => b.trace(path),
            None => b,
        }
        .build()
        .unwrap()
    }

    /// One simulated test: take the permit, "use" its GPUs (noting them in `seen`, where
    /// given), release.
    fn run_test(self, pool: &PermitPool, test: Test, seen: Option<&Occupancy>) {
        let wide = test.wide;
        let permit = match (self, wide) {
            (_, false) => pool.acquire(),
            (Config::CountOnly, true) => pool.request().units(PER_GPU * WIDE_GPUS).acquire(),
            (_, true) => pool.request().gpus(WIDE_GPUS).units(PER_GPU).acquire(),
        };
        let devices = match self {
            // No placement: CUDA's default device, and the ones after it.
            Config::CountOnly if wide => (0..WIDE_GPUS).collect(),
            Config::CountOnly => vec![0],
            _ => permit.devices(),
        };
        assert_eq!(devices.len(), if wide { WIDE_GPUS } else { 1 });
        if let Some(seen) = seen {
            seen.enter(&devices);
        }
        thread::sleep(test.hold);
        if let Some(seen) = seen {
            seen.leave(&devices);
        }
        drop(permit);
    }
}

fn placed(slots: PathBuf, placement: Placement) -> gpu_test_permit::PoolBuilder {
    PermitPool::builder()
        .concurrency(PER_GPU)
        .gpus(GPUS)
        .slot_dir(slots)
        .placement(placement)
}

/// The tests' own record of the devices they use: how many at once on each GPU, at most.
#[derive(Debug, Default)]
struct Occupancy {
    now: [AtomicUsize; GPUS],
    peak: [AtomicUsize; GPUS],
}

impl Occupancy {
    fn enter(&self, devices: &[usize]) {
        for &d in devices {
            let now = self.now[d].fetch_add(1, Ordering::SeqCst) + 1;
            self.peak[d].fetch_max(now, Ordering::SeqCst);
        }
    }

    fn leave(&self, devices: &[usize]) {
        for &d in devices {
            self.now[d].fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn peaks(&self) -> [usize; GPUS] {
        std::array::from_fn(|d| self.peak[d].load(Ordering::SeqCst))
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

/// Where the runs keep their slot directories and traces.
fn root() -> &'static tempfile::TempDir {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    ROOT.get_or_init(|| tempfile::tempdir().unwrap())
}

/// A new slot directory named `name`.
fn slots(name: &str) -> PathBuf {
    let dir = root().path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn trace_path(shape: &Shape, config: Config) -> PathBuf {
    root()
        .path()
        .join(format!("{}-{}.trace.json", shape.name, config.name()))
}

/// The pools the timed runs use, one per configuration, each with its own slot directory.
fn pools() -> &'static [PermitPool; 3] {
    static POOLS: OnceLock<[PermitPool; 3]> = OnceLock::new();
    POOLS.get_or_init(|| Config::ALL.map(|c| c.pool(slots(c.name()), None)))
}

/// Runs `shape`'s suite once: its runners (threads `runner-<r>`) take the next test as they
/// finish one, like a test runner's threads; returns its wall time.
fn run_suite(
    shape: &Shape,
    config: Config,
    pool: &PermitPool,
    seen: Option<&Occupancy>,
) -> Duration {
    let tests = &shape.suite();
    let t = Instant::now();
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for r in 0..shape.runners {
            let next = &next;
            thread::Builder::new()
                .name(format!("runner-{r}"))
                .spawn_scoped(s, move || {
                    while let Some(&test) = tests.get(next.fetch_add(1, Ordering::Relaxed)) {
                        config.run_test(pool, test, seen);
                    }
                })
                .unwrap();
        }
    });
    t.elapsed()
}

fn group_name(shape: &Shape) -> String {
    format!("makespan-{}", shape.name)
}

fn makespan(c: &mut Criterion) {
    for shape in &SHAPES {
        let name = group_name(shape);
        let mut g = c.benchmark_group(&name);
        // Runs take a quarter to half a second: ten samples of one or a few runs each.
        g.sample_size(10);
        g.sampling_mode(SamplingMode::Flat);
        g.warm_up_time(Duration::from_millis(1));
        g.measurement_time(Duration::from_secs(5));
        for (config, pool) in Config::ALL.into_iter().zip(pools()) {
            let id = format!("{name}/{}", config.name());
            g.bench_function(config.name(), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            let took = run_suite(shape, config, pool, None);
                            record(&id, took);
                            took
                        })
                        .sum()
                })
            });
        }
        g.finish();
    }
}

/// Per GPU, the most tests and units held at once according to a trace's hold events (a
/// hold's slot `i` is on GPU `i % gpus`).
fn trace_peaks(events: &[TraceEvent]) -> ([usize; GPUS], [usize; GPUS]) {
    let mut tests = [0; GPUS];
    let mut units = [0; GPUS];
    for gpu in 0..GPUS {
        // (time, tests, units): releases before acquisitions at equal times.
        let mut edges: Vec<(u64, i64, i64)> = Vec::new();
        for e in events.iter().filter(|e| e.name == "hold") {
            assert_eq!(e.args.gpus, GPUS, "{e:?}");
            let here = e.args.slots.iter().filter(|&&s| s % GPUS == gpu).count() as i64;
            if here > 0 {
                edges.push((e.ts, 1, here));
                edges.push((e.ts + e.dur, -1, -here));
            }
        }
        edges.sort_by_key(|&(t, n, _)| (t, n));
        let (mut n, mut u) = (0i64, 0i64);
        for (_, dn, du) in edges {
            n += dn;
            u += du;
            tests[gpu] = tests[gpu].max(n as usize);
            units[gpu] = units[gpu].max(u as usize);
        }
    }
    (tests, units)
}

/// What the traced run of each configuration showed.
#[derive(Debug)]
struct Traced {
    config: Config,
    took: Duration,
    /// Most tests at once on each GPU.
    tests: [usize; GPUS],
    /// Most units at once on each GPU (from the trace only).
    units: Option<[usize; GPUS]>,
}

/// Runs the suite once per configuration with a traced pool (and the tests' own record), and
/// checks the placed ones: never more than N tests or units on a GPU.
fn traced_runs(shape: &Shape) -> Vec<Traced> {
    Config::ALL
        .into_iter()
        .map(|config| {
            let path = trace_path(shape, config);
            let pool = config.pool(
                slots(&format!("traced-{}-{}", shape.name, config.name())),
                Some(path.clone()),
            );
            let seen = Occupancy::default();
            let took = run_suite(shape, config, &pool, Some(&seen));
            drop(pool);
            let own = seen.peaks();
            if config == Config::CountOnly {
                return Traced {
                    config,
                    took,
                    tests: own,
                    units: None,
                };
            }
            let file = read_trace(&path).unwrap();
            assert!(file.skipped.is_empty(), "{:?}", file.skipped);
            let holds = file.events.iter().filter(|e| e.name == "hold").count();
            assert_eq!(
                holds,
                shape.one_gpu_tests + shape.wide_tests,
                "every test's hold is traced"
            );
            let (tests, units) = trace_peaks(&file.events);
            for gpu in 0..GPUS {
                assert!(
                    tests[gpu] <= PER_GPU && units[gpu] <= PER_GPU,
                    "{}: GPU {gpu} had {} tests and {} units at once",
                    config.name(),
                    tests[gpu],
                    units[gpu]
                );
                // The tests' own record sits inside the trace's holds.
                assert!(own[gpu] <= tests[gpu], "{}: {own:?}", config.name());
            }
            Traced {
                config,
                took,
                tests,
                units: Some(units),
            }
        })
        .collect()
}

fn median(v: &mut [Duration]) -> Option<Duration> {
    v.sort();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(" ")
}

/// Medians of each configuration's runs, with their ratios to best fit.
fn print_makespans(what: &str, mut runs: Vec<Vec<Duration>>) {
    let Some(base) = median(&mut runs[0]) else {
        return;
    };
    let mut line = format!("makespan ({what}):");
    for (config, v) in Config::ALL.iter().zip(&mut runs) {
        if let Some(m) = median(v) {
            line += &format!(
                " {} {:.3} s ({:.3}x of best fit, {} runs);",
                config.name(),
                m.as_secs_f64(),
                m.as_secs_f64() / base.as_secs_f64(),
                v.len()
            );
        }
    }
    println!("{}", line.trim_end_matches(';'));
}

fn makespan_summary(shape: &Shape, rounds: usize) {
    let name = group_name(shape);
    let order: String = shape
        .suite()
        .iter()
        .map(|t| if t.wide { 'W' } else { '.' })
        .collect();
    println!(
        "{}: {} runners, ideal makespan {:.3} s; order ({WIDE_GPUS}-GPU tests as W): {order}",
        shape.name,
        shape.runners,
        shape.ideal().as_secs_f64()
    );
    print_makespans(
        &format!("{name}, criterion's runs"),
        Config::ALL
            .iter()
            .map(|c| samples(&format!("{name}/{}", c.name())))
            .collect(),
    );
    if rounds > 0 {
        let mut runs = vec![Vec::new(); Config::ALL.len()];
        for _ in 0..rounds {
            for ((config, pool), out) in Config::ALL.into_iter().zip(pools()).zip(&mut runs) {
                out.push(run_suite(shape, config, pool, None));
            }
        }
        print_makespans(&format!("{name}, interleaved rounds"), runs);
    }
    for t in traced_runs(shape) {
        let units = t
            .units
            .map_or(String::new(), |u| format!(", units [{}]", list(&u)));
        let from = if t.units.is_some() {
            "from the trace"
        } else {
            "from the tests' own record"
        };
        println!(
            "traced run, {name}, {}: {:.3} s; most tests at once per GPU 0-7 ({from}) [{}]{units}",
            t.config.name(),
            t.took.as_secs_f64(),
            list(&t.tests),
        );
    }
}

/// The uncontended acquisitions compared, the baseline (spread) first.
#[derive(Clone, Copy, Debug)]
enum Kind {
    SpreadOne,
    BestFitOne,
    SpreadFour,
    BestFitFour,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::SpreadOne,
        Kind::BestFitOne,
        Kind::SpreadFour,
        Kind::BestFitFour,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::SpreadOne => "spread",
            Kind::BestFitOne => "best-fit",
            Kind::SpreadFour => "spread-4-gpus",
            Kind::BestFitFour => "best-fit-4-gpus",
        }
    }

    fn placement(self) -> Placement {
        match self {
            Kind::SpreadOne | Kind::SpreadFour => Placement::Spread,
            Kind::BestFitOne | Kind::BestFitFour => Placement::BestFit,
        }
    }

    fn acquire(self, pool: &PermitPool) -> GpuTestPermit {
        match self {
            Kind::SpreadOne | Kind::BestFitOne => pool.acquire(),
            Kind::SpreadFour | Kind::BestFitFour => pool.request().gpus(WIDE_GPUS).acquire(),
        }
    }

    /// Times `calls` acquisitions and releases of this kind.
    fn time(self, pool: &PermitPool, calls: u32) -> Duration {
        let t = Instant::now();
        for _ in 0..calls {
            drop(black_box(self.acquire(pool)));
        }
        t.elapsed()
    }
}

/// A host-slot pool of 8 GPUs with N = 2 per placement, each in its own directory.
fn overhead_pools() -> &'static [(Placement, PermitPool); 2] {
    static POOLS: OnceLock<[(Placement, PermitPool); 2]> = OnceLock::new();
    POOLS.get_or_init(|| {
        [Placement::Spread, Placement::BestFit].map(|p| {
            let dir = slots(&format!("overhead-{p:?}"));
            (p, placed(dir, p).build().unwrap())
        })
    })
}

fn pool_for(kind: Kind) -> &'static PermitPool {
    let (_, pool) = overhead_pools()
        .iter()
        .find(|(p, _)| *p == kind.placement())
        .unwrap();
    pool
}

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead");
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    for kind in Kind::ALL {
        let pool = pool_for(kind);
        assert_eq!(kind.acquire(pool).devices().len(), {
            if matches!(kind, Kind::SpreadFour | Kind::BestFitFour) {
                WIDE_GPUS
            } else {
                1
            }
        });
        g.bench_function(kind.name(), |b| {
            b.iter(|| drop(black_box(kind.acquire(pool))))
        });
    }
    g.finish();
}

/// Interleaved rounds of each kind of uncontended acquire + release, so that drift on a noisy
/// machine hits all alike; prints the median per-call times, best fit's against spread's.
fn overhead_summary(rounds: usize, calls: u32) {
    let mut samples = vec![Vec::new(); Kind::ALL.len()];
    for _ in 0..rounds {
        for (kind, out) in Kind::ALL.iter().zip(&mut samples) {
            let t = kind.time(pool_for(*kind), calls);
            out.push(t.as_nanos() as f64 / f64::from(calls));
        }
    }
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let us = |ns: f64| format!("{:.2} µs", ns / 1e3);
    println!(
        "uncontended with host slots (8 GPUs, N = 2): acquire() spread {}, best-fit {} ({:.3}x); \
         gpus(4) spread {}, best-fit {} ({:.3}x)",
        us(medians[0]),
        us(medians[1]),
        medians[1] / medians[0],
        us(medians[2]),
        us(medians[3]),
        medians[3] / medians[2],
    );
}

criterion_group!(benches, makespan, overhead);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion runs each
    // bench once as a smoke test, and the interleaved rounds are skipped.
    let bench = std::env::args().any(|a| a == "--bench");
    for shape in &SHAPES {
        makespan_summary(shape, if bench { 9 } else { 0 });
    }
    if bench {
        overhead_summary(101, 100);
    }
    // A static is never dropped: remove the slot directories and traces here.
    let _ = std::fs::remove_dir_all(root().path());
}
