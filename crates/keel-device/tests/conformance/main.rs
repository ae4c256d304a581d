//! The backend conformance suite (`keel_device::testing::conformance`),
//! once per built-in backend, and once more on a Vulkan device the program
//! created and gave Keel (`vulkan_adopted`): what every backend must do,
//! written once.

mod cpu;
mod cuda;
mod vulkan;
mod vulkan_adopted;
mod wgpu;
