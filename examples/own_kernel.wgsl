// Your own kernel, once: out[i] = x[i] > 0 ? x[i] : x[i] * slope, for i < n.
// Bindings: 0 x (read), 1 out (read_write), 2 params (uniform).

struct Params {
    n: u32,
    slope: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn leaky_relu(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < params.n {
        let v = x[i];
        out[i] = select(v * params.slope, v, v > 0.0);
    }
}
