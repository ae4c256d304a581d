//! Device buffers, pinned host staging, and readbacks.
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

use std::sync::Mutex;

use cudarc::driver::sys::{self, CUresult};

use super::device::{Ctx, RawEvent, RawStream, poisoned};
use super::driver::{call, ready, status};
use crate::backend::Readback;
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
        if let Some(e) = *busy {
            // SAFETY: `e` is a live event of this device.
            if ready("cuEventQuery", || unsafe { sys::cuEventQuery(e.0) })? {
                c.give_event(false, e);
                *busy = None;
            }
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
        }),
        r => Err(super::driver::cuda_error("cuMemHostAlloc", r)),
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
pub(super) struct CudaBuffer {
    pub ctx: &'static Ctx,
    pub ptr: sys::CUdeviceptr,
    pub len: usize,
    stream_ordered: bool,
    /// Streams that used this buffer, with their contexts.
    used: Mutex<Vec<(&'static Ctx, RawStream)>>,
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
    /// `len` zeroed bytes on `c`'s device.
    pub fn new(c: &'static Ctx, len: usize) -> Result<CudaBuffer> {
        let mut buf = CudaBuffer {
            ctx: c,
            ptr: 0,
            len,
            stream_ordered: c.info.memory_pools,
            used: Mutex::new(Vec::new()),
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
                    device: Device::new(super::TY, c.index)?,
                    requested: len as u64,
                });
            }
            r => return Err(super::driver::cuda_error(what, r)),
        }
        // From here on `buf` owns the memory; dropping it frees it.
        // SAFETY: `ptr` holds `len` bytes, ordered after its allocation on
        // the side stream.
        call("cuMemsetD8Async", || unsafe {
            sys::cuMemsetD8Async(buf.ptr, 0, len, side.0)
        })?;
        // SAFETY: the side stream is a live stream of this context.
        call("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(side.0)
        })?;
        Ok(buf)
    }

    /// Notes that work on `stream` (of `c`) uses this buffer.
    pub fn used_on(&self, c: &'static Ctx, stream: RawStream) -> Result<()> {
        let mut used = self.used.lock().map_err(|_| poisoned())?;
        if !used
            .iter()
            .any(|(uc, s)| std::ptr::eq(*uc, c) && *s == stream)
        {
            used.push((c, stream));
        }
        Ok(())
    }

    fn free(&mut self) -> Result<()> {
        let c = self.ctx;
        let _scope = c.scope()?;
        let used = std::mem::take(&mut *self.used.lock().map_err(|_| poisoned())?);
        let ptr = self.ptr;
        if self.stream_ordered {
            for (uc, s) in used {
                if std::ptr::eq(uc, c) {
                    let e = c.mark(s)?;
                    // SAFETY: the side stream and `e` belong to this context.
                    let r = call("cuStreamWaitEvent", || unsafe {
                        sys::cuStreamWaitEvent(c.side.0, e.0, 0)
                    });
                    c.give_event(false, e);
                    r?;
                } else {
                    // A peer copy's stream on another device: wait on the host.
                    let _other = uc.scope()?;
                    // SAFETY: a live stream of `uc`, whose context is current.
                    call("cuStreamSynchronize", || unsafe {
                        sys::cuStreamSynchronize(s.0)
                    })?;
                }
            }
            // SAFETY: `ptr` came from cuMemAllocAsync; the free is ordered
            // after every use recorded above.
            call("cuMemFreeAsync", || unsafe {
                sys::cuMemFreeAsync(ptr, c.side.0)
            })
        } else {
            for (uc, s) in used {
                let _other = uc.scope()?;
                // SAFETY: a live stream of `uc`, whose context is current.
                call("cuStreamSynchronize", || unsafe {
                    sys::cuStreamSynchronize(s.0)
                })?;
            }
            // SAFETY: `ptr` came from cuMemAlloc; no work uses it any more.
            call("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) })
        }
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // Nothing can report an error from a destructor.
            let _ = self.free();
        }
    }
}

