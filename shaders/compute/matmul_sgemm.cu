// C = A * B in plain f32 (mode 0): A is m x k, B is k x n, C is m x n,
// f32, row-major, any m, k, n >= 1.
//
// The CUDA override of matmul_tiled_4x4.wgsl in plain f32 for large
// products. Each output is the same sum as the 4x4 kernel's on CUDA: the
// products added in k order, each multiply and add fused (ptxas contracts
// the 4x4 kernel's, as WGSL allows), starting from zero. What differs is
// the shape, which the generated PTX cannot reach: 128 x 128 outputs per
// block, 8 x 8 per thread, tiles staged by `cp.async`. Two entry points,
// launched one after the other on the same stream:
//
// - matmul_sgemm_pack copies A transposed (pk x pm: the kernel reads a
//   column of A's tile as one row) and B as it is (pk x pn), padded with
//   zeros to whole tiles: pm and pn m and n rounded up to 128, pk k
//   rounded up to 32.
// - matmul_sgemm multiplies the copies. Having no bounds to test and
//   16-byte aligned rows, it stages 16-step tiles into shared memory by
//   `cp.async` alone, three stages deep, so that two stages' copies are in
//   flight while one is computed. Each step a thread reads 8 values of A
//   and 8 of B by four 16-byte loads and makes 64 fused multiply-adds.
//
// PTX for Keel's CUDA backend: `cargo xtask mma-ptx` compiles this file
// with NVRTC for compute_80 into matmul_sgemm.ptx, which is checked in;
// `cargo xtask test` assembles it with ptxas for sm_80 and sm_90
// and runs it on keel-wgsl's PTX interpreter (tests/ptx_sim.rs).
//
// matmul_sgemm: parameters packed a, packed b, c as device pointers, then
// m, k, n, mode, chunk as u32 (Keel's matmul parameters; mode and chunk
// are not read). Blocks of 256 threads, each computing a 128 x 128 tile
// of C: a grid of pn / 128 x pm / 128. Thread (x, y) of 16 x 16 computes
// rows 4 y.. and 64 + 4 y.., columns 4 x.. and 64 + 4 x.. of it (four
// 4 x 4 blocks: a warp's 16-byte reads of a row then cover it without
// bank conflicts).
//
// matmul_sgemm_pack: parameters src, dst (f32) as device pointers, then
// rows, cols (src's), dst_rows, dst_cols (multiples of 32) and transpose
// (0 or 1) as u32. Blocks of 256 threads, each copying a 32 x 32 tile of
// dst through shared memory: a grid of dst_rows * dst_cols / 1024.

#include "matmul_mma_common.cuh"

#define BM 128
#define BN 128
#define BK 16
#define STAGES 3
// A stage: A's tile (16 rows of 128 floats) and B's, 8 KiB each.
#define TILE_BYTES (BK * 128 * 4)
#define STAGE_BYTES (2 * TILE_BYTES)

extern "C" __global__ void __launch_bounds__(256)
matmul_sgemm_pack(const float* __restrict__ src, float* __restrict__ dst, unsigned rows,
                  unsigned cols, unsigned dst_rows, unsigned dst_cols, unsigned transpose)
{
    // One column more than the tile, so that reading a column of it
    // touches 32 distinct banks.
    __shared__ float tile[32][33];
    const unsigned tiles_across = dst_cols / 32u;
    const unsigned dr = blockIdx.x / tiles_across * 32u;
    const unsigned dc = blockIdx.x % tiles_across * 32u;
    // The source tile: dst's rows are src's columns when transposing.
    const unsigned sr = transpose ? dc : dr;
    const unsigned sc = transpose ? dr : dc;
    const unsigned x = threadIdx.x & 31u;
    const unsigned y = threadIdx.x >> 5;
#pragma unroll
    for (unsigned i = 0; i < 32u; i += 8u) {
        const unsigned r = sr + y + i;
        const unsigned col = sc + x;
        tile[y + i][x] = (r < rows && col < cols) ? __ldg(src + (size_t)r * cols + col) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (unsigned i = 0; i < 32u; i += 8u) {
        const float v = transpose ? tile[x][y + i] : tile[y + i][x];
        dst[(size_t)(dr + y + i) * dst_cols + dc + x] = v;
    }
}

// Two blocks per SM: 48 KiB of shared memory and at most 128 registers
// each.
extern "C" __global__ void __launch_bounds__(256, 2)
matmul_sgemm(const float4* __restrict__ a, const float4* __restrict__ b, float* __restrict__ c,
             unsigned m, unsigned k, unsigned n, unsigned mode, unsigned chunk)
{
    (void)mode;
    (void)chunk;
    __shared__ __align__(128) float stages[STAGES][2][BK][128];
    const unsigned smem = shared_address(stages);
    const unsigned tid = threadIdx.x;
    const unsigned x = tid & 15u;
    const unsigned y = tid >> 4;
    const unsigned row0 = blockIdx.y * BM;
    const unsigned col0 = blockIdx.x * BN;
    // The packed copies' rows, in 16-byte chunks.
    const unsigned a_chunks = (m + 127u) / 128u * 32u;
    const unsigned b_chunks = (n + 127u) / 128u * 32u;
    const unsigned tiles = (k + 31u) / 32u * 2u;

    // Copies: a tile is 16 rows of 32 chunks; each thread copies chunk tid
    // and tid + 256 of A's and of B's.
    const unsigned copy_row = tid >> 5;
    const unsigned copy_chunk = tid & 31u;
    const float4* a_src = a + (size_t)copy_row * a_chunks + row0 / 4u + copy_chunk;
    const float4* b_src = b + (size_t)copy_row * b_chunks + col0 / 4u + copy_chunk;
    const unsigned dst = (copy_row * 128u + copy_chunk * 4u) * 4u;

    auto issue = [&](unsigned tile) {
        const unsigned base = smem + (tile % STAGES) * STAGE_BYTES;
        const size_t step = (size_t)tile * BK;
        cp_async16(base + dst, a_src + step * a_chunks);
        cp_async16(base + dst + 8u * 512u, a_src + (step + 8u) * a_chunks);
        cp_async16(base + TILE_BYTES + dst, b_src + step * b_chunks);
        cp_async16(base + TILE_BYTES + dst + 8u * 512u, b_src + (step + 8u) * b_chunks);
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            acc[i][j] = 0.0f;
        }
    }

    pipeline3(tiles, issue, [&](unsigned tile) {
        const float(*ta)[128] = stages[tile % STAGES][0];
        const float(*tb)[128] = stages[tile % STAGES][1];
#pragma unroll
        for (int s = 0; s < BK; s++) {
            const float4 a0 = *reinterpret_cast<const float4*>(&ta[s][4u * y]);
            const float4 a1 = *reinterpret_cast<const float4*>(&ta[s][64u + 4u * y]);
            const float4 b0 = *reinterpret_cast<const float4*>(&tb[s][4u * x]);
            const float4 b1 = *reinterpret_cast<const float4*>(&tb[s][64u + 4u * x]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
                }
            }
        }
    });

    const bool vec = (n & 3u) == 0 && ((size_t)c & 15u) == 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned row = row0 + (i < 4 ? 4u * y + i : 64u + 4u * y + (i - 4));
        if (row >= m) {
            continue;
        }
        float* out = c + (size_t)row * n;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const unsigned col = col0 + 64u * h + 4u * x;
            const float* v = &acc[i][4 * h];
            if (vec && col + 4u <= n) {
                *reinterpret_cast<float4*>(out + col) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (col + e < n) {
                        out[col + e] = v[e];
                    }
                }
            }
        }
    }
}
