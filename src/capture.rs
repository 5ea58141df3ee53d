//! CUDA graph capture guard (feature `cuda`): refuse capture-incompatible work with a typed
//! error at the call, instead of a hang or an invalidated capture that fails far away.
//!
//! While a stream captures a CUDA graph, synchronous allocation and synchronizing calls are
//! not capturable: depending on the device and the capture mode they invalidate the capture
//! (the error surfaces at `end_capture`, long after its cause) or hang. Uploads from host
//! memory are worse where the driver accepts them: the graph re-reads the host address at
//! every replay. This module asks the driver first (`cuStreamIsCapturing`) and refuses:
//!
//! ```no_run
//! use gpu_test_permit::capture::{CaptureError, CheckedStream, Operation};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = cudarc::driver::CudaContext::new(0)?;
//! let stream = ctx.new_stream()?;
//! match stream.checked_alloc_zeros::<f32>(1024) {
//!     Ok(buffer) => { /* not capturing: allocated as usual */ }
//!     Err(CaptureError::Capturing { status, op: Operation::AllocZeros }) => {
//!         // allocate before `begin_capture` instead
//!     }
//!     Err(other) => return Err(other.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! # What you get
//!
//! - [`capture_status`] / [`raw_capture_status`]: [`CaptureStatus`] of a cudarc stream or a raw
//!   `CUstream`.
//! - [`ensure_not_capturing`]: `Ok(())` or a [`CaptureError`] naming the status and the refused
//!   [`Operation`]. [`decide`] is the same rule as a pure function.
//! - [`CheckedStream`]: `checked_alloc_zeros`, `checked_clone_htod`, … on `Arc<CudaStream>`:
//!   check, then call through to cudarc.
//! - [`CaptureScope`]: begin a capture, run a closure, always end the capture (on error and on
//!   panic too), and record the capture process-wide so that the guard on *any* stream refuses
//!   while a global-mode capture is open on another thread.
//!
//! # Rules
//!
//! - **Invalidated trips the guard.** A capture that is already invalidated is broken: nothing
//!   recorded into it will run, and more work only moves the error further from its cause. The
//!   error says so and tells you to end the capture and look for the earlier call.
//! - **No driver, no error.** Without `libcuda` the status of a raw stream is
//!   [`CaptureStatus::None`]; CPU-only machines run the same code. (A [`CudaStream`] cannot
//!   exist without a driver.)
//! - **A failing query is an error**, never "not capturing": [`CaptureError::StatusQuery`]
//!   carries the raw `CUresult`. The legacy-stream error while another stream captures
//!   (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`, 906) is [`CaptureError::ImplicitCapture`].
//! - **Captures on other threads** are seen only if they were begun through [`CaptureScope`]:
//!   a per-stream query cannot see them. A global-mode capture makes `cuMemAlloc` and
//!   synchronizing calls illegal on every thread; a thread-local one on its own thread.
//!   Context synchronize waits for every stream, so it is refused while any capture is open.
//! - The guard is a check at call time: a capture that another thread begins right after the
//!   check is not seen.
//!
//! Driver errors are reported by their numeric code ([`DriverCode`]) and a static table of
//! names; formatting a cudarc `DriverError` would call back into the driver.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{
    CudaGraph, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, DriverError, HostSlice,
    ValidAsZeroBits, result,
};

/// Whether a stream is capturing a CUDA graph (`CUstreamCaptureStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: work runs as usual.
    None,
    /// Capturing: work is recorded into a graph, not run.
    Active,
    /// Was capturing, and an illegal call broke the capture; ending it reports
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
    Invalidated,
}

impl CaptureStatus {
    /// Converts the driver's status.
    ///
    /// ```
    /// use cudarc::driver::sys::CUstreamCaptureStatus;
    /// use gpu_test_permit::capture::CaptureStatus;
    ///
    /// let raw = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    /// assert_eq!(CaptureStatus::from_raw(raw), CaptureStatus::Active);
    /// ```
    pub fn from_raw(status: CUstreamCaptureStatus) -> Self {
        match status {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                CaptureStatus::Invalidated
            }
        }
    }

    /// `true` for [`Active`](Self::Active) and [`Invalidated`](Self::Invalidated): the stream
    /// is inside a capture sequence, broken or not.
    ///
    /// ```
    /// use gpu_test_permit::capture::CaptureStatus;
    /// assert!(CaptureStatus::Invalidated.is_capturing());
    /// assert!(!CaptureStatus::None.is_capturing());
    /// ```
    pub fn is_capturing(self) -> bool {
        self != CaptureStatus::None
    }
}

