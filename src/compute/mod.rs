//! Compute kernels on [`Buffer`](crate::Buffer)s: tiled [`matmul`] (with reduced-precision
//! modes), a two-level [`sum`] (subgroup operations where the device has
//! them) and a numerically stable [`softmax_rows`].
//!
//! Each is a launch function over f32, row-major, contiguous buffers that
//! checks its arguments (sizes at least 1, buffers at least as large as
//! their matrices, the output not an input, indices within `u32`) and
//! launches [`Kernel`](crate::Kernel)s through [`Stream::launch`](crate::Stream::launch): WGSL
//! for Vulkan (through naga) and wgpu, hand-written PTX for CUDA, and a
//! Rust function for the CPU backend and other host backends, which is
//! also the reference the tests check the GPUs against. The sources are
//! in `shaders/compute/`; `shaders/README.md` explains the conventions.
//!
//! Every launch builds its parameter block from a declared layout
//! ([`params::Launch`]); a unit test checks each layout against its PTX
//! entry point, and `cargo xtask ptx` assembles every PTX file with
//! `ptxas` for sm_70, sm_80 and sm_90.
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

pub use matmul::{MATMUL_NAIVE, MATMUL_TILED, MatmulAlgorithm, MatmulOptions, matmul};
pub use precision::{Accumulation, InputRounding, MatmulPrecision, Reduction};
pub use reduce::{
    SOFTMAX_ROWS, SUM_SHARED, SUM_SUBGROUP, SumVariant, softmax_rows, subgroups_supported, sum,
    sum_with,
};

/// Every kernel Keel launches, with the parameter layout its launch code
/// passes: the demo kernels, this module's and the dispatcher's
/// elementwise kernels (`shaders/ops/`, defined in [`params`]). A unit test compares each
/// with its PTX entry point; a new kernel (such as an operator's) is added
/// here.
pub const KERNELS: &[params::Launch] = &[
    params::VECTOR_ADD,
    params::SAXPY,
    params::SPIN,
    MATMUL_TILED,
    MATMUL_NAIVE,
    SUM_SHARED,
    SUM_SUBGROUP,
    SOFTMAX_ROWS,
    params::OP_ADD_F32,
    params::OP_MUL_F32,
    params::OP_ADD_SCALAR_F32,
    params::OP_MUL_SCALAR_F32,
    params::OP_FILL_F32,
    params::OP_CAST,
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
        assert!(KERNELS.iter().all(|l| l.kernel.ptx.is_some()));
    }
}
