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
//! | `REALIZAR_GPU_TEST_CONCURRENCY` | permits per GPU, N (≥ 1, ≤ 1024), or `auto`: chosen at the start of each run from this host's history (`gpu-test-permit history` shows it) | 2 |
//! | `GPU_TEST_PERMIT_CONCURRENCY` | the same as `REALIZAR_GPU_TEST_CONCURRENCY`; when both are set this one wins, with a warning if they differ; a blank value of either counts as unset when the other has one | `REALIZAR_GPU_TEST_CONCURRENCY` |
//! | `GPU_TEST_PERMIT_MAX_CONCURRENCY` | the most permits per GPU `auto` may choose | 4 |
//! | `GPU_TEST_PERMIT_TIMEOUT` | longest wait for a permit: `90`, `90s`, `1500ms`, `10m`, `1h` | 10m |
//! | `GPU_TEST_PERMIT_HOLD_TIMEOUT` | longest a permit may be held; past it the process prints who holds permits, since when and the N in force, records the hang, and aborts (a wedged driver becomes a failure, not a hung run; `gpu-test-permit run` instead ends its command, then exits with 124); keep it below nextest's `slow-timeout` termination | off |
//! | `GPU_TEST_PERMIT_TEARDOWN` | what `gpu-test-permit watch`, as cargo's target runner, makes of a test process that crashed, or exited non-zero, after every one of its tests had its result and none failed (a teardown fault; a hang at exit is one): `pass` (said, recorded, and the run passes as its tests did) or `fail` | `pass` |
//! | `GPU_TEST_PERMIT_EXIT_GRACE` | how long `gpu-test-permit watch` lets a test process take to exit once every test has its result; past it the process hangs at exit: the watch names what its threads wait in, ends it and what it started, and judges a teardown fault | 10s |
//! | `GPU_TEST_PERMIT_DIR` | absolute path of the host slot directory (share it between users or containers) | `/tmp/gpu-test-permit-<uid>` |
//! | `GPU_TEST_PERMIT_STATE` | absolute path of the directory for what must outlive a reboot: the records of hangs and contention casualties that rule an N out (a wedged GPU often needs a reboot, which empties `/tmp`) | `$XDG_STATE_HOME/gpu-test-permit` (else `~/.local/state/gpu-test-permit`) with the default slot directory; a `GPU_TEST_PERMIT_DIR` itself |
//! | `GPU_TEST_PERMIT_TRACE` | file to append wait and hold spans to (Chrome trace events; Perfetto opens it) | off |
//! | `GPU_TEST_PERMIT_REQUIRE` | backends whose absence fails instead of skips: `none`, `any`, `cuda`, `wgpu`, `cuda,wgpu` | `none` |
//! | `GPU_TEST_PERMIT_PROBE_TIMEOUT` | deadline for one backend's probe child | 10s |
//! | `GPU_TEST_PERMIT_PROBE` | `child`, or `in-process` to probe inside the test process (faster, unprotected) | `child` |
//! | `GPU_TEST_PERMIT_SKIP_LOG` | file to append one line per skipped test to | off |
//! | `GPU_TEST_PERMIT_RETRY` | a test's permits on a nextest retry (`NEXTEST_ATTEMPT` > 1): `alone` (exclusive: the retry has the GPU to itself) or `same` (as asked) | `alone` |
//! | `GPU_TEST_PERMIT_GPUS` | GPUs the permits span, N each: `auto` (the CUDA devices the probe finds, with feature `cuda`, probed at a process's first permit, once per run under nextest; else 1), a count (`4`: GPUs 0 to 3), or a list of GPU ids (`0,2,3`; one GPU: `3,`) that permit device k maps to, as the process numbers its CUDA devices (after `CUDA_VISIBLE_DEVICES`), or groups of ids (`0,1,2,3;4,5,6,7`) that a permit for several GPUs ([`PermitRequest::gpus`](crate::PermitRequest::gpus)) stays within | `auto` |
//! | `GPU_TEST_PERMIT_LIVE_MEMORY` | `auto`: a permit that declares memory is granted only when its GPU has that much free now, as NVML (`libnvidia-ml.so.1`, loaded at run time where the driver provides it) reports it, less what other holders declared and have not yet allocated, plus a margin ([`host`](crate::host)); a wait held back by memory says whose processes use it. `off`: declarations count against the budget alone | `auto` |
//! | `GPU_TEST_PERMIT_BACKFILL` | `on`: while a request waits at the head of the queue for units that are not free yet (a heavy, exclusive or k-GPU one), a request behind it takes free units now if its hold time on record (the history's `gpu0.tests`) ends before the head could start, or if the head will not need those units; a request with no hold time on record never does ([`host`](crate::host)). `off`: first come, first served | `on` |
//! | `GPU_TEST_PERMIT_PLACEMENT` | which GPUs a permit goes to on a multi-GPU host: `best-fit` (the GPUs with the fewest free units that fit: whole GPUs stay free for big and multi-GPU permits) or `spread` (the first that fit: one-unit permits spread over every GPU) | `best-fit` |
//! | `GPU_TEST_PERMIT_GPU_MEMORY` | GPU memory per GPU that permits budget: a size (`64GiB`, `80GB`, `512MiB`, bytes) or a percentage of the smallest device memory the CUDA probe reports (`90%`); a permit declaring memory ([`acquire_memory`](crate::acquire_memory)) takes `ceil(bytes / (budget / N))` permit units. On unified-memory devices (GB10) set a size: the probe does not derive one | CUDA device memory (discrete GPUs, feature `cuda`), else none |
//! | `GPU_TEST_PERMIT_WEIGHTS` | `declared`: a permit takes the units its test declares (one when it declares nothing); `learned`: with a memory budget in force, a test that declares nothing takes the units its measured peak GPU memory plus [`LEARNED_MARGIN_PERCENT`] needs (at most a whole GPU), the peak being the most its fixture reported in the runs recorded on this host (`gpu-test-permit history` shows them); a declaration always wins | `declared` |
//! | `GPU_TEST_PERMIT_STRICT_CONFIG` | `1`: a bad value above fails the tests that read it instead of falling back (set it on CI) | off |
//! | `GPU_TEST_PERMIT_INHERITED` | set by `gpu-test-permit run` for its command: the permit it holds, which the command and its descendants work inside instead of taking host slots (see [`InheritedPermit`]); not for setting by hand | unset |
//! | `GPU_TEST_PERMIT_RECORDS` | set by `gpu-test-permit find-gpu-tests` for the suite it runs: an absolute directory that the run's records, configuration warnings and test-group hint go to instead of the slot directory (its permits are still the host's); not for setting by hand | the slot directory |
//! | `GPU_TEST_PERMIT_WATCH` | set by `gpu-test-permit watch` (and `run --watch`) for its command: the loader log into which the crate marks when the process holds a permit (`gpu-test-permit watch` reads it); not for setting by hand | unset |
//! | `WGPU_ADAPTER_NAME` | wgpu's own: the wgpu fixture uses only adapters whose name contains this text (case-insensitive), as `wgpu::util::initialize_adapter_from_env` does; no match fails the test with the list of adapters | best adapter |
//! | `GPU_TEST_PERMIT_WGPU_ADAPTER` | the same for this crate's fixture only (your own `WGPU_ADAPTER_NAME` code is not affected); wins over `WGPU_ADAPTER_NAME` when both are set | `WGPU_ADAPTER_NAME` |
//! | `WGPU_POWER_PREF` | wgpu's own: `high` (discrete GPUs first), `low` (integrated first) or `none` (device type not considered: every adapter in wgpu's order); the order of the wgpu fixture's adapter choice | discrete, integrated, virtual, other, CPU |
//! | `WGPU_BACKEND` | wgpu's own: when set, the probe and the fixture try exactly the backends it names (without the `wgpu` feature the probe, through the Vulkan loader, answers "not built" unless it names `vulkan`) | Vulkan, Metal, DX12, then GL (without the `wgpu` feature: Vulkan) |
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

