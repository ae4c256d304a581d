//! Keel's one error type.
//!
//! Every fallible operation in Keel returns [`Result<T>`]. Messages say what
//! was expected and what was found; where c10 has a message for the same
//! situation, Keel uses c10's wording so that people who know PyTorch
//! recognise it. Bad input is always an `Err`, never a panic.

use crate::core::{Device, DeviceType};

/// `Result` with Keel's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Keel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A device string was empty.
    #[error("Device string must not be empty")]
    EmptyDeviceString,

    /// A device string did not match `[A-Za-z_]+(:(0|[1-9][0-9]*))?`.
    #[error("Invalid device string: '{0}'")]
    InvalidDeviceString(String),

    /// A device string started with a name that is no device type.
    #[error("Expected one of {expected} device type at start of device string: {found}")]
    UnknownDeviceType {
        /// The known names, comma separated.
        expected: String,
        /// The name that was found.
        found: String,
    },

    /// A device index out of range, or not allowed for this device type.
    #[error("{0}")]
    InvalidDeviceIndex(String),

    /// The registry has no backend for this device type.
    #[error("keel is not built with support for {device_type} devices ({hint})")]
    NotBuilt {
        /// The device type that was asked for.
        device_type: DeviceType,
        /// How to get it: the cargo feature, or how to register a backend.
        hint: String,
    },

    /// The backend is built but cannot run here (no driver, no device).
    #[error("{backend} unavailable: {reason}")]
    Unavailable {
        /// The backend's display name (`CUDA`, `Vulkan`, ...).
        backend: String,
        /// Why it cannot run.
        reason: String,
    },

    /// An optional operation the backend does not implement.
    #[error("{backend} backend doesn't support {what}.")]
    Unsupported {
        /// The backend's display name.
        backend: String,
        /// What was asked for ("events", "stream pools", ...).
        what: String,
    },

    /// Two objects that must be on one device are not.
    #[error(
        "expected all buffers to be on the same device, but found at least two devices, {first} and {second}"
    )]
    DeviceMismatch {
        /// The first device seen.
        first: Device,
        /// A different device.
        second: Device,
    },

    /// An argument that breaks a documented precondition (c10's
    /// `TORCH_CHECK_VALUE`): event misuse, bad stream ids, bad sizes.
    #[error("{0}")]
    InvalidArgument(String),

    /// PrivateUse1 registration was refused.
    #[error("{0}")]
    PrivateUse1(String),

    /// Device memory ran out.
    #[error("out of memory on {device}: tried to allocate {requested} bytes{detail}")]
    OutOfMemory {
        /// Where the allocation was attempted.
        device: Device,
        /// Bytes requested.
        requested: u64,
        /// What the device holds, as the caching allocator saw it (empty
        /// from a backend; the allocator's error starts with "; ").
        detail: String,
    },

    /// A kernel cannot run as asked (no source for this backend, wrong
    /// bindings, a failure inside the kernel).
    #[error("kernel '{kernel}': {message}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// What went wrong.
        message: String,
    },

    /// An error reported by the native API of a backend.
    #[error("{backend} error: {message}")]
    Backend {
        /// The backend's display name.
        backend: String,
        /// The native error, as the driver described it.
        message: String,
    },

    /// A trace could not be read, written or merged (the trace crate's
    /// error: what was expected, what was found, and where).
    #[error(transparent)]
    Trace(#[from] keel_trace::Error),

    /// Tensors of one operator call on different devices (PyTorch's
    /// message).
    #[error(
        "Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!"
    )]
    TensorDeviceMismatch {
        /// The first device seen.
        first: Device,
        /// A different device.
        second: Device,
    },

    /// An operator with no kernel and no fallback for a device type (or a
    /// kernel that declined the call and no fallback).
    #[error("could not run '{op}' on {device_type} devices: {reason}")]
    NoKernel {
        /// The operator.
        op: String,
        /// The device type it was dispatched on.
        device_type: DeviceType,
        /// Why, and what to register.
        reason: String,
    },

    /// A file written by `keel::save` (safetensors) could not be
    /// written or read back: what was expected and what was found.
    #[error("safetensors error: {0}")]
    Serialization(String),
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }

    /// Shorthand for [`Error::Unsupported`] naming the backend of `device_type`.
    pub fn unsupported(device_type: DeviceType, what: impl Into<String>) -> Self {
        Error::Unsupported {
            backend: device_type.name_upper(),
            what: what.into(),
        }
    }

    /// Shorthand for [`Error::Backend`] naming the backend of `device_type`.
    pub fn backend(device_type: DeviceType, message: impl Into<String>) -> Self {
        Error::Backend {
            backend: device_type.name_upper(),
            message: message.into(),
        }
    }
}
