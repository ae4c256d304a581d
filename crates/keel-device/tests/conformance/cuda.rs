//! The backend conformance suite on the CUDA backend. Where no CUDA driver
//! or GPU is present every test prints why it skips (and fails instead
//! when `KEEL_REQUIRE_BACKENDS` names `cuda`).

use keel_device::DeviceType;
use keel_device::testing::conformance::{Config, KernelSource, device};

keel_device::conformance_suite!(
    || device(DeviceType::Cuda),
    Config {
        kernel_source: KernelSource::Ptx,
        // 1024 blocks of 64 threads, each running a 2,000,000-step
        // dependent chain; the suite scales the steps up to 200 ms on a
        // faster GPU.
        slow_spin: (1 << 16, 2_000_000),
        ..Config::default()
    }
);
