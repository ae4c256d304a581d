struct Item { pos: vec3<f32>, w: f32, id: u32, pair: vec2<u32> }
@group(0) @binding(0) var<storage, read> items: array<Item>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(4)
fn struct_layout(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if i >= arrayLength(&items) { return; }
    let it = items[i];
    out[i] = bitcast<u32>(it.pos.y + it.w) + it.id + it.pair.y;
}
