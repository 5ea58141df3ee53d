//! Which GPU backends and devices does this machine have? Asked safely, and once.
//!
//! GPU drivers crash (SIGSEGV, aborts) or hang inside their initialisation, and `cudarc` panics
//! when `libcuda` is absent. So by default [`probe`] asks in a **child process**: the current
//! executable is started again with a private, verified request (see below), a constructor in
//! this crate answers before the child's `main` runs (no test code runs in the child), writes a
//! structured answer on its standard output and exits without unwinding. The parent enforces a
//! deadline (`GPU_TEST_PERMIT_PROBE_TIMEOUT`, default 10 s), kills and reaps a child that passes
//! it, and classifies what happened as a [`ProbeOutcome`]. Each backend gets its own child, so a
//! crashing CUDA driver cannot spoil the wgpu answer.
//!
//! ```
//! use gpu_test_permit::probe::{probe, Backend};
//!
//! let report = probe(Backend::Wgpu);
//! println!("{report}"); // e.g. "wgpu: 1 device: llvmpipe (LLVM 15.0.6, 256 bits) [vulkan, cpu, ...]"
//! if let Some(devices) = report.outcome.devices() {
//!     assert!(!devices.is_empty());
//! }
//! ```
//!
//! # What a probe child cannot do to the caller
//!
//! - **Outlive its deadline.** The deadline is absolute: a child that has not answered by then
//!   is killed with `SIGKILL`, however much it is still writing, and the probe returns
//!   [`ProbeOutcome::TimedOut`] at the deadline, not when the child's output stops.
//! - **Fill the caller's memory.** Its output is read into bounded buffers: the last 2 KiB of
//!   standard error (the driver's last words, in the report) and the last 64 KiB of standard
//!   output before its answer.
//! - **Turn a crash into a timeout.** The child's exit decides, not the end of its pipes: when a
//!   driver leaves a helper process holding them, the crash is reported once the child is gone
//!   (its pipes get 100 ms to deliver the rest).
//! - **Stay behind.** On every way out of a probe (answer, crash, deadline, error, panic) the
//!   child is killed if need be and reaped: no zombie. On Unix it leads a process group of its
//!   own, killed with it, so no helper a driver started remains (on other systems than Linux,
//!   only while the child has not exited yet). On Linux the child also dies with the thread
//!   that started it (`PR_SET_PDEATHSIG`; that thread is the one waiting for it), so a test
//!   process killed mid-probe does not leave a hung driver behind.
//! - **Be faked by a stale variable.** The request is a fresh random token in a pipe that the
//!   child gets as standard input, and the private variable names that pipe by device and
//!   inode. A process is a probe child only when both agree, and the first look consumes the
//!   token and removes the variable. `GPU_TEST_PERMIT_PROBE_CHILD` left in an environment (or
//!   inherited by a program the child starts) is removed with a note on standard error and the
//!   program runs as usual. A probe called inside a probe child (by a constructor that runs
//!   before this crate's) starts no child of its own and reports an error instead.
//!
//! # Caching
//!
//! [`probe`] caches its answer per process, and under `cargo nextest` (which runs every test in a
//! process of its own) also in a file shared by all processes of one run, keyed by
//! `NEXTEST_RUN_ID` and by a hash of what else changes the answer: the probe deadline and mode,
//! and the environment that selects drivers and devices (`LD_LIBRARY_PATH`,
//! `CUDA_VISIBLE_DEVICES`, `WGPU_BACKEND`, `VK_DRIVER_FILES`, `VK_ICD_FILENAMES`, `DISPLAY`, and
//! a few more). A run of thousands of test processes probes each backend once per key.
//!
//! The run cache keeps answers, not accidents: every outcome is kept for the run except a
//! timeout (or a child that could not start), which the run's next processes probe again; only
//! the third timed-out attempt becomes the run's answer. A report read from the file says so
//! ([`ProbeSource::RunCache`], [`ProbeReport::run_cache`]), and a skip or failure because of a
//! broken answer from it names the file to delete for a fresh probe. The file lives in the slot
//! directory (`GPU_TEST_PERMIT_DIR`), is written atomically (a temporary file renamed into place)
//! under a file lock so concurrent first probes start one child (a process waits for that lock
//! at most one probe deadline and 3 s, then probes on its own), and is validated when read; a
//! corrupt, foreign or stale file, or one with numbers out of range, is ignored and the backend
//! probed again. [`probe_with`] never caches.
//!
//! # Probing in-process
//!
//! `GPU_TEST_PERMIT_PROBE=in-process` (or [`ProbeOptions::in_process`]) probes inside the
//! calling process: no child start (tens of milliseconds saved), but a crashing driver takes
//! the test process with it and a hanging one hangs it. Use it where drivers are known good.
//!
//! # What the constructor needs
//!
//! The child's answer comes from a constructor (`ctor`) in this crate, so it works in any
//! executable that links `gpu-test-permit`: your test binaries, benches and programs. Cargo
//! links a dependency into a test binary when the binary uses it, which a test that calls
//! [`probe`] (or a macro of this crate) does. [`self_test`] checks it.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::backend::{Backend, ProbeMode, UnknownBackend};
use crate::config::Config;

