//! Events: a point in the device's submission order, and for timed events
//! a timestamp slot of the device's query set, written by a submission of
//! its own and resolved on demand by `elapsed_time`.
//!
//! Slots are recycled: a destroyed event's slot becomes free again once
//! the submission that last wrote it has completed.

use std::fmt;
use std::sync::Mutex;

use super::device::{WgpuDevice, lock};
use super::memory::{map_read, new_buffer};
use super::stream::{Point, QueueStream, submit_outside_streams};
use super::{TY, Wgpu};
use crate::backend::typed::Events;
use crate::error::{Error, Result};

/// Timestamp queries per device.
const QUERY_SLOTS: u32 = 1024;

/// A recorded event; see the module docs.
pub struct WgpuEvent {
    at: Point,
    query: Option<u32>,
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

/// A device's timestamp slots.
pub(super) struct QuerySlots(Mutex<Slots>);

struct Slots {
    free: Vec<u32>,
    /// `(slot, seq)` of destroyed events whose last submission (`seq`)
    /// may still be running.
    retiring: Vec<(u32, u64)>,
}

impl QuerySlots {
    /// Every slot free.
    pub(super) fn new() -> Self {
        QuerySlots(Mutex::new(Slots {
            free: (0..QUERY_SLOTS).rev().collect(),
            retiring: Vec::new(),
        }))
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

    /// A free slot, recycling those of destroyed events whose submission
    /// has completed (`completed`: the highest sequence number known
    /// complete).
    fn take(&self, completed: u64) -> Result<u32> {
        let mut slots = lock(&self.0);
        let Slots { free, retiring } = &mut *slots;
        retiring.retain(|&(slot, seq)| {
            let done = seq <= completed;
            if done {
                free.push(slot);
            }
            !done
        });
        free.pop().ok_or_else(|| {
            Error::backend(
                TY,
                format!("all {QUERY_SLOTS} timestamp query slots are in use by timed events"),
            )
        })
    }

    /// Gives back `slot`, free once submission `seq` has completed.
    fn give_back(&self, slot: u32, seq: u64) {
        lock(&self.0).retiring.push((slot, seq));
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
        let query = match event.as_ref().and_then(|e| e.query) {
            Some(slot) => Some(slot),
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
                Some(d.query_slots.take(d.order.completed())?)
            }
            None => None,
        };
        let at = match (query, &d.timestamps) {
            (Some(slot), Some(qs)) => {
                let mut enc = d.encoder();
                enc.write_timestamp(qs, slot);
                stream.submit(enc)?
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
        let (Some(qa), Some(qb), Some(qs)) = (start.query, end.query, &d.timestamps) else {
            return Err(Error::invalid("the events were recorded without timing"));
        };
        let (t0, t1) = resolve(d, qs, qa, qb)?;
        let ticks = if t1 >= t0 {
            (t1 - t0) as f64
        } else {
            -((t0 - t1) as f64)
        };
        Ok(ticks * f64::from(d.queue.get_timestamp_period()) / 1e6)
    }

    /// Gives the event's timestamp slot back to its device.
    fn release_event(&self, event: WgpuEvent) {
        if let Some(slot) = event.query {
            event
                .at
                .device()
                .query_slots
                .give_back(slot, event.at.seq());
        }
    }
}

/// The timestamps in slots `a` and `b` of `qs`, in ticks.
fn resolve(d: &'static WgpuDevice, qs: &wgpu::QuerySet, a: u32, b: u32) -> Result<(u64, u64)> {
    // Each resolve target offset must be a multiple of 256.
    let align = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
    let resolve = new_buffer(
        d,
        2 * align,
        wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        false,
    )?;
    let read = d.readbacks.take(d, 16)?;
    let mut enc = d.encoder();
    enc.resolve_query_set(qs, a..a + 1, &resolve, 0);
    enc.resolve_query_set(qs, b..b + 1, &resolve, align);
    enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, 8);
    enc.copy_buffer_to_buffer(&resolve, align, &read, 8, 8);
    // Through the submission lock like every submission (Note [wgpu
    // completion tracking]).
    let at = submit_outside_streams(d, enc)?;
    let bytes = map_read(&at, &read, 0, 16)?;
    d.readbacks.give(d, read);
    d.gl.release(resolve);
    let t0 = u64::from_le_bytes(bytes[0..8].try_into().unwrap_or([0; 8]));
    let t1 = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or([0; 8]));
    Ok((t0, t1))
}
