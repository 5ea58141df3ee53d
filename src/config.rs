//! Every environment variable the crate reads, parsed and validated in one place.
//!
//! [`Config::from_env`] reads the process environment once (see [`Config::global`]); a bad value
//! never panics and never silently changes meaning. Surrounding whitespace is ignored in numbers,
//! durations and words (`"2 "` is 2), not in paths. Values with a safe fallback (a number, a
//! duration) produce a [`ConfigWarning`] naming the variable, the bad value and the value used
//! instead. Values where a guess would be dangerous (the slot directory, which decides which
//! processes share a cap) are kept as errors and reported when a permit is first requested.
//!
//! # The variables
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `REALIZAR_GPU_TEST_CONCURRENCY` | permits per GPU, N (≥ 1, ≤ 1024) | 2 |
//! | `GPU_TEST_PERMIT_TIMEOUT` | longest wait for a permit: `90`, `90s`, `1500ms`, `10m`, `1h` | 10m |
//! | `GPU_TEST_PERMIT_HOLD_TIMEOUT` | longest a permit may be held; past it the process prints who holds permits, since when and the N in force, records the hang, and aborts (a wedged driver becomes a failure, not a hung run; `gpu-test-permit run` instead ends its command, then exits with 124); keep it below nextest's `slow-timeout` termination | off |
//! | `GPU_TEST_PERMIT_DIR` | absolute path of the host slot directory (share it between users or containers) | `/tmp/gpu-test-permit-<uid>` |
//! | `GPU_TEST_PERMIT_TRACE` | file to append wait and hold spans to (Chrome trace events; Perfetto opens it) | off |
//! | `GPU_TEST_PERMIT_REQUIRE` | backends whose absence fails instead of skips: `none`, `any`, `cuda`, `wgpu`, `cuda,wgpu` | `none` |
//! | `GPU_TEST_PERMIT_PROBE_TIMEOUT` | deadline for one backend's probe child | 10s |
//! | `GPU_TEST_PERMIT_PROBE` | `child`, or `in-process` to probe inside the test process (faster, unprotected) | `child` |
//! | `GPU_TEST_PERMIT_SKIP_LOG` | file to append one line per skipped test to | off |
//! | `GPU_TEST_PERMIT_GPUS` | GPUs the permits span, N each: `auto` (the CUDA devices the probe finds, with feature `cuda`, probed at a process's first permit, once per run under nextest; else 1), a count (`4`: GPUs 0 to 3), or a list of GPU ids (`0,2,3`; one GPU: `3,`) that permit device k maps to, as the process numbers its CUDA devices (after `CUDA_VISIBLE_DEVICES`) | `auto` |
//! | `GPU_TEST_PERMIT_GPU_MEMORY` | GPU memory per GPU that permits budget: a size (`64GiB`, `80GB`, `512MiB`, bytes) or a percentage of the smallest device memory the CUDA probe reports (`90%`); a permit declaring memory ([`acquire_memory`](crate::acquire_memory)) takes `ceil(bytes / (budget / N))` permit units. On unified-memory devices (GB10) set a size: the probe does not derive one | CUDA device memory (discrete GPUs, feature `cuda`), else none |
//! | `GPU_TEST_PERMIT_STRICT_CONFIG` | `1`: a bad value above fails the tests that read it instead of falling back (set it on CI) | off |
//! | `GPU_TEST_PERMIT_INHERITED` | set by `gpu-test-permit run` for its command: the permit it holds, which the command and its descendants work inside instead of taking host slots (see [`InheritedPermit`]); not for setting by hand | unset |
//! | `WGPU_ADAPTER_NAME` | wgpu's own: the wgpu fixture uses only adapters whose name contains this text (case-insensitive), as `wgpu::util::initialize_adapter_from_env` does; no match fails the test with the list of adapters | best adapter |
//! | `GPU_TEST_PERMIT_WGPU_ADAPTER` | the same for this crate's fixture only (your own `WGPU_ADAPTER_NAME` code is not affected); wins over `WGPU_ADAPTER_NAME` when both are set | `WGPU_ADAPTER_NAME` |
//! | `WGPU_POWER_PREF` | wgpu's own: `high` (discrete GPUs first), `low` (integrated first) or `none` (device type not considered: every adapter in wgpu's order); the order of the wgpu fixture's adapter choice | discrete, integrated, virtual, other, CPU |
//! | `WGPU_BACKEND` | wgpu's own: when set, the probe and the fixture try exactly the backends it names | Vulkan, Metal, DX12, then GL |
//!
//! Durations are a whole number with an optional unit: `90`, `90s`, `1500ms`, `10m`, `1h`.
//!
//! # Where warnings show up
//!
//! A warning is worth nothing if nobody sees it, and both test runners hide a passing test's
//! output, so [`Config::global`] reports each process's warnings three ways:
//!
//! - **Standard error, once per process, one line each.** The lines are written to the
//!   `std::io::stderr()` handle directly, not with `eprintln!`, which `cargo test` (libtest)
//!   captures and shows only for failing tests: under `cargo test` they appear in the terminal
//!   even when every test passes. `cargo nextest` captures the whole process's output and shows
//!   it for failures only (or with `--success-output immediate`).
//! - **A record of the nextest run.** Under nextest ([`NextestEnv::run_id`] set), the first test
//!   process with warnings writes them to `config-warnings.log` in the slot directory, headed by
//!   the run id; later processes of the same run add only lines not yet there, and a new run
//!   with warnings replaces the file. `gpu-test-permit config` prints the configuration the
//!   current environment gives and the warnings of the last recorded run.
//! - **Failures, on request.** With [`STRICT_VAR`]`=1` the warnings are errors: every call of
//!   [`Config::global`] (so every permit, probe and skip decision) panics with them, which fails
//!   the test under either runner and shows the message where failures are shown. Set it on CI.
//!
//! ```
//! use gpu_test_permit::config::{Config, CONCURRENCY_VAR};
//!
//! let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "abc".into()));
//! assert_eq!(cfg.concurrency.get(), 2);
//! assert_eq!(
//!     cfg.warnings[0].to_string(),
//!     "REALIZAR_GPU_TEST_CONCURRENCY='abc' is not a whole number; using 2"
//! );
//! let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| " 3 ".into()));
//! assert_eq!((cfg.concurrency.get(), cfg.warnings.len()), (3, 0));
//! ```

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Seek, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Permits per GPU (on a one-GPU host: per host). At least 1.
pub const CONCURRENCY_VAR: &str = "REALIZAR_GPU_TEST_CONCURRENCY";
/// Longest wait for a permit before the wait fails with holder diagnostics.
pub const TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_TIMEOUT";
/// Longest a permit may be held: past it the process prints what it knows (who holds permits,
/// since when, the N in force) and aborts, so a test stuck in a wedged driver fails the run
/// with a diagnosis instead of hanging it. `off` (the default) or a duration.
pub const HOLD_TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_HOLD_TIMEOUT";
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
/// with `cuda`, else 1), a count, or a comma-separated list of GPU ids (`0,2,3`; a single GPU
/// as `3,`). Each GPU gets [`CONCURRENCY_VAR`] permits; see [`Gpus`].
pub const GPUS_VAR: &str = "GPU_TEST_PERMIT_GPUS";
/// GPU memory per GPU that permits budget: a size with a unit (`64GiB`, `80GB`, `512MiB`, or
/// plain bytes) or a percentage (`90%`) of the smallest device memory the CUDA probe reports.
/// See [`MemoryBudget`].
pub const GPU_MEMORY_VAR: &str = "GPU_TEST_PERMIT_GPU_MEMORY";
/// `1` (or `true`, `yes`, `on`) turns configuration warnings into failures: [`Config::global`]
/// panics with them. `0`, `false`, `no`, `off` or unset: warnings only.
pub const STRICT_VAR: &str = "GPU_TEST_PERMIT_STRICT_CONFIG";
/// Set by `gpu-test-permit run` (and [`GpuTestPermit::pass_to`](crate::GpuTestPermit::pass_to))
/// for the command it starts: the permit held for it, as an [`InheritedPermit`]. A process that
/// finds a valid one takes none of the host's slots; its permits come out of the inherited
/// one, shared with the other processes working inside it.
pub const INHERITED_VAR: &str = "GPU_TEST_PERMIT_INHERITED";
/// The file in the slot directory where the test processes of a `cargo nextest` run record
/// their configuration warnings (see the module docs).
#[doc(hidden)] // the `config` command's
pub const WARNINGS_FILE: &str = "config-warnings.log";
/// Probe deadline when [`PROBE_TIMEOUT_VAR`] is not set.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Pins the wgpu fixture to adapters whose name contains this text (case-insensitive): this
/// crate's own form of [`WGPU_ADAPTER_NAME_VAR`], which it overrides when both are set, for
/// pinning the fixture without changing what your own wgpu code picks.
pub const WGPU_ADAPTER_VAR: &str = "GPU_TEST_PERMIT_WGPU_ADAPTER";
/// wgpu's own adapter choice (`wgpu::util::initialize_adapter_from_env`): a case-insensitive
/// part of the adapter's name. The wgpu fixture honours it.
pub const WGPU_ADAPTER_NAME_VAR: &str = "WGPU_ADAPTER_NAME";
/// wgpu's own power preference (`wgpu::PowerPreference::from_env`): `low`, `high` or `none`.
/// The wgpu fixture orders adapters by it.
pub const WGPU_POWER_PREF_VAR: &str = "WGPU_POWER_PREF";
/// wgpu's own variable choosing its backends; when set, the probe and the fixture try exactly
/// those (see `InstanceDescriptor::from_env` in wgpu).
pub const WGPU_BACKEND_VAR: &str = "WGPU_BACKEND";