mod inherited;
mod nextest;
pub(crate) mod parse;
mod read;
pub(crate) mod values;
mod vars;
pub(crate) mod warnings;

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

pub use inherited::{InheritedPermit, InheritedSlot};
pub use nextest::NextestEnv;
pub use parse::{RequireError, ValueError};
pub(crate) use values::format_bytes;
pub use values::{
    AdapterName, ConfigWarning, MemoryBudget, Placement, PowerPref, RetryMode, SlotDir, Teardown,
    Weights, default_slot_dir,
};
pub use vars::*;

use warnings::record_warnings;

/// The typed, validated configuration.
///
/// ```
/// use gpu_test_permit::config::{Config, CONCURRENCY_VAR, TIMEOUT_VAR};
///
/// // The process's own configuration, read once: `Config::global()`. For a test of how
/// // variables are read, any lookup will do.
/// let cfg = Config::from_lookup(|name| match name {
///     CONCURRENCY_VAR => Some("3".into()),
///     TIMEOUT_VAR => Some("2m".into()),
///     _ => None,
/// });
/// assert_eq!(cfg.concurrency.get(), 3);
/// assert_eq!(cfg.timeout, std::time::Duration::from_secs(120));
/// assert!(cfg.warnings.is_empty());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Permits per GPU, from [`CONCURRENCY_VAR`]; with `auto`, the seed (2, or the ceiling
    /// when lower), which a pool with no slot directory uses.
    pub concurrency: NonZeroUsize,
    /// The variable N is read from: [`CONCURRENCY_ALIAS_VAR`] when it is set (it wins; blank,
    /// it counts as unset where [`CONCURRENCY_VAR`] has a value), else [`CONCURRENCY_VAR`]
    /// (also when neither is set: the name messages give for it).
    pub concurrency_var: &'static str,
    /// [`CONCURRENCY_VAR`] is `auto`: the N of each run is chosen from this host's history
    /// when its slot directory is laid out (`gpu-test-permit history` shows how).
    pub auto_concurrency: bool,
    /// The most permits per GPU `auto` may choose, from [`MAX_CONCURRENCY_VAR`].
    pub max_concurrency: NonZeroUsize,
    /// Wait deadline, from [`TIMEOUT_VAR`].
    pub timeout: Duration,
    /// Hold deadline, from [`HOLD_TIMEOUT_VAR`]; `None` is off.
    pub hold_timeout: Option<Duration>,
    /// What a teardown fault makes of a test process under `gpu-test-permit watch`, from
    /// [`TEARDOWN_VAR`].
    pub teardown: Teardown,
    /// How long a test process may take to exit once its tests have their results, from
    /// [`EXIT_GRACE_VAR`].
    pub exit_grace: Duration,
    /// Slot directory, from [`DIR_VAR`].
    pub slot_dir: SlotDir,
    /// The state directory [`STATE_VAR`] names, when it is set to an absolute path.
    pub state_dir: Option<PathBuf>,
    /// The directory [`RECORDS_VAR`] names, when it is set to an absolute path: where this
    /// process's run records go instead of the slot directory (see
    /// [`Config::records_dir_for`]).
    pub records_dir: Option<PathBuf>,
    /// Where the per-user state goes by default: `$XDG_STATE_HOME` (absolute), else
    /// `$HOME/.local/state`; `None` without either.
    pub user_state_home: Option<PathBuf>,
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
    /// A retried test's permits, from [`RETRY_VAR`].
    pub retry: RetryMode,
    /// How many GPUs the permits span, from [`GPUS_VAR`]: the count, or the length of the
    /// list; `None` is `auto`.
    pub gpus: Option<NonZeroUsize>,
    /// The GPU ids [`GPUS_VAR`] lists, when it is a list: permit device k is GPU
    /// `gpu_list[k]`. `None` for `auto` and a count (device k is GPU k). See
    /// [`Config::gpu_ids`].
    pub gpu_list: Option<Vec<usize>>,
    /// The groups [`GPUS_VAR`] names (`0,1,2,3;4,5,6,7`), as permit devices (positions in
    /// `gpu_list`): a permit for several GPUs stays within one. `None` without groups.
    pub gpu_groups: Option<Vec<Vec<usize>>>,
    /// Which GPUs a permit goes to, from [`PLACEMENT_VAR`].
    pub placement: Placement,
    /// Whether a permit that declares memory waits for it to be free on its GPU (NVML), from
    /// [`LIVE_MEMORY_VAR`]: `true` for `auto` (where NVML loads), `false` for `off`.
    pub live_memory: bool,
    /// Whether requests behind a waiting head may take units past it, from [`BACKFILL_VAR`]:
    /// `true` for `on`, `false` for `off`.
    pub backfill: bool,
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
    /// Whose word sets the units of a test that declares nothing, from [`WEIGHTS_VAR`].
    pub weights: Weights,
    /// The permit a parent holds for this process, from [`INHERITED_VAR`]: `None` when unset,
    /// the reason when it cannot be parsed (the pool then says so once and takes permits as
    /// usual).
    pub inherited: Option<Result<InheritedPermit, String>>,
    /// One entry per variable whose value was rejected and replaced.
    pub warnings: Vec<ConfigWarning>,
}

