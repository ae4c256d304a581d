@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn subgroups(@builtin(local_invocation_index) l: u32,
             @builtin(subgroup_size) size: u32,
             @builtin(subgroup_invocation_id) lane: u32) {
    let total = subgroupAdd(1u);
    let first = subgroupBroadcastFirst(lane);
    let b = subgroupBallot(true);
    let ones = countOneBits(b.x) + countOneBits(b.y) + countOneBits(b.z) + countOneBits(b.w);
    let up = subgroupExclusiveAdd(1u);
    let xor = subgroupShuffleXor(lane, 1u);
    let ok = total == size && first == 0u && ones == size && up == lane && xor == (lane ^ 1u)
        && subgroupAll(true) && !subgroupAny(false) && subgroupMax(lane) == size - 1u;
    out[l] = select(0u, 1u, ok);
}
