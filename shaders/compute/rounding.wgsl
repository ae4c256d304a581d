// Rounding an f32 to a narrower format and back, as bit operations, with
// round to nearest, ties to even: the same numerics as the Rust reference
// (`src/compute/precision.rs`) and the PTX kernels. Format codes:
// 0 none (f32 as is), 1 tf32 (10-bit mantissa), 2 bf16 (7-bit mantissa),
// 3 f16 (10-bit mantissa, 5-bit exponent: subnormals below 2^-14,
// infinity from 65520 on).
// Not a kernel: prepended to the matmul kernels' WGSL (`concat!`).

// `x` with its low `drop` mantissa bits rounded away (1 <= drop <= 23);
// infinities and NaNs are returned as they are. Here and in
// keel_round_f16 both sides of each choice are computed and one selected:
// a branch per element costs a GPU more than the few operations it skips.
fn keel_round_mantissa(x: f32, drop: u32) -> f32 {
    let bits = bitcast<u32>(x);
    let lsb = (bits >> drop) & 1u;
    let half_minus_one = (1u << (drop - 1u)) - 1u;
    let mask = ~((1u << drop) - 1u);
    let rounded = bitcast<f32>((bits + half_minus_one + lsb) & mask);
    // "Some exponent bit is clear": one logic operation that sets a
    // predicate on NVIDIA, where masking and comparing takes two.
    return select(x, rounded, (~bits & 0x7f800000u) != 0u);
}

fn keel_round_f16(x: f32) -> f32 {
    // f16 subnormals: multiples of 2^-24 (both scalings are exact).
    let sub = round(x * 16777216.0) * 5.9604644775390625e-08;
    let r = select(keel_round_mantissa(x, 13u), sub, abs(x) < 6.103515625e-05);
    let inf = bitcast<f32>((bitcast<u32>(r) & 0x80000000u) | 0x7f800000u);
    return select(r, inf, abs(r) > 65504.0);
}

// keel_round_f16's bits in about half the operations (a NaN stays a NaN,
// its payload may change), for the matmul kernels' staging. Adding
// c = 1.5 * 2^(e + 13), e being x's exponent but at least -14, makes a
// sum whose spacing is f16's at x (2^(e - 10); 2^-24, f16's subnormal
// step, below 2^-14), so the hardware's add rounds x to f16 (nearest,
// ties to even: c is an even multiple of the spacing) and subtracting c
// again is exact. `zero` must be 0; the kernel takes it from a parameter
// no compiler can know, and the sum passes through an exclusive-or with
// it, so that none folds (x + c) - c into x (SPIR-V lets a driver
// reassociate adds). The sign is put back for the zeros the subtraction
// makes positive. Past f16's range the sum is never used: |x| >= 65520
// rounds to infinity (c's bits overflow for |x| >= 2^115).
fn keel_round_f16_fast(x: f32, zero: u32) -> f32 {
    let bits = bitcast<u32>(x);
    let sign = bits & 0x80000000u;
    let c = bitcast<f32>(max((bits & 0x7f800000u) + 0x06c00000u, 0x3f400000u));
    let s = bitcast<f32>(bitcast<u32>(x + c) ^ zero);
    let r = bitcast<f32>(bitcast<u32>(s - c) | sign);
    return select(r, bitcast<f32>(sign | 0x7f800000u), abs(x) >= 65520.0);
}

fn keel_round_f16_fast4(v: vec4<f32>, zero: u32) -> vec4<f32> {
    return vec4<f32>(
        keel_round_f16_fast(v.x, zero),
        keel_round_f16_fast(v.y, zero),
        keel_round_f16_fast(v.z, zero),
        keel_round_f16_fast(v.w, zero),
    );
}

fn keel_round_to(x: f32, format: u32) -> f32 {
    switch format {
        case 1u: {
            return keel_round_mantissa(x, 13u);
        }
        case 2u: {
            return keel_round_mantissa(x, 16u);
        }
        case 3u: {
            return keel_round_f16(x);
        }
        default: {
            return x;
        }
    }
}

// keel_round_to on each component, the format chosen once for the four
// (each element then rounded with constant masks; matmul_tiled_4x4
// chooses once for its eight staged elements, with the two below).
fn keel_round4(v: vec4<f32>, format: u32) -> vec4<f32> {
    switch format {
        case 1u: {
            return keel_round_mantissa4(v, 13u);
        }
        case 2u: {
            return keel_round_mantissa4(v, 16u);
        }
        case 3u: {
            return keel_round_f16_4(v);
        }
        default: {
            return v;
        }
    }
}

fn keel_round_mantissa4(v: vec4<f32>, drop: u32) -> vec4<f32> {
    return vec4<f32>(
        keel_round_mantissa(v.x, drop),
        keel_round_mantissa(v.y, drop),
        keel_round_mantissa(v.z, drop),
        keel_round_mantissa(v.w, drop),
    );
}

fn keel_round_f16_4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(keel_round_f16(v.x), keel_round_f16(v.y), keel_round_f16(v.z), keel_round_f16(v.w));
}
