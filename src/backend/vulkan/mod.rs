//! The Vulkan backend (`vulkan:N`, cargo feature `vulkan`): ash loads
//! libvulkan at run time, gpu-allocator manages memory, naga turns the WGSL
//! kernels into SPIR-V.
//!
//! | c10 concept | Vulkan |
//! |---|---|
//! | device index | a physical device with a compute queue and Vulkan 1.3, ordered discrete, integrated, virtual, CPU, other, then by name |
//! | current device | thread-local index ([`tls`](crate::backend::tls)) |
//! | logical device | created on first use of an index, thread-safe, lives for the process |
//! | default stream / pool stream | a timeline semaphore + a command pool; streams are spread round-robin over the compute family's queues |
//! | stream order | each submission waits for the stream's previous value and signals the next, so streams sharing a queue stay in order |
//! | priority levels | 2 (normal, high) as separate pools; the queues themselves have one priority |
//! | event record | (semaphore, value); a timed event also writes a timestamp query in its own submission |
//! | `stream.wait(event)` | the stream's next submission waits on (semaphore, value); events of another device are waited for on the host |
//! | query / synchronize | `vkGetSemaphoreCounterValue` / `vkWaitSemaphores` |
//! | `elapsed_time` | timestamp ticks x `timestampPeriod`, masked to `timestampValidBits`; an error when the queue family has no timestamps |
//! | memory | gpu-allocator: device-local buffers, host-visible staging for copies; out of memory is an error |
//! | kernel | WGSL -> SPIR-V by naga (cached per kernel), one compute pipeline per (device, kernel); buffers are storage bindings 0..n, parameters a uniform at binding n |
//!
//! Availability: when the loader is missing, the instance cannot be
//! created, or no device qualifies, `device_count(Vulkan)` is 0 and every
//! operation returns "Vulkan unavailable: <reason>". Nothing panics.
//!
//! Validation: Keel installs a debug messenger when `VK_EXT_debug_utils` is
//! present. With `VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation` every
//! validation error is counted ([`validation_error_count`]) and printed;
//! the test command runs the Vulkan tests that way and fails on any.

mod device;
mod instance;
mod kernel;
mod memory;
mod stream;

use std::sync::Arc;

use ash::vk;

pub use device::PRIORITY_LEVELS;
pub use instance::{validation_error_count, validation_messages};
pub use kernel::spirv;

use self::device::{Ctx, ctx, vk_error};
use self::memory::{VkBuffer, VkReadback};
use self::stream::{Keep, VkStream};
use super::{
    BufferHandle, DeviceGuardImpl, DeviceProperties, DeviceRuntime, EventHandle, Readback,
    StaticGuardImpl, TimestampSupport, check_device_index, check_static_type, foreign_buffer,
    foreign_event, tls,
};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

const TY: DeviceType = DeviceType::Vulkan;

fn unavailable(reason: &str) -> Error {
    Error::Unavailable {
        backend: TY.backend_name().to_owned(),
        reason: reason.to_owned(),
    }
}

fn count() -> DeviceIndex {
    instance::vk().map_or(0, |v| DeviceIndex::try_from(v.adapters.len()).unwrap_or(0))
}

/// Checks `device` is a Vulkan device that exists.
fn check(device: Device) -> Result<()> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "the Vulkan backend serves vulkan devices, found {device}"
        )));
    }
    instance::vk().map_err(unavailable)?;
    check_device_index(device, count())
}

fn vk_stream(stream: &Stream) -> Result<(&'static Ctx, &'static VkStream)> {
    check(stream.device())?;
    let c = ctx(stream.device())?;
    Ok((c, c.stream(stream.id())?))
}

/// A recorded Vulkan event.
struct VkEvent {
    ctx: &'static Ctx,
    semaphore: vk::Semaphore,
    value: u64,
    /// The timestamp query slot, for timed events.
    query: Option<u32>,
}

impl VkEvent {
    fn done(&self) -> Result<bool> {
        if self.value == 0 {
            return Ok(true);
        }
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let now = unsafe { self.ctx.device.get_semaphore_counter_value(self.semaphore) }
            .map_err(|e| vk_error("vkGetSemaphoreCounterValue", e))?;
        Ok(now >= self.value)
    }

