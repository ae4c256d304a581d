//! The CUDA backend (`cuda:N`, cargo feature `cuda`): cudarc loads libcuda
//! at run time (no CUDA toolkit is needed to build), kernels are PTX,
//! generated from their WGSL by `keel-wgsl` or a kernel's declared
//! override, that the driver JIT-compiles.
//!
//! | c10 concept | CUDA |
//! |---|---|
//! | device index | CUDA ordinal (`cuDeviceGet`) |
//! | current device | the ordinal's primary context made current on the thread (`cuCtxSetCurrent`, the skeleton's [`activate`](crate::backend::typed::Backend::activate) hook), and the index in [`tls`](crate::backend::tls) |
//! | device state | the primary context (`cuDevicePrimaryCtxRetain`), retained on the first use of an index (any operation on it, properties included) and kept for the process |
//! | context use | backend calls make the device's primary context current for the call and restore the thread's previous one |
//! | default stream | the legacy (null) stream, id 0 |
//! | pool stream | 32 non-blocking streams (`CU_STREAM_NON_BLOCKING`) per priority level per device, created lazily, never destroyed, handed out round-robin; c10's id encoding |
//! | priority levels | from `cuCtxGetStreamPriorityRange`: up to 4, at least 2; level p has priority -p (clamped to the range) |
//! | event record | `cuEventRecord`; events are created with `CU_EVENT_DISABLE_TIMING` unless timing is asked for, and come from a pool per (device, flag) that releasing an event refills |
//! | `stream.wait(event)` | `cuStreamWaitEvent` (also across devices) |
//! | query / synchronize | `cuEventQuery`, `cuStreamQuery` / `cuEventSynchronize`, `cuStreamSynchronize`, `cuCtxSynchronize` |
//! | `elapsed_time` | `cuEventElapsedTime` |
//! | memory | stream-ordered `cuMemAllocAsync`/`cuMemFreeAsync` where the device has memory pools, `cuMemAlloc`/`cuMemFree` otherwise; freed only after the work of every stream that used it |
//! | copies | pinned staging (host to device), a pinned readback waited on through an event (device to host), `cuMemcpyDtoDAsync`, `cuMemcpyPeerAsync` between peers |
//! | kernel | PTX, `cuModuleLoadDataEx` once per (device, kernel), `cuLaunchKernel`; see [the parameter convention](kernel) |
//! | peer access | [`can_device_access_peer`], [`enable_peer_access`]; [`Buffer::to`](crate::Buffer::to) copies directly between peers |
//!
//! Availability: libcuda is probed before anything calls it. When it is
//! missing, `device_count(Cuda)` is 0 and every operation returns "CUDA
//! unavailable: the CUDA driver library (libcuda) was not found". A driver
//! error at start-up (`cuInit` failing, no device) is reported the same
//! way with the driver's reason. Nothing panics: every driver call also
//! runs under `catch_unwind`.
//!
//! Verified on an NVIDIA H200 (driver 580, CUDA 13.0): the CUDA suite, the
//! conformance suite and every operator, random and numerics test pass
//! there (docs/BENCHMARKS.md, 2026-11-26). CI has no GPU, so there this
//! backend runs its unavailable path and `ptxas` checks every PTX file.

mod device;
mod event;
pub(crate) mod interop;
pub mod kernel;
mod loader;
mod memory;
mod stream;

use self::device::Ctx;
pub use self::loader::NO_LIBRARY;
use self::stream::CudaStream;
use super::typed::{Backend, Typed};
use super::{DeviceProperties, pool::PoolCursors};
use crate::core::{Device, DeviceIndex, DeviceType, StreamId};
use crate::error::{Error, Result};

const TY: DeviceType = DeviceType::Cuda;

/// The CUDA backend (zero-sized: the driver and the devices are
/// process-wide).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cuda;

/// The CUDA backend's guard implementation and runtime.
pub type CudaGuardImpl = Typed<Cuda>;

