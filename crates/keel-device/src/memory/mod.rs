//! Device memory: a caching allocator under every [`Buffer`](crate::Buffer),
//! on every backend, after PyTorch's `CUDACachingAllocator`, and the
//! `torch.cuda.memory` functions that look into it.
//!
//! Each device has one allocator. It reserves *segments* from the backend
//! ([`DeviceRuntime::alloc`]) and hands out *blocks* of them: a buffer is
//! `len` bytes at an offset of a segment, and kernels bind that range (see
//! [`BufferView`](crate::backend::BufferView)). Freed blocks stay cached for
//! the next buffer; [`empty_cache`] gives the segments that hold no buffer
//! back to the backend. The block policy (512-byte rounding, small and
//! large pools, best fit, splitting and merging, `max_split_size`) is in
//! `allocator.rs`, which makes no backend calls. A device that reports
//! [`exclusive_allocations`](crate::backend::DeviceProperties::exclusive_allocations)
//! (host memory, locked whole by a kernel) gets a segment per block
//! instead, so that kernels on different buffers never wait for each
//! other.
//!
//! # Streams
//!
//! A block belongs to the stream current on its device when its buffer
//! was created ([`Buffer::new`](crate::Buffer::new); or the stream given to
//! [`Buffer::empty_on`](crate::Buffer::empty_on)). When the buffer is
//! dropped its block is reusable *at once* by the next buffer on that
//! stream: work on the stream runs in order, so the new owner's work comes
//! after the old owner's. Work on *another* stream that still reads or
//! writes the buffer is not ordered with it: tell the allocator with
//! [`Buffer::record_stream`](crate::Buffer::record_stream), as in PyTorch.
//! Then, when the buffer is dropped, an event is recorded on each such
//! stream and the block is reused only once those events have completed
//! (they are polled on later allocations; the allocator never waits for a
//! device). Without `record_stream`, the block is handed out again at once
//! and the other stream's work may see the new owner's data.
//!
//! # Out of memory
//!
//! When the backend refuses a segment (or the segment would exceed the
//! device's memory budget), the allocator frees the cached segments that
//! hold no buffer and tries once more (`num_alloc_retries`); then the
//! allocation fails with [`Error::OutOfMemory`] saying what was asked,
//! what the device holds, and how much is allocated and reserved
//! (`num_ooms`).
//!
//! # Configuration
//!
//! `KEEL_ALLOC_CONF`, read once per process, as `PYTORCH_CUDA_ALLOC_CONF`
//! (see [`AllocConfig`]); [`set_config`] changes one device's allocator
//! at run time (tests, benchmarks).

mod allocator;
mod config;
mod stats;

use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

pub use allocator::{
    BlockSnapshot, BlockState, MIN_BLOCK, SMALL_SEGMENT, SMALL_SIZE, SegmentSnapshot, Stat,
    StatArray, Stats,
};
pub use config::{AllocBackend, AllocConfig};
pub use stats::{memory_stats_of, memory_summary_of};

use crate::backend::slots::MAX_ADOPTED;
use crate::backend::{
    BufferHandle, DeviceGuardImpl, DeviceProperties, DeviceRuntime, EventHandle, registry,
};
use crate::core::{Device, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};
use crate::profiler::record::{MemoryAction, MemoryRecord, memory_event};
use allocator::{Allocation, BlockId, Policy, Pools, Released};

/// A block handed to a buffer (which holds the segment's handle, the
/// block's offset in it and its length).
#[derive(Debug)]
pub(crate) struct Block {
    /// The block's index in the pools; `None` for an empty buffer's
    /// (which holds the device's shared zero-byte allocation).
    id: Option<BlockId>,
}

impl Block {
    /// No block (the state of an empty buffer).
    pub(crate) fn none() -> Block {
        Block { id: None }
    }

    pub(crate) fn id(&self) -> Option<BlockId> {
        self.id
    }
}

/// A block from the pools for a new buffer.
pub(crate) struct Allocated {
    /// The segment's handle.
    pub handle: BufferHandle,
    pub block: Block,
    /// The block's offset in the segment.
    pub offset: usize,
    /// Whether the block's bytes are known to be zero (a fresh segment's
    /// first block).
    pub zeroed: bool,
}

