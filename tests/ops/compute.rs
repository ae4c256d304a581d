//! `keel::compute` on every available backend: matmul (tiled and naive),
//! sum (both variants) and softmax_rows against f64 references, over
//! shapes including 1, primes and non-multiples of the tile and workgroup
//! sizes; the precision modes' error ordering; argument errors.
//!
//! Tolerances, as multiples of f32's unit roundoff u = 2^-24 (at most 2u
//! per rounded operation, so the bounds hold with fused or unfused
//! multiply-adds and any summation order the kernels use):
//! - matmul: |c - ref| <= 2 (k + 2) u * sum_k |a_ik b_kj|;
//! - sum: |s - ref| <= 2 (n / 256 + 40) u * sum |x_i| (each invocation adds
//!   at most n / 256 elements, then two trees of 8 and 10 levels);
//! - softmax: |o - ref| <= (2 (cols + 40) u + 1e-6) * ref + 1e-9 (the row
//!   sum, plus exp's error: `ex2.approx` on CUDA, the driver's `exp`).
//!
//! CUDA is not in this list: its kernels are checked by `ptxas`
//! (`cargo xtask ptx`) and the parameter-layout unit test, and run in the
//! CUDA suite where a GPU is present.

use keel::compute::{
    self, Accumulation, InputRounding, MatmulAlgorithm, MatmulOptions, MatmulPrecision, Reduction,
    SumVariant,
};
use keel::testing::conformance;
use keel::{Buffer, Device, DeviceType, Stream};

const U: f64 = 1.0 / 16_777_216.0;

/// Every backend these tests run on, with a label.
fn backends() -> Vec<(&'static str, Device)> {
    keel::testing::conformance::builtin_devices()
}

/// A stream on each device with tf32 tensor cores (CUDA, compute
/// capability 8.0 or later); where there is none, says so and that `what`
/// is skipped.
fn tensor_core_streams(what: &str) -> Vec<(&'static str, Stream)> {
    let found: Vec<_> = backends()
        .into_iter()
        .map(|(label, device)| (label, keel::default_stream(device).expect("stream")))
        .filter(|(_, s)| compute::tf32_mma_supported(s).expect("query"))
        .collect();
    if found.is_empty() {
        println!("skipped {what}: no CUDA device of compute capability 8.0 or later here");
    }
    found
}

/// No Vulkan validation error so far (the tests run with the Khronos
/// validation layer in CI).
fn no_validation_errors() {
    #[cfg(feature = "vulkan")]
    assert_eq!(
        keel::backend::vulkan::validation_error_count(),
        0,
        "{:#?}",
        keel::backend::vulkan::validation_messages()
    );
}

/// A deterministic generator (xorshift64*), uniform in [-1, 1) and normal.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        (r as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn normal(&mut self) -> f32 {
        let u1 = (self.uniform() as f64 + 1.0) / 2.0 + 1e-12;
        let u2 = (self.uniform() as f64 + 1.0) / 2.0;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

/// The first index where `a` and `b` hold different bits.
fn first_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

fn upload(stream: &Stream, data: &[f32]) -> Buffer {
    Buffer::from_slice(stream, data).expect("upload")
}

fn output(stream: &Stream, elems: usize) -> Buffer {
    Buffer::new(stream.device(), elems * 4).expect("output buffer")
}

/// Every matmul algorithm `stream`'s device runs: the tiled kernels, the
/// naive one, and the tensor-core kernels where the device has them.
fn every_kernel(stream: &Stream) -> Vec<MatmulAlgorithm> {
    let mut algorithms = vec![
        MatmulAlgorithm::Tiled,
        MatmulAlgorithm::Tiled4x4,
        MatmulAlgorithm::Tiled8x8,
        MatmulAlgorithm::Naive,
    ];
    if compute::tf32_mma_supported(stream).expect("query") {
        algorithms.push(MatmulAlgorithm::TensorCore);
    }
    algorithms
}

#[allow(clippy::too_many_arguments)]
fn run_matmul(
    stream: &Stream,
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    opts: &MatmulOptions,
) -> Vec<f32> {
    let (ab, bb, cb) = (upload(stream, a), upload(stream, b), output(stream, m * n));
    compute::matmul(stream, &ab, &bb, &cb, m, k, n, opts).expect("matmul");
    cb.read_as::<f32>(stream).expect("read")
}

/// Every output within f32's summation bound of the f64 reference:
/// |c - ref| <= 2 (k + 2) u * sum_k |a_ik b_kj| (`mag`); `what` names the
/// case in the message.
fn assert_within_sum_bound(what: &str, got: &[f32], want: &[f64], mag: &[f64], k: usize) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(mag).enumerate() {
        let tol = 2.0 * (k as f64 + 2.0) * U * s;
        assert!(
            (*g as f64 - w).abs() <= tol,
            "{what}: c[{i}] = {g}, expected {w} (tolerance {tol:e})"
        );
    }
}

/// The f64 product and, per output, sum_k |a_ik b_kj|.
fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for kk in 0..k {
            let av = a[i * k + kk] as f64;
            for j in 0..n {
                let p = av * b[kk * n + j] as f64;
                c[i * n + j] += p;
                mag[i * n + j] += p.abs();
            }
        }
    }
    (c, mag)
}

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 7, 1),
    (3, 5, 7),
    (2, 1, 3),
    (17, 31, 13),
    (32, 32, 32),
    (33, 16, 65),
    (64, 97, 31),
    (41, 300, 37),
    (129, 45, 67),
];

#[test]
fn matmul_matches_the_f64_reference_on_every_backend() {
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        for &(m, k, n) in SHAPES {
            let mut rng = Rng(0x9e37_79b9 ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let (want, mag) = reference(&a, &b, m, k, n);
            for algorithm in [
                MatmulAlgorithm::Tiled,
                MatmulAlgorithm::Tiled8x8,
                MatmulAlgorithm::Tiled4x4,
                MatmulAlgorithm::Naive,
            ] {
                let opts = MatmulOptions {
                    algorithm,
                    ..Default::default()
                };
                let got = run_matmul(&stream, &a, &b, m, k, n, &opts);
                assert_within_sum_bound(
                    &format!("{label} {algorithm:?} {m}x{k}x{n}"),
                    &got,
                    &want,
                    &mag,
                    k,
                );
            }
        }
    }
    no_validation_errors();
}

/// The host's rounding of one value to a mode's input format.
type Round = fn(f32) -> f32;

/// The input-rounding modes with the host's rounding of one value.
fn input_modes() -> [(InputRounding, Round); 3] {
    use keel::compute::precision::{round_bf16, round_f16, round_tf32};
    [
        (InputRounding::Tf32, round_tf32),
        (InputRounding::Bf16, round_bf16),
        (InputRounding::F16, round_f16),
    ]
}

/// A mode that only rounds inputs gives the same bits from both tiled
/// kernels (each rounds an element once as it stages it, then runs its
/// plain f32 loop) and the f64 product of the rounded inputs within f32's
/// summation bound, at odd shapes on every backend.
#[test]
fn input_rounding_modes_agree_across_tiled_kernels() {
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        for &(m, k, n) in SHAPES {
            let mut rng = Rng(0x5eed ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            for (mode, round) in input_modes() {
                let ra: Vec<f32> = a.iter().map(|&x| round(x)).collect();
                let rb: Vec<f32> = b.iter().map(|&x| round(x)).collect();
                let (want, mag) = reference(&ra, &rb, m, k, n);
                let run = |algorithm| {
                    let opts = MatmulOptions {
                        algorithm,
                        precision: MatmulPrecision::inputs(mode),
                    };
                    run_matmul(&stream, &a, &b, m, k, n, &opts)
                };
                let eight = run(MatmulAlgorithm::Tiled8x8);
                let four = run(MatmulAlgorithm::Tiled4x4);
                for (i, (((e, f), w), s)) in
                    eight.iter().zip(&four).zip(&want).zip(&mag).enumerate()
                {
                    assert_eq!(
                        e.to_bits(),
                        f.to_bits(),
                        "{label} {mode:?} {m}x{k}x{n}: c[{i}] is {e} from Tiled8x8, {f} from Tiled4x4"
                    );
                    let tol = 2.0 * (k as f64 + 2.0) * U * s;
                    assert!(
                        (*e as f64 - w).abs() <= tol,
                        "{label} {mode:?} {m}x{k}x{n}: c[{i}] = {e}, expected {w} (tolerance {tol:e})"
                    );
                }
            }
        }
    }
    no_validation_errors();
}

