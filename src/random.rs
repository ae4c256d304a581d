//! Random kernels: Buffer-level launches of Philox4x32-10 on every backend,
//! from one WGSL source (`shaders/random/philox.wgsl`: SPIR-V for Vulkan
//! and wgpu, generated PTX for CUDA, its translation to Rust for the CPU
//! and host backends), checked against an independent host
//! [`reference()`].
//!
//! # The guarantee (Note [Random values do not depend on the launch])
//!
//! Element `i` of a launch with seed `s` and offset `o` is a function of
//! `(s, o, i)` alone: it comes from word `o + i` of the stream `s` names
//! (`keel::generator`), through the same integer and `f32` operations on
//! every backend. A kernel invocation computes whole Philox blocks and
//! strides over them by the number of invocations, so the workgroup size,
//! the grid's size and its shape (1-, 2- or 3-D) decide only who computes
//! a value, never the value. Every op is bit-identical across backends,
//! [`randn`] and [`normal`] included.
//!
//! # Note [Normal draws are bit-identical]
//!
//! Box-Muller needs `log`, `sqrt`, `cos` and `sin`, whose last bits differ
//! between backends: a GPU's `log` is accurate only in absolute terms
//! (near `u1 = 1` a small radius came out 1% off on an H200), its `sqrt`,
//! `sin` and `cos` are not correctly rounded, and a Vulkan driver or
//! ptxas may fuse an `f32` multiply and add into one FMA, which WGSL
//! allows. So the kernels compute them from the operations that round the
//! same everywhere: IEEE `f32` adds, subtracts and multiplies (correctly
//! rounded to nearest even on every backend), exact conversions of
//! integers below 2^24, and integer work on the bits. The logarithm is a
//! polynomial in the exact `x` of `a = (1 + x) 2^k`, the square root a
//! Newton reciprocal with one correction whose residual is exact, sine and
//! cosine polynomials after an exact reduction (in integers) to the
//! nearest quarter turn. No value on the way is subnormal, so flushing
//! changes nothing, and every product that feeds an add passes through an
//! exclusive-or with a zero the compiler cannot see (the parameter
//! block's last word), so nothing is fused. The draws are within three
//! `f32` steps of the exact value (tested against `f64`).
//! `normal_`'s `mean + std * z` uses the hardware's multiply and add where
//! the operands are normal (the mean may be zero) and the product and sum
//! are at least 2^-125: there an IEEE multiply and add round correctly on
//! every backend, flushing subnormals or not, and a `min` that changes
//! nothing stands between them so that no driver fuses them. Elsewhere it
//! takes an integer implementation of IEEE 754's correctly rounded
//! multiply and add; a launch whose mean and std rule out every such case
//! ([`normal_is_plain`]) runs [`PHILOX_NORMAL_PLAIN`], which has no
//! per-element test. The host reference (`random/normal.rs`) takes the
//! same Box-Muller steps in Rust (which never fuses); `normal_`'s two
//! roundings there are Rust's own `f32` multiply and add.
//!
//! # Conversions (PyTorch's)
//!
//! - `rand`: `(x & 0xFFFFFF) * 2^-24`, in `[0, 1)`, exact in `f32`
//!   (PyTorch's `uniform_real` with 24 mantissa digits).
//! - `uniform(lo, hi)`: `rand * (hi - lo) + lo`, rounded after each step
//!   (never fused), and kept below `hi` (a result that rounds up to `hi`
//!   becomes the largest `f32` below it).
//! - `randn`: Box-Muller on the aligned pair of words `(2j, 2j + 1)`:
//!   `u1 = 1 - rand(x0)` in `(0, 1]`, `u2 = rand(x1)`,
//!   `r = sqrt(-2 ln u1)`, `t = 2 pi u2`; the even position gets
//!   `r cos t`, the odd one `r sin t` (Note [Normal draws are
//!   bit-identical]). `normal(mean, std)` is `mean + std * z`, rounded
//!   after each step.
//! - `randint(low, high)`: `low + x % (high - low)` (PyTorch's
//!   `uniform_int_from_to` for ranges below 2^32), as `i32`.
//!
//! One element uses one stream position, so an operation on `n` elements
//! reserves `n` words of its generator ([`launch_from`]).

