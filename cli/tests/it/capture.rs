//! Capture guard: the pure rule (table), the guard against a stand-in driver that models the
//! capture state machine (in child processes), and real-device tests (`cuda_device_*`).
//!
//! Stand-in driver tests run their CUDA part in a child: this test binary started again with
//! `--exact capture::child_<name>` and `LD_LIBRARY_PATH` pointing at `cli/tests/stub/cuda_capture.c`
//! built as `libcuda.so`. The child tests are `#[ignore]`d and return at once unless
//! `CAPTURE_CHILD` names them, so they never run against whatever driver the machine has.

use std::process::Command;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard, mpsc};

use cudarc::driver::sys::{self, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaStream};
use gpu_test_permit::capture::{
    CaptureError, CaptureMode, CaptureScope, CaptureStatus, CaptureThread, CheckedStream,
    DriverCall, DriverCode, ModeCounts, OpenCaptures, Operation, capture_status, decide,
    ensure_not_capturing, ensure_raw_not_capturing, raw_capture_status,
};

use gpu_test_permit::probe::Backend;

use crate::stub::driver_dir;

// ---------------------------------------------------------------------------------------------
// The rule, as a table: status x operation x open captures, no GPU.

const OPS: [Operation; 7] = [
    Operation::Alloc,
    Operation::AllocZeros,
    Operation::HostToDevice,
    Operation::ContextSynchronize,
    Operation::StreamSynchronize,
    Operation::BeginCapture,
    Operation::Other("cuMemcpy2D"),
];

fn counts(global: usize, thread_local: usize, relaxed: usize) -> ModeCounts {
    ModeCounts {
        global,
        thread_local,
        relaxed,
    }
}

fn open(here: ModeCounts, elsewhere: ModeCounts) -> OpenCaptures {
    OpenCaptures { here, elsewhere }
}

/// What the rule must answer, written out independently of `decide`'s control flow.
fn expected(op: Operation, status: CaptureStatus, o: &OpenCaptures) -> Result<(), CaptureError> {
    use CaptureMode::*;
    use CaptureThread::*;
    if status != CaptureStatus::None {
        return Err(CaptureError::Capturing { status, op });
    }
    let own_stream_only = matches!(op, Operation::StreamSynchronize | Operation::BeginCapture);
    let other = |mode, thread| Err(CaptureError::OtherCapture { op, mode, thread });
    match (own_stream_only, op == Operation::ContextSynchronize) {
        (true, _) => Ok(()),
        _ if o.here.global > 0 => other(Global, This),
        _ if o.here.thread_local > 0 => other(ThreadLocal, This),
        _ if o.elsewhere.global > 0 => other(Global, Other),
        (false, true) if o.here.relaxed > 0 => other(Relaxed, This),
        (false, true) if o.elsewhere.thread_local > 0 => other(ThreadLocal, Other),
        (false, true) if o.elsewhere.relaxed > 0 => other(Relaxed, Other),
        _ => Ok(()),
    }
}

