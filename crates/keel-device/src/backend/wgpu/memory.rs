//! Buffers (`wgpu::Buffer`, sized up to a multiple of 4), uploads, copies
//! and readbacks.
//!
//! wgpu copies whole 4-byte words only: a copy whose offsets or size are
//! not multiples of 4 runs the `copy_bytes` kernel
//! (`shaders/copy_bytes.wgsl`) instead of `copy_buffer_to_buffer`. A copy
//! within one buffer goes through a temporary buffer (wgpu cannot read and
//! write one buffer in one copy). Readbacks copy whole words into a
//! mappable buffer and copy the requested bytes out of its mapping once.
//! Mappable buffers are kept for the next transfer ([`StagingPool`]).

use std::fmt;
use std::sync::{Arc, Mutex};

use super::device::{GlContextLock, WgpuDevice, lock};
use super::kernel::{Group, pipeline, record_dispatch};
use super::stream::{Point, QueueStream};
use super::{TY, Wgpu};
use crate::backend::Readback;
use crate::backend::typed::Memory;
use crate::core::Device;
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// A wgpu buffer; `size` is the user's size, the wgpu buffer is rounded
/// up to a multiple of 4 (at least 4).
pub struct WgpuBuffer {
    buffer: wgpu::Buffer,
    size: u64,
    /// The device's GL context lock, to free the buffer under.
    gl: &'static GlContextLock,
    /// Whether Keel made the buffer (a program's buffer, adopted, is
    /// never destroyed by Keel).
    owned: bool,
}

impl Drop for WgpuBuffer {
    /// Frees the buffer's memory now (once no submission uses it), on GL
    /// under the shared GL context lock (Note [GL context lock]); cached
    /// bind groups may still hold the wgpu object (Note [wgpu parameter
    /// blocks]). A program's buffer only loses Keel's reference, under
    /// the same lock (it may be the last one).
    fn drop(&mut self) {
        let _shared = self.gl.shared();
        if self.owned {
            self.buffer.destroy();
        }
    }
}

impl fmt::Debug for WgpuBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WgpuBuffer({} bytes)", self.size)
    }
}

impl WgpuBuffer {
    /// The wgpu buffer.
    pub(crate) fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// A program's buffer on `device`, which Keel binds and copies but
    /// never destroys. It must allow what Keel does with its own
    /// buffers: storage bindings and copies both ways.
    pub(crate) fn foreign(device: &'static WgpuDevice, buffer: wgpu::Buffer) -> Result<Self> {
        let usage = buffer.usage();
        if !usage.contains(DEVICE_BUFFER) {
            return Err(Error::invalid(format!(
                "a wgpu buffer for Keel: expected usages {DEVICE_BUFFER:?}, found {usage:?}"
            )));
        }
        Ok(WgpuBuffer {
            size: buffer.size(),
            buffer,
            gl: &device.gl,
            owned: false,
        })
    }

    /// The buffer's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

/// A wgpu buffer of at least `size` bytes (rounded up to a multiple of 4);
/// running out of memory is [`Error::OutOfMemory`].
pub(super) fn new_buffer(
    d: &WgpuDevice,
    size: u64,
    usage: wgpu::BufferUsages,
    mapped: bool,
) -> Result<wgpu::Buffer> {
    let padded = round4(size).max(4);
    let oom = || {
        Device::new(TY, d.index).map_or_else(
            |e| e,
            |device| Error::OutOfMemory {
                device,
                requested: size,
                detail: String::new(),
            },
        )
    };
    if padded > d.limits.max_buffer_size {
        return Err(oom());
    }
    let scope = d.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let shared = d.gl.shared();
    let buffer = d.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("keel"),
        size: padded,
        usage,
        mapped_at_creation: mapped,
    });
    drop(shared);
    if pollster::block_on(scope.pop()).is_some() {
        return Err(oom());
    }
    Ok(buffer)
}

const DEVICE_BUFFER: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// A host-visible source buffer holding `data` at byte `phase` (so that it
/// lines up with an unaligned destination offset), bindable to the
/// `copy_bytes` kernel.
fn staging_from(d: &WgpuDevice, data: &[u8], phase: usize) -> Result<wgpu::Buffer> {
    let b = new_buffer(
        d,
        (phase + data.len()) as u64,
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE,
        true,
    )?;
    // Mapped at creation, so zeroed around the data.
    let _shared = d.gl.shared();
    b.slice(..)
        .get_mapped_range_mut()
        .map_err(|e| Error::backend(TY, format!("mapping a staging buffer: {e}")))?
        .slice(phase..phase + data.len())
        .copy_from_slice(data);
    b.unmap();
    Ok(b)
}

