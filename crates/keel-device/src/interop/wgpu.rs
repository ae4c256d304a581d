//! A program's wgpu objects in Keel, Keel's wgpu objects in the program,
//! and scopes on the program's own passes in Keel's profiler.
//!
//! ```no_run
//! # fn main() -> keel_device::Result<()> {
//! # let (adapter, device, queue): (wgpu::Adapter, wgpu::Device, wgpu::Queue) = todo!();
//! use keel_device::interop::wgpu as interop;
//! // The program made its device with what it can of `interop::FEATURES`.
//! let keel_device = interop::adopt(&adapter, &device, &queue)?;
//! let stream = keel_device::default_stream(keel_device)?;
//! let session = keel_device::profiler::start()?;
//! let mut scopes = interop::Scopes::new(&stream)?;
//! let mut encoder = device.create_command_encoder(&Default::default());
//! scopes.begin("frame", &mut encoder);
//! {
//!     let _pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
//!         label: Some("blur"),
//!         timestamp_writes: scopes.compute_pass("blur"),
//!     });
//!     // ... the program's own pipeline and dispatches ...
//! }
//! scopes.end(&mut encoder)?;
//! // Submitted on Keel's stream: in order with Keel's work there, and
//! // the scopes become device spans on the stream's lane.
//! scopes.submit([encoder.finish()])?;
//! let trace = session.stop();
//! # Ok(()) }
//! ```
//!
//! # Ownership
//! [`adopt`] keeps clones of the program's `wgpu::Adapter`, `Device` and
//! `Queue` (wgpu's objects are shared references) for the rest of the
//! process; the program keeps using its own. Keel sets no uncaptured-error
//! handler on an adopted device: an error in Keel's calls there goes to
//! the program's handler (wgpu's default one panics), so Keel checks
//! arguments before it calls wgpu, as it does on its own devices.
//! [`adopt_buffer`] keeps a clone of the program's `wgpu::Buffer` and
//! never destroys it; [`buffer`] and [`handles`] give out clones of
//! Keel's, which stay usable while the program holds them, but whose
//! memory a Keel [`Buffer`] gives back to its caching allocator when it
//! drops. A buffer destroyed by the program while Keel still uses it is
//! the program's error (wgpu reports it as a validation error).

use std::borrow::Cow;

use crate::backend::wgpu::interop as backend;
use crate::backend::wgpu::interop::WgpuDevice;
use crate::core::{Device, DeviceType, Stream};
use crate::error::{Error, Result};
use crate::profiler::SpanKind;
use crate::profiler::record::{self, Detail};
use crate::{Buffer, Event, submit};

/// The wgpu features Keel uses where a device has them: timestamps
/// (inside encoders too: timed events, the profiler's device spans,
/// [`Scopes`]), subgroup operations, native f16, immediate data and
/// passthrough shaders (strict floating point on Vulkan adapters:
/// [`Kernel::strict_float`](crate::Kernel::strict_float)). A program
/// that hands Keel its device enables what its adapter offers of these
/// (`adapter.features() & FEATURES`); Keel works without any of them,
/// with what each missing feature costs (untimed events, kernels that use
/// the feature unavailable, parameter blocks in uniform buffers, strict
/// floating point not promised).
pub const FEATURES: wgpu::Features = crate::backend::wgpu::interop::WANTED_FEATURES;

/// Adopts the program's `device`, made from `adapter`, whose queue is
/// `queue`: Keel's work on the returned `wgpu:N` device runs on them, in
/// the same process and memory as the program's. Keep the returned
/// device: each call adopts anew (wgpu cannot tell whether two devices
/// of different instances are one), and a device adopted twice is two
/// Keel devices, with their own streams and caches, on one wgpu device.
///
/// Errors: when Keel's per-backend limit of adopted devices is reached,
/// or the device cannot be set up (its poll thread cannot start).
pub fn adopt(
    adapter: &wgpu::Adapter,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
) -> Result<Device> {
    Device::new(DeviceType::Wgpu, backend::adopt(adapter, device, queue)?)
}

/// The wgpu objects behind a Keel `wgpu:N` device.
#[derive(Debug, Clone)]
pub struct Handles {
    /// The adapter the device was made from.
    pub adapter: wgpu::Adapter,
    /// The device.
    pub device: wgpu::Device,
    /// Its queue, which every logical stream of the device submits to.
    pub queue: wgpu::Queue,
}

/// The adapter, device and queue behind `device` (Keel's own, or one it
/// adopted), to record the program's own work beside Keel's.
pub fn handles(device: Device) -> Result<Handles> {
    let (adapter, device, queue) = backend::state(device)?.handles();
    Ok(Handles {
        adapter,
        device,
        queue,
    })
}

/// The queue a Keel stream of a wgpu device submits to (wgpu has one
/// queue per device; Keel's streams are logical streams over it).
pub fn queue(stream: &Stream) -> Result<wgpu::Queue> {
    Ok(handles(stream.device())?.queue)
}

