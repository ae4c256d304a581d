//! `sum` (a two-level reduction, with subgroup operations where the device
//! has them) and `softmax_rows` (numerically stable, one workgroup per
//! row).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use super::check::{check_buffer, check_distinct, check_size, device_fact, has_property};
use super::params::{Launch, Param, ParamType::U32};
use crate::Buffer;
use crate::core::{Device, DeviceType, Stream};
use crate::kernel::Kernel;
use crate::{Error, Result};

/// Invocations per workgroup of the reduction kernels.
const WG: u32 = 256;
/// Elements per workgroup the first level aims for.
const PER_GROUP: usize = 2048;
/// Most workgroups of the first level (the second level is one workgroup
/// over their partial sums).
const MAX_GROUPS: usize = 1024;

/// One level of a sum, in workgroup memory: bindings `x`, `out`;
/// parameters `n`, `groups`. Source: `shaders/compute/sum.wgsl`; host
/// backends run its translation to Rust (`reduce/translated.rs`).
pub const SUM_SHARED: Launch = Launch {
    kernel: Kernel {
        name: "sum_shared",
        workgroup_size: [WG, 1, 1],
        bindings: 2,
        wgsl: Some(include_str!("../../shaders/compute/sum.wgsl")),
        ptx: None,
        cpu: Some(sum_shared_host),
        strict_float: false,
    },
    params: &[U32, U32],
};

/// [`SUM_SHARED`] with subgroup adds (`subgroupAdd`; warp shuffles in
/// the generated PTX). Source: `shaders/compute/sum_subgroup.wgsl`; host
/// backends, where a caller launches it, run its translation to Rust.
pub const SUM_SUBGROUP: Launch = Launch {
    kernel: Kernel {
        name: "sum_subgroup",
        workgroup_size: [WG, 1, 1],
        bindings: 2,
        wgsl: Some(include_str!("../../shaders/compute/sum_subgroup.wgsl")),
        ptx: None,
        cpu: Some(sum_subgroup_host),
        strict_float: false,
    },
    params: &[U32, U32],
};

/// Row softmax: bindings `x`, `out`; parameters `rows`, `cols`. Source:
/// `shaders/compute/softmax_rows.wgsl`; host backends run its translation
/// to Rust.
pub const SOFTMAX_ROWS: Launch = Launch {
    kernel: Kernel {
        name: "softmax_rows",
        workgroup_size: [WG, 1, 1],
        bindings: 2,
        wgsl: Some(include_str!("../../shaders/compute/softmax_rows.wgsl")),
        ptx: None,
        cpu: Some(softmax_rows_host),
        strict_float: false,
    },
    params: &[U32, U32],
};

crate::translated_host!(
    sum_shared_host => SUM_SHARED,
    sum_subgroup_host => SUM_SUBGROUP,
    softmax_rows_host => SOFTMAX_ROWS,
);

/// The reductions' WGSL translated to Rust, a phase between each two
/// barriers (generated; see `tests::the_translation_is_current`).
mod translated;

/// Which sum kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SumVariant {
    /// Subgroup operations where the device reports them
    /// ([`subgroups_supported`]), workgroup memory otherwise.
    #[default]
    Auto,
    /// Subgroup operations; an error where the device has none.
    Subgroup,
    /// Workgroup memory only (the fallback).
    Shared,
}

/// Whether `sum` can use subgroup operations on the stream's device: CUDA
/// always (warp shuffles); Vulkan and wgpu where the device reports the
/// property `"subgroup operations"` as `"arithmetic"` (Vulkan: subgroup
/// arithmetic in compute shaders; wgpu: `Features::SUBGROUP` enabled).
/// Read once per device (properties do not change), so a launch does not
/// rebuild them.
pub fn subgroups_supported(stream: &Stream) -> Result<bool> {
    static KNOWN: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    device_fact(stream, &KNOWN, |device| match device.device_type() {
        DeviceType::Cuda => Ok(true),
        DeviceType::Vulkan | DeviceType::Wgpu => {
            has_property(device, "subgroup operations", |v| v.contains("arithmetic"))
        }
        _ => Ok(false),
    })
}

