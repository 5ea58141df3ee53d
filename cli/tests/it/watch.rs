//! The driver watch with real processes: `gpu-test-permit watch` as nextest's target runner
//! would run it (nextest's variables set by hand, records in a slot directory of the test's
//! own), a program built here from `cli/tests/stub/watch_helper.c` as the test, and the stand-in
//! `libcuda` as the driver. What `watch` records is read back with `report`.
//!
//! - A driver a process the test started loads without a permit is the test's escape; one the
//!   crate's own probe child loads is not, nor one NVML loads for the crate's memory query.
//! - A program linked to `libcuda` at build time (`DT_NEEDED`) maps it in every test: reported
//!   as linked at build time, never as an escape; the same driver `dlopen`ed is one.
//! - A driver loaded after more than 64 MiB of loader log is still seen.
//! - A crafted ELF file mapped under a driver's name does not upset the in-process look.
//! - `report` of a run that was not watched says what it cannot have seen.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use gpu_test_permit::__private::runs::{DriversRecord, RunRecord, read_run};

use crate::util::{bin, clear_permit_env, manifest_dir, target_tmpdir, tempdir};

/// The test binary the records name.
const BINARY: &str = "watch-helper";

/// Where this process builds what the tests run.
fn build_dir() -> PathBuf {
    let dir = target_tmpdir().join(format!("watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the C compiler (`STUB_CC` where set, as for the stand-in drivers, else `cc`) with
/// `args`.
fn cc(args: &[&OsStr]) {
    let cc = std::env::var("STUB_CC").unwrap_or_default();
    let mut cc = cc.split_whitespace();
    let program = cc.next().unwrap_or("cc");
    let out = Command::new(program)
        .args(cc)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e} (install gcc)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stand-in `libcuda` (`cli/tests/stub/cuda_probe.c`) installed as a real driver is: the file
/// `libcuda.so.1.0.0` with the soname `libcuda.so.1`, and the links `libcuda.so.1` and
/// `libcuda.so` to it. The directory that holds them.
fn cuda_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = build_dir().join("cuda");
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libcuda.so.1.0.0");
        let src = manifest_dir().join("tests/stub/cuda_probe.c");
        cc(&[
            "-shared".as_ref(),
            "-fPIC".as_ref(),
            "-O1".as_ref(),
            "-Wl,-soname,libcuda.so.1".as_ref(),
            "-o".as_ref(),
            lib.as_os_str(),
            src.as_os_str(),
        ]);
        for link in ["libcuda.so.1", "libcuda.so"] {
            let _ = std::fs::remove_file(dir.join(link));
            std::os::unix::fs::symlink("libcuda.so.1.0.0", dir.join(link)).unwrap();
        }
        dir
    })
}

/// `cli/tests/stub/watch_helper.c` built plain, or `linked` to the stand-in `libcuda`
/// (`DT_NEEDED`, as `-lcuda` links it).
fn helper(linked: bool) -> &'static Path {
    static PLAIN: OnceLock<PathBuf> = OnceLock::new();
    static LINKED: OnceLock<PathBuf> = OnceLock::new();
    let (cell, name) = match linked {
        false => (&PLAIN, "watch_helper"),
        true => (&LINKED, "watch_helper_linked"),
    };
    cell.get_or_init(|| {
        let out = build_dir().join(name);
        let src = manifest_dir().join("tests/stub/watch_helper.c");
        let mut args: Vec<&OsStr> = vec![
            "-O1".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            src.as_os_str(),
            "-ldl".as_ref(),
        ];
        let search = format!("-L{}", cuda_dir().display());
        if linked {
            args.extend([
                OsStr::new("-Wl,--no-as-needed"),
                search.as_ref(),
                "-lcuda".as_ref(),
            ]);
        }
        cc(&args);
        out
    })
}

/// A small library that is no driver, for the helper's `pad` step.
fn pad_library() -> PathBuf {
    crate::stub::library_dir("nvml", &["libwatchpad.so"]).join("libwatchpad.so")
}

