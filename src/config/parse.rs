//! Parsers of the variables' values, each with a typed error that says what is wrong.

use std::ffi::OsString;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::values::{Gpus, MemoryBudget, Placement};
use super::vars::{MAX_CONCURRENCY, MAX_MEMORY, REQUIRE_VAR};

/// Why an environment value was rejected. Its message completes a sentence that starts with
/// the variable and its value: `REALIZAR_GPU_TEST_CONCURRENCY='abc' is not a whole number`.
///
/// ```
/// use gpu_test_permit::config::{Config, CONCURRENCY_VAR, ValueError};
///
/// let cfg = Config::from_lookup(|name| (name == CONCURRENCY_VAR).then(|| "0".into()));
/// assert_eq!(ValueError::Zero.to_string(), "must be at least 1");
/// assert_eq!(cfg.warnings[0].problem, ValueError::Zero.to_string());
/// ```
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
            ValueError::NotGpuList => f.write_str(
                "is not a count, a list of GPU ids like 0,2,3, or groups like 0,1,2,3;4,5,6,7",
            ),
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
///
/// ```
/// use gpu_test_permit::config::{Config, REQUIRE_VAR};
///
/// let cfg = Config::from_lookup(|name| (name == REQUIRE_VAR).then(|| "cdua".into()));
/// let e = cfg.require.unwrap_err();
/// assert_eq!(e.value, "cdua");
/// assert!(e.to_string().contains("cdua"), "{e}");
/// ```
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

pub(super) fn utf8(raw: &OsString) -> Result<&str, ValueError> {
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
    if !all_digits(s) {
        return Err(ValueError::NotWholeNumber);
    }
    let Ok(n) = s.parse::<usize>() else {
        return Err(ValueError::TooLarge);
    };
    if n > MAX_CONCURRENCY {
        return Err(ValueError::TooLarge);
    }
    NonZeroUsize::new(n).ok_or(ValueError::Zero)
}

/// Parses [`GPUS_VAR`](crate::config::GPUS_VAR): `auto`, a count (as [`parse_concurrency`]), or a comma-separated list
/// of distinct GPU ids (`0,2,3`), or groups of them separated by `;` (`0,1,2,3;4,5,6,7`: a
/// permit for several GPUs stays within one group). A value with a comma is a list, so a
/// single GPU is written `3,` (one trailing comma is allowed, and one trailing `;`); surrounding
/// whitespace is ignored, in entries too.
///
/// ```
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::config::parse_gpus;
/// use gpu_test_permit::__private::config::Gpus;
///
/// assert_eq!(parse_gpus(&"auto".into()), Ok(Gpus::Auto));
/// assert_eq!(parse_gpus(&"2".into()).unwrap(), Gpus::Count(2.try_into().unwrap()));
/// assert_eq!(parse_gpus(&"0, 2,3".into()), Ok(Gpus::List(vec![0, 2, 3])));
/// assert_eq!(parse_gpus(&"3,".into()), Ok(Gpus::List(vec![3])));
/// assert_eq!(
///     parse_gpus(&"0,1;2,3".into()),
///     Ok(Gpus::Groups(vec![vec![0, 1], vec![2, 3]]))
/// );
/// assert!(parse_gpus(&"0,0".into()).is_err());
/// assert!(parse_gpus(&"0,1;1,2".into()).is_err());
/// # }
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
    if !s.contains(',') && !s.contains(';') {
        return match parse_concurrency(raw) {
            Ok(n) => Ok(Gpus::Count(n)),
            Err(e) => Err(e),
        };
    }
    let mut ids = Vec::new();
    let mut groups = Vec::new();
    let grouped = s.contains(';');
    let s = if grouped {
        s.strip_suffix(';').unwrap_or(s)
    } else {
        s
    };
    for group in s.split(';') {
        let group = group.trim();
        let entries = group.strip_suffix(',').unwrap_or(group);
        let mut members = Vec::new();
        for entry in entries.split(',') {
            let entry = entry.trim();
            if entry.is_empty() || !all_digits(entry) {
                return Err(ValueError::NotGpuList);
            }
            let Ok(id) = entry.parse::<usize>() else {
                return Err(ValueError::NotGpuList);
            };
            if ids.contains(&id) {
                return Err(ValueError::RepeatedGpu(id));
            }
            ids.push(id);
            members.push(id);
        }
        groups.push(members);
    }
    if ids.len() > MAX_CONCURRENCY {
        return Err(ValueError::TooManyGpus);
    }
    Ok(if grouped {
        Gpus::Groups(groups)
    } else {
        Gpus::List(ids)
    })
}

