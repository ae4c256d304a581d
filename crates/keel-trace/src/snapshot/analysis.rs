//! What PyTorch's memory viewer shows, computed from a [`Snapshot`]: the
//! active-memory and reserved-memory timelines, the allocator's state at
//! any entry, the largest blocks at the peak, a text report, and the
//! operator of a profiler trace that was running at an entry's time.
//!
//! # Replaying from the end
//!
//! A snapshot knows the allocator's state exactly once: when it was taken
//! (its `segments`). Its history (`device_traces`) is a ring buffer, so it
//! usually starts after segments and blocks already existed (the GPT-2
//! snapshot holds 138 segments but reserves only 117 in its history). The
//! state before an entry is therefore rebuilt *backward* from the final
//! state, undoing entries from the last one down ([`state_at`]), and the
//! curves start from the final totals minus what the history added
//! ([`timeline`]). Going forward from an earlier state
//! ([`AllocatorState::seek`]) is the same replay the other way, and a test
//! checks that undoing the whole history and redoing it gives back the
//! final state block for block.
//!
//! A block counts as allocated from its `alloc` to its `free_completed`
//! (a `free_requested` block may still be used by a stream), as in
//! PyTorch's "Active Memory Timeline". The history's sizes are what was
//! *requested* (PyTorch records `orig_size`), so the allocated curve sums
//! requests, as that viewer does, and starts from the final state's
//! `requested_size`s; the blocks themselves are larger (see
//! [`BlockAt::size`]). Reserved bytes change with
//! `segment_alloc`/`segment_free` and, for expandable segments,
//! `segment_map`/`segment_unmap`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Action, BlockState, Snapshot, StackId, TraceEntry};
use crate::model::{LaneKind, SpanKind, Trace};

/// The highest allocated total of a [`Timeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peak {
    /// Bytes allocated.
    pub bytes: i64,
    /// The entry after which it was reached (`None`: before the first
    /// entry, when nothing in the history ever exceeded the start).
    pub entry: Option<usize>,
    /// That entry's time (µs since the Unix epoch), when known.
    pub time_us: Option<i64>,
}

/// One device's memory over its history: the curves PyTorch's viewer
/// draws as "Active Memory Timeline" (allocated) and "Active Cached
/// Segment Timeline" (reserved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The device (index into [`Snapshot::device_traces`]).
    pub device: usize,
    /// Bytes allocated (requested by live allocations) before the first
    /// entry.
    pub initial_allocated: i64,
    /// Bytes reserved before the first entry.
    pub initial_reserved: i64,
    /// Bytes allocated (requested by live allocations) after each entry
    /// (one per entry).
    pub allocated: Vec<i64>,
    /// Bytes reserved after each entry (one per entry).
    pub reserved: Vec<i64>,
    /// The highest allocated total, first reached.
    pub peak: Peak,
}

/// What an entry adds to the allocated and reserved totals.
fn deltas(e: &TraceEntry) -> (i64, i64) {
    let size = e.size as i64;
    match e.action {
        Action::Alloc => (size, 0),
        Action::FreeCompleted => (-size, 0),
        Action::SegmentAlloc | Action::SegmentMap => (0, size),
        Action::SegmentFree | Action::SegmentUnmap => (0, -size),
        _ => (0, 0),
    }
}

/// The allocated (requested) and reserved totals of `device` when the
/// snapshot was taken (its segments).
fn final_totals(s: &Snapshot, device: usize) -> (i64, i64) {
    let mut allocated = 0i64;
    let mut reserved = 0i64;
    for seg in s.segments.iter().filter(|g| g.device as usize == device) {
        reserved = reserved.wrapping_add(seg.total_size as i64);
        for b in seg.blocks.iter().filter(|b| b.state.is_active()) {
            allocated = allocated.wrapping_add(b.requested_size.unwrap_or(b.size) as i64);
        }
    }
    (allocated, reserved)
}

