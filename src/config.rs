//! Every environment variable the crate reads, parsed and validated in one place.
//!
//! [`Config::from_env`] reads the process environment once (see [`Config::global`]); a bad value
//! never panics and never silently changes meaning. Values with a safe fallback (a number, a
//! duration) produce a [`ConfigWarning`] naming the variable, the bad value and the value used
//! instead; the warnings are printed once, one line each, on standard error. Values where a guess
//! would be dangerous (the slot directory, which decides which processes share a cap) are kept as
//! errors and reported when a permit is first requested.
//!
//! ```
//! use gpu_test_permit::config::{Config, CONCURRENCY_VAR};
//!
//! let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "abc".into()));
//! assert_eq!(cfg.concurrency.get(), 2);
//! assert_eq!(
//!     cfg.warnings[0].to_string(),
//!     "gpu-test-permit: REALIZAR_GPU_TEST_CONCURRENCY='abc' is not a whole number; using 2"
//! );
//! ```

use std::ffi::OsString;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Permits per GPU (on a one-GPU host: per host). At least 1.
pub const CONCURRENCY_VAR: &str = "REALIZAR_GPU_TEST_CONCURRENCY";
/// Longest wait for a permit before the wait fails with holder diagnostics.
pub const TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_TIMEOUT";
/// Directory of the host slot files.
pub const DIR_VAR: &str = "GPU_TEST_PERMIT_DIR";
/// File that wait and hold spans are appended to, as Chrome trace-event JSON.
pub const TRACE_VAR: &str = "GPU_TEST_PERMIT_TRACE";
/// Backends whose absence fails a GPU test instead of skipping it: `none`, `any`, `cuda`,
/// `wgpu` or a comma-separated list. An unknown word fails every GPU test.
pub const REQUIRE_VAR: &str = "GPU_TEST_PERMIT_REQUIRE";
/// Deadline for one backend probe child.
pub const PROBE_TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_PROBE_TIMEOUT";
/// `in-process` probes backends inside the test process instead of a child (`child`).
pub const PROBE_VAR: &str = "GPU_TEST_PERMIT_PROBE";
/// File that every skip line is appended to.
pub const SKIP_LOG_VAR: &str = "GPU_TEST_PERMIT_SKIP_LOG";
/// GPUs the host's permits span: `auto` (CUDA devices the probe finds when the crate is built
/// with `cuda`, else 1) or a count. Each GPU gets [`CONCURRENCY_VAR`] permits.
pub const GPUS_VAR: &str = "GPU_TEST_PERMIT_GPUS";
/// Probe deadline when [`PROBE_TIMEOUT_VAR`] is not set.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Permits per GPU when [`CONCURRENCY_VAR`] is not set.
pub const DEFAULT_CONCURRENCY: usize = 2;
/// Largest accepted [`CONCURRENCY_VAR`]; larger values are almost certainly a typo.
pub const MAX_CONCURRENCY: usize = 1024;
/// Wait deadline when [`TIMEOUT_VAR`] is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the host slot files live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotDir {
    /// [`DIR_VAR`] is unset: the per-user default directory (see [`default_slot_dir`]).
    Default,
    /// [`DIR_VAR`] names this absolute directory.
    Explicit(PathBuf),
    /// [`DIR_VAR`] is set to something unusable; permits are refused with this message,
    /// because falling back to another directory would silently split the cap.
    Invalid(String),
}

/// The typed, validated configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Permits per GPU, from [`CONCURRENCY_VAR`].
    pub concurrency: NonZeroUsize,
    /// Wait deadline, from [`TIMEOUT_VAR`].
    pub timeout: Duration,
    /// Slot directory, from [`DIR_VAR`].
    pub slot_dir: SlotDir,
    /// Trace file, from [`TRACE_VAR`].
    pub trace: Option<PathBuf>,
    /// Required backends, from [`REQUIRE_VAR`]; an invalid value is kept as its error message
    /// and fails every GPU test, because guessing could turn a requirement off.
    pub require: Result<crate::decision::Policy, String>,
    /// Probe child deadline, from [`PROBE_TIMEOUT_VAR`].
    pub probe_timeout: Duration,
    /// Where probes run, from [`PROBE_VAR`].
    pub probe_mode: crate::probe::ProbeMode,
    /// Skip ledger, from [`SKIP_LOG_VAR`].
    pub skip_log: Option<PathBuf>,
    /// GPUs the permits span, from [`GPUS_VAR`]; `None` is `auto`.
    pub gpus: Option<NonZeroUsize>,
    /// What `cargo nextest` told this process, when it runs under nextest.
    pub nextest: Option<NextestEnv>,
    /// One entry per variable whose value was rejected and replaced.
    pub warnings: Vec<ConfigWarning>,
}

