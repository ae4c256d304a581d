//! Host events: complete when their stream reaches the point of the last
//! record, and keep the host time of that moment for `elapsed_time`.

use std::sync::Arc;

use super::HostBackend;
use super::stream::{HostStream, Marker};
use crate::backend::typed::Events;
use crate::error::{Error, Result};

/// An event on host streams: completes when its stream reaches the point
/// of the last `record`, and remembers the host time of that moment.
#[derive(Debug, Clone)]
pub struct HostEvent {
    marker: Arc<Marker>,
}

impl HostEvent {
    /// Records on `stream`: the event completes when the stream's work
    /// submitted so far has run.
    pub fn record(stream: &HostStream) -> Self {
        let marker = Arc::new(Marker::default());
        stream.submit_marker(Arc::clone(&marker));
        HostEvent { marker }
    }

    /// Makes later work on `stream` wait for this event.
    pub fn block(&self, stream: &HostStream) -> Result<()> {
        if self.query() {
            return Ok(());
        }
        let m = Arc::clone(&self.marker);
        stream.submit(Box::new(move || {
            m.wait();
            Ok(())
        }))
    }

    /// Whether the event has completed. Never blocks.
    pub fn query(&self) -> bool {
        self.marker.time().is_some()
    }

    /// Waits for the event.
    pub fn synchronize(&self) {
        self.marker.wait();
    }

    /// Milliseconds from `self` to `end` (negative if `end` came first).
    /// `None` while either has not completed.
    pub fn elapsed_ms(&self, end: &HostEvent) -> Option<f64> {
        let (a, b) = (self.marker.time()?, end.marker.time()?);
        Some(if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        })
    }
}

impl<B: HostBackend> Events for B {
    type Event = HostEvent;

    fn record_event(
        &self,
        stream: &'static HostStream,
        event: &mut Option<HostEvent>,
        _timing: bool,
    ) -> Result<()> {
        *event = Some(HostEvent::record(stream));
        Ok(())
    }
    fn wait_event(&self, event: &HostEvent, stream: &'static HostStream) -> Result<()> {
        event.block(stream)
    }
    fn event_done(&self, event: &HostEvent) -> Result<bool> {
        Ok(event.query())
    }
    fn wait_event_host(&self, event: &HostEvent) -> Result<()> {
        event.synchronize();
        Ok(())
    }
    fn elapsed_ms(&self, start: &HostEvent, end: &HostEvent) -> Result<f64> {
        start.elapsed_ms(end).ok_or_else(|| {
            Error::invalid("Both events must be completed before calculating elapsed time.")
        })
    }
}
