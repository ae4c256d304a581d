//! A program's CUDA objects in Keel and Keel's in the program: the
//! primary context a program shares (the CUDA runtime's, cudarc's,
//! PyTorch's) is Keel's `cuda:N`; the program's streams become external
//! streams (c10's id range for them: the `CUstream` value); its device
//! memory becomes a Keel [`Buffer`] Keel never frees; and the driver
//! handles behind Keel's devices, streams, events and buffers are handed
//! out.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use keel_device::interop::cuda as interop;
//! let ctx = cudarc::driver::CudaContext::new(0)?;   // the program's
//! let theirs = ctx.new_stream()?;
//! let stream = interop::adopt_stream(&theirs)?;      // Keel's handle on it
//! // Keel's work on `stream` runs on the program's stream, in order
//! // with the kernels the program launches there itself; a profiler
//! // range times the program's own work on it.
//! {
//!     let _range = keel_device::profiler::device_range(&stream, "program kernels");
//!     // ... the program launches on `theirs` ...
//! }
//! # Ok(()) }
//! ```
//!
//! # Ownership
//! Keel retains each device's primary context for the process, so a
//! program releasing its own reference never pulls it from under Keel.
//! [`adopt_stream`] keeps the cudarc stream alive (a clone of its `Arc`)
//! for the process; [`adopt_raw_stream`] and [`adopt_buffer`] take raw
//! handles, and the program promises they stay valid while Keel uses
//! them (their `# Safety`). Handles given out stay valid while the Keel
//! object lives: a pool stream and a device's context for the process, a
//! buffer's pointer until the buffer drops and its memory goes back to
//! the caching allocator.

use std::sync::Arc;

pub use cudarc::driver::sys::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUstream};

use crate::backend::cuda::interop as backend;
use crate::core::{Device, DeviceType, Stream};
use crate::error::{Error, Result};
use crate::{Buffer, Event};

/// The Keel device whose primary context `context` is: `cuda:N` for
/// cudarc's `CudaContext::new(N)`. A non-primary context
/// (`CudaContext::new_non_primary`) is an error: Keel runs on primary
/// contexts.
pub fn adopt_context(context: &Arc<cudarc::driver::CudaContext>) -> Result<Device> {
    // SAFETY: cudarc keeps its context alive while `context` lives.
    unsafe { adopt_raw_context(context.cu_ctx()) }
}

/// [`adopt_context`] for a raw `CUcontext`.
///
/// # Safety
/// `context` is a live CUDA context.
pub unsafe fn adopt_raw_context(context: CUcontext) -> Result<Device> {
    // SAFETY: as the caller promises.
    let index = unsafe { backend::device_of_context(context) }?;
    Device::new(DeviceType::Cuda, index)
}

/// The program's cudarc stream as a Keel stream (an external stream of
/// its context's device): Keel's launches, copies and events on it run on
/// the program's stream, in order with the program's own kernels. Keel
/// keeps the cudarc stream alive for the rest of the process. Adopting
/// it again gives the same Keel stream.
pub fn adopt_stream(stream: &Arc<cudarc::driver::CudaStream>) -> Result<Stream> {
    let device = adopt_context(stream.context())?;
    let keep: Arc<dyn std::any::Any + Send + Sync> = stream.clone();
    // SAFETY: `keep` owns the stream for as long as Keel holds it.
    let id = unsafe { backend::adopt_stream(device, stream.cu_stream(), Some(keep)) }?;
    Ok(Stream::new(device, id))
}

/// [`adopt_stream`] for a raw `CUstream` of `device`'s primary context. A
/// null stream, or a stream of another context (another device's, or a
/// context Keel does not run on), is an error naming it.
///
/// # Safety
/// `stream` is a live stream, and the program destroys it only after the
/// last Keel use of it has completed (Keel keeps the handle: every
/// [`Stream`] with the returned id refers to it).
pub unsafe fn adopt_raw_stream(device: Device, stream: CUstream) -> Result<Stream> {
    check(device)?;
    // SAFETY: as the caller promises.
    let id = unsafe { backend::adopt_stream(device, stream, None) }?;
    Ok(Stream::new(device, id))
}

/// The program's `len` bytes of device memory at `ptr` on `device`, as a
/// Keel [`Buffer`] with no copy. Keel never frees it.
///
/// # Safety
/// `ptr..ptr + len` is memory of `device`'s primary context (or memory
/// every context can reach, such as managed memory) and stays allocated
/// until the Keel buffer is dropped and the work that used it completed.
pub unsafe fn adopt_buffer(device: Device, ptr: CUdeviceptr, len: usize) -> Result<Buffer> {
    // SAFETY: as the caller promises.
    unsafe { adopt_owned_buffer(device, ptr, len, None) }
}

/// [`adopt_buffer`] for memory that `owner` keeps allocated (a DLPack
/// tensor, a cudarc slice): Keel holds `owner` until the buffer and every
/// Keel handle to its memory are dropped, then drops it.
///
/// # Safety
/// `ptr..ptr + len` is memory of `device`'s primary context that stays
/// allocated while `owner` lives.
pub unsafe fn adopt_owned_buffer(
    device: Device,
    ptr: CUdeviceptr,
    len: usize,
    owner: Option<Box<dyn std::any::Any + Send + Sync>>,
) -> Result<Buffer> {
    check(device)?;
    // SAFETY: as the caller promises.
    let handle = unsafe { backend::foreign_buffer(device, ptr, len, owner) }?;
    Buffer::from_foreign_handle(device, handle, len)
}

/// The driver handles behind a Keel CUDA device.
#[derive(Debug, Clone, Copy)]
pub struct Handles {
    /// The device's primary context, which Keel retains for the process.
    pub context: CUcontext,
    /// The device.
    pub device: CUdevice,
}

/// The primary context and `CUdevice` behind `device`.
pub fn handles(device: Device) -> Result<Handles> {
    check(device)?;
    let (context, dev) = backend::state(device)?.handles();
    Ok(Handles {
        context,
        device: dev,
    })
}

/// The `CUstream` behind a Keel stream of a CUDA device (null for the
/// default, legacy stream).
pub fn stream(stream: &Stream) -> Result<CUstream> {
    check(stream.device())?;
    backend::stream_of(stream.device(), stream.id())
}

/// The device pointer where a Keel [`Buffer`] on a CUDA device starts
/// (its block's address inside the caching allocator's segment).
pub fn buffer(buffer: &Buffer) -> Result<CUdeviceptr> {
    let base = backend::pointer_of(buffer.handle()).ok_or_else(|| {
        Error::invalid(format!(
            "a CUDA device pointer: expected a buffer on a CUDA device, found one on {}",
            buffer.device()
        ))
    })?;
    Ok(base + buffer.offset() as CUdeviceptr)
}

/// The `CUevent` behind a recorded Keel event of a CUDA device (`None`
/// before its first record).
pub fn event(event: &Event) -> Result<Option<CUevent>> {
    if event.device_type() != DeviceType::Cuda {
        return Err(Error::invalid(format!(
            "a CUevent: expected an event of a CUDA device, found one of {}",
            event.device_type()
        )));
    }
    Ok(event.handle().and_then(backend::event_of))
}

fn check(device: Device) -> Result<()> {
    if device.device_type() == DeviceType::Cuda {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "CUDA interop: expected a CUDA device, found {device}"
        )))
    }
}
