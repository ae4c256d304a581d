//! Dispatch overhead: a tiny operator (`add` of two 256-element f32
//! tensors) through the dispatcher, against launching the same kernel
//! directly with `Stream::launch` on a new output buffer (the same work:
//! one allocation, one launch). Batches of 100, then a stream
//! synchronize, both ways, both in every iteration. On the CPU, CUDA,
//! Vulkan, and each wgpu adapter. Goal: dispatched / direct <= 1.15 on
//! CUDA, Vulkan and wgpu; the CPU row has none (docs/BENCHMARKS.md,
//! 2026-11-28). Each device also prints the ratio from paired batches
//! (`paired_ratio`), and the paired ratio against the same launch into a
//! new `Tensor` (`Tensor::empty_on`): what the
//! dispatcher's own work (lookup, checks, current stream, the kernel
//! call) costs beyond making its output.
//!
//! Then `cpu_threads`: two threads each running the same `add`s on their
//! own small tensors of `cpu:0`'s inline default stream, against one
//! thread running its share alone (both spawn their threads): the ratio
//! is 1.0 where the threads' kernels run at the same time (on at least
//! two free cores) and 2.0 or more where they wait for each other.
//!
//! Run: `cargo bench --bench dispatch -- --warm-up-time 1 --measurement-time 3`.
//! Results in docs/BENCHMARKS.md.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use keel::dispatch::{ADD_F32, CPU_ADD, elementwise_grid};
use keel::{Buffer, DType, Device, DeviceType, Tensor};

mod common;

const N: usize = 256;
const BATCH: usize = 100;

fn devices() -> Vec<Device> {
    let mut out = Vec::new();
    if common::wanted(DeviceType::Cpu) {
        out.push(Device::new(DeviceType::Cpu, 0).expect("cpu"));
    }
    out.extend(common::devices_of(&[
        DeviceType::Cuda,
        DeviceType::Vulkan,
        DeviceType::Wgpu,
    ]));
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_add_256");
    for d in devices() {
        let stream = keel::current_stream(d).expect("stream");
        let a = Tensor::full(&[N], 1.0, DType::F32, d).expect("a");
        let b = Tensor::full(&[N], 2.0, DType::F32, d).expect("b");
        let dispatched = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                black_box(a.add(&b).expect("add"));
            }
            stream.synchronize().expect("sync");
            t.elapsed()
        };
        let (kernel, grid, params) = if d.is_cpu() {
            let p = [
                0u32.to_le_bytes(),
                (N as u32).to_le_bytes(),
                0u32.to_le_bytes(),
            ]
            .concat();
            (CPU_ADD, [1, 1, 1], p)
        } else {
            (
                ADD_F32,
                elementwise_grid(N as u64),
                (N as u32).to_le_bytes().to_vec(),
            )
        };
        let direct = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                let out = Buffer::empty(d, 4 * N).expect("out");
                stream
                    .launch(&kernel, grid, &[a.buffer(), b.buffer(), &out], &params)
                    .expect("launch");
                black_box(out);
            }
            stream.synchronize().expect("sync");
            t.elapsed()
        };
        // The same launch, into a new tensor: the dispatcher's own work
        // is what a dispatched call costs over this.
        let direct_tensor = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                let out = Tensor::empty_on(&[N], DType::F32, &stream).expect("out");
                stream
                    .launch(
                        &kernel,
                        grid,
                        &[a.buffer(), b.buffer(), out.buffer()],
                        &params,
                    )
                    .expect("launch");
                black_box(out);
            }
            stream.synchronize().expect("sync");
            t.elapsed()
        };
        // Both ways in every iteration (`common::interleaved`).
        common::interleaved(
            &mut g,
            (&format!("{d} dispatched x{BATCH}"), &dispatched),
            (&format!("{d} direct launch x{BATCH}"), &direct),
        );
        paired_ratio(
            &format!("dispatch_add_256/{d}"),
            "dispatched / direct",
            ROUNDS,
            dispatched,
            direct,
        );
        paired_ratio(
            &format!("dispatch_add_256/{d}"),
            "dispatched / direct into a tensor",
            ROUNDS,
            dispatched,
            direct_tensor,
        );
    }
    g.finish();
}

/// `n` chained `add`s of `elems`-element tensors on the calling thread
/// (each result the next input; one output alive at a time).
fn adds(elems: usize, n: usize) {
    let d = Device::cpu();
    let a = Tensor::full(&[elems], 1.0, DType::F32, d).expect("a");
    let mut acc = a.add(&a).expect("add");
    for _ in 0..n {
        acc = acc.add(&a).expect("add");
    }
    black_box(acc);
}

/// `threads` threads, each running `adds(elems, n)`; the wall time.
fn on_threads(threads: usize, elems: usize, n: usize) -> std::time::Duration {
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(move || adds(elems, n));
        }
    });
    t.elapsed()
}

fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("cpu_threads");
    // 1 KiB, 64 KiB and 1 MiB tensors (all below the 1 MiB of the
    // allocator's small pool), about 4 M additions per thread.
    for elems in [256usize, 16 << 10, 256 << 10] {
        let n = ((4 << 20) / elems).max(100);
        let two = || on_threads(2, elems, n);
        let one = || on_threads(1, elems, n);
        common::interleaved(
            &mut g,
            (&format!("{elems} f32 x{n} adds, two threads"), &two),
            (&format!("{elems} f32 x{n} adds, one thread"), &one),
        );
        paired_ratio(
            &format!("cpu_threads/{elems}"),
            "two threads / one thread",
            40,
            two,
            one,
        );
    }
    g.finish();
}

/// Rounds of the paired measurement.
const ROUNDS: usize = 400;

/// The machine is shared: a batch is sometimes preempted, and criterion's
/// two estimates come from different seconds. So, next to them, the ratio
/// from pairs: `rounds` rounds of one batch each way back to back, the
/// median of the per-round ratios (robust to a preempted batch) and the
/// ratio of the per-way minimums.
fn paired_ratio(
    label: &str,
    what: &str,
    rounds: usize,
    a: impl Fn() -> std::time::Duration,
    b: impl Fn() -> std::time::Duration,
) {
    let p = common::Paired::measure(rounds, &a, &b);
    println!(
        "{label}: paired over {rounds} rounds (order alternating): {what} = {:.3} (median), {:.3} (minimums: {:.1} us / {:.1} us per batch)",
        p.median(),
        p.of_minimums(),
        p.min_a.as_secs_f64() * 1e6,
        p.min_b.as_secs_f64() * 1e6
    );
}

criterion_group!(benches, bench, threads);
criterion_main!(benches);
