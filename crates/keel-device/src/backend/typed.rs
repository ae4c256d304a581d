//! The typed backend skeleton: a backend implements [`Backend`] with its
//! own types, and [`Typed`] turns it into a [`DeviceGuardImpl`], a
//! [`DeviceRuntime`] and a [`DeviceTiming`] for the registry.
//!
//! Everything every backend would otherwise repeat is written once here:
//!
//! - the checks a backend owes the user: the device type it serves, whether
//!   it can run (`<backend> unavailable: <reason>`), device indices against
//!   its count;
//! - the checks every memory operation and launch would repeat: an empty
//!   write, read or copy is answered here without reaching the backend,
//!   and every binding's offset is checked against the device's storage
//!   buffer offset alignment ([`Kernels::binding_alignment`]);
//! - the thread's current device and current stream per device
//!   ([`tls`]), with a hook ([`Backend::activate`]) for
//!   backends whose driver keeps a current device of its own (CUDA);
//! - the stream pool: priority levels and round-robin ids
//!   ([`PoolCursors`]);
//! - turning the registry's type-erased handles ([`EventHandle`],
//!   [`BufferHandle`]) back into the backend's own types, with a clear
//!   error for a handle of another backend.
//!
//! A backend then contains only what is specific to its native API: how
//! to create a device, a stream, an event and a buffer, and how to enqueue
//! work. It never sees a [`Device`] or [`Stream`] value it has to check.
//!
//! The traits follow a backend folder's files: [`Backend`] (devices and
//! streams) is implemented in its `mod.rs`, [`Events`] and [`Timing`] (the
//! profiler's hooks) in `event.rs`, [`Memory`] in `memory.rs` and
//! [`Kernels`] in `kernel.rs`, so each file
//! holds its whole role and nothing forwards from one file to another.
//!
//! Note \[Typed handles\]: an event's [`EventHandle`] holds an
//! `Option<B::Event>` allocated once, on the event's first record; later
//! records hand the backend the same slot (so a backend can reuse its
//! native event, as CUDA and Vulkan do). A buffer's [`BufferHandle`] holds
//! an `Arc<B::Buffer>`; backends clone the `Arc` into work they enqueue to
//! keep the memory alive until that work has run.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::{
    BufferHandle, BufferView, ClockSample, DeviceGuardImpl, DeviceProperties, DeviceRuntime,
    DeviceTiming, EventHandle, Readback, StaticGuardImpl, check_device_index, pool::PoolCursors,
    tls,
};
use crate::core::{Device, DeviceIndex, DeviceType, EventFlag, Stream, StreamId};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// A backend in terms of its native API; see the [module docs](self).
///
/// Every method receives values the skeleton has already checked: devices
/// of this backend's type with an index in `0..device_count()`, stream ids
/// the backend itself resolved, events and buffers it created.
pub trait Backend: Send + Sync + 'static {
    /// The device type served.
    const TYPE: DeviceType;

    /// One device's state (created on first use, lives for the process).
    type Device: Send + Sync + 'static;
    /// A native stream, as [`stream`](Self::stream) resolves it: cheap to
    /// copy (a reference or a raw handle), carrying what its operations
    /// need (typically its device too).
    type Stream: Copy + Send + Sync + 'static;

    // ----- devices and streams -----

    /// `Ok` when the backend can run (its driver loaded), otherwise why
    /// not. Called on every checked operation: return a cached value.
    fn loaded(&self) -> std::result::Result<(), &str>;

    /// How many devices there are (0 when not [`loaded`](Self::loaded)).
    fn device_count(&self) -> DeviceIndex;

    /// Why a loaded backend found no device.
    fn no_device_reason(&self) -> String {
        format!("no {} device was found", Self::TYPE.backend_name())
    }

    /// Device `index` (in range), created on first use.
    fn device(&self, index: DeviceIndex) -> Result<&'static Self::Device>;

    /// Called when device `index` (in range) becomes the thread's current
    /// device, before the skeleton records it. Default: nothing.
    fn activate(&self, index: DeviceIndex) -> Result<()> {
        let _ = index;
        Ok(())
    }

    /// The device's stream pool cursors (priority levels, round robin).
    fn cursors<'d>(&self, device: &'d Self::Device) -> &'d PoolCursors;

    /// The native stream behind `id` on `device`, created on first use; an
    /// error for an id the device does not have.
    fn stream(&self, device: &'static Self::Device, id: StreamId) -> Result<Self::Stream>;

    /// Whether all work on `stream` has completed. Never blocks.
    fn query_stream(&self, stream: Self::Stream) -> Result<bool>;

    /// Waits for all work on `stream`.
    fn synchronize_stream(&self, stream: Self::Stream) -> Result<()>;

    /// Waits for all work on every stream of `device`.
    fn synchronize_device(&self, device: &'static Self::Device) -> Result<()>;

    /// What device `at` (with state `device`) is and can do.
    fn describe(&self, device: &'static Self::Device, at: Device) -> Result<DeviceProperties>;
}

/// A backend's events (implemented in its `event.rs`).
pub trait Events: Backend {
    /// A recorded native event.
    type Event: Send + Sync + 'static;

    /// Records an event on `stream`: `event` is empty on the event's first
    /// record and holds the previous record's native event afterwards (see
    /// Note \[Typed handles\]). `timing` asks for a timestamp.
    fn record_event(
        &self,
        stream: Self::Stream,
        event: &mut Option<Self::Event>,
        timing: bool,
    ) -> Result<()>;

    /// Makes later work on `stream` wait for `event`.
    fn wait_event(&self, event: &Self::Event, stream: Self::Stream) -> Result<()>;

    /// Whether `event` has completed. Never blocks.
    fn event_done(&self, event: &Self::Event) -> Result<bool>;

    /// Waits for `event`.
    fn wait_event_host(&self, event: &Self::Event) -> Result<()>;

    /// Milliseconds from `start` to `end`, both timed and completed.
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<f64>;

    /// Releases an event. Default: drop it.
    fn release_event(&self, event: Self::Event) {
        drop(event);
    }
}

/// A backend's hooks for the profiler (implemented in its `event.rs`,
/// beside the events they make): the typed side of [`DeviceTiming`]. Every
/// method defaults to "cannot", so a backend with nothing to offer
/// implements it empty.
pub trait Timing: Events {
    /// Starts timing the device work the calling thread enqueues on
    /// `stream` inside its own submissions (see
    /// [`DeviceTiming::begin_timed_work`]). Default: cannot.
    fn begin_timed_work(&self, stream: Self::Stream) -> Result<bool> {
        let _ = stream;
        Ok(false)
    }

    /// The two timed events bracketing the work since
    /// [`begin_timed_work`](Self::begin_timed_work).
    fn end_timed_work(&self, stream: Self::Stream) -> Result<Option<(Self::Event, Self::Event)>> {
        let _ = stream;
        Ok(None)
    }

    /// Whether `stream`'s work runs inline on the submitting thread (see
    /// [`DeviceTiming::runs_inline`]). Default: no.
    fn runs_inline(&self, stream: Self::Stream) -> bool {
        let _ = stream;
        false
    }

    /// Reads the device's timestamp clock between two host instants (see
    /// [`DeviceTiming::sample_clock`]). Default: cannot.
    fn sample_clock(&self, device: &'static Self::Device) -> Result<Option<ClockSample>> {
        let _ = device;
        Ok(None)
    }

    /// A completed timed event's timestamp on the clock
    /// [`sample_clock`](Self::sample_clock) reads, in nanoseconds.
    fn event_time_ns(&self, event: &Self::Event) -> Result<Option<i64>> {
        let _ = event;
        Ok(None)
    }
}

/// A backend's memory, copies and readbacks (implemented in its
/// `memory.rs`).
pub trait Memory: Backend {
    /// A native allocation.
    type Buffer: Send + Sync + 'static;

    /// Whether a kernel holds every allocation it binds whole while it
    /// runs (host memory), so that buffers sharing one allocation would
    /// run their kernels one at a time: the caching allocator then gives
    /// each buffer an allocation of its own. Reported as
    /// [`DeviceProperties::exclusive_allocations`].
    const EXCLUSIVE_ALLOCATIONS: bool = false;

    /// `len` zeroed bytes on device `at` (with state `device`). Running out
    /// of memory is [`Error::OutOfMemory`].
    fn allocate(
        &self,
        device: &'static Self::Device,
        at: Device,
        len: usize,
    ) -> Result<Self::Buffer>;

    /// Enqueues writing `data` (not empty: the skeleton does nothing for
    /// an empty write) at `offset` of `dst`.
    fn enqueue_write(
        &self,
        stream: Self::Stream,
        dst: &Arc<Self::Buffer>,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()>;

    /// Enqueues writing borrowed `data` (copied before returning).
    /// Default: an owned copy through [`enqueue_write`](Self::enqueue_write).
    fn enqueue_write_slice(
        &self,
        stream: Self::Stream,
        dst: &Arc<Self::Buffer>,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        self.enqueue_write(stream, dst, offset, data.to_vec())
    }

    /// Enqueues reading `len` bytes (at least one: the skeleton answers an
    /// empty read itself) at `offset` of `src`.
    fn enqueue_read(
        &self,
        stream: Self::Stream,
        src: &Arc<Self::Buffer>,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>>;

    /// Enqueues a device-to-device copy of `len` bytes (at least one: the
    /// skeleton does nothing for an empty copy). Ranges are in bounds and,
    /// within one buffer, do not overlap (checked by
    /// [`Buffer`](crate::Buffer)).
    fn enqueue_copy(
        &self,
        stream: Self::Stream,
        src: (&Arc<Self::Buffer>, usize),
        dst: (&Arc<Self::Buffer>, usize),
        len: usize,
    ) -> Result<()>;

    /// Whether a copy running on `dst` can read `src`'s memory (same
    /// device, or peer access). Default: the same device only.
    fn peer_copy(&self, src: Device, dst: Device) -> bool {
        src == dst
    }

    /// c10's `recordDataPtrOnStream` for backends whose allocations are
    /// stream-ordered. Default: nothing.
    fn buffer_used_on(&self, buffer: &Arc<Self::Buffer>, stream: Self::Stream) -> Result<()> {
        let _ = (buffer, stream);
        Ok(())
    }
}

/// A kernel binding: `len` bytes at `offset` of a backend allocation (a
/// typed [`BufferView`]). The range is in bounds, and `offset` is a
/// multiple of 512 bytes and of the backend's
/// [`binding_alignment`](Kernels::binding_alignment) (checked by the
/// skeleton).
#[derive(Debug)]
pub struct Binding<T> {
    /// The allocation.
    pub buffer: Arc<T>,
    /// Where the bound range starts, in bytes.
    pub offset: usize,
    /// The bound range's length in bytes (may be 0).
    pub len: usize,
}

impl<T> Clone for Binding<T> {
    fn clone(&self) -> Self {
        Binding {
            buffer: Arc::clone(&self.buffer),
            offset: self.offset,
            len: self.len,
        }
    }
}

/// A backend's kernel launches (implemented in its `kernel.rs`).
pub trait Kernels: Memory {
    /// What every binding's offset must be a multiple of on `stream`'s
    /// device (its minimum storage buffer offset alignment), checked by
    /// the skeleton before [`enqueue_kernel`](Self::enqueue_kernel).
    /// Default: 1, any offset.
    fn binding_alignment(&self, stream: Self::Stream) -> u64 {
        let _ = stream;
        1
    }

    /// Enqueues `kernel` over `grid` workgroups with the ranges `buffers`
    /// bound in order and `params` as its parameter block.
    fn enqueue_kernel(
        &self,
        stream: Self::Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Binding<Self::Buffer>],
        params: &[u8],
    ) -> Result<()>;
}

/// A [`Backend`] as the registry sees it: a [`DeviceGuardImpl`] and a
/// [`DeviceRuntime`]; see the [module docs](self).
#[derive(Clone, Copy, Default)]
pub struct Typed<B>(B);

impl<B> Typed<B> {
    /// Wraps a backend.
    pub const fn new(backend: B) -> Self {
        Typed(backend)
    }

    /// The backend.
    pub const fn backend(&self) -> &B {
        &self.0
    }
}

impl<B: Backend> fmt::Debug for Typed<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Typed({})", B::TYPE.backend_name())
    }
}

#[cold]
fn wrong_type(expected: DeviceType, device: Device) -> Error {
    Error::invalid(format!(
        "the {} backend serves {expected} devices, found {device}",
        expected.backend_name()
    ))
}

#[cold]
fn unavailable(ty: DeviceType, reason: &str) -> Error {
    Error::Unavailable {
        backend: ty.backend_name().to_owned(),
        reason: reason.to_owned(),
    }
}

#[cold]
fn foreign(ty: DeviceType, what: &str) -> Error {
    Error::invalid(format!(
        "expected {what} of the {} backend, found one of another backend",
        ty.backend_name()
    ))
}

impl<B: Backend> Typed<B> {
    /// Checks `device` is one of this backend's, that the backend can run
    /// and that the index is in range.
    #[inline]
    fn check(&self, device: Device) -> Result<()> {
        if device.device_type() != B::TYPE {
            return Err(wrong_type(B::TYPE, device));
        }
        self.0.loaded().map_err(|r| unavailable(B::TYPE, r))?;
        check_device_index(device, self.0.device_count())
    }

    /// The state of `device`, checked (public for a backend's own extras
    /// that take a [`Device`], such as CUDA's peer access).
    pub fn device(&self, device: Device) -> Result<&'static B::Device> {
        self.check(device)?;
        self.0.device(device.index())
    }

    /// The native stream behind `stream`, checked.
    fn stream(&self, stream: &Stream) -> Result<B::Stream> {
        let d = self.device(stream.device())?;
        self.0.stream(d, stream.id())
    }
}