/// `gpu-test-permit watch -- ARGS` as nextest runs test `test` of run `run` through it (its
/// records in `slots`), the stand-in `libcuda` first in the library path.
fn watch(slots: &Path, run: &str, test: &str, args: &[&OsStr]) -> Output {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["watch", "--"])
        .args(args)
        .env(gpu_test_permit::config::DIR_VAR, slots)
        .env("NEXTEST_RUN_ID", run)
        .env("NEXTEST_BINARY_ID", BINARY)
        .env("NEXTEST_TEST_NAME", test)
        .env("NEXTEST_ATTEMPT", "1")
        .env("LD_LIBRARY_PATH", cuda_dir());
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The drivers records of run `run` in `slots`.
fn drivers(slots: &Path, run: &str) -> Vec<DriversRecord> {
    let records = read_run(slots, run).unwrap().expect("the run's records");
    records
        .records
        .into_iter()
        .filter_map(|r| match r {
            RunRecord::Drivers(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// `report --run-id RUN` of `slots`, failing on escapes where `fail`.
fn report(slots: &Path, run: &str, fail: bool) -> Output {
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["report", "--run-id", run]).arg("--dir").arg(slots);
    if fail {
        c.arg("--fail-on-unpermitted");
    }
    c.output().unwrap()
}

/// The tests `report` names in its section on drivers loaded without a permit, with the
/// rest of their lines.
fn reported_escapes(shown: &str) -> Vec<String> {
    let Some(section) = shown.split("loaded a GPU driver without a permit: ").nth(1) else {
        return Vec::new();
    };
    section
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

fn unique_run(name: &str) -> String {
    format!("watch-{name}-{}", std::process::id())
}

#[test]
fn a_driver_loaded_by_a_process_the_test_started_is_the_tests_escape() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("child");
    // The test runs a helper, which loads the driver without a permit; the test itself
    // loads nothing.
    let h = helper(false).as_os_str();
    watch(
        &slots,
        &run,
        "tool::runs_a_helper",
        &[
            h,
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ],
    );
    let records = drivers(&slots, &run);
    let escaped: Vec<&DriversRecord> = records.iter().filter(|d| d.escaped()).collect();
    assert_eq!(escaped.len(), 1, "{records:?}");
    assert_eq!(escaped[0].test, "tool::runs_a_helper");
    assert_eq!(escaped[0].unpermitted, ["libcuda.so.1"], "{records:?}");
    assert!(escaped[0].linked.is_empty(), "{records:?}");

    let out = report(&slots, &run, false);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let named = reported_escapes(&shown);
    assert_eq!(named.len(), 1, "{shown}");
    assert!(
        named[0].starts_with(&format!(
            "{BINARY} tool::runs_a_helper: loaded libcuda.so.1"
        )),
        "{shown}"
    );
    assert!(!shown.contains("not watched"), "{shown}");
    assert!(
        shown.contains(
            "watched 1 test process (each under `gpu-test-permit watch`, cargo's target \
             runner): 1 test loaded a GPU driver without a permit"
        ),
        "{shown}"
    );
    let out = report(&slots, &run, true);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    // Outside nextest, `watch` names the command on standard error.
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["watch", "--"])
        .args([
            h,
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ])
        .env("LD_LIBRARY_PATH", cuda_dir());
    let out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stderr.contains("loaded a GPU driver while it held no permit")
            && stderr.contains("libcuda.so.1"),
        "{stderr}"
    );
}

#[test]
fn a_tool_a_test_runs_inside_its_permit_is_no_escape() {
    // The test runs its tool through `gpu-test-permit run` (`GpuTestPermit::pass_to`): the
    // tool works inside the permit, however it loads the driver, and writes no marks.
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("inside");
    let h = helper(false).as_os_str();
    watch(
        &slots,
        &run,
        "tool::inside_a_permit",
        &[
            bin().as_os_str(),
            "run".as_ref(),
            "--".as_ref(),
            h,
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ],
    );
    let records = drivers(&slots, &run);
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(!records[0].escaped(), "{records:?}");
    assert_eq!(records[0].drivers, ["libcuda.so.1"], "{records:?}");
    let out = report(&slots, &run, true);
    assert!(out.status.success(), "{}", text(&out));
    // A watched run without escapes says it was watched, and that none escaped.
    assert!(
        text(&out).contains(
            "watched 1 test process (each under `gpu-test-permit watch`, cargo's target \
             runner): none loaded a GPU driver without a permit"
        ),
        "{}",
        text(&out)
    );

    // The same tool run beside the permit, not inside it, escapes; named as loaded by a
    // process the test started.
    let run = unique_run("beside");
    watch(
        &slots,
        &run,
        "tool::beside_a_permit",
        &[
            h,
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ],
    );
    let shown = text(&report(&slots, &run, false));
    assert_eq!(
        reported_escapes(&shown),
        [format!(
            "{BINARY} tool::beside_a_permit: loaded libcuda.so.1 and took no permit (watched, \
             in a process it started)"
        )],
        "{shown}"
    );
}

#[test]
fn run_watch_names_the_driver_a_process_the_test_started_loaded() {
    // `find-gpu-tests` runs each test under `run --watch` and counts as GPU tests those whose
    // records name a driver: a test whose helper loads one is among them, inside the permit.
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("run-watch");
    let h = helper(false).as_os_str();
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["run", "--watch", "--"])
        .args([
            h,
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ])
        .env(gpu_test_permit::config::DIR_VAR, &slots)
        .env("NEXTEST_RUN_ID", &run)
        .env("NEXTEST_BINARY_ID", BINARY)
        .env("NEXTEST_TEST_NAME", "tool::found")
        .env("NEXTEST_ATTEMPT", "1")
        .env("LD_LIBRARY_PATH", cuda_dir());
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let records = drivers(&slots, &run);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].drivers, ["libcuda.so.1"], "{records:?}");
    assert!(!records[0].escaped(), "{records:?}");
    let summary =
        gpu_test_permit::__private::runs::summarize(&read_run(&slots, &run).unwrap().unwrap());
    assert_eq!(summary.loaded_drivers.len(), 1, "{summary:?}");
    assert_eq!(summary.loaded_drivers[0].0.test, "tool::found");
}

