//! Operators through the dispatcher on every device present (`ops`), the
//! compute kernels they launch (`compute`), tensors through DLPack
//! (`dlpack`), and a cold kernel compile on
//! wgpu's GL adapter beside other threads' work (`gl_compile`).

#[path = "../../examples/custom_backend/npu.rs"]
#[allow(dead_code, reason = "the tests use the operators, not every item")]
mod npu;

mod compute;
#[cfg(feature = "dlpack")]
mod dlpack;
#[cfg(feature = "wgpu")]
mod gl_compile;
mod ops;
