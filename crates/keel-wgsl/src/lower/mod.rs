//! naga's IR of one compute entry point -> [`Program`].
//!
//! Every WGSL rule the ends must not each re-derive is applied here (see
//! [`crate::ir`]): calls are inlined, switches become blocks of ifs,
//! composites are split into scalars, and memory accesses become scalar
//! loads and stores at byte offsets with bounds guards.

mod build;
mod func;
mod idioms;
mod math;
mod ranges;
mod shape;

use std::fmt;

use naga::{Handle, Module, Type, TypeInner};

use crate::ir::{Buffer, Needs, Program, Ty};
use build::Builder;

/// Why a kernel could not be compiled: the WGSL does not parse or
/// validate, or it uses a construct the PTX and host ends do not cover.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileError {
    /// What went wrong.
    pub message: String,
    /// 1-based line and column in the source, where known.
    pub location: Option<(u32, u32)>,
    /// The construct's span, until [`compile`] turns it into `location`.
    pub(crate) span: Option<naga::Span>,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some((line, col)) => write!(f, "{}:{}: {}", line, col, self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CompileError {}

pub(crate) type Result<T> = std::result::Result<T, CompileError>;

pub(crate) fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(CompileError {
        message: message.into(),
        location: None,
        span: None,
    })
}

/// Parses and validates `source` and lowers its compute entry point
/// `entry`.
pub fn compile(source: &str, entry: &str) -> Result<Program> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| {
        let location = e.location(source).map(|l| (l.line_number, l.line_position));
        CompileError {
            message: format!("WGSL does not parse: {}", e.message()),
            location,
            span: None,
        }
    })?;
    // Cooperative matrices are a subgroup's opaque fragments, which
    // neither end has a representation for; said before validation, whose
    // message would only call the type invalid.
    if let Some((handle, _)) = module
        .types
        .iter()
        .find(|(_, t)| matches!(t.inner, naga::TypeInner::CooperativeMatrix { .. }))
    {
        // naga keeps no span for a type an alias names: the first
        // `coop_mat` in the text is the place then.
        let span = Some(module.types.get_span(handle))
            .filter(|s| s.is_defined())
            .or_else(|| {
                let at = source.find("coop_mat")?;
                Some(naga::Span::new(at as u32, at as u32 + 8))
            });
        return Err(CompileError {
            message: "cooperative matrices (`coop_mat8x8`, `coop_mat16x16`) are not supported: \
                      only Vulkan and wgpu devices that have them run such kernels"
                .to_owned(),
            location: span.map(|s| {
                let l = s.location(source);
                (l.line_number, l.line_position)
            }),
            span: None,
        });
    }
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::SUBGROUP | naga::valid::Capabilities::SHADER_FLOAT16,
    )
    .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
    .subgroup_operations(naga::valid::SubgroupOperationSet::all())
    .validate(&module)
    .map_err(|e| {
        let location = e
            .spans()
            .next()
            .map(|(span, _)| span.location(source))
            .map(|l| (l.line_number, l.line_position));
        // naga's top-level message names the item; its causes say what is
        // wrong with it.
        let mut message = format!("WGSL does not validate: {}", e.as_inner());
        let mut cause = std::error::Error::source(e.as_inner());
        while let Some(c) = cause {
            message.push_str(&format!(": {c}"));
            cause = c.source();
        }
        CompileError {
            message,
            location,
            span: None,
        }
    })?;
    compile_module(&module, &info, entry).map_err(|mut e| {
        if let Some(span) = e.span.take().filter(|s| s.is_defined()) {
            let l = span.location(source);
            e.location = Some((l.line_number, l.line_position));
        }
        e
    })
}

