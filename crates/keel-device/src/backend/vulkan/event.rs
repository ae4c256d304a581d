//! Vulkan events: a point on a stream's timeline semaphore, and for timed
//! events a timestamp query written by a submission of its own.
//!
//! Each device has one timestamp query pool, whose slots are kept by a
//! [`TimestampPool`] (reference counts, retiring, batched resets, values
//! moved out when every slot is held: see its module docs). What is
//! Vulkan's here:
//!
//! - A slot is reset on the host (`vkResetQueryPool`, never inside a
//!   command buffer) and then written once, by one submission, before it
//!   is reset again; so each timed record takes a fresh slot and releases
//!   the previous record's, and slots are handed out one at a time.
//! - A profiled operation's two events hold their slots, where one slot
//!   may be both the end of a span and the start of the next
//!   (`stream.rs`'s brackets: on a busy stream a profiled launch writes
//!   only its end timestamp, and shares it). Only a timed event's own
//!   slot (one holder, written by the event's own submission) may have
//!   its value moved out; a profiled operation's slots are read and
//!   released within a batch.
//! - A submission is named by its semaphore and value ([`Point`]), which
//!   is what the pool records as a slot's writer; completion is read once
//!   per semaphore per pass.
//! - Reads go in runs: a completed slot is read together with the
//!   adjacent slots after it whose writers have completed, in one
//!   `vkGetQueryPoolResults` ([`ReadScope::Following`]): lavapipe makes
//!   the whole device idle in every call.

use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::time::Instant;

use ash::vk;

use super::device::{Ctx, vk_error};
use super::stream::{self, Bracket, Keeps, Point, VkStream};
use super::{TY, Vulkan};
use crate::backend::ClockSample;
use crate::backend::timestamps::{ReadScope, TimestampPool, TimestampQueries};
use crate::backend::typed::{Events, Timing};
use crate::core::DeviceType;
use crate::error::{Error, Result};

/// Timestamp queries per device: 256 KiB of results.
const QUERY_SLOTS: u32 = 32768;

/// The most slots one `vkGetQueryPoolResults` call reads.
const READ_RUN: u32 = 4096;

// A point names the submission that writes a timestamp slot: its
// semaphore and value (the device context is the same for every point of
// one pool). Points of one stream order as its submissions do.
impl PartialEq for Point {
    fn eq(&self, other: &Point) -> bool {
        (self.semaphore, self.value) == (other.semaphore, other.value)
    }
}

impl Eq for Point {}

impl Hash for Point {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.semaphore, self.value).hash(state);
    }
}

impl PartialOrd for Point {
    fn partial_cmp(&self, other: &Point) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Point {
    fn cmp(&self, other: &Point) -> std::cmp::Ordering {
        (self.semaphore, self.value).cmp(&(other.semaphore, other.value))
    }
}

/// A device's query pool, as its [`TimestampPool`] reaches it.
struct Queries<'a> {
    device: &'a ash::Device,
    pool: vk::QueryPool,
}

impl TimestampQueries for Queries<'_> {
    const DEVICE_TYPE: DeviceType = TY;
    type Writer = Point;
    /// The counters of the semaphores read so far.
    type Progress = Vec<(vk::Semaphore, u64)>;

    fn reached(&self, point: &Point, seen: &mut Self::Progress) -> bool {
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

    fn wait(&self, point: &Point) -> Result<()> {
        point.wait()
    }

    fn reset(&self, slots: Range<u32>) {
        // SAFETY: host query reset is enabled; the pool resets only slots
        // whose writers have completed and whose values it reads no more,
        // so no pending command or read uses them.
        unsafe {
            self.device
                .reset_query_pool(self.pool, slots.start, slots.len() as u32)
        };
    }

    fn read(&self, runs: &[Range<u32>]) -> Result<Vec<Vec<u64>>> {
        runs.iter()
            .map(|run| {
                let mut data = vec![0u64; run.len()];
                // SAFETY: every slot of the run was written by a submission
                // that has completed and is held, so not reset meanwhile
                // (the pool's contract; runs of adjacent slots cover no
                // others); `data` holds one 64-bit result per slot.
                unsafe {
                    self.device.get_query_pool_results(
                        self.pool,
                        run.start,
                        &mut data,
                        vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                    )
                }
                .map_err(|e| vk_error("vkGetQueryPoolResults", e))?;
                Ok(data)
            })
            .collect()
    }
}

