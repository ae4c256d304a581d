//! Adapters (in Keel's order) and the device + queue per adapter, created
//! on first use; submission bookkeeping shared by every stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::backend::DeviceKind;
use crate::backend::pool::PoolCursors;
use crate::core::{
    Device, DeviceIndex, MAX_PRIORITY_LEVELS, STREAMS_PER_POOL, StreamId, StreamKind, stream_kind,
};
use crate::error::{Error, Result};

use super::TY;

/// Priority levels of each wgpu device's stream pool.
pub const PRIORITY_LEVELS: usize = 2;

/// Timestamp queries per device.
pub(super) const QUERY_SLOTS: u32 = 1024;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One wgpu adapter.
pub(super) struct Adapter {
    pub adapter: wgpu::Adapter,
    pub info: wgpu::AdapterInfo,
    pub kind: DeviceKind,
}

pub(super) struct Wg {
    pub adapters: Vec<Adapter>,
    pub backends: wgpu::Backends,
}

static WG: LazyLock<Result<Wg, String>> = LazyLock::new(load);

pub(super) fn wg() -> Result<&'static Wg, &'static str> {
    WG.as_ref().map_err(String::as_str)
}

fn backend_rank(b: wgpu::Backend) -> u8 {
    match b {
        wgpu::Backend::Vulkan => 0,
        wgpu::Backend::Metal => 1,
        wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl => 3,
        _ => 4,
    }
}

fn kind_of(t: wgpu::DeviceType) -> DeviceKind {
    match t {
        wgpu::DeviceType::DiscreteGpu => DeviceKind::DiscreteGpu,
        wgpu::DeviceType::IntegratedGpu => DeviceKind::IntegratedGpu,
        wgpu::DeviceType::VirtualGpu => DeviceKind::VirtualGpu,
        wgpu::DeviceType::Cpu => DeviceKind::Cpu,
        wgpu::DeviceType::Other => DeviceKind::Other,
    }
}

/// Every adapter of every compiled native backend, filtered by
/// `WGPU_BACKEND` and `WGPU_ADAPTER_NAME`, ordered by native API (Vulkan,
/// Metal, DX12, GL), then kind (discrete, integrated, virtual, CPU,
/// other), then name.
fn load() -> Result<Wg, String> {
    let desc = wgpu::InstanceDescriptor {
        backends: wgpu::Backends::all(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    }
    .with_env();
    let backends = desc.backends;
    let instance =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wgpu::Instance::new(desc)))
            .map_err(|_| "creating the wgpu instance panicked".to_owned())?;
    let mut adapters: Vec<Adapter> = pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .filter(|a| a.get_info().backend != wgpu::Backend::Noop)
        .map(|adapter| {
            let info = adapter.get_info();
            Adapter {
                kind: kind_of(info.device_type),
                info,
                adapter,
            }
        })
        .collect();
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let wanted = wanted.to_lowercase();
        adapters.retain(|a| a.info.name.to_lowercase().contains(&wanted));
    }
    adapters.sort_by(|a, b| {
        (backend_rank(a.info.backend), a.kind, &a.info.name).cmp(&(
            backend_rank(b.info.backend),
            b.kind,
            &b.info.name,
        ))
    });
    Ok(Wg { adapters, backends })
}

/// A wgpu error reported outside an error scope, kept for the next
/// operation on the device to report.
#[derive(Default)]
pub(super) struct Uncaptured(Mutex<Vec<String>>);

impl Uncaptured {
    /// Takes the first uncaptured error, if one happened.
    pub fn take(&self) -> Result<()> {
        let mut errors = lock(&self.0);
        if errors.is_empty() {
            return Ok(());
        }
        let first = errors.remove(0);
        errors.clear();
        Err(Error::backend(TY, first))
    }
}

/// Free timestamp slots, and `(slot, seq)` of destroyed events whose
/// submission may still be running.
pub(super) type QuerySlots = (Vec<u32>, Vec<(u32, u64)>);

/// One lane of the device's single queue.
#[derive(Default)]
pub(super) struct Lane {
    /// The sequence number of the lane's last submission (0: none).
    pub last: Mutex<Option<(u64, wgpu::SubmissionIndex)>>,
}

/// The device and queue of one adapter.
pub(super) struct Ctx {
    pub index: DeviceIndex,
    pub adapter: &'static Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub timestamps: Option<wgpu::QuerySet>,
    /// Submission order: the sequence number of the last submission.
    submit_lock: Mutex<u64>,
    /// The highest sequence number known complete.
    pub completed: Arc<AtomicU64>,
    pub cursors: PoolCursors,
    default_lane: Lane,
    pool: [[OnceLock<Lane>; STREAMS_PER_POOL]; MAX_PRIORITY_LEVELS],
    pub pipelines: Mutex<HashMap<(usize, usize), Arc<super::kernel::Pipeline>>>,
    pub query_slots: Mutex<QuerySlots>,
    pub uncaptured: Arc<Uncaptured>,
}

static CTXS: LazyLock<Vec<OnceLock<Result<Ctx>>>> = LazyLock::new(|| {
    let n = wg().map_or(0, |w| w.adapters.len());
    (0..n).map(|_| OnceLock::new()).collect()
});

/// The device for `device` (an existing wgpu index), created on first use.
pub(super) fn ctx(device: Device) -> Result<&'static Ctx> {
    let w = wg().map_err(super::unavailable)?;
    crate::backend::check_device_index(device, w.adapters.len() as DeviceIndex)?;
    let i = device.index() as usize;
    let (Some(slot), Some(adapter)) = (CTXS.get(i), w.adapters.get(i)) else {
        return Err(Error::invalid(format!("no wgpu device {device}")));
    };
    slot.get_or_init(|| Ctx::create(device.index(), adapter))
        .as_ref()
        .map_err(Clone::clone)
}