impl fmt::Display for CaptureStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaptureStatus::None => "NONE",
            CaptureStatus::Active => "ACTIVE",
            CaptureStatus::Invalidated => "INVALIDATED",
        })
    }
}

/// The capture mode of [`CaptureScope`] (`CUstreamCaptureMode`): who else is forbidden
/// potentially unsafe calls (`cuMemAlloc`, synchronous copies, synchronize) while it is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CaptureMode {
    /// Every thread of the process (CUDA's default). Safest, but one test's capture makes
    /// allocation illegal in every other test thread of the process.
    #[default]
    Global,
    /// Only the capturing thread. Usually right for test suites (tests run on threads).
    ThreadLocal,
    /// Nobody: the driver checks nothing beyond the captured stream.
    Relaxed,
}

impl CaptureMode {
    fn index(self) -> usize {
        match self {
            CaptureMode::Global => 0,
            CaptureMode::ThreadLocal => 1,
            CaptureMode::Relaxed => 2,
        }
    }
}

impl From<CaptureMode> for CUstreamCaptureMode {
    fn from(mode: CaptureMode) -> Self {
        match mode {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

impl fmt::Display for CaptureMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaptureMode::Global => "global",
            CaptureMode::ThreadLocal => "thread-local",
            CaptureMode::Relaxed => "relaxed",
        })
    }
}

/// A capture-incompatible operation the guard was asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Device allocation (`CudaStream::alloc`).
    Alloc,
    /// Zeroed device allocation (`CudaStream::alloc_zeros`).
    AllocZeros,
    /// Host-to-device copy from host memory (`clone_htod`, `memcpy_htod`). Some drivers refuse
    /// it during capture; others (H100, driver 580) record it, and the graph then re-reads
    /// that host address at every replay, usually a dead temporary by then. Upload inputs
    /// before the capture into device buffers the graph uses.
    HostToDevice,
    /// Context synchronize (`CudaContext::synchronize`): waits for every stream.
    ContextSynchronize,
    /// Stream synchronize (`CudaStream::synchronize`): illegal on the capturing stream only.
    StreamSynchronize,
    /// Beginning a capture: refused only if the stream is already capturing.
    BeginCapture,
    /// Any other capture-incompatible call, named by the caller; treated like an allocation.
    Other(&'static str),
}

impl Operation {
    /// Whether CUDA forbids this call on threads other than the capturing one (global mode) or
    /// on the capturing thread (thread-local mode), not only on the capturing stream.
    fn is_potentially_unsafe(self) -> bool {
        !matches!(self, Operation::StreamSynchronize | Operation::BeginCapture)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Alloc => f.write_str("allocation (CudaStream::alloc)"),
            Operation::AllocZeros => f.write_str("zeroed allocation (CudaStream::alloc_zeros)"),
            Operation::HostToDevice => f.write_str("host-to-device copy (clone_htod/memcpy_htod)"),
            Operation::ContextSynchronize => {
                f.write_str("context synchronize (CudaContext::synchronize)")
            }
            Operation::StreamSynchronize => {
                f.write_str("stream synchronize (CudaStream::synchronize)")
            }
            Operation::BeginCapture => f.write_str("begin capture"),
            Operation::Other(name) => f.write_str(name),
        }
    }
}

/// A raw CUDA driver result code (`CUresult`), printable without calling the driver.
///
/// ```
/// use gpu_test_permit::capture::DriverCode;
///
/// assert_eq!(DriverCode(901), DriverCode::STREAM_CAPTURE_INVALIDATED);
/// assert_eq!(DriverCode(901).name(), Some("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"));
/// assert_eq!(DriverCode(901).to_string(), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)");
/// assert_eq!(DriverCode(12345).to_string(), "CUDA error 12345");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DriverCode(pub u32);

