//! Reduced-precision matmul numerics, as bit operations on `f32` with
//! round to nearest, ties to even: this Rust code, the WGSL
//! (`shaders/compute/rounding.wgsl`) and the PTX (`keel_round_to` in the
//! matmul kernels) compute the same values, so a mode's effect is a
//! property of the kernels on every backend.

/// How matmul inputs are rounded before they are multiplied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InputRounding {
    /// Full f32 (PyTorch's `"ieee"`).
    #[default]
    Ieee,
    /// TF32: a 10-bit mantissa, f32's exponent range.
    Tf32,
    /// bf16: a 7-bit mantissa, f32's exponent range.
    Bf16,
    /// f16: a 10-bit mantissa, 5-bit exponent (inputs as f16 storage).
    F16,
}

/// How products are accumulated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accumulation {
    /// In f32.
    #[default]
    F32,
    /// In f16: the accumulator is rounded to f16 after every add
    /// (PyTorch's `allow_fp16_accumulation`).
    F16,
}

/// How split-K partial sums are combined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// In f32, with no split (one sum over all of k).
    #[default]
    F32,
    /// Split-K, partial sums and their running total rounded to f16
    /// (`allow_fp16_reduced_precision_reduction`).
    F16,
    /// Split-K, rounded to bf16 (`allow_bf16_reduced_precision_reduction`).
    Bf16,
}

/// The numerics of one matmul. The default is plain f32.
///
/// For each output, products `round(a) * round(b)` are added in k order
/// into a partial sum, rounded per [`Accumulation`] after every add; with
/// a narrow [`Reduction`], k is split into chunks of
/// [`SPLIT_K_CHUNK`] and each chunk's sum is rounded and added (rounded)
/// into the result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MatmulPrecision {
    /// Rounding of the inputs.
    pub inputs: InputRounding,
    /// The accumulator's format.
    pub accumulation: Accumulation,
    /// The split-K reduction's format.
    pub reduction: Reduction,
}

/// The length of one split-K chunk (a multiple of the tiled kernel's k
/// step, 16).
pub const SPLIT_K_CHUNK: u32 = 256;

/// Format codes shared by the kernels.
const NONE: u32 = 0;
const TF32: u32 = 1;
const BF16: u32 = 2;
const F16: u32 = 3;

impl MatmulPrecision {
    /// Plain f32.
    pub const IEEE: MatmulPrecision = MatmulPrecision::inputs(InputRounding::Ieee);
    /// Inputs rounded to TF32, f32 accumulation.
    pub const TF32: MatmulPrecision = MatmulPrecision::inputs(InputRounding::Tf32);
    /// Inputs rounded to bf16, f32 accumulation.
    pub const BF16: MatmulPrecision = MatmulPrecision::inputs(InputRounding::Bf16);

    /// Inputs rounded as given, f32 accumulation and reduction.
    pub const fn inputs(inputs: InputRounding) -> MatmulPrecision {
        MatmulPrecision {
            inputs,
            accumulation: Accumulation::F32,
            reduction: Reduction::F32,
        }
    }

    /// Whether this mode only rounds the inputs (plain f32 included): f32
    /// accumulation and no split-K. Such a mode runs the plain f32 loop of
    /// the tiled kernels on inputs rounded once (as they are staged, or in
    /// a pass before the GPU-shaped kernel of a large product), so it costs
    /// about what plain f32 costs.
    pub fn rounds_inputs_only(&self) -> bool {
        self.accumulation == Accumulation::F32 && self.reduction == Reduction::F32
    }

    /// Whether the running sum is plain f32 (no rounding after each add);
    /// the split-K reduction may still round its chunk sums. The GPU-shaped
    /// tiled kernel computes every such mode.
    pub fn accumulates_in_f32(&self) -> bool {
        self.accumulation == Accumulation::F32
    }

    /// The kernels' `mode` parameter: input, accumulator and reduction
    /// format codes in bits 0-3, 4-7 and 8-11 (0 = plain f32).
    pub fn mode(&self) -> u32 {
        let input = match self.inputs {
            InputRounding::Ieee => NONE,
            InputRounding::Tf32 => TF32,
            InputRounding::Bf16 => BF16,
            InputRounding::F16 => F16,
        };
        let acc = match self.accumulation {
            Accumulation::F32 => NONE,
            Accumulation::F16 => F16,
        };
        let red = match self.reduction {
            Reduction::F32 => NONE,
            Reduction::F16 => F16,
            Reduction::Bf16 => BF16,
        };
        input | acc << 4 | red << 8
    }

