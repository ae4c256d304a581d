//! Vulkan events: a point on a stream's timeline semaphore, and for timed
//! events a timestamp query written by a submission of its own.
//!
//! Each device has one timestamp query pool. A slot is reset on the host
//! (`vkResetQueryPool`, never inside a command buffer) and then written
//! once, by one submission, before it is reset again. Slots are held by
//! reference count: a timed event holds its slot (each record takes a
//! fresh one and releases the previous record's), and a profiled
//! operation's two events hold theirs, where one slot may be both the
//! end of a span and the start of the next (`stream.rs`'s brackets: on a
//! busy stream a profiled launch writes only its end timestamp). A slot
//! nothing holds is recycled once the submission that writes it has run:
//! released slots are reset in batches, one `vkResetQueryPool` per run of
//! adjacent slots. Reads go in runs too: a completed slot is read together
//! with the adjacent slots after it whose writers have completed, in one
//! `vkGetQueryPoolResults` (lavapipe makes the whole device idle in every
//! call), and the values are kept until the slot is reset; free slots are
//! handed out lowest first, so a stream's consecutive spans sit side by
//! side.

use std::sync::Mutex;
use std::time::Instant;

use ash::vk;

use super::device::{Ctx, lock, vk_error};
use super::stream::{self, Bracket, Point, VkStream};
use super::{TY, Vulkan};
use crate::backend::ClockSample;
use crate::backend::typed::Events;
use crate::error::{Error, Result};

/// Timestamp queries per device: 256 KiB of results.
const QUERY_SLOTS: u32 = 32768;

/// Released slots that trigger a recycling pass (at least this many since
/// the last pass), so slots are reset on the host in batches.
const RECYCLE_BATCH: usize = 1024;

/// The most slots one `vkGetQueryPoolResults` call reads.
const READ_RUN: usize = 4096;

/// One timestamp query slot.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Holders: events, and a bracket between its submissions. 0: free,
    /// or released and waiting for its writer.
    refs: u32,
    /// The submission that writes the slot, once submitted. A slot is
    /// written once between two (host) resets.
    writer: Option<Point>,
    /// The slot's timestamp, once read.
    value: Option<u64>,
}

/// Free slots (reset; popped from the end, lowest first), released slots
/// waiting for the work that writes them, and every slot's state.
struct QuerySlots {
    free: Vec<u32>,
    retiring: Vec<u32>,
    /// `retiring`'s length that triggers the next recycling pass.
    recycle_at: usize,
    table: Vec<Slot>,
}

/// A device's timestamp query pool and its slots (see the module docs).
pub(super) struct Timestamps {
    pub(super) pool: vk::QueryPool,
    slots: Mutex<QuerySlots>,
}

/// Whether `point` has been reached, reading each semaphore's counter at
/// most once per call (`seen` caches them).
fn reached(point: &Point, seen: &mut Vec<(vk::Semaphore, u64)>) -> bool {
    if point.value == 0 {
        return true;
    }
    let counter = match seen.iter().find(|(s, _)| *s == point.semaphore) {
        Some(&(_, v)) => v,
        None => {
            let v = point.counter().unwrap_or(0);
            seen.push((point.semaphore, v));
            v
        }
    };
    point.value <= counter
}

fn same_writer(a: Option<Point>, b: &Point) -> bool {
    a.is_some_and(|a| a.semaphore == b.semaphore && a.value == b.value)
}

impl Timestamps {
    /// The query pool of `device`, every slot reset and free.
    pub(super) fn new(device: &ash::Device) -> Result<Timestamps> {
        Self::with_slots(device, QUERY_SLOTS)
    }

