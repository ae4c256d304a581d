//! `npu`: a complete third-party backend, registered at run time in the
//! PrivateUse1 slot (c10's way of plugging in an out-of-tree device).
//!
//! The "NPU" is a simulated accelerator with two devices. Each device runs
//! its work on host threads, using Keel's host building blocks
//! (`keel::backend::host`); unlike Keel's CPU, its default stream is
//! asynchronous too, like a real accelerator's default queue, and the two
//! devices can copy each other's memory directly (simulated peer access).
//!
//! Everything a backend provides is here: the guard implementation (current
//! device and stream, stream pool, events) and the runtime (properties,
//! memory, copies, kernels). After [`install`], users reach it through the
//! ordinary API: `"npu:1".parse::<Device>()`, `DeviceGuard`,
//! `get_stream_from_pool`, `Event`, `Buffer`, `Stream::launch`.

use std::sync::{LazyLock, OnceLock};

use keel::backend::host::{self, HostDevice, HostEvent, HostMemory, HostStream};
use keel::backend::{
    BufferHandle, DeviceGuardImpl, DeviceKind, DeviceProperties, DeviceRuntime, EventHandle,
    Readback, TimestampSupport, check_device_index, foreign_event, tls,
};
use keel::{Device, DeviceIndex, DeviceType, Error, EventFlag, Kernel, Result, Stream};

/// The name users write in device strings.
pub const NAME: &str = "npu";
/// Devices the simulated NPU has.
pub const DEVICES: DeviceIndex = 2;
const TY: DeviceType = DeviceType::PrivateUse1;
/// Priority levels of each device's stream pool.
const LEVELS: usize = 3;

/// The backend: one host-thread device per NPU.
pub struct Npu {
    devices: Vec<HostDevice>,
}

static NPU: LazyLock<Npu> = LazyLock::new(|| Npu {
    devices: (0..DEVICES)
        .map(|i| HostDevice::new(TY, i, LEVELS, false))
        .collect(),
});

/// Names the PrivateUse1 slot `npu` and registers the backend in it. Safe
/// to call more than once; every call returns the first call's result.
pub fn install() -> Result<()> {
    static INSTALLED: OnceLock<Result<()>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            keel::register_privateuse1_backend(NAME)?;
            let npu: &'static Npu = &NPU;
            keel::backend::register(TY, npu, Some(npu))
        })
        .clone()
}

impl Npu {
    fn device(&self, device: Device) -> Result<&HostDevice> {
        if device.device_type() != TY {
            return Err(Error::invalid(format!(
                "the {NAME} backend serves {NAME} devices, found {device}"
            )));
        }
        check_device_index(device, DEVICES)?;
        Ok(&self.devices[device.index() as usize])
    }

    fn stream(&self, stream: &Stream) -> Result<&HostStream> {
        self.device(stream.device())?.stream(stream.id())
    }

    fn event<'e>(&self, event: &'e EventHandle) -> Result<&'e HostEvent> {
        event
            .downcast_ref::<HostEvent>()
            .ok_or_else(|| foreign_event(TY))
    }

    fn at(index: DeviceIndex) -> Result<Device> {
        Device::new(TY, index)
    }
}

impl DeviceGuardImpl for Npu {
    fn device_type(&self) -> DeviceType {
        TY
    }
    fn exchange_device(&self, device: Device) -> Result<Device> {
        self.device(device)?;
        tls::exchange_device(device)
    }
    fn get_device(&self) -> Result<Device> {
        tls::current_device(TY)
    }
    fn set_device(&self, device: Device) -> Result<()> {
        self.exchange_device(device).map(drop)
    }
    fn unchecked_set_device(&self, device: Device) {
        let _ = self.exchange_device(device);
    }
    fn get_stream(&self, device: Device) -> Result<Stream> {
        self.device(device)?;
        Ok(tls::current_stream(device))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        self.stream(&stream)?;
        Ok(tls::exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        DEVICES
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        self.device(device)?;
        Ok(Stream::default_for(device))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        self.device(device)?
            .cursors()
            .pool_stream(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        self.device(device)?
            .cursors()
            .priority_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        _flag: EventFlag,
    ) -> Result<()> {
        let recorded = HostEvent::record(self.stream(stream)?, stream.device_index())?;
        *event = Some(EventHandle::new(recorded));
        Ok(())
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        self.event(event)?.block(self.stream(stream)?)
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        Ok(self.event(event)?.query())
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        self.stream(stream)?.query()
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.stream(stream)?.synchronize()
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        self.event(event)?.synchronize();
        Ok(())
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        self.device(Npu::at(device_index)?)?.synchronize()
    }
    fn elapsed_time(&self, start: &EventHandle, end: &EventHandle, _: DeviceIndex) -> Result<f64> {
        self.event(start)?
            .elapsed_ms(self.event(end)?)
            .ok_or_else(|| {
                Error::invalid("Both events must be completed before calculating elapsed time.")
            })
    }
}

impl DeviceRuntime for Npu {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        self.device(device)?;
        let mut p = DeviceProperties::new(device, "Keel simulated NPU", DeviceKind::Other);
        p.vendor = "keel examples".to_owned();
        p.native_backend = "host threads (PrivateUse1)".to_owned();
        p.driver = "examples/custom_backend".to_owned();
        p.compute_units = Some(1);
        p.timestamps = Some(TimestampSupport {
            period_ns: 1.0,
            valid_bits: 64,
        });
        p.extra
            .push(("peer access".to_owned(), "all npu devices".to_owned()));
        Ok(p)
    }
    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        self.device(device)?;
        let mem = HostMemory::alloc(len).ok_or(Error::OutOfMemory {
            device,
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
            self.stream(stream)?,
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
            self.stream(stream)?,
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
        let (src, dst) = (host::host_memory(TY, src)?, host::host_memory(TY, dst)?);
        host::enqueue_copy(self.stream(stream)?, src, src_offset, dst, dst_offset, len)
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
        host::enqueue_kernel(TY, self.stream(stream)?, kernel, grid, mems, params)
    }
    fn can_copy_between(&self, src: Device, dst: Device) -> bool {
        src.device_type() == TY && dst.device_type() == TY
    }
}
