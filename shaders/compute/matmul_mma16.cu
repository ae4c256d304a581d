// C = A * B on tensor cores with 16-bit operands, in the modes that round
// the inputs to bf16 or f16 and sum in f32 (mode bits 0-3: 2 or 3, the
// format codes of rounding.wgsl). A is m x k, B is k x n, C is m x n, f32,
// row-major, any m, k, n >= 1.
//
// The CUDA override of matmul_tiled_4x4.wgsl for those two modes on
// devices of compute capability 8.0 and later (`mma.sync ... .m16n8k16`
// with bf16 or f16 operands and `cp.async` are Ampere's). Two entry
// points, launched one after the other on the same stream:
//
// - matmul_mma16_pack rounds each input element once, by
//   `cvt.rn.bf16x2.f32` or `cvt.rn.f16x2.f32` (round to nearest, ties to
//   even, f16 subnormals kept and infinity from 65520 on: the same values
//   as rounding.wgsl's bit operations; NaN stays NaN, its payload is not
//   kept), into a packed copy of A or B: 16-bit values, rows padded with
//   zeros to whole tiles. Packed A is pm x pk, packed B is pk x pn, with
//   pm and pn m and n rounded up to 128 and pk k rounded up to 32.
// - matmul_mma16 multiplies the packed copies. Having no bounds to test
//   and 16-byte aligned rows, it stages tiles into shared memory by
//   `cp.async` alone, three stages deep, so that two stages' copies are
//   in flight while one is computed and no thread holds staged values in
//   registers.
//
// The tensor core multiplies the 16-bit values exactly and sums in f32 in
// its own order within each 16-step (docs/NUMERICS.md gives the bound), so
// results are not bit-identical to the portable kernel's.
//
// PTX for Keel's CUDA backend: `cargo xtask mma-ptx` compiles this file
// with NVRTC for compute_80 into matmul_mma16.ptx, which is checked in;
// `cargo xtask test` assembles it with ptxas for sm_80 and sm_90 and runs
// it on keel-wgsl's PTX interpreter (tests/ptx_sim.rs).
//
// matmul_mma16: parameters packed a, packed b, c as device pointers, then
// m, k, n, mode, chunk as u32 (Keel's matmul parameters; chunk is not
// read). Blocks of 256 threads, each computing a 128 x 128 tile of C: a
// grid of pn / 128 x pm / 128. Each of the 8 warps computes 64 x 32 of it
// (warps 2 x 4) as 4 x 4 tiles of 16 x 8, one mma.m16n8k16 each per step
// of 16 along k. A stage holds a 128 x 32 tile of A and a 32 x 128 tile of
// B, 8 KiB each, unpadded: the 16-byte chunks of a row are permuted (XOR
// with bits of the row), so that the eight rows an `ldmatrix` reads fall
// on distinct banks. A's fragments come from `ldmatrix.x4`, B's from
// `ldmatrix.x4.trans` (B is stored k-major, as in memory).
//
// matmul_mma16_pack: parameters src (f32, or with mode bit 16 the
// format's 16-bit values, copied as they are: a bf16 or f16 tensor's),
// dst (packed) as device pointers, then rows, cols (src's), dst_rows,
// dst_cols (a multiple of 8) and mode as u32. Blocks of 256 threads, one thread per 8 packed values
// (16 bytes): a grid of ceil(dst_rows * dst_cols / 8 / 256).

#include "matmul_mma_common.cuh"

#define BM 128
#define BN 128
#define BK 32
#define STAGES 3
// Bytes of a stage's A tile (128 rows of 64 bytes) and B tile (32 rows of
// 256 bytes).
#define A_TILE_BYTES (BM * BK * 2)
#define B_TILE_BYTES (BK * BN * 2)
#define STAGE_BYTES (A_TILE_BYTES + B_TILE_BYTES)

// Two f32 values rounded to the 16-bit format and packed: `lo` in the low
// half, as an mma operand register holds its first element.
template <bool BF16>
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    unsigned r;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// The two 16-bit values of `r` as f32 (exactly): the low half first.
template <bool BF16>
__device__ __forceinline__ float2 unpack2(unsigned r)
{
    if (BF16) {
        return make_float2(__uint_as_float(r << 16), __uint_as_float(r & 0xffff0000u));
    }
    float lo, hi;
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((unsigned short)(r & 0xffffu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((unsigned short)(r >> 16)));
    return make_float2(lo, hi);
}

template <bool BF16>
__device__ __forceinline__ void pack(const float* __restrict__ src, uint4* __restrict__ dst,
                                     unsigned rows, unsigned cols, unsigned dst_rows,
                                     unsigned dst_cols)
{
    PackPiece<float> at;
    if (!pack_piece<8u>(src, rows, cols, dst_rows, dst_cols, at)) {
        return;
    }
    float v[8];
    if (at.whole) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(at.p));
        const float4 y = __ldg(reinterpret_cast<const float4*>(at.p + 4));
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
        v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
    } else {
#pragma unroll
        for (unsigned e = 0; e < 8u; e++) {
            v[e] = e < at.inside ? __ldg(at.p + e) : 0.0f;
        }
    }
    dst[at.i] = make_uint4(pack2<BF16>(v[0], v[1]), pack2<BF16>(v[2], v[3]),
                        pack2<BF16>(v[4], v[5]), pack2<BF16>(v[6], v[7]));
}