    fn timestamp(&self) -> Result<u64> {
        let slot = self
            .query
            .ok_or_else(|| Error::invalid("the event was recorded without timing"))?;
        let mut data = [0u64; 1];
        // SAFETY: the slot was written by a completed submission (callers
        // check completion first); `data` holds one 64-bit result.
        unsafe {
            self.ctx.device.get_query_pool_results(
                self.ctx.query_pool,
                slot,
                &mut data,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| vk_error("vkGetQueryPoolResults", e))?;
        Ok(data[0])
    }
}

fn vk_event(event: &EventHandle) -> Result<&VkEvent> {
    event
        .downcast_ref::<VkEvent>()
        .ok_or_else(|| foreign_event(TY))
}

fn vk_buffer(handle: &BufferHandle) -> Result<Arc<VkBuffer>> {
    handle
        .downcast_arc::<VkBuffer>()
        .ok_or_else(|| foreign_buffer(TY))
}

/// The Vulkan backend's guard implementation and runtime (zero-sized: the
/// state is process-wide and per thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct VulkanGuardImpl;

impl StaticGuardImpl for VulkanGuardImpl {
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        check_static_type("VulkanGuardImpl", TY, ty).map(|()| VulkanGuardImpl)
    }
}

impl DeviceGuardImpl for VulkanGuardImpl {
    fn device_type(&self) -> DeviceType {
        TY
    }
    fn exchange_device(&self, device: Device) -> Result<Device> {
        check(device)?;
        tls::exchange_device(device)
    }
    fn get_device(&self) -> Result<Device> {
        instance::vk().map_err(unavailable)?;
        tls::current_device(TY)
    }
    fn set_device(&self, device: Device) -> Result<()> {
        self.exchange_device(device).map(drop)
    }
    fn unchecked_set_device(&self, device: Device) {
        tls::restore_device(device);
    }
    fn get_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(tls::current_stream(device))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        vk_stream(&stream)?;
        Ok(tls::exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        count()
    }
    fn unavailable_reason(&self) -> Option<String> {
        match instance::vk() {
            Err(reason) => Some(reason.to_owned()),
            Ok(v) if v.adapters.is_empty() => {
                Some("no Vulkan 1.3 device with a compute queue was found".to_owned())
            }
            Ok(_) => None,
        }
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(Stream::default_for(device))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        check(device)?;
        ctx(device)?.cursors.pool_stream(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        check(device)?;
        ctx(device)?.cursors.priority_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        let (c, s) = vk_stream(stream)?;
        let previous = event.as_ref().map(vk_event).transpose()?;
        let query = match previous.and_then(|p| p.query) {
            Some(slot) => Some(slot),
            None if flag.timing() => {
                if c.adapter.timestamp_valid_bits == 0 {
                    return Err(Error::unsupported(
                        TY,
                        format!(
                            "timing events on {} (its queue family has no timestamps)",
                            c.adapter.name
                        ),
                    ));
                }
                Some(c.take_query_slot()?)
            }
            None => None,
        };
        let value = if let Some(slot) = query {
            s.submit(
                |d, cb| {
                    // SAFETY: `cb` is recording; the slot belongs to this
                    // event and is reset before it is written, in order.
                    unsafe {
                        d.cmd_reset_query_pool(cb, c.query_pool, slot, 1);
                        d.cmd_write_timestamp2(
                            cb,
                            vk::PipelineStageFlags2::ALL_COMMANDS,
                            c.query_pool,
                            slot,
                        );
                    }
                },
                Vec::new(),
            )?
        } else if s.has_pending_waits() {
            // The event must come after the waits queued on the stream.
            s.submit(|_, _| {}, Vec::new())?
        } else {
            s.last_value()
        };
        *event = Some(EventHandle::new(VkEvent {
            ctx: c,
            semaphore: s.semaphore,
            value,
            query,
        }));
        Ok(())
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        let e = vk_event(event)?;
        let (c, s) = vk_stream(stream)?;
        if std::ptr::eq(c, e.ctx) {
            s.add_wait(e.semaphore, e.value);
            Ok(())
        } else {
            // Semaphores do not cross devices: wait on the host instead.
            stream::wait_semaphore(&e.ctx.device, e.semaphore, e.value)
        }
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        vk_event(event)?.done()
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        vk_stream(stream)?.1.query()
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        vk_stream(stream)?.1.synchronize()
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        let e = vk_event(event)?;
        stream::wait_semaphore(&e.ctx.device, e.semaphore, e.value)
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        let device = Device::new(TY, device_index)?;
        check(device)?;
        let c = ctx(device)?;
        for s in c.streams() {
            s.synchronize()?;
        }
        Ok(())
    }
    fn elapsed_time(&self, start: &EventHandle, end: &EventHandle, _: DeviceIndex) -> Result<f64> {
        let (a, b) = (vk_event(start)?, vk_event(end)?);
        let bits = a.ctx.adapter.timestamp_valid_bits;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let (t0, t1) = (a.timestamp()? & mask, b.timestamp()? & mask);
        let ticks = t1.wrapping_sub(t0) & mask;
        // A start later than the end reads as a negative interval.
        let signed = if ticks > mask / 2 {
            -((t0.wrapping_sub(t1) & mask) as f64)
        } else {
            ticks as f64
        };
        Ok(signed * a.ctx.timestamp_period() / 1e6)
    }
    fn destroy_event(&self, event: EventHandle, _: DeviceIndex) {
        if let Some(e) = event.downcast_ref::<VkEvent>()
            && let Some(slot) = e.query
        {
            e.ctx.release_query_slot(slot, e.semaphore, e.value);
        }
    }
}

impl DeviceRuntime for VulkanGuardImpl {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        check(device)?;
        let v = instance::vk().map_err(unavailable)?;
        let a = &v.adapters[device.index() as usize];
        let l = &a.props.limits;
        let mut p = DeviceProperties::new(device, a.name.clone(), a.kind);
        p.vendor = super::vendor_name(a.props.vendor_id).to_owned();
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
        Ok(p)
    }

    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        check(device)?;
        Ok(BufferHandle::new(VkBuffer::device_local(
            ctx(device)?,
            len as u64,
        )?))
    }

    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let (c, s) = vk_stream(stream)?;
        let dst = vk_buffer(dst)?;
        let staging = Arc::new(VkBuffer::upload(
            c,
            &data,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )?);
        let region = [vk::BufferCopy::default()
            .src_offset(0)
            .dst_offset(offset as u64)
            .size(data.len() as u64)];
        let (src_b, dst_b) = (staging.buffer, dst.buffer);
        let keep: Vec<Keep> = vec![Box::new(staging), Box::new(dst)];
        s.submit(
            // SAFETY: both buffers are alive (kept until the copy ran) and
            // the region is in bounds (checked by `Buffer::write`).
            |d, cb| unsafe { d.cmd_copy_buffer(cb, src_b, dst_b, &region) },
            keep,
        )?;
        Ok(())
    }

    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let (c, s) = vk_stream(stream)?;
        let staging = Arc::new(VkBuffer::readback(c, len as u64)?);
        if len == 0 {
            return Ok(Box::new(VkReadback {
                ctx: c,
                semaphore: s.semaphore,
                value: 0,
                staging,
            }));
        }
        let src = vk_buffer(src)?;
        let region = [vk::BufferCopy::default()
            .src_offset(offset as u64)
            .dst_offset(0)
            .size(len as u64)];
        let (src_b, dst_b) = (src.buffer, staging.buffer);
        let keep: Vec<Keep> = vec![Box::new(Arc::clone(&staging)), Box::new(src)];
        let value = s.submit(
            |d, cb| {
                let to_host = [vk::MemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::COPY)
                    .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                    .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                    .dst_access_mask(vk::AccessFlags2::HOST_READ)];
                let dep = vk::DependencyInfo::default().memory_barriers(&to_host);
                // SAFETY: both buffers are alive (kept until the copy ran),
                // the region is in bounds (checked by `Buffer::read_async`).
                unsafe {
                    d.cmd_copy_buffer(cb, src_b, dst_b, &region);
                    d.cmd_pipeline_barrier2(cb, &dep);
                }
            },
            keep,
        )?;
        Ok(Box::new(VkReadback {
            ctx: c,
            semaphore: s.semaphore,
            value,
            staging,
        }))
    }

    fn copy(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        src_offset: usize,
        dst: &BufferHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (_, s) = vk_stream(stream)?;
        let (src, dst) = (vk_buffer(src)?, vk_buffer(dst)?);
        let region = [vk::BufferCopy::default()
            .src_offset(src_offset as u64)
            .dst_offset(dst_offset as u64)
            .size(len as u64)];
        let (src_b, dst_b) = (src.buffer, dst.buffer);
        let same = Arc::ptr_eq(&src, &dst);
        let keep: Vec<Keep> = vec![Box::new(src), Box::new(dst)];
        if same {
            // vkCmdCopyBuffer forbids overlapping regions within one buffer.
            let (a, b) = (src_offset, dst_offset);
            if a < b + len && b < a + len {
                return Err(Error::invalid(format!(
                    "copy within one buffer: expected non-overlapping ranges, found {a}..{} and {b}..{}",
                    a + len,
                    b + len
                )));
            }
        }
        s.submit(
            // SAFETY: both buffers are alive (kept until the copy ran) and
            // the regions are in bounds (checked by `Buffer::copy_from`).
            |d, cb| unsafe { d.cmd_copy_buffer(cb, src_b, dst_b, &region) },
            keep,
        )?;
        Ok(())
    }

    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&BufferHandle],
        params: &[u8],
    ) -> Result<()> {
        let (c, s) = vk_stream(stream)?;
        let limits = c.adapter.props.limits.max_compute_work_group_count;
        if (0..3).any(|i| grid[i] > limits[i]) {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "grid {grid:?} exceeds the device's maximum workgroup count {limits:?}"
                ),
            });
        }
        let bufs = buffers
            .iter()
            .map(|b| vk_buffer(b))
            .collect::<Result<Vec<_>>>()?;
        if let Some(i) = bufs.iter().position(|b| b.size == 0) {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!("binding {i} is an empty buffer, which Vulkan cannot bind"),
            });
        }
        let p = kernel::pipeline(c, kernel)?;
        let params = kernel::ParamBuffer::new(c, params)?;
        let uniform = params
            .buffer()
            .ok_or_else(|| Error::backend(TY, "a parameter buffer went missing"))?;
        let refs: Vec<&VkBuffer> = bufs.iter().map(|b| &**b).collect();
        let (pipeline, layout) = (p.pipeline, p.layout);
        if grid.contains(&0) {
            return Ok(()); // nothing to run
        }
        match &c.push_descriptor {
            Some(push) => {
                let infos = kernel::buffer_infos(&refs, uniform);
                let writes = kernel::writes(vk::DescriptorSet::null(), &infos);
                let mut keep: Vec<Keep> = vec![Box::new(params), Box::new(Arc::clone(&p))];
                keep.extend(bufs.into_iter().map(|b| Box::new(b) as Keep));
                s.submit(
                    |d, cb| {
                        // SAFETY: pipeline and layout match; every buffer in
                        // `writes` is alive (kept until the dispatch ran) and
                        // non-empty; the grid is within the device's limits.
                        unsafe {
                            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline);
                            push.cmd_push_descriptor_set(
                                cb,
                                vk::PipelineBindPoint::COMPUTE,
                                layout,
                                0,
                                &writes,
                            );
                            d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
                        }
                    },
                    keep,
                )?;
            }
            None => {
                let sets = kernel::descriptors(c, &p, &refs, uniform)?;
                let set = sets.set;
                let mut keep: Vec<Keep> =
                    vec![Box::new(sets), Box::new(params), Box::new(Arc::clone(&p))];
                keep.extend(bufs.into_iter().map(|b| Box::new(b) as Keep));
                s.submit(
                    |d, cb| {
                        // SAFETY: pipeline, layout and set are alive (kept
                        // until the dispatch ran) and match each other; the
                        // grid is within the device's limits.
                        unsafe {
                            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline);
                            d.cmd_bind_descriptor_sets(
                                cb,
                                vk::PipelineBindPoint::COMPUTE,
                                layout,
                                0,
                                &[set],
                                &[],
                            );
                            d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
                        }
                    },
                    keep,
                )?;
            }
        }
        Ok(())
    }
}

/// Waits for every stream of every Vulkan device created so far.
pub fn synchronize_all() -> Result<()> {
    for c in device::created() {
        for s in c.streams() {
            s.synchronize()?;
        }
    }
    Ok(())
}
