//! Device clocks: timed events through the backend interface, one
//! reference event per device, device spans as offsets from it, and the
//! calibration that places the reference on the host clock.
//!
//! # Device time
//! Device spans come from timed events, the one timing mechanism every
//! backend has (Vulkan and wgpu timestamp queries, CUDA events, the host
//! clock on CPU). Where the backend can, the two events of an operation's
//! span are written inside the operation's own work
//! ([`DeviceTiming::begin_timed_work`]; Vulkan: timestamps in its
//! command buffers; wgpu: in the launch's compute pass or the operation's
//! own `queue.submit`; host streams: the start of the operation's first
//! task and the end of its last), so profiling adds no submissions and no
//! queue items; elsewhere a timed event is recorded before and after it
//! ([`SpanTiming`]). Per device, the first operation of a session records a
//! *reference* event; every device span is stored as an offset from it
//! (`elapsed_time`). To place the reference on the host clock, a
//! calibration event is recorded and polled: its device timestamp lies
//! between the host instant of the record call and the first poll that sees
//! it complete. The midpoint of that host interval maps device time onto
//! the host clock; half its width is the error bound stored in the trace
//! ([`Calibration`](super::Calibration)). A device is calibrated at the
//! first collection after its first operation: a live server's periodic
//! collections do not wait for the device; the last collection of a
//! session first makes the device idle, which keeps the interval short
//! (tens of microseconds on the software drivers here). Where the backend
//! reads its device clock directly (Vulkan's calibrated timestamps), that
//! reading replaces the event pair: a microsecond-wide host interval and
//! no wait for the device. Drift: a device is calibrated again at
//! collections at least [`RECALIBRATE_EVERY`] apart (direct readings only,
//! and at the session's end), and the assembler interpolates between its
//! samples. Backends whose events cannot time produce host spans only.
//!
//! The profiler's own events go straight to the backend
//! ([`DeviceGuardImpl`]): they are not stream operations of the program, so
//! they are neither recorded nor subject to launch blocking. Timing inside
//! the work and reading the device clock go through the backend's
//! [`DeviceTiming`], where it registered one; without one, timed events
//! around each operation and paired sampling serve every backend.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::assemble::{ClockBase, ClockMethod, Detail, DeviceSpan};
use crate::backend::{ClockSample, DeviceGuardImpl, DeviceTiming, EventHandle, registry};
use crate::core::{Device, DeviceIndex, EventFlag, Stream};
use keel_trace::SpanKind;

/// The least time between two calibrations of one device.
pub(super) const RECALIBRATE_EVERY: Duration = Duration::from_secs(10);

/// A timed backend event, recorded once, destroyed when dropped.
pub(super) struct TimedEvent {
    backend: &'static dyn DeviceGuardImpl,
    /// Always `Some` outside `record` and `drop`.
    handle: Option<EventHandle>,
    device_index: DeviceIndex,
}

impl TimedEvent {
    /// Records a timed event on `stream`. `None` when the backend cannot
    /// (no backend, no timing).
    pub(super) fn record(stream: &Stream) -> Option<TimedEvent> {
        let backend = registry::available_guard_impl(stream.device_type()).ok()?;
        let mut event = TimedEvent {
            backend,
            handle: None,
            device_index: stream.device_index(),
        };
        // A new event has no device yet: index -1 (c10's convention).
        backend
            .record(&mut event.handle, stream, -1, EventFlag::Timing)
            .ok()?;
        event.handle.is_some().then_some(event)
    }

    /// An event the backend made (one of a timed-work pair, or a scope's
    /// on a program's own work).
    pub(super) fn made(
        backend: &'static dyn DeviceGuardImpl,
        handle: EventHandle,
        device_index: DeviceIndex,
    ) -> TimedEvent {
        TimedEvent {
            backend,
            handle: Some(handle),
            device_index,
        }
    }

    fn handle(&self) -> Option<&EventHandle> {
        self.handle.as_ref()
    }