/// The memory curves of `device` (see [`Timeline`]): O(entries), one pass
/// to sum the history and one to draw it.
pub fn timeline(s: &Snapshot, device: usize) -> Timeline {
    let entries = s.device_traces.get(device).map_or(&[][..], Vec::as_slice);
    let (end_alloc, end_res) = final_totals(s, device);
    let (mut net_a, mut net_r) = (0i64, 0i64);
    for e in entries {
        let (a, r) = deltas(e);
        net_a = net_a.wrapping_add(a);
        net_r = net_r.wrapping_add(r);
    }
    let initial_allocated = end_alloc.wrapping_sub(net_a);
    let initial_reserved = end_res.wrapping_sub(net_r);
    let mut allocated = Vec::with_capacity(entries.len());
    let mut reserved = Vec::with_capacity(entries.len());
    let (mut a, mut r) = (initial_allocated, initial_reserved);
    let mut peak = Peak {
        bytes: a,
        entry: None,
        time_us: None,
    };
    for (i, e) in entries.iter().enumerate() {
        let (da, dr) = deltas(e);
        a = a.wrapping_add(da);
        r = r.wrapping_add(dr);
        allocated.push(a);
        reserved.push(r);
        if a > peak.bytes {
            peak = Peak {
                bytes: a,
                entry: Some(i),
                time_us: e.time_us,
            };
        }
    }
    Timeline {
        device,
        initial_allocated,
        initial_reserved,
        allocated,
        reserved,
        peak,
    }
}

/// The [`timeline`] of every device that has a history or segments.
pub fn timelines(s: &Snapshot) -> Vec<Timeline> {
    let devices = s
        .segments
        .iter()
        .map(|g| g.device as usize + 1)
        .max()
        .unwrap_or(0)
        .max(s.device_traces.len());
    (0..devices).map(|d| timeline(s, d)).collect()
}

/// A block of a segment at some point of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockAt {
    /// Its first address.
    pub address: u64,
    /// Its size in bytes: exact for a block of the snapshot's final state
    /// (and for the same allocation at other times); for a block only the
    /// history knows, its request rounded up to 512 bytes as the allocator
    /// rounds, which the allocator exceeds only when what a split would
    /// leave is too small to keep (then the block is the whole free range).
    pub size: u64,
    /// The bytes requested (for a free gap, its size).
    pub requested: u64,
    /// Its state (an [`BlockState::Inactive`] block is a gap between
    /// active ones: free, cached).
    pub state: BlockState,
    /// The stream it was allocated on (for a free gap, the segment's).
    pub stream: i64,
    /// Where it was allocated (empty for a gap, or when the history does
    /// not say).
    pub stack: StackId,
    /// The `alloc` entry that handed it out, when the history has it.
    pub alloc: Option<usize>,
}

/// A segment at some point of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentAt {
    /// Its base address.
    pub address: u64,
    /// Its size in bytes.
    pub total_size: u64,
    /// The stream it serves.
    pub stream: i64,
    /// From the small-block pool. Segments reserved in the history are
    /// placed by size: the small pool's are 2 MiB, the large pool's at
    /// least 10 MiB.
    pub small: bool,
    /// Its blocks in address order, active ones and the free gaps between
    /// them, covering it.
    pub blocks: Vec<BlockAt>,
}

#[derive(Debug, Clone)]
struct Live {
    size: u64,
    requested: u64,
    state: BlockState,
    stream: i64,
    stack: StackId,
    alloc: Option<usize>,
}

#[derive(Debug, Clone)]
struct Seg {
    size: u64,
    stream: i64,
    small: bool,
    blocks: BTreeMap<u64, Live>,
}

const SMALL_SEGMENT: u64 = 2 << 20;
const NO_ALLOC: u32 = u32::MAX;
/// PyTorch's allocator rounds every request up to a multiple of this.
const MIN_BLOCK: u64 = 512;

/// The block the allocator makes for a request of `requested` bytes, as
/// far as the request says (see [`BlockAt::size`]).
fn rounded(requested: u64) -> u64 {
    requested
        .max(1)
        .div_ceil(MIN_BLOCK)
        .saturating_mul(MIN_BLOCK)
}