impl<B: Events + Memory> Typed<B> {
    fn event<'e>(&self, event: &'e EventHandle) -> Result<&'e B::Event> {
        event
            .downcast_ref::<Option<B::Event>>()
            .and_then(Option::as_ref)
            .ok_or_else(|| foreign(B::TYPE, "an event"))
    }

    #[inline]
    fn buffer(&self, buffer: &BufferHandle) -> Result<Arc<B::Buffer>> {
        buffer
            .downcast_arc::<B::Buffer>()
            .ok_or_else(|| foreign(B::TYPE, "a buffer"))
    }
}

impl<B: Events + Memory + Default> StaticGuardImpl for Typed<B> {
    fn for_device_type(ty: DeviceType) -> Result<Self> {
        if ty == B::TYPE {
            Ok(Typed(B::default()))
        } else {
            Err(Error::invalid(format!(
                "the {} backend's guard implementation serves {} devices only, found a {ty} device",
                B::TYPE.backend_name(),
                B::TYPE
            )))
        }
    }
}

impl<B: Events + Memory> DeviceGuardImpl for Typed<B> {
    fn device_type(&self) -> DeviceType {
        B::TYPE
    }

    #[inline]
    fn exchange_device(&self, device: Device) -> Result<Device> {
        self.check(device)?;
        self.0.activate(device.index())?;
        tls::exchange_device(device)
    }

