//! `REALIZAR_GPU_TEST_CONCURRENCY=auto` against a simulated GPU whose throughput saturates at
//! three tests at once and which wedges (every test on it hangs) when four hold it: runs of
//! real test processes, as nextest starts them, one after another with one state directory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpu_test_permit::__private::runs::{RunRecord, read_run};

use crate::util::{clear_permit_env, tempdir};

const SIM: &str = "TUNE_SIM_DIR";
const THREADS: &str = "TUNE_SIM_THREADS";
/// A simulated test's work alone: its hold takes this long with up to three holders.
const WORK: Duration = Duration::from_millis(150);
const TICK: Duration = Duration::from_millis(5);
/// The GPU's throughput saturates here: with k holders, a hold takes `WORK x max(1, k / 3)`.
const SATURATION: usize = 3;
/// This many holders at once wedge the simulated driver.
const WEDGE: usize = 4;
/// Tests in a simulated run, and how many of them run at once (nextest's test threads).
const TESTS: usize = 18;
const TEST_THREADS: usize = 8;

/// Holders alive now: files `<pid>.<n>` in `holders` whose process lives.
fn holders_now(holders: &Path) -> usize {
    std::fs::read_dir(holders)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let pid = name.split('.').next().unwrap_or_default().to_string();
                    Path::new("/proc").join(pid).exists()
                })
                .count()
        })
        .unwrap_or(0)
}

/// Simulated tests' memory: `name=bytes` pairs, comma-separated. A test named here reports
/// using that much (as its fixture would measure it) before it returns its permit.
const USES: &str = "TUNE_SIM_USES";
/// The same for tests that declare the memory they need (and take their permit with it).
const DECLARES: &str = "TUNE_SIM_DECLARES";

/// The bytes `var` gives the running simulated test (named by nextest), if any.
fn sim_bytes(var: &str) -> Option<u64> {
    let name = std::env::var("NEXTEST_TEST_NAME").ok()?;
    let list = std::env::var(var).ok()?;
    list.split(',').find_map(|pair| {
        let (test, bytes) = pair.split_once('=')?;
        (test == name).then(|| bytes.parse().ok())?
    })
}

/// One simulated GPU test: holds a permit while it does `WORK` at the simulated GPU's speed,
/// and hangs (until the hold deadline aborts it) once the GPU wedges.
fn simulated_test(sim: &Path) {
    let permit = match sim_bytes(DECLARES) {
        Some(bytes) => gpu_test_permit::acquire_memory(bytes),
        None => gpu_test_permit::acquire(),
    };
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let holders = sim.join("holders");
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mine = holders.join(format!("{}.{n}", std::process::id()));
    std::fs::write(&mine, b"").unwrap();
    // The simulated GPU works in wall time, at the speed the holders now allow, however
    // long this process waits for a CPU between its looks (a loaded machine, an emulator).
    let mut done = Duration::ZERO;
    let mut last = Instant::now();
    while done < WORK {
        let k = holders_now(&holders).max(1);
        if k >= WEDGE || sim.join("wedged").exists() {
            std::fs::write(sim.join("wedged"), b"").unwrap();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        std::thread::sleep(TICK);
        let now = Instant::now();
        done += (now - last).mul_f64(SATURATION as f64 / k.max(SATURATION) as f64);
        last = now;
    }
    let _ = std::fs::remove_file(&mine);
    if let Some(bytes) = sim_bytes(USES) {
        permit.record_memory_used(bytes);
    }
    drop(permit);
}

#[test]
#[ignore = "a child of the tests in this module"]
fn tune_sim_child() {
    let sim = PathBuf::from(std::env::var_os(SIM).expect("started by a tune test"));
    match std::env::var(THREADS)
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
    {
        // A cargo-test-like run: the simulated tests on threads of one process.
        Some(threads) => std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| simulated_test(&sim));
            }
        }),
        None => simulated_test(&sim),
    }
}

/// A simulated GPU, the slot and state directories it is run with, and the stand-in driver's
/// version (which is the GPU's identity, where the crate is built with `cuda`).
struct Host {
    _tmp: tempfile::TempDir,
    sim: PathBuf,
    slots: PathBuf,
    state: PathBuf,
    driver: u32,
    /// Set for every child after the defaults (and so instead of them).
    env: Vec<(&'static str, String)>,
}

/// One simulated run.
struct Run {
    id: String,
    wall: Duration,
    n: usize,
    hung: bool,
    why: String,
}

impl Host {
    fn new() -> Host {
        let tmp = tempdir();
        let sim = tmp.path().join("sim");
        std::fs::create_dir_all(sim.join("holders")).unwrap();
        Host {
            slots: tmp.path().join("slots"),
            state: tmp.path().join("state"),
            sim,
            _tmp: tmp,
            driver: 12080,
            env: Vec::new(),
        }
    }