/// The tensor-core kernel (CUDA, compute capability 8.0 or later) in each
/// mode that rounds the inputs, against the f64 product of the rounded
/// inputs within f32's summation bound (docs/NUMERICS.md), at the odd
/// shapes and on either side of its 128 x 128 block tile and its 16-step
/// stage; and `Tiled` in those modes is that kernel there. Prints where
/// no device has tensor cores.
#[test]
fn tensor_core_matmul_matches_the_f64_reference_of_rounded_inputs() {
    let edges = [
        (127, 15, 129),
        (128, 16, 128),
        (129, 17, 257),
        (1, 1000, 1),
        (200, 333, 131),
    ];
    let streams = tensor_core_streams("the tensor-core kernels");
    for (label, stream) in &streams {
        for &(m, k, n) in SHAPES.iter().chain(&edges) {
            let mut rng = Rng(0x7c0e ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            for (mode, round) in input_modes() {
                let ra: Vec<f32> = a.iter().map(|&x| round(x)).collect();
                let rb: Vec<f32> = b.iter().map(|&x| round(x)).collect();
                let (want, mag) = reference(&ra, &rb, m, k, n);
                let run = |algorithm| {
                    let opts = MatmulOptions {
                        algorithm,
                        precision: MatmulPrecision::inputs(mode),
                    };
                    run_matmul(stream, &a, &b, m, k, n, &opts)
                };
                let got = run(MatmulAlgorithm::TensorCore);
                // `Tiled` runs the 4x4 kernel on products this small.
                assert_eq!(
                    run(MatmulAlgorithm::Tiled),
                    run(MatmulAlgorithm::Tiled4x4),
                    "{label} {mode:?} {m}x{k}x{n}"
                );
                assert_within_sum_bound(
                    &format!("{label} {mode:?} {m}x{k}x{n}"),
                    &got,
                    &want,
                    &mag,
                    k,
                );
            }
        }
    }
    // From `MMA_MIN_BLOCKS` tiles on, `Tiled` is the tensor-core kernel.
    for (label, stream) in &streams {
        let (m, k, n) = (1024, 8, 128 * compute::MMA_MIN_BLOCKS / 8);
        let mut rng = Rng(0x7c0f);
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let run = |algorithm| {
            let opts = MatmulOptions {
                algorithm,
                precision: MatmulPrecision::TF32,
            };
            run_matmul(stream, &a, &b, m, k, n, &opts)
        };
        assert_eq!(
            run(MatmulAlgorithm::Tiled),
            run(MatmulAlgorithm::TensorCore),
            "{label}: {m}x{k}x{n}"
        );
    }
    no_validation_errors();
}

/// bf16 and f16 tensors' default modes (split-K partials rounded to the
/// format) on CUDA tensor cores (`matmul_mma16_split`) from
/// `MMA_MIN_BLOCKS` tiles on: with small integer inputs every chunk sum is
/// exact in f32 in any order, so the tensor cores' order does not show and
/// the result is the 4x4 kernel's bit for bit, the chunk sums (past the
/// formats' significands) and the totals rounded alike; k cut into 256-step
/// chunks with a short last one. The interpreter checks the same against
/// the reference (`crates/keel-wgsl/tests/ptx_sim.rs`).
#[test]
fn split_k_modes_on_tensor_cores_round_as_the_tiled_kernel() {
    for (label, stream) in tensor_core_streams("split-K on tensor cores") {
        let (m, n) = (1024, 128 * compute::MMA_MIN_BLOCKS / 8);
        for (inputs, reduction, scale, offset) in [
            (InputRounding::Bf16, Reduction::Bf16, 40.0, 0.0),
            (InputRounding::F16, Reduction::F16, 6.0, 6.0),
        ] {
            for k in [256, 700] {
                let mut rng = Rng(0x5b ^ k as u64);
                let mut ints = |len: usize| -> Vec<f32> {
                    rng.vec(len)
                        .iter()
                        .map(|v| (v * scale + offset).round())
                        .collect()
                };
                let (a, b) = (ints(m * k), ints(k * n));
                let precision = MatmulPrecision {
                    inputs,
                    accumulation: Accumulation::F32,
                    reduction,
                };
                let run = |algorithm| {
                    let opts = MatmulOptions {
                        algorithm,
                        precision,
                    };
                    let name = compute::matmul_kernel(&stream, &opts, m, n)
                        .expect("kernel")
                        .kernel
                        .name;
                    (name, run_matmul(&stream, &a, &b, m, k, n, &opts))
                };
                let (name, got) = run(MatmulAlgorithm::Tiled);
                assert_eq!(name, "matmul_mma16_split", "{label}");
                let (_, tiled) = run(MatmulAlgorithm::Tiled4x4);
                let differ = first_difference(&got, &tiled);
                assert!(
                    differ.is_none(),
                    "{label} {inputs:?} k = {k}: output {differ:?} differs from the 4x4 kernel's"
                );
            }
        }
    }
    no_validation_errors();
}

/// Plain f32 on CUDA devices with `cp.async` runs `matmul_sgemm` from
/// `MMA_MIN_BLOCKS` tiles of 128 x 128 on: the products added in k order
/// by fused multiply-adds, the sum the 4x4 kernel's PTX makes once ptxas
/// fuses it, so the two give the same bits (and both stay within the f32
/// bound of the f64 reference), at shapes with partial tiles on every side
/// and k off the 32-step stage. On the CPU the interpreter checks the same
/// sum (`crates/keel-wgsl/tests/ptx_sim.rs`).
#[test]
fn plain_f32_on_the_cuda_override_is_the_4x4_kernels_sum() {
    for (label, stream) in tensor_core_streams("the plain-f32 override") {
        for (m, k, n) in [(1024, 37, 512), (1031, 77, 523), (640, 1000, 897)] {
            let mut rng = Rng(0x5e ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let run = |algorithm| {
                let opts = MatmulOptions {
                    algorithm,
                    precision: MatmulPrecision::IEEE,
                };
                assert_eq!(
                    compute::matmul_kernel(&stream, &opts, m, n)
                        .expect("kernel")
                        .kernel
                        .name,
                    if algorithm == MatmulAlgorithm::Tiled {
                        "matmul_sgemm"
                    } else {
                        "matmul_tiled_4x4"
                    },
                    "{label}"
                );
                run_matmul(&stream, &a, &b, m, k, n, &opts)
            };
            let got = run(MatmulAlgorithm::Tiled);
            let what = format!("{label} {m}x{k}x{n}");
            let (want, mag) = reference(&a, &b, m, k, n);
            assert_within_sum_bound(&what, &got, &want, &mag, k);
            let tiled = run(MatmulAlgorithm::Tiled4x4);
            let differ = first_difference(&got, &tiled);
            assert!(
                differ.is_none(),
                "{what}: output {differ:?} differs from the 4x4 kernel's"
            );
        }
    }
    no_validation_errors();
}

/// The split-K modes (bf16 and f16 tensors' defaults) give the same bits
/// from both tiled kernels: the same f32 running sums over k, cut at the
/// same steps (every `SPLIT_K_CHUNK`, and after step k - 1), the chunk
/// sums rounded and added alike. Shapes with several chunks, a last chunk
/// cut short, and k off the kernels' 16- and 32-step tiles.
/// A buffer may be longer than its matrix, and what lies past the matrix
/// never reaches the product: the 4x4 kernel stages rows past m and
/// columns past n as it reads them (they enter only outputs it does not
/// store) and selects steps past k to zero. With NaNs and infinities after
/// `a` and `b`, every kernel gives the bits it gives on buffers of the
/// exact size, and writes nothing past `out`'s m x n values.
#[test]
fn values_past_the_matrices_never_reach_the_product() {
    let split = |inputs, reduction| MatmulPrecision {
        inputs,
        accumulation: Accumulation::F32,
        reduction,
    };
    let mut precisions = vec![
        MatmulPrecision::IEEE,
        split(InputRounding::Bf16, Reduction::Bf16),
        split(InputRounding::F16, Reduction::F16),
    ];
    precisions.extend(input_modes().map(|(mode, _)| MatmulPrecision::inputs(mode)));
    // One partial tile; whole tiles; a partial tile after whole ones in
    // each dimension (k = 19: a last tile of 3 steps).
    let shapes = [(1, 1, 1), (3, 5, 7), (64, 32, 64), (70, 19, 65)];
    let poison = |len: usize| -> Vec<f32> {
        let values = [f32::NAN, f32::INFINITY, -f32::NAN, f32::NEG_INFINITY];
        (0..len).map(|i| values[i % 4]).collect()
    };
    const UNTOUCHED: f32 = 12345.0;
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        let algorithms = every_kernel(&stream);
        for &(m, k, n) in &shapes {
            let mut rng = Rng(0x9a57 ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            // A tile's rows past a (64 x k) and a tile's columns past b's
            // last row, and more.
            let a_long: Vec<f32> = a.iter().copied().chain(poison(64 * k + 64)).collect();
            let b_long: Vec<f32> = b.iter().copied().chain(poison(64 * k + 64)).collect();
            for &precision in &precisions {
                for &algorithm in &algorithms {
                    // The tensor-core kernels take every mode here but plain f32.
                    if algorithm == MatmulAlgorithm::TensorCore
                        && precision == MatmulPrecision::IEEE
                    {
                        continue;
                    }
                    let opts = MatmulOptions {
                        algorithm,
                        precision,
                    };
                    let what = format!("{label} {algorithm:?} {precision:?} {m}x{k}x{n}");
                    let exact = run_matmul(&stream, &a, &b, m, k, n, &opts);
                    assert!(
                        exact.iter().all(|x| x.is_finite()),
                        "{what}: a non-finite product of finite inputs"
                    );
                    let out = upload(&stream, &vec![UNTOUCHED; m * n + 64]);
                    let (al, bl) = (upload(&stream, &a_long), upload(&stream, &b_long));
                    compute::matmul(&stream, &al, &bl, &out, m, k, n, &opts).expect("matmul");
                    let got = out.read_as::<f32>(&stream).expect("read");
                    if let Some(i) = first_difference(&exact, &got[..m * n]) {
                        panic!(
                            "{what}: c[{i}] is {} with NaN and infinity past the matrices, {} without",
                            got[i], exact[i]
                        );
                    }
                    assert!(
                        got[m * n..].iter().all(|&x| x == UNTOUCHED),
                        "{what}: written past out's {} values",
                        m * n
                    );
                }
            }
        }
    }
    no_validation_errors();
}

/// `Tiled8x8` and `Tiled4x4` give the same bits for `a * b` in
/// `precision` (NaN where the other gives NaN: a NaN's payload is not
/// promised); returns the product.
fn tiled_kernels_agree(
    label: &str,
    stream: &Stream,
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    precision: MatmulPrecision,
) -> Vec<f32> {
    let run = |algorithm| {
        let opts = MatmulOptions {
            algorithm,
            precision,
        };
        run_matmul(stream, a, b, m, k, n, &opts)
    };
    let eight = run(MatmulAlgorithm::Tiled8x8);
    let four = run(MatmulAlgorithm::Tiled4x4);
    for (i, (e, f)) in eight.iter().zip(&four).enumerate() {
        assert!(
            e.to_bits() == f.to_bits() || (e.is_nan() && f.is_nan()),
            "{label} {precision:?} {m}x{k}x{n}: c[{i}] is {e} from Tiled8x8, {f} from Tiled4x4"
        );
    }
    eight
}

#[test]
fn split_k_modes_agree_across_tiled_kernels() {
    let split = |inputs, reduction| MatmulPrecision {
        inputs,
        accumulation: Accumulation::F32,
        reduction,
    };
    let modes = [
        split(InputRounding::Bf16, Reduction::Bf16),
        split(InputRounding::F16, Reduction::F16),
        split(InputRounding::Ieee, Reduction::Bf16),
    ];
    let shapes = [
        (1, 1, 1),
        (3, 257, 5),
        (17, 300, 13),
        (2, 512, 3),
        (5, 529, 66),
    ];
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        for &(m, k, n) in &shapes {
            let mut rng = Rng(0x5917 ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            for precision in modes {
                tiled_kernels_agree(label, &stream, &a, &b, (m, k, n), precision);
            }
        }
    }
    no_validation_errors();
}

/// Values where rounding is easy to get wrong: ties of each format
/// (tf32 at 1 + 2^-11, bf16 at 1 + 2^-8), f16's subnormals and overflow
/// threshold, f32 subnormals, signed zero, bf16's overflow from f32's
/// largest values, infinities and NaNs.
const AWKWARD: [f32; 14] = [
    1.0 + 1.0 / 2048.0,
    -(1.0 + 3.0 / 2048.0),
    1.0 + 1.0 / 256.0,
    5.960_464_5e-8 * 1.5,
    -6.1e-5,
    65504.0,
    65520.0,
    -65519.99,
    f32::MIN_POSITIVE / 3.0,
    -0.0,
    3.4e38,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// `MATMUL_ROUND_INPUTS`, the 4x4 kernel's input-rounding pass of large
/// products, gives the Rust reference's bits (NaN for NaN) in each format
/// on every backend: awkward values among random ones, A and B of
/// different lengths, neither a multiple of the workgroup, and once
/// A and B together past 65535 workgroups, where the grid takes a second
/// row.
#[test]
fn the_input_rounding_pass_rounds_as_the_rust_reference() {
    use compute::params::Param;
    use keel::compute::precision::{round_bf16, round_f16, round_tf32};
    let formats: [(u32, Round); 4] = [(0, |x| x), (1, round_tf32), (2, round_bf16), (3, round_f16)];
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        let mut rng = Rng(0x0dd5);
        for (len_a, len_b, cases) in [(1000, 777, &formats[..]), (1 << 24, 301, &formats[2..3])] {
            let mut a: Vec<f32> = (0..len_a).map(|_| rng.normal() * 1e3).collect();
            let mut b: Vec<f32> = (0..len_b).map(|_| rng.normal() * 1e-3).collect();
            for (i, &v) in AWKWARD.iter().enumerate() {
                a[i * 37] = v;
                b[i * 19 + 3] = -v;
            }
            let (ab, bb) = (upload(&stream, &a), upload(&stream, &b));
            let (ra, rb) = (output(&stream, len_a), output(&stream, len_b));
            for &(format, round) in cases {
                let grid = compute::params::elementwise_grid((len_a + len_b) as u64);
                compute::MATMUL_ROUND_INPUTS
                    .launch(
                        &stream,
                        grid,
                        &[&ab, &bb, &ra, &rb],
                        &[
                            Param::U32(len_a as u32),
                            Param::U32(len_b as u32),
                            Param::U32(format),
                        ],
                    )
                    .expect("launch");
                for (side, src, out) in [("a", &a, &ra), ("b", &b, &rb)] {
                    let got = out.read_as::<f32>(&stream).expect("read");
                    for (i, (&x, &g)) in src.iter().zip(&got).enumerate() {
                        let want = round(x);
                        assert!(
                            want.to_bits() == g.to_bits() || (want.is_nan() && g.is_nan()),
                            "{label} format {format}: {side}[{i}] = {x:e} ({:#010x}) rounded to {g:e} ({:#010x}), expected {want:e} ({:#010x})",
                            x.to_bits(),
                            g.to_bits(),
                            want.to_bits()
                        );
                    }
                }
            }
        }
    }
    no_validation_errors();
}

/// Products of at least `ROUND_ONCE_MIN_TILES` tiles each way round the
/// 4x4 kernel's inputs in a pass of their own, smaller ones while staging;
/// either way the bits are the 8x8 kernel's (which always rounds while
/// staging), in every mode that rounds inputs, split-K included, with
/// awkward values in A and B. Shapes on both sides of the threshold
/// (448 = 7 tiles, 449 = 8) and with k = 1, off the 16-step tile, and
/// past a split-K chunk.
#[test]
fn large_products_round_their_inputs_once_with_the_same_bits() {
    assert_eq!(
        compute::ROUND_ONCE_MIN_TILES,
        8,
        "the shapes below straddle 8 tiles"
    );
    let split = |inputs, reduction| MatmulPrecision {
        inputs,
        accumulation: Accumulation::F32,
        reduction,
    };
    let modes = [
        MatmulPrecision::TF32,
        MatmulPrecision::BF16,
        MatmulPrecision::inputs(InputRounding::F16),
        split(InputRounding::Bf16, Reduction::Bf16),
        split(InputRounding::F16, Reduction::F16),
    ];
    let shapes = [
        (449, 5, 449),
        (448, 5, 449),
        (449, 1, 513),
        (520, 37, 448),
        (457, 300, 452),
    ];
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        for &(m, k, n) in &shapes {
            let mut rng = Rng(0x0ace ^ (m * 1000 + k * 10 + n) as u64);
            let (mut a, mut b) = (rng.vec(m * k), rng.vec(k * n));
            for (i, &v) in AWKWARD.iter().enumerate() {
                a[(i * 131) % (m * k)] = v;
                b[(i * 67 + 5) % (k * n)] = v;
            }
            for precision in modes {
                let c = tiled_kernels_agree(label, &stream, &a, &b, (m, k, n), precision);
                let nans = c.iter().filter(|v| v.is_nan()).count();
                assert!(
                    nans < m * n / 4,
                    "{label}: the awkward values spread too far"
                );
            }
        }
    }
    no_validation_errors();
}

#[test]
fn matmul_checks_its_arguments() {
    let stream = keel::default_stream(Device::cpu()).expect("stream");
    let a = output(&stream, 6);
    let b = output(&stream, 6);
    let c = output(&stream, 4);
    let opts = MatmulOptions::default();
    let err = |r: keel::Result<()>| r.expect_err("an error").to_string();
    let e = err(compute::matmul(&stream, &a, &b, &c, 2, 0, 2, &opts));
    assert!(e.contains("k = 0"), "{e}");
    let e = err(compute::matmul(&stream, &a, &b, &c, 2, 4, 2, &opts));
    assert!(
        e.contains("`a`") && e.contains("32 bytes") && e.contains("found 24"),
        "{e}"
    );
    let e = err(compute::matmul(&stream, &a, &b, &c, 3, 2, 3, &opts));
    assert!(e.contains("`out`") && e.contains("9 f32s"), "{e}");
    let e = err(compute::matmul(&stream, &a, &b, &a, 2, 2, 2, &opts));
    assert!(e.contains("also `a`"), "{e}");
    let e = err(compute::matmul(
        &stream,
        &a,
        &b,
        &c,
        1 << 20,
        1 << 13,
        1,
        &opts,
    ));
    assert!(e.contains("indices are u32"), "{e}");
    // The 16-bit entry: a and b hold two bytes a value; on a device
    // without 16-bit tensor cores it launches nothing and says so.
    let bf16 = MatmulOptions {
        precision: MatmulPrecision::BF16,
        ..MatmulOptions::default()
    };
    let halves = |m, k, n| compute::matmul_halves(&stream, &a, &b, &c, m, k, n, &bf16);
    let e = halves(2, 7, 2).expect_err("a too small").to_string();
    assert!(
        e.contains("expected `a` to hold at least 14 16-bit values")
            && e.contains("found 24 bytes"),
        "{e}"
    );
    let e = halves(2, 0, 2).expect_err("k = 0").to_string();
    assert!(e.contains("k = 0"), "{e}");
    assert!(
        !halves(2, 6, 2).expect("fits"),
        "no tensor cores on the CPU"
    );
    let e = err(compute::softmax_rows(&stream, &a, &c, 0, 3));
    assert!(e.contains("rows = 0"), "{e}");
    let e = err(compute::sum(&stream, &a, 7, &c));
    assert!(e.contains("`x`") && e.contains("7 f32s"), "{e}");
    let e = err(compute::sum(&stream, &a, 0, &c));
    assert!(e.contains("n = 0"), "{e}");
    let e = err(compute::sum_with(&stream, &a, 6, &c, SumVariant::Subgroup));
    assert!(e.contains("subgroup"), "{e}");
    // A buffer on another device.
    if let Some(d) = conformance::device(DeviceType::Vulkan) {
        let vs = keel::default_stream(d).expect("stream");
        let va = output(&vs, 6);
        let e = err(compute::sum(&stream, &va, 6, &c));
        assert!(e.contains("vulkan:0") && e.contains("cpu"), "{e}");
    }
}

#[test]
fn sum_matches_the_f64_reference_with_both_variants() {
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        let subgroups = compute::subgroups_supported(&stream).expect("query");
        let mut variants = vec![SumVariant::Shared, SumVariant::Auto];
        if subgroups {
            variants.push(SumVariant::Subgroup);
        } else {
            eprintln!("{label}: no subgroup operations; the subgroup variant is not tested here");
        }
        // The last is past 1024 workgroups of 2048 (the first level's cap,
        // so each invocation strides over several elements).
        for n in [1usize, 2, 255, 256, 257, 2047, 2049, 100_003, 3_000_017] {
            let x = Rng(n as u64 + 7).vec(n);
            let want: f64 = x.iter().map(|&v| v as f64).sum();
            let mag: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            let tol = 2.0 * (n as f64 / 256.0 + 40.0) * U * mag;
            let xb = upload(&stream, &x);
            for &variant in &variants {
                let out = output(&stream, 1);
                compute::sum_with(&stream, &xb, n, &out, variant).expect("sum");
                let got = out.read_as::<f32>(&stream).expect("read")[0] as f64;
                assert!(
                    (got - want).abs() <= tol,
                    "{label} {variant:?} n = {n}: {got}, expected {want} (tolerance {tol:e})"
                );
            }
        }
    }
    no_validation_errors();
}

