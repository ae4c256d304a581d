//! # keel-device: one device model, many GPU backends
//!
//! Keel is PyTorch's `c10` device layer in Rust: devices, streams, events
//! and RAII device/stream guards, with c10's exact semantics, over real
//! backends, plus a registry that lets a third party plug in its own
//! device (c10's PrivateUse1), a caching allocator and a built-in
//! profiler. The `keel` crate adds tensors and operators on top and
//! re-exports all of this; `ARCHITECTURE.md` is the one map of crates,
//! layers and files.
//!
//! ## The model
//!
//! A [`Device`] is a [`DeviceType`] and an index (`cuda:1`, `vulkan:0`,
//! `cpu`); index `-1` means "the current device of that type". Each thread
//! has a current device per type and, per device, a current [`Stream`]:
//! an in-order queue of work, named by a [`StreamId`] (0 is the device's
//! default stream; pool ids encode priority and position, see
//! [Note \[StreamId encoding\]](crate::core::Stream)). Work on one stream runs
//! in order; work on different streams may overlap. An [`Event`] marks a
//! point in a stream: other streams can [`wait`](Stream::wait) for it, the
//! host can [`query`](Event::query) or [`synchronize`](Event::synchronize)
//! on it, and two timed events give [`elapsed_time`](Event::elapsed_time).
//!
//! Guards ([`DeviceGuard`], [`StreamGuard`], [`MultiStreamGuard`] and their
//! optional and inline forms) change the current device or stream for a
//! scope and restore it when dropped, including during a panic.
//!
//! ```
//! use keel_device::{Device, DeviceGuard, Event, Buffer, kernels};
//!
//! # fn main() -> keel_device::Result<()> {
//! let cpu: Device = "cpu".parse()?;
//! let s1 = keel_device::get_stream_from_pool(cpu, false)?; // a worker thread
//! let s2 = keel_device::get_stream_from_pool(cpu, false)?; // another one
//! let a = Buffer::from_slice(&s1, &[1.0f32, 2.0, 3.0])?;
//! let b = Buffer::from_slice(&s1, &[10.0f32, 20.0, 30.0])?;
//! let mut ready = Event::new(cpu.device_type());
//! ready.record(&s1)?;
//! s2.wait(&ready)?; // s2 runs after s1's uploads, without blocking the host
//! let c = Buffer::new(cpu, 12)?;
//! let k = kernels::VECTOR_ADD;
//! s2.launch(&k, k.grid_for(3), &[&a, &b, &c], &3u32.to_le_bytes())?;
//! assert_eq!(c.read_as::<f32>(&s2)?, [11.0, 22.0, 33.0]);
//! # let _g = DeviceGuard::new(cpu)?;
//! # Ok(()) }
//! ```
//!
//! ## Layers (each calls only the ones below it)
//!
//! Numbered as in `ARCHITECTURE.md`'s table, which starts at layer 0 (the
//! trace model, crate `keel-trace`) and ends with the operators (crate
//! `keel`) and the app.
//!

