//! WGSL kernels on wgpu: one compute pipeline per (device, kernel), with
//! the layout wgpu derives from the shader. The binding model is the one
//! the Vulkan backend uses: buffers are storage bindings `0..n` of group 0,
//! the parameter block a uniform at binding `n`, padded with zeros to a
//! multiple of 16 bytes. Every declared binding must be used by the shader
//! (wgpu drops unused ones from derived layouts).
//!
//! Each launch gets its own parameter buffer. (A single shared one
//! rewritten with `queue.write_buffer` before each submission made the
//! conformance suite flaky, as if a running launch saw a later launch's
//! parameters; not worth the risk for the gain.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::{WgpuDevice, lock};
use super::memory::WgpuBuffer;
use super::stream::{QueueStream, Stamps};
use super::{TY, Wgpu};
use crate::backend::typed::{Binding, Kernels, check_disjoint_bindings};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// A kernel's WGSL source (address, length) and entry point.
type SourceKey = (usize, usize, &'static str);

fn source_key(wgsl: &'static str, entry: &'static str) -> SourceKey {
    (wgsl.as_ptr() as usize, wgsl.len(), entry)
}

/// A device's pipelines, by WGSL source (address and length) and entry
/// point (one source may hold several).
#[derive(Default)]
pub(super) struct Pipelines(Mutex<HashMap<SourceKey, Arc<Pipeline>>>);

/// A compute pipeline and the layout of its bind group 0 (asked for once).
pub(super) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// `wgsl` with every storage variable declared `read_write`
/// (`var<storage>` and `var<storage, read>` included). wgpu tracks usage
/// per buffer, not per range: a read-only binding and a read-write one of
/// two buffers in one allocator segment conflict ("conflicting usages"),
/// while read-write bindings of disjoint ranges do not. A kernel that only
/// reads a variable is unaffected by its declared access.
fn storage_read_write(wgsl: &str) -> std::borrow::Cow<'_, str> {
    let mut out = String::with_capacity(wgsl.len() + 64);
    let mut rest = wgsl;
    let mut changed = false;
    while let Some(i) = rest.find("var") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        rest = tail;
        let after = tail.trim_start();
        let ident_before = head[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if ident_before || !after.starts_with('<') {
            continue;
        }
        let Some(close) = after.find('>') else {
            continue;
        };
        let inner = &after[1..close];
        if inner.split(',').next().map(str::trim) == Some("storage") {
            out.push_str("<storage, read_write>");
            rest = &after[close + 1..];
            changed = true;
        }
    }
    out.push_str(rest);
    if changed {
        std::borrow::Cow::Owned(out)
    } else {
        std::borrow::Cow::Borrowed(wgsl)
    }
}

/// The pipeline for `kernel` on `d` (cached).
pub(super) fn pipeline(d: &WgpuDevice, kernel: &Kernel) -> Result<Arc<Pipeline>> {
    let wgsl = kernel.wgsl.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: "has no WGSL source, which the wgpu backend runs".to_owned(),
    })?;
    let key = source_key(wgsl, kernel.name);
    if let Some(p) = lock(&d.pipelines.0).get(&key) {
        return Ok(Arc::clone(p));
    }
    // Validate first with naga-style errors from wgpu's own front end,
    // inside an error scope so a bad kernel is an error, not a panic. GL
    // compiles here, holding its context (Note [GL context lock]).
    // The guard lives to the end: a pipeline that loses the race to the
    // cache, or that wgpu rejected, is freed under it.
    let _exclusive = d.gl.exclusive();
    if _exclusive.is_some()
        && let Some(p) = lock(&d.pipelines.0).get(&key)
    {
        // Another thread compiled it while this one waited for the lock.
        return Ok(Arc::clone(p));
    }
    let scope = d.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = d.device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(kernel.name),
        source: wgpu::ShaderSource::Wgsl(storage_read_write(wgsl)),
    });
    // An explicit layout with every storage binding read-write (the source
    // declares them so, see `storage_read_write`).
    let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only: false },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let n = u32::try_from(kernel.bindings).unwrap_or(u32::MAX);
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0..n)
        .map(storage)
        .chain(std::iter::once(wgpu::BindGroupLayoutEntry {
            binding: n,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }))
        .collect();
    let layout = d
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(kernel.name),
            entries: &entries,
        });
    let pipeline_layout = d
        .device
        .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.name),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
    let pipeline = d
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: Some(&pipeline_layout),
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
    let p = Arc::new(Pipeline { pipeline, layout });
    Ok(Arc::clone(lock(&d.pipelines.0).entry(key).or_insert(p)))
}

/// The parameter block padded to a multiple of 16 bytes (at least 16).
fn padded_params(params: &[u8]) -> Vec<u8> {
    let len = params.len().max(1).div_ceil(16) * 16;
    let mut v = params.to_vec();
    v.resize(len, 0);
    v
}

