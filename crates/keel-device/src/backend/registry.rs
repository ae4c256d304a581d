//! The backend registry: one slot per [`DeviceType`].
//!
//! A slot holds a `&'static dyn DeviceGuardImpl` and optionally a
//! `&'static dyn DeviceRuntime` and a `&'static dyn DeviceTiming` (the
//! profiler's hooks). Lookup is one atomic acquire load
//! (`OnceLock::get`), no lock. A slot is filled once per process:
//!
//! - a built-in backend (CPU always; Vulkan, wgpu, CUDA when their cargo
//!   feature is on) fills its slot on the first lookup that finds it empty;
//! - [`register`] (or [`register_timed`]) fills an empty slot at run time;
//!   that is how a third
//!   party plugs a backend into [`DeviceType::PrivateUse1`], and how tests
//!   put the fake backend in a slot. Registering before the first use of a
//!   type wins over the built-in backend of that type.
//!
//! Slots are never emptied or replaced: the references they hand out are
//! `'static`, and guards and events keep them.
//!
//! A lookup of an empty slot fails with `keel is not built with support for
//! <type> devices (<how to get it>)`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use super::{DeviceGuardImpl, DeviceRuntime, DeviceTiming};
use crate::core::DeviceType;
use crate::error::{Error, Result};

#[derive(Clone, Copy)]
struct Entry {
    guard: &'static dyn DeviceGuardImpl,
    runtime: Option<&'static dyn DeviceRuntime>,
    timing: Option<&'static dyn DeviceTiming>,
    /// Set for the CPU backend, which guards through the registry call
    /// directly.
    direct: Option<Direct>,
}

/// The backend whose guard calls a guard through the registry makes
/// without `dyn`, so that they inline
/// ([`VirtualGuardImpl`](super::VirtualGuardImpl)): the CPU's, a few
/// thread-local moves. Every other backend is called through `dyn`.
///
/// Word-sized, so that [`VirtualGuardImpl`](super::VirtualGuardImpl) has
/// no padding: LLVM copies a guard's padding as uninitialised bytes in two
/// overlapping narrow moves, and reading them back stalls store
/// forwarding (it doubled a CPU guard's cost in the default build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Direct {
    Cpu,
}

static SLOTS: [OnceLock<Entry>; DeviceType::COUNT] = [const { OnceLock::new() }; DeviceType::COUNT];

/// The built-in backend for `ty`, if this build has one.
fn builtin(ty: DeviceType) -> Option<Entry> {
    match ty {
        DeviceType::Cpu => Some(Entry {
            guard: &super::cpu::CPU,
            runtime: Some(&super::cpu::CPU),
            timing: Some(&super::cpu::CPU),
            direct: Some(Direct::Cpu),
        }),
        #[cfg(feature = "cuda")]
        DeviceType::Cuda => Some(Entry {
            guard: &super::cuda::CUDA,
            runtime: Some(&super::cuda::CUDA),
            timing: Some(&super::cuda::CUDA),
            direct: None,
        }),
        #[cfg(feature = "vulkan")]
        DeviceType::Vulkan => Some(Entry {
            guard: &super::vulkan::VULKAN,
            runtime: Some(&super::vulkan::VULKAN),
            timing: Some(&super::vulkan::VULKAN),
            direct: None,
        }),
        #[cfg(feature = "wgpu")]
        DeviceType::Wgpu => Some(Entry {
            guard: &super::wgpu::WGPU,
            runtime: Some(&super::wgpu::WGPU),
            timing: Some(&super::wgpu::WGPU),
            direct: None,
        }),
        _ => None,
    }
}

/// `ty`'s slot, filled with the built-in backend on first use. By
/// reference: a copy of the entry through the stack costs a guard a
/// store-forwarding stall (the copy is read back in narrower loads).
#[inline]
fn entry(ty: DeviceType) -> Result<&'static Entry> {
    let slot = &SLOTS[usize::from(ty.code())];
    match slot.get() {
        Some(e) => Ok(e),
        None => entry_slow(ty, slot),
    }
}