/// Permits per GPU when [`CONCURRENCY_VAR`] is not set.
pub const DEFAULT_CONCURRENCY: usize = 2;
/// Largest accepted [`CONCURRENCY_VAR`]; larger values are almost certainly a typo.
pub const MAX_CONCURRENCY: usize = 1024;

/// The largest size [`parse_memory`] takes, in bytes: 1 PiB, far beyond any GPU (and the most
/// a trace event may declare).
pub const MAX_MEMORY: u64 = 1 << 50;

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

impl SlotDir {
    /// The directory: the [default](default_slot_dir) one, the one named, or why the named one
    /// cannot be used.
    pub fn path(&self) -> Result<PathBuf, String> {
        match self {
            SlotDir::Default => Ok(default_slot_dir()),
            SlotDir::Explicit(p) => Ok(p.clone()),
            SlotDir::Invalid(msg) => Err(msg.clone()),
        }
    }
}

/// The typed, validated configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Permits per GPU, from [`CONCURRENCY_VAR`].
    pub concurrency: NonZeroUsize,
    /// Wait deadline, from [`TIMEOUT_VAR`].
    pub timeout: Duration,
    /// Hold deadline, from [`HOLD_TIMEOUT_VAR`]; `None` is off.
    pub hold_timeout: Option<Duration>,
    /// Slot directory, from [`DIR_VAR`].
    pub slot_dir: SlotDir,
    /// Trace file, from [`TRACE_VAR`].
    pub trace: Option<PathBuf>,
    /// Required backends, from [`REQUIRE_VAR`]; an invalid value is kept as its error message
    /// and fails every GPU test, because guessing could turn a requirement off.
    pub require: Result<crate::backend::Policy, RequireError>,
    /// Probe child deadline, from [`PROBE_TIMEOUT_VAR`].
    pub probe_timeout: Duration,
    /// Where probes run, from [`PROBE_VAR`].
    pub probe_mode: crate::backend::ProbeMode,
    /// Skip ledger, from [`SKIP_LOG_VAR`].
    pub skip_log: Option<PathBuf>,
    /// How many GPUs the permits span, from [`GPUS_VAR`]: the count, or the length of the
    /// list; `None` is `auto`.
    pub gpus: Option<NonZeroUsize>,
    /// The GPU ids [`GPUS_VAR`] lists, when it is a list: permit device k is GPU
    /// `gpu_list[k]`. `None` for `auto` and a count (device k is GPU k). See
    /// [`Config::gpu_ids`].
    pub gpu_list: Option<Vec<usize>>,
    /// The wgpu adapter to pin, from [`WGPU_ADAPTER_VAR`] or else [`WGPU_ADAPTER_NAME_VAR`]
    /// (blank counts as unset).
    pub wgpu_adapter: Option<AdapterName>,
    /// The order of the wgpu fixture's adapter choice, from [`WGPU_POWER_PREF_VAR`]; `None`
    /// when unset (the fixture's own order).
    pub wgpu_power: Option<PowerPref>,
    /// What `cargo nextest` told this process, when it runs under nextest.
    pub nextest: Option<NextestEnv>,
    /// Whether warnings are failures, from [`STRICT_VAR`].
    pub strict: bool,
    /// The per-GPU memory budget, from [`GPU_MEMORY_VAR`]; `None` when unset (or rejected).
    pub gpu_memory: Option<MemoryBudget>,
    /// The permit a parent holds for this process, from [`INHERITED_VAR`]: `None` when unset,
    /// the reason when it cannot be parsed (the pool then says so once and takes permits as
    /// usual).
    pub inherited: Option<Result<InheritedPermit, String>>,
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
            "{}='{}' {}; using {}",
            self.var, self.value, self.problem, self.using
        )
    }
}

