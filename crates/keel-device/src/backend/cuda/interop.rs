//! What the public interop API (`crate::interop::cuda`) needs of this
//! backend: a program's primary context found as a Keel device, its
//! streams adopted as external streams, its device memory wrapped, and
//! the driver handles behind Keel's objects. Nothing here knows Keel's
//! `Buffer`.

use std::any::Any;
use std::sync::{Arc, PoisonError};

use cudarc::driver::sys;

use super::device::{self, Ctx, External};
use super::event::CudaEvent;
use super::loader::{call, driver};
use super::memory::CudaBuffer;
use super::stream::RawStream;
use super::{CUDA, TY};
use crate::backend::{BufferHandle, EventHandle};
use crate::core::{Device, DeviceIndex, StreamId, StreamKind, stream_kind};
use crate::error::{Error, Result};

/// Keel's state of CUDA device `device`, checked.
pub(crate) fn state(device: Device) -> Result<&'static Ctx> {
    CUDA.device(device)
}

/// The device whose primary context `raw` is. Keel's `cuda:N` runs on
/// device N's primary context, which the CUDA runtime, cudarc and PyTorch
/// share, so adopting it shares everything; any other context is an
/// error.
///
/// # Safety
/// `raw` is a live context.
pub(crate) unsafe fn device_of_context(raw: sys::CUcontext) -> Result<DeviceIndex> {
    let d = driver().map_err(|reason| Error::backend(TY, reason))?;
    if raw.is_null() {
        return Err(Error::invalid(
            "adopting a CUDA context: expected a context, found a null handle",
        ));
    }
    let mut dev: sys::CUdevice = 0;
    // SAFETY: the caller promises a live context; it is current only
    // between the push and the pop, which restore the thread's own.
    unsafe {
        call("cuCtxPushCurrent", || sys::cuCtxPushCurrent_v2(raw))?;
        let got = call("cuCtxGetDevice", || sys::cuCtxGetDevice(&mut dev));
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        call("cuCtxPopCurrent", || sys::cuCtxPopCurrent_v2(&mut popped))?;
        got?;
    }
    let i = d
        .devices
        .iter()
        .position(|info| info.dev == dev)
        .ok_or_else(|| {
            Error::backend(
                TY,
                format!("the context's device {dev} is not one the driver listed"),
            )
        })?;
    let index = DeviceIndex::try_from(i).unwrap_or(DeviceIndex::MAX);
    let ctx = device::device(index)?;
    if ctx.raw() != raw {
        return Err(Error::unsupported(
            TY,
            format!(
                "adopting a context other than cuda:{index}'s primary context (one made by cuCtxCreate): Keel runs on the primary context, which the CUDA runtime, cudarc's CudaContext::new and PyTorch share"
            ),
        ));
    }
    Ok(index)
}

/// Adopts the program's stream `raw` of `device` as an external stream;
/// returns its id (the handle's value, as c10 encodes external streams).
/// `keep` keeps the stream alive while Keel may use it, where the program
/// handed Keel an owner.
///
/// # Safety
/// `raw` is a live stream that outlives Keel's use of it (every Keel
/// stream handle with the returned id), unless `keep` owns it.
pub(crate) unsafe fn adopt_stream(
    device: Device,
    raw: sys::CUstream,
    keep: Option<Arc<dyn Any + Send + Sync>>,
) -> Result<StreamId> {
    let ctx = state(device)?;
    if raw.is_null() {
        return Err(Error::invalid(format!(
            "adopting a CUDA stream: expected a stream, found the null (legacy default) stream, which is {device}'s default stream (id 0) already"
        )));
    }
    let id = raw as usize as StreamId;
    if !matches!(stream_kind(id), StreamKind::Other) || id < 0 {
        return Err(Error::invalid(format!(
            "adopting a CUDA stream: expected a handle Keel can number as an external stream, found {raw:p}"
        )));
    }
    let mut owner: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the caller promises a live stream; writes one handle.
    call("cuStreamGetCtx", || unsafe {
        sys::cuStreamGetCtx(raw, &mut owner)
    })?;
    if owner != ctx.raw() {
        // SAFETY: `owner` is the live stream's context.
        let theirs = unsafe { device_of_context(owner) }.map_or_else(
            |_| "a context Keel does not run on".to_owned(),
            |i| format!("cuda:{i}'s primary context"),
        );
        return Err(Error::invalid(format!(
            "adopting a CUDA stream on {device}: expected a stream of {device}'s primary context, found one of {theirs}"
        )));
    }
    let mut external = ctx.external.write().unwrap_or_else(PoisonError::into_inner);
    if !external.iter().any(|e| e.raw.0 == raw) {
        external.push(External {
            raw: RawStream(raw),
            _keep: keep,
        });
    }
    Ok(id)
}

/// The program's `len` bytes at `ptr` on `device`, as a buffer handle
/// Keel never frees; `owner`, if any, is dropped with the handle (it
/// keeps the memory alive).
///
/// # Safety
/// `ptr..ptr + len` is device memory of `device`'s context that stays
/// allocated while Keel uses it.
pub(crate) unsafe fn foreign_buffer(
    device: Device,
    ptr: sys::CUdeviceptr,
    len: usize,
    owner: Option<Box<dyn Any + Send + Sync>>,
) -> Result<BufferHandle> {
    let ctx = state(device)?;
    if ptr == 0 && len > 0 {
        return Err(Error::invalid(format!(
            "adopting CUDA memory on {device}: expected a device pointer, found 0 for {len} bytes"
        )));
    }
    Ok(BufferHandle::new(CudaBuffer::foreign(ctx, ptr, len, owner)))
}

/// The device pointer behind a buffer handle of this backend.
pub(crate) fn pointer_of(handle: &BufferHandle) -> Option<sys::CUdeviceptr> {
    handle.downcast_ref::<CudaBuffer>().map(|b| b.ptr)
}

/// The `CUevent` behind a recorded event of this backend.
pub(crate) fn event_of(handle: &EventHandle) -> Option<sys::CUevent> {
    handle
        .downcast_ref::<Option<CudaEvent>>()?
        .as_ref()
        .map(CudaEvent::raw)
}

/// The `CUstream` behind `id` on `device`.
pub(crate) fn stream_of(device: Device, id: StreamId) -> Result<sys::CUstream> {
    Ok(state(device)?.stream(id)?.raw.0)
}

impl Ctx {
    /// The device's primary context and `CUdevice`.
    pub(crate) fn handles(&self) -> (sys::CUcontext, sys::CUdevice) {
        (self.raw(), self.info.dev)
    }
}
