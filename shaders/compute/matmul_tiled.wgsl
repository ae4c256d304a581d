// C = A * B with workgroup-memory tiles. A is m x k, B is k x n, C is
// m x n, f32, row-major; any m, k, n >= 1.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform).
// Launch: workgroups of 16 x 16 invocations, each workgroup computing a
// 32 x 32 tile of C (each invocation 2 x 2 outputs, rows ly and ly + 16,
// columns lx and lx + 16); a grid of ceil(n / 32) x ceil(m / 32).
// Each step stages a 32 x 16 tile of A and a 16 x 32 tile of B in
// workgroup memory (zeros outside the matrices), so every element loaded
// from memory is used 32 times.
//
// Precision: `mode` packs three format codes (see rounding.wgsl): bits
// 0-3 round the inputs, bits 4-7 round the accumulator after every add,
// bits 8-11 round the split-K partial sums: the running sum over k is
// cut every `chunk` (a multiple of 16; 0 = k) steps, and the chunks'
// sums are added, rounded, into the result. Mode 0 is plain f32.

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

const TILE: u32 = 32u;
const BK: u32 = 16u;

var<workgroup> tile_a: array<f32, 512>; // [row][k]: 32 x 16
var<workgroup> tile_b: array<f32, 512>; // [k][col]: 16 x 32

fn store(row: u32, col: u32, v: f32) {
    if row < params.m && col < params.n {
        c[row * params.n + col] = v;
    }
}

@compute @workgroup_size(16, 16)
fn matmul_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = params.m;
    let k = params.k;
    let n = params.n;
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    let plain = params.mode == 0u;
    let f_in = params.mode & 15u;
    let f_acc = (params.mode >> 4u) & 15u;
    let f_red = (params.mode >> 8u) & 15u;
    let tiles = (k + BK - 1u) / BK;
    let chunk = select(params.chunk, tiles * BK, params.chunk == 0u);
    // Partial sums (the chunk's) and totals of the 2 x 2 outputs.
    var p00 = 0.0;
    var p01 = 0.0;
    var p10 = 0.0;
    var p11 = 0.0;
    var t00 = 0.0;
    var t01 = 0.0;
    var t10 = 0.0;
    var t11 = 0.0;
    for (var t = 0u; t < tiles; t++) {
        let k0 = t * BK;
        for (var s = 0u; s < 2u; s++) {
            let idx = li + 256u * s;
            // A: row idx / 16, column idx % 16 of the tile.
            let ar = row0 + idx / BK;
            let ak = k0 + idx % BK;
            var va = 0.0;
            if ar < m && ak < k {
                va = keel_round_to(a[ar * k + ak], f_in);
            }
            tile_a[idx] = va;
            // B: row idx / 32, column idx % 32 of the tile.
            let bk = k0 + idx / TILE;
            let bc = col0 + idx % TILE;
            var vb = 0.0;
            if bk < k && bc < n {
                vb = keel_round_to(b[bk * n + bc], f_in);
            }
            tile_b[idx] = vb;
        }
        workgroupBarrier();
        if plain {
            for (var i = 0u; i < BK; i++) {
                let a0 = tile_a[lid.y * BK + i];
                let a1 = tile_a[(lid.y + 16u) * BK + i];
                let b0 = tile_b[i * TILE + lid.x];
                let b1 = tile_b[i * TILE + lid.x + 16u];
                p00 += a0 * b0;
                p01 += a0 * b1;
                p10 += a1 * b0;
                p11 += a1 * b1;
            }
        } else {
            for (var i = 0u; i < BK; i++) {
                let a0 = tile_a[lid.y * BK + i];
                let a1 = tile_a[(lid.y + 16u) * BK + i];
                let b0 = tile_b[i * TILE + lid.x];
                let b1 = tile_b[i * TILE + lid.x + 16u];
                p00 = keel_round_to(p00 + a0 * b0, f_acc);
                p01 = keel_round_to(p01 + a0 * b1, f_acc);
                p10 = keel_round_to(p10 + a1 * b0, f_acc);
                p11 = keel_round_to(p11 + a1 * b1, f_acc);
            }
            if (k0 + BK) % chunk == 0u || t + 1u == tiles {
                t00 = keel_round_to(t00 + keel_round_to(p00, f_red), f_red);
                t01 = keel_round_to(t01 + keel_round_to(p01, f_red), f_red);
                t10 = keel_round_to(t10 + keel_round_to(p10, f_red), f_red);
                t11 = keel_round_to(t11 + keel_round_to(p11, f_red), f_red);
                p00 = 0.0;
                p01 = 0.0;
                p10 = 0.0;
                p11 = 0.0;
            }
        }
        workgroupBarrier();
    }
    if plain {
        t00 = p00;
        t01 = p01;
        t10 = p10;
        t11 = p11;
    }
    let r = row0 + lid.y;
    let cl = col0 + lid.x;
    store(r, cl, t00);
    store(r, cl + 16u, t01);
    store(r + 16u, cl, t10);
    store(r + 16u, cl + 16u, t11);
}
