//! The backend conformance suite on a Vulkan device the program created
//! with ash and gave Keel (`keel_device::backend::vulkan::adopt`): lavapipe
//! here and in CI, unchanged from the suite on Keel's own Vulkan device,
//! with every validation error (on Keel's instance or the program's)
//! failing the test that caused it.

use keel_device::testing::conformance::{Config, KernelSource};
use keel_device::testing::vulkan::{adopted_device, program_validation_messages};

fn no_validation_errors() {
    let keel = keel_device::backend::vulkan::validation_messages();
    assert!(keel.is_empty(), "Vulkan validation errors: {keel:#?}");
    let program = program_validation_messages();
    assert!(
        program.is_empty(),
        "Vulkan validation errors on the program's instance: {program:#?}"
    );
}

keel_device::conformance_suite!(
    adopted_device,
    Config {
        kernel_source: KernelSource::Wgsl,
        slow_spin: (4096, 200_000),
        after: no_validation_errors,
        ..Config::default()
    }
);
