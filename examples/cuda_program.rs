//! A CUDA-driver program (cudarc) that hands its stream to Keel: its own
//! kernels and Keel's matmul run in order on the program's stream, on the
//! program's memory, with no copy and no synchronisation between them,
//! and Keel's profiler times the program's kernels on that stream beside
//! its own.
//!
//! Run: `cargo run --release --example cuda_program [-- FILE]` on a
//! machine with an NVIDIA GPU (`FILE`: where to save the trace). Without
//! one it says so and exits.

use std::error::Error;

use cudarc::driver::{CudaContext, DevicePtr, LaunchConfig, PushKernelArg};
use keel::DeviceType;
use keel::compute::{MatmulOptions, matmul};
use keel::interop::cuda as interop;

/// The program's own kernel: `x[i] *= alpha`. A program brings PTX from
/// nvcc or NVRTC; this one writes WGSL and prints its PTX with keel-wgsl,
/// in process, so the example needs no CUDA toolkit.
const SCALE: &str = "
struct Params { alpha: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;
@compute @workgroup_size(256)
fn scale(@builtin(global_invocation_id) g: vec3<u32>) {
    if g.x < p.n { x[g.x] = p.alpha * x[g.x]; }
}
";

fn main() -> Result<(), Box<dyn Error>> {
    if !keel::is_available(DeviceType::Cuda) {
        println!(
            "skipped: this example needs an NVIDIA GPU ({})",
            keel::availability(DeviceType::Cuda)
                .err()
                .map_or_else(String::new, |e| e.to_string())
        );
        return Ok(());
    }
    let save = std::env::args().nth(1);

    // The program: its context, its stream, its kernel, its memory.
    let ctx = CudaContext::new(0)?;
    let theirs = ctx.new_stream()?;
    let ptx = keel::wgsl::ptx::emit(&keel::wgsl::compile(SCALE, "scale")?)?;
    let scale = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))?
        .load_function("scale")?;
    let n = 512usize;
    let a_host: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let b_host: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 11) as f32 * 0.25).collect();
    let a = theirs.clone_htod(&a_host)?;
    let b = theirs.clone_htod(&b_host)?;
    let c = theirs.alloc_zeros::<f32>(n * n)?;
    let launch_scale = |x: &cudarc::driver::CudaSlice<f32>, alpha: f32| {
        let count = u32::try_from(x.len()).unwrap_or(u32::MAX);
        let bytes = (x.len() * 4) as u64;
        let mut args = theirs.launch_builder(&scale);
        args.arg(x).arg(&alpha).arg(&count).arg(&bytes);
        // The block is the WGSL workgroup (the PTX declares it as
        // `.maxntid 256`, and the driver refuses a larger one).
        let config = LaunchConfig {
            grid_dim: (count.div_ceil(256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments follow keel-wgsl's parameter ABI for this
        // entry (buffer pointer, the parameter words, the buffer's byte
        // length); the grid covers `count` invocations.
        unsafe { args.launch(config) }.map(drop)
    };

    // Keel on the program's stream and memory.
    let stream = interop::adopt_stream(&theirs)?;
    let device = stream.device();
    println!(
        "the program's stream is {device}'s stream {:#x}",
        stream.id()
    );
    let session = keel::profiler::start()?;
    {
        let _step = keel::profiler::range("step");
        {
            let _k = keel::profiler::device_range(&stream, "program: scale a by 2");
            launch_scale(&a, 2.0)?;
        }
        let (pa, _ga) = a.device_ptr(&theirs);
        let (pb, _gb) = b.device_ptr(&theirs);
        let (pc, _gc) = c.device_ptr(&theirs);
        let bytes = n * n * 4;
        // SAFETY: the three allocations are the program's, of `bytes`
        // bytes each, and outlive the Keel buffers (dropped below, before
        // the program frees them).
        let (ka, kb, kc) = unsafe {
            (
                interop::adopt_buffer(device, pa, bytes)?,
                interop::adopt_buffer(device, pb, bytes)?,
                interop::adopt_buffer(device, pc, bytes)?,
            )
        };
        matmul(&stream, &ka, &kb, &kc, n, n, n, &MatmulOptions::default())?;
        {
            let _k = keel::profiler::device_range(&stream, "program: scale c by 0.5");
            launch_scale(&c, 0.5)?;
        }
        drop((ka, kb, kc));
    }
    let got = theirs.clone_dtoh(&c)?;
    let trace = session.stop();

    // c = 0.5 * (2a) b = a b.
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in 0..n {
            let want: f64 = (0..n)
                .map(|k| f64::from(a_host[i * n + k]) * f64::from(b_host[k * n + j]))
                .sum();
            worst = worst.max((f64::from(got[i * n + j]) - want).abs() / want.abs().max(1.0));
        }
    }
    println!("c = a b on the program's stream: largest relative error {worst:.2e}");
    if worst > 1e-4 {
        return Err(format!("matmul on the program's stream is off by {worst:.2e}").into());
    }
    let lane_spans = |name: &str| {
        trace
            .spans
            .iter()
            .filter(|s| s.name.starts_with(name))
            .count()
    };
    println!(
        "trace: {} spans; the program's kernels timed {} times, Keel's matmul {} times",
        trace.spans.len(),
        lane_spans("program:"),
        lane_spans("matmul")
    );
    if let Some(path) = save {
        keel::profiler::save_trace(&trace, std::path::Path::new(&path))?;
        println!("saved {path}");
    }
    Ok(())
}
