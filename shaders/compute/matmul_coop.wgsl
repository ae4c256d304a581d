// C = A * B with A and B rounded to f16 and the products summed in f32
// (MatmulPrecision with f16 inputs), on cooperative matrices: the tensor
// cores of an NVIDIA GPU (and the matrix units of other vendors) through
// Vulkan or wgpu. A is m x k, B is k x n, C is m x n, f32, row-major; any
// m, k, n >= 1.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform:
// m, k and n are read; the launch code runs this kernel only in the f16
// input mode, so `mode` and `chunk` are not), declared in
// matmul_bindings.wgsl. Source order: coop_matrix.wgsl (its `enable`
// directives come first), coop_fragment16.wgsl or coop_fragment8.wgsl
// (FRAG, the fragments' size, and SUBGROUP, the subgroups' width),
// rounding.wgsl, matmul_bindings.wgsl, this file.
// Launch: workgroups of 128 invocations, each computing a 64 x 64 tile of
// C, and each subgroup a block of 2 x 2 fragments in it (2 FRAG x 2 FRAG
// outputs, the blocks in row-major order by subgroup): 4 subgroups of 32
// with fragments of 16, or 16 subgroups of 8 with fragments of 8 (the
// launch code runs it only where the device's subgroups have that width);
// a grid of ceil(n / 64) x ceil(m / 64).
//
// Each step of 32 along k stages a 64 x 32 tile of A and a 32 x 64 tile
// of B in workgroup memory as f16, each element rounded once as it is
// staged (keel_round_f16, the rounding of every other kernel: a rounded
// value is exactly an f16, so the conversion adds nothing), zeros outside
// the matrices. Neighbouring invocations load neighbouring elements of a
// row. Rows are padded (40 and 72 halves) so that every fragment starts on
// a 16-byte boundary, as VK_KHR_cooperative_matrix asks of loads. The sum
// over k is the matrix units' (docs/NUMERICS.md has its bound); the result
// leaves through a FRAG x FRAG f32 scratch per subgroup, so that rows and
// columns past the matrix are not written.

const STAGE_LD_A: u32 = 40u;
const STAGE_LD_B: u32 = 72u;

// stage_a[STAGE_LD_A r + s]: row r, step s of the A tile.
var<workgroup> stage_a: array<Half, 2560>;
// stage_b[STAGE_LD_B s + c]: step s, column c of the B tile.
var<workgroup> stage_b: array<Half, 2304>;
// The subgroups of a workgroup (each with one FRAG x FRAG scratch of
// FRAG_SIZE values), and the values each of its lanes writes out of it.
const SUBGROUPS: u32 = 128u / SUBGROUP;
const FRAG_SIZE: u32 = FRAG * FRAG;
const PER_LANE: u32 = FRAG_SIZE / SUBGROUP;
// scratch[FRAG_SIZE g + FRAG r + c]: subgroup g's fragment on its way out.
var<workgroup> scratch: array<f32, SUBGROUPS * FRAG_SIZE>;

@compute @workgroup_size(128)
fn matmul_coop(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_invocation_id) lane_id: u32,
) {
    let place = subgroup_place(li, sg_id, lane_id);
    let sg = place.x;
    let lane = place.y;
    let m = params.m;
    let k = params.k;
    let n = params.n;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    // This subgroup's block, in rows and columns of the tile.
    let blocks = 32u / FRAG;
    let qr = (sg / blocks) * 2u * FRAG;
    let qc = (sg % blocks) * 2u * FRAG;
    var acc00 = FragC();
    var acc01 = FragC();
    var acc10 = FragC();
    var acc11 = FragC();
    for (var k0 = 0u; k0 < k; k0 += 32u) {
        // A: element e = li + 128 j is row e / 32, step e % 32 of the tile;
        // B: row e / 64, column e % 64.
        for (var j = 0u; j < 16u; j++) {
            let e = li + 128u * j;
            let ar = row0 + e / 32u;
            let ak = k0 + e % 32u;
            var va = 0.0;
            if ar < m && ak < k {
                va = keel_round_f16(a[ar * k + ak]);
            }
            stage_a[STAGE_LD_A * (e / 32u) + e % 32u] = Half(va);
            let bk = k0 + e / 64u;
            let bc = col0 + e % 64u;
            var vb = 0.0;
            if bk < k && bc < n {
                vb = keel_round_f16(b[bk * n + bc]);
            }
            stage_b[STAGE_LD_B * (e / 64u) + e % 64u] = Half(vb);
        }
        workgroupBarrier();
        for (var s = 0u; s < 32u; s += FRAG) {
            let a0 = frag_a(STAGE_LD_A * qr + s, STAGE_LD_A);
            let a1 = frag_a(STAGE_LD_A * (qr + FRAG) + s, STAGE_LD_A);
            let b0 = frag_b(STAGE_LD_B * s + qc, STAGE_LD_B);
            let b1 = frag_b(STAGE_LD_B * s + qc + FRAG, STAGE_LD_B);
            acc00 = frag_mad(a0, b0, acc00);
            acc01 = frag_mad(a0, b1, acc01);
            acc10 = frag_mad(a1, b0, acc10);
            acc11 = frag_mad(a1, b1, acc11);
        }
        workgroupBarrier();
    }
    let r0 = row0 + qr;
    let c0 = col0 + qc;
    write_fragment(acc00, sg, lane, r0, c0);
    write_fragment(acc01, sg, lane, r0, c0 + FRAG);
    write_fragment(acc10, sg, lane, r0 + FRAG, c0);
    write_fragment(acc11, sg, lane, r0 + FRAG, c0 + FRAG);
}

// Subgroup `sg`'s fragment `acc` into C at rows r0 .., columns c0 ..,
// through its scratch: every lane writes PER_LANE of the FRAG_SIZE
// elements, those inside C. Called by every invocation of the workgroup
// alike.
fn write_fragment(acc: FragC, sg: u32, lane: u32, r0: u32, c0: u32) {
    frag_store(acc, FRAG_SIZE * sg, FRAG);
    workgroupBarrier();
    for (var j = 0u; j < PER_LANE; j++) {
        let e = lane + SUBGROUP * j;
        let r = r0 + e / FRAG;
        let col = c0 + e % FRAG;
        if r < params.m && col < params.n {
            c[r * params.n + col] = scratch[FRAG_SIZE * sg + e];
        }
    }
    workgroupBarrier();
}
