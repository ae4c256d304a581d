//! Keel inside a program that has its own GPU objects
//! (`keel_device::interop`): devices, queues and buffers adopted and
//! handed out, the program's submissions and scopes on its passes in
//! Keel's profiler, and the conformance suite on adopted devices. A test
//! binary of its own: adopting adds devices to the process, which other
//! binaries' tests (adapter order, device counts) must not see.

#[cfg(feature = "cuda")]
mod cuda_interop;
#[cfg(feature = "vulkan")]
mod vulkan_interop;
#[cfg(feature = "wgpu")]
mod wgpu_interop;

use std::sync::{PoisonError, RwLockWriteGuard};

/// Held by every test here that records a profiler session: the
/// conformance suites of this binary hold the same lock (shared by their
/// ordinary tests, alone by those that record a session), so only one
/// session records at a time and no suite test's work lands in it.
fn session() -> RwLockWriteGuard<'static, ()> {
    keel_device::testing::conformance::EXCLUSIVE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
}
