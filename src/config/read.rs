//! The steps of [`Config::from_lookup`](super::Config::from_lookup): one function a group of
//! related variables, each reading its variables with `lookup` and adding a warning for each
//! value it rejects, in the order `from_lookup` calls them (the order of the warnings).

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::inherited::InheritedPermit;
use super::parse::{
    RequireError, ValueError, parse_concurrency, parse_dir, parse_duration, parse_gpus,
    parse_memory, parse_placement, utf8,
};
use super::values::{
    AdapterName, ConfigWarning, Gpus, MemoryBudget, Placement, PowerPref, RetryMode, SlotDir,
    Teardown, Weights, warning,
};
use super::vars::*;

/// The lookup of [`Config::from_lookup`](super::Config::from_lookup).
pub(super) type Lookup<'a> = dyn Fn(&str) -> Option<OsString> + 'a;

/// The warnings of the values rejected so far.
type Warnings = Vec<ConfigWarning>;

/// How many permits: [`MAX_CONCURRENCY_VAR`], then [`CONCURRENCY_ALIAS_VAR`] or
/// [`CONCURRENCY_VAR`].
pub(super) struct Concurrency {
    pub(super) max: NonZeroUsize,
    pub(super) n: NonZeroUsize,
    /// The name whose value counts.
    pub(super) var: &'static str,
    /// `auto`: chosen for each run.
    pub(super) auto: bool,
}

/// [`DEFAULT_MAX_CONCURRENCY`] and [`DEFAULT_CONCURRENCY`], not zero.
const DEFAULT_MAX: NonZeroUsize = NonZeroUsize::new(DEFAULT_MAX_CONCURRENCY).unwrap();
const DEFAULT_N: NonZeroUsize = NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap();

pub(super) fn concurrency(lookup: &Lookup<'_>, warnings: &mut Warnings) -> Concurrency {
    let max = match lookup(MAX_CONCURRENCY_VAR) {
        None => DEFAULT_MAX,
        Some(raw) => match parse_concurrency(&raw) {
            Ok(n) => n,
            Err(problem) => {
                let using = DEFAULT_MAX_CONCURRENCY;
                warnings.push(warning(MAX_CONCURRENCY_VAR, &raw, &problem, &using));
                DEFAULT_MAX
            }
        },
    };
    let mut auto = false;
    // The crate's own name wins; the other, when it says something else, is ignored with
    // a warning. A blank value of either name counts as unset where the other name has
    // one (`VAR=` in a script or CI file means "not set", and must not hide the other);
    // alone, it is a bad value like any other.
    let own = lookup(CONCURRENCY_ALIAS_VAR);
    let other = lookup(CONCURRENCY_VAR);
    let (own, other) = match (unset_or_blank(&own), unset_or_blank(&other)) {
        (true, false) => (None, other),
        (false, true) => (own, None),
        _ => (own, other),
    };
    let (var, raw_concurrency) = match own {
        Some(own) => {
            if let Some(other) = other
                && concurrency_meaning(&other) != concurrency_meaning(&own)
            {
                warnings.push(warning(
                    CONCURRENCY_VAR,
                    &other,
                    &format!(
                        "differs from {CONCURRENCY_ALIAS_VAR}='{}', which wins",
                        own.to_string_lossy()
                    ),
                    &own.to_string_lossy().trim(),
                ));
            }
            (CONCURRENCY_ALIAS_VAR, Some(own))
        }
        None => (CONCURRENCY_VAR, other),
    };
    let n = match raw_concurrency {
        None => DEFAULT_N,
        Some(raw) if matches!(raw.to_str(), Some(s) if s.trim().eq_ignore_ascii_case("auto")) => {
            auto = true;
            DEFAULT_N.min(max)
        }
        Some(raw) => match parse_concurrency(&raw) {
            Ok(n) => n,
            Err(problem) => {
                warnings.push(warning(var, &raw, &problem, &DEFAULT_CONCURRENCY));
                DEFAULT_N
            }
        },
    };
    Concurrency { max, n, var, auto }
}

/// Whether `raw` is empty or only whitespace: for a variable with two names, as good as unset
/// where the other name has a value.
fn is_blank(raw: &OsString) -> bool {
    raw.to_string_lossy().trim().is_empty()
}

