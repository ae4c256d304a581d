//! What the public interop API (`crate::interop::vulkan`) needs of this
//! backend: adopting a program's device, the native objects behind Keel's
//! devices, streams, events and buffers, wrapping a program's buffer, a
//! program's semaphore waited for by a stream, and destroying Keel's
//! objects on an adopted device. Nothing here knows Keel's `Buffer`,
//! `Event` or caching allocator: the interop layer puts these together.

use ash::vk;
use ash::vk::Handle;

pub(crate) use super::device::Ctx;
use super::device::{self, Owner, lock, vk_error};
pub use super::device::{API_VERSION, COOPERATIVE_MATRIX_SHAPES, Requirements};
use super::event::VkEvent;
use super::memory::VkBuffer;
use super::stream::Point;
pub(crate) use super::stream::VkStream;
use super::{TY, VULKAN, Vulkan, loader};
use crate::backend::typed::Backend;
use crate::backend::{BufferHandle, EventHandle, registry};
use crate::core::{Device, DeviceIndex, Stream};
use crate::error::{Error, Result};

/// Checks that `physical` is one of `instance`'s physical devices.
///
/// # Safety
///
/// `instance` is a live instance.
unsafe fn check_physical(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Result<()> {
    if instance.handle().is_null() {
        return Err(Error::invalid(
            "expected a VkInstance handle, found VK_NULL_HANDLE",
        ));
    }
    // SAFETY: `instance` is live (the caller's promise).
    let physicals = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| vk_error("vkEnumeratePhysicalDevices", e))?;
    if !physicals.contains(&physical) {
        return Err(Error::invalid(format!(
            "expected one of the instance's {} physical devices, found {physical:?}",
            physicals.len()
        )));
    }
    Ok(())
}

/// What a device on `physical_device` needs and would use of Keel's
/// optional features; see `crate::interop::vulkan::requirements`.
///
/// # Safety
///
/// `instance` is a live instance created from `entry`.
pub(crate) unsafe fn requirements(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical_device: vk::PhysicalDevice,
) -> Result<Requirements> {
    // SAFETY: `instance` is live (the caller's promise).
    unsafe { check_physical(instance, physical_device) }?;
    // SAFETY: as above, and `physical_device` is one of its devices
    // (checked).
    unsafe { device::offered(entry, instance, physical_device) }
}

