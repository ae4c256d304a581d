//! One CUDA device: its primary context, its streams, its event and
//! staging pools, its loaded kernels and peers; and what it reports about
//! itself.
//!
//! A [`Ctx`] is created on first use of a device index and lives for the
//! process. Driver calls that need a context run inside a [`Scope`], which
//! makes the device's primary context current on the calling thread and
//! restores the thread's previous context afterwards (c10's CUDA code does
//! the same with a device guard), so backend calls never change the
//! thread's current device behind the user's back. Only
//! [`Ctx::make_current`] (what guards call) changes it for good.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock};

use cudarc::driver::sys::{self, CUresult};

use super::TY;
use super::event::{EventPool, RawEvent};
use super::kernel::Function;
use super::loader::{DeviceInfo, call, cuda_error, driver, status};
use super::memory::Pinned;
use super::stream::{CudaStream, RawStream};
use crate::backend::pool::Streams;
use crate::backend::slots::Slots;
use crate::backend::{DeviceKind, DeviceProperties, TimestampSupport};
use crate::core::{Device, DeviceIndex, MAX_PRIORITY_LEVELS, StreamId, StreamKind, stream_kind};
use crate::error::{Error, Result};

/// A loaded kernel's name, source address and whether its floating point
/// is strict.
pub(super) type FunctionKey = (&'static str, usize, bool);

/// A CUDA context handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawCtx(pub sys::CUcontext);
// SAFETY: CUDA contexts are driver objects usable from any thread; the
// driver synchronises access to them.
unsafe impl Send for RawCtx {}
// SAFETY: as above.
unsafe impl Sync for RawCtx {}

/// The device's primary context made current on this thread until drop.
pub(super) struct Scope {
    previous: Option<sys::CUcontext>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(prev) = self.previous {
            // SAFETY: `prev` was the thread's current context (or null) a
            // moment ago; contexts Keel uses are never destroyed.
            let _ = call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(prev) });
        }
    }
}

/// One device's state, for the life of the process.
pub struct Ctx {
    pub(super) index: DeviceIndex,
    pub(super) info: &'static DeviceInfo,
    raw: RawCtx,
    /// Stream priority range (`least` is 0, `greatest` is negative).
    greatest_priority: i32,
    streams: Streams<RawStream>,
    /// Internal non-blocking stream for zeroing new memory and for frees.
    pub(super) side: RawStream,
    pub(super) events: EventPool,
    /// Pinned host buffers for copies, each free or busy until an event.
    pub(super) pinned: Mutex<Vec<(Pinned, Option<RawEvent>)>>,
    /// Loaded kernels, per [`FunctionKey`].
    pub(super) functions: Mutex<HashMap<FunctionKey, Arc<Function>>>,
    /// Peers whose memory this context can access (enabled lazily).
    peers: Mutex<Vec<DeviceIndex>>,
    /// The program's streams handed to Keel (`interop.rs`), by id.
    pub(super) external: RwLock<Vec<External>>,
}

/// A program's stream on this device, adopted as an external stream: its
/// id is the `CUstream` value (c10's encoding of external streams), and
/// `keep` holds what keeps it alive, where the program handed Keel an
/// owner (a cudarc stream).
pub(super) struct External {
    pub(super) raw: RawStream,
    pub(super) _keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ctx(cuda:{})", self.index)
    }
}

static DEVICES: LazyLock<Slots<Ctx>> =
    LazyLock::new(|| Slots::new(driver().map_or(0, |d| d.devices.len())));

/// Device `index` (in range), its context created on first use.
pub(super) fn device(index: DeviceIndex) -> Result<&'static Ctx> {
    let i = usize::try_from(index).unwrap_or(usize::MAX);
    DEVICES.get_or_create(i, || {
        let d = driver().map_err(|reason| Error::backend(TY, reason))?;
        Ctx::new(index, &d.devices[i])
    })
}

