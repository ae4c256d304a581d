//! Device buffers and host-visible staging buffers, from gpu-allocator;
//! the copies between them and readbacks.
//!
//! A [`VkBuffer`] frees its memory when the last reference goes: the
//! user's `Buffer` holds one, and every submission that uses the buffer
//! keeps another until it has run, so memory is never freed under work in
//! flight. Zero-sized buffers have no Vulkan object at all.

use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::device::{Ctx, lock, vk_error};
use super::stream::{Keep, Point, VkStream};
use super::{TY, Vulkan};
use crate::backend::Readback;
use crate::backend::typed::Memory;
use crate::core::Device;
use crate::error::{Error, Result};

/// A Vulkan buffer and its memory.
pub struct VkBuffer {
    pub(super) ctx: &'static Ctx,
    pub(super) buffer: vk::Buffer,
    pub(super) size: u64,
    allocation: Mutex<Option<Allocation>>,
}

impl std::fmt::Debug for VkBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VkBuffer({} bytes on vulkan:{})",
            self.size, self.ctx.index
        )
    }
}

impl VkBuffer {
    /// A buffer of `size` bytes at `location`, for `usage`.
    pub(super) fn new(
        ctx: &'static Ctx,
        size: u64,
        usage: vk::BufferUsageFlags,
        location: MemoryLocation,
        name: &str,
    ) -> Result<VkBuffer> {
        if size == 0 {
            return Ok(VkBuffer {
                ctx,
                buffer: vk::Buffer::null(),
                size,
                allocation: Mutex::new(None),
            });
        }
        let oom = || Error::OutOfMemory {
            device: Device::new(TY, ctx.index).unwrap_or(Device::current(TY)),
            requested: size,
        };
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: object creation on a live device; destroyed in `Drop`.
        let buffer = unsafe { ctx.device.create_buffer(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => oom(),
            e => vk_error("vkCreateBuffer", e),
        })?;
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { ctx.device.get_buffer_memory_requirements(buffer) };
        let allocation = lock(&ctx.allocator).allocate(&AllocationCreateDesc {
            name,
            requirements,
            location,
            linear: true,
            allocation_scheme: AllocationScheme::GpuAllocatorManaged,
        });
        let allocation = match allocation {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unused and owned here.
                unsafe { ctx.device.destroy_buffer(buffer, None) };
                return Err(match e {
                    gpu_allocator::AllocationError::OutOfMemory => oom(),
                    e => Error::backend(TY, format!("allocating {size} bytes failed: {e}")),
                });
            }
        };
        // SAFETY: the allocation satisfies the buffer's requirements (the
        // allocator was given them) and is bound exactly once.
        let bound = unsafe {
            ctx.device
                .bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
        };
        if let Err(e) = bound {
            let _ = lock(&ctx.allocator).free(allocation);
            // SAFETY: as above.
            unsafe { ctx.device.destroy_buffer(buffer, None) };
            return Err(vk_error("vkBindBufferMemory", e));
        }
        Ok(VkBuffer {
            ctx,
            buffer,
            size,
            allocation: Mutex::new(Some(allocation)),
        })
    }

    /// A host-visible buffer holding `data` (uploads, kernel parameters).
    pub(super) fn upload(
        ctx: &'static Ctx,
        data: &[u8],
        usage: vk::BufferUsageFlags,
    ) -> Result<VkBuffer> {
        let b = VkBuffer::new(
            ctx,
            data.len() as u64,
            usage,
            MemoryLocation::CpuToGpu,
            "keel upload",
        )?;
        b.with_mapped(|m| m[..data.len()].copy_from_slice(data))?;
        Ok(b)
    }

    /// A host-visible buffer to copy device data into.
    pub(super) fn readback(ctx: &'static Ctx, size: u64) -> Result<VkBuffer> {
        VkBuffer::new(
            ctx,
            size,
            vk::BufferUsageFlags::TRANSFER_DST,
            MemoryLocation::GpuToCpu,
            "keel readback",
        )
    }

    /// Runs `f` on the mapped bytes of a host-visible buffer, making host
    /// writes visible to the device and device writes visible to the host
    /// where the memory is not coherent.
    pub(super) fn with_mapped<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let mut guard = lock(&self.allocation);
        let Some(allocation) = guard.as_mut() else {
            return Ok(f(&mut []));
        };
        let coherent = allocation
            .memory_properties()
            .contains(vk::MemoryPropertyFlags::HOST_COHERENT);
        // SAFETY: the allocation's memory is mapped for its lifetime by
        // gpu-allocator (host-visible locations only); offset and size are
        // the allocation's own.
        let range = unsafe {
            vk::MappedMemoryRange::default()
                .memory(allocation.memory())
                .offset(allocation.offset())
                .size(vk::WHOLE_SIZE)
        };
        if !coherent {
            // SAFETY: the range lies in mapped memory of this device.
            unsafe { self.ctx.device.invalidate_mapped_memory_ranges(&[range]) }
                .map_err(|e| vk_error("vkInvalidateMappedMemoryRanges", e))?;
        }
        let size = self.size as usize;
        let bytes = allocation
            .mapped_slice_mut()
            .ok_or_else(|| Error::backend(TY, "a staging buffer is not host-visible"))?;
        let r = f(&mut bytes[..size]);
        if !coherent {
            // SAFETY: as above.
            unsafe { self.ctx.device.flush_mapped_memory_ranges(&[range]) }
                .map_err(|e| vk_error("vkFlushMappedMemoryRanges", e))?;
        }
        Ok(r)
    }
}

