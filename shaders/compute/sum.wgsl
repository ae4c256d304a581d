// One level of a sum: out[g] = the sum of the elements x[i], i < n, with
// i = 256 g + t + 256 G j (G = `groups`, the grid's size), for workgroup
// g. Each invocation t adds its elements, then the workgroup adds its 256
// sums in a tree in workgroup memory. Launched twice: per-workgroup
// partials, then one workgroup over the partials.
// Bindings: 0 x (read), 1 out (read_write), 2 params (uniform).
// Launch: workgroups of 256, a grid of `groups` x 1 x 1.

struct Params {
    n: u32,
    groups: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

var<workgroup> scratch: array<f32, 256>;

@compute @workgroup_size(256)
fn sum_shared(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
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
    scratch[t] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if t < s {
            scratch[t] += scratch[t + s];
        }
        workgroupBarrier();
    }
    if t == 0u {
        out[wg.x] = scratch[0];
    }
}
