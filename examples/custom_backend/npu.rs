//! `npu`: a complete third-party backend, registered at run time in the
//! PrivateUse1 slot (c10's way of plugging in an out-of-tree device).
//!
//! The "NPU" is a simulated accelerator with two devices. Each device runs
//! its work on host threads, using Keel's host building blocks
//! (`keel::backend::cpu`); unlike Keel's CPU, its default stream is
//! asynchronous too, like a real accelerator's default queue, and the two
//! devices can copy each other's memory directly (simulated peer access).
//!
//! Everything a backend provides is here, written against Keel's backend
//! skeleton ([`keel::backend::typed::Backend`]): its devices, streams and
//! properties; being a host-thread device, it takes Keel's host events,
//! memory, copies and kernels by implementing
//! [`keel::backend::cpu::HostBackend`] (a GPU backend implements the
//! skeleton's `Events`, `Memory` and `Kernels` itself). The skeleton does
//! the rest (checks, the thread's current device and streams, the stream
//! pool, handle types), exactly as for Keel's own backends. Its buffers
//! come from Keel's caching allocator (`keel::memory`) like every
//! backend's: the backend allocates segments, and its kernels bind ranges
//! of them (`keel::backend::typed::Binding`; the host kernels split one
//! allocation into disjoint slices). After
//! [`install`], users reach it through the ordinary API: `"npu:1".parse::<Device>()`, `DeviceGuard`,
//! `get_stream_from_pool`, `Event`, `Buffer`, `Stream::launch`.

use std::sync::{LazyLock, OnceLock};

use keel::backend::cpu::{HostBackend, HostDevice, HostStream};
use keel::backend::pool::PoolCursors;
use keel::backend::typed::{Backend, Typed};
use keel::backend::{DeviceKind, DeviceProperties, TimestampSupport};
use keel::{Device, DeviceIndex, DeviceType, Error, Result, StreamId};

/// The name users write in device strings.
pub const NAME: &str = "npu";
/// Devices the simulated NPU has.
pub const DEVICES: DeviceIndex = 2;
const TY: DeviceType = DeviceType::PrivateUse1;
/// Priority levels of each device's stream pool.
const LEVELS: usize = 3;

static STATE: LazyLock<Vec<HostDevice>> = LazyLock::new(|| {
    (0..DEVICES)
        .map(|i| HostDevice::new(TY, i, LEVELS, false))
        .collect()
});

/// The backend: one host-thread device per NPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Npu;

static NPU: Typed<Npu> = Typed::new(Npu);

/// Names the PrivateUse1 slot `npu` and registers the backend in it. Safe
/// to call more than once; every call returns the first call's result.
pub fn install() -> Result<()> {
    static INSTALLED: OnceLock<Result<()>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            keel::register_privateuse1_backend(NAME)?;
            keel::backend::register(TY, &NPU, Some(&NPU))
        })
        .clone()
}

impl Backend for Npu {
    const TYPE: DeviceType = TY;
    type Device = HostDevice;
    type Stream = &'static HostStream;

    fn loaded(&self) -> std::result::Result<(), &str> {
        Ok(())
    }
    fn device_count(&self) -> DeviceIndex {
        DEVICES
    }
    fn device(&self, index: DeviceIndex) -> Result<&'static HostDevice> {
        usize::try_from(index)
            .ok()
            .and_then(|i| STATE.get(i))
            .ok_or_else(|| Error::invalid(format!("no {NAME} device {index}")))
    }
    fn cursors<'d>(&self, device: &'d HostDevice) -> &'d PoolCursors {
        device.cursors()
    }
    fn stream(&self, device: &'static HostDevice, id: StreamId) -> Result<&'static HostStream> {
        device.stream(id)
    }
    fn query_stream(&self, stream: &'static HostStream) -> Result<bool> {
        stream.query()
    }
    fn synchronize_stream(&self, stream: &'static HostStream) -> Result<()> {
        stream.synchronize()
    }
    fn synchronize_device(&self, device: &'static HostDevice) -> Result<()> {
        device.synchronize()
    }

    fn describe(&self, _device: &'static HostDevice, at: Device) -> Result<DeviceProperties> {
        let mut p = DeviceProperties::new(at, "Keel simulated NPU", DeviceKind::Other);
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
}

/// Events, memory, copies and kernels are Keel's host ones (the CPU's);
/// the two devices read each other's memory directly.
impl HostBackend for Npu {
    fn host_peer_copy(&self, src: Device, dst: Device) -> bool {
        src.device_type() == TY && dst.device_type() == TY
    }
}
