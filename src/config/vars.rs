//! The variables' names, defaults and limits: the constants of the module docs' table.

use std::time::Duration;

/// Permits per GPU (on a one-GPU host: per host). At least 1; or `auto`: chosen for each run
/// from this host's history, up to [`MAX_CONCURRENCY_VAR`] (`gpu-test-permit history`
/// shows the history and the choice).
/// [`CONCURRENCY_ALIAS_VAR`] is the same, and wins when both are set.
pub const CONCURRENCY_VAR: &str = "REALIZAR_GPU_TEST_CONCURRENCY";
/// The crate's own name for [`CONCURRENCY_VAR`], with the same values. When both are set this
/// one wins, with a configuration warning if they disagree. A blank value (empty or only
/// whitespace) of either name counts as unset when the other has one.
pub const CONCURRENCY_ALIAS_VAR: &str = "GPU_TEST_PERMIT_CONCURRENCY";
/// The most permits per GPU that [`CONCURRENCY_VAR`]`=auto` may choose: the ceiling the user
/// trusts. Default [`DEFAULT_MAX_CONCURRENCY`].
pub const MAX_CONCURRENCY_VAR: &str = "GPU_TEST_PERMIT_MAX_CONCURRENCY";
/// Longest wait for a permit before the wait fails with holder diagnostics.
pub const TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_TIMEOUT";
/// Longest a permit may be held: past it the process prints what it knows (who holds permits,
/// since when, the N in force) and aborts, so a test stuck in a wedged driver fails the run
/// with a diagnosis instead of hanging it. `off` (the default) or a duration.
pub const HOLD_TIMEOUT_VAR: &str = "GPU_TEST_PERMIT_HOLD_TIMEOUT";
/// Directory of the host slot files.
pub const DIR_VAR: &str = "GPU_TEST_PERMIT_DIR";
/// Directory of what the host must remember across reboots (the hang and contention-casualty
/// records that rule an N out): an absolute path. Unset: `$XDG_STATE_HOME/gpu-test-permit`
/// (else `~/.local/state/gpu-test-permit`) for the default slot directory, and a slot
/// directory named by [`DIR_VAR`] itself (whoever shares it shares its records). See
/// [`Config::state_dir_for`](crate::config::Config::state_dir_for).
pub const STATE_VAR: &str = "GPU_TEST_PERMIT_STATE";
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
/// What a test's permits are when nextest retries it (`NEXTEST_ATTEMPT` above 1): `alone` (the
/// default) makes them exclusive, so the retry has the GPU to itself; `same` keeps them as
/// asked. See [`RetryMode`](crate::config::RetryMode).
pub const RETRY_VAR: &str = "GPU_TEST_PERMIT_RETRY";
/// GPUs the host's permits span: `auto` (CUDA devices the probe finds when the crate is built
/// with `cuda`, else 1), a count, or a comma-separated list of GPU ids (`0,2,3`; a single GPU
/// as `3,`). Each GPU gets [`CONCURRENCY_VAR`] permits; see [`Gpus`](crate::config::Gpus).
pub const GPUS_VAR: &str = "GPU_TEST_PERMIT_GPUS";
/// GPU memory per GPU that permits budget: a size with a unit (`64GiB`, `80GB`, `512MiB`, or
/// plain bytes) or a percentage (`90%`) of the smallest device memory the CUDA probe reports.
/// See [`MemoryBudget`](crate::config::MemoryBudget).
pub const GPU_MEMORY_VAR: &str = "GPU_TEST_PERMIT_GPU_MEMORY";
/// Whose word sets a permit's units: `declared` (the default: a permit takes what its test
/// declares: units, memory, exclusive; a test that declares nothing takes one unit) or
/// `learned`: with a memory budget in force ([`GPU_MEMORY_VAR`]), a test that declares nothing
/// takes the units its measured peak GPU memory (the most its fixture ever reported, kept in
/// the host's history, which `gpu-test-permit history` shows) plus [`LEARNED_MARGIN_PERCENT`] needs, at
/// most a whole GPU. A declaration always wins. See [`Weights`](crate::config::Weights).
pub const WEIGHTS_VAR: &str = "GPU_TEST_PERMIT_WEIGHTS";
/// Which GPUs of a multi-GPU host a permit goes to: `best-fit` (the default: the GPUs with
/// the fewest free units that fit, keeping whole GPUs free for big and multi-GPU permits) or
/// `spread` (the first that fit: one-unit permits spread over every GPU). See
/// [`Placement`](crate::config::Placement).
pub const PLACEMENT_VAR: &str = "GPU_TEST_PERMIT_PLACEMENT";
/// Whether a permit that declares memory also waits for that much to be free on its GPU now,
/// as NVML reports it: `auto` (the default: where `libnvidia-ml.so.1` loads) or `off` (the
/// declaration counts against the budget alone). See [`host`](crate::host).
pub const LIVE_MEMORY_VAR: &str = "GPU_TEST_PERMIT_LIVE_MEMORY";
/// Whether a request waiting behind the head of the queue may take free units past it where
/// the hold times on record say that does not delay the head: `on` (the default) or `off`
/// (first come, first served). See [`host`](crate::host).
pub const BACKFILL_VAR: &str = "GPU_TEST_PERMIT_BACKFILL";
/// `1` (or `true`, `yes`, `on`) turns configuration warnings into failures: [`Config::global`](crate::config::Config::global)
/// panics with them. `0`, `false`, `no`, `off` or unset: warnings only.
pub const STRICT_VAR: &str = "GPU_TEST_PERMIT_STRICT_CONFIG";
/// Set by `gpu-test-permit run` (and [`GpuTestPermit::pass_to`](crate::GpuTestPermit::pass_to))
/// for the command it starts: the permit held for it, as an [`InheritedPermit`](crate::config::InheritedPermit). A process that
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
/// The ceiling of [`CONCURRENCY_VAR`]`=auto` when [`MAX_CONCURRENCY_VAR`] is not set: twice the
/// seed. Exploring past the seed costs at most one hung (or failing) run per step, and on the
/// GPU this crate was made for (an NVIDIA GB10) 4 is the first N known to break; an owner who
/// wants more sets the ceiling, one who will risk no failed run sets it to 2 or 3.
pub const DEFAULT_MAX_CONCURRENCY: usize = 4;
/// The margin [`WEIGHTS_VAR`]`=learned` adds to a test's measured peak memory before turning
/// it into units, in percent: a learned weight covers `peak x 1.25`. A measured peak is a
/// sample: the fixtures sample their memory every 10 ms, so an allocation that lives for less
/// is missed, and the wgpu allocator's report counts the test's allocations, not what the
/// driver reserves around them; the next run may also take another path through the test. A
/// quarter more covers that slack without pushing a test to the whole GPU for a few bytes: a
/// test measured at a third of the budget holds 2 of N = 4 units (42 %), not 3.
pub const LEARNED_MARGIN_PERCENT: u64 = 25;