/// The byte range of a wgpu buffer that a Keel [`Buffer`] is: Keel's
/// buffers are blocks of its caching allocator's larger wgpu buffers, so
/// bind `offset..offset + size` of `buffer`.
#[derive(Debug, Clone)]
pub struct BufferRange {
    /// The wgpu buffer.
    pub buffer: wgpu::Buffer,
    /// Where the Keel buffer starts in it, in bytes (a multiple of 256,
    /// wgpu's storage offset alignment).
    pub offset: u64,
    /// The Keel buffer's length in bytes.
    pub size: u64,
}

impl BufferRange {
    /// The range as a binding resource for the program's bind groups
    /// (`None` for an empty Keel buffer: wgpu binds no empty range).
    pub fn binding(&self) -> Option<wgpu::BindingResource<'_>> {
        Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: Some(wgpu::BufferSize::new(self.size)?),
        }))
    }
}

/// The wgpu buffer range behind `buffer`, a Keel buffer on a wgpu device.
pub fn buffer(buffer: &Buffer) -> Result<BufferRange> {
    let raw = backend::buffer_of(buffer.handle()).ok_or_else(|| {
        Error::invalid(format!(
            "a wgpu buffer: expected a buffer on a wgpu device, found one on {}",
            buffer.device()
        ))
    })?;
    Ok(BufferRange {
        buffer: raw,
        offset: buffer.offset() as u64,
        size: buffer.len() as u64,
    })
}

/// The program's `buffer` on `device` as a Keel [`Buffer`] of its whole
/// size, with no copy: Keel's copies, reads and launches use it like its
/// own, and dropping the Keel buffer never destroys it. It needs the
/// usages Keel's own buffers have (`STORAGE | COPY_SRC | COPY_DST`); a
/// buffer without them is an error naming what it has.
pub fn adopt_buffer(device: Device, buffer: wgpu::Buffer) -> Result<Buffer> {
    let (handle, len) = backend::foreign_buffer(device, buffer)?;
    Buffer::from_foreign_handle(device, handle, len)
}

/// wgpu's index of the submission a recorded timed [`Event`] of a wgpu
/// device marks (`device.poll(PollType::Wait { submission_index, .. })`
/// waits for it). `None` for an event not recorded yet or recorded
/// without timing (those mark a point of the queue, not a submission of
/// their own).
pub fn event_submission(event: &Event) -> Result<Option<wgpu::SubmissionIndex>> {
    if event.device_type() != DeviceType::Wgpu {
        return Err(Error::invalid(format!(
            "a wgpu submission: expected an event of a wgpu device, found one of {}",
            event.device_type()
        )));
    }
    Ok(event.handle().and_then(backend::event_submission))
}

/// Submits the program's command buffers on `stream` (a Keel stream of a
/// wgpu device): after the work Keel enqueued on it before, and before
/// what it enqueues after, so Keel's events, waits and `synchronize` order
/// the program's work like Keel's own. With a profiler session, the
/// submission is a host span and its work a device span on the stream's
/// lane (timestamps written in the same `queue.submit`). Returns wgpu's
/// index of the submission.
pub fn submit(
    stream: &Stream,
    buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
) -> Result<wgpu::SubmissionIndex> {
    submit_on(stream, buffers.into_iter().collect()).map(|(_, index)| index)
}

fn submit_on(
    stream: &Stream,
    buffers: Vec<wgpu::CommandBuffer>,
) -> Result<(u64, wgpu::SubmissionIndex)> {
    if stream.device_type() != DeviceType::Wgpu {
        return Err(Error::invalid(format!(
            "submitting wgpu command buffers: expected a stream of a wgpu device, found one of {}",
            stream.device()
        )));
    }
    submit::enqueue(
        stream,
        SpanKind::Kernel,
        || Cow::Borrowed("queue submit"),
        Detail::None,
        || backend::submit(stream, buffers),
    )
}

