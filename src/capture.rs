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
//!   [`CaptureStatus::None`]; CPU-only machines run the same code. (A
//!   [`CudaStream`](cudarc::driver::CudaStream) cannot exist without a driver.)
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

mod checked;
mod error;
mod registry;
mod rule;
mod scope;
mod status;

pub use self::checked::{
    CheckedStream, capture_status, ensure_not_capturing, ensure_raw_not_capturing,
    raw_capture_status,
};
pub use self::error::{CaptureError, CaptureThread, DriverCall};
pub use self::rule::{ModeCounts, OpenCaptures, decide};
pub use self::scope::{CaptureScope, Captured};
pub use self::status::{CaptureMode, CaptureStatus, Operation};
pub use crate::cuda_codes::DriverCode;
