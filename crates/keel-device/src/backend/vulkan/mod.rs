//! The Vulkan backend (`vulkan:N`, cargo feature `vulkan`): ash loads
//! libvulkan at run time, gpu-allocator manages memory, naga turns the WGSL
//! kernels into SPIR-V.
//!
//! | c10 concept | Vulkan |
//! |---|---|
//! | device index | a physical device with a compute queue and Vulkan 1.3, ordered discrete, integrated, virtual, CPU, other, then by name |
//! | current device | thread-local index ([`tls`](crate::backend::tls), kept by the [skeleton](crate::backend::typed)) |
//! | logical device | created on first use of an index (any operation on it, properties included), thread-safe, lives for the process |
//! | default stream / pool stream | a timeline semaphore + a command pool; streams are spread round-robin over the compute family's queues |
//! | stream order | each submission waits for the stream's previous value and signals the next, so streams sharing a queue stay in order |
//! | priority levels | 2 (normal, high) as separate pools; the queues themselves have one priority |
//! | event record | (semaphore, value); a timed event also writes a timestamp query in its own submission |
//! | `stream.wait(event)` | the stream's next submission waits on (semaphore, value); events of another device are waited for on the host |
//! | query / synchronize | `vkGetSemaphoreCounterValue` / `vkWaitSemaphores` |
//! | `elapsed_time` | timestamp ticks x `timestampPeriod`, masked to `timestampValidBits`; an error when the queue family has no timestamps |
//! | memory | gpu-allocator: device-local buffers, host-visible staging buffers for copies pooled per device; out of memory is an error |
//! | profiler device spans | timestamp queries written inside the operation's own command buffers (on a busy stream only the end: the start is the previous operation's end); calibrated timestamps (KHR or EXT) for the clock where offered |
//! | kernel | WGSL -> SPIR-V by naga (cached per kernel), one compute pipeline per (device, kernel); buffers are storage bindings 0..n, parameters a uniform at binding n |
//! | adopted device (interop, no c10 equivalent) | a program's `VkInstance` + `VkDevice` + one queue ([`adopt`](crate::interop::vulkan::adopt)), numbered after Keel's own devices and run by the same code; the program enables [`requirements`](crate::interop::vulkan::requirements); Keel never destroys it, and [`release`](crate::interop::vulkan::release) destroys what Keel made on it |
//! | native handles (interop) | the device, queues, a buffer's `vk::Buffer` with its offset and length (a block of an allocator segment), a stream's or event's timeline semaphore and value; a program's `vk::Buffer` as a Keel buffer (never freed by Keel); a program's semaphore waited for by a stream ([`interop::vulkan`](crate::interop::vulkan)) |
//!
//! Availability: when the loader is missing, the instance cannot be
//! created, or no device qualifies, `device_count(Vulkan)` is 0 and every
//! operation returns `Vulkan unavailable: <reason>`, until the program
//! adopts a device of its own. Nothing panics.
//!
//! Interop: the public API is [`crate::interop::vulkan`] (ownership, the
//! program's promises, the teardown order); `interop.rs` here is what it
//! needs of the backend.
//!
//! Validation: Keel installs a debug messenger when `VK_EXT_debug_utils` is
//! present. With `VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation` every
//! validation error is counted ([`validation_error_count`]) and printed;
//! the test command runs the Vulkan tests that way and fails on any.

mod device;
mod event;
pub(crate) mod interop;
mod kernel;
mod loader;
mod memory;
mod stream;

pub use self::device::PRIORITY_LEVELS;
pub use self::kernel::spirv;
#[cfg(feature = "testing")]
pub(crate) use self::loader::callback_message;
pub use self::loader::{validation_error_count, validation_messages};

use self::device::Ctx;
use self::stream::VkStream;
use super::typed::{Backend, Typed};
use super::{DeviceProperties, pool::PoolCursors};
use crate::core::{Device, DeviceIndex, DeviceType, StreamId};
use crate::error::Result;

const TY: DeviceType = DeviceType::Vulkan;

/// The Vulkan backend (zero-sized: the instance and the devices are
/// process-wide).
#[derive(Debug, Clone, Copy, Default)]
pub struct Vulkan;

/// The Vulkan backend's guard implementation and runtime.
pub type VulkanGuardImpl = Typed<Vulkan>;

/// The registered Vulkan backend.
pub static VULKAN: VulkanGuardImpl = Typed::new(Vulkan);

impl Backend for Vulkan {
    const TYPE: DeviceType = TY;
    type Device = Ctx;
    type Stream = &'static VkStream;

    /// Loaded when Keel's own instance exists, or when the program gave
    /// Keel a device of its own (Keel's instance may have failed where the
    /// program's did not).
    fn loaded(&self) -> std::result::Result<(), &str> {
        match loader::vk() {
            Err(_) if !device::ADOPTED.is_empty() => Ok(()),
            v => v.map(drop),
        }
    }
    /// Keel's own devices, then the adopted ones.
    fn device_count(&self) -> DeviceIndex {
        let own = loader::vk().map_or(0, |v| v.adapters.len());
        DeviceIndex::try_from(own + device::ADOPTED.len()).unwrap_or(0)
    }
    fn no_device_reason(&self) -> String {
        "no Vulkan 1.3 device with a compute queue was found".to_owned()
    }
    fn device(&self, index: DeviceIndex) -> Result<&'static Ctx> {
        device::device(index)
    }
    fn cursors<'d>(&self, device: &'d Ctx) -> &'d PoolCursors {
        device.streams().cursors()
    }
    fn stream(&self, device: &'static Ctx, id: StreamId) -> Result<&'static VkStream> {
        device.stream(id)
    }
    fn query_stream(&self, stream: &'static VkStream) -> Result<bool> {
        stream.query()
    }
    fn synchronize_stream(&self, stream: &'static VkStream) -> Result<()> {
        stream.synchronize()
    }
    fn synchronize_device(&self, device: &'static Ctx) -> Result<()> {
        device.live()?;
        device.streams().try_for_each_created(VkStream::synchronize)
    }

    fn describe(&self, device: &'static Ctx, at: Device) -> Result<DeviceProperties> {
        Ok(device::describe(device, at))
    }
}
