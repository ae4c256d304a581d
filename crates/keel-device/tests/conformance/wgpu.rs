//! The backend conformance suite on wgpu, once per native API: the Vulkan
//! adapter and the GL adapter (both lavapipe/llvmpipe here and in CI).
//! Each instance skips, never fails, where the user's `WGPU_BACKEND` or
//! `WGPU_ADAPTER_NAME` filtered its adapter out (checked below in a child
//! process).

use keel_device::testing::child;
use keel_device::testing::conformance::{Config, KernelSource, wgpu_adapter};

// Note [lavapipe submissions wait]: on lavapipe, `vkQueueSubmit` of a
// submission that waits on a binary semaphore does not return until the
// submission signalling it has *executed* (Mesa's queue waits for the
// signal to become pending, and lavapipe makes it pending by running the
// commands), and wgpu-hal chains every submission to the previous one with
// such a semaphore (its `RelaySemaphores`). So any submission right after a
// slow kernel (recording a timed event, launching a consumer's kernel)
// blocks the host until that kernel has finished (about 300 ms here), and
// a "still running" check after it may see it complete, correctly (Keel's
// tracking, Note [wgpu completion tracking] in
// `keel-device/src/backend/wgpu/stream.rs`, answers right either way). The suite's
// `submit_waits_for_previous` says so for this adapter.

mod vulkan_adapter {
    use super::*;
    keel_device::conformance_suite!(
        || wgpu_adapter("Vulkan"),
        Config {
            kernel_source: KernelSource::Wgsl,
            slow_spin: (4096, 200_000),
            submit_waits_for_previous: lavapipe(),
            ..Config::default()
        }
    );
}

/// Whether the Vulkan adapter is lavapipe (Note [lavapipe submissions
/// wait] above).
fn lavapipe() -> bool {
    wgpu_adapter("Vulkan")
        .and_then(|d| keel_device::properties(d).ok())
        .is_some_and(|p| p.name.contains("llvmpipe"))
}

mod gl_adapter {
    use super::*;
    keel_device::conformance_suite!(
        || wgpu_adapter("GL"),
        Config {
            kernel_source: KernelSource::Wgsl,
            slow_spin: (4096, 200_000),
            blocking_submit: true,
            ..Config::default()
        }
    );
}

/// `KEEL_REQUIRE_BACKENDS=wgpu` with `WGPU_BACKEND=vulkan`: the GL
/// instance skips ("filtered out by WGPU_BACKEND=vulkan") and passes, the
/// Vulkan instance runs.
#[test]
fn filtered_adapters_skip_even_when_required() {
    if wgpu_adapter("Vulkan").is_none() || wgpu_adapter("GL").is_none() {
        return;
    }
    for (instance, expect) in [
        (
            "gl_adapter",
            "skipping: wgpu (GL): filtered out by WGPU_BACKEND=vulkan".to_owned(),
        ),
        (
            "vulkan_adapter",
            format!(
                "test {} ... ok",
                child::test_name(module_path!(), "vulkan_adapter::copies_round_trip")
            ),
        ),
    ] {
        let copies = child::test_name(module_path!(), &format!("{instance}::copies_round_trip"));
        let errors = child::test_name(
            module_path!(),
            &format!("{instance}::kernel_errors_are_clear"),
        );
        let out = child::run(
            &[&copies, &errors, "--nocapture", "--test-threads=1"],
            &[
                ("WGPU_BACKEND", "vulkan"),
                ("KEEL_REQUIRE_BACKENDS", "wgpu"),
            ],
        );
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{instance}: {all}");
        assert!(all.contains(&expect), "{instance}: {all}");
        assert!(all.contains("2 passed"), "{instance}: {all}");
    }
}