impl Ctx {
    fn new(index: DeviceIndex, info: &'static DeviceInfo) -> Result<Ctx> {
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle; `info.dev` came from
        // cuDeviceGet. The primary context is retained for the process.
        call("cuDevicePrimaryCtxRetain", || unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, info.dev)
        })?;
        let raw = RawCtx(raw);
        let _scope = enter(raw)?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: writes two ints; a context is current.
        call("cuCtxGetStreamPriorityRange", || unsafe {
            sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
        })?;
        let range = usize::try_from(least.saturating_sub(greatest).saturating_add(1)).unwrap_or(1);
        Ok(Ctx {
            index,
            info,
            raw,
            greatest_priority: greatest,
            streams: Streams::new(TY, index, range.min(MAX_PRIORITY_LEVELS)),
            side: RawStream::create(0)?,
            events: EventPool::default(),
            pinned: Mutex::new(Vec::new()),
            functions: Mutex::new(HashMap::new()),
            peers: Mutex::new(Vec::new()),
            external: RwLock::new(Vec::new()),
        })
    }

    /// Makes this device's primary context current until the scope drops.
    pub(super) fn scope(&self) -> Result<Scope> {
        enter(self.raw)
    }

    /// The primary context's handle.
    pub(super) fn raw(&self) -> sys::CUcontext {
        self.raw.0
    }

    /// Makes this device's primary context the thread's current context
    /// (no restore): what guards do.
    pub(super) fn make_current(&self) -> Result<()> {
        let raw = self.raw.0;
        // SAFETY: `raw` is a retained primary context, never released.
        call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(raw) })
    }

    /// The device's streams and the pool's cursors.
    pub(super) fn streams(&self) -> &Streams<RawStream> {
        &self.streams
    }

    /// The stream behind `id`: 0 is the legacy default stream; pool ids
    /// are created on first use (non-blocking, with the level's priority).
    pub(super) fn stream(&'static self, id: StreamId) -> Result<CudaStream> {
        if matches!(stream_kind(id), StreamKind::Other) {
            return self.external_stream(id);
        }
        let raw = *self.streams.get_or_create(id, |kind| match kind {
            StreamKind::Pool { level, .. } => {
                let _scope = self.scope()?;
                // c10: level p gets priority -p, clamped to the range.
                RawStream::create((-i32::from(level)).max(self.greatest_priority))
            }
            _ => Ok(RawStream::LEGACY),
        })?;
        Ok(CudaStream { ctx: self, raw })
    }

    /// The program's stream adopted with id `id`.
    fn external_stream(&'static self, id: StreamId) -> Result<CudaStream> {
        let external = self.external.read().unwrap_or_else(PoisonError::into_inner);
        let e = external
            .iter()
            .find(|e| e.raw.0 as usize as StreamId == id)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown stream id {id} on cuda:{}: expected 0 (default), a pool stream id, or an external stream adopted with keel_device::interop::cuda::adopt_stream",
                    self.index
                ))
            })?;
        Ok(CudaStream {
            ctx: self,
            raw: e.raw,
        })
    }

    /// Waits for all work on the device (`cuCtxSynchronize`).
    pub(super) fn synchronize(&self) -> Result<()> {
        let _scope = self.scope()?;
        // SAFETY: a context is current.
        call("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() })
    }

    /// Whether this device can access `peer`'s memory directly
    /// (`cuDeviceCanAccessPeer`; false for itself).
    pub(super) fn can_access(&self, peer: &Ctx) -> Result<bool> {
        if std::ptr::eq(self, peer) {
            return Ok(false);
        }
        let (a, b) = (self.info.dev, peer.info.dev);
        let mut can = 0;
        // SAFETY: writes one int; both handles came from cuDeviceGet.
        call("cuDeviceCanAccessPeer", || unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, a, b)
        })?;
        Ok(can != 0)
    }

    /// Lets this device access `peer`'s memory (`cuCtxEnablePeerAccess`);
    /// `peer` must be one it can access.
    pub(super) fn enable_peer(&self, peer: &Ctx) -> Result<()> {
        let mut peers = self.peers.lock().map_err(|_| poisoned())?;
        if peers.contains(&peer.index) {
            return Ok(());
        }
        let _scope = self.scope()?;
        let raw = peer.raw.0;
        // SAFETY: `raw` is a live primary context; this device's is current.
        let r = status("cuCtxEnablePeerAccess", || unsafe {
            sys::cuCtxEnablePeerAccess(raw, 0)
        })?;
        match r {
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                peers.push(peer.index);
                Ok(())
            }
            r => Err(cuda_error("cuCtxEnablePeerAccess", r)),
        }
    }
}

pub(super) fn poisoned() -> Error {
    Error::backend(TY, "internal lock poisoned by an earlier panic")
}

fn enter(raw: RawCtx) -> Result<Scope> {
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle (null when none is current).
    call("cuCtxGetCurrent", || unsafe {
        sys::cuCtxGetCurrent(&mut cur)
    })?;
    if cur == raw.0 {
        return Ok(Scope { previous: None });
    }
    // SAFETY: `raw` is a retained primary context, never released.
    call("cuCtxSetCurrent", || unsafe { sys::cuCtxSetCurrent(raw.0) })?;
    Ok(Scope {
        previous: Some(cur),
    })
}

/// What device `at` (described by `i`) reports.
pub(super) fn describe(i: &DeviceInfo, at: Device) -> Result<DeviceProperties> {
    let d = driver().map_err(|reason| Error::backend(TY, reason))?;
    let kind = if i.integrated {
        DeviceKind::IntegratedGpu
    } else {
        DeviceKind::DiscreteGpu
    };
    let u = |v: i32| u32::try_from(v).ok();
    let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
    let mut p = DeviceProperties::new(at, i.name.clone(), kind);
    p.vendor = "NVIDIA".to_owned();
    p.vendor_id = Some(0x10de);
    p.native_backend = format!("CUDA {}.{}", d.version / 1000, (d.version % 1000) / 10);
    p.driver = "libcuda".to_owned();
    // Strict kernels' PTX rounds each add and multiply (`.rn`).
    p.strict_float = true;
    p.driver_info = format!("CUDA driver API version {}", d.version);
    p.total_memory = Some(i.total_memory);
    p.compute_units = u(i.sm_count);
    p.max_workgroup_invocations = u(i.max_threads_per_block);
    p.max_workgroup_size = i.max_block.map(|v| u32::try_from(v).unwrap_or(0)).into();
    p.max_workgroup_count = i.max_grid.map(|v| u32::try_from(v).unwrap_or(0)).into();
    p.shared_memory_per_workgroup = u64::try_from(i.shared_per_block).ok();
    p.subgroup_size = u(i.warp_size);
    // cuEventElapsedTime: milliseconds with a resolution of about half a
    // microsecond (CUDA driver API documentation).
    p.timestamps = Some(TimestampSupport {
        period_ns: 500.0,
        valid_bits: 64,
    });
    p.extra.extend(super::capabilities(i.major, i.minor));
    let extra = [
        ("clock rate (kHz)", i.clock_khz.to_string()),
        ("memory clock rate (kHz)", i.memory_clock_khz.to_string()),
        ("memory bus width (bits)", i.bus_width.to_string()),
        ("L2 cache size (bytes)", i.l2_bytes.to_string()),
        ("memory pools", yes(i.memory_pools)),
        ("unified addressing", yes(i.unified_addressing)),
        (
            "PCI location",
            format!("{:04x}:{:02x}:{:02x}", i.pci.0, i.pci.1, i.pci.2),
        ),
    ];
    p.extra
        .extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Ok(p)
}