impl Config {
    /// Reads the process environment.
    ///
    /// ```
    /// use gpu_test_permit::config::Config;
    ///
    /// // A fresh read (`Config::global()` is read once per process, and is what the crate uses).
    /// let cfg = Config::from_env();
    /// for w in &cfg.warnings {
    ///     eprintln!("{w}");
    /// }
    /// ```
    pub fn from_env() -> Config {
        Config::from_dyn_lookup(&env_var)
    }

    /// The configuration of this process, read from the environment on first use. Its warnings
    /// are reported then, once: on standard error, and under nextest in the run's record (see
    /// the module docs).
    ///
    /// # Panics
    ///
    /// With [`STRICT_VAR`] set and any warning, on every call (except while the thread is
    /// already panicking), with the message of [`Config::strict_failure`].
    ///
    /// ```
    /// use gpu_test_permit::config::Config;
    ///
    /// let cfg = Config::global();
    /// println!("N = {} per GPU (from {})", cfg.concurrency, cfg.concurrency_var);
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, STRICT_VAR, TIMEOUT_VAR};
    ///
    /// let cfg = Config::from_lookup(|name| match name {
    ///     STRICT_VAR => Some("1".into()),
    ///     TIMEOUT_VAR => Some("soon".into()),
    ///     _ => None,
    /// });
    /// assert!(cfg.strict_failure().unwrap().contains("GPU_TEST_PERMIT_TIMEOUT='soon'"));
    /// assert_eq!(Config::from_lookup(|_| None).strict_failure(), None);
    /// ```
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
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, DIR_VAR};
    ///
    /// let cfg = Config::from_lookup(|name| (name == DIR_VAR).then(|| "/srv/gpu-slots".into()));
    /// assert_eq!(cfg.slot_dir_path(), Ok("/srv/gpu-slots".into()));
    /// ```
    pub fn slot_dir_path(&self) -> Result<PathBuf, String> {
        self.slot_dir.path()
    }

    /// Where the records that must outlive a reboot (hangs, contention casualties) of slot
    /// directory `slot_dir` are kept: the directory [`STATE_VAR`] names; else, for the
    /// default slot directory (under `/tmp`, emptied by a reboot), `gpu-test-permit` in the
    /// user's state directory (`$XDG_STATE_HOME`, else `~/.local/state`); else `slot_dir`
    /// itself, which whoever named it chose and shares.
    ///
    /// ```
    /// use std::path::{Path, PathBuf};
    /// use gpu_test_permit::config::{default_slot_dir, Config};
    ///
    /// let cfg = Config::from_lookup(|name| (name == "HOME").then(|| "/home/ci".into()));
    /// assert_eq!(
    ///     cfg.state_dir_for(&default_slot_dir()),
    ///     PathBuf::from("/home/ci/.local/state/gpu-test-permit")
    /// );
    /// assert_eq!(cfg.state_dir_for(Path::new("/srv/gpu-slots")), PathBuf::from("/srv/gpu-slots"));
    /// ```
    pub fn state_dir_for(&self, slot_dir: &std::path::Path) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        match &self.user_state_home {
            Some(home) if slot_dir == default_slot_dir() => home.join("gpu-test-permit"),
            _ => slot_dir.to_path_buf(),
        }
    }

    /// Where the records of a nextest run (what `gpu-test-permit report` reads), its configuration warnings and
    /// its test-group hint that belong in slot directory `slot_dir` are written: the directory
    /// [`RECORDS_VAR`] names (a run `gpu-test-permit find-gpu-tests` keeps apart), else
    /// `slot_dir` itself.
    ///
    /// ```
    /// use std::path::{Path, PathBuf};
    /// use gpu_test_permit::config::{Config, RECORDS_VAR};
    ///
    /// let slots = Path::new("/srv/gpu-slots");
    /// assert_eq!(Config::from_lookup(|_| None).records_dir_for(slots), slots);
    /// let apart = Config::from_lookup(|name| (name == RECORDS_VAR).then(|| "/tmp/find".into()));
    /// assert_eq!(apart.records_dir_for(slots), PathBuf::from("/tmp/find"));
    /// ```
    pub fn records_dir_for(&self, slot_dir: &std::path::Path) -> PathBuf {
        match &self.records_dir {
            Some(dir) => dir.clone(),
            None => slot_dir.to_path_buf(),
        }
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
        match &self.gpu_list {
            Some(ids) => ids.clone(),
            None => (0..gpus).collect(),
        }
    }

    /// The GPU id of permit device `device`: its entry in the list [`GPUS_VAR`] names (taken
    /// modulo the list's length), else `device` itself.
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, GPUS_VAR};
    ///
    /// let cfg = Config::from_lookup(|name| (name == GPUS_VAR).then(|| "4,6".into()));
    /// assert_eq!((cfg.gpu_id(0), cfg.gpu_id(1)), (4, 6));
    /// assert_eq!(Config::from_lookup(|_| None).gpu_id(1), 1);
    /// ```
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
        let mut text = String::new();
        for w in &self.warnings {
            text.push_str(&format!("gpu-test-permit: {w}\n"));
        }
        crate::notice::text(&text);
        let Some(NextestEnv {
            run_id: Some(run_id),
            ..
        }) = &self.nextest
        else {
            return;
        };
        let Ok(dir) = self.slot_dir_path() else {
            return; // refused with its own message at the first permit
        };
        let dir = self.records_dir_for(&dir);
        if let Err(e) = record_warnings(&dir, run_id, &self.warnings) {
            crate::notice::line(&format!(
                "cannot record the configuration warnings in {}: {e}",
                dir.join(WARNINGS_FILE).display()
            ));
        }
    }

    /// Builds a configuration from any lookup function (for tests and tools); `lookup` returns
    /// `None` for an unset variable.
    ///
    /// ```
    /// use gpu_test_permit::config::{Config, CONCURRENCY_VAR};
    ///
    /// let vars = std::collections::HashMap::from([(CONCURRENCY_VAR, "3")]);
    /// let cfg = Config::from_lookup(|name| vars.get(name).map(Into::into));
    /// assert_eq!(cfg.concurrency.get(), 3);
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Config {
        Config::from_dyn_lookup(&lookup)
    }

    /// [`Config::from_lookup`], for any lookup.
    fn from_dyn_lookup(lookup: &read::Lookup<'_>) -> Config {
        let mut warnings = Vec::new();
        let w = &mut warnings;
        // In this order: the warnings are said in it.
        let cap = read::concurrency(lookup, w);
        let (timeout, hold_timeout) = read::deadlines(lookup, w);
        let dirs = read::directories(lookup, w);
        let trace = read::output_file(lookup, TRACE_VAR, "no trace", w);
        let (require, probe_timeout, probe_mode) = read::probing(lookup, w);
        let skip_log = read::output_file(lookup, SKIP_LOG_VAR, "no skip log", w);
        let retry = read::retry(lookup, w);
        let gpus = read::gpus(lookup, w);
        let slots = read::slot_policy(lookup, w);
        let nextest = NextestEnv::from_lookup(lookup, w);
        let strict = read::strict(lookup, w);
        let inherited = read::inherited(lookup);
        let (wgpu_adapter, wgpu_power) = read::wgpu(lookup, w);
        let (gpu_memory, weights) = read::memory(lookup, w);
        let (teardown, exit_grace) = read::verdicts(lookup, w);
        Config {
            teardown,
            exit_grace,
            strict,
            gpu_memory,
            weights,
            inherited,
            wgpu_adapter,
            wgpu_power,
            gpu_list: gpus.list,
            gpu_groups: gpus.groups,
            placement: slots.placement,
            live_memory: slots.live_memory,
            backfill: slots.backfill,
            hold_timeout,
            gpus: gpus.count,
            concurrency: cap.n,
            concurrency_var: cap.var,
            auto_concurrency: cap.auto,
            max_concurrency: cap.max,
            timeout,
            slot_dir: dirs.slot_dir,
            state_dir: dirs.state_dir,
            records_dir: dirs.records_dir,
            user_state_home: dirs.user_state_home,
            trace,
            require,
            probe_timeout,
            probe_mode,
            skip_log,
            retry,
            nextest,
            warnings,
        }
    }
}

