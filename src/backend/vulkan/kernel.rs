//! WGSL kernels on Vulkan: naga compiles each kernel's WGSL to SPIR-V once
//! per process; each device caches one compute pipeline per kernel; a
//! launch binds its buffers with push descriptors where the driver has
//! them, or a descriptor set of its own.
//!
//! Binding model (shared with the wgpu backend): the kernel's buffers are
//! storage buffers at `@group(0) @binding(0..n)`, and its parameter block
//! is a uniform buffer at `@binding(n)`, padded with zeros to a multiple of
//! 16 bytes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use ash::vk;

use super::device::{Ctx, lock, vk_error};
use super::memory::VkBuffer;
use super::stream::{Keep, VkStream};
use super::{TY, Vulkan};
use crate::backend::typed::{Binding, Kernels};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// Identifies a kernel's SPIR-V: (address, length) of its WGSL text, which
/// is `'static`, so two kernels with one name but different code differ,
/// and its entry point, so two entry points of one WGSL source differ too
/// (the SPIR-V holds only the entry point it was written for).
fn source_key(wgsl: &'static str, entry: &'static str) -> SpirvKey {
    (wgsl.as_ptr() as usize, wgsl.len(), entry)
}

type Spirv = Result<Arc<Vec<u32>>, String>;
/// A kernel's WGSL source (address, length) and entry point.
pub(super) type SpirvKey = (usize, usize, &'static str);
static SPIRV: LazyLock<Mutex<HashMap<SpirvKey, Spirv>>> = LazyLock::new(Default::default);

/// `kernel`'s WGSL compiled to SPIR-V (cached).
pub fn spirv(kernel: &Kernel) -> Result<Arc<Vec<u32>>> {
    let wgsl = wgsl_of(kernel)?;
    let mut cache = lock(&SPIRV);
    let entry = cache
        .entry(source_key(wgsl, kernel.name))
        .or_insert_with(|| compile(wgsl, kernel.name).map(Arc::new));
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

fn compile(wgsl: &str, entry: &str) -> Result<Vec<u32>, String> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| format!("WGSL parse error: {}", e.emit_to_string(wgsl)))?;
    // Subgroup operations are allowed in any kernel; a launch function
    // picks a kernel that uses them only where the device reports them
    // (`keel::compute::subgroups_supported`).
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::SUBGROUP,
    )
    .validate(&module)
    .map_err(|e| format!("WGSL validation error: {}", e.emit_to_string(wgsl)))?;
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_owned(),
    };
    naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
        .map_err(|e| format!("SPIR-V generation failed: {e}"))
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
    let key = source_key(wgsl_of(kernel)?, kernel.name);
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
                    vk::DescriptorType::UNIFORM_BUFFER
                })
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let flags = if ctx.push_descriptor.is_some() {
        vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
    } else {
        vk::DescriptorSetLayoutCreateFlags::empty()
    };
    let set_info = vk::DescriptorSetLayoutCreateInfo::default()
        .flags(flags)
        .bindings(&bindings);
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
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(&entry);
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

/// A descriptor pool holding one launch's set; destroyed when the launch
/// has run.
struct Descriptors {
    ctx: &'static Ctx,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: the pool is no longer used by any submission (it is
        // dropped after the launch that used it completed).
        unsafe { self.ctx.device.destroy_descriptor_pool(self.pool, None) };
    }
}

/// Buffer infos for `buffers` (storage ranges: the binding's bytes, rounded
/// up to 4 within the allocation) then `params` (uniform, whole).
fn buffer_infos(
    buffers: &[Binding<VkBuffer>],
    params: &VkBuffer,
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
            .buffer(params.buffer)
            .offset(0)
            .range(vk::WHOLE_SIZE)]))
        .collect()
}

/// Descriptor writes for `infos` (the last one is the uniform) into `set`
/// (null for push descriptors).
fn writes(
    set: vk::DescriptorSet,
    infos: &[[vk::DescriptorBufferInfo; 1]],
) -> Vec<vk::WriteDescriptorSet<'_>> {
    let uniform = infos.len() - 1;
    infos
        .iter()
        .enumerate()
        .map(|(i, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(i as u32)
                .descriptor_type(if i < uniform {
                    vk::DescriptorType::STORAGE_BUFFER
                } else {
                    vk::DescriptorType::UNIFORM_BUFFER
                })
                .buffer_info(info)
        })
        .collect()
}

