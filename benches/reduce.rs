//! `sum` of 2^24 f32 and `softmax_rows` of 4096 x 4096 f32, the shapes
//! PyTorch is timed on (`make_torch_traces.py timings`: `sum_16M_f32_us`,
//! `softmax_4096x4096_us`), launched and synchronised on every GPU device
//! that runs here. The CPU runs both kernels translated to Rust, which
//! `crates/keel-wgsl/benches/rust.rs` times against scalar loops, so it
//! is left out here.
//!
//! Run: `cargo bench --bench reduce`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel::Buffer;
use keel::compute;

mod common;

const SUM_N: usize = 1 << 24;
const ROWS: usize = 4096;
const COLS: usize = 4096;

fn reductions(c: &mut Criterion) {
    let mut g = c.benchmark_group("reduce");
    let devices = common::devices_of(&[
        keel::DeviceType::Cuda,
        keel::DeviceType::Vulkan,
        keel::DeviceType::Wgpu,
    ]);
    for d in devices {
        let s = keel::default_stream(d).expect("stream");
        let x: Vec<f32> = (0..SUM_N).map(|i| (i % 1000) as f32 * 1e-3).collect();
        let xb = Buffer::new(d, SUM_N * 4).expect("buffer");
        xb.write(&s, 0, &x).expect("upload");
        let out = Buffer::new(d, 4).expect("buffer");
        g.throughput(Throughput::Bytes((SUM_N * 4) as u64));
        g.bench_with_input(BenchmarkId::new("sum_16M", d), &(), |b, _| {
            b.iter(|| {
                compute::sum(&s, &xb, SUM_N, &out).expect("sum");
                s.synchronize().expect("sync");
                black_box(&out);
            })
        });
        let m = Buffer::new(d, ROWS * COLS * 4).expect("buffer");
        let mo = Buffer::new(d, ROWS * COLS * 4).expect("buffer");
        g.throughput(Throughput::Bytes((2 * ROWS * COLS * 4) as u64));
        g.bench_with_input(BenchmarkId::new("softmax_4096x4096", d), &(), |b, _| {
            b.iter(|| {
                compute::softmax_rows(&s, &m, &mo, ROWS, COLS).expect("softmax");
                s.synchronize().expect("sync");
                black_box(&mo);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, reductions);
criterion_main!(benches);
