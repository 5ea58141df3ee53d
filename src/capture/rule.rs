//! The guard's rule as a pure function, [`decide`], and its input: what is open where,
//! [`OpenCaptures`].

use super::{CaptureError, CaptureMode, CaptureStatus, CaptureThread, Operation};

/// Captures open through [`CaptureScope`](super::CaptureScope), per mode, as seen from the
/// calling thread.
///
/// ```
/// use gpu_test_permit::capture::{decide, CaptureStatus, ModeCounts, OpenCaptures, Operation};
///
/// // A relaxed capture on another thread forbids only a context synchronize.
/// let open = OpenCaptures {
///     elsewhere: ModeCounts { relaxed: 1, ..ModeCounts::default() },
///     ..OpenCaptures::default()
/// };
/// assert!(decide(Operation::Alloc, CaptureStatus::None, &open).is_ok());
/// assert!(decide(Operation::ContextSynchronize, CaptureStatus::None, &open).is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenCaptures {
    /// Captures open on the calling thread.
    pub here: ModeCounts,
    /// Captures open on other threads of this process.
    pub elsewhere: ModeCounts,
}

/// Numbers of open captures per [`CaptureMode`].
///
/// ```
/// use gpu_test_permit::capture::ModeCounts;
///
/// let counts = ModeCounts { global: 1, ..ModeCounts::default() };
/// assert_eq!((counts.global, counts.thread_local, counts.relaxed), (1, 0, 0));
/// ```
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