/// Whether `raw` is unset, or set [blank](is_blank).
fn unset_or_blank(raw: &Option<OsString>) -> bool {
    match raw {
        None => true,
        Some(raw) => is_blank(raw),
    }
}

/// `raw` without surrounding whitespace, when it is UTF-8.
fn trimmed(raw: &OsString) -> Option<&str> {
    Some(raw.to_str()?.trim())
}

/// `raw` without surrounding whitespace and in lower case, when it is UTF-8.
fn lower_word(raw: &OsString) -> Option<String> {
    Some(raw.to_str()?.trim().to_ascii_lowercase())
}

/// What a value of [`CONCURRENCY_VAR`] means, for telling whether two values agree: `auto`, a
/// valid N, or the value itself (trimmed).
fn concurrency_meaning(raw: &OsString) -> String {
    let text = raw.to_string_lossy().trim().to_ascii_lowercase();
    match parse_concurrency(raw) {
        Ok(n) => n.to_string(),
        Err(_) => text,
    }
}

/// How long a request waits ([`TIMEOUT_VAR`]) and a permit may be held
/// ([`HOLD_TIMEOUT_VAR`]).
pub(super) fn deadlines(
    lookup: &Lookup<'_>,
    warnings: &mut Warnings,
) -> (Duration, Option<Duration>) {
    let timeout = duration_or(lookup, TIMEOUT_VAR, DEFAULT_TIMEOUT, warnings);
    let hold_timeout = match lookup(HOLD_TIMEOUT_VAR) {
        None => None,
        Some(raw) if trimmed(&raw) == Some("off") => None,
        Some(raw) => match parse_duration(&raw) {
            Ok(d) => Some(d),
            Err(problem) => {
                warnings.push(warning(HOLD_TIMEOUT_VAR, &raw, &problem, &"off"));
                None
            }
        },
    };
    (timeout, hold_timeout)
}

/// The duration `var` says, else `default` (with a warning where its value is not one).
fn duration_or(
    lookup: &Lookup<'_>,
    var: &'static str,
    default: Duration,
    warnings: &mut Warnings,
) -> Duration {
    match lookup(var) {
        None => default,
        Some(raw) => match parse_duration(&raw) {
            Ok(d) => d,
            Err(problem) => {
                let using = format!("{}s", default.as_secs());
                warnings.push(warning(var, &raw, &problem, &using));
                default
            }
        },
    }
}

/// Where the crate keeps its files.
pub(super) struct Directories {
    pub(super) slot_dir: SlotDir,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) records_dir: Option<PathBuf>,
    pub(super) user_state_home: Option<PathBuf>,
}

/// [`DIR_VAR`], [`STATE_VAR`], [`RECORDS_VAR`] and the user's state home (`XDG_STATE_HOME`,
/// else `$HOME/.local/state`).
pub(super) fn directories(lookup: &Lookup<'_>, warnings: &mut Warnings) -> Directories {
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
    let state_dir = absolute_path(lookup, STATE_VAR, "the default state directory", warnings);
    let records_dir = absolute_path(lookup, RECORDS_VAR, "the slot directory", warnings);
    let user_state_home = user_state_home(lookup);
    Directories {
        slot_dir,
        state_dir,
        records_dir,
        user_state_home,
    }
}

/// The user's state home: `XDG_STATE_HOME`, else `$HOME/.local/state`, where absolute.
fn user_state_home(lookup: &Lookup<'_>) -> Option<PathBuf> {
    if let Some(state) = absolute(lookup("XDG_STATE_HOME")) {
        return Some(state);
    }
    let home = absolute(lookup("HOME"))?;
    Some(home.join(".local").join("state"))
}

/// The path `raw` names, when it is set and absolute.
fn absolute(raw: Option<OsString>) -> Option<PathBuf> {
    let path = PathBuf::from(raw?);
    if path.is_absolute() { Some(path) } else { None }
}

/// The absolute path `var` names; a relative one is ignored with a warning that `using` is used
/// instead.
fn absolute_path(
    lookup: &Lookup<'_>,
    var: &'static str,
    using: &str,
    warnings: &mut Warnings,
) -> Option<PathBuf> {
    let raw = lookup(var)?;
    let path = PathBuf::from(&raw);
    if path.is_absolute() {
        Some(path)
    } else {
        warnings.push(warning(var, &raw, &"is not an absolute path", &using));
        None
    }
}