#[test]
fn softmax_rows_is_stable_and_matches_the_reference() {
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        // The last has more rows than one grid dimension holds (65535
        // workgroups), so rows continue in the grid's y.
        let shapes = [(1, 1), (1, 7), (3, 256), (5, 257), (2, 1000), (65_537, 2)];
        for &(rows, cols) in &shapes {
            let mut rng = Rng((rows * 7 + cols) as u64);
            // Large values: exp without the max subtracted would overflow.
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| 1000.0 * ((i / cols) % 3) as f32 + 20.0 * rng.uniform())
                .collect();
            let (xb, ob) = (upload(&stream, &x), output(&stream, rows * cols));
            compute::softmax_rows(&stream, &xb, &ob, rows, cols).expect("softmax");
            let got = ob.read_as::<f32>(&stream).expect("read");
            for (r, (xr, gr)) in x.chunks(cols).zip(got.chunks(cols)).enumerate() {
                let max = xr.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
                let e: Vec<f64> = xr.iter().map(|&v| (v as f64 - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for (j, (g, e)) in gr.iter().zip(&e).enumerate() {
                    let want = e / total;
                    let tol = (2.0 * (cols as f64 + 40.0) * U + 1e-6) * want + 1e-9;
                    assert!(
                        (*g as f64 - want).abs() <= tol,
                        "{label} {rows}x{cols}: out[{r}][{j}] = {g}, expected {want} (tolerance {tol:e})"
                    );
                }
            }
        }
    }
    no_validation_errors();
}

