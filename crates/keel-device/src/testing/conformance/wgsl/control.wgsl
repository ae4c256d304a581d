@group(0) @binding(0) var<storage, read_write> out: array<u32>;
fn classify(x: u32) -> u32 {
    switch x % 5u {
        case 0u: { return 10u; }
        case 1u, 2u: { return 20u; }
        default: {}
    }
    if x > 40u { return 99u; }
    return 30u;
}
fn bump(p: ptr<function, u32>, by: u32) { *p = *p + by; }
@compute @workgroup_size(8)
fn control(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if i >= 48u { return; }
    var acc = 0u;
    var k = 0u;
    loop {
        if k == i { break; }
        if k % 3u == 0u { k += 1u; continue; }
        bump(&acc, k);
        continuing {
            k += 1u;
            break if k > 20u;
        }
    }
    var w = 0u;
    while w < 3u { acc = acc * 2u; w++; }
    for (var j = 0u; j < i; j++) {
        if j == 5u { break; }
        acc += 1000u;
    }
    out[i] = acc * 1000u + classify(i);
}