// The same copy of a matrix that holds 16-bit values of the format
// already (a bf16 or f16 tensor's), as they are.
__device__ __forceinline__ void pack_halves(const unsigned short* __restrict__ src,
                                            uint4* __restrict__ dst, unsigned rows, unsigned cols,
                                            unsigned dst_rows, unsigned dst_cols)
{
    PackPiece<unsigned short> at;
    if (!pack_piece<8u>(src, rows, cols, dst_rows, dst_cols, at)) {
        return;
    }
    if (at.whole) {
        dst[at.i] = __ldg(reinterpret_cast<const uint4*>(at.p));
        return;
    }
    unsigned h[8];
#pragma unroll
    for (unsigned e = 0; e < 8u; e++) {
        h[e] = e < at.inside ? (unsigned)__ldg(at.p + e) : 0u;
    }
    dst[at.i] = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

// Mode bit 16 set: src holds 16-bit values of the format (two bytes
// each, rows of `cols`), copied as they are; otherwise f32 values,
// rounded.
extern "C" __global__ void __launch_bounds__(256)
matmul_mma16_pack(const float* __restrict__ src, uint4* __restrict__ dst, unsigned rows,
                  unsigned cols, unsigned dst_rows, unsigned dst_cols, unsigned mode)
{
    if (mode & 0x10000u) {
        pack_halves(reinterpret_cast<const unsigned short*>(src), dst, rows, cols, dst_rows,
                    dst_cols);
    } else if ((mode & 15u) == 2u) {
        pack<true>(src, dst, rows, cols, dst_rows, dst_cols);
    } else {
        pack<false>(src, dst, rows, cols, dst_rows, dst_cols);
    }
}

template <bool BF16>
__device__ __forceinline__ void mma16(float* acc, const unsigned* fa, const unsigned* fb)
{
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
    }
}

