//! Capture guard overhead: `ensure_not_capturing` against the raw status query it wraps.
//!
//! - `raw_status`: `CudaStream::capture_status()` (binds the context, `cuStreamIsCapturing`).
//! - `guard`: `ensure_not_capturing(&stream, Operation::Alloc)`: the same query, then the rule
//!   and the process-wide registry of open captures.
//! - `decide`: the rule alone (pure function).
//!
//! With a real CUDA driver it measures that driver. Without one, the bench starts itself again
//! with the stand-in driver `cli/tests/stub/cuda_capture.c` in `LD_LIBRARY_PATH` (a running process
//! cannot pick up a new library path), so the query costs a call into a small C function: a
//! harsher ratio than against a real driver, where the query itself costs more.
//!
//! After criterion, a paired loop prints `guard/raw` (target: within 1.1x).
//! Run with `cargo bench --all-features --bench capture`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group};
use cudarc::driver::{CudaContext, CudaStream};
use gpu_test_permit::capture::{
    CaptureStatus, OpenCaptures, Operation, capture_status, decide, ensure_not_capturing,
};

const STUB_VAR: &str = "CAPTURE_BENCH_STUB";

/// Without a driver, runs this bench again with the stand-in driver and exits with its status.
fn reexec_with_stub_driver() {
    // SAFETY: only dlopens candidate library names.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return;
    }
    assert!(
        std::env::var_os(STUB_VAR).is_none(),
        "the stand-in driver did not load"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stub/cuda_capture.c");
    let dir = std::env::temp_dir().join(format!("gpu-test-permit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&src)
        .status()
        .expect("run cc to build the stand-in driver");
    assert!(status.success(), "building {} failed", src.display());
    std::fs::copy(dir.join("libcuda.so"), dir.join("libcuda.so.1")).unwrap();
    eprintln!(
        "no CUDA driver: measuring against the stand-in driver ({})",
        src.display()
    );
    let status = Command::new(std::env::current_exe().unwrap())
        .args(std::env::args_os().skip(1))
        .env(STUB_VAR, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .status()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::process::exit(status.code().unwrap_or(1));
}

fn stream() -> Arc<CudaStream> {
    CudaContext::new(0)
        .expect("CUDA context")
        .new_stream()
        .expect("CUDA stream")
}

fn bench_capture(c: &mut Criterion) {
    let stream = stream();
    let mut group = c.benchmark_group("capture");
    group.bench_function("raw_status", |b| {
        b.iter(|| black_box(black_box(&stream).capture_status()))
    });
    group.bench_function("guard", |b| {
        b.iter(|| black_box(ensure_not_capturing(black_box(&stream), Operation::Alloc)))
    });
    group.bench_function("decide", |b| {
        let open = OpenCaptures::current();
        b.iter(|| {
            black_box(decide(
                Operation::Alloc,
                black_box(CaptureStatus::None),
                black_box(&open),
            ))
        })
    });
    group.finish();
}

/// Interleaved rounds of the raw query and the guard, so drift in the machine hits both alike;
/// prints the median per-call times and their ratio.
fn paired_ratio() {
    let stream = stream();
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    const CALLS: u32 = 20_000;
    let (mut raw, mut guard) = (Vec::new(), Vec::new());
    for _ in 0..41 {
        let t = Instant::now();
        for _ in 0..CALLS {
            black_box(black_box(&stream).capture_status().is_ok());
        }
        raw.push(t.elapsed().as_nanos() as f64 / f64::from(CALLS));
        let t = Instant::now();
        for _ in 0..CALLS {
            black_box(ensure_not_capturing(black_box(&stream), Operation::Alloc).is_ok());
        }
        guard.push(t.elapsed().as_nanos() as f64 / f64::from(CALLS));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (raw, guard) = (median(&mut raw), median(&mut guard));
    let driver = if std::env::var_os(STUB_VAR).is_some() {
        "stand-in driver"
    } else {
        "CUDA driver"
    };
    println!(
        "capture guard ({driver}): raw status {raw:.1} ns, guard {guard:.1} ns, guard/raw = {:.3}x",
        guard / raw
    );
}

criterion_group!(benches, bench_capture);

fn main() {
    reexec_with_stub_driver();
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion runs each
    // bench once as a smoke test, and so the paired loop is skipped too.
    if std::env::args().any(|a| a == "--bench") {
        paired_ratio();
    }
}
