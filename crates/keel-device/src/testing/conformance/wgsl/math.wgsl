@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> bits: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@compute @workgroup_size(1)
fn math() {
    // Inputs come from memory, so nothing here is folded at compile time.
    let x = v[0];
    out[0] = sqrt(v[1]);
    out[1] = exp(x);
    out[2] = log(v[2]);
    out[3] = sin(x);
    out[4] = cos(x);
    out[5] = pow(v[1], v[9]);
    out[6] = atan2(v[10], v[11]);
    out[7] = tanh(x);
    out[8] = floor(v[3]) + ceil(v[4]) + round(v[5]) + fract(v[6]) + trunc(v[7]);
    out[9] = clamp(v[8], v[12], v[10]) + min(-v[10], v[1]) + max(v[2], -v[13]) + abs(v[15]);
    out[10] = fma(v[1], v[2], v[10]) + mix(v[10], v[2], v[16]) + step(v[9], v[17]);
    out[11] = length(vec3(v[1], v[2], v[14])) + inverseSqrt(v[13]);
    out[12] = v[18] % v[11];
    let u = bitcast<u32>(v[19]);
    bits[0] = countOneBits(u);
    bits[1] = reverseBits(u & 1u);
    bits[2] = firstLeadingBit(u >> 12u);
    bits[3] = firstTrailingBit(u >> 12u);
    bits[4] = extractBits(u, 4u, 8u);
    bits[5] = bitcast<u32>(extractBits(bitcast<i32>(u), 4u, 4u));
    bits[6] = insertBits(~(u & 0u), u & 0u, 8u, 8u);
    bits[7] = countLeadingZeros(u & 1u) + countTrailingZeros(u & 8u);
    bits[8] = bitcast<u32>(firstLeadingBit(bitcast<i32>(~(u & 0u))));
}
