//! Import speed for PyTorch (Kineto) traces: a generated 32 MiB Kineto
//! trace (`kineto_gen.rs`), plain and gzipped, opened with
//! `keel_trace::file::from_bytes`, against the baseline of parsing the
//! same bytes into a `serde_json::Value` tree (what a naive importer
//! starts with, before it has imported anything).
//!
//! `cargo bench --no-default-features --features cpu --bench profiler_import`
//!
//! The 1 GB measurement (time and peak memory) is `examples/big_trace.rs`;
//! both are in docs/BENCHMARKS.md.

#[path = "kineto_gen.rs"]
mod kineto_gen;

use std::hint::black_box;
use std::io::Write;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const MIB: u64 = 32;

fn bench(c: &mut Criterion) {
    let mut json = Vec::new();
    let (bytes, events) = kineto_gen::write_kineto(&mut json, MIB << 20, 0).expect("generate");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).expect("gzip");
    let gz = gz.finish().expect("gzip");
    let t = keel_trace::file::from_bytes(&json).expect("import");
    let report = t.import.as_ref().expect("report");
    assert_eq!(report.events, events);
    assert_eq!(report.imported, events);

    let mut group = c.benchmark_group(format!("import {MIB} MiB Kineto JSON ({events} events)"));
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("baseline: serde_json::Value tree", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<serde_json::Value>(black_box(
                &json,
            )))
        })
    });
    group.bench_function("keel import", |b| {
        b.iter(|| black_box(keel_trace::file::from_bytes(black_box(&json))))
    });
    group.bench_function("keel import, gzip", |b| {
        b.iter(|| black_box(keel_trace::file::from_bytes(black_box(&gz))))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