/// The byte-copy kernel (`shaders/copy_bytes.wgsl`) for copies whose
/// offsets or size are not multiples of 4.
const COPY_BYTES: Kernel = Kernel {
    name: "copy_bytes",
    workgroup_size: [64, 1, 1],
    bindings: 2,
    wgsl: Some(include_str!("../../../shaders/copy_bytes.wgsl")),
    ptx: None,
    cpu: None,
    strict_float: false,
};

/// Records a copy of `len` bytes from `(src, src_offset)` to `(dst,
/// dst_offset)`, aligned or not. `src` and `dst` are different wgpu
/// buffers; `dst_size` is the user's size of `dst`.
fn record_copy(
    d: &WgpuDevice,
    enc: &mut wgpu::CommandEncoder,
    (src, src_offset): (&wgpu::Buffer, u64),
    (dst, dst_offset): (&wgpu::Buffer, u64),
    len: u64,
    dst_size: u64,
) -> Result<()> {
    let len4 = round4(len);
    // The rounded-up tail may only clobber the destination's padding.
    let aligned = src_offset.is_multiple_of(4)
        && dst_offset.is_multiple_of(4)
        && (len.is_multiple_of(4) || dst_offset + len == dst_size)
        && src_offset + len4 <= src.size()
        && dst_offset + len4 <= dst.size();
    if aligned {
        enc.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, len4);
        return Ok(());
    }
    let pipeline = pipeline(d, &COPY_BYTES)?;
    let words = (round4(dst_offset + len) - (dst_offset / 4) * 4) / 4;
    let groups = words.div_ceil(64);
    let max = u64::from(d.limits.max_compute_workgroups_per_dimension);
    let (x, y) = if groups <= max {
        (groups, 1)
    } else {
        (max, groups.div_ceil(max))
    };
    let row_words = (x * 64) as u32;
    let params: Vec<u8> = [src_offset as u32, dst_offset as u32, len as u32, row_words]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    record_dispatch(
        d,
        enc,
        &pipeline,
        [x as u32, y as u32, 1],
        &[(src, 0, src.size()), (dst, 0, dst.size())],
        &params,
        None,
        Group::Transient,
    )
}

/// Mappable buffers kept between transfers, per device and direction:
/// creating and first touching a 16 MiB mappable buffer costs several
/// times the copy it serves (on llvmpipe's GL about seven times:
/// docs/BENCHMARKS.md, "Re-run after the backend skeleton"). Sizes are
/// powers of two (at least [`StagingPool::MIN`]), so a buffer serves any
/// transfer that needs more than half of it; at most [`StagingPool::KEEP`]
/// bytes wait in a pool.
///
/// - Readbacks ([`StagingPool::readbacks`]) take an unmapped buffer, copy
///   into it, map it, and give it back unmapped ([`StagingPool::give`]).
/// - Uploads ([`StagingPool::uploads`]) take a buffer mapped for writing,
///   fill and unmap it, copy out of it, and hand it back right after the
///   submission ([`StagingPool::recycle`]): wgpu maps it again once that
///   submission has completed, at a later poll (the poll thread's, or the
///   next GL submission's), and only then is it ready. WebGPU lets a
///   `MAP_WRITE` buffer only be a copy source, so unaligned uploads, which
///   bind their source to the `copy_bytes` kernel, use [`staging_from`].
#[derive(Debug)]
pub(super) struct StagingPool {
    /// Buffers ready for a transfer (mapped for writing, for uploads).
    ready: Arc<Mutex<Vec<wgpu::Buffer>>>,
    usage: wgpu::BufferUsages,
    /// Whether a ready buffer is mapped (for writing).
    mapped: bool,
}

impl StagingPool {
    /// The smallest buffer made.
    const MIN: u64 = 4 << 10;
    /// The most bytes a pool keeps ready.
    const KEEP: u64 = 64 << 20;

    /// The pool of readback buffers.
    pub(super) fn readbacks() -> Self {
        StagingPool {
            ready: Arc::default(),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped: false,
        }
    }

