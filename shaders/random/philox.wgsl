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
// The host reference is `keel::random::reference`.

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

// randn and normal_ in integer arithmetic (Note [Normal draws are
// bit-identical] in `keel::random`). Every step of Box-Muller, and
// normal_'s `mean + std * z`, is computed with u32 and i32 operations,
// which every backend performs exactly: a GPU's `log` is accurate only in
// absolute terms, its `sqrt`, `sin` and `cos` are not correctly rounded,
// subnormals may be flushed, and a Vulkan driver may contract an f32
// multiply and add into one FMA, none of which WGSL can forbid. The host
// reference (`keel::random::reference`) follows the same steps in Rust.

// The high word of a * b less at most 2: the product of the low halves
// and the carries of the cross products are left out, which saves a
// quarter of `mulhi` where 30 correct bits are enough.
fn mulhi_t(a: u32, b: u32) -> u32 {
    let a1 = a >> 16u;
    let b1 = b >> 16u;
    return a1 * b1 + ((a1 * (b & 0xffffu)) >> 16u) + (((a & 0xffffu) * b1) >> 16u);
}

// A positive number m * 2^e with 31 or 32 significant bits (m's top bit
// set); zero has m = 0.
struct Wide {
    m: u32,
    e: i32,
}

// x * 2^e, normalised.
fn wide(x: u32, e: i32) -> Wide {
    if x == 0u {
        return Wide(0u, 0);
    }
    let z = countLeadingZeros(x);
    return Wide(x << z, e - i32(z));
}

// a * b, truncated.
fn wide_mul(a: Wide, b: Wide) -> Wide {
    let hi = mulhi_t(a.m, b.m);
    if (hi >> 31u) == 0u {
        return Wide(hi << 1u, a.e + b.e + 31);
    }
    return Wide(hi, a.e + b.e + 32);
}

// a + b, truncated.
fn wide_add(a: Wide, b: Wide) -> Wide {
    if b.m == 0u {
        return a;
    }
    if a.m == 0u {
        return b;
    }
    var x = a;
    var y = b;
    if y.e > x.e {
        x = b;
        y = a;
    }
    let d = u32(x.e - y.e);
    if d >= 32u {
        return x;
    }
    let sum = x.m + (y.m >> d);
    if sum < x.m {
        return Wide((sum >> 1u) | 0x80000000u, x.e + 1);
    }
    return Wide(sum, x.e);
}

// x - y for x > y, truncated.
fn wide_sub(x: Wide, y: Wide) -> Wide {
    if y.m == 0u {
        return x;
    }
    let d = u32(x.e - y.e);
    if d >= 32u {
        return x;
    }
    return wide(x.m - (y.m >> d), x.e);
}

// The bits of the f32 nearest a positive w in f32's normal range (ties to
// even); zero for zero.
fn wide_bits(w: Wide) -> u32 {
    if w.m == 0u {
        return 0u;
    }
    var q = w.m >> 8u;
    let rest = w.m & 0xffu;
    if rest > 0x80u || (rest == 0x80u && (q & 1u) == 1u) {
        q += 1u;
    }
    // q * 2^(e + 8) with q in [2^23, 2^24]: q's leading bit adds one to
    // the exponent field (and a carry to 2^24 adds one more).
    return (u32(w.e + 157) << 23u) + q;
}

// -ln(a * 2^-24) for a in [1, 2^24]: with a = f * 2^k and f in
// [0.6875, 1.375), -ln = (24 - k) ln 2 - 2 atanh(s), s = (f - 1) / (f + 1)
// = (a - 2^k) / (a + 2^k), an exact ratio of integers (so a close to 2^24,
// where the result is tiny, keeps its relative accuracy).
fn neg_log(a: u32) -> Wide {
    var k = 31u - countLeadingZeros(a);
    var p = 1u << k;
    if 8u * (a - p) >= 3u * p {
        k += 1u;
        p <<= 1u;
    }
    let d = a + p;
    let neg = a < p;
    let n = select(a - p, p - a, neg);
    var t = Wide(0u, 0);
    if n != 0u {
        // s = n / d through 1/d: d normalised to D in [1/2, 1), 1/D from
        // the line 48/17 - 32/17 D (within 1/17) and three Newton steps
        // R (2 - D R) in Q2.30 (about 29 correct bits).
        let cd = countLeadingZeros(d);
        let dn = d << cd;
        var rcp = 3031741621u - mulhi_t(dn, 2021161081u);
        for (var i = 0u; i < 3u; i++) {
            rcp = mulhi_t(rcp, 0x80000000u - mulhi_t(dn, rcp)) << 2u;
        }
        let s = wide_mul(wide(n, 0), wide(rcp, i32(cd) - 62));
        // s^2 as a Q0.32 fraction (|s| < 0.186), and
        // atanh(s) / s = 1 + s^2/3 + ... + s^12/13 in Q2.30.
        let s2 = wide_mul(s, s);
        let shift = -32 - s2.e;
        var w = 0u;
        if shift < 32 {
            w = s2.m >> u32(shift);
        }
        var poly = 82595525u;
        poly = 97612893u + mulhi_t(poly, w);
        poly = 119304647u + mulhi_t(poly, w);
        poly = 153391689u + mulhi_t(poly, w);
        poly = 214748365u + mulhi_t(poly, w);
        poly = 357913941u + mulhi_t(poly, w);
        poly = 1073741824u + mulhi_t(poly, w);
        t = wide_mul(s, wide(poly, -30));
        t.e += 1;
    }
    let whole = 24u - k;
    if whole == 0u {
        return t;
    }
    let base = wide_mul(wide(whole, 0), Wide(0xB17217F8u, -32));
    if neg {
        return wide_add(base, t);
    }
    return wide_sub(base, t);
}