/// The value of variable `name` in this process.
fn env_var(name: &str) -> Option<OsString> {
    std::env::var_os(name)
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

/// The variables that say where GPU drivers' manifests are (the Vulkan loader's and OpenCL's
/// search paths, and the home directory that `XDG_DATA_HOME` defaults under): a library a
/// manifest names is a driver on this machine (`drivers::driver_library`).
pub(crate) const DRIVER_MANIFEST_VARS: [&str; 12] = [
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
    "VK_ADD_DRIVER_FILES",
    "XDG_CONFIG_DIRS",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_DATA_DIRS",
    "HOME",
    "OCL_ICD_VENDORS",
    "OPENCL_VENDOR_PATH",
    "OCL_ICD_FILENAMES",
    "ZE_ENABLE_ALT_DRIVERS",
];

/// The value of one of [`DRIVER_MANIFEST_VARS`] in this process. Read afresh.
pub(crate) fn driver_manifest_var(name: &str) -> Option<OsString> {
    debug_assert!(DRIVER_MANIFEST_VARS.contains(&name));
    std::env::var_os(name)
}

/// The probe child's request, set by a probing parent for its child only (see
/// `probe::child`); a process started any other way ignores and removes it.
pub(crate) const PROBE_REQUEST_VAR: &str = "GPU_TEST_PERMIT_PROBE_CHILD";

/// Whether [`PROBE_REQUEST_VAR`] is set. Asked in every process, by a constructor
/// ([`is_set`]).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn has_probe_request() -> bool {
    is_set(const { PROBE_REQUEST_C.as_ptr() })
}

