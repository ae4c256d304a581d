//! Events: a point in the device's submission order, and for timed events
//! a timestamp slot of the device's query set, written by a submission of
//! its own; and the profiler's brackets, whose two slots are written by
//! the bracketed work's own submissions (`begin_timed_work`).
//!
//! Reading timestamps is batched: the first read of a completed slot
//! resolves every completed slot not read yet (runs of near slots into
//! one buffer, one submission and one map) and keeps their values, so the
//! profiler's spans cost one read per batch instead of two per span.
//!
//! Slots are recycled: a destroyed event's slot becomes free again once
//! the submission that last wrote it has completed. A device holds any
//! number of timed events: when every slot is held, the values of those
//! whose work completed are read and moved out of the slots (the events
//! read them there), and the slots reused; a record waits only while more
//! than the slots' worth of timestamps are in flight (`QuerySlots::take`).

use rustc_hash::FxHashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Mutex;

use super::device::{WgpuDevice, lock};
use super::memory::{map_read, new_buffer};
use super::stream::{self, Bracket, Point, QueueStream, submit_outside_streams};
use super::{TY, Wgpu};
use crate::backend::slot_runs;
use crate::backend::typed::Events;
use crate::error::{Error, Result};

/// Timestamp queries per device (wgpu's most per query set): two per
/// profiled operation whose span is not resolved yet, one per timed event.
const QUERY_SLOTS: u32 = wgpu::QUERY_SET_MAX_QUERIES;

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

/// A device's timestamp slots, handed out in adjacent pairs (`2p`,
/// `2p + 1`): a compute pass that writes timestamps at slots `a` and `b`
/// makes wgpu-core reset every query from `min(a, b)` to `max(a, b)`
/// first (wgpu-core 30, `command/compute.rs`), which would clear other
/// events' timestamps lying in between. A timed event uses the first slot
/// of its pair, a bracket both.
pub(super) struct QuerySlots(Mutex<Slots>);

struct Slots {
    /// Free pairs.
    free: Vec<u32>,
    /// `(pair, seq)` of pairs given back whose last submission (`seq`)
    /// may still be running.
    retiring: Vec<(u32, u64)>,
    /// Per pair: how many of its slots are still held, and the highest
    /// submission that wrote one of those given back.
    holders: Vec<(u8, u64)>,
    /// Per slot, what it holds.
    stamps: Vec<Stamp>,
    /// The values of slots whose pairs were reused while still held
    /// (`take` with every pair held), by `(slot, seq)`: the holder reads
    /// its value here, and its give-back removes it.
    moved: FxHashMap<(u32, u64), u64>,
}

/// What `take` does when no pair is free or given back.
enum Full {
    /// Held pairs whose values are all read: moved out of the slots,
    /// their pairs are free again.
    Moved,
    /// Held pairs whose values can be read (their submissions completed).
    Read,
    /// Wait for this submission: it writes the oldest held slot.
    Wait(u64),
    /// Every pair is held and not written yet.
    Stuck,
}

impl Slots {
    /// Frees the pairs given back whose submissions have completed
    /// (through `completed`).
    fn retire(&mut self, completed: u64) {
        let Slots { free, retiring, .. } = self;
        retiring.retain(|&(pair, seq)| {
            let done = seq <= completed;
            if done {
                free.push(pair);
            }
            !done
        });
    }

