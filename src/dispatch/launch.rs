//! Launching a kernel for an operator: parameter blocks, and buffers bound
//! twice (`add(x, x)`), which backends refuse, made distinct first.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::core::Stream;
use crate::error::Result;
use crate::kernel::Kernel;

/// A kernel's parameter block, built little-endian in 32-bit words.
#[derive(Debug, Default)]
pub(crate) struct Params(Vec<u8>);

impl Params {
    pub(crate) fn u32(mut self, v: u32) -> Params {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn f32(self, v: f32) -> Params {
        self.u32(v.to_bits())
    }

    /// Two words, low first.
    pub(crate) fn u64(self, v: u64) -> Params {
        self.u32(v as u32).u32((v >> 32) as u32)
    }

    /// Two words, low first.
    pub(crate) fn f64(self, v: f64) -> Params {
        self.u64(v.to_bits())
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Launches `kernel` on `stream` over `buffers`; a buffer bound a second
/// time is replaced by a copy of it (made on `stream`).
pub(crate) fn launch(
    stream: &Stream,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &[&Arc<Buffer>],
    params: &Params,
) -> Result<()> {
    let mut copies: Vec<(usize, Buffer)> = Vec::new();
    for (i, b) in buffers.iter().enumerate() {
        if buffers[..i].iter().any(|p| Arc::ptr_eq(p, b)) {
            let copy = Buffer::new(b.device(), b.len())?;
            copy.copy_from(stream, b, 0, 0, b.len())?;
            copies.push((i, copy));
        }
    }
    let bound: Vec<&Buffer> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            copies
                .iter()
                .find(|(j, _)| *j == i)
                .map_or(b.as_ref(), |(_, c)| c)
        })
        .collect();
    stream.launch(kernel, grid, &bound, params.bytes())
}
