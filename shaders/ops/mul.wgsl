// out[i] = a[i] * b[i] for i < n (f32). An operator kernel of Keel's
// dispatcher (`mul` on Vulkan and wgpu).
// Bindings: 0 a (read), 1 b (read), 2 out (read_write), 3 params (uniform).
// Launch: workgroups of 256 over a 2-D grid (x up to 65535), element
// i = (group.y * groups.x + group.x) * 256 + local.x.

struct Params {
    n: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn mul_f32(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = gid.y * groups.x * 256u + gid.x;
    if i < params.n {
        out[i] = a[i] * b[i];
    }
}
