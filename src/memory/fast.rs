//! The per-thread fast cache: the last few blocks a thread freed on a
//! device, handed straight back to the next request of the same length on
//! the same stream from that thread, without the device's lock.
//!
//! A freed block normally goes back to the pools under the device's mutex
//! (two lock operations), and its buffer's segment handle is an `Arc`
//! dropped there and cloned again by the next allocation. On this kind of
//! machine each of those atomic read-modify-writes costs 5-8 ns, most of a
//! cached pair. Here a pair costs one: the block and its handle move into
//! the thread's cache ([`Local`], thread-local, no atomics) and its slot in
//! the [`Shared`] half is set with a plain store; taking it back claims the
//! slot with one compare-exchange.
//!
//! The pools do not see these frees: to them a cached block is still
//! active. Every operation that needs the true state first takes the
//! blocks back (`DeviceAllocator::flush` in `mod.rs`): it
//! swaps each slot of every thread's cache to empty and frees the blocks
//! it got in the pools (merging them), under the device's mutex. That is
//! done before every statistic, snapshot and summary, `empty_cache`,
//! `reset_peak_memory_stats`, configuration change and every allocation
//! that is not served from a cache (so out-of-memory retries and the
//! garbage collection see every free block). The owner, finding its slot
//! taken, drops its copy of the handle.
//!
//! Why the statistics stay exact: the current values are read after the
//! flush. A peak can rise only on an allocation; a fast allocation takes
//! back a block freed after the last flush (every slow allocation
//! flushes), so the total allocated at any moment since that flush is at
//! most the total at the flush, which the pools recorded. The totals
//! (`allocated`, `freed`) of the statistics a fast pair changes are kept
//! by the owner ([`Shared`]'s counters) and added when read.
//!
//! Not cached (they take the locked path): blocks with other streams' uses
//! (`record_stream`, which need events), `backend:direct`, blocks at or
//! above `max_split_size`, anything while the profiler records (so that
//! every allocation and free has its record), and a free when the thread's
//! [`SLOTS`] slots for the device are full.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::Block;
use super::allocator::{BlockId, SMALL_SIZE, Stats};
use crate::backend::BufferHandle;
use crate::core::StreamId;

/// Blocks one thread caches per device.
pub(crate) const SLOTS: usize = 8;

/// The half of a thread's cache for one device that the device's allocator
/// reaches from any thread.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Per slot: 0 when empty, else the cached block's id plus one. Only
    /// the owner fills a slot (a plain store); the owner and flushes empty
    /// it with an atomic exchange, so exactly one of them gets the block.
    slots: [AtomicU64; SLOTS],
    /// Fast allocations so far, per pool (small, large): count, rounded
    /// bytes and requested bytes. Written by the owner only.
    totals: [[AtomicU64; 3]; 2],
    /// Handles the owner held when its thread exited, for the next flush
    /// to drop: a thread's storage is being destroyed then, and dropping
    /// the last handle of a backend allocation may need the backend's own
    /// thread-local storage (wgpu's does), which may be gone already.
    orphans: Mutex<Vec<BufferHandle>>,
}

impl Shared {
    /// Empties every slot, calling `free` with each block it held.
    pub(super) fn take_all(&self, mut free: impl FnMut(BlockId)) {
        for s in &self.slots {
            if s.load(Ordering::Relaxed) != 0 {
                let v = s.swap(0, Ordering::Acquire);
                if v != 0 {
                    free(BlockId::from_index((v - 1) as u32));
                }
            }
        }
    }