#[test]
fn a_helper_run_beside_the_tests_own_permit_escapes() {
    // The test holds a permit in its own process and runs a helper without passing it on:
    // the helper holds none when it loads the driver.
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("beside-own");
    let h = helper(false).as_os_str();
    watch(
        &slots,
        &run,
        "tool::beside_its_own_permit",
        &[
            linked_permit().as_os_str(),
            "permit".as_ref(),
            "run".as_ref(),
            h,
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ],
    );
    let shown = text(&report(&slots, &run, false));
    assert_eq!(
        reported_escapes(&shown),
        [format!(
            "{BINARY} tool::beside_its_own_permit: loaded libcuda.so.1 while holding none \
             (watched, in a process it started)"
        )],
        "{shown}"
    );
    // The test's own program links the driver: apart, not an escape.
    assert!(
        shown.contains(&format!("  {BINARY}: libcuda.so.1 (1 test)")),
        "{shown}"
    );
}

#[test]
fn the_cuda_driver_that_the_crates_nvml_query_loads_is_no_escape() {
    // NVML's `nvmlInit` loads `libcuda` and keeps it (NVIDIA's driver 580; the stand-in NVML
    // likewise). A permit that declares memory asks NVML for the GPU's free memory before it
    // is granted, so the driver is mapped before the process's first permit: neither the
    // watch nor the in-process look may count that load as the test's.
    let work = tempdir();
    let nvml = crate::stub::library_dir("nvml", &["libnvidia-ml.so.1", "libnvidia-ml.so"]);
    let path = std::env::join_paths([nvml.as_path(), cuda_dir()]).unwrap();
    for watched in [true, false] {
        let slots = work.path().join(format!("slots-{watched}"));
        let said = work.path().join(format!("nvml-{watched}.log"));
        let run = unique_run(&format!("nvml-{watched}"));
        let mut c = Command::new(bin());
        clear_permit_env(&mut c);
        if watched {
            c.args(["watch", "--"]).arg(bin());
        }
        c.args(["run", "--memory", "1GiB", "--", "true"])
            .env(gpu_test_permit::config::DIR_VAR, &slots)
            .env("NEXTEST_RUN_ID", &run)
            .env("NEXTEST_BINARY_ID", BINARY)
            .env("NEXTEST_TEST_NAME", "memory::declared")
            .env("NEXTEST_ATTEMPT", "1")
            .env("LD_LIBRARY_PATH", &path)
            .env("NVML_STUB_LOG", &said)
            .env("NVML_STUB_GPUS", "1")
            .env("GPU_TEST_PERMIT_GPUS", "1")
            .env("GPU_TEST_PERMIT_GPU_MEMORY", "80GiB");
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        // The permit's admission asked NVML, which loaded the driver in the test's process.
        let said = std::fs::read_to_string(&said).unwrap_or_default();
        assert_eq!(
            said, "nvmlInit_v2 loaded libcuda.so.1\n",
            "watched: {watched}"
        );
        let records = drivers(&slots, &run);
        assert_eq!(!records.is_empty(), watched, "{records:?}");
        assert!(
            records.iter().all(|d| !d.escaped() && d.drivers.is_empty()),
            "watched: {watched}: {records:?}"
        );
        let shown = text(&report(&slots, &run, false));
        assert!(reported_escapes(&shown).is_empty(), "{shown}");
    }
}

