// A deliberately slow kernel: every invocation i < n iterates a
// dependent chain `iters` times and stores the result in out[i]. Used to
// make work that takes a while (stream overlap demos, "not yet complete"
// checks). The chain is x <- x * 0.999 + 1.0, starting at x = f32(i); the
// host reference computes the same sequence.
// Bindings: 0 out (read_write), 1 params (uniform).

struct Params {
    n: u32,
    iters: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(64)
fn spin(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < params.n {
        var x = f32(i);
        for (var k = 0u; k < params.iters; k = k + 1u) {
            x = x * 0.999 + 1.0;
        }
        out[i] = x;
    }
}
