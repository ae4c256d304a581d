//! The backend conformance suite on the CPU backend.

mod common;
mod conformance;

use keel::DeviceType;

conformance_suite!(
    || conformance::device(DeviceType::Cpu),
    conformance::Config {
        slow_spin: (64, 400_000),
        after: || {},
        blocking_submit: false,
        serial: false,
    }
);
