@group(0) @binding(0) var<storage, read_write> out: array<u32>;
struct P { a: f32, b: i32, c: u32 }
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(1)
fn scalars() {
    let v = vec3<f32>(p.a, 2.0, -0.5);
    let w = v.zyx * 2.0 + vec3(1.0);
    out[0] = bitcast<u32>(w.x);
    out[1] = bitcast<u32>(w.z);
    out[2] = bitcast<u32>(dot(v, vec3(1.0, 1.0, 1.0)));
    let i = vec2<i32>(p.b, -7);
    out[3] = bitcast<u32>(i.x * i.y);
    out[4] = bitcast<u32>(i.y / 2);
    out[5] = bitcast<u32>(i.y % 2);
    out[6] = p.c >> 3u;
    out[7] = select(0u, 1u, all(v.xy > vec2(0.0)));
    out[8] = u32(f32(p.c) * 0.5);
    out[9] = bitcast<u32>(f32(i.y));
    let m = mat2x2<f32>(1.0, 2.0, 3.0, 4.0);
    let mv = m * vec2(1.0, 10.0);
    out[10] = bitcast<u32>(mv.x);
    out[11] = bitcast<u32>(mv.y);
}
