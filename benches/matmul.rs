//! matmul 1024 x 1024 x 1024 (f32): `keel::compute::matmul`'s tiled and
//! naive kernels on every backend present (CPU: the Rust kernel; Vulkan;
//! each wgpu adapter), and `matrixmultiply::sgemm` on the host as the CPU
//! crate baseline, all in one run. Throughput is in FLOP (2 n^3 per
//! product), so criterion's "elem/s" reads as FLOP/s.
//!
//! The naive kernel on the CPU backend is left out: a scalar loop with a
//! strided B takes seconds per product.
//!
//! `KEEL_MATMUL_PRECISION=1`: instead, each reduced-precision mode against
//! plain f32 under `MatmulAlgorithm::Tiled` at 512^3 on every device, as
//! paired ratios: the modes that only round inputs (tf32, bf16, f16
//! inputs; goal at most 1.1x), and those that round the split-K partial
//! sums or the accumulator (f16 and bf16 tensors' defaults); where the
//! device has cooperative matrices, f16 inputs on them too
//! (`TensorCore`, which names them where `Tiled` may not pick them); and
//! on every device but the CPU, the 4x4 kernel in the modes that only
//! round inputs with its rounding pass first (as `matmul` runs it at this
//! size) and rounding while staging (launched directly), each against
//! its plain f32.
//!
//! `KEEL_MATMUL_LARGE=1`: instead, 1024^3 and 4096^3 on every GPU device
//! in plain f32, tf32, bf16 and f16 inputs and bf16 tensors' split-K
//! default (each through `MatmulAlgorithm::Tiled`, which runs the
//! input-rounding modes on tensor cores where the device has them:
//! `matmul_mma` (tf32), `matmul_mma16` (bf16, f16) and
//! `matmul_mma16_split` (split-K) on CUDA, and plain f32 there on
//! `matmul_sgemm`; the cooperative-matrix kernel for
//! f16 inputs on Vulkan and wgpu; and then the portable 4x4 kernel beside
//! them, the 4x4 kernel rounding tf32 and bf16 inputs while staging, and
//! on CUDA the overrides' packing passes alone): the median of
//! seven launches (host time around launch and synchronize, as PyTorch's
//! figures in `make_torch_traces.py timings` are taken), in TFLOP/s.
//!
//! Run: `cargo bench --bench matmul -- --warm-up-time 1 --measurement-time 3`.
//! Results in docs/BENCHMARKS.md.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group};
use keel::compute::params::Param;
use keel::compute::{
    Accumulation, InputRounding, MATMUL_MMA_PACK, MATMUL_MMA16_PACK, MATMUL_SGEMM_PACK,
    MATMUL_TILED_4X4, MatmulAlgorithm, MatmulOptions, MatmulPrecision, Reduction, matmul,
    matmul_kernel,
};
use keel::{Buffer, Device, DeviceType, Stream};

mod common;

const N: usize = 1024;

fn label(d: Device) -> String {
    let api = keel::properties(d)
        .ok()
        .and_then(|p| p.extra.into_iter().find(|(k, _)| k == "native API"))
        .map(|(_, v)| format!("/{v}"));
    format!("{d}{}", api.unwrap_or_default())
}

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let f = |i: usize| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5;
    (
        (0..N * N).map(f).collect(),
        (0..N * N).map(|i| f(i + 1)).collect(),
    )
}

fn bench(c: &mut Criterion) {
    let (a, b) = inputs();
    let mut g = c.benchmark_group("matmul_1024");
    g.sample_size(10);
    g.throughput(Throughput::Elements(2 * (N as u64).pow(3)));
    for d in common::every_device() {
        let stream: Stream = keel::default_stream(d).expect("stream");
        let ab = Buffer::from_slice(&stream, &a).expect("a");
        let bb = Buffer::from_slice(&stream, &b).expect("b");
        let cb = Buffer::new(d, N * N * 4).expect("c");
        // On the CPU backend every tiled kernel is the same Rust loop; a
        // device's own kernels are measured each, and the naive baseline.
        let algorithms = if d.device_type() == DeviceType::Cpu {
            vec![MatmulAlgorithm::Tiled]
        } else {
            let auto = matmul_kernel(&stream, &MatmulOptions::default(), N, N).expect("kernel");
            println!(
                "{}: MatmulAlgorithm::Tiled runs {}",
                label(d),
                auto.kernel.name
            );
            vec![
                MatmulAlgorithm::Tiled8x8,
                MatmulAlgorithm::Tiled4x4,
                MatmulAlgorithm::Naive,
            ]
        };
        for algorithm in algorithms {
            let opts = MatmulOptions {
                algorithm,
                ..Default::default()
            };
            let name = format!("{}/{algorithm:?}", label(d)).to_lowercase();
            g.bench_function(name, |bench| {
                bench.iter(|| {
                    matmul(&stream, &ab, &bb, &cb, N, N, N, &opts).expect("matmul");
                    stream.synchronize().expect("synchronize");
                })
            });
        }
    }
    let mut out = vec![0.0f32; N * N];
    g.bench_function("host/matrixmultiply_sgemm", |bench| {
        bench.iter(|| {
            // SAFETY: a, b and out hold N x N f32s, row-major (row stride
            // N, column stride 1), and out does not alias the inputs.
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
            black_box(&out);
        })
    });
    g.finish();
}

