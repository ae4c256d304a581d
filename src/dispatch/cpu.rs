//! The CPU kernels of every built-in operator, for every dtype that makes
//! sense (softmax: floating dtypes). Each is a host [`Kernel`] launched on
//! the CPU stream, so it runs in stream order and shows in the profiler
//! as a kernel under its operator.
//!
//! `matmul` on `f32` calls `matrixmultiply::sgemm` (chosen over `gemm` by
//! `benches/matmul_cpu.rs`, see docs/BENCHMARKS.md) under the `ieee`
//! precision; a reduced mode (`tf32`, `bf16`) runs the compute kernel's
//! host function (`crate::compute::matmul`), the GPUs' numerics, and so
//! do `f16`/`bf16` (widened, the dtype's plan, rounded back); integers use a plain loop with wrapping arithmetic.
//! Floating-point `sum` accumulates in `f64`; `softmax` (over the last
//! dimension) subtracts each row's maximum before `exp`, so large inputs
//! do not overflow.

use half::{bf16, f16};

use super::call::{KernelOutcome, OpCall, common_dtype, two_tensors};
use super::launch::{Params, compute_matmul, launch};
use crate::compute::MatmulPrecision;
use crate::kernel::{CpuInvocation, Kernel};
use crate::tensor::{DType, Element, Tensor};
use crate::{Error, Result};

fn dtype_code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::U32 => 4,
        DType::U8 => 5,
    }
}

/// Runs `$body` with `$t` the element type of dtype code `$code`.
macro_rules! with_type {
    ($code:expr, $t:ident => $body:expr) => {
        match $code {
            0 => {
                type $t = f32;
                $body
            }
            1 => {
                type $t = f16;
                $body
            }
            2 => {
                type $t = bf16;
                $body
            }
            3 => {
                type $t = i32;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            5 => {
                type $t = u8;
                $body
            }
            c => Err(format!("expected a dtype code 0..=5, found {c}")),
        }
    };
}

fn param_u64(inv: &CpuInvocation<'_>, offset: usize) -> Result<u64, String> {
    Ok(u64::from(inv.param_u32(offset)?) | (u64::from(inv.param_u32(offset + 4)?) << 32))
}

fn param_usize(inv: &CpuInvocation<'_>, offset: usize) -> Result<usize, String> {
    usize::try_from(param_u64(inv, offset)?).map_err(|e| e.to_string())
}

fn param_f64(inv: &CpuInvocation<'_>, offset: usize) -> Result<f64, String> {
    param_u64(inv, offset).map(f64::from_bits)
}

fn view<T: Element>(binding: usize, bytes: &[u8], n: usize) -> Result<&[T], String> {
    let s: &[T] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| format!("binding {binding}: not a slice of {:?} ({e:?})", T::DTYPE))?;
    s.get(..n).ok_or_else(|| {
        format!(
            "binding {binding}: expected at least {n} elements, found {}",
            s.len()
        )
    })
}

fn view_mut<T: Element>(binding: usize, bytes: &mut [u8], n: usize) -> Result<&mut [T], String> {
    let s: &mut [T] = bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| format!("binding {binding}: not a slice of {:?} ({e:?})", T::DTYPE))?;
    let len = s.len();
    s.get_mut(..n)
        .ok_or_else(|| format!("binding {binding}: expected at least {n} elements, found {len}"))
}

const fn host_kernel(name: &'static str, bindings: usize, f: crate::kernel::CpuKernelFn) -> Kernel {
    Kernel {
        name,
        workgroup_size: [1, 1, 1],
        bindings,
        wgsl: None,
        ptx: None,
        cpu: Some(f),
        strict_float: false,
    }
}

const ONE: [u32; 3] = [1, 1, 1];

// --- elementwise --------------------------------------------------------

fn binary(inv: &mut CpuInvocation<'_>, mul: bool) -> Result<(), String> {
    let (code, n) = (inv.param_u32(0)?, param_usize(inv, 4)?);
    let [a, b, out] = &mut inv.buffers[..] else {
        return Err("expected 3 buffers".to_owned());
    };
    with_type!(code, T => {
        let (a, b) = (view::<T>(0, a, n)?, view::<T>(1, b, n)?);
        let out = view_mut::<T>(2, out, n)?;
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = if mul { x.mul(y) } else { x.add(y) };
        }
        Ok(())
    })
}

