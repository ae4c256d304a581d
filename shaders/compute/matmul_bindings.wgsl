// The bindings and parameters every matmul kernel shares, prepended to
// its source (src/compute/matmul.rs): A is m x k, B is k x n, C is m x n,
// f32, row-major. `mode` and `chunk` are the precision (see
// matmul_tiled.wgsl); matmul_tiled_4x4.wgsl, plain f32 only, reads
// neither.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    mode: u32,
    chunk: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