mod backends;
mod cache;
mod child;

/// What kind of device an adapter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A GPU with its own memory.
    Discrete,
    /// A GPU sharing memory with the CPU.
    Integrated,
    /// A software implementation on the CPU, such as Mesa's lavapipe or llvmpipe.
    Cpu,
    /// A virtual or hosted GPU.
    Virtual,
    /// Anything else, or unknown.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Discrete => "discrete",
            DeviceKind::Integrated => "integrated",
            DeviceKind::Cpu => "cpu",
            DeviceKind::Virtual => "virtual",
            DeviceKind::Other => "other",
        })
    }
}

/// One device a backend found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Device {
    /// Position in the backend's enumeration (the CUDA ordinal for CUDA).
    pub index: u32,
    /// The name the driver gives, e.g. `NVIDIA GB10` or `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// The API the device is reached through: `cuda`, or wgpu's backend (`vulkan`, `metal`,
    /// `dx12`, `gl`).
    pub api: String,
    /// Discrete, integrated, CPU, ...
    pub kind: DeviceKind,
    /// The driver and its version as far as the backend says, e.g. `12.8` or `llvmpipe Mesa 22.3.6`.
    pub driver: Option<String>,
    /// Total device memory in bytes, where the backend reports it (CUDA does, wgpu does not).
    pub memory_bytes: Option<u64>,
}

/// What a probe found out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProbeOutcome {
    /// The backend works and has these devices (never empty).
    Devices {
        /// The devices, in the backend's order.
        devices: Vec<Device>,
    },
    /// The backend's driver is installed but reports no device.
    NoDevices {
        /// What the driver said.
        detail: String,
    },
    /// The backend's driver library is not installed.
    NotInstalled {
        /// What was looked for.
        detail: String,
    },
    /// This build of the crate lacks the backend's cargo feature.
    NotBuilt,
    /// The driver returned an error.
    Error {
        /// The error, with the driver's numeric code where there is one.
        detail: String,
    },
    /// The probe child died: killed by a signal or exited with a failure status before answering.
    Crashed {
        /// The signal that killed it (Unix), e.g. 11 for SIGSEGV.
        signal: Option<i32>,
        /// Its exit status, when it exited.
        exit_code: Option<i32>,
        /// The end of what it wrote to standard error (the driver's last words).
        stderr_tail: String,
    },
    /// The probe child passed its deadline and was killed.
    TimedOut {
        /// The deadline it passed.
        #[serde(with = "millis", rename = "after_ms")]
        after: Duration,
        /// The end of what it wrote to standard error.
        stderr_tail: String,
    },
    /// The probe child's answer could not be understood.
    Malformed {
        /// What was wrong with it.
        detail: String,
        /// The end of what it wrote to standard error.
        stderr_tail: String,
    },
}

impl ProbeOutcome {
    /// The devices, when the backend has any.
    pub fn devices(&self) -> Option<&[Device]> {
        match self {
            ProbeOutcome::Devices { devices } => Some(devices),
            _ => None,
        }
    }

    /// Whether the backend has at least one device.
    pub fn has_devices(&self) -> bool {
        self.devices().is_some_and(|d| !d.is_empty())
    }

