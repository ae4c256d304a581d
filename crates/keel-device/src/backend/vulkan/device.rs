//! A logical device per adapter, created on first use: its queues, memory
//! allocator, timestamps, streams and pipeline cache; and what an adapter
//! reports about itself.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use rustc_hash::FxHashMap;

use super::TY;
use super::event::Timestamps;
use super::kernel::Pipeline;
use super::loader::{Adapter, Vk, vk};
use super::memory::StagingPool;
use super::stream::VkStream;
use crate::backend::pool::Streams;
use crate::backend::slots::{Adopted, Slots};
pub use crate::backend::spv::COOPERATIVE_MATRIX_SHAPES;
use crate::backend::{DeviceProperties, TimestampSupport, vendor_name};
use crate::core::{Device, DeviceIndex, StreamId};
use crate::error::{Error, Result};

/// Priority levels of each Vulkan device's stream pool.
pub const PRIORITY_LEVELS: usize = 2;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn vk_error(what: &str, e: vk::Result) -> Error {
    Error::backend(TY, format!("{what} failed: {e}"))
}

/// A queue of the compute family, used under its mutex (Vulkan queues are
/// externally synchronised), and how many submissions it has had (a
/// stream tells from it whether another stream submitted to the queue
/// since its own last submission, see `stream.rs`).
pub(super) struct Queue {
    pub(super) handle: vk::Queue,
    pub(super) submissions: u64,
}

/// One logical device: created by Keel on first use of an index, or
/// adopted from the program (`interop.rs`). Both run the same code: every
/// Vulkan call goes through the function tables kept here.
pub struct Ctx {
    pub(super) index: DeviceIndex,
    pub(super) adapter: Adapter,
    /// The loader's global functions (kept so the loader library stays
    /// loaded while the device is in use).
    pub(super) entry: ash::Entry,
    /// The instance's function table: Keel's instance, or the program's.
    pub(super) instance: ash::Instance,
    pub(super) device: ash::Device,
    /// Whose `VkDevice` (and `VkInstance`) this is. Keel never destroys
    /// either: its own live for the process, the program's are the
    /// program's.
    pub(super) owner: Owner,
    pub(super) queues: Vec<Mutex<Queue>>,
    /// The queues' handles (they never change), read without the locks:
    /// handing them out never waits for a submission, or for a program
    /// holding a queue in `with_queue`.
    pub(super) queue_handles: Vec<vk::Queue>,
    next_queue: AtomicUsize,
    /// `None` once an adopted device is released (its memory freed).
    pub(super) allocator: Mutex<Option<Allocator>>,
    pub(super) timestamps: Timestamps,
    streams: Streams<VkStream>,
    pub(super) pipelines: Mutex<FxHashMap<super::kernel::SpirvKey, Arc<Pipeline>>>,
    /// Descriptor sets of earlier launches, reused by launches that bind
    /// the same ranges.
    pub(super) sets: Mutex<super::kernel::SetCache>,
    /// Host-visible buffers for uploads and readbacks, reused.
    pub(super) staging: StagingPool,
    /// `VK_KHR_calibrated_timestamps` (or the EXT form), where the device
    /// can read its timestamp clock directly.
    pub(super) calibrated: Option<Calibrated>,
    /// Set by `interop::release`: every object Keel made on the program's
    /// device is destroyed, and every operation on it is an error.
    released: AtomicBool,
}

/// Whose `VkDevice` a [`Ctx`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// Keel created it (and its instance); it lives for the process.
    Keel,
    /// The program created it and gave it to Keel (`interop::adopt`);
    /// Keel submits to queue `queue_index` of the adapter's family.
    Program { queue_index: u32 },
}

/// Which calibrated-timestamps extension a device has.
#[derive(Clone, Copy)]
enum CalibrationExt {
    Khr,
    Ext,
}

impl CalibrationExt {
    /// The extension named `name`, if it is one of the two.
    fn named(name: &CStr) -> Option<CalibrationExt> {
        if name == ash::khr::calibrated_timestamps::NAME {
            Some(CalibrationExt::Khr)
        } else if name == ash::ext::calibrated_timestamps::NAME {
            Some(CalibrationExt::Ext)
        } else {
            None
        }
    }

    fn name(self) -> &'static CStr {
        match self {
            CalibrationExt::Khr => ash::khr::calibrated_timestamps::NAME,
            CalibrationExt::Ext => ash::ext::calibrated_timestamps::NAME,
        }
    }

    /// Whether the device's own timestamp clock is one of the domains the
    /// extension can read.
    ///
    /// # Safety
    ///
    /// `instance` is live (created from `entry`) and `physical` is one of
    /// its physical devices.
    unsafe fn has_device_domain(
        self,
        entry: &ash::Entry,
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
    ) -> bool {
        // SAFETY: the physical device belongs to the instance, which was
        // created from `entry` (the caller's promise).
        let domains = unsafe {
            match self {
                CalibrationExt::Khr => {
                    ash::khr::calibrated_timestamps::Instance::new(entry, instance)
                        .get_physical_device_calibrateable_time_domains(physical)
                }
                CalibrationExt::Ext => {
                    ash::ext::calibrated_timestamps::Instance::new(entry, instance)
                        .get_physical_device_calibrateable_time_domains(physical)
                }
            }
        };
        domains.is_ok_and(|d| d.contains(&vk::TimeDomainKHR::DEVICE))
    }
}