/// Whether the stream's device stores f16 natively in shaders (WGSL
/// `enable f16;`): Vulkan where the device reports the property
/// `"f16 storage"` (`shaderFloat16` and 16-bit storage buffer access,
/// enabled at device creation), wgpu where `Features::SHADER_F16` was
/// enabled; false on CUDA (its PTX converts with `cvt`) and the CPU.
/// Where true, the dispatcher converts f16 tensors with
/// [`OP_CAST_F16_WIDEN`](super::params::OP_CAST_F16_WIDEN) and
/// [`OP_CAST_F16_NARROW`](super::params::OP_CAST_F16_NARROW); elsewhere
/// with the packed-word emulation [`OP_CAST`](super::params::OP_CAST)
/// (bit-identical results). Read once per device.
pub fn f16_storage(stream: &Stream) -> Result<bool> {
    static KNOWN: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    device_fact(stream, &KNOWN, |device| match device.device_type() {
        DeviceType::Vulkan | DeviceType::Wgpu => {
            has_property(device, "f16 storage", |v| v.starts_with("native"))
        }
        _ => Ok(false),
    })
}

/// `out[0] = x[0] + ... + x[n - 1]` (f32): per-workgroup partial sums into
/// a scratch buffer, then one workgroup over them (one level when one
/// workgroup covers `x`). `out` holds at least one f32.
pub fn sum(stream: &Stream, x: &Buffer, n: usize, out: &Buffer) -> Result<()> {
    sum_with(stream, x, n, out, SumVariant::Auto)
}

/// [`sum`] with a chosen kernel.
pub fn sum_with(
    stream: &Stream,
    x: &Buffer,
    n: usize,
    out: &Buffer,
    variant: SumVariant,
) -> Result<()> {
    let what = "sum";
    if n == 0 {
        return Err(Error::invalid(format!(
            "{what}: expected at least 1 element, found n = 0"
        )));
    }
    check_buffer(what, "x", x, check_size(what, "x", &[n])?)?;
    check_buffer(what, "out", out, 1)?;
    check_distinct(what, out, &[("x", x)])?;
    let launch = match variant {
        SumVariant::Shared => &SUM_SHARED,
        SumVariant::Subgroup if !subgroups_supported(stream)? => {
            return Err(Error::invalid(format!(
                "{what}: the subgroup variant needs subgroup operations, which {} does not report",
                stream.device()
            )));
        }
        SumVariant::Subgroup => &SUM_SUBGROUP,
        SumVariant::Auto if subgroups_supported(stream)? => &SUM_SUBGROUP,
        SumVariant::Auto => &SUM_SHARED,
    };
    let groups = n.div_ceil(PER_GROUP).min(MAX_GROUPS);
    let u = |v: usize| Param::U32(v as u32); // n checked, groups <= 1024
    if groups == 1 {
        return launch.launch(stream, [1, 1, 1], &[x, out], &[u(n), u(1)]);
    }
    let partials = Buffer::new(stream.device(), groups * 4)?;
    launch.launch(
        stream,
        [groups as u32, 1, 1],
        &[x, &partials],
        &[u(n), u(groups)],
    )?;
    launch.launch(stream, [1, 1, 1], &[&partials, out], &[u(groups), u(1)])
}

/// Rows per grid column (the most workgroups of one grid dimension).
const ROWS_PER_COLUMN: usize = 65535;

/// `out[r][j] = exp(x[r][j] - max_r) / sum_j exp(x[r][j] - max_r)` for a
/// `rows` x `cols` f32 matrix (row-major); sizes at least 1.
pub fn softmax_rows(
    stream: &Stream,
    x: &Buffer,
    out: &Buffer,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let what = "softmax_rows";
    if rows == 0 || cols == 0 {
        return Err(Error::invalid(format!(
            "{what}: expected sizes of at least 1, found rows = {rows}, cols = {cols}"
        )));
    }
    let len = check_size(what, "x", &[rows, cols])?;
    check_buffer(what, "x", x, len)?;
    check_buffer(what, "out", out, len)?;
    check_distinct(what, out, &[("x", x)])?;
    let grid = [
        rows.min(ROWS_PER_COLUMN) as u32,
        rows.div_ceil(ROWS_PER_COLUMN) as u32,
        1,
    ];
    let u = |v: usize| Param::U32(v as u32);
    SOFTMAX_ROWS.launch(stream, grid, &[x, out], &[u(rows), u(cols)])
}

#[cfg(test)]
mod tests {
    /// The checked-in translation (`reduce/translated.rs`) is what
    /// `keel_wgsl::rust` makes of the reductions' WGSL today
    /// (`KEEL_BLESS=1` rewrites it).
    #[test]
    fn the_translation_is_current() {
        crate::assert_translation_current(
            "src/compute/reduce/translated.rs",
            &[
                &super::SUM_SHARED.kernel,
                &super::SUM_SUBGROUP.kernel,
                &super::SOFTMAX_ROWS.kernel,
            ],
        );
    }
}
