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
    var acc = 0.0;
    var i = wg.x * 256u + t;
    loop {
        if i >= n {
            break;
        }
        acc += x[i];
        if n - i <= stride {
            break;
        }
        i += stride;
    }
    let partial = subgroupAdd(acc);
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