#[test]
fn capture_rule_table() {
    let statuses = [
        CaptureStatus::None,
        CaptureStatus::Active,
        CaptureStatus::Invalidated,
    ];
    let mut opens = Vec::new();
    for bits in 0..64u32 {
        let b = |i: u32| ((bits >> i) & 1) as usize;
        opens.push(open(counts(b(0), b(1), b(2)), counts(b(3), b(4), b(5))));
    }
    let mut checked = 0;
    for op in OPS {
        for status in statuses {
            for o in &opens {
                assert_eq!(
                    decide(op, status, o),
                    expected(op, status, o),
                    "{op:?} {status:?} {o:?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 3 * 64);
}

#[test]
fn capture_rule_spot_checks() {
    let nothing = OpenCaptures::default();
    let global_other = open(counts(0, 0, 0), counts(1, 0, 0));
    let thread_local_other = open(counts(0, 0, 0), counts(0, 1, 0));
    let relaxed_here = open(counts(0, 0, 1), counts(0, 0, 0));
    let rows: &[(
        Operation,
        CaptureStatus,
        &OpenCaptures,
        Result<(), CaptureError>,
    )] = &[
        (Operation::Alloc, CaptureStatus::None, &nothing, Ok(())),
        (
            Operation::Alloc,
            CaptureStatus::Invalidated,
            &nothing,
            Err(CaptureError::Capturing {
                status: CaptureStatus::Invalidated,
                op: Operation::Alloc,
            }),
        ),
        (
            Operation::HostToDevice,
            CaptureStatus::None,
            &global_other,
            Err(CaptureError::OtherCapture {
                op: Operation::HostToDevice,
                mode: CaptureMode::Global,
                thread: CaptureThread::Other,
            }),
        ),
        // A thread-local capture elsewhere forbids nothing here but context synchronize.
        (
            Operation::Alloc,
            CaptureStatus::None,
            &thread_local_other,
            Ok(()),
        ),
        (
            Operation::ContextSynchronize,
            CaptureStatus::None,
            &thread_local_other,
            Err(CaptureError::OtherCapture {
                op: Operation::ContextSynchronize,
                mode: CaptureMode::ThreadLocal,
                thread: CaptureThread::Other,
            }),
        ),
        // A relaxed capture on this thread forbids nothing on other streams but context sync.
        (
            Operation::AllocZeros,
            CaptureStatus::None,
            &relaxed_here,
            Ok(()),
        ),
        // Stream synchronize of a non-capturing stream is fine whatever else captures.
        (
            Operation::StreamSynchronize,
            CaptureStatus::None,
            &global_other,
            Ok(()),
        ),
        (
            Operation::StreamSynchronize,
            CaptureStatus::Active,
            &nothing,
            Err(CaptureError::Capturing {
                status: CaptureStatus::Active,
                op: Operation::StreamSynchronize,
            }),
        ),
    ];
    for (op, status, o, want) in rows {
        assert_eq!(&decide(*op, *status, o), want, "{op:?} {status:?} {o:?}");
    }
}

#[test]
fn capture_error_messages_say_what_happened_and_what_to_do() {
    let active = CaptureError::Capturing {
        status: CaptureStatus::Active,
        op: Operation::Alloc,
    };
    // Each error, and what its message must say: what happened and what to do.
    let rows: [(CaptureError, &[&str]); 7] = [
        (
            active,
            &["refused allocation", "ACTIVE", "before begin_capture"],
        ),
        (
            CaptureError::Capturing {
                status: CaptureStatus::Invalidated,
                op: Operation::HostToDevice,
            },
            &["already INVALIDATED", "end the capture"],
        ),
        (
            CaptureError::OtherCapture {
                op: Operation::AllocZeros,
                mode: CaptureMode::Global,
                thread: CaptureThread::Other,
            },
            &["global-mode", "another thread", "CaptureMode::ThreadLocal"],
        ),
        (
            CaptureError::Capturing {
                status: CaptureStatus::Active,
                op: Operation::BeginCapture,
            },
            &["already capturing", "end that capture first"],
        ),
        (
            CaptureError::ImplicitCapture {
                op: Operation::Alloc,
            },
            &["(906)", "non-blocking stream"],
        ),
        (
            CaptureError::StatusQuery {
                op: Operation::Alloc,
                code: DriverCode(201),
            },
            &["CUDA_ERROR_INVALID_CONTEXT (201)", "cannot tell"],
        ),
        (
            CaptureError::Driver {
                call: DriverCall::EndCapture,
                code: DriverCode::STREAM_CAPTURE_INVALIDATED,
            },
            &[
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)",
                "CheckedStream",
            ],
        ),
    ];
    for (error, wanted) in rows {
        let msg = error.to_string();
        for want in wanted {
            assert!(msg.contains(want), "{want:?} missing from: {msg}");
        }
        // The program that reports the error names itself; the message does not.
        assert!(!msg.contains("gpu-test-permit:"), "{msg}");
    }

    // It is an std error, so `?` into Box<dyn Error> works.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(active);
    assert!(boxed.to_string().starts_with("refused"));
}

#[test]
fn capture_driver_code_prints_codes_like_cudarc_without_calling_the_driver() {
    use sys::CUresult::*;
    // The codes the probe, the fixture and the guard meet: named as `CUresult`'s Debug names
    // them, with the number after.
    for raw in [
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_STUB_LIBRARY,
        CUDA_ERROR_NO_DEVICE,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_UNKNOWN,
    ] {
        assert_eq!(
            DriverCode::from(cudarc::driver::DriverError(raw)).to_string(),
            format!("{raw:?} ({})", raw as u32)
        );
    }
    assert_eq!(DriverCode(12345).name(), None);
    assert_eq!(DriverCode(12345).to_string(), "CUDA error 12345");
}

#[test]
fn capture_driver_codes_match_cudarc() {
    use sys::CUresult::*;
    for (raw, code) in [
        (
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            DriverCode::STREAM_CAPTURE_UNSUPPORTED,
        ),
        (
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
            DriverCode::STREAM_CAPTURE_INVALIDATED,
        ),
        (
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            DriverCode::STREAM_CAPTURE_IMPLICIT,
        ),
        (
            CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
            DriverCode::STREAM_CAPTURE_WRONG_THREAD,
        ),
        (CUDA_ERROR_ILLEGAL_STATE, DriverCode::ILLEGAL_STATE),
        (CUDA_ERROR_INVALID_CONTEXT, DriverCode::INVALID_CONTEXT),
    ] {
        assert_eq!(DriverCode::from(cudarc::driver::DriverError(raw)), code);
        let name = code.name().expect("named");
        assert_eq!(
            format!("{raw:?}"),
            name,
            "the static table names {code:?} like cudarc"
        );
    }
    assert_eq!(
        CaptureStatus::from_raw(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE),
        CaptureStatus::None
    );
    assert_eq!(
        CaptureStatus::from_raw(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED),
        CaptureStatus::Invalidated
    );
    assert_eq!(
        CUstreamCaptureMode::from(CaptureMode::Relaxed),
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
    );
}

#[test]
fn capture_no_driver_means_not_capturing() {
    // SAFETY: only dlopens candidate library names.
    if unsafe { sys::is_culib_present() } {
        println!(
            "skipped: a CUDA driver is installed here; the no-driver case needs a machine without one"
        );
        return;
    }
    // SAFETY: the legacy stream handle; without a driver nothing is called.
    unsafe {
        assert_eq!(
            raw_capture_status(std::ptr::null_mut()),
            Ok(CaptureStatus::None)
        );
        assert_eq!(
            ensure_raw_not_capturing(std::ptr::null_mut(), Operation::Alloc),
            Ok(())
        );
    }
    assert_eq!(OpenCaptures::current(), OpenCaptures::default());
}

// ---------------------------------------------------------------------------------------------
// Against the stand-in driver, in child processes.

const CHILD_VAR: &str = "CAPTURE_CHILD";
const CHILD_OK: &str = "capture-child-ok:";

/// Runs `capture::<name>` in a child of this test binary with the stand-in driver loaded, and
/// asserts that it ran and passed.
fn run_child(name: &str, env: &[(&str, &str)]) -> String {
    let dir = driver_dir("cuda_capture");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &format!("capture::{name}"),
        "--nocapture",
        "--include-ignored",
    ])
    .args(["--test-threads", "1"])
    .env(CHILD_VAR, name)
    .env("LD_LIBRARY_PATH", &dir)
    .env_remove("STUB_IS_CAPTURING_RESULT")
    .env_remove("STUB_MEMORY_POOLS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("start the test binary as a child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child {name} failed ({}):\n{text}",
        out.status
    );
    // A filter that matches nothing also exits 0: insist the child test really ran.
    assert!(
        text.contains(&format!("{CHILD_OK}{name}")),
        "child {name} did not run:\n{text}"
    );
    text
}

/// `true` in the child started for `name`; elsewhere the child test is a no-op.
fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).as_deref() == Ok(name)
}