/// Adopts the program's `device`: its Keel index, the same for a device
/// adopted before (or one of Keel's own); see
/// `crate::interop::vulkan::adopt` for the checks.
///
/// # Safety
///
/// The promises of `crate::interop::vulkan::adopt`.
pub(crate) unsafe fn adopt(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical_device: vk::PhysicalDevice,
    device: &ash::Device,
    (queue_family, queue_index): (u32, u32),
    enabled: &Requirements,
) -> Result<DeviceIndex> {
    if device.handle().is_null() {
        return Err(Error::invalid(
            "expected a VkDevice handle, found VK_NULL_HANDLE",
        ));
    }
    // SAFETY: the instance is live (the caller's promise).
    unsafe { check_physical(instance, physical_device) }?;
    // SAFETY: as above; the physical device is the instance's (checked).
    let offered = unsafe { device::offered(entry, instance, physical_device) }?;
    device::check_enabled(enabled, &offered)?;
    // Where the kernel runs with what the program enabled: a device whose
    // compute subgroups are another width by default needs
    // `subgroup_size_control` for it.
    let cooperative = if enabled.cooperative_matrix {
        // SAFETY: the physical device lists the extension (`offered` says
        // so, checked above), of the live instance made from `entry` (the
        // caller's promise).
        let c = unsafe {
            device::cooperative_matrix_offered(
                entry,
                instance,
                physical_device,
                enabled.subgroup_size_control,
            )
        };
        Some(c.ok_or_else(|| {
            Error::invalid(
                "expected subgroup_size_control with cooperative_matrix on a device whose compute subgroups are not the width of Keel's cooperative-matrix kernel by default, found cooperative_matrix without it",
            )
        })?)
    } else {
        None
    };
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical_device) };
    let family = families.get(queue_family as usize).ok_or_else(|| {
        Error::invalid(format!(
            "expected a queue family index below {} (the physical device's queue family count), found {queue_family}",
            families.len()
        ))
    })?;
    if !family.queue_flags.contains(vk::QueueFlags::COMPUTE) {
        return Err(Error::invalid(format!(
            "expected a queue family with compute, found flags {:?} (queue family {queue_family})",
            family.queue_flags
        )));
    }
    if queue_index >= family.queue_count {
        return Err(Error::invalid(format!(
            "expected a queue index below {} (queue family {queue_family}'s queue count), found {queue_index}",
            family.queue_count
        )));
    }
    let handle = device.handle();
    // One of Keel's own devices, handed out and given back.
    if let Some(c) = device::own_created().find(|c| c.device.handle() == handle) {
        return Ok(c.index);
    }
    let own = device::own_count();
    let index_of = |position: usize| {
        DeviceIndex::try_from(own + position)
            .ok()
            .filter(|&n| n < DeviceIndex::from(i8::MAX))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "expected at most {} Vulkan devices, found one more",
                    i8::MAX
                ))
            })
    };
    let position = device::ADOPTED.adopt(
        |c| c.device.handle() == handle && !c.is_released(),
        |position| {
            let index = index_of(position)?;
            // SAFETY: the device was created with at least `queue_index +
            // 1` queues of the family (the caller's promise).
            let queue = unsafe { device.get_device_queue(queue_family, queue_index) };
            // SAFETY: the instance is live and of Vulkan 1.3, the physical
            // device its own and of Vulkan 1.3 (checked by `offered`), the
            // family in range (checked).
            let mut adapter =
                unsafe { loader::read_adapter(instance, physical_device, queue_family, 1) };
            adapter.f16_storage = enabled.native_f16;
            adapter.cooperative = cooperative;
            // SAFETY: the caller's promises: the device is live, of this
            // instance and physical device, with Keel's requirements and
            // `enabled`, and `queue` is a queue of the family.
            unsafe {
                Ctx::new(
                    index,
                    (entry.clone(), instance.clone()),
                    adapter,
                    device.clone(),
                    vec![queue],
                    enabled,
                    Owner::Program { queue_index },
                )
            }
        },
    )?;
    registry::device_adopted(TY);
    index_of(position)
}

/// Keel's state of Vulkan device `device` (index `-1`: the current one),
/// checked; a released device's too.
pub(crate) fn state(device: Device) -> Result<&'static Ctx> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a Vulkan device, found {device}"
        )));
    }
    VULKAN.device(crate::api::resolve(device)?)
}

impl Ctx {
    /// An error once the device was released.
    pub(crate) fn check_live(&self) -> Result<()> {
        self.live()
    }

    /// The device as Keel numbers it.
    pub(crate) fn keel_device(&self) -> Result<Device> {
        Device::new(TY, self.index)
    }

    pub(crate) fn entry(&self) -> &ash::Entry {
        &self.entry
    }

    pub(crate) fn instance(&self) -> &ash::Instance {
        &self.instance
    }

    pub(crate) fn physical_device(&self) -> vk::PhysicalDevice {
        self.adapter.physical
    }

    pub(crate) fn ash_device(&self) -> &ash::Device {
        &self.device
    }

    /// The queue family Keel submits to.
    pub(crate) fn queue_family(&self) -> u32 {
        self.adapter.family
    }

    /// The queues Keel submits to.
    pub(crate) fn queue_handles(&self) -> Vec<vk::Queue> {
        self.queue_handles.clone()
    }

    /// Whether the program gave Keel this device.
    pub(crate) fn adopted(&self) -> bool {
        matches!(self.owner, Owner::Program { .. })
    }

    /// Whether the program took it back.
    pub(crate) fn released(&self) -> bool {
        self.is_released()
    }

    /// Runs `f` with queue `queue` of Keel's queues held (Keel submits
    /// nothing to it meanwhile).
    pub(crate) fn with_queue<R>(&self, queue: usize, f: impl FnOnce(vk::Queue) -> R) -> Result<R> {
        self.live()?;
        let q = self.queues.get(queue).ok_or_else(|| {
            Error::invalid(format!(
                "expected a queue index below {} (Keel's queues on vulkan:{}), found {queue}",
                self.queues.len(),
                self.index
            ))
        })?;
        let mut q = lock(q);
        // Work of the program's may now run between two of Keel's
        // submissions on this queue: a stream's next profiled span must
        // not assume it starts where the previous one ended (`stream.rs`,
        // `chained_start`).
        q.submissions += 1;
        Ok(f(q.handle))
    }

