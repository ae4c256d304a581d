//! Interop: Vulkan devices and buffers that a program and Keel share.
//!
//! - **Adopting a device** ([`adopt`]): a program that has its own ash
//!   instance and device gives them to Keel, which numbers the device after
//!   the ones it found itself (`vulkan:N`) and runs it exactly as one of
//!   its own: streams, events, the caching allocator, kernels, timestamps,
//!   and calibrated clocks where the program enabled the extension. The
//!   program enables what Keel needs when it creates the device
//!   ([`requirements`]). A machine where Keel found no Vulkan device of its
//!   own becomes usable this way.
//! - **Handing out** ([`native_device`], [`native_buffer`],
//!   [`native_stream`], [`native_event`], [`with_queue`]): the native
//!   objects behind Keel's devices (its own or adopted), buffers, streams
//!   and events, so a program can use them with ash.
//! - **Adopting a buffer** ([`adopt_buffer`]): a program's `vk::Buffer`
//!   used as a Keel [`Buffer`], which Keel never frees.
//! - **Waiting for the program** ([`wait_semaphore`]): a Keel stream's
//!   next work waits for a program's timeline semaphore.
//! - **Giving a device back** ([`release`]): Keel destroys every object it
//!   made on an adopted device, after which the program may destroy the
//!   device.
//!
//! Ownership: Keel never destroys a `VkInstance` or a `VkDevice`, neither
//! its own (they live for the process) nor the program's, and dropping a
//! Keel object never destroys anything of the program's (an adopted
//! buffer included). The objects Keel creates on an adopted device (its
//! command pools, semaphores, query pool, pipelines, descriptor pools,
//! buffers and memory) are Keel's; [`release`] destroys them.
//!
//! Teardown, in this order: drop the Keel objects on the device (buffers,
//! pending reads; events may stay, their operations then fail), call
//! [`release`] (it waits for Keel's work on the device), wait for the
//! program's own work, destroy the program's buffers that Keel used, then
//! the device, then the instance.

use ash::vk;
use ash::vk::Handle;

use super::device::{self, Ctx, Owner, Requirements, lock, vk_error};
use super::event::VkEvent;
use super::memory::VkBuffer;
use super::stream::{Point, VkStream};
use super::{TY, VULKAN, Vulkan, loader};
use crate::backend::typed::Backend;
use crate::backend::{BufferHandle, registry};
use crate::core::{Device, DeviceIndex, Stream};
use crate::error::{Error, Result};
use crate::{Buffer, Event};

/// What a program gives Keel in [`adopt`]: its ash objects (clones of the
/// function tables are fine), the physical device, the queue Keel is to
/// submit to, and which of Keel's optional features it enabled.
#[derive(Clone, Copy)]
pub struct Adoption<'a> {
    /// The loader the instance was created from.
    pub entry: &'a ash::Entry,
    /// The program's instance (Vulkan 1.3 or later).
    pub instance: &'a ash::Instance,
    /// The physical device the device was created on.
    pub physical_device: vk::PhysicalDevice,
    /// The program's device.
    pub device: &'a ash::Device,
    /// The queue family of Keel's queue (it must have compute).
    pub queue_family: u32,
    /// Which queue of that family Keel submits to.
    pub queue_index: u32,
    /// Which of Keel's optional features the device was created with
    /// (each one must be among those [`requirements`] reports); the
    /// required ones are always assumed.
    pub enabled: Requirements,
}

