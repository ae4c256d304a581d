//! The CUDA backend (`cuda:N`, cargo feature `cuda`): cudarc loads libcuda
//! at run time (no CUDA toolkit is needed to build), kernels are
//! hand-written PTX that the driver JIT-compiles.
//!
//! | c10 concept | CUDA |
//! |---|---|
//! | device index | CUDA ordinal (`cuDeviceGet`) |
//! | current device | the ordinal's primary context made current on the thread (`cuCtxSetCurrent`), and the index in [`tls`] |
//! | context use | backend calls make the device's primary context current for the call and restore the thread's previous one |
//! | default stream | the legacy (null) stream, id 0 |
//! | pool stream | 32 non-blocking streams (`CU_STREAM_NON_BLOCKING`) per priority level per device, created lazily, never destroyed, handed out round-robin; c10's id encoding |
//! | priority levels | from `cuCtxGetStreamPriorityRange`: up to 4, at least 2; level p has priority -p (clamped to the range) |
//! | event record | `cuEventRecord`; events are created with `CU_EVENT_DISABLE_TIMING` unless timing is asked for, and come from a pool per (device, flag) that `destroy_event` refills |
//! | `stream.wait(event)` | `cuStreamWaitEvent` (also across devices) |
//! | query / synchronize | `cuEventQuery`, `cuStreamQuery` / `cuEventSynchronize`, `cuStreamSynchronize`, `cuCtxSynchronize` |
//! | `elapsed_time` | `cuEventElapsedTime` |
//! | memory | stream-ordered `cuMemAllocAsync`/`cuMemFreeAsync` where the device has memory pools, `cuMemAlloc`/`cuMemFree` otherwise; freed only after the work of every stream that used it |
//! | copies | pinned staging (host to device), a pinned readback waited on through an event (device to host), `cuMemcpyDtoDAsync`, `cuMemcpyPeerAsync` between peers |
//! | kernel | PTX, `cuModuleLoadDataEx` once per (device, kernel), `cuLaunchKernel`; see [the parameter convention](kernel) |
//! | peer access | [`can_device_access_peer`], [`enable_peer_access`]; [`Buffer::to`](crate::Buffer::to) copies directly between peers |
//!
//! Availability: libcuda is probed before anything calls it. When it is
//! missing, `device_count(Cuda)` is 0 and every operation returns "CUDA
//! unavailable: the CUDA driver library (libcuda) was not found". A driver
//! error at start-up (`cuInit` failing, no device) is reported the same
//! way with the driver's reason. Nothing panics: every driver call also
//! runs under `catch_unwind`.
//!
//! Not yet verified on GPU hardware: no GPU was available where this
//! backend was written.

mod device;
mod driver;
pub mod kernel;
mod memory;

use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};

use self::device::{Ctx, RawEvent, RawStream, ctx, make_current};
pub use self::driver::NO_LIBRARY;
use self::driver::{call, count, ready};
use self::memory::CudaBuffer;
use super::{
    BufferHandle, DeviceGuardImpl, DeviceKind, DeviceProperties, DeviceRuntime, EventHandle,
    Readback, StaticGuardImpl, TimestampSupport, check_device_index, check_static_type,
    foreign_buffer, foreign_event, tls,
};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

const TY: DeviceType = DeviceType::Cuda;

fn unavailable(reason: &str) -> Error {
    Error::Unavailable {
        backend: TY.backend_name().to_owned(),
        reason: reason.to_owned(),
    }
}

/// Checks `device` is a CUDA device that exists.
fn check(device: Device) -> Result<()> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "the CUDA backend serves cuda devices, found {device}"
        )));
    }
    driver::driver().map_err(unavailable)?;
    check_device_index(device, count())
}

fn checked_ctx(device: Device) -> Result<&'static Ctx> {
    check(device)?;
    ctx(device)
}

fn cuda_stream(stream: &Stream) -> Result<(&'static Ctx, RawStream)> {
    let c = checked_ctx(stream.device())?;
    Ok((c, c.stream(stream.id())?))
}

fn cuda_buffer(handle: &BufferHandle) -> Result<Arc<CudaBuffer>> {
    handle
        .downcast_arc::<CudaBuffer>()
        .ok_or_else(|| foreign_buffer(TY))
}

