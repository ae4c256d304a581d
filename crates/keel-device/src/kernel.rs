//! [`Kernel`]: one named compute kernel, written once in WGSL.
//!
//! A kernel is data: a name, its workgroup size, and its WGSL source.
//! Vulkan and wgpu compile the WGSL themselves; CUDA runs PTX that
//! [`keel_wgsl`] generates from it (no CUDA toolkit: the driver compiles
//! the PTX), and the CPU backend, like any host backend, runs it on host
//! threads through [`keel_wgsl::host`]. A kernel may also declare
//! overrides: hand-written PTX or a Rust function that a backend runs
//! instead, where generic code cannot reach the hardware (tensor cores, a
//! BLAS-like CPU matmul). A backend refuses, with a clear error, a kernel
//! it has nothing to run for.
//!
//! Launch geometry is in workgroups, as in WGSL and CUDA: `grid[i]`
//! workgroups of `workgroup_size[i]` invocations each. A kernel guards its
//! own bounds (`if i < n`), so `grid_for(n)` may round up.
//!
//! The demo kernels Keel ships are in [`kernels`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

pub use keel_wgsl::host::HostOptions;
pub use keel_wgsl::ir::Program;

/// A kernel body for host backends: called once per launch with every
/// buffer bound, in order. It loops over `invocation.global_size()` itself
/// (a host thread runs a whole grid). An `Err` becomes the stream's error.
pub type CpuKernelFn = fn(&mut CpuInvocation<'_>) -> Result<(), String>;

/// What a [`CpuKernelFn`] receives.
#[derive(Debug)]
pub struct CpuInvocation<'a> {
    /// Workgroups per dimension.
    pub grid: [u32; 3],
    /// Invocations per workgroup per dimension.
    pub workgroup_size: [u32; 3],
    /// The launch's parameter block.
    pub params: &'a [u8],
    /// The bound buffers, in binding order; distinct allocations.
    pub buffers: Vec<&'a mut [u8]>,
}

impl CpuInvocation<'_> {
    /// Invocations in the whole launch (x * y * z).
    pub fn global_size(&self) -> u64 {
        (0..3)
            .map(|i| u64::from(self.grid[i]) * u64::from(self.workgroup_size[i]))
            .product()
    }

    /// The `u32` at byte `offset` of the parameters (little endian).
    pub fn param_u32(&self, offset: usize) -> Result<u32, String> {
        self.params
            .get(offset..offset + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| {
                format!(
                    "expected a u32 parameter at byte {offset}, but the parameter block has {} bytes",
                    self.params.len()
                )
            })
    }

    /// The `f32` at byte `offset` of the parameters (little endian).
    pub fn param_f32(&self, offset: usize) -> Result<f32, String> {
        self.param_u32(offset).map(f32::from_bits)
    }
}

/// Views a bound buffer as `f32`s; an error names the binding when its
/// size is not a whole number of `f32`s.
pub fn as_f32s(binding: usize, bytes: &[u8]) -> Result<&[f32], String> {
    bytemuck::try_cast_slice(bytes).map_err(|e| {
        format!(
            "binding {binding}: expected f32 data, found {} bytes ({e:?})",
            bytes.len()
        )
    })
}

/// Mutable form of [`as_f32s`].
pub fn as_f32s_mut(binding: usize, bytes: &mut [u8]) -> Result<&mut [f32], String> {
    let len = bytes.len();
    bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| format!("binding {binding}: expected f32 data, found {len} bytes ({e:?})"))
}