impl std::fmt::Debug for Adoption<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adoption")
            .field("instance", &self.instance.handle())
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("queue_family", &self.queue_family)
            .field("queue_index", &self.queue_index)
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// Usage flags a program's buffer needs for [`adopt_buffer`]: kernels bind
/// it as a storage buffer, and reads, writes and copies transfer from and
/// to it.
pub const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// What Keel needs of a device on `physical_device`, and the optional
/// features it would use there: all of those the device offers. A program
/// creates its device with the feature structs and extensions of the
/// result (or with fewer optional ones, then tells [`adopt`] which).
///
/// An error when the physical device is not one of the instance's, is
/// older than Vulkan 1.3, or lacks a required feature.
///
/// # Safety
///
/// `instance` is a live instance created from `entry`.
pub unsafe fn requirements(
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

/// Gives Keel the program's Vulkan device: Keel submits its work to queue
/// `queue_index` of family `queue_family`, and runs the device as one of
/// its own. Returns its Keel device, `vulkan:N`, numbered after the
/// devices Keel found itself (and after earlier adoptions). Adopting a
/// device again returns the same Keel device (with the queue and features
/// of the first adoption), and so does adopting the device behind one of
/// Keel's own (from [`native_device`]).
///
/// Checked, each a clear error: handles that are null; a physical device
/// that is not the instance's, older than Vulkan 1.3 or without a required
/// feature; optional features the physical device does not offer; a queue
/// family out of range or without compute; a queue index past the
/// family's queue count. A queue family without timestamps
/// (`timestampValidBits == 0`) is accepted: the device is usable, but its
/// events cannot be timed, as with Keel's own devices of that kind.
///
/// # Safety
///
/// The program promises that:
///
/// - `entry` is the loader `instance` was created from, and `instance` is
///   a live instance created with an `apiVersion` of Vulkan 1.3 or later;
/// - `device` is a live device created on `physical_device` from
///   `instance`, with every required feature of [`Requirements`] enabled
///   (`timelineSemaphore`, `hostQueryReset`, `synchronization2`: what its
///   feature methods set) and every optional one `enabled` names, and with
///   at least `queue_index + 1` queues of `queue_family` (a
///   `VkDeviceQueueCreateInfo` without flags);
/// - the instance, the device and the loader stay valid until [`release`]
///   of the Keel device returns, or for the rest of the process if it is
///   never released (Keel destroys neither);
/// - the queue is Keel's to submit to: the program uses it (and calls
///   `vkDeviceWaitIdle`, which uses every queue) only inside
///   [`with_queue`], or while no Keel work can be submitted on the device,
///   as Vulkan's external synchronisation of queues requires;
/// - it never destroys, signals or otherwise changes what Keel creates on
///   the device (the semaphores [`native_stream`] and [`native_event`]
///   hand out may be waited on, and only that).
pub unsafe fn adopt(adoption: &Adoption<'_>) -> Result<Device> {
    let a = adoption;
    if a.device.handle().is_null() {
        return Err(Error::invalid(
            "expected a VkDevice handle, found VK_NULL_HANDLE",
        ));
    }
    // SAFETY: the instance is live (the caller's promise).
    unsafe { check_physical(a.instance, a.physical_device) }?;
    // SAFETY: as above; the physical device is the instance's (checked).
    let offered = unsafe { device::offered(a.entry, a.instance, a.physical_device) }?;
    device::check_enabled(&a.enabled, &offered)?;
    // SAFETY: as above.
    let families = unsafe {
        a.instance
            .get_physical_device_queue_family_properties(a.physical_device)
    };
    let family = families.get(a.queue_family as usize).ok_or_else(|| {
        Error::invalid(format!(
            "expected a queue family index below {} (the physical device's queue family count), found {}",
            families.len(),
            a.queue_family
        ))
    })?;
    if !family.queue_flags.contains(vk::QueueFlags::COMPUTE) {
        return Err(Error::invalid(format!(
            "expected a queue family with compute, found flags {:?} (queue family {})",
            family.queue_flags, a.queue_family
        )));
    }
    if a.queue_index >= family.queue_count {
        return Err(Error::invalid(format!(
            "expected a queue index below {} (queue family {}'s queue count), found {}",
            family.queue_count, a.queue_family, a.queue_index
        )));
    }
    let handle = a.device.handle();
    let own = device::own_count();
    // One of Keel's own devices, handed out and given back.
    if let Some(c) = device::own_created().find(|c| c.device.handle() == handle) {
        return Device::new(TY, c.index);
    }
    let position = device::ADOPTED.adopt(
        |c| c.device.handle() == handle && !c.is_released(),
        |i| {
            let index = DeviceIndex::try_from(own + i)
                .ok()
                .filter(|&n| n < DeviceIndex::from(i8::MAX))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "expected at most {} Vulkan devices, found one more",
                        i8::MAX
                    ))
                })?;
            // SAFETY: the device was created with at least `queue_index +
            // 1` queues of the family (the caller's promise).
            let queue = unsafe { a.device.get_device_queue(a.queue_family, a.queue_index) };
            // SAFETY: the instance is live and of Vulkan 1.3, the physical
            // device its own and of Vulkan 1.3 (checked by `offered`), the
            // family in range (checked).
            let mut adapter =
                unsafe { loader::read_adapter(a.instance, a.physical_device, a.queue_family, 1) };
            adapter.f16_storage = a.enabled.native_f16;
            // SAFETY: the caller's promises above: the device is live, of
            // this instance and physical device, with Keel's requirements
            // and `enabled`, and `queue` is a queue of the family.
            unsafe {
                Ctx::new(
                    index,
                    (a.entry.clone(), a.instance.clone()),
                    adapter,
                    a.device.clone(),
                    vec![queue],
                    &a.enabled,
                    Owner::Program {
                        queue_index: a.queue_index,
                    },
                )
            }
        },
    )?;
    registry::device_adopted(TY);
    let index = DeviceIndex::try_from(own + position).unwrap_or(DeviceIndex::MAX);
    Device::new(TY, index)
}

