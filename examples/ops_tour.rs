//! The operators on every device: the same small program (input, matmul,
//! softmax, sum, and elementwise work) runs on each available device, its
//! results compared to the CPU's; then it runs again under the profiler,
//! and the trace (`ops_trace.json`: open it in https://ui.perfetto.dev)
//! shows each operator as a `cpu_op` span with the kernels it launched
//! beneath it, linked by flows.
//!
//! The inputs come from `randn` with a generator seeded the same on each
//! device: the same numbers everywhere (bit-identical words; Box-Muller's
//! `log`/`cos`/`sin` may differ in the last bit between backends). On
//! GPUs every operator here runs the device's own kernels (`matmul`,
//! `sum` and `softmax` are the compute kernels), with the matmul's
//! precision mode in its span's arguments.
//!
//! Run: `cargo run --example ops_tour [-- OUT_DIR]`

use std::path::PathBuf;

use keel::generator::Generator;
use keel::{DType, Device, DeviceType, Tensor};

const M: usize = 64;
const K: usize = 96;
const N: usize = 48;

/// The program: softmax(a @ b * 0.1 + 1) with `a`, `b` from `randn`
/// (seed 2026 on `d`'s own generator), and its sum (which is M: each row
/// sums to 1).
fn program(d: Device) -> keel::Result<(Vec<f32>, f32)> {
    let _range = keel::profiler::range(format!("ops on {d}"));
    let g = Generator::new(d)?;
    g.manual_seed(2026);
    let a = keel::dispatch::randn(&[M, K], d, Some(&g))?;
    let b = keel::dispatch::randn(&[K, N], d, Some(&g))?;
    let logits = a.matmul(&b)?.mul_scalar(0.1)?;
    let ones = Tensor::ones(&[M, N], DType::F32, d)?;
    let p = logits.add(&ones)?.softmax()?;
    let total = p.sum()?;
    Ok((p.to_vec::<f32>()?, total.to_vec::<f32>()?[0]))
}

fn main() -> keel::Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    // Every device that opens; one that is listed but does not open (wgpu's
    // GL adapter on NVIDIA's headless EGL, say) is reported and left out.
    let devices: Vec<Device> = DeviceType::ALL
        .into_iter()
        .flat_map(keel::devices)
        .filter(|&d| match keel::properties(d) {
            Ok(_) => true,
            Err(e) => {
                println!("{d:>8}: skipped, it does not open: {e}");
                false
            }
        })
        .collect();
    let (reference, _) = program(Device::cpu())?;
    for &d in &devices {
        let (p, total) = program(d)?;
        let worst = p
            .iter()
            .zip(&reference)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        println!("{d:>8}: sum = {total:.5} (expected {M}), max |p - p_cpu| = {worst:.2e}");
        if worst > 1e-5 || (total - M as f32).abs() > 1e-3 {
            return Err(keel::Error::invalid(format!(
                "{d}: expected results within 1e-5 of the CPU's, found {worst:e}"
            )));
        }
    }

    let session = keel::profiler::start()?;
    for &d in &devices {
        keel::profiler::step();
        program(d)?;
    }
    let trace = session.stop();
    let ops = trace
        .spans
        .iter()
        .filter(|s| s.kind == keel::profiler::SpanKind::Operator)
        .count();
    let path = out.join("ops_trace.json");
    keel::profiler::save_trace(&trace, &path)?;
    println!(
        "wrote {}: {ops} operator spans, {} spans, {} flows",
        path.display(),
        trace.spans.len(),
        trace.flows.len()
    );
    Ok(())
}
