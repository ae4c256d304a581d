//! The backend conformance suite on a third-party backend: the `npu` of
//! `examples/custom_backend`, registered at run time in the PrivateUse1
//! slot, instantiated exactly as an in-tree backend is.

use crate::npu;

use keel::DeviceType;
use keel::testing::conformance::{Config, device};

fn npu() -> Option<keel::Device> {
    npu::install().expect("the npu backend registers");
    device(DeviceType::PrivateUse1)
}

keel::conformance_suite!(npu, Config::default());
