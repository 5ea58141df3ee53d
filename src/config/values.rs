//! The typed values the variables parse into, and the warning a rejected value gives.

use std::ffi::OsString;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// Where the host slot files live.
///
/// ```
/// use gpu_test_permit::config::{Config, DIR_VAR, SlotDir};
///
/// let named = Config::from_lookup(|name| (name == DIR_VAR).then(|| "/srv/gpu-slots".into()));
/// assert_eq!(named.slot_dir, SlotDir::Explicit("/srv/gpu-slots".into()));
/// // A relative directory would split the cap between working directories: refused.
/// let relative = Config::from_lookup(|name| (name == DIR_VAR).then(|| "slots".into()));
/// assert!(matches!(relative.slot_dir, SlotDir::Invalid(_)));
/// assert!(relative.slot_dir_path().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotDir {
    /// [`DIR_VAR`](crate::config::DIR_VAR) is unset: the per-user default directory (see [`default_slot_dir`]).
    Default,
    /// [`DIR_VAR`](crate::config::DIR_VAR) names this absolute directory.
    Explicit(PathBuf),
    /// [`DIR_VAR`](crate::config::DIR_VAR) is set to something unusable; permits are refused with this message,
    /// because falling back to another directory would silently split the cap.
    Invalid(String),
}

impl SlotDir {
    /// The directory: the [default](default_slot_dir) one, the one named, or why the named one
    /// cannot be used.
    ///
    /// ```
    /// use gpu_test_permit::config::{default_slot_dir, SlotDir};
    ///
    /// assert_eq!(SlotDir::Default.path(), Ok(default_slot_dir()));
    /// assert_eq!(SlotDir::Explicit("/srv/s".into()).path(), Ok("/srv/s".into()));
    /// assert!(SlotDir::Invalid("relative".into()).path().is_err());
    /// ```
    pub fn path(&self) -> Result<PathBuf, String> {
        match self {
            SlotDir::Default => Ok(default_slot_dir()),
            SlotDir::Explicit(p) => Ok(p.clone()),
            SlotDir::Invalid(msg) => Err(msg.clone()),
        }
    }
}

/// A rejected environment value and the value used instead.
///
/// ```
/// use gpu_test_permit::config::{Config, TIMEOUT_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == TIMEOUT_VAR).then(|| "soon".into()));
/// let w = &cfg.warnings[0];
/// assert_eq!((w.var, w.value.as_str()), (TIMEOUT_VAR, "soon"));
/// assert!(w.to_string().starts_with("GPU_TEST_PERMIT_TIMEOUT='soon' "));
/// ```
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

/// What [`GPU_MEMORY_VAR`](crate::config::GPU_MEMORY_VAR) says.
///
/// ```
/// use gpu_test_permit::config::{Config, GPU_MEMORY_VAR, MemoryBudget};
///
/// let budget = |v: &'static str| {
///     Config::from_lookup(move |name| (name == GPU_MEMORY_VAR).then(|| v.into())).gpu_memory
/// };
/// assert_eq!(budget("80GB"), Some(MemoryBudget::Bytes(80_000_000_000)));
/// assert_eq!(budget("90%"), Some(MemoryBudget::Percent(90.0)));
/// assert_eq!(MemoryBudget::Bytes(8 << 30).to_string(), "8 GiB");
/// ```
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

/// What [`GPUS_VAR`](crate::config::GPUS_VAR) says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gpus {
    /// `auto`: as many GPUs as the probe finds.
    Auto,
    /// A count n: GPUs 0 to n - 1.
    Count(NonZeroUsize),
    /// These GPU ids, distinct, in this order: permit device k is the k-th.
    List(Vec<usize>),
    /// Groups of GPU ids (`0,1,2,3;4,5,6,7`), distinct: permit device k is the k-th id in
    /// order, and a permit for several GPUs stays within one group.
    Groups(Vec<Vec<usize>>),
}

/// [`PLACEMENT_VAR`](crate::config::PLACEMENT_VAR): which GPUs of a multi-GPU host a permit
/// goes to (see [`host`](crate::host)).
///
/// ```
/// use gpu_test_permit::config::{Config, PLACEMENT_VAR, Placement};
///
/// assert_eq!(Config::from_lookup(|_| None).placement, Placement::BestFit);
/// let spread = Config::from_lookup(|name| (name == PLACEMENT_VAR).then(|| "spread".into()));
/// assert_eq!(spread.placement, Placement::Spread);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// `best-fit`: the GPUs with the fewest free units that still fit the request, so that
    /// small requests fill GPUs already in use and whole GPUs stay free for requests that need
    /// them whole.
    #[default]
    BestFit,
    /// `spread`: the first GPUs in order that fit (a one-unit request takes the lowest free
    /// slot, and slots alternate between GPUs), which spreads one-unit requests over every GPU.
    Spread,
}

