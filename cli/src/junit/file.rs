//! The report read, and the output written, without harm to either.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::JunitError;
use super::error::{Failure, io_error};

/// A report opened for a pass: its byte order mark, which quick-xml skips without counting
/// it in its positions, apart.
pub(super) struct Input<R> {
    pub(super) bom: u64,
    pub(super) bom_bytes: Vec<u8>,
    pub(super) rest: io::Chain<io::Cursor<Vec<u8>>, R>,
}

pub(super) const BOM: &[u8] = b"\xef\xbb\xbf";

/// Opens the report with `open` and takes its byte order mark off.
pub(super) fn read_input<R: Read>(open: impl Fn() -> io::Result<R>) -> Result<Input<R>, Failure> {
    let mut r = open().map_err(Failure::read)?;
    let mut head = Vec::with_capacity(3);
    (&mut r)
        .take(3)
        .read_to_end(&mut head)
        .map_err(Failure::read)?;
    let (bom_bytes, head) = if head == BOM {
        (head, Vec::new())
    } else {
        (Vec::new(), head)
    };
    Ok(Input {
        bom: bom_bytes.len() as u64,
        bom_bytes,
        rest: io::Cursor::new(head).chain(r),
    })
}

/// A reader that keeps what it reads, from byte `base` on, until told to forget it: the
/// second pass copies the report's bytes through from here, so that they stay as they were.
pub(super) struct Tee<R> {
    pub(super) inner: R,
    pub(super) seen: Vec<u8>,
    pub(super) base: u64,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl<R> Tee<R> {
    /// Bytes `start..end` of the report (read, and not forgotten).
    pub(super) fn slice(&self, start: u64, end: u64) -> &[u8] {
        &self.seen[(start - self.base) as usize..(end - self.base) as usize]
    }

    /// Writes bytes `start..end` of the report to `out`.
    pub(super) fn copy(&self, out: &mut impl Write, start: u64, end: u64) -> io::Result<()> {
        out.write_all(self.slice(start, end))
    }

    /// Forgets the bytes before `upto`, once they are many.
    pub(super) fn forget(&mut self, upto: u64) {
        let n = (upto - self.base) as usize;
        if n >= 1 << 16 {
            self.seen.drain(..n);
            self.base = upto;
        }
    }
}

/// Whether `a` and `b` name the same file.
pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The temporary file beside the output, removed unless renamed over it.
pub(super) struct TempFile {
    pub(super) path: PathBuf,
    pub(super) file: Option<File>,
    pub(super) renamed: bool,
}

impl TempFile {
    /// Creates `.<name>.<pid>.<n>.tmp` in `target`'s directory.
    pub(super) fn beside(target: &Path) -> Result<TempFile, JunitError> {
        let name = target.file_name().ok_or_else(|| {
            io_error(
                target,
                "write",
                io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            )
        })?;
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let pid = std::process::id();
        let mut n = 0;
        loop {
            let path = dir.join(format!(".{}.{pid}.{n}.tmp", name.to_string_lossy()));
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    return Ok(TempFile {
                        path,
                        file: Some(file),
                        renamed: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => return Err(io_error(&path, "create", e)),
            }
        }
    }

    pub(super) fn file(&self) -> &File {
        self.file.as_ref().expect("open until renamed")
    }

    /// Closes the file and renames it to `target`.
    pub(super) fn rename_to(mut self, target: &Path) -> Result<(), JunitError> {
        drop(self.file.take());
        fs::rename(&self.path, target).map_err(|e| {
            io_error(
                target,
                "replace",
                io::Error::new(
                    e.kind(),
                    format!("renaming {} over it: {e}", self.path.display()),
                ),
            )
        })?;
        self.renamed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            drop(self.file.take());
            let _ = fs::remove_file(&self.path);
        }
    }
}