/// Largest accepted [`CONCURRENCY_VAR`]; larger values are almost certainly a typo.
pub const MAX_CONCURRENCY: usize = 1024;

/// The largest memory size the crate takes ([`GPU_MEMORY_VAR`], a declared need), in bytes:
/// 1 PiB, far beyond any GPU (and the most a trace event may declare).
pub const MAX_MEMORY: u64 = 1 << 50;

/// Wait deadline when [`TIMEOUT_VAR`] is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Set by `gpu-test-permit watch` (and `run --watch`) for the process it watches: the
/// dynamic loader's log file of the process without its `.<pid>` suffix (`LD_DEBUG_OUTPUT`),
/// into which the crate writes a line each time the process goes from no permit to one and
/// back (`gpu-test-permit watch` reads them).
pub const WATCH_VAR: &str = "GPU_TEST_PERMIT_WATCH";

/// Set by `gpu-test-permit find-gpu-tests` for the suite it runs: the directory (an absolute
/// path) that the run's records (grants, releases, skips, driver loads, `auto`'s choice), its configuration warnings and its test-group hint are written to
/// instead of the slot directory. The run's permits are still the host's, taken in the slot
/// directory beside everyone else's; only what it records stays apart from the host's runs
/// (`report`, the history `auto` and backfilling learn from). Not for setting by hand.
pub const RECORDS_VAR: &str = "GPU_TEST_PERMIT_RECORDS";
