//! [`Buffer`]: device memory, and the copies that use it (launches are
//! [`Stream::launch`]).
//!
//! A buffer lives on one device. Its memory is a block of the device's
//! caching allocator ([`crate::memory`]): `len` bytes at an offset of a
//! backend allocation. Dropping the buffer gives the block back to the
//! allocator, which reuses it at once for buffers on the same stream and,
//! for other streams' uses declared with [`Buffer::record_stream`], only
//! after that work has completed. Every
//! operation is enqueued on a stream that must be on the buffer's device:
//! mixing devices is an error ("expected all buffers to be on the same
//! device, but found at least two devices, cuda:0 and cpu:0"), and moving
//! data between devices is explicit, with [`Buffer::to`].
//!
//! A copy within one buffer ([`Buffer::copy_from`] with `src` the buffer
//! itself) must not overlap: on every backend, overlapping source and
//! destination ranges are an error ("copy within one buffer: expected
//! non-overlapping ranges, found 0..16 and 8..24"), checked here once, so
//! no backend ever sees such a copy. Disjoint ranges within one buffer, and
//! any ranges of two buffers, copy as asked.

use std::borrow::Cow;
use std::fmt;

use bytemuck::Pod;

use crate::api::resolve;
use crate::backend::{BufferHandle, BufferView, DeviceRuntime, Readback, registry};
use crate::core::{Device, Stream};
use crate::error::{Error, Result};
use crate::memory::{self, DeviceAllocator};
use crate::profiler::SpanKind;
use crate::profiler::record::Detail;
use crate::submit;

/// Memory on a device: a block of its caching allocator, with its length
/// and the stream it belongs to.
pub struct Buffer {
    /// The device's allocator (which knows the device). Every field is a
    /// whole word: no narrow stores for a copy of the buffer to stall on.
    allocator: &'static DeviceAllocator,
    len: usize,
    /// The backend's allocation (always there; taken only by `drop`,
    /// which hands it to the allocator with the block).
    handle: Option<BufferHandle>,
    offset: usize,
    /// The allocator's block ([`memory::Block::none`] for empty buffers).
    block: memory::Block,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(id) = self.block.id()
            && let Some(handle) = self.handle.take()
        {
            self.allocator.free(id, handle, self.offset);
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({} bytes on {})", self.len, self.device())
    }
}

pub(crate) fn same_device(first: Device, second: Device) -> Result<()> {
    if first == second {
        Ok(())
    } else {
        Err(Error::DeviceMismatch { first, second })
    }
}

fn check_range(what: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::invalid(format!(
            "{what} out of bounds: expected offset + length <= {size} (the buffer's size), found {offset} + {len}"
        ))),
    }
}

/// `device` with a concrete index (the current device for `-1`). A
/// concrete index is checked where the device's allocator is found
/// (`memory::allocator`), so it is not looked up twice.
#[inline]
fn concrete(device: Device) -> Result<Device> {
    if device.has_index() {
        Ok(device)
    } else {
        resolve(device)
    }
}

/// The runtime of `stream`'s backend and the stream with a concrete device.
/// Inline because every launch calls it: returned through the stack, the
/// pair would be read back in wider loads than it was written, a
/// store-forwarding stall on every launch (`perf annotate` of
/// `Stream::launch`).
#[inline(always)]
pub(crate) fn stream_runtime(stream: &Stream) -> Result<(&'static dyn DeviceRuntime, Stream)> {
    registry::available_guard_impl(stream.device_type())?;
    let rt = registry::runtime(stream.device_type())?;
    Ok((rt, Stream::new(resolve(stream.device())?, stream.id())))
}

impl Buffer {
    /// `len` zeroed bytes on `device` (index `-1`: the current device),
    /// from the device's caching allocator; the block belongs to the
    /// device's current stream (see [`crate::memory`]). A reused block is
    /// zeroed by a write on that stream, which this waits for (so the
    /// zeros are there for work on any stream); [`Buffer::empty`] skips
    /// it.
    pub fn new(device: Device, len: usize) -> Result<Buffer> {
        let device = concrete(device)?;
        let allocator = memory::allocator(device)?;
        let stream = allocator.current_stream()?;
        Buffer::alloc(allocator, len, stream, true)
    }

    /// `len` bytes on `device` whose contents are unspecified (like
    /// `torch.empty`): a cached block is handed out as it is, with no work
    /// enqueued. The block belongs to the device's current stream.
    pub fn empty(device: Device, len: usize) -> Result<Buffer> {
        let device = concrete(device)?;
        let allocator = memory::allocator(device)?;
        let stream = allocator.current_stream()?;
        Buffer::alloc(allocator, len, stream, false)
    }

    /// [`Buffer::empty`] for use on `stream`: the block belongs to
    /// `stream` rather than to the device's current stream.
    #[inline]
    pub fn empty_on(stream: &Stream, len: usize) -> Result<Buffer> {
        let device = concrete(stream.device())?;
        let stream = Stream::new(device, stream.id());
        Buffer::alloc(memory::allocator(device)?, len, stream, false)
    }

