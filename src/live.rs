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
//! process) is just less free memory, and is named in the wait message ([`Shortfall`]), so a
//! user sees who to ask.
//!
//! | term | from | meaning |
//! |---|---|---|
//! | `free` | `nvmlDeviceGetMemoryInfo` | bytes no process has allocated |
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

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::fmt::Write as _;

use crate::config::format_bytes;
use crate::sys::Library;

/// One GPU's memory as NVML sees it now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuMemory {
    /// The device's memory, in bytes.
    pub(crate) total: u64,
    /// Bytes that no process has allocated.
    pub(crate) free: u64,
    /// The processes with a compute or graphics context on the device, one entry per pid.
    pub(crate) processes: Vec<GpuProcess>,
}

/// A process on a GPU, as NVML lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuProcess {
    /// Its pid in the host's pid namespace.
    pub(crate) pid: u32,
    /// The GPU memory it uses; `None` where the driver cannot tell (`NVML_VALUE_NOT_AVAILABLE`:
    /// WDDM on Windows, some MIG setups).
    pub(crate) used: Option<u64>,
}

/// What a new test process takes beside its declared memory: its CUDA context (300 to 500 MiB
/// on current GPUs and drivers, more with lazy module loading off) and some slack for the
/// allocator's rounding and for memory freed a moment later than NVML reports.
pub(crate) const MARGIN: u64 = 512 << 20;

/// What [`admit`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// There is room: take the permit.
    Admit,
    /// Not enough free memory yet: wait, and say why.
    Short(Shortfall),
}

/// Why a permit does not fit on a GPU now: the terms of [`admit`]'s rule, and who uses the
/// memory without a permit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shortfall {
    /// The permit's declared memory.
    pub(crate) want: u64,
    /// The GPU's free memory.
    pub(crate) free: u64,
    /// What holders declared and have not yet allocated.
    pub(crate) reserved: u64,
    /// [`MARGIN`].
    pub(crate) margin: u64,
    /// Processes using memory on the GPU that hold no permit (not a holder pid, not own_pid),
    /// most memory first.
    pub(crate) foreign: Vec<GpuProcess>,
}

impl Shortfall {
    /// One line for a wait message, e.g. "GPU 3 has 2.1 GiB free; this permit needs 6 GiB +
    /// 512 MiB margin, and holders declared 1 GiB they have not yet allocated; using memory
    /// without a permit: pid 4242 (python3) 70.2 GiB". Process names come from
    /// [`process_name`].
    pub(crate) fn describe(&self, gpu: usize) -> String {
        self.describe_with(gpu, process_name)
    }

    /// [`Shortfall::describe`] with the names from `name`.
    fn describe_with(&self, gpu: usize, name: impl Fn(u32) -> Option<String>) -> String {
        let mut line = format!(
            "GPU {gpu} has {} free; this permit needs {} + {} margin",
            format_bytes(self.free),
            format_bytes(self.want),
            format_bytes(self.margin)
        );
        if self.reserved > 0 {
            let _ = write!(
                line,
                ", and holders declared {} they have not yet allocated",
                format_bytes(self.reserved)
            );
        }
        if !self.foreign.is_empty() {
            line.push_str("; using memory without a permit:");
            for (i, p) in self.foreign.iter().enumerate() {
                let _ = write!(line, "{} pid {}", if i == 0 { "" } else { "," }, p.pid);
                if let Some(name) = name(p.pid) {
                    let _ = write!(line, " ({name})");
                }
                match p.used {
                    Some(used) => {
                        let _ = write!(line, " {}", format_bytes(used));
                    }
                    None => line.push_str(" (use not reported)"),
                }
            }
        }
        line
    }
}

