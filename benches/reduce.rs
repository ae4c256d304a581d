//! `sum` of 2^24 f32 and `softmax_rows` of 4096 x 4096 f32, the shapes
//! PyTorch is timed on (`make_torch_traces.py timings`: `sum_16M_f32_us`,
//! `softmax_4096x4096_us`), launched and synchronised on every GPU device
//! that runs here. The CPU runs both kernels translated to Rust, which
//! `crates/keel-wgsl/benches/rust.rs` times against scalar loops, so it
//! is left out here.
//!
//! Each kernel is timed two ways: host time around the launch and the
//! synchronize (`sum_16M/...`: what a program that waits for each result
//! sees), and device time between two timed events recorded around the
//! launch (`sum_16M_device/...`), which is what PyTorch's figures are
//! (CUDA events around one call). The two differ by the backend's
//! submit-and-wait round trip, which on Vulkan and wgpu is larger than
//! the kernel on a fast GPU; the device time is the kernel's speed.
//!
//! Run: `cargo bench --bench reduce`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel::compute;
use keel::{Buffer, Event, Stream};

mod common;

const SUM_N: usize = 1 << 24;
const ROWS: usize = 4096;
const COLS: usize = 4096;

/// Device time of `iters` runs of `f` on `s`, each between two timed
/// events and waited for, as PyTorch times a call with CUDA events.
fn device_time(s: &Stream, iters: u64, f: &dyn Fn()) -> Duration {
    let ty = s.device().device_type();
    let (mut start, mut end) = (Event::timed(ty), Event::timed(ty));
    let mut total = 0.0;
    for _ in 0..iters {
        start.record(s).expect("record");
        f();
        end.record(s).expect("record");
        end.synchronize().expect("sync");
        total += start.elapsed_time(&end).expect("elapsed");
    }
    Duration::from_secs_f64(total * 1e-3)
}

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
        let run_sum = || compute::sum(&s, &xb, SUM_N, &out).expect("sum");
        g.bench_with_input(BenchmarkId::new("sum_16M_device", d), &(), |b, _| {
            b.iter_custom(|iters| device_time(&s, iters, &run_sum))
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
        let run_softmax = || compute::softmax_rows(&s, &m, &mo, ROWS, COLS).expect("softmax");
        g.bench_with_input(
            BenchmarkId::new("softmax_4096x4096_device", d),
            &(),
            |b, _| b.iter_custom(|iters| device_time(&s, iters, &run_softmax)),
        );
    }
    g.finish();
}

criterion_group!(benches, reductions);
criterion_main!(benches);
