//! WGSL kernels on Vulkan: naga compiles each kernel's WGSL to SPIR-V once
//! per process; each device caches one compute pipeline per kernel and a
//! descriptor set per (pipeline, bound ranges, parameter ring), so a
//! launch that binds what an earlier one bound creates no Vulkan object:
//! it writes its parameters into a slot of the stream's ring (see
//! `stream.rs`) and binds the cached set at that slot's dynamic offset,
//! as a hand-written Vulkan program would.
//!
//! Binding model (shared with the wgpu backend): the kernel's buffers are
//! storage buffers at `@group(0) @binding(0..n)`, and its parameter block
//! is a uniform buffer at `@binding(n)`, padded with zeros to a multiple of
//! 16 bytes (a dynamic uniform buffer in the set layout).

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use ash::vk;

use super::device::{Ctx, lock, vk_error};
use super::memory::VkBuffer;
use super::stream::{Keep, PARAM_SLOT, VkStream};
use super::{TY, Vulkan};
use crate::backend::typed::{Binding, Kernels};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// Identifies a kernel's SPIR-V: (address, length) of its WGSL text, which
/// is `'static`, so two kernels with one name but different code differ,
/// and its entry point, so two entry points of one WGSL source differ too
/// (the SPIR-V holds only the entry point it was written for).
fn source_key(kernel: &Kernel, wgsl: &'static str) -> SpirvKey {
    (
        wgsl.as_ptr() as usize,
        wgsl.len(),
        kernel.name,
        kernel.strict_float,
    )
}

type Spirv = Result<Arc<Vec<u32>>, String>;
/// A kernel's WGSL source (address, length), entry point and whether its
/// floating point is strict.
pub(super) type SpirvKey = (usize, usize, &'static str, bool);
static SPIRV: LazyLock<Mutex<HashMap<SpirvKey, Spirv>>> = LazyLock::new(Default::default);

/// `kernel`'s WGSL compiled to SPIR-V (cached).
pub fn spirv(kernel: &Kernel) -> Result<Arc<Vec<u32>>> {
    let wgsl = wgsl_of(kernel)?;
    let mut cache = lock(&SPIRV);
    let entry = cache
        .entry(source_key(kernel, wgsl))
        .or_insert_with(|| compile(wgsl, kernel.name, kernel.strict_float).map(Arc::new));
    entry.clone().map_err(|message| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message,
    })
}

fn wgsl_of(kernel: &Kernel) -> Result<&'static str> {
    kernel.wgsl.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: "has no WGSL source, which the Vulkan backend runs".to_owned(),
    })
}

fn compile(wgsl: &str, entry: &str, strict_float: bool) -> Result<Vec<u32>, String> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| format!("WGSL parse error: {}", e.emit_to_string(wgsl)))?;
    let info = crate::backend::spv::validate(&module, wgsl, false)?;
    crate::backend::spv::write(&module, &info, entry, strict_float)
}

/// A compute pipeline with its layouts.
pub(super) struct Pipeline {
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    storage_bindings: u32,
}

/// The pipeline for `kernel` on `ctx` (cached per device and kernel).
fn pipeline(ctx: &'static Ctx, kernel: &Kernel) -> Result<Arc<Pipeline>> {
    let key = source_key(kernel, wgsl_of(kernel)?);
    if let Some(p) = lock(&ctx.pipelines).get(&key) {
        return Ok(Arc::clone(p));
    }
    let code = spirv(kernel)?;
    let p = Arc::new(create(ctx, kernel, &code)?);
    // Two threads may race to create it; either result is a valid pipeline.
    Ok(Arc::clone(lock(&ctx.pipelines).entry(key).or_insert(p)))
}

