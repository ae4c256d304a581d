//! The wgpu backend (`wgpu:N`, cargo feature `wgpu`): one Keel device per
//! wgpu adapter, on every native API wgpu was built with.
//!
//! | c10 concept | wgpu |
//! |---|---|
//! | device index | a wgpu adapter; order: native API (Vulkan, Metal, DX12, GL), then kind (discrete, integrated, virtual, CPU, other), then name. `WGPU_BACKEND` (e.g. `vulkan`, `gl`) and `WGPU_ADAPTER_NAME` (a substring) narrow the list; `WGPU_NOOP_BACKEND=1` adds wgpu's noop adapter (completes all work at once without running it: the host's cost alone) |
//! | current device | thread-local index |
//! | device + queue | created on first use, requesting `TIMESTAMP_QUERY`, `TIMESTAMP_QUERY_INSIDE_ENCODERS` and `IMMEDIATES` where offered |
//! | default / pool stream | a *logical stream*: wgpu has one queue per device, so every logical stream submits to it. Logical streams keep their own order and all stream semantics (pool, current stream, guards, waits), but **wgpu streams never run concurrently** |
//! | event record | the sequence number of the stream's last submission; with timing, a submission writing a timestamp |
//! | `stream.wait(event)` | implied by the single queue (an event of another device is waited for on the host) |
//! | query / synchronize | never calls wgpu: an atomic load of the highest submission known complete / a wait for it to grow; one thread per device waits for the submissions in order with `device.poll(Wait { submission_index })` (Note [wgpu completion tracking] in `stream.rs`) |
//! | `elapsed_time` | resolved timestamps x `queue.get_timestamp_period()`; an error where the adapter has no timestamps. Reads are batched: the first read of a completed slot resolves every completed unread slot (one submission, one map) |
//! | profiled operations (`begin_timed_work`) | the operation's own submission writes its span's two timestamps: a launch's compute pass (`timestamp_writes`), otherwise `write_timestamp` in the same `queue.submit`; slots in adjacent pairs (`event.rs`); when all are held, the values of completed ones move out and their slots are reused |
//! | memory | `wgpu::Buffer` (storage, copy source and destination), sized up to a multiple of 4; readback through a mapped buffer |
//! | copies | `copy_buffer_to_buffer` when offsets and size allow it (multiples of 4), otherwise the `copy_bytes` kernel |
//! | adopted device (`crate::interop::wgpu`) | a program's `wgpu::Device` and `Queue`, numbered after the adapters; Keel uses the features the program enabled and sets no uncaptured-error handler on it; a program's buffer is a `WgpuBuffer` Keel never destroys; the program's command buffers submit on a logical stream (`QueueStream::submit_buffers`), and scopes on its passes write slot pairs of the device's query set (`interop.rs`) |
//! | kernel | the same WGSL as Vulkan, one pipeline per (device, kernel); the parameter block as immediate data where the device offers it and the block fits, else a uniform buffer per launch; bind groups cached by their buffer ranges (Note [wgpu parameter blocks] in `kernel.rs`) |
//!
//! On GL, wgpu runs a submission's work before `submit` returns, so
//! streams there are effectively synchronous; queries notice the
//! completion on demand, as on other native APIs.
//!
//! # Note [GL context lock]
//!
//! wgpu's GL backend has one GL context per device, guarded by a mutex
//! that wgpu-hal waits for at most `CONTEXT_LOCK_TIMEOUT_SECS` (6 s with
//! EGL, 1 s with WGL, in wgpu-hal 30's `gles/egl.rs` and `gles/wgl.rs`)
//! before it panics ("Could not lock adapter context. This is most-likely
//! a deadlock."). Some calls hold the context far longer on llvmpipe: a
//! submission runs its commands, and the first dispatch of a pipeline is
//! where llvmpipe compiles its shader with LLVM (the tiled matmul, cold:
//! tens of seconds in a debug build); waiting for a long kernel's fence
//! holds it for seconds; mapping a readback copies it out
//! (docs/BENCHMARKS.md, "wgpu GL context lock"). Any other thread that
//! needs the context meanwhile (to create, map, unmap or free a buffer)
//! would panic.
//!
//! So on GL each device has a `GlContextLock` (`device.rs`), an
//! `RwLock` of Keel's (none on other APIs, so they pay one `Option` test):
//!
//! - **exclusive** around every call that may hold the context long:
//!   pipeline creation (`kernel.rs`; a thread that waited looks in the
//!   cache again, and a pipeline that loses the race to the cache is freed
//!   under the lock), every submission (`SubmissionOrder::submit` in
//!   `stream.rs`, taken before the submission lock), every wait and poll
//!   for completion (the device's poll thread, `SubmissionOrder::reap_gl`)
//!   and readback mapping (`memory::map_read`);
//! - **shared** around every other call that takes the context: creating
//!   a buffer (and writing and unmapping one mapped at creation), mapping
//!   an upload buffer again, and freeing a buffer whose last reference
//!   Keel holds (`WgpuBuffer`'s `Drop` destroys it under the lock; other
//!   buffers go through `GlContextLock::release`).
//!
//! Other Keel threads then wait on Keel's lock, which has no timeout,
//! instead of wgpu-hal's; shared holders still take wgpu-hal's mutex one
//! at a time, but each briefly. Rules: never take the lock while holding
//! it (nothing here nests: wgpu's callbacks, which run inside submissions
//! and polls, never take it), and a wgpu object whose last reference a
//! Keel thread drops outside a submission goes through `release`. wgpu's
//! calls that do not touch the context (encoders, bind groups, layouts,
//! shader modules) take nothing. `tests/wgpu.rs`
//! (`gl_compile_does_not_starve_other_threads`) compiles the tiled matmul
//! cold while other threads launch, read and allocate.
//!
//! No adapter (no driver) gives `device_count(Wgpu) == 0` and `wgpu
//! unavailable: <reason>`. wgpu errors never panic here: an error handler
//! keeps uncaptured errors for the next operation to report, and kernel
//! compilation runs inside an error scope.
//!
//! Files: `device.rs` (adapters, their order and filters, device + queue,
//! properties), `stream.rs` (logical streams; every submission, its
//! sequence number and completion: Note [wgpu completion tracking]),
//! `event.rs` (events, timestamp slots:
//! [`Events`](super::typed::Events)), `memory.rs` (buffers, copies,
//! readbacks: [`Memory`](super::typed::Memory)), `kernel.rs` (pipelines,
//! parameter blocks, bind groups, dispatches: [`Kernels`](super::typed::Kernels)),
//! `interop.rs` (what `crate::interop::wgpu` needs: adoption, handles,
//! the program's buffers, submissions and scope slots).
//! This file implements [`Backend`].