    fn get_device(&self) -> Result<Device> {
        self.0.loaded().map_err(|r| unavailable(B::TYPE, r))?;
        tls::current_device(B::TYPE)
    }

    fn set_device(&self, device: Device) -> Result<()> {
        self.exchange_device(device).map(drop)
    }

    #[inline]
    fn unchecked_set_device(&self, device: Device) {
        if device.device_type() == B::TYPE
            && device.index() >= 0
            && device.index() < self.0.device_count()
        {
            // A destructor cannot report errors: the device is recorded as
            // current even if the driver refused to switch. The error is
            // dropped only where there is one, so the common path makes no
            // call to drop a `Result`.
            if let Err(e) = self.0.activate(device.index()) {
                drop(e);
            }
            tls::exchange_device_index(B::TYPE, device.index());
        }
    }

    fn get_stream(&self, device: Device) -> Result<Stream> {
        self.check(device)?;
        Ok(tls::current_stream(device))
    }

    fn exchange_stream(&self, stream: Stream) -> Result<Stream> {
        self.stream(&stream)?;
        Ok(tls::exchange_stream(stream))
    }

    fn device_count(&self) -> DeviceIndex {
        self.0.device_count()
    }

    fn unavailable_reason(&self) -> Option<String> {
        match self.0.loaded() {
            Err(reason) => Some(reason.to_owned()),
            Ok(()) if self.0.device_count() == 0 => Some(self.0.no_device_reason()),
            Ok(()) => None,
        }
    }

