//! The wgpu backend (`wgpu:N`, cargo feature `wgpu`): one Keel device per
//! wgpu adapter, on every native API wgpu was built with.
//!
//! | c10 concept | wgpu |
//! |---|---|
//! | device index | a wgpu adapter; order: native API (Vulkan, Metal, DX12, GL), then kind (discrete, integrated, virtual, CPU, other), then name. `WGPU_BACKEND` (e.g. `vulkan`, `gl`) and `WGPU_ADAPTER_NAME` (a substring) narrow the list |
//! | current device | thread-local index |
//! | device + queue | created on first use, requesting `TIMESTAMP_QUERY` and `TIMESTAMP_QUERY_INSIDE_ENCODERS` where offered |
//! | default / pool stream | a logical *lane*: wgpu has one queue per device, so every lane submits to it. Lanes keep their own order and all stream semantics (pool, current stream, guards, waits), but **wgpu streams never run concurrently** |
//! | event record | the sequence number of the lane's last submission; with timing, a submission writing a timestamp |
//! | `stream.wait(event)` | implied by the single queue (an event of another device is waited for on the host) |
//! | query / synchronize | `device.poll(Poll)` / `device.poll(Wait { submission_index })`, completion tracked by `on_submitted_work_done` |
//! | `elapsed_time` | resolved timestamps x `queue.get_timestamp_period()`; an error where the adapter has no timestamps |
//! | memory | `wgpu::Buffer` (storage, copy source and destination), sized up to a multiple of 4; readback through a mapped buffer |
//! | copies | `copy_buffer_to_buffer` when offsets and size allow it (multiples of 4), otherwise the `copy_bytes` kernel |
//! | kernel | the same WGSL as Vulkan, one pipeline per (device, kernel), layout derived from the shader |
//!
//! No adapter (no driver) gives `device_count(Wgpu) == 0` and "wgpu
//! unavailable: <reason>". wgpu errors never panic here: an error handler
//! keeps uncaptured errors for the next operation to report, and kernel
//! compilation runs inside an error scope.

mod device;
mod kernel;

use std::sync::Arc;

use self::device::{Ctx, Lane, ctx, lock};
use super::{
    BufferHandle, DeviceGuardImpl, DeviceProperties, DeviceRuntime, EventHandle, Readback,
    StaticGuardImpl, TimestampSupport, check_device_index, check_static_type, foreign_buffer,
    foreign_event, tls, vendor_name,
};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

pub use device::PRIORITY_LEVELS;

const TY: DeviceType = DeviceType::Wgpu;

fn unavailable(reason: &str) -> Error {
    Error::Unavailable {
        backend: TY.backend_name().to_owned(),
        reason: reason.to_owned(),
    }
}

fn count() -> DeviceIndex {
    device::wg().map_or(0, |w| DeviceIndex::try_from(w.adapters.len()).unwrap_or(0))
}

fn check(device: Device) -> Result<()> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "the wgpu backend serves wgpu devices, found {device}"
        )));
    }
    device::wg().map_err(unavailable)?;
    check_device_index(device, count())
}

fn lane(stream: &Stream) -> Result<(&'static Ctx, &'static Lane)> {
    check(stream.device())?;
    let c = ctx(stream.device())?;
    Ok((c, c.lane(stream.id())?))
}

/// The native API an adapter runs on, as people write it.
fn api_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Metal => "Metal",
        wgpu::Backend::Dx12 => "DX12",
        wgpu::Backend::Gl => "GL",
        wgpu::Backend::BrowserWebGpu => "WebGPU",
        wgpu::Backend::Noop => "noop",
    }
}

/// A wgpu buffer; `size` is the user's size, the wgpu buffer is rounded up
/// to a multiple of 4 (at least 4).
struct WgBuffer {
    buffer: wgpu::Buffer,
    size: u64,
}

fn wg_buffer(handle: &BufferHandle) -> Result<Arc<WgBuffer>> {
    handle
        .downcast_arc::<WgBuffer>()
        .ok_or_else(|| foreign_buffer(TY))
}

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