/// Capability checks on a compute capability `major.minor`: the `extra`
/// entries of [`DeviceProperties`] ("tensor cores" from 7.0 (Volta),
/// "FP8" from 9.0 (Hopper)).
pub fn capabilities(major: i32, minor: i32) -> Vec<(String, String)> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    vec![
        ("compute capability".to_owned(), format!("{major}.{minor}")),
        ("tensor cores".to_owned(), yes(major >= 7)),
        ("FP8".to_owned(), yes(major >= 9)),
    ]
}

/// A recorded CUDA event (c10 reuses one `cudaEvent_t` across records).
struct CudaEvent {
    ctx: &'static Ctx,
    event: RawEvent,
    timing: bool,
}

fn cuda_event(event: &EventHandle) -> Result<&CudaEvent> {
    event
        .downcast_ref::<CudaEvent>()
        .ok_or_else(|| foreign_event(TY))
}

/// Whether device `a` can access device `b`'s memory directly
/// (`cuDeviceCanAccessPeer`; false for the same device, as in CUDA and
/// `torch.cuda.can_device_access_peer`).
pub fn can_device_access_peer(a: Device, b: Device) -> Result<bool> {
    check(a)?;
    check(b)?;
    if a == b {
        return Ok(false);
    }
    let d = driver::driver().map_err(unavailable)?;
    let (da, db) = (
        d.devices[a.index() as usize].dev,
        d.devices[b.index() as usize].dev,
    );
    let mut can = 0;
    // SAFETY: writes one int; both handles came from cuDeviceGet.
    call("cuDeviceCanAccessPeer", || unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, da, db)
    })?;
    Ok(can != 0)
}

/// Lets device `a` access device `b`'s memory (`cuCtxEnablePeerAccess`
/// from `a`'s primary context). Enabling it twice is fine; devices that
/// cannot be peers are an error.
pub fn enable_peer_access(a: Device, b: Device) -> Result<()> {
    if !can_device_access_peer(a, b)? {
        return Err(Error::invalid(format!(
            "expected two CUDA devices that can be peers, found {a} and {b}, which cannot"
        )));
    }
    let (ca, cb) = (ctx(a)?, ctx(b)?);
    if ca
        .peers
        .lock()
        .map_err(|_| device::poisoned())?
        .contains(&b.index())
    {
        return Ok(());
    }
    let _scope = ca.scope()?;
    let peer = cb.raw.0;
    // SAFETY: `peer` is a live primary context; `a`'s context is current.
    let r = driver::status("cuCtxEnablePeerAccess", || unsafe {
        sys::cuCtxEnablePeerAccess(peer, 0)
    })?;
    match r {
        CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            ca.peers
                .lock()
                .map_err(|_| device::poisoned())?
                .push(b.index());
            Ok(())
        }
        r => Err(driver::cuda_error("cuCtxEnablePeerAccess", r)),
    }
}

/// The CUDA backend's guard implementation and runtime (zero-sized: the
/// state is process-wide, per device and per thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaGuardImpl;

impl StaticGuardImpl for CudaGuardImpl {
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        check_static_type("CudaGuardImpl", TY, ty).map(|()| CudaGuardImpl)
    }
}