    fn get_default_stream(&self, device: Device) -> Result<Stream> {
        self.check(device)?;
        Ok(Stream::default_for(device))
    }

    fn get_stream_from_global_pool(&self, device: Device, high_priority: bool) -> Result<Stream> {
        let d = self.device(device)?;
        self.0.cursors(d).pool_stream(device, high_priority)
    }

    fn get_new_stream(&self, device: Device, priority: i32) -> Result<Stream> {
        let d = self.device(device)?;
        self.0.cursors(d).priority_stream(device, priority)
    }

    fn record(
        &self,
        event: &mut Option<EventHandle>,
        stream: &Stream,
        _device_index: DeviceIndex,
        flag: EventFlag,
    ) -> Result<()> {
        let s = self.stream(stream)?;
        match event {
            Some(handle) => {
                let slot = handle
                    .downcast_mut::<Option<B::Event>>()
                    .ok_or_else(|| foreign(B::TYPE, "an event"))?;
                self.0.record_event(s, slot, flag.timing())
            }
            None => {
                let mut slot = None;
                self.0.record_event(s, &mut slot, flag.timing())?;
                *event = Some(EventHandle::new(slot));
                Ok(())
            }
        }
    }

    fn block(&self, event: &EventHandle, stream: &Stream) -> Result<()> {
        let e = self.event(event)?;
        self.0.wait_event(e, self.stream(stream)?)
    }

