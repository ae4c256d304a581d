//! Keel's elementwise add (`shaders/ops/add.wgsl`, `add_f32`, workgroups
//! of 256) over 2^22 `f32`: translated to Rust ahead of time
//! (`tests/generated/mod.rs`), against a hand-written Rust loop and the
//! interpreter, on one thread and on every thread. Keel's goal is that its
//! own kernels run within 1.5x of the loop.

use std::hint::black_box;
use std::time::{Duration, Instant};

use keel_wgsl::host::{HostOptions, run};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use zerocopy::{FromBytes, IntoBytes};

#[allow(
    unused,
    unused_labels,
    unused_mut,
    unused_assignments,
    unreachable_code,
    clippy::all,
    clippy::pedantic
)]
#[path = "../tests/generated/mod.rs"]
mod generated;

const N: usize = 1 << 22;
const RUNS: usize = 15;

/// The median of `RUNS` timings of `f`, after one warm-up.
fn median(mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

/// The hand-written loop, on `threads` threads (contiguous chunks).
fn rust_add(a: &[f32], b: &[f32], out: &mut [f32], threads: usize) {
    if threads <= 1 {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y;
        }
        return;
    }
    let chunk = a.len().div_ceil(threads);
    std::thread::scope(|s| {
        for ((o, a), b) in out
            .chunks_mut(chunk)
            .zip(a.chunks(chunk))
            .zip(b.chunks(chunk))
        {
            s.spawn(move || {
                for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                    *o = x + y;
                }
            });
        }
    });
}

/// Asserts that `out` holds `a + b`.
fn check(a: &[f32], b: &[f32], out: &[f32], what: &str) {
    let ok = a.iter().zip(b).zip(out).all(|((x, y), o)| x + y == *o);
    assert!(ok, "{what} computed the sums");
}

/// The loop with what the generated code must do to share the output
/// between threads without `unsafe`: relaxed atomic stores, one thread.
fn rust_add_atomic(a: &[f32], b: &[f32], out: &mut [f32]) {
    let out = <[AtomicU32]>::mut_from_bytes(out.as_mut_bytes()).expect("f32s are words");
    for ((o, &x), &y) in out.iter().zip(a).zip(b) {
        o.store((x + y).to_bits(), Relaxed);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let src = include_str!("../../../shaders/ops/add.wgsl");
    let program = keel_wgsl::compile(src, "add_f32").expect("add.wgsl compiles");
    let mut a: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
    let mut b: Vec<f32> = (0..N).map(|i| (N - i) as f32 * 0.25).collect();
    let mut out = vec![0f32; N];
    let params = (N as u32).to_le_bytes();
    let grid = [(N / 256) as u32, 1, 1];
    let all = std::thread::available_parallelism().map_or(1, usize::from);
    println!("elementwise add_f32, {N} f32, workgroups of 256 ({RUNS} runs, median)");
    for threads in [1, all] {
        let options = HostOptions { threads };
        out.fill(0.0);
        let generated = median(|| {
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            generated::ADD_F32
                .run_with(grid, &mut bufs, &params, &options)
                .expect("the generated add runs");
            black_box(&out);
        });
        check(&a, &b, &out, "the generated kernel");
        out.fill(0.0);
        let host = median(|| {
            let mut bufs: Vec<&mut [u8]> =
                vec![a.as_mut_bytes(), b.as_mut_bytes(), out.as_mut_bytes()];
            run(&program, grid, &mut bufs, &params, &options).expect("the interpreter runs");
            black_box(&out);
        });
        check(&a, &b, &out, "the interpreter");
        out.fill(0.0);
        let rust = median(|| {
            rust_add(&a, &b, &mut out, threads);
            black_box(&out);
        });
        check(&a, &b, &out, "the loop");
        if threads == 1 {
            out.fill(0.0);
            let atomic = median(|| {
                rust_add_atomic(&a, &b, &mut out);
                black_box(&out);
            });
            check(&a, &b, &out, "the atomic loop");
            println!(
                "threads 1: Rust loop with relaxed atomic stores {:8.3} ms ({:.2}x)",
                ms(atomic),
                atomic.as_secs_f64() / rust.as_secs_f64()
            );
        }
        println!(
            "threads {threads}: Rust loop {:8.3} ms, generated {:8.3} ms ({:.2}x), interpreter {:8.3} ms ({:.2}x)",
            ms(rust),
            ms(generated),
            generated.as_secs_f64() / rust.as_secs_f64(),
            ms(host),
            host.as_secs_f64() / rust.as_secs_f64(),
        );
    }
}
