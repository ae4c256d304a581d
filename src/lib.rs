//! # Keel: one device model, many GPU backends
//!
//! Keel is PyTorch's `c10` device layer in Rust: devices, streams, events
//! and RAII device/stream guards, with c10's exact semantics, over real
//! backends, plus a registry that lets a third party plug in its own
//! device (c10's PrivateUse1), and on top a minimal tensor and an operator
//! dispatcher with kernels on every backend. This crate is the operator
//! layer; the device layer is `keel-device` and the trace model
//! `keel-trace`, both re-exported here, so `keel::Device`,
//! `keel::profiler::Trace` and the rest keep one path. `ARCHITECTURE.md` is
//! the one map of crates, layers and files.
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
//! use keel::{Device, DeviceGuard, Event, Buffer, kernels};
//!
//! # fn main() -> keel::Result<()> {
//! let cpu: Device = "cpu".parse()?;
//! let s1 = keel::get_stream_from_pool(cpu, false)?; // a worker thread
//! let s2 = keel::get_stream_from_pool(cpu, false)?; // another one
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
//! ## Layers
//!
//! `ARCHITECTURE.md`'s table numbers the layers bottom-up across the
//! workspace: 0 the trace model (`keel-trace`), 1 to 6 the device layer
//! (`keel-device`: core values, backend interface, backends, profiler
//! recording, memory, runtime objects), 7 this crate, 8 the app.
//!
//! 7. **Tensors and operators**: a minimal [`Tensor`] (a shared
//!    [`Buffer`], a [`DType`], a shape) and the operator [`dispatch`]er,
//!    which picks a kernel by the device type of its tensors, lets a
//!    kernel decline a call, and falls back to the CPU where a device type
//!    has no kernel (the PrivateUse1 article's fallback); the kernels
//!    ([`compute`], [`random`]); [`save`] and [`load`] in the safetensors
//!    format with per-device-type [`BackendMeta`] hooks; device modules
//!    ([`device_module()`]). Built on the runtime objects; each operator
//!    call is one span in the profiler.
//!
//! ## Numerics

//!
//! [`precision`] (how much an operator may round `f32` work, per backend and
//! operator family, with PyTorch's legacy switches and thread-local scopes)
//! and [`autocast`] (the dtype operators run in under mixed precision, per
//! device type and thread) are plain policy: they launch nothing, and an
//! operator reads them on the calling thread before it launches.
//! [`generator`] holds Philox4x32-10 generators ((seed, offset) states, a
//! default per device, a third-party backend's own through a factory), and
//! [`random`] their kernels, which give bit-identical raw words and `rand`
//! values on every backend and for any launch geometry (Note [Random values
//! do not depend on the launch]). `docs/NUMERICS.md` has the details.
//!
//! ## Testing a backend
//!
//! The `testing` feature adds the `testing` module: the fake backend,
//! host test kernels, and the conformance suite, which states once what
//! every backend must do and runs on any backend, in-tree or third-party,
//! from one line (`keel::conformance_suite!`). Per-backend differences are
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

/// Host implementations that run kernels' checked-in translations to
/// Rust: `name => STATIC` makes `fn name` (a
/// [`CpuKernelFn`](kernel::CpuKernelFn)) that runs `translated::STATIC`
/// of the calling module through [`kernel::run_translated`].
macro_rules! translated_host {
    ($($f:ident => $k:ident),* $(,)?) => {
        $(
            fn $f(
                inv: &mut $crate::kernel::CpuInvocation<'_>,
            ) -> std::result::Result<(), String> {
                $crate::kernel::run_translated(&translated::$k, inv)
            }
        )*
    };
}
pub(crate) use translated_host;

/// Asserts that the checked-in translation `file` (a path in this crate)
/// is what `keel_wgsl::rust` makes of `kernels`' WGSL today;
/// `KEEL_BLESS=1` rewrites it first.
#[cfg(test)]
pub(crate) fn assert_translation_current(file: &str, kernels: &[&kernel::Kernel]) {
    let programs: Vec<_> = kernels
        .iter()
        .map(|k| (*k.program().expect("compiles")).clone())
        .collect();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let bless = std::env::var_os("KEEL_BLESS").is_some();
    let current = wgsl::rust::check_file(&path, &programs, bless).expect("translates");
    assert!(
        current,
        "{file} is stale: `KEEL_BLESS=1 cargo test -p keel --lib the_translation_is_current`"
    );
}

pub mod autocast;
pub mod compute;
pub mod device_module;
pub mod dispatch;
#[cfg(feature = "dlpack")]
pub mod dlpack;
pub mod generator;
pub mod precision;
pub mod random;
mod serialize;
mod tensor;

pub use device_module::{device_module, register_device_module};
#[cfg(feature = "testing")]
pub use keel_device::conformance_suite;
#[cfg(feature = "testing")]
pub use keel_device::testing;
pub use keel_device::{
    Buffer, DeviceGuard, DeviceGuardImpl, DeviceKind, DeviceProperties, DeviceRuntime,
    DeviceTiming, Error, Event, InlineDeviceGuard, InlineMultiStreamGuard,
    InlineOptionalDeviceGuard, InlineOptionalStreamGuard, InlineStreamGuard, Kernel,
    MultiStreamGuard, OptionalDeviceGuard, OptionalStreamGuard, PendingRead, Result,
    StaticGuardImpl, StreamGuard, api, availability, backend, core, current_device, current_stream,
    default_stream, device_count, devices, get_stream_from_pool, get_stream_with_priority, guard,
    interop, is_available, kernel, kernels, launch_blocking, memory, privateuse1_backend_name,
    profiler, properties, register_privateuse1_backend, set_current_stream, set_device,
    set_launch_blocking, synchronize, wgsl,
};
pub use keel_device::{Device, DeviceIndex, DeviceType, EventFlag, Stream, StreamId};
pub use serialize::{BackendMeta, load, load_bytes, register_backend_meta, save};
pub use tensor::{DType, Element, Tensor};