    fn child(&self, run: Option<&str>, test: &str, threads: Option<usize>) -> Child {
        let mut c = Command::new(std::env::current_exe().unwrap());
        clear_permit_env(&mut c);
        c.args(["--exact", "tune::tune_sim_child", "--include-ignored"])
            .args(["--nocapture", "--test-threads", "1"])
            .env(SIM, &self.sim)
            .env("REALIZAR_GPU_TEST_CONCURRENCY", "auto")
            .env("GPU_TEST_PERMIT_MAX_CONCURRENCY", "8")
            .env("GPU_TEST_PERMIT_HOLD_TIMEOUT", "3s")
            .env("GPU_TEST_PERMIT_DIR", &self.slots)
            .env("GPU_TEST_PERMIT_STATE", &self.state)
            .env("GPU_TEST_PERMIT_GPUS", "1")
            .env("GPU_TEST_PERMIT_REQUIRE", "none")
            .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
            .env("CUDA_PROBE_STUB_DRIVER", self.driver.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(run) = run {
            c.env("NEXTEST_RUN_ID", run)
                .env("NEXTEST_EXECUTION_MODE", "process-per-test")
                .env("NEXTEST_BINARY_ID", "sim")
                .env("NEXTEST_TEST_NAME", test);
        }
        if let Some(t) = threads {
            c.env(THREADS, t.to_string());
        }
        for (var, value) in &self.env {
            c.env(var, value);
        }
        c.spawn().unwrap()
    }

    /// A nextest-like run: `TESTS` test processes, `TEST_THREADS` at a time; like nextest's
    /// fail-fast, no test starts after one failed.
    fn nextest_run(&self, index: usize) -> Run {
        let id = run_id(index);
        let tests: Vec<String> = (0..TESTS).map(|i| format!("sim_{i:02}")).collect();
        let (wall, failed) = self.run_tests(&id, &tests);
        self.finish(id, wall, failed)
    }

    /// Runs `tests` as nextest run `id` would, `TEST_THREADS` at a time; returns how long it
    /// took and whether a test failed.
    fn run_tests(&self, id: &str, tests: &[String]) -> (Duration, bool) {
        let _ = std::fs::remove_file(self.sim.join("wedged"));
        let start = Instant::now();
        let mut running: Vec<Child> = Vec::new();
        let mut next = 0;
        let mut failed = false;
        while next < tests.len() || !running.is_empty() {
            while !failed && next < tests.len() && running.len() < TEST_THREADS {
                running.push(self.child(Some(id), &tests[next], None));
                next += 1;
            }
            if failed && next < tests.len() {
                next = tests.len();
            }
            std::thread::sleep(Duration::from_millis(2));
            running.retain_mut(|c| match c.try_wait().unwrap() {
                None => true,
                Some(status) => {
                    failed |= !status.success();
                    false
                }
            });
        }
        (start.elapsed(), failed)
    }

    /// A cargo-test-like run: one process, `TESTS` threads; its run id is its own.
    fn cargo_test_run(&self) -> Run {
        let _ = std::fs::remove_file(self.sim.join("wedged"));
        let start = Instant::now();
        let out = self
            .child(None, "sim_00", Some(TESTS))
            .wait_with_output()
            .unwrap();
        let wall = start.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let id = gpu_test_permit::__private::runs::recorded_runs(&self.slots)
            .pop()
            .expect("the run is recorded")
            .run_id;
        assert!(stderr.contains("gpu-test-permit: N = "), "{stderr}");
        self.finish(id, wall, !out.status.success())
    }

    fn finish(&self, id: String, wall: Duration, failed: bool) -> Run {
        let records = read_run(&self.slots, &id).unwrap().expect("records");
        let (choices, why): (Vec<usize>, Vec<String>) = records
            .records
            .iter()
            .filter_map(|r| match r {
                RunRecord::Choice(c) => Some((c.per_gpu, format!("[{}] {}", c.gpu, c.why))),
                _ => None,
            })
            .unzip();
        assert_eq!(choices.len(), 1, "one choice per run: {choices:?}");
        let grants: Vec<usize> = records
            .records
            .iter()
            .filter_map(|r| match r {
                RunRecord::Grant(g) => Some(g.per_gpu),
                _ => None,
            })
            .collect();
        assert!(
            grants.iter().all(|&n| n == choices[0]),
            "every process of run {id} adopted N = {}: {grants:?}",
            choices[0]
        );
        let hung = self.sim.join("wedged").exists();
        // (A hung run's aborted holders never returned their permits: the records cannot say
        // when their slots came free.)
        let peak = gpu_test_permit::__private::runs::summarize(&records).peak_units;
        assert!(
            hung || peak <= choices[0],
            "run {id}: {peak} units held at once under N = {}",
            choices[0]
        );
        assert_eq!(
            hung, failed,
            "run {id}: a test failed without the GPU wedging"
        );
        Run {
            id,
            wall,
            n: choices[0],
            hung,
            why: why[0].clone(),
        }
    }
}

/// The id of simulated nextest run `index`.
fn run_id(index: usize) -> String {
    format!("00000000-0000-4000-8000-{index:012}")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[cfg(target_os = "linux")]
#[test]
fn auto_settles_at_the_fastest_n_that_never_hung_and_reexplores_after_a_driver_change() {
    let mut host = Host::new();
    let runs: Vec<Run> = (0..10).map(|i| host.nextest_run(i)).collect();
    let ns: Vec<usize> = runs.iter().map(|r| r.n).collect();
    let hung: Vec<usize> = runs.iter().filter(|r| r.hung).map(|r| r.n).collect();
    let report = || {
        runs.iter()
            .map(|r| {
                format!(
                    "{}: N={} hung={} {:?}: {}",
                    r.id, r.n, r.hung, r.wall, r.why
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Settled at 3 within six runs, and stays there.
    let settled = ns
        .iter()
        .position(|&n| n == 3 && ns.iter().rev().take(4).all(|&m| m == 3));
    assert!(
        settled.is_some_and(|i| i < 6) && ns[6..].iter().all(|&n| n == 3),
        "{ns:?}\n{}",
        report()
    );
    // At most one run hung: the one that found 4; none after it.
    assert!(
        hung.len() <= 1 && hung.iter().all(|&n| n == WEDGE),
        "{}",
        report()
    );
    if let Some(i) = runs.iter().position(|r| r.hung) {
        assert!(
            runs[i + 1..].iter().all(|r| !r.hung && r.n < WEDGE),
            "{}",
            report()
        );
    }
    // The learned N is faster than 2.
    let at_2 = median(runs.iter().filter(|r| r.n == 2).map(|r| r.wall).collect());
    let at_3 = median(runs[6..].iter().map(|r| r.wall).collect());
    let speedup = at_2.as_secs_f64() / at_3.as_secs_f64();
    assert!(
        speedup >= 1.3,
        "N = 3 is only {speedup:.2}x as fast as N = 2\n{}",
        report()
    );
    println!("{}\nspeedup {speedup:.2}", report());
    // The history says the same.
    let history = read_history_of(&host);
    assert!(history.iter().any(|e| e.per_gpu == 2 && e.measurable()));
    assert!(history.iter().any(|e| e.per_gpu == WEDGE && !e.clean()));

    // A driver update (the stand-in driver reports another version): where the crate can see
    // it, auto starts again from 3 — not 2, not 4 — and steps up once more.
    if cfg!(feature = "cuda") {
        host.driver = 12090;
        let after: Vec<Run> = (10..14).map(|i| host.nextest_run(i)).collect();
        let ns: Vec<usize> = after.iter().map(|r| r.n).collect();
        let whys: Vec<&str> = after.iter().map(|r| r.why.as_str()).collect();
        println!("after the driver change: {whys:#?}");
        assert_eq!(ns[0], 3, "{ns:?} {whys:#?}");
        assert_eq!(
            ns[1], WEDGE,
            "{ns:?}: one step up after a driver change {whys:#?}"
        );
        assert!(ns[2..].iter().all(|&n| n == 3), "{ns:?} {whys:#?}");
    }
}

fn read_history_of(host: &Host) -> Vec<gpu_test_permit::__private::tune::HistoryEntry> {
    // The history belongs to the slot directory's state directory, which the children were
    // told through GPU_TEST_PERMIT_STATE; read the file as they wrote it.
    let text = std::fs::read_to_string(host.state.join("gpu0.history")).unwrap_or_default();
    text.lines()
        .map(|l| gpu_test_permit::__private::tune::HistoryEntry::from_json(l).unwrap())
        .collect()
}

#[cfg(target_os = "linux")]
#[test]
fn under_cargo_test_each_process_is_a_run_and_learns_from_the_last() {
    let host = Host::new();
    let first = host.cargo_test_run();
    assert_eq!(first.n, 2, "no history: the seed");
    let second = host.cargo_test_run();
    assert_eq!(
        second.n, 3,
        "tests waited at 2 and the model predicts a gain"
    );
    assert!(!first.hung && !second.hung);
}

/// A cargo-test-like run of `host` whose stderr is returned; it must end within 30 s.
fn run_within(host: &Host) -> (Run, String) {
    let start = Instant::now();
    let mut child = host.child(None, "sim_00", Some(4));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the run hangs");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    let id = gpu_test_permit::__private::runs::recorded_runs(&host.slots)
        .pop()
        .expect("the run is recorded")
        .run_id;
    (host.finish(id, start.elapsed(), false), stderr)
}

#[cfg(target_os = "linux")]
#[test]
fn a_corrupt_history_is_ignored_with_one_line_and_rewritten() {
    let host = Host::new();
    std::fs::create_dir_all(&host.state).unwrap();
    let history = host.state.join("gpu0.history");
    std::fs::write(
        &history,
        "not json\n{\"v\":99,\"run\":\"future\"}\n{\"v\":1,\"run\":\"cut",
    )
    .unwrap();
    std::fs::write(host.state.join("gpu0.tests"), "\u{0}\u{1}garbage\n").unwrap();
    let (first, stderr) = run_within(&host);
    assert_eq!(first.n, 2, "{stderr}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("ignoring")).collect();
    assert!(
        said.len() == 1 && said[0].contains("gpu0.history") && said[0].contains("--forget"),
        "{stderr}"
    );
    // The next run measures the first and rewrites the history with records alone.
    let (_, stderr) = run_within(&host);
    assert!(stderr.contains("ignoring"), "{stderr}");
    let (_, stderr) = run_within(&host);
    assert!(
        !stderr.contains("ignoring"),
        "the history was rewritten: {stderr}"
    );
    let text = std::fs::read_to_string(&history).unwrap();
    assert!(text.lines().all(|l| l.starts_with("{\"v\":1,")), "{text}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_fifo_or_a_held_lock_on_the_history_holds_up_no_run() {
    use std::os::unix::ffi::OsStrExt;
    let host = Host::new();
    std::fs::create_dir_all(&host.state).unwrap();
    let history = host.state.join("gpu0.history");
    let path = std::ffi::CString::new(history.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let (run, _) = run_within(&host);
    assert_eq!(run.n, 2);
    std::fs::remove_file(&history).unwrap();
    // The run before is measured now: its tests waited, so one step up.
    let (run, _) = run_within(&host);
    assert_eq!(run.n, 3);
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&history)
        .unwrap();
    held.lock().unwrap();
    let start = Instant::now();
    let (run, stderr) = run_within(&host);
    // The history is read without its lock (the run at 3 is not measured into it, so 3 is
    // tried again), soon.
    assert_eq!(run.n, 3, "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(20));
    drop(held);
}

#[test]
fn an_auto_choice_binds_every_process_that_shares_the_directory_while_it_is_in_use() {
    use crate::util::{Holder, cli};
    let tmp = tempdir();
    let (slots, state) = (tmp.path().join("slots"), tmp.path().join("state"));
    std::fs::create_dir_all(&state).unwrap();
    // A history whose last clean run was at N = 3, on a GPU this machine is not: auto resumes
    // from 3.
    std::fs::write(
        state.join("gpu0.history"),
        r#"{"v":1,"run":"r","unix_ms":4102444800000,"per_gpu":3,"gpus":1,"auto":true,"gpu":"other GPU","holds":60,"span_us":9000000,"busy_us":9000000,"unit_us":27000000,"work_us":27000000,"queued_us":4000000,"peak":3,"unreturned":0,"failed":0,"casualties":0,"source_len":1}
"#
        .replace("4102444800000", &(now_ms() - 60_000).to_string()),
    )
    .unwrap();
    let auto = || {
        let mut c = cli(&slots, 1);
        c.env("REALIZAR_GPU_TEST_CONCURRENCY", "auto")
            .env("GPU_TEST_PERMIT_STATE", &state)
            .env("GPU_TEST_PERMIT_GPUS", "1")
            .env("GPU_TEST_PERMIT_TIMEOUT", "20s");
        c
    };
    let mut first = auto();
    first.arg("hold");
    let a = Holder::spawn(first);
    assert!(a.held_within(Duration::from_secs(20)));
    // A fixed N of 5 asks for 3 units: under the N in force (3) one is held, so it waits.
    let mut fixed = cli(&slots, 5);
    fixed
        .env("GPU_TEST_PERMIT_GPUS", "1")
        .env("GPU_TEST_PERMIT_TIMEOUT", "20s")
        .args(["hold", "--units", "3"]);
    let b = Holder::spawn(fixed);
    assert!(
        !b.held_within(Duration::from_millis(1500)),
        "3 units beside 1 under N = 3"
    );
    // Another auto process (a run of its own) adopts the N in force without choosing, and
    // waits its turn behind the fixed one.
    let mut other = auto();
    other.arg("hold");
    let c = Holder::spawn(other);
    assert!(!c.held_within(Duration::from_millis(500)));
    // It waits in the queue (so it has opened the directory while it is in use).
    let listed = format!("wait.{}", c.child.id());
    let start = Instant::now();
    while crate::util::files_named(&slots, &listed) == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "it never waited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, said_a) = a.release();
    assert!(status.success(), "{said_a}");
    assert!(
        said_a.contains("gpu-test-permit: N = 3 (auto: "),
        "{said_a}"
    );
    assert!(b.held_within(Duration::from_secs(20)));
    let (status, said_b) = b.release();
    assert!(status.success(), "{said_b}");
    assert!(
        said_b.contains("serves N = 3 permit(s) per GPU"),
        "{said_b}"
    );
    assert!(c.held_within(Duration::from_secs(20)));
    let (status, said_c) = c.release();
    assert!(status.success(), "{said_c}");
    assert!(
        !said_c.contains("gpu-test-permit: N = "),
        "it chose: {said_c}"
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const MIB: u64 = 1 << 20;

/// Run `id`'s permits, one per test: its units, the peak they were learned from, and when it
/// was granted and returned (microseconds since the Unix epoch).
fn grants_of(host: &Host, id: &str) -> BTreeMap<String, (usize, Option<u64>, u64, u64)> {
    let records = read_run(&host.slots, id).unwrap().expect("records");
    let returned: HashMap<(u32, u64), u64> = records
        .records
        .iter()
        .filter_map(|r| match r {
            RunRecord::Release(r) => Some(((r.pid, r.hold), r.unix_us)),
            _ => None,
        })
        .collect();
    let mut out = BTreeMap::new();
    for r in &records.records {
        let RunRecord::Grant(g) = r else { continue };
        let end = returned[&(g.pid, g.hold)];
        let earlier = out.insert(g.test.clone(), (g.units, g.learned, g.unix_us, end));
        assert!(earlier.is_none(), "{} took one permit", g.test);
    }
    let peak = gpu_test_permit::__private::runs::summarize(&records).peak_units;
    assert!(peak <= 3, "run {id}: {peak} units held at once under N = 3");
    out
}

/// The CLI with the children's slot and state directories, its standard output.
fn cli_of(host: &Host, args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(crate::util::bin())
        .args(args)
        .env_remove("GPU_TEST_PERMIT_TRACE")
        .env("GPU_TEST_PERMIT_DIR", &host.slots)
        .env("GPU_TEST_PERMIT_STATE", &host.state)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[cfg(target_os = "linux")]
#[test]
fn learned_weights_keep_a_big_test_that_never_declared_itself_from_crowding_the_gpu() {
    use std::ffi::OsStr;
    let mut host = Host::new();
    // N = 3 on a 1 GiB GPU: 341 MiB a unit. `sim_big` uses 700 MiB and never says so;
    // `sim_declared` uses as much but declares 100 MiB, and keeps its declaration.
    let smalls = ["sim_small_0", "sim_small_1", "sim_small_2", "sim_small_3"];
    let mut tests: Vec<String> = ["sim_big", "sim_mid", "sim_declared"]
        .into_iter()
        .chain(smalls)
        .map(String::from)
        .collect();
    tests.sort();
    let mut uses = format!(
        "sim_big={},sim_mid={},sim_declared={}",
        700 * MIB,
        300 * MIB,
        700 * MIB
    );
    for s in smalls {
        uses.push_str(&format!(",{s}={}", 50 * MIB));
    }
    let trace = host.sim.join("learned.trace.json");
    host.env = vec![
        ("REALIZAR_GPU_TEST_CONCURRENCY", "3".into()),
        ("GPU_TEST_PERMIT_GPU_MEMORY", "1GiB".into()),
        ("GPU_TEST_PERMIT_WEIGHTS", "learned".into()),
        (USES, uses),
        (DECLARES, format!("sim_declared={}", 100 * MIB)),
    ];
    let run = |host: &Host, index: usize| {
        let (_, failed) = host.run_tests(&run_id(index), &tests);
        assert!(!failed, "run {index} failed");
        grants_of(host, &run_id(index))
    };
    // Nothing measured yet: every test holds one unit.
    let first = run(&host, 0);
    assert_eq!(first.len(), tests.len(), "{first:?}");
    for (test, (units, learned, ..)) in &first {
        assert_eq!((*units, *learned), (1, None), "{test}");
    }

    // The next run learned what the first measured: 700 MiB + 25 % is 2.6 units, so the big
    // test holds the whole GPU; 300 MiB + 25 %, 1.1 units, two; 50 MiB, one. The test that
    // declared keeps its declaration.
    host.env
        .push(("GPU_TEST_PERMIT_TRACE", trace.display().to_string()));
    let second = run(&host, 1);
    host.env.pop();
    let held = |test: &str| (second[test].0, second[test].1);
    assert_eq!(held("sim_big"), (3, Some(700 * MIB)), "{second:?}");
    assert_eq!(held("sim_mid"), (2, Some(300 * MIB)), "{second:?}");
    assert_eq!(held("sim_declared"), (1, None), "{second:?}");
    for s in smalls {
        assert_eq!(held(s), (1, Some(50 * MIB)), "{second:?}");
    }
    // And no other test held the GPU beside it.
    let (_, _, big_from, big_to) = second["sim_big"];
    for (test, (_, _, from, to)) in &second {
        assert!(
            test == "sim_big" || *to <= big_from || *from >= big_to,
            "{test} held a permit beside sim_big: {second:?}"
        );
    }

    // `report`, `trace` and `history` list them.
    let id = run_id(1);
    let report = cli_of(
        &host,
        &[
            OsStr::new("report"),
            OsStr::new("--run-id"),
            OsStr::new(&id),
        ],
    );
    assert!(
        report.contains("learned weights: 6 tests")
            && report.contains("  `sim sim_big` held 3 units for its measured 700.0 MiB\n")
            && report.contains("  `sim sim_mid` held 2 units for its measured 300.0 MiB\n")
            && report.contains("  `sim sim_small_0` held 1 unit for its measured 50.0 MiB\n")
            && !report.contains("sim_declared` held"),
        "{report}"
    );
    let traced = cli_of(&host, &[OsStr::new("trace"), trace.as_os_str()]);
    assert!(
        traced.contains("learned weights (GPU_TEST_PERMIT_WEIGHTS=learned")
            && traced.contains("  `sim_big` held 3 units for its measured 700.0 MiB\n")
            && traced.contains("  `sim_mid` held 2 units for its measured 300.0 MiB\n")
            && !traced.contains("`sim_declared` held"),
        "{traced}"
    );
    let history = cli_of(&host, &[OsStr::new("history")]);
    assert!(
        history.contains("measured peak GPU memory")
            && history.contains("700.0 MiB  `sim::sim_big`")
            && history.contains("700.0 MiB  `sim::sim_declared`")
            && history.contains("50.0 MiB  `sim::sim_small_3`"),
        "{history}"
    );

    println!("{report}\n{traced}\n{history}");
    // Only declarations count with `declared` (the default).
    host.env[2].1 = "declared".into();
    let third = run(&host, 2);
    for (test, (units, learned, ..)) in &third {
        assert_eq!((*units, *learned), (1, None), "{test}");
    }
    host.env.remove(2);
    let fourth = run(&host, 3);
    assert!(
        fourth.values().all(|g| g.0 == 1 && g.1.is_none()),
        "{fourth:?}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_history_that_cannot_be_kept_is_said_once_and_fails_no_test() {
    let host = Host::new();
    // A directory where the history file should be: it cannot be opened as one.
    std::fs::create_dir_all(host.state.join("gpu0.history")).unwrap();
    let (first, _) = run_within(&host);
    let (second, stderr) = run_within(&host);
    assert_eq!((first.n, second.n), (2, 2), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("cannot keep the run history"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("GPU_TEST_PERMIT_STATE"),
        "{stderr}"
    );
}