impl DriverCode {
    /// `CUDA_ERROR_NOT_INITIALIZED` (3): `cuInit` was not called.
    pub const NOT_INITIALIZED: Self = Self(3);
    /// `CUDA_ERROR_INVALID_CONTEXT` (201).
    pub const INVALID_CONTEXT: Self = Self(201);
    /// `CUDA_ERROR_INVALID_HANDLE` (400).
    pub const INVALID_HANDLE: Self = Self(400);
    /// `CUDA_ERROR_ILLEGAL_STATE` (401).
    pub const ILLEGAL_STATE: Self = Self(401);
    /// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (900): the call is not allowed during capture.
    pub const STREAM_CAPTURE_UNSUPPORTED: Self = Self(900);
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` (901): the capture was broken by an earlier call.
    pub const STREAM_CAPTURE_INVALIDATED: Self = Self(901);
    /// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (906): the legacy stream would join a capture.
    pub const STREAM_CAPTURE_IMPLICIT: Self = Self(906);
    /// `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD` (908).
    pub const STREAM_CAPTURE_WRONG_THREAD: Self = Self(908);

    /// The `CUDA_ERROR_*` name, for the codes that matter around capture and stream queries.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "CUDA_SUCCESS",
            1 => "CUDA_ERROR_INVALID_VALUE",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            3 => "CUDA_ERROR_NOT_INITIALIZED",
            4 => "CUDA_ERROR_DEINITIALIZED",
            100 => "CUDA_ERROR_NO_DEVICE",
            101 => "CUDA_ERROR_INVALID_DEVICE",
            201 => "CUDA_ERROR_INVALID_CONTEXT",
            400 => "CUDA_ERROR_INVALID_HANDLE",
            401 => "CUDA_ERROR_ILLEGAL_STATE",
            700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
            719 => "CUDA_ERROR_LAUNCH_FAILED",
            900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            902 => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            903 => "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
            904 => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
            905 => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            906 => "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
            907 => "CUDA_ERROR_CAPTURED_EVENT",
            908 => "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
            999 => "CUDA_ERROR_UNKNOWN",
            _ => return None,
        })
    }
}

impl From<DriverError> for DriverCode {
    fn from(error: DriverError) -> Self {
        // The discriminant is the CUresult value; Display/Debug would call the driver.
        DriverCode(error.0 as u32)
    }
}

impl fmt::Display for DriverCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "CUDA error {}", self.0),
        }
    }
}

/// Which thread holds an open capture that forbids a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureThread {
    /// The calling thread.
    This,
    /// Another thread of this process.
    Other,
}

impl fmt::Display for CaptureThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CaptureThread::This => "this thread",
            CaptureThread::Other => "another thread",
        })
    }
}

/// The driver call that failed in a [`CaptureError::Driver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverCall {
    /// The checked operation itself, called through after the guard let it pass.
    Op(Operation),
    /// `cuStreamBeginCapture`.
    BeginCapture,
    /// `cuStreamEndCapture` (and graph instantiation, which cudarc does with it).
    EndCapture,
}

impl fmt::Display for DriverCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverCall::Op(op) => op.fmt(f),
            DriverCall::BeginCapture => f.write_str("begin capture (cuStreamBeginCapture)"),
            DriverCall::EndCapture => {
                f.write_str("end capture (cuStreamEndCapture + cuGraphInstantiate)")
            }
        }
    }
}