/// Admission rule, pure: may a permit declaring `want` bytes be admitted on a GPU whose state
/// is `mem`, given the permit holders now on that GPU as `(pid, declared bytes)` pairs?
///
/// `reserved` is the sum over holder pids of what each pid declared (several holders in one
/// process share its pid: their declarations are summed first) less what NVML says that pid
/// uses, never below 0; a pid NVML does not list, or whose use it cannot tell, has allocated
/// nothing as far as this rule knows. Admitted when `mem.free >= reserved + want + MARGIN`.
///
/// `own_pid` is this process: its memory is not foreign even when it holds no permit yet (it
/// is asking for one).
pub(crate) fn admit(want: u64, mem: &GpuMemory, holders: &[(u32, u64)], own_pid: u32) -> Admission {
    let mut declared: Vec<(u32, u64)> = Vec::new();
    for &(pid, bytes) in holders {
        match declared.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, sum)) => *sum = sum.saturating_add(bytes),
            None => declared.push((pid, bytes)),
        }
    }
    let used = |pid: u32| {
        mem.processes
            .iter()
            .filter(|p| p.pid == pid)
            .filter_map(|p| p.used)
            .fold(0u64, u64::saturating_add)
    };
    let reserved = declared
        .iter()
        .map(|&(pid, bytes)| bytes.saturating_sub(used(pid)))
        .fold(0u64, u64::saturating_add);
    let needed = reserved.saturating_add(want).saturating_add(MARGIN);
    if mem.free >= needed {
        return Admission::Admit;
    }
    let mut foreign: Vec<GpuProcess> = mem
        .processes
        .iter()
        .filter(|p| p.pid != own_pid && !declared.iter().any(|&(pid, _)| pid == p.pid))
        .cloned()
        .collect();
    // Most memory first; unknown use last, then by pid for a stable line.
    foreign.sort_by(|a, b| b.used.cmp(&a.used).then(a.pid.cmp(&b.pid)));
    Admission::Short(Shortfall {
        want,
        free: mem.free,
        reserved,
        margin: MARGIN,
        foreign,
    })
}

/// The memory of CUDA device `gpu` now. `gpu` is a CUDA ordinal as this process numbers its
/// devices: mapped to an NVML device through this process's `CUDA_VISIBLE_DEVICES` (the entry
/// at position `gpu`; an index is NVML's index, `GPU-...` and `MIG-...` a UUID or, as CUDA
/// takes it, a unique prefix of one; the list ends at the first entry that names no device, as
/// the driver reads it: empty, negative, out of range, unknown), or without that variable, NVML
/// index `gpu`.
///
/// `None` when NVML is absent, its initialisation failed, the variable lists no device `gpu`,
/// or a call fails.
pub(crate) fn memory(gpu: usize) -> Option<GpuMemory> {
    let visible = crate::config::probe_key_var("CUDA_VISIBLE_DEVICES");
    let visible = visible.as_ref().map(|v| v.to_string_lossy());
    let nvml = nvml()?;
    // Every entry before `gpu` must name a device too: the list ends at one that does not.
    let first = if visible.is_some() { 0 } else { gpu };
    let mut device = None;
    for i in first..=gpu {
        device = Some(match visible_entry(visible.as_deref(), i)? {
            Entry::Index(index) => nvml.device_by_index(index)?,
            Entry::Uuid(uuid) => nvml.device_by_uuid_or_prefix(&uuid)?,
        });
    }
    let device = device?;
    let (total, free) = nvml.memory_info(device)?;
    Some(GpuMemory {
        total,
        free,
        processes: nvml.processes(device)?,
    })
}

/// How long a query of NVML may take before the permits stop waiting for it: NVML calls into
/// the driver, and a wedged driver can keep a call from returning.
pub(crate) const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// [`memory`], asked of a thread of its own and waited for at most `limit`: `None` as well
/// when NVML does not answer by then, or has not answered an earlier query yet (a wedged
/// driver: the queries stop until it does, and the caller goes on without NVML's numbers).
pub(crate) fn memory_within(gpu: usize, limit: std::time::Duration) -> Option<GpuMemory> {
    within(limit, move || memory(gpu)).flatten()
}

/// Whether a query of NVML did not come back within its limit and has not come back since.
pub(crate) fn stuck() -> bool {
    STUCK.load(std::sync::atomic::Ordering::Acquire)
}