/// One named kernel with a source per backend.
#[derive(Clone, Copy)]
pub struct Kernel {
    /// The kernel's name (also the WGSL/PTX entry point).
    pub name: &'static str,
    /// Invocations per workgroup per dimension.
    pub workgroup_size: [u32; 3],
    /// How many buffers the kernel binds, in order.
    pub bindings: usize,
    /// WGSL source: Vulkan (through naga) and wgpu compile it, CUDA runs
    /// the PTX generated from it and host backends run it on host
    /// threads, unless an override below is set.
    pub wgsl: Option<&'static str>,
    /// A hand-written PTX override, which CUDA runs instead of the PTX
    /// generated from [`wgsl`](Self::wgsl).
    pub ptx: Option<&'static str>,
    /// A Rust implementation, which host backends run instead of the
    /// WGSL on the interpreter of [`keel_wgsl::host`]: a hand-written
    /// override, or the WGSL translated to Rust ahead of time by
    /// [`keel_wgsl::rust`] (run through [`run_translated`]).
    pub cpu: Option<CpuKernelFn>,
    /// Floating-point arithmetic evaluated as written: no multiply and add
    /// fused into one rounding, no sums reassociated, which WGSL and the
    /// APIs under it otherwise allow a compiler. Vulkan decorates every
    /// float operation `NoContraction` (SPIR-V's rule against both; GLSL's
    /// `precise`), as does wgpu on its Vulkan adapter where the device has
    /// `PASSTHROUGH_SHADERS` (Keel asks for it); CUDA's PTX rounds each
    /// add and multiply on its own (`.rn`, which ptxas never fuses); the
    /// host backends never reorder. wgpu's GL, Metal and DX12 adapters
    /// offer no such control through naga: there a kernel keeps its own
    /// order only as far as its source prevents fusion (Keel's random
    /// kernels pass each product through an opaque integer operation).
    /// It covers the source's operators (`+`, `-`, `*`, `/`, `%`, `dot`);
    /// built-in functions (`exp`, `mix`, `length`, ...) keep their own
    /// accuracy rules, and overrides ([`ptx`](Self::ptx),
    /// [`cpu`](Self::cpu)) run as they are written.
    /// [`DeviceProperties::strict_float`](crate::DeviceProperties::strict_float)
    /// says whether a device promises it. Keel's `randn` and `normal_`
    /// kernels set it: their bits are the same on every device.
    pub strict_float: bool,
}

impl Kernel {
    /// A kernel from WGSL alone: `name` is its compute entry point, whose
    /// `@workgroup_size` and storage bindings (`@group(0)`, in binding
    /// order; the parameter block, a `var<uniform>` struct, follows them)
    /// the kernel takes from the source. The source is compiled here, so
    /// an error in it is reported now, with its line and column.
    ///
    /// A source built at run time can be given a `'static` life with
    /// `String::leak`; a kernel is meant to be made once per program.
    pub fn from_wgsl(name: &'static str, wgsl: &'static str) -> crate::Result<Kernel> {
        let program = program_of(name, wgsl)?;
        Ok(Kernel {
            name,
            workgroup_size: program.workgroup_size,
            bindings: program.buffers.len(),
            wgsl: Some(wgsl),
            ptx: None,
            cpu: None,
            strict_float: false,
        })
    }

    /// The kernel lowered for the PTX and host ends (compiled once per
    /// process and kept).
    pub fn program(&self) -> crate::Result<Arc<Program>> {
        let wgsl = self.wgsl.ok_or_else(|| crate::Error::Kernel {
            kernel: self.name.to_owned(),
            message: "has no WGSL source".to_owned(),
        })?;
        program_of(self.name, wgsl)
    }

    /// The PTX CUDA runs for this kernel: the override where there is one,
    /// else the PTX generated from the WGSL (once per process). Users of
    /// Nsight and `ptxas` read it here. Its entry point takes, after the
    /// buffers and the parameter words, each buffer's length in bytes
    /// (`.u64`), which bounds checks need.
    pub fn ptx_source(&self) -> crate::Result<Arc<str>> {
        if let Some(ptx) = self.ptx {
            return Ok(Arc::from(ptx));
        }
        let wgsl = self.wgsl.ok_or_else(|| crate::Error::Kernel {
            kernel: self.name.to_owned(),
            message: "has neither PTX nor WGSL".to_owned(),
        })?;
        let compiled = compiled(self.name, wgsl)?;
        let options = if self.strict_float {
            keel_wgsl::ptx::Options::strict()
        } else {
            keel_wgsl::ptx::Options::default()
        };
        let ptx = compiled.ptx[usize::from(self.strict_float)].get_or_init(|| {
            keel_wgsl::ptx::emit_with(&compiled.program, &options)
                .map(Arc::from)
                .map_err(|e| e.to_string())
        });
        ptx.clone().map_err(|message| crate::Error::Kernel {
            kernel: self.name.to_owned(),
            message: format!("PTX could not be generated: {message}"),
        })
    }

