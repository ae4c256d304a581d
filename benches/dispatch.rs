//! Dispatch overhead: a tiny operator (`add` of two 256-element f32
//! tensors) through the dispatcher, against launching the same kernel
//! directly with `Stream::launch` on a new output buffer (the same work:
//! one allocation, one launch). Batches of 100, then a stream
//! synchronize, both ways, both in every iteration. On the CPU, Vulkan, and each wgpu adapter.
//! Goal: dispatched / direct <= 1.15. Each device also prints the ratio
//! from paired batches (`paired_ratio`).
//!
//! Run: `cargo bench --bench dispatch -- --warm-up-time 1 --measurement-time 3`.
//! Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use keel::dispatch::{ADD_F32, CPU_ADD, elementwise_grid};
use keel::{Buffer, DType, Device, DeviceType, Tensor};

mod common;

const N: usize = 256;
const BATCH: usize = 100;

fn devices() -> Vec<Device> {
    let mut out = vec![Device::new(DeviceType::Cpu, 0).expect("cpu")];
    out.extend(common::devices_of(&[
        DeviceType::Cuda,
        DeviceType::Vulkan,
        DeviceType::Wgpu,
    ]));
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_add_256");
    for d in devices() {
        let stream = keel::current_stream(d).expect("stream");
        let a = Tensor::full(&[N], 1.0, DType::F32, d).expect("a");
        let b = Tensor::full(&[N], 2.0, DType::F32, d).expect("b");
        let dispatched = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                black_box(a.add(&b).expect("add"));
            }
            stream.synchronize().expect("sync");
            t.elapsed()
        };
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
        let direct = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                let out = Buffer::empty(d, 4 * N).expect("out");
                stream
                    .launch(&kernel, grid, &[a.buffer(), b.buffer(), &out], &params)
                    .expect("launch");
                black_box(out);
            }
            stream.synchronize().expect("sync");
            t.elapsed()
        };
        // Both ways in every iteration (`common::interleaved`).
        common::interleaved(
            &mut g,
            (&format!("{d} dispatched x{BATCH}"), &dispatched),
            (&format!("{d} direct launch x{BATCH}"), &direct),
        );
        paired_ratio(&d.to_string(), dispatched, direct);
    }
    g.finish();
}

/// Rounds of the paired measurement.
const ROUNDS: usize = 400;

/// The machine is shared: a batch is sometimes preempted, and criterion's
/// two estimates come from different seconds. So, next to them, the ratio
/// from pairs: `ROUNDS` rounds of one batch each way back to back, the
/// median of the per-round ratios (robust to a preempted batch) and the
/// ratio of the per-way minimums.
fn paired_ratio(
    device: &str,
    a: impl Fn() -> std::time::Duration,
    b: impl Fn() -> std::time::Duration,
) {
    let p = common::Paired::measure(ROUNDS, &a, &b);
    println!(
        "dispatch_add_256/{device}: paired over {ROUNDS} rounds (order alternating): dispatched / direct = {:.3} (median), {:.3} (minimums: {:.1} us / {:.1} us per batch)",
        p.median(),
        p.of_minimums(),
        p.min_a.as_secs_f64() * 1e6,
        p.min_b.as_secs_f64() * 1e6
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