    /// With every pair held: moves the values of held pairs whose every
    /// held slot was written by a completed submission (through
    /// `completed`) and read into `moved`, and frees those pairs.
    fn move_out(&mut self, completed: u64) -> Full {
        let mut unread = false;
        let mut oldest_in_flight: Option<u64> = None;
        let mut moved_any = false;
        for pair in 0..QUERY_SLOTS / 2 {
            let (held, _) = self.holders[pair as usize];
            let slots = [2 * pair, 2 * pair + 1];
            // The pair's written slots (a slot with nothing written has
            // sequence number 0), on the stack.
            let stamps = slots.map(|s| self.stamps[s as usize]);
            let written = stamps.iter().filter(|st| st.seq != 0);
            // A slot held but not written yet (a bracket armed, an event
            // between its take and its submission) keeps the pair.
            if held == 0 || written.clone().count() != usize::from(held) {
                continue;
            }
            if let Some(seq) = written
                .clone()
                .map(|st| st.seq)
                .filter(|&q| q > completed)
                .min()
            {
                oldest_in_flight = Some(oldest_in_flight.map_or(seq, |o| o.min(seq)));
                continue;
            }
            if written.clone().any(|st| st.ticks.is_none()) {
                unread = true;
                continue;
            }
            for s in slots {
                let st = std::mem::take(&mut self.stamps[s as usize]);
                if let (true, Some(t)) = (st.seq != 0, st.ticks) {
                    self.moved.insert((s, st.seq), t);
                }
            }
            self.holders[pair as usize] = (0, 0);
            self.free.push(pair);
            moved_any = true;
        }
        match (moved_any, unread, oldest_in_flight) {
            (true, _, _) => Full::Moved,
            (false, true, _) => Full::Read,
            (false, false, Some(seq)) => Full::Wait(seq),
            (false, false, None) => Full::Stuck,
        }
    }
}

/// What a slot holds: the timestamp written by submission `seq` (0:
/// nothing to read), and its value once read.
#[derive(Clone, Copy, Default)]
struct Stamp {
    seq: u64,
    ticks: Option<u64>,
}