/// The relative Frobenius error of a matmul in `precision` on `stream`.
fn mode_error(
    stream: &Stream,
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
    want: &[f64],
    precision: MatmulPrecision,
) -> f64 {
    let opts = MatmulOptions {
        precision,
        ..Default::default()
    };
    let got = run_matmul(stream, a, b, m, k, n, &opts);
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).powi(2))
        .sum();
    let norm: f64 = want.iter().map(|w| w * w).sum();
    (err / norm).sqrt()
}

#[test]
fn precision_modes_order_their_errors_alike_on_every_backend() {
    let (m, k, n) = (24, 1024, 20);
    let mut rng = Rng(42);
    let a: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.normal()).collect();
    let (want, _) = reference(&a, &b, m, k, n);
    let f16_in = MatmulPrecision::inputs(InputRounding::F16);
    let f16_acc = MatmulPrecision {
        accumulation: Accumulation::F16,
        ..f16_in
    };
    let f16_red = MatmulPrecision {
        reduction: Reduction::F16,
        ..f16_in
    };
    let modes = [
        ("ieee", MatmulPrecision::IEEE),
        ("tf32", MatmulPrecision::TF32),
        ("bf16", MatmulPrecision::BF16),
        ("f16 inputs", f16_in),
        ("f16 inputs, f16 split-K reduction", f16_red),
        ("f16 inputs, f16 accumulation", f16_acc),
    ];
    let mut first: Option<(&str, Vec<f64>)> = None;
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        let errors: Vec<f64> = modes
            .iter()
            .map(|(_, p)| mode_error(&stream, &a, &b, (m, k, n), &want, *p))
            .collect();
        eprintln!(
            "{label}: {:?}",
            modes.iter().map(|m| m.0).zip(&errors).collect::<Vec<_>>()
        );
        let [ieee, tf32, bf16, f16, f16_red, f16_acc] = errors[..] else {
            unreachable!()
        };
        assert!(ieee < 1e-6, "{label}: ieee error {ieee:e}");
        assert!(ieee < tf32 && tf32 < bf16, "{label}: {errors:?}");
        // A 10-bit mantissa: tf32 and f16 inputs err alike; bf16's 7 bits
        // err about 8 times more.
        assert!(
            tf32 > 1e-4 && tf32 < 2e-3 && bf16 > 4.0 * tf32,
            "{label}: {errors:?}"
        );
        assert!(f16 < f16_red && f16_red < f16_acc, "{label}: {errors:?}");
        match &first {
            None => first = Some((label, errors)),
            Some((l0, e0)) => {
                for ((name, _), (e, e0)) in modes.iter().zip(errors.iter().zip(e0)) {
                    let ratio = e / e0;
                    assert!(
                        (0.8..1.25).contains(&ratio) || (*e < 1e-6 && *e0 < 1e-6),
                        "{name}: {label} error {e:e} vs {l0} {e0:e}"
                    );
                }
            }
        }
    }
    no_validation_errors();
}