/// What [`GPU_MEMORY_VAR`] says: see [`parse_memory`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryBudget {
    /// This many bytes per GPU.
    Bytes(u64),
    /// This percentage (above 0, at most 100) of the smallest device memory the probe reports.
    Percent(f64),
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryBudget::Bytes(b) => f.write_str(&format_bytes(*b)),
            MemoryBudget::Percent(p) => write!(f, "{p}% of the device memory"),
        }
    }
}

/// `bytes` in the largest binary unit that keeps one decimal meaningful: `512 MiB`, `1.5 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// What [`GPUS_VAR`] says: see [`parse_gpus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gpus {
    /// `auto`: as many GPUs as the probe finds.
    Auto,
    /// A count n: GPUs 0 to n - 1.
    Count(NonZeroUsize),
    /// These GPU ids, distinct, in this order: permit device k is the k-th.
    List(Vec<usize>),
}

/// The wgpu adapter the fixture is pinned to: a case-insensitive part of its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterName {
    /// The variable it came from ([`WGPU_ADAPTER_VAR`] or [`WGPU_ADAPTER_NAME_VAR`]), for
    /// messages.
    pub var: &'static str,
    /// The text, trimmed, never empty.
    pub name: String,
}

/// [`WGPU_POWER_PREF_VAR`]: how the wgpu fixture orders adapters by device type, as wgpu's
/// `PowerPreference` does in `request_adapter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerPref {
    /// `none`: the device type is not considered; every adapter, in wgpu's order.
    None,
    /// `low`: integrated GPUs, then discrete, other, virtual, CPU.
    Low,
    /// `high`: discrete GPUs, then integrated, other, virtual, CPU.
    High,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        Config::from_lookup(|name| std::env::var_os(name))
    }

    /// The configuration of this process, read from the environment on first use. Its warnings
    /// are reported then, once: on standard error, and under nextest in the run's record (see
    /// the module docs).
    ///
    /// # Panics
    ///
    /// With [`STRICT_VAR`] set and any warning, on every call (except while the thread is
    /// already panicking), with the message of [`Config::strict_failure`].
    pub fn global() -> &'static Config {
        static GLOBAL: OnceLock<Config> = OnceLock::new();
        let cfg = GLOBAL.get_or_init(|| {
            let cfg = Config::from_env();
            cfg.report_warnings();
            cfg
        });
        if let Some(msg) = cfg.strict_failure()
            && !std::thread::panicking()
        {
            panic!("gpu-test-permit: {msg}");
        }
        cfg
    }

    /// With [`STRICT_VAR`] set and any warning: the message that fails the test.
    pub fn strict_failure(&self) -> Option<String> {
        if !self.strict || self.warnings.is_empty() {
            return None;
        }
        let mut msg = format!(
            "{STRICT_VAR} is set, so configuration warnings are errors; fix \
             these variables or unset {STRICT_VAR}:"
        );
        for w in &self.warnings {
            msg.push_str("\n  ");
            msg.push_str(&w.to_string());
        }
        Some(msg)
    }

    /// The slot directory this configuration names, or its error.
    pub fn slot_dir_path(&self) -> Result<PathBuf, String> {
        self.slot_dir.path()
    }

    /// The GPU ids of a pool spanning `gpus` GPUs, in permit-device order: permit device k is
    /// GPU `gpu_ids(gpus)[k]`. The list [`GPUS_VAR`] names, else `0..gpus` (a count or
    /// `auto`; pass the pool's [`gpus`](crate::PermitPool::gpus), which knows what `auto`
    /// found).
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, GPUS_VAR};
    ///
    /// let cfg = Config::from_lookup(|name| (name == GPUS_VAR).then(|| "0,2,3".into()));
    /// assert_eq!(cfg.gpus.map(|n| n.get()), Some(3));
    /// assert_eq!(cfg.gpu_ids(3), [0, 2, 3]);
    /// assert_eq!(Config::from_lookup(|_| None).gpu_ids(2), [0, 1]);
    /// ```
    pub fn gpu_ids(&self, gpus: usize) -> Vec<usize> {
        self.gpu_list.clone().unwrap_or_else(|| (0..gpus).collect())
    }

    /// The GPU id of permit device `device`: its entry in the list [`GPUS_VAR`] names (taken
    /// modulo the list's length), else `device` itself.
    pub fn gpu_id(&self, device: usize) -> usize {
        match &self.gpu_list {
            Some(ids) if !ids.is_empty() => ids[device % ids.len()],
            _ => device,
        }
    }

    fn report_warnings(&self) {
        if self.warnings.is_empty() {
            return;
        }
        let text: String = self
            .warnings
            .iter()
            .map(|w| format!("gpu-test-permit: {w}\n"))
            .collect();
        crate::notice::text(&text);
        let Some(run_id) = self.nextest.as_ref().and_then(|n| n.run_id.as_deref()) else {
            return;
        };
        let Ok(dir) = self.slot_dir_path() else {
            return; // refused with its own message at the first permit
        };
        if let Err(e) = record_warnings(&dir, run_id, &self.warnings) {
            crate::notice::line(&format!(
                "cannot record the configuration warnings in {}: {e}",
                dir.join(WARNINGS_FILE).display()
            ));
        }
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
        let hold_timeout = match lookup(HOLD_TIMEOUT_VAR) {
            None => None,
            Some(raw) if raw.to_str().map(str::trim) == Some("off") => None,
            Some(raw) => parse_duration(&raw)
                .map_err(|problem| warnings.push(warning(HOLD_TIMEOUT_VAR, &raw, problem, "off")))
                .ok(),
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
            None => Ok(crate::backend::Policy::none()),
            Some(raw) => utf8(&raw)
                .and_then(|s| {
                    s.parse::<crate::backend::Policy>()
                        .map_err(ValueError::Policy)
                })
                .map_err(|problem| RequireError {
                    value: raw.to_string_lossy().into_owned(),
                    problem,
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
            None => crate::backend::ProbeMode::Child,
            Some(raw) => match raw.to_str().map(str::trim) {
                Some("child") => crate::backend::ProbeMode::Child,
                Some("in-process") => crate::backend::ProbeMode::InProcess,
                _ => {
                    let problem = "is not child or in-process";
                    warnings.push(warning(PROBE_VAR, &raw, problem, "child"));
                    crate::backend::ProbeMode::Child
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
        let (gpus, gpu_list) = match lookup(GPUS_VAR).map(|raw| (parse_gpus(&raw), raw)) {
            None | Some((Ok(Gpus::Auto), _)) => (None, None),
            Some((Ok(Gpus::Count(n)), _)) => (Some(n), None),
            Some((Ok(Gpus::List(ids)), _)) => (NonZeroUsize::new(ids.len()), Some(ids)),
            Some((Err(problem), raw)) => {
                warnings.push(warning(GPUS_VAR, &raw, problem, "auto"));
                (None, None)
            }
        };
        let nextest = NextestEnv::from_lookup(&lookup, &mut warnings);
        let strict = match lookup(STRICT_VAR) {
            None => false,
            Some(raw) => match raw
                .to_str()
                .map(|s| s.trim().to_ascii_lowercase())
                .as_deref()
            {
                Some("1" | "true" | "yes" | "on") => true,
                Some("" | "0" | "false" | "no" | "off") => false,
                // Whoever set it meant something: a typo must not turn strictness off.
                _ => {
                    let problem = "is not 1, true, yes, on, 0, false, no or off";
                    warnings.push(warning(STRICT_VAR, &raw, problem, "1"));
                    true
                }
            },
        };
        let inherited = lookup(INHERITED_VAR).map(|raw| InheritedPermit::parse(&raw));
        let wgpu_adapter = [WGPU_ADAPTER_VAR, WGPU_ADAPTER_NAME_VAR]
            .into_iter()
            .find_map(|var| {
                let name = lookup(var)?.to_string_lossy().trim().to_string();
                (!name.is_empty()).then_some(AdapterName { var, name })
            });
        let wgpu_power = lookup(WGPU_POWER_PREF_VAR).and_then(|raw| {
            match raw
                .to_str()
                .map(|s| s.trim().to_ascii_lowercase())
                .as_deref()
            {
                Some("low") => Some(PowerPref::Low),
                Some("high") => Some(PowerPref::High),
                Some("none") => Some(PowerPref::None),
                _ => {
                    let problem = "is not low, high or none";
                    let using = "the fixture's own order";
                    warnings.push(warning(WGPU_POWER_PREF_VAR, &raw, problem, using));
                    None
                }
            }
        });
        let gpu_memory = lookup(GPU_MEMORY_VAR).and_then(|raw| {
            parse_memory(&raw)
                .map_err(|problem| {
                    let using = "no memory budget (memory declarations count as one permit)";
                    warnings.push(warning(GPU_MEMORY_VAR, &raw, problem, using));
                })
                .ok()
        });
        Config {
            strict,
            gpu_memory,
            inherited,
            wgpu_adapter,
            wgpu_power,
            gpu_list,
            hold_timeout,
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

/// A permit held by a parent process for this one: what [`INHERITED_VAR`] carries.
///
/// The parent (`gpu-test-permit run`) holds host slots and passes their open file descriptions
/// to the command it starts, as descriptors without close-on-exec, so that the command and
/// everything it starts share them: a `flock` lock belongs to the open file description, and
/// the slot stays locked while any process holding it lives, the parent killed with SIGKILL
/// included. The variable names those descriptors and what they must be:
///
/// ```text
/// GPU_TEST_PERMIT_INHERITED=1:<per_gpu>x<gpus>:<shared|exclusive>:<slot>=<fd>/<dev>/<ino>[@<gpu>][,...]:<dir>
/// ```
///
/// `1` is the format's version; `<per_gpu>x<gpus>` the GPUs and the permits per GPU that units
/// are counted in (memory declarations are converted with this N); then, per slot held, its
/// index in the slot directory `<dir>` (last, so that it may contain `:`), the descriptor number
/// in this process, the device and inode of the slot file, and the GPU it is for when that is
/// not `<slot> % <gpus>`. A process trusts it only after checking each descriptor: open, the
/// same file (device and inode) as `<dir>/gpu0.slot<i>`, and that file locked through that very
/// description.
///
/// The processes that work inside one inherited permit share its units through slot files of
/// their own, in a directory beside the parent's slots (`<dir>/gpu0.slot<first>.inside-<uid>`): at most
/// as many units as the parent holds are held by all of them together. A process among them
/// that passes its own permit on (a `gpu-test-permit run` inside another) names the slots of
/// that directory, with their GPUs.
///
/// ```
/// use gpu_test_permit::config::InheritedPermit;
///
/// let v = "1:2x1:shared:1=7/2049/131/:/tmp/gpu-test-permit-1000";
/// assert!(InheritedPermit::parse(v.as_ref()).is_err()); // a malformed slot
/// let v = "1:2x1:shared:1=7/2049/131:/tmp/slots:a";
/// let p = InheritedPermit::parse(v.as_ref()).unwrap();
/// assert_eq!((p.slots[0].index, p.slots[0].fd), (1, 7));
/// assert_eq!(p.dir, std::path::Path::new("/tmp/slots:a"));
/// assert_eq!(p.to_os_string(), v);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InheritedPermit {
    /// Permits per GPU in the slot directory.
    pub per_gpu: usize,
    /// GPUs the slot directory serves.
    pub gpus: usize,
    /// Whether the parent holds every slot.
    pub exclusive: bool,
    /// The slots held, by index: as many as a shared permit's units, all of one GPU; every
    /// slot for an exclusive one.
    pub slots: Vec<InheritedSlot>,
    /// The slot directory.
    pub dir: PathBuf,
}

/// One slot of an [`InheritedPermit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InheritedSlot {
    /// The slot's index (`gpu0.slot<index>`).
    pub index: usize,
    /// The descriptor, in the receiving process, of an open file description holding its lock.
    pub fd: u64,
    /// The slot file's device number.
    pub dev: u64,
    /// The slot file's inode number.
    pub ino: u64,
    /// The GPU the slot is for, when that is not its index modulo the GPUs (a slot of the
    /// directory in which the processes inside a permit share it).
    pub gpu: Option<usize>,
}

impl InheritedSlot {
    /// A slot held through descriptor `fd` of file `(dev, ino)`.
    pub fn new(index: usize, fd: u64, dev: u64, ino: u64) -> InheritedSlot {
        InheritedSlot {
            index,
            fd,
            dev,
            ino,
            gpu: None,
        }
    }

    /// The same slot, for GPU `gpu`.
    pub fn on_gpu(mut self, gpu: usize) -> InheritedSlot {
        self.gpu = Some(gpu);
        self
    }
}

impl InheritedPermit {
    /// A permit of `slots` in `dir`, laid out as `per_gpu` x `gpus`.
    pub fn new(
        per_gpu: usize,
        gpus: usize,
        exclusive: bool,
        slots: Vec<InheritedSlot>,
        dir: PathBuf,
    ) -> InheritedPermit {
        InheritedPermit {
            per_gpu,
            gpus,
            exclusive,
            slots,
            dir,
        }
    }

    /// Parses the value of [`INHERITED_VAR`].
    ///
    /// # Errors
    ///
    /// What is wrong with it, completing "GPU_TEST_PERMIT_INHERITED='...' ...".
    pub fn parse(raw: &std::ffi::OsStr) -> Result<InheritedPermit, String> {
        let bytes = raw.as_encoded_bytes();
        // The directory follows the fourth `:` and may contain more of them.
        let Some(split) = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b':')
            .nth(3)
            .map(|(i, _)| i)
        else {
            return Err("has fewer than five `:`-separated fields".into());
        };
        let head = std::str::from_utf8(&bytes[..split]).map_err(|_| "is not valid UTF-8")?;
        // SAFETY: the tail comes from `as_encoded_bytes` of one `OsStr`, split right after an
        // ASCII `:`, as `from_encoded_bytes_unchecked` requires.
        let dir = unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(&bytes[split + 1..]) };
        let fields: Vec<&str> = head.split(':').collect();
        let [version, layout, kind, slots] = fields[..] else {
            return Err("has fewer than five `:`-separated fields".into());
        };
        if version != "1" {
            return Err(format!("has format version {version}, not 1"));
        }
        let count = |s: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_CONCURRENCY).contains(n))
        };
        let (per_gpu, gpus) = layout
            .split_once('x')
            .and_then(|(n, g)| Some((count(n)?, count(g)?)))
            .ok_or_else(|| format!("has layout `{layout}`, not <per_gpu>x<gpus>"))?;
        let exclusive = match kind {
            "shared" => false,
            "exclusive" => true,
            _ => return Err(format!("has kind `{kind}`, not shared or exclusive")),
        };
        let slot = |s: &str| -> Option<InheritedSlot> {
            let (index, rest) = s.split_once('=')?;
            let (rest, gpu) = match rest.split_once('@') {
                Some((rest, gpu)) => (rest, Some(gpu.parse::<usize>().ok()?)),
                None => (rest, None),
            };
            let mut ids = rest.split('/').map(|n| n.parse::<u64>().ok());
            let (fd, dev, ino) = (ids.next()??, ids.next()??, ids.next()??);
            if ids.next().is_some() {
                return None;
            }
            let slot = InheritedSlot::new(index.parse().ok()?, fd, dev, ino);
            Some(match gpu {
                Some(g) => slot.on_gpu(g),
                None => slot,
            })
        };
        let slots = slots
            .split(',')
            .map(|s| {
                slot(s)
                    .ok_or_else(|| format!("has slot `{s}`, not <slot>=<fd>/<dev>/<ino>[@<gpu>]"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let total = per_gpu.saturating_mul(gpus);
        let gpu_of = |s: &InheritedSlot| s.gpu.unwrap_or(s.index % gpus);
        let fits = if exclusive {
            slots.iter().map(|s| s.index).eq(0..total)
                && slots.iter().all(|s| gpu_of(s) == s.index % gpus)
        } else {
            // A weighted permit: 1 to N distinct slots, all of one GPU.
            let mut indices: Vec<usize> = slots.iter().map(|s| s.index).collect();
            indices.sort_unstable();
            indices.dedup();
            indices.len() == slots.len()
                && slots.len() <= per_gpu
                && slots
                    .iter()
                    .all(|s| s.index < total && gpu_of(s) == gpu_of(&slots[0]))
        };
        if !fits {
            return Err(format!(
                "holds slots that do not fit a {kind} permit of {per_gpu}x{gpus}"
            ));
        }
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            return Err("names a slot directory that is not an absolute path".into());
        }
        Ok(InheritedPermit::new(per_gpu, gpus, exclusive, slots, dir))
    }

    /// The GPU slot `slot` of this permit is for.
    pub fn gpu_of(&self, slot: &InheritedSlot) -> usize {
        slot.gpu.unwrap_or(slot.index % self.gpus.max(1))
    }

    /// The value of [`INHERITED_VAR`] that [`parse`](Self::parse) reads back.
    pub fn to_os_string(&self) -> OsString {
        let slots: Vec<String> = self
            .slots
            .iter()
            .map(|s| {
                let gpu = match s.gpu {
                    Some(g) if g != s.index % self.gpus.max(1) => format!("@{g}"),
                    _ => String::new(),
                };
                format!("{}={}/{}/{}{gpu}", s.index, s.fd, s.dev, s.ino)
            })
            .collect();
        let kind = if self.exclusive {
            "exclusive"
        } else {
            "shared"
        };
        let mut out = OsString::from(format!(
            "1:{}x{}:{kind}:{}:",
            self.per_gpu,
            self.gpus,
            slots.join(",")
        ));
        out.push(&self.dir);
        out
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
            let s = s.trim();
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

/// Why an environment value was rejected. Its message completes a sentence that starts with
/// the variable and its value: `REALIZAR_GPU_TEST_CONCURRENCY='abc' is not a whole number`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueError {
    /// Not valid UTF-8.
    NotUtf8,
    /// Empty, or only whitespace.
    Empty,
    /// A count that is not made of digits.
    NotWholeNumber,
    /// A count above [`MAX_CONCURRENCY`].
    TooLarge,
    /// A count of zero.
    Zero,
    /// Not a duration like `90`, `90s`, `1500ms` or `10m`.
    NotDuration,
    /// A duration too long to represent.
    DurationTooLong,
    /// A duration of zero.
    ZeroDuration,
    /// Not one of the words the variable takes.
    NotOneOf(&'static str),
    /// A `GPU_TEST_PERMIT_REQUIRE` value that is no [`Policy`](crate::decision::Policy).
    Policy(crate::backend::PolicyError),
    /// A list of GPU ids with an entry that is not a whole number.
    NotGpuList,
    /// A list of GPU ids that names one twice.
    RepeatedGpu(usize),
    /// A list of more than [`MAX_CONCURRENCY`] GPU ids.
    TooManyGpus,
    /// Not a size like `64GiB`, `80GB`, `512MiB` or a percentage like `90%`.
    NotMemory,
    /// A size of zero, or a percentage outside (0, 100].
    MemoryOutOfRange,
    /// A size above 1 PiB: more memory than any GPU has (a byte count near `u64::MAX` is
    /// a typo or an overflow, not a budget).
    MemoryTooLarge,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::NotUtf8 => f.write_str("is not valid UTF-8"),
            ValueError::Empty => f.write_str("is empty"),
            ValueError::NotWholeNumber => f.write_str("is not a whole number"),
            ValueError::TooLarge => write!(f, "is larger than the maximum {MAX_CONCURRENCY}"),
            ValueError::Zero => f.write_str("must be at least 1"),
            ValueError::NotDuration => f.write_str("is not a duration like 90, 90s, 1500ms or 10m"),
            ValueError::DurationTooLong => f.write_str("is too large"),
            ValueError::ZeroDuration => f.write_str("must be greater than zero"),
            ValueError::NotOneOf(words) => write!(f, "is not {words}"),
            ValueError::Policy(e) => e.fmt(f),
            ValueError::NotGpuList => f.write_str("is not a count or a list of GPU ids like 0,2,3"),
            ValueError::RepeatedGpu(id) => write!(f, "lists GPU {id} more than once"),
            ValueError::TooManyGpus => write!(f, "lists more than {MAX_CONCURRENCY} GPUs"),
            ValueError::NotMemory => {
                f.write_str("is not a size like 64GiB, 80GB or 512MiB, or a percentage like 90%")
            }
            ValueError::MemoryOutOfRange => {
                f.write_str("must be a size above zero or a percentage above 0 and at most 100")
            }
            ValueError::MemoryTooLarge => {
                f.write_str("is larger than 1 PiB, more than any GPU has")
            }
        }
    }
}

impl std::error::Error for ValueError {}

impl From<ValueError> for String {
    fn from(e: ValueError) -> String {
        e.to_string()
    }
}

/// A `GPU_TEST_PERMIT_REQUIRE` that cannot be used: every GPU test that consults it fails
/// with this message, because guessing could turn a requirement off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequireError {
    /// The value as set, lossily converted to UTF-8.
    pub value: String,
    /// What is wrong with it.
    pub problem: ValueError,
}

impl fmt::Display for RequireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{REQUIRE_VAR}='{}' {}", self.value, self.problem)
    }
}