    /// Whether the probe itself went wrong (crash, hang, error, malformed answer), as opposed
    /// to a clean answer of "devices", "no devices", "not installed" or "not built". A broken
    /// probe means a broken driver, which deserves attention even where the backend is optional.
    pub fn is_broken(&self) -> bool {
        matches!(
            self,
            ProbeOutcome::Error { .. }
                | ProbeOutcome::Crashed { .. }
                | ProbeOutcome::TimedOut { .. }
                | ProbeOutcome::Malformed { .. }
        )
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn tail(f: &mut fmt::Formatter<'_>, t: &str) -> fmt::Result {
            let t = t.trim();
            if t.is_empty() {
                Ok(())
            } else {
                write!(f, "; its stderr ended with: {}", t.replace('\n', " | "))
            }
        }
        match self {
            ProbeOutcome::Devices { devices } => {
                let n = devices.len();
                write!(f, "{n} device{}", if n == 1 { "" } else { "s" })?;
                for (i, d) in devices.iter().enumerate() {
                    f.write_str(if i == 0 { ": " } else { "; " })?;
                    write!(f, "{} [{}, {}", d.name, d.api, d.kind)?;
                    if let Some(drv) = &d.driver {
                        write!(f, ", driver {drv}")?;
                    }
                    if let Some(m) = d.memory_bytes {
                        write!(f, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64)?;
                    }
                    f.write_str("]")?;
                }
                Ok(())
            }
            ProbeOutcome::NoDevices { detail } => write!(f, "no devices ({detail})"),
            ProbeOutcome::NotInstalled { detail } => write!(f, "not installed ({detail})"),
            ProbeOutcome::NotBuilt => f.write_str(
                "not built: gpu-test-permit was compiled without this backend's feature",
            ),
            ProbeOutcome::Error { detail } => write!(f, "driver error: {detail}"),
            ProbeOutcome::Crashed {
                signal,
                exit_code,
                stderr_tail,
            } => {
                match (signal, exit_code) {
                    (Some(s), _) => write!(
                        f,
                        "the probe child crashed with signal {s}{}",
                        signal_name(*s)
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default()
                    )?,
                    (None, Some(c)) => {
                        write!(f, "the probe child exited with status {c} before answering")?
                    }
                    (None, None) => f.write_str("the probe child died before answering")?,
                }
                tail(f, stderr_tail)
            }
            ProbeOutcome::TimedOut { after, stderr_tail } => {
                write!(
                    f,
                    "the probe child did not answer within {} ms and was killed (a hung \
                     driver; raise GPU_TEST_PERMIT_PROBE_TIMEOUT if it is just slow)",
                    after.as_millis()
                )?;
                tail(f, stderr_tail)
            }
            ProbeOutcome::Malformed {
                detail,
                stderr_tail,
            } => {
                write!(f, "malformed probe answer: {detail}")?;
                tail(f, stderr_tail)
            }
        }
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// Where a [`ProbeReport`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeSource {
    /// A probe child started for this call.
    Child,
    /// A probe inside the calling process (opt-in, or a backend that is not built).
    InProcess,
    /// This process's cache of an earlier probe.
    ProcessCache,
    /// The cache file shared by the processes of one `cargo nextest` run.
    RunCache,
}

impl fmt::Display for ProbeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeSource::Child => "child",
            ProbeSource::InProcess => "in-process",
            ProbeSource::ProcessCache => "process cache",
            ProbeSource::RunCache => "run cache",
        })
    }
}

/// The answer to "what does this backend have?".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProbeReport {
    /// The backend probed.
    pub backend: Backend,
    /// What was found.
    pub outcome: ProbeOutcome,
    /// How long the probe took where it ran (child start to answer), even when this report
    /// came from a cache.
    #[serde(with = "millis", rename = "duration_ms")]
    pub duration: Duration,
    /// Where this report came from.
    pub source: ProbeSource,
    /// The run cache file the report was read from, when it came from one (also in this
    /// process's later copies of it): another test process of the `cargo nextest` run probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_cache: Option<PathBuf>,
}

