//! SPIR-V as Keel writes it for the Vulkan backend and for wgpu's Vulkan
//! adapter: naga's writer with WGSL's bounds rules, and strict floating
//! point where a kernel asks for it.
//!
//! SPIR-V lets a driver contract an undecorated multiply and add into one
//! fused operation and reassociate undecorated adds: lavapipe folds
//! `(x + 2^24) - 2^24` into `x`. `NoContraction` forbids both (SPIR-V's
//! decoration table: the operation is not combined with another, nor
//! reassociated); it is what GLSL's `precise` compiles to, so every
//! Vulkan driver honours it. naga writes no decorations of the kind, so
//! Keel adds them to the words naga writes for a kernel that asks for
//! strict floating point ([`Kernel::strict_float`](crate::Kernel)).

use spirv::Op;

/// The cooperative-matrix configurations Keel's f16-input matmul
/// (`keel::compute::MATMUL_COOP`) uses on Vulkan devices and wgpu's
/// Vulkan adapters, at subgroup scope with f16 A and B and f32 C and
/// result: (the subgroup size the kernel needs, M = N = K). A workgroup of
/// the kernel is 128 invocations that hold a 64 x 64 tile in blocks of
/// 2 x 2 fragments, one block per subgroup: four subgroups of 32 with
/// fragments of 16 (NVIDIA's tensor cores), or sixteen of 8 with
/// fragments of 8 (Mesa's lavapipe).
pub const COOPERATIVE_MATRIX_SHAPES: [(u32, u32); 2] = [(32, 16), (8, 8)];

/// The fragment size [`COOPERATIVE_MATRIX_SHAPES`] gives a device whose
/// subgroups are `subgroup_size` wide, if any.
pub(crate) fn cooperative_fragment_for(subgroup_size: u32) -> Option<u32> {
    COOPERATIVE_MATRIX_SHAPES
        .into_iter()
        .find(|&(width, _)| width == subgroup_size)
        .map(|(_, size)| size)
}

/// Whether the SPIR-V module `words` declares `capability` (an
/// `OpCapability` among the instructions its layout puts first). A module
/// too short for a header declares nothing.
pub(crate) fn declares_capability(words: &[u32], capability: spirv::Capability) -> bool {
    let mut at = HEADER;
    while at + 1 < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 || words[at] & 0xffff != Op::Capability as u32 {
            return false;
        }
        if words[at + 1] == capability as u32 {
            return true;
        }
        at += count;
    }
    false
}

/// Validates `module` for SPIR-V. Subgroup operations, f16 and
/// cooperative matrices are allowed in any kernel; a launch function picks
/// a kernel that uses them only where the device reports them
/// (`keel::compute::subgroups_supported`, `f16_storage`,
/// `cooperative_matrix_supported`). Immediate data only where `immediates`
/// says: wgpu's pipelines may pass the parameter block so, the Vulkan
/// backend's do not. An error quotes `wgsl`, the module's source, where
/// it is wrong.
pub(crate) fn validate(
    module: &naga::Module,
    wgsl: &str,
    immediates: bool,
) -> Result<naga::valid::ModuleInfo, String> {
    let mut capabilities = naga::valid::Capabilities::SUBGROUP
        | naga::valid::Capabilities::SHADER_FLOAT16
        | naga::valid::Capabilities::COOPERATIVE_MATRIX;
    capabilities.set(naga::valid::Capabilities::IMMEDIATES, immediates);
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities)
        .validate(module)
        .map_err(|e| format!("WGSL validation error: {}", e.emit_to_string(wgsl)))
}

/// The SPIR-V of `module`'s compute entry point `entry`, strict floating
/// point (see [`strict_float`]) where `strict_float` says.
pub(crate) fn write(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    strict_float: bool,
) -> Result<Vec<u32>, String> {
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        // Compute shaders have no 16-bit inputs or outputs; the capability
        // would need `storageInputOutput16`, which Keel does not enable.
        use_storage_input_output_16: false,
        // WGSL's out-of-bounds rule, as every other backend keeps it: an
        // index past the end of an array or buffer is clamped into it, so
        // a bad index never reads or writes another allocation (the
        // caching allocator carves buffers from shared segments). naga's
        // default, `Unchecked`, leaves that to the driver's
        // `robustBufferAccess`, which Keel does not enable.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            buffer: naga::proc::BoundsCheckPolicy::Restrict,
            ..Default::default()
        },
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_owned(),
    };
    let mut words = naga::back::spv::write_vec(module, info, &options, Some(&pipeline))
        .map_err(|e| format!("SPIR-V generation failed: {e}"))?;
    if strict_float {
        self::strict_float(&mut words)?;
    }
    Ok(words)
}

