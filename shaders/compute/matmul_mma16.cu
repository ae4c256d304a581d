// C = A * B on tensor cores with 16-bit operands, in the modes that round
// the inputs to bf16 or f16 and sum in f32 (mode bits 0-3: 2 or 3, the
// format codes of rounding.wgsl). A is m x k, B is k x n, C is m x n, f32,
// row-major, any m, k, n >= 1.
//
// The CUDA override of matmul_tiled_4x4.wgsl for those two modes on
// devices of compute capability 8.0 and later (`mma.sync ... .m16n8k16`
// with bf16 or f16 operands is Ampere's). Each input element is rounded
// once, as it is staged into shared memory, by `cvt.rn.bf16x2.f32` or
// `cvt.rn.f16x2.f32`: round to nearest, ties to even, f16 subnormals kept
// and infinity from 65520 on, the same values as rounding.wgsl's bit
// operations (NaN stays NaN; its payload is not kept). The tensor core
// multiplies the 16-bit values exactly and sums in f32 in its own order
// within each 16-step (docs/NUMERICS.md gives the bound), so results are
// not bit-identical to the portable kernel's. Against matmul_mma.cu (tf32
// for the three modes) the tensor cores run at twice the rate and shared
// memory holds half the bytes.
//
// PTX for Keel's CUDA backend: `cargo xtask mma-ptx` compiles this file
// with NVRTC for compute_80 into matmul_mma16.ptx, which is checked in;
// `cargo xtask test` assembles it with ptxas for sm_80 and sm_90 and runs
// it on keel-wgsl's PTX interpreter (tests/ptx_sim.rs). Parameters as
// matmul_mma.cu's: a, b, c as device pointers, then m, k, n, mode, chunk
// as u32 (chunk is not read).
//
// Launch: blocks of 256 threads, each computing a 128 x 128 tile of C: a
// grid of ceil(n / 128) x ceil(m / 128). Each of the 8 warps computes 64 x
// 32 of it (warps 2 x 4) as 4 x 4 tiles of 16 x 8, one mma.m16n8k16 each
// per step of 16 along k. Each stage of 32 along k holds a 128 x 32 tile
// of A (rows of 40 halves) and a 32 x 128 tile of B (rows of 136 halves)
// in shared memory, zeros outside the matrices: with those strides the
// eight 16-byte rows an `ldmatrix` reads fall on distinct banks. A's
// fragments come from `ldmatrix.x4`, B's from `ldmatrix.x4.trans` (B is
// stored k-major, as in memory). The next stage's global loads are issued
// before the current stage is computed, into registers, and rounded and
// stored into the other of two buffers after it.

#include "matmul_mma_common.cuh"

#define BM 128
#define BN 128
#define BK 32
#define A_STRIDE (BK + 8)
#define B_STRIDE (BN + 8)

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

// The two stages of A's and B's tiles, 16-bit values.
typedef unsigned short TileA[BM][A_STRIDE];
typedef unsigned short TileB[BK][B_STRIDE];

