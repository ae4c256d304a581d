@group(0) @binding(0) var<storage, read_write> counters: array<atomic<u32>, 4>;
@group(0) @binding(1) var<storage, read_write> signed: array<atomic<i32>, 2>;
var<workgroup> local_count: atomic<u32>;
@compute @workgroup_size(64)
fn atomics(@builtin(global_invocation_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
    atomicAdd(&counters[0], 1u);
    atomicMax(&counters[1], g.x);
    atomicOr(&counters[2], 1u << (g.x % 32u));
    atomicMin(&signed[0], -i32(g.x));
    atomicAdd(&local_count, 2u);
    workgroupBarrier();
    if l == 0u {
        atomicAdd(&counters[3], atomicLoad(&local_count));
    }
    let r = atomicCompareExchangeWeak(&signed[1], 0, 7);
    if r.exchanged && r.old_value != 0 { atomicAdd(&counters[0], 1000000u); }
}