/// A uniform buffer holding `params`.
fn params_buffer(d: &WgpuDevice, params: &[u8]) -> Result<wgpu::Buffer> {
    let data = padded_params(params);
    let _shared = d.gl.shared();
    let b = d.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("keel params"),
        size: data.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: true,
    });
    b.slice(..)
        .get_mapped_range_mut()
        .map_err(|e| Error::backend(TY, format!("mapping a parameter buffer: {e}")))?
        .copy_from_slice(&data);
    b.unmap();
    Ok(b)
}

/// Records into `encoder` a dispatch of `pipeline` over `grid`, with
/// the ranges `buffers` (buffer, offset, length) bound in order and a
/// parameter buffer of its own holding `params`. A range's length is
/// rounded up to 4 bytes (wgpu's storage binding granularity) within its
/// buffer; a whole buffer is bound as such. The compute pass writes
/// `stamps` (a profiler bracket's timestamps), if given.
pub(super) fn record_dispatch(
    d: &WgpuDevice,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &Pipeline,
    grid: [u32; 3],
    buffers: &[(&wgpu::Buffer, u64, u64)],
    params: &[u8],
    stamps: Option<&Stamps<'_>>,
) -> Result<()> {
    let uniform = params_buffer(d, params)?;
    let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
        .iter()
        .map(|&(b, offset, len)| {
            let size = len.next_multiple_of(4).min(b.size() - offset);
            if offset == 0 && size == b.size() {
                b.as_entire_binding()
            } else {
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: b,
                    offset,
                    size: wgpu::BufferSize::new(size),
                })
            }
        })
        .chain(std::iter::once(uniform.as_entire_binding()))
        .enumerate()
        .map(|(i, resource)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource,
        })
        .collect();
    let group = d.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.layout,
        entries: &entries,
    });
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: None,
        timestamp_writes: stamps.map(|s| wgpu::ComputePassTimestampWrites {
            query_set: s.query_set,
            beginning_of_pass_write_index: s.start,
            end_of_pass_write_index: Some(s.end),
        }),
    });
    pass.set_pipeline(&pipeline.pipeline);
    pass.set_bind_group(0, &group, &[]);
    pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
    Ok(())
}

/// Checks a grid against the device's limit per dimension.
fn check_grid(d: &WgpuDevice, kernel: &Kernel, grid: [u32; 3]) -> Result<()> {
    let max = d.limits.max_compute_workgroups_per_dimension;
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

impl Kernels for Wgpu {
    /// `buffers` must not overlap (checked here); offsets must meet the
    /// device's `min_storage_buffer_offset_alignment` (checked here too).
    fn enqueue_kernel(
        &self,
        stream: &'static QueueStream,
        kernel: &Kernel,
        grid: [u32; 3],
        buffers: &[Binding<WgpuBuffer>],
        params: &[u8],
    ) -> Result<()> {
        let d = stream.device();
        check_grid(d, kernel, grid)?;
        check_disjoint_bindings(kernel, buffers, "wgpu needs disjoint bindings")?;
        let align = u64::from(d.limits.min_storage_buffer_offset_alignment.max(1));
        if let Some(b) = buffers
            .iter()
            .find(|b| !(b.offset as u64).is_multiple_of(align))
        {
            return Err(Error::Kernel {
                kernel: kernel.name.to_owned(),
                message: format!(
                    "a binding at offset {} is not aligned to the device's min_storage_buffer_offset_alignment ({align} bytes)",
                    b.offset
                ),
            });
        }
        let pipeline = pipeline(d, kernel)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let raw: Vec<(&wgpu::Buffer, u64, u64)> = buffers
            .iter()
            .map(|b| (b.buffer.raw(), b.offset as u64, b.len as u64))
            .collect();
        let mut enc = d.encoder();
        // A profiled launch's span: its own pass writes the timestamps.
        let stamps = stream.stamps();
        record_dispatch(d, &mut enc, &pipeline, grid, &raw, params, stamps.as_ref())?;
        // A binding the shader does not accept is a wgpu validation error,
        // reported by `submit` (through the uncaptured-error handler).
        let submitted = if stamps.is_some() {
            stream.submit_stamped(enc)
        } else {
            stream.submit(enc)
        };
        submitted.map_err(|e| Error::Kernel {
            kernel: kernel.name.to_owned(),
            message: format!("wgpu rejected the launch: {e}"),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn storage_variables_become_read_write() {
        let src = "@group(0) @binding(0) var<storage, read> a: array<f32>;\n\
                   @group(0) @binding(1) var <storage> b: array<f32>;\n\
                   @group(0) @binding(2) var<storage,read_write> c: array<f32>;\n\
                   @group(0) @binding(3) var<uniform> p: P;\n\
                   fn f() { var x = 1; var<function> y: i32; let avar = 2; }";
        let out = super::storage_read_write(src);
        assert_eq!(out.matches("var<storage, read_write>").count(), 3, "{out}");
        assert!(out.contains("var<uniform> p"), "{out}");
        assert!(
            out.contains("var<function> y") && out.contains("var x = 1"),
            "{out}"
        );
    }
}