/// The file `var` names to write to ([`TRACE_VAR`], [`SKIP_LOG_VAR`]); an empty value is
/// ignored with a warning that `using` is used instead.
pub(super) fn output_file(
    lookup: &Lookup<'_>,
    var: &'static str,
    using: &str,
    warnings: &mut Warnings,
) -> Option<PathBuf> {
    match lookup(var) {
        None => None,
        Some(raw) if raw.is_empty() => {
            warnings.push(warning(var, &raw, &"is empty", &using));
            None
        }
        Some(raw) => Some(PathBuf::from(raw)),
    }
}

/// What the probe must find ([`REQUIRE_VAR`]), how long it may take ([`PROBE_TIMEOUT_VAR`])
/// and where it runs ([`PROBE_VAR`]).
pub(super) fn probing(
    lookup: &Lookup<'_>,
    warnings: &mut Warnings,
) -> (
    Result<crate::backend::Policy, RequireError>,
    Duration,
    crate::backend::ProbeMode,
) {
    let require = match lookup(REQUIRE_VAR) {
        None => Ok(crate::backend::Policy::none()),
        Some(raw) => match utf8(&raw) {
            Ok(s) => match crate::backend::Policy::from_str(s) {
                Ok(policy) => Ok(policy),
                Err(e) => Err(require_error(&raw, ValueError::Policy(e))),
            },
            Err(problem) => Err(require_error(&raw, problem)),
        },
    };
    let probe_timeout = duration_or(lookup, PROBE_TIMEOUT_VAR, DEFAULT_PROBE_TIMEOUT, warnings);
    let probe_mode = match lookup(PROBE_VAR) {
        None => crate::backend::ProbeMode::Child,
        Some(raw) => match trimmed(&raw) {
            Some("child") => crate::backend::ProbeMode::Child,
            Some("in-process") => crate::backend::ProbeMode::InProcess,
            _ => {
                let problem = "is not child or in-process";
                warnings.push(warning(PROBE_VAR, &raw, &problem, &"child"));
                crate::backend::ProbeMode::Child
            }
        },
    };
    (require, probe_timeout, probe_mode)
}

/// The error of [`REQUIRE_VAR`]'s value `raw`.
fn require_error(raw: &OsString, problem: ValueError) -> RequireError {
    RequireError {
        value: raw.to_string_lossy().into_owned(),
        problem,
    }
}

/// How a retried test runs ([`RETRY_VAR`]).
pub(super) fn retry(lookup: &Lookup<'_>, warnings: &mut Warnings) -> RetryMode {
    match lookup(RETRY_VAR) {
        None => RetryMode::Alone,
        Some(raw) => match lower_word(&raw).as_deref() {
            Some("alone") => RetryMode::Alone,
            Some("same") => RetryMode::Same,
            _ => {
                warnings.push(warning(RETRY_VAR, &raw, &"is not alone or same", &"alone"));
                RetryMode::Alone
            }
        },
    }
}

/// What a teardown fault makes of a test process ([`TEARDOWN_VAR`]), and how long a test
/// process may take to exit once its tests have their results ([`EXIT_GRACE_VAR`]).
pub(super) fn verdicts(lookup: &Lookup<'_>, warnings: &mut Warnings) -> (Teardown, Duration) {
    let teardown = match lookup(TEARDOWN_VAR) {
        None => Teardown::Pass,
        Some(raw) => match lower_word(&raw).as_deref() {
            Some("pass") => Teardown::Pass,
            Some("fail") => Teardown::Fail,
            _ => {
                warnings.push(warning(TEARDOWN_VAR, &raw, &"is not pass or fail", &"pass"));
                Teardown::Pass
            }
        },
    };
    let grace = duration_or(lookup, EXIT_GRACE_VAR, DEFAULT_EXIT_GRACE, warnings);
    (teardown, grace)
}

/// The GPUs permits span ([`GPUS_VAR`]).
pub(super) struct GpuChoice {
    /// How many; `None`: as many as the probe finds.
    pub(super) count: Option<NonZeroUsize>,
    /// Their ids, where listed.
    pub(super) list: Option<Vec<usize>>,
    /// The groups of positions in `list`, where it was given in groups.
    pub(super) groups: Option<Vec<Vec<usize>>>,
}

