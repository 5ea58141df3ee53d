//! Std-only stand-ins for what `linux.rs` does with Linux's own calls, for every other
//! platform: std's clock, a counter for thread numbers, sleeping instead of inotify, and
//! nothing where `/proc` or `PR_SET_PDEATHSIG` would be needed.

use std::io;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// Nanoseconds since the first call, by std's `Instant`.
pub(super) fn coarse_ns() -> u64 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// A process-wide counter.
pub(super) fn raw_thread_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Sleeps in growing steps and never sees a change.
pub(super) struct ChangeWatch {
    step: Duration,
}

impl ChangeWatch {
    pub(super) fn new(_paths: &[&Path]) -> io::Result<ChangeWatch> {
        Ok(ChangeWatch {
            step: Duration::from_micros(200),
        })
    }

    pub(super) fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        std::thread::sleep(self.step.min(timeout));
        self.step = (self.step * 2).min(Duration::from_millis(20));
        Ok(false)
    }
}

pub(super) fn process_is_stopped(_pid: u32) -> bool {
    false
}

/// Not known here.
pub(super) fn is_self_or_ancestor(_pid: u32) -> Option<bool> {
    None
}

/// Not known here: only `pid` itself.
pub(super) fn ancestor_among(pid: u32, among: &[u32]) -> Option<u32> {
    among.contains(&pid).then_some(pid)
}

/// Not known here.
pub(super) fn process_name(_pid: u32) -> Option<String> {
    None
}

/// Not known here.
pub(super) fn lock_owner(_file: &std::fs::File) -> Option<u32> {
    None
}

/// Not counted: the estimate.
pub(super) fn open_descriptors() -> u64 {
    super::DESCRIPTORS_ESTIMATE
}

/// Nothing to arm: the probe's deadline and its process group still end the child.
pub(super) fn die_with_spawning_thread(_cmd: &mut Command) {}

/// Looks with `try_wait`, which reaps an exited child: its status goes to `reaped`.
pub(super) fn child_has_exited(
    child: &mut Child,
    reaped: &mut Option<ExitStatus>,
) -> io::Result<bool> {
    if reaped.is_none() {
        *reaped = child.try_wait()?;
    }
    Ok(reaped.is_some())
}

/// No clock that every process shares and no step moves is known here: heartbeats use the
/// wall clock.
pub(super) fn boot_ms() -> Option<u64> {
    None
}

/// No boot clock, so no boot for it to count from.
pub(super) fn boot_id() -> Option<String> {
    None
}

/// Nothing is reserved here; a full disk may still refuse a record.
pub(super) fn reserve(_file: &std::fs::File, _len: u64) -> std::io::Result<()> {
    Ok(())
}

/// The files this process has mapped: not seen here.
pub(super) fn mapped_files() -> Option<Vec<String>> {
    None
}

/// The loader's list of loaded objects: not seen here.
pub(super) fn any_loaded_object(_wanted: fn(*const std::ffi::c_char) -> bool) -> Option<bool> {
    None
}
