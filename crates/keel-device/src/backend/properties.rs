//! [`DeviceProperties`]: what a device is and what it can do.

use std::fmt;

use crate::core::Device;

/// The kind of a device, in the order Keel sorts devices by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// A discrete GPU.
    DiscreteGpu,
    /// A GPU sharing memory with the host.
    IntegratedGpu,
    /// A virtualised GPU.
    VirtualGpu,
    /// A CPU, or a software implementation running on one.
    Cpu,
    /// Anything else (including simulated accelerators).
    Other,
}

impl DeviceKind {
    /// Whether this is a GPU: discrete, integrated or virtual.
    pub fn is_gpu(self) -> bool {
        matches!(
            self,
            DeviceKind::DiscreteGpu | DeviceKind::IntegratedGpu | DeviceKind::VirtualGpu
        )
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::DiscreteGpu => "discrete GPU",
            DeviceKind::IntegratedGpu => "integrated GPU",
            DeviceKind::VirtualGpu => "virtual GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Other => "other",
        })
    }
}

/// How a device timestamps work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimestampSupport {
    /// Nanoseconds per timestamp tick.
    pub period_ns: f64,
    /// How many low bits of a timestamp are valid (64 for host clocks).
    pub valid_bits: u32,
}

/// What a device is and what it can do. Backends fill what their native API
/// reports; what it does not report is `None` (never a made-up number).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeviceProperties {
    /// The device these properties describe.
    pub device: Device,
    /// The device's name as the driver reports it.
    pub name: String,
    /// The vendor's name.
    pub vendor: String,
    /// PCI vendor id, where there is one.
    pub vendor_id: Option<u32>,
    /// PCI device id, where there is one.
    pub device_id: Option<u32>,
    /// Discrete, integrated, CPU, ...
    pub kind: DeviceKind,
    /// The native API underneath (`"host threads"`, `"Vulkan 1.3.255"`,
    /// `"CUDA 12.8"`, `"wgpu/Metal"`).
    pub native_backend: String,
    /// The driver's name.
    pub driver: String,
    /// More about the driver (version string).
    pub driver_info: String,
    /// Bytes of memory kernels on this device can use.
    pub total_memory: Option<u64>,
    /// Compute units: CUDA SMs, CPU hardware threads, ...
    pub compute_units: Option<u32>,
    /// Largest workgroup (block) per dimension.
    pub max_workgroup_size: Option<[u32; 3]>,
    /// Largest number of invocations in one workgroup.
    pub max_workgroup_invocations: Option<u32>,
    /// Largest number of workgroups per dimension of a dispatch.
    pub max_workgroup_count: Option<[u32; 3]>,
    /// Shared (workgroup) memory per workgroup, in bytes.
    pub shared_memory_per_workgroup: Option<u64>,
    /// Subgroup (warp, wave) size.
    pub subgroup_size: Option<u32>,
    /// Device timestamps, if the device has them.
    pub timestamps: Option<TimestampSupport>,
    /// The alignment a storage buffer binding's offset needs, in bytes
    /// (Vulkan's `minStorageBufferOffsetAlignment`, wgpu's
    /// `min_storage_buffer_offset_alignment`); the caching allocator
    /// checks it against its 512-byte blocks.
    pub storage_offset_alignment: Option<u64>,
    /// Whether a kernel holds every allocation it binds whole while it
    /// runs (host memory: one lock per allocation, which safe Rust splits
    /// into the bindings' slices). The caching allocator then gives every
    /// buffer an allocation of its own, so that kernels on different
    /// buffers run at the same time; elsewhere buffers are blocks carved
    /// from shared segments. Set from the backend's memory role
    /// ([`Memory::EXCLUSIVE_ALLOCATIONS`](crate::backend::typed::Memory::EXCLUSIVE_ALLOCATIONS)).
    pub exclusive_allocations: bool,
    /// Whether kernels that ask for strict floating point
    /// ([`Kernel::strict_float`](crate::Kernel::strict_float)) get it by a
    /// rule of the native API: host code, PTX's `.rn`, SPIR-V's
    /// `NoContraction` (Vulkan, and wgpu's Vulkan adapter with
    /// `PASSTHROUGH_SHADERS`). `false` where nothing promises it (wgpu's
    /// GL, Metal and DX12 adapters; a backend that does not say).
    pub strict_float: bool,
    /// Everything else the native API reports, as (name, value) pairs in a
    /// stable order.
    pub extra: Vec<(String, String)>,
}

impl DeviceProperties {
    /// Properties with the identity filled and everything measurable
    /// unknown; backends fill the rest.
    pub fn new(device: Device, name: impl Into<String>, kind: DeviceKind) -> Self {
        DeviceProperties {
            device,
            name: name.into(),
            vendor: String::new(),
            vendor_id: None,
            device_id: None,
            kind,
            native_backend: String::new(),
            driver: String::new(),
            driver_info: String::new(),
            total_memory: None,
            compute_units: None,
            max_workgroup_size: None,
            max_workgroup_invocations: None,
            max_workgroup_count: None,
            shared_memory_per_workgroup: None,
            subgroup_size: None,
            timestamps: None,
            storage_offset_alignment: None,
            exclusive_allocations: false,
            strict_float: false,
            extra: Vec::new(),
        }
    }
}

/// The vendor's name for a PCI (or Khronos) vendor id, as Vulkan and wgpu
/// report them.
pub fn vendor_name(id: u32) -> &'static str {
    match id {
        0x1002 => "AMD",
        0x1010 => "ImgTec",
        0x10DE => "NVIDIA",
        0x13B5 => "ARM",
        0x5143 => "Qualcomm",
        0x8086 => "Intel",
        0x106B => "Apple",
        0x10005 => "Mesa",
        _ => "unknown vendor",
    }
}