/// A block freed while other streams used it, with an event per stream.
struct Pending {
    block: BlockId,
    events: Vec<EventHandle>,
}

struct State {
    pools: Pools<BufferHandle>,
    config: AllocConfig,
    pending: Vec<Pending>,
    /// The backend's zero-byte allocation, shared by every empty buffer.
    empty: Option<BufferHandle>,
    /// The device's total memory, if the backend reports it.
    total_memory: Option<u64>,
    /// Why blocks cannot be bound on this device, if they cannot.
    unusable: Option<String>,
}

impl State {
    /// The state of a new allocator: nothing reserved, nothing cached.
    fn new(config: AllocConfig, props: &DeviceProperties, unusable: Option<String>) -> State {
        State {
            pools: Pools::new(policy(&config, props.exclusive_allocations)),
            config,
            pending: Vec::new(),
            empty: None,
            total_memory: props.total_memory,
            unusable,
        }
    }
}

/// One device's caching allocator; see the [module docs](self).
pub(crate) struct DeviceAllocator {
    device: Device,
    rt: &'static dyn DeviceRuntime,
    guard: &'static dyn DeviceGuardImpl,
    state: Mutex<State>,
    /// Whether the allocator reports to the profiler (false only for the
    /// unit tests' private allocators, which must not disturb other tests'
    /// sessions).
    events: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pools' policy under `c`, on a device whose kernels hold each
/// allocation they bind whole (`own_segments`) or not.
fn policy(c: &AllocConfig, own_segments: bool) -> Policy {
    Policy {
        max_split_size: c.max_split_size.unwrap_or(u64::MAX),
        own_segments,
    }
}

type Table = Box<[OnceLock<DeviceAllocator>]>;

fn tables() -> &'static [OnceLock<Table>; DeviceType::COUNT] {
    static TABLES: [OnceLock<Table>; DeviceType::COUNT] =
        [const { OnceLock::new() }; DeviceType::COUNT];
    &TABLES
}

/// `ty`'s slot in the tables: its code (the codes are `0..COUNT`, in the
/// order of [`DeviceType::ALL`]).
#[inline]
fn type_slot(ty: DeviceType) -> usize {
    usize::from(ty.code())
}

/// The allocator of `device` (a concrete index), created on first use.
#[inline]
pub(crate) fn allocator(device: Device) -> Result<&'static DeviceAllocator> {
    // Fast path: an allocator exists only for a device whose backend was
    // available when it was created.
    let existing = tables()[type_slot(device.device_type())]
        .get()
        .and_then(|t| t.get(usize::try_from(device.index()).ok()?))
        .and_then(OnceLock::get);
    match existing {
        Some(a) => Ok(a),
        None => create_allocator(device),
    }
}

/// An allocator for `device` outside the table (tests: a fresh allocator
/// whose statistics no other test touches).
#[cfg(test)]
fn standalone(device: Device) -> &'static DeviceAllocator {
    let ty = device.device_type();
    let config = AllocConfig::default();
    let props = registry::runtime(ty)
        .and_then(|rt| rt.properties(device))
        .expect("properties");
    Box::leak(Box::new(DeviceAllocator {
        device,
        rt: registry::runtime(ty).expect("runtime"),
        guard: registry::available_guard_impl(ty).expect("guard"),
        events: false,
        state: Mutex::new(State::new(config, &props, None)),
    }))
}

#[cold]
fn create_allocator(device: Device) -> Result<&'static DeviceAllocator> {
    let ty = device.device_type();
    let guard = registry::available_guard_impl(ty)?;
    let slot = type_slot(ty);
    // Room for the devices the backend has now and for those a program
    // may still hand it (`crate::interop`).
    let table = tables()[slot].get_or_init(|| {
        let n = usize::try_from(guard.device_count()).unwrap_or(0) + MAX_ADOPTED;
        (0..n).map(|_| OnceLock::new()).collect()
    });
    crate::backend::check_device_index(device, guard.device_count())?;
    let cell = usize::try_from(device.index())
        .ok()
        .and_then(|i| table.get(i))
        .ok_or_else(|| {
            Error::invalid(format!(
                "{device}: expected a device index below {} (the devices the backend had when its first buffer was made, and {MAX_ADOPTED} adopted)",
                table.len()
            ))
        })?;
    if let Some(a) = cell.get() {
        return Ok(a);
    }
    let rt = registry::runtime(ty)?;
    let config = AllocConfig::from_env()?;
    let props = rt.properties(device)?;
    let unusable = props
        .storage_offset_alignment
        .filter(|a| *a > MIN_BLOCK)
        .map(|a| {
            format!(
                "{device} needs storage buffer offsets aligned to {a} bytes, more than the caching allocator's {MIN_BLOCK}-byte blocks give; set KEEL_ALLOC_CONF=backend:direct"
            )
        });
    Ok(cell.get_or_init(|| DeviceAllocator {
        device,
        rt,
        guard,
        events: true,
        state: Mutex::new(State::new(config, &props, unusable)),
    }))
}