/// The names [`is_set`] is asked for: [`PROBE_REQUEST_VAR`], [`WATCH_VAR`], [`INHERITED_VAR`]
/// and nextest's run id.
const PROBE_REQUEST_C: &std::ffi::CStr = c"GPU_TEST_PERMIT_PROBE_CHILD";
const WATCH_C: &std::ffi::CStr = c"GPU_TEST_PERMIT_WATCH";
const INHERITED_C: &std::ffi::CStr = c"GPU_TEST_PERMIT_INHERITED";
const NEXTEST_RUN_ID_C: &std::ffi::CStr = c"NEXTEST_RUN_ID";

/// Whether the variable named by `name`, a NUL-terminated constant, is set. What runs in every
/// test process whatever its tests do (the constructors, the look at exit) asks with this. On
/// Unix it asks the C library's `getenv` ([`crate::sys::env_is_set`]), with no other call:
/// unoptimised, as tests are built, each helper `std::env::var_os` calls on the way (its string
/// and its drop, `Option`'s methods) is code elsewhere in the binary, which a new process
/// faults in 64 KiB at a time. The names are the constants' own
/// (`quick_names_are_the_variables`).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
fn is_set(name: *const std::ffi::c_char) -> bool {
    match crate::sys::env_is_set(name) {
        Some(set) => set,
        // SAFETY: `name` is a NUL-terminated constant.
        None => match unsafe { std::ffi::CStr::from_ptr(name) }.to_str() {
            Ok(name) => std::env::var_os(name).is_some(),
            Err(_) => false,
        },
    }
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

/// The loader log named by [`WATCH_VAR`], where a watcher runs this process. Read afresh.
pub(crate) fn watch_log() -> Option<OsString> {
    std::env::var_os(WATCH_VAR)
}

/// Whether a watcher runs this process ([`WATCH_VAR`] set). Read afresh ([`is_set`]).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn is_watched() -> bool {
    is_set(const { WATCH_C.as_ptr() })
}