#[test]
fn input_rounding_is_bit_identical_to_the_rust_reference_on_every_backend() {
    // Ties, values just off ties, f16's subnormals and overflow threshold,
    // signs, zero, infinities, f32's largest value (which tf32 and bf16
    // round up to infinity), and ordinary values: A is this column,
    // B = [1], so c_i = round(a_i) * 1.
    let p = |e: i32| 2f32.powi(e);
    let a = [
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        1.0 + p(-11) + p(-20),
        1.0 + p(-8),
        1.0 + 3.0 * p(-8),
        -(1.0 + 3.0 * p(-8)),
        p(-25),
        3.0 * p(-25),
        p(-15) + p(-24) + p(-25),
        65519.0,
        65520.0,
        -70000.0,
        0.0,
        0.1,
        -1.0 / 3.0,
        12345.678,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -f32::MAX,
    ];
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        // The tensor-core kernel rounds as it stages too, where it runs.
        let algorithms = every_kernel(&stream);
        for (mode, round) in input_modes() {
            for &algorithm in &algorithms {
                let opts = MatmulOptions {
                    algorithm,
                    precision: MatmulPrecision::inputs(mode),
                };
                let got = run_matmul(&stream, &a, &[1.0], a.len(), 1, 1, &opts);
                for (x, g) in a.iter().zip(&got) {
                    assert_eq!(
                        g.to_bits(),
                        round(*x).to_bits(),
                        "{label} {mode:?} {algorithm:?}: round({x:e}) = {g:e}, expected {:e}",
                        round(*x)
                    );
                }
            }
        }
    }
    no_validation_errors();
}

/// Every f32 bit pattern through `keel_round_f16_fast` (the 4x4 matmul's
/// staging) and `keel_round_f16` (which the test above ties to the Rust
/// reference), on each GPU backend: the same bits, or NaN for NaN. Each
/// invocation takes 256 consecutive patterns, 2^24 invocations in all,
/// and counts those that differ. Host backends run the Rust reference,
/// not this WGSL, so they are left out.
#[test]
fn fast_f16_rounding_matches_keel_round_f16_on_every_f32() {
    const CHECK: &str = "
struct Params { zero: u32 }
@group(0) @binding(0) var<storage, read_write> found: array<atomic<u32>, 2>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(256)
fn round_f16_sweep(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let first = (gid.x + gid.y * groups.x * 256u) * 256u;
    var bad = 0u;
    var last = 0u;
    for (var i = 0u; i < 256u; i++) {
        let x = bitcast<f32>(first + i);
        let want = bitcast<u32>(keel_round_f16(x));
        let got = bitcast<u32>(keel_round_f16_fast(x, params.zero));
        let nans = (want & 0x7fffffffu) > 0x7f800000u && (got & 0x7fffffffu) > 0x7f800000u;
        if want != got && !nans {
            bad += 1u;
            last = first + i;
        }
    }
    if bad > 0u {
        atomicAdd(&found[0], bad);
        atomicMax(&found[1], last);
    }
}
";
    let wgsl: &'static str = Box::leak(
        format!(
            "{}{CHECK}",
            include_str!("../../shaders/compute/rounding.wgsl")
        )
        .into_boxed_str(),
    );
    let launch = compute::params::Launch {
        kernel: keel::Kernel {
            name: "round_f16_sweep",
            workgroup_size: [256, 1, 1],
            bindings: 1,
            wgsl: Some(wgsl),
            ptx: None,
            cpu: None,
            strict_float: false,
        },
        params: &[compute::params::ParamType::U32],
    };
    let mut ran = 0;
    for (label, device) in backends() {
        if device.device_type() == DeviceType::Cpu {
            continue;
        }
        ran += 1;
        let stream = keel::default_stream(device).expect("stream");
        let found = Buffer::from_slice(&stream, &[0u32, 0]).expect("alloc");
        let t = std::time::Instant::now();
        launch
            .launch(
                &stream,
                [256, 256, 1],
                &[&found],
                &[compute::params::Param::U32(0)],
            )
            .expect("launch");
        let [bad, last] = found.read_as::<u32>(&stream).expect("read")[..] else {
            panic!("two words");
        };
        println!(
            "{label}: 2^32 patterns in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert_eq!(
            bad,
            0,
            "{label}: {bad} patterns differ, the largest {last:#010x} ({:e})",
            f32::from_bits(last)
        );
    }
    if ran == 0 {
        println!("no GPU backend here: the sweep did not run");
    }
    no_validation_errors();
}