    /// A query pool of `slots` slots (tests use a small one).
    fn with_slots(device: &ash::Device, slots: u32) -> Result<Timestamps> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(slots);
        // SAFETY: a plain object creation on a live device; the pool lives
        // as long as the device (the process).
        let pool = unsafe { device.create_query_pool(&info, None) }
            .map_err(|e| vk_error("vkCreateQueryPool", e))?;
        // SAFETY: host query reset is enabled; no query is in use yet.
        unsafe { device.reset_query_pool(pool, 0, slots) };
        Ok(Timestamps {
            pool,
            slots: Mutex::new(QuerySlots {
                free: (0..slots).rev().collect(),
                retiring: Vec::new(),
                recycle_at: RECYCLE_BATCH,
                table: vec![Slot::default(); slots as usize],
            }),
        })
    }

    /// A reset slot, held once by the caller. Recycles released slots
    /// when none is free; when every released slot is still to be written
    /// by work in flight (a host that records timed events faster than
    /// the device runs them), waits for the oldest of that work, as a
    /// full ring would. An error only when live events hold every slot.
    pub(super) fn take(&self, device: &ash::Device) -> Result<u32> {
        loop {
            let mut slots = lock(&self.slots);
            if slots.free.is_empty() {
                self.recycle(device, &mut slots);
            }
            if let Some(slot) = slots.free.pop() {
                slots.table[slot as usize].refs = 1;
                return Ok(slot);
            }
            // Retiring slots left after recycling all have a writer that
            // has not run; the first retired is the oldest.
            let oldest = slots
                .retiring
                .iter()
                .find_map(|&slot| slots.table[slot as usize].writer);
            let Some(writer) = oldest else {
                return Err(Error::backend(
                    TY,
                    format!(
                        "all {} timestamp query slots are held by live timed events",
                        slots.table.len()
                    ),
                ));
            };
            drop(slots);
            writer.wait()?;
        }
    }

    /// Holds `slot` once more, if it is still held and still written by
    /// `writer` (a slot released meanwhile may already be recycled).
    pub(super) fn share(&self, slot: u32, writer: &Point) -> bool {
        let mut slots = lock(&self.slots);
        let s = &mut slots.table[slot as usize];
        let ok = s.refs > 0 && same_writer(s.writer, writer);
        if ok {
            s.refs += 1;
        }
        ok
    }

    /// Notes that the submission `writer` (submitted) writes `slots`.
    pub(super) fn written(&self, slots: &[u32], writer: Point) {
        let mut table = lock(&self.slots);
        for &s in slots {
            table.table[s as usize].writer = Some(writer);
        }
    }

    /// Drops one hold of `slot`; the last one retires it: it is reset and
    /// reused once its writer has run.
    pub(super) fn release(&self, device: &ash::Device, slot: u32) {
        let mut slots = lock(&self.slots);
        let s = &mut slots.table[slot as usize];
        if s.refs == 0 {
            // Not held: retiring it again would free it twice.
            debug_assert!(false, "timestamp slot {slot} released more often than held");
            return;
        }
        s.refs -= 1;
        if s.refs == 0 {
            slots.retiring.push(slot);
            if slots.retiring.len() >= slots.recycle_at {
                self.recycle(device, &mut slots);
            }
        }
    }

    /// Resets, on the host, every retiring slot whose writer has run (one
    /// `vkResetQueryPool` per run of adjacent slots) and frees them, lowest
    /// first. One semaphore read per stream, not per slot.
    fn recycle(&self, device: &ash::Device, slots: &mut QuerySlots) {
        let QuerySlots {
            free,
            retiring,
            recycle_at,
            table,
        } = slots;
        let mut seen = Vec::new();
        let mut ready = Vec::new();
        retiring.retain(|&slot| {
            let done = match &table[slot as usize].writer {
                None => true,
                Some(point) => reached(point, &mut seen),
            };
            if done {
                ready.push(slot);
            }
            !done
        });
        ready.sort_unstable();
        let mut i = 0;
        while i < ready.len() {
            let first = ready[i];
            let mut count = 1;
            while i + count < ready.len() && ready[i + count] == first + count as u32 {
                count += 1;
            }
            // SAFETY: host query reset is enabled; the slots are held by
            // nobody and the submissions that wrote them have completed,
            // so no pending command uses them.
            unsafe { device.reset_query_pool(self.pool, first, count as u32) };
            i += count;
        }
        for &slot in &ready {
            table[slot as usize] = Slot::default();
        }
        free.extend(ready.iter().rev());
        *recycle_at = retiring.len() + RECYCLE_BATCH;
    }

    /// The timestamp in `slot`, whose writer has completed (the caller
    /// checks). Reads it with the following slots whose writers have
    /// completed too (a stream's spans take adjacent slots), in one
    /// `vkGetQueryPoolResults`, and keeps the values.
    fn read(&self, device: &ash::Device, slot: u32) -> Result<u64> {
        let first = slot as usize;
        let run = {
            let mut slots = lock(&self.slots);
            let s = &slots.table[first];
            if let Some(v) = s.value {
                return Ok(v);
            }
            if s.refs == 0 || s.writer.is_none() {
                return Err(Error::backend(
                    TY,
                    "a timestamp query slot was read before it was written",
                ));
            }
            let mut seen = Vec::new();
            let mut run = 1;
            while run < READ_RUN && first + run < slots.table.len() {
                let next = &slots.table[first + run];
                let readable = next.refs > 0
                    && next.value.is_none()
                    && next.writer.is_some_and(|p| reached(&p, &mut seen));
                if !readable {
                    break;
                }
                run += 1;
            }
            // Held while read without the lock, so none is recycled.
            for s in &mut slots.table[first..first + run] {
                s.refs += 1;
            }
            run
        };
        let mut data = vec![0u64; run];
        // SAFETY: every slot read was written by a submission that has
        // completed (the caller's, checked by the caller; the others
        // checked above) and is held, so not reset meanwhile; `data` holds
        // one 64-bit result per slot.
        let result = unsafe {
            device.get_query_pool_results(
                self.pool,
                slot,
                &mut data,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        };
        let mut slots = lock(&self.slots);
        for (i, &v) in data.iter().enumerate() {
            let s = &mut slots.table[first + i];
            if result.is_ok() {
                s.value = Some(v);
            }
            s.refs -= 1;
            if s.refs == 0 {
                let slot = (first + i) as u32;
                slots.retiring.push(slot);
            }
        }
        result.map_err(|e| vk_error("vkGetQueryPoolResults", e))?;
        Ok(data[0])
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
        c.timestamps.read(&c.device, slot)
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

    /// Records an event on `stream`; an event recorded with timing once
    /// stays timed. Each timed record writes a fresh query slot (a slot is
    /// written once between host resets); the previous record's slot is
    /// released.
    fn record_event(
        &self,
        stream: &'static VkStream,
        event: &mut Option<VkEvent>,
        timing: bool,
    ) -> Result<()> {
        let c = stream.ctx;
        let timed = timing || event.as_ref().is_some_and(|p| p.query.is_some());
        let query = if timed {
            if c.adapter.timestamp_valid_bits == 0 {
                return Err(Error::unsupported(
                    TY,
                    format!(
                        "timing events on {} (its queue family has no timestamps)",
                        c.adapter.name
                    ),
                ));
            }
            Some(c.timestamps.take(&c.device)?)
        } else {
            None
        };
        let value = if let Some(slot) = query {
            let pool = c.timestamps.pool;
            let submitted = stream.submit(
                |d, cb| {
                    // SAFETY: `cb` is recording; the slot was reset on the
                    // host and is written only here.
                    unsafe {
                        d.cmd_write_timestamp2(
                            cb,
                            vk::PipelineStageFlags2::ALL_COMMANDS,
                            pool,
                            slot,
                        );
                    }
                },
                Vec::new(),
            );
            match submitted {
                Ok(v) => {
                    c.timestamps.written(&[slot], stream.point(v));
                    v
                }
                Err(e) => {
                    c.timestamps.release(&c.device, slot);
                    return Err(e);
                }
            }
        } else if stream.has_pending_waits() {
            // The event must come after the waits queued on the stream.
            stream.submit(|_, _| {}, Vec::new())?
        } else {
            stream.last_value()
        };
        if let Some(slot) = event.as_ref().and_then(|p| p.query) {
            c.timestamps.release(&c.device, slot);
        }
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

    /// Its query slot is reused once nothing holds it and the work that
    /// writes it has run.
    fn release_event(&self, event: VkEvent) {
        if let Some(slot) = event.query {
            let c = event.point.ctx;
            c.timestamps.release(&c.device, slot);
        }
    }

    /// Arms a bracket for the thread's next submissions on `stream`: the
    /// work's own command buffers write the timestamps (no submission of
    /// their own), taking their query slots as they are recorded.
    fn begin_timed_work(&self, stream: &'static VkStream) -> Result<bool> {
        if stream.ctx.adapter.timestamp_valid_bits == 0 {
            return Ok(false);
        }
        // A bracket left armed (its span's work failed before it ended)
        // gives its slots back.
        if let Some(old) = stream::arm(Bracket::new(stream)) {
            abandon(old);
        }
        Ok(true)
    }

    /// The events of the bracketed submissions. Work that submitted
    /// nothing (a wait queued for later, an untimed event) gets an empty
    /// submission of its own, bracketed like any other.
    fn end_timed_work(&self, stream: &'static VkStream) -> Result<Option<(VkEvent, VkEvent)>> {
        let Some(mut b) = stream::disarm() else {
            return Ok(None);
        };
        if !std::ptr::eq(b.stream, stream) {
            abandon(b);
            return Ok(None);
        }
        if b.first.is_none() {
            stream::arm(b);
            let submitted = stream.submit(|_, _| {}, Vec::new());
            b = stream::disarm().unwrap_or(b);
            if let Err(e) = submitted {
                abandon(b);
                return Err(e);
            }
        }
        let (Some(first), Some(last), Some(start), Some(end)) = (b.first, b.last, b.start, b.end)
        else {
            abandon(b);
            return Ok(None);
        };
        Ok(Some((
            VkEvent {
                point: stream.point(first),
                query: Some(start),
            },
            VkEvent {
                point: stream.point(last),
                query: Some(end),
            },
        )))
    }
}

/// Gives back the slots a bracket holds (it produced no events); each is
/// reused once the work that writes it has run.
fn abandon(b: Bracket) {
    let c = b.stream.ctx;
    for slot in [b.start, b.end].into_iter().flatten() {
        c.timestamps.release(&c.device, slot);
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::Timestamps;
    use crate::backend::typed::Backend;
    use crate::backend::vulkan::Vulkan;
    use crate::kernel::kernels::SPIN;
    use crate::testing::conformance;
    use crate::{Buffer, DeviceType};

    /// A host that takes slots faster than the device writes them waits
    /// for the oldest writer, as a full ring does, instead of failing. The
    /// release benchmark `vulkan_timed_event_record_query` found this with
    /// the device's 32,768 slots; a pool of 4 makes it deterministic.
    #[test]
    fn a_pool_with_every_slot_in_flight_waits_for_the_oldest_writer() {
        // A skip where Vulkan cannot run, a failure where
        // `KEEL_REQUIRE_BACKENDS` names it.
        let Some(d) = conformance::device(DeviceType::Vulkan) else {
            return;
        };
        let s = crate::get_stream_from_pool(d, false).expect("stream");
        let ctx = Vulkan.device(d.index()).expect("device");
        let vk = Vulkan.stream(ctx, s.id()).expect("native stream");
        let n = 4096u32;
        let out = Buffer::new(d, 4 * n as usize).expect("buffer");
        let spin = |iters: u32| {
            let params: Vec<u8> = [n, iters].iter().flat_map(|v| v.to_le_bytes()).collect();
            s.launch(&SPIN, SPIN.grid_for(u64::from(n)), &[&out], &params)
                .expect("spin");
        };
        spin(1); // the pipeline, compiled before the timed part
        s.synchronize().expect("sync");
        let ts = Timestamps::with_slots(&ctx.device, 4).expect("query pool");
        // Every slot taken, written by a long kernel, and released.
        spin(200_000);
        let writer = vk.point(vk.last_value());
        for _ in 0..4 {
            let slot = ts.take(&ctx.device).expect("a free slot");
            ts.written(&[slot], writer);
            ts.release(&ctx.device, slot);
        }
        assert!(
            !writer.reached().expect("counter"),
            "the kernel ran before the pool filled: make it longer"
        );
        ts.take(&ctx.device)
            .expect("a slot, once the oldest writer has run");
        assert!(writer.reached().expect("counter"), "take waited for it");
        // SAFETY: the pool is this test's own, and the work that wrote its
        // slots has completed.
        unsafe { ctx.device.destroy_query_pool(ts.pool, None) };
    }
}