struct WgEvent {
    ctx: &'static Ctx,
    seq: u64,
    index: Option<wgpu::SubmissionIndex>,
    query: Option<u32>,
}

fn wg_event(event: &EventHandle) -> Result<&WgEvent> {
    event
        .downcast_ref::<WgEvent>()
        .ok_or_else(|| foreign_event(TY))
}

fn encoder(c: &Ctx) -> wgpu::CommandEncoder {
    c.device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
}

fn new_buffer(c: &Ctx, size: u64, usage: wgpu::BufferUsages, mapped: bool) -> Result<wgpu::Buffer> {
    let padded = round4(size).max(4);
    if padded > c.limits.max_buffer_size {
        return Err(Error::OutOfMemory {
            device: Device::new(TY, c.index)?,
            requested: size,
        });
    }
    let scope = c.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let buffer = c.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("keel"),
        size: padded,
        usage,
        mapped_at_creation: mapped,
    });
    if pollster::block_on(scope.pop()).is_some() {
        return Err(Error::OutOfMemory {
            device: Device::new(TY, c.index)?,
            requested: size,
        });
    }
    Ok(buffer)
}

/// A host-visible source buffer holding `data` at byte `phase` (so that it
/// lines up with an unaligned destination offset).
fn staging_from(c: &Ctx, data: &[u8], phase: usize) -> Result<wgpu::Buffer> {
    let b = new_buffer(
        c,
        (phase + data.len()) as u64,
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE,
        true,
    )?;
    let mut bytes = vec![0u8; b.size() as usize];
    bytes[phase..phase + data.len()].copy_from_slice(data);
    b.slice(..)
        .get_mapped_range_mut()
        .map_err(|e| Error::backend(TY, format!("mapping a staging buffer: {e}")))?
        .copy_from_slice(&bytes);
    b.unmap();
    Ok(b)
}

/// Records a copy of `len` bytes, aligned or not. `src` and `dst` must be
/// different wgpu buffers.
#[allow(clippy::too_many_arguments)]
fn record_copy(
    c: &Ctx,
    enc: &mut wgpu::CommandEncoder,
    src: &wgpu::Buffer,
    src_offset: u64,
    dst: &wgpu::Buffer,
    dst_offset: u64,
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
    let pipeline = kernel::pipeline(c, &kernel::COPY_BYTES)?;
    let words = (round4(dst_offset + len) - (dst_offset / 4) * 4) / 4;
    let groups = words.div_ceil(64);
    let max = u64::from(c.limits.max_compute_workgroups_per_dimension);
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
    kernel::record_dispatch(
        c,
        enc,
        &pipeline,
        [x as u32, y as u32, 1],
        &[src, dst],
        &params,
    )
}

/// The wgpu backend's guard implementation and runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct WgpuGuardImpl;

impl StaticGuardImpl for WgpuGuardImpl {
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        check_static_type("WgpuGuardImpl", TY, ty).map(|()| WgpuGuardImpl)
    }
}

