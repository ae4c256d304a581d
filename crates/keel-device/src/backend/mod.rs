//! The backend interface, the registry, and the backends.
//!
//! A backend is two trait objects registered for one [`DeviceType`]:
//!
//! - [`DeviceGuardImpl`], c10's `DeviceGuardImplInterface`: the current
//!   device, the current stream, the stream pool and events. Guards, events
//!   and the `torch.cuda`-style free functions are written once against it.
//! - [`DeviceRuntime`], what c10 leaves to ATen: device properties, buffers,
//!   copies and kernel launches.
//!
//! A third, optional, serves the profiler: [`DeviceTiming`] (c10's
//! `ProfilerStubs`, kept apart from the guard interface as c10 keeps
//! them), timing work inside its own submissions and reading the device
//! clock.
//!
//! [`register`] (or [`register_timed`], with a [`DeviceTiming`]) puts them
//! in the [registry], one slot per device type. Built-in backends fill
//! their slot lazily on first lookup; a third party fills the PrivateUse1
//! slot (or any empty one) at run time.
//!
//! Every backend is written against [`typed::Backend`] (its own device,
//! stream, event and buffer types); [`typed::Typed`] turns it into the
//! three trait objects, doing once what every backend would otherwise repeat:
//! checks, the thread's current device and streams ([`tls`]), the stream
//! pool ([`pool`]) and the handles' types. See ARCHITECTURE.md for the
//! files every backend folder has.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "testing")]
pub mod fake;
pub mod pool;
mod properties;
pub mod registry;
mod runtime;
pub mod slots;
#[cfg(any(feature = "vulkan", feature = "wgpu"))]
mod spv;
pub mod timestamps;
mod timing;
pub mod tls;
pub mod typed;
mod virtual_impl;
#[cfg(feature = "vulkan")]
pub mod vulkan;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use std::any::Any;
use std::fmt;

use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::{Error, Result};

pub use properties::{DeviceKind, DeviceProperties, TimestampSupport, vendor_name};
pub use registry::{guard_impl, register, register_timed, runtime, timing};
pub use runtime::{BufferHandle, BufferView, DeviceRuntime, Readback};
pub use timing::{ClockSample, DeviceTiming};
pub use virtual_impl::VirtualGuardImpl;

/// A backend's native event, owned by an [`Event`](crate::Event).
///
/// Created by [`DeviceGuardImpl::record`] on the first record, handed back
/// to the backend for every other event operation, and passed to
/// [`DeviceGuardImpl::destroy_event`] when the event is dropped. Backends
/// put whatever they need inside and get it back with
/// [`EventHandle::downcast_ref`].
pub struct EventHandle(Box<dyn Any + Send + Sync>);

impl EventHandle {
    /// Wraps a backend's event state.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        EventHandle(Box::new(value))
    }

    /// The backend's event state, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }

    /// The backend's event state, mutably, if it is a `T`.
    pub fn downcast_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.0.downcast_mut()
    }
}

impl fmt::Debug for EventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventHandle(..)")
    }
}

