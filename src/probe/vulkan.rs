//! The Vulkan probe, wgpu's answer without the `wgpu` feature: the Vulkan loader
//! (`libvulkan.so.1`, `vulkan-1.dll`) loaded at run time, a Vulkan 1.0 instance without layers
//! or extensions, and its physical devices (`vkEnumeratePhysicalDevices`,
//! `vkGetPhysicalDeviceProperties`, `vkGetPhysicalDeviceMemoryProperties`). The loader finds
//! the same drivers (ICDs) wgpu's Vulkan backend would, under the same `VK_DRIVER_FILES` and
//! `VK_ICD_FILENAMES`.

// With the `wgpu` feature wgpu answers instead; this probe still builds there, and its tests
// run in every build.
#![cfg_attr(feature = "wgpu", allow(dead_code))]

use std::ffi::{CStr, c_char, c_void};

use super::native::{as_function, listed, open_first, required, text};
use super::outcome::{Device, DeviceKind, ProbeOutcome};

type VkResult = i32;
/// A dispatchable handle: a pointer.
type VkInstance = *mut c_void;
/// A dispatchable handle: a pointer.
type VkPhysicalDevice = *mut c_void;

const VK_SUCCESS: VkResult = 0;
const VK_INCOMPLETE: VkResult = 5;
const VK_ERROR_INCOMPATIBLE_DRIVER: VkResult = -9;
const VK_STRUCTURE_TYPE_APPLICATION_INFO: i32 = 0;
const VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO: i32 = 1;
const VK_API_VERSION_1_0: u32 = 1 << 22;
const VK_MEMORY_HEAP_DEVICE_LOCAL_BIT: u32 = 1;
/// NVIDIA's PCI vendor id: its driver versions are packed 10.8.8.6 bits.
const VENDOR_NVIDIA: u32 = 0x10de;

#[repr(C)]
struct VkApplicationInfo {
    s_type: i32,
    p_next: *const c_void,
    p_application_name: *const c_char,
    application_version: u32,
    p_engine_name: *const c_char,
    engine_version: u32,
    api_version: u32,
}

#[repr(C)]
struct VkInstanceCreateInfo {
    s_type: i32,
    p_next: *const c_void,
    flags: u32,
    p_application_info: *const VkApplicationInfo,
    enabled_layer_count: u32,
    pp_enabled_layer_names: *const *const c_char,
    enabled_extension_count: u32,
    pp_enabled_extension_names: *const *const c_char,
}

