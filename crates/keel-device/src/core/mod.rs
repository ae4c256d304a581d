//! Core values: device types, devices, streams, stream ids, event flags.
//!
//! Everything here is a plain value with checked constructors and no
//! behaviour that reaches a backend. This module must never call into the
//! registry or a backend; the runtime objects built on these values
//! (guards, events, buffers) live one layer up.

mod device;
mod device_type;
mod event_flag;
mod stream;

pub use device::{Device, DeviceIndex, MAX_DEVICE_INDEX};
pub use device_type::{DeviceType, privateuse1_backend_name, register_privateuse1_backend};
pub use event_flag::EventFlag;
pub use stream::{
    DEFAULT_STREAM_ID, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, Stream, StreamData3, StreamId,
    StreamKind, pool_stream_id, stream_kind,
};