impl DeviceGuardImpl for WgpuGuardImpl {
    fn device_type(&self) -> DeviceType {
        TY
    }
    fn exchange_device(&self, device: Device) -> Result<Device> {
        check(device)?;
        tls::exchange_device(device)
    }
    fn get_device(&self) -> Result<Device> {
        device::wg().map_err(unavailable)?;
        tls::current_device(TY)
    }
    fn set_device(&self, device: Device) -> Result<()> {
        self.exchange_device(device).map(drop)
    }
    fn unchecked_set_device(&self, device: Device) {
        tls::restore_device(device);
    }
    fn get_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(tls::current_stream(device))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        lane(&stream)?;
        Ok(tls::exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        count()
    }
    fn unavailable_reason(&self) -> Option<String> {
        match device::wg() {
            Err(reason) => Some(reason.to_owned()),
            Ok(w) if w.adapters.is_empty() => Some(format!(
                "no wgpu adapter found (backends searched: {:?})",
                w.backends
            )),
            Ok(_) => None,
        }
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(Stream::default_for(device))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        check(device)?;
        ctx(device)?.cursors.pool_stream(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        check(device)?;
        ctx(device)?.cursors.priority_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        let (c, l) = lane(stream)?;
        let previous = event.as_ref().map(wg_event).transpose()?;
        let query = match previous.and_then(|p| p.query) {
            Some(slot) => Some(slot),
            None if flag.timing() => {
                if c.timestamps.is_none() {
                    return Err(Error::unsupported(
                        TY,
                        format!(
                            "timing events on {} (it offers no timestamp queries inside encoders)",
                            c.adapter.info.name
                        ),
                    ));
                }
                Some(c.take_query_slot()?)
            }
            None => None,
        };
        let (seq, index) = match (query, &c.timestamps) {
            (Some(slot), Some(qs)) => {
                let mut enc = encoder(c);
                enc.write_timestamp(qs, slot);
                let seq = c.submit(l, enc)?;
                (seq, lock(&l.last).as_ref().map(|(_, i)| i.clone()))
            }
            _ => match lock(&l.last).clone() {
                Some((seq, index)) => (seq, Some(index)),
                None => (0, None),
            },
        };
        *event = Some(EventHandle::new(WgEvent {
            ctx: c,
            seq,
            index,
            query,
        }));
        Ok(())
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        let e = wg_event(event)?;
        let (c, _) = lane(stream)?;
        if std::ptr::eq(c, e.ctx) {
            Ok(()) // one queue: later submissions already follow the event
        } else {
            e.ctx.wait(e.seq, e.index.as_ref())
        }
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        let e = wg_event(event)?;
        e.ctx.is_done(e.seq, e.index.as_ref())
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        let (c, l) = lane(stream)?;
        let last = lock(&l.last).clone();
        match last {
            Some((seq, index)) => c.is_done(seq, Some(&index)),
            None => Ok(true),
        }
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        let (c, l) = lane(stream)?;
        c.wait_lane(l)
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        let e = wg_event(event)?;
        e.ctx.wait(e.seq, e.index.as_ref())
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        let device = Device::new(TY, device_index)?;
        check(device)?;
        let c = ctx(device)?;
        for l in c.lanes() {
            c.wait_lane(l)?;
        }
        Ok(())
    }
    fn elapsed_time(&self, start: &EventHandle, end: &EventHandle, _: DeviceIndex) -> Result<f64> {
        let (a, b) = (wg_event(start)?, wg_event(end)?);
        let c = a.ctx;
        let (Some(qa), Some(qb), Some(qs)) = (a.query, b.query, &c.timestamps) else {
            return Err(Error::invalid("the events were recorded without timing"));
        };
        // Each resolve target offset must be a multiple of 256.
        let align = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
        let resolve = new_buffer(
            c,
            2 * align,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            false,
        )?;
        let read = new_buffer(
            c,
            16,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            false,
        )?;
        let mut enc = encoder(c);
        enc.resolve_query_set(qs, qa..qa + 1, &resolve, 0);
        enc.resolve_query_set(qs, qb..qb + 1, &resolve, align);
        enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, 8);
        enc.copy_buffer_to_buffer(&resolve, align, &read, 8, 8);
        let index = c.queue.submit([enc.finish()]);
        c.uncaptured.take()?;
        let bytes = map_read(c, &read, Some(index))?;
        let t0 = u64::from_le_bytes(bytes[0..8].try_into().unwrap_or([0; 8]));
        let t1 = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or([0; 8]));
        let ticks = if t1 >= t0 {
            (t1 - t0) as f64
        } else {
            -((t0 - t1) as f64)
        };
        Ok(ticks * f64::from(c.queue.get_timestamp_period()) / 1e6)
    }
    fn destroy_event(&self, event: EventHandle, _: DeviceIndex) {
        if let Some(e) = event.downcast_ref::<WgEvent>()
            && let Some(slot) = e.query
        {
            lock(&e.ctx.query_slots).1.push((slot, e.seq));
        }
    }
}

