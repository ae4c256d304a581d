//! Launching a kernel for an operator: parameter blocks, and buffers bound
//! twice (`add(x, x)`), which backends refuse, made distinct first.

use crate::Buffer;
use crate::Result;
use crate::compute::{self, MatmulAlgorithm, MatmulOptions, MatmulPrecision};
use crate::core::Stream;
use crate::kernel::Kernel;

use super::OpCall;

/// Buffers an operator kernel binds without an allocation.
const MAX_BINDINGS: usize = 4;

/// The most parameter bytes an operator kernel takes.
const MAX_PARAMS: usize = 32;

/// A kernel's parameter block, built little-endian in 32-bit words (on
/// the stack: a dispatch allocates nothing for it).
#[derive(Debug, Default)]
pub(crate) struct Params {
    bytes: [u8; MAX_PARAMS],
    len: usize,
}

impl Params {
    #[inline]
    pub(crate) fn u32(mut self, v: u32) -> Params {
        // Operator kernels take at most 8 words; more is a bug here.
        let end = (self.len + 4).min(MAX_PARAMS);
        self.bytes[self.len..end].copy_from_slice(&v.to_le_bytes()[..end - self.len]);
        self.len = end;
        self
    }

    #[inline]
    pub(crate) fn f32(self, v: f32) -> Params {
        self.u32(v.to_bits())
    }

    /// Two words, low first.
    #[inline]
    pub(crate) fn u64(self, v: u64) -> Params {
        self.u32(v as u32).u32((v >> 32) as u32)
    }

    /// Two words, low first.
    #[inline]
    pub(crate) fn f64(self, v: f64) -> Params {
        self.u64(v.to_bits())
    }

    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Launches `kernel` on the call's stream over `buffers`; a buffer bound
/// a second time is replaced by a copy of it (made on that stream).
#[inline]
pub(crate) fn launch(
    call: &OpCall<'_>,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &[&Buffer],
    params: &Params,
) -> Result<()> {
    if let [first, rest @ ..] = buffers
        && rest.len() < MAX_BINDINGS
    {
        // The usual case: distinct buffers, bound without an allocation.
        let mut bound: [&Buffer; MAX_BINDINGS] = [*first; MAX_BINDINGS];
        let mut distinct = true;
        for (i, b) in rest.iter().enumerate() {
            let b: &Buffer = b;
            for p in &bound[..=i] {
                distinct &= !std::ptr::eq(*p, b);
            }
            bound[i + 1] = b;
        }
        if distinct {
            return call.launch_kernel(kernel, grid, &bound[..buffers.len()], params.bytes());
        }
    }
    launch_copies(&call.stream, kernel, grid, buffers, params)
}

/// [`launch`] with a buffer bound twice: copies first.
#[cold]
#[inline(never)]
fn launch_copies(
    stream: &Stream,
    kernel: &Kernel,
    grid: [u32; 3],
    buffers: &[&Buffer],
    params: &Params,
) -> Result<()> {
    let twice = |i: usize| buffers[..i].iter().any(|p| std::ptr::eq(*p, buffers[i]));
    let mut copies: Vec<(usize, Buffer)> = Vec::new();
    for i in (0..buffers.len()).filter(|&i| twice(i)) {
        let b = buffers[i];
        let copy = Buffer::empty(b.device(), b.len())?;
        copy.copy_from(stream, b, 0, 0, b.len())?;
        copies.push((i, copy));
    }
    let bound: Vec<&Buffer> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| copies.iter().find(|(j, _)| *j == i).map_or(*b, |(_, c)| c))
        .collect();
    stream.launch(kernel, grid, &bound, params.bytes())
}

/// `out = a @ b` through [`compute::matmul`]'s tiled kernel with
/// `precision` (sizes at least 1, checked by the caller); `a @ a` binds a
/// copy of `b`, since backends bind distinct buffers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn compute_matmul(
    stream: &Stream,
    a: &Buffer,
    b: &Buffer,
    out: &Buffer,
    (m, k, n): (usize, usize, usize),
    precision: MatmulPrecision,
) -> Result<()> {
    let copy;
    let b: &Buffer = if std::ptr::eq(a, b) {
        copy = Buffer::empty(b.device(), b.len())?;
        copy.copy_from(stream, b, 0, 0, b.len())?;
        &copy
    } else {
        b
    };
    let opts = MatmulOptions {
        algorithm: MatmulAlgorithm::Tiled,
        precision,
    };
    compute::matmul(stream, a, b, out, m, k, n, &opts)
}