/// The device state behind `device` (a Vulkan device, index `-1` for the
/// current one).
fn ctx_of(device: Device) -> Result<&'static Ctx> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a Vulkan device, found {device}"
        )));
    }
    VULKAN.device(crate::api::resolve(device)?)
}

/// The native stream behind `stream` (a stream of a Vulkan device).
fn stream_of(stream: &Stream) -> Result<&'static VkStream> {
    let device = stream.device();
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a stream of a Vulkan device, found one of {device}"
        )));
    }
    Vulkan.stream(ctx_of(device)?, stream.id())
}

/// The native objects behind a Keel Vulkan device ([`native_device`]).
///
/// They stay valid for as long as the Keel device does: for the process
/// for Keel's own devices (Keel never destroys them), and until
/// [`release`] for an adopted one (they are then the program's own).
#[derive(Clone)]
pub struct NativeDevice {
    /// The loader.
    pub entry: ash::Entry,
    /// The instance (Keel's, or the program's for an adopted device).
    pub instance: ash::Instance,
    /// The physical device.
    pub physical_device: vk::PhysicalDevice,
    /// The device.
    pub device: ash::Device,
    /// The queue family Keel submits to.
    pub queue_family: u32,
    /// The queues of that family Keel submits to (streams are spread over
    /// them); use one only inside [`with_queue`].
    pub queues: Vec<vk::Queue>,
    /// Whether the program gave Keel this device ([`adopt`]).
    pub adopted: bool,
}

impl std::fmt::Debug for NativeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeDevice")
            .field("instance", &self.instance.handle())
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("queue_family", &self.queue_family)
            .field("queues", &self.queues)
            .field("adopted", &self.adopted)
            .finish()
    }
}

/// The native objects behind Keel's Vulkan device `device` (one of Keel's
/// own or an adopted one). An error for a device of another type, or an
/// adopted device that was released.
pub fn native_device(device: Device) -> Result<NativeDevice> {
    let c = ctx_of(device)?;
    c.live()?;
    Ok(NativeDevice {
        entry: c.entry.clone(),
        instance: c.instance.clone(),
        physical_device: c.adapter.physical,
        device: c.device.clone(),
        queue_family: c.adapter.family,
        queues: c.queues.iter().map(|q| lock(q).handle).collect(),
        adopted: matches!(c.owner, Owner::Program { .. }),
    })
}

/// Runs `f` with queue `queue` of Keel's queues on `device` (an index into
/// [`NativeDevice::queues`]) while Keel submits nothing to it: the
/// external synchronisation Vulkan requires of a queue, for a program that
/// submits its own work there (or waits for it to go idle). `f` must not
/// call Keel's stream operations on `device` (they would wait for the
/// queue `f` holds).
pub fn with_queue<R>(device: Device, queue: usize, f: impl FnOnce(vk::Queue) -> R) -> Result<R> {
    let c = ctx_of(device)?;
    c.live()?;
    let q = c.queues.get(queue).ok_or_else(|| {
        Error::invalid(format!(
            "expected a queue index below {} (Keel's queues on {device}), found {queue}",
            c.queues.len()
        ))
    })?;
    let mut q = lock(q);
    // Work of the program's may now run between two of Keel's submissions
    // on this queue: a stream's next profiled span must not assume it
    // starts where the previous one ended (`stream.rs`, `chained_start`).
    q.submissions += 1;
    Ok(f(q.handle))
}

/// The native memory behind a Keel [`Buffer`] ([`native_buffer`]): Keel's
/// buffers are blocks of the caching allocator's segments, so a buffer is
/// `len` bytes at `offset` of a larger `vk::Buffer` of `size` bytes.
///
/// Valid while the Keel buffer lives. Work Keel enqueued on the buffer is
/// ordered on Keel's streams: the program waits for it (on the stream's
/// or an event's semaphore) before touching the bytes, and Keel's later
/// work waits for the program's through [`wait_semaphore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeBuffer {
    /// The buffer object (null for an empty buffer).
    pub buffer: vk::Buffer,
    /// Where the Keel buffer starts in it, in bytes.
    pub offset: u64,
    /// The Keel buffer's length in bytes.
    pub len: u64,
    /// The whole buffer object's size in bytes.
    pub size: u64,
}

