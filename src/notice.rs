//! Lines for the user on standard error. Written to the `std::io::stderr()` handle, not with
//! `eprintln!`: libtest (`cargo test`) captures the macros' output of a passing test and shows
//! it only for failures, so a skip, a fallback or a configuration problem would go unseen.
//! (nextest captures whole processes: it shows these lines with failures, or with
//! `--success-output`.)

use std::io::Write;

/// Writes `line` and a newline to standard error in one write, prefixed with the crate's name.
pub(crate) fn line(line: &str) {
    text(&format!("gpu-test-permit: {line}\n"));
}

/// Writes `text` as it is (it names the crate itself, as the greppable skip line does).
pub(crate) fn text(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
