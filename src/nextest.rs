//! `cargo nextest` awareness.
//!
//! nextest runs every test in a process of its own, so an in-process semaphore limits nothing
//! there; this crate's host slots do. nextest's own answer to shared resources is a test group
//! with `max-threads`: with one, nextest never starts more GPU test processes than the cap, which
//! is better than starting them and letting them wait. When a test takes a permit under nextest
//! outside any group, the crate says once per process how to add the group ([`group_snippet`]).
//! Inside a group, [`NextestEnv::group_slot`](crate::config::NextestEnv::group_slot) tells which
//! of the group's slots this test has, for choosing a device.

use std::sync::Once;

pub use crate::config::NextestEnv;
use crate::config::{CONCURRENCY_VAR, Config};

/// A `.config/nextest.toml` fragment that puts GPU tests in a test group of at most
/// `max_threads` at a time. Adjust the filter to match your GPU tests and keep `max_threads`
/// equal to all the permits the host has: `REALIZAR_GPU_TEST_CONCURRENCY` times the GPUs.
///
/// # Example
///
/// ```
/// let snippet = gpu_test_permit::nextest::group_snippet(2);
/// assert!(snippet.contains("gpu = { max-threads = 2 }"));
/// ```
pub fn group_snippet(max_threads: usize) -> String {
    format!(
        "[test-groups]
gpu = {{ max-threads = {max_threads} }}

[[profile.default.overrides]]
filter = 'test(/gpu/)'
test-group = 'gpu'
"
    )
}

/// What nextest told this process, or `None` outside nextest.
pub fn current() -> Option<&'static NextestEnv> {
    Config::global().nextest.as_ref()
}

/// The running test's name as far as it can be known: nextest's `NEXTEST_TEST_NAME`, else the
/// current thread's name (libtest names each test's thread after the test), else the
/// executable's name.
pub fn current_test_name() -> String {
    if let Some(name) = current().and_then(|n| n.test_name.clone()) {
        return name;
    }
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "?".into()),
    }
}

/// The hint printed when a test takes a permit under nextest outside a test group, or `None`
/// when no hint is due.
pub fn group_hint(env: &NextestEnv, concurrency: usize) -> Option<String> {
    if !env.process_per_test || env.test_group.is_some() {
        return None;
    }
    Some(format!(
        "gpu-test-permit: this test runs under cargo nextest outside a test group, so nextest \
         starts GPU test processes that then wait for a permit. Put GPU tests in a group of \
         max-threads = {concurrency} ({CONCURRENCY_VAR}) in .config/nextest.toml, for example:\n{}",
        group_snippet(concurrency)
    ))
}

pub(crate) fn hint_once(concurrency: usize) {
    static ONCE: Once = Once::new();
    if let Some(env) = current() {
        ONCE.call_once(|| {
            if let Some(h) = group_hint(env, concurrency) {
                crate::notice::text(&format!("{h}\n"));
            }
        });
    }
}
