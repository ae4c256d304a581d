//! Device buffers, pinned host staging, copies and readbacks.
//!
//! - Device memory comes from the device's memory pool, stream-ordered
//!   (`cuMemAllocAsync` on the context's side stream), where the device
//!   supports pools, and from `cuMemAlloc` otherwise. New memory is zeroed
//!   on the side stream, which is then synchronised, so every stream may
//!   use the buffer at once.
//! - A buffer remembers every stream it was used on. Dropping it frees the
//!   memory only after that work: stream-ordered (`cuMemFreeAsync` on the
//!   side stream after waiting on an event recorded on each such stream),
//!   or, without pools, after synchronising those streams.
//! - Host to device copies go through pinned host memory that stays
//!   reserved until an event recorded after the copy completes; device to
//!   host copies land in pinned memory and a [`CudaReadback`] waits on an
//!   event recorded after the copy.
//! - Device to device copies run on the destination's stream, within a
//!   device or from a peer (`cuMemcpyPeerAsync`).

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUresult};

use super::device::{Ctx, poisoned};
use super::event::RawEvent;
use super::loader::{call, cuda_error, status};
use super::stream::{CudaStream, RawStream};
use super::{Cuda, TY, enable_peer_access};
use crate::backend::Readback;
use crate::backend::typed::Memory;
use crate::core::Device;
use crate::error::{Error, Result};

/// Pinned host memory from `cuMemHostAlloc`.
#[derive(Debug)]
pub(super) struct Pinned {
    ptr: *mut u8,
    cap: usize,
}
// SAFETY: pinned host memory is plain memory; access is serialised by its
// owner (the staging pool's mutex or the one copy using it).
unsafe impl Send for Pinned {}

/// Bytes of idle pinned memory a device keeps for reuse.
const KEEP_IDLE_PINNED: usize = 256 << 20;

fn take_pinned(c: &Ctx, len: usize) -> Result<Pinned> {
    let mut pool = c.pinned.lock().map_err(|_| poisoned())?;
    for (_, busy) in pool.iter_mut() {
        if let Some(e) = *busy
            && e.query()?
        {
            c.events.give(false, e);
            *busy = None;
        }
    }
    let best = pool
        .iter()
        .enumerate()
        .filter(|(_, (p, busy))| busy.is_none() && p.cap >= len)
        .min_by_key(|(_, (p, _))| p.cap)
        .map(|(i, _)| i);
    if let Some(i) = best {
        return Ok(pool.swap_remove(i).0);
    }
    drop(pool);
    let cap = len.max(4096).next_power_of_two();
    let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer to `cap` bytes of pinned memory; a
    // context is current. Portable: usable from every context.
    let r = status("cuMemHostAlloc", || unsafe {
        sys::cuMemHostAlloc(&mut ptr, cap, sys::CU_MEMHOSTALLOC_PORTABLE)
    })?;
    match r {
        CUresult::CUDA_SUCCESS => Ok(Pinned {
            ptr: ptr.cast(),
            cap,
        }),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory {
            device: Device::cpu(),
            requested: cap as u64,
            detail: String::new(),
        }),
        r => Err(cuda_error("cuMemHostAlloc", r)),
    }
}

/// Returns pinned memory to the device's pool, busy until `busy` (if
/// any) completes. Frees idle memory beyond [`KEEP_IDLE_PINNED`].
fn give_pinned(c: &Ctx, p: Pinned, busy: Option<RawEvent>) {
    let Ok(mut pool) = c.pinned.lock() else {
        return;
    };
    pool.push((p, busy));
    let mut idle: usize = pool
        .iter()
        .filter(|(_, b)| b.is_none())
        .map(|(p, _)| p.cap)
        .sum();
    while idle > KEEP_IDLE_PINNED {
        let Some(i) = pool.iter().position(|(_, b)| b.is_none()) else {
            break;
        };
        let (p, _) = pool.swap_remove(i);
        idle -= p.cap;
        // SAFETY: no copy uses `p` (it is idle); it came from cuMemHostAlloc.
        let _ = call("cuMemFreeHost", || unsafe {
            sys::cuMemFreeHost(p.ptr.cast())
        });
    }
}

/// Device memory of one CUDA device.
pub struct CudaBuffer {
    ctx: &'static Ctx,
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) len: usize,
    stream_ordered: bool,
    /// Streams that used this buffer.
    used: Mutex<Vec<CudaStream>>,
    /// Whether Keel allocated the memory (a program's, adopted, is never
    /// freed by Keel).
    owned: bool,
    /// What keeps an adopted allocation alive, where the program handed
    /// Keel its owner (a DLPack tensor).
    _owner: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({} bytes on cuda:{})",
            self.len, self.ctx.index
        )
    }
}