fn child_done(name: &str) {
    println!("{CHILD_OK}{name}");
}

/// How often the stand-in driver saw `symbol` called.
fn stub_count(symbol: &str) -> i32 {
    type CountFn = unsafe extern "C" fn(*const libc::c_char) -> libc::c_int;
    // cudarc opened the stand-in as `libcuda.so` (its first candidate name); RTLD_NOLOAD finds
    // that copy instead of loading another.
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol has the C signature above.
    unsafe {
        let lib = libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!lib.is_null(), "the stand-in driver is not loaded");
        let sym = libc::dlsym(lib, c"stub_count".as_ptr());
        assert!(!sym.is_null(), "the loaded libcuda is not the stand-in");
        let count: CountFn = std::mem::transmute(sym);
        let name = std::ffi::CString::new(symbol).unwrap();
        let n = count(name.as_ptr());
        libc::dlclose(lib);
        assert!(n >= 0, "stand-in does not count {symbol}");
        n
    }
}

fn stub_stream() -> (Arc<CudaContext>, Arc<CudaStream>) {
    assert!(
        unsafe { sys::is_culib_present() },
        "child runs without the stand-in driver"
    );
    let ctx = CudaContext::new(0).expect("context on the stand-in driver");
    let stream = ctx.new_stream().expect("stream on the stand-in driver");
    (ctx, stream)
}

fn code_of(result: Result<impl Sized, cudarc::driver::DriverError>) -> DriverCode {
    match result {
        Ok(_) => panic!("expected a driver error"),
        Err(e) => DriverCode::from(e),
    }
}

#[test]
fn capture_stub_unguarded_alloc_invalidates_capture() {
    let out = run_child("child_unguarded_alloc", &[]);
    assert!(out.contains("cuMemAlloc_v2 during capture -> 900"), "{out}");
}

#[test]
#[ignore = "child of capture_stub_unguarded_alloc_invalidates_capture"]
fn child_unguarded_alloc() {
    if !is_child("child_unguarded_alloc") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::Active));
    // SAFETY: the memory is never read.
    let alloc = unsafe { stream.alloc::<f32>(16) };
    assert_eq!(code_of(alloc), DriverCode::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(
        stub_count("cuMemAlloc_v2"),
        1,
        "the driver saw the allocation"
    );
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::Invalidated));
    let end = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    assert_eq!(code_of(end), DriverCode::STREAM_CAPTURE_INVALIDATED);
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    child_done("child_unguarded_alloc");
}

