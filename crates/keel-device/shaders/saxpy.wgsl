// y[i] = alpha * x[i] + y[i] for i < n.
// Bindings: 0 x (read), 1 y (read_write), 2 params (uniform).
// Launch: a 1-D grid of ceil(n / 256) workgroups.

struct Params {
    n: u32,
    alpha: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn saxpy(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < params.n {
        y[i] = params.alpha * x[i] + y[i];
    }
}