/// Parses [`PLACEMENT_VAR`](crate::config::PLACEMENT_VAR): `best-fit` or `spread` (case and
/// surrounding whitespace ignored; `_` for `-`).
///
/// ```
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::config::parse_placement;
/// use gpu_test_permit::config::Placement;
///
/// assert_eq!(parse_placement(&"best-fit".into()), Ok(Placement::BestFit));
/// assert_eq!(parse_placement(&" Spread ".into()), Ok(Placement::Spread));
/// assert!(parse_placement(&"first".into()).is_err());
/// # }
/// ```
///
/// # Errors
///
/// [`ValueError::NotOneOf`] for any other word.
pub fn parse_placement(raw: &OsString) -> Result<Placement, ValueError> {
    let mut word = String::new();
    for c in utf8(raw)?.trim().chars() {
        word.push(if c == '_' {
            '-'
        } else {
            c.to_ascii_lowercase()
        });
    }
    match word.as_str() {
        "best-fit" | "bestfit" => Ok(Placement::BestFit),
        "spread" => Ok(Placement::Spread),
        _ => Err(ValueError::NotOneOf("best-fit or spread")),
    }
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
    let (digits, unit) = s.split_at(number_len(s, false));
    if digits.is_empty() {
        return Err(ValueError::NotDuration);
    }
    let Ok(n) = digits.parse::<u64>() else {
        return Err(ValueError::DurationTooLong);
    };
    let ms = match unit {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(ValueError::NotDuration),
    };
    let Some(ms) = ms else {
        return Err(ValueError::DurationTooLong);
    };
    let d = Duration::from_millis(ms);
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
/// # #[cfg(feature = "__cli")] { // only the command's build has `__private`
/// use gpu_test_permit::__private::config::parse_memory;
/// use gpu_test_permit::config::MemoryBudget;
/// assert_eq!(parse_memory(&"64GiB".into()), Ok(MemoryBudget::Bytes(64 << 30)));
/// assert_eq!(parse_memory(&"1.5 GB".into()), Ok(MemoryBudget::Bytes(1_500_000_000)));
/// assert_eq!(parse_memory(&" 90% ".into()), Ok(MemoryBudget::Percent(90.0)));
/// assert!(parse_memory(&"lots".into()).is_err());
/// # }
/// ```
pub fn parse_memory(raw: &OsString) -> Result<MemoryBudget, ValueError> {
    let s = utf8(raw)?.trim();
    if s.is_empty() {
        return Err(ValueError::Empty);
    }
    if let Some(p) = s.strip_suffix('%') {
        let Ok(p) = p.trim().parse::<f64>() else {
            return Err(ValueError::NotMemory);
        };
        if !(p > 0.0 && p <= 100.0) {
            return Err(ValueError::MemoryOutOfRange);
        }
        return Ok(MemoryBudget::Percent(p));
    }
    let (number, unit) = s.split_at(number_len(s, true));
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(ValueError::NotMemory);
    }
    let Ok(value) = number.parse::<f64>() else {
        return Err(ValueError::NotMemory);
    };
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

pub(super) fn parse_dir(raw: &OsString) -> Result<PathBuf, &'static str> {
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

/// Whether `s` is made of ASCII digits only (true when empty).
fn all_digits(s: &str) -> bool {
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return false;
        }
    }
    true
}

/// The length in bytes of the ASCII digits (and, with `dots`, dots) that `s` starts with.
fn number_len(s: &str, dots: bool) -> usize {
    for (i, c) in s.char_indices() {
        if !(c.is_ascii_digit() || dots && c == '.') {
            return i;
        }
    }
    s.len()
}