impl CudaBuffer {
    /// The program's `len` bytes at `ptr` on `ctx`'s device, which Keel
    /// uses but never frees.
    pub(super) fn foreign(
        ctx: &'static Ctx,
        ptr: sys::CUdeviceptr,
        len: usize,
        owner: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        CudaBuffer {
            ctx,
            ptr,
            len,
            stream_ordered: false,
            used: Mutex::new(Vec::new()),
            owned: false,
            _owner: owner,
        }
    }

    /// Notes that work on `stream` uses this buffer (c10's
    /// `recordDataPtrOnStream`).
    pub(super) fn used_on(&self, stream: CudaStream) -> Result<()> {
        let mut used = self.used.lock().map_err(|_| poisoned())?;
        if !used
            .iter()
            .any(|u| std::ptr::eq(u.ctx, stream.ctx) && u.raw == stream.raw)
        {
            used.push(stream);
        }
        Ok(())
    }

    fn free(&mut self) -> Result<()> {
        let c = self.ctx;
        let _scope = c.scope()?;
        let used = std::mem::take(&mut *self.used.lock().map_err(|_| poisoned())?);
        for s in used {
            if self.stream_ordered && std::ptr::eq(s.ctx, c) {
                // The side stream waits for the stream's work, then frees.
                let e = c.events.mark(s.raw)?;
                let r = c.side.wait(e);
                c.events.give(false, e);
                r?;
            } else {
                // Plain memory, or a peer copy's stream on another
                // device: wait on the host.
                s.synchronize()?;
            }
        }
        let ptr = self.ptr;
        if self.stream_ordered {
            // SAFETY: `ptr` came from cuMemAllocAsync; the free is ordered
            // after every use recorded above.
            call("cuMemFreeAsync", || unsafe {
                sys::cuMemFreeAsync(ptr, c.side.0)
            })
        } else {
            // SAFETY: `ptr` came from cuMemAlloc; no work uses it any more.
            call("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) })
        }
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && self.owned {
            // Nothing can report an error from a destructor.
            let _ = self.free();
        }
    }
}

/// Runs `copy`, which enqueues a copy on `stream` through `p`, and
/// returns `p` with an event marking the copy's end. On failure `p` goes
/// back to the pool, once the copy (if enqueued) has run.
fn staged(
    c: &Ctx,
    stream: RawStream,
    p: Pinned,
    copy: impl FnOnce(&Pinned) -> Result<()>,
) -> Result<(Pinned, RawEvent)> {
    let done = copy(&p).and_then(|()| {
        c.events.mark(stream).inspect_err(|_| {
            // Cannot tell when the copy ends: wait for it before reuse.
            let _ = stream.synchronize();
        })
    });
    match done {
        Ok(e) => Ok((p, e)),
        Err(e) => {
            give_pinned(c, p, None);
            Err(e)
        }
    }
}

/// A device to host copy in flight: pinned memory and the event after it.
pub(super) struct CudaReadback {
    ctx: &'static Ctx,
    pinned: Option<Pinned>,
    done: Option<RawEvent>,
    len: usize,
}

impl Readback for CudaReadback {
    fn is_ready(&self) -> Result<bool> {
        let Some(e) = self.done else { return Ok(true) };
        let _scope = self.ctx.scope()?;
        e.query()
    }

    fn wait(mut self: Box<Self>) -> Result<Vec<u8>> {
        let (Some(p), Some(e)) = (self.pinned.take(), self.done.take()) else {
            return Ok(Vec::new());
        };
        let c = self.ctx;
        let _scope = c.scope()?;
        if let Err(err) = e.synchronize() {
            give_pinned(c, p, Some(e));
            return Err(err);
        }
        // SAFETY: the copy into `p` has completed; `p` holds `len` bytes.
        let out = unsafe { std::slice::from_raw_parts(p.ptr, self.len) }.to_vec();
        c.events.give(false, e);
        give_pinned(c, p, None);
        Ok(out)
    }
}

impl Drop for CudaReadback {
    fn drop(&mut self) {
        // Dropped unread: the pinned memory stays busy until the copy ends.
        if let Some(p) = self.pinned.take() {
            // The scope lets the pool free idle memory; without it the
            // memory is only kept longer.
            let _scope = self.ctx.scope();
            give_pinned(self.ctx, p, self.done.take());
        }
    }
}

impl Memory for Cuda {
    type Buffer = CudaBuffer;

