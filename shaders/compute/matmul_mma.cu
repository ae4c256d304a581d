// C = A * B on tensor cores, in the modes that round the inputs and sum in
// f32: tf32, bf16 or f16 inputs (mode bits 0-3: 1, 2 or 3, the format
// codes of rounding.wgsl). A is m x k, B is k x n, C is m x n, f32,
// row-major, any m, k, n >= 1.
//
// The CUDA override of matmul_tiled_4x4.wgsl in tf32 on devices of
// compute capability 8.0 and later (`mma.sync ... .tf32` is Ampere's);
// Keel runs bf16 and f16 inputs on matmul_mma16.cu, at twice the rate,
// and this kernel takes them too (the benchmark compares the two).
// A value rounded to bf16 or f16 is exactly a tf32 value (their
// significands are no wider, and tf32 has f32's exponent range), so one
// tf32 instruction serves the three modes: each input element is rounded
// once, as it is staged into shared memory, by the same bit operations as
// rounding.wgsl and src/compute/precision.rs (round to nearest, ties to
// even); the tensor core multiplies the rounded values exactly and sums
// in f32 in its own order within each 8-step (docs/NUMERICS.md gives the
// bound), so results are not bit-identical to the portable kernel's.
//
// PTX for Keel's CUDA backend: `cargo xtask mma-ptx` compiles this file
// with NVRTC (CUDA 12.9's, from PyPI) for compute_80 into matmul_mma.ptx,
// which is checked in, declared `.version 7.0` (all it uses, so that
// drivers from CUDA 11 on load it); `cargo xtask test` assembles that
// with ptxas for sm_80 and sm_90 and runs it on keel-wgsl's PTX
// interpreter (tests/ptx_sim.rs). Parameters (Keel's CUDA convention): a, b, c
// as device pointers, then m, k, n, mode, chunk as u32 (chunk is not
// read: the launch code refuses split-K modes).
//
// Launch: blocks of 256 threads, each block computing a 128 x 128 tile of
// C: a grid of ceil(n / 128) x ceil(m / 128). Each of the 8 warps computes
// 64 x 32 of it (warps 2 x 4) as 4 x 4 tiles of 16 x 8, one
// mma.m16n8k8 each per step of 8 along k. Each step of 16 along k stages
// a 128 x 16 tile of A and a 16 x 128 tile of B in shared memory, zeros
// outside the matrices, rows padded (A to 20 floats, B to 136) so that the
// fragment reads of a warp fall on 32 distinct banks: A's by `ldmatrix`
// (four 8 x 4-float matrices are one 16 x 8 tf32 fragment), B's by single
// loads. The next tile's global loads are issued before the current tile
// is computed, into registers (without per-element tests for blocks
// wholly inside C on stages wholly inside k), and rounded and stored into
// the other of two buffers after it. The format is a template parameter,
// so each one's rounding is straight-line code.

#include "matmul_mma_common.cuh"

#define BM 128
#define BN 128
#define BK 16
#define A_STRIDE (BK + 4)
#define B_STRIDE (BN + 8)

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

// The two stages of A's and B's tiles.
typedef float TileA[BM][A_STRIDE];
typedef float TileB[BK][B_STRIDE];

// The kernel's body for one input format (a template parameter, so that
// each format's rounding is straight-line code with constant masks).
template <unsigned FORMAT>
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

    // Staging: A's element i is row (tid / 16) + 16 i, step tid % 16 of
    // the tile (16 threads read 16 neighbouring floats of a row); B's is
    // step (tid / 128) + 2 i, column tid % 128.
    const unsigned a_step = tid & 15u;
    const unsigned a_row = tid >> 4;
    const unsigned b_step = tid >> 7;
    const unsigned b_col = tid & 127u;
    float staged_a[8];
    float staged_b[8];

    WarpSums acc;
    zero_sums(acc);

    // Blocks wholly inside C, on stages wholly inside k, load without
    // per-element tests, from one pointer per matrix and a row stride.
    const bool inside = row0 + BM <= m && col0 + BN <= n;
    const float* a_first = a + (size_t)(row0 + a_row) * k + a_step;
    const float* b_first = b + (size_t)b_step * n + col0 + b_col;
    const size_t a_stride = (size_t)16u * k;
    const size_t b_stride = (size_t)2u * n;

    auto load = [&](unsigned k0) {
        if (inside && k0 + BK <= k) {
            const float* pa = a_first + k0;
            const float* pb = b_first + (size_t)k0 * n;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                staged_a[i] = __ldg(pa + i * a_stride);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                staged_b[i] = __ldg(pb + i * b_stride);
            }
            return;
        }
        const unsigned ka = k0 + a_step;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const unsigned r = row0 + a_row + 16u * i;
            staged_a[i] = (r < m && ka < k) ? a[(size_t)r * k + ka] : 0.0f;
        }
        const unsigned col = col0 + b_col;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const unsigned kb = k0 + b_step + 2u * i;
            staged_b[i] = (kb < k && col < n) ? b[(size_t)kb * n + col] : 0.0f;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            tile_a[buf][a_row + 16u * i][a_step] = keel_round_to<FORMAT>(staged_a[i]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            tile_b[buf][b_step + 2u * i][b_col] = keel_round_to<FORMAT>(staged_b[i]);
        }
    };

    // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8.
    const unsigned lmat = lane >> 3;
    const unsigned a_frag_row = warp_row + (lane & 7u) + 8u * (lmat & 1u);
    const unsigned a_frag_step = 4u * (lmat >> 1);

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
        for (unsigned s = 0; s < BK; s += 8u) {
            unsigned fa[4][4];
            unsigned fb[4][2];
            // A's fragments by `ldmatrix` on 16-bit halves: matrix q of
            // the four is rows +8 (q odd) and steps +4 (q >= 2) of a 16 x 8
            // fragment, 8 rows of 4 floats, and lane l receives the float
            // at row l / 4, step l % 4 of each: a0..a3 of m16n8k8.
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const unsigned addr =
                    shared_address(&tile_a[buf][a_frag_row + 16u * i][s + a_frag_step]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                             : "=r"(fa[i][0]), "=r"(fa[i][1]), "=r"(fa[i][2]), "=r"(fa[i][3])
                             : "r"(addr));
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const unsigned col = warp_col + 8u * j + g;
                fb[j][0] = __float_as_uint(tile_b[buf][s + t][col]);
                fb[j][1] = __float_as_uint(tile_b[buf][s + t + 4u][col]);
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
        if (more) {
            store(buf ^ 1);
        }
        __syncthreads();
        buf ^= 1;
    }

    store_sums(acc, c, m, n, row0 + warp_row, col0 + warp_col, g, t);
}

// Two blocks per SM: ptxas then keeps to 128 registers (161 otherwise,
// which leaves one block and 8 warps per SM).
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_mma(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           unsigned m, unsigned k, unsigned n, unsigned mode, unsigned chunk)
{
    (void)chunk;
    // Declared here, not in the template, so that the formats share them.
    __shared__ __align__(16) TileA tile_a[2];
    __shared__ __align__(16) TileB tile_b[2];
    switch (mode & 15u) {
    case 1u:
        matmul<1u>(a, b, c, m, k, n, tile_a, tile_b);
        break;
    case 2u:
        matmul<2u>(a, b, c, m, k, n, tile_a, tile_b);
        break;
    default:
        matmul<3u>(a, b, c, m, k, n, tile_a, tile_b);
        break;
    }
}
