//! `matmul`: C = A * B (f32, row-major), tiled in workgroup memory or one
//! invocation per output, with the numerics of [`MatmulPrecision`].

use super::check::{check_buffer, check_distinct, check_size, device_fact, groups, has_property};
use super::params::{Launch, Param, ParamType::U32};
use super::precision::{Accumulation, InputRounding, MatmulPrecision, Reduction, round_to};
use crate::Buffer;
use crate::core::{Device, DeviceType, Stream};
use crate::kernel::{CpuInvocation, Kernel, as_f32s, as_f32s_mut};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// Which matmul kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulAlgorithm {
    /// The tiled kernel suited to the device, the numerics and the size
    /// (see [`matmul_kernel`]): [`TensorCore`](Self::TensorCore) on CUDA
    /// devices with tf32 tensor cores for the modes that round the inputs
    /// (tf32, bf16 or f16 inputs, f32 sums; bf16 and f16 also with split-K
    /// partials rounded to their format) in products of at
    /// least [`MMA_MIN_BLOCKS`] tiles of 128 x 128 (and [`MATMUL_SGEMM`]
    /// there for plain f32), and on Vulkan and wgpu
    /// GPUs with cooperative matrices for f16 inputs,
    /// [`Tiled4x4`](Self::Tiled4x4) on a GPU for the other modes that sum
    /// in f32, [`Tiled8x8`](Self::Tiled8x8) otherwise.
    #[default]
    Tiled,
    /// 64 x 64 output tiles staged through workgroup memory, 64
    /// invocations of 8 x 8 outputs each ([`MATMUL_TILED`]): shaped for
    /// devices whose invocations are SIMD lanes of a CPU (lavapipe), and
    /// the tiled kernel of every precision mode.
    Tiled8x8,
    /// 64 x 64 output tiles, 256 invocations of 4 x 4 outputs each
    /// ([`MATMUL_TILED_4X4`]): shaped for GPUs, which hide load latency
    /// behind more warps. Plain f32 and the modes that only round the
    /// inputs.
    Tiled4x4,
    /// The kernels on matrix units: [`MATMUL_MMA`] (tf32) and
    /// [`MATMUL_MMA16`] (bf16, f16) in the modes that round the inputs and
    /// sum in f32, [`MATMUL_MMA16_SPLIT`] for bf16 and f16 inputs with
    /// split-K partials rounded to their format, on CUDA devices of
    /// compute capability 8.0 or later
    /// ([`tf32_mma_supported`]);
    /// [`MATMUL_COOP`] (or [`MATMUL_COOP8`]) with f16 inputs on Vulkan and
    /// wgpu devices with cooperative matrices
    /// ([`cooperative_matrix_supported`]); an error
    /// elsewhere and in other modes. Inputs are rounded as every kernel
    /// rounds them; the matrix units sum in their own order, so results
    /// are not bit-identical to the tiled kernels' (docs/NUMERICS.md).
    TensorCore,
    /// One invocation per output, reading A and B from memory (the
    /// baseline of the benchmark).
    Naive,
}

/// How [`matmul`] runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MatmulOptions {
    /// The kernel.
    pub algorithm: MatmulAlgorithm,
    /// The numerics (plain f32 by default).
    pub precision: MatmulPrecision,
}

/// A CUDA override's launch: PTX only (compiled from CUDA C++ by NVRTC,
/// `cargo xtask mma-ptx`), blocks of 256 threads along x.
const fn cuda_override(
    name: &'static str,
    bindings: usize,
    ptx: &'static str,
    params: &'static [super::params::ParamType],
) -> Launch {
    Launch {
        kernel: Kernel {
            name,
            workgroup_size: [256, 1, 1],
            bindings,
            wgsl: None,
            ptx: Some(ptx),
            cpu: None,
            strict_float: false,
        },
        params,
    }
}

/// A WGSL kernel's launch (PTX generated from the WGSL on CUDA), with its
/// host override where it has one.
const fn wgsl_launch(
    name: &'static str,
    workgroup_size: [u32; 3],
    bindings: usize,
    wgsl: &'static str,
    cpu: Option<crate::kernel::CpuKernelFn>,
    params: &'static [super::params::ParamType],
) -> Launch {
    Launch {
        kernel: Kernel {
            name,
            workgroup_size,
            bindings,
            wgsl: Some(wgsl),
            ptx: None,
            cpu,
            strict_float: false,
        },
        params,
    }
}

/// Output tile of the tiled kernel: rows, columns.
const TILE: (u32, u32) = (64, 64);
/// Workgroup edge of the naive kernel.
const NAIVE_WG: u32 = 16;

const MATMUL_PARAMS: &[super::params::ParamType] = &[U32, U32, U32, U32, U32];

/// The tiled kernel: bindings `a`, `b`, `c`; parameters `m`, `k`, `n`,
/// `mode`, `chunk`. Source: `shaders/compute/matmul_tiled.wgsl`; host
/// backends run the declared Rust override `matmul_rows_cpu` (a row at a
/// time, vectorised by the compiler, with the kernel's numerics per
/// output), which the WGSL on host threads is far slower than.
pub const MATMUL_TILED: Launch = wgsl_launch(
    "matmul_tiled",
    [8, 8, 1],
    3,
    concat!(
        include_str!("../../shaders/compute/rounding.wgsl"),
        include_str!("../../shaders/compute/matmul_bindings.wgsl"),
        include_str!("../../shaders/compute/matmul_tiled.wgsl")
    ),
    Some(matmul_rows_cpu),
    MATMUL_PARAMS,
);

/// The GPU-shaped tiled kernels' source: the rounding functions, the
/// bindings, the kernel with its two entry points.
const TILED_4X4_WGSL: &str = concat!(
    include_str!("../../shaders/compute/rounding.wgsl"),
    include_str!("../../shaders/compute/matmul_bindings.wgsl"),
    include_str!("../../shaders/compute/matmul_tiled_4x4.wgsl")
);

