// f32 -> f16 with native 16-bit storage (`enable f16;`): the hardware
// path of `cast.wgsl`'s mode 2, bit for bit the same. WGSL leaves the
// rounding of an f32 -> f16 conversion to the implementation, so the
// value is first rounded to nearest even in f32 (`keel_round_f16`, exact
// f16 values, overflow to infinity, subnormals kept) and only then
// converted, which is exact; a NaN is replaced by the f32 quiet NaN
// 0x7fc00000 with its sign before the conversion, which IEEE conversion
// maps to the emulation's 0x7e00, though a driver may return its own
// canonical NaN (naga cannot bitcast integer bits to f16; the test checks
// that a NaN stays a NaN on each device). Needs `shaders/compute/rounding.wgsl` *after* it
// (`enable` must come first). Selected by `keel::compute::f16_storage`.
// Bindings: 0 x (array<f32>), 1 out (array<f16>), 2 params (uniform).
// Parameters: n (elements).
// Launch: one invocation per element, 256 per workgroup, 2-D grid as
// add.wgsl.
enable f16;

struct Params {
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f16>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn cast_f16_narrow(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = gid.y * groups.x * 256u + gid.x;
    if i >= params.n {
        return;
    }
    let v = x[i];
    let bits = bitcast<u32>(v);
    if (bits & 0x7fffffffu) > 0x7f800000u {
        out[i] = f16(bitcast<f32>((bits & 0x80000000u) | 0x7fc00000u));
        return;
    }
    out[i] = f16(keel_round_f16(v));
}