/// A device's calibrated-timestamps functions.
pub(super) enum Calibrated {
    Khr(ash::khr::calibrated_timestamps::Device),
    Ext(ash::ext::calibrated_timestamps::Device),
}

impl Calibrated {
    /// The device's timestamp clock in ticks, and the driver's maximum
    /// deviation in nanoseconds.
    pub(super) fn device_ticks(&self) -> Result<(u64, u64)> {
        let info =
            [vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE)];
        // SAFETY: the extension is enabled on the device and the DEVICE
        // domain is one it reported.
        let read = unsafe {
            match self {
                Calibrated::Khr(d) => d.get_calibrated_timestamps(&info),
                Calibrated::Ext(d) => d.get_calibrated_timestamps(&info),
            }
        };
        let (ticks, deviation) = read.map_err(|e| vk_error("vkGetCalibratedTimestamps", e))?;
        let first = ticks
            .first()
            .copied()
            .ok_or_else(|| Error::backend(TY, "vkGetCalibratedTimestamps returned nothing"))?;
        Ok((first, deviation))
    }
}

/// What Keel needs enabled on a Vulkan device, and the optional features
/// it uses where they are enabled: what Keel enables on the devices it
/// creates, and what a program enables on a device it means to give Keel
/// ([`adopt`](crate::interop::vulkan::adopt)).
/// [`requirements`](crate::interop::vulkan::requirements) says
/// what a physical device offers.
///
/// Always required (the feature structs below always ask for them):
///
/// - an instance and a physical device of Vulkan 1.3 or later
///   ([`API_VERSION`]);
/// - `timelineSemaphore` and `hostQueryReset` (Vulkan 1.2 features);
/// - `synchronization2` (a Vulkan 1.3 feature);
/// - a queue family with compute for Keel's queue.
///
/// Optional (the fields):
///
/// - native f16 in kernels ([`native_f16`](Self::native_f16));
/// - cooperative matrices ([`cooperative_matrix`](Self::cooperative_matrix)),
///   with the subgroup width their kernel asks for
///   ([`subgroup_size_control`](Self::subgroup_size_control));
/// - calibrated timestamps for the profiler's clock
///   ([`calibrated_timestamps`](Self::calibrated_timestamps)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    /// `shaderFloat16` with `storageBuffer16BitAccess` and
    /// `uniformAndStorageBuffer16BitAccess`: kernels that use `f16` run
    /// natively (otherwise Keel's compute kernels emulate f16 with packed
    /// 32-bit words).
    pub native_f16: bool,
    /// `VK_KHR_cooperative_matrix` with its `cooperativeMatrix` feature
    /// and the Vulkan memory model (with device scope), on a device with
    /// [`native_f16`](Self::native_f16) and a subgroup-scope configuration
    /// of f16 A and B and f32 C and result that Keel's kernel uses for a
    /// subgroup width its compute pipelines run at
    /// ([`COOPERATIVE_MATRIX_SHAPES`]: 16 x 16 x 16 with subgroups of 32,
    /// 8 x 8 x 8 with subgroups of 8; the device's own width, or one it
    /// lets a pipeline ask for with
    /// [`subgroup_size_control`](Self::subgroup_size_control)): Keel's
    /// matmul with f16 inputs then runs on the device's matrix units.
    pub cooperative_matrix: bool,
    /// `subgroupSizeControl` (Vulkan 1.3), with
    /// [`cooperative_matrix`](Self::cooperative_matrix), where compute
    /// stages may ask for a subgroup width and the kernel's width is one
    /// they may ask for: Keel's cooperative-matrix pipelines then ask for
    /// it (`VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`), which
    /// a device whose compute subgroups are another width by default (64
    /// on AMD's RDNA GPUs, for 16 x 16 x 16 at 32) needs.
    pub subgroup_size_control: bool,
    /// `VK_KHR_calibrated_timestamps` or `VK_EXT_calibrated_timestamps`,
    /// where the device can read its own timestamp clock with it: the
    /// profiler then places device spans on the host clock with a stated
    /// error bound.
    pub calibrated_timestamps: Option<&'static CStr>,
}