/// Lowers the compute entry point `entry` of a validated module.
pub fn compile_module(
    module: &Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Result<Program> {
    let (index, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, ep)| ep.name == entry)
        .ok_or_else(|| CompileError {
            message: format!(
                "no entry point `{entry}`; the module has {}",
                names(module.entry_points.iter().map(|e| e.name.as_str()))
            ),
            location: None,
            span: None,
        })?;
    if ep.stage != naga::ShaderStage::Compute {
        return err(format!("entry point `{entry}` is not a compute shader"));
    }
    if ep.workgroup_size_overrides.is_some() {
        return err(format!(
            "entry point `{entry}`: a workgroup size set by an override is not supported"
        ));
    }
    let globals = Globals::of(module)?;
    let mut b = Builder::new();
    let mut needs = Needs::default();
    let private_bytes = func::lower_entry(
        module,
        info.get_entry_point(index),
        info,
        ep,
        &globals,
        &mut b,
        &mut needs,
    )?;
    let (regs, body) = b.finish();
    needs.f16 = regs.contains(&Ty::F16);
    let mut program = Program {
        name: ep.name.clone(),
        workgroup_size: ep.workgroup_size,
        regs,
        buffers: globals.buffers.clone(),
        param_bytes: globals.param_bytes,
        shared_bytes: globals.shared_bytes,
        private_bytes: round_up(private_bytes, 16),
        body,
        needs,
    };
    ranges::drop_proven_guards(&mut program);
    idioms::mul_hi(&mut program);
    Ok(program)
}