    /// Waits for every stream's work and releases what it kept.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.streams().try_for_each_created(VkStream::synchronize)
    }

    /// Destroys every object Keel made on this adopted device (streams'
    /// command pools and semaphores, parameter rings, staging buffers,
    /// pipelines, descriptor pools, the query pool, and its memory) and
    /// marks it released. Refused, with nothing destroyed, while a pending
    /// read holds a pooled staging buffer.
    ///
    /// # Safety
    ///
    /// The device was adopted, every stream of it synchronised
    /// ([`synchronize`](Self::synchronize)), and no buffer of Keel's on it
    /// is left (the caching allocator holds none); no other thread uses it
    /// during the call, and no unpooled staging buffer (a pending read
    /// over 256 MiB) is alive.
    pub(crate) unsafe fn release(&self) -> Result<()> {
        let reading = self.staging.clear();
        if reading > 0 {
            return Err(Error::invalid(format!(
                "release vulkan:{}: expected every pending read from it dropped, found {reading} bytes of staging memory in use",
                self.index
            )));
        }
        // SAFETY: every stream's work has completed and been retired, so no
        // pending submission uses a command buffer, semaphore, pipeline,
        // descriptor set or query slot; no other thread submits, and the
        // device is marked released below, so nothing uses them again (the
        // caller's promises).
        unsafe {
            for s in self.streams().created() {
                s.destroy();
            }
            super::kernel::destroy_pipelines(self);
            self.timestamps.destroy(&self.device);
        }
        // Frees every memory block: no buffer of Keel's is left.
        drop(lock(&self.allocator).take());
        self.set_released();
        Ok(())
    }
}

/// The native stream behind `stream` (a stream of a Vulkan device).
pub(crate) fn stream(stream: &Stream) -> Result<&'static VkStream> {
    let device = stream.device();
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a stream of a Vulkan device, found one of {device}"
        )));
    }
    Vulkan.stream(state(device)?, stream.id())
}

impl VkStream {
    /// The stream's timeline semaphore, the value its last submission
    /// signals, and its queue.
    pub(crate) fn native(&self) -> (vk::Semaphore, u64, vk::Queue) {
        (self.semaphore, self.last_value(), self.queue())
    }

    /// Submits the program's command buffers on this stream: after the
    /// stream's earlier work (and the waits queued on it), signalling the
    /// stream's timeline semaphore like Keel's own submissions, so Keel's
    /// events, waits and `synchronize` order them. Returns the value the
    /// submission signals. Where the calling thread's operation is
    /// profiled, its timestamps go in command buffers of Keel's around
    /// them.
    ///
    /// # Safety
    ///
    /// The command buffers are primary command buffers of this device,
    /// recorded and ended, not pending elsewhere, and the program keeps
    /// them (and what they use) alive until the semaphore reaches the
    /// returned value.
    pub(crate) unsafe fn submit_program(&self, buffers: &[vk::CommandBuffer]) -> Result<u64> {
        self.ctx.live()?;
        if let Some(i) = buffers.iter().position(|b| b.is_null()) {
            return Err(Error::invalid(format!(
                "submitting a program's command buffers: expected VkCommandBuffer handles, found VK_NULL_HANDLE at {i}"
            )));
        }
        self.submit_inner(None, |_, _, _| {}, buffers, super::stream::Keeps::new())
    }

    /// Two timestamp slots for a scope on a program's command buffer
    /// (each reset on the host and held once); `None` where the device's
    /// queue family writes no timestamps.
    pub(crate) fn take_scope_slots(&self) -> Result<Option<(u32, u32)>> {
        let c = self.ctx;
        c.live()?;
        if c.adapter.timestamp_valid_bits == 0 {
            return Ok(None);
        }
        let first = c.timestamps.take(&c.device)?;
        match c.timestamps.take(&c.device) {
            Ok(second) => Ok(Some((first, second))),
            Err(e) => {
                c.timestamps.release(&c.device, first);
                Err(e)
            }
        }
    }

