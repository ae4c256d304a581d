//! WGSL kernels on wgpu: one compute pipeline per (device, kernel). The
//! binding model is the one the Vulkan backend uses: buffers are storage
//! bindings `0..n` of group 0, the parameter block a uniform at binding
//! `n`, padded with zeros. Every declared binding must be used by the
//! shader.
//!
//! # Note [wgpu parameter blocks]
//!
//! Where the device offers immediate data (`Features::IMMEDIATES`: push
//! constants on Vulkan, uniforms that wgpu sets itself on GL) and the
//! block fits (`Limits::max_immediate_size`), the kernel's uniform is
//! rewritten in naga's IR into an immediate (`var<immediate>`, no binding)
//! and each launch records its parameters into its own compute pass
//! (`set_immediates`). Nothing is shared between launches, so a running
//! launch cannot see a later launch's parameters, as it can when one
//! uniform buffer is rewritten with `queue.write_buffer` for every launch
//! (the conformance suite's results turn flaky). The bind group then
//! holds only the storage ranges, and is cached per pipeline by those
//! ranges ([`BindGroups`]): the caching allocator hands the same blocks
//! out again, so a loop of launches creates its groups once. Elsewhere
//! (no immediates, a block too large) each launch creates a uniform
//! buffer of its own, and a group: on llvmpipe's GL those two are about a
//! fifth of a small launch's host time, which is why immediates come
//! first (docs/BENCHMARKS.md, 2026-11-25 and 2026-11-26, issue 15).

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::device::{WgpuDevice, lock};
use super::memory::WgpuBuffer;
use super::stream::{QueueStream, Stamps};
use super::{TY, Wgpu};
use crate::backend::typed::{Binding, Kernels, check_disjoint_bindings};
use crate::error::{Error, Result};
use crate::kernel::Kernel;

/// A kernel's WGSL source (address, length), entry point and whether its
/// floating point is strict.
type SourceKey = (usize, usize, &'static str, bool);

fn source_key(kernel: &Kernel, wgsl: &'static str) -> SourceKey {
    (
        wgsl.as_ptr() as usize,
        wgsl.len(),
        kernel.name,
        kernel.strict_float,
    )
}

/// A device's pipelines, by WGSL source (address and length), entry point
/// (one source may hold several) and strictness.
#[derive(Default)]
pub(super) struct Pipelines(Mutex<FxHashMap<SourceKey, Arc<Pipeline>>>);

/// A compute pipeline, the layout of its bind group 0 (asked for once),
/// how its launches pass their parameters and its cached bind groups.
pub(super) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    params: Params,
    groups: BindGroups,
}

/// How a pipeline's launches pass their parameter block (Note [wgpu
/// parameter blocks]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Params {
    /// Immediate data of this many bytes, a multiple of 4 (0: the kernel
    /// declares no parameter block).
    Immediate { size: u32 },
    /// A uniform buffer of the launch's own at binding `n`, of at least
    /// `size` bytes (the block as the kernel declares it).
    UniformBuffer { size: u32 },
}

/// Whether `ty` can be immediate data on every backend: 32-bit scalars
/// and vectors of them, and structs of those (the parameter blocks'
/// shape). wgpu's GL backend sets each member with a `glUniform` call.
fn immediate_compatible(module: &naga::Module, ty: naga::Handle<naga::Type>) -> bool {
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(s) | naga::TypeInner::Vector { scalar: s, .. } => s.width == 4,
        naga::TypeInner::Struct { members, .. } => {
            members.iter().all(|m| immediate_compatible(module, m.ty))
        }
        _ => false,
    }
}

