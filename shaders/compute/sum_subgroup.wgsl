// One level of a sum, as sum.wgsl, with the workgroup's 256 sums added by
// subgroupAdd and then one value per subgroup in workgroup memory. Needs
// the device's subgroup operations (wgpu's `Features::SUBGROUP`, Vulkan
// subgroup arithmetic in compute shaders); sum.wgsl is the fallback.
// Bindings: 0 x (read), 1 out (read_write), 2 params (uniform).
// Launch: workgroups of 256, a grid of `groups` x 1 x 1.

// No `enable subgroups;`: naga 30 rejects the directive ("not yet
// supported") and accepts the subgroup built-ins without it, under its
// SUBGROUP capability (wgpu: `Features::SUBGROUP`).

struct Params {
    n: u32,
    groups: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

// One slot per subgroup (256 covers subgroups of a single invocation).
var<workgroup> scratch: array<f32, 256>;

@compute @workgroup_size(256)
fn sum_subgroup(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
    let n = params.n;
    let stride = params.groups * 256u;
    // This invocation's elements: i, i + stride, ... below n.
    var i = wg.x * 256u + t;
    var count = 0u;
    if i < n {
        count = (n - 1u - i) / stride + 1u;
    }
    // Four loads per step, into four sums: a GPU keeps the four loads in
    // flight together, where one chain of adds would wait on each load in
    // turn and leave the memory idle. Every index read is below n, so
    // none wraps (a step's last is an element); i may wrap after the
    // last step, when nothing reads it.
    var acc = vec4<f32>(0.0);
    let whole = count & ~3u;
    for (var k = 0u; k < whole; k += 4u) {
        acc += vec4<f32>(x[i], x[i + stride], x[i + 2u * stride], x[i + 3u * stride]);
        i += 4u * stride;
    }
    for (var k = whole; k < count; k++) {
        acc.x += x[i];
        i += stride;
    }
    let sum4 = (acc.x + acc.y) + (acc.z + acc.w);
    let partial = subgroupAdd(sum4);
    if lane == 0u {
        scratch[subgroup] = partial;
    }
    workgroupBarrier();
    if t == 0u {
        var total = 0.0;
        for (var s = 0u; s < subgroups; s++) {
            total += scratch[s];
        }
        out[wg.x] = total;
    }
}
