// C = A * B on tensor cores, in the modes that round the inputs and sum in
// f32: tf32, bf16 or f16 inputs (mode bits 0-3: 1, 2 or 3, the format
// codes of rounding.wgsl). A is m x k, B is k x n, C is m x n, f32,
// row-major, any m, k, n >= 1.
//
// The CUDA override of matmul_tiled_4x4.wgsl in tf32 on devices of
// compute capability 8.0 and later (`mma.sync ... .tf32` and `cp.async`
// are Ampere's); Keel runs bf16 and f16 inputs on matmul_mma16.cu, at
// twice the rate, and this kernel takes them too. A value rounded to bf16
// or f16 is exactly a tf32 value (their significands are no wider, and
// tf32 has f32's exponent range), so one tf32 instruction serves the
// three modes. Two entry points, launched one after the other on the same
// stream:
//
// - matmul_mma_pack rounds each input element once, by the same bit
//   operations as rounding.wgsl and src/compute/precision.rs (round to
//   nearest, ties to even), into a copy of A or B whose rows are padded
//   with zeros to whole tiles: packed A is pm x pk, packed B pk x pn, f32,
//   with pm and pn m and n rounded up to 128 and pk k rounded up to 16.
// - matmul_mma multiplies the packed copies. Having no bounds to test and
//   16-byte aligned rows, it stages tiles into shared memory by `cp.async`
//   alone, three stages deep, so that two stages' copies are in flight
//   while one is computed and no thread holds staged values in registers.
//
// The tensor core multiplies the rounded values exactly and sums in f32 in
// its own order within each 8-step (docs/NUMERICS.md gives the bound), so
// results are not bit-identical to the portable kernel's.
//
// PTX for Keel's CUDA backend: `cargo xtask mma-ptx` compiles this file
// with NVRTC (CUDA 12.9's, from PyPI) for compute_80 into matmul_mma.ptx,
// which is checked in, declared `.version 7.0` (all it uses, so that
// drivers from CUDA 11 on load it); `cargo xtask test` assembles that
// with ptxas for sm_80 and sm_90 and runs it on keel-wgsl's PTX
// interpreter (tests/ptx_sim.rs).
//
// matmul_mma: parameters packed a, packed b, c as device pointers, then m,
// k, n, mode, chunk as u32 (Keel's matmul parameters; chunk is not read).
// Blocks of 256 threads, each computing a 128 x 128 tile of C: a grid of
// pn / 128 x pm / 128. Each of the 8 warps computes 64 x 32 of it (warps 2
// x 4) as 4 x 4 tiles of 16 x 8, one mma.m16n8k8 each per step of 8 along
// k. A stage holds a 128 x 16 tile of A and a 16 x 128 tile of B, 8 KiB
// each, unpadded: the 16-byte chunks of a row are permuted (XOR with bits
// of the row), so that the fragment reads of a warp fall on distinct
// banks. A's fragments come from `ldmatrix` (four 8 x 4-float matrices are
// one 16 x 8 tf32 fragment), B's from single loads.
//
// matmul_mma_pack: parameters src, dst (f32) as device pointers, then
// rows, cols (src's), dst_rows, dst_cols (a multiple of 4) and mode as
// u32. Blocks of 256 threads, one thread per 4 values of the copy (16
// bytes): a grid of ceil(dst_rows * dst_cols / 4 / 256).

#include "matmul_mma_common.cuh"

#define BM 128
#define BN 128
#define BK 16
#define STAGES 3
// Bytes of a stage's A tile (128 rows of 64 bytes) and B tile (16 rows of
// 512 bytes).
#define A_TILE_BYTES (BM * BK * 4)
#define B_TILE_BYTES (BK * BN * 4)
#define STAGE_BYTES (A_TILE_BYTES + B_TILE_BYTES)

// x with its low `drop` mantissa bits rounded away, to nearest, ties to
// even; infinities and NaNs as they are.
__device__ __forceinline__ float keel_round_mantissa(float x, unsigned drop)
{
    unsigned bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) {
        return x;
    }
    unsigned lsb = (bits >> drop) & 1u;
    unsigned half_minus_one = (1u << (drop - 1u)) - 1u;
    unsigned mask = ~((1u << drop) - 1u);
    return __uint_as_float((bits + half_minus_one + lsb) & mask);
}

// x rounded to f16 and back: subnormals below 2^-14 as multiples of
// 2^-24, infinity from 65520 on.
__device__ __forceinline__ float keel_round_f16(float x)
{
    if (fabsf(x) < 6.103515625e-05f) {
        return __fmul_rn(rintf(__fmul_rn(x, 16777216.0f)), 5.9604644775390625e-08f);
    }
    float r = keel_round_mantissa(x, 13u);
    if (fabsf(r) > 65504.0f) {
        return __uint_as_float((__float_as_uint(r) & 0x80000000u) | 0x7f800000u);
    }
    return r;
}

template <unsigned FORMAT>
__device__ __forceinline__ float keel_round_to(float x)
{
    switch (FORMAT) {
    case 1u:
        return keel_round_mantissa(x, 13u);
    case 2u:
        return keel_round_mantissa(x, 16u);
    default:
        return keel_round_f16(x);
    }
}

template <unsigned FORMAT>
__device__ __forceinline__ void pack(const float* __restrict__ src, float4* __restrict__ dst,
                                     unsigned rows, unsigned cols, unsigned dst_rows,
                                     unsigned dst_cols)
{
    PackPiece<float> at;
    if (!pack_piece<4u>(src, rows, cols, dst_rows, dst_cols, at)) {
        return;
    }
    float4 v;
    if (at.whole) {
        v = __ldg(reinterpret_cast<const float4*>(at.p));
    } else {
        float e[4];
#pragma unroll
        for (unsigned j = 0; j < 4u; j++) {
            e[j] = j < at.inside ? __ldg(at.p + j) : 0.0f;
        }
        v = make_float4(e[0], e[1], e[2], e[3]);
    }
    dst[at.i] = make_float4(keel_round_to<FORMAT>(v.x), keel_round_to<FORMAT>(v.y),
                         keel_round_to<FORMAT>(v.z), keel_round_to<FORMAT>(v.w));
}