/// The GPU-shaped tiled kernel, for plain f32 and the modes that only
/// round inputs, with [`MATMUL_TILED`]'s numerics; bindings and
/// parameters as [`MATMUL_TILED`] (`mode`'s input format is read, its
/// split-K format is not: [`MATMUL_TILED_4X4_SPLIT`] computes those
/// modes). Source: `shaders/compute/matmul_tiled_4x4.wgsl`, with
/// [`MATMUL_TILED`]'s host override.
pub const MATMUL_TILED_4X4: Launch = wgsl_launch(
    "matmul_tiled_4x4",
    [16, 16, 1],
    3,
    TILED_4X4_WGSL,
    Some(matmul_rows_cpu),
    MATMUL_PARAMS,
);

/// [`MATMUL_TILED_4X4`]'s entry point for the split-K modes (bf16 and f16
/// tensors' defaults: the f32 running sum cut every `chunk` steps and the
/// rounded chunk sums added), the same bits as [`MATMUL_TILED`]'s. A
/// separate entry point, so that the other modes do not hold the split-K
/// sums in registers.
pub const MATMUL_TILED_4X4_SPLIT: Launch = wgsl_launch(
    "matmul_tiled_4x4_split",
    [16, 16, 1],
    3,
    TILED_4X4_WGSL,
    Some(matmul_rows_cpu),
    MATMUL_PARAMS,
);

crate::translated_host!(matmul_naive_host => MATMUL_NAIVE);

/// The naive kernel's WGSL translated to Rust (generated; see
/// `tests::the_translation_is_current`).
mod translated;

/// The input-rounding pass [`matmul`] runs before [`MATMUL_TILED_4X4`]
/// (or [`MATMUL_TILED_4X4_SPLIT`]) in a product of at least
/// [`ROUND_ONCE_MIN_TILES`] of its tiles each way: copies of A and B with
/// every value rounded once to the mode's input format, which the kernel
/// then multiplies with its input format cleared, so the results are the
/// bits of rounding while staging (each element rounded by every
/// workgroup that stages it). Bindings `a`, `b`, `a_out`, `b_out`;
/// parameters the lengths of A and B in elements and the format code
/// (bits 0-3 of [`MatmulPrecision::mode`]); one element per invocation,
/// A's then B's, over a 2-D grid of 256-wide workgroups. Source:
/// `shaders/compute/matmul_round_inputs.wgsl` after `rounding.wgsl`; host
/// backends run the declared Rust override `round_inputs_cpu` (the Rust
/// reference's rounding of each value: the WGSL's translation would be
/// thousands of lines for a loop the compiler vectorises as it is).
pub const MATMUL_ROUND_INPUTS: Launch = wgsl_launch(
    "matmul_round_inputs",
    [256, 1, 1],
    4,
    concat!(
        include_str!("../../shaders/compute/rounding.wgsl"),
        include_str!("../../shaders/compute/matmul_round_inputs.wgsl")
    ),
    Some(round_inputs_cpu),
    &[U32, U32, U32],
);

/// [`matmul`] rounds the inputs of the 4x4 kernel in a pass of their own
/// ([`MATMUL_ROUND_INPUTS`]) where its 64 x 64 tiles number at least this
/// many along m and along n (m and n above 448): every element is then
/// staged, and would be rounded, by at least this many workgroups, while
/// the pass costs one read and one write of A and B and a launch. Smaller
/// products round while staging.
pub const ROUND_ONCE_MIN_TILES: usize = 8;

/// The naive kernel: as [`MATMUL_TILED`]. Source:
/// `shaders/compute/matmul_naive.wgsl`, on every backend (host backends
/// run its translation to Rust, `matmul/translated.rs`).
pub const MATMUL_NAIVE: Launch = wgsl_launch(
    "matmul_naive",
    [NAIVE_WG, NAIVE_WG, 1],
    3,
    concat!(
        include_str!("../../shaders/compute/rounding.wgsl"),
        include_str!("../../shaders/compute/matmul_bindings.wgsl"),
        include_str!("../../shaders/compute/matmul_naive.wgsl")
    ),
    Some(matmul_naive_host),
    MATMUL_PARAMS,
);

/// The tensor-core kernel for the modes that round the inputs (tf32, bf16
/// or f16) and sum in f32, on CUDA devices of compute capability 8.0 or
/// later (`mma.sync.aligned.m16n8k8 ... .tf32`: a value rounded to bf16 or
/// f16 is exactly a tf32 value). It multiplies copies of A and B that
/// [`MATMUL_MMA_PACK`] makes first: each input rounded once, rows padded
/// with zeros to whole tiles, so that it stages tiles by asynchronous
/// copies alone, three stages deep. [`MATMUL_TILED`]'s parameters
/// (`mode` and `chunk` not read); its bindings are the packed copies and
/// C ([`matmul`] makes and packs them); 128 x 128 outputs per block of
/// 256 threads. PTX only, compiled from `shaders/compute/matmul_mma.cu` by
/// NVRTC (`cargo xtask mma-ptx`); a declared CUDA override of
/// [`MATMUL_TILED_4X4`] in those modes, which WGSL has no instruction for,
/// tested against the same reference.
pub const MATMUL_MMA: Launch = cuda_override(
    "matmul_mma",
    3,
    include_str!("../../shaders/compute/matmul_mma.ptx"),
    MATMUL_PARAMS,
);
/// The cooperative-matrix kernel for f16 inputs summed in f32 (f32
/// inputs rounded to f16 as every kernel rounds them), on Vulkan and wgpu
/// devices with 16 x 16 x 16 f16 cooperative matrices and subgroups of 32
/// ([`cooperative_matrix_supported`]): the tensor cores of NVIDIA GPUs and
/// other vendors' matrix units. It multiplies f16 copies of A and B that
/// [`MATMUL_COOP_PACK`] makes first (each value rounded once, padded to
/// whole tiles); parameters as [`MATMUL_TILED`] (`mode` and `chunk` not
/// read), 64 x 64 outputs per workgroup of 128 invocations. Source:
/// `shaders/compute/matmul_coop.wgsl` after `coop_matrix.wgsl` and
/// `coop_fragment16.wgsl`; a declared override of [`MATMUL_TILED_4X4`] in
/// that mode there. Neither the PTX end nor the host end of `keel-wgsl`
/// has cooperative matrices: CUDA runs [`MATMUL_MMA`] instead, host
/// backends the tiled kernels.
pub const MATMUL_COOP: Launch = wgsl_launch(
    "matmul_coop",
    [128, 1, 1],
    3,
    concat!(
        include_str!("../../shaders/compute/coop_matrix.wgsl"),
        include_str!("../../shaders/compute/coop_fragment16.wgsl"),
        include_str!("../../shaders/compute/matmul_coop.wgsl")
    ),
    None,
    MATMUL_PARAMS,
);