/// Host to device: enqueues copying `data` to `dst + offset` on `stream`.
pub(super) fn write(
    c: &'static Ctx,
    stream: RawStream,
    dst: &CudaBuffer,
    offset: usize,
    data: &[u8],
) -> Result<()> {
    let _scope = c.scope()?;
    let p = take_pinned(c, data.len())?;
    // SAFETY: `p` holds at least `data.len()` bytes and nothing else uses
    // it (taken from the pool, not busy).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.ptr, data.len()) };
    dst.used_on(c, stream)?;
    // SAFETY: the range is inside `dst` (checked by `Buffer::write`); `p`
    // stays reserved until the event recorded below completes.
    let copied = call("cuMemcpyHtoDAsync", || unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst.ptr + offset as u64, p.ptr.cast(), data.len(), stream.0)
    });
    if let Err(e) = copied {
        give_pinned(c, p, None);
        return Err(e);
    }
    match c.mark(stream) {
        Ok(done) => give_pinned(c, p, Some(done)),
        Err(e) => {
            // Cannot tell when the copy ends: wait for it before reuse.
            // SAFETY: a live stream of the current context.
            let _ = call("cuStreamSynchronize", || unsafe {
                sys::cuStreamSynchronize(stream.0)
            });
            give_pinned(c, p, None);
            return Err(e);
        }
    }
    Ok(())
}

/// Device to host: enqueues copying `len` bytes at `src + offset`.
pub(super) fn read(
    c: &'static Ctx,
    stream: RawStream,
    src: &CudaBuffer,
    offset: usize,
    len: usize,
) -> Result<Box<dyn Readback>> {
    if len == 0 {
        return Ok(Box::new(CudaReadback {
            ctx: c,
            pinned: None,
            done: None,
            len: 0,
        }));
    }
    let _scope = c.scope()?;
    let p = take_pinned(c, len)?;
    src.used_on(c, stream)?;
    // SAFETY: the range is inside `src` (checked by `Buffer::read_async`);
    // `p` holds at least `len` bytes and is owned by the readback until the
    // event recorded below completes.
    let copied = call("cuMemcpyDtoHAsync", || unsafe {
        sys::cuMemcpyDtoHAsync_v2(p.ptr.cast(), src.ptr + offset as u64, len, stream.0)
    });
    if let Err(e) = copied {
        give_pinned(c, p, None);
        return Err(e);
    }
    let done = match c.mark(stream) {
        Ok(e) => e,
        Err(e) => {
            // SAFETY: a live stream of the current context.
            let _ = call("cuStreamSynchronize", || unsafe {
                sys::cuStreamSynchronize(stream.0)
            });
            give_pinned(c, p, None);
            return Err(e);
        }
    };
    Ok(Box::new(CudaReadback {
        ctx: c,
        pinned: Some(p),
        done: Some(done),
        len,
    }))
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
        // SAFETY: a live event of this context.
        ready("cuEventQuery", || unsafe { sys::cuEventQuery(e.0) })
    }

    fn wait(mut self: Box<Self>) -> Result<Vec<u8>> {
        let (Some(p), Some(e)) = (self.pinned.take(), self.done.take()) else {
            return Ok(Vec::new());
        };
        let c = self.ctx;
        let _scope = c.scope()?;
        // SAFETY: a live event of this context.
        if let Err(err) = call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(e.0)
        }) {
            give_pinned(c, p, Some(e));
            return Err(err);
        }
        // SAFETY: the copy into `p` has completed; `p` holds `len` bytes.
        let out = unsafe { std::slice::from_raw_parts(p.ptr, self.len) }.to_vec();
        c.give_event(false, e);
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

/// Device to device on `stream` (of `c`, the destination's device):
/// within a device, or from a peer device.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy(
    c: &'static Ctx,
    stream: RawStream,
    src: &CudaBuffer,
    src_offset: usize,
    dst: &CudaBuffer,
    dst_offset: usize,
    len: usize,
) -> Result<()> {
    if std::ptr::eq(src, dst) {
        let (a, b) = (src_offset, dst_offset);
        if a < b + len && b < a + len {
            return Err(Error::invalid(format!(
                "copy within one buffer: expected non-overlapping ranges, found {a}..{} and {b}..{}",
                a + len,
                b + len
            )));
        }
    }
    let _scope = c.scope()?;
    src.used_on(c, stream)?;
    dst.used_on(c, stream)?;
    let (s, d) = (src.ptr + src_offset as u64, dst.ptr + dst_offset as u64);
    if std::ptr::eq(src.ctx, dst.ctx) {
        // SAFETY: both ranges are inside their buffers (checked by
        // `Buffer::copy_from`) and do not overlap; the stream is this
        // context's.
        call("cuMemcpyDtoDAsync", || unsafe {
            sys::cuMemcpyDtoDAsync_v2(d, s, len, stream.0)
        })
    } else {
        let (dc, sc) = (dst.ctx.raw.0, src.ctx.raw.0);
        // SAFETY: as above, across two live contexts (peer access enabled
        // by `can_copy_between`; the driver stages through the host if not).
        call("cuMemcpyPeerAsync", || unsafe {
            sys::cuMemcpyPeerAsync(d, dc, s, sc, len, stream.0)
        })
    }
}