#[test]
fn capture_stub_guard_refuses_before_the_driver_sees_it() {
    run_child("child_guarded", &[]);
}

/// The same with memory pools, where cudarc allocates with `cuMemAllocAsync`.
#[test]
fn capture_stub_guard_refuses_stream_ordered_allocation_too() {
    run_child("child_guarded", &[("STUB_MEMORY_POOLS", "1")]);
}

/// Allocations the stand-in driver saw, through either of cudarc's paths.
fn stub_allocs() -> i32 {
    stub_count("cuMemAlloc_v2") + stub_count("cuMemAllocAsync")
}

#[test]
#[ignore = "child of capture_stub_guard_refuses_before_the_driver_sees_it"]
fn child_guarded() {
    if !is_child("child_guarded") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    let mut buffer = stream
        .checked_alloc_zeros::<f32>(16)
        .expect("allocation before capture");
    stream
        .checked_synchronize()
        .expect("synchronize before capture");
    let allocs = stub_allocs();
    let uploads = stub_count("cuMemcpyHtoDAsync_v2");
    let syncs = stub_count("cuStreamSynchronize") + stub_count("cuCtxSynchronize");
    let pools = std::env::var("STUB_MEMORY_POOLS").as_deref() == Ok("1");
    let path = if pools {
        "cuMemAllocAsync"
    } else {
        "cuMemAlloc_v2"
    };
    assert_eq!(
        (allocs, stub_count(path)),
        (1, 1),
        "cudarc allocated through {path}"
    );

    let captured = CaptureScope::new(&stream)
        .mode(CaptureMode::Global)
        .run(|s| {
            assert_eq!(capture_status(s), Ok(CaptureStatus::Active));
            assert_eq!(OpenCaptures::current().here.global, 1);
            let refused = |op| CaptureError::Capturing {
                status: CaptureStatus::Active,
                op,
            };
            assert_eq!(
                s.checked_alloc_zeros::<f32>(16).unwrap_err(),
                refused(Operation::AllocZeros)
            );
            // SAFETY: refused, nothing is allocated.
            assert_eq!(
                unsafe { s.checked_alloc::<f32>(16) }.unwrap_err(),
                refused(Operation::Alloc)
            );
            assert_eq!(
                s.checked_clone_htod(&[1.0f32; 16]).unwrap_err(),
                refused(Operation::HostToDevice)
            );
            assert_eq!(
                s.checked_memcpy_htod(&[1.0f32; 16], &mut buffer)
                    .unwrap_err(),
                refused(Operation::HostToDevice)
            );
            assert_eq!(
                s.checked_synchronize().unwrap_err(),
                refused(Operation::StreamSynchronize)
            );
            assert_eq!(
                s.checked_context_synchronize().unwrap_err(),
                refused(Operation::ContextSynchronize)
            );
            // Capturable work still goes into the graph.
            s.memset_zeros(&mut buffer).unwrap();
            assert_eq!(
                capture_status(s),
                Ok(CaptureStatus::Active),
                "the capture is intact"
            );
            Ok::<_, CaptureError>(42)
        })
        .expect("the capture ends cleanly");
    assert_eq!(captured.value, 42);
    let graph = captured.graph.expect("a graph");
    assert_eq!(stub_allocs(), allocs, "no allocation reached the driver");
    assert_eq!(
        stub_count("cuMemcpyHtoDAsync_v2"),
        uploads,
        "no upload reached the driver"
    );
    assert_eq!(
        stub_count("cuStreamSynchronize") + stub_count("cuCtxSynchronize"),
        syncs
    );
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    assert_eq!(OpenCaptures::current(), OpenCaptures::default());
    graph.launch().unwrap();
    assert_eq!(stub_count("cuGraphLaunch"), 1);
    child_done("child_guarded");
}

#[test]
fn capture_stub_invalidated_capture_trips_the_guard() {
    run_child("child_invalidated", &[]);
}

#[test]
#[ignore = "child of capture_stub_invalidated_capture_trips_the_guard"]
fn child_invalidated() {
    if !is_child("child_invalidated") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    let result = CaptureScope::new(&stream)
        .mode(CaptureMode::ThreadLocal)
        .run(|s| {
            // An unguarded call breaks the capture ...
            assert_eq!(
                code_of(s.synchronize()),
                DriverCode::STREAM_CAPTURE_UNSUPPORTED
            );
            // ... and from then on the guard refuses, naming the broken capture.
            let err = s.checked_alloc_zeros::<u8>(8).unwrap_err();
            assert_eq!(
                err,
                CaptureError::Capturing {
                    status: CaptureStatus::Invalidated,
                    op: Operation::AllocZeros
                }
            );
            assert!(err.to_string().contains("INVALIDATED"), "{err}");
            Ok::<_, CaptureError>(())
        });
    assert_eq!(
        result.unwrap_err(),
        CaptureError::Driver {
            call: DriverCall::EndCapture,
            code: DriverCode::STREAM_CAPTURE_INVALIDATED
        }
    );
    assert_eq!(stub_count("cuMemAlloc_v2"), 0);
    assert_eq!(
        capture_status(&stream),
        Ok(CaptureStatus::None),
        "the capture was ended"
    );
    assert_eq!(OpenCaptures::current(), OpenCaptures::default());
    child_done("child_invalidated");
}

