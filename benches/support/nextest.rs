//! One whole `cargo nextest run` of a fixture suite, for the benches that time a suite's wall.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `cargo nextest run -p package` from the crate's directory into `target`, starting at most
/// `threads` tests at once, quiet, with nextest config file `config`, and none of this crate's
/// or nextest's variables from the bench's own environment: the caller adds its own.
pub(crate) fn nextest_run(package: &str, target: &Path, threads: usize, config: &Path) -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("GPU_TEST_PERMIT_") || k.starts_with("NEXTEST_") {
            c.env_remove(&*k);
        }
    }
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["nextest", "run", "--offline", "-p", package, "--target-dir"])
        .arg(target)
        .args([
            "--test-threads",
            &threads.to_string(),
            "--status-level",
            "none",
        ])
        .args(["--final-status-level", "none", "--config-file"])
        .arg(config);
    c
}

/// Runs `c` to its end, which must be a success; how long it took.
pub(crate) fn timed_run(mut c: Command) -> Duration {
    let start = Instant::now();
    let out = c.output().unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}
