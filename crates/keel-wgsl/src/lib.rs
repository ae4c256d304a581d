//! WGSL compute kernels for every Keel backend.
//!
//! Keel's kernels, and its users', are written once, in WGSL. Vulkan and
//! wgpu compile WGSL themselves (through naga to SPIR-V or the platform's
//! language). For the others this crate lowers naga's IR of one compute
//! entry point into a small [`ir::Program`] with WGSL's rules made
//! explicit, and that program has three ends:
//!
//! - [`ptx`] prints it as PTX, which the CUDA driver compiles
//!   (`cuModuleLoadDataEx`): no CUDA toolkit at build or run time;
//! - [`host`] runs it on the host's threads, workgroups in parallel and
//!   barriers honoured: the CPU backend and any host backend run a WGSL
//!   kernel loaded at run time with no Rust twin;
//! - [`rust`] translates a kernel to Rust ahead of time (checked in, kept
//!   current by a test), which runs as native code on the small runtime
//!   in [`native`]; a kernel with barriers or subgroup operations runs
//!   there one phase between two of them at a time.
//!
//! Lowering once and printing three times means a rule of WGSL's (integer
//! division by zero, shift amounts, value conversions, bounds checks,
//! which adds and multiplies may fuse) is written in one place, the scalar semantics
//! of the host ends in another ([`scalar`]), and the host ends, which run
//! here, test what the PTX end prints.
//!
//! ```
//! let wgsl = "
//!     @group(0) @binding(0) var<storage, read_write> out: array<u32>;
//!     @compute @workgroup_size(64)
//!     fn fill(@builtin(global_invocation_id) g: vec3<u32>) { out[g.x] = g.x * 2u; }
//! ";
//! let program = keel_wgsl::compile(wgsl, "fill")?;
//! let ptx = keel_wgsl::ptx::emit(&program)?;
//! assert!(ptx.contains(".visible .entry fill("));
//! let mut out = vec![0u8; 4 * 100];
//! keel_wgsl::host::run(
//!     &program,
//!     [2, 1, 1],
//!     &mut [&mut out[..]],
//!     &[],
//!     &keel_wgsl::host::HostOptions::default(),
//! )?;
//! // Invocations past the buffer's 100 words write nothing.
//! assert_eq!(&out[4 * 99..], &(99u32 * 2).to_le_bytes());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod host;
pub mod ir;
mod lower;
pub mod native;
pub mod ptx;
pub mod rust;
pub mod scalar;

pub use lower::{CompileError, compile, compile_module, param_words};
