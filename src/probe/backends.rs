//! The probes themselves, run in the probe child (or in-process when asked): CUDA through the
//! driver library (`cuda`), wgpu through the `wgpu` crate with its feature, else through the
//! Vulkan loader (`vulkan`).

use super::outcome::ProbeOutcome;
use crate::backend::Backend;

/// Probes `backend` in this process, turning a panic into [`ProbeOutcome::Error`].
pub(super) fn probe_here_catching(backend: Backend) -> ProbeOutcome {
    let panic = match std::panic::catch_unwind(|| probe_here(backend)) {
        Ok(outcome) => return outcome,
        Err(panic) => panic,
    };
    let msg = if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-text panic".into()
    };
    ProbeOutcome::Error {
        detail: format!("the {backend} probe panicked: {msg}"),
    }
}

fn probe_here(backend: Backend) -> ProbeOutcome {
    match backend {
        Backend::Cuda => super::cuda::probe(),
        Backend::Wgpu => wgpu(),
    }
}

/// wgpu's answer: with the `wgpu` feature, wgpu's own enumeration (every backend it has here:
/// Vulkan, Metal, DX12, GL); without it, the Vulkan loader's, where wgpu's default backend is
/// Vulkan and `WGPU_BACKEND`, when set, names it.
fn wgpu() -> ProbeOutcome {
    #[cfg(feature = "wgpu")]
    {
        wgpu_probe::probe()
    }
    #[cfg(not(feature = "wgpu"))]
    {
        let selected = crate::config::wgpu_backend();
        let has_loader = !crate::sys::VULKAN_LOADER_LIBRARIES.is_empty();
        if has_loader && super::vulkan::vulkan_selected(selected.as_deref()) {
            super::vulkan::probe()
        } else {
            // Only wgpu itself reaches Metal (macOS's backend), DX12 and GL.
            ProbeOutcome::NotBuilt
        }
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
        let mut devices = Vec::new();
        for a in &adapters {
            let info = a.get_info();
            if info.backend == wgpu::Backend::Noop {
                continue;
            }
            let index = devices.len() as u32;
            devices.push(Device {
                index,
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
            });
        }
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
