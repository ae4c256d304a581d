//! Issue 13's accuracy test: matmul of 256x4096 by 4096x256 with inputs
//! from `randn` (a seeded generator), the error of each precision mode
//! against an f64 reference, on every backend that runs here (CPU,
//! Vulkan, wgpu's Vulkan and GL adapters; CUDA where a GPU and its driver
//! are present, skipped with the reason printed otherwise).
//!
//! The f32 modes (`ieee`, `tf32`, `bf16`) go through the dispatcher under
//! a precision scope (the policy decides the kernel's numerics); the f16
//! and bf16 modes call the compute kernel with the numerics their plans
//! give (`keel::compute::MatmulPrecision`).
//!
//! The error is normwise: `||C - R||_F / ||R||_F`. The bounds asserted
//! here are stated in docs/NUMERICS.md ("Measured error per mode"), with
//! the measured values. Run with `-- --nocapture` to print the table.

use keel::compute::{
    Accumulation, InputRounding, MatmulAlgorithm, MatmulOptions, MatmulPrecision, Reduction,
};
use keel::generator::Generator;
use keel::precision::Scope;

use keel::{Buffer, DType, Device, Tensor};

const M: usize = 256;
const K: usize = 4096;
const N: usize = 256;

/// Every backend that runs here, with a label.
fn backends() -> Vec<(&'static str, Device)> {
    keel::testing::conformance::builtin_devices()
}

/// How one mode runs.
#[derive(Clone, Copy)]
enum Mode {
    /// An `fp32_precision` value for `matmul`, through the dispatcher.
    Policy(&'static str),
    /// A compute kernel precision (f16/bf16 plans).
    Kernel(MatmulPrecision),
}

/// The modes, by name, with the error bound docs/NUMERICS.md states.
fn modes() -> Vec<(&'static str, Mode, f64)> {
    let f16 = |accumulation, reduction| {
        Mode::Kernel(MatmulPrecision {
            inputs: InputRounding::F16,
            accumulation,
            reduction,
        })
    };
    vec![
        ("ieee", Mode::Policy("ieee"), 4e-6),
        ("tf32", Mode::Policy("tf32"), 1e-3),
        ("bf16", Mode::Policy("bf16"), 8e-3),
        (
            "f16 (f32 acc.)",
            f16(Accumulation::F32, Reduction::F32),
            1e-3,
        ),
        (
            "f16 (f16 acc.)",
            f16(Accumulation::F16, Reduction::F32),
            3e-2,
        ),
        (
            "f16 split-K f16",
            f16(Accumulation::F32, Reduction::F16),
            2e-3,
        ),
        (
            "bf16 split-K bf16",
            Mode::Kernel(MatmulPrecision {
                inputs: InputRounding::Bf16,
                accumulation: Accumulation::F32,
                reduction: Reduction::Bf16,
            }),
            1.6e-2,
        ),
    ]
}

/// `a @ b` in f64.
fn reference(a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0f64; M * N];
    let bt: Vec<f64> = (0..N * K)
        .map(|i| f64::from(b[(i % K) * N + i / K]))
        .collect();
    for i in 0..M {
        let row: Vec<f64> = a[i * K..(i + 1) * K]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        for j in 0..N {
            let col = &bt[j * K..(j + 1) * K];
            c[i * N + j] = row.iter().zip(col).map(|(x, y)| x * y).sum();
        }
    }
    c
}

/// `||got - want||_F / ||want||_F`.
fn normwise(got: &[f32], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (f64::from(g) - w).powi(2);
        den += w * w;
    }
    (num / den).sqrt()
}

