//! RAII device and stream guards (c10's `InlineDeviceGuard`,
//! `InlineOptionalDeviceGuard`, `InlineStreamGuard`,
//! `InlineOptionalStreamGuard`, `InlineMultiStreamGuard`).
//!
//! Each guard is generic over a [`StaticGuardImpl`]: with a backend's own
//! zero-sized impl (for example [`CpuGuardImpl`](crate::backend::cpu::CpuGuardImpl))
//! every call is static; with [`VirtualGuardImpl`] it goes through the
//! registry. The aliases without `Inline` ([`DeviceGuard`], [`StreamGuard`],
//! ...) are the registry versions most code wants.
//!
//! # Semantics (c10's, exactly)
//! - A guard remembers the *original* device when created and restores it
//!   when dropped, even if the device was changed behind its back, and
//!   also while a panic unwinds.
//! - A device with index `-1` changes nothing.
//! - `reset_device` to a device of another type first restores the old
//!   type's original device, then switches type and records the new type's
//!   original.
//! - A device guard changes the current device, never the current stream.
//! - A stream guard makes its stream current on the stream's device *and*
//!   makes that device current; on drop it restores the stream it replaced
//!   and then the device.
//! - [`InlineMultiStreamGuard`] sets each stream current on its device, does
//!   not change the current device, and restores every stream on drop.
//!   **Keel:** restores in reverse order, so two streams on one device end
//!   with that device's original stream (c10 restores in forward order).
//!
//! # Note [Guards are not Send]
//! The current device and stream are per thread; a guard moved to another
//! thread would restore that thread's state with this thread's values. Every
//! guard is therefore `!Send` (and `!Sync`):
//!
//! ```compile_fail
//! fn send<T: Send>(_: T) {}
//! let guard = keel_device::DeviceGuard::new(keel_device::Device::cpu()).expect("cpu");
//! send(guard); // error: a guard cannot move to another thread
//! ```
//!
//! Destructors cannot report errors: restoring uses
//! `unchecked_set_device`, and a failing `exchange_stream` on drop is
//! ignored (its inputs came from the backend itself, so it does not fail for
//! any backend in this crate).

use std::marker::PhantomData;

use crate::backend::{DeviceGuardImpl, StaticGuardImpl, VirtualGuardImpl};
use crate::core::{Device, DeviceIndex, DeviceType, Stream};
use crate::error::{Error, Result};

/// Makes a type `!Send` and `!Sync`; see
/// [Note \[Guards are not Send\]](self#note-guards-are-not-send).
type NotSend = PhantomData<*const ()>;

fn check_type(impl_: &impl DeviceGuardImpl, device: Device) -> Result<()> {
    if impl_.device_type() != device.device_type() {
        return Err(Error::invalid(format!(
            "device guard for {} devices was given {device}",
            impl_.device_type()
        )));
    }
    Ok(())
}

/// Sets the current device for a scope; see the [module docs](self).
#[must_use = "a guard restores the device when dropped; bind it to a variable"]
#[derive(Debug)]
pub struct InlineDeviceGuard<I: StaticGuardImpl> {
    impl_: I,
    original_device: Device,
    current_device: Device,
    _not_send: NotSend,
}

/// A device guard through the registry (c10's `DeviceGuard`).
pub type DeviceGuard = InlineDeviceGuard<VirtualGuardImpl>;

impl<I: StaticGuardImpl> InlineDeviceGuard<I> {
    /// Makes `device` current (index `-1` changes nothing).
    #[inline(always)]
    pub fn new(device: Device) -> Result<Self> {
        Self::start(I::for_device_type(device.device_type())?, device)
    }

    /// Like [`new`](Self::new) with a given implementation, which must
    /// serve `device`'s type.
    pub fn with_impl(impl_: I, device: Device) -> Result<Self> {
        check_type(&impl_, device)?;
        Self::start(impl_, device)
    }

