//! Loading Vulkan, the instance, the validation messenger, and the list of
//! devices (adapters) in Keel's documented order.
//!
//! Everything here happens once per process, on first use of the Vulkan
//! backend. A missing loader, a failing instance, or no device with a
//! compute queue is recorded as the reason the backend is unavailable;
//! nothing here panics.

use std::ffi::{CStr, CString, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

use ash::vk;

use crate::backend::DeviceKind;

/// One Vulkan physical device with a compute queue family.
#[derive(Clone)]
pub(super) struct Adapter {
    pub physical: vk::PhysicalDevice,
    pub props: vk::PhysicalDeviceProperties,
    pub name: String,
    pub kind: DeviceKind,
    /// The queue family Keel uses: on a device of Keel's own the first
    /// with COMPUTE, preferring one without GRAPHICS (a dedicated compute
    /// family); on an adopted device the one the program named.
    pub family: u32,
    /// How many of the family's queues Keel submits to (all of them on a
    /// device of its own, the program's one on an adopted device).
    pub queue_count: u32,
    pub timestamp_valid_bits: u32,
    pub families: Vec<vk::QueueFamilyProperties>,
    pub driver_name: String,
    pub driver_info: String,
    pub subgroup_size: u32,
    /// Subgroup operations compute shaders can use (empty when the
    /// compute stage has none).
    pub subgroup_operations: vk::SubgroupFeatureFlags,
    pub device_local_memory: u64,
    /// Native f16 in shaders: `shaderFloat16` with
    /// `storageBuffer16BitAccess` and `uniformAndStorageBuffer16BitAccess`
    /// (what naga's SPIR-V for `enable f16;` declares); enabled at device
    /// creation when true.
    pub f16_storage: bool,
    /// Where Keel's cooperative-matrix kernel runs, on a device made with
    /// `Requirements::cooperative_matrix`: none until a device is made
    /// with them.
    pub cooperative: Option<super::device::Cooperative>,
}

/// The loaded library, the instance and the adapters.
pub(super) struct Vk {
    // Keeps the loader library loaded for as long as the instance lives.
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub adapters: Vec<Adapter>,
    // Kept so the messenger lives as long as the instance (the process).
    _messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

static VK: LazyLock<Result<Vk, String>> = LazyLock::new(load);

/// The Vulkan instance, or why there is none.
pub(super) fn vk() -> Result<&'static Vk, &'static str> {
    VK.as_ref().map_err(String::as_str)
}

static VALIDATION_ERRORS: AtomicUsize = AtomicUsize::new(0);
static VALIDATION_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// How many validation errors the Khronos validation layer (or any other
/// layer) reported through Keel's debug messenger in this process.
pub fn validation_error_count() -> usize {
    VALIDATION_ERRORS.load(Ordering::Relaxed)
}

/// The validation error messages reported so far (at most the first 100).
pub fn validation_messages() -> Vec<String> {
    VALIDATION_MESSAGES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The text of a debug messenger callback's message.
///
/// # Safety
/// `data` is what the loader passed the callback: a valid callback-data
/// struct (or null), alive for the duration of the call.
pub(crate) unsafe fn callback_message(
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
) -> String {
    // SAFETY: the caller's promise; `p_message` is null or a
    // NUL-terminated string.
    unsafe {
        data.as_ref()
            .filter(|d| !d.p_message.is_null())
            .map(|d| CStr::from_ptr(d.p_message).to_string_lossy().into_owned())
    }
    .unwrap_or_else(|| "(no message)".to_owned())
}

/// Called by the Vulkan loader for every message of the layers.
unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        VALIDATION_ERRORS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the loader's callback data, as received.
        let message = unsafe { callback_message(data) };
        eprintln!("keel: Vulkan validation error: {message}");
        let mut messages = VALIDATION_MESSAGES
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if messages.len() < 100 {
            messages.push(message);
        }
    }
    vk::FALSE
}

fn load() -> Result<Vk, String> {
    // SAFETY: loading the system's Vulkan loader library runs its
    // initialisers; the loader is designed to be loaded this way, once.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| format!("the Vulkan loader (libvulkan) could not be loaded: {e}"))?;
    // SAFETY: `entry` holds valid global function pointers.
    let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
        .map_err(|e| format!("vkEnumerateInstanceExtensionProperties failed: {e}"))?;
    let has = |name: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
    };
    let debug_utils = has(ash::ext::debug_utils::NAME);
    let mut enabled: Vec<*const std::ffi::c_char> = Vec::new();
    if debug_utils {
        enabled.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    let app_name = CString::from(c"keel");
    let app = vk::ApplicationInfo::default()
        .application_name(&app_name)
        .engine_name(&app_name)
        .api_version(vk::API_VERSION_1_3);
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_extension_names(&enabled);
    // SAFETY: `info` and everything it points to live until the call
    // returns; the instance is never destroyed (it lives for the process).
    let instance = unsafe { entry.create_instance(&info, None) }
        .map_err(|e| format!("vkCreateInstance failed: {e}"))?;

    let messenger = if debug_utils {
        let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
        let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback));
        // SAFETY: the instance was created with VK_EXT_debug_utils; the
        // callback is a `'static` function that never unwinds.
        unsafe { utils.create_debug_utils_messenger(&info, None) }
            .ok()
            .map(|m| (utils, m))
    } else {
        None
    };

    let adapters = enumerate(&instance)?;
    Ok(Vk {
        entry,
        instance,
        adapters,
        _messenger: messenger,
    })
}

