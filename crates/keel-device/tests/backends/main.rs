//! Each built-in backend through the public API, beyond the conformance
//! suite (`tests/conformance/`): one module per backend, device strings
//! and stream ids (`device`), stream queries racing completions on every
//! backend present (`stream_stress`), and strict floating point on every
//! backend present (`strict_float`).

mod cpu;
mod cuda;
mod device;
mod stream_stress;
mod strict_float;
mod vulkan;
mod wgpu;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Held by every test here that records a profiler session: one session
/// records at a time in a process, and it records every stream.
fn session() -> MutexGuard<'static, ()> {
    static SESSION: Mutex<()> = Mutex::new(());
    SESSION.lock().unwrap_or_else(PoisonError::into_inner)
}
