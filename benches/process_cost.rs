//! The CPU the crate adds to each test process, as `cargo nextest` runs them (one process per
//! test): this bench's own executable started again many times, as a trivial test that takes
//! one permit from the global pool (N = 8, a slot directory of its own, nextest's variables
//! set) beside the baseline, the same executable that links the crate and takes none.
//!
//! Two references sit beside them: `floor`, the file locks alone (the 11 files of an N = 8
//! directory opened, the layout read, a slot taken under the gate and given back, in raw
//! system calls), which is what any cross-process cap built on file locks pays; and `open`, a
//! pool opened on the directory that takes no permit.
//!
//! CPU is each child's user + system time (`getrusage(RUSAGE_CHILDREN)` around its wait),
//! steadier than wall time on a shared machine. One process of each variant runs after
//! another, the order rotated every time, so slow drift (clock frequency, a neighbour's load)
//! falls on every variant alike, and each process is paired with the baseline process started
//! beside it. The report gives each variant's median and, over the pairs, the median and the
//! mean difference to the baseline with the mean's 95 % interval.
//!
//! Set `PROCESS_COST_OTHER` to other builds of this bench (a list of paths, written as `PATH`
//! is: say, of the commit before a change, each built with a different
//! `profile.bench.package.gpu-test-permit.codegen-units`) to run their baselines and permits in
//! the same rotation, each against its own baseline. Two builds measured one after the other
//! differ by more than a change does, and so do two builds of one commit whose code the linker
//! laid out differently: a test process faults in each 64 KiB of the crate's code it touches
//! (`perf stat -e page-faults` counts them), so compare several layouts of each side.
//!
//! Set `PROCESS_COST_TESTS` to test binaries with the tests `takes_a_permit` and `takes_none`
//! to run those instead, as nextest runs a test: `scripts/process-cost.sh` builds them. Each
//! test is paired with its own binary's `takes_none`, or, where `PROCESS_COST_WITHOUT` names
//! a test binary of the same tests that does not link the crate, with that binary's test of
//! the same name, run in the same rotation: what linking the crate costs a test process
//! (`scripts/link-cost.sh` builds them).
//!
//! ```sh
//! cargo bench --bench process_cost                   # 2,000 processes a variant
//! PROCESSES=5000 cargo bench --bench process_cost
//! PROCESS_COST_OTHER=/tmp/before-1:/tmp/before-16 cargo bench --bench process_cost
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const CHILD_VAR: &str = "GTP_PROCESS_COST_CHILD";

/// `(name, what the child does, extra environment)`.
type Variant = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const IN_GROUP: &[(&str, &str)] = &[("NEXTEST_TEST_GROUP", "gpu")];
const OUTSIDE_GROUP: &[(&str, &str)] = &[("NEXTEST_TEST_GROUP", "@global")];

const VARIANTS: &[Variant] = &[
    ("baseline: links the crate, takes no permit", "none", &[]),
    ("one permit, in a nextest test group", "permit", IN_GROUP),
    (
        "one permit, outside a test group (the hint's reminder)",
        "permit",
        &[("NEXTEST_TEST_GROUP", "@global")],
    ),
    ("open: a pool on the directory, no permit", "open", IN_GROUP),
    (
        "floor: the file locks alone, raw system calls",
        "floor",
        IN_GROUP,
    ),
];