use crate::Buffer;
use crate::core::Stream;
use crate::generator::{Generator, PhiloxState, stream_block};
use crate::kernel::{CpuKernelFn, Kernel};
use crate::{Error, Result};

/// What a random launch computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RandomOp {
    /// The raw stream words (`u32`).
    U32,
    /// Uniform `f32` in `[0, 1)`.
    Rand,
    /// Standard normal `f32` (Box-Muller).
    Randn,
    /// Uniform `f32` in `[lo, hi)`.
    Uniform {
        /// The lower bound (included).
        lo: f32,
        /// The upper bound (excluded).
        hi: f32,
    },
    /// Normal `f32` with `mean` and standard deviation `std`.
    Normal {
        /// The mean.
        mean: f32,
        /// The standard deviation (at least 0).
        std: f32,
    },
    /// Uniform `i32` in `[low, high)`.
    Randint {
        /// The lower bound (included).
        low: i32,
        /// The upper bound (excluded).
        high: i32,
    },
}

impl RandomOp {
    /// The op's code in the kernels, and its two parameter words.
    fn encode(self) -> Result<(u32, u32, u32)> {
        match self {
            RandomOp::U32 => Ok((0, 0, 0)),
            RandomOp::Rand => Ok((1, 0, 0)),
            RandomOp::Randn => Ok((2, 0, 0)),
            RandomOp::Uniform { lo, hi } => {
                if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                    return Err(Error::invalid(format!(
                        "uniform_ expects finite bounds with lo < hi, found lo={lo}, hi={hi}"
                    )));
                }
                if !(hi - lo).is_finite() {
                    return Err(Error::invalid(format!(
                        "uniform_ expects hi - lo to be finite in f32, found lo={lo}, hi={hi}"
                    )));
                }
                Ok((3, lo.to_bits(), hi.to_bits()))
            }
            RandomOp::Normal { mean, std } => {
                if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
                    return Err(Error::invalid(format!(
                        "normal_ expects a finite mean and a finite std >= 0.0, found mean={mean}, std={std}"
                    )));
                }
                Ok((4, mean.to_bits(), std.to_bits()))
            }
            RandomOp::Randint { low, high } => {
                if low >= high {
                    return Err(Error::invalid(format!(
                        "randint expects low < high, found low={low}, high={high}"
                    )));
                }
                let range = high.wrapping_sub(low) as u32;
                Ok((5, low as u32, range))
            }
        }
    }

    /// The kernel that computes this op (workgroups of 256).
    pub fn kernel(self) -> Kernel {
        match self {
            RandomOp::U32 => PHILOX_U32,
            RandomOp::Rand => PHILOX_RAND,
            RandomOp::Randn => PHILOX_RANDN,
            RandomOp::Uniform { .. } => PHILOX_UNIFORM,
            RandomOp::Normal { mean, std } if normal_is_plain(mean, std) => PHILOX_NORMAL_PLAIN,
            RandomOp::Normal { .. } => PHILOX_NORMAL,
            RandomOp::Randint { .. } => PHILOX_RANDINT,
        }
    }
}

/// Whether `normal_(mean, std)` needs no per-element check in the kernel
/// (`normal_hardware` in `philox.wgsl`): the mean zero or
/// `2^-102 <= |mean| < 2^126`, and `2^-69 <= |std| < 2^123`. Then for every
/// draw `z` of `randn` (zero, or `2^-33 <= |z| < 8`) the hardware's
/// multiply and add are exact IEEE operations on every backend, with no
/// subnormal on the way.
pub fn normal_is_plain(mean: f32, std: f32) -> bool {
    let field = |x: f32| (x.to_bits() >> 23) & 0xff;
    let mean_ok = mean == 0.0 || (25..=252).contains(&field(mean));
    mean_ok && (58..=249).contains(&field(std))
}