/// [`MATMUL_COOP`] on devices whose cooperative matrices are 8 x 8 x 8
/// f16 with subgroups of 8 (Mesa's lavapipe): the same kernel, its
/// 64 x 64 tile held by 16 subgroups of 2 x 2 fragments of 8 x 8. Source:
/// `coop_fragment8.wgsl` in place of `coop_fragment16.wgsl`.
pub const MATMUL_COOP8: Launch = wgsl_launch(
    "matmul_coop",
    [128, 1, 1],
    3,
    concat!(
        include_str!("../../shaders/compute/coop_matrix.wgsl"),
        include_str!("../../shaders/compute/coop_fragment8.wgsl"),
        include_str!("../../shaders/compute/matmul_coop.wgsl")
    ),
    None,
    MATMUL_PARAMS,
);

/// The packing pass of [`MATMUL_COOP`] and [`MATMUL_COOP8`]: a copy of an
/// f32 matrix (`rows` x `cols`) rounded to f16 and stored as f16,
/// `dst_rows` x `dst_cols` padded with zeros. Bindings: source, copy;
/// parameters `rows`, `cols`, `dst_rows`, `dst_cols` and one not read;
/// 8 elements per invocation, 256 per workgroup. Source:
/// `shaders/compute/matmul_coop_pack.wgsl` before `rounding.wgsl`.
pub const MATMUL_COOP_PACK: Launch = wgsl_launch(
    "matmul_coop_pack",
    [256, 1, 1],
    2,
    concat!(
        include_str!("../../shaders/compute/matmul_coop_pack.wgsl"),
        include_str!("../../shaders/compute/rounding.wgsl")
    ),
    None,
    PACK_PARAMS,
);

/// The tensor-core kernel for bf16 or f16 inputs summed in f32, on CUDA
/// devices of compute capability 8.0 or later (`mma.sync.aligned.m16n8k16`
/// with bf16 or f16 operands), at twice the tensor cores' tf32 rate. It
/// multiplies copies of A and B that [`MATMUL_MMA16_PACK`] makes first:
/// each input rounded once to its 16-bit format (`cvt.rn.bf16x2.f32`,
/// `cvt.rn.f16x2.f32`: the same values as every kernel's rounding), rows
/// padded with zeros to whole tiles, so that it stages tiles by
/// asynchronous copies alone, three stages deep. Parameters and tiles as
/// [`MATMUL_MMA`]; its bindings are the packed copies and C ([`matmul`]
/// makes and packs them). PTX only, compiled from
/// `shaders/compute/matmul_mma16.cu` by NVRTC (`cargo xtask mma-ptx`); a
/// declared CUDA override of [`MATMUL_TILED_4X4`] in those two modes.
pub const MATMUL_MMA16: Launch = cuda_override(
    "matmul_mma16",
    3,
    include_str!("../../shaders/compute/matmul_mma16.ptx"),
    MATMUL_PARAMS,
);

/// [`MATMUL_MMA16`] in the split-K modes, bf16 and f16 tensors' defaults
/// ([`Reduction::Bf16`] with bf16 inputs, [`Reduction::F16`] with f16
/// inputs, f32 sums): every `chunk` steps of k (a multiple of 32; 0 for
/// one chunk of the whole of k) and after the last, each sum is rounded
/// to the format and added into a
/// running total, itself rounded, as every kernel does; what differs from
/// the tiled kernels is the order of the sums within a chunk (the tensor
/// cores'). Bindings, parameters and tiles as [`MATMUL_MMA16`], its
/// packing pass [`MATMUL_MMA16_PACK`].
pub const MATMUL_MMA16_SPLIT: Launch = cuda_override(
    "matmul_mma16_split",
    3,
    include_str!("../../shaders/compute/matmul_mma16.ptx"),
    MATMUL_PARAMS,
);

/// The packing pass of [`MATMUL_MMA`]: an f32 matrix of `rows` x `cols`
/// into a copy of `dst_rows` x `dst_cols` f32 values rounded to the
/// mode's input format (tf32, bf16 or f16: bits 0-3 of `mode`, the codes
/// of [`MatmulPrecision::mode`]) to nearest with ties to even, zeros past
/// the matrix; `dst_cols` a multiple of 4. Bindings: the matrix, the copy;
/// parameters `rows`, `cols`, `dst_rows`, `dst_cols`, `mode` (u32); one
/// invocation per 4 values of the copy, in workgroups of 256 along x.
pub const MATMUL_MMA_PACK: Launch = cuda_override(
    "matmul_mma_pack",
    2,
    include_str!("../../shaders/compute/matmul_mma.ptx"),
    PACK_PARAMS,
);

/// The packing pass of [`MATMUL_MMA16`]: as [`MATMUL_MMA_PACK`], into
/// 16-bit values (bf16 for mode 2, f16 for 3), `dst_cols` a multiple of
/// 8, one invocation per 8 values of the copy. With mode bit 16 set the
/// matrix holds 16-bit values of the format already (two bytes each, a
/// bf16 or f16 tensor's), copied as they are ([`matmul_halves`]).
pub const MATMUL_MMA16_PACK: Launch = cuda_override(
    "matmul_mma16_pack",
    2,
    include_str!("../../shaders/compute/matmul_mma16.ptx"),
    PACK_PARAMS,
);

