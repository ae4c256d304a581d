// The cooperative-matrix operations of matmul_coop.wgsl, on the device's
// matrix units (VK_KHR_cooperative_matrix; wgpu's
// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX`): square fragments held by
// a subgroup, f16 A and B, an f32 accumulator. Prepended first to the
// kernel's source (src/compute/matmul.rs), for its `enable` directives,
// and followed by one of coop_fragment16.wgsl and coop_fragment8.wgsl,
// which name the fragment types and their size for the device's
// configuration. The kernel names its types and operations through
// these aliases and functions only, so that a test can prepend scalar
// versions of them instead and run the rest of the kernel on the CPU
// (tests/ops).

enable f16;
enable wgpu_cooperative_matrix;

// An input element as the packing pass stores it.
alias Half = f16;

// The invocation's subgroup and its lane in it, from the built-ins.
fn subgroup_place(li: u32, id: u32, lane: u32) -> vec2<u32> {
    return vec2<u32>(id, lane);
}

// Fragments from the packed copies of A and B (storage memory),
// row-major with `stride` elements from one row to the next, starting at
// element `i`.
fn frag_a(i: u32, stride: u32) -> FragA {
    return coopLoadT<FragA>(&a[i], stride);
}

fn frag_b(i: u32, stride: u32) -> FragB {
    return coopLoadT<FragB>(&b[i], stride);
}

// acc + a * b.
fn frag_mad(a: FragA, b: FragB, acc: FragC) -> FragC {
    return coopMultiplyAdd(a, b, acc);
}

// `acc` into the workgroup's f32 scratch, row-major, from element `i`.
fn frag_store(acc: FragC, i: u32, stride: u32) {
    coopStoreT(acc, &scratch[i], stride);
}
