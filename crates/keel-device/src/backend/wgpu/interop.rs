//! What the public interop API (`crate::interop::wgpu`) needs of this
//! backend: adopting a program's device, handing out the wgpu objects
//! behind Keel's, wrapping a program's buffer, submitting a program's
//! command buffers on a logical stream, and timestamp slots for scopes on
//! a program's own passes. Nothing here knows Keel's `Buffer` or the
//! profiler: the interop layer puts these together.

use super::device;
pub(crate) use super::device::WANTED_FEATURES;
pub(crate) use super::device::WgpuDevice;
use super::event::{Queries, WgpuEvent};
use super::memory::WgpuBuffer;
use super::stream::QueueStream;
use super::{TY, WGPU, Wgpu};
use crate::backend::typed::Backend;
use crate::backend::{BufferHandle, EventHandle, registry};
use crate::core::{Device, DeviceIndex, Stream};
use crate::error::{Error, Result};

/// Adopts the program's `device` (made from `adapter`, submitting to
/// `queue`): its Keel index, the same for the same device.
pub(crate) fn adopt(
    adapter: &wgpu::Adapter,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
) -> Result<DeviceIndex> {
    let index = device::adopt(adapter, device, queue)?;
    registry::device_adopted(TY);
    Ok(index)
}

/// Keel's state of wgpu device `device`, checked.
pub(crate) fn state(device: Device) -> Result<&'static WgpuDevice> {
    WGPU.device(device)
}

impl WgpuDevice {
    /// The adapter, device and queue.
    pub(crate) fn handles(&self) -> (wgpu::Adapter, wgpu::Device, wgpu::Queue) {
        (
            self.adapter_handle().clone(),
            self.device.clone(),
            self.queue.clone(),
        )
    }

    /// The query set Keel's timestamps go to, where the device has
    /// timestamps inside encoders.
    pub(crate) fn query_set(&self) -> Option<&wgpu::QuerySet> {
        self.timestamps.as_ref()
    }

    /// Takes two adjacent timestamp slots (a scope's start and end);
    /// `None` where the device has no timestamps inside encoders.
    pub(crate) fn take_slot_pair(&'static self) -> Result<Option<u32>> {
        if self.timestamps.is_none() {
            return Ok(None);
        }
        self.query_slots.take(&Queries(self), 2).map(Some)
    }

    /// Gives back a pair of slots no submission wrote.
    pub(crate) fn release_slot_pair(&'static self, start: u32) {
        let q = Queries(self);
        self.query_slots.release(&q, start);
        self.query_slots.release(&q, start + 1);
    }

    /// The two timed events of a slot pair written by submission `seq`:
    /// each event owns its slot from now on (destroying it gives the slot
    /// back).
    pub(crate) fn slot_pair_events(
        &'static self,
        start: u32,
        seq: u64,
    ) -> (EventHandle, EventHandle) {
        let event = |slot: u32| {
            self.query_slots.written_movable(slot, seq);
            EventHandle::new(Some(WgpuEvent::at_slot(self, seq, slot)))
        };
        (event(start), event(start + 1))
    }
}

/// A program's `buffer` on `device`, as a handle Keel binds and copies
/// but never destroys, with its length in bytes.
pub(crate) fn foreign_buffer(
    device: Device,
    buffer: wgpu::Buffer,
) -> Result<(BufferHandle, usize)> {
    let d = state(device)?;
    let b = WgpuBuffer::foreign(d, buffer)?;
    let len = usize::try_from(b.size()).map_err(|_| {
        Error::invalid(format!(
            "a wgpu buffer for Keel: expected at most {} bytes, found {}",
            usize::MAX,
            b.size()
        ))
    })?;
    Ok((BufferHandle::new(b), len))
}

/// The wgpu buffer behind a Keel buffer handle of this backend.
pub(crate) fn buffer_of(handle: &BufferHandle) -> Option<wgpu::Buffer> {
    handle.downcast_ref::<WgpuBuffer>().map(|b| b.raw().clone())
}

/// wgpu's index of the submission an event of this backend marks, where
/// the event was recorded by a submission of its own (timed events).
pub(crate) fn event_submission(event: &EventHandle) -> Option<wgpu::SubmissionIndex> {
    event
        .downcast_ref::<Option<WgpuEvent>>()?
        .as_ref()?
        .submission()
        .cloned()
}

/// The logical stream `stream` (checked: a wgpu stream of a device Keel
/// has).
fn queue_stream(stream: &Stream) -> Result<&'static QueueStream> {
    let d = state(stream.device())?;
    Wgpu.stream(d, stream.id())
}

/// Submits a program's command buffers on `stream`, in order with Keel's
/// work on it; returns the submission's sequence number on the device
/// and wgpu's index of it.
pub(crate) fn submit(
    stream: &Stream,
    buffers: Vec<wgpu::CommandBuffer>,
) -> Result<(u64, wgpu::SubmissionIndex)> {
    let at = queue_stream(stream)?.submit_buffers(buffers)?;
    let index = at
        .index()
        .cloned()
        .ok_or_else(|| Error::backend(TY, "a submission returned no index"))?;
    Ok((at.seq(), index))
}
