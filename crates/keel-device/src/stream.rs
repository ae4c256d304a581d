//! A stream's runtime operations: [`Stream::query`],
//! [`Stream::synchronize`], [`Stream::wait`] and [`Stream::launch`].
//!
//! [`Stream`] itself is a core value (`crate::core`): a device and an id,
//! with no behaviour that reaches a backend. What a stream *does* is here,
//! in one place, built on the backend interface and the stream-operation
//! path (`submit`), so that launch blocking and the profiler apply to it as to
//! every other operation.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::backend::{BufferView, registry};
use crate::buffer::{Buffer, same_device, stream_runtime};
use crate::core::Stream;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::kernel::Kernel;
use crate::profiler::SpanKind;
use crate::profiler::record::Detail;
use crate::submit;

impl Stream {
    /// Whether all work enqueued on this stream has completed. Never
    /// blocks. Reports an error a failed operation left on the stream.
    pub fn query(&self) -> Result<bool> {
        registry::available_guard_impl(self.device_type())?.query_stream(self)
    }

    /// Waits until all work enqueued on this stream has completed; returns
    /// the error of a failed operation, if one failed.
    pub fn synchronize(&self) -> Result<()> {
        submit::synchronize_stream(registry::available_guard_impl(self.device_type())?, self)
    }

    /// Makes future work on this stream wait for `event` (c10's
    /// `stream.wait(event)`, which is `event.block(stream)`).
    pub fn wait(&self, event: &Event) -> Result<()> {
        event.block(self)
    }

    /// An event recorded on this stream now (`torch.cuda.Stream.record_event`).
    pub fn record_event(&self) -> Result<Event> {
        let mut e = Event::new(self.device_type());
        e.record(self)?;
        Ok(e)
    }

    /// Makes future work on this stream wait for all work enqueued on
    /// `other` so far (`torch.cuda.Stream.wait_stream`): an event recorded
    /// on `other`, waited for here. Waiting for itself does nothing.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        if other == self {
            return Ok(());
        }
        self.wait(&other.record_event()?)
    }

    /// Enqueues `kernel` over `grid` workgroups with `buffers` bound in
    /// order and `params` as its parameter block. Every buffer must be on
    /// this stream's device.
    pub fn launch(
        &self,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[&Buffer],
        params: &[u8],
    ) -> Result<()> {
        let (rt, stream) = stream_runtime(self)?;
        if buffers.len() != kernel.bindings {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "expected {} buffers, found {}",
                    kernel.bindings,
                    buffers.len()
                ),
            });
        }
        for b in buffers {
            same_device(stream.device(), b.device())?;
        }
        let views: SmallVec<[BufferView<'_>; 4]> = buffers.iter().map(|b| b.view()).collect();
        submit::enqueue(
            &stream,
            SpanKind::Kernel,
            || Cow::Borrowed(kernel.name),
            Detail::Launch {
                grid,
                block: kernel.workgroup_size,
                operator: 0,
            },
            || rt.launch(&stream, kernel, grid, &views, params),
        )
    }
}