#[test]
fn the_crates_own_probe_child_under_a_watched_test_is_not_an_escape() {
    // The test runs the CLI's probe, whose child loads the stand-in CUDA driver without a
    // permit on purpose (and answers that there is a device).
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("probe");
    let h = helper(false).as_os_str();
    let out = watch(
        &slots,
        &run,
        "probe::from_a_test",
        &[
            h,
            "run".as_ref(),
            bin().as_os_str(),
            "probe".as_ref(),
            "--json".as_ref(),
            "cuda".as_ref(),
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backends"][0]["outcome"]["status"], "devices", "{v}");
    assert_eq!(v["backends"][0]["source"], "child", "{v}");
    let records = drivers(&slots, &run);
    assert!(!records.is_empty(), "the test was watched");
    assert!(
        records.iter().all(|d| !d.escaped() && d.drivers.is_empty()),
        "{records:?}"
    );
    let out = report(&slots, &run, true);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn a_program_linked_to_the_driver_at_build_time_is_not_an_escape() {
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("linked");
    // A CPU test of a binary linked to libcuda: it maps the driver and never uses it.
    watch(&slots, &run, "cpu::adds", &[helper(true).as_os_str()]);
    // A test of the plain binary that loads the same driver without a permit.
    watch(
        &slots,
        &run,
        "gpu::opens_raw",
        &[
            helper(false).as_os_str(),
            "dlopen".as_ref(),
            "libcuda.so.1".as_ref(),
        ],
    );
    let records = drivers(&slots, &run);
    let of = |test: &str| records.iter().find(|d| d.test == test).unwrap();
    let cpu = of("cpu::adds");
    assert!(!cpu.escaped(), "{cpu:?}");
    assert!(cpu.drivers.is_empty(), "{cpu:?}");
    assert_eq!(cpu.linked, ["libcuda.so.1"], "{cpu:?}");
    let gpu = of("gpu::opens_raw");
    assert_eq!(gpu.unpermitted, ["libcuda.so.1"], "{gpu:?}");

    let out = report(&slots, &run, true);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    let named = reported_escapes(&shown);
    assert_eq!(named.len(), 1, "{shown}");
    assert!(
        named[0].starts_with(&format!("{BINARY} gpu::opens_raw:")),
        "{shown}"
    );
    assert!(
        shown.contains("linked to a GPU driver at build time: 1 test binary")
            && shown.contains(&format!("  {BINARY}: libcuda.so.1 (1 test)")),
        "{shown}"
    );

    // The linked program started by `exec` in a process that ran another program first (a
    // shell): its start is told apart in the same log, and its own load is still one.
    let run = unique_run("linked-exec");
    // Another driver by name (the stand-in NVML library, named as one of NVIDIA's).
    let other = crate::stub::library_dir("nvml", &["libnvidia-watchstub.so"])
        .join("libnvidia-watchstub.so");
    let line = format!(
        "exec {} dlopen {}",
        helper(true).to_str().expect("a path that is text"),
        other.to_str().expect("a path that is text")
    );
    watch(
        &slots,
        &run,
        "cpu::through_a_shell",
        &["sh".as_ref(), "-c".as_ref(), line.as_ref()],
    );
    let records = drivers(&slots, &run);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].linked, ["libcuda.so.1"], "{records:?}");
    assert_eq!(
        records[0].unpermitted,
        [other.to_string_lossy()],
        "{records:?}"
    );

    // Only the linked one: `--fail-on-unpermitted` has nothing to fail on.
    let run = unique_run("linked-only");
    watch(&slots, &run, "cpu::adds", &[helper(true).as_os_str()]);
    let out = report(&slots, &run, true);
    assert!(out.status.success(), "{}", text(&out));
    assert!(reported_escapes(&text(&out)).is_empty(), "{}", text(&out));
}

#[test]
fn the_in_process_look_finds_the_executables_own_drivers_by_soname() {
    // What the crate does in a test process that is not watched, at its first permit or as
    // it exits: the drivers among its mapped files that its executable depends on. Here on a
    // live process's maps: the linked program maps `libcuda.so.1.0.0`, which its DT_NEEDED
    // names `libcuda.so.1` (the soname); the plain one that `dlopen`s it does not depend on
    // it.
    let maps_of = |args: &[&OsStr]| -> (PathBuf, Vec<String>) {
        let (program, rest) = args.split_first().unwrap();
        let mut child = Command::new(program)
            .args(rest)
            .arg("maps")
            .env("LD_LIBRARY_PATH", cuda_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        let mut mapped: Vec<String> = Vec::new();
        for p in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
            if p.starts_with('/') && !mapped.iter().any(|m| m == p) {
                mapped.push(p.to_string());
            }
        }
        (PathBuf::from(program), mapped)
    };
    let real = cuda_dir().join("libcuda.so.1.0.0");
    let real = real.canonicalize().unwrap();
    let (exe, mapped) = maps_of(&[helper(true).as_os_str()]);
    assert!(mapped.iter().any(|m| Path::new(m) == real), "{mapped:?}");
    assert_eq!(
        gpu_test_permit::__private::drivers::linked_at_build_time(&exe, &mapped),
        [real.to_string_lossy()]
    );
    let (exe, mapped) = maps_of(&[
        helper(false).as_os_str(),
        "dlopen".as_ref(),
        "libcuda.so.1".as_ref(),
    ]);
    assert!(mapped.iter().any(|m| Path::new(m) == real), "{mapped:?}");
    assert!(
        gpu_test_permit::__private::drivers::linked_at_build_time(&exe, &mapped).is_empty(),
        "{mapped:?}"
    );
}

/// `cli/tests/stub/linked_permit.rs` built with rustc against this crate's library as this test
/// binary's build left it (the newest `libgpu_test_permit-*.rlib` beside it) and linked to the
/// stand-in `libcuda`.
fn linked_permit() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let deps = exe.parent().unwrap();
        let rlib = std::fs::read_dir(deps)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("libgpu_test_permit-") && name.ends_with(".rlib")
            })
            .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
            .unwrap_or_else(|| {
                panic!(
                    "no libgpu_test_permit-*.rlib in {} to build tests/stub/linked_permit.rs \
                     against: run this test from the build tree (cargo test, cargo nextest)",
                    deps.display()
                )
            })
            .path();
        // The toolchain's own rustc, beside the cargo that runs the tests.
        let rustc = std::env::var_os("CARGO")
            .map(PathBuf::from)
            .map(|cargo| cargo.with_file_name("rustc"))
            .filter(|r| r.exists())
            .unwrap_or_else(|| PathBuf::from("rustc"));
        let out = build_dir().join("linked_permit");
        let src = manifest_dir().join("tests/stub/linked_permit.rs");
        let mut extern_crate = std::ffi::OsString::from("gpu_test_permit=");
        extern_crate.push(&rlib);
        let mut dependencies = std::ffi::OsString::from("dependency=");
        dependencies.push(deps);
        let built = Command::new(&rustc)
            .args(["--edition", "2024", "-C", "debuginfo=0", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-L")
            .arg(dependencies)
            .arg("--extern")
            .arg(extern_crate)
            .arg("-L")
            .arg(cuda_dir())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", rustc.display()));
        assert!(built.status.success(), "{}", text(&built));
        out
    })
}

