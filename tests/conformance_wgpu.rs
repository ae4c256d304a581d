//! The backend conformance suite on wgpu, once per native API: the Vulkan
//! adapter and the GL adapter (both lavapipe/llvmpipe here and in CI).

mod common;
mod conformance;

use keel::DeviceType;

fn on_api(api: &'static str) -> Option<keel::Device> {
    conformance::device_where(DeviceType::Wgpu, api, |p| {
        p.extra.iter().any(|(k, v)| k == "native API" && v == api)
    })
}

mod vulkan_adapter {
    use super::*;
    conformance_suite!(
        || on_api("Vulkan"),
        conformance::Config {
            slow_spin: (4096, 200_000),
            after: || {},
            blocking_submit: false,
            serial: true,
        }
    );
}

mod gl_adapter {
    use super::*;
    conformance_suite!(
        || on_api("GL"),
        conformance::Config {
            slow_spin: (4096, 200_000),
            after: || {},
            blocking_submit: true,
            serial: true,
        }
    );
}
