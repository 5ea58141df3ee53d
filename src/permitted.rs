//! [`Permitted<T>`]: any value that needs the GPU, built after its permit and dropped before it.

use std::fmt;
use std::ops::{Deref, DerefMut};

use crate::permit::{AcquireError, GpuTestPermit, PermitPool};

/// A value of type `T` together with the GPU permit it was built under.
///
/// The permit is taken first, then `T` is built; on drop `T` goes first (its fields are declared
/// in that order, and Rust drops fields in declaration order), then the permit. That is the
/// whole recipe for a fixture type of your own: acquire before creating any GPU object, and keep
/// the permit as the last field.
///
/// # Examples
///
/// ```
/// use gpu_test_permit::Permitted;
///
/// struct Context { buffers: Vec<u32> } // stands for a CUDA context or wgpu device
///
/// let ctx = Permitted::new(|| Context { buffers: vec![1, 2, 3] });
/// assert_eq!(ctx.buffers.len(), 3); // derefs to the value
/// assert!(!ctx.permit().is_exclusive());
/// // dropping `ctx` drops the Context, then returns the permit
/// ```
///
/// A fixture that needs more of the GPU than an ordinary test takes a larger permit
/// ([`acquire_weighted`](crate::acquire_weighted), [`acquire_memory`](crate::acquire_memory)):
///
/// ```standalone_crate
/// use gpu_test_permit::Permitted;
///
/// # // SAFETY: the example's process has one thread at this point.
/// # unsafe { std::env::set_var("REALIZAR_GPU_TEST_CONCURRENCY", "4") };
/// # let dir = std::env::temp_dir().join(format!("gtp-doc-permitted-{}", std::process::id()));
/// # unsafe { std::env::set_var("GPU_TEST_PERMIT_DIR", &dir) };
/// let big = Permitted::with_permit(gpu_test_permit::acquire_weighted(2), || vec![0u8; 1 << 20]);
/// assert_eq!(big.permit().units(), 2);
/// // Or by memory: units of the budget GPU_TEST_PERMIT_GPU_MEMORY sets.
/// drop(big);
/// let big = Permitted::with_permit(gpu_test_permit::acquire_memory(6 << 30), || ());
/// assert_eq!(big.permit().memory(), Some(6 << 30));
/// # drop(big); std::fs::remove_dir_all(&dir).ok();
/// ```
///
/// The same for a fixture of your own, written out:
///
/// ```
/// struct MyFixture {
///     device: Vec<u8>,                             // GPU objects first...
///     _permit: gpu_test_permit::GpuTestPermit,     // ...the permit last
/// }
/// let _permit = gpu_test_permit::acquire();        // before any GPU object
/// let fixture = MyFixture { device: vec![0; 16], _permit };
/// ```
pub struct Permitted<T> {
    // Field order is drop order: the value must go before the permit.
    value: T,
    permit: GpuTestPermit,
}

impl<T> Permitted<T> {
    /// Takes a permit from the global pool ([`crate::acquire`]), then builds the value.
    ///
    /// # Panics
    ///
    /// As [`crate::acquire`].
    ///
    /// ```
    /// use gpu_test_permit::Permitted;
    ///
    /// // A user fixture: built after the permit, dropped before it.
    /// let buffers = Permitted::new(|| vec![0f32; 1024]);
    /// assert_eq!(buffers.len(), 1024);
    /// ```
    pub fn new(build: impl FnOnce() -> T) -> Permitted<T> {
        Permitted::with_permit(crate::permit::acquire(), build)
    }

    /// Takes an exclusive permit ([`crate::acquire_exclusive`]), then builds the value.
    ///
    /// # Panics
    ///
    /// As [`crate::acquire_exclusive`].
    ///
    /// ```
    /// use gpu_test_permit::Permitted;
    ///
    /// let profiler = Permitted::new_exclusive(|| "nothing else runs on the GPU");
    /// assert!(profiler.permit().is_exclusive());
    /// ```
    pub fn new_exclusive(build: impl FnOnce() -> T) -> Permitted<T> {
        Permitted::with_permit(crate::permit::acquire_exclusive(), build)
    }

    /// Builds the value under an existing permit.
    ///
    /// ```
    /// use gpu_test_permit::{Permitted, PermitPool};
    ///
    /// let pool = PermitPool::builder().concurrency(4).in_process_only().build()?;
    /// let big = Permitted::with_permit(pool.acquire_weighted(2), || vec![0u8; 64]);
    /// assert_eq!(big.permit().units(), 2);
    /// # Ok::<(), gpu_test_permit::host::HostError>(())
    /// ```
    pub fn with_permit(permit: GpuTestPermit, build: impl FnOnce() -> T) -> Permitted<T> {
        Permitted {
            value: build(),
            permit,
        }
    }

    /// Takes a permit from `pool`, then builds the value with a fallible constructor; on error
    /// the permit is returned at once.
    ///
    /// # Errors
    ///
    /// The constructor's error, or the pool's [`AcquireError`] converted into `E`.
    ///
    /// ```
    /// use gpu_test_permit::{AcquireError, Permitted, PermitPool};
    ///
    /// #[derive(Debug)]
    /// enum SetupError {
    ///     Permit(AcquireError),
    ///     Device(String),
    /// }
    /// impl From<AcquireError> for SetupError {
    ///     fn from(e: AcquireError) -> Self {
    ///         SetupError::Permit(e)
    ///     }
    /// }
    /// let pool = PermitPool::builder().concurrency(2).in_process_only().build().unwrap();
    /// let ok = Permitted::try_new_in(&pool, || Ok::<_, SetupError>("device"));
    /// assert_eq!(*ok.unwrap(), "device");
    /// let failed = Permitted::<&str>::try_new_in(&pool, || Err(SetupError::Device("lost".into())));
    /// assert!(matches!(failed, Err(SetupError::Device(_)))); // and the permit is back
    /// ```
    pub fn try_new_in<E: From<AcquireError>>(
        pool: &PermitPool,
        build: impl FnOnce() -> Result<T, E>,
    ) -> Result<Permitted<T>, E> {
        let permit = pool.try_acquire_for(pool.timeout())?;
        Ok(Permitted {
            value: build()?,
            permit,
        })
    }

    /// The permit.
    ///
    /// ```
    /// use gpu_test_permit::Permitted;
    ///
    /// let fixture = Permitted::new(|| ());
    /// assert_eq!(fixture.permit().units(), 1);
    /// ```
    pub fn permit(&self) -> &GpuTestPermit {
        &self.permit
    }

    /// Splits into the value and its permit; the caller now keeps the drop order.
    ///
    /// ```
    /// use gpu_test_permit::Permitted;
    ///
    /// let (buffers, permit) = Permitted::new(|| vec![1u8, 2, 3]).into_parts();
    /// drop(buffers); // GPU objects first
    /// drop(permit); // then the permit
    /// ```
    pub fn into_parts(self) -> (T, GpuTestPermit) {
        (self.value, self.permit)
    }
}

impl<T> Deref for Permitted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for Permitted<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Permitted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permitted")
            .field("value", &self.value)
            .field("permit", &self.permit)
            .finish()
    }
}
