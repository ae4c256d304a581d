// What the tensor-core matmuls (matmul_mma.cu, matmul_mma16.cu) share:
// the warp's 64 x 32 accumulators as 4 x 4 mma tiles of 16 x 8, their
// zeroing and their store into C, and shared-memory addresses for
// `ldmatrix`. Included by both; `cargo xtask mma-ptx` passes this folder
// to NVRTC as an include path.

#pragma once

// A warp's sums: tile (i, j) is rows 16 i.., columns 8 j.. of its 64 x 32;
// element e as an mma's c0..c3 (c0, c1: row g, columns 2t and 2t + 1;
// c2, c3: row g + 8).
typedef float WarpSums[4][4][4];

__device__ __forceinline__ unsigned shared_address(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void zero_sums(WarpSums& acc)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc[i][j][e] = 0.0f;
            }
        }
    }
}

// Stores the warp's sums whose top-left output is (row0, col0), lane
// (g, t), into the m x n matrix c, leaving out what lies past its edges.
__device__ __forceinline__ void store_sums(const WarpSums& acc, float* __restrict__ c,
                                           unsigned m, unsigned n, unsigned row0,
                                           unsigned col0, unsigned g, unsigned t)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned col = col0 + 8u * j + 2u * t;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned row = row0 + 16u * i + g + 8u * h;
                if (row < m) {
                    float* out = c + (size_t)row * n;
                    if (col < n) {
                        out[col] = acc[i][j][2 * h];
                    }
                    if (col + 1u < n) {
                        out[col + 1u] = acc[i][j][2 * h + 1];
                    }
                }
            }
        }
    }
}

// Copies 16 bytes from global memory at `src` to shared memory at the
// shared-space address `dst`, asynchronously (Ampere's `cp.async`,
// bypassing L1); both 16-byte aligned. The copy lands by the
// `cp_async_wait` that leaves its group behind.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;");
}

// Waits until at most `PENDING` of this thread's committed groups are in
// flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING));
}

// The kernels' main loop over `tiles` stages along k in a ring of three
// buffers: `issue(tile)` starts the copies of a stage into buffer tile %
// 3, `compute(tile)` uses it. Two stages are in flight before the first
// is computed; a group is committed every step, empty past the last
// tile, so that "all but the newest group" is always the stage about to
// be computed. One barrier per stage: after it every thread's copies of
// the stage have landed, and every warp is done with the buffer the next
// copies overwrite (computed the step before).
template <typename Issue, typename Compute>
__device__ __forceinline__ void pipeline3(unsigned tiles, Issue issue, Compute compute)
{
    issue(0u);
    cp_async_commit();
    if (tiles > 1u) {
        issue(1u);
    }
    cp_async_commit();
    for (unsigned tile = 0; tile < tiles; tile++) {
        cp_async_wait<1>();
        __syncthreads();
        if (tile + 2u < tiles) {
            issue(tile + 2u);
        }
        cp_async_commit();
        compute(tile);
    }
}

// The piece of a packed copy (dst_rows x dst_cols values, rows of whole
// pieces) that a packing pass's thread writes: PER values at row `r`
// from column `c0`, piece `i` of the copy, one thread per piece in
// blocks of 256 along x. Read from a row-major rows x cols source at
// `p`: its first `inside` values lie in the source (the rest of the
// piece is padding, zeros), and `whole` says that all PER do and start
// on 16 bytes, so that vector loads read them.
template <typename T>
struct PackPiece {
    size_t i;
    unsigned r;
    unsigned c0;
    const T* p;
    unsigned inside;
    bool whole;
};

// The thread's piece, or false past the copy's end.
template <unsigned PER, typename T>
__device__ __forceinline__ bool pack_piece(const T* src, unsigned rows, unsigned cols,
                                           unsigned dst_rows, unsigned dst_cols, PackPiece<T>& at)
{
    const unsigned per_row = dst_cols / PER;
    at.i = (size_t)blockIdx.x * 256u + threadIdx.x;
    if (at.i >= (size_t)dst_rows * per_row) {
        return false;
    }
    at.r = (unsigned)(at.i / per_row);
    at.c0 = (unsigned)(at.i % per_row) * PER;
    at.p = src + (size_t)at.r * cols + at.c0;
    at.inside = at.r < rows && at.c0 < cols ? min(PER, cols - at.c0) : 0u;
    at.whole = at.inside == PER && ((size_t)at.p & 15u) == 0;
    return true;
}

// Both tensor-core kernels' blocks: 256 threads over a 128 x 128 tile of
// C, 8 warps of 64 x 32 outputs (warps 2 x 4); a lane is (g, t) = (lane /
// 4, lane % 4), as the mma fragments number them.
struct WarpPlace {
    unsigned tid, lane, g, t, warp_row, warp_col, row0, col0;
};

__device__ __forceinline__ WarpPlace warp_place()
{
    WarpPlace w;
    w.tid = threadIdx.x;
    w.lane = w.tid & 31u;
    const unsigned warp = w.tid >> 5;
    w.g = w.lane >> 2;
    w.t = w.lane & 3u;
    w.warp_row = (warp >> 2) * 64u;
    w.warp_col = (warp & 3u) * 32u;
    w.row0 = blockIdx.y * 128u;
    w.col0 = blockIdx.x * 128u;
    return w;
}

// A stage's A tile in both tensor-core kernels: 128 rows of 64 bytes (16
// tf32 steps or 32 16-bit ones), unpadded; the 16-byte chunk q of row r
// lies at chunk q ^ ((r / 2) % 4). The eight rows an `ldmatrix` matrix
// reads differ in r % 2 (the half of the banks) and (r / 2) % 4, so they
// fall on distinct banks. The byte offset of chunk q of row r:
__device__ __forceinline__ unsigned a_tile_offset(unsigned r, unsigned q)
{
    return r * 64u + ((q ^ ((r >> 1) & 3u)) * 16u);
}

// A lane's rows of the A tile for `ldmatrix.x4`: lane l gives the address
// of row l % 8 of matrix l / 8; the four matrices are rows +0 and +8
// (matrices 0, 1) of the first 16 bytes of a fragment's 32, then the same
// of the second (2, 3), which gives the registers of an mma A fragment in
// order.
struct AFragments {
    // The lane's row in the warp's first m-tile, as a byte offset.
    unsigned row;
    // (r / 2) % 4 of that row: the same in every m-tile (16 rows on).
    unsigned swizzle;
    // Which 16 bytes of the fragment's 32 the lane reads.
    unsigned half;

    // The lane's address for m-tile i (16 rows) of the warp and fragment
    // s (32 bytes of each row) of the A tile at `base`.
    __device__ __forceinline__ unsigned at(unsigned base, unsigned i, unsigned s) const
    {
        return base + row + i * 16u * 64u + (((2u * s + half) ^ swizzle) * 16u);
    }
};

__device__ __forceinline__ AFragments a_fragments(unsigned warp_row, unsigned lane)
{
    const unsigned lrow = lane & 7u;
    const unsigned lmat = lane >> 3;
    AFragments f;
    f.row = (warp_row + lrow + 8u * (lmat & 1u)) * 64u;
    f.swizzle = (lrow >> 1) & 3u;
    f.half = lmat >> 1;
    return f;
}

// Four 8 x 8 matrices of 16-bit values from shared memory, lane l giving
// the address of row l % 8 of matrix l / 8; `.trans` reads them
// transposed.
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned& r0, unsigned& r1,
                                            unsigned& r2, unsigned& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned addr, unsigned& r0, unsigned& r1,
                                                  unsigned& r2, unsigned& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