    /// A program's memory on `device` (interop): `len` bytes of `handle`,
    /// which the backend made from the program's object and which Keel
    /// never frees (dropping the buffer drops only Keel's reference). It
    /// is no block of the caching allocator, so `record_stream` has
    /// nothing to hold back.
    #[cfg(any(feature = "cuda", feature = "vulkan", feature = "wgpu"))]
    pub(crate) fn from_foreign_handle(
        device: Device,
        handle: BufferHandle,
        len: usize,
    ) -> Result<Buffer> {
        let allocator = memory::allocator(concrete(device)?)?;
        Ok(Buffer {
            allocator,
            len,
            handle: Some(handle),
            offset: 0,
            block: memory::Block::none(),
        })
    }

    /// [`Buffer::new`] for use on `stream`: zeroed, the block belonging to
    /// `stream`.
    pub fn new_on(stream: &Stream, len: usize) -> Result<Buffer> {
        let device = concrete(stream.device())?;
        let stream = Stream::new(device, stream.id());
        Buffer::alloc(memory::allocator(device)?, len, stream, true)
    }

    /// A block of `len` bytes for `stream` from `allocator`, zeroed when
    /// asked.
    fn alloc(
        allocator: &'static DeviceAllocator,
        len: usize,
        stream: Stream,
        zeroed: bool,
    ) -> Result<Buffer> {
        if len == 0 {
            return Ok(Buffer {
                allocator,
                len,
                handle: Some(allocator.empty_handle()?),
                offset: 0,
                block: memory::Block::none(),
            });
        }
        let a = allocator.allocate(len, stream)?;
        let buf = Buffer {
            allocator,
            len,
            handle: Some(a.handle),
            offset: a.offset,
            block: a.block,
        };
        if zeroed && !a.zeroed {
            return buf.zero_reused(&stream);
        }
        Ok(buf)
    }

    /// A reused block: zero it on its stream, after its previous owner's
    /// work, and wait, so that the buffer is zero for work on any stream
    /// (as a fresh allocation is).
    #[inline(never)]
    fn zero_reused(self, stream: &Stream) -> Result<Buffer> {
        self.write(stream, 0, &vec![0u8; self.len])?;
        let mut done = crate::event::Event::new(self.device().device_type());
        done.record(stream)?;
        done.synchronize()?;
        Ok(self)
    }

    /// A buffer on `stream`'s device holding `data`, uploaded on `stream`
    /// (its block belongs to `stream`).
    pub fn from_slice<T: Pod>(stream: &Stream, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = Buffer::empty_on(stream, bytes.len())?;
        buf.write(stream, 0, data)?;
        Ok(buf)
    }

