//! A third-party backend through the public API: the `npu` of
//! `examples/custom_backend`, registered at run time in the PrivateUse1
//! slot (`privateuse1`), and the conformance suite on it, instantiated
//! exactly as an in-tree backend's is (`conformance`).

#[path = "../../examples/custom_backend/npu.rs"]
#[allow(
    dead_code,
    reason = "the tests use most of the backend, not every item"
)]
mod npu;

mod conformance;
mod privateuse1;