const WGSL: &str = include_str!("../shaders/random/philox.wgsl");

/// A Philox kernel: its one WGSL source runs on every backend (CUDA
/// through the PTX generated from it, host backends through its
/// translation to Rust, `random/translated.rs`), with strict floating
/// point: its draws are the same bits on every device, so no compiler may
/// fuse or reorder the arithmetic of `randn`'s Box-Muller transform.
const fn philox_kernel(name: &'static str, workgroup: u32, host: CpuKernelFn) -> Kernel {
    Kernel {
        name,
        workgroup_size: [workgroup, 1, 1],
        bindings: 1,
        wgsl: Some(WGSL),
        ptx: None,
        cpu: Some(host),
        strict_float: true,
    }
}

// The host implementation of each Philox kernel: its translation.
crate::translated_host!(
    u32_host => PHILOX_U32,
    u32_wg64_host => PHILOX_U32_WG64,
    rand_host => PHILOX_RAND,
    rand_wg64_host => PHILOX_RAND_WG64,
    randn_host => PHILOX_RANDN,
    uniform_host => PHILOX_UNIFORM,
    normal_host => PHILOX_NORMAL,
    normal_plain_host => PHILOX_NORMAL_PLAIN,
    randint_host => PHILOX_RANDINT,
);

mod normal;

/// The Philox kernels' WGSL translated to Rust (generated; see
/// `tests::the_translation_is_current`).
mod translated;

/// Raw stream words. Binding: `out` (`u32`). Parameters: see [`params`].
pub const PHILOX_U32: Kernel = philox_kernel("philox_u32", 256, u32_host);
/// [`PHILOX_U32`] with workgroups of 64 (for geometry tests).
pub const PHILOX_U32_WG64: Kernel = philox_kernel("philox_u32_wg64", 64, u32_wg64_host);
/// `rand`. Binding: `out` (`f32`).
pub const PHILOX_RAND: Kernel = philox_kernel("philox_rand", 256, rand_host);
/// [`PHILOX_RAND`] with workgroups of 64 (for geometry tests).
pub const PHILOX_RAND_WG64: Kernel = philox_kernel("philox_rand_wg64", 64, rand_wg64_host);
/// `randn`. Binding: `out` (`f32`).
pub const PHILOX_RANDN: Kernel = philox_kernel("philox_randn", 256, randn_host);
/// `uniform_(lo, hi)`. Binding: `out` (`f32`).
pub const PHILOX_UNIFORM: Kernel = philox_kernel("philox_uniform", 256, uniform_host);
/// `normal_(mean, std)`, for any finite mean and std. Binding: `out`
/// (`f32`).
pub const PHILOX_NORMAL: Kernel = philox_kernel("philox_normal", 256, normal_host);
/// `normal_(mean, std)` for a mean and std where [`normal_is_plain`]
/// holds, without the per-element checks the others need; the same bits
/// as [`PHILOX_NORMAL`] there (elsewhere its bits may differ between
/// backends). [`RandomOp::kernel`] picks it. Binding: `out` (`f32`).
pub const PHILOX_NORMAL_PLAIN: Kernel =
    philox_kernel("philox_normal_plain", 256, normal_plain_host);
/// `randint(low, high)`. Binding: `out` (`i32`).
pub const PHILOX_RANDINT: Kernel = philox_kernel("philox_randint", 256, randint_host);

/// Every random kernel.
pub const ALL: [Kernel; 9] = [
    PHILOX_U32,
    PHILOX_U32_WG64,
    PHILOX_RAND,
    PHILOX_RAND_WG64,
    PHILOX_RANDN,
    PHILOX_UNIFORM,
    PHILOX_NORMAL,
    PHILOX_NORMAL_PLAIN,
    PHILOX_RANDINT,
];

/// The largest element count of one launch (the kernels count blocks in
/// 32 bits).
pub const MAX_ELEMENTS: usize = (u32::MAX - 8) as usize;

