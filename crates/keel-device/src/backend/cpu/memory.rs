//! Host memory (a zeroed, 8-byte aligned block per buffer) and the copies
//! and readbacks host streams run on it.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::stream::{HostStream, lock};
use super::{HostBackend, HostDevice};
use crate::backend::Readback;
use crate::backend::typed::Memory;
use crate::core::Device;
use crate::error::{Error, Result};

/// Host memory for a host-thread device: a zeroed, 8-byte aligned block.
pub struct HostMemory {
    pub(super) words: Mutex<Vec<u64>>,
    len: usize,
}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostMemory({} bytes)", self.len)
    }
}

impl HostMemory {
    /// `len` zeroed bytes; `None` when the host cannot provide them.
    pub fn alloc(len: usize) -> Option<Self> {
        let words = len.div_ceil(8);
        let mut v = Vec::new();
        v.try_reserve_exact(words).ok()?;
        v.resize(words, 0u64);
        Some(HostMemory {
            words: Mutex::new(v),
            len,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the bytes are. The block never moves or grows while it
    /// lives, so the address stays valid until it is dropped; Keel's own
    /// accesses take the block's lock, a program's through this pointer
    /// (interop, DLPack) do not, and must not overlap Keel's work on it.
    pub fn as_ptr(&self) -> *mut u8 {
        lock(&self.words).as_mut_ptr().cast()
    }

    /// Runs `f` on the bytes.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut w = lock(&self.words);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut w[..]);
        f(&mut bytes[..self.len])
    }
}

/// Enqueues a host-to-device write.
pub fn enqueue_write(
    stream: &HostStream,
    dst: Arc<HostMemory>,
    offset: usize,
    data: Vec<u8>,
) -> Result<()> {
    stream.submit(Box::new(move || {
        dst.with_bytes(|b| b[offset..offset + data.len()].copy_from_slice(&data));
        Ok(())
    }))
}

/// Enqueues a device-to-device copy of `len` bytes from `(src, offset)` to
/// `(dst, offset)`. The same block may be both ends (with ranges that do
/// not overlap, as [`Buffer::copy_from`](crate::Buffer::copy_from)
/// requires).
pub fn enqueue_copy(
    stream: &HostStream,
    (src, src_offset): (&Arc<HostMemory>, usize),
    (dst, dst_offset): (&Arc<HostMemory>, usize),
    len: usize,
) -> Result<()> {
    let (src, dst) = (Arc::clone(src), Arc::clone(dst));
    stream.submit(Box::new(move || {
        if Arc::ptr_eq(&src, &dst) {
            dst.with_bytes(|b| b.copy_within(src_offset..src_offset + len, dst_offset));
        } else {
            // Copy out first so the two locks are never held together.
            let tmp = src.with_bytes(|b| b[src_offset..src_offset + len].to_vec());
            dst.with_bytes(|b| b[dst_offset..dst_offset + len].copy_from_slice(&tmp));
        }
        Ok(())
    }))
}

type Slot = Arc<(Mutex<Option<Vec<u8>>>, Condvar)>;

struct HostReadback {
    slot: Slot,
    stream: HostStream,
}

impl Readback for HostReadback {
    fn is_ready(&self) -> Result<bool> {
        Ok(lock(&self.slot.0).is_some())
    }
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        let (m, cv) = &*self.slot;
        let mut data = lock(m);
        loop {
            if let Some(d) = data.take() {
                return Ok(d);
            }
            if self.stream.is_inline() {
                return Err(Error::invalid("host readback never ran"));
            }
            data = cv.wait(data).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Enqueues a device-to-host read of `len` bytes at `offset`.
pub fn enqueue_read(
    stream: &HostStream,
    src: Arc<HostMemory>,
    offset: usize,
    len: usize,
) -> Result<Box<dyn Readback>> {
    let slot: Slot = Arc::default();
    let out = Arc::clone(&slot);
    stream.submit(Box::new(move || {
        let data = src.with_bytes(|b| b[offset..offset + len].to_vec());
        *lock(&out.0) = Some(data);
        out.1.notify_all();
        Ok(())
    }))?;
    Ok(Box::new(HostReadback {
        slot,
        stream: stream.clone(),
    }))
}

impl<B: HostBackend> Memory for B {
    type Buffer = HostMemory;
    /// A kernel locks each host allocation it binds for its whole run.
    const EXCLUSIVE_ALLOCATIONS: bool = true;

    fn allocate(&self, _device: &'static HostDevice, at: Device, len: usize) -> Result<HostMemory> {
        HostMemory::alloc(len).ok_or(Error::OutOfMemory {
            device: at,
            requested: len as u64,
            detail: String::new(),
        })
    }
    fn enqueue_write(
        &self,
        stream: &'static HostStream,
        dst: &Arc<HostMemory>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        enqueue_write(stream, Arc::clone(dst), offset, data)
    }
    fn enqueue_read(
        &self,
        stream: &'static HostStream,
        src: &Arc<HostMemory>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        enqueue_read(stream, Arc::clone(src), offset, len)
    }
    fn enqueue_copy(
        &self,
        stream: &'static HostStream,
        src: (&Arc<HostMemory>, usize),
        dst: (&Arc<HostMemory>, usize),
        len: usize,
    ) -> Result<()> {
        enqueue_copy(stream, src, dst, len)
    }
    fn peer_copy(&self, src: Device, dst: Device) -> bool {
        self.host_peer_copy(src, dst)
    }
}
