//! The operator dispatcher: operators registered by name with a schema,
//! a kernel per (operator, device type), a fallback per device type; the
//! PrivateUse1 article's dispatch keys, reduced to device types.
//!
//! ```
//! # fn main() -> keel::Result<()> {
//! use keel::{DType, Device, Tensor};
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::cpu())?;
//! let b = Tensor::full(&[3], 10.0, DType::F32, Device::cpu())?;
//! let c = keel::dispatch::add(&a, &b)?; // or a.add(&b)?
//! assert_eq!(c.to_vec::<f32>()?, vec![11.0, 12.0, 13.0]);
//! # Ok(()) }
//! ```
//!
//! # How a call is dispatched
//! 1. The device is the first tensor argument's; every other tensor must be
//!    on it (`copy_`'s source excepted), or the call fails with PyTorch's
//!    message ("Expected all tensors to be on the same device, but found at
//!    least two devices, cuda:0 and cpu!"). The arguments are checked
//!    against the operator's [`OpSchema`].
//! 2. The kernel registered for the device's type runs on the current
//!    stream of the device. A kernel may *decline* a call
//!    ([`KernelOutcome::Declined`]): Keel's GPU kernels are `f32`-only and
//!    decline other dtypes.
//! 3. With no kernel, or a declined call, the device type's fallback runs
//!    (counted per operator: [`fallback_count`]); with none, the call
//!    fails naming the operator and the device type
//!    ([`crate::Error::NoKernel`]). [`cpu_fallback`]
//!    copies the inputs to the CPU, runs the CPU kernel and copies the
//!    results back, warning once per operator.
//!
//! Built in: CPU kernels for every operator; GPU kernels (CUDA, Vulkan,
//! wgpu) for `add`, `mul`, `add.Scalar`, `mul.Scalar`, `fill_`, `matmul`,
//! `sum` and `softmax` (`f32`; `matmul` also `f16`/`bf16`), and `copy_`
//! by buffer copies or the f32 <-> f16/bf16 conversion kernel (other
//! conversions decline: the CPU converts); the random operators' kernel
//! on every built-in device type; the CPU fallback for CUDA, Vulkan and
//! wgpu (what their kernels decline runs on the CPU). A third party
//! registers its own at run time, for any device type
//! ([`register_kernel`], [`register_fallback`], [`define_op`] for new
//! operators; a schema takes tensors, scalars and integers, so a random
//! operator's seed and bounds fit). A call dispatches on its tensors, so
//! an operator that makes values from nothing takes the tensor it fills,
//! in place, as PyTorch's `uniform_(self, from, to, generator)` does:
//! `OpSchema::new("uniform_", &[("self", Tensor), ("low", Scalar),
//! ("high", Scalar), ("seed", Int), ("offset", Int)]).in_place(0)`.
//!
//! # Numerics
//! `matmul` resolves the thread's precision policy for the device type
//! and the inputs' dtype ([`matmul_precision`]) and runs with it on every
//! backend. With autocast on for the device type (on the calling thread),
//! a functional operator's floating inputs are converted first, by
//! `copy_` on their device, to the dtype its autocast policy gives
//! ([`crate::autocast::cast_dtype`]): `matmul` runs in the autocast dtype,
//! `sum` and `softmax` in `f32`.
//!
//! The random operators ([`rand`], [`randn`], [`randint`], [`uniform_`],
//! [`normal_`]) take an optional [`Generator`] (default: the device's),
//! reserve the words they use from it, and dispatch with the seed and
//! offset as `int` arguments, so a kernel, a fallback and every backend
//! compute the same values.
//!
//! # Profiling
//! With a profiler session recording, each call is one host span (kind
//! `Operator`, category `cpu_op` in JSON) named after the operator, with
//! PyTorch's "Input Dims" and "Input type" arguments; the copies and
//! launches it made are inside it, and every kernel it launched has a flow
//! from it. A `matmul` span also has a `precision` argument: the mode it
//! ran with (`"ieee"`, `"tf32"`, `"bf16"`, `"f16"`, with `"+f16acc"` and
//! `"+splitk-f16"`/`"+splitk-bf16"` as they apply).