/// The wgpu adapter the fixture is pinned to: a case-insensitive part of its name.
///
/// ```
/// use gpu_test_permit::config::{Config, WGPU_ADAPTER_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == WGPU_ADAPTER_VAR).then(|| " llvmpipe ".into()));
/// let pinned = cfg.wgpu_adapter.expect("pinned");
/// assert_eq!((pinned.var, pinned.name.as_str()), (WGPU_ADAPTER_VAR, "llvmpipe"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterName {
    /// The variable it came from ([`WGPU_ADAPTER_VAR`](crate::config::WGPU_ADAPTER_VAR) or [`WGPU_ADAPTER_NAME_VAR`](crate::config::WGPU_ADAPTER_NAME_VAR)), for
    /// messages.
    pub var: &'static str,
    /// The text, trimmed, never empty.
    pub name: String,
}

/// [`WGPU_POWER_PREF_VAR`](crate::config::WGPU_POWER_PREF_VAR): how the wgpu fixture orders adapters by device type, as wgpu's
/// `PowerPreference` does in `request_adapter`.
///
/// ```
/// use gpu_test_permit::config::{Config, PowerPref, WGPU_POWER_PREF_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == WGPU_POWER_PREF_VAR).then(|| "low".into()));
/// assert_eq!(cfg.wgpu_power, Some(PowerPref::Low));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerPref {
    /// `none`: the device type is not considered; every adapter, in wgpu's order.
    None,
    /// `low`: integrated GPUs, then discrete, other, virtual, CPU.
    Low,
    /// `high`: discrete GPUs, then integrated, other, virtual, CPU.
    High,
}

/// [`RETRY_VAR`](crate::config::RETRY_VAR): what a test's permit is on a retry (nextest's
/// `NEXTEST_ATTEMPT` above 1).
///
/// ```
/// use gpu_test_permit::config::{Config, RETRY_VAR, RetryMode};
///
/// assert_eq!(Config::from_lookup(|_| None).retry, RetryMode::Alone);
/// let same = Config::from_lookup(|name| (name == RETRY_VAR).then(|| "same".into()));
/// assert_eq!(same.retry, RetryMode::Same);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RetryMode {
    /// `alone`: the retry's permits are exclusive, so the test reruns with the GPU to itself
    /// and a failure that only contention caused passes.
    #[default]
    Alone,
    /// `same`: a retry takes the permits it asks for, as the first attempt did.
    Same,
}

/// [`TEARDOWN_VAR`](crate::config::TEARDOWN_VAR): what `gpu-test-permit watch` makes of a test
/// process that crashed or exited non-zero after every one of its tests had its result and
/// none failed.
///
/// ```
/// use gpu_test_permit::config::{Config, Teardown};
///
/// assert_eq!(Config::from_lookup(|_| None).teardown, Teardown::Pass);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Teardown {
    /// `pass`: the tests passed; the fault is said and recorded (as nextest's leak result).
    #[default]
    Pass,
    /// `fail`: the process fails as it ended.
    Fail,
}

/// [`WEIGHTS_VAR`](crate::config::WEIGHTS_VAR): whose word sets the units of a permit whose
/// test declares nothing.
///
/// ```
/// use gpu_test_permit::config::{Config, WEIGHTS_VAR, Weights};
///
/// assert_eq!(Config::from_lookup(|_| None).weights, Weights::Declared);
/// let learned = Config::from_lookup(|name| (name == WEIGHTS_VAR).then(|| "learned".into()));
/// assert_eq!(learned.weights, Weights::Learned);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weights {
    /// `declared`: only declarations count; a test that declares nothing takes one unit.
    #[default]
    Declared,
    /// `learned`: with a memory budget in force, a test that declares nothing takes the units
    /// its measured peak memory, plus
    /// [`LEARNED_MARGIN_PERCENT`](crate::config::LEARNED_MARGIN_PERCENT), needs.
    Learned,
}

/// The warning that `var`'s value `raw` has `problem` and `using` is used instead.
pub(super) fn warning(
    var: &'static str,
    raw: &OsString,
    problem: &dyn fmt::Display,
    using: &dyn fmt::Display,
) -> ConfigWarning {
    ConfigWarning {
        var,
        value: raw.to_string_lossy().into_owned(),
        problem: problem.to_string(),
        using: using.to_string(),
    }
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
/// owner; set [`DIR_VAR`](crate::config::DIR_VAR) then. The choice is made once per process.
///
/// ```
/// use gpu_test_permit::config::{default_slot_dir, Config};
///
/// // Without GPU_TEST_PERMIT_DIR the slots are in the per-user default directory.
/// let cfg = Config::from_lookup(|_| None);
/// assert_eq!(cfg.slot_dir_path(), Ok(default_slot_dir()));
/// ```
pub fn default_slot_dir() -> PathBuf {
    crate::sys::default_slot_dir()
}
