//! The steps of [`Config::from_lookup`](super::Config::from_lookup): one function a group of
//! related variables, each reading its variables with `lookup` and adding a warning for each
//! value it rejects, in the order `from_lookup` calls them (the order of the warnings).

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::parse::{
    RequireError, ValueError, parse_concurrency, parse_dir, parse_duration, parse_gpus,
    parse_memory, parse_placement, utf8,
};
use super::values::{
    AdapterName, ConfigWarning, Gpus, MemoryBudget, Placement, PowerPref, RetryMode, SlotDir,
    Weights, warning,
};
use super::vars::*;

/// The lookup of [`Config::from_lookup`](super::Config::from_lookup).
pub(super) trait Lookup: Fn(&str) -> Option<OsString> {}
impl<L: Fn(&str) -> Option<OsString>> Lookup for L {}

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

pub(super) fn concurrency(lookup: &impl Lookup, warnings: &mut Warnings) -> Concurrency {
    let max = match lookup(MAX_CONCURRENCY_VAR) {
        None => NonZeroUsize::new(DEFAULT_MAX_CONCURRENCY).unwrap(),
        Some(raw) => parse_concurrency(&raw).unwrap_or_else(|problem| {
            let using = DEFAULT_MAX_CONCURRENCY;
            warnings.push(warning(MAX_CONCURRENCY_VAR, &raw, problem, using));
            NonZeroUsize::new(DEFAULT_MAX_CONCURRENCY).unwrap()
        }),
    };
    let mut auto = false;
    // The crate's own name wins; the other, when it says something else, is ignored with
    // a warning. A blank value of either name counts as unset where the other name has
    // one (`VAR=` in a script or CI file means "not set", and must not hide the other);
    // alone, it is a bad value like any other.
    let own = lookup(CONCURRENCY_ALIAS_VAR);
    let other = lookup(CONCURRENCY_VAR);
    let blank = |v: &Option<OsString>| v.as_ref().is_none_or(is_blank);
    let (own, other) = match (blank(&own), blank(&other)) {
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
                    format!(
                        "differs from {CONCURRENCY_ALIAS_VAR}='{}', which wins",
                        own.to_string_lossy()
                    ),
                    own.to_string_lossy().trim(),
                ));
            }
            (CONCURRENCY_ALIAS_VAR, Some(own))
        }
        None => (CONCURRENCY_VAR, other),
    };
    let n = match raw_concurrency {
        None => NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap(),
        Some(raw)
            if raw
                .to_str()
                .is_some_and(|s| s.trim().eq_ignore_ascii_case("auto")) =>
        {
            auto = true;
            NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap().min(max)
        }
        Some(raw) => parse_concurrency(&raw).unwrap_or_else(|problem| {
            warnings.push(warning(var, &raw, problem, DEFAULT_CONCURRENCY));
            NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap()
        }),
    };
    Concurrency { max, n, var, auto }
}

/// Whether `raw` is empty or only whitespace: for a variable with two names, as good as unset
/// where the other name has a value.
fn is_blank(raw: &OsString) -> bool {
    raw.to_string_lossy().trim().is_empty()
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
    lookup: &impl Lookup,
    warnings: &mut Warnings,
) -> (Duration, Option<Duration>) {
    let timeout = duration_or(lookup, TIMEOUT_VAR, DEFAULT_TIMEOUT, warnings);
    let hold_timeout = match lookup(HOLD_TIMEOUT_VAR) {
        None => None,
        Some(raw) if raw.to_str().map(str::trim) == Some("off") => None,
        Some(raw) => parse_duration(&raw)
            .map_err(|problem| warnings.push(warning(HOLD_TIMEOUT_VAR, &raw, problem, "off")))
            .ok(),
    };
    (timeout, hold_timeout)
}