#[test]
fn capture_stub_scope_ends_capture_on_error_and_panic() {
    run_child("child_scope_unwinds", &[]);
}

#[test]
#[ignore = "child of capture_stub_scope_ends_capture_on_error_and_panic"]
fn child_scope_unwinds() {
    if !is_child("child_scope_unwinds") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    let ends = stub_count("cuStreamEndCapture");

    #[derive(Debug, PartialEq)]
    enum MyError {
        Mine,
        Capture(CaptureError),
    }
    impl From<CaptureError> for MyError {
        fn from(e: CaptureError) -> Self {
            MyError::Capture(e)
        }
    }
    let result = CaptureScope::new(&stream).run(|_| Err::<(), _>(MyError::Mine));
    assert_eq!(result.unwrap_err(), MyError::Mine);
    assert_eq!(stub_count("cuStreamEndCapture"), ends + 1);
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = CaptureScope::new(&stream).run(|_| -> Result<(), CaptureError> { panic!("boom") });
    }));
    assert!(panicked.is_err());
    assert_eq!(stub_count("cuStreamEndCapture"), ends + 2);
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    assert_eq!(
        OpenCaptures::current(),
        OpenCaptures::default(),
        "the registry forgot both"
    );

    // Beginning a capture on a capturing stream is refused before the driver sees it.
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    let begins = stub_count("cuStreamBeginCapture_v2");
    let nested = CaptureScope::new(&stream).run(|_| Ok::<_, CaptureError>(()));
    assert_eq!(
        nested.unwrap_err(),
        CaptureError::Capturing {
            status: CaptureStatus::Active,
            op: Operation::BeginCapture
        }
    );
    assert_eq!(stub_count("cuStreamBeginCapture_v2"), begins);
    drop(
        stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .unwrap(),
    );

    // The stream is usable afterwards.
    stream
        .checked_alloc_zeros::<u8>(8)
        .expect("stream usable after the scopes");
    child_done("child_scope_unwinds");
}

#[test]
fn capture_stub_global_capture_on_another_thread() {
    run_child("child_global_elsewhere", &[]);
}

/// Runs a scope in `mode` on a thread of its own and calls `during` while it is open.
fn with_capture_on_other_thread<T>(
    stream: &Arc<CudaStream>,
    mode: CaptureMode,
    during: impl FnOnce() -> T,
) -> (T, Result<bool, CaptureError>) {
    let (opened_tx, opened_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let capturer = scope.spawn(move || {
            CaptureScope::new(stream)
                .mode(mode)
                .run(|_| {
                    opened_tx.send(()).unwrap();
                    done_rx.recv().unwrap();
                    Ok::<_, CaptureError>(())
                })
                .map(|c| c.graph.is_some())
        });
        opened_rx
            .recv()
            .expect("the capture thread opened its capture");
        let value = during();
        done_tx.send(()).unwrap();
        (value, capturer.join().unwrap())
    })
}

#[test]
#[ignore = "child of capture_stub_global_capture_on_another_thread"]
fn child_global_elsewhere() {
    if !is_child("child_global_elsewhere") {
        return;
    }
    let (ctx, capturing) = stub_stream();
    let other = ctx.new_stream().unwrap();
    let allocs = stub_count("cuMemAlloc_v2");

    // Guarded: refused here, and the other thread's capture ends cleanly.
    let ((alloc, sync), ended) =
        with_capture_on_other_thread(&capturing, CaptureMode::Global, || {
            assert_eq!(
                capture_status(&other),
                Ok(CaptureStatus::None),
                "a per-stream query sees nothing"
            );
            (
                other.checked_alloc_zeros::<f32>(4).map(drop),
                other.checked_synchronize(),
            )
        });
    assert_eq!(
        alloc.unwrap_err(),
        CaptureError::OtherCapture {
            op: Operation::AllocZeros,
            mode: CaptureMode::Global,
            thread: CaptureThread::Other,
        }
    );
    assert_eq!(
        sync,
        Ok(()),
        "synchronizing a stream that does not capture is legal"
    );
    assert_eq!(ended, Ok(true), "the global capture ended with a graph");
    assert_eq!(
        stub_count("cuMemAlloc_v2"),
        allocs,
        "the driver never saw the allocation"
    );

    // A thread-local capture elsewhere does not forbid allocating here.
    let (alloc, ended) = with_capture_on_other_thread(&capturing, CaptureMode::ThreadLocal, || {
        other.checked_alloc_zeros::<f32>(4).map(drop)
    });
    assert_eq!(alloc, Ok(()));
    assert_eq!(ended, Ok(true));

    // Unguarded: the allocation reaches the driver, fails and breaks the other capture.
    let (alloc, ended) = with_capture_on_other_thread(&capturing, CaptureMode::Global, || {
        // SAFETY: the memory is never read.
        code_of(unsafe { other.alloc::<f32>(4) })
    });
    assert_eq!(alloc, DriverCode::STREAM_CAPTURE_UNSUPPORTED);
    assert_eq!(
        ended,
        Err(CaptureError::Driver {
            call: DriverCall::EndCapture,
            code: DriverCode::STREAM_CAPTURE_INVALIDATED
        })
    );
    assert_eq!(OpenCaptures::current(), OpenCaptures::default());
    child_done("child_global_elsewhere");
}