const PACK_PARAMS: &[super::params::ParamType] = &[U32, U32, U32, U32, U32];

// MATMUL_MMA16_SPLIT cuts its sums at the end of a 32-step stage.
const _: () = assert!(super::precision::SPLIT_K_CHUNK.is_multiple_of(32));

/// The CUDA kernel for large plain-f32 products (compute capability 8.0
/// or later, for `cp.async`): 128 x 128 outputs per block of 256 threads,
/// 8 x 8 per thread, on copies of A (transposed) and B that
/// [`MATMUL_SGEMM_PACK`] makes first, padded with zeros to whole tiles,
/// staged by asynchronous copies three stages deep. Each output is the
/// products added in k order by fused multiply-adds from zero, the sum
/// [`MATMUL_TILED_4X4`]'s PTX makes where ptxas fuses its multiplies and
/// adds, as WGSL allows. [`MATMUL_TILED`]'s parameters (`mode` and `chunk`
/// not read); its bindings are the copies and C ([`matmul`] makes them).
/// PTX only, compiled from `shaders/compute/matmul_sgemm.cu` by NVRTC
/// (`cargo xtask mma-ptx`); a declared CUDA override of
/// [`MATMUL_TILED_4X4`] in plain f32, whose tiles the generated PTX is
/// too small and too bounds-checked to reach the hardware with.
pub const MATMUL_SGEMM: Launch = cuda_override(
    "matmul_sgemm",
    3,
    include_str!("../../shaders/compute/matmul_sgemm.ptx"),
    MATMUL_PARAMS,
);

/// The packing pass of [`MATMUL_SGEMM`]: an f32 matrix of `rows` x `cols`
/// copied into `dst_rows` x `dst_cols` f32 values (multiples of 32),
/// transposed when `transpose` is 1, zeros past the matrix. Bindings: the
/// matrix, the copy; parameters `rows`, `cols`, `dst_rows`, `dst_cols`,
/// `transpose` (u32); workgroups of 256 invocations along x, one per 32 x
/// 32 tile of the copy.
pub const MATMUL_SGEMM_PACK: Launch = cuda_override(
    "matmul_sgemm_pack",
    2,
    include_str!("../../shaders/compute/matmul_sgemm.ptx"),
    PACK_PARAMS,
);

/// A kernel that multiplies packed copies of its inputs: its packing
/// pass, the bytes of a packed value, the output tile (the copies' rows
/// and columns are multiples of it, and the grid has one workgroup per
/// tile), the steps along k the copies' k is a multiple of, whether A is
/// packed transposed (the pass's last parameter then says whether to
/// transpose; otherwise it is the mode), and whether the pass reads
/// 16-bit sources as they are (`PACK_HALVES`).
struct Packed {
    main: &'static Launch,
    pack: &'static Launch,
    value_bytes: usize,
    tile: (u32, u32),
    stage_k: usize,
    transpose_a: bool,
    halves: bool,
}

const PACKED: [Packed; 6] = [
    Packed {
        main: &MATMUL_MMA16_SPLIT,
        pack: &MATMUL_MMA16_PACK,
        value_bytes: 2,
        tile: MMA_TILE,
        stage_k: 32,
        transpose_a: false,
        halves: true,
    },
    Packed {
        main: &MATMUL_MMA,
        pack: &MATMUL_MMA_PACK,
        value_bytes: 4,
        tile: MMA_TILE,
        stage_k: 16,
        transpose_a: false,
        halves: true,
    },
    Packed {
        main: &MATMUL_MMA16,
        pack: &MATMUL_MMA16_PACK,
        value_bytes: 2,
        tile: MMA_TILE,
        stage_k: 32,
        transpose_a: false,
        halves: true,
    },
    Packed {
        main: &MATMUL_SGEMM,
        pack: &MATMUL_SGEMM_PACK,
        value_bytes: 4,
        tile: MMA_TILE,
        stage_k: 32,
        transpose_a: true,
        halves: true,
    },
    Packed {
        main: &MATMUL_COOP,
        pack: &MATMUL_COOP_PACK,
        value_bytes: 2,
        tile: TILE,
        stage_k: 32,
        transpose_a: false,
        halves: false,
    },
    Packed {
        main: &MATMUL_COOP8,
        pack: &MATMUL_COOP_PACK,
        value_bytes: 2,
        tile: TILE,
        stage_k: 32,
        transpose_a: false,
        halves: false,
    },
];

/// Whether the stream's device runs [`MATMUL_COOP`] or [`MATMUL_COOP8`]:
/// a Vulkan or wgpu device with the property `"cooperative matrix"`
/// (16 x 16 x 16 f16 x f16 + f32 at subgroup scope with subgroups of 32,
/// or 8 x 8 x 8 with subgroups of 8, enabled at device creation:
/// `VK_KHR_cooperative_matrix`, wgpu's
/// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX`). Read once per device.
pub fn cooperative_matrix_supported(stream: &Stream) -> Result<bool> {
    static KNOWN: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    device_fact(stream, &KNOWN, |device| {
        cooperative_shape(device, COOP_SHAPES)
    })
}

/// The cooperative-matrix configurations of [`MATMUL_COOP`] and
/// [`MATMUL_COOP8`], as the backends' `"cooperative matrix"` property
/// begins.
const COOP_SHAPES: &[&str] = &["16x16x16 f16", "8x8x8 f16"];

/// Whether `device` is a Vulkan or wgpu device whose `"cooperative
/// matrix"` property begins with one of `shapes`.
fn cooperative_shape(device: Device, shapes: &[&str]) -> Result<bool> {
    match device.device_type() {
        DeviceType::Vulkan | DeviceType::Wgpu => has_property(device, "cooperative matrix", |v| {
            shapes.iter().any(|s| v.starts_with(s))
        }),
        _ => Ok(false),
    }
}