/// The type of each 32-bit word of `entry`'s parameter block (the
/// module's `var<uniform>` or `var<immediate>` struct), by WGSL's layout:
/// what launch code checks its own parameter table against. Padding
/// words are `None`.
pub fn param_words(source: &str, entry: &str) -> Result<Vec<Option<Ty>>> {
    let program = compile(source, entry)?;
    let module = naga::front::wgsl::parse_str(source).map_err(|e| CompileError {
        message: format!("WGSL does not parse: {}", e.message()),
        location: None,
        span: None,
    })?;
    let mut words = vec![None; program.param_bytes as usize / 4];
    for (_, var) in module.global_variables.iter() {
        if matches!(
            var.space,
            naga::AddressSpace::Uniform | naga::AddressSpace::Immediate
        ) {
            let mut layout = Vec::new();
            shape::Shape::of(&module, var.ty)?.layout(0, &mut layout)?;
            for (offset, ty, _) in layout {
                if let Some(w) = words.get_mut(offset as usize / 4) {
                    *w = Some(ty);
                }
            }
        }
    }
    Ok(words)
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<String> = it.map(|n| format!("`{n}`")).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

/// Where each module-scope variable lives.
pub(crate) struct Globals {
    /// Per `GlobalVariable` handle index.
    pub places: Vec<GlobalPlace>,
    pub buffers: Vec<Buffer>,
    pub param_bytes: u32,
    pub shared_bytes: u32,
    /// Module-scope `var<private>` first, then each function's locals
    /// that live in memory (added as the lowering meets them).
    pub private_bytes: u32,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum GlobalPlace {
    /// Storage buffer number n.
    Buffer(u32),
    /// The parameter block.
    Params,
    /// Workgroup memory at this offset, this many bytes.
    Shared(u32, u32),
    /// Private memory at this offset, this many bytes.
    Private(u32, u32),
    /// Not used by the entry point (or a handle, which compute kernels
    /// here do not take).
    Unused,
}

impl Globals {
    fn of(module: &Module) -> Result<Self> {
        let mut storage: Vec<(u32, Handle<naga::GlobalVariable>, bool)> = Vec::new();
        let mut places = vec![GlobalPlace::Unused; module.global_variables.len()];
        let mut param_bytes = 0;
        let mut shared_bytes = 0u32;
        let mut private_bytes = 0u32;
        let mut params_seen = false;
        for (h, var) in module.global_variables.iter() {
            let size = module.types[var.ty].inner.size(module.to_ctx());
            let align = alignment(module, var.ty);
            match var.space {
                naga::AddressSpace::Storage { access } => {
                    let binding = var.binding.as_ref().map(|b| (b.group, b.binding));
                    match binding {
                        Some((0, n)) => {
                            storage.push((n, h, !access.contains(naga::StorageAccess::STORE)))
                        }
                        Some((g, _)) => {
                            return err(format!(
                                "storage buffer `{}` is in @group({g}); Keel binds @group(0) only",
                                name(&var.name)
                            ));
                        }
                        None => return err("a storage buffer without @binding"),
                    }
                }
                naga::AddressSpace::Uniform | naga::AddressSpace::Immediate => {
                    if params_seen {
                        return err(format!(
                            "a second uniform or immediate variable `{}`: Keel passes one parameter block",
                            name(&var.name)
                        ));
                    }
                    params_seen = true;
                    if !size.is_multiple_of(4) {
                        return err(format!(
                            "the parameter block `{}` is {size} bytes; Keel passes 32-bit words",
                            name(&var.name)
                        ));
                    }
                    param_bytes = size;
                    places[h.index()] = GlobalPlace::Params;
                }
                naga::AddressSpace::WorkGroup => {
                    shared_bytes = round_up(shared_bytes, align.max(4));
                    places[h.index()] = GlobalPlace::Shared(shared_bytes, size);
                    shared_bytes += size;
                }
                naga::AddressSpace::Private => {
                    private_bytes = round_up(private_bytes, align.max(4));
                    places[h.index()] = GlobalPlace::Private(private_bytes, size);
                    private_bytes += size;
                }
                naga::AddressSpace::Handle => {
                    return err(format!(
                        "`{}`: textures and samplers are not supported in compute kernels here",
                        name(&var.name)
                    ));
                }
                other => {
                    return err(format!(
                        "`{}`: address space {other:?} is not supported",
                        name(&var.name)
                    ));
                }
            }
        }
        storage.sort_by_key(|(n, _, _)| *n);
        let mut buffers = Vec::new();
        for (i, (n, h, read_only)) in storage.into_iter().enumerate() {
            places[h.index()] = GlobalPlace::Buffer(i as u32);
            buffers.push(Buffer {
                binding: n,
                read_only,
                name: name(&module.global_variables[h].name).to_owned(),
            });
        }
        Ok(Globals {
            places,
            buffers,
            param_bytes,
            shared_bytes: round_up(shared_bytes, 16),
            private_bytes,
        })
    }
}

fn name(n: &Option<String>) -> &str {
    n.as_deref().unwrap_or("(unnamed)")
}

pub(crate) fn round_up(v: u32, align: u32) -> u32 {
    v.div_ceil(align) * align
}

/// WGSL's alignment of a type (naga's layouter rules).
pub(crate) fn alignment(module: &Module, ty: Handle<Type>) -> u32 {
    match &module.types[ty].inner {
        TypeInner::Scalar(s) | TypeInner::Atomic(s) => u32::from(s.width),
        TypeInner::Vector { size, scalar } => {
            let n = match *size as u8 {
                2 => 2,
                _ => 4,
            };
            n * u32::from(scalar.width)
        }
        TypeInner::Matrix { rows, scalar, .. } => {
            let n = match *rows as u8 {
                2 => 2,
                _ => 4,
            };
            n * u32::from(scalar.width)
        }
        TypeInner::Array { base, .. } => alignment(module, *base),
        TypeInner::Struct { members, .. } => members
            .iter()
            .map(|m| alignment(module, m.ty))
            .max()
            .unwrap_or(1),
        _ => 4,
    }
}

/// The register type of a naga scalar.
pub(crate) fn scalar_ty(s: naga::Scalar) -> Result<Ty> {
    use naga::ScalarKind as K;
    Ok(match (s.kind, s.width) {
        (K::Bool, _) => Ty::Bool,
        (K::Uint, 4) => Ty::U32,
        (K::Sint, 4) => Ty::I32,
        (K::Float, 4) => Ty::F32,
        (K::Float, 2) => Ty::F16,
        (kind, width) => {
            return err(format!(
                "{}-bit {kind:?} values are not supported (32-bit integers and floats, f16 and bool are)",
                u32::from(width) * 8
            ));
        }
    })
}