    /// The pool of upload buffers.
    pub(super) fn uploads() -> Self {
        StagingPool {
            ready: Arc::default(),
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped: true,
        }
    }

    /// A ready buffer of at least `size` bytes.
    pub(super) fn take(&self, d: &WgpuDevice, size: u64) -> Result<wgpu::Buffer> {
        let class = size.max(Self::MIN).next_power_of_two();
        {
            let mut ready = lock(&self.ready);
            if let Some(i) = ready.iter().position(|b| b.size() == class) {
                return Ok(ready.swap_remove(i));
            }
        }
        // A size past the device's limit as a power of two is made exact
        // (and not kept).
        let size = if class > d.limits.max_buffer_size {
            size
        } else {
            class
        };
        new_buffer(d, size, self.usage, self.mapped)
    }

    /// Keeps `buffer`, ready, unless the pool is full.
    fn keep(ready: &Mutex<Vec<wgpu::Buffer>>, buffer: wgpu::Buffer) {
        let mut ready = lock(ready);
        let bytes: u64 = ready.iter().map(wgpu::Buffer::size).sum();
        if buffer.size().is_power_of_two() && bytes + buffer.size() <= Self::KEEP {
            ready.push(buffer);
        }
    }

    /// Gives back a readback buffer of `d`: unmapped, with no work pending
    /// on it (freed under the shared GL context lock if not kept).
    pub(super) fn give(&self, d: &WgpuDevice, buffer: wgpu::Buffer) {
        let _shared = d.gl.shared();
        Self::keep(&self.ready, buffer);
    }

    /// Hands back an upload buffer of `d` just submitted as a copy source:
    /// it is mapped for writing again once that copy has run, then kept.
    /// (`keep` runs in wgpu's callback, inside a poll or submission that
    /// holds the GL context lock exclusively: it must not take it.)
    fn recycle(&self, d: &WgpuDevice, buffer: wgpu::Buffer) {
        let _shared = d.gl.shared();
        if !buffer.size().is_power_of_two() {
            return;
        }
        let ready = Arc::clone(&self.ready);
        let kept = buffer.clone();
        buffer.slice(..).map_async(wgpu::MapMode::Write, move |r| {
            if r.is_ok() {
                Self::keep(&ready, kept);
            }
        });
    }
}

/// Maps the first `skip + len` bytes of `buffer` for reading after the
/// submission that made point `at` and copies bytes `skip..skip + len`
/// out. (Blocking waits, with no timeout: see Note [wgpu completion
/// tracking] in `stream.rs`.)
pub(super) fn map_read(
    at: &Point,
    buffer: &wgpu::Buffer,
    skip: usize,
    len: usize,
) -> Result<Vec<u8>> {
    let d = at.device();
    // Waiting for work and mapping (a copy on GL) can hold the GL context
    // long: Note [GL context lock].
    let _exclusive = d.gl.exclusive();
    let (tx, rx) = std::sync::mpsc::channel();
    let slice = buffer.slice(..round4((skip + len) as u64).max(4));
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    let wait = |index| {
        d.device
            .poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: None,
            })
            .map_err(|e| Error::backend(TY, format!("waiting for a readback: {e}")))
    };
    wait(at.index().cloned())?;
    loop {
        if let Ok(r) = rx.try_recv() {
            r.map_err(|e| Error::backend(TY, format!("mapping a readback buffer: {e}")))?;
            break;
        }
        wait(None)?;
    }
    let bytes = slice
        .get_mapped_range()
        .map_err(|e| Error::backend(TY, format!("reading a mapped buffer: {e}")))?
        [skip..skip + len]
        .to_vec();
    buffer.unmap();
    Ok(bytes)
}

/// A readback: the words around the requested bytes, copied into a
/// mappable buffer by submission `at` (nothing for an empty read).
struct WgpuReadback {
    pending: Option<(Point, wgpu::Buffer)>,
    skip: usize,
    len: usize,
}

impl Readback for WgpuReadback {
    fn is_ready(&self) -> Result<bool> {
        self.pending
            .as_ref()
            .map_or(Ok(true), |(at, _)| Ok(at.is_done()))
    }
    fn wait(mut self: Box<Self>) -> Result<Vec<u8>> {
        let Some((at, buffer)) = self.pending.take() else {
            return Ok(Vec::new());
        };
        let d = at.device();
        // No extra (empty) submission here: the readback's own submission
        // is what the mapping waits for.
        let bytes = at
            .wait()
            .and_then(|()| map_read(&at, &buffer, self.skip, self.len));
        if bytes.is_ok() {
            d.readbacks.give(d, buffer);
        } else {
            d.gl.release(buffer);
        }
        bytes
    }
}