impl std::error::Error for RequireError {}

fn utf8(raw: &OsString) -> Result<&str, ValueError> {
    raw.to_str().ok_or(ValueError::NotUtf8)
}

/// Parses a permit count: digits only (surrounding whitespace ignored), 1 to
/// [`MAX_CONCURRENCY`].
///
/// # Errors
///
/// The [`ValueError`] that says what is wrong with `raw`.
pub fn parse_concurrency(raw: &OsString) -> Result<NonZeroUsize, ValueError> {
    let s = utf8(raw)?.trim();
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::NotWholeNumber);
    }
    let n: usize = s.parse().map_err(|_| ValueError::TooLarge)?;
    if n > MAX_CONCURRENCY {
        return Err(ValueError::TooLarge);
    }
    NonZeroUsize::new(n).ok_or(ValueError::Zero)
}

/// Parses [`GPUS_VAR`]: `auto`, a count (as [`parse_concurrency`]), or a comma-separated list
/// of distinct GPU ids (`0,2,3`). A value with a comma is a list, so a single GPU is written
/// `3,` (one trailing comma is allowed); surrounding whitespace is ignored, in entries too.
///
/// ```
/// use gpu_test_permit::config::{parse_gpus, Gpus};
///
/// assert_eq!(parse_gpus(&"auto".into()), Ok(Gpus::Auto));
/// assert_eq!(parse_gpus(&"2".into()).unwrap(), Gpus::Count(2.try_into().unwrap()));
/// assert_eq!(parse_gpus(&"0, 2,3".into()), Ok(Gpus::List(vec![0, 2, 3])));
/// assert_eq!(parse_gpus(&"3,".into()), Ok(Gpus::List(vec![3])));
/// assert!(parse_gpus(&"0,0".into()).is_err());
/// ```
///
/// # Errors
///
/// The [`ValueError`] that says what is wrong with `raw`.
pub fn parse_gpus(raw: &OsString) -> Result<Gpus, ValueError> {
    let s = utf8(raw)?.trim();
    if s == "auto" {
        return Ok(Gpus::Auto);
    }
    if !s.contains(',') {
        return parse_concurrency(raw).map(Gpus::Count);
    }
    let entries = s.strip_suffix(',').unwrap_or(s);
    let mut ids = Vec::new();
    for entry in entries.split(',').map(str::trim) {
        if entry.is_empty() || !entry.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::NotGpuList);
        }
        let id: usize = entry.parse().map_err(|_| ValueError::NotGpuList)?;
        if ids.contains(&id) {
            return Err(ValueError::RepeatedGpu(id));
        }
        ids.push(id);
    }
    if ids.len() > MAX_CONCURRENCY {
        return Err(ValueError::TooManyGpus);
    }
    Ok(Gpus::List(ids))
}