fn mib(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

impl DeviceAllocator {
    /// The allocator's device.
    #[inline(always)]
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// Whether a profiler session wants this allocator's records.
    #[inline(always)]
    fn profiling(&self) -> bool {
        self.events && crate::profiler::enabled()
    }

    /// The statistics.
    fn stats_locked(&self, state: &State) -> Stats {
        *state.pools.stats()
    }

    /// Reports an action to the profiler. Called with the device's lock
    /// held, so that records arrive in the order of the totals they carry;
    /// `memory_event` must not call back into this module.
    fn emit(
        &self,
        state: &State,
        action: MemoryAction,
        a: (u64, u64, u64),
        stream: Option<Stream>,
        small: bool,
    ) {
        let s = state.pools.stats();
        memory_event(MemoryRecord {
            device: self.device,
            action,
            addr: a.0,
            segment: a.1,
            bytes: a.2,
            stream,
            small_pool: small,
            allocated: s.allocated_bytes.all.current.max(0) as u64,
            reserved: s.reserved_bytes.all.current.max(0) as u64,
        });
    }

    fn emit_alloc(&self, state: &State, a: &Allocation, stream: Stream, action: MemoryAction) {
        if self.profiling() {
            self.emit(
                state,
                action,
                (a.addr, a.segment_base, a.size),
                Some(stream),
                a.small,
            );
        }
    }

    /// Drops released segments' handles, telling the profiler (each
    /// record with the device's totals right after that segment went).
    fn released(&self, state: &State, released: Vec<Released<BufferHandle>>) {
        let on = self.profiling();
        let s = state.pools.stats();
        let allocated = s.allocated_bytes.all.current.max(0) as u64;
        let mut reserved = s.reserved_bytes.all.current.max(0) as u64
            + released.iter().map(|r| r.size).sum::<u64>();
        for r in released {
            drop(r.handle);
            reserved -= r.size;
            if !on {
                continue;
            }
            memory_event(MemoryRecord {
                device: self.device,
                action: MemoryAction::SegmentFree,
                addr: r.base,
                segment: r.base,
                bytes: r.size,
                stream: None,
                small_pool: r.small,
                allocated,
                reserved,
            });
        }
    }

    /// The device's current stream.
    pub(crate) fn current_stream(&self) -> Result<Stream> {
        self.guard.get_stream(self.device)
    }

    /// The shared zero-byte allocation for empty buffers.
    pub(crate) fn empty_handle(&self) -> Result<BufferHandle> {
        let mut state = lock(&self.state);
        if let Some(h) = &state.empty {
            return Ok(h.clone());
        }
        let h = self.rt.alloc(self.device, 0)?;
        state.empty = Some(h.clone());
        Ok(h)
    }

    /// A block of at least `len` (> 0) bytes for `stream` (on this device)
    /// from the pools, with its segment's handle.
    #[inline(never)]
    pub(crate) fn allocate(&self, len: usize, stream: Stream) -> Result<Allocated> {
        let mut state = lock(&self.state);
        if let Some(why) = &state.unusable {
            return Err(Error::invalid(why.clone()));
        }
        let len64 = len as u64;
        let direct = state.config.backend == AllocBackend::Direct;
        if !direct {
            if !state.pending.is_empty() {
                self.poll_pending(&mut state);
            }
            if let Some(a) = state.pools.alloc_cached(len64, stream) {
                self.emit_alloc(&state, &a, stream, MemoryAction::Alloc);
                return Ok(self.block(&state, a, false));
            }
        }
        let size = allocator::round_size(len64);
        let seg = if direct {
            size
        } else {
            state.pools.segment_size(size)
        };
        let small = !direct && allocator::is_small(size);
        if !direct {
            let released = state.pools.release_smaller(stream, size);
            if !released.is_empty() {
                self.released(&state, released);
            }
            self.collect_garbage(&mut state, seg);
        }
        let handle = self.reserve(&mut state, seg, len64)?;
        let sid = state.pools.add_segment(handle, seg, stream, small);
        if self.profiling() {
            let base = state.pools.segment_base(sid);
            self.emit(
                &state,
                MemoryAction::SegmentAlloc,
                (base, base, seg),
                None,
                small,
            );
        }
        let a = state.pools.alloc_in(sid, len64);
        self.emit_alloc(&state, &a, stream, MemoryAction::Alloc);
        Ok(self.block(&state, a, true))
    }

    fn block(&self, state: &State, a: Allocation, zeroed: bool) -> Allocated {
        Allocated {
            handle: state.pools.handle(a.segment).clone(),
            block: Block { id: Some(a.block) },
            offset: a.offset as usize,
            zeroed: zeroed && a.offset == 0,
        }
    }

    /// The garbage collection threshold: before reserving `seg` more
    /// bytes, releases free segments while the reserved memory would be
    /// above the threshold's share of the capacity.
    fn collect_garbage(&self, state: &mut State, seg: u64) {
        let Some(t) = state.config.garbage_collection_threshold else {
            return;
        };
        let Some(capacity) = state.config.memory_budget.or(state.total_memory) else {
            return;
        };
        let limit = (capacity as f64 * t) as i64;
        let released = state
            .pools
            .release_free_segments(|s| s.reserved_bytes.all.current + seg as i64 > limit);
        self.released(state, released);
    }

    /// A new segment of `size` bytes from the backend (within the budget),
    /// retried once after freeing the cache.
    fn reserve(&self, state: &mut State, size: u64, len: u64) -> Result<BufferHandle> {
        let mut first_error = None;
        for attempt in 0..2 {
            if attempt == 1 {
                let released = state.pools.release_free_segments(|_| true);
                if released.is_empty() {
                    break;
                }
                state.pools.count_retry();
                self.released(state, released);
            }
            let reserved = state.pools.stats().reserved_bytes.all.current.max(0) as u64;
            let over_budget = state
                .config
                .memory_budget
                .is_some_and(|b| reserved.saturating_add(size) > b);
            if over_budget {
                first_error.get_or_insert(None);
                continue;
            }
            let bytes = usize::try_from(size).unwrap_or(usize::MAX);
            match self.rt.alloc(self.device, bytes) {
                Ok(h) => return Ok(h),
                Err(Error::OutOfMemory { .. }) => {
                    first_error.get_or_insert(None);
                }
                Err(e) => {
                    first_error.get_or_insert(Some(e));
                    break;
                }
            }
        }
        if let Some(Some(e)) = first_error {
            return Err(e);
        }
        state.pools.count_oom();
        if self.profiling() {
            self.emit(
                state,
                MemoryAction::Oom,
                (0, 0, len),
                None,
                allocator::is_small(len),
            );
        }
        Err(self.oom(state, len))
    }

    fn oom(&self, state: &State, len: u64) -> Error {
        let s = state.pools.stats();
        let allocated = s.allocated_bytes.all.current.max(0) as u64;
        let reserved = s.reserved_bytes.all.current.max(0) as u64;
        let total = match (state.total_memory, state.config.memory_budget) {
            (Some(t), Some(b)) => format!(
                "{} has a total capacity of {} and a memory budget of {} (KEEL_ALLOC_CONF memory_budget_mb)",
                self.device,
                mib(t),
                mib(b)
            ),
            (None, Some(b)) => format!(
                "{} has a memory budget of {} (KEEL_ALLOC_CONF memory_budget_mb)",
                self.device,
                mib(b)
            ),
            (Some(t), None) => format!("{} has a total capacity of {}", self.device, mib(t)),
            (None, None) => format!("{}'s total capacity is unknown", self.device),
        };
        Error::OutOfMemory {
            device: self.device,
            requested: len,
            detail: format!(
                " ({}); {total}, of which {} is allocated by buffers and {} is reserved by Keel's caching allocator ({} reserved but unallocated); if that last figure is large, setting max_split_size_mb in KEEL_ALLOC_CONF may avoid fragmentation",
                mib(len),
                mib(allocated),
                mib(reserved),
                mib(reserved.saturating_sub(allocated))
            ),
        }
    }

    /// Notes that `stream` uses block `id` (PyTorch's `recordStream`);
    /// `handle` is its segment's.
    pub(crate) fn record_stream(
        &self,
        handle: &BufferHandle,
        id: BlockId,
        stream: Stream,
    ) -> Result<()> {
        let mut state = lock(&self.state);
        if state.config.backend == AllocBackend::Direct {
            drop(state);
            // No cache to protect: the backend keeps memory alive for work
            // in flight; stream-ordered backends (CUDA) want to know.
            return self.guard.record_buffer_on_stream(handle, &stream);
        }
        state.pools.record_use(id, stream);
        Ok(())
    }

    /// The buffer holding block `id` (with its segment's `handle`) is
    /// gone: the block goes back to the pools.
    pub(crate) fn free(&self, id: BlockId, handle: BufferHandle, offset: usize) {
        let mut state = lock(&self.state);
        self.free_block(&mut state, id, offset);
        drop(state);
        drop(handle);
    }

    fn free_block(&self, state: &mut State, id: BlockId, offset: usize) {
        let info = self.profiling().then(|| {
            let sid = state.pools.segment_of(id);
            (
                state.pools.stream_of(id),
                state.pools.segment_base(sid),
                state.pools.block_size(id),
                state.pools.is_small(sid),
            )
        });
        let freed = state.pools.free(id);
        if let Some((stream, base, size, small)) = info {
            let addr = base + offset as u64;
            self.emit(
                state,
                MemoryAction::Free,
                (addr, base, size),
                Some(stream),
                small,
            );
        }
        match freed {
            None => {
                if state.config.backend == AllocBackend::Direct {
                    let sid = state.pools.segment_of(id);
                    if let Some(r) = state.pools.release_if_free(sid) {
                        self.released(state, vec![r]);
                    }
                }
            }
            Some(streams) => {
                let mut events = Vec::with_capacity(streams.len());
                for s in streams {
                    let mut handle = None;
                    // A stream that cannot record (it failed) runs nothing
                    // more on the block: nothing to wait for.
                    if self
                        .guard
                        .record(&mut handle, &s, s.device_index(), EventFlag::default())
                        .is_ok()
                        && let Some(h) = handle
                    {
                        events.push(h);
                    }
                }
                state.pending.push(Pending { block: id, events });
                if state.pending.last().is_some_and(|p| p.events.is_empty()) {
                    self.poll_pending(state);
                }
            }
        }
    }

    /// Releases pending blocks whose events have all completed (an event
    /// that cannot be queried counts as completed: its stream failed).
    fn poll_pending(&self, state: &mut State) {
        let mut i = 0;
        while i < state.pending.len() {
            let done = state.pending[i]
                .events
                .iter()
                .all(|e| self.guard.query_event(e).unwrap_or(true));
            if done {
                let p = state.pending.swap_remove(i);
                for e in p.events {
                    self.guard.destroy_event(e, self.device.index());
                }
                state.pools.release_pending(p.block);
                if state.config.backend == AllocBackend::Direct {
                    let sid = state.pools.segment_of(p.block);
                    if let Some(r) = state.pools.release_if_free(sid) {
                        self.released(state, vec![r]);
                    }
                }
            } else {
                i += 1;
            }
        }
    }

    fn empty_cache(&self) {
        let mut state = lock(&self.state);
        self.poll_pending(&mut state);
        let released = state.pools.release_free_segments(|_| true);
        self.released(&state, released);
    }

    fn stats(&self) -> Stats {
        let mut state = lock(&self.state);
        if !state.pending.is_empty() {
            self.poll_pending(&mut state);
        }
        self.stats_locked(&state)
    }

    fn reset_peaks(&self) {
        let mut state = lock(&self.state);
        state.pools.reset_peaks();
    }

    fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let mut state = lock(&self.state);
        if !state.pending.is_empty() {
            self.poll_pending(&mut state);
        }
        state.pools.snapshot()
    }

    fn set_config(&self, config: AllocConfig) {
        let mut state = lock(&self.state);
        state.config = config;
        let own_segments = state.pools.policy().own_segments;
        state.pools.set_policy(policy(&config, own_segments));
        if config.backend == AllocBackend::Direct {
            self.poll_pending(&mut state);
            let released = state.pools.release_free_segments(|_| true);
            self.released(&state, released);
        }
    }
}

