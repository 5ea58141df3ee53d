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
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOptions;
    ///
    /// let opts = ProbeOptions::from_env();
    /// println!("{:?} deadline, {:?}", opts.deadline(), opts.mode());
    /// ```
    pub fn from_env() -> ProbeOptions {
        ProbeOptions::from_config(Config::global())
    }

    /// The options a configuration asks for.
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, PROBE_TIMEOUT_VAR};
    /// use gpu_test_permit::probe::ProbeOptions;
    ///
    /// let cfg = Config::from_lookup(|name| (name == PROBE_TIMEOUT_VAR).then(|| "3s".into()));
    /// assert_eq!(ProbeOptions::from_config(&cfg).deadline(), std::time::Duration::from_secs(3));
    /// ```
    pub fn from_config(cfg: &Config) -> ProbeOptions {
        ProbeOptions {
            timeout: cfg.probe_timeout,
            mode: cfg.probe_mode,
            env: Vec::new(),
        }
    }

    /// Sets the deadline for the probe child; past it the child is killed and the probe
    /// reports [`ProbeOutcome::TimedOut`](super::ProbeOutcome::TimedOut). Not enforced in-process.
    ///
    /// ```
    /// use gpu_test_permit::probe::ProbeOptions;
    ///
    /// let opts = ProbeOptions::from_env().timeout(std::time::Duration::from_secs(2));
    /// assert_eq!(opts.deadline(), std::time::Duration::from_secs(2));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> ProbeOptions {
        self.timeout = timeout;
        self
    }

    /// Probes in the calling process (`true`) or in a child (`false`).
    ///
    /// ```
    /// use gpu_test_permit::probe::{ProbeMode, ProbeOptions};
    ///
    /// assert_eq!(ProbeOptions::from_env().in_process(true).mode(), ProbeMode::InProcess);
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::probe::{probe_with, Backend, ProbeOptions};
    ///
    /// // Try a driver from another directory, in the child alone.
    /// let opts = ProbeOptions::from_env().in_process(false).env("LD_LIBRARY_PATH", "/opt/cuda-stub/lib");
    /// println!("{}", probe_with(Backend::Cuda, &opts));
    /// ```
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> ProbeOptions {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Removes an environment variable for the probe child only.
    ///
    /// ```
    /// use gpu_test_permit::probe::{probe_with, Backend, ProbeOptions};
    ///
    /// // What wgpu finds without a display server.
    /// let opts = ProbeOptions::from_env().in_process(false).env_remove("DISPLAY");
    /// println!("{}", probe_with(Backend::Wgpu, &opts));
    /// ```
    pub fn env_remove(mut self, key: impl Into<OsString>) -> ProbeOptions {
        self.env.push((key.into(), None));
        self
    }

    /// The child's deadline.
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, DEFAULT_PROBE_TIMEOUT};
    /// use gpu_test_permit::probe::ProbeOptions;
    ///
    /// let opts = ProbeOptions::from_config(&Config::from_lookup(|_| None));
    /// assert_eq!(opts.deadline(), DEFAULT_PROBE_TIMEOUT);
    /// ```
    pub fn deadline(&self) -> Duration {
        self.timeout
    }

    /// The probe mode.
    ///
    /// ```
    /// use gpu_test_permit::probe::{ProbeMode, ProbeOptions};
    ///
    /// assert_eq!(ProbeOptions::from_env().in_process(false).mode(), ProbeMode::Child);
    /// ```
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