/// A device's allocator (segments and active blocks) after some entry of
/// its history; see the module docs. Built by [`state_at`], moved with
/// [`seek`](AllocatorState::seek) (backward or forward, costing the
/// entries in between).
#[derive(Debug, Clone)]
pub struct AllocatorState {
    device: usize,
    /// Entries applied: the state is after entry `applied - 1`.
    applied: usize,
    segments: BTreeMap<u64, Seg>,
    /// For each `free_completed` (and `free_requested`) entry, the `alloc`
    /// entry of the block it frees (`NO_ALLOC`: before the history).
    alloc_of: Vec<u32>,
    /// Block sizes learnt from the final state, by `alloc` entry, where
    /// they differ from [`rounded`] (a few: most blocks are their rounded
    /// request), so replaying forward again gives them back.
    known: std::collections::HashMap<usize, u64>,
    mismatches: u64,
}

/// The allocator of `device` after entry `after` of its history (`None`:
/// before the first entry), rebuilt backward from the snapshot's final
/// state: O(entries after `after` × log blocks).
pub fn state_at(s: &Snapshot, device: usize, after: Option<usize>) -> AllocatorState {
    let entries = s.device_traces.get(device).map_or(&[][..], Vec::as_slice);
    // Pair frees with their allocs, and find the alloc of each block alive
    // at the end.
    let mut alloc_of = vec![NO_ALLOC; entries.len()];
    let mut open: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                open.insert(e.addr, i as u32);
            }
            Action::FreeRequested => {
                alloc_of[i] = open.get(&e.addr).copied().unwrap_or(NO_ALLOC);
            }
            Action::FreeCompleted => {
                alloc_of[i] = open.remove(&e.addr).unwrap_or(NO_ALLOC);
            }
            _ => {}
        }
    }
    let mut segments = BTreeMap::new();
    for g in s.segments.iter().filter(|g| g.device as usize == device) {
        let mut blocks = BTreeMap::new();
        for b in g.blocks.iter().filter(|b| b.state.is_active()) {
            let requested = b.requested_size.unwrap_or(b.size);
            let alloc = open
                .get(&b.address)
                .copied()
                .filter(|&i| entries[i as usize].size == requested)
                .map(|i| i as usize);
            blocks.insert(
                b.address,
                Live {
                    size: b.size,
                    requested,
                    state: b.state,
                    stream: alloc.map_or(g.stream, |i| entries[i].stream),
                    stack: b.stack,
                    alloc,
                },
            );
        }
        segments.insert(
            g.address,
            Seg {
                size: g.total_size,
                stream: g.stream,
                small: g.small,
                blocks,
            },
        );
    }
    let mut state = AllocatorState {
        device,
        applied: entries.len(),
        segments,
        alloc_of,
        known: std::collections::HashMap::new(),
        mismatches: 0,
    };
    state.seek(s, after);
    state
}

impl AllocatorState {
    /// The device.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The entry after which this is the state (`None`: before the first).
    pub fn after(&self) -> Option<usize> {
        self.applied.checked_sub(1)
    }

    /// Entries whose replay did not fit the state (an alloc undone where
    /// no such block was, a free of a block not there...): 0 for a
    /// consistent snapshot; a history that lost entries makes some.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// Bytes in active blocks.
    pub fn active_bytes(&self) -> u64 {
        self.segments
            .values()
            .flat_map(|g| g.blocks.values())
            .map(|b| b.size)
            .sum()
    }

    /// Bytes requested by the active blocks: [`Timeline::allocated`] at
    /// this entry.
    pub fn requested_bytes(&self) -> u64 {
        self.segments
            .values()
            .flat_map(|g| g.blocks.values())
            .map(|b| b.requested)
            .sum()
    }

    /// Bytes in segments.
    pub fn reserved_bytes(&self) -> u64 {
        self.segments.values().map(|g| g.size).sum()
    }

    /// Moves to after entry `after` (`None`: before the first), undoing or
    /// redoing the entries in between. An index past the history means its
    /// last entry.
    pub fn seek(&mut self, s: &Snapshot, after: Option<usize>) {
        let entries = s
            .device_traces
            .get(self.device)
            .map_or(&[][..], Vec::as_slice);
        let target = after.map_or(0, |a| a.saturating_add(1)).min(entries.len());
        while self.applied > target {
            self.applied -= 1;
            let i = self.applied;
            self.undo(entries, i);
        }
        while self.applied < target {
            let i = self.applied;
            self.redo(entries, i);
            self.applied += 1;
        }
    }