//!
//! 1. **Core values** ([`core`]): device types, devices, stream ids,
//!    streams as values, event flags. Checked constructors, no behaviour
//!    that reaches a backend, no `unsafe`.
//! 2. **Backend interface** ([`backend`]): [`DeviceGuardImpl`] is c10's
//!    `DeviceGuardImplInterface` (current device and stream, stream pool,
//!    events); [`DeviceRuntime`] is what c10 leaves to ATen (properties,
//!    buffers, copies, kernels); [`DeviceTiming`], optional, is what the
//!    profiler asks beyond events (c10's `ProfilerStubs`). The
//!    [registry](backend::registry) holds one `&'static` implementation of
//!    each per device type; lookup is one atomic load.
//! 3. **Backends** (`backend::<name>`): the CPU backend is always built;
//!    GPU backends sit behind cargo features of their own name. Each
//!    backend's module doc has a table of how c10's concepts map onto its
//!    native API. Every backend has the same skeleton: it implements
//!    [`backend::typed::Backend`] with its own device, stream, event and
//!    buffer types, in the same files (`mod.rs`, `device.rs`, `stream.rs`,
//!    `event.rs`, `memory.rs`, `kernel.rs`, and `loader.rs` where a library
//!    is loaded), and [`backend::typed::Typed`] turns it into the two trait
//!    objects, doing once the checks, the thread's current device and
//!    streams ([`backend::tls`]), the stream pool ([`backend::pool`], with
//!    [`backend::slots`] for what is created on first use) and
//!    the handle types. Backends whose events write timestamp queries
//!    share one slot pool ([`backend::timestamps`]). The host-thread
//!    building blocks are the CPU backend's ([`backend::cpu`]), public for
//!    other host backends.
//! 4. **Profiler** ([`profiler`]): recording hooks, device clocks through
//!    the backend interface ([`DeviceTiming`]), trace assembly and the live
//!    server; the trace model and its formats come from `keel-trace`
//!    (layer 0) and are re-exported there. It uses only the core values,
//!    the backend interface and [`Error`], never the runtime objects above
//!    it.
//! 5. **Memory** ([`memory`]): a caching allocator per device between the
//!    backend interface and [`Buffer`] (PyTorch's `CUDACachingAllocator`:
//!    a buffer is a block of a backend allocation, reused stream-ordered,
//!    with `record_stream`), and the `torch.cuda.memory` functions.
//! 6. **Runtime objects** built once on the interface, for every backend:
//!    guards ([`guard`]), [`Event`], [`Buffer`], a [`Stream`]'s runtime
//!    methods (`stream.rs`: query, synchronize, wait, launch,
//!    `wait_stream`, `record_event`), kernels
//!    ([`Kernel`]), the `torch.cuda`-style free functions, and the
//!    stream-operation path (`submit`), where `KEEL_LAUNCH_BLOCKING` and the
//!    profiler's hooks apply to every backend at once.
//!
//! No two files use each other, directly or through others (`cargo xtask
//! layers` checks it; `ARCHITECTURE.md` says which file may use which).
//!
//! ## Testing a backend
//!
//! The `testing` feature adds the `testing` module: the fake backend,
//! host test kernels, and the conformance suite, which states once what
//! every backend must do and runs on any backend, in-tree or third-party,
//! from one line (`keel_device::conformance_suite!`). Per-backend differences are
//! declared in the suite's `Config`, never in copies of its tests.
//!
//! ## What is checked where
//!
//! Public entry points check everything a user can get wrong (device
//! strings, indices, device types of streams and events, buffer ranges,
//! devices of buffers) and return an [`Error`] whose message says what was
//! expected and what was found; c10's wording is kept where c10 has one.
//! Backends receive only well-formed requests on concrete devices. Panics
//! are reserved for bugs in Keel itself; a panic inside a user's host
//! kernel is caught and reported as that stream's error.
//!
//! ## What differs from c10 (on purpose)
//!
//! - Device indices are always checked (c10 checks only in debug builds);
//!   indices above 511 are an error.
//! - The CPU has real asynchronous pool streams and events.
//! - `Stream::hash_u64` masks the index, so `-1` cannot clobber the type.
//! - [`MultiStreamGuard`] restores in reverse order.
//! - Registry slots are filled once (first registration wins) so the
//!   references handed out stay valid without reference counting.
//!
//! ## Unsafe code
//!
//! The core, the registry, the guards and the CPU backend contain no
//! `unsafe`. Backends that call C APIs keep `unsafe` at that edge, each
//! block with a `// SAFETY:` comment.

pub mod api;
pub mod backend;
mod buffer;
pub mod core;
mod error;
mod event;
pub mod guard;
pub mod interop;
pub mod kernel;
pub mod memory;
pub mod profiler;
#[cfg(feature = "wgpu")]
mod quiet;
mod stream;
mod submit;

#[cfg(feature = "testing")]
pub mod testing;

pub use api::{
    availability, current_device, current_stream, default_stream, device_count, devices,
    get_stream_from_pool, get_stream_with_priority, is_available, properties, set_current_stream,
    set_device, synchronize,
};
pub use backend::{
    DeviceGuardImpl, DeviceKind, DeviceProperties, DeviceRuntime, DeviceTiming, StaticGuardImpl,
};
pub use buffer::{Buffer, PendingRead};
pub use core::{
    Device, DeviceIndex, DeviceType, EventFlag, Stream, StreamId, privateuse1_backend_name,
    register_privateuse1_backend,
};
pub use error::{Error, Result};
pub use event::Event;
pub use guard::{
    DeviceGuard, InlineDeviceGuard, InlineMultiStreamGuard, InlineOptionalDeviceGuard,
    InlineOptionalStreamGuard, InlineStreamGuard, MultiStreamGuard, OptionalDeviceGuard,
    OptionalStreamGuard, StreamGuard,
};
/// The WGSL compiler behind CUDA's and host backends' kernels
/// (`keel_wgsl`): lowering, the PTX printer, the host end.
pub use keel_wgsl as wgsl;
pub use kernel::{Kernel, kernels};
pub use submit::{launch_blocking, set_launch_blocking};
