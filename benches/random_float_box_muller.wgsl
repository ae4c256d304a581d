// The randn kernel Keel shipped before its draws were bit-identical (shaders/random/
// philox.wgsl at f7a47f5): log, sqrt, sin and cos in f32, as accurate as each
// device makes them. benches/random.rs times it beside the current kernel on
// the GPU backends, the baseline of the randn speed goal.
// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11, the
// Random123 algorithm) over one stream per seed, and the conversions of
// `keel::random`. Every entry point writes element `i` of its output from
// the stream position `offset + i` alone, so the values do not depend on
// the workgroup size or on the grid: an invocation computes whole Philox
// blocks (4 positions each) and loops over them with a grid stride.
//
// Bindings: 0 out (u32 words; f32 outputs are stored as their bits),
// 1 params (uniform). Params: n, seed (lo, hi), offset (lo, hi), then two
// words whose meaning depends on the entry point (see `keel::random`).
// The host reference is `keel::random::reference`; the PTX twin is
// `philox.ptx`.

struct Params {
    n: u32,
    seed_lo: u32,
    seed_hi: u32,
    off_lo: u32,
    off_hi: u32,
    a: u32,
    b: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;

// The high 32 bits of a * b: WGSL has no 64-bit integers, so the product is
// assembled from 16-bit halves (each partial product fits in 32 bits).
fn mulhi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}

// Philox4x32 with 10 rounds; the key is bumped between rounds.
fn philox(counter: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key_in;
    for (var r = 0u; r < 10u; r++) {
        if r > 0u {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let hi0 = mulhi(0xD2511F53u, c.x);
        let lo0 = 0xD2511F53u * c.x;
        let hi1 = mulhi(0xCD9E8D57u, c.z);
        let lo1 = 0xCD9E8D57u * c.z;
        c = vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

// The Philox block `k` of this launch: block number offset / 4 + k of the
// stream (a 64-bit counter in the first two words).
fn block(k: u32) -> vec4<u32> {
    let base_lo = (params.off_lo >> 2u) | (params.off_hi << 30u);
    let base_hi = params.off_hi >> 2u;
    let lo = base_lo + k;
    let carry = select(0u, 1u, lo < base_lo);
    let counter = vec4<u32>(lo, base_hi + carry, 0u, 0u);
    return philox(counter, vec2<u32>(params.seed_lo, params.seed_hi));
}

// Blocks this launch touches: the positions offset .. offset + n.
fn block_count() -> u32 {
    return ((params.off_lo & 3u) + params.n + 3u) / 4u;
}

// This invocation's linear index and the number of invocations, for any
// 1-, 2- or 3-D grid.
fn linear(gid: vec3<u32>, groups: vec3<u32>, size: vec3<u32>) -> vec2<u32> {
    let ext = groups * size;
    let index = gid.x + ext.x * (gid.y + ext.y * gid.z);
    return vec2<u32>(index, ext.x * ext.y * ext.z);
}

// u in [0, 1): the low 24 bits times 2^-24 (exact in f32).
fn to_unit(x: u32) -> f32 {
    return f32(x & 0xffffffu) * 5.9604644775390625e-8;
}

// Box-Muller on a pair of words: (r cos t, r sin t).
fn box_muller(x0: u32, x1: u32) -> vec2<f32> {
    let u1 = 1.0 - to_unit(x0);
    let u2 = to_unit(x1);
    let r = sqrt(-2.0 * log(u1));
    let t = 6.2831855 * u2;
    return vec2<f32>(r * cos(t), r * sin(t));
}

// The largest f32 below `hi` (uniform_ keeps its results under `hi`).
fn below(hi: f32) -> f32 {
    let bits = bitcast<u32>(hi);
    if hi > 0.0 {
        return bitcast<f32>(bits - 1u);
    }
    if hi < 0.0 {
        return bitcast<f32>(bits + 1u);
    }
    return bitcast<f32>(0x80000001u);
}

// The value of stream position lane of block `words` for `op`:
// 0 raw u32, 1 rand, 2 randn, 3 uniform_(a, b), 4 normal_(a, b),
// 5 randint(low = a, range = b; 0 means 2^32).
fn value(op: u32, words: vec4<u32>, lane: u32) -> u32 {
    let x = words[lane];
    switch op {
        case 0u: {
            return x;
        }
        case 1u: {
            return bitcast<u32>(to_unit(x));
        }
        case 2u, 4u: {
            var pair = words.xy;
            if lane >= 2u {
                pair = words.zw;
            }
            let z2 = box_muller(pair.x, pair.y);
            var z = z2.x;
            if (lane & 1u) == 1u {
                z = z2.y;
            }
            if op == 4u {
                let mean = bitcast<f32>(params.a);
                let sd = bitcast<f32>(params.b);
                let scaled = sd * z;
                z = mean + scaled;
            }
            return bitcast<u32>(z);
        }
        case 3u: {
            let lo = bitcast<f32>(params.a);
            let hi = bitcast<f32>(params.b);
            let width = hi - lo;
            // Rounded after each step, as on every backend: a Vulkan
            // driver may contract a multiply feeding an add into one fused
            // multiply-add (NVIDIA's does; WGSL cannot forbid it), and
            // lavapipe's `fma` is unfused, so neither form is portable. The
            // `min` (a no-op: to_unit < 1, so the rounded product is at most
            // width) stands between the two, and nothing is contracted.
            let scaled = min(to_unit(x) * width, width);
            var v = scaled + lo;
            if v >= hi {
                v = below(hi);
            }
            return bitcast<u32>(v);
        }
        default: {
            var r = x;
            if params.b != 0u {
                r = x % params.b;
            }
            return params.a + r;
        }
    }
}

fn run(op: u32, gid: vec3<u32>, groups: vec3<u32>, size: vec3<u32>) {
    let me = linear(gid, groups, size);
    let skip = params.off_lo & 3u;
    let blocks = block_count();
    for (var k = me.x; k < blocks; k += me.y) {
        let words = block(k);
        for (var lane = 0u; lane < 4u; lane++) {
            let pos = 4u * k + lane;
            if pos >= skip && pos - skip < params.n {
                out[pos - skip] = value(op, words, lane);
            }
        }
    }
}

@compute @workgroup_size(256)
fn philox_u32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(0u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(64)
fn philox_u32_wg64(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(0u, gid, groups, vec3<u32>(64u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_rand(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(1u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(64)
fn philox_rand_wg64(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(1u, gid, groups, vec3<u32>(64u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_randn(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(2u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_uniform(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(3u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_normal(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(4u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_randint(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(5u, gid, groups, vec3<u32>(256u, 1u, 1u));
}