// sqrt(x): 1/sqrt(v) of the mantissa v in [1/4, 1) from the chord over
// its half of the range, three Newton steps in Q2.30 (each at most the
// true value, so nothing overflows), then v * (1/sqrt(v)).
fn wide_sqrt(x: Wide) -> Wide {
    if x.m == 0u {
        return x;
    }
    var m = x.m;
    var e = x.e;
    if (e & 1) != 0 {
        m >>= 1u;
        e += 1;
    }
    var y: u32;
    if m >= 0x80000000u {
        y = 1963258676u - mulhi_t(m, 889516852u);
    } else {
        y = 2776467046u - mulhi_t(m, 2515933592u);
    }
    for (var i = 0u; i < 3u; i++) {
        let vy2 = mulhi_t(m, mulhi_t(y, y));
        y = mulhi_t(y, (3u << 28u) - vy2) << 3u;
    }
    return wide(mulhi_t(m, y), (e + 32) / 2 - 30);
}

// Box-Muller on a pair of words, as f32 bits: r cos t and r sin t with
// r = sqrt(-2 ln u1), u1 = 1 - (x0's low 24 bits) 2^-24 in (0, 1], and
// t = 2 pi u2, u2 = (x1's low 24 bits) 2^-24. t is reduced to the nearest
// quarter turn exactly (integers), leaving |phi| <= pi/4 for the series.
fn box_muller(x0: u32, x1: u32) -> vec2<u32> {
    var two_l = neg_log(0x1000000u - (x0 & 0xffffffu));
    two_l.e += 1;
    let r = wide_sqrt(two_l);
    let m1 = x1 & 0xffffffu;
    let turn = (m1 + 0x200000u) >> 22u;
    let y = i32(m1) - i32(turn << 22u);
    let phi = wide_mul(wide(u32(abs(y)), -24), Wide(0xC90FDAA2u, -29));
    // phi, phi^2 and phi^4 as Q0.32 fractions, the series in Q1.31.
    let shift = -32 - phi.e;
    var f = 0u;
    if phi.m != 0u && shift < 32 {
        f = phi.m >> u32(shift);
    }
    let w = mulhi_t(f, f);
    let v = mulhi_t(w, w);
    // sin(phi) / phi and cos(phi), as even and odd parts in phi^2 (every
    // coefficient positive, so the sums stay unsigned).
    let sin_even = 0x80000000u + mulhi_t(v, 17895697u + mulhi_t(v, 5918u));
    let sin_odd = 357913941u + mulhi_t(v, 426088u + mulhi_t(v, 54u));
    let cos_even = 0x80000000u + mulhi_t(v, 89478485u + mulhi_t(v, 53261u));
    let cos_odd = 1073741824u + mulhi_t(v, 2982616u + mulhi_t(v, 592u));
    let sin_phi = wide_mul(phi, wide(sin_even - mulhi_t(w, sin_odd), -31));
    let cos_phi = wide(cos_even - mulhi_t(w, cos_odd), -31);
    // t = quarter * pi/2 + phi.
    let quarter = turn & 3u;
    let sn = select(0u, 1u, y < 0);
    var cm = cos_phi;
    var sm = sin_phi;
    var c_neg = 0u;
    var s_neg = sn;
    if quarter == 1u {
        cm = sin_phi;
        sm = cos_phi;
        c_neg = sn ^ 1u;
        s_neg = 0u;
    } else if quarter == 2u {
        c_neg = 1u;
        s_neg = sn ^ 1u;
    } else if quarter == 3u {
        cm = sin_phi;
        sm = cos_phi;
        c_neg = sn;
        s_neg = 1u;
    }
    let c = wide_bits(wide_mul(r, cm));
    let s = wide_bits(wide_mul(r, sm));
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
    let s = bitcast<f32>(spread);
    let p = min(s * bitcast<f32>(z), abs(s) * 8.0);
    let sum = bitcast<u32>(bitcast<f32>(mean) + p);
    let normal_in = ((mean & 0x7fffffffu) == 0u || ((mean >> 23u) & 0xffu) - 1u < 254u)
        && ((spread >> 23u) & 0xffu) - 1u < 254u
        && ((z >> 23u) & 0xffu) - 1u < 254u;
    if normal_in && clear_of_subnormals(bitcast<u32>(p)) && clear_of_subnormals(sum) {
        return sum;
    }
    return f32_add(mean, f32_mul(spread, z));
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

// The same for randn (op 2) and normal_ (op 4): one Box-Muller gives a
// pair of positions. Loops rather than repeated calls keep one copy of
// the integer code in the kernel (each call is inlined).
fn run_normal(op: u32, gid: vec3<u32>, groups: vec3<u32>, size: vec3<u32>) {
    let me = linear(gid, groups, size);
    let blocks = block_count();
    for (var k = me.x; k < blocks; k += me.y) {
        let words = block(k);
        // Constant components only: a dynamic index would keep `values`
        // in memory on the host backends.
        var values: vec4<u32>;
        for (var j = 0u; j < 2u; j++) {
            let pair = select(words.xy, words.zw, j == 1u);
            var z = box_muller(pair.x, pair.y);
            if op == 4u {
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

// Stores block k's values at the positions this launch covers.
fn store(k: u32, values: vec4<u32>) {
    let skip = params.off_lo & 3u;
    for (var lane = 0u; lane < 4u; lane++) {
        let pos = 4u * k + lane;
        if pos >= skip && pos - skip < params.n {
            out[pos - skip] = values[lane];
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
fn philox_randint(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    run(5u, gid, groups, vec3<u32>(256u, 1u, 1u));
}