#[test]
fn capture_stub_failing_status_query_is_an_error() {
    run_child("child_query_fails", &[("STUB_IS_CAPTURING_RESULT", "999")]);
}

#[test]
#[ignore = "child of capture_stub_failing_status_query_is_an_error"]
fn child_query_fails() {
    if !is_child("child_query_fails") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    assert_eq!(capture_status(&stream), Err(DriverCode(999)));
    let allocs = stub_count("cuMemAlloc_v2");
    let err = stream.checked_alloc_zeros::<f32>(4).unwrap_err();
    assert_eq!(
        err,
        CaptureError::StatusQuery {
            op: Operation::AllocZeros,
            code: DriverCode(999)
        }
    );
    assert!(
        err.to_string().contains("CUDA_ERROR_UNKNOWN (999)"),
        "{err}"
    );
    assert_eq!(
        stub_count("cuMemAlloc_v2"),
        allocs,
        "never treated as not capturing"
    );
    // SAFETY: a live stream handle.
    let raw = unsafe { ensure_raw_not_capturing(stream.cu_stream(), Operation::Alloc) };
    assert_eq!(
        raw,
        Err(CaptureError::StatusQuery {
            op: Operation::Alloc,
            code: DriverCode(999)
        })
    );
    child_done("child_query_fails");
}

#[test]
fn capture_stub_legacy_stream_implicit_capture_906() {
    run_child("child_implicit", &[]);
}

#[test]
#[ignore = "child of capture_stub_legacy_stream_implicit_capture_906"]
fn child_implicit() {
    if !is_child("child_implicit") {
        return;
    }
    let (ctx, _stream) = stub_stream();
    implicit_capture_case(&ctx);
    child_done("child_implicit");
}