extern "C" __global__ void __launch_bounds__(256)
matmul_mma_pack(const float* __restrict__ src, float4* __restrict__ dst, unsigned rows,
                unsigned cols, unsigned dst_rows, unsigned dst_cols, unsigned mode)
{
    switch (mode & 15u) {
    case 1u:
        pack<1u>(src, dst, rows, cols, dst_rows, dst_cols);
        break;
    case 2u:
        pack<2u>(src, dst, rows, cols, dst_rows, dst_cols);
        break;
    default:
        pack<3u>(src, dst, rows, cols, dst_rows, dst_cols);
        break;
    }
}

// Two blocks per SM: 48 KiB of shared memory and at most 128 registers
// each. The mode is not read: the packed values are already rounded.
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_mma(const float4* __restrict__ a, const float4* __restrict__ b, float* __restrict__ c,
           unsigned m, unsigned k, unsigned n, unsigned mode, unsigned chunk)
{
    (void)mode;
    (void)chunk;
    __shared__ __align__(128) unsigned char stages[STAGES * STAGE_BYTES];
    const unsigned smem = shared_address(stages);
    const WarpPlace w = warp_place();
    const unsigned tid = w.tid;
    const unsigned g = w.g;
    const unsigned t = w.t;
    // The packed copies' rows, in 16-byte chunks.
    const unsigned a_chunks = (k + 15u) / 16u * 4u;
    const unsigned b_chunks = (n + 127u) / 128u * 32u;
    const unsigned tiles = (k + 15u) / 16u;

    // Copies: a stage's A tile is 128 rows of 4 chunks, B's 16 rows of 32;
    // each thread copies chunk tid and tid + 256 of each. Chunk q of row r
    // lies at chunk q ^ ((r / 2) % 4) of A's row (a_tile_offset), q ^ 2 (r
    // % 4) of B's.
    const unsigned a_row = tid >> 2;
    const unsigned a_chunk = tid & 3u;
    const unsigned b_row = tid >> 5;
    const unsigned b_chunk = tid & 31u;
    const float4* a_src = a + (size_t)(w.row0 + a_row) * a_chunks + a_chunk;
    const float4* b_src = b + (size_t)b_row * b_chunks + w.col0 / 4u + b_chunk;
    const size_t a_half = (size_t)64u * a_chunks;   // 64 rows on
    const size_t b_half = (size_t)8u * b_chunks;    // 8 rows on
    const size_t b_stage = (size_t)16u * b_chunks;  // one stage on
    const unsigned a_dst = a_tile_offset(a_row, a_chunk);
    const unsigned b_dst = A_TILE_BYTES + b_row * 512u + ((b_chunk ^ ((b_row & 3u) << 1)) * 16u);

    auto issue = [&](unsigned tile) {
        const unsigned base = smem + (tile % STAGES) * STAGE_BYTES;
        cp_async16(base + a_dst, a_src + tile * 4u);
        cp_async16(base + a_dst + 64u * 64u, a_src + a_half + tile * 4u);
        const float4* pb = b_src + tile * b_stage;
        cp_async16(base + b_dst, pb);
        cp_async16(base + b_dst + 8u * 512u, pb + b_half);
    };

    // A's fragments by `ldmatrix` on 16-bit halves: four 8 x 4-float
    // matrices are one 16 x 8 fragment (8 steps to 32 bytes), and lane l
    // receives the float at row l / 4, step l % 4 of each: a0..a3 of
    // m16n8k8.
    const AFragments fragments_a = a_fragments(w.warp_row, w.lane);
    // B's by single loads: b0 at step t, b1 at step t + 4, column g of
    // each 8 columns. The four steps' rows differ in 2 (r % 4) and so put
    // the warp's two chunks of each on distinct banks.
    const unsigned b_frag = A_TILE_BYTES + t * 512u + (g & 3u) * 4u;
    const unsigned b_swizzle = t << 1;

    WarpSums acc;
    zero_sums(acc);

    pipeline3(tiles, issue, [&](unsigned tile) {
        const unsigned base = smem + (tile % STAGES) * STAGE_BYTES;
#pragma unroll
        for (unsigned s = 0; s < 2u; s++) {
            unsigned fa[4][4];
            unsigned fb[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                ldmatrix_x4(fragments_a.at(base, (unsigned)i, s), fa[i][0], fa[i][1], fa[i][2],
                            fa[i][3]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const unsigned chunk = ((w.warp_col + 8u * j) / 4u + (g >> 2)) ^ b_swizzle;
                const unsigned addr = base + b_frag + s * 8u * 512u + chunk * 16u;
                asm volatile("ld.shared.b32 %0, [%1];" : "=r"(fb[j][0]) : "r"(addr));
                asm volatile("ld.shared.b32 %0, [%1];" : "=r"(fb[j][1]) : "r"(addr + 4u * 512u));
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    asm volatile(
                        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]),
                          "+f"(acc[i][j][3])
                        : "r"(fa[i][0]), "r"(fa[i][1]), "r"(fa[i][2]), "r"(fa[i][3]),
                          "r"(fb[j][0]), "r"(fb[j][1]));
                }
            }
        }
    });

    store_sums(acc, c, m, n, w.row0 + w.warp_row, w.col0 + w.warp_col, g, t);
}