static STUCK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

type Query = Box<dyn FnOnce() + Send>;

/// Runs `query` on the NVML thread (started at the first query) and waits up to `limit` for
/// its answer. Queries run one at a time; while one is stuck, the others are not sent.
fn within<T: Send + 'static>(
    limit: std::time::Duration,
    query: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    static SEND: std::sync::Mutex<Option<mpsc::Sender<Query>>> = std::sync::Mutex::new(None);
    if stuck() {
        return None;
    }
    let (answer, answered) = mpsc::sync_channel(1);
    let job: Query = Box::new(move || {
        let value = query();
        STUCK.store(false, Ordering::Release);
        let _ = answer.send(value);
    });
    {
        let mut send = SEND.lock().unwrap_or_else(|e| e.into_inner());
        if send.is_none() {
            let (tx, rx) = mpsc::channel::<Query>();
            std::thread::Builder::new()
                .name("gpu-test-permit-nvml".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()?;
            *send = Some(tx);
        }
        send.as_ref()?.send(job).ok()?;
    }
    match answered.recv_timeout(limit) {
        Ok(value) => Some(value),
        Err(_) => {
            STUCK.store(true, Ordering::Release);
            None
        }
    }
}

/// The name of a process for a message: the system's (`/proc/<pid>/comm` on Linux), else
/// NVML's (`nvmlSystemGetProcessName`: a process of another pid namespace), asked within
/// [`ANSWER_WITHIN`], else `None`.
pub(crate) fn process_name(pid: u32) -> Option<String> {
    crate::sys::process_name(pid).or_else(|| {
        within(ANSWER_WITHIN, move || {
            nvml().and_then(|n| n.process_name(pid))
        })
        .flatten()
    })
}

/// An NVML device of a CUDA device with this UUID, as NVML names it (`GPU-...` or `MIG-...`);
/// `None` without NVML or when NVML does not know it.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA fixture's
pub(crate) fn device_by_uuid(uuid: &str) -> Option<Device> {
    nvml()?.device_by_uuid(uuid)
}

/// The processes on `device` now, one entry per pid; `None` when NVML cannot list them.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA fixture's
pub(crate) fn device_processes(device: Device) -> Option<Vec<GpuProcess>> {
    nvml()?.processes(device)
}

/// Whether NVML is loaded and initialised in this process.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA fixture's tests
pub(crate) fn available() -> bool {
    nvml().is_some()
}

// ---------------------------------------------------------------------------------------------
// CUDA_VISIBLE_DEVICES

/// One entry of `CUDA_VISIBLE_DEVICES`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    /// A device index (NVML's).
    Index(u32),
    /// A `GPU-...` or `MIG-...` UUID, or a prefix of one.
    Uuid(String),
}

/// The device CUDA ordinal `gpu` names under `CUDA_VISIBLE_DEVICES=visible` (`None`: unset,
/// so every device is visible in NVML's order).
///
/// As the driver reads the list: entries are separated by commas, spaces around them are
/// ignored, and the list ends at the first entry that is empty, negative or neither a number
/// nor a `GPU-`/`MIG-` UUID, so `0,,2` and `0,-1,2` show one device and `-1` none. (That an
/// entry names a device present is for [`memory`] to find out.)
fn visible_entry(visible: Option<&str>, gpu: usize) -> Option<Entry> {
    let Some(visible) = visible else {
        return u32::try_from(gpu).ok().map(Entry::Index);
    };
    visible
        .split(',')
        .map(str::trim)
        .map_while(|entry| {
            if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
                Some(Entry::Uuid(entry.to_string()))
            } else {
                entry.parse::<u32>().ok().map(Entry::Index)
            }
        })
        .nth(gpu)
}

// ---------------------------------------------------------------------------------------------
// NVML