    /// `impl_` serves `device`'s type.
    #[inline(always)]
    fn start(impl_: I, device: Device) -> Result<Self> {
        let (original_device, current_device) = if device.has_index() {
            (impl_.exchange_device(device)?, device)
        } else {
            let d = impl_.get_device()?;
            (d, d)
        };
        Ok(InlineDeviceGuard {
            impl_,
            original_device,
            current_device,
            _not_send: PhantomData,
        })
    }

    /// Makes `device` (same type) current; index `-1` changes nothing.
    pub fn set_device(&mut self, device: Device) -> Result<()> {
        check_type(&self.impl_, device)?;
        if !device.has_index() {
            return Ok(());
        }
        self.impl_.set_device(device)?;
        self.current_device = device;
        Ok(())
    }

    /// Makes `device` current, switching type if it differs: the old type's
    /// original device is restored first and the new type's original is
    /// recorded. Index `-1` changes nothing.
    pub fn reset_device(&mut self, device: Device) -> Result<()> {
        if !device.has_index() {
            return Ok(());
        }
        if device.device_type() == self.original_device.device_type() {
            return self.set_device(device);
        }
        let new_impl = I::for_device_type(device.device_type())?;
        self.impl_.unchecked_set_device(self.original_device);
        // If the switch fails, the guard still holds the old type with its
        // original restored, so dropping it is harmless.
        self.current_device = self.original_device;
        let original = new_impl.exchange_device(device)?;
        self.impl_ = new_impl;
        self.original_device = original;
        self.current_device = device;
        Ok(())
    }

    /// Makes device `index` of the original device's type current.
    pub fn set_index(&mut self, index: DeviceIndex) -> Result<()> {
        self.set_device(Device::new(self.original_device.device_type(), index)?)
    }

    /// The device that was current when the guard was created (or last
    /// switched type).
    pub fn original_device(&self) -> Device {
        self.original_device
    }

    /// The device this guard most recently made current.
    pub fn current_device(&self) -> Device {
        self.current_device
    }

    /// The device type the guard works on.
    pub fn device_type(&self) -> DeviceType {
        self.impl_.device_type()
    }

    fn impl_ref(&self) -> &I {
        &self.impl_
    }
}

impl<I: StaticGuardImpl> Drop for InlineDeviceGuard<I> {
    #[inline]
    fn drop(&mut self) {
        self.impl_.unchecked_set_device(self.original_device);
    }
}

/// A device guard that may be empty (c10's `InlineOptionalDeviceGuard`):
/// it does nothing until given a device.
#[must_use = "a guard restores the device when dropped; bind it to a variable"]
#[derive(Debug)]
pub struct InlineOptionalDeviceGuard<I: StaticGuardImpl> {
    guard: Option<InlineDeviceGuard<I>>,
    _not_send: NotSend,
}

/// An optional device guard through the registry (c10's
/// `OptionalDeviceGuard`).
pub type OptionalDeviceGuard = InlineOptionalDeviceGuard<VirtualGuardImpl>;

impl<I: StaticGuardImpl> Default for InlineOptionalDeviceGuard<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: StaticGuardImpl> InlineOptionalDeviceGuard<I> {
    /// An empty guard: no original, no current device, nothing restored.
    pub fn new() -> Self {
        InlineOptionalDeviceGuard {
            guard: None,
            _not_send: PhantomData,
        }
    }

    /// A guard for `device` if there is one, empty otherwise.
    pub fn with_device(device: Option<Device>) -> Result<Self> {
        let mut g = Self::new();
        if let Some(d) = device {
            g.set_device(d)?;
        }
        Ok(g)
    }

    /// Makes `device` current, recording the original on first use.
    pub fn set_device(&mut self, device: Device) -> Result<()> {
        match &mut self.guard {
            None => {
                self.guard = Some(InlineDeviceGuard::new(device)?);
                Ok(())
            }
            Some(g) => g.set_device(device),
        }
    }