/// `kernel`'s WGSL parsed into naga's IR and prepared for wgpu, with how
/// its launches pass their parameters:
///
/// - every storage variable is made read-write (`var<storage>` and
///   `var<storage, read>` included). wgpu tracks usage per buffer, not per
///   range: a read-only binding and a read-write one of two buffers in one
///   allocator segment conflict ("conflicting usages"), while read-write
///   bindings of disjoint ranges do not. A kernel that only reads a
///   variable is unaffected by its declared access;
/// - the uniform at binding `n` (the parameter block) becomes immediate
///   data where it fits in `max_immediate` bytes and its type allows
///   (Note [wgpu parameter blocks]).
fn prepare(kernel: &Kernel, wgsl: &str, max_immediate: u32) -> Result<(naga::Module, Params)> {
    let mut module = naga::front::wgsl::parse_str(wgsl).map_err(|e| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: format!("WGSL rejected: {}", e.emit_to_string(wgsl)),
    })?;
    let n = u32::try_from(kernel.bindings).unwrap_or(u32::MAX);
    let at_n = Some(naga::ResourceBinding {
        group: 0,
        binding: n,
    });
    let block = module
        .global_variables
        .iter()
        .find(|(_, v)| v.space == naga::AddressSpace::Uniform && v.binding == at_n)
        .map(|(h, v)| (h, v.ty));
    let params = match block {
        None => Params::Immediate { size: 0 },
        Some((var, ty)) => {
            let size = module.types[ty]
                .inner
                .size(module.to_ctx())
                .next_multiple_of(4);
            if size <= max_immediate && immediate_compatible(&module, ty) {
                let v = &mut module.global_variables[var];
                v.space = naga::AddressSpace::Immediate;
                v.binding = None;
                Params::Immediate { size }
            } else {
                Params::UniformBuffer { size }
            }
        }
    };
    for (_, v) in module.global_variables.iter_mut() {
        if let naga::AddressSpace::Storage { access } = &mut v.space {
            *access = naga::StorageAccess::LOAD | naga::StorageAccess::STORE;
        }
    }
    Ok((module, params))
}

/// The pipeline for `kernel` on `d` (cached).
pub(super) fn pipeline(d: &WgpuDevice, kernel: &Kernel) -> Result<Arc<Pipeline>> {
    let wgsl = kernel.wgsl.ok_or_else(|| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message: "has no WGSL source, which the wgpu backend runs".to_owned(),
    })?;
    let key = source_key(kernel, wgsl);
    if let Some(p) = lock(&d.pipelines.0).get(&key) {
        return Ok(Arc::clone(p));
    }
    let max_immediate = if d.device.features().contains(wgpu::Features::IMMEDIATES) {
        d.limits.max_immediate_size
    } else {
        0
    };
    let (module, params) = prepare(kernel, wgsl, max_immediate)?;
    // Validate inside an error scope, so that a bad kernel is an error,
    // not a panic. GL compiles here, holding its context (Note [GL context
    // lock]). The guard lives to the end: a pipeline that loses the race
    // to the cache, or that wgpu rejected, is freed under it.
    let _exclusive = d.gl.exclusive();
    if _exclusive.is_some()
        && let Some(p) = lock(&d.pipelines.0).get(&key)
    {
        // Another thread compiled it while this one waited for the lock.
        return Ok(Arc::clone(p));
    }
    let scope = d.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = match strict_spirv(d, kernel, wgsl, &module)? {
        // SAFETY: wgpu hands these words to the driver unchecked. They
        // are naga's SPIR-V of a module naga validated, for the layout
        // created below (storage bindings `0..n` of set 0 and wgpu's
        // immediates, as wgpu's own translation of the module has), with
        // only decorations added.
        Some(words) => unsafe {
            d.device
                .create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some(kernel.name),
                    entry_points: std::borrow::Cow::Owned(vec![
                        wgpu::PassthroughShaderEntryPoint {
                            name: std::borrow::Cow::Borrowed(kernel.name),
                            workgroup_size: kernel.workgroup_size.into(),
                        },
                    ]),
                    spirv: Some(std::borrow::Cow::Owned(words)),
                    ..Default::default()
                })
        },
        None => d.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            source: wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(module)),
        }),
    };
    // An explicit layout: every storage binding read-write (the module
    // declares them so, see `prepare`), then the parameter block's
    // uniform where it is not immediate data.
    let buffer = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let n = u32::try_from(kernel.bindings).unwrap_or(u32::MAX);
    let storage = wgpu::BufferBindingType::Storage { read_only: false };
    let uniform = matches!(params, Params::UniformBuffer { .. })
        .then(|| buffer(n, wgpu::BufferBindingType::Uniform));
    let entries: Vec<wgpu::BindGroupLayoutEntry> =
        (0..n).map(|i| buffer(i, storage)).chain(uniform).collect();
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
            immediate_size: match params {
                Params::Immediate { size } => size,
                Params::UniformBuffer { .. } => 0,
            },
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
    let p = Arc::new(Pipeline {
        pipeline,
        layout,
        params,
        groups: BindGroups::default(),
    });
    Ok(Arc::clone(lock(&d.pipelines.0).entry(key).or_insert(p)))
}

