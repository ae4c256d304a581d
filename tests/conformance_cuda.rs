//! The backend conformance suite on the CUDA backend. Where no CUDA driver
//! or GPU is present every test prints why it skips (and fails instead
//! when `KEEL_REQUIRE_BACKENDS` names `cuda`).

mod common;
mod conformance;

use keel::DeviceType;

conformance_suite!(
    || conformance::device(DeviceType::Cuda),
    conformance::Config {
        // Tens of milliseconds on a current GPU: 1024 blocks of 64 threads,
        // each running a 2,000,000-step dependent chain.
        slow_spin: (1 << 16, 2_000_000),
        after: || {},
        blocking_submit: false,
        serial: false,
    }
);
