//! Why the guard refused, or why a checked call failed: [`CaptureError`].

use std::fmt;

use cudarc::driver::DriverError;

use super::{CaptureMode, CaptureStatus, DriverCode, Operation};

/// Which thread holds an open capture that forbids a call.
///
/// ```
/// use gpu_test_permit::capture::{
///     decide, CaptureError, CaptureStatus, CaptureThread, ModeCounts, OpenCaptures, Operation,
/// };
///
/// let here = OpenCaptures {
///     here: ModeCounts { thread_local: 1, ..ModeCounts::default() },
///     ..OpenCaptures::default()
/// };
/// let Err(CaptureError::OtherCapture { thread, .. }) =
///     decide(Operation::Alloc, CaptureStatus::None, &here)
/// else {
///     panic!("a thread-local capture on this thread forbids an allocation here");
/// };
/// assert_eq!(thread, CaptureThread::This);
/// ```
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
///
/// ```
/// use gpu_test_permit::capture::{CaptureError, DriverCall, Operation};
///
/// // A checked call the guard let through, and the driver failed.
/// fn failed_call(e: &CaptureError) -> Option<DriverCall> {
///     match e {
///         CaptureError::Driver { call, .. } => Some(*call),
///         _ => None,
///     }
/// }
/// assert_eq!(failed_call(&CaptureError::ImplicitCapture { op: Operation::Alloc }), None);
/// assert_ne!(DriverCall::Op(Operation::Alloc), DriverCall::BeginCapture);
/// ```
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
///
/// ```
/// use gpu_test_permit::capture::{decide, CaptureError, CaptureStatus, OpenCaptures, Operation};
///
/// // The stream is capturing: an allocation would break the capture (or hang), so it is refused.
/// let e = decide(Operation::Alloc, CaptureStatus::Active, &OpenCaptures::default()).unwrap_err();
/// assert_eq!(e, CaptureError::Capturing { status: CaptureStatus::Active, op: Operation::Alloc });
/// println!("{e}");
/// ```
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
    /// A capture begun through [`CaptureScope`](super::CaptureScope) forbids `op` on this
    /// thread: a global-mode capture on any thread, a thread-local one on this thread, or (for
    /// context synchronize) any capture at all.
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

/// A driver failure of `call` as a [`CaptureError::Driver`], by its code alone.
pub(super) fn through<T>(
    call: DriverCall,
    result: Result<T, DriverError>,
) -> Result<T, CaptureError> {
    match result {
        Ok(value) => Ok(value),
        Err(e) => Err(CaptureError::Driver {
            call,
            code: e.into(),
        }),
    }
}
