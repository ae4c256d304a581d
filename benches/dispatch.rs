//! Dispatch overhead: a tiny operator (`add` of two 256-element f32
//! tensors) through the dispatcher, against launching the same kernel
//! directly with `Stream::launch` on a new output buffer (the same work:
//! one allocation, one launch). Batches of 100, then a stream
//! synchronize, both ways. On the CPU, Vulkan, and each wgpu adapter.
//! Goal: dispatched / direct <= 1.15.
//!
//! Run: `cargo bench --bench dispatch -- --warm-up-time 1 --measurement-time 3`.
//! Results in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use keel::dispatch::{ADD_F32, CPU_ADD, elementwise_grid};
use keel::{Buffer, DType, Device, DeviceType, Tensor};

const N: usize = 256;
const BATCH: usize = 100;

fn devices() -> Vec<Device> {
    let mut out = vec![Device::new(DeviceType::Cpu, 0).expect("cpu")];
    for ty in [DeviceType::Vulkan, DeviceType::Wgpu] {
        match keel::availability(ty) {
            Ok(()) => out.extend(keel::devices(ty)),
            Err(e) => eprintln!("skipping {ty}: {e}"),
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_add_256");
    for d in devices() {
        let stream = keel::current_stream(d).expect("stream");
        let a = Tensor::full(&[N], 1.0, DType::F32, d).expect("a");
        let b = Tensor::full(&[N], 2.0, DType::F32, d).expect("b");
        g.bench_function(format!("{d} dispatched x{BATCH}"), |bench| {
            bench.iter(|| {
                for _ in 0..BATCH {
                    black_box(a.add(&b).expect("add"));
                }
                stream.synchronize().expect("sync");
            })
        });
        let (kernel, grid, params) = if d.is_cpu() {
            let p = [
                0u32.to_le_bytes(),
                (N as u32).to_le_bytes(),
                0u32.to_le_bytes(),
            ]
            .concat();
            (CPU_ADD, [1, 1, 1], p)
        } else {
            (
                ADD_F32,
                elementwise_grid(N as u64),
                (N as u32).to_le_bytes().to_vec(),
            )
        };
        g.bench_function(format!("{d} direct launch x{BATCH}"), |bench| {
            bench.iter(|| {
                for _ in 0..BATCH {
                    let out = Buffer::empty(d, 4 * N).expect("out");
                    stream
                        .launch(&kernel, grid, &[a.buffer(), b.buffer(), &out], &params)
                        .expect("launch");
                    black_box(out);
                }
                stream.synchronize().expect("sync");
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