/// The most workgroups [`grid_for`] asks for; invocations loop over the
/// rest (a grid stride).
pub const MAX_GRID: u32 = 4096;

/// The kernels' parameter block: `n`, seed (lo, hi), offset (lo, hi), the
/// op's two words, and a zero (which keeps `randn`'s products from being
/// fused into its adds: Note [Normal draws are bit-identical]); eight
/// little-endian `u32`s.
pub fn params(n: u32, at: PhiloxState, a: u32, b: u32) -> Vec<u8> {
    [
        n,
        at.seed as u32,
        (at.seed >> 32) as u32,
        at.offset as u32,
        (at.offset >> 32) as u32,
        a,
        b,
        0,
    ]
    .iter()
    .flat_map(|w| w.to_le_bytes())
    .collect()
}

/// Philox blocks a launch of `n` elements at `offset` touches.
pub fn block_count(n: usize, offset: u64) -> u64 {
    ((offset % 4) + n as u64).div_ceil(4)
}

/// The grid Keel launches `kernel` with for `n` elements at `offset`: one
/// invocation per Philox block, at most [`MAX_GRID`] workgroups.
pub fn grid_for(kernel: &Kernel, n: usize, offset: u64) -> [u32; 3] {
    let wg = u64::from(kernel.workgroup_size[0].max(1));
    let groups = block_count(n, offset)
        .div_ceil(wg)
        .clamp(1, u64::from(MAX_GRID));
    [groups as u32, 1, 1]
}

/// Checks a launch's arguments and returns its parameter block.
fn prepare(op: RandomOp, out: &Buffer, n: usize, at: PhiloxState) -> Result<Vec<u8>> {
    if n > MAX_ELEMENTS {
        return Err(Error::invalid(format!(
            "a random launch takes at most {MAX_ELEMENTS} elements, found {n}"
        )));
    }
    let bytes = n * 4;
    if out.len() < bytes {
        return Err(Error::invalid(format!(
            "the output buffer must hold {n} 4-byte elements ({bytes} bytes), found {} bytes",
            out.len()
        )));
    }
    if at.offset.checked_add(n as u64).is_none() {
        return Err(Error::invalid(format!(
            "offset {} + {n} elements passes the end of the stream (2^64 words)",
            at.offset
        )));
    }
    let (_, a, b) = op.encode()?;
    Ok(params(n as u32, at, a, b))
}

/// Launches `op` on `stream`: `n` elements into `out` (4 bytes each) from
/// stream `seed` starting at position `offset` (any value, odd ones too).
/// With `n` = 0 it checks the arguments and enqueues nothing.
pub fn launch(
    stream: &Stream,
    op: RandomOp,
    out: &Buffer,
    n: usize,
    seed: u64,
    offset: u64,
) -> Result<()> {
    let at = PhiloxState { seed, offset };
    let p = prepare(op, out, n, at)?;
    if n == 0 {
        // Nothing to write; an empty buffer cannot be bound on every API.
        return Ok(());
    }
    let kernel = op.kernel();
    stream.launch(&kernel, grid_for(&kernel, n, offset), &[out], &p)
}

/// Launches `kernel` (one of [`ALL`], matching `op`) with an explicit grid:
/// the values do not depend on it (Note [Random values do not depend on
/// the launch]); a grid too small to give each block an invocation loops.
#[allow(clippy::too_many_arguments)]
pub fn launch_with_grid(
    stream: &Stream,
    kernel: &Kernel,
    grid: [u32; 3],
    op: RandomOp,
    out: &Buffer,
    n: usize,
    seed: u64,
    offset: u64,
) -> Result<()> {
    let at = PhiloxState { seed, offset };
    let p = prepare(op, out, n, at)?;
    let code = op.encode()?.0;
    if !ALL
        .iter()
        .any(|k| k.name == kernel.name && kernel_code(k) == Some(code))
    {
        return Err(Error::invalid(format!(
            "kernel '{}' does not compute {op:?}",
            kernel.name
        )));
    }
    stream.launch(kernel, grid, &[out], &p)
}

