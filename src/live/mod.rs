//! What a GPU's memory holds right now, from NVML (`libnvidia-ml.so.1`, part of NVIDIA's
//! driver), and the rule that admits a permit by it: a leaf below `host`, for permits that
//! declare memory on a GPU that programs without permits use too.
//!
//! NVML is loaded at run time, once per process, when it is there: the crate does not link
//! against it, and without it (no NVIDIA driver, another platform, `nvmlInit` failing)
//! [`memory`] answers `None` and nothing is known live.
//!
//! # How a permit is admitted
//!
//! The slots count what permits *declare*; the GPU holds what processes *use*. [`admit`] puts
//! the two together. A holder that declared 6 GiB may not have allocated them yet, so its
//! not-yet-used part is reserved; what it already uses is in NVML's `used`, so not counted
//! twice. A process using memory without a permit (another user's notebook, a leaked test
//! process) is just less free memory, and is named in the wait message ([`Shortfall`](admit::Shortfall)), so a
//! user sees who to ask.
//!
//! | term | from | meaning |
//! |---|---|---|
//! | `free` | `nvmlDeviceGetMemoryInfo`, before and after the processes are listed: the smaller (NVML answers call by call, and memory allocated or freed between the calls must not look free) | bytes no process has allocated |
//! | `reserved` | holders' declarations minus NVML's per-process use | promised, not yet taken |
//! | `want` | the new permit's declaration | what it will take |
//! | [`MARGIN`] | constant | the new process's CUDA context, and slack |
//!
//! Admitted when `free >= reserved + want + MARGIN`.
//!
//! # Devices
//!
//! A GPU is named by its CUDA ordinal, as this process numbers its devices; `CUDA_VISIBLE_DEVICES`
//! maps it to NVML's device (see [`memory`]). NVML numbers devices in PCI bus order; CUDA does too
//! with `CUDA_DEVICE_ORDER=PCI_BUS_ID`, or where all GPUs are one model (its default,
//! fastest first, breaks ties by bus id). On a mixed machine without it an index names the
//! device NVML gives that index.
//!
//! NVML lists processes by their pid in the host's pid namespace: in a container with a pid
//! namespace of its own, holders are not found among them, their declarations are reserved in
//! full, and the container's processes may be named as foreign.
//!
//! | file | what |
//! |---|---|
//! | `nvml.rs` | NVML loaded at run time, its calls, and a CUDA ordinal's device ([`memory`]) |
//! | `query.rs` | NVML asked from a thread of its own, within a limit ([`memory_within`]) |
//! | `admit.rs` | the rule that admits a permit by what the GPU holds ([`admit`]) |

mod admit;
mod nvml;
mod query;

pub(crate) use admit::{Admission, MARGIN, admit};
#[cfg(any(test, feature = "__cli"))]
pub(crate) use nvml::memory;
#[cfg(feature = "cuda")] // the CUDA fixture's
pub(crate) use nvml::{GpuProcess, available, device_by_uuid, device_processes};
#[cfg(any(test, feature = "__cli"))]
pub(crate) use query::process_name;
pub(crate) use query::{ANSWER_WITHIN, memory_within, stuck};