#[test]
fn the_in_process_look_counts_a_driver_the_executable_links_as_linked() {
    // Not watched: the test process looks at its own maps at its first permit, and (nextest)
    // as a process that took none exits. The driver it links is there both times.
    let work = tempdir();
    let slots = work.path().join("slots");
    let run = unique_run("in-process");
    for (test, arg) in [("gpu::with_a_permit", "permit"), ("cpu::without", "none")] {
        let mut c = Command::new(linked_permit());
        clear_permit_env(&mut c);
        c.arg(arg)
            .env(gpu_test_permit::config::DIR_VAR, &slots)
            .env("NEXTEST_RUN_ID", &run)
            .env("NEXTEST_BINARY_ID", BINARY)
            .env("NEXTEST_TEST_NAME", test)
            .env("NEXTEST_ATTEMPT", "1")
            .env("LD_LIBRARY_PATH", cuda_dir());
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
    let real = cuda_dir().join("libcuda.so.1.0.0").canonicalize().unwrap();
    let records = drivers(&slots, &run);
    assert_eq!(records.len(), 2, "{records:?}");
    for d in &records {
        assert_eq!(d.seen, "mapped", "{d:?}");
        assert!(!d.escaped(), "{d:?}");
        assert_eq!(d.linked, [real.to_string_lossy()], "{d:?}");
    }
    let out = report(&slots, &run, false);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(&format!("  {BINARY}: libcuda.so.1.0.0 (2 tests)")),
        "{shown}"
    );
    // `--fail-on-unpermitted` counts no escape, and fails the run only as one that was not
    // watched.
    let out = report(&slots, &run, true);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("was not watched, so --fail-on-unpermitted cannot tell"),
        "{shown}"
    );
    assert!(
        !shown.contains("loaded a GPU driver without a permit ("),
        "{shown}"
    );
}