/// Parses a positive duration: a whole number followed by an optional unit `ms`, `s`, `m` or
/// `h` (no unit means seconds), e.g. `90`, `90s`, `1500ms`, `10m`; surrounding whitespace is
/// ignored.
///
/// # Errors
///
/// The [`ValueError`] that says what is wrong with `raw`.
pub fn parse_duration(raw: &OsString) -> Result<Duration, ValueError> {
    let s = utf8(raw)?.trim();
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(ValueError::NotDuration);
    }
    let n: u64 = digits.parse().map_err(|_| ValueError::DurationTooLong)?;
    let d = match unit {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(ValueError::NotDuration),
    }
    .map(Duration::from_millis)
    .ok_or(ValueError::DurationTooLong)?;
    if d.is_zero() {
        return Err(ValueError::ZeroDuration);
    }
    Ok(d)
}

/// Parses a memory budget: a whole or decimal number with an optional unit — `B`, `K`/`KB`,
/// `M`/`MB`, `G`/`GB`, `T`/`TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB` (powers of
/// 1024), case-insensitive, a space allowed before the unit; no unit means bytes — or a
/// percentage `p%` with 0 < p <= 100. A size is at most 1 PiB ([`MAX_MEMORY`]).
///
/// # Errors
///
/// The [`ValueError`] that says what is wrong with `raw`.
///
/// ```
/// use gpu_test_permit::config::{parse_memory, MemoryBudget};
/// assert_eq!(parse_memory(&"64GiB".into()), Ok(MemoryBudget::Bytes(64 << 30)));
/// assert_eq!(parse_memory(&"1.5 GB".into()), Ok(MemoryBudget::Bytes(1_500_000_000)));
/// assert_eq!(parse_memory(&" 90% ".into()), Ok(MemoryBudget::Percent(90.0)));
/// assert!(parse_memory(&"lots".into()).is_err());
/// ```
pub fn parse_memory(raw: &OsString) -> Result<MemoryBudget, ValueError> {
    let s = utf8(raw)?.trim();
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    if let Some(p) = s.strip_suffix('%') {
        let p: f64 = p.trim().parse().map_err(|_| ValueError::NotMemory)?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(ValueError::MemoryOutOfRange);
        }
        return Ok(MemoryBudget::Percent(p));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(ValueError::NotMemory);
    }
    let value: f64 = number.parse().map_err(|_| ValueError::NotMemory)?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(ValueError::NotMemory),
    };
    let bytes = (value * scale).round();
    // (Infinite where the digits overflow even an f64.)
    if bytes > MAX_MEMORY as f64 || !bytes.is_finite() {
        return Err(ValueError::MemoryTooLarge);
    }
    if bytes < 1.0 {
        return Err(ValueError::MemoryOutOfRange);
    }
    Ok(MemoryBudget::Bytes(bytes as u64))
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

