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
//! | event record | untimed: the stream's position (items submitted so far), complete once its completed count reaches it; timed: a marker task that takes the host time when the stream reaches it |
//! | `stream.wait(event)` | a task that waits for the position or marker |
//! | query / synchronize | queue counters / condition variables |
//! | `elapsed_time` | host `Instant` difference, in ms |
//! | memory | zeroed host allocations, 8-byte aligned, one per buffer (a kernel locks the allocations it binds, so buffers do not share them: `exclusive_allocations`) |
//! | kernel | the kernel's Rust function, once per launch, over its buffers' slices |
//! | profiled operations (`begin_timed_work`) | timed inside the operation's own tasks: its span runs from its first task's start to its last task's end (`stream::TimedWork`); no marker enters the queue |
//!
//! Unlike c10's CPU (a no-op guard with no events), Keel's CPU has real
//! asynchronous streams and events, so code written for a GPU runs and
//! overlaps on the CPU too. The host building blocks (streams, events,
//! memory, kernels) are public so that other host-thread backends (the
//! `npu` example) are built from them; [`stream`] states the error rules.

mod device;
mod event;
mod kernel;
mod memory;
pub mod stream;

use std::sync::LazyLock;

pub use self::device::HostDevice;
pub use self::event::HostEvent;
pub use self::kernel::enqueue_kernel;
pub use self::memory::{HostMemory, enqueue_copy, enqueue_read, enqueue_write};
pub use self::stream::{HostStream, Task};
use super::typed::{Backend, Typed};
use super::{DeviceProperties, pool::PoolCursors};
use crate::core::{Device, DeviceIndex, DeviceType, StreamId};
use crate::error::Result;

const TY: DeviceType = DeviceType::Cpu;

/// Priority levels of the CPU stream pool.
pub const CPU_PRIORITY_LEVELS: usize = 2;

static DEVICE: LazyLock<HostDevice> =
    LazyLock::new(|| HostDevice::new(TY, 0, CPU_PRIORITY_LEVELS, true));

/// A backend whose devices run their work on host threads, built from the
/// CPU backend's blocks ([`HostDevice`], [`HostStream`], [`HostEvent`],
/// [`HostMemory`]): implementing [`Backend`] with those types and this
/// trait gives it Keel's host events, memory, copies and kernels (the
/// `Events`, `Memory` and `Kernels` roles of the skeleton) as the CPU has
/// them. The CPU and the `npu` example backend are two.
pub trait HostBackend: Backend<Device = HostDevice, Stream = &'static HostStream> {
    /// Whether a copy running on `dst` can read `src`'s memory directly
    /// (simulated peer access). Default: the same device only.
    fn host_peer_copy(&self, src: Device, dst: Device) -> bool {
        src == dst
    }
}

/// The CPU backend (zero-sized: its one device is a process-wide static).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

/// The CPU backend's guard implementation and runtime.
pub type CpuGuardImpl = Typed<Cpu>;

/// The registered CPU backend.
pub static CPU: CpuGuardImpl = Typed::new(Cpu);

impl Backend for Cpu {
    const TYPE: DeviceType = TY;
    type Device = HostDevice;
    type Stream = &'static HostStream;

    fn loaded(&self) -> std::result::Result<(), &str> {
        Ok(())
    }
    fn device_count(&self) -> DeviceIndex {
        1
    }
    fn device(&self, _index: DeviceIndex) -> Result<&'static HostDevice> {
        Ok(&DEVICE)
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
        Ok(device::cpu_properties(at, CPU_PRIORITY_LEVELS))
    }
}

impl HostBackend for Cpu {}
