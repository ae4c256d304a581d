// f16 -> f32 with native 16-bit storage (`enable f16;`, wgpu
// `Features::SHADER_F16`, Vulkan `shaderFloat16` + 16-bit storage): the
// hardware path of `cast.wgsl`'s mode 0, bit for bit the same for every
// non-NaN (the conversion is exact). A NaN stays a NaN, but its sign and
// payload are the hardware's (lavapipe quiets a signalling one, NVIDIA
// returns its canonical NaN), where the emulation keeps them: naga cannot
// bitcast an f16 to integer bits (`bitcast<u32>(vec2<f16>)` is typed as a
// vector), so the kernel cannot tell. Selected by `keel::compute::f16_storage`.
// Bindings: 0 x (array<f16>), 1 out (array<f32>), 2 params (uniform).
// Parameters: n (elements).
// Launch: one invocation per element, 256 per workgroup, 2-D grid as
// add.wgsl.
enable f16;

struct Params {
    n: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f16>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn cast_f16_widen(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = gid.y * groups.x * 256u + gid.x;
    if i >= params.n {
        return;
    }
    out[i] = f32(x[i]);
}