/// Environment that changes what a probe finds, beside the machine itself: where drivers are
/// loaded from, which devices are visible, which wgpu backends and Vulkan drivers are used.
pub(crate) const PROBE_KEY_VARS: &[&str] = &[
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "WGPU_BACKEND",
    "WGPU_ADAPTER_NAME",
    "WGPU_POWER_PREF",
    "WGPU_GLES_MINOR_VERSION",
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
    "VK_ADD_DRIVER_FILES",
    "VK_LOADER_DRIVERS_SELECT",
    "VK_LOADER_DRIVERS_DISABLE",
    "VK_INSTANCE_LAYERS",
    "MESA_VK_DEVICE_SELECT",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "LIBGL_ALWAYS_SOFTWARE",
    "__EGL_VENDOR_LIBRARY_FILENAMES",
];

/// The value of one of [`PROBE_KEY_VARS`] in this process.
pub(crate) fn probe_key_var(name: &str) -> Option<OsString> {
    debug_assert!(PROBE_KEY_VARS.contains(&name));
    std::env::var_os(name)
}

/// The probe child's request, set by a probing parent for its child only (see
/// `probe::child`); a process started any other way ignores and removes it.
pub(crate) const PROBE_REQUEST_VAR: &str = "GPU_TEST_PERMIT_PROBE_CHILD";