/// Why the guard refused an operation, or why a checked call failed.
///
/// Match on the variants; the messages are for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureError {
    /// The stream itself is capturing ([`CaptureStatus::Active`]) or its capture is already
    /// broken ([`CaptureStatus::Invalidated`]); `op` was not started.
    Capturing {
        /// The stream's status.
        status: CaptureStatus,
        /// The refused operation.
        op: Operation,
    },
    /// A capture begun through [`CaptureScope`] forbids `op` on this thread: a global-mode
    /// capture on any thread, a thread-local one on this thread, or (for context synchronize)
    /// any capture at all.
    OtherCapture {
        /// The refused operation.
        op: Operation,
        /// The mode of the capture that forbids it.
        mode: CaptureMode,
        /// Where that capture is open.
        thread: CaptureThread,
    },
    /// The status query on the legacy default stream failed with
    /// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (906): a blocking stream is capturing and work on
    /// the legacy stream would join its capture.
    ImplicitCapture {
        /// The refused operation.
        op: Operation,
    },
    /// `cuStreamIsCapturing` failed, so the guard cannot tell; `op` was refused rather than
    /// risked.
    StatusQuery {
        /// The operation that was about to run.
        op: Operation,
        /// The driver's result code.
        code: DriverCode,
    },
    /// The guard let the call through (or it was begin/end capture) and the driver failed.
    Driver {
        /// The failing call.
        call: DriverCall,
        /// The driver's result code.
        code: DriverCode,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CaptureError::Capturing {
                status: CaptureStatus::Invalidated,
                op,
            } => write!(
                f,
                "refused {op}: this stream's CUDA graph capture is already INVALIDATED by an \
                 earlier capture-incompatible call, so further work is meaningless; end the \
                 capture (it reports CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) and find the \
                 earlier call"
            ),
            CaptureError::Capturing {
                status,
                op: Operation::BeginCapture,
            } => write!(
                f,
                "refused begin capture: the stream is already capturing a CUDA graph (status \
                 {status}); end that capture first (captures do not nest on one stream)"
            ),
            CaptureError::Capturing { status, op } => write!(
                f,
                "refused {op}: the stream is capturing a CUDA graph (status {status}) and this \
                 call cannot be captured (it would invalidate the capture or hang); do it before \
                 begin_capture or after end_capture"
            ),
            CaptureError::OtherCapture { op, mode, thread } => {
                write!(
                    f,
                    "refused {op}: a {mode}-mode CUDA graph capture is open on {thread}"
                )?;
                match (op, mode) {
                    (Operation::ContextSynchronize, _) => f.write_str(
                        "; context synchronize would wait on the capturing stream. Synchronize \
                         the streams you use instead, or wait until the capture ends",
                    ),
                    (_, CaptureMode::Global) => f.write_str(
                        "; a global-mode capture makes this call illegal on every thread. Do it \
                         before the capture begins, or capture with CaptureMode::ThreadLocal",
                    ),
                    _ => f.write_str(
                        "; it makes this call illegal on the capturing thread. Do it before the \
                         capture begins, on another thread, or capture with CaptureMode::Relaxed",
                    ),
                }
            }
            CaptureError::ImplicitCapture { op } => write!(
                f,
                "refused {op}: querying the legacy default stream failed with \
                 CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (906): another (blocking) stream is \
                 capturing and work on the legacy stream would join that capture; use a \
                 non-blocking stream (CudaContext::new_stream) or wait until the capture ends"
            ),
            CaptureError::StatusQuery { op, code } => write!(
                f,
                "refused {op}: cannot tell whether the stream is capturing, because \
                 cuStreamIsCapturing failed with {code}; check that the stream and its context \
                 are valid (an earlier sticky error in the context is reported here too)"
            ),
            CaptureError::Driver { call, code } => {
                write!(f, "{call} failed with {code}")?;
                match code {
                    DriverCode::STREAM_CAPTURE_INVALIDATED => f.write_str(
                        "; a capture-incompatible call during the capture broke it: guard the \
                         calls inside the capture (gpu_test_permit::capture::CheckedStream)",
                    ),
                    DriverCode::STREAM_CAPTURE_UNSUPPORTED => f.write_str(
                        "; the call is not allowed while a capture is open: move it before the \
                         capture begins",
                    ),
                    _ => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// Captures open through [`CaptureScope`], per mode, as seen from the calling thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenCaptures {
    /// Captures open on the calling thread.
    pub here: ModeCounts,
    /// Captures open on other threads of this process.
    pub elsewhere: ModeCounts,
}

/// Numbers of open captures per [`CaptureMode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModeCounts {
    /// Global-mode captures.
    pub global: usize,
    /// Thread-local-mode captures.
    pub thread_local: usize,
    /// Relaxed-mode captures.
    pub relaxed: usize,
}

impl ModeCounts {
    fn get(&self, mode: CaptureMode) -> usize {
        match mode {
            CaptureMode::Global => self.global,
            CaptureMode::ThreadLocal => self.thread_local,
            CaptureMode::Relaxed => self.relaxed,
        }
    }
}

impl OpenCaptures {
    /// What [`CaptureScope`]s have open right now, seen from the calling thread.
    pub fn current() -> Self {
        let mut open = OpenCaptures::default();
        // The common case, no capture open anywhere, costs one load and no thread-local access.
        if ANY_OPEN.load(Ordering::Acquire) == 0 {
            return open;
        }
        // During thread teardown the thread-local is gone; this thread can no longer be inside
        // a scope then, so everything open is elsewhere.
        let here: [usize; 3] = HERE
            .try_with(|here| std::array::from_fn(|i| here[i].get()))
            .unwrap_or_default();
        let all: [usize; 3] = std::array::from_fn(|i| OPEN[i].load(Ordering::Acquire));
        // Another thread may end a capture between the loads: never underflow.
        let elsewhere: [usize; 3] = std::array::from_fn(|i| all[i].saturating_sub(here[i]));
        open.here = ModeCounts {
            global: here[0],
            thread_local: here[1],
            relaxed: here[2],
        };
        open.elsewhere = ModeCounts {
            global: elsewhere[0],
            thread_local: elsewhere[1],
            relaxed: elsewhere[2],
        };
        open
    }
}

/// Open captures per mode, process-wide, and per thread: begin and end of one
/// [`CaptureScope`] happen on one thread, so the thread-local count is exact.
static OPEN: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];
/// Sum of `OPEN`, for the fast path.
static ANY_OPEN: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static HERE: [Cell<usize>; 3] = const { [Cell::new(0), Cell::new(0), Cell::new(0)] };
}