fn add_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    binary(inv, false)
}

fn mul_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    binary(inv, true)
}

fn scalar_op(inv: &mut CpuInvocation<'_>, mul: bool) -> Result<(), String> {
    let (code, n, s) = (inv.param_u32(0)?, param_usize(inv, 4)?, param_f64(inv, 12)?);
    let [x, out] = &mut inv.buffers[..] else {
        return Err("expected 2 buffers".to_owned());
    };
    with_type!(code, T => {
        let x = view::<T>(0, x, n)?;
        let out = view_mut::<T>(1, out, n)?;
        let s = <T as Element>::from_f64(s);
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if mul { v.mul(s) } else { v.add(s) };
        }
        Ok(())
    })
}

fn add_scalar_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    scalar_op(inv, false)
}

fn mul_scalar_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    scalar_op(inv, true)
}

fn fill_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let (code, n, v) = (inv.param_u32(0)?, param_usize(inv, 4)?, param_f64(inv, 12)?);
    let [out] = &mut inv.buffers[..] else {
        return Err("expected 1 buffer".to_owned());
    };
    with_type!(code, T => {
        view_mut::<T>(0, out, n)?.fill(<T as Element>::from_f64(v));
        Ok(())
    })
}

/// `out[i] = x[i]` converted from one dtype to another (as
/// [`Element::from_f64`] converts).
fn cast_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let (from, to, n) = (inv.param_u32(0)?, inv.param_u32(4)?, param_usize(inv, 8)?);
    let [x, out] = &mut inv.buffers[..] else {
        return Err("expected 2 buffers".to_owned());
    };
    with_type!(from, S => {
        let x = view::<S>(0, x, n)?;
        with_type!(to, D => {
            for (o, v) in view_mut::<D>(1, out, n)?.iter_mut().zip(x) {
                *o = <D as Element>::from_f64(v.to_f64());
            }
            Ok(())
        })
    })
}

// --- matmul, sum, softmax ----------------------------------------------

/// `out[m x n] = a[m x k] * b[k x n]` in f32 (row-major).
pub(crate) fn sgemm(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    // SAFETY: the callers checked a.len() >= m*k, b.len() >= k*n and
    // out.len() >= m*n; the strides describe those row-major arrays, and
    // `out` does not alias `a` or `b` (a `&mut` slice).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            out.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

fn matmul_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let code = inv.param_u32(0)?;
    let (m, k, n) = (
        param_usize(inv, 4)?,
        param_usize(inv, 12)?,
        param_usize(inv, 20)?,
    );
    let [a, b, out] = &mut inv.buffers[..] else {
        return Err("expected 3 buffers".to_owned());
    };
    match code {
        0 => {
            let (a, b) = (view::<f32>(0, a, m * k)?, view::<f32>(1, b, k * n)?);
            sgemm(a, b, view_mut::<f32>(2, out, m * n)?, m, k, n);
            Ok(())
        }
        1 | 2 => with_type!(code, T => {
            let widen = |s: &[T]| -> Vec<f32> { s.iter().map(|v| v.to_f64() as f32).collect() };
            let (a, b) = (widen(view::<T>(0, a, m * k)?), widen(view::<T>(1, b, k * n)?));
            let mut c = vec![0f32; m * n];
            sgemm(&a, &b, &mut c, m, k, n);
            for (o, v) in view_mut::<T>(2, out, m * n)?.iter_mut().zip(c) {
                *o = <T as Element>::from_f64(f64::from(v));
            }
            Ok(())
        }),
        _ => with_type!(code, T => {
            let (a, b) = (view::<T>(0, a, m * k)?, view::<T>(1, b, k * n)?);
            let out = view_mut::<T>(2, out, m * n)?;
            for i in 0..m {
                for j in 0..n {
                    let mut acc = <T as Element>::from_f64(0.0);
                    for p in 0..k {
                        acc = acc.add(a[i * k + p].mul(b[p * n + j]));
                    }
                    out[i * n + j] = acc;
                }
            }
            Ok(())
        }),
    }
}

