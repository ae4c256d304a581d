//! Test support (feature `testing`), for Keel's own tests and for anyone
//! who builds a backend on Keel.
//!
//! - [`FakeGuardImpl`]: the fake backend (c10's `FakeGuardImpl`); see
//!   [`backend::fake`](crate::backend::fake).
//! - [`kernels`]: host test kernels ([`Gate`] and [`GATED_FILL`], [`SLEEP`],
//!   [`PANICS`]) that make "not yet complete" observable without timing
//!   races on backends that run host kernels.
//! - [`pattern`]: deterministic test bytes.
//! - [`alloc_trace`]: an allocation trace shaped like a training step (the
//!   caching allocator's fragmentation test and benchmark).
//! - [`conformance`]: the backend conformance suite, written once and
//!   instantiated for a backend in one line with
//!   [`conformance_suite!`](crate::conformance_suite).
//!
//! Nothing here is used by Keel's runtime; it exists only for tests.

pub mod alloc_trace;
pub mod conformance;
pub mod kernels;

pub use crate::backend::fake::{FAKE_DEVICE_COUNT, FakeGuardImpl};
pub use kernels::{GATED_FILL, Gate, PANICS, SLEEP};

/// `len` deterministic pseudo-random bytes (xorshift from `seed`): the same
/// arguments give the same bytes on every run and platform.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}
