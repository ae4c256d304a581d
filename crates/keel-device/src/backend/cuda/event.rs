//! CUDA events: `cuEventRecord` on a pooled native event, created with
//! `CU_EVENT_DISABLE_TIMING` unless timing is asked for.
//!
//! Each device keeps a pool of free events per flag; an event's first
//! record takes one, later records reuse it (as c10 reuses one
//! `cudaEvent_t`), and releasing the event gives it back. The same pool
//! serves the backend's own markers (the end of a copy that staging memory
//! waits for).

use std::fmt;
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUevent_flags};

use super::Cuda;
use super::device::{Ctx, poisoned};
use super::loader::{call, ready};
use super::stream::{CudaStream, RawStream};
use crate::backend::typed::{Events, Timing};
use crate::error::{Error, Result};

/// A CUDA event handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawEvent(pub sys::CUevent);
// SAFETY: CUDA events are driver objects usable from any thread.
unsafe impl Send for RawEvent {}
// SAFETY: as above.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// Records the event on `stream`; call inside their context's scope.
    pub fn record(self, stream: RawStream) -> Result<()> {
        // SAFETY: event and stream belong to the current context.
        call("cuEventRecord", || unsafe {
            sys::cuEventRecord(self.0, stream.0)
        })
    }

    /// Whether the event has completed. Never blocks; call inside its
    /// context's scope.
    pub fn query(self) -> Result<bool> {
        // SAFETY: a live event of the current context.
        ready("cuEventQuery", || unsafe { sys::cuEventQuery(self.0) })
    }

    /// Waits for the event; call inside its context's scope.
    pub fn synchronize(self) -> Result<()> {
        // SAFETY: a live event of the current context.
        call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(self.0)
        })
    }
}

/// A device's free events, per flag: [no timing, timing].
#[derive(Debug, Default)]
pub(super) struct EventPool {
    free: [Mutex<Vec<RawEvent>>; 2],
}

impl EventPool {
    /// An event from the pool (or a new one); call inside the device's
    /// scope.
    pub fn take(&self, timing: bool) -> Result<RawEvent> {
        if let Some(e) = self.free[usize::from(timing)]
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
    pub fn give(&self, timing: bool, e: RawEvent) {
        if let Ok(mut pool) = self.free[usize::from(timing)].lock() {
            pool.push(e);
        }
    }

    /// Records a no-timing event from the pool on `stream` (of the current
    /// context) and returns it; the caller gives it back when done.
    pub fn mark(&self, stream: RawStream) -> Result<RawEvent> {
        let e = self.take(false)?;
        if let Err(err) = e.record(stream) {
            self.give(false, e);
            return Err(err);
        }
        Ok(e)
    }
}

/// A recorded CUDA event (c10 reuses one `cudaEvent_t` across records).
pub struct CudaEvent {
    ctx: &'static Ctx,
    raw: RawEvent,
    timing: bool,
}

impl CudaEvent {
    /// The driver's event.
    pub(super) fn raw(&self) -> sys::CUevent {
        self.raw.0
    }
}

impl fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaEvent")
            .field("device", &self.ctx.index)
            .field("timing", &self.timing)
            .finish()
    }
}

impl Events for Cuda {
    type Event = CudaEvent;

    /// Records the event's native event on a later record, a pooled one on
    /// the first.
    fn record_event(
        &self,
        stream: CudaStream,
        event: &mut Option<CudaEvent>,
        timing: bool,
    ) -> Result<()> {
        let c = stream.ctx;
        let _scope = c.scope()?;
        if let Some(e) = event {
            return e.raw.record(stream.raw);
        }
        let raw = c.events.take(timing)?;
        if let Err(e) = raw.record(stream.raw) {
            c.events.give(timing, raw);
            return Err(e);
        }
        *event = Some(CudaEvent {
            ctx: c,
            raw,
            timing,
        });
        Ok(())
    }

    /// `cuStreamWaitEvent`, also across devices.
    fn wait_event(&self, event: &CudaEvent, stream: CudaStream) -> Result<()> {
        let _scope = stream.ctx.scope()?;
        stream.raw.wait(event.raw)
    }

    fn event_done(&self, event: &CudaEvent) -> Result<bool> {
        let _scope = event.ctx.scope()?;
        event.raw.query()
    }

    fn wait_event_host(&self, event: &CudaEvent) -> Result<()> {
        let _scope = event.ctx.scope()?;
        event.raw.synchronize()
    }

    /// `cuEventElapsedTime`.
    fn elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
        if !start.timing || !end.timing {
            return Err(Error::invalid(
                "Both events must be created with argument 'enable_timing=True'.",
            ));
        }
        let _scope = start.ctx.scope()?;
        let mut ms = 0f32;
        let (a, b) = (start.raw.0, end.raw.0);
        // SAFETY: writes one float; both events are live timing events.
        call("cuEventElapsedTime", || unsafe {
            sys::cuEventElapsedTime(&mut ms, a, b)
        })?;
        Ok(f64::from(ms))
    }

    /// Gives the native event back to its device's pool.
    fn release_event(&self, event: CudaEvent) {
        event.ctx.events.give(event.timing, event.raw);
    }
}

/// CUDA events time the profiler's spans from outside the work (recorded
/// around it), and the driver reads no host-correlated device clock: the
/// profiler's defaults.
impl Timing for Cuda {}
