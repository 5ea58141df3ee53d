//! The CPU the crate adds to each test process, as `cargo nextest` runs them (one process per
//! test): this bench's own executable started again many times, as a trivial test that takes
//! one permit from the global pool (N = 8, a slot directory of its own, nextest's variables
//! set) beside the baseline, the same executable that links the crate and takes none. CPU is
//! user + system time of the children (`getrusage(RUSAGE_CHILDREN)`), steadier than wall time
//! on a shared machine; the variants run interleaved, in rounds, and the report gives each
//! one's median over the rounds and the median of the per-round differences.
//!
//! ```sh
//! cargo bench --bench process_cost                   # 9 rounds of 200 processes a variant
//! ROUNDS=15 PROCESSES=400 cargo bench --bench process_cost
//! ```

use std::process::Command;
use std::time::Duration;

const CHILD_VAR: &str = "GTP_PROCESS_COST_CHILD";

/// `(name, what the child does, extra environment)`.
type Variant = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const VARIANTS: &[Variant] = &[
    ("baseline: links the crate, takes no permit", "none", &[]),
    (
        "one permit, in a nextest test group",
        "permit",
        &[("NEXTEST_TEST_GROUP", "gpu")],
    ),
    (
        "one permit, outside a test group (the hint's reminder)",
        "permit",
        &[("NEXTEST_TEST_GROUP", "@global")],
    ),
];

fn main() {
    if let Some(what) = std::env::var_os(CHILD_VAR) {
        match what.to_str() {
            Some("permit") => drop(std::hint::black_box(gpu_test_permit::acquire())),
            _ => {
                std::hint::black_box(gpu_test_permit::PermitKind::Shared);
            }
        }
        return;
    }
    // `cargo bench` passes `--bench`; a filter or `--list` from `cargo test --benches` runs
    // nothing here.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let rounds: usize = env_number("ROUNDS", 9);
    let processes: usize = env_number("PROCESSES", 200);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = std::env::current_exe().expect("this executable");
    let run = |what: &str, extra: &[(&str, &str)]| -> Duration {
        let before = children_cpu();
        for i in 0..processes {
            let mut cmd = Command::new(&exe);
            cmd.env(CHILD_VAR, what)
                .env("REALIZAR_GPU_TEST_CONCURRENCY", "8")
                .env("GPU_TEST_PERMIT_DIR", dir.path())
                .env("NEXTEST_EXECUTION_MODE", "process-per-test")
                .env("NEXTEST_RUN_ID", "process-cost-bench")
                .env("NEXTEST_TEST_NAME", format!("trivial_{i}"))
                .env("NEXTEST_BINARY_ID", "bench::process_cost")
                .stderr(std::process::Stdio::null());
            for (k, v) in extra {
                cmd.env(k, v);
            }
            let status = cmd.status().expect("start a child");
            assert!(status.success(), "{status}");
        }
        (children_cpu() - before) / processes as u32
    };
    // Warm up: the slot files exist, the hint's run is recorded, caches are hot.
    for (_, what, extra) in VARIANTS {
        run(what, extra);
    }
    let mut per_variant: Vec<Vec<Duration>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..rounds {
        // Rotate the order, so no variant always runs first in a round.
        for k in 0..VARIANTS.len() {
            let i = (k + round) % VARIANTS.len();
            let (_, what, extra) = VARIANTS[i];
            per_variant[i].push(run(what, extra));
        }
    }
    println!("CPU per process (user + sys), {rounds} rounds x {processes} processes a variant:");
    let base = &per_variant[0];
    for (i, (name, _, _)) in VARIANTS.iter().enumerate() {
        let v = &per_variant[i];
        let added: Vec<f64> = v
            .iter()
            .zip(base)
            .map(|(a, b)| a.as_secs_f64() - b.as_secs_f64())
            .collect();
        println!(
            "  {name}: median {:.3} ms (rounds {:.3}..{:.3} ms); added over the baseline: \
             median {:+.3} ms",
            median(v.iter().map(Duration::as_secs_f64).collect()) * 1e3,
            v.iter().min().unwrap().as_secs_f64() * 1e3,
            v.iter().max().unwrap().as_secs_f64() * 1e3,
            median(added) * 1e3,
        );
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// User + system CPU of the waited-for children so far.
fn children_cpu() -> Duration {
    // SAFETY: `usage` is a valid `rusage` to write to.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid target.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
