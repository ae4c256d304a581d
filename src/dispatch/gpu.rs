//! GPU kernels of the elementwise operators (`add`, `mul`, each also with
//! a scalar, and `fill_`): WGSL in `shaders/ops/` (Vulkan through naga,
//! wgpu, and CUDA through the PTX generated from it); and `matmul`, `sum`
//! and `softmax`, which call the compute kernels (`crate::compute`) after
//! handling empty tensors and zero sizes (which compute refuses). `f32`
//! only: a call with another dtype is declined, so the device's fallback
//! (the CPU) runs it. `copy_` needs no kernel (buffer copies).
//!
//! Adding a GPU kernel for an operator is one entry of [`GPU_KERNELS`]
//! (operator name, function), registered for every GPU device type.

use super::call::{KernelOutcome, OpCall};
use super::cpu::{check_same_shape, copy_kernel, matmul_dims, softmax_dims};
use super::launch::{Params, compute_matmul, launch};
use super::matmul_precision;
use crate::compute::params::{self, Param};
use crate::compute::{self, InputRounding, MatmulAlgorithm, MatmulOptions};
use crate::kernel::Kernel;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// `out = a + b` (f32).
pub const ADD_F32: Kernel = params::OP_ADD_F32.kernel;
/// `out = a * b` (f32).
pub const MUL_F32: Kernel = params::OP_MUL_F32.kernel;
/// `out = x + s` (f32).
pub const ADD_SCALAR_F32: Kernel = params::OP_ADD_SCALAR_F32.kernel;
/// `out = x * s` (f32).
pub const MUL_SCALAR_F32: Kernel = params::OP_MUL_SCALAR_F32.kernel;
/// `out = value` (f32).
pub const FILL_F32: Kernel = params::OP_FILL_F32.kernel;

pub use crate::compute::params::elementwise_grid;

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
    let out = call.empty_like(a)?;
    if n > 0 {
        let grid = elementwise_grid(u64::from(n));
        launch(
            call,
            kernel,
            grid,
            &[a.buffer(), b.buffer(), out.buffer()],
            &Params::default().u32(n),
        )?;
    }
    Ok(KernelOutcome::one(out))
}

fn scalar(call: &OpCall<'_>, kernel: &Kernel) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let s = call.scalar(1)? as f32;
    let n = or_decline!(count(call, x));
    let out = call.empty_like(x)?;
    if n > 0 {
        launch(
            call,
            kernel,
            elementwise_grid(u64::from(n)),
            &[x.buffer(), out.buffer()],
            &Params::default().u32(n).f32(s),
        )?;
    }
    Ok(KernelOutcome::one(out))
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
            call,
            &FILL_F32,
            elementwise_grid(u64::from(n)),
            &[x.buffer()],
            &Params::default().u32(n).f32(v),
        )?;
    }
    Ok(KernelOutcome::one(x.clone()))
}

/// Sets the first `n` f32s of `t` to `v` (nothing for `n` = 0).
fn fill_n(call: &OpCall<'_>, t: &Tensor, n: u32, v: f32) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    launch(
        call,
        &FILL_F32,
        elementwise_grid(u64::from(n)),
        &[t.buffer()],
        &Params::default().u32(n).f32(v),
    )
}

/// `matmul` (f32) through [`compute::matmul`](crate::compute::matmul)'s
/// tiled kernel, with the numerics of the thread's precision policy
/// ([`matmul_precision`]); zero sizes handled here (compute refuses them).
fn matmul(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let (a, b) = (call.tensor(0)?, call.tensor(1)?);
    if matches!(a.dtype(), DType::F16 | DType::BF16)
        && a.numel() <= u32::MAX as usize
        && b.numel() <= u32::MAX as usize
    {
        return matmul_half(call, a, b);
    }
    let (m, k, n) = matmul_dims(a, b)?;
    or_decline!(count(call, a));
    or_decline!(count(call, b));
    let out = call.empty(&[m, n], DType::F32)?;
    let outs = or_decline!(count(call, &out));
    if m == 0 || n == 0 {
        return Ok(KernelOutcome::one(out));
    }
    if k == 0 {
        fill_n(call, &out, outs, 0.0)?;
        return Ok(KernelOutcome::one(out));
    }
    let (precision, _) = matmul_precision(call.device.device_type(), DType::F32);
    compute_matmul(
        &call.stream,
        a.buffer(),
        b.buffer(),
        out.buffer(),
        (m, k, n),
        precision,
    )?;
    Ok(KernelOutcome::one(out))
}

/// `sum` (f32) through [`compute::sum`](crate::compute::sum) (a two-level
/// reduction; subgroup adds where the device has them); 0 for no elements.
fn sum(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let n = or_decline!(count(call, x));
    let out = call.empty(&[], DType::F32)?;
    if n == 0 {
        fill_n(call, &out, 1, 0.0)?;
    } else {
        compute::sum(&call.stream, x.buffer(), n as usize, out.buffer())?;
    }
    Ok(KernelOutcome::one(out))
}

/// `softmax` over the last dimension (f32) through
/// [`compute::softmax_rows`](crate::compute::softmax_rows).
fn softmax(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    or_decline!(count(call, x));
    let (rows, cols) = softmax_dims(x)?;
    let out = call.empty_like(x)?;
    if rows > 0 && cols > 0 {
        compute::softmax_rows(&call.stream, x.buffer(), out.buffer(), rows, cols)?;
    }
    Ok(KernelOutcome::one(out))
}

