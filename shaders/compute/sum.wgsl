// One level of a sum: out[g] = the sum of the elements x[i], i < n, with
// i = 256 g + t + 256 G j (G = `groups`, the grid's size), for workgroup
// g. Each invocation t adds its elements (four at a time, into four
// sums), then the workgroup adds its 256
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
    scratch[t] = sum4;
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