/// The native f16 conversions (`enable f16;`) against the packed-word
/// emulation, bit for bit: f16 -> f32 over all 65536 patterns (a
/// signalling NaN may come back quieted, the documented difference), f32 -> f16 over ties, subnormals, the
/// overflow threshold, NaNs, infinities and a random sweep; odd lengths.
/// Runs on every device where `compute::f16_storage` is true; the others
/// print that they use the emulation only.
#[test]
fn native_f16_conversions_are_bit_identical_to_the_emulation() {
    use compute::params::{OP_CAST, OP_CAST_F16_NARROW, OP_CAST_F16_WIDEN, Param};
    let grid = |threads: usize| [threads.div_ceil(256) as u32, 1, 1];
    let halves: Vec<u16> = (0..=u16::MAX).collect();
    let p = |e: i32| 2f32.powi(e);
    let mut wide = vec![
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        1.0 + p(-11) + p(-20),
        p(-25),
        3.0 * p(-25),
        p(-24),
        p(-26),
        p(-15) + p(-24) + p(-25),
        p(-14) - p(-25),
        65504.0,
        65519.0,
        65520.0,
        -70000.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc1_2345),
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        0.0,
        -0.0,
        0.1,
        -1.0 / 3.0,
    ];
    let mut rng = Rng(0x05ee_df16);
    wide.extend((0..4001).map(|_| rng.normal() * 3000.0));
    wide.extend((0..1000).map(|_| rng.uniform() * p(-13)));
    assert_eq!(wide.len() % 2, 1, "an odd length checks the last pair");
    let mut ran = 0;
    for (label, device) in backends() {
        if !matches!(device.device_type(), DeviceType::Vulkan | DeviceType::Wgpu) {
            continue;
        }
        let stream = keel::default_stream(device).expect("stream");
        if !compute::f16_storage(&stream).expect("f16_storage") {
            println!("{label}: no native f16 storage, the emulation only");
            continue;
        }
        ran += 1;
        // f16 -> f32.
        let x = Buffer::from_slice(&stream, &halves).expect("upload");
        let (emu, native) = (output(&stream, halves.len()), output(&stream, halves.len()));
        let n = halves.len() as u32;
        OP_CAST
            .launch(
                &stream,
                grid(halves.len() / 2),
                &[&x, &emu],
                &[Param::U32(n), Param::U32(0)],
            )
            .expect("emulated f16 -> f32");
        OP_CAST_F16_WIDEN
            .launch(
                &stream,
                grid(halves.len()),
                &[&x, &native],
                &[Param::U32(n)],
            )
            .expect("native f16 -> f32");
        let (emu, native) = (
            emu.read_as::<u32>(&stream).expect("read"),
            native.read_as::<u32>(&stream).expect("read"),
        );
        // A NaN stays a NaN, but its sign and payload are the hardware's:
        // lavapipe quiets a signalling one (sets bit 22), NVIDIA returns
        // its canonical NaN 0x7fffffff. Every other value is exact.
        let f32_nan = |b: u32| b & 0x7fff_ffff > 0x7f80_0000;
        let f16_nan = |b: u16| b & 0x7fff > 0x7c00;
        for (h, (e, g)) in halves.iter().zip(emu.iter().zip(&native)) {
            let same = if f16_nan(*h) {
                f32_nan(*g) && f32_nan(*e)
            } else {
                g == e
            };
            assert!(
                same,
                "{label}: f16 {h:#06x} -> f32 {g:#010x}, emulation {e:#010x}"
            );
        }
        let differ = emu.iter().zip(&native).filter(|(e, g)| e != g).count();
        println!(
            "{label}: native f16 -> f32, {differ} of 2046 NaN patterns differ from the emulation's bits"
        );
        // f32 -> f16.
        let n = wide.len() as u32;
        let x = upload(&stream, &wide);
        let bytes = (wide.len() * 2).div_ceil(4) * 4;
        let emu = Buffer::new(device, bytes).expect("output");
        let native = Buffer::new(device, bytes).expect("output");
        OP_CAST
            .launch(
                &stream,
                grid(wide.len().div_ceil(2)),
                &[&x, &emu],
                &[Param::U32(n), Param::U32(2)],
            )
            .expect("emulated f32 -> f16");
        OP_CAST_F16_NARROW
            .launch(&stream, grid(wide.len()), &[&x, &native], &[Param::U32(n)])
            .expect("native f32 -> f16");
        let (emu, native) = (
            emu.read_as::<u16>(&stream).expect("read"),
            native.read_as::<u16>(&stream).expect("read"),
        );
        for (v, (e, g)) in wide.iter().zip(emu.iter().zip(&native)) {
            let same = if v.is_nan() {
                f16_nan(*g) && f16_nan(*e)
            } else {
                g == e
            };
            assert!(
                same,
                "{label}: f32 {:#010x} ({v:e}) -> f16 {g:#06x}, emulation {e:#06x}",
                v.to_bits()
            );
        }
    }
    println!("native f16 conversions checked on {ran} device(s)");
    no_validation_errors();
}