    /// The segment holding `addr`.
    fn segment_of(&mut self, addr: u64) -> Option<&mut Seg> {
        self.segments
            .range_mut(..=addr)
            .next_back()
            .filter(|(base, g)| addr < base.saturating_add(g.size))
            .map(|(_, g)| g)
    }

    fn undo(&mut self, entries: &[TraceEntry], i: usize) {
        let e = &entries[i];
        let ok = match e.action {
            Action::Alloc => match self
                .segment_of(e.addr)
                .and_then(|g| g.blocks.remove(&e.addr))
            {
                Some(b) => {
                    if b.size != rounded(b.requested) {
                        self.known.insert(i, b.size);
                    }
                    b.requested == e.size
                }
                None => false,
            },
            Action::FreeRequested => self
                .segment_of(e.addr)
                .and_then(|g| g.blocks.get_mut(&e.addr))
                .map(|b| b.state = BlockState::ActiveAllocated)
                .is_some(),
            Action::FreeCompleted => {
                let alloc = self.alloc_of[i];
                let (stack, alloc) = if alloc == NO_ALLOC {
                    (StackId::EMPTY, None)
                } else {
                    (entries[alloc as usize].stack, Some(alloc as usize))
                };
                let block = Live {
                    size: alloc
                        .and_then(|a| self.known.get(&a).copied())
                        .unwrap_or_else(|| rounded(e.size)),
                    requested: e.size,
                    state: BlockState::ActivePendingFree,
                    stream: e.stream,
                    stack,
                    alloc,
                };
                match self.segment_of(e.addr) {
                    Some(g) => g.blocks.insert(e.addr, block).is_none(),
                    None => false,
                }
            }
            Action::SegmentAlloc => self
                .segments
                .remove(&e.addr)
                .is_some_and(|g| g.blocks.is_empty()),
            Action::SegmentFree => self.add_segment(e),
            Action::SegmentMap => self.shrink(e),
            Action::SegmentUnmap => self.grow(e),
            _ => true,
        };
        if !ok {
            self.mismatches += 1;
        }
    }

    fn redo(&mut self, entries: &[TraceEntry], i: usize) {
        let e = &entries[i];
        let ok = match e.action {
            Action::Alloc => {
                let block = Live {
                    size: self
                        .known
                        .get(&i)
                        .copied()
                        .unwrap_or_else(|| rounded(e.size)),
                    requested: e.size,
                    state: BlockState::ActiveAllocated,
                    stream: e.stream,
                    stack: e.stack,
                    alloc: Some(i),
                };
                match self.segment_of(e.addr) {
                    Some(g) => g.blocks.insert(e.addr, block).is_none(),
                    None => false,
                }
            }
            Action::FreeRequested => self
                .segment_of(e.addr)
                .and_then(|g| g.blocks.get_mut(&e.addr))
                .map(|b| b.state = BlockState::ActivePendingFree)
                .is_some(),
            Action::FreeCompleted => self
                .segment_of(e.addr)
                .and_then(|g| g.blocks.remove(&e.addr))
                .is_some_and(|b| b.requested == e.size),
            Action::SegmentAlloc => self.add_segment(e),
            Action::SegmentFree => self
                .segments
                .remove(&e.addr)
                .is_some_and(|g| g.blocks.is_empty()),
            Action::SegmentMap => self.grow(e),
            Action::SegmentUnmap => self.shrink(e),
            _ => true,
        };
        if !ok {
            self.mismatches += 1;
        }
    }

    fn add_segment(&mut self, e: &TraceEntry) -> bool {
        self.segments
            .insert(
                e.addr,
                Seg {
                    size: e.size,
                    stream: e.stream,
                    small: e.size == SMALL_SEGMENT,
                    blocks: BTreeMap::new(),
                },
            )
            .is_none()
    }

    /// Pages `[addr, addr + size)` mapped: an expandable segment grows at
    /// its end, or a new one starts.
    fn grow(&mut self, e: &TraceEntry) -> bool {
        let before = self
            .segments
            .range_mut(..e.addr)
            .next_back()
            .filter(|(base, g)| base.saturating_add(g.size) == e.addr);
        match before {
            Some((_, g)) => {
                g.size = g.size.saturating_add(e.size);
                true
            }
            None => self.add_segment(e),
        }
    }

