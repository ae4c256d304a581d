//! [`MemoryMap`]: a device's segments and blocks at a point in time,
//! rebuilt from a trace's [`MemoryEvent`]s (what PyTorch's memory
//! visualiser draws from a snapshot, here at any time of a trace).
//!
//! Segments come from `SegmentAlloc`/`SegmentFree` events. A block whose
//! segment was never seen reserved (reserved before the recording began,
//! or an imported trace, whose blocks are their own segments) makes a row
//! of its own that spans the blocks seen in it and goes when its last
//! block is freed. Inside a segment, what no live block covers is free
//! (cached): a free range is dated by the latest free seen in it, else by
//! when the segment was reserved.

use std::collections::BTreeMap;

use super::{MemoryAction, MemoryEvent, Trace};

/// What a range of a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out by the allocator (in use).
    Active,
    /// Cached by the allocator: reserved, free for the next request.
    Free,
}

/// A range of a segment at the map's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Its first address.
    pub addr: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// In use or cached.
    pub state: BlockState,
    /// The stream an active block was allocated on; for a free range, the
    /// stream of the last block freed in it (when known).
    pub stream: Option<i64>,
    /// Since when (ns from the epoch) it has been in this state.
    pub since_ns: u64,
}

/// One segment (one row of the map): its blocks cover it from its base to
/// its end, in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRow {
    /// The segment's base address.
    pub base: u64,
    /// Its size in bytes (for a segment never seen reserved, up to the end
    /// of the last block seen in it).
    pub bytes: u64,
    /// Whether its reservation was seen (`SegmentAlloc`); if not, its
    /// extent is only what its blocks show.
    pub known: bool,
    /// From the small-block pool.
    pub small_pool: bool,
    /// When it was reserved (or its first block seen), ns from the epoch.
    pub since_ns: u64,
    /// Active blocks and the free ranges between them, in address order.
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone)]
struct LiveBlock {
    bytes: u64,
    stream: Option<i64>,
    since_ns: u64,
}

#[derive(Debug, Clone)]
struct Segment {
    bytes: u64,
    known: bool,
    small_pool: bool,
    since_ns: u64,
    /// addr -> block in use.
    blocks: BTreeMap<u64, LiveBlock>,
    /// addr -> (end, freed at, stream) of blocks freed since the segment
    /// was reserved and not handed out again.
    freed: BTreeMap<u64, (u64, u64, Option<i64>)>,
}

impl Segment {
    fn new(bytes: u64, known: bool, small_pool: bool, since_ns: u64) -> Self {
        Segment {
            bytes,
            known,
            small_pool,
            since_ns,
            blocks: BTreeMap::new(),
            freed: BTreeMap::new(),
        }
    }

    /// Whether a block freed in it overlaps `[start, end)`.
    fn freed_in(&self, start: u64, end: u64) -> bool {
        self.freed
            .range(..end)
            .any(|(_, &(f_end, _, _))| f_end > start)
    }

    /// Whether `[start, end)` is shown as a free range: in a segment seen
    /// reserved, every gap; in another, only where a free was seen.
    fn shows_free(&self, start: u64, end: u64) -> bool {
        start < end && (self.known || self.freed_in(start, end))
    }

    /// A free range `[start, end)`: dated by the latest free overlapping
    /// it, else by the segment's reservation.
    fn free_range(&self, start: u64, end: u64) -> Block {
        let mut since = self.since_ns;
        let mut stream = None;
        let mut latest = None;
        for (_, &(e_end, at, s)) in self.freed.range(..end) {
            if e_end > start && latest.is_none_or(|l| at >= l) {
                latest = Some(at);
                stream = s;
            }
        }
        if let Some(at) = latest {
            since = since.max(at);
        }
        Block {
            addr: start,
            bytes: end - start,
            state: BlockState::Free,
            stream,
            since_ns: since,
        }
    }
}

