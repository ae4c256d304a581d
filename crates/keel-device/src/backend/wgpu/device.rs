//! Adapters (in Keel's order, narrowed by the environment) and the device
//! and queue of each adapter, created on first use; what a device reports
//! about itself; the sink for wgpu's uncaptured errors.
//!
//! Nothing here submits work: submissions go through [`stream`](super::stream).

use std::fmt;
use std::sync::{
    Arc, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard,
    RwLockWriteGuard,
};

use super::event::{QuerySlots, query_set, query_slots};
use super::kernel::Pipelines;
use super::memory::StagingPool;
use super::stream::{QueueStream, SubmissionOrder};
use super::{PRIORITY_LEVELS, TY};
use crate::backend::pool::Streams;
use crate::backend::slots::Adopted;
use crate::backend::{DeviceKind, DeviceProperties, TimestampSupport, vendor_name};
use crate::core::{Device, DeviceIndex};
use crate::error::{Error, Result};

/// Locks a mutex, ignoring poisoning: every critical section here leaves
/// its data consistent.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keel's lock on a GL device's context (Note [GL context lock] in the
/// module docs of the wgpu backend); nothing on other native APIs.
pub(super) struct GlContextLock(Option<RwLock<()>>);

impl GlContextLock {
    /// The lock for a device on native API `api`: a lock on GL, none
    /// elsewhere.
    fn for_api(api: wgpu::Backend) -> Self {
        GlContextLock((api == wgpu::Backend::Gl).then(RwLock::default))
    }

    /// Held around a wgpu call that may hold the GL context briefly (create,
    /// map, unmap or free a buffer): `None` off GL.
    pub(super) fn shared(&self) -> Option<RwLockReadGuard<'_, ()>> {
        self.0
            .as_ref()
            .map(|l| l.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Held around a wgpu call that may hold the GL context long (creating
    /// a pipeline, submitting, waiting for work, mapping a readback):
    /// `None` off GL.
    pub(super) fn exclusive(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        self.0
            .as_ref()
            .map(|l| l.write().unwrap_or_else(PoisonError::into_inner))
    }

    /// Drops `value` (a wgpu object whose last reference may free a GL
    /// object) under the shared lock.
    pub(super) fn release<T>(&self, value: T) {
        let _shared = self.shared();
        drop(value);
    }
}

/// One wgpu adapter, and its device once created.
pub(super) struct Adapter {
    adapter: wgpu::Adapter,
    pub(super) info: wgpu::AdapterInfo,
    kind: DeviceKind,
    /// The program's device and queue, for an adopted device.
    adopted: Option<(wgpu::Device, wgpu::Queue)>,
    device: OnceLock<Result<WgpuDevice>>,
}

/// What wgpu found: the adapters in Keel's order.
pub(super) struct Adapters {
    list: Vec<Adapter>,
    /// The native APIs searched (after `WGPU_BACKEND`).
    backends: wgpu::Backends,
}

static ADAPTERS: LazyLock<Result<Adapters, String>> = LazyLock::new(load);

/// The adapters, or why wgpu cannot run.
pub(super) fn adapters() -> Result<&'static Adapters, &'static str> {
    ADAPTERS.as_ref().map_err(String::as_str)
}

impl Adapters {
    /// Why there is no adapter.
    pub(super) fn none_reason(&self) -> String {
        format!(
            "no wgpu adapter found (backends searched: {:?})",
            self.backends
        )
    }
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

/// The native API an adapter runs on, as people write it.
fn api_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Metal => "Metal",
        wgpu::Backend::Dx12 => "DX12",
        wgpu::Backend::Gl => "GL",
        wgpu::Backend::BrowserWebGpu => "WebGPU",
        wgpu::Backend::Noop => "noop",
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
/// other), then name. Starting wgpu without a display session makes a
/// system library complain on stderr; [`crate::quiet`] keeps that line
/// off.
fn load() -> Result<Adapters, String> {
    let desc = wgpu::InstanceDescriptor {
        backends: wgpu::Backends::all(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    }
    .with_env();
    let backends = desc.backends;
    let adapters = crate::quiet::probing(|| {
        let instance =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wgpu::Instance::new(desc)))
                .map_err(|_| "creating the wgpu instance panicked".to_owned())?;
        Ok::<_, String>(pollster::block_on(instance.enumerate_adapters(backends)))
    })?;
    let mut list: Vec<Adapter> = adapters
        .into_iter()
        .map(|adapter| {
            let info = adapter.get_info();
            Adapter {
                kind: kind_of(info.device_type),
                info,
                adapter,
                adopted: None,
                device: OnceLock::new(),
            }
        })
        .collect();
    if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
        let wanted = wanted.to_lowercase();
        list.retain(|a| a.info.name.to_lowercase().contains(&wanted));
    }
    list.sort_by(|a, b| {
        (backend_rank(a.info.backend), a.kind, &a.info.name).cmp(&(
            backend_rank(b.info.backend),
            b.kind,
            &b.info.name,
        ))
    });
    Ok(Adapters { list, backends })
}

/// Timestamps inside encoders: what Keel's timed events and profiled
/// operations need.
pub(super) const TIMESTAMP_FEATURES: wgpu::Features =
    wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);

