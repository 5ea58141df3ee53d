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

/// The configuration that caps a test suite that does not use this crate, through
/// `gpu-test-permit run` as cargo's target runner: every test binary runs under `run`, which
/// takes a permit only for tests in the `gpu` test group (and none for nextest's `--list`), so
/// `max_threads` should be all the permits the host has. Two files: `.cargo/config.toml` and
/// `.config/nextest.toml`.
///
/// ```
/// let snippet = gpu_test_permit::nextest::runner_snippet(2);
/// assert!(snippet.contains(r#"runner = ["gpu-test-permit", "run", "--group", "gpu", "--"]"#));
/// ```
pub fn runner_snippet(max_threads: usize) -> String {
    format!(
        "# .cargo/config.toml: test binaries run under `gpu-test-permit run`; tests in the `gpu`
# test group hold a permit, the others (and nextest's --list) run straight through. Or set
# CARGO_TARGET_<TRIPLE>_RUNNER='gpu-test-permit run --group gpu --' on the GPU runner only.
[target.'cfg(all())']
runner = [\"gpu-test-permit\", \"run\", \"--group\", \"gpu\", \"--\"]

# .config/nextest.toml
{}",
        group_snippet(max_threads)
    )
}

/// The configuration that caps a test suite that does not use this crate, through
/// `gpu-test-permit run` as a nextest wrapper script (experimental in nextest, available
/// since 0.9.98): only the tests the script's filter picks run under `run`, and listing
/// never does. One file, `.config/nextest.toml`.
///
/// ```
/// let snippet = gpu_test_permit::nextest::wrapper_snippet(2);
/// assert!(snippet.contains("run-wrapper = 'gpu-permit'"));
/// ```
pub fn wrapper_snippet(max_threads: usize) -> String {
    format!(
        "# .config/nextest.toml (nextest 0.9.98 or later): GPU tests run under
# `gpu-test-permit run`, which holds a permit while the test runs.
experimental = [\"wrapper-scripts\"]

[scripts.wrapper.gpu-permit]
command = 'gpu-test-permit run --'

[[profile.default.scripts]]
filter = 'test(/gpu/)'
run-wrapper = 'gpu-permit'

{}",
        group_snippet(max_threads)
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
