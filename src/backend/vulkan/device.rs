//! A logical device per adapter, created on first use: its queues, memory
//! allocator, timestamp query pool, streams and pipeline cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::instance::{Adapter, vk};
use super::kernel::Pipeline;
use super::memory::VkBuffer;
use super::stream::VkStream;
use super::{TY, unavailable};
use crate::backend::pool::PoolCursors;
use crate::core::{
    Device, DeviceIndex, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, StreamId, StreamKind, stream_kind,
};
use crate::error::{Error, Result};

/// Priority levels of each Vulkan device's stream pool.
pub const PRIORITY_LEVELS: usize = 2;

/// Timestamp queries per device (two per timed event pair).
const QUERY_SLOTS: u32 = 4096;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn vk_error(what: &str, e: vk::Result) -> Error {
    Error::backend(TY, format!("{what} failed: {e}"))
}

/// Free timestamp query slots, and slots of destroyed events that may still
/// be written by work in flight (reused once that work completes).
#[derive(Default)]
struct QuerySlots {
    free: Vec<u32>,
    retiring: Vec<(u32, vk::Semaphore, u64)>,
}

/// One logical device.
pub(super) struct Ctx {
    pub index: DeviceIndex,
    pub adapter: &'static Adapter,
    pub device: ash::Device,
    pub queues: Vec<Mutex<vk::Queue>>,
    next_queue: AtomicUsize,
    pub allocator: Mutex<Allocator>,
    pub query_pool: vk::QueryPool,
    query_slots: Mutex<QuerySlots>,
    pub cursors: PoolCursors,
    default_stream: OnceLock<Result<VkStream>>,
    pool: [[OnceLock<Result<VkStream>>; STREAMS_PER_POOL]; MAX_PRIORITY_LEVELS],
    pub pipelines: Mutex<HashMap<(usize, usize), Arc<Pipeline>>>,
    /// `VK_KHR_push_descriptor`, where the driver has it: launches push
    /// their bindings into the command buffer instead of allocating a
    /// descriptor set each.
    pub push_descriptor: Option<ash::khr::push_descriptor::Device>,
    /// Idle parameter (uniform) buffers, reused across launches.
    pub param_buffers: Mutex<Vec<VkBuffer>>,
}

static CTXS: LazyLock<Vec<OnceLock<Result<Ctx>>>> = LazyLock::new(|| {
    let n = vk().map_or(0, |v| v.adapters.len());
    (0..n).map(|_| OnceLock::new()).collect()
});

/// The logical device for `device` (a Vulkan device with a valid index),
/// created on first use.
pub(super) fn ctx(device: Device) -> Result<&'static Ctx> {
    let v = vk().map_err(unavailable)?;
    crate::backend::check_device_index(device, v.adapters.len() as DeviceIndex)?;
    let i = device.index() as usize;
    let (Some(slot), Some(adapter)) = (CTXS.get(i), v.adapters.get(i)) else {
        return Err(Error::invalid(format!("no Vulkan device {device}")));
    };
    slot.get_or_init(|| Ctx::create(device.index(), adapter))
        .as_ref()
        .map_err(Clone::clone)
}

/// Every logical device created so far.
pub(super) fn created() -> impl Iterator<Item = &'static Ctx> {
    CTXS.iter()
        .filter_map(|s| s.get())
        .filter_map(|r| r.as_ref().ok())
}