pub(super) fn gpus(lookup: &Lookup<'_>, warnings: &mut Warnings) -> GpuChoice {
    let mut groups_of = None;
    let Some(raw) = lookup(GPUS_VAR) else {
        return GpuChoice {
            count: None,
            list: None,
            groups: None,
        };
    };
    let (count, list) = match parse_gpus(&raw) {
        Ok(Gpus::Auto) => (None, None),
        Ok(Gpus::Count(n)) => (Some(n), None),
        Ok(Gpus::List(ids)) => (NonZeroUsize::new(ids.len()), Some(ids)),
        Ok(Gpus::Groups(groups)) => {
            let ids: Vec<usize> = groups.concat();
            let mut positions = Vec::with_capacity(groups.len());
            let mut next = 0;
            for g in &groups {
                positions.push((next..next + g.len()).collect());
                next += g.len();
            }
            groups_of = Some(positions);
            (NonZeroUsize::new(ids.len()), Some(ids))
        }
        Err(problem) => {
            warnings.push(warning(GPUS_VAR, &raw, &problem, &"auto"));
            (None, None)
        }
    };
    GpuChoice {
        count,
        list,
        groups: groups_of,
    }
}

/// How the host slots fill the GPUs.
pub(super) struct SlotPolicy {
    /// [`LIVE_MEMORY_VAR`].
    pub(super) live_memory: bool,
    /// [`BACKFILL_VAR`].
    pub(super) backfill: bool,
    /// [`PLACEMENT_VAR`].
    pub(super) placement: Placement,
}

pub(super) fn slot_policy(lookup: &Lookup<'_>, warnings: &mut Warnings) -> SlotPolicy {
    let live_memory = one_of(
        LIVE_MEMORY_VAR,
        lookup(LIVE_MEMORY_VAR),
        &["auto", "off"],
        warnings,
    ) == 0;
    let backfill = one_of(BACKFILL_VAR, lookup(BACKFILL_VAR), &["on", "off"], warnings) == 0;
    let placement = match lookup(PLACEMENT_VAR) {
        None => Placement::BestFit,
        Some(raw) => match parse_placement(&raw) {
            Ok(placement) => placement,
            Err(problem) => {
                warnings.push(warning(PLACEMENT_VAR, &raw, &problem, &"best-fit"));
                Placement::BestFit
            }
        },
    };
    SlotPolicy {
        live_memory,
        backfill,
        placement,
    }
}

/// [`STRICT_VAR`]: a value that is not a yes or a no counts as yes.
pub(super) fn strict(lookup: &Lookup<'_>, warnings: &mut Warnings) -> bool {
    match lookup(STRICT_VAR) {
        None => false,
        Some(raw) => match lower_word(&raw).as_deref() {
            Some("1" | "true" | "yes" | "on") => true,
            Some("" | "0" | "false" | "no" | "off") => false,
            // Whoever set it meant something: a typo must not turn strictness off.
            _ => {
                let problem = "is not 1, true, yes, on, 0, false, no or off";
                warnings.push(warning(STRICT_VAR, &raw, &problem, &"1"));
                true
            }
        },
    }
}

/// The permit a parent passes on ([`INHERITED_VAR`]), parsed, when it is set.
pub(super) fn inherited(lookup: &Lookup<'_>) -> Option<Result<InheritedPermit, String>> {
    let raw = lookup(INHERITED_VAR)?;
    Some(InheritedPermit::parse(&raw))
}

/// The adapter the wgpu fixture picks ([`WGPU_ADAPTER_VAR`], else [`WGPU_ADAPTER_NAME_VAR`])
/// and its power preference ([`WGPU_POWER_PREF_VAR`]).
pub(super) fn wgpu(
    lookup: &Lookup<'_>,
    warnings: &mut Warnings,
) -> (Option<AdapterName>, Option<PowerPref>) {
    let mut adapter = None;
    for var in [WGPU_ADAPTER_VAR, WGPU_ADAPTER_NAME_VAR] {
        let Some(raw) = lookup(var) else {
            continue;
        };
        let name = raw.to_string_lossy().trim().to_string();
        if !name.is_empty() {
            adapter = Some(AdapterName { var, name });
            break;
        }
    }
    let power = match lookup(WGPU_POWER_PREF_VAR) {
        None => None,
        Some(raw) => match lower_word(&raw).as_deref() {
            Some("low") => Some(PowerPref::Low),
            Some("high") => Some(PowerPref::High),
            Some("none") => Some(PowerPref::None),
            _ => {
                let problem = "is not low, high or none";
                let using = "the fixture's own order";
                warnings.push(warning(WGPU_POWER_PREF_VAR, &raw, &problem, &using));
                None
            }
        },
    };
    (adapter, power)
}

