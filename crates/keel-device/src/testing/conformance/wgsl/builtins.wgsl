@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(4, 2, 1)
fn builtins(@builtin(global_invocation_id) g: vec3<u32>,
            @builtin(local_invocation_id) l: vec3<u32>,
            @builtin(local_invocation_index) li: u32,
            @builtin(workgroup_id) w: vec3<u32>,
            @builtin(num_workgroups) n: vec3<u32>) {
    let width = n.x * 4u;
    let at = (g.y * width + g.x) * 2u;
    out[at] = li + 16u * (w.x + 16u * w.y);
    out[at + 1u] = l.x + 16u * l.y + 256u * n.y;
}
