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
/// [`MemoryEvent`]s; see the [module docs](self). Moving forward in time
/// applies only the events in between ([`MemoryMap::seek`]), so a viewer
/// following a cursor or a live trace pays for what is new.
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
    /// grown since the last call). Forward, only the events in between are
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
                self.segments.insert(
                    e.addr,
                    Segment::new(e.bytes, true, e.small_pool, e.ts_ns),
                );
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
                seg.freed.insert(
                    e.addr,
                    (e.addr.saturating_add(e.bytes), e.ts_ns, stream),
                );
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