/// `Tiled` picks the GPU-shaped kernel on a GPU for plain f32 and every
/// mode that only rounds inputs, the lane-shaped one otherwise; the
/// tensor-core kernel runs only when named, on CUDA devices of compute
/// capability 8.0 or later; the naive algorithm is never replaced. (Here
/// no CUDA device runs, so the tensor-core kernel itself is checked by
/// `ptxas` and the layout test.)
#[test]
fn matmul_picks_its_kernel_by_device_kind_and_precision() {
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        let capability = keel::properties(device)
            .expect("properties")
            .extra
            .iter()
            .find(|(k, _)| k == "compute capability")
            .and_then(|(_, v)| v.split('.').next()?.parse::<u32>().ok());
        let mma = device.device_type() == DeviceType::Cuda && capability.is_some_and(|c| c >= 8);
        assert_eq!(
            compute::tf32_mma_supported(&stream).expect("query"),
            mma,
            "{label}"
        );
        let props = keel::properties(device).expect("properties");
        let coop = matches!(device.device_type(), DeviceType::Vulkan | DeviceType::Wgpu)
            && props.extra.iter().any(|(k, _)| k == "cooperative matrix");
        assert_eq!(
            compute::cooperative_matrix_supported(&stream).expect("query"),
            coop,
            "{label}"
        );
        if coop {
            // The kernel's fragments follow the subgroups' width.
            let shape = props
                .extra
                .iter()
                .find(|(k, _)| k == "cooperative matrix")
                .map(|(_, v)| v.as_str())
                .unwrap_or_default();
            // The width: the device's own, or one its pipelines ask for
            // (Vulkan), which the property names.
            let width = shape
                .split("subgroups of ")
                .nth(1)
                .and_then(|w| w.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|w| w.parse::<u32>().ok());
            let want = match width {
                Some(32) => "16x16x16 f16",
                Some(8) => "8x8x8 f16",
                other => panic!("{label}: cooperative matrices with subgroups of {other:?}"),
            };
            assert!(shape.starts_with(want), "{label}: {shape}");
            if device.device_type() == DeviceType::Wgpu || !shape.contains("asked for") {
                assert_eq!(props.subgroup_size, width, "{label}: {shape}");
            }
        }
        // A product that fills a GPU with the tensor-core kernel's tiles.
        let (m, n) = (4096, 4096);
        let pick = |algorithm, precision| {
            compute::matmul_kernel(
                &stream,
                &MatmulOptions {
                    algorithm,
                    precision,
                },
                m,
                n,
            )
            .expect("kernel")
            .kernel
            .name
        };
        // Plain f32 under `Tiled`: the GPU-shaped kernel on a GPU, the
        // lane-shaped one on a CPU (lavapipe, llvmpipe, the CPU backend).
        let kind = keel::properties(device).expect("properties").kind;
        let tiled = if kind.is_gpu() {
            "matmul_tiled_4x4"
        } else {
            "matmul_tiled"
        };
        use MatmulAlgorithm::{Naive, TensorCore, Tiled, Tiled4x4, Tiled8x8};
        use MatmulPrecision as P;
        let f16_acc = P {
            inputs: InputRounding::F16,
            accumulation: Accumulation::F16,
            reduction: Reduction::F32,
        };
        let split_bf16 = P {
            inputs: InputRounding::Bf16,
            accumulation: Accumulation::F32,
            reduction: Reduction::Bf16,
        };
        // The modes that round the inputs run on tensor cores where the
        // device has them: tf32 on the tf32 kernel, bf16 and f16 on the
        // 16-bit one.
        let rounded = if mma { "matmul_mma" } else { tiled };
        let rounded16 = if mma { "matmul_mma16" } else { tiled };
        // Plain f32 on the CUDA override with 128 x 128 tiles where
        // `cp.async` is (compute capability 8.0).
        let plain = if mma { "matmul_sgemm" } else { tiled };
        // The split-K modes on the GPU-shaped kernel's own entry point,
        // and bf16 and f16 ones on the 16-bit tensor-core kernel's.
        let split = if kind.is_gpu() {
            "matmul_tiled_4x4_split"
        } else {
            "matmul_tiled"
        };
        let split16 = if mma { "matmul_mma16_split" } else { split };
        let f16_inputs = P::inputs(InputRounding::F16);
        // f16 inputs on cooperative matrices where a Vulkan or wgpu GPU has
        // them (a CPU device's are emulated, slower than its tiled kernel).
        let rounded_f16 = if coop && kind.is_gpu() {
            "matmul_coop"
        } else {
            rounded16
        };
        for (algorithm, precision, want) in [
            (Tiled, P::TF32, rounded),
            (Tiled, P::IEEE, plain),
            (Tiled, P::BF16, rounded16),
            (Tiled, f16_inputs, rounded_f16),
            (Tiled, split_bf16, split16),
            (Tiled, f16_acc, "matmul_tiled"),
            (Tiled8x8, P::IEEE, "matmul_tiled"),
            (Tiled8x8, P::TF32, "matmul_tiled"),
            (Tiled4x4, P::IEEE, "matmul_tiled_4x4"),
            (Tiled4x4, P::BF16, "matmul_tiled_4x4"),
            (Tiled4x4, split_bf16, "matmul_tiled_4x4_split"),
            (Naive, P::TF32, "matmul_naive"),
        ] {
            assert_eq!(
                pick(algorithm, precision),
                want,
                "{label} ({kind}): {algorithm:?} in {precision:?}"
            );
        }
        // The 4x4 kernel has no rounded-accumulator modes, and the
        // tensor-core kernel computes the input-rounding modes on tensor
        // cores only: asking otherwise is an error that says so.
        let ask = |algorithm, precision| {
            compute::matmul_kernel(
                &stream,
                &MatmulOptions {
                    algorithm,
                    precision,
                },
                m,
                n,
            )
        };
        // A product of fewer than MMA_MIN_BLOCKS tensor-core tiles runs
        // the 4x4 kernel, whose tiles are a quarter the size; naming the
        // tensor-core kernel still runs it.
        let small = |algorithm| {
            let opts = MatmulOptions {
                algorithm,
                precision: P::TF32,
            };
            compute::matmul_kernel(&stream, &opts, 512, 512).map(|l| l.kernel.name)
        };
        assert_eq!(small(Tiled).expect("kernel"), tiled, "{label}");
        let small_plain = MatmulOptions {
            algorithm: Tiled,
            precision: P::IEEE,
        };
        assert_eq!(
            compute::matmul_kernel(&stream, &small_plain, 512, 512)
                .expect("kernel")
                .kernel
                .name,
            tiled,
            "{label}"
        );
        if mma {
            assert_eq!(small(TensorCore).expect("kernel"), "matmul_mma", "{label}");
        }
        let err = ask(Tiled4x4, f16_acc).expect_err("Tiled4x4 with f16 accumulation");
        assert!(err.to_string().contains("sums in f32"), "{label}: {err}");
        for precision in [P::TF32, P::BF16, f16_inputs] {
            match ask(TensorCore, precision) {
                Ok(launch) if coop => {
                    assert_eq!(precision, f16_inputs, "{label}");
                    assert_eq!(launch.kernel.name, "matmul_coop", "{label}");
                    let eight = props
                        .extra
                        .iter()
                        .any(|(k, v)| k == "cooperative matrix" && v.starts_with("8x8x8"));
                    let want = if eight {
                        compute::MATMUL_COOP8.kernel.wgsl
                    } else {
                        compute::MATMUL_COOP.kernel.wgsl
                    };
                    assert_eq!(launch.kernel.wgsl, want, "{label}: the fragment size");
                }
                Ok(launch) => {
                    assert!(mma, "{label}: tensor cores where there are none");
                    let want = if precision == P::TF32 {
                        "matmul_mma"
                    } else {
                        "matmul_mma16"
                    };
                    assert_eq!(launch.kernel.name, want, "{label}");
                }
                Err(e) => {
                    assert!(!mma, "{label}: {e}");
                    assert!(
                        e.to_string().contains("compute capability 8.0"),
                        "{label}: {e}"
                    );
                }
            }
        }
        match ask(TensorCore, split_bf16) {
            Ok(launch) => {
                assert!(mma, "{label}: tensor cores where there are none");
                assert_eq!(launch.kernel.name, "matmul_mma16_split", "{label}");
            }
            Err(e) => assert!(!mma, "{label}: {e}"),
        }
        let split_tf32 = P {
            inputs: InputRounding::Tf32,
            ..split_bf16
        };
        for precision in [P::IEEE, split_tf32, f16_acc] {
            let err = ask(TensorCore, precision).expect_err("tensor cores in that mode");
            assert!(
                err.to_string()
                    .contains("round the inputs to tf32, bf16 or f16"),
                "{label}: {err}"
            );
        }
    }
}

