//! WGSL kernels on wgpu: one compute pipeline per (device, kernel), with
//! the layout wgpu derives from the shader. The binding model is the one
//! the Vulkan backend uses: buffers are storage bindings `0..n` of group 0,
//! the parameter block a uniform at binding `n`, padded with zeros to a
//! multiple of 16 bytes. Every declared binding must be used by the shader
//! (wgpu drops unused ones from derived layouts).

use std::sync::Arc;

use super::device::{Ctx, lock};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

fn source_key(wgsl: &'static str) -> (usize, usize) {
    (wgsl.as_ptr() as usize, wgsl.len())
}

/// A compute pipeline and the layout of its bind group 0 (asked for once).
pub(super) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// The pipeline for `kernel` on `ctx` (cached).
pub(super) fn pipeline(ctx: &Ctx, kernel: &Kernel) -> Result<Arc<Pipeline>> {
    let wgsl = kernel.wgsl.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: "has no WGSL source, which the wgpu backend runs".to_owned(),
    })?;
    let key = source_key(wgsl);
    if let Some(p) = lock(&ctx.pipelines).get(&key) {
        return Ok(Arc::clone(p));
    }
    // Validate first with naga-style errors from wgpu's own front end,
    // inside an error scope so a bad kernel is an error, not a panic.
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = ctx
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
    let pipeline = ctx
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: None,
            module: &module,
            entry_point: Some(kernel.name),
            compilation_options: Default::default(),
            cache: None,
        });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(Error::Kernel {
            kernel: kernel.name.to_owned(),
            message: format!("WGSL rejected by wgpu: {e}"),
        });
    }
    let layout = pipeline.get_bind_group_layout(0);
    let p = Arc::new(Pipeline { pipeline, layout });
    Ok(Arc::clone(lock(&ctx.pipelines).entry(key).or_insert(p)))
}

/// The parameter block padded to a multiple of 16 bytes (at least 16).
pub(super) fn padded_params(params: &[u8]) -> Vec<u8> {
    let len = params.len().max(1).div_ceil(16) * 16;
    let mut v = params.to_vec();
    v.resize(len, 0);
    v
}

/// A uniform buffer holding `params`.
pub(super) fn params_buffer(ctx: &Ctx, params: &[u8]) -> Result<wgpu::Buffer> {
    let data = padded_params(params);
    let b = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("keel params"),
        size: data.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: true,
    });
    b.slice(..)
        .get_mapped_range_mut()
        .map_err(|e| {
            Error::backend(
                crate::DeviceType::Wgpu,
                format!("mapping a parameter buffer: {e}"),
            )
        })?
        .copy_from_slice(&data);
    b.unmap();
    Ok(b)
}

/// Records a dispatch of `pipeline` over `grid` with `buffers` bound and
/// `uniform` as the parameter block, into `encoder`.
pub(super) fn record_dispatch_with(
    ctx: &Ctx,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &Pipeline,
    grid: [u32; 3],
    buffers: &[&wgpu::Buffer],
    uniform: &wgpu::Buffer,
) {
    let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
        .iter()
        .copied()
        .chain(std::iter::once(uniform))
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: b.as_entire_binding(),
        })
        .collect();
    let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.layout,
        entries: &entries,
    });
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: None,
        timestamp_writes: None,
    });
    pass.set_pipeline(&pipeline.pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
}

/// Records a dispatch with a parameter buffer of its own (for work that is
/// recorded before the submission lock is taken).
pub(super) fn record_dispatch(
    ctx: &Ctx,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &Pipeline,
    grid: [u32; 3],
    buffers: &[&wgpu::Buffer],
    params: &[u8],
) -> Result<()> {
    let uniform = params_buffer(ctx, params)?;
    record_dispatch_with(ctx, encoder, pipeline, grid, buffers, &uniform);
    Ok(())
}

/// Checks a grid against the device's limit per dimension.
pub(super) fn check_grid(ctx: &Ctx, kernel: &Kernel, grid: [u32; 3]) -> Result<()> {
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    if grid.iter().any(|&g| g > max) {
        return Err(Error::Kernel {
            kernel: kernel.name.to_owned(),
            message: format!(
                "grid {grid:?} exceeds the device's maximum workgroup count {max} per dimension"
            ),
        });
    }
    Ok(())
}

/// The byte-copy kernel (`shaders/copy_bytes.wgsl`) for copies whose
/// offsets or size are not multiples of 4.
pub(super) const COPY_BYTES: Kernel = Kernel {
    name: "copy_bytes",
    workgroup_size: [64, 1, 1],
    bindings: 2,
    wgsl: Some(include_str!("../../../shaders/copy_bytes.wgsl")),
    ptx: None,
    cpu: None,
};
