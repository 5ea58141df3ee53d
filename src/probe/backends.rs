//! The probes themselves, run in the probe child (or in-process when asked).

use super::outcome::ProbeOutcome;
use crate::backend::Backend;

/// Probes `backend` in this process, turning a panic into [`ProbeOutcome::Error`].
pub(super) fn probe_here_catching(backend: Backend) -> ProbeOutcome {
    std::panic::catch_unwind(|| probe_here(backend)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic".into());
        ProbeOutcome::Error {
            detail: format!("the {backend} probe panicked: {msg}"),
        }
    })
}

fn probe_here(backend: Backend) -> ProbeOutcome {
    match backend {
        #[cfg(feature = "cuda")]
        Backend::Cuda => cuda::probe(),
        #[cfg(feature = "wgpu")]
        Backend::Wgpu => wgpu_probe::probe(),
        #[allow(unreachable_patterns)] // reachable when a feature is off
        _ => ProbeOutcome::NotBuilt,
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use cudarc::driver::{result, sys};

    // Codes are named from a static table, not by `cuGetErrorName`: formatting cudarc's
    // `DriverError` calls into the driver, which may be absent or broken.
    use crate::cuda_codes::DriverCode;
    use crate::probe::outcome::{Device, DeviceKind, ProbeOutcome};

    pub(super) fn probe() -> ProbeOutcome {
        // SAFETY: only asks the dynamic loader for the driver library under its usual names;
        // every other cudarc entry point panics when the library is missing.
        if !unsafe { sys::is_culib_present() } {
            return ProbeOutcome::NotInstalled {
                detail: "the dynamic loader finds no libcuda (the NVIDIA driver library); \
                         install the driver or put its directory in LD_LIBRARY_PATH"
                    .into(),
            };
        }
        if let Err(e) = result::init() {
            return match e.0 {
                sys::CUresult::CUDA_ERROR_NO_DEVICE => ProbeOutcome::NoDevices {
                    detail: format!("cuInit reported {}", DriverCode::from(e)),
                },
                // The CUDA toolkit's stub libcuda, found where no driver is installed.
                sys::CUresult::CUDA_ERROR_STUB_LIBRARY => ProbeOutcome::NotInstalled {
                    detail: format!(
                        "cuInit reported {}: the libcuda found is the toolkit's stub, not a driver",
                        DriverCode::from(e)
                    ),
                },
                _ => ProbeOutcome::Error {
                    detail: format!("cuInit failed with {}", DriverCode::from(e)),
                },
            };
        }
        let mut version = 0;
        // SAFETY: writes one int through a valid pointer; the library is loaded and initialised.
        let driver = match unsafe { sys::cuDriverGetVersion(&mut version) } {
            sys::CUresult::CUDA_SUCCESS => {
                Some(format!("CUDA {}.{}", version / 1000, (version % 1000) / 10))
            }
            _ => None,
        };
        let count = match result::device::get_count() {
            Ok(n) => n,
            Err(e) => {
                return ProbeOutcome::Error {
                    detail: format!("cuDeviceGetCount failed with {}", DriverCode::from(e)),
                };
            }
        };
        if count <= 0 {
            return ProbeOutcome::NoDevices {
                detail: format!("cuInit succeeded but cuDeviceGetCount reports {count} devices"),
            };
        }
        let mut devices = Vec::new();
        for i in 0..count {
            let fail = |call: &str, e: result::DriverError| ProbeOutcome::Error {
                detail: format!("{call} for device {i} failed with {}", DriverCode::from(e)),
            };
            let dev = match result::device::get(i) {
                Ok(d) => d,
                Err(e) => return fail("cuDeviceGet", e),
            };
            let name = match result::device::get_name(dev) {
                Ok(n) => n,
                Err(e) => return fail("cuDeviceGetName", e),
            };
            // SAFETY: `dev` came from cuDeviceGet.
            let memory = unsafe { result::device::total_mem(dev) }.ok();
            // SAFETY: `dev` came from cuDeviceGet.
            let integrated = unsafe {
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_INTEGRATED,
                )
            };
            devices.push(Device {
                index: i as u32,
                name,
                api: "cuda".into(),
                kind: match integrated {
                    Ok(0) => DeviceKind::Discrete,
                    Ok(_) => DeviceKind::Integrated,
                    Err(_) => DeviceKind::Other,
                },
                driver: driver.clone(),
                memory_bytes: memory.map(|m| m as u64),
            });
        }
        ProbeOutcome::Devices { devices }
    }
}

#[cfg(feature = "wgpu")]
mod wgpu_probe {
    use crate::probe::outcome::{Device, DeviceKind, ProbeOutcome};

    pub(super) fn probe() -> ProbeOutcome {
        // The backends the fixture uses, in its order, stopping at the first tier with an
        // adapter: initialising GL/EGL beside a working Vulkan driver costs time and can hang,
        // which would turn a usable machine into a timed-out probe.
        let mut adapters = Vec::new();
        for backends in crate::backend::wgpu_tiers(crate::config::wgpu_backend_set()) {
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                backends,
                ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
            });
            adapters = pollster::block_on(instance.enumerate_adapters(backends));
            if !adapters.is_empty() {
                break;
            }
        }
        let devices: Vec<Device> = adapters
            .iter()
            .map(|a| a.get_info())
            .filter(|info| info.backend != wgpu::Backend::Noop)
            .enumerate()
            .map(|(i, info)| Device {
                index: i as u32,
                kind: match info.device_type {
                    wgpu::DeviceType::DiscreteGpu => DeviceKind::Discrete,
                    wgpu::DeviceType::IntegratedGpu => DeviceKind::Integrated,
                    wgpu::DeviceType::Cpu => DeviceKind::Cpu,
                    wgpu::DeviceType::VirtualGpu => DeviceKind::Virtual,
                    wgpu::DeviceType::Other => DeviceKind::Other,
                },
                api: info.backend.to_str().to_string(),
                driver: match (info.driver.trim(), info.driver_info.trim()) {
                    ("", "") => None,
                    (d, "") | ("", d) => Some(d.to_string()),
                    (d, i) => Some(format!("{d} {i}")),
                },
                name: info.name,
                memory_bytes: None,
            })
            .collect();
        if devices.is_empty() {
            ProbeOutcome::NoDevices {
                detail: "wgpu enumerated no adapter: no Vulkan, Metal, DX12 or GL driver \
                         answered (for a CPU device install Mesa's lavapipe)"
                    .into(),
            }
        } else {
            ProbeOutcome::Devices { devices }
        }
    }
}