impl Requirements {
    /// Vulkan 1.1 features to chain into `VkDeviceCreateInfo`: the 16-bit
    /// storage of [`native_f16`](Self::native_f16), if asked.
    pub fn vulkan11_features(&self) -> vk::PhysicalDeviceVulkan11Features<'static> {
        vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(self.native_f16)
            .uniform_and_storage_buffer16_bit_access(self.native_f16)
    }

    /// Vulkan 1.2 features: `timelineSemaphore` and `hostQueryReset`
    /// (required), `shaderFloat16` if [`native_f16`](Self::native_f16),
    /// `vulkanMemoryModel` and `vulkanMemoryModelDeviceScope` if
    /// [`cooperative_matrix`](Self::cooperative_matrix) (naga's SPIR-V for
    /// cooperative matrices uses the Vulkan memory model, where a barrier
    /// on storage memory has device scope).
    pub fn vulkan12_features(&self) -> vk::PhysicalDeviceVulkan12Features<'static> {
        vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .host_query_reset(true)
            .shader_float16(self.native_f16)
            .vulkan_memory_model(self.cooperative_matrix)
            .vulkan_memory_model_device_scope(self.cooperative_matrix)
    }

    /// `VK_KHR_cooperative_matrix`'s feature struct, to chain into
    /// `VkDeviceCreateInfo` if [`cooperative_matrix`](Self::cooperative_matrix)
    /// (and only then: the extension is enabled only then).
    pub fn cooperative_matrix_features(
        &self,
    ) -> Option<vk::PhysicalDeviceCooperativeMatrixFeaturesKHR<'static>> {
        self.cooperative_matrix.then(|| {
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true)
        })
    }

    /// Vulkan 1.3 features: `synchronization2` (required),
    /// `subgroupSizeControl` if
    /// [`subgroup_size_control`](Self::subgroup_size_control).
    pub fn vulkan13_features(&self) -> vk::PhysicalDeviceVulkan13Features<'static> {
        vk::PhysicalDeviceVulkan13Features::default()
            .synchronization2(true)
            .subgroup_size_control(self.subgroup_size_control)
    }

    /// Device extensions to enable (`ppEnabledExtensionNames`).
    pub fn extensions(&self) -> Vec<&'static CStr> {
        let coop = self
            .cooperative_matrix
            .then_some(ash::khr::cooperative_matrix::NAME);
        self.calibrated_timestamps.into_iter().chain(coop).collect()
    }
}

/// The fragment size of [`COOPERATIVE_MATRIX_SHAPES`] that `props` (what
/// `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR` lists) holds for a
/// device whose subgroups are `subgroup_size` wide, if it holds one.
pub(super) fn cooperative_fragment(
    props: &[vk::CooperativeMatrixPropertiesKHR<'_>],
    subgroup_size: u32,
) -> Option<u32> {
    let (ab, cr) = (vk::ComponentTypeKHR::FLOAT16, vk::ComponentTypeKHR::FLOAT32);
    let size = crate::backend::spv::cooperative_fragment_for(subgroup_size)?;
    props
        .iter()
        .any(|p| {
            p.m_size == size
                && p.n_size == size
                && p.k_size == size
                && p.a_type == ab
                && p.b_type == ab
                && p.c_type == cr
                && p.result_type == cr
                && p.scope == vk::ScopeKHR::SUBGROUP
        })
        .then_some(size)
}

/// The subgroup widths a physical device's compute pipelines run at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SubgroupWidths {
    /// The width a pipeline gets without asking (`subgroupSize`).
    pub default: u32,
    /// The widths a compute pipeline may ask for (`minSubgroupSize`,
    /// `maxSubgroupSize`), where the device has `subgroupSizeControl` and
    /// lists compute in `requiredSubgroupSizeStages`.
    pub requestable: Option<(u32, u32)>,
    /// `maxComputeWorkgroupSubgroups`.
    pub max_subgroups: u32,
}

/// Where Keel's cooperative-matrix kernel runs on a device: the subgroup
/// width (and with it the fragment size of [`COOPERATIVE_MATRIX_SHAPES`])
/// and whether its pipelines ask for that width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cooperative {
    pub width: u32,
    pub request: bool,
}

/// The kernel's workgroup size (`MATMUL_COOP`, `MATMUL_COOP8`).
const COOPERATIVE_WORKGROUP: u32 = 128;

