//! [`DeviceRuntime`]: what c10 leaves to ATen (properties, memory, copies,
//! kernels), as one trait per backend.
//!
//! The public [`Buffer`](crate::Buffer) and [`Stream`] methods check every
//! argument (same device, ranges in bounds, a source for this backend)
//! before calling a runtime, so implementations receive only well-formed
//! requests, on concrete devices.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::DeviceProperties;
use crate::core::{Device, Stream};
use crate::error::Result;
use crate::kernel::Kernel;

/// A backend's device memory: whatever the backend allocated, shared so
/// that work in flight can keep it alive. Dropping the last clone frees it.
#[derive(Clone)]
pub struct BufferHandle(Arc<dyn Any + Send + Sync>);

impl BufferHandle {
    /// Wraps a backend's allocation.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        BufferHandle(Arc::new(value))
    }

    /// The backend's allocation, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }

    /// Whether `other` is a handle to the same allocation.
    pub fn ptr_eq(&self, other: &BufferHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A shared handle to the backend's allocation, if it is a `T` (to keep
    /// it alive in work that runs later).
    #[inline]
    pub fn downcast_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        Arc::clone(&self.0).downcast().ok()
    }
}

impl fmt::Debug for BufferHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BufferHandle(..)")
    }
}

/// A byte range of a backend allocation, as a kernel binds it: a
/// [`Buffer`](crate::Buffer) is a block of a larger allocation (the caching
/// allocator's segment), so launches bind `len` bytes at `offset` of
/// `handle`. Offsets are multiples of 512 bytes, which covers every
/// device's storage buffer offset alignment Keel accepts.
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a> {
    /// The backend's allocation.
    pub handle: &'a BufferHandle,
    /// Where the range starts, in bytes.
    pub offset: usize,
    /// Its length in bytes (may be 0).
    pub len: usize,
}

/// Data being copied from a device to the host.
pub trait Readback: Send {
    /// Whether the data has arrived. Never blocks.
    fn is_ready(&self) -> Result<bool>;
    /// Waits for the data and returns it.
    fn wait(self: Box<Self>) -> Result<Vec<u8>>;

    /// Waits for the data and copies it into `dst`, whose length the
    /// caller has checked against the read's. Default: through
    /// [`wait`](Self::wait); backends with mapped staging memory copy
    /// straight from it.
    fn wait_into(self: Box<Self>, dst: &mut [u8]) -> Result<()> {
        let data = self.wait()?;
        dst.copy_from_slice(&data);
        Ok(())
    }
}

/// A backend's memory, copy and kernel operations. Every operation that
/// takes a stream only enqueues work on it (unless the stream runs inline).
pub trait DeviceRuntime: Send + Sync + 'static {
    /// What `device` (a concrete index) is and can do.
    fn properties(&self, device: Device) -> Result<DeviceProperties>;

    /// `len` bytes of device memory on `device`, zeroed. Running out of
    /// memory is [`Error::OutOfMemory`](crate::Error::OutOfMemory).
    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle>;

    /// Host to device: enqueues writing `data` at `offset` of `dst`.
    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()>;

    /// Host to device from borrowed bytes (copied before returning).
    /// Default: an owned copy through [`write`](Self::write); backends
    /// that stage through mapped memory copy straight into it.
    fn write_slice(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        self.write(stream, dst, offset, data.to_vec())
    }

    /// Device to host: enqueues reading `len` bytes at `offset` of `src`.
    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>>;

    /// Device to device: enqueues copying `len` bytes. `src` lives on a
    /// device for which [`can_copy_between`](Self::can_copy_between)
    /// returned true; `dst` lives on the stream's device.
    #[allow(clippy::too_many_arguments)]
    fn copy(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        src_offset: usize,
        dst: &BufferHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Enqueues `kernel` over `grid` workgroups, with the ranges `buffers`
    /// bound in order and `params` as its small parameter block. Two
    /// bindings may be ranges of one allocation; a backend that cannot bind
    /// overlapping ranges refuses them.
    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[BufferView<'_>],
        params: &[u8],
    ) -> Result<()>;

    /// Whether [`copy`](Self::copy) can read from `src` while running on
    /// `dst` (same device, or peer access). Otherwise data moves through
    /// host memory.
    fn can_copy_between(&self, src: Device, dst: Device) -> bool {
        src == dst
    }
}
