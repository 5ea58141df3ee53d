//! The variables' names, defaults and limits: the constants of the module docs' table.

use std::time::Duration;

/// Permits per GPU (on a one-GPU host: per host). At least 1; or `auto`: chosen for each run
/// from this host's history, up to [`MAX_CONCURRENCY_VAR`] (`gpu-test-permit history`
/// shows the history and the choice).
/// [`CONCURRENCY_ALIAS_VAR`] is the same, and wins when both are set.
///
/// ```
/// use gpu_test_permit::config::{Config, CONCURRENCY_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "3".into()));
/// assert_eq!(cfg.concurrency.get(), 3);
/// assert_eq!(cfg.concurrency_var, CONCURRENCY_VAR);
///
/// let auto = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "auto".into()));
/// assert!(auto.auto_concurrency);
/// ```
pub const CONCURRENCY_VAR: &str = "REALIZAR_GPU_TEST_CONCURRENCY";
/// The crate's own name for [`CONCURRENCY_VAR`], with the same values. When both are set this
/// one wins, with a configuration warning if they disagree. A blank value (empty or only
/// whitespace) of either name counts as unset when the other has one.
///
/// ```
/// use gpu_test_permit::config::{Config, CONCURRENCY_ALIAS_VAR, CONCURRENCY_VAR};
///
/// let cfg = Config::from_lookup(|name| match name {
///     CONCURRENCY_ALIAS_VAR => Some("4".into()),
///     CONCURRENCY_VAR => Some("3".into()),
///     _ => None,
/// });
/// assert_eq!(cfg.concurrency.get(), 4);
/// assert_eq!(cfg.concurrency_var, CONCURRENCY_ALIAS_VAR);
/// assert_eq!(cfg.warnings.len(), 1, "the two disagree");
/// ```
pub const CONCURRENCY_ALIAS_VAR: &str = "GPU_TEST_PERMIT_CONCURRENCY";
/// The most permits per GPU that [`CONCURRENCY_VAR`]`=auto` may choose: the ceiling the user
/// trusts. Default [`DEFAULT_MAX_CONCURRENCY`].
///
/// ```
/// use gpu_test_permit::config::{Config, MAX_CONCURRENCY_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == MAX_CONCURRENCY_VAR).then(|| "6".into()));
/// assert_eq!(cfg.max_concurrency.get(), 6);
/// ```
pub const MAX_CONCURRENCY_VAR: &str = "GPU_TEST_PERMIT_MAX_CONCURRENCY";
/// Longest wait for a permit before the wait fails with holder diagnostics.
///
/// ```
/// use gpu_test_permit::config::{Config, TIMEOUT_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == TIMEOUT_VAR).then(|| "90s".into()));
/// assert_eq!(cfg.timeout, std::time::Duration::from_secs(90));
/// ```
pub const TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_TIMEOUT";
/// Longest a permit may be held: past it the process prints what it knows (who holds permits,
/// since when, the N in force) and aborts, so a test stuck in a wedged driver fails the run
/// with a diagnosis instead of hanging it. `off` (the default) or a duration.
///
/// ```
/// use gpu_test_permit::config::{Config, HOLD_TIMEOUT_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == HOLD_TIMEOUT_VAR).then(|| "10m".into()));
/// assert_eq!(cfg.hold_timeout, Some(std::time::Duration::from_secs(600)));
/// assert_eq!(Config::from_lookup(|_| None).hold_timeout, None, "off by default");
/// ```
pub const HOLD_TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_HOLD_TIMEOUT";
/// What `gpu-test-permit watch`, as cargo's target runner, makes of a test process that died
/// or exited non-zero after every one of its tests had a result and none failed (a driver's
/// teardown that crashed, a process that hung at exit): `pass` (the default: the tests
/// passed; the fault is said and recorded) or `fail`.
///
/// ```
/// use gpu_test_permit::config::{Config, Teardown, TEARDOWN_VAR};
///
/// assert_eq!(Config::from_lookup(|_| None).teardown, Teardown::Pass);
/// let cfg = Config::from_lookup(|name| (name == TEARDOWN_VAR).then(|| "fail".into()));
/// assert_eq!(cfg.teardown, Teardown::Fail);
/// ```
pub const TEARDOWN_VAR: &str = "GPU_TEST_PERMIT_TEARDOWN";
/// How long `gpu-test-permit watch` waits, once every test of a test process has its result,
/// for the process to exit: past it the process hangs at exit, and the watch says what its
/// threads wait in, ends it (and what it started) and judges it a teardown fault.
///
/// ```
/// use gpu_test_permit::config::{Config, DEFAULT_EXIT_GRACE, EXIT_GRACE_VAR};
///
/// assert_eq!(Config::from_lookup(|_| None).exit_grace, DEFAULT_EXIT_GRACE);
/// let cfg = Config::from_lookup(|name| (name == EXIT_GRACE_VAR).then(|| "3s".into()));
/// assert_eq!(cfg.exit_grace, std::time::Duration::from_secs(3));
/// ```
pub const EXIT_GRACE_VAR: &str = "GPU_TEST_PERMIT_EXIT_GRACE";
/// [`EXIT_GRACE_VAR`]'s default: well inside nextest's default `slow-timeout` (60 s).
pub const DEFAULT_EXIT_GRACE: Duration = Duration::from_secs(10);
/// Directory of the host slot files.
///
/// ```
/// use gpu_test_permit::config::{Config, DIR_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == DIR_VAR).then(|| "/srv/gpu-slots".into()));
/// assert_eq!(cfg.slot_dir_path(), Ok("/srv/gpu-slots".into()));
/// ```
pub const DIR_VAR: &str = "GPU_TEST_PERMIT_DIR";
/// Directory of what the host must remember across reboots (the hang and contention-casualty
/// records that rule an N out): an absolute path. Unset: `$XDG_STATE_HOME/gpu-test-permit`
/// (else `~/.local/state/gpu-test-permit`) for the default slot directory, and a slot
/// directory named by [`DIR_VAR`] itself (whoever shares it shares its records). See
/// [`Config::state_dir_for`](crate::config::Config::state_dir_for).
///
/// ```
/// use gpu_test_permit::config::{Config, STATE_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == STATE_VAR).then(|| "/var/lib/gpu-state".into()));
/// assert_eq!(cfg.state_dir, Some("/var/lib/gpu-state".into()));
/// ```
pub const STATE_VAR: &str = "GPU_TEST_PERMIT_STATE";
/// File that wait and hold spans are appended to, as Chrome trace-event JSON.
///
/// ```
/// use gpu_test_permit::config::{Config, TRACE_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == TRACE_VAR).then(|| "target/gpu-trace.json".into()));
/// assert_eq!(cfg.trace, Some("target/gpu-trace.json".into()));
/// ```
pub const TRACE_VAR: &str = "GPU_TEST_PERMIT_TRACE";
/// Backends whose absence fails a GPU test instead of skipping it: `none`, `any`, `cuda`,
/// `wgpu` or a comma-separated list. An unknown word fails every GPU test.
///
/// ```
/// use gpu_test_permit::config::{Config, REQUIRE_VAR};
/// use gpu_test_permit::probe::Backend;
///
/// let cfg = Config::from_lookup(|name| (name == REQUIRE_VAR).then(|| "cuda".into()));
/// let policy = cfg.require.expect("a valid policy");
/// assert!(policy.requires(Backend::Cuda));
/// assert!(!policy.requires(Backend::Wgpu));
///
/// let typo = Config::from_lookup(|name| (name == REQUIRE_VAR).then(|| "cdua".into()));
/// assert!(typo.require.is_err(), "an unknown word fails every GPU test");
/// ```
pub const REQUIRE_VAR: &str = "GPU_TEST_PERMIT_REQUIRE";
/// Deadline for one backend probe child.
///
/// ```
/// use gpu_test_permit::config::{Config, PROBE_TIMEOUT_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == PROBE_TIMEOUT_VAR).then(|| "5s".into()));
/// assert_eq!(cfg.probe_timeout, std::time::Duration::from_secs(5));
/// ```
pub const PROBE_TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_PROBE_TIMEOUT";
/// `in-process` probes backends inside the test process instead of a child (`child`).
///
/// ```
/// use gpu_test_permit::config::{Config, PROBE_VAR};
/// use gpu_test_permit::probe::ProbeMode;
///
/// let cfg = Config::from_lookup(|name| (name == PROBE_VAR).then(|| "in-process".into()));
/// assert_eq!(cfg.probe_mode, ProbeMode::InProcess);
/// ```
pub const PROBE_VAR: &str = "GPU_TEST_PERMIT_PROBE";
/// File that every skip line is appended to.
///
/// ```
/// use gpu_test_permit::config::{Config, SKIP_LOG_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == SKIP_LOG_VAR).then(|| "target/gpu-skips.log".into()));
/// assert_eq!(cfg.skip_log, Some("target/gpu-skips.log".into()));
/// ```
pub const SKIP_LOG_VAR: &str = "GPU_TEST_PERMIT_SKIP_LOG";
/// What a test's permits are when nextest retries it (`NEXTEST_ATTEMPT` above 1): `alone` (the
/// default) makes them exclusive, so the retry has the GPU to itself; `same` keeps them as
/// asked. See [`RetryMode`](crate::config::RetryMode).
///
/// ```
/// use gpu_test_permit::config::{Config, RETRY_VAR, RetryMode};
///
/// let cfg = Config::from_lookup(|name| (name == RETRY_VAR).then(|| "same".into()));
/// assert_eq!(cfg.retry, RetryMode::Same);
/// assert_eq!(Config::from_lookup(|_| None).retry, RetryMode::Alone);
/// ```
pub const RETRY_VAR: &str = "GPU_TEST_PERMIT_RETRY";
/// GPUs the host's permits span: `auto` (CUDA devices the probe finds when the crate is built
/// with `cuda`, else 1), a count, or a comma-separated list of GPU ids (`0,2,3`; a single GPU
/// as `3,`). Each GPU gets [`CONCURRENCY_VAR`] permits.
///
/// ```
/// use gpu_test_permit::config::{Config, GPUS_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == GPUS_VAR).then(|| "0,2,3".into()));
/// assert_eq!(cfg.gpus.map(|n| n.get()), Some(3));
/// assert_eq!(cfg.gpu_list, Some(vec![0, 2, 3]));
/// assert_eq!(cfg.gpu_ids(3), [0, 2, 3]);
/// ```
pub const GPUS_VAR: &str = "GPU_TEST_PERMIT_GPUS";
/// GPU memory per GPU that permits budget: a size with a unit (`64GiB`, `80GB`, `512MiB`, or
/// plain bytes) or a percentage (`90%`) of the smallest device memory the CUDA probe reports.
/// See [`MemoryBudget`](crate::config::MemoryBudget).
///
/// ```
/// use gpu_test_permit::config::{Config, GPU_MEMORY_VAR, MemoryBudget};
///
/// let cfg = Config::from_lookup(|name| (name == GPU_MEMORY_VAR).then(|| "64GiB".into()));
/// assert_eq!(cfg.gpu_memory, Some(MemoryBudget::Bytes(64 << 30)));
/// ```
pub const GPU_MEMORY_VAR: &str = "GPU_TEST_PERMIT_GPU_MEMORY";
/// Whose word sets a permit's units: `declared` (the default: a permit takes what its test
/// declares: units, memory, exclusive; a test that declares nothing takes one unit) or
/// `learned`: with a memory budget in force ([`GPU_MEMORY_VAR`]), a test that declares nothing
/// takes the units its measured peak GPU memory (the most its fixture ever reported, kept in
/// the host's history, which `gpu-test-permit history` shows) plus
/// [`LEARNED_MARGIN_PERCENT`] needs, at most a whole GPU. A declaration always wins. See [`Weights`](crate::config::Weights).
///
/// ```
/// use gpu_test_permit::config::{Config, WEIGHTS_VAR, Weights};
///
/// let cfg = Config::from_lookup(|name| (name == WEIGHTS_VAR).then(|| "learned".into()));
/// assert_eq!(cfg.weights, Weights::Learned);
/// ```
pub const WEIGHTS_VAR: &str = "GPU_TEST_PERMIT_WEIGHTS";
/// Which GPUs of a multi-GPU host a permit goes to: `best-fit` (the default: the GPUs with
/// the fewest free units that fit, keeping whole GPUs free for big and multi-GPU permits) or
/// `spread` (the first that fit: one-unit permits spread over every GPU). See
/// [`Placement`](crate::config::Placement).
///
/// ```
/// use gpu_test_permit::config::{Config, PLACEMENT_VAR, Placement};
///
/// let cfg = Config::from_lookup(|name| (name == PLACEMENT_VAR).then(|| "spread".into()));
/// assert_eq!(cfg.placement, Placement::Spread);
/// ```
pub const PLACEMENT_VAR: &str = "GPU_TEST_PERMIT_PLACEMENT";
/// Whether a permit that declares memory also waits for that much to be free on its GPU now,
/// as NVML reports it: `auto` (the default: where `libnvidia-ml.so.1` loads) or `off` (the
/// declaration counts against the budget alone). See [`host`](crate::host).
///
/// ```
/// use gpu_test_permit::config::{Config, LIVE_MEMORY_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == LIVE_MEMORY_VAR).then(|| "off".into()));
/// assert!(!cfg.live_memory);
/// ```
pub const LIVE_MEMORY_VAR: &str = "GPU_TEST_PERMIT_LIVE_MEMORY";
/// Whether a request waiting behind the head of the queue may take free units past it where
/// the hold times on record say that does not delay the head: `on` (the default) or `off`
/// (first come, first served). See [`host`](crate::host).
///
/// ```
/// use gpu_test_permit::config::{Config, BACKFILL_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == BACKFILL_VAR).then(|| "off".into()));
/// assert!(!cfg.backfill);
/// assert!(Config::from_lookup(|_| None).backfill, "on by default");
/// ```
pub const BACKFILL_VAR: &str = "GPU_TEST_PERMIT_BACKFILL";
/// `1` (or `true`, `yes`, `on`) turns configuration warnings into failures: [`Config::global`](crate::config::Config::global)
/// panics with them. `0`, `false`, `no`, `off` or unset: warnings only.
///
/// ```
/// use gpu_test_permit::config::{Config, STRICT_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == STRICT_VAR).then(|| "1".into()));
/// assert!(cfg.strict);
/// ```
pub const STRICT_VAR: &str = "GPU_TEST_PERMIT_STRICT_CONFIG";
/// Set by `gpu-test-permit run` (and [`GpuTestPermit::pass_to`](crate::GpuTestPermit::pass_to))
/// for the command it starts: the permit held for it, as an [`InheritedPermit`](crate::config::InheritedPermit). A process that
/// finds a valid one takes none of the host's slots; its permits come out of the inherited
/// one, shared with the other processes working inside it.
///
/// ```
/// use gpu_test_permit::config::{Config, INHERITED_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == INHERITED_VAR).then(|| "not a permit".into()));
/// // A value that is not a permit is said once; the pool then takes permits as usual.
/// assert!(matches!(cfg.inherited, Some(Err(_))));
/// assert!(Config::from_lookup(|_| None).inherited.is_none());
/// ```
pub const INHERITED_VAR: &str = "GPU_TEST_PERMIT_INHERITED";
/// The file in the slot directory where the test processes of a `cargo nextest` run record
/// their configuration warnings (see the module docs).
#[doc(hidden)] // the `config` command's
pub const WARNINGS_FILE: &str = "config-warnings.log";
/// Probe deadline when [`PROBE_TIMEOUT_VAR`] is not set.
///
/// ```
/// use gpu_test_permit::config::{Config, DEFAULT_PROBE_TIMEOUT};
///
/// assert_eq!(Config::from_lookup(|_| None).probe_timeout, DEFAULT_PROBE_TIMEOUT);
/// ```
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Pins the wgpu fixture to adapters whose name contains this text (case-insensitive): this
/// crate's own form of [`WGPU_ADAPTER_NAME_VAR`], which it overrides when both are set, for
/// pinning the fixture without changing what your own wgpu code picks.
///
/// ```
/// use gpu_test_permit::config::{Config, WGPU_ADAPTER_NAME_VAR, WGPU_ADAPTER_VAR};
///
/// let cfg = Config::from_lookup(|name| match name {
///     WGPU_ADAPTER_VAR => Some("llvmpipe".into()),
///     WGPU_ADAPTER_NAME_VAR => Some("NVIDIA".into()),
///     _ => None,
/// });
/// let pinned = cfg.wgpu_adapter.expect("pinned");
/// assert_eq!((pinned.var, pinned.name.as_str()), (WGPU_ADAPTER_VAR, "llvmpipe"));
/// ```
pub const WGPU_ADAPTER_VAR: &str = "GPU_TEST_PERMIT_WGPU_ADAPTER";
/// wgpu's own adapter choice (`wgpu::util::initialize_adapter_from_env`): a case-insensitive
/// part of the adapter's name. The wgpu fixture honours it.
///
/// ```
/// use gpu_test_permit::config::{Config, WGPU_ADAPTER_NAME_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == WGPU_ADAPTER_NAME_VAR).then(|| "NVIDIA".into()));
/// assert_eq!(cfg.wgpu_adapter.map(|a| a.name), Some("NVIDIA".to_string()));
/// ```
pub const WGPU_ADAPTER_NAME_VAR: &str = "WGPU_ADAPTER_NAME";
/// wgpu's own power preference (`wgpu::PowerPreference::from_env`): `low`, `high` or `none`.
/// The wgpu fixture orders adapters by it.
///
/// ```
/// use gpu_test_permit::config::{Config, WGPU_POWER_PREF_VAR, PowerPref};
///
/// let cfg = Config::from_lookup(|name| (name == WGPU_POWER_PREF_VAR).then(|| "high".into()));
/// assert_eq!(cfg.wgpu_power, Some(PowerPref::High));
/// ```
pub const WGPU_POWER_PREF_VAR: &str = "WGPU_POWER_PREF";
/// wgpu's own variable choosing its backends; when set, the probe and the fixture try exactly
/// those (see `InstanceDescriptor::from_env` in wgpu).
///
/// ```
/// use gpu_test_permit::config::WGPU_BACKEND_VAR;
///
/// // wgpu's own name: `WGPU_BACKEND=vulkan` makes the probe and the fixture try Vulkan alone.
/// assert_eq!(WGPU_BACKEND_VAR, "WGPU_BACKEND");
/// ```
pub const WGPU_BACKEND_VAR: &str = "WGPU_BACKEND";