/// What Keel asks of a device it creates, where the adapter offers it:
/// timestamps, subgroup operations, native f16, immediate data and
/// passthrough shaders (strict floating point on Vulkan adapters:
/// [`Kernel::strict_float`](crate::Kernel::strict_float)). A
/// program that hands Keel its own device enables what it can of these
/// (`keel_device::interop::wgpu::FEATURES`); Keel uses what is enabled.
pub(crate) const WANTED_FEATURES: wgpu::Features = TIMESTAMP_FEATURES
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::IMMEDIATES)
    .union(wgpu::Features::PASSTHROUGH_SHADERS);

/// What Keel's cooperative-matrix matmul needs of a device:
/// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX` with f16 and subgroups.
const COOPERATIVE_FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);

/// The fragment size of the cooperative-matrix configuration Keel's
/// kernel uses on `adapter` (f16 A and B, f32 C: 16 x 16 x 16 where
/// subgroups are exactly 32 wide, 8 x 8 x 8 where they are exactly 8;
/// `COOPERATIVE_MATRIX_SHAPES` in the Vulkan interop), if the
/// adapter lists it.
fn cooperative_shape(adapter: &wgpu::Adapter, info: &wgpu::AdapterInfo) -> Option<u32> {
    if info.subgroup_min_size != info.subgroup_max_size {
        return None;
    }
    let size = crate::backend::spv::cooperative_fragment_for(info.subgroup_min_size)?;
    adapter
        .cooperative_matrix_properties()
        .iter()
        .any(|p| {
            (p.m_size, p.n_size, p.k_size) == (size, size, size)
                && p.ab_type == wgpu::wgt::CooperativeScalarType::F16
                && p.cr_type == wgpu::wgt::CooperativeScalarType::F32
        })
        .then_some(size)
}

/// A wgpu error reported outside an error scope, kept for the next
/// operation on the device to report.
#[derive(Default)]
pub(super) struct Uncaptured(Mutex<Vec<String>>);

impl Uncaptured {
    /// Takes the first uncaptured error, if one happened.
    pub(super) fn take(&self) -> Result<()> {
        let mut errors = lock(&self.0);
        if errors.is_empty() {
            return Ok(());
        }
        let first = errors.remove(0);
        errors.clear();
        Err(Error::backend(TY, first))
    }
}

