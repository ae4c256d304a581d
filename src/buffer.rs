//! [`Buffer`]: device memory, and the copies that use it (launches are
//! [`Stream::launch`]).
//!
//! A buffer lives on one device and is freed when dropped; backends keep
//! the memory alive until work already enqueued on it has run. Every
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
use crate::backend::{BufferHandle, DeviceRuntime, Readback, registry};
use crate::core::{Device, Stream};
use crate::error::{Error, Result};
use crate::ops;
use crate::profiler::SpanKind;
use crate::profiler::record::Detail;

/// Memory on a device; see the [module docs](self).
pub struct Buffer {
    device: Device,
    len: usize,
    handle: BufferHandle,
    /// The address the profiler was told of (0: none; see `direct`).
    reported: u64,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.reported != 0 && crate::profiler::enabled() {
            direct::freed(self.device, self.reported, self.len);
        }
    }
}

/// What the profiler hears of buffers until the caching allocator (issue
/// 11) reports its own actions: each buffer is a segment of its own,
/// reserved and allocated together (PyTorch's allocator with caching off),
/// with totals counted while a session records.
mod direct {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, PoisonError};

    use crate::core::Device;
    use crate::profiler::record::{MemoryAction, MemoryRecord, memory_event};

    static NEXT: AtomicU64 = AtomicU64::new(1 << 20);
    /// Bytes live per device, counted while sessions record.
    static TOTALS: Mutex<Option<HashMap<Device, u64>>> = Mutex::new(None);

    fn record(
        device: Device,
        action: MemoryAction,
        addr: u64,
        bytes: u64,
        total: u64,
        reserved: u64,
    ) {
        memory_event(MemoryRecord {
            device,
            action,
            addr,
            segment: addr,
            bytes,
            stream: None,
            small_pool: false,
            allocated: total,
            reserved,
        });
    }

    /// Reports a new buffer of `len` bytes; returns its address.
    pub(super) fn allocated(device: Device, len: usize) -> u64 {
        let bytes = len as u64;
        let addr = NEXT.fetch_add(bytes.div_ceil(512).max(1) * 512, Ordering::Relaxed);
        let mut totals = TOTALS.lock().unwrap_or_else(PoisonError::into_inner);
        let total = totals
            .get_or_insert_with(HashMap::new)
            .entry(device)
            .or_default();
        *total += bytes;
        let t = *total;
        record(
            device,
            MemoryAction::SegmentAlloc,
            addr,
            bytes,
            t - bytes,
            t,
        );
        record(device, MemoryAction::Alloc, addr, bytes, t, t);
        addr
    }

    /// Reports the buffer at `addr` freed.
    pub(super) fn freed(device: Device, addr: u64, len: usize) {
        let bytes = len as u64;
        let mut totals = TOTALS.lock().unwrap_or_else(PoisonError::into_inner);
        let total = totals
            .get_or_insert_with(HashMap::new)
            .entry(device)
            .or_default();
        *total = total.saturating_sub(bytes);
        let t = *total;
        record(device, MemoryAction::Free, addr, bytes, t, t + bytes);
        record(device, MemoryAction::SegmentFree, addr, bytes, t, t);
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({} bytes on {})", self.len, self.device)
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

/// The runtime of `stream`'s backend and the stream with a concrete device.
pub(crate) fn stream_runtime(stream: &Stream) -> Result<(&'static dyn DeviceRuntime, Stream)> {
    registry::available_guard_impl(stream.device_type())?;
    let rt = registry::runtime(stream.device_type())?;
    Ok((rt, Stream::new(resolve(stream.device())?, stream.id())))
}

impl Buffer {
    /// `len` zeroed bytes on `device` (index `-1`: the current device).
    pub fn new(device: Device, len: usize) -> Result<Buffer> {
        let device = resolve(device)?;
        let rt = registry::runtime(device.device_type())?;
        let handle = rt.alloc(device, len)?;
        let reported = if crate::profiler::enabled() {
            direct::allocated(device, len)
        } else {
            0
        };
        Ok(Buffer {
            device,
            len,
            handle,
            reported,
        })
    }

    /// A buffer on `stream`'s device holding `data`, uploaded on `stream`.
    pub fn from_slice<T: Pod>(stream: &Stream, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = Buffer::new(stream.device(), bytes.len())?;
        buf.write(stream, 0, data)?;
        Ok(buf)
    }

    /// The device the buffer lives on (a concrete index).
    pub fn device(&self) -> Device {
        self.device
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

    /// The backend's allocation (for backends and kernel launches).
    pub fn handle(&self) -> &BufferHandle {
        &self.handle
    }

    /// Host to device: enqueues writing `data` at byte `offset`. The data is
    /// copied before this returns, so the caller may reuse it.
    pub fn write<T: Pod>(&self, stream: &Stream, offset: usize, data: &[T]) -> Result<()> {
        let (rt, stream) = stream_runtime(stream)?;
        same_device(self.device, stream.device())?;
        let bytes: &[u8] = bytemuck::cast_slice(data);
        check_range("write", self.len, offset, bytes.len())?;
        ops::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy host->device"),
            Detail::Bytes(bytes.len() as u64),
            || rt.write_slice(&stream, &self.handle, offset, bytes),
        )
    }

    /// Device to host: enqueues reading `len` bytes at `offset`; the result
    /// arrives when the stream reaches the read.
    pub fn read_async(&self, stream: &Stream, offset: usize, len: usize) -> Result<PendingRead> {
        let (rt, stream) = stream_runtime(stream)?;
        same_device(self.device, stream.device())?;
        check_range("read", self.len, offset, len)?;
        let inner = ops::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy device->host"),
            Detail::Bytes(len as u64),
            || rt.read(&stream, &self.handle, offset, len),
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
        same_device(self.device, stream.device())?;
        if src.device != self.device && !rt.can_copy_between(src.device, self.device) {
            return Err(Error::DeviceMismatch {
                first: self.device,
                second: src.device,
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
        ops::enqueue(
            &stream,
            SpanKind::Copy,
            || Cow::Borrowed("copy device->device"),
            Detail::Bytes(len as u64),
            || {
                rt.copy(
                    &stream,
                    &src.handle,
                    src_offset,
                    &self.handle,
                    dst_offset,
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
        let out = Buffer::new(device, self.len)?;
        let direct = device.device_type() == self.device.device_type()
            && (device == self.device || rt.can_copy_between(self.device, device));
        if direct {
            out.copy_from(&stream, self, 0, 0, self.len)?;
        } else {
            let src_stream = crate::api::current_stream(self.device)?;
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
