@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> small: array<u32, 4>;
struct P { zero: u32, big: f32, minus_one: i32, shift: u32 }
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(1)
fn semantics() {
    let m = i32(-2147483647 - 1);
    out[0] = 7u / p.zero;
    out[1] = 7u % p.zero;
    out[2] = bitcast<u32>(m / p.minus_one);
    out[3] = bitcast<u32>(m % p.minus_one);
    out[4] = bitcast<u32>(-9 / i32(p.zero));
    out[5] = 1u << p.shift;
    out[6] = 0x80000000u >> p.shift;
    out[7] = bitcast<u32>(i32(p.big));
    out[8] = u32(-p.big);
    out[9] = bitcast<u32>(i32(-p.big));
    out[10] = u32(p.big);
    out[11] = bitcast<u32>((p.big / 4e8) % -2.0);
    let idx = p.shift + 100u;
    small[idx] = 0xdeadu;
    out[12] = small[idx];
}
