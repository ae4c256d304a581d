//! The PTX generated from Keel's WGSL against the hand-written PTX it
//! replaced (`benches/hand_ptx/`), on every CUDA device, as paired ratios
//! (generated / hand-written, the order alternating, host time around
//! launch and synchronize): the 4x4 tiled matmul in plain f32 at 1024^3
//! and 4096^3, and `softmax_rows` at 4096 x 4096. Issue 33's goal is at
//! most 1.10 for each. Both kernels' outputs are compared first: the
//! matmul's bit for bit (each output is one multiply-add after another
//! over k in order, fused by both), softmax within a few ulp (both take
//! `ex2.approx`, and the generated one sums four columns a step).
//!
//! Without a CUDA device it prints why and measures nothing.
//!
//! Run: `cargo bench --features cuda --bench ptx_baseline`. Results in
//! docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use keel::compute::{MatmulAlgorithm, MatmulOptions, MatmulPrecision, matmul, softmax_rows};
use keel::{Buffer, DeviceType, Kernel, Stream};

mod common;

const HAND_MATMUL: Kernel = Kernel {
    name: "matmul_tiled_4x4",
    workgroup_size: [16, 16, 1],
    bindings: 3,
    wgsl: None,
    ptx: Some(include_str!("hand_ptx/matmul_tiled_4x4.ptx")),
    cpu: None,
    strict_float: false,
};

const HAND_SOFTMAX: Kernel = Kernel {
    name: "softmax_rows",
    workgroup_size: [256, 1, 1],
    bindings: 2,
    wgsl: None,
    ptx: Some(include_str!("hand_ptx/softmax_rows.ptx")),
    cpu: None,
    strict_float: false,
};

const ROUNDS: usize = 15;

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The time of `run` and a synchronize.
fn timed(stream: &Stream, run: &dyn Fn()) -> Duration {
    let t = Instant::now();
    run();
    stream.synchronize().expect("synchronize");
    t.elapsed()
}

/// Runs each kernel once and reads what it wrote.
fn outputs(
    stream: &Stream,
    generated: &dyn Fn(),
    hand: &dyn Fn(),
    [g, h]: [&Buffer; 2],
) -> (Vec<f32>, Vec<f32>) {
    generated();
    hand();
    (
        g.read_as::<f32>(stream).expect("read"),
        h.read_as::<f32>(stream).expect("read"),
    )
}

/// Prints the paired ratio generated / hand-written of `what`.
fn paired(stream: &Stream, label: &str, what: &str, generated: &dyn Fn(), hand: &dyn Fn()) {
    common::print_paired(
        label,
        &format!("{what}_generated/hand_written"),
        ROUNDS,
        &|| timed(stream, generated),
        &|| timed(stream, hand),
    );
}

fn values(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i.wrapping_mul(7919) + salt) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn matmuls(stream: &Stream, label: &str) {
    for n in [1024usize, 4096] {
        let ab = Buffer::from_slice(stream, &values(n * n, 0)).expect("a");
        let bb = Buffer::from_slice(stream, &values(n * n, 17)).expect("b");
        let generated_c = Buffer::new(stream.device(), n * n * 4).expect("c");
        let hand_c = Buffer::new(stream.device(), n * n * 4).expect("c");
        let opts = MatmulOptions {
            algorithm: MatmulAlgorithm::Tiled4x4,
            precision: MatmulPrecision::IEEE,
        };
        let generated = || {
            matmul(stream, &ab, &bb, &generated_c, n, n, n, &opts).expect("generated matmul");
        };
        let grid = [n.div_ceil(64) as u32, n.div_ceil(64) as u32, 1];
        let params = words(&[n as u32, n as u32, n as u32, 0, 0]);
        let hand = || {
            stream
                .launch(&HAND_MATMUL, grid, &[&ab, &bb, &hand_c], &params)
                .expect("hand-written matmul");
        };
        let (g, h) = outputs(stream, &generated, &hand, [&generated_c, &hand_c]);
        let differ = g
            .iter()
            .zip(&h)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        println!(
            "{label}: matmul {n}^3: {differ} of {} outputs differ from the hand-written kernel's",
            g.len()
        );
        paired(stream, label, &format!("matmul_{n}"), &generated, &hand);
    }
}

fn softmaxes(stream: &Stream, label: &str) {
    let (rows, cols) = (4096usize, 4096usize);
    let x = Buffer::from_slice(stream, &values(rows * cols, 3)).expect("x");
    let generated_out = Buffer::new(stream.device(), rows * cols * 4).expect("out");
    let hand_out = Buffer::new(stream.device(), rows * cols * 4).expect("out");
    let generated = || {
        softmax_rows(stream, &x, &generated_out, rows, cols).expect("generated softmax");
    };
    let params = words(&[rows as u32, cols as u32]);
    let hand = || {
        stream
            .launch(
                &HAND_SOFTMAX,
                [rows as u32, 1, 1],
                &[&x, &hand_out],
                &params,
            )
            .expect("hand-written softmax");
    };
    let (g, h) = outputs(stream, &generated, &hand, [&generated_out, &hand_out]);
    let worst = g
        .iter()
        .zip(&h)
        .map(|(a, b)| ((a - b) / b.abs().max(f32::MIN_POSITIVE)).abs())
        .fold(0.0f32, f32::max);
    println!(
        "{label}: softmax {rows} x {cols}: largest relative difference from the hand-written kernel's {worst:.2e}"
    );
    assert!(worst < 1e-5, "the two softmax kernels disagree: {worst:e}");
    paired(
        stream,
        label,
        &format!("softmax_{rows}x{cols}"),
        &generated,
        &hand,
    );
}

fn main() {
    let devices = common::devices_of(&[DeviceType::Cuda]);
    if devices.is_empty() {
        println!("ptx_baseline: skipped, no CUDA device here");
        return;
    }
    for d in devices {
        let stream = keel::default_stream(d).expect("stream");
        let label = format!("ptx_baseline {d}");
        matmuls(&stream, &label);
        softmaxes(&stream, &label);
    }
}
