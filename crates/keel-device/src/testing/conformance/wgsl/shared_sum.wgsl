@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> sums: array<u32>;
var<workgroup> tile: array<u32, 64>;
@compute @workgroup_size(64)
fn shared_sum(@builtin(local_invocation_index) l: u32, @builtin(workgroup_id) w: vec3<u32>) {
    tile[l] = x[w.x * 64u + l];
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if l < s { tile[l] += tile[l + s]; }
        workgroupBarrier();
    }
    if l == 0u { sums[w.x] = tile[0]; }
}
