//! Strict floating point ([`Kernel::strict_float`]) on every built-in
//! backend present: a kernel whose results depend on the order of its
//! float operations (a rounding by an add and a subtract, the rounding
//! error of a product, a sum taken apart again) gives the host's IEEE
//! bits wherever the device's properties promise strictness, and every
//! backend that can promise it does. The same source without strictness
//! runs in between, so a pipeline cached for one is never used for the
//! other.

use keel_device::testing::conformance::builtin_devices;
use keel_device::{Buffer, Device, Kernel};

const SOURCE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> z: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
struct Params { n: u32 }
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(64)
fn order(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= p.n {
        return;
    }
    let a = x[i];
    let b = y[i];
    let c = z[i];
    out[4u * i] = (a + 12582912.0) - 12582912.0;
    out[4u * i + 1u] = a * b + c;
    out[4u * i + 2u] = ((a + b) - a) - b;
    out[4u * i + 3u] = a * b + a * c;
}
"#;

/// What the kernel computes for one element, each operation rounded on
/// its own in the source's order (Rust never fuses or reorders).
fn reference(a: f32, b: f32, c: f32) -> [f32; 4] {
    [
        (a + 12582912.0) - 12582912.0,
        a * b + c,
        ((a + b) - a) - b,
        a * b + a * c,
    ]
}

const N: usize = 4099;

fn inputs() -> [Vec<f32>; 3] {
    let x: Vec<f32> = (0..N).map(|i| 0.37 * i as f32 + 0.123).collect();
    let y: Vec<f32> = (0..N).map(|i| 1.0 + i as f32 * 7.0e-7).collect();
    let z: Vec<f32> = x.iter().zip(&y).map(|(a, b)| -(a * b)).collect();
    [x, y, z]
}

/// The kernel's output on `d`, bit patterns.
fn run(d: Device, kernel: &Kernel, [x, y, z]: &[Vec<f32>; 3]) -> Vec<u32> {
    let s = keel_device::default_stream(d).expect("stream");
    let [bx, by, bz] = [x, y, z].map(|v| Buffer::from_slice(&s, v).expect("upload"));
    let out = Buffer::new(d, 16 * N).expect("out");
    s.launch(
        kernel,
        kernel.grid_for(N as u64),
        &[&bx, &by, &bz, &out],
        &(N as u32).to_le_bytes(),
    )
    .expect("launch");
    out.read_as::<f32>(&s)
        .expect("read")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn strict_kernels_keep_the_order_of_their_source() {
    let plain = Kernel::from_wgsl("order", SOURCE).expect("kernel");
    let strict = Kernel {
        strict_float: true,
        ..plain
    };
    let data = inputs();
    let want: Vec<u32> = (0..N)
        .flat_map(|i| reference(data[0][i], data[1][i], data[2][i]))
        .map(f32::to_bits)
        .collect();
    // The inputs exercise every line: none of the four is the identity.
    assert!((0..N).all(|i| want[4 * i] != data[0][i].to_bits()));
    assert!((0..N).any(|i| want[4 * i + 2] != 0));
    for (label, d) in builtin_devices() {
        let promised = keel_device::properties(d).expect("properties").strict_float;
        // Each of these can say it through its API (wgpu's Vulkan adapter
        // through passthrough shaders, which Keel requests).
        let can = matches!(label, "cpu" | "cuda" | "vulkan" | "wgpu Vulkan");
        assert_eq!(promised, can, "{label} ({d}): properties.strict_float");
        let loose = run(d, &plain, &data);
        let got = run(d, &strict, &data);
        let again = run(d, &plain, &data);
        assert_eq!(loose, again, "{label}: the plain kernel, twice");
        let reordered = (0..4 * N).filter(|&i| loose[i] != want[i]).count();
        if !promised {
            println!(
                "{label} ({d}): strict floating point not promised (naga's output for this API \
                 has no way to say it); the plain kernel differs from the source's order in \
                 {reordered} of {} values",
                4 * N
            );
            continue;
        }
        let wrong = (0..4 * N).find(|&i| got[i] != want[i]);
        assert_eq!(
            wrong.map(|i| (
                i / 4,
                i % 4,
                f32::from_bits(got[i]),
                f32::from_bits(want[i])
            )),
            None,
            "{label} ({d}): (element, line, got, source order)"
        );
        println!(
            "{label} ({d}): strict kernel in the source's order; without strictness \
             {reordered} of {} values differ",
            4 * N
        );
    }
}