fn resolved(device: Device) -> Result<&'static DeviceAllocator> {
    allocator(crate::api::resolve(device)?)
}

/// The bytes a new segment for a `len`-byte buffer reserves on `device`
/// under its allocator's policy (the conformance suite's expectations).
#[cfg(feature = "testing")]
pub(crate) fn segment_for(device: Device, len: usize) -> Result<u64> {
    let state = lock(&resolved(device)?.state);
    Ok(state
        .pools
        .segment_size(allocator::round_size((len as u64).max(1))))
}

/// Every statistic of `device`'s allocator (`torch.cuda.memory_stats`); see
/// [`memory_stats_of`] for the keys.
pub fn memory_stats(device: Device) -> Result<std::collections::BTreeMap<String, i64>> {
    Ok(memory_stats_of(&resolved(device)?.stats()))
}

/// The allocator's statistics of `device` as a struct.
pub fn stats(device: Device) -> Result<Stats> {
    Ok(resolved(device)?.stats())
}

/// Bytes of `device`'s memory held by buffers (`torch.cuda.memory_allocated`).
pub fn memory_allocated(device: Device) -> Result<u64> {
    Ok(stats(device)?.allocated_bytes.all.current.max(0) as u64)
}

/// The peak of [`memory_allocated`] since the start or the last
/// [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: Device) -> Result<u64> {
    Ok(stats(device)?.allocated_bytes.all.peak.max(0) as u64)
}