/// The duration `var` says, else `default` (with a warning where its value is not one).
fn duration_or(
    lookup: &impl Lookup,
    var: &'static str,
    default: Duration,
    warnings: &mut Warnings,
) -> Duration {
    match lookup(var) {
        None => default,
        Some(raw) => parse_duration(&raw).unwrap_or_else(|problem| {
            let using = format!("{}s", default.as_secs());
            warnings.push(warning(var, &raw, problem, using));
            default
        }),
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
pub(super) fn directories(lookup: &impl Lookup, warnings: &mut Warnings) -> Directories {
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
    let user_state_home = lookup("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            lookup("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local").join("state"))
        });
    Directories {
        slot_dir,
        state_dir,
        records_dir,
        user_state_home,
    }
}

/// The absolute path `var` names; a relative one is ignored with a warning that `using` is used
/// instead.
fn absolute_path(
    lookup: &impl Lookup,
    var: &'static str,
    using: &str,
    warnings: &mut Warnings,
) -> Option<PathBuf> {
    lookup(var).and_then(|raw| {
        let path = PathBuf::from(&raw);
        if path.is_absolute() {
            Some(path)
        } else {
            warnings.push(warning(var, &raw, "is not an absolute path", using));
            None
        }
    })
}

/// The file `var` names to write to ([`TRACE_VAR`], [`SKIP_LOG_VAR`]); an empty value is
/// ignored with a warning that `using` is used instead.
pub(super) fn output_file(
    lookup: &impl Lookup,
    var: &'static str,
    using: &str,
    warnings: &mut Warnings,
) -> Option<PathBuf> {
    match lookup(var) {
        None => None,
        Some(raw) if raw.is_empty() => {
            warnings.push(warning(var, &raw, "is empty", using));
            None
        }
        Some(raw) => Some(PathBuf::from(raw)),
    }
}

/// What the probe must find ([`REQUIRE_VAR`]), how long it may take ([`PROBE_TIMEOUT_VAR`])
/// and where it runs ([`PROBE_VAR`]).
pub(super) fn probing(
    lookup: &impl Lookup,
    warnings: &mut Warnings,
) -> (
    Result<crate::backend::Policy, RequireError>,
    Duration,
    crate::backend::ProbeMode,
) {
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
    let probe_timeout = duration_or(lookup, PROBE_TIMEOUT_VAR, DEFAULT_PROBE_TIMEOUT, warnings);
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
    (require, probe_timeout, probe_mode)
}

/// How a retried test runs ([`RETRY_VAR`]).
pub(super) fn retry(lookup: &impl Lookup, warnings: &mut Warnings) -> RetryMode {
    match lookup(RETRY_VAR) {
        None => RetryMode::Alone,
        Some(raw) => match raw
            .to_str()
            .map(|s| s.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("alone") => RetryMode::Alone,
            Some("same") => RetryMode::Same,
            _ => {
                warnings.push(warning(RETRY_VAR, &raw, "is not alone or same", "alone"));
                RetryMode::Alone
            }
        },
    }
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

pub(super) fn gpus(lookup: &impl Lookup, warnings: &mut Warnings) -> GpuChoice {
    let mut groups_of = None;
    let (count, list) = match lookup(GPUS_VAR).map(|raw| (parse_gpus(&raw), raw)) {
        None | Some((Ok(Gpus::Auto), _)) => (None, None),
        Some((Ok(Gpus::Count(n)), _)) => (Some(n), None),
        Some((Ok(Gpus::List(ids)), _)) => (NonZeroUsize::new(ids.len()), Some(ids)),
        Some((Ok(Gpus::Groups(groups)), _)) => {
            let ids: Vec<usize> = groups.concat();
            let mut next = 0;
            groups_of = Some(
                groups
                    .iter()
                    .map(|g| {
                        next += g.len();
                        (next - g.len()..next).collect()
                    })
                    .collect(),
            );
            (NonZeroUsize::new(ids.len()), Some(ids))
        }
        Some((Err(problem), raw)) => {
            warnings.push(warning(GPUS_VAR, &raw, problem, "auto"));
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

pub(super) fn slot_policy(lookup: &impl Lookup, warnings: &mut Warnings) -> SlotPolicy {
    let live_memory = one_of(
        LIVE_MEMORY_VAR,
        lookup(LIVE_MEMORY_VAR),
        &[("auto", true), ("off", false)],
        warnings,
    );
    let backfill = one_of(
        BACKFILL_VAR,
        lookup(BACKFILL_VAR),
        &[("on", true), ("off", false)],
        warnings,
    );
    let placement = lookup(PLACEMENT_VAR).map_or(Placement::BestFit, |raw| {
        parse_placement(&raw).unwrap_or_else(|problem| {
            warnings.push(warning(PLACEMENT_VAR, &raw, problem, "best-fit"));
            Placement::BestFit
        })
    });
    SlotPolicy {
        live_memory,
        backfill,
        placement,
    }
}

/// [`STRICT_VAR`]: a value that is not a yes or a no counts as yes.
pub(super) fn strict(lookup: &impl Lookup, warnings: &mut Warnings) -> bool {
    match lookup(STRICT_VAR) {
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
    }
}

/// The adapter the wgpu fixture picks ([`WGPU_ADAPTER_VAR`], else [`WGPU_ADAPTER_NAME_VAR`])
/// and its power preference ([`WGPU_POWER_PREF_VAR`]).
pub(super) fn wgpu(
    lookup: &impl Lookup,
    warnings: &mut Warnings,
) -> (Option<AdapterName>, Option<PowerPref>) {
    let adapter = [WGPU_ADAPTER_VAR, WGPU_ADAPTER_NAME_VAR]
        .into_iter()
        .find_map(|var| {
            let name = lookup(var)?.to_string_lossy().trim().to_string();
            (!name.is_empty()).then_some(AdapterName { var, name })
        });
    let power = lookup(WGPU_POWER_PREF_VAR).and_then(|raw| {
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
    (adapter, power)
}

/// The GPU memory budget ([`GPU_MEMORY_VAR`]) and how tests are weighed against it
/// ([`WEIGHTS_VAR`]).
pub(super) fn memory(
    lookup: &impl Lookup,
    warnings: &mut Warnings,
) -> (Option<MemoryBudget>, Weights) {
    let gpu_memory = lookup(GPU_MEMORY_VAR).and_then(|raw| {
        parse_memory(&raw)
            .map_err(|problem| {
                let using = "no memory budget (memory declarations count as one permit)";
                warnings.push(warning(GPU_MEMORY_VAR, &raw, problem, using));
            })
            .ok()
    });
    let weights = one_of(
        WEIGHTS_VAR,
        lookup(WEIGHTS_VAR),
        &[
            ("declared", Weights::Declared),
            ("learned", Weights::Learned),
        ],
        warnings,
    );
    (gpu_memory, weights)
}

/// The value of the word `raw` of `var` names among `words` (case and surrounding whitespace
/// ignored); unset, the first word's; another word, the first word's with a warning.
fn one_of<T: Copy>(
    var: &'static str,
    raw: Option<OsString>,
    words: &[(&str, T)],
    warnings: &mut Warnings,
) -> T {
    let (first, default) = words[0];
    let Some(raw) = raw else {
        return default;
    };
    let word = raw.to_str().map(|s| s.trim().to_ascii_lowercase());
    if let Some(&(_, value)) = words.iter().find(|(w, _)| word.as_deref() == Some(*w)) {
        return value;
    }
    let names: Vec<&str> = words.iter().map(|(w, _)| *w).collect();
    let problem = format!("is not {}", names.join(" or "));
    warnings.push(warning(var, &raw, problem, first));
    default
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
            [STRICT_VAR, WGPU_POWER_PREF_VAR, GPU_MEMORY_VAR, WEIGHTS_VAR],
            "{vars:?}"
        );
        assert_eq!(cfg.concurrency.get(), 3);
        assert_eq!(cfg.concurrency_var, CONCURRENCY_ALIAS_VAR);
        assert!(cfg.strict && cfg.require.is_err() && matches!(cfg.slot_dir, SlotDir::Invalid(_)));
    }
}
