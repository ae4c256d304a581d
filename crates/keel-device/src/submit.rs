//! The stream-operation path: every operation that enqueues work on a
//! stream, or waits for it, passes through one function here.
//!
//! This is the single place where cross-cutting behaviour is applied to
//! every backend at once, rather than in each backend:
//!
//! - `KEEL_LAUNCH_BLOCKING=1` (or [`set_launch_blocking`]) makes every
//!   stream operation synchronous: after enqueueing, the stream is
//!   synchronized, so an asynchronous failure surfaces at the call that
//!   caused it (like `CUDA_LAUNCH_BLOCKING`).
//! - The profiler records here (host spans, and device spans from timed
//!   events around each operation); backends never record themselves. With
//!   no session recording this costs one relaxed load per operation.
//!
//! Functions here take already-checked arguments and backend handles: the
//! public types ([`Event`](crate::Event), [`Buffer`](crate::Buffer), a
//! stream's methods in `stream.rs`) check before calling. This module
//! knows nothing of them (it uses only the backend interface and the
//! profiler's hooks), so they can all build on it.

use std::sync::atomic::{AtomicU8, Ordering};

use std::borrow::Cow;

use crate::backend::{DeviceGuardImpl, EventHandle, registry};
use crate::core::{DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::Result;
use crate::profiler::SpanKind;
use crate::profiler::record::{self, Detail};

/// 0: not read yet; 1: off; 2: on.
static LAUNCH_BLOCKING: AtomicU8 = AtomicU8::new(0);

/// Whether every stream operation runs synchronously. Initially taken from
/// the environment variable `KEEL_LAUNCH_BLOCKING` (`1` means on).
pub fn launch_blocking() -> bool {
    match LAUNCH_BLOCKING.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var("KEEL_LAUNCH_BLOCKING").is_ok_and(|v| v.trim() == "1");
            // Keep a value set by `set_launch_blocking` in the meantime.
            let _ = LAUNCH_BLOCKING.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            LAUNCH_BLOCKING.load(Ordering::Relaxed) == 2
        }
        v => v == 2,
    }
}

/// Turns launch blocking on or off for the whole process, overriding
/// `KEEL_LAUNCH_BLOCKING`.
pub fn set_launch_blocking(on: bool) {
    LAUNCH_BLOCKING.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// After enqueueing on `stream`: wait for it when launch blocking is on.
fn after_enqueue(backend: &dyn DeviceGuardImpl, stream: &Stream) -> Result<()> {
    if launch_blocking() {
        backend.synchronize_stream(stream)?;
    }
    Ok(())
}

fn guard_for(ty: DeviceType) -> Result<&'static dyn DeviceGuardImpl> {
    registry::available_guard_impl(ty)
}

pub(crate) fn record_event(
    backend: &dyn DeviceGuardImpl,
    event: u64,
    handle: &mut Option<EventHandle>,
    stream: &Stream,
    device_index: DeviceIndex,
    flag: EventFlag,
) -> Result<()> {
    if !record::enabled() {
        backend.record(handle, stream, device_index, flag)?;
        return after_enqueue(backend, stream);
    }
    record::stream_op(
        SpanKind::EventRecord,
        Cow::Borrowed("event record"),
        Some(stream),
        Detail::Event(event),
        || {
            backend.record(handle, stream, device_index, flag)?;
            after_enqueue(backend, stream)
        },
    )?;
    Ok(())
}

pub(crate) fn block_on_event(
    backend: &dyn DeviceGuardImpl,
    event: u64,
    handle: &EventHandle,
    stream: &Stream,
) -> Result<()> {
    if !record::enabled() {
        backend.block(handle, stream)?;
        return after_enqueue(backend, stream);
    }
    let op = std::cell::Cell::new(0);
    record::stream_op(
        SpanKind::Wait,
        Cow::Borrowed("stream wait"),
        Some(stream),
        Detail::Event(event),
        || {
            backend.block(handle, stream)?;
            after_enqueue(backend, stream)
        },
    )
    .inspect(|()| op.set(record::last_op()))?;
    record::event_waited(event, op.get());
    Ok(())
}

pub(crate) fn synchronize_event(backend: &dyn DeviceGuardImpl, handle: &EventHandle) -> Result<()> {
    traced_sync("event synchronize", || backend.synchronize_event(handle))
}

pub(crate) fn synchronize_device(ty: DeviceType, index: DeviceIndex) -> Result<()> {
    traced_sync("device synchronize", || {
        guard_for(ty)?.synchronize_device(index)
    })
}

pub(crate) fn synchronize_stream(backend: &dyn DeviceGuardImpl, stream: &Stream) -> Result<()> {
    traced_sync("stream synchronize", || backend.synchronize_stream(stream))
}

fn traced_sync(name: &'static str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    if !record::enabled() {
        return f();
    }
    record::stream_op(SpanKind::Sync, Cow::Borrowed(name), None, Detail::None, f)
}

/// Runs `enqueue` (a runtime operation on `stream`), then applies the
/// cross-cutting rules above; `kind`, `name` and `detail` describe it to the
/// profiler.
pub(crate) fn enqueue<T>(
    stream: &Stream,
    kind: SpanKind,
    name: impl FnOnce() -> Cow<'static, str>,
    detail: Detail,
    enqueue: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let run = || {
        let value = enqueue()?;
        after_enqueue(guard_for(stream.device_type())?, stream)?;
        Ok(value)
    };
    if !record::enabled() {
        return run();
    }
    record::stream_op(kind, name(), Some(stream), detail, run)
}