/// Bytes of `device`'s memory reserved by the caching allocator
/// (`torch.cuda.memory_reserved`).
pub fn memory_reserved(device: Device) -> Result<u64> {
    Ok(stats(device)?.reserved_bytes.all.current.max(0) as u64)
}

/// The peak of [`memory_reserved`].
pub fn max_memory_reserved(device: Device) -> Result<u64> {
    Ok(stats(device)?.reserved_bytes.all.peak.max(0) as u64)
}

/// Resets every peak statistic of `device` to its current value.
pub fn reset_peak_memory_stats(device: Device) -> Result<()> {
    resolved(device)?.reset_peaks();
    Ok(())
}

/// Gives every cached segment of `device` that holds no buffer back to the
/// backend (`torch.cuda.empty_cache`). Blocks still waiting for other
/// streams stay reserved.
pub fn empty_cache(device: Device) -> Result<()> {
    resolved(device)?.empty_cache();
    Ok(())
}

/// A readable table of `device`'s allocator statistics
/// (`torch.cuda.memory_summary`).
pub fn memory_summary(device: Device) -> Result<String> {
    let device = crate::api::resolve(device)?;
    Ok(memory_summary_of(device, &allocator(device)?.stats()))
}

/// Every segment of `device` with its blocks: size, state (active, free,
/// pending stream uses), stream and the stream uses still pending
/// (`torch.cuda.memory_snapshot`).
pub fn memory_snapshot(device: Device) -> Result<Vec<SegmentSnapshot>> {
    Ok(resolved(device)?.snapshot())
}

/// Replaces `device`'s allocator configuration (instead of
/// `KEEL_ALLOC_CONF`, e.g. in tests). Live buffers keep their blocks;
/// switching to [`AllocBackend::Direct`] releases the cache.
pub fn set_config(device: Device, config: AllocConfig) -> Result<()> {
    resolved(device)?.set_config(config);
    Ok(())
}

/// The configuration of `device`'s allocator.
pub fn config(device: Device) -> Result<AllocConfig> {
    Ok(lock(&resolved(device)?.state).config)
}

/// Sets (or, with `None`, lifts) `device`'s memory budget: the most bytes
/// its allocator reserves.
pub fn set_memory_budget(device: Device, budget: Option<u64>) -> Result<()> {
    let a = resolved(device)?;
    let mut c = lock(&a.state).config;
    c.memory_budget = budget;
    a.set_config(c);
    Ok(())
}

#[cfg(test)]
mod tests;
