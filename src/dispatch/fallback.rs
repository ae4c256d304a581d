//! The CPU fallback (the PrivateUse1 article's `custom_cpu_fallback`, c10's
//! boxed CPU fallback): runs an operator that a device type has no kernel
//! for on the CPU.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use super::call::{Arg, KernelOutcome, OpCall, Outputs};
use super::registry;
use crate::api::current_stream;
use crate::core::{Device, DeviceType};
use crate::tensor::Tensor;
use crate::{Error, Result};

static WARNED: Mutex<Option<HashSet<(String, DeviceType)>>> = Mutex::new(None);

/// Warns once per (operator, device type) on stderr, with a hint.
fn warn_once(op: &str, ty: DeviceType) {
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    if warned
        .get_or_insert_with(HashSet::new)
        .insert((op.to_owned(), ty))
    {
        eprintln!(
            "keel warning: the operator '{op}' has no {name} kernel; it falls back to the CPU \
             (inputs copied to the CPU, results copied back), which costs time. \
             Hint: register a kernel with keel::dispatch::register_kernel(\"{op}\", DeviceType::{ty:?}, ..).",
            name = ty.name_lower()
        );
    }
}

/// Runs `call` on the CPU: copies every tensor argument to the CPU (read on
/// the current stream of its device), runs the operator's CPU kernel on
/// the CPU's current stream, and copies the results back to `call.device`
/// on `call.stream`; an in-place operator's written argument is written
/// back into the original tensor's buffer. Warns once per operator and
/// device type. Register it with
/// [`register_fallback`](super::register_fallback) for a device type.
pub fn cpu_fallback(call: &OpCall<'_>) -> Result<Outputs> {
    let ty = call.device.device_type();
    warn_once(call.op(), ty);
    let cpu = Device::cpu();
    let cpu_stream = current_stream(cpu)?;
    // Tensors not on the CPU, copied there; then the arguments over them.
    let copies: Vec<Option<Tensor>> = call
        .args
        .iter()
        .map(|a| match a {
            Arg::Tensor(t) if t.device() != cpu => t.to(cpu, &cpu_stream).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    let args: Vec<Arg<'_>> = call
        .args
        .iter()
        .zip(&copies)
        .map(|(a, c)| c.as_ref().map_or(*a, Arg::Tensor))
        .collect();
    let kernel = registry::kernel(call.op(), DeviceType::Cpu).ok_or_else(|| {
        Error::invalid(format!(
            "the CPU fallback of '{}' found no CPU kernel for it",
            call.op()
        ))
    })?;
    let cpu_call = call.with_args(&args, cpu, cpu_stream);
    let outs = match kernel(&cpu_call)? {
        KernelOutcome::Done(outs) => outs,
        KernelOutcome::Declined(reason) => {
            return Err(Error::invalid(format!(
                "the CPU fallback of '{}' cannot run it: {reason}",
                call.op()
            )));
        }
    };
    if let Some(i) = call.schema.mutates {
        let original = call.tensor(i)?;
        if original.device() != cpu {
            let bytes = cpu_call.tensor(i)?.to_bytes()?;
            if !bytes.is_empty() {
                original.buffer().write(&call.stream, 0, &bytes)?;
            }
        }
        return Ok(smallvec::smallvec![original.clone()]);
    }
    if call.device == cpu {
        return Ok(outs);
    }
    outs.iter()
        .map(|t| t.to(call.device, &call.stream))
        .collect()
}