/// The guard's rule, as a pure function: may `op` run on a stream with `status` while the
/// captures in `open` are open?
///
/// - The stream's own capture, [`Active`](CaptureStatus::Active) or
///   [`Invalidated`](CaptureStatus::Invalidated), refuses every operation
///   ([`CaptureError::Capturing`]).
/// - Stream synchronize and begin capture concern only their own stream.
/// - Other operations are refused while a global-mode capture is open on any thread, or a
///   thread-local one on this thread ([`CaptureError::OtherCapture`]).
/// - Context synchronize is refused while any capture is open, relaxed ones too.
///
/// ```
/// use gpu_test_permit::capture::{
///     decide, CaptureError, CaptureMode, CaptureStatus, CaptureThread, ModeCounts, OpenCaptures,
///     Operation,
/// };
///
/// let none = OpenCaptures::default();
/// assert_eq!(decide(Operation::Alloc, CaptureStatus::None, &none), Ok(()));
/// assert!(matches!(
///     decide(Operation::Alloc, CaptureStatus::Active, &none),
///     Err(CaptureError::Capturing { status: CaptureStatus::Active, op: Operation::Alloc })
/// ));
///
/// let global_elsewhere = OpenCaptures {
///     elsewhere: ModeCounts { global: 1, ..ModeCounts::default() },
///     ..OpenCaptures::default()
/// };
/// assert_eq!(
///     decide(Operation::Alloc, CaptureStatus::None, &global_elsewhere),
///     Err(CaptureError::OtherCapture {
///         op: Operation::Alloc,
///         mode: CaptureMode::Global,
///         thread: CaptureThread::Other,
///     })
/// );
/// ```
///
/// # Errors
///
/// [`CaptureError::Capturing`] or [`CaptureError::OtherCapture`], as above.
pub fn decide(
    op: Operation,
    status: CaptureStatus,
    open: &OpenCaptures,
) -> Result<(), CaptureError> {
    if status.is_capturing() {
        return Err(CaptureError::Capturing { status, op });
    }
    if !op.is_potentially_unsafe() {
        return Ok(());
    }
    let refuse = |mode, thread| Err(CaptureError::OtherCapture { op, mode, thread });
    if open.here.global > 0 {
        return refuse(CaptureMode::Global, CaptureThread::This);
    }
    if open.here.thread_local > 0 {
        return refuse(CaptureMode::ThreadLocal, CaptureThread::This);
    }
    if open.elsewhere.global > 0 {
        return refuse(CaptureMode::Global, CaptureThread::Other);
    }
    if op == Operation::ContextSynchronize {
        for (counts, thread) in [
            (&open.here, CaptureThread::This),
            (&open.elsewhere, CaptureThread::Other),
        ] {
            for mode in [CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
                if counts.get(mode) > 0 {
                    return refuse(mode, thread);
                }
            }
        }
    }
    Ok(())
}

/// Whether a CUDA driver library can be loaded, checked once per process. cudarc panics when
/// called without one.
fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library names; calls nothing in it.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// The capture status of a cudarc stream (`CudaStream::capture_status`, which binds the
/// stream's context to the calling thread first).
///
/// ```no_run
/// use gpu_test_permit::capture::{capture_status, CaptureStatus};
///
/// let stream = cudarc::driver::CudaContext::new(0).unwrap().new_stream().unwrap();
/// assert_eq!(capture_status(&stream), Ok(CaptureStatus::None));
/// ```
///
/// # Errors
///
/// The driver's code when the query fails, for example `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`
/// for the legacy stream while a blocking stream captures, or a sticky error recorded in the
/// stream's context.
#[inline]
pub fn capture_status(stream: &CudaStream) -> Result<CaptureStatus, DriverCode> {
    stream
        .capture_status()
        .map(CaptureStatus::from_raw)
        .map_err(DriverCode::from)
}