    /// The smallest 1-D grid covering `n` invocations.
    pub fn grid_for(&self, n: u64) -> [u32; 3] {
        let wg = u64::from(self.workgroup_size[0].max(1));
        let groups = n.div_ceil(wg);
        [u32::try_from(groups).unwrap_or(u32::MAX), 1, 1]
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("workgroup_size", &self.workgroup_size)
            .field("bindings", &self.bindings)
            .field("wgsl", &self.wgsl.is_some())
            .field("ptx", &self.ptx.is_some())
            .field("cpu", &self.cpu.is_some())
            .field("strict_float", &self.strict_float)
            .finish()
    }
}

/// A WGSL source compiled for the PTX and host ends; its PTX by
/// strictness (plain, then strict floating point).
struct Compiled {
    program: Arc<Program>,
    ptx: [OnceLock<Result<Arc<str>, String>>; 2],
}

type CompiledKey = (&'static str, usize, usize);

/// Compiled kernels by (entry point, source address, source length): a
/// `&'static str` lives at one address for the whole process, and the
/// cache stays as small as the program's set of kernels.
fn compiled(name: &'static str, wgsl: &'static str) -> crate::Result<Arc<Compiled>> {
    static CACHE: OnceLock<Mutex<HashMap<CompiledKey, Arc<Compiled>>>> = OnceLock::new();
    let key = (name, wgsl.as_ptr() as usize, wgsl.len());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(Arc::clone(c));
    }
    // Compiled outside the lock: two threads may both compile a kernel
    // the first time; one result is kept.
    let program = keel_wgsl::compile(wgsl, name).map_err(|e| crate::Error::Kernel {
        kernel: name.to_owned(),
        message: format!("WGSL: {e}"),
    })?;
    let c = Arc::new(Compiled {
        program: Arc::new(program),
        ptx: [OnceLock::new(), OnceLock::new()],
    });
    let mut map = cache.lock().map_err(|_| poisoned())?;
    Ok(Arc::clone(map.entry(key).or_insert(c)))
}

fn poisoned() -> crate::Error {
    crate::Error::Backend {
        backend: "kernel cache".to_owned(),
        message: "its lock was poisoned by a panic".to_owned(),
    }
}

fn program_of(name: &'static str, wgsl: &'static str) -> crate::Result<Arc<Program>> {
    Ok(Arc::clone(&compiled(name, wgsl)?.program))
}

/// `params` zero-padded to `bytes`: Keel's launch code passes the
/// parameter values without the padding a WGSL struct may end with.
fn padded(params: &[u8], bytes: u32) -> std::borrow::Cow<'_, [u8]> {
    let need = bytes as usize;
    if params.len() >= need {
        return std::borrow::Cow::Borrowed(params);
    }
    let mut p = params.to_vec();
    p.resize(need, 0);
    std::borrow::Cow::Owned(p)
}

/// Runs a kernel's WGSL translated to Rust ahead of time
/// ([`keel_wgsl::rust`], checked in and kept current by a test) as its
/// host implementation: native code, where the interpreter runs each
/// instruction over a workgroup's lanes. Keel's kernels take this path on
/// host backends.
pub fn run_translated(
    translated: &keel_wgsl::native::Kernel,
    inv: &mut CpuInvocation<'_>,
) -> Result<(), String> {
    if inv.workgroup_size != translated.workgroup_size {
        return Err(format!(
            "the kernel declares workgroup size {:?}, its WGSL {:?}",
            inv.workgroup_size, translated.workgroup_size
        ));
    }
    let params = padded(inv.params, translated.param_bytes);
    translated.run(inv.grid, &mut inv.buffers, &params)
}

/// Runs `kernel` on the calling host's threads: its Rust override where it
/// has one, else its WGSL. Host backends (the CPU backend, a third-party
/// one like the `npu` example) call this with each binding's bytes, in
/// order, and the parameter block.
pub fn run_on_host(
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: Vec<&mut [u8]>,
    params: &[u8],
) -> Result<(), String> {
    if let Some(f) = kernel.cpu {
        let mut inv = CpuInvocation {
            grid,
            workgroup_size: kernel.workgroup_size,
            params,
            buffers,
        };
        return f(&mut inv);
    }
    let program = kernel.program().map_err(|e| match e {
        crate::Error::Kernel { message, .. } => message,
        other => other.to_string(),
    })?;
    if kernel.workgroup_size != program.workgroup_size {
        return Err(format!(
            "the kernel declares workgroup size {:?}, its WGSL {:?}",
            kernel.workgroup_size, program.workgroup_size
        ));
    }
    let params = padded(params, program.param_bytes);
    let mut buffers = buffers;
    keel_wgsl::host::run(
        &program,
        grid,
        &mut buffers,
        &params,
        &HostOptions::default(),
    )
    .map_err(|e| e.to_string())
}

