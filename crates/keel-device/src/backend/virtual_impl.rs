//! [`VirtualGuardImpl`]: dynamic dispatch through the registry.

use std::fmt;

use super::registry::{self, Direct};
use super::{BufferHandle, DeviceGuardImpl, EventHandle, StaticGuardImpl};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream};
use crate::error::Result;

/// Forwards every call to the implementation registered for a device type
/// (c10's `VirtualGuardImpl`). [`DeviceGuard`](crate::DeviceGuard) is
/// [`InlineDeviceGuard`](crate::InlineDeviceGuard) over this type.
///
/// The calls a guard makes (device and stream get/set/exchange) reach the
/// CPU backend directly, so they inline; every other call, and every call
/// to another backend, goes through `dyn`.
#[derive(Clone, Copy)]
pub struct VirtualGuardImpl {
    inner: &'static dyn DeviceGuardImpl,
    direct: Option<Direct>,
}

/// Calls `$call` on the CPU backend directly, where `$self` names it, and
/// on every other backend through `dyn`. The CPU's guard is a few
/// thread-local moves, so its calls inline into the guard. A direct arm
/// per backend would make every guard's code as large as all their
/// exchanges together, too large to inline, so that the CPU guard would
/// pay for each backend compiled in; the others' calls cost a driver call
/// or a thread-local swap of their own, beside which one indirect call is
/// small.
macro_rules! guard_call {
    ($self:ident, $g:ident => $call:expr) => {
        if matches!($self.direct, Some(Direct::Cpu)) {
            let $g = &crate::backend::cpu::CPU;
            $call
        } else {
            let $g = $self.inner;
            $call
        }
    };
}

impl VirtualGuardImpl {
    /// The registered implementation for `ty`.
    #[inline]
    pub fn new(ty: DeviceType) -> Result<Self> {
        let (inner, direct) = registry::available_target(ty)?;
        Ok(VirtualGuardImpl { inner, direct })
    }

    /// Wraps a given implementation (c10's `DeviceGuard(device, impl)`),
    /// bypassing the registry.
    pub fn from_static(inner: &'static dyn DeviceGuardImpl) -> Self {
        VirtualGuardImpl {
            inner,
            direct: None,
        }
    }

    /// The implementation this forwards to.
    pub fn inner(&self) -> &'static dyn DeviceGuardImpl {
        self.inner
    }
}

impl fmt::Debug for VirtualGuardImpl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VirtualGuardImpl({})", self.inner.device_type())
    }
}

impl StaticGuardImpl for VirtualGuardImpl {
    #[inline]
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        VirtualGuardImpl::new(ty)
    }
}

impl DeviceGuardImpl for VirtualGuardImpl {
    fn device_type(&self) -> DeviceType {
        self.inner.device_type()
    }
    #[inline]
    fn exchange_device(&self, device: Device) -> Result<Device> {
        guard_call!(self, g => g.exchange_device(device))
    }
    #[inline]
    fn get_device(&self) -> Result<Device> {
        guard_call!(self, g => g.get_device())
    }
    #[inline]
    fn set_device(&self, device: Device) -> Result<()> {
        guard_call!(self, g => g.set_device(device))
    }
    #[inline]
    fn unchecked_set_device(&self, device: Device) {
        guard_call!(self, g => g.unchecked_set_device(device))
    }
    #[inline]
    fn get_stream(&self, device: Device) -> Result<Stream> {
        guard_call!(self, g => g.get_stream(device))
    }
    #[inline]
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        guard_call!(self, g => g.exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        self.inner.device_count()
    }
    fn unavailable_reason(&self) -> Option<String> {
        self.inner.unavailable_reason()
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        self.inner.get_default_stream(device)
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        self.inner
            .get_stream_from_global_pool(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        self.inner.get_new_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        self.inner.record(event, stream, device_index, flag)
    }
    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        self.inner.block(event, stream)
    }
    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        self.inner.query_event(event)
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        self.inner.query_stream(stream)
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.inner.synchronize_stream(stream)
    }
    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        self.inner.synchronize_event(event)
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        self.inner.synchronize_device(device_index)
    }
    fn elapsed_time(
        &self,
        start: &EventHandle,
        end: &EventHandle,
        device_index: DeviceIndex,
    ) -> Result<f64> {
        self.inner.elapsed_time(start, end, device_index)
    }
    fn destroy_event(&self, event: EventHandle, device_index: DeviceIndex) {
        self.inner.destroy_event(event, device_index)
    }
    fn record_buffer_on_stream(&self, buffer: &BufferHandle, stream: &Stream) -> Result<()> {
        self.inner.record_buffer_on_stream(buffer, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard through the registry is two words and a word-sized tag,
    /// with no padding to copy (see [`Direct`]).
    #[test]
    fn the_registry_guard_has_no_padding() {
        use std::mem::size_of;
        assert_eq!(size_of::<Option<Direct>>(), size_of::<usize>());
        assert_eq!(
            size_of::<VirtualGuardImpl>(),
            size_of::<&'static dyn DeviceGuardImpl>() + size_of::<usize>()
        );
    }
}