/// For a kernel with strict floating point on a Vulkan adapter whose
/// device has `Features::PASSTHROUGH_SHADERS`, the SPIR-V of `module` (as
/// prepared for wgpu) with every float operation decorated
/// `NoContraction` ([`crate::backend::spv`]): wgpu writes SPIR-V from
/// naga's IR, which has no way to say it. `None` elsewhere: the module
/// goes to wgpu as it is.
fn strict_spirv(
    d: &WgpuDevice,
    kernel: &Kernel,
    wgsl: &str,
    module: &naga::Module,
) -> Result<Option<Vec<u32>>> {
    if !kernel.strict_float || !d.strict_float() {
        return Ok(None);
    }
    let error = |message: String| Error::Kernel {
        kernel: kernel.name.to_owned(),
        message,
    };
    let info = crate::backend::spv::validate(module, wgsl, true).map_err(error)?;
    crate::backend::spv::write(module, &info, kernel.name, true)
        .map(Some)
        .map_err(error)
}

/// A bound storage range: the buffer, the offset, the size (`None`: to
/// the buffer's end).
type Range = (wgpu::Buffer, u64, Option<wgpu::BufferSize>);

/// A pipeline's bind groups that hold storage ranges only, by those
/// ranges (Note [wgpu parameter blocks]). A group keeps its buffers'
/// wgpu objects alive, not their memory: Keel destroys a buffer's memory
/// when it frees the buffer (`WgpuBuffer`'s `Drop`), and a freed buffer's
/// groups are never looked up again (a new buffer is a new wgpu object).
/// At most [`BindGroups::KEEP`] per pipeline; a full cache is emptied.
#[derive(Default)]
struct BindGroups(Mutex<FxHashMap<SmallVec<[Range; 4]>, wgpu::BindGroup>>);

impl BindGroups {
    const KEEP: usize = 256;

    /// The group for `ranges`, created by `create` where none is cached.
    fn get_or_create(
        &self,
        d: &WgpuDevice,
        ranges: SmallVec<[Range; 4]>,
        create: impl FnOnce(&[Range]) -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        if let Some(g) = lock(&self.0).get(&ranges) {
            return g.clone();
        }
        let group = create(&ranges);
        let mut groups = lock(&self.0);
        let evicted = (groups.len() >= Self::KEEP).then(|| std::mem::take(&mut *groups));
        groups.insert(ranges, group.clone());
        drop(groups);
        // The evicted groups may hold the last references to buffers.
        d.gl.release(evicted);
        group
    }
}

/// The range `(b, offset, len)` as bound: its length rounded up to 4
/// bytes (wgpu's storage binding granularity) within its buffer, a whole
/// buffer as such.
fn range(b: &wgpu::Buffer, offset: u64, len: u64) -> Range {
    let size = len.next_multiple_of(4).min(b.size() - offset);
    if offset == 0 && size == b.size() {
        (b.clone(), 0, None)
    } else {
        (b.clone(), offset, wgpu::BufferSize::new(size))
    }
}