impl Ctx {
    fn create(index: DeviceIndex, adapter: &'static Adapter) -> Result<Ctx> {
        let v = vk().map_err(unavailable)?;
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
        let has_push = extensions.iter().any(|e| {
            e.extension_name_as_c_str()
                .is_ok_and(|n| n == ash::khr::push_descriptor::NAME)
        });
        let enabled: Vec<*const std::ffi::c_char> = if has_push {
            vec![ash::khr::push_descriptor::NAME.as_ptr()]
        } else {
            Vec::new()
        };
        let priorities = vec![1.0f32; adapter.queue_count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(adapter.family)
            .queue_priorities(&priorities)];
        let mut e12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .host_query_reset(true);
        let mut e13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&enabled)
            .push_next(&mut e12)
            .push_next(&mut e13);
        // SAFETY: the features requested were checked above; `info` and its
        // pointers outlive the call. The device lives for the process.
        let device = unsafe { v.instance.create_device(adapter.physical, &info, None) }
            .map_err(|e| vk_error("vkCreateDevice", e))?;
        let queues = (0..adapter.queue_count)
            // SAFETY: the family and indices were requested at creation.
            .map(|q| Mutex::new(unsafe { device.get_device_queue(adapter.family, q) }))
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
        let pool_info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(QUERY_SLOTS);
        // SAFETY: a plain object creation on a live device.
        let query_pool = unsafe { device.create_query_pool(&pool_info, None) }
            .map_err(|e| vk_error("vkCreateQueryPool", e))?;
        // SAFETY: host query reset is enabled; no query is in use yet.
        unsafe { device.reset_query_pool(query_pool, 0, QUERY_SLOTS) };
        let push_descriptor =
            has_push.then(|| ash::khr::push_descriptor::Device::new(&v.instance, &device));
        Ok(Ctx {
            index,
            adapter,
            device,
            queues,
            next_queue: AtomicUsize::new(0),
            allocator: Mutex::new(allocator),
            query_pool,
            query_slots: Mutex::new(QuerySlots {
                free: (0..QUERY_SLOTS).rev().collect(),
                retiring: Vec::new(),
            }),
            cursors: PoolCursors::new(PRIORITY_LEVELS),
            default_stream: OnceLock::new(),
            pool: [const { [const { OnceLock::new() }; STREAMS_PER_POOL] }; MAX_PRIORITY_LEVELS],
            pipelines: Mutex::new(HashMap::new()),
            push_descriptor,
            param_buffers: Mutex::new(Vec::new()),
        })
    }

    /// The stream behind `id`, created on first use. Streams are spread
    /// round-robin over the family's queues.
    pub fn stream(&'static self, id: StreamId) -> Result<&'static VkStream> {
        let slot = match stream_kind(id) {
            StreamKind::Default => &self.default_stream,
            StreamKind::Pool { level, index } if usize::from(level) < self.cursors.levels() => {
                &self.pool[usize::from(level)][usize::from(index)]
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown stream id {id} on vulkan:{}: expected 0 (default) or a pool stream id",
                    self.index
                )));
            }
        };
        slot.get_or_init(|| {
            let q = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len();
            VkStream::new(self, q)
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    /// Every stream created so far.
    pub fn streams(&self) -> impl Iterator<Item = &VkStream> {
        std::iter::once(&self.default_stream)
            .chain(self.pool.iter().flatten())
            .filter_map(|s| s.get())
            .filter_map(|r| r.as_ref().ok())
    }

    /// A timestamp query slot for a timed event.
    pub fn take_query_slot(&self) -> Result<u32> {
        let mut slots = lock(&self.query_slots);
        let device = &self.device;
        let mut i = 0;
        while i < slots.retiring.len() {
            let (slot, sem, value) = slots.retiring[i];
            // SAFETY: the semaphore belongs to this device and is never
            // destroyed (streams live for the process).
            let done = unsafe { device.get_semaphore_counter_value(sem) }.is_ok_and(|v| v >= value);
            if done {
                slots.retiring.swap_remove(i);
                slots.free.push(slot);
            } else {
                i += 1;
            }
        }
        slots.free.pop().ok_or_else(|| {
            Error::backend(
                TY,
                format!("all {QUERY_SLOTS} timestamp query slots are in use by timed events"),
            )
        })
    }

    /// Gives a slot back once `(sem, value)` has been reached.
    pub fn release_query_slot(&self, slot: u32, sem: vk::Semaphore, value: u64) {
        lock(&self.query_slots).retiring.push((slot, sem, value));
    }

    /// Nanoseconds per timestamp tick.
    pub fn timestamp_period(&self) -> f64 {
        f64::from(self.adapter.props.limits.timestamp_period)
    }
}
