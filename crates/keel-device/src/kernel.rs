//! [`Kernel`]: one named compute kernel with a source per backend.
//!
//! A kernel is data: a name, its workgroup size, and the code each backend
//! runs (WGSL for Vulkan and wgpu, PTX for CUDA, a Rust function for the
//! CPU). A backend launches the source it understands and refuses, with a
//! clear error, a kernel that has none for it.
//!
//! Launch geometry is in workgroups, as in WGSL and CUDA: `grid[i]`
//! workgroups of `workgroup_size[i]` invocations each. A kernel guards its
//! own bounds (`if i < n`), so `grid_for(n)` may round up.
//!
//! The demo kernels Keel ships are in [`kernels`].

use std::fmt;

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
    /// WGSL source, for Vulkan (through naga) and wgpu.
    pub wgsl: Option<&'static str>,
    /// PTX source, for CUDA.
    pub ptx: Option<&'static str>,
    /// Host implementation, for the CPU backend and host-thread backends.
    pub cpu: Option<CpuKernelFn>,
}

impl Kernel {
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
            .finish()
    }
}

pub mod kernels {
    //! The demo kernels: WGSL sources in `shaders/` (run by Vulkan and
    //! wgpu), hand-written PTX beside them (run by CUDA) and a host
    //! implementation here (run by the CPU backend, and
    //! the reference the GPU results are checked against).

    use super::{CpuInvocation, Kernel, as_f32s, as_f32s_mut};

    /// `c[i] = a[i] + b[i]` for `i < n`. Bindings: `a`, `b`, `c` (f32).
    /// Parameters: `n: u32`. Sources: `shaders/vector_add.wgsl`,
    /// `shaders/vector_add.ptx`.
    pub const VECTOR_ADD: Kernel = Kernel {
        name: "vector_add",
        workgroup_size: [256, 1, 1],
        bindings: 3,
        wgsl: Some(include_str!("../shaders/vector_add.wgsl")),
        ptx: Some(include_str!("../shaders/vector_add.ptx")),
        cpu: Some(vector_add_cpu),
    };

    /// `y[i] = alpha * x[i] + y[i]` for `i < n`. Bindings: `x`, `y` (f32).
    /// Parameters: `n: u32`, `alpha: f32`. Sources: `shaders/saxpy.wgsl`,
    /// `shaders/saxpy.ptx`.
    pub const SAXPY: Kernel = Kernel {
        name: "saxpy",
        workgroup_size: [256, 1, 1],
        bindings: 2,
        wgsl: Some(include_str!("../shaders/saxpy.wgsl")),
        ptx: Some(include_str!("../shaders/saxpy.ptx")),
        cpu: Some(saxpy_cpu),
    };

    /// Deliberately slow: `out[i]` = `iters` steps of `x <- x * 0.999 + 1`
    /// from `x = i`, for `i < n`. Bindings: `out` (f32). Parameters:
    /// `n: u32`, `iters: u32`. Sources: `shaders/spin.wgsl`,
    /// `shaders/spin.ptx`. Makes work
    /// that takes a while, for overlap demos and completion checks.
    pub const SPIN: Kernel = Kernel {
        name: "spin",
        workgroup_size: [64, 1, 1],
        bindings: 1,
        wgsl: Some(include_str!("../shaders/spin.wgsl")),
        ptx: Some(include_str!("../shaders/spin.ptx")),
        cpu: Some(spin_cpu),
    };

    /// The value [`SPIN`] stores for invocation `i`, without running the
    /// steps left once the chain stops changing (within some tens of
    /// thousands of steps, near 1000): a check of a long spin costs
    /// little.
    pub fn spin_reference(i: u32, iters: u32) -> f32 {
        let mut x = i as f32;
        for _ in 0..iters {
            let next = spin_step(x);
            if next == x {
                break;
            }
            x = next;
        }
        x
    }

    fn spin_step(x: f32) -> f32 {
        x * 0.999 + 1.0
    }

    fn spin_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        let (n, iters, global) = (inv.param_u32(0)?, inv.param_u32(4)?, inv.global_size());
        let [out] = &mut inv.buffers[..] else {
            return Err(format!("expected 1 buffer, found {}", inv.buffers.len()));
        };
        let out = as_f32s_mut(0, out)?;
        let n = count(n, global, &[out.len()])?;
        // Every step, even past the fixed point: the kernel is meant slow.
        for (i, o) in out[..n].iter_mut().enumerate() {
            let mut x = i as f32;
            for _ in 0..iters {
                x = spin_step(x);
            }
            *o = x;
        }
        Ok(())
    }

    /// Every demo kernel.
    pub const ALL: [Kernel; 3] = [VECTOR_ADD, SAXPY, SPIN];

    /// The element count a launch covers: the `n` parameter, bounded by
    /// the grid, and checked against every binding's length.
    fn count(n: u32, global_size: u64, lens: &[usize]) -> Result<usize, String> {
        let n = u64::from(n).min(global_size);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(short) = lens.iter().position(|&l| l < n) {
            return Err(format!(
                "binding {short}: expected at least {n} elements, found {}",
                lens[short]
            ));
        }
        Ok(n)
    }

    fn vector_add_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        let (n, global) = (inv.param_u32(0)?, inv.global_size());
        let [a, b, c] = &mut inv.buffers[..] else {
            return Err(format!("expected 3 buffers, found {}", inv.buffers.len()));
        };
        let (a, b, c) = (as_f32s(0, a)?, as_f32s(1, b)?, as_f32s_mut(2, c)?);
        let n = count(n, global, &[a.len(), b.len(), c.len()])?;
        for ((c, a), b) in c[..n].iter_mut().zip(&a[..n]).zip(&b[..n]) {
            *c = a + b;
        }
        Ok(())
    }

    fn saxpy_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
        let (n, alpha, global) = (inv.param_u32(0)?, inv.param_f32(4)?, inv.global_size());
        let [x, y] = &mut inv.buffers[..] else {
            return Err(format!("expected 2 buffers, found {}", inv.buffers.len()));
        };
        let (x, y) = (as_f32s(0, x)?, as_f32s_mut(1, y)?);
        let n = count(n, global, &[x.len(), y.len()])?;
        for (y, x) in y[..n].iter_mut().zip(&x[..n]) {
            *y += alpha * x;
        }
        Ok(())
    }
}
