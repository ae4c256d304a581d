//! A program's own Vulkan instance and device, made with ash the way a
//! program that adopts its device into Keel makes them (feature `vulkan`):
//! for the interop tests and the conformance suite on an adopted device.
//!
//! Validation errors the layers report on these instances (Keel's work on
//! an adopted device included) are collected here
//! ([`program_validation_messages`]), as Keel's own instance collects its
//! own ([`validation_messages`](crate::backend::vulkan::validation_messages)).

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::core::{Device, DeviceType};
use crate::interop::vulkan::ash::{self, vk};
use crate::interop::vulkan::{self as keel_vk, Adoption, Requirements};

static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The validation errors reported so far on program instances made here.
pub fn program_validation_messages() -> Vec<String> {
    MESSAGES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Called by the Vulkan loader for every message of the layers on a
/// program instance.
unsafe extern "system" fn collect(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        // SAFETY: the loader's callback data, as received.
        let message = unsafe { crate::backend::vulkan::callback_message(data) };
        eprintln!("program instance: Vulkan validation error: {message}");
        MESSAGES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message);
    }
    vk::FALSE
}

/// A program's instance and device (see the [module docs](self)).
pub struct ProgramDevice {
    /// The loader.
    pub entry: ash::Entry,
    /// The program's instance (Vulkan 1.3).
    pub instance: ash::Instance,
    /// The physical device the device was created on.
    pub physical_device: vk::PhysicalDevice,
    /// The program's device, with one queue of [`queue_family`](Self::queue_family).
    pub device: ash::Device,
    /// A queue family with compute.
    pub queue_family: u32,
    /// What the device was created with of Keel's optional features: all
    /// of those the physical device offers.
    pub enabled: Requirements,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl std::fmt::Debug for ProgramDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramDevice")
            .field("device", &self.device.handle())
            .field("queue_family", &self.queue_family)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl ProgramDevice {
    /// An instance and a device on the first physical device of Vulkan 1.3
    /// with a compute queue family, created with what
    /// [`requirements`](keel_vk::requirements) asks; why not, where there
    /// is none.
    pub fn create() -> Result<ProgramDevice, String> {
        // SAFETY: loading the system's Vulkan loader library runs its
        // initialisers; the loader is designed to be loaded this way.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| format!("the Vulkan loader could not be loaded: {e}"))?;
        // SAFETY: `entry` holds valid global function pointers.
        let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
            .map_err(|e| format!("vkEnumerateInstanceExtensionProperties failed: {e}"))?;
        let debug_utils = extensions.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|n| n == ash::ext::debug_utils::NAME)
        });
        let enabled: Vec<*const std::ffi::c_char> = if debug_utils {
            vec![ash::ext::debug_utils::NAME.as_ptr()]
        } else {
            Vec::new()
        };
        let app = vk::ApplicationInfo::default()
            .application_name(c"keel interop test")
            .api_version(keel_vk::API_VERSION);
        let info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_extension_names(&enabled);
        // SAFETY: `info` and everything it points to live until the call
        // returns; `destroy` destroys the instance.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| format!("vkCreateInstance failed: {e}"))?;
        let messenger = debug_utils.then(|| {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR)
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
                )
                .pfn_user_callback(Some(collect));
            // SAFETY: the instance has VK_EXT_debug_utils; the callback is
            // a `'static` function that never unwinds.
            unsafe { utils.create_debug_utils_messenger(&info, None) }
                .ok()
                .map(|m| (utils, m))
        });
        let messenger = messenger.flatten();
        match open_device(&entry, &instance) {
            Ok((physical_device, device, queue_family, enabled)) => Ok(ProgramDevice {
                entry,
                instance,
                physical_device,
                device,
                queue_family,
                enabled,
                messenger,
            }),
            Err(reason) => {
                // SAFETY: the instance (and its messenger) are this
                // function's own, and no device was created on them.
                unsafe { destroy_instance(&instance, messenger.as_ref()) };
                Err(reason)
            }
        }
    }

    /// What [`adopt`](keel_vk::adopt) gets: queue 0 of the compute family,
    /// and every optional feature the device was created with.
    pub fn adoption(&self) -> Adoption<'_> {
        Adoption {
            entry: &self.entry,
            instance: &self.instance,
            physical_device: self.physical_device,
            device: &self.device,
            queue_family: self.queue_family,
            queue_index: 0,
            enabled: self.enabled,
        }
    }

    /// Adopts the device into Keel. Panics if Keel refuses it (it was made
    /// with everything Keel asks for).
    pub fn adopt(&self) -> Device {
        // SAFETY: the handles are live and belong together (made above, with
        // Keel's requirements and one queue of the family); they are
        // destroyed only by `destroy`, whose caller releases Keel's device
        // first; the program submits nothing to the queue.
        unsafe { keel_vk::adopt(&self.adoption()) }.expect("adopting the program's device")
    }

    /// Destroys the device, then the instance.
    ///
    /// # Safety
    ///
    /// Nothing uses the device any more: a Keel device adopted from it was
    /// released ([`release`](keel_vk::release)), and every object the
    /// program made on it is destroyed.
    pub unsafe fn destroy(self) {
        // SAFETY: the caller's promise: the device is idle and has no
        // objects left.
        unsafe {
            self.device.destroy_device(None);
            destroy_instance(&self.instance, self.messenger.as_ref());
        }
    }
}

