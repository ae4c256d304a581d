//! The built-in profiler: every stream operation of every backend can be
//! recorded with host and device timestamps, exported as a trace that
//! Perfetto opens, or streamed live.
//!
//! ```
//! # fn main() -> keel_device::Result<()> {
//! let session = keel_device::profiler::start()?;
//! {
//!     let _r = keel_device::profiler::range("warm-up");
//!     let s = keel_device::get_stream_from_pool(keel_device::Device::cpu(), false)?;
//!     let b = keel_device::Buffer::from_slice(&s, &[1u32, 2, 3])?;
//!     s.synchronize()?;
//!     drop(b);
//! }
//! keel_device::profiler::mark("done");
//! let trace = session.stop();
//! assert!(trace.spans.iter().any(|s| s.name == "warm-up"));
//! # Ok(()) }
//! ```
//!
//! Recording happens once, in the core's stream-operation path
//! (`submit.rs`), never in a backend. The profiler sits below the runtime
//! objects: it uses only the core values, the backend interface (events,
//! synchronisation and properties through the registry) and the error
//! type; `cargo xtask layers` checks this.
//!
//! # Layout
//! Recording, from the hooks to a finished trace:
//! - [`record`]: the hooks `submit.rs` calls, per-thread buffers, the shared
//!   state of device spans and event links, and the caching allocator's
//!   hook (`memory_event`); what recording costs.
//! - `clock`: timed backend events, one reference per device, and the
//!   calibration that maps device time onto the host clock.
//! - `assemble`: plain collected data in, a [`Trace`] (fragment) out; no
//!   clock, device or global touched.
//! - `collect`: a session's lifecycle (begin, flush, end) and the one path
//!   from what was recorded to the session's sink: the in-memory trace a
//!   [`Session`] returns, or the [live server](live).
//!
//! Traces, whoever made them, are the `keel-trace` crate's, re-exported
//! here: the model ([`model`], the contract with viewers: the app reads
//! nothing else), [`json`] (Chrome Trace Event JSON), [`native`] (Keel's
//! binary format) and, with the `import` feature, `file` (choosing a
//! format, saving, loading).
//! - [`live`]: the TCP server and client.
//! - `layer` (feature `tracing`): `TracingLayer`, which records any
//!   crate's `tracing` spans and events in the session.

mod assemble;
mod clock;
mod collect;
#[cfg(feature = "tracing")]
mod layer;
pub mod live;
pub mod record;
mod stamp;

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Instant;

use self::stamp::Stamp;

#[cfg(feature = "import")]
pub use keel_trace::{file, load_trace, load_traces, save_trace};
pub use keel_trace::{json, model, model::*, native};
#[cfg(feature = "tracing")]
pub use layer::TracingLayer;
pub use record::enabled;

use crate::error::Result;

/// The library's unit tests that start a session hold this exclusively,
/// and those that allocate device memory hold it shared: a session records
/// every allocator event of the process.
#[cfg(test)]
pub(crate) static TEST_SESSION: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A recording session; [`stop`](Session::stop) it to get the trace.
/// Dropping it without stopping discards what it recorded.
#[derive(Debug)]
#[must_use = "a session records until stopped; call .stop() to get the trace"]
pub struct Session {
    stopped: bool,
    epoch: Instant,
}

/// Starts recording every stream operation of every backend. Only one
/// session records at a time.
pub fn start() -> Result<Session> {
    let epoch = collect::begin(Box::new(collect::TraceSink::default()))?;
    *lock_step() = StepState::default();
    Ok(Session {
        stopped: false,
        epoch,
    })
}

impl Session {
    /// Now, in the trace's time base (ns since the session started).
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Stops recording and returns the trace: host spans per thread, device
    /// spans per stream (mapped onto the host clock), flows, memory
    /// counters. Waits for the devices used to finish the recorded work.
    pub fn stop(mut self) -> Trace {
        self.stopped = true;
        end_step();
        collect::end()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = collect::end();
        }
    }
}

