// C = A * B, plain f32, for GPUs. A is m x k, B is k x n, C is m x n,
// f32, row-major; any m, k, n >= 1.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform;
// `mode` and `chunk` are not read: the launch code passes plain f32 only).
// Launch: workgroups of 16 x 16 invocations, each workgroup computing a
// 64 x 64 tile of C and each invocation a 4 x 4 block of it (rows
// 4 ly .. 4 ly + 3, columns 4 lx .. 4 lx + 3); a grid of ceil(n / 64) x
// ceil(m / 64).
//
// matmul_tiled.wgsl (64 invocations of 8 x 8 outputs) is shaped for
// lavapipe, whose invocations are SIMD lanes of a CPU thread. A GPU hides
// the latency of its loads behind other warps and wants more invocations
// per workgroup: 64-invocation workgroups left an H200 with 4 warps per
// SM (docs/BENCHMARKS.md). Here each step of 16 along k stages a 64 x 16
// tile of A, transposed (step major, rows padded to 68 floats = 17 vec4s
// so that the transposing stores spread over the banks), and a 16 x 64
// tile of B in workgroup memory, zeros outside the matrices, each
// invocation loading 4 elements of each with neighbours on neighbouring
// addresses. One step of k is then two vec4 loads and 16 multiply-adds.
// The twin of matmul_tiled_4x4.ptx; plain f32 summed over k in order, as
// every matmul kernel of Keel's.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    mode: u32,
    chunk: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

// tile_a[17 step + q]: rows 4 q .. 4 q + 3 of the A tile at that step
// (q = 16 is padding).
var<workgroup> tile_a: array<vec4<f32>, 272>;
// tile_b[16 step + q]: columns 4 q .. 4 q + 3 of the B tile at that step.
var<workgroup> tile_b: array<vec4<f32>, 256>;

fn store_row(row: u32, col: u32, v: vec4<f32>) {
    let n = params.n;
    if row >= params.m {
        return;
    }
    let i = row * n + col;
    if col + 3u < n {
        c[i] = v.x;
        c[i + 1u] = v.y;
        c[i + 2u] = v.z;
        c[i + 3u] = v.w;
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if col + j < n {
            c[i + j] = v[j];
        }
    }
}

@compute @workgroup_size(16, 16)
fn matmul_tiled_4x4(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = params.m;
    let k = params.k;
    let n = params.n;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    // Staging: A's element s of this invocation is row (li / 16) + 16 s,
    // step li % 16 of the tile; B's is step (li / 64) + 4 s, column li % 64.
    let a_step = li % 16u;
    let a_row = row0 + li / 16u;
    let b_step = li / 64u;
    let b_col = col0 + li % 64u;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < k; k0 += 16u) {
        var va: array<f32, 4>;
        var vb: array<f32, 4>;
        for (var s = 0u; s < 4u; s++) {
            let row = a_row + 16u * s;
            let ka = k0 + a_step;
            va[s] = select(0.0, a[min(row, m - 1u) * k + min(ka, k - 1u)], row < m && ka < k);
            let kb = k0 + b_step + 4u * s;
            vb[s] = select(0.0, b[min(kb, k - 1u) * n + min(b_col, n - 1u)], kb < k && b_col < n);
        }
        for (var s = 0u; s < 4u; s++) {
            // A: row (li / 16) + 16 s of the tile is vec4 (li / 64) + 4 s,
            // component (li / 16) % 4, of step a_step.
            tile_a[17u * a_step + li / 64u + 4u * s][(li / 16u) % 4u] = va[s];
            // B: step b_step + 4 s, column li % 64.
            tile_b[16u * (b_step + 4u * s) + (li % 64u) / 4u][li % 4u] = vb[s];
        }
        workgroupBarrier();
        for (var i = 0u; i < 16u; i++) {
            let av = tile_a[17u * i + lid.y];
            let bv = tile_b[16u * i + lid.x];
            acc0 += av.x * bv;
            acc1 += av.y * bv;
            acc2 += av.z * bv;
            acc3 += av.w * bv;
        }
        workgroupBarrier();
    }
    let r0 = row0 + 4u * lid.y;
    let c0 = col0 + 4u * lid.x;
    store_row(r0, c0, acc0);
    store_row(r0 + 1u, c0, acc1);
    store_row(r0 + 2u, c0, acc2);
    store_row(r0 + 3u, c0, acc3);
}