/// The opcodes of float arithmetic whose result `NoContraction` applies
/// to. Their second operand word is the result id.
const FLOAT_ARITHMETIC: [Op; 14] = [
    Op::FNegate,
    Op::FAdd,
    Op::FSub,
    Op::FMul,
    Op::FDiv,
    Op::FRem,
    Op::FMod,
    Op::VectorTimesScalar,
    Op::MatrixTimesScalar,
    Op::VectorTimesMatrix,
    Op::MatrixTimesVector,
    Op::MatrixTimesMatrix,
    Op::OuterProduct,
    Op::Dot,
];

/// The opcodes that may come before a module's annotations, and the
/// annotations themselves (SPIR-V's logical layout, sections 1 to 9).
/// The decorations go after the last of these, before the first type.
const BEFORE_TYPES: [Op; 19] = [
    Op::Capability,
    Op::Extension,
    Op::ExtInstImport,
    Op::MemoryModel,
    Op::EntryPoint,
    Op::ExecutionMode,
    Op::ExecutionModeId,
    Op::String,
    Op::SourceExtension,
    Op::Source,
    Op::SourceContinued,
    Op::Name,
    Op::MemberName,
    Op::ModuleProcessed,
    Op::Decorate,
    Op::MemberDecorate,
    Op::DecorationGroup,
    Op::DecorateId,
    Op::DecorateString,
];

/// Words of a module header.
const HEADER: usize = 5;

