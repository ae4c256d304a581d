//! The caching allocator's bookkeeping, with no backend calls: segments
//! (the backend's allocations), the blocks they are split into, the free
//! lists and the statistics. [`Pools`] is generic over the segment's
//! handle `H` (the backend's allocation in Keel, `()` in the unit tests),
//! so every rule here is tested without a device.
//!
//! The policy is PyTorch's `CUDACachingAllocator`:
//!
//! - sizes are rounded up to [`MIN_BLOCK`] (512) bytes;
//! - requests up to [`SMALL_SIZE`] (1 MiB) come from [`SMALL_SEGMENT`]
//!   (2 MiB) segments (the small pool); larger ones from segments of their
//!   own, rounded up to [`LARGE_ROUND`] (2 MiB) (the large pool);
//! - a request takes the smallest free block of its pool and stream that
//!   fits (best fit), and is split off it when the rest is worth keeping
//!   (at least 512 bytes in the small pool, more than 1 MiB in the large);
//! - a freed block merges with its free neighbours;
//! - with a `max_split_size`, requests at or above it are never split, and
//!   blocks at or above it serve only requests at or above it (and at most
//!   [`LARGE_BUFFER`] bigger);
//! - with [`Policy::own_segments`] (devices whose kernels hold a whole
//!   allocation while they run: host memory), every block is a segment of
//!   its own, of the request's rounded size, never split; a free one
//!   serves a request of at least half its size (best fit), and a request
//!   no free block serves first releases its stream's free blocks that are
//!   too small for it, up to its size ([`Pools::release_smaller`]).
//!
//! A block belongs to the stream of its segment (the stream current when
//! the segment was reserved) and is reused only by requests on that
//! stream. A block freed while other streams still use it
//! ([`Pools::record_use`]) stays [`BlockState::Pending`] until the caller,
//! who tracks the events, calls [`Pools::release_pending`].

use std::collections::BTreeSet;

use crate::core::{Stream, StreamId};

/// Every block's size and offset is a multiple of this.
pub const MIN_BLOCK: u64 = 512;
/// Requests up to this size come from the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// The size of a small pool segment.
pub const SMALL_SEGMENT: u64 = 2 << 20;
/// Large pool segments are rounded up to a multiple of this.
pub const LARGE_ROUND: u64 = 2 << 20;
/// How much bigger than a request an oversize block may be and still
/// serve it (PyTorch's `kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;

/// A block's index in [`Pools`]; valid until the block merges away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(u32);

/// A segment's index in [`Pools`]; valid until it is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(u32);

/// What a block is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Held by a buffer.
    Active,
    /// In the free list, ready for reuse on its stream.
    Free,
    /// Freed by its buffer, but other streams that used it may still be
    /// running work on it.
    Pending,
}

/// The policy knobs of [`Pools`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Blocks at or above this size are never split (`u64::MAX`: no
    /// limit).
    pub max_split_size: u64,
    /// Every block a segment of its own (never split, never merged): for
    /// a device whose kernels hold each allocation they bind whole while
    /// they run, so that kernels on different buffers never wait for each
    /// other.
    pub own_segments: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_split_size: u64::MAX,
            own_segments: false,
        }
    }
}

/// One statistic, as PyTorch keeps it: current value, peak, and the
/// totals added and removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: i64,
    /// The highest value since the last reset of peaks.
    pub peak: i64,
    /// Everything ever added.
    pub allocated: u64,
    /// Everything ever removed.
    pub freed: u64,
}

impl Stat {
    /// Adds `d`: the total added, and the peak with one compare.
    #[inline]
    fn inc(&mut self, d: u64) {
        self.current += d as i64;
        self.allocated += d;
        if self.current > self.peak {
            self.peak = self.current;
        }
    }

    /// Removes `d` (the peak, at least the current value, stays).
    #[inline]
    fn dec(&mut self, d: u64) {
        self.current -= d as i64;
        self.freed += d;
    }
}