/// Permits per GPU when [`CONCURRENCY_VAR`] is not set.
///
/// ```
/// use gpu_test_permit::config::{Config, DEFAULT_CONCURRENCY};
///
/// assert_eq!(Config::from_lookup(|_| None).concurrency.get(), DEFAULT_CONCURRENCY);
/// ```
pub const DEFAULT_CONCURRENCY: usize = 2;
/// The ceiling of [`CONCURRENCY_VAR`]`=auto` when [`MAX_CONCURRENCY_VAR`] is not set: twice the
/// seed. Exploring past the seed costs at most one hung (or failing) run per step, and on the
/// GPU this crate was made for (an NVIDIA GB10) 4 is the first N known to break; an owner who
/// wants more sets the ceiling, one who will risk no failed run sets it to 2 or 3.
///
/// ```
/// use gpu_test_permit::config::{Config, DEFAULT_MAX_CONCURRENCY};
///
/// assert_eq!(Config::from_lookup(|_| None).max_concurrency.get(), DEFAULT_MAX_CONCURRENCY);
/// ```
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;
/// The margin [`WEIGHTS_VAR`]`=learned` adds to a test's measured peak memory before turning
/// it into units, in percent: a learned weight covers `peak x 1.25`. A measured peak is a
/// sample: the fixtures sample their memory every 10 ms, so an allocation that lives for less
/// is missed, and the wgpu allocator's report counts the test's allocations, not what the
/// driver reserves around them; the next run may also take another path through the test. A
/// quarter more covers that slack without pushing a test to the whole GPU for a few bytes: a
/// test measured at a third of the budget holds 2 of N = 4 units (42 %), not 3.
///
/// ```
/// use gpu_test_permit::config::LEARNED_MARGIN_PERCENT;
///
/// // A test measured at 8 GiB is weighed as needing 10 GiB.
/// let peak: u64 = 8 << 30;
/// assert_eq!(peak * (100 + LEARNED_MARGIN_PERCENT) / 100, 10 << 30);
/// ```
pub const LEARNED_MARGIN_PERCENT: u64 = 25;