/// Where the kernel runs on a device whose subgroups are `widths` and
/// whose cooperative-matrix configurations are `props`: at the device's
/// own width if a configuration fits it (asking for it where a pipeline
/// may, which changes nothing), otherwise at another width a pipeline may
/// ask for, the first of [`COOPERATIVE_MATRIX_SHAPES`] that fits.
pub(super) fn cooperative_width(
    props: &[vk::CooperativeMatrixPropertiesKHR<'_>],
    widths: SubgroupWidths,
) -> Option<Cooperative> {
    let may_ask = |w: u32| {
        widths.requestable.is_some_and(|(min, max)| {
            w.is_power_of_two()
                && min <= w
                && w <= max
                && COOPERATIVE_WORKGROUP <= widths.max_subgroups.saturating_mul(w)
        })
    };
    if cooperative_fragment(props, widths.default).is_some() {
        return Some(Cooperative {
            width: widths.default,
            request: may_ask(widths.default),
        });
    }
    COOPERATIVE_MATRIX_SHAPES
        .into_iter()
        .map(|(w, _)| w)
        .find(|&w| may_ask(w) && cooperative_fragment(props, w).is_some())
        .map(|width| Cooperative {
            width,
            request: true,
        })
}

/// The API version Keel needs of an instance and a physical device.
pub const API_VERSION: u32 = vk::API_VERSION_1_3;

/// "Vulkan 1.2.3", for messages.
pub(super) fn version_name(v: u32) -> String {
    format!(
        "Vulkan {}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

/// What `physical` offers of [`Requirements`]: an error when it lacks
/// Vulkan 1.3 or a required feature, otherwise the optional features it
/// has (all of them: Keel enables each one a device offers).
///
/// # Safety
///
/// `instance` is a live instance created from `entry`, and `physical` is
/// one of its physical devices.
pub(super) unsafe fn offered(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Result<Requirements> {
    // SAFETY: the caller's promise.
    unsafe { offered_in_full(entry, instance, physical) }.map(|(req, _)| req)
}

/// [`offered`], and where the cooperative-matrix kernel runs on a device
/// made with all of it.
///
/// # Safety
///
/// As [`offered`].
unsafe fn offered_in_full(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Result<(Requirements, Option<Cooperative>)> {
    // SAFETY: `physical` belongs to the live `instance` (the caller's
    // promise).
    let props = unsafe { instance.get_physical_device_properties(physical) };
    let name = super::loader::c_chars(&props.device_name);
    if props.api_version < API_VERSION {
        return Err(Error::invalid(format!(
            "expected a physical device of {} or later, found {} ({name})",
            version_name(API_VERSION),
            version_name(props.api_version)
        )));
    }
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut supported = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut v11)
        .push_next(&mut v12)
        .push_next(&mut v13);
    // SAFETY: the device is of Vulkan 1.3 (checked above), so the chained
    // structs are valid; they outlive the call.
    unsafe { instance.get_physical_device_features2(physical, &mut supported) };
    let missing: Vec<&str> = [
        (v12.timeline_semaphore, "timelineSemaphore"),
        (v12.host_query_reset, "hostQueryReset"),
        (v13.synchronization2, "synchronization2"),
    ]
    .iter()
    .filter(|(on, _)| *on == vk::FALSE)
    .map(|(_, name)| *name)
    .collect();
    if !missing.is_empty() {
        return Err(Error::Unavailable {
            backend: TY.backend_name().to_owned(),
            reason: format!("{name} lacks required features: {}", missing.join(", ")),
        });
    }
    // SAFETY: as above.
    let extensions = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(|e| vk_error("vkEnumerateDeviceExtensionProperties", e))?;
    let has = |name: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
    };
    let native_f16 = v12.shader_float16 == vk::TRUE
        && v11.storage_buffer16_bit_access == vk::TRUE
        && v11.uniform_and_storage_buffer16_bit_access == vk::TRUE;
    // naga declares the 16-bit storage capabilities in every module that
    // uses f16, the cooperative-matrix kernel among them: hence native f16.
    let cooperative_matrix = native_f16
        && has(ash::khr::cooperative_matrix::NAME)
        && v12.vulkan_memory_model == vk::TRUE
        && v12.vulkan_memory_model_device_scope == vk::TRUE;
    let size_control = v13.subgroup_size_control == vk::TRUE;
    // SAFETY: as above; the extension is the device's (checked).
    let cooperative = cooperative_matrix
        .then(|| unsafe { cooperative_matrix_offered(entry, instance, physical, size_control) })
        .flatten();
    let calibration = [CalibrationExt::Khr, CalibrationExt::Ext]
        .into_iter()
        .find(|&ext| has(ext.name()))
        // SAFETY: as above (the caller's promise).
        .filter(|ext| unsafe { ext.has_device_domain(entry, instance, physical) });
    let req = Requirements {
        native_f16,
        cooperative_matrix: cooperative.is_some(),
        subgroup_size_control: cooperative.is_some_and(|c| c.request),
        calibrated_timestamps: calibration.map(CalibrationExt::name),
    };
    Ok((req, cooperative))
}

/// Where Keel's cooperative-matrix kernel runs on `physical`, which has
/// `VK_KHR_cooperative_matrix`, if it offers the `cooperativeMatrix`
/// feature and a configuration of [`COOPERATIVE_MATRIX_SHAPES`] for a
/// width its compute pipelines run at ([`cooperative_width`]); asking for
/// a width only where `size_control` (the `subgroupSizeControl` feature,
/// offered or enabled).
///
/// # Safety
///
/// As [`offered`], and `physical` lists the extension.
pub(super) unsafe fn cooperative_matrix_offered(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    size_control: bool,
) -> Option<Cooperative> {
    let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut coop);
    // SAFETY: the extension is the device's (the caller's promise), so its
    // feature struct may be chained; it outlives the call.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    if coop.cooperative_matrix != vk::TRUE {
        return None;
    }
    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Properties::default();
    let mut props = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut subgroup)
        .push_next(&mut v13);
    // SAFETY: as above; the structs are core Vulkan 1.1 and 1.3, and the
    // device is of Vulkan 1.3 (the caller's promise).
    unsafe { instance.get_physical_device_properties2(physical, &mut props) };
    let functions = ash::khr::cooperative_matrix::Instance::new(entry, instance);
    // SAFETY: the extension's instance-level query, on a device that lists
    // it; ash sizes the output from the driver's count.
    let shapes = unsafe { functions.get_physical_device_cooperative_matrix_properties(physical) };
    let widths = SubgroupWidths {
        default: subgroup.subgroup_size,
        requestable: (size_control
            && v13
                .required_subgroup_size_stages
                .contains(vk::ShaderStageFlags::COMPUTE))
        .then_some((v13.min_subgroup_size, v13.max_subgroup_size)),
        max_subgroups: v13.max_compute_workgroup_subgroups,
    };
    cooperative_width(&shapes.ok()?, widths)
}

