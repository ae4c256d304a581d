// C = A * B, one invocation per output (the baseline the tiled kernel is
// measured against). A is m x k, B is k x n, C is m x n, f32, row-major.
// Bindings: 0 a (read), 1 b (read), 2 c (read_write), 3 params (uniform),
// declared in matmul_bindings.wgsl, which the launch code prepends.
// Launch: workgroups of 16 x 16, a grid of ceil(n / 16) x ceil(m / 16).
// Precision (`mode`, `chunk`): see matmul_tiled.wgsl; the same numerics.

@compute @workgroup_size(16, 16)
fn matmul_naive(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = gid.y;
    let col = gid.x;
    let k = params.k;
    let n = params.n;
    if row >= params.m || col >= n {
        return;
    }
    let a0 = row * k;
    if params.mode == 0u {
        var acc = 0.0;
        for (var i = 0u; i < k; i++) {
            acc += a[a0 + i] * b[i * n + col];
        }
        c[row * n + col] = acc;
        return;
    }
    let f_in = params.mode & 15u;
    let f_acc = (params.mode >> 4u) & 15u;
    let f_red = (params.mode >> 8u) & 15u;
    let chunk = select(params.chunk, k, params.chunk == 0u);
    var part = 0.0;
    var total = 0.0;
    for (var i = 0u; i < k; i++) {
        let p = keel_round_to(a[a0 + i], f_in) * keel_round_to(b[i * n + col], f_in);
        part = keel_round_to(part + p, f_acc);
        if (i + 1u) % chunk == 0u || i + 1u == k {
            total = keel_round_to(total + keel_round_to(part, f_red), f_red);
            part = 0.0;
        }
    }
    c[row * n + col] = total;
}
