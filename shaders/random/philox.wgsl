// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11, the
// Random123 algorithm) over one stream per seed, and the conversions of
// `keel::random`. Every entry point writes element `i` of its output from
// the stream position `offset + i` alone, so the values do not depend on
// the workgroup size or on the grid: an invocation computes whole Philox
// blocks (4 positions each) and loops over them with a grid stride.
//
// Bindings: 0 out (u32 words; f32 outputs are stored as their bits),
// 1 params (uniform). Params: n, seed (lo, hi), offset (lo, hi), then two
// words whose meaning depends on the entry point (see `keel::random`),
// then a zero (see `fence`).
// The host reference is `keel::random::reference`.

struct Params {
    n: u32,
    seed_lo: u32,
    seed_hi: u32,
    off_lo: u32,
    off_hi: u32,
    a: u32,
    b: u32,
    zero: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;

// The high 32 bits of a * b: WGSL has no 64-bit integers, so the product is
// assembled from 16-bit halves (each partial product fits in 32 bits).
// keel-wgsl recognises this form and computes it as one high multiply
// (`mul.hi.u32` on CUDA); keep its shape when editing it.
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

// One Philox4x32 round with key k.
fn philox_round(c: vec4<u32>, k: vec2<u32>) -> vec4<u32> {
    let hi0 = mulhi(0xD2511F53u, c.x);
    let lo0 = 0xD2511F53u * c.x;
    let hi1 = mulhi(0xCD9E8D57u, c.z);
    let lo1 = 0xCD9E8D57u * c.z;
    return vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

// Philox4x32 with 10 rounds; the key is bumped between rounds. The rounds
// are written out: a loop of them kept its counter, its test and the
// key's bump under a condition in every round (ptxas did not unroll it).
fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    let bump = vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    var c = philox_round(counter, key);
    c = philox_round(c, key + bump);
    c = philox_round(c, key + 2u * bump);
    c = philox_round(c, key + 3u * bump);
    c = philox_round(c, key + 4u * bump);
    c = philox_round(c, key + 5u * bump);
    c = philox_round(c, key + 6u * bump);
    c = philox_round(c, key + 7u * bump);
    c = philox_round(c, key + 8u * bump);
    return philox_round(c, key + 9u * bump);
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

// randn and normal_ in f32 adds and multiplies that round the same on
// every backend (Note [Normal draws are bit-identical] in `keel::random`).
// A GPU's `log` is accurate only in absolute terms and its `sqrt`, `sin`
// and `cos` are not correctly rounded, so Box-Muller here uses none of
// them: only IEEE adds, subtracts and multiplies (correctly rounded to
// nearest even everywhere), exact conversions of integers below 2^24 and
// integer work on the bits, with no value ever subnormal (so flushing
// changes nothing). WGSL lets a compiler fuse a multiply feeding an add
// into one FMA and reassociate adds; Keel runs these kernels with strict
// floating point (`Kernel::strict_float`: SPIR-V's `NoContraction` on
// Vulkan, `.rn` in the PTX), and every such product also goes through
// `fence`, for the APIs where Keel has no way to say it (wgpu's GL, Metal
// and DX12 adapters). The host reference (`keel::random::reference`, in
// `src/random/normal.rs`) takes the same steps in the same order.

// x, unchanged: an exclusive-or of its bits with `params.zero`, which is
// 0 but which no compiler can know, so a product passed through it is
// rounded before the add that takes it.
fn fence(x: f32, zero: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ zero);
}

// -ln(a * 2^-24) for a in [1, 2^24]: with a = (1 + x) 2^k and 1 + x in
// [0.6875, 1.375) (x exact), (24 - k) ln 2 - ln(1 + x), where
// ln(1 + x) = x + x^2 P(x). ln 2 is split into a 16-bit part (times
// n <= 24 exact) and the rest.
fn neg_log(a: u32, zero: u32) -> f32 {
    var k = 31u - countLeadingZeros(a);
    var p = 1u << k;
    if 8u * (a - p) >= 3u * p {
        k += 1u;
        p <<= 1u;
    }
    let x = fence(f32(i32(a) - i32(p)) * bitcast<f32>((127u - k) << 23u), zero);
    var q = -0.098010495f;
    q = fence(q * x, zero) + 0.13687582f;
    q = fence(q * x, zero) + -0.12849376f;
    q = fence(q * x, zero) + 0.14052981f;
    q = fence(q * x, zero) + -0.16633914f;
    q = fence(q * x, zero) + 0.2000831f;
    q = fence(q * x, zero) + -0.25000942f;
    q = fence(q * x, zero) + 0.3333324f;
    q = fence(q * x, zero) + -0.49999994f;
    let tail = fence(x * x * q, zero);
    let n = f32(24u - k);
    return (fence(n * 0.69314575f, zero) - x) + (fence(n * 1.4286068e-6f, zero) - tail);
}

// sqrt(2 l) for l >= 0: 1 / sqrt(2 l) from the bits and two Newton steps,
// s = 2 l times that, then one correction s + (2 l - s^2) / (2 s) whose
// residual is exact (s split into two 12-bit halves makes every partial
// square exact). Zero gives zero.
fn radius(l: f32, zero: u32) -> f32 {
    let v = l + l;
    // Two Newton steps, written out (ptxas kept a loop of two).
    let y0 = bitcast<f32>(0x5f3759dfu - (bitcast<u32>(v) >> 1u));
    let y1 = y0 * (1.5f - fence(l * y0 * y0, zero));
    let y = y1 * (1.5f - fence(l * y1 * y1, zero));
    let s = fence(v * y, zero);
    let sh = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
    let sl = s - sh;
    let d = ((v - fence(sh * sh, zero)) - fence((sh + sh) * sl, zero)) - fence(sl * sl, zero);
    return s + fence(d * (0.5f * y), zero);
}

// (cos phi, sin phi) for phi = ay 2 pi / 2^24, ay <= 2^21. The step is
// split into a 2-bit part (times ay exact) and the rest;
// sin(phi) = phi + phi z S(z) and cos(phi) = 1 - z (1/2 - z C(z)) with
// z = phi^2.
fn cos_sin(ay: u32, zero: u32) -> vec2<f32> {
    let fy = f32(ay);
    let hi = fence(fy * 3.5762787e-7f, zero);
    let lo = fence(fy * 1.687916e-8f, zero);
    let phi = hi + lo;
    let z = phi * phi;
    let s = fence((fence(z * -0.00019515303f, zero) + 0.008332161f) * z, zero) + -0.16666655f;
    let sin_phi = hi + (lo + fence(phi * z * s, zero));
    let c = fence((fence(z * 2.443317e-5f, zero) + -0.0013887316f) * z, zero) + 0.041666646f;
    let cos_phi = 1.0f - fence(z * (0.5f - fence(z * c, zero)), zero);
    return vec2<f32>(cos_phi, sin_phi);
}

// Box-Muller on a pair of words, as f32 bits: r cos t and r sin t with
// r = sqrt(-2 ln u1), u1 = 1 - (x0's low 24 bits) 2^-24 in (0, 1], and
// t = 2 pi u2, u2 = (x1's low 24 bits) 2^-24. t is reduced to the nearest
// quarter turn exactly (integers), leaving |phi| <= pi/4.
fn box_muller(x0: u32, x1: u32, zero: u32) -> vec2<u32> {
    let r = radius(neg_log(0x1000000u - (x0 & 0xffffffu), zero), zero);
    let m1 = x1 & 0xffffffu;
    let turn = (m1 + 0x200000u) >> 22u;
    let y = i32(m1) - i32(turn << 22u);
    let cs = cos_sin(u32(abs(y)), zero);
    // t = quarter * pi/2 + phi: an odd quarter swaps cos and sin, and the
    // signs are, by quarter 0 1 2 3, cos: + -phi - phi, sin: phi + -phi -
    // (phi for phi's sign, -phi for its opposite). Selects, not branches:
    // a GPU runs every branch its lanes take.
    let quarter = turn & 3u;
    let sn = select(0u, 1u, y < 0);
    let odd = (quarter & 1u) == 1u;
    let half = quarter >> 1u;
    let cm = select(cs.x, cs.y, odd);
    let sm = select(cs.y, cs.x, odd);
    let c_neg = select(half, sn ^ half ^ 1u, odd);
    let s_neg = select(sn ^ half, half, odd);
    let c = bitcast<u32>(r * cm);
    let s = bitcast<u32>(r * sm);
    return vec2<u32>(
        select(c | (c_neg << 31u), 0u, c == 0u),
        select(s | (s_neg << 31u), 0u, s == 0u),
    );
}

// The f32 nearest sign * (m + a fraction when `sticky`) * 2^e, rounded to
// nearest even: subnormal below f32's normal range, infinite past its
// largest finite value. `sticky` comes with at least 26 bits in m.
fn round_f32(sign: u32, m: u32, sticky: bool, e: i32) -> u32 {
    if m == 0u {
        return sign << 31u;
    }
    var s = i32(32u - countLeadingZeros(m)) - 24;
    if e + s < -149 {
        s = -149 - e;
    }
    var q = 0u;
    var half = false;
    var rest = sticky;
    if s <= 0 {
        q = m << u32(-s);
    } else if s > 32 {
        rest = true;
    } else if s == 32 {
        half = (m >> 31u) == 1u;
        rest = rest || (m << 1u) != 0u;
    } else {
        q = m >> u32(s);
        let below = m << u32(32 - s);
        half = (below >> 31u) == 1u;
        rest = rest || (below << 1u) != 0u;
    }
    if half && (rest || (q & 1u) == 1u) {
        q += 1u;
    }
    let e_lsb = e + s;
    if e_lsb > 104 {
        return (sign << 31u) | 0x7f800000u;
    }
    let bits = (u32(e_lsb + 149) << 23u) + q;
    return (sign << 31u) | min(bits, 0x7f800000u);
}

// An f32's significand with its leading bit, and the exponent of its last
// bit: the value is m * 2^e.
fn significand(x: u32) -> u32 {
    let field = (x >> 23u) & 0xffu;
    return select(x & 0x7fffffu, (x & 0x7fffffu) | 0x800000u, field != 0u);
}

fn lsb_exponent(x: u32) -> i32 {
    return i32(max((x >> 23u) & 0xffu, 1u)) - 150;
}

// a * b for finite f32 bits, correctly rounded.
fn f32_mul(a: u32, b: u32) -> u32 {
    let sign = (a ^ b) >> 31u;
    let ma = significand(a);
    let mb = significand(b);
    if ma == 0u || mb == 0u {
        return sign << 31u;
    }
    let za = countLeadingZeros(ma);
    let zb = countLeadingZeros(mb);
    let pa = ma << za;
    let pb = mb << zb;
    let e = lsb_exponent(a) + lsb_exponent(b) - i32(za) - i32(zb) + 32;
    return round_f32(sign, mulhi(pa, pb), (pa * pb) != 0u, e);
}

// a + b for finite a and finite or infinite b (f32 bits), correctly
// rounded.
fn f32_add(a: u32, b: u32) -> u32 {
    let a_mag = a & 0x7fffffffu;
    let b_mag = b & 0x7fffffffu;
    if b_mag == 0x7f800000u {
        return b;
    }
    if a_mag == 0u {
        if b_mag == 0u {
            return a & b;
        }
        return b;
    }
    if b_mag == 0u {
        return a;
    }
    // x has the larger exponent; both get seven guard bits.
    var x = a;
    var y = b;
    if lsb_exponent(b) > lsb_exponent(a) {
        x = b;
        y = a;
    }
    let ex = lsb_exponent(x) - 7;
    let d = u32(lsb_exponent(x) - lsb_exponent(y));
    let wx = significand(x) << 7u;
    let gy = significand(y) << 7u;
    var wy = 0u;
    var sticky = true;
    if d < 32u {
        wy = gy >> d;
        sticky = d > 0u && (gy << (32u - d)) != 0u;
    }
    let sx = x >> 31u;
    let sy = y >> 31u;
    if sx == sy {
        return round_f32(sx, wx + wy, sticky, ex);
    }
    if d == 0u {
        if wx == wy {
            return 0u;
        }
        if wx > wy {
            return round_f32(sx, wx - wy, false, ex);
        }
        return round_f32(sy, wy - wx, false, ex);
    }
    // |x| > |y|; a fraction cut from y borrows one from the difference.
    return round_f32(sx, wx - wy - select(0u, 1u, sticky), sticky, ex);
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

// The value of stream position lane of block `words` for `op` other than
// randn and normal_: 0 raw u32, 1 rand, 3 uniform_(a, b),
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

// Whether f32 bits hold a finite number of at least 2^-125 in magnitude.
fn clear_of_subnormals(x: u32) -> bool {
    let field = (x >> 23u) & 0xffu;
    return field >= 2u && field <= 254u;
}

// normal_'s mean + std * z for z's bits, correctly rounded after each
// step. The hardware's multiply and add round correctly on every backend
// where nothing is subnormal: flushing (which backends may do) touches
// only subnormal operands and results, so where the operands are normal
// (mean may be zero) and the product and the sum are at least 2^-125, the
// hardware gives the bits the integer path gives, at a fraction of its
// cost. The `min` is a no-op (|z| < 8: randn's largest magnitude is about
// 5.8, and multiplying by 8 is exact) that stands between the multiply and
// the add, so that no driver contracts them into one FMA (as uniform_
// does). Anything else (subnormals, zero std, overflow, infinities) takes
// the integer path.
fn normal_of(z: u32) -> u32 {
    let mean = params.a;
    let spread = params.b;
    let p = normal_product(z);
    let sum = bitcast<u32>(bitcast<f32>(mean) + p);
    let normal_in = ((mean & 0x7fffffffu) == 0u || ((mean >> 23u) & 0xffu) - 1u < 254u)
        && ((spread >> 23u) & 0xffu) - 1u < 254u
        && ((z >> 23u) & 0xffu) - 1u < 254u;
    if normal_in && clear_of_subnormals(bitcast<u32>(p)) && clear_of_subnormals(sum) {
        return sum;
    }
    return f32_add(mean, f32_mul(spread, z));
}

// normal_'s `mean + std * z` in hardware alone: what normal_of gives
// for every z randn makes (0 or 2^-33 <= |z| < 8) when the mean is zero
// or 2^-102 <= |mean| < 2^126 and 2^-69 <= |std| < 2^123. The product is
// then zero or at least 2^-102, any nonzero sum (a multiple of 2^-125) at
// least that, and nothing overflows, so the multiply and the add are
// exact IEEE operations on every backend, zeros' signs included. The host
// launches philox_normal_plain for such a mean and std
// (`keel::random::RandomOp::kernel`), philox_normal for the others: a
// separate entry point, because lavapipe runs both sides of a branch for
// its SIMD lanes even where every lane takes one.
fn normal_hardware(z: u32) -> u32 {
    return bitcast<u32>(bitcast<f32>(params.a) + normal_product(z));
}

// std * z in hardware, kept apart from the add that follows by a `min`
// that changes nothing (|z| < 8), so that no driver fuses the two.
fn normal_product(z: u32) -> f32 {
    let s = bitcast<f32>(params.b);
    return min(s * bitcast<f32>(z), abs(s) * 8.0);
}

// The grid-stride loop over this launch's Philox blocks, storing the
// positions offset .. offset + n.
fn run(op: u32, gid: vec3<u32>, groups: vec3<u32>, size: vec3<u32>) {
    let me = linear(gid, groups, size);
    let blocks = block_count();
    for (var k = me.x; k < blocks; k += me.y) {
        let words = block(k);
        store(k, vec4<u32>(value(op, words, 0u), value(op, words, 1u), value(op, words, 2u), value(op, words, 3u)));
    }
}

// The same for randn (op 2) and normal_ (op 4; op 6 where its mean and
// std need no per-element checks: normal_hardware): one Box-Muller gives a
// pair of positions. Loops rather than repeated calls keep one copy of
// the integer code in the kernel (each call is inlined).
fn run_normal(op: u32, gid: vec3<u32>, groups: vec3<u32>, size: vec3<u32>) {
    let me = linear(gid, groups, size);
    let blocks = block_count();
    let zero = params.zero;
    for (var k = me.x; k < blocks; k += me.y) {
        let words = block(k);
        // Constant components only: a dynamic index would keep `values`
        // in memory on the host backends.
        var values: vec4<u32>;
        for (var j = 0u; j < 2u; j++) {
            let pair = select(words.xy, words.zw, j == 1u);
            var z = box_muller(pair.x, pair.y, zero);
            if op == 6u {
                z = vec2<u32>(normal_hardware(z.x), normal_hardware(z.y));
            } else if op == 4u {
                z = vec2<u32>(normal_of(z.x), normal_of(z.y));
            }
            if j == 0u {
                values = vec4<u32>(z, values.zw);
            } else {
                values = vec4<u32>(values.xy, z);
            }
        }
        store(k, values);
    }
}

// Stores block k's values at the positions this launch covers. Every
// block but the first and the last lies whole inside them and takes four
// plain stores; the two ends test each lane. The lanes are written out
// with constant components: a loop indexing `values` by its counter kept
// it in a loop of tests and selects a GPU runs for every block.
fn store(k: u32, values: vec4<u32>) {
    let skip = params.off_lo & 3u;
    let first = 4u * k;
    let at = first - skip;
    if first >= skip && at < params.n && params.n - at >= 4u {
        out[at] = values.x;
        out[at + 1u] = values.y;
        out[at + 2u] = values.z;
        out[at + 3u] = values.w;
        return;
    }
    store_lane(first, skip, values.x);
    store_lane(first + 1u, skip, values.y);
    store_lane(first + 2u, skip, values.z);
    store_lane(first + 3u, skip, values.w);
}

// Stores stream position `pos` of this launch's block where the launch
// covers it.
fn store_lane(pos: u32, skip: u32, value: u32) {
    if pos >= skip && pos - skip < params.n {
        out[pos - skip] = value;
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
    run_normal(2u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_uniform(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(3u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_normal(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run_normal(4u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_normal_plain(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run_normal(6u, gid, groups, vec3<u32>(256u, 1u, 1u));
}

@compute @workgroup_size(256)
fn philox_randint(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(5u, gid, groups, vec3<u32>(256u, 1u, 1u));
}
