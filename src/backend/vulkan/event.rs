//! Vulkan events: a point on a stream's timeline semaphore, and for timed
//! events a timestamp query written by a submission of its own.
//!
//! Each device has one timestamp query pool. A timed event takes a slot on
//! its first record and keeps it across records (c10 reuses one native
//! event the same way); a destroyed event's slot is reused once the work
//! that may still write it has run.

use std::sync::Mutex;
use std::time::Instant;

use ash::vk;

use super::device::{Ctx, lock, vk_error};
use super::stream::{self, Bracket, Point, VkStream};
use super::{TY, Vulkan};
use crate::backend::ClockSample;
use crate::backend::typed::Events;
use crate::error::{Error, Result};

/// Timestamp queries per device (two per timed event pair, or per
/// profiled operation whose work is still queued): 256 KiB of results.
const QUERY_SLOTS: u32 = 32768;

/// Free timestamp query slots, and slots of destroyed events that may still
/// be written by work in flight (reused once that work completes).
#[derive(Default)]
struct QuerySlots {
    free: Vec<u32>,
    retiring: Vec<(u32, Point)>,
}

/// A device's timestamp query pool and its slots.
pub(super) struct Timestamps {
    pool: vk::QueryPool,
    slots: Mutex<QuerySlots>,
}

impl Timestamps {
    /// The query pool of `device`, every slot reset and free.
    pub(super) fn new(device: &ash::Device) -> Result<Timestamps> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(QUERY_SLOTS);
        // SAFETY: a plain object creation on a live device; the pool lives
        // as long as the device (the process).
        let pool = unsafe { device.create_query_pool(&info, None) }
            .map_err(|e| vk_error("vkCreateQueryPool", e))?;
        // SAFETY: host query reset is enabled; no query is in use yet.
        unsafe { device.reset_query_pool(pool, 0, QUERY_SLOTS) };
        Ok(Timestamps {
            pool,
            slots: Mutex::new(QuerySlots {
                free: (0..QUERY_SLOTS).rev().collect(),
                retiring: Vec::new(),
            }),
        })
    }

    /// A slot for a timed event. Retiring slots are looked at only when no
    /// slot is free, with one semaphore read per stream (not per slot).
    fn take(&self) -> Result<u32> {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.free.pop() {
            return Ok(slot);
        }
        let mut reached: Vec<(vk::Semaphore, u64)> = Vec::new();
        let mut i = 0;
        while i < slots.retiring.len() {
            let (slot, point) = slots.retiring[i];
            let counter = match reached.iter().find(|(s, _)| *s == point.semaphore) {
                _ if point.value == 0 => 0,
                Some(&(_, v)) => v,
                None => {
                    let v = point.counter().unwrap_or(0);
                    reached.push((point.semaphore, v));
                    v
                }
            };
            if point.value <= counter {
                slots.retiring.swap_remove(i);
                slots.free.push(slot);
            } else {
                i += 1;
            }
        }
        slots.free.pop().ok_or_else(|| {
            Error::backend(
                TY,
                format!("all {QUERY_SLOTS} timestamp query slots are in use by timed events"),
            )
        })
    }

    /// Gives `slot` back once `point` has been reached.
    fn release(&self, slot: u32, point: Point) {
        lock(&self.slots).retiring.push((slot, point));
    }
}

/// A recorded Vulkan event.
pub struct VkEvent {
    point: Point,
    /// The timestamp query slot, for timed events.
    query: Option<u32>,
}

impl std::fmt::Debug for VkEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VkEvent")
            .field("device", &self.point.ctx.index)
            .field("value", &self.point.value)
            .field("query", &self.query)
            .finish()
    }
}