/// The GPU memory budget ([`GPU_MEMORY_VAR`]) and how tests are weighed against it
/// ([`WEIGHTS_VAR`]).
pub(super) fn memory(
    lookup: &Lookup<'_>,
    warnings: &mut Warnings,
) -> (Option<MemoryBudget>, Weights) {
    let gpu_memory = match lookup(GPU_MEMORY_VAR) {
        None => None,
        Some(raw) => match parse_memory(&raw) {
            Ok(budget) => Some(budget),
            Err(problem) => {
                let using = "no memory budget (memory declarations count as one permit)";
                warnings.push(warning(GPU_MEMORY_VAR, &raw, &problem, &using));
                None
            }
        },
    };
    let weights = match one_of(
        WEIGHTS_VAR,
        lookup(WEIGHTS_VAR),
        &["declared", "learned"],
        warnings,
    ) {
        0 => Weights::Declared,
        _ => Weights::Learned,
    };
    (gpu_memory, weights)
}

/// The position among `words` of the word `raw` of `var` names (case and surrounding whitespace
/// ignored); unset, the first word's (0); another word, the first word's with a warning.
fn one_of(
    var: &'static str,
    raw: Option<OsString>,
    words: &[&str],
    warnings: &mut Warnings,
) -> usize {
    let Some(raw) = raw else {
        return 0;
    };
    let word = lower_word(&raw);
    for (i, w) in words.iter().enumerate() {
        if word.as_deref() == Some(*w) {
            return i;
        }
    }
    let problem = format!("is not {}", words.join(" or "));
    warnings.push(warning(var, &raw, &problem, &words[0]));
    0
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    #[test]
    fn the_steps_warn_in_the_order_the_variables_were_always_read() {
        let bad = |name: &str| -> Option<OsString> {
            Some(match name {
                CONCURRENCY_ALIAS_VAR => "3".into(),
                CONCURRENCY_VAR => "4".into(),
                STATE_VAR | RECORDS_VAR => "relative".into(),
                TRACE_VAR | SKIP_LOG_VAR => "".into(),
                GPUS_VAR => "0,0".into(),
                _ => "bogus".into(),
            })
        };
        let cfg = Config::from_lookup(bad);
        let vars: Vec<&str> = cfg.warnings.iter().map(|w| w.var).collect();
        let expected = [
            MAX_CONCURRENCY_VAR,
            CONCURRENCY_VAR,
            TIMEOUT_VAR,
            HOLD_TIMEOUT_VAR,
            STATE_VAR,
            RECORDS_VAR,
            TRACE_VAR,
            PROBE_TIMEOUT_VAR,
            PROBE_VAR,
            SKIP_LOG_VAR,
            RETRY_VAR,
            GPUS_VAR,
            LIVE_MEMORY_VAR,
            BACKFILL_VAR,
            PLACEMENT_VAR,
        ];
        assert_eq!(&vars[..expected.len()], expected, "{vars:?}");
        let rest = &vars[expected.len()..];
        let strict = rest.iter().position(|v| *v == STRICT_VAR).expect("strict");
        assert_eq!(
            &rest[strict..],
            [
                STRICT_VAR,
                WGPU_POWER_PREF_VAR,
                GPU_MEMORY_VAR,
                WEIGHTS_VAR,
                TEARDOWN_VAR,
                EXIT_GRACE_VAR
            ],
            "{vars:?}"
        );
        assert_eq!(cfg.concurrency.get(), 3);
        assert_eq!(cfg.concurrency_var, CONCURRENCY_ALIAS_VAR);
        assert!(cfg.strict && cfg.require.is_err() && matches!(cfg.slot_dir, SlotDir::Invalid(_)));
    }
}