    /// Pages `[addr, addr + size)` unmapped: the segment shrinks from its
    /// end, or goes when nothing is left.
    fn shrink(&mut self, e: &TraceEntry) -> bool {
        let Some((&base, g)) = self
            .segments
            .range_mut(..=e.addr)
            .next_back()
            .filter(|(base, g)| e.addr.saturating_add(e.size) == base.saturating_add(g.size))
        else {
            return false;
        };
        if base == e.addr {
            self.segments.remove(&base);
        } else {
            g.size -= e.size;
        }
        true
    }

    /// The segments in address order, each covered by its active blocks
    /// and the free gaps between them.
    pub fn segments(&self) -> Vec<SegmentAt> {
        self.segments
            .iter()
            .map(|(&base, g)| {
                let mut blocks = Vec::with_capacity(2 * g.blocks.len() + 1);
                let mut at = base;
                let end = base.saturating_add(g.size);
                let gap = |from: u64, to: u64| BlockAt {
                    address: from,
                    size: to - from,
                    requested: to - from,
                    state: BlockState::Inactive,
                    stream: g.stream,
                    stack: StackId::EMPTY,
                    alloc: None,
                };
                for (&addr, b) in &g.blocks {
                    if addr > at {
                        blocks.push(gap(at, addr));
                    }
                    blocks.push(BlockAt {
                        address: addr,
                        size: b.size,
                        requested: b.requested,
                        state: b.state,
                        stream: b.stream,
                        stack: b.stack,
                        alloc: b.alloc,
                    });
                    at = at.max(addr.saturating_add(b.size));
                }
                if end > at {
                    blocks.push(gap(at, end));
                }
                SegmentAt {
                    address: base,
                    total_size: g.size,
                    stream: g.stream,
                    small: g.small,
                    blocks,
                }
            })
            .collect()
    }

    /// The active blocks, largest first (equal sizes by address).
    pub fn largest(&self, n: usize) -> Vec<BlockAt> {
        let mut all: Vec<BlockAt> = self
            .segments()
            .into_iter()
            .flat_map(|g| g.blocks)
            .filter(|b| b.state.is_active())
            .collect();
        all.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
        all.truncate(n);
        all
    }
}

/// The last entry of `device`'s history at or before `time_us` (`None`:
/// none, or no times in the history), for [`state_at`] at a time. Binary
/// search over the history's time order (PyTorch appends entries as they
/// happen).
pub fn entry_at(s: &Snapshot, device: usize, time_us: i64) -> Option<usize> {
    let entries = s.device_traces.get(device)?;
    let n = entries.partition_point(|e| e.time_us.is_some_and(|t| t <= time_us));
    n.checked_sub(1)
        .filter(|&i| entries[i].time_us.is_some_and(|t| t <= time_us))
}

/// The `n` largest blocks allocated at the peak of `device`'s
/// [`timeline`], each with the stack that allocated it.
pub fn largest_blocks(s: &Snapshot, device: usize, n: usize) -> Vec<BlockAt> {
    let t = timeline(s, device);
    state_at(s, device, t.peak.entry).largest(n)
}

/// Frames that only say how the allocator or the interpreter was reached,
/// left out of [`short_frames`].
fn plumbing(name: &str, filename: &str) -> bool {
    const NAMES: &[&str] = &[
        "CachingAllocator",
        "CapturedTraceback",
        "gather_with_cpp",
        "unwind::unwind",
        "PyEval",
        "PyObject_",
        "PyRun_",
        "Py_RunMain",
        "Py_BytesMain",
        "PyMethod_",
        "PyDescr_",
        "PyType_",
        "_Py",
        "__libc_",
        "_start",
        "wrap_kernel_functor",
        "c10::impl::",
        "::redispatch(",
        "c10::Dispatcher",
        "_call_impl",
        "_wrapped_call_impl",
    ];
    NAMES.iter().any(|n| name.contains(n)) || filename.contains("/Register")
}