/// The `vk::Buffer` and byte range behind `buffer`, a buffer on a Vulkan
/// device.
pub fn native_buffer(buffer: &Buffer) -> Result<NativeBuffer> {
    let device = buffer.device();
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a buffer on a Vulkan device, found one on {device}"
        )));
    }
    let b = buffer.handle().downcast_ref::<VkBuffer>().ok_or_else(|| {
        Error::invalid(format!(
            "expected a buffer of Keel's Vulkan backend, found another backend's on {device}"
        ))
    })?;
    b.ctx.live()?;
    Ok(NativeBuffer {
        buffer: b.buffer,
        offset: buffer.offset() as u64,
        len: buffer.len() as u64,
        size: b.size,
    })
}

/// A Keel stream as Vulkan sees it ([`native_stream`]): a timeline
/// semaphore that each of the stream's submissions waits for at the
/// previous value and signals at the next one.
///
/// The work enqueued on the stream so far is done when the semaphore
/// reaches `value`. The program may wait for that (`vkWaitSemaphores`, or
/// a wait in its own submission on the same device); it never signals the
/// semaphore. The semaphore lives as long as the Keel device (until
/// [`release`] for an adopted one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeStream {
    /// The stream's timeline semaphore.
    pub semaphore: vk::Semaphore,
    /// The value its last submission signals (0: nothing submitted yet).
    pub value: u64,
    /// The queue it submits to.
    pub queue: vk::Queue,
}

/// The semaphore, value and queue behind `stream`, a stream of a Vulkan
/// device.
pub fn native_stream(stream: &Stream) -> Result<NativeStream> {
    let s = stream_of(stream)?;
    Ok(NativeStream {
        semaphore: s.semaphore,
        value: s.last_value(),
        queue: s.queue(),
    })
}

/// A recorded Keel event as Vulkan sees it ([`native_event`]): the event
/// has completed when the stream's timeline semaphore reaches `value` (at
/// once for 0). The semaphore is Keel's, as in [`NativeStream`]. A timed
/// event's timestamp is Keel's to read ([`Event::elapsed_time`]): its
/// query slot is reused, and its value may move out of the query pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeEvent {
    /// The semaphore of the stream the event was recorded on.
    pub semaphore: vk::Semaphore,
    /// The value the event completes at.
    pub value: u64,
}

/// The semaphore and value of `event`'s last record (`None` if it was
/// never recorded), an event of the Vulkan device type.
pub fn native_event(event: &Event) -> Result<Option<NativeEvent>> {
    if event.device_type() != TY {
        return Err(Error::invalid(format!(
            "expected a Vulkan event, found a {} event",
            event.device_type()
        )));
    }
    let Some(handle) = event.handle() else {
        return Ok(None);
    };
    let recorded = handle.downcast_ref::<Option<VkEvent>>().ok_or_else(|| {
        Error::invalid("expected an event of Keel's Vulkan backend, found another backend's")
    })?;
    let Some(e) = recorded else {
        return Ok(None);
    };
    let point = e.point();
    point.ctx.live()?;
    Ok(Some(NativeEvent {
        semaphore: point.semaphore,
        value: point.value,
    }))
}

/// Makes the next work enqueued on `stream` (a stream of a Vulkan device)
/// wait until the program's timeline semaphore `semaphore` reaches
/// `value`, as [`Stream::wait`](crate::Stream::wait) does for a Keel
/// event. Value 0 waits for nothing.
///
/// # Safety
///
/// `semaphore` is a timeline semaphore of the stream's device that lives
/// until the stream's next submission has completed, and something will
/// signal `value` (Keel's waits for the stream never time out).
pub unsafe fn wait_semaphore(stream: &Stream, semaphore: vk::Semaphore, value: u64) -> Result<()> {
    if semaphore.is_null() {
        return Err(Error::invalid(
            "expected a VkSemaphore handle, found VK_NULL_HANDLE",
        ));
    }
    let s = stream_of(stream)?;
    s.add_wait(Point {
        ctx: s.ctx,
        semaphore,
        value,
    });
    Ok(())
}