/// A named host range, recorded when the returned guard drops.
#[must_use = "the range ends when this guard drops"]
#[derive(Debug)]
pub struct Range {
    started: Option<(Cow<'static, str>, Stamp)>,
}

/// Starts a named host range (a user annotation) on this thread; it ends
/// when the returned guard drops. With no session recording this is one
/// relaxed load (the name is not even converted).
#[inline]
pub fn range(name: impl Into<Cow<'static, str>>) -> Range {
    Range {
        started: enabled().then(|| (name.into(), Stamp::now())),
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if let Some((name, start)) = self.started.take()
            && enabled()
        {
            record::range(name, start);
        }
    }
}

/// A named range of a stream's device time (a user annotation on the
/// stream's lane), recorded when the returned guard drops: it covers the
/// work enqueued on `stream` between the call and the drop, whoever
/// enqueued it (Keel, or a program on a stream Keel adopted, such as a
/// CUDA stream of its own: `interop::cuda::adopt_stream`). Timed by two
/// timed events of the stream's backend; ranges nest. With no session
/// recording this is one relaxed load; a stream whose device cannot time
/// gets no range, counted in [`Trace::dropped`].
pub fn device_range(
    stream: &crate::core::Stream,
    name: impl Into<Cow<'static, str>>,
) -> DeviceRange {
    if !enabled() {
        return DeviceRange { started: None };
    }
    let start = clock::TimedEvent::record(stream);
    if start.is_none() {
        record::device_spans_lost(1);
    }
    DeviceRange {
        started: start.map(|e| (*stream, name.into(), e)),
    }
}

/// A device range in progress ([`device_range`]); it ends when dropped.
#[must_use = "the device range ends when this guard drops"]
pub struct DeviceRange {
    started: Option<(crate::core::Stream, Cow<'static, str>, clock::TimedEvent)>,
}

impl std::fmt::Debug for DeviceRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceRange")
            .field("stream", &self.started.as_ref().map(|s| s.0))
            .field("name", &self.started.as_ref().map(|s| &s.1))
            .finish()
    }
}

impl Drop for DeviceRange {
    fn drop(&mut self) {
        let Some((stream, name, start)) = self.started.take() else {
            return;
        };
        match clock::TimedEvent::record(&stream) {
            Some(end) if enabled() => record::annotations(&stream, vec![(name, start, end)]),
            Some(_) => {}
            None => record::device_spans_lost(1),
        }
    }
}

/// Records a named instant (a user marker) on this thread.
pub fn mark(name: impl Into<String>) {
    if enabled() {
        record::mark(name.into());
    }
}

/// The training step being recorded (see [`step`]).
#[derive(Default)]
struct StepState {
    /// The next step's number.
    next: u64,
    /// The step in progress: its number and start.
    open: Option<(u64, Stamp)>,
}

static STEP: Mutex<StepState> = Mutex::new(StepState {
    next: 0,
    open: None,
});

fn lock_step() -> std::sync::MutexGuard<'static, StepState> {
    STEP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks a step boundary, as PyTorch's `profiler.step()` does: ends the
/// step in progress, recording it as a host range named `ProfilerStep#N`
/// (N counts from 0 in each session) on this thread, and starts the next.
/// [`Session::stop`] ends the last one. Tools that analyse training steps
/// (HolisticTraceAnalysis's temporal breakdown, for one) place work in
/// steps by these ranges. With no session recording this is one relaxed
/// load.
pub fn step() {
    if !enabled() {
        return;
    }
    let now = Stamp::now();
    let mut state = lock_step();
    if let Some((n, start)) = state.open.take() {
        record::range_between(Cow::Owned(format!("ProfilerStep#{n}")), start, now);
    }
    let n = state.next;
    state.next += 1;
    state.open = Some((n, now));
}

/// Ends the step in progress, if any (at [`Session::stop`]).
fn end_step() {
    let open = lock_step().open.take();
    if let Some((n, start)) = open
        && enabled()
    {
        record::range(Cow::Owned(format!("ProfilerStep#{n}")), start);
    }
}
