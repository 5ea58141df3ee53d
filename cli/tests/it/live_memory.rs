//! Permits that declare memory on GPUs others use too: `gpu-test-permit hold --memory` processes
//! with the stand-in `libnvidia-ml.so.1` (`cli/tests/stub/nvml.c`) first in `LD_LIBRARY_PATH`,
//! whose free memory and processes the test sets through its state file while they wait. They
//! test how the crate admits permits by NVML's numbers; they prove nothing about NVIDIA's.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::stub::library_dir;
use crate::util::{Holder, cli, tempdir};

const LONG: Duration = Duration::from_secs(20);
/// Long enough for a process that could take its permit to have taken it.
const SETTLE: Duration = Duration::from_millis(500);
const GIB: u64 = 1 << 30;

/// The CLI on `gpus` GPUs with N = `n`, a budget of `budget` GiB per GPU and the stand-in NVML
/// reading `state`.
fn with_nvml(dir: &Path, state: &Path, n: usize, gpus: usize, budget: u64) -> Command {
    let nvml = library_dir("nvml", &["libnvidia-ml.so.1", "libnvidia-ml.so"]);
    let mut c = cli(dir, n);
    c.env("LD_LIBRARY_PATH", &nvml)
        .env("NVML_STUB_STATE", state)
        .env("NVML_STUB_GPUS", gpus.to_string())
        .env("GPU_TEST_PERMIT_GPUS", gpus.to_string())
        .env("GPU_TEST_PERMIT_GPU_MEMORY", format!("{budget}GiB"));
    c
}

fn hold(c: &mut Command, gib: u64) -> Holder {
    c.args(["hold", "--memory", &format!("{gib}GiB")]);
    Holder::spawn(std::mem::replace(c, Command::new("true")))
}

/// `run --memory <gib>GiB` of a command that says its pid and waits for standard input to
/// close; the `run` process and its command's pid.
fn run_memory(c: &mut Command, gib: u64) -> (Holder, u32) {
    c.args(["run", "--memory", &format!("{gib}GiB"), "--", "sh", "-c"])
        .arg("echo child $$; read x; true");
    let run = Holder::spawn(std::mem::replace(c, Command::new("true")));
    let line = run.lines.recv_timeout(LONG).expect("the command's pid");
    let child = line.strip_prefix("child ").unwrap().parse().unwrap();
    (run, child)
}

fn set(state: &Path, lines: &[String]) {
    // Written whole and renamed: the stand-in reads the file on every call.
    let tmp = state.with_extension("tmp");
    std::fs::write(&tmp, lines.join("\n") + "\n").unwrap();
    std::fs::rename(&tmp, state).unwrap();
}

/// The `held` line's devices (or none on one GPU), waiting up to `d` for it.
fn held_within(h: &Holder, d: Duration) -> Option<String> {
    let line = h.lines.recv_timeout(d).ok()?;
    assert!(line.starts_with("held "), "{line}");
    Some(line)
}

#[test]
fn a_permit_waits_for_memory_a_process_without_one_uses_and_the_wait_names_it() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    let hog = 4242;
    // A program that takes no permits uses 70 GiB of GPU 0's 80.
    set(
        &state,
        &[
            format!("free 0 {}", 10 * GIB),
            format!("proc 0 {hog} {}", 70 * GIB),
            format!("name {hog} python3"),
        ],
    );
    // 20 GiB is one unit of four (an 80 GiB budget): the units are there, the memory is not.
    let waiting = hold(&mut with_nvml(dir.path(), &state, 4, 1, 80), 20);
    assert!(
        held_within(&waiting, SETTLE).is_none(),
        "granted into 10 GiB"
    );
    // Memory frees when the program ends: the waiter takes its permit without any release.
    set(&state, &[format!("free 0 {}", 80 * GIB)]);
    assert!(held_within(&waiting, LONG).is_some());
    let (status, err) = waiting.release();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("waiting for GPU memory")
            && err.contains("GPU 0 has 10 GiB free; this permit needs 20 GiB + 512 MiB margin")
            && err.contains("pid 4242 (python3) 70 GiB"),
        "{err}"
    );
    assert_eq!(err.matches("waiting for GPU memory").count(), 1, "{err}");
}