/// Checks that what a program says it enabled of Keel's optional features
/// (`enabled`) is something `physical` offers (`offered`): a device cannot
/// have been created with more.
pub(super) fn check_enabled(enabled: &Requirements, offered: &Requirements) -> Result<()> {
    if enabled.cooperative_matrix && !offered.cooperative_matrix {
        return Err(Error::invalid(
            "expected cooperative_matrix only where the physical device offers VK_KHR_cooperative_matrix with f16 x f16 + f32 at subgroup scope, 16x16x16 with subgroups of 32 or 8x8x8 with subgroups of 8 (its own width, or one its compute pipelines may ask for), vulkanMemoryModel with device scope and native f16, found cooperative_matrix on one that does not",
        ));
    }
    if enabled.subgroup_size_control && !offered.subgroup_size_control {
        return Err(Error::invalid(
            "expected subgroup_size_control only with cooperative_matrix, where the physical device offers subgroupSizeControl for compute stages and the subgroup width of Keel's cooperative-matrix kernel, found subgroup_size_control on one that does not",
        ));
    }
    if enabled.native_f16 && !offered.native_f16 {
        return Err(Error::invalid(
            "expected native_f16 only where the physical device offers shaderFloat16, storageBuffer16BitAccess and uniformAndStorageBuffer16BitAccess, found native_f16 on one that lacks them",
        ));
    }
    if let Some(name) = enabled.calibrated_timestamps {
        if CalibrationExt::named(name).is_none() {
            return Err(Error::invalid(format!(
                "expected calibrated_timestamps to name VK_KHR_calibrated_timestamps or VK_EXT_calibrated_timestamps, found {}",
                name.to_string_lossy()
            )));
        }
        if offered.calibrated_timestamps.is_none() {
            return Err(Error::invalid(format!(
                "expected calibrated_timestamps only where the physical device offers it for its own clock, found {} on one that does not",
                name.to_string_lossy()
            )));
        }
    }
    Ok(())
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ctx(vulkan:{}, {})", self.index, self.adapter.name)
    }
}

static DEVICES: LazyLock<Slots<Ctx>> =
    LazyLock::new(|| Slots::new(vk().map_or(0, |v| v.adapters.len())));

/// Devices the program gave Keel, numbered after Keel's own.
pub(super) static ADOPTED: Adopted<Ctx> = Adopted::new();

/// How many devices Keel found itself (loading Vulkan on first use).
pub(super) fn own_count() -> usize {
    DEVICES.len()
}

/// Keel's own devices created so far.
pub(super) fn own_created() -> impl Iterator<Item = &'static Ctx> {
    DEVICES.created()
}

/// Logical device `index` (in range): one of Keel's own, created on first
/// use, or an adopted one.
pub(super) fn device(index: DeviceIndex) -> Result<&'static Ctx> {
    let i = usize::try_from(index).unwrap_or(usize::MAX);
    let own = own_count();
    if i >= own {
        return ADOPTED.get(i - own).ok_or_else(|| {
            Error::invalid(format!(
                "expected a Vulkan device index below {}, found {index}",
                own + ADOPTED.len()
            ))
        });
    }
    DEVICES.get_or_create(i, || {
        let v = vk().map_err(|reason| Error::backend(TY, reason))?;
        Ctx::create(index, v, &v.adapters[i])
    })
}

