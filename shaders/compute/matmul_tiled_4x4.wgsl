// C = A * B, f32 sums, for GPUs. A is m x k, B is k x n, C is m x n,
// f32, row-major; any m, k, n >= 1.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform;
// `mode`'s input format (bits 0-3) rounds each element once as it is
// staged, and its split-K format (bits 8-11) cuts the f32 running sum
// every `chunk` steps and adds the rounded chunk sums, both as
// matmul_tiled.wgsl does, so the results are the same bits; the launch
// code passes no accumulator format), declared in matmul_bindings.wgsl,
// which the launch code prepends after rounding.wgsl. Two entry points:
// `matmul_tiled_4x4` (plain f32 and input rounding; the split-K format is
// not read) and `matmul_tiled_4x4_split` (the split-K modes).
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
// so that a warp's transposing stores, 8 steps of 4 rows, fall on 32
// distinct banks), and a 16 x 64
// tile of B in workgroup memory, zeros outside the matrices, each
// invocation loading 4 elements of each with neighbours on neighbouring
// addresses. One step of k is then two vec4 loads and 16 multiply-adds.
// Plain f32 summed over k in order, as every matmul kernel of Keel's; in
// a split-K mode the sum is cut where matmul_tiled.wgsl cuts it (at the
// end of a 16-step tile that ends a chunk, and after the tile holding
// step k - 1), one branch per tile, outside the steps.

// tile_a[17 step + q]: rows 4 q .. 4 q + 3 of the A tile at that step
// (q = 16 is padding).
var<workgroup> tile_a: array<vec4<f32>, 272>;
// tile_b[16 step + q]: columns 4 q .. 4 q + 3 of the B tile at that step.
var<workgroup> tile_b: array<vec4<f32>, 256>;

// Stores a step's staged values: A's four rows at vec4s ta, ta + 4, ...
// (component tc), B's four steps at tb, tb + 64, ... (component bc).
fn stage_tiles(ta: u32, tc: u32, tb: u32, bc: u32, ra: vec4<f32>, rb: vec4<f32>) {
    tile_a[ta][tc] = ra.x;
    tile_a[ta + 4u][tc] = ra.y;
    tile_a[ta + 8u][tc] = ra.z;
    tile_a[ta + 12u][tc] = ra.w;
    tile_b[tb][bc] = rb.x;
    tile_b[tb + 64u][bc] = rb.y;
    tile_b[tb + 128u][bc] = rb.z;
    tile_b[tb + 192u][bc] = rb.w;
}

// Stores a step's staged values rounded to the input format `f_in`
// (`zero` is keel_round_f16_fast's). The format is chosen once per tile,
// and each element rounded with constant masks; each branch stores its
// own values (a store after the branches made ptxas move them into
// common registers).
fn stage_rounded(ta: u32, tc: u32, tb: u32, bc: u32, f_in: u32, zero: u32, ra: vec4<f32>, rb: vec4<f32>) {
    if f_in == 0u {
        stage_tiles(ta, tc, tb, bc, ra, rb);
    } else if f_in == 1u {
        stage_tiles(ta, tc, tb, bc, keel_round_mantissa4(ra, 13u), keel_round_mantissa4(rb, 13u));
    } else if f_in == 2u {
        stage_tiles(ta, tc, tb, bc, keel_round_mantissa4(ra, 16u), keel_round_mantissa4(rb, 16u));
    } else {
        stage_tiles(ta, tc, tb, bc, keel_round_f16_fast4(ra, zero), keel_round_f16_fast4(rb, zero));
    }
}

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