/// Maps `buffer` for reading after submission `index` and copies it out.
fn map_read(
    c: &Ctx,
    buffer: &wgpu::Buffer,
    index: Option<wgpu::SubmissionIndex>,
) -> Result<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    c.device
        .poll(wgpu::PollType::Wait {
            submission_index: index,
            timeout: None,
        })
        .map_err(|e| Error::backend(TY, format!("waiting for a readback: {e}")))?;
    loop {
        if let Ok(r) = rx.try_recv() {
            r.map_err(|e| Error::backend(TY, format!("mapping a readback buffer: {e}")))?;
            break;
        }
        c.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| Error::backend(TY, format!("waiting for a readback: {e}")))?;
    }
    let bytes = buffer
        .slice(..)
        .get_mapped_range()
        .map_err(|e| Error::backend(TY, format!("reading a mapped buffer: {e}")))?
        .to_vec();
    buffer.unmap();
    Ok(bytes)
}

struct WgReadback {
    ctx: &'static Ctx,
    seq: u64,
    index: Option<wgpu::SubmissionIndex>,
    buffer: Option<wgpu::Buffer>,
    skip: usize,
    len: usize,
}

impl Readback for WgReadback {
    fn is_ready(&self) -> Result<bool> {
        self.ctx.is_done(self.seq, self.index.as_ref())
    }
    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        let Some(buffer) = &self.buffer else {
            return Ok(Vec::new());
        };
        self.ctx.wait(self.seq, self.index.as_ref())?;
        // No extra (empty) submission here: the readback's own submission
        // is what the mapping waits for.
        let bytes = map_read(self.ctx, buffer, self.index.clone())?;
        Ok(bytes[self.skip..self.skip + self.len].to_vec())
    }
}