impl Drop for VkBuffer {
    fn drop(&mut self) {
        let allocation = self
            .allocation
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(a) = allocation {
            // SAFETY: no submission uses the buffer any more (they keep a
            // reference until they complete), so it can be destroyed.
            unsafe { self.ctx.device.destroy_buffer(self.buffer, None) };
            let _ = lock(&self.ctx.allocator).free(a);
        }
    }
}

/// Enqueues copying `len` bytes from `(src, src_offset)` to `(dst,
/// dst_offset)`, keeping both buffers alive until the copy has run. With
/// `to_host`, the copy's writes are made visible to host reads. Returns the
/// value the submission signals.
fn submit_copy(
    stream: &VkStream,
    (src, src_offset): (Arc<VkBuffer>, usize),
    (dst, dst_offset): (Arc<VkBuffer>, usize),
    len: usize,
    to_host: bool,
) -> Result<u64> {
    let region = [vk::BufferCopy::default()
        .src_offset(src_offset as u64)
        .dst_offset(dst_offset as u64)
        .size(len as u64)];
    let (src_b, dst_b) = (src.buffer, dst.buffer);
    let keep: Vec<Keep> = vec![Box::new(src), Box::new(dst)];
    stream.submit(
        |d, cb| {
            // SAFETY: both buffers are alive (kept until the copy ran), the
            // regions are in bounds (checked by `Buffer`) and, within one
            // buffer, do not overlap (checked by `Buffer::copy_from`).
            unsafe { d.cmd_copy_buffer(cb, src_b, dst_b, &region) };
            if to_host {
                let barrier = [vk::MemoryBarrier2::default()
                    .src_stage_mask(vk::PipelineStageFlags2::COPY)
                    .src_access_mask(vk::AccessFlags2::TRANSFER_WRITE)
                    .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                    .dst_access_mask(vk::AccessFlags2::HOST_READ)];
                let dep = vk::DependencyInfo::default().memory_barriers(&barrier);
                // SAFETY: `cb` is recording; a barrier references nothing.
                unsafe { d.cmd_pipeline_barrier2(cb, &dep) };
            }
        },
        keep,
    )
}

/// Data copied into a host-visible buffer by a submission.
struct VkReadback {
    done: Point,
    staging: Arc<VkBuffer>,
}

impl Readback for VkReadback {
    fn is_ready(&self) -> Result<bool> {
        self.done.reached()
    }

    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        self.done.wait()?;
        self.staging.with_mapped(|m| m.to_vec())
    }
}

impl Memory for Vulkan {
    type Buffer = VkBuffer;

    /// A device-local buffer usable as storage and as a copy source and
    /// destination.
    fn allocate(&self, device: &'static Ctx, _at: Device, len: usize) -> Result<VkBuffer> {
        VkBuffer::new(
            device,
            len as u64,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
            MemoryLocation::GpuOnly,
            "keel buffer",
        )
    }

    /// Host to device, through a staging buffer.
    fn enqueue_write(
        &self,
        stream: &'static VkStream,
        dst: &Arc<VkBuffer>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let staging = VkBuffer::upload(stream.ctx, &data, vk::BufferUsageFlags::TRANSFER_SRC)?;
        let src = (Arc::new(staging), 0);
        submit_copy(stream, src, (Arc::clone(dst), offset), data.len(), false).map(drop)
    }

    /// Device to host, into a host-visible buffer.
    fn enqueue_read(
        &self,
        stream: &'static VkStream,
        src: &Arc<VkBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let staging = Arc::new(VkBuffer::readback(stream.ctx, len as u64)?);
        let value = if len == 0 {
            0
        } else {
            let dst = (Arc::clone(&staging), 0);
            submit_copy(stream, (Arc::clone(src), offset), dst, len, true)?
        };
        Ok(Box::new(VkReadback {
            done: stream.point(value),
            staging,
        }))
    }

    fn enqueue_copy(
        &self,
        stream: &'static VkStream,
        (src, src_offset): (&Arc<VkBuffer>, usize),
        (dst, dst_offset): (&Arc<VkBuffer>, usize),
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (src, dst) = ((Arc::clone(src), src_offset), (Arc::clone(dst), dst_offset));
        submit_copy(stream, src, dst, len, false).map(drop)
    }
}