#[cold]
fn entry_slow(ty: DeviceType, slot: &'static OnceLock<Entry>) -> Result<&'static Entry> {
    match builtin(ty) {
        Some(b) => Ok(slot.get_or_init(|| b)),
        None => Err(not_built(ty)),
    }
}

fn not_built(ty: DeviceType) -> Error {
    let hint = match ty.cargo_feature() {
        Some(feature) => format!("build keel with the cargo feature `{feature}`"),
        None => "no backend is registered for it: call keel::backend::register(DeviceType::PrivateUse1, ...) first".to_owned(),
    };
    Error::NotBuilt {
        device_type: ty,
        hint,
    }
}

/// Registers a backend in `ty`'s slot, with no profiler hooks: the
/// profiler times its work with events recorded around each operation.
///
/// `guard` must serve `ty` (`guard.device_type() == ty`). Fails if the slot
/// is already filled (by an earlier registration, or by the built-in
/// backend after a lookup), naming what is there.
pub fn register(
    ty: DeviceType,
    guard: &'static dyn DeviceGuardImpl,
    runtime: Option<&'static dyn DeviceRuntime>,
) -> Result<()> {
    fill(ty, guard, runtime, None)
}

/// [`register`], with the profiler's hooks for the backend's devices.
pub fn register_timed(
    ty: DeviceType,
    guard: &'static dyn DeviceGuardImpl,
    runtime: Option<&'static dyn DeviceRuntime>,
    timing: &'static dyn DeviceTiming,
) -> Result<()> {
    fill(ty, guard, runtime, Some(timing))
}

fn fill(
    ty: DeviceType,
    guard: &'static dyn DeviceGuardImpl,
    runtime: Option<&'static dyn DeviceRuntime>,
    timing: Option<&'static dyn DeviceTiming>,
) -> Result<()> {
    if guard.device_type() != ty {
        return Err(Error::invalid(format!(
            "register: the guard implementation serves {} devices, but was given for the {ty} slot",
            guard.device_type()
        )));
    }
    let slot = &SLOTS[usize::from(ty.code())];
    let mut placed = false;
    slot.get_or_init(|| {
        placed = true;
        Entry {
            guard,
            runtime,
            timing,
            direct: None,
        }
    });
    if placed {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "register: a backend is already registered for {ty} devices; a slot is filled once per process (register before the first use of {ty})"
        )))
    }
}

/// Whether `ty`'s slot holds a backend (or a built-in one can fill it).
pub fn is_registered(ty: DeviceType) -> bool {
    entry(ty).is_ok()
}

/// The guard implementation for `ty`. The error says why there is none.
#[inline]
pub fn guard_impl(ty: DeviceType) -> Result<&'static dyn DeviceGuardImpl> {
    match SLOTS[usize::from(ty.code())].get() {
        Some(e) => Ok(e.guard),
        None => entry(ty).map(|e| e.guard),
    }
}

/// The runtime (properties, buffers, copies, kernels) for `ty`.
pub fn runtime(ty: DeviceType) -> Result<&'static dyn DeviceRuntime> {
    let e = entry(ty)?;
    e.runtime.ok_or_else(|| {
        Error::unsupported(ty, "buffers, copies and kernels (it registered no runtime)")
    })
}

/// The profiler's hooks for `ty` (see [`DeviceTiming`]). An error when
/// the slot is empty or its backend registered none.
pub fn timing(ty: DeviceType) -> Result<&'static dyn DeviceTiming> {
    let e = entry(ty)?;
    e.timing.ok_or_else(|| {
        Error::unsupported(ty, "profiler device timing (it registered no DeviceTiming)")
    })
}

/// Per slot: 0 = not asked yet, 1 = the backend can run, 2 = it cannot
/// (the reason is in `UNAVAILABLE`). Backends decide availability once
/// (loading a driver), so guards pay one relaxed load for this check, not a
/// call into the backend.
static AVAILABLE: [AtomicU8; DeviceType::COUNT] = [const { AtomicU8::new(0) }; DeviceType::COUNT];
static UNAVAILABLE: [OnceLock<Option<String>>; DeviceType::COUNT] =
    [const { OnceLock::new() }; DeviceType::COUNT];

/// The guard implementation for `ty`, checked to be usable: a backend that
/// is registered but cannot run reports `<backend> unavailable: <reason>`.
#[inline]
pub fn available_guard_impl(ty: DeviceType) -> Result<&'static dyn DeviceGuardImpl> {
    available_target(ty).map(|(g, _)| g)
}

/// [`available_guard_impl`], and which built-in backend it is, if one.
#[inline]
pub(crate) fn available_target(
    ty: DeviceType,
) -> Result<(&'static dyn DeviceGuardImpl, Option<Direct>)> {
    let e = entry(ty)?;
    if AVAILABLE[usize::from(ty.code())].load(Ordering::Relaxed) == 1 {
        return Ok((e.guard, e.direct));
    }
    check_available(ty, e.guard).map(|g| (g, e.direct))
}

/// Marks `ty`'s backend usable: it has just adopted a device of the
/// program's (so it has one even if it found none of its own).
#[cfg(any(feature = "vulkan", feature = "wgpu"))]
pub(crate) fn device_adopted(ty: DeviceType) {
    AVAILABLE[usize::from(ty.code())].store(1, Ordering::Relaxed);
}

#[cold]
fn check_available(
    ty: DeviceType,
    g: &'static dyn DeviceGuardImpl,
) -> Result<&'static dyn DeviceGuardImpl> {
    let i = usize::from(ty.code());
    match UNAVAILABLE[i].get_or_init(|| g.unavailable_reason()) {
        None => {
            AVAILABLE[i].store(1, Ordering::Relaxed);
            Ok(g)
        }
        // A device adopted since the reason was decided (interop) makes
        // the backend usable after all.
        Some(_) if g.device_count() > 0 => {
            AVAILABLE[i].store(1, Ordering::Relaxed);
            Ok(g)
        }
        Some(reason) => {
            AVAILABLE[i].store(2, Ordering::Relaxed);
            Err(Error::Unavailable {
                backend: ty.backend_name().to_owned(),
                reason: reason.clone(),
            })
        }
    }
}