    fn allocate(&self, c: &'static Ctx, _at: Device, len: usize) -> Result<CudaBuffer> {
        let mut buf = CudaBuffer {
            ctx: c,
            ptr: 0,
            len,
            stream_ordered: c.info.memory_pools,
            used: Mutex::new(Vec::new()),
            owned: true,
            _owner: None,
        };
        if len == 0 {
            return Ok(buf);
        }
        let _scope = c.scope()?;
        let side = c.side;
        let mut ptr: sys::CUdeviceptr = 0;
        let (what, r) = if buf.stream_ordered {
            // SAFETY: writes one device pointer; the side stream belongs to
            // the current context.
            let r = status("cuMemAllocAsync", || unsafe {
                sys::cuMemAllocAsync(&mut ptr, len, side.0)
            })?;
            ("cuMemAllocAsync", r)
        } else {
            // SAFETY: writes one device pointer; a context is current.
            let r = status("cuMemAlloc", || unsafe {
                sys::cuMemAlloc_v2(&mut ptr, len)
            })?;
            ("cuMemAlloc", r)
        };
        match r {
            CUresult::CUDA_SUCCESS => buf.ptr = ptr,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                return Err(Error::OutOfMemory {
                    device: Device::new(TY, c.index)?,
                    requested: len as u64,
                    detail: String::new(),
                });
            }
            r => return Err(cuda_error(what, r)),
        }
        // From here on `buf` owns the memory; dropping it frees it.
        // SAFETY: `ptr` holds `len` bytes, ordered after its allocation on
        // the side stream.
        call("cuMemsetD8Async", || unsafe {
            sys::cuMemsetD8Async(buf.ptr, 0, len, side.0)
        })?;
        side.synchronize()?;
        Ok(buf)
    }

    /// Host to device, through pinned staging memory.
    fn enqueue_write(
        &self,
        stream: CudaStream,
        dst: &Arc<CudaBuffer>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        let c = stream.ctx;
        let _scope = c.scope()?;
        let p = take_pinned(c, data.len())?;
        // SAFETY: `p` holds at least `data.len()` bytes and nothing else uses
        // it (taken from the pool, not busy).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.ptr, data.len()) };
        dst.used_on(stream)?;
        let (to, len, s) = (dst.ptr + offset as u64, data.len(), stream.raw);
        let (p, done) = staged(c, s, p, |p| {
            // SAFETY: the range is inside `dst` (checked by `Buffer::write`);
            // `p` stays reserved until the event marking the copy's end.
            call("cuMemcpyHtoDAsync", || unsafe {
                sys::cuMemcpyHtoDAsync_v2(to, p.ptr.cast(), len, s.0)
            })
        })?;
        give_pinned(c, p, Some(done));
        Ok(())
    }

    /// Device to host, into pinned memory the readback owns.
    fn enqueue_read(
        &self,
        stream: CudaStream,
        src: &Arc<CudaBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let c = stream.ctx;
        let _scope = c.scope()?;
        let p = take_pinned(c, len)?;
        src.used_on(stream)?;
        let (from, s) = (src.ptr + offset as u64, stream.raw);
        let (p, done) = staged(c, s, p, |p| {
            // SAFETY: the range is inside `src` (checked by
            // `Buffer::read_async`); `p` holds at least `len` bytes and is owned
            // by the readback until the event marking the copy's end.
            call("cuMemcpyDtoHAsync", || unsafe {
                sys::cuMemcpyDtoHAsync_v2(p.ptr.cast(), from, len, s.0)
            })
        })?;
        Ok(Box::new(CudaReadback {
            ctx: c,
            pinned: Some(p),
            done: Some(done),
            len,
        }))
    }

    /// On `stream` (of the destination's device): within a device, or from
    /// a peer device.
    fn enqueue_copy(
        &self,
        stream: CudaStream,
        (src, src_offset): (&Arc<CudaBuffer>, usize),
        (dst, dst_offset): (&Arc<CudaBuffer>, usize),
        len: usize,
    ) -> Result<()> {
        let _scope = stream.ctx.scope()?;
        src.used_on(stream)?;
        dst.used_on(stream)?;
        let (s, d, raw) = (
            src.ptr + src_offset as u64,
            dst.ptr + dst_offset as u64,
            stream.raw.0,
        );
        if std::ptr::eq(src.ctx, dst.ctx) {
            // SAFETY: both ranges are inside their buffers and, within one
            // buffer, do not overlap (checked by `Buffer::copy_from`); the
            // stream is this context's.
            call("cuMemcpyDtoDAsync", || unsafe {
                sys::cuMemcpyDtoDAsync_v2(d, s, len, raw)
            })
        } else {
            let (dc, sc) = (dst.ctx.raw(), src.ctx.raw());
            // SAFETY: as above, across two live contexts (peer access enabled
            // by `peer_copy`; the driver stages through the host if not).
            call("cuMemcpyPeerAsync", || unsafe {
                sys::cuMemcpyPeerAsync(d, dc, s, sc, len, raw)
            })
        }
    }

    /// Within a device, or between two CUDA devices once peer access is
    /// enabled (enabled here where they can be peers).
    fn peer_copy(&self, src: Device, dst: Device) -> bool {
        src == dst
            || (src.device_type() == TY
                && dst.device_type() == TY
                && enable_peer_access(dst, src).is_ok())
    }

    fn buffer_used_on(&self, buffer: &Arc<CudaBuffer>, stream: CudaStream) -> Result<()> {
        buffer.used_on(stream)
    }
}
