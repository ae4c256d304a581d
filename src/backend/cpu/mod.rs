//! The CPU backend: device `cpu` (one device, index 0), always built.
//!
//! How c10's concepts map onto the host:
//!
//! | concept | CPU |
//! |---|---|
//! | device | the host, `cpu:0` (`cpu` resolves to it) |
//! | current device | always `cpu:0` |
//! | default stream (id 0) | runs work inline, on the submitting thread |
//! | pool stream | a worker thread running its queue in order, started on first use |
//! | priority levels | 2 (normal, high); separate pools, same OS priority |
//! | event record | a marker task; completes when the stream reaches it, with the host time |
//! | `stream.wait(event)` | a task that waits for the marker |
//! | query / synchronize | queue counters / condition variables |
//! | `elapsed_time` | host `Instant` difference, in ms |
//! | memory | zeroed host allocations, 8-byte aligned |
//! | kernel | the kernel's Rust function, once per launch |
//!
//! Unlike c10's CPU (a no-op guard with no events), Keel's CPU has real
//! asynchronous streams and events, so code written for a GPU runs and
//! overlaps on the CPU too. See [`host`](super::host) for the error rules.

use std::sync::LazyLock;

use super::host::{self, HostDevice, HostEvent, HostMemory};
use super::{
    BufferHandle, DeviceGuardImpl, DeviceKind, DeviceProperties, DeviceRuntime, EventHandle,
    Readback, StaticGuardImpl, TimestampSupport, check_device_index, check_static_type,
    foreign_event, tls,
};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

const TY: DeviceType = DeviceType::Cpu;

/// Priority levels of the CPU stream pool.
pub const CPU_PRIORITY_LEVELS: usize = 2;

static DEVICE: LazyLock<HostDevice> =
    LazyLock::new(|| HostDevice::new(TY, 0, CPU_PRIORITY_LEVELS, true));

fn cpu0() -> Device {
    Device::current(TY).with_index(0).unwrap_or(Device::cpu())
}

/// Checks a device is the CPU (`cpu` or `cpu:0`).
fn check(device: Device) -> Result<()> {
    if device.device_type() != TY {
        return Err(Error::invalid(format!(
            "the CPU backend serves cpu devices, found {device}"
        )));
    }
    if device.has_index() {
        check_device_index(device, 1)?;
    }
    Ok(())
}

fn host_stream(stream: &Stream) -> Result<&'static host::HostStream> {
    check(stream.device())?;
    DEVICE.stream(stream.id())
}

fn host_event(event: &EventHandle) -> Result<&HostEvent> {
    event
        .downcast_ref::<HostEvent>()
        .ok_or_else(|| foreign_event(TY))
}

/// The CPU backend's guard implementation and runtime (zero-sized: all
/// state is in a process-wide static and in thread-locals).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuGuardImpl;

impl StaticGuardImpl for CpuGuardImpl {
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        check_static_type("CpuGuardImpl", TY, ty).map(|()| CpuGuardImpl)
    }
}

impl DeviceGuardImpl for CpuGuardImpl {
    fn device_type(&self) -> DeviceType {
        TY
    }
    #[inline]
    fn exchange_device(&self, device: Device) -> Result<Device> {
        check(device)?;
        Ok(cpu0())
    }
    fn get_device(&self) -> Result<Device> {
        Ok(cpu0())
    }
    fn set_device(&self, device: Device) -> Result<()> {
        check(device)
    }
    #[inline]
    fn unchecked_set_device(&self, _device: Device) {}
    fn get_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(tls::current_stream(cpu0()))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        host_stream(&stream)?;
        Ok(tls::exchange_stream(Stream::new(cpu0(), stream.id())))
    }
    fn device_count(&self) -> DeviceIndex {
        1
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        check(device)?;
        Ok(Stream::default_for(cpu0()))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        check(device)?;
        DEVICE.cursors().pool_stream(cpu0(), high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        check(device)?;
        DEVICE.cursors().priority_stream(cpu0(), priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        _flag: EventFlag,
    ) -> Result<()> {
        let recorded = HostEvent::record(host_stream(stream)?, 0)?;
        *event = Some(EventHandle::new(recorded));
        Ok(())
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        host_event(event)?.block(host_stream(stream)?)
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        Ok(host_event(event)?.query())
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        host_stream(stream)?.query()
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        host_stream(stream)?.synchronize()
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        host_event(event)?.synchronize();
        Ok(())
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        if device_index > 0 {
            check_device_index(cpu0().with_index(device_index)?, 1)?;
        }
        DEVICE.synchronize()
    }
    fn elapsed_time(
        &self,
        start: &EventHandle,
        end: &EventHandle,
        _device_index: DeviceIndex,
    ) -> Result<f64> {
        host_event(start)?
            .elapsed_ms(host_event(end)?)
            .ok_or_else(|| {
                Error::invalid("Both events must be completed before calculating elapsed time.")
            })
    }
}

impl DeviceRuntime for CpuGuardImpl {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        check(device)?;
        Ok(cpu_properties())
    }
    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        check(device)?;
        let mem = HostMemory::alloc(len).ok_or(Error::OutOfMemory {
            device: cpu0(),
            requested: len as u64,
        })?;
        Ok(BufferHandle::new(mem))
    }
    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        host::enqueue_write(
            host_stream(stream)?,
            host::host_memory(TY, dst)?,
            offset,
            data,
        )
    }
    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        host::enqueue_read(
            host_stream(stream)?,
            host::host_memory(TY, src)?,
            offset,
            len,
        )
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
        host::enqueue_copy(
            host_stream(stream)?,
            host::host_memory(TY, src)?,
            src_offset,
            host::host_memory(TY, dst)?,
            dst_offset,
            len,
        )
    }
    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&BufferHandle],
        params: &[u8],
    ) -> Result<()> {
        let mems = buffers
            .iter()
            .map(|b| host::host_memory(TY, b))
            .collect::<Result<Vec<_>>>()?;
        host::enqueue_kernel(TY, host_stream(stream)?, kernel, grid, mems, params)
    }
}

/// Reads a `key : value` field from a `/proc` file, if the OS has one.
fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

fn cpu_properties() -> DeviceProperties {
    let name = proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "host CPU".to_owned());
    let mut p = DeviceProperties::new(cpu0(), name, DeviceKind::Cpu);
    p.vendor = proc_field("/proc/cpuinfo", "vendor_id").unwrap_or_default();
    p.native_backend = "host threads".to_owned();
    p.driver = "keel host streams".to_owned();
    p.driver_info = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    p.total_memory = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024);
    p.compute_units = std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok());
    p.timestamps = Some(TimestampSupport {
        period_ns: 1.0,
        valid_bits: 64,
    });
    p.extra.push((
        "stream priority levels".to_owned(),
        CPU_PRIORITY_LEVELS.to_string(),
    ));
    p.extra.push((
        "default stream".to_owned(),
        "inline (submitting thread)".to_owned(),
    ));
    p
}