/// `KEEL_MATMUL_QUICK=<device>` (a device string such as `vulkan:0`):
/// instead of criterion, the two tiled kernels and the naive one alternate five times
/// on that device and the fastest run of each is printed. The fastest of
/// interleaved runs is the least disturbed by other load on a shared
/// machine, for a quick A/B while changing a kernel.
fn quick(device: &str) {
    let d: Device = device.parse().expect("a device string");
    let stream = keel::default_stream(d).expect("stream");
    let (a, b) = inputs();
    let ab = Buffer::from_slice(&stream, &a).expect("a");
    let bb = Buffer::from_slice(&stream, &b).expect("b");
    let cb = Buffer::new(d, N * N * 4).expect("c");
    let algorithms = [
        MatmulAlgorithm::Tiled8x8,
        MatmulAlgorithm::Tiled4x4,
        MatmulAlgorithm::Naive,
    ];
    let mut best = [f64::MAX; 3];
    for _ in 0..5 {
        for (i, algorithm) in algorithms.into_iter().enumerate() {
            let opts = MatmulOptions {
                algorithm,
                ..Default::default()
            };
            let t = std::time::Instant::now();
            matmul(&stream, &ab, &bb, &cb, N, N, N, &opts).expect("matmul");
            stream.synchronize().expect("synchronize");
            best[i] = best[i].min(t.elapsed().as_secs_f64());
        }
    }
    let gflops = |s: f64| 2.0 * (N as f64).powi(3) / s / 1e9;
    for (algorithm, t) in algorithms.iter().zip(best) {
        println!(
            "{d}: {algorithm:?} {t:.4} s ({:.2} GFLOP/s), naive / this {:.2}",
            gflops(t),
            best[2] / t
        );
    }
}