impl DeviceGuardImpl for CudaGuardImpl {
    fn device_type(&self) -> DeviceType {
        TY
    }
    fn exchange_device(&self, device: Device) -> Result<Device> {
        let c = checked_ctx(device)?;
        make_current(c.raw)?;
        tls::exchange_device(device)
    }
    fn get_device(&self) -> Result<Device> {
        driver::driver().map_err(unavailable)?;
        tls::current_device(TY)
    }
    fn set_device(&self, device: Device) -> Result<()> {
        self.exchange_device(device).map(drop)
    }
    fn unchecked_set_device(&self, device: Device) {
        if device.index() >= 0 && device.index() < count() {
            if let Ok(c) = ctx(device) {
                let _ = make_current(c.raw);
            }
            tls::exchange_device_index(TY, device.index());
        }
    }
    fn get_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(tls::current_stream(device))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        cuda_stream(&stream)?;
        Ok(tls::exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        count()
    }
    fn unavailable_reason(&self) -> Option<String> {
        driver::driver().err().map(str::to_owned)
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(Stream::default_for(device))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        checked_ctx(device)?
            .cursors
            .pool_stream(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        checked_ctx(device)?
            .cursors
            .priority_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        let (c, s) = cuda_stream(stream)?;
        let _scope = c.scope()?;
        if let Some(h) = event.as_ref() {
            let e = cuda_event(h)?;
            if !std::ptr::eq(e.ctx, c) {
                return Err(Error::invalid(format!(
                    "expected a stream on cuda:{} (the event's device), found {stream}",
                    e.ctx.index
                )));
            }
            let raw = e.event;
            // SAFETY: event and stream belong to the current context.
            return call("cuEventRecord", || unsafe {
                sys::cuEventRecord(raw.0, s.0)
            });
        }
        let timing = flag.timing();
        let raw = c.take_event(timing)?;
        // SAFETY: event and stream belong to the current context.
        if let Err(e) = call("cuEventRecord", || unsafe {
            sys::cuEventRecord(raw.0, s.0)
        }) {
            c.give_event(timing, raw);
            return Err(e);
        }
        *event = Some(EventHandle::new(CudaEvent {
            ctx: c,
            event: raw,
            timing,
        }));
        Ok(())
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        let e = cuda_event(event)?;
        let (c, s) = cuda_stream(stream)?;
        let _scope = c.scope()?;
        // SAFETY: live stream and event (the event may be another
        // device's; CUDA allows waiting across devices).
        call("cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(s.0, e.event.0, 0)
        })
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        let e = cuda_event(event)?;
        let _scope = e.ctx.scope()?;
        // SAFETY: a live event of the current context.
        ready("cuEventQuery", || unsafe { sys::cuEventQuery(e.event.0) })
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        let (c, s) = cuda_stream(stream)?;
        let _scope = c.scope()?;
        // SAFETY: a live stream of the current context.
        ready("cuStreamQuery", || unsafe { sys::cuStreamQuery(s.0) })
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        let (c, s) = cuda_stream(stream)?;
        let _scope = c.scope()?;
        // SAFETY: a live stream of the current context.
        call("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(s.0)
        })
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        let e = cuda_event(event)?;
        let _scope = e.ctx.scope()?;
        // SAFETY: a live event of the current context.
        call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(e.event.0)
        })
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        let c = checked_ctx(Device::new(TY, device_index)?)?;
        let _scope = c.scope()?;
        // SAFETY: a context is current.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
    }
    fn elapsed_time(&self, start: &EventHandle, end: &EventHandle, _: DeviceIndex) -> Result<f64> {
        let (a, b) = (cuda_event(start)?, cuda_event(end)?);
        if !a.timing || !b.timing {
            return Err(Error::invalid(
                "Both events must be created with argument 'enable_timing=True'.",
            ));
        }
        let _scope = a.ctx.scope()?;
        let mut ms = 0f32;
        // SAFETY: writes one float; both events are live timing events.
        call("cuEventElapsedTime", || unsafe {
            sys::cuEventElapsedTime(&mut ms, a.event.0, b.event.0)
        })?;
        Ok(f64::from(ms))
    }
    fn destroy_event(&self, event: EventHandle, _: DeviceIndex) {
        if let Some(e) = event.downcast_ref::<CudaEvent>() {
            e.ctx.give_event(e.timing, e.event);
        }
    }
    fn record_buffer_on_stream(&self, buffer: &BufferHandle, stream: &Stream) -> Result<()> {
        let (c, s) = cuda_stream(stream)?;
        cuda_buffer(buffer)?.used_on(c, s)
    }
}

