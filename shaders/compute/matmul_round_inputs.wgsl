// The input-rounding pass of the GPU-shaped tiled matmul: copies of A and
// B with each value rounded once to the mode's input format (keel_round_to,
// the rounding of every kernel), which matmul_tiled_4x4 then multiplies
// as plain f32. Staging the rounding instead makes every workgroup that
// stages an element round it again (n / 64 workgroups for an element of
// A, m / 64 for one of B) and puts the rounding on the path between each
// tile's loads and its barrier; this pass rounds each element once, at
// the cost of one read and one write of A and B.
// Bindings: 0 a (read), 1 b (read), 2 a_out (read_write), 3 b_out
// (read_write), 4 params (uniform): the lengths of A and B, in elements,
// and the input format (rounding.wgsl's codes). Source order:
// rounding.wgsl, this file.
// Launch: workgroups of 256 over a 2-D grid (x up to 65535); element
// i = (group.y * groups.x + group.x) * 256 + local.x of A's elements
// followed by B's, one per invocation.

struct RoundParams {
    len_a: u32,
    len_b: u32,
    format: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> a_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> b_out: array<f32>;
@group(0) @binding(4) var<uniform> params: RoundParams;

@compute @workgroup_size(256)
fn matmul_round_inputs(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = gid.y * groups.x * 256u + gid.x;
    if i < params.len_a {
        a_out[i] = keel_round_to(a[i], params.format);
    } else if i - params.len_a < params.len_b {
        let j = i - params.len_a;
        b_out[j] = keel_round_to(b[j], params.format);
    }
}