fn create(ctx: &Ctx, kernel: &Kernel, code: &[u32]) -> Result<Pipeline> {
    let device = &ctx.device;
    let n = u32::try_from(kernel.bindings).map_err(|_| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: format!("too many bindings: {}", kernel.bindings),
    })?;
    let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..=n)
        .map(|i| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(i)
                .descriptor_type(if i < n {
                    vk::DescriptorType::STORAGE_BUFFER
                } else {
                    vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC
                })
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    // SAFETY: object creation on a live device; pipelines are cached for
    // the life of the device (the process).
    let set_layout = unsafe { device.create_descriptor_set_layout(&set_info, None) }
        .map_err(|e| vk_error("vkCreateDescriptorSetLayout", e))?;
    let set_layouts = [set_layout];
    let layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
    // SAFETY: as above.
    let layout = unsafe { device.create_pipeline_layout(&layout_info, None) }
        .map_err(|e| vk_error("vkCreatePipelineLayout", e))?;
    let module_info = vk::ShaderModuleCreateInfo::default().code(code);
    // SAFETY: `code` is SPIR-V produced and validated by naga.
    let module = unsafe { device.create_shader_module(&module_info, None) }
        .map_err(|e| vk_error("vkCreateShaderModule", e))?;
    let entry = std::ffi::CString::new(kernel.name).map_err(|_| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: "the kernel name contains a NUL byte".to_owned(),
    })?;
    // A cooperative-matrix kernel's subgroups are the width its fragments
    // were chosen for (`Adapter::cooperative`): asked for where the
    // device lets a pipeline ask, which a device whose compute subgroups
    // are another width by default needs.
    let mut width = ctx
        .adapter
        .cooperative
        .filter(|c| {
            c.request
                && crate::backend::spv::declares_capability(
                    code,
                    spirv::Capability::CooperativeMatrixKHR,
                )
        })
        .map(|c| {
            vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
                .required_subgroup_size(c.width)
        });
    let mut stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(&entry);
    if let Some(width) = width.as_mut() {
        stage = stage.push_next(width);
    }
    let info = [vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout)];
    // SAFETY: the module, layout and entry name are alive for the call.
    let result = unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
    // SAFETY: the module is no longer needed once the pipeline exists.
    unsafe { device.destroy_shader_module(module, None) };
    let pipeline = result
        .map_err(|(_, e)| vk_error("vkCreateComputePipelines", e))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::backend(TY, "vkCreateComputePipelines returned no pipeline"))?;
    Ok(Pipeline {
        set_layout,
        layout,
        pipeline,
        storage_bindings: n,
    })
}

/// A descriptor set in a pool of its own; the pool is destroyed when the
/// last holder (the cache, launches in flight) lets go.
struct Descriptors {
    ctx: &'static Ctx,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        if self.ctx.is_released() {
            return; // destroyed with the device's other objects
        }
        // SAFETY: no submission uses the set any more: every launch that
        // bound it holds a reference until it has run.
        unsafe { self.ctx.device.destroy_descriptor_pool(self.pool, None) };
    }
}

/// Buffer infos for `buffers` (storage ranges: the binding's bytes, rounded
/// up to 4 within the allocation) then the parameter block (`uniform`,
/// `range` bytes from its start; the launch adds a dynamic offset).
fn buffer_infos(
    buffers: &[Binding<VkBuffer>],
    uniform: vk::Buffer,
    range: u64,
) -> Vec<[vk::DescriptorBufferInfo; 1]> {
    buffers
        .iter()
        .map(|b| {
            let offset = b.offset as u64;
            let range = (b.len as u64)
                .next_multiple_of(4)
                .min(b.buffer.size - offset);
            [vk::DescriptorBufferInfo::default()
                .buffer(b.buffer.buffer)
                .offset(offset)
                .range(range)]
        })
        .chain(std::iter::once([vk::DescriptorBufferInfo::default()
            .buffer(uniform)
            .offset(0)
            .range(range)]))
        .collect()
}