/// A descriptor set binding `infos` (storage buffers, then the uniform),
/// for drivers without push descriptors.
fn descriptors(
    ctx: &'static Ctx,
    p: &Pipeline,
    infos: &[[vk::DescriptorBufferInfo; 1]],
) -> Result<Descriptors> {
    let device = &ctx.device;
    let mut sizes = vec![
        vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::UNIFORM_BUFFER)
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
    // SAFETY: every buffer is alive and non-null (callers bind no
    // zero-sized buffers), and the set is not in use yet.
    unsafe { device.update_descriptor_sets(&writes(d.set, infos), &[]) };
    Ok(d)
}

/// Bytes of every reusable parameter buffer: parameter blocks up to this
/// size reuse buffers; larger ones get their own.
const PARAM_BUFFER_SIZE: usize = 256;

/// A parameter buffer that goes back to its device's free list when the
/// launch that used it has run.
struct ParamBuffer {
    buffer: Option<VkBuffer>,
    reusable: bool,
}

impl ParamBuffer {
    /// A uniform buffer holding `params` (padded), reused when possible.
    pub fn new(ctx: &'static Ctx, params: &[u8]) -> Result<ParamBuffer> {
        let padded = padded_params(params);
        if padded.len() > PARAM_BUFFER_SIZE {
            let b = VkBuffer::upload(ctx, &padded, vk::BufferUsageFlags::UNIFORM_BUFFER)?;
            return Ok(ParamBuffer {
                buffer: Some(b),
                reusable: false,
            });
        }
        let recycled = lock(&ctx.param_buffers).pop();
        let b = match recycled {
            Some(b) => b,
            None => VkBuffer::upload(
                ctx,
                &[0u8; PARAM_BUFFER_SIZE],
                vk::BufferUsageFlags::UNIFORM_BUFFER,
            )?,
        };
        b.with_mapped(|m| {
            m[..padded.len()].copy_from_slice(&padded);
            m[padded.len()..].fill(0);
        })?;
        Ok(ParamBuffer {
            buffer: Some(b),
            reusable: true,
        })
    }
}

impl Drop for ParamBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take()
            && self.reusable
        {
            let ctx = b.ctx;
            lock(&ctx.param_buffers).push(b);
        }
    }
}

/// The parameter block padded to a multiple of 16 bytes (at least 16).
fn padded_params(params: &[u8]) -> Vec<u8> {
    let len = params.len().max(1).div_ceil(16) * 16;
    let mut v = params.to_vec();
    v.resize(len, 0);
    v
}

impl Kernels for Vulkan {
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
        let params = ParamBuffer::new(c, params)?;
        if grid.contains(&0) {
            return Ok(()); // nothing to run
        }
        let uniform = params
            .buffer
            .as_ref()
            .ok_or_else(|| Error::backend(TY, "a parameter buffer went missing"))?;
        let align = c
            .adapter
            .props
            .limits
            .min_storage_buffer_offset_alignment
            .max(1);
        if let Some(b) = buffers
            .iter()
            .find(|b| !(b.offset as u64).is_multiple_of(align))
        {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "a binding at offset {} is not aligned to the device's minStorageBufferOffsetAlignment ({align} bytes)",
                    b.offset
                ),
            });
        }
        let infos = buffer_infos(buffers, uniform);
        let sets = match c.push_descriptor {
            Some(_) => None,
            None => Some(descriptors(c, &p, &infos)?),
        };
        let set = sets.as_ref().map(|s| s.set);
        let writes = writes(vk::DescriptorSet::null(), &infos);
        let (pipeline, layout) = (p.pipeline, p.layout);
        let mut keep: Vec<Keep> = vec![Box::new(params), Box::new(p)];
        keep.extend(sets.map(|s| Box::new(s) as Keep));
        keep.extend(
            buffers
                .iter()
                .map(|b| Box::new(Arc::clone(&b.buffer)) as Keep),
        );
        let compute = vk::PipelineBindPoint::COMPUTE;
        stream.submit(
            |d, cb| {
                // SAFETY: pipeline, layout and the bindings (descriptor set or
                // pushed buffers) are alive (kept until the dispatch ran) and
                // match each other; every bound buffer is non-empty; the grid is
                // within the device's limits.
                unsafe {
                    d.cmd_bind_pipeline(cb, compute, pipeline);
                    if let Some(set) = set {
                        d.cmd_bind_descriptor_sets(cb, compute, layout, 0, &[set], &[]);
                    } else if let Some(push) = &c.push_descriptor {
                        push.cmd_push_descriptor_set(cb, compute, layout, 0, &writes);
                    }
                    d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
                }
            },
            keep,
        )?;
        Ok(())
    }
}