/// A rejected environment value and the value used instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The variable's name.
    pub var: &'static str,
    /// The rejected value, lossily converted to UTF-8.
    pub value: String,
    /// Why it was rejected.
    pub problem: String,
    /// What is used instead.
    pub using: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu-test-permit: {}='{}' {}; using {}",
            self.var, self.value, self.problem, self.using
        )
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        Config::from_lookup(|name| std::env::var_os(name))
    }

    /// The configuration of this process, read from the environment on first use. Its warnings
    /// are printed to standard error then, once.
    pub fn global() -> &'static Config {
        static GLOBAL: OnceLock<Config> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let cfg = Config::from_env();
            for w in &cfg.warnings {
                eprintln!("{w}");
            }
            cfg
        })
    }

    /// Builds a configuration from any lookup function (for tests and tools); `lookup` returns
    /// `None` for an unset variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Config {
        let mut warnings = Vec::new();
        let concurrency = match lookup(CONCURRENCY_VAR) {
            None => NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap(),
            Some(raw) => parse_concurrency(&raw).unwrap_or_else(|problem| {
                warnings.push(warning(CONCURRENCY_VAR, &raw, problem, DEFAULT_CONCURRENCY));
                NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap()
            }),
        };
        let timeout = match lookup(TIMEOUT_VAR) {
            None => DEFAULT_TIMEOUT,
            Some(raw) => parse_duration(&raw).unwrap_or_else(|problem| {
                let using = format!("{}s", DEFAULT_TIMEOUT.as_secs());
                warnings.push(warning(TIMEOUT_VAR, &raw, problem, using));
                DEFAULT_TIMEOUT
            }),
        };
        let slot_dir = match lookup(DIR_VAR) {
            None => SlotDir::Default,
            Some(raw) => match parse_dir(&raw) {
                Ok(p) => SlotDir::Explicit(p),
                Err(problem) => SlotDir::Invalid(format!(
                    "{DIR_VAR}='{}' {problem}; set it to an absolute directory path shared by \
                     every process that uses the GPU, or unset it",
                    raw.to_string_lossy()
                )),
            },
        };
        let trace = match lookup(TRACE_VAR) {
            None => None,
            Some(raw) if raw.is_empty() => {
                warnings.push(warning(TRACE_VAR, &raw, "is empty", "no trace"));
                None
            }
            Some(raw) => Some(PathBuf::from(raw)),
        };
        let require = match lookup(REQUIRE_VAR) {
            None => Ok(crate::decision::Policy::none()),
            Some(raw) => utf8(&raw)
                .and_then(|s| s.parse::<crate::decision::Policy>())
                .map_err(|problem| {
                    format!(
                        "gpu-test-permit: {REQUIRE_VAR}='{}' {problem}",
                        raw.to_string_lossy()
                    )
                }),
        };
        let probe_timeout = match lookup(PROBE_TIMEOUT_VAR) {
            None => DEFAULT_PROBE_TIMEOUT,
            Some(raw) => parse_duration(&raw).unwrap_or_else(|problem| {
                let using = format!("{}s", DEFAULT_PROBE_TIMEOUT.as_secs());
                warnings.push(warning(PROBE_TIMEOUT_VAR, &raw, problem, using));
                DEFAULT_PROBE_TIMEOUT
            }),
        };
        let probe_mode = match lookup(PROBE_VAR) {
            None => crate::probe::ProbeMode::Child,
            Some(raw) => match raw.to_str() {
                Some("child") => crate::probe::ProbeMode::Child,
                Some("in-process") => crate::probe::ProbeMode::InProcess,
                _ => {
                    let problem = "is not child or in-process";
                    warnings.push(warning(PROBE_VAR, &raw, problem, "child"));
                    crate::probe::ProbeMode::Child
                }
            },
        };
        let skip_log = match lookup(SKIP_LOG_VAR) {
            None => None,
            Some(raw) if raw.is_empty() => {
                warnings.push(warning(SKIP_LOG_VAR, &raw, "is empty", "no skip log"));
                None
            }
            Some(raw) => Some(PathBuf::from(raw)),
        };
        let gpus = match lookup(GPUS_VAR) {
            None => None,
            Some(raw) if raw.to_str().map(str::trim) == Some("auto") => None,
            Some(raw) => parse_concurrency(&raw)
                .map_err(|problem| warnings.push(warning(GPUS_VAR, &raw, problem, "auto")))
                .ok(),
        };
        let nextest = NextestEnv::from_lookup(&lookup, &mut warnings);
        Config {
            gpus,
            concurrency,
            timeout,
            slot_dir,
            trace,
            require,
            probe_timeout,
            probe_mode,
            skip_log,
            nextest,
            warnings,
        }
    }
}

/// The variables `cargo nextest` sets for each test process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NextestEnv {
    /// `NEXTEST_EXECUTION_MODE` is `process-per-test` (every test is a process of its own).
    pub process_per_test: bool,
    /// `NEXTEST_RUN_ID`: the same for every process of one run.
    pub run_id: Option<String>,
    /// `NEXTEST_TEST_GROUP`, or `None` for `@global` (the test is in no group).
    pub test_group: Option<String>,
    /// `NEXTEST_TEST_GROUP_SLOT`: this test's slot within its group (0-based), or `None`.
    pub group_slot: Option<u64>,
    /// `NEXTEST_TEST_GLOBAL_SLOT`: this test's slot among all running tests.
    pub global_slot: Option<u64>,
    /// `NEXTEST_TEST_NAME` (recent nextest versions).
    pub test_name: Option<String>,
}

