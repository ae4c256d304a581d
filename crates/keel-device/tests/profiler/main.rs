//! The profiler through the public API: its own rules (`recording`) and
//! live streaming over loopback (`live`), `tracing` spans and events
//! through `TracingLayer` (`tracing_layer`). What it records of each
//! backend is part of the conformance suite.

mod live;
mod recording;
#[cfg(feature = "tracing")]
mod tracing_layer;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Sessions are process-wide: the tests here take turns.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}