/// `matmul_coop.wgsl` with the scalar stand-ins of
/// `tests/ops/coop_matrix_host.wgsl` for its cooperative-matrix
/// operations, on the CPU backend's interpreter, in both configurations
/// (four subgroups of 32 with fragments of 16, sixteen of 8 with fragments
/// of 8), on copies packed as the packing pass packs them: the kernel's
/// loads from them, tiling, subgroup blocks and edge handling against
/// the f64 reference of the f16-rounded inputs, at
/// shapes with a partial tile in every direction, k off the 32-step
/// stage, and one element. The operations themselves are the driver's,
/// checked on devices that have them by
/// `cooperative_matrix_matmul_matches_the_f64_reference`.
#[test]
fn cooperative_matrix_kernel_computes_the_product_with_scalar_fragments() {
    let sixteen = concat!(
        include_str!("coop_matrix_host.wgsl"),
        "const FRAG: u32 = 16u;\nconst SUBGROUP: u32 = 32u;\n",
        include_str!("../../shaders/compute/matmul_coop.wgsl")
    );
    let eight = concat!(
        include_str!("coop_matrix_host.wgsl"),
        "const FRAG: u32 = 8u;\nconst SUBGROUP: u32 = 8u;\n",
        include_str!("../../shaders/compute/matmul_coop.wgsl")
    );
    // The packing pass's copies, made here: each value rounded to f16
    // (kept as f32 on the host), padded with zeros to whole tiles.
    let pack = |x: &[f32], rows: usize, cols: usize, to_rows: usize, to_cols: usize| {
        let mut out = vec![0.0f32; to_rows * to_cols];
        for r in 0..rows {
            for c in 0..cols {
                out[r * to_cols + c] = keel::compute::precision::round_f16(x[r * cols + c]);
            }
        }
        out
    };
    let stream = keel::default_stream(Device::cpu()).expect("stream");
    let round = keel::compute::precision::round_f16;
    for (fragment, wgsl) in [(16, sixteen), (8, eight)] {
        let launch = compute::params::Launch {
            kernel: keel::Kernel {
                wgsl: Some(wgsl),
                ..compute::MATMUL_COOP.kernel
            },
            params: compute::MATMUL_COOP.params,
        };
        for (m, k, n) in [(1, 1, 1), (70, 45, 66)] {
            let mut rng = Rng(0xc0 ^ (m * 1000 + k * 10 + n) as u64);
            // Every seventh element of A scaled below 2^-14, so that it
            // rounds to an f16 subnormal.
            let (mut a, b) = (rng.vec(m * k), rng.vec(k * n));
            for x in a.iter_mut().step_by(7) {
                *x *= 1e-4;
            }
            let ra: Vec<f32> = a.iter().map(|&x| round(x)).collect();
            let rb: Vec<f32> = b.iter().map(|&x| round(x)).collect();
            let (want, mag) = reference(&ra, &rb, m, k, n);
            let (pm, pk, pn) = (
                m.next_multiple_of(64),
                k.next_multiple_of(32),
                n.next_multiple_of(64),
            );
            let (ab, bb, cb) = (
                upload(&stream, &pack(&a, m, k, pm, pk)),
                upload(&stream, &pack(&b, k, n, pk, pn)),
                output(&stream, m * n),
            );
            let u = |v: usize| compute::params::Param::U32(v as u32);
            launch
                .launch(
                    &stream,
                    [n.div_ceil(64) as u32, m.div_ceil(64) as u32, 1],
                    &[&ab, &bb, &cb],
                    &[u(m), u(k), u(n), u(0), u(0)],
                )
                .expect("launch");
            let got = cb.read_as::<f32>(&stream).expect("read");
            assert_within_sum_bound(
                &format!("fragments of {fragment}, {m}x{k}x{n}"),
                &got,
                &want,
                &mag,
                k,
            );
        }
    }
    // The kernels themselves name what the host end lacks.
    let (ab, cb) = (upload(&stream, &[1.0]), output(&stream, 1));
    for launch in [compute::MATMUL_COOP, compute::MATMUL_COOP8] {
        let err = launch
            .launch(
                &stream,
                [1, 1, 1],
                &[&ab, &ab, &cb],
                &[1, 1, 1, 0, 0].map(compute::params::Param::U32),
            )
            .expect_err("cooperative matrices on the host");
        assert!(err.to_string().contains("cooperative matrices"), "{err}");
    }
}

/// The cooperative-matrix kernel (Vulkan and wgpu devices with 16 x 16 x
/// 16 f16 cooperative matrices and subgroups of 32: NVIDIA's tensor
/// cores; 8 x 8 x 8 with subgroups of 8: Mesa's lavapipe in recent
/// releases, not Debian 12's) against the f64 product of the f16-rounded inputs within
/// f32's summation bound, at the odd shapes and on either side of its
/// 64 x 64 tile and 32-step stage; `Tiled` with f16 inputs is that kernel
/// on a GPU, and rounds a value as every kernel does. Prints where no device
/// has cooperative matrices (Debian 12's lavapipe has none).
#[test]
fn cooperative_matrix_matmul_matches_the_f64_reference() {
    let edges = [
        (63, 31, 65),
        (64, 32, 64),
        (65, 33, 129),
        (1, 1000, 1),
        (200, 333, 131),
        (513, 257, 255),
    ];
    let round = keel::compute::precision::round_f16;
    let f16_inputs = MatmulPrecision::inputs(InputRounding::F16);
    let mut ran = Vec::new();
    for (label, device) in backends() {
        let stream = keel::default_stream(device).expect("stream");
        if !compute::cooperative_matrix_supported(&stream).expect("query") {
            continue;
        }
        ran.push(label);
        // `Tiled` picks this kernel on a GPU only.
        let gpu = keel::properties(device).expect("properties").kind.is_gpu();
        for &(m, k, n) in SHAPES.iter().chain(&edges) {
            let mut rng = Rng(0xc00b ^ (m * 1000 + k * 10 + n) as u64);
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let ra: Vec<f32> = a.iter().map(|&x| round(x)).collect();
            let rb: Vec<f32> = b.iter().map(|&x| round(x)).collect();
            let (want, mag) = reference(&ra, &rb, m, k, n);
            let run = |algorithm| {
                let opts = MatmulOptions {
                    algorithm,
                    precision: f16_inputs,
                };
                run_matmul(&stream, &a, &b, m, k, n, &opts)
            };
            let got = run(MatmulAlgorithm::TensorCore);
            if gpu {
                assert_eq!(got, run(MatmulAlgorithm::Tiled), "{label} {m}x{k}x{n}");
            }
            assert_within_sum_bound(&format!("{label} {m}x{k}x{n}"), &got, &want, &mag, k);
        }
        // Rounding: a column of values through a 1 x 1 B of 1.0, among them
        // f16 subnormals, ties and values past f16's largest.
        let xs = [
            1e-7f32,
            -3e-6,
            6.1e-5,
            1.0 + 1.0 / 2048.0,
            65519.0,
            65520.0,
            -7e4,
            0.1,
        ];
        let opts = MatmulOptions {
            algorithm: MatmulAlgorithm::TensorCore,
            precision: f16_inputs,
        };
        let got = run_matmul(&stream, &xs, &[1.0], xs.len(), 1, 1, &opts);
        for (x, g) in xs.iter().zip(&got) {
            assert_eq!(
                g.to_bits(),
                round(*x).to_bits(),
                "{label}: round({x:e}) = {g:e}"
            );
        }
    }
    if ran.is_empty() {
        // The GPU check (`scripts/device-check.sh`) sets this where the
        // driver is known to offer them, so that a device that lost them
        // fails instead of passing unchecked.
        assert!(
            std::env::var_os("KEEL_REQUIRE_COOPERATIVE_MATRIX").is_none(),
            "KEEL_REQUIRE_COOPERATIVE_MATRIX is set, but no Vulkan or wgpu device has \
             cooperative matrices of 16x16x16 f16 with subgroups of 32 or 8x8x8 with subgroups of 8"
        );
        println!(
            "skipped: no Vulkan or wgpu device here has cooperative matrices of 16x16x16 f16 \
             with subgroups of 32 or 8x8x8 with subgroups of 8 (Debian 12's lavapipe has \
             none)"
        );
    } else {
        println!("ran on {}", ran.join(", "));
    }
    no_validation_errors();
}