impl Drop for WgpuReadback {
    /// A readback dropped unread frees its buffer under the shared GL
    /// context lock (Note [GL context lock]).
    fn drop(&mut self) {
        if let Some((at, buffer)) = self.pending.take() {
            at.device().gl.release(buffer);
        }
    }
}

impl Memory for Wgpu {
    type Buffer = WgpuBuffer;

    fn allocate(&self, device: &'static WgpuDevice, _at: Device, len: usize) -> Result<WgpuBuffer> {
        Ok(WgpuBuffer {
            buffer: new_buffer(device, len as u64, DEVICE_BUFFER, false)?,
            size: len as u64,
            gl: &device.gl,
            owned: true,
        })
    }

    fn enqueue_write(
        &self,
        stream: &'static QueueStream,
        dst: &Arc<WgpuBuffer>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        let d = stream.device();
        let len = data.len() as u64;
        if offset.is_multiple_of(4) && (len.is_multiple_of(4) || offset as u64 + len == dst.size) {
            // Whole words (the last one may end in the buffer's padding).
            let staging = d.uploads.take(d, round4(len))?;
            let shared = d.gl.shared();
            staging
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| Error::backend(TY, format!("mapping an upload buffer: {e}")))?
                .slice(..data.len())
                .copy_from_slice(&data);
            staging.unmap();
            drop(shared);
            let mut enc = d.encoder();
            enc.copy_buffer_to_buffer(&staging, 0, &dst.buffer, offset as u64, round4(len));
            let at = stream.submit(enc)?;
            d.uploads.recycle(d, staging);
            d.order.reap_gl(d, &at);
            return Ok(());
        }
        let phase = offset % 4;
        let staging = staging_from(d, &data, phase)?;
        let mut enc = d.encoder();
        record_copy(
            d,
            &mut enc,
            (&staging, phase as u64),
            (&dst.buffer, offset as u64),
            data.len() as u64,
            dst.size,
        )?;
        let at = stream.submit(enc)?;
        d.gl.release(staging);
        d.order.reap_gl(d, &at);
        Ok(())
    }

    /// Copies the words around the bytes into a mappable buffer.
    fn enqueue_read(
        &self,
        stream: &'static QueueStream,
        src: &Arc<WgpuBuffer>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let d = stream.device();
        let start = (offset as u64 / 4) * 4;
        let end = round4((offset + len) as u64);
        let buffer = d.readbacks.take(d, end - start)?;
        let mut enc = d.encoder();
        enc.copy_buffer_to_buffer(&src.buffer, start, &buffer, 0, end - start);
        let at = stream.submit(enc)?;
        Ok(Box::new(WgpuReadback {
            pending: Some((at, buffer)),
            skip: (offset as u64 - start) as usize,
            len,
        }))
    }

    /// A copy within one buffer goes through a temporary buffer.
    fn enqueue_copy(
        &self,
        stream: &'static QueueStream,
        (src, src_offset): (&Arc<WgpuBuffer>, usize),
        (dst, dst_offset): (&Arc<WgpuBuffer>, usize),
        len: usize,
    ) -> Result<()> {
        let d = stream.device();
        let mut enc = d.encoder();
        let to = (&dst.buffer, dst_offset as u64);
        if Arc::ptr_eq(src, dst) {
            // wgpu cannot read and write one buffer in one copy: go through a
            // temporary buffer.
            let start = (src_offset as u64 / 4) * 4;
            let end = round4((src_offset + len) as u64);
            let tmp = new_buffer(d, end - start, DEVICE_BUFFER, false)?;
            enc.copy_buffer_to_buffer(&src.buffer, start, &tmp, 0, end - start);
            let from = (&tmp, src_offset as u64 - start);
            record_copy(d, &mut enc, from, to, len as u64, dst.size)?;
            stream.submit(enc)?;
            d.gl.release(tmp);
            return Ok(());
        } else {
            let from = (&src.buffer, src_offset as u64);
            record_copy(d, &mut enc, from, to, len as u64, dst.size)?;
        }
        stream.submit(enc)?;
        Ok(())
    }
}