/// A device's timestamp query pool and its slots (see the module docs).
pub(super) struct Timestamps {
    pub(super) pool: vk::QueryPool,
    slots: TimestampPool<Point>,
    /// Whether `pool` was destroyed (`interop::release`). Every use of the
    /// pool holds it for reading: a profiler resolving an event's time on
    /// another thread either finishes before the pool (and then the
    /// program's device) goes, or finds it gone and gets an error.
    destroyed: std::sync::RwLock<bool>,
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
            slots: TimestampPool::new(slots, 1, ReadScope::Following { max: READ_RUN }),
            destroyed: std::sync::RwLock::new(false),
        })
    }

    /// Destroys the query pool, for `interop::release`.
    ///
    /// # Safety
    ///
    /// No submission that writes the pool is pending, and the pool is
    /// never used again (its device is marked released right after).
    pub(super) unsafe fn destroy(&self, device: &ash::Device) {
        let mut destroyed = self
            .destroyed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !*destroyed {
            // SAFETY: the caller's promise; no other thread is inside a use
            // of the pool (the write lock), and none starts one after.
            unsafe { device.destroy_query_pool(self.pool, None) };
            *destroyed = true;
        }
    }

    /// Holds the pool for a use, or says it was destroyed.
    fn usable(&self) -> Result<std::sync::RwLockReadGuard<'_, bool>> {
        let destroyed = self
            .destroyed
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *destroyed {
            return Err(Error::invalid(
                "the device's timestamps are gone: the device was released",
            ));
        }
        Ok(destroyed)
    }

    fn queries<'a>(&self, device: &'a ash::Device) -> Queries<'a> {
        Queries {
            device,
            pool: self.pool,
        }
    }

    /// A reset slot, held once by the caller ([`TimestampPool::take`]).
    pub(super) fn take(&self, device: &ash::Device) -> Result<u32> {
        let _pool = self.usable()?;
        self.slots.take(&self.queries(device), 1)
    }

    /// Holds `slot` once more, if it is still held and still written by
    /// `writer` (a slot released meanwhile may already be recycled).
    pub(super) fn share(&self, slot: u32, writer: &Point) -> bool {
        self.slots.share(slot, *writer)
    }

    /// Notes that the submission `writer` (submitted) writes `slots`.
    pub(super) fn written(&self, slots: &[u32], writer: Point) {
        self.slots.written(slots, writer);
    }

    /// Notes that a timed event's own submission `writer` writes its
    /// `slot`, held by the event alone: its value may move out of the
    /// pool while the event lives.
    fn written_by_event(&self, slot: u32, writer: Point) {
        self.slots.written_movable(slot, writer);
    }

    /// Releases a timed event's `slot`, written by `writer` (or drops its
    /// moved-out value).
    fn release_written(&self, device: &ash::Device, slot: u32, writer: &Point) {
        // A destroyed pool has no slots left to give back.
        if let Ok(_pool) = self.usable() {
            self.slots
                .release_written(&self.queries(device), slot, *writer);
        }
    }

    /// Drops one hold of `slot`; the last one retires it: it is reset and
    /// reused once its writer has run.
    pub(super) fn release(&self, device: &ash::Device, slot: u32) {
        if let Ok(_pool) = self.usable() {
            self.slots.release(&self.queries(device), slot);
        }
    }

    /// The timestamp `holder` wrote in `slot`, read with the following
    /// slots whose writers have completed (a stream's spans take adjacent
    /// slots), or kept from an earlier read.
    fn read(&self, device: &ash::Device, slot: u32, holder: &Point) -> Result<u64> {
        let _pool = self.usable()?;
        self.slots.read(&self.queries(device), slot, *holder)
    }
}

/// A recorded Vulkan event.
pub struct VkEvent {
    pub(super) point: Point,
    /// The timestamp query slot, for timed events.
    pub(super) query: Option<u32>,
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
    /// The stream point the event completes at.
    pub(super) fn point(&self) -> Point {
        self.point
    }

