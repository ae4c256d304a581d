//! One CUDA device: its primary context, its stream pool, its event pools.
//!
//! A [`Ctx`] is created on first use of a device index and lives for the
//! process. Driver calls that need a context run inside a [`Scope`], which
//! makes the device's primary context current on the calling thread and
//! restores the thread's previous context afterwards (c10's CUDA code does
//! the same with a device guard), so backend calls never change the
//! thread's current device behind the user's back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUevent_flags, CUstream_flags};

use super::driver::{self, DeviceInfo, call};
use super::kernel::Function;
use super::memory::Pinned;
use super::unavailable;
use crate::backend::pool::PoolCursors;
use crate::core::{
    Device, DeviceIndex, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, StreamId, StreamKind, stream_kind,
};
use crate::error::{Error, Result};

/// A CUDA context handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawCtx(pub sys::CUcontext);
// SAFETY: CUDA contexts are driver objects usable from any thread; the
// driver synchronises access to them.
unsafe impl Send for RawCtx {}
// SAFETY: as above.
unsafe impl Sync for RawCtx {}

/// A CUDA stream handle (null is the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawStream(pub sys::CUstream);
// SAFETY: CUDA streams are driver objects usable from any thread; the
// driver synchronises work submitted to them.
unsafe impl Send for RawStream {}
// SAFETY: as above.
unsafe impl Sync for RawStream {}

/// A CUDA event handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawEvent(pub sys::CUevent);
// SAFETY: CUDA events are driver objects usable from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: as above.
unsafe impl Sync for RawEvent {}

/// The device's primary context made current on this thread until drop.
pub(super) struct Scope {
    previous: Option<sys::CUcontext>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(prev) = self.previous {
            // SAFETY: `prev` was the thread's current context (or null) a
            // moment ago; contexts Keel uses are never destroyed.
            let _ = call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(prev) });
        }
    }
}

/// One device's state, for the life of the process.
pub(super) struct Ctx {
    pub index: DeviceIndex,
    pub info: &'static DeviceInfo,
    pub raw: RawCtx,
    /// Stream priority range (`least` is 0, `greatest` is negative).
    pub greatest_priority: i32,
    pub cursors: PoolCursors,
    streams: Vec<OnceLock<RawStream>>,
    create_lock: Mutex<()>,
    /// Internal non-blocking stream for zeroing new memory and for frees.
    pub side: RawStream,
    /// Free events, per flag: [no timing, timing].
    events: [Mutex<Vec<RawEvent>>; 2],
    /// Pinned host buffers for copies, each free or busy until an event.
    pub pinned: Mutex<Vec<(Pinned, Option<RawEvent>)>>,
    /// Loaded kernels, per (kernel name, PTX source address).
    pub functions: Mutex<HashMap<(&'static str, usize), Arc<Function>>>,
    /// Peers whose memory this context can access (enabled lazily).
    pub peers: Mutex<Vec<DeviceIndex>>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ctx(cuda:{})", self.index)
    }
}

static CTXS: OnceLock<Vec<OnceLock<std::result::Result<Ctx, Error>>>> = OnceLock::new();

/// The context of `device` (a checked CUDA device), created on first use.
pub(super) fn ctx(device: Device) -> Result<&'static Ctx> {
    let d = driver::driver().map_err(unavailable)?;
    let slots = CTXS.get_or_init(|| d.devices.iter().map(|_| OnceLock::new()).collect());
    let i = usize::try_from(device.index())
        .ok()
        .filter(|&i| i < slots.len())
        .ok_or_else(|| Error::invalid(format!("no CUDA device {device}")))?;
    slots[i]
        .get_or_init(|| Ctx::new(device.index(), &d.devices[i]))
        .as_ref()
        .map_err(Clone::clone)
}

/// Every context created so far.
pub(super) fn created() -> impl Iterator<Item = &'static Ctx> {
    CTXS.get()
        .into_iter()
        .flatten()
        .filter_map(|s| s.get().and_then(|r| r.as_ref().ok()))
}

