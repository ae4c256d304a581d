//! The CPU matmul: `gemm` against `matrixmultiply` on 1024x1024 f32 (the
//! measurement behind the choice of crate for the CPU `matmul` kernel; see
//! docs/BENCHMARKS.md). Run with
//! `cargo bench --bench matmul_cpu --no-default-features -- --warm-up-time 1 --measurement-time 3`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const N: usize = 1024;

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let a = (0..N * N)
        .map(|i| ((i * 7 % 13) as f32) * 0.1 - 0.6)
        .collect();
    let b = (0..N * N)
        .map(|i| ((i * 5 % 11) as f32) * 0.1 - 0.5)
        .collect();
    (a, b)
}

fn bench(c: &mut Criterion) {
    let (a, b) = inputs();
    let mut out = vec![0f32; N * N];
    let mut g = c.benchmark_group("matmul_cpu_1024");
    g.throughput(Throughput::Elements((2 * N * N * N) as u64));
    g.sample_size(10);
    g.bench_function("matrixmultiply", |bench| {
        bench.iter(|| {
            // SAFETY: the three slices hold N*N f32s each, row-major with
            // the strides given; `out` is not aliased.
            unsafe {
                matrixmultiply::sgemm(
                    N,
                    N,
                    N,
                    1.0,
                    a.as_ptr(),
                    N as isize,
                    1,
                    b.as_ptr(),
                    N as isize,
                    1,
                    0.0,
                    out.as_mut_ptr(),
                    N as isize,
                    1,
                );
            }
        })
    });
    for (name, par) in [
        ("gemm (1 thread)", gemm::Parallelism::None),
        ("gemm (rayon)", gemm::Parallelism::Rayon(0)),
    ] {
        g.bench_function(name, |bench| {
            bench.iter(|| {
                // SAFETY: as above; gemm reads `a`, `b` and writes `out`
                // (read_dst false: `out` is overwritten).
                unsafe {
                    gemm::gemm(
                        N,
                        N,
                        N,
                        out.as_mut_ptr(),
                        1,
                        N as isize,
                        false,
                        a.as_ptr(),
                        1,
                        N as isize,
                        b.as_ptr(),
                        1,
                        N as isize,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
