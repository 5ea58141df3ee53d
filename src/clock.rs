//! Wall-clock time as the crate records it: milliseconds (slot and cache records) or
//! microseconds (trace events) since the Unix epoch. A clock set before 1970 reads as 0.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
