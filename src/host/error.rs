//! Why host slots could not be used.

use std::io;
use std::path::{Path, PathBuf};

/// Why host slots could not be used.
///
/// ```
/// use gpu_test_permit::{host::HostError, PermitPool};
///
/// // A slot directory that is a file: refused with a message that says what to do.
/// let file = std::env::temp_dir().join(format!("gtp-doc-host-error-{}", std::process::id()));
/// std::fs::write(&file, "not a directory").unwrap();
/// match PermitPool::builder().slot_dir(&file).build() {
///     Err(e @ (HostError::Directory(_) | HostError::Io { .. })) => println!("{e}"),
///     other => panic!("{other:?}"),
/// }
/// std::fs::remove_file(&file).unwrap();
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum HostError {
    /// The slot directory is missing, insecure or unusable; the message says what to do.
    Directory(String),
    /// A slot file could not be opened or locked.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The process may not open enough files for the slots; the message says what to change.
    Descriptors(String),
    /// A permit inherited from a parent process (`gpu-test-permit run`) is held but cannot
    /// be used here; the message says why and what to change.
    Inherited(String),
    /// The process is a child forked (without `exec`) from the process that opened the
    /// slots: it shares that process's open files, and with them its locks, so it takes no
    /// permit of its own; the message says what to do instead.
    Forked(String),
}

impl Clone for HostError {
    /// An I/O error is copied by its kind, OS error code and message.
    fn clone(&self) -> HostError {
        match self {
            HostError::Directory(m) => HostError::Directory(m.clone()),
            HostError::Descriptors(m) => HostError::Descriptors(m.clone()),
            HostError::Inherited(m) => HostError::Inherited(m.clone()),
            HostError::Forked(m) => HostError::Forked(m.clone()),
            HostError::Io { path, error } => HostError::Io {
                path: path.clone(),
                error: match error.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(error.kind(), error.to_string()),
                },
            },
        }
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Directory(msg)
            | HostError::Descriptors(msg)
            | HostError::Inherited(msg)
            | HostError::Forked(msg) => write!(f, "{msg}"),
            HostError::Io { path, error } => write!(
                f,
                "cannot use slot file {}: {error}; check the slot directory or set \
                 GPU_TEST_PERMIT_DIR",
                path.display()
            ),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Io { error, .. } => Some(error),
            HostError::Directory(_)
            | HostError::Descriptors(_)
            | HostError::Inherited(_)
            | HostError::Forked(_) => None,
        }
    }
}

/// `error`, met using slot file `path`.
pub(super) fn io_err(path: &Path, error: io::Error) -> HostError {
    HostError::Io {
        path: path.to_path_buf(),
        error,
    }
}
