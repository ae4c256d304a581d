//! The dispatcher and the caching allocator on real work: the forward
//! pass of a small MLP (batch 64, width 512; three layers of `matmul` then
//! `add` of a bias, then `softmax` over each row and `sum` of everything),
//! 100 passes then a stream synchronize, through the dispatcher
//! (`Tensor` operators: a new output from the caching allocator per
//! operator) against the same kernels launched directly on buffers
//! allocated once before the loop. On the CPU, CUDA, Vulkan and each wgpu
//! adapter present.
//!
//! Goal: dispatched / direct <= 1.10 on the CPU, <= 1.05 on a GPU. Each
//! device prints the median and the range of the per-round ratios over
//! paired rounds (order alternating, `common::Paired`), and the time of
//! one pass, and checks that both ways compute the same result.
//!
//! Run: `cargo bench --bench mlp` (`KEEL_MLP_ROUNDS`
//! rounds, default 5; `KEEL_BENCH_DEVICES` limits the devices). Results
//! in docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use keel::compute::{self, MatmulAlgorithm, MatmulOptions};
use keel::dispatch::{ADD_F32, CPU_ADD, CPU_MATMUL, CPU_SOFTMAX, CPU_SUM, elementwise_grid};
use keel::{Buffer, DType, Device, Stream, Tensor};

mod common;

const BATCH: usize = 64;
const WIDTH: usize = 512;
const LAYERS: usize = 3;
const PASSES: usize = 100;

/// The model's inputs and parameters, as tensors (the buffers the direct
/// launches bind are theirs too).
struct Model {
    x: Tensor,
    weights: Vec<Tensor>,
    biases: Vec<Tensor>,
}

impl Model {
    fn new(d: Device) -> Model {
        let generator = keel::generator::Generator::new(d).expect("generator");
        generator.manual_seed(7);
        let scaled = |shape: &[usize], scale: f64| {
            let t = keel::dispatch::randn(shape, d, Some(&generator)).expect("randn");
            t.mul_scalar(scale).expect("scale")
        };
        // Weights scaled by 1/sqrt(width) keep the activations near 1.
        Model {
            x: scaled(&[BATCH, WIDTH], 1.0),
            weights: (0..LAYERS)
                .map(|_| scaled(&[WIDTH, WIDTH], 1.0 / (WIDTH as f64).sqrt()))
                .collect(),
            biases: (0..LAYERS).map(|_| scaled(&[BATCH, WIDTH], 0.1)).collect(),
        }
    }

    /// One forward pass through the dispatcher.
    fn dispatched(&self) -> Tensor {
        let mut h = self.x.clone();
        for (w, b) in self.weights.iter().zip(&self.biases) {
            h = h.matmul(w).expect("matmul").add(b).expect("add");
        }
        h.softmax().expect("softmax").sum().expect("sum")
    }
}

/// What the direct passes launch into: every intermediate, allocated once.
struct Direct {
    products: Vec<Buffer>,
    sums: Vec<Buffer>,
    probabilities: Buffer,
    total: Buffer,
}

impl Direct {
    fn new(d: Device) -> Direct {
        let act = || Buffer::empty(d, 4 * BATCH * WIDTH).expect("activation");
        Direct {
            products: (0..LAYERS).map(|_| act()).collect(),
            sums: (0..LAYERS).map(|_| act()).collect(),
            probabilities: act(),
            total: Buffer::empty(d, 4).expect("total"),
        }
    }

    /// One forward pass, the dispatcher's kernels launched directly.
    fn pass(&self, m: &Model, s: &Stream) {
        let d = s.device();
        let n = BATCH * WIDTH;
        let mut h = m.x.buffer();
        for l in 0..LAYERS {
            let (w, b) = (m.weights[l].buffer(), m.biases[l].buffer());
            let (p, out) = (&self.products[l], &self.sums[l]);
            if d.is_cpu() {
                let params = cpu_params(&[BATCH, WIDTH, WIDTH]);
                s.launch(&CPU_MATMUL, [1, 1, 1], &[h, w, p], &params)
                    .expect("matmul");
                s.launch(&CPU_ADD, [1, 1, 1], &[p, b, out], &cpu_params(&[n]))
                    .expect("add");
            } else {
                let (precision, _) = keel::dispatch::matmul_precision(d.device_type(), DType::F32);
                let opts = MatmulOptions {
                    algorithm: MatmulAlgorithm::Tiled,
                    precision,
                };
                compute::matmul(s, h, w, p, BATCH, WIDTH, WIDTH, &opts).expect("matmul");
                s.launch(
                    &ADD_F32,
                    elementwise_grid(n as u64),
                    &[p, b, out],
                    &(n as u32).to_le_bytes(),
                )
                .expect("add");
            }
            h = out;
        }
        if d.is_cpu() {
            let params = cpu_params(&[BATCH, WIDTH]);
            s.launch(&CPU_SOFTMAX, [1, 1, 1], &[h, &self.probabilities], &params)
                .expect("softmax");
            s.launch(
                &CPU_SUM,
                [1, 1, 1],
                &[&self.probabilities, &self.total],
                &cpu_params(&[n]),
            )
            .expect("sum");
        } else {
            compute::softmax_rows(s, h, &self.probabilities, BATCH, WIDTH).expect("softmax");
            compute::sum(s, &self.probabilities, n, &self.total).expect("sum");
        }
    }
}

/// A CPU operator kernel's parameter block: dtype code 0 (f32), then each
/// size as a little-endian u64 (the layout `dispatch::cpu` reads).
fn cpu_params(sizes: &[usize]) -> Vec<u8> {
    let mut p = 0u32.to_le_bytes().to_vec();
    for &s in sizes {
        p.extend_from_slice(&(s as u64).to_le_bytes());
    }
    p
}

fn main() {
    let rounds: usize = std::env::var("KEEL_MLP_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    for d in common::every_device() {
        let s = keel::current_stream(d).expect("stream");
        let model = Model::new(d);
        let direct = Direct::new(d);
        // Both ways compute the same total (64: each softmax row sums to 1).
        let via_dispatch = model.dispatched().to_vec::<f32>().expect("read")[0];
        direct.pass(&model, &s);
        let via_launch = direct.total.read_as::<f32>(&s).expect("read")[0];
        assert!(
            (via_dispatch - via_launch).abs() <= 1e-3 * via_launch.abs()
                && (via_launch - BATCH as f32).abs() < 0.05,
            "{d}: dispatched {via_dispatch}, direct {via_launch}, expected {BATCH}"
        );
        let run_dispatched = || {
            let t = Instant::now();
            for _ in 0..PASSES {
                drop(model.dispatched());
            }
            s.synchronize().expect("sync");
            t.elapsed()
        };
        let run_direct = || {
            let t = Instant::now();
            for _ in 0..PASSES {
                direct.pass(&model, &s);
            }
            s.synchronize().expect("sync");
            t.elapsed()
        };
        // One warm-up of each: kernels compiled, the allocator's cache
        // filled.
        run_dispatched();
        run_direct();
        let p = common::Paired::measure(rounds, &run_dispatched, &run_direct);
        let per_pass = |t: Duration| t.as_secs_f64() * 1e3 / PASSES as f64;
        println!(
            "mlp_forward/{d}: dispatched / direct = {:.3} (median of {rounds} paired rounds; min {:.3}, max {:.3}); per pass {:.3} ms dispatched, {:.3} ms direct (fastest rounds)",
            p.median(),
            p.ratios[0],
            p.ratios[p.ratios.len() - 1],
            per_pass(p.min_a),
            per_pass(p.min_b)
        );
    }
}
