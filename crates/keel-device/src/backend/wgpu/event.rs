//! Events: a point in the device's submission order, and for timed events
//! a timestamp slot of the device's query set, written by a submission of
//! its own; and the profiler's brackets, whose two slots are written by
//! the bracketed work's own submissions (`begin_timed_work`).
//!
//! The slots are kept by a [`TimestampPool`] (reference counts, retiring,
//! values moved out when every slot is held, so a device holds any number
//! of timed events: see its module docs). What is wgpu's here:
//!
//! - Slots are handed out in adjacent pairs (`2p`, `2p + 1`): a compute
//!   pass that writes timestamps at slots `a` and `b` makes wgpu-core
//!   reset every query from `min(a, b)` to `max(a, b)` first (wgpu-core
//!   30, `command/compute.rs`), which would clear other events'
//!   timestamps lying in between. A timed event uses the first slot of its
//!   pair, a bracket both.
//! - wgpu resets queries itself, so the pool's resets cost nothing, and an
//!   event recorded again rewrites its slot in place
//!   ([`TimestampPool::rewrite`]).
//! - A submission is named by its sequence number in the device's one
//!   queue, which is also the order in which submissions complete.
//! - Reading is batched: the first read of a completed slot resolves every
//!   completed slot not read yet ([`ReadScope::All`]: runs of near slots
//!   into one buffer, one submission and one map), so the profiler's spans
//!   cost one read per batch instead of two per span.

use std::fmt;
use std::ops::Range;

use super::device::WgpuDevice;
use super::memory::{map_read, new_buffer};
use super::stream::{self, Bracket, Point, QueueStream, submit_outside_streams};
use super::{TY, Wgpu};
use crate::backend::timestamps::{ReadScope, TimestampPool, TimestampQueries};
use crate::backend::typed::{Events, Timing};
use crate::core::DeviceType;
use crate::error::{Error, Result};

/// Timestamp queries per device (wgpu's most per query set): two per
/// profiled operation whose span is not resolved yet, one per timed event.
const QUERY_SLOTS: u32 = wgpu::QUERY_SET_MAX_QUERIES;

/// Slots closer than this to the previous unread slot are resolved in the
/// same range (the 256-byte alignment of each range's place in the
/// resolve buffer is 32 slots). Resolving one range from the lowest to
/// the highest slot would make the driver read every slot between (up to
/// the whole query set once slots are recycled).
const RUN_GAP: u32 = 64;

/// A recorded event; see the module docs.
pub struct WgpuEvent {
    at: Point,
    query: Option<u32>,
}

impl WgpuEvent {
    /// A timed event whose timestamp submission `seq` of `device` writes
    /// into `slot` (a scope on a program's pass: `interop.rs`).
    pub(super) fn at_slot(device: &'static WgpuDevice, seq: u64, slot: u32) -> Self {
        WgpuEvent {
            at: device.point_at(seq),
            query: Some(slot),
        }
    }

    /// wgpu's index of the submission the event marks, where it was made
    /// by one.
    pub(super) fn submission(&self) -> Option<&wgpu::SubmissionIndex> {
        self.at.index()
    }
}

impl fmt::Debug for WgpuEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuEvent")
            .field("device", &self.at.device().index)
            .field("seq", &self.at.seq())
            .field("query", &self.query)
            .finish()
    }
}

/// A device's timestamp slots, by the sequence number of the submission
/// that writes each (see the module docs).
pub(super) type QuerySlots = TimestampPool<u64>;

/// Every slot free, in pairs.
pub(super) fn query_slots() -> QuerySlots {
    TimestampPool::new(QUERY_SLOTS, 2, ReadScope::All { gap: RUN_GAP })
}

/// The query set the slots index, for a device that offers timestamps
/// inside encoders.
pub(super) fn query_set(device: &wgpu::Device) -> wgpu::QuerySet {
    device.create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("keel timestamps"),
        ty: wgpu::QueryType::Timestamp,
        count: QUERY_SLOTS,
    })
}