/// What a C++ frame says about the program, if anything: the ATen operator
/// it calls (`at::_ops::mm::call` is `aten::mm`) or the autograd node it
/// runs (`torch::autograd::generated::MmBackward0::apply` is
/// `MmBackward0`). The rest of a C++ stack is dispatch and allocation.
fn cpp_label(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("at::_ops::") {
        let op = rest.split("::").next().unwrap_or(rest);
        return Some(format!("aten::{op}"));
    }
    let rest = name.strip_prefix("torch::autograd::generated::")?;
    let node = rest.split(['(', ':']).next().unwrap_or(rest);
    Some(node.trim_end_matches("_apply_functional").to_owned())
}

/// A stack in a few lines, innermost first: the Python frames
/// (`forward (modeling_gpt2.py:569)`), or where there are none (backward
/// passes run on autograd's C++ threads) the operators and autograd nodes
/// of its C++ frames (`aten::nll_loss_backward`, `NllLossBackward0`),
/// else its C++ frames without the allocator's and the interpreter's own;
/// at most `n`.
pub fn short_frames(s: &Snapshot, stack: StackId, n: usize) -> Vec<String> {
    let show = |f: &super::Frame| {
        let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
        if f.line > 0 {
            format!("{} ({file}:{})", f.name, f.line)
        } else {
            format!("{} ({file})", f.name)
        }
    };
    let python: Vec<String> = s
        .stack(stack)
        .filter(|f| f.filename.ends_with(".py") && !plumbing(&f.name, &f.filename))
        .take(n)
        .map(show)
        .collect();
    if !python.is_empty() {
        return python;
    }
    let mut labels: Vec<String> = Vec::new();
    for label in s.stack(stack).filter_map(|f| cpp_label(&f.name)) {
        if labels.len() == n {
            break;
        }
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    if !labels.is_empty() {
        return labels;
    }
    s.stack(stack)
        .filter(|f| !plumbing(&f.name, &f.filename))
        .take(n)
        .map(|f| crate::analysis::short(&show(f), 100))
        .collect()
}

/// `bytes` as a reader takes it in (`1.50 GiB`).
fn human(bytes: i64) -> String {
    let b = bytes as f64;
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in units {
        if bytes.unsigned_abs() >= size {
            return format!("{:.2} {name}", b / size as f64);
        }
    }
    format!("{bytes} B")
}

/// A report of the snapshot in plain text, stable for scripts (one fact
/// per line, exact byte counts beside the rounded ones): the segments and
/// entries, then per device its curves' start, peak and end, and the
/// `top` largest blocks at the peak with a few frames each.
pub fn text(s: &Snapshot, top: usize) -> String {
    let mut out = String::new();
    let blocks: usize = s.segments.iter().map(|g| g.blocks.len()).sum();
    let _ = writeln!(
        out,
        "memory snapshot: {} segments, {} blocks, {} devices with history, {} entries, {} frames, {} stacks",
        s.segments.len(),
        blocks,
        s.device_traces.iter().filter(|t| !t.is_empty()).count(),
        s.entries(),
        s.frames().len(),
        s.stack_count()
    );
    for t in timelines(s) {
        let entries = s.device_traces.get(t.device).map_or(&[][..], Vec::as_slice);
        let _ = writeln!(out, "device {}: {} entries", t.device, entries.len());
        let times: Vec<i64> = entries.iter().filter_map(|e| e.time_us).collect();
        if let (Some(first), Some(last)) = (times.first(), times.last()) {
            let _ = writeln!(
                out,
                "  time: {first} us to {last} us ({:.3} s)",
                (*last as f64 - *first as f64) / 1e6
            );
        }
        let end_a = t.allocated.last().copied().unwrap_or(t.initial_allocated);
        let end_r = t.reserved.last().copied().unwrap_or(t.initial_reserved);
        let peak_r = t
            .reserved
            .iter()
            .copied()
            .max()
            .unwrap_or(t.initial_reserved)
            .max(t.initial_reserved);
        let _ = writeln!(
            out,
            "  allocated: start {} B ({}), end {} B ({})",
            t.initial_allocated,
            human(t.initial_allocated),
            end_a,
            human(end_a)
        );
        let at = match (t.peak.entry, t.peak.time_us) {
            (Some(i), Some(us)) => format!("after entry {i} at {us} us"),
            (Some(i), None) => format!("after entry {i}"),
            (None, _) => "before the first entry".to_owned(),
        };
        let _ = writeln!(
            out,
            "  peak allocated: {} B ({}) {at}",
            t.peak.bytes,
            human(t.peak.bytes)
        );
        let _ = writeln!(
            out,
            "  reserved: start {} B ({}), peak {} B ({}), end {} B ({})",
            t.initial_reserved,
            human(t.initial_reserved),
            peak_r,
            human(peak_r),
            end_r,
            human(end_r)
        );
        if top == 0 {
            continue;
        }
        let state = state_at(s, t.device, t.peak.entry);
        if state.mismatches() > 0 {
            let _ = writeln!(
                out,
                "  replay: {} entries did not fit the final state (history lost entries?)",
                state.mismatches()
            );
        }
        let _ = writeln!(out, "  largest blocks at the peak:");
        for (k, b) in state.largest(top).iter().enumerate() {
            let when = match b.alloc {
                Some(i) => match entries[i].time_us {
                    Some(us) => format!("allocated at entry {i} ({us} us)"),
                    None => format!("allocated at entry {i}"),
                },
                None => "allocated before the history".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {:>3}. {} B ({}) at 0x{:x}, stream {}, {}, {when}",
                k + 1,
                b.size,
                human(b.size as i64),
                b.address,
                b.stream,
                b.state.name()
            );
            for f in short_frames(s, b.stack, 3) {
                let _ = writeln!(out, "         {f}");
            }
        }
    }
    out
}

/// Whether a span's name is a CUDA runtime or driver call.
fn runtime_call(name: &str) -> bool {
    name.starts_with("cuda")
        || name
            .strip_prefix("cu")
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))
}

