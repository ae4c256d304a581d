//! The random operators (`rand`, `randn`, `uniform_`, `normal_`,
//! `randint`): one kernel for every device type, a launch of
//! `crate::random`'s Philox kernels (WGSL, PTX, and the host reference's
//! function on the CPU and host backends).
//!
//! Each operator writes the tensor it is given (its first argument), in
//! place, and takes the Philox seed and offset as `int` arguments (the
//! `u64` seed's bits as an `i64`): the public functions reserve the words
//! from a generator *before* dispatching, so the values depend only on
//! (seed, offset, element) and the fallback path gives the same numbers
//! as a device's own kernel.

use super::call::{Arg, KernelOutcome, OpCall};
use crate::random::{self, RandomOp};
use crate::tensor::DType;
use crate::{Error, Result};

/// The random operators.
pub const OPS: [&str; 5] = ["rand", "randn", "uniform_", "normal_", "randint"];

/// Argument `i` of `call` as a `u64` (its bits; seeds use all 64).
fn word(call: &OpCall<'_>, i: usize) -> Result<u64> {
    Ok(call.int(i)? as u64)
}

/// What random operator `name` computes, from its arguments after the
/// tensor (`scalar(i)`/`int(i)` read argument `i`, counting the tensor as
/// 0), with the dtype it writes and the index of its seed argument.
fn describe(
    name: &str,
    scalar: impl Fn(usize) -> Result<f64>,
    int: impl Fn(usize) -> Result<i64>,
) -> Result<(RandomOp, DType, usize)> {
    let bound = |i: usize| {
        let v = int(i)?;
        i32::try_from(v)
            .map_err(|_| Error::invalid(format!("{name}: expected a bound within i32, found {v}")))
    };
    Ok(match name {
        "rand" => (RandomOp::Rand, DType::F32, 1),
        "randn" => (RandomOp::Randn, DType::F32, 1),
        "uniform_" => (
            RandomOp::Uniform {
                lo: scalar(1)? as f32,
                hi: scalar(2)? as f32,
            },
            DType::F32,
            3,
        ),
        "normal_" => (
            RandomOp::Normal {
                mean: scalar(1)? as f32,
                std: scalar(2)? as f32,
            },
            DType::F32,
            3,
        ),
        "randint" => (
            RandomOp::Randint {
                low: bound(1)?,
                high: bound(2)?,
            },
            DType::I32,
            3,
        ),
        other => {
            let other: String = other.chars().take(40).collect();
            return Err(Error::invalid(format!(
                "the random kernel runs rand, randn, uniform_, normal_ and randint, found '{other}'"
            )));
        }
    })
}

/// Checks a random operator's tensor and arguments (`args` without the
/// seed and offset) before any words are reserved, so a refused call
/// leaves the generator where it was.
pub(crate) fn check(name: &str, args: &[Arg<'_>]) -> Result<()> {
    let arg = |i: usize| args.get(i).copied();
    let scalar = |i: usize| match arg(i) {
        Some(Arg::Scalar(v)) => Ok(v),
        _ => Err(Error::invalid(format!(
            "{name}: expected argument {i} to be a scalar"
        ))),
    };
    let int = |i: usize| match arg(i) {
        Some(Arg::Int(v)) => Ok(v),
        _ => Err(Error::invalid(format!(
            "{name}: expected argument {i} to be an int"
        ))),
    };
    let (op, want, _) = describe(name, scalar, int)?;
    if let Some(Arg::Tensor(t)) = arg(0)
        && t.dtype() != want
    {
        return Err(Error::invalid(format!(
            "{name}: expected a {want} tensor, found {}",
            t.dtype()
        )));
    }
    // The bounds' checks (nothing is computed for 0 elements).
    random::reference(op, 0, 0, 0).map(|_| ())
}

/// The kernel of every random operator on every device type: checks the
/// tensor's dtype (`f32`; `i32` for `randint`) and launches the Philox
/// kernel at the call's (seed, offset). A third-party backend that runs
/// Keel's host kernels (as the `npu` example does) registers it for its
/// device type.
pub fn random_kernel(call: &OpCall<'_>) -> Result<KernelOutcome> {
    let out = call.tensor(0)?;
    let (op, want, at) = describe(call.op(), |i| call.scalar(i), |i| call.int(i))?;
    if out.dtype() != want {
        return Err(Error::invalid(format!(
            "{}: expected a {want} tensor, found {}",
            call.op(),
            out.dtype()
        )));
    }
    let (seed, offset) = (word(call, at)?, word(call, at + 1)?);
    random::launch(&call.stream, op, out.buffer(), out.numel(), seed, offset)?;
    Ok(KernelOutcome::one(out.clone()))
}
