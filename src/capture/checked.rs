//! The checks at the call: the status queries, [`ensure_not_capturing`], and the checked
//! cudarc calls of [`CheckedStream`].

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUstream};
use cudarc::driver::{
    CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, HostSlice, ValidAsZeroBits, result,
};

use super::error::through;
use super::{
    CaptureError, CaptureStatus, DriverCall, DriverCode, OpenCaptures, Operation, decide, registry,
};

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
    status_of(stream.capture_status())
}

/// A capture status query's answer, as [`CaptureStatus`] or the driver's code.
fn status_of(
    answer: Result<sys::CUstreamCaptureStatus, cudarc::driver::DriverError>,
) -> Result<CaptureStatus, DriverCode> {
    match answer {
        Ok(raw) => Ok(CaptureStatus::from_raw(raw)),
        Err(e) => Err(DriverCode::from(e)),
    }
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
    status_of(unsafe { result::stream::is_capturing(stream) })
}

#[inline]
fn check(op: Operation, status: Result<CaptureStatus, DriverCode>) -> Result<(), CaptureError> {
    match status {
        // The common case: not capturing, no scope open anywhere. Keeps the guard within a
        // few percent of the bare query.
        Ok(CaptureStatus::None) if !registry::any_open() => Ok(()),
        Ok(status) => decide(op, status, &OpenCaptures::current()),
        Err(DriverCode::STREAM_CAPTURE_IMPLICIT) => Err(CaptureError::ImplicitCapture { op }),
        Err(code) => Err(CaptureError::StatusQuery { op, code }),
    }
}

/// `Ok(())` if `op` may run on `stream` now; otherwise the reason, without running anything.
///
/// Refuses while the stream captures (or its capture is invalidated), while a
/// [`CaptureScope`](super::CaptureScope) capture elsewhere forbids `op` (see [`decide`]), and
/// when the status cannot be read.
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
///
/// ```
/// use gpu_test_permit::capture::{ensure_raw_not_capturing, Operation};
///
/// // The legacy default stream (null). Without a CUDA driver the answer is `Ok(())`; with one,
/// // a failed status query is an error, never "safe".
/// // SAFETY: the null stream is the legacy default stream, valid in every context.
/// match unsafe { ensure_raw_not_capturing(std::ptr::null_mut(), Operation::HostToDevice) } {
///     Ok(()) => {}
///     Err(e) => eprintln!("refused: {e}"),
/// }
/// ```
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
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     // SAFETY: written before it is read.
    ///     let mut out = unsafe { s.checked_alloc::<f32>(4) }.unwrap();
    ///     s.checked_memcpy_htod(&[1.0f32; 4], &mut out).unwrap();
    /// }
    /// ```
    unsafe fn checked_alloc<T: DeviceRepr>(&self, len: usize)
    -> Result<CudaSlice<T>, CaptureError>;

    /// Checked `CudaStream::alloc_zeros`.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::AllocZeros`], or [`CaptureError::Driver`].
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     let zeros = s.checked_alloc_zeros::<u32>(256).unwrap();
    ///     assert_eq!(zeros.len(), 256);
    /// }
    /// ```
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
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     let x = s.checked_clone_htod(&[1u8, 2, 3]).unwrap();
    ///     assert_eq!(x.len(), 3);
    /// }
    /// ```
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
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     let mut dst = s.checked_alloc_zeros::<f32>(2).unwrap();
    ///     s.checked_memcpy_htod(&[0.5f32, 1.5], &mut dst).unwrap();
    /// }
    /// ```
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
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     s.checked_synchronize().unwrap();
    /// }
    /// ```
    fn checked_synchronize(&self) -> Result<(), CaptureError>;

    /// Checked `CudaContext::synchronize` of the stream's context.
    ///
    /// # Errors
    ///
    /// As [`ensure_not_capturing`] with [`Operation::ContextSynchronize`], or
    /// [`CaptureError::Driver`].
    ///
    /// ```
    /// // Runs anywhere: without a CUDA device the fixture skips.
    /// use gpu_test_permit::capture::CheckedStream;
    ///
    /// if let Ok(gpu) = gpu_test_permit::cuda::context() {
    ///     let s = gpu.stream();
    ///     s.checked_context_synchronize().unwrap();
    /// }
    /// ```
    fn checked_context_synchronize(&self) -> Result<(), CaptureError>;
}

impl CheckedStream for Arc<CudaStream> {
    unsafe fn checked_alloc<T: DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::Alloc)?;
        // SAFETY: forwarded to the caller (uninitialized memory).
        through(DriverCall::Op(Operation::Alloc), unsafe { self.alloc(len) })
    }

    fn checked_alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::AllocZeros)?;
        through(DriverCall::Op(Operation::AllocZeros), self.alloc_zeros(len))
    }

    fn checked_clone_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        &self,
        src: &Src,
    ) -> Result<CudaSlice<T>, CaptureError> {
        ensure_not_capturing(self, Operation::HostToDevice)?;
        through(
            DriverCall::Op(Operation::HostToDevice),
            self.clone_htod(src),
        )
    }

    fn checked_memcpy_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::HostToDevice)?;
        through(
            DriverCall::Op(Operation::HostToDevice),
            self.memcpy_htod(src, dst),
        )
    }

    fn checked_synchronize(&self) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::StreamSynchronize)?;
        through(
            DriverCall::Op(Operation::StreamSynchronize),
            self.synchronize(),
        )
    }

    fn checked_context_synchronize(&self) -> Result<(), CaptureError> {
        ensure_not_capturing(self, Operation::ContextSynchronize)?;
        through(
            DriverCall::Op(Operation::ContextSynchronize),
            self.context().synchronize(),
        )
    }
}