/// c10's `DeviceGuardImplInterface`: what guards, streams and events need
/// from a backend.
///
/// Required operations mirror c10 exactly. The optional ones default to a
/// clear `<backend> backend doesn't support <what>.` error, as c10's do.
/// [`device_count`](Self::device_count) never fails: a driver error counts
/// as zero devices.
///
/// Implementations must be cheap to call: guards call `exchange_device` on
/// construction and `unchecked_set_device` on drop.
pub trait DeviceGuardImpl: Send + Sync + 'static {
    /// The device type this implementation serves.
    fn device_type(&self) -> DeviceType;

    /// Makes `device` current on this thread; returns the previous current
    /// device. `device` has a concrete index.
    fn exchange_device(&self, device: Device) -> Result<Device>;

    /// The thread's current device of this type.
    fn get_device(&self) -> Result<Device>;

    /// Makes `device` current on this thread.
    fn set_device(&self, device: Device) -> Result<()>;

    /// Like [`set_device`](Self::set_device), but never fails: used by
    /// guards' destructors, which cannot report errors. Errors are ignored.
    fn unchecked_set_device(&self, device: Device);

    /// The thread's current stream on `device`.
    fn get_stream(&self, device: Device) -> Result<Stream>;

    /// Makes `stream` the current stream of its device on this thread;
    /// returns the previous one. Does not change the current device.
    fn exchange_stream(&self, stream: Stream) -> Result<Stream>;

    /// How many devices of this type exist. Never fails: zero when the
    /// driver is missing or reports an error.
    fn device_count(&self) -> DeviceIndex;

    /// Why the backend cannot run, if it cannot (no driver, no device).
    /// Keel's addition: lets lookups report `unavailable: <reason>`.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// The default stream of `device`.
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        let _ = device;
        Err(Error::unsupported(self.device_type(), "default streams"))
    }

    /// A stream from the device's pool, round-robin (c10's
    /// `getStreamFromGlobalPool`).
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        let _ = (device, high_priority);
        Err(Error::unsupported(self.device_type(), "stream pools"))
    }

    /// A stream with `priority` (lower is more urgent, CUDA's convention).
    /// c10 creates a fresh stream here; Keel's backends hand out a pool
    /// stream of the matching level, which is never destroyed.
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        let _ = (device, priority);
        Err(Error::unsupported(self.device_type(), "creating streams"))
    }

    /// Records `event` on `stream`: creates the native event on first use.
    /// `device_index` is the event's device (`-1` before its first record);
    /// the caller has already checked it matches the stream's device.
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        let _ = (event, stream, device_index, flag);
        Err(Error::unsupported(self.device_type(), "events"))
    }

    /// Makes future work on `stream` wait until `event` completes.
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        let _ = (event, stream);
        Err(Error::unsupported(self.device_type(), "events"))
    }

    /// Whether the work before `event` has completed. Never blocks.
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        let _ = event;
        Err(Error::unsupported(self.device_type(), "events"))
    }

    /// Whether all work on `stream` has completed. Never blocks.
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        let _ = stream;
        Err(Error::unsupported(self.device_type(), "querying streams"))
    }

    /// Waits until all work on `stream` has completed.
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        let _ = stream;
        Err(Error::unsupported(
            self.device_type(),
            "synchronizing streams",
        ))
    }

    /// Waits until `event` has completed.
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        let _ = event;
        Err(Error::unsupported(
            self.device_type(),
            "synchronizing events",
        ))
    }

    /// Waits until all work on every stream of the device has completed.
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        let _ = device_index;
        Err(Error::unsupported(
            self.device_type(),
            "synchronizing devices",
        ))
    }

    /// Milliseconds from `start` to `end`. Both were recorded with timing
    /// and have completed (the caller checks).
    fn elapsed_time(
        &self,
        start: &EventHandle,
        end: &EventHandle,
        device_index: DeviceIndex,
    ) -> Result<f64> {
        let _ = (start, end, device_index);
        Err(Error::unsupported(self.device_type(), "elapsed_time"))
    }

    /// Releases a native event. Default: drop it.
    fn destroy_event(&self, event: EventHandle, device_index: DeviceIndex) {
        let _ = (event, device_index);
    }

    /// c10's `recordDataPtrOnStream`: `buffer` is in use on `stream`, so
    /// its memory must not be reused until the stream's current work is
    /// done. Default: nothing (backends whose buffers keep themselves
    /// alive while in flight need nothing).
    fn record_buffer_on_stream(&self, buffer: &BufferHandle, stream: &Stream) -> Result<()> {
        let _ = (buffer, stream);
        Ok(())
    }
}

/// A [`DeviceGuardImpl`] that a guard can hold by value and build from a
/// device type: what [`InlineDeviceGuard`](crate::InlineDeviceGuard) is
/// generic over (c10's template parameter `T` with its `T(DeviceType)`
/// constructor).
///
/// A backend's own zero-sized impl gives static dispatch; it accepts only
/// its own type. [`VirtualGuardImpl`] accepts any registered type.
pub trait StaticGuardImpl: DeviceGuardImpl + Sized {
    /// The implementation for device type `ty`.
    fn for_device_type(ty: DeviceType) -> Result<Self>;
}

/// Checks that `device` has a concrete index below `count`, for backends'
/// `exchange_device`/`set_device`.
#[inline]
pub fn check_device_index(device: Device, count: DeviceIndex) -> Result<()> {
    if device.index() < 0 || device.index() >= count {
        return Err(index_error(device, count));
    }
    Ok(())
}

#[cold]
fn index_error(device: Device, count: DeviceIndex) -> Error {
    let ty = device.device_type();
    Error::InvalidDeviceIndex(format!(
        "Invalid device {device}: expected an index in 0..{count} ({count} {ty} device{} available), found {}",
        if count == 1 { "" } else { "s" },
        device.index()
    ))
}
