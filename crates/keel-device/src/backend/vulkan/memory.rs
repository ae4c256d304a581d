//! Device buffers and host-visible staging buffers, from gpu-allocator;
//! the copies between them and readbacks.
//!
//! A [`VkBuffer`] frees its memory when the last reference goes: the
//! user's `Buffer` holds one, and every submission that uses the buffer
//! keeps another until it has run, so memory is never freed under work in
//! flight. Zero-sized buffers have no Vulkan object at all, and a buffer
//! of the program's (`interop::adopt_buffer`) has no allocation of
//! Keel's: Keel never destroys it.
//!
//! Staging buffers (uploads and readbacks) come from a per-device
//! [`StagingPool`]: allocating and mapping fresh host-visible memory for
//! every copy would make a large copy several times slower than the copy
//! itself (first touches of fresh pages).

use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};

use super::device::{Ctx, lock, vk_error};
use super::stream::{Keep, Keeps, Point, VkStream};
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
    /// Keel's memory bound to the buffer: `None` for a zero-sized buffer
    /// (no Vulkan object) and for a program's buffer (not Keel's to free).
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
        ctx.live()?;
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
            detail: String::new(),
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
        let allocation = match lock(&ctx.allocator).as_mut() {
            Some(allocator) => allocator.allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            }),
            // Released meanwhile (only a program breaking `release`'s
            // contract gets here).
            None => Err(gpu_allocator::AllocationError::Internal(
                "the device was released".to_owned(),
            )),
        };
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
            if let Some(allocator) = lock(&ctx.allocator).as_mut() {
                let _ = allocator.free(allocation);
            }
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

    /// The program's buffer `buffer` of `size` bytes on `ctx`, which Keel
    /// uses but never destroys (it has no allocation of Keel's).
    pub(super) fn foreign(ctx: &'static Ctx, buffer: vk::Buffer, size: u64) -> VkBuffer {
        VkBuffer {
            ctx,
            buffer,
            size,
            allocation: Mutex::new(None),
        }
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
            let mut allocator = lock(&self.ctx.allocator);
            // `None`: the device was released, its memory freed with its
            // allocator, and the program may have destroyed it; `release`
            // refuses while a buffer of Keel's lives, so none gets here.
            if let Some(allocator) = allocator.as_mut() {
                // SAFETY: no submission uses the buffer any more (they keep
                // a reference until they complete), so it can be destroyed.
                unsafe { self.ctx.device.destroy_buffer(self.buffer, None) };
                let _ = allocator.free(a);
            }
        }
    }
}

/// Which way a staging buffer carries data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Direction {
    /// Host to device: the host writes, a copy reads.
    Upload,
    /// Device to host: a copy writes, the host reads.
    Readback,
}

impl Direction {
    fn usage(self) -> vk::BufferUsageFlags {
        match self {
            Direction::Upload => vk::BufferUsageFlags::TRANSFER_SRC,
            Direction::Readback => vk::BufferUsageFlags::TRANSFER_DST,
        }
    }
    fn location(self) -> MemoryLocation {
        match self {
            Direction::Upload => MemoryLocation::CpuToGpu,
            Direction::Readback => MemoryLocation::GpuToCpu,
        }
    }
}

/// An idle pooled staging buffer and the point after which no submission
/// uses it any more.
struct Idle {
    buffer: Arc<VkBuffer>,
    direction: Direction,
    free_at: Option<Point>,
}

#[derive(Default)]
struct PoolState {
    idle: Vec<Idle>,
    /// Bytes of every pooled buffer, idle or handed out.
    total: u64,
}

/// Host-visible staging buffers kept per device for later copies.
///
/// Sizes are powers of two (at least [`StagingPool::MIN`]), so a buffer
/// serves any copy needing more than half of it. A buffer handed out
/// ([`Staging`]) comes back when dropped, marked with the stream point of
/// the submission that used it; it is handed out again only once that
/// point is reached (one semaphore counter read, never a wait). Pooled
/// bytes are bounded by [`StagingPool::MAX_TOTAL`]: past it, idle buffers
/// of other sizes are freed, and a copy that still does not fit gets a
/// buffer of its own, freed after use.
#[derive(Default)]
pub(super) struct StagingPool {
    state: Mutex<PoolState>,
}

impl StagingPool {
    /// The smallest pooled size.
    pub(super) const MIN: u64 = 64 << 10;
    /// The largest pooled size; larger copies get a buffer of their own.
    pub(super) const MAX_ONE: u64 = 256 << 20;
    /// The most bytes the pool keeps, idle and in use together.
    pub(super) const MAX_TOTAL: u64 = 512 << 20;

    /// Frees every idle buffer (`interop::release`), returning the bytes
    /// still handed out (readbacks not yet dropped).
    pub(super) fn clear(&self) -> u64 {
        let mut state = lock(&self.state);
        let idle = std::mem::take(&mut state.idle);
        state.total -= idle.iter().map(|i| i.buffer.size).sum::<u64>();
        let left = state.total;
        drop(state);
        drop(idle);
        left
    }

    /// The size class of a copy of `len` bytes.
    pub(super) fn class(len: u64) -> u64 {
        len.max(Self::MIN).next_power_of_two()
    }