impl Ctx {
    /// Creates Keel's own logical device on `adapter`, enabling every
    /// required feature and every optional one the device offers.
    fn create(index: DeviceIndex, v: &'static Vk, adapter: &Adapter) -> Result<Ctx> {
        // SAFETY: the physical device belongs to Keel's live instance,
        // created from `v.entry`.
        let (req, cooperative) =
            unsafe { offered_in_full(&v.entry, &v.instance, adapter.physical) }?;
        let extensions: Vec<*const std::ffi::c_char> =
            req.extensions().iter().map(|e| e.as_ptr()).collect();
        let priorities = vec![1.0f32; adapter.queue_count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(adapter.family)
            .queue_priorities(&priorities)];
        let mut e11 = req.vulkan11_features();
        let mut e12 = req.vulkan12_features();
        let mut e13 = req.vulkan13_features();
        let mut coop = req.cooperative_matrix_features();
        let mut info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_extension_names(&extensions)
            .push_next(&mut e11)
            .push_next(&mut e12)
            .push_next(&mut e13);
        if let Some(coop) = coop.as_mut() {
            info = info.push_next(coop);
        }
        // SAFETY: the features requested were checked above; `info` and its
        // pointers outlive the call. The device lives for the process.
        let device = unsafe { v.instance.create_device(adapter.physical, &info, None) }
            .map_err(|e| vk_error("vkCreateDevice", e))?;
        let queues = (0..adapter.queue_count)
            // SAFETY: the family and indices were requested at creation.
            .map(|q| unsafe { device.get_device_queue(adapter.family, q) })
            .collect();
        let mut adapter = adapter.clone();
        adapter.f16_storage = req.native_f16;
        adapter.cooperative = cooperative;
        // SAFETY: the device was just created on `adapter.physical` of
        // Keel's instance with `req`, and `queues` are its queues.
        unsafe {
            Ctx::new(
                index,
                (v.entry.clone(), v.instance.clone()),
                adapter,
                device,
                queues,
                &req,
                Owner::Keel,
            )
        }
    }

