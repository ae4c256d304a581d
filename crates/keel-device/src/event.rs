//! [`Event`]: a marker in a stream, for synchronisation and timing (c10's
//! `Event` / `InlineEvent`).
//!
//! - The backend's event is created lazily, on the first record, and
//!   destroyed when the `Event` is dropped. Events move but do not copy.
//! - A never-recorded event is complete: `query` is true, and `block` and
//!   `synchronize` do nothing.
//! - `record` needs a stream of the event's device type; after the first
//!   record the event belongs to that stream's device, and recording on
//!   another device is an error.
//! - `elapsed_time` checks, in c10's order: same device type, both created
//!   with timing, both recorded, both completed. Then it asks the backend.
//! - `Event` is `Send`: record on one thread, wait on another.

use std::fmt;

use crate::backend::{DeviceGuardImpl, EventHandle, registry};
use crate::core::{DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::submit;

/// A marker in a stream: recorded on a stream, waited on, queried, and
/// (when timed) measured against another.
pub struct Event {
    id: u64,
    device_type: DeviceType,
    device_index: DeviceIndex,
    flag: EventFlag,
    was_marked_for_recording: bool,
    backend: Option<&'static dyn DeviceGuardImpl>,
    handle: Option<EventHandle>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("device_type", &self.device_type)
            .field("device_index", &self.device_index)
            .field("flag", &self.flag)
            .field("recorded", &self.was_marked_for_recording)
            .finish()
    }
}

impl Event {
    /// An event for devices of type `device_type`, without timing.
    pub fn new(device_type: DeviceType) -> Self {
        Self::with_flag(device_type, EventFlag::Default)
    }

    /// An event that records timestamps, for [`elapsed_time`](Self::elapsed_time).
    pub fn timed(device_type: DeviceType) -> Self {
        Self::with_flag(device_type, EventFlag::Timing)
    }

    /// An event with an explicit flag.
    pub fn with_flag(device_type: DeviceType, flag: EventFlag) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Event {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            device_type,
            device_index: -1,
            flag,
            was_marked_for_recording: false,
            backend: None,
            handle: None,
        }
    }

    /// A process-unique id (the profiler links records and waits by it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The device type.
    pub fn device_type(&self) -> DeviceType {
        self.device_type
    }

    /// The device index: `-1` until the first record.
    pub fn device_index(&self) -> DeviceIndex {
        self.device_index
    }

    /// The flag the event was created with.
    pub fn flag(&self) -> EventFlag {
        self.flag
    }

    /// Whether the event has been recorded at least once.
    pub fn was_marked_for_recording(&self) -> bool {
        self.was_marked_for_recording
    }

    /// The backend's event, once recorded (for backends).
    pub fn handle(&self) -> Option<&EventHandle> {
        self.handle.as_ref()
    }

    fn backend(&mut self) -> Result<&'static dyn DeviceGuardImpl> {
        match self.backend {
            Some(b) => Ok(b),
            None => {
                let b = registry::available_guard_impl(self.device_type)?;
                self.backend = Some(b);
                Ok(b)
            }
        }
    }

    /// Records the event on `stream`: it completes when the work enqueued on
    /// `stream` so far completes.
    pub fn record(&mut self, stream: &Stream) -> Result<()> {
        let backend = self.check_record(stream)?;
        submit::record_event(
            backend,
            self.id,
            &mut self.handle,
            stream,
            self.device_index,
            self.flag,
        )?;
        self.was_marked_for_recording = true;
        self.device_index = stream.device_index();
        Ok(())
    }

    fn check_record(&mut self, stream: &Stream) -> Result<&'static dyn DeviceGuardImpl> {
        if stream.device_type() != self.device_type {
            return Err(Error::invalid(format!(
                "Event device type {} does not match recording stream's device type {}.",
                self.device_type.name_upper(),
                stream.device_type().name_upper()
            )));
        }
        if self.device_index != -1 && self.device_index != stream.device_index() {
            return Err(Error::invalid(format!(
                "Event device index {} does not match recording stream's device index {}.",
                self.device_index,
                stream.device_index()
            )));
        }
        self.backend()
    }

    /// Records the event on `stream` unless it was recorded before.
    pub fn record_once(&mut self, stream: &Stream) -> Result<()> {
        if !self.was_marked_for_recording {
            self.record(stream)?;
        }
        Ok(())
    }

    /// Makes future work on `stream` wait for this event. Does not block
    /// the host. A never-recorded event does nothing.
    pub fn block(&self, stream: &Stream) -> Result<()> {
        let (Some(backend), Some(handle)) = (self.backend, &self.handle) else {
            return Ok(());
        };
        if stream.device_type() != self.device_type {
            return Err(Error::invalid(format!(
                "Event device type {} does not match blocking stream's device type {}.",
                self.device_type.name_upper(),
                stream.device_type().name_upper()
            )));
        }
        submit::block_on_event(backend, self.id, handle, stream)
    }

    /// Whether the work before the event has completed. Never blocks; true
    /// for a never-recorded event.
    pub fn query(&self) -> Result<bool> {
        match (self.backend, &self.handle) {
            (Some(backend), Some(handle)) => backend.query_event(handle),
            _ => Ok(true),
        }
    }

    /// Waits for the event to complete. Returns at once for a
    /// never-recorded event.
    pub fn synchronize(&self) -> Result<()> {
        match (self.backend, &self.handle) {
            (Some(backend), Some(handle)) => submit::synchronize_event(backend, handle),
            _ => Ok(()),
        }
    }

    /// Milliseconds from `self` to `end`, with c10's checks in c10's order.
    pub fn elapsed_time(&self, end: &Event) -> Result<f64> {
        if end.device_type != self.device_type {
            return Err(Error::invalid(format!(
                "Event device type {} does not match other's device type {}.",
                self.device_type.name_upper(),
                end.device_type.name_upper()
            )));
        }
        if !(self.flag.timing() && end.flag.timing()) {
            return Err(Error::invalid(
                "Both events must be created with argument 'enable_timing=True'.",
            ));
        }
        if !(self.was_marked_for_recording && end.was_marked_for_recording) {
            return Err(Error::invalid(
                "Both events must be recorded before calculating elapsed time.",
            ));
        }
        if !(self.query()? && end.query()?) {
            return Err(Error::invalid(
                "Both events must be completed before calculating elapsed time.",
            ));
        }
        if self.device_index != end.device_index {
            return Err(Error::invalid(format!(
                "Both events must be recorded on the same device to calculate elapsed time, found {}:{} and {}:{}",
                self.device_type, self.device_index, end.device_type, end.device_index
            )));
        }
        match (self.backend, &self.handle, &end.handle) {
            (Some(backend), Some(a), Some(b)) => backend.elapsed_time(a, b, self.device_index),
            _ => Err(Error::invalid(
                "Both events must be recorded before calculating elapsed time.",
            )),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let (Some(backend), Some(handle)) = (self.backend, self.handle.take()) {
            backend.destroy_event(handle, self.device_index);
        }
    }
}