    /// The event's timestamp, in ticks (timed and completed events only).
    fn timestamp(&self) -> Result<u64> {
        self.point.ctx.live()?;
        let slot = self
            .query
            .ok_or_else(|| Error::invalid("the event was recorded without timing"))?;
        let c: &Ctx = self.point.ctx;
        c.timestamps.read(&c.device, slot, &self.point)
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
            match submit_timestamp(stream, c.timestamps.pool, slot) {
                Ok(v) => {
                    c.timestamps.written_by_event(slot, stream.point(v));
                    v
                }
                Err(e) => {
                    c.timestamps.release(&c.device, slot);
                    return Err(e);
                }
            }
        } else if stream.has_pending_waits() {
            // The event must come after the waits queued on the stream.
            stream.submit(|_, _| {}, Keeps::new())?
        } else {
            stream.last_value()
        };
        if let Some(old) = event.as_ref()
            && let Some(slot) = old.query
        {
            c.timestamps.release_written(&c.device, slot, &old.point);
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
            if c.is_released() {
                return; // the query pool went with the device's release
            }
            c.timestamps.release_written(&c.device, slot, &event.point);
        }
    }
}

impl Timing for Vulkan {
    /// `vkGetCalibratedTimestamps` on the DEVICE domain, between two host
    /// instants.
    fn sample_clock(&self, device: &'static Ctx) -> Result<Option<ClockSample>> {
        device.live()?;
        // Held while the device is called: a release on another thread
        // waits for it (and the program destroys its device only after).
        let _device = device.timestamps.usable()?;
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
            let submitted = stream.submit(|_, _| {}, Keeps::new());
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

/// A submission of `stream`'s own that writes timestamp `slot` of `pool`
/// (reset on the host, written only here); its timeline value.
fn submit_timestamp(stream: &VkStream, pool: vk::QueryPool, slot: u32) -> Result<u64> {
    stream.submit(
        |d, cb| {
            // SAFETY: `cb` is recording; the slot was reset on the host and
            // is written only by this command buffer.
            unsafe {
                d.cmd_write_timestamp2(cb, vk::PipelineStageFlags2::ALL_COMMANDS, pool, slot);
            }
        },
        Keeps::new(),
    )
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
    use super::{Ctx, Point, Timestamps, VkStream};
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
        let (s, ctx, vk) = pool_stream(d);
        let n = 4096u32;
        // Its allocator events must not land in the profiler test's session.
        let _memory = crate::profiler::TEST_SESSION
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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

    /// A pool stream of `d`, its device's context and its native stream.
    fn pool_stream(d: crate::Device) -> (crate::Stream, &'static Ctx, &'static VkStream) {
        let s = crate::get_stream_from_pool(d, false).expect("stream");
        let ctx = Vulkan.device(d.index()).expect("device");
        let vk = Vulkan.stream(ctx, s.id()).expect("native stream");
        (s, ctx, vk)
    }

    /// What `record_event` does for a timed event, on the test's pool
    /// `ts`: a slot taken and written by a submission of `vk`'s own.
    fn record_timed(ts: &Timestamps, ctx: &'static Ctx, vk: &'static VkStream) -> (u32, Point) {
        let slot = ts.take(&ctx.device).expect("a slot");
        let value = super::submit_timestamp(vk, ts.pool, slot).expect("submit");
        let point = vk.point(value);
        ts.written_by_event(slot, point);
        (slot, point)
    }

    /// Live timed events past the pool's size: the values of those whose
    /// work completed move out of the pool and their slots are reused;
    /// with every holder's work in flight, taking a slot waits for the
    /// oldest; with every slot held by work never submitted, it fails.
    /// Every event keeps its own value throughout (a pool of 4 slots
    /// stands for the device's 32,768).
    #[test]
    fn live_timed_events_past_the_pool_keep_their_values() {
        let Some(d) = conformance::device(DeviceType::Vulkan) else {
            return;
        };
        let (s, ctx, vk) = pool_stream(d);
        let ts = Timestamps::with_slots(&ctx.device, 4).expect("query pool");
        let record = || record_timed(&ts, ctx, vk);
        let mut events: Vec<_> = (0..4).map(|_| record()).collect();
        s.synchronize().expect("sync");
        let first = ts
            .read(&ctx.device, events[0].0, &events[0].1)
            .expect("first value");
        // Eight more while the first four live: their values move out.
        events.extend((0..8).map(|_| record()));
        s.synchronize().expect("sync");
        let values: Vec<u64> = events
            .iter()
            .map(|(slot, point)| ts.read(&ctx.device, *slot, point).expect("value"))
            .collect();
        assert_eq!(values[0], first, "a moved value is the one written");
        assert!(
            values.windows(2).all(|w| w[0] <= w[1]),
            "timestamps of one stream's events in record order: {values:?}"
        );
        assert!(
            ts.slots.moved_len() >= 8,
            "at least two rounds of four moved out"
        );
        for (slot, point) in &events {
            ts.release_written(&ctx.device, *slot, point);
        }
        assert!(ts.slots.moved_len() == 0, "every release dropped its value");

        // Every holder's work in flight: the next take waits for it.
        let n = 4096u32;
        // Its allocator events must not land in the profiler test's session.
        let _memory = crate::profiler::TEST_SESSION
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = Buffer::new(d, 4 * n as usize).expect("buffer");
        let params: Vec<u8> = [n, 200_000].iter().flat_map(|v| v.to_le_bytes()).collect();
        s.launch(&SPIN, SPIN.grid_for(u64::from(n)), &[&out], &params)
            .expect("spin");
        let held: Vec<_> = (0..4).map(|_| record()).collect();
        let last = held[3].1;
        assert!(
            !held[0].1.reached().expect("counter"),
            "the kernel ran before the pool filled: make it longer"
        );
        let slot = ts
            .take(&ctx.device)
            .expect("a slot once the oldest has run");
        assert!(held[0].1.reached().expect("counter"), "take waited for it");
        ts.release(&ctx.device, slot);
        last.wait().expect("wait");
        for (slot, point) in &held {
            ts.release_written(&ctx.device, *slot, point);
        }

        // Every slot held by work never submitted: an error that says so.
        let unwritten: Vec<u32> = (0..4)
            .map(|_| ts.take(&ctx.device).expect("slot"))
            .collect();
        let err = ts
            .take(&ctx.device)
            .expect_err("nothing can move")
            .to_string();
        assert!(err.contains("not submitted yet"), "{err}");
        for slot in unwritten {
            ts.release(&ctx.device, slot);
        }
        // SAFETY: the pool is this test's own, and the work that wrote its
        // slots has completed.
        unsafe { ctx.device.destroy_query_pool(ts.pool, None) };
    }

    /// Four threads, each on its own stream, record timed events on a
    /// pool of 8 slots while keeping their last five alive (20 live
    /// events): slots move out under them all the time. Every event keeps
    /// its own value (a stream's timestamps never go back), and once all
    /// are released nothing is left moved out and every slot is free.
    #[test]
    fn threads_recording_past_the_pool_keep_their_values() {
        let Some(d) = conformance::device(DeviceType::Vulkan) else {
            return;
        };
        let ctx = Vulkan.device(d.index()).expect("device");
        let ts = Timestamps::with_slots(&ctx.device, 8).expect("query pool");
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let (_s, _, vk) = pool_stream(d);
                    let mut live = std::collections::VecDeque::new();
                    let mut last = 0u64;
                    // The oldest live event: its value, in order, released.
                    let mut retire = |(slot, point): (u32, Point)| {
                        point.wait().expect("wait");
                        let v = ts.read(&ctx.device, slot, &point).expect("value");
                        assert!(
                            v >= last,
                            "a stream's timestamps go forward: {last} then {v}"
                        );
                        last = v;
                        ts.release_written(&ctx.device, slot, &point);
                    };
                    for _ in 0..150 {
                        live.push_back(record_timed(&ts, ctx, vk));
                        if live.len() > 5
                            && let Some(oldest) = live.pop_front()
                        {
                            retire(oldest);
                        }
                    }
                    live.into_iter().for_each(retire);
                });
            }
        });
        assert!(ts.slots.moved_len() == 0, "every value released");
        let all: Vec<u32> = (0..8)
            .map(|_| ts.take(&ctx.device).expect("every slot free again"))
            .collect();
        for slot in all {
            ts.release(&ctx.device, slot);
        }
        // SAFETY: the pool is this test's own, and the work that wrote its
        // slots has completed (each thread waited for its events).
        unsafe { ctx.device.destroy_query_pool(ts.pool, None) };
    }
}