// SPLIT: the split-K modes (bf16 and f16 tensors' defaults): every
// `chunk` steps of k (a multiple of 32; 0 for one chunk) and after the
// last, each sum is
// rounded to the format and added into a running total, itself rounded
// (src/compute/precision.rs, Reduction). The totals are kept as rounded
// 16-bit pairs, 32 registers.
template <bool BF16, bool SPLIT>
__device__ __forceinline__ void matmul(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                       float* __restrict__ c, unsigned m, unsigned k, unsigned n,
                                       unsigned chunk, unsigned smem)
{
    const WarpPlace w = warp_place();
    const unsigned tid = w.tid;
    // The packed copies' rows, in 16-byte chunks.
    const unsigned a_chunks = (k + 31u) / 32u * 4u;
    const unsigned b_chunks = (n + 127u) / 128u * 16u;
    const unsigned tiles = (k + 31u) / 32u;

    // Copies: a stage's A tile is 128 rows of 4 chunks, B's 32 rows of 16;
    // each thread copies chunk tid and tid + 256 of each. Chunk q of row r
    // lies at chunk q ^ ((r / 2) % 4) of A's row (a_tile_offset), q ^ (r %
    // 8) of B's.
    const unsigned a_row = tid >> 2;
    const unsigned a_chunk = tid & 3u;
    const unsigned b_row = tid >> 4;
    const unsigned b_chunk = tid & 15u;
    const uint4* a_src = a + (size_t)(w.row0 + a_row) * a_chunks + a_chunk;
    const uint4* b_src = b + (size_t)b_row * b_chunks + w.col0 / 8u + b_chunk;
    const size_t a_half = (size_t)64u * a_chunks;   // 64 rows on
    const size_t b_half = (size_t)16u * b_chunks;   // 16 rows on
    const size_t b_stage = (size_t)32u * b_chunks;  // one stage on
    const unsigned a_dst = a_tile_offset(a_row, a_chunk);
    const unsigned b_dst = A_TILE_BYTES + b_row * 256u + ((b_chunk ^ (b_row & 7u)) * 16u);

    auto issue = [&](unsigned tile) {
        const unsigned base = smem + (tile % STAGES) * STAGE_BYTES;
        cp_async16(base + a_dst, a_src + tile * 4u);
        cp_async16(base + a_dst + 64u * 64u, a_src + a_half + tile * 4u);
        const uint4* pb = b_src + tile * b_stage;
        cp_async16(base + b_dst, pb);
        cp_async16(base + b_dst + 16u * 256u, pb + b_half);
    };

    // A's fragments: 16 x 16, 8 steps to 16 bytes. ldmatrix: lane l gives
    // the address of row l % 8 of matrix l / 8.
    const AFragments fragments_a = a_fragments(w.warp_row, w.lane);
    const unsigned lrow = w.lane & 7u;
    const unsigned lmat = w.lane >> 3;
    // B's: steps +0 and +8 of columns +0 (matrices 0, 1: b0, b1 of one 16
    // x 8 fragment), then the same for columns +8 (2, 3). The eight rows
    // of a matrix differ in r % 8, so their chunks in distinct banks.
    const unsigned b_frag = A_TILE_BYTES + (lrow + 8u * (lmat & 1u)) * 256u;
    const unsigned b_frag_chunk = w.warp_col / 8u + (lmat >> 1);

    WarpSums acc;
    zero_sums(acc);
    // The split-K totals: pair h of tile (i, j) holds elements 2 h and
    // 2 h + 1 of its sums.
    unsigned totals[4][4][2];
    // One chunk of the whole of k where `chunk` is below a stage (0).
    const unsigned chunk_tiles = !SPLIT ? 1u : chunk >= BK ? chunk / BK : tiles;
    auto fold = [&]() {
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 part = unpack2<BF16>(pack2<BF16>(acc[i][j][2 * h], acc[i][j][2 * h + 1]));
                    const float2 total = unpack2<BF16>(totals[i][j][h]);
                    totals[i][j][h] = pack2<BF16>(total.x + part.x, total.y + part.y);
                }
            }
        }
        zero_sums(acc);
    };
    if (SPLIT) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                totals[i][j][0] = 0u;
                totals[i][j][1] = 0u;
            }
        }
    }

    pipeline3(tiles, issue, [&](unsigned tile) {
        const unsigned base = smem + (tile % STAGES) * STAGE_BYTES;
#pragma unroll
        for (unsigned s = 0; s < 2u; s++) {
            // B's fragments for the step first, then A's one row of tiles
            // at a time: 12 fragment registers live, not 24.
            unsigned fb[4][2];
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                const unsigned chunk = (b_frag_chunk + (unsigned)j) ^ lrow;
                const unsigned addr = base + b_frag + s * 16u * 256u + chunk * 16u;
                ldmatrix_x4_trans(addr, fb[j][0], fb[j][1], fb[j + 1][0], fb[j + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                unsigned fa[4];
                ldmatrix_x4(fragments_a.at(base, (unsigned)i, s), fa[0], fa[1], fa[2], fa[3]);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    mma16<BF16>(acc[i][j], fa, fb[j]);
                }
            }
        }
        if (SPLIT && (tile + 1u) % chunk_tiles == 0 && tile + 1u < tiles) {
            fold();
        }
    });

    if (SPLIT) {
        // The last chunk (whole or cut short by k) into the totals, and
        // the totals out.
        fold();
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 total = unpack2<BF16>(totals[i][j][h]);
                    acc[i][j][2 * h] = total.x;
                    acc[i][j][2 * h + 1] = total.y;
                }
            }
        }
    }
    store_sums(acc, c, m, n, w.row0 + w.warp_row, w.col0 + w.warp_col, w.g, w.t);
}

// Two blocks per SM: 48 KiB of shared memory and at most 128 registers
// each.
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_mma16(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ c,
             unsigned m, unsigned k, unsigned n, unsigned mode, unsigned chunk)
{
    __shared__ __align__(128) unsigned char stages[STAGES * STAGE_BYTES];
    const unsigned smem = shared_address(stages);
    if ((mode & 15u) == 2u) {
        matmul<true, false>(a, b, c, m, k, n, chunk, smem);
    } else {
        matmul<false, false>(a, b, c, m, k, n, chunk, smem);
    }
}

// The split-K modes: the format of the inputs (mode bits 0-3) is the
// format the chunk sums and totals are rounded to (bits 8-11). The totals
// take 32 registers more than matmul_mma16 holds; held to 128 for two
// blocks per SM, ptxas keeps them in local memory between chunks (and
// reloads a few addresses each stage).
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_mma16_split(const uint4* __restrict__ a, const uint4* __restrict__ b,
                   float* __restrict__ c, unsigned m, unsigned k, unsigned n, unsigned mode,
                   unsigned chunk)
{
    __shared__ __align__(128) unsigned char stages[STAGES * STAGE_BYTES];
    const unsigned smem = shared_address(stages);
    if ((mode & 15u) == 2u) {
        matmul<true, true>(a, b, c, m, k, n, chunk, smem);
    } else {
        matmul<false, true>(a, b, c, m, k, n, chunk, smem);
    }
}