/// A statistic for all blocks, the small pool and the large pool
/// (PyTorch's `all`, `small_pool`, `large_pool`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// Blocks of requests up to 1 MiB.
    pub small_pool: Stat,
    /// Larger blocks.
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    fn pool(&mut self, small: bool) -> &mut Stat {
        if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        }
    }

    /// Adds `d` to `all` and to the pool's statistic.
    #[inline]
    fn inc(&mut self, small: bool, d: u64) {
        self.all.inc(d);
        self.pool(small).inc(d);
    }

    /// Removes `d` from `all` and from the pool's statistic.
    #[inline]
    fn dec(&mut self, small: bool, d: u64) {
        self.all.dec(d);
        self.pool(small).dec(d);
    }

    fn reset_peak(&mut self) {
        for s in [&mut self.all, &mut self.small_pool, &mut self.large_pool] {
            s.peak = s.current;
        }
    }
}

/// A device's allocator statistics (PyTorch's `DeviceStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blocks held by buffers.
    pub allocation: StatArray,
    /// Segments reserved from the backend.
    pub segment: StatArray,
    /// Blocks held by buffers or waiting for other streams.
    pub active: StatArray,
    /// Free blocks that are part of a split segment (not releasable).
    pub inactive_split: StatArray,
    /// Bytes of blocks held by buffers (rounded sizes).
    pub allocated_bytes: StatArray,
    /// Bytes of segments reserved from the backend.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: StatArray,
    /// Bytes buffers asked for (unrounded).
    pub requested_bytes: StatArray,
    /// Backend allocations that failed and were retried after freeing the
    /// cache.
    pub num_alloc_retries: u64,
    /// Allocations that failed after the retry.
    pub num_ooms: u64,
    /// Segments reserved from the backend (all time).
    pub num_device_alloc: u64,
    /// Segments released to the backend (all time).
    pub num_device_free: u64,
    /// Requests at or above `max_split_size`.
    pub oversize_allocations: Stat,
    /// Segments at or above `max_split_size`.
    pub oversize_segments: Stat,
}

#[derive(Debug)]
struct Block {
    segment: SegmentId,
    offset: u64,
    size: u64,
    requested: u64,
    state: BlockState,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    /// Streams other than the segment's that used the block.
    uses: Vec<Stream>,
}

#[derive(Debug)]
struct Segment<H> {
    handle: H,
    base: u64,
    size: u64,
    stream: Stream,
    small: bool,
    first: BlockId,
}

/// Where an allocation landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The block.
    pub block: BlockId,
    /// Its segment.
    pub segment: SegmentId,
    /// Offset of the block in its segment.
    pub offset: u64,
    /// The block's (rounded) size.
    pub size: u64,
    /// The block's address: the segment's base plus the offset.
    pub addr: u64,
    /// The segment's base address.
    pub segment_base: u64,
    /// Whether the block is in the small pool.
    pub small: bool,
}

/// A released segment: its handle and where it was.
#[derive(Debug)]
pub struct Released<H> {
    /// The backend's allocation, to drop.
    pub handle: H,
    /// The segment's base address.
    pub base: u64,
    /// Its size.
    pub size: u64,
    /// Whether it was a small pool segment.
    pub small: bool,
}

/// One block in a [`SegmentSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSnapshot {
    /// The block's address (segment base plus offset).
    pub address: u64,
    /// Offset in the segment.
    pub offset: u64,
    /// Rounded size in bytes.
    pub size: u64,
    /// Bytes the buffer asked for (0 for free blocks).
    pub requested_size: u64,
    /// Active, free or pending stream uses.
    pub state: BlockState,
    /// Other streams whose use of the block is pending (or recorded, for an
    /// active block).
    pub stream_uses: Vec<Stream>,
}