/// The cooperative-matrix kernel of the stream's device, if it has one.
fn cooperative_matrix_launch(stream: &Stream) -> Result<Option<&'static Launch>> {
    static EIGHT: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    if !cooperative_matrix_supported(stream)? {
        return Ok(None);
    }
    let eight = device_fact(stream, &EIGHT, |device| {
        cooperative_shape(device, &COOP_SHAPES[1..])
    })?;
    Ok(Some(if eight { &MATMUL_COOP8 } else { &MATMUL_COOP }))
}

/// The tensor-core kernel for `p`, if one computes it: [`MATMUL_MMA`] for
/// tf32 inputs, [`MATMUL_MMA16`] for bf16 and f16 inputs (whose values the
/// 16-bit `mma` takes at twice the rate), both summing in f32;
/// [`MATMUL_MMA16_SPLIT`] for bf16 or f16 inputs with split-K partials
/// rounded to the same format (bf16 and f16 tensors' defaults).
fn mma_kernel(p: &MatmulPrecision) -> Option<&'static Launch> {
    if p.accumulation != Accumulation::F32 {
        return None;
    }
    match (p.inputs, p.reduction) {
        (InputRounding::Tf32, Reduction::F32) => Some(&MATMUL_MMA),
        (InputRounding::Bf16 | InputRounding::F16, Reduction::F32) => Some(&MATMUL_MMA16),
        (InputRounding::Bf16, Reduction::Bf16) | (InputRounding::F16, Reduction::F16) => {
            Some(&MATMUL_MMA16_SPLIT)
        }
        _ => None,
    }
}

/// Output tile of one block of [`MATMUL_MMA`] and [`MATMUL_MMA16`]: rows,
/// columns.
const MMA_TILE: (u32, u32) = (128, 128);
/// The fewest blocks of 128 x 128 outputs for which [`MatmulAlgorithm::Tiled`]
/// runs [`MATMUL_MMA`]: a smaller product leaves most of a GPU's
/// multiprocessors idle with tiles that large, and runs
/// [`MATMUL_TILED_4X4`], whose tiles are a quarter the size
/// (docs/BENCHMARKS.md has the crossover on an H200).
pub const MMA_MIN_BLOCKS: usize = 32;

/// Whether the stream's device has tf32 tensor cores (`mma` with `.tf32`):
/// a CUDA device whose property `"compute capability"` is 8.0 or later.
/// Read once per device.
pub fn tf32_mma_supported(stream: &Stream) -> Result<bool> {
    static KNOWN: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    device_fact(stream, &KNOWN, |device| {
        if device.device_type() != DeviceType::Cuda {
            return Ok(false);
        }
        has_property(device, "compute capability", |v| {
            v.split('.')
                .next()
                .and_then(|major| major.trim().parse::<u32>().ok())
                .is_some_and(|major| major >= 8)
        })
    })
}

/// Whether the stream's device is a GPU ([`crate::DeviceKind::is_gpu`]), which
/// [`MatmulAlgorithm::Tiled`] serves with [`MATMUL_TILED_4X4`]. Read once
/// per device.
fn is_gpu(stream: &Stream) -> Result<bool> {
    static KNOWN: LazyLock<Mutex<HashMap<Device, bool>>> = LazyLock::new(Default::default);
    device_fact(stream, &KNOWN, |device| {
        Ok(crate::api::properties(device)?.kind.is_gpu())
    })
}

/// The 4x4 kernel's entry point for `p` (a mode that sums in f32).
fn tiled_4x4(p: &MatmulPrecision) -> &'static Launch {
    if p.rounds_inputs_only() {
        &MATMUL_TILED_4X4
    } else {
        &MATMUL_TILED_4X4_SPLIT
    }
}

/// The kernel [`matmul`] launches for `opts` on `stream` for an `m` x `n`
/// product. For [`MatmulAlgorithm::Tiled`]: [`MATMUL_MMA`] (tf32) or
/// [`MATMUL_MMA16`] (bf16, f16) on a CUDA device with tensor cores of
/// compute capability 8.0 or later for the modes that round the inputs to
/// tf32, bf16 or f16 ([`MatmulPrecision::rounds_inputs_only`], not plain
/// f32; and [`MATMUL_MMA16_SPLIT`] for bf16 and f16 inputs with split-K
/// partials rounded to their format, the bf16 and f16 tensors' defaults)
/// in a product of at least [`MMA_MIN_BLOCKS`] tiles of 128 x 128
/// outputs, [`MATMUL_SGEMM`] on such a device for plain f32 in such a
/// product, [`MATMUL_TILED_4X4`] on a GPU for the other modes that accumulate in
/// f32 ([`MatmulPrecision::accumulates_in_f32`]: plain f32; split-K on its
/// entry point [`MATMUL_TILED_4X4_SPLIT`]),
/// [`MATMUL_TILED`] otherwise. The other algorithms name their kernel;
/// asking [`MatmulAlgorithm::Tiled4x4`] for an accumulator mode, or
/// [`MatmulAlgorithm::TensorCore`] for another mode or a device without
/// tf32 tensor cores, is an error.
pub fn matmul_kernel(
    stream: &Stream,
    opts: &MatmulOptions,
    m: usize,
    n: usize,
) -> Result<&'static Launch> {
    let f32_sums = opts.precision.accumulates_in_f32();
    let p = &opts.precision;
    let mma_blocks = m.div_ceil(MMA_TILE.0 as usize) * n.div_ceil(MMA_TILE.1 as usize);
    let fills = mma_blocks >= MMA_MIN_BLOCKS;
    // The tensor-core kernels where `Tiled` picks them or `TensorCore` names
    // them (cooperative matrices, below, are never on the same device).
    let wants_mma = match opts.algorithm {
        MatmulAlgorithm::Tiled => fills,
        MatmulAlgorithm::TensorCore => true,
        _ => false,
    };
    if let Some(kernel) = mma_kernel(p)
        && wants_mma
        && tf32_mma_supported(stream)?
    {
        return Ok(kernel);
    }
    let f16_inputs = p.rounds_inputs_only() && p.inputs == InputRounding::F16;
    // Cooperative matrices under `Tiled` on a GPU only: a CPU device that
    // offers them (lavapipe) emulates them on its SIMD lanes, no faster
    // than its tiled kernel, whose sums are every other kernel's bits;
    // `TensorCore` names them wherever they are.
    let wants_coop = match opts.algorithm {
        MatmulAlgorithm::Tiled => f16_inputs && is_gpu(stream)?,
        MatmulAlgorithm::TensorCore => f16_inputs,
        _ => false,
    };
    if wants_coop && let Some(coop) = cooperative_matrix_launch(stream)? {
        return Ok(coop);
    }
    Ok(match opts.algorithm {
        MatmulAlgorithm::Tiled
            if *p == MatmulPrecision::IEEE && fills && tf32_mma_supported(stream)? =>
        {
            &MATMUL_SGEMM
        }
        MatmulAlgorithm::Tiled if f32_sums && is_gpu(stream)? => tiled_4x4(p),
        MatmulAlgorithm::Tiled | MatmulAlgorithm::Tiled8x8 => &MATMUL_TILED,
        MatmulAlgorithm::Tiled4x4 if f32_sums => tiled_4x4(p),
        MatmulAlgorithm::Tiled4x4 => {
            return Err(Error::invalid(format!(
                "matmul: the Tiled4x4 kernel sums in f32 (input rounding and split-K, \
                 no rounded accumulator), found the precision {:?}; use \
                 MatmulAlgorithm::Tiled or Tiled8x8 for it",
                opts.precision
            )));
        }
        MatmulAlgorithm::TensorCore => {
            return Err(Error::invalid(format!(
                "matmul: the tensor-core kernels compute the modes that round the inputs to \
                 tf32, bf16 or f16 and sum in f32 (bf16 and f16 also with split-K partials \
                 rounded to their format), on CUDA devices of compute capability 8.0 \
                 or later, and f16 inputs on Vulkan and wgpu devices with cooperative matrices \
                 (16x16x16 f16 with subgroups of 32, or 8x8x8 with subgroups of 8); found the precision {:?} on {}",
                opts.precision,
                stream.device()
            )));
        }
        MatmulAlgorithm::Naive => &MATMUL_NAIVE,
    })
}

