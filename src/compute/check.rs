//! Argument checks shared by the launch functions.

use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// The element count of a matrix with `dims`, checked to fit the kernels'
/// `u32` indices.
pub(super) fn check_size(what: &str, name: &str, dims: &[usize]) -> Result<usize> {
    let len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&l| l <= u32::MAX as usize - 256);
    len.ok_or_else(|| {
        Error::invalid(format!(
            "{what}: `{name}` has {dims:?} elements; expected at most {} (indices are u32)",
            u32::MAX - 256
        ))
    })
}

/// `buffer` must hold at least `elems` f32s.
pub(super) fn check_buffer(what: &str, name: &str, buffer: &Buffer, elems: usize) -> Result<()> {
    let need = elems * 4;
    if buffer.len() < need {
        return Err(Error::invalid(format!(
            "{what}: expected `{name}` to hold at least {elems} f32s ({need} bytes), found {} bytes",
            buffer.len()
        )));
    }
    Ok(())
}

/// `out` must not be one of `inputs`.
pub(super) fn check_distinct(what: &str, out: &Buffer, inputs: &[(&str, &Buffer)]) -> Result<()> {
    match inputs.iter().find(|(_, b)| std::ptr::eq(*b, out)) {
        Some((name, _)) => Err(Error::invalid(format!(
            "{what}: expected `out` to be a buffer of its own, found it is also `{name}`"
        ))),
        None => Ok(()),
    }
}

/// Workgroups covering `len` in steps of `edge`, within one grid
/// dimension's 65535.
pub(super) fn groups(what: &str, len: usize, edge: u32) -> Result<u32> {
    let g = len.div_ceil(edge as usize);
    u32::try_from(g).ok().filter(|&g| g <= 65535).ok_or_else(|| {
        Error::invalid(format!(
            "{what}: a dimension of {len} needs {g} workgroups of {edge}; expected at most 65535"
        ))
    })
}