/// One segment in a memory snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// The segment's base address (in the device's allocator address
    /// space, unique while the segment lives).
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// The stream its blocks belong to.
    pub stream: Stream,
    /// Small pool (2 MiB segments) or large pool.
    pub small_pool: bool,
    /// Bytes of blocks held by buffers.
    pub allocated_size: u64,
    /// Bytes of blocks held by buffers or pending.
    pub active_size: u64,
    /// Its blocks in address order.
    pub blocks: Vec<BlockSnapshot>,
}

/// Free-list key: stream id (every stream of one allocator is on its
/// device), size, address, block (best fit = the first key at or after
/// `(stream, size)`).
type FreeKey = (StreamId, u64, u64, BlockId);

/// One pool's free list: a B-tree of [`FreeKey`]s with a one-key overlay
/// that makes the common allocate-then-free pair cost no tree change.
///
/// Taking a block from a free block and giving it back replaces one key
/// with another and then puts the first back: allocation removes the
/// found block's key and inserts the split tail's; the free merges the
/// tail back (removing its key) and inserts the merged block's, the key
/// removed before. The overlay absorbs this: `hidden` is a key still in
/// the tree but no longer in the list, `added` a key in the list but not
/// in the tree. The list is `tree - hidden + added`; the best fit is the
/// smaller of the tree's first key at or after the bound (skipping
/// `hidden`) and `added`.
#[derive(Debug, Default)]
struct FreeList {
    tree: BTreeSet<FreeKey>,
    hidden: Option<FreeKey>,
    added: Option<FreeKey>,
}

impl FreeList {
    /// Adds `key` (not in the list).
    #[inline(always)]
    fn insert(&mut self, key: FreeKey) {
        if self.hidden == Some(key) {
            self.hidden = None;
        } else if self.added.is_none() {
            self.added = Some(key);
        } else {
            self.tree.insert(key);
        }
    }

    /// Removes `key` (in the list).
    #[inline(always)]
    fn remove(&mut self, key: FreeKey) {
        if self.added == Some(key) {
            self.added = None;
        } else if self.hidden.is_none() {
            // In the list and not added: in the tree.
            self.hidden = Some(key);
        } else {
            self.tree.remove(&key);
        }
    }

    /// The smallest key at or after `lo`.
    #[inline(always)]
    fn first_from(&self, lo: FreeKey) -> Option<FreeKey> {
        let hidden = self.hidden;
        let in_tree = self.tree.range(lo..).find(|k| Some(**k) != hidden).copied();
        let added = self.added.filter(|k| *k >= lo);
        match (in_tree, added) {
            (Some(t), Some(a)) => Some(t.min(a)),
            (t, a) => t.or(a),
        }
    }

    /// The keys in `lo..hi`, in no particular order.
    fn in_range(&self, lo: FreeKey, hi: FreeKey) -> Vec<FreeKey> {
        let hidden = self.hidden;
        self.tree
            .range(lo..hi)
            .filter(|k| Some(**k) != hidden)
            .copied()
            .chain(self.added.filter(|k| (lo..hi).contains(k)))
            .collect()
    }

    /// Every key in the list, in order (tests).
    #[cfg(test)]
    fn keys(&self) -> Vec<FreeKey> {
        let mut v: Vec<FreeKey> = self
            .tree
            .iter()
            .filter(|k| Some(**k) != self.hidden)
            .copied()
            .chain(self.added)
            .collect();
        v.sort_unstable();
        v
    }
}

/// The bookkeeping of one device's caching allocator; see the
/// [module docs](self).
#[derive(Debug)]
pub struct Pools<H> {
    policy: Policy,
    blocks: Vec<Option<Block>>,
    free_blocks: Vec<u32>,
    segments: Vec<Option<Segment<H>>>,
    free_segments: Vec<u32>,
    /// Free lists of the small and the large pool.
    free: [FreeList; 2],
    next_base: u64,
    stats: Stats,
}

