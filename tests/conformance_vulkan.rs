//! The backend conformance suite on the Vulkan backend (lavapipe here and in
//! CI), with every validation error failing the test that caused it.

mod common;
mod conformance;

use keel::DeviceType;

fn no_validation_errors() {
    let n = keel::backend::vulkan::validation_error_count();
    assert_eq!(
        n,
        0,
        "Vulkan validation errors: {:#?}",
        keel::backend::vulkan::validation_messages()
    );
}

conformance_suite!(
    || conformance::device(DeviceType::Vulkan),
    conformance::Config {
        slow_spin: (4096, 200_000),
        after: no_validation_errors,
        blocking_submit: false,
        serial: false,
    }
);