fn main() {
    if let Some(what) = std::env::var_os(CHILD_VAR) {
        match what.to_str() {
            Some("permit") => drop(std::hint::black_box(gpu_test_permit::acquire())),
            Some("open") => drop(std::hint::black_box(
                gpu_test_permit::PermitPool::builder()
                    .concurrency(8)
                    .slot_dir(std::env::var_os("GPU_TEST_PERMIT_DIR").expect("a directory"))
                    .build()
                    .expect("a pool"),
            )),
            Some("floor") => floor(),
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
    let processes: usize = env_number("PROCESSES", 2000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let this = std::env::current_exe().expect("this executable");
    let mut runs: Vec<Run> = Vec::new();
    match std::env::var_os("PROCESS_COST_TESTS") {
        // Test binaries built by `scripts/process-cost.sh` or `scripts/link-cost.sh`: each
        // one's two tests, as nextest runs a test (`--exact NAME --nocapture`, one a process),
        // the binary without the crate first where there is one.
        Some(bins) => {
            let without = std::env::var_os("PROCESS_COST_WITHOUT").map(PathBuf::from);
            for bin in without.iter().cloned().chain(std::env::split_paths(&bins)) {
                let label = bin.file_name().map_or_else(
                    || bin.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                for (name, test, extra) in [
                    ("the test takes no permit", "takes_none", OUTSIDE_GROUP),
                    (
                        "the test takes one permit, in a test group",
                        "takes_a_permit",
                        IN_GROUP,
                    ),
                ] {
                    let args: Vec<String> =
                        vec!["--exact".into(), test.into(), "--nocapture".into()];
                    // Its pair: the same test without the crate, else its binary's first test.
                    let base = match &without {
                        Some(_) => runs.iter().position(|r| r.args == args),
                        None => runs.iter().position(|r| r.exe == bin),
                    }
                    .unwrap_or(runs.len());
                    runs.push(Run {
                        name: format!("{label}: {name}"),
                        exe: bin.clone(),
                        args,
                        child: None,
                        extra,
                        base,
                    });
                }
            }
        }
        None => {
            for (name, what, extra) in VARIANTS {
                runs.push(Run::of(&runs, &this, name.to_string(), what, extra));
            }
            // Other builds' baselines and permits, each against its own baseline.
            let others = std::env::var_os("PROCESS_COST_OTHER").unwrap_or_default();
            for other in std::env::split_paths(&others).filter(|p| !p.as_os_str().is_empty()) {
                let label = other.file_name().map_or_else(
                    || other.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                for (name, what, extra) in &VARIANTS[..2] {
                    runs.push(Run::of(
                        &runs,
                        &other,
                        format!("{name} [{label}]"),
                        what,
                        extra,
                    ));
                }
            }
        }
    }
    let one = |run: &Run, i: usize| {
        let mut cmd = Command::new(&run.exe);
        // What nextest 0.9 sets for a test process (the run id is a UUID).
        cmd.args(&run.args)
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "8")
            .env_remove("GPU_TEST_PERMIT_CONCURRENCY")
            .env("GPU_TEST_PERMIT_DIR", dir.path())
            .env("NEXTEST", "1")
            .env("NEXTEST_EXECUTION_MODE", "process-per-test")
            .env("NEXTEST_RUN_ID", "6c0f1a52-9d0e-4b7a-8f3e-2a5b7c9d1e04")
            .env("NEXTEST_TEST_NAME", format!("trivial_{i}"))
            .env("NEXTEST_BINARY_ID", "bench::process_cost")
            .env("NEXTEST_ATTEMPT", "1")
            .env("NEXTEST_TOTAL_ATTEMPTS", "1")
            .env("NEXTEST_TEST_GLOBAL_SLOT", "0")
            .env("NEXTEST_TEST_GROUP_SLOT", "none")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(what) = run.child {
            cmd.env(CHILD_VAR, what);
        }
        for (k, v) in run.extra {
            cmd.env(k, v);
        }
        let before = children_cpu();
        let status = cmd.status().expect("start a child");
        let cpu = children_cpu() - before;
        assert!(status.success(), "{}: {status}", run.name);
        cpu
    };
    // Warm up: the slot files exist, the hint's run is recorded, caches are hot.
    for run in &runs {
        for i in 0..20 {
            one(run, i);
        }
    }
    let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(processes); runs.len()];
    for k in 0..processes {
        for j in 0..runs.len() {
            let r = (j + k) % runs.len();
            ms[r].push(one(&runs[r], k).as_secs_f64() * 1e3);
        }
    }
    println!("CPU per process (user + sys), {processes} processes a variant, started in turn:");
    for (r, run) in runs.iter().enumerate() {
        let base = run.base;
        let added: Vec<f64> = ms[r].iter().zip(&ms[base]).map(|(a, b)| a - b).collect();
        let (mean, half) = mean_interval(&added);
        println!(
            "  {}: median {:.3} ms; added over the baseline beside it: median {:+.3} ms, mean \
             {:+.3} ms +- {:.3}",
            run.name,
            median(ms[r].clone()),
            median(added),
            mean,
            half,
        );
    }
}

/// One kind of child process.
struct Run {
    name: String,
    exe: PathBuf,
    args: Vec<String>,
    /// What this bench's own executable does as a child (`CHILD_VAR`); `None` for a test
    /// binary.
    child: Option<&'static str>,
    extra: &'static [(&'static str, &'static str)],
    /// The run each process of this one is paired with (itself for a baseline).
    base: usize,
}

impl Run {
    /// The first of `runs` with the same executable is its baseline.
    fn of(
        runs: &[Run],
        exe: &Path,
        name: String,
        what: &'static str,
        extra: &'static [(&'static str, &'static str)],
    ) -> Run {
        Run {
            name,
            exe: exe.to_path_buf(),
            args: Vec::new(),
            child: Some(what),
            extra,
            base: runs.iter().position(|r| r.exe == exe).unwrap_or(runs.len()),
        }
    }
}

/// What a cap built on file locks pays at the least, in raw system calls: the files of an
/// N = 8 directory opened, the layout read and locked shared, one slot taken under the gate,
/// then given back.
fn floor() {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::env::var_os("GPU_TEST_PERMIT_DIR").expect("a directory");
    let names = ["gpu0.layout", "gpu0.gate", "gpu0.notify"]
        .into_iter()
        .map(String::from)
        .chain((0..8).map(|i| format!("gpu0.slot{i}")));
    let mut fds = Vec::new();
    for name in names {
        let mut path = dir.as_bytes().to_vec();
        path.push(b'/');
        path.extend_from_slice(name.as_bytes());
        path.push(0);
        // SAFETY: `path` is a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDWR
                    | libc::O_CREAT
                    | libc::O_CLOEXEC
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK,
                0o600,
            )
        };
        assert!(fd >= 0, "a lock file of the directory");
        fds.push(fd);
    }
    let mut buf = [0u8; 256];
    // SAFETY: the descriptors are open; `buf` has room for 256 bytes.
    unsafe {
        libc::pread(fds[0], buf.as_mut_ptr().cast(), buf.len(), 0);
        libc::flock(fds[0], libc::LOCK_SH | libc::LOCK_NB);
        libc::flock(fds[1], libc::LOCK_EX | libc::LOCK_NB);
        libc::flock(fds[3], libc::LOCK_EX | libc::LOCK_NB);
        libc::flock(fds[1], libc::LOCK_UN);
        libc::flock(fds[3], libc::LOCK_UN);
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

/// The mean and the half-width of its 95 % interval (normal approximation).
fn mean_interval(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, 1.96 * (var / n).sqrt())
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
