//! How one probe runs ([`ProbeOptions`]): deadline, mode and extra environment for the child.

use std::ffi::OsString;
use std::time::Duration;

use crate::backend::ProbeMode;
use crate::config::Config;

/// How one probe runs: deadline, mode and extra environment for the child.
///
/// ```
/// use std::time::Duration;
/// use gpu_test_permit::probe::{probe_with, Backend, ProbeOptions};
///
/// // A fresh probe (no cache) with a short deadline and a driver path for the child.
/// let opts = ProbeOptions::from_env()
///     .timeout(Duration::from_secs(5))
///     .env("LD_LIBRARY_PATH", "/opt/driver/lib");
/// let report = probe_with(Backend::Cuda, &opts);
/// println!("{report}");
/// ```
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    pub(super) timeout: Duration,
    pub(super) mode: ProbeMode,
    pub(super) env: Vec<(OsString, Option<OsString>)>,
}

impl ProbeOptions {
    /// The options the environment asks for (`GPU_TEST_PERMIT_PROBE_TIMEOUT`,
    /// `GPU_TEST_PERMIT_PROBE`), read through [`Config::global`].
    pub fn from_env() -> ProbeOptions {
        ProbeOptions::from_config(Config::global())
    }

    /// The options a configuration asks for.
    pub fn from_config(cfg: &Config) -> ProbeOptions {
        ProbeOptions {
            timeout: cfg.probe_timeout,
            mode: cfg.probe_mode,
            env: Vec::new(),
        }
    }

    /// Sets the deadline for the probe child; past it the child is killed and the probe
    /// reports [`ProbeOutcome::TimedOut`](super::ProbeOutcome::TimedOut). Not enforced in-process.
    pub fn timeout(mut self, timeout: Duration) -> ProbeOptions {
        self.timeout = timeout;
        self
    }

    /// Probes in the calling process (`true`) or in a child (`false`).
    pub fn in_process(mut self, yes: bool) -> ProbeOptions {
        self.mode = if yes {
            ProbeMode::InProcess
        } else {
            ProbeMode::Child
        };
        self
    }

    /// Sets an environment variable for the probe child only (for example `LD_LIBRARY_PATH`
    /// to pick a driver, which has no effect once a process runs).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> ProbeOptions {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Removes an environment variable for the probe child only.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> ProbeOptions {
        self.env.push((key.into(), None));
        self
    }

    /// The child's deadline.
    pub fn deadline(&self) -> Duration {
        self.timeout
    }

    /// The probe mode.
    pub fn mode(&self) -> ProbeMode {
        self.mode
    }
}

impl Default for ProbeOptions {
    /// Same as [`ProbeOptions::from_env`].
    fn default() -> ProbeOptions {
        ProbeOptions::from_env()
    }
}
