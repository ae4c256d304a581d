// Scalar stand-ins for shaders/compute/coop_matrix.wgsl, so that the rest
// of matmul_coop.wgsl runs on the CPU backend's interpreter (which has no
// cooperative matrices): every invocation holds a whole 16 x 16 fragment
// and computes it alone; the invocations of a subgroup compute the same
// values, so their stores agree. f16 values are kept as f32 (each staged
// value is an f16 already, so nothing is lost), and products are summed
// in f32 in k order.

alias Half = f32;
alias FragA = array<f32, 256>;
alias FragB = array<f32, 256>;
alias FragC = array<f32, 256>;

fn frag_a(i: u32, stride: u32) -> FragA {
    var f: FragA;
    for (var r = 0u; r < 16u; r++) {
        for (var col = 0u; col < 16u; col++) {
            f[16u * r + col] = stage_a[i + stride * r + col];
        }
    }
    return f;
}

fn frag_b(i: u32, stride: u32) -> FragB {
    var f: FragB;
    for (var r = 0u; r < 16u; r++) {
        for (var col = 0u; col < 16u; col++) {
            f[16u * r + col] = stage_b[i + stride * r + col];
        }
    }
    return f;
}

fn frag_mad(a: FragA, b: FragB, acc: FragC) -> FragC {
    var fa = a;
    var fb = b;
    var d = acc;
    for (var r = 0u; r < 16u; r++) {
        for (var col = 0u; col < 16u; col++) {
            var s = d[16u * r + col];
            for (var j = 0u; j < 16u; j++) {
                s += fa[16u * r + j] * fb[16u * j + col];
            }
            d[16u * r + col] = s;
        }
    }
    return d;
}

fn frag_store(acc: FragC, i: u32, stride: u32) {
    var f = acc;
    for (var r = 0u; r < 16u; r++) {
        for (var col = 0u; col < 16u; col++) {
            scratch[i + stride * r + col] = f[16u * r + col];
        }
    }
}