    /// Gives back a scope's slots that no submission wrote.
    pub(crate) fn release_scope_slots(&self, slots: (u32, u32)) {
        let c = self.ctx;
        if !c.is_released() {
            c.timestamps.release(&c.device, slots.0);
            c.timestamps.release(&c.device, slots.1);
        }
    }

    /// The device's function table.
    pub(crate) fn device(&self) -> &ash::Device {
        &self.ctx.device
    }

    /// The device's timestamp query pool (where scopes write).
    pub(crate) fn query_pool(&self) -> vk::QueryPool {
        self.ctx.timestamps.pool
    }

    /// The two timed events of a scope's slots, written by the submission
    /// that signalled `value`: each event holds its slot from now on.
    pub(crate) fn scope_events(&self, slots: (u32, u32), value: u64) -> (EventHandle, EventHandle) {
        let point = self.point(value);
        self.ctx.timestamps.written(&[slots.0, slots.1], point);
        let event = |slot| {
            EventHandle::new(Some(VkEvent {
                point,
                query: Some(slot),
            }))
        };
        (event(slots.0), event(slots.1))
    }

    /// Makes the stream's next submission wait until the program's
    /// timeline semaphore `semaphore` reaches `value`.
    ///
    /// # Safety
    ///
    /// `semaphore` is a timeline semaphore of the stream's device that
    /// lives until that submission has completed, and `value` will be
    /// signalled.
    pub(crate) unsafe fn wait_semaphore(&self, semaphore: vk::Semaphore, value: u64) -> Result<()> {
        if semaphore.is_null() {
            return Err(Error::invalid(
                "expected a VkSemaphore handle, found VK_NULL_HANDLE",
            ));
        }
        self.add_wait(Point {
            ctx: self.ctx,
            semaphore,
            value,
        });
        Ok(())
    }
}

/// The `vk::Buffer` behind a Vulkan buffer handle and its whole size;
/// `None` for a handle of another backend.
pub(crate) fn buffer_of(handle: &BufferHandle) -> Result<Option<(vk::Buffer, u64)>> {
    let Some(b) = handle.downcast_ref::<VkBuffer>() else {
        return Ok(None);
    };
    b.ctx.live()?;
    Ok(Some((b.buffer, b.size)))
}

/// The program's `buffer` of `size` bytes on `ctx`'s device, as a handle
/// that never destroys it. Checked: a null handle with a size, a size past
/// the buffer's memory requirements.
///
/// # Safety
///
/// `buffer` is a live buffer of the device (or null).
pub(crate) unsafe fn foreign_buffer(
    ctx: &'static Ctx,
    buffer: vk::Buffer,
    size: u64,
) -> Result<BufferHandle> {
    ctx.live()?;
    if buffer.is_null() && size > 0 {
        return Err(Error::invalid(format!(
            "expected a VkBuffer handle for {size} bytes, found VK_NULL_HANDLE"
        )));
    }
    if !buffer.is_null() {
        // SAFETY: `buffer` is a live buffer of this device (the caller's
        // promise).
        let requirements = unsafe { ctx.device.get_buffer_memory_requirements(buffer) };
        if size > requirements.size {
            return Err(Error::invalid(format!(
                "expected a size of at most {} bytes (the VkBuffer's memory requirements), found {size}",
                requirements.size
            )));
        }
    }
    Ok(BufferHandle::new(VkBuffer::foreign(ctx, buffer, size)))
}

/// The semaphore and value a Vulkan event handle completes at (`None`:
/// its record failed); an error for another backend's.
pub(crate) fn event_point(handle: &EventHandle) -> Result<Option<(vk::Semaphore, u64)>> {
    let recorded = handle.downcast_ref::<Option<VkEvent>>().ok_or_else(|| {
        Error::invalid("expected an event of Keel's Vulkan backend, found another backend's")
    })?;
    let Some(e) = recorded else {
        return Ok(None);
    };
    let point = e.point();
    point.ctx.live()?;
    Ok(Some((point.semaphore, point.value)))
}