/// The device and queue of one adapter, with what Keel keeps per device:
/// its logical streams, submission order, pipelines and timestamp slots.
pub struct WgpuDevice {
    pub(super) index: DeviceIndex,
    pub(super) adapter: &'static Adapter,
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    pub(super) limits: wgpu::Limits,
    /// Where the adapter offers timestamps inside encoders.
    pub(super) timestamps: Option<wgpu::QuerySet>,
    pub(super) order: SubmissionOrder,
    pub(super) streams: Streams<QueueStream>,
    pub(super) pipelines: Pipelines,
    pub(super) query_slots: QuerySlots,
    pub(super) readbacks: StagingPool,
    pub(super) uploads: StagingPool,
    pub(super) uncaptured: Arc<Uncaptured>,
    /// Note [GL context lock] (module docs of the wgpu backend).
    /// Shared with the device's poll thread, which waits for GL work
    /// under it.
    pub(super) gl: Arc<GlContextLock>,
    /// Nanoseconds per timestamp tick (`queue.get_timestamp_period()`,
    /// fixed for a device; asked once, not per timestamp read).
    pub(super) timestamp_period: f64,
    /// Whether the program handed this device to Keel.
    pub(super) adopted: bool,
}

impl fmt::Debug for WgpuDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuDevice")
            .field("index", &self.index)
            .field("adapter", &self.adapter.info.name)
            .field("api", &api_name(self.adapter.info.backend))
            .field("timestamps", &self.timestamps.is_some())
            .field("adopted", &self.adopted)
            .finish()
    }
}

/// Devices the program handed to Keel ([`adopt`]), numbered after the
/// adapters Keel found.
static ADOPTED: Adopted<Adapter> = Adopted::new();

/// How many adapters Keel found itself.
fn found() -> usize {
    adapters().map_or(0, |a| a.list.len())
}

/// How many devices there are: the adapters Keel found, then the devices
/// adopted.
pub(super) fn count() -> DeviceIndex {
    DeviceIndex::try_from(found() + ADOPTED.len()).unwrap_or(DeviceIndex::MAX)
}

/// Whether the program handed Keel a device.
pub(super) fn any_adopted() -> bool {
    !ADOPTED.is_empty()
}

/// Device `index` (in range), created on first use.
pub(super) fn device(index: DeviceIndex) -> Result<&'static WgpuDevice> {
    let i = usize::try_from(index).ok();
    let found = found();
    let adapter: &'static Adapter = match i {
        Some(i) if i < found => adapters().ok().and_then(|a| a.list.get(i)),
        Some(i) => ADOPTED.get(i - found),
        None => None,
    }
    .ok_or_else(|| Error::invalid(format!("no wgpu device {index}")))?;
    adapter
        .device
        .get_or_init(|| WgpuDevice::create(index, adapter))
        .as_ref()
        .map_err(Clone::clone)
}

/// Adopts the program's `device` (requested from `adapter`, submitting
/// to `queue`) as a new Keel device; returns its index. Each call adopts
/// anew: wgpu compares devices by an id that is unique only within one
/// `wgpu::Instance`, so equal devices of two instances would be taken for
/// one.
pub(super) fn adopt(
    adapter: &wgpu::Adapter,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
) -> Result<DeviceIndex> {
    let found = found();
    let i = ADOPTED.adopt(
        |_| false,
        |i| {
            if DeviceIndex::try_from(found + i).is_err() {
                return Err(Error::invalid(format!(
                    "expected at most {} wgpu devices, found {}",
                    DeviceIndex::MAX,
                    found + i + 1
                )));
            }
            let info = adapter.get_info();
            Ok(Adapter {
                kind: kind_of(info.device_type),
                info,
                adapter: adapter.clone(),
                adopted: Some((device.clone(), queue.clone())),
                device: OnceLock::new(),
            })
        },
    )?;
    let index = DeviceIndex::try_from(found + i).unwrap_or(DeviceIndex::MAX);
    // Made now, so that what Keel cannot use is reported here.
    self::device(index)?;
    Ok(index)
}