impl QuerySlots {
    /// Every slot free.
    pub(super) fn new() -> Self {
        let pairs = QUERY_SLOTS / 2;
        QuerySlots(Mutex::new(Slots {
            free: (0..pairs).rev().collect(),
            retiring: Vec::new(),
            holders: vec![(0, 0); pairs as usize],
            stamps: vec![Stamp::default(); QUERY_SLOTS as usize],
            moved: FxHashMap::default(),
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

    /// A free pair, of which the caller holds `held` slots (1: the first,
    /// 2: both); returns its first slot. When no pair is free:
    ///
    /// - pairs given back whose submissions have completed are recycled,
    ///   and when those given back are all still being written, this waits
    ///   for the oldest one's submission (as a full ring does);
    /// - when every pair is held (live timed events, profiled spans not
    ///   read yet), those whose timestamps were all written by completed
    ///   submissions are read, their values moved out of the slots
    ///   (`Slots::moved`, where their holders find them) and the pairs
    ///   reused; when none has completed, this waits for the oldest.
    ///
    /// So a device holds any number of timed events, and waits only while
    /// more than its slots' worth of timestamps are in flight. It is an
    /// error only when every pair is held and none written yet.
    fn take(&self, d: &'static WgpuDevice, held: u8) -> Result<u32> {
        loop {
            let full = {
                let mut slots = lock(&self.0);
                if slots.free.is_empty() {
                    slots.retire(d.order.completed());
                }
                let Slots {
                    free,
                    holders,
                    retiring,
                    ..
                } = &mut *slots;
                if let Some(pair) = free.pop() {
                    holders[pair as usize] = (held, 0);
                    return Ok(2 * pair);
                }
                match retiring.iter().map(|&(_, seq)| seq).min() {
                    Some(oldest) => Full::Wait(oldest),
                    None => slots.move_out(d.order.completed()),
                }
            };
            match full {
                Full::Moved => {}
                Full::Read => {
                    if let Some(qs) = &d.timestamps {
                        read_completed(d, qs)?;
                    }
                }
                Full::Wait(seq) => d.order.wait(seq),
                Full::Stuck => {
                    return Err(Error::backend(
                        TY,
                        format!(
                            "all {QUERY_SLOTS} timestamp query slots are held by timed \
                             work not submitted yet"
                        ),
                    ));
                }
            }
        }
    }

    /// Gives back `slot`, last written by submission `seq`; its pair is
    /// free once both its slots are given back and their submissions have
    /// completed. A slot whose value was moved out only drops the value.
    fn give_back(&self, slot: u32, seq: u64) {
        let mut slots = lock(&self.0);
        if slots.moved.remove(&(slot, seq)).is_some() {
            return;
        }
        slots.stamps[slot as usize] = Stamp::default();
        let pair = slot / 2;
        let (held, last) = &mut slots.holders[pair as usize];
        *held = held.saturating_sub(1);
        *last = (*last).max(seq);
        if *held == 0 {
            let last = *last;
            slots.retiring.push((pair, last));
        }
    }

    /// Takes `slot`, written by submission `seq`, back for its holder to
    /// write again (an event recorded again reuses its slot): clears its
    /// value, so that the pair is not moved out while it is being
    /// rewritten. `false` when its value was already moved out and the
    /// pair reused: the holder then gives it back (dropping the value) and
    /// takes another.
    fn rewrite(&self, slot: u32, seq: u64) -> bool {
        let mut slots = lock(&self.0);
        if slots.moved.contains_key(&(slot, seq)) {
            return false;
        }
        slots.stamps[slot as usize] = Stamp::default();
        true
    }

    /// Notes that submission `seq` writes `slot` (each pair in `writes`).
    fn written(&self, writes: &[(u32, u64)]) {
        let mut slots = lock(&self.0);
        for &(slot, seq) in writes {
            slots.stamps[slot as usize] = Stamp { seq, ticks: None };
        }
    }

    /// The value submission `seq` wrote into `slot`, if read already.
    fn read(&self, slot: u32, seq: u64) -> Option<u64> {
        let slots = lock(&self.0);
        let s = slots.stamps[slot as usize];
        if s.seq == seq && s.ticks.is_some() {
            return s.ticks;
        }
        slots.moved.get(&(slot, seq)).copied()
    }

    /// The slots written by completed submissions (through `completed`)
    /// and not read yet, in slot order: `(slot, seq)`.
    fn unread(&self, completed: u64) -> Vec<(u32, u64)> {
        let slots = lock(&self.0);
        (0..QUERY_SLOTS)
            .zip(&slots.stamps)
            .filter(|(_, s)| s.seq != 0 && s.seq <= completed && s.ticks.is_none())
            .map(|(slot, s)| (slot, s.seq))
            .collect()
    }

    /// Keeps the values read for those of `slots` that `ticks` covers
    /// (`ticks[i]`: slot `first + i`) and that still hold what was read.
    fn keep(&self, slots: &[(u32, u64)], first: u32, ticks: &[u64]) {
        let mut state = lock(&self.0);
        for &(slot, seq) in slots {
            let Some(&t) = slot.checked_sub(first).and_then(|i| ticks.get(i as usize)) else {
                continue;
            };
            let s = &mut state.stamps[slot as usize];
            if s.seq == seq {
                s.ticks = Some(t);
            }
        }
    }
}

/// The timestamp submission `at` wrote into `slot`, in ticks: read from
/// the device's values already read, or else every completed unread slot
/// is resolved at once (one submission, one map).
fn ticks(d: &'static WgpuDevice, qs: &wgpu::QuerySet, slot: u32, at: &Point) -> Result<u64> {
    if let Some(t) = d.query_slots.read(slot, at.seq()) {
        return Ok(t);
    }
    at.wait()?;
    read_completed(d, qs)?;
    d.query_slots.read(slot, at.seq()).ok_or_else(|| {
        Error::backend(
            TY,
            format!(
                "timestamp slot {slot} holds no value of submission {}",
                at.seq()
            ),
        )
    })
}

/// Reads every slot written by a completed submission and not read yet
/// (one submission, one map) and keeps the values.
fn read_completed(d: &'static WgpuDevice, qs: &wgpu::QuerySet) -> Result<()> {
    let unread = d.query_slots.unread(d.order.completed());
    let runs = runs(&unread);
    let values = resolve(d, qs, &runs)?;
    for (run, values) in runs.iter().zip(&values) {
        d.query_slots.keep(&unread, run.start, values);
    }
    Ok(())
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
        let query = match event.as_ref().and_then(|e| Some((e.query?, e.at.seq()))) {
            Some((slot, seq)) if d.query_slots.rewrite(slot, seq) => Some(slot),
            // Its value was moved out and the pair reused: another slot,
            // the event's at once (so a failure below gives back the
            // right one).
            Some((slot, seq)) => {
                let fresh = d.query_slots.take(d, 1)?;
                d.query_slots.give_back(slot, seq);
                if let Some(e) = event.as_mut() {
                    e.query = Some(fresh);
                }
                Some(fresh)
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
                Some(d.query_slots.take(d, 1)?)
            }
            None => None,
        };
        let at = match (query, &d.timestamps) {
            (Some(slot), Some(qs)) => {
                let mut enc = d.encoder();
                enc.write_timestamp(qs, slot);
                let at = stream.submit(enc)?;
                d.query_slots.written(&[(slot, at.seq())]);
                at
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
        let t0 = ticks(d, qs, qa, &start.at)?;
        let t1 = ticks(d, qs, qb, &end.at)?;
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
            event
                .at
                .device()
                .query_slots
                .give_back(slot, event.at.seq());
        }
    }

    /// The event's timestamp in nanoseconds of the device's timestamp
    /// clock (read in a batch with every other completed slot). wgpu reads
    /// no host-correlated device clock, so the profiler calibrates it by
    /// paired sampling.
    fn event_time_ns(&self, event: &WgpuEvent) -> Result<Option<i64>> {
        let d = event.at.device();
        let (Some(slot), Some(qs)) = (event.query, &d.timestamps) else {
            return Ok(None);
        };
        Ok(Some(ticks_ns(d, ticks(d, qs, slot, &event.at)?)))
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
        // Adjacent slots (see `QuerySlots`).
        let start = d.query_slots.take(d, 2)?;
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
        d.query_slots
            .written(&[(b.start, first.seq()), (b.end, last.seq())]);
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
/// work that may still write them has run.
fn abandon(b: Bracket) {
    let d = b.stream.device();
    let seq = b.last.unwrap_or(0);
    d.query_slots.give_back(b.start, seq);
    d.query_slots.give_back(b.end, seq);
}

/// Slots closer than this to the previous unread slot are resolved in the
/// same range (the 256-byte alignment of each range's place in the
/// resolve buffer is 32 slots).
const RUN_GAP: u32 = 64;

/// The ranges of slots to resolve for `unread` (in slot order): runs of
/// slots less than [`RUN_GAP`] apart. Resolving one range from the lowest
/// to the highest slot would make the driver read every slot between
/// (up to the whole query set once slots are recycled).
fn runs(unread: &[(u32, u64)]) -> Vec<Range<u32>> {
    slot_runs(unread.iter().map(|&(slot, _)| slot), RUN_GAP)
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

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::{RUN_GAP, runs};

    #[test]
    fn unread_slots_resolve_in_runs_of_near_slots() {
        let unread = |slots: &[u32]| slots.iter().map(|&s| (s, 1)).collect::<Vec<_>>();
        assert!(runs(&[]).is_empty());
        assert_eq!(
            runs(&unread(&[0, 1, 2, 3])),
            vec![Range { start: 0, end: 4 }]
        );
        // A small gap stays in the run; a large one starts another (slots
        // recycled from both ends of the query set are not resolved with
        // everything between).
        assert_eq!(runs(&unread(&[4, 5, 9])), vec![Range { start: 4, end: 10 }]);
        let far = 10 + RUN_GAP;
        assert_eq!(
            runs(&unread(&[4, 5, 9, far, 4094, 4095])),
            [4..10, far..far + 1, 4094..4096]
        );
    }
}