impl Ctx {
    fn new(index: DeviceIndex, info: &'static DeviceInfo) -> Result<Ctx> {
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle; `info.dev` came from
        // cuDeviceGet. The primary context is retained for the process.
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, info.dev)
        })?;
        let raw = RawCtx(raw);
        let _scope = enter(raw)?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: writes two ints; a context is current.
        call("cuCtxGetStreamPriorityRange", || unsafe {
            sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
        })?;
        let range = usize::try_from(least.saturating_sub(greatest).saturating_add(1)).unwrap_or(1);
        let side = create_stream(0)?;
        Ok(Ctx {
            index,
            info,
            raw,
            greatest_priority: greatest,
            cursors: PoolCursors::new(range.min(MAX_PRIORITY_LEVELS)),
            streams: (0..MAX_PRIORITY_LEVELS * STREAMS_PER_POOL)
                .map(|_| OnceLock::new())
                .collect(),
            create_lock: Mutex::new(()),
            side,
            events: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
            pinned: Mutex::new(Vec::new()),
            functions: Mutex::new(HashMap::new()),
            peers: Mutex::new(Vec::new()),
        })
    }

    /// Makes this device's primary context current until the scope drops.
    pub fn scope(&self) -> Result<Scope> {
        enter(self.raw)
    }

    /// The native stream behind `id`: 0 is the legacy default stream; pool
    /// ids are created on first use (non-blocking, with the level's
    /// priority) and never destroyed.
    pub fn stream(&self, id: StreamId) -> Result<RawStream> {
        let (level, index) = match stream_kind(id) {
            StreamKind::Default => return Ok(RawStream(std::ptr::null_mut())),
            StreamKind::Pool { level, index } if usize::from(level) < self.cursors.levels() => {
                (usize::from(level), usize::from(index))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "expected the default stream (0) or a pool stream id of cuda:{} (levels 0..{}), found {id}",
                    self.index,
                    self.cursors.levels()
                )));
            }
        };
        let slot = &self.streams[level * STREAMS_PER_POOL + index];
        if let Some(s) = slot.get() {
            return Ok(*s);
        }
        let _lock = self.create_lock.lock().map_err(|_| poisoned())?;
        if let Some(s) = slot.get() {
            return Ok(*s);
        }
        let _scope = self.scope()?;
        // c10: level p gets priority -p, clamped to the device's range.
        let priority = (-(level as i32)).max(self.greatest_priority);
        let s = create_stream(priority)?;
        let _ = slot.set(s);
        Ok(s)
    }

    /// An event from the pool (or a new one); call inside a scope.
    pub fn take_event(&self, timing: bool) -> Result<RawEvent> {
        if let Some(e) = self.events[usize::from(timing)]
            .lock()
            .map_err(|_| poisoned())?
            .pop()
        {
            return Ok(e);
        }
        let flags = if timing {
            CUevent_flags::CU_EVENT_DEFAULT
        } else {
            CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle; a context is current.
        call("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut e, flags as u32)
        })?;
        Ok(RawEvent(e))
    }

    /// Returns an event to the pool. Re-recording a pooled event is safe:
    /// waits already enqueued on it captured its state when enqueued.
    pub fn give_event(&self, timing: bool, e: RawEvent) {
        if let Ok(mut pool) = self.events[usize::from(timing)].lock() {
            pool.push(e);
        }
    }

    /// Records a fresh no-timing event on `stream`; returns it (the caller
    /// gives it back to the pool when done with it).
    pub fn mark(&self, stream: RawStream) -> Result<RawEvent> {
        let e = self.take_event(false)?;
        // SAFETY: both handles belong to this (current) context.
        if let Err(err) = call("cuEventRecord", || unsafe {
            sys::cuEventRecord(e.0, stream.0)
        }) {
            self.give_event(false, e);
            return Err(err);
        }
        Ok(e)
    }
}

pub(super) fn poisoned() -> Error {
    Error::backend(super::TY, "internal lock poisoned by an earlier panic")
}

fn enter(raw: RawCtx) -> Result<Scope> {
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle (null when none is current).
    call("cuCtxGetCurrent", || unsafe {
        sys::cuCtxGetCurrent(&mut cur)
    })?;
    if cur == raw.0 {
        return Ok(Scope { previous: None });
    }
    // SAFETY: `raw` is a retained primary context, never released.
    call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(raw.0) })?;
    Ok(Scope {
        previous: Some(cur),
    })
}

/// Makes `raw` the thread's current context (no restore): what guards do.
pub(super) fn make_current(raw: RawCtx) -> Result<()> {
    // SAFETY: `raw` is a retained primary context, never released.
    call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(raw.0) })
}

fn create_stream(priority: i32) -> Result<RawStream> {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: writes one stream handle; a context is current.
    call("cuStreamCreateWithPriority", || unsafe {
        sys::cuStreamCreateWithPriority(
            &mut s,
            CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            priority,
        )
    })?;
    Ok(RawStream(s))
}
