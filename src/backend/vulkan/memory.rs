//! Device buffers and host-visible staging buffers, from gpu-allocator.
//!
//! A [`VkBuffer`] frees its memory when the last reference goes: the
//! user's `Buffer` holds one, and every submission that uses the buffer
//! keeps another until it has run, so memory is never freed under work in
//! flight. Zero-sized buffers have no Vulkan object at all.

use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::TY;
use super::device::{Ctx, lock, vk_error};
use super::stream::wait_semaphore;
use crate::backend::Readback;
use crate::core::Device;
use crate::error::{Error, Result};

/// A Vulkan buffer and its memory.
pub(super) struct VkBuffer {
    pub ctx: &'static Ctx,
    pub buffer: vk::Buffer,
    pub size: u64,
    allocation: Mutex<Option<Allocation>>,
}

impl VkBuffer {
    /// A buffer of `size` bytes at `location`, for `usage`.
    pub fn new(
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

    /// A device-local buffer usable as storage and as a copy source and
    /// destination.
    pub fn device_local(ctx: &'static Ctx, size: u64) -> Result<VkBuffer> {
        VkBuffer::new(
            ctx,
            size,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST,
            MemoryLocation::GpuOnly,
            "keel buffer",
        )
    }

    /// A host-visible buffer holding `data` (uploads, kernel parameters).
    pub fn upload(ctx: &'static Ctx, data: &[u8], usage: vk::BufferUsageFlags) -> Result<VkBuffer> {
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
    pub fn readback(ctx: &'static Ctx, size: u64) -> Result<VkBuffer> {
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
    pub fn with_mapped<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
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

/// Data copied into a host-visible buffer by a submission.
pub(super) struct VkReadback {
    pub ctx: &'static Ctx,
    pub semaphore: vk::Semaphore,
    pub value: u64,
    pub staging: Arc<VkBuffer>,
}

impl Readback for VkReadback {
    fn is_ready(&self) -> Result<bool> {
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let now = unsafe { self.ctx.device.get_semaphore_counter_value(self.semaphore) }
            .map_err(|e| vk_error("vkGetSemaphoreCounterValue", e))?;
        Ok(now >= self.value)
    }

    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        wait_semaphore(&self.ctx.device, self.semaphore, self.value)?;
        self.staging.with_mapped(|m| m.to_vec())
    }
}