/// Each input-rounding mode against plain f32, paired, on every device.
fn precision_modes() {
    const P: usize = 512;
    let f = |i: usize| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5;
    let a: Vec<f32> = (0..P * P).map(f).collect();
    let b: Vec<f32> = (0..P * P).map(|i| f(i + 17)).collect();
    for d in common::every_device() {
        let stream: Stream = keel::default_stream(d).expect("stream");
        let ab = Buffer::from_slice(&stream, &a).expect("a");
        let bb = Buffer::from_slice(&stream, &b).expect("b");
        let cb = Buffer::new(d, P * P * 4).expect("c");
        let (s, ab, bb, cb) = (&stream, &ab, &bb, &cb);
        let timed = |precision: MatmulPrecision| {
            let opts = MatmulOptions {
                algorithm: MatmulAlgorithm::Tiled,
                precision,
            };
            move || {
                let t = std::time::Instant::now();
                matmul(s, ab, bb, cb, P, P, P, &opts).expect("matmul");
                s.synchronize().expect("synchronize");
                t.elapsed()
            }
        };
        let ieee = timed(MatmulPrecision::IEEE);
        ieee();
        // Cooperative matrices by name, where `Tiled` may not pick them
        // (a CPU device's are emulated).
        if keel::compute::cooperative_matrix_supported(&stream).unwrap_or(false) {
            let opts = MatmulOptions {
                algorithm: MatmulAlgorithm::TensorCore,
                precision: MatmulPrecision::inputs(InputRounding::F16),
            };
            let coop = || {
                let t = std::time::Instant::now();
                matmul(s, ab, bb, cb, P, P, P, &opts).expect("matmul");
                s.synchronize().expect("synchronize");
                t.elapsed()
            };
            coop();
            common::print_paired(
                &label(d),
                &format!("f16 inputs on cooperative matrices (TensorCore) / ieee {P}^3"),
                9,
                &coop,
                &ieee,
            );
        }
        let split = |inputs, reduction| MatmulPrecision {
            inputs,
            accumulation: Accumulation::F32,
            reduction,
        };
        for (name, mode) in [
            ("tf32", MatmulPrecision::TF32),
            ("bf16", MatmulPrecision::BF16),
            ("f16 inputs", MatmulPrecision::inputs(InputRounding::F16)),
            (
                "f16 tensors' default (f16 split-K)",
                split(InputRounding::F16, Reduction::F16),
            ),
            (
                "bf16 tensors' default (bf16 split-K)",
                split(InputRounding::Bf16, Reduction::Bf16),
            ),
            (
                "f16 accumulation",
                MatmulPrecision {
                    accumulation: Accumulation::F16,
                    ..split(InputRounding::F16, Reduction::F16)
                },
            ),
        ] {
            let rounded = timed(mode);
            rounded();
            common::print_paired(
                &label(d),
                &format!("{name} / ieee {P}^3"),
                9,
                &rounded,
                &ieee,
            );
        }
        // The 4x4 kernel (which `Tiled` runs on a GPU) in the modes that
        // only round inputs, both ways: the rounding pass and then the
        // plain loop, as `matmul` runs it from ROUND_ONCE_MIN_TILES tiles
        // on, and rounding while staging (the kernel launched directly),
        // each against its plain f32.
        if d.device_type() == DeviceType::Cpu {
            continue;
        }
        let four = MatmulOptions {
            algorithm: MatmulAlgorithm::Tiled4x4,
            precision: MatmulPrecision::IEEE,
        };
        let four_ieee = || {
            let t = std::time::Instant::now();
            matmul(s, ab, bb, cb, P, P, P, &four).expect("matmul");
            s.synchronize().expect("synchronize");
            t.elapsed()
        };
        four_ieee();
        for (name, mode) in [
            ("tf32", MatmulPrecision::TF32),
            ("bf16", MatmulPrecision::BF16),
            ("f16 inputs", MatmulPrecision::inputs(InputRounding::F16)),
        ] {
            let pass = || {
                let opts = MatmulOptions {
                    precision: mode,
                    ..four
                };
                let t = std::time::Instant::now();
                matmul(s, ab, bb, cb, P, P, P, &opts).expect("matmul");
                s.synchronize().expect("synchronize");
                t.elapsed()
            };
            let staging = || {
                let t = std::time::Instant::now();
                staged_4x4(s, [ab, bb, cb], P, mode);
                s.synchronize().expect("synchronize");
                t.elapsed()
            };
            pass();
            staging();
            common::print_paired(
                &label(d),
                &format!("{name}, 4x4 kernel, rounding pass first / ieee {P}^3"),
                9,
                &pass,
                &four_ieee,
            );
            common::print_paired(
                &label(d),
                &format!("{name}, 4x4 kernel, rounding while staging / ieee {P}^3"),
                9,
                &staging,
                &four_ieee,
            );
        }
    }
}

/// An `n`^3 product on the 4x4 kernel launched directly in `mode`, which
/// rounds the inputs while staging them (`matmul` rounds them in a pass
/// first at this size).
fn staged_4x4(s: &Stream, [a, b, c]: [&Buffer; 3], n: usize, mode: MatmulPrecision) {
    let u = |v: usize| Param::U32(v as u32);
    let tiles = n.div_ceil(64) as u32;
    MATMUL_TILED_4X4
        .launch(
            s,
            [tiles, tiles, 1],
            &[a, b, c],
            &[u(n), u(n), u(n), Param::U32(mode.mode()), Param::U32(0)],
        )
        .expect("launch");
}

