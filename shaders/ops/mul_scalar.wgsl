// out[i] = x[i] * s for i < n (f32). An operator kernel of Keel's
// dispatcher (`mul` with a scalar, on Vulkan and wgpu).
// Bindings: 0 x (read), 1 out (read_write), 2 params (uniform).
// Launch: as add.wgsl (256 per workgroup, 2-D grid).

struct Params {
    n: u32,
    s: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn mul_scalar_f32(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = gid.y * groups.x * 256u + gid.x;
    if i < params.n {
        out[i] = x[i] * params.s;
    }
}
