//! Collecting: a session's lifecycle, and the one path from what the hooks
//! recorded to the session's [`Sink`].
//!
//! [`begin`] switches recording on with a sink; [`flush`] collects what
//! was recorded since the previous collection and emits it as a fragment;
//! [`end`] switches recording off, collects the rest (waiting for the
//! devices) and returns what the sink made of it. Every collection does
//! the same steps:
//!
//! 1. take the gathered device-side data (resolving device spans whose
//!    events completed; all of them, waiting, on the last collection);
//! 2. describe devices seen for the first time (name and properties from
//!    the backend's runtime) and calibrate clocks made since the previous
//!    collection (see [`clock`](super::clock)), outside the recorder's
//!    lock so recording threads never wait for it;
//! 3. take every thread's host records;
//! 4. [assemble](super::assemble) the batch and hand the fragment to the
//!    sink.
//!
//! Sinks: [`TraceSink`] for a [`Session`](super::Session) (it keeps the
//! fragments as one trace), and the live server's, which sends each one to
//! its viewers. A session is collected once, when it stops; a live server
//! also every interval.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::assemble::{Assembler, Collected, DeviceInfo, DeviceSpan, HostThread};
use super::clock::{DeviceClock, RECALIBRATE_EVERY};
use super::record::{self, Gathered, MemoryRecord, lock};
use super::stamp::{Stamp, StampMap};
use crate::backend::registry;
use crate::core::Device;
use crate::error::{Error, Result};
use keel_trace::{TRACE_VERSION, Trace};

/// Where a session's fragments go.
pub(super) trait Sink: Send {
    /// Takes one fragment: what was recorded since the previous one, with
    /// its own device and lane tables.
    fn emit(&mut self, fragment: Trace);

    /// The session ended (after the last fragment): what
    /// [`Session::stop`](super::Session::stop) returns.
    fn finish(self: Box<Self>) -> Trace;
}

/// The sink of a [`Session`](super::Session): its fragments as one trace.
#[derive(Debug, Default)]
pub(super) struct TraceSink {
    trace: Option<Trace>,
}

impl Sink for TraceSink {
    fn emit(&mut self, fragment: Trace) {
        match &mut self.trace {
            None => self.trace = Some(fragment),
            Some(trace) => {
                // Fragments from the assembler are well formed.
                let merged = trace.merge(fragment);
                debug_assert!(merged.is_ok(), "{merged:?}");
            }
        }
    }

    fn finish(self: Box<Self>) -> Trace {
        self.trace.unwrap_or_else(empty)
    }
}

fn empty() -> Trace {
    Trace {
        version: TRACE_VERSION,
        ..Trace::default()
    }
}

/// The collecting side of a session.
struct Collector {
    epoch: Instant,
    sink: Box<dyn Sink>,
    assembler: Assembler,
    described: HashSet<Device>,
    /// Per device: when it was last calibrated, and the best bound so far.
    calibrated: HashMap<Device, (Instant, u64)>,
    /// Turns the host records' counter ticks into host time.
    stamps: StampMap,
}

static COLLECTOR: Mutex<Option<Collector>> = Mutex::new(None);

/// Starts a session whose fragments go to `sink`. Fails if one is
/// recording. Returns the session's epoch.
pub(super) fn begin(sink: Box<dyn Sink>) -> Result<Instant> {
    let mut slot = lock(&COLLECTOR);
    if slot.is_some() {
        return Err(Error::invalid(
            "a profiler session is already recording; stop it before starting another",
        ));
    }
    // Before recording starts: every record is stamped after the origin.
    let stamps = StampMap::new();
    let epoch = record::open()?;
    *slot = Some(Collector {
        stamps,
        epoch,
        sink,
        assembler: Assembler::new(epoch),
        described: HashSet::new(),
        calibrated: HashMap::new(),
    });
    Ok(epoch)
}

/// Emits what was recorded since the previous collection, without
/// stopping or waiting for any device. Device spans appear once their
/// events completed. Does nothing when no session records.
pub(super) fn flush() {
    let mut slot = lock(&COLLECTOR);
    if let Some(collector) = slot.as_mut()
        && let Some(taken) = record::with_gathered(|g| Taken::from(g, false))
    {
        collector.collect(taken, false);
    }
}

/// Stops recording, emits the rest (waiting for the devices used to finish
/// the recorded work) and returns what the sink made of the session. An
/// empty trace when no session was recording.
pub(super) fn end() -> Trace {
    let mut slot = lock(&COLLECTOR);
    let gathered = record::close();
    let Some(mut collector) = slot.take() else {
        return empty();
    };
    let mut gathered = gathered.unwrap_or_default();
    let taken = Taken::from(&mut gathered, true);
    collector.collect(taken, true);
    drop(gathered);
    collector.sink.finish()
}

