// C = A * B with workgroup-memory tiles. A is m x k, B is k x n, C is
// m x n, f32, row-major; any m, k, n >= 1.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform),
// declared in matmul_bindings.wgsl, which the launch code prepends.
// Launch: workgroups of 8 x 8 invocations, each workgroup computing a
// 64 x 64 tile of C and each invocation an 8 x 8 block of it (rows
// 8 ly .. 8 ly + 7, columns 8 lx .. 8 lx + 7) in registers; a grid of
// ceil(n / 64) x ceil(m / 64). Each step stages a 64 x 32 tile of A
// (transposed: step major) and a 32 x 64 tile of B in workgroup memory
// as vec4s, zeros outside the matrices (loaded branch-free: a clamped
// index, then a select). One step of k is then 4 vec4 loads from
// workgroup memory and 64 multiply-adds per invocation (naive: two loads
// from storage per multiply-add), and every element loaded from storage
// is used 64 times.
//
// Written for lavapipe/llvmpipe (invocations are SIMD lanes; Mesa 22.3
// loads and stores workgroup memory lane by lane, one loop per load
// instruction whatever its width), as measured in docs/BENCHMARKS.md:
// vec4 tiles (one lane loop per 4 values), 32 steps of k per barrier,
// and only constant indices into the private accumulator arrays (every
// loop over them written out): a dynamic index keeps the arrays in
// memory, accessed lane by lane, and that alone cost 1.5x. A branch on
// the mode inside the k loop cost plain f32 1.3x though never taken, so
// plain f32 and the accumulator and split-K modes have a k loop each (and
// the split-K loop one inner loop per accumulator format); a mode that
// only rounds inputs takes the plain loop, its inputs rounded once as
// they are staged.
//
// Precision: `mode` packs three format codes (see rounding.wgsl): bits
// 0-3 round the inputs, bits 4-7 round the accumulator after every add,
// bits 8-11 round the split-K partial sums: the running sum over k is
// cut every `chunk` (a multiple of 16; 0 = k) steps (checked every 16 steps), and the chunks'
// sums are added, rounded, into the result. Mode 0 is plain f32.

const TILE: u32 = 64u;
const BK: u32 = 32u;

// tile_a[16 kk + q]: rows 4 q .. 4 q + 3 of the A tile at step kk.
var<workgroup> tile_a: array<vec4<f32>, 512>;
// tile_b[16 kk + q]: columns 4 q .. 4 q + 3 of the B tile at step kk.
var<workgroup> tile_b: array<vec4<f32>, 512>;

fn load_a(row: u32, col: u32) -> f32 {
    let m = params.m;
    let k = params.k;
    let inside = (row < m) & (col < k);
    return select(0.0, a[min(row, m - 1u) * k + min(col, k - 1u)], inside);
}

fn load_b(row: u32, col: u32) -> f32 {
    let k = params.k;
    let n = params.n;
    let inside = (row < k) & (col < n);
    return select(0.0, b[min(row, k - 1u) * n + min(col, n - 1u)], inside);
}

// Stages step tile k0 .. k0 + 31 of A and B (rounded to f_in) for the
// workgroup at (row0, col0); li: the invocation's index.
fn stage(k0: u32, row0: u32, col0: u32, li: u32, f_in: u32) {
    for (var s = 0u; s < 8u; s++) {
        let idx = li + 64u * s;
        let kk = idx / 16u;
        let q = idx % 16u;
        var va = vec4<f32>(
            load_a(row0 + 4u * q, k0 + kk),
            load_a(row0 + 4u * q + 1u, k0 + kk),
            load_a(row0 + 4u * q + 2u, k0 + kk),
            load_a(row0 + 4u * q + 3u, k0 + kk),
        );
        let bc = col0 + 4u * q;
        var vb = vec4<f32>(
            load_b(k0 + kk, bc),
            load_b(k0 + kk, bc + 1u),
            load_b(k0 + kk, bc + 2u),
            load_b(k0 + kk, bc + 3u),
        );
        if f_in != 0u {
            va = keel_round4(va, f_in);
            vb = keel_round4(vb, f_in);
        }
        tile_a[idx] = va;
        tile_b[idx] = vb;
    }
}