/// Whether [`PROBE_REQUEST_VAR`] is set.
pub(crate) fn has_probe_request() -> bool {
    std::env::var_os(PROBE_REQUEST_VAR).is_some()
}

/// Reads and removes [`PROBE_REQUEST_VAR`], so that nothing this process starts inherits it.
///
/// # Safety
///
/// No other thread may read or write the environment meanwhile (it runs in a constructor,
/// before `main`).
pub(crate) unsafe fn take_probe_request() -> Option<OsString> {
    let raw = std::env::var_os(PROBE_REQUEST_VAR)?;
    // SAFETY: the caller guarantees that no other thread uses the environment now.
    unsafe { std::env::remove_var(PROBE_REQUEST_VAR) };
    Some(raw)
}

/// Whether wgpu's own [`WGPU_BACKEND_VAR`] is set. Read afresh: the probe child asks before
/// `main`, and a test may set it for the fixture.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_backend_set() -> bool {
    std::env::var_os(WGPU_BACKEND_VAR).is_some()
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

/// The configuration warnings recorded by the test processes of one `cargo nextest` run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[doc(hidden)] // the `config` command's
pub struct RecordedWarnings {
    /// The run's `NEXTEST_RUN_ID`.
    pub run_id: String,
    /// When the first of them was recorded, milliseconds since the Unix epoch.
    pub recorded_unix_ms: u64,
    /// The warning lines, as printed on standard error.
    pub lines: Vec<String>,
}

