//! Compute kernels on [`Buffer`](crate::Buffer)s: tiled [`matmul`] (with reduced-precision
//! modes), a two-level [`sum`] (subgroup operations where the device has
//! them) and a numerically stable [`softmax_rows`].
//!
//! Each is a launch function over f32, row-major, contiguous buffers that
//! checks its arguments (sizes at least 1, buffers at least as large as
//! their matrices, the output not an input, indices within `u32`) and
//! launches [`Kernel`](crate::Kernel)s through [`Stream::launch`](crate::Stream::launch): one
//! WGSL source each, which Vulkan compiles through naga, wgpu itself, CUDA
//! as the PTX `keel-wgsl` generates from it, and the CPU backend and other
//! host backends on `keel-wgsl`'s host end. `matmul` declares overrides
//! where generic code cannot reach the hardware: tensor-core PTX on CUDA,
//! and a Rust row loop on host backends, which is also the reference the
//! tests check the GPUs against. The sources are in `shaders/compute/`;
//! `shaders/README.md` explains the conventions.
//!
//! Every launch builds its parameter block from a declared layout
//! ([`params::Launch`]); a unit test checks each layout against the
//! entry point of the PTX CUDA runs, and `keel-wgsl`'s tests assemble
//! every generated PTX file with `ptxas` for sm_70, sm_80 and sm_90.
//!
//! ```no_run
//! # fn main() -> keel::Result<()> {
//! use keel::compute::{MatmulOptions, matmul};
//! let stream = keel::current_stream(keel::Device::cpu())?;
//! let a = keel::Buffer::from_slice(&stream, &[1.0f32, 2.0, 3.0, 4.0])?;
//! let b = keel::Buffer::from_slice(&stream, &[1.0f32, 0.0, 0.0, 1.0])?;
//! let c = keel::Buffer::new(stream.device(), 16)?;
//! matmul(&stream, &a, &b, &c, 2, 2, 2, &MatmulOptions::default())?;
//! assert_eq!(c.read_as::<f32>(&stream)?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok(())
//! # }
//! ```

mod check;
mod matmul;
pub mod params;
pub mod precision;
mod reduce;

pub use matmul::{
    MATMUL_COOP, MATMUL_COOP_PACK, MATMUL_COOP8, MATMUL_MMA, MATMUL_MMA_PACK, MATMUL_MMA16,
    MATMUL_MMA16_PACK, MATMUL_MMA16_SPLIT, MATMUL_NAIVE, MATMUL_ROUND_INPUTS, MATMUL_SGEMM,
    MATMUL_SGEMM_PACK, MATMUL_TILED, MATMUL_TILED_4X4, MATMUL_TILED_4X4_SPLIT, MMA_MIN_BLOCKS,
    MatmulAlgorithm, MatmulOptions, ROUND_ONCE_MIN_TILES, cooperative_matrix_supported, matmul,
    matmul_halves, matmul_kernel, tf32_mma_supported,
};
pub use precision::{Accumulation, InputRounding, MatmulPrecision, Reduction};
pub use reduce::{
    SOFTMAX_ROWS, SUM_SHARED, SUM_SUBGROUP, SumVariant, f16_storage, softmax_rows,
    subgroups_supported, sum, sum_with,
};

/// Every kernel Keel launches on CUDA, with the parameter layout its
/// launch code passes: the demo kernels, this module's and the
/// dispatcher's elementwise kernels (`shaders/ops/`, defined in
/// [`params`]). A unit test compares each with the entry point of the PTX
/// CUDA runs for it (generated from its WGSL, or its override); a new
/// kernel (such as an operator's) is added here. [`MATMUL_COOP`],
/// [`MATMUL_COOP8`] and their packing pass [`MATMUL_COOP_PACK`], which
/// only Vulkan and wgpu run, are not: the products' layout is
/// [`MATMUL_TILED`]'s.
pub const KERNELS: &[params::Launch] = &[
    params::VECTOR_ADD,
    params::SAXPY,
    params::SPIN,
    MATMUL_TILED,
    MATMUL_TILED_4X4,
    MATMUL_TILED_4X4_SPLIT,
    MATMUL_ROUND_INPUTS,
    MATMUL_NAIVE,
    MATMUL_MMA,
    MATMUL_MMA_PACK,
    MATMUL_MMA16,
    MATMUL_MMA16_PACK,
    MATMUL_MMA16_SPLIT,
    MATMUL_SGEMM,
    MATMUL_SGEMM_PACK,
    SUM_SHARED,
    SUM_SUBGROUP,
    SOFTMAX_ROWS,
    params::OP_ADD_F32,
    params::OP_MUL_F32,
    params::OP_ADD_SCALAR_F32,
    params::OP_MUL_SCALAR_F32,
    params::OP_FILL_F32,
    params::OP_CAST,
    params::OP_CAST_F16_WIDEN,
    params::OP_CAST_F16_NARROW,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ptx_entry_matches_its_launch_layout() {
        let errors: Vec<String> = KERNELS
            .iter()
            .filter_map(|l| params::check_ptx(l).err())
            .collect();
        assert!(errors.is_empty(), "{}", errors.join("\n"));
    }
}