/// A descriptor set of `p`'s layout binding `infos` (storage buffers, then
/// the dynamic uniform).
fn descriptors(
    ctx: &'static Ctx,
    p: &Pipeline,
    infos: &[[vk::DescriptorBufferInfo; 1]],
) -> Result<Descriptors> {
    let device = &ctx.device;
    let mut sizes = vec![
        vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC)
            .descriptor_count(1),
    ];
    if p.storage_bindings > 0 {
        sizes.push(
            vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(p.storage_bindings),
        );
    }
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(1)
        .pool_sizes(&sizes);
    // SAFETY: object creation on a live device; destroyed by `Descriptors`.
    let pool = unsafe { device.create_descriptor_pool(&info, None) }
        .map_err(|e| vk_error("vkCreateDescriptorPool", e))?;
    let layouts = [p.set_layout];
    let alloc = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: the pool has room for exactly this set.
    let set = match unsafe { device.allocate_descriptor_sets(&alloc) } {
        Ok(sets) => sets[0],
        Err(e) => {
            // SAFETY: the pool is unused.
            unsafe { device.destroy_descriptor_pool(pool, None) };
            return Err(vk_error("vkAllocateDescriptorSets", e));
        }
    };
    let d = Descriptors { ctx, pool, set };
    let uniform = infos.len() - 1;
    let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
        .iter()
        .enumerate()
        .map(|(i, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(d.set)
                .dst_binding(i as u32)
                .descriptor_type(if i < uniform {
                    vk::DescriptorType::STORAGE_BUFFER
                } else {
                    vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC
                })
                .buffer_info(info)
        })
        .collect();
    // SAFETY: every buffer is alive and non-null (callers bind no
    // zero-sized buffers), and the set is not in use yet (nor ever
    // updated again).
    unsafe { device.update_descriptor_sets(&writes, &[]) };
    Ok(d)
}

/// Destroys every cached descriptor set and pipeline of `ctx`, for
/// `interop::release`.
///
/// # Safety
///
/// No submission that uses them is pending (launches in flight hold their
/// set and pipeline until retired), and none is made again (the device is
/// marked released right after).
pub(super) unsafe fn destroy_pipelines(ctx: &Ctx) {
    let sets = std::mem::take(&mut lock(&ctx.sets).sets);
    drop(sets); // each set's pool is destroyed as its last holder goes
    let pipelines = std::mem::take(&mut *lock(&ctx.pipelines));
    for p in pipelines.into_values() {
        // SAFETY: no pending submission uses the pipeline (the caller's
        // promise), and the cache held the last reference that creates
        // work with it.
        unsafe {
            ctx.device.destroy_pipeline(p.pipeline, None);
            ctx.device.destroy_pipeline_layout(p.layout, None);
            ctx.device.destroy_descriptor_set_layout(p.set_layout, None);
        }
    }
}

/// Cached descriptor sets a device keeps at most; beyond it the least
/// recently used goes (launches in flight keep theirs alive).
const CACHED_SETS: usize = 256;

/// What a cached set binds: the pipeline, each storage range (buffer
/// object address, offset, range) and the parameter ring.
type SetKey = (usize, SmallVec<[(usize, u64, u64); 4]>, vk::Buffer);

struct CachedSet {
    set: Arc<Descriptors>,
    /// The bound buffers, held weakly: a cached set never keeps memory
    /// alive. While these exist no other buffer can have their addresses,
    /// so a key that matches a live binding names the same buffers.
    buffers: Vec<Weak<VkBuffer>>,
    last_used: u64,
}

/// A device's descriptor sets, cached per [`SetKey`].
#[derive(Default)]
pub(super) struct SetCache {
    sets: FxHashMap<SetKey, CachedSet>,
    clock: u64,
}

impl SetCache {
    /// The cached set for `key`, marked used.
    fn get(&mut self, key: &SetKey) -> Option<Arc<Descriptors>> {
        self.clock += 1;
        let clock = self.clock;
        let entry = self.sets.get_mut(key)?;
        entry.last_used = clock;
        Some(Arc::clone(&entry.set))
    }

    /// Caches `set` for `key`, dropping the sets of freed buffers and, when
    /// full, the least recently used.
    fn insert(&mut self, key: SetKey, set: Arc<Descriptors>, buffers: &[Binding<VkBuffer>]) {
        if self.sets.len() >= CACHED_SETS {
            self.sets
                .retain(|_, e| e.buffers.iter().all(|b| b.strong_count() > 0));
        }
        if self.sets.len() >= CACHED_SETS
            && let Some(oldest) = self
                .sets
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
        {
            self.sets.remove(&oldest);
        }
        self.sets.insert(
            key,
            CachedSet {
                set,
                buffers: buffers.iter().map(|b| Arc::downgrade(&b.buffer)).collect(),
                last_used: self.clock,
            },
        );
    }
}

