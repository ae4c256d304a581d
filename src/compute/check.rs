//! Argument checks shared by the launch functions.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::Buffer;
use crate::core::{Device, Stream};
use crate::{Error, Result};

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

/// A per-device fact about what the device's shaders can do, computed by
/// `find` from its properties once per device and then read from `cache`
/// (the launch functions ask on every launch).
pub(super) fn device_fact(
    stream: &Stream,
    cache: &Mutex<HashMap<Device, bool>>,
    find: impl FnOnce(Device) -> Result<bool>,
) -> Result<bool> {
    let device = crate::api::resolve(stream.device())?;
    if let Some(yes) = cache.lock().map_or(None, |m| m.get(&device).copied()) {
        return Ok(yes);
    }
    let yes = find(device)?;
    if let Ok(mut m) = cache.lock() {
        m.insert(device, yes);
    }
    Ok(yes)
}

/// Whether `device`'s properties have an `extra` entry `key` whose value
/// satisfies `value`.
pub(super) fn has_property(
    device: Device,
    key: &str,
    value: impl Fn(&str) -> bool,
) -> Result<bool> {
    Ok(crate::api::properties(device)?
        .extra
        .iter()
        .any(|(k, v)| k == key && value(v)))
}
