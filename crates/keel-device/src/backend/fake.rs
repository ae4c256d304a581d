//! The fake backend (c10's `FakeGuardImpl`), behind the `testing` feature.
//!
//! It is a real backend with no device behind it: a thread-local current
//! device (starting at 0) and a thread-local current stream id per device
//! (all starting at 0), for [`FAKE_DEVICE_COUNT`] devices. Events record
//! nothing and are always complete; streams are always idle. It can sit in
//! any [`DeviceType`] slot of the registry, so guard logic can be tested for
//! every type without hardware. It shares [`tls`] with the real
//! backends, so a test that pins the fake into a slot observes exactly what
//! a real backend of that type would store.

use super::pool::PoolCursors;
use super::{DeviceGuardImpl, EventHandle, StaticGuardImpl, check_device_index, registry, tls};
use crate::core::{
    DEFAULT_STREAM_ID, Device, DeviceIndex, DeviceType, EventFlag, Stream, StreamId,
};
use crate::error::{Error, Result};

/// How many devices the fake backend has (c10's
/// `kFakeGuardImplMaxDevices`).
pub const FAKE_DEVICE_COUNT: DeviceIndex = 8;

static CURSORS: [[PoolCursors; FAKE_DEVICE_COUNT as usize]; DeviceType::COUNT] =
    [const { [const { PoolCursors::new(2) }; FAKE_DEVICE_COUNT as usize] }; DeviceType::COUNT];

static FAKES: [FakeGuardImpl; DeviceType::COUNT] = [
    FakeGuardImpl::new(DeviceType::Cpu),
    FakeGuardImpl::new(DeviceType::Cuda),
    FakeGuardImpl::new(DeviceType::Vulkan),
    FakeGuardImpl::new(DeviceType::Wgpu),
    FakeGuardImpl::new(DeviceType::PrivateUse1),
];

/// c10's `FakeGuardImpl` for one device type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeGuardImpl {
    ty: DeviceType,
}

impl FakeGuardImpl {
    /// The fake implementation for device type `ty`.
    pub const fn new(ty: DeviceType) -> Self {
        FakeGuardImpl { ty }
    }

    /// The process-wide fake for `ty`, as a `'static` reference.
    pub fn global(ty: DeviceType) -> &'static FakeGuardImpl {
        &FAKES[usize::from(ty.code())]
    }

    /// Puts the fake into `ty`'s registry slot. Calling it again for the
    /// same type is fine; a slot holding another backend is an error.
    pub fn register(ty: DeviceType) -> Result<&'static FakeGuardImpl> {
        let fake = Self::global(ty);
        match registry::register(ty, fake, None) {
            Ok(()) => Ok(fake),
            Err(e) => match registry::guard_impl(ty) {
                Ok(existing) if std::ptr::addr_eq(existing as *const dyn DeviceGuardImpl, fake) => {
                    Ok(fake)
                }
                _ => Err(e),
            },
        }
    }

    /// The thread's current device index for this type (c10's
    /// `getDeviceIndex`).
    pub fn device_index(&self) -> DeviceIndex {
        tls::current_device_index(self.ty)
    }

    /// Sets the thread's current device index behind any guard's back
    /// (c10's `setDeviceIndex`).
    pub fn set_device_index(&self, index: DeviceIndex) {
        tls::exchange_device_index(self.ty, index);
    }

    /// The thread's current stream id on device `index`.
    pub fn current_stream_id(&self, index: DeviceIndex) -> StreamId {
        tls::current_stream_id(self.ty, index)
    }

    /// Resets every device's current stream to the default (c10's
    /// `resetStreams`).
    pub fn reset_streams(&self) {
        for i in 0..FAKE_DEVICE_COUNT {
            tls::exchange_stream_id(self.ty, i, DEFAULT_STREAM_ID);
        }
    }

    #[inline]
    fn check(&self, device: Device) -> Result<()> {
        if device.device_type() != self.ty {
            return Err(Error::invalid(format!(
                "the fake {} backend serves {} devices, found {device}",
                self.ty, self.ty
            )));
        }
        check_device_index(device, FAKE_DEVICE_COUNT)
    }

    fn cursors(&self, device: Device) -> Result<&'static PoolCursors> {
        self.check(device)?;
        let i = usize::try_from(device.index()).unwrap_or(0);
        Ok(&CURSORS[usize::from(self.ty.code())][i])
    }
}

impl StaticGuardImpl for FakeGuardImpl {
    #[inline]
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        Ok(FakeGuardImpl::new(ty))
    }
}

impl DeviceGuardImpl for FakeGuardImpl {
    fn device_type(&self) -> DeviceType {
        self.ty
    }
    #[inline]
    fn exchange_device(&self, device: Device) -> Result<Device> {
        self.check(device)?;
        tls::exchange_device(device)
    }
    fn get_device(&self) -> Result<Device> {
        tls::current_device(self.ty)
    }
    fn set_device(&self, device: Device) -> Result<()> {
        self.check(device)?;
        tls::exchange_device_index(self.ty, device.index());
        Ok(())
    }
    #[inline]
    fn unchecked_set_device(&self, device: Device) {
        tls::exchange_device_index(self.ty, device.index());
    }
    fn get_stream(&self, device: Device) -> Result<Stream> {
        self.check(device)?;
        Ok(tls::current_stream(device))
    }
    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        self.check(stream.device())?;
        Ok(tls::exchange_stream(stream))
    }
    fn device_count(&self) -> DeviceIndex {
        FAKE_DEVICE_COUNT
    }
    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        self.check(device)?;
        Ok(Stream::default_for(device))
    }
    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        self.cursors(device)?.pool_stream(device, high_priority)
    }
    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        self.cursors(device)?.priority_stream(device, priority)
    }
    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        _flag: EventFlag,
    ) -> Result<()> {
        self.check(stream.device())?;
        event.get_or_insert_with(|| EventHandle::new(()));
        Ok(())
    }
    fn block(&self, _event: &EventHandle, stream: &Stream) -> Result<()> {
        self.check(stream.device())
    }
    fn query_event(&self, _event: &EventHandle) -> Result<bool> {
        Ok(true)
    }
    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        self.check(stream.device())?;
        Ok(true)
    }
    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.check(stream.device())
    }
    fn synchronize_event(&self, _event: &EventHandle) -> Result<()> {
        Ok(())
    }
    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        self.check(Device::new(self.ty, device_index)?)
    }
}
