//! Which GPU a process started under a permit should see: the device-visibility variables
//! (`CUDA_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`) that pin it to the
//! permit's GPU, worked out by one pure function, [`export`].
//!
//! A permit names a device k of its pool ([`GpuTestPermit::device`](crate::GpuTestPermit::device));
//! the pool's GPU ids ([`Config::gpu_ids`](crate::config::Config::gpu_ids)) turn k into a GPU
//! id as the calling process numbers its devices; and the caller's own visibility variables,
//! when it has any, turn that id into the entry the driver understands. So a caller started
//! with `CUDA_VISIBLE_DEVICES=2,3` whose permit is for device 1 starts its child with
//! `CUDA_VISIBLE_DEVICES=3`, and the child sees that one GPU as its device 0.
//!
//! # The rules
//!
//! - `CUDA_VISIBLE_DEVICES` is always set: to the GPU id, or to the caller's entry at that
//!   position when the caller set the variable. Entries are passed through as written, so
//!   UUIDs (`GPU-8f3c...`, `MIG-...`) stay UUIDs.
//! - `HIP_VISIBLE_DEVICES` is set the same way when the caller set it.
//! - `ROCR_VISIBLE_DEVICES`, when the caller set it, is narrowed as well. ROCm applies it
//!   first and numbers what is left for HIP (`HIP_VISIBLE_DEVICES`, else
//!   `CUDA_VISIBLE_DEVICES`), so the HIP-level entry is looked up in the caller's ROCr list
//!   and `HIP_VISIBLE_DEVICES` becomes `0` (the one device left). When the HIP-level entry is
//!   a UUID, not a position, `ROCR_VISIBLE_DEVICES` is left as the caller set it.
//! - An exclusive permit holds every GPU of the pool and names none: it exports the whole
//!   pool, in pool order (so with `GPU_TEST_PERMIT_GPUS=0,2,3` the child sees GPUs 0, 2 and 3
//!   and not GPU 1, which the pool does not cover).
//! - A caller list is read as the drivers read it: entries separated by commas, surrounding
//!   whitespace ignored, and the list ends at the first empty or negative entry (`0,1,-1,2`
//!   is GPUs 0 and 1). A GPU id past the end of the caller's list is an error, never a guess.
//!
//! ```
//! use gpu_test_permit::devices::{export, VisibleDevices};
//!
//! // A test that starts a GPU program under its permit pins it to the permit's GPU.
//! let permit = gpu_test_permit::acquire();
//! let pool = gpu_test_permit::PermitPool::global();
//! let ids = gpu_test_permit::config::Config::global().gpu_ids(pool.gpus());
//! let caller = VisibleDevices::from_lookup(|name| std::env::var_os(name));
//! let mut child = std::process::Command::new("true");
//! for (var, value) in export(permit.device(), &ids, &caller)? {
//!     child.env(var, value);
//! }
//! # let _ = child;
//! # Ok::<(), gpu_test_permit::devices::ExportError>(())
//! ```

use std::ffi::OsString;
use std::fmt;

/// NVIDIA's variable: the CUDA devices a process sees, by index or UUID, in order.
///
/// ```
/// use gpu_test_permit::devices::{export, VisibleDevices, CUDA_VISIBLE_DEVICES};
///
/// // A permit for device 1 of a pool of GPUs 0 and 1, in a process that sees every GPU.
/// let vars = export(Some(1), &[0, 1], &VisibleDevices::default())?;
/// assert_eq!(vars, [(CUDA_VISIBLE_DEVICES, "1".to_string())]);
/// # Ok::<(), gpu_test_permit::devices::ExportError>(())
/// ```
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// AMD HIP's variable, applied after [`ROCR_VISIBLE_DEVICES`]; without it HIP reads
/// [`CUDA_VISIBLE_DEVICES`].
///
/// ```
/// use gpu_test_permit::devices::{export, VisibleDevices, HIP_VISIBLE_DEVICES};
///
/// let caller = VisibleDevices { hip: Some("2,3".into()), ..Default::default() };
/// let vars = export(Some(1), &[0, 1], &caller)?;
/// assert!(vars.contains(&(HIP_VISIBLE_DEVICES, "3".to_string())));
/// # Ok::<(), gpu_test_permit::devices::ExportError>(())
/// ```
pub const HIP_VISIBLE_DEVICES: &str = "HIP_VISIBLE_DEVICES";
/// AMD ROCr's variable, applied first: the GPUs the ROCm runtime exposes at all.
///
/// ```
/// use gpu_test_permit::devices::{export, VisibleDevices, ROCR_VISIBLE_DEVICES};
///
/// // ROCr narrows first: the child keeps the caller's GPU 6 and numbers it 0.
/// let caller = VisibleDevices { rocr: Some("4,6".into()), ..Default::default() };
/// let vars = export(Some(1), &[0, 1], &caller)?;
/// assert!(vars.contains(&(ROCR_VISIBLE_DEVICES, "6".to_string())));
/// # Ok::<(), gpu_test_permit::devices::ExportError>(())
/// ```
pub const ROCR_VISIBLE_DEVICES: &str = "ROCR_VISIBLE_DEVICES";