/// Scopes on the program's own wgpu work, timed on the GPU and recorded
/// by the running profiler session as device spans (user annotations) on
/// a Keel stream's lane, calibrated to the host clock like Keel's own,
/// nested as the scopes are: around commands in an encoder
/// ([`begin`](Self::begin)/[`end`](Self::end), which write timestamps
/// into the encoder) or around a whole pass ([`compute_pass`] and
/// [`render_pass`] give the pass's `timestamp_writes`).
///
/// The scopes become spans when the command buffers are submitted through
/// [`submit`](Self::submit); their timestamps are read with Keel's own,
/// in batches, so scopes add no submission. With no session recording
/// when the `Scopes` is made, or on a device without timestamps inside
/// encoders, every call is free and records nothing. A `Scopes` dropped
/// without submitting gives its timestamp slots back: submitting its
/// command buffers elsewhere afterwards would write slots that other
/// events then own (the program's error; their times would be wrong).
///
/// [`compute_pass`]: Self::compute_pass
/// [`render_pass`]: Self::render_pass
#[derive(Debug)]
pub struct Scopes {
    stream: Stream,
    /// The device, where scopes are recorded (a session runs and the
    /// device has timestamps inside encoders).
    recording: Option<&'static WgpuDevice>,
    /// Scopes begun in an encoder and not ended: name, first slot.
    open: Vec<(Cow<'static, str>, u32)>,
    /// Scopes written: name, first slot of the pair (start, end).
    done: Vec<(Cow<'static, str>, u32)>,
}

impl Scopes {
    /// Scopes on work that will be submitted on `stream`, a Keel stream of
    /// a wgpu device.
    pub fn new(stream: &Stream) -> Result<Scopes> {
        if stream.device_type() != DeviceType::Wgpu {
            return Err(Error::invalid(format!(
                "scopes on wgpu work: expected a stream of a wgpu device, found one of {}",
                stream.device()
            )));
        }
        let device = backend::state(stream.device())?;
        let recording = (record::enabled() && device.query_set().is_some()).then_some(device);
        Ok(Scopes {
            stream: *stream,
            recording,
            open: Vec::new(),
            done: Vec::new(),
        })
    }

    /// Whether the scopes are timed (a session records and the device has
    /// timestamps inside encoders).
    pub fn recording(&self) -> bool {
        self.recording.is_some()
    }

    /// A pair of slots for a new scope, where recording.
    fn slots(&self) -> Result<Option<(&'static wgpu::QuerySet, u32)>> {
        let Some(d) = self.recording else {
            return Ok(None);
        };
        let (Some(qs), Some(start)) = (d.query_set(), d.take_slot_pair()?) else {
            return Ok(None);
        };
        Ok(Some((qs, start)))
    }

    /// Begins a scope named `name` at this point of `encoder`'s commands
    /// (ended by the next [`end`](Self::end) not matched yet).
    pub fn begin(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<()> {
        if let Some((qs, start)) = self.slots()? {
            encoder.write_timestamp(qs, start);
            self.open.push((name.into(), start));
        }
        Ok(())
    }

    /// Ends the innermost open scope at this point of `encoder`'s
    /// commands; an error when none is open.
    pub fn end(&mut self, encoder: &mut wgpu::CommandEncoder) -> Result<()> {
        let Some(d) = self.recording else {
            return Ok(());
        };
        let (name, start) = self.open.pop().ok_or_else(|| {
            Error::invalid("ending a wgpu scope: expected one begun and not ended, found none")
        })?;
        if let Some(qs) = d.query_set() {
            encoder.write_timestamp(qs, start + 1);
        }
        self.done.push((name, start));
        Ok(())
    }

    /// The `timestamp_writes` of a compute pass timed as a scope named
    /// `name` (`None` when not recording, which a pass takes as "no
    /// timestamps").
    pub fn compute_pass(
        &mut self,
        name: impl Into<Cow<'static, str>>,
    ) -> Option<wgpu::ComputePassTimestampWrites<'static>> {
        let (qs, start) = self.pass(name)?;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: qs,
            beginning_of_pass_write_index: Some(start),
            end_of_pass_write_index: Some(start + 1),
        })
    }

    /// The `timestamp_writes` of a render pass timed as a scope named
    /// `name` (`None` when not recording).
    pub fn render_pass(
        &mut self,
        name: impl Into<Cow<'static, str>>,
    ) -> Option<wgpu::RenderPassTimestampWrites<'static>> {
        let (qs, start) = self.pass(name)?;
        Some(wgpu::RenderPassTimestampWrites {
            query_set: qs,
            beginning_of_pass_write_index: Some(start),
            end_of_pass_write_index: Some(start + 1),
        })
    }

    /// A slot pair for a pass scope. Out of slots (every one held by
    /// work that never completes) the pass is simply not timed: its
    /// descriptor has no room for an error.
    fn pass(
        &mut self,
        name: impl Into<Cow<'static, str>>,
    ) -> Option<(&'static wgpu::QuerySet, u32)> {
        let (qs, start) = self.slots().ok()??;
        self.done.push((name.into(), start));
        Some((qs, start))
    }

    /// Submits `buffers` (recorded with these scopes) on the stream, as
    /// [`submit`](fn@submit) does, and hands the scopes to the session.
    /// An error, before anything is submitted, when a scope begun is not
    /// ended.
    pub fn submit(
        mut self,
        buffers: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> Result<wgpu::SubmissionIndex> {
        if let Some((name, _)) = self.open.last() {
            return Err(Error::invalid(format!(
                "submitting wgpu scopes: expected every scope ended, found {name:?} open"
            )));
        }
        let (seq, index) = submit_on(&self.stream, buffers.into_iter().collect())?;
        if let Some(d) = self.recording {
            let spans = std::mem::take(&mut self.done)
                .into_iter()
                .map(|(name, start)| {
                    let (a, b) = d.slot_pair_events(start, seq);
                    (name, a, b)
                })
                .collect();
            record::foreign_device_spans(&self.stream, spans);
        }
        Ok(index)
    }
}

impl Drop for Scopes {
    /// Gives back the slots of scopes never submitted.
    fn drop(&mut self) {
        if let Some(d) = self.recording {
            for (_, start) in self.open.drain(..).chain(self.done.drain(..)) {
                d.release_slot_pair(start);
            }
        }
    }
}