    /// The handles the owner left when its thread exited.
    pub(super) fn take_orphans(&self) -> Vec<BufferHandle> {
        std::mem::take(&mut *self.orphans.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The totals of fast allocations: per pool (small, large), count,
    /// bytes, requested bytes.
    pub(super) fn totals(&self) -> [[u64; 3]; 2] {
        self.totals
            .each_ref()
            .map(|p| p.each_ref().map(|c| c.load(Ordering::Acquire)))
    }
}

/// Adds fast allocations' totals (per pool: count, bytes, requested) to
/// `stats`: each was a free and an allocation the pools did not see.
pub(super) fn add_totals(stats: &mut Stats, totals: [[u64; 3]; 2]) {
    for (p, [count, bytes, requested]) in totals.into_iter().enumerate() {
        let small = p == 0;
        for (a, d) in [
            (&mut stats.allocation, count),
            (&mut stats.active, count),
            (&mut stats.allocated_bytes, bytes),
            (&mut stats.active_bytes, bytes),
            (&mut stats.requested_bytes, requested),
        ] {
            let pool = if small {
                &mut a.small_pool
            } else {
                &mut a.large_pool
            };
            for s in [&mut a.all, pool] {
                s.allocated += d;
                s.freed += d;
            }
        }
    }
}

/// A cached block, as plain fields (so that taking it builds the new
/// buffer's block in place, with no copies of a struct through memory).
struct Entry {
    /// The segment's handle (`None`: an empty entry).
    handle: Option<BufferHandle>,
    stream: StreamId,
    len: u64,
    offset: usize,
    size: u64,
    id: u32,
    small: bool,
}

/// One thread's cache for one device.
struct Local {
    /// The device's allocator (its address: allocators are never freed).
    allocator: usize,
    shared: Arc<Shared>,
    entries: [Entry; SLOTS],
}

impl Drop for Local {
    fn drop(&mut self) {
        let held: Vec<BufferHandle> = self
            .entries
            .iter_mut()
            .filter_map(|e| e.handle.take())
            .collect();
        if !held.is_empty() {
            self.shared
                .orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(held);
        }
    }
}

thread_local! {
    static CACHES: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's cache for `allocator`, if it has one (and the
/// thread's storage is still there).
#[inline(always)]
fn with_local<R>(allocator: usize, f: impl FnOnce(&mut Local) -> Option<R>) -> Option<R> {
    CACHES
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            let local = c.iter_mut().find(|l| l.allocator == allocator)?;
            f(local)
        })
        .ok()
        .flatten()
}

/// A cached block of exactly `len` bytes for `stream` from this thread's
/// cache for `allocator`: `put` receives it with its handle and offset,
/// where the cache is read (so a buffer's fields are written once, where
/// the buffer lives, rather than returned through the stack).
#[inline(always)]
pub(super) fn take_with<R>(
    allocator: usize,
    stream: StreamId,
    len: u64,
    put: impl FnOnce(BufferHandle, Block, usize) -> R,
) -> Option<R> {
    with_local(allocator, |local| {
        for (e, slot) in local.entries.iter_mut().zip(&local.shared.slots) {
            if e.handle.is_none() || e.stream != stream || e.len != len {
                continue;
            }
            if slot
                .compare_exchange(u64::from(e.id) + 1, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                // A flush took the block back to the pools.
                e.handle = None;
                continue;
            }
            let handle = e.handle.take()?;
            let totals = &local.shared.totals[usize::from(!e.small)];
            for (t, d) in totals.iter().zip([1, e.size, len]) {
                t.store(t.load(Ordering::Relaxed) + d, Ordering::Release);
            }
            return Some(put(
                handle,
                Block::new(BlockId::from_index(e.id), stream, e.size),
                e.offset,
            ));
        }
        None
    })
}

/// Caches `block` (freed by its buffer, with no other stream's use) in
/// this thread's cache for `allocator`; gives the handle back when the
/// thread has no cache for it yet or its slots are full.
#[inline(always)]
pub(super) fn put(
    allocator: usize,
    handle: BufferHandle,
    block: &Block,
    len: u64,
    offset: usize,
) -> Result<(), BufferHandle> {
    let mut item = Some(handle);
    with_local(allocator, |local| {
        for (e, slot) in local.entries.iter_mut().zip(&local.shared.slots) {
            if e.handle.is_some() {
                if slot.load(Ordering::Relaxed) != 0 {
                    continue;
                }
                // Taken back by a flush: drop the stale handle.
                e.handle = None;
            }
            e.handle = Some(item.take()?);
            e.stream = block.stream;
            e.len = len;
            e.offset = offset;
            e.size = block.size;
            e.id = block.id().index();
            e.small = block.size <= SMALL_SIZE;
            slot.store(u64::from(e.id) + 1, Ordering::Release);
            return Some(());
        }
        None
    });
    match item {
        None => Ok(()),
        Some(h) => Err(h),
    }
}

/// Gives this thread a cache for `allocator` (if it has none), returning
/// its shared half for the allocator to keep.
pub(super) fn register(allocator: usize) -> Option<Arc<Shared>> {
    CACHES
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            if c.iter().any(|l| l.allocator == allocator) {
                return None;
            }
            let shared = Arc::new(Shared::default());
            c.push(Local {
                allocator,
                shared: shared.clone(),
                entries: std::array::from_fn(|_| Entry {
                    handle: None,
                    stream: 0,
                    len: 0,
                    offset: 0,
                    size: 0,
                    id: 0,
                    small: false,
                }),
            });
            Some(shared)
        })
        .ok()
        .flatten()
}

/// Drops this thread's handles of blocks a flush took back (so that a
/// released segment's memory goes back to the backend now, not at this
/// thread's next free).
pub(super) fn drop_stale(allocator: usize) {
    with_local(allocator, |local| {
        for (e, slot) in local.entries.iter_mut().zip(&local.shared.slots) {
            if e.handle.is_some() && slot.load(Ordering::Relaxed) == 0 {
                e.handle = None;
            }
        }
        Some(())
    });
}