/// One device's segments and blocks at a time, rebuilt from the trace's
/// [`MemoryEvent`]s. Moving forward in time applies only the events in
/// between ([`MemoryMap::seek`]), so a viewer following a cursor or a live
/// trace pays for what is new.
///
/// Segments come from `SegmentAlloc`/`SegmentFree` events. A block whose
/// segment was never seen reserved (reserved before the recording began,
/// or an imported trace, whose blocks are their own segments) makes a row
/// of its own that spans the blocks seen in it and goes when its last
/// block is freed. Inside a segment, what no live block covers is free
/// (cached): a free range is dated by the latest free seen in it, else by
/// when the segment was reserved.
#[derive(Debug, Clone)]
pub struct MemoryMap {
    device: u32,
    /// `trace.memory[..applied]` has been applied.
    applied: usize,
    time_ns: u64,
    segments: BTreeMap<u64, Segment>,
    allocated: u64,
    reserved: u64,
    last_oom: Option<MemoryEvent>,
}

impl MemoryMap {
    /// The empty map of `device` (index into [`Trace::devices`]) before
    /// any event.
    pub fn new(device: u32) -> Self {
        MemoryMap {
            device,
            applied: 0,
            time_ns: 0,
            segments: BTreeMap::new(),
            allocated: 0,
            reserved: 0,
            last_oom: None,
        }
    }

    /// The map of `device` at `ts_ns`: every event at or before it applied.
    pub fn at(trace: &Trace, device: u32, ts_ns: u64) -> Self {
        let mut map = MemoryMap::new(device);
        map.seek(&trace.memory, ts_ns);
        map
    }

    /// Moves the map to `ts_ns` over `events` (a trace's
    /// [`memory`](Trace::memory), in time order; a live trace may have
    /// grown at its end since the last call). Forward, only the events in between are
    /// applied; backward, the map is rebuilt.
    pub fn seek(&mut self, events: &[MemoryEvent], ts_ns: u64) {
        let end = events.partition_point(|e| e.ts_ns <= ts_ns);
        if end < self.applied || ts_ns < self.time_ns || self.applied > events.len() {
            *self = MemoryMap::new(self.device);
        }
        for e in &events[self.applied.min(end)..end] {
            if e.device == self.device {
                self.apply(e);
            }
        }
        self.applied = end;
        self.time_ns = ts_ns;
    }

    fn apply(&mut self, e: &MemoryEvent) {
        self.allocated = e.allocated;
        self.reserved = e.reserved;
        match e.action {
            MemoryAction::SegmentAlloc => {
                self.segments
                    .insert(e.addr, Segment::new(e.bytes, true, e.small_pool, e.ts_ns));
            }
            MemoryAction::SegmentFree => {
                self.segments.remove(&e.addr);
            }
            MemoryAction::Alloc => {
                let seg = self
                    .segments
                    .entry(e.segment)
                    .or_insert_with(|| Segment::new(0, false, e.small_pool, e.ts_ns));
                let end = e.addr.saturating_add(e.bytes);
                if !seg.known {
                    seg.bytes = seg.bytes.max(end.saturating_sub(e.segment));
                }
                // The range is no longer a free range.
                let stale: Vec<u64> = seg
                    .freed
                    .range(..end)
                    .filter(|(_, (f_end, _, _))| *f_end > e.addr)
                    .map(|(&a, _)| a)
                    .collect();
                for a in stale {
                    seg.freed.remove(&a);
                }
                seg.blocks.insert(
                    e.addr,
                    LiveBlock {
                        bytes: e.bytes,
                        stream: e.stream,
                        since_ns: e.ts_ns,
                    },
                );
            }
            MemoryAction::Free => {
                let Some(seg) = self.segments.get_mut(&e.segment) else {
                    return; // allocated before the recording, segment unseen
                };
                let stream = seg.blocks.remove(&e.addr).map_or(e.stream, |b| b.stream);
                if !seg.known && seg.blocks.is_empty() {
                    self.segments.remove(&e.segment);
                    return;
                }
                seg.freed
                    .insert(e.addr, (e.addr.saturating_add(e.bytes), e.ts_ns, stream));
            }
            MemoryAction::Oom => self.last_oom = Some(*e),
        }
    }