/// The program's buffer `buffer` of `size` bytes on Vulkan device
/// `device` (adopted or Keel's own) as a Keel [`Buffer`]: reads, writes,
/// copies and launches use it as any buffer of `size` bytes (their ranges
/// checked against it, kernels bound to exactly those bytes). Dropping the
/// Keel buffer never destroys `buffer` or frees its memory, and the
/// caching allocator does not count it.
///
/// Checked: a null handle with a size, and a size larger than the
/// buffer's memory requirements (so larger than the buffer).
///
/// # Safety
///
/// The program promises that `buffer` is a buffer of `device`'s
/// `VkDevice` of at least `size` bytes, created with the usage flags
/// [`BUFFER_USAGE`] (Vulkan offers no way to read them back) and either
/// `SharingMode::EXCLUSIVE` used only on Keel's queue family or
/// `CONCURRENT` over a set of families that includes it, with memory bound
/// to it; and that it stays valid (buffer and memory) until the Keel
/// buffer is dropped and the work Keel enqueued on it has completed
/// (synchronise its streams first). Keel and the program order their
/// accesses through streams, events and semaphores ([`native_stream`],
/// [`wait_semaphore`]), as for any memory they share.
pub unsafe fn adopt_buffer(device: Device, buffer: vk::Buffer, size: u64) -> Result<Buffer> {
    let c = ctx_of(device)?;
    c.live()?;
    if buffer.is_null() && size > 0 {
        return Err(Error::invalid(format!(
            "expected a VkBuffer handle for {size} bytes, found VK_NULL_HANDLE"
        )));
    }
    let len = usize::try_from(size).map_err(|_| {
        Error::invalid(format!(
            "expected a buffer size that fits in usize, found {size} bytes"
        ))
    })?;
    if !buffer.is_null() {
        // SAFETY: `buffer` is a live buffer of this device (the caller's
        // promise).
        let requirements = unsafe { c.device.get_buffer_memory_requirements(buffer) };
        if size > requirements.size {
            return Err(Error::invalid(format!(
                "expected a size of at most {} bytes (the VkBuffer's memory requirements), found {size}",
                requirements.size
            )));
        }
    }
    let handle = BufferHandle::new(VkBuffer::foreign(c, buffer, size));
    Buffer::from_foreign_handle(device, handle, len)
}

/// Gives an adopted device back to the program: waits for Keel's work on
/// it, then destroys every object Keel created on it (command pools,
/// semaphores, the query pool, pipelines, descriptor pools, buffers, and
/// the memory it allocated). Afterwards every operation on the Keel device
/// is an error, its properties still read, and the program may destroy
/// its device. Releasing twice does nothing the second time; adopting the
/// same `VkDevice` again makes a new Keel device.
///
/// Refused, with nothing destroyed, for one of Keel's own devices, and
/// while a Keel [`Buffer`] on the device or a pending read from one is
/// alive (drop them first; an adopted buffer of the program's does not
/// count: Keel never frees it).
///
/// # Safety
///
/// No other thread uses the Keel device (or a stream, event or buffer of
/// it) during the call, and no pending read larger than 256 MiB from one
/// of its buffers is alive (the smaller ones are checked).
pub unsafe fn release(device: Device) -> Result<()> {
    let c = ctx_of(device)?;
    let device = Device::new(TY, c.index)?;
    if c.owner == Owner::Keel {
        return Err(Error::invalid(format!(
            "expected a device adopted with vulkan::adopt, found {device}, which Keel created (it lives for the process)"
        )));
    }
    if c.is_released() {
        return Ok(());
    }
    c.streams().try_for_each_created(VkStream::synchronize)?;
    crate::memory::empty_cache(device)?;
    let reserved = crate::memory::memory_reserved(device)?;
    if reserved > 0 {
        return Err(Error::invalid(format!(
            "release {device}: expected every Buffer on it dropped, found {} bytes in live buffers ({reserved} bytes reserved)",
            crate::memory::memory_allocated(device)?
        )));
    }
    let reading = c.staging.clear();
    if reading > 0 {
        return Err(Error::invalid(format!(
            "release {device}: expected every pending read from it dropped, found {reading} bytes of staging memory in use"
        )));
    }
    // SAFETY: every stream's work has completed and been retired (just
    // synchronised), so no pending submission uses a command buffer,
    // semaphore, pipeline, descriptor set or query slot; no other thread
    // submits (the caller's promise), and the device is marked released
    // below, so nothing uses them again.
    unsafe {
        for s in c.streams().created() {
            s.destroy();
        }
        super::kernel::destroy_pipelines(c);
        c.timestamps.destroy(&c.device);
    }
    // Frees every memory block: no buffer of Keel's is left (checked).
    drop(lock(&c.allocator).take());
    c.set_released();
    Ok(())
}