    fn query_event(&self, event: &EventHandle) -> Result<bool> {
        self.0.event_done(self.event(event)?)
    }

    fn query_stream(&self, stream: &Stream) -> Result<bool> {
        self.0.query_stream(self.stream(stream)?)
    }

    fn synchronize_stream(&self, stream: &Stream) -> Result<()> {
        self.0.synchronize_stream(self.stream(stream)?)
    }

    fn synchronize_event(&self, event: &EventHandle) -> Result<()> {
        self.0.wait_event_host(self.event(event)?)
    }

    fn synchronize_device(&self, device_index: DeviceIndex) -> Result<()> {
        let d = self.device(Device::new(B::TYPE, device_index)?)?;
        self.0.synchronize_device(d)
    }

    fn elapsed_time(
        &self,
        start: &EventHandle,
        end: &EventHandle,
        _device_index: DeviceIndex,
    ) -> Result<f64> {
        self.0.elapsed_ms(self.event(start)?, self.event(end)?)
    }

    fn destroy_event(&self, mut event: EventHandle, _device_index: DeviceIndex) {
        if let Some(e) = event
            .downcast_mut::<Option<B::Event>>()
            .and_then(Option::take)
        {
            self.0.release_event(e);
        }
    }

    fn record_buffer_on_stream(&self, buffer: &BufferHandle, stream: &Stream) -> Result<()> {
        let b = self.buffer(buffer)?;
        self.0.buffer_used_on(&b, self.stream(stream)?)
    }
}

/// The profiler's hooks, checked like the guard's calls.
impl<B: Timing + Memory> DeviceTiming for Typed<B> {
    fn begin_timed_work(&self, stream: &Stream) -> Result<bool> {
        self.0.begin_timed_work(self.stream(stream)?)
    }

    fn end_timed_work(&self, stream: &Stream) -> Result<Option<(EventHandle, EventHandle)>> {
        let pair = self.0.end_timed_work(self.stream(stream)?)?;
        Ok(pair.map(|(start, end)| (EventHandle::new(Some(start)), EventHandle::new(Some(end)))))
    }

    fn runs_inline(&self, stream: &Stream) -> bool {
        self.stream(stream).is_ok_and(|s| self.0.runs_inline(s))
    }

    fn sample_clock(&self, device_index: DeviceIndex) -> Result<Option<ClockSample>> {
        let d = self.device(Device::new(B::TYPE, device_index)?)?;
        self.0.sample_clock(d)
    }

    fn event_time_ns(&self, event: &EventHandle) -> Result<Option<i64>> {
        self.0.event_time_ns(self.event(event)?)
    }
}

/// What a read of zero bytes returns, on every backend: ready at once.
struct NoBytes;

impl Readback for NoBytes {
    fn is_ready(&self) -> Result<bool> {
        Ok(true)
    }

    fn wait(self: Box<Self>) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
}

#[cold]
fn misaligned(kernel: &Kernel, binding: usize, offset: usize, align: u64) -> Error {
    Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: format!(
            "binding {binding} at offset {offset} is not aligned to the device's storage buffer offset alignment ({align} bytes)"
        ),
    }
}

