//! Round-robin stream pool cursors (c10's per-device, per-priority atomic
//! counters).
//!
//! A [`PoolCursors`] hands out pool stream *ids* (see
//! [Note \[StreamId encoding\]](crate::core::Stream)); the backend creates
//! the native stream behind an id lazily, the first time the id is used,
//! and never destroys it. Request `k` on a (device, level) pool gets stream
//! `k % 32`, so the 33rd request returns the 1st stream again.
//!
//! [`Streams`] is one device's table of native streams (the default stream
//! and the pool's) together with its cursors, for backends whose streams
//! are objects they create.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::slots::Slots;
use crate::core::{
    Device, DeviceIndex, DeviceType, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, Stream, StreamId,
    StreamKind, pool_stream_id, stream_kind,
};
use crate::error::{Error, Result};

/// One device's cursors, one per priority level.
#[derive(Debug)]
pub struct PoolCursors {
    levels: usize,
    next: [AtomicUsize; MAX_PRIORITY_LEVELS],
}

impl PoolCursors {
    /// Cursors for a pool with `levels` priority levels (clamped to
    /// `2..=MAX_PRIORITY_LEVELS`: every pool has normal and high).
    pub const fn new(levels: usize) -> Self {
        let levels = if levels < 2 {
            2
        } else if levels > MAX_PRIORITY_LEVELS {
            MAX_PRIORITY_LEVELS
        } else {
            levels
        };
        PoolCursors {
            levels,
            next: [const { AtomicUsize::new(0) }; MAX_PRIORITY_LEVELS],
        }
    }

    /// How many priority levels this pool has.
    pub const fn levels(&self) -> usize {
        self.levels
    }

    /// The level for c10's `isHighPriority`: the highest level when true,
    /// level 0 (normal) otherwise.
    pub const fn level_for_high_priority(&self, high_priority: bool) -> usize {
        if high_priority { self.levels - 1 } else { 0 }
    }

    /// The level for a CUDA-style priority (0 is normal, negative is more
    /// urgent): `-priority`, clamped to the levels this pool has. Positive
    /// priorities are an error (CUDA has no "less urgent than normal").
    pub fn level_for_priority(&self, priority: i32) -> Result<usize> {
        if priority > 0 {
            return Err(Error::invalid(format!(
                "stream priority must be 0 (normal) or negative (more urgent, down to -{}), found {priority}",
                self.levels - 1
            )));
        }
        let wanted = usize::try_from(priority.unsigned_abs()).unwrap_or(usize::MAX);
        Ok(wanted.min(self.levels - 1))
    }

    /// The next pool stream of `device` for c10's `isHighPriority`.
    pub fn pool_stream(&self, device: Device, high_priority: bool) -> Result<Stream> {
        Ok(Stream::new(
            device,
            self.next_id(self.level_for_high_priority(high_priority))?,
        ))
    }

    /// The next pool stream of `device` for a CUDA-style priority.
    pub fn priority_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        Ok(Stream::new(
            device,
            self.next_id(self.level_for_priority(priority)?)?,
        ))
    }

    /// The next stream id at `level`, round-robin over 32 streams.
    pub fn next_id(&self, level: usize) -> Result<StreamId> {
        if level >= self.levels {
            return Err(Error::invalid(format!(
                "priority level {level} out of range: this pool has levels 0..{}",
                self.levels
            )));
        }
        let k = self.next[level].fetch_add(1, Ordering::Relaxed) % STREAMS_PER_POOL;
        pool_stream_id(level, k).ok_or_else(|| Error::invalid("pool stream id out of range"))
    }
}

/// One device's native streams, each created on first use and kept for the
/// process (see [`Slots`]), and the pool's cursors.
pub struct Streams<S> {
    ty: DeviceType,
    index: DeviceIndex,
    cursors: PoolCursors,
    /// Slot 0 is the default stream; pool stream `(level, index)` is slot
    /// `1 + level * STREAMS_PER_POOL + index`.
    slots: Slots<S>,
}

impl<S> fmt::Debug for Streams<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streams")
            .field("device", &format_args!("{}:{}", self.ty, self.index))
            .field("levels", &self.cursors.levels())
            .field("created", &self.slots.created().count())
            .finish()
    }
}

impl<S> Streams<S> {
    /// The streams of device `index` of `ty`, with `levels` priority levels
    /// (clamped as [`PoolCursors::new`] does).
    pub fn new(ty: DeviceType, index: DeviceIndex, levels: usize) -> Self {
        Streams {
            ty,
            index,
            cursors: PoolCursors::new(levels),
            slots: Slots::new(1 + MAX_PRIORITY_LEVELS * STREAMS_PER_POOL),
        }
    }

    /// The pool's cursors (priority levels, round robin).
    pub fn cursors(&self) -> &PoolCursors {
        &self.cursors
    }

    /// The native stream behind `id`, created on first use by `create`,
    /// which is given the id's kind ([`StreamKind::Default`] or
    /// [`StreamKind::Pool`]). Any other id is an error.
    pub fn get_or_create(
        &self,
        id: StreamId,
        create: impl FnOnce(StreamKind) -> Result<S>,
    ) -> Result<&S> {
        let kind = stream_kind(id);
        let slot = match kind {
            StreamKind::Default => 0,
            StreamKind::Pool { level, index } if usize::from(level) < self.cursors.levels() => {
                1 + usize::from(level) * STREAMS_PER_POOL + usize::from(index)
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown stream id {id} on {}:{}: expected 0 (default) or a pool stream id (levels 0..{})",
                    self.ty,
                    self.index,
                    self.cursors.levels()
                )));
            }
        };
        self.slots.get_or_create(slot, || create(kind))
    }

    /// The streams created so far, default first.
    pub fn created(&self) -> impl Iterator<Item = &S> {
        self.slots.created()
    }

    /// Runs `f` on every stream created so far, even after a failure;
    /// returns the first error (for synchronising a device).
    pub fn try_for_each_created(&self, f: impl FnMut(&S) -> Result<()>) -> Result<()> {
        self.slots.try_for_each_created(f)
    }
}