impl DeviceRuntime for WgpuGuardImpl {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        check(device)?;
        let c = ctx(device)?;
        let info = &c.adapter.info;
        let l = &c.limits;
        let mut p = DeviceProperties::new(device, info.name.clone(), c.adapter.kind);
        p.vendor = vendor_name(info.vendor).to_owned();
        p.vendor_id = Some(info.vendor);
        p.device_id = Some(info.device);
        p.native_backend = format!("wgpu/{}", api_name(info.backend));
        p.driver = info.driver.clone();
        p.driver_info = info.driver_info.clone();
        p.max_workgroup_size = Some([
            l.max_compute_workgroup_size_x,
            l.max_compute_workgroup_size_y,
            l.max_compute_workgroup_size_z,
        ]);
        p.max_workgroup_invocations = Some(l.max_compute_invocations_per_workgroup);
        p.max_workgroup_count = Some([l.max_compute_workgroups_per_dimension; 3]);
        p.shared_memory_per_workgroup = Some(u64::from(l.max_compute_workgroup_storage_size));
        p.subgroup_size = (info.subgroup_min_size > 0).then_some(info.subgroup_min_size);
        p.timestamps = c.timestamps.as_ref().map(|_| TimestampSupport {
            period_ns: f64::from(c.queue.get_timestamp_period()),
            valid_bits: 64,
        });
        p.extra
            .push(("native API".to_owned(), api_name(info.backend).to_owned()));
        p.extra.push((
            "subgroup sizes".to_owned(),
            format!("{}..={}", info.subgroup_min_size, info.subgroup_max_size),
        ));
        p.extra
            .push(("max buffer size".to_owned(), l.max_buffer_size.to_string()));
        p.extra.push((
            "max storage binding size".to_owned(),
            l.max_storage_buffer_binding_size.to_string(),
        ));
        p.extra.push((
            "features".to_owned(),
            format!("{:?}", c.adapter.adapter.features()),
        ));
        Ok(p)
    }

    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        check(device)?;
        let c = ctx(device)?;
        let buffer = new_buffer(
            c,
            len as u64,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            false,
        )?;
        Ok(BufferHandle::new(WgBuffer {
            buffer,
            size: len as u64,
        }))
    }

    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let (c, l) = lane(stream)?;
        let dst = wg_buffer(dst)?;
        let phase = offset % 4;
        let staging = staging_from(c, &data, phase)?;
        let mut enc = encoder(c);
        record_copy(
            c,
            &mut enc,
            &staging,
            phase as u64,
            &dst.buffer,
            offset as u64,
            data.len() as u64,
            dst.size,
        )?;
        c.submit(l, enc)?;
        Ok(())
    }

    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let (c, l) = lane(stream)?;
        if len == 0 {
            return Ok(Box::new(WgReadback {
                ctx: c,
                seq: 0,
                index: None,
                buffer: None,
                skip: 0,
                len: 0,
            }));
        }
        let src = wg_buffer(src)?;
        let start = (offset as u64 / 4) * 4;
        let end = round4((offset + len) as u64);
        let buffer = new_buffer(
            c,
            end - start,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            false,
        )?;
        let mut enc = encoder(c);
        enc.copy_buffer_to_buffer(&src.buffer, start, &buffer, 0, end - start);
        let seq = c.submit(l, enc)?;
        let index = lock(&l.last).as_ref().map(|(_, i)| i.clone());
        Ok(Box::new(WgReadback {
            ctx: c,
            seq,
            index,
            buffer: Some(buffer),
            skip: (offset as u64 - start) as usize,
            len,
        }))
    }

    fn copy(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        src_offset: usize,
        dst: &BufferHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (c, l) = lane(stream)?;
        let (src, dst) = (wg_buffer(src)?, wg_buffer(dst)?);
        let mut enc = encoder(c);
        if Arc::ptr_eq(&src, &dst) {
            let (a, b) = (src_offset, dst_offset);
            if a < b + len && b < a + len {
                return Err(Error::invalid(format!(
                    "copy within one buffer: expected non-overlapping ranges, found {a}..{} and {b}..{}",
                    a + len,
                    b + len
                )));
            }
            // wgpu cannot read and write one buffer in one copy: go
            // through a temporary buffer.
            let start = (src_offset as u64 / 4) * 4;
            let end = round4((src_offset + len) as u64);
            let tmp = new_buffer(
                c,
                end - start,
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                false,
            )?;
            enc.copy_buffer_to_buffer(&src.buffer, start, &tmp, 0, end - start);
            record_copy(
                c,
                &mut enc,
                &tmp,
                src_offset as u64 - start,
                &dst.buffer,
                dst_offset as u64,
                len as u64,
                dst.size,
            )?;
        } else {
            record_copy(
                c,
                &mut enc,
                &src.buffer,
                src_offset as u64,
                &dst.buffer,
                dst_offset as u64,
                len as u64,
                dst.size,
            )?;
        }
        c.submit(l, enc)?;
        Ok(())
    }

    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&BufferHandle],
        params: &[u8],
    ) -> Result<()> {
        let (c, l) = lane(stream)?;
        kernel::check_grid(c, kernel, grid)?;
        let bufs = buffers
            .iter()
            .map(|b| wg_buffer(b))
            .collect::<Result<Vec<_>>>()?;
        for (i, a) in bufs.iter().enumerate() {
            if let Some(j) = bufs[..i].iter().position(|b| Arc::ptr_eq(a, b)) {
                return Err(Error::Kernel {
                    kernel: kernel.name.to_owned(),
                    message: format!(
                        "the same buffer is bound at bindings {j} and {i}; wgpu needs distinct buffers"
                    ),
                });
            }
        }
        let pipeline = kernel::pipeline(c, kernel)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let raw: Vec<&wgpu::Buffer> = bufs.iter().map(|b| &b.buffer).collect();
        // Each launch gets its own parameter buffer. (A single shared one
        // rewritten with `queue.write_buffer` before each submission made
        // the conformance suite flaky here, as if a running launch saw a
        // later launch's parameters; not worth the risk for the gain.)
        let mut enc = encoder(c);
        kernel::record_dispatch(c, &mut enc, &pipeline, grid, &raw, params)?;
        // A binding the shader does not accept is a wgpu validation error,
        // reported by `submit` (through the uncaptured-error handler).
        c.submit(l, enc).map_err(|e| Error::Kernel {
            kernel: kernel.name.to_owned(),
            message: format!("wgpu rejected the launch: {e}"),
        })?;
        Ok(())
    }
}

/// Waits for all work on every wgpu device created so far.
pub fn synchronize_all() -> Result<()> {
    for c in device::created() {
        for l in c.lanes() {
            c.wait_lane(l)?;
        }
    }
    Ok(())
}
