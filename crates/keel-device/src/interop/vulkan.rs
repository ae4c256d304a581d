//! A program's Vulkan device and buffers in Keel, and Keel's Vulkan
//! objects in the program.
//!
//! ```no_run
//! # fn main() -> keel_device::Result<()> {
//! use keel_device::interop::vulkan::{self as interop, ash, ash::vk};
//! # let (entry, instance, physical, family): (ash::Entry, ash::Instance, vk::PhysicalDevice, u32) = todo!();
//! // What Keel needs of a device there, and the optional features it uses.
//! // SAFETY: `instance` is a live instance made from `entry`.
//! let req = unsafe { interop::requirements(&entry, &instance, physical)? };
//! let (mut f11, mut f12, mut f13) =
//!     (req.vulkan11_features(), req.vulkan12_features(), req.vulkan13_features());
//! let extensions: Vec<_> = req.extensions().iter().map(|e| e.as_ptr()).collect();
//! let queues = [vk::DeviceQueueCreateInfo::default()
//!     .queue_family_index(family)
//!     .queue_priorities(&[1.0])];
//! let mut coop = req.cooperative_matrix_features();
//! let mut info = vk::DeviceCreateInfo::default()
//!     .queue_create_infos(&queues)
//!     .enabled_extension_names(&extensions)
//!     .push_next(&mut f11)
//!     .push_next(&mut f12)
//!     .push_next(&mut f13);
//! if let Some(coop) = coop.as_mut() {
//!     info = info.push_next(coop);
//! }
//! // SAFETY: the features asked for are ones the device offers.
//! let device = unsafe { instance.create_device(physical, &info, None) }.expect("device");
//! // SAFETY: the handles are live and belong together, made with Keel's
//! // requirements; they outlive Keel's use (see `adopt`).
//! let keel = unsafe {
//!     interop::adopt(&interop::Adoption {
//!         entry: &entry,
//!         instance: &instance,
//!         physical_device: physical,
//!         device: &device,
//!         queue_family: family,
//!         queue_index: 0,
//!         enabled: req,
//!     })?
//! };
//! let stream = keel_device::default_stream(keel)?;
//! let data = keel_device::Buffer::from_slice(&stream, &[1.0f32, 2.0, 3.0])?;
//! // ... Keel's work and the program's on one device ...
//! drop(data);
//! // SAFETY: no other thread uses the Keel device.
//! unsafe { interop::release(keel)? };
//! // SAFETY: Keel released the device, and it is idle.
//! unsafe { device.destroy_device(None) };
//! # Ok(()) }
//! ```
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
//! # Ownership
//!
//! Keel never destroys a `VkInstance` or a `VkDevice`, neither its own
//! (they live for the process) nor the program's, and dropping a Keel
//! object never destroys anything of the program's (an adopted buffer
//! included). The objects Keel creates on an adopted device (its command
//! pools, semaphores, query pool, pipelines, descriptor pools, buffers and
//! memory) are Keel's; [`release`] destroys them. Handles handed out stay
//! valid while the Keel object they came from lives (for a device: for
//! the process, or until [`release`]).
//!
//! # Teardown
//!
//! In this order: drop the Keel objects on the device (buffers, pending
//! reads; events may stay, their operations then fail), call [`release`]
//! (it waits for Keel's work on the device), wait for the program's own
//! work, destroy the program's buffers that Keel used, then the device,
//! then the instance.

use std::borrow::Cow;

use crate::backend::vulkan::interop as backend;
use crate::core::{Device, DeviceType, Stream};
use crate::error::{Error, Result};
use crate::profiler::SpanKind;
use crate::profiler::record::Detail;
use crate::{Buffer, Event};

/// The `ash` Keel is built with: a program that adopts or hands out
/// devices uses these types (`ash::Device`, `vk::Buffer`, ...).
pub use ash;
use ash::vk;

pub use crate::backend::vulkan::interop::{API_VERSION, COOPERATIVE_MATRIX_SHAPES, Requirements};

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
    // SAFETY: the caller's promise.
    unsafe { backend::requirements(entry, instance, physical_device) }
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
    // SAFETY: the caller's promises.
    let index = unsafe {
        backend::adopt(
            a.entry,
            a.instance,
            a.physical_device,
            a.device,
            (a.queue_family, a.queue_index),
            &a.enabled,
        )
    }?;
    Device::new(DeviceType::Vulkan, index)
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
    let c = backend::state(device)?;
    c.check_live()?;
    Ok(NativeDevice {
        entry: c.entry().clone(),
        instance: c.instance().clone(),
        physical_device: c.physical_device(),
        device: c.ash_device().clone(),
        queue_family: c.queue_family(),
        queues: c.queue_handles(),
        adopted: c.adopted(),
    })
}

