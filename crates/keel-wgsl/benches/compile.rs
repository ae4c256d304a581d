//! What generating a kernel's PTX costs: parsing and validating the WGSL
//! (naga), lowering it, and printing the PTX, for Keel's smallest and
//! largest kernels. A process does this once per kernel (`Kernel`'s
//! cache); the CUDA driver's own compile of the PTX comes after.

use std::path::Path;
use std::time::{Duration, Instant};

const RUNS: usize = 20;

fn read(parts: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    parts
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).expect("kernel source"))
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let kernels = [
        (
            "vector_add",
            read(&["crates/keel-device/shaders/vector_add.wgsl"]),
        ),
        ("philox_randn", read(&["shaders/random/philox.wgsl"])),
        ("softmax_rows", read(&["shaders/compute/softmax_rows.wgsl"])),
        (
            "matmul_tiled",
            read(&[
                "shaders/compute/rounding.wgsl",
                "shaders/compute/matmul_bindings.wgsl",
                "shaders/compute/matmul_tiled.wgsl",
            ]),
        ),
    ];
    println!("kernel           lower (parse, validate, lower)   print PTX   PTX bytes");
    for (name, src) in &kernels {
        let (mut lower, mut print) = (Vec::new(), Vec::new());
        let mut bytes = 0;
        for _ in 0..RUNS {
            let t = Instant::now();
            let p = keel_wgsl::compile(src, name).expect("compiles");
            lower.push(t.elapsed());
            let t = Instant::now();
            let ptx = keel_wgsl::ptx::emit(&p).expect("prints");
            print.push(t.elapsed());
            bytes = ptx.len();
        }
        println!(
            "{name:<16} {:>12.2?} {:>28.2?} {bytes:>10}",
            median(lower),
            median(print)
        );
    }
}