/// Largest accepted [`CONCURRENCY_VAR`]; larger values are almost certainly a typo.
///
/// ```
/// use gpu_test_permit::config::{Config, CONCURRENCY_VAR, DEFAULT_CONCURRENCY, MAX_CONCURRENCY};
///
/// let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "5000".into()));
/// // Past the limit: a warning, and the default instead.
/// assert_eq!(cfg.concurrency.get(), DEFAULT_CONCURRENCY);
/// assert_eq!(cfg.warnings[0].var, CONCURRENCY_VAR);
/// assert!(5000 > MAX_CONCURRENCY);
/// ```
pub const MAX_CONCURRENCY: usize = 1024;

/// The largest memory size the crate takes ([`GPU_MEMORY_VAR`], a declared need), in bytes:
/// 1 PiB, far beyond any GPU (and the most a trace event may declare).
///
/// ```
/// use gpu_test_permit::config::{Config, GPU_MEMORY_VAR, MAX_MEMORY};
///
/// let cfg = Config::from_lookup(|name| (name == GPU_MEMORY_VAR).then(|| "2PiB".into()));
/// // More than any GPU: a warning, and no budget.
/// assert_eq!(cfg.gpu_memory, None);
/// assert_eq!(cfg.warnings[0].var, GPU_MEMORY_VAR);
/// assert!(2u64 << 50 > MAX_MEMORY);
/// ```
pub const MAX_MEMORY: u64 = 1 << 50;

