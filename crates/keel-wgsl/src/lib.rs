//! WGSL compute kernels for every Keel backend.
//!
//! Keel's kernels, and its users', are written once, in WGSL. Vulkan and
//! wgpu compile WGSL themselves (through naga to SPIR-V or the platform's
//! language). For the others this crate lowers naga's IR of one compute
//! entry point into a small [`ir::Program`] with WGSL's rules made
//! explicit, and that program has two ends:
//!
//! - [`ptx`] prints it as PTX, which the CUDA driver compiles
//!   (`cuModuleLoadDataEx`): no CUDA toolkit at build or run time;
//! - [`host`] runs it on the host's threads, workgroups in parallel and
//!   barriers honoured: the CPU backend and any host backend run WGSL
//!   with no Rust twin.
//!
//! Lowering once and printing twice means a rule of WGSL's (integer
//! division by zero, shift amounts, saturating conversions, bounds
//! checks, no contraction into FMA) is written in one place, and the
//! host end, which runs here, tests what the PTX end prints.

pub mod host;
pub mod ir;
mod lower;
pub mod native;
pub mod ptx;
pub mod rust;
pub mod scalar;

pub use lower::{CompileError, compile, compile_module, param_words};