fn kernel_code(k: &Kernel) -> Option<u32> {
    Some(match k.name {
        "philox_u32" | "philox_u32_wg64" => 0,
        "philox_rand" | "philox_rand_wg64" => 1,
        "philox_randn" => 2,
        "philox_uniform" => 3,
        "philox_normal" => 4,
        "philox_randint" => 5,
        _ => return None,
    })
}

/// Launches `op` with the next `n` words of `generator` (reserved, Note
/// [Philox offsets]); returns where they started. The generator must be
/// one of the stream's device type (as in PyTorch).
pub fn launch_from(
    generator: &Generator,
    stream: &Stream,
    op: RandomOp,
    out: &Buffer,
    n: usize,
) -> Result<PhiloxState> {
    // Check before reserving, so a refused launch leaves the generator.
    let (want, found) = (stream.device_type(), generator.device().device_type());
    if want != found {
        return Err(Error::invalid(format!(
            "Expected a '{}' device type for generator but found '{}'",
            want.name_lower(),
            found.name_lower()
        )));
    }
    prepare(op, out, n, PhiloxState { seed: 0, offset: 0 })?;
    let at = generator.reserve(n as u64)?;
    launch(stream, op, out, n, at.seed, at.offset)?;
    Ok(at)
}

/// Raw words (`u32`).
pub fn fill_u32(stream: &Stream, out: &Buffer, n: usize, seed: u64, offset: u64) -> Result<()> {
    launch(stream, RandomOp::U32, out, n, seed, offset)
}

/// `rand`: uniform `f32` in `[0, 1)`.
pub fn rand(stream: &Stream, out: &Buffer, n: usize, seed: u64, offset: u64) -> Result<()> {
    launch(stream, RandomOp::Rand, out, n, seed, offset)
}

/// `randn`: standard normal `f32`.
pub fn randn(stream: &Stream, out: &Buffer, n: usize, seed: u64, offset: u64) -> Result<()> {
    launch(stream, RandomOp::Randn, out, n, seed, offset)
}

/// `uniform_(lo, hi)`: uniform `f32` in `[lo, hi)`.
pub fn uniform(
    stream: &Stream,
    out: &Buffer,
    n: usize,
    seed: u64,
    offset: u64,
    lo: f32,
    hi: f32,
) -> Result<()> {
    launch(stream, RandomOp::Uniform { lo, hi }, out, n, seed, offset)
}

/// `normal_(mean, std)`.
pub fn normal(
    stream: &Stream,
    out: &Buffer,
    n: usize,
    seed: u64,
    offset: u64,
    mean: f32,
    std: f32,
) -> Result<()> {
    launch(stream, RandomOp::Normal { mean, std }, out, n, seed, offset)
}

/// `randint(low, high)`: uniform `i32` in `[low, high)`.
pub fn randint(
    stream: &Stream,
    out: &Buffer,
    n: usize,
    seed: u64,
    offset: u64,
    low: i32,
    high: i32,
) -> Result<()> {
    launch(
        stream,
        RandomOp::Randint { low, high },
        out,
        n,
        seed,
        offset,
    )
}

/// `[0, 1)` from a word: the low 24 bits times 2^-24.
pub fn to_unit(x: u32) -> f32 {
    (x & 0x00FF_FFFF) as f32 * (1.0 / 16_777_216.0)
}

/// Box-Muller on a pair of words, as every backend computes it (Note
/// [Normal draws are bit-identical]).
pub fn box_muller(x0: u32, x1: u32) -> (f32, f32) {
    let (c, s) = normal::box_muller_bits(x0, x1);
    (f32::from_bits(c), f32::from_bits(s))
}

/// The largest `f32` below `hi`.
fn below(hi: f32) -> f32 {
    let bits = hi.to_bits();
    if hi > 0.0 {
        f32::from_bits(bits - 1)
    } else if hi < 0.0 {
        f32::from_bits(bits + 1)
    } else {
        f32::from_bits(0x8000_0001)
    }
}