pub mod kernels {
    //! The demo kernels, one WGSL source each in `shaders/`: Vulkan and
    //! wgpu compile it, CUDA runs the PTX generated from it, and the CPU
    //! backend runs it on host threads.

    use super::{CpuInvocation, Kernel, run_translated, translated};

    fn vector_add_host(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        run_translated(&translated::VECTOR_ADD, inv)
    }

    fn saxpy_host(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        run_translated(&translated::SAXPY, inv)
    }

    fn spin_host(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        run_translated(&translated::SPIN, inv)
    }

    /// `c[i] = a[i] + b[i]` for `i < n`. Bindings: `a`, `b`, `c` (f32).
    /// Parameters: `n: u32`. Source: `shaders/vector_add.wgsl` (on host
    /// backends, its translation to Rust).
    pub const VECTOR_ADD: Kernel = Kernel {
        name: "vector_add",
        workgroup_size: [256, 1, 1],
        bindings: 3,
        wgsl: Some(include_str!("../shaders/vector_add.wgsl")),
        ptx: None,
        cpu: Some(vector_add_host),
        strict_float: false,
    };

    /// `y[i] = alpha * x[i] + y[i]` for `i < n`. Bindings: `x`, `y` (f32).
    /// Parameters: `n: u32`, `alpha: f32`. Source: `shaders/saxpy.wgsl`.
    pub const SAXPY: Kernel = Kernel {
        name: "saxpy",
        workgroup_size: [256, 1, 1],
        bindings: 2,
        wgsl: Some(include_str!("../shaders/saxpy.wgsl")),
        ptx: None,
        cpu: Some(saxpy_host),
        strict_float: false,
    };

    /// Deliberately slow: `out[i]` = `iters` steps of `x <- x * 0.999 + 1`
    /// from `x = i`, for `i < n`. Bindings: `out` (f32). Parameters:
    /// `n: u32`, `iters: u32`. Source: `shaders/spin.wgsl`. Makes work
    /// that takes a while, for overlap demos and completion checks.
    pub const SPIN: Kernel = Kernel {
        name: "spin",
        workgroup_size: [64, 1, 1],
        bindings: 1,
        wgsl: Some(include_str!("../shaders/spin.wgsl")),
        ptx: None,
        cpu: Some(spin_host),
        strict_float: false,
    };

    /// The value [`SPIN`] stores for invocation `i`, without running the
    /// steps left once the chain stops changing (within some tens of
    /// thousands of steps, near 1000): a check of a long spin costs
    /// little. The steps are a multiply and an add, never fused (WGSL's
    /// rule on every backend), as here.
    pub fn spin_reference(i: u32, iters: u32) -> f32 {
        let mut x = i as f32;
        for _ in 0..iters {
            let next = x * 0.999 + 1.0;
            if next == x {
                break;
            }
            x = next;
        }
        x
    }

    /// Every demo kernel.
    pub const ALL: [Kernel; 3] = [VECTOR_ADD, SAXPY, SPIN];

    /// The checked-in translation (`kernel/translated.rs`) is what
    /// `keel_wgsl::rust` makes of the demo kernels' WGSL today
    /// (`KEEL_BLESS=1` rewrites it).
    #[test]
    fn the_translation_is_current() {
        let programs: Vec<_> = ALL
            .iter()
            .map(|k| (*k.program().expect("compiles")).clone())
            .collect();
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernel/translated.rs");
        let bless = std::env::var_os("KEEL_BLESS").is_some();
        let current = keel_wgsl::rust::check_file(&path, &programs, bless).expect("translates");
        assert!(
            current,
            "src/kernel/translated.rs is stale: `KEEL_BLESS=1 cargo test -p keel-device --lib the_translation_is_current`"
        );
    }
}

/// The demo kernels' WGSL translated to Rust (generated; see
/// `kernels::the_translation_is_current`).
mod translated;
