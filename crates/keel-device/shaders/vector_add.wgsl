// c[i] = a[i] + b[i] for i < n.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform).
// Launch: a 1-D grid of ceil(n / 256) workgroups.

struct Params {
    n: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn vector_add(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < params.n {
        c[i] = a[i] + b[i];
    }
}
