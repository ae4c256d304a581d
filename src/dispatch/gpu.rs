//! GPU kernels of the elementwise operators (`add`, `mul`, each also with
//! a scalar, and `fill_`): WGSL in `shaders/ops/` (Vulkan through naga,
//! and wgpu) and hand-written PTX beside it (CUDA). `f32` only: a call
//! with another dtype is declined, so the device's fallback (the CPU)
//! runs it. `copy_` needs no kernel (buffer copies), and `matmul`, `sum`
//! and `softmax` have no GPU kernel here: they take the fallback.
//!
//! Adding a GPU kernel for an operator is one entry of [`GPU_KERNELS`]
//! (operator name, function), registered for every GPU device type.

use super::call::{KernelOutcome, OpCall};
use super::cpu::check_same_shape;
use super::launch::{Params, launch};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::tensor::{DType, Tensor};

const fn gpu_kernel(
    name: &'static str,
    bindings: usize,
    wgsl: &'static str,
    ptx: &'static str,
) -> Kernel {
    Kernel {
        name,
        workgroup_size: [256, 1, 1],
        bindings,
        wgsl: Some(wgsl),
        ptx: Some(ptx),
        cpu: None,
    }
}

/// `out = a + b` (f32).
pub const ADD_F32: Kernel = gpu_kernel(
    "add_f32",
    3,
    include_str!("../../shaders/ops/add.wgsl"),
    include_str!("../../shaders/ops/add.ptx"),
);
/// `out = a * b` (f32).
pub const MUL_F32: Kernel = gpu_kernel(
    "mul_f32",
    3,
    include_str!("../../shaders/ops/mul.wgsl"),
    include_str!("../../shaders/ops/mul.ptx"),
);
/// `out = x + s` (f32).
pub const ADD_SCALAR_F32: Kernel = gpu_kernel(
    "add_scalar_f32",
    2,
    include_str!("../../shaders/ops/add_scalar.wgsl"),
    include_str!("../../shaders/ops/add_scalar.ptx"),
);
/// `out = x * s` (f32).
pub const MUL_SCALAR_F32: Kernel = gpu_kernel(
    "mul_scalar_f32",
    2,
    include_str!("../../shaders/ops/mul_scalar.wgsl"),
    include_str!("../../shaders/ops/mul_scalar.ptx"),
);
/// `out = value` (f32).
pub const FILL_F32: Kernel = gpu_kernel(
    "fill_f32",
    1,
    include_str!("../../shaders/ops/fill.wgsl"),
    include_str!("../../shaders/ops/fill.ptx"),
);

/// The largest number of workgroups in one grid dimension every backend
/// accepts (Vulkan's guaranteed `maxComputeWorkGroupCount`).
const MAX_GROUPS_X: u64 = 65_535;

/// A 2-D grid of 256-wide workgroups covering `n` elements, as the
/// kernels of `shaders/ops/` index them.
pub fn elementwise_grid(n: u64) -> [u32; 3] {
    let groups = n.div_ceil(256).max(1);
    if groups <= MAX_GROUPS_X {
        [groups as u32, 1, 1]
    } else {
        let y = groups.div_ceil(MAX_GROUPS_X);
        [MAX_GROUPS_X as u32, u32::try_from(y).unwrap_or(u32::MAX), 1]
    }
}

/// `n` as the kernels' `u32` count, or why the call is declined.
fn count(call: &OpCall<'_>, t: &Tensor) -> Result<u32, KernelOutcome> {
    if t.dtype() != DType::F32 {
        return Err(KernelOutcome::Declined(format!(
            "the {} kernel of '{}' is f32-only, found {}",
            call.device.device_type().backend_name(),
            call.op(),
            t.dtype()
        )));
    }
    u32::try_from(t.numel()).map_err(|_| {
        KernelOutcome::Declined(format!(
            "the GPU kernel of '{}' counts elements in u32, found {}",
            call.op(),
            t.numel()
        ))
    })
}

macro_rules! or_decline {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(declined) => return Ok(declined),
        }
    };
}

fn binary(call: &OpCall<'_>, kernel: &Kernel) -> Result<KernelOutcome> {
    let (a, b) = (call.tensor(0)?, call.tensor(1)?);
    check_same_shape(call.op(), a, b)?;
    let n = or_decline!(count(call, a));
    or_decline!(count(call, b));
    let out = Tensor::empty(a.shape(), DType::F32, call.device)?;
    if n > 0 {
        let grid = elementwise_grid(u64::from(n));
        launch(
            &call.stream,
            kernel,
            grid,
            &[a.buffer(), b.buffer(), out.buffer()],
            &Params::default().u32(n),
        )?;
    }
    Ok(KernelOutcome::Done(vec![out]))
}

fn scalar(call: &OpCall<'_>, kernel: &Kernel) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let s = call.scalar(1)? as f32;
    let n = or_decline!(count(call, x));
    let out = Tensor::empty(x.shape(), DType::F32, call.device)?;
    if n > 0 {
        launch(
            &call.stream,
            kernel,
            elementwise_grid(u64::from(n)),
            &[x.buffer(), out.buffer()],
            &Params::default().u32(n).f32(s),
        )?;
    }
    Ok(KernelOutcome::Done(vec![out]))
}

fn add(call: &OpCall<'_>) -> Result<KernelOutcome> {
    binary(call, &ADD_F32)
}

fn mul(call: &OpCall<'_>) -> Result<KernelOutcome> {
    binary(call, &MUL_F32)
}

fn add_scalar(call: &OpCall<'_>) -> Result<KernelOutcome> {
    scalar(call, &ADD_SCALAR_F32)
}

fn mul_scalar(call: &OpCall<'_>) -> Result<KernelOutcome> {
    scalar(call, &MUL_SCALAR_F32)
}

fn fill(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let v = call.scalar(1)? as f32;
    let n = or_decline!(count(call, x));
    if n > 0 {
        launch(
            &call.stream,
            &FILL_F32,
            elementwise_grid(u64::from(n)),
            &[x.buffer()],
            &Params::default().u32(n).f32(v),
        )?;
    }
    Ok(KernelOutcome::Done(vec![x.clone()]))
}

/// A GPU kernel of an operator: what [`GPU_KERNELS`] lists.
pub type GpuKernelFn = fn(&OpCall<'_>) -> Result<KernelOutcome>;

/// The operators with GPU kernels, registered for CUDA, Vulkan and wgpu
/// when the dispatcher starts. One line per operator.
pub const GPU_KERNELS: [(&str, GpuKernelFn); 5] = [
    ("add", add),
    ("mul", mul),
    ("add.Scalar", add_scalar),
    ("mul.Scalar", mul_scalar),
    ("fill_", fill),
];
