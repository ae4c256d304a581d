//! The backend conformance suite on the CPU backend.

use keel_device::DeviceType;
use keel_device::testing::conformance::{Config, device};

keel_device::conformance_suite!(|| device(DeviceType::Cpu), Config::default());
