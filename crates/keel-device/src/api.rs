//! Free functions in the style of `torch.cuda`, for every device type.
//!
//! A device with index `-1` means the thread's current device of its type.
//! Every function returns an error (never panics) when the type has no
//! backend or the backend cannot run; [`device_count`] alone never fails.

use crate::backend::{DeviceGuardImpl, DeviceProperties, check_device_index, registry};
use crate::core::{Device, DeviceIndex, DeviceType, Stream};
use crate::error::Result;
use crate::submit;

fn backend(ty: DeviceType) -> Result<&'static dyn DeviceGuardImpl> {
    registry::available_guard_impl(ty)
}

/// `device` with a concrete index: index `-1` becomes the thread's current
/// device of that type; a concrete index is checked against the count.
pub fn resolve(device: Device) -> Result<Device> {
    let b = backend(device.device_type())?;
    if device.has_index() {
        check_device_index(device, b.device_count())?;
        Ok(device)
    } else {
        b.get_device()
    }
}

/// How many devices of type `ty` there are: 0 when the backend is not
/// built, not registered, or has no driver. Never fails.
pub fn device_count(ty: DeviceType) -> usize {
    registry::guard_impl(ty)
        .map(|b| usize::try_from(b.device_count()).unwrap_or(0))
        .unwrap_or(0)
}

/// Whether devices of type `ty` can be used here (a backend is registered,
/// it can run, and it has at least one device).
pub fn is_available(ty: DeviceType) -> bool {
    availability(ty).is_ok()
}

/// `Ok` when devices of type `ty` can be used here; otherwise the reason
/// (`keel is not built with support for ...`, `<backend> unavailable: ...`).
pub fn availability(ty: DeviceType) -> Result<()> {
    let b = backend(ty)?;
    if b.device_count() == 0 {
        return Err(crate::Error::Unavailable {
            backend: ty.backend_name().to_owned(),
            reason: "no devices found".to_owned(),
        });
    }
    Ok(())
}

/// Every device of type `ty`, in the backend's documented order.
pub fn devices(ty: DeviceType) -> Vec<Device> {
    (0..device_count(ty))
        .filter_map(|i| Device::new(ty, DeviceIndex::try_from(i).ok()?).ok())
        .collect()
}

/// The thread's current device of type `ty`.
pub fn current_device(ty: DeviceType) -> Result<Device> {
    backend(ty)?.get_device()
}

/// Makes `device` the thread's current device of its type. Index `-1`
/// changes nothing.
pub fn set_device(device: Device) -> Result<()> {
    if !device.has_index() {
        return Ok(());
    }
    let b = backend(device.device_type())?;
    check_device_index(device, b.device_count())?;
    b.set_device(device)
}

/// The thread's current stream on `device`.
pub fn current_stream(device: Device) -> Result<Stream> {
    let device = resolve(device)?;
    backend(device.device_type())?.get_stream(device)
}

/// Makes `stream` the thread's current stream on its device. Does not
/// change the current device.
pub fn set_current_stream(stream: Stream) -> Result<()> {
    let device = resolve(stream.device())?;
    backend(device.device_type())?.exchange_stream(Stream::new(device, stream.id()))?;
    Ok(())
}

/// The default stream (id 0) of `device`.
pub fn default_stream(device: Device) -> Result<Stream> {
    let device = resolve(device)?;
    backend(device.device_type())?.get_default_stream(device)
}

/// A stream from `device`'s pool: 32 streams per priority level, created on
/// first use, handed out round-robin (the 33rd request returns the 1st).
/// `high_priority` picks the highest level.
pub fn get_stream_from_pool(device: Device, high_priority: bool) -> Result<Stream> {
    let device = resolve(device)?;
    backend(device.device_type())?.get_stream_from_global_pool(device, high_priority)
}

/// A pool stream with a CUDA-style `priority`: 0 is normal, negative is
/// more urgent (clamped to the levels the device has).
pub fn get_stream_with_priority(device: Device, priority: i32) -> Result<Stream> {
    let device = resolve(device)?;
    backend(device.device_type())?.get_new_stream(device, priority)
}

/// Waits for all work on every stream of `device`.
pub fn synchronize(device: Device) -> Result<()> {
    let device = resolve(device)?;
    submit::synchronize_device(device.device_type(), device.index())
}

/// What `device` is and can do.
pub fn properties(device: Device) -> Result<DeviceProperties> {
    let device = resolve(device)?;
    registry::runtime(device.device_type())?.properties(device)
}
