//! A logical device per adapter, created on first use: its queues, memory
//! allocator, timestamps, streams and pipeline cache; and what an adapter
//! reports about itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use rustc_hash::FxHashMap;

use super::TY;
use super::event::Timestamps;
use super::kernel::Pipeline;
use super::loader::{Adapter, Vk, vk};
use super::memory::StagingPool;
use super::stream::VkStream;
use crate::backend::pool::Streams;
use crate::backend::slots::Slots;
use crate::backend::{DeviceProperties, TimestampSupport, vendor_name};
use crate::core::{Device, DeviceIndex, StreamId};
use crate::error::{Error, Result};

/// Priority levels of each Vulkan device's stream pool.
pub const PRIORITY_LEVELS: usize = 2;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn vk_error(what: &str, e: vk::Result) -> Error {
    Error::backend(TY, format!("{what} failed: {e}"))
}

/// A queue of the compute family, used under its mutex (Vulkan queues are
/// externally synchronised), and how many submissions it has had (a
/// stream tells from it whether another stream submitted to the queue
/// since its own last submission, see `stream.rs`).
pub(super) struct Queue {
    pub(super) handle: vk::Queue,
    pub(super) submissions: u64,
}

/// One logical device.
pub struct Ctx {
    pub(super) index: DeviceIndex,
    pub(super) adapter: &'static Adapter,
    pub(super) device: ash::Device,
    pub(super) queues: Vec<Mutex<Queue>>,
    next_queue: AtomicUsize,
    pub(super) allocator: Mutex<Allocator>,
    pub(super) timestamps: Timestamps,
    streams: Streams<VkStream>,
    pub(super) pipelines: Mutex<FxHashMap<super::kernel::SpirvKey, Arc<Pipeline>>>,
    /// Descriptor sets of earlier launches, reused by launches that bind
    /// the same ranges.
    pub(super) sets: Mutex<super::kernel::SetCache>,
    /// Host-visible buffers for uploads and readbacks, reused.
    pub(super) staging: StagingPool,
    /// `VK_KHR_calibrated_timestamps` (or the EXT form), where the device
    /// can read its timestamp clock directly.
    pub(super) calibrated: Option<Calibrated>,
}

/// Which calibrated-timestamps extension a device has.
#[derive(Clone, Copy)]
enum CalibrationExt {
    Khr,
    Ext,
}

impl CalibrationExt {
    /// Whether the device's own timestamp clock is one of the domains the
    /// extension can read.
    fn has_device_domain(self, v: &Vk, physical: vk::PhysicalDevice) -> bool {
        // SAFETY: the physical device belongs to the instance, which was
        // created from `entry`.
        let domains = unsafe {
            match self {
                CalibrationExt::Khr => {
                    ash::khr::calibrated_timestamps::Instance::new(&v.entry, &v.instance)
                        .get_physical_device_calibrateable_time_domains(physical)
                }
                CalibrationExt::Ext => {
                    ash::ext::calibrated_timestamps::Instance::new(&v.entry, &v.instance)
                        .get_physical_device_calibrateable_time_domains(physical)
                }
            }
        };
        domains.is_ok_and(|d| d.contains(&vk::TimeDomainKHR::DEVICE))
    }
}

/// A device's calibrated-timestamps functions.
pub(super) enum Calibrated {
    Khr(ash::khr::calibrated_timestamps::Device),
    Ext(ash::ext::calibrated_timestamps::Device),
}

impl Calibrated {
    /// The device's timestamp clock in ticks, and the driver's maximum
    /// deviation in nanoseconds.
    pub(super) fn device_ticks(&self) -> Result<(u64, u64)> {
        let info =
            [vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE)];
        // SAFETY: the extension is enabled on the device and the DEVICE
        // domain is one it reported.
        let read = unsafe {
            match self {
                Calibrated::Khr(d) => d.get_calibrated_timestamps(&info),
                Calibrated::Ext(d) => d.get_calibrated_timestamps(&info),
            }
        };
        let (ticks, deviation) = read.map_err(|e| vk_error("vkGetCalibratedTimestamps", e))?;
        let first = ticks
            .first()
            .copied()
            .ok_or_else(|| Error::backend(TY, "vkGetCalibratedTimestamps returned nothing"))?;
        Ok((first, deviation))
    }
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ctx(vulkan:{}, {})", self.index, self.adapter.name)
    }
}