/// A uniform buffer holding `params`, padded with zeros to the kernel's
/// `size` and then to a multiple of 16 bytes (at least 16).
fn params_buffer(d: &WgpuDevice, params: &[u8], size: u32) -> Result<wgpu::Buffer> {
    let mut data = params.to_vec();
    let len = params.len().max(size as usize).max(1).div_ceil(16) * 16;
    data.resize(len, 0);
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

/// Binding `i` of a bind group: storage range `r`.
fn entry((i, (buffer, offset, size)): (usize, &Range)) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding: i as u32,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset: *offset,
            size: *size,
        }),
    }
}

/// Whether [`record_dispatch`] may keep the launch's bind group for the
/// same ranges later: only for buffers whose memory Keel destroys when
/// it frees them (`WgpuBuffer`), not for transient ones (staging).
#[derive(Clone, Copy)]
pub(super) enum Group {
    Cached,
    Transient,
}

/// Records into `encoder` a dispatch of `pipeline` over `grid`, with
/// the ranges `buffers` (buffer, offset, length) bound in order (see
/// [`range`]) and `params` as its parameter block (Note [wgpu parameter
/// blocks]). The compute pass writes `stamps` (a profiler bracket's
/// timestamps), if given.
#[allow(clippy::too_many_arguments)]
pub(super) fn record_dispatch(
    d: &WgpuDevice,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &Pipeline,
    grid: [u32; 3],
    buffers: &[(&wgpu::Buffer, u64, u64)],
    params: &[u8],
    stamps: Option<&Stamps<'_>>,
    group: Group,
) -> Result<()> {
    let ranges: SmallVec<[Range; 4]> = buffers
        .iter()
        .map(|&(b, offset, len)| range(b, offset, len))
        .collect();
    // The storage ranges, then the uniform block where there is one.
    let create = |ranges: &[Range], uniform: Option<&wgpu::Buffer>| {
        let entries: Vec<_> = ranges
            .iter()
            .enumerate()
            .map(entry)
            .chain(uniform.map(|u| wgpu::BindGroupEntry {
                binding: ranges.len() as u32,
                resource: u.as_entire_binding(),
            }))
            .collect();
        d.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.layout,
            entries: &entries,
        })
    };
    let group = match (pipeline.params, group) {
        (Params::Immediate { .. }, Group::Cached) => {
            pipeline
                .groups
                .get_or_create(d, ranges, |ranges| create(ranges, None))
        }
        (Params::Immediate { .. }, Group::Transient) => create(&ranges, None),
        (Params::UniformBuffer { size }, _) => {
            create(&ranges, Some(&params_buffer(d, params, size)?))
        }
    };
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
    if let Params::Immediate { size } = pipeline.params
        && size > 0
    {
        // The block as the kernel declares it: zeros past what the
        // caller gave, and nothing past its size (as a uniform reads it).
        let mut block: SmallVec<[u8; 64]> = SmallVec::from_elem(0, size as usize);
        let n = params.len().min(block.len());
        block[..n].copy_from_slice(&params[..n]);
        pass.set_immediates(0, &block);
    }
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
    /// The device's `min_storage_buffer_offset_alignment`.
    fn binding_alignment(&self, stream: &'static QueueStream) -> u64 {
        u64::from(stream.device().limits.min_storage_buffer_offset_alignment)
    }

    /// `buffers` must not overlap (checked here).
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
        let pipeline = pipeline(d, kernel)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let raw: SmallVec<[(&wgpu::Buffer, u64, u64); 4]> = buffers
            .iter()
            .map(|b| (b.buffer.raw(), b.offset as u64, b.len as u64))
            .collect();
        let mut enc = d.encoder();
        // A profiled launch's span: its own pass writes the timestamps.
        let stamps = stream.stamps();
        record_dispatch(
            d,
            &mut enc,
            &pipeline,
            grid,
            &raw,
            params,
            stamps.as_ref(),
            Group::Cached,
        )?;
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
    use super::{Params, prepare};
    use crate::kernel::Kernel;

    const SRC: &str = "struct P { n: u32, alpha: f32, v: vec2<u32> }\n\
                       @group(0) @binding(0) var<storage, read> a: array<f32>;\n\
                       @group(0) @binding(1) var <storage> b: array<f32>;\n\
                       @group(0) @binding(2) var<storage,read_write> c: array<f32>;\n\
                       @group(0) @binding(3) var<uniform> p: P;\n\
                       @compute @workgroup_size(64) fn k(@builtin(global_invocation_id) g: vec3<u32>) {\n\
                         if g.x < p.n { c[g.x] = a[g.x] + b[g.x] * p.alpha; }\n\
                       }";

    fn kernel(wgsl: &'static str) -> Kernel {
        Kernel {
            name: "k",
            workgroup_size: [64, 1, 1],
            bindings: 3,
            wgsl: Some(wgsl),
            ptx: None,
            cpu: None,
            strict_float: false,
        }
    }

    fn spaces(m: &naga::Module) -> Vec<(naga::AddressSpace, Option<u32>)> {
        m.global_variables
            .iter()
            .map(|(_, v)| (v.space, v.binding.as_ref().map(|b| b.binding)))
            .collect()
    }

    #[test]
    fn storage_becomes_read_write_and_the_block_immediate_where_it_fits() {
        let rw = naga::AddressSpace::Storage {
            access: naga::StorageAccess::LOAD | naga::StorageAccess::STORE,
        };
        let (m, params) = prepare(&kernel(SRC), SRC, 128).expect("prepared");
        assert_eq!(params, Params::Immediate { size: 16 });
        assert_eq!(
            spaces(&m),
            [
                (rw, Some(0)),
                (rw, Some(1)),
                (rw, Some(2)),
                (naga::AddressSpace::Immediate, None)
            ]
        );
        // Too large for the device (or no immediates at all): a uniform
        // buffer at binding 3, as declared.
        let (m, params) = prepare(&kernel(SRC), SRC, 12).expect("prepared");
        assert_eq!(params, Params::UniformBuffer { size: 16 });
        assert_eq!(spaces(&m)[3], (naga::AddressSpace::Uniform, Some(3)));
        assert_eq!(spaces(&m)[1], (rw, Some(1)));
    }

    #[test]
    fn blocks_immediates_cannot_hold_stay_uniform_and_bad_wgsl_is_an_error() {
        const ARRAY: &str = "struct P { v: array<vec4<u32>, 2> }\n\
                             @group(0) @binding(0) var<storage> a: array<u32>;\n\
                             @group(0) @binding(1) var<storage> b: array<u32>;\n\
                             @group(0) @binding(2) var<storage> c: array<u32>;\n\
                             @group(0) @binding(3) var<uniform> p: P;\n\
                             @compute @workgroup_size(1) fn k() { c[0] = a[0] + b[0] + p.v[1].x; }";
        let (_, params) = prepare(&kernel(ARRAY), ARRAY, 256).expect("prepared");
        assert_eq!(params, Params::UniformBuffer { size: 32 });
        // No block at binding 3: nothing to pass.
        const NONE: &str = "@group(0) @binding(0) var<storage> a: array<u32>;\n\
                            @compute @workgroup_size(1) fn k() { a[0] = 1u; }";
        let (_, params) = prepare(&kernel(NONE), NONE, 256).expect("prepared");
        assert_eq!(params, Params::Immediate { size: 0 });
        const BAD: &str = "@compute @workgroup_size(1) fn k() { let x = ; }";
        let e = prepare(&kernel(BAD), BAD, 256).expect_err("a syntax error");
        assert!(e.to_string().contains("WGSL rejected"), "{e}");
    }
}