/// `out = a * b` for an `m` x `k` matrix `a` and a `k` x `n` matrix `b`
/// (f32, row-major, contiguous), on `stream`; `out` is `m` x `n`. Every
/// size must be at least 1, the buffers hold at least their matrices,
/// `out` is not an input, and indices fit in `u32`. The kernel is
/// [`matmul_kernel`]'s; on [`MATMUL_TILED_4X4`] in a mode that rounds the
/// inputs, a product of at least [`ROUND_ONCE_MIN_TILES`] tiles each way
/// first rounds A and B into scratch copies ([`MATMUL_ROUND_INPUTS`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    stream: &Stream,
    a: &Buffer,
    b: &Buffer,
    out: &Buffer,
    m: usize,
    k: usize,
    n: usize,
    opts: &MatmulOptions,
) -> Result<()> {
    let what = "matmul";
    let params = matmul_args([a, b, out], (m, k, n), opts, false)?;
    let launch = matmul_kernel(stream, opts, m, n)?;
    let name = launch.kernel.name;
    if let Some(packed) = packed_of(launch) {
        return matmul_packed(stream, packed, [a, b, out], (m, k, n), &params, false);
    }
    let (rows, cols) = if name == MATMUL_NAIVE.kernel.name {
        (NAIVE_WG, NAIVE_WG)
    } else {
        TILE
    };
    let grid = [groups(what, n, cols)?, groups(what, m, rows)?, 1];
    if let Some(params) = rounding_first(launch, (m, k, n), &params) {
        let (ra, rb) = round_inputs(stream, a, b, m * k, k * n, opts.precision.mode() & 15)?;
        return launch.launch(stream, grid, &[&ra, &rb, out], &params);
    }
    launch.launch(stream, grid, &[a, b, out], &params)
}

/// `out = a * b` as [`matmul`] does it, for `a` and `b` that hold 16-bit
/// values (two bytes each, row-major) of the format `opts.precision`
/// rounds the inputs to, bf16 or f16: a bf16 or f16 tensor's data, read as
/// it is, with no widening to f32 first. It runs where [`matmul_kernel`]
/// picks a 16-bit tensor-core kernel for the product ([`MATMUL_MMA16`],
/// [`MATMUL_MMA16_SPLIT`]), and returns whether it did: elsewhere it
/// launches nothing, for the caller to widen the inputs and call
/// [`matmul`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_halves(
    stream: &Stream,
    a: &Buffer,
    b: &Buffer,
    out: &Buffer,
    m: usize,
    k: usize,
    n: usize,
    opts: &MatmulOptions,
) -> Result<bool> {
    let params = matmul_args([a, b, out], (m, k, n), opts, true)?;
    let launch = matmul_kernel(stream, opts, m, n)?;
    let Some(packed) = packed_of(launch).filter(|k| k.halves) else {
        return Ok(false);
    };
    matmul_packed(stream, packed, [a, b, out], (m, k, n), &params, true)?;
    Ok(true)
}

/// The checks [`matmul`] and [`matmul_halves`] make: every size at least
/// 1, `a` and `b` holding their matrices (f32s, or with `halves` 16-bit
/// values), `out` its m x n f32s in a buffer of its own, indices in
/// `u32`. Returns the kernels' parameters.
fn matmul_args(
    [a, b, out]: [&Buffer; 3],
    (m, k, n): (usize, usize, usize),
    opts: &MatmulOptions,
    halves: bool,
) -> Result<[Param; 5]> {
    let what = "matmul";
    for (name, v) in [("m", m), ("k", k), ("n", n)] {
        if v == 0 {
            return Err(Error::invalid(format!(
                "{what}: expected sizes of at least 1, found {name} = 0 (m = {m}, k = {k}, n = {n})"
            )));
        }
    }
    for (name, buffer, dims) in [("a", a, [m, k]), ("b", b, [k, n])] {
        let len = check_size(what, name, &dims)?;
        if !halves {
            check_buffer(what, name, buffer, len)?;
        } else if buffer.len() < len * 2 {
            return Err(Error::invalid(format!(
                "{what}: expected `{name}` to hold at least {len} 16-bit values ({} bytes), found {} bytes",
                len * 2,
                buffer.len()
            )));
        }
    }
    check_buffer(what, "out", out, check_size(what, "out", &[m, n])?)?;
    check_distinct(what, out, &[("a", a), ("b", b)])?;
    let p = &opts.precision;
    let u = |v: usize| Param::U32(v as u32); // checked by check_size
    Ok([
        u(m),
        u(k),
        u(n),
        Param::U32(p.mode()),
        Param::U32(p.chunk()),
    ])
}