    /// The kernels' `chunk` parameter: [`SPLIT_K_CHUNK`] with a narrow
    /// reduction, 0 (no split) otherwise.
    pub fn chunk(&self) -> u32 {
        if self.reduction == Reduction::F32 {
            0
        } else {
            SPLIT_K_CHUNK
        }
    }
}

/// `x` with its low `drop` mantissa bits rounded away (1..=23), ties to
/// even; infinities and NaNs unchanged.
fn round_mantissa(x: f32, drop: u32) -> f32 {
    let bits = x.to_bits();
    if bits & 0x7f80_0000 == 0x7f80_0000 {
        return x;
    }
    let lsb = (bits >> drop) & 1;
    let half_minus_one = (1u32 << (drop - 1)) - 1;
    let mask = !((1u32 << drop) - 1);
    f32::from_bits(bits.wrapping_add(half_minus_one + lsb) & mask)
}

/// `x` rounded to TF32 (10-bit mantissa), as an f32.
pub fn round_tf32(x: f32) -> f32 {
    round_mantissa(x, 13)
}

/// `x` rounded to bf16, as an f32.
pub fn round_bf16(x: f32) -> f32 {
    round_mantissa(x, 16)
}

/// `x` rounded to f16 (subnormals below 2^-14, infinity from 65520 on),
/// as an f32.
pub fn round_f16(x: f32) -> f32 {
    if x.abs() < 6.103_515_6e-5 {
        return (x * 16_777_216.0).round_ties_even() * 5.960_464_5e-8;
    }
    let r = round_mantissa(x, 13);
    if r.abs() > 65504.0 {
        f32::from_bits((r.to_bits() & 0x8000_0000) | 0x7f80_0000)
    } else {
        r
    }
}

/// `x` rounded to format `code` (the kernels' codes).
pub(crate) fn round_to(x: f32, code: u32) -> f32 {
    match code {
        TF32 => round_tf32(x),
        BF16 => round_bf16(x),
        F16 => round_f16(x),
        _ => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-11 is halfway between TF32 neighbours 1 and 1 + 2^-10.
        assert_eq!(round_tf32(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(
            round_tf32(1.0 + 3.0 * 2f32.powi(-11)),
            1.0 + 2.0 * 2f32.powi(-10)
        );
        assert_eq!(
            round_tf32(1.0 + 2f32.powi(-11) + 2f32.powi(-20)),
            1.0 + 2f32.powi(-10)
        );
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        // f32::MAX is past bf16's largest value, 3.3895e38, by more than half a step.
        assert_eq!(round_bf16(-f32::MAX), f32::NEG_INFINITY);
        assert_eq!(round_bf16(3.3895e38).to_bits(), 0x7f7f_0000);
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(round_bf16(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn f16_has_its_range() {
        assert_eq!(round_f16(65504.0), 65504.0);
        assert_eq!(round_f16(65519.0), 65504.0);
        assert_eq!(round_f16(65520.0), f32::INFINITY);
        assert_eq!(round_f16(-1.0e6), f32::NEG_INFINITY);
        // The smallest subnormal, 2^-24, and ties to even around it.
        assert_eq!(round_f16(2f32.powi(-24)), 2f32.powi(-24));
        assert_eq!(round_f16(2f32.powi(-25)), 0.0);
        assert_eq!(round_f16(3.0 * 2f32.powi(-25)), 2f32.powi(-23));
        assert_eq!(round_f16(0.1), 0.099_975_586);
        assert_eq!(round_f16(1.0 / 3.0), 0.333_251_95);
    }

    #[test]
    fn modes_pack_three_codes() {
        assert_eq!(MatmulPrecision::default().mode(), 0);
        assert_eq!(MatmulPrecision::TF32.mode(), 1);
        let p = MatmulPrecision {
            inputs: InputRounding::F16,
            accumulation: Accumulation::F16,
            reduction: Reduction::Bf16,
        };
        assert_eq!(p.mode(), 3 | 3 << 4 | 2 << 8);
        assert_eq!(p.chunk(), SPLIT_K_CHUNK);
        assert_eq!(MatmulPrecision::BF16.chunk(), 0);
    }
}