/// The native f16 kernels are valid WGSL for naga with the f16 capability
/// (whether or not a device here has it) and are rejected without it, so
/// their selection by [`f16_storage`] is what keeps them off devices that
/// lack it.
#[cfg(all(test, feature = "vulkan"))]
mod f16_tests {
    use super::params::{OP_CAST_F16_NARROW, OP_CAST_F16_WIDEN};
    use naga::valid::{Capabilities, ValidationFlags, Validator};

    /// The operands of every `OpCapability` in the SPIR-V naga writes for
    /// `entry` (as the Vulkan backend writes it).
    fn spirv_capabilities(
        module: &naga::Module,
        info: &naga::valid::ModuleInfo,
        entry: &str,
    ) -> Vec<u32> {
        let pipeline = naga::back::spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry.to_owned(),
        };
        let options = naga::back::spv::Options {
            lang_version: (1, 3),
            use_storage_input_output_16: false,
            ..Default::default()
        };
        let words = naga::back::spv::write_vec(module, info, &options, Some(&pipeline))
            .unwrap_or_else(|e| panic!("{entry}: {e}"));
        words
            .windows(2)
            .filter(|w| w[0] == (2 << 16) | 17)
            .map(|w| w[1])
            .collect()
    }

    #[test]
    fn native_f16_kernels_validate_with_the_f16_capability_only() {
        for launch in [OP_CAST_F16_WIDEN, OP_CAST_F16_NARROW] {
            let k = launch.kernel;
            let wgsl = k.wgsl.expect("WGSL");
            let module = naga::front::wgsl::parse_str(wgsl)
                .unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(wgsl)));
            let info = Validator::new(ValidationFlags::all(), Capabilities::SHADER_FLOAT16)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(wgsl)));
            assert!(
                Validator::new(ValidationFlags::all(), Capabilities::empty())
                    .validate(&module)
                    .is_err(),
                "{} validated without the f16 capability",
                k.name
            );
            // OpCapability Float16 (9) and StorageBuffer16BitAccess (4433):
            // what the Vulkan device enables where it reports them.
            let caps = spirv_capabilities(&module, &info, k.name);
            assert!(
                caps.contains(&9) && caps.contains(&4433),
                "{}: {caps:?}",
                k.name
            );
        }
    }

    /// The cooperative-matrix matmuls (both fragment sizes) validate with
    /// naga's `COOPERATIVE_MATRIX` capability and not without it, and
    /// their SPIR-V declares what the Vulkan device enables where it
    /// reports cooperative matrices (`Requirements::cooperative_matrix`):
    /// CooperativeMatrixKHR (6022), the Vulkan memory model (5345), Float16
    /// (9) and the 16-bit storage of native f16 (4433).
    #[test]
    fn the_cooperative_matrix_kernels_validate_with_their_capability_only() {
        for launch in [super::MATMUL_COOP, super::MATMUL_COOP8] {
            let k = launch.kernel;
            let wgsl = k.wgsl.expect("WGSL");
            let module = naga::front::wgsl::parse_str(wgsl)
                .unwrap_or_else(|e| panic!("{}", e.emit_to_string(wgsl)));
            let base = Capabilities::SUBGROUP | Capabilities::SHADER_FLOAT16;
            assert!(
                Validator::new(ValidationFlags::all(), base)
                    .validate(&module)
                    .is_err(),
                "validated without the cooperative-matrix capability"
            );
            let info = Validator::new(
                ValidationFlags::all(),
                base | Capabilities::COOPERATIVE_MATRIX,
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string(wgsl)));
            let caps = spirv_capabilities(&module, &info, k.name);
            for cap in [6022, 5345, 9, 4433] {
                assert!(caps.contains(&cap), "{cap} not in {caps:?}");
            }
        }
    }
}
