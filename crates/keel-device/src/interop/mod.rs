//! Keel inside someone else's program: a program's own devices, queues
//! and buffers handed to Keel (*adopted*), Keel's native objects handed
//! out, and the program's own GPU work timed by Keel's profiler.
//!
//! Adopting shares the program's objects; nothing is copied, and nothing
//! the program owns is ever destroyed by Keel. An adopted device is kept
//! by Keel for the rest of the process (like every Keel device: guards,
//! streams and events refer to it), numbered after the devices Keel found
//! itself, so `device_count` grows by one per adopted device. A Vulkan
//! device can be given back ([`vulkan::release`]): Keel then destroys what
//! it made on it, and the Keel device stays, refusing work.
//!
//! One module per native API, each behind its backend's cargo feature:
//! [`vulkan`], [`wgpu`], [`cuda`]; [`cpu`] gives the host memory behind a
//! CPU buffer.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "vulkan")]
pub mod vulkan;
#[cfg(feature = "wgpu")]
pub mod wgpu;