    /// The device (index into [`Trace::devices`]).
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The time the map shows, ns from the epoch.
    pub fn time_ns(&self) -> u64 {
        self.time_ns
    }

    /// Bytes allocated after the last event applied (0 before any).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Bytes reserved after the last event applied (0 before any).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// The last out-of-memory event at or before the map's time.
    pub fn last_oom(&self) -> Option<&MemoryEvent> {
        self.last_oom.as_ref()
    }

    /// How many segments the map has.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The segments (rows) in address order, each covered by its active
    /// blocks and the free ranges between them.
    pub fn rows(&self) -> Vec<SegmentRow> {
        self.segments
            .iter()
            .map(|(&base, seg)| {
                let end = base.saturating_add(seg.bytes);
                let mut blocks = Vec::with_capacity(seg.blocks.len() * 2 + 1);
                let mut at = base;
                for (&addr, b) in &seg.blocks {
                    if seg.shows_free(at, addr.min(end)) {
                        blocks.push(seg.free_range(at, addr.min(end)));
                    }
                    blocks.push(Block {
                        addr,
                        bytes: b.bytes,
                        state: BlockState::Active,
                        stream: b.stream,
                        since_ns: b.since_ns,
                    });
                    at = at.max(addr.saturating_add(b.bytes));
                }
                if seg.shows_free(at, end) {
                    blocks.push(seg.free_range(at, end));
                }
                SegmentRow {
                    base,
                    bytes: seg.bytes,
                    known: seg.known,
                    small_pool: seg.small_pool,
                    since_ns: seg.since_ns,
                    blocks,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u64 = 0x10_0000;

    #[allow(clippy::too_many_arguments)]
    fn ev(
        ts_ns: u64,
        device: u32,
        action: MemoryAction,
        addr: u64,
        segment: u64,
        bytes: u64,
        stream: Option<i64>,
        allocated: u64,
        reserved: u64,
    ) -> MemoryEvent {
        MemoryEvent {
            ts_ns,
            device,
            action,
            addr,
            segment,
            bytes,
            stream,
            small_pool: true,
            allocated,
            reserved,
        }
    }

    /// A 2 MiB segment on device 0: two blocks on streams 1 and 2, the
    /// first freed, a third block reusing the start of its range; device 1
    /// acts in between.
    fn events() -> Vec<MemoryEvent> {
        use MemoryAction::*;
        vec![
            ev(10, 0, SegmentAlloc, SEG, SEG, 2 << 20, None, 0, 2 << 20),
            ev(20, 0, Alloc, SEG, SEG, 1024, Some(1), 1024, 2 << 20),
            ev(30, 0, Alloc, SEG + 1024, SEG, 512, Some(2), 1536, 2 << 20),
            ev(35, 1, Alloc, 0x500, 0x500, 64, None, 64, 0),
            ev(40, 0, Free, SEG, SEG, 1024, Some(1), 512, 2 << 20),
            ev(50, 0, Alloc, SEG, SEG, 256, Some(2), 768, 2 << 20),
            ev(60, 0, Oom, 0, 0, 1 << 40, None, 768, 2 << 20),
            ev(70, 0, Free, SEG, SEG, 256, Some(2), 512, 2 << 20),
            ev(70, 0, Free, SEG + 1024, SEG, 512, Some(2), 0, 2 << 20),
            ev(80, 0, SegmentFree, SEG, SEG, 2 << 20, None, 0, 0),
        ]
    }

    /// (offset in the segment, bytes, state, stream, since).
    type Shape = (u64, u64, BlockState, Option<i64>, u64);

    fn shape(map: &MemoryMap) -> Vec<Vec<Shape>> {
        map.rows()
            .iter()
            .map(|r| {
                r.blocks
                    .iter()
                    .map(|b| (b.addr - r.base, b.bytes, b.state, b.stream, b.since_ns))
                    .collect()
            })
            .collect()
    }

    fn trace() -> Trace {
        Trace {
            memory: events(),
            ..Trace::default()
        }
    }

    #[test]
    fn blocks_at_several_times() {
        use BlockState::*;
        let t = trace();
        let end = (2 << 20) - 1536;
        assert!(MemoryMap::at(&t, 0, 5).rows().is_empty());
        assert_eq!(
            shape(&MemoryMap::at(&t, 0, 10)),
            [[(0, 2 << 20, Free, None, 10)]]
        );
        let at_30 = MemoryMap::at(&t, 0, 30);
        assert_eq!(
            shape(&at_30),
            [[
                (0, 1024, Active, Some(1), 20),
                (1024, 512, Active, Some(2), 30),
                (1536, end, Free, None, 10),
            ]]
        );
        assert_eq!((at_30.allocated(), at_30.reserved()), (1536, 2 << 20));
        // The freed block is a cached range, dated by its free, with the
        // stream it was used on.
        assert_eq!(
            shape(&MemoryMap::at(&t, 0, 45)),
            [[
                (0, 1024, Free, Some(1), 40),
                (1024, 512, Active, Some(2), 30),
                (1536, end, Free, None, 10),
            ]]
        );
        // Part of it handed out again: the rest stays free.
        let at_60 = MemoryMap::at(&t, 0, 60);
        assert_eq!(
            shape(&at_60),
            [[
                (0, 256, Active, Some(2), 50),
                (256, 768, Free, None, 10),
                (1024, 512, Active, Some(2), 30),
                (1536, end, Free, None, 10),
            ]]
        );
        assert_eq!(at_60.last_oom().map(|e| e.bytes), Some(1 << 40));
        assert_eq!(
            shape(&MemoryMap::at(&t, 0, 75)),
            [[(0, 2 << 20, Free, Some(2), 70)]]
        );
        let at_80 = MemoryMap::at(&t, 0, 80);
        assert!(at_80.rows().is_empty());
        assert_eq!((at_80.allocated(), at_80.reserved()), (0, 0));
        // Device 1's block, whose segment was never seen reserved, is a
        // row of its own.
        let other = MemoryMap::at(&t, 1, 100).rows();
        assert_eq!(other.len(), 1);
        assert_eq!(
            (other[0].base, other[0].bytes, other[0].known),
            (0x500, 64, false)
        );
    }

    #[test]
    fn seeking_forward_and_back_matches_a_fresh_map() {
        let t = trace();
        let mut map = MemoryMap::new(0);
        for ts in [0, 30, 45, 45, 75, 20, 60, 100, 10] {
            map.seek(&t.memory, ts);
            assert_eq!(map.rows(), MemoryMap::at(&t, 0, ts).rows(), "at {ts}");
            assert_eq!(map.time_ns(), ts);
        }
        // A live trace grows: what arrives later is applied.
        let mut live = events()[..3].to_vec();
        let mut map = MemoryMap::new(0);
        map.seek(&live, u64::MAX);
        assert_eq!(map.rows()[0].blocks.len(), 3);
        live.extend_from_slice(&events()[3..5]);
        map.seek(&live, u64::MAX);
        assert_eq!(map.rows(), MemoryMap::at(&t, 0, 45).rows());
    }

    #[test]
    fn blocks_of_unseen_segments_are_rows_until_freed() {
        use MemoryAction::*;
        // What an import gives: each block its own segment.
        let t = Trace {
            memory: vec![
                ev(1, 0, Alloc, 0x100, 0x100, 64, None, 64, 1024),
                ev(2, 0, Alloc, 0x200, 0x200, 32, None, 96, 1024),
                ev(3, 0, Free, 0x100, 0x100, 64, None, 32, 1024),
                // A free of a block allocated before the recording.
                ev(4, 0, Free, 0x900, 0x900, 8, None, 24, 1024),
            ],
            ..Trace::default()
        };
        let rows = |ts| -> Vec<(u64, u64)> {
            MemoryMap::at(&t, 0, ts)
                .rows()
                .iter()
                .map(|r| (r.base, r.bytes))
                .collect()
        };
        assert_eq!(rows(2), [(0x100, 64), (0x200, 32)]);
        assert_eq!(rows(4), [(0x200, 32)]);
        assert_eq!(MemoryMap::at(&t, 0, 4).allocated(), 24);
    }
}