/// The bits of a Philox block's four elements (`code`, `a`, `b` as in the
/// parameter block); `randn` and `normal_` take one Box-Muller per pair.
fn block_values(code: u32, a: u32, b: u32, words: [u32; 4]) -> [u32; 4] {
    match code {
        2 | 4 => {
            let mut v = [0u32; 4];
            for pair in [0, 2] {
                let (z0, z1) = box_muller(words[pair], words[pair + 1]);
                for (slot, mut z) in [(pair, z0), (pair + 1, z1)] {
                    if code == 4 {
                        // Two roundings, as IEEE 754 and Rust define them
                        // (the kernels' integer `f32_mul` and `f32_add`).
                        let scaled = f32::from_bits(b) * z;
                        z = f32::from_bits(a) + scaled;
                    }
                    v[slot] = z.to_bits();
                }
            }
            v
        }
        _ => words.map(|x| element(code, a, b, x)),
    }
}

/// One element's bits from its word, for the ops other than `randn` and
/// `normal_`.
fn element(code: u32, a: u32, b: u32, x: u32) -> u32 {
    match code {
        0 => x,
        1 => to_unit(x).to_bits(),
        3 => {
            let (lo, hi) = (f32::from_bits(a), f32::from_bits(b));
            let width = hi - lo;
            let scaled = to_unit(x) * width;
            let v = scaled + lo;
            if v >= hi { below(hi) } else { v }.to_bits()
        }
        _ => a.wrapping_add(if b == 0 { x } else { x % b }),
    }
}

/// Fills `out` (one `u32` per element: the bits of `f32`/`i32` results)
/// as every kernel does.
fn fill(code: u32, a: u32, b: u32, at: PhiloxState, out: &mut [u32]) {
    let skip = at.offset % 4;
    let first_block = at.offset / 4;
    for (k, chunk_start) in (0..).zip((0..out.len() as u64 + skip).step_by(4)) {
        let words = stream_block(at.seed, first_block.wrapping_add(k));
        let values = block_values(code, a, b, words);
        for lane in 0..4u64 {
            let pos = chunk_start + lane;
            if pos < skip {
                continue;
            }
            let j = (pos - skip) as usize;
            if j < out.len() {
                out[j] = values[lane as usize];
            }
        }
    }
}

/// The host reference: the bits of the `n` elements `op` writes from stream
/// `seed` at `offset`, which the kernels are tested against.
pub fn reference(op: RandomOp, n: usize, seed: u64, offset: u64) -> Result<Vec<u32>> {
    let (code, a, b) = op.encode()?;
    let mut out = vec![0u32; n];
    fill(code, a, b, PhiloxState { seed, offset }, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// The checked-in translation (`random/translated.rs`) is what
    /// `keel_wgsl::rust` makes of `philox.wgsl` today (`KEEL_BLESS=1`
    /// rewrites it).
    #[test]
    fn the_translation_is_current() {
        let kernels: Vec<_> = super::ALL.iter().collect();
        crate::assert_translation_current("src/random/translated.rs", &kernels);
    }

    /// The launch-wide test of `normal_` is exactly the exponent ranges it
    /// names: on both sides of each bound, and for zeros of either sign.
    #[test]
    fn normal_is_plain_at_its_bounds() {
        let p = |e: i32| 2f32.powi(e);
        let below = |x: f32| f32::from_bits(x.to_bits() - 1);
        for (mean, std, plain) in [
            (0.0, 1.0, true),
            (-0.0, 1.0, true),
            (p(-102), p(-69), true),
            (-p(-102), p(-69), true),
            (below(p(-102)), 1.0, false),
            (1.0, below(p(-69)), false),
            (below(p(126)), below(p(123)), true),
            (p(126), 1.0, false),
            (1.0, p(123), false),
            (1.0, 0.0, false),
            (1.0, f32::MAX, false),
            (f32::MIN_POSITIVE, 1.0, false),
        ] {
            assert_eq!(
                super::normal_is_plain(mean, std),
                plain,
                "mean {mean:e}, std {std:e}"
            );
        }
    }
}
