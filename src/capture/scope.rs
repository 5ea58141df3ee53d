//! [`CaptureScope`]: begin a capture, run a closure, always end the capture, and keep it in the
//! registry while it is open.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{CudaGraph, CudaStream, result, sys};

use super::error::through;
use super::registry::Registration;
use super::{CaptureError, CaptureMode, DriverCall, Operation, ensure_not_capturing};

/// A capture that [`CaptureScope::run`] ended normally: the instantiated graph (if the
/// driver returned one) and the closure's value.
///
/// ```no_run
/// // Needs a CUDA GPU and driver: a capture runs on a real stream.
/// use gpu_test_permit::capture::CaptureScope;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
/// let captured = CaptureScope::new(&stream).run(|_s| Ok::<_, Box<dyn std::error::Error>>(42))?;
/// assert_eq!(captured.value, 42);
/// if let Some(graph) = captured.graph {
///     graph.launch()?;
/// }
/// # Ok(()) }
/// ```
pub struct Captured<R> {
    /// The captured, instantiated graph; `None` if the driver returned no graph.
    pub graph: Option<CudaGraph>,
    /// What the closure returned.
    pub value: R,
}

impl<R: fmt::Debug> fmt::Debug for Captured<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured")
            .field("graph", &self.graph.is_some().then_some("CudaGraph"))
            .field("value", &self.value)
            .finish()
    }
}

/// Begin a capture, run a closure, and always end the capture — when the closure returns an
/// error or panics too — so a stream is never left capturing.
///
/// While it runs, the capture is recorded process-wide: [`ensure_not_capturing`] and the
/// [`CheckedStream`](super::CheckedStream) calls on *any* stream refuse what its mode forbids
/// (see [`decide`](super::decide)). Captures begun directly through cudarc are seen only by the
/// per-stream query.
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
    ///
    /// ```no_run
    /// // Needs a CUDA GPU and driver.
    /// use gpu_test_permit::capture::{CaptureMode, CaptureScope};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
    /// let scope = CaptureScope::new(&stream); // global mode, default flags
    /// let captured = scope.run(|_s| Ok::<_, Box<dyn std::error::Error>>(()))?;
    /// assert!(captured.graph.is_some());
    /// # Ok(()) }
    /// ```
    pub fn new(stream: &'s Arc<CudaStream>) -> Self {
        CaptureScope {
            stream,
            mode: CaptureMode::Global,
            flags: sys::CUgraphInstantiate_flags(0),
        }
    }

    /// The capture mode.
    ///
    /// ```no_run
    /// // Needs a CUDA GPU and driver.
    /// use gpu_test_permit::capture::{CaptureMode, CaptureScope};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
    /// // Other threads may allocate meanwhile; this one may not.
    /// let scope = CaptureScope::new(&stream).mode(CaptureMode::ThreadLocal);
    /// # let _ = scope; Ok(()) }
    /// ```
    pub fn mode(mut self, mode: CaptureMode) -> Self {
        self.mode = mode;
        self
    }

    /// The flags for `cuGraphInstantiate` when the capture ends.
    ///
    /// ```no_run
    /// // Needs a CUDA GPU and driver.
    /// use gpu_test_permit::capture::{CaptureMode, CaptureScope};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
    /// use cudarc::driver::sys::CUgraphInstantiate_flags;
    /// let scope = CaptureScope::new(&stream)
    ///     .instantiate_flags(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    /// # let _ = scope; Ok(()) }
    /// ```
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
    ///
    /// ```no_run
    /// // Needs a CUDA GPU and driver.
    /// use gpu_test_permit::capture::{CaptureMode, CaptureScope};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let stream = cudarc::driver::CudaContext::new(0)?.new_stream()?;
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// let captured = CaptureScope::new(&stream).run(|s| {
    ///     // Refused with a typed error: the capture is ended, its graph destroyed.
    ///     let _x = s.checked_alloc_zeros::<f32>(256)?;
    ///     Ok::<_, Box<dyn std::error::Error>>(())
    /// });
    /// assert!(captured.is_err());
    /// # Ok(()) }
    /// ```
    pub fn run<R, E, F>(self, f: F) -> Result<Captured<R>, E>
    where
        F: FnOnce(&Arc<CudaStream>) -> Result<R, E>,
        E: From<CaptureError>,
    {
        let stream = self.stream;
        ensure_not_capturing(stream, Operation::BeginCapture)?;
        through(
            DriverCall::BeginCapture,
            stream.begin_capture(self.mode.into()),
        )?;
        let mut open = OpenCapture::begun(stream, self.mode);
        let value = f(stream)?; // on error (or panic) `open` ends the capture as it drops
        open.ended = true;
        let graph = through(DriverCall::EndCapture, stream.end_capture(self.flags))?;
        Ok(Captured { graph, value })
    }
}

/// A capture begun by [`CaptureScope::run`]: counted in the registry while it lives, and
/// ended on drop unless `run` ended it.
struct OpenCapture<'s> {
    stream: &'s CudaStream,
    ended: bool,
    // Dropped after `drop` has ended the capture: the registry never under-counts.
    _registration: Registration,
}

impl<'s> OpenCapture<'s> {
    /// Records a capture that `stream` has just begun in `mode`.
    fn begun(stream: &'s CudaStream, mode: CaptureMode) -> Self {
        OpenCapture {
            stream,
            ended: false,
            _registration: Registration::register(mode),
        }
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // The closure failed or panicked: end the capture so the stream is usable again,
            // and drop whatever graph it produced. Errors here have nowhere better to go.
            let _ = self.stream.context().bind_to_thread();
            // SAFETY: the stream is alive (borrowed) and capturing since `begun`.
            if let Ok(graph) = unsafe { result::stream::end_capture(self.stream.cu_stream()) }
                && !graph.is_null()
            {
                // SAFETY: the graph was just returned to us and is owned by nobody else.
                let _ = unsafe { result::graph::destroy(graph) };
            }
        }
    }
}
