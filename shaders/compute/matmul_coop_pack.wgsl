// matmul_coop's packing pass: a copy of A or B rounded to f16 (each value
// once, by keel_round_f16, the rounding of every kernel) and stored as
// f16, row-major, `dst_rows` x `dst_cols` (the matrix padded with zeros
// to whole tiles: rows and columns of 64, k to 32), which the
// cooperative-matrix loads then read with no bounds to test.
// Bindings: 0 src (f32, `rows` x `cols`, row-major, read), 1 dst (f16,
// write), 2 params (uniform; `last` is not read: the launch code passes
// the matmul mode there). Source order: this file (its `enable` comes
// first), rounding.wgsl.
// Launch: workgroups of 256 invocations, each writing 8 consecutive
// elements of dst; a grid of ceil(dst_rows dst_cols / 2048) along x.

enable f16;

struct PackParams {
    rows: u32,
    cols: u32,
    dst_rows: u32,
    dst_cols: u32,
    last: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f16>;
@group(0) @binding(2) var<uniform> params: PackParams;

@compute @workgroup_size(256)
fn matmul_coop_pack(@builtin(global_invocation_id) gid: vec3<u32>) {
    let total = params.dst_rows * params.dst_cols;
    for (var j = 0u; j < 8u; j++) {
        let e = gid.x * 8u + j;
        if e >= total {
            return;
        }
        let r = e / params.dst_cols;
        let col = e % params.dst_cols;
        var v = 0.0;
        if r < params.rows && col < params.cols {
            v = keel_round_f16(src[r * params.cols + col]);
        }
        dst[e] = f16(v);
    }
}