/// The issue-37 table: large products in each mode, median of seven.
fn large() {
    for d in common::every_device() {
        if d.device_type() == DeviceType::Cpu {
            continue;
        }
        let stream: Stream = keel::default_stream(d).expect("stream");
        for n in [1024usize, 4096] {
            let f = |i: usize| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5;
            let a: Vec<f32> = (0..n * n).map(f).collect();
            let b: Vec<f32> = (0..n * n).map(|i| f(i + 17)).collect();
            let ab = Buffer::from_slice(&stream, &a).expect("a");
            let bb = Buffer::from_slice(&stream, &b).expect("b");
            let cb = Buffer::new(d, n * n * 4).expect("c");
            let mut modes = vec![
                ("ieee", MatmulAlgorithm::Tiled, MatmulPrecision::IEEE),
                ("tf32", MatmulAlgorithm::Tiled, MatmulPrecision::TF32),
                ("bf16", MatmulAlgorithm::Tiled, MatmulPrecision::BF16),
                (
                    "f16 inputs",
                    MatmulAlgorithm::Tiled,
                    MatmulPrecision::inputs(InputRounding::F16),
                ),
                (
                    "bf16 split-K (bf16 tensors' default)",
                    MatmulAlgorithm::Tiled,
                    MatmulPrecision {
                        inputs: InputRounding::Bf16,
                        accumulation: Accumulation::F32,
                        reduction: Reduction::Bf16,
                    },
                ),
            ];
            if keel::compute::cooperative_matrix_supported(&stream).unwrap_or(false) {
                modes.push((
                    "f16 inputs (4x4 kernel)",
                    MatmulAlgorithm::Tiled4x4,
                    MatmulPrecision::inputs(InputRounding::F16),
                ));
            }
            if keel::compute::tf32_mma_supported(&stream).unwrap_or(false) {
                modes.push((
                    "ieee (4x4 kernel)",
                    MatmulAlgorithm::Tiled4x4,
                    MatmulPrecision::IEEE,
                ));
                modes.push((
                    "tf32 (4x4 kernel)",
                    MatmulAlgorithm::Tiled4x4,
                    MatmulPrecision::TF32,
                ));
            }
            let report = |name: &str, kernel: &str, run: &dyn Fn()| {
                let mut times: Vec<f64> = (0..8)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        run();
                        stream.synchronize().expect("synchronize");
                        t.elapsed().as_secs_f64()
                    })
                    .skip(1)
                    .collect();
                times.sort_by(f64::total_cmp);
                let t = times[times.len() / 2];
                println!(
                    "large {}: {n}^3 {name} ({kernel}): {:.1} us ({:.1} TFLOP/s)",
                    label(d),
                    t * 1e6,
                    2.0 * (n as f64).powi(3) / t / 1e12
                );
            };
            for (name, algorithm, precision) in modes {
                let opts = MatmulOptions {
                    algorithm,
                    precision,
                };
                let kernel = matmul_kernel(&stream, &opts, n, n).map_or("?", |l| l.kernel.name);
                report(name, kernel, &|| {
                    matmul(&stream, &ab, &bb, &cb, n, n, n, &opts).expect("matmul");
                });
            }
            // The 4x4 kernel rounding tf32 and bf16 inputs while staging
            // them (`Tiled` runs it with a rounding pass first where no
            // tensor cores take the mode: the rows above).
            for (name, mode) in [
                ("tf32", MatmulPrecision::TF32),
                ("bf16", MatmulPrecision::BF16),
            ] {
                report(name, "matmul_tiled_4x4 rounding while staging", &|| {
                    staged_4x4(&stream, [&ab, &bb, &cb], n, mode);
                });
            }
            // The CUDA overrides' packing passes alone (A and B, as
            // `matmul` launches them before the kernel): their share of
            // the times above.
            if keel::compute::tf32_mma_supported(&stream).unwrap_or(false) {
                // The last parameter: the mode, or for `matmul_sgemm_pack`
                // whether to transpose (A is, B is not).
                let (tf32, bf16) = (MatmulPrecision::TF32.mode(), MatmulPrecision::BF16.mode());
                for (name, pack, bytes, [last_a, last_b]) in [
                    ("ieee", &MATMUL_SGEMM_PACK, 4, [1, 0]),
                    ("tf32", &MATMUL_MMA_PACK, 4, [tf32, tf32]),
                    ("bf16", &MATMUL_MMA16_PACK, 2, [bf16, bf16]),
                ] {
                    let packed = Buffer::new(d, n * n * bytes).expect("packed");
                    let u = |v: usize| Param::U32(v as u32);
                    let grid = [(n * n * bytes / 16).div_ceil(256) as u32, 1, 1];
                    report(name, "packing A and B alone", &|| {
                        for (src, last) in [(&ab, last_a), (&bb, last_b)] {
                            pack.launch(
                                &stream,
                                grid,
                                &[src, &packed],
                                &[u(n), u(n), u(n), u(n), Param::U32(last)],
                            )
                            .expect("launch");
                        }
                    });
                }
            }
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    if std::env::var_os("KEEL_MATMUL_LARGE").is_some() {
        large();
        return;
    }
    if std::env::var_os("KEEL_MATMUL_PRECISION").is_some() {
        precision_modes();
        return;
    }
    match std::env::var("KEEL_MATMUL_QUICK") {
        Ok(device) => quick(&device),
        Err(_) => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