mod builtin;
mod call;
mod cpu;
mod fallback;
mod gpu;
mod launch;
mod random;
mod registry;

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub use call::{Arg, ArgKind, Fallback, KernelOutcome, OpCall, OpKernel, OpSchema, Outputs};
pub use cpu::{
    ADD as CPU_ADD, FILL as CPU_FILL, MATMUL as CPU_MATMUL, MUL as CPU_MUL, SOFTMAX as CPU_SOFTMAX,
    SUM as CPU_SUM,
};
pub use fallback::cpu_fallback;
pub use gpu::{
    ADD_F32, ADD_SCALAR_F32, FILL_F32, GPU_KERNELS, GpuKernelFn, MUL_F32, MUL_SCALAR_F32,
    elementwise_grid,
};
pub use random::{OPS as RANDOM_OPS, random_kernel};

use crate::api::current_stream;
use crate::autocast::{self, AutocastDtype};
use crate::compute::{Accumulation, InputRounding, MatmulPrecision, Reduction};
use crate::core::{Device, DeviceType};
use crate::generator::{Generator, default_generator};
use crate::precision;
use crate::profiler::Text;
use crate::profiler::record;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};
use registry::Resolved;

/// Defines a new operator (the same schema again is fine).
pub fn define_op(schema: OpSchema) -> Result<()> {
    builtin::ensure()?;
    registry::define(schema)
}