const SUCCESS: c_int = 0;
const ERROR_INSUFFICIENT_SIZE: c_int = 7;
/// `NVML_VALUE_NOT_AVAILABLE`: the driver cannot tell (WDDM on Windows, some MIG setups).
const NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const UUID_BUFFER: usize = 96;
/// A process name's buffer: Linux's `comm` is 16 bytes, NVML's names are paths.
const NAME_BUFFER: usize = 256;

/// `nvmlProcessInfo_t` (`_v2` in NVML's header; the `_v2` and `_v3` calls take it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct MemoryInfo {
    total: u64,
    free: u64,
    used: u64,
}

/// An NVML device handle. NVML's calls are thread-safe, so it may be used from any thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Device(*mut c_void);
// SAFETY: an NVML device handle is an opaque token valid in any thread (NVML is thread-safe)
// until `nvmlShutdown`, which this crate never calls.
unsafe impl Send for Device {}
// SAFETY: as above; the token is only passed to NVML's calls.
unsafe impl Sync for Device {}

type InitFn = unsafe extern "C" fn() -> c_int;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> c_int;
type HandleByIndexFn = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type HandleByUuidFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type UuidFn = unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> c_int;
type MemoryInfoFn = unsafe extern "C" fn(*mut c_void, *mut MemoryInfo) -> c_int;
type ProcessesFn = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int;
type ProcessNameFn = unsafe extern "C" fn(c_uint, *mut c_char, c_uint) -> c_int;

/// NVML's calls this module makes; the optional ones are missing from old drivers.
struct Nvml {
    count: CountFn,
    handle_by_index: HandleByIndexFn,
    handle_by_uuid: HandleByUuidFn,
    uuid: Option<UuidFn>,
    memory_info: MemoryInfoFn,
    compute_processes: ProcessesFn,
    graphics_processes: Option<ProcessesFn>,
    process_name: Option<ProcessNameFn>,
}

/// NVML, loaded and initialised once per process; `None` when the library or one of its
/// required calls is missing, or `nvmlInit` fails (no NVIDIA driver).
fn nvml() -> Option<&'static Nvml> {
    static NVML: std::sync::OnceLock<Option<Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(load).as_ref()
}

fn load() -> Option<Nvml> {
    let lib = Library::open(c"libnvidia-ml.so.1")?;
    let sym = |name: &CStr| lib.symbol(name).map(|p| p.as_ptr());
    let either = |a: &CStr, b: &CStr| sym(a).or_else(|| sym(b));
    let init = sym(c"nvmlInit_v2")?;
    let count = sym(c"nvmlDeviceGetCount_v2")?;
    let handle_by_index = sym(c"nvmlDeviceGetHandleByIndex_v2")?;
    let handle_by_uuid = sym(c"nvmlDeviceGetHandleByUUID")?;
    let uuid = sym(c"nvmlDeviceGetUUID");
    let memory_info = sym(c"nvmlDeviceGetMemoryInfo")?;
    let compute = either(
        c"nvmlDeviceGetComputeRunningProcesses_v3",
        c"nvmlDeviceGetComputeRunningProcesses_v2",
    )?;
    let graphics = either(
        c"nvmlDeviceGetGraphicsRunningProcesses_v3",
        c"nvmlDeviceGetGraphicsRunningProcesses_v2",
    );
    let process_name = sym(c"nvmlSystemGetProcessName");
    // SAFETY: each pointer is NVML's exported function of the name it was looked up by, whose
    // C signature the type it becomes spells out (nvml.h; the `_v2` and `_v3` process calls
    // take the same `nvmlProcessInfo_t`); the library is never unloaded.
    let nvml = unsafe {
        use std::mem::transmute;
        Nvml {
            count: transmute::<*mut c_void, CountFn>(count),
            handle_by_index: transmute::<*mut c_void, HandleByIndexFn>(handle_by_index),
            handle_by_uuid: transmute::<*mut c_void, HandleByUuidFn>(handle_by_uuid),
            uuid: uuid.map(|p| transmute::<*mut c_void, UuidFn>(p)),
            memory_info: transmute::<*mut c_void, MemoryInfoFn>(memory_info),
            compute_processes: transmute::<*mut c_void, ProcessesFn>(compute),
            graphics_processes: graphics.map(|p| transmute::<*mut c_void, ProcessesFn>(p)),
            process_name: process_name.map(|p| transmute::<*mut c_void, ProcessNameFn>(p)),
        }
    };
    // SAFETY: as above, for `nvmlInit_v2`, which takes no arguments.
    let init = unsafe { std::mem::transmute::<*mut c_void, InitFn>(init) };
    // SAFETY: initialising more than once is counted by NVML and harmless; it is never shut
    // down here.
    if unsafe { init() } != SUCCESS {
        return None;
    }
    Some(nvml)
}

