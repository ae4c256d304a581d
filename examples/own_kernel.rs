//! A kernel of your own, written once in WGSL, run unchanged on every
//! device present: the CPU (on host threads), Vulkan and wgpu (which
//! compile the WGSL) and CUDA (through the PTX Keel generates from it;
//! `--print-ptx` prints that PTX).
//!
//! Run: `cargo run --release --example own_kernel [-- --print-ptx]`

use keel::{Buffer, DeviceType, Kernel};

fn main() -> keel::Result<()> {
    let kernel = Kernel::from_wgsl("leaky_relu", include_str!("own_kernel.wgsl"))?;
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
        }
    }
    Ok(())
}