static DEVICES: LazyLock<Slots<Ctx>> =
    LazyLock::new(|| Slots::new(vk().map_or(0, |v| v.adapters.len())));

/// Logical device `index` (in range), created on first use.
pub(super) fn device(index: DeviceIndex) -> Result<&'static Ctx> {
    let i = usize::try_from(index).unwrap_or(usize::MAX);
    DEVICES.get_or_create(i, || {
        let v = vk().map_err(|reason| Error::backend(TY, reason))?;
        Ctx::create(index, v, &v.adapters[i])
    })
}

impl Ctx {
    fn create(index: DeviceIndex, v: &'static Vk, adapter: &'static Adapter) -> Result<Ctx> {
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut supported = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut v12)
            .push_next(&mut v13);
        // SAFETY: the physical device belongs to the instance; the chained
        // structs outlive the call.
        unsafe {
            v.instance
                .get_physical_device_features2(adapter.physical, &mut supported)
        };
        let missing: Vec<&str> = [
            (v12.timeline_semaphore, "timelineSemaphore"),
            (v12.host_query_reset, "hostQueryReset"),
            (v13.synchronization2, "synchronization2"),
        ]
        .iter()
        .filter(|(on, _)| *on == vk::FALSE)
        .map(|(_, name)| *name)
        .collect();
        if !missing.is_empty() {
            return Err(Error::Unavailable {
                backend: TY.backend_name().to_owned(),
                reason: format!(
                    "{} lacks required features: {}",
                    adapter.name,
                    missing.join(", ")
                ),
            });
        }

        // SAFETY: the physical device belongs to the instance.
        let extensions = unsafe {
            v.instance
                .enumerate_device_extension_properties(adapter.physical)
        }
        .map_err(|e| vk_error("vkEnumerateDeviceExtensionProperties", e))?;
        let has = |name: &std::ffi::CStr| {
            extensions
                .iter()
                .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
        };
        let mut enabled: Vec<*const std::ffi::c_char> = Vec::new();
        let calibration = if has(ash::khr::calibrated_timestamps::NAME) {
            Some(CalibrationExt::Khr)
        } else if has(ash::ext::calibrated_timestamps::NAME) {
            Some(CalibrationExt::Ext)
        } else {
            None
        }
        .filter(|ext| ext.has_device_domain(v, adapter.physical));
        match calibration {
            Some(CalibrationExt::Khr) => {
                enabled.push(ash::khr::calibrated_timestamps::NAME.as_ptr())
            }
            Some(CalibrationExt::Ext) => {
                enabled.push(ash::ext::calibrated_timestamps::NAME.as_ptr())
            }
            None => {}
        }
        let priorities = vec![1.0f32; adapter.queue_count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(adapter.family)
            .queue_priorities(&priorities)];
        let f16 = adapter.f16_storage;
        let mut e11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(f16)
            .uniform_and_storage_buffer16_bit_access(f16);
        let mut e12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .host_query_reset(true)
            .shader_float16(f16);
        let mut e13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&enabled)
            .push_next(&mut e11)
            .push_next(&mut e12)
            .push_next(&mut e13);
        // SAFETY: the features requested were checked above; `info` and its
        // pointers outlive the call. The device lives for the process.
        let device = unsafe { v.instance.create_device(adapter.physical, &info, None) }
            .map_err(|e| vk_error("vkCreateDevice", e))?;
        let queues = (0..adapter.queue_count)
            .map(|q| {
                Mutex::new(Queue {
                    // SAFETY: the family and indices were requested at
                    // creation.
                    handle: unsafe { device.get_device_queue(adapter.family, q) },
                    submissions: 0,
                })
            })
            .collect();
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: v.instance.clone(),
            device: device.clone(),
            physical_device: adapter.physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        })
        .map_err(|e| Error::backend(TY, format!("creating the memory allocator failed: {e}")))?;
        let timestamps = Timestamps::new(&device)?;
        let calibrated =
            calibration.map(|ext| match ext {
                CalibrationExt::Khr => Calibrated::Khr(
                    ash::khr::calibrated_timestamps::Device::new(&v.instance, &device),
                ),
                CalibrationExt::Ext => Calibrated::Ext(
                    ash::ext::calibrated_timestamps::Device::new(&v.instance, &device),
                ),
            });
        Ok(Ctx {
            index,
            adapter,
            device,
            queues,
            next_queue: AtomicUsize::new(0),
            allocator: Mutex::new(allocator),
            timestamps,
            streams: Streams::new(TY, index, PRIORITY_LEVELS),
            pipelines: Mutex::default(),
            sets: Mutex::default(),
            staging: StagingPool::default(),
            calibrated,
        })
    }

    /// The stream behind `id`, created on first use. Streams are spread
    /// round-robin over the family's queues.
    pub(super) fn stream(&'static self, id: StreamId) -> Result<&'static VkStream> {
        self.streams.get_or_create(id, |_| {
            let q = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len();
            VkStream::new(self, q)
        })
    }

    /// The device's streams and the pool's cursors.
    pub(super) fn streams(&self) -> &Streams<VkStream> {
        &self.streams
    }
}