    /// Tells the caching allocator that work on `stream` uses this buffer
    /// (PyTorch's `Tensor.record_stream`): when the buffer is dropped, its
    /// block is not reused before the work enqueued on `stream` until then
    /// has completed. Needed only for streams other than the one the
    /// buffer was allocated on; see [`crate::memory`].
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        let (_, stream) = stream_runtime(stream)?;
        same_device(self.device(), stream.device())?;
        match self.block.id() {
            Some(id) => self.allocator.record_stream(self.handle(), id, stream),
            None => Ok(()),
        }
    }

    /// Where this buffer starts in its backend allocation
    /// ([`handle`](Self::handle)), in bytes: a multiple of 512.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The range a kernel binds for this buffer.
    pub(crate) fn view(&self) -> BufferView<'_> {
        BufferView {
            handle: self.handle(),
            offset: self.offset,
            len: self.len,
        }
    }

    /// The device the buffer lives on (a concrete index).
    pub fn device(&self) -> Device {
        self.allocator.device()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `other` is this very buffer. A `Buffer` owns its allocation
    /// (it is not `Clone`, and no two buffers share one), so identity of
    /// the objects is identity of the memory.
    fn is(&self, other: &Buffer) -> bool {
        std::ptr::eq(self, other)
    }

    /// The backend's allocation holding this buffer (a caching allocator
    /// segment; the buffer is [`len`](Self::len) bytes at
    /// [`offset`](Self::offset) of it).
    pub fn handle(&self) -> &BufferHandle {
        match &self.handle {
            Some(h) => h,
            None => unreachable!("a buffer's handle is taken only when it is dropped"),
        }
    }

    /// Host to device: enqueues writing `data` at byte `offset`. The data is
    /// copied before this returns, so the caller may reuse it.
    pub fn write<T: Pod>(&self, stream: &Stream, offset: usize, data: &[T]) -> Result<()> {
        let (rt, stream) = stream_runtime(stream)?;
        same_device(self.device(), stream.device())?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        check_range("write", self.len, offset, bytes.len())?;
        submit::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy host->device"),
            Detail::Bytes(bytes.len() as u64),
            || rt.write_slice(&stream, self.handle(), self.offset + offset, bytes),
        )
    }

    /// Device to host: enqueues reading `len` bytes at `offset`; the result
    /// arrives when the stream reaches the read.
    pub fn read_async(&self, stream: &Stream, offset: usize, len: usize) -> Result<PendingRead> {
        let (rt, stream) = stream_runtime(stream)?;
        same_device(self.device(), stream.device())?;
        check_range("read", self.len, offset, len)?;
        let inner = submit::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy device->host"),
            Detail::Bytes(len as u64),
            || rt.read(&stream, self.handle(), self.offset + offset, len),
        )?;
        Ok(PendingRead { inner, len })
    }

    /// Device to host into `dst`: reads `dst.len()` bytes at `offset` on
    /// `stream` and waits for them. Unlike [`read`](Self::read) it
    /// allocates nothing, and the data is copied once on the host.
    pub fn read_into(&self, stream: &Stream, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.read_async(stream, offset, dst.len())?.wait_into(dst)
    }

    /// The whole buffer, read on `stream` (waits for the stream to reach
    /// the read).
    pub fn read(&self, stream: &Stream) -> Result<Vec<u8>> {
        self.read_async(stream, 0, self.len)?.wait()
    }

    /// The whole buffer as `T`s. Its size must be a multiple of `T`'s.
    pub fn read_as<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if size == 0 || !self.len.is_multiple_of(size) {
            return Err(Error::invalid(format!(
                "read_as: expected a buffer size that is a multiple of {size} bytes, found {} bytes",
                self.len
            )));
        }
        Ok(bytemuck::pod_collect_to_vec(&self.read(stream)?))
    }

    /// Device to device: enqueues copying `len` bytes from `src` at
    /// `src_offset` into `self` at `dst_offset`. Both buffers must be on
    /// the stream's device, or the backend must reach `src` from it (peer
    /// access); use [`Buffer::to`] to move data between other devices.
    ///
    /// `src` may be `self` when the two ranges do not overlap; overlapping
    /// ranges within one buffer are an error on every backend (no backend
    /// promises memmove semantics), and nothing is enqueued.
    pub fn copy_from(
        &self,
        stream: &Stream,
        src: &Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let (rt, stream) = stream_runtime(stream)?;
        same_device(self.device(), stream.device())?;
        if src.device() != self.device() && !rt.can_copy_between(src.device(), self.device()) {
            return Err(Error::DeviceMismatch {
                first: self.device(),
                second: src.device(),
            });
        }
        check_range("copy source", src.len, src_offset, len)?;
        check_range("copy destination", self.len, dst_offset, len)?;
        if self.is(src) && src_offset < dst_offset + len && dst_offset < src_offset + len {
            return Err(Error::invalid(format!(
                "copy within one buffer: expected non-overlapping ranges, found {src_offset}..{} and {dst_offset}..{}",
                src_offset + len,
                dst_offset + len
            )));
        }
        submit::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy device->device"),
            Detail::Bytes(len as u64),
            || {
                rt.copy(
                    &stream,
                    src.handle(),
                    src.offset + src_offset,
                    self.handle(),
                    self.offset + dst_offset,
                    len,
                )
            },
        )
    }

    /// A copy of this buffer on `device`, enqueued on `stream` (which must
    /// be on `device`), like PyTorch's `x.to('cuda:1')`.
    ///
    /// Within a device, or between devices the backend connects (peer
    /// access), the copy is direct. Otherwise the data goes through host
    /// memory: it is read on the *current stream of this buffer's device*
    /// (waiting for it), then written on `stream`. Any two devices of any
    /// backends exchange data this way.
    pub fn to(&self, device: Device, stream: &Stream) -> Result<Buffer> {
        let device = resolve(device)?;
        let (rt, stream) = stream_runtime(stream)?;
        same_device(device, stream.device())?;
        let out = Buffer::empty_on(&stream, self.len)?;
        let direct = device.device_type() == self.device().device_type()
            && (device == self.device() || rt.can_copy_between(self.device(), device));
        if direct {
            out.copy_from(&stream, self, 0, 0, self.len)?;
        } else {
            let src_stream = crate::api::current_stream(self.device())?;
            let bytes = self.read(&src_stream)?;
            out.write(&stream, 0, &bytes)?;
        }
        Ok(out)
    }
}

/// Data on its way from a device to the host; see [`Buffer::read_async`].
pub struct PendingRead {
    inner: Box<dyn Readback>,
    len: usize,
}

impl fmt::Debug for PendingRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingRead(..)")
    }
}

impl PendingRead {
    /// Whether the data has arrived. Never blocks.
    pub fn is_ready(&self) -> Result<bool> {
        self.inner.is_ready()
    }

    /// Waits for the data.
    pub fn wait(self) -> Result<Vec<u8>> {
        self.inner.wait()
    }

    /// Waits for the data and copies it into `dst`, which must be as long
    /// as the read.
    pub fn wait_into(self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::invalid(format!(
                "wait_into: expected a destination of {} bytes (the read's length), found {} bytes",
                self.len,
                dst.len()
            )));
        }
        self.inner.wait_into(dst)
    }
}