impl Nvml {
    fn device_count(&self) -> Option<u32> {
        let mut count: c_uint = 0;
        // SAFETY: `count` is a place for the answer.
        (unsafe { (self.count)(&mut count) } == SUCCESS).then_some(count)
    }

    fn device_by_index(&self, index: u32) -> Option<Device> {
        if index >= self.device_count()? {
            return None;
        }
        let mut device = std::ptr::null_mut();
        // SAFETY: `device` is a place for the handle.
        let r = unsafe { (self.handle_by_index)(index, &mut device) };
        (r == SUCCESS && !device.is_null()).then_some(Device(device))
    }

    fn device_by_uuid(&self, uuid: &str) -> Option<Device> {
        let name = CString::new(uuid).ok()?;
        let mut device = std::ptr::null_mut();
        // SAFETY: `name` is a valid C string and `device` a place for the handle.
        let r = unsafe { (self.handle_by_uuid)(name.as_ptr(), &mut device) };
        (r == SUCCESS && !device.is_null()).then_some(Device(device))
    }

    /// The device with this UUID, or the one device whose UUID starts with it (CUDA takes a
    /// unique prefix; NVML's lookup wants the whole UUID). MIG instances are found only by
    /// their whole UUID.
    fn device_by_uuid_or_prefix(&self, uuid: &str) -> Option<Device> {
        if let Some(device) = self.device_by_uuid(uuid) {
            return Some(device);
        }
        let uuid_of = self.uuid?;
        let mut found = None;
        for index in 0..self.device_count()? {
            let device = self.device_by_index(index)?;
            let mut buf = [0 as c_char; UUID_BUFFER];
            // SAFETY: `buf` has room for `UUID_BUFFER` bytes, which NVML writes at most.
            if unsafe { uuid_of(device.0, buf.as_mut_ptr(), UUID_BUFFER as c_uint) } != SUCCESS {
                continue;
            }
            // SAFETY: NVML wrote a NUL-terminated string within the buffer; the last byte is
            // forced to NUL in case it did not.
            let name = unsafe {
                buf[UUID_BUFFER - 1] = 0;
                CStr::from_ptr(buf.as_ptr())
            };
            if name.to_bytes().starts_with(uuid.as_bytes()) {
                if found.is_some() {
                    return None; // not unique: the driver takes none
                }
                found = Some(device);
            }
        }
        found
    }

    /// `(total, free)` bytes.
    fn memory_info(&self, device: Device) -> Option<(u64, u64)> {
        let mut info = MemoryInfo::default();
        // SAFETY: `device` is a handle from NVML and `info` a place of `nvmlMemory_t`'s layout.
        let r = unsafe { (self.memory_info)(device.0, &mut info) };
        (r == SUCCESS).then_some((info.total, info.free))
    }

    /// Compute and graphics processes, one entry per pid ([`merge`]).
    fn processes(&self, device: Device) -> Option<Vec<GpuProcess>> {
        let compute = list(self.compute_processes, device)?;
        // A driver that cannot list graphics processes still lists compute ones.
        let graphics = self
            .graphics_processes
            .and_then(|call| list(call, device))
            .unwrap_or_default();
        Some(merge(&compute, &graphics))
    }

