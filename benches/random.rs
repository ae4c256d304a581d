//! Random kernels: `randn` and `normal_` of 2^20 elements against `rand`
//! of the same size, launched and synchronised on every device that runs
//! here. `rand` shares the Philox work and writes as much, so the ratio is
//! what the normal transform costs on that device. On the GPU backends
//! also the `randn` kernel Keel shipped before its draws were
//! bit-identical (`random_float_box_muller.wgsl`: `log`, `sin` and `cos`
//! in f32), the baseline of the speed goal for the bit-identical one, and
//! the bit-identical one without strict floating point
//! (`Kernel::strict_float`), what strictness costs there.
//!
//! Run: `cargo bench --bench random`. Results in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use keel::random::{self, RandomOp};
use keel::{Buffer, DeviceType, Kernel};

mod common;

const N: usize = 1 << 20;

/// The former `randn`: the same entry name, parameters and stream
/// positions as the current one, so `random::launch_with_grid` takes it.
const FLOAT_RANDN: Kernel = Kernel {
    name: "philox_randn",
    workgroup_size: [256, 1, 1],
    bindings: 1,
    wgsl: Some(include_str!("random_float_box_muller.wgsl")),
    ptx: None,
    cpu: None,
    strict_float: false,
};

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
    for d in common::every_device() {
        if d.device_type() == DeviceType::Cpu {
            continue;
        }
        let s = keel::default_stream(d).expect("stream");
        let out = Buffer::new(d, N * 4).expect("buffer");
        // One invocation per Philox block of four draws.
        let grid = [(N / 4).div_ceil(256) as u32, 1, 1];
        // The former kernel, and the current one without strict floating
        // point (what the decorations or `.rn` cost this device's
        // compiler; the draws may then differ from the host's).
        let loose = Kernel {
            strict_float: false,
            ..RandomOp::Randn.kernel()
        };
        for (name, kernel) in [
            ("randn-float-box-muller", &FLOAT_RANDN),
            ("randn-not-strict", &loose),
        ] {
            g.bench_with_input(BenchmarkId::new(name, d), &(), |b, _| {
                let mut offset = 0u64;
                b.iter(|| {
                    random::launch_with_grid(&s, kernel, grid, RandomOp::Randn, &out, N, 7, offset)
                        .expect("launch");
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