/// The 4x4 kernel's parameters with the input format cleared, where
/// `launch` is that kernel in a mode that rounds its inputs and the
/// product is large enough for [`MATMUL_ROUND_INPUTS`] to pay
/// ([`ROUND_ONCE_MIN_TILES`]), and A and B together index in `u32` with
/// the pass's grid; `None` where the kernel rounds while staging.
fn rounding_first(
    launch: &Launch,
    (m, k, n): (usize, usize, usize),
    params: &[Param; 5],
) -> Option<[Param; 5]> {
    let is_4x4 = [&MATMUL_TILED_4X4, &MATMUL_TILED_4X4_SPLIT]
        .iter()
        .any(|l| same_kernel(l, launch));
    let Param::U32(mode) = params[3] else {
        return None;
    };
    let tiles = |v: usize| v.div_ceil(TILE.0 as usize);
    // The pass's last invocation index: its grid rounds up to whole rows
    // of 65535 workgroups.
    let fits = (m * k)
        .checked_add(k * n)
        .and_then(|v| v.checked_add(65535 * 256))
        .is_some_and(|v| u32::try_from(v).is_ok());
    (is_4x4
        && mode & 15 != 0
        && tiles(m) >= ROUND_ONCE_MIN_TILES
        && tiles(n) >= ROUND_ONCE_MIN_TILES
        && fits)
        .then(|| {
            let mut params = *params;
            params[3] = Param::U32(mode & !15);
            params
        })
}

/// Copies of `a` (`len_a` f32s) and `b` (`len_b`) with each value rounded
/// to input format `format`, by [`MATMUL_ROUND_INPUTS`] on `stream`.
fn round_inputs(
    stream: &Stream,
    a: &Buffer,
    b: &Buffer,
    len_a: usize,
    len_b: usize,
    format: u32,
) -> Result<(Buffer, Buffer)> {
    let ra = Buffer::new(stream.device(), len_a * 4)?;
    let rb = Buffer::new(stream.device(), len_b * 4)?;
    // Checked by rounding_first.
    let u = |v: usize| Param::U32(v as u32);
    let grid = super::params::elementwise_grid((len_a + len_b) as u64);
    MATMUL_ROUND_INPUTS.launch(
        stream,
        grid,
        &[a, b, &ra, &rb],
        &[u(len_a), u(len_b), Param::U32(format)],
    )?;
    Ok((ra, rb))
}

/// The mode bit that tells [`MATMUL_MMA16_PACK`] its source holds 16-bit
/// values already.
const PACK_HALVES: u32 = 0x1_0000;

/// The packed kernel `launch` is, if it is one.
fn packed_of(launch: &Launch) -> Option<&'static Packed> {
    PACKED.iter().find(|k| same_kernel(k.main, launch))
}

/// Whether `a` and `b` launch the same kernel: the same entry point of
/// the same source. A constant's address is not an identity, and
/// [`MATMUL_COOP`] and [`MATMUL_COOP8`] share a name.
fn same_kernel(a: &Launch, b: &Launch) -> bool {
    a.kernel.name == b.kernel.name && a.kernel.wgsl == b.kernel.wgsl
}

/// A kernel of [`PACKED`] on `a` and `b` packed into scratch buffers by
/// its packing pass, all on `stream`.
/// With `halves`, A and B hold 16-bit values of the input format
/// (a [`MATMUL_MMA16_PACK`] kernel's inputs only), which the packing pass
/// copies as they are (its mode bit 16).
fn matmul_packed(
    stream: &Stream,
    kernel: &Packed,
    [a, b, out]: [&Buffer; 3],
    (m, k, n): (usize, usize, usize),
    params: &[Param],
    halves: bool,
) -> Result<()> {
    let what = "matmul";
    let mode = match params[3] {
        Param::U32(mode) if halves => Param::U32(mode | PACK_HALVES),
        mode => mode,
    };
    let (tile_m, tile_n) = (kernel.tile.0 as usize, kernel.tile.1 as usize);
    let (pm, pk, pn) = (
        m.next_multiple_of(tile_m),
        k.next_multiple_of(kernel.stage_k),
        n.next_multiple_of(tile_n),
    );
    let per_invocation = 16 / kernel.value_bytes;
    let pack = |src: &Buffer, rows: usize, cols: usize, dst_rows: usize, dst_cols: usize, last| {
        let index = |v: usize| {
            u32::try_from(v).map_err(|_| {
                Error::invalid(format!(
                    "{what}: the tensor-core kernel's packed copies index in u32, found \
                     {dst_rows} x {dst_cols}"
                ))
            })
        };
        // WGSL kernels index the copies' elements in u32 (it has no
        // 64-bit integers); the CUDA ones in 64 bits.
        if kernel.pack.kernel.wgsl.is_some() || kernel.main.kernel.wgsl.is_some() {
            index(dst_rows * dst_cols)?;
        }
        let packed = Buffer::new(stream.device(), dst_rows * dst_cols * kernel.value_bytes)?;
        // A grid along x alone: CUDA's reaches 2^31 - 1 workgroups.
        let grid = [
            index((dst_rows * dst_cols / per_invocation).div_ceil(256))?,
            1,
            1,
        ];
        let params = [rows, cols, dst_rows, dst_cols]
            .map(|v| index(v).map(Param::U32))
            .into_iter()
            .chain([Ok(last)])
            .collect::<Result<Vec<_>>>()?;
        kernel.pack.launch(stream, grid, &[src, &packed], &params)?;
        Ok::<_, Error>(packed)
    };
    let (packed_a, packed_b) = if kernel.transpose_a {
        (
            pack(a, m, k, pk, pm, Param::U32(1))?,
            pack(b, k, n, pk, pn, Param::U32(0))?,
        )
    } else {
        (pack(a, m, k, pm, pk, mode)?, pack(b, k, n, pk, pn, mode)?)
    };
    let grid = [
        groups(what, n, kernel.tile.1)?,
        groups(what, m, kernel.tile.0)?,
        1,
    ];
    kernel
        .main
        .launch(stream, grid, &[&packed_a, &packed_b, out], params)
}

