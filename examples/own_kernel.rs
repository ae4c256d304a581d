//! A kernel of your own, written once in WGSL, run unchanged on every
//! device present: the CPU (on host threads), Vulkan and wgpu (which
//! compile the WGSL) and CUDA (through the PTX Keel generates from it;
//! `--print-ptx` prints that PTX).
//!
//! On the CPU a kernel made at run time runs on Keel's WGSL interpreter.
//! One known when the program is built can run as native code instead:
//! its Rust translation (`translated/own_kernel.rs`, written by
//! `keel::wgsl::rust::check_file` and kept current by a test of Keel's)
//! is compiled with the program and set as the kernel's `cpu`
//! implementation. `cpu:0` runs both and prints the two times.
//!
//! Run: `cargo run --release --example own_kernel [-- --print-ptx]`

use std::time::{Duration, Instant};

use keel::kernel::{CpuInvocation, run_translated};
use keel::{Buffer, DeviceType, Kernel, Stream};

/// `own_kernel.wgsl` translated to Rust ahead of time. The translation
/// names the runtime it calls `keel_wgsl`, which Keel re-exports as
/// `keel::wgsl`.
mod translated {
    use keel::wgsl as keel_wgsl;
    include!("translated/own_kernel.rs");
}

/// The kernel's host implementation: its translation, run on every
/// thread.
fn leaky_relu_native(inv: &mut CpuInvocation<'_>) -> Result<(), String> {
    run_translated(&translated::LEAKY_RELU, inv)
}

/// The median time of five launches, each synchronised, after one more.
fn timed(launch: &dyn Fn() -> keel::Result<()>, stream: &Stream) -> keel::Result<Duration> {
    launch()?;
    stream.synchronize()?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        launch()?;
        stream.synchronize()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[2])
}

fn main() -> keel::Result<()> {
    let kernel = Kernel::from_wgsl("leaky_relu", include_str!("own_kernel.wgsl"))?;
    let native = Kernel {
        cpu: Some(leaky_relu_native),
        ..kernel
    };
    if std::env::args().any(|a| a == "--print-ptx") {
        println!("{}", kernel.ptx_source()?);
        return Ok(());
    }
    let n = 1_000_003usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 500_000.0) * 1e-3).collect();
    let want: Vec<f32> = x
        .iter()
        .map(|&v| if v > 0.0 { v } else { v * 0.01 })
        .collect();
    let mut params = (n as u32).to_le_bytes().to_vec();
    params.extend(0.01f32.to_le_bytes());
    for ty in DeviceType::ALL {
        if keel::availability(ty).is_err() {
            continue;
        }
        for d in keel::devices(ty) {
            let stream = match keel::default_stream(d) {
                Ok(s) => s,
                Err(e) => {
                    println!("{d}: does not open: {e}");
                    continue;
                }
            };
            let xb = Buffer::from_slice(&stream, &x)?;
            let out = Buffer::new(d, 4 * n)?;
            let t = std::time::Instant::now();
            stream.launch(&kernel, kernel.grid_for(n as u64), &[&xb, &out], &params)?;
            let got = out.read_as::<f32>(&stream)?;
            let same = got == want;
            println!(
                "{d}: {n} elements in {:.2?}, {}",
                t.elapsed(),
                if same {
                    "every bit as the host computes it"
                } else {
                    "DIFFERENT"
                }
            );
            if d.device_type() == DeviceType::Cpu {
                let grid = kernel.grid_for(n as u64);
                let interpreted = timed(
                    &|| stream.launch(&kernel, grid, &[&xb, &out], &params),
                    &stream,
                )?;
                let compiled = timed(
                    &|| stream.launch(&native, grid, &[&xb, &out], &params),
                    &stream,
                )?;
                let same = out.read_as::<f32>(&stream)? == want;
                println!(
                    "{d}: interpreted {interpreted:.2?}, translated to Rust {compiled:.2?} ({:.1}x faster), {}",
                    interpreted.as_secs_f64() / compiled.as_secs_f64(),
                    if same { "the same bits" } else { "DIFFERENT" }
                );
            }
        }
    }
    Ok(())
}