impl VkEvent {
    /// The event's timestamp, in ticks (timed and completed events only).
    fn timestamp(&self) -> Result<u64> {
        let slot = self
            .query
            .ok_or_else(|| Error::invalid("the event was recorded without timing"))?;
        let c: &Ctx = self.point.ctx;
        let mut data = [0u64; 1];
        // SAFETY: the slot was written by a completed submission (callers
        // check completion first); `data` holds one 64-bit result.
        unsafe {
            c.device.get_query_pool_results(
                c.timestamps.pool,
                slot,
                &mut data,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| vk_error("vkGetQueryPoolResults", e))?;
        Ok(data[0])
    }
}

/// Ticks masked to the adapter's valid timestamp bits.
fn masked(c: &Ctx, ticks: u64) -> u64 {
    let bits = c.adapter.timestamp_valid_bits;
    if bits >= 64 {
        ticks
    } else {
        ticks & ((1u64 << bits) - 1)
    }
}

/// Ticks in nanoseconds.
fn ticks_ns(c: &Ctx, ticks: u64) -> i64 {
    (masked(c, ticks) as f64 * f64::from(c.adapter.props.limits.timestamp_period)).round() as i64
}

impl Events for Vulkan {
    type Event = VkEvent;

    /// `vkGetCalibratedTimestamps` on the DEVICE domain, between two host
    /// instants.
    fn sample_clock(&self, device: &'static Ctx) -> Result<Option<ClockSample>> {
        let Some(calibrated) = &device.calibrated else {
            return Ok(None);
        };
        let host_before = Instant::now();
        let (ticks, deviation) = calibrated.device_ticks()?;
        let host_after = Instant::now();
        Ok(Some(ClockSample {
            device_ns: ticks_ns(device, ticks),
            host_before,
            host_after,
            max_deviation_ns: deviation,
        }))
    }

    fn event_time_ns(&self, event: &VkEvent) -> Result<Option<i64>> {
        let c = event.point.ctx;
        if c.calibrated.is_none() {
            return Ok(None);
        }
        Ok(Some(ticks_ns(c, event.timestamp()?)))
    }

    /// Records an event on `stream`; a timed event keeps the query slot of
    /// its previous record.
    fn record_event(
        &self,
        stream: &'static VkStream,
        event: &mut Option<VkEvent>,
        timing: bool,
    ) -> Result<()> {
        let c = stream.ctx;
        let query = match event.as_ref().and_then(|p| p.query) {
            Some(slot) => Some(slot),
            None if timing => {
                if c.adapter.timestamp_valid_bits == 0 {
                    return Err(Error::unsupported(
                        TY,
                        format!(
                            "timing events on {} (its queue family has no timestamps)",
                            c.adapter.name
                        ),
                    ));
                }
                Some(c.timestamps.take()?)
            }
            None => None,
        };
        let value = if let Some(slot) = query {
            let pool = c.timestamps.pool;
            stream.submit(
                |d, cb| {
                    // SAFETY: `cb` is recording; the slot belongs to this
                    // event and is reset before it is written, in order.
                    unsafe {
                        d.cmd_reset_query_pool(cb, pool, slot, 1);
                        d.cmd_write_timestamp2(
                            cb,
                            vk::PipelineStageFlags2::ALL_COMMANDS,
                            pool,
                            slot,
                        );
                    }
                },
                Vec::new(),
            )?
        } else if stream.has_pending_waits() {
            // The event must come after the waits queued on the stream.
            stream.submit(|_, _| {}, Vec::new())?
        } else {
            stream.last_value()
        };
        *event = Some(VkEvent {
            point: stream.point(value),
            query,
        });
        Ok(())
    }

    fn wait_event(&self, event: &VkEvent, stream: &'static VkStream) -> Result<()> {
        if std::ptr::eq(stream.ctx, event.point.ctx) {
            stream.add_wait(event.point);
            Ok(())
        } else {
            // Semaphores do not cross devices: wait on the host instead.
            event.point.wait()
        }
    }

    fn event_done(&self, event: &VkEvent) -> Result<bool> {
        event.point.reached()
    }