    fn process_name(&self, pid: u32) -> Option<String> {
        let call = self.process_name?;
        let mut buf = [0 as c_char; NAME_BUFFER];
        // SAFETY: `buf` has room for `NAME_BUFFER` bytes, which NVML writes at most.
        if unsafe { call(pid, buf.as_mut_ptr(), NAME_BUFFER as c_uint) } != SUCCESS {
            return None;
        }
        buf[NAME_BUFFER - 1] = 0;
        // SAFETY: the buffer is NUL-terminated (its last byte at the latest).
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        // NVML gives the executable's path; the last part names it well enough.
        let name = name.trim().rsplit('/').next().unwrap_or_default();
        (!name.is_empty()).then(|| name.to_string())
    }
}

/// NVML's process list by `call`, grown while NVML says it is too small (the list can grow
/// between two calls).
fn list(call: ProcessesFn, device: Device) -> Option<Vec<ProcessInfo>> {
    let mut infos = vec![ProcessInfo::default(); 64];
    for _ in 0..5 {
        let mut count = infos.len() as c_uint;
        // SAFETY: `infos` has room for `count` entries of the layout NVML writes; `count` is
        // updated to the number written, or needed.
        let r = unsafe { call(device.0, &mut count, infos.as_mut_ptr()) };
        match r {
            SUCCESS => {
                infos.truncate((count as usize).min(infos.len()));
                return Some(infos);
            }
            ERROR_INSUFFICIENT_SIZE => infos.resize(
                (count as usize).max(infos.len()) * 2,
                ProcessInfo::default(),
            ),
            _ => return None,
        }
    }
    None
}