#[test]
fn a_crafted_elf_file_mapped_under_a_drivers_name_reads_without_a_panic() {
    // The in-process look at the first permit reads the ELF files of what the executable
    // needs, found among its maps by file name: here `libcuda.so.1`, which the program links,
    // is also the name of a crafted file it maps, whose string table offset overflows a `u64`
    // (`tests/data/fuzz/elf/strtab-past-u64.elf`). Before the ELF reader checked its
    // arithmetic, the first permit of a dev build panicked ("attempt to add with overflow").
    let work = tempdir();
    let crafted = work.path().join("libcuda.so.1");
    std::fs::copy(
        manifest_dir().join("../tests/data/fuzz/elf/strtab-past-u64.elf"),
        &crafted,
    )
    .unwrap();
    let mut c = Command::new(linked_permit());
    clear_permit_env(&mut c);
    c.arg("map")
        .arg(&crafted)
        .arg("twice")
        .env(gpu_test_permit::config::DIR_VAR, work.path().join("slots"))
        .env("REALIZAR_GPU_TEST_CONCURRENCY", "1")
        .env("LD_LIBRARY_PATH", cuda_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    // Bounded: a reader that blocked would hang the test, not end it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the process with the crafted file mapped did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("held a permit") && shown.contains("held a second permit"),
        "{shown}"
    );
    // The permit's observers catch a panic (the permits were granted all the same), and say
    // so: no such line, and the look went on to its end. The stand-in `libcuda` it found
    // mapped is not the file the executable's `libcuda.so.1` was found as (the crafted one),
    // so, outside nextest, the process names it as it exits.
    assert!(!shown.contains("panicked"), "{shown}");
    assert!(
        shown.contains("had a GPU driver loaded before its first permit (libcuda.so.1.0.0)"),
        "{shown}"
    );
}

