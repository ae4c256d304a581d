//! The thread's current device per type and current stream per device.
//!
//! c10 keeps this state inside each backend (CUDA inside the driver's
//! context stack). Keel's backends share this one implementation, keyed by
//! device type, so every backend has the same rules:
//!
//! - each thread starts on device 0 of every type;
//! - each thread's current stream on every device starts as the default
//!   stream (id 0);
//! - nothing here validates: backends check indices before storing them.
//!
//! Two threads never see each other's state. Each call is a thread-local
//! access and a `Cell` read or write.

use std::cell::{Cell, RefCell};

use crate::core::{DEFAULT_STREAM_ID, Device, DeviceIndex, DeviceType, Stream, StreamId};
use crate::error::Result;

thread_local! {
    static CURRENT_DEVICE: [Cell<DeviceIndex>; DeviceType::COUNT] =
        const { [const { Cell::new(0) }; DeviceType::COUNT] };
    static CURRENT_STREAMS: RefCell<[Vec<StreamId>; DeviceType::COUNT]> =
        const { RefCell::new([const { Vec::new() }; DeviceType::COUNT]) };
}

/// The thread's current device index for `ty` (0 until changed).
#[inline]
pub fn current_device_index(ty: DeviceType) -> DeviceIndex {
    CURRENT_DEVICE.with(|d| d[usize::from(ty.code())].get())
}

/// Sets the thread's current device index for `ty`; returns the old one.
#[inline]
pub fn exchange_device_index(ty: DeviceType, index: DeviceIndex) -> DeviceIndex {
    CURRENT_DEVICE.with(|d| d[usize::from(ty.code())].replace(index))
}

/// The thread's current stream id on device `index` of `ty` (0 until
/// changed). `index` must be a concrete index (not -1).
#[inline]
pub fn current_stream_id(ty: DeviceType, index: DeviceIndex) -> StreamId {
    let Ok(i) = usize::try_from(index) else {
        return DEFAULT_STREAM_ID;
    };
    CURRENT_STREAMS.with(|s| {
        s.borrow()[usize::from(ty.code())]
            .get(i)
            .copied()
            .unwrap_or(DEFAULT_STREAM_ID)
    })
}

/// Sets the thread's current stream id on device `index` of `ty`; returns
/// the old one. A negative `index` stores nothing and returns the default
/// stream id.
#[inline]
pub fn exchange_stream_id(ty: DeviceType, index: DeviceIndex, id: StreamId) -> StreamId {
    let Ok(i) = usize::try_from(index) else {
        return DEFAULT_STREAM_ID;
    };
    CURRENT_STREAMS.with(|s| {
        let mut s = s.borrow_mut();
        let v = &mut s[usize::from(ty.code())];
        if v.len() <= i {
            v.resize(i + 1, DEFAULT_STREAM_ID);
        }
        std::mem::replace(&mut v[i], id)
    })
}

// The thread-local bookkeeping every backend's guard implementation does
// once it has checked the device, written once.

/// Makes `device` (checked by the caller) current; returns the previous
/// current device of its type.
#[inline]
pub fn exchange_device(device: Device) -> Result<Device> {
    let ty = device.device_type();
    Device::new(ty, exchange_device_index(ty, device.index()))
}

/// The thread's current device of `ty`.
#[inline]
pub fn current_device(ty: DeviceType) -> Result<Device> {
    Device::new(ty, current_device_index(ty))
}

/// Restores a device a guard recorded (never fails; index `-1` is ignored).
#[inline]
pub fn restore_device(device: Device) {
    if device.has_index() {
        exchange_device_index(device.device_type(), device.index());
    }
}

/// The thread's current stream on `device` (a checked, concrete device).
#[inline]
pub fn current_stream(device: Device) -> Stream {
    Stream::new(
        device,
        current_stream_id(device.device_type(), device.index()),
    )
}

/// Makes `stream` (checked by the caller) current on its device; returns
/// the stream it replaced.
#[inline]
pub fn exchange_stream(stream: Stream) -> Stream {
    let old = exchange_stream_id(stream.device_type(), stream.device_index(), stream.id());
    Stream::new(stream.device(), old)
}
