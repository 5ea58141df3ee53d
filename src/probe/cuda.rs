//! The CUDA probe: the driver library (`libcuda.so.1`, `nvcuda.dll`) loaded at run time and
//! asked through the driver API (`cuInit`, `cuDriverGetVersion`, `cuDeviceGetCount`,
//! `cuDeviceGet`, `cuDeviceGetName`, `cuDeviceTotalMem_v2`, `cuDeviceGetAttribute`). No CUDA
//! crate is involved, so it answers the same for every project, whatever CUDA bindings it uses.

use std::ffi::{CStr, c_char, c_int, c_uint};

use super::native::{function, listed, open_first, required, text};
use super::outcome::{Device, DeviceKind, ProbeOutcome};
// Codes are named from a static table, not by `cuGetErrorName`: that calls into the driver,
// which may be absent or broken.
use crate::cuda_codes::DriverCode;

/// `CUresult`.
type CuResult = c_int;
/// `CUdevice`: an ordinal.
type CuDevice = c_int;

const CUDA_SUCCESS: CuResult = 0;
const CUDA_ERROR_STUB_LIBRARY: CuResult = 34;
const CUDA_ERROR_NO_DEVICE: CuResult = 100;
const CU_DEVICE_ATTRIBUTE_INTEGRATED: c_int = 18;

type CuInit = unsafe extern "system" fn(flags: c_uint) -> CuResult;
type CuDriverGetVersion = unsafe extern "system" fn(version: *mut c_int) -> CuResult;
type CuDeviceGetCount = unsafe extern "system" fn(count: *mut c_int) -> CuResult;
type CuDeviceGet = unsafe extern "system" fn(device: *mut CuDevice, ordinal: c_int) -> CuResult;
type CuDeviceGetName =
    unsafe extern "system" fn(name: *mut c_char, len: c_int, device: CuDevice) -> CuResult;
type CuDeviceTotalMem = unsafe extern "system" fn(bytes: *mut usize, device: CuDevice) -> CuResult;
type CuDeviceGetAttribute =
    unsafe extern "system" fn(value: *mut c_int, attribute: c_int, device: CuDevice) -> CuResult;

fn code(result: CuResult) -> DriverCode {
    DriverCode(result as u32)
}

/// Probes the CUDA driver in this process.
pub(super) fn probe() -> ProbeOutcome {
    let names = crate::sys::CUDA_DRIVER_LIBRARIES;
    let Some((lib, name)) = open_first(names) else {
        return ProbeOutcome::NotInstalled {
            detail: format!(
                "the dynamic loader finds no {} (the NVIDIA driver library); install the \
                 driver or put its directory in {}",
                listed(names),
                crate::sys::LIBRARY_PATH_VAR
            ),
        };
    };
    match probe_library(&lib, name) {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

fn probe_library(lib: &crate::sys::Library, name: &CStr) -> Result<ProbeOutcome, ProbeOutcome> {
    // SAFETY (every symbol below): the types are the driver API's C signatures of these names.
    let init: CuInit = unsafe { required(lib, name, c"cuInit") }?;
    // SAFETY: as above.
    let get_count: CuDeviceGetCount = unsafe { required(lib, name, c"cuDeviceGetCount") }?;
    // SAFETY: as above.
    let get: CuDeviceGet = unsafe { required(lib, name, c"cuDeviceGet") }?;
    // SAFETY: as above.
    let get_name: CuDeviceGetName = unsafe { required(lib, name, c"cuDeviceGetName") }?;
    // Details a device listing does without.
    // SAFETY: as above.
    let get_version: Option<CuDriverGetVersion> = unsafe { function(lib, c"cuDriverGetVersion") };
    // SAFETY: as above.
    let total_mem: Option<CuDeviceTotalMem> = unsafe { function(lib, c"cuDeviceTotalMem_v2") };
    // SAFETY: as above.
    let get_attribute: Option<CuDeviceGetAttribute> =
        unsafe { function(lib, c"cuDeviceGetAttribute") };

    // SAFETY: cuInit takes flags (0) and nothing else.
    let r = unsafe { init(0) };
    match r {
        CUDA_SUCCESS => {}
        CUDA_ERROR_NO_DEVICE => {
            return Ok(ProbeOutcome::NoDevices {
                detail: format!("cuInit reported {}", code(r)),
            });
        }
        // The CUDA toolkit's stub libcuda, found where no driver is installed.
        CUDA_ERROR_STUB_LIBRARY => {
            return Ok(ProbeOutcome::NotInstalled {
                detail: format!(
                    "cuInit reported {}: the {} found is the toolkit's stub, not a driver",
                    code(r),
                    name.to_string_lossy()
                ),
            });
        }
        _ => {
            return Err(ProbeOutcome::Error {
                detail: format!("cuInit failed with {}", code(r)),
            });
        }
    }
    let driver = match get_version {
        Some(f) => {
            let mut version: c_int = 0;
            // SAFETY: writes one int through a valid pointer; the driver is initialised.
            if unsafe { f(&mut version) } == CUDA_SUCCESS {
                Some(format!("CUDA {}.{}", version / 1000, (version % 1000) / 10))
            } else {
                None
            }
        }
        None => None,
    };
    let mut count: c_int = 0;
    // SAFETY: writes one int through a valid pointer; the driver is initialised.
    let r = unsafe { get_count(&mut count) };
    if r != CUDA_SUCCESS {
        return Err(ProbeOutcome::Error {
            detail: format!("cuDeviceGetCount failed with {}", code(r)),
        });
    }
    if count <= 0 {
        return Ok(ProbeOutcome::NoDevices {
            detail: format!("cuInit succeeded but cuDeviceGetCount reports {count} devices"),
        });
    }
    let mut devices = Vec::new();
    for i in 0..count {
        let fail = |call: &str, r: CuResult| ProbeOutcome::Error {
            detail: format!("{call} for device {i} failed with {}", code(r)),
        };
        let mut dev: CuDevice = 0;
        // SAFETY: writes one int through a valid pointer; `i` is below the device count.
        let r = unsafe { get(&mut dev, i) };
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGet", r));
        }
        let mut buffer = [0u8; 256];
        // SAFETY: the driver writes at most `len` bytes (a NUL-terminated name) into `buffer`;
        // `dev` came from cuDeviceGet.
        let r = unsafe { get_name(buffer.as_mut_ptr().cast(), buffer.len() as c_int, dev) };
        if r != CUDA_SUCCESS {
            return Err(fail("cuDeviceGetName", r));
        }
        let mut memory = None;
        if let Some(f) = total_mem {
            let mut bytes: usize = 0;
            // SAFETY: writes one size_t through a valid pointer; `dev` came from cuDeviceGet.
            if unsafe { f(&mut bytes, dev) } == CUDA_SUCCESS {
                memory = Some(bytes as u64);
            }
        }
        let mut integrated = None;
        if let Some(f) = get_attribute {
            let mut value: c_int = 0;
            // SAFETY: writes one int through a valid pointer; `dev` came from cuDeviceGet.
            if unsafe { f(&mut value, CU_DEVICE_ATTRIBUTE_INTEGRATED, dev) } == CUDA_SUCCESS {
                integrated = Some(value);
            }
        }
        devices.push(Device {
            index: i as u32,
            name: text(&buffer),
            api: "cuda".into(),
            kind: match integrated {
                Some(0) => DeviceKind::Discrete,
                Some(_) => DeviceKind::Integrated,
                None => DeviceKind::Other,
            },
            driver: driver.clone(),
            memory_bytes: memory,
        });
    }
    Ok(ProbeOutcome::Devices { devices })
}
