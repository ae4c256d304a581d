// Scalar stand-ins for shaders/compute/coop_matrix.wgsl, so that the rest
// of matmul_coop.wgsl runs on the CPU backend's interpreter (which has no
// cooperative matrices): every invocation holds a whole FRAG x FRAG
// fragment and computes it alone; the invocations of a subgroup compute the same
// values, so their stores agree. f16 values are kept as f32 (each packed
// value is an f16 already, so nothing is lost), and products are summed
// in f32 in k order.

alias Half = f32;
alias FragA = array<f32, FRAG * FRAG>;
alias FragB = array<f32, FRAG * FRAG>;
alias FragC = array<f32, FRAG * FRAG>;

// The subgroups of the fragment size's configuration (FRAG and SUBGROUP
// are set by the test), numbered as a device numbers them in a
// workgroup of whole subgroups: the host's own subgroups are 32 wide
// whatever the configuration.
fn subgroup_place(li: u32, id: u32, lane: u32) -> vec2<u32> {
    return vec2<u32>(li / SUBGROUP, li % SUBGROUP);
}

fn frag_a(i: u32, stride: u32) -> FragA {
    var f: FragA;
    for (var r = 0u; r < FRAG; r++) {
        for (var col = 0u; col < FRAG; col++) {
            f[FRAG * r + col] = a[i + stride * r + col];
        }
    }
    return f;
}

fn frag_b(i: u32, stride: u32) -> FragB {
    var f: FragB;
    for (var r = 0u; r < FRAG; r++) {
        for (var col = 0u; col < FRAG; col++) {
            f[FRAG * r + col] = b[i + stride * r + col];
        }
    }
    return f;
}

fn frag_mad(a: FragA, b: FragB, acc: FragC) -> FragC {
    var fa = a;
    var fb = b;
    var d = acc;
    for (var r = 0u; r < FRAG; r++) {
        for (var col = 0u; col < FRAG; col++) {
            var s = d[FRAG * r + col];
            for (var j = 0u; j < FRAG; j++) {
                s += fa[FRAG * r + j] * fb[FRAG * j + col];
            }
            d[FRAG * r + col] = s;
        }
    }
    return d;
}

fn frag_store(acc: FragC, i: u32, stride: u32) {
    var f = acc;
    for (var r = 0u; r < FRAG; r++) {
        for (var col = 0u; col < FRAG; col++) {
            scratch[i + stride * r + col] = f[FRAG * r + col];
        }
    }
}