// The kernel; `split` says whether the split-K format is read. The entry
// points pass a constant, so that a compiler drops the split-K sums where
// it is false: they hold 16 more values per invocation, registers that a
// GPU otherwise spends on more warps in flight.
fn keel_tiled_4x4(wg: vec3<u32>, lid: vec3<u32>, li: u32, split: bool) {
    let k = params.k;
    let n = params.n;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    let f_in = params.mode & 15u;
    let f_red = select(0u, (params.mode >> 8u) & 15u, split);
    // The accumulator format (bits 4-7), 0 in every mode this kernel
    // runs (its sums are f32): the zero keel_round_f16_fast needs.
    let zero = (params.mode >> 4u) & 15u;
    // matmul_tiled.wgsl's chunk when none is given: past the last step.
    let chunk = select(params.chunk, (k + 31u) / 32u * 32u, params.chunk == 0u);
    // Staging, everything but k0 fixed per invocation: A's element s is
    // row (li / 8) % 16 + 16 s, step li % 8 + 8 (li / 128) of the tile
    // (a warp stores 8 steps of 4 rows, which the padded rows put on 32
    // distinct banks; 16 steps of 2 rows would put two on each); B's is
    // step (li / 64) + 4 s, column li % 64. Steps past k are selected to
    // zero, in the last tile only (they would enter every output). Rows
    // past m and columns past n are staged as read: a row of A enters
    // only its own row of C, a column of B its own column, and those
    // outputs are not stored. The index read outside a matrix may fall
    // past its end or wrap, which WGSL's bounds rules keep inside the
    // buffer on every backend (the PTX end reads zero, naga's `Restrict`
    // clamps on Vulkan, wgpu checks), so no index is clamped here.
    let a_step = li % 8u + 8u * (li / 128u);
    let a_tile_row = (li / 8u) % 16u;
    let a_row = row0 + a_tile_row;
    // The first element each invocation reads of A and of B at k0 = 0,
    // and the strides to its other three (uniform across the workgroup).
    let a_first = a_row * k + a_step;
    let k16 = 16u * k;
    let b_step = li / 64u;
    let b_first = b_step * n + col0 + li % 64u;
    let n4 = 4u * n;

    // Where they go: A's row r of step st is component r % 4 of vec4
    // 17 st + r / 4; B's column j of step st, component j % 4 of 16 st + j / 4.
    let ta = 17u * a_step + a_tile_row / 4u;
    let tc = a_tile_row % 4u;
    let tb = 16u * b_step + (li % 64u) / 4u;
    let bc = li % 4u;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    // The split-K totals.
    var tot0 = vec4<f32>();
    var tot1 = vec4<f32>();
    var tot2 = vec4<f32>();
    var tot3 = vec4<f32>();
    // The steps of a tile, and the staging, written out: a loop bound by
    // a constant is unrolled by some compilers and not others (naga may
    // add a counter to it).
    for (var k0 = 0u; k0 < k; k0 += 16u) {
        let ia = a_first + k0;
        let ib = b_first + k0 * n;
        // Each side of the branch stages its own values: merging them
        // after it costs ptxas a register move each.
        if k0 + 16u <= k {
            // Every step of the tile is inside: no test but WGSL's own.
            let ra = vec4<f32>(a[ia], a[ia + k16], a[ia + 2u * k16], a[ia + 3u * k16]);
            let rb = vec4<f32>(b[ib], b[ib + n4], b[ib + 2u * n4], b[ib + 3u * n4]);
            stage_rounded(ta, tc, tb, bc, f_in, zero, ra, rb);
        } else {
            // The last tile, where steps may be past k.
            let ka_ok = k0 + a_step < k;
            let kb = k0 + b_step;
            let ra = vec4<f32>(
                select(0.0, a[ia], ka_ok),
                select(0.0, a[ia + k16], ka_ok),
                select(0.0, a[ia + 2u * k16], ka_ok),
                select(0.0, a[ia + 3u * k16], ka_ok),
            );
            let rb = vec4<f32>(
                select(0.0, b[ib], kb < k),
                select(0.0, b[ib + n4], kb + 4u < k),
                select(0.0, b[ib + 2u * n4], kb + 8u < k),
                select(0.0, b[ib + 3u * n4], kb + 12u < k),
            );
            stage_rounded(ta, tc, tb, bc, f_in, zero, ra, rb);
        }
        workgroupBarrier();
        let a0 = tile_a[0u + lid.y];
        let b0 = tile_b[0u + lid.x];
        acc0 += a0.x * b0;
        acc1 += a0.y * b0;
        acc2 += a0.z * b0;
        acc3 += a0.w * b0;
        let a1 = tile_a[17u + lid.y];
        let b1 = tile_b[16u + lid.x];
        acc0 += a1.x * b1;
        acc1 += a1.y * b1;
        acc2 += a1.z * b1;
        acc3 += a1.w * b1;
        let a2 = tile_a[34u + lid.y];
        let b2 = tile_b[32u + lid.x];
        acc0 += a2.x * b2;
        acc1 += a2.y * b2;
        acc2 += a2.z * b2;
        acc3 += a2.w * b2;
        let a3 = tile_a[51u + lid.y];
        let b3 = tile_b[48u + lid.x];
        acc0 += a3.x * b3;
        acc1 += a3.y * b3;
        acc2 += a3.z * b3;
        acc3 += a3.w * b3;
        let a4 = tile_a[68u + lid.y];
        let b4 = tile_b[64u + lid.x];
        acc0 += a4.x * b4;
        acc1 += a4.y * b4;
        acc2 += a4.z * b4;
        acc3 += a4.w * b4;
        let a5 = tile_a[85u + lid.y];
        let b5 = tile_b[80u + lid.x];
        acc0 += a5.x * b5;
        acc1 += a5.y * b5;
        acc2 += a5.z * b5;
        acc3 += a5.w * b5;
        let a6 = tile_a[102u + lid.y];
        let b6 = tile_b[96u + lid.x];
        acc0 += a6.x * b6;
        acc1 += a6.y * b6;
        acc2 += a6.z * b6;
        acc3 += a6.w * b6;
        let a7 = tile_a[119u + lid.y];
        let b7 = tile_b[112u + lid.x];
        acc0 += a7.x * b7;
        acc1 += a7.y * b7;
        acc2 += a7.z * b7;
        acc3 += a7.w * b7;
        let a8 = tile_a[136u + lid.y];
        let b8 = tile_b[128u + lid.x];
        acc0 += a8.x * b8;
        acc1 += a8.y * b8;
        acc2 += a8.z * b8;
        acc3 += a8.w * b8;
        let a9 = tile_a[153u + lid.y];
        let b9 = tile_b[144u + lid.x];
        acc0 += a9.x * b9;
        acc1 += a9.y * b9;
        acc2 += a9.z * b9;
        acc3 += a9.w * b9;
        let a10 = tile_a[170u + lid.y];
        let b10 = tile_b[160u + lid.x];
        acc0 += a10.x * b10;
        acc1 += a10.y * b10;
        acc2 += a10.z * b10;
        acc3 += a10.w * b10;
        let a11 = tile_a[187u + lid.y];
        let b11 = tile_b[176u + lid.x];
        acc0 += a11.x * b11;
        acc1 += a11.y * b11;
        acc2 += a11.z * b11;
        acc3 += a11.w * b11;
        let a12 = tile_a[204u + lid.y];
        let b12 = tile_b[192u + lid.x];
        acc0 += a12.x * b12;
        acc1 += a12.y * b12;
        acc2 += a12.z * b12;
        acc3 += a12.w * b12;
        let a13 = tile_a[221u + lid.y];
        let b13 = tile_b[208u + lid.x];
        acc0 += a13.x * b13;
        acc1 += a13.y * b13;
        acc2 += a13.z * b13;
        acc3 += a13.w * b13;
        let a14 = tile_a[238u + lid.y];
        let b14 = tile_b[224u + lid.x];
        acc0 += a14.x * b14;
        acc1 += a14.y * b14;
        acc2 += a14.z * b14;
        acc3 += a14.w * b14;
        let a15 = tile_a[255u + lid.y];
        let b15 = tile_b[240u + lid.x];
        acc0 += a15.x * b15;
        acc1 += a15.y * b15;
        acc2 += a15.z * b15;
        acc3 += a15.w * b15;
        if f_red != 0u {
            let end = k0 + 16u;
            if end % chunk == 0u || end >= k {
                tot0 = keel_round4(tot0 + keel_round4(acc0, f_red), f_red);
                tot1 = keel_round4(tot1 + keel_round4(acc1, f_red), f_red);
                tot2 = keel_round4(tot2 + keel_round4(acc2, f_red), f_red);
                tot3 = keel_round4(tot3 + keel_round4(acc3, f_red), f_red);
                acc0 = vec4<f32>();
                acc1 = vec4<f32>();
                acc2 = vec4<f32>();
                acc3 = vec4<f32>();
            }
        }
        workgroupBarrier();
    }
    let cut = f_red != 0u;
    let r0 = row0 + 4u * lid.y;
    let c0 = col0 + 4u * lid.x;
    store_row(r0, c0, select(acc0, tot0, cut));
    store_row(r0 + 1u, c0, select(acc1, tot1, cut));
    store_row(r0 + 2u, c0, select(acc2, tot2, cut));
    store_row(r0 + 3u, c0, select(acc3, tot3, cut));
}

// Plain f32 and the modes that only round the inputs (the split-K format
// is not read).
@compute @workgroup_size(16, 16)
fn matmul_tiled_4x4(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    keel_tiled_4x4(wg, lid, li, false);
}

// The split-K modes (f32 sums, chunk sums rounded to bf16 or f16).
@compute @workgroup_size(16, 16)
fn matmul_tiled_4x4_split(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    keel_tiled_4x4(wg, lid, li, true);
}
