//! [`Stream`] and [`StreamId`]: a handle to an in-order queue of work.
//!
//! A stream is a plain value: the device it lives on and an id. It owns
//! nothing; the backend owns the native queue behind the id, and pool
//! streams are never destroyed, so a `Stream` value can be copied freely and
//! stays valid for the life of the process.
//!
//! # Invariants
//! - Id `0` is the device's *default stream*; it always exists.
//! - The *current* stream is per thread and per device, starts as the
//!   default stream, and changes only through
//!   [`set_current_stream`](crate::set_current_stream) or a stream guard.
//!   Setting the current stream of a device never changes the current
//!   device.
//!
//! # Note [StreamId encoding]
//! Keel uses c10's CUDA encoding for every backend, so an id says what kind
//! of stream it is without asking the backend:
//!
//! ```text
//!  bit 63 ........ 5 | 4 ........ 1 | 0
//!  index in the pool | priority lvl | 1 = pool stream
//! ```
//!
//! - `0`: the default stream.
//! - odd: a pool stream, `id = (index << 5) | (level << 1) | 1`, with
//!   `index < 32` ([`STREAMS_PER_POOL`]) and `level < 4`
//!   ([`MAX_PRIORITY_LEVELS`]); level 0 is normal priority, higher levels
//!   are higher priority.
//! - any other id (an odd id with bits above bit 9 or a level of 4 or
//!   more, or an even non-zero id): a backend-defined stream (c10 stores external
//!   `cudaStream_t` pointers this way).
//!
//! A pool id never depends on creation order, so `pack3`/`unpack3` round
//! trips across threads, and two processes agree on what an id means.

use std::fmt;

use super::device::{Device, DeviceIndex};
use super::device_type::DeviceType;
use crate::error::{Error, Result};

/// Identifies a stream among the streams of one device: 0 is the default
/// stream; the encoding of the others is the Note "StreamId encoding" in
/// `core/stream.rs`.
pub type StreamId = i64;

/// The default stream's id.
pub const DEFAULT_STREAM_ID: StreamId = 0;

/// Streams per priority level per device in the stream pool (c10's
/// `kStreamsPerPool`).
pub const STREAMS_PER_POOL: usize = 32;

/// The most priority levels a pool may have (c10's
/// `max_compile_time_stream_priorities`). Every backend has at least two:
/// normal and high.
pub const MAX_PRIORITY_LEVELS: usize = 4;

/// What a [`StreamId`] says about its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Id 0.
    Default,
    /// A pool stream.
    Pool {
        /// Priority level: 0 is normal, higher is more urgent.
        level: u8,
        /// Position in the level's pool, `0..32`.
        index: u8,
    },
    /// Any other id (even ids are c10's external streams): the backend
    /// decides its meaning.
    Other,
}

/// The id of pool stream `index` at priority `level`. Returns `None` when
/// either is out of range.
pub const fn pool_stream_id(level: usize, index: usize) -> Option<StreamId> {
    if level >= MAX_PRIORITY_LEVELS || index >= STREAMS_PER_POOL {
        return None;
    }
    Some(((index as StreamId) << 5) | ((level as StreamId) << 1) | 1)
}

/// Decodes a stream id.
pub const fn stream_kind(id: StreamId) -> StreamKind {
    if id == DEFAULT_STREAM_ID {
        StreamKind::Default
    } else if id & 1 == 1 && id >> 10 == 0 && ((id >> 1) & 0xF) < MAX_PRIORITY_LEVELS as StreamId {
        StreamKind::Pool {
            level: ((id >> 1) & 0xF) as u8,
            index: ((id >> 5) & 0x1F) as u8,
        }
    } else {
        StreamKind::Other
    }
}

/// A stream: a device and an id on it. Cheap to copy; see the module docs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stream {
    device: Device,
    id: StreamId,
}

/// The three numbers [`Stream::pack3`] gives, enough to rebuild a stream
/// anywhere (for example across an FFI boundary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamData3 {
    /// The stream id.
    pub stream_id: StreamId,
    /// The device index.
    pub device_index: DeviceIndex,
    /// The device type's code ([`DeviceType::code`]).
    pub device_type: i8,
}

impl Stream {
    /// A stream with this id on `device`. Backends hand streams out; users
    /// normally get them from [`current_stream`](crate::current_stream),
    /// [`default_stream`](crate::default_stream) or
    /// [`get_stream_from_pool`](crate::get_stream_from_pool).
    pub const fn new(device: Device, id: StreamId) -> Stream {
        Stream { device, id }
    }

    /// The default stream (id 0) of `device`.
    pub const fn default_for(device: Device) -> Stream {
        Stream {
            device,
            id: DEFAULT_STREAM_ID,
        }
    }

    /// The device this stream runs on.
    pub const fn device(&self) -> Device {
        self.device
    }

    /// The device type.
    pub const fn device_type(&self) -> DeviceType {
        self.device.device_type()
    }

    /// The device index.
    pub const fn device_index(&self) -> DeviceIndex {
        self.device.index()
    }

    /// The stream id.
    pub const fn id(&self) -> StreamId {
        self.id
    }

    /// Whether this is the device's default stream.
    pub const fn is_default(&self) -> bool {
        self.id == DEFAULT_STREAM_ID
    }

    /// What the id says about the stream.
    pub const fn kind(&self) -> StreamKind {
        stream_kind(self.id)
    }

    /// c10's `Stream::hash`: `type << 56 | index << 48 | id & (2^48 - 1)`.
    /// Keel masks the index to 8 bits (c10 sign-extends `-1` over the type
    /// bits), so every field stays in its place; ids of devices 256 and up
    /// can collide with lower ones, as in any hash.
    pub fn hash_u64(&self) -> u64 {
        let ty = u64::from(self.device.device_type().code());
        let index = (self.device.index() as u64) & 0xFF;
        let id = (self.id as u64) & ((1u64 << 48) - 1);
        (ty << 56) | (index << 48) | id
    }

    /// c10's `pack3`: the id, the device index and the type code.
    pub fn pack3(&self) -> StreamData3 {
        StreamData3 {
            stream_id: self.id,
            device_index: self.device.index(),
            // Codes are below DeviceType::COUNT, so they fit in i8.
            device_type: self.device.device_type().code() as i8,
        }
    }

    /// c10's `unpack3`: rebuilds a stream, checking the type code and the
    /// device index.
    pub fn unpack3(
        stream_id: StreamId,
        device_index: DeviceIndex,
        device_type: i8,
    ) -> Result<Stream> {
        let ty = DeviceType::from_code(i64::from(device_type)).ok_or_else(|| {
            Error::invalid(format!(
                "unpack3: expected a device type code in 0..{}, found {device_type}",
                DeviceType::COUNT
            ))
        })?;
        Ok(Stream::new(Device::new(ty, device_index)?, stream_id))
    }
}

impl From<StreamData3> for (StreamId, DeviceIndex, i8) {
    fn from(d: StreamData3) -> Self {
        (d.stream_id, d.device_index, d.device_type)
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {} on device {}", self.id, self.device)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({self})")
    }
}