    /// Whether the work before the event has completed. Never blocks.
    pub(super) fn query(&self) -> bool {
        self.handle()
            .is_some_and(|h| matches!(self.backend.query_event(h), Ok(true)))
    }

    /// Waits for the event (errors are ignored: the span is then dropped
    /// when its time cannot be read).
    fn synchronize(&self) {
        if let Some(h) = self.handle() {
            let _ = self.backend.synchronize_event(h);
        }
    }

    /// Nanoseconds from `self` to `end`, when both have completed.
    fn ns_until(&self, end: &TimedEvent) -> Option<i64> {
        if !(self.query() && end.query()) {
            return None;
        }
        let ms = self
            .backend
            .elapsed_time(self.handle()?, end.handle()?, self.device_index)
            .ok()?;
        Some(ms_to_ns(ms))
    }
}

impl Drop for TimedEvent {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.backend.destroy_event(handle, self.device_index);
        }
    }
}

fn ms_to_ns(ms: f64) -> i64 {
    (ms * 1e6).round() as i64
}

fn ns_since(epoch: Instant, t: Instant) -> i64 {
    t.saturating_duration_since(epoch).as_nanos() as i64
}

/// A device's time base: its reference event and the stream it was
/// recorded on (where calibration events go).
pub(super) struct DeviceClock {
    reference: TimedEvent,
    /// The backend's profiler hooks, where it has them.
    timing: Option<&'static dyn DeviceTiming>,
    stream: Stream,
    /// Once the reference has completed: its timestamp on the device
    /// clock, where the backend reads those (`event_time_ns`), else `None`.
    reference_time: OnceLock<Option<i64>>,
}

/// Per device, its clock once one was made; `None` when the device's
/// events cannot time (its operations then have host spans only).
pub(super) type Clocks = FxHashMap<Device, Option<Arc<DeviceClock>>>;

impl DeviceClock {
    /// Records the reference event of `stream`'s device.
    pub(super) fn new(stream: &Stream) -> Option<DeviceClock> {
        Some(DeviceClock {
            reference: TimedEvent::record(stream)?,
            timing: registry::timing(stream.device_type()).ok(),
            stream: *stream,
            reference_time: OnceLock::new(),
        })
    }

    /// Nanoseconds from the reference to `event`, which has completed.
    /// Where the backend reads event times directly, one read of the
    /// event's timestamp (the reference's is read once); otherwise
    /// `elapsed_time`.
    fn offset_of(&self, event: &TimedEvent) -> Option<i64> {
        let reference_time = match self.reference_time.get() {
            Some(t) => *t,
            None if self.reference.query() => {
                let handle = self.reference.handle()?;
                let t = self
                    .timing
                    .and_then(|timing| timing.event_time_ns(handle).ok().flatten());
                *self.reference_time.get_or_init(|| t)
            }
            None => return None,
        };
        if let (Some(r), Some(timing)) = (reference_time, self.timing)
            && let Ok(Some(t)) = timing.event_time_ns(event.handle()?)
        {
            return Some(t - r);
        }
        let ms = self
            .reference
            .backend
            .elapsed_time(
                self.reference.handle()?,
                event.handle()?,
                event.device_index,
            )
            .ok()?;
        Some(ms_to_ns(ms))
    }