/// A blocking stream captures; the legacy stream's status query fails with 906, which the
/// guard reports as its own variant.
fn implicit_capture_case(ctx: &Arc<CudaContext>) {
    ctx.bind_to_thread().unwrap();
    let mut raw = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; flags 0 = CU_STREAM_DEFAULT, a blocking stream.
    let created = unsafe { sys::cuStreamCreate(&mut raw, 0) };
    assert_eq!(created, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: `raw` is a live stream of `ctx`, destroyed below after the wrapper is gone.
    let blocking = unsafe { ctx.wrap_borrowed_stream(raw) };
    let legacy = ctx.default_stream();
    assert_eq!(capture_status(&legacy), Ok(CaptureStatus::None));

    blocking
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        .unwrap();
    assert_eq!(
        capture_status(&legacy),
        Err(DriverCode::STREAM_CAPTURE_IMPLICIT)
    );
    assert_eq!(
        ensure_not_capturing(&legacy, Operation::Alloc),
        Err(CaptureError::ImplicitCapture {
            op: Operation::Alloc
        })
    );
    // SAFETY: the legacy stream handle with the context current.
    let raw_status = unsafe { raw_capture_status(std::ptr::null_mut()) };
    assert_eq!(raw_status, Err(DriverCode::STREAM_CAPTURE_IMPLICIT));
    drop(
        blocking
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .unwrap(),
    );
    assert_eq!(capture_status(&legacy), Ok(CaptureStatus::None));
    drop(blocking);
    // SAFETY: created above, no wrapper or work left on it.
    unsafe { sys::cuStreamDestroy_v2(raw) };
}

#[test]
fn capture_stub_raw_stream_status() {
    run_child("child_raw", &[]);
}

#[test]
#[ignore = "child of capture_stub_raw_stream_status"]
fn child_raw() {
    if !is_child("child_raw") {
        return;
    }
    let (_ctx, stream) = stub_stream();
    let raw = stream.cu_stream();
    // SAFETY: `raw` belongs to `stream`, alive for the whole test.
    unsafe {
        assert_eq!(raw_capture_status(raw), Ok(CaptureStatus::None));
        assert_eq!(ensure_raw_not_capturing(raw, Operation::Alloc), Ok(()));
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        assert_eq!(raw_capture_status(raw), Ok(CaptureStatus::Active));
        assert_eq!(
            ensure_raw_not_capturing(raw, Operation::Other("cuMemcpy2D")),
            Err(CaptureError::Capturing {
                status: CaptureStatus::Active,
                op: Operation::Other("cuMemcpy2D")
            })
        );
    }
    drop(
        stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .unwrap(),
    );
    child_done("child_raw");
}

// ---------------------------------------------------------------------------------------------
// On a real CUDA device. Without one they print why and return.

/// A context on device 0, or `None` when the crate's probe and decision say skip (the stable
/// skip line is printed; with `GPU_TEST_PERMIT_REQUIRE=cuda` a missing device fails instead).
/// The probe runs in a child process, so a broken driver cannot take this test binary down.
fn real_device() -> Option<(Arc<CudaContext>, MutexGuard<'static, ()>)> {
    gpu_test_permit::require_backend!(Backend::Cuda, None);
    // One at a time: a global-mode capture in one test forbids allocation in the others.
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    match CudaContext::new(0) {
        Ok(ctx) => Some((ctx, serial)),
        Err(e) => panic!(
            "the probe found a CUDA device, but creating a context on device 0 failed with {}",
            DriverCode::from(e)
        ),
    }
}

#[test]
fn cuda_device_guard_trips_and_graph_replays() {
    let _permit = gpu_test_permit::acquire();
    let Some((ctx, _serial)) = real_device() else {
        return;
    };
    // Every access below is on one stream; event tracking would make the captured memset wait
    // on events recorded outside the capture.
    // SAFETY: called before any allocation of this context in this test.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let mut data = stream.checked_clone_htod(&[1u32; 256]).unwrap();
    stream.checked_synchronize().unwrap();

    let captured = CaptureScope::new(&stream)
        .mode(CaptureMode::ThreadLocal)
        .run(|s| {
            assert_eq!(capture_status(s), Ok(CaptureStatus::Active));
            let refused = |op| CaptureError::Capturing {
                status: CaptureStatus::Active,
                op,
            };
            assert_eq!(
                s.checked_alloc_zeros::<u32>(256).unwrap_err(),
                refused(Operation::AllocZeros)
            );
            assert_eq!(
                s.checked_clone_htod(&[3u32; 256]).unwrap_err(),
                refused(Operation::HostToDevice)
            );
            assert_eq!(
                s.checked_memcpy_htod(&[3u32; 256], &mut data).unwrap_err(),
                refused(Operation::HostToDevice)
            );
            assert_eq!(
                s.checked_synchronize().unwrap_err(),
                refused(Operation::StreamSynchronize)
            );
            assert_eq!(
                s.checked_context_synchronize().unwrap_err(),
                refused(Operation::ContextSynchronize)
            );
            s.memset_zeros(&mut data).unwrap();
            assert_eq!(
                capture_status(s),
                Ok(CaptureStatus::Active),
                "the capture is intact"
            );
            Ok::<_, CaptureError>(())
        })
        .expect("the capture ends cleanly");
    let graph = captured.graph.expect("a graph");
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    // Capturing recorded the memset without running it.
    assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![1u32; 256]);
    graph.launch().unwrap();
    assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![0u32; 256]);
    // Replay: upload again, launch again.
    stream.checked_memcpy_htod(&[2u32; 256], &mut data).unwrap();
    graph.launch().unwrap();
    stream.checked_synchronize().unwrap();
    assert_eq!(stream.clone_dtoh(&data).unwrap(), vec![0u32; 256]);
}

#[test]
fn cuda_device_unguarded_sync_invalidates_and_guard_says_so() {
    let _permit = gpu_test_permit::acquire();
    let Some((ctx, _serial)) = real_device() else {
        return;
    };
    let stream = ctx.new_stream().unwrap();
    let result = CaptureScope::new(&stream)
        .mode(CaptureMode::ThreadLocal)
        .run(|s| {
            // Synchronizing a capturing stream is illegal: the driver refuses and breaks the capture.
            assert_eq!(
                code_of(s.synchronize()),
                DriverCode::STREAM_CAPTURE_UNSUPPORTED
            );
            assert_eq!(capture_status(s), Ok(CaptureStatus::Invalidated));
            assert_eq!(
                s.checked_alloc_zeros::<u8>(8).unwrap_err(),
                CaptureError::Capturing {
                    status: CaptureStatus::Invalidated,
                    op: Operation::AllocZeros
                }
            );
            Ok::<_, CaptureError>(())
        });
    assert_eq!(
        result.unwrap_err(),
        CaptureError::Driver {
            call: DriverCall::EndCapture,
            code: DriverCode::STREAM_CAPTURE_INVALIDATED
        }
    );
    assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
    stream
        .checked_alloc_zeros::<u8>(8)
        .expect("the stream is usable again");
}