    /// Like [`set_device`](Self::set_device), switching type if needed.
    pub fn reset_device(&mut self, device: Device) -> Result<()> {
        match &mut self.guard {
            None => {
                self.guard = Some(InlineDeviceGuard::new(device)?);
                Ok(())
            }
            Some(g) => g.reset_device(device),
        }
    }

    /// The original device, if the guard has been given one.
    pub fn original_device(&self) -> Option<Device> {
        self.guard.as_ref().map(|g| g.original_device())
    }

    /// The current device, if the guard has been given one.
    pub fn current_device(&self) -> Option<Device> {
        self.guard.as_ref().map(|g| g.current_device())
    }

    /// Restores the original device now and empties the guard.
    pub fn reset(&mut self) {
        self.guard = None;
    }
}

/// Sets the current stream (and its device) for a scope.
#[must_use = "a guard restores the stream when dropped; bind it to a variable"]
#[derive(Debug)]
pub struct InlineStreamGuard<I: StaticGuardImpl> {
    // Dropped after `Drop::drop` below restored the stream: restores the
    // device last.
    device_guard: InlineDeviceGuard<I>,
    original_stream_of_original_device: Stream,
    original_stream_of_current_device: Stream,
    current_stream: Stream,
}

/// A stream guard through the registry (c10's `StreamGuard`).
pub type StreamGuard = InlineStreamGuard<VirtualGuardImpl>;

impl<I: StaticGuardImpl> InlineStreamGuard<I> {
    /// Makes `stream`'s device current and `stream` its current stream.
    pub fn new(stream: Stream) -> Result<Self> {
        let device_guard = InlineDeviceGuard::<I>::new(stream.device())?;
        let impl_ = device_guard.impl_ref();
        let original_stream_of_original_device =
            impl_.get_stream(device_guard.original_device())?;
        let original_stream_of_current_device = impl_.exchange_stream(stream)?;
        Ok(InlineStreamGuard {
            device_guard,
            original_stream_of_original_device,
            original_stream_of_current_device,
            current_stream: stream,
        })
    }

    /// Switches to `stream`. On the same device only the stream changes;
    /// otherwise the previous device's stream and the current device are
    /// restored first (switching type if needed).
    pub fn reset_stream(&mut self, stream: Stream) -> Result<()> {
        if stream.device() == self.device_guard.current_device() {
            self.device_guard.impl_ref().exchange_stream(stream)?;
            self.current_stream = stream;
            return Ok(());
        }
        let _ = self
            .device_guard
            .impl_ref()
            .exchange_stream(self.original_stream_of_current_device);
        self.device_guard.reset_device(stream.device())?;
        self.original_stream_of_current_device =
            self.device_guard.impl_ref().exchange_stream(stream)?;
        self.current_stream = stream;
        Ok(())
    }

    /// The current stream of the original device when the guard was made.
    pub fn original_stream(&self) -> Stream {
        self.original_stream_of_original_device
    }

    /// The stream this guard most recently made current.
    pub fn current_stream(&self) -> Stream {
        self.current_stream
    }

    /// The device that was current when the guard was made.
    pub fn original_device(&self) -> Device {
        self.device_guard.original_device()
    }

    /// The device this guard made current.
    pub fn current_device(&self) -> Device {
        self.device_guard.current_device()
    }
}

impl<I: StaticGuardImpl> Drop for InlineStreamGuard<I> {
    fn drop(&mut self) {
        let _ = self
            .device_guard
            .impl_ref()
            .exchange_stream(self.original_stream_of_current_device);
    }
}

/// A stream guard that may be empty (c10's `InlineOptionalStreamGuard`).
#[must_use = "a guard restores the stream when dropped; bind it to a variable"]
#[derive(Debug)]
pub struct InlineOptionalStreamGuard<I: StaticGuardImpl> {
    guard: Option<InlineStreamGuard<I>>,
    _not_send: NotSend,
}