/// The capture status of a raw `CUstream`; [`CaptureStatus::None`] when no CUDA driver is
/// installed.
///
/// ```
/// use gpu_test_permit::capture::{raw_capture_status, CaptureStatus};
///
/// # if !unsafe { cudarc::driver::sys::is_culib_present() } {
/// // On a machine without a CUDA driver:
/// // SAFETY: the legacy stream handle; no driver, so nothing is called.
/// let status = unsafe { raw_capture_status(std::ptr::null_mut()) };
/// assert_eq!(status, Ok(CaptureStatus::None));
/// # }
/// ```
///
/// # Errors
///
/// The driver's code when `cuStreamIsCapturing` fails (`CUDA_ERROR_NOT_INITIALIZED` if
/// `cuInit` was not called, `CUDA_ERROR_INVALID_CONTEXT` for the legacy stream without a
/// current context, …).
///
/// # Safety
///
/// `stream` must be a live stream handle, the legacy stream (null) or the per-thread stream.
pub unsafe fn raw_capture_status(stream: CUstream) -> Result<CaptureStatus, DriverCode> {
    if !driver_present() {
        return Ok(CaptureStatus::None);
    }
    // SAFETY: the caller vouches for the handle; a driver is present, so cudarc won't panic.
    unsafe { result::stream::is_capturing(stream) }
        .map(CaptureStatus::from_raw)
        .map_err(DriverCode::from)
}

#[inline]
fn check(op: Operation, status: Result<CaptureStatus, DriverCode>) -> Result<(), CaptureError> {
    match status {
        // The common case: not capturing, no scope open anywhere. Keeps the guard within a
        // few percent of the bare query.
        Ok(CaptureStatus::None) if ANY_OPEN.load(Ordering::Acquire) == 0 => Ok(()),
        Ok(status) => decide(op, status, &OpenCaptures::current()),
        Err(DriverCode::STREAM_CAPTURE_IMPLICIT) => Err(CaptureError::ImplicitCapture { op }),
        Err(code) => Err(CaptureError::StatusQuery { op, code }),
    }
}

/// `Ok(())` if `op` may run on `stream` now; otherwise the reason, without running anything.
///
/// Refuses while the stream captures (or its capture is invalidated), while a
/// [`CaptureScope`] capture elsewhere forbids `op` (see [`decide`]), and when the status
/// cannot be read.
///
/// ```no_run
/// use gpu_test_permit::capture::{ensure_not_capturing, CaptureError, Operation};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
/// ensure_not_capturing(&stream, Operation::Other("cuMemcpy2D"))?;
/// // ... now make the call ...
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`CaptureError::Capturing`], [`CaptureError::OtherCapture`],
/// [`CaptureError::ImplicitCapture`] or [`CaptureError::StatusQuery`].
#[inline]
pub fn ensure_not_capturing(stream: &CudaStream, op: Operation) -> Result<(), CaptureError> {
    check(op, capture_status(stream))
}

/// [`ensure_not_capturing`] for a raw `CUstream`; `Ok(())` without a CUDA driver.
///
/// # Errors
///
/// As [`ensure_not_capturing`].
///
/// # Safety
///
/// As [`raw_capture_status`].
pub unsafe fn ensure_raw_not_capturing(
    stream: CUstream,
    op: Operation,
) -> Result<(), CaptureError> {
    // SAFETY: forwarded to the caller.
    check(op, unsafe { raw_capture_status(stream) })
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::sync::Arc<cudarc::driver::CudaStream> {}
}

/// Checked versions of cudarc's capture-incompatible `CudaStream` calls: each one runs
/// [`ensure_not_capturing`] first and then calls through.
///
/// ```no_run
/// use gpu_test_permit::capture::{CaptureError, CheckedStream};
///
/// # fn main() -> Result<(), CaptureError> {
/// # let stream = cudarc::driver::CudaContext::new(0).unwrap().new_stream().unwrap();
/// let mut out = stream.checked_alloc_zeros::<f32>(4)?;
/// let input = stream.checked_clone_htod(&[1.0f32, 2.0, 3.0, 4.0])?;
/// stream.checked_memcpy_htod(&[0.5f32; 4], &mut out)?;
/// stream.checked_synchronize()?;
/// # drop(input); Ok(()) }
/// ```
///
/// Failures of the call itself come back as [`CaptureError::Driver`] with
/// [`DriverCall::Op`].
pub trait CheckedStream: sealed::Sealed {
    /// Checked `CudaStream::alloc`.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::Alloc`], or [`CaptureError::Driver`].
    ///
    /// # Safety
    ///
    /// As `CudaStream::alloc`: the memory is uninitialized.
    unsafe fn checked_alloc<T: DeviceRepr>(&self, len: usize)
    -> Result<CudaSlice<T>, CaptureError>;