fn sum_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let (code, n) = (inv.param_u32(0)?, param_usize(inv, 4)?);
    let [x, out] = &mut inv.buffers[..] else {
        return Err("expected 2 buffers".to_owned());
    };
    with_type!(code, T => {
        let x = view::<T>(0, x, n)?;
        let total = if T::DTYPE.is_float() {
            <T as Element>::from_f64(x.iter().map(|v| v.to_f64()).sum())
        } else {
            x.iter().fold(<T as Element>::from_f64(0.0), |acc, &v| acc.add(v))
        };
        view_mut::<T>(1, out, 1)?[0] = total;
        Ok(())
    })
}

/// Softmax of one row into `out`, in f64, max-subtracted.
pub(crate) fn softmax_row(row: &[f64], out: &mut [f64]) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut total = 0.0;
    for (o, &v) in out.iter_mut().zip(row) {
        *o = (v - max).exp();
        total += *o;
    }
    for o in out.iter_mut() {
        *o /= total;
    }
}

fn softmax_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let (code, rows, cols) = (
        inv.param_u32(0)?,
        param_usize(inv, 4)?,
        param_usize(inv, 12)?,
    );
    let [x, out] = &mut inv.buffers[..] else {
        return Err("expected 2 buffers".to_owned());
    };
    with_type!(code, T => {
        let x = view::<T>(0, x, rows * cols)?;
        let out = view_mut::<T>(1, out, rows * cols)?;
        let mut row = vec![0f64; cols];
        let mut res = vec![0f64; cols];
        for r in 0..rows {
            for (d, s) in row.iter_mut().zip(&x[r * cols..(r + 1) * cols]) {
                *d = s.to_f64();
            }
            softmax_row(&row, &mut res);
            for (d, &s) in out[r * cols..(r + 1) * cols].iter_mut().zip(&res) {
                *d = <T as Element>::from_f64(s);
            }
        }
        Ok(())
    })
}

/// The CPU's `add` kernel: `out = a + b`. Bindings: `a`, `b`, `out`.
/// Parameters (32-bit words): the dtype code (`f32` 0, `f16` 1, `bf16` 2,
/// `i32` 3, `u32` 4, `u8` 5), then the element count as a u64 (low word
/// first). Launched over one workgroup (it loops itself).
pub const ADD: Kernel = host_kernel("add_cpu", 3, add_cpu);
/// The CPU's `mul` kernel; as [`ADD`].
pub const MUL: Kernel = host_kernel("mul_cpu", 3, mul_cpu);
pub(crate) const ADD_SCALAR: Kernel = host_kernel("add_scalar_cpu", 2, add_scalar_cpu);
pub(crate) const MUL_SCALAR: Kernel = host_kernel("mul_scalar_cpu", 2, mul_scalar_cpu);
pub(crate) const CAST: Kernel = host_kernel("cast_cpu", 2, cast_cpu);
/// The CPU's `fill_` kernel: binding `out`; parameters: dtype code, count
/// (u64), value (f64 bits, low word first).
pub const FILL: Kernel = host_kernel("fill_cpu", 1, fill_cpu);
/// The CPU's `matmul` kernel: bindings `a`, `b`, `out`; parameters: dtype
/// code, m, k, n (each a u64).
pub const MATMUL: Kernel = host_kernel("matmul_cpu", 3, matmul_cpu);
/// The CPU's `sum` kernel: bindings `x`, `out` (one element); parameters:
/// dtype code, count (u64).
pub const SUM: Kernel = host_kernel("sum_cpu", 2, sum_cpu);
/// The CPU's `softmax` kernel (last dimension): bindings `x`, `out`;
/// parameters: dtype code, rows, cols (each a u64).
pub const SOFTMAX: Kernel = host_kernel("softmax_cpu", 2, softmax_cpu);

// --- shape checks shared by every device's kernels ---------------------

