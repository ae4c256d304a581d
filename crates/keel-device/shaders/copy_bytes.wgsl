// Byte-granular copy between storage buffers, for backends whose copy
// commands need 4-byte aligned offsets and sizes (wgpu). Copies `len` bytes
// from byte `src_off` of `src` to byte `dst_off` of `dst`; every invocation
// owns one 32-bit word of `dst`, so no two write the same word. `src` and
// `dst` must be different buffers.
// Bindings: 0 src (read), 1 dst (read_write), 2 params (uniform).
// Launch: ceil(words / 64) workgroups, spread over x and y when more than
// 65535 are needed; words = the dst words the range touches.

struct Params {
    src_off: u32,
    dst_off: u32,
    len: u32,
    row_words: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn copy_bytes(@builtin(global_invocation_id) gid: vec3<u32>) {
    let w = p.dst_off / 4u + gid.x + gid.y * p.row_words;
    let end = p.dst_off + p.len;
    if w * 4u >= end {
        return;
    }
    var word = dst[w];
    for (var k = 0u; k < 4u; k = k + 1u) {
        let pos = w * 4u + k;
        if pos >= p.dst_off && pos < end {
            let s = pos - p.dst_off + p.src_off;
            let b = (src[s / 4u] >> ((s % 4u) * 8u)) & 0xffu;
            word = (word & ~(0xffu << (k * 8u))) | (b << (k * 8u));
        }
    }
    dst[w] = word;
}