/// Decorates every float arithmetic result of `words` (a whole module)
/// `NoContraction`; returns how many. An error says where the module is
/// not well formed.
pub(crate) fn strict_float(words: &mut Vec<u32>) -> Result<usize, String> {
    if words.len() < HEADER || words[0] != spirv::MAGIC_NUMBER {
        return Err(format!(
            "expected a SPIR-V module (magic {:#010x}), found {} words starting {:#010x?}",
            spirv::MAGIC_NUMBER,
            words.len(),
            &words[..words.len().min(2)]
        ));
    }
    let mut results = Vec::new();
    let mut types_at = None;
    let mut at = HEADER;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(format!(
                "instruction at word {at} (opcode {opcode}) claims {count} words, {} remain",
                words.len() - at
            ));
        }
        let op = Op::from_u32(opcode);
        if types_at.is_none() && !op.is_some_and(|op| BEFORE_TYPES.contains(&op)) {
            types_at = Some(at);
        }
        if op.is_some_and(|op| FLOAT_ARITHMETIC.contains(&op)) {
            if count < 3 {
                return Err(format!(
                    "arithmetic instruction at word {at} has {count} words, no result id"
                ));
            }
            results.push(words[at + 2]);
        }
        at += count;
    }
    let Some(types_at) = types_at else {
        return Ok(0);
    };
    let decorate = (3 << 16) | Op::Decorate as u32;
    let no_contraction = spirv::Decoration::NoContraction as u32;
    let added: Vec<u32> = results
        .iter()
        .flat_map(|&id| [decorate, id, no_contraction])
        .collect();
    words.splice(types_at..types_at, added);
    Ok(results.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// naga's SPIR-V for `wgsl`'s entry point `main`.
    fn module(wgsl: &str) -> Vec<u32> {
        let module = naga::front::wgsl::parse_str(wgsl).expect("WGSL");
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        )
        .validate(&module)
        .expect("valid");
        let pipeline = naga::back::spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: "main".to_owned(),
        };
        naga::back::spv::write_vec(&module, &info, &Default::default(), Some(&pipeline))
            .expect("SPIR-V")
    }

    /// (opcode, operand words) of every instruction after the header.
    fn instructions(words: &[u32]) -> Vec<(u32, Vec<u32>)> {
        let mut out = Vec::new();
        let mut at = HEADER;
        while at < words.len() {
            let count = (words[at] >> 16) as usize;
            out.push((words[at] & 0xffff, words[at + 1..at + count].to_vec()));
            at += count;
        }
        out
    }

    const KERNEL: &str = r#"
        @group(0) @binding(0) var<storage, read_write> x: array<vec2<f32>>;
        @compute @workgroup_size(1)
        fn main() {
            let v = x[0];
            let i = u32(v.x) + 3u;
            x[1] = vec2<f32>((v.x + 16777216.0) - 16777216.0, -(v.y * v.x) / v.y) * 2.0;
            x[2] = vec2<f32>(dot(v, v), f32(i));
        }
    "#;

    #[test]
    fn every_float_result_is_decorated_before_the_types() {
        let mut words = module(KERNEL);
        let before = instructions(&words);
        let n = strict_float(&mut words).expect("well formed");
        let after = instructions(&words);
        let arithmetic: Vec<u32> = after
            .iter()
            .filter(|(op, _)| Op::from_u32(*op).is_some_and(|op| FLOAT_ARITHMETIC.contains(&op)))
            .map(|(_, operands)| operands[1])
            .collect();
        // add, sub, negate, multiply, divide, vector times scalar, dot.
        assert!(arithmetic.len() >= 7, "{arithmetic:?}");
        assert_eq!(n, arithmetic.len());
        let decorated: Vec<u32> = after
            .iter()
            .filter(|(op, d)| {
                *op == Op::Decorate as u32 && d[1] == spirv::Decoration::NoContraction as u32
            })
            .map(|(_, d)| d[0])
            .collect();
        assert_eq!(decorated, arithmetic);
        // Nothing else changes, and the decorations sit in the
        // annotation section: every one before the first type.
        assert_eq!(after.len(), before.len() + n);
        let first_type = after
            .iter()
            .position(|(op, _)| *op == Op::TypeVoid as u32 || *op == Op::TypeFloat as u32)
            .expect("types");
        let last_decoration = after
            .iter()
            .rposition(|(op, _)| *op == Op::Decorate as u32)
            .expect("decorations");
        assert!(last_decoration < first_type);
        // The integer add is not an arithmetic instruction of floats.
        assert!(after.iter().any(|(op, _)| *op == Op::IAdd as u32));
    }

    /// Capabilities are read from the module's first instructions: the
    /// kernel above declares Shader and not CooperativeMatrixKHR; the
    /// cooperative-matrix matmul's module (a cooperative type in WGSL)
    /// declares it; a module cut short declares nothing.
    #[test]
    fn capabilities_are_read_from_the_module() {
        let words = module(KERNEL);
        assert!(declares_capability(&words, spirv::Capability::Shader));
        assert!(!declares_capability(
            &words,
            spirv::Capability::CooperativeMatrixKHR
        ));
        let coop = r#"
            enable f16;
            enable wgpu_cooperative_matrix;
            var<workgroup> t: array<f16, 64>;
            var<workgroup> o: array<f32, 64>;
            @compute @workgroup_size(8)
            fn main() {
                let a = coopLoadT<coop_mat8x8<f16, A>>(&t[0], 8u);
                let b = coopLoadT<coop_mat8x8<f16, B>>(&t[0], 8u);
                let c = coopMultiplyAdd(a, b, coop_mat8x8<f32, C>());
                coopStoreT(c, &o[0], 8u);
            }
        "#;
        let module = naga::front::wgsl::parse_str(coop).expect("WGSL");
        let caps = naga::valid::Capabilities::SHADER_FLOAT16
            | naga::valid::Capabilities::COOPERATIVE_MATRIX;
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .expect("valid");
        let words = write(&module, &info, "main", false).expect("SPIR-V");
        assert!(declares_capability(
            &words,
            spirv::Capability::CooperativeMatrixKHR
        ));
        assert!(!declares_capability(
            &words[..HEADER],
            spirv::Capability::Shader
        ));
        assert!(!declares_capability(&[], spirv::Capability::Shader));
    }

    #[test]
    fn a_module_that_is_not_spirv_is_an_error() {
        let mut words = vec![0x1234_5678, 0, 0, 0, 0];
        let e = strict_float(&mut words).expect_err("not SPIR-V");
        assert!(e.contains("0x07230203") && e.contains("0x12345678"), "{e}");
        // An instruction that claims more words than the module holds.
        let mut words = module(KERNEL);
        words.push((5 << 16) | Op::Nop as u32);
        let e = strict_float(&mut words).expect_err("an instruction past the end");
        assert!(e.contains("claims 5 words, 1 remain"), "{e}");
    }
}
