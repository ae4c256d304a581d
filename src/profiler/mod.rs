//! The built-in profiler: every stream operation of every backend can be
//! recorded with host and device timestamps, exported as a trace that
//! Perfetto opens, or streamed live.
//!
//! ```
//! # fn main() -> keel::Result<()> {
//! let session = keel::profiler::start()?;
//! {
//!     let _r = keel::profiler::range("warm-up");
//!     let s = keel::get_stream_from_pool(keel::Device::cpu(), false)?;
//!     let b = keel::Buffer::from_slice(&s, &[1u32, 2, 3])?;
//!     s.synchronize()?;
//!     drop(b);
//! }
//! keel::profiler::mark("done");
//! let trace = session.stop();
//! assert!(trace.spans.iter().any(|s| s.name == "warm-up"));
//! # Ok(()) }
//! ```
//!
//! - Recording happens once, in the core's stream-operation path
//!   (`src/ops.rs`), never in a backend: see [`record`] for what is
//!   recorded, what it costs, and how device time is calibrated.
//! - The [trace model](trace) is the contract with viewers (the app reads
//!   nothing else).
//! - Sinks: the in-memory [`Trace`] a session returns, files ([`json`],
//!   [`native`]), and the live server.

mod check;
pub mod json;
pub mod live;
pub mod native;
pub mod record;
pub mod trace;

use std::borrow::Cow;
use std::time::Instant;

pub use native::{load_trace, save_trace};
pub use record::enabled;
pub use trace::*;

use crate::error::Result;

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
    let epoch = record::begin()?;
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
        record::end()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = record::end();
        }
    }
}

/// A named host range, recorded when the returned guard drops.
#[must_use = "the range ends when this guard drops"]
#[derive(Debug)]
pub struct Range {
    started: Option<(Cow<'static, str>, Instant)>,
}

/// Starts a named host range (a user annotation) on this thread; it ends
/// when the returned guard drops. With no session recording this is one
/// relaxed load (the name is not even converted).
#[inline]
pub fn range(name: impl Into<Cow<'static, str>>) -> Range {
    Range {
        started: enabled().then(|| (name.into(), Instant::now())),
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

/// Records a named instant (a user marker) on this thread.
pub fn mark(name: impl Into<String>) {
    if enabled() {
        record::mark(name.into());
    }
}