/// The matmul parameters and buffers of a host launch.
struct Host<'a> {
    m: usize,
    k: usize,
    n: usize,
    mode: u32,
    chunk: usize,
    a: &'a [f32],
    b: &'a [f32],
    c: &'a mut [f32],
}

fn host<'a>(inv: &'a mut CpuInvocation<'_>) -> Result<Host<'a>, String> {
    let p = |i: usize| inv.param_u32(4 * i).map(|v| v as usize);
    let (m, k, n, mode, chunk) = (p(0)?, p(1)?, p(2)?, p(3)? as u32, p(4)?);
    let found = inv.buffers.len();
    let [a, b, c] = &mut inv.buffers[..] else {
        return Err(format!("expected 3 buffers, found {found}"));
    };
    let (a, b, c) = (as_f32s(0, a)?, as_f32s(1, b)?, as_f32s_mut(2, c)?);
    for (i, (len, need)) in [(a.len(), m * k), (b.len(), k * n), (c.len(), m * n)]
        .into_iter()
        .enumerate()
    {
        if len < need {
            return Err(format!(
                "binding {i}: expected at least {need} f32s, found {len}"
            ));
        }
    }
    let chunk = if chunk == 0 { k.max(1) } else { chunk };
    Ok(Host {
        m,
        k,
        n,
        mode,
        chunk,
        a,
        b,
        c,
    })
}

/// [`MATMUL_ROUND_INPUTS`] on a host backend, every element at once (the
/// grid only covers them).
fn round_inputs_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let p = |i: usize| inv.param_u32(4 * i);
    let (len_a, len_b, format) = (p(0)? as usize, p(1)? as usize, p(2)?);
    let found = inv.buffers.len();
    let [a, b, ra, rb] = &mut inv.buffers[..] else {
        return Err(format!("expected 4 buffers, found {found}"));
    };
    let sides = [
        (0, as_f32s(0, a)?, as_f32s_mut(2, ra)?, len_a),
        (1, as_f32s(1, b)?, as_f32s_mut(3, rb)?, len_b),
    ];
    for (i, src, dst, len) in sides {
        let (have_src, have_dst) = (src.len(), dst.len());
        let (Some(src), Some(dst)) = (src.get(..len), dst.get_mut(..len)) else {
            return Err(format!(
                "bindings {i} and {}: expected at least {len} f32s each, found {have_src} and {have_dst}",
                i + 2
            ));
        };
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = round_to(s, format);
        }
    }
    Ok(())
}

/// The formats packed in `mode`: inputs, accumulator, reduction.
fn formats(mode: u32) -> (u32, u32, u32) {
    (mode & 15, (mode >> 4) & 15, (mode >> 8) & 15)
}

/// `part += av * brow`, each sum rounded to format `f_acc`. f32
/// accumulation (the split-K modes) gets a loop of its own, with no
/// rounding call, which the compiler vectorises.
fn accumulate(part: &mut [f32], brow: &[f32], av: f32, f_acc: u32) {
    fn with(part: &mut [f32], brow: &[f32], av: f32, round: impl Fn(f32) -> f32) {
        for (p, &bv) in part.iter_mut().zip(brow) {
            *p = round(*p + av * bv);
        }
    }
    match f_acc {
        0 => with(part, brow, av, |x| x),
        f => with(part, brow, av, |x| round_to(x, f)),
    }
}

/// A row of outputs at a time (k outer, j inner, so the compiler
/// vectorises over j), with the same numerics per output as
/// the naive kernel: each output still adds its products in k order.
fn matmul_rows_cpu(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    let h = host(inv)?;
    let (f_in, f_acc, f_red) = formats(h.mode);
    let (m, k, n) = (h.m, h.k, h.n);
    let rounded = |x: &[f32]| -> Vec<f32> { x.iter().map(|&v| round_to(v, f_in)).collect() };
    let (a, b) = if f_in == 0 {
        (h.a[..m * k].to_vec(), h.b[..k * n].to_vec())
    } else {
        (rounded(&h.a[..m * k]), rounded(&h.b[..k * n]))
    };
    let mut part = vec![0.0f32; n];
    for i in 0..m {
        let total = &mut h.c[i * n..(i + 1) * n];
        total.fill(0.0);
        part.fill(0.0);
        for kk in 0..k {
            let av = a[i * k + kk];
            let brow = &b[kk * n..(kk + 1) * n];
            if f_acc == 0 && f_red == 0 {
                // Inputs rounded above (if at all), plain f32 from here.
                for (t, &bv) in total.iter_mut().zip(brow) {
                    *t += av * bv;
                }
                continue;
            }
            accumulate(&mut part, brow, av, f_acc);
            if (kk + 1) % h.chunk == 0 || kk + 1 == k {
                for (t, p) in total.iter_mut().zip(part.iter_mut()) {
                    *t = round_to(*t + round_to(*p, f_red), f_red);
                    *p = 0.0;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The checked-in translation (`matmul/translated.rs`) is what
    /// `keel_wgsl::rust` makes of the naive kernel's WGSL today
    /// (`KEEL_BLESS=1` rewrites it).
    #[test]
    fn the_translation_is_current() {
        crate::assert_translation_current(
            "src/compute/matmul/translated.rs",
            &[&super::MATMUL_NAIVE.kernel],
        );
    }
}
