// C = A * B with A and B rounded to f16 and the products summed in f32
// (MatmulPrecision with f16 inputs), on cooperative matrices: the tensor
// cores of an NVIDIA GPU (and the matrix units of other vendors) through
// Vulkan or wgpu. A is m x k, B is k x n, C is m x n, row-major; any m,
// k, n >= 1.
// Bindings: 0 a, 1 b: A and B as matmul_coop_pack.wgsl packs them (f16,
// each value rounded once, padded with zeros to pm x pk and pk x pn:
// m and n up to multiples of 64, k up to a multiple of 32), 2 c (f32,
// read_write), 3 params (uniform, the layout of matmul_bindings.wgsl: m,
// k and n are read; the launch code runs this kernel only in the f16
// input mode, so `mode` and `chunk` are not). Source order:
// coop_matrix.wgsl (its `enable` directives come first),
// coop_fragment16.wgsl or coop_fragment8.wgsl (FRAG, the fragments' size,
// and SUBGROUP, the subgroups' width), this file.
// Launch: workgroups of 128 invocations, each computing a 64 x 64 tile of
// C, and each subgroup a block of 2 x 2 fragments in it (2 FRAG x 2 FRAG
// outputs, the blocks in row-major order by subgroup): 4 subgroups of 32
// with fragments of 16, or 16 subgroups of 8 with fragments of 8 (the
// launch code runs it only where the device's subgroups have that width);
// a grid of ceil(n / 64) x ceil(m / 64).
//
// Each step of FRAG along k loads the subgroup's two fragments of A and
// two of B straight from the packed copies (every load inside them and on
// a 16-byte boundary, as VK_KHR_cooperative_matrix asks: rows of pk and
// pn halves, both multiples of 32) and adds their four products: no
// staging in workgroup memory, no rounding and no barrier in the loop;
// the packing pass rounded every value once. The sum over k is the
// matrix units' (docs/NUMERICS.md has its bound); the result leaves
// through a FRAG x FRAG f32 scratch per subgroup, so that rows and
// columns past the matrix are not written.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    mode: u32,
    chunk: u32,
}

@group(0) @binding(0) var<storage, read> a: array<Half>;
@group(0) @binding(1) var<storage, read> b: array<Half>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

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
    // The packed copies' row lengths, and this subgroup's block.
    let pk = (k + 31u) / 32u * 32u;
    let pn = (n + 63u) / 64u * 64u;
    let ra = (row0 + qr) * pk;
    let ra1 = (row0 + qr + FRAG) * pk;
    let cb = col0 + qc;
    for (var k0 = 0u; k0 < pk; k0 += FRAG) {
        let a0 = frag_a(ra + k0, pk);
        let a1 = frag_a(ra1 + k0, pk);
        let b0 = frag_b(k0 * pn + cb, pn);
        let b1 = frag_b(k0 * pn + cb + FRAG, pn);
        acc00 = frag_mad(a0, b0, acc00);
        acc01 = frag_mad(a0, b1, acc01);
        acc10 = frag_mad(a1, b0, acc10);
        acc11 = frag_mad(a1, b1, acc11);
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
