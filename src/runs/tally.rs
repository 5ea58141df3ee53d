//! This process's GPU tests and skips, for the line a test binary prints at exit under
//! `cargo test`: libtest counts a test that skipped at run time as passed, so the binary says
//! what its own summary cannot, once, after that summary, on the real standard error:
//!
//! ```text
//! gpu-test-permit: 3 of 40 GPU tests skipped in this binary (backend=cuda: CUDA is not installed)
//! ```
//!
//! A GPU test is one that asked [`require_backend!`](crate::require_backend) or a fixture, or
//! took a permit. Under `cargo nextest` (one test a process) the line is not printed: the run
//! records the skips instead (see [`runs`](crate::__private::runs)), for `gpu-test-permit junit` and `report`.

use crate::order::SortedMap;
use std::sync::Once;

/// Per test name: the skip reason, if it skipped.
static TESTS: parking_lot::Mutex<SortedMap<String, Option<String>>> =
    parking_lot::Mutex::new(SortedMap::new());

/// The counts so far: GPU tests, and the skips with their reasons in the order first seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// GPU tests seen in this process.
    pub gpu_tests: usize,
    /// Tests that skipped.
    pub skipped: usize,
    /// Distinct skip reasons (`backend=<b>: <reason>`) with their counts, most frequent first.
    pub reasons: Vec<(String, usize)>,
}

/// Counts `test` as a GPU test of this process.
pub(crate) fn gpu_test(test: &str) {
    let mut tests = TESTS.lock();
    if !tests.contains_key(test) {
        tests.insert(test.to_string(), None);
        drop(tests);
        at_exit();
    }
}

/// Counts `test` as skipped, for `reason` (`backend=<b>: <reason>`).
pub(crate) fn skipped(test: &str, reason: String) {
    TESTS.lock().insert(test.to_string(), Some(reason));
    at_exit();
}

/// This process's tally so far.
pub fn tally() -> Tally {
    let tests = TESTS.lock();
    let mut reasons: Vec<(String, usize)> = Vec::new();
    let mut skipped = 0;
    for reason in tests.values() {
        let Some(reason) = reason else {
            continue;
        };
        skipped += 1;
        count_reason(&mut reasons, reason);
    }
    // The most common first.
    crate::order::sort_by(&mut reasons, |a, b| b.1.cmp(&a.1));
    Tally {
        gpu_tests: tests.len(),
        skipped,
        reasons,
    }
}

/// Counts one skip for `reason` in `reasons`.
fn count_reason(reasons: &mut Vec<(String, usize)>, reason: &str) {
    for (r, n) in reasons.iter_mut() {
        if r == reason {
            *n += 1;
            return;
        }
    }
    reasons.push((reason.to_string(), 1));
}

/// The exit line for `t`, or `None` when nothing skipped.
pub fn exit_line(t: &Tally) -> Option<String> {
    if t.skipped == 0 {
        return None;
    }
    const SHOWN: usize = 3;
    let mut why: Vec<String> = Vec::new();
    for (r, n) in &t.reasons[..t.reasons.len().min(SHOWN)] {
        let r = crate::one_line(r);
        if t.reasons.len() == 1 {
            why.push(r);
        } else {
            why.push(format!("{n} x {r}"));
        }
    }
    if t.reasons.len() > SHOWN {
        why.push(format!("{} other reasons", t.reasons.len() - SHOWN));
    }
    Some(format!(
        "gpu-test-permit: {} of {} GPU test{} skipped in this binary ({})",
        t.skipped,
        t.gpu_tests,
        if t.gpu_tests == 1 { "" } else { "s" },
        crate::joined(&why, "; ")
    ))
}

/// Registers the exit line's printer, once; not under nextest, whose run records the skips.
fn at_exit() {
    static REGISTER: Once = Once::new();
    // As a function pointer, as the records' flush at exit is registered: one instantiation.
    REGISTER.call_once(register_print as fn());
}

/// Registers the exit line's printer, unless under nextest.
fn register_print() {
    if crate::config::Config::global().nextest.is_some() {
        return;
    }
    crate::sys::at_exit(print_at_exit);
}

extern "C" fn print_at_exit() {
    // Runs after `main` (libtest's summary printed); nothing here may unwind into C.
    let _ = std::panic::catch_unwind(|| {
        if let Some(line) = exit_line(&tally()) {
            crate::notice::text(&format!("{line}\n"));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_line_counts_skips_and_names_their_reasons() {
        let one = Tally {
            gpu_tests: 40,
            skipped: 3,
            reasons: vec![("backend=cuda: not installed".into(), 3)],
        };
        assert_eq!(
            exit_line(&one).unwrap(),
            "gpu-test-permit: 3 of 40 GPU tests skipped in this binary (backend=cuda: not \
             installed)"
        );
        let many = Tally {
            gpu_tests: 9,
            skipped: 6,
            reasons: (1..=4)
                .map(|i| (format!("backend=wgpu: r{i}"), 5 - i))
                .collect(),
        };
        assert_eq!(
            exit_line(&many).unwrap(),
            "gpu-test-permit: 6 of 9 GPU tests skipped in this binary (4 x backend=wgpu: r1; \
             3 x backend=wgpu: r2; 2 x backend=wgpu: r3; 1 other reasons)"
        );
        assert_eq!(exit_line(&Tally::default()), None);
    }
}
