//! The backend conformance suite on the Vulkan backend (lavapipe here and in
//! CI), with every validation error failing the test that caused it.

use keel_device::DeviceType;
use keel_device::testing::conformance::{Config, KernelSource, device};

fn no_validation_errors() {
    let n = keel_device::backend::vulkan::validation_error_count();
    assert_eq!(
        n,
        0,
        "Vulkan validation errors: {:#?}",
        keel_device::backend::vulkan::validation_messages()
    );
}

keel_device::conformance_suite!(
    || device(DeviceType::Vulkan),
    Config {
        kernel_source: KernelSource::Wgsl,
        slow_spin: (4096, 200_000),
        after: no_validation_errors,
        ..Config::default()
    }
);