/// Wait deadline when [`TIMEOUT_VAR`] is not set.
///
/// ```
/// use gpu_test_permit::config::{Config, DEFAULT_TIMEOUT};
///
/// assert_eq!(Config::from_lookup(|_| None).timeout, DEFAULT_TIMEOUT);
/// ```
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Set by `gpu-test-permit watch` (and `run --watch`) for the process it watches: the
/// dynamic loader's log file of the process without its `.<pid>` suffix (`LD_DEBUG_OUTPUT`),
/// into which the crate writes a line each time the process goes from no permit to one and
/// back (`gpu-test-permit watch` reads them).
///
/// ```
/// use gpu_test_permit::config::WATCH_VAR;
///
/// // `gpu-test-permit watch -- cargo test` sets it for the test processes; a test need not.
/// assert_eq!(WATCH_VAR, "GPU_TEST_PERMIT_WATCH");
/// ```
pub const WATCH_VAR: &str = "GPU_TEST_PERMIT_WATCH";

/// Set by `gpu-test-permit find-gpu-tests` for the suite it runs: the directory (an absolute
/// path) that the run's records (grants, releases, skips, driver loads, `auto`'s choice),
/// its configuration warnings and its test-group hint are written to instead of the slot
/// directory. The run's permits are still the host's, taken in the slot
/// directory beside everyone else's; only what it records stays apart from the host's runs
/// (`report`, the history `auto` and backfilling learn from). Not for setting by hand.
///
/// ```
/// use gpu_test_permit::config::{Config, RECORDS_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == RECORDS_VAR).then(|| "/tmp/find-run".into()));
/// assert_eq!(cfg.records_dir, Some("/tmp/find-run".into()));
/// ```
pub const RECORDS_VAR: &str = "GPU_TEST_PERMIT_RECORDS";