#[test]
fn what_holders_declared_and_have_not_allocated_is_kept_for_them() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    set(&state, &[]);
    // A 160 GiB budget over N = 4 makes 30 GiB one unit, but the GPU has 80 GiB.
    let nvml = |dir: &Path| with_nvml(dir, &state, 4, 1, 160);
    let a = hold(&mut nvml(dir.path()), 30);
    assert!(held_within(&a, LONG).is_some());
    let b = hold(&mut nvml(dir.path()), 30);
    assert!(held_within(&b, LONG).is_some());
    // 80 GiB free, but a and b declared 60 of it and allocated none yet: 30 more do not fit,
    // though two units of four are free.
    let c = hold(&mut nvml(dir.path()), 30);
    assert!(
        held_within(&c, SETTLE).is_none(),
        "granted past the declarations"
    );
    // a allocates its 30 GiB: 50 free, b's 30 still to come.
    let a_pid = a.child.id();
    set(
        &state,
        &[
            format!("free 0 {}", 50 * GIB),
            format!("proc 0 {a_pid} {}", 30 * GIB),
        ],
    );
    assert!(held_within(&c, SETTLE).is_none());
    // a ends and its memory is free again: b's 30 and c's 30 fit in 80.
    let (status, err) = a.release();
    assert!(status.success(), "{err}");
    set(&state, &[]);
    assert!(held_within(&c, LONG).is_some());
    drop((b, c));
}

#[test]
fn on_several_gpus_a_permit_goes_where_the_memory_is() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    // GPU 0 nearly full with a foreign process; best fit alone would pick GPU 0 (a tie).
    set(
        &state,
        &[
            format!("free 0 {}", 2 * GIB),
            format!("proc 0 777 {}", 78 * GIB),
        ],
    );
    let h = hold(&mut with_nvml(dir.path(), &state, 2, 2, 80), 8);
    let line = held_within(&h, LONG).unwrap();
    assert!(line.ends_with(" devices=1"), "{line}");
}