    /// Checked `CudaStream::alloc_zeros`.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::AllocZeros`], or [`CaptureError::Driver`].
    fn checked_alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CaptureError>;

    /// Checked `CudaStream::clone_htod` (allocate and upload).
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::HostToDevice`], or
    /// [`CaptureError::Driver`].
    fn checked_clone_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        &self,
        src: &Src,
    ) -> Result<CudaSlice<T>, CaptureError>;

    /// Checked `CudaStream::memcpy_htod` (upload into existing device memory).
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::HostToDevice`], or
    /// [`CaptureError::Driver`].
    ///
    /// # Panics
    ///
    /// As `CudaStream::memcpy_htod`, if `dst` is shorter than `src`.
    fn checked_memcpy_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), CaptureError>;

    /// Checked `CudaStream::synchronize`.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::StreamSynchronize`], or
    /// [`CaptureError::Driver`].
    fn checked_synchronize(&self) -> Result<(), CaptureError>;

    /// Checked `CudaContext::synchronize` of the stream's context.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::ContextSynchronize`], or
    /// [`CaptureError::Driver`].
    fn checked_context_synchronize(&self) -> Result<(), CaptureError>;
}

fn through<T>(op: Operation, result: Result<T, DriverError>) -> Result<T, CaptureError> {
    result.map_err(|e| CaptureError::Driver {
        call: DriverCall::Op(op),
        code: e.into(),
    })
}

impl CheckedStream for Arc<CudaStream> {
    unsafe fn checked_alloc<T: DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::Alloc)?;
        // SAFETY: forwarded to the caller (uninitialized memory).
        through(Operation::Alloc, unsafe { self.alloc(len) })
    }

    fn checked_alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::AllocZeros)?;
        through(Operation::AllocZeros, self.alloc_zeros(len))
    }

    fn checked_clone_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        &self,
        src: &Src,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::HostToDevice)?;
        through(Operation::HostToDevice, self.clone_htod(src))
    }

    fn checked_memcpy_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::HostToDevice)?;
        through(Operation::HostToDevice, self.memcpy_htod(src, dst))
    }

    fn checked_synchronize(&self) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::StreamSynchronize)?;
        through(Operation::StreamSynchronize, self.synchronize())
    }

    fn checked_context_synchronize(&self) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::ContextSynchronize)?;
        through(Operation::ContextSynchronize, self.context().synchronize())
    }
}

/// A capture that [`CaptureScope::run`] ended normally: the instantiated graph (if the
/// driver returned one) and the closure's value.
pub struct Captured<R> {
    /// The captured, instantiated graph; `None` if the driver returned no graph.
    pub graph: Option<CudaGraph>,
    /// What the closure returned.
    pub value: R,
}

impl<R: fmt::Debug> fmt::Debug for Captured<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured")
            .field("graph", &self.graph.as_ref().map(|_| "CudaGraph"))
            .field("value", &self.value)
            .finish()
    }
}

/// Begin a capture, run a closure, and always end the capture — when the closure returns an
/// error or panics too — so a stream is never left capturing.
///
/// While it runs, the capture is recorded process-wide: [`ensure_not_capturing`] and the
/// [`CheckedStream`] calls on *any* stream refuse what its mode forbids (see [`decide`]).
/// Captures begun directly through cudarc are seen only by the per-stream query.
///
/// With cudarc, turn event tracking off before allocating the buffers a capture uses
/// (`CudaContext::disable_event_tracking`, as cudarc's own graph tests do): otherwise work on
/// them inside the capture waits on events recorded outside it, which breaks the capture (on
/// an H100 the capture then ends with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`).
///
/// ```no_run
/// use gpu_test_permit::capture::{CaptureError, CaptureMode, CaptureScope, CheckedStream, Operation};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = cudarc::driver::CudaContext::new(0)?;
/// // SAFETY: before any allocation; every buffer below is used on one stream.
/// unsafe { ctx.disable_event_tracking() };
/// let stream = ctx.new_stream()?;
/// let mut buffer = stream.checked_alloc_zeros::<u32>(256)?; // before the capture
///
/// let captured = CaptureScope::new(&stream)
///     .mode(CaptureMode::ThreadLocal)
///     .run(|s| -> Result<_, Box<dyn std::error::Error>> {
///         // Refused with a typed error instead of breaking the capture:
///         assert!(matches!(
///             s.checked_alloc_zeros::<u32>(256),
///             Err(CaptureError::Capturing { op: Operation::AllocZeros, .. })
///         ));
///         s.memset_zeros(&mut buffer)?; // captured
///         Ok(())
///     })?;
/// if let Some(graph) = captured.graph {
///     graph.launch()?; // replay, as often as needed
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a CaptureScope does nothing until `run`"]
pub struct CaptureScope<'s> {
    stream: &'s Arc<CudaStream>,
    mode: CaptureMode,
    flags: sys::CUgraphInstantiate_flags,
}

