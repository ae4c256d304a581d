// Conversions between f32 and the 16-bit floats, which WGSL holds packed
// two to a u32 word (the emulation of f16 storage: no `shader-f16`
// needed). An operator kernel of Keel's dispatcher (`copy_` between
// dtypes, and the f16/bf16 matmul on Vulkan and wgpu). Needs
// `shaders/compute/rounding.wgsl` in front (`keel_round_f16`,
// `keel_round_mantissa`).
// Bindings: 0 x, 1 out (both array<u32>, read_write), 2 params (uniform).
// Parameters: n (elements), mode: 0 f16 -> f32, 1 bf16 -> f32,
// 2 f32 -> f16, 3 f32 -> bf16 (round to nearest even; f16 overflow to
// infinity, subnormals kept; NaN stays NaN).
// Launch: one invocation per 16-bit word pair (w covers elements 2w and
// 2w + 1), 256 per workgroup, 2-D grid as add.wgsl. For odd n the last
// word's high half is the block's padding (bindings are rounded up to 4
// bytes within the allocation) and is written as 0.

struct Params {
    n: u32,
    mode: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

// f16 bits (low 16) to f32, exactly (integer operations only).
fn keel_f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0u {
        // Zero or subnormal: m * 2^-24.
        let v = f32(m) * 5.9604644775390625e-08;
        return bitcast<f32>(bitcast<u32>(v) | sign);
    }
    if e == 31u {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// f32 to f16 bits, round to nearest even.
fn keel_f32_to_f16(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    let sign = (bits >> 16u) & 0x8000u;
    let a = bits & 0x7fffffffu;
    if a > 0x7f800000u {
        return sign | 0x7e00u;
    }
    let r = bitcast<u32>(keel_round_f16(v)) & 0x7fffffffu;
    if r >= 0x7f800000u {
        return sign | 0x7c00u;
    }
    if r < 0x38800000u {
        // Below 2^-14: a subnormal, r = m * 2^-24 exactly.
        return sign | u32(bitcast<f32>(r) * 16777216.0);
    }
    return sign | ((((r >> 23u) & 0xffu) - 112u) << 10u) | ((r >> 13u) & 0x3ffu);
}

// f32 to bf16 bits, round to nearest even.
fn keel_f32_to_bf16(v: f32) -> u32 {
    let bits = bitcast<u32>(v);
    if (bits & 0x7fffffffu) > 0x7f800000u {
        return ((bits >> 16u) & 0x8000u) | 0x7fc0u;
    }
    return bitcast<u32>(keel_round_mantissa(v, 16u)) >> 16u;
}

@compute @workgroup_size(256)
fn cast_f32_half(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let w = gid.y * groups.x * 256u + gid.x;
    let e = 2u * w;
    if e >= params.n {
        return;
    }
    let two = e + 1u < params.n;
    switch params.mode {
        case 0u, 1u: {
            let word = x[w];
            var lo: f32;
            var hi: f32;
            if params.mode == 0u {
                lo = keel_f16_to_f32(word & 0xffffu);
                hi = keel_f16_to_f32(word >> 16u);
            } else {
                lo = bitcast<f32>(word << 16u);
                hi = bitcast<f32>(word & 0xffff0000u);
            }
            out[e] = bitcast<u32>(lo);
            if two {
                out[e + 1u] = bitcast<u32>(hi);
            }
        }
        default: {
            let a = bitcast<f32>(x[e]);
            var b = 0.0;
            if two {
                b = bitcast<f32>(x[e + 1u]);
            }
            var word: u32;
            if params.mode == 2u {
                word = keel_f32_to_f16(a);
                if two {
                    word = word | (keel_f32_to_f16(b) << 16u);
                }
            } else {
                word = keel_f32_to_bf16(a);
                if two {
                    word = word | (keel_f32_to_bf16(b) << 16u);
                }
            }
            out[w] = word;
        }
    }
}
