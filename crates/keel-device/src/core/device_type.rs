//! [`DeviceType`] and the PrivateUse1 name.
//!
//! A device type names a *kind* of device, and with it a backend: the
//! registry holds at most one implementation per type. The set of types is
//! closed (an enum), like c10's; third parties plug in through the
//! [`DeviceType::PrivateUse1`] slot, which they may rename once per process
//! with [`register_privateuse1_backend`].

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The kinds of device Keel knows.
///
/// The discriminants are Keel's own compact codes (they index the backend
/// registry), not c10's numbers. [`Stream::pack3`](crate::Stream::pack3)
/// carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DeviceType {
    /// The host. Always built, one device (`cpu` / `cpu:0`).
    Cpu = 0,
    /// NVIDIA GPUs through the CUDA driver API.
    Cuda = 1,
    /// Any Vulkan implementation with a compute queue.
    Vulkan = 2,
    /// wgpu adapters: Metal, DX12, Vulkan, GL.
    Wgpu = 3,
    /// The slot for a third-party backend (c10's PrivateUse1).
    PrivateUse1 = 4,
}

impl DeviceType {
    /// How many device types exist; the registry has this many slots.
    pub const COUNT: usize = 5;

    /// Every device type, in code order.
    pub const ALL: [DeviceType; Self::COUNT] = [
        DeviceType::Cpu,
        DeviceType::Cuda,
        DeviceType::Vulkan,
        DeviceType::Wgpu,
        DeviceType::PrivateUse1,
    ];

    /// The compact code of this type (its registry slot).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The type with this code, if any.
    pub const fn from_code(code: i64) -> Option<DeviceType> {
        match code {
            0 => Some(DeviceType::Cpu),
            1 => Some(DeviceType::Cuda),
            2 => Some(DeviceType::Vulkan),
            3 => Some(DeviceType::Wgpu),
            4 => Some(DeviceType::PrivateUse1),
            _ => None,
        }
    }

    /// c10's `DeviceTypeName(type, lower_case)`: `cuda` / `CUDA`. For
    /// PrivateUse1 this is the registered name (`npu` / `NPU`) once one is
    /// registered, `privateuseone` / `PRIVATEUSEONE` before.
    pub fn name(self, lower_case: bool) -> &'static str {
        if lower_case {
            self.name_lower()
        } else {
            self.name_upper_str()
        }
    }

    /// The lower-case name used in device strings.
    pub fn name_lower(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
            DeviceType::Vulkan => "vulkan",
            DeviceType::Wgpu => "wgpu",
            DeviceType::PrivateUse1 => privateuse1_names().map_or(PRIVATEUSE1_DEFAULT, |n| n.0),
        }
    }

    fn name_upper_str(self) -> &'static str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Cuda => "CUDA",
            DeviceType::Vulkan => "VULKAN",
            DeviceType::Wgpu => "WGPU",
            DeviceType::PrivateUse1 => privateuse1_names().map_or("PRIVATEUSEONE", |n| n.1),
        }
    }

    /// The upper-case name as an owned string (used in messages).
    pub fn name_upper(self) -> String {
        self.name_upper_str().to_owned()
    }

    /// The backend's name as people write it, for messages:
    /// `CPU`, `CUDA`, `Vulkan`, `wgpu`, or the PrivateUse1 name.
    pub fn backend_name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Cuda => "CUDA",
            DeviceType::Vulkan => "Vulkan",
            DeviceType::Wgpu => "wgpu",
            DeviceType::PrivateUse1 => self.name_upper_str(),
        }
    }

    /// The cargo feature that builds this type's backend, if it has one.
    pub const fn cargo_feature(self) -> Option<&'static str> {
        match self {
            DeviceType::Cpu => Some("cpu"),
            DeviceType::Cuda => Some("cuda"),
            DeviceType::Vulkan => Some("vulkan"),
            DeviceType::Wgpu => Some("wgpu"),
            DeviceType::PrivateUse1 => None,
        }
    }

    /// Parses a device type name (c10's `parse_type`). Names are case
    /// sensitive; the registered PrivateUse1 name and `privateuseone` both
    /// give [`DeviceType::PrivateUse1`].
    pub fn from_name(name: &str) -> Result<DeviceType> {
        for ty in [
            DeviceType::Cpu,
            DeviceType::Cuda,
            DeviceType::Vulkan,
            DeviceType::Wgpu,
        ] {
            if ty.name_lower() == name {
                return Ok(ty);
            }
        }
        if name == PRIVATEUSE1_DEFAULT || privateuse1_names().is_some_and(|n| n.0 == name) {
            return Ok(DeviceType::PrivateUse1);
        }
        let mut expected = vec!["cpu", "cuda", "vulkan", "wgpu", PRIVATEUSE1_DEFAULT];
        if let Some((registered, _)) = privateuse1_names() {
            expected.push(registered);
        }
        Err(Error::UnknownDeviceType {
            expected: expected.join(", "),
            found: name.to_owned(),
        })
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name_lower())
    }
}

impl FromStr for DeviceType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DeviceType::from_name(s)
    }
}

const PRIVATEUSE1_DEFAULT: &str = "privateuseone";

/// (lower, upper) names of the registered PrivateUse1 backend. Leaked once:
/// the name lives as long as the process, like the registration.
static PRIVATEUSE1_NAME: OnceLock<(&'static str, &'static str)> = OnceLock::new();

fn privateuse1_names() -> Option<(&'static str, &'static str)> {
    PRIVATEUSE1_NAME.get().copied()
}

/// Whether `name` could be the type part of a device string.
pub(crate) fn is_type_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_')
}

/// Renames the PrivateUse1 device type (c10's
/// `register_privateuse1_backend`), so that `npu:0` parses and prints.
///
/// Registering the same name again is fine. A different name after one was
/// registered is an error naming the current one. Names of Keel's in-tree
/// device types are refused, and so are names the device-string grammar
/// (`[A-Za-z_]+`) could never parse.
///
/// This only names the slot; the backend itself is registered with
/// [`backend::register`](crate::backend::register).
pub fn register_privateuse1_backend(name: &str) -> Result<()> {
    if !is_type_name(name) {
        return Err(Error::PrivateUse1(format!(
            "Cannot register privateuse1 backend with name '{name}': expected a name of ASCII letters and underscores ([A-Za-z_]+), as device strings require"
        )));
    }
    let in_tree = ["cpu", "cuda", "vulkan", "wgpu", PRIVATEUSE1_DEFAULT];
    if in_tree.contains(&name) {
        return Err(Error::PrivateUse1(format!(
            "Cannot register privateuse1 backend with in-tree device name: {name}"
        )));
    }
    let names = *PRIVATEUSE1_NAME.get_or_init(|| {
        let lower: &'static str = Box::leak(name.to_owned().into_boxed_str());
        let upper: &'static str = Box::leak(name.to_ascii_uppercase().into_boxed_str());
        (lower, upper)
    });
    if names.0 == name {
        Ok(())
    } else {
        Err(Error::PrivateUse1(format!(
            "register_privateuse1_backend() has already been set! Current backend: {}",
            names.0
        )))
    }
}

/// The registered PrivateUse1 name, if one was registered.
pub fn privateuse1_backend_name() -> Option<&'static str> {
    privateuse1_names().map(|n| n.0)
}