/// Checks the operands of an elementwise binary operator: same shape.
#[inline]
pub(crate) fn check_same_shape(op: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.same_shape(b) {
        Ok(())
    } else {
        Err(shape_mismatch(op, a, b))
    }
}

#[cold]
fn shape_mismatch(op: &str, a: &Tensor, b: &Tensor) -> Error {
    Error::invalid(format!(
        "{op}: expected tensors of the same shape, found {:?} and {:?}",
        a.shape(),
        b.shape()
    ))
}

/// (m, k, n) of `a @ b`, checked: 2-D, inner dimensions equal.
pub(crate) fn matmul_dims(a: &Tensor, b: &Tensor) -> Result<(usize, usize, usize)> {
    match (a.shape(), b.shape()) {
        (&[m, k], &[k2, n]) if k == k2 => Ok((m, k, n)),
        (&[_, _], &[_, _]) => Err(Error::invalid(format!(
            "mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
            a.shape()[0],
            a.shape()[1],
            b.shape()[0],
            b.shape()[1]
        ))),
        _ => Err(Error::invalid(format!(
            "matmul: expected 2-D tensors, found shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        ))),
    }
}

/// (rows, cols) of a softmax over the last dimension.
pub(crate) fn softmax_dims(x: &Tensor) -> Result<(usize, usize)> {
    match x.shape().split_last() {
        Some((&cols, rest)) => Ok((rest.iter().product(), cols)),
        None => Ok((1, 1)),
    }
}

// --- the dispatcher's CPU kernels ---------------------------------------

fn done(t: Tensor) -> Result<KernelOutcome> {
    Ok(KernelOutcome::one(t))
}

/// `add`/`mul` (tensor, tensor) on any host device.
pub(crate) fn binary_kernel(call: &OpCall<'_>, mul: bool) -> Result<KernelOutcome> {
    let (a, b, dtype) = two_tensors(call)?;
    check_same_shape(call.op(), a, b)?;
    let out = call.empty_like(a)?;
    let k = if mul { &MUL } else { &ADD };
    let p = Params::default()
        .u32(dtype_code(dtype))
        .u64(a.numel() as u64);
    launch(call, k, ONE, &[a.buffer(), b.buffer(), out.buffer()], &p)?;
    done(out)
}

/// `add`/`mul` (tensor, scalar).
pub(crate) fn scalar_kernel(call: &OpCall<'_>, mul: bool) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let s = call.scalar(1)?;
    let out = call.empty_like(x)?;
    let k = if mul { &MUL_SCALAR } else { &ADD_SCALAR };
    let p = Params::default()
        .u32(dtype_code(x.dtype()))
        .u64(x.numel() as u64)
        .f64(s);
    launch(call, k, ONE, &[x.buffer(), out.buffer()], &p)?;
    done(out)
}

/// `fill_(self, value)`.
pub(crate) fn fill_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let v = call.scalar(1)?;
    let p = Params::default()
        .u32(dtype_code(x.dtype()))
        .u64(x.numel() as u64)
        .f64(v);
    launch(call, &FILL, ONE, &[x.buffer()], &p)?;
    done(x.clone())
}

/// `copy_(self, src)`: the same number of elements, `src` on any device
/// (a direct copy on one device, through the host otherwise). Between
/// dtypes, values are converted on the CPU: a call on another device
/// declines, so the fallback runs it. Between equal dtypes it works for
/// every device type (buffer copies only).
pub(crate) fn copy_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let (dst, src) = (call.tensor(0)?, call.tensor(1)?);
    if dst.numel() != src.numel() {
        return Err(Error::invalid(format!(
            "copy_: expected a source of {} elements, found {}",
            dst.numel(),
            src.numel()
        )));
    }
    let len = dst.buffer().len();
    if dst.dtype() != src.dtype() {
        if !call.device.is_cpu() {
            return Ok(KernelOutcome::Declined(format!(
                "copy_ from {} to {} converts on the CPU",
                src.dtype(),
                dst.dtype()
            )));
        }
        let on_cpu;
        let src = if src.device() == call.device {
            src
        } else {
            on_cpu = src.to(call.device, &call.stream)?;
            &on_cpu
        };
        let p = Params::default()
            .u32(dtype_code(src.dtype()))
            .u32(dtype_code(dst.dtype()))
            .u64(dst.numel() as u64);
        launch(call, &CAST, ONE, &[src.buffer(), dst.buffer()], &p)?;
        return done(dst.clone());
    }
    if len == 0 || std::ptr::eq(dst.buffer(), src.buffer()) {
        return done(dst.clone());
    }
    if src.device() == dst.device() {
        dst.buffer()
            .copy_from(&call.stream, src.buffer(), 0, 0, len)?;
    } else {
        let bytes = src.to_bytes()?;
        dst.buffer().write(&call.stream, 0, &bytes)?;
    }
    done(dst.clone())
}

/// `matmul(self, other)`.
pub(crate) fn matmul_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let dtype = common_dtype(call)?;
    let (a, b) = (call.tensor(0)?, call.tensor(1)?);
    let (m, k, n) = matmul_dims(a, b)?;
    let out = call.empty(&[m, n], dtype)?;
    if matches!(dtype, DType::F16 | DType::BF16) && m > 0 && k > 0 && n > 0 {
        // As the GPUs do: widened exactly, the compute kernel (host twin)
        // with the dtype's plan, the result rounded to the dtype.
        let (precision, _) = super::matmul_precision(call.device.device_type(), dtype);
        let widen = |t: &Tensor, to: DType| -> Result<Tensor> {
            let out = call.empty(t.shape(), to)?;
            let p = Params::default()
                .u32(dtype_code(t.dtype()))
                .u32(dtype_code(to))
                .u64(t.numel() as u64);
            launch(call, &CAST, ONE, &[t.buffer(), out.buffer()], &p)?;
            Ok(out)
        };
        let (a32, b32) = (widen(a, DType::F32)?, widen(b, DType::F32)?);
        let c32 = call.empty(&[m, n], DType::F32)?;
        compute_matmul(
            &call.stream,
            a32.buffer(),
            b32.buffer(),
            c32.buffer(),
            (m, k, n),
            precision,
        )?;
        let p = Params::default()
            .u32(dtype_code(DType::F32))
            .u32(dtype_code(dtype))
            .u64((m * n) as u64);
        launch(call, &CAST, ONE, &[c32.buffer(), out.buffer()], &p)?;
        return done(out);
    }
    if dtype == DType::F32 && m > 0 && k > 0 && n > 0 {
        // `ieee` keeps matrixmultiply; a reduced mode runs the compute
        // kernel's host twin, whose numerics are the GPUs'.
        let (precision, _) = super::matmul_precision(call.device.device_type(), dtype);
        if precision != MatmulPrecision::IEEE {
            compute_matmul(
                &call.stream,
                a.buffer(),
                b.buffer(),
                out.buffer(),
                (m, k, n),
                precision,
            )?;
            return done(out);
        }
    }
    let p = Params::default()
        .u32(dtype_code(dtype))
        .u64(m as u64)
        .u64(k as u64)
        .u64(n as u64);
    launch(
        call,
        &MATMUL,
        ONE,
        &[a.buffer(), b.buffer(), out.buffer()],
        &p,
    )?;
    done(out)
}

/// `sum(self)`: a 0-dimensional tensor of the same dtype.
pub(crate) fn sum_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    let out = call.empty(&[], x.dtype())?;
    let p = Params::default()
        .u32(dtype_code(x.dtype()))
        .u64(x.numel() as u64);
    launch(call, &SUM, ONE, &[x.buffer(), out.buffer()], &p)?;
    done(out)
}

/// `softmax(self)` over the last dimension; floating dtypes only.
pub(crate) fn softmax_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let x = call.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(Error::invalid(format!(
            "softmax: expected a floating-point dtype (f32, f16, bf16), found {}",
            x.dtype()
        )));
    }
    let (rows, cols) = softmax_dims(x)?;
    let out = call.empty_like(x)?;
    let p = Params::default()
        .u32(dtype_code(x.dtype()))
        .u64(rows as u64)
        .u64(cols as u64);
    launch(call, &SOFTMAX, ONE, &[x.buffer(), out.buffer()], &p)?;
    done(out)
}