/// Every device created so far.
pub(super) fn created() -> impl Iterator<Item = &'static Ctx> {
    CTXS.iter()
        .filter_map(|s| s.get())
        .filter_map(|r| r.as_ref().ok())
}

impl Ctx {
    fn create(index: DeviceIndex, adapter: &'static Adapter) -> Result<Ctx> {
        let offered = adapter.adapter.features();
        let wanted =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        let required_features = offered & wanted;
        let limits = adapter.adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("keel"),
            required_features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) =
            pollster::block_on(adapter.adapter.request_device(&desc)).map_err(|e| {
                Error::backend(
                    TY,
                    format!("requesting a device from {}: {e}", adapter.info.name),
                )
            })?;
        let uncaptured = Arc::new(Uncaptured::default());
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            lock(&sink.0).push(e.to_string());
        }));
        let timestamps = required_features.contains(wanted).then(|| {
            device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("keel timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERY_SLOTS,
            })
        });
        Ok(Ctx {
            index,
            adapter,
            device,
            queue,
            limits,
            timestamps,
            submit_lock: Mutex::new(0),
            completed: Arc::new(AtomicU64::new(0)),
            cursors: PoolCursors::new(PRIORITY_LEVELS),
            default_lane: Lane::default(),
            pool: [const { [const { OnceLock::new() }; STREAMS_PER_POOL] }; MAX_PRIORITY_LEVELS],
            pipelines: Mutex::new(HashMap::new()),
            query_slots: Mutex::new(((0..QUERY_SLOTS).rev().collect(), Vec::new())),
            uncaptured,
        })
    }

    /// The lane behind `id`.
    pub fn lane(&self, id: StreamId) -> Result<&Lane> {
        match stream_kind(id) {
            StreamKind::Default => Ok(&self.default_lane),
            StreamKind::Pool { level, index } if usize::from(level) < self.cursors.levels() => {
                Ok(self.pool[usize::from(level)][usize::from(index)].get_or_init(Lane::default))
            }
            _ => Err(Error::invalid(format!(
                "unknown stream id {id} on wgpu:{}: expected 0 (default) or a pool stream id",
                self.index
            ))),
        }
    }

    /// Every lane used so far.
    pub fn lanes(&self) -> impl Iterator<Item = &Lane> {
        std::iter::once(&self.default_lane)
            .chain(self.pool.iter().flatten().filter_map(|l| l.get()))
    }

    /// Submits `encoder` on `lane`; returns the submission's sequence number.
    pub fn submit(&self, lane: &Lane, encoder: wgpu::CommandEncoder) -> Result<u64> {
        let mut seq = lock(&self.submit_lock);
        let index = self.queue.submit([encoder.finish()]);
        *seq += 1;
        let this = *seq;
        let completed = Arc::clone(&self.completed);
        self.queue.on_submitted_work_done(move || {
            completed.fetch_max(this, Ordering::AcqRel);
        });
        *lock(&lane.last) = Some((this, index));
        drop(seq);
        self.uncaptured.take()?;
        Ok(this)
    }

    /// Whether submission `seq` (wgpu's `index`) has completed. Never
    /// blocks: asks wgpu about that very submission (a wait with a zero
    /// timeout), so the answer never depends on when completion callbacks
    /// of other submissions ran.
    pub fn is_done(&self, seq: u64, index: Option<&wgpu::SubmissionIndex>) -> Result<bool> {
        if seq == 0 || self.completed.load(Ordering::Acquire) >= seq {
            return Ok(true);
        }
        let Some(index) = index else {
            self.device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| Error::backend(TY, format!("polling the device: {e}")))?;
            return Ok(self.completed.load(Ordering::Acquire) >= seq);
        };
        match self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index.clone()),
            timeout: Some(std::time::Duration::ZERO),
        }) {
            Ok(_) => Ok(true),
            Err(wgpu::PollError::Timeout) => Ok(false),
            Err(e) => Err(Error::backend(TY, format!("polling the device: {e}"))),
        }
    }

    /// Waits until submission `seq` (with wgpu's `index`) has completed.
    pub fn wait(&self, seq: u64, index: Option<&wgpu::SubmissionIndex>) -> Result<()> {
        while !self.is_done(seq, index)? {
            self.device
                .poll(wgpu::PollType::Wait {
                    submission_index: index.cloned(),
                    timeout: None,
                })
                .map_err(|e| Error::backend(TY, format!("waiting for the device: {e}")))?;
        }
        self.uncaptured.take()
    }

    /// Waits for everything submitted on `lane`.
    pub fn wait_lane(&self, lane: &Lane) -> Result<()> {
        let last = lock(&lane.last).clone();
        match last {
            Some((seq, index)) => self.wait(seq, Some(&index)),
            None => self.uncaptured.take(),
        }
    }

    /// A timestamp slot, recycling those of destroyed events once the
    /// submission that wrote them completed.
    pub fn take_query_slot(&self) -> Result<u32> {
        let mut slots = lock(&self.query_slots);
        let completed = self.completed.load(Ordering::Acquire);
        let (free, retiring) = &mut *slots;
        retiring.retain(|&(slot, seq)| {
            let done = seq <= completed;
            if done {
                free.push(slot);
            }
            !done
        });
        free.pop().ok_or_else(|| {
            Error::backend(
                TY,
                format!("all {QUERY_SLOTS} timestamp query slots are in use by timed events"),
            )
        })
    }
}