/// Runs `f` with queue `queue` of Keel's queues on `device` (an index into
/// [`NativeDevice::queues`]) while Keel submits nothing to it: the
/// external synchronisation Vulkan requires of a queue, for a program that
/// submits its own work there (or waits for it to go idle). `f` must not
/// call Keel's stream operations on `device` (they would wait for the
/// queue `f` holds).
pub fn with_queue<R>(device: Device, queue: usize, f: impl FnOnce(vk::Queue) -> R) -> Result<R> {
    backend::state(device)?.with_queue(queue, f)
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
    if device.device_type() != DeviceType::Vulkan {
        return Err(Error::invalid(format!(
            "expected a buffer on a Vulkan device, found one on {device}"
        )));
    }
    let (vk_buffer, size) = backend::buffer_of(buffer.handle())?.ok_or_else(|| {
        Error::invalid(format!(
            "expected a buffer of Keel's Vulkan backend, found another backend's on {device}"
        ))
    })?;
    Ok(NativeBuffer {
        buffer: vk_buffer,
        offset: buffer.offset() as u64,
        len: buffer.len() as u64,
        size,
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
    let (semaphore, value, queue) = backend::stream(stream)?.native();
    Ok(NativeStream {
        semaphore,
        value,
        queue,
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
    if event.device_type() != DeviceType::Vulkan {
        return Err(Error::invalid(format!(
            "expected a Vulkan event, found a {} event",
            event.device_type()
        )));
    }
    let Some(handle) = event.handle() else {
        return Ok(None);
    };
    Ok(backend::event_point(handle)?.map(|(semaphore, value)| NativeEvent { semaphore, value }))
}

/// Makes the next work enqueued on `stream` (a stream of a Vulkan device)
/// wait until the program's timeline semaphore `semaphore` reaches
/// `value`, as [`Event::block`] does for a Keel event. Value 0 waits for
/// nothing.
///
/// # Safety
///
/// `semaphore` is a timeline semaphore of the stream's device that lives
/// until the stream's next submission has completed, and something will
/// signal `value` (Keel's waits for the stream never time out).
pub unsafe fn wait_semaphore(stream: &Stream, semaphore: vk::Semaphore, value: u64) -> Result<()> {
    // SAFETY: the caller's promise.
    unsafe { backend::stream(stream)?.wait_semaphore(semaphore, value) }
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
    let len = usize::try_from(size).map_err(|_| {
        Error::invalid(format!(
            "expected a buffer size that fits in usize, found {size} bytes"
        ))
    })?;
    // SAFETY: `buffer` is a live buffer of the device (the caller's
    // promise).
    let handle = unsafe { backend::foreign_buffer(backend::state(device)?, buffer, size) }?;
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
    let c = backend::state(device)?;
    let device = c.keel_device()?;
    if !c.adopted() {
        return Err(Error::invalid(format!(
            "expected a device adopted with interop::vulkan::adopt, found {device}, which Keel created (it lives for the process)"
        )));
    }
    if c.released() {
        return Ok(());
    }
    c.synchronize()?;
    crate::memory::empty_cache(device)?;
    let reserved = crate::memory::memory_reserved(device)?;
    if reserved > 0 {
        return Err(Error::invalid(format!(
            "release {device}: expected every Buffer on it dropped, found {} bytes in live buffers ({reserved} bytes reserved)",
            crate::memory::memory_allocated(device)?
        )));
    }
    // SAFETY: adopted (checked), every stream synchronised and no buffer of
    // Keel's left (checked just above); no other thread uses the device
    // and no unpooled readback is alive (the caller's promises).
    unsafe { c.release() }
}

/// Submits the program's command buffers on `stream` (a Keel stream of a
/// Vulkan device): after the work Keel enqueued on it before, and
/// signalling its timeline semaphore, so Keel's later work, events, waits
/// and `synchronize` order the program's work like Keel's own. With a
/// profiler session, the submission is a host span and its work a device
/// span on the stream's lane. Returns the semaphore value the submission
/// signals ([`native_stream`] gives the semaphore).
///
/// # Safety
/// The command buffers are primary command buffers of `stream`'s device,
/// recorded and ended, not pending elsewhere, and the program keeps them
/// (and everything they use) alive until the stream's semaphore reaches
/// the returned value.
pub unsafe fn submit(stream: &Stream, buffers: &[vk::CommandBuffer]) -> Result<u64> {
    let native = backend::stream(stream)?;
    crate::submit::enqueue(
        stream,
        SpanKind::Kernel,
        || Cow::Borrowed("queue submit"),
        Detail::None,
        // SAFETY: the caller's promise.
        || unsafe { native.submit_program(buffers) },
    )
}

/// Scopes on commands the program records into its own Vulkan command
/// buffers, timed on the GPU and recorded by the running profiler session
/// as device spans (user annotations) on a Keel stream's lane, calibrated
/// to the host clock like Keel's own and nested as the scopes are: each
/// [`begin`](Self::begin)/[`end`](Self::end) writes a timestamp
/// (`vkCmdWriteTimestamp2`, after all earlier commands) into Keel's query
/// pool from the program's command buffer. The scopes become spans when
/// the command buffers are submitted through [`submit`](Self::submit).
///
/// With no session recording when the `Scopes` is made, or on a queue
/// family without timestamps, every call is free and records nothing. A
/// `Scopes` dropped without submitting gives its slots back: the command
/// buffers must then not be submitted (their timestamps would land in
/// slots others own).
#[derive(Debug)]
pub struct Scopes {
    stream: Stream,
    native: Option<&'static backend::VkStream>,
    open: Vec<(Cow<'static, str>, (u32, u32))>,
    done: Vec<(Cow<'static, str>, (u32, u32))>,
}

impl Scopes {
    /// Scopes on work that will be submitted on `stream`, a Keel stream of
    /// a Vulkan device.
    pub fn new(stream: &Stream) -> Result<Scopes> {
        let native = backend::stream(stream)?;
        Ok(Scopes {
            stream: *stream,
            native: crate::profiler::enabled().then_some(native),
            open: Vec::new(),
            done: Vec::new(),
        })
    }

    /// Whether the scopes are timed (a session records; the device may
    /// still turn out to have no timestamps).
    pub fn recording(&self) -> bool {
        self.native.is_some()
    }

    /// Begins a scope named `name` at this point of `command_buffer`
    /// (recording), ended by the next [`end`](Self::end) not matched yet.
    ///
    /// # Safety
    /// `command_buffer` is a command buffer of the stream's device in the
    /// recording state, that the program submits with [`submit`](Self::submit).
    pub unsafe fn begin(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        command_buffer: vk::CommandBuffer,
    ) -> Result<()> {
        let Some(native) = self.native else {
            return Ok(());
        };
        let Some(slots) = native.take_scope_slots()? else {
            return Ok(());
        };
        // SAFETY: the caller's promise; the slot was reset on the host and
        // only this command buffer writes it.
        unsafe { write_timestamp(native, command_buffer, slots.0) };
        self.open.push((name.into(), slots));
        Ok(())
    }

    /// Ends the innermost open scope at this point of `command_buffer`
    /// (which may be a later command buffer of the same submission); an
    /// error when none is open.
    ///
    /// # Safety
    /// As for [`begin`](Self::begin).
    pub unsafe fn end(&mut self, command_buffer: vk::CommandBuffer) -> Result<()> {
        let Some(native) = self.native else {
            return Ok(());
        };
        let Some((name, slots)) = self.open.pop() else {
            return Err(Error::invalid(
                "ending a Vulkan scope: expected one begun and not ended, found none",
            ));
        };
        // SAFETY: as in `begin`.
        unsafe { write_timestamp(native, command_buffer, slots.1) };
        self.done.push((name, slots));
        Ok(())
    }

    /// Submits `buffers` (recorded with these scopes) as [`submit`](fn@submit)
    /// does, and hands the scopes to the session. An error, before
    /// anything is submitted, when a scope begun is not ended.
    ///
    /// # Safety
    /// As for [`submit`](fn@submit).
    pub unsafe fn submit(mut self, buffers: &[vk::CommandBuffer]) -> Result<u64> {
        if let Some((name, _)) = self.open.last() {
            return Err(Error::invalid(format!(
                "submitting Vulkan scopes: expected every scope ended, found {name:?} open"
            )));
        }
        // SAFETY: the caller's promise.
        let value = unsafe { submit(&self.stream, buffers) }?;
        if let Some(native) = self.native {
            let spans = std::mem::take(&mut self.done)
                .into_iter()
                .map(|(name, slots)| {
                    let (a, b) = native.scope_events(slots, value);
                    (name, a, b)
                })
                .collect();
            crate::profiler::record::foreign_device_spans(&self.stream, spans);
        }
        Ok(value)
    }
}

impl Drop for Scopes {
    /// Gives back the slots of scopes never submitted.
    fn drop(&mut self) {
        if let Some(native) = self.native {
            for (_, slots) in self.open.drain(..).chain(self.done.drain(..)) {
                native.release_scope_slots(slots);
            }
        }
    }
}

/// Writes timestamp `slot` of the device's query pool into
/// `command_buffer`, after every earlier command.
///
/// # Safety
/// `command_buffer` is recording, on the stream's device; `slot` was reset
/// on the host and is written by no other command.
unsafe fn write_timestamp(
    native: &backend::VkStream,
    command_buffer: vk::CommandBuffer,
    slot: u32,
) {
    let stage = vk::PipelineStageFlags2::ALL_COMMANDS;
    // SAFETY: the caller's promise.
    unsafe {
        native
            .device()
            .cmd_write_timestamp2(command_buffer, stage, native.query_pool(), slot);
    }
}