impl<'s> CaptureScope<'s> {
    /// A scope on `stream`, in [`CaptureMode::Global`] (CUDA's default), instantiating with
    /// default flags.
    pub fn new(stream: &'s Arc<CudaStream>) -> Self {
        CaptureScope {
            stream,
            mode: CaptureMode::Global,
            flags: sys::CUgraphInstantiate_flags(0),
        }
    }

    /// The capture mode.
    pub fn mode(mut self, mode: CaptureMode) -> Self {
        self.mode = mode;
        self
    }

    /// The flags for `cuGraphInstantiate` when the capture ends.
    pub fn instantiate_flags(mut self, flags: sys::CUgraphInstantiate_flags) -> Self {
        self.flags = flags;
        self
    }

    /// Begins the capture, runs `f` with the capturing stream, and ends the capture.
    ///
    /// If `f` returns an error or panics, the capture is still ended and its graph destroyed;
    /// the error is returned (or the panic resumed).
    ///
    /// # Errors
    ///
    /// [`CaptureError::Capturing`] with [`Operation::BeginCapture`] if the stream is already
    /// capturing, [`CaptureError::Driver`] if begin or end capture fails (for example
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` when an unguarded call broke the capture), or
    /// the closure's own error.
    pub fn run<R, E, F>(self, f: F) -> Result<Captured<R>, E>
    where
        F: FnOnce(&Arc<CudaStream>) -> Result<R, E>,
        E: From<CaptureError>,
    {
        let stream = self.stream;
        ensure_not_capturing(stream, Operation::BeginCapture)?;
        stream
            .begin_capture(self.mode.into())
            .map_err(|e| CaptureError::Driver {
                call: DriverCall::BeginCapture,
                code: e.into(),
            })?;
        let mut open = OpenCapture::register(stream, self.mode);
        let value = f(stream)?; // on error (or panic) `open` ends the capture as it drops
        open.ended = true;
        let graph = stream
            .end_capture(self.flags)
            .map_err(|e| CaptureError::Driver {
                call: DriverCall::EndCapture,
                code: e.into(),
            })?;
        Ok(Captured { graph, value })
    }
}

/// A capture begun by [`CaptureScope::run`]: counted in the registry while it lives, and
/// ended on drop unless `run` ended it.
struct OpenCapture<'s> {
    stream: &'s CudaStream,
    mode: CaptureMode,
    ended: bool,
}

impl<'s> OpenCapture<'s> {
    fn register(stream: &'s CudaStream, mode: CaptureMode) -> Self {
        OPEN[mode.index()].fetch_add(1, Ordering::AcqRel);
        ANY_OPEN.fetch_add(1, Ordering::AcqRel);
        HERE.with(|here| here[mode.index()].set(here[mode.index()].get() + 1));
        OpenCapture {
            stream,
            mode,
            ended: false,
        }
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // The closure failed or panicked: end the capture so the stream is usable again,
            // and drop whatever graph it produced. Errors here have nowhere better to go.
            let _ = self.stream.context().bind_to_thread();
            // SAFETY: the stream is alive (borrowed) and capturing since `register`.
            if let Ok(graph) = unsafe { result::stream::end_capture(self.stream.cu_stream()) }
                && !graph.is_null()
            {
                // SAFETY: the graph was just returned to us and is owned by nobody else.
                let _ = unsafe { result::graph::destroy(graph) };
            }
        }
        HERE.with(|here| here[self.mode.index()].set(here[self.mode.index()].get() - 1));
        OPEN[self.mode.index()].fetch_sub(1, Ordering::AcqRel);
        ANY_OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}
