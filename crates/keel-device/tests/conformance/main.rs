//! The backend conformance suite (`keel_device::testing::conformance`),
//! once per built-in backend: what every backend must do, written once.

mod cpu;
mod cuda;
mod vulkan;
mod wgpu;
