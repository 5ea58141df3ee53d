//! The backend probe: fault injection against stand-in CUDA drivers, the real wgpu probe, the
//! per-process and per-nextest-run caches.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use gpu_test_permit::config::Config;
use gpu_test_permit::probe::{
    self, Backend, DeviceKind, ProbeOptions, ProbeOutcome, ProbeReport, ProbeSource,
};

/// Runs one `#[ignore]`d helper test of this binary in a child process, with the crate's
/// environment variables cleared (the outer run may be under nextest or CI settings).
pub fn helper(test: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        test,
        "--include-ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("GPU_TEST_PERMIT_")
            || k.starts_with("NEXTEST_")
            || k.starts_with("CUDA_PROBE_STUB")
            || k == "REALIZAR_GPU_TEST_CONCURRENCY"
        {
            c.env_remove(&*k);
        }
    }
    c
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn opts() -> ProbeOptions {
    ProbeOptions::from_config(&Config::from_lookup(|_| None)).timeout(Duration::from_secs(60))
}

fn stub(mode: &str) -> ProbeOptions {
    opts()
        .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB", mode)
}

fn tail(o: &ProbeOutcome) -> &str {
    match o {
        ProbeOutcome::Crashed { stderr_tail, .. }
        | ProbeOutcome::TimedOut { stderr_tail, .. }
        | ProbeOutcome::Malformed { stderr_tail, .. } => stderr_tail,
        _ => "",
    }
}

#[test]
fn stub_driver_with_devices() {
    let r = probe::probe_with(
        Backend::Cuda,
        &stub("ok").env("CUDA_PROBE_STUB_DEVICES", "3"),
    );
    assert_eq!(r.source, ProbeSource::Child);
    let devices = r.outcome.devices().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(devices.len(), 3);
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d.index, i as u32);
        assert_eq!(d.name, format!("Stub GPU {i}"));
        assert_eq!(d.api, "cuda");
        assert_eq!(d.driver.as_deref(), Some("CUDA 12.8"));
        assert_eq!(d.memory_bytes, Some((i as u64 + 1) << 30));
        let kind = if i == 1 {
            DeviceKind::Integrated
        } else {
            DeviceKind::Discrete
        };
        assert_eq!(d.kind, kind);
    }
    assert!(
        r.to_string()
            .starts_with("cuda: 3 devices: Stub GPU 0 [cuda, discrete")
    );
}

#[test]
fn driver_noise_on_stdout_does_not_spoil_the_answer() {
    let r = probe::probe_with(Backend::Cuda, &stub("chatty"));
    assert_eq!(r.outcome.devices().map(<[_]>::len), Some(1), "{r}");
}