fn run_mode(d: Device, a: &Tensor, b: &Tensor, mode: Mode) -> Vec<f32> {
    match mode {
        Mode::Policy(p) => {
            let _scope = Scope::new()
                .fp32_precision(d.device_type(), "matmul", p)
                .expect("scope")
                .enter();
            a.matmul(b).expect("matmul").to_vec::<f32>().expect("read")
        }
        Mode::Kernel(precision) => {
            let s = keel::current_stream(d).expect("stream");
            let out = Buffer::empty(d, M * N * 4).expect("out");
            let opts = MatmulOptions {
                algorithm: MatmulAlgorithm::Tiled,
                precision,
            };
            keel::compute::matmul(&s, a.buffer(), b.buffer(), &out, M, K, N, &opts)
                .expect("matmul");
            out.read_as::<f32>(&s).expect("read")
        }
    }
}

#[test]
fn matmul_error_per_mode_and_backend() {
    // Inputs from randn with a seeded generator, made on the CPU (one f64
    // reference for every backend) and copied to each device.
    let g = Generator::new(Device::cpu()).expect("generator");
    g.manual_seed(2026);
    let a = keel::dispatch::randn(&[M, K], Device::cpu(), Some(&g)).expect("a");
    let b = keel::dispatch::randn(&[K, N], Device::cpu(), Some(&g)).expect("b");
    assert_eq!(a.dtype(), DType::F32);
    let (av, bv) = (a.to_vec::<f32>().expect("a"), b.to_vec::<f32>().expect("b"));
    let want = reference(&av, &bv);
    let modes = modes();
    let mut table: Vec<(&str, Vec<f64>)> = Vec::new();
    for (label, d) in backends() {
        let s = keel::current_stream(d).expect("stream");
        let (da, db) = (a.to(d, &s).expect("a"), b.to(d, &s).expect("b"));
        let errors: Vec<f64> = modes
            .iter()
            .map(|&(_, mode, _)| normwise(&run_mode(d, &da, &db, mode), &want))
            .collect();
        println!(
            "{label:>12}: {}",
            modes
                .iter()
                .zip(&errors)
                .map(|((name, _, _), e)| format!("{name} {e:.3e}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        table.push((label, errors));
    }
    assert!(!table.is_empty());
    let idx = |name: &str| modes.iter().position(|(n, _, _)| *n == name).expect("mode");
    for (label, errors) in &table {
        // Each mode within its stated bound.
        for ((name, _, bound), &e) in modes.iter().zip(errors) {
            assert!(
                e <= *bound && e > 0.0,
                "{label}: {name}: error {e:.3e}, expected within (0, {bound:.1e}]"
            );
        }
        // The ordering.
        let e = |n: &str| errors[idx(n)];
        assert!(
            e("ieee") < e("tf32") && e("tf32") < e("bf16"),
            "{label}: expected ieee < tf32 < bf16, found {:.3e}, {:.3e}, {:.3e}",
            e("ieee"),
            e("tf32"),
            e("bf16")
        );
        assert!(
            e("f16 (f16 acc.)") > e("f16 (f32 acc.)"),
            "{label}: expected f16 accumulation worse than f32 accumulation, found {:.3e} vs {:.3e}",
            e("f16 (f16 acc.)"),
            e("f16 (f32 acc.)")
        );
        assert!(
            e("f16 split-K f16") > e("f16 (f32 acc.)"),
            "{label}: expected the f16 split-K reduction to add error"
        );
    }
    // The same mode gives the same error class on every backend. The
    // reduced modes run one kernel whose every output adds its products
    // in k order on every backend: within 10% of the CPU's. `ieee` on the
    // CPU is matrixmultiply (blocked, its own order, fused multiply-adds),
    // a few times more accurate than the k-order kernels: within a factor
    // of 8, still far below tf32's error (250 times ieee's).
    let (_, cpu) = &table[0];
    for (label, errors) in &table[1..] {
        for (i, (name, _, _)) in modes.iter().enumerate() {
            let ratio = errors[i] / cpu[i];
            let range = if *name == "ieee" {
                0.125..=8.0
            } else {
                0.9..=1.1
            };
            assert!(
                range.contains(&ratio),
                "{label}: {name}: error {:.3e} vs the CPU's {:.3e}",
                errors[i],
                cpu[i]
            );
        }
    }
}