    /// Calibrates the clock without blocking any stream: records a
    /// calibration event and polls it; the device time of its timestamp
    /// lies between the record call and the first poll that saw it
    /// complete. With `idle_first`, the device is synchronized first,
    /// which tightens the pair (the event then completes as soon as it
    /// runs). `epoch` is the session's.
    ///
    /// Where the backend reads its device clock directly
    /// ([`DeviceTiming::sample_clock`]), that reading is used instead:
    /// no event, no wait for the device, and a much tighter bound. With
    /// `direct_only`, a device without one is not calibrated (periodic
    /// re-calibration must not wait for a busy device).
    pub(super) fn calibrate(
        &self,
        epoch: Instant,
        idle_first: bool,
        direct_only: bool,
    ) -> Option<ClockBase> {
        match self.calibrate_direct(epoch, idle_first) {
            Direct::Done(base) => return Some(base),
            Direct::NotYet => return None,
            Direct::Unsupported if direct_only => return None,
            Direct::Unsupported => {}
        }
        if idle_first {
            self.reference
                .backend
                .synchronize_device(self.stream.device_index())
                .ok()?;
        }
        // The event's device timestamp is written after this instant...
        let before = Instant::now();
        let cal = TimedEvent::record(&self.stream)?;
        let mut polls = 0u32;
        // ...and before the first poll that sees it complete. (Polls that
        // see it incomplete prove nothing: completion is signalled after
        // the timestamp is written, sometimes milliseconds later.)
        let after = loop {
            if cal.backend.query_event(cal.handle()?).ok()? {
                break Instant::now();
            }
            polls += 1;
            if polls > 2_000 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        };
        let offset = self.reference.ns_until(&cal)?;
        let (h0, h1) = (ns_since(epoch, before), ns_since(epoch, after));
        let mid = h0 + (h1 - h0) / 2;
        Some(ClockBase {
            reference_ns: mid - offset,
            error_bound_ns: ((h1 - h0) / 2) as u64,
            at_off: offset,
            method: ClockMethod::PairedSampling,
        })
    }

    /// Calibrates from a direct reading of the device clock, taken between
    /// two host instants; the bound is half their distance plus the
    /// driver's stated deviation.
    fn calibrate_direct(&self, epoch: Instant, idle_first: bool) -> Direct {
        let Some(timing) = self.timing else {
            return Direct::Unsupported;
        };
        let index = self.stream.device_index();
        let Some(reference) = self.reference.handle() else {
            return Direct::Unsupported;
        };
        // The tightest of a few readings: one may be stretched by the
        // thread being preempted between its host instants.
        let width = |s: &ClockSample| {
            s.host_after
                .saturating_duration_since(s.host_before)
                .as_nanos() as u64
                + 2 * s.max_deviation_ns
        };
        let mut best: Option<ClockSample> = None;
        for _ in 0..DIRECT_SAMPLES {
            match timing.sample_clock(index) {
                Ok(Some(sample)) => {
                    if best.is_none_or(|b| width(&sample) < width(&b)) {
                        best = Some(sample);
                    }
                }
                Ok(None) | Err(_) => return Direct::Unsupported,
            }
        }
        let Some(sample) = best else {
            return Direct::Unsupported;
        };
        if !self.reference.query() {
            if !idle_first {
                return Direct::NotYet;
            }
            self.reference.synchronize();
        }
        let Ok(Some(reference_device_ns)) = timing.event_time_ns(reference) else {
            return Direct::Unsupported;
        };
        let (h0, h1) = (
            ns_since(epoch, sample.host_before),
            ns_since(epoch, sample.host_after),
        );
        let mid = h0 + (h1 - h0) / 2;
        let offset = sample.device_ns - reference_device_ns;
        Direct::Done(ClockBase {
            reference_ns: mid - offset,
            error_bound_ns: ((h1 - h0) / 2) as u64 + sample.max_deviation_ns,
            at_off: offset,
            method: ClockMethod::Calibrated,
        })
    }
}

/// Direct clock readings per calibration (the tightest is kept).
const DIRECT_SAMPLES: usize = 16;

/// The outcome of a direct calibration.
enum Direct {
    Done(ClockBase),
    /// The reference event has not completed yet.
    NotYet,
    /// The backend cannot read its clock directly.
    Unsupported,
}

/// How a stream operation's device span is being timed.
pub(super) enum SpanTiming {
    /// The backend writes the timestamps into the operation's own
    /// submissions ([`DeviceTiming::begin_timed_work`]); `guard` owns the
    /// events it makes.
    InWork {
        guard: &'static dyn DeviceGuardImpl,
        timing: &'static dyn DeviceTiming,
    },
    /// A timed event recorded before the operation; another is recorded
    /// after it.
    Around(TimedEvent),
}