/// The caller's own device-visibility variables, as set (`None`: unset). [`export`] maps the
/// permit's GPU through them.
///
/// ```
/// use gpu_test_permit::devices::VisibleDevices;
///
/// let caller = VisibleDevices::from_lookup(|name| {
///     (name == "CUDA_VISIBLE_DEVICES").then(|| "GPU-8f3c,GPU-11aa".into())
/// });
/// assert_eq!(caller.cuda.as_deref(), Some("GPU-8f3c,GPU-11aa"));
/// assert_eq!(caller.hip, None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VisibleDevices {
    /// [`CUDA_VISIBLE_DEVICES`].
    pub cuda: Option<String>,
    /// [`HIP_VISIBLE_DEVICES`].
    pub hip: Option<String>,
    /// [`ROCR_VISIBLE_DEVICES`].
    pub rocr: Option<String>,
}

impl VisibleDevices {
    /// The three variables from any lookup function (`None` for an unset variable), e.g.
    /// `|name| std::env::var_os(name)` for the calling process. Values that are not UTF-8
    /// are converted lossily.
    ///
    /// ```
    /// use gpu_test_permit::devices::VisibleDevices;
    ///
    /// let mine = VisibleDevices::from_lookup(|name| std::env::var_os(name));
    /// let none = VisibleDevices::from_lookup(|_| None);
    /// assert_eq!(none, VisibleDevices::default());
    /// # let _ = mine;
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> VisibleDevices {
        let lookup: &dyn Fn(&str) -> Option<OsString> = &lookup;
        VisibleDevices {
            cuda: text_of(lookup, CUDA_VISIBLE_DEVICES),
            hip: text_of(lookup, HIP_VISIBLE_DEVICES),
            rocr: text_of(lookup, ROCR_VISIBLE_DEVICES),
        }
    }
}

/// The value `lookup` gives variable `name`, lossily as text.
fn text_of(lookup: &dyn Fn(&str) -> Option<OsString>, name: &str) -> Option<String> {
    let value = lookup(name)?;
    Some(value.to_string_lossy().into_owned())
}

/// Why [`export`] found no devices to export.
///
/// ```
/// use gpu_test_permit::devices::{export, ExportError, VisibleDevices};
///
/// // The caller sees one GPU; the pool's GPU 1 is not in its list.
/// let caller = VisibleDevices { cuda: Some("0".into()), ..Default::default() };
/// let e = export(Some(1), &[0, 1], &caller).unwrap_err();
/// assert!(matches!(e, ExportError::NotListed { index: 1, listed: 1, .. }), "{e}");
/// assert!(matches!(
///     export(Some(5), &[0, 1], &caller),
///     Err(ExportError::NoSuchDevice { device: 5, gpus: 2 })
/// ));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportError {
    /// The permit's device is not one of the pool's GPUs.
    NoSuchDevice {
        /// The permit's device.
        device: usize,
        /// How many GPUs the pool spans.
        gpus: usize,
    },
    /// The caller's list has no entry at the position a GPU needs.
    NotListed {
        /// The variable.
        var: &'static str,
        /// Its value in the caller.
        value: String,
        /// The position looked up (0-based).
        index: usize,
        /// How many devices the value lists.
        listed: usize,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::NoSuchDevice { device, gpus } => write!(
                f,
                "the permit is for device {device}, but the pool spans {gpus} GPUs"
            ),
            ExportError::NotListed {
                var,
                value,
                index,
                listed,
            } => write!(
                f,
                "{var}='{value}' lists {listed} devices, so it has no device {index}; list \
                 every GPU of {} in it, or list fewer in {}",
                crate::config::GPUS_VAR,
                crate::config::GPUS_VAR,
            ),
        }
    }
}

impl std::error::Error for ExportError {}

/// The device-visibility variables to set for a process started under a permit, in the order
/// `CUDA_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES` (the latter two only
/// where the rules need them; see the [module docs](self) for the rules).
///
/// - `device`: the permit's [`device`](crate::GpuTestPermit::device); `None` (an exclusive
///   permit) exports the whole pool.
/// - `gpu_ids`: the pool's GPU ids in device order,
///   [`Config::gpu_ids`](crate::config::Config::gpu_ids)`(pool.gpus())`.
/// - `caller`: the caller's own variables, read by the caller and passed in.
///
/// Nothing is read from the environment here. Variables it does not return are to be left as
/// the caller has them.
///
/// ```
/// use gpu_test_permit::devices::{export, VisibleDevices};
///
/// // Two GPUs in the pool, and the caller sees physical GPUs 2 and 3 as its 0 and 1.
/// let caller = VisibleDevices { cuda: Some("2,3".into()), ..Default::default() };
/// let vars = export(Some(1), &[0, 1], &caller)?;
/// assert_eq!(vars, [("CUDA_VISIBLE_DEVICES", "3".to_string())]);
/// // No caller list: the id itself. An exclusive permit: every GPU of the pool.
/// let none = VisibleDevices::default();
/// assert_eq!(export(Some(0), &[0, 2, 3], &none)?[0].1, "0");
/// assert_eq!(export(None, &[0, 2, 3], &none)?[0].1, "0,2,3");
/// # Ok::<(), gpu_test_permit::devices::ExportError>(())
/// ```
///
/// # Errors
///
/// [`ExportError::NoSuchDevice`] when `device` is not below `gpu_ids.len()`;
/// [`ExportError::NotListed`] when a caller's list is too short for a GPU id.
pub fn export(
    device: Option<usize>,
    gpu_ids: &[usize],
    caller: &VisibleDevices,
) -> Result<Vec<(&'static str, String)>, ExportError> {
    match device {
        Some(k) => export_devices(&[k], gpu_ids, caller),
        None => export_devices(&(0..gpu_ids.len()).collect::<Vec<_>>(), gpu_ids, caller),
    }
}

