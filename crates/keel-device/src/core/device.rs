//! [`Device`]: a device type plus an index.
//!
//! Invariants (checked by every constructor, so every `Device` value holds
//! them):
//! - the index is `-1` or in `0..=MAX_DEVICE_INDEX` (511);
//! - a CPU device has index `-1` or `0`.
//!
//! Index `-1` means "the current device of this type": operations resolve it
//! through the thread's current device, and `Display` omits it (`cuda`, not
//! `cuda:-1`). A `Device` has no setters; make a new one.

use std::fmt;
use std::str::FromStr;

use super::device_type::DeviceType;
use crate::error::{Error, Result};

/// Index of a device among the devices of its type; `-1` is "current".
pub type DeviceIndex = i16;

/// The largest device index Keel accepts (c10's `MAX_NUM_DEVICES` is 512).
pub const MAX_DEVICE_INDEX: DeviceIndex = 511;

/// A device: which backend, and which of its devices.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    ty: DeviceType,
    index: DeviceIndex,
}

impl Device {
    /// A device of type `ty` with `index`, checked: `index` must be `-1` or
    /// in `0..=511`, and a CPU device's index must be `-1` or `0`.
    #[inline]
    pub fn new(ty: DeviceType, index: DeviceIndex) -> Result<Device> {
        validate(ty, i64::from(index))?;
        Ok(Device { ty, index })
    }

    /// The current device of type `ty` (index `-1`).
    pub const fn current(ty: DeviceType) -> Device {
        Device { ty, index: -1 }
    }

    /// The CPU (`cpu`, index `-1`).
    pub const fn cpu() -> Device {
        Device::current(DeviceType::Cpu)
    }

    /// The device type.
    pub const fn device_type(&self) -> DeviceType {
        self.ty
    }

    /// The index; `-1` means the current device.
    pub const fn index(&self) -> DeviceIndex {
        self.index
    }

    /// Whether the index names a specific device (is not `-1`).
    pub const fn has_index(&self) -> bool {
        self.index != -1
    }

    /// Whether this is a CPU device.
    pub fn is_cpu(&self) -> bool {
        self.ty == DeviceType::Cpu
    }

    /// The same device with another index of the same type, checked.
    pub fn with_index(&self, index: DeviceIndex) -> Result<Device> {
        Device::new(self.ty, index)
    }
}

#[inline]
fn validate(ty: DeviceType, index: i64) -> Result<()> {
    let cpu_ok = ty != DeviceType::Cpu || index <= 0;
    if (-1..=i64::from(MAX_DEVICE_INDEX)).contains(&index) && cpu_ok {
        return Ok(());
    }
    invalid_index(ty, index)
}

#[cold]
fn invalid_index(ty: DeviceType, index: i64) -> Result<()> {
    if index < -1 {
        return Err(Error::InvalidDeviceIndex(format!(
            "Device index must be -1 or non-negative, got {index}"
        )));
    }
    if ty == DeviceType::Cpu && index > 0 {
        return Err(Error::InvalidDeviceIndex(format!(
            "CPU device index must be -1 or zero, got {index}"
        )));
    }
    if index > i64::from(MAX_DEVICE_INDEX) {
        return Err(Error::InvalidDeviceIndex(format!(
            "Device index must be at most {MAX_DEVICE_INDEX}, got {index}"
        )));
    }
    Ok(())
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.index == -1 {
            f.pad(self.ty.name_lower())
        } else {
            // Through `pad`, so width and alignment work (`{d:>10}`).
            f.pad(&format!("{}:{}", self.ty.name_lower(), self.index))
        }
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({self})")
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses c10's device-string grammar exactly:
    /// `[A-Za-z_]+(:(0|[1-9][0-9]*))?`. No sign, no leading zero, no spaces,
    /// nothing after the index. Type names are case sensitive.
    fn from_str(s: &str) -> Result<Device> {
        if s.is_empty() {
            return Err(Error::EmptyDeviceString);
        }
        let invalid = || Error::InvalidDeviceString(s.to_owned());
        let (name, index) = match s.split_once(':') {
            None => (s, None),
            Some((name, index)) => (name, Some(index)),
        };
        if !super::device_type::is_type_name(name) {
            return Err(invalid());
        }
        let index = match index {
            None => -1,
            Some(digits) => {
                let well_formed = !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits == "0" || !digits.starts_with('0'));
                if !well_formed {
                    return Err(invalid());
                }
                // All digits: the only parse failure left is overflow.
                digits.parse::<i64>().unwrap_or(i64::MAX)
            }
        };
        let ty = DeviceType::from_name(name)?;
        validate(ty, index)
            .map_err(|e| Error::InvalidDeviceIndex(format!("{e} (in device string '{s}')")))?;
        // `validate` bounded the index to -1..=511, so it fits.
        let index = DeviceIndex::try_from(index).map_err(|_| invalid())?;
        Ok(Device { ty, index })
    }
}

impl TryFrom<&str> for Device {
    type Error = Error;
    fn try_from(s: &str) -> Result<Device> {
        s.parse()
    }
}

impl From<DeviceType> for Device {
    /// The current device of that type (index `-1`).
    fn from(ty: DeviceType) -> Device {
        Device::current(ty)
    }
}