impl DeviceRuntime for CudaGuardImpl {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        check(device)?;
        let d = driver::driver().map_err(unavailable)?;
        let i = &d.devices[device.index() as usize];
        let kind = if i.integrated {
            DeviceKind::IntegratedGpu
        } else {
            DeviceKind::DiscreteGpu
        };
        let u = |v: i32| u32::try_from(v).ok();
        let mut p = DeviceProperties::new(device, i.name.clone(), kind);
        p.vendor = "NVIDIA".to_owned();
        p.vendor_id = Some(0x10de);
        p.native_backend = format!("CUDA {}.{}", d.version / 1000, (d.version % 1000) / 10);
        p.driver = "libcuda".to_owned();
        p.driver_info = format!("CUDA driver API version {}", d.version);
        p.total_memory = Some(i.total_memory);
        p.compute_units = u(i.sm_count);
        p.max_workgroup_invocations = u(i.max_threads_per_block);
        p.max_workgroup_size = i.max_block.map(|v| u32::try_from(v).unwrap_or(0)).into();
        p.max_workgroup_count = i.max_grid.map(|v| u32::try_from(v).unwrap_or(0)).into();
        p.shared_memory_per_workgroup = u64::try_from(i.shared_per_block).ok();
        p.subgroup_size = u(i.warp_size);
        // cuEventElapsedTime: milliseconds with a resolution of about
        // half a microsecond (CUDA driver API documentation).
        p.timestamps = Some(TimestampSupport {
            period_ns: 500.0,
            valid_bits: 64,
        });
        p.extra.extend(capabilities(i.major, i.minor));
        let extra = [
            ("clock rate (kHz)", i.clock_khz.to_string()),
            ("memory clock rate (kHz)", i.memory_clock_khz.to_string()),
            ("memory bus width (bits)", i.bus_width.to_string()),
            ("L2 cache size (bytes)", i.l2_bytes.to_string()),
            (
                "memory pools",
                if i.memory_pools { "yes" } else { "no" }.to_owned(),
            ),
            (
                "unified addressing",
                if i.unified_addressing { "yes" } else { "no" }.to_owned(),
            ),
            (
                "PCI location",
                format!("{:04x}:{:02x}:{:02x}", i.pci.0, i.pci.1, i.pci.2),
            ),
        ];
        p.extra
            .extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
        Ok(p)
    }

    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        let c = checked_ctx(device)?;
        Ok(BufferHandle::new(CudaBuffer::new(c, len)?))
    }

    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        let (c, s) = cuda_stream(stream)?;
        let dst = cuda_buffer(dst)?;
        if data.is_empty() {
            return Ok(());
        }
        memory::write(c, s, &dst, offset, &data)
    }

    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let (c, s) = cuda_stream(stream)?;
        let src = cuda_buffer(src)?;
        memory::read(c, s, &src, offset, len)
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
        let (c, s) = cuda_stream(stream)?;
        let (src, dst) = (cuda_buffer(src)?, cuda_buffer(dst)?);
        if len == 0 {
            return Ok(());
        }
        memory::copy(c, s, &src, src_offset, &dst, dst_offset, len)
    }

    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&BufferHandle],
        params: &[u8],
    ) -> Result<()> {
        let (c, s) = cuda_stream(stream)?;
        let bufs = buffers
            .iter()
            .map(|b| cuda_buffer(b))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&CudaBuffer> = bufs.iter().map(|b| &**b).collect();
        kernel::launch(c, s, kernel, grid, &refs, params)
    }

    fn can_copy_between(&self, src: Device, dst: Device) -> bool {
        src == dst
            || (src.device_type() == TY
                && dst.device_type() == TY
                && enable_peer_access(dst, src).is_ok())
    }
}

/// Waits for all work on every CUDA device used so far.
pub fn synchronize_all() -> Result<()> {
    for c in device::created() {
        let _scope = c.scope()?;
        // SAFETY: a context is current.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::capabilities;

    fn get<'a>(v: &'a [(String, String)], k: &str) -> &'a str {
        &v.iter().find(|(n, _)| n == k).expect("present").1
    }

    #[test]
    fn capability_checks() {
        let ampere = capabilities(8, 6);
        assert_eq!(get(&ampere, "compute capability"), "8.6");
        assert_eq!(get(&ampere, "tensor cores"), "yes");
        assert_eq!(get(&ampere, "FP8"), "no");
        let pascal = capabilities(6, 1);
        assert_eq!(get(&pascal, "tensor cores"), "no");
        let volta = capabilities(7, 0);
        assert_eq!(get(&volta, "tensor cores"), "yes");
        let hopper = capabilities(9, 0);
        assert_eq!(get(&hopper, "FP8"), "yes");
        assert_eq!(get(&capabilities(12, 0), "FP8"), "yes");
    }
}
