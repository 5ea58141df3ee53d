//! Driver libraries loaded at run time for the probes of `cuda` and `vulkan`: the first of a
//! list of names the dynamic loader finds, and its entry points by name, each a typed function
//! pointer or an error that names the missing symbol.

use std::ffi::{CStr, c_void};

use super::outcome::ProbeOutcome;
use crate::sys::Library;

/// The first of `names` that loads, with the name it loaded under.
pub(super) fn open_first(names: &[&'static CStr]) -> Option<(Library, &'static CStr)> {
    for &name in names {
        if let Some(lib) = Library::open(name) {
            return Some((lib, name));
        }
    }
    None
}

/// The names, for messages: `libcuda.so.1, libcuda.so`.
pub(super) fn listed(names: &[&CStr]) -> String {
    let mut list = String::new();
    let mut sep = "";
    for n in names {
        list.push_str(sep);
        list.push_str(&n.to_string_lossy());
        sep = ", ";
    }
    list
}

/// `symbol` of `library` as the function pointer type `F`; `None` when the library lacks it.
///
/// # Safety
///
/// `F` must be the `unsafe extern "system" fn` type of the C function `symbol` names.
pub(super) unsafe fn function<F: Copy>(library: &Library, symbol: &CStr) -> Option<F> {
    let address = address(library, symbol)?;
    // SAFETY: passed on from the caller.
    Some(unsafe { as_function(address) })
}

/// [`function`], or the probe's error naming the missing `symbol` of `library_name`.
///
/// # Safety
///
/// As for [`function`].
pub(super) unsafe fn required<F: Copy>(
    library: &Library,
    library_name: &CStr,
    symbol: &CStr,
) -> Result<F, ProbeOutcome> {
    match address(library, symbol) {
        // SAFETY: passed on from the caller.
        Some(address) => Ok(unsafe { as_function(address) }),
        None => Err(missing(library_name, symbol)),
    }
}

/// The address of `symbol` in `library`, not null; `None` when the library lacks it.
fn address(library: &Library, symbol: &CStr) -> Option<*mut c_void> {
    Some(library.symbol(symbol)?.as_ptr())
}

/// The entry point at `address` as the function pointer type `F`.
///
/// # Safety
///
/// `address` is non-null and the entry point of a C function whose `unsafe extern "system" fn`
/// type is `F`.
pub(super) unsafe fn as_function<F: Copy>(address: *mut c_void) -> F {
    // A function pointer, not some other type of another size.
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: the caller promises that `F` is the function pointer type of the entry point at
    // `address`, which has the size of a pointer (checked above).
    unsafe { *(&raw const address as *const F) }
}

/// The probe's error for entry point `symbol` missing from `library_name`.
fn missing(library_name: &CStr, symbol: &CStr) -> ProbeOutcome {
    ProbeOutcome::Error {
        detail: format!(
            "{} has no entry point {}: not a driver library this probe understands",
            library_name.to_string_lossy(),
            symbol.to_string_lossy()
        ),
    }
}

/// The text of a NUL-terminated C string in `buffer`, or of all of it when it has no NUL.
pub(super) fn text(buffer: &[u8]) -> String {
    match CStr::from_bytes_until_nul(buffer) {
        Ok(s) => s.to_string_lossy().trim().to_string(),
        Err(_) => String::from_utf8_lossy(buffer).trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stops_at_the_first_nul_and_survives_none() {
        assert_eq!(text(b"llvmpipe\0junk"), "llvmpipe");
        assert_eq!(text(b"no nul"), "no nul");
        assert_eq!(text(b"\0"), "");
    }

    #[test]
    fn a_library_that_is_not_there_does_not_load() {
        assert!(open_first(&[c"libgpu-test-permit-no-such-library.so.7"]).is_none());
        assert_eq!(listed(&[c"a.so.1", c"a.so"]), "a.so.1, a.so");
    }
}