fn kind_of(t: vk::PhysicalDeviceType) -> DeviceKind {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => DeviceKind::DiscreteGpu,
        vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceKind::IntegratedGpu,
        vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceKind::VirtualGpu,
        vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
        _ => DeviceKind::Other,
    }
}

pub(super) fn c_chars(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Every physical device with a compute queue, sorted: discrete,
/// integrated, virtual, CPU, other; then by name; then by the driver's
/// enumeration order (a stable sort).
fn enumerate(instance: &ash::Instance) -> Result<Vec<Adapter>, String> {
    // SAFETY: `instance` is a live instance.
    let physicals = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| format!("vkEnumeratePhysicalDevices failed: {e}"))?;
    let mut adapters = Vec::new();
    for physical in physicals {
        // SAFETY: `physical` came from this instance.
        let props = unsafe { instance.get_physical_device_properties(physical) };
        if props.api_version < vk::API_VERSION_1_3 {
            // Keel needs timeline semaphores and synchronization2 in core.
            continue;
        }
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let compute = |f: &vk::QueueFamilyProperties| {
            f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0
        };
        let family = families
            .iter()
            .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
            .or_else(|| families.iter().position(compute));
        let Some(family) = family else { continue };
        let queue_count = families[family].queue_count;
        // SAFETY: `physical` came from this instance, which is live.
        let adapter = unsafe { read_adapter(instance, physical, family as u32, queue_count) };
        adapters.push(adapter);
    }
    adapters.sort_by(|a, b| a.kind.cmp(&b.kind).then_with(|| a.name.cmp(&b.name)));
    Ok(adapters)
}

/// What physical device `physical` reports, with Keel submitting to
/// `queue_count` queues of queue family `family`.
///
/// # Safety
///
/// `instance` is a live instance of Vulkan 1.3 or later, `physical` one of
/// its physical devices with an API version of 1.3 or later, and `family`
/// one of its queue family indices.
pub(super) unsafe fn read_adapter(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    family: u32,
    queue_count: u32,
) -> Adapter {
    // SAFETY: `physical` belongs to the live `instance` (the caller's
    // promise).
    let props = unsafe { instance.get_physical_device_properties(physical) };
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut driver)
        .push_next(&mut subgroup);
    // SAFETY: the chained structs are valid for Vulkan 1.3 devices and
    // outlive the call.
    unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12);
    // SAFETY: the chained structs are valid for Vulkan 1.3 devices and
    // outlive the call.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    let f16_storage = f12.shader_float16 == vk::TRUE
        && f11.storage_buffer16_bit_access == vk::TRUE
        && f11.uniform_and_storage_buffer16_bit_access == vk::TRUE;
    // SAFETY: as above.
    let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
    let device_local_memory = memory.memory_heaps[..memory.memory_heap_count as usize]
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .sum();
    let timestamp_valid_bits = families
        .get(family as usize)
        .map_or(0, |f| f.timestamp_valid_bits);
    Adapter {
        physical,
        name: c_chars(&props.device_name),
        kind: kind_of(props.device_type),
        props,
        family,
        queue_count,
        timestamp_valid_bits,
        families,
        driver_name: c_chars(&driver.driver_name),
        driver_info: c_chars(&driver.driver_info),
        subgroup_size: subgroup.subgroup_size,
        subgroup_operations: if subgroup
            .supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
        {
            subgroup.supported_operations
        } else {
            vk::SubgroupFeatureFlags::empty()
        },
        device_local_memory,
        f16_storage,
        cooperative: None,
    }
}