/// The registered CUDA backend.
pub static CUDA: CudaGuardImpl = Typed::new(Cuda);

impl Backend for Cuda {
    const TYPE: DeviceType = TY;
    type Device = Ctx;
    type Stream = CudaStream;

    fn loaded(&self) -> std::result::Result<(), &str> {
        loader::driver().map(drop)
    }
    fn device_count(&self) -> DeviceIndex {
        loader::driver().map_or(0, |d| DeviceIndex::try_from(d.devices.len()).unwrap_or(0))
    }
    fn device(&self, index: DeviceIndex) -> Result<&'static Ctx> {
        device::device(index)
    }
    fn activate(&self, index: DeviceIndex) -> Result<()> {
        device::device(index)?.make_current()
    }
    fn cursors<'d>(&self, device: &'d Ctx) -> &'d PoolCursors {
        device.streams().cursors()
    }
    fn stream(&self, device: &'static Ctx, id: StreamId) -> Result<CudaStream> {
        device.stream(id)
    }
    fn query_stream(&self, stream: CudaStream) -> Result<bool> {
        stream.query()
    }
    fn synchronize_stream(&self, stream: CudaStream) -> Result<()> {
        stream.synchronize()
    }
    fn synchronize_device(&self, device: &'static Ctx) -> Result<()> {
        device.synchronize()
    }

    fn describe(&self, device: &'static Ctx, at: Device) -> Result<DeviceProperties> {
        device::describe(device.info, at)
    }
}

/// Capability checks on a compute capability `major.minor`: the `extra`
/// entries of [`DeviceProperties`] ("tensor cores" from 7.0 (Volta),
/// "FP8" from 9.0 (Hopper)).
pub fn capabilities(major: i32, minor: i32) -> Vec<(String, String)> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    vec![
        ("compute capability".to_owned(), format!("{major}.{minor}")),
        ("tensor cores".to_owned(), yes(major >= 7)),
        ("FP8".to_owned(), yes(major >= 9)),
    ]
}

/// Whether device `a` can access device `b`'s memory directly
/// (`cuDeviceCanAccessPeer`; false for the same device, as in CUDA and
/// `torch.cuda.can_device_access_peer`).
pub fn can_device_access_peer(a: Device, b: Device) -> Result<bool> {
    let (ca, cb) = (CUDA.device(a)?, CUDA.device(b)?);
    ca.can_access(cb)
}

/// Lets device `a` access device `b`'s memory (`cuCtxEnablePeerAccess`
/// from `a`'s primary context). Enabling it twice is fine; devices that
/// cannot be peers are an error.
pub fn enable_peer_access(a: Device, b: Device) -> Result<()> {
    let (ca, cb) = (CUDA.device(a)?, CUDA.device(b)?);
    if !ca.can_access(cb)? {
        return Err(Error::invalid(format!(
            "expected two CUDA devices that can be peers, found {a} and {b}, which cannot"
        )));
    }
    ca.enable_peer(cb)
}

#[cfg(test)]
mod tests {
    use super::capabilities;

    fn get<'a>(v: &'a [(String, String)], k: &str) -> &'a str {
        &v.iter().find(|(n, _)| n == k).expect("present").1
    }

    #[test]
    fn capability_checks() {
        let ampere = capabilities(8, 6);
        assert_eq!(get(&ampere, "compute capability"), "8.6");
        assert_eq!(get(&ampere, "tensor cores"), "yes");
        assert_eq!(get(&ampere, "FP8"), "no");
        let pascal = capabilities(6, 1);
        assert_eq!(get(&pascal, "tensor cores"), "no");
        let volta = capabilities(7, 0);
        assert_eq!(get(&volta, "tensor cores"), "yes");
        let hopper = capabilities(9, 0);
        assert_eq!(get(&hopper, "FP8"), "yes");
        assert_eq!(get(&capabilities(12, 0), "FP8"), "yes");
    }
}
