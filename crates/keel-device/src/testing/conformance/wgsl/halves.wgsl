enable f16;
@group(0) @binding(0) var<storage, read> x: array<f16>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(8)
fn halves(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if i >= arrayLength(&x) { return; }
    let h = x[i] * 2.0h + 0.5h;
    out[i] = f32(h);
}
