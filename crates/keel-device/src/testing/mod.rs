//! Test support (feature `testing`), for Keel's own tests and for anyone
//! who builds a backend on Keel.
//!
//! - [`FakeGuardImpl`]: the fake backend (c10's `FakeGuardImpl`); see
//!   [`backend::fake`](crate::backend::fake).
//! - [`kernels`]: host test kernels ([`Gate`] and [`GATED_FILL`], [`SLEEP`],
//!   [`PANICS`]) that make "not yet complete" observable without timing
//!   races on backends that run host kernels.
//! - [`pattern`]: deterministic test bytes.
//! - [`VectorAdds`]: one small kernel launch, again and again, on any
//!   device (tests that need work on a stream, not its result).
//! - [`alloc_trace`]: an allocation trace shaped like a training step (the
//!   caching allocator's fragmentation test and benchmark).
//! - [`child`]: running one of a test binary's own tests in a child
//!   process (environment read once per process, missing drivers, whole
//!   device resources).
//! - [`vulkan`] (feature `vulkan`): a program's own ash instance and
//!   device, for the interop tests and the conformance suite on an
//!   adopted device.
//! - [`conformance`]: the backend conformance suite, written once and
//!   instantiated for a backend in one line with
//!   [`conformance_suite!`](crate::conformance_suite).
//!
//! Nothing here is used by Keel's runtime; it exists only for tests.

pub mod alloc_trace;
pub mod child;
pub mod conformance;
pub mod kernels;
#[cfg(feature = "vulkan")]
pub mod vulkan;

pub use crate::backend::fake::{FAKE_DEVICE_COUNT, FakeGuardImpl};
pub use kernels::{GATED_FILL, Gate, PANICS, SLEEP};

use crate::kernels::VECTOR_ADD;
use crate::{Buffer, Stream};

/// `vector_add` of 256 `f32` on three buffers of its own, launched on one
/// stream as often as a test likes (every backend has the kernel).
#[derive(Debug)]
pub struct VectorAdds {
    stream: Stream,
    bufs: [Buffer; 3],
}

impl VectorAdds {
    const N: u32 = 256;

    /// Buffers for the launches on `stream`'s device. Panics if they cannot
    /// be made (a test helper).
    pub fn on(stream: Stream) -> Self {
        let buffer = || Buffer::new(stream.device(), 4 * Self::N as usize).expect("buffer");
        VectorAdds {
            stream,
            bufs: [buffer(), buffer(), buffer()],
        }
    }

    /// One launch. Panics if it fails (a test helper).
    pub fn launch(&self) {
        let [a, b, c] = &self.bufs;
        self.stream
            .launch(
                &VECTOR_ADD,
                VECTOR_ADD.grid_for(u64::from(Self::N)),
                &[a, b, c],
                &Self::N.to_le_bytes(),
            )
            .expect("launch");
    }
}

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
