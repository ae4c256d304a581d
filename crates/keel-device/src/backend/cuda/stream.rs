//! CUDA streams: the legacy default stream (id 0) and non-blocking pool
//! streams, created on first use with their level's priority and never
//! destroyed.

use std::fmt;

use cudarc::driver::sys::{self, CUstream_flags};

use super::device::Ctx;
use super::event::RawEvent;
use super::loader::{call, ready};
use crate::error::Result;

/// A CUDA stream handle (null is the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawStream(pub sys::CUstream);
// SAFETY: CUDA streams are driver objects usable from any thread; the
// driver synchronises work submitted to them.
unsafe impl Send for RawStream {}
// SAFETY: as above.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// The legacy default stream.
    pub const LEGACY: RawStream = RawStream(std::ptr::null_mut());

    /// A new non-blocking stream with `priority`; call inside a scope.
    pub fn create(priority: i32) -> Result<RawStream> {
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; a context is current.
        call("cuStreamCreateWithPriority", || unsafe {
            sys::cuStreamCreateWithPriority(
                &mut s,
                CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                priority,
            )
        })?;
        Ok(RawStream(s))
    }

    /// Waits for the stream's work; call inside its context's scope.
    pub fn synchronize(self) -> Result<()> {
        // SAFETY: a live stream of the current context.
        call("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(self.0)
        })
    }

    /// Makes later work on the stream wait for `event` (of any device);
    /// call inside the stream's context's scope.
    pub fn wait(self, event: RawEvent) -> Result<()> {
        // SAFETY: live stream and event (CUDA allows waiting across
        // devices).
        call("cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(self.0, event.0, 0)
        })
    }
}

/// A stream of one device, as the skeleton hands it to the backend.
#[derive(Clone, Copy)]
pub struct CudaStream {
    pub(super) ctx: &'static Ctx,
    pub(super) raw: RawStream,
}

impl fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaStream(cuda:{}, {:?})", self.ctx.index, self.raw.0)
    }
}

impl CudaStream {
    /// Whether all work on the stream has completed. Never blocks.
    pub(super) fn query(self) -> Result<bool> {
        let _scope = self.ctx.scope()?;
        // SAFETY: a live stream of the current context.
        ready("cuStreamQuery", || unsafe {
            sys::cuStreamQuery(self.raw.0)
        })
    }

    /// Waits for all work on the stream.
    pub(super) fn synchronize(self) -> Result<()> {
        let _scope = self.ctx.scope()?;
        self.raw.synchronize()
    }
}