    /// A device's state around a `VkDevice` (Keel's or the program's): its
    /// memory allocator, timestamp query pool and calibrated clock.
    ///
    /// # Safety
    ///
    /// `device` is a live device of `instance` (created from `entry`) on
    /// `adapter.physical`, created with every required feature of
    /// [`Requirements`] and the optional ones `enabled` names; `queues`
    /// are queues of `adapter.family` on it. All of them stay valid for as
    /// long as the returned state is used.
    pub(super) unsafe fn new(
        index: DeviceIndex,
        (entry, instance): (ash::Entry, ash::Instance),
        adapter: Adapter,
        device: ash::Device,
        queues: Vec<vk::Queue>,
        enabled: &Requirements,
        owner: Owner,
    ) -> Result<Ctx> {
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: adapter.physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        })
        .map_err(|e| Error::backend(TY, format!("creating the memory allocator failed: {e}")))?;
        let timestamps = Timestamps::new(&device)?;
        let calibrated = enabled
            .calibrated_timestamps
            .and_then(CalibrationExt::named)
            .map(|ext| match ext {
                CalibrationExt::Khr => Calibrated::Khr(
                    ash::khr::calibrated_timestamps::Device::new(&instance, &device),
                ),
                CalibrationExt::Ext => Calibrated::Ext(
                    ash::ext::calibrated_timestamps::Device::new(&instance, &device),
                ),
            });
        Ok(Ctx {
            index,
            adapter,
            entry,
            instance,
            device,
            owner,
            queue_handles: queues.clone(),
            queues: queues
                .into_iter()
                .map(|handle| {
                    Mutex::new(Queue {
                        handle,
                        submissions: 0,
                    })
                })
                .collect(),
            next_queue: AtomicUsize::new(0),
            allocator: Mutex::new(Some(allocator)),
            timestamps,
            streams: Streams::new(TY, index, PRIORITY_LEVELS),
            pipelines: Mutex::default(),
            sets: Mutex::default(),
            staging: StagingPool::default(),
            calibrated,
            released: AtomicBool::new(false),
        })
    }

    /// An error once the program released this (adopted) device: Keel's
    /// objects on it are gone, and the program may have destroyed it.
    #[inline]
    pub(super) fn live(&self) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Err(self.released_error());
        }
        Ok(())
    }

    #[cold]
    fn released_error(&self) -> Error {
        Error::Unavailable {
            backend: TY.backend_name().to_owned(),
            reason: format!(
                "vulkan:{} was released (keel_device::backend::vulkan::release): the program's device is no longer Keel's",
                self.index
            ),
        }
    }

    /// Whether the program released this device.
    pub(super) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Marks the device released (after `interop::release` destroyed
    /// Keel's objects on it).
    pub(super) fn set_released(&self) {
        self.released.store(true, Ordering::Release);
    }

    /// The stream behind `id`, created on first use. Streams are spread
    /// round-robin over the family's queues.
    pub(super) fn stream(&'static self, id: StreamId) -> Result<&'static VkStream> {
        self.live()?;
        self.streams.get_or_create(id, |_| {
            let q = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len();
            VkStream::new(self, q)
        })
    }

    /// The device's streams and the pool's cursors.
    pub(super) fn streams(&self) -> &Streams<VkStream> {
        &self.streams
    }
}

/// What device `c` reports, as device `at`: its adapter's properties and
/// whose device it is. Host data only, so it reads the same after an
/// adopted device is released.
pub(super) fn describe(c: &Ctx, at: Device) -> DeviceProperties {
    let a = &c.adapter;
    let l = &a.props.limits;
    let mut p = DeviceProperties::new(at, a.name.clone(), a.kind);
    p.vendor = vendor_name(a.props.vendor_id).to_owned();
    p.vendor_id = Some(a.props.vendor_id);
    p.device_id = Some(a.props.device_id);
    p.native_backend = version_name(a.props.api_version);
    // `backend/spv.rs`: strict kernels' float operations are decorated
    // `NoContraction`.
    p.strict_float = true;
    p.driver = a.driver_name.clone();
    p.driver_info = a.driver_info.clone();
    p.total_memory = Some(a.device_local_memory);
    p.max_workgroup_size = Some(l.max_compute_work_group_size);
    p.max_workgroup_invocations = Some(l.max_compute_work_group_invocations);
    p.max_workgroup_count = Some(l.max_compute_work_group_count);
    p.shared_memory_per_workgroup = Some(u64::from(l.max_compute_shared_memory_size));
    p.subgroup_size = (a.subgroup_size > 0).then_some(a.subgroup_size);
    p.timestamps = (a.timestamp_valid_bits > 0).then(|| TimestampSupport {
        period_ns: f64::from(l.timestamp_period),
        valid_bits: a.timestamp_valid_bits,
    });
    p.storage_offset_alignment = Some(l.min_storage_buffer_offset_alignment);
    if !a.subgroup_operations.is_empty() {
        // Read by `keel::compute::subgroups_supported`.
        p.extra.push((
            "subgroup operations".to_owned(),
            format!("{:?}", a.subgroup_operations).to_lowercase(),
        ));
    }
    // Read by `keel::compute::f16_storage`.
    p.extra.push((
        "f16 storage".to_owned(),
        if a.f16_storage {
            "native (shaderFloat16, storageBuffer16BitAccess)".to_owned()
        } else {
            "emulated (packed u32 words)".to_owned()
        },
    ));
    if let Some(c) = a.cooperative {
        // Read by `keel::compute::cooperative_matrix_supported`, which
        // picks the kernel by the size; the subgroup width chose it.
        let size = crate::backend::spv::cooperative_fragment_for(c.width).unwrap_or(0);
        let asked = if c.width != a.subgroup_size {
            " (asked for by the pipeline)"
        } else {
            ""
        };
        p.extra.push((
            "cooperative matrix".to_owned(),
            format!(
                "{size}x{size}x{size} f16 x f16 + f32, subgroup scope, subgroups of {}{asked} \
                 (VK_KHR_cooperative_matrix)",
                c.width
            ),
        ));
    }
    p.extra
        .push(("compute queue family".to_owned(), a.family.to_string()));
    p.extra
        .push(("compute queues".to_owned(), a.queue_count.to_string()));
    for (i, f) in a.families.iter().enumerate() {
        p.extra.push((
            format!("queue family {i}"),
            format!(
                "{:?} x{}, timestamp bits {}",
                f.queue_flags, f.queue_count, f.timestamp_valid_bits
            ),
        ));
    }
    p.extra.push((
        "max storage buffer range".to_owned(),
        l.max_storage_buffer_range.to_string(),
    ));
    if let Owner::Program { queue_index } = c.owner {
        let state = if c.is_released() {
            "released"
        } else {
            "in use"
        };
        p.extra.push((
            "adopted".to_owned(),
            format!(
                "the program's VkDevice, Keel submitting to queue {queue_index} of family {} ({state})",
                a.family
            ),
        ));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(
        (m, n, k): (u32, u32, u32),
        ab: vk::ComponentTypeKHR,
        cr: vk::ComponentTypeKHR,
        scope: vk::ScopeKHR,
    ) -> vk::CooperativeMatrixPropertiesKHR<'static> {
        vk::CooperativeMatrixPropertiesKHR::default()
            .m_size(m)
            .n_size(n)
            .k_size(k)
            .a_type(ab)
            .b_type(ab)
            .c_type(cr)
            .result_type(cr)
            .scope(scope)
    }

    /// The kernel's configurations are f16 A and B, f32 C and result, at
    /// subgroup scope: 16 x 16 x 16 for subgroups of 32, 8 x 8 x 8 for
    /// subgroups of 8, and none for other widths; a list holding the one
    /// for the device's width among others has it.
    #[test]
    fn the_cooperative_shape_is_found_only_where_listed() {
        use vk::ComponentTypeKHR as T;
        let sub = vk::ScopeKHR::SUBGROUP;
        let sixteen = shape((16, 16, 16), T::FLOAT16, T::FLOAT32, sub);
        let eight = shape((8, 8, 8), T::FLOAT16, T::FLOAT32, sub);
        let others = [
            shape((16, 16, 16), T::FLOAT16, T::FLOAT16, sub),
            shape((8, 8, 8), T::FLOAT16, T::FLOAT16, sub),
            shape((16, 8, 16), T::FLOAT16, T::FLOAT32, sub),
            shape(
                (16, 16, 16),
                T::FLOAT16,
                T::FLOAT32,
                vk::ScopeKHR::WORKGROUP,
            ),
            shape((16, 16, 32), T::SINT8, T::SINT32, sub),
        ];
        for width in [8, 16, 32, 64] {
            assert_eq!(cooperative_fragment(&[], width), None);
            assert_eq!(cooperative_fragment(&others, width), None);
        }
        assert_eq!(cooperative_fragment(&[sixteen], 32), Some(16));
        assert_eq!(cooperative_fragment(&[sixteen], 8), None);
        assert_eq!(cooperative_fragment(&[sixteen], 64), None);
        assert_eq!(cooperative_fragment(&[eight], 8), Some(8));
        assert_eq!(cooperative_fragment(&[eight], 32), None);
        let mut mixed = others.to_vec();
        mixed.insert(2, sixteen);
        mixed.insert(4, eight);
        assert_eq!(cooperative_fragment(&mixed, 32), Some(16));
        assert_eq!(cooperative_fragment(&mixed, 8), Some(8));
        assert_eq!(cooperative_fragment(&mixed, 16), None);
    }

    /// The kernel runs at the device's own subgroup width where a
    /// configuration fits it, asking for that width only where a pipeline
    /// may; elsewhere at a width a pipeline may ask for (AMD's RDNA GPUs:
    /// 64 by default, 32 to 64 on request, 16 x 16 x 16 at 32), never at
    /// one outside the device's range or whose 128 invocations would be
    /// more subgroups than a workgroup may hold.
    #[test]
    fn the_cooperative_width_is_the_devices_own_or_one_it_may_ask_for() {
        use vk::ComponentTypeKHR as T;
        let sub = vk::ScopeKHR::SUBGROUP;
        let sixteen = [shape((16, 16, 16), T::FLOAT16, T::FLOAT32, sub)];
        let eight = [shape((8, 8, 8), T::FLOAT16, T::FLOAT32, sub)];
        let widths = |default, requestable, max_subgroups| SubgroupWidths {
            default,
            requestable,
            max_subgroups,
        };
        let at = |width, request| Some(Cooperative { width, request });
        // NVIDIA: 32 wide, which a pipeline may also ask for.
        assert_eq!(
            cooperative_width(&sixteen, widths(32, Some((32, 32)), 32)),
            at(32, true)
        );
        assert_eq!(
            cooperative_width(&sixteen, widths(32, None, 32)),
            at(32, false)
        );
        // lavapipe: 8 wide.
        assert_eq!(
            cooperative_width(&eight, widths(8, Some((8, 8)), 32)),
            at(8, true)
        );
        // AMD: 64 by default, 32 asked for.
        assert_eq!(
            cooperative_width(&sixteen, widths(64, Some((32, 64)), 16)),
            at(32, true)
        );
        // ... but not without subgroup size control, nor where 4 subgroups
        // are more than a workgroup may hold.
        assert_eq!(cooperative_width(&sixteen, widths(64, None, 16)), None);
        assert_eq!(
            cooperative_width(&sixteen, widths(64, Some((32, 64)), 3)),
            None
        );
        // Not at a width outside the range, nor one no configuration fits.
        assert_eq!(
            cooperative_width(&sixteen, widths(64, Some((64, 64)), 16)),
            None
        );
        assert_eq!(
            cooperative_width(&eight, widths(32, Some((16, 32)), 32)),
            None
        );
        // The device's own width first: 8 x 8 fragments at 8 wide even
        // where 32 could be asked for.
        let both = [sixteen[0], eight[0]];
        assert_eq!(
            cooperative_width(&both, widths(8, Some((8, 32)), 32)),
            at(8, true)
        );
        assert_eq!(cooperative_width(&[], widths(32, Some((8, 64)), 64)), None);
    }
}