/// The loader's own log file (`LD_DEBUG_OUTPUT`, glibc), which a watcher sets to the same
/// value as [`WATCH_VAR`]. Read afresh.
pub(crate) fn loader_log() -> Option<OsString> {
    std::env::var_os("LD_DEBUG_OUTPUT")
}

/// Whether this process runs inside a permit passed on to it ([`INHERITED_VAR`] set). Read
/// afresh, without the rest of the configuration (at exit, in a constructor).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn inherits_a_permit() -> bool {
    is_set(const { INHERITED_C.as_ptr() })
}

/// Whether this process belongs to a nextest run (`NEXTEST_RUN_ID` set). Read afresh, without
/// the rest of the configuration (in a constructor).
#[inline(always)] // runs in every test process (CONTRIBUTING.md)
pub(crate) fn in_nextest_run() -> bool {
    is_set(const { NEXTEST_RUN_ID_C.as_ptr() })
}

/// Whether wgpu's own [`WGPU_BACKEND_VAR`] is set. Read afresh: the probe child asks before
/// `main`, and a test may set it for the fixture.
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_backend_set() -> bool {
    std::env::var_os(WGPU_BACKEND_VAR).is_some()
}

/// wgpu's own [`WGPU_BACKEND_VAR`], when set (lossily as text). Read afresh, for the probe
/// child without the `wgpu` feature: it asks before `main`.
#[cfg(not(feature = "wgpu"))]
pub(crate) fn wgpu_backend() -> Option<String> {
    let value = std::env::var_os(WGPU_BACKEND_VAR)?;
    Some(value.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn quick_names_are_the_variables() {
        assert_eq!(PROBE_REQUEST_C.to_str(), Ok(PROBE_REQUEST_VAR));
        assert_eq!(WATCH_C.to_str(), Ok(WATCH_VAR));
        assert_eq!(INHERITED_C.to_str(), Ok(INHERITED_VAR));
        assert_eq!(NEXTEST_RUN_ID_C.to_str(), Ok("NEXTEST_RUN_ID"));
        // What this process has, asked both ways (`PATH` is set, the others almost surely not).
        for name in [
            c"PATH",
            c"GPU_TEST_PERMIT_NO_SUCH_VARIABLE",
            WATCH_C,
            INHERITED_C,
        ] {
            let by_std = std::env::var_os(name.to_str().unwrap()).is_some();
            assert_eq!(is_set(name.as_ptr()), by_std, "{name:?}");
        }
        assert!(is_set(c"PATH".as_ptr()));
    }

    #[test]
    fn the_crates_own_concurrency_name_sets_n_alone_and_wins_over_the_other() {
        let alone = config(&[(CONCURRENCY_ALIAS_VAR, "3")]);
        assert_eq!(alone.concurrency.get(), 3);
        assert_eq!(alone.concurrency_var, CONCURRENCY_ALIAS_VAR);
        assert!(alone.warnings.is_empty(), "{:?}", alone.warnings);

        let other = config(&[(CONCURRENCY_VAR, "5")]);
        assert_eq!(other.concurrency.get(), 5);
        assert_eq!(other.concurrency_var, CONCURRENCY_VAR);

        let both = config(&[(CONCURRENCY_ALIAS_VAR, "3"), (CONCURRENCY_VAR, "5")]);
        assert_eq!(both.concurrency.get(), 3);
        assert_eq!(
            both.warnings
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [format!(
                "{CONCURRENCY_VAR}='5' differs from {CONCURRENCY_ALIAS_VAR}='3', which wins; \
                 using 3"
            )]
        );
    }

    #[test]
    fn concurrency_names_that_agree_give_no_warning() {
        for (own, other) in [("3", " 3"), ("auto", "AUTO "), ("2", "2")] {
            let c = config(&[(CONCURRENCY_ALIAS_VAR, own), (CONCURRENCY_VAR, other)]);
            assert!(c.warnings.is_empty(), "{own} {other}: {:?}", c.warnings);
        }
        let auto = config(&[(CONCURRENCY_ALIAS_VAR, "auto"), (CONCURRENCY_VAR, "4")]);
        assert!(auto.auto_concurrency);
        assert_eq!(auto.warnings.len(), 1, "{:?}", auto.warnings);
    }

    #[test]
    fn a_blank_concurrency_name_is_unset_where_the_other_has_a_value() {
        for blank in ["", " ", "\t"] {
            for (blank_var, set_var) in [
                (CONCURRENCY_ALIAS_VAR, CONCURRENCY_VAR),
                (CONCURRENCY_VAR, CONCURRENCY_ALIAS_VAR),
            ] {
                let c = config(&[(blank_var, blank), (set_var, "1")]);
                assert_eq!(c.concurrency.get(), 1, "{blank_var}={blank:?}");
                assert_eq!(c.concurrency_var, set_var, "{blank_var}={blank:?}");
                assert!(
                    c.warnings.is_empty(),
                    "{blank_var}={blank:?}: {:?}",
                    c.warnings
                );
                let c = config(&[(blank_var, blank), (set_var, "auto")]);
                assert!(c.auto_concurrency, "{blank_var}={blank:?}");
            }
            // Both blank, or one alone: a bad value, named, with the value used instead.
            for vars in [
                &[(CONCURRENCY_ALIAS_VAR, blank), (CONCURRENCY_VAR, "")][..],
                &[(CONCURRENCY_ALIAS_VAR, blank)],
                &[(CONCURRENCY_VAR, blank)],
            ] {
                let c = config(vars);
                assert_eq!(c.concurrency.get(), DEFAULT_CONCURRENCY, "{vars:?}");
                let text: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
                assert_eq!(
                    text,
                    [format!(
                        "{}='{blank}' is empty; using {DEFAULT_CONCURRENCY}",
                        vars[0].0
                    )],
                    "{vars:?}"
                );
            }
        }
    }

    #[test]
    fn run_records_go_where_records_var_says_when_it_is_absolute() {
        let slots = std::path::Path::new("/srv/slots");
        let c = config(&[(RECORDS_VAR, "/tmp/find/records")]);
        assert_eq!(c.records_dir_for(slots), PathBuf::from("/tmp/find/records"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = config(&[(RECORDS_VAR, "records")]);
        assert_eq!(c.records_dir_for(slots), slots);
        let text: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["GPU_TEST_PERMIT_RECORDS='records' is not an absolute path; using the slot directory"]
        );
    }

    #[test]
    fn no_concurrency_warning_ends_without_the_value_used() {
        let values = ["", " ", "1", "2", "auto", "x", "0"];
        for own in values {
            for other in values {
                let c = config(&[(CONCURRENCY_ALIAS_VAR, own), (CONCURRENCY_VAR, other)]);
                for w in &c.warnings {
                    assert!(!w.using.trim().is_empty(), "{own:?} {other:?}: {w}");
                }
            }
        }
    }

    #[test]
    fn a_bad_value_of_the_crates_own_concurrency_name_is_named_in_its_warning() {
        let c = config(&[(CONCURRENCY_ALIAS_VAR, "x"), (CONCURRENCY_VAR, "4")]);
        assert_eq!(c.concurrency.get(), DEFAULT_CONCURRENCY);
        let text: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
        assert!(
            text.contains(&format!(
                "{CONCURRENCY_ALIAS_VAR}='x' is not a whole number; using {DEFAULT_CONCURRENCY}"
            )),
            "{text:?}"
        );
    }
}