    /// A staging buffer of at least `len` (> 0) bytes for `direction`.
    pub(super) fn take(
        &self,
        ctx: &'static Ctx,
        direction: Direction,
        len: u64,
    ) -> Result<Staging> {
        let class = Self::class(len);
        if class > Self::MAX_ONE {
            return Staging::unpooled(ctx, direction, len);
        }
        let mut state = lock(&self.state);
        let found = state.idle.iter().position(|i| {
            i.direction == direction
                && i.buffer.size == class
                && i.free_at.is_none_or(|p| p.reached().unwrap_or(false))
        });
        if let Some(at) = found {
            let idle = state.idle.swap_remove(at);
            return Ok(Staging {
                buffer: Some(idle.buffer),
                direction,
                pooled: true,
                free_at: None,
            });
        }
        // Make room: free idle buffers of other sizes or directions that
        // no submission uses any more.
        while state.total + class > Self::MAX_TOTAL {
            let free = state
                .idle
                .iter()
                .position(|i| i.free_at.is_none_or(|p| p.reached().unwrap_or(false)));
            let Some(at) = free else { break };
            let idle = state.idle.swap_remove(at);
            state.total -= idle.buffer.size;
        }
        if state.total + class > Self::MAX_TOTAL {
            drop(state);
            return Staging::unpooled(ctx, direction, len);
        }
        state.total += class;
        drop(state);
        match VkBuffer::new(
            ctx,
            class,
            direction.usage(),
            direction.location(),
            "keel staging",
        ) {
            Ok(b) => Ok(Staging {
                buffer: Some(Arc::new(b)),
                direction,
                pooled: true,
                free_at: None,
            }),
            Err(e) => {
                lock(&self.state).total -= class;
                Err(e)
            }
        }
    }
}

/// A staging buffer handed out by a device's [`StagingPool`]; it goes back
/// when dropped, usable once [`Staging::free_at`] is reached.
pub(super) struct Staging {
    buffer: Option<Arc<VkBuffer>>,
    direction: Direction,
    pooled: bool,
    /// The point of the last submission using the buffer.
    pub(super) free_at: Option<Point>,
}

impl Staging {
    fn unpooled(ctx: &'static Ctx, direction: Direction, len: u64) -> Result<Staging> {
        let b = VkBuffer::new(
            ctx,
            len,
            direction.usage(),
            direction.location(),
            "keel staging",
        )?;
        Ok(Staging {
            buffer: Some(Arc::new(b)),
            direction,
            pooled: false,
            free_at: None,
        })
    }

    /// The buffer (a clone of the reference, for a submission to keep).
    pub(super) fn buffer(&self) -> Result<&Arc<VkBuffer>> {
        self.buffer
            .as_ref()
            .ok_or_else(|| Error::backend(TY, "a staging buffer went missing"))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        if self.pooled {
            let ctx = buffer.ctx;
            lock(&ctx.staging.state).idle.push(Idle {
                buffer,
                direction: self.direction,
                free_at: self.free_at,
            });
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
    let (src, dst): (Keep, Keep) = (Box::new(src), Box::new(dst));
    let keep: Keeps = smallvec::smallvec![src, dst];
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
    /// `None` for an empty read.
    staging: Option<Staging>,
    len: usize,
}

impl Readback for VkReadback {
    fn is_ready(&self) -> Result<bool> {
        self.done.reached()
    }

    /// One host copy, from the mapped staging memory straight into the
    /// returned vector (no zero-filling first).
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        self.done.wait()?;
        let Some(staging) = &self.staging else {
            return Ok(Vec::new());
        };
        let len = self.len;
        staging.buffer()?.with_mapped(|m| m[..len].to_vec())
    }

    /// Straight from the mapped staging memory into `dst`.
    fn wait_into(self: Box<Self>, dst: &mut [u8]) -> Result<()> {
        self.done.wait()?;
        let Some(staging) = &self.staging else {
            return Ok(());
        };
        staging
            .buffer()?
            .with_mapped(|m| dst.copy_from_slice(&m[..dst.len()]))
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

    fn enqueue_write(
        &self,
        stream: &'static VkStream,
        dst: &Arc<VkBuffer>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        self.enqueue_write_slice(stream, dst, offset, &data)
    }

    /// Host to device, copied once into a pooled staging buffer.
    fn enqueue_write_slice(
        &self,
        stream: &'static VkStream,
        dst: &Arc<VkBuffer>,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        let ctx = stream.ctx;
        let mut staging = ctx
            .staging
            .take(ctx, Direction::Upload, data.len() as u64)?;
        let src = Arc::clone(staging.buffer()?);
        src.with_mapped(|m| m[..data.len()].copy_from_slice(data))?;
        let value = submit_copy(
            stream,
            (src, 0),
            (Arc::clone(dst), offset),
            data.len(),
            false,
        )?;
        staging.free_at = Some(stream.point(value));
        Ok(())
    }

    /// Device to host, into a pooled host-visible buffer.
    fn enqueue_read(
        &self,
        stream: &'static VkStream,
        src: &Arc<VkBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let ctx = stream.ctx;
        let mut staging = ctx.staging.take(ctx, Direction::Readback, len as u64)?;
        let dst = (Arc::clone(staging.buffer()?), 0);
        let value = submit_copy(stream, (Arc::clone(src), offset), dst, len, true)?;
        let done = stream.point(value);
        staging.free_at = Some(done);
        Ok(Box::new(VkReadback {
            done,
            staging: Some(staging),
            len,
        }))
    }

    fn enqueue_copy(
        &self,
        stream: &'static VkStream,
        (src, src_offset): (&Arc<VkBuffer>, usize),
        (dst, dst_offset): (&Arc<VkBuffer>, usize),
        len: usize,
    ) -> Result<()> {
        let (src, dst) = ((Arc::clone(src), src_offset), (Arc::clone(dst), dst_offset));
        submit_copy(stream, src, dst, len, false).map(drop)
    }
}