/// `VkPhysicalDeviceProperties` (824 bytes), with its fields up to `pipelineCacheUUID` and
/// room to spare for the rest (`limits` and `sparseProperties`, which start 8-aligned).
#[repr(C, align(8))]
struct VkPhysicalDeviceProperties {
    api_version: u32,
    driver_version: u32,
    vendor_id: u32,
    device_id: u32,
    device_type: i32,
    device_name: [u8; 256],
    pipeline_cache_uuid: [u8; 16],
    limits_and_sparse_properties: [u8; 1024],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VkMemoryType {
    property_flags: u32,
    heap_index: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VkMemoryHeap {
    size: u64,
    flags: u32,
}

/// `VkPhysicalDeviceMemoryProperties`, exactly.
#[repr(C)]
struct VkPhysicalDeviceMemoryProperties {
    memory_type_count: u32,
    memory_types: [VkMemoryType; 32],
    memory_heap_count: u32,
    memory_heaps: [VkMemoryHeap; 16],
}

type GetInstanceProcAddr =
    unsafe extern "system" fn(instance: VkInstance, name: *const c_char) -> *mut c_void;
type CreateInstance = unsafe extern "system" fn(
    info: *const VkInstanceCreateInfo,
    allocator: *const c_void,
    instance: *mut VkInstance,
) -> VkResult;
type DestroyInstance = unsafe extern "system" fn(instance: VkInstance, allocator: *const c_void);
type EnumeratePhysicalDevices = unsafe extern "system" fn(
    instance: VkInstance,
    count: *mut u32,
    devices: *mut VkPhysicalDevice,
) -> VkResult;
type GetPhysicalDeviceProperties = unsafe extern "system" fn(
    device: VkPhysicalDevice,
    properties: *mut VkPhysicalDeviceProperties,
);
type GetPhysicalDeviceMemoryProperties = unsafe extern "system" fn(
    device: VkPhysicalDevice,
    properties: *mut VkPhysicalDeviceMemoryProperties,
);

/// A `VkResult`'s name, for the codes instance creation and enumeration return.
fn result_name(r: VkResult) -> String {
    let name = match r {
        0 => "VK_SUCCESS",
        5 => "VK_INCOMPLETE",
        -1 => "VK_ERROR_OUT_OF_HOST_MEMORY",
        -2 => "VK_ERROR_OUT_OF_DEVICE_MEMORY",
        -3 => "VK_ERROR_INITIALIZATION_FAILED",
        -4 => "VK_ERROR_DEVICE_LOST",
        -6 => "VK_ERROR_LAYER_NOT_PRESENT",
        -7 => "VK_ERROR_EXTENSION_NOT_PRESENT",
        -9 => "VK_ERROR_INCOMPATIBLE_DRIVER",
        -13 => "VK_ERROR_UNKNOWN",
        _ => return format!("VkResult {r}"),
    };
    format!("{name} ({r})")
}

/// `VK_VERSION_MAJOR.MINOR.PATCH` of a packed version.
fn api_version(v: u32) -> String {
    format!("{}.{}.{}", (v >> 22) & 0x7f, (v >> 12) & 0x3ff, v & 0xfff)
}

/// A driver version as its vendor packs it: NVIDIA's own layout, else Vulkan's (Mesa, AMD).
fn driver_version(vendor: u32, v: u32) -> String {
    if vendor == VENDOR_NVIDIA {
        format!("{}.{}.{}", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff)
    } else {
        api_version(v)
    }
}

fn kind(device_type: i32) -> DeviceKind {
    match device_type {
        1 => DeviceKind::Integrated,
        2 => DeviceKind::Discrete,
        3 => DeviceKind::Virtual,
        4 => DeviceKind::Cpu,
        _ => DeviceKind::Other,
    }
}

/// Whether wgpu, as the environment sets it, would use Vulkan: `WGPU_BACKEND` unset, or a list
/// that names it (`vulkan` or `vk`, as wgpu reads it).
pub(super) fn vulkan_selected(wgpu_backend: Option<&str>) -> bool {
    let Some(list) = wgpu_backend else {
        return true;
    };
    for w in list.split(',') {
        let w = w.trim().to_ascii_lowercase();
        if w == "vulkan" || w == "vk" {
            return true;
        }
    }
    false
}

/// Probes the Vulkan loader and its drivers in this process.
pub(super) fn probe() -> ProbeOutcome {
    let names = crate::sys::VULKAN_LOADER_LIBRARIES;
    let Some((lib, name)) = open_first(names) else {
        return ProbeOutcome::NotInstalled {
            detail: format!(
                "the dynamic loader finds no Vulkan loader ({}); install it (libvulkan1) and a \
                 driver (for a CPU device Mesa's lavapipe, mesa-vulkan-drivers)",
                listed(names)
            ),
        };
    };
    match probe_loader(&lib, name) {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

/// A Vulkan instance, destroyed when dropped.
struct Instance {
    handle: VkInstance,
    destroy: Option<DestroyInstance>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(destroy) = self.destroy {
            // SAFETY: `handle` came from vkCreateInstance and nothing made from it remains
            // (physical devices need no destruction).
            unsafe { destroy(self.handle, std::ptr::null()) };
        }
    }
}

/// The instance-level function `name` from `vkGetInstanceProcAddr`, as `F`.
///
/// # Safety
///
/// `F` must be the function pointer type of the Vulkan command `name`; `instance` null or a
/// live instance.
unsafe fn command<F: Copy>(
    get: GetInstanceProcAddr,
    instance: VkInstance,
    name: &CStr,
) -> Result<F, ProbeOutcome> {
    // SAFETY: passed on from the caller.
    match unsafe { command_address(get, instance, name) } {
        // SAFETY: non-null, the entry point of `name`, whose type the caller promises `F` is.
        Ok(address) => Ok(unsafe { as_function(address) }),
        Err(e) => Err(e),
    }
}

/// The address of command `name` of `instance`, not null.
///
/// # Safety
///
/// `instance` is null or a live instance that `get` made.
unsafe fn command_address(
    get: GetInstanceProcAddr,
    instance: VkInstance,
    name: &CStr,
) -> Result<*mut c_void, ProbeOutcome> {
    // SAFETY: `name` is a valid C string; the caller vouches for `instance`.
    let address = unsafe { get(instance, name.as_ptr()) };
    if address.is_null() {
        return Err(ProbeOutcome::Error {
            detail: format!(
                "vkGetInstanceProcAddr gives no {}: not a Vulkan loader this probe understands",
                name.to_string_lossy()
            ),
        });
    }
    Ok(address)
}

fn probe_loader(lib: &crate::sys::Library, name: &CStr) -> Result<ProbeOutcome, ProbeOutcome> {
    // SAFETY: the loader exports vkGetInstanceProcAddr with this C signature.
    let get: GetInstanceProcAddr = unsafe { required(lib, name, c"vkGetInstanceProcAddr") }?;
    // SAFETY: a global command, asked for with a null instance; its type is vkCreateInstance's.
    let create: CreateInstance =
        unsafe { command(get, std::ptr::null_mut(), c"vkCreateInstance") }?;
    let app = VkApplicationInfo {
        s_type: VK_STRUCTURE_TYPE_APPLICATION_INFO,
        p_next: std::ptr::null(),
        p_application_name: c"gpu-test-permit probe".as_ptr(),
        application_version: 0,
        p_engine_name: std::ptr::null(),
        engine_version: 0,
        api_version: VK_API_VERSION_1_0,
    };
    let info = VkInstanceCreateInfo {
        s_type: VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        p_next: std::ptr::null(),
        flags: 0,
        p_application_info: &app,
        enabled_layer_count: 0,
        pp_enabled_layer_names: std::ptr::null(),
        enabled_extension_count: 0,
        pp_enabled_extension_names: std::ptr::null(),
    };
    let mut handle: VkInstance = std::ptr::null_mut();
    // SAFETY: `info` and `app` are valid, fully initialised and outlive the call; no allocator;
    // the instance handle is written through a valid pointer.
    let r = unsafe { create(&info, std::ptr::null(), &mut handle) };
    match r {
        VK_SUCCESS if !handle.is_null() => {}
        VK_SUCCESS => {
            return Err(ProbeOutcome::Error {
                detail: "vkCreateInstance succeeded but gave a null instance".into(),
            });
        }
        VK_ERROR_INCOMPATIBLE_DRIVER => {
            return Ok(ProbeOutcome::NoDevices {
                detail: format!(
                    "vkCreateInstance reported {}: the Vulkan loader found no driver (for a \
                     CPU device install Mesa's lavapipe)",
                    result_name(r)
                ),
            });
        }
        _ => {
            return Err(ProbeOutcome::Error {
                detail: format!("vkCreateInstance failed with {}", result_name(r)),
            });
        }
    }
    // SAFETY: `handle` is the live instance just made; the type is vkDestroyInstance's.
    let destroy: Option<DestroyInstance> =
        unsafe { command(get, handle, c"vkDestroyInstance") }.ok();
    let instance = Instance { handle, destroy };
    // SAFETY (the three below): `instance.handle` is live; the types are the commands'.
    let enumerate: EnumeratePhysicalDevices =
        unsafe { command(get, instance.handle, c"vkEnumeratePhysicalDevices") }?;
    // SAFETY: as above.
    let properties: GetPhysicalDeviceProperties =
        unsafe { command(get, instance.handle, c"vkGetPhysicalDeviceProperties") }?;
    // SAFETY: as above.
    let memory: Option<GetPhysicalDeviceMemoryProperties> =
        unsafe { command(get, instance.handle, c"vkGetPhysicalDeviceMemoryProperties") }.ok();

    let mut count: u32 = 0;
    // SAFETY: asks for the count only (null array); writes one u32 through a valid pointer.
    let r = unsafe { enumerate(instance.handle, &mut count, std::ptr::null_mut()) };
    if r != VK_SUCCESS {
        return Err(ProbeOutcome::Error {
            detail: format!("vkEnumeratePhysicalDevices failed with {}", result_name(r)),
        });
    }
    let mut handles: Vec<VkPhysicalDevice> = vec![std::ptr::null_mut(); count as usize];
    if count > 0 {
        // SAFETY: `handles` has room for `count` handles, the number passed in.
        let r = unsafe { enumerate(instance.handle, &mut count, handles.as_mut_ptr()) };
        // A device gone between the calls: the count says how many were written.
        if r != VK_SUCCESS && r != VK_INCOMPLETE {
            return Err(ProbeOutcome::Error {
                detail: format!("vkEnumeratePhysicalDevices failed with {}", result_name(r)),
            });
        }
        handles.truncate(count as usize);
    }
    let mut found = Vec::with_capacity(handles.len());
    for &h in &handles {
        if !h.is_null() {
            found.push(h);
        }
    }
    if found.is_empty() {
        return Ok(ProbeOutcome::NoDevices {
            detail: "the Vulkan loader's drivers report no physical device (for a CPU device \
                     install Mesa's lavapipe)"
                .into(),
        });
    }
    let mut devices = Vec::new();
    for &device in &found {
        // SAFETY: all-zero bytes are a valid value of this plain-data struct.
        let mut p: VkPhysicalDeviceProperties = unsafe { std::mem::zeroed() };
        // SAFETY: `device` came from vkEnumeratePhysicalDevices of the live instance; `p` is
        // larger than the driver's VkPhysicalDeviceProperties and aligned for it.
        unsafe { properties(device, &mut p) };
        let memory_bytes = match memory {
            // SAFETY: `device` came from vkEnumeratePhysicalDevices of the live instance, and
            // `f` is its instance's vkGetPhysicalDeviceMemoryProperties.
            Some(f) => unsafe { device_local_bytes(f, device) },
            None => None,
        };
        devices.push(Device {
            // One device a turn: its position among those found.
            index: devices.len() as u32,
            name: text(&p.device_name),
            api: "vulkan".into(),
            kind: kind(p.device_type),
            driver: Some(format!(
                "{} (Vulkan {})",
                driver_version(p.vendor_id, p.driver_version),
                api_version(p.api_version)
            )),
            memory_bytes,
        });
    }
    drop(instance);
    Ok(ProbeOutcome::Devices { devices })
}

/// The sum of the device-local heaps of `device`, as `memory` reports them; `None` where it
/// reports none.
///
/// # Safety
///
/// `device` is a physical device of a live instance, and `memory` that instance's
/// vkGetPhysicalDeviceMemoryProperties.
unsafe fn device_local_bytes(
    memory: GetPhysicalDeviceMemoryProperties,
    device: VkPhysicalDevice,
) -> Option<u64> {
    // SAFETY: all-zero bytes are a valid value of this plain-data struct.
    let mut m: VkPhysicalDeviceMemoryProperties = unsafe { std::mem::zeroed() };
    // SAFETY: the caller vouches for `device` and `memory`; `m` is the exact struct.
    unsafe { memory(device, &mut m) };
    let heaps = &m.memory_heaps[..(m.memory_heap_count as usize).min(16)];
    let mut local: u64 = 0;
    for h in heaps {
        if h.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT != 0 {
            local = local.saturating_add(h.size);
        }
    }
    if local > 0 { Some(local) } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_vulkan() {
        // Offsets and sizes of the C headers (LP64 and LLP64 alike).
        assert_eq!(
            std::mem::offset_of!(VkPhysicalDeviceProperties, device_type),
            16
        );
        assert_eq!(
            std::mem::offset_of!(VkPhysicalDeviceProperties, device_name),
            20
        );
        assert!(size_of::<VkPhysicalDeviceProperties>() >= 824);
        assert_eq!(size_of::<VkPhysicalDeviceMemoryProperties>(), 520);
        assert_eq!(
            std::mem::offset_of!(VkPhysicalDeviceMemoryProperties, memory_heaps),
            264
        );
        assert_eq!(
            std::mem::offset_of!(VkInstanceCreateInfo, p_application_info),
            if size_of::<usize>() == 8 { 24 } else { 12 }
        );
    }

    #[test]
    fn versions_and_kinds_read_as_vulkan_packs_them() {
        // VK_MAKE_API_VERSION(0, 1, 3, 230), Mesa 22.3.6, NVIDIA 535.104.5.
        assert_eq!(api_version((1 << 22) | (3 << 12) | 230), "1.3.230");
        assert_eq!(driver_version(0x1002, (22 << 22) | (3 << 12) | 6), "22.3.6");
        assert_eq!(
            driver_version(VENDOR_NVIDIA, (535 << 22) | (104 << 14) | (5 << 6)),
            "535.104.5"
        );
        assert_eq!(kind(4), DeviceKind::Cpu);
        assert_eq!(kind(2), DeviceKind::Discrete);
        assert_eq!(kind(1), DeviceKind::Integrated);
        assert_eq!(kind(3), DeviceKind::Virtual);
        assert_eq!(kind(0), DeviceKind::Other);
        assert_eq!(kind(77), DeviceKind::Other);
        assert_eq!(result_name(-9), "VK_ERROR_INCOMPATIBLE_DRIVER (-9)");
        assert_eq!(result_name(-1000), "VkResult -1000");
    }

    #[test]
    fn wgpu_backend_selects_vulkan_as_wgpu_reads_it() {
        assert!(vulkan_selected(None));
        assert!(vulkan_selected(Some("vulkan")));
        assert!(vulkan_selected(Some("gl, VK")));
        assert!(!vulkan_selected(Some("gl")));
        assert!(!vulkan_selected(Some("metal,dx12")));
        assert!(!vulkan_selected(Some("")));
    }
}