#[test]
fn a_driver_loaded_after_64_mib_of_loader_log_is_seen() {
    // The helper grows its own loader log past 64 MiB (dlopen and dlclose of a library that
    // is no driver, through a long path), then loads the driver without a permit.
    const MIB_64: u64 = 64 << 20;
    const ROUNDS: &str = "3200";
    let pad = pad_library();
    let steps = |then: &[&'static str]| -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = vec![
            helper(false).into(),
            "pad".into(),
            pad.clone().into(),
            ROUNDS.into(),
        ];
        v.extend(then.iter().map(Into::into));
        v
    };
    // How long that log is: the same steps with the loader's log in a file of the test's.
    let work = tempdir();
    let log = work.path().join("ld");
    let args = steps(&[]);
    let (program, rest) = args.split_first().unwrap();
    let out = Command::new(program)
        .args(rest)
        .env("LD_DEBUG", "files")
        .env("LD_DEBUG_OUTPUT", &log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let written: u64 = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(written > MIB_64 + (1 << 20), "{written} bytes of log");
    for e in std::fs::read_dir(work.path()).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }

    let slots = work.path().join("slots");
    let run = unique_run("long-log");
    let args = steps(&["dlopen", "libcuda.so.1"]);
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    watch(&slots, &run, "gpu::late", &args);
    let records = drivers(&slots, &run);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].unpermitted, ["libcuda.so.1"], "{records:?}");
    let out = report(&slots, &run, true);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn report_of_a_run_that_was_not_watched_says_what_it_cannot_have_seen() {
    let work = tempdir();
    let slots = work.path().join("slots");
    // A run whose test took a permit, not watched (`run` holds it for the command).
    let run = unique_run("unwatched");
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["run", "--", "true"])
        .env(gpu_test_permit::config::DIR_VAR, &slots)
        .env("NEXTEST_RUN_ID", &run)
        .env("NEXTEST_BINARY_ID", BINARY)
        .env("NEXTEST_TEST_NAME", "gpu::draws")
        .env("NEXTEST_ATTEMPT", "1");
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = report(&slots, &run, false);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("driver loads: this run was not watched")
            && shown.contains("wgpu unloads its Vulkan drivers")
            && shown.contains("`gpu-test-permit watch --`"),
        "{shown}"
    );

    // The same test watched, loading nothing: the report has nothing to warn of.
    let run = unique_run("watched");
    watch(&slots, &run, "gpu::draws", &["true".as_ref()]);
    let mut c = Command::new(bin());
    clear_permit_env(&mut c);
    c.args(["run", "--", "true"])
        .env(gpu_test_permit::config::DIR_VAR, &slots)
        .env("NEXTEST_RUN_ID", &run)
        .env("NEXTEST_BINARY_ID", BINARY)
        .env("NEXTEST_TEST_NAME", "gpu::draws")
        .env("NEXTEST_ATTEMPT", "1");
    assert!(c.output().unwrap().status.success());
    let shown = text(&report(&slots, &run, false));
    assert!(!shown.contains("not watched"), "{shown}");
    assert!(reported_escapes(&shown).is_empty(), "{shown}");
}
