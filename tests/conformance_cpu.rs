//! The backend conformance suite on the CPU backend.

use keel::DeviceType;
use keel::testing::conformance::{Config, device};

keel::conformance_suite!(|| device(DeviceType::Cpu), Config::default());
