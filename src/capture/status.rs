//! What the guard is asked about: the stream's [`CaptureStatus`], the [`CaptureMode`] of a
//! capture, and the [`Operation`] about to run.

use std::fmt;

use cudarc::driver::sys::{CUstreamCaptureMode, CUstreamCaptureStatus};

/// Whether a stream is capturing a CUDA graph (`CUstreamCaptureStatus`).
///
/// ```
/// use gpu_test_permit::capture::CaptureStatus;
///
/// // What `capture_status(&stream)` returns outside a capture, and without a CUDA driver.
/// let status = CaptureStatus::None;
/// assert!(!status.is_capturing());
/// assert_eq!(CaptureStatus::Active.to_string(), "ACTIVE");
/// ```
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

/// The capture mode of [`CaptureScope`](super::CaptureScope) (`CUstreamCaptureMode`): who else
/// is forbidden potentially unsafe calls (`cuMemAlloc`, synchronous copies, synchronize) while
/// it is open.
///
/// ```
/// use gpu_test_permit::capture::CaptureMode;
///
/// assert_eq!(CaptureMode::default(), CaptureMode::Global);
/// assert_eq!(CaptureMode::ThreadLocal.to_string(), "thread-local");
/// ```
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
    /// The slot of this mode in the registry's per-mode counters.
    pub(super) fn index(self) -> usize {
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
///
/// ```
/// use gpu_test_permit::capture::{decide, CaptureStatus, OpenCaptures, Operation};
///
/// // Ask before an operation the guard has no checked call for.
/// let op = Operation::Other("cuMemcpyHtoD");
/// assert!(decide(op, CaptureStatus::Active, &OpenCaptures::default()).is_err());
/// assert!(decide(op, CaptureStatus::None, &OpenCaptures::default()).is_ok());
/// ```
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
    pub(super) fn is_potentially_unsafe(self) -> bool {
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
