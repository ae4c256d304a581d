// out[r][j] = exp(x[r][j] - max_r) / sum_j' exp(x[r][j'] - max_r): a
// numerically stable softmax of each row of a rows x cols f32 matrix.
// One workgroup per row: its invocations stride over the columns, and the
// row's maximum and sum are reduced in a tree in workgroup memory. Each
// pass over the row takes four columns a step (j, j + 256, j + 512,
// j + 768), their loads issued together so that a GPU has four in flight
// per invocation, then the columns left one at a time; the sum still
// adds in column order, so the bits are those of one column a step.
// Bindings: 0 x (read), 1 out (read_write), 2 params (uniform).
// Launch: workgroups of 256; row r is workgroup (r % 65535, r / 65535).

struct Params {
    rows: u32,
    cols: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

var<workgroup> scratch: array<f32, 256>;

@compute @workgroup_size(256)
fn softmax_rows(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = wg.x + wg.y * 65535u;
    if row >= params.rows {
        return;
    }
    let cols = params.cols;
    let base = row * cols;
    // Columns below `wide` are taken four a step.
    let wide = cols - min(cols, 768u);
    var m = -3.4028235e38;
    var j = t;
    for (; j < wide; j += 1024u) {
        let a = x[base + j];
        let b = x[base + j + 256u];
        let c = x[base + j + 512u];
        let d = x[base + j + 768u];
        m = max(m, max(max(a, b), max(c, d)));
    }
    for (; j < cols; j += 256u) {
        m = max(m, x[base + j]);
    }
    scratch[t] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if t < s {
            scratch[t] = max(scratch[t], scratch[t + s]);
        }
        workgroupBarrier();
    }
    let row_max = scratch[0];
    workgroupBarrier();
    var acc = 0.0;
    j = t;
    for (; j < wide; j += 1024u) {
        let a = x[base + j];
        let b = x[base + j + 256u];
        let c = x[base + j + 512u];
        let d = x[base + j + 768u];
        acc += exp(a - row_max);
        acc += exp(b - row_max);
        acc += exp(c - row_max);
        acc += exp(d - row_max);
    }
    for (; j < cols; j += 256u) {
        acc += exp(x[base + j] - row_max);
    }
    scratch[t] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if t < s {
            scratch[t] += scratch[t + s];
        }
        workgroupBarrier();
    }
    // One division per row, then a multiply per column: within the
    // tests' bound of the quotient (one more rounding), and a GPU's
    // correctly rounded division takes a dozen instructions and a call.
    let inv_total = 1.0 / scratch[0];
    j = t;
    for (; j < wide; j += 1024u) {
        let a = x[base + j];
        let b = x[base + j + 256u];
        let c = x[base + j + 512u];
        let d = x[base + j + 768u];
        out[base + j] = exp(a - row_max) * inv_total;
        out[base + j + 256u] = exp(b - row_max) * inv_total;
        out[base + j + 512u] = exp(c - row_max) * inv_total;
        out[base + j + 768u] = exp(d - row_max) * inv_total;
    }
    for (; j < cols; j += 256u) {
        out[base + j] = exp(x[base + j] - row_max) * inv_total;
    }
}