#[test]
fn a_wait_held_back_by_memory_times_out_saying_so() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    set(
        &state,
        &[
            format!("free 0 {}", GIB),
            format!("proc 0 999 {}", 79 * GIB),
            "name 999 trainer".to_string(),
        ],
    );
    let started = Instant::now();
    let out = with_nvml(dir.path(), &state, 2, 1, 80)
        .env("GPU_TEST_PERMIT_TIMEOUT", "1s")
        .args(["hold", "--memory", "8GiB", "--for", "1ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("Held back by GPU memory, not by permits")
            && err.contains("pid 999 (trainer) 79 GiB"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn with_live_memory_off_or_without_nvml_the_budget_alone_counts() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    set(&state, &[format!("free 0 {}", GIB)]);
    let off = hold(
        with_nvml(dir.path(), &state, 2, 1, 80).env("GPU_TEST_PERMIT_LIVE_MEMORY", "off"),
        8,
    );
    assert!(held_within(&off, LONG).is_some());
    drop(off);
    // NVML that fails to start: as without it.
    let failed = hold(
        with_nvml(dir.path(), &state, 2, 1, 80).env("NVML_STUB", "initfail"),
        8,
    );
    assert!(held_within(&failed, LONG).is_some());
    drop(failed);
    // A permit that declares no memory never asks NVML.
    let plain = {
        let mut c = with_nvml(dir.path(), &state, 2, 1, 80);
        c.arg("hold");
        Holder::spawn(c)
    };
    assert!(held_within(&plain, LONG).is_some());
}

#[test]
fn an_nvml_that_stops_answering_holds_no_permit_back() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    // GPU 0's memory query never returns (a wedged driver), and GPU 0 looks full besides.
    set(&state, &["hang 0".to_string(), format!("free 0 {}", GIB)]);
    let started = Instant::now();
    let first = hold(&mut with_nvml(dir.path(), &state, 4, 1, 80), 8);
    assert!(held_within(&first, LONG).is_some());
    // Granted once NVML's two seconds are up, by the budget alone, with a line that says so.
    assert!(started.elapsed() < Duration::from_secs(10));
    let (status, err) = first.release();
    assert!(status.success(), "{err}");
    assert!(err.contains("NVML did not answer within 2 s"), "{err}");
}

// On a real CUDA device with NVML. Without one they print why and return.

#[cfg(feature = "cuda")]
const HOG_VAR: &str = "GPU_TEST_PERMIT_TEST_HOG_BYTES";

/// The child's side of the test below: allocates `HOG_VAR` bytes on CUDA device 0 without a
/// permit, says `hogging`, and keeps them until its standard input closes.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "runs as a child of cuda_device_live_memory_waits_for_a_foreign_allocation"]
fn live_memory_hog() {
    let Some(bytes) = std::env::var(HOG_VAR)
        .ok()
        .and_then(|b| b.parse::<usize>().ok())
    else {
        return;
    };
    let ctx = cudarc::driver::CudaContext::new(0).expect("a context on device 0");
    let stream = ctx.default_stream();
    let buffer = stream
        .alloc_zeros::<u8>(bytes)
        .expect("the hog's allocation");
    stream.synchronize().unwrap();
    println!("hogging");
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(buffer);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_device_live_memory_waits_for_a_foreign_allocation() {
    use gpu_test_permit::probe::Backend;
    gpu_test_permit::require_backend!(Backend::Cuda);
    let Some((total, free, _)) = gpu_test_permit::__private::live_memory(0) else {
        println!("gpu-test-permit: SKIP: a CUDA device but no NVML (libnvidia-ml.so.1) beside it");
        return;
    };
    let dir = tempdir();
    // A process without a permit takes all but 6 GiB of what is free.
    let hog_bytes = free.saturating_sub(6 * GIB);
    let mut hog = Command::new(std::env::current_exe().unwrap());
    hog.args([
        "--exact",
        "live_memory::live_memory_hog",
        "--include-ignored",
    ])
    .args(["--nocapture", "--test-threads", "1"])
    .env(HOG_VAR, hog_bytes.to_string());
    let hog = Holder::spawn(hog);
    // libtest's own lines come first, and its "test ... " may begin the hog's line.
    let until = Instant::now() + Duration::from_secs(60);
    let said = loop {
        match hog
            .lines
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(line) if !line.trim_end().ends_with("hogging") => continue,
            other => break other,
        }
    };
    assert!(
        said.as_ref()
            .is_ok_and(|l| l.trim_end().ends_with("hogging")),
        "the hog did not allocate: {said:?}"
    );
    // 8 GiB does not fit in the 6 left: the wait gives up, naming the hog.
    let ask = |timeout: &str| {
        let mut c = cli(dir.path(), 2);
        c.env("GPU_TEST_PERMIT_GPU_MEMORY", total.to_string())
            .env("GPU_TEST_PERMIT_TIMEOUT", timeout)
            .args(["hold", "--memory", "8GiB", "--for", "1ms"]);
        c.output().unwrap()
    };
    let out = ask("3s");
    let err = String::from_utf8_lossy(&out.stderr);
    println!("held back: {err}");
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("Held back by GPU memory")
            && err.contains(&format!("pid {} ", hog.child.id())),
        "{err}"
    );
    // The hog ends: the same request is granted.
    let (status, hog_err) = hog.release();
    assert!(status.success(), "{hog_err}");
    let out = ask("30s");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn what_a_commands_processes_allocate_counts_for_the_permit_run_holds() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    set(&state, &[]);
    let nvml = |dir: &Path| with_nvml(dir, &state, 4, 1, 160);
    // `run` holds a 30 GiB permit; the process it starts allocates the 30 GiB.
    let (run, child) = run_memory(&mut nvml(dir.path()), 30);
    set(
        &state,
        &[
            format!("free 0 {}", 50 * GIB),
            format!("proc 0 {child} {}", 30 * GIB),
        ],
    );
    // 50 GiB free and nothing declared is still to come: 30 more fit. (Counted apart from
    // `run`, the command's 30 GiB would be gone from the free memory and still to come.)
    let next = hold(&mut nvml(dir.path()), 30);
    assert!(held_within(&next, LONG).is_some());
    let (status, err) = next.release();
    assert!(status.success(), "{err}");
    assert!(!err.contains("waiting for GPU memory"), "{err}");
    let (status, err) = run.release();
    assert!(status.success(), "{err}");
}

#[test]
fn status_shows_each_gpus_memory_and_who_uses_it_without_a_permit() {
    let dir = tempdir();
    let state = dir.path().join("nvml-state");
    set(&state, &[]);
    let nvml = |dir: &Path| with_nvml(dir, &state, 2, 2, 80);
    // A permit holder whose command allocates 20 GiB on GPU 0, and a program without a permit
    // that uses 30 GiB there.
    let (run, child) = run_memory(
        nvml(dir.path()).env("GPU_TEST_PERMIT_PLACEMENT", "spread"),
        20,
    );
    set(
        &state,
        &[
            format!("free 0 {}", 30 * GIB),
            format!("proc 0 {child} {}", 20 * GIB),
            format!("proc 0 4242 {}", 30 * GIB),
            "name 4242 python3".to_string(),
        ],
    );
    let out = nvml(dir.path()).arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "GPU 0 memory (NVML): 30 GiB free of 80 GiB; used without a permit by pid 4242 \
             (python3) 30 GiB\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "GPU 1 memory (NVML): 80 GiB free of 80 GiB; no process uses it without a permit\n"
        ),
        "{text}"
    );
    let (status, err) = run.release();
    assert!(status.success(), "{err}");
    // Without NVML (where this machine has none of its own), no such line.
    if gpu_test_permit::__private::live_memory(0).is_none() {
        let out = cli(dir.path(), 2).arg("status").output().unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains("(NVML)"));
    }
}