/// What adapter `a` reports, as device `at`.
pub(super) fn describe(a: &Adapter, at: Device) -> DeviceProperties {
    let l = &a.props.limits;
    let mut p = DeviceProperties::new(at, a.name.clone(), a.kind);
    p.vendor = vendor_name(a.props.vendor_id).to_owned();
    p.vendor_id = Some(a.props.vendor_id);
    p.device_id = Some(a.props.device_id);
    let api = a.props.api_version;
    p.native_backend = format!(
        "Vulkan {}.{}.{}",
        vk::api_version_major(api),
        vk::api_version_minor(api),
        vk::api_version_patch(api)
    );
    p.driver = a.driver_name.clone();
    p.driver_info = a.driver_info.clone();
    p.total_memory = Some(a.device_local_memory);
    p.max_workgroup_size = Some(l.max_compute_work_group_size);
    p.max_workgroup_invocations = Some(l.max_compute_work_group_invocations);
    p.max_workgroup_count = Some(l.max_compute_work_group_count);
    p.shared_memory_per_workgroup = Some(u64::from(l.max_compute_shared_memory_size));
    p.subgroup_size = (a.subgroup_size > 0).then_some(a.subgroup_size);
    p.timestamps = (a.timestamp_valid_bits > 0).then(|| TimestampSupport {
        period_ns: f64::from(l.timestamp_period),
        valid_bits: a.timestamp_valid_bits,
    });
    p.storage_offset_alignment = Some(l.min_storage_buffer_offset_alignment);
    if !a.subgroup_operations.is_empty() {
        // Read by `keel::compute::subgroups_supported`.
        p.extra.push((
            "subgroup operations".to_owned(),
            format!("{:?}", a.subgroup_operations).to_lowercase(),
        ));
    }
    // Read by `keel::compute::f16_storage`.
    p.extra.push((
        "f16 storage".to_owned(),
        if a.f16_storage {
            "native (shaderFloat16, storageBuffer16BitAccess)".to_owned()
        } else {
            "emulated (packed u32 words)".to_owned()
        },
    ));
    p.extra
        .push(("compute queue family".to_owned(), a.family.to_string()));
    p.extra
        .push(("compute queues".to_owned(), a.queue_count.to_string()));
    for (i, f) in a.families.iter().enumerate() {
        p.extra.push((
            format!("queue family {i}"),
            format!(
                "{:?} x{}, timestamp bits {}",
                f.queue_flags, f.queue_count, f.timestamp_valid_bits
            ),
        ));
    }
    p.extra.push((
        "max storage buffer range".to_owned(),
        l.max_storage_buffer_range.to_string(),
    ));
    p
}