/// Registers (or replaces) the kernel of `op` for device type `ty`.
pub fn register_kernel(
    op: &str,
    ty: DeviceType,
    kernel: impl Fn(&OpCall<'_>) -> Result<KernelOutcome> + Send + Sync + 'static,
) -> Result<()> {
    builtin::ensure()?;
    registry::set_kernel(op, ty, Arc::new(kernel))
}

/// Registers (or replaces) the fallback of device type `ty`: what runs an
/// operator that has no kernel for `ty`, or whose kernel declined.
/// [`cpu_fallback`] is the usual one.
pub fn register_fallback(
    ty: DeviceType,
    fallback: impl Fn(&OpCall<'_>) -> Result<Outputs> + Send + Sync + 'static,
) -> Result<()> {
    builtin::ensure()?;
    registry::set_fallback(ty, Arc::new(fallback));
    Ok(())
}

/// How many calls of `op` ran through a fallback in this process (0 for
/// an unknown operator).
pub fn fallback_count(op: &str) -> u64 {
    registry::fallback_count(op)
}

/// Every operator's schema, in definition order.
pub fn schemas() -> Result<Vec<OpSchema>> {
    builtin::ensure()?;
    Ok(registry::schemas().iter().map(|s| (**s).clone()).collect())
}

/// The matmul numerics the thread's precision policy gives device type
/// `ty` for inputs of `dtype` ([`precision::matmul_mode`] and its
/// [`MatmulPlan`](precision::MatmulPlan)), as the compute kernels take
/// them, with a short label for the operator's profiler span (`"ieee"`,
/// `"tf32"`, `"bf16"`, `"f16"`, plus `"+f16acc"` for f16 accumulation and
/// `"+splitk-f16"`/`"+splitk-bf16"` for a narrow split-K reduction).
/// Integer dtypes have no policy: plain.
pub fn matmul_precision(ty: DeviceType, dtype: DType) -> (MatmulPrecision, String) {
    use precision::{MatmulInput, Rounding};
    let input = match dtype {
        DType::F32 => MatmulInput::F32,
        DType::F16 => MatmulInput::F16,
        DType::BF16 => MatmulInput::Bf16,
        _ => return (MatmulPrecision::IEEE, "ieee".to_owned()),
    };
    let plan = precision::matmul_mode(ty).plan(input);
    let inputs = match plan.input_rounding {
        Rounding::None => InputRounding::Ieee,
        Rounding::Tf32 => InputRounding::Tf32,
        Rounding::Bf16 => InputRounding::Bf16,
        Rounding::F16 => InputRounding::F16,
    };
    let accumulation = if plan.accumulate_in_f16 {
        Accumulation::F16
    } else {
        Accumulation::F32
    };
    let reduction = match plan.partial_rounding {
        Rounding::F16 => Reduction::F16,
        Rounding::Bf16 => Reduction::Bf16,
        Rounding::None | Rounding::Tf32 => Reduction::F32,
    };
    let mut label = match inputs {
        InputRounding::Ieee => "ieee",
        InputRounding::Tf32 => "tf32",
        InputRounding::Bf16 => "bf16",
        InputRounding::F16 => "f16",
    }
    .to_owned();
    if accumulation == Accumulation::F16 {
        label.push_str("+f16acc");
    }
    match reduction {
        Reduction::F16 => label.push_str("+splitk-f16"),
        Reduction::Bf16 => label.push_str("+splitk-bf16"),
        Reduction::F32 => {}
    }
    let p = MatmulPrecision {
        inputs,
        accumulation,
        reduction,
    };
    (p, label)
}

/// The device a call dispatches on: its first tensor's.
#[inline]
fn call_device(op: &str, args: &[Arg<'_>]) -> Result<Device> {
    for a in args {
        if let Arg::Tensor(t) = a {
            return Ok(t.device());
        }
    }
    Err(no_tensor(op))
}

#[cold]
fn no_tensor(op: &str) -> Error {
    let op: String = op.chars().take(40).collect();
    Error::invalid(format!(
        "{op}: expected at least one tensor argument, found none"
    ))
}

/// PyTorch's "Input Dims" and "Input type" of a call.
fn input_args(args: &[Arg<'_>]) -> Vec<(Text, Text)> {
    let mut dims = Vec::with_capacity(args.len());
    let mut types = Vec::with_capacity(args.len());
    for a in args {
        match a {
            Arg::Tensor(t) => {
                let d: Vec<String> = t.shape().iter().map(usize::to_string).collect();
                dims.push(format!("[{}]", d.join(", ")));
                types.push(format!("\"{}\"", t.dtype().torch_name()));
            }
            Arg::Scalar(_) => {
                dims.push("[]".to_owned());
                types.push("\"Scalar\"".to_owned());
            }
            Arg::Int(_) => {
                dims.push("[]".to_owned());
                types.push("\"Int\"".to_owned());
            }
        }
    }
    vec![
        ("Input Dims".into(), format!("[{}]", dims.join(", ")).into()),
        (
            "Input type".into(),
            format!("[{}]", types.join(", ")).into(),
        ),
    ]
}

// Note [Autocast in the dispatcher]
// Autocast converts a functional operator's floating inputs in the
// dispatcher, once the call is checked and before a kernel or fallback
// runs, as PyTorch's Autocast dispatch key sits in front of the backend
// keys: every kernel, built in or a third party's, sees its inputs in
// the dtype the policy gives and needs no autocast code of its own. The
// converted call is dispatched again, so its span is the operator's, in
// the dtype it ran in. In-place operators are left alone, as PyTorch
// leaves them: what they write is an input, whose dtype a conversion
// cannot change. A call with autocast off pays one relaxed load
// (`autocast::is_autocast_enabled` reads the thread's state only while
// some thread has autocast on), and the conversion is out of line
// (`call_autocast`).

/// Autocast (Note [Autocast in the dispatcher]): with autocast on for
/// `ty` on this thread, a functional operator's floating tensors are
/// converted (by `copy_`, on their device) to the dtype
/// [`autocast::cast_dtype`] gives for the operator's policy: `matmul`
/// runs in the autocast dtype, `sum`/`softmax` in f32, `add`/`mul` in the
/// promoted type. `None` when nothing needs converting. Called only with
/// autocast on and for functional operators: in-place ones autocast leaves
/// alone, as PyTorch does (the check is in `dispatch`).
fn autocast_inputs(
    schema: &OpSchema,
    ty: DeviceType,
    args: &[Arg<'_>],
) -> Result<Option<Vec<Option<Tensor>>>> {
    let floats: Vec<AutocastDtype> = args
        .iter()
        .filter_map(|a| match a {
            Arg::Tensor(t) => t.dtype().autocast(),
            _ => None,
        })
        .collect();
    let Some(target) = autocast::cast_dtype(ty, &schema.name, &floats) else {
        return Ok(None);
    };
    let target = DType::from(target);
    let needs = |t: &Tensor| t.dtype().autocast().is_some() && t.dtype() != target;
    if !args.iter().any(|a| matches!(a, Arg::Tensor(t) if needs(t))) {
        return Ok(None);
    }
    let cast = args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) if needs(t) => {
                let to = Tensor::empty(t.shape(), target, t.device())?;
                copy_(&to, t).map(Some)
            }
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    Ok(Some(cast))
}

/// Calls operator `op` with `args`: the general entry point (the typed
/// functions below call it). Returns the operator's results (an in-place
/// operator returns the tensor it wrote). Under autocast, floating inputs
/// are converted first as the operator's policy says (see
/// [`crate::autocast`]).
pub fn call(op: &str, args: &[Arg<'_>]) -> Result<Outputs> {
    dispatch(op, args, |ty| registry::resolve(op, ty))
}

/// [`call`]'s body, shared with [`one`]: `resolve` finds the operator's
/// entry for a device type (by name, or through a typed operator's static
/// handle).
#[inline(always)]
fn dispatch(
    op: &str,
    args: &[Arg<'_>],
    resolve: impl FnOnce(DeviceType) -> Result<Rc<Resolved>>,
) -> Result<Outputs> {
    builtin::ensure()?;
    let device = call_device(op, args)?;
    let ty = device.device_type();
    let r = resolve(ty)?;
    // One pass: the kinds against the schema, and whether every tensor is
    // on the call's device (which one is not is found only for the error).
    let mut kinds = args.len() == r.schema.args.len();
    let mut same = true;
    for (a, s) in args.iter().zip(&r.schema.args) {
        kinds &= ArgKind::of(a) == s.1;
        if let Arg::Tensor(t) = a {
            same &= t.device() == device;
        }
    }
    if !kinds {
        return Err(r.schema.mismatch(args));
    }
    if !same && r.schema.same_device {
        return Err(device_mismatch(device, args));
    }
    if r.schema.mutates.is_none() && autocast::is_autocast_enabled(ty) {
        return call_autocast(&r, op, device, args);
    }
    execute(&r, device, args)
}

/// Runs a checked call, inside its profiler span while recording.
#[inline(always)]
fn execute(r: &Resolved, device: Device, args: &[Arg<'_>]) -> Result<Outputs> {
    if record::enabled() {
        return run_profiled(r, device, args);
    }
    run(r, device, args)
}

/// PyTorch's error for a call whose tensors are not all on `device`: the
/// first tensor on another device.
#[cold]
#[inline(never)]
fn device_mismatch(device: Device, args: &[Arg<'_>]) -> Error {
    let second = args
        .iter()
        .find_map(|a| match a {
            Arg::Tensor(t) if t.device() != device => Some(t.device()),
            _ => None,
        })
        .unwrap_or(device);
    Error::TensorDeviceMismatch {
        first: device,
        second,
    }
}

/// A call with autocast on for its device type: its floating inputs
/// converted first when the operator's policy says so.
#[inline(never)]
fn call_autocast(r: &Resolved, op: &str, device: Device, args: &[Arg<'_>]) -> Result<Outputs> {
    if let Some(cast) = autocast_inputs(&r.schema, device.device_type(), args)? {
        let args: Vec<Arg<'_>> = args
            .iter()
            .zip(&cast)
            .map(|(a, c)| c.as_ref().map_or(*a, Arg::Tensor))
            .collect();
        // The converted call needs no conversion: its span is the
        // operator's, in the dtype it ran in.
        return call(op, &args);
    }
    execute(r, device, args)
}

/// Runs a checked call: the kernel for the device type on the device's
/// current stream, or the fallback.
#[inline(always)]
fn run(r: &Resolved, device: Device, args: &[Arg<'_>]) -> Result<Outputs> {
    let call = OpCall {
        schema: &r.schema,
        args,
        device,
        stream: current_stream(device)?,
    };
    let Some(kernel) = &r.kernel else {
        return fall_back(r, &call, None);
    };
    match kernel(&call) {
        Ok(KernelOutcome::Done(outs)) => Ok(outs),
        outcome => not_done(r, &call, outcome),
    }
}

/// A kernel's outcome other than `Done`: its error, or the fallback when
/// it declined.
#[cold]
#[inline(never)]
fn not_done(r: &Resolved, call: &OpCall<'_>, outcome: Result<KernelOutcome>) -> Result<Outputs> {
    match outcome? {
        KernelOutcome::Done(outs) => Ok(outs),
        KernelOutcome::Declined(reason) => fall_back(r, call, Some(reason)),
    }
}

/// A call with no kernel, or whose kernel declined: the device type's
/// fallback, or an error naming what to register.
#[cold]
#[inline(never)]
fn fall_back(r: &Resolved, call: &OpCall<'_>, declined: Option<String>) -> Result<Outputs> {
    let Some(fallback) = &r.fallback else {
        let (op, ty) = (&r.schema.name, call.device.device_type());
        let reason = match declined {
            Some(reason) => format!("its kernel declined ({reason}) and {ty} has no fallback"),
            None => format!(
                "it has no {ty} kernel and {ty} has no fallback; register one with \
                 keel::dispatch::register_kernel(\"{op}\", DeviceType::{ty:?}, ..) or \
                 keel::dispatch::register_fallback(DeviceType::{ty:?}, keel::dispatch::cpu_fallback)"
            ),
        };
        return Err(Error::NoKernel {
            op: op.clone(),
            device_type: ty,
            reason,
        });
    };
    r.fallbacks.fetch_add(1, Ordering::Relaxed);
    fallback(call)
}

/// [`run`] inside the operator's profiler span, with its arguments.
#[inline(never)]
fn run_profiled(r: &Resolved, device: Device, args: &[Arg<'_>]) -> Result<Outputs> {
    let mut span_args = input_args(args);
    if r.schema.name == "matmul"
        && let Some(Arg::Tensor(t)) = args.first()
    {
        // What the kernels resolve the same way on this thread.
        let (_, label) = matmul_precision(device.device_type(), t.dtype());
        span_args.push(("precision".into(), label.into()));
    }
    record::operator(Cow::Owned(r.schema.name.clone()), span_args, || {
        run(r, device, args)
    })
}

/// The single result of a call.
fn one(op: &'static str, args: &[Arg<'_>]) -> Result<Tensor> {
    let mut outs = dispatch(op, args, |ty| registry::resolve_static(op, ty))?;
    match (outs.len(), outs.pop()) {
        (1, Some(t)) => Ok(t),
        (n, _) => Err(not_one(op, n)),
    }
}

#[cold]
fn not_one(op: &str, found: usize) -> Error {
    Error::invalid(format!(
        "{op}: expected 1 result from its kernel, found {found}"
    ))
}

/// `a + b`, elementwise (same shape and dtype).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    one("add", &[a.into(), b.into()])
}

/// `a * b`, elementwise (same shape and dtype).
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    one("mul", &[a.into(), b.into()])
}

/// `x + s` for every element (`s` converted to the dtype).
pub fn add_scalar(x: &Tensor, s: f64) -> Result<Tensor> {
    one("add.Scalar", &[x.into(), s.into()])
}

/// `x * s` for every element (`s` converted to the dtype).
pub fn mul_scalar(x: &Tensor, s: f64) -> Result<Tensor> {
    one("mul.Scalar", &[x.into(), s.into()])
}

/// The matrix product of 2-D `a` (m x k) and `b` (k x n).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    one("matmul", &[a.into(), b.into()])
}

/// The sum of every element, as a 0-dimensional tensor of the same dtype
/// (integers wrap; floats accumulate in f64 on the CPU).
pub fn sum(x: &Tensor) -> Result<Tensor> {
    one("sum", &[x.into()])
}

/// Softmax over the last dimension (numerically stable; floating dtypes).
pub fn softmax(x: &Tensor) -> Result<Tensor> {
    one("softmax", &[x.into()])
}

/// Sets every element of `x` to `value`, in place; returns `x`.
pub fn fill_(x: &Tensor, value: f64) -> Result<Tensor> {
    one("fill_", &[x.into(), value.into()])
}

/// Copies `src` (the same number of elements, any device, any dtype:
/// values are converted, on the CPU) into `dst`, in place; returns `dst`.
pub fn copy_(dst: &Tensor, src: &Tensor) -> Result<Tensor> {
    one("copy_", &[dst.into(), src.into()])
}

// --- random operators ---------------------------------------------------

/// The generator a random operator on `device` draws from: `generator`
/// (which must serve `device`'s type, as in PyTorch), or the device's
/// default generator.
fn generator_for(device: Device, generator: Option<&Generator>) -> Result<Generator> {
    match generator {
        Some(g) => {
            let (want, found) = (device.device_type(), g.device().device_type());
            if want != found {
                return Err(Error::invalid(format!(
                    "Expected a '{}' device type for generator but found '{}'",
                    want.name_lower(),
                    found.name_lower()
                )));
            }
            Ok(g.clone())
        }
        None => default_generator(device),
    }
}

/// Reserves `x.numel()` words of the generator and calls random operator
/// `op` on `x` with `params` then the reserved seed and offset.
fn random_call(
    op: &'static str,
    x: &Tensor,
    params: &[Arg<'_>],
    generator: Option<&Generator>,
) -> Result<Tensor> {
    let g = generator_for(x.device(), generator)?;
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(params.len() + 3);
    args.push(Arg::Tensor(x));
    args.extend_from_slice(params);
    // Checked before reserving: a refused call leaves the generator.
    random::check(op, &args)?;
    let at = g.reserve(x.numel() as u64)?;
    // The u64 seed and offset travel as the bits of i64s.
    args.push(Arg::Int(at.seed as i64));
    args.push(Arg::Int(at.offset as i64));
    one(op, &args)
}

/// `torch.rand(shape, generator=, device=)`: uniform `f32` in `[0, 1)`
/// from `generator` (or the device's default generator), which advances
/// by the number of elements (rounded up to a multiple of 4). The same
/// seed and offset give bit-identical tensors on every device.
pub fn rand(shape: &[usize], device: Device, generator: Option<&Generator>) -> Result<Tensor> {
    let x = Tensor::empty(shape, DType::F32, crate::api::resolve(device)?)?;
    random_call("rand", &x, &[], generator)
}

/// `torch.randn`: standard normal `f32` (Box-Muller), as [`rand`].
pub fn randn(shape: &[usize], device: Device, generator: Option<&Generator>) -> Result<Tensor> {
    let x = Tensor::empty(shape, DType::F32, crate::api::resolve(device)?)?;
    random_call("randn", &x, &[], generator)
}

/// `torch.randint(low, high, shape)`: uniform `i32` in `[low, high)`, as
/// [`rand`].
pub fn randint(
    low: i32,
    high: i32,
    shape: &[usize],
    device: Device,
    generator: Option<&Generator>,
) -> Result<Tensor> {
    let x = Tensor::empty(shape, DType::I32, crate::api::resolve(device)?)?;
    random_call(
        "randint",
        &x,
        &[Arg::Int(low.into()), Arg::Int(high.into())],
        generator,
    )
}

/// `x.uniform_(from, to, generator=)`: fills the `f32` tensor `x` with
/// uniform values in `[from, to)`, in place; returns `x`.
pub fn uniform_(x: &Tensor, from: f64, to: f64, generator: Option<&Generator>) -> Result<Tensor> {
    random_call(
        "uniform_",
        x,
        &[Arg::Scalar(from), Arg::Scalar(to)],
        generator,
    )
}

/// `x.normal_(mean, std, generator=)`: fills the `f32` tensor `x` with
/// normal values, in place; returns `x`.
pub fn normal_(x: &Tensor, mean: f64, std: f64, generator: Option<&Generator>) -> Result<Tensor> {
    random_call(
        "normal_",
        x,
        &[Arg::Scalar(mean), Arg::Scalar(std)],
        generator,
    )
}

impl Tensor {
    /// [`dispatch::uniform_`](uniform_).
    pub fn uniform_(&self, from: f64, to: f64, generator: Option<&Generator>) -> Result<Tensor> {
        uniform_(self, from, to, generator)
    }

    /// [`dispatch::normal_`](normal_).
    pub fn normal_(&self, mean: f64, std: f64, generator: Option<&Generator>) -> Result<Tensor> {
        normal_(self, mean, std, generator)
    }

    /// [`dispatch::add`](add).
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        add(self, other)
    }

    /// [`dispatch::mul`](mul).
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        mul(self, other)
    }

    /// [`dispatch::add_scalar`](add_scalar).
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        add_scalar(self, s)
    }

    /// [`dispatch::mul_scalar`](mul_scalar).
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        mul_scalar(self, s)
    }

    /// [`dispatch::matmul`](matmul).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        matmul(self, other)
    }

    /// [`dispatch::sum`](sum).
    pub fn sum(&self) -> Result<Tensor> {
        sum(self)
    }

    /// [`dispatch::softmax`](softmax).
    pub fn softmax(&self) -> Result<Tensor> {
        softmax(self)
    }

    /// [`dispatch::fill_`](fill_).
    pub fn fill_(&self, value: f64) -> Result<Tensor> {
        fill_(self, value)
    }

    /// [`dispatch::copy_`](copy_).
    pub fn copy_(&self, src: &Tensor) -> Result<Tensor> {
        copy_(self, src)
    }
}
