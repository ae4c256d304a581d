//! Compute kernels on [`Buffer`]s: tiled [`matmul`] (with reduced-precision
//! modes), a two-level [`sum`] (subgroup operations where the device has
//! them) and a numerically stable [`softmax_rows`].
//!
//! Each is a launch function over f32, row-major, contiguous buffers that
//! checks its arguments (sizes at least 1, buffers at least as large as
//! their matrices, the output not an input, indices within `u32`) and
//! launches [`Kernel`](crate::Kernel)s through [`Stream::launch`]: WGSL
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

use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// The element count of a matrix with `dims`, checked to fit the kernels'
/// `u32` indices.
fn check_size(what: &str, name: &str, dims: &[usize]) -> Result<usize> {
    let len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&l| l <= u32::MAX as usize - 256);
    len.ok_or_else(|| {
        Error::invalid(format!(
            "{what}: `{name}` has {dims:?} elements; expected at most {} (indices are u32)",
            u32::MAX - 256
        ))
    })
}

/// `buffer` must hold at least `elems` f32s.
fn check_buffer(what: &str, name: &str, buffer: &Buffer, elems: usize) -> Result<()> {
    let need = elems * 4;
    if buffer.len() < need {
        return Err(Error::invalid(format!(
            "{what}: expected `{name}` to hold at least {elems} f32s ({need} bytes), found {} bytes",
            buffer.len()
        )));
    }
    Ok(())
}

/// `out` must not be one of `inputs`.
fn check_distinct(what: &str, out: &Buffer, inputs: &[(&str, &Buffer)]) -> Result<()> {
    match inputs.iter().find(|(_, b)| std::ptr::eq(*b, out)) {
        Some((name, _)) => Err(Error::invalid(format!(
            "{what}: expected `out` to be a buffer of its own, found it is also `{name}`"
        ))),
        None => Ok(()),
    }
}

/// Workgroups covering `len` in steps of `edge`, within one grid
/// dimension's 65535.
fn groups(what: &str, len: usize, edge: u32) -> Result<u32> {
    let g = len.div_ceil(edge as usize);
    u32::try_from(g).ok().filter(|&g| g <= 65535).ok_or_else(|| {
        Error::invalid(format!(
            "{what}: a dimension of {len} needs {g} workgroups of {edge}; expected at most 65535"
        ))
    })
}