impl ProbeReport {
    /// For a broken outcome (crash, hang, error, malformed answer) that came from the run
    /// cache: says so, and how to get a fresh probe. Skip and failure reasons end with it, so
    /// nobody hunts a driver bug in a test process that never probed.
    ///
    /// ```
    /// use gpu_test_permit::probe::{probe, Backend};
    ///
    /// let report = probe(Backend::Cuda);
    /// if let Some(note) = report.run_cache_note() {
    ///     println!("{report} ({note})");
    /// }
    /// ```
    pub fn run_cache_note(&self) -> Option<String> {
        let path = self.run_cache.as_ref()?;
        if !self.outcome.is_broken() {
            return None;
        }
        let attempts = match self.outcome {
            ProbeOutcome::TimedOut { .. } => {
                format!(" after {} timed-out attempts", cache::TIMEOUT_ATTEMPTS)
            }
            _ => String::new(),
        };
        Some(format!(
            "this result comes from the run cache {}, written by an earlier test process of              this nextest run{attempts}; delete that file, or start a new run, for a fresh probe",
            path.display()
        ))
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.backend, self.outcome)
    }
}

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
    timeout: Duration,
    mode: ProbeMode,
    env: Vec<(OsString, Option<OsString>)>,
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
    /// reports [`ProbeOutcome::TimedOut`]. Not enforced in-process.
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

/// Probes `backend` the way the environment asks, with caching: the first call in a process
/// probes (or, under `cargo nextest`, reads the run's shared answer), later calls return the
/// cached report with [`ProbeSource::ProcessCache`]. Never panics because of a driver.
///
/// ```
/// use gpu_test_permit::probe::{probe, Backend, ProbeSource};
///
/// let first = probe(Backend::Cuda);
/// let again = probe(Backend::Cuda);
/// assert_eq!(first.outcome, again.outcome);
/// assert_eq!(again.source, ProbeSource::ProcessCache);
/// ```
pub fn probe(backend: Backend) -> ProbeReport {
    static CACHE: [OnceLock<ProbeReport>; 2] = [OnceLock::new(), OnceLock::new()];
    let mut fresh = None;
    let cached = CACHE[backend.index()].get_or_init(|| {
        let cfg = Config::global();
        let opts = ProbeOptions::from_config(cfg);
        let report = cache::probe_shared(backend, &opts, cfg);
        fresh = Some(report.clone());
        report
    });
    fresh.unwrap_or_else(|| ProbeReport {
        backend,
        outcome: cached.outcome.clone(),
        duration: cached.duration,
        source: ProbeSource::ProcessCache,
        run_cache: cached.run_cache.clone(),
    })
}

/// Probes `backend` now with `opts`, bypassing every cache.
pub fn probe_with(backend: Backend, opts: &ProbeOptions) -> ProbeReport {
    let start = Instant::now();
    if !backend.is_built() {
        return ProbeReport {
            backend,
            outcome: ProbeOutcome::NotBuilt,
            duration: start.elapsed(),
            source: ProbeSource::InProcess,
            run_cache: None,
        };
    }
    match opts.mode {
        ProbeMode::InProcess => ProbeReport {
            backend,
            outcome: backends::probe_here_catching(backend),
            duration: start.elapsed(),
            source: ProbeSource::InProcess,
            run_cache: None,
        },
        ProbeMode::Child => {
            let outcome = match child::run(backend.name(), opts) {
                Ok(run) => child::classify(&run, opts.timeout),
                Err(e) => ProbeOutcome::Error {
                    detail: format!("{}: {e}", child::START_FAILED),
                },
            };
            ProbeReport {
                backend,
                outcome,
                duration: start.elapsed(),
                source: ProbeSource::Child,
                run_cache: None,
            }
        }
    }
}

/// Checks that this executable answers probe requests: starts a child of it in probe mode
/// and waits for its constructor to answer. Returns how long the round trip took, or why it
/// failed (for example: the executable does not link this crate's constructor).
///
/// ```
/// let took = gpu_test_permit::probe::self_test(&Default::default()).unwrap();
/// assert!(took.as_secs() < 60);
/// ```
pub fn self_test(opts: &ProbeOptions) -> Result<Duration, String> {
    let start = Instant::now();
    let run = child::run("ping", opts).map_err(|e| format!("could not start a child: {e}"))?;
    child::check_pong(&run, opts.timeout)?;
    Ok(start.elapsed())
}

mod millis {
    //! Durations as whole milliseconds in JSON, readable by people and tools.
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        // Out of range (negative, not finite, past `Duration::MAX`) is an error, not a panic.
        Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
            serde::de::Error::custom(format!(
                "{ms} ms is not a duration (a non-negative number of milliseconds)"
            ))
        })
    }
}
