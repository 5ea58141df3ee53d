//! NVML (`libnvidia-ml.so.1`), loaded at run time once per process, the calls the crate makes,
//! and which NVML device a CUDA ordinal of this process names (`CUDA_VISIBLE_DEVICES`).

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

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
    // Free memory on both sides of the processes, and the smaller of the two: NVML's answers
    // are not one snapshot, and a process that allocates or frees between two calls must not
    // make the free memory look larger than it is beside what the processes are seen to use
    // (allocated after the first reading and listed: counted twice, never missed).
    let (total, free) = nvml.memory_info(device)?;
    let processes = nvml.processes(device)?;
    let (_, free_after) = nvml.memory_info(device)?;
    Some(GpuMemory {
        total,
        free: free.min(free_after),
        processes,
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
        return match u32::try_from(gpu) {
            Ok(index) => Some(Entry::Index(index)),
            Err(_) => None,
        };
    };
    // Entries still to pass before the one of `gpu`.
    let mut before = gpu;
    for entry in visible.split(',') {
        let entry = entry.trim();
        let parsed = if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            Entry::Uuid(entry.to_string())
        } else {
            match entry.parse::<u32>() {
                Ok(index) => Entry::Index(index),
                Err(_) => return None,
            }
        };
        if before == 0 {
            return Some(parsed);
        }
        before -= 1;
    }
    None
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
pub(super) struct Nvml {
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
pub(super) fn nvml() -> Option<&'static Nvml> {
    static NVML: std::sync::OnceLock<Option<Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(load).as_ref()
}

fn load() -> Option<Nvml> {
    let lib = Library::open(c"libnvidia-ml.so.1")?;
    let init = sym(&lib, c"nvmlInit_v2")?;
    let count = sym(&lib, c"nvmlDeviceGetCount_v2")?;
    let handle_by_index = sym(&lib, c"nvmlDeviceGetHandleByIndex_v2")?;
    let handle_by_uuid = sym(&lib, c"nvmlDeviceGetHandleByUUID")?;
    let uuid = sym(&lib, c"nvmlDeviceGetUUID");
    let memory_info = sym(&lib, c"nvmlDeviceGetMemoryInfo")?;
    let compute = either(
        &lib,
        c"nvmlDeviceGetComputeRunningProcesses_v3",
        c"nvmlDeviceGetComputeRunningProcesses_v2",
    )?;
    let graphics = either(
        &lib,
        c"nvmlDeviceGetGraphicsRunningProcesses_v3",
        c"nvmlDeviceGetGraphicsRunningProcesses_v2",
    );
    let process_name = sym(&lib, c"nvmlSystemGetProcessName");
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
    // `nvmlInit` loads the CUDA driver library: the crate's load, never the test's.
    // SAFETY: initialising more than once is counted by NVML and harmless; it is never shut
    // down here.
    if crate::sys::for_own_use(|| unsafe { init() }) != SUCCESS {
        return None;
    }
    Some(nvml)
}

/// The address of `lib`'s symbol `name`.
fn sym(lib: &Library, name: &CStr) -> Option<*mut c_void> {
    Some(lib.symbol(name)?.as_ptr())
}

/// The address of `lib`'s symbol `a`, else of `b`.
fn either(lib: &Library, a: &CStr, b: &CStr) -> Option<*mut c_void> {
    match sym(lib, a) {
        Some(p) => Some(p),
        None => sym(lib, b),
    }
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
        let graphics = match self.graphics_processes {
            Some(call) => list(call, device).unwrap_or_default(),
            None => Vec::new(),
        };
        Some(merge(&compute, &graphics))
    }

    pub(super) fn process_name(&self, pid: u32) -> Option<String> {
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
        if name.is_empty() {
            None
        } else {
            Some(name.to_string())
        }
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
    let mut out = summed_by_pid(compute);
    for g in &summed_by_pid(graphics) {
        add_use(&mut out, g.pid, g.used, Option::max);
    }
    out
}

/// One entry per pid of one NVML list, its entries' uses added up (see [`merge`]).
fn summed_by_pid(infos: &[ProcessInfo]) -> Vec<GpuProcess> {
    let mut out: Vec<GpuProcess> = Vec::new();
    for info in infos {
        let used = (info.used_gpu_memory != NOT_AVAILABLE).then_some(info.used_gpu_memory);
        add_use(&mut out, info.pid, used, sum_of_uses);
    }
    out
}

/// Two uses of one pid added up; a use NVML cannot tell adds nothing.
fn sum_of_uses(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// Adds `pid`'s use `used` to `processes`: combined by `combine` with the use of its entry,
/// or as a new entry where it has none.
fn add_use(
    processes: &mut Vec<GpuProcess>,
    pid: u32,
    used: Option<u64>,
    combine: fn(Option<u64>, Option<u64>) -> Option<u64>,
) {
    for p in processes.iter_mut() {
        if p.pid == pid {
            p.used = combine(p.used, used);
            return;
        }
    }
    processes.push(GpuProcess { pid, used });
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let process = |pid, used| GpuProcess { pid, used };
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
        assert_eq!(crate::live::process_name(u32::MAX), None);
    }
}
