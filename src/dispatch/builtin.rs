//! The built-in operators: their schemas, their CPU kernels, the GPU
//! kernels of `gpu.rs`, and the CPU fallback for CUDA, Vulkan and wgpu.
//! Installed once, before the first dispatch or registration.

use std::sync::{Arc, OnceLock};

use super::call::{ArgKind, OpKernel, OpSchema};
use super::{cpu, fallback, gpu, random, registry};
use crate::Result;
use crate::core::DeviceType;

/// The schemas of the built-in operators.
pub(crate) fn schemas() -> Vec<OpSchema> {
    use ArgKind::{Int, Scalar, Tensor};
    vec![
        OpSchema::new("add", &[("self", Tensor), ("other", Tensor)]),
        OpSchema::new("mul", &[("self", Tensor), ("other", Tensor)]),
        OpSchema::new("add.Scalar", &[("self", Tensor), ("other", Scalar)]),
        OpSchema::new("mul.Scalar", &[("self", Tensor), ("other", Scalar)]),
        OpSchema::new("matmul", &[("self", Tensor), ("other", Tensor)]),
        OpSchema::new("sum", &[("self", Tensor)]),
        OpSchema::new("softmax", &[("self", Tensor)]),
        OpSchema::new("fill_", &[("self", Tensor), ("value", Scalar)]).in_place(0),
        OpSchema::new("copy_", &[("self", Tensor), ("src", Tensor)])
            .in_place(0)
            .any_device(),
        // The random operators write their first argument; seed and
        // offset come from a generator, reserved before the call.
        OpSchema::new("rand", &[("self", Tensor), ("seed", Int), ("offset", Int)]).in_place(0),
        OpSchema::new("randn", &[("self", Tensor), ("seed", Int), ("offset", Int)]).in_place(0),
        OpSchema::new(
            "uniform_",
            &[
                ("self", Tensor),
                ("from", Scalar),
                ("to", Scalar),
                ("seed", Int),
                ("offset", Int),
            ],
        )
        .in_place(0),
        OpSchema::new(
            "normal_",
            &[
                ("self", Tensor),
                ("mean", Scalar),
                ("std", Scalar),
                ("seed", Int),
                ("offset", Int),
            ],
        )
        .in_place(0),
        OpSchema::new(
            "randint",
            &[
                ("self", Tensor),
                ("low", Int),
                ("high", Int),
                ("seed", Int),
                ("offset", Int),
            ],
        )
        .in_place(0),
    ]
}

fn install() -> Result<()> {
    for s in schemas() {
        registry::define(s)?;
    }
    let cpu_kernels: [(&str, OpKernel); 9] = [
        ("add", Arc::new(|c| cpu::binary_kernel(c, false))),
        ("mul", Arc::new(|c| cpu::binary_kernel(c, true))),
        ("add.Scalar", Arc::new(|c| cpu::scalar_kernel(c, false))),
        ("mul.Scalar", Arc::new(|c| cpu::scalar_kernel(c, true))),
        ("matmul", Arc::new(cpu::matmul_kernel)),
        ("sum", Arc::new(cpu::sum_kernel)),
        ("softmax", Arc::new(cpu::softmax_kernel)),
        ("fill_", Arc::new(cpu::fill_kernel)),
        ("copy_", Arc::new(cpu::copy_kernel)),
    ];
    for (op, k) in cpu_kernels {
        registry::set_kernel(op, DeviceType::Cpu, k)?;
    }
    for ty in [
        DeviceType::Cpu,
        DeviceType::Cuda,
        DeviceType::Vulkan,
        DeviceType::Wgpu,
    ] {
        for op in random::OPS {
            registry::set_kernel(op, ty, Arc::new(random::random_kernel))?;
        }
    }
    for ty in [DeviceType::Cuda, DeviceType::Vulkan, DeviceType::Wgpu] {
        for (op, f) in gpu::GPU_KERNELS {
            registry::set_kernel(op, ty, Arc::new(f))?;
        }
        registry::set_fallback(ty, Arc::new(fallback::cpu_fallback));
    }
    Ok(())
}

/// Installs the built-in operators once; later calls return the first
/// result (on every call: cloned only when it is an error).
#[inline]
pub(crate) fn ensure() -> Result<()> {
    static DONE: OnceLock<Result<()>> = OnceLock::new();
    match DONE.get_or_init(install) {
        Ok(()) => Ok(()),
        Err(e) => Err(e.clone()),
    }
}