    fn wait_event_host(&self, event: &VkEvent) -> Result<()> {
        event.point.wait()
    }

    /// Ticks masked to the queue family's valid bits, times the timestamp
    /// period.
    fn elapsed_ms(&self, start: &VkEvent, end: &VkEvent) -> Result<f64> {
        let c = start.point.ctx;
        let bits = c.adapter.timestamp_valid_bits;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let (t0, t1) = (start.timestamp()? & mask, end.timestamp()? & mask);
        let ticks = t1.wrapping_sub(t0) & mask;
        // A start later than the end reads as a negative interval.
        let signed = if ticks > mask / 2 {
            -((t0.wrapping_sub(t1) & mask) as f64)
        } else {
            ticks as f64
        };
        Ok(signed * f64::from(c.adapter.props.limits.timestamp_period) / 1e6)
    }

    /// Its query slot is reused once the event's work has run.
    fn release_event(&self, event: VkEvent) {
        if let Some(slot) = event.query {
            event.point.ctx.timestamps.release(slot, event.point);
        }
    }

    /// Takes two query slots and arms them for the thread's next
    /// submissions on `stream`: the work's own command buffers write the
    /// timestamps (no submission of their own).
    fn begin_timed_work(&self, stream: &'static VkStream) -> Result<bool> {
        let c = stream.ctx;
        if c.adapter.timestamp_valid_bits == 0 {
            return Ok(false);
        }
        // A bracket left armed (its span's work failed before it ended)
        // gives its slots back.
        if let Some(old) = stream::disarm() {
            abandon(c, old);
        }
        let start = c.timestamps.take()?;
        let end = match c.timestamps.take() {
            Ok(slot) => slot,
            Err(e) => {
                c.timestamps.release(start, stream.point(0));
                return Err(e);
            }
        };
        stream::arm(Bracket {
            stream,
            pool: c.timestamps.pool,
            start,
            end,
            first: None,
            last: None,
        });
        Ok(true)
    }

    /// The events of the bracketed submissions. Work that submitted
    /// nothing (a wait queued for later, an untimed event) gets one
    /// submission writing both timestamps.
    fn end_timed_work(&self, stream: &'static VkStream) -> Result<Option<(VkEvent, VkEvent)>> {
        let c = stream.ctx;
        let Some(b) = stream::disarm() else {
            return Ok(None);
        };
        if !std::ptr::eq(b.stream, stream) {
            abandon(c, b);
            return Ok(None);
        }
        let (first, last) = match (b.first, b.last) {
            (Some(first), Some(last)) => (first, last),
            _ => {
                let (pool, start, end) = (b.pool, b.start, b.end);
                let submitted = stream.submit(
                    |d, cb| {
                        // SAFETY: `cb` is recording; both slots belong to
                        // this bracket and are reset before they are
                        // written, in order.
                        unsafe {
                            d.cmd_reset_query_pool(cb, pool, start, 1);
                            d.cmd_reset_query_pool(cb, pool, end, 1);
                            let all = vk::PipelineStageFlags2::ALL_COMMANDS;
                            d.cmd_write_timestamp2(cb, all, pool, start);
                            d.cmd_write_timestamp2(cb, all, pool, end);
                        }
                    },
                    Vec::new(),
                );
                match submitted {
                    Ok(v) => (v, v),
                    Err(e) => {
                        abandon(c, b);
                        return Err(e);
                    }
                }
            }
        };
        Ok(Some((
            VkEvent {
                point: stream.point(first),
                query: Some(b.start),
            },
            VkEvent {
                point: stream.point(last),
                query: Some(b.end),
            },
        )))
    }
}

/// Gives back the slots of a bracket that produced no events, once the
/// work that may still write them has run.
fn abandon(c: &Ctx, b: Bracket) {
    let point = b.stream.point(b.last.unwrap_or(0));
    c.timestamps.release(b.start, point);
    c.timestamps.release(b.end, point);
}