/// The innermost host operator span of `trace` running at `time_us` (a
/// [`super::TraceEntry::time_us`]), by index in `trace.spans`: where an
/// allocation came from, when a profiler trace of the same run is open.
///
/// Operators are [`SpanKind::Operator`] spans (Keel's own traces) and
/// host [`SpanKind::Annotation`] spans (what an import makes of Kineto's
/// `cpu_op` and `user_annotation` events) except CUDA runtime and driver
/// calls the import could not classify (named `cuda...` or `cu` and a
/// capital: `cudaGetDevice`, `cuLaunchKernel`).
///
/// `origin_ns` is the trace file's own time of the trace's t = 0, in ns:
/// imports move a trace to start at 0, and the file's clock is what
/// snapshot times share. PyTorch's Kineto traces and memory snapshots of
/// one process do share it (Unix epoch): a Kineto event's epoch time is
/// `baseTimeNanoseconds` + `ts`. In the GPT-2 pair of `tests/data/import/`,
/// 2,236 of the 2,260 `[memory]` allocations the trace and the snapshot
/// both hold fall within 50 µs of each other that way (median 1 µs).
///
/// O(spans) per call. When several threads run operators at that time,
/// the shortest span wins (the most specific one).
pub fn operator_at(trace: &Trace, origin_ns: i64, time_us: i64) -> Option<u32> {
    let t = i128::from(time_us) * 1000 - i128::from(origin_ns);
    let t = u64::try_from(t).ok()?;
    let mut best: Option<(u64, u64, usize)> = None;
    for (i, sp) in trace.spans.iter().enumerate() {
        if !matches!(sp.kind, SpanKind::Operator | SpanKind::Annotation)
            || runtime_call(&sp.name)
            || sp.start_ns > t
            || sp.start_ns.saturating_add(sp.dur_ns) <= t
        {
            continue;
        }
        let host = trace
            .lanes
            .get(sp.lane as usize)
            .is_some_and(|l| matches!(l.kind, LaneKind::Host { .. }));
        if !host {
            continue;
        }
        // Shortest first; of equal ones the later start (nested deeper).
        let better = match best {
            None => true,
            Some((dur, start, _)) => sp.dur_ns < dur || (sp.dur_ns == dur && sp.start_ns > start),
        };
        if better {
            best = Some((sp.dur_ns, sp.start_ns, i));
        }
    }
    best.map(|(_, _, i)| i as u32)
}
