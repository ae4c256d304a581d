//! [`DeviceTiming`]: what the profiler needs from a backend beyond events
//! (c10's `ProfilerStubs`, which c10 keeps apart from
//! `DeviceGuardImplInterface`). Guards, streams and events never call it;
//! only the profiler's recording does (`profiler/clock.rs`).
//!
//! It is optional: a backend registered without one
//! ([`register`](super::register)) is profiled with timed events recorded
//! around each operation and calibrated by paired sampling, which every
//! backend with timed events supports.

use std::time::Instant;

use super::EventHandle;
use crate::core::{DeviceIndex, Stream};
use crate::error::Result;

/// The profiler's hooks into a backend, registered per device type beside
/// its [`DeviceGuardImpl`](super::DeviceGuardImpl)
/// ([`register_timed`](super::register_timed),
/// [`timing`](super::timing)). Every method has a default that says the
/// backend cannot, which makes the profiler fall back to what the guard
/// interface alone offers.
pub trait DeviceTiming: Send + Sync + 'static {
    /// Starts timing, inside its own submissions, the device work that the
    /// calling thread enqueues on `stream` until
    /// [`end_timed_work`](Self::end_timed_work) (the profiler's device
    /// spans). Returns false when the backend cannot; the profiler then
    /// records timed events around the work instead.
    fn begin_timed_work(&self, stream: &Stream) -> Result<bool> {
        let _ = stream;
        Ok(false)
    }

    /// Ends what [`begin_timed_work`](Self::begin_timed_work) started: two
    /// timed events of the backend's guard implementation, usable like
    /// recorded ones (`query_event`, `elapsed_time`, `destroy_event`),
    /// whose timestamps bracket the work enqueued in between. `None` when
    /// no timing was started.
    fn end_timed_work(&self, stream: &Stream) -> Result<Option<(EventHandle, EventHandle)>> {
        let _ = stream;
        Ok(None)
    }

    /// Whether `stream`'s work runs inline on the thread that submits it,
    /// as the CPU's default stream does. The profiler then shows its
    /// device spans on a lane per submitting thread: work submitted from
    /// several threads overlaps in time. Default: no.
    fn runs_inline(&self, stream: &Stream) -> bool {
        let _ = stream;
        false
    }

    /// Reads device `device_index`'s timestamp clock directly (Vulkan's
    /// calibrated timestamps), between two host instants. `None` where the
    /// backend cannot; the profiler then calibrates by paired sampling.
    fn sample_clock(&self, device_index: DeviceIndex) -> Result<Option<ClockSample>> {
        let _ = device_index;
        Ok(None)
    }

    /// A completed timed event's timestamp in nanoseconds of the clock
    /// [`sample_clock`](Self::sample_clock) reads. `None` where the backend
    /// has no such clock.
    fn event_time_ns(&self, event: &EventHandle) -> Result<Option<i64>> {
        let _ = event;
        Ok(None)
    }
}

/// A device clock reading ([`DeviceTiming::sample_clock`]).
#[derive(Debug, Clone, Copy)]
pub struct ClockSample {
    /// The device's timestamp clock, in nanoseconds.
    pub device_ns: i64,
    /// A host instant before the reading was taken.
    pub host_before: Instant,
    /// A host instant after it.
    pub host_after: Instant,
    /// What the driver says the reading may deviate by, in nanoseconds.
    pub max_deviation_ns: u64,
}