/// `out` = `x` converted, on the GPU, for the pairs f32 <-> f16/bf16
/// (`OP_CAST`; f16 by `OP_CAST_F16_WIDEN`/`OP_CAST_F16_NARROW` where
/// [`compute::f16_storage`]); `None` for another pair. Both on `call.device`, the same
/// number of elements.
fn cast(call: &OpCall<'_>, x: &Tensor, out: &Tensor) -> Result<Option<()>> {
    let mode = match (x.dtype(), out.dtype()) {
        (DType::F16, DType::F32) => 0,
        (DType::BF16, DType::F32) => 1,
        (DType::F32, DType::F16) => 2,
        (DType::F32, DType::BF16) => 3,
        _ => return Ok(None),
    };
    let Ok(n) = u32::try_from(x.numel()) else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(Some(()));
    }
    // Native f16 storage where the device has it (bit-identical to the
    // emulation below); bf16 and devices without it use the emulation.
    if (mode == 0 || mode == 2) && compute::f16_storage(&call.stream)? {
        let launch = if mode == 0 {
            &params::OP_CAST_F16_WIDEN
        } else {
            &params::OP_CAST_F16_NARROW
        };
        launch.launch(
            &call.stream,
            elementwise_grid(u64::from(n)),
            &[x.buffer(), out.buffer()],
            &[Param::U32(n)],
        )?;
        return Ok(Some(()));
    }
    // A pair of 16-bit values per invocation.
    let threads = u64::from(n).div_ceil(2);
    params::OP_CAST.launch(
        &call.stream,
        elementwise_grid(threads),
        &[x.buffer(), out.buffer()],
        &[Param::U32(n), Param::U32(mode)],
    )?;
    Ok(Some(()))
}

/// `x` as a new tensor of `dtype` on the GPU (see [`cast`]); `None` for a
/// pair it does not convert.
fn cast_to(call: &OpCall<'_>, x: &Tensor, dtype: DType) -> Result<Option<Tensor>> {
    let out = call.empty(x.shape(), dtype)?;
    Ok(cast(call, x, &out)?.map(|()| out))
}

/// `copy_` on a GPU: equal dtypes by buffer copies; f32 <-> f16/bf16 on
/// one device by the conversion kernel; other conversions decline (the
/// CPU converts them).
fn copy(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let (dst, src) = (call.tensor(0)?, call.tensor(1)?);
    if dst.dtype() == src.dtype() || src.device() != call.device {
        return copy_kernel(call);
    }
    if dst.numel() != src.numel() {
        return copy_kernel(call); // its error
    }
    match cast(call, src, dst)? {
        Some(()) => Ok(KernelOutcome::one(dst.clone())),
        None => copy_kernel(call),
    }
}

/// `matmul` of f16/bf16 tensors on a GPU: the compute kernel with the
/// numerics of the dtype's plan (inputs rounded to the dtype, which
/// changes nothing; accumulation and split-K per the policy) on the
/// inputs as they are where a 16-bit tensor-core kernel runs the product
/// ([`compute::matmul_halves`]), else on the inputs widened to f32 by the
/// conversion kernel (exact); the result rounded to the dtype. The storage stays 16-bit (native `array<f16>` where
/// [`compute::f16_storage`], packed words otherwise).
fn matmul_half(call: &OpCall<'_>, a: &Tensor, b: &Tensor) -> Result<KernelOutcome> {
    let dtype = a.dtype();
    if b.dtype() != dtype {
        return Err(Error::invalid(format!(
            "matmul: expected both tensors to have dtype {dtype}, found {}",
            b.dtype()
        )));
    }
    let (m, k, n) = matmul_dims(a, b)?;
    let out = call.empty(&[m, n], dtype)?;
    if m == 0 || n == 0 {
        return Ok(KernelOutcome::one(out));
    }
    let wide = call.empty(&[m, n], DType::F32)?;
    let (precision, _) = matmul_precision(call.device.device_type(), dtype);
    // The 16-bit tensor-core kernels read the tensors' values as they are,
    // where the plan rounds the inputs to the dtype (its default).
    let own_format = matches!(
        (dtype, precision.inputs),
        (DType::BF16, InputRounding::Bf16) | (DType::F16, InputRounding::F16)
    );
    let opts = MatmulOptions {
        algorithm: MatmulAlgorithm::Tiled,
        precision,
    };
    if k == 0 {
        fill_n(call, &wide, (m * n) as u32, 0.0)?;
    } else if own_format
        && compute::matmul_halves(
            &call.stream,
            a.buffer(),
            b.buffer(),
            wide.buffer(),
            m,
            k,
            n,
            &opts,
        )?
    {
        // Done on the tensors' own values.
    } else {
        let (Some(a32), Some(b32)) = (cast_to(call, a, DType::F32)?, cast_to(call, b, DType::F32)?)
        else {
            return Ok(KernelOutcome::Declined(format!("matmul of {dtype}")));
        };
        compute_matmul(
            &call.stream,
            a32.buffer(),
            b32.buffer(),
            wide.buffer(),
            (m, k, n),
            precision,
        )?;
    }
    cast(call, &wide, &out)?;
    Ok(KernelOutcome::one(out))
}

/// A GPU kernel of an operator: what [`GPU_KERNELS`] lists.
pub type GpuKernelFn = fn(&OpCall<'_>) -> Result<KernelOutcome>;

/// The operators with GPU kernels, registered for CUDA, Vulkan and wgpu
/// when the dispatcher starts. One line per operator.
pub const GPU_KERNELS: [(&str, GpuKernelFn); 9] = [
    ("add", add),
    ("mul", mul),
    ("add.Scalar", add_scalar),
    ("mul.Scalar", mul_scalar),
    ("fill_", fill),
    ("matmul", matmul),
    ("sum", sum),
    ("softmax", softmax),
    ("copy_", copy),
];