/// `len` rounded up to the block size (0 stays 0).
pub fn round_size(len: u64) -> u64 {
    len.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// Whether a (rounded) size is served by the small pool.
pub fn is_small(size: u64) -> bool {
    size <= SMALL_SIZE
}

/// The segment to reserve for a (rounded) request.
pub fn segment_size(size: u64) -> u64 {
    if is_small(size) {
        SMALL_SEGMENT
    } else {
        size.div_ceil(LARGE_ROUND).saturating_mul(LARGE_ROUND)
    }
}

fn pool(small: bool) -> usize {
    usize::from(!small)
}

impl<H> Pools<H> {
    /// Empty pools with `policy`.
    pub fn new(policy: Policy) -> Self {
        Pools {
            policy,
            blocks: Vec::new(),
            free_blocks: Vec::new(),
            segments: Vec::new(),
            free_segments: Vec::new(),
            free: [FreeList::default(), FreeList::default()],
            next_base: LARGE_ROUND,
            stats: Stats::default(),
        }
    }

    /// Changes the policy (applies to later splits and searches).
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The segment to reserve for a (rounded) request under the policy:
    /// [`segment_size`], or the request's own size with
    /// [`Policy::own_segments`].
    pub fn segment_size(&self, size: u64) -> u64 {
        if self.policy.own_segments {
            size
        } else {
            segment_size(size)
        }
    }

    /// The statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts a backend allocation retried after freeing the cache.
    pub fn count_retry(&mut self) {
        self.stats.num_alloc_retries += 1;
    }

    /// Counts an allocation that failed for good.
    pub fn count_oom(&mut self) {
        self.stats.num_ooms += 1;
    }

    /// Resets every peak to the current value.
    pub fn reset_peaks(&mut self) {
        let s = &mut self.stats;
        for a in [
            &mut s.allocation,
            &mut s.segment,
            &mut s.active,
            &mut s.inactive_split,
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.active_bytes,
            &mut s.inactive_split_bytes,
            &mut s.requested_bytes,
        ] {
            a.reset_peak();
        }
        s.oversize_allocations.peak = s.oversize_allocations.current;
        s.oversize_segments.peak = s.oversize_segments.current;
    }

    #[inline(always)]
    fn block(&self, id: BlockId) -> &Block {
        match &self.blocks[id.0 as usize] {
            Some(b) => b,
            None => unreachable!("block {id:?} is gone"),
        }
    }

    #[inline(always)]
    fn block_mut(&mut self, id: BlockId) -> &mut Block {
        match &mut self.blocks[id.0 as usize] {
            Some(b) => b,
            None => unreachable!("block {id:?} is gone"),
        }
    }

    #[inline(always)]
    fn segment(&self, id: SegmentId) -> &Segment<H> {
        match &self.segments[id.0 as usize] {
            Some(s) => s,
            None => unreachable!("segment {id:?} is gone"),
        }
    }

    /// The handle of a live segment.
    pub fn handle(&self, id: SegmentId) -> &H {
        &self.segment(id).handle
    }

    /// The stream a live block belongs to.
    pub fn stream_of(&self, id: BlockId) -> Stream {
        self.segment(self.block(id).segment).stream
    }

    #[inline(always)]
    fn new_block(&mut self, block: Block) -> BlockId {
        match self.free_blocks.pop() {
            Some(i) => {
                self.blocks[i as usize] = Some(block);
                BlockId(i)
            }
            None => {
                self.blocks.push(Some(block));
                BlockId(u32::try_from(self.blocks.len() - 1).unwrap_or(u32::MAX))
            }
        }
    }

    #[inline(always)]
    fn drop_block(&mut self, id: BlockId) {
        self.blocks[id.0 as usize] = None;
        self.free_blocks.push(id.0);
    }

    #[inline(always)]
    fn free_key(&self, id: BlockId) -> (usize, FreeKey, bool) {
        let b = self.block(id);
        let s = self.segment(b.segment);
        let whole = b.offset == 0 && b.size == s.size;
        (
            pool(s.small),
            (s.stream.id(), b.size, s.base + b.offset, id),
            whole,
        )
    }

    #[inline(always)]
    fn insert_free(&mut self, id: BlockId) {
        let (p, key, whole) = self.free_key(id);
        self.free[p].insert(key);
        if !whole {
            self.stats.inactive_split.inc(p == 0, 1);
            self.stats.inactive_split_bytes.inc(p == 0, key.1);
        }
    }

    #[inline(always)]
    fn remove_free(&mut self, id: BlockId) {
        let (p, key, whole) = self.free_key(id);
        self.free[p].remove(key);
        if !whole {
            self.stats.inactive_split.dec(p == 0, 1);
            self.stats.inactive_split_bytes.dec(p == 0, key.1);
        }
    }

    /// Takes a cached free block for `len` bytes on `stream`, splitting it
    /// if the rest is worth keeping. `None` when the cache has none.
    #[inline(always)]
    pub fn alloc_cached(&mut self, len: u64, stream: Stream) -> Option<Allocation> {
        let size = round_size(len.max(1));
        let small = is_small(size);
        let max_split = self.policy.max_split_size;
        let sid = stream.id();
        let (_, _, _, id) = self.free[pool(small)]
            .first_from((sid, size, 0, BlockId(0)))
            .filter(|k| k.0 == sid)?;
        let found = self.block(id).size;
        if size < max_split && found >= max_split {
            return None;
        }
        if size >= max_split && found >= size.saturating_add(LARGE_BUFFER) {
            return None;
        }
        if self.policy.own_segments && found - size > size {
            return None;
        }
        Some(self.take(id, size, len, small))
    }

    /// Marks free block `id` active for a `len`-byte request of (rounded)
    /// `size`, splitting off the rest when worth it.
    #[inline(always)]
    fn take(&mut self, id: BlockId, size: u64, len: u64, small: bool) -> Allocation {
        self.remove_free(id);
        let max_split = self.policy.max_split_size;
        let (found, offset, segment, next) = {
            let b = self.block(id);
            (b.size, b.offset, b.segment, b.next)
        };
        let rest = found - size;
        let split = if self.policy.own_segments {
            false
        } else if small {
            rest >= MIN_BLOCK
        } else {
            size < max_split && rest > SMALL_SIZE
        };
        if split {
            let tail = self.new_block(Block {
                segment,
                offset: offset + size,
                size: rest,
                requested: 0,
                state: BlockState::Free,
                prev: Some(id),
                next,
                uses: Vec::new(),
            });
            if let Some(n) = next {
                self.block_mut(n).prev = Some(tail);
            }
            let b = self.block_mut(id);
            b.next = Some(tail);
            b.size = size;
            self.insert_free(tail);
        }
        let b = self.block_mut(id);
        b.state = BlockState::Active;
        b.requested = len;
        let size = b.size;
        self.stats.allocation.inc(small, 1);
        self.stats.allocated_bytes.inc(small, size);
        self.stats.requested_bytes.inc(small, len);
        self.stats.active.inc(small, 1);
        self.stats.active_bytes.inc(small, size);
        if size >= max_split {
            self.stats.oversize_allocations.inc(1);
        }
        let s = self.segment(segment);
        Allocation {
            block: id,
            segment,
            offset,
            size,
            addr: s.base + offset,
            segment_base: s.base,
            small,
        }
    }

    /// Adds a segment of `size` bytes reserved from the backend on
    /// `stream`, as one free block, and returns it with its base address.
    pub fn add_segment(&mut self, handle: H, size: u64, stream: Stream, small: bool) -> SegmentId {
        let base = self.next_base;
        self.next_base = base.saturating_add(size.div_ceil(LARGE_ROUND).max(1) * LARGE_ROUND);
        let slot = match self.free_segments.pop() {
            Some(i) => i,
            None => {
                self.segments.push(None);
                u32::try_from(self.segments.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let sid = SegmentId(slot);
        let first = self.new_block(Block {
            segment: sid,
            offset: 0,
            size,
            requested: 0,
            state: BlockState::Free,
            prev: None,
            next: None,
            uses: Vec::new(),
        });
        self.segments[slot as usize] = Some(Segment {
            handle,
            base,
            size,
            stream,
            small,
            first,
        });
        self.stats.segment.inc(small, 1);
        self.stats.reserved_bytes.inc(small, size);
        self.stats.num_device_alloc += 1;
        if size >= self.policy.max_split_size {
            self.stats.oversize_segments.inc(1);
        }
        self.insert_free(first);
        sid
    }

    /// Allocates `len` bytes from the fresh segment `sid` (added by
    /// [`add_segment`](Self::add_segment) for this request).
    pub fn alloc_in(&mut self, sid: SegmentId, len: u64) -> Allocation {
        let size = round_size(len.max(1));
        let first = self.segment(sid).first;
        let small = self.segment(sid).small;
        self.take(first, size, len, small)
    }

    /// The (rounded) size of a live block.
    pub fn block_size(&self, id: BlockId) -> u64 {
        self.block(id).size
    }

    /// Whether a live segment is in the small pool.
    pub fn is_small(&self, sid: SegmentId) -> bool {
        self.segment(sid).small
    }

    /// The base address of a live segment.
    pub fn segment_base(&self, sid: SegmentId) -> u64 {
        self.segment(sid).base
    }

    /// Notes that `stream` (not the block's own) uses active block `id`.
    pub fn record_use(&mut self, id: BlockId, stream: Stream) {
        let own = self.stream_of(id);
        let b = self.block_mut(id);
        if stream != own && !b.uses.contains(&stream) {
            b.uses.push(stream);
        }
    }

    /// The buffer of active block `id` is gone. With no other stream's use
    /// recorded the block is free at once (merged with its free
    /// neighbours) and `None` is returned; otherwise it becomes
    /// [`BlockState::Pending`] and the streams to record events on are
    /// returned.
    #[inline(always)]
    pub fn free(&mut self, id: BlockId) -> Option<Vec<Stream>> {
        let (size, requested, segment, uses) = {
            let b = self.block_mut(id);
            debug_assert_eq!(b.state, BlockState::Active);
            (b.size, b.requested, b.segment, std::mem::take(&mut b.uses))
        };
        let small = self.segment(segment).small;
        self.stats.allocation.dec(small, 1);
        self.stats.allocated_bytes.dec(small, size);
        self.stats.requested_bytes.dec(small, requested);
        if size >= self.policy.max_split_size {
            self.stats.oversize_allocations.dec(1);
        }
        if uses.is_empty() {
            self.release(id);
            None
        } else {
            let b = self.block_mut(id);
            b.state = BlockState::Pending;
            b.uses = uses.clone();
            Some(uses)
        }
    }

    /// A pending block's other streams have finished with it: it becomes
    /// free (merged with its free neighbours).
    pub fn release_pending(&mut self, id: BlockId) {
        debug_assert_eq!(self.block(id).state, BlockState::Pending);
        self.block_mut(id).uses.clear();
        self.release(id);
    }

    /// Active or pending -> free: stats, merge, free list.
    #[inline(always)]
    fn release(&mut self, id: BlockId) {
        let (size, seg) = {
            let b = self.block(id);
            (b.size, b.segment)
        };
        let small = self.segment(seg).small;
        self.stats.active.dec(small, 1);
        self.stats.active_bytes.dec(small, size);
        {
            let b = self.block_mut(id);
            b.state = BlockState::Free;
            b.requested = 0;
        }
        if let Some(p) = self.block(id).prev
            && self.block(p).state == BlockState::Free
        {
            self.merge_into_prev(p, id);
            return self.finish_merge(p);
        }
        self.finish_merge(id);
    }

    /// Merges `id`'s free next neighbour into it, then puts it in the
    /// free list.
    #[inline(always)]
    fn finish_merge(&mut self, id: BlockId) {
        if let Some(n) = self.block(id).next
            && self.block(n).state == BlockState::Free
        {
            self.remove_free(n);
            self.absorb_next(id, n);
        }
        self.insert_free(id);
    }

    /// Free block `p` (in the free list) absorbs `id` (not in it); `p`
    /// leaves the free list (its key changes).
    #[inline]
    fn merge_into_prev(&mut self, p: BlockId, id: BlockId) {
        self.remove_free(p);
        self.absorb_next(p, id);
    }

    /// `a` absorbs its next neighbour `b` (neither in the free list).
    #[inline(always)]
    fn absorb_next(&mut self, a: BlockId, b: BlockId) {
        let (bsize, bnext) = {
            let blk = self.block(b);
            (blk.size, blk.next)
        };
        {
            let blk = self.block_mut(a);
            blk.size += bsize;
            blk.next = bnext;
        }
        if let Some(n) = bnext {
            self.block_mut(n).prev = Some(a);
        }
        self.drop_block(b);
    }

    /// Releases every segment that is one free block (PyTorch's
    /// `release_cached_blocks`), returning their handles for the caller to
    /// drop. `keep_going` is asked before each (largest first) and stops
    /// the release when it returns false (used by the garbage collection
    /// threshold).
    pub fn release_free_segments(
        &mut self,
        mut keep_going: impl FnMut(&Stats) -> bool,
    ) -> Vec<Released<H>> {
        let mut whole: Vec<(u64, SegmentId)> = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                let b = self.block(s.first);
                (b.state == BlockState::Free && b.next.is_none())
                    .then_some((s.size, SegmentId(i as u32)))
            })
            .collect();
        whole.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut out = Vec::new();
        for (_, sid) in whole {
            if !keep_going(&self.stats) {
                break;
            }
            out.push(self.release_segment(sid));
        }
        out
    }

    /// Releases segment `sid` if it is one free block (direct mode: every
    /// segment goes back to the backend when its block is freed).
    pub fn release_if_free(&mut self, sid: SegmentId) -> Option<Released<H>> {
        let s = self.segments.get(sid.0 as usize)?.as_ref()?;
        let b = self.block(s.first);
        (b.state == BlockState::Free && b.next.is_none()).then(|| self.release_segment(sid))
    }

    fn release_segment(&mut self, sid: SegmentId) -> Released<H> {
        let first = self.segment(sid).first;
        self.remove_free(first);
        self.drop_block(first);
        let seg = match self.segments[sid.0 as usize].take() {
            Some(s) => s,
            None => unreachable!("segment {sid:?} is gone"),
        };
        self.free_segments.push(sid.0);
        self.stats.segment.dec(seg.small, 1);
        self.stats.reserved_bytes.dec(seg.small, seg.size);
        self.stats.num_device_free += 1;
        if seg.size >= self.policy.max_split_size {
            self.stats.oversize_segments.dec(1);
        }
        Released {
            handle: seg.handle,
            base: seg.base,
            size: seg.size,
            small: seg.small,
        }
    }

    /// With [`Policy::own_segments`], before a segment of `size` bytes is
    /// reserved for `stream`: releases `stream`'s free segments too small
    /// for the request, largest first, until they add up to `size`. The
    /// cache trades sizes it holds for the size asked instead of growing
    /// by it (without splitting, a small free block never serves a bigger
    /// request).
    pub fn release_smaller(&mut self, stream: Stream, size: u64) -> Vec<Released<H>> {
        if !self.policy.own_segments {
            return Vec::new();
        }
        let sid = stream.id();
        let (lo, hi) = ((sid, 0, 0, BlockId(0)), (sid, size, 0, BlockId(0)));
        let mut keys: Vec<FreeKey> = self.free.iter().flat_map(|f| f.in_range(lo, hi)).collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        let mut out = Vec::new();
        let mut freed = 0;
        for (_, block_size, _, id) in keys {
            if freed >= size {
                break;
            }
            let segment = self.block(id).segment;
            freed += block_size;
            out.push(self.release_segment(segment));
        }
        out
    }

    /// The free lists' blocks as `(small pool, address, size)`, in order
    /// (tests: they must be exactly the free blocks).
    #[cfg(test)]
    pub fn free_list(&self) -> Vec<(bool, u64, u64)> {
        let mut v: Vec<(bool, u64, u64)> = self
            .free
            .iter()
            .enumerate()
            .flat_map(|(p, l)| l.keys().into_iter().map(move |k| (p == 0, k.2, k.1)))
            .collect();
        v.sort_unstable();
        v
    }

    /// The segment a live block is in.
    pub fn segment_of(&self, id: BlockId) -> SegmentId {
        self.block(id).segment
    }

    /// Every segment with its blocks, in address order.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let mut out: Vec<SegmentSnapshot> = self
            .segments
            .iter()
            .flatten()
            .map(|s| {
                let mut blocks = Vec::new();
                let mut at = Some(s.first);
                while let Some(id) = at {
                    let b = self.block(id);
                    blocks.push(BlockSnapshot {
                        address: s.base + b.offset,
                        offset: b.offset,
                        size: b.size,
                        requested_size: b.requested,
                        state: b.state,
                        stream_uses: b.uses.clone(),
                    });
                    at = b.next;
                }
                let sum = |f: &dyn Fn(BlockState) -> bool| {
                    blocks
                        .iter()
                        .filter(|b| f(b.state))
                        .map(|b| b.size)
                        .sum::<u64>()
                };
                SegmentSnapshot {
                    address: s.base,
                    size: s.size,
                    stream: s.stream,
                    small_pool: s.small,
                    allocated_size: sum(&|st| st == BlockState::Active),
                    active_size: sum(&|st| st != BlockState::Free),
                    blocks,
                }
            })
            .collect();
        out.sort_by_key(|s| s.address);
        out
    }
}

#[cfg(test)]
mod free_list_tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::{BlockId, FreeKey, FreeList};

    fn key(k: (i64, u64, u64, u32)) -> FreeKey {
        (k.0, k.1, k.2, BlockId(k.3))
    }

    proptest! {
        /// Any sequence of inserts of absent keys and removes of present
        /// ones leaves the list holding what a plain set holds, and the
        /// best fit is the set's first key at or after the bound.
        #[test]
        fn the_overlay_is_a_set(ops in prop::collection::vec(
            (any::<bool>(), 0i64..3, 0u64..6, 0u64..4, 0u32..3, 0i64..3, 0u64..7),
            1..200,
        )) {
            let mut list = FreeList::default();
            let mut model = BTreeSet::new();
            for (insert, s, size, addr, id, lo_s, lo_size) in ops {
                let k = key((s, size, addr, id));
                if insert && !model.contains(&k) {
                    list.insert(k);
                    model.insert(k);
                } else if !insert {
                    // Remove a present key: `k` if present, else the first.
                    let victim = if model.contains(&k) { Some(k) } else { model.first().copied() };
                    if let Some(v) = victim {
                        list.remove(v);
                        model.remove(&v);
                    }
                }
                prop_assert_eq!(list.keys(), model.iter().copied().collect::<Vec<_>>());
                let lo = key((lo_s, lo_size, 0, 0));
                prop_assert_eq!(list.first_from(lo), model.range(lo..).next().copied());
            }
        }
    }

    #[test]
    fn an_allocate_free_pair_leaves_the_tree_alone() {
        let whole = key((1, 4096, 0, 0));
        let tail = key((1, 3584, 512, 1));
        let mut list = FreeList::default();
        list.insert(whole);
        list.insert(key((1, 8192, 8192, 2)));
        let tree = list.tree.clone();
        list.remove(whole);
        list.insert(tail);
        assert_eq!(list.first_from(key((1, 512, 0, 0))), Some(tail));
        list.remove(tail);
        list.insert(whole);
        assert_eq!(list.tree, tree);
        assert_eq!(list.first_from(key((1, 512, 0, 0))), Some(whole));
    }
}