/// A device's query set, as its [`QuerySlots`] reach it.
pub(super) struct Queries(pub(super) &'static WgpuDevice);

impl TimestampQueries for Queries {
    const DEVICE_TYPE: DeviceType = TY;
    type Writer = u64;
    /// The device's completed count is one atomic load: nothing to keep.
    type Progress = ();

    fn reached(&self, seq: &u64, _: &mut ()) -> bool {
        *seq <= self.0.order.completed()
    }

    fn wait(&self, seq: &u64) -> Result<()> {
        self.0.order.wait(*seq);
        Ok(())
    }

    /// A pass or `write_timestamp` resets the queries it writes.
    fn reset(&self, _slots: Range<u32>) {}

    fn read(&self, runs: &[Range<u32>]) -> Result<Vec<Vec<u64>>> {
        let d = self.0;
        let qs = d
            .timestamps
            .as_ref()
            .ok_or_else(|| Error::backend(TY, "the device has no timestamp queries"))?;
        resolve(d, qs, runs)
    }
}

/// The timestamp submission `at` wrote into `slot`, in ticks: kept from
/// an earlier read, or else every completed unread slot is resolved at
/// once (one submission, one map).
fn ticks(d: &'static WgpuDevice, slot: u32, at: &Point) -> Result<u64> {
    if let Some(t) = d.query_slots.value(slot, at.seq()) {
        return Ok(t);
    }
    at.wait()?;
    d.query_slots.read(&Queries(d), slot, at.seq())
}

/// Ticks to nanoseconds of the device's timestamp clock.
fn ticks_ns(d: &WgpuDevice, ticks: u64) -> i64 {
    let period = d.timestamp_period;
    if period == 1.0 {
        ticks as i64
    } else {
        (ticks as f64 * period).round() as i64
    }
}

impl Events for Wgpu {
    type Event = WgpuEvent;

    /// Reuses the slot of the event's previous record, if it had one.
    fn record_event(
        &self,
        stream: &'static QueueStream,
        event: &mut Option<WgpuEvent>,
        timing: bool,
    ) -> Result<()> {
        let d = stream.device();
        let q = Queries(d);
        // A slot taken here and not yet the event's, given back if the
        // submission fails.
        let mut fresh = None;
        let query = match event.as_ref().and_then(|e| Some((e.query?, e.at.seq()))) {
            Some((slot, seq)) if d.query_slots.rewrite(slot, seq) => Some(slot),
            // Its value was moved out and the pair reused: another slot,
            // the event's at once (so a failure below gives back the
            // right one).
            Some((slot, seq)) => {
                let other = d.query_slots.take(&q, 1)?;
                d.query_slots.release_written(&q, slot, seq);
                if let Some(e) = event.as_mut() {
                    e.query = Some(other);
                }
                Some(other)
            }
            None if timing => {
                if d.timestamps.is_none() {
                    return Err(Error::unsupported(
                        TY,
                        format!(
                            "timing events on {} (it offers no timestamp queries inside encoders)",
                            d.adapter.info.name
                        ),
                    ));
                }
                fresh = Some(d.query_slots.take(&q, 1)?);
                fresh
            }
            None => None,
        };
        let at = match (query, &d.timestamps) {
            (Some(slot), Some(qs)) => {
                let mut enc = d.encoder();
                enc.write_timestamp(qs, slot);
                match stream.submit(enc) {
                    Ok(at) => {
                        d.query_slots.written_movable(slot, at.seq());
                        at
                    }
                    Err(e) => {
                        if let Some(slot) = fresh {
                            d.query_slots.release(&q, slot);
                        }
                        return Err(e);
                    }
                }
            }
            _ => stream.point(),
        };
        *event = Some(WgpuEvent { at, query });
        Ok(())
    }

    fn wait_event(&self, event: &WgpuEvent, stream: &'static QueueStream) -> Result<()> {
        if std::ptr::eq(stream.device(), event.at.device()) {
            Ok(()) // one queue: later submissions already follow the event
        } else {
            event.at.wait()
        }
    }

    fn event_done(&self, event: &WgpuEvent) -> Result<bool> {
        Ok(event.at.is_done())
    }

    fn wait_event_host(&self, event: &WgpuEvent) -> Result<()> {
        event.at.wait()
    }

    fn elapsed_ms(&self, start: &WgpuEvent, end: &WgpuEvent) -> Result<f64> {
        let d = start.at.device();
        let (Some(qa), Some(qb), Some(_)) = (start.query, end.query, &d.timestamps) else {
            return Err(Error::invalid("the events were recorded without timing"));
        };
        let t0 = ticks(d, qa, &start.at)?;
        let t1 = ticks(d, qb, &end.at)?;
        let ticks = if t1 >= t0 {
            (t1 - t0) as f64
        } else {
            -((t0 - t1) as f64)
        };
        Ok(ticks * d.timestamp_period / 1e6)
    }

    /// Gives the event's timestamp slot back to its device.
    fn release_event(&self, event: WgpuEvent) {
        if let Some(slot) = event.query {
            let d = event.at.device();
            d.query_slots
                .release_written(&Queries(d), slot, event.at.seq());
        }
    }
}

impl Timing for Wgpu {
    /// The event's timestamp in nanoseconds of the device's timestamp
    /// clock (read in a batch with every other completed slot). wgpu reads
    /// no host-correlated device clock, so the profiler calibrates it by
    /// paired sampling.
    fn event_time_ns(&self, event: &WgpuEvent) -> Result<Option<i64>> {
        let d = event.at.device();
        let (Some(slot), Some(_)) = (event.query, &d.timestamps) else {
            return Ok(None);
        };
        Ok(Some(ticks_ns(d, ticks(d, slot, &event.at)?)))
    }

    /// Takes two slots and arms them for the thread's next submissions on
    /// `stream`: the work's own submissions write the timestamps (a
    /// kernel's compute pass, or `write_timestamp` in the same
    /// `queue.submit`), so profiling adds no submission.
    fn begin_timed_work(&self, stream: &'static QueueStream) -> Result<bool> {
        let d = stream.device();
        if d.timestamps.is_none() {
            return Ok(false);
        }
        // A bracket left armed (its span's work failed before it ended)
        // gives its slots back.
        if let Some(old) = stream::disarm() {
            abandon(old);
        }
        // Adjacent slots (see the module docs).
        let start = d.query_slots.take(&Queries(d), 2)?;
        stream::arm(Bracket {
            stream,
            start,
            end: start + 1,
            first: None,
            last: None,
        });
        Ok(true)
    }

    /// The events of the bracketed submissions. Work that submitted
    /// nothing (a wait, an untimed event) gets one submission writing both
    /// timestamps.
    fn end_timed_work(
        &self,
        stream: &'static QueueStream,
    ) -> Result<Option<(WgpuEvent, WgpuEvent)>> {
        let d = stream.device();
        let Some(b) = stream::disarm() else {
            return Ok(None);
        };
        let (Some(qs), true) = (&d.timestamps, std::ptr::eq(b.stream, stream)) else {
            abandon(b);
            return Ok(None);
        };
        let (first, last) = match (b.first, b.last) {
            (Some(first), Some(last)) => (stream.point_at(first), stream.point_at(last)),
            _ => {
                let mut enc = d.encoder();
                enc.write_timestamp(qs, b.start);
                enc.write_timestamp(qs, b.end);
                match stream.submit(enc) {
                    Ok(at) => (at.clone(), at),
                    Err(e) => {
                        abandon(b);
                        return Err(e);
                    }
                }
            }
        };
        // Each slot is now one event's own.
        d.query_slots.written_movable(b.start, first.seq());
        d.query_slots.written_movable(b.end, last.seq());
        Ok(Some((
            WgpuEvent {
                at: first,
                query: Some(b.start),
            },
            WgpuEvent {
                at: last,
                query: Some(b.end),
            },
        )))
    }
}

/// Gives back the slots of a bracket that produced no events, once the
/// work that may still write them (its submissions so far) has run.
fn abandon(b: Bracket) {
    let d = b.stream.device();
    if let Some(last) = b.last {
        d.query_slots.written(&[b.start, b.end], last);
    }
    let q = Queries(d);
    d.query_slots.release(&q, b.start);
    d.query_slots.release(&q, b.end);
}

/// The timestamps in each range of `runs` of `qs`, in ticks: resolved
/// into one buffer (each range at a 256-byte aligned offset), with one
/// submission and one map.
fn resolve(
    d: &'static WgpuDevice,
    qs: &wgpu::QuerySet,
    runs: &[Range<u32>],
) -> Result<Vec<Vec<u64>>> {
    let align = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
    let mut offsets = Vec::with_capacity(runs.len());
    let mut bytes = 0u64;
    for run in runs {
        offsets.push(bytes);
        bytes += (u64::from(run.end - run.start) * 8).next_multiple_of(align);
    }
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let resolve = new_buffer(
        d,
        bytes,
        wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        false,
    )?;
    let read = d.readbacks.take(d, bytes)?;
    let mut enc = d.encoder();
    for (run, &offset) in runs.iter().zip(&offsets) {
        // Slots never written resolve to zero (wgpu tracks which were).
        enc.resolve_query_set(qs, run.clone(), &resolve, offset);
    }
    enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
    // Through the submission lock like every submission (Note [wgpu
    // completion tracking]).
    let at = submit_outside_streams(d, enc)?;
    let mapped = map_read(&at, &read, 0, bytes as usize)?;
    d.readbacks.give(d, read);
    d.gl.release(resolve);
    Ok(runs
        .iter()
        .zip(&offsets)
        .map(|(run, &offset)| {
            let at = offset as usize;
            mapped[at..at + 8 * (run.end - run.start) as usize]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect()
        })
        .collect())
}
