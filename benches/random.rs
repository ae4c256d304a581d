//! Random kernels: `randn` and `normal_` of 2^20 elements against `rand`
//! of the same size, launched and synchronised on every device that runs
//! here. `rand` shares the Philox work and writes as much, so the ratio is
//! what the normal transform costs on that device.
//!
//! Run: `cargo bench --bench random`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel::Buffer;
use keel::random::{self, RandomOp};

mod common;

const N: usize = 1 << 20;

fn random_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("random");
    g.throughput(Throughput::Elements(N as u64));
    for d in common::every_device() {
        let s = keel::default_stream(d).expect("stream");
        let out = Buffer::new(d, N * 4).expect("buffer");
        for (name, op) in [
            ("rand", RandomOp::Rand),
            ("randn", RandomOp::Randn),
            (
                "normal",
                RandomOp::Normal {
                    mean: 1.0,
                    std: 0.5,
                },
            ),
        ] {
            g.bench_with_input(BenchmarkId::new(name, d), &op, |b, &op| {
                let mut offset = 0u64;
                b.iter(|| {
                    random::launch(&s, op, &out, N, 7, offset).expect("launch");
                    s.synchronize().expect("sync");
                    offset += N as u64;
                    black_box(offset)
                })
            });
        }
    }
    // The host reference on the calling thread (one core), for scale.
    g.bench_function("randn/host-reference", |b| {
        b.iter(|| random::reference(RandomOp::Randn, N, 7, 0).expect("reference"))
    });
    g.finish();
}

criterion_group!(benches, random_ops);
criterion_main!(benches);