impl NextestEnv {
    fn from_lookup(
        lookup: &impl Fn(&str) -> Option<OsString>,
        warnings: &mut Vec<ConfigWarning>,
    ) -> Option<NextestEnv> {
        let text = |name: &str| lookup(name).map(|v| v.to_string_lossy().into_owned());
        let mode = text("NEXTEST_EXECUTION_MODE");
        let run_id = text("NEXTEST_RUN_ID");
        if mode.is_none() && run_id.is_none() {
            return None;
        }
        let mut slot = |var: &'static str| -> Option<u64> {
            let raw = lookup(var)?;
            let s = raw.to_string_lossy();
            if s == "none" {
                return None;
            }
            match s.parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    warnings.push(warning(var, &raw, "is not a slot number", "no slot"));
                    None
                }
            }
        };
        let group_slot = slot("NEXTEST_TEST_GROUP_SLOT");
        let global_slot = slot("NEXTEST_TEST_GLOBAL_SLOT");
        Some(NextestEnv {
            process_per_test: mode.as_deref() == Some("process-per-test"),
            run_id,
            test_group: text("NEXTEST_TEST_GROUP").filter(|g| g != "@global" && !g.is_empty()),
            group_slot,
            global_slot,
            test_name: text("NEXTEST_TEST_NAME").filter(|n| !n.is_empty()),
        })
    }
}

fn warning(
    var: &'static str,
    raw: &OsString,
    problem: impl Into<String>,
    using: impl ToString,
) -> ConfigWarning {
    ConfigWarning {
        var,
        value: raw.to_string_lossy().into_owned(),
        problem: problem.into(),
        using: using.to_string(),
    }
}

fn utf8(raw: &OsString) -> Result<&str, String> {
    raw.to_str().ok_or_else(|| "is not valid UTF-8".to_string())
}

/// Parses a permit count: digits only, 1 to [`MAX_CONCURRENCY`].
pub fn parse_concurrency(raw: &OsString) -> Result<NonZeroUsize, String> {
    let s = utf8(raw)?;
    if s.is_empty() {
        return Err("is empty".into());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is not a whole number".into());
    }
    let n: usize = s
        .parse()
        .map_err(|_| format!("is larger than the maximum {MAX_CONCURRENCY}"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    if n > MAX_CONCURRENCY {
        return Err(format!("is larger than the maximum {MAX_CONCURRENCY}"));
    }
    Ok(NonZeroUsize::new(n).unwrap())
}

/// Parses a positive duration: a whole number followed by an optional unit `ms`, `s`, `m` or
/// `h` (no unit means seconds), e.g. `90`, `90s`, `1500ms`, `10m`.
pub fn parse_duration(raw: &OsString) -> Result<Duration, String> {
    let s = utf8(raw)?;
    if s.is_empty() {
        return Err("is empty".into());
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    const HINT: &str = "is not a duration like 90, 90s, 1500ms or 10m";
    if digits.is_empty() {
        return Err(HINT.into());
    }
    let n: u64 = digits.parse().map_err(|_| "is too large".to_string())?;
    let d = match unit {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(HINT.into()),
    }
    .map(Duration::from_millis)
    .ok_or_else(|| "is too large".to_string())?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_dir(raw: &OsString) -> Result<PathBuf, &'static str> {
    if raw.is_empty() {
        return Err("is empty");
    }
    let p = PathBuf::from(raw);
    if !p.is_absolute() {
        // Relative paths resolve against each test process's working directory, which differs
        // between crates of a workspace: the processes would not share one cap.
        return Err("is not an absolute path");
    }
    Ok(p)
}

/// The per-user default slot directory: `/tmp/gpu-test-permit-<uid>` on Unix, and
/// `%TEMP%\gpu-test-permit` elsewhere.
///
/// Every process of a user must land on the same directory, or they do not share the cap, so the
/// choice depends only on what exists in `/tmp`, never on the environment: not `$TMPDIR`, which
/// CI systems often set per job, and not `$XDG_RUNTIME_DIR` (`/run/user/<uid>`), which processes
/// outside a login session (services, cron, `sudo -u`) lack and which is deleted with its slot
/// files at the user's last logout while tests may still run.
///
/// Any local user can create `/tmp/gpu-test-permit-<uid>` first. When another user (not root)
/// owns it, the first of `/tmp/gpu-test-permit-<uid>-1` ... `-16` that this user owns is used,
/// else the first that does not exist yet (created 0700 at the first permit). Every process of
/// the user picks the same one, and the first call in a process prints one line naming the
/// owner and the directory used. When all are taken, permits fail with an error naming the
/// owner; set [`DIR_VAR`] then. The choice is made once per process.
pub fn default_slot_dir() -> PathBuf {
    crate::sys::default_slot_dir()
}