mod device;
mod event;
pub(crate) mod interop;
mod kernel;
mod memory;
mod stream;

pub use self::device::WgpuDevice;
pub use self::event::WgpuEvent;
pub use self::memory::WgpuBuffer;
pub use self::stream::QueueStream;
use super::typed::{Backend, Typed};
use super::{DeviceProperties, pool::PoolCursors};
use crate::core::{Device, DeviceIndex, DeviceType, StreamId};
use crate::error::Result;

const TY: DeviceType = DeviceType::Wgpu;

/// Priority levels of each wgpu device's stream pool.
pub const PRIORITY_LEVELS: usize = 2;

/// The wgpu backend (zero-sized: its devices are process-wide statics).
#[derive(Debug, Clone, Copy, Default)]
pub struct Wgpu;

/// The wgpu backend's guard implementation and runtime.
pub type WgpuGuardImpl = Typed<Wgpu>;

/// The registered wgpu backend.
pub static WGPU: WgpuGuardImpl = Typed::new(Wgpu);

impl Backend for Wgpu {
    const TYPE: DeviceType = TY;
    type Device = WgpuDevice;
    type Stream = &'static QueueStream;

    fn loaded(&self) -> std::result::Result<(), &str> {
        if device::any_adopted() {
            return Ok(());
        }
        device::adapters().map(drop)
    }
    fn device_count(&self) -> DeviceIndex {
        device::count()
    }
    fn no_device_reason(&self) -> String {
        device::adapters().map_or_else(str::to_owned, |a| a.none_reason())
    }
    fn device(&self, index: DeviceIndex) -> Result<&'static WgpuDevice> {
        device::device(index)
    }
    fn cursors<'d>(&self, device: &'d WgpuDevice) -> &'d PoolCursors {
        device.streams.cursors()
    }
    fn stream(&self, device: &'static WgpuDevice, id: StreamId) -> Result<&'static QueueStream> {
        device
            .streams
            .get_or_create(id, |_| Ok(QueueStream::new(device)))
    }
    fn query_stream(&self, stream: &'static QueueStream) -> Result<bool> {
        stream.query()
    }
    fn synchronize_stream(&self, stream: &'static QueueStream) -> Result<()> {
        stream.synchronize()
    }
    fn synchronize_device(&self, device: &'static WgpuDevice) -> Result<()> {
        device
            .streams
            .try_for_each_created(QueueStream::synchronize)
    }

    fn describe(&self, device: &'static WgpuDevice, at: Device) -> Result<DeviceProperties> {
        Ok(device.describe(at))
    }
}