impl SpanTiming {
    /// Starts timing the operation the calling thread enqueues next on
    /// `stream`. `None` when the backend cannot time it.
    pub(super) fn begin(stream: &Stream) -> Option<SpanTiming> {
        let ty = stream.device_type();
        let guard = registry::available_guard_impl(ty).ok()?;
        match registry::timing(ty).map(|t| (t, t.begin_timed_work(stream))) {
            Ok((timing, Ok(true))) => Some(SpanTiming::InWork { guard, timing }),
            _ => TimedEvent::record(stream).map(SpanTiming::Around),
        }
    }

    /// Whether the operation ran inline on the calling thread
    /// ([`DeviceTiming::runs_inline`]).
    pub(super) fn inline(&self, stream: &Stream) -> bool {
        match self {
            SpanTiming::InWork { timing, .. } => timing.runs_inline(stream),
            SpanTiming::Around(_) => false,
        }
    }

    /// The operation's start and end events.
    pub(super) fn finish(self, stream: &Stream) -> Option<(TimedEvent, TimedEvent)> {
        match self {
            SpanTiming::InWork { guard, timing } => {
                let (start, end) = timing.end_timed_work(stream).ok()??;
                let index = stream.device_index();
                Some((
                    TimedEvent::made(guard, start, index),
                    TimedEvent::made(guard, end, index),
                ))
            }
            SpanTiming::Around(start) => Some((start, TimedEvent::record(stream)?)),
        }
    }
}

/// A device span waiting for its two events.
pub(super) struct PendingSpan {
    pub op: u64,
    pub stream: Stream,
    /// The thread that ran it, for work run inline (else 0).
    pub thread: u64,
    pub kind: SpanKind,
    pub name: Cow<'static, str>,
    pub start: TimedEvent,
    pub end: TimedEvent,
    pub detail: Detail,
}

/// Device spans waiting for their events, per stream in the order they
/// were enqueued: a stream's work completes in order, so a resolution
/// pass looks at each stream's oldest spans only, and stops at the first
/// that has not completed (it costs what it resolves, not what waits).
#[derive(Default)]
pub(super) struct PendingSpans {
    streams: FxHashMap<Stream, VecDeque<PendingSpan>>,
    len: usize,
}

impl PendingSpans {
    /// Adds `span` behind its stream's earlier ones.
    pub(super) fn push(&mut self, span: PendingSpan) {
        self.streams.entry(span.stream).or_default().push_back(span);
        self.len += 1;
    }

    /// How many spans wait.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Moves the spans whose events have completed (all of them, waiting,
    /// when `wait`) into `out` as offsets from their device's reference
    /// event. A span whose times cannot be read is dropped; returns how
    /// many were (the caller counts them with the session's dropped
    /// records).
    pub(super) fn resolve(
        &mut self,
        clocks: &Clocks,
        wait: bool,
        out: &mut Vec<DeviceSpan>,
    ) -> u64 {
        let mut lost = 0;
        for queue in self.streams.values_mut() {
            while let Some(p) = queue.front() {
                if wait {
                    p.end.synchronize();
                } else if !p.end.query() {
                    break;
                }
                let Some(p) = queue.pop_front() else { break };
                self.len -= 1;
                let Some(Some(clock)) = clocks.get(&p.stream.device()) else {
                    continue;
                };
                // The end has completed, and with it the start (earlier on
                // the same stream).
                let (Some(start_off), Some(end_off)) =
                    (clock.offset_of(&p.start), clock.offset_of(&p.end))
                else {
                    lost += 1;
                    continue;
                };
                out.push(DeviceSpan {
                    op: p.op,
                    stream: p.stream,
                    thread: p.thread,
                    kind: p.kind,
                    name: p.name,
                    start_off,
                    end_off,
                    detail: p.detail,
                });
            }
        }
        self.streams.retain(|_, q| !q.is_empty());
        lost
    }
}