/// What one collection took from the gathered state.
struct Taken {
    device_spans: Vec<DeviceSpan>,
    waits: Vec<(u64, u64)>,
    memory: Vec<(Stamp, MemoryRecord)>,
    /// Every device seen so far, with its clock if it has one.
    devices: Vec<(Device, Option<Arc<DeviceClock>>)>,
}

impl Taken {
    fn from(g: &mut Gathered, last: bool) -> Taken {
        g.resolve(last);
        let mut devices: Vec<(Device, Option<Arc<DeviceClock>>)> =
            g.clocks.iter().map(|(d, c)| (*d, c.clone())).collect();
        for (_, r) in &g.memory {
            if !g.clocks.contains_key(&r.device) {
                devices.push((r.device, None));
            }
        }
        devices.sort_by_key(|(d, _)| *d);
        devices.dedup_by_key(|(d, _)| *d);
        Taken {
            device_spans: std::mem::take(&mut g.resolved),
            waits: std::mem::take(&mut g.waits),
            memory: std::mem::take(&mut g.memory),
            devices,
        }
    }
}

impl Collector {
    fn collect(&mut self, taken: Taken, last: bool) {
        // Every host time recorded so far converts by the tick rate
        // measured up to now.
        self.stamps.refresh();
        let stamps = self.stamps;
        let mut batch = Collected {
            device_spans: taken.device_spans,
            waits: taken.waits,
            memory: taken
                .memory
                .into_iter()
                .map(|(at, r)| (stamps.instant(at), r))
                .collect(),
            last,
            ..Collected::default()
        };
        for (d, clock) in &taken.devices {
            if self.described.insert(*d) {
                batch.devices.push((*d, describe(*d)));
            }
            let Some(clock) = clock else { continue };
            // First calibration, or a later one for drift.
            let previous = self.calibrated.get(d).copied();
            let due = previous.is_none_or(|(at, _)| at.elapsed() >= RECALIBRATE_EVERY);
            if !due {
                continue;
            }
            let direct_only = previous.is_some() && !last;
            if let Some(base) = clock.calibrate(self.epoch, last, direct_only) {
                // A later sample much looser than the best one would bend
                // the interpolation more than drift does: keep it out.
                let accept = previous.is_none_or(|(_, best)| {
                    base.error_bound_ns <= best.saturating_mul(4).saturating_add(10_000)
                });
                let best =
                    previous.map_or(base.error_bound_ns, |(_, b)| b.min(base.error_bound_ns));
                self.calibrated.insert(*d, (Instant::now(), best));
                if accept {
                    batch.bases.push((*d, base));
                }
            }
        }
        let (bufs, mut host) = record::take_host();
        batch.host = host
            .iter_mut()
            .map(|t| HostThread {
                thread: t.thread,
                name: t.name.clone(),
                records: t
                    .records
                    .drain(..)
                    .map(|r| r.map_time(|at| stamps.instant(at)))
                    .collect(),
            })
            .collect();
        batch.dropped = record::take_dropped();
        let fragment = self.assembler.assemble(&mut batch);
        record::give_back(bufs, host);
        self.sink.emit(fragment);
    }
}

/// How the trace names `device`: its name and properties, or why they
/// could not be read.
fn describe(device: Device) -> DeviceInfo {
    match registry::runtime(device.device_type()).and_then(|rt| rt.properties(device)) {
        Ok(p) => {
            let mut properties = vec![
                ("kind".to_owned(), p.kind.to_string()),
                ("native backend".to_owned(), p.native_backend.clone()),
                ("driver".to_owned(), p.driver.clone()),
            ];
            if let Some(m) = p.total_memory {
                properties.push(("total memory".to_owned(), m.to_string()));
            }
            if let Some(t) = p.timestamps {
                properties.push(("timestamp period (ns)".to_owned(), t.period_ns.to_string()));
            }
            DeviceInfo {
                name: p.name,
                properties,
            }
        }
        Err(e) => DeviceInfo {
            name: device.to_string(),
            properties: vec![("properties".to_owned(), e.to_string())],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_trace::{Lane, LaneKind};

    fn fragment(thread: u64, dropped: u64) -> Trace {
        Trace {
            version: TRACE_VERSION,
            lanes: vec![Lane {
                kind: LaneKind::Host { thread },
                name: format!("thread {thread}"),
                group: String::new(),
            }],
            dropped,
            ..Trace::default()
        }
    }

    #[test]
    fn a_session_sink_keeps_its_fragments_as_one_trace() {
        let mut sink = Box::new(TraceSink::default());
        sink.emit(fragment(1, 1));
        sink.emit(fragment(2, 2));
        sink.emit(fragment(1, 0));
        let trace = sink.finish();
        assert_eq!(trace.version, TRACE_VERSION);
        assert_eq!(trace.lanes.len(), 2);
        assert_eq!(trace.dropped, 3);
        assert_eq!(Box::new(TraceSink::default()).finish(), empty());
    }
}