#[test]
fn cuda_device_global_capture_elsewhere_and_legacy_906() {
    let _permit = gpu_test_permit::acquire();
    let Some((ctx, _serial)) = real_device() else {
        return;
    };
    let capturing = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let (alloc, ended) = with_capture_on_other_thread(&capturing, CaptureMode::Global, || {
        assert_eq!(capture_status(&other), Ok(CaptureStatus::None));
        other.checked_alloc_zeros::<f32>(4).map(drop)
    });
    assert_eq!(
        alloc.unwrap_err(),
        CaptureError::OtherCapture {
            op: Operation::AllocZeros,
            mode: CaptureMode::Global,
            thread: CaptureThread::Other,
        }
    );
    // An empty capture may come back without a graph; it must end without error.
    assert!(ended.is_ok(), "{ended:?}");
    implicit_capture_case(&ctx);
}

/// What the real driver does with the unguarded calls that the stand-in driver models: the
/// stand-in's tests are only worth something if it agrees. Prints what it saw.
#[test]
fn cuda_device_driver_agrees_with_the_stand_in_model() {
    let _permit = gpu_test_permit::acquire();
    let Some((ctx, _serial)) = real_device() else {
        return;
    };
    // Event tracking would add waits on events recorded outside the captures, which break
    // them on their own and hide what the calls below do.
    // SAFETY: before any allocation of this context in this test.
    unsafe { ctx.disable_event_tracking() };
    let capturing = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let begin = |s: &CudaStream, mode: CUstreamCaptureMode| s.begin_capture(mode).unwrap();
    let end = |s: &Arc<CudaStream>| {
        s.end_capture(sys::CUgraphInstantiate_flags(0))
            .map(drop)
            .map_err(DriverCode::from)
    };
    let malloc = || {
        // SAFETY: a 256-byte allocation, leaked if it succeeds (one per test run).
        unsafe { cudarc::driver::result::malloc_sync(256) }
            .map(drop)
            .map_err(DriverCode::from)
    };
    let unsupported = Err(DriverCode::STREAM_CAPTURE_UNSUPPORTED);
    let invalidated = Err(DriverCode::STREAM_CAPTURE_INVALIDATED);

    // cuMemAlloc on the capturing thread during a global capture: refused, capture broken.
    begin(
        &capturing,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    let seen = (malloc(), capture_status(&capturing), end(&capturing));
    println!("cuMemAlloc during its own thread's global capture: {seen:?}");
    assert_eq!(
        seen,
        (unsupported, Ok(CaptureStatus::Invalidated), invalidated)
    );

    // cuMemAlloc on another thread during a global capture: the same, to the other capture.
    let (opened_tx, opened_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let seen = std::thread::scope(|scope| {
        let capturing = &capturing;
        let capturer = scope.spawn(move || {
            begin(
                capturing,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            );
            opened_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            (capture_status(capturing), end(capturing))
        });
        opened_rx.recv().unwrap();
        ctx.bind_to_thread().unwrap();
        let alloc = malloc();
        done_tx.send(()).unwrap();
        let (status, ended) = capturer.join().unwrap();
        (alloc, status, ended)
    });
    println!("cuMemAlloc on another thread during a global capture: {seen:?}");
    assert_eq!(
        seen,
        (unsupported, Ok(CaptureStatus::Invalidated), invalidated)
    );

    // Context synchronize during a relaxed capture: refused, capture broken. (Why the guard
    // refuses context synchronize while any capture is open.)
    begin(&other, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
    let seen = (
        ctx.synchronize().map_err(DriverCode::from),
        capture_status(&other),
        end(&other),
    );
    println!("context synchronize during a relaxed capture: {seen:?}");
    assert_eq!(
        seen,
        (unsupported, Ok(CaptureStatus::Invalidated), invalidated)
    );

    // A pageable host-to-device copy: recent drivers record it into the graph, which then
    // re-reads that host address at every replay (usually a dead temporary by then); the
    // guard refuses it either way. Either outcome must leave a consistent capture.
    let mut dst = other.alloc_zeros::<u8>(256).unwrap();
    other.synchronize().unwrap();
    begin(
        &other,
        CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    );
    let copy = other
        .memcpy_htod(&[1u8; 256], &mut dst)
        .map_err(DriverCode::from);
    let seen = (copy, capture_status(&other), end(&other));
    println!("pageable memcpy_htod during a capture: {seen:?}");
    match copy {
        Ok(()) => assert_eq!(seen, (Ok(()), Ok(CaptureStatus::Active), Ok(()))),
        Err(_) => assert_eq!(
            seen,
            (unsupported, Ok(CaptureStatus::Invalidated), invalidated)
        ),
    }
}