/// One entry per pid from NVML's compute and graphics lists. Within one list a pid's entries
/// (one per MIG instance) add up; across the lists a process with both kinds of context is
/// counted once, by the larger (NVML reports a process's whole use in each list). A use NVML
/// cannot tell is `None` unless another entry of the pid tells one. In order of first sight.
fn merge(compute: &[ProcessInfo], graphics: &[ProcessInfo]) -> Vec<GpuProcess> {
    let sum = |infos: &[ProcessInfo]| {
        let mut out: Vec<GpuProcess> = Vec::new();
        for info in infos {
            let used = (info.used_gpu_memory != NOT_AVAILABLE).then_some(info.used_gpu_memory);
            match out.iter_mut().find(|p| p.pid == info.pid) {
                Some(p) => {
                    p.used = match (p.used, used) {
                        (Some(a), Some(b)) => Some(a.saturating_add(b)),
                        (a, b) => a.or(b),
                    }
                }
                None => out.push(GpuProcess {
                    pid: info.pid,
                    used,
                }),
            }
        }
        out
    };
    let mut out = sum(compute);
    for g in sum(graphics) {
        match out.iter_mut().find(|p| p.pid == g.pid) {
            Some(p) => p.used = p.used.max(g.used),
            None => out.push(g),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_query_stops_the_others_until_it_answers() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};
        let (release, wait) = mpsc::channel::<()>();
        let short = Duration::from_millis(50);
        // A query that does not come back in time: none, and NVML counts as stuck.
        assert_eq!(within(short, move || wait.recv().is_ok()), None);
        assert!(stuck());
        // While it is stuck, another query is not sent and does not wait.
        let started = Instant::now();
        assert_eq!(within(Duration::from_secs(5), || 1), None);
        assert!(started.elapsed() < Duration::from_secs(1));
        // Once it answers, queries are answered again.
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while stuck() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(within(Duration::from_secs(5), || 2), Some(2));
    }

    const GIB: u64 = 1 << 30;

    fn process(pid: u32, used: Option<u64>) -> GpuProcess {
        GpuProcess { pid, used }
    }

    fn mem(free: u64, processes: Vec<GpuProcess>) -> GpuMemory {
        GpuMemory {
            total: 80 * GIB,
            free,
            processes,
        }
    }

    fn short(a: Admission) -> Shortfall {
        match a {
            Admission::Short(s) => s,
            Admission::Admit => panic!("admitted"),
        }
    }

    #[test]
    fn a_permit_fits_when_free_memory_covers_want_and_margin() {
        let m = mem(4 * GIB + MARGIN, vec![]);
        assert_eq!(admit(4 * GIB, &m, &[], 1), Admission::Admit);
        let s = short(admit(4 * GIB + 1, &m, &[], 1));
        assert_eq!(
            (s.want, s.free, s.reserved, s.margin),
            (4 * GIB + 1, m.free, 0, MARGIN)
        );
    }

    #[test]
    fn holders_reserve_what_they_declared_and_have_not_allocated() {
        // pid 10 declared 6 GiB and uses 2: 4 reserved; pid 11 declared 1 and uses nothing.
        let m = mem(10 * GIB, vec![process(10, Some(2 * GIB))]);
        let holders = [(10, 6 * GIB), (11, GIB)];
        assert_eq!(short(admit(5 * GIB, &m, &holders, 1)).reserved, 5 * GIB);
        assert_eq!(admit(5 * GIB - MARGIN, &m, &holders, 1), Admission::Admit);
    }

    #[test]
    fn holders_of_one_process_are_summed_before_its_use_is_taken_off() {
        // Two permits of pid 10, 3 GiB each, and it uses 4: 2 GiB reserved, not 0 + 0.
        let m = mem(GIB, vec![process(10, Some(4 * GIB))]);
        let s = short(admit(GIB, &m, &[(10, 3 * GIB), (10, 3 * GIB)], 1));
        assert_eq!(s.reserved, 2 * GIB);
    }

    #[test]
    fn a_holder_using_more_than_it_declared_reserves_nothing() {
        let m = mem(GIB, vec![process(10, Some(9 * GIB))]);
        let s = short(admit(GIB, &m, &[(10, 2 * GIB)], 1));
        assert_eq!(s.reserved, 0);
        assert!(s.foreign.is_empty(), "{s:?}");
    }

    #[test]
    fn a_use_nvml_cannot_tell_counts_as_nothing_allocated() {
        let m = mem(GIB, vec![process(10, None), process(20, None)]);
        let s = short(admit(GIB, &m, &[(10, 3 * GIB)], 1));
        assert_eq!(s.reserved, 3 * GIB);
        assert_eq!(s.foreign, [process(20, None)]);
    }

    #[test]
    fn foreign_processes_are_not_holders_nor_this_process_and_come_most_memory_first() {
        let m = mem(
            GIB,
            vec![
                process(1, Some(5 * GIB)), // this process
                process(10, Some(GIB)),    // a holder
                process(30, Some(2 * GIB)),
                process(31, None),
                process(32, Some(70 * GIB)),
                process(29, Some(2 * GIB)),
            ],
        );
        let s = short(admit(GIB, &m, &[(10, GIB)], 1));
        let pids: Vec<u32> = s.foreign.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [32, 29, 30, 31]);
    }

    #[test]
    fn reserved_saturates_instead_of_overflowing() {
        let m = mem(u64::MAX - 1, vec![]);
        let s = short(admit(1, &m, &[(10, u64::MAX), (11, u64::MAX)], 1));
        assert_eq!(s.reserved, u64::MAX);
    }

    #[test]
    fn a_shortfall_reads_as_one_line() {
        let s = Shortfall {
            want: 6 * GIB,
            free: 2 * GIB + GIB / 10,
            reserved: GIB,
            margin: MARGIN,
            foreign: vec![process(4242, Some(70 * GIB + GIB / 5)), process(7, None)],
        };
        let names = |pid| (pid == 4242).then(|| "python3".to_string());
        assert_eq!(
            s.describe_with(3, names),
            "GPU 3 has 2.1 GiB free; this permit needs 6 GiB + 512 MiB margin, and holders \
             declared 1 GiB they have not yet allocated; using memory without a permit: pid \
             4242 (python3) 70.2 GiB, pid 7 (use not reported)"
        );
        let plain = Shortfall {
            reserved: 0,
            foreign: vec![],
            ..s
        };
        assert_eq!(
            plain.describe_with(0, |_| None),
            "GPU 0 has 2.1 GiB free; this permit needs 6 GiB + 512 MiB margin"
        );
    }

    #[test]
    fn without_the_variable_an_ordinal_is_nvmls_index() {
        assert_eq!(visible_entry(None, 0), Some(Entry::Index(0)));
        assert_eq!(visible_entry(None, 7), Some(Entry::Index(7)));
    }

    #[test]
    fn the_variable_maps_an_ordinal_to_its_entry() {
        assert_eq!(visible_entry(Some("3,5"), 1), Some(Entry::Index(5)));
        assert_eq!(visible_entry(Some(" 3 , 5 "), 0), Some(Entry::Index(3)));
        assert_eq!(visible_entry(Some("3,5"), 2), None);
        let uuid = "GPU-5b3a2f1e-0d4c-7b6a-9988-0123456789ab";
        assert_eq!(
            visible_entry(Some(&format!("1,{uuid}")), 1),
            Some(Entry::Uuid(uuid.into()))
        );
        assert_eq!(
            visible_entry(Some("MIG-abc,0"), 0),
            Some(Entry::Uuid("MIG-abc".into()))
        );
        assert_eq!(
            visible_entry(Some("GPU-5b3a"), 0),
            Some(Entry::Uuid("GPU-5b3a".into()))
        );
    }

    #[test]
    fn the_list_ends_where_the_driver_stops_reading() {
        assert_eq!(visible_entry(Some(""), 0), None);
        assert_eq!(visible_entry(Some("-1"), 0), None);
        assert_eq!(visible_entry(Some("0,-1,2"), 0), Some(Entry::Index(0)));
        assert_eq!(visible_entry(Some("0,-1,2"), 1), None);
        assert_eq!(visible_entry(Some("0,,2"), 1), None);
        assert_eq!(visible_entry(Some("0,nvidia,2"), 1), None);
        assert_eq!(visible_entry(Some("2,"), 0), Some(Entry::Index(2)));
        assert_eq!(visible_entry(Some("2,"), 1), None);
    }

    #[test]
    fn processes_are_one_entry_per_pid() {
        let info = |pid, used| ProcessInfo {
            pid,
            used_gpu_memory: used,
            ..Default::default()
        };
        let compute = [
            info(10, 500 << 20),
            info(42, 700 << 20),
            info(42, 100 << 20), // a second entry (e.g. another MIG instance)
            info(43, NOT_AVAILABLE),
            info(44, NOT_AVAILABLE),
            info(44, 300 << 20),
        ];
        let graphics = [info(10, 400 << 20), info(43, 200 << 20), info(50, 1 << 30)];
        assert_eq!(
            merge(&compute, &graphics),
            [
                process(10, Some(500 << 20)),
                process(42, Some(800 << 20)),
                process(43, Some(200 << 20)),
                process(44, Some(300 << 20)),
                process(50, Some(1 << 30)),
            ]
        );
        assert_eq!(merge(&[info(7, NOT_AVAILABLE)], &[]), [process(7, None)]);
        assert!(merge(&[], &[]).is_empty());
    }

    #[test]
    fn the_structs_have_nvmls_layout() {
        // unsigned int, (padding), unsigned long long, unsigned int, unsigned int.
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
        assert_eq!(std::mem::offset_of!(ProcessInfo, used_gpu_memory), 8);
        assert_eq!(std::mem::size_of::<MemoryInfo>(), 24);
    }

    /// Without NVIDIA's driver (this crate's CI) nothing is known; where it is installed the
    /// calls must not fail either way.
    #[test]
    fn without_nvml_nothing_is_known() {
        if Library::open(c"libnvidia-ml.so.1").is_none() {
            assert!(!available());
            assert!(memory(0).is_none());
            assert!(device_by_uuid("GPU-00000000-0000-0000-0000-000000000000").is_none());
        } else {
            let _ = memory(0);
            assert!(device_by_uuid("GPU-fefefefe-fefe-fefe-fefe-fefefefefefe").is_none());
        }
        assert_eq!(process_name(u32::MAX), None);
    }
}