template <bool BF16>
__device__ __forceinline__ void matmul(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ c, unsigned m, unsigned k, unsigned n,
                                       TileA* tile_a, TileB* tile_b)
{
    const unsigned tid = threadIdx.x;
    const unsigned lane = tid & 31u;
    const unsigned warp = tid >> 5;
    const unsigned g = lane >> 2;
    const unsigned t = lane & 3u;
    const unsigned warp_row = (warp >> 2) * 64u;
    const unsigned warp_col = (warp & 3u) * 32u;
    const unsigned row0 = blockIdx.y * BM;
    const unsigned col0 = blockIdx.x * BN;

    // Staging: each thread loads four runs of 4 neighbouring floats of A
    // (row tid / 8 + 32 i, steps 4 (tid % 8) on) and four of B (step
    // tid / 32 + 8 i, columns 4 (tid % 32) on): a warp reads 128
    // contiguous bytes of each row it touches.
    const unsigned a_row = tid >> 3;
    const unsigned a_step = (tid & 7u) * 4u;
    const unsigned b_step = tid >> 5;
    const unsigned b_col = (tid & 31u) * 4u;
    // Blocks wholly inside C, on stages wholly inside k, load without
    // per-element tests; float4 loads where rows and pointers allow.
    const bool inside = row0 + BM <= m && col0 + BN <= n;
    const bool vec_a = (k & 3u) == 0 && ((size_t)a & 15u) == 0;
    const bool vec_b = (n & 3u) == 0 && ((size_t)b & 15u) == 0;
    const float* a_first = a + (size_t)(row0 + a_row) * k + a_step;
    const float* b_first = b + (size_t)b_step * n + col0 + b_col;
    const size_t a_stride = (size_t)32u * k;
    const size_t b_stride = (size_t)8u * n;
    float4 staged_a[4];
    float4 staged_b[4];

    WarpSums acc;
    zero_sums(acc);

    auto load = [&](unsigned k0) {
        const unsigned ka = k0 + a_step;
        const unsigned col = col0 + b_col;
        if (inside && k0 + BK <= k) {
            // One pointer per matrix and a row stride, not one pointer per
            // run: 64-bit addresses are what pushed the kernel past 128
            // registers.
            const float* pa = a_first + k0;
            const float* pb = b_first + (size_t)k0 * n;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float* p = pa + i * a_stride;
                if (vec_a) {
                    staged_a[i] = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    staged_a[i] = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float* p = pb + i * b_stride;
                if (vec_b) {
                    staged_b[i] = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    staged_b[i] = make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
                }
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned r = row0 + a_row + 32u * i;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                v[e] = (r < m && ka + e < k) ? __ldg(a + (size_t)r * k + ka + e) : 0.0f;
            }
            staged_a[i] = make_float4(v[0], v[1], v[2], v[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned kb = k0 + b_step + 8u * i;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                v[e] = (kb < k && col + e < n) ? __ldg(b + (size_t)kb * n + col + e) : 0.0f;
            }
            staged_b[i] = make_float4(v[0], v[1], v[2], v[3]);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 v = staged_a[i];
            uint2 w = make_uint2(pack2<BF16>(v.x, v.y), pack2<BF16>(v.z, v.w));
            *reinterpret_cast<uint2*>(&tile_a[buf][a_row + 32u * i][a_step]) = w;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 v = staged_b[i];
            uint2 w = make_uint2(pack2<BF16>(v.x, v.y), pack2<BF16>(v.z, v.w));
            *reinterpret_cast<uint2*>(&tile_b[buf][b_step + 8u * i][b_col]) = w;
        }
    };

    // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8.
    // A's four matrices of a 16 x 16 fragment: rows +0 and +8 (matrices 0,
    // 1), then the same at steps +8 (2, 3), in the order of a0..a3.
    const unsigned lrow = lane & 7u;
    const unsigned lmat = lane >> 3;
    const unsigned a_frag_row = warp_row + lrow + 8u * (lmat & 1u);
    const unsigned a_frag_step = 8u * (lmat >> 1);
    // B's: steps +0 and +8 of columns +0 (matrices 0, 1: b0, b1 of one 16
    // x 8 fragment), then the same for columns +8 (2, 3).
    const unsigned b_frag_step = lrow + 8u * (lmat & 1u);
    const unsigned b_frag_col = warp_col + 8u * (lmat >> 1);

    load(0u);
    store(0);
    __syncthreads();
    int buf = 0;
    for (unsigned k0 = 0; k0 < k; k0 += BK) {
        const bool more = k0 + BK < k;
        if (more) {
            load(k0 + BK);
        }
#pragma unroll
        for (unsigned s = 0; s < BK; s += 16u) {
            // B's fragments for the stage step first, then A's one row of
            // tiles at a time: 12 fragment registers live, not 24, which
            // keeps the kernel within 128 registers.
            unsigned fb[4][2];
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                const unsigned addr =
                    shared_address(&tile_b[buf][s + b_frag_step][b_frag_col + 8u * j]);
                asm volatile(
                    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                    : "=r"(fb[j][0]), "=r"(fb[j][1]), "=r"(fb[j + 1][0]), "=r"(fb[j + 1][1])
                    : "r"(addr));
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                unsigned fa[4];
                const unsigned addr =
                    shared_address(&tile_a[buf][a_frag_row + 16u * i][s + a_frag_step]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                             : "=r"(fa[0]), "=r"(fa[1]), "=r"(fa[2]), "=r"(fa[3])
                             : "r"(addr));
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    mma16<BF16>(acc[i][j], fa, fb[j]);
                }
            }
        }
        if (more) {
            store(buf ^ 1);
        }
        __syncthreads();
        buf ^= 1;
    }

    store_sums(acc, c, m, n, row0 + warp_row, col0 + warp_col, g, t);
}

// Two blocks per SM (see matmul_mma.cu).
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_mma16(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
             unsigned m, unsigned k, unsigned n, unsigned mode, unsigned chunk)
{
    (void)chunk;
    // Declared here, not in the template, so that both formats share them.
    __shared__ __align__(16) TileA tile_a[2];
    __shared__ __align__(16) TileB tile_b[2];
    if ((mode & 15u) == 2u) {
        matmul<true>(a, b, c, m, k, n, tile_a, tile_b);
    } else {
        matmul<false>(a, b, c, m, k, n, tile_a, tile_b);
    }
}