/// What a launch keeps alive until it has run.
struct LaunchKeep {
    _pipeline: Arc<Pipeline>,
    _set: Arc<Descriptors>,
    _buffers: SmallVec<[Arc<VkBuffer>; 4]>,
    /// A parameter block too large for a ring slot.
    _params: Option<VkBuffer>,
}

/// The parameter block padded to a multiple of 16 bytes (at least 16).
fn padded_params(params: &[u8]) -> Vec<u8> {
    let len = params.len().max(1).div_ceil(16) * 16;
    let mut v = params.to_vec();
    v.resize(len, 0);
    v
}

impl Kernels for Vulkan {
    /// `minStorageBufferOffsetAlignment`.
    fn binding_alignment(&self, stream: &'static VkStream) -> u64 {
        stream
            .ctx
            .adapter
            .props
            .limits
            .min_storage_buffer_offset_alignment
    }

    /// Buffers bound in order as storage buffers, `params` as the uniform
    /// block.
    fn enqueue_kernel(
        &self,
        stream: &'static VkStream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Binding<VkBuffer>],
        params: &[u8],
    ) -> Result<()> {
        let c = stream.ctx;
        let limits = c.adapter.props.limits.max_compute_work_group_count;
        if (0..3).any(|i| grid[i] > limits[i]) {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "grid {grid:?} exceeds the device's maximum workgroup count {limits:?}"
                ),
            });
        }
        if let Some(i) = buffers.iter().position(|b| b.len == 0) {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!("binding {i} is an empty buffer, which Vulkan cannot bind"),
            });
        }
        let p = pipeline(c, kernel)?;
        if grid.contains(&0) {
            return Ok(()); // nothing to run
        }
        let padded = params.len().max(1).div_ceil(16) * 16;
        let (set, own_params) = if padded <= PARAM_SLOT {
            // The usual case: a cached set over the stream's ring.
            let ring = stream.param_ring()?;
            let key: SetKey = (
                Arc::as_ptr(&p) as usize,
                buffers
                    .iter()
                    .map(|b| {
                        (
                            Arc::as_ptr(&b.buffer) as usize,
                            b.offset as u64,
                            b.len as u64,
                        )
                    })
                    .collect(),
                ring,
            );
            let cached = lock(&c.sets).get(&key);
            let set = match cached {
                Some(set) => set,
                None => {
                    let infos = buffer_infos(buffers, ring, PARAM_SLOT as u64);
                    let set = Arc::new(descriptors(c, &p, &infos)?);
                    lock(&c.sets).insert(key, Arc::clone(&set), buffers);
                    set
                }
            };
            (set, None)
        } else {
            // A large parameter block: a buffer and a set of its own.
            let block = VkBuffer::upload(
                c,
                &padded_params(params),
                vk::BufferUsageFlags::UNIFORM_BUFFER,
            )?;
            let infos = buffer_infos(buffers, block.buffer, vk::WHOLE_SIZE);
            (Arc::new(descriptors(c, &p, &infos)?), Some(block))
        };
        let (pipeline, layout, vk_set) = (p.pipeline, p.layout, set.set);
        let in_ring = own_params.is_none();
        let keep: Keep = Box::new(LaunchKeep {
            _pipeline: p,
            _set: set,
            _buffers: buffers.iter().map(|b| Arc::clone(&b.buffer)).collect(),
            _params: own_params,
        });
        let compute = vk::PipelineBindPoint::COMPUTE;
        stream.submit_with_params(
            in_ring.then_some(params),
            |d, cb, offset| {
                // SAFETY: pipeline, layout and descriptor set are alive
                // (kept until the dispatch ran) and match each other; the
                // dynamic offset is a ring slot's (aligned to
                // minUniformBufferOffsetAlignment, a slot's bytes within
                // the ring) or 0 for a block of its own; every bound buffer
                // is non-empty; the grid is within the device's limits.
                unsafe {
                    d.cmd_bind_pipeline(cb, compute, pipeline);
                    d.cmd_bind_descriptor_sets(cb, compute, layout, 0, &[vk_set], &[offset]);
                    d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
                }
            },
            smallvec::smallvec![keep],
        )?;
        Ok(())
    }
}