impl<B: Events + Kernels> DeviceRuntime for Typed<B> {
    fn properties(&self, device: Device) -> Result<DeviceProperties> {
        let d = self.device(device)?;
        let mut p = self.0.describe(d, device)?;
        p.exclusive_allocations = B::EXCLUSIVE_ALLOCATIONS;
        Ok(p)
    }

    fn alloc(&self, device: Device, len: usize) -> Result<BufferHandle> {
        let d = self.device(device)?;
        Ok(BufferHandle::new(self.0.allocate(d, device, len)?))
    }

    fn write(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        let s = self.stream(stream)?;
        let dst = self.buffer(dst)?;
        if data.is_empty() {
            return Ok(());
        }
        self.0.enqueue_write(s, &dst, offset, data)
    }

    fn write_slice(
        &self,
        stream: &Stream,
        dst: &BufferHandle,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        let s = self.stream(stream)?;
        let dst = self.buffer(dst)?;
        if data.is_empty() {
            return Ok(());
        }
        self.0.enqueue_write_slice(s, &dst, offset, data)
    }

    fn read(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        offset: usize,
        len: usize,
    ) -> Result<Box<dyn Readback>> {
        let s = self.stream(stream)?;
        let src = self.buffer(src)?;
        if len == 0 {
            return Ok(Box::new(NoBytes));
        }
        self.0.enqueue_read(s, &src, offset, len)
    }

    fn copy(
        &self,
        stream: &Stream,
        src: &BufferHandle,
        src_offset: usize,
        dst: &BufferHandle,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let s = self.stream(stream)?;
        let (src, dst) = (self.buffer(src)?, self.buffer(dst)?);
        if len == 0 {
            return Ok(());
        }
        self.0
            .enqueue_copy(s, (&src, src_offset), (&dst, dst_offset), len)
    }

    fn launch(
        &self,
        stream: &Stream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[BufferView<'_>],
        params: &[u8],
    ) -> Result<()> {
        let s = self.stream(stream)?;
        // 1 (any offset) for backends without a limit, whose launches then
        // skip the check.
        let align = self.0.binding_alignment(s);
        // A plain loop: every launch runs it, and `collect` into a
        // `Result` goes through two iterator adapters that the compiler
        // inlines in some builds and not in others, so this path's cost
        // would move between builds of unchanged code (docs/BENCHMARKS.md,
        // 2026-11-26, 11:20).
        let mut bufs: SmallVec<[_; 4]> = SmallVec::new();
        for (i, v) in buffers.iter().enumerate() {
            if align > 1 && !(v.offset as u64).is_multiple_of(align) {
                return Err(misaligned(kernel, i, v.offset, align));
            }
            bufs.push(Binding {
                buffer: self.buffer(v.handle)?,
                offset: v.offset,
                len: v.len,
            });
        }
        self.0.enqueue_kernel(s, kernel, grid, &bufs, params)
    }

    fn can_copy_between(&self, src: Device, dst: Device) -> bool {
        self.0.peer_copy(src, dst)
    }
}

/// For backends that cannot bind overlapping ranges of one allocation in
/// a launch: an error naming the first two bindings whose ranges overlap,
/// ending with `needs` ("host kernels need disjoint bindings"). Empty
/// ranges overlap nothing.
pub fn check_disjoint_bindings<T>(
    kernel: &Kernel,
    buffers: &[Binding<T>],
    needs: &str,
) -> Result<()> {
    for (i, a) in buffers.iter().enumerate() {
        let overlaps = |b: &Binding<T>| {
            Arc::ptr_eq(&a.buffer, &b.buffer)
                && a.len > 0
                && b.len > 0
                && a.offset < b.offset + b.len
                && b.offset < a.offset + a.len
        };
        if let Some(j) = buffers[..i].iter().position(overlaps) {
            let b = &buffers[j];
            let message = if a.offset == b.offset && a.len == b.len {
                format!("the same buffer is bound at bindings {j} and {i}; {needs}")
            } else {
                format!(
                    "bindings {j} and {i} overlap (bytes {}..{} and {}..{} of one allocation); {needs}",
                    b.offset,
                    b.offset + b.len,
                    a.offset,
                    a.offset + a.len
                )
            };
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message,
            });
        }
    }
    Ok(())
}
