//! Host events: complete when their stream reaches the point of the last
//! record; timed ones keep the host time of that moment for
//! `elapsed_time`.

use std::sync::Arc;

use super::HostBackend;
use super::stream::{HostStream, Marker, Position};
use crate::backend::typed::{Events, Timing};
use crate::error::{Error, Result};

/// An event on host streams: completes when its stream reaches the point
/// of the last `record`. A timed record also remembers the host time of
/// that moment (a marker in the stream's queue); an untimed one is only a
/// position in the stream's order, recorded and queried without a lock
/// or an allocation.
#[derive(Debug, Clone)]
pub struct HostEvent {
    point: Point,
}

#[derive(Debug, Clone)]
enum Point {
    /// Recorded where everything before had already run, untimed.
    Reached,
    /// Untimed: the stream's position at the record.
    Position(Position),
    /// Timed: a marker the stream completes with the host time.
    Marker(Arc<Marker>),
}

impl HostEvent {
    /// Records on `stream`: the event completes when the stream's work
    /// submitted so far has run; with `timing`, it keeps the host time of
    /// that moment.
    pub fn record(stream: &HostStream, timing: bool) -> Self {
        let point = if timing {
            let marker = Arc::new(Marker::default());
            stream.submit_marker(Arc::clone(&marker));
            Point::Marker(marker)
        } else {
            stream.position().map_or(Point::Reached, Point::Position)
        };
        HostEvent { point }
    }

    /// Makes later work on `stream` wait for this event.
    pub fn block(&self, stream: &HostStream) -> Result<()> {
        if self.query() {
            return Ok(());
        }
        let this = self.clone();
        stream.submit(Box::new(move || {
            this.synchronize();
            Ok(())
        }))
    }

    /// Whether the event has completed. Never blocks.
    pub fn query(&self) -> bool {
        match &self.point {
            Point::Reached => true,
            Point::Position(p) => p.reached(),
            Point::Marker(m) => m.time().is_some(),
        }
    }

    /// Waits for the event.
    pub fn synchronize(&self) {
        match &self.point {
            Point::Reached => {}
            Point::Position(p) => p.wait(),
            Point::Marker(m) => {
                m.wait();
            }
        }
    }

    /// Milliseconds from `self` to `end` (negative if `end` came first).
    /// `None` while either has not completed or was recorded untimed.
    pub fn elapsed_ms(&self, end: &HostEvent) -> Option<f64> {
        let time = |e: &HostEvent| match &e.point {
            Point::Marker(m) => m.time(),
            Point::Reached | Point::Position(_) => None,
        };
        let (a, b) = (time(self)?, time(end)?);
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
        timing: bool,
    ) -> Result<()> {
        *event = Some(HostEvent::record(stream, timing));
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

impl<B: HostBackend> Timing for B {
    /// Times the operation inside its own tasks (`HostStream::begin_timed`):
    /// no marker enters the stream's queue for it.
    fn begin_timed_work(&self, stream: &'static HostStream) -> Result<bool> {
        stream.begin_timed();
        Ok(true)
    }

    /// The default stream runs its work on the submitting thread.
    fn runs_inline(&self, stream: &'static HostStream) -> bool {
        stream.is_inline()
    }

    fn end_timed_work(
        &self,
        stream: &'static HostStream,
    ) -> Result<Option<(HostEvent, HostEvent)>> {
        Ok(stream.end_timed().map(|(start, end)| {
            (
                HostEvent {
                    point: Point::Marker(start),
                },
                HostEvent {
                    point: Point::Marker(end),
                },
            )
        }))
    }
}