/// A device on the first physical device of `instance` that qualifies:
/// its physical device, queue family and what it was created with.
fn open_device(
    entry: &ash::Entry,
    instance: &ash::Instance,
) -> Result<(vk::PhysicalDevice, ash::Device, u32, Requirements), String> {
    // SAFETY: the instance is live.
    let physicals = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| format!("vkEnumeratePhysicalDevices failed: {e}"))?;
    let mut reasons = Vec::new();
    for physical in physicals {
        // SAFETY: the instance is live, created from `entry`.
        let enabled = match unsafe { keel_vk::requirements(entry, instance, physical) } {
            Ok(r) => r,
            Err(e) => {
                reasons.push(e.to_string());
                continue;
            }
        };
        // SAFETY: `physical` is one of the instance's.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            reasons.push("no queue family with compute".to_owned());
            continue;
        };
        let family = family as u32;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let extensions: Vec<*const std::ffi::c_char> =
            enabled.extensions().iter().map(|e| e.as_ptr()).collect();
        let mut f11 = enabled.vulkan11_features();
        let mut f12 = enabled.vulkan12_features();
        let mut f13 = enabled.vulkan13_features();
        let mut coop = enabled.cooperative_matrix_features();
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .push_next(&mut f11)
            .push_next(&mut f12)
            .push_next(&mut f13);
        if let Some(coop) = coop.as_mut() {
            info = info.push_next(coop);
        }
        // SAFETY: the features and extensions are what `requirements`
        // found the physical device to offer; `info` outlives the call.
        let device = unsafe { instance.create_device(physical, &info, None) }
            .map_err(|e| format!("vkCreateDevice failed: {e}"))?;
        return Ok((physical, device, family, enabled));
    }
    Err(format!(
        "no physical device qualifies ({})",
        if reasons.is_empty() {
            "there is none".to_owned()
        } else {
            reasons.join("; ")
        }
    ))
}

/// Destroys `messenger` and `instance`.
///
/// # Safety
///
/// No device of the instance is left, and nothing uses the instance.
unsafe fn destroy_instance(
    instance: &ash::Instance,
    messenger: Option<&(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
) {
    // SAFETY: the caller's promise; the messenger is this instance's.
    unsafe {
        if let Some((utils, m)) = messenger {
            utils.destroy_debug_utils_messenger(*m, None);
        }
        instance.destroy_instance(None);
    }
}

/// The suite's picker for an adopted device: a program device made and
/// adopted once per process, and kept for it (never released, so every
/// suite test can use it). `None` (with the reason printed) where no
/// Vulkan device exists, unless `KEEL_REQUIRE_BACKENDS` names `vulkan`:
/// then it panics.
pub fn adopted_device() -> Option<Device> {
    static ADOPTED: OnceLock<Result<Device, String>> = OnceLock::new();
    let adopted = ADOPTED.get_or_init(|| {
        let program = ProgramDevice::create()?;
        let d = program.adopt();
        // Kept for the process, as the adoption's contract asks.
        std::mem::forget(program);
        Ok(d)
    });
    match adopted {
        Ok(d) => Some(*d),
        Err(reason) if super::conformance::required(DeviceType::Vulkan) => {
            panic!("KEEL_REQUIRE_BACKENDS requires vulkan, but no program device opens: {reason}")
        }
        Err(reason) => {
            eprintln!("skipping: vulkan (an adopted program device) unavailable: {reason}");
            None
        }
    }
}
