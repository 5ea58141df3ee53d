//! Time as the crate records it. The wall clock, for people: milliseconds (slot and cache
//! records) or microseconds (trace events) since the Unix epoch; a clock set before 1970
//! reads as 0. And the host's boot clock with the boot it counts from ([`BootTime`]), for
//! what other processes compare with their own reading (heartbeats, grant times): a wall
//! clock can be stepped (by hand or by NTP) or faked for one process (libfaketime), a boot
//! clock cannot.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys;

fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// `t` in milliseconds since the Unix epoch.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    since_epoch(t).as_millis() as u64
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// `t` in microseconds since the Unix epoch.
pub(crate) fn unix_micros(t: SystemTime) -> u64 {
    since_epoch(t).as_micros() as u64
}

/// A reading of the host's boot clock ([`sys::boot_ms`], `CLOCK_BOOTTIME` on Linux) and the
/// boot it counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BootTime {
    /// Milliseconds of the boot clock.
    pub(crate) ms: u64,
    /// The boot it counts from ([`sys::boot_id`]), where the host names one.
    pub(crate) boot_id: Option<&'static str>,
}

/// Now on the boot clock; `None` where there is none (not Linux).
pub(crate) fn boot_now() -> Option<BootTime> {
    static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();
    let ms = sys::boot_ms()?;
    Some(BootTime {
        ms,
        boot_id: BOOT_ID.get_or_init(sys::boot_id).as_deref(),
    })
}