fn store4(row: u32, col: u32, v: vec4<f32>) {
    let n = params.n;
    if row >= params.m {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if col + j < n {
            c[row * n + col + j] = v[j];
        }
    }
}

@compute @workgroup_size(8, 8)
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
    let f_in = params.mode & 15u;
    let f_acc = (params.mode >> 4u) & 15u;
    let f_red = (params.mode >> 8u) & 15u;
    let plain = f_acc == 0u && f_red == 0u;
    let tiles = (k + BK - 1u) / BK;
    let chunk = select(params.chunk, tiles * BK, params.chunk == 0u);
    // acc[2 r + h]: the chunk's partial sums of row r, columns 4 h .. 4 h + 3
    // of this invocation's block; tot: the totals.
    var acc: array<vec4<f32>, 16>;
    var tot: array<vec4<f32>, 16>;
    // Two loops rather than a branch inside one (see the top).
    if plain {
        for (var t = 0u; t < tiles; t++) {
            stage(t * BK, row0, col0, li, f_in);
            workgroupBarrier();
            for (var i = 0u; i < BK; i++) {
                let a0 = tile_a[i * 16u + 2u * lid.y];
                let a1 = tile_a[i * 16u + 2u * lid.y + 1u];
                let b0 = tile_b[i * 16u + 2u * lid.x];
                let b1 = tile_b[i * 16u + 2u * lid.x + 1u];
                acc[0] += a0.x * b0;
                acc[1] += a0.x * b1;
                acc[8] += a1.x * b0;
                acc[9] += a1.x * b1;
                acc[2] += a0.y * b0;
                acc[3] += a0.y * b1;
                acc[10] += a1.y * b0;
                acc[11] += a1.y * b1;
                acc[4] += a0.z * b0;
                acc[5] += a0.z * b1;
                acc[12] += a1.z * b0;
                acc[13] += a1.z * b1;
                acc[6] += a0.w * b0;
                acc[7] += a0.w * b1;
                acc[14] += a1.w * b0;
                acc[15] += a1.w * b1;
            }
            workgroupBarrier();
        }
        tot = acc;
    } else {
        for (var t = 0u; t < tiles; t++) {
            let k0 = t * BK;
            stage(k0, row0, col0, li, f_in);
            workgroupBarrier();
            // Two halves of 16 steps: split-K cuts fall on multiples of 16.
            for (var h = 0u; h < 2u; h++) {
                // f32 accumulation (the split-K modes): the plain sums, so
                // that no rounding call sits in the k loop.
                if f_acc == 0u {
                    for (var i = 16u * h; i < 16u * h + 16u; i++) {
                        let a0 = tile_a[i * 16u + 2u * lid.y];
                        let a1 = tile_a[i * 16u + 2u * lid.y + 1u];
                        let b0 = tile_b[i * 16u + 2u * lid.x];
                        let b1 = tile_b[i * 16u + 2u * lid.x + 1u];
                        acc[0] += a0.x * b0;
                        acc[1] += a0.x * b1;
                        acc[8] += a1.x * b0;
                        acc[9] += a1.x * b1;
                        acc[2] += a0.y * b0;
                        acc[3] += a0.y * b1;
                        acc[10] += a1.y * b0;
                        acc[11] += a1.y * b1;
                        acc[4] += a0.z * b0;
                        acc[5] += a0.z * b1;
                        acc[12] += a1.z * b0;
                        acc[13] += a1.z * b1;
                        acc[6] += a0.w * b0;
                        acc[7] += a0.w * b1;
                        acc[14] += a1.w * b0;
                        acc[15] += a1.w * b1;
                    }
                } else {
                    for (var i = 16u * h; i < 16u * h + 16u; i++) {
                        let a0 = tile_a[i * 16u + 2u * lid.y];
                        let a1 = tile_a[i * 16u + 2u * lid.y + 1u];
                        let b0 = tile_b[i * 16u + 2u * lid.x];
                        let b1 = tile_b[i * 16u + 2u * lid.x + 1u];
                        acc[0] = keel_round4(acc[0] + a0.x * b0, f_acc);
                        acc[1] = keel_round4(acc[1] + a0.x * b1, f_acc);
                        acc[8] = keel_round4(acc[8] + a1.x * b0, f_acc);
                        acc[9] = keel_round4(acc[9] + a1.x * b1, f_acc);
                        acc[2] = keel_round4(acc[2] + a0.y * b0, f_acc);
                        acc[3] = keel_round4(acc[3] + a0.y * b1, f_acc);
                        acc[10] = keel_round4(acc[10] + a1.y * b0, f_acc);
                        acc[11] = keel_round4(acc[11] + a1.y * b1, f_acc);
                        acc[4] = keel_round4(acc[4] + a0.z * b0, f_acc);
                        acc[5] = keel_round4(acc[5] + a0.z * b1, f_acc);
                        acc[12] = keel_round4(acc[12] + a1.z * b0, f_acc);
                        acc[13] = keel_round4(acc[13] + a1.z * b1, f_acc);
                        acc[6] = keel_round4(acc[6] + a0.w * b0, f_acc);
                        acc[7] = keel_round4(acc[7] + a0.w * b1, f_acc);
                        acc[14] = keel_round4(acc[14] + a1.w * b0, f_acc);
                        acc[15] = keel_round4(acc[15] + a1.w * b1, f_acc);
                    }
                }
                // Cut at a chunk's end and after the half holding step k - 1.
                let end = k0 + 16u * h + 16u;
                if end % chunk == 0u || (end >= k && end < k + 16u) {
                    tot[0] = keel_round4(tot[0] + keel_round4(acc[0], f_red), f_red);
                    tot[1] = keel_round4(tot[1] + keel_round4(acc[1], f_red), f_red);
                    tot[2] = keel_round4(tot[2] + keel_round4(acc[2], f_red), f_red);
                    tot[3] = keel_round4(tot[3] + keel_round4(acc[3], f_red), f_red);
                    tot[4] = keel_round4(tot[4] + keel_round4(acc[4], f_red), f_red);
                    tot[5] = keel_round4(tot[5] + keel_round4(acc[5], f_red), f_red);
                    tot[6] = keel_round4(tot[6] + keel_round4(acc[6], f_red), f_red);
                    tot[7] = keel_round4(tot[7] + keel_round4(acc[7], f_red), f_red);
                    tot[8] = keel_round4(tot[8] + keel_round4(acc[8], f_red), f_red);
                    tot[9] = keel_round4(tot[9] + keel_round4(acc[9], f_red), f_red);
                    tot[10] = keel_round4(tot[10] + keel_round4(acc[10], f_red), f_red);
                    tot[11] = keel_round4(tot[11] + keel_round4(acc[11], f_red), f_red);
                    tot[12] = keel_round4(tot[12] + keel_round4(acc[12], f_red), f_red);
                    tot[13] = keel_round4(tot[13] + keel_round4(acc[13], f_red), f_red);
                    tot[14] = keel_round4(tot[14] + keel_round4(acc[14], f_red), f_red);
                    tot[15] = keel_round4(tot[15] + keel_round4(acc[15], f_red), f_red);
                    acc = array<vec4<f32>, 16>();
                }
            }
            workgroupBarrier();
        }
    }
    let r0 = row0 + 8u * lid.y;
    let c0 = col0 + 8u * lid.x;
    store4(r0 + 0u, c0, tot[0]);
    store4(r0 + 0u, c0 + 4u, tot[1]);
    store4(r0 + 1u, c0, tot[2]);
    store4(r0 + 1u, c0 + 4u, tot[3]);
    store4(r0 + 2u, c0, tot[4]);
    store4(r0 + 2u, c0 + 4u, tot[5]);
    store4(r0 + 3u, c0, tot[6]);
    store4(r0 + 3u, c0 + 4u, tot[7]);
    store4(r0 + 4u, c0, tot[8]);
    store4(r0 + 4u, c0 + 4u, tot[9]);
    store4(r0 + 5u, c0, tot[10]);
    store4(r0 + 5u, c0 + 4u, tot[11]);
    store4(r0 + 6u, c0, tot[12]);
    store4(r0 + 6u, c0 + 4u, tot[13]);
    store4(r0 + 7u, c0, tot[14]);
    store4(r0 + 7u, c0 + 4u, tot[15]);
}
