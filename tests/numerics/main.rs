//! Numerics on every device present: the precision policy, autocast,
//! generators and random kernels (`numerics`, `random`), and matmul's
//! accuracy per precision mode (`matmul`).

#[path = "../../examples/custom_backend/npu.rs"]
#[allow(dead_code, reason = "the tests use the generator and autocast hooks")]
mod npu;

mod matmul;
mod numerics;
mod random;