/// As [`export`], for a permit on several GPUs: the variables that make a process see the
/// pool's `devices` (a permit's [`devices`](crate::GpuTestPermit::devices)), as its GPUs 0, 1,
/// ... in that order.
///
/// ```
/// use gpu_test_permit::devices::{export_devices, VisibleDevices};
///
/// // Four GPUs in the pool; the caller sees physical GPUs 4 to 7; the permit holds 1 and 3.
/// let caller = VisibleDevices { cuda: Some("4,5,6,7".into()), ..Default::default() };
/// let vars = export_devices(&[1, 3], &[0, 1, 2, 3], &caller)?;
/// assert_eq!(vars, [("CUDA_VISIBLE_DEVICES", "5,7".to_string())]);
/// # Ok::<(), gpu_test_permit::devices::ExportError>(())
/// ```
///
/// # Errors
///
/// As [`export`], for any of `devices`.
pub fn export_devices(
    devices: &[usize],
    gpu_ids: &[usize],
    caller: &VisibleDevices,
) -> Result<Vec<(&'static str, String)>, ExportError> {
    let mut chosen = Vec::with_capacity(devices.len());
    for &k in devices {
        let Some(&id) = gpu_ids.get(k) else {
            return Err(ExportError::NoSuchDevice {
                device: k,
                gpus: gpu_ids.len(),
            });
        };
        chosen.push(id);
    }
    let cuda = match through(CUDA_VISIBLE_DEVICES, caller.cuda.as_deref(), &chosen)? {
        Some(cuda) => cuda,
        None => numbered(&chosen),
    };
    let mut hip = through(HIP_VISIBLE_DEVICES, caller.hip.as_deref(), &chosen)?;
    let mut rocr = None;
    // ROCr narrows first; HIP numbers what ROCr left, from its own list or CUDA's.
    let hip_level = hip.as_ref().unwrap_or(&cuda);
    if caller.rocr.is_some()
        && let Some(positions) = positions(hip_level)
    {
        rocr = through(ROCR_VISIBLE_DEVICES, caller.rocr.as_deref(), &positions)?;
        let mut renumbered = Vec::with_capacity(positions.len());
        for i in 0..positions.len() {
            renumbered.push(i.to_string());
        }
        hip = Some(renumbered);
    }
    let mut out = Vec::new();
    out.push((CUDA_VISIBLE_DEVICES, crate::joined(&cuda, ",")));
    if let Some(h) = hip {
        out.push((HIP_VISIBLE_DEVICES, crate::joined(&h, ",")));
    }
    if let Some(r) = rocr {
        out.push((ROCR_VISIBLE_DEVICES, crate::joined(&r, ",")));
    }
    Ok(out)
}

/// `numbers` as text.
fn numbered(numbers: &[usize]) -> Vec<String> {
    let mut out = Vec::with_capacity(numbers.len());
    for n in numbers {
        out.push(n.to_string());
    }
    out
}

/// The positions `entries` name, where each is a whole number.
fn positions(entries: &[String]) -> Option<Vec<usize>> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        out.push(e.parse().ok()?);
    }
    Some(out)
}

/// The entries of the caller's list `value` of `var` at `positions`; `None` when unset.
fn through(
    var: &'static str,
    value: Option<&str>,
    positions: &[usize],
) -> Result<Option<Vec<String>>, ExportError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let listed = entries(value);
    let mut out = Vec::with_capacity(positions.len());
    for &index in positions {
        let Some(e) = listed.get(index) else {
            return Err(ExportError::NotListed {
                var,
                value: value.to_string(),
                index,
                listed: listed.len(),
            });
        };
        out.push(e.to_string());
    }
    Ok(Some(out))
}

/// A visibility list as the drivers read it: up to the first empty or negative entry.
fn entries(value: &str) -> Vec<&str> {
    let mut listed = Vec::new();
    for e in value.split(',') {
        let e = e.trim();
        if e.is_empty() || e.starts_with('-') {
            break;
        }
        listed.push(e);
    }
    listed
}