/// An optional stream guard through the registry (c10's
/// `OptionalStreamGuard`).
pub type OptionalStreamGuard = InlineOptionalStreamGuard<VirtualGuardImpl>;

impl<I: StaticGuardImpl> Default for InlineOptionalStreamGuard<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: StaticGuardImpl> InlineOptionalStreamGuard<I> {
    /// An empty guard.
    pub fn new() -> Self {
        InlineOptionalStreamGuard {
            guard: None,
            _not_send: PhantomData,
        }
    }

    /// A guard for `stream` if there is one, empty otherwise.
    pub fn with_stream(stream: Option<Stream>) -> Result<Self> {
        let mut g = Self::new();
        if let Some(s) = stream {
            g.reset_stream(s)?;
        }
        Ok(g)
    }

    /// Switches to `stream`, recording the originals on first use.
    pub fn reset_stream(&mut self, stream: Stream) -> Result<()> {
        match &mut self.guard {
            None => {
                self.guard = Some(InlineStreamGuard::new(stream)?);
                Ok(())
            }
            Some(g) => g.reset_stream(stream),
        }
    }

    /// The original device's original stream, if the guard holds one.
    pub fn original_stream(&self) -> Option<Stream> {
        self.guard.as_ref().map(|g| g.original_stream())
    }

    /// The stream the guard made current, if any.
    pub fn current_stream(&self) -> Option<Stream> {
        self.guard.as_ref().map(|g| g.current_stream())
    }

    /// The original device, if any.
    pub fn original_device(&self) -> Option<Device> {
        self.guard.as_ref().map(|g| g.original_device())
    }

    /// The current device, if any.
    pub fn current_device(&self) -> Option<Device> {
        self.guard.as_ref().map(|g| g.current_device())
    }

    /// Restores everything now and empties the guard.
    pub fn reset(&mut self) {
        self.guard = None;
    }
}

/// Sets several streams current at once, one per device, without changing
/// the current device (c10's `InlineMultiStreamGuard`).
#[must_use = "a guard restores the streams when dropped; bind it to a variable"]
#[derive(Debug)]
pub struct InlineMultiStreamGuard<I: StaticGuardImpl> {
    impl_: Option<I>,
    original_streams: Vec<Stream>,
    _not_send: NotSend,
}

/// A multi-stream guard through the registry (c10's `MultiStreamGuard`).
pub type MultiStreamGuard = InlineMultiStreamGuard<VirtualGuardImpl>;

impl<I: StaticGuardImpl> InlineMultiStreamGuard<I> {
    /// Makes each stream current on its device. All streams must share a
    /// device type; an empty list does nothing.
    pub fn new(streams: &[Stream]) -> Result<Self> {
        let mut guard = InlineMultiStreamGuard {
            impl_: None,
            original_streams: Vec::with_capacity(streams.len()),
            _not_send: PhantomData,
        };
        let Some(first) = streams.first() else {
            return Ok(guard);
        };
        for (i, s) in streams.iter().enumerate().skip(1) {
            if s.device_type() != first.device_type() {
                return Err(Error::invalid(format!(
                    "Streams have a mix of device types: stream 0 is on {} while stream {i} is on device {}",
                    first.device(),
                    s.device()
                )));
            }
        }
        let impl_ = guard.impl_.insert(I::for_device_type(first.device_type())?);
        for s in streams {
            // On error, `guard` drops here and restores what was set.
            let old = impl_.exchange_stream(*s)?;
            guard.original_streams.push(old);
        }
        Ok(guard)
    }

    /// The streams that were current before, one per given stream.
    pub fn original_streams(&self) -> &[Stream] {
        &self.original_streams
    }
}

impl<I: StaticGuardImpl> Drop for InlineMultiStreamGuard<I> {
    fn drop(&mut self) {
        if let Some(impl_) = &self.impl_ {
            for s in self.original_streams.iter().rev() {
                let _ = impl_.exchange_stream(*s);
            }
        }
    }
}