const RECORD_HEADER: &str = "# gpu-test-permit configuration warnings of nextest run";

/// The warnings recorded in slot directory `dir` by the last `cargo nextest` run that had any
/// (see the module docs), or `None` when none are recorded.
///
/// # Errors
///
/// Reading the file failed (other than its not existing), or it is not such a record.
#[doc(hidden)] // the `config` command's
pub fn recorded_warnings(dir: &Path) -> io::Result<Option<RecordedWarnings>> {
    let text = match std::fs::read_to_string(dir.join(WARNINGS_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(parse_record(&text))
}

fn parse_record(text: &str) -> Option<RecordedWarnings> {
    let mut lines = text.lines();
    let header = lines.next()?.strip_prefix(RECORD_HEADER)?;
    let (run_id, ms) = header.trim().rsplit_once(" at ")?;
    Some(RecordedWarnings {
        run_id: run_id.to_string(),
        recorded_unix_ms: ms.trim_end_matches(" ms").parse().ok()?,
        lines: lines
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// Adds `warnings` to the record of run `run_id` in `dir`, replacing the record of another run.
/// The file is locked while it is read and written, so concurrent test processes of one run
/// write each line once.
fn record_warnings(dir: &Path, run_id: &str, warnings: &[ConfigWarning]) -> io::Result<()> {
    crate::sys::prepare_dir(dir).map_err(io::Error::other)?;
    let mut file =
        crate::sys::open_lock_file(&dir.join(WARNINGS_FILE), crate::sys::is_shared_dir(dir))?;
    file.lock()?;
    let mut text = String::new();
    // A file that is not text is replaced like another run's record.
    let _ = file.read_to_string(&mut text);
    let mut lines: Vec<String> = match parse_record(&text) {
        Some(r) if r.run_id == run_id => r.lines,
        _ => {
            let now = crate::clock::now_unix_ms();
            file.set_len(0)?;
            file.seek(io::SeekFrom::Start(0))?;
            file.write_all(format!("{RECORD_HEADER} {run_id} at {now} ms\n").as_bytes())?;
            Vec::new()
        }
    };
    let mut add = String::new();
    for w in warnings {
        let line = w.to_string();
        if !lines.contains(&line) {
            add.push_str(&line);
            add.push('\n');
            lines.push(line);
        }
    }
    file.seek(io::SeekFrom::End(0))?;
    file.write_all(add.as_bytes())
}