#[test]
fn stub_driver_faults_are_classified() {
    // (mode, expected outcome kind, text the outcome must contain)
    let cases: [(&str, &str, &str); 9] = [
        ("nodevice", "NoDevices", "CUDA_ERROR_NO_DEVICE (100)"),
        (
            "stub",
            "NotInstalled",
            "CUDA_ERROR_STUB_LIBRARY (34): the libcuda.so.1 found is the toolkit's stub",
        ),
        ("zero", "NoDevices", "reports 0 devices"),
        (
            "error",
            "Error",
            "cuInit failed with CUDA_ERROR_UNKNOWN (999)",
        ),
        ("segv", "Crashed", "signal 11 (SIGSEGV)"),
        ("abort", "Crashed", "signal 6 (SIGABRT)"),
        ("exit3", "Crashed", "exited with status 3"),
        (
            "exit0",
            "Malformed",
            "exited with status 0 without answering",
        ),
        (
            "garbage",
            "Malformed",
            "malformed probe answer: the answer was cut off",
        ),
    ];
    for (mode, kind, words) in cases {
        let r = probe::probe_with(Backend::Cuda, &stub(mode));
        let debug = format!("{:?}", r.outcome);
        assert!(debug.starts_with(kind), "{mode}: {debug}");
        assert!(r.to_string().contains(words), "{mode}: {r}");
        assert_eq!(r.source, ProbeSource::Child);
    }
    // The driver's last words reach the report.
    let segv = probe::probe_with(Backend::Cuda, &stub("segv")).outcome;
    assert!(
        tail(&segv).contains("about to dereference null"),
        "{segv:?}"
    );
    let abort = probe::probe_with(Backend::Cuda, &stub("abort")).outcome;
    assert!(tail(&abort).contains("fatal error in cuInit"), "{abort:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_hanging_driver_is_cut_at_the_deadline_and_reaped() {
    let dir = crate::util::tempdir();
    let count = dir.path().join("calls");
    let deadline = Duration::from_millis(700);
    let r = probe::probe_with(
        Backend::Cuda,
        &stub("hang")
            .timeout(deadline)
            .env("CUDA_PROBE_STUB_COUNT", &count),
    );
    match &r.outcome {
        ProbeOutcome::TimedOut { after, stderr_tail } => {
            assert_eq!(*after, deadline);
            assert!(
                stderr_tail.contains("waiting forever in cuInit"),
                "{stderr_tail}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(r.duration >= deadline, "{:?}", r.duration);
    assert!(
        r.duration < deadline + Duration::from_secs(5),
        "{:?}",
        r.duration
    );
    // The stub wrote the probe child's pid; once reaped, even a zombie entry is gone.
    let calls = std::fs::read_to_string(&count).unwrap();
    let pid: i32 = calls
        .trim()
        .strip_prefix("cuInit pid ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "probe child {pid} still exists (zombie or running)"
    );
    // SAFETY: signal 0 only checks for existence.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "probe child {pid} still exists");
}

#[test]
fn no_driver_means_not_installed_in_child_and_in_process() {
    // An empty library path adds nothing; a machine with a real driver reports its devices.
    for o in [opts(), opts().in_process(true)] {
        let r = probe::probe_with(Backend::Cuda, &o);
        let expected_source = if o.mode() == probe::ProbeMode::InProcess {
            ProbeSource::InProcess
        } else {
            ProbeSource::Child
        };
        assert_eq!(r.source, expected_source);
        assert!(
            matches!(
                r.outcome,
                ProbeOutcome::NotInstalled { .. } | ProbeOutcome::Devices { .. }
            ),
            "{r}"
        );
    }
}

/// Builds `cli/tests/stub/vulkan_icd.c` and a loader manifest for it; returns the manifest.
#[cfg(target_os = "linux")]
pub(crate) fn vulkan_stub_manifest(dir: &Path) -> std::path::PathBuf {
    let src = crate::util::manifest_dir().join("tests/stub/vulkan_icd.c");
    let lib = dir.join("libstub_vulkan_icd.so");
    crate::stub::compile(&src, &lib);
    let manifest = dir.join("stub_icd.json");
    let json = serde_json::json!({
        "file_format_version": "1.0.0",
        "ICD": { "library_path": lib, "api_version": "1.3.0" },
    });
    std::fs::write(&manifest, json.to_string()).unwrap();
    manifest
}

#[cfg(all(feature = "wgpu", target_os = "linux"))]
#[test]
fn a_crashing_or_hanging_vulkan_driver_is_classified() {
    let dir = crate::util::tempdir();
    let manifest = vulkan_stub_manifest(dir.path());
    let with = |mode: &str| {
        opts()
            .timeout(Duration::from_millis(1500))
            .env("VK_ICD_FILENAMES", &manifest)
            .env("VK_DRIVER_FILES", &manifest)
            .env("WGPU_BACKEND", "vulkan")
            .env("VULKAN_STUB", mode)
    };
    let r = probe::probe_with(Backend::Wgpu, &with("segv"));
    match &r.outcome {
        ProbeOutcome::Crashed {
            signal: Some(11),
            stderr_tail,
            ..
        } => assert!(stderr_tail.contains("about to dereference null"), "{r}"),
        _ => panic!("expected a SIGSEGV, got {r}"),
    }
    let r = probe::probe_with(Backend::Wgpu, &with("hang"));
    match &r.outcome {
        ProbeOutcome::TimedOut { stderr_tail, .. } => {
            assert!(stderr_tail.contains("waiting forever"), "{r}")
        }
        _ => panic!("expected a timeout, got {r}"),
    }
    assert!(
        r.duration >= Duration::from_millis(1500),
        "{:?}",
        r.duration
    );
}

/// A library under the driver's name that lacks an entry point the probe needs is an error
/// naming the entry point, not a crash of the probe child.
#[test]
fn a_driver_library_without_an_entry_point_is_an_error_naming_it() {
    let dir = crate::stub::driver_dir("cuda_missing_symbols");
    let r = probe::probe_with(Backend::Cuda, &opts().env("LD_LIBRARY_PATH", &dir));
    assert_eq!(r.source, ProbeSource::Child);
    match &r.outcome {
        ProbeOutcome::Error { detail } => assert_eq!(
            detail,
            "libcuda.so.1 has no entry point cuDeviceGetName: not a driver library this probe \
             understands"
        ),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn every_backend_is_built_where_a_driver_library_stands_in() {
    // CUDA through its driver library in every build; wgpu through wgpu, or the Vulkan loader.
    assert!(Backend::Cuda.is_built());
    #[cfg(any(feature = "wgpu", target_os = "linux", windows))]
    assert!(Backend::Wgpu.is_built());
}

#[test]
fn unbuilt_backends_answer_without_a_child() {
    for b in Backend::ALL.into_iter().filter(|b| !b.is_built()) {
        let r = probe::probe_with(b, &opts());
        assert_eq!(r.outcome, ProbeOutcome::NotBuilt);
        assert_eq!(r.source, ProbeSource::InProcess);
    }
}

#[test]
fn this_test_binary_answers_probe_requests() {
    probe::self_test(&opts()).unwrap();
}

/// CI sets `GPU_TEST_PERMIT_REQUIRE=wgpu` where lavapipe is installed: there a missing adapter
/// must fail this test instead of skipping.
#[cfg(feature = "wgpu")]
#[test]
fn real_wgpu_probe() {
    let r = probe::probe_with(Backend::Wgpu, &opts());
    eprintln!("{r} ({} ms)", r.duration.as_millis());
    let required = matches!(&Config::from_env().require, Ok(p) if p.requires(Backend::Wgpu));
    if required {
        let devices = r.outcome.devices().unwrap_or_else(|| {
            panic!("GPU_TEST_PERMIT_REQUIRE requires wgpu, but the probe found: {r}")
        });
        assert!(
            devices
                .iter()
                .all(|d| !d.name.is_empty() && !d.api.is_empty())
        );
    } else {
        assert!(!r.outcome.is_broken(), "{r}");
    }
}

#[test]
fn the_process_cache_answers_the_second_call() {
    let first = probe::probe(Backend::Wgpu);
    let again = probe::probe(Backend::Wgpu);
    assert_eq!(again.source, ProbeSource::ProcessCache);
    assert_eq!(again.outcome, first.outcome);
    assert_eq!(again.duration, first.duration);
}

// ---- one probe per backend per nextest run ----

/// Helper run in child processes: probes CUDA through the caches and prints the report.
#[test]
#[ignore = "helper: run in a child process by run_cache_* tests"]
fn run_cache_child() {
    let r = probe::probe(Backend::Cuda);
    println!("REPORT {}", r.to_json());
}

fn run_children(n: usize, run_id: &str, slots: &Path, count: &Path) -> Vec<ProbeReport> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            helper("probe::run_cache_child")
                .env("NEXTEST_RUN_ID", run_id)
                .env("NEXTEST_EXECUTION_MODE", "process-per-test")
                .env("GPU_TEST_PERMIT_DIR", slots)
                .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
                .env("CUDA_PROBE_STUB_DEVICES", "2")
                .env("CUDA_PROBE_STUB_COUNT", count)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let (stdout, stderr) = text(&out);
            assert!(out.status.success(), "{stdout}\n{stderr}");
            let line = stdout
                .lines()
                .find_map(|l| l.split_once("REPORT ").map(|(_, json)| json))
                .unwrap_or_else(|| panic!("no report in:\n{stdout}\n{stderr}"));
            ProbeReport::from_json(line).unwrap()
        })
        .collect()
}

fn driver_calls(count: &Path) -> usize {
    std::fs::read_to_string(count)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn run_cache_one_probe_per_nextest_run() {
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let run = "6f1c2e4a-0000-4000-8000-run-cache-test";
    // Eight test processes of one run start at once: the driver is initialised once.
    let reports = run_children(8, run, &slots, &count);
    assert_eq!(driver_calls(&count), 1, "one probe child per run");
    let sources: Vec<ProbeSource> = reports.iter().map(|r| r.source).collect();
    assert_eq!(
        sources.iter().filter(|s| **s == ProbeSource::Child).count(),
        1,
        "{sources:?}"
    );
    assert!(
        sources
            .iter()
            .all(|s| matches!(s, ProbeSource::Child | ProbeSource::RunCache)),
        "{sources:?}"
    );
    for r in &reports {
        assert_eq!(r.outcome.devices().map(<[_]>::len), Some(2), "{r}");
        assert_eq!(r.outcome, reports[0].outcome);
    }

    // A later process of the same run reads the file.
    let later = run_children(1, run, &slots, &count);
    assert_eq!(later[0].source, ProbeSource::RunCache);
    assert_eq!(driver_calls(&count), 1);

    // A corrupt file is ignored and replaced by a fresh probe.
    let files = cache_files(&slots, run);
    assert_eq!(
        files.len(),
        1,
        "one cache file per run, backend and key: {files:?}"
    );
    let file = &files[0];
    std::fs::write(file, b"{\"format\":\"gpu-test-permit-probe-cache\",\"vers").unwrap();
    let after_corruption = run_children(1, run, &slots, &count);
    assert_eq!(after_corruption[0].source, ProbeSource::Child);
    assert_eq!(driver_calls(&count), 2);
    let healed = run_children(1, run, &slots, &count);
    assert_eq!(healed[0].source, ProbeSource::RunCache);
    assert_eq!(driver_calls(&count), 2);

    // Another run probes again.
    let other = run_children(2, "another-run", &slots, &count);
    assert_eq!(driver_calls(&count), 3);
    assert_eq!(
        other
            .iter()
            .filter(|r| r.source == ProbeSource::Child)
            .count(),
        1
    );
}

#[test]
fn outside_nextest_each_process_probes_for_itself() {
    let dir = crate::util::tempdir();
    let count = dir.path().join("driver-calls");
    for _ in 0..2 {
        let out = helper("probe::run_cache_child")
            .env("GPU_TEST_PERMIT_DIR", dir.path().join("slots"))
            .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
            .env("CUDA_PROBE_STUB_COUNT", &count)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(
            stdout.contains("\"source\":\"child\""),
            "{stdout}\n{stderr}"
        );
    }
    assert_eq!(driver_calls(&count), 2);
}

// ---- the `probe` command ----

#[test]
fn cli_probe_prints_table_and_json_and_fails_on_a_failed_requirement() {
    let dir = crate::util::tempdir();
    let cli = |mode: &str| {
        let mut c = crate::util::cli(dir.path(), 2);
        c.env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
            .env("CUDA_PROBE_STUB", mode)
            .env("CUDA_PROBE_STUB_DEVICES", "2");
        c
    };
    let out = cli("ok").args(["probe", "cuda"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("BACKEND  #  DEVICE"), "{stdout}");
    assert!(lines[1].starts_with("cuda     0  Stub GPU 0"), "{stdout}");
    assert!(
        lines[2].contains("integrated") && lines[2].contains("2.0 GiB"),
        "{stdout}"
    );
    assert!(
        stdout.contains("GPU_TEST_PERMIT_REQUIRE=none:\n  cuda: GPU tests run"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("wgpu"),
        "only the backend asked for: {stdout}"
    );

    let out = cli("nodevice")
        .args(["probe", "--json", "cuda"])
        .env("GPU_TEST_PERMIT_REQUIRE", "cuda")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["require"], "cuda");
    let cuda = &v["backends"][0];
    assert_eq!(cuda["backend"], "cuda");
    assert_eq!(cuda["source"], "child");
    assert_eq!(cuda["outcome"]["status"], "no_devices");
    assert_eq!(cuda["decision"]["action"], "fail");

    let out = cli("ok").args(["probe", "vulkan"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("unknown backend 'vulkan'"));
}

// ---- hardening: deadlines, leftovers, parent death, stale requests ----

/// The pid a stub driver wrote into its count file on a line `<what> pid <n>`.
#[cfg(target_os = "linux")]
fn stub_pid(count: &Path, what: &str) -> Option<i32> {
    let text = std::fs::read_to_string(count).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} pid ")))
        .and_then(|n| n.trim().parse().ok())
}

/// Whether process `pid` is gone: no entry, or a zombie (dead, waiting for a reaper that in a
/// container may never come).
#[cfg(target_os = "linux")]
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

#[cfg(target_os = "linux")]
fn gone_within(pid: i32, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    loop {
        if is_gone(pid) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(target_os = "linux")]
fn kill_if_alive(pid: Option<i32>) {
    if let Some(pid) = pid {
        // SAFETY: sends a signal; a stale pid at worst gets ESRCH.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[cfg(target_os = "linux")]
#[test]
fn chatty_probe_child_is_killed_at_its_deadline() {
    let dir = crate::util::tempdir();
    let count = dir.path().join("calls");
    let deadline = Duration::from_millis(800);
    let o = stub("flood")
        .timeout(deadline)
        .env("CUDA_PROBE_STUB_COUNT", &count);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(probe::probe_with(Backend::Cuda, &o));
    });
    let r = rx
        .recv_timeout(deadline + Duration::from_secs(6))
        .unwrap_or_else(|_| {
            kill_if_alive(stub_pid(&count, "cuInit"));
            panic!("a chatty probe child was not killed at its {deadline:?} deadline")
        });
    match &r.outcome {
        ProbeOutcome::TimedOut { after, stderr_tail } => {
            assert_eq!(*after, deadline);
            // Bounded: a tail of the noise, not all of it.
            assert!(stderr_tail.len() <= 4096, "{} bytes", stderr_tail.len());
            assert!(stderr_tail.ends_with("nnnn"), "{stderr_tail:.200}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        r.duration < deadline + Duration::from_secs(2),
        "{:?}",
        r.duration
    );
    let pid = stub_pid(&count, "cuInit").expect("the stub wrote its pid");
    assert!(is_gone(pid), "probe child {pid} still running");
}

#[cfg(target_os = "linux")]
#[test]
fn crashing_probe_child_is_judged_by_its_exit_not_by_its_pipes() {
    // The driver starts a helper that keeps the pipes open, then crashes: the crash is
    // reported at once, not as a timeout, and the helper does not outlive the probe.
    let dir = crate::util::tempdir();
    let count = dir.path().join("calls");
    let deadline = Duration::from_secs(8);
    let r = probe::probe_with(
        Backend::Cuda,
        &stub("helper-segv")
            .timeout(deadline)
            .env("CUDA_PROBE_STUB_COUNT", &count),
    );
    let helper = stub_pid(&count, "helper");
    let helper_gone = helper.is_some_and(|pid| gone_within(pid, Duration::from_secs(2)));
    kill_if_alive(helper);
    match &r.outcome {
        ProbeOutcome::Crashed {
            signal: Some(11),
            stderr_tail,
            ..
        } => assert!(stderr_tail.contains("started a helper"), "{stderr_tail}"),
        other => panic!("expected a SIGSEGV, got {other:?}"),
    }
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    assert!(
        helper_gone,
        "the driver's helper {helper:?} outlived the probe"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn probe_child_dies_with_its_parent() {
    // A real parent (the CLI) probing a hanging driver is SIGKILLed mid-probe.
    let dir = crate::util::tempdir();
    let count = dir.path().join("calls");
    let mut parent = crate::util::cli(dir.path(), 2)
        .args(["probe", "cuda"])
        .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB", "hang")
        .env("CUDA_PROBE_STUB_COUNT", &count)
        .env("GPU_TEST_PERMIT_PROBE_TIMEOUT", "120s")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let child = loop {
        if let Some(pid) = stub_pid(&count, "cuInit") {
            break pid;
        }
        assert!(
            std::time::Instant::now() < until,
            "the probe child never reached cuInit"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    parent.kill().unwrap();
    parent.wait().unwrap();
    let gone = gone_within(child, Duration::from_secs(3));
    kill_if_alive(Some(child));
    assert!(gone, "probe child {child} outlived its SIGKILLed parent");
}

#[test]
fn stale_probe_child_variable_does_not_divert_a_program() {
    let dir = crate::util::tempdir();
    for value in ["cuda", "ping", "wgpu 1:2 00112233445566778899aabbccddeeff"] {
        // The CLI: `run -- false` must report false's failure, not exit 0 before main.
        let out = crate::util::cli(dir.path(), 2)
            .env("GPU_TEST_PERMIT_PROBE_CHILD", value)
            .args(["run", "--", "false"])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{value}: {stdout}\n{stderr}");
        // The variable is removed, so the programs it starts do not inherit it either.
        let out = crate::util::cli(dir.path(), 2)
            .env("GPU_TEST_PERMIT_PROBE_CHILD", value)
            .args([
                "run",
                "--",
                "sh",
                "-c",
                "echo var=${GPU_TEST_PERMIT_PROBE_CHILD-unset}",
            ])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{value}: {stdout}\n{stderr}");
        assert!(stdout.contains("var=unset"), "{value}: {stdout}\n{stderr}");
        // A test binary runs its tests.
        let out = helper("probe::run_cache_child")
            .env("GPU_TEST_PERMIT_PROBE_CHILD", value)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success() && stdout.contains("REPORT "),
            "{value}: {stdout}\n{stderr}"
        );
    }
}

/// A constructor of this test binary that probes, as a user's own constructor might. Its
/// prioritised `.init_array` entry runs before gpu-test-permit's plain one, so in a probe
/// child it calls the probe before the crate's constructor has answered.
#[cfg(target_os = "linux")]
mod probe_from_a_constructor {
    #[used]
    #[unsafe(link_section = ".init_array.00500")]
    static ENTRY: extern "C" fn() = entry;

    pub(super) const LOG_VAR: &str = "IT_PROBE_FROM_CONSTRUCTOR_LOG";

    extern "C" fn entry() {
        use std::io::Write;
        let Some(log) = std::env::var_os(LOG_VAR) else {
            return;
        };
        let append = |line: String| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            f.write_all(line.as_bytes()).unwrap();
        };
        // A bound for the unfixed case: a recursing probe would start children without end.
        let starts = std::fs::read_to_string(&log)
            .map(|s| s.lines().filter(|l| l.starts_with("start")).count())
            .unwrap_or(0);
        if starts >= 3 {
            return;
        }
        append(format!("start {}\n", std::process::id()));
        let opts = super::opts().timeout(std::time::Duration::from_secs(20));
        let r = gpu_test_permit::probe::probe_with(gpu_test_permit::probe::Backend::Cuda, &opts);
        append(format!("got {r}\n"));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn probe_from_a_constructor_in_a_probe_child_does_not_recurse() {
    let dir = crate::util::tempdir();
    let log = dir.path().join("ctor-log");
    let r = probe::probe_with(
        Backend::Cuda,
        &stub("ok").env(probe_from_a_constructor::LOG_VAR, &log),
    );
    assert_eq!(r.outcome.devices().map(<[_]>::len), Some(1), "{r}");
    let text = std::fs::read_to_string(&log).unwrap();
    let starts = text.lines().filter(|l| l.starts_with("start")).count();
    assert_eq!(starts, 1, "the probe child started probe children:\n{text}");
    assert!(
        text.contains("got cuda: driver error") && text.contains("probe child"),
        "{text}"
    );
}

// ---- the run cache keeps answers, not accidents ----

/// One test process of nextest run `run_id` probing CUDA through the caches, with `env` on
/// top of a stand-in driver with one device; returns its report and its standard error.
fn cache_child(
    run_id: &str,
    slots: &Path,
    count: &Path,
    env: &[(&str, &str)],
) -> (ProbeReport, String) {
    let mut c = helper("probe::run_cache_child");
    c.env("NEXTEST_RUN_ID", run_id)
        .env("NEXTEST_EXECUTION_MODE", "process-per-test")
        .env("GPU_TEST_PERMIT_DIR", slots)
        .env("LD_LIBRARY_PATH", crate::stub::driver_dir("cuda_probe"))
        .env("CUDA_PROBE_STUB_COUNT", count);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("REPORT ").map(|(_, json)| json))
        .unwrap_or_else(|| panic!("no report in:\n{stdout}\n{stderr}"));
    (ProbeReport::from_json(line).unwrap(), stderr)
}

/// The run cache files of `run_id` for CUDA under the slot directory `slots`.
fn cache_files(slots: &Path, run_id: &str) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for dir in std::fs::read_dir(slots).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if !name.starts_with("probe-") {
            continue;
        }
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let n = f.file_name().to_string_lossy().into_owned();
            if n.starts_with(&format!("{run_id}-cuda")) && n.ends_with(".json") {
                files.push(f.path());
            }
        }
    }
    files
}

#[test]
fn run_cache_retries_a_timed_out_probe_before_keeping_it() {
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let hang = [
        ("CUDA_PROBE_STUB", "hang"),
        ("GPU_TEST_PERMIT_PROBE_TIMEOUT", "300ms"),
    ];
    let ok = [("GPU_TEST_PERMIT_PROBE_TIMEOUT", "300ms")];

    // A busy machine: the run's first probe times out. The next process probes again and
    // its answer, not the accident, is what the rest of the run sees.
    let (first, _) = cache_child("transient-run", &slots, &count, &hang);
    assert!(
        matches!(first.outcome, ProbeOutcome::TimedOut { .. }),
        "{first}"
    );
    let (second, _) = cache_child("transient-run", &slots, &count, &ok);
    assert_eq!(second.source, ProbeSource::Child, "{second}");
    assert!(second.outcome.has_devices(), "{second}");
    let (third, _) = cache_child("transient-run", &slots, &count, &hang);
    assert_eq!(third.source, ProbeSource::RunCache, "{third}");
    assert!(third.outcome.has_devices(), "{third}");
    assert_eq!(driver_calls(&count), 2);

    // A driver that always hangs: three attempts, then the timeout is the run's answer.
    let run = "hanging-run";
    for attempt in 1..=3 {
        let (r, _) = cache_child(run, &slots, &count, &hang);
        assert_eq!(r.source, ProbeSource::Child, "attempt {attempt}: {r}");
        assert!(matches!(r.outcome, ProbeOutcome::TimedOut { .. }), "{r}");
    }
    assert_eq!(driver_calls(&count), 5);
    let (kept, _) = cache_child(run, &slots, &count, &hang);
    assert_eq!(kept.source, ProbeSource::RunCache, "{kept}");
    assert!(
        matches!(kept.outcome, ProbeOutcome::TimedOut { .. }),
        "{kept}"
    );
    assert_eq!(driver_calls(&count), 5);
}

#[test]
fn skips_from_a_cached_failure_name_the_run_cache() {
    use gpu_test_permit::decision::{Decision, Policy, decide};
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let segv = [("CUDA_PROBE_STUB", "segv")];
    let (fresh, _) = cache_child("skip-run", &slots, &count, &segv);
    assert_eq!(fresh.source, ProbeSource::Child);
    let (cached, _) = cache_child("skip-run", &slots, &count, &segv);
    assert_eq!(cached.source, ProbeSource::RunCache);
    let file = cache_files(&slots, "skip-run");
    assert_eq!(file.len(), 1, "{file:?}");
    for (r, from_cache) in [(&fresh, false), (&cached, true)] {
        let (Decision::Skip(why) | Decision::Fail(why)) = decide(r, &Policy::none()) else {
            panic!("a crashed driver cannot run: {r}");
        };
        assert_eq!(why.contains("run cache"), from_cache, "{why}");
        if from_cache {
            assert!(why.contains(&*file[0].to_string_lossy()), "{why}");
            assert!(why.contains("delete"), "{why}");
        }
    }
}

#[test]
fn run_cache_is_keyed_by_deadline_and_backend_environment() {
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let run = "keyed-run";
    cache_child(run, &slots, &count, &[]);
    let (again, _) = cache_child(run, &slots, &count, &[]);
    assert_eq!(again.source, ProbeSource::RunCache);
    assert_eq!(driver_calls(&count), 1);
    // Whatever changes the answer gets a probe (and an entry) of its own.
    let variants: [&[(&str, &str)]; 4] = [
        &[("GPU_TEST_PERMIT_PROBE_TIMEOUT", "7s")],
        &[("CUDA_VISIBLE_DEVICES", "1")],
        &[("WGPU_BACKEND", "gl")],
        &[("VK_DRIVER_FILES", "/nonexistent.json")],
    ];
    for (i, env) in variants.iter().enumerate() {
        let (r, _) = cache_child(run, &slots, &count, env);
        assert_eq!(r.source, ProbeSource::Child, "{env:?}");
        assert_eq!(driver_calls(&count), 2 + i, "{env:?}");
        let (r, _) = cache_child(run, &slots, &count, env);
        assert_eq!(r.source, ProbeSource::RunCache, "{env:?}");
    }
    assert_eq!(cache_files(&slots, run).len(), 5);
}

#[cfg(unix)]
#[test]
fn run_cache_lock_wait_has_a_deadline() {
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let run = "locked-run";
    let env = [("GPU_TEST_PERMIT_PROBE_TIMEOUT", "500ms")];
    cache_child(run, &slots, &count, &env);
    let file = cache_files(&slots, run).pop().unwrap();
    // Another process holds the lock and never finishes: a later process stops waiting.
    let lock = std::fs::File::options()
        .read(true)
        .write(true)
        .open(file.with_extension("lock"))
        .unwrap();
    lock.lock().unwrap();
    std::fs::remove_file(&file).unwrap();
    let start = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let (slots2, count2) = (slots.clone(), count.clone());
    std::thread::spawn(move || {
        let _ = tx.send(cache_child(run, &slots2, &count2, &env));
    });
    let (r, stderr) = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the wait for the probe cache lock has no deadline"));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.source, ProbeSource::Child, "{r}");
    assert!(r.outcome.has_devices(), "{r}");
    assert!(stderr.contains("probe cache"), "{stderr}");
    drop(lock);
}

#[test]
fn corrupt_cache_numbers_are_ignored_and_reprobed() {
    let dir = crate::util::tempdir();
    let slots = dir.path().join("slots");
    let count = dir.path().join("driver-calls");
    let run = "corrupt-numbers-run";
    cache_child(run, &slots, &count, &[]);
    let file = cache_files(&slots, run).pop().unwrap();
    let good: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let corruptions: [(&str, serde_json::Value); 3] = [
        ("/report/duration_ms", serde_json::json!(1e300)),
        ("/report/duration_ms", serde_json::json!(-1.0)),
        ("/written_unix_ms", serde_json::json!(1e300)),
    ];
    for (i, (at, value)) in corruptions.into_iter().enumerate() {
        let mut bad = good.clone();
        *bad.pointer_mut(at).unwrap() = value.clone();
        std::fs::write(&file, serde_json::to_vec(&bad).unwrap()).unwrap();
        let (r, stderr) = cache_child(run, &slots, &count, &[]);
        assert_eq!(r.source, ProbeSource::Child, "{at}={value}: {r}\n{stderr}");
        assert!(r.outcome.has_devices(), "{r}");
        assert_eq!(driver_calls(&count), 2 + i);
    }
}