impl WgpuDevice {
    /// Whether kernels with strict floating point get it here: on a Vulkan
    /// adapter with passthrough shaders, whose SPIR-V Keel decorates
    /// (`kernel.rs`, `strict_spirv`).
    pub(super) fn strict_float(&self) -> bool {
        self.adapter.info.backend == wgpu::Backend::Vulkan
            && self
                .device
                .features()
                .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    }

    /// The device of `adapter`: the program's, for an adopted device;
    /// otherwise requested with the features and limits Keel uses.
    fn create(index: DeviceIndex, adapter: &'static Adapter) -> Result<WgpuDevice> {
        if let Some((device, queue)) = &adapter.adopted {
            return WgpuDevice::assemble(index, adapter, device.clone(), queue.clone(), false);
        }
        let offered = adapter.adapter.features();
        // Subgroup operations in WGSL (`enable subgroups;`), where offered:
        // `keel::compute::sum` uses them.
        // Native f16 in WGSL (`enable f16;`), where offered: the f16
        // conversions use it (`keel::compute::f16_storage`).
        // Immediate data, where offered: kernels' parameter blocks (Note
        // [wgpu parameter blocks] in `kernel.rs`).
        let mut required_features = offered & WANTED_FEATURES;
        // Cooperative matrices (an experimental feature in wgpu 30), where
        // the adapter has the configuration `keel::compute`'s f16-input
        // matmul uses.
        let coop = offered.contains(COOPERATIVE_FEATURES)
            && cooperative_shape(&adapter.adapter, &adapter.info).is_some();
        if coop {
            required_features |= COOPERATIVE_FEATURES;
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("keel"),
            required_features,
            required_limits: adapter.adapter.limits(),
            experimental_features: if coop {
                // SAFETY: not an FFI call but wgpu's token for features it
                // marks experimental; Keel uses only cooperative matrices
                // of them, in one kernel whose results the tests check
                // against a reference wherever the feature is present.
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        };
        let (device, queue) =
            pollster::block_on(adapter.adapter.request_device(&desc)).map_err(|e| {
                Error::backend(
                    TY,
                    format!("requesting a device from {}: {e}", adapter.info.name),
                )
            })?;
        WgpuDevice::assemble(index, adapter, device, queue, true)
    }

    /// Keel's state around `device` and `queue`. `own_errors`: the device
    /// is Keel's, so its uncaptured errors come to Keel (an adopted
    /// device's stay with the handler the program set).
    fn assemble(
        index: DeviceIndex,
        adapter: &'static Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        own_errors: bool,
    ) -> Result<WgpuDevice> {
        let features = device.features();
        let limits = device.limits();
        let uncaptured = Arc::new(Uncaptured::default());
        if own_errors {
            let sink = Arc::clone(&uncaptured);
            device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                lock(&sink.0).push(e.to_string());
            }));
        }
        let gl = Arc::new(GlContextLock::for_api(adapter.info.backend));
        let timestamp_period = f64::from(queue.get_timestamp_period());
        let order = SubmissionOrder::start(&device, index, Arc::clone(&gl))?;
        let timestamps = features
            .contains(TIMESTAMP_FEATURES)
            .then(|| query_set(&device));
        Ok(WgpuDevice {
            index,
            adapter,
            device,
            queue,
            limits,
            timestamps,
            order,
            streams: Streams::new(TY, index, PRIORITY_LEVELS),
            pipelines: Pipelines::default(),
            query_slots: query_slots(),
            readbacks: StagingPool::readbacks(),
            uploads: StagingPool::uploads(),
            uncaptured,
            gl,
            timestamp_period,
            adopted: !own_errors,
        })
    }

    /// The adapter the device was made from.
    pub(super) fn adapter_handle(&self) -> &wgpu::Adapter {
        &self.adapter.adapter
    }

    /// A command encoder on this device.
    pub(super) fn encoder(&self) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
    }

    /// What the device is and can do, as device `at`.
    pub(super) fn describe(&self, at: Device) -> DeviceProperties {
        let info = &self.adapter.info;
        let l = &self.limits;
        let mut p = DeviceProperties::new(at, info.name.clone(), self.adapter.kind);
        p.vendor = vendor_name(info.vendor).to_owned();
        p.vendor_id = Some(info.vendor);
        p.device_id = Some(info.device);
        p.native_backend = format!("wgpu/{}", api_name(info.backend));
        p.driver = info.driver.clone();
        p.driver_info = info.driver_info.clone();
        p.max_workgroup_size = Some([
            l.max_compute_workgroup_size_x,
            l.max_compute_workgroup_size_y,
            l.max_compute_workgroup_size_z,
        ]);
        p.max_workgroup_invocations = Some(l.max_compute_invocations_per_workgroup);
        p.max_workgroup_count = Some([l.max_compute_workgroups_per_dimension; 3]);
        p.shared_memory_per_workgroup = Some(u64::from(l.max_compute_workgroup_storage_size));
        p.subgroup_size = (info.subgroup_min_size > 0).then_some(info.subgroup_min_size);
        p.timestamps = self.timestamps.as_ref().map(|_| TimestampSupport {
            period_ns: self.timestamp_period,
            valid_bits: 64,
        });
        p.storage_offset_alignment = Some(u64::from(l.min_storage_buffer_offset_alignment));
        p.strict_float = self.strict_float();
        p.extra
            .push(("native API".to_owned(), api_name(info.backend).to_owned()));
        if self.adopted {
            p.extra.push((
                "adopted".to_owned(),
                "the program's device and queue (keel_device::interop::wgpu::adopt)".to_owned(),
            ));
        }
        if self.device.features().contains(wgpu::Features::SUBGROUP) {
            p.extra.push((
                "subgroup operations".to_owned(),
                "basic, vote, ballot, shuffle, arithmetic, quad (Features::SUBGROUP)".to_owned(),
            ));
        }
        if self.device.features().contains(COOPERATIVE_FEATURES)
            && let Some(size) = cooperative_shape(&self.adapter.adapter, info)
        {
            // Read by `keel::compute::cooperative_matrix_supported`, which
            // picks the kernel by the size.
            p.extra.push((
                "cooperative matrix".to_owned(),
                format!(
                    "{size}x{size}x{size} f16 x f16 + f32, subgroup scope, subgroups of {} \
                     (Features::EXPERIMENTAL_COOPERATIVE_MATRIX)",
                    info.subgroup_min_size
                ),
            ));
        }
        // Note [wgpu parameter blocks] in `kernel.rs`.
        p.extra.push((
            "kernel parameters".to_owned(),
            if self.device.features().contains(wgpu::Features::IMMEDIATES) {
                format!(
                    "immediate data, up to {} bytes (Features::IMMEDIATES); larger blocks in a uniform buffer",
                    l.max_immediate_size
                )
            } else {
                "a uniform buffer per launch".to_owned()
            },
        ));
        // Read by `keel::compute::f16_storage`.
        p.extra.push((
            "f16 storage".to_owned(),
            if self.device.features().contains(wgpu::Features::SHADER_F16) {
                "native (Features::SHADER_F16)".to_owned()
            } else {
                "emulated (packed u32 words)".to_owned()
            },
        ));
        p.extra.push((
            "subgroup sizes".to_owned(),
            format!("{}..={}", info.subgroup_min_size, info.subgroup_max_size),
        ));
        p.extra
            .push(("max buffer size".to_owned(), l.max_buffer_size.to_string()));
        p.extra.push((
            "max storage binding size".to_owned(),
            l.max_storage_buffer_binding_size.to_string(),
        ));
        p.extra.push((
            "features".to_owned(),
            format!("{:?}", self.adapter.adapter.features()),
        ));
        p
    }
}
